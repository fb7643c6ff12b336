"""The scenario runner's summary says why a scenario failed (scripts/run-scenarios.py)."""

import importlib.util
import json
import os
import pathlib
import re
from pathlib import Path
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
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


def test_a_scenario_needs_the_inputs_its_files_and_their_includes_name(tmp_path, monkeypatch):
    """The gate reads what a scenario needs from its files, following a file it
    includes from another scenario; the other scenario's other files do not count."""
    molecule = tmp_path / "molecule"
    (molecule / "plain").mkdir(parents=True)
    (molecule / "plain" / "converge.yml").write_text("- ansible.builtin.include_tasks: ../shared/case.yml\n")
    (molecule / "shared").mkdir()
    (molecule / "shared" / "case.yml").write_text("dest: /srv/wheels  # LLM_SERVER_VLLM_WHEELS\n")
    (molecule / "shared" / "molecule.yml").write_text("volumes: [build/llamacpp]\n")
    (molecule / "engine").mkdir()
    (molecule / "engine" / "molecule.yml").write_text("volumes: [\"${LLM_SERVER_VLLM_VENV}\", build/models/tiny-chat.gguf]\n")
    # A host in a group whose variables the shared configuration holds reads them; 'all' does not count.
    (molecule / "grouped").mkdir()
    (molecule / "grouped" / "molecule.yml").write_text("platforms: [{name: a, groups: [servers]}]\n")
    (tmp_path / ".config" / "molecule").mkdir(parents=True)
    (tmp_path / ".config" / "molecule" / "config.yml").write_text(
        "provisioner:\n  inventory:\n    group_vars:\n      all: {wheelhouse: build/wheels}\n"
        "      servers: {llamacpp_archive: x}\n      others: {model: build/models/qwen}\n")
    monkeypatch.setattr(run_scenarios, "ROOT", tmp_path)
    assert run_scenarios.needs("plain") == {"wheels"}
    assert run_scenarios.needs("shared") == {"wheels", "llamacpp"}
    assert run_scenarios.needs("engine") == {"vllm", "llamacpp"}
    assert run_scenarios.needs("grouped") == {"llamacpp"}


def test_the_scenarios_that_need_no_build_are_known_and_first_day_waits_for_vllm():
    """What the real scenarios need, so a change that makes one read a build shows here."""
    needs = {name: run_scenarios.needs(name) for name in run_scenarios.scenario_names()}
    assert {n for n, groups in needs.items() if not groups} == {
        "container_runtime", "cuda_toolkit", "default", "http_ban", "model_store", "nvidia_driver",
        "nvidia_driver_decisions", "preflight_failures", "proxy_acme", "vllm"}
    assert needs["first_day"] == {"wheels", "vllm"}
    assert needs["vllm_cpu"] >= {"vllm"}
    assert needs["remote"] == {"wheels", "llamacpp"}
    # moto's wheels (build/wheels-s3) come with the wheels group; its hosts are llama.cpp boxes.
    assert needs["backup"] == {"wheels", "llamacpp"}
    assert needs["llamacpp"] == needs["monitoring"] == {"llamacpp"}


def test_every_input_group_has_a_make_target_that_says_it_is_built():
    makefile = (ROOT / "Makefile").read_text()
    for group in run_scenarios.INPUTS:
        target = re.search(rf"(?m)^ready-{group}:.*\n((?:\t.*\n)+)", makefile)
        assert target and f"touch $(READY)/{group}" in target[1], group
        assert f"ready-{group}" in re.search(r"(?m)^TEST_INPUTS :=.*", makefile)[0]
    assert f"touch $(READY)/{run_scenarios.GATE_FAILED}" in makefile
    assert "--gate $(READY)" in makefile


def gated_runner(tmp_path, monkeypatch, wanted):
    """A Runner whose scenarios only note when they run, and wait for release."""
    monkeypatch.setattr(run_scenarios, "GATE_POLL_S", 0.05)
    monkeypatch.setattr(run_scenarios, "needs", lambda name: wanted[name])
    runner = run_scenarios.Runner(tmp_path, run_scenarios.time.monotonic(), None)
    runner.say = lambda text: None
    runner.events, runner.running, runner.most = [], set(), 0
    runner.release = run_scenarios.threading.Event()

    def fake(name):
        with runner.lock:
            runner.running.add(name)
            runner.most = max(runner.most, len(runner.running))
            runner.events.append(name)
        runner.release.wait(10)
        with runner.lock:
            runner.running.discard(name)
            runner.results[name] = {"rc": 0}
    runner.run_scenario = fake
    return runner


def until(condition, seconds=10.0):
    deadline = run_scenarios.time.monotonic() + seconds
    while not condition():
        assert run_scenarios.time.monotonic() < deadline, "condition not met in time"
        run_scenarios.time.sleep(0.01)


