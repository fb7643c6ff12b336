# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The installed_packages action reads the package database once per state of dpkg: a real
ansible-playbook run on this (Debian) machine, where the first call reads and the next ones, with
dpkg unchanged, keep the facts in one task; and the decision itself for a dpkg that changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ansible_collections
import pytest

from ansible_collections.homelab.llm_server.plugins.action.installed_packages import READ_AT_FACT, needs_read

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: A first role reads the packages
      homelab.llm_server.installed_packages:
      register: first
    - name: A second role finds them current
      homelab.llm_server.installed_packages:
      register: second
    - name: So does one in check mode
      homelab.llm_server.installed_packages:
      check_mode: true
      register: third
    - name: What the runs said
      ansible.builtin.copy:
        dest: "{{ playbook_dir }}/result.json"
        content: "{{ {'reads': [first.read, second.read, third.read],
                      'changed': [first.changed, second.changed, third.changed],
                      'python3': ansible_facts.packages['python3'] | default([]) | length,
                      'mtime': ansible_facts[read_at]} | to_json }}"
        mode: "0644"
      vars:
        read_at: %s
""" % READ_AT_FACT


@pytest.mark.skipif(not os.path.exists('/var/lib/dpkg/status'), reason='needs a dpkg-based machine')
def test_the_database_is_read_once_while_dpkg_is_unchanged(tmp_path, collection_root):
    (tmp_path / 'play.yml').write_text(PLAY)
    (tmp_path / 'ansible.cfg').write_text('[defaults]\n')
    bundled = os.path.dirname(list(ansible_collections.__path__)[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith(('ANSIBLE_', 'MOLECULE_'))}
    env.update(ANSIBLE_CONFIG=str(tmp_path / 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([collection_root, bundled]), ANSIBLE_NOCOLOR='1')
    env.pop('PYTHONPATH', None)
    proc = subprocess.run([os.path.join(sys.prefix, 'bin', 'ansible-playbook'), '-i', 'localhost,', 'play.yml',
                           '-e', 'ansible_python_interpreter=' + sys.executable],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads((tmp_path / 'result.json').read_text())
    assert result['reads'] == [True, False, False]
    assert result['changed'] == [False, False, False]
    assert result['python3'] >= 1
    assert result['mtime'] == pytest.approx(os.stat('/var/lib/dpkg/status').st_mtime, abs=1e-3)


def test_a_read_is_needed_without_facts_or_after_dpkg_changed():
    facts = {'packages': {'nginx': [{'version': '1.22.1-9'}]}, READ_AT_FACT: 1700000000.25}
    assert not needs_read(facts, 1700000000.25)
    assert needs_read(facts, 1700000042.5)  # an install, a removal or a hold since
    assert needs_read({READ_AT_FACT: 1700000000.25}, 1700000000.25)  # no packages yet
    assert needs_read({'packages': {}}, 1700000000.25)  # read by package_facts itself: state unknown
    assert needs_read(facts, None)  # no status file to compare with
