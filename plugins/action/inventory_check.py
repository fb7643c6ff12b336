# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for homelab.llm_server.inventory_check: every inventory variable resolves.

Ansible resolves a variable only when a task first uses it, so an unset
``vault_`` value used to stop the run in the play that needed it, after the
driver, the toolkit and the engines had changed the host. This action
resolves every variable of the host on the controller at the start of
site.yml and names each one that cannot be, with the vault file it belongs in.
"""

from __future__ import annotations

import os
import re

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

# Variables Ansible itself provides (magic variables, facts, connection
# details): not the inventory's to check, and some are large.
_NOT_INVENTORY = frozenset((
    'hostvars', 'vars', 'groups', 'group_names', 'omit', 'play_hosts', 'ansible_play_hosts',
    'ansible_play_hosts_all', 'ansible_play_batch', 'ansible_facts', 'ansible_local', 'environment',
    'role_names', 'ansible_role_names', 'ansible_play_role_names', 'ansible_dependent_role_names',
))
_UNDEFINED_NAME = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)' is undefined")
_VAULT_FILE = 'vault.yml'
_VAULT_EXAMPLE = 'vault.yml.example'


def undefined_name(error_text):
    """The variable an undefined-variable error names, or None."""
    match = _UNDEFINED_NAME.search(error_text)
    return match.group(1) if match else None


def vault_file_for(name, inventory_dir, host, group_names):
    """(vault file, whether it exists) where NAME belongs, or (None, False).

    The vault beside a vault.yml.example that lists NAME first, then the first
    vault.yml of the host or one of its groups, then the example's place.
    """
    if not inventory_dir:
        return None, False
    places = [os.path.join(inventory_dir, 'host_vars', host)]
    places += [os.path.join(inventory_dir, 'group_vars', group) for group in reversed(list(group_names) + ['all'])]
    listed = re.compile(r'^%s\s*:' % re.escape(name), re.MULTILINE)
    for place in places:
        example = os.path.join(place, _VAULT_EXAMPLE)
        if os.path.isfile(example):
            with open(example, encoding='utf-8') as handle:
                if listed.search(handle.read()):
                    vault = os.path.join(place, _VAULT_FILE)
                    return vault, os.path.isfile(vault)
    for place in places:
        vault = os.path.join(place, _VAULT_FILE)
        if os.path.isfile(vault):
            return vault, True
    for place in places:
        if os.path.isfile(os.path.join(place, _VAULT_EXAMPLE)):
            return os.path.join(place, _VAULT_FILE), False
    return None, False


def shown_path(path):
    """PATH relative to the working directory when it lies below it."""
    relative = os.path.relpath(path)
    return path if relative.startswith('..') else relative


def problem_lines(unresolved, inventory_dir, host, group_names):
    """One line per fix: UNRESOLVED maps each variable to the name it lacks (or None and the error).

    Names missing from one vault file that does not exist yet share a line:
    making that file is their one fix.
    """
    lines = []
    no_vault = {}
    for variable, (missing, error) in sorted(unresolved.items()):
        if missing is None:
            lines.append('%s cannot be resolved: %s' % (variable, error))
            continue
        used_by = '' if missing == variable else ' (%s uses it)' % variable
        if not missing.startswith('vault_'):
            lines.append('%s is not defined%s: set it in the inventory' % (missing, used_by))
            continue
        vault, exists = vault_file_for(missing, inventory_dir, host, group_names)
        if vault is None:
            lines.append('%s is not set%s: add it to a vault file of the inventory (group_vars/<group>/vault.yml, '
                         'encrypted with ansible-vault)' % (missing, used_by))
        elif exists:
            lines.append('%s is not set%s: add it to %s with: ansible-vault edit %s'
                         % (missing, used_by, shown_path(vault), shown_path(vault)))
        else:
            no_vault.setdefault(vault, set()).add(missing)
    for vault, names in sorted(no_vault.items()):
        lines.append('%s does not exist yet, so %s %s not set: make it from %s beside it and encrypt it '
                     '(ansible-vault encrypt %s), as the README\'s quick start shows'
                     % (shown_path(vault), ', '.join(sorted(names)), 'is' if len(names) == 1 else 'are',
                        _VAULT_EXAMPLE, shown_path(vault)))
    return lines


class ActionModule(ActionBase):
    """Resolve every inventory variable of the host; never contacts it."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        task_vars = task_vars or {}
        host = task_vars.get('inventory_hostname', '')
        group_names = task_vars.get('group_names', [])
        inventory_dir = task_vars.get('inventory_dir')
        unresolved = {}
        checked = 0
        for variable in sorted(task_vars):
            if variable in _NOT_INVENTORY:
                continue
            checked += 1
            try:
                self._templar.template(task_vars[variable])
            except AnsibleError as exc:
                text = str(exc)
                unresolved[variable] = (undefined_name(text), text.splitlines()[0] if text else type(exc).__name__)
        result.update(changed=False, checked=checked)
        if unresolved:
            lines = problem_lines(unresolved, inventory_dir, host, group_names)
            result.update(failed=True, unresolved=sorted(unresolved),
                          msg='The inventory of %s cannot be resolved, nothing was changed:\n- %s'
                          % (host, '\n- '.join(lines)))
        return result
