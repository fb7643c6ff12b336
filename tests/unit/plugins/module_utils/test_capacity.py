# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capacity planner (plugins/module_utils/_capacity.py) against hand-computed cases.

Every expected number below is worked out in the comment next to it from the
model's config.json figures and the GPU's datasheet figures, not by calling
the planner's own helpers.
"""

from __future__ import annotations

import os

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils import _capacity, _capacity_tables

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
TABLES = _capacity_tables.load_tables(os.path.join(REPO, 'data', 'planner'))
GIB = 2 ** 30
# What NVML reports for the target's cards (tests/doubles/nvml/fixtures/target_dual_rtx_pro_6000.json).
RTX_PRO_6000_FACT = {'vendor': 'nvidia', 'name': 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition',
                     'memory_total_bytes': 102641336320}
TWO_CARDS = [dict(RTX_PRO_6000_FACT, index=0), dict(RTX_PRO_6000_FACT, index=1)]


def plan(gpus, model, **options):
    return _capacity.plan(gpus, model, tables=TABLES, **options)


# --------------------------------------------------------------------------- Qwen2.5-72B in BF16


def test_72b_bf16_does_not_fit_one_96gb_card():
    result = plan([RTX_PRO_6000_FACT], 'qwen2.5-72b-instruct')
    # 72.7e9 parameters x 2 bytes = 145.4 GB: more than the whole card, before any KV cache.
    assert result['weight_bytes_total'] == 145400000000
    assert result['weight_bytes_per_gpu'] == 145400000000
    assert result['weight_bytes_total'] > RTX_PRO_6000_FACT['memory_total_bytes']
    assert result['fits'] is False
    assert result['weights_fit'] is False
    assert result['smallest_fitting_tensor_parallel_size'] is None
    assert result['recommended_layout'] is None
    assert result['gpus_needed'] == 2
    assert result['kv_cache_tokens'] == 0
    assert result['max_model_len'] is None
    problem = [r for r in result['reasons'] if r.startswith('Does not fit')]
    assert len(problem) == 1
    assert '135.4 GiB (145.4 GB) per GPU' in problem[0]
    assert '2 such GPUs with tensor_parallel_size 2 would fit' in problem[0]
    assert 'quantised checkpoint' in problem[0]


def test_72b_bf16_on_two_96gb_cards_leaves_tens_of_gb_for_kv():
    result = plan(TWO_CARDS, 'qwen2.5-72b-instruct')
    assert result['fits'] is True
    assert result['tensor_parallel_size'] == 2
    assert result['smallest_fitting_tensor_parallel_size'] == 2
    assert result['recommended_layout'] == 'tensor_parallel'
    assert result['weight_bytes_per_gpu'] == 72700000000
    # budget 0.9 x 102,641,336,320 = 92,377,202,688; minus 72.7e9 weights and 4 GiB (4,294,967,296)
    assert result['memory_budget_bytes_per_gpu'] == 92377202688
    assert result['reserve_bytes_per_gpu'] == 4294967296
    assert result['kv_cache_bytes_per_gpu'] == 15382235392
    # 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 327,680 B per token; TP 2 halves the heads on each GPU.
    assert result['kv_bytes_per_token'] == 327680
    assert result['kv_bytes_per_token_per_gpu'] == 163840
    # 15,382,235,392 / 163,840 = 93,885.2 tokens, 93,872 in whole blocks of 16
    assert result['kv_cache_tokens'] == 93872
    # "tens of GB" of KV cache across both cards (about 30.8 GB), not the ~47 GB free VRAM suggests
    assert 10e9 < 2 * result['kv_cache_bytes_per_gpu'] < 40e9
    # max_position_embeddings 32,768 fits; 93,872 / 32,768 = 2.86 sequences
    assert result['max_model_len'] == 32768
    assert result['max_model_len_source'] == 'model'
    assert result['kv_cache_concurrency'] == 2.86
    assert result['max_concurrent_sequences'] == 2
    # bytes read per token: (72.7e9 - 2 x 152,064 x 8,192) x 2 + 152,064 x 8,192 x 2 (lm_head only)
    #   = 140,417,166,848 + 2,491,416,576 = 142,908,583,424; 2 x 1792e9 / that = 25.08 tokens/s
    assert result['decode_bytes_per_token'] == 142908583424
    assert result['decode_tokens_per_s_ceiling'] == 25.1


def test_72b_pipeline_parallel_puts_half_the_layers_and_one_vocab_matrix_on_each_stage():
    result = plan(TWO_CARDS, 'qwen2.5-72b-instruct', tensor_parallel_size=1, pipeline_parallel_size=2)
    # 40 of 80 layers: (72.7e9 - 2,491,416,576) x 2 / 2 = 70,208,583,424, plus one 152,064 x 8,192 matrix
    # in 2 bytes = 2,491,416,576
    assert result['weight_bytes_per_gpu'] == 72700000000
    # 40 layers of KV with all 8 heads: 2 x 40 x 8 x 128 x 2
    assert result['kv_bytes_per_token_per_gpu'] == 163840
    # one stream passes both stages in turn: same ceiling as one GPU reading everything
    assert result['decode_tokens_per_s_ceiling'] == 12.5
    assert result['recommended_layout'] == 'tensor_parallel'


# --------------------------------------------------------------------------- KV cache


def test_qwen3_32b_kv_bytes_per_token():
    result = plan(TWO_CARDS, 'qwen3-32b', tensor_parallel_size=1)
    # 2 x 64 layers x 8 KV heads x 128 head_dim x 2 bytes
    assert result['kv_bytes_per_token'] == 2 * 64 * 8 * 128 * 2 == 262144
    assert result['kv_bytes_per_token_per_gpu'] == 262144


def test_fp8_kv_cache_halves_the_kv_cache():
    bf16 = plan(TWO_CARDS, 'qwen3-32b', tensor_parallel_size=2)
    fp8 = plan(TWO_CARDS, 'qwen3-32b', tensor_parallel_size=2, kv_cache_dtype='fp8')
    assert fp8['kv_bytes_per_token'] == 131072
    assert fp8['kv_bytes_per_token_per_gpu'] == bf16['kv_bytes_per_token_per_gpu'] // 2 == 65536
    assert fp8['kv_cache_bytes_per_gpu'] == bf16['kv_cache_bytes_per_gpu']
    assert abs(fp8['kv_cache_tokens'] - 2 * bf16['kv_cache_tokens']) <= 16


def test_kv_heads_are_replicated_when_fewer_than_gpus():
    # Qwen3-30B-A3B has 4 KV heads; at TP 8 each GPU keeps one whole head, not half of one.
    result = plan(['8x h100-sxm'], 'qwen3-30b-a3b', tensor_parallel_size=8)
    assert result['kv_heads_per_gpu'] == 1
    assert result['kv_bytes_per_token_per_gpu'] == 2 * 48 * 1 * 128 * 2 == 24576
    assert result['kv_bytes_per_token'] == 98304
    assert any('replicated 2x' in reason for reason in result['reasons'])


def test_max_model_len_is_capped_to_what_the_kv_cache_holds():
    # Qwen3-Coder-30B-A3B (262,144 positions) on one 96 GiB card at 0.80:
    # 0.8 x 96 GiB = 82,463,372,083.2; minus 61.0e9 weights and 4 GiB = 17,168,404,787 bytes;
    # / 98,304 B per token = 174,646 -> 174,640 tokens in blocks of 16 -> 174,080 in whole 1024s.
    result = plan(['rtx-pro-6000-blackwell'], 'qwen3-coder-30b-a3b-instruct', gpu_memory_utilization=0.8)
    assert result['weight_bytes_total'] == 61000000000
    assert result['kv_cache_bytes_per_gpu'] == 17168404787
    assert result['kv_cache_tokens'] == 174640
    assert result['max_model_len'] == 174080
    assert result['max_model_len_source'] == 'capped'
    assert result['max_concurrent_sequences'] == 1
    assert result['fits'] is True
    assert any(reason.startswith('max_model_len 174,080 is recommended') for reason in result['reasons'])


def test_given_max_model_len_that_does_not_fit_says_what_to_change():
    result = plan(TWO_CARDS, 'qwen3-32b', tensor_parallel_size=1, max_model_len=131072)
    assert result['weights_fit'] is True
    assert result['fits'] is False
    assert result['max_model_len'] == 131072
    problem = [r for r in result['reasons'] if r.startswith('Does not fit')][0]
    assert 'one sequence of 131,072 tokens needs 32.0 GiB' in problem
    assert 'use tensor_parallel_size 2 (the smallest that fits)' in problem
    assert 'kv_cache_dtype fp8' in problem
    assert result['smallest_fitting_tensor_parallel_size'] == 2
    # and vLLM needs rope scaling past the model's 40,960 positions
    assert any('longer than max_position_embeddings 40,960' in reason for reason in result['reasons'])


def test_max_num_seqs_caps_concurrency():
    result = plan(['rtx-pro-6000-blackwell'], 'qwen3-8b', max_model_len=4096, max_num_seqs=32)
    assert result['kv_cache_concurrency'] > 32
    assert result['max_concurrent_sequences'] == 32


# --------------------------------------------------------------------------- MoE and decode


def test_moe_decode_ceiling_uses_active_parameters():
    result = plan(['rtx-pro-6000-blackwell'], 'qwen3-30b-a3b')
    # all 30.5e9 parameters are resident: 61.0 GB
    assert result['weight_bytes_total'] == 61000000000
    # read per token: (3.3e9 - 2 x 151,936 x 2,048) x 2 + 151,936 x 2,048 x 2
    #   = 5,355,340,288 + 622,329,856 = 5,977,670,144; 1792e9 / that = 299.78
    assert result['decode_bytes_per_token'] == 5977670144
    assert result['decode_tokens_per_s_ceiling'] == 299.8
    # a dense model of the same size would read 61 GB per token: about 29 tokens/s
    assert result['decode_tokens_per_s_ceiling'] > 10 * 1792e9 / 61e9


def test_decode_ceiling_with_context_adds_the_kv_reads():
    result = plan(['rtx-pro-6000-blackwell'], 'qwen3-30b-a3b')
    # 40,960 tokens x 98,304 B = 4,026,531,840 extra bytes per token:
    # 1792e9 / (5,977,670,144 + 4,026,531,840) = 179.1
    assert result['max_model_len'] == 40960
    assert result['decode_tokens_per_s_ceiling_at_max_model_len'] == 179.1


# --------------------------------------------------------------------------- quantised weights


def test_weight_bits_override():
    result = plan(TWO_CARDS, 'qwen2.5-72b-instruct', weight_bits=8)
    # 2,491,416,576 embedding params x 2 + 70,208,583,424 x 1 byte
    assert result['weight_bytes_total'] == 2491416576 * 2 + 70208583424
    assert result['smallest_fitting_tensor_parallel_size'] == 1


# --------------------------------------------------------------------------- tensor parallel sizes


def test_tp_that_does_not_divide_heads_is_rejected():
    # Qwen2.5-7B: 28 attention heads, 4 KV heads
    with pytest.raises(_capacity_tables.CapacityError) as err:
        plan(['4x rtx-4090'], 'qwen2.5-7b-instruct', tensor_parallel_size=3)
    message = str(err.value)
    assert '3 does not divide the 28 attention heads of Qwen2.5-7B-Instruct' in message
    assert 'Valid sizes here: 1, 2, 4.' in message


def test_tp_larger_than_the_gpus_is_rejected():
    with pytest.raises(_capacity_tables.CapacityError, match='needs 4 GPUs but 2 were given'):
        plan(TWO_CARDS, 'qwen3-32b', tensor_parallel_size=4)


# --------------------------------------------------------------------------- layouts


def test_small_model_runs_one_instance_per_gpu():
    result = plan(TWO_CARDS, 'qwen3-8b')
    assert result['tensor_parallel_size'] == 1
    assert result['recommended_layout'] == 'per_gpu'
    assert result['max_concurrent_sequences'] >= 4


def test_model_that_fits_one_card_but_with_little_kv_is_split():
    # Qwen3-32B in BF16 fits one card but holds only ~2 sequences of 40,960 tokens there.
    result = plan(TWO_CARDS, 'qwen3-32b')
    assert result['smallest_fitting_tensor_parallel_size'] == 1
    assert result['tensor_parallel_size'] == 2
    assert result['recommended_layout'] == 'tensor_parallel'
    assert any('fewer than min_concurrent_sequences 4' in reason for reason in result['reasons'])
    relaxed = plan(TWO_CARDS, 'qwen3-32b', min_concurrent_sequences=2)
    assert relaxed['recommended_layout'] == 'per_gpu'


def test_per_gpu_models():
    result = plan(TWO_CARDS, ['qwen3-30b-a3b', 'qwen3-32b'])
    assert result['recommended_layout'] == 'per_gpu_models'
    assert result['fits'] is True
    assert [sub['gpus_used'] for sub in result['models']] == [[0], [1]]
    assert [sub['tensor_parallel_size'] for sub in result['models']] == [1, 1]
    too_big = plan(TWO_CARDS, ['qwen3-8b', 'qwen2.5-72b-instruct'])
    assert too_big['fits'] is False
    assert any(reason.startswith('Does not fit') for reason in too_big['reasons'])
    with pytest.raises(_capacity_tables.CapacityError, match='3 models need 3 GPUs'):
        plan(TWO_CARDS, ['qwen3-8b', 'qwen3-8b', 'qwen3-8b'])


def test_one_instance_never_spans_vendors():
    result = plan([RTX_PRO_6000_FACT, 'rx-7900-xtx'], 'qwen3-8b', tensor_parallel_size=2)
    assert result['fits'] is False
    assert any('cannot span amd and nvidia GPUs' in reason for reason in result['reasons'])


# --------------------------------------------------------------------------- inputs


@pytest.mark.parametrize('options, message', [
    ({'gpu_memory_utilization': 1.5}, 'gpu_memory_utilization is a fraction'),
    ({'kv_cache_dtype': 'int3'}, 'unknown kv_cache_dtype'),
    ({'reserve_gib': -1}, 'reserve_gib must not be negative'),
    ({'max_model_len': 0}, 'max_model_len must be an integer of at least 1'),
    ({'pipeline_parallel_size': 3}, 'pipeline_parallel_size 3 needs at least 3 GPUs'),
])
def test_bad_options_are_rejected(options, message):
    with pytest.raises(_capacity_tables.CapacityError, match=message):
        plan(TWO_CARDS, 'qwen3-8b', **options)


def test_module_without_tables_needs_specs_by_hand():
    with pytest.raises(_capacity_tables.CapacityError, match='no table is loaded here'):
        _capacity.plan([RTX_PRO_6000_FACT], {'params_total': 8e9, 'num_layers': 36, 'hidden_size': 4096,
                                             'num_attention_heads': 32})


# --------------------------------------------------------------------------- report and module


def test_report_lines():
    lines = _capacity.report_lines(plan(TWO_CARDS, 'qwen2.5-72b-instruct'))
    labels = [line.split('  ', 1)[0] for line in lines]
    assert labels == ['model', 'GPUs', 'layout', 'weights/GPU', 'KV/token', 'KV cache/GPU', 'KV tokens',
                      'max_model_len', 'concurrent seqs', 'decode ceiling', 'verdict']
    assert lines[3].endswith('72.7 GB (67.7 GiB); 145.4 GB in total')
    assert lines[8].endswith('2 at 32,768 tokens (2.86x)')
    assert lines[10].endswith('fits')
    value_column = lines[0].index('Qwen2.5')
    assert all(line[value_column - 2:value_column] == '  ' for line in lines)


def test_plan_from_params_fails_only_when_asked():
    params = dict((name, spec.get('default')) for name, spec in _capacity.ARGUMENT_SPEC.items())
    params.update(gpus=[RTX_PRO_6000_FACT], model='qwen2.5-72b-instruct')
    outcome = _capacity.plan_from_params(params, tables=TABLES)
    assert outcome['changed'] is False and 'failed' not in outcome
    assert outcome['plan']['fits'] is False
    params['fail_if_not_fits'] = True
    outcome = _capacity.plan_from_params(params, tables=TABLES)
    assert outcome['failed'] is True
    assert outcome['msg'].startswith('Does not fit: the weights need 135.4 GiB')


# --------------------------------------------------------------------------- vLLM's CPU build

# The tiny Qwen3 that tests/hf_model/make_tiny_qwen.py writes, as its config.json says.
TINY_QWEN3 = {'architectures': ['Qwen3ForCausalLM'], 'hidden_size': 128, 'num_hidden_layers': 2,
              'num_attention_heads': 4, 'num_key_value_heads': 2, 'head_dim': 64, 'intermediate_size': 256,
              'vocab_size': 512, 'tie_word_embeddings': True, 'max_position_embeddings': 2048,
              'torch_dtype': 'bfloat16'}
HOST_24_GIB = {'name': 'CPU', 'vendor': 'cpu', 'memory_bytes': 24 * GIB, 'memory_bandwidth_gbps': 80}


def test_cpu_kv_cache_is_the_space_given_in_blocks_of_128():
    # 2 (K, V) x 2 layers x 2 KV heads x 64 head_dim x 2 bytes = 1,024 bytes a token;
    # 1 GiB / 1,024 = 1,048,576 tokens, a multiple of 128: vLLM 0.32.0's CPU build
    # logs "CPU KV cache size: 1,048,576 tokens" for this model with VLLM_CPU_KVCACHE_SPACE=1.
    result = plan([HOST_24_GIB], TINY_QWEN3, tensor_parallel_size=1, max_model_len=1024, cpu_kv_cache_gib=1)
    assert result['kv_bytes_per_token'] == 1024
    assert result['kv_cache_tokens'] == 1048576
    assert result['kv_cache_bytes_per_gpu'] == GIB
    assert result['fits']
    assert any(r.startswith('CPU: the KV cache is the 1.0 GiB given') for r in result['reasons'])


def test_cpu_kv_cache_rounds_down_to_whole_blocks_of_128():
    # 3 KV heads of 96: 2 x 2 x 3 x 96 x 2 = 2,304 bytes a token; 2^30 / 2,304 = 466,033.7,
    # rounded down to a multiple of 128: 465,920.
    model = dict(TINY_QWEN3, num_attention_heads=6, num_key_value_heads=3, head_dim=96)
    result = plan([HOST_24_GIB], model, tensor_parallel_size=1, max_model_len=1024, cpu_kv_cache_gib=1)
    assert result['kv_cache_tokens'] == 465920


def test_cpu_kv_cache_larger_than_host_memory_does_not_fit():
    # 24 GiB of host memory cannot hold a 32 GiB KV cache.
    result = plan([HOST_24_GIB], TINY_QWEN3, tensor_parallel_size=1, max_model_len=1024, cpu_kv_cache_gib=32)
    assert not result['fits']
    assert not result['weights_fit']


# --------------------------------------------------------------------------- config.json as transformers 5 writes it


def _written_config(name):
    # config.json of the test models as transformers 5 writes it (tests/hf_model/make_tiny_qwen.py).
    import json
    with open(os.path.join(REPO, 'tests', 'hf_model', 'fixtures', name), encoding='utf-8') as handle:
        return json.load(handle)


def test_a_transformers_5_dense_config_plans_from_dtype():
    config = _written_config('qwen3-tiny.config.json')
    assert 'torch_dtype' not in config and config['dtype'] == 'bfloat16'
    result = plan([HOST_24_GIB], config, tensor_parallel_size=1, max_model_len=1024, cpu_kv_cache_gib=1)
    assert result['model']['weight_dtype'] == 'bfloat16'
    assert result['kv_bytes_per_token'] == 1024
    assert result['kv_cache_tokens'] == 1048576


def test_a_transformers_5_moe_config_counts_its_experts():
    # transformers 5 writes num_local_experts where the Hub's Qwen3-MoE configs say num_experts.
    config = _written_config('qwen3-moe-tiny.config.json')
    assert 'num_experts' not in config and config['num_local_experts'] == 4
    model = _capacity_tables.resolve_model(config)
    assert model['moe'] and model['num_experts'] == 4
    # The safetensors file of this model holds 427,904 parameters, 196,608 of them in the
    # experts; 2 of 4 experts active: 329,600. The estimate leaves out the norms.
    assert abs(model['params_total'] - 427904) / 427904 < 0.01
    assert abs(model['params_active'] - 329600) / 329600 < 0.01
    # One KV head: 2 x 2 layers x 1 x 64 x 2 bytes = 512 bytes a token, 2^30 / 512 tokens.
    result = plan([HOST_24_GIB], config, tensor_parallel_size=1, max_model_len=1024, cpu_kv_cache_gib=1)
    assert result['kv_bytes_per_token'] == 512
    assert result['kv_cache_tokens'] == 2097152


def test_a_transformers_5_qwen2_config_derives_head_dim():
    # Qwen2 configs carry no head_dim: 256 hidden / 4 heads = 64; 3 layers, 2 KV heads:
    # 2 x 3 x 2 x 64 x 2 = 1,536 bytes a token; 2^30 / 1,536 = 699,050.7, in blocks of 128: 699,008.
    config = _written_config('qwen2-tiny.config.json')
    assert 'head_dim' not in config
    result = plan([HOST_24_GIB], config, tensor_parallel_size=1, max_model_len=1024, cpu_kv_cache_gib=1)
    assert result['kv_bytes_per_token'] == 1536
    assert result['kv_cache_tokens'] == 699008
