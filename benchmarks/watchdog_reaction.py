# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reaction time of llm-gpu-watchdog with its default settings, against the NVML test double.

Runs llm-gpu-watchdog (host/llm_server_host/gpu_watchdog.py) as the role does (rounds
every 5 s, NVML's deadline 5 s) against the double (built here from
tests/doubles/nvml/fake_nvml.c, a live fixture of two RTX PRO 6000) with
systemctl replaced by a recorder, and measures, over --trials episodes:

- threshold crossing to the first action: GPU 0's temperature is written
  past its power step (87 C) at a random moment of the round; the time until
  the double records the lowered power limit (target: 15 s, issue 13);
- the same while NVML hangs on the other GPU (every call sleeps 60 s): the
  hung read is cut at the deadline and the GPU quarantined;
- XID to action: an XID 94 appended to the double's event file until the
  engine's restart reaches the recorder.

Each episode ends with the GPU cooled and released, so the next starts from
normal. Needs root (NVML's setters refuse anyone else, as the double does).

  python3 benchmarks/watchdog_reaction.py [--trials 5] [--target-s 15]

Writes build/bench-reports/watchdog-reaction.json; exits 1 when a p95 is
over the target.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from _harness import ROOT, build_nvml_double as build_double, collection_root, machine_line, percentile

# The program as the host runs it: the package's module, from host/.
PROGRAM = [sys.executable, '-m', 'llm_server_host.gpu_watchdog']
FIXTURE = ROOT / 'tests' / 'doubles' / 'nvml' / 'fixtures' / 'watchdog_dual_rtx_pro_6000.json'
SET_FIXTURE = ROOT / 'tests' / 'doubles' / 'nvml' / 'set_fixture.py'
REPORT = ROOT / 'build' / 'bench-reports' / 'watchdog-reaction.json'


class Host(object):
    """The double's fixture and state, a registry of two engines, the daemon's configuration."""

    def __init__(self, tmp):
        self.tmp = tmp
        os.makedirs(tmp)
        with open(FIXTURE) as handle:
            fixture = json.load(handle)
        fixture['state_file'] = os.path.join(tmp, 'nvml-state.json')
        fixture['devices'][0]['xid_events_file'] = os.path.join(tmp, 'xid-gpu0')
        self.fixture = os.path.join(tmp, 'fixture.json')
        with open(self.fixture, 'w') as handle:
            json.dump(fixture, handle)
        for name in ('xid-gpu0', 'kern.log', 'systemctl.log'):
            open(os.path.join(tmp, name), 'w').close()
        registry = os.path.join(tmp, 'instances')
        os.makedirs(registry)
        for name, gpu in (('engine-a', 0), ('engine-b', 1)):
            with open(os.path.join(registry, name + '.json'), 'w') as handle:
                json.dump({'name': name, 'gpus': [gpu]}, handle)
        recorder = os.path.join(tmp, 'systemctl')
        with open(recorder, 'w') as handle:
            handle.write('#!/bin/sh\necho "$(date +%%s.%%N) $*" >> %s\n' % os.path.join(tmp, 'systemctl.log'))
        os.chmod(recorder, 0o755)
        # The role's defaults (roles/gpu_watchdog/defaults/main.yml); only the
        # restart backoff is shortened, so that one XID per episode restarts.
        config = {'interval_s': 5, 'nvml_timeout_s': 5, 'quarantine_s': 300, 'registry_dir': registry,
                  'state_dir': os.path.join(tmp, 'state'), 'run_dir': os.path.join(tmp, 'run'),
                  'metrics_dir': os.path.join(tmp, 'metrics'), 'kernel_log': os.path.join(tmp, 'kern.log'),
                  'systemctl': recorder, 'restarts_per_hour': 1000, 'restart_backoff_initial_s': 0,
                  'restart_backoff_max_s': 0}
        self.config = os.path.join(tmp, 'config.json')
        with open(self.config, 'w') as handle:
            json.dump(config, handle)

    def set(self, *assignments):
        subprocess.run([sys.executable, str(SET_FIXTURE), self.fixture] + list(assignments), check=True)

    def nvml_state(self):
        try:
            with open(os.path.join(self.tmp, 'nvml-state.json')) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return {}

    def recorded(self):
        with open(os.path.join(self.tmp, 'systemctl.log')) as handle:
            return handle.read()


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def power_step(host, gpu, env, args):
    """Seconds from writing the temperature to the lowered limit; then cool and release."""
    time.sleep(random.uniform(0, 5))  # anywhere in the round
    start = time.monotonic()
    host.set('devices.%d.temperature.gpu=88' % gpu)
    if not wait_for(lambda: host.nvml_state().get(str(gpu), {}).get('power_limit_mw') == 480000, 60):
        raise SystemExit('GPU %d: no power step within 60 s' % gpu)
    seconds = time.monotonic() - start
    host.set('devices.%d.temperature.gpu=40' % gpu)
    subprocess.run(PROGRAM + ['--config', host.config, 'release', str(gpu)], env=env,
                   check=True, capture_output=True)
    if not wait_for(lambda: host.nvml_state().get(str(gpu), {}).get('power_limit_mw') == 600000, 30):
        raise SystemExit('GPU %d: limit not restored after release' % gpu)
    return seconds


def xid_restart(host):
    time.sleep(random.uniform(0, 5))
    before = host.recorded().count('restart --no-block engine-a.service')
    start = time.monotonic()
    with open(os.path.join(host.tmp, 'xid-gpu0'), 'a') as handle:
        handle.write('94\n')
    if not wait_for(lambda: host.recorded().count('restart --no-block engine-a.service') > before, 60):
        raise SystemExit('no restart within 60 s of XID 94')
    return time.monotonic() - start


def summary(values):
    return {'p50': round(percentile(values, 50), 2), 'p95': round(percentile(values, 95), 2),
            'max': round(max(values), 2), 'n': len(values)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--trials', type=int, default=5)
    parser.add_argument('--target-s', type=float, default=15.0)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit('run as root: NVML (and the double) refuse power limits to anyone else')
    tmp = tempfile.mkdtemp(prefix='watchdog-bench-')
    daemon = None
    try:
        libdir = os.path.join(tmp, 'lib')
        os.makedirs(libdir)
        build_double(libdir)
        env = dict(os.environ, LD_LIBRARY_PATH=libdir, PYTHONPATH=os.pathsep.join([collection_root(os.path.join(tmp, 'coll')), str(ROOT / 'host')]),
                   PYTHONDONTWRITEBYTECODE='1')
        host = Host(os.path.join(tmp, 'host'))
        env['FAKE_NVML_FIXTURE'] = host.fixture
        daemon = subprocess.Popen(PROGRAM + ['--config', host.config, 'run'], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        metrics = os.path.join(host.tmp, 'metrics', 'llm_gpu_watchdog.prom')
        if not wait_for(lambda: os.path.exists(metrics), 60):
            daemon.terminate()
            raise SystemExit('the watchdog wrote no metrics within 60 s: %s' % daemon.communicate(timeout=20)[1])
        results = {'power_step_s': [power_step(host, 0, env, args) for _trial in range(args.trials)],
                   'xid_to_restart_s': [xid_restart(host) for _trial in range(args.trials)]}
        host.set('devices.0.hang_ms={"*": 60000}')
        results['power_step_while_other_gpu_hangs_s'] = [power_step(host, 1, env, args) for _trial in range(args.trials)]
        host.set('devices.0.hang_ms=')
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=20)
        shutil.rmtree(tmp, ignore_errors=True)
    report = {'machine': machine_line(), 'settings': 'interval_s 5, nvml_timeout_s 5 (the role\'s defaults)',
              'target_s': args.target_s, 'results': {name: summary(values) for name, values in results.items()},
              'samples': {name: [round(v, 2) for v in values] for name, values in results.items()}}
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2) + '\n')
    print(machine_line())
    print('%-40s %8s %8s %8s' % ('watchdog reaction, default settings', 'p50 s', 'p95 s', 'max s'))
    for name, figures in report['results'].items():
        print('%-40s %8.2f %8.2f %8.2f' % (name, figures['p50'], figures['p95'], figures['max']))
    worst = max(figures['p95'] for name, figures in report['results'].items() if name.startswith('power'))
    return 0 if worst <= args.target_s else 1


if __name__ == '__main__':
    sys.exit(main())
