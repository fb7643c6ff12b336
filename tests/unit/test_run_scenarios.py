"""The scenario runner's summary says why a scenario failed (scripts/run-scenarios.py)."""

import importlib.util
import json
import os
import pathlib
import re
from pathlib import Path
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("run_scenarios", ROOT / "scripts" / "run-scenarios.py")
run_scenarios = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(run_scenarios)


def read(log: str) -> list[list[str]]:
    causes = run_scenarios.Causes()
    for line in log.splitlines(keepends=True):
        causes.feed(line)
    return causes.groups


def test_a_wrapped_message_is_kept_whole_and_the_last_two_failing_tasks_count():
    groups = read(
        "TASK [Expected to fail] ***\n"
        "fatal: [h]: FAILED! =>\n"
        "    msg: first\n"
        "TASK [Run 2 completes on both machines] ***\n"
        "fatal: [localhost]: FAILED! =>\n"
        "    msg: 'run 2: rc 2 after 981.9 s; failed: TASK [homelab.llm_server.serving : Wait\n"
        "        until a completion is answered by vllm-qwen3-tiny-cpu0] Task failed: timed out'\n"
        "\n"
        "PLAY RECAP ***\n"
        "localhost : ok=3 changed=1 failed=1\n"
    )
    assert [g[0] for g in groups] == ["TASK [Expected to fail]", "TASK [Run 2 completes on both machines]"]
    assert groups[-1][-1] == ("msg: 'run 2: rc 2 after 981.9 s; failed: TASK [homelab.llm_server.serving : Wait "
                              "until a completion is answered by vllm-qwen3-tiny-cpu0] Task failed: timed out'")


def test_lines_after_a_message_at_its_own_indent_are_not_part_of_it():
    groups = read(
        "  │ TASK [Check] ***\n"
        "  │ fatal: [h]: FAILED! =>\n"
        "  │     msg: short\n"
        "  │ \n"
        "  │ PLAY RECAP ***\n"
    )
    assert groups == [["TASK [Check]", "fatal: [h]: FAILED! =>", "msg: short"]]


def test_a_long_message_is_cut():
    groups = read("TASK [T] ***\n    msg: " + "x" * 2000 + "\n        " + "y" * 100 + "\n")
    assert len(groups[0][1]) == run_scenarios.CAUSE_CHARS


def test_container_cpu_is_counted_per_scenario_across_a_restart(tmp_path, monkeypatch):
    """Each scenario's containers' CPU from their cgroups (v1's cpuacct or v2's
    cpu.stat); a counter that went down is a restarted container."""
    v1 = tmp_path / "cpuacct" / "libpod_parent"
    v2 = tmp_path / "machine.slice"
    monkeypatch.setattr(run_scenarios, "CGROUP_PARENTS", (v1, v2))
    cpu = run_scenarios.ContainerCpu({"web": "proxy", "db": "monitoring"})
    monkeypatch.setattr(cpu, "_refresh_names", lambda: cpu._names.update(
        {"aaa": "web", "bbb": "db", "ccc": "someone-else"}))

    def write(parent, name, text):
        (parent / name).mkdir(parents=True, exist_ok=True)
        (parent / name / ("cpuacct.usage" if parent == v1 else "cpu.stat")).write_text(text)

    write(v1, "libpod-aaa", str(2 * 10**9))
    write(v1, "libpod-conmon-aaa", str(50 * 10**9))
    write(v2, "libpod-bbb.scope", "usage_usec 1500000\nuser_usec 1000000\n")
    write(v2, "libpod-ccc.scope", "usage_usec 9000000\n")
    cpu._sample()
    write(v1, "libpod-aaa", str(5 * 10**9))
    cpu._sample()
    write(v1, "libpod-aaa", str(1 * 10**9))  # restarted: counts from zero again
    cpu._sample()
    assert cpu.used == {"proxy": 6.0, "monitoring": 1.5}


