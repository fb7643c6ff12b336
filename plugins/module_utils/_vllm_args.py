# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vLLM engine arguments: a dict of options checked against the real CLI and rendered to argv.

The table is data/vllm/cli-<version>.json, written by scripts/vllm_cli_table.py
from the argparse parser of `vllm serve` of that release. Each option there has
a ``kind``: ``bool`` (an on/off pair such as --enable-prefix-caching /
--disable-prefix-caching or --enforce-eager / --no-enforce-eager),
``store_true`` (a bare switch with no off form), ``value``, ``choices`` or
``json``.

Rendering rules, in short:

* keys may use ``_`` or ``-`` (``max_model_len`` and ``max-model-len`` are the
  same) and may name any alias or the off form of a switch
  (``disable_prefix_caching: true``);
* ``None`` means "leave vLLM's default" and renders nothing;
* a ``bool`` option renders its on flag for true and its off flag for false;
  a ``store_true`` switch renders for true and nothing for false (off is its
  default, and the CLI has no way to say it);
* ``json`` options take a dict or list (rendered as compact JSON with sorted
  keys) or a string that already holds JSON;
* options taking several values (``nargs +``) take a list, rendered as one
  flag followed by the values; repeatable options render one flag per item;
* the argv is ordered by flag name so the same options always give the same
  command line (a container is not recreated because a dict was merged in
  another order).

