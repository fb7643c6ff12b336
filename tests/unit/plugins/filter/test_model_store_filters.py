# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/model_store.py: the planner's weight size, the same figure as capacity_plan's."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
import pytest

from ansible_collections.homelab.llm_server.plugins.filter import capacity, model_store


@pytest.mark.parametrize('model', ['qwen2.5-72b-instruct', 'qwen3-8b', {'preset': 'qwen3-8b', 'weight_dtype': 'fp8'}])
def test_the_weight_size_is_the_plans(model):
    plan = capacity.capacity_plan(['2x rtx-pro-6000-blackwell'], model)
    assert model_store.model_weight_bytes(model) == plan['weight_bytes_total'] > 0


def test_an_empty_model_needs_nothing_and_a_typo_is_named():
    assert model_store.model_weight_bytes({}) == 0
    with pytest.raises(AnsibleFilterError, match="model_weight_bytes: unknown model preset 'qwen3-9b'"):
        model_store.model_weight_bytes('qwen3-9b')
