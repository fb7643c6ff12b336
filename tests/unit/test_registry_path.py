# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine registry: every role that reads it looks where serving writes it.

serving writes {serving_config_dir}/instances/<engine>.json; nginx (its
backends), gpu_watchdog and ups read that directory. Each reader's path is
rendered from its role's vars/main.yml with serving_config_dir left at its
default and moved: a reader that hard-codes the path leaves nginx with no
backends (or the watchdog and the UPS with no engines) once the owner moves it.
"""

from __future__ import annotations

import os

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))

# role -> how the registry directory is reached in its vars/main.yml
READERS = {
    'nginx': lambda v: v['_nginx_registry_dir'],
    'gpu_watchdog': lambda v: v['_gpu_watchdog_config']['registry_dir'],
    'ups': lambda v: v['_ups_config']['instances_dir'],
}


def _vars(role):
    with open(os.path.join(REPO, 'roles', role, 'vars', 'main.yml')) as handle:
        return yaml.safe_load(handle)


def _written(serving_config_dir):
    """Where serving writes an engine's registration (tasks/instance.yml)."""
    with open(os.path.join(REPO, 'roles', 'serving', 'tasks', 'instance.yml')) as handle:
        text = handle.read()
    assert 'dest: "{{ serving_config_dir }}/instances/{{ serving_instance.name }}.json"' in text
    return serving_config_dir + '/instances'


@pytest.mark.parametrize('role', sorted(READERS))
@pytest.mark.parametrize('config_dir', [None, '/srv/llm/etc'])
def test_readers_look_where_serving_writes(render, role, config_dir):
    variables = dict(_vars(role))
    if config_dir:
        variables['serving_config_dir'] = config_dir
    template = READERS[role](_vars(role))
    result = {'value': template}
    for _depth in range(4):  # the role's own vars refer to one another
        if '{{' not in result['value']:
            break
        result = render(result['value'], **variables)
    assert result == {'value': _written(config_dir or '/etc/llm-server')}, (role, template, result)
