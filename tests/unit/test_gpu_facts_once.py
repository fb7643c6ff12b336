# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""roles/common's gpu_facts entry point reads the GPUs once per play run and sysfs root: a real
ansible-playbook run on localhost through the NVML test double, including the entry point as the
roles do, counts the reads (the NVML call's task runs, not skipped)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import ansible_collections

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    common_venv_path: {venv}
    common_sysfs_root: {sysfs}
  tasks:
    - name: A first role reads the GPUs
      ansible.builtin.include_role: {{name: homelab.llm_server.common, tasks_from: gpu_facts}}
    - name: A second role reuses that read
      ansible.builtin.include_role: {{name: homelab.llm_server.common, tasks_from: gpu_facts}}
    - name: The driver role reads again
      ansible.builtin.include_role: {{name: homelab.llm_server.common, tasks_from: gpu_facts}}
      vars: {{common_gpu_facts_refresh: true}}
    - name: Another sysfs root is read
      ansible.builtin.include_role: {{name: homelab.llm_server.common, tasks_from: gpu_facts}}
      vars: {{common_sysfs_root: {other}}}
    - name: Back to the first root, read again since the last read was the other
      ansible.builtin.include_role: {{name: homelab.llm_server.common, tasks_from: gpu_facts}}
    - name: And reused once more
      ansible.builtin.include_role: {{name: homelab.llm_server.common, tasks_from: gpu_facts}}
    - name: What the last read found
      ansible.builtin.debug: {{msg: "gpus={{{{ ansible_facts['gpu_count'] }}}}"}}
"""


def test_the_gpus_are_read_once_per_run_and_sysfs_root(tmp_path, nvml_env, collection_root):
    for name in ('sysfs', 'other'):
        (tmp_path / name).mkdir()
    (tmp_path / 'play.yml').write_text(PLAY.format(venv=sys.prefix, sysfs=tmp_path / 'sysfs', other=tmp_path / 'other'))
    (tmp_path / 'ansible.cfg').write_text('[defaults]\n')
    env = nvml_env(fixture='target_dual_rtx_pro_6000')
    bundled = os.path.dirname(list(ansible_collections.__path__)[0])
    env.update(ANSIBLE_CONFIG=str(tmp_path / 'ansible.cfg'),
               ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([collection_root, bundled]),
               ANSIBLE_DISPLAY_SKIPPED_HOSTS='false', ANSIBLE_NOCOLOR='1')
    env.pop('PYTHONPATH', None)
    proc = subprocess.run([os.path.join(sys.prefix, 'bin', 'ansible-playbook'), '-i', 'localhost,', 'play.yml',
                           '-e', 'ansible_python_interpreter=' + sys.executable],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    reads = re.findall(r'^TASK \[homelab\.llm_server\.common : Read GPUs through NVML and sysfs\]', proc.stdout,
                       re.MULTILINE)
    # The first read, the refresh, the other root, the first root again: 4 of 6 includes.
    assert len(reads) == 4, proc.stdout
    assert '"msg": "gpus=2"' in proc.stdout
