#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_wheel
short_description: Build the wheel of the collection's host programs on the controller
version_added: 0.4.0
author: homelab.llm_server maintainers (@homelab)
description:
  - Writes the wheel of the Python package in the collection's C(host/) folder (the programs that run on its hosts,
    such as probes, metrics writers and daemons) on the controller, stamped with the collection's version, from
    C(host/pyproject.toml) and the package's files, without a build backend or a package index.
  - The bytes depend only on the collection's files, so the copy that sends the wheel to a host changes nothing
    when the collection did not change. The homelab.llm_server.host_programs role installs it into the hosts' venv.
  - Runs as an action on the controller; it touches no host.
options:
  dest:
    description:
      - The directory on the controller the wheel is written under, in a folder named after the start of its
        SHA-256 (created when missing), so that two collections of the same version never overwrite each other's
        wheel. It is written only when its bytes differ.
      - Without it, C(~/.cache/homelab.llm_server/host-wheel) of the user running Ansible.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The wheel is written on the controller in check mode too, so that a copy task can compare it.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - C(changed) is always V(false), as it changes no host.
  - Needs Python 3.11 or newer on the controller (C(tomllib)), as ansible-core 2.19 does.
"""

EXAMPLES = r"""
- name: Build the host programs' wheel
  homelab.llm_server.host_wheel:
  register: wheel

- name: Send it to the host
  ansible.builtin.copy:
    src: "{{ wheel.path }}"
    dest: /opt/llm-server/{{ wheel.file_name }}
    mode: "0644"
"""

RETURN = r"""
path:
  description: The wheel on the controller.
  returned: success
  type: str
  sample: /home/owner/.cache/homelab.llm_server/host-wheel/3f1c0e9a7b2d4c58/llm_server_host-0.4.0-py3-none-any.whl
file_name:
  description: The wheel's file name.
  returned: success
  type: str
  sample: llm_server_host-0.4.0-py3-none-any.whl
sha256:
  description: The first 16 hexadecimal digits of the wheel's SHA-256, the name of its folder under O(dest).
  returned: success
  type: str
  sample: 3f1c0e9a7b2d4c58
version:
  description: The collection's version, which the wheel carries.
  returned: success
  type: str
  sample: 0.4.0
scripts:
  description: The console scripts the wheel installs (C(host/pyproject.toml)'s C([project.scripts])).
  returned: success
  type: list
  elements: str
  sample: [llm-door-probe, llm-tunnel-metrics]
written:
  description: Whether the file was written in this call (V(false) when it held the same bytes already).
  returned: success
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={'dest': {'type': 'path'}}, supports_check_mode=True)
    module.fail_json(msg='homelab.llm_server.host_wheel runs as an action plugin; it cannot run as a module.')


if __name__ == '__main__':
    main()
