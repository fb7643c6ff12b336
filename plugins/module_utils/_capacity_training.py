# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Time to train an LLM from scratch on given GPUs, for one model size or as a table of sizes.

Private to this collection; no Ansible import. Without tables (the module on a
target host) the sizes of the default table are still known.

Assumptions:
  Training    6 x params x tokens FLOPs (forward and backward, Kaplan et al.
              2020), tokens = 20 x params by default (Chinchilla, Hoffmann et
              al. 2022), at dense BF16 peak x MFU (0.4 by default). Training
              state is 16 bytes per parameter (BF16 weights and gradients,
              FP32 master weights and two Adam moments), activations not
              counted, sharded evenly over the GPUs.
"""

from __future__ import annotations

from ansible_collections.homelab.llm_server.plugins.module_utils._capacity_tables import (
    CapacityError,
    _count,
    _gb,
    _gib,
    _int,
    _number,
    resolve_gpus,
)

DEFAULT_MFU = 0.4
CHINCHILLA_TOKENS_PER_PARAM = 20
TRAINING_STATE_BYTES_PER_PARAM = 16
TRAINING_TABLE_SIZES = ('gpt-125m', 'gpt-355m', 'gpt-1.3b', 'gpt-3b', 'gpt-7b')
# Used when no table is loaded (the module on a target host).
_FALLBACK_TRAINING_SIZES = (('gpt-125m', 125e6), ('gpt-355m', 355e6), ('gpt-1.3b', 1.3e9),
                            ('gpt-3b', 3e9), ('gpt-7b', 7e9))


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
