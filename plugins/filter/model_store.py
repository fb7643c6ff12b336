# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Model store filters: the capacity planner's weight size of a model, for the store's free-space check."""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _capacity_memory, _capacity_tables

DATA_DIR = os.path.join(os.path.dirname(__file__), '..', '..', 'data', 'planner')


def model_weight_bytes(model):
    """Bytes of the model's weights as the planner counts them (0 for an empty model: nothing to plan)."""
    if model in (None, '', {}):
        return 0
    try:
        tables = _capacity_tables.load_tables(DATA_DIR)
        spec = _capacity_tables.resolve_model(model, tables['models'])
        return int(round(_capacity_memory.weight_bytes(spec)))
    except _capacity_tables.CapacityError as exc:
        raise AnsibleFilterError('model_weight_bytes: %s' % exc)


class FilterModule(object):
    """Model store filters."""

    def filters(self):
        return {'model_weight_bytes': model_weight_bytes}
