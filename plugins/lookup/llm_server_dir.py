# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: llm_server_dir
author: homelab.llm_server contributors (@homelab)
version_added: 0.4.0
short_description: Where the files the collection's roles and host programs share live on a host
description:
  - Returns the directory of a contract between the roles and the programs they install, with one default each,
    declared once in the collection.
  - C(registry), the engine registry (one JSON file per engine, written by the serving role, read by nginx,
    gpu_watchdog and ups); C(llm_server_registry_dir) when set, else C(serving_config_dir)/instances when that
    is set, else C(/etc/llm-server/instances).
  - C(scrape), Prometheus' file_sd targets, one folder per job; C(llm_server_scrape_dir), else
    C(/etc/llm-server/scrape).
  - C(metrics), node exporter's textfile collector; C(llm_server_metrics_dir), else
    C(/var/lib/prometheus/node-exporter).
  - C(hold), the holds of engines nobody else may start (one JSON file per holder, written by the UPS, the GPU
    watchdog and the owner's C(llm-server) command, read by every engine unit before it starts);
    C(llm_server_hold_dir) when set, else C(serving_state_dir)/holds when that is set, else
    C(/var/lib/llm-server/holds).
options:
  _terms:
    description: One or more of C(registry), C(scrape), C(metrics), C(hold).
    type: list
    elements: str
    required: true
'''

EXAMPLES = r'''
- name: Write a textfile where node exporter reads it
  ansible.builtin.copy:
    content: "llm_example 1\n"
    dest: "{{ lookup('homelab.llm_server.llm_server_dir', 'metrics') }}/llm_example.prom"
    mode: "0644"
'''

RETURN = r'''
_raw:
  description: The directories, in the order asked, absolute, without a trailing slash.
  type: list
  elements: str
'''

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.homelab.llm_server.plugins.module_utils import _contracts


class LookupModule(LookupBase):

    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}

        def value_of(name):
            if name not in variables:
                return None
            return self._templar.template(variables[name])

        try:
            return [_contracts.directory(term, value_of) for term in terms]
        except ValueError as err:
            raise AnsibleLookupError(str(err)) from None
