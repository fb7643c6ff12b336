# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Preflight checks for an LLM serving host.

Everything here is a plain function over plain data plus a few small files
read below configurable roots (``sysfs_root``, ``procfs_root``,
``modules_root``), so the whole engine can be exercised against fake trees.
Nothing here imports Ansible.

Each check returns a dict with the keys ``id``, ``title``, ``status``
(pass|warn|fail|manual|skip), ``severity`` (the configured fail|warn|ignore),
``message``, ``why`` and ``fix``.  A failing condition reports its configured
severity as status; severity ``ignore`` turns the check into ``skip``.
"""

from __future__ import annotations

import os
import re
import struct
from collections import OrderedDict

from ansible_collections.homelab.llm_server.plugins.module_utils._hostfs import (
    efivar_data,
    legacy_efivar_data,
    list_dir,
    read_bytes,
    read_kernel_release,
    read_loaded_modules,
    read_text,
    read_value,
    resolve_link,
)

CHECK_IDS = (
    'uefi_boot',
    'secure_boot',
    'gpu_count',
    'nvidia_driver',
    'nouveau',
    'resizable_bar',
    'pcie_link',
    'p2p',
    'iommu_acs',
    'kernel_headers',
    'model_dir_disk',
    'ram',
    'psu_headroom',
    'power_on_after_power_loss',
    'ups',
)

DEFAULT_SEVERITY = {
    'uefi_boot': 'fail',
    'secure_boot': 'warn',
    'gpu_count': 'fail',
    'nvidia_driver': 'fail',
    'nouveau': 'fail',
    'resizable_bar': 'fail',
    'pcie_link': 'fail',
    'p2p': 'warn',
    'iommu_acs': 'warn',
    'kernel_headers': 'fail',
    'model_dir_disk': 'warn',
    'ram': 'fail',
    'psu_headroom': 'fail',
    # Always reported as ``manual``; ``ignore`` turns it into ``skip``.
    'power_on_after_power_loss': 'warn',
    'ups': 'fail',
}

SEVERITIES = ('fail', 'warn', 'ignore')
STATUSES = ('pass', 'warn', 'fail', 'manual', 'skip')

EFI_GLOBAL_VARIABLE_GUID = '8be4df61-93ca-11d2-aa0d-00e098032b8c'

PCI_EXT_CAP_START = 0x100
PCI_EXT_CAP_ID_ACS = 0x000D
PCI_ACS_CTRL_OFFSET = 6
PCI_ACS_SV = 0x0001
PCI_ACS_TB = 0x0002
PCI_ACS_RR = 0x0004
PCI_ACS_CR = 0x0008
PCI_ACS_UF = 0x0010
PCI_ACS_EC = 0x0020
PCI_ACS_DT = 0x0040

GB = 1000 ** 3
GIB = 1024 ** 3
MIB = 1024 ** 2

_BDF_RE = re.compile(r'^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$')
_BDF_DIR_RE = re.compile(r'^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$')

TITLES = {
    'uefi_boot': 'UEFI boot (not legacy BIOS / CSM)',
    'secure_boot': 'Secure Boot and kernel module signing',
    'gpu_count': 'All expected GPUs are visible',
    'nvidia_driver': 'NVIDIA driver loaded and NVML answering',
    'nouveau': 'nouveau driver not loaded',
    'resizable_bar': 'Resizable BAR / Above 4G Decoding',
    'pcie_link': 'PCIe link width and generation',
    'p2p': 'GPU peer-to-peer access',
    'iommu_acs': 'IOMMU mode and PCIe ACS redirect',
    'kernel_headers': 'Kernel headers for DKMS',
    'model_dir_disk': 'Free disk space for model weights',
    'ram': 'System RAM for model loading',
    'psu_headroom': 'PSU capacity and headroom',
    'power_on_after_power_loss': 'Power on after AC power loss (BIOS)',
    'ups': 'The UPS in the inventory answers through NUT',
}

WHY = {
    'uefi_boot': (
        'Resizable BAR, Above 4G Decoding and the firmware of modern GPUs need UEFI boot; '
        'under legacy/CSM boot the BIOS maps only a 256 MiB BAR and some cards do not initialise at all.'
    ),
    'secure_boot': (
        'With Secure Boot on, the kernel refuses unsigned modules: the NVIDIA DKMS modules build fine '
        'but fail to load ("Key was rejected by service") until they are signed with an enrolled Machine Owner Key.'
    ),
    'gpu_count': (
        'A missing GPU means the model does not fit or tensor-parallel size is wrong; '
        'it usually points at a riser, a power cable or a BIOS slot setting.'
    ),
    'nvidia_driver': (
        'vLLM, monitoring and the GPU facts all talk to the GPUs through NVML; '
        'without a working driver nothing can be served.'
    ),
    'nouveau': (
        'The open-source nouveau driver grabs NVIDIA GPUs at boot and prevents the proprietary '
        'nvidia module (needed for CUDA) from binding to them.'
    ),
    'resizable_bar': (
        'With a small (256 MiB) BAR the CPU can only see a window of VRAM: weight loading goes through '
        'staged copies, and P2P/GPUDirect transfers are slower or unavailable.'
    ),
    'pcie_link': (
        'Weights are loaded and tensor-parallel all-reduce traffic flows over PCIe; a downtrained link '
        '(x8 instead of x16, Gen3 instead of Gen4/5) halves or quarters that bandwidth. '
        'The current generation drops at idle for power saving and is therefore not judged.'
    ),
    'p2p': (
        'Tensor-parallel all-reduce between GPUs uses direct peer-to-peer transfers; without them NCCL '
        'falls back to staging through host memory, which is slower and on some boards hangs.'
    ),
    'iommu_acs': (
        'With ACS P2P redirect enabled on the ports of a PCIe switch, GPU-to-GPU traffic that should turn '
        'around in the switch is forced up to the root complex; with the IOMMU translating DMA, peer '
        'addresses go through IOMMU translation. Either way it is slow, blocked or silently dropped: '
        'a classic cause of NCCL / vLLM tensor-parallel hangs.'
    ),
    'kernel_headers': (
        'DKMS builds the NVIDIA kernel module against the headers of the running kernel; without them '
        'the driver cannot be built and the GPU is unusable after the next kernel update.'
    ),
    'model_dir_disk': (
        'Model weights are large (a 70B model is ~140 GB in BF16); a full disk breaks downloads '
        'half-way and can take the whole server down.'
    ),
    'ram': (
        'vLLM / safetensors loading pages the weights through host memory (page cache and pinned buffers); '
        'with less RAM than the model, loading thrashes or the OOM killer stops the server.'
    ),
    'psu_headroom': (
        'GPUs under LLM load sit at their power limit for long stretches and spike well above it for '
        'milliseconds; an undersized PSU trips its over-current protection and the whole server powers off.'
    ),
    'power_on_after_power_loss': (
        'After an outage the server must come back by itself; the UPS role shuts it down cleanly and '
        'relies on this BIOS setting to boot it again when power returns.'
    ),
    'ups': (
        'The ups role waits for the UPS to answer and stops the run when it does not; found here, before any '
        'change, a missing or unplugged UPS is one finding instead of a failure late in site.yml.'
    ),
}

FIX = {
    'uefi_boot': (
        'Disable CSM (Compatibility Support Module) in the BIOS and boot in UEFI mode; an installed system '
        'must be converted (EFI system partition + grub-efi-amd64) or reinstalled in UEFI mode.'
    ),
    'secure_boot': (
        'Keep Secure Boot on and enrol the DKMS signing key: the nvidia_driver role stages it with '
        '`mokutil --import /var/lib/dkms/mok.pub`; at the next boot choose "Enroll MOK" in the blue MokManager '
        'screen and enter the one-time password. Alternatively disable Secure Boot in the BIOS.'
    ),
    'gpu_count': (
        'Reseat the cards and risers, connect every PCIe power cable (12VHPWR / 12V-2x6 fully inserted), '
        'check in the BIOS that the slots are enabled and bifurcation is set correctly, then compare '
        '`lspci -nn | grep -i -e nvidia -e amd` with `nvidia-smi -L` and look for NVRM / amdgpu errors in dmesg.'
    ),
    'nvidia_driver': (
        'Install the driver (nvidia_driver role), reboot after a driver upgrade, or load it with '
        '`modprobe nvidia`; check `dmesg | grep -i NVRM` for the reason it did not load '
        '(Secure Boot key, missing headers, GPU fallen off the bus).'
    ),
    'nouveau': (
        'Blacklist nouveau: write "blacklist nouveau" and "options nouveau modeset=0" to '
        '/etc/modprobe.d/blacklist-nouveau.conf, run `update-initramfs -u` and reboot '
        '(the nvidia_driver role does this).'
    ),
    'resizable_bar': (
        'In the BIOS enable "Above 4G Decoding" and "Re-Size BAR Support" (needs UEFI boot with CSM off); '
        'if the option is missing or has no effect, update the motherboard BIOS and the GPU VBIOS.'
    ),
    'pcie_link': (
        'Move the card to a CPU-attached x16 slot, remove x8 risers or slot bifurcation (x8/x8), set the slot '
        'speed to Gen5 / Auto in the BIOS, reseat the card, and use a riser rated for the link generation '
        '(PCIe 4.0/5.0).'
    ),
    'p2p': (
        'Nothing to do for correctness: the vllm role sets NCCL_P2P_DISABLE=1 automatically when P2P is '
        'unavailable. For full speed place the GPUs under one root complex / PCIe switch (same CPU socket).'
    ),
    'iommu_acs': (
        'Add iommu=pt to GRUB_CMDLINE_LINUX in /etc/default/grub and run update-grub (or disable VT-d / '
        'AMD-Vi IOMMU in the BIOS if you use no VMs or PCI passthrough); disable ACS in the BIOS '
        '(PCIe / chipset settings, "ACS Enable" = Disabled) or clear ACS redirect at every boot with '
        '`setpci -s <bridge> ECAP_ACS+0x6.w=0000`; then verify with the NCCL tests '
        '(all_reduce_perf -b 8 -e 1G -g <number of GPUs>).'
    ),
    'kernel_headers': (
        'Install the headers of the running kernel: `apt install linux-headers-$(uname -r)` '
        '(and linux-headers-amd64 so future kernels get theirs), then `dkms autoinstall`.'
    ),
    'model_dir_disk': (
        'Free space or mount a bigger disk at the model directory (NVMe preferred for load speed), '
        'or point model_dir at a filesystem with room.'
    ),
    'ram': (
        'Add RAM (populate all memory channels), serve a smaller or quantised model, or lower '
        'ram_to_model_ratio if you have measured that loading works with less.'
    ),
    'psu_headroom': (
        'Cap GPU power with `nvidia-smi -pl <watts>` (the nvidia_driver role can set persistent power limits; '
        'then set psu_power_limit_source=current so this check counts the caps) or fit a bigger PSU '
        '(ATX 3.x units are rated for GPU transient spikes).'
    ),
    'power_on_after_power_loss': (
        'In the BIOS set "Restore on AC Power Loss" (also called "AC Back", "After Power Failure" or '
        '"State After G3") to "Power On", and test it once by pulling the plug.'
    ),
    'ups': (
        'Plug the UPS in (its USB or serial cable) and check that ups_driver and ups_port fit it (`nut-scanner -U` '
        'lists USB UPSes); `journalctl -u nut-driver@NAME -u nut-server` says why NUT cannot read it. A host '
        'without a UPS: remove ups_enabled: true from its inventory (the default is false).'
    ),
}


# ---------------------------------------------------------------------------
# small helpers


def _num(value):
    """Return value as int/float, or None when missing or not numeric."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        text = str(value).strip()
        return int(text) if re.match(r'^-?\d+$', text) else float(text)
    except ValueError:
        return None


