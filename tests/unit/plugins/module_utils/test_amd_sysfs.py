# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_amd_sysfs.py against fake sysfs trees.

tests/sysfs/amd_rx7900xtx is the checked-in tree (also used by the gpu_facts
mixed NVIDIA + AMD test); make_amd_card() below generates variants.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
from sysfs_tree import Link, attr, write_pci_device, write_tree  # tests/sysfs, on sys.path through conftest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
RX7900XTX_TREE = os.path.join(REPO_ROOT, 'tests', 'sysfs', 'amd_rx7900xtx')


def _load(name):
    spec = importlib.util.spec_from_file_location(
        name + '_under_test', os.path.join(REPO_ROOT, 'plugins', 'module_utils', name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


amd = _load('_amd_sysfs')
nvml = _load('_nvml')
preflight = _load('_preflight')


def make_amd_card(root, card, bus_id, symlink=False, hwmon=None, vendor='0x1002', **files):
    """Write <root>/class/drm/<card>/device with the given sysfs files.

    symlink=True mimics real sysfs: the card's device is a relative symlink to
    <root>/devices/pci0000:00/<bus_id>, so the bus id comes from the link name;
    otherwise it is a plain directory and the bus id comes from uevent.
    hwmon: dict of files for device/hwmon/hwmon0 (None: no hwmon directory).
    """
    attrs = dict((name, attr(value)) for name, value in files.items())
    attrs['vendor'] = attr(vendor)
    if hwmon:
        attrs['hwmon/hwmon0'] = dict((name, attr(value)) for name, value in hwmon.items())
    card_dir = os.path.join(str(root), 'class', 'drm', card)
    if symlink:
        device = write_pci_device(root, 'pci0000:00/' + bus_id, attrs, link=False)
        write_tree(card_dir, {'device': Link(os.path.relpath(device, card_dir))})
        return device
    attrs['uevent'] = attr('DRIVER=amdgpu\nPCI_SLOT_NAME=%s' % bus_id)
    return write_tree(os.path.join(card_dir, 'device'), attrs)


def test_rx7900xtx_tree():
    gpus = amd.collect_amd(RX7900XTX_TREE)
    # card0 is the NVIDIA card (vendor 0x10de); card1-DP-1 and renderD128 are not cards
    assert gpus == [{
        'vendor': 'amd',
        'index': 0,
        'name': 'AMD GPU 0x744c',
        'uuid': None,
        'serial': None,
        'pci_bus_id': '0000:03:00.0',
        'architecture': None,
        'cuda_compute_capability': None,
        'memory_total_bytes': 25753026560,
        'memory_used_bytes': 406847488,
        'memory_free_bytes': 25753026560 - 406847488,
        'bar1_total_bytes': 25753026560,
        'pcie_link_gen_current': 4,
        'pcie_link_gen_max': 4,
        'pcie_link_gen_gpu_max': 4,
        'pcie_link_width_current': 16,
        'pcie_link_width_max': 16,
        'temperature_c': 41,
        'temperature_slowdown_c': 100,
        'temperature_shutdown_c': 105,
        'power_draw_w': 28.0,
        'power_limit_w': 303.0,
        'power_limit_default_w': 303.0,
        'power_limit_min_w': 273.0,
        'power_limit_max_w': 348.0,
        'persistence_mode': None,
        'compute_mode': None,
        'ecc_enabled': None,
        'ecc_pending': None,
        'mig_enabled': None,
        'mig_pending': None,
        'clocks': {'graphics_mhz': 500, 'sm_mhz': None, 'memory_mhz': 96,
                   'graphics_max_mhz': 2526, 'sm_max_mhz': None, 'memory_max_mhz': 1249},
        'throttle_reasons': None,
        'throttle_reasons_mask': None,
    }]


def test_same_keys_as_nvidia_records():
    (gpu,) = amd.collect_amd(RX7900XTX_TREE)
    assert tuple(gpu) == nvml.GPU_KEYS
    assert tuple(gpu['clocks']) == nvml.CLOCK_KEYS


def test_cards_are_ordered_and_indexed_by_bus_id(tmp_path):
    make_amd_card(tmp_path, 'card0', '0000:0b:00.0', symlink=True, device='0x74a1',
                  product_name='AMD Instinct MI210')
    make_amd_card(tmp_path, 'card1', '0000:03:00.0', device='0x744c')
    make_amd_card(tmp_path, 'card2', '0000:05:00.0', vendor='0x8086', device='0x56a0')
    gpus = amd.collect_amd(str(tmp_path))
    assert [(g['index'], g['pci_bus_id'], g['name']) for g in gpus] == [
        (0, '0000:03:00.0', 'AMD GPU 0x744c'),
        (1, '0000:0b:00.0', 'AMD Instinct MI210'),
    ]


def test_bar_without_resizable_bar_and_slot_limited_link(tmp_path):
    make_amd_card(tmp_path, 'card0', '0000:03:00.0', device='0x744c',
                  mem_info_vram_total=25753026560, mem_info_vis_vram_total=268435456,
                  current_link_speed='8.0 GT/s PCIe', current_link_width=8,
                  max_link_speed='16.0 GT/s PCIe', max_link_width=16)
    (gpu,) = amd.collect_amd(str(tmp_path))
    assert gpu['bar1_total_bytes'] == 268435456
    assert (gpu['pcie_link_gen_current'], gpu['pcie_link_width_current']) == (3, 8)
    assert (gpu['pcie_link_gen_max'], gpu['pcie_link_gen_gpu_max'], gpu['pcie_link_width_max']) == (4, 4, 16)
    # absent files are None, not errors
    assert gpu['memory_used_bytes'] is None and gpu['memory_free_bytes'] is None
    assert gpu['temperature_c'] is None and gpu['power_draw_w'] is None
    assert gpu['clocks']['graphics_mhz'] is None


def test_preflight_names_the_running_and_the_max_link_from_sysfs(tmp_path):
    """current_link_speed/width is the running link, max_link_speed/width the maximum, in the pcie_link check."""
    make_amd_card(tmp_path, 'card0', '0000:03:00.0', device='0x744c',
                  current_link_speed='8.0 GT/s PCIe', current_link_width=8,
                  max_link_speed='16.0 GT/s PCIe', max_link_width=16)
    check = preflight.run_check('pcie_link', preflight._Ctx({'gpus': amd.collect_amd(str(tmp_path))}))
    assert check['status'] == 'fail'
    assert check['message'] == 'GPU 0 (0000:03:00.0) PCIe link downtrained: running Gen3 x8, max Gen4 x16.'


def test_hwmon_without_emergency_and_power_input(tmp_path):
    make_amd_card(tmp_path, 'card0', '0000:03:00.0', device='0x73bf',
                  hwmon={'name': 'amdgpu', 'temp1_input': 55500, 'temp1_crit': 100000,
                         'power1_input': 125500000, 'power1_cap': 255000000})
    (gpu,) = amd.collect_amd(str(tmp_path))
    assert gpu['temperature_c'] == 56
    assert gpu['temperature_shutdown_c'] == 100
    assert gpu['temperature_slowdown_c'] is None
    assert gpu['power_draw_w'] == 125.5
    assert gpu['power_limit_w'] == 255.0
    assert gpu['power_limit_default_w'] is None


def test_missing_or_empty_sysfs(tmp_path):
    assert amd.collect_amd(str(tmp_path / 'nope')) == []
    write_tree(tmp_path, {'class/drm': {}})
    assert amd.collect_amd(str(tmp_path)) == []


def test_card_without_any_bus_id_is_still_reported(tmp_path):
    device = make_amd_card(tmp_path, 'card0', '0000:03:00.0', device='0x744c')
    os.remove(os.path.join(device, 'uevent'))
    (gpu,) = amd.collect_amd(str(tmp_path))
    assert gpu['pci_bus_id'] is None
    assert gpu['name'] == 'AMD GPU 0x744c'


@pytest.mark.parametrize('text, gen', [
    ('2.5 GT/s PCIe', 1), ('5.0 GT/s PCIe', 2), ('8.0 GT/s PCIe', 3), ('16.0 GT/s PCIe', 4),
    ('32.0 GT/s PCIe', 5), ('64.0 GT/s PCIe', 6), ('Unknown', None), ('', None), (None, None),
    ('12.0 GT/s PCIe', None),
])
def test_link_speed_to_gen(text, gen):
    assert amd.link_speed_to_gen(text) == gen
