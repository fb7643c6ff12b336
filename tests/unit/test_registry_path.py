# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared directories: declared once, and every role looks where the others write.

serving writes the engine registry; nginx (its backends), gpu_watchdog and
ups read it. Each role's path is rendered from its vars/main.yml through the
homelab.llm_server.llm_server_dir lookup (plugins/module_utils/_contracts.py)
with the owner's variables unset, serving_config_dir moved, and
llm_server_registry_dir set: a role with the path written in would leave nginx
with no backends, or the watchdog and the UPS with no engines, once the owner
moves it. And no role file spells out a shared directory's default.
"""

from __future__ import annotations

import glob
import os

import pytest
import yaml

from ansible_collections.homelab.llm_server.plugins.module_utils import _contracts

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))

# role -> how the registry directory is reached in its vars/main.yml
REGISTRY = {
    'serving': lambda v: v['_serving_registry_dir'],
    'nginx': lambda v: v['_nginx_registry_dir'],
    'gpu_watchdog': lambda v: v['_gpu_watchdog_config']['registry_dir'],
    'ups': lambda v: v['_ups_config']['instances_dir'],
}


def _load(role, kind):
    with open(os.path.join(REPO, 'roles', role, kind, 'main.yml')) as handle:
        return yaml.safe_load(handle) or {}


def _resolve(render, template, variables):
    result = {'value': template}
    for _depth in range(4):  # the role's own vars refer to one another
        if '{{' not in str(result.get('value')):
            break
        result = render(result['value'], **variables)
    return result


def test_serving_writes_each_registration_into_its_registry_dir():
    with open(os.path.join(REPO, 'roles', 'serving', 'tasks', 'instance.yml')) as handle:
        assert 'dest: "{{ _serving_registry_dir }}/{{ serving_instance.name }}.json"' in handle.read()


@pytest.mark.parametrize('role', sorted(REGISTRY))
@pytest.mark.parametrize('owner, expected', [
    ({}, '/etc/llm-server/instances'),
    ({'serving_config_dir': '/srv/llm/etc'}, '/srv/llm/etc/instances'),
    ({'serving_config_dir': '/srv/llm/etc', 'llm_server_registry_dir': '/srv/registry/'}, '/srv/registry'),
])
def test_every_role_finds_the_registry_where_serving_writes_it(render, role, owner, expected):
    # serving's own default for serving_config_dir is there when serving runs; the others see the inventory's.
    variables = dict(_load(role, 'defaults') if role == 'serving' else {}, **_load(role, 'vars'))
    variables.update(owner)
    template = REGISTRY[role](_load(role, 'vars'))
    assert _resolve(render, template, variables) == {'value': expected}, (role, template)


def test_a_relative_shared_directory_is_refused_with_the_variable_named(render):
    result = render("{{ lookup('homelab.llm_server.llm_server_dir', 'metrics') }}", llm_server_metrics_dir='prom')
    assert "llm_server_metrics_dir must be an absolute path, not 'prom'" in result['error']


def test_no_role_spells_out_a_shared_directory():
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, 'roles', '*', '*', '**', '*'), recursive=True)):
        # What runs: the argument specs and READMEs document the defaults; files/ are the host programs'.
        kind = os.path.relpath(path, REPO).split(os.sep)[2]
        if not os.path.isfile(path) or kind not in ('defaults', 'vars', 'tasks', 'handlers', 'templates'):
            continue
        with open(path, errors='replace') as handle:
            for number, line in enumerate(handle, 1):
                if line.lstrip().startswith(('#', '{#')):
                    continue
                for default in _contracts.DIRS.values():
                    if default in line:
                        found.append('%s:%d: %s' % (os.path.relpath(path, REPO), number, line.strip()))
    assert not found, 'use lookup(\'homelab.llm_server.llm_server_dir\', ...):\n' + '\n'.join(found)
