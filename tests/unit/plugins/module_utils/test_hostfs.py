# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_hostfs.py: the file readers shared by preflight, driver state and AMD sysfs."""

from __future__ import annotations

import os
import struct

# tests/unit/conftest.py makes the collection importable.
from ansible_collections.homelab.llm_server.plugins.module_utils import _hostfs as hostfs

GUID = '8be4df61-93ca-11d2-aa0d-00e098032b8c'


def _write(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as handle:
        handle.write(content.encode() if isinstance(content, str) else content)


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
    _write(str(tmp_path / 'vendor'), '0x1002\n')
    _write(str(tmp_path / 'width'), ' 16 \n')
    _write(str(tmp_path / 'empty'), '\n')
    _write(str(tmp_path / 'speed'), 'Unknown\n')
    _write(str(tmp_path / 'bad'), b'caf\xe9\n')
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
    _write(str(tmp_path / 'modules'), 'nvidia 60715008 2 - Live 0x0 (POE)\n\n  \next4 987136 2 - Live 0x0\n')
    _write(str(tmp_path / 'sys' / 'kernel' / 'osrelease'), '6.1.0-28-amd64\n')
    assert hostfs.read_loaded_modules(str(tmp_path)) == {'nvidia', 'ext4'}
    assert hostfs.read_kernel_release(str(tmp_path)) == '6.1.0-28-amd64'
    assert hostfs.read_loaded_modules(str(tmp_path / 'none')) is None
    assert hostfs.read_kernel_release(str(tmp_path / 'none')) is None


def test_efivars_skip_the_attribute_bytes(tmp_path):
    efivars = tmp_path / 'firmware' / 'efi' / 'efivars'
    _write(str(efivars / ('SecureBoot-' + GUID)), struct.pack('<IB', 0x06, 1))
    _write(str(efivars / ('Short-' + GUID)), b'\x06\x00')
    _write(str(efivars / ('Empty-' + GUID)), struct.pack('<I', 0x07))
    assert hostfs.efivar_data(str(tmp_path), 'SecureBoot', GUID) == b'\x01'
    assert hostfs.efivar_data(str(tmp_path), 'Short', GUID) is None
    assert hostfs.efivar_data(str(tmp_path), 'Empty', GUID) == b''
    assert hostfs.efivar_data(str(tmp_path), 'Missing', GUID) is None


def test_legacy_efivars(tmp_path):
    _write(str(tmp_path / 'firmware' / 'efi' / 'vars' / ('SetupMode-' + GUID) / 'data'), b'\x01')
    assert hostfs.legacy_efivar_data(str(tmp_path), 'SetupMode', GUID) == b'\x01'
    assert hostfs.legacy_efivar_data(str(tmp_path), 'SecureBoot', GUID) is None


def test_resolve_link_keeps_targets_inside_the_root(tmp_path):
    sysfs = tmp_path / 'sys'
    device = sysfs / 'devices' / 'pci0000:00' / '0000:00:01.0' / '0000:01:00.0'
    device.mkdir(parents=True)
    links = sysfs / 'bus' / 'pci' / 'devices'
    links.mkdir(parents=True)
    os.symlink('/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0', str(links / 'absolute'))
    os.symlink('../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0', str(links / 'relative'))
    assert hostfs.resolve_link(str(sysfs), str(links / 'absolute')) == str(device)
    assert hostfs.resolve_link(str(sysfs), str(links / 'relative')) == str(device)
    assert hostfs.resolve_link(str(sysfs), str(device)) == str(device)
