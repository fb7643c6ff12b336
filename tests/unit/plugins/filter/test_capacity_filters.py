# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/capacity.py through Ansible's templating, the way a role uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))

# Renders (trusted) templates with Ansible's own Templar, the collection loaded from this checkout,
# in a subprocess so the plugin loader starts clean. One process renders several templates.
_RENDER = r'''
import json, sys
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.errors import AnsibleError
request = json.loads(sys.stdin.read())
templar = Templar(loader=DataLoader(), variables=request['variables'])
answers = []
for template in request['templates']:
    try:
        answers.append({'value': templar.template(trust_as_template(template))})
    except AnsibleError as exc:
        answers.append({'error': str(exc)})
print(json.dumps(answers))
'''

TARGET_GPUS = [
    {'vendor': 'nvidia', 'index': index, 'name': 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition',
     'memory_total_bytes': 102641336320}
    for index in (0, 1)
]


@pytest.fixture(scope='module')
def render(collection_root):
    """Several templates in one Templar process (conftest's render takes one)."""
    def run(*templates, **variables):
        proc = subprocess.run([sys.executable, '-c', _RENDER, collection_root], capture_output=True, text=True,
                              input=json.dumps({'templates': list(templates), 'variables': variables}),
                              timeout=120, check=False, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return run


def test_capacity_plan_72b_on_the_target(render):
    one, two = render("{{ gpus[:1] | homelab.llm_server.capacity_plan('qwen2.5-72b-instruct') }}",
                      "{{ gpus | homelab.llm_server.capacity_plan('qwen2.5-72b-instruct') }}",
                      gpus=TARGET_GPUS)
    assert one['value']['fits'] is False
    assert one['value']['weight_bytes_total'] == 145400000000
    assert one['value']['gpus_needed'] == 2
    assert two['value']['fits'] is True
    assert two['value']['tensor_parallel_size'] == 2
    assert two['value']['kv_cache_tokens'] == 93872
    assert two['value']['decode_tokens_per_s_ceiling'] == 25.1


def test_capacity_plan_keyword_options_and_registered_facts(render):
    answers = render(
        "{{ facts | homelab.llm_server.capacity_plan('qwen3-32b', tensor_parallel_size=2, kv_cache_dtype='fp8') }}",
        "{{ (['2x rtx-pro-6000-blackwell'] | homelab.llm_server.capacity_plan('qwen3-32b', max_model_len=131072,"
        " tensor_parallel_size=1)).fits }}",
        facts={'changed': False, 'ansible_facts': {'gpus': TARGET_GPUS}})
    fp8 = answers[0]['value']
    assert fp8['kv_bytes_per_token'] == 131072
    assert fp8['kv_bytes_per_token_per_gpu'] == 65536
    assert answers[1]['value'] is False


def test_capacity_plan_errors_are_filter_errors(render):
    answers = render("{{ gpus | homelab.llm_server.capacity_plan('qwen3-33b') }}",
                     "{{ gpus | homelab.llm_server.capacity_plan('qwen3-32b', tensor_parallel_size=3) }}",
                     "{{ [{'name': 'NVIDIA L40S'}] | homelab.llm_server.capacity_plan('qwen3-32b') }}",
                     gpus=TARGET_GPUS)
    assert 'capacity_plan: unknown model preset' in answers[0]['error']
    assert 'qwen3-32b' in answers[0]['error']
    assert 'tensor_parallel_size 3 does not work' in answers[1]['error']
    assert 'give its spec by hand' in answers[2]['error']


def test_capacity_report_lines(render):
    answer, = render("{{ gpus | homelab.llm_server.capacity_plan('qwen3-32b')"
                     " | homelab.llm_server.capacity_report_lines }}", gpus=TARGET_GPUS)
    lines = answer['value']
    assert lines[0].startswith('model') and 'Qwen3-32B, 32.8B parameters, bfloat16' in lines[0]
    assert any(line.startswith('KV/token') and '262,144 B for the model, 131,072 B per GPU' in line
               for line in lines)
    assert lines[-1].split() == ['verdict', 'fits']


def test_capacity_report_lines_accepts_the_module_result_and_rejects_other_input(render):
    answers = render("{{ {'plan': gpus | homelab.llm_server.capacity_plan('qwen3-8b')}"
                     " | homelab.llm_server.capacity_report_lines }}",
                     "{{ {'fits': true} | homelab.llm_server.capacity_report_lines }}", gpus=TARGET_GPUS)
    assert answers[0]['value'][2].split()[:2] == ['layout', 'per_gpu']
    assert 'not a capacity_plan result' in answers[1]['error']


def test_training_time_and_table(render):
    answers = render("{{ ['rtx-pro-6000-blackwell'] | homelab.llm_server.training_time('gpt-1.3b') }}",
                     "{{ ['rtx-pro-6000-blackwell'] | homelab.llm_server.training_time(3e9, mfu=0.5) }}",
                     "{{ gpus[:1] | homelab.llm_server.training_table_lines }}",
                     "{{ ['rtx-pro-6000-blackwell'] | homelab.llm_server.training_time('gpt-13b') }}",
                     gpus=TARGET_GPUS)
    one_b = answers[0]['value']
    # 6 x 1.3e9 x 26e9 / (503.8e12 x 0.4) = 1,006,351.7 s
    assert one_b['seconds'] == pytest.approx(1006351.7, abs=0.1)
    assert one_b['duration'] == '11.6 days'
    # 6 x 3e9 x 60e9 / (503.8e12 x 0.5) = 4,287,415.6 s
    assert answers[1]['value']['seconds'] == pytest.approx(4287415.6, abs=0.1)
    table = answers[2]['value']
    assert len(table) == 7
    assert [line.split()[0] for line in table[2:]] == ['gpt-125m', 'gpt-355m', 'gpt-1.3b', 'gpt-3b', 'gpt-7b']
    assert 'training_time: unknown model size' in answers[3]['error']
