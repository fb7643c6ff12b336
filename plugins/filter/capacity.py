# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Capacity planner filters: does a model fit these GPUs, how fast can it decode, how long would training take."""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _capacity, _capacity_tables, _capacity_training

# data/planner at the collection root: the same relative place in a checkout and in an installed collection.
DATA_DIR = os.path.join(os.path.dirname(__file__), '..', '..', 'data', 'planner')


def _tables():
    try:
        return _capacity_tables.load_tables(DATA_DIR)
    except _capacity_tables.CapacityError as exc:
        raise AnsibleFilterError('capacity planner: %s' % exc)


def _gpu_list(gpus):
    # A registered gpu_facts result or its ansible_facts carry the list under `gpus`.
    if isinstance(gpus, dict) and isinstance(gpus.get('gpus'), list):
        return gpus['gpus']
    if isinstance(gpus, dict) and isinstance(gpus.get('ansible_facts'), dict):
        return gpus['ansible_facts'].get('gpus') or []
    return gpus


def capacity_plan(gpus, model, tensor_parallel_size=None, pipeline_parallel_size=1,
                  gpu_memory_utilization=_capacity.DEFAULT_GPU_MEMORY_UTILIZATION, max_model_len=None,
                  kv_cache_dtype='auto', weight_bits=None, reserve_gib=_capacity.DEFAULT_RESERVE_GIB,
                  max_num_seqs=None, min_concurrent_sequences=_capacity.DEFAULT_MIN_CONCURRENT_SEQUENCES,
                  cpu_kv_cache_gib=None):
    """Plan serving ``model`` with vLLM on ``gpus`` (gpu_facts records, preset names or specs).

    cpu_kv_cache_gib: plan vLLM's CPU build, whose KV cache is that many GiB of
    host memory; ``gpus`` is then the host as a spec (name, memory_bytes,
    memory_bandwidth_gbps).
    """
    try:
        return _capacity.plan(_gpu_list(gpus), model, tensor_parallel_size=tensor_parallel_size,
                              pipeline_parallel_size=pipeline_parallel_size,
                              gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
                              kv_cache_dtype=kv_cache_dtype, weight_bits=weight_bits, reserve_gib=reserve_gib,
                              max_num_seqs=max_num_seqs, min_concurrent_sequences=min_concurrent_sequences,
                              cpu_kv_cache_gib=cpu_kv_cache_gib, tables=_tables())
    except _capacity_tables.CapacityError as exc:
        raise AnsibleFilterError('capacity_plan: %s' % exc)


def capacity_model_errors(model):
    """Why ``model`` (a preset, a repo id or a dict) cannot be planned, as sentences; [] when it can."""
    return _capacity_tables.model_errors(model, _tables()['models'])


def capacity_report_lines(plan):
    """Aligned lines for a capacity_plan result (or the capacity_plan module's registered result)."""
    if isinstance(plan, dict) and isinstance(plan.get('plan'), dict):
        plan = plan['plan']
    try:
        return _capacity.report_lines(plan)
    except (_capacity_tables.CapacityError, KeyError, TypeError) as exc:
        raise AnsibleFilterError('capacity_report_lines: the input is not a capacity_plan result (%s)' % exc)


def training_time(gpus, params, tokens=None, mfu=_capacity_training.DEFAULT_MFU, num_gpus=None, tokens_per_param=None):
    """Time to train a model of ``params`` parameters (a number or a preset name) from scratch on ``gpus``."""
    try:
        return _capacity_training.training_time(_gpu_list(gpus), params, tokens=tokens, mfu=mfu, num_gpus=num_gpus,
                                                tokens_per_param=tokens_per_param, tables=_tables())
    except _capacity_tables.CapacityError as exc:
        raise AnsibleFilterError('training_time: %s' % exc)


def training_table_lines(gpus, sizes=None, mfu=_capacity_training.DEFAULT_MFU, num_gpus=None, tokens_per_param=None):
    """The "125M / 355M / 1.3B / 3B / 7B on one card" table as aligned lines."""
    try:
        rows = _capacity_training.training_table(_gpu_list(gpus), sizes=sizes, mfu=mfu, num_gpus=num_gpus,
                                                 tokens_per_param=tokens_per_param, tables=_tables())
        return _capacity_training.training_table_lines(rows)
    except _capacity_tables.CapacityError as exc:
        raise AnsibleFilterError('training_table_lines: %s' % exc)


class FilterModule(object):
    """Capacity planner filters."""

    def filters(self):
        return {
            'capacity_plan': capacity_plan,
            'capacity_model_errors': capacity_model_errors,
            'capacity_report_lines': capacity_report_lines,
            'training_time': training_time,
            'training_table_lines': training_table_lines,
        }
