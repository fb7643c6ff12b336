# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_driver_state.py against the fake host trees in tests/sysfs/driver."""

from __future__ import annotations

import base64
import gzip
import lzma
import os
import shutil
import struct

import pytest
from sysfs_tree import attr, write_efivar, write_file, write_pci_device  # tests/sysfs, on sys.path through conftest

# tests/unit/conftest.py makes the collection importable.
from ansible_collections.homelab.llm_server.plugins.module_utils import _driver_state as ds

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
TREES = os.path.join(REPO, 'tests', 'sysfs', 'driver')
RELEASE = '6.1.0-28-amd64'
SHIM_LOCK_GUID = '605dab50-e046-4300-abb6-3dd810dd8b23'
MOK_INSTRUCTIONS = (
    "At the next boot, choose 'Enroll MOK' in the blue MokManager screen, then 'Continue', 'Yes', "
    "and type the password you set in nvidia_driver_mok_password.")


def params(root, **extra):
    values = {
        'sysfs_root': os.path.join(root, 'sys'),
        'procfs_root': os.path.join(root, 'proc'),
        'modules_root': os.path.join(root, 'lib', 'modules'),
        'dpkg_status': os.path.join(root, 'var', 'lib', 'dpkg', 'status'),
        'mok_certificate': os.path.join(root, 'var', 'lib', 'dkms', 'mok.pub'),
    }
    values.update(extra)
    return values


def state(case, **extra):
    return ds.gather(params(os.path.join(TREES, case), **extra))


@pytest.fixture
def tree(tmp_path):
    """copy(case) -> path of a writable copy of a fixture tree."""
    def copy(case):
        dest = tmp_path / case
        shutil.copytree(os.path.join(TREES, case), str(dest))
        return str(dest)
    return copy


# --- The fixture trees the brief names -------------------------------------------


def test_secure_boot_off():
    result = state('sb_off')
    assert result['secure_boot'] == 'disabled'
    assert result['mok_state'] == 'not_needed'
    assert result['module_loaded'] and result['loaded_version'] == '580.95.05' and result['loaded_open'] is True
    assert result['library_version'] == '580.95.05' and result['library_package'] == 'libnvidia-ml1'
    assert not result['mismatch'] and not result['reboot_required'] and not result['dkms_rebuild_required']
    assert result['reboot_reasons'] == [] and result['reboot_reason_ids'] == []
    assert result['messages'] == ['NVIDIA kernel module 580.95.05 is loaded and matches the installed library.']


def test_secure_boot_on_key_not_enrolled():
    result = state('sb_on_not_enrolled')
    assert result['secure_boot'] == 'enabled'
    assert result['mok_state'] == 'not_enrolled'
    assert result['mok_enrolled_certificates'] == 1 and not result['mok_request_pending']
    # The firmware refuses the module: a reboot alone would not load it.
    assert not result['module_loaded']
    assert not result['reboot_required']
    assert any('not enrolled' in m and 'nvidia_driver_mok_password' in m for m in result['messages'])
    assert any('a reboot alone will not load it' in m for m in result['messages'])


def test_secure_boot_on_key_enrolled():
    result = state('sb_on_enrolled')
    assert result['secure_boot'] == 'enabled'
    assert result['mok_state'] == 'enrolled'
    assert result['mok_enrolled_certificates'] == 2
    assert result['dkms_module']['signed'] is True
    assert not result['reboot_required']
    assert result['messages'][0] == 'Secure Boot is enabled and the module signing key is enrolled.'


def test_secure_boot_on_enrolment_pending():
    result = state('sb_on_pending')
    assert result['mok_state'] == 'pending_enrollment'
    assert result['mok_request_pending']
    assert result['reboot_required']
    assert result['reboot_reason_ids'] == ['driver_not_loaded', 'mok_enrollment_pending']
    assert ('The module signing key (MOK) waits for enrolment in MokManager at the next boot.'
            in result['reboot_reasons'])
    assert MOK_INSTRUCTIONS in result['messages']


