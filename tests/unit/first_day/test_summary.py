"""make demo's progress lines (tests/first_day/summary.py --progress): one line per step the scenario runs,
none for the steps it skips (those make demo leaves to make test), and a long step shown while it runs."""

import importlib.util
import os
import pathlib
import select
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tests" / "first_day" / "summary.py"
SPEC = importlib.util.spec_from_file_location("first_day_summary", SCRIPT)
summary = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(summary)

# Molecule's output as it looks once the colours are gone: a frame before each line.
VERIFY = [
    "INFO     first_day ➜ verify: Executing",
    "  │ TASK [Pull the plug (the UPS goes on battery)] ****",
    "  │ changed: [firstday-home]",
    "  │ TASK [Stop the Hub's stand-in] ****",
    "  │ skipping: [firstday-home]",
    "  │ TASK [Restart the engine] ****",
    "  │ skipping: [firstday-home]",
    "  │ TASK [Run 3, the README's site command on the installed collection] ****",
    "  │ skipping: [firstday-home]",
    "  │ TASK [Show it] ****",
    "  │ ok: [firstday-home] => {}",
    "INFO     first_day ➜ verify: Executed: Successful",
]


def steps(printed: str) -> list[str]:
    return [line.split("]", 1)[1].strip() for line in printed.splitlines()]


def test_skipped_steps_are_not_listed(capsys):
    summary.progress(VERIFY)
    assert steps(capsys.readouterr().out) == [
        "verify: executing", "Pull the plug (the UPS goes on battery)", "Show it", "verify: executed: successful"]


def test_a_step_without_a_result_yet_is_shown_when_the_output_pauses(capsys):
    summary.progress(VERIFY[:2] + [None])
    assert steps(capsys.readouterr().out) == ["verify: executing", "Pull the plug (the UPS goes on battery)"]


def test_a_long_step_shows_through_a_pipe_while_it_runs():
    """The real pipe of make demo: the step's line comes out before its result does."""
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--progress"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        # The skipped step and its result in one write, then a long step without its result.
        proc.stdin.write("\n".join(VERIFY[:1] + VERIFY[3:5] + ["  │ TASK [Run 2, the same command again] ****"]) + "\n")
        proc.stdin.flush()
        seen = ""
        deadline = time.monotonic() + 30
        while "Run 2" not in seen and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                seen += os.read(proc.stdout.fileno(), 4096).decode()
        assert "Run 2, the same command again" in seen, seen
        assert "Stop the Hub" not in seen
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
