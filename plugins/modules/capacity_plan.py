#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: capacity_plan
short_description: Plan whether an LLM fits the GPUs, how to lay it out and how fast it can decode
version_added: 0.4.0
author: homelab.llm_server maintainers (@homelab)
description:
  - Works out, for a model served with vLLM on the given GPUs, the weight bytes per GPU, the KV cache bytes
    per token, how many tokens of KV cache fit at O(gpu_memory_utilization), how many sequences of
    O(max_model_len) run at once, whether it fits at all, the smallest tensor parallel size that fits, the
    recommended serving layout and a decode-speed ceiling from memory bandwidth.
  - It says what marketing does not. Qwen2.5-72B-Instruct in BF16 needs 145.4 GB for its weights alone, so it
    does not fit one 96 GB RTX PRO 6000 Blackwell; on two of them it leaves about 14 GiB per GPU (94k tokens,
    under three sequences of 32k) for the KV cache.
  - "The arithmetic: weights = parameters x bits / 8, with embeddings and lm_head kept in 16 bits and scales
    added for quantised formats (fp8: one FP32 scale per 128 x 128 block; awq and gptq-int4: an FP16 scale and a
    4-bit zero point per 128 weights), split evenly over O(tensor_parallel_size) GPUs. KV cache per token =
    2 x layers x KV heads x head_dim x bytes (O(kv_cache_dtype=fp8) is 1 byte); tensor parallelism splits the
    KV heads, and replicates them when there are fewer KV heads than GPUs. KV cache per GPU = memory x
    O(gpu_memory_utilization) - weights - O(reserve_gib). A valid tensor parallel size divides the attention
    heads and divides (or is a multiple of) the KV heads. Decode ceiling = tensor_parallel_size x bandwidth /
    bytes read per token (the activated parameters for MoE models); it is a single-stream upper bound that
    ignores communication and kernel efficiency."
  - The GPU and model tables are C(data/planner/gpus.yml) and C(data/planner/models.yml) in the collection;
    every figure there names its source. GPUs are given as M(homelab.llm_server.gpu_facts) records (their
    measured memory is used), as preset names such as V(rtx-pro-6000-blackwell) or V(2x rtx-pro-6000-blackwell),
    or by hand.
  - The action plugin computes the plan on the controller and never contacts the target host. The module
    itself, run directly on a host, has no tables there and needs GPUs and the model given by hand as dicts.
  - The task fails only on bad input (unknown preset, invalid tensor parallel size, ...), not when the model does
    not fit; then RV(plan.fits) is V(false) and RV(plan.reasons) says why and what to change. Set
    O(fail_if_not_fits=true) to stop the play instead.
  - The filters P(homelab.llm_server.capacity_plan#filter), P(homelab.llm_server.capacity_report_lines#filter),
    P(homelab.llm_server.training_time#filter) and P(homelab.llm_server.training_table_lines#filter) do the same
    in templates.
options:
  gpus:
    description:
      - The host's GPUs. Each item is a M(homelab.llm_server.gpu_facts) record (C(name), C(memory_total_bytes),
        C(vendor); the name is matched against the C(match) patterns of C(data/planner/gpus.yml)), a preset name
        (optionally with a count, V(2x rtx-pro-6000-blackwell)), a dict C({preset, ...overrides}) or a spec by
        hand (C(name), C(memory_gib) or C(memory_bytes), C(memory_bandwidth_gbps), C(bf16_dense_tflops)).
      - One vLLM instance uses the first O(tensor_parallel_size) x O(pipeline_parallel_size) of them and is
        sized by the smallest.
    type: list
    elements: raw
    required: true
  model:
    description:
      - A preset name from C(data/planner/models.yml) (for example V(qwen3-32b), V(qwen3-32b-fp8)) or its
        Hugging Face repo id (V(Qwen/Qwen3-32B)), a dict C({preset, ...overrides}) or a model by hand with
        C(params_total), C(params_active) (MoE), C(num_layers), C(hidden_size), C(num_attention_heads),
        C(num_key_value_heads), C(head_dim), C(max_position_embeddings), C(vocab_size), C(tie_word_embeddings)
        and C(weight_dtype). config.json names such as C(num_hidden_layers), C(torch_dtype) and
        C(quantization_config) are accepted; without C(params_total) the count is estimated from the architecture.
      - A list of models plans the C(per_gpu_models) layout, each model alone on the next GPU.
    type: raw
    required: true
  tensor_parallel_size:
    description:
      - Tensor parallel size to plan for. Unset, the planner picks the smallest valid size that fits and holds
        O(min_concurrent_sequences) sequences of O(max_model_len), else the fitting size that holds the most.
    type: int
  pipeline_parallel_size:
    description: Pipeline parallel size; the heaviest stage (most layers plus one vocabulary matrix) is reported.
    type: int
    default: 1
  gpu_memory_utilization:
    description: Fraction of each GPU's memory vLLM may use (its C(--gpu-memory-utilization)).
    type: float
    default: 0.9
  max_model_len:
    description:
      - Context length to plan for. Unset, the model's C(max_position_embeddings), capped (in steps of 1024) to
        what the KV cache holds; the plan then fits only if at least 4096 tokens (or the model's whole context)
        fit.
    type: int
  kv_cache_dtype:
    description: vLLM's C(--kv-cache-dtype). V(auto) is the model's 16-bit dtype; the fp8 kinds take 1 byte.
    type: str
    default: auto
    choices: [auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, half]
  weight_bits:
    description:
      - Bits per weight to assume instead of the model's C(weight_dtype) (embeddings stay 16-bit below 16 bits;
        no scale overhead is added).
    type: float
  reserve_gib:
    description:
      - GiB per GPU kept for activations of the profiling batch, CUDA graphs, the CUDA context and NCCL buffers,
        inside the O(gpu_memory_utilization) budget. The default is an estimate; raise it when vLLM reports less
        KV cache than planned.
    type: float
    default: 4.0
  max_num_seqs:
    description: vLLM's C(--max-num-seqs); caps RV(plan.max_concurrent_sequences).
    type: int
  min_concurrent_sequences:
    description:
      - Sequences of O(max_model_len) one instance should hold for the planner to prefer one instance per GPU
        (C(per_gpu)) over splitting the model (C(tensor_parallel)).
    type: int
    default: 4
  fail_if_not_fits:
    description: Fail the task, with the reasons, when the model does not fit.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.conn
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  become:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
  connection:
    support: none
  delegation:
    support: none
    details: The plan runs on the controller whatever the host; delegation changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: all
notes:
  - Changes nothing anywhere; C(changed) is always V(false).
  - Figures are upper bounds and estimates from datasheets and model cards; measure with vLLM before promising
    a throughput.
seealso:
  - module: homelab.llm_server.gpu_facts
"""

EXAMPLES = r"""
- name: Plan Qwen2.5-72B-Instruct on the host's GPUs
  homelab.llm_server.capacity_plan:
    gpus: "{{ ansible_facts['gpus'] }}"
    model: qwen2.5-72b-instruct
    max_model_len: 32768
  register: capacity

- name: Show the plan
  ansible.builtin.debug:
    var: capacity.report_lines

- name: Stop unless Qwen3-32B fits with 64k context and an FP8 KV cache
  homelab.llm_server.capacity_plan:
    gpus: [2x rtx-pro-6000-blackwell]
    model: qwen3-32b
    max_model_len: 65536
    kv_cache_dtype: fp8
    fail_if_not_fits: true

- name: A model the tables do not know, from its config.json (parameters estimated), on a GPU given by hand
  homelab.llm_server.capacity_plan:
    gpus:
      - name: Some 48 GB card
        memory_gib: 48
        memory_bandwidth_gbps: 864
    model: "{{ lookup('ansible.builtin.file', 'files/config.json') | from_json }}"
"""

RETURN = r"""
plan:
  description: The plan. All sizes are bytes; per-GPU figures are for the heaviest GPU of one instance.
  returned: success
  type: dict
  contains:
    fits:
      description: Whether the weights, the reserve and at least one sequence of max_model_len fit.
      type: bool
      sample: true
    reasons:
      description: Human sentences with the figures; those starting with C(Does not fit) say what to change.
      type: list
      elements: str
    recommended_layout:
      description: C(per_gpu), C(tensor_parallel) or C(per_gpu_models) (a list of models); null when nothing fits.
      type: str
      sample: tensor_parallel
    tensor_parallel_size:
      description: Tensor parallel size the figures are for.
      type: int
      sample: 2
    pipeline_parallel_size:
      description: Pipeline parallel size the figures are for.
      type: int
      sample: 1
    smallest_fitting_tensor_parallel_size:
      description: Smallest valid tensor parallel size that fits on the GPUs given; null if none does.
      type: int
      sample: 2
    gpus_needed:
      description: Fewest copies of the first GPU (tensor parallel, up to 8) the model fits on; null if none.
      type: int
      sample: 2
    valid_tensor_parallel_sizes:
      description: Tensor parallel sizes the model's heads allow on these GPUs.
      type: list
      elements: int
      sample: [1, 2]
    weight_bytes_total:
      description: Bytes of all weights in their format.
      type: int
      sample: 145400000000
    weight_bytes_per_gpu:
      description: Bytes of weights on each GPU.
      type: int
      sample: 72700000000
    kv_bytes_per_token:
      description: KV cache bytes per token for the whole model.
      type: int
      sample: 327680
    kv_bytes_per_token_per_gpu:
      description: KV cache bytes per token on each GPU.
      type: int
      sample: 163840
    reserve_bytes_per_gpu:
      description: The reserve kept on each GPU (O(reserve_gib)).
      type: int
      sample: 4294967296
    kv_cache_bytes_per_gpu:
      description: Bytes per GPU left for the KV cache.
      type: int
      sample: 15382235423
    kv_cache_tokens:
      description: Tokens of KV cache that fit (in vLLM blocks of 16).
      type: int
      sample: 93872
    max_model_len:
      description: The given O(max_model_len), or the recommended one; null when no useful context fits.
      type: int
      sample: 32768
    max_model_len_source:
      description: C(given), C(model) (the model's maximum), C(capped) (to what the KV cache holds) or C(none).
      type: str
      sample: model
    kv_cache_concurrency:
      description: kv_cache_tokens / max_model_len, as vLLM logs it (C(Maximum concurrency)).
      type: float
      sample: 2.86
    max_concurrent_sequences:
      description: Whole sequences of max_model_len that fit at once, capped by O(max_num_seqs).
      type: int
      sample: 2
    decode_tokens_per_s_ceiling:
      description: Single-stream decode ceiling in tokens/s with a short context.
      type: float
      sample: 25.1
    decode_tokens_per_s_ceiling_at_max_model_len:
      description: The same ceiling with one full max_model_len of KV cache to read per token.
      type: float
      sample: 23.3
    gpu_memory_utilization:
      description: The O(gpu_memory_utilization) planned with.
      type: float
      sample: 0.9
    model:
      description: The resolved model (key, name, hf_repo, weight_dtype, params_total, params_active, ...).
      type: dict
    models:
      description: For a list of models (C(per_gpu_models)), one plan per model; the other keys are then absent.
      type: list
      elements: dict
report_lines:
  description: Aligned lines for play output (weights/GPU, KV/token, KV tokens, concurrent sequences, decode ceiling, verdict).
  returned: success
  type: list
  elements: str
  sample:
    - "weights/GPU      72.7 GB (67.7 GiB); 145.4 GB in total"
    - "verdict          fits"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.homelab.llm_server.plugins.module_utils._capacity import (
    ARGUMENT_SPEC,
    plan_from_params,
)
from ansible_collections.homelab.llm_server.plugins.module_utils._capacity_tables import (
    CapacityError,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    # Run on a host, there are no tables: GPUs and the model must be given by hand.
    try:
        outcome = plan_from_params(module.params)
    except CapacityError as exc:
        module.fail_json(msg=str(exc))
    if outcome.get('failed'):
        module.fail_json(**outcome)
    module.exit_json(**outcome)


if __name__ == '__main__':
    main()
