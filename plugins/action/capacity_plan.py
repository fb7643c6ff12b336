# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for homelab.llm_server.capacity_plan: the plan is computed on the controller.

The GPU and model tables live in the collection (data/planner), so the plan
is pure arithmetic on the controller; nothing runs on, or connects to, the
target host.
"""

from __future__ import annotations

import os

from ansible.plugins.action import ActionBase

from ansible_collections.homelab.llm_server.plugins.module_utils import _capacity, _capacity_tables

DATA_DIR = os.path.join(os.path.dirname(__file__), '..', '..', 'data', 'planner')


class ActionModule(ActionBase):
    """Compute a capacity plan from the collection's tables; never contacts the host."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        params = self.validate_argument_spec(argument_spec=_capacity.ARGUMENT_SPEC)[1]
        try:
            outcome = _capacity.plan_from_params(params, tables=_capacity_tables.load_tables(DATA_DIR))
        except _capacity_tables.CapacityError as exc:
            result.update(failed=True, changed=False, msg=str(exc))
            return result
        result.update(outcome)
        return result
