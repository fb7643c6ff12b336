# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_nvml.py against the real pynvml and the NVML test double.

Each scenario runs in a subprocess (see tests/unit/conftest.py for why).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
FIXTURES = os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'fixtures')
MIB = 1024 * 1024


def nvml_fixture(name):
    return os.path.join(FIXTURES, name if name.endswith('.json') else name + '.json')


_spec = importlib.util.spec_from_file_location(
    '_nvml_under_test', os.path.join(REPO_ROOT, 'plugins', 'module_utils', '_nvml.py'))
nvml = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nvml)

COLLECT = r'''
import json
from ansible_collections.homelab.llm_server.plugins.module_utils import _nvml
result = _nvml.collect_nvidia()
try:
    import pynvml
    pynvml.nvmlDeviceGetCount()
    result['after'] = 'still initialised'
except Exception as err:
    result['after'] = type(err).__name__
print(json.dumps(result))
'''


def _python(env, code):
    proc = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    return proc


@pytest.fixture
def collect(nvml_env):
    """collect(fixture, libdir=True) -> collect_nvidia() result from a fresh process."""
    def run(fixture, libdir=True):
        proc = _python(nvml_env(fixture=fixture, libdir=libdir), COLLECT)
        assert proc.returncode == 0, proc.stderr
        assert 'Traceback' not in proc.stderr
        return json.loads(proc.stdout)
    return run


@pytest.fixture
def custom_fixture(tmp_path):
    """custom_fixture(base, edit) -> path of a copy of fixture `base` changed by edit(dict)."""
    def make(base, edit):
        with open(nvml_fixture(base)) as handle:
            data = json.load(handle)
        data = copy.deepcopy(data)
        edit(data)
        path = tmp_path / ('custom_%s.json' % base)
        path.write_text(json.dumps(data))
        return str(path)
    return make


# --- fixtures shipped with the double -------------------------------------

def test_target_dual_rtx_pro_6000(collect):
    result = collect('target_dual_rtx_pro_6000')
    assert result['error'] is None
    assert result['after'] == 'NVMLError_Uninitialized', 'nvmlShutdown was not called'
    assert result['driver_version'] == '580.95.05'
    assert result['nvml_version'] == '13.580.95.05'
    assert result['cuda_driver_version'] == '13.0'
    assert [gpu['index'] for gpu in result['gpus']] == [0, 1]
    gpu0, gpu1 = result['gpus']
    assert gpu0 == {
        'vendor': 'nvidia',
        'index': 0,
        'name': 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition',
        'uuid': 'GPU-3f8a2c41-7d5e-4b9a-8c16-0e2f4a6b8d10',
        'serial': '1792025001234',
        'pci_bus_id': '0000:01:00.0',
        'architecture': 'blackwell',
        'cuda_compute_capability': '12.0',
        'memory_total_bytes': 102641336320,
        'memory_used_bytes': 2 * MIB,
        'memory_free_bytes': 102641336320 - 540 * MIB - 2 * MIB,
        'bar1_total_bytes': 102641336320,
        'pcie_link_gen_current': 5,
        'pcie_link_gen_max': 5,
        'pcie_link_gen_gpu_max': 5,
        'pcie_link_width_current': 16,
        'pcie_link_width_max': 16,
        'temperature_c': 34,
        'temperature_slowdown_c': 95,
        'temperature_shutdown_c': 98,
        'power_draw_w': 21.843,
        'power_limit_w': 600.0,
        'power_limit_default_w': 600.0,
        'power_limit_min_w': 150.0,
        'power_limit_max_w': 600.0,
        'persistence_mode': True,
        'compute_mode': 'default',
        'ecc_enabled': False,
        'ecc_pending': False,
        'mig_enabled': False,
        'mig_pending': False,
        'clocks': {'graphics_mhz': 180, 'sm_mhz': 180, 'memory_mhz': 405,
                   'graphics_max_mhz': 3090, 'sm_max_mhz': 3090, 'memory_max_mhz': 14001},
        'throttle_reasons': ['gpu_idle'],
        'throttle_reasons_mask': 1,
    }
    assert gpu1['uuid'] == 'GPU-a1c9e7f2-5b3d-4e8a-9f60-7c2d1e4b3a95'
    assert gpu1['pci_bus_id'] == '0000:02:00.0'
    assert gpu1['temperature_c'] == 31
    assert gpu1['power_draw_w'] == 19.327
    assert result['topology'] == [{
        'gpus': [0, 1],
        'common_ancestor': 'hostbridge',
        'p2p': {'read': 'ok', 'write': 'ok', 'nvlink': 'not_supported', 'atomics': 'not_supported'},
    }]