def test_a_container_podman_does_not_name_is_asked_about_once_a_minute(tmp_path, monkeypatch):
    """A cgroup of another podman's container (a second suite beside this
    one) must not make every sample start `podman ps`."""
    parent = tmp_path / "machine.slice"
    monkeypatch.setattr(run_scenarios, "CGROUP_PARENTS", (parent,))
    now = [1000.0]
    monkeypatch.setattr(run_scenarios.time, "monotonic", lambda: now[0])
    cpu = run_scenarios.ContainerCpu({"web": "proxy"})
    asked = []
    monkeypatch.setattr(cpu, "_refresh_names", lambda: asked.append(now[0]) or cpu._names.update(
        {"aaa": "web"} if now[0] >= 1090 else {}))
    for cid in ("aaa", "zzz"):
        (parent / f"libpod-{cid}.scope").mkdir(parents=True)
        (parent / f"libpod-{cid}.scope" / "cpu.stat").write_text("usage_usec 2000000\n")
    for _sample in range(10):  # 30 s of samples
        cpu._sample()
        now[0] += run_scenarios.CPU_SAMPLE_S
    assert asked == [1000.0]
    now[0] = 1090.0  # a minute on: asked again, and the scenario's container is named now
    cpu._sample()
    cpu._sample()
    assert asked == [1000.0, 1090.0]
    assert cpu.used == {"proxy": 2.0}


def test_the_table_sums_cpu_and_leaves_it_blank_for_older_reports():
    results = {
        "a": {"seconds": 120, "rc": 0, "phases": {"converge": 60}, "controller_cpu": 50.0, "container_cpu": 30.0},
        "b": {"seconds": 60, "rc": 0, "phases": {"converge": 30}},
    }
    text = run_scenarios.table(results)
    assert "| a | 2:00 | 1:00 | 50 | 30 | 80 |" in text
    assert "| b | 1:00 | 0:30 |  |  |  |" in text
    assert text.endswith("CPU: 80 s in all (1.3 CPU minutes) for 1 scenarios")


def test_tree_cpu_counts_the_children_a_process_has_reaped():
    """A phase's controller CPU is the process tree's: a child that burned CPU
    and exited still counts, through its parent's reaped-children time."""
    before = run_scenarios.tree_cpu(os.getpid())
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5:\n    pass\n"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert run_scenarios.tree_cpu(os.getpid()) - before >= 0.45


def test_the_early_scenarios_read_nothing_the_late_stage_builds():
    """make test starts the EARLY scenarios before llama.cpp, vLLM's wheels and
    venv and the tiny models exist: none of their files (nor a file they
    include from another scenario) may name one of those."""
    molecule = run_scenarios.ROOT / "molecule"
    assert set(run_scenarios.EARLY) < set(run_scenarios.scenario_names())
    found = []
    for name in run_scenarios.EARLY:
        todo = [p for p in sorted((molecule / name).rglob("*")) if p.is_file()]
        seen = set()
        while todo:
            path = todo.pop()
            if path in seen or not path.is_file():
                continue
            seen.add(path)
            text = path.read_text(errors="replace")
            found += [f"{name}: {path.relative_to(molecule)} names {late}"
                      for late in run_scenarios.LATE_INPUTS if late in text]
            # A file it includes from another scenario (../bad_input/bad_case.yml).
            todo += [molecule / other for other in re.findall(r"\.\./([a-z_]+/[\w/.-]+\.ya?ml)", text)]
    assert not found, "\n".join(found)


def test_every_scenario_has_a_stage_and_a_place_in_the_fallback_order():
    names = set(run_scenarios.scenario_names())
    assert set(run_scenarios.FALLBACK_ORDER) == names
    early = run_scenarios.run_order(list(run_scenarios.EARLY), Path("/nonexistent"))
    late = run_scenarios.run_order(sorted(names - set(run_scenarios.EARLY)), Path("/nonexistent"))
    assert early[0] == "nvidia_driver" and late[:2] == ["first_day", "remote"]


def test_the_late_stage_of_a_fresh_clone_takes_the_fallback_order(tmp_path):
    """The early stage wrote its own times; the late stage has none of its own
    and must not start first_day, remote and vllm_cpu last."""
    report = tmp_path / "molecule.json"
    report.write_text(json.dumps({"scenarios": {n: {"seconds": 100.0} for n in run_scenarios.EARLY}}))
    late = sorted(set(run_scenarios.scenario_names()) - set(run_scenarios.EARLY))
    assert run_scenarios.run_order(late, report)[:2] == ["first_day", "remote"]
    # Every one known: longest first by those times.
    report.write_text(json.dumps({"scenarios": {n: {"seconds": float(i)} for i, n in enumerate(late)}}))
    assert run_scenarios.run_order(late, report) == list(reversed(late))