def _fmt_num(value):
    if value is None:
        return '?'
    if isinstance(value, float) and value.is_integer():
        return '%d' % value
    if isinstance(value, float):
        return '%g' % value
    return '%s' % value


def _plural(count, word, plural=None):
    return '%d %s' % (count, word if count == 1 else (plural or word + 's'))


def normalize_bdf(value):
    """Normalise a PCI address to ``dddd:bb:dd.f`` (NVML uses 8 domain digits)."""
    if not value:
        return None
    match = _BDF_RE.match(str(value).strip())
    if not match:
        return None
    domain = int(match.group(1) or '0', 16)
    return '%04x:%02x:%02x.%s' % (domain, int(match.group(2), 16), int(match.group(3), 16), match.group(4))


def gpu_label(gpu, position=0):
    index = gpu.get('index')
    if index is None:
        index = position
    bdf = normalize_bdf(gpu.get('pci_bus_id')) or gpu.get('pci_bus_id') or 'unknown bus id'
    return 'GPU %s (%s)' % (index, bdf)


def _vendor(gpu):
    return str(gpu.get('vendor') or '').strip().lower()


def read_cmdline(procfs_root):
    text = read_text(os.path.join(procfs_root, 'cmdline'))
    if text is None:
        return None
    return text.replace('\x00', ' ').split()


