# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""State of the NVIDIA driver on a host, and what it takes to make it usable.

Read-only: every fact comes from files below configurable roots (procfs,
sysfs with efivars, the kernel module trees, the dpkg status database), so
the whole decision can be exercised against fake trees. Nothing here imports
Ansible. The one optional shell-out (``modinfo``, for zstd-compressed module
files that Python cannot open) is passed in by the caller.

``gather(params)`` returns the facts plus the decision:

* ``reboot_required`` / ``reboot_reasons`` / ``reboot_reason_ids``
* ``mismatch``: the loaded kernel module is not the installed user-space
  library (NVML answers "Driver/library version mismatch")
* ``dkms_rebuild_required``: the module built for the running kernel is
  missing, of another version than the library, or unsigned under Secure Boot
* ``secure_boot`` (enabled | disabled | unknown | not_uefi) and ``mok_state``
  (not_needed | enrolled | pending_enrollment | not_enrolled)
* ``messages``: plain sentences for the user.
"""

from __future__ import annotations

import base64
import glob
import gzip
import lzma
import os
import re
import struct

from ansible_collections.homelab.llm_server.plugins.module_utils._hostfs import (
    efivar_data,
    legacy_efivar_data,
    list_dir,
    read_bytes,
    read_kernel_release,
    read_loaded_modules,
    read_text,
    read_value,
)

EFI_GLOBAL_GUID = '8be4df61-93ca-11d2-aa0d-00e098032b8c'
SHIM_LOCK_GUID = '605dab50-e046-4300-abb6-3dd810dd8b23'
EFI_CERT_X509_GUID = bytes.fromhex('a159c0a5e494a74a87b5ab155c2bf072')

MODULE_SIGNATURE_MAGIC = b'~Module signature appended~\n'

MOK_ENROLL_INSTRUCTIONS = (
    "At the next boot, choose 'Enroll MOK' in the blue MokManager screen, then 'Continue', 'Yes', "
    "and type the password you set in nvidia_driver_mok_password.")

# Packages of an NVIDIA driver branch (Debian, Ubuntu and NVIDIA's CUDA
# repository names). Their version starts with the branch, which is what
# tells them from nvidia-container-toolkit (1.17.x) and other nvidia-* tools.
DRIVER_PACKAGE_RE = re.compile(
    r'^(nvidia-.+|libnvidia-.+|libcuda1|libcudadebugger1|libnvcuvid1|libnvoptix1|libegl-nvidia.*|'
    r'libgles-nvidia.*|libgl1-nvidia.*|libglx-nvidia.*|xserver-xorg-video-nvidia.*|firmware-nvidia-gsp.*|'
    r'cuda-drivers(-[0-9]+)?)$')
DRIVER_VERSION_RE = re.compile(r'^(?:[0-9]+:)?([0-9]{3})\.[0-9]+')
# User-space library that NVML (libnvidia-ml.so.1) comes from.
LIBRARY_PACKAGE_RE = re.compile(r'^(libnvidia-ml1|libnvidia-compute-[0-9]+)$')
KERNEL_PACKAGE_RE = re.compile(r'^(nvidia-kernel-open-dkms|nvidia-kernel-dkms|nvidia-dkms-[0-9]+(-open)?|'
                               r'linux-modules-nvidia-[0-9]+(-open)?-.+)$')
# dpkg states in which a package's files are (at least partly) on disk.
PRESENT_STATES = ('installed', 'half-configured', 'unpacked', 'half-installed', 'triggers-awaited',
                  'triggers-pending')

# PCI device ids: Turing (0x1e00) is the oldest generation the open kernel
# modules support; Blackwell (0x2900 on) supports only them.
NVIDIA_PCI_VENDOR = '0x10de'
OPEN_MODULES_MIN_DEVICE_ID = 0x1e00
OPEN_MODULES_ONLY_DEVICE_ID = 0x2900

REASON_SENTENCES = {
    'driver_not_loaded': 'the NVIDIA driver {library} is installed but its kernel module is not loaded',
    'driver_changed': 'the running kernel module {loaded} is not the installed driver {expected}',
    'version_mismatch': ('Driver/library version mismatch: kernel module {loaded} is loaded, '
                         'user-space library {library} is installed'),
    'nouveau_loaded': 'the nouveau module is loaded; its blacklist takes effect at the next boot',
    'mok_enrollment_pending': 'the module signing key (MOK) waits for enrolment in MokManager at the next boot',
}


# ---------------------------------------------------------------------------
# Versions


def version_key(version):
    """Sortable key of a dotted version (580.95.05 -> (580, 95, 5))."""
    parts = []
    for piece in re.split(r'[.]', str(version or '')):
        match = re.match(r'^([0-9]+)', piece)
        parts.append(int(match.group(1)) if match else 0)
    return tuple(parts)


def upstream_version(deb_version):
    """580.95.05 from a Debian version such as 1:580.95.05-0ubuntu1 or 580.95.05-1."""
    if not deb_version:
        return None
    version = str(deb_version)
    if ':' in version:
        version = version.split(':', 1)[1]
    if '-' in version:
        version = version.rsplit('-', 1)[0]
    return version


def branch_of(version):
    match = DRIVER_VERSION_RE.match(str(version or ''))
    return match.group(1) if match else None


# ---------------------------------------------------------------------------
# Kernel


_NVRM_RE = re.compile(r'Kernel Module(?: for \S+)?\s+([0-9]+\.[0-9]+(?:\.[0-9]+)*)')


def read_loaded_nvidia(procfs_root, sysfs_root, loaded_modules):
    """Loaded nvidia kernel module: (loaded, version, open_flavour or None, source path)."""
    version_file = os.path.join(procfs_root, 'driver', 'nvidia', 'version')
    text = read_text(version_file)
    if text:
        match = _NVRM_RE.search(text)
        if match:
            return True, match.group(1), 'Open Kernel Module' in text, version_file
    sys_version = os.path.join(sysfs_root, 'module', 'nvidia', 'version')
    text = read_text(sys_version)
    if text and text.strip():
        return True, text.strip(), None, sys_version
    if loaded_modules is not None and 'nvidia' in loaded_modules:
        return True, None, None, os.path.join(procfs_root, 'modules')
    return False, None, None, None


# ---------------------------------------------------------------------------
# Kernel module files built for the running kernel


_MODINFO_VERSION_RE = re.compile(rb'(?:^|\x00)version=([0-9][0-9A-Za-z.]*)\x00')


def read_module_file(path, modinfo=None):
    """(version, signed) of a kernel module file; either may be None (unknown).

    The version comes from the module's .modinfo strings ("version=..."),
    the signature from the magic string the kernel's sign-file appends.
    gzip and xz are opened here; other compressions (zstd) go to ``modinfo``
    (a callable path -> text of `modinfo PATH`) when one is given.
    """
    data = read_bytes(path)
    if data is None:
        return None, None
    if path.endswith('.gz'):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            data = None
    elif path.endswith('.xz'):
        try:
            data = lzma.decompress(data)
        except lzma.LZMAError:
            data = None
    elif not path.endswith('.ko'):
        data = None
    if data is None:
        if modinfo is None:
            return None, None
        text = modinfo(path) or ''
        version = signer = None
        for line in text.splitlines():
            key, dummy, value = line.partition(':')
            if key.strip() == 'version':
                version = value.strip() or None
            elif key.strip() == 'signer':
                signer = value.strip() or None
        return version, (signer is not None) if text else None
    match = _MODINFO_VERSION_RE.search(data)
    return (match.group(1).decode('ascii') if match else None), data.endswith(MODULE_SIGNATURE_MAGIC)


def find_nvidia_module(modules_root, release, modinfo=None):
    """The nvidia.ko built for a kernel release (DKMS, or Ubuntu's prebuilt package)."""
    empty = {'present': False, 'path': None, 'version': None, 'signed': None}
    if not release:
        return empty
    base = os.path.join(modules_root, release)
    patterns = ('updates/dkms/nvidia.ko*', 'updates/nvidia.ko*', 'kernel/nvidia-*/nvidia.ko*',
                'extra/nvidia.ko*')
    for pattern in patterns:
        found = sorted(glob.glob(os.path.join(base, pattern)))
        if found:
            version, signed = read_module_file(found[0], modinfo)
            return {'present': True, 'path': found[0], 'version': version, 'signed': signed}
    return empty


def headers_present(modules_root, release):
    return bool(release) and os.path.exists(os.path.join(modules_root, release, 'build'))


def headers_package(release):
    return 'linux-headers-%s' % release if release else 'linux-headers-$(uname -r)'


# ---------------------------------------------------------------------------
# Packages


def parse_dpkg_status(text):
    """{name: {'version', 'state', 'held'}} of the packages dpkg has files of."""
    packages = {}
    for stanza in re.split(r'\n\s*\n', text or ''):
        fields = {}
        for line in stanza.splitlines():
            if not line or line[0] in ' \t':
                continue
            key, sep, value = line.partition(':')
            if sep:
                fields[key.strip()] = value.strip()
        name = fields.get('Package')
        status = fields.get('Status', '').split()
        if not name or len(status) != 3 or status[2] not in PRESENT_STATES:
            continue
        packages[name] = {'version': fields.get('Version'), 'state': status[2], 'held': status[0] == 'hold'}
    return packages


def packages_from_facts(facts):
    """The same shape from ansible.builtin.package_facts' ``packages``."""
    packages = {}
    for name, entries in (facts or {}).items():
        if isinstance(entries, dict):
            entries = [entries]
        for entry in entries or []:
            packages[name] = {'version': entry.get('version'), 'state': 'installed', 'held': None}
    return packages


def driver_packages(packages):
    """Installed driver packages, each with its branch, sorted by name."""
    found = []
    for name in sorted(packages):
        info = packages[name]
        branch = branch_of(info.get('version'))
        if branch and DRIVER_PACKAGE_RE.match(name):
            found.append({'name': name, 'version': info.get('version'), 'branch': branch,
                          'state': info.get('state'), 'held': info.get('held')})
    return found


def _first_version(packages, regex):
    for name in sorted(packages):
        if regex.match(name) and packages[name].get('version'):
            return name, upstream_version(packages[name]['version'])
    return None, None


# ---------------------------------------------------------------------------
# Firmware: Secure Boot and Machine Owner Keys


def read_secure_boot(sysfs_root):
    if not os.path.isdir(os.path.join(sysfs_root, 'firmware', 'efi')):
        return 'not_uefi'
    data = efivar_data(sysfs_root, 'SecureBoot', EFI_GLOBAL_GUID)
    if data is None:
        data = legacy_efivar_data(sysfs_root, 'SecureBoot', EFI_GLOBAL_GUID)
    if not data:
        return 'unknown'
    return 'enabled' if bytearray(data)[0] == 1 else 'disabled'


def read_mok_list(sysfs_root):
    """Enrolled MOK list (MokListRT, MokListRT1, ...) as bytes; None if not readable at all."""
    chunks = []
    for index in [''] + [str(i) for i in range(1, 16)]:
        name = 'MokListRT' + index
        data = read_bytes(os.path.join(sysfs_root, 'firmware', 'efi', 'mok-variables', name))
        if data is None:
            data = efivar_data(sysfs_root, name, SHIM_LOCK_GUID)
        if data is None:
            if index:
                break
            continue
        chunks.append(data)
    return b''.join(chunks) if chunks else None


def x509_certificates(signature_lists):
    """DER certificates in a sequence of EFI_SIGNATURE_LISTs (MokListRT, MokNew)."""
    certs = []
    offset = 0
    data = signature_lists or b''
    while offset + 28 <= len(data):
        sig_type = data[offset:offset + 16]
        list_size, header_size, sig_size = struct.unpack_from('<III', data, offset + 16)
        if list_size < 28 or offset + list_size > len(data) or sig_size <= 16:
            break
        start = offset + 28 + header_size
        if sig_type == EFI_CERT_X509_GUID:
            pos = start
            while pos + sig_size <= offset + list_size:
                certs.append(data[pos + 16:pos + sig_size])
                pos += sig_size
        offset += list_size
    return certs


def read_certificate(path):
    """DER bytes of a certificate file (DER or PEM), or None."""
    data = read_bytes(path) if path else None
    if not data:
        return None
    match = re.search(rb'-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----', data, re.S)
    if match:
        try:
            return base64.b64decode(b''.join(match.group(1).split()))
        except (ValueError, TypeError):
            return None
    return data


def mok_status(sysfs_root, secure_boot, certificate):
    """mok_state plus the facts it was decided from."""
    mok_list = read_mok_list(sysfs_root)
    mok_new = efivar_data(sysfs_root, 'MokNew', SHIM_LOCK_GUID)
    facts = {
        'mok_certificate_present': certificate is not None,
        'mok_enrolled_certificates': len(x509_certificates(mok_list)) if mok_list else 0,
        'mok_list_readable': mok_list is not None,
        'mok_request_pending': bool(mok_new),
    }
    if secure_boot != 'enabled':
        state = 'not_needed'
    elif certificate and mok_list and certificate in mok_list:
        state = 'enrolled'
    elif certificate and mok_new and certificate in mok_new:
        state = 'pending_enrollment'
    else:
        state = 'not_enrolled'
    facts['mok_state'] = state
    return facts


# ---------------------------------------------------------------------------
# PCI: which kernel module flavour the GPUs can use


def nvidia_pci_devices(sysfs_root):
    """NVIDIA display/3D controllers on the PCI bus with what they need from the driver."""
    devices = []
    base = os.path.join(sysfs_root, 'bus', 'pci', 'devices')
    for name in list_dir(base) or []:
        path = os.path.join(base, name)
        vendor = (read_value(os.path.join(path, 'vendor')) or '').lower()
        pci_class = (read_value(os.path.join(path, 'class')) or '').lower()
        if vendor != NVIDIA_PCI_VENDOR or not pci_class.startswith('0x03'):
            continue
        try:
            device_id = int(read_value(os.path.join(path, 'device')) or '', 16)
        except ValueError:
            continue
        devices.append({
            'address': name,
            'device_id': '0x%04x' % device_id,
            'open_modules_supported': device_id >= OPEN_MODULES_MIN_DEVICE_ID,
            'requires_open_modules': device_id >= OPEN_MODULES_ONLY_DEVICE_ID,
        })
    return devices


# ---------------------------------------------------------------------------
# Decision


def _sentence(text):
    text = text[0].upper() + text[1:]
    return text if text.endswith('.') else text + '.'


def decide(facts, expected_version=None, nvml_error=None):
    """Reboot, mismatch and rebuild decision from the gathered facts."""
    library = facts['library_version']
    loaded = facts['loaded_version']
    module = facts['dkms_module']
    secure_boot = facts['secure_boot']
    mok_state = facts['mok_state']
    release = facts['kernel_release']
    reasons = []
    messages = []
    values = {'library': library, 'loaded': loaded, 'expected': expected_version}

    # The files decide when both versions are known; NVML's word (possibly
    # from cached facts) only fills the gap.
    nvml_mismatch = bool(nvml_error) and 'mismatch' in str(nvml_error).lower()
    if facts['module_loaded'] and loaded and library:
        mismatch = loaded != library
    else:
        mismatch = bool(nvml_mismatch and facts['module_loaded'])

    secure_boot_refuses = secure_boot == 'enabled' and mok_state == 'not_enrolled'
    module_matches_library = bool(module['present'] and library and module['version'] in (None, library))
    unsigned = secure_boot == 'enabled' and module['present'] and module['signed'] is False

    rebuild = False
    if library:
        if not module['present']:
            rebuild = True
            messages.append('No nvidia kernel module is built for the running kernel %s (looked in %s).'
                            % (release, os.path.join(facts['modules_root'], str(release))))
        elif module['version'] and module['version'] != library:
            rebuild = True
            messages.append('The nvidia kernel module built for kernel %s is %s but the installed driver is %s: '
                            'DKMS must rebuild it.' % (release, module['version'], library))
        if unsigned:
            rebuild = True
            messages.append('Secure Boot is enabled but %s is not signed: DKMS must rebuild it with the '
                            'module signing key.' % module['path'])
        if rebuild and not facts['kernel_headers_present']:
            messages.append('The kernel headers for %s are missing: install %s so DKMS can build the module.'
                            % (release, facts['kernel_headers_package']))

    if library and not facts['module_loaded']:
        if secure_boot_refuses and module['present']:
            messages.append('The nvidia module is built but not loaded, and a reboot alone will not load it '
                            'while its signing key is not enrolled.')
        elif module_matches_library and not unsigned:
            reasons.append('driver_not_loaded')
    if mismatch:
        reasons.append('version_mismatch')
        if module_matches_library:
            messages.append('The module built for the running kernel is %s: a reboot loads it and ends the '
                            'mismatch.' % library)
    elif (expected_version and facts['module_loaded'] and loaded
          and upstream_version(expected_version) != loaded):
        values['expected'] = upstream_version(expected_version)
        reasons.append('driver_changed')
    if facts['nouveau_loaded']:
        reasons.append('nouveau_loaded')
    if mok_state == 'pending_enrollment':
        reasons.append('mok_enrollment_pending')
        messages.append(MOK_ENROLL_INSTRUCTIONS)

    if secure_boot == 'enabled':
        messages.insert(0, {
            'enrolled': 'Secure Boot is enabled and the module signing key is enrolled.',
            'pending_enrollment': 'Secure Boot is enabled; the module signing key is staged for enrolment.',
            'not_enrolled': ('Secure Boot is enabled and the module signing key is not enrolled: the firmware '
                             'refuses the nvidia module until it is (the nvidia_driver role stages the '
                             'enrolment when nvidia_driver_mok_password is set).'),
        }[mok_state])
    elif secure_boot == 'unknown':
        messages.insert(0, 'Secure Boot state unknown: the SecureBoot EFI variable is not readable.')
    if mismatch and nvml_mismatch and not (loaded and library):
        messages.append('NVML reports: %s' % nvml_error)

    reboot_reasons = [_sentence(REASON_SENTENCES[r].format(**values)) for r in reasons]
    if not library and not facts['module_loaded']:
        messages.append('No NVIDIA driver is installed or loaded.')
    elif not reasons and not rebuild and facts['module_loaded'] and not mismatch:
        messages.append('NVIDIA kernel module %s is loaded and matches the installed library.'
                        % (loaded or 'of unknown version'))
    return {
        'mismatch': mismatch,
        'dkms_rebuild_required': rebuild,
        'reboot_required': bool(reasons),
        'reboot_reason_ids': reasons,
        'reboot_reasons': reboot_reasons,
        'messages': messages,
    }


def gather(params, modinfo=None):
    """All facts and the decision. ``params`` holds the module options."""
    procfs = params.get('procfs_root') or '/proc'
    sysfs = params.get('sysfs_root') or '/sys'
    modules_root = params.get('modules_root') or '/lib/modules'
    release = params.get('kernel_release') or read_kernel_release(procfs)

    if params.get('packages') is not None:
        packages = packages_from_facts(params['packages'])
    else:
        packages = parse_dpkg_status(read_text(params.get('dpkg_status') or '/var/lib/dpkg/status'))
    library_package, library_version = _first_version(packages, LIBRARY_PACKAGE_RE)
    if params.get('library_version'):
        library_version = upstream_version(params['library_version'])
    kernel_package, kernel_package_version = _first_version(packages, KERNEL_PACKAGE_RE)

    loaded_modules = read_loaded_modules(procfs)
    loaded, loaded_version, loaded_open, loaded_source = read_loaded_nvidia(procfs, sysfs, loaded_modules)
    if loaded and not loaded_version and params.get('nvml_driver_version'):
        loaded_version = params['nvml_driver_version']

    secure_boot = read_secure_boot(sysfs)
    certificate = read_certificate(params.get('mok_certificate'))
    facts = {
        'kernel_release': release,
        'modules_root': modules_root,
        'module_loaded': loaded,
        'loaded_version': loaded_version,
        'loaded_open': loaded_open,
        'loaded_source': loaded_source,
        'nouveau_loaded': bool(loaded_modules and 'nouveau' in loaded_modules),
        'library_package': library_package,
        'library_version': library_version,
        'kernel_module_package': kernel_package,
        'kernel_module_package_version': kernel_package_version,
        'driver_packages': driver_packages(packages),
        'dkms_module': find_nvidia_module(modules_root, release, modinfo),
        'kernel_headers_present': headers_present(modules_root, release),
        'kernel_headers_package': headers_package(release),
        'secure_boot': secure_boot,
        'nvidia_pci_devices': nvidia_pci_devices(sysfs),
    }
    facts['installed_branches'] = sorted(set(p['branch'] for p in facts['driver_packages']))
    facts.update(mok_status(sysfs, secure_boot, certificate))
    facts.update(decide(facts, params.get('expected_version'), params.get('nvml_error')))
    return facts
