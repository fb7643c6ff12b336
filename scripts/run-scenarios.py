"""Run Molecule scenarios side by side and time every phase.

Each scenario runs `molecule test -s NAME` in its own process; its output goes
to build/logs/molecule/NAME.log and only a line per finished scenario reaches
the terminal (with the tail of the log when it failed). Phase times come from
Molecule's own "➜ phase: Executing" / "Executed" lines, stamped as they arrive.
The times land in build/test-times/molecule.json, which `make bench` prints
and which orders the next run longest first so the workers finish together.

Wall time depends on what runs beside a scenario; CPU time much less, so
each scenario's CPU seconds are kept too: the controller's (Molecule,
Ansible and the harness, from the kernel's accounting of the process tree
when it ends) and its containers' (their cgroups, read every few seconds
while they run). Two CPUs give 120 CPU seconds a minute at most: the sum is
what bounds the suite's wall.

Scenario containers are named after their platforms (tests/molecule/
create.yml), so platform names must be unique across scenarios: checked here
before anything starts.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("create", "prepare", "check", "converge", "idempotence", "side_effect", "verify", "destroy")
# Phases that run only the harness (containers, simulated hardware); a
# scenario that fails in one of them is tried once more.
HARNESS_PHASES = ("destroy", "create", "prepare")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
PHASE_LINE = re.compile(r"(?P<scenario>\S+) ➜ (?P<phase>\w+): (?P<what>Executing|Executed)(?P<failed>: Failed)?")
# Lines that say why a play failed, for the digest at the end of the run
# (Molecule frames Ansible's output in "│ ").
CAUSE_LINE = re.compile(r"^[\s│]*(\[ERROR\]|fatal:|ERROR! |msg: \S|stderr: \S|stdout: \S)")
# How much of one cause (a message and its wrapped lines) the summary keeps.
CAUSE_CHARS = 600
TASK_LINE = re.compile(r"^[\s│]*TASK \[(?P<task>.*)\]")
# Longest first when there is no earlier timing to go by (a fresh clone's
# full run on 2 CPUs; only the order matters among the scenarios whose
# inputs are there), except vllm_cpu: it starts two of vLLM's CPU engines
# and restarts them, as first_day does, so it starts once remote's and the
# short ones have run beside first_day's converge rather than at the same
# moment (a fresh clone's run with both from the start cut a request at a
# load average of 16).
FALLBACK_ORDER = ("first_day", "remote", "monitoring", "gpu_watchdog", "backup", "llamacpp", "ups", "vllm_cpu",
                  "proxy", "bad_input", "nvidia_driver", "http_ban", "nvidia_driver_decisions", "model_store",
                  "container_runtime", "default", "proxy_acme", "preflight_failures", "cuda_toolkit", "vllm")

# What `make test` builds while the first scenarios already run (the image,
# the NVML double, the NVIDIA repository and promtool come before any), and
# the words that show a scenario reads it: in its own files or in a file it
# includes from another scenario. Each group is a Makefile target
# (ready-NAME) that touches GATE_DIR/NAME once built; with --gate a scenario
# starts when every group it names is there.
INPUTS = {
    "llamacpp": ("build/llamacpp", "llamacpp_archive", "build/models/tiny-chat", "tiny-chat.gguf"),
    "wheels": ("build/wheels", "LLM_SERVER_VLLM_WHEELS"),
    "vllm": ("LLM_SERVER_VLLM_VENV", "build/models/qwen", "tiny_qwen", "tiny_models"),
}
# Above --jobs, one more scenario (up to --max-jobs) starts when the CPUs
# were this idle over the window and none started within the gap: several
# scenarios spend minutes waiting (a container's reboot, apt, an engine's
# timers) and hold a place without using the CPUs. The gap lets a scenario
# that just started show its load before the next decision. Up to five at
# 30 % idle cost more than it gave (a fresh clone's run: 40:49 against
# 37:58, the scenarios' CPU 3373 s against 2900: contention; 2026-11-29).
IDLE_MIN = 0.35
IDLE_WINDOW_S = 30.0
START_GAP_S = 60.0
# Written by the Makefile when an input's build failed: nothing more starts.
GATE_FAILED = "failed"
# How long a scenario may wait for its inputs (a fresh machine builds them
# in about 15 minutes beside the scenarios); a poll, so a run is no slower.
GATE_DEADLINE_S = 3600.0
GATE_POLL_S = 2.0

# How often the containers' CPU counters are read.
CPU_SAMPLE_S = 3.0
# A cgroup podman did not name (another podman's container) is asked about again only after this.
NAME_RETRY_S = 60.0


def scenario_names() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml"))


def platforms_of(name: str) -> list[str]:
    config = yaml.safe_load((ROOT / "molecule" / name / "molecule.yml").read_text()) or {}
    return [platform["name"] for platform in config.get("platforms", [])]


def shared_group_vars(name: str) -> str:
    """The shared configuration's variables (.config/molecule/config.yml) of the
    inventory groups the scenario's hosts are in, as text; 'all' is left out, as
    every scenario has it."""
    def load(path: Path) -> dict:
        return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}

    base = load(ROOT / ".config" / "molecule" / "config.yml")
    group_vars = base.get("provisioner", {}).get("inventory", {}).get("group_vars", {})
    config = load(ROOT / "molecule" / name / "molecule.yml")
    groups = {group for platform in config.get("platforms", []) for group in platform.get("groups", [])}
    return yaml.safe_dump({group: group_vars[group] for group in sorted(groups) if group in group_vars})


def needs(name: str) -> set[str]:
    """The INPUTS groups a scenario reads: the words of each group found in its
    files, in the files they include from another scenario
    (../bad_input/bad_case.yml), followed, and in the shared variables of its
    hosts' groups (the llama.cpp engine of llamacpp_servers)."""
    molecule = ROOT / "molecule"
    todo = [p for p in sorted((molecule / name).rglob("*")) if p.is_file()]
    seen: set[Path] = set()
    shared = shared_group_vars(name)
    found: set[str] = {group for group, words in INPUTS.items() if any(word in shared for word in words)}
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        text = path.read_text(errors="replace")
        found |= {group for group, words in INPUTS.items() if any(word in text for word in words)}
        todo += [molecule / other for other in re.findall(r"\.\./([a-z_]+/[\w/.-]+\.ya?ml)", text)]
    return found