def read_meminfo_bytes(procfs_root, key='MemTotal'):
    text = read_text(os.path.join(procfs_root, 'meminfo'))
    if text is None:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == key + ':':
            value = _num(parts[1])
            if value is None:
                return None
            unit = parts[2].lower() if len(parts) > 2 else ''
            return int(value * 1024) if unit == 'kb' else int(value)
    return None


def read_efi_variable(sysfs_root, name, guid=EFI_GLOBAL_VARIABLE_GUID):
    """First value byte of an EFI variable (efivarfs, else the legacy sysfs interface), or None."""
    data = efivar_data(sysfs_root, name, guid)
    if not data:
        data = legacy_efivar_data(sysfs_root, name, guid)
    if not data:
        return None
    return bytearray(data)[0]


# ---------------------------------------------------------------------------
# PCI helpers


def pci_device_path(sysfs_root, bdf):
    """Directory of a PCI device below <sysfs>/devices, or None if absent."""
    link = os.path.join(sysfs_root, 'bus', 'pci', 'devices', bdf)
    if not os.path.lexists(link):
        return None
    path = resolve_link(sysfs_root, link)
    return path if os.path.isdir(path) else None


def pci_upstream_bridges(sysfs_root, bdf):
    """Upstream bridges of a PCI device, nearest first, as (bdf, path); None if absent."""
    path = pci_device_path(sysfs_root, bdf)
    if path is None:
        return None
    bridges = []
    parent = os.path.dirname(path)
    while _BDF_DIR_RE.match(os.path.basename(parent)):
        bridges.append((os.path.basename(parent), parent))
        parent = os.path.dirname(parent)
    return bridges


def find_ext_capability(config, cap_id):
    """Offset of a PCIe extended capability in config space bytes, or None."""
    offset = PCI_EXT_CAP_START
    seen = set()
    while offset >= PCI_EXT_CAP_START and offset + 4 <= len(config) and offset not in seen:
        seen.add(offset)
        header = struct.unpack_from('<I', config, offset)[0]
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == cap_id:
            return offset
        offset = (header >> 20) & 0xFFC
    return None


def parse_acs_control(config):
    """Inspect PCI config space bytes for the ACS control register.

    Returns ``(state, value)`` where state is ``unreadable`` (short read: the
    extended config space needs root), ``no_acs`` or ``ok`` (value = ACS
    control register).
    """
    if config is None or len(config) < PCI_EXT_CAP_START + 8:
        return 'unreadable', None
    offset = find_ext_capability(config, PCI_EXT_CAP_ID_ACS)
    if offset is None or offset + PCI_ACS_CTRL_OFFSET + 2 > len(config):
        return 'no_acs', None
    return 'ok', struct.unpack_from('<H', config, offset + PCI_ACS_CTRL_OFFSET)[0]


def read_bridge_acs(path):
    return parse_acs_control(read_bytes(os.path.join(path, 'config'), 4096))


def pci_display_devices(sysfs_root, vendor_id):
    """BDFs of PCI display controllers (class 0x03xxxx) of a vendor, or None if unknown."""
    base = os.path.join(sysfs_root, 'bus', 'pci', 'devices')
    entries = list_dir(base)
    if entries is None:
        return None
    found = []
    for entry in entries:
        path = resolve_link(sysfs_root, os.path.join(base, entry))
        vendor = (read_value(os.path.join(path, 'vendor')) or '').lower()
        pci_class = (read_value(os.path.join(path, 'class')) or '').lower()
        if vendor == vendor_id and pci_class.startswith('0x03'):
            found.append(entry)
    return found


# ---------------------------------------------------------------------------
# check framework


class _Ctx(object):
    """Inputs shared by all checks."""

    def __init__(self, params, statvfs=None, ups_probe=None):
        self.params = params
        self.gpus = [gpu for gpu in (params.get('gpus') or []) if isinstance(gpu, dict)]
        self.topology = [item for item in (params.get('gpu_topology') or []) if isinstance(item, dict)]
        self.sysfs = params.get('sysfs_root') or '/sys'
        self.procfs = params.get('procfs_root') or '/proc'
        self.modules_root = params.get('modules_root') or '/lib/modules'
        self.statvfs = statvfs or os.statvfs
        # (argv -> (rc, stdout, stderr)) that runs NUT's upsc; None when
        # NUT's client is not installed.
        self.ups_probe = ups_probe
        self._modules = None
        self._modules_read = False

    @property
    def modules(self):
        if not self._modules_read:
            self._modules = read_loaded_modules(self.procfs)
            self._modules_read = True
        return self._modules

    def uefi(self):
        return os.path.isdir(os.path.join(self.sysfs, 'firmware', 'efi'))

    def labelled_gpus(self):
        return [(gpu_label(gpu, pos), gpu) for pos, gpu in enumerate(self.gpus)]


