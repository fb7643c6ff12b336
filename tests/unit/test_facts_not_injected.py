# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles, playbooks and scenarios read facts only as ansible_facts['...']: ansible.cfg and Molecule turn
inject_facts_as_vars off (each task is cheaper), and a playbook that keeps Ansible's default gets the same."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDERS = ('roles', 'playbooks', 'molecule', 'tests/molecule', 'tests/simulated_host', 'inventories')
# The ansible_* names Ansible defines that are not facts: magic, connection and result variables.
NOT_FACTS = {
    'ansible_facts', 'ansible_check_mode', 'ansible_diff_mode', 'ansible_managed', 'ansible_failed_result',
    'ansible_failed_task', 'ansible_host', 'ansible_port', 'ansible_user', 'ansible_connection',
    'ansible_python_interpreter', 'ansible_playbook_python', 'ansible_parent_role_names', 'ansible_role_names',
    'ansible_play_role_names', 'ansible_dependent_role_names', 'ansible_play_hosts', 'ansible_play_hosts_all',
    'ansible_play_batch', 'ansible_loop', 'ansible_loop_var', 'ansible_index_var', 'ansible_job_id',
    'ansible_run_tags', 'ansible_skip_tags', 'ansible_version', 'ansible_verbosity', 'ansible_search_path',
    'ansible_config_file', 'ansible_limit', 'ansible_inventory_sources', 'ansible_role_name',
    'ansible_collection_name', 'ansible_forks', 'ansible_become', 'ansible_become_user', 'ansible_become_method',
    'ansible_timeout', 'ansible_ssh_private_key_file', 'ansible_ssh_common_args', 'ansible_ssh_timeout',
    'ansible_ssh_extra_args', 'ansible_password',
}
NAME = re.compile(r'\bansible_[a-z0-9_]+\b')


def uses(root=ROOT):
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob('*')):
            if path.suffix not in ('.yml', '.yaml', '.j2') or not path.is_file():
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if line.lstrip().startswith('#'):
                    continue
                # A path into a collection, and setup's filter of which facts to gather, name no variable.
                line = line.replace('ansible_collections', '')
                if re.match(r'\s*filter:', line):
                    continue
                for name in NAME.findall(line):
                    if name not in NOT_FACTS:
                        yield '%s:%d: %s' % (path.relative_to(root), number, name)


def test_facts_are_read_only_through_ansible_facts():
    found = list(uses())
    assert found == [], ("read facts as ansible_facts['name'] (inject_facts_as_vars is off); a magic or connection "
                         "variable goes in NOT_FACTS: %s" % found)


def test_the_config_and_molecule_turn_injection_off():
    assert re.search(r'^inject_facts_as_vars = False$', (ROOT / 'ansible.cfg').read_text(), re.MULTILINE)
    assert re.search(r'^\s+inject_facts_as_vars: false$', (ROOT / '.config/molecule/config.yml').read_text(),
                     re.MULTILINE)


def test_a_fact_read_as_a_variable_is_found(tmp_path):
    (tmp_path / 'roles').mkdir()
    (tmp_path / 'roles' / 'main.yml').write_text('msg: "{{ ansible_distribution_release }} {{ ansible_host }}"\n'
                                                 '# ansible_kernel in a comment\n')
    assert list(uses(tmp_path)) == ['roles/main.yml:1: ansible_distribution_release']
