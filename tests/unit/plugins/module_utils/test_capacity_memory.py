# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The planner's memory arithmetic (plugins/module_utils/_capacity_memory.py) against hand-computed cases.

Every expected number below is worked out in the comment next to it from the
model's config.json figures, not by calling the planner's own helpers.
"""

from __future__ import annotations

import os

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils import _capacity_memory, _capacity_tables

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
TABLES = _capacity_tables.load_tables(os.path.join(REPO, 'data', 'planner'))


# --------------------------------------------------------------------------- quantised weights


def test_awq_weights_count_scales_and_keep_embeddings_in_16_bits():
    model = _capacity_tables.resolve_model('qwen2.5-7b-instruct-awq', TABLES['models'])
    # embeddings + lm_head: 2 x 152,064 x 3,584 = 1,089,994,752 parameters x 2 bytes = 2,179,989,504
    # the rest: 7.61e9 - 1,089,994,752 = 6,520,005,248 x (4 + 20/128) / 8 bits = 3,387,346,476.5
    assert _capacity_memory.weight_bytes(model) == pytest.approx(5567335980.5)
    # Qwen/Qwen2.5-7B-Instruct-AWQ is about 5.57 GB of safetensors on Hugging Face
    assert _capacity_memory.weight_bytes(model) == pytest.approx(5.57e9, rel=0.01)


def test_fp8_weights_are_about_half():
    model = _capacity_tables.resolve_model('qwen3-coder-30b-a3b-instruct-fp8', TABLES['models'])
    # 622,329,856 embedding parameters x 2 + 29,877,670,144 x (8 + 32/16384) / 8 = 31,129,624,209
    assert _capacity_memory.weight_bytes(model) == pytest.approx(31129624209.06)
    # the published FP8 checkpoint is about 31.18 GB
    assert _capacity_memory.weight_bytes(model) == pytest.approx(31.18e9, rel=0.01)


# --------------------------------------------------------------------------- tensor parallel sizes


def test_valid_tp_sizes_follow_the_heads():
    model = _capacity_tables.resolve_model('qwen2.5-32b-instruct', TABLES['models'])
    # 40 heads and 8 KV heads: 5 divides 40 but neither divides 8 nor is a multiple of it
    assert _capacity_memory.valid_tensor_parallel_sizes(model, 8) == [1, 2, 4, 8]
    moe = _capacity_tables.resolve_model('qwen3-235b-a22b', TABLES['models'])
    # 64 heads, 4 KV heads: 8 is a multiple of 4 (replication)
    assert _capacity_memory.valid_tensor_parallel_sizes(moe, 8) == [1, 2, 4, 8]
