# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the foundation: one gpu_facts call, and a no-op preflight re-run.

Run through `make bench` (it builds the NVML test double, the wheels and the
test image first). Prints a Markdown table for docs/benchmarks.md.

1. gpu_facts: the module run the way Ansible runs it (a Python process reading
   its JSON arguments), against the NVML test double answering from the
   dual RTX PRO 6000 fixture. Reported: median and p95 of --runs calls.
2. preflight.yml no-op re-run: a disposable container prepared as the
   simulated dual-GPU server, one converging run, then --runs re-runs that
   change nothing. Reported: median and p95 wall time of the re-runs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURE = ROOT / 'tests/nvml_double/fixtures/target_dual_rtx_pro_6000.json'
DOUBLE_DIR = ROOT / 'build/nvml'
CONTAINER = 'llm-server-bench'


def percentile(values, pct):
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1))))
    return ordered[k]


def time_gpu_facts(runs):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        link = tmp / 'ansible_collections/homelab'
        link.mkdir(parents=True)
        (link / 'llm_server').symlink_to(ROOT)
        args = tmp / 'args.json'
        args.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': {}}))
        env = dict(os.environ, PYTHONPATH=str(tmp), LD_LIBRARY_PATH=str(DOUBLE_DIR),
                   FAKE_NVML_FIXTURE=str(FIXTURE))
        module = ROOT / 'plugins/modules/gpu_facts.py'
        times = []
        for _run in range(runs):
            start = time.perf_counter()
            out = subprocess.run([sys.executable, str(module), str(args)], env=env,
                                 capture_output=True, text=True, check=True)
            times.append(time.perf_counter() - start)
            facts = json.loads(out.stdout)['ansible_facts']
            assert facts['gpu_count'] == 2, facts
    return times


def ansible(*argv, extra=()):
    cmd = ['ansible-playbook', '-i', 'inventories/demo', *argv, *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False,
                          env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / 'ansible.cfg')))
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit('%s failed:\n%s' % (' '.join(cmd), proc.stdout[-4000:]))
    return elapsed, proc.stdout


def time_preflight_rerun(runs, image):
    subprocess.run(['podman', 'rm', '-f', CONTAINER], capture_output=True, check=False)
    subprocess.run(['podman', 'run', '-d', '--name', CONTAINER, '--privileged',
                    '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=4096:4096',
                    image, '/sbin/init'], check=True, capture_output=True)
    extra = ['-e', 'ansible_host=%s' % CONTAINER,
             '-e', 'preflight_report_dir=%s' % (ROOT / 'build/bench-reports')]
    try:
        ansible('tests/simulated_host/prepare.yml', extra=extra)
        first, _output = ansible('playbooks/preflight.yml', extra=extra)
        times = []
        for _run in range(runs):
            elapsed, out = ansible('playbooks/preflight.yml', extra=extra)
            recap = [line for line in out.splitlines() if 'changed=' in line]
            assert recap and all('changed=0' in line for line in recap), recap
            times.append(elapsed)
        return first, times
    finally:
        subprocess.run(['podman', 'rm', '-f', CONTAINER], capture_output=True, check=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--runs', type=int, default=20, help='gpu_facts calls (default 20)')
    parser.add_argument('--playbook-runs', type=int, default=5, help='no-op preflight re-runs (default 5)')
    parser.add_argument('--image', default=os.environ.get('LLM_SERVER_TEST_IMAGE'))
    opts = parser.parse_args()

    facts = time_gpu_facts(opts.runs)
    rows = [('gpu_facts, one module call (2 GPUs, NVML double)', opts.runs,
             statistics.median(facts), percentile(facts, 95))]
    if opts.image:
        first, reruns = time_preflight_rerun(opts.playbook_runs, opts.image)
        rows.append(('preflight.yml, first run on a prepared host', 1, first, first))
        rows.append(('preflight.yml, no-op re-run (changed=0)', opts.playbook_runs,
                     statistics.median(reruns), percentile(reruns, 95)))
    print('Machine: %s, %d CPUs, Python %s' % (platform.machine(), os.cpu_count(), platform.python_version()))
    print()
    print('| measurement | runs | median | p95 |')
    print('| --- | ---: | ---: | ---: |')
    for name, n, med, p95 in rows:
        print('| %s | %d | %.3f s | %.3f s |' % (name, n, med, p95))


if __name__ == '__main__':
    main()