def effective_severity(check_id, overrides=None):
    overrides = overrides or {}
    return overrides.get(check_id) or DEFAULT_SEVERITY[check_id]


def make_check(check_id, severity, outcome, message, fix=None):
    """Build a check result.

    outcome: ``pass``; ``problem`` (status = configured severity); ``soft``
    (something could not be determined or only deserves a warning: status
    warn); ``manual``; ``na`` (not applicable: skip).  Severity ``ignore``
    turns every outcome except ``pass`` into ``skip``.
    """
    if outcome == 'pass':
        status = 'pass'
    elif outcome == 'na' or severity == 'ignore':
        status = 'skip'
    elif outcome == 'problem':
        status = severity
    elif outcome == 'manual':
        status = 'manual'
    else:
        status = 'warn'
    return {
        'id': check_id,
        'title': TITLES[check_id],
        'status': status,
        'severity': severity,
        'message': message,
        'why': WHY[check_id],
        'fix': fix or FIX[check_id],
    }


# ---------------------------------------------------------------------------
# checks: each takes (ctx, severity) and returns a check dict


def check_uefi_boot(ctx, severity):
    efi = os.path.join(ctx.sysfs, 'firmware', 'efi')
    if ctx.uefi():
        return make_check('uefi_boot', severity, 'pass', 'Booted in UEFI mode (%s exists).' % efi)
    return make_check(
        'uefi_boot', severity, 'problem',
        'Legacy BIOS / CSM boot: %s is missing, so Resizable BAR and Above 4G Decoding cannot work.' % efi)


def check_secure_boot(ctx, severity):
    if not ctx.uefi():
        return make_check('secure_boot', severity, 'na', 'Not booted in UEFI mode: Secure Boot cannot be active.')
    state = read_efi_variable(ctx.sysfs, 'SecureBoot')
    setup = read_efi_variable(ctx.sysfs, 'SetupMode')
    setup_note = ''
    if setup == 1:
        setup_note = ' The firmware is in Setup Mode (no platform key enrolled).'
    elif setup == 0:
        setup_note = ' The firmware is in User Mode (SetupMode=0).'
    if state is None:
        return make_check(
            'secure_boot', severity, 'soft',
            'Secure Boot state unknown: the SecureBoot-%s EFI variable is not readable.%s'
            % (EFI_GLOBAL_VARIABLE_GUID, setup_note))
    if state == 1:
        return make_check(
            'secure_boot', severity, 'problem',
            'Secure Boot is enabled: the NVIDIA DKMS kernel modules must be signed with a Machine Owner Key (MOK) '
            'and the key enrolled at the next boot (the nvidia_driver role stages it).%s' % setup_note)
    return make_check('secure_boot', severity, 'pass', 'Secure Boot is disabled.%s' % setup_note)


def check_gpu_count(ctx, severity):
    expected = _num(ctx.params.get('expected_gpu_count')) or 0
    seen = len(ctx.gpus)
    names = ', '.join(label for label, dummy in ctx.labelled_gpus()) or 'none'
    if expected <= 0:
        return make_check('gpu_count', severity, 'na',
                          'expected_gpu_count is not set; %s visible (%s).' % (_plural(seen, 'GPU'), names))
    if seen < expected:
        message = 'Only %d of %d expected GPUs are visible (%s).' % (seen, expected, names)
        pci = pci_display_devices(ctx.sysfs, '0x10de')
        if pci:
            message += ' PCI lists %s: %s.' % (_plural(len(pci), 'NVIDIA display controller'), ', '.join(pci))
        return make_check('gpu_count', severity, 'problem', message)
    return make_check('gpu_count', severity, 'pass',
                      '%s visible, %d expected (%s).' % (_plural(seen, 'GPU'), expected, names))


def check_nvidia_driver(ctx, severity):
    error = ctx.params.get('nvml_error')
    nvidia = [gpu for gpu in ctx.gpus if _vendor(gpu) == 'nvidia']
    modules = ctx.modules
    if error:
        if not nvidia and pci_display_devices(ctx.sysfs, '0x10de') == [] and not (modules and 'nvidia' in modules):
            return make_check('nvidia_driver', severity, 'na',
                              'NVML reported "%s", but this host has no NVIDIA display device on the PCI bus.' % error)
        error = str(error).strip()
        message = 'NVIDIA driver not usable: %s%s' % (error, '' if error.endswith('.') else '.')
        if modules is not None and 'nvidia' in modules:
            if 'mismatch' in error.lower():
                message += (' The nvidia kernel module is loaded but differs from the user-space library: '
                            'reboot after the driver upgrade.')
            else:
                message += ' The nvidia kernel module is loaded.'
        elif modules is not None:
            message += ' The nvidia kernel module is not loaded.'
        return make_check('nvidia_driver', severity, 'problem', message)
    if nvidia:
        versions = sorted(set(str(gpu.get('driver_version')) for gpu in nvidia if gpu.get('driver_version')))
        message = 'NVML answers for %s' % _plural(len(nvidia), 'NVIDIA GPU')
        if versions:
            message += ', driver %s' % ', '.join(versions)
        return make_check('nvidia_driver', severity, 'pass', message + '.')
    return make_check('nvidia_driver', severity, 'na', 'No NVIDIA GPUs reported and no NVML error.')


def check_nouveau(ctx, severity):
    modules = ctx.modules
    path = os.path.join(ctx.procfs, 'modules')
    if modules is None:
        return make_check('nouveau', severity, 'na', 'Cannot read %s.' % path)
    if 'nouveau' in modules:
        return make_check('nouveau', severity, 'problem',
                          'The nouveau kernel module is loaded (%s): the NVIDIA driver cannot bind to the GPUs.' % path)
    return make_check('nouveau', severity, 'pass', 'nouveau is not loaded.')


