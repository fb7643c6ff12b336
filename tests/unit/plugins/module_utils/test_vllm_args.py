# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_vllm_args.py against the committed vLLM CLI table."""

from __future__ import annotations

import copy
import importlib.util
import json
import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
TABLE_DIR = os.path.join(REPO, 'data', 'vllm')
PINNED = '0.33.0'
_spec = importlib.util.spec_from_file_location('_vllm_args_under_test',
                                               os.path.join(REPO, 'plugins', 'module_utils', '_vllm_args.py'))
vllm_args = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vllm_args)


@pytest.fixture(scope='module')
def table():
    return vllm_args.load_table(TABLE_DIR, PINNED)


def render(options, table, reserved=None):
    return vllm_args.render_engine_args(options, table, reserved)


def errors(options, table, reserved=None):
    return vllm_args.validate_engine_args(options, table, reserved)


def single_error(options, table, reserved=None):
    found = errors(options, table, reserved)
    assert len(found) == 1, found
    return found[0]


# --- the table itself --------------------------------------------------------

def test_table_is_the_pinned_release_from_the_real_parser(table):
    assert table['vllm_version'] == PINNED
    assert table['image'] == 'vllm/vllm-openai:v' + PINNED
    assert table['generated_by'].startswith('argparse:')
    assert table['generated_by'].endswith('renderings parsed back by that parser')
    assert table['flag_count'] == len(table['options']) > 300
    assert table['positionals'] == ['model_tag']


def test_table_holds_the_flags_the_role_uses(table):
    flags = {option['flag'] for option in table['options']}
    for flag in ('--max-model-len', '--gpu-memory-utilization', '--speculative-config', '--kv-cache-dtype',
                 '--enable-prefix-caching', '--served-model-name', '--tensor-parallel-size', '--host', '--port'):
        assert flag in flags
    every_name = set()
    for option in table['options']:
        every_name.update([option['flag'], option.get('negative_flag')] + option['aliases']
                          + option['negative_aliases'])
    for myth in ('--enable-flash-attention', '--speculative-decoding', '--use-v2-block-manager',
                 '--speculative-model', '--num-speculative-tokens', '--swap-space'):
        assert myth not in every_name


def test_table_names_are_unique_and_kinds_consistent(table):
    seen = set()
    for option in table['options']:
        names = [option['flag']] + option['aliases'] + option['negative_aliases']
        names += [option['negative_flag']] if option['negative_flag'] else []
        assert not seen.intersection(names), names
        seen.update(names)
        assert option['takes_value'] == (option['kind'] not in ('bool', 'store_true'))
        assert bool(option['negative_flag']) == (option['kind'] == 'bool')
        assert (option['choices'] is not None) == (option['kind'] == 'choices')


def test_table_kinds_of_well_known_flags(table):
    by_flag = {option['flag']: option for option in table['options']}
    assert by_flag['--max-model-len']['value_type'] == 'int_or_auto'
    assert by_flag['--enable-prefix-caching']['negative_flag'] == '--disable-prefix-caching'
    assert by_flag['--enforce-eager']['negative_flag'] == '--no-enforce-eager'
    assert by_flag['--speculative-config']['kind'] == 'json'
    assert by_flag['--speculative-config']['aliases'] == ['-sc']
    assert 'fp8_e4m3' in by_flag['--kv-cache-dtype']['suggested_values']
    assert by_flag['--served-model-name']['nargs'] == '+'
    assert by_flag['--dtype']['choices'] == ['auto', 'bfloat16', 'float', 'float16', 'float32', 'half']
    assert by_flag['--headless']['kind'] == 'store_true'
    assert by_flag['--tensor-parallel-size']['aliases'] == ['-tp']
    assert '--device-memory-utilization' in by_flag['--gpu-memory-utilization']['aliases']
    assert by_flag['--log-config-file']['deprecated'].startswith('--log-config-file is deprecated')


def test_every_myth_is_absent_and_points_to_real_options(table):
    index_names = set()
    for option in table['options']:
        index_names.update(n.lstrip('-').replace('-', '_') for n in [option['flag']] + option['aliases'])
    for key, (advice, targets) in vllm_args.KNOWN_MYTHS.items():
        assert key not in index_names, '%s is a real option in %s' % (key, PINNED)
        assert advice
        for target in targets:
            assert target in index_names, '%s points to %s, missing in %s' % (key, target, PINNED)


