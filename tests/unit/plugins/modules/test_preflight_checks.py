# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run plugins/modules/preflight_checks.py as a subprocess, the way Ansible runs a module."""

from __future__ import annotations

import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
MODULE = os.path.join(REPO, 'plugins', 'modules', 'preflight_checks.py')
TREES = os.path.join(REPO, 'tests', 'sysfs', 'preflight')

CHECK_IDS = [
    'uefi_boot', 'secure_boot', 'gpu_count', 'nvidia_driver', 'nouveau', 'resizable_bar', 'pcie_link', 'p2p',
    'iommu_acs', 'kernel_headers', 'model_dir_disk', 'ram', 'psu_headroom', 'power_on_after_power_loss', 'ups',
]
GIB = 1024 ** 3


@pytest.fixture
def run_module(module_runner):
    return lambda args, **kwargs: module_runner('preflight_checks', args, **kwargs)


def tree_args(case):
    base = os.path.join(TREES, case)
    return {
        'sysfs_root': os.path.join(base, 'sys'),
        'procfs_root': os.path.join(base, 'proc'),
        'modules_root': os.path.join(base, 'lib', 'modules'),
    }


def gpu(index, bdf, **overrides):
    data = {
        'vendor': 'nvidia', 'index': index, 'name': 'NVIDIA GeForce RTX 5090', 'pci_bus_id': bdf,
        'memory_total_bytes': 32 * GIB, 'bar1_total_bytes': 32 * GIB,
        'pcie_link_gen_current': 1, 'pcie_link_gen_max': 5, 'pcie_link_gen_gpu_max': 5,
        'pcie_link_width_current': 16, 'pcie_link_width_max': 16,
        'power_limit_w': 575, 'power_limit_max_w': 600, 'persistence_mode': True,
    }
    data.update(overrides)
    return data


# GPU addresses in each fake tree (they match the NVML fixtures)
CASE_BDFS = {
    'target': ('00000000:01:00.0', '00000000:02:00.0'),
    'degraded': ('00000000:01:00.0', '00000000:81:00.0'),
    'acs_switch': ('00000000:03:00.0', '00000000:04:00.0'),
}


def base_args(case, tmp_path, **overrides):
    args = {
        'gpus': [gpu(index, bdf) for index, bdf in enumerate(CASE_BDFS[case])],
        'gpu_topology': [{'gpus': [0, 1], 'common_ancestor': 'multiple', 'p2p': {'read': 'ok', 'write': 'ok'}}],
        'nvml_error': None,
        'model_dir': str(tmp_path / 'models'),
        'model_dir_min_free_gb': 0,
        'planned_model_gb': 70,
        'psu_watts': 1800,
        'expected_gpu_count': 2,
    }
    args.update(tree_args(case))
    args.update(overrides)
    return args


def statuses(result):
    return dict((check['id'], check['status']) for check in result['checks'])


def test_module_target_host_passes(run_module, tmp_path):
    rc, result = run_module(base_args('target', tmp_path))
    assert rc == 0, result
    assert result.get('failed') is not True
    assert result['changed'] is False
    assert [check['id'] for check in result['checks']] == CHECK_IDS
    assert result['verdict'] == 'pass'
    assert result['failed_checks'] == []
    assert result['summary'] == {'pass': 13, 'warn': 0, 'fail': 0, 'manual': 1, 'skip': 1}
    assert statuses(result)['power_on_after_power_loss'] == 'manual'
    assert result['report_lines'][8] == ('[PASS] iommu_acs: IOMMU passthrough (iommu=pt); the GPUs share no PCIe '
                                         'switch, so ACS redirect cannot reroute their traffic.')
    for check in result['checks']:
        assert set(check) == {'id', 'title', 'status', 'severity', 'message', 'why', 'fix'}


def test_module_degraded_host_reports_but_does_not_fail(run_module, tmp_path):
    args = base_args('degraded', tmp_path, gpus=[
        gpu(0, '00000000:01:00.0'),
        gpu(1, '00000000:81:00.0', bar1_total_bytes=256 * 1024 ** 2, pcie_link_gen_current=4, pcie_link_gen_max=4,
            pcie_link_width_current=8),
    ], gpu_topology=[{'gpus': [0, 1], 'common_ancestor': 'system',
                      'p2p': {'read': 'chipset_not_supported', 'write': 'chipset_not_supported'}}], psu_watts=1600)
    rc, result = run_module(args)
    assert rc == 0, result
    assert result.get('failed') is not True
    assert result['verdict'] == 'fail'
    assert result['failed_checks'] == ['nouveau', 'resizable_bar', 'pcie_link', 'kernel_headers', 'ram',
                                       'psu_headroom']
    got = statuses(result)
    assert got['secure_boot'] == 'warn'
    assert got['iommu_acs'] == 'warn'
    assert got['p2p'] == 'warn'
    checks = dict((check['id'], check) for check in result['checks'])
    assert 'GPU 1 (0000:81:00.0) BAR1 256 MiB vs VRAM 32.0 GiB' in checks['resizable_bar']['message']
    assert 'translated DMA mode' in checks['iommu_acs']['message']
    assert 'vLLM tensor-parallel hangs' in checks['iommu_acs']['message']
    assert 'peer-to-peer' in checks['p2p']['message']
    assert 'the inventory says 1600 W' in checks['psu_headroom']['message']
    assert ('[FAIL] pcie_link: GPU 1 (0000:81:00.0) PCIe link downtrained: running Gen4 x8, max Gen4 x16, '
            'GPU supports Gen5. -> fix: ') in result['report_lines'][6]


