#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather GPU facts through NVML (NVIDIA) and sysfs (AMD)
version_added: 0.4.0
description:
  - Reads every NVIDIA GPU through NVML (the library that ships with the NVIDIA driver,
    queried with C(nvidia-ml-py)) and every AMD GPU through the C(amdgpu) sysfs files.
  - Reports identity, memory, BAR1 size, PCIe link generation and width (current, slot
    maximum and GPU maximum), temperatures, power draw and limits, modes, clocks and
    clock event (throttle) reasons per GPU, plus the PCIe topology and peer-to-peer
    support between each pair of NVIDIA GPUs.
  - Read only. A value the hardware or driver does not report is V(null) for that field
    only; a missing driver or library is reported in RV(ansible_facts.gpu_nvml_error),
    never as a module failure, so preflight checks can explain what to fix.
author:
  - homelab.llm_server maintainers (@homelab)
options:
  vendors:
    description:
      - GPU vendors to query.
      - V(nvidia) opens one NVML session (C(nvmlInit) and C(nvmlShutdown)).
      - V(amd) scans O(sysfs_root)C(/class/drm/card*/device).
    type: list
    elements: str
    choices: [nvidia, amd]
    default: [nvidia, amd]
  sysfs_root:
    description:
      - Root of the sysfs tree scanned for AMD GPUs. Only tests need another value.
    type: path
    default: /sys
  nvml_timeout:
    description:
      - Seconds NVML may take to read every NVIDIA GPU. NVML is read in a child process; past this the read is
        abandoned (a GPU that fell off the bus can hang a call in the driver for good), no NVIDIA GPU is reported
        and RV(ansible_facts.gpu_nvml_error) says so, so the play goes on to report it.
    type: float
    default: 60
requirements:
  - nvidia-ml-py (module C(pynvml)) on the managed node, for NVIDIA GPUs.
  - The NVIDIA driver (C(libnvidia-ml.so.1) and a loaded kernel module), for NVIDIA GPUs.
notes:
  - When C(pynvml) cannot be imported, NVML cannot be loaded or initialised, the module
    still succeeds, returns the AMD GPUs it found and explains the problem in
    RV(ansible_facts.gpu_nvml_error) (also returned as RV(nvml_error)).
  - O(vendors=[amd]) skips NVML entirely; RV(ansible_facts.gpu_nvml_error) is then V(null).
  - For AMD GPUs the NVIDIA-only fields (uuid, serial, architecture, compute capability,
    modes, ECC, MIG, throttle reasons) are V(null). The temperature is the edge sensor
    C(temp1); the shutdown threshold is C(temp1_emergency) (else C(temp1_crit)) and the
    slowdown threshold is C(temp1_crit) only when C(temp1_emergency) exists.
  - On AMD boards with an on-package PCIe switch, the link the GPU reports may be the one
    to that switch rather than to the slot.
extends_documentation_fragment:
  - homelab.llm_server.attributes
  - homelab.llm_server.attributes.no_diff
  - homelab.llm_server.attributes.facts
attributes:
  platform:
    platforms: posix
"""

EXAMPLES = r"""
- name: Gather GPU facts
  homelab.llm_server.gpu_facts:

- name: Both cards must train at PCIe 5.0 x16
  ansible.builtin.assert:
    that:
      - ansible_facts.gpu_nvml_error is none
      - ansible_facts.gpus | selectattr('vendor', 'eq', 'nvidia') | list | length == 2
      - item.pcie_link_gen_current == item.pcie_link_gen_gpu_max
      - item.pcie_link_width_current == 16
    fail_msg: >-
      {{ ansible_facts.gpu_nvml_error or (item.name ~ ' at ' ~ item.pci_bus_id ~ ' runs at Gen'
      ~ item.pcie_link_gen_current ~ ' x' ~ item.pcie_link_width_current) }}
  loop: "{{ ansible_facts.gpus | selectattr('vendor', 'eq', 'nvidia') }}"
  loop_control:
    label: "{{ item.index }}: {{ item.name }}"

- name: Only look at AMD GPUs (no NVML)
  homelab.llm_server.gpu_facts:
    vendors: [amd]
"""

RETURN = r"""
nvml_error:
  description: Same as RV(ansible_facts.gpu_nvml_error), handy with C(register).
  returned: always
  type: str
  sample: null
