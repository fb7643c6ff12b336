# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/modules/gpu_facts.py run as Ansible runs it: a subprocess reading a JSON args file.

NVIDIA data comes from the real pynvml talking to the NVML test double
(tests/doubles/nvml), AMD data from fake sysfs trees (tests/sysfs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
RX7900XTX_TREE = os.path.join(REPO_ROOT, 'tests', 'sysfs', 'amd_rx7900xtx')
EMPTY_SYSFS = {'sysfs_root': '/nonexistent-sysfs'}
DRIVER_NOT_LOADED = (
    'NVML could not initialise: Driver Not Loaded. The NVIDIA kernel module is not loaded: '
    'install the driver (homelab.llm_server.nvidia_driver) or reboot after installing it.')


def _ok(rc, result, stderr):
    assert rc == 0, (result, stderr)
    assert not result.get('failed'), result
    assert result['changed'] is False
    assert 'Traceback' not in stderr and 'exception' not in result
    return result['ansible_facts']


def test_target_fixture(run_gpu_facts):
    rc, result, stderr = run_gpu_facts(EMPTY_SYSFS, fixture='target_dual_rtx_pro_6000')
    facts = _ok(rc, result, stderr)
    assert result['nvml_error'] is None
    assert facts['gpu_nvml_error'] is None
    assert facts['gpu_count'] == 2
    assert facts['gpu_driver_version'] == '580.95.05'
    assert facts['gpu_cuda_driver_version'] == '13.0'
    assert facts['gpu_nvml_version'] == '13.580.95.05'
    assert [(g['vendor'], g['index'], g['pci_bus_id']) for g in facts['gpus']] == [
        ('nvidia', 0, '0000:01:00.0'), ('nvidia', 1, '0000:02:00.0')]
    for gpu in facts['gpus']:
        assert gpu['name'] == 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition'
        assert gpu['memory_total_bytes'] == 102641336320
        assert gpu['bar1_total_bytes'] == 102641336320
        assert (gpu['pcie_link_gen_current'], gpu['pcie_link_gen_max'], gpu['pcie_link_gen_gpu_max']) == (5, 5, 5)
        assert (gpu['pcie_link_width_current'], gpu['pcie_link_width_max']) == (16, 16)
        assert gpu['power_limit_w'] == 600.0
        assert gpu['architecture'] == 'blackwell'
        assert gpu['cuda_compute_capability'] == '12.0'
        assert gpu['persistence_mode'] is True
        assert gpu['throttle_reasons'] == ['gpu_idle']
        assert None not in gpu.values(), [k for k, v in gpu.items() if v is None]
    assert facts['gpu_topology'] == [{
        'gpus': [0, 1], 'common_ancestor': 'hostbridge',
        'p2p': {'read': 'ok', 'write': 'ok', 'nvlink': 'not_supported', 'atomics': 'not_supported'},
    }]


def test_degraded_fixture(run_gpu_facts):
    rc, result, stderr = run_gpu_facts(EMPTY_SYSFS, fixture='degraded_dual_rtx_pro_6000')
    facts = _ok(rc, result, stderr)
    gpu1 = facts['gpus'][1]
    assert (gpu1['pcie_link_gen_current'], gpu1['pcie_link_gen_max'], gpu1['pcie_link_gen_gpu_max']) == (4, 4, 5)
    assert (gpu1['pcie_link_width_current'], gpu1['pcie_link_width_max']) == (8, 16)
    assert gpu1['bar1_total_bytes'] == 256 * 1024 * 1024
    (pair,) = facts['gpu_topology']
    assert pair['common_ancestor'] == 'system'
    assert pair['p2p']['read'] == pair['p2p']['write'] == 'chipset_not_supported'


def test_h100_fixture(run_gpu_facts):
    rc, result, stderr = run_gpu_facts(EMPTY_SYSFS, fixture='single_h100_80gb')
    facts = _ok(rc, result, stderr)
    (gpu,) = facts['gpus']
    assert gpu['ecc_enabled'] is True and gpu['ecc_pending'] is True
    assert gpu['mig_enabled'] is False and gpu['mig_pending'] is False
    assert gpu['architecture'] == 'hopper'
    assert gpu['power_limit_w'] == 700.0
    assert facts['gpu_cuda_driver_version'] == '12.8'
    assert facts['gpu_topology'] == []


def test_a_gpu_that_hangs_nvml_is_abandoned_at_the_deadline(run_gpu_facts, tmp_path):
    # GPU 1 answers every call after 30 s, as a GPU that fell off the bus
    # can: the module must come back at its deadline, the AMD GPUs still read.
    with open(os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'fixtures', 'target_dual_rtx_pro_6000.json')) as handle:
        data = json.load(handle)
    data['devices'][1]['hang_ms'] = {'*': 30000}
    fixture = tmp_path / 'hung.json'
    fixture.write_text(json.dumps(data))
    started = time.monotonic()
    rc, result, stderr = run_gpu_facts({'sysfs_root': RX7900XTX_TREE, 'nvml_timeout': 2}, fixture=str(fixture))
    took = time.monotonic() - started
    facts = _ok(rc, result, stderr)
    assert took < 20, took
    assert facts['gpu_nvml_error'].startswith('NVML did not answer within 2 s')
    assert [gpu['vendor'] for gpu in facts['gpus']] == ['amd']
    # The same fixture without the hang reads both GPUs within the deadline.
    del data['devices'][1]['hang_ms']
    fixture.write_text(json.dumps(data))
    facts = _ok(*run_gpu_facts({'sysfs_root': EMPTY_SYSFS['sysfs_root'], 'nvml_timeout': 30}, fixture=str(fixture)))
    assert facts['gpu_nvml_error'] is None and facts['gpu_count'] == 2


