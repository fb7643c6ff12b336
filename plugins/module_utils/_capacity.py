# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Capacity planner for serving an LLM with vLLM: which layout fits the GPUs, and the report that says why.

Pure arithmetic over the GPU and model tables in data/planner/ (or over specs
given by hand); private to this collection. No Ansible import: the filters,
the action plugin and the module all use these functions. The tables, the
units and CapacityError are in _capacity_tables; the bytes of weights and KV
cache, with their assumptions, in _capacity_memory; training time in
_capacity_training.

Assumptions of the planner:
  Parallelism weights split evenly over tensor_parallel_size GPUs, embedding
              and lm_head included (vLLM shards both over the vocabulary).
              Pieces vLLM replicates (norms; the K/V projections when there are
              fewer KV heads than GPUs) are under 1 % and ignored. With
              pipeline parallelism the heaviest stage holds ceil(layers / pp)
              layers and one vocabulary matrix; that stage is the one reported.
              tp x pp is at most the number of GPUs.
  KV cache    tokens are counted in vLLM blocks of 16.
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
  Decode      single-stream ceiling = tp x per-GPU bandwidth / bytes read per
              token; bytes read = active parameters (MoE: the activated ones)
              in their format, without the input embedding table, which is
              only looked up. It ignores communication between GPUs, kernel
              efficiency (real kernels reach roughly 60-80 % of peak bandwidth)
              and, in the plain figure, the KV cache reads (the figure at
              max_model_len adds one full-length sequence). Pipeline stages
              run one after the other for one stream, so pp does not raise it.
"""

from __future__ import annotations

import math

from ansible_collections.homelab.llm_server.plugins.module_utils._capacity_memory import (
    KV_CACHE_DTYPES,
    _format_bits,
    kv_bytes_per_token,
    kv_cache_dtype_bytes,
    kv_heads_per_gpu,
    valid_tensor_parallel_sizes,
)
from ansible_collections.homelab.llm_server.plugins.module_utils._capacity_tables import (
    GB,
    GIB,
    CapacityError,
    _count,
    _gb,
    _gib,
    _int,
    _number,
    resolve_gpus,
    resolve_model,
    vocab_params,
)

DEFAULT_GPU_MEMORY_UTILIZATION = 0.90
DEFAULT_RESERVE_GIB = 4.0
DEFAULT_MIN_CONCURRENT_SEQUENCES = 4
# A context shorter than this is not worth serving; without a max_model_len the
# plan fits only if at least this much (or the model's whole context) fits.
MIN_USEFUL_CONTEXT = 4096
# gpus_needed looks this far: tensor parallel groups of the first GPU given.
MAX_GPUS_CONSIDERED = 8
KV_BLOCK_TOKENS = 16
CPU_KV_BLOCK_TOKENS = 128
LAYOUTS = ('tensor_parallel', 'per_gpu', 'per_gpu_models')


# --------------------------------------------------------------------------- plan

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
    """Plan serving ``model`` with vLLM on ``gpus``; the docstrings of this module and _capacity_memory state the assumptions.

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
