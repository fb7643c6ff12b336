# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capacity planner's arithmetic (plugins/module_utils/_capacity.py) against hand-computed cases.

Every expected number below is worked out in the comment next to it from the
model's config.json figures and the GPU's datasheet figures, not by calling
the planner's own helpers.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
_spec = importlib.util.spec_from_file_location('_capacity_under_test',
                                               os.path.join(REPO, 'plugins', 'module_utils', '_capacity.py'))
capacity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(capacity)

TABLES = capacity.load_tables(os.path.join(REPO, 'data', 'planner'))
GIB = 2 ** 30
# What NVML reports for the target's cards (tests/nvml_double/fixtures/target_dual_rtx_pro_6000.json).
RTX_PRO_6000_FACT = {'vendor': 'nvidia', 'name': 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition',
                     'memory_total_bytes': 102641336320}
TWO_CARDS = [dict(RTX_PRO_6000_FACT, index=0), dict(RTX_PRO_6000_FACT, index=1)]


def plan(gpus, model, **options):
    return capacity.plan(gpus, model, tables=TABLES, **options)


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


def test_awq_weights_count_scales_and_keep_embeddings_in_16_bits():
    model = capacity.resolve_model('qwen2.5-7b-instruct-awq', TABLES['models'])
    # embeddings + lm_head: 2 x 152,064 x 3,584 = 1,089,994,752 parameters x 2 bytes = 2,179,989,504
    # the rest: 7.61e9 - 1,089,994,752 = 6,520,005,248 x (4 + 20/128) / 8 bits = 3,387,346,476.5
    assert capacity.weight_bytes(model) == pytest.approx(5567335980.5)
    # Qwen/Qwen2.5-7B-Instruct-AWQ is about 5.57 GB of safetensors on Hugging Face
    assert capacity.weight_bytes(model) == pytest.approx(5.57e9, rel=0.01)


def test_fp8_weights_are_about_half():
    model = capacity.resolve_model('qwen3-coder-30b-a3b-instruct-fp8', TABLES['models'])
    # 622,329,856 embedding parameters x 2 + 29,877,670,144 x (8 + 32/16384) / 8 = 31,129,624,209
    assert capacity.weight_bytes(model) == pytest.approx(31129624209.06)
    # the published FP8 checkpoint is about 31.18 GB
    assert capacity.weight_bytes(model) == pytest.approx(31.18e9, rel=0.01)


def test_weight_bits_override():
    result = plan(TWO_CARDS, 'qwen2.5-72b-instruct', weight_bits=8)
    # 2,491,416,576 embedding params x 2 + 70,208,583,424 x 1 byte
    assert result['weight_bytes_total'] == 2491416576 * 2 + 70208583424
    assert result['smallest_fitting_tensor_parallel_size'] == 1


# --------------------------------------------------------------------------- tensor parallel sizes


def test_tp_that_does_not_divide_heads_is_rejected():
    # Qwen2.5-7B: 28 attention heads, 4 KV heads
    with pytest.raises(capacity.CapacityError) as err:
        plan(['4x rtx-4090'], 'qwen2.5-7b-instruct', tensor_parallel_size=3)
    message = str(err.value)
    assert '3 does not divide the 28 attention heads of Qwen2.5-7B-Instruct' in message
    assert 'Valid sizes here: 1, 2, 4.' in message


def test_valid_tp_sizes_follow_the_heads():
    model = capacity.resolve_model('qwen2.5-32b-instruct', TABLES['models'])
    # 40 heads and 8 KV heads: 5 divides 40 but neither divides 8 nor is a multiple of it
    assert capacity.valid_tensor_parallel_sizes(model, 8) == [1, 2, 4, 8]
    moe = capacity.resolve_model('qwen3-235b-a22b', TABLES['models'])
    # 64 heads, 4 KV heads: 8 is a multiple of 4 (replication)
    assert capacity.valid_tensor_parallel_sizes(moe, 8) == [1, 2, 4, 8]


def test_tp_larger_than_the_gpus_is_rejected():
    with pytest.raises(capacity.CapacityError, match='needs 4 GPUs but 2 were given'):
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
    with pytest.raises(capacity.CapacityError, match='3 models need 3 GPUs'):
        plan(TWO_CARDS, ['qwen3-8b', 'qwen3-8b', 'qwen3-8b'])


def test_one_instance_never_spans_vendors():
    result = plan([RTX_PRO_6000_FACT, 'rx-7900-xtx'], 'qwen3-8b', tensor_parallel_size=2)
    assert result['fits'] is False
    assert any('cannot span amd and nvidia GPUs' in reason for reason in result['reasons'])


# --------------------------------------------------------------------------- inputs