ansible_facts:
  description: GPU facts.
  returned: always
  type: dict
  contains:
    gpus:
      description:
        - One entry per GPU, NVIDIA first (by NVML index) then AMD (by PCI bus id).
        - Every key is always present; a value the GPU or driver does not report is V(null).
      returned: always
      type: list
      elements: dict
      contains:
        vendor:
          description: V(nvidia) or V(amd).
          type: str
          sample: nvidia
        index:
          description: NVML index for NVIDIA GPUs; position among AMD GPUs (by PCI bus id) for AMD.
          type: int
          sample: 0
        name:
          description: Product name. AMD cards without C(product_name) read C(AMD GPU 0x<device id>).
          type: str
          sample: NVIDIA RTX PRO 6000 Blackwell Workstation Edition
        uuid:
          description: NVIDIA GPU UUID.
          type: str
          sample: GPU-3f8a2c41-7d5e-4b9a-8c16-0e2f4a6b8d10
        serial:
          description: Board serial number.
          type: str
          sample: "1792025001234"
        pci_bus_id:
          description: PCI address in sysfs form, lower case.
          type: str
          sample: "0000:01:00.0"
        architecture:
          description: NVIDIA architecture (V(ampere), V(ada), V(hopper), V(blackwell), ...).
          type: str
          sample: blackwell
        cuda_compute_capability:
          description: CUDA compute capability, C(major.minor).
          type: str
          sample: "12.0"
        memory_total_bytes:
          description: Total VRAM.
          type: int
          sample: 102641336320
        memory_used_bytes:
          description: Used VRAM (for NVIDIA, NVML v2 accounting, without driver-reserved memory).
          type: int
          sample: 2097152
        memory_free_bytes:
          description: Free VRAM.
          type: int
          sample: 102073008128
        bar1_total_bytes:
          description:
            - Size of the BAR the CPU can map. Close to the VRAM size when Resizable BAR
              works, 256 MiB when it does not.
          type: int
          sample: 102641336320
        pcie_link_gen_current:
          description: PCIe generation the link runs at now (idle GPUs may train down).
          type: int
          sample: 5
        pcie_link_gen_max:
          description: Highest PCIe generation the link can reach given GPU and slot.
          type: int
          sample: 5
        pcie_link_gen_gpu_max:
          description: Highest PCIe generation the GPU supports.
          type: int
          sample: 5
        pcie_link_width_current:
          description: Lanes in use now.
          type: int
          sample: 16
        pcie_link_width_max:
          description: Maximum link width.
          type: int
          sample: 16
        temperature_c:
          description: GPU temperature in degrees Celsius.
          type: int
          sample: 34
        temperature_slowdown_c:
          description: Temperature at which the GPU slows down.
          type: int
          sample: 95
        temperature_shutdown_c:
          description: Temperature at which the GPU shuts down.
          type: int
          sample: 98
        power_draw_w:
          description: Current power draw in watts.
          type: float
          sample: 21.843
        power_limit_w:
          description:
            - Power limit in watts (for NVIDIA the power management limit, falling back to
              the enforced limit; for AMD C(power1_cap)).
          type: float
          sample: 600.0
        power_limit_default_w:
          description: Default power limit in watts.
          type: float
          sample: 600.0
        power_limit_min_w:
          description: Lowest power limit that may be set, in watts.
          type: float
          sample: 150.0
        power_limit_max_w:
          description: Highest power limit that may be set, in watts.
          type: float
          sample: 600.0
        persistence_mode:
          description: Whether NVIDIA persistence mode is on.
          type: bool
          sample: true
        compute_mode:
          description: V(default), V(exclusive_thread), V(prohibited) or V(exclusive_process).
          type: str
          sample: default
        ecc_enabled:
          description: Whether ECC is on now; V(null) when the GPU has no ECC.
          type: bool
          sample: false
        ecc_pending:
          description: ECC mode after the next reboot.
          type: bool
          sample: false
        mig_enabled:
          description: Whether MIG is on now; V(null) when the GPU has no MIG.
          type: bool
          sample: false
        mig_pending:
          description: MIG mode after the next GPU reset.
          type: bool
          sample: false
        clocks:
          description: Current and maximum clocks in MHz.
          type: dict
          contains:
            graphics_mhz:
              description: Graphics clock now.
              type: int
            sm_mhz:
              description: SM clock now (NVIDIA only).
              type: int
            memory_mhz:
              description: Memory clock now.
              type: int
            graphics_max_mhz:
              description: Maximum graphics clock.
              type: int
            sm_max_mhz:
              description: Maximum SM clock (NVIDIA only).
              type: int
            memory_max_mhz:
              description: Maximum memory clock.
              type: int
        throttle_reasons:
          description:
            - Why the clocks are held down now (NVML clock event reasons), for example
              V(gpu_idle), V(sw_power_cap), V(hw_slowdown), V(hw_thermal_slowdown),
              V(sw_thermal_slowdown), V(hw_power_brake_slowdown),
              V(applications_clocks_setting), V(sync_boost), V(display_clock_setting).
            - Unknown bits appear as C(unknown_0x<bit>).
          type: list
          elements: str
          sample: [gpu_idle]
        throttle_reasons_mask:
          description: The raw NVML clock event reasons bit mask.
          type: int
          sample: 1
    gpu_count:
      description: Number of entries in RV(ansible_facts.gpus).
      returned: always
      type: int
      sample: 2
    gpu_driver_version:
      description: NVIDIA driver version, V(null) without NVML.
      returned: always
      type: str
      sample: 580.95.05
    gpu_cuda_driver_version:
      description: Highest CUDA version the NVIDIA driver supports.
      returned: always
      type: str
      sample: "13.0"
    gpu_nvml_version:
      description: NVML library version.
      returned: always
      type: str
      sample: 13.580.95.05
    gpu_nvml_bindings_version:
      description:
        - Version of the installed C(nvidia-ml-py) package, V(null) when it is not installed.
        - Lets a role skip reinstalling the bindings when the pinned version is already there.
      returned: always
      type: str
      sample: 13.615.71
    gpu_nvml_error:
      description:
        - V(null) when NVML answered (or was not asked), else what went wrong and what to do.
        - Covers a missing C(nvidia-ml-py), a missing C(libnvidia-ml.so.1), an unloaded
          kernel module, missing permissions and driver/library version mismatches.
      returned: always
      type: str
      sample: >-
        NVML could not initialise: Driver Not Loaded. The NVIDIA kernel module is not
        loaded: install the driver (homelab.llm_server.nvidia_driver) or reboot after installing it.
    gpu_topology:
      description: One entry per pair of NVIDIA GPUs.
      returned: always
      type: list
      elements: dict
      contains:
        gpus:
          description: The NVML indexes of the two GPUs.
          type: list
          elements: int
          sample: [0, 1]
        common_ancestor:
          description:
            - Closest common PCIe ancestor, V(internal), V(single) or V(multiple) (PCIe
              switches), V(hostbridge), V(node) (same CPU) or V(system) (across CPUs).
          type: str
          sample: hostbridge
        p2p:
          description:
            - Peer-to-peer status per capability (C(read), C(write), C(nvlink), C(atomics)),
              each V(ok), V(chipset_not_supported), V(gpu_not_supported),
              V(iohtopology_not_supported), V(disabled_by_regkey), V(not_supported),
              V(unknown) or V(null).
          type: dict
          sample: {read: ok, write: ok, nvlink: not_supported, atomics: not_supported}
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.homelab.llm_server.plugins.module_utils._amd_sysfs import collect_amd
from ansible_collections.homelab.llm_server.plugins.module_utils._nvml import (
    DEFAULT_TIMEOUT_S, HAS_PYNVML, bindings_version, collect_nvidia_within)