def test_mismatch_old_module_loaded_new_library_installed():
    result = state('mismatch')
    assert result['loaded_version'] == '570.172.08'
    assert result['library_version'] == '580.95.05'
    assert result['mismatch']
    assert result['reboot_required'] and result['reboot_reason_ids'] == ['version_mismatch']
    assert result['reboot_reasons'] == [
        'Driver/library version mismatch: kernel module 570.172.08 is loaded, user-space library 580.95.05 '
        'is installed.']
    # The 580 module is built: a reboot fixes it, no rebuild.
    assert not result['dkms_rebuild_required']
    assert 'a reboot loads it and ends the mismatch' in ' '.join(result['messages'])


def test_nouveau_loaded():
    result = state('nouveau_loaded')
    assert result['nouveau_loaded']
    assert result['secure_boot'] == 'not_uefi' and result['mok_state'] == 'not_needed'
    assert result['reboot_reason_ids'] == ['driver_not_loaded', 'nouveau_loaded']
    assert 'The nouveau module is loaded; its blacklist takes effect at the next boot.' in result['reboot_reasons']


def test_no_module_loaded_after_install():
    result = state('not_loaded')
    assert not result['module_loaded'] and result['loaded_version'] is None
    assert result['reboot_required'] and result['reboot_reason_ids'] == ['driver_not_loaded']
    assert result['reboot_reasons'] == [
        'The NVIDIA driver 580.95.05 is installed but its kernel module is not loaded.']


# --- More decisions -----------------------------------------------------------------


def test_fresh_host_needs_nothing_yet():
    result = state('fresh')
    assert result['driver_packages'] == [] and result['library_version'] is None
    assert not result['reboot_required'] and not result['dkms_rebuild_required']
    assert result['messages'] == ['No NVIDIA driver is installed or loaded.']


def test_branch_switched_new_module_built_old_loaded():
    result = state('branch_570')
    assert result['installed_branches'] == ['570']
    assert result['mismatch'] and not result['dkms_rebuild_required']
    assert result['reboot_reason_ids'] == ['version_mismatch']


def test_library_newer_than_built_module_needs_dkms_rebuild():
    result = state('stale_module')
    assert result['mismatch']
    assert result['dkms_rebuild_required']
    assert result['dkms_module']['version'] == '570.172.08'
    assert any('DKMS must rebuild it' in m for m in result['messages'])
    assert not any('a reboot loads it' in m for m in result['messages'])


def test_missing_module_and_headers_name_the_package(tree):
    root = tree('not_loaded')
    shutil.rmtree(os.path.join(root, 'lib', 'modules', RELEASE, 'build'))
    os.remove(os.path.join(root, 'lib', 'modules', RELEASE, 'updates', 'dkms', 'nvidia.ko'))
    result = ds.gather(params(root))
    assert result['dkms_rebuild_required']
    assert not result['kernel_headers_present']
    assert result['kernel_headers_package'] == 'linux-headers-6.1.0-28-amd64'
    assert not result['reboot_required']
    assert any('install linux-headers-6.1.0-28-amd64' in m for m in result['messages'])


def test_unsigned_module_under_secure_boot_needs_rebuild(tree):
    root = tree('sb_on_enrolled')
    shutil.copy(os.path.join(TREES, 'sb_off', 'lib', 'modules', RELEASE, 'updates', 'dkms', 'nvidia.ko'),
                os.path.join(root, 'lib', 'modules', RELEASE, 'updates', 'dkms', 'nvidia.ko'))
    result = ds.gather(params(root))
    assert result['dkms_module']['signed'] is False
    assert result['dkms_rebuild_required']
    assert any('is not signed' in m for m in result['messages'])


def test_expected_version_differs_from_loaded():
    result = state('sb_off', expected_version='580.105.08-1')
    assert result['reboot_reason_ids'] == ['driver_changed']
    assert result['reboot_reasons'] == ['The running kernel module 580.95.05 is not the installed driver 580.105.08.']


def test_nvml_mismatch_error_counts_when_versions_unknown(tree):
    root = tree('sb_off')
    os.remove(os.path.join(root, 'proc', 'driver', 'nvidia', 'version'))
    os.remove(os.path.join(root, 'sys', 'module', 'nvidia', 'version'))
    result = ds.gather(params(root, nvml_error='Driver/library version mismatch'))
    assert result['module_loaded'] and result['loaded_version'] is None
    assert result['mismatch'] and 'version_mismatch' in result['reboot_reason_ids']
    assert 'NVML reports: Driver/library version mismatch' in result['messages']