def test_degraded_dual_rtx_pro_6000(collect):
    result = collect('degraded_dual_rtx_pro_6000')
    assert result['error'] is None
    gpu0, gpu1 = result['gpus']
    assert (gpu0['pcie_link_gen_current'], gpu0['pcie_link_width_current']) == (5, 16)
    assert gpu1['pci_bus_id'] == '0000:81:00.0'
    assert gpu1['pcie_link_gen_current'] == 4
    assert gpu1['pcie_link_gen_max'] == 4
    assert gpu1['pcie_link_gen_gpu_max'] == 5
    assert gpu1['pcie_link_width_current'] == 8
    assert gpu1['pcie_link_width_max'] == 16
    assert gpu1['bar1_total_bytes'] == 268435456
    assert gpu0['bar1_total_bytes'] == 102641336320
    assert result['topology'] == [{
        'gpus': [0, 1],
        'common_ancestor': 'system',
        'p2p': {'read': 'chipset_not_supported', 'write': 'chipset_not_supported',
                'nvlink': 'not_supported', 'atomics': 'not_supported'},
    }]


def test_single_h100(collect):
    result = collect('single_h100_80gb')
    assert result['error'] is None
    assert result['driver_version'] == '570.172.08'
    assert result['cuda_driver_version'] == '12.8'
    assert result['topology'] == []
    (gpu,) = result['gpus']
    assert gpu['name'] == 'NVIDIA H100 80GB HBM3'
    assert gpu['architecture'] == 'hopper'
    assert gpu['cuda_compute_capability'] == '9.0'
    assert gpu['memory_total_bytes'] == 81559 * MIB
    assert gpu['bar1_total_bytes'] == 128 * 1024 * MIB
    assert (gpu['ecc_enabled'], gpu['ecc_pending']) == (True, True)
    assert (gpu['mig_enabled'], gpu['mig_pending']) == (False, False)
    assert gpu['power_limit_w'] == 700.0
    assert gpu['power_limit_min_w'] == 200.0
    assert gpu['temperature_shutdown_c'] == 92


def test_init_failure(collect):
    result = collect('nvml_init_failure')
    assert result['gpus'] == []
    assert result['topology'] == []
    assert result['driver_version'] is None
    assert result['error'] == (
        'NVML could not initialise: Driver Not Loaded. The NVIDIA kernel module is not loaded: '
        'install the driver (homelab.llm_server.nvidia_driver) or reboot after installing it.')


def test_missing_fixture_file_means_driver_not_loaded(collect, tmp_path):
    result = collect(str(tmp_path / 'no-such-fixture.json'))
    assert result['gpus'] == []
    assert result['error'].startswith('NVML could not initialise: Driver Not Loaded.')


def test_library_absent(collect, nvml_env):
    probe = _python(nvml_env(libdir=False), 'import ctypes; ctypes.CDLL("libnvidia-ml.so.1")')
    if probe.returncode == 0:
        pytest.skip('a real libnvidia-ml.so.1 is installed on this machine')
    result = collect('target_dual_rtx_pro_6000', libdir=False)
    assert result['gpus'] == []
    assert result['error'].startswith('NVML could not initialise: NVML Shared Library Not Found.')
    assert 'libnvidia-ml.so.1' in result['error']
    assert 'homelab.llm_server.nvidia_driver' in result['error']


# --- per-field isolation ----------------------------------------------------

def test_errors_map_nulls_only_the_affected_fields(collect, custom_fixture):
    def edit(data):
        data['devices'][1]['errors'] = {
            'nvmlDeviceGetSerial': 'NVML_ERROR_NOT_SUPPORTED',
            'nvmlDeviceGetEccMode': 'NOT_SUPPORTED',
            'nvmlDeviceGetBAR1MemoryInfo': 3,
            'nvmlDeviceGetPowerManagementLimitConstraints': 'NVML_ERROR_NO_PERMISSION',
            'nvmlDeviceGetCurrentClocksEventReasons': 'NVML_ERROR_NOT_SUPPORTED',
            'nvmlDeviceGetCurrentClocksThrottleReasons': 'NVML_ERROR_NOT_SUPPORTED',
            'nvmlDeviceGetArchitecture': 'NVML_ERROR_UNKNOWN',
        }
        del data['devices'][1]['mig']
        del data['devices'][1]['temperature']['slowdown']
    result = collect(custom_fixture('target_dual_rtx_pro_6000', edit))
    assert result['error'] is None
    gpu0, gpu1 = result['gpus']
    for key in ('serial', 'ecc_enabled', 'ecc_pending', 'bar1_total_bytes', 'power_limit_min_w',
                'power_limit_max_w', 'throttle_reasons', 'throttle_reasons_mask', 'architecture',
                'mig_enabled', 'mig_pending', 'temperature_slowdown_c'):
        assert gpu1[key] is None, key
        assert gpu0[key] is not None, key
    # everything else on the same GPU is still there
    assert gpu1['uuid'] == 'GPU-a1c9e7f2-5b3d-4e8a-9f60-7c2d1e4b3a95'
    assert gpu1['temperature_c'] == 31
    assert gpu1['temperature_shutdown_c'] == 98
    assert gpu1['power_limit_w'] == 600.0
    assert gpu1['memory_total_bytes'] == 102641336320
    assert set(gpu1) == set(nvml.GPU_KEYS)


