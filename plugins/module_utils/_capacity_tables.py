# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capacity planner's GPU and model tables: data/planner/ read, and GPUs and models resolved against it.

GPUs come as gpu_facts records, preset names or specs given by hand; models as
presets, Hugging Face repo ids or config.json dicts (without a parameter count,
the count is estimated from the architecture). Also what every planner module
shares: CapacityError, the units and the checks of numbers given. Private to
this collection; no Ansible import.

Units: bytes are bytes; GB = 10^9 bytes, GiB = 2^30 bytes; bandwidth in GB/s;
throughput in TFLOPS (10^12 FLOP/s).
"""

from __future__ import annotations

import difflib
import math
import os
import re

GB = 10 ** 9
GIB = 2 ** 30

MEMORY_MATCH_TOLERANCE = 0.10

# format: (bits per weight, extra bits per weight for scales and zero points); weight_format checks the
# names here, _capacity_memory sizes the weights with the bits.
WEIGHT_FORMATS = {
    'bfloat16': (16, 0.0),
    'float16': (16, 0.0),
    'float32': (32, 0.0),
    # Block-wise FP8 as Qwen and DeepSeek publish it: one FP32 scale per 128 x 128 block.
    'fp8': (8, 32.0 / (128 * 128)),
    # Int4 with group size 128 (Qwen's AWQ and GPTQ repos): an FP16 scale and a
    # 4-bit zero point per 128 weights. GPTQ's act-order index is ignored.
    'awq': (4, (16 + 4) / 128.0),
    'gptq-int4': (4, (16 + 4) / 128.0),
    'gptq-int8': (8, (16 + 8) / 128.0),
}
_FORMAT_ALIASES = {
    'bf16': 'bfloat16', 'fp16': 'float16', 'half': 'float16', 'fp32': 'float32', 'float': 'float32',
    'awq-int4': 'awq', 'int4-awq': 'awq', 'gptq': 'gptq-int4', 'gptq-int4-128': 'gptq-int4',
    'float8': 'fp8', 'fp8_e4m3': 'fp8', 'fp8-e4m3': 'fp8',
}
# config.json names accepted for the planner's own.
_MODEL_ALIASES = {
    'num_hidden_layers': 'num_layers',
    'hf_repo_id': 'hf_repo',
    '_name_or_path': 'hf_repo',
    # transformers 5 spells the MoE expert count so (Qwen3-MoE, Mixtral).
    'num_local_experts': 'num_experts',
}
_MODEL_INT_FIELDS = ('params_total', 'params_active', 'params_non_embedding', 'num_layers', 'hidden_size',
                     'intermediate_size', 'moe_intermediate_size', 'num_experts', 'num_experts_per_tok',
                     'num_attention_heads', 'num_key_value_heads', 'head_dim', 'max_position_embeddings',
                     'vocab_size')
_MODEL_REQUIRED = ('num_layers', 'hidden_size', 'num_attention_heads')
_GPU_FIGURES = ('memory_gib', 'memory_bandwidth_gbps', 'bf16_dense_tflops')


class CapacityError(ValueError):
    """Bad input to the planner; the message says what to give instead."""


# --------------------------------------------------------------------------- units, as the messages print them
# Here, beside GB and GIB, because both the planner's reasons and the training estimate print them.

def _gb(value):
    return '%.1f GB' % (value / float(GB))


def _gib(value):
    return '%.1f GiB' % (value / float(GIB))


def _count(value):
    return '{:,}'.format(int(value))


# --------------------------------------------------------------------------- tables

_TABLE_CACHE = {}


def load_tables(data_dir):
    """{'gpus': {...}, 'models': {...}, 'training': {...}} from gpus.yml and models.yml.

    Model variants (`base:`) are expanded, so every preset is complete. Cached
    per directory until a file changes.
    """
    import yaml  # only on the controller; the module never loads tables

    paths = [os.path.join(data_dir, name) for name in ('gpus.yml', 'models.yml')]
    try:
        stamp = tuple(os.stat(path).st_mtime_ns for path in paths)
    except OSError as exc:
        raise CapacityError('cannot read the planner tables in %s: %s' % (data_dir, exc))
    key = os.path.abspath(data_dir)
    cached = _TABLE_CACHE.get(key)
    if cached and cached[0] == stamp:
        return cached[1]
    loaded = {}
    for path in paths:
        with open(path) as handle:
            try:
                content = yaml.safe_load(handle) or {}
            except yaml.YAMLError as exc:
                raise CapacityError('%s is not valid YAML: %s' % (path, exc))
        if not isinstance(content, dict):
            raise CapacityError('%s must hold a mapping' % path)
        loaded.update(content)
    tables = {
        'gpus': dict(loaded.get('gpus') or {}),
        'models': expand_model_table(loaded.get('models') or {}),
        'training': dict(loaded.get('training') or {}),
    }
    _TABLE_CACHE[key] = (stamp, tables)
    return tables


def expand_model_table(models):
    """Presets with `base:` merged over their base (sources merged too)."""
    expanded = {}

    def expand(key, seen):
        if key in expanded:
            return expanded[key]
        if key not in models:
            raise CapacityError('model preset %r names base %r, which is not in the table' % (seen[-1], key))
        if key in seen:
            raise CapacityError('model presets %s name each other as base' % ' -> '.join(seen + [key]))
        entry = dict(models[key])
        base_key = entry.pop('base', None)
        if base_key:
            base = expand(base_key, seen + [key])
            merged = dict(base)
            merged.update(entry)
            source = dict(base.get('source') or {})
            source.update(entry.get('source') or {})
            merged['source'] = source
            merged['base'] = base_key
            entry = merged
        expanded[key] = entry
        return entry

    for name in models:
        expand(name, [])
    return expanded


# --------------------------------------------------------------------------- numbers given

def _number(value, what, positive=True, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        raise CapacityError('%s must be a number, not %r' % (what, value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CapacityError('%s must be a number, not %r' % (what, value))
    if math.isnan(number) or (positive and number <= 0):
        raise CapacityError('%s must be a positive number, not %r' % (what, value))
    return number


def _int(value, what, minimum=1, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool):
        raise CapacityError('%s must be an integer, not %r' % (what, value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CapacityError('%s must be an integer, not %r' % (what, value))
    if number != int(number) or number < minimum:
        raise CapacityError('%s must be an integer of at least %d, not %r' % (what, minimum, value))
    return int(number)


# --------------------------------------------------------------------------- GPUs

def _gpu_hand_hint():
    return ('give its spec by hand as a dict {name: ..., memory_gib: <GiB>, memory_bandwidth_gbps: <GB/s>, '
            'bf16_dense_tflops: <dense BF16 TFLOPS>} or add an entry with a `match` pattern to '
            'data/planner/gpus.yml')


def _gpu_from_entry(key, entry, memory_bytes=None, reported_name=None, index=None):
    where = 'GPU table entry %s' % key
    if memory_bytes is None:
        memory_bytes = _number(entry.get('memory_gib'), '%s: memory_gib' % where) * GIB
    return {
        'key': key,
        'name': entry.get('name') or key,
        'reported_name': reported_name,
        'vendor': (entry.get('vendor') or 'unknown').lower(),
        'memory_bytes': int(memory_bytes),
        'memory_bandwidth_gbps': _number(entry.get('memory_bandwidth_gbps'), '%s: memory_bandwidth_gbps' % where),
        'bf16_dense_tflops': _number(entry.get('bf16_dense_tflops'), '%s: bf16_dense_tflops' % where,
                                     allow_none=True),
        'index': index,
    }


def match_gpu(name, gpu_table, memory_bytes=None):
    """Key of the table entry whose `match` patterns find ``name`` (and whose memory is within 10 %).

    None when nothing matches; CapacityError when two entries do.
    """
    found = []
    for key, entry in (gpu_table or {}).items():
        patterns = entry.get('match') or []
        if not any(re.search(pattern, name, re.IGNORECASE) for pattern in patterns):
            continue
        if memory_bytes:
            nominal = float(entry.get('memory_gib') or 0) * GIB
            if nominal and abs(memory_bytes - nominal) > MEMORY_MATCH_TOLERANCE * nominal:
                continue
        found.append(key)
    if len(found) > 1:
        raise CapacityError('GPU name %r matches several entries of data/planner/gpus.yml (%s): make their '
                            '`match` patterns specific' % (name, ', '.join(sorted(found))))
    return found[0] if found else None


def _lookup_gpu_key(text, gpu_table):
    table = gpu_table or {}
    lowered = text.strip().lower()
    for key in table:
        if key.lower() == lowered:
            return key
    return match_gpu(text, table)


def _split_count(text):
    match = re.match(r'^\s*(\d+)\s*[x\u00d7*]\s*(.+)$', text)
    if match:
        return int(match.group(1)), match.group(2).strip()
    return 1, text.strip()


def _gpu_from_dict(item, table, where):
    if item.get('preset') is not None:
        key = _lookup_gpu_key(str(item['preset']), table)
        if key is None:
            raise CapacityError('%s: unknown GPU preset %r; known presets: %s' % (
                where, item['preset'], ', '.join(sorted(table)) or 'none (no table loaded)'))
        entry = dict(table[key])
        entry.update({k: v for k, v in item.items() if k in ('name', 'vendor') + _GPU_FIGURES and v is not None})
        return _gpu_from_entry(key, entry, memory_bytes=_memory_of(item, where), index=item.get('index'))
    memory = _memory_of(item, where)
    if item.get('memory_bandwidth_gbps') is not None:
        if memory is None:
            raise CapacityError('%s: a GPU given by hand needs memory_gib (or memory_bytes)' % where)
        entry = dict(item)
        return _gpu_from_entry(item.get('name') or 'custom', entry, memory_bytes=memory,
                               reported_name=item.get('name'), index=item.get('index'))
    name = item.get('name')
    if not name:
        raise CapacityError('%s: a GPU needs a name (as gpu_facts reports it), a preset, or its spec: %s'
                            % (where, _gpu_hand_hint()))
    key = match_gpu(str(name), table, memory_bytes=memory)
    if key is None:
        raise CapacityError('%s: %r is not in the GPU table (data/planner/gpus.yml)%s; %s' % (
            where, name, '' if table else ' (no table is loaded here)', _gpu_hand_hint()))
    return _gpu_from_entry(key, table[key], memory_bytes=memory, reported_name=str(name), index=item.get('index'))


def _memory_of(item, where):
    for field, scale in (('memory_total_bytes', 1), ('memory_bytes', 1), ('memory_gib', GIB)):
        if item.get(field) is not None:
            return _number(item[field], '%s: %s' % (where, field)) * scale
    return None


def resolve_gpus(gpus, gpu_table=None):
    """Normalised GPU specs from gpu_facts records, preset names or specs given by hand.

    Accepts one item or a list. Strings are preset keys, names that a `match`
    pattern finds, or "2x <preset>". Dicts are gpu_facts records (name and
    memory_total_bytes; the measured memory wins over the table), {preset: ...}
    with overrides, or full specs (name, memory_gib or memory_bytes,
    memory_bandwidth_gbps, bf16_dense_tflops).
    """
    table = gpu_table or {}
    if isinstance(gpus, (str, dict)):
        gpus = [gpus]
    if not gpus:
        raise CapacityError('no GPU given: pass gpu_facts `gpus`, preset names such as %s, or specs by hand'
                            % (', '.join(sorted(table)[:3]) or 'rtx-pro-6000-blackwell'))
    if not isinstance(gpus, (list, tuple)):
        raise CapacityError('gpus must be a list, not %r' % (gpus,))
    resolved = []
    for pos, item in enumerate(gpus):
        where = 'gpus[%d]' % pos
        if isinstance(item, str):
            count, text = _split_count(item)
            key = _lookup_gpu_key(text, table)
            if key is None:
                raise CapacityError('%s: unknown GPU %r; known presets: %s; or %s' % (
                    where, text, ', '.join(sorted(table)) or 'none (no table loaded)', _gpu_hand_hint()))
            for _copy in range(count):
                resolved.append(_gpu_from_entry(key, table[key]))
        elif isinstance(item, dict):
            resolved.append(_gpu_from_dict(item, table, where))
        else:
            raise CapacityError('%s must be a preset name or a dict, not %r' % (where, item))
    for pos, gpu in enumerate(resolved):
        if gpu['index'] is None:
            gpu['index'] = pos
    return resolved


# --------------------------------------------------------------------------- models
# vocab_params and estimate_params are here, not in _capacity_memory: resolving a model checks and fills in
# its parameter count with them.

def weight_format(name):
    """Canonical weight format name, or CapacityError naming the known ones."""
    text = str(name or 'bfloat16').strip().lower()
    text = _FORMAT_ALIASES.get(text, text)
    if text not in WEIGHT_FORMATS:
        raise CapacityError('unknown weight format %r: use one of %s, or weight_bits' % (
            name, ', '.join(sorted(WEIGHT_FORMATS))))
    return text


def _format_from_config(model):
    quant = model.get('quantization_config')
    if isinstance(quant, dict):
        method = str(quant.get('quant_method') or '').lower()
        bits = quant.get('bits')
        if method == 'fp8':
            return 'fp8'
        if method == 'awq':
            return 'awq'
        if method == 'gptq':
            return 'gptq-int8' if bits == 8 else 'gptq-int4'
    for field in ('weight_dtype', 'torch_dtype', 'dtype'):
        if model.get(field):
            return model[field]
    return 'bfloat16'


def resolve_model(model, model_table=None):
    """Normalised model spec from a preset key, a Hugging Face repo id, or a dict.

    A dict may be {preset: <key>, ...overrides} or a full spec; config.json
    names (num_hidden_layers, torch_dtype, quantization_config) are accepted.
    Without params_total the parameter count is estimated from the
    architecture (needs intermediate_size, or the MoE sizes).
    """
    table = model_table or {}
    if isinstance(model, str):
        key = _lookup_model_key(model, table)
        if key is None:
            raise CapacityError('unknown model preset %r; %s; or give the model as a dict with '
                                'params_total, num_layers, hidden_size, num_attention_heads, num_key_value_heads '
                                '(config.json names are accepted)' % (model, _known_presets(model, table)))
        spec = dict(table[key])
        spec['key'] = key
    elif isinstance(model, dict):
        raw = dict(model)
        if raw.get('preset') is not None:
            key = _lookup_model_key(str(raw['preset']), table)
            if key is None:
                raise CapacityError('unknown model preset %r; %s' % (raw['preset'], _known_presets(raw['preset'], table)))
            spec = dict(table[key])
            spec['key'] = key
            raw.pop('preset')
            spec.update(_aliased(raw))
        else:
            spec = _aliased(raw)
            spec.setdefault('key', None)
            spec['weight_dtype'] = _format_from_config(raw)
    else:
        raise CapacityError('model must be a preset name or a dict, not %r' % (model,))
    return _normalise_model(spec)


def _known_presets(text, table):
    """The closest presets to an unknown preset or repo id, then all the known ones, as one phrase."""
    if not table:
        return 'no model table is loaded'
    names = {key.lower(): key for key in table}
    names.update({str(entry['hf_repo']).lower(): key for key, entry in table.items() if entry.get('hf_repo')})
    close = difflib.get_close_matches(str(text).strip().lower(), list(names), n=6, cutoff=0.5)
    closest = list(dict.fromkeys(names[name] for name in close))[:3]
    known = 'known presets: %s' % ', '.join(sorted(table))
    return ('closest known presets: %s; %s' % (', '.join(closest), known)) if closest else known


def model_errors(model, model_table=None):
    """The reasons ``model`` (preset, repo id or dict) cannot be planned, as sentences; [] when it can."""
    try:
        resolve_model(model, model_table)
    except CapacityError as exc:
        return [str(exc)]
    return []


def _aliased(raw):
    spec = {}
    for field, value in raw.items():
        spec[_MODEL_ALIASES.get(field, field)] = value
    return spec


def _lookup_model_key(text, table):
    lowered = text.strip().lower()
    for key, entry in table.items():
        if key.lower() == lowered or str(entry.get('hf_repo') or '').lower() == lowered:
            return key
    return None


def _normalise_model(spec):
    name = spec.get('name') or spec.get('key') or spec.get('hf_repo') or 'model'
    where = 'model %s' % name
    for field in _MODEL_REQUIRED:
        if spec.get(field) is None:
            raise CapacityError('%s: %s is missing (config.json has it; num_layers is num_hidden_layers)'
                                % (where, field))
    for field in _MODEL_INT_FIELDS:
        if spec.get(field) is not None:
            spec[field] = _int(spec[field], '%s: %s' % (where, field))
    spec['name'] = name
    spec.setdefault('hf_repo', None)
    if spec.get('num_key_value_heads') is None:
        spec['num_key_value_heads'] = spec['num_attention_heads']
    if spec.get('head_dim') is None:
        if spec['hidden_size'] % spec['num_attention_heads']:
            raise CapacityError('%s: head_dim is missing and hidden_size is not a multiple of the heads' % where)
        spec['head_dim'] = spec['hidden_size'] // spec['num_attention_heads']
    spec['vocab_size'] = spec.get('vocab_size') or 0
    spec['tie_word_embeddings'] = bool(spec.get('tie_word_embeddings', False))
    spec['weight_dtype'] = weight_format(spec.get('weight_dtype'))
    spec['moe'] = bool(spec.get('num_experts'))
    spec['params_source'] = 'given'
    if spec.get('params_total') is None:
        estimate = estimate_params(spec)
        if estimate is None:
            raise CapacityError('%s: params_total is missing and cannot be estimated without intermediate_size '
                                '(or moe_intermediate_size, num_experts and num_experts_per_tok)' % where)
        spec['params_total'], active = estimate
        if spec.get('params_active') is None:
            spec['params_active'] = active
        spec['params_source'] = 'estimated from the architecture'
    if spec.get('params_active') is None:
        spec['params_active'] = spec['params_total']
    if spec['params_active'] > spec['params_total']:
        raise CapacityError('%s: params_active (%d) exceeds params_total (%d)'
                            % (where, spec['params_active'], spec['params_total']))
    if vocab_params(spec) >= spec['params_active']:
        raise CapacityError('%s: the embedding matrices (vocab_size x hidden_size) are larger than the '
                            'parameter count; check vocab_size, hidden_size and params_total' % where)
    return spec


def vocab_params(model):
    """Parameters in the embedding and lm_head matrices (one matrix when tied)."""
    return model['vocab_size'] * model['hidden_size'] * (1 if model['tie_word_embeddings'] else 2)


def estimate_params(model):
    """(total, active) parameters of a GQA + SwiGLU decoder (Llama/Qwen style), or None.

    Per layer: q and o projections (hidden x heads x head_dim each), k and v
    (hidden x kv_heads x head_dim each), and the MLP: 3 x hidden x
    intermediate, or for MoE num_experts such experts plus a router (active:
    num_experts_per_tok of them). Norms and biases are left out (< 0.1 %).
    """
    hidden = model['hidden_size']
    head_dim = model.get('head_dim') or hidden // model['num_attention_heads']
    heads = model['num_attention_heads']
    kv_heads = model.get('num_key_value_heads') or heads
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    if model.get('num_experts'):
        if not (model.get('moe_intermediate_size') and model.get('num_experts_per_tok')):
            return None
        expert = 3 * hidden * model['moe_intermediate_size']
        router = model['num_experts'] * hidden
        layer_total = attention + model['num_experts'] * expert + router
        layer_active = attention + model['num_experts_per_tok'] * expert + router
    else:
        if not model.get('intermediate_size'):
            return None
        layer_total = layer_active = attention + 3 * hidden * model['intermediate_size']
    embeddings = (model.get('vocab_size') or 0) * hidden * (1 if model.get('tie_word_embeddings') else 2)
    layers = model['num_layers']
    return layers * layer_total + embeddings, layers * layer_active + embeddings
