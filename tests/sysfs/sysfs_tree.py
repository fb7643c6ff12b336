# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Writers of simulated sysfs/procfs trees, shared by the tree generators and the unit tests.

The committed trees under tests/sysfs/preflight and tests/sysfs/driver (which the
simulated hosts unpack) are written by their make_trees.py with these functions,
and the unit tests write their variants with them too. The readers they feed
are plugins/module_utils/_hostfs.py and its users.

Importing: tests/unit/conftest.py puts tests/sysfs on sys.path; the
make_trees.py scripts do the same for themselves.

Contents are written byte for byte: bytes as they are, text as UTF-8. Use
attr() for a one-value sysfs attribute ("0x10de\\n").
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import struct
import tempfile

# efivarfs attribute bits: non-volatile | boot service access | runtime access
EFI_VARIABLE_NV_BS_RT = 0x00000007


class Link(object):
    """A symbolic link to write at a path in write_tree(), pointing at target (as given)."""

    def __init__(self, target):
        self.target = target

    def __repr__(self):
        return 'Link(%r)' % self.target


def attr(value):
    """File content of a sysfs attribute: bytes as they are, anything else as its text and a newline."""
    if isinstance(value, bytes):
        return value
    return '%s\n' % value


def write_file(path, content):
    """Write content (bytes, or text as UTF-8) to path, creating its directories."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as handle:
        handle.write(content if isinstance(content, bytes) else content.encode('utf-8'))
    return path


def write_tree(root, mapping):
    """Write a tree below root from {relative path: content}.

    A value is the file's content (bytes or text), a dict (a directory with
    those entries; an empty dict is an empty directory) or a Link. Relative
    paths may hold slashes. Returns root.
    """
    root = str(root)
    os.makedirs(root, exist_ok=True)
    for name, value in mapping.items():
        path = os.path.join(root, *name.split('/'))
        if isinstance(value, dict):
            write_tree(path, value)
        elif isinstance(value, Link):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.symlink(value.target, path)
        else:
            write_file(path, value)
    return root


def write_pci_device(sysfs_root, path, files, link=True):
    """Write a PCI device at <sysfs_root>/devices/<path> as the kernel lays it out.

    path: the device's place below devices/, parents first, for example
    'pci0000:00/0000:00:01.0/0000:01:00.0'; its last element is the bus id.
    files: {attribute name: content} (see attr()).
    link: also add <sysfs_root>/bus/pci/devices/<bus id>, a relative symlink to it.
    Returns the device directory.
    """
    parts = path.split('/')
    device = os.path.join(str(sysfs_root), 'devices', *parts)
    write_tree(device, files)
    if link:
        links = os.path.join(str(sysfs_root), 'bus', 'pci', 'devices')
        os.makedirs(links, exist_ok=True)
        os.symlink(os.path.join('..', '..', '..', 'devices', *parts), os.path.join(links, parts[-1]))
    return device


def efivar(data, attributes=EFI_VARIABLE_NV_BS_RT):
    """An efivarfs file's content: 4 bytes of attributes, then the variable's data."""
    return struct.pack('<I', attributes) + data


def write_efivar(sysfs_root, name, guid, data, attributes=EFI_VARIABLE_NV_BS_RT):
    """Write <sysfs_root>/firmware/efi/efivars/<name>-<guid> holding data."""
    return write_file(os.path.join(str(sysfs_root), 'firmware', 'efi', 'efivars', '%s-%s' % (name, guid)),
                      efivar(data, attributes))


def tree_differences(left, right):
    """Relative paths that differ between two trees (content, type or link target)."""
    diffs = []
    for base, dirs, files in os.walk(left):
        rel = os.path.relpath(base, left)
        for name in dirs + files:
            lpath = os.path.join(base, name)
            rpath = os.path.join(right, rel, name)
            relpath = os.path.normpath(os.path.join(rel, name))
            if not os.path.lexists(rpath):
                diffs.append(relpath)
            elif os.path.islink(lpath) or os.path.islink(rpath):
                if not (os.path.islink(lpath) and os.path.islink(rpath)) or os.readlink(lpath) != os.readlink(rpath):
                    diffs.append(relpath)
            elif os.path.isfile(lpath) != os.path.isfile(rpath):
                diffs.append(relpath)
            elif os.path.isfile(lpath) and not filecmp.cmp(lpath, rpath, shallow=False):
                diffs.append(relpath)
        dirs[:] = [name for name in dirs if not os.path.islink(os.path.join(base, name))]
    for base, dirs, files in os.walk(right):
        rel = os.path.relpath(base, right)
        for name in dirs + files:
            if not os.path.lexists(os.path.join(left, rel, name)):
                diffs.append(os.path.normpath(os.path.join(rel, name)))
        dirs[:] = [name for name in dirs if not os.path.islink(os.path.join(base, name))]
    return sorted(set(diffs))


def generator_main(argv, description, build_all, cases, default_dest):
    """Command line of a make_trees.py: write the case trees, or --check them against fresh ones.

    build_all(dest_root) writes every case to dest_root/<case>. Returns the exit status.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--dest', default=default_dest, help='directory to write the case trees into')
    parser.add_argument('--check', action='store_true', help='compare the trees in --dest with freshly built ones')
    args = parser.parse_args(argv)
    if not args.check:
        build_all(args.dest)
        return 0
    tmp = tempfile.mkdtemp()
    try:
        build_all(tmp)
        diffs = []
        for case in cases:
            diffs += [os.path.join(case, item) for item in
                      tree_differences(os.path.join(tmp, case), os.path.join(args.dest, case))]
    finally:
        shutil.rmtree(tmp)
    for item in diffs:
        print('differs: %s' % item)
    return 1 if diffs else 0
