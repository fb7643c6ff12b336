# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/llm_server_host/nvml_worker.py, and the NVML double's calls it needs.

- The double's calls for the worker (utilisation, ECC counts, remapped rows,
  PCIe replays, field values, events, hang_ms) through the real pynvml, each
  with its "not supported" answer; one process per scenario (see conftest.py).
- The worker's reading of a GPU gives gpu_facts' own record: the same
  _nvml.read_device, compared with what the gpu_facts module returns.
- Error names and why a field is missing (in process, no NVML).
- capture_fixture.py keeps every answer the worker reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llm_server_host import nvml_worker as _nvml_worker

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
FIXTURES = os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'fixtures')
PARTIAL = 'dual_gpu_partial_support'


def fixture_data(name):
    with open(os.path.join(FIXTURES, name + '.json')) as handle:
        return json.load(handle)


def write_fixture(tmp_path, data, name='custom.json'):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def run_python(env, code, timeout=60):
    proc = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the double's calls for the worker -------------------------------------

DOUBLE_CALLS = r'''
import json, time, pynvml as n
def ask(fn, *a):
    try:
        return fn(*a)
    except n.NVMLError as e:
        return type(e).__name__
n.nvmlInit()
out = []
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    util = ask(n.nvmlDeviceGetUtilizationRates, h)
    fv = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 9999])
    out.append({
        'utilization': util if isinstance(util, str) else [util.gpu, util.memory],
        'ecc': [ask(n.nvmlDeviceGetTotalEccErrors, h, e, c) for e in (0, 1) for c in (0, 1)],
        'remapped_rows': ask(n.nvmlDeviceGetRemappedRows, h),
        'replays': ask(n.nvmlDeviceGetPcieReplayCounter, h),
        'recovery_action': [fv[0].nvmlReturn, fv[0].valueType, fv[0].value.uiVal],
        'unknown_field': fv[1].nvmlReturn,
        'supported_events': ask(n.nvmlDeviceGetSupportedEventTypes, h),
        'bad_ecc_type': ask(n.nvmlDeviceGetTotalEccErrors, h, 2, 0),
    })
print(json.dumps(out))
'''


def test_double_answers_the_exporter_calls(nvml_env):
    gpu0, gpu1 = run_python(nvml_env(fixture=PARTIAL), DOUBLE_CALLS)
    assert gpu0 == {
        'utilization': [97, 63],
        'ecc': [3, 17, 0, 0],
        'remapped_rows': [1, 0, 0, 0],
        'replays': 2,
        'recovery_action': [0, 1, 0],
        'unknown_field': 3,
        'supported_events': 0x1 | 0x2 | 0x4 | 0x8 | 0x10,
        'bad_ecc_type': 'NVMLError_InvalidArgument',
    }
    # GPU 1: every one of these left out of the fixture, or answered per field.
    assert gpu1['ecc'] == ['NVMLError_NotSupported'] * 4
    assert gpu1['remapped_rows'] == 'NVMLError_NotSupported'
    assert gpu1['supported_events'] == 'NVMLError_NotSupported'
    assert gpu1['recovery_action'][0] == 3
    assert gpu1['utilization'] == [0, 0] and gpu1['replays'] == 0


def test_double_not_supported_for_each_new_call_of_an_old_fixture(nvml_env):
    """The fixtures written before the exporter: every new call answers NOT_SUPPORTED."""
    gpu0 = run_python(nvml_env(fixture='single_h100_80gb'), DOUBLE_CALLS)[0]
    assert gpu0['utilization'] == gpu0['remapped_rows'] == gpu0['replays'] == 'NVMLError_NotSupported'
    assert gpu0['supported_events'] == 'NVMLError_NotSupported'
    assert gpu0['ecc'] == ['NVMLError_NotSupported'] * 4
    assert gpu0['recovery_action'][0] == 3


