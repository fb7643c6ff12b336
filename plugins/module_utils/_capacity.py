# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Capacity planner for serving an LLM with vLLM, and for training one from scratch.

Pure arithmetic over the GPU and model tables in data/planner/ (or over specs
given by hand); private to this collection. No Ansible import: the filters,
the action plugin and the module all use these functions.

Units: bytes are bytes; GB = 10^9 bytes, GiB = 2^30 bytes; bandwidth in GB/s;
throughput in TFLOPS (10^12 FLOP/s).

Assumptions, stated once and used everywhere:
  Weights     params x bits / 8. Quantised formats (fp8, awq, gptq) keep the
              embedding and lm_head matrices in 16 bits and add their scales
              and zero points (WEIGHT_FORMATS). Norms, biases and MoE routers
              are counted in params but not told apart (under 0.1 %).
  Parallelism weights split evenly over tensor_parallel_size GPUs, embedding
              and lm_head included (vLLM shards both over the vocabulary).
              Pieces vLLM replicates (norms; the K/V projections when there are
              fewer KV heads than GPUs) are under 1 % and ignored. With
              pipeline parallelism the heaviest stage holds ceil(layers / pp)
              layers and one vocabulary matrix; that stage is the one reported.
  KV cache    bytes per token = 2 (K and V) x layers x KV heads x head_dim x
              bytes of the KV dtype (auto = the model's 16-bit dtype; fp8 = 1).
              Tensor parallelism splits the KV heads; when there are fewer KV
              heads than GPUs every GPU keeps a whole head (replication).
              Tokens are counted in vLLM blocks of 16.
  Memory      per GPU: total x gpu_memory_utilization - weights - reserve.
              The reserve (reserve_gib, 4 GiB by default) stands for the
              activations of the profiling batch, CUDA graphs, the CUDA context
              and NCCL buffers; it is an estimate, not a measurement: raise it
              if vLLM reports less KV cache than planned. GPUs of one instance
              are sized by the smallest one, as vLLM does.
  CPU         vLLM's CPU build allocates exactly cpu_kv_cache_gib of host
              memory for the KV cache (VLLM_CPU_KVCACHE_SPACE), in blocks of
              128 tokens; the "GPU" is the host: its memory must hold the
              weights, that cache and the reserve.
  Valid TP    divides the attention heads, divides the KV heads or is a
              multiple of them, and tp x pp is at most the number of GPUs.
  Decode      single-stream ceiling = tp x per-GPU bandwidth / bytes read per
              token; bytes read = active parameters (MoE: the activated ones)
              in their format, without the input embedding table, which is
              only looked up. It ignores communication between GPUs, kernel
              efficiency (real kernels reach roughly 60-80 % of peak bandwidth)
              and, in the plain figure, the KV cache reads (the figure at
              max_model_len adds one full-length sequence). Pipeline stages
              run one after the other for one stream, so pp does not raise it.
  Training    6 x params x tokens FLOPs (forward and backward, Kaplan et al.
              2020), tokens = 20 x params by default (Chinchilla, Hoffmann et
              al. 2022), at dense BF16 peak x MFU (0.4 by default). Training
              state is 16 bytes per parameter (BF16 weights and gradients,
              FP32 master weights and two Adam moments), activations not
              counted, sharded evenly over the GPUs.
"""

from __future__ import annotations

import difflib
import math
import os
import re

GB = 10 ** 9
GIB = 2 ** 30

DEFAULT_GPU_MEMORY_UTILIZATION = 0.90
DEFAULT_RESERVE_GIB = 4.0
DEFAULT_MIN_CONCURRENT_SEQUENCES = 4
DEFAULT_MFU = 0.4
CHINCHILLA_TOKENS_PER_PARAM = 20
TRAINING_STATE_BYTES_PER_PARAM = 16
# A context shorter than this is not worth serving; without a max_model_len the
# plan fits only if at least this much (or the model's whole context) fits.
MIN_USEFUL_CONTEXT = 4096
# gpus_needed looks this far: tensor parallel groups of the first GPU given.
MAX_GPUS_CONSIDERED = 8
KV_BLOCK_TOKENS = 16
CPU_KV_BLOCK_TOKENS = 128
MEMORY_MATCH_TOLERANCE = 0.10
LAYOUTS = ('tensor_parallel', 'per_gpu', 'per_gpu_models')
TRAINING_TABLE_SIZES = ('gpt-125m', 'gpt-355m', 'gpt-1.3b', 'gpt-3b', 'gpt-7b')
# Used when no table is loaded (the module on a target host).
_FALLBACK_TRAINING_SIZES = (('gpt-125m', 125e6), ('gpt-355m', 355e6), ('gpt-1.3b', 1.3e9),
                            ('gpt-3b', 3e9), ('gpt-7b', 7e9))

# format: (bits per weight, extra bits per weight for scales and zero points)
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
# vLLM --kv-cache-dtype: bytes per element; None = the model's activation dtype.
KV_CACHE_DTYPES = {
    'auto': None, 'bfloat16': 2, 'float16': 2, 'half': 2,
    'fp8': 1, 'fp8_e4m3': 1, 'fp8_e5m2': 1, 'fp8_inc': 1,
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


# --------------------------------------------------------------------------- GPUs

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


# --------------------------------------------------------------------------- arithmetic

def _format_bits(model, weight_bits):
    """(body bits per weight incl. scales, embedding bits per weight, description)."""
    if weight_bits is not None:
        bits = _number(weight_bits, 'weight_bits')
        if bits > 32:
            raise CapacityError('weight_bits must be at most 32, not %r' % (weight_bits,))
        return bits, bits if bits >= 16 else 16.0, '%g-bit weights (weight_bits)' % bits
    bits, scale_bits = WEIGHT_FORMATS[model['weight_dtype']]
    embed_bits = float(bits) if bits >= 16 else 16.0
    return bits + scale_bits, embed_bits, model['weight_dtype']


def _activation_bytes(model):
    return 4 if model['weight_dtype'] == 'float32' else 2


def kv_cache_dtype_bytes(kv_cache_dtype, model):
    text = str(kv_cache_dtype or 'auto').strip().lower()
    if text not in KV_CACHE_DTYPES:
        raise CapacityError('unknown kv_cache_dtype %r: use one of %s' % (
            kv_cache_dtype, ', '.join(sorted(KV_CACHE_DTYPES))))
    size = KV_CACHE_DTYPES[text]
    return text, size if size is not None else _activation_bytes(model)


def kv_heads_per_gpu(model, tensor_parallel_size):
    kv_heads = model['num_key_value_heads']
    if kv_heads >= tensor_parallel_size:
        return kv_heads // tensor_parallel_size
    return 1


def kv_bytes_per_token(model, kv_bytes=2, tensor_parallel_size=1, layers=None):
    """2 x layers x KV heads (per GPU under TP) x head_dim x bytes."""
    layers = model['num_layers'] if layers is None else layers
    return 2 * layers * kv_heads_per_gpu(model, tensor_parallel_size) * model['head_dim'] * kv_bytes


def weight_bytes(model, weight_bits=None, params=None):
    """Bytes of the weights (all parameters, or ``params`` of them plus the vocabulary matrices)."""
    body_bits, embed_bits = _format_bits(model, weight_bits)[:2]
    vocab = vocab_params(model)
    total = model['params_total'] if params is None else params
    return vocab * embed_bits / 8.0 + (total - vocab) * body_bits / 8.0


def valid_tensor_parallel_sizes(model, max_size):
    heads, kv_heads = model['num_attention_heads'], model['num_key_value_heads']
    return [tp for tp in range(1, max(1, int(max_size)) + 1)
            if heads % tp == 0 and (kv_heads % tp == 0 or tp % kv_heads == 0)]


def _floor_to(value, step):
    return int(value // step * step)


def _evaluate(gpus, model, tp, pp, options):
    """Figures for one tensor/pipeline layout on gpus[:tp * pp]."""
    used = gpus[:tp * pp]
    memory = min(gpu['memory_bytes'] for gpu in used)
    bandwidth = min(gpu['memory_bandwidth_gbps'] for gpu in used)
    util, reserve = options['gpu_memory_utilization'], options['reserve_bytes']
    body_bits, embed_bits, format_text = _format_bits(model, options['weight_bits'])
    layers = model['num_layers']
    stage_layers = int(math.ceil(layers / float(pp)))
    vocab = vocab_params(model)
    body_bytes = (model['params_total'] - vocab) * body_bits / 8.0
    vocab_bytes = vocab * embed_bits / 8.0
    weights_total = body_bytes + vocab_bytes
    if pp == 1:
        stage_bytes = weights_total
    else:
        stage_bytes = body_bytes * stage_layers / layers + model['vocab_size'] * model['hidden_size'] * embed_bits / 8.0
    weights_per_gpu = stage_bytes / tp
    kv_elem = options['kv_bytes']
    per_token = kv_bytes_per_token(model, kv_elem)
    per_token_gpu = kv_bytes_per_token(model, kv_elem, tp, stage_layers)
    cpu_kv = options['cpu_kv_cache_bytes']
    if cpu_kv is None:
        budget = memory * util
        kv_cache_bytes = budget - weights_per_gpu - reserve
        tokens = _floor_to(kv_cache_bytes / per_token_gpu, KV_BLOCK_TOKENS) if kv_cache_bytes > 0 else 0
    else:
        # The CPU build: a KV cache of the size given, beside the weights in host memory.
        budget = memory - cpu_kv
        kv_cache_bytes = cpu_kv
        tokens = _floor_to(cpu_kv / per_token_gpu, CPU_KV_BLOCK_TOKENS)

    max_pos = model.get('max_position_embeddings')
    given_len = options['max_model_len']
    if given_len is not None:
        max_model_len, len_source = given_len, 'given'
        needed = given_len
    elif max_pos and tokens >= max_pos:
        max_model_len, len_source = max_pos, 'model'
        needed = max_pos
    else:
        needed = min(max_pos, MIN_USEFUL_CONTEXT) if max_pos else MIN_USEFUL_CONTEXT
        # Capped to whole 1024-token steps; None when not even a useful context fits.
        max_model_len = max(_floor_to(tokens, 1024), needed) if tokens >= needed else None
        len_source = 'capped' if max_model_len is not None else 'none'
    weights_fit = weights_per_gpu + reserve < budget
    kv_fits = tokens >= needed
    vendors = sorted(set(gpu['vendor'] for gpu in used))
    concurrency = tokens / float(max_model_len) if max_model_len and weights_fit else 0.0
    sequences = int(concurrency)
    if options['max_num_seqs'] is not None:
        sequences = min(sequences, options['max_num_seqs'])

    active_body = (model['params_active'] - vocab) * body_bits / 8.0
    lm_head = model['vocab_size'] * model['hidden_size'] * embed_bits / 8.0
    read_per_token = active_body + lm_head
    bandwidth_bytes = bandwidth * GB
    decode = tp * bandwidth_bytes / read_per_token
    kv_read = (max_model_len or 0) * kv_bytes_per_token(model, kv_elem, tp)
    decode_long = bandwidth_bytes / (read_per_token / tp + kv_read)
    return {
        'tensor_parallel_size': tp,
        'pipeline_parallel_size': pp,
        'gpus_used': [gpu['index'] for gpu in used],
        'gpu_names': [gpu['name'] for gpu in used],
        'vendors': vendors,
        'fits': bool(weights_fit and kv_fits and len(vendors) == 1),
        'weights_fit': bool(weights_fit),
        'memory_bytes_per_gpu': int(memory),
        'memory_budget_bytes_per_gpu': int(budget),
        'memory_bandwidth_gbps': bandwidth,
        'weight_format': format_text,
        'weight_bits_effective': round(body_bits, 4),
        'weight_bytes_total': int(round(weights_total)),
        'weight_bytes_per_gpu': int(round(weights_per_gpu)),
        'reserve_bytes_per_gpu': int(reserve),
        'kv_cache_dtype': options['kv_cache_dtype'],
        'kv_cache_dtype_bytes': kv_elem,
        'kv_bytes_per_token': int(per_token),
        'kv_bytes_per_token_per_gpu': int(per_token_gpu),
        'kv_heads_per_gpu': kv_heads_per_gpu(model, tp),
        'kv_cache_bytes_per_gpu': int(max(kv_cache_bytes, 0)),
        'kv_cache_tokens': int(tokens),
        'max_model_len': max_model_len,
        'max_model_len_source': len_source,
        'kv_cache_concurrency': round(concurrency, 2),
        'max_concurrent_sequences': sequences,
        'decode_bytes_per_token': int(round(read_per_token)),
        'decode_tokens_per_s_ceiling': round(decode, 1),
        'decode_tokens_per_s_ceiling_at_max_model_len': round(decode_long, 1),
        'gpu_memory_utilization': util,
        '_needed_tokens': needed,
    }


def _options(gpu_memory_utilization, max_model_len, kv_cache_dtype, weight_bits, reserve_gib, max_num_seqs, model,
             cpu_kv_cache_gib=None):
    util = _number(gpu_memory_utilization, 'gpu_memory_utilization')
    if util > 1:
        raise CapacityError('gpu_memory_utilization is a fraction of GPU memory (0 < x <= 1), not %r'
                            % (gpu_memory_utilization,))
    reserve = _number(reserve_gib, 'reserve_gib', positive=False)
    if reserve < 0:
        raise CapacityError('reserve_gib must not be negative, not %r' % (reserve_gib,))
    kv_name, kv_bytes = kv_cache_dtype_bytes(kv_cache_dtype, model)
    if weight_bits is not None:
        _format_bits(model, weight_bits)
    return {
        'gpu_memory_utilization': util,
        'max_model_len': _int(max_model_len, 'max_model_len', allow_none=True),
        'kv_cache_dtype': kv_name,
        'kv_bytes': kv_bytes,
        'weight_bits': weight_bits,
        'reserve_bytes': reserve * GIB,
        'max_num_seqs': _int(max_num_seqs, 'max_num_seqs', allow_none=True),
        'cpu_kv_cache_bytes': (None if cpu_kv_cache_gib is None
                               else _number(cpu_kv_cache_gib, 'cpu_kv_cache_gib') * GIB),
    }


def plan(gpus, model, tensor_parallel_size=None, pipeline_parallel_size=1,
         gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION, max_model_len=None, kv_cache_dtype='auto',
         weight_bits=None, reserve_gib=DEFAULT_RESERVE_GIB, max_num_seqs=None,
         min_concurrent_sequences=DEFAULT_MIN_CONCURRENT_SEQUENCES, cpu_kv_cache_gib=None, tables=None):
    """Plan serving ``model`` with vLLM on ``gpus``; see the module docstring for the assumptions.

    Without tensor_parallel_size the planner picks one: the smallest fitting
    size that holds min_concurrent_sequences sequences of max_model_len,
    else the fitting size that holds the most. ``model`` may also be a list of
    models: then each gets a GPU of its own (plan_models). cpu_kv_cache_gib
    plans vLLM's CPU build: ``gpus`` is then the host (its memory), and the KV
    cache is that many GiB.
    """
    tables = tables or {}
    if isinstance(model, (list, tuple)):
        if tensor_parallel_size not in (None, 1) or pipeline_parallel_size not in (None, 1):
            raise CapacityError('a list of models means per_gpu_models, one model per GPU: leave '
                                'tensor_parallel_size and pipeline_parallel_size unset')
        return plan_models(gpus, model, gpu_memory_utilization=gpu_memory_utilization,
                           max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype, weight_bits=weight_bits,
                           reserve_gib=reserve_gib, max_num_seqs=max_num_seqs, tables=tables)
    gpu_list = resolve_gpus(gpus, tables.get('gpus'))
    spec = resolve_model(model, tables.get('models'))
    options = _options(gpu_memory_utilization, max_model_len, kv_cache_dtype, weight_bits, reserve_gib,
                       max_num_seqs, spec, cpu_kv_cache_gib=cpu_kv_cache_gib)
    pp = _int(pipeline_parallel_size, 'pipeline_parallel_size')
    min_sequences = _int(min_concurrent_sequences, 'min_concurrent_sequences')
    if pp > len(gpu_list):
        raise CapacityError('pipeline_parallel_size %d needs at least %d GPUs, but %d were given'
                            % (pp, pp, len(gpu_list)))
    if pp > spec['num_layers']:
        raise CapacityError('pipeline_parallel_size %d exceeds the %d layers of %s'
                            % (pp, spec['num_layers'], spec['name']))
    valid = valid_tensor_parallel_sizes(spec, len(gpu_list) // pp)
    candidates = dict((tp, _evaluate(gpu_list, spec, tp, pp, options)) for tp in valid)
    fitting = [tp for tp in valid if candidates[tp]['fits']]
    if tensor_parallel_size is not None:
        chosen = _int(tensor_parallel_size, 'tensor_parallel_size')
        if chosen not in valid:
            raise CapacityError(_invalid_tp_message(chosen, pp, spec, len(gpu_list), valid))
    elif fitting:
        roomy = [tp for tp in fitting if candidates[tp]['kv_cache_concurrency'] >= min_sequences]
        chosen = roomy[0] if roomy else max(fitting, key=lambda tp: (candidates[tp]['kv_cache_concurrency'], -tp))
    else:
        chosen = valid[-1]
    result = dict(candidates[chosen])
    result['smallest_fitting_tensor_parallel_size'] = fitting[0] if fitting else None
    result['gpus_needed'] = _gpus_needed(gpu_list[0], spec, options)
    result['valid_tensor_parallel_sizes'] = valid
    if not fitting:
        result['recommended_layout'] = None
    else:
        result['recommended_layout'] = 'per_gpu' if chosen * pp == 1 else 'tensor_parallel'
    result['min_concurrent_sequences'] = min_sequences
    result['gpu_count'] = len(gpu_list)
    result['model'] = _model_summary(spec)
    result['reasons'] = _reasons(result, spec, candidates, fitting, options, tensor_parallel_size is None,
                                 len(gpu_list))
    result.pop('_needed_tokens')
    return result


def _gpus_needed(gpu, spec, options):
    """Fewest copies of ``gpu`` (tensor parallel, up to MAX_GPUS_CONSIDERED) on which the model fits."""
    for tp in valid_tensor_parallel_sizes(spec, MAX_GPUS_CONSIDERED):
        if _evaluate([gpu] * tp, spec, tp, 1, options)['fits']:
            return tp
    return None


def plan_models(gpus, models, gpu_memory_utilization=DEFAULT_GPU_MEMORY_UTILIZATION, max_model_len=None,
                kv_cache_dtype='auto', weight_bits=None, reserve_gib=DEFAULT_RESERVE_GIB, max_num_seqs=None,
                tables=None):
    """The per_gpu_models layout: models[i] alone on gpus[i] (tensor_parallel_size 1 each)."""
    tables = tables or {}
    gpu_list = resolve_gpus(gpus, tables.get('gpus'))
    models = list(models or [])
    if not models:
        raise CapacityError('no model given: per_gpu_models needs a list of models, one per GPU')
    if len(models) > len(gpu_list):
        raise CapacityError('%d models need %d GPUs for per_gpu_models, but %d were given: serve fewer models '
                            'or add GPUs' % (len(models), len(models), len(gpu_list)))
    plans = []
    for pos, model in enumerate(models):
        gpu = gpu_list[pos]
        sub = plan([dict(gpu, memory_bytes=gpu['memory_bytes'])], model, tensor_parallel_size=1,
                   gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                   kv_cache_dtype=kv_cache_dtype, weight_bits=weight_bits, reserve_gib=reserve_gib,
                   max_num_seqs=max_num_seqs, min_concurrent_sequences=1, tables=tables)
        sub['gpus_used'] = [gpu['index']]
        plans.append(sub)
    fits = all(sub['fits'] for sub in plans)
    reasons = []
    for sub in plans:
        verdict = 'fits' if sub['fits'] else 'does not fit'
        reasons.append('GPU %s (%s): %s %s alone (weights %s, %s tokens of KV cache).' % (
            sub['gpus_used'][0], sub['gpu_names'][0], sub['model']['name'], verdict,
            _gb(sub['weight_bytes_per_gpu']), _count(sub['kv_cache_tokens'])))
        if not sub['fits']:
            reasons.extend(sentence for sentence in sub['reasons'] if sentence.startswith('Does not fit'))
    return {
        'fits': fits,
        'recommended_layout': 'per_gpu_models',
        'gpu_memory_utilization': plans[0]['gpu_memory_utilization'],
        'gpu_count': len(gpu_list),
        'models': plans,
        'reasons': reasons,
    }


def _model_summary(spec):
    return dict((field, spec.get(field)) for field in (
        'key', 'name', 'hf_repo', 'weight_dtype', 'params_total', 'params_active', 'params_source', 'moe',
        'num_layers', 'num_attention_heads', 'num_key_value_heads', 'head_dim', 'max_position_embeddings'))


def _invalid_tp_message(tp, pp, spec, gpu_count, valid):
    problems = []
    if tp * pp > gpu_count:
        problems.append('tensor_parallel_size %d x pipeline_parallel_size %d needs %d GPUs but %d were given'
                        % (tp, pp, tp * pp, gpu_count))
    if spec['num_attention_heads'] % tp:
        problems.append('%d does not divide the %d attention heads of %s'
                        % (tp, spec['num_attention_heads'], spec['name']))
    kv_heads = spec['num_key_value_heads']
    if kv_heads % tp and tp % kv_heads:
        problems.append('%d neither divides the %d KV heads nor is a multiple of them' % (tp, kv_heads))
    return 'tensor_parallel_size %d does not work: %s. Valid sizes here: %s.' % (
        tp, '; '.join(problems), ', '.join(str(size) for size in valid))


# --------------------------------------------------------------------------- reasons

def _gb(value):
    return '%.1f GB' % (value / float(GB))


def _gib(value):
    return '%.1f GiB' % (value / float(GIB))


def _count(value):
    return '{:,}'.format(int(value))


def _reasons(result, spec, candidates, fitting, options, auto, gpu_count):
    tp, pp = result['tensor_parallel_size'], result['pipeline_parallel_size']
    reasons = []
    layout = 'tensor_parallel_size %d' % tp + (' x pipeline_parallel_size %d' % pp if pp > 1 else '')
    params = spec['params_total'] / 1e9
    reasons.append('Weights: %s (%s) in total (%.1fB parameters, %s at %.3g bits per weight%s); %s per GPU at %s.'
                   % (_gb(result['weight_bytes_total']), _gib(result['weight_bytes_total']), params,
                      result['weight_format'], result['weight_bits_effective'],
                      ', embeddings in 16 bits' if result['weight_bits_effective'] < 16 else '',
                      _gib(result['weight_bytes_per_gpu']), layout))
    if len(result['vendors']) > 1:
        reasons.append('Does not fit: one vLLM instance cannot span %s GPUs; give only one vendor\'s GPUs.'
                       % ' and '.join(result['vendors']))
    if options['cpu_kv_cache_bytes'] is not None:
        reasons.append('CPU: the KV cache is the %s given (VLLM_CPU_KVCACHE_SPACE), %s tokens in blocks of %d; '
                       'the host\'s %s hold it, the weights and a %s reserve.' % (
                           _gib(result['kv_cache_bytes_per_gpu']), _count(result['kv_cache_tokens']),
                           CPU_KV_BLOCK_TOKENS, _gib(result['memory_bytes_per_gpu']),
                           _gib(result['reserve_bytes_per_gpu'])))
    else:
        reasons.append('Memory per GPU: %s x %.2f = %s; minus the weights and a %s reserve (activations, CUDA '
                       'graphs, CUDA context) leaves %s for the KV cache.' % (
                           _gib(result['memory_bytes_per_gpu']), result['gpu_memory_utilization'],
                           _gib(result['memory_budget_bytes_per_gpu']), _gib(result['reserve_bytes_per_gpu']),
                           _gib(result['kv_cache_bytes_per_gpu'])))
    smallest = fitting[0] if fitting else None
    if not result['weights_fit']:
        reasons.append('Does not fit: the weights need %s (%s) per GPU but only %s remain after the reserve. %s' % (
            _gib(result['weight_bytes_per_gpu']), _gb(result['weight_bytes_per_gpu']),
            _gib(max(result['memory_budget_bytes_per_gpu'] - result['reserve_bytes_per_gpu'], 0)),
            _advice(result, spec, smallest, gpu_count)))
    elif result['kv_cache_tokens'] < candidates[tp]['_needed_tokens']:
        needed = candidates[tp]['_needed_tokens']
        reasons.append('Does not fit: one sequence of %s tokens needs %s of KV cache per GPU but %s (%s tokens) '
                       'remain. %s' % (
                           _count(needed), _gib(needed * result['kv_bytes_per_token_per_gpu']),
                           _gib(result['kv_cache_bytes_per_gpu']), _count(result['kv_cache_tokens']),
                           _advice(result, spec, smallest, gpu_count, kv_short=True)))
    kv_text = 'KV cache: %s bytes per token for the model (2 x %d layers x %d KV heads x %d head_dim x %d bytes, ' \
        'kv_cache_dtype %s), %s per GPU; %s tokens fit' % (
            _count(result['kv_bytes_per_token']), spec['num_layers'], spec['num_key_value_heads'], spec['head_dim'],
            result['kv_cache_dtype_bytes'], result['kv_cache_dtype'], _count(result['kv_bytes_per_token_per_gpu']),
            _count(result['kv_cache_tokens']))
    if result['max_model_len']:
        kv_text += ', %.2f sequences of %s tokens' % (result['kv_cache_concurrency'],
                                                      _count(result['max_model_len']))
    reasons.append(kv_text + '.')
    if spec['num_key_value_heads'] < tp:
        reasons.append('The model has %d KV heads, fewer than tensor_parallel_size %d: every GPU keeps a whole '
                       'KV head, so the KV cache is replicated %dx.' % (
                           spec['num_key_value_heads'], tp, tp // spec['num_key_value_heads']))
    max_pos = spec.get('max_position_embeddings')
    if result['max_model_len_source'] == 'capped':
        reasons.append('max_model_len %s is recommended: the model allows %s tokens but only %s tokens of KV cache '
                       'fit.' % (_count(result['max_model_len']), _count(max_pos) if max_pos else 'more',
                                 _count(result['kv_cache_tokens'])))
    if options['max_model_len'] and max_pos and options['max_model_len'] > max_pos:
        reasons.append('max_model_len %s is longer than max_position_embeddings %s: vLLM refuses it unless rope '
                       'scaling (YaRN) is configured for the model.' % (
                           _count(options['max_model_len']), _count(max_pos)))
    if options['max_num_seqs'] is not None and options['max_num_seqs'] < int(result['kv_cache_concurrency']):
        reasons.append('max_num_seqs %d caps concurrency below the %d sequences the KV cache holds.'
                       % (options['max_num_seqs'], int(result['kv_cache_concurrency'])))
    decode_text = 'Decode ceiling%s: %.1f tokens/s for one stream (%d x %g GB/s / %s read per token%s)' % (
        '' if result['weights_fit'] else ' (if the weights fitted)', result['decode_tokens_per_s_ceiling'], tp,
        result['memory_bandwidth_gbps'], _gb(result['decode_bytes_per_token']),
        ', the %.1fB activated parameters of the MoE' % (spec['params_active'] / 1e9) if spec['moe'] else '')
    if result['max_model_len']:
        decode_text += '; %.1f with %s tokens of context' % (
            result['decode_tokens_per_s_ceiling_at_max_model_len'], _count(result['max_model_len']))
    reasons.append(decode_text + '. Real decode is slower: kernels reach part of the peak bandwidth and tensor '
                   'parallelism adds communication.')
    reasons.append(_layout_reason(result, candidates, fitting, auto, gpu_count))
    return reasons


def _advice(result, spec, smallest, gpu_count, kv_short=False):
    tips = []
    tp = result['tensor_parallel_size']
    if smallest is not None and smallest != tp:
        tips.append('use tensor_parallel_size %d (the smallest that fits)' % smallest)
    elif smallest is None and result['gpus_needed']:
        tips.append('%d such GPUs with tensor_parallel_size %d would fit' % (
            result['gpus_needed'], result['gpus_needed']))
    if kv_short:
        tips.append('lower max_model_len')
        if result['kv_cache_dtype_bytes'] > 1:
            tips.append('set kv_cache_dtype fp8 (halves the KV cache)')
        if result['gpu_memory_utilization'] < 0.95:
            tips.append('raise gpu_memory_utilization')
    if result['weight_bits_effective'] > 8.5:
        tips.append('serve a quantised checkpoint (FP8 halves the weights, AWQ int4 quarters them)')
    tips.append('or use more or larger GPUs')
    return 'Options: %s.' % '; '.join(tips)


def _layout_reason(result, candidates, fitting, auto, gpu_count):
    tp, pp = result['tensor_parallel_size'], result['pipeline_parallel_size']
    if not fitting:
        return 'Layout: none fits on %d GPU%s; the figures above are for %s.' % (
            gpu_count, '' if gpu_count == 1 else 's',
            'tensor_parallel_size %d' % tp + (' x pipeline_parallel_size %d' % pp if pp > 1 else ''))
    if result['recommended_layout'] == 'per_gpu':
        text = 'Layout: per_gpu: the model fits one GPU with room for %.2f sequences of %s tokens' % (
            result['kv_cache_concurrency'], _count(result['max_model_len']))
        text += '; run one instance per GPU.' if gpu_count > 1 else '.'
        return text
    text = 'Layout: tensor_parallel across %d GPUs' % (tp * pp)
    if 1 in fitting and auto:
        text += (': one GPU would hold only %.2f sequences of %s tokens (fewer than min_concurrent_sequences %d); '
                 'splitting the weights leaves %.2f.' % (
                     candidates[1]['kv_cache_concurrency'], _count(candidates[1]['max_model_len']),
                     result['min_concurrent_sequences'], result['kv_cache_concurrency']))
    elif 1 not in fitting:
        text += ': the model does not fit one GPU.'
    else:
        text += '.'
    return text


# --------------------------------------------------------------------------- report

def _duration(seconds):
    hours = seconds / 3600.0
    if hours < 1:
        return '%.0f min' % (seconds / 60.0)
    if hours < 48:
        return '%.1f h' % hours
    days = hours / 24.0
    if days < 730:
        return '%.1f days' % days
    return '%.1f years' % (days / 365.25)


def _aligned(rows):
    width = max(len(row[0]) for row in rows)
    return ['%s  %s' % (label.ljust(width), value) for label, value in rows]


def report_lines(result):
    """Aligned human lines for a plan (or a per_gpu_models plan)."""
    if not isinstance(result, dict) or 'fits' not in result:
        raise CapacityError('report_lines needs the result of plan(), not %r' % (result,))
    if result.get('recommended_layout') == 'per_gpu_models' and 'models' in result:
        lines = ['layout: per_gpu_models (%s)' % ('fits' if result['fits'] else 'does not fit')]
        for sub in result['models']:
            lines.append('--- GPU %s: %s' % (sub['gpus_used'][0], sub['model']['name']))
            lines.extend('  ' + line for line in report_lines(sub))
        return lines
    model = result['model']
    tp, pp = result['tensor_parallel_size'], result['pipeline_parallel_size']
    names = result['gpu_names']
    if len(set(names)) == 1:
        gpu_text = '%d x %s (%s, %g GB/s)' % (len(names), names[0], _gib(result['memory_bytes_per_gpu']),
                                              result['memory_bandwidth_gbps'])
    else:
        gpu_text = ', '.join(names)
    if result.get('gpu_count', len(names)) > len(names):
        gpu_text += ' per instance; %d GPUs given' % result['gpu_count']
    params = '%.1fB' % (model['params_total'] / 1e9)
    if model['moe']:
        params += ' (%.1fB active)' % (model['params_active'] / 1e9)
    max_len = result['max_model_len']
    if result['fits']:
        verdict = 'fits'
    else:
        verdict = 'does not fit: ' + next(
            (r[len('Does not fit: '):] for r in result['reasons'] if r.startswith('Does not fit')), '')
    len_text = {'given': 'given', 'model': "the model's maximum", 'capped': 'capped to what the KV cache holds',
                'none': 'no useful context fits'}[result['max_model_len_source']]
    rows = [
        ('model', '%s, %s parameters, %s' % (model['name'], params, result['weight_format'])),
        ('GPUs', gpu_text),
        ('layout', '%s (tensor_parallel_size %d, pipeline_parallel_size %d)' % (
            result['recommended_layout'], tp, pp) if result['recommended_layout']
         else 'none fits (figures for tensor_parallel_size %d, pipeline_parallel_size %d)' % (tp, pp)),
        ('weights/GPU', '%s (%s); %s in total' % (_gb(result['weight_bytes_per_gpu']),
                                                  _gib(result['weight_bytes_per_gpu']),
                                                  _gb(result['weight_bytes_total']))),
        ('KV/token', '%s B for the model, %s B per GPU (kv_cache_dtype %s)' % (
            _count(result['kv_bytes_per_token']), _count(result['kv_bytes_per_token_per_gpu']),
            result['kv_cache_dtype'])),
        ('KV cache/GPU', '%s at gpu_memory_utilization %.2f after a %s reserve' % (
            _gib(result['kv_cache_bytes_per_gpu']), result['gpu_memory_utilization'],
            _gib(result['reserve_bytes_per_gpu']))),
        ('KV tokens', _count(result['kv_cache_tokens'])),
        ('max_model_len', '%s (%s)' % (_count(max_len), len_text) if max_len else len_text),
        ('concurrent seqs', '%d at %s tokens (%.2fx)' % (result['max_concurrent_sequences'], _count(max_len),
                                                         result['kv_cache_concurrency']) if max_len else '0'),
        ('decode ceiling', '%.1f tokens/s single stream%s' % (
            result['decode_tokens_per_s_ceiling'],
            ', %.1f at %s tokens of context' % (result['decode_tokens_per_s_ceiling_at_max_model_len'],
                                                _count(max_len)) if max_len else '')),
        ('verdict', verdict),
    ]
    if not result['fits'] and result.get('gpus_needed'):
        needed = result['gpus_needed']
        rows.append(('would fit on', '%d such GPUs (tensor_parallel_size %d)' % (needed, needed)))
    return _aligned(rows)


# --------------------------------------------------------------------------- training

def _resolve_params(params, tables):
    if isinstance(params, str):
        lowered = params.strip().lower()
        for section in ('training', 'models'):
            for key, entry in (tables.get(section) or {}).items():
                if key.lower() == lowered or str(entry.get('hf_repo') or '').lower() == lowered:
                    value = entry.get('params') or entry.get('params_total')
                    return key, _number(value, '%s: params' % key)
        for key, value in _FALLBACK_TRAINING_SIZES:
            if key == lowered:
                return key, value
        known = sorted(tables.get('training') or dict(_FALLBACK_TRAINING_SIZES))
        raise CapacityError('unknown model size %r: give a number of parameters or one of %s'
                            % (params, ', '.join(known)))
    return None, _number(params, 'params')


def training_time(gpus, params, tokens=None, mfu=DEFAULT_MFU, num_gpus=None, tokens_per_param=None, tables=None):
    """Time to train a model from scratch: 6 x params x tokens / (peak BF16 x MFU x GPUs)."""
    tables = tables or {}
    gpu_list = resolve_gpus(gpus, tables.get('gpus'))
    key, n_params = _resolve_params(params, tables)
    mfu = _number(mfu, 'mfu')
    if mfu > 1:
        raise CapacityError('mfu is a fraction of peak throughput (0 < x <= 1), not %r' % (mfu,))
    count = _int(num_gpus, 'num_gpus') if num_gpus is not None else len(gpu_list)
    gpu = min(gpu_list, key=lambda g: g['bf16_dense_tflops'] or 0)
    if not gpu['bf16_dense_tflops']:
        raise CapacityError('GPU %s has no bf16_dense_tflops: give it by hand to estimate training time'
                            % gpu['name'])
    ratio = _number(tokens_per_param, 'tokens_per_param') if tokens_per_param is not None \
        else CHINCHILLA_TOKENS_PER_PARAM
    n_tokens = _number(tokens, 'tokens') if tokens is not None else ratio * n_params
    flops = 6.0 * n_params * n_tokens
    rate = gpu['bf16_dense_tflops'] * 1e12 * mfu * count
    seconds = flops / rate
    state = TRAINING_STATE_BYTES_PER_PARAM * n_params
    memory = min(g['memory_bytes'] for g in gpu_list)
    fits_memory = state / count <= memory
    reasons = [
        '%s FLOPs = 6 x %s parameters x %s tokens%s.' % (
            '%.3g' % flops, _count(n_params), _count(n_tokens),
            ' (%g tokens per parameter, Chinchilla)' % ratio if tokens is None else ''),
        'At %g TFLOPS dense BF16 x %d GPU%s x %.0f%% MFU = %.1f TFLOPS: %s.' % (
            gpu['bf16_dense_tflops'], count, '' if count == 1 else 's', mfu * 100, rate / 1e12, _duration(seconds)),
        'Training state %s (%d bytes per parameter: BF16 weights and gradients, FP32 master weights, Adam moments; '
        'activations not counted): %s per GPU against %s of memory%s.' % (
            _gb(state), TRAINING_STATE_BYTES_PER_PARAM, _gb(state / count), _gib(memory),
            '' if fits_memory else ', so it does not fit without offloading or more GPUs'),
    ]
    return {
        'model': key,
        'params': int(n_params),
        'tokens': int(n_tokens),
        'tokens_per_param': round(n_tokens / n_params, 3),
        'flops': flops,
        'gpu': gpu['name'],
        'num_gpus': count,
        'bf16_dense_tflops_per_gpu': gpu['bf16_dense_tflops'],
        'mfu': mfu,
        'effective_tflops': round(rate / 1e12, 3),
        'seconds': round(seconds, 1),
        'hours': round(seconds / 3600.0, 2),
        'days': round(seconds / 86400.0, 3),
        'duration': _duration(seconds),
        'training_state_bytes': int(state),
        'training_state_bytes_per_gpu': int(state / count),
        'fits_memory': bool(fits_memory),
        'reasons': reasons,
    }


def training_table(gpus, sizes=None, mfu=DEFAULT_MFU, num_gpus=None, tokens_per_param=None, tables=None):
    """training_time for each size (default: 125M, 355M, 1.3B, 3B, 7B)."""
    tables = tables or {}
    if sizes is None:
        sizes = [key for key in TRAINING_TABLE_SIZES if key in (tables.get('training') or {})] \
            or [size[0] for size in _FALLBACK_TRAINING_SIZES]
    if not isinstance(sizes, (list, tuple)) or not sizes:
        raise CapacityError('sizes must be a non-empty list of parameter counts or training preset names')
    return [training_time(gpus, size, mfu=mfu, num_gpus=num_gpus, tokens_per_param=tokens_per_param,
                          tables=tables) for size in sizes]


def _short(number):
    for limit, suffix in ((1e12, 'T'), (1e9, 'B'), (1e6, 'M'), (1e3, 'k')):
        if number >= limit:
            return ('%.1f' % (number / limit)).rstrip('0').rstrip('.') + suffix
    return '%d' % number


def training_table_lines(rows):
    """Aligned lines for training_table() rows: a title line, a header, one line per size."""
    if not rows:
        raise CapacityError('training_table_lines needs the rows of training_table()')
    first = rows[0]
    title = ('Training from scratch on %d x %s: %g TFLOPS dense BF16 per GPU at %.0f%% MFU, '
             '%g tokens per parameter, 6 x N x D FLOPs' % (
                 first['num_gpus'], first['gpu'], first['bf16_dense_tflops_per_gpu'], first['mfu'] * 100,
                 first['tokens_per_param']))
    header = ('model', 'params', 'tokens', 'FLOPs', 'time', 'training state per GPU (16 B/param)')
    table = [header]
    for row in rows:
        table.append((row['model'] or _short(row['params']), _short(row['params']), _short(row['tokens']),
                      '%.2e' % row['flops'], row['duration'],
                      '%s%s' % (_gb(row['training_state_bytes_per_gpu']),
                                '' if row['fits_memory'] else ' (does not fit)')))
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return [title] + ['  '.join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
                      for line in table]


# --------------------------------------------------------------------------- module and action plugin

ARGUMENT_SPEC = dict(
    gpus=dict(type='list', elements='raw', required=True),
    model=dict(type='raw', required=True),
    tensor_parallel_size=dict(type='int'),
    pipeline_parallel_size=dict(type='int', default=1),
    gpu_memory_utilization=dict(type='float', default=DEFAULT_GPU_MEMORY_UTILIZATION),
    max_model_len=dict(type='int'),
    kv_cache_dtype=dict(type='str', default='auto', choices=sorted(KV_CACHE_DTYPES)),
    weight_bits=dict(type='float'),
    reserve_gib=dict(type='float', default=DEFAULT_RESERVE_GIB),
    max_num_seqs=dict(type='int'),
    min_concurrent_sequences=dict(type='int', default=DEFAULT_MIN_CONCURRENT_SEQUENCES),
    fail_if_not_fits=dict(type='bool', default=False),
)


def plan_from_params(params, tables=None):
    """The capacity_plan module's result for validated ``params``: plan, report_lines, failed, msg.

    Raises CapacityError on bad input. ``failed`` is only set when the plan
    does not fit and fail_if_not_fits is true.
    """
    result = plan(params['gpus'], params['model'], tensor_parallel_size=params.get('tensor_parallel_size'),
                  pipeline_parallel_size=params.get('pipeline_parallel_size') or 1,
                  gpu_memory_utilization=params.get('gpu_memory_utilization', DEFAULT_GPU_MEMORY_UTILIZATION),
                  max_model_len=params.get('max_model_len'), kv_cache_dtype=params.get('kv_cache_dtype') or 'auto',
                  weight_bits=params.get('weight_bits'),
                  reserve_gib=DEFAULT_RESERVE_GIB if params.get('reserve_gib') is None else params['reserve_gib'],
                  max_num_seqs=params.get('max_num_seqs'),
                  min_concurrent_sequences=params.get('min_concurrent_sequences') or DEFAULT_MIN_CONCURRENT_SEQUENCES,
                  tables=tables)
    outcome = {'changed': False, 'plan': result, 'report_lines': report_lines(result)}
    if params.get('fail_if_not_fits') and not result['fits']:
        problems = [reason for reason in result['reasons'] if reason.startswith('Does not fit')]
        outcome['failed'] = True
        outcome['msg'] = ' '.join(problems) or 'The model does not fit: %s' % ' '.join(result['reasons'])
    return outcome