def test_fallbacks_to_older_nvml_calls(collect, custom_fixture):
    def edit(data):
        data['devices'][0]['errors'] = {
            'nvmlDeviceGetMemoryInfo_v2': 'NVML_ERROR_FUNCTION_NOT_FOUND',
            'nvmlDeviceGetTemperatureV': 'NVML_ERROR_FUNCTION_NOT_FOUND',
            'nvmlDeviceGetCurrentClocksEventReasons': 'NVML_ERROR_FUNCTION_NOT_FOUND',
            'nvmlDeviceGetPowerManagementLimit': 'NVML_ERROR_NOT_SUPPORTED',
        }
        data['devices'][0]['power']['enforced_limit_mw'] = 450000
        data['devices'][0]['clocks_event_reasons'] = 0x44
        data['errors'] = {'nvmlSystemGetCudaDriverVersion_v2': 'NVML_ERROR_FUNCTION_NOT_FOUND'}
    result = collect(custom_fixture('target_dual_rtx_pro_6000', edit))
    gpu0 = result['gpus'][0]
    # v1 memory info counts driver-reserved memory as used
    assert gpu0['memory_used_bytes'] == 540 * MIB + 2 * MIB
    assert gpu0['memory_free_bytes'] == 102641336320 - 540 * MIB - 2 * MIB
    assert gpu0['temperature_c'] == 34
    assert gpu0['throttle_reasons_mask'] == 0x44
    assert gpu0['throttle_reasons'] == ['sw_power_cap', 'hw_thermal_slowdown']
    assert gpu0['power_limit_w'] == 450.0
    assert result['cuda_driver_version'] == '13.0'


def test_lost_gpu_is_reported_and_the_others_still_read(collect, custom_fixture):
    def edit(data):
        data['devices'][0]['errors'] = {'nvmlDeviceGetHandleByIndex': 'NVML_ERROR_GPU_IS_LOST'}
    result = collect(custom_fixture('target_dual_rtx_pro_6000', edit))
    gpu0, gpu1 = result['gpus']
    assert gpu0['index'] == 0 and gpu0['name'] is None and gpu0['vendor'] == 'nvidia'
    assert set(gpu0) == set(nvml.GPU_KEYS)
    assert gpu1['name'] == 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition'
    assert result['error'] == 'NVML could not open GPU 0: GPU is lost.'
    assert result['topology'] == []


def test_nvml_init_error_hints(collect, custom_fixture):
    def edit(data):
        data['init_error'] = 'NVML_ERROR_LIB_RM_VERSION_MISMATCH'
    result = collect(custom_fixture('target_dual_rtx_pro_6000', edit))
    assert result['error'].startswith('NVML could not initialise: RM has detected an NVML/RM version mismatch.')
    assert 'reboot' in result['error']


# --- the double itself ------------------------------------------------------

DOUBLE_CHECKS = r'''
import json, pynvml as n
out = {}
def err(fn, *a):
    try:
        fn(*a)
        return None
    except n.NVMLError as e:
        return type(e).__name__
out['shutdown_before_init'] = err(n.nvmlShutdown)
n.nvmlInit(); n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
out['bad_index'] = err(n.nvmlDeviceGetHandleByIndex, 7)
out['mem_v2_bad_version'] = err(n.nvmlDeviceGetMemoryInfo, h, 0x01000028)
out['bad_sensor'] = err(n.nvmlDeviceGetTemperature, h, 1)
out['bad_threshold'] = err(n.nvmlDeviceGetTemperatureThreshold, h, 99)
out['not_in_fixture'] = err(n.nvmlDeviceGetTemperatureThreshold, h, 4)
pci = n.nvmlPciInfoExt_v1_t(); pci.version = n.nvmlPciInfoExt_v1
n.nvmlDeviceGetPciInfoExt(h, n.byref(pci))
s = lambda v: v.decode() if isinstance(v, bytes) else v
out['pci_ext'] = [s(pci.busId), pci.pciDeviceId, pci.baseClass, pci.subClass]
legacy = n.nvmlDeviceGetPciInfo(h)
out['pci_legacy'] = s(legacy.busIdLegacy)
out['self_ancestor'] = n.nvmlDeviceGetTopologyCommonAncestor(h, h)
out['error_string'] = n.nvmlErrorString(n.NVML_ERROR_DRIVER_NOT_LOADED)
n.nvmlShutdown()
out['after_one_shutdown'] = n.nvmlDeviceGetCount()
n.nvmlShutdown()
out['after_two_shutdowns'] = err(n.nvmlDeviceGetCount)
print(json.dumps(out))
'''


