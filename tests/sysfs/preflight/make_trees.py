# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""(Re)generate the fake host trees used by the preflight_checks tests.

Usage:
    python tests/sysfs/preflight/make_trees.py            # rewrite the case trees next to this script
    python tests/sysfs/preflight/make_trees.py --dest DIR # write them below DIR instead
    python tests/sysfs/preflight/make_trees.py --check    # exit 1 if the committed trees differ

The trees use the real sysfs names (``0000:01:00.0``, ``pci0000:00``) and
directory symlinks (``sys/bus/pci/devices/*``). ansible-test sanity cannot
take either (no-illegal-filenames and symlinks even crash on the colons, and
symlinked directories cannot be listed in an ignore file), so the case
directories must be left out of the copy that sanity runs on.

Each case holds ``sys/``, ``proc/`` and ``lib/modules/`` subtrees shaped like
the real ones, including binary 4096-byte PCI config space files with an
extended capability list (AER, DSN, ACS) for the bridges above the GPUs.
The GPU addresses match the NVML fixtures in tests/doubles/nvml/fixtures, so
a simulated host can pair a fixture with a tree (tests/simulated_host).

``target`` (pairs with target_dual_rtx_pro_6000): healthy host. UEFI, Secure
Boot off, intel_iommu=on iommu=pt, nvidia loaded, headers installed; each
GPU in a CPU-attached slot under the same host bridge, root ports with ACS
redirect off::

    pci0000:00/0000:00:01.0/0000:01:00.0   GPU 0
    pci0000:00/0000:00:01.1/0000:02:00.0   GPU 1

``degraded`` (pairs with degraded_dual_rtx_pro_6000): Secure Boot on, IOMMU
translating (intel_iommu=on without iommu=pt), ACS P2P Request/Completion
Redirect on in both root ports (as Linux sets it when the IOMMU is on),
nouveau loaded, headers for the running kernel missing; GPU 1 on the other
socket's root complex::

    pci0000:00/0000:00:01.0/0000:01:00.0   GPU 0
    pci0000:80/0000:80:01.0/0000:81:00.0   GPU 1

Root port redirect does not change the path of traffic between GPUs on
different root ports (it has to cross the root complex anyway), so the
check judges the IOMMU mode there; ACS redirect only matters inside a PCIe
switch, which the third case covers.

``acs_switch``: otherwise healthy host (iommu=pt) with both GPUs behind a
PCIe switch (Broadcom/PLX PEX8747) whose downstream ports have ACS P2P
Request/Completion Redirect on, so GPU-to-GPU traffic is forced up to the
root complex; the root port above the switch has redirect on too but sits
above the turn-around point::

    pci0000:00/0000:00:01.0                root port
      0000:01:00.0                         switch upstream port, no ACS
        0000:02:08.0/0000:03:00.0          downstream port -> GPU 0
        0000:02:10.0/0000:04:00.0          downstream port -> GPU 1

Everything is written byte for byte from the tables below, so the output is
deterministic. The writing itself is tests/sysfs/sysfs_tree.py's, shared with
the unit tests.
"""

from __future__ import annotations

import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # tests/sysfs, for sysfs_tree

from sysfs_tree import generator_main, write_efivar, write_file, write_pci_device  # noqa: E402

CASES = ('target', 'degraded', 'acs_switch')
EFI_GUID = '8be4df61-93ca-11d2-aa0d-00e098032b8c'

# extended capability ids
AER = 0x0001
DSN = 0x0003
ACS = 0x000D

ACS_SV, ACS_TB, ACS_RR, ACS_CR, ACS_UF = 0x01, 0x02, 0x04, 0x08, 0x10
ACS_LINUX_DEFAULT = ACS_SV | ACS_RR | ACS_CR | ACS_UF  # what the kernel enables when the IOMMU is on

# PCIe device/port types (PCI Express capability, bits 7:4)
ENDPOINT, ROOT_PORT, SWITCH_UP, SWITCH_DOWN = 0, 4, 5, 6


def pci_config(vendor, device, class_code, header_type, port_type, ext_caps):
    """Build 4096 bytes of PCI config space.

    ext_caps: list of (offset, cap_id, version, {relative offset: (struct format, value)}).
    """
    cfg = bytearray(4096)
    struct.pack_into('<HHHH', cfg, 0x00, vendor, device, 0x0407, 0x0010)
    struct.pack_into('<I', cfg, 0x08, (class_code << 8) | 0xa1)
    cfg[0x0E] = header_type
    cfg[0x34] = 0x40
    # PCI Express capability (id 0x10), version 2, device/port type in bits 7:4
    struct.pack_into('<BBH', cfg, 0x40, 0x10, 0x00, 0x0002 | (port_type << 4))
    for pos, (offset, cap_id, version, fields) in enumerate(ext_caps):
        following = ext_caps[pos + 1][0] if pos + 1 < len(ext_caps) else 0
        struct.pack_into('<I', cfg, offset, cap_id | (version << 16) | (following << 20))
        for relative, (fmt, value) in sorted(fields.items()):
            struct.pack_into(fmt, cfg, offset + relative, value)
    return bytes(cfg)


def acs_cap(offset, control, capability=ACS_SV | ACS_TB | ACS_RR | ACS_CR | ACS_UF):
    return (offset, ACS, 1, {4: ('<H', capability), 6: ('<H', control)})


def root_port(vendor, device, acs_control):
    return {
        'vendor': '0x%04x\n' % vendor, 'device': '0x%04x\n' % device, 'class': '0x060400\n',
        'config': pci_config(vendor, device, 0x060400, 0x81, ROOT_PORT,
                             [(0x100, AER, 2, {}), acs_cap(0x148, acs_control)]),
    }


def switch_port(port_type, acs_control=None):
    caps = [(0x100, AER, 1, {}), (0x138, DSN, 1, {4: ('<Q', 0x001234FFFE567890)})]
    if acs_control is not None:
        caps.append(acs_cap(0x148, acs_control))
    return {
        'vendor': '0x10b5\n', 'device': '0x8747\n', 'class': '0x060400\n',
        'config': pci_config(0x10B5, 0x8747, 0x060400, 0x01, port_type, caps),
    }


def nvidia_gpu(gen_speed='32.0 GT/s PCIe', width=16):
    return {
        'vendor': '0x10de\n', 'device': '0x2bb1\n', 'class': '0x030000\n',
        'config': pci_config(0x10DE, 0x2BB1, 0x030000, 0x80, ENDPOINT, [(0x100, AER, 2, {}), (0x148, DSN, 1, {})]),
        'current_link_width': '%d\n' % width, 'max_link_width': '16\n',
        'current_link_speed': '2.5 GT/s PCIe\n', 'max_link_speed': gen_speed + '\n',
    }


def devices(case):
    """Return [(path below sys/devices, files)], parents before children; the last element is the BDF."""
    if case == 'target':
        return [
            ('pci0000:00/0000:00:01.0', root_port(0x8086, 0xA70D, 0x0000)),
            ('pci0000:00/0000:00:01.0/0000:01:00.0', nvidia_gpu()),
            ('pci0000:00/0000:00:01.1', root_port(0x8086, 0xA72D, 0x0000)),
            ('pci0000:00/0000:00:01.1/0000:02:00.0', nvidia_gpu()),
        ]
    if case == 'degraded':
        return [
            ('pci0000:00/0000:00:01.0', root_port(0x8086, 0xA70D, ACS_LINUX_DEFAULT)),
            ('pci0000:00/0000:00:01.0/0000:01:00.0', nvidia_gpu()),
            ('pci0000:80/0000:80:01.0', root_port(0x8086, 0xA70D, ACS_LINUX_DEFAULT)),
            ('pci0000:80/0000:80:01.0/0000:81:00.0', nvidia_gpu('16.0 GT/s PCIe', 8)),
        ]
    if case == 'acs_switch':
        up = 'pci0000:00/0000:00:01.0/0000:01:00.0'
        return [
            ('pci0000:00/0000:00:01.0', root_port(0x8086, 0xA70D, ACS_LINUX_DEFAULT)),
            (up, switch_port(SWITCH_UP)),
            (up + '/0000:02:08.0', switch_port(SWITCH_DOWN, ACS_LINUX_DEFAULT)),
            (up + '/0000:02:08.0/0000:03:00.0', nvidia_gpu()),
            (up + '/0000:02:10.0', switch_port(SWITCH_DOWN, ACS_LINUX_DEFAULT)),
            (up + '/0000:02:10.0/0000:04:00.0', nvidia_gpu()),
        ]
    raise ValueError('unknown case %s' % case)


MODULES_TARGET = """\
nvidia_uvm 1421312 0 - Live 0x0000000000000000 (POE)
nvidia_drm 77824 0 - Live 0x0000000000000000 (POE)
nvidia_modeset 1314816 1 nvidia_drm, Live 0x0000000000000000 (POE)
nvidia 60715008 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)
drm_kms_helper 212992 1 nvidia_drm, Live 0x0000000000000000
drm 614400 4 nvidia_drm,drm_kms_helper, Live 0x0000000000000000
intel_rapl_msr 20480 0 - Live 0x0000000000000000
ext4 987136 2 - Live 0x0000000000000000
nvme 53248 3 - Live 0x0000000000000000
"""

MODULES_DEGRADED = """\
nouveau 2805760 1 - Live 0x0000000000000000
mxm_wmi 16384 1 nouveau, Live 0x0000000000000000
drm_display_helper 184320 1 nouveau, Live 0x0000000000000000
ttm 94208 1 nouveau, Live 0x0000000000000000
drm_kms_helper 212992 2 nouveau,drm_display_helper, Live 0x0000000000000000
drm 614400 5 nouveau,drm_display_helper,ttm,drm_kms_helper, Live 0x0000000000000000
video 65536 1 nouveau, Live 0x0000000000000000
wmi 36864 2 mxm_wmi,video, Live 0x0000000000000000
ext4 987136 2 - Live 0x0000000000000000
nvme 53248 3 - Live 0x0000000000000000
"""

MEMINFO = """\
MemTotal:       {total:>9d} kB
MemFree:        {free:>9d} kB
MemAvailable:   {avail:>9d} kB
Buffers:           412344 kB
Cached:          8123456 kB
SwapCached:             0 kB
SwapTotal:        8388604 kB
SwapFree:         8388604 kB
HugePages_Total:        0
Hugepagesize:       2048 kB
"""

CASE_DATA = {
    'target': {
        'secure_boot': 0,
        'setup_mode': 0,
        'release': '6.1.0-28-amd64',
        'cmdline': 'BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=UUID=5f0c1e9a-2b7d-4c1e-9e43-1d2f3a4b5c6d ro quiet '
                   'intel_iommu=on iommu=pt\n',
        'modules': MODULES_TARGET,
        'meminfo': MEMINFO.format(total=263581576, free=240112344, avail=251234560),
        'headers': ('6.1.0-28-amd64',),
    },
    'degraded': {
        'secure_boot': 1,
        'setup_mode': 0,
        'release': '6.1.0-31-amd64',
        'cmdline': 'BOOT_IMAGE=/boot/vmlinuz-6.1.0-31-amd64 root=UUID=5f0c1e9a-2b7d-4c1e-9e43-1d2f3a4b5c6d ro quiet '
                   'intel_iommu=on\n',
        'modules': MODULES_DEGRADED,
        'meminfo': MEMINFO.format(total=32602452, free=28123456, avail=30123456),
        # headers only for the previous kernel: the running one has none
        'headers': ('6.1.0-28-amd64',),
    },
    'acs_switch': {
        'secure_boot': 0,
        'setup_mode': 0,
        'release': '6.1.0-28-amd64',
        'cmdline': 'BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=UUID=5f0c1e9a-2b7d-4c1e-9e43-1d2f3a4b5c6d ro quiet '
                   'intel_iommu=on iommu=pt\n',
        'modules': MODULES_TARGET,
        'meminfo': MEMINFO.format(total=263581576, free=240112344, avail=251234560),
        'headers': ('6.1.0-28-amd64',),
    },
}


def build_case(case, dest):
    """Write one case tree to dest (removed first)."""
    data = CASE_DATA[case]
    if os.path.lexists(dest):
        shutil.rmtree(dest)
    sys_dir = os.path.join(dest, 'sys')
    # efivarfs: 4 bytes of attributes (BS|RT = 0x6 for these two) + the value byte
    write_efivar(sys_dir, 'SecureBoot', EFI_GUID, struct.pack('<B', data['secure_boot']), attributes=0x06)
    write_efivar(sys_dir, 'SetupMode', EFI_GUID, struct.pack('<B', data['setup_mode']), attributes=0x06)
    write_file(os.path.join(sys_dir, 'class', 'iommu', 'dmar0', 'uevent'), '')
    for path, files in devices(case):
        write_pci_device(sys_dir, path, files)
    proc = os.path.join(dest, 'proc')
    write_file(os.path.join(proc, 'cmdline'), data['cmdline'])
    write_file(os.path.join(proc, 'modules'), data['modules'])
    write_file(os.path.join(proc, 'meminfo'), data['meminfo'])
    write_file(os.path.join(proc, 'sys', 'kernel', 'osrelease'), data['release'] + '\n')
    modules = os.path.join(dest, 'lib', 'modules')
    write_file(os.path.join(modules, data['release'], 'modules.dep'), 'kernel/drivers/nvme/host/nvme.ko:\n')
    for release in data['headers']:
        write_file(os.path.join(modules, release, 'modules.dep'), 'kernel/drivers/nvme/host/nvme.ko:\n')
        write_file(os.path.join(modules, release, 'build', 'Makefile'),
                   'include /usr/src/linux-headers-%s/Makefile\n' % release)


def build_all(dest_root):
    for case in CASES:
        build_case(case, os.path.join(dest_root, case))


def main(argv=None):
    return generator_main(argv, __doc__.splitlines()[0], build_all, CASES, HERE)


if __name__ == '__main__':
    sys.exit(main())
