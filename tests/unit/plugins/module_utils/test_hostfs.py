# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_hostfs.py: the file readers shared by preflight, driver state and AMD sysfs."""

from __future__ import annotations

import os
import struct

# tests/unit/conftest.py makes the collection importable and puts tests/sysfs (sysfs_tree) on sys.path.
from ansible_collections.homelab.llm_server.plugins.module_utils import _hostfs as hostfs
from sysfs_tree import Link, write_efivar, write_pci_device, write_tree

GUID = '8be4df61-93ca-11d2-aa0d-00e098032b8c'


def test_missing_files_read_as_none(tmp_path):
    missing = str(tmp_path / 'nothing')
    assert hostfs.read_bytes(missing) is None
    assert hostfs.read_text(missing) is None
    assert hostfs.read_value(missing) is None
    assert hostfs.read_int(missing) is None
    assert hostfs.list_dir(missing) is None
    # a directory is not a readable file either
    assert hostfs.read_text(str(tmp_path)) is None


def test_text_value_and_int(tmp_path):
    write_tree(tmp_path, {'vendor': '0x1002\n', 'width': ' 16 \n', 'empty': '\n', 'speed': 'Unknown\n',
                          'bad': b'caf\xe9\n'})
    assert hostfs.read_text(str(tmp_path / 'vendor')) == '0x1002\n'
    assert hostfs.read_value(str(tmp_path / 'vendor')) == '0x1002'
    assert hostfs.read_int(str(tmp_path / 'vendor'), 16) == 0x1002
    assert hostfs.read_int(str(tmp_path / 'width')) == 16
    assert hostfs.read_value(str(tmp_path / 'empty')) is None
    assert hostfs.read_int(str(tmp_path / 'speed')) is None
    assert hostfs.read_value(str(tmp_path / 'bad')) == 'caf\ufffd'
    assert hostfs.read_bytes(str(tmp_path / 'vendor'), 2) == b'0x'
    assert hostfs.list_dir(str(tmp_path)) == ['bad', 'empty', 'speed', 'vendor', 'width']


def test_loaded_modules_and_kernel_release(tmp_path):
    write_tree(tmp_path, {'modules': 'nvidia 60715008 2 - Live 0x0 (POE)\n\n  \next4 987136 2 - Live 0x0\n',
                          'sys/kernel/osrelease': '6.1.0-28-amd64\n'})
    assert hostfs.read_loaded_modules(str(tmp_path)) == {'nvidia', 'ext4'}
    assert hostfs.read_kernel_release(str(tmp_path)) == '6.1.0-28-amd64'
    assert hostfs.read_loaded_modules(str(tmp_path / 'none')) is None
    assert hostfs.read_kernel_release(str(tmp_path / 'none')) is None


def test_efivars_skip_the_attribute_bytes(tmp_path):
    write_efivar(tmp_path, 'SecureBoot', GUID, b'\x01', attributes=0x06)
    write_efivar(tmp_path, 'Empty', GUID, b'')
    write_tree(tmp_path, {'firmware/efi/efivars/Short-' + GUID: b'\x06\x00'})
    with open(os.path.join(str(tmp_path), 'firmware', 'efi', 'efivars', 'SecureBoot-' + GUID), 'rb') as handle:
        assert handle.read() == struct.pack('<IB', 0x06, 1)
    assert hostfs.efivar_data(str(tmp_path), 'SecureBoot', GUID) == b'\x01'
    assert hostfs.efivar_data(str(tmp_path), 'Short', GUID) is None
    assert hostfs.efivar_data(str(tmp_path), 'Empty', GUID) == b''
    assert hostfs.efivar_data(str(tmp_path), 'Missing', GUID) is None


def test_legacy_efivars(tmp_path):
    write_tree(tmp_path, {'firmware/efi/vars/SetupMode-%s/data' % GUID: b'\x01'})
    assert hostfs.legacy_efivar_data(str(tmp_path), 'SetupMode', GUID) == b'\x01'
    assert hostfs.legacy_efivar_data(str(tmp_path), 'SecureBoot', GUID) is None


def test_resolve_link_keeps_targets_inside_the_root(tmp_path):
    sysfs = str(tmp_path / 'sys')
    device = write_pci_device(sysfs, 'pci0000:00/0000:00:01.0/0000:01:00.0', {})
    write_tree(sysfs, {'bus/pci/devices/absolute': Link('/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0')})
    links = os.path.join(sysfs, 'bus', 'pci', 'devices')
    assert hostfs.resolve_link(sysfs, os.path.join(links, 'absolute')) == device
    assert hostfs.resolve_link(sysfs, os.path.join(links, '0000:01:00.0')) == device
    assert hostfs.resolve_link(sysfs, device) == device