def test_a_scenario_starts_once_its_inputs_are_built_and_fewer_run_while_they_build(tmp_path, monkeypatch):
    gate_dir = tmp_path / "ready"
    gate_dir.mkdir()
    wanted = {"engine": {"llamacpp"}, "a": set(), "b": set(), "c": set()}
    runner = gated_runner(tmp_path, monkeypatch, wanted)
    thread = run_scenarios.threading.Thread(
        target=runner.schedule, args=(["engine", "a", "b", "c"], run_scenarios.Gate(gate_dir), 3, 2))
    thread.start()
    until(lambda: len(runner.running) == 2)
    # llama.cpp is still building: two at a time, the engine's scenario waits.
    assert runner.events == ["a", "b"]
    (gate_dir / "llamacpp").touch()
    until(lambda: "engine" in runner.events)
    runner.release.set()
    thread.join(10)
    assert not thread.is_alive()
    assert runner.events[:3] == ["a", "b", "engine"] and set(runner.events) == set(wanted)
    assert runner.not_started == []


def test_nothing_more_starts_once_an_input_failed(tmp_path, monkeypatch):
    gate_dir = tmp_path / "ready"
    gate_dir.mkdir()
    wanted = {"engine": {"vllm"}, "a": set()}
    runner = gated_runner(tmp_path, monkeypatch, wanted)
    thread = run_scenarios.threading.Thread(
        target=runner.schedule, args=(["engine", "a"], run_scenarios.Gate(gate_dir), 3, 2))
    thread.start()
    until(lambda: runner.events == ["a"])
    (gate_dir / run_scenarios.GATE_FAILED).touch()
    until(lambda: runner.not_started == ["engine"])
    runner.release.set()
    thread.join(10)
    assert not thread.is_alive() and runner.events == ["a"]


def test_without_a_gate_every_input_is_there(tmp_path, monkeypatch):
    wanted = {"engine": {"vllm", "llamacpp", "wheels"}, "a": set()}
    runner = gated_runner(tmp_path, monkeypatch, wanted)
    runner.release.set()
    runner.schedule(["engine", "a"], run_scenarios.Gate(None), 1, 1)
    assert runner.events == ["engine", "a"] and runner.most == 1


def test_every_scenario_has_a_place_in_the_fallback_order():
    names = set(run_scenarios.scenario_names())
    assert set(run_scenarios.FALLBACK_ORDER) == names
    assert run_scenarios.run_order(sorted(names), Path("/nonexistent"))[:2] == ["first_day", "remote"]


def test_the_last_times_order_the_run_only_when_every_scenario_has_one(tmp_path):
    """A report that knows only some scenarios (a partial run) must not start
    first_day, remote and vllm_cpu last."""
    names = run_scenarios.scenario_names()
    report = tmp_path / "molecule.json"
    report.write_text(json.dumps({"scenarios": {n: {"seconds": 100.0} for n in names if n != "first_day"}}))
    assert run_scenarios.run_order(names, report)[:2] == ["first_day", "remote"]
    # Every one known: longest first by those times.
    report.write_text(json.dumps({"scenarios": {n: {"seconds": float(i)} for i, n in enumerate(names)}}))
    assert run_scenarios.run_order(names, report) == list(reversed(names))


def test_cpu_idle_is_measured_over_the_window(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    idle = run_scenarios.CpuIdle(stat)
    # user nice system idle iowait ...: 100 ticks a step, 60 of them idle, then 10.
    for step, idle_ticks in enumerate([0, 60, 120, 180, 190, 200]):
        stat.write_text(f"cpu  {step * 100 - idle_ticks} 0 0 {idle_ticks} 0 0 0 0 0 0\ncpu0 ...\n")
        idle.sample(step * 10.0)
        if step == 2:
            assert idle.fraction(20.0) is None  # the window is not covered yet
    # The last 30 s: 60 + 10 + 10 idle of 300.
    assert idle.fraction(50.0) == pytest.approx(80 / 300)
    assert len(idle.samples) <= 5


class FixedIdle:
    def __init__(self, share):
        self.share = share
        self.asked = 0

    def sample(self, now):
        pass

    def fraction(self, now):
        self.asked += 1
        return self.share


def test_one_more_starts_while_the_cpus_idle_and_none_while_they_are_busy(tmp_path, monkeypatch):
    monkeypatch.setattr(run_scenarios, "START_GAP_S", 0.0)
    wanted = {"a": set(), "b": set(), "c": set()}
    busy = gated_runner(tmp_path, monkeypatch, wanted)
    cpus = FixedIdle(0.1)
    thread = run_scenarios.threading.Thread(
        target=busy.schedule, args=(["a", "b", "c"], run_scenarios.Gate(None), 1, 1, 3, cpus))
    thread.start()
    until(lambda: cpus.asked >= 5)  # five rounds of the scheduler, each asked and each said no
    assert busy.events == ["a"]
    busy.release.set()
    thread.join(10)
    assert busy.most == 1

    idle = gated_runner(tmp_path, monkeypatch, wanted)
    thread = run_scenarios.threading.Thread(
        target=idle.schedule, args=(["a", "b", "c"], run_scenarios.Gate(None), 1, 1, 2, FixedIdle(0.6)))
    thread.start()
    until(lambda: len(idle.running) == 2)
    assert "one more: the CPUs 60% idle" in idle.extra["b"]
    idle.release.set()
    thread.join(10)
    assert idle.most == 2


def test_the_help_prints():
    # Help strings are %-formatted by argparse: a bare percent sign broke it.
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "run-scenarios.py"), "--help"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert f"{run_scenarios.IDLE_MIN * 100:.0f}% idle" in " ".join(done.stdout.split())
