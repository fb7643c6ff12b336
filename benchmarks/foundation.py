# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the foundation: one gpu_facts call, and a no-op preflight re-run.

Run through `make bench` (it builds the NVML test double, the wheels, the
local NVIDIA repositories and the test image first). Prints a Markdown table
for docs/benchmarks.md.

1. gpu_facts: the module run the way Ansible runs it (a Python process reading
   its JSON arguments), against the NVML test double answering from the
   dual RTX PRO 6000 fixture. Reported: median and p95 of --runs calls.
2. preflight.yml no-op re-run: a disposable container prepared as the
   simulated dual-GPU server, one converging run, then --playbook-runs
   re-runs that change nothing. Reported: median and p95 of the re-runs.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from _harness import ROOT, machine_line, percentile, print_table, simulated_server, timed_reruns

FIXTURE = ROOT / 'tests/doubles/nvml/fixtures/target_dual_rtx_pro_6000.json'
DOUBLE_DIR = ROOT / 'build/nvml'


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
        with simulated_server(opts.image, 'llm-server-bench', ROOT / 'build/bench-reports') as extra:
            first, reruns = timed_reruns('playbooks/preflight.yml', extra, opts.playbook_runs)
        rows.append(('preflight.yml, first run on a prepared host', 1, first, first))
        rows.append(('preflight.yml, no-op re-run (changed=0)', opts.playbook_runs,
                     statistics.median(reruns), percentile(reruns, 95)))
    print(machine_line())
    print()
    print_table(rows)


if __name__ == '__main__':
    main()