def test_gpu_facts_memory_wins_over_the_table():
    gpus = capacity.resolve_gpus([RTX_PRO_6000_FACT, 'rtx-pro-6000-blackwell'], TABLES['gpus'])
    assert [gpu['key'] for gpu in gpus] == ['rtx-pro-6000-blackwell'] * 2
    assert gpus[0]['memory_bytes'] == 102641336320
    assert gpus[1]['memory_bytes'] == 96 * GIB
    assert gpus[0]['memory_bandwidth_gbps'] == 1792


def test_gpu_count_prefix_and_hand_spec():
    gpus = capacity.resolve_gpus(['2x rtx-5090', {'name': 'lab card', 'memory_gib': 48, 'memory_bandwidth_gbps': 864}],
                                 TABLES['gpus'])
    assert [gpu['name'] for gpu in gpus] == ['NVIDIA GeForce RTX 5090'] * 2 + ['lab card']
    assert [gpu['index'] for gpu in gpus] == [0, 1, 2]
    assert gpus[2]['memory_bytes'] == 48 * GIB
    assert gpus[2]['bf16_dense_tflops'] is None


def test_unknown_gpu_says_how_to_give_it_by_hand():
    with pytest.raises(capacity.CapacityError) as err:
        capacity.resolve_gpus([{'name': 'NVIDIA L40S', 'memory_total_bytes': 48 * GIB}], TABLES['gpus'])
    assert "'NVIDIA L40S' is not in the GPU table" in str(err.value)
    assert 'memory_bandwidth_gbps' in str(err.value)
    assert 'data/planner/gpus.yml' in str(err.value)


def test_unknown_model_lists_the_presets():
    with pytest.raises(capacity.CapacityError) as err:
        capacity.resolve_model('qwen3-33b', TABLES['models'])
    assert 'unknown model preset' in str(err.value)
    assert 'qwen3-32b' in str(err.value) and 'qwen2.5-72b-instruct' in str(err.value)


def test_model_by_hf_repo_id_and_overrides():
    model = capacity.resolve_model('Qwen/Qwen3-32B-FP8', TABLES['models'])
    assert model['key'] == 'qwen3-32b-fp8' and model['weight_dtype'] == 'fp8'
    override = capacity.resolve_model({'preset': 'qwen3-32b', 'weight_dtype': 'awq'}, TABLES['models'])
    assert override['weight_dtype'] == 'awq' and override['num_layers'] == 64


def test_model_from_config_json_is_estimated():
    # Qwen3-32B's config.json, without a parameter count
    config = {'architectures': ['Qwen3ForCausalLM'], 'head_dim': 128, 'hidden_size': 5120, 'intermediate_size': 25600,
              'max_position_embeddings': 40960, 'num_attention_heads': 64, 'num_hidden_layers': 64,
              'num_key_value_heads': 8, 'tie_word_embeddings': False, 'torch_dtype': 'bfloat16', 'vocab_size': 151936}
    model = capacity.resolve_model(config)
    # per layer: q, o 5120 x 8192 each, k, v 5120 x 1024 each, MLP 3 x 5120 x 25600 = 503,316,480;
    # x 64 layers + 2 x 151,936 x 5,120 = 32,212,254,720 + 1,555,824,640 = 32,761,446,400 (card: 32.8B)
    assert model['params_total'] == 32761446400
    assert model['params_source'] == 'estimated from the architecture'
    quantised = capacity.resolve_model(dict(config, quantization_config={'quant_method': 'awq', 'bits': 4}))
    assert quantised['weight_dtype'] == 'awq'


@pytest.mark.parametrize('options, message', [
    ({'gpu_memory_utilization': 1.5}, 'gpu_memory_utilization is a fraction'),
    ({'kv_cache_dtype': 'int3'}, 'unknown kv_cache_dtype'),
    ({'reserve_gib': -1}, 'reserve_gib must not be negative'),
    ({'max_model_len': 0}, 'max_model_len must be an integer of at least 1'),
    ({'pipeline_parallel_size': 3}, 'pipeline_parallel_size 3 needs at least 3 GPUs'),
])
def test_bad_options_are_rejected(options, message):
    with pytest.raises(capacity.CapacityError, match=message):
        plan(TWO_CARDS, 'qwen3-8b', **options)


def test_module_without_tables_needs_specs_by_hand():
    with pytest.raises(capacity.CapacityError, match='no table is loaded here'):
        capacity.plan([RTX_PRO_6000_FACT], {'params_total': 8e9, 'num_layers': 36, 'hidden_size': 4096,
                                            'num_attention_heads': 32})


# --------------------------------------------------------------------------- report and training


def test_report_lines():
    lines = capacity.report_lines(plan(TWO_CARDS, 'qwen2.5-72b-instruct'))
    labels = [line.split('  ')[0] for line in lines]
    assert labels == ['model', 'GPUs', 'layout', 'weights/GPU', 'KV/token', 'KV cache/GPU', 'KV tokens',
                      'max_model_len', 'concurrent seqs', 'decode ceiling', 'verdict']
    assert lines[3].endswith('72.7 GB (67.7 GiB); 145.4 GB in total')
    assert lines[8].endswith('2 at 32,768 tokens (2.86x)')
    assert lines[10].endswith('fits')
    value_column = lines[0].index('Qwen2.5')
    assert all(line[value_column - 2:value_column] == '  ' for line in lines)


