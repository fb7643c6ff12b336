# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_preflight.py (pure functions + fake host trees)."""

from __future__ import annotations

import collections
import importlib.util
import os
import shutil
import struct

import pytest
from sysfs_tree import Link, attr, tree_differences, write_file, write_pci_device, write_tree  # tests/sysfs

# tests/unit/conftest.py makes the collection importable.
from ansible_collections.homelab.llm_server.plugins.module_utils import _preflight as pf
from ansible_collections.homelab.llm_server.plugins.filter.preflight import (
    FilterModule,
    preflight_report_lines,
)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
TREES = os.path.join(REPO, 'tests', 'sysfs', 'preflight')


def _load_make_trees():
    spec = importlib.util.spec_from_file_location('preflight_make_trees', os.path.join(TREES, 'make_trees.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_trees = _load_make_trees()

GIB = 1024 ** 3
MIB = 1024 ** 2
StatVfs = collections.namedtuple('StatVfs', 'f_bavail f_frsize')


def roots(case):
    base = os.path.join(TREES, case)
    return {
        'sysfs_root': os.path.join(base, 'sys'),
        'procfs_root': os.path.join(base, 'proc'),
        'modules_root': os.path.join(base, 'lib', 'modules'),
    }


# GPU addresses in each fake tree (they match the NVML fixtures in tests/doubles/nvml/fixtures)
CASE_BDFS = {
    'target': ('00000000:01:00.0', '00000000:02:00.0'),
    'degraded': ('00000000:01:00.0', '00000000:81:00.0'),
    'acs_switch': ('0000:03:00.0', '0000:04:00.0'),
}


def gpu(index=0, bdf='0000:01:00.0', **overrides):
    data = {
        'vendor': 'nvidia', 'index': index, 'name': 'NVIDIA GeForce RTX 5090', 'pci_bus_id': bdf,
        'memory_total_bytes': 32 * GIB, 'bar1_total_bytes': 32 * GIB,
        'pcie_link_gen_current': 1, 'pcie_link_gen_max': 5, 'pcie_link_gen_gpu_max': 5,
        'pcie_link_width_current': 16, 'pcie_link_width_max': 16,
        'power_limit_w': 575, 'power_limit_max_w': 600, 'persistence_mode': True,
        'driver_version': '570.133.07',
    }
    data.update(overrides)
    return data


def two_gpus(case='target', **overrides):
    return [gpu(index, bdf, **overrides) for index, bdf in enumerate(CASE_BDFS[case])]


def params(case='target', **overrides):
    data = {
        'gpus': two_gpus(case),
        'gpu_topology': [{'gpus': [0, 1], 'common_ancestor': 'multiple', 'p2p': {'read': 'ok', 'write': 'ok'}}],
        'nvml_error': None,
        'model_dir': '/srv/models',
        'model_dir_min_free_gb': 200,
        'planned_model_gb': 0,
        'ram_to_model_ratio': 1.0,
        'psu_watts': 2000,
        'cpu_power_allowance_w': 250,
        'psu_headroom_percent': 20,
        'psu_power_limit_source': 'max',
        'expected_gpu_count': 0,
        'severity': {},
        'skip': [],
    }
    data.update(roots(case))
    data.update(overrides)
    return data


def big_disk(path):
    return StatVfs(f_bavail=1000 * 1000 ** 3 // 4096, f_frsize=4096)


def run(check_id, case='target', statvfs=big_disk, **overrides):
    prm = params(case, **overrides)
    ctx = pf._Ctx(prm, statvfs=statvfs)
    return pf.run_check(check_id, ctx, prm.get('severity'), set(prm.get('skip') or []))


def copy_case(case, tmp_path):
    dest = str(tmp_path / case)
    shutil.copytree(os.path.join(TREES, case), dest, symlinks=True)
    return {
        'sysfs_root': os.path.join(dest, 'sys'),
        'procfs_root': os.path.join(dest, 'proc'),
        'modules_root': os.path.join(dest, 'lib', 'modules'),
    }


def assert_check_shape(check):
    assert set(check) == {'id', 'title', 'status', 'severity', 'message', 'why', 'fix'}
    assert check['status'] in pf.STATUSES
    assert check['severity'] in pf.SEVERITIES
    for key in ('title', 'message', 'why', 'fix'):
        assert check[key] and isinstance(check[key], str)


# ---------------------------------------------------------------------------
# helpers and parsing


@pytest.mark.parametrize('value, expected', [
    ('0000:01:00.0', '0000:01:00.0'),
    ('00000000:01:00.0', '0000:01:00.0'),
    ('0000:0A:1F.7', '0000:0a:1f.7'),
    ('01:00.0', '0000:01:00.0'),
    ('10000:e1:00.0', '10000:e1:00.0'),
    ('nonsense', None),
    (None, None),
])
def test_normalize_bdf(value, expected):
    assert pf.normalize_bdf(value) == expected


def test_committed_trees_match_generator(tmp_path):
    make_trees.build_all(str(tmp_path))
    for case in make_trees.CASES:
        assert tree_differences(str(tmp_path / case), os.path.join(TREES, case)) == []


def test_generator_is_deterministic(tmp_path):
    make_trees.build_all(str(tmp_path / 'a'))
    make_trees.build_all(str(tmp_path / 'b'))
    for case in make_trees.CASES:
        assert tree_differences(str(tmp_path / 'a' / case), str(tmp_path / 'b' / case)) == []


def test_config_files_are_4096_bytes():
    for case in make_trees.CASES:
        for base, dummy, files in os.walk(os.path.join(TREES, case, 'sys', 'devices')):
            if 'config' in files:
                assert os.path.getsize(os.path.join(base, 'config')) == 4096


def test_parse_acs_control_walks_extended_capabilities():
    cfg = make_trees.pci_config(0x10B5, 0x8747, 0x060400, 1, 6, [
        (0x100, make_trees.AER, 1, {}), (0x138, make_trees.DSN, 1, {}), make_trees.acs_cap(0x148, 0x001D)])
    assert pf.find_ext_capability(cfg, pf.PCI_EXT_CAP_ID_ACS) == 0x148
    assert pf.parse_acs_control(cfg) == ('ok', 0x001D)


def test_parse_acs_control_without_acs_and_short_read():
    cfg = make_trees.pci_config(0x10DE, 0x2B85, 0x030000, 0x80, 0, [(0x100, make_trees.AER, 2, {})])
    assert pf.parse_acs_control(cfg) == ('no_acs', None)
    # non-root readers of sysfs config only get the first 64 bytes
    assert pf.parse_acs_control(cfg[:64]) == ('unreadable', None)
    assert pf.parse_acs_control(None) == ('unreadable', None)
    empty = bytes(4096)
    assert pf.parse_acs_control(empty) == ('no_acs', None)


def test_find_ext_capability_survives_a_loop():
    cfg = bytearray(4096)
    struct.pack_into('<I', cfg, 0x100, 0x0001 | (1 << 16) | (0x100 << 20))  # AER pointing to itself
    assert pf.find_ext_capability(bytes(cfg), pf.PCI_EXT_CAP_ID_ACS) is None


def test_upstream_bridges_resolve_inside_fake_tree():
    bridges = pf.pci_upstream_bridges(roots('acs_switch')['sysfs_root'], '0000:04:00.0')
    assert [name for name, dummy in bridges] == ['0000:02:10.0', '0000:01:00.0', '0000:00:01.0']
    assert all(path.startswith(os.path.join(TREES, 'acs_switch', 'sys', 'devices')) for dummy, path in bridges)
    assert pf.pci_upstream_bridges(roots('target')['sysfs_root'], '0000:02:00.0') == [
        ('0000:00:01.1', os.path.join(TREES, 'target', 'sys', 'devices', 'pci0000:00', '0000:00:01.1'))]
    assert pf.pci_upstream_bridges(roots('degraded')['sysfs_root'], '0000:81:00.0')[0][0] == '0000:80:01.0'
    assert pf.pci_upstream_bridges(roots('target')['sysfs_root'], '0000:09:00.0') is None


def test_absolute_symlink_is_kept_inside_the_root(tmp_path):
    sysfs = str(tmp_path / 'sys')
    device = write_pci_device(sysfs, 'pci0000:00/0000:00:02.0/0000:05:00.0', {}, link=False)
    write_tree(sysfs, {'bus/pci/devices/0000:05:00.0': Link('/sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0')})
    bridges = pf.pci_upstream_bridges(sysfs, '0000:05:00.0')
    assert bridges == [('0000:00:02.0', os.path.dirname(device))]


def test_read_meminfo_and_cmdline():
    assert pf.read_meminfo_bytes(roots('target')['procfs_root']) == 263581576 * 1024
    assert 'iommu=pt' in pf.read_cmdline(roots('target')['procfs_root'])
    assert 'nouveau' in pf.read_loaded_modules(roots('degraded')['procfs_root'])
    assert pf.read_meminfo_bytes('/nonexistent') is None


# ---------------------------------------------------------------------------
# 1 uefi_boot


def test_uefi_boot_pass():
    check = run('uefi_boot')
    assert_check_shape(check)
    assert check['status'] == 'pass'
    assert check['title'] == pf.TITLES['uefi_boot']


def test_uefi_boot_fail_on_legacy_boot(tmp_path):
    check = run('uefi_boot', sysfs_root=str(tmp_path))
    assert check['status'] == 'fail'
    assert 'Legacy BIOS / CSM boot' in check['message']
    assert 'CSM' in check['fix']


@pytest.mark.parametrize('severity, status', [('warn', 'warn'), ('ignore', 'skip'), ('fail', 'fail')])
def test_uefi_boot_severity_override(tmp_path, severity, status):
    check = run('uefi_boot', sysfs_root=str(tmp_path), severity={'uefi_boot': severity})
    assert check['status'] == status
    assert check['severity'] == severity


# ---------------------------------------------------------------------------
# 2 secure_boot


def test_secure_boot_off_passes():
    check = run('secure_boot')
    assert check['status'] == 'pass'
    assert 'Secure Boot is disabled' in check['message']


def test_secure_boot_on_warns_about_mok():
    check = run('secure_boot', 'degraded')
    assert check['status'] == 'warn'
    assert 'Machine Owner Key' in check['message']
    assert 'enrolled at the next boot' in check['message']
    assert 'mokutil' in check['fix']


def test_secure_boot_on_with_fail_severity():
    assert run('secure_boot', 'degraded', severity={'secure_boot': 'fail'})['status'] == 'fail'


def test_secure_boot_unknown_under_uefi(tmp_path):
    write_tree(tmp_path, {'firmware/efi': {}})
    check = run('secure_boot', sysfs_root=str(tmp_path))
    assert check['status'] == 'warn'
    assert 'unknown' in check['message']


def test_secure_boot_skipped_without_uefi(tmp_path):
    assert run('secure_boot', sysfs_root=str(tmp_path))['status'] == 'skip'


def test_secure_boot_legacy_vars_and_setup_mode(tmp_path):
    guid = pf.EFI_GLOBAL_VARIABLE_GUID
    write_tree(tmp_path, {'firmware/efi/vars/SecureBoot-%s/data' % guid: bytes([0]),
                          'firmware/efi/vars/SetupMode-%s/data' % guid: bytes([1])})
    check = run('secure_boot', sysfs_root=str(tmp_path))
    assert check['status'] == 'pass'
    assert 'Setup Mode' in check['message']


# ---------------------------------------------------------------------------
# 3 gpu_count


def test_gpu_count_not_configured_is_skipped():
    check = run('gpu_count')
    assert check['status'] == 'skip'
    assert '2 GPUs visible' in check['message']


def test_gpu_count_missing_gpu_fails():
    check = run('gpu_count', expected_gpu_count=3)
    assert check['status'] == 'fail'
    assert 'Only 2 of 3 expected GPUs are visible' in check['message']
    # the fake PCI bus lists both NVIDIA display controllers
    assert '2 NVIDIA display controllers: 0000:01:00.0, 0000:02:00.0' in check['message']
    assert 'riser' in check['fix']


def test_gpu_count_pass():
    check = run('gpu_count', expected_gpu_count=2)
    assert check['status'] == 'pass'
    assert '2 GPUs visible, 2 expected' in check['message']


# ---------------------------------------------------------------------------
# 4 nvidia_driver


def test_nvidia_driver_pass():
    check = run('nvidia_driver')
    assert check['status'] == 'pass'
    assert 'driver 570.133.07' in check['message']


def test_nvidia_driver_error_with_module_not_loaded():
    check = run('nvidia_driver', 'degraded', gpus=[], nvml_error='NVML could not initialise: Driver Not Loaded.')
    assert check['status'] == 'fail'
    assert check['message'] == ('NVIDIA driver not usable: NVML could not initialise: Driver Not Loaded. '
                                'The nvidia kernel module is not loaded.')
    assert 'modprobe nvidia' in check['fix'] and 'NVRM' in check['fix']


def test_nvidia_driver_error_with_module_loaded_hints_at_mismatch():
    check = run('nvidia_driver', gpus=[], nvml_error='Driver/library version mismatch')
    assert check['status'] == 'fail'
    assert 'NVIDIA driver not usable: Driver/library version mismatch.' in check['message']
    assert 'reboot after the driver upgrade' in check['message']


def test_nvidia_driver_error_with_module_loaded_no_mismatch():
    check = run('nvidia_driver', gpus=[], nvml_error='Driver Not Loaded')
    assert check['status'] == 'fail'
    assert check['message'] == 'NVIDIA driver not usable: Driver Not Loaded. The nvidia kernel module is loaded.'


def test_nvidia_driver_error_without_nvidia_hardware_is_skipped(tmp_path):
    write_tree(tmp_path, {'bus/pci/devices': {}})
    check = run('nvidia_driver', gpus=[gpu(vendor='amd')], nvml_error='NVML Shared Library Not Found',
                sysfs_root=str(tmp_path), procfs_root=str(tmp_path))
    assert check['status'] == 'skip'


def test_nvidia_driver_no_gpus_no_error_is_skipped():
    assert run('nvidia_driver', gpus=[])['status'] == 'skip'


# ---------------------------------------------------------------------------
# 5 nouveau


def test_nouveau_loaded_fails():
    check = run('nouveau', 'degraded')
    assert check['status'] == 'fail'
    assert 'nouveau kernel module is loaded' in check['message']
    assert 'blacklist-nouveau.conf' in check['fix']
    assert 'modeset=0' in check['fix'] and 'update-initramfs' in check['fix']


def test_nouveau_absent_passes():
    assert run('nouveau')['status'] == 'pass'


def test_nouveau_unreadable_proc_is_skipped(tmp_path):
    assert run('nouveau', procfs_root=str(tmp_path))['status'] == 'skip'


# ---------------------------------------------------------------------------
# 6 resizable_bar


def test_resizable_bar_small_bar_fails():
    gpus = [gpu(0, '0000:01:00.0', memory_total_bytes=24 * GIB, bar1_total_bytes=256 * MIB),
            gpu(1, '0000:02:00.0')]
    check = run('resizable_bar', gpus=gpus)
    assert check['status'] == 'fail'
    assert 'Resizable BAR' in check['message']
    assert 'Above 4G Decoding' in check['message']
    assert 'GPU 0 (0000:01:00.0) BAR1 256 MiB vs VRAM 24.0 GiB' in check['message']
    assert 'GPU 1' not in check['message']
    assert 'Re-Size BAR Support' in check['fix'] and 'CSM' in check['fix']


def test_resizable_bar_amd_gpu_is_checked_too():
    gpus = [gpu(0, '0000:0c:00.0', vendor='amd', memory_total_bytes=24 * GIB, bar1_total_bytes=256 * MIB)]
    assert run('resizable_bar', gpus=gpus)['status'] == 'fail'


def test_resizable_bar_large_bar_passes():
    check = run('resizable_bar')
    assert check['status'] == 'pass'
    assert 'BAR1 32768 MiB vs VRAM 32.0 GiB' in check['message']


def test_resizable_bar_unknown_sizes_skip():
    assert run('resizable_bar', gpus=[gpu(bar1_total_bytes=None)])['status'] == 'skip'
    assert run('resizable_bar', gpus=[gpu(vendor='intel', bar1_total_bytes=256 * MIB)])['status'] == 'skip'


# ---------------------------------------------------------------------------
# 7 pcie_link


def test_pcie_link_downtrained_fails_with_figures():
    gpus = [gpu(0, '0000:01:00.0'),
            gpu(1, '0000:02:00.0', pcie_link_gen_max=4, pcie_link_width_current=8)]
    check = run('pcie_link', gpus=gpus)
    assert check['status'] == 'fail'
    assert check['message'] == ('GPU 1 (0000:02:00.0) PCIe link downtrained: running Gen1 x8, max Gen4 x16, '
                                'GPU supports Gen5.')
    assert 'x16 slot' in check['fix'] and 'riser' in check['fix'] and 'bifurcation' in check['fix']


def test_pcie_link_width_only():
    check = run('pcie_link', gpus=[gpu(pcie_link_width_current=4)])
    assert check['status'] == 'fail'
    assert check['message'] == 'GPU 0 (0000:01:00.0) PCIe link downtrained: running Gen1 x4, max Gen5 x16.'


def test_pcie_link_slot_generation_only():
    check = run('pcie_link', gpus=[gpu(pcie_link_gen_max=3, pcie_link_gen_gpu_max=4)])
    assert check['status'] == 'fail'
    assert 'running Gen1 x16, max Gen3 x16, GPU supports Gen4' in check['message']


def test_pcie_link_message_names_the_running_generation_not_the_maximum():
    """The running figures are the current link speed and width; the maximum ones come after."""
    check = run('pcie_link', gpus=[gpu(pcie_link_gen_current=3, pcie_link_gen_max=4, pcie_link_gen_gpu_max=4,
                                       pcie_link_width_current=8, pcie_link_width_max=16)])
    assert check['status'] == 'fail'
    assert check['message'] == 'GPU 0 (0000:01:00.0) PCIe link downtrained: running Gen3 x8, max Gen4 x16.'
    assert 'running Gen4' not in check['message']


def test_pcie_link_idle_generation_is_not_judged():
    check = run('pcie_link', gpus=[gpu(pcie_link_gen_current=1)])
    assert check['status'] == 'pass'
    assert check['message'] == ('Full PCIe links: GPU 0 (0000:01:00.0) running Gen1 x16, max Gen5 x16 '
                                '(a running generation below the maximum at idle is not judged).')


def test_pcie_link_no_data_skips():
    assert run('pcie_link', gpus=[gpu(pcie_link_width_current=None, pcie_link_gen_max=None)])['status'] == 'skip'


# ---------------------------------------------------------------------------
# 8 p2p


def test_p2p_ok_passes():
    check = run('p2p')
    assert check['status'] == 'pass'
    assert 'GPU 0 <-> GPU 1' in check['message']


def test_p2p_not_supported_warns():
    topology = [{'gpus': [0, 1], 'common_ancestor': 'hostbridge',
                 'p2p': {'read': 'chipset_not_supported', 'write': 'chipset_not_supported'}}]
    check = run('p2p', gpu_topology=topology)
    assert check['status'] == 'warn'
    assert 'peer-to-peer' in check['message']
    assert 'read chipset_not_supported' in check['message']
    assert 'NCCL_P2P_DISABLE' in check['fix']


def test_p2p_across_sockets_warns_and_can_fail():
    topology = [{'gpus': [0, 1], 'common_ancestor': 'system', 'p2p': {'read': 'ok', 'write': 'ok'}}]
    assert run('p2p', gpu_topology=topology)['status'] == 'warn'
    check = run('p2p', gpu_topology=topology, severity={'p2p': 'fail'})
    assert check['status'] == 'fail'
    assert 'CPU sockets' in check['message']


def test_p2p_single_gpu_or_no_topology_skips():
    assert run('p2p', gpus=[gpu()])['status'] == 'skip'
    assert run('p2p', gpu_topology=[])['status'] == 'skip'


# ---------------------------------------------------------------------------
# 9 iommu_acs


def test_iommu_acs_target_passes():
    check = run('iommu_acs')
    assert check['status'] == 'pass'
    assert check['message'] == ('IOMMU passthrough (iommu=pt); the GPUs share no PCIe switch, '
                                'so ACS redirect cannot reroute their traffic.')


def test_iommu_acs_switch_with_redirect_warns():
    check = run('iommu_acs', 'acs_switch')
    assert check['status'] == 'warn'
    assert 'ACS' in check['message']
    assert 'vLLM tensor-parallel hangs' in check['message']
    assert 'bridge 0000:02:08.0 (ACS control 0x001d)' in check['message']
    assert 'bridge 0000:02:10.0' in check['message']
    # the root port above the switch has redirect on too, but GPU traffic turns around below it
    assert pf.read_bridge_acs(os.path.join(TREES, 'acs_switch', 'sys', 'devices', 'pci0000:00', '0000:00:01.0')) \
        == ('ok', 0x001D)
    assert '0000:00:01.0' not in check['message']
    assert 'translated' not in check['message']
    assert 'setpci -s 0000:02:08.0 ECAP_ACS+0x6.w=0000' in check['fix']
    assert 'pci=disable_acs_redir=0000:02:08.0;0000:02:10.0' in check['fix']
    assert 'iommu=pt' in check['fix'] and 'NCCL' in check['fix']


def test_iommu_acs_redirect_with_fail_severity():
    assert run('iommu_acs', 'acs_switch', severity={'iommu_acs': 'fail'})['status'] == 'fail'


def test_iommu_acs_switch_without_redirect_passes(tmp_path):
    tree = copy_case('acs_switch', tmp_path)
    for bdf in ('0000:02:08.0', '0000:02:10.0'):
        write_file(os.path.join(pf.pci_device_path(tree['sysfs_root'], bdf), 'config'),
                   make_trees.switch_port(make_trees.SWITCH_DOWN, 0x0001)['config'])
    check = run('iommu_acs', 'acs_switch', **tree)
    assert check['status'] == 'pass'
    assert 'no ACS redirect on the 2 switch ports between the 2 GPUs' in check['message']


def test_iommu_translated_degraded_is_a_warning_even_with_fail_severity():
    """degraded: root ports have redirect on (as Linux sets it), GPUs on different root complexes."""
    check = run('iommu_acs', 'degraded', severity={'iommu_acs': 'fail'})
    assert check['status'] == 'warn'
    assert check['message'].startswith('IOMMU active in translated DMA mode (no iommu=pt on the kernel command line)')
    assert 'vLLM tensor-parallel hangs' in check['message']
    assert 'ACS P2P' not in check['message']
    assert 'setpci' not in check['fix'].split('NCCL tests')[-1]


def test_iommu_off_by_cmdline(tmp_path):
    tree = copy_case('acs_switch', tmp_path)
    write_file(os.path.join(tree['procfs_root'], 'cmdline'), 'ro quiet intel_iommu=off\n')
    check = run('iommu_acs', 'acs_switch', **tree)
    # ACS redirect on the switch ports is still a problem
    assert check['status'] == 'warn'
    assert 'translated' not in check['message']
    assert 'ACS P2P Request/Completion Redirect' in check['message']
    assert run('iommu_acs', 'degraded', procfs_root=tree['procfs_root'])['message'].startswith('IOMMU off;')


def _iommu_group(sysfs, group, group_type, bdf):
    """Put the PCI device bdf into IOMMU group <group> of the given type, as the kernel shows it."""
    group_dir = write_tree(os.path.join(sysfs, 'kernel', 'iommu_groups', group), {'type': attr(group_type)})
    device = pf.pci_device_path(sysfs, bdf)
    write_tree(device, {'iommu_group': Link(os.path.relpath(group_dir, device))})


def test_iommu_group_type_identity_counts_as_passthrough(tmp_path):
    tree = copy_case('target', tmp_path)
    write_file(os.path.join(tree['procfs_root'], 'cmdline'), 'ro quiet\n')
    assert run('iommu_acs', **tree)['status'] == 'warn'
    for group, bdf in (('14', '0000:01:00.0'), ('15', '0000:02:00.0')):
        _iommu_group(tree['sysfs_root'], group, 'identity', bdf)
    check = run('iommu_acs', **tree)
    assert check['status'] == 'pass'
    assert 'group type identity' in check['message']


def test_iommu_group_type_dma_counts_as_translated(tmp_path):
    tree = copy_case('target', tmp_path)
    _iommu_group(tree['sysfs_root'], '14', 'DMA-FQ', '0000:01:00.0')
    check = run('iommu_acs', **tree)
    assert check['status'] == 'warn'
    assert 'IOMMU translating GPU DMA (group type DMA-FQ)' in check['message']


def test_iommu_acs_unreadable_config_passes_with_note(tmp_path):
    tree = copy_case('acs_switch', tmp_path)
    for bdf in ('0000:02:08.0', '0000:02:10.0'):
        config = os.path.join(pf.pci_device_path(tree['sysfs_root'], bdf), 'config')
        with open(config, 'rb') as handle:
            head = handle.read(64)
        write_file(config, head)
    check = run('iommu_acs', 'acs_switch', **tree)
    assert check['status'] == 'pass'
    assert 'config space of 0000:02:08.0, 0000:02:10.0 not readable' in check['message']


def test_iommu_acs_gpus_on_different_root_ports_ignore_root_port_redirect(tmp_path):
    """Traffic between root ports crosses the root complex anyway: root port redirect does not matter."""
    sysfs = write_tree(tmp_path / 'sys', {'class/iommu/dmar0': {}})
    proc = write_tree(tmp_path / 'proc', {'cmdline': 'ro iommu=pt\n'})
    for port, gpu_bdf in (('0000:00:01.0', '0000:01:00.0'), ('0000:00:03.0', '0000:02:00.0')):
        write_pci_device(sysfs, 'pci0000:00/' + port,
                         {'config': make_trees.root_port(0x8086, 0xA70D, make_trees.ACS_LINUX_DEFAULT)['config']},
                         link=False)
        write_pci_device(sysfs, 'pci0000:00/%s/%s' % (port, gpu_bdf), {})
    gpus = [gpu(0, '0000:01:00.0'), gpu(1, '0000:02:00.0')]
    check = run('iommu_acs', gpus=gpus, sysfs_root=sysfs, procfs_root=proc)
    assert check['status'] == 'pass'
    assert 'share no PCIe switch' in check['message']


def test_iommu_acs_single_gpu_skips():
    assert run('iommu_acs', 'degraded', gpus=[gpu()])['status'] == 'skip'


def test_iommu_acs_gpu_missing_from_sysfs_is_noted():
    """Two of three GPUs found: their pair is judged, the third is named."""
    check = run('iommu_acs', gpus=[gpu(0, '0000:01:00.0'), gpu(1, '0000:02:00.0'), gpu(2, '0000:42:00.0')])
    assert check['status'] == 'pass'
    assert '0000:42:00.0 not found' in check['message']


def test_iommu_acs_without_the_gpus_in_sysfs_is_skipped_not_passed(tmp_path):
    sysfs = str(tmp_path / 'sys')
    check = run('iommu_acs', gpus=[gpu(0, '0000:41:00.0'), gpu(1, '0000:42:00.0')], sysfs_root=sysfs)
    assert check['status'] == 'skip'
    assert check['message'] == ('No GPU was found under %s (looked for 0000:41:00.0, 0000:42:00.0), '
                                'so ACS could not be checked.' % os.path.join(sysfs, 'bus', 'pci', 'devices'))
    # the same in a tree that has a PCI bus, just not these GPUs
    check = run('iommu_acs', gpus=[gpu(0, '0000:41:00.0'), gpu(1, '0000:42:00.0')])
    assert check['status'] == 'skip'
    assert 'No GPU was found under %s' % os.path.join(roots('target')['sysfs_root'], 'bus', 'pci') \
        in check['message']


def test_iommu_acs_with_one_of_two_gpus_in_sysfs_is_skipped():
    check = run('iommu_acs', gpus=[gpu(0, '0000:01:00.0'), gpu(1, '0000:42:00.0')])
    assert check['status'] == 'skip'
    assert check['message'] == (
        'IOMMU passthrough (iommu=pt); only 0000:01:00.0 was found under %s (0000:42:00.0 not), '
        'so ACS between the GPUs could not be checked.' % os.path.join(roots('target')['sysfs_root'], 'bus', 'pci',
                                                                       'devices'))


def test_iommu_translating_still_warns_without_the_gpus_in_sysfs():
    check = run('iommu_acs', 'degraded', gpus=[gpu(0, '0000:41:00.0'), gpu(1, '0000:42:00.0')])
    assert check['status'] == 'warn'
    assert 'translated DMA mode' in check['message']
    assert '0000:41:00.0 not found' in check['message']


# ---------------------------------------------------------------------------
# 10 kernel_headers


def test_kernel_headers_present():
    check = run('kernel_headers')
    assert check['status'] == 'pass'
    assert '6.1.0-28-amd64' in check['message']


def test_kernel_headers_missing_fails():
    check = run('kernel_headers', 'degraded')
    assert check['status'] == 'fail'
    assert 'Kernel headers for 6.1.0-31-amd64 are missing' in check['message']
    assert 'DKMS' in check['message']
    assert 'apt install linux-headers-6.1.0-31-amd64' in check['fix']


def test_kernel_headers_unknown_release_skips(tmp_path):
    assert run('kernel_headers', procfs_root=str(tmp_path))['status'] == 'skip'


# ---------------------------------------------------------------------------
# 11 model_dir_disk


def test_model_dir_disk_low_space_warns(tmp_path):
    seen = []

    def statvfs(path):
        seen.append(path)
        return StatVfs(f_bavail=50 * 1000 ** 3 // 4096, f_frsize=4096)

    check = run('model_dir_disk', statvfs=statvfs, model_dir=str(tmp_path / 'models' / 'llama'))
    assert check['status'] == 'warn'
    assert 'Only 50.0 GB free' in check['message']
    assert '200 GB wanted' in check['message']
    assert 'does not exist yet' in check['message']
    assert seen == [str(tmp_path)]


def test_model_dir_disk_enough_space_passes(tmp_path):
    check = run('model_dir_disk', model_dir=str(tmp_path))
    assert check['status'] == 'pass'
    assert '1000.0 GB free for %s' % tmp_path in check['message']


def test_model_dir_disk_real_statvfs(tmp_path):
    check = run('model_dir_disk', statvfs=None, model_dir=str(tmp_path), model_dir_min_free_gb=0)
    assert check['status'] == 'pass'


# ---------------------------------------------------------------------------
# 12 ram


def test_ram_not_planned_skips():
    assert run('ram')['status'] == 'skip'


def test_ram_short_fails():
    check = run('ram', 'degraded', planned_model_gb=70)
    assert check['status'] == 'fail'
    assert 'Not enough RAM: 33.4 GB RAM; a 70 GB model x ratio 1 needs 70.0 GB' in check['message']


def test_ram_ratio_is_applied():
    assert run('ram', planned_model_gb=140)['status'] == 'pass'
    check = run('ram', planned_model_gb=140, ram_to_model_ratio=2.0)
    assert check['status'] == 'fail'
    assert 'needs 280.0 GB' in check['message']


# ---------------------------------------------------------------------------
# 13 psu_headroom


def test_psu_headroom_too_small_fails_with_figures():
    check = run('psu_headroom', psu_watts=1600)
    assert check['status'] == 'fail'
    assert ('2 x 600 W GPUs + 250 W CPU = 1450 W; with 20% headroom you need 1740 W, '
            'the inventory says 1600 W') in check['message']
    assert 'nvidia-smi -pl' in check['fix']


def test_psu_headroom_unknown_psu_warns():
    check = run('psu_headroom', psu_watts=0, severity={'psu_headroom': 'fail'})
    assert check['status'] == 'warn'
    assert 'PSU size unknown: set psu_watts' in check['message']
    assert 'you need 1740 W' in check['message']


def test_psu_headroom_enough_passes():
    check = run('psu_headroom', psu_watts=1800)
    assert check['status'] == 'pass'


def test_psu_headroom_counts_current_limit_when_asked():
    check = run('psu_headroom', psu_watts=1600, psu_power_limit_source='current',
                gpus=[gpu(0, power_limit_w=400), gpu(1, power_limit_w=450)])
    assert check['status'] == 'pass'
    assert '1 x 400 W + 1 x 450 W GPUs + 250 W CPU = 1100 W' in check['message']


def test_psu_headroom_falls_back_and_flags_unknown():
    gpus = [gpu(0, power_limit_max_w=None, power_limit_w=300),
            gpu(1, power_limit_max_w=None, power_limit_w=None)]
    check = run('psu_headroom', psu_watts=3000, gpus=gpus)
    assert check['status'] == 'warn'
    assert '1 x 300 W GPU + 250 W CPU = 550 W' in check['message']
    assert 'Power limit unknown (not counted) for GPU 1' in check['message']


# ---------------------------------------------------------------------------
# 14 power_on_after_power_loss


def test_power_on_after_power_loss_is_manual():
    check = run('power_on_after_power_loss')
    assert check['status'] == 'manual'
    assert 'Restore on AC Power Loss' in check['fix']
    assert run('power_on_after_power_loss', severity={'power_on_after_power_loss': 'ignore'})['status'] == 'skip'


# ---------------------------------------------------------------------------
# 15 ups


UPS_CONF = '''# written by the ups role
maxretry = 3

[ups]
    driver = "usbhid-ups"
    port = "auto"
    desc = "UPS of the LLM server"
'''


class Upsc(object):
    """Stands in for NUT's upsc: records each call, answers as upsd would."""

    def __init__(self, rc=0, out='', err=''):
        self.calls = []
        self.answer = (rc, out, err)

    def __call__(self, argv):
        self.calls.append(list(argv))
        return self.answer


def ups_run(tmp_path, conf=UPS_CONF, probe=None, **overrides):
    if conf is not None:
        (tmp_path / 'ups.conf').write_text(conf)
    prm = params('target', nut_config_dir=str(tmp_path), **overrides)
    ctx = pf._Ctx(prm, statvfs=big_disk, ups_probe=probe)
    return pf.run_check('ups', ctx, prm.get('severity'), set(prm.get('skip') or []))


def test_ups_not_in_the_inventory_is_skipped(tmp_path):
    probe = Upsc(1, '', 'Error: Driver not connected')
    check = ups_run(tmp_path, probe=probe)
    assert check['status'] == 'skip'
    assert 'ups_enabled is false' in check['message']
    assert probe.calls == []


def test_ups_on_a_fresh_host_is_no_finding(tmp_path):
    # NUT's client not installed yet: the ups role installs it and waits.
    check = ups_run(tmp_path, conf=None, probe=None, ups_name='ups')
    assert_check_shape(check)
    assert check['status'] == 'skip'
    assert check['message'] == ('NUT is not set up for UPS ups yet (its client upsc is not installed): the ups role '
                                'installs and configures it, then waits for the UPS to answer.')


def test_ups_with_nut_installed_but_not_set_up_for_it_is_no_finding(tmp_path):
    # The package's own ups.conf (comments only), or a section of another name.
    probe = Upsc(1, '', 'Error: Unknown UPS')
    for conf in ('# nothing configured\n', '[other]\n  driver = dummy-ups\n'):
        check = ups_run(tmp_path, conf=conf, probe=probe, ups_name='ups')
        assert check['status'] == 'skip'
        assert 'no [ups] section in %s' % (tmp_path / 'ups.conf') in check['message']
    assert probe.calls == []


def test_ups_that_answers_passes(tmp_path):
    probe = Upsc(0, 'OL CHRG\n')
    check = ups_run(tmp_path, probe=probe, ups_name='ups')
    assert check['status'] == 'pass'
    assert check['message'] == 'UPS ups answers through NUT: ups.status OL CHRG.'
    assert probe.calls == [['upsc', 'ups@localhost', 'ups.status']]


@pytest.mark.parametrize('answer', [
    (1, '', 'Error: Driver not connected\n'),
    # NUT 2.8.0 as Debian builds it prints this first when SSL is not set up.
    (1, '', 'Init SSL without certificate database\nError: Driver not connected\n'),
    (1, '', 'Error: Data stale\n'),
    (1, '', 'Error: Connection failure: Connection refused\n'),
    (0, '', ''),
])
def test_ups_set_up_but_not_answering_fails_naming_it_and_the_fix(tmp_path, answer):
    check = ups_run(tmp_path, probe=Upsc(*answer), ups_name='ups')
    assert_check_shape(check)
    assert check['status'] == 'fail'
    assert check['message'].startswith(
        'UPS ups is set up in %s (driver usbhid-ups, port auto) but NUT cannot read it: upsc ups@localhost '
        'ups.status says "' % (tmp_path / 'ups.conf'))
    said = answer[2].replace('Init SSL without certificate database\n', '').strip()
    assert check['message'].endswith('says "%s".' % (said or 'no answer (exit code 0)'))
    assert 'Plug the UPS in' in check['fix']
    assert 'journalctl -u nut-driver@ups -u nut-server' in check['fix']
    assert 'ups_enabled' in check['fix']


def test_ups_severity_can_be_lowered(tmp_path):
    probe = Upsc(1, '', 'Error: Driver not connected')
    assert ups_run(tmp_path, probe=probe, ups_name='ups', severity={'ups': 'warn'})['status'] == 'warn'
    assert ups_run(tmp_path, probe=probe, ups_name='ups', severity={'ups': 'ignore'})['status'] == 'skip'


def test_read_ups_conf(tmp_path):
    (tmp_path / 'ups.conf').write_text(UPS_CONF + '[second.ups]\n driver=dummy-ups\n port = "x.dev" # note\n')
    assert pf.read_ups_conf(str(tmp_path / 'ups.conf')) == {
        'ups': {'driver': 'usbhid-ups', 'port': 'auto', 'desc': 'UPS of the LLM server'},
        'second.ups': {'driver': 'dummy-ups', 'port': 'x.dev'},
    }
    assert pf.read_ups_conf(str(tmp_path / 'missing.conf')) is None


# ---------------------------------------------------------------------------
# run_checks, validation, report


def test_run_checks_target():
    result = pf.run_checks(params('target', expected_gpu_count=2, planned_model_gb=70, psu_watts=1800),
                           statvfs=big_disk)
    assert [check['id'] for check in result['checks']] == list(pf.CHECK_IDS)
    for check in result['checks']:
        assert_check_shape(check)
    statuses = dict((check['id'], check['status']) for check in result['checks'])
    assert statuses.pop('power_on_after_power_loss') == 'manual'
    # No UPS in these parameters.
    assert statuses.pop('ups') == 'skip'
    assert set(statuses.values()) == {'pass'}, statuses
    assert result['summary'] == {'pass': 13, 'warn': 0, 'fail': 0, 'manual': 1, 'skip': 1}
    assert result['failed_checks'] == []
    assert result['verdict'] == 'pass'
    assert len(result['report_lines']) == len(pf.CHECK_IDS)
    assert result['report_lines'][0].startswith('[PASS] uefi_boot: Booted in UEFI mode')


def test_run_checks_degraded():
    gpus = [gpu(0, '0000:01:00.0'),
            gpu(1, '0000:81:00.0', pcie_link_gen_current=4, pcie_link_gen_max=4, pcie_link_width_current=8)]
    result = pf.run_checks(params('degraded', gpus=gpus, planned_model_gb=70, psu_watts=1600), statvfs=big_disk)
    statuses = dict((check['id'], check['status']) for check in result['checks'])
    assert statuses == {
        'uefi_boot': 'pass',
        'secure_boot': 'warn',
        'gpu_count': 'skip',
        'nvidia_driver': 'pass',
        'nouveau': 'fail',
        'resizable_bar': 'pass',
        'pcie_link': 'fail',
        'p2p': 'pass',
        'iommu_acs': 'warn',
        'kernel_headers': 'fail',
        'model_dir_disk': 'pass',
        'ram': 'fail',
        'psu_headroom': 'fail',
        'power_on_after_power_loss': 'manual',
        'ups': 'skip',
    }
    assert result['failed_checks'] == ['nouveau', 'pcie_link', 'kernel_headers', 'ram', 'psu_headroom']
    assert result['summary'] == {'pass': 5, 'warn': 2, 'fail': 5, 'manual': 1, 'skip': 2}
    assert result['verdict'] == 'fail'
    pcie = [line for line in result['report_lines'] if line.startswith('[FAIL] pcie_link:')]
    assert pcie == [
        '[FAIL] pcie_link: GPU 1 (0000:81:00.0) PCIe link downtrained: running Gen4 x8, max Gen4 x16, '
        'GPU supports Gen5. -> fix: ' + pf.FIX['pcie_link']]


def test_run_checks_skip_and_severity_options():
    result = pf.run_checks(params('degraded', skip=['nouveau', 'kernel_headers'], planned_model_gb=70,
                                  severity={'secure_boot': 'ignore', 'ram': 'warn'}), statvfs=big_disk)
    statuses = dict((check['id'], check) for check in result['checks'])
    assert statuses['nouveau']['status'] == 'skip'
    assert statuses['nouveau']['message'] == 'Skipped by the skip option.'
    assert statuses['kernel_headers']['status'] == 'skip'
    assert statuses['secure_boot']['status'] == 'skip'
    assert statuses['secure_boot']['severity'] == 'ignore'
    assert statuses['ram']['status'] == 'warn'
    assert statuses['ram']['severity'] == 'warn'
    assert result['failed_checks'] == []
    assert result['verdict'] == 'warn'

    result = pf.run_checks(params('acs_switch', severity={'iommu_acs': 'fail'}), statvfs=big_disk)
    assert result['failed_checks'] == ['iommu_acs']
    assert result['verdict'] == 'fail'


def test_verdict_warn_when_only_warnings():
    result = pf.run_checks(params('target', psu_watts=0), statvfs=big_disk)
    assert result['failed_checks'] == []
    assert result['summary']['warn'] == 1
    assert result['verdict'] == 'warn'


def test_validate_params_accepts_defaults():
    assert pf.validate_params(params()) == []


def test_validate_params_unknown_ids():
    errors = pf.validate_params(params(severity={'bogus': 'warn'}, skip=['nope', 'ram']))
    assert len(errors) == 2
    assert errors[0].startswith('severity: unknown check id(s) bogus; valid ids: uefi_boot, secure_boot')
    assert 'power_on_after_power_loss' in errors[0]
    assert errors[1].startswith('skip: unknown check id(s) nope; valid ids: uefi_boot')


def test_validate_params_bad_severity_value_and_negative_numbers():
    errors = pf.validate_params(params(severity={'ram': 'loud'}, psu_watts=-5))
    assert "severity: invalid value 'loud' for check ram; valid values: fail, warn, ignore" in errors
    assert 'psu_watts: must not be negative (got -5)' in errors


def test_default_severities_cover_every_check():
    assert set(pf.DEFAULT_SEVERITY) == set(pf.CHECK_IDS) == set(pf.CHECKS) == set(pf.TITLES) == set(pf.WHY)
    assert set(pf.DEFAULT_SEVERITY.values()) <= {'fail', 'warn'}


def test_report_lines_format():
    checks = [
        pf.make_check('ram', 'fail', 'problem', 'short'),
        pf.make_check('nouveau', 'fail', 'pass', 'fine'),
        pf.make_check('p2p', 'warn', 'na', 'n/a'),
    ]
    assert pf.report_lines(checks) == [
        '[FAIL] ram: short -> fix: ' + pf.FIX['ram'],
        '[PASS] nouveau: fine',
        '[SKIP] p2p: n/a',
    ]
    assert pf.report_lines(checks, statuses=['fail'], with_fix=False) == ['[FAIL] ram: short']


def test_filter_plugin():
    result = pf.run_checks(params('degraded'), statvfs=big_disk)
    assert FilterModule().filters()['preflight_report_lines'] is preflight_report_lines
    assert preflight_report_lines(result) == result['report_lines']
    fails = preflight_report_lines(result['checks'], ['fail'], False)
    assert fails == ['[FAIL] nouveau: ' + result['checks'][4]['message'],
                     '[FAIL] kernel_headers: ' + result['checks'][9]['message']]
    with pytest.raises(Exception, match='unknown status'):
        preflight_report_lines(result, statuses=['broken'])
    with pytest.raises(Exception, match='expects a list'):
        preflight_report_lines('nope')
