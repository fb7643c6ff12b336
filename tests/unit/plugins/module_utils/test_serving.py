# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Layouts expanded into engine instances, and argv rendered for systemd."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from ansible.errors import AnsibleFilterError

# The checkout is the collection through .collections/ (see ansible.cfg).
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
sys.path.insert(0, os.path.join(REPO, '.collections'))

# pylint: disable-next=wrong-import-position
from ansible_collections.homelab.llm_server.plugins.filter.serving import systemd_command_line  # noqa: E402
# pylint: disable-next=wrong-import-position
from ansible_collections.homelab.llm_server.plugins.module_utils._serving import (  # noqa: E402
    LayoutError, serving_instances)

QWEN = {'name': 'Qwen/Qwen3-32B'}


def test_tensor_parallel_is_one_instance_over_every_device():
    (instance,) = serving_instances('tensor_parallel', [0, 1], model=QWEN, prefix='vllm')
    assert instance['name'] == 'vllm-qwen-qwen3-32b'
    assert instance['unit'] == 'vllm-qwen-qwen3-32b.service'
    assert instance['devices'] == [0, 1]
    assert instance['port'] == 8001
    assert instance['standby'] is False


def test_per_gpu_is_one_instance_per_device_the_first_active():
    instances = serving_instances('per_gpu', [0, 1], model=QWEN, prefix='vllm', port_base=9000)
    assert [i['name'] for i in instances] == ['vllm-qwen-qwen3-32b-gpu0', 'vllm-qwen-qwen3-32b-gpu1']
    assert [i['port'] for i in instances] == [9000, 9001]
    assert [i['devices'] for i in instances] == [[0], [1]]
    assert [i['standby'] for i in instances] == [False, True]


def test_per_gpu_names_named_devices_by_their_slug():
    instances = serving_instances('per_gpu', ['Vulkan0', 'cpu1'], model={'name': 'tiny'}, prefix='llamacpp')
    assert [i['name'] for i in instances] == ['llamacpp-tiny-vulkan0', 'llamacpp-tiny-cpu1']


def test_per_gpu_models_takes_device_or_gpu():
    models = [{'name': 'qwq-32b', 'gpu': 0}, {'name': 'coder', 'device': 1}]
    instances = serving_instances('per_gpu_models', [0, 1], models=models, prefix='vllm')
    assert [(i['name'], i['devices'], i['port']) for i in instances] == [
        ('vllm-qwq-32b', [0], 8001), ('vllm-coder', [1], 8002)]
    assert instances[1]['model'] is models[1]


@pytest.mark.parametrize('kwargs, message', [
    ({'layout': 'round_robin', 'devices': [0], 'model': QWEN},
     "vllm_layout is 'round_robin': choose one of tensor_parallel, per_gpu, per_gpu_models"),
    ({'layout': 'per_gpu', 'devices': [], 'model': QWEN}, 'no device to serve on'),
    ({'layout': 'tensor_parallel', 'devices': [0], 'model': {}}, 'vllm_model needs `name`'),
    ({'layout': 'per_gpu_models', 'devices': [0, 1], 'models': []}, 'per_gpu_models needs vllm_models'),
    ({'layout': 'per_gpu_models', 'devices': [0, 1], 'models': [{'name': 'a', 'gpu': 2}]},
     r'vllm_models\[0\] \(a\) needs `device` \(or `gpu`\), one of 0, 1, not 2'),
    ({'layout': 'per_gpu_models', 'devices': [0, 1], 'models': [{'name': 'a', 'gpu': 0}, {'name': 'b', 'gpu': 0}]},
     r'vllm_models\[1\] \(b\) and vllm_models\[0\] \(a\) both use device 0'),
    ({'layout': 'per_gpu_models', 'devices': [0, 1], 'models': [{'name': 'a', 'gpu': 0}, {'name': 'a', 'gpu': 1}]},
     'served model name a is used twice'),
])
def test_bad_layouts_name_the_variable(kwargs, message):
    layout = kwargs.pop('layout')
    devices = kwargs.pop('devices')
    with pytest.raises(LayoutError, match=message):
        serving_instances(layout, devices, prefix='vllm', **kwargs)


def _systemd_words(line):
    """How systemd splits an Exec line (quotes and backslash escapes), for words without specifiers."""
    return shlex.split(line.replace('%%', '%').replace('$$', '$'))


def test_systemd_command_line_keeps_json_and_spaces_as_one_word():
    argv = ['/usr/bin/docker', 'run', '--gpus', '"device=0,1"', 'img',
            '--speculative-config', '{"method":"ngram","num_speculative_tokens":4}', 'a b', '50%', '$HOME', '']
    line = systemd_command_line(argv)
    assert '%%' in line and '$$HOME' in line
    assert _systemd_words(line) == argv


def test_systemd_command_line_leaves_plain_words_alone():
    assert systemd_command_line(['/bin/llama-server', '--port', 8101]) == '/bin/llama-server --port 8101'


def test_systemd_command_line_refuses_an_empty_command():
    with pytest.raises(AnsibleFilterError, match='non-empty list'):
        systemd_command_line([])


def test_systemd_parses_the_line_like_the_argv(tmp_path):
    """systemd-analyze, where present, must read back the same words."""
    analyze = subprocess.run(['sh', '-c', 'command -v systemd-analyze'], capture_output=True, text=True, check=False)
    if analyze.returncode != 0:
        pytest.skip('systemd-analyze is not installed')
    argv = ['/bin/echo', '{"a": 1}', 'x y']
    unit = tmp_path / 'probe.service'
    unit.write_text('[Service]\nExecStart=%s\n' % systemd_command_line(argv))
    result = subprocess.run(['systemd-analyze', 'verify', str(unit)], capture_output=True, text=True, check=False)
    assert 'Invalid' not in result.stderr
