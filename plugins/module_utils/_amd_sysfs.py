# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""AMD GPU facts read from the amdgpu driver's sysfs files.

Private to this collection. Records have the same keys as the NVIDIA ones
(see _nvml.GPU_KEYS); what amdgpu does not expose is None.

Sources, all under <sysfs_root>/class/drm/cardN/device/ (cardN-* connector
entries and renderD* nodes are skipped; vendor must be 0x1002):
  pci_bus_id            basename of the device symlink, else uevent PCI_SLOT_NAME
  name                  product_name, else "AMD GPU 0x<device id>"
  memory_*              mem_info_vram_total / mem_info_vram_used (free = total - used)
  bar1_total_bytes      mem_info_vis_vram_total (CPU-visible VRAM = effective BAR)
  pcie_link_*           current_link_speed / max_link_speed ("16.0 GT/s PCIe" -> 4),
                        current_link_width / max_link_width; gen_gpu_max = gen_max
  temperature_c         hwmon temp1_input (edge sensor), millidegrees C
  temperature_shutdown_c  temp1_emergency, else temp1_crit
  temperature_slowdown_c  temp1_crit, only when temp1_emergency exists too
  power_*               power1_average (else power1_input), power1_cap,
                        power1_cap_default, power1_cap_min, power1_cap_max (microwatts)
  clocks                pp_dpm_sclk (graphics) and pp_dpm_mclk (memory): the line
                        marked '*' is current, the highest level is max