def gather(vendors, sysfs_root, nvml_timeout=DEFAULT_TIMEOUT_S):
    facts = {
        'gpus': [],
        'gpu_count': 0,
        'gpu_driver_version': None,
        'gpu_cuda_driver_version': None,
        'gpu_nvml_version': None,
        'gpu_nvml_bindings_version': bindings_version(),
        'gpu_nvml_error': None,
        'gpu_topology': [],
    }
    if 'nvidia' in vendors:
        if HAS_PYNVML:
            nvidia = collect_nvidia_within(nvml_timeout)
            facts['gpus'].extend(nvidia['gpus'])
            facts['gpu_driver_version'] = nvidia['driver_version']
            facts['gpu_cuda_driver_version'] = nvidia['cuda_driver_version']
            facts['gpu_nvml_version'] = nvidia['nvml_version']
            facts['gpu_nvml_error'] = nvidia['error']
            facts['gpu_topology'] = nvidia['topology']
        else:
            facts['gpu_nvml_error'] = 'Cannot query NVIDIA GPUs: %s' % missing_required_lib('nvidia-ml-py')
    if 'amd' in vendors:
        facts['gpus'].extend(collect_amd(sysfs_root))
    facts['gpu_count'] = len(facts['gpus'])
    return facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            vendors=dict(type='list', elements='str', choices=['nvidia', 'amd'], default=['nvidia', 'amd']),
            sysfs_root=dict(type='path', default='/sys'),
            nvml_timeout=dict(type='float', default=DEFAULT_TIMEOUT_S),
        ),
        supports_check_mode=True,
    )
    if module.params['nvml_timeout'] <= 0:
        module.fail_json(msg='nvml_timeout must be a positive number of seconds, not %s' % module.params['nvml_timeout'])
    facts = gather(module.params['vendors'], module.params['sysfs_root'], module.params['nvml_timeout'])
    module.exit_json(changed=False, ansible_facts=facts, nvml_error=facts['gpu_nvml_error'])


if __name__ == '__main__':
    main()
