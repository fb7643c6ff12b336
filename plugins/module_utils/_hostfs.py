# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Small readers of the host's pseudo file systems (sysfs, procfs, efivarfs).

Private to this collection and shared by _preflight, _driver_state and
_amd_sysfs. Every reader takes its path or root as an argument, so tests can
point it at a simulated tree, and none raises on a missing or unreadable
file: it answers None instead. Nothing here imports Ansible.
"""

from __future__ import annotations

import os


def read_bytes(path, size=-1):
    """Contents of a file (at most size bytes), or None when it cannot be read."""
    try:
        with open(path, 'rb') as handle:
            return handle.read(size)
    except (IOError, OSError):
        return None


def read_text(path):
    """Contents of a file as text (UTF-8, bad bytes replaced), or None when it cannot be read."""
    data = read_bytes(path)
    if data is None:
        return None
    return data.decode('utf-8', 'replace')


def read_value(path):
    """A one-value sysfs attribute: the file's text stripped, None when unreadable or empty."""
    text = read_text(path)
    if text is None:
        return None
    return text.strip() or None


def read_int(path, base=10):
    """A sysfs attribute as an integer ('0x1002' with base 16), or None when unreadable or not a number."""
    text = read_value(path)
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


def list_dir(path):
    """Sorted entry names of a directory, or None when it cannot be listed."""
    try:
        return sorted(os.listdir(path))
    except (IOError, OSError):
        return None


def resolve_link(root, path):
    """Resolve one sysfs symlink, keeping absolute targets inside root (simulated trees).

    A target such as /sys/devices/... is taken relative to root; paths that
    are not links come back unchanged.
    """
    if not os.path.islink(path):
        return path
    target = os.readlink(path)
    if os.path.isabs(target):
        relative = target
        if target == '/sys' or target.startswith('/sys/'):
            relative = target[len('/sys'):]
        return os.path.normpath(os.path.join(root, relative.lstrip('/')))
    return os.path.normpath(os.path.join(os.path.dirname(path), target))


def read_loaded_modules(procfs_root):
    """Names of the loaded kernel modules from <procfs_root>/modules, or None when unreadable."""
    text = read_text(os.path.join(procfs_root, 'modules'))
    if text is None:
        return None
    return set(line.split()[0] for line in text.splitlines() if line.split())


def read_kernel_release(procfs_root):
    """The running kernel's release from <procfs_root>/sys/kernel/osrelease, or None."""
    return read_value(os.path.join(procfs_root, 'sys', 'kernel', 'osrelease'))


def efivar_data(sysfs_root, name, guid):
    """Data of an efivarfs variable without its 4 attribute bytes, or None when absent or shorter.

    Reads <sysfs_root>/firmware/efi/efivars/<name>-<guid>.
    """
    data = read_bytes(os.path.join(sysfs_root, 'firmware', 'efi', 'efivars', '%s-%s' % (name, guid)))
    if data is None or len(data) < 4:
        return None
    return data[4:]


def legacy_efivar_data(sysfs_root, name, guid):
    """Data of a variable in the older sysfs-efivars interface (vars/<name>-<guid>/data), or None."""
    return read_bytes(os.path.join(sysfs_root, 'firmware', 'efi', 'vars', '%s-%s' % (name, guid), 'data'))