Note: on boards with an on-package PCIe switch (Navi 1x/2x/3x), the link the
endpoint reports is the one to that switch, not to the slot.
"""

from __future__ import annotations

import glob
import os
import re

from ansible_collections.homelab.llm_server.plugins.module_utils._hostfs import (
    list_dir,
    read_int,
    read_value,
)

AMD_VENDOR_ID = 0x1002

_CARD_RE = re.compile(r'^card\d+$')
_PCI_ADDR_RE = re.compile(r'^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$')
_DPM_LINE_RE = re.compile(r'^\s*\d+:\s*(\d+)\s*[Mm][Hh][Zz]\s*(\*)?\s*$')
# GT/s per lane -> PCIe generation
_LINK_SPEEDS = ((2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6))


def link_speed_to_gen(text):
    """'16.0 GT/s PCIe' -> 4; None for anything else ('Unknown', '')."""
    if not text:
        return None
    match = re.match(r'^\s*([0-9.]+)\s*GT/s', text)
    if not match:
        return None
    try:
        speed = float(match.group(1))
    except ValueError:
        return None
    for gts, gen in _LINK_SPEEDS:
        if abs(speed - gts) < 0.05:
            return gen
    return None


def _uevent(device):
    values = {}
    text = read_value(os.path.join(device, 'uevent')) or ''
    for line in text.splitlines():
        key, sep, value = line.partition('=')
        if sep:
            values[key.strip()] = value.strip()
    return values


def _pci_bus_id(device):
    base = os.path.basename(os.path.realpath(device))
    if _PCI_ADDR_RE.match(base):
        return base.lower()
    slot = _uevent(device).get('PCI_SLOT_NAME')
    if slot and _PCI_ADDR_RE.match(slot):
        return slot.lower()
    return None


def _hwmon_dir(device):
    candidates = sorted(glob.glob(os.path.join(device, 'hwmon', 'hwmon*')))
    for path in candidates:
        if read_value(os.path.join(path, 'name')) == 'amdgpu':
            return path
    for path in candidates:
        if glob.glob(os.path.join(path, 'temp*_input')) or glob.glob(os.path.join(path, 'power1_*')):
            return path
    return None


def _milli_c(value):
    if value is None:
        return None
    return int(round(value / 1000.0))


def _micro_w(value):
    if value is None:
        return None
    return round(value / 1000000.0, 3)


def _dpm(path):
    """(current, max) MHz from a pp_dpm_* file, or (None, None)."""
    text = read_value(path)
    if not text:
        return None, None
    current, levels = None, []
    for line in text.splitlines():
        match = _DPM_LINE_RE.match(line)
        if not match:
            continue
        mhz = int(match.group(1))
        levels.append(mhz)
        if match.group(2):
            current = mhz
    return current, (max(levels) if levels else None)


def read_card(device, pci_bus_id, index):
    """The GPU record for one amdgpu device directory."""
    def attr(name):
        return os.path.join(device, name)

    device_id = read_int(attr('device'), 16)
    name = read_value(attr('product_name'))
    if not name:
        name = 'AMD GPU 0x%04x' % device_id if device_id is not None else 'AMD GPU'

    total = read_int(attr('mem_info_vram_total'))
    used = read_int(attr('mem_info_vram_used'))
    free = total - used if total is not None and used is not None else None

    gen_max = link_speed_to_gen(read_value(attr('max_link_speed')))

    temp = power = None
    shutdown = slowdown = None
    cap = cap_default = cap_min = cap_max = None
    hwmon = _hwmon_dir(device)
    if hwmon:
        def hw(name):
            return read_int(os.path.join(hwmon, name))
        temp = _milli_c(hw('temp1_input'))
        emergency, crit = hw('temp1_emergency'), hw('temp1_crit')
        if emergency is not None:
            shutdown, slowdown = _milli_c(emergency), _milli_c(crit)
        else:
            shutdown = _milli_c(crit)
        average = hw('power1_average')
        power = _micro_w(average if average is not None else hw('power1_input'))
        cap, cap_default = _micro_w(hw('power1_cap')), _micro_w(hw('power1_cap_default'))
        cap_min, cap_max = _micro_w(hw('power1_cap_min')), _micro_w(hw('power1_cap_max'))

    sclk, sclk_max = _dpm(attr('pp_dpm_sclk'))
    mclk, mclk_max = _dpm(attr('pp_dpm_mclk'))

    return {
        'vendor': 'amd',
        'index': index,
        'name': name,
        'uuid': None,
        'serial': None,
        'pci_bus_id': pci_bus_id,
        'architecture': None,
        'cuda_compute_capability': None,
        'memory_total_bytes': total,
        'memory_used_bytes': used,
        'memory_free_bytes': free,
        'bar1_total_bytes': read_int(attr('mem_info_vis_vram_total')),
        'pcie_link_gen_current': link_speed_to_gen(read_value(attr('current_link_speed'))),
        'pcie_link_gen_max': gen_max,
        'pcie_link_gen_gpu_max': gen_max,
        'pcie_link_width_current': read_int(attr('current_link_width')),
        'pcie_link_width_max': read_int(attr('max_link_width')),
        'temperature_c': temp,
        'temperature_slowdown_c': slowdown,
        'temperature_shutdown_c': shutdown,
        'power_draw_w': power,
        'power_limit_w': cap,
        'power_limit_default_w': cap_default,
        'power_limit_min_w': cap_min,
        'power_limit_max_w': cap_max,
        'persistence_mode': None,
        'compute_mode': None,
        'ecc_enabled': None,
        'ecc_pending': None,
        'mig_enabled': None,
        'mig_pending': None,
        'clocks': {
            'graphics_mhz': sclk,
            'sm_mhz': None,
            'memory_mhz': mclk,
            'graphics_max_mhz': sclk_max,
            'sm_max_mhz': None,
            'memory_max_mhz': mclk_max,
        },
        'throttle_reasons': None,
        'throttle_reasons_mask': None,
    }


def collect_amd(sysfs_root='/sys'):
    """GPU records for every amdgpu card under sysfs_root, ordered by PCI bus id."""
    drm = os.path.join(sysfs_root, 'class', 'drm')
    entries = list_dir(drm)
    if entries is None:
        return []
    cards = {}
    for entry in entries:
        if not _CARD_RE.match(entry):
            continue
        device = os.path.join(drm, entry, 'device')
        if read_int(os.path.join(device, 'vendor'), 16) != AMD_VENDOR_ID:
            continue
        bus_id = _pci_bus_id(device)
        key = bus_id or 'zzzz-' + entry  # unknown bus ids sort last
        if key not in cards:
            cards[key] = (device, bus_id)
    return [read_card(device, bus_id, index)
            for index, (device, bus_id) in enumerate(cards[key] for key in sorted(cards))]