# --- loading -----------------------------------------------------------------

def test_unknown_version_lists_the_tables():
    with pytest.raises(ValueError, match=r'no vLLM CLI table for version 0\.9\.0; this collection has tables '
                                         r'for: .*0\.33\.0'):
        vllm_args.load_table(TABLE_DIR, '0.9.0')


def test_version_with_v_prefix_and_default_newest(tmp_path, table):
    assert vllm_args.load_table(TABLE_DIR, 'v0.33.0')['vllm_version'] == PINNED
    older = copy.deepcopy(table)
    older['vllm_version'] = '0.9.2'
    for version, content in (('0.9.2', older), ('0.33.0', table)):
        (tmp_path / ('cli-%s.json' % version)).write_text(json.dumps(content))
    # 0.33 is newer than 0.9 (numeric, not text order).
    assert vllm_args.available_versions(str(tmp_path)) == ['0.9.2', '0.33.0']
    assert vllm_args.load_table(str(tmp_path))['vllm_version'] == '0.33.0'


def test_malformed_table_is_refused(tmp_path):
    malformed = {'vllm_version': '1.0.0', 'generated_by': 'x', 'options': [{'flag': '--x'}]}
    (tmp_path / 'cli-1.0.0.json').write_text(json.dumps(malformed))
    with pytest.raises(ValueError, match='malformed option'):
        vllm_args.load_table(str(tmp_path), '1.0.0')
    with pytest.raises(ValueError, match='no vLLM CLI tables'):
        vllm_args.load_table(str(tmp_path / 'missing'))


# --- rendering -----------------------------------------------------------------

def test_render_the_issue_example(table):
    options = {
        'max_model_len': 32768,
        'enable_prefix_caching': True,
        'speculative_config': {'method': 'ngram', 'num_speculative_tokens': 5, 'prompt_lookup_max': 4},
        'tensor-parallel-size': 2,
    }
    assert render(options, table) == [
        '--enable-prefix-caching',
        '--max-model-len', '32768',
        '--speculative-config', '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}',
        '--tensor-parallel-size', '2',
    ]


@pytest.mark.parametrize('options, argv', [
    ({'enable_prefix_caching': False}, ['--disable-prefix-caching']),
    ({'disable_prefix_caching': True}, ['--disable-prefix-caching']),
    ({'disable_prefix_caching': False}, ['--enable-prefix-caching']),
    ({'no_enable_prefix_caching': True}, ['--disable-prefix-caching']),
    ({'enforce_eager': True}, ['--enforce-eager']),
    ({'enforce_eager': False}, ['--no-enforce-eager']),
    ({'enforce_eager': 'false'}, ['--no-enforce-eager']),
    ({'headless': True}, ['--headless']),
    ({'headless': False}, []),
    ({'hf_token': True}, ['--hf-token']),
    ({'hf_token': 'hf_abc'}, ['--hf-token', 'hf_abc']),
])
def test_render_switches(table, options, argv):
    assert render(options, table) == argv


@pytest.mark.parametrize('options, argv', [
    ({'tp': 2}, ['--tensor-parallel-size', '2']),
    ({'-tp': '2'}, ['--tensor-parallel-size', '2']),
    ({'--max-model-len': 4096.0}, ['--max-model-len', '4096']),
    ({'device_memory_utilization': 0.9}, ['--gpu-memory-utilization', '0.9']),
    ({'gpu_memory_utilization': '0.95'}, ['--gpu-memory-utilization', '0.95']),
    ({'max_model_len': '32k'}, ['--max-model-len', '32k']),
    ({'max_model_len': 'auto'}, ['--max-model-len', 'auto']),
    ({'max_model_len': -1}, ['--max-model-len', '-1']),
    ({'max_num_batched_tokens': '25.6k'}, ['--max-num-batched-tokens', '25.6k']),
    ({'max_num_batched_tokens': '8K'}, ['--max-num-batched-tokens', '8K']),
    ({'served_model_name': ['qwen', 'default']}, ['--served-model-name', 'qwen', 'default']),
    ({'served_model_name': 'qwen'}, ['--served-model-name', 'qwen']),
    ({'middleware': ['a.b', 'c.d']}, ['--middleware', 'a.b', '--middleware', 'c.d']),
    ({'device_ids': [0, 1]}, ['--device-ids', '0,1']),
    ({'dtype': 'bfloat16'}, ['--dtype', 'bfloat16']),
    ({'max_lora_rank': '64'}, ['--max-lora-rank', '64']),
    ({'moe_backend': 'TRITON'}, ['--moe-backend', 'TRITON']),
    ({'kv_cache_dtype': 'fp8_e4m3'}, ['--kv-cache-dtype', 'fp8_e4m3']),
    ({'compilation_config': '{"mode": 3}'}, ['--compilation-config', '{"mode": 3}']),
    ({'allowed_origins': ['https://a.example']}, ['--allowed-origins', '["https://a.example"]']),
    ({'hf_overrides': {'rope_theta': 1000000, 'max_position_embeddings': 131072}},
     ['--hf-overrides', '{"max_position_embeddings":131072,"rope_theta":1000000}']),
    ({'pt_load_map_location': 'cuda:0'}, ['--pt-load-map-location', 'cuda:0']),
    ({'chat_template': '-weird'}, ['--chat-template=-weird']),
    ({'max_model_len': None, 'enable_prefix_caching': None}, []),
])
def test_render_values(table, options, argv):
    assert render(options, table) == argv


