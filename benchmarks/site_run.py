# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of playbooks/site.yml on the demo host: first converge, no-op re-runs, time per role.

Run through `make bench` (mitogen's strategy, as `make demo` runs) or with
--plain for Ansible's own linear strategy over the podman connection (what
the tests used before). A disposable container is prepared as the demo's
simulated dual-GPU server; site.yml converges it once, then --reruns more
runs must change nothing. Each re-run is read through the JSON callback, so
the table also gives what every role costs when it has nothing to do.
Prints Markdown tables for docs/benchmarks.md and keeps the figures in
build/bench/site-<strategy>.json.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

from _harness import ROOT, demo_container_options, machine_line

NAME = 'llm-server-bench-site'


def playbook(path, extra, env, json_out=False, stops_for=None, root=ROOT):
    """One ansible-playbook run: (seconds, output). stops_for: the run must fail with this message.
    root: the checkout whose collection, playbooks and inventory run (--compare's worktree)."""
    cmd = ['ansible-playbook', '-i', 'inventories/demo', path, *extra]
    run_env = dict(env, ANSIBLE_CONFIG=str(root / 'ansible.cfg'))
    if json_out:
        run_env['ANSIBLE_STDOUT_CALLBACK'] = 'ansible.posix.json'
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False, env=run_env)
    elapsed = time.perf_counter() - start
    if stops_for is not None:
        if proc.returncode == 0 or stops_for not in proc.stdout:
            sys.exit('%s should have stopped with "%s" (rc %d):\n%s'
                     % (' '.join(cmd), stops_for, proc.returncode, proc.stdout[-4000:]))
    elif proc.returncode != 0:
        sys.exit('%s failed:\n%s\n%s' % (' '.join(cmd), proc.stdout[-4000:], proc.stderr[-2000:]))
    return elapsed, proc.stdout


def noop_run(root, extra, env):
    """A site.yml re-run that must change nothing: (seconds, the JSON callback's report)."""
    elapsed, out = playbook('playbooks/site.yml', extra, env, json_out=True, root=root)
    report = json.loads(out[out.index('{'):])
    changed = sum(s['changed'] for s in report['stats'].values())
    if changed:
        tasks = ['%s: %s' % (host, task['task']['name']) for play in report['plays'] for task in play['tasks']
                 for host, result in task['hosts'].items() if result.get('changed')]
        sys.exit('site.yml re-run from %s changed %d task(s): not idempotent:\n  %s'
                 % (root, changed, '\n  '.join(tasks)))
    return elapsed, report


