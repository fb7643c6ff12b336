# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for homelab.llm_server.installed_packages: the package facts, read again only after dpkg changed.

Every role that decides on installed packages needs them current, and a run
of site.yml passes through a dozen such roles; reading the package database
costs about a second a time. This action looks at dpkg's status file (which
dpkg rewrites on every install, removal or hold) and runs package_facts
only when the facts were read from another state of it, all in one task
where an included task file took five (the include, its argument check,
the stat, the read and the note of the state).
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase

DPKG_STATUS = '/var/lib/dpkg/status'
# The fact that says which state of dpkg ansible_facts.packages is from.
READ_AT_FACT = 'packages_dpkg_status_mtime'


def needs_read(facts, status_mtime):
    """Whether FACTS (the host's ansible_facts) lack the packages of dpkg's state STATUS_MTIME."""
    return 'packages' not in facts or status_mtime is None or facts.get(READ_AT_FACT) != status_mtime


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset()

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        task_vars = task_vars or {}
        status = self._execute_module(
            module_name='ansible.legacy.stat',
            module_args={'path': DPKG_STATUS, 'get_checksum': False, 'get_mime': False, 'get_attributes': False},
            task_vars=task_vars)
        if status.get('failed'):
            result.update(failed=True, msg='Could not look at %s: %s' % (DPKG_STATUS, status.get('msg', '')))
            return result
        mtime = status['stat'].get('mtime') if status['stat'].get('exists') else None
        result['changed'] = False
        if not needs_read(task_vars.get('ansible_facts', {}), mtime):
            result['read'] = False
            return result
        packages = self._execute_module(
            module_name='ansible.legacy.package_facts', module_args={'manager': 'apt'}, task_vars=task_vars)
        if packages.get('failed'):
            result.update(failed=True, msg='Could not read the installed packages: %s' % packages.get('msg', ''))
            return result
        result['read'] = True
        result['ansible_facts'] = {'packages': packages['ansible_facts']['packages'], READ_AT_FACT: mtime}
        return result
