# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's GPU and model tables (plugins/module_utils/_capacity_tables.py): GPUs and models resolved
from gpu_facts records, presets, repo ids and config.json, and the errors that say what to give instead.

Every expected number below is worked out in the comment next to it from the
model's config.json figures and the GPU's datasheet figures, not by calling
the planner's own helpers.
"""

from __future__ import annotations

import os

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils import _capacity_tables

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
TABLES = _capacity_tables.load_tables(os.path.join(REPO, 'data', 'planner'))
GIB = 2 ** 30
# What NVML reports for the target's cards (tests/doubles/nvml/fixtures/target_dual_rtx_pro_6000.json).
RTX_PRO_6000_FACT = {'vendor': 'nvidia', 'name': 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition',
                     'memory_total_bytes': 102641336320}


# --------------------------------------------------------------------------- GPUs


def test_gpu_facts_memory_wins_over_the_table():
    gpus = _capacity_tables.resolve_gpus([RTX_PRO_6000_FACT, 'rtx-pro-6000-blackwell'], TABLES['gpus'])
    assert [gpu['key'] for gpu in gpus] == ['rtx-pro-6000-blackwell'] * 2
    assert gpus[0]['memory_bytes'] == 102641336320
    assert gpus[1]['memory_bytes'] == 96 * GIB
    assert gpus[0]['memory_bandwidth_gbps'] == 1792


def test_gpu_count_prefix_and_hand_spec():
    gpus = _capacity_tables.resolve_gpus(['2x rtx-5090', {'name': 'lab card', 'memory_gib': 48, 'memory_bandwidth_gbps': 864}],
                                         TABLES['gpus'])
    assert [gpu['name'] for gpu in gpus] == ['NVIDIA GeForce RTX 5090'] * 2 + ['lab card']
    assert [gpu['index'] for gpu in gpus] == [0, 1, 2]
    assert gpus[2]['memory_bytes'] == 48 * GIB
    assert gpus[2]['bf16_dense_tflops'] is None


def test_unknown_gpu_says_how_to_give_it_by_hand():
    with pytest.raises(_capacity_tables.CapacityError) as err:
        _capacity_tables.resolve_gpus([{'name': 'NVIDIA L40S', 'memory_total_bytes': 48 * GIB}], TABLES['gpus'])
    assert "'NVIDIA L40S' is not in the GPU table" in str(err.value)
    assert 'memory_bandwidth_gbps' in str(err.value)
    assert 'data/planner/gpus.yml' in str(err.value)


# --------------------------------------------------------------------------- models


def test_unknown_model_lists_the_presets():
    with pytest.raises(_capacity_tables.CapacityError) as err:
        _capacity_tables.resolve_model('qwen3-33b', TABLES['models'])
    assert 'unknown model preset' in str(err.value)
    assert 'qwen3-32b' in str(err.value) and 'qwen2.5-72b-instruct' in str(err.value)


def test_model_by_hf_repo_id_and_overrides():
    model = _capacity_tables.resolve_model('Qwen/Qwen3-32B-FP8', TABLES['models'])
    assert model['key'] == 'qwen3-32b-fp8' and model['weight_dtype'] == 'fp8'
    override = _capacity_tables.resolve_model({'preset': 'qwen3-32b', 'weight_dtype': 'awq'}, TABLES['models'])
    assert override['weight_dtype'] == 'awq' and override['num_layers'] == 64


def test_model_from_config_json_is_estimated():
    # Qwen3-32B's config.json, without a parameter count
    config = {'architectures': ['Qwen3ForCausalLM'], 'head_dim': 128, 'hidden_size': 5120, 'intermediate_size': 25600,
              'max_position_embeddings': 40960, 'num_attention_heads': 64, 'num_hidden_layers': 64,
              'num_key_value_heads': 8, 'tie_word_embeddings': False, 'torch_dtype': 'bfloat16', 'vocab_size': 151936}
    model = _capacity_tables.resolve_model(config)
    # per layer: q, o 5120 x 8192 each, k, v 5120 x 1024 each, MLP 3 x 5120 x 25600 = 503,316,480;
    # x 64 layers + 2 x 151,936 x 5,120 = 32,212,254,720 + 1,555,824,640 = 32,761,446,400 (card: 32.8B)
    assert model['params_total'] == 32761446400
    assert model['params_source'] == 'estimated from the architecture'
    quantised = _capacity_tables.resolve_model(dict(config, quantization_config={'quant_method': 'awq', 'bits': 4}))
    assert quantised['weight_dtype'] == 'awq'


def test_a_misspelt_preset_names_the_closest_known_ones():
    errors = _capacity_tables.model_errors({'preset': 'qwen3-23b'}, TABLES['models'])
    assert len(errors) == 1
    assert "unknown model preset 'qwen3-23b'; closest known presets: qwen3-32b" in errors[0]
    assert 'known presets: qwen2.5-32b-instruct' in errors[0]


def test_an_unknown_repo_id_is_an_error_and_a_known_one_is_not():
    assert _capacity_tables.model_errors('Qwen/Qwen9-999B', TABLES['models'])
    assert _capacity_tables.model_errors('Qwen/Qwen3-32B', TABLES['models']) == []
    assert _capacity_tables.model_errors('qwen3-30b-a3b', TABLES['models']) == []


def test_a_spec_the_planner_cannot_read_says_which_key_is_missing():
    errors = _capacity_tables.model_errors({'name': 'mine', 'hidden_size': 128}, TABLES['models'])
    assert errors == ['model mine: num_layers is missing (config.json has it; num_layers is num_hidden_layers)']
