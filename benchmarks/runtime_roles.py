# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the driver, CUDA toolkit and container runtime roles: converge and no-op re-run.

Run through `make bench`. A disposable container is prepared as the demo's
simulated dual-GPU server (local signed NVIDIA repositories, simulated
kernel and firmware state); each role's playbook is run once (the converge),
then --playbook-runs times more, each re-run required to change nothing.
Prints a Markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics

from _harness import ROOT, machine_line, percentile, print_table, simulated_server, timed_reruns

PLAYBOOKS = (
    ('nvidia_driver', 'playbooks/nvidia_driver.yml'),
    ('cuda_toolkit', 'playbooks/cuda_toolkit.yml'),
    ('container_runtime', 'playbooks/container_runtime.yml'),
)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--playbook-runs', type=int, default=3, help='no-op re-runs per role (default 3)')
    parser.add_argument('--image', default=os.environ.get('LLM_SERVER_TEST_IMAGE'), required=False)
    opts = parser.parse_args()
    if not opts.image:
        parser.error('--image or LLM_SERVER_TEST_IMAGE is required (make bench sets it)')

    rows = []
    with simulated_server(opts.image, 'llm-server-bench-roles', ROOT / 'build/bench-reports') as extra:
        for role, playbook in PLAYBOOKS:
            first, reruns = timed_reruns(playbook, extra, opts.playbook_runs)
            rows.append(('%s converge (fresh host)' % role, 1, first, first))
            rows.append(('%s no-op re-run (changed=0)' % role, opts.playbook_runs,
                         statistics.median(reruns), percentile(reruns, 95)))
    print(machine_line())
    print()
    print_table(rows)


if __name__ == '__main__':
    main()