def test_training_time_1_3b_on_one_card():
    result = capacity.training_time(['rtx-pro-6000-blackwell'], 'gpt-1.3b', tables=TABLES)
    # D = 20 x 1.3e9 = 26e9 tokens; 6 x 1.3e9 x 26e9 = 2.028e20 FLOPs
    # 503.8 TFLOPS x 0.4 = 201.52 TFLOPS -> 1,006,351.7 s = 279.54 h = 11.648 days
    assert result['tokens'] == 26000000000
    assert result['flops'] == pytest.approx(2.028e20)
    assert result['seconds'] == pytest.approx(1006351.7, abs=0.1)
    assert result['hours'] == 279.54
    assert result['days'] == 11.648
    assert result['duration'] == '11.6 days'
    # 16 bytes per parameter: 20.8 GB of training state fits the card
    assert result['training_state_bytes'] == 20800000000
    assert result['fits_memory'] is True


def test_training_time_options():
    result = capacity.training_time(['2x rtx-pro-6000-blackwell'], 7e9, tokens=1e12, mfu=0.5, tables=TABLES)
    # 6 x 7e9 x 1e12 = 4.2e22 FLOPs at 2 x 503.8 x 0.5 = 503.8 TFLOPS -> 83,366,415 s
    assert result['seconds'] == pytest.approx(4.2e22 / 503.8e12, rel=1e-9)
    assert result['num_gpus'] == 2
    # 112 GB of state over two cards: 56 GB each fits
    assert result['training_state_bytes_per_gpu'] == 56000000000
    assert result['fits_memory'] is True


def test_training_table_reproduces_one_card_table():
    rows = capacity.training_table(['rtx-pro-6000-blackwell'], tables=TABLES)
    assert [row['model'] for row in rows] == ['gpt-125m', 'gpt-355m', 'gpt-1.3b', 'gpt-3b', 'gpt-7b']
    # 125M: 6 x 125e6 x 2.5e9 / 201.52e12 = 9,304 s = 2.6 h; 7B: 5.88e21 / 201.52e12 = 337.7 days
    assert [row['duration'] for row in rows] == ['2.6 h', '20.8 h', '11.6 days', '62.0 days', '337.7 days']
    # 7B needs 112 GB of training state: more than one 96 GiB card
    assert [row['fits_memory'] for row in rows] == [True, True, True, True, False]
    lines = capacity.training_table_lines(rows)
    assert lines[0].startswith('Training from scratch on 1 x NVIDIA RTX PRO 6000 Blackwell')
    assert '503.8 TFLOPS dense BF16 per GPU at 40% MFU' in lines[0]
    assert lines[1].split()[:5] == ['model', 'params', 'tokens', 'FLOPs', 'time']
    assert lines[-1].split()[:5] == ['gpt-7b', '7B', '140B', '5.88e+21', '337.7']
    assert lines[-1].endswith('112.0 GB (does not fit)')


def test_plan_from_params_fails_only_when_asked():
    params = dict((name, spec.get('default')) for name, spec in capacity.ARGUMENT_SPEC.items())
    params.update(gpus=[RTX_PRO_6000_FACT], model='qwen2.5-72b-instruct')
    outcome = capacity.plan_from_params(params, tables=TABLES)
    assert outcome['changed'] is False and 'failed' not in outcome
    assert outcome['plan']['fits'] is False
    params['fail_if_not_fits'] = True
    outcome = capacity.plan_from_params(params, tables=TABLES)
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


def test_a_misspelt_preset_names_the_closest_known_ones():
    errors = capacity.model_errors({'preset': 'qwen3-23b'}, TABLES['models'])
    assert len(errors) == 1
    assert "unknown model preset 'qwen3-23b'; closest known presets: qwen3-32b" in errors[0]
    assert 'known presets: qwen2.5-32b-instruct' in errors[0]


def test_an_unknown_repo_id_is_an_error_and_a_known_one_is_not():
    assert capacity.model_errors('Qwen/Qwen9-999B', TABLES['models'])
    assert capacity.model_errors('Qwen/Qwen3-32B', TABLES['models']) == []
    assert capacity.model_errors('qwen3-30b-a3b', TABLES['models']) == []


def test_a_spec_the_planner_cannot_read_says_which_key_is_missing():
    errors = capacity.model_errors({'name': 'mine', 'hidden_size': 128}, TABLES['models'])
    assert errors == ['model mine: num_layers is missing (config.json has it; num_layers is num_hidden_layers)']


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
    model = capacity.resolve_model(config)
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