def test_render_orders_by_flag_whatever_the_dict_order(table):
    options = {'tensor_parallel_size': 2, 'max_model_len': 8192, 'enable_prefix_caching': True}
    reordered = dict(reversed(list(options.items())))
    assert render(options, table) == render(reordered, table) == [
        '--enable-prefix-caching', '--max-model-len', '8192', '--tensor-parallel-size', '2']


def test_render_raises_with_every_error(table):
    with pytest.raises(vllm_args.EngineArgsError) as caught:
        render({'enable_flash_attention': True, 'max_model_len': 'lots', 'max_model_len_x': 1}, table)
    assert len(caught.value.errors) == 3
    assert isinstance(caught.value, ValueError)


# --- validation ----------------------------------------------------------------

def test_valid_options_have_no_errors(table):
    assert errors({'max_model_len': 32768, 'gpu_memory_utilization': 0.92, 'kv_cache_dtype': 'fp8',
                   'speculative_config': {'method': 'eagle3', 'model': 'x/y', 'num_speculative_tokens': 3}},
                  table) == []
    assert errors({}, table) == [] and errors(None, table) == []


def test_flash_attention_myth_points_to_the_backend_option(table):
    message = single_error({'enable_flash_attention': True}, table)
    assert message.startswith('enable_flash_attention: vLLM 0.33.0 has no --enable-flash-attention option; ')
    assert 'attention_backend: FLASH_ATTN' in message


@pytest.mark.parametrize('key, value', [('speculative_decoding', 'true'), ('speculative-decoding', True),
                                        ('enable_speculative_decoding', True)])
def test_speculative_decoding_myth_gives_the_json_option(table, key, value):
    message = single_error({key: value}, table)
    assert message.startswith(key + ': ')
    assert 'speculative_config: {method: ngram, num_speculative_tokens: 5, prompt_lookup_max: 4}' in message
    assert '--speculative-config \'{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}\'' in message
    # The example in the advice renders to what it claims.
    example = {'speculative_config': {'method': 'ngram', 'num_speculative_tokens': 5, 'prompt_lookup_max': 4}}
    assert render(example, table)[1] == '{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}'


@pytest.mark.parametrize('key, expected', [
    ('speculative_model', '"model" key of speculative_config'),
    ('num_speculative_tokens', '"num_speculative_tokens" key of speculative_config'),
    ('ngram_prompt_lookup_max', '"prompt_lookup_max" key of speculative_config'),
    ('use_v2_block_manager', 'delete the key'),
    ('worker_use_ray', 'distributed_executor_backend: ray'),
    ('guided_decoding_backend', 'structured_outputs_config: {backend: xgrammar}'),
    ('task', 'runner: pooling'),
    ('swap_space', 'kv_offloading_size'),
    ('max_seq_len_to_capture', 'enforce_eager: true'),
])
def test_removed_flags_give_their_replacement(table, key, expected):
    message = single_error({key: 1}, table)
    assert message.startswith('%s: vLLM 0.33.0 has no --%s option; ' % (key, key.replace('_', '-')))
    assert expected in message