def test_a_deadline_that_is_not_positive_fails(run_gpu_facts):
    rc, result, _stderr = run_gpu_facts({'nvml_timeout': 0}, fixture='target_dual_rtx_pro_6000')
    assert rc != 0 and result['failed']
    assert result['msg'] == 'nvml_timeout must be a positive number of seconds, not 0.0'


def test_init_failure(run_gpu_facts):
    rc, result, stderr = run_gpu_facts(EMPTY_SYSFS, fixture='nvml_init_failure')
    facts = _ok(rc, result, stderr)
    assert facts['gpus'] == [] and facts['gpu_count'] == 0
    assert facts['gpu_nvml_error'] == DRIVER_NOT_LOADED
    assert result['nvml_error'] == DRIVER_NOT_LOADED
    assert facts['gpu_driver_version'] is None and facts['gpu_cuda_driver_version'] is None
    assert facts['gpu_topology'] == []


def test_library_absent(run_gpu_facts, nvml_env):
    probe = subprocess.run([sys.executable, '-c', 'import ctypes; ctypes.CDLL("libnvidia-ml.so.1")'],
                           env=nvml_env(libdir=False), capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.skip('a real libnvidia-ml.so.1 is installed on this machine')
    rc, result, stderr = run_gpu_facts(EMPTY_SYSFS, fixture='target_dual_rtx_pro_6000', libdir=False)
    facts = _ok(rc, result, stderr)
    assert facts['gpus'] == []
    assert facts['gpu_nvml_error'].startswith('NVML could not initialise: NVML Shared Library Not Found.')
    assert 'libnvidia-ml.so.1' in facts['gpu_nvml_error']


def test_pynvml_not_importable_still_reports_amd(run_gpu_facts, tmp_path):
    shadow = tmp_path / 'shadow'
    shadow.mkdir()
    (shadow / 'pynvml.py').write_text('raise ImportError("No module named pynvml (blocked by test)")\n')
    rc, result, stderr = run_gpu_facts({'sysfs_root': RX7900XTX_TREE}, fixture='target_dual_rtx_pro_6000',
                                       pythonpath=[str(shadow)])
    facts = _ok(rc, result, stderr)
    assert 'nvidia-ml-py' in facts['gpu_nvml_error']
    assert facts['gpu_nvml_error'].startswith('Cannot query NVIDIA GPUs: Failed to import the required Python library')
    assert result['nvml_error'] == facts['gpu_nvml_error']
    assert [(g['vendor'], g['pci_bus_id']) for g in facts['gpus']] == [('amd', '0000:03:00.0')]
    assert facts['gpu_count'] == 1


def test_mixed_nvidia_and_amd(run_gpu_facts):
    rc, result, stderr = run_gpu_facts({'sysfs_root': RX7900XTX_TREE}, fixture='mixed_nvidia_amd')
    facts = _ok(rc, result, stderr)
    assert facts['gpu_nvml_error'] is None
    assert facts['gpu_count'] == 2
    nvidia, amd = facts['gpus']
    assert (nvidia['vendor'], nvidia['index'], nvidia['pci_bus_id']) == ('nvidia', 0, '0000:01:00.0')
    assert (amd['vendor'], amd['index'], amd['pci_bus_id']) == ('amd', 0, '0000:03:00.0')
    assert amd['name'] == 'AMD GPU 0x744c'
    assert amd['memory_total_bytes'] == 25753026560
    assert amd['bar1_total_bytes'] == 25753026560
    assert amd['pcie_link_gen_current'] == 4
    assert amd['temperature_c'] == 41
    assert amd['power_limit_w'] == 303.0
    assert amd['uuid'] is None and amd['throttle_reasons'] is None
    assert set(amd) == set(nvidia)
    assert facts['gpu_topology'] == []


def test_vendor_selection(run_gpu_facts):
    rc, result, stderr = run_gpu_facts({'sysfs_root': RX7900XTX_TREE, 'vendors': ['amd']},
                                       fixture='target_dual_rtx_pro_6000')
    facts = _ok(rc, result, stderr)
    assert [g['vendor'] for g in facts['gpus']] == ['amd']
    assert facts['gpu_nvml_error'] is None and facts['gpu_driver_version'] is None

    rc, result, stderr = run_gpu_facts({'sysfs_root': RX7900XTX_TREE, 'vendors': ['nvidia']},
                                       fixture='mixed_nvidia_amd')
    facts = _ok(rc, result, stderr)
    assert [g['vendor'] for g in facts['gpus']] == ['nvidia']


def test_invalid_vendor_is_rejected(run_gpu_facts):
    rc, result, dummy = run_gpu_facts({'vendors': ['intel']}, fixture='target_dual_rtx_pro_6000')
    assert rc == 1 and result['failed'] is True
    assert 'vendors' in result['msg'] and 'intel' in result['msg']


def test_field_not_supported_is_null(run_gpu_facts, tmp_path):
    with open(os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'fixtures', 'target_dual_rtx_pro_6000.json')) as f:
        data = json.load(f)
    data['devices'][0]['errors'] = {'nvmlDeviceGetPowerUsage': 'NVML_ERROR_NOT_SUPPORTED',
                                    'nvmlDeviceGetMaxPcieLinkWidth': 'NVML_ERROR_NOT_SUPPORTED'}
    fixture = tmp_path / 'not_supported.json'
    fixture.write_text(json.dumps(data))
    rc, result, stderr = run_gpu_facts(EMPTY_SYSFS, fixture=str(fixture))
    facts = _ok(rc, result, stderr)
    gpu0, gpu1 = facts['gpus']
    assert gpu0['power_draw_w'] is None and gpu0['pcie_link_width_max'] is None
    assert gpu0['power_limit_w'] == 600.0 and gpu0['pcie_link_width_current'] == 16
    assert gpu1['power_draw_w'] == 19.327 and gpu1['pcie_link_width_max'] == 16
    assert facts['gpu_nvml_error'] is None


def test_check_mode(run_gpu_facts):
    rc, result, stderr = run_gpu_facts({'sysfs_root': RX7900XTX_TREE, '_ansible_check_mode': True},
                                       fixture='mixed_nvidia_amd')
    facts = _ok(rc, result, stderr)
    assert facts['gpu_count'] == 2
    assert facts['gpus'][0]['uuid'] == 'GPU-3f8a2c41-7d5e-4b9a-8c16-0e2f4a6b8d10'