def compare_tree(ref):
    """A worktree of the collection at ref, made once, outside this checkout (in the cache), its build/
    this checkout's: the same wheels, models, llama.cpp archive and demo API key."""
    commit = subprocess.run(['git', 'rev-parse', '--verify', ref + '^{commit}'], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()
    cache = pathlib.Path(os.environ.get('XDG_CACHE_HOME') or pathlib.Path.home() / '.cache')
    tree = cache / 'homelab-llm-server' / 'bench-compare' / commit[:12]
    if not (tree / 'ansible.cfg').exists():
        subprocess.run(['git', 'worktree', 'add', '--force', '--detach', str(tree), commit], cwd=ROOT,
                       capture_output=True, check=True)
    if not (tree / 'build').exists():
        (tree / 'build').symlink_to(ROOT / 'build')
    return tree


def reboot(name):
    """The reboot site.yml stops for on a fresh host, as the simulated host has it (the first_day
    scenario's): the kernel module the driver installed is loaded at boot, then the container restarts."""
    loaded = subprocess.run(['tar', '-C', str(ROOT / 'tests/sysfs/driver/sb_off'), '-c', 'proc/modules',
                             'proc/driver/nvidia/version', 'sys/module/nvidia/version'],
                            capture_output=True, check=True).stdout
    subprocess.run(['podman', 'exec', '-i', name, 'tar', '-C', '/srv/fake-host-driver', '-x'],
                   input=loaded, capture_output=True, check=True)
    subprocess.run(['podman', 'restart', '--time', '30', name], capture_output=True, check=True)
    booted = subprocess.run(['podman', 'exec', name, 'timeout', '120', 'sh', '-c',
                             'until test -S /run/systemd/private; do sleep 0.1; done; systemctl is-system-running --wait'],
                            capture_output=True, text=True, check=False).stdout.strip()
    if booted not in ('running', 'degraded'):
        sys.exit('%s did not boot after the restart: %s' % (name, booted))


def task_times(report):
    """(role, task name, seconds) for every task of the JSON callback's report."""
    for play in report['plays']:
        for task in play['tasks']:
            name = task['task']['name']
            role, _sep, short = name.rpartition(' : ')
            duration = task['task'].get('duration', {})
            seconds = 0.0
            if duration.get('start') and duration.get('end'):
                span = datetime.datetime.fromisoformat(duration['end']) - datetime.datetime.fromisoformat(duration['start'])
                seconds = span.total_seconds()
            yield (role.replace('homelab.llm_server.', '') or 'tasks of the plays'), short, seconds


def per_role(report):
    """Seconds and task count per role (or the plays' own tasks)."""
    seconds = collections.defaultdict(float)
    tasks = collections.Counter()
    for role, _name, value in task_times(report):
        seconds[role] += value
        tasks[role] += 1
    return seconds, tasks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--reruns', type=int, default=2, help='no-op re-runs (default 2)')
    parser.add_argument('--plain', action='store_true',
                        help="Ansible's linear strategy (drops ANSIBLE_STRATEGY from the environment)")
    parser.add_argument('--vllm-stopped', action='store_true',
                        help="vLLM planned on the simulated GPUs but not started, as the demo was before "
                             "vLLM's CPU build (benchmarks/demo-gpu-vllm-stopped.yml)")
    parser.add_argument('--image', default=os.environ.get('LLM_SERVER_TEST_IMAGE'))
    parser.add_argument('--reuse', action='store_true',
                        help='time the no-op re-runs on the host a run with --keep left, without its first converge '
                             '(the loop of one change to the roles); implies --keep')
    parser.add_argument('--keep', action='store_true',
                        help='leave the converged host running (podman container %s) to time more no-op runs '
                             'by hand; the next run of this script replaces it' % NAME)
    parser.add_argument('--compare', metavar='REF',
                        help='also time the no-op re-runs of the collection at this git revision on the same host, '
                             'each after one of this tree (A B A B ...), so both see the same machine; the two '
                             'must write the same files to the host')
    opts = parser.parse_args()
    if not opts.image:
        parser.error('--image or LLM_SERVER_TEST_IMAGE is required (make bench sets it)')

    env = dict(os.environ)
    if opts.plain:
        env.pop('ANSIBLE_STRATEGY', None)
    strategy = env.get('ANSIBLE_STRATEGY', 'linear')
    reports = ROOT / 'build/bench-reports/site'
    extra = ['-e', 'ansible_host=%s' % NAME, '-e', 'preflight_report_dir=%s' % reports]
    if opts.vllm_stopped:
        extra += ['-e', '@benchmarks/demo-gpu-vllm-stopped.yml']

    opts.keep = opts.keep or opts.reuse
    if opts.reuse:
        running = subprocess.run(['podman', 'container', 'inspect', '--format', '{{.State.Running}}', NAME],
                                 capture_output=True, text=True, check=False).stdout.strip()
        if running != 'true':
            parser.error('--reuse needs the host a run with --keep left (podman container %s)' % NAME)
    else:
        subprocess.run(['podman', 'rm', '-f', NAME], capture_output=True, check=False)
        subprocess.run(['podman', 'run', '-d', '--name', NAME, '--hostname', 'llm-demo', '--privileged',
                        '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=4096:4096', *demo_container_options(),
                        opts.image, '/sbin/init'], check=True, capture_output=True)
    first = None
    try:
        if not opts.reuse:
            playbook('tests/simulated_host/prepare.yml', extra, env)
            # A fresh host: site.yml stops after the driver for the reboot, then the same command goes on.
            before_reboot, _out = playbook('playbooks/site.yml', extra, env, stops_for='reboot required')
            reboot(NAME)
            after_reboot, _out = playbook('playbooks/site.yml', extra, env)
            first = before_reboot + after_reboot
        else:
            # The first run after a change of the roles may change the host: not counted.
            playbook('playbooks/site.yml', extra, env)
        trees = {'this tree': ROOT}
        if opts.compare:
            trees[opts.compare] = compare_tree(opts.compare)
            # Its first run gathers the facts its own cache lacks: not counted. The two must write the same
            # files (a ref before a change of a template would change it back at every run).
            noop_run(trees[opts.compare], extra, env)
        runs = {label: {'seconds': [], 'roles': collections.defaultdict(list), 'tasks': {}} for label in trees}
        for _run in range(opts.reruns):
            for label, root in trees.items():
                elapsed, report = noop_run(root, extra, env)
                runs[label]['seconds'].append(elapsed)
                seconds, tasks = per_role(report)
                for role, value in seconds.items():
                    runs[label]['roles'][role].append(value)
                runs[label]['tasks'] = tasks
                if label == 'this tree':
                    last_tasks = list(task_times(report))
                    slowest = sorted(last_tasks, key=lambda t: -t[2])[:15]
        reruns, role_seconds, task_count = (runs['this tree'][key] for key in ('seconds', 'roles', 'tasks'))
    finally:
        if not opts.keep:
            subprocess.run(['podman', 'rm', '-f', NAME], capture_output=True, check=False)

    noop = statistics.median(reruns)
    print(machine_line())
    print('site.yml on the demo host, strategy %s, connection podman%s\n'
          % (strategy, ', vLLM not started' if opts.vllm_stopped else ''))
    print('| measurement | runs | seconds |')
    print('| --- | ---: | ---: |')
    if first is not None:
        print('| first converge (fresh host; the run that stops for the reboot, then the one after it) | 1 | %.1f |'
              % first)
    print('| no-op re-run, changed=0 (median) | %d | %.1f |' % (len(reruns), noop))
    if opts.compare:
        other = runs[opts.compare]
        print('| the same at %s, each run after one of this tree (median; runs %s) | %d | %.1f |'
              % (opts.compare, ', '.join('%.1f' % r for r in other['seconds']), len(other['seconds']),
                 statistics.median(other['seconds'])))
        print('| tasks in a no-op run: this tree / %s | | %d / %d |'
              % (opts.compare, sum(task_count.values()), sum(other['tasks'].values())))
    print('\nNo-op re-run per role (median of %d, task time as Ansible reports it):\n' % len(reruns))
    print('| role | tasks | seconds |')
    print('| --- | ---: | ---: |')
    for role, values in sorted(role_seconds.items(), key=lambda kv: -statistics.median(kv[1])):
        print('| %s | %d | %.1f |' % (role, task_count.get(role, 0), statistics.median(values)))
    print('\nSlowest tasks of the last no-op re-run:\n')
    print('| role | task | seconds |')
    print('| --- | --- | ---: |')
    for role, name, value in slowest:
        print('| %s | %s | %.1f |' % (role, name, value))
    out_dir = ROOT / 'build/bench'
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / ('site-%s%s.json' % (strategy, '-vllm-stopped' if opts.vllm_stopped else ''))).write_text(json.dumps({
        'strategy': strategy, 'first_converge_s': round(first, 1) if first is not None else None,
        'noop_s': [round(r, 1) for r in reruns],
        'noop_per_role_s': {r: round(statistics.median(v), 2) for r, v in role_seconds.items()},
        'tasks_per_role': dict(task_count),
        # The last no-op re-run task by task, to see what a role added.
        'last_noop_tasks': [{'role': role, 'task': name, 'seconds': round(value, 3)} for role, name, value in last_tasks],
        'compare': {'ref': opts.compare, 'noop_s': [round(r, 1) for r in runs[opts.compare]['seconds']],
                    'noop_per_role_s': {r: round(statistics.median(v), 2)
                                        for r, v in runs[opts.compare]['roles'].items()},
                    'tasks_per_role': dict(runs[opts.compare]['tasks'])} if opts.compare else None}, indent=2))


if __name__ == '__main__':
    main()