Nothing here imports Ansible.
"""

from __future__ import annotations

import difflib
import json
import os
import re

TABLE_PREFIX = 'cli-'
TABLE_SUFFIX = '.json'
_TABLE_KEYS = ('vllm_version', 'generated_by', 'options')
_OPTION_KEYS = ('flag', 'dest', 'kind', 'takes_value')
_KINDS = ('bool', 'store_true', 'value', 'choices', 'json')
_TRUE_WORDS = ('true', 'yes', 'on')
_FALSE_WORDS = ('false', 'no', 'off')
_INT_RE = re.compile(r'^[+-]?[0-9]+$')
# vLLM's human_readable_int: 25.6k, 32k, 32K (no decimals with binary K/M/G/T).
_HUMAN_INT_RE = re.compile(r'^(?:[0-9]+|[0-9]+(?:\.[0-9]+)?[kmgt]|[0-9]+[KMGT])$')

_SPECULATIVE_EXAMPLE = ('e.g. speculative_config: {method: ngram, num_speculative_tokens: 5, prompt_lookup_max: 4} '
                        '(rendered as --speculative-config '
                        '\'{"method":"ngram","num_speculative_tokens":5,"prompt_lookup_max":4}\'), or '
                        '{method: eagle3, model: <draft model>, num_speculative_tokens: 3} for a draft model')
_SPECULATIVE_V0 = 'removed with the V0 engine; configure speculative decoding with speculative_config'
_FLASH = ('vLLM chooses FlashAttention by itself wherever the GPU and model support it, so there is nothing to '
          'enable; to force one backend set attention_backend: FLASH_ATTN (or FLASHINFER, TRITON_ATTN)')
_CUDA_GRAPHS = ('CUDA graphs are on by default; enforce_eager: true turns them off, max_cudagraph_capture_size '
                'and cudagraph_capture_sizes tune what is captured')


def _speculative(lead):
    return (lead + ', ' + _SPECULATIVE_EXAMPLE, ('speculative_config',))


# Options that guides and older releases use, with what the current CLI
# wants instead. Consulted only for keys the table does not know, so a flag
# that comes back in a later release is never rejected. Each entry: the
# advice, and the options it points to (checked against the table in use).
KNOWN_MYTHS = {
    'enable_flash_attention': (_FLASH, ('attention_backend',)),
    'enable_flash_attn': (_FLASH, ('attention_backend',)),
    'flash_attention': (_FLASH, ('attention_backend',)),
    'flash_attn': (_FLASH, ('attention_backend',)),
    'use_flash_attn': (_FLASH, ('attention_backend',)),
    'use_flash_attention': (_FLASH, ('attention_backend',)),
    'vllm_attention_backend': ('VLLM_ATTENTION_BACKEND was an environment variable of older releases; set '
                               'attention_backend: FLASH_ATTN (or FLASHINFER, TRITON_ATTN) instead',
                               ('attention_backend',)),
    'speculative_decoding': _speculative('speculative decoding has no on/off switch, it is one JSON option'),
    'enable_speculative_decoding': _speculative('speculative decoding has no on/off switch, it is one JSON option'),
    'speculative_model': _speculative('the draft model is the "model" key of speculative_config'),
    'num_speculative_tokens': _speculative('this is the "num_speculative_tokens" key of speculative_config'),
    'speculative_draft_tensor_parallel_size': _speculative('this is the "draft_tensor_parallel_size" key of '
                                                           'speculative_config'),
    'ngram_prompt_lookup_max': _speculative('this is the "prompt_lookup_max" key of speculative_config'),
    'ngram_prompt_lookup_min': _speculative('this is the "prompt_lookup_min" key of speculative_config'),
    'speculative_max_model_len': _speculative('this is the "max_model_len" key of speculative_config'),
    'speculative_disable_by_batch_size': _speculative(_SPECULATIVE_V0),
    'spec_decoding_acceptance_method': _speculative(_SPECULATIVE_V0),
    'typical_acceptance_sampler_posterior_threshold': _speculative(_SPECULATIVE_V0),
    'typical_acceptance_sampler_posterior_alpha': _speculative(_SPECULATIVE_V0),
    'speculative_disable_mqa_scorer': _speculative(_SPECULATIVE_V0),
    'use_v2_block_manager': ('removed: the v2 block manager became the only one; delete the key', ()),
    'num_scheduler_steps': ('multi-step scheduling was removed with the V0 engine; delete the key '
                            '(async_scheduling: true overlaps scheduling with execution)', ('async_scheduling',)),
    'multi_step_stream_outputs': ('multi-step scheduling was removed with the V0 engine; delete the key', ()),
    'swap_space': ('CPU swap space was removed with the V0 engine; delete the key, or offload KV cache to CPU '
                   'memory with kv_offloading_size: <GiB>', ('kv_offloading_size',)),
    'preemption_mode': ('removed: the V1 engine always preempts by recomputation; delete the key', ()),
    'disable_async_output_proc': ('removed with the V0 engine; delete the key', ()),
    'worker_use_ray': ('removed; set distributed_executor_backend: ray', ('distributed_executor_backend',)),
    'engine_use_ray': ('removed; delete the key (distributed_executor_backend: ray runs the workers on Ray)',
                       ('distributed_executor_backend',)),
    'tokenizer_pool_size': ('the tokenizer pool was removed; delete the key', ()),
    'tokenizer_pool_type': ('the tokenizer pool was removed; delete the key', ()),
    'tokenizer_pool_extra_config': ('the tokenizer pool was removed; delete the key', ()),
    'max_context_len_to_capture': ('removed; ' + _CUDA_GRAPHS,
                                   ('enforce_eager', 'max_cudagraph_capture_size', 'cudagraph_capture_sizes')),
    'max_seq_len_to_capture': ('removed; ' + _CUDA_GRAPHS,
                               ('enforce_eager', 'max_cudagraph_capture_size', 'cudagraph_capture_sizes')),
    'cuda_graph_sizes': ('renamed: cudagraph_capture_sizes: [1, 2, 4, 8]', ('cudagraph_capture_sizes',)),
    'enable_cuda_graph': (_CUDA_GRAPHS, ('enforce_eager',)),
    'use_cuda_graph': (_CUDA_GRAPHS, ('enforce_eager',)),
    'cuda_graph': (_CUDA_GRAPHS, ('enforce_eager',)),
    'guided_decoding_backend': ('set structured_outputs_config: {backend: xgrammar} (or guidance, outlines, '
                                'auto)', ('structured_outputs_config',)),
    'enable_reasoning': ('removed: naming a parser turns reasoning output on, e.g. reasoning_parser: qwen3 '
                         '(or deepseek_r1)', ('reasoning_parser',)),
    'task': ('vllm serve has no --task: for embedding, reranking or reward models set runner: pooling, and '
             'convert: embed (or classify, reward) to adapt a generative model', ('runner', 'convert')),
    'device': ('removed: vLLM detects the platform; choose the GPUs with CUDA_VISIBLE_DEVICES or '
               'device_ids: "0,1"', ('device_ids',)),
    'load_in_8bit': ('vLLM does not quantize with bitsandbytes flags; serve a pre-quantized checkpoint (AWQ, '
                     'GPTQ, FP8, NVFP4) or quantize while loading with quantization: fp8', ('quantization',)),
    'load_in_4bit': ('vLLM does not quantize with bitsandbytes flags; serve a pre-quantized checkpoint (AWQ, '
                     'GPTQ, FP8, NVFP4) or quantize while loading with quantization: fp8', ('quantization',)),
    'rope_scaling': ('no longer a flag; override the model config instead, e.g. hf_overrides: {rope_scaling: '
                     '{...}} with the key names of the model\'s config.json', ('hf_overrides',)),
    'rope_theta': ('no longer a flag; override the model config instead, e.g. hf_overrides: {rope_theta: ...} '
                   'with the key names of the model\'s config.json', ('hf_overrides',)),
    'context_length': ('the context length is max_model_len: 32768 (or 32k, or auto)', ('max_model_len',)),
    'context_size': ('the context length is max_model_len: 32768 (or 32k, or auto)', ('max_model_len',)),
    'ctx_size': ('the context length is max_model_len: 32768 (or 32k, or auto)', ('max_model_len',)),
    'n_ctx': ('the context length is max_model_len: 32768 (or 32k, or auto)', ('max_model_len',)),
    'max_seq_len': ('the context length is max_model_len: 32768 (or 32k, or auto)', ('max_model_len',)),
    'max_context_length': ('the context length is max_model_len: 32768 (or 32k, or auto)', ('max_model_len',)),
    'gpu_memory_fraction': ('the share of each GPU\'s memory vLLM may use is gpu_memory_utilization: 0.9',
                            ('gpu_memory_utilization',)),
    'mem_fraction_static': ('the share of each GPU\'s memory vLLM may use is gpu_memory_utilization: 0.9',
                            ('gpu_memory_utilization',)),
    'tp_size': ('tensor parallelism is tensor_parallel_size: 2', ('tensor_parallel_size',)),
    'num_gpus': ('the GPUs one model spans are tensor_parallel_size: 2 (times pipeline_parallel_size)',
                 ('tensor_parallel_size', 'pipeline_parallel_size')),
    'max_batch_size': ('the number of sequences in a batch is max_num_seqs: 256', ('max_num_seqs',)),
    'max_num_tokens': ('the token budget of one batch is max_num_batched_tokens: 8192',
                       ('max_num_batched_tokens',)),
    'max_batch_tokens': ('the token budget of one batch is max_num_batched_tokens: 8192',
                         ('max_num_batched_tokens',)),
}


class EngineArgsError(ValueError):
    """Raised by render_engine_args; ``errors`` holds one message per problem."""

    def __init__(self, errors):
        self.errors = list(errors)
        super().__init__('; '.join(self.errors))


# --------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------

def _version_key(version):
    return tuple(int(part) if part.isdigit() else -1 for part in re.split(r'[.+-]', version))


def available_versions(directory):
    """vLLM versions with a table in ``directory``, oldest first."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    versions = [name[len(TABLE_PREFIX):-len(TABLE_SUFFIX)] for name in names
                if name.startswith(TABLE_PREFIX) and name.endswith(TABLE_SUFFIX)]
    return sorted(versions, key=_version_key)