def test_double_follows_nvml_conventions(nvml_env):
    proc = _python(nvml_env(fixture='single_h100_80gb'), DOUBLE_CHECKS)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out == {
        'shutdown_before_init': 'NVMLError_Uninitialized',
        'bad_index': 'NVMLError_InvalidArgument',
        'mem_v2_bad_version': 'NVMLError_ArgumentVersionMismatch',
        'bad_sensor': 'NVMLError_InvalidArgument',
        'bad_threshold': 'NVMLError_InvalidArgument',
        'not_in_fixture': 'NVMLError_NotSupported',
        'pci_ext': ['00000000:18:00.0', 0x233010DE, 3, 2],
        'pci_legacy': '0000:18:00.0',
        'self_ancestor': 0,
        'error_string': 'Driver Not Loaded',
        'after_one_shutdown': 1,
        'after_two_shutdowns': 'NVMLError_Uninitialized',
    }


def test_double_reports_invalid_json(nvml_env, tmp_path):
    bad = tmp_path / 'bad.json'
    bad.write_text('{"devices": [\n  {"name": "x",}\n]}')
    proc = _python(nvml_env(fixture=str(bad)), 'import pynvml; pynvml.nvmlInit()')
    assert proc.returncode != 0
    assert 'NVMLError_Unknown' in proc.stderr
    assert 'invalid JSON in fixture %s: expected object key at line 2 column 16' % bad in proc.stderr


def test_double_fixture_schema_of_shipped_fixtures():
    """Shipped fixtures stay valid JSON with the documented top-level keys."""
    names = sorted(os.listdir(FIXTURES))
    assert {'target_dual_rtx_pro_6000.json', 'degraded_dual_rtx_pro_6000.json', 'single_h100_80gb.json',
            'nvml_init_failure.json', 'mixed_nvidia_amd.json'} <= set(names)
    for name in names:
        with open(nvml_fixture(name)) as handle:
            data = json.load(handle)
        assert set(data) <= {'description', 'init_error', 'driver_version', 'nvml_version',
                             'cuda_driver_version', 'devices', 'topology', 'errors', 'hang_ms', 'live',
                             'state_file'}, name
        assert data['description'], name


# --- pure helpers (in process) ---------------------------------------------

@pytest.mark.parametrize('raw, expected', [
    ('00000000:01:00.0', '0000:01:00.0'),
    (b'00000000:81:00.0', '0000:81:00.0'),
    ('0000:C1:00.1', '0000:c1:00.1'),
    ('01:00.0', '0000:01:00.0'),
    ('00010000:01:00.0', '10000:01:00.0'),
    ('', None),
    (None, None),
    ('garbage', 'garbage'),
])
def test_normalise_pci_bus_id(raw, expected):
    assert nvml.normalise_pci_bus_id(raw) == expected


@pytest.mark.parametrize('raw, expected', [(13000, '13.0'), (12080, '12.8'), (12020, '12.2'), (0, None), (None, None)])
def test_format_cuda_version(raw, expected):
    assert nvml.format_cuda_version(raw) == expected


def test_throttle_reason_names():
    assert nvml.throttle_reason_names(None) is None
    assert nvml.throttle_reason_names(0) == []
    assert nvml.throttle_reason_names(0x1FF) == [name for _bit, name in nvml.THROTTLE_REASONS]
    assert nvml.throttle_reason_names(0x401) == ['gpu_idle', 'unknown_0x400']


def test_blank_gpu_has_every_key():
    gpu = nvml.blank_gpu('nvidia', 3)
    assert tuple(gpu) == nvml.GPU_KEYS
    assert gpu['index'] == 3 and gpu['vendor'] == 'nvidia'
    assert gpu['clocks'] == dict.fromkeys(nvml.CLOCK_KEYS)


def test_capture_roundtrip_reproduces_gpu_facts(fake_nvml_libdir, tmp_path):
    """capture_fixture.py + the double reproduce what gpu_facts reads from an NVML."""
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[4]
    env = dict(os.environ, LD_LIBRARY_PATH=str(fake_nvml_libdir),
               FAKE_NVML_FIXTURE=str(root / 'tests/doubles/nvml/fixtures/degraded_dual_rtx_pro_6000.json'))
    proc = subprocess.run([sys.executable, str(root / 'tests/doubles/nvml/roundtrip.py'),
                           '--double-dir', str(fake_nvml_libdir), '--out', str(tmp_path)],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ', 0 failed' in proc.stdout
    captured = json.loads((tmp_path / 'captured_fixture.json').read_text())
    assert captured['devices'][1]['pcie']['width_current'] == 8
    assert captured['devices'][1]['bar1']['total'] == 268435456
