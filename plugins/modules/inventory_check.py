#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: inventory_check
short_description: Check that every inventory variable of a host resolves, before anything changes
version_added: 0.4.0
author: homelab.llm_server maintainers (@homelab)
description:
  - Resolves every variable the inventory gives the host (group_vars, host_vars, the vault) on the controller,
    and fails with one line per variable that cannot be resolved, naming the missing name and what to do.
  - Ansible resolves a variable only when a task first uses it, so an unset C(vault_) value would otherwise stop
    the run late, in the play that needs it, after earlier plays changed the host. C(playbooks/site.yml) runs
    this first.
  - A missing C(vault_) name is traced to the vault file it belongs in, C(vault.yml) beside the
    C(vault.yml.example) that lists it (the example inventory's layout), with the C(ansible-vault) command to
    add it, or the step that makes the vault when it does not exist yet.
  - Runs as an action on the controller and never contacts the host.
options: {}
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.conn
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  become:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
  connection:
    support: none
  delegation:
    support: none
    details: It reads the host's variables on the controller; delegation changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: all
notes:
  - Changes nothing anywhere; C(changed) is always V(false).
  - Variables Ansible itself provides (facts, magic variables) are not checked.
"""

EXAMPLES = r"""
- name: Check that the inventory resolves before any change
  homelab.llm_server.inventory_check:
"""

RETURN = r"""
checked:
  description: How many variables of the host were resolved.
  returned: always
  type: int
  sample: 84
unresolved:
  description: The variables of the host that could not be resolved; C(msg) says what each lacks and the fix.
  returned: failure
  type: list
  elements: str
  sample: [monitoring_telegram_bot_token, nginx_api_keys]
"""

from ansible.module_utils.basic import AnsibleModule


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    module.fail_json(msg='inventory_check reads the inventory on the controller: it runs as an action plugin only')


if __name__ == '__main__':
    main()