def check_table(table):
    """Raise ValueError when ``table`` lacks what the functions here read."""
    if not isinstance(table, dict):
        raise ValueError('a vLLM CLI table is a dict, got %s' % type(table).__name__)
    missing = [key for key in _TABLE_KEYS if key not in table]
    if missing:
        raise ValueError('the vLLM CLI table lacks %s' % ', '.join(missing))
    for option in table['options']:
        if any(key not in option for key in _OPTION_KEYS) or option['kind'] not in _KINDS:
            raise ValueError('the vLLM CLI table has a malformed option: %r' % (option,))
    return table


def load_table(directory, version=None):
    """The table of ``version`` (default: the newest) from ``directory``.

    Raises ValueError naming the versions there are tables for.
    """
    versions = available_versions(directory)
    if not versions:
        raise ValueError('no vLLM CLI tables (cli-<version>.json) in %s' % directory)
    if version is None:
        version = versions[-1]
    version = str(version).strip()
    if version.startswith('v'):
        version = version[1:]
    if version not in versions:
        raise ValueError('no vLLM CLI table for version %s; this collection has tables for: %s'
                         % (version, ', '.join(versions)))
    with open(os.path.join(directory, TABLE_PREFIX + version + TABLE_SUFFIX), encoding='utf-8') as handle:
        return check_table(json.load(handle))