def test_double_errors_map_covers_the_new_calls(nvml_env, tmp_path):
    data = fixture_data(PARTIAL)
    data['devices'][0]['errors'] = {
        'nvmlDeviceGetUtilizationRates': 'GPU_IS_LOST', 'nvmlDeviceGetTotalEccErrors': 'UNKNOWN',
        'nvmlDeviceGetRemappedRows': 'NO_PERMISSION', 'nvmlDeviceGetPcieReplayCounter': 'NOT_SUPPORTED',
        'nvmlDeviceGetSupportedEventTypes': 'NOT_SUPPORTED',
    }
    data['devices'][0]['field_values'] = {'230': 'NVML_ERROR_GPU_IS_LOST'}
    gpu0 = run_python(nvml_env(fixture=write_fixture(tmp_path, data)), DOUBLE_CALLS)[0]
    assert gpu0['utilization'] == 'NVMLError_GpuIsLost'
    assert gpu0['ecc'] == ['NVMLError_Unknown'] * 4
    assert gpu0['remapped_rows'] == 'NVMLError_NoPermission'
    assert gpu0['replays'] == gpu0['supported_events'] == 'NVMLError_NotSupported'
    assert gpu0['recovery_action'][0] == 15


DOUBLE_EVENTS = r'''
import json, os, sys, time, pynvml as n
n.nvmlInit()
h0, h1 = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
out = {}
s = n.nvmlEventSetCreate()
try:
    n.nvmlDeviceRegisterEvents(h1, n.nvmlEventTypeXidCriticalError, s)
    out['gpu1'] = 'registered'
except n.NVMLError as e:
    out['gpu1'] = type(e).__name__
try:
    n.nvmlDeviceRegisterEvents(h0, n.nvmlEventTypeGpuRecoveryAction, s)
except n.NVMLError as e:
    out['unsupported_type'] = type(e).__name__
n.nvmlDeviceRegisterEvents(h0, n.nvmlEventTypeXidCriticalError, s)
with open(sys.argv[1], 'a') as f:
    f.write('79\n# a comment\n\n0x5f\n')
seen = []
start = time.monotonic()
while len(seen) < 5 and time.monotonic() - start < 10:
    try:
        d = n.nvmlEventSetWait_v2(s, 200)
    except n.NVMLError_Timeout:
        continue
    seen.append([n.nvmlDeviceGetIndex(d.device), d.eventType, d.eventData, round(time.monotonic() - start, 2)])
out['seen'] = seen
t = time.monotonic()
try:
    n.nvmlEventSetWait_v2(s, 100)
except n.NVMLError as e:
    out['idle'] = [type(e).__name__, round(time.monotonic() - t, 1)]
n.nvmlEventSetFree(s)
print(json.dumps(out))
'''


