# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capacity_plan module run on its own, and through its action plugin in a real ansible-playbook run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils import _capacity, _capacity_tables

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
MODULE = os.path.join(REPO, 'plugins', 'modules', 'capacity_plan.py')
GIB = 2 ** 30

# Qwen3-8B given by hand (the module has no tables on a host).
QWEN3_8B = {'name': 'Qwen3-8B', 'params_total': 8200000000, 'num_layers': 36, 'hidden_size': 4096,
            'num_attention_heads': 32, 'num_key_value_heads': 8, 'head_dim': 128, 'vocab_size': 151936,
            'max_position_embeddings': 40960, 'weight_dtype': 'bfloat16'}
CARD_BY_HAND = {'name': 'RTX PRO 6000 by hand', 'memory_gib': 96, 'memory_bandwidth_gbps': 1792}


@pytest.fixture
def run_module(module_runner):
    return lambda args, **kwargs: module_runner('capacity_plan', args, **kwargs)


def test_module_plans_with_specs_by_hand(run_module):
    rc, result = run_module({'gpus': [CARD_BY_HAND], 'model': QWEN3_8B})
    assert rc == 0, result
    assert result['changed'] is False
    plan = result['plan']
    # 8.2e9 x 2 = 16.4 GB; 0.9 x 96 GiB = 92,771,293,593.6; minus 16.4e9 and 4 GiB (4,294,967,296)
    # = 72,076,326,297 bytes of KV; / (2 x 36 x 8 x 128 x 2 = 147,456 B) = 488,798.4 -> 488,784 in blocks of 16
    assert plan['weight_bytes_total'] == 16400000000
    assert plan['kv_cache_bytes_per_gpu'] == 72076326297
    assert plan['kv_cache_tokens'] == 488784
    assert plan['recommended_layout'] == 'per_gpu'
    assert result['report_lines'][-1].split() == ['verdict', 'fits']


def test_module_without_tables_explains_presets_are_not_there(run_module):
    rc, result = run_module({'gpus': ['rtx-pro-6000-blackwell'], 'model': QWEN3_8B})
    assert rc == 1
    assert result['failed'] is True
    assert 'none (no table loaded)' in result['msg']


def test_module_fail_if_not_fits(run_module):
    small = dict(CARD_BY_HAND, name='small card', memory_gib=16)
    rc, result = run_module({'gpus': [small], 'model': QWEN3_8B})
    assert rc == 0 and result['plan']['fits'] is False
    rc, result = run_module({'gpus': [small], 'model': QWEN3_8B, 'fail_if_not_fits': True})
    assert rc == 1
    assert result['msg'].startswith('Does not fit: the weights need 15.3 GiB (16.4 GB) per GPU')


PLAYBOOK = textwrap.dedent('''\
    - name: Capacity plans on the controller
      hosts: planned
      gather_facts: false
      tasks:
        - name: 72B on the two target cards, as gpu_facts reports them
          homelab.llm_server.capacity_plan:
            gpus:
              - {vendor: nvidia, index: 0, name: NVIDIA RTX PRO 6000 Blackwell Workstation Edition,
                 memory_total_bytes: 102641336320}
              - {vendor: nvidia, index: 1, name: NVIDIA RTX PRO 6000 Blackwell Workstation Edition,
                 memory_total_bytes: 102641336320}
            model: qwen2.5-72b-instruct
          register: two_cards

        - name: 72B on one card does not fit, which is not a failure
          homelab.llm_server.capacity_plan:
            gpus: [rtx-pro-6000-blackwell]
            model: qwen2.5-72b-instruct
          register: one_card

        - name: Unless asked to fail
          homelab.llm_server.capacity_plan:
            gpus: [rtx-pro-6000-blackwell]
            model: qwen2.5-72b-instruct
            fail_if_not_fits: true
          register: must_fit
          ignore_errors: true

        - name: Bad input fails
          homelab.llm_server.capacity_plan:
            gpus: [2x rtx-pro-6000-blackwell]
            model: qwen3-32b
            tensor_parallel_size: 3
          register: bad_tp
          ignore_errors: true

        - name: Per-GPU models in check mode
          homelab.llm_server.capacity_plan:
            gpus: [2x rtx-pro-6000-blackwell]
            model: [qwen3-30b-a3b, qwen3-32b-fp8]
          check_mode: true
          register: per_gpu_models

        - name: Keep the results
          ansible.builtin.copy:
            content: "{{ {'two_cards': two_cards, 'one_card': one_card, 'must_fit': must_fit, 'bad_tp': bad_tp,
                         'per_gpu_models': per_gpu_models} | to_json }}"
            dest: "{{ results_file }}"
            mode: '0600'
          delegate_to: localhost
    ''')


def test_action_plugin_in_a_playbook_never_contacts_the_host(tmp_path):
    (tmp_path / 'site.yml').write_text(PLAYBOOK)
    # The host does not exist and would need ssh: every planning task has to run without a connection.
    (tmp_path / 'hosts.yml').write_text(textwrap.dedent('''\
        all:
          hosts:
            localhost:
              ansible_connection: local
              ansible_python_interpreter: "{{ ansible_playbook_python }}"
          children:
            planned:
              hosts:
                gpu-server.invalid:
                  ansible_connection: ssh
        '''))
    results_file = tmp_path / 'results.json'
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_RETRY_FILES_ENABLED='0')
    env.pop('PYTHONPATH', None)
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', 'hosts.yml',
                           'site.yml', '-e', 'results_file=%s' % results_file],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'unreachable=0' in proc.stdout and 'failed=0' in proc.stdout
    results = json.loads(results_file.read_text())

    two = results['two_cards']
    assert two['changed'] is False
    assert two['plan']['fits'] is True and two['plan']['tensor_parallel_size'] == 2
    assert two['plan']['kv_cache_tokens'] == 93872
    assert any(line.startswith('weights/GPU') and '72.7 GB' in line for line in two['report_lines'])

    one = results['one_card']
    assert not one.get('failed')
    assert one['plan']['fits'] is False and one['plan']['gpus_needed'] == 2

    assert results['must_fit']['failed'] is True
    assert results['must_fit']['msg'].startswith('Does not fit: the weights need 135.4 GiB (145.4 GB)')

    assert results['bad_tp']['failed'] is True
    assert 'Valid sizes here: 1, 2.' in results['bad_tp']['msg']

    per_gpu = results['per_gpu_models']['plan']
    assert per_gpu['recommended_layout'] == 'per_gpu_models'
    assert [sub['model']['key'] for sub in per_gpu['models']] == ['qwen3-30b-a3b', 'qwen3-32b-fp8']


def test_gpu_facts_records_feed_the_planner(run_gpu_facts):
    # What gpu_facts reports for the target through the NVML double goes straight into the plan.
    rc, facts, stderr = run_gpu_facts({'vendors': ['nvidia']}, fixture='target_dual_rtx_pro_6000')
    assert rc == 0, stderr
    gpus = facts['ansible_facts']['gpus']
    result = _capacity.plan(gpus, 'qwen2.5-72b-instruct',
                            tables=_capacity_tables.load_tables(os.path.join(REPO, 'data', 'planner')))
    assert result['gpus_used'] == [0, 1]
    assert result['memory_bytes_per_gpu'] == 102641336320
    assert result['fits'] is True and result['tensor_parallel_size'] == 2
