# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Play the firmware's part in the simulated tree (the hardware boundary).

    simulate_firmware.py ROOT stage CERT    what `mokutil --import CERT` leaves: a MokNew request
    simulate_firmware.py ROOT enroll CERT   what MokManager does at boot: CERT joins MokListRT, MokNew goes

ROOT is the simulated host (its sys/firmware/efi). CERT is a DER certificate.
"""

import os
import struct
import sys

SHIM_LOCK_GUID = '605dab50-e046-4300-abb6-3dd810dd8b23'
EFI_CERT_X509 = bytes.fromhex('a159c0a5e494a74a87b5ab155c2bf072')
SHIM_LOCK_OWNER = bytes.fromhex('50ab5d6046e00043abb63dd810dd8b23')


def signature_list(cert):
    size = 16 + len(cert)
    return EFI_CERT_X509 + struct.pack('<III', 28 + size, 0, size) + SHIM_LOCK_OWNER + cert


def main(root, action, cert_path):
    with open(cert_path, 'rb') as handle:
        cert = handle.read()
    efi = os.path.join(root, 'sys', 'firmware', 'efi')
    mok_new = os.path.join(efi, 'efivars', 'MokNew-' + SHIM_LOCK_GUID)
    if action == 'stage':
        with open(mok_new, 'wb') as handle:
            handle.write(struct.pack('<I', 7) + signature_list(cert))
    elif action == 'enroll':
        mok_list = os.path.join(efi, 'mok-variables', 'MokListRT')
        os.makedirs(os.path.dirname(mok_list), exist_ok=True)
        with open(mok_list, 'ab') as handle:
            handle.write(signature_list(cert))
        if os.path.exists(mok_new):
            os.remove(mok_new)
    else:
        sys.exit('unknown action %s' % action)


if __name__ == '__main__':
    main(*sys.argv[1:4])
