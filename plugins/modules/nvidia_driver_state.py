#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_driver_state
short_description: Read the NVIDIA driver state of a host and decide whether it needs a reboot
version_added: 0.4.0
author: homelab.llm_server maintainers (@homelab)
description:
  - Reads, without changing anything, the loaded NVIDIA kernel module and its version, the installed
    user-space library version, whether nouveau is loaded, the nvidia module built by DKMS for the running
    kernel, the kernel headers, Secure Boot and the Machine Owner Key (MOK) enrolment state, and the
    installed driver packages with their branch.
  - Decides from them whether a reboot is needed and why (driver installed but not loaded, driver changed,
    C(Driver/library version mismatch), nouveau still loaded, MOK enrolment pending), whether DKMS must
    rebuild the module, and explains the state in plain sentences.
  - The roots of procfs, sysfs and the kernel module trees can be changed, so the module can judge a
    simulated host.
options:
  sysfs_root:
    description: Where sysfs is mounted (C(firmware/efi/efivars), C(firmware/efi/mok-variables), C(module/nvidia)).
    type: path
    default: /sys
  procfs_root:
    description: Where procfs is mounted (C(modules), C(driver/nvidia/version), C(sys/kernel/osrelease)).
    type: path
    default: /proc
  modules_root:
    description: Directory holding one directory of kernel modules per kernel release.
    type: path
    default: /lib/modules
  kernel_release:
    description: Kernel release to look for the built module and headers of; default the running kernel.
    type: str
  dpkg_status:
    description: The dpkg status database the installed packages are read from, unless O(packages) is given.
    type: path
    default: /var/lib/dpkg/status
  packages:
    description:
      - Installed packages as returned by M(ansible.builtin.package_facts) (C(ansible_facts.packages));
        when given, O(dpkg_status) is not read.
    type: dict
  library_version:
    description: Installed user-space library version, when known better than the package database tells.
    type: str
  expected_version:
    description:
      - Driver version that should be running (for example the version just installed); a different loaded
        module is a reboot reason.
    type: str
  nvml_driver_version:
    description: Driver version reported by NVML (M(homelab.llm_server.gpu_facts)), used when procfs has none.
    type: str
  nvml_error:
    description: NVML error reported by M(homelab.llm_server.gpu_facts); C(Driver/library version mismatch) counts.
    type: str
  mok_certificate:
    description:
      - Certificate (DER or PEM) of the key DKMS signs modules with; its bytes are looked for in the enrolled
        (C(MokListRT)) and pending (C(MokNew)) MOK lists.
    type: path
extends_documentation_fragment:
  - homelab.llm_server.attributes
  - homelab.llm_server.attributes.no_diff
notes:
  - Only reads files; never changes the system. When the built module is compressed with zstd, C(modinfo)
    reads its version and signer.
"""

EXAMPLES = r"""
- name: Read the driver state
  homelab.llm_server.nvidia_driver_state:
    mok_certificate: /var/lib/dkms/mok.pub
  register: driver

- name: Say why a reboot is needed
  ansible.builtin.debug:
    msg: "reboot required: {{ driver.reboot_reasons | join(' ') }}"
  when: driver.reboot_required
"""

RETURN = r"""
kernel_release:
  description: Release of the kernel the decision is about.
  returned: success
  type: str
  sample: 6.1.0-28-amd64
modules_root:
  description: The kernel module trees directory that was read.
  returned: success
  type: str
  sample: /lib/modules
module_loaded:
  description: Whether the nvidia kernel module is loaded.
  returned: success
  type: bool
loaded_version:
  description: Version of the loaded nvidia kernel module.
  returned: success
  type: str
  sample: 580.95.05
loaded_open:
  description: Whether the loaded module is the open kernel module flavour; null when unknown.
  returned: success
  type: bool
loaded_source:
  description: File the loaded module version was read from.
  returned: success
  type: str
  sample: /proc/driver/nvidia/version
nouveau_loaded:
  description: Whether the nouveau kernel module is loaded.
  returned: success
  type: bool
library_package:
  description: Package the user-space library version was read from.
  returned: success
  type: str
  sample: libnvidia-ml1
library_version:
  description: Installed user-space library (NVML) version.
  returned: success
  type: str
  sample: 580.95.05
kernel_module_package:
  description: Installed package that provides the kernel module (DKMS source or prebuilt).
  returned: success
  type: str
  sample: nvidia-kernel-open-dkms
kernel_module_package_version:
  description: Upstream version of RV(kernel_module_package).
  returned: success
  type: str
  sample: 580.95.05