# --------------------------------------------------------------------------
# Lookup
# --------------------------------------------------------------------------

def _normalize(name):
    """'--max_model-len' / 'max_model_len' -> 'max-model-len'; '-tp' -> 'tp'."""
    return str(name).strip().lstrip('-').replace('_', '-')


def _as_key(flag):
    """How a flag is written as a dict key: '--max-model-len' -> 'max_model_len'."""
    return _normalize(flag).replace('-', '_')


class _Index:
    """Every way to name an option, mapped to the option and the value it means."""

    def __init__(self, table):
        check_table(table)
        self.version = table['vllm_version']
        self.positionals = set(table.get('positionals') or ())
        self.names = {}
        for option in table['options']:
            for flag in [option['flag']] + list(option.get('aliases') or ()):
                self.names[_normalize(flag)] = (option, True)
            for flag in [option.get('negative_flag')] + list(option.get('negative_aliases') or ()):
                if flag:
                    self.names[_normalize(flag)] = (option, False)
        # Suggestions use the long, visible names only (not -tp, not hidden --no-enable-x).
        self.suggestable = sorted(
            set(_normalize(option['flag']) for option in table['options'])
            | set(_normalize(flag) for option in table['options']
                  for flag in (option.get('aliases') or ()) if flag.startswith('--'))
            | set(_normalize(option['negative_flag']) for option in table['options']
                  if option.get('negative_flag')))

    def lookup(self, key):
        return self.names.get(_normalize(key))

    def has(self, key):
        return _normalize(key) in self.names

    def suggest(self, key, count=3):
        """Likely meant names: abbreviations first (gpu_mem_util), then near spellings."""
        words = _normalize(key).split('-')
        found = [name for name in self.suggestable
                 if len(name.split('-')) == len(words)
                 and all(full.startswith(short) for short, full in zip(words, name.split('-')))]
        for name in difflib.get_close_matches(_normalize(key), self.suggestable, n=count, cutoff=0.75):
            if name not in found:
                found.append(name)
        return found[:count]


def _reserved_map(reserved, index):
    """{option flag: the variable to set instead, or None} for the options the caller owns."""
    if not reserved:
        return {}
    if isinstance(reserved, dict):
        items = list(reserved.items())
    elif isinstance(reserved, (list, tuple, set, frozenset)):
        items = [(name, None) for name in reserved]
    else:
        items = [(reserved, None)]
    owned = {}
    for name, variable in items:
        found = index.lookup(name)
        flag = found[0]['flag'] if found else '--' + _normalize(name)
        owned[flag] = variable
    return owned


# --------------------------------------------------------------------------
# Values
# --------------------------------------------------------------------------

def _describe(value):
    if isinstance(value, bool):
        return 'the boolean %s' % ('true' if value else 'false')
    if isinstance(value, dict):
        return 'a dict'
    if isinstance(value, (list, tuple)):
        return 'a list'
    return repr(value)