def check_resizable_bar(ctx, severity):
    small = []
    good = []
    for label, gpu in ctx.labelled_gpus():
        if _vendor(gpu) not in ('nvidia', 'amd'):
            continue
        bar_bytes = _num(gpu.get('bar1_total_bytes'))
        vram = _num(gpu.get('memory_total_bytes'))
        if bar_bytes is None or vram is None or vram <= 0:
            continue
        text = '%s BAR1 %d MiB vs VRAM %.1f GiB' % (label, bar_bytes // MIB, float(vram) / GIB)
        (small if bar_bytes < vram else good).append(text)
    if small:
        return make_check(
            'resizable_bar', severity, 'problem',
            'Resizable BAR is off or limited (check Above 4G Decoding): %s.' % '; '.join(small))
    if good:
        return make_check('resizable_bar', severity, 'pass',
                          'Resizable BAR active (Above 4G Decoding on): %s.' % '; '.join(good))
    return make_check('resizable_bar', severity, 'na', 'No GPU reports both its BAR1 and VRAM size.')


def check_pcie_link(ctx, severity):
    bad = []
    good = []
    for label, gpu in ctx.labelled_gpus():
        width = _num(gpu.get('pcie_link_width_current'))
        width_max = _num(gpu.get('pcie_link_width_max'))
        gen_max = _num(gpu.get('pcie_link_gen_max'))
        gen_gpu = _num(gpu.get('pcie_link_gen_gpu_max'))
        gen_now = _num(gpu.get('pcie_link_gen_current'))
        if width is None and gen_max is None:
            continue
        narrow = width is not None and width_max is not None and width < width_max
        slow = gen_max is not None and gen_gpu is not None and gen_max < gen_gpu
        # running = the link as trained now (sysfs current_link_speed/width),
        # max = the most the link can train to (max_link_speed/width).
        figures = 'running Gen%s x%s, max Gen%s x%s' % (
            _fmt_num(gen_now), _fmt_num(width), _fmt_num(gen_max), _fmt_num(width_max))
        if narrow or slow:
            text = '%s PCIe link downtrained: %s' % (label, figures)
            if slow:
                text += ', GPU supports Gen%s' % _fmt_num(gen_gpu)
            bad.append(text)
        else:
            good.append('%s %s' % (label, figures))
    # The running generation drops at idle for power saving: only the maximum is judged.
    if bad:
        return make_check('pcie_link', severity, 'problem', '; '.join(bad) + '.')
    if good:
        return make_check('pcie_link', severity, 'pass',
                          'Full PCIe links: %s (a running generation below the maximum at idle is not judged).'
                          % '; '.join(good))
    return make_check('pcie_link', severity, 'na', 'No GPU reports its PCIe link.')


def check_p2p(ctx, severity):
    nvidia = [gpu for gpu in ctx.gpus if _vendor(gpu) == 'nvidia']
    if len(nvidia) < 2:
        return make_check('p2p', severity, 'na',
                          'Fewer than two NVIDIA GPUs (%d): peer-to-peer does not apply.' % len(nvidia))
    indexes = set(gpu.get('index') for gpu in nvidia)
    bad = []
    good = []
    for item in ctx.topology:
        members = list(item.get('gpus') or [])
        if len(members) < 2 or not all(member in indexes for member in members):
            continue
        pair = ' <-> '.join('GPU %s' % member for member in members)
        p2p = item.get('p2p') or {}
        ancestor = item.get('common_ancestor')
        problems = []
        for mode in ('read', 'write'):
            value = p2p.get(mode)
            if value not in (None, 'ok'):
                problems.append('%s %s' % (mode, value))
        if ancestor == 'system':
            problems.append('path crosses CPU sockets / root complexes (common ancestor: system)')
        if problems:
            bad.append('%s: %s' % (pair, ', '.join(problems)))
        else:
            good.append('%s (common ancestor: %s)' % (pair, ancestor or 'unknown'))
    if bad:
        return make_check('p2p', severity, 'problem',
                          'GPU peer-to-peer unavailable or slow, NCCL will stage through host memory: %s.' % '; '.join(bad))
    if good:
        return make_check('p2p', severity, 'pass', 'GPU peer-to-peer read/write ok: %s.' % '; '.join(good))
    return make_check('p2p', severity, 'na', 'No GPU topology data for the %d NVIDIA GPUs.' % len(nvidia))


_IOMMU_OFF = ('intel_iommu=off', 'amd_iommu=off', 'iommu=off')
_IOMMU_PT = ('iommu=pt', 'iommu.passthrough=1', 'iommu.passthrough=on', 'iommu.passthrough=y', 'amd_iommu=pt')


def _iommu_group_types(ctx, device_paths):
    types = []
    for path in device_paths:
        link = os.path.join(path, 'iommu_group')
        if os.path.lexists(link):
            value = read_value(os.path.join(resolve_link(ctx.sysfs, link), 'type'))
            if value:
                types.append(value)
    return types


def check_iommu_acs(ctx, severity):
    bdfs = []
    for gpu in ctx.gpus:
        bdf = normalize_bdf(gpu.get('pci_bus_id'))
        if bdf and bdf not in bdfs:
            bdfs.append(bdf)
    if len(bdfs) < 2:
        return make_check('iommu_acs', severity, 'na',
                          'Fewer than two GPUs with a PCI address (%d): ACS / IOMMU peer-to-peer routing does not apply.'
                          % len(bdfs))

    notes = []
    problems = []
    soft = []

    # IOMMU mode
    cmdline = read_cmdline(ctx.procfs)
    tokens = set(cmdline or [])
    iommu_active = bool(list_dir(os.path.join(ctx.sysfs, 'class', 'iommu'))
                        or list_dir(os.path.join(ctx.sysfs, 'kernel', 'iommu_groups')))
    device_paths = [p for p in (pci_device_path(ctx.sysfs, bdf) for bdf in bdfs) if p]
    group_types = _iommu_group_types(ctx, device_paths)
    if not iommu_active or tokens.intersection(_IOMMU_OFF):
        iommu_text = 'IOMMU off'
    elif group_types:
        translated = [value for value in group_types if value.upper().startswith('DMA')]
        if translated:
            iommu_text = 'IOMMU translating GPU DMA (group type %s)' % ', '.join(sorted(set(translated)))
            soft.append(iommu_text)
        else:
            iommu_text = 'IOMMU passthrough (group type %s)' % ', '.join(sorted(set(group_types)))
    elif tokens.intersection(_IOMMU_PT):
        iommu_text = 'IOMMU passthrough (%s)' % ', '.join(sorted(tokens.intersection(_IOMMU_PT)))
    else:
        iommu_text = ('IOMMU active in translated DMA mode (no iommu=pt on the kernel command line%s)'
                      % ('' if cmdline is not None else ', %s unreadable' % os.path.join(ctx.procfs, 'cmdline')))
        soft.append(iommu_text)

    # ACS on the bridges between each pair of GPUs
    chains = {}
    for bdf in bdfs:
        chain = pci_upstream_bridges(ctx.sysfs, bdf)
        if chain is None:
            notes.append('%s not found under %s' % (bdf, os.path.join(ctx.sysfs, 'bus', 'pci', 'devices')))
        else:
            chains[bdf] = chain
    # ACS redirect only changes the path of traffic that would otherwise turn
    # around below the root complex, i.e. inside a PCIe switch: the bridges
    # between a GPU and the lowest bridge both GPUs share. GPUs on different
    # root ports cross the root complex anyway (the kernel enables redirect on
    # root ports whenever the IOMMU is on); there only the IOMMU mode matters.
    between = OrderedDict()
    shared_pairs = 0
    present = [bdf for bdf in bdfs if bdf in chains]
    for pos, first in enumerate(present):
        for second in present[pos + 1:]:
            first_names = [name for name, dummy in chains[first]]
            second_names = [name for name, dummy in chains[second]]
            common = [name for name in first_names if name in second_names]
            if not common:
                continue
            shared_pairs += 1
            for chain, names in ((chains[first], first_names), (chains[second], second_names)):
                for name, path in chain[:names.index(common[0])]:
                    between[name] = path
    redirect = []
    unreadable = []
    for name, path in between.items():
        state, value = read_bridge_acs(path)
        if state == 'unreadable':
            unreadable.append(name)
        elif state == 'ok' and value & (PCI_ACS_RR | PCI_ACS_CR):
            redirect.append((name, value))
    if redirect:
        problems.append(
            'ACS P2P Request/Completion Redirect is enabled on %s between the GPUs: peer-to-peer traffic is forced '
            'up to the root complex, a known cause of NCCL / vLLM tensor-parallel hangs'
            % ', '.join('bridge %s (ACS control 0x%04x)' % item for item in redirect))
    if soft:
        soft[-1] += (' with %d GPUs: peer-to-peer DMA through the IOMMU is slow or fails (vLLM tensor-parallel hangs)'
                     % len(bdfs))
    if unreadable:
        notes.append('config space of %s not readable (extended config space needs root)' % ', '.join(unreadable))

    fix = FIX['iommu_acs']
    if redirect:
        names = [name for name, dummy in redirect]
        fix += (' For these bridges: `%s` (not persistent: run it from a boot-time unit), or add '
                '"pci=disable_acs_redir=%s" to the kernel command line.'
                % ('; '.join('setpci -s %s ECAP_ACS+0x6.w=0000' % name for name in names), ';'.join(names)))

    if problems or soft:
        message = '; '.join(problems + soft)
        if notes:
            message += ' (note: %s)' % '; '.join(notes)
        outcome = 'problem' if problems else 'soft'
        return make_check('iommu_acs', severity, outcome, message + '.', fix=fix)
    devices_dir = os.path.join(ctx.sysfs, 'bus', 'pci', 'devices')
    # Without two GPUs in sysfs there is no pair whose path could be judged.
    if not chains:
        return make_check('iommu_acs', severity, 'na',
                          'No GPU was found under %s (looked for %s), so ACS could not be checked.'
                          % (devices_dir, ', '.join(bdfs)))
    if len(chains) < 2:
        return make_check('iommu_acs', severity, 'na',
                          '%s; only %s was found under %s (%s not), so ACS between the GPUs could not be checked.'
                          % (iommu_text, ', '.join(chains), devices_dir,
                             ', '.join(bdf for bdf in bdfs if bdf not in chains)))
    checked = len(between) - len(unreadable)
    if shared_pairs:
        message = '%s; no ACS redirect on the %s between the %d GPUs' % (
            iommu_text, _plural(checked, 'switch port'), len(bdfs))
    else:
        message = '%s; the GPUs share no PCIe switch, so ACS redirect cannot reroute their traffic' % iommu_text
    if notes:
        message += ' (note: %s)' % '; '.join(notes)
    return make_check('iommu_acs', severity, 'pass', message + '.', fix=fix)


def check_kernel_headers(ctx, severity):
    osrelease = os.path.join(ctx.procfs, 'sys', 'kernel', 'osrelease')
    release = read_kernel_release(ctx.procfs)
    if not release:
        return make_check('kernel_headers', severity, 'na', 'Cannot read the kernel release from %s.' % osrelease)
    build = os.path.join(ctx.modules_root, release, 'build')
    fix = ('Install the headers of the running kernel: `apt install linux-headers-%s` (and linux-headers-amd64 so '
           'future kernels get theirs), then `dkms autoinstall`.' % release)
    if os.path.exists(build):
        return make_check('kernel_headers', severity, 'pass',
                          'Headers for kernel %s are installed (%s).' % (release, build), fix=fix)
    return make_check(
        'kernel_headers', severity, 'problem',
        'Kernel headers for %s are missing (%s does not exist): DKMS cannot build the NVIDIA driver module.'
        % (release, build), fix=fix)


def check_model_dir_disk(ctx, severity):
    model_dir = os.path.abspath(ctx.params.get('model_dir') or '/srv/models')
    minimum = _num(ctx.params.get('model_dir_min_free_gb'))
    minimum = 200 if minimum is None else minimum
    probe = model_dir
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        stat = ctx.statvfs(probe)
    except (IOError, OSError) as exc:
        return make_check('model_dir_disk', severity, 'na', 'Cannot stat %s: %s.' % (probe, exc))
    free_gb = float(stat.f_bavail) * stat.f_frsize / GB
    where = model_dir if probe == model_dir else '%s (does not exist yet; measured on %s)' % (model_dir, probe)
    message = '%.1f GB free for %s, %s GB wanted' % (free_gb, where, _fmt_num(minimum))
    if free_gb < minimum:
        return make_check('model_dir_disk', severity, 'problem', 'Only ' + message + '.')
    return make_check('model_dir_disk', severity, 'pass', message + '.')


def check_ram(ctx, severity):
    planned = _num(ctx.params.get('planned_model_gb')) or 0
    ratio = _num(ctx.params.get('ram_to_model_ratio'))
    ratio = 1.0 if ratio is None else ratio
    if planned <= 0:
        return make_check('ram', severity, 'na', 'planned_model_gb is not set: RAM is not checked.')
    total = read_meminfo_bytes(ctx.procfs)
    if total is None:
        return make_check('ram', severity, 'soft', 'Cannot read MemTotal from %s.' % os.path.join(ctx.procfs, 'meminfo'))
    have = float(total) / GB
    need = float(planned) * ratio
    message = '%.1f GB RAM; a %s GB model x ratio %s needs %.1f GB' % (have, _fmt_num(planned), _fmt_num(ratio), need)
    if have < need:
        return make_check('ram', severity, 'problem', 'Not enough RAM: ' + message + '.')
    return make_check('ram', severity, 'pass', message + '.')


def _gpu_watts(gpu, source):
    current = _num(gpu.get('power_limit_w'))
    maximum = _num(gpu.get('power_limit_max_w'))
    if source == 'current':
        value = current if current is not None else maximum
    else:
        value = maximum if maximum is not None else current
    return None if value is None or value <= 0 else int(round(value))


def check_psu_headroom(ctx, severity):
    source = ctx.params.get('psu_power_limit_source') or 'max'
    psu = int(_num(ctx.params.get('psu_watts')) or 0)
    cpu = _num(ctx.params.get('cpu_power_allowance_w'))
    cpu = 250 if cpu is None else int(cpu)
    headroom = _num(ctx.params.get('psu_headroom_percent'))
    headroom = 20 if headroom is None else int(headroom)
    groups = OrderedDict()
    unknown = []
    for label, gpu in ctx.labelled_gpus():
        watts = _gpu_watts(gpu, source)
        if watts is None:
            unknown.append(label)
        else:
            groups[watts] = groups.get(watts, 0) + 1
    gpu_count = sum(groups.values())
    gpu_total = sum(watts * count for watts, count in groups.items())
    total = gpu_total + cpu
    required = -(-total * (100 + headroom) // 100)  # ceil without float error
    if groups:
        gpu_text = '%s GPU%s' % (' + '.join('%d x %d W' % (count, watts) for watts, count in groups.items()),
                                 '' if gpu_count == 1 else 's')
    else:
        gpu_text = 'no GPU power limits'
    figures = '%s + %d W CPU = %d W; with %d%% headroom you need %d W' % (gpu_text, cpu, total, headroom, required)
    note = ''
    if unknown:
        note = ' Power limit unknown (not counted) for %s.' % ', '.join(unknown)
    if psu <= 0:
        return make_check('psu_headroom', severity, 'soft',
                          'PSU size unknown: set psu_watts. %s.%s' % (figures, note))
    if psu < required:
        return make_check('psu_headroom', severity, 'problem',
                          'PSU too small: %s, the inventory says %d W.%s' % (figures, psu, note))
    if unknown:
        return make_check('psu_headroom', severity, 'soft', '%s, the inventory says %d W.%s' % (figures, psu, note))
    return make_check('psu_headroom', severity, 'pass', '%s, the inventory says %d W.' % (figures, psu))


def check_power_on_after_power_loss(ctx, severity):
    return make_check(
        'power_on_after_power_loss', severity, 'manual',
        'Linux cannot read this BIOS setting: confirm by hand that "Restore on AC Power Loss" is set to "Power On".')


_UPS_SECTION_RE = re.compile(r'^\s*\[([^\]]+)\]\s*$')
_UPS_SETTING_RE = re.compile(r'^\s*([A-Za-z0-9_.]+)\s*=\s*"?([^"]*)"?\s*$')


def read_ups_conf(path):
    """{section: {setting: value}} of NUT's ups.conf; None when it cannot be read."""
    text = read_text(path)
    if text is None:
        return None
    sections = OrderedDict()
    current = None
    for line in text.splitlines():
        line = line.split('#', 1)[0]
        match = _UPS_SECTION_RE.match(line)
        if match:
            current = sections.setdefault(match.group(1).strip(), {})
            continue
        match = _UPS_SETTING_RE.match(line)
        if match and current is not None:
            current[match.group(1)] = match.group(2).strip()
    return sections


def check_ups(ctx, severity):
    """The UPS the inventory names answers through NUT, where NUT is set up for it.

    Not set up yet (a fresh host: no upsc, or no section for the UPS in
    ups.conf) is no finding: the ups role installs NUT and waits for the UPS
    itself. Set up for it (the section is there) and upsc cannot read it:
    the UPS is absent, unplugged or not the one the driver expects.
    """
    name = ctx.params.get('ups_name')
    if not name:
        return make_check('ups', severity, 'na', 'No UPS in the inventory (ups_enabled is false): nothing to check.')
    conf = os.path.join(ctx.params.get('nut_config_dir') or '/etc/nut', 'ups.conf')
    sections = read_ups_conf(conf) if ctx.ups_probe is not None else None
    if sections is None or name not in sections:
        return make_check(
            'ups', severity, 'na',
            'NUT is not set up for UPS %s yet (%s): the ups role installs and configures it, then waits for the '
            'UPS to answer.' % (name, 'its client upsc is not installed' if ctx.ups_probe is None
                                else 'no [%s] section in %s' % (name, conf)))
    section = sections[name]
    target = '%s@localhost' % name
    fix = FIX['ups'].replace('nut-driver@NAME', 'nut-driver@%s' % name)
    rc, out, err = ctx.ups_probe(['upsc', target, 'ups.status'])
    status = (out or '').strip()
    if rc == 0 and status:
        return make_check('ups', severity, 'pass', 'UPS %s answers through NUT: ups.status %s.' % (name, status),
                          fix=fix)
    # upsc's own words; its "Init SSL without certificate database" notice
    # (NUT built with SSL, none set up) says nothing about the UPS.
    lines = [line.strip() for line in ((err or '') + '\n' + (out or '')).splitlines()
             if line.strip() and not line.strip().startswith('Init SSL')]
    said = ' '.join(lines) or 'no answer (exit code %s)' % rc
    return make_check(
        'ups', severity, 'problem',
        'UPS %s is set up in %s (driver %s, port %s) but NUT cannot read it: upsc %s ups.status says "%s".'
        % (name, conf, section.get('driver', 'unknown'), section.get('port', 'unknown'), target, said), fix=fix)


CHECKS = OrderedDict([
    ('uefi_boot', check_uefi_boot),
    ('secure_boot', check_secure_boot),
    ('gpu_count', check_gpu_count),
    ('nvidia_driver', check_nvidia_driver),
    ('nouveau', check_nouveau),
    ('resizable_bar', check_resizable_bar),
    ('pcie_link', check_pcie_link),
    ('p2p', check_p2p),
    ('iommu_acs', check_iommu_acs),
    ('kernel_headers', check_kernel_headers),
    ('model_dir_disk', check_model_dir_disk),
    ('ram', check_ram),
    ('psu_headroom', check_psu_headroom),
    ('power_on_after_power_loss', check_power_on_after_power_loss),
    ('ups', check_ups),
])


# ---------------------------------------------------------------------------
# entry points


def validate_params(params):
    """Return a list of error strings for bad input (empty when fine)."""
    errors = []
    valid = ', '.join(CHECK_IDS)
    severity = params.get('severity') or {}
    if not isinstance(severity, dict):
        errors.append('severity: must be a dict of check id -> fail|warn|ignore')
        severity = {}
    unknown = sorted(str(key) for key in severity if key not in CHECK_IDS)
    if unknown:
        errors.append('severity: unknown check id(s) %s; valid ids: %s' % (', '.join(unknown), valid))
    for key in sorted(str(key) for key in severity if key in CHECK_IDS):
        if severity[key] not in SEVERITIES:
            errors.append('severity: invalid value %r for check %s; valid values: %s'
                          % (severity[key], key, ', '.join(SEVERITIES)))
    skip = params.get('skip') or []
    unknown = sorted(set(str(item) for item in skip if item not in CHECK_IDS))
    if unknown:
        errors.append('skip: unknown check id(s) %s; valid ids: %s' % (', '.join(unknown), valid))
    for name in ('model_dir_min_free_gb', 'planned_model_gb', 'ram_to_model_ratio', 'psu_watts',
                 'cpu_power_allowance_w', 'psu_headroom_percent', 'expected_gpu_count'):
        value = _num(params.get(name))
        if value is not None and value < 0:
            errors.append('%s: must not be negative (got %s)' % (name, _fmt_num(value)))
    return errors


def run_check(check_id, ctx, severity_overrides=None, skip=()):
    severity = effective_severity(check_id, severity_overrides)
    if check_id in skip:
        return make_check(check_id, severity, 'na', 'Skipped by the skip option.')
    return CHECKS[check_id](ctx, severity)


def summarize(checks):
    summary = OrderedDict((status, 0) for status in STATUSES)
    for check in checks:
        summary[check['status']] = summary.get(check['status'], 0) + 1
    return dict(summary)


def verdict(checks):
    statuses = set(check['status'] for check in checks)
    if 'fail' in statuses:
        return 'fail'
    if 'warn' in statuses:
        return 'warn'
    return 'pass'


def report_lines(checks, statuses=None, with_fix=True):
    """One human-readable line per check: ``[FAIL] id: message -> fix: ...``."""
    lines = []
    for check in checks or []:
        status = check.get('status') or 'skip'
        if statuses and status not in statuses:
            continue
        line = '[%s] %s: %s' % (status.upper(), check.get('id'), check.get('message') or '')
        if with_fix and status in ('fail', 'warn', 'manual') and check.get('fix'):
            line += ' -> fix: %s' % check['fix']
        lines.append(line)
    return lines


def run_checks(params, statvfs=None, ups_probe=None):
    """Run every check; returns checks, summary, failed_checks, verdict, report_lines."""
    ctx = _Ctx(params, statvfs=statvfs, ups_probe=ups_probe)
    overrides = params.get('severity') or {}
    skip = set(params.get('skip') or [])
    checks = [run_check(check_id, ctx, overrides, skip) for check_id in CHECK_IDS]
    return {
        'checks': checks,
        'summary': summarize(checks),
        'failed_checks': [check['id'] for check in checks if check['status'] == 'fail'],
        'verdict': verdict(checks),
        'report_lines': report_lines(checks),
    }