driver_packages:
  description: Installed NVIDIA driver packages with their branch.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: Package name.
      type: str
      sample: nvidia-driver
    version:
      description: Package version.
      type: str
      sample: 580.95.05-1
    branch:
      description: Driver branch (first number of the version).
      type: str
      sample: "580"
    state:
      description: dpkg state (C(installed), C(half-configured), ...).
      type: str
      sample: installed
    held:
      description: Whether the package is on hold; null when read from O(packages).
      type: bool
installed_branches:
  description: Driver branches of the installed driver packages.
  returned: success
  type: list
  elements: str
  sample: ["580"]
dkms_module:
  description: The nvidia module built for the running kernel.
  returned: success
  type: dict
  contains:
    present:
      description: Whether a built nvidia module exists for the kernel.
      type: bool
    path:
      description: Its path.
      type: str
      sample: /lib/modules/6.1.0-28-amd64/updates/dkms/nvidia.ko
    version:
      description: Its version (from the module's modinfo strings); null when unknown.
      type: str
      sample: 580.95.05
    signed:
      description: Whether it carries a module signature; null when unknown.
      type: bool
kernel_headers_present:
  description: Whether the headers of the kernel are installed (C(<modules_root>/<release>/build)).
  returned: success
  type: bool
kernel_headers_package:
  description: Package that provides them.
  returned: success
  type: str
  sample: linux-headers-6.1.0-28-amd64
secure_boot:
  description: Secure Boot state, one of V(enabled), V(disabled), V(unknown), V(not_uefi).
  returned: success
  type: str
  sample: disabled
mok_state:
  description: State of the module signing key, one of V(not_needed), V(enrolled), V(pending_enrollment), V(not_enrolled).
  returned: success
  type: str
  sample: not_needed
mok_certificate_present:
  description: Whether O(mok_certificate) could be read.
  returned: success
  type: bool
mok_enrolled_certificates:
  description: Number of X.509 certificates in the enrolled MOK list.
  returned: success
  type: int
mok_list_readable:
  description: Whether the enrolled MOK list could be read.
  returned: success
  type: bool
mok_request_pending:
  description: Whether any MOK enrolment request (C(MokNew)) is pending, for any key.
  returned: success
  type: bool
nvidia_pci_devices:
  description: NVIDIA display and 3D controllers on the PCI bus.
  returned: success
  type: list
  elements: dict
  contains:
    address:
      description: PCI address.
      type: str
      sample: "0000:01:00.0"
    device_id:
      description: PCI device id.
      type: str
      sample: "0x2bb1"
    open_modules_supported:
      description: Whether the GPU generation works with the open kernel modules (Turing and newer).
      type: bool
    requires_open_modules:
      description: Whether the GPU generation works only with the open kernel modules (Blackwell and newer).
      type: bool
mismatch:
  description: Whether the loaded kernel module differs from the installed library (Driver/library version mismatch).
  returned: success
  type: bool
dkms_rebuild_required:
  description: Whether the module for the running kernel is missing, of another version than the library, or unsigned under Secure Boot.
  returned: success
  type: bool
reboot_required:
  description: Whether a reboot is needed to make the installed driver usable.
  returned: success
  type: bool
reboot_reason_ids:
  description:
    - Why, as ids; V(driver_not_loaded), V(driver_changed), V(version_mismatch), V(nouveau_loaded),
      V(mok_enrollment_pending).
  returned: success
  type: list
  elements: str
  sample: [driver_not_loaded]
reboot_reasons:
  description: Why, as sentences.
  returned: success
  type: list
  elements: str
  sample: ["The NVIDIA driver 580.95.05 is installed but its kernel module is not loaded."]
messages:
  description: Plain sentences about the state for the user.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.llm_server.plugins.module_utils._driver_state import gather


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysfs_root=dict(type='path', default='/sys'),
            procfs_root=dict(type='path', default='/proc'),
            modules_root=dict(type='path', default='/lib/modules'),
            kernel_release=dict(type='str'),
            dpkg_status=dict(type='path', default='/var/lib/dpkg/status'),
            packages=dict(type='dict'),
            library_version=dict(type='str'),
            expected_version=dict(type='str'),
            nvml_driver_version=dict(type='str'),
            nvml_error=dict(type='str'),
            mok_certificate=dict(type='path'),
        ),
        supports_check_mode=True,
    )

    modinfo_bin = module.get_bin_path('modinfo')

    def modinfo(path):
        if not modinfo_bin:
            return None
        rc, out, dummy = module.run_command([modinfo_bin, path])
        return out if rc == 0 else None

    module.exit_json(changed=False, **gather(module.params, modinfo))


if __name__ == '__main__':
    main()
