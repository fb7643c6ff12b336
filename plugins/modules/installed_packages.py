#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: installed_packages
short_description: The installed packages as facts, read again only when dpkg's state changed since the last read
version_added: 0.4.0
author: homelab.llm_server maintainers (@homelab)
description:
  - Sets C(ansible_facts.packages) as M(ansible.builtin.package_facts) does (C(manager=apt)), but reads the package
    database only when the facts are absent or were read from another state of dpkg, as told by the modification
    time of C(/var/lib/dpkg/status), which dpkg rewrites on every install, removal and hold.
  - The roles of the collection run it before deciding on packages, so a run of C(site.yml) reads the database
    once, and again only after something was installed or removed, in one task each time.
  - Runs as an action on the controller that calls M(ansible.builtin.stat) and, when needed,
    M(ansible.builtin.package_facts) on the host.
options: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: debian
notes:
  - Changes nothing; C(changed) is always V(false).
"""

EXAMPLES = r"""
- name: Read the installed packages (again only if dpkg changed since)
  homelab.llm_server.installed_packages:

- name: Install what is missing
  ansible.builtin.apt:
    name: "{{ ['nginx', 'certbot'] | reject('in', ansible_facts['packages']) | list }}"
"""

RETURN = r"""
read:
  description: Whether the package database was read in this call (V(false) when the facts were already current).
  returned: success
  type: bool
  sample: false
ansible_facts:
  description: Set only when the database was read.
  returned: when read
  type: dict
  contains:
    packages:
      description: The installed packages, as M(ansible.builtin.package_facts) returns them.
      type: dict
      returned: when read
    packages_dpkg_status_mtime:
      description: The modification time of C(/var/lib/dpkg/status) the packages were read at.
      type: float
      returned: when read
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.fail_json(msg='homelab.llm_server.installed_packages runs as an action plugin; it cannot run as a module.')


if __name__ == '__main__':
    main()