def test_packages_option_replaces_dpkg_database():
    facts = {'libnvidia-compute-580': [{'version': '580.95.05-0ubuntu0.24.04.2', 'arch': 'amd64'}],
             'nvidia-driver-580-open': [{'version': '580.95.05-0ubuntu0.24.04.2'}],
             'nvidia-container-toolkit': [{'version': '1.17.8-1'}]}
    result = state('sb_off', dpkg_status='/nonexistent', packages=facts)
    assert result['library_package'] == 'libnvidia-compute-580'
    assert result['library_version'] == '580.95.05'
    assert [p['name'] for p in result['driver_packages']] == ['libnvidia-compute-580', 'nvidia-driver-580-open']
    assert all(p['held'] is None for p in result['driver_packages'])


def test_pem_certificate_is_accepted(tree):
    root = tree('sb_on_enrolled')
    der_path = os.path.join(root, 'var', 'lib', 'dkms', 'mok.pub')
    with open(der_path, 'rb') as handle:
        der = handle.read()
    pem_path = os.path.join(root, 'mok.pem')
    body = base64.b64encode(der).decode()
    with open(pem_path, 'w') as handle:
        handle.write('-----BEGIN CERTIFICATE-----\n%s\n-----END CERTIFICATE-----\n'
                     % '\n'.join(body[i:i + 64] for i in range(0, len(body), 64)))
    assert ds.gather(params(root, mok_certificate=pem_path))['mok_state'] == 'enrolled'


def test_missing_certificate_is_not_enrolled():
    result = state('sb_on_enrolled', mok_certificate='/nonexistent/mok.pub')
    assert not result['mok_certificate_present']
    assert result['mok_state'] == 'not_enrolled'


def test_secure_boot_unknown_without_the_variable(tree):
    root = tree('sb_off')
    efivars = os.path.join(root, 'sys', 'firmware', 'efi', 'efivars')
    for name in os.listdir(efivars):
        os.remove(os.path.join(efivars, name))
    result = ds.gather(params(root))
    assert result['secure_boot'] == 'unknown'
    assert result['mok_state'] == 'not_needed'
    assert result['messages'][0].startswith('Secure Boot state unknown')


# --- Readers ------------------------------------------------------------------------


def test_dpkg_status_parsing_and_driver_packages():
    with open(os.path.join(TREES, 'sb_off', 'var', 'lib', 'dpkg', 'status')) as handle:
        packages = ds.parse_dpkg_status(handle.read())
    # config-files remnants are not installed
    assert 'nvidia-driver-570' not in packages
    assert packages['nvidia-open'] == {'version': '580.95.05-1', 'state': 'installed', 'held': True}
    assert packages['nvidia-container-toolkit']['held'] is False
    names = [p['name'] for p in ds.driver_packages(packages)]
    assert 'nvidia-container-toolkit' not in names and 'dkms' not in names
    assert names == ['libnvidia-ml1', 'nvidia-driver', 'nvidia-kernel-open-dkms', 'nvidia-modprobe',
                     'nvidia-open', 'nvidia-persistenced', 'nvidia-smi']


def test_half_configured_packages_count_as_present():
    text = ('Package: nvidia-kernel-open-dkms\nStatus: install ok half-configured\nVersion: 580.95.05-1\n\n'
            'Package: nvidia-driver\nStatus: deinstall ok config-files\nVersion: 570.172.08-1\n')
    packages = ds.parse_dpkg_status(text)
    assert list(packages) == ['nvidia-kernel-open-dkms']
    assert ds.driver_packages(packages)[0]['state'] == 'half-configured'


@pytest.mark.parametrize('deb, upstream', [
    ('580.95.05-1', '580.95.05'),
    ('580.95.05-0ubuntu0.24.04.2', '580.95.05'),
    ('1:570.172.08-1~deb12u1', '570.172.08'),
    ('580.95.05', '580.95.05'),
])
def test_upstream_version(deb, upstream):
    assert ds.upstream_version(deb) == upstream


