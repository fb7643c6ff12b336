# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's data files (data/planner): every figure has a source, the figures agree with each
other, and the names NVML and amdgpu report map to the right GPU entry."""

from __future__ import annotations

import glob
import json
import os
import re

import pytest
import yaml

from ansible_collections.homelab.llm_server.plugins.module_utils import _amd_sysfs, _capacity_tables

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
DATA_DIR = os.path.join(REPO, 'data', 'planner')

TABLES = _capacity_tables.load_tables(DATA_DIR)
with open(os.path.join(DATA_DIR, 'models.yml')) as _handle:
    RAW_MODELS = yaml.safe_load(_handle)['models']
GIB = 2 ** 30

# Fields read from config.json; a preset's `source.config` covers them.
CONFIG_FIELDS = {'num_layers', 'hidden_size', 'intermediate_size', 'moe_intermediate_size', 'num_experts',
                 'num_experts_per_tok', 'num_attention_heads', 'num_key_value_heads', 'head_dim',
                 'max_position_embeddings', 'vocab_size', 'tie_word_embeddings'}


def _is_source(text):
    # A URL, or a document named in words (a datasheet, a paper, a derivation that names its inputs).
    return isinstance(text, str) and (re.search(r'https?://\S+', text) or len(text.split()) >= 4)


def _numeric(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@pytest.mark.parametrize('key', sorted(TABLES['gpus']))
def test_every_gpu_figure_has_a_source(key):
    entry = TABLES['gpus'][key]
    assert entry['vendor'] in ('nvidia', 'amd')
    assert entry['name']
    assert entry['match'], 'without a match pattern gpu_facts names never find %s' % key
    for field in ('memory_gib', 'memory_bandwidth_gbps', 'bf16_dense_tflops'):
        assert _numeric(entry[field]) and entry[field] > 0, (key, field)
        assert _is_source(entry['source'].get(field)), '%s: %s has no source' % (key, field)
    for field, value in entry.items():
        if _numeric(value):
            assert field in entry['source'], '%s: %s has no source' % (key, field)


@pytest.mark.parametrize('key', sorted(TABLES['models']))
def test_every_model_figure_has_a_source(key):
    entry = TABLES['models'][key]
    source = entry['source']
    assert entry['hf_repo'].startswith('Qwen/')
    assert _capacity_tables.weight_format(entry['weight_dtype']) == entry['weight_dtype']
    for field, value in entry.items():
        if not (_numeric(value) or isinstance(value, bool)):
            continue
        covering = 'config' if field in CONFIG_FIELDS else field
        assert _is_source(source.get(covering)), '%s: %s has no source (%s)' % (key, field, covering)
    assert source['config'].endswith('/config.json')
    assert 'huggingface.co/%s' % entry['hf_repo'] in source.get('weight_dtype', source['config'])


@pytest.mark.parametrize('key', sorted(k for k, v in RAW_MODELS.items() if 'base' not in v))
def test_config_sources_name_the_model_repo(key):
    entry = RAW_MODELS[key]
    assert entry['source']['config'] == 'https://huggingface.co/%s/blob/main/config.json' % entry['hf_repo']
    assert entry['source']['params_total'].startswith('https://huggingface.co/%s ' % entry['hf_repo'])


@pytest.mark.parametrize('key', sorted(TABLES['training']))
def test_every_training_figure_has_a_source(key):
    entry = TABLES['training'][key]
    for field, value in entry.items():
        if _numeric(value):
            covering = 'params' if field == 'params' else 'config'
            assert _is_source(entry['source'].get(covering)), (key, field)


@pytest.mark.parametrize('key', sorted(TABLES['models']))
def test_model_card_counts_agree_with_the_config(key):
    model = _capacity_tables.resolve_model(key, TABLES['models'])
    # Non-embedding = total - vocab_size x hidden_size x (2 untied matrices): checks vocab, hidden and tying.
    assert model['params_total'] - _capacity_tables.vocab_params(model) == pytest.approx(model['params_non_embedding'],
                                                                                         rel=0.01)
    # The architecture (attention, MLP or experts, embeddings) adds up to the published count.
    total, active = _capacity_tables.estimate_params(model)
    assert total == pytest.approx(model['params_total'], rel=0.01)
    assert active == pytest.approx(model['params_active'], rel=0.025)
    assert model['hidden_size'] % model['num_attention_heads'] == 0 or model['head_dim']
    assert model['num_attention_heads'] % model['num_key_value_heads'] == 0


def test_moe_presets_state_active_parameters():
    for key, model in TABLES['models'].items():
        if model.get('num_experts'):
            assert model['params_active'] < model['params_total'] / 5, key
        else:
            assert 'params_active' not in model, key


def test_variants_inherit_and_override():
    fp8 = TABLES['models']['qwen3-coder-30b-a3b-instruct-fp8']
    assert fp8['base'] == 'qwen3-coder-30b-a3b-instruct'
    assert fp8['max_position_embeddings'] == 262144
    assert fp8['num_layers'] == 48
    assert fp8['source']['weight_dtype'].endswith('Qwen3-Coder-30B-A3B-Instruct-FP8/blob/main/config.json')
    assert fp8['source']['config'].endswith('Qwen3-Coder-30B-A3B-Instruct/blob/main/config.json')


def test_required_presets_are_there():
    for key in ('qwen2.5-7b-instruct', 'qwen2.5-32b-instruct', 'qwen2.5-72b-instruct', 'qwen2.5-coder-32b-instruct',
                'qwq-32b', 'qwen3-8b', 'qwen3-14b', 'qwen3-32b', 'qwen3-30b-a3b', 'qwen3-coder-30b-a3b-instruct',
                'qwen3-235b-a22b'):
        assert key in TABLES['models']
    for key in ('rtx-pro-6000-blackwell', 'rtx-6000-ada', 'rtx-4090', 'rtx-5090', 'a100-80gb-sxm', 'h100-sxm',
                'h200-sxm', 'rx-7900-xtx', 'rx-9070-xt'):
        assert key in TABLES['gpus']
    assert list(TABLES['training']) == ['gpt-125m', 'gpt-355m', 'gpt-1.3b', 'gpt-3b', 'gpt-7b']


# --------------------------------------------------------------------------- name matching

NAMES = [
    # (name as NVML / gpu_facts reports it, memory_total_bytes or None, expected entry or None)
    ('NVIDIA RTX PRO 6000 Blackwell Workstation Edition', 102641336320, 'rtx-pro-6000-blackwell'),
    ('NVIDIA RTX PRO 6000 Blackwell Server Edition', None, 'rtx-pro-6000-blackwell'),
    ('NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition', None, 'rtx-pro-6000-blackwell-max-q'),
    ('NVIDIA RTX 6000 Ada Generation', 51527024640, 'rtx-6000-ada'),
    ('NVIDIA GeForce RTX 4090', 25757220864, 'rtx-4090'),
    ('NVIDIA GeForce RTX 4090 D', None, None),
    ('NVIDIA GeForce RTX 5090', 34190917632, 'rtx-5090'),
    ('NVIDIA A100-SXM4-80GB', 85899345920, 'a100-80gb-sxm'),
    ('NVIDIA A100 80GB PCIe', 85899345920, 'a100-80gb-pcie'),
    ('NVIDIA H100 80GB HBM3', 85520809984, 'h100-sxm'),
    ('NVIDIA H100 PCIe', None, 'h100-pcie'),
    ('NVIDIA H100 NVL', None, 'h100-nvl'),
    ('NVIDIA H200', 150754820096, 'h200-sxm'),
    ('NVIDIA H200 NVL', None, 'h200-nvl'),
    ('AMD Radeon RX 7900 XTX', None, 'rx-7900-xtx'),
    # amdgpu without product_name: Navi 31 is the XTX only with 24 GB
    ('AMD GPU 0x744c', 25753026560, 'rx-7900-xtx'),
    ('AMD GPU 0x744c', 20 * GIB, None),
    ('AMD Radeon RX 9070 XT', None, 'rx-9070-xt'),
    ('NVIDIA L40S', None, None),
]


@pytest.mark.parametrize('name, memory, expected', NAMES)
def test_reported_names_map_to_one_entry(name, memory, expected):
    assert _capacity_tables.match_gpu(name, TABLES['gpus'], memory_bytes=memory) == expected


def test_nvml_fixture_names_resolve():
    names = set()
    for path in glob.glob(os.path.join(REPO, 'tests', 'doubles', 'nvml', 'fixtures', '*.json')):
        with open(path) as handle:
            for device in json.load(handle).get('devices') or []:
                names.add((device['name'], device['memory']['total']))
    assert names, 'the NVML fixtures name no device'
    for name, total in names:
        gpus = _capacity_tables.resolve_gpus([{'vendor': 'nvidia', 'name': name, 'memory_total_bytes': total}],
                                             TABLES['gpus'])
        assert gpus[0]['memory_bytes'] == total
        # h200-sxm: the name and memory a real H200 (700 W, SXM) reported (real_h200_141gb.json).
        assert gpus[0]['key'] in ('rtx-pro-6000-blackwell', 'h100-sxm', 'h200-sxm'), name


def test_amd_sysfs_record_resolves():
    records = _amd_sysfs.collect_amd(os.path.join(REPO, 'tests', 'sysfs', 'amd_rx7900xtx'))
    gpus = _capacity_tables.resolve_gpus(records, TABLES['gpus'])
    assert [gpu['key'] for gpu in gpus] == ['rx-7900-xtx']
    assert gpus[0]['memory_bytes'] == 25753026560


def test_ambiguous_patterns_are_an_error():
    table = {'a': {'match': ['RTX'], 'memory_gib': 24}, 'b': {'match': ['4090'], 'memory_gib': 24}}
    with pytest.raises(_capacity_tables.CapacityError, match='matches several entries'):
        _capacity_tables.match_gpu('NVIDIA GeForce RTX 4090', table)


def test_gpu_figures_tell_the_truth_about_sparsity():
    # Dense BF16 is half the sparse figure vendors headline: H100 SXM 1979 sparse -> 989.5 dense.
    assert TABLES['gpus']['h100-sxm']['bf16_dense_tflops'] == 1979 / 2
    # GeForce runs FP32-accumulate at half rate: the RTX 5090 has fewer SMs than the RTX PRO 6000
    # (170 vs 188) but less than half its dense BF16 throughput.
    assert TABLES['gpus']['rtx-5090']['bf16_dense_tflops'] < TABLES['gpus']['rtx-pro-6000-blackwell'][
        'bf16_dense_tflops'] / 2
