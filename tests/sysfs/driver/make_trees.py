# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""(Re)generate the fake host trees used by the nvidia_driver_state tests.

Usage:
    python tests/sysfs/driver/make_trees.py            # rewrite the case trees next to this script
    python tests/sysfs/driver/make_trees.py --dest DIR # write them below DIR instead
    python tests/sysfs/driver/make_trees.py --check    # exit 1 if the committed trees differ

Each case is a small host: ``proc/`` (modules, driver/nvidia/version,
sys/kernel/osrelease), ``sys/`` (firmware/efi/efivars with the SecureBoot,
MokListRT and MokNew variables as efivarfs shows them: 4 attribute bytes,
then the data; firmware/efi/mok-variables/MokListRT as Linux 5.x+ shows it:
the bare EFI_SIGNATURE_LISTs; module/nvidia/version), ``lib/modules/<release>``
(``build`` = headers installed, ``updates/dkms/nvidia.ko`` = the module DKMS
built, with its modinfo strings and, when signed, the kernel's signature
trailer), ``var/lib/dpkg/status`` and ``var/lib/dkms/mok.pub`` (the DER
certificate of the module signing key).

The certificates are throw-away test certificates (their keys were never
kept). No file name has a colon, so the trees pass ansible-test sanity.

Unit test cases: sb_off, sb_on_not_enrolled, sb_on_enrolled, sb_on_pending,
mismatch (570.172.08 loaded, 580.95.05 installed and built), nouveau_loaded,
not_loaded, branch_570 (switched to 570 and built, 580 still loaded),
stale_module (580 installed, only 570 built: DKMS must rebuild). Molecule
cases (no dpkg database: the container has a real one): fresh, sb_fresh,
no_headers; the Molecule verify copies single files of the other cases into
the container to move the simulated host between states.
"""

from __future__ import annotations

import base64
import os
import shutil
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if os.path.dirname(HERE) not in sys.path:
    sys.path.insert(0, os.path.dirname(HERE))  # tests/sysfs, for sysfs_tree

from sysfs_tree import generator_main, write_efivar, write_file  # noqa: E402

RELEASE = '6.1.0-28-amd64'
EFI_GLOBAL_GUID = '8be4df61-93ca-11d2-aa0d-00e098032b8c'
SHIM_LOCK_GUID = '605dab50-e046-4300-abb6-3dd810dd8b23'
# EFI_CERT_X509_GUID and SHIM_LOCK_GUID as they are stored (mixed endian).
EFI_CERT_X509 = bytes.fromhex('a159c0a5e494a74a87b5ab155c2bf072')
SHIM_LOCK_OWNER = bytes.fromhex('50ab5d6046e00043abb63dd810dd8b23')
V570 = '570.172.08'
V580 = '580.95.05'

TEST_MOK_DER = base64.b64decode(
    'MIIDPTCCAiWgAwIBAgIUCoVEBTC930uCaM74PQ12NkOJhF0wDQYJKoZIhvcNAQELBQAwLTErMCkGA1UEAwwibGxtLXNlcnZl'
    'ciB0ZXN0IG1vZHVsZSBzaWduaW5nIGtleTAgFw0yNjExMjEyMDA0NDNaGA8yMTI2MTAyODIwMDQ0M1owLTErMCkGA1UEAwwi'
    'bGxtLXNlcnZlciB0ZXN0IG1vZHVsZSBzaWduaW5nIGtleTCCASIwDQYJKoZIhvcNAQEBBQADggEPADCCAQoCggEBAKccQRFY'
    'XqJiqMW/k64B93mHjtQNAwhno3gcaGX6xkAeqgge5kVlqgDXmU2JooNnDRw7EhEjXOhxhq2v7QYsgKGy4fjOtahI5JSREl3/'
    'sGujZkGyzXgwr0MhnJehNl/6z0oJK3wyA4U/FKrK18hWc3x5nGE9GkwTmppe9/2+rtWLzqAyCrOZ7f4u6o/NPIsav/FzMmgs'
    'YsO4I7sxZ9XlQQohzKRYCpI8jJaSQvcGebKfu5QaoJvRtY/xEoLIylYiTOWz+3I2HGTxX73DLvvB/RecFLI2UV21vfcRBsud'
    'z8eGhI+u1/UTeZtfiO+ZYao+BmlPZPuq0Y4Op1OMAPyXQsECAwEAAaNTMFEwHQYDVR0OBBYEFGr072d5Duz6W8hkZ+tuEDxK'
    'lPWvMB8GA1UdIwQYMBaAFGr072d5Duz6W8hkZ+tuEDxKlPWvMA8GA1UdEwEB/wQFMAMBAf8wDQYJKoZIhvcNAQELBQADggEB'
    'AEk5E3BEW/F+sIdE67Y1/yTbBQNFbBpvrSwZfu5nN42zRYqNuawcI7XpZfmINQFAxDpANLSscts/wegJBs481KmJqMaZrgOF'
    'CZ+xVTbvVnHr0OlAZWaGoL8EQaM6JjSU2GcBTwcISV95gXmVrrCyMv6JvYCOcAWd3/7JpphVF6gjO3Qc6KbfomexVLCaqqk+'
    'iIY+sHc8oUueYDcC4hKFGdGsppEOuNpMWyXEqL0DaVWuCK0bmhIOHN6me+w/j0JuOXpnvLNamfuc6tZlHWMmZT8ngsYfFiIv'
    'ci5qzq9yGuVyaGgnmTmG1ieAuNCGjGoOS3/7z4IYl2DavzBlOK8wjU8=')

OTHER_CA_DER = base64.b64decode(
    'MIIDOTCCAiGgAwIBAgIUMtF7I3rlmSJC7CCmeuYDYq311xgwDQYJKoZIhvcNAQELBQAwKzEpMCcGA1UEAwwgVGVzdCBkaXN0'
    'cmlidXRpb24gU2VjdXJlIEJvb3QgQ0EwIBcNMjYxMTIxMjAwNDQzWhgPMjEyNjEwMjgyMDA0NDNaMCsxKTAnBgNVBAMMIFRl'
    'c3QgZGlzdHJpYnV0aW9uIFNlY3VyZSBCb290IENBMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAveLfE/Hq5aaE'
    '0npuCb4tKgqr9szuWNdd9x4BsbseSAcBwtdDJn890mtvpUHe+fiHMwqA9W6zoyFN37KJy4EBm0S7n0dj3xgrLOWocJwv/IbF'
    'MNCjEGs6CDM3Is+JWNrPhHy5XZaDh1uOHW2D0oIuosvPJ8PbnZho2XqZiQpc01nL0tywx24v+EoR/0Yy8BkkglSEgBnebpdl'
    'Tci+cO7YTZpdA+cl7shBzK9PjHkXQ/sd63WuaX9JqTJw0iETKZJhwIjNWDC2y5hrImCI8KhaP9qefZ50FozioYoqZRZvrTJv'
    'j2d3ku0b18INyOHdxZxzOUnbvSPz05t+wzwwpfcbGQIDAQABo1MwUTAdBgNVHQ4EFgQUbGFiZphyv+ttcuaFRsk1heOcCGgw'
    'HwYDVR0jBBgwFoAUbGFiZphyv+ttcuaFRsk1heOcCGgwDwYDVR0TAQH/BAUwAwEB/zANBgkqhkiG9w0BAQsFAAOCAQEAMf7h'
    'G3g9koR8KOPL9054b8ceZ9i8LWsUnWZI5eq4MW/p9D8vqPwZp3J5A13iKQtWf/3VYYiNJCwkaELZ/Ky8iinOuOVnMhhsinHU'
    'jDcEjq6stcUnoVCmmlm9XtwBasJ9L0+V/x/ISQ4H9EUxjQ1Uj4w85TnGPAncfooYABuKQcuGTC2IUXbyOR2YUySNYZkMAyKu'
    'X2XgZRElAw3pbsSmaKDUHTuvBoKAfdhoMWI00Y2De+VP3u89Wf1ZbBunkvw1qsdu0ktzJnFkhmIjB4ioYjp/b0y3dy6rjbnv'
    'xaNgLhQqngoLT2oN05tNtnIgGQhqKaE4vH4ZRssZBeiOa2h1hg==')


def nvidia_ko(version, signed):
    """A stand-in nvidia.ko: an ELF header, the .modinfo strings, and a signature trailer if signed."""
    modinfo = b'\x00'.join([b'license=Dual MIT/GPL', b'version=' + version.encode(), b'supported=external',
                            b'srcversion=3D9E5B1C4F0A7E2D6B81C9F', b'name=nvidia', b'vermagic=' + RELEASE.encode()
                            + b' SMP preempt mod_unload modversions '])
    body = b'\x7fELF\x02\x01\x01' + b'\x00' * 57 + b'\x00' + modinfo + b'\x00'
    if signed:
        body += b'\x30\x82\x01\x00' + b'\x5a' * 256 + struct.pack('>BBBBBxxxI', 0, 0, 2, 0, 0, 260)
        body += b'~Module signature appended~\n'
    return body


def signature_lists(certs):
    """One EFI_SIGNATURE_LIST per certificate, as shim and mokutil write them."""
    out = b''
    for cert in certs:
        size = 16 + len(cert)
        out += EFI_CERT_X509 + struct.pack('<III', 28 + size, 0, size) + SHIM_LOCK_OWNER + cert
    return out


def nvrm_version(version, open_modules=True):
    if open_modules:
        head = 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  ' % version
    else:
        head = 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  ' % version
    return head + '(dvs-builder@U22-I3-AF03-09-1)  Wed Sep 24 00:40:09 UTC 2025\n' \
        'GCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n'


BASE_MODULES = [
    'ext4 1040384 1 - Live 0x0000000000000000',
    'crc16 16384 1 ext4, Live 0x0000000000000000',
    'drm 708608 0 - Live 0x0000000000000000',
]


def proc_modules(nvidia=False, nouveau=False):
    lines = []
    if nvidia:
        lines += ['nvidia_uvm 1519616 0 - Live 0x0000000000000000 (POE)',
                  'nvidia_drm 122880 0 - Live 0x0000000000000000 (POE)',
                  'nvidia_modeset 1724416 1 nvidia_drm, Live 0x0000000000000000 (POE)',
                  'nvidia 11530240 2 nvidia_uvm,nvidia_modeset, Live 0x0000000000000000 (POE)']
    if nouveau:
        lines += ['nouveau 2801664 1 - Live 0x0000000000000000',
                  'mxm_wmi 16384 1 nouveau, Live 0x0000000000000000']
    return '\n'.join(lines + BASE_MODULES) + '\n'


def dpkg_status(version):
    """dpkg database of a host with the driver of `version` held, plus tools that are not the driver."""
    deb = version + '-1'
    stanzas = [('dkms', '3.0.10-8+deb12u1', 'install'),
               ('libnvidia-ml1', deb, 'hold'),
               ('nvidia-container-toolkit', '1.17.8-1', 'install'),
               ('nvidia-driver', deb, 'hold'),
               ('nvidia-kernel-open-dkms', deb, 'hold'),
               ('nvidia-modprobe', deb, 'hold'),
               ('nvidia-open', deb, 'hold'),
               ('nvidia-persistenced', deb, 'hold'),
               ('nvidia-smi', deb, 'hold'),
               ('nvidia-driver-570', '570.172.08-1', 'deinstall')]
    out = []
    for name, ver, want in stanzas:
        state = 'config-files' if want == 'deinstall' else 'installed'
        out.append('Package: %s\nStatus: %s ok %s\nPriority: optional\nSection: non-free/libs\n'
                   'Architecture: amd64\nVersion: %s\nDescription: %s\n test fixture\n' % (name, want, state, ver, name))
    return '\n'.join(out)


# Per case: secure_boot (None: legacy BIOS boot, else the SecureBoot byte),
# mok_list / mok_list_efivars / mok_new (certificates), loaded (module
# version or None), nouveau, installed (driver version in dpkg, None: no
# database), module ((version, signed) built for the running kernel),
# headers, mok_cert (write var/lib/dkms/mok.pub).
CASES = {
    'sb_off': dict(secure_boot=0, loaded=V580, installed=V580, module=(V580, False)),
    'sb_on_not_enrolled': dict(secure_boot=1, mok_list=[OTHER_CA_DER], installed=V580, module=(V580, True),
                               mok_cert=True),
    'sb_on_enrolled': dict(secure_boot=1, mok_list_efivars=[OTHER_CA_DER, TEST_MOK_DER], loaded=V580,
                           installed=V580, module=(V580, True), mok_cert=True),
    'sb_on_pending': dict(secure_boot=1, mok_list=[OTHER_CA_DER], mok_new=[TEST_MOK_DER], installed=V580,
                          module=(V580, True), mok_cert=True),
    'mismatch': dict(secure_boot=0, loaded=V570, installed=V580, module=(V580, False)),
    'nouveau_loaded': dict(secure_boot=None, nouveau=True, installed=V580, module=(V580, False)),
    'not_loaded': dict(secure_boot=0, installed=V580, module=(V580, False)),
    'branch_570': dict(secure_boot=0, loaded=V580, installed=V570, module=(V570, False)),
    'stale_module': dict(secure_boot=0, loaded=V570, installed=V580, module=(V570, False)),
    'fresh': dict(secure_boot=0, module=(V580, False)),
    'sb_fresh': dict(secure_boot=1, mok_list=[OTHER_CA_DER], module=(V580, True)),
    'no_headers': dict(secure_boot=0, headers=False),
}


def build_case(case, dest):
    spec = CASES[case]
    root = os.path.join(dest, case)
    proc = os.path.join(root, 'proc')
    sysfs = os.path.join(root, 'sys')
    modules = os.path.join(root, 'lib', 'modules', RELEASE)
    write_file(os.path.join(proc, 'sys', 'kernel', 'osrelease'), RELEASE + '\n')
    loaded = spec.get('loaded')
    write_file(os.path.join(proc, 'modules'), proc_modules(bool(loaded), spec.get('nouveau', False)))
    if loaded:
        write_file(os.path.join(proc, 'driver', 'nvidia', 'version'), nvrm_version(loaded))
        write_file(os.path.join(sysfs, 'module', 'nvidia', 'version'), loaded + '\n')
    efi = os.path.join(sysfs, 'firmware', 'efi')
    if spec.get('secure_boot') is not None:
        write_efivar(sysfs, 'SecureBoot', EFI_GLOBAL_GUID, bytes([spec['secure_boot']]))
        write_efivar(sysfs, 'SetupMode', EFI_GLOBAL_GUID, b'\x00')
    if spec.get('mok_list'):
        write_file(os.path.join(efi, 'mok-variables', 'MokListRT'), signature_lists(spec['mok_list']))
    if spec.get('mok_list_efivars'):
        write_efivar(sysfs, 'MokListRT', SHIM_LOCK_GUID, signature_lists(spec['mok_list_efivars']))
    if spec.get('mok_new'):
        write_efivar(sysfs, 'MokNew', SHIM_LOCK_GUID, signature_lists(spec['mok_new']))
    write_file(os.path.join(modules, 'modules.dep'), 'kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko\n')
    if spec.get('headers', True):
        write_file(os.path.join(modules, 'build', 'Makefile'), 'VERSION = 6\nPATCHLEVEL = 1\nSUBLEVEL = 0\n')
    if spec.get('module'):
        version, signed = spec['module']
        write_file(os.path.join(modules, 'updates', 'dkms', 'nvidia.ko'), nvidia_ko(version, signed))
    if spec.get('installed'):
        write_file(os.path.join(root, 'var', 'lib', 'dpkg', 'status'), dpkg_status(spec['installed']))
    if spec.get('mok_cert'):
        write_file(os.path.join(root, 'var', 'lib', 'dkms', 'mok.pub'), TEST_MOK_DER)


def build_all(dest_root):
    for case in CASES:
        target = os.path.join(dest_root, case)
        if os.path.isdir(target):
            shutil.rmtree(target)
        build_case(case, dest_root)


def main(argv=None):
    return generator_main(argv, __doc__.splitlines()[0], build_all, CASES, HERE)


if __name__ == '__main__':
    sys.exit(main())