def test_proprietary_nvrm_version_line(tree):
    root = tree('sb_off')
    write_file(os.path.join(root, 'proc', 'driver', 'nvidia', 'version'),
               'NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Tue Jul  8 18:39:27 UTC 2025\n')
    loaded, version, is_open, dummy = ds.read_loaded_nvidia(os.path.join(root, 'proc'), os.path.join(root, 'sys'),
                                                            {'nvidia'})
    assert (loaded, version, is_open) == (True, '570.172.08', False)


def test_compressed_modules_are_read(tmp_path):
    raw = open(os.path.join(TREES, 'sb_on_enrolled', 'lib', 'modules', RELEASE, 'updates', 'dkms',
                            'nvidia.ko'), 'rb').read()
    (tmp_path / 'nvidia.ko.xz').write_bytes(lzma.compress(raw))
    (tmp_path / 'nvidia.ko.gz').write_bytes(gzip.compress(raw))
    assert ds.read_module_file(str(tmp_path / 'nvidia.ko.xz')) == ('580.95.05', True)
    assert ds.read_module_file(str(tmp_path / 'nvidia.ko.gz')) == ('580.95.05', True)


def test_zstd_module_goes_to_modinfo(tmp_path):
    path = tmp_path / 'nvidia.ko.zst'
    path.write_bytes(b'(\xb5/\xfd not really zstd')
    seen = []

    def modinfo(p):
        seen.append(p)
        return 'filename: %s\nversion:        580.95.05\nsigner:         host DKMS module signing key\n' % p
    assert ds.read_module_file(str(path), modinfo) == ('580.95.05', True)
    assert seen == [str(path)]
    assert ds.read_module_file(str(path)) == (None, None)


def test_mok_list_split_over_several_variables(tree):
    root = tree('sb_on_not_enrolled')
    with open(os.path.join(root, 'var', 'lib', 'dkms', 'mok.pub'), 'rb') as handle:
        cert = handle.read()
    # shim splits long lists into MokListRT, MokListRT1, ...; our key sits in the second.
    size = 16 + len(cert)
    entry = bytes.fromhex('a159c0a5e494a74a87b5ab155c2bf072') + struct.pack('<III', 28 + size, 0, size) \
        + bytes(16) + cert
    write_file(os.path.join(root, 'sys', 'firmware', 'efi', 'mok-variables', 'MokListRT1'), entry)
    result = ds.gather(params(root))
    assert result['mok_state'] == 'enrolled'
    assert result['mok_enrolled_certificates'] == 2


def test_mok_new_for_another_key_is_not_ours(tree):
    root = tree('sb_on_not_enrolled')
    write_efivar(os.path.join(root, 'sys'), 'MokNew', SHIM_LOCK_GUID, b'another key request')
    result = ds.gather(params(root))
    assert result['mok_request_pending']
    assert result['mok_state'] == 'not_enrolled'


def _pci_device(sysfs, address, vendor, device, pci_class):
    write_pci_device(sysfs, 'pci0000:00/' + address,
                     {'vendor': attr(vendor), 'device': attr(device), 'class': attr(pci_class)})


def test_pci_scan_tells_which_gpus_need_open_modules(tmp_path):
    sysfs = str(tmp_path / 'sys')
    _pci_device(sysfs, '0000:01:00.0', '0x10de', '0x2bb1', '0x030000')   # RTX PRO 6000 Blackwell
    _pci_device(sysfs, '0000:01:00.1', '0x10de', '0x22e8', '0x040300')   # its audio function
    _pci_device(sysfs, '0000:02:00.0', '0x10de', '0x2330', '0x030200')   # H100 (3D controller)
    _pci_device(sysfs, '0000:03:00.0', '0x10de', '0x1b06', '0x030000')   # GTX 1080 Ti (Pascal)
    _pci_device(sysfs, '0000:04:00.0', '0x1002', '0x744c', '0x030000')   # AMD RX 7900 XTX
    devices = ds.nvidia_pci_devices(sysfs)
    assert [(d['address'], d['requires_open_modules'], d['open_modules_supported']) for d in devices] == [
        ('0000:01:00.0', True, True), ('0000:02:00.0', False, True), ('0000:03:00.0', False, False)]


def test_stale_nvml_mismatch_error_does_not_override_the_files():
    result = state('sb_off', nvml_error='Driver/library version mismatch')
    assert not result['mismatch'] and not result['reboot_required']