class CpuIdle:
    """How idle the machine's CPUs were over the last seconds (/proc/stat's
    idle time; waiting for the disk does not count as idle)."""

    def __init__(self, stat: Path = Path("/proc/stat")):
        self.stat = stat
        self.samples: list[tuple[float, int, int]] = []

    def sample(self, now: float) -> None:
        try:
            fields = [int(v) for v in self.stat.read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return
        self.samples.append((now, fields[3], sum(fields)))
        # Keep what the window needs and one older sample to measure from.
        while len(self.samples) > 2 and now - self.samples[1][0] >= IDLE_WINDOW_S:
            self.samples.pop(0)

    def fraction(self, now: float) -> float | None:
        """The idle share of the last IDLE_WINDOW_S, or None before the window is covered."""
        if len(self.samples) < 2 or now - self.samples[0][0] < IDLE_WINDOW_S:
            return None
        (_t0, idle0, total0), (_t1, idle1, total1) = self.samples[0], self.samples[-1]
        return (idle1 - idle0) / (total1 - total0) if total1 > total0 else None


class Gate:
    """The inputs' state as the Makefile leaves it in a directory: NAME once
    group NAME is built, GATE_FAILED once a build failed. Without a directory
    (make molecule built everything first) every group is there."""

    def __init__(self, directory: Path | None):
        self.directory = directory

    def ready(self) -> set[str]:
        if self.directory is None:
            return set(INPUTS)
        return {group for group in INPUTS if (self.directory / group).exists()}

    def failed(self) -> bool:
        return self.directory is not None and (self.directory / GATE_FAILED).exists()


def check_unique_platforms(names: list[str]) -> None:
    owner: dict[str, str] = {}
    clashes = []
    for name in names:
        for platform in platforms_of(name):
            other = owner.setdefault(platform, name)
            if other != name:
                clashes.append(f"platform {platform!r} is in both {other} and {name}")
    if clashes:
        sys.exit("Scenarios run side by side and name containers after platforms: rename one of each pair.\n  "
                 + "\n  ".join(clashes))


def run_order(names: list[str], report: Path) -> list[str]:
    known: dict[str, float] = {}
    if report.exists():
        try:
            known = {k: v["seconds"] for k, v in json.loads(report.read_text())["scenarios"].items()}
        except (ValueError, KeyError, TypeError):
            known = {}
    # Only when every scenario has a time: after a partial run the report
    # knows only some, and the run would start the longest unknown ones last.
    if known and all(n in known for n in names):
        return sorted(names, key=lambda n: -known[n])
    return sorted(names, key=lambda n: (FALLBACK_ORDER.index(n) if n in FALLBACK_ORDER else len(FALLBACK_ORDER), n))


# Where podman puts its containers' cgroups (cgroup v2 or v1's cpuacct;
# systemd's or cgroupfs's manager), each a libpod-ID[.scope] directory.
CGROUP_PARENTS = tuple(Path("/sys/fs/cgroup") / sub / parent
                       for sub in ("", "cpuacct") for parent in ("machine.slice", "libpod_parent"))


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and its descendants so far: each live one's
    own time plus that of the children it has reaped (/proc/PID/stat)."""
    children: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The command name (field 2) may hold spaces: split after its ")".
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        times[pid] = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / CLOCK_TICKS


class ContainerCpu:
    """CPU seconds used by each scenario's containers, from their cgroups.

    A thread reads every container's CPU counter every CPU_SAMPLE_S (files
    only; podman is asked for names once per new container, and again for
    one it did not name only after NAME_RETRY_S: a container of another
    podman's, such as a second suite beside this one); a container counts
    for the scenario whose platform it is (names are unique across
    scenarios). A counter that goes down is a container that restarted (a
    reboot in a verify): its new count adds on. The last seconds before a
    container is removed are not seen.
    """

    def __init__(self, owners: dict[str, str]):
        self.owners = owners  # platform name -> scenario
        self.used: dict[str, float] = {}  # scenario -> CPU seconds
        self._last: dict[str, float] = {}  # container ID -> last reading
        self._names: dict[str, str] = {}  # container ID -> name
        self._unnamed: dict[str, float] = {}  # container ID -> when podman last did not name it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @staticmethod
    def _read(group: Path) -> float | None:
        try:
            if (group / "cpuacct.usage").exists():
                return int((group / "cpuacct.usage").read_text()) / 1e9
            for line in (group / "cpu.stat").read_text().splitlines():
                key, _sep, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            return None
        return None

    def _refresh_names(self) -> None:
        try:
            listing = subprocess.run(["podman", "ps", "--all", "--no-trunc", "--format", "{{.ID}} {{.Names}}"],
                                     capture_output=True, text=True, timeout=60, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return
        for line in listing.splitlines():
            cid, _sep, name = line.partition(" ")
            self._names[cid] = name

    def _sample(self) -> None:
        groups = {}
        for parent in CGROUP_PARENTS:
            for group in parent.glob("libpod-*"):
                cid = group.name.removeprefix("libpod-").removesuffix(".scope")
                if not cid.startswith("conmon-"):
                    groups[cid] = group
        now = time.monotonic()
        unknown = [cid for cid in groups if cid not in self._names]
        if any(now - self._unnamed.get(cid, -NAME_RETRY_S) >= NAME_RETRY_S for cid in unknown):
            self._refresh_names()
            for cid in unknown:
                if cid not in self._names:
                    self._unnamed[cid] = now
        for cid, group in groups.items():
            scenario = self.owners.get(self._names.get(cid, ""))
            value = self._read(group) if scenario else None
            if value is None:
                continue
            last = self._last.get(cid, 0.0)
            self.used[scenario] = self.used.get(scenario, 0.0) + (value - last if value >= last else value)
            self._last[cid] = value

    def _loop(self) -> None:
        while not self._stop.wait(CPU_SAMPLE_S):
            self._sample()


def fmt(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Causes:
    """Why a scenario failed, read from its log line by line: the last two
    failing tasks, each with up to five of its error lines, a message the
    callback wrapped kept whole (up to CAUSE_CHARS)."""

    def __init__(self) -> None:
        self.groups: list[list[str]] = []
        self.last_task = ""
        self.continued: int | None = None  # the indent of the cause line being continued

    def feed(self, plain: str) -> None:
        task = TASK_LINE.match(plain)
        text = plain.strip(" │\n")
        indent = len(plain) - len(plain.lstrip(" │"))
        if task:
            self.last_task = task["task"]
            self.continued = None
        elif CAUSE_LINE.match(plain):
            # Expected failures (ignored, rescued) come before the one that
            # stopped the scenario: the last two tasks count.
            if self.last_task or not self.groups:
                self.groups = self.groups[-1:] + [[f"TASK [{self.last_task}]"]]
                self.last_task = ""
            if len(self.groups[-1]) < 6:
                self.groups[-1].append(text[:CAUSE_CHARS])
                self.continued = indent
        elif self.continued is not None and text and indent > self.continued:
            # A message wrapped by the callback: its next lines belong to it.
            self.groups[-1][-1] = (self.groups[-1][-1] + " " + text)[:CAUSE_CHARS]
        else:
            self.continued = None


class Runner:
    def __init__(self, log_dir: Path, started: float, cpu: ContainerCpu):
        self.log_dir = log_dir
        self.cpu = cpu
        self.started = started
        self.lock = threading.Lock()
        self.results: dict[str, dict] = {}
        self.not_started: list[str] = []
        self.extra: dict[str, str] = {}
        self.finished = threading.Event()

    def say(self, text: str) -> None:
        with self.lock:
            print(f"[{fmt(time.monotonic() - self.started)}] {text}", flush=True)

    def schedule(self, order: list[str], gate: Gate, jobs: int, jobs_while_building: int,
                 max_jobs: int | None = None, idle: CpuIdle | None = None) -> None:
        """Run the scenarios in order, each once the inputs it needs are built
        (Gate), at most jobs at a time, or jobs_while_building while an input
        is still being built beside them; once built, up to max_jobs while the
        CPUs idle (IDLE_MIN). Once a build has failed nothing more starts; the
        scenarios that did not start are kept in not_started."""
        wanted = {name: needs(name) for name in order}
        pending = list(order)
        running: dict[str, threading.Thread] = {}
        waiting_since = last_start = time.monotonic()
        max_jobs = max(max_jobs or jobs, jobs)
        while pending or running:
            if idle is not None:
                idle.sample(time.monotonic())
            for name in [n for n, thread in running.items() if not thread.is_alive()]:
                running.pop(name).join()
            if pending and gate.failed():
                self.say("an input failed to build (make's output says which): "
                         f"not starting {', '.join(pending)}")
                self.not_started, pending = pending, []
            ready = gate.ready()
            building = any(not wanted[name] <= ready for name in pending)
            for name in [n for n in pending if wanted[n] <= ready]:
                now = time.monotonic()
                limit = jobs_while_building if building else jobs
                extra = ""
                if not building and limit <= len(running) < max_jobs and now - last_start >= START_GAP_S:
                    share = idle.fraction(now) if idle is not None else None
                    if share is not None and share >= IDLE_MIN:
                        limit = len(running) + 1
                        extra = f" (one more: the CPUs {share:.0%} idle over {IDLE_WINDOW_S:.0f} s)"
                if len(running) >= limit:
                    break
                pending.remove(name)
                self.extra[name] = extra
                running[name] = threading.Thread(target=self.run, args=(name,), name=name)
                running[name].start()
                waiting_since = last_start = now
            if pending and not running and time.monotonic() - waiting_since > GATE_DEADLINE_S:
                missing = sorted(set().union(*(wanted[n] for n in pending)) - ready)
                self.say(f"gave up after {fmt(GATE_DEADLINE_S)} waiting for {', '.join(missing)}: "
                         f"not starting {', '.join(pending)}")
                self.not_started, pending = pending, []
            if pending or running:
                self.finished.wait(GATE_POLL_S)
                self.finished.clear()

    def run(self, name: str) -> None:
        try:
            self.run_scenario(name)
        finally:
            self.finished.set()

    def run_scenario(self, name: str) -> None:
        start = time.monotonic() - self.started
        self.run_once(name)
        self.results[name]["start"] = round(start, 1)
        result = self.results[name]
        # A failure before converge is the harness's (podman, systemd boot),
        # not the roles': one more try, said out loud, first log kept.
        if result["rc"] != 0 and result["failed_phase"] in HARNESS_PHASES:
            first = self.log_dir / f"{name}.log"
            first.rename(self.log_dir / f"{name}.try1.log")
            self.say(f"{name}: failed before converge; trying once more (first log: {name}.try1.log)")
            self.run_once(name)
            self.results[name]["retried"] = True
            self.results[name]["first_try"] = {"failed_phase": result["failed_phase"], "causes": result["causes"]}
            self.results[name]["seconds"] += result["seconds"]
            self.results[name]["controller_cpu"] += result["controller_cpu"]
        self.results[name]["container_cpu"] = round(self.cpu.used.get(name, 0.0), 1)

    def run_once(self, name: str) -> None:
        log_path = self.log_dir / f"{name}.log"
        failed_phase = None  # the first phase Molecule reported as failed
        causes = Causes()
        phases: dict[str, float] = {}
        phase_cpu: dict[str, float] = {}
        current: tuple[str, float, float] | None = None
        begin = time.monotonic()
        self.say(f"{name}: started{self.extra.get(name, '')}")
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                ["molecule", "test", "-s", name],
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                plain = ANSI.sub("", line)
                causes.feed(plain)
                match = PHASE_LINE.search(plain)
                if not match or match["scenario"] != name:
                    continue
                now, cpu_now = time.monotonic(), tree_cpu(proc.pid)
                if match["what"] == "Executing":
                    current = (match["phase"], now, cpu_now)
                elif current and current[0] == match["phase"]:
                    phases[current[0]] = phases.get(current[0], 0.0) + now - current[1]
                    phase_cpu[current[0]] = phase_cpu.get(current[0], 0.0) + cpu_now - current[2]
                    current = None
                if match["failed"] and failed_phase is None:
                    failed_phase = match["phase"]
            # wait4: the CPU time of Molecule and every process it waited for.
            _pid, status, usage = os.wait4(proc.pid, 0)
            rc = proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - begin
        if rc != 0 and failed_phase is None:
            failed_phase = current[0] if current else "startup"
        self.results[name] = {"seconds": round(seconds, 1), "rc": rc, "failed_phase": failed_phase,
                              "causes": causes.groups,
                              "controller_cpu": round(usage.ru_utime + usage.ru_stime, 1),
                              "controller_cpu_phases": {k: round(v, 1) for k, v in phase_cpu.items()},
                              "phases": {k: round(v, 1) for k, v in phases.items()}}
        if rc == 0:
            self.say(f"{name}: passed in {fmt(seconds)}")
        else:
            tail = log_path.read_text().splitlines()[-60:]
            self.say(f"{name}: FAILED (rc {rc}) after {fmt(seconds)}; last lines of {log_path.relative_to(ROOT)}:\n"
                     + "\n".join("    " + ANSI.sub("", t) for t in tail))


def cpu_cells(r: dict) -> list[str]:
    """CPU seconds: the controller's, the containers', both (blank before they were kept)."""
    if "controller_cpu" not in r:
        return ["", "", ""]
    return [f"{r['controller_cpu']:.0f}", f"{r.get('container_cpu', 0):.0f}",
            f"{r['controller_cpu'] + r.get('container_cpu', 0):.0f}"]


def table(results: dict[str, dict]) -> str:
    used = [p for p in PHASES if any(p in r["phases"] for r in results.values())]
    # When each started after the runner did (kept since the inputs' gate).
    starts = any("start" in r for r in results.values())
    head = ["scenario", "total"] + (["started at"] if starts else []) + used
    lines = ["| " + " | ".join(head) + " | CPU s controller | CPU s containers | CPU s |",
             "| --- | " + " | ".join("---:" for _cell in head[1:]) + " | ---: | ---: | ---: |"]
    for name, r in sorted(results.items(), key=lambda kv: -kv[1]["seconds"]):
        cells = ([fmt(r["start"]) if "start" in r else ""] if starts else [])
        cells += [fmt(r["phases"][p]) if p in r["phases"] else "" for p in used] + cpu_cells(r)
        status = (" (failed)" if r["rc"] != 0 else "") + (" (second try)" if r.get("retried") else "")
        lines.append(f"| {name}{status} | {fmt(r['seconds'])} | " + " | ".join(cells) + " |")
    kept = [r for r in results.values() if "controller_cpu" in r]
    if kept:
        total = sum(r["controller_cpu"] + r.get("container_cpu", 0) for r in kept)
        lines.append(f"\nCPU: {total:.0f} s in all ({total / 60:.1f} CPU minutes) for {len(kept)} scenarios")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help="default: every scenario under molecule/")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("MOLECULE_JOBS", "3")))
    parser.add_argument("--report", type=Path, default=ROOT / "build/test-times/molecule.json")
    parser.add_argument("--print-table", action="store_true", help="print the last report's table and exit")
    parser.add_argument("--gate", type=Path, metavar="DIR",
                        help="start each scenario once the inputs it reads are built: the Makefile touches DIR/NAME "
                             f"for each group of INPUTS ({', '.join(INPUTS)}) and DIR/{GATE_FAILED} when one failed")
    parser.add_argument("--jobs-while-building", type=int,
                        help="at most this many at a time while an input is still being built (default: --jobs)")
    parser.add_argument("--max-jobs", type=int,
                        help=f"once the inputs are built, up to this many while the CPUs are at least "
                             f"{IDLE_MIN * 100:.0f}%% idle (default: --jobs)")
    args = parser.parse_args()

    if args.print_table:
        if not args.report.exists():
            print(f"No scenario times yet ({args.report.relative_to(ROOT)}): `make molecule` writes them.")
            return 0
        data = json.loads(args.report.read_text())
        building = data.get("jobs_while_building")
        beside = f" ({building} while inputs were built beside them)" if building and building != data["jobs"] else ""
        print(f"Molecule scenarios, {data['jobs']} at a time{beside}: {fmt(data['seconds'])} wall\n")
        print(table(data["scenarios"]))
        return 0

    names = args.scenarios or scenario_names()
    unknown = sorted(set(names) - set(scenario_names()))
    if unknown:
        sys.exit(f"no such scenario: {', '.join(unknown)}")
    check_unique_platforms(scenario_names())
    order = run_order(names, args.report)
    jobs_while_building = args.jobs_while_building or args.jobs
    log_dir = ROOT / "build/logs/molecule"
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    cpu = ContainerCpu({platform: name for name in order for platform in platforms_of(name)})
    runner = Runner(log_dir, started, cpu)
    gated = f"; each once its inputs are built ({jobs_while_building} at a time until then)" if args.gate else ""
    runner.say(f"{len(order)} scenarios, {args.jobs} at a time{gated}, logs in {log_dir.relative_to(ROOT)}/")
    cpu.start()
    runner.schedule(order, Gate(args.gate), args.jobs, jobs_while_building, args.max_jobs, CpuIdle())
    cpu.stop()
    wall = time.monotonic() - started

    previous = {}
    if args.report.exists():
        try:
            previous = json.loads(args.report.read_text()).get("scenarios", {})
        except ValueError:
            previous = {}
    args.report.parent.mkdir(parents=True, exist_ok=True)
    # A partial run keeps the other scenarios' last figures.
    merged = {**previous, **runner.results}
    args.report.write_text(json.dumps({"jobs": args.jobs, "jobs_while_building": jobs_while_building,
                                       "max_jobs": args.max_jobs or args.jobs,
                                       "seconds": round(wall, 1), "scenarios": merged}, indent=2))
    print(f"\n{len(order)} scenarios in {fmt(wall)} wall, {args.jobs} at a time\n")
    print(table(runner.results))
    # Why each failed (and each retried) scenario failed, last: a log cut to
    # its tail still says it.
    for name, r in sorted(runner.results.items()):
        for label, attempt in (("first try", r.get("first_try")), ("", r if r["rc"] != 0 else None)):
            if attempt:
                print(f"\n{name}{' (' + label + ')' if label else ''}: failed in {attempt['failed_phase']}")
                lines = [line for group in attempt["causes"] for line in group]
                print("\n".join("    " + c for c in lines) or "    (no fatal line; see the log)")
    failed = sorted(n for n, r in runner.results.items() if r["rc"] != 0)
    if failed:
        print(f"\nfailed: {', '.join(failed)} (logs in {log_dir.relative_to(ROOT)}/)")
    if runner.not_started:
        print(f"\nnot started: {', '.join(runner.not_started)} (an input they need was not built)")
    return 1 if failed or runner.not_started else 0


if __name__ == "__main__":
    sys.exit(main())