def test_myth_notes_a_replacement_the_table_lacks(table):
    trimmed = dict(table, options=[o for o in table['options'] if o['flag'] != '--speculative-config'])
    message = single_error({'speculative_decoding': True}, trimmed)
    assert message.endswith('(note: --speculative-config not in vLLM 0.33.0 either)')


@pytest.mark.parametrize('key, suggestion', [
    ('max_model_length', 'did you mean max_model_len (--max-model-len)?'),
    ('gpu_mem_util', 'did you mean gpu_memory_utilization (--gpu-memory-utilization)?'),
    ('max-num-seq', 'did you mean max_num_seqs (--max-num-seqs)?'),
    ('served_model_names', 'did you mean served_model_name (--served-model-name)?'),
])
def test_typo_gives_the_close_spelling(table, key, suggestion):
    message = single_error({key: 1}, table)
    assert message == '%s: vLLM 0.33.0 has no --%s option; %s' % (key, key.replace('_', '-'), suggestion)


def test_unknown_without_close_spelling_says_where_to_look(table):
    message = single_error({'frobnicate_widgets': 1}, table)
    assert message.endswith('`vllm serve --help=all` in the vllm/vllm-openai:v0.33.0 image lists the options')


@pytest.mark.parametrize('reserved', [['host', 'port', 'model', 'served_model_name'],
                                      ('--host', '--port', '--model', '--served-model-name'),
                                      {'host': 'vllm_host', 'port': 'vllm_port', 'model': 'vllm_model',
                                       'served-model-name': 'vllm_served_model_name'}])
def test_reserved_keys_are_rejected(table, reserved):
    found = errors({'port': 8000, 'served_model_name': 'x', 'max_model_len': 1024}, table, reserved)
    assert len(found) == 2
    assert found[0].startswith('port: --port is set by the role, not by the engine options; ')
    assert found[1].startswith('served_model_name: --served-model-name is set by the role')
    if isinstance(reserved, dict):
        assert found[0].endswith('set vllm_port instead')
    else:
        assert found[0].endswith("use the role's own variable instead")


def test_reserved_covers_aliases_and_null_is_harmless(table):
    assert single_error({'tp': 4}, table, ['tensor_parallel_size']).startswith(
        'tp: --tensor-parallel-size is set by the role')
    assert errors({'port': None}, table, ['port']) == []
    assert errors({'port': 8000}, table) == []


def test_model_positional_is_refused(table):
    assert single_error({'model_tag': 'Qwen/Qwen3-8B'}, table).startswith(
        'model_tag: the model is the positional argument of vllm serve')


@pytest.mark.parametrize('options, expected', [
    ({'tensor_parallel_size': 'two'}, 'tensor_parallel_size: --tensor-parallel-size takes an integer, got \'two\''),
    ({'tensor_parallel_size': 2.5}, 'tensor_parallel_size: --tensor-parallel-size takes an integer, got 2.5'),
    ({'tensor_parallel_size': True}, 'tensor_parallel_size: --tensor-parallel-size takes an integer, not the '
                                     'boolean true'),
    ({'max_model_len': True}, 'max_model_len: --max-model-len takes an integer (or 32k, 32K, or auto/-1), not '
                              'the boolean true'),
    ({'max_num_batched_tokens': '8.5K'}, 'max_num_batched_tokens: --max-num-batched-tokens takes an integer '
                                         '(or 25.6k, 32k, 32K), got \'8.5K\''),
    ({'gpu_memory_utilization': 'most'}, 'gpu_memory_utilization: --gpu-memory-utilization takes a number, got '
                                         '\'most\''),
    ({'dtype': 'bf16'}, 'dtype: --dtype takes one of auto, bfloat16, float, float16, float32, half, got \'bf16\'; '
                        'did you mean \'bfloat16\'?'),
    ({'max_lora_rank': 65}, 'max_lora_rank: --max-lora-rank takes one of 1, 8, 16, 32, 64, 128, 256, 320, 512, '
                            'got \'65\''),
    ({'enable_prefix_caching': 'maybe'}, 'enable_prefix_caching: --enable-prefix-caching is an on/off switch: give '
                                         'true or false, not \'maybe\''),
    ({'speculative_config': True}, 'speculative_config: --speculative-config takes JSON: write a dict, not the '
                                   'boolean true'),
    ({'max_model_len': [1, 2]}, 'max_model_len: --max-model-len takes one value, not a list'),
    ({'served_model_name': []}, 'served_model_name: --served-model-name needs at least one value; leave the key '
                                'out (or null) for vLLM\'s default'),
    ({'revision': {'a': 1}}, 'revision: --revision takes a string, not a dict'),
])
def test_wrong_kind_of_value(table, options, expected):
    assert errors(options, table) == [expected]