def test_module_acs_switch(run_module, tmp_path):
    rc, result = run_module(base_args('acs_switch', tmp_path))
    assert rc == 0, result
    checks = dict((check['id'], check) for check in result['checks'])
    assert checks['iommu_acs']['status'] == 'warn'
    assert 'ACS P2P Request/Completion Redirect is enabled on bridge 0000:02:08.0' in checks['iommu_acs']['message']
    assert 'vLLM tensor-parallel hangs' in checks['iommu_acs']['message']
    assert 'setpci -s 0000:02:08.0 ECAP_ACS+0x6.w=0000' in checks['iommu_acs']['fix']
    assert result['failed_checks'] == []
    assert result['verdict'] == 'warn'


def test_module_options_severity_skip_and_check_mode(run_module, tmp_path):
    args = base_args('degraded', tmp_path, severity={'nouveau': 'warn', 'iommu_acs': 'ignore'},
                     skip=['kernel_headers', 'ram', 'psu_headroom'])
    args['_ansible_check_mode'] = True
    rc, result = run_module(args)
    assert rc == 0, result
    got = statuses(result)
    assert got['nouveau'] == 'warn'
    assert got['iommu_acs'] == 'skip'
    assert got['kernel_headers'] == got['ram'] == got['psu_headroom'] == 'skip'
    assert result['failed_checks'] == []
    assert result['verdict'] == 'warn'


def test_module_nvml_error(run_module, tmp_path):
    rc, result = run_module(base_args('degraded', tmp_path, gpus=[], expected_gpu_count=2,
                                      nvml_error='NVML could not initialise: Driver Not Loaded.'))
    assert rc == 0
    checks = dict((check['id'], check) for check in result['checks'])
    assert checks['nvidia_driver']['status'] == 'fail'
    assert checks['nvidia_driver']['message'] == ('NVIDIA driver not usable: NVML could not initialise: '
                                                  'Driver Not Loaded. The nvidia kernel module is not loaded.')
    assert checks['gpu_count']['status'] == 'fail'
    assert 'Only 0 of 2 expected GPUs' in checks['gpu_count']['message']


def test_module_defaults_on_a_legacy_host(run_module, tmp_path):
    empty = tmp_path / 'empty'
    empty.mkdir()
    rc, result = run_module({'sysfs_root': str(empty), 'procfs_root': str(empty), 'modules_root': str(empty),
                             'model_dir': str(tmp_path)})
    assert rc == 0, result
    got = statuses(result)
    assert got['uefi_boot'] == 'fail'
    assert got['secure_boot'] == 'skip'
    assert got['psu_headroom'] == 'warn'
    checks = dict((check['id'], check) for check in result['checks'])
    assert checks['psu_headroom']['message'].startswith('PSU size unknown: set psu_watts.')
    assert checks['uefi_boot']['severity'] == 'fail'
    assert checks['p2p']['severity'] == 'warn'


@pytest.mark.parametrize('option, value, expected', [
    ('severity', {'bogus_check': 'warn'}, 'severity: unknown check id(s) bogus_check; valid ids: uefi_boot, '),
    ('severity', {'ram': 'loud'}, "severity: invalid value 'loud' for check ram"),
    ('skip', ['uefi_boot', 'nope'], 'skip: unknown check id(s) nope; valid ids: uefi_boot, '),
])
def test_module_rejects_bad_input(run_module, tmp_path, option, value, expected):
    rc, result = run_module(base_args('target', tmp_path, **{option: value}))
    assert rc != 0
    assert result['failed'] is True
    assert expected in result['msg']
    if 'valid ids' in expected:
        assert 'power_on_after_power_loss' in result['msg']


def test_module_rejects_bad_choice(run_module, tmp_path):
    rc, result = run_module(base_args('target', tmp_path, psu_power_limit_source='nameplate'))
    assert rc != 0
    assert result['failed'] is True
    assert 'psu_power_limit_source' in result['msg']


def test_module_asks_upsc_for_the_ups_and_fails_it_when_nut_cannot_read_it(run_module, tmp_path, monkeypatch):
    # NUT's client at its boundary: a stand-in upsc first on PATH, answering as
    # upsd does for a UPS whose driver could not reach it.
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    calls = tmp_path / 'upsc-calls'
    upsc = bin_dir / 'upsc'
    upsc.write_text('#!/bin/sh\necho "$@" >> %s\necho "Error: Driver not connected" >&2\nexit 1\n' % calls)
    upsc.chmod(0o755)
    monkeypatch.setenv('PATH', '%s:%s' % (bin_dir, os.environ.get('PATH', '')))
    (tmp_path / 'ups.conf').write_text('[back_room]\n  driver = "usbhid-ups"\n  port = "auto"\n')
    rc, result = run_module(dict(base_args('target', tmp_path), ups_name='back_room', nut_config_dir=str(tmp_path)))
    assert rc == 0, result
    assert statuses(result)['ups'] == 'fail'
    assert result['verdict'] == 'fail'
    assert result['failed_checks'] == ['ups']
    assert calls.read_text() == 'back_room@localhost ups.status\n'
    assert ('[FAIL] ups: UPS back_room is set up in %s (driver usbhid-ups, port auto) but NUT cannot read it: '
            'upsc back_room@localhost ups.status says "Error: Driver not connected".' % (tmp_path / 'ups.conf')
            ) in result['report_lines'][-1]
