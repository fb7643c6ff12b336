# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check that the NVML test double reproduces a host's NVML as gpu_facts sees it.

1. capture_fixture.py captures this host's NVML answers as a fixture;
2. gpu_facts runs against this host's NVML;
3. gpu_facts runs against the test double loaded with the captured fixture;
4. the two results must agree on every field that does not move by itself
   (temperatures, power draw, used memory, current clocks and throttle reasons
   do; they are reported, not compared).

    python3 tests/doubles/nvml/roundtrip.py --double-dir build/nvml --out DIR

Exits 1 when a stable field differs. On a host without a GPU, point
LD_LIBRARY_PATH and FAKE_NVML_FIXTURE at the double to check the capture
path itself.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
VOLATILE = {'temperature_c', 'power_draw_w', 'memory_used_bytes', 'memory_free_bytes',
            'clocks', 'throttle_reasons', 'throttle_reasons_mask', 'pcie_link_gen_current'}


def run_gpu_facts(env, workdir):
    link = workdir / 'ansible_collections/homelab'
    link.mkdir(parents=True, exist_ok=True)
    if not (link / 'llm_server').exists():
        (link / 'llm_server').symlink_to(ROOT)
    args = workdir / 'args.json'
    args.write_text(json.dumps({'ANSIBLE_MODULE_ARGS': {'vendors': ['nvidia']}}))
    env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(workdir), env.get('PYTHONPATH')])))
    out = subprocess.run([sys.executable, str(ROOT / 'plugins/modules/gpu_facts.py'), str(args)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)['ansible_facts']


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--double-dir', required=True, help='directory holding the built libnvidia-ml.so.1 double')
    parser.add_argument('--out', help='directory to keep the capture and both results in')
    opts = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(opts.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        work = pathlib.Path(tmp)
        capture = subprocess.run([sys.executable, str(HERE / 'capture_fixture.py'), '--anonymise'],
                                 capture_output=True, text=True, check=True).stdout
        (out / 'captured_fixture.json').write_text(capture)
        real = run_gpu_facts(dict(os.environ), work)
        double_env = dict(os.environ, LD_LIBRARY_PATH=opts.double_dir,
                          FAKE_NVML_FIXTURE=str(out / 'captured_fixture.json'))
        doubled = run_gpu_facts(double_env, work)
        (out / 'gpu_facts_real.json').write_text(json.dumps(real, indent=2))
        (out / 'gpu_facts_double.json').write_text(json.dumps(doubled, indent=2))

    differences = []
    for key in ('gpu_count', 'gpu_driver_version', 'gpu_cuda_driver_version', 'gpu_nvml_version',
                'gpu_nvml_error', 'gpu_topology'):
        if real.get(key) != doubled.get(key):
            differences.append('%s: real %r, double %r' % (key, real.get(key), doubled.get(key)))
    for gpu_real, gpu_double in zip(real['gpus'], doubled['gpus']):
        for key in sorted(set(gpu_real) | set(gpu_double)):
            if key in VOLATILE or key in ('uuid', 'serial'):
                continue
            if gpu_real.get(key) != gpu_double.get(key):
                differences.append('GPU %s %s: real %r, double %r'
                                   % (gpu_real['index'], key, gpu_real.get(key), gpu_double.get(key)))
    compared = sum(len(set(g) - VOLATILE - {'uuid', 'serial'}) for g in real['gpus'])
    print('compared %d stable GPU fields on %d GPU(s) (%s, driver %s)'
          % (compared, real['gpu_count'], ', '.join(g['name'] or '?' for g in real['gpus']),
             real['gpu_driver_version']))
    for line in differences:
        print('DIFFERENT ' + line)
    print('%d passed, %d failed' % (compared - len(differences), len(differences)))
    return 1 if differences else 0


if __name__ == '__main__':
    sys.exit(main())
