# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/vllm.py through Ansible's templating and the ansible command, the way a role uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
# The ansible command beside this interpreter (the venv's), else the one on PATH.
ANSIBLE = os.path.join(os.path.dirname(sys.executable), 'ansible')
if not os.path.exists(ANSIBLE):
    ANSIBLE = 'ansible'


OPTIONS = {
    'max_model_len': 32768,
    'enable_prefix_caching': True,
    'speculative_config': {'method': 'ngram', 'num_speculative_tokens': 5, 'prompt_lookup_max': 4},
    'tensor-parallel-size': 2,
}
ARGV = ['--enable-prefix-caching', '--max-model-len', '32768',
        '--speculative-config', '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}',
        '--tensor-parallel-size', '2']


def test_engine_args_render(render):
    out = render("{{ opts | homelab.llm_server.vllm_engine_args }}", opts=OPTIONS)
    assert out == {'value': ARGV}
    out = render("{{ opts | homelab.llm_server.vllm_engine_args('v0.33.0', ['host', 'port']) }}", opts=OPTIONS)
    assert out == {'value': ARGV}


def test_engine_args_fail_naming_every_key(render):
    out = render("{{ opts | homelab.llm_server.vllm_engine_args(reserved={'port': 'vllm_port'}) }}",
                 opts={'enable_flash_attention': True, 'max_model_length': 4096, 'port': 8000,
                       'max_model_len': 1024})
    message = out['error']
    assert 'vllm_engine_args: 3 problems with the engine arguments for vLLM 0.33.0:' in message
    assert '- enable_flash_attention: vLLM 0.33.0 has no --enable-flash-attention option; ' in message
    assert '- max_model_length: vLLM 0.33.0 has no --max-model-length option; did you mean max_model_len ' \
           '(--max-model-len)?' in message
    assert '- port: --port is set by the role, not by the engine options; set vllm_port instead' in message


def test_engine_args_unknown_version_lists_tables(render):
    out = render("{{ {} | homelab.llm_server.vllm_engine_args('0.4.0') }}")
    assert 'vllm_engine_args: no vLLM CLI table for version 0.4.0; this collection has tables for: ' in out['error']
    assert '0.33.0' in out['error']


def test_engine_args_reserved_must_be_names(render):
    out = render("{{ {} | homelab.llm_server.vllm_engine_args(reserved=3) }}")
    assert 'reserved must be a list of option names' in out['error']


def test_engine_args_errors_for_an_assert(render):
    out = render("{{ opts | homelab.llm_server.vllm_engine_args_errors(none, ['model']) }}",
                 opts={'speculative_decoding': 'true', 'model': 'x', 'max_model_len': 1024})
    errors = out['value']
    assert len(errors) == 2
    assert errors[0].startswith('speculative_decoding: vLLM 0.33.0 has no --speculative-decoding option; ')
    assert 'speculative_config' in errors[0]
    assert errors[1] == "model: --model is set by the role, not by the engine options; use the role's own " \
                        "variable instead"
    assert render("{{ opts | homelab.llm_server.vllm_engine_args_errors }}", opts=OPTIONS) == {'value': []}


def test_engine_args_warnings(render):
    out = render("{{ opts | homelab.llm_server.vllm_engine_args_warnings }}",
                 opts={'log_config_file': '/etc/vllm/log.json', 'max_model_len': 1024})
    assert len(out['value']) == 1
    assert out['value'][0].startswith('log_config_file: deprecated in vLLM 0.33.0: --log-config-file is deprecated')


def test_through_the_ansible_command(tmp_path):
    """`ansible localhost -m debug` with the repository's ansible.cfg, as an operator would run it."""
    extra = tmp_path / 'vars.json'
    extra.write_text(json.dumps({'opts': OPTIONS, 'bad': {'enable_flash_attention': True}}))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_STDOUT_CALLBACK='json',
               ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_NOCOLOR='1')
    ok = subprocess.run([ANSIBLE, 'localhost', '-m', 'debug', '-e', '@%s' % extra,
                         '-a', 'msg={{ opts | homelab.llm_server.vllm_engine_args }}'],
                        capture_output=True, text=True, timeout=120, check=False, cwd=REPO, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    result = json.loads(ok.stdout)['plays'][0]['tasks'][0]['hosts']['localhost']
    assert result['msg'] == ARGV
    bad = subprocess.run([ANSIBLE, 'localhost', '-m', 'debug', '-e', '@%s' % extra,
                          '-a', 'msg={{ bad | homelab.llm_server.vllm_engine_args }}'],
                         capture_output=True, text=True, timeout=120, check=False, cwd=REPO, env=env)
    assert bad.returncode != 0
    result = json.loads(bad.stdout)['plays'][0]['tasks'][0]['hosts']['localhost']
    assert result['failed'] is True
    assert '- enable_flash_attention: vLLM 0.33.0 has no --enable-flash-attention option' in result['msg']