def test_json_string_must_be_json(table):
    message = single_error({'compilation_config': '{mode: 3}'}, table)
    assert message.startswith('compilation_config: --compilation-config takes JSON (write a dict or a list), and '
                              'the string is not valid JSON')


def test_same_option_twice(table):
    assert errors({'enable_prefix_caching': True, 'disable-prefix-caching': True}, table) == [
        'disable-prefix-caching: --enable-prefix-caching is already set by enable_prefix_caching; keep one of the '
        'two keys']
    assert len(errors({'tp': 2, 'tensor_parallel_size': 2}, table)) == 1


def test_dotted_keys_and_odd_input(table):
    assert errors({'compilation_config.mode': 3}, table) == [
        'compilation_config.mode: write nested settings as a dict under compilation_config, e.g. '
        'compilation_config: {mode: ...}']
    assert errors(['--max-model-len', '1'], table) == [
        'the engine arguments must be a dict of option: value, got list']
    assert errors({1: 2}, table) == ['1: option names are strings such as max_model_len']


def test_warnings_for_deprecated_and_unlisted_values(table):
    found = vllm_args.engine_args_warnings({'disable_cascade_attn': True, 'kv_cache_dtype': 'fp8e4m3',
                                            'dtype': 'half'}, table)
    assert found[0].startswith('disable_cascade_attn: deprecated in vLLM 0.33.0: --disable-cascade-attn is '
                               'deprecated')
    assert found[1].startswith("kv_cache_dtype: 'fp8e4m3' is not one of the values vLLM 0.33.0 lists")
    assert "did you mean 'fp8_e4m3'?" in found[1]
    assert len(found) == 2
    assert vllm_args.engine_args_warnings({'kv_cache_dtype': 'fp8'}, table) == []


# --- the CPU build's table (0.32.0) next to the GPU hosts' (0.33.0) ----------
# The tests run vLLM 0.32.0 (the CPU build on PyPI); GPU hosts run 0.33.0. Each
# host's arguments are checked against its own version's table; these tests
# show where the two differ, so a test on 0.32 cannot pass a flag 0.33 refuses.

ROLE_FLAGS = ('model', 'served_model_name', 'host', 'port', 'tensor_parallel_size', 'max_model_len',
              'gpu_memory_utilization')


def _by_dest(version):
    return {option['dest']: option for option in vllm_args.load_table(TABLE_DIR, version)['options']}


def test_the_flags_the_role_sets_mean_the_same_in_both_versions():
    old, new = _by_dest('0.32.0'), _by_dest('0.33.0')
    for dest in ROLE_FLAGS:
        same = ('flag', 'kind', 'value_type', 'nargs', 'takes_value')
        assert {k: old[dest][k] for k in same} == {k: new[dest][k] for k in same}, dest


def test_a_switch_turned_off_uses_each_versions_own_negative_flag():
    options = {'enable_chunked_prefill': False}
    assert render(options, vllm_args.load_table(TABLE_DIR, '0.32.0')) == ['--no-enable-chunked-prefill']
    assert render(options, vllm_args.load_table(TABLE_DIR, '0.33.0')) == ['--disable-chunked-prefill']
    # 0.33 still takes 0.32's spelling, so a unit written for the CPU build means the same on a GPU host.
    assert '--no-enable-chunked-prefill' in _by_dest('0.33.0')['enable_chunked_prefill']['negative_aliases']


def test_options_new_in_0_33_are_refused_on_the_cpu_builds_0_32():
    added = sorted(set(_by_dest('0.33.0')) - set(_by_dest('0.32.0')))
    assert added == ['monokernel', 'reasoning_effort_map', 'sleep_mode_backend', 'watchdog_config']
    assert not set(_by_dest('0.32.0')) - set(_by_dest('0.33.0'))
    assert errors({'watchdog_config': '{}'}, vllm_args.load_table(TABLE_DIR, '0.32.0'))
    assert not errors({'watchdog_config': '{}'}, vllm_args.load_table(TABLE_DIR, '0.33.0'))