def test_double_delivers_xid_events_from_the_fixture_and_the_file(nvml_env, tmp_path):
    events = tmp_path / 'gpu0.xid'
    events.write_text('48\n')  # written before registration: never delivered
    data = fixture_data(PARTIAL)
    data['devices'][0]['xid_events'] = [13, 13, {'xid': 31, 'after_ms': 300}]
    data['devices'][0]['xid_events_file'] = str(events)
    env = nvml_env(fixture=write_fixture(tmp_path, data))
    proc = subprocess.run([sys.executable, '-c', DOUBLE_EVENTS, str(events)], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out['gpu1'] == 'NVMLError_NotSupported'
    assert out['unsupported_type'] == 'NVMLError_NotSupported'
    seen = out['seen']
    assert [(gpu, kind, xid) for gpu, kind, xid, _t in seen] == [
        (0, 8, 13), (0, 8, 13), (0, 8, 79), (0, 8, 0x5f), (0, 8, 31)]
    assert seen[-1][3] >= 0.3, 'after_ms is counted from the registration'
    assert out['idle'] == ['NVMLError_Timeout', 0.1]


HANG = r'''
import json, time, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(1)
t = time.monotonic(); n.nvmlDeviceGetTemperature(h, 0); quick = time.monotonic() - t
t = time.monotonic(); n.nvmlDeviceGetPowerUsage(h); slow = time.monotonic() - t
print(json.dumps([quick, slow]))
'''


def test_double_hang_ms_makes_a_call_hang(nvml_env, tmp_path):
    data = fixture_data(PARTIAL)
    data['devices'][1]['hang_ms'] = {'nvmlDeviceGetPowerUsage': 400}
    quick, slow = run_python(nvml_env(fixture=write_fixture(tmp_path, data)), HANG)
    assert quick < 0.1
    assert 0.39 <= slow < 2


# --- the worker reads what gpu_facts reads ----------------------------------

READ_ALL = r'''
import json, pynvml
from llm_server_host import nvml_worker as _nvml_worker
pynvml.nvmlInit()
recorder = _nvml_worker.install_recorder()
out = [_nvml_worker.read_gpu(pynvml.nvmlDeviceGetHandleByIndex(i), i, recorder)
       for i in range(pynvml.nvmlDeviceGetCount())]
print(json.dumps(out))
'''


@pytest.mark.parametrize('fixture', [PARTIAL, 'target_dual_rtx_pro_6000', 'degraded_dual_rtx_pro_6000',
                                     'single_h100_80gb'])
def test_worker_record_is_the_gpu_facts_record(nvml_env, run_gpu_facts, fixture):
    rc, result, stderr = run_gpu_facts({'vendors': ['nvidia']}, fixture=fixture)
    assert rc == 0, stderr
    facts_gpus = result['ansible_facts']['gpus']
    records = run_python(nvml_env(fixture=fixture), READ_ALL)
    assert [r['facts'] for r in records] == facts_gpus


def test_worker_tells_unsupported_from_failed(nvml_env, tmp_path):
    data = fixture_data(PARTIAL)
    data['devices'][0]['errors'] = {'nvmlDeviceGetPowerUsage': 'GPU_IS_LOST',
                                    'nvmlDeviceGetTemperatureV': 'FUNCTION_NOT_FOUND',
                                    'nvmlDeviceGetPcieReplayCounter': 'UNKNOWN'}
    gpu0, gpu1 = run_python(nvml_env(fixture=write_fixture(tmp_path, data)), READ_ALL)
    # The temperature falls back to nvmlDeviceGetTemperature: read, nothing reported.
    assert gpu0['facts']['temperature_c'] == 71
    assert gpu0['unavailable'] == {'power_draw': 'gpu_is_lost', 'pcie_replays': 'unknown'}
    assert gpu1['unavailable'] == {
        'temperature_shutdown': 'not_supported', 'power_limit_constraints': 'not_supported',
        'ecc_errors': 'not_supported', 'ecc_errors_aggregate': 'not_supported',
        'remapped_rows': 'not_supported', 'recovery_action': 'not_supported'}


# --- errors ------------------------------------------------------------------

def test_error_names_and_reasons():
    assert _nvml_worker.error_name(3) == 'not_supported'
    assert _nvml_worker.error_name(15) == 'gpu_is_lost'
    assert _nvml_worker.error_name(12345) == 'error_12345'
    assert _nvml_worker._reason({}, ('nvmlDeviceGetX',)) == 'not_supported'
    assert _nvml_worker._reason({'a': 'function_not_found', 'b': 'timeout'}, ('a', 'b')) == 'timeout'
    assert _nvml_worker._reason({'a': 'function_not_found'}, ('a', 'b')) == 'function_not_found'


# --- capture_fixture.py keeps what the worker reads --------------------------

# llm-gpu-exporter as the host runs it (nvml_env puts host/ on PYTHONPATH).
ONCE = [sys.executable, '-m', 'llm_server_host.gpu_exporter']


def _exposition(env):
    proc = subprocess.run(ONCE + ['--once'], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if not line.startswith('llm_gpu_exporter_scrape_duration')]


def test_capture_fixture_keeps_what_the_exporter_reads(nvml_env, tmp_path):
    """capture_fixture.py (run on a lent GPU host) keeps every answer the exporter uses."""
    env = nvml_env(fixture=PARTIAL)
    capture = subprocess.run([sys.executable, os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'capture_fixture.py')],
                             env=env, capture_output=True, text=True, timeout=60, check=False)
    assert capture.returncode == 0, capture.stderr
    captured = tmp_path / 'captured.json'
    captured.write_text(capture.stdout)
    assert _exposition(nvml_env(fixture=str(captured))) == _exposition(env)
