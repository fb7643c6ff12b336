# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a real GPU said, kept: the NVML double loaded with a capture from a real H200 must make
gpu_facts, the GPU exporter and the watchdog say what they said against the real driver.

tests/doubles/nvml/real_gpu_check.sh ran on a lent machine with one NVIDIA H200 (driver
580.159.04) and wrote the capture (fixtures/real_h200_141gb.json), gpu_facts' answer, one
exporter scrape and the watchdog's dry run against the real NVML (real/h200_*; the UUID and
serial replaced by the capture's anonymised ones). A change to the double or to the reading code
that parts them from the real driver fails here, on a machine without a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
REAL = os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'real')
CAPTURE = os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'fixtures', 'real_h200_141gb.json')
# The programs as the host runs them (nvml_env puts host/ on PYTHONPATH).
EXPORTER = [sys.executable, '-m', 'llm_server_host.gpu_exporter']
WATCHDOG = [sys.executable, '-m', 'llm_server_host.gpu_watchdog']


def _roundtrip():
    spec = importlib.util.spec_from_file_location('roundtrip', os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml',
                                                                            'roundtrip.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# gpu_facts' values that move by themselves between two reads of an idle GPU: the round trip's own list.
VOLATILE_FACTS = _roundtrip().VOLATILE
VOLATILE_SERIES = {'llm_gpu_temperature_celsius', 'llm_gpu_power_draw_watts', 'llm_gpu_utilization_ratio',
                   'llm_gpu_memory_utilization_ratio', 'llm_gpu_memory_used_bytes', 'llm_gpu_memory_free_bytes',
                   'llm_gpu_clock_hertz', 'llm_gpu_throttle_reason', 'llm_gpu_pcie_link_generation',
                   'llm_gpu_exporter_scrape_duration_seconds'}
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def _read(name):
    with open(os.path.join(REAL, name)) as handle:
        return handle.read()


def _samples(text):
    """{(name, labels): value} of an exposition, the volatile series with value None."""
    found = {}
    for line in text.splitlines():
        if not line or line.startswith('#'):
            continue
        match = SAMPLE.match(line)
        assert match, 'not an exposition line: %r' % line
        name, labels, value = match.groups()
        found[(name, labels or '')] = None if name in VOLATILE_SERIES else float(value)
    return found


def test_gpu_facts_through_the_capture_equals_the_real_driver(run_gpu_facts):
    real = json.loads(_read('h200_gpu_facts.json'))
    rc, result, stderr = run_gpu_facts({'vendors': ['nvidia']}, fixture=CAPTURE)
    assert rc == 0, stderr
    doubled = result['ansible_facts']
    assert doubled['gpu_count'] == real['gpu_count'] == 1
    for key in ('gpu_driver_version', 'gpu_cuda_driver_version', 'gpu_nvml_version', 'gpu_nvml_error',
                'gpu_topology'):
        assert doubled[key] == real[key], key
    stable = {key: value for key, value in real['gpus'][0].items() if key not in VOLATILE_FACTS}
    assert len(stable) >= 25, 'the real answer holds the fields compared'
    assert {key: doubled['gpus'][0].get(key) for key in stable} == stable
    # What the real H200 said, so that a capture that lost it cannot pass by agreeing with itself.
    assert stable['name'] == 'NVIDIA H200' and stable['architecture'] == 'hopper'
    assert stable['memory_total_bytes'] == 150754820096
    assert (stable['temperature_slowdown_c'], stable['temperature_shutdown_c']) == (89, 95)


def test_exporter_through_the_capture_equals_the_real_driver(nvml_env):
    real = _samples(_read('h200_exporter.prom'))
    proc = subprocess.run(EXPORTER + ['--once'], env=nvml_env(fixture=CAPTURE),
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    doubled = _samples(proc.stdout)
    assert sorted(set(real) ^ set(doubled)) == [], 'the same series with the same labels'
    assert doubled == real
    # The real driver answered every field the exporter reads on an H200: none unsupported.
    assert not [key for key in real if key[0] == 'llm_gpu_exporter_unsupported']
    assert real[('llm_gpu_exporter_scrape_success', '')] == 1.0
    assert sum(1 for key in real if key[0] == 'llm_gpu_xid_errors_total') >= 10


def test_watchdog_thresholds_and_dry_run_through_the_capture(nvml_env, tmp_path):
    """The heat steps the watchdog took from the real card, and what its dry run said it would set."""
    real = _read('h200_watchdog_dry_run.txt')
    dirs = {name: str(tmp_path / name) for name in ('instances', 'state', 'run', 'metrics')}
    os.makedirs(dirs['instances'])
    base = {'dry_run': True, 'interval_s': 1, 'registry_dir': dirs['instances'], 'state_dir': dirs['state'],
            'run_dir': dirs['run'], 'hold_dir': dirs['run'] + '/holds', 'metrics_dir': dirs['metrics'],
            'kernel_log': str(tmp_path / 'no-kmsg')}
    env = nvml_env(fixture=CAPTURE)

    def once(config):
        path = tmp_path / 'watchdog.json'
        path.write_text(json.dumps(config))
        proc = subprocess.run(WATCHDOG + ['--config', str(path), 'once'], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode == 0, proc.stderr
        metrics = ''.join(open(os.path.join(dirs['metrics'], name)).read() for name in os.listdir(dirs['metrics']))
        return proc.stderr + proc.stdout, sorted(re.findall(r'^llm_watchdog_heat_threshold_celsius.*$', metrics, re.M))

    def real_thresholds(section):
        return sorted(re.findall(r'^llm_watchdog_heat_threshold_celsius.*$', section, re.M))

    defaults, forced = real.split('--- forced below')
    thresholds = once(base)[1]
    assert thresholds == real_thresholds(defaults) and len(thresholds) == 4

    heat = json.loads(_read('watchdog_forced.json'))['heat']
    said, thresholds = once(dict(base, heat=heat))
    assert thresholds == real_thresholds(forced)
    would = re.findall(r'dry run: would .*', said)
    assert would == re.findall(r'dry run: would .*', forced)
    assert would == ['dry run: would set the power limit of GPU 0 to 560 W',
                     'dry run: would lock the graphics clocks of GPU 0 at 1386 MHz']
