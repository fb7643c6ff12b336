# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The capacity planner's memory arithmetic: bytes of the weights, bytes of the KV cache per token, valid TP sizes.

Pure functions over a model resolved by _capacity_tables.resolve_model; the
planner (_capacity) applies them to each layout. Private to this collection;
no Ansible import.

Assumptions:
  Weights     params x bits / 8. Quantised formats (fp8, awq, gptq) keep the
              embedding and lm_head matrices in 16 bits and add their scales
              and zero points (_capacity_tables.WEIGHT_FORMATS). Norms, biases
              and MoE routers are counted in params but not told apart (under
              0.1 %).
  KV cache    bytes per token = 2 (K and V) x layers x KV heads x head_dim x
              bytes of the KV dtype (auto = the model's 16-bit dtype; fp8 = 1).
              Tensor parallelism splits the KV heads; when there are fewer KV
              heads than GPUs every GPU keeps a whole head (replication).
  Valid TP    divides the attention heads, and divides the KV heads or is a
              multiple of them.
"""

from __future__ import annotations

from ansible_collections.homelab.llm_server.plugins.module_utils._capacity_tables import (
    WEIGHT_FORMATS,
    CapacityError,
    _number,
    vocab_params,
)

# vLLM --kv-cache-dtype: bytes per element; None = the model's activation dtype.
KV_CACHE_DTYPES = {
    'auto': None, 'bfloat16': 2, 'float16': 2, 'half': 2,
    'fp8': 1, 'fp8_e4m3': 1, 'fp8_e5m2': 1, 'fp8_inc': 1,
}


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
