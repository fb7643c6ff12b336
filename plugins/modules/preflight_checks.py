#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_checks
short_description: Check BIOS, kernel and hardware settings that matter for LLM serving
version_added: 0.4.0
author: homelab.llm_server maintainers (@homelab)
description:
  - Runs a fixed list of read-only preflight checks on a GPU server and reports, for each one, its status,
    what was found, why it matters for LLM serving and how to fix it in the BIOS or the OS.
  - "Checks, in order: C(uefi_boot), C(secure_boot), C(gpu_count), C(nvidia_driver), C(nouveau), C(resizable_bar),
    C(pcie_link), C(p2p), C(iommu_acs), C(kernel_headers), C(model_dir_disk), C(ram), C(psu_headroom),
    C(power_on_after_power_loss), C(ups)."
  - GPU related checks judge the facts gathered by M(homelab.llm_server.gpu_facts); the others read
    C(/sys), C(/proc) and C(/lib/modules) (the roots can be changed for testing).
  - A failing check reports its configured severity (V(fail) or V(warn)) as status. The module itself never
    fails because a check failed; it fails only on bad input. The calling role decides what to do with RV(verdict).
  - Reading the PCIe ACS registers needs root (the extended PCI config space is hidden from other users).
options:
  gpus:
    description:
      - GPU facts as returned by M(homelab.llm_server.gpu_facts), one dict per GPU.
      - Keys used are C(vendor), C(index), C(name), C(pci_bus_id), C(memory_total_bytes), C(bar1_total_bytes),
        C(pcie_link_gen_current), C(pcie_link_gen_max), C(pcie_link_gen_gpu_max), C(pcie_link_width_current),
        C(pcie_link_width_max), C(power_limit_w), C(power_limit_max_w) and C(driver_version); any may be null.
    type: list
    elements: dict
    default: []
  gpu_topology:
    description:
      - "GPU pair topology as returned by M(homelab.llm_server.gpu_facts), for example
        C({gpus: [0, 1], common_ancestor: hostbridge, p2p: {read: ok, write: ok}})."
    type: list
    elements: dict
    default: []
  nvml_error:
    description:
      - The NVML error reported by M(homelab.llm_server.gpu_facts), if any; the C(nvidia_driver) check reports it.
    type: str
  sysfs_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
  procfs_root:
    description: Where procfs is mounted.
    type: path
    default: /proc
  modules_root:
    description: Directory holding one directory of kernel modules per kernel release.
    type: path
    default: /lib/modules
  model_dir:
    description:
      - Directory the model weights are stored in. If it does not exist yet, its nearest existing parent is measured.
    type: path
    default: /srv/models
  model_dir_min_free_gb:
    description: Free space (in GB, 10^9 bytes) wanted on the filesystem holding O(model_dir).
    type: int
    default: 200
  planned_model_gb:
    description:
      - Size of the largest model you plan to serve, in GB. V(0) skips the C(ram) check.
    type: float
    default: 0
  ram_to_model_ratio:
    description:
      - System RAM should be at least O(planned_model_gb) times this ratio, because vLLM / safetensors loading
        pages the weights through host memory.
    type: float
    default: 1.0
  psu_watts:
    description:
      - Rated output of the power supply in watts. V(0) means unknown and makes C(psu_headroom) warn.
    type: int
    default: 0
  cpu_power_allowance_w:
    description: Watts budgeted for CPU, board, drives and fans in the C(psu_headroom) check.
    type: int
    default: 250
  psu_headroom_percent:
    description: Headroom the PSU should have above the summed power limits, in percent.
    type: int
    default: 20
  psu_power_limit_source:
    description:
      - Which GPU power limit C(psu_headroom) counts.
      - V(max) counts the highest limit the GPU can be set to (C(power_limit_max_w)), falling back to the current one.
      - V(current) counts the enforced limit (C(power_limit_w)); use it once GPU power is capped persistently.
    type: str
    choices: [max, current]
    default: max
  expected_gpu_count:
    description: Number of GPUs that should be visible. V(0) skips the C(gpu_count) check.
    type: int
    default: 0
  severity:
    description:
      - Overrides the default severity of checks, as a dict of check id to V(fail), V(warn) or V(ignore).
      - V(ignore) turns the check into C(skip).
      - "Defaults: C(secure_boot), C(p2p), C(iommu_acs), C(model_dir_disk) and C(power_on_after_power_loss)
        are V(warn), all others V(fail). C(power_on_after_power_loss) is always reported as C(manual)
        unless set to V(ignore)."
    type: dict
    default: {}
  ups_name:
    description:
      - The UPS the inventory names (the ups role's C(ups_name) when its C(ups_enabled) is true); omitted, the C(ups)
        check is skipped.
      - Where NUT is set up for it (a section of that name in C(ups.conf) and C(upsc) installed), C(ups) asks upsd
        for its C(ups.status) with C(upsc NAME@localhost) (read-only) and fails when NUT cannot read it. Where NUT
        is not set up yet (a fresh host), C(ups) is skipped, since the ups role installs it and waits for the UPS.
    type: str
  nut_config_dir:
    description: NUT's configuration directory, holding C(ups.conf).
    type: path
    default: /etc/nut
  skip:
    description: Check ids not to run; they are reported with status C(skip).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - homelab.llm_server.attributes
  - homelab.llm_server.attributes.no_diff
notes:
  - Only reads files; never changes the system.
"""

EXAMPLES = r"""
- name: Gather GPU facts
  homelab.llm_server.gpu_facts:
  register: gpu

- name: Run preflight checks
  homelab.llm_server.preflight_checks:
    gpus: "{{ gpu.gpus }}"
    gpu_topology: "{{ gpu.topology }}"
    nvml_error: "{{ gpu.nvml_error }}"
    expected_gpu_count: 2
    planned_model_gb: 70
    psu_watts: 1600
    severity:
      secure_boot: ignore
      p2p: warn
    skip:
      - model_dir_disk
  register: preflight

- name: Show the report
  ansible.builtin.debug:
    var: preflight.report_lines

- name: Stop on failed checks
  ansible.builtin.assert:
    that: preflight.verdict != 'fail'
    fail_msg: "{{ preflight.report_lines | select('match', '\\[FAIL\\]') | list }}"
"""

RETURN = r"""
checks:
  description: One entry per check, in the documented order.
  returned: success
  type: list
  elements: dict
  contains:
    id:
      description: Check id.
      type: str
      sample: pcie_link
    title:
      description: Short title of the check.
      type: str
      sample: PCIe link width and generation
    status:
      description: Result, one of C(pass), C(warn), C(fail), C(manual), C(skip).
      type: str
      sample: fail
    severity:
      description: Configured severity of the check (V(fail), V(warn) or V(ignore)).
      type: str
      sample: fail
    message:
      description: What was found, with figures.
      type: str
      sample: "GPU 1 (0000:02:00.0) PCIe link downtrained: running Gen4 x8, max Gen4 x16, GPU supports Gen5."
    why:
      description: Why the check matters for LLM serving.
      type: str
    fix:
      description: How to fix it in the BIOS or the OS.
      type: str
summary:
  description: Number of checks per status.
  returned: success
  type: dict
  sample: {"pass": 9, "warn": 2, "fail": 1, "manual": 1, "skip": 1}
failed_checks:
  description: Ids of the checks whose status is C(fail).
  returned: success
  type: list
  elements: str
  sample: [pcie_link]
verdict:
  description: C(fail) if any check failed, else C(warn) if any warned, else C(pass).
  returned: success
  type: str
  sample: warn
report_lines:
  description: One human-readable line per check; failed, warned and manual checks include the fix.
  returned: success
  type: list
  elements: str
  sample:
    - "[PASS] uefi_boot: Booted in UEFI mode (/sys/firmware/efi exists)."
    - "[FAIL] pcie_link: GPU 1 (0000:02:00.0) PCIe link downtrained: running Gen4 x8, max Gen4 x16, GPU supports Gen5. -> fix: ..."
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.llm_server.plugins.module_utils._preflight import (
    run_checks,
    validate_params,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpus=dict(type='list', elements='dict', default=[]),
            gpu_topology=dict(type='list', elements='dict', default=[]),
            nvml_error=dict(type='str'),
            sysfs_root=dict(type='path', default='/sys'),
            procfs_root=dict(type='path', default='/proc'),
            modules_root=dict(type='path', default='/lib/modules'),
            model_dir=dict(type='path', default='/srv/models'),
            model_dir_min_free_gb=dict(type='int', default=200),
            planned_model_gb=dict(type='float', default=0),
            ram_to_model_ratio=dict(type='float', default=1.0),
            psu_watts=dict(type='int', default=0),
            cpu_power_allowance_w=dict(type='int', default=250),
            psu_headroom_percent=dict(type='int', default=20),
            psu_power_limit_source=dict(type='str', choices=['max', 'current'], default='max'),
            expected_gpu_count=dict(type='int', default=0),
            severity=dict(type='dict', default={}),
            skip=dict(type='list', elements='str', default=[]),
            ups_name=dict(type='str'),
            nut_config_dir=dict(type='path', default='/etc/nut'),
        ),
        supports_check_mode=True,
    )

    errors = validate_params(module.params)
    if errors:
        module.fail_json(msg='; '.join(errors))

    upsc = module.get_bin_path('upsc')

    def ups_probe(argv):
        return module.run_command([upsc] + list(argv[1:]))

    result = run_checks(module.params, ups_probe=ups_probe if upsc else None)
    module.exit_json(changed=False, **result)


if __name__ == '__main__':
    main()