def _switch_value(value):
    """True/False for an on/off option, or None when ``value`` says neither."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS + _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    return None


_TYPE_WORDS = {
    'int': 'an integer',
    'float': 'a number',
    'str': 'a string',
    'human_int': 'an integer (or 25.6k, 32k, 32K)',
    'int_or_auto': 'an integer (or 32k, 32K, or auto/-1)',
    'csv': 'a comma-separated string or a list',
}


def _scalar_text(value, value_type):
    """The argv text of one value of ``value_type``, or raise ValueError with the reason."""
    wanted = _TYPE_WORDS.get(value_type, 'a ' + str(value_type))
    if isinstance(value, bool) or isinstance(value, (dict, list, tuple)) or value is None:
        raise ValueError('takes %s, not %s' % (wanted, _describe(value)))
    if value_type == 'int':
        if isinstance(value, int) or (isinstance(value, str) and _INT_RE.match(value.strip())):
            return str(int(value))
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        raise ValueError('takes %s, got %s' % (wanted, _describe(value)))
    if value_type == 'float':
        if isinstance(value, (int, float)):
            return str(value)
        try:
            float(str(value).strip())
        except ValueError:
            raise ValueError('takes %s, got %s' % (wanted, _describe(value))) from None
        return str(value).strip()
    if value_type in ('human_int', 'int_or_auto'):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and (value >= 0 or (value == -1 and value_type == 'int_or_auto')):
            return str(value)
        text = str(value).strip()
        if value_type == 'int_or_auto' and (text.lower() == 'auto' or text == '-1'):
            return text.lower()
        if _HUMAN_INT_RE.match(text):
            return text
        raise ValueError('takes %s, got %s' % (wanted, _describe(value)))
    return str(value)


def _choice_text(value, option):
    """The argv text for a choices option, or raise ValueError naming the choices."""
    choices = [choice for choice in option.get('choices') or () if choice is not None]
    if isinstance(value, bool) or isinstance(value, (dict, list, tuple)):
        raise ValueError('takes one of %s, not %s' % (', '.join(str(c) for c in choices), _describe(value)))
    text = str(value).strip()
    compared = text
    if option.get('choice_transform') == 'lower_dash_to_underscore':
        compared = text.lower().replace('-', '_')
    if compared in [str(choice) for choice in choices]:
        return text
    close = difflib.get_close_matches(compared, [str(c) for c in choices], n=1, cutoff=0.6)
    hint = '; did you mean %r?' % close[0] if close else ''
    raise ValueError('takes one of %s, got %r%s' % (', '.join(str(c) for c in choices), text, hint))


def _json_text(value, option):
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, separators=(',', ':'), sort_keys=True)
    if isinstance(value, str):
        text = value.strip()
        if option.get('value_type') == 'json_or_str' and not text.startswith('{'):
            return text
        try:
            json.loads(text)
        except ValueError as exc:
            raise ValueError('takes JSON (write a dict or a list), and the string is not valid JSON: %s'
                             % exc) from None
        return text
    raise ValueError('takes JSON: write a dict%s, not %s'
                     % (' or a string' if option.get('value_type') == 'json_or_str' else '', _describe(value)))


def _item_text(item, option):
    if option['kind'] == 'choices':
        return _choice_text(item, option)
    return _scalar_text(item, option.get('value_type') or 'str')


def _with_value(flag, text):
    # A value starting with "-" would be read as a flag unless joined with "=".
    if text.startswith('-') and not _INT_RE.match(text):
        return [flag + '=' + text]
    return [flag, text]


def _render_option(option, positive, value):
    """argv items for one option; raises ValueError with the reason when the value does not fit."""
    kind = option['kind']
    flag = option['flag']
    if kind in ('bool', 'store_true'):
        wanted = _switch_value(value)
        if wanted is None:
            raise ValueError('is an on/off switch: give true or false, not %s' % _describe(value))
        on = wanted if positive else not wanted
        if kind == 'bool':
            return [flag] if on else [option['negative_flag']]
        return [flag] if on else []
    if kind == 'json':
        return _with_value(flag, _json_text(value, option))
    if option.get('nargs') == '?' and isinstance(value, bool):
        # e.g. --hf-token: bare flag for true, nothing for false.
        return [flag] if value else []
    if option.get('value_type') == 'csv' and isinstance(value, (list, tuple)):
        return _with_value(flag, ','.join(_scalar_text(item, 'str') for item in value))
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    many = option.get('nargs') in ('+', '*')
    if isinstance(value, (list, tuple)) and not (many or option.get('repeatable')):
        raise ValueError('takes one value, not a list')
    if not items:
        raise ValueError('needs at least one value; leave the key out (or null) for vLLM\'s default')
    texts = [_item_text(item, option) for item in items]
    if option.get('repeatable'):
        argv = []
        for text in texts:
            argv.extend(_with_value(flag, text))
        return argv
    if many:
        return [flag] + texts
    return _with_value(flag, texts[0])


# --------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------

def _unknown_message(key, index):
    shown = '--' + _normalize(key)
    myth = KNOWN_MYTHS.get(_as_key(key))
    if myth is not None:
        advice, targets = myth
        missing = ['--' + _normalize(target) for target in targets if not index.has(target)]
        note = ' (note: %s not in vLLM %s either)' % (', '.join(missing), index.version) if missing else ''
        return '%s: vLLM %s has no %s option; %s%s' % (key, index.version, shown, advice, note)
    close = index.suggest(key)
    if close:
        return '%s: vLLM %s has no %s option; did you mean %s?' % (
            key, index.version, shown, ' or '.join('%s (--%s)' % (_as_key(name), name) for name in close))
    return ('%s: vLLM %s has no %s option; `vllm serve --help=all` in the vllm/vllm-openai:v%s image lists '
            'the options' % (key, index.version, shown, index.version))


def _analyse(options, table, reserved):
    """(argv pieces per flag, errors, warnings) for ``options``."""
    index = _Index(table)
    if options is None:
        options = {}
    if not isinstance(options, dict):
        return {}, ['the engine arguments must be a dict of option: value, got %s' % type(options).__name__], []
    owned = _reserved_map(reserved, index)
    pieces, errors, warnings, seen = {}, [], [], {}
    for key, value in options.items():
        if not isinstance(key, str) or not key.strip():
            errors.append('%r: option names are strings such as max_model_len' % (key,))
            continue
        found = index.lookup(key)
        if found is None:
            head = key.split('.', 1)[0]
            if '.' in key and index.lookup(head) and index.lookup(head)[0]['kind'] == 'json':
                errors.append('%s: write nested settings as a dict under %s, e.g. %s: {%s: ...}'
                              % (key, _as_key(head), _as_key(head), key.split('.', 1)[1]))
            elif _normalize(key).replace('-', '_') in index.positionals:
                errors.append('%s: the model is the positional argument of vllm serve and the role sets it' % key)
            else:
                errors.append(_unknown_message(key, index))
            continue
        option, positive = found
        flag = option['flag']
        if value is None:
            # null leaves vLLM's default: nothing to render, nothing to clash with.
            continue
        if flag in owned:
            variable = owned[flag]
            where = 'set %s instead' % variable if variable else 'use the role\'s own variable instead'
            errors.append('%s: %s is set by the role, not by the engine options; %s' % (key, flag, where))
            continue
        if flag in seen:
            errors.append('%s: %s is already set by %s; keep one of the two keys' % (key, flag, seen[flag]))
            continue
        seen[flag] = key
        try:
            argv = _render_option(option, positive, value)
        except ValueError as exc:
            errors.append('%s: %s %s' % (key, flag, exc))
            continue
        pieces[flag] = argv
        if option.get('deprecated'):
            warnings.append('%s: deprecated in vLLM %s: %s' % (key, index.version, option['deprecated']))
        suggested = option.get('suggested_values')
        if suggested and isinstance(value, str) and value not in suggested:
            close = difflib.get_close_matches(value, [str(s) for s in suggested], n=1, cutoff=0.6)
            warnings.append('%s: %r is not one of the values vLLM %s lists for %s (%s)%s; plugins may add more'
                            % (key, value, index.version, flag, ', '.join(str(s) for s in suggested),
                               '; did you mean %r?' % close[0] if close else ''))
    return pieces, errors, warnings


def validate_engine_args(options, table, reserved=None):
    """Problems with ``options`` against ``table``: a list of messages, empty when all is well.

    ``reserved`` names the options the caller sets itself (host, port, the
    model, ...): a list of names, or a dict of name: the variable to set
    instead. Each message starts with the key as written and says what to do.
    """
    return _analyse(options, table, reserved)[1]


def engine_args_warnings(options, table, reserved=None):
    """Notes that do not stop rendering: deprecated flags, values outside the listed ones."""
    return _analyse(options, table, reserved)[2]


def render_engine_args(options, table, reserved=None):
    """The argv for ``vllm serve`` from ``options``, ordered by flag.

    Raises EngineArgsError (a ValueError) carrying every problem
    validate_engine_args reports.
    """
    pieces, errors, _warnings = _analyse(options, table, reserved)
    if errors:
        raise EngineArgsError(errors)
    argv = []
    for flag in sorted(pieces):
        argv.extend(pieces[flag])
    return argv
