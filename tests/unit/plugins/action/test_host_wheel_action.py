# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host_wheel action in a real ansible-playbook run: the wheel in a folder named after its content,
written once, the same bytes and path on a second call and in check mode, nothing changed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import ansible_collections

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Build the wheel
      homelab.llm_server.host_wheel:
        dest: "{{ playbook_dir }}/cache"
      register: first
    - name: Build it again
      homelab.llm_server.host_wheel:
        dest: "{{ playbook_dir }}/cache"
      register: second
    - name: And in check mode
      homelab.llm_server.host_wheel:
        dest: "{{ playbook_dir }}/cache"
      check_mode: true
      register: third
    - name: What the calls said
      ansible.builtin.copy:
        dest: "{{ playbook_dir }}/result.json"
        content: "{{ [first, second, third] | to_json }}"
        mode: "0644"
"""


def test_the_wheel_is_written_once_in_a_folder_of_its_content(tmp_path, collection_root):
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
    first, second, third = json.loads((tmp_path / 'result.json').read_text())
    assert [first['written'], second['written'], third['written']] == [True, False, False]
    assert not (first['changed'] or second['changed'] or third['changed'])
    assert first['path'] == second['path'] == third['path']
    with open(first['path'], 'rb') as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()
    assert first['path'] == str(tmp_path / 'cache' / digest[:16] / first['file_name'])
    assert first['file_name'] == 'llm_server_host-%s-py3-none-any.whl' % first['version']
    assert 'llm-health' in first['scripts'] and first['sha256'] == digest[:16]
