"""The scenario runner's summary says why a scenario failed (scripts/run-scenarios.py)."""

import importlib.util
import pathlib

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
