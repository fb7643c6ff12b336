# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for plugins/module_utils/_docker_daemon.py."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
_spec = importlib.util.spec_from_file_location(
    '_docker_daemon_under_test', os.path.join(REPO, 'plugins', 'module_utils', '_docker_daemon.py'))
dd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dd)

PATH = '/etc/docker/daemon.json'
NVIDIA = {'runtimes': {'nvidia': {'path': '/usr/bin/nvidia-container-runtime', 'runtimeArgs': []}}}
ROLE = dict(NVIDIA, **{'log-driver': 'json-file', 'log-opts': {'max-size': '50m', 'max-file': '5'}})


def test_deep_merge_keeps_the_users_keys():
    user = {'debug': True, 'dns': ['192.0.2.53'], 'runtimes': {'runsc': {'path': '/usr/bin/runsc'}},
            'log-opts': {'labels': 'app'}}
    merged = dd.deep_merge(user, ROLE)
    assert merged['debug'] is True
    assert merged['dns'] == ['192.0.2.53']
    assert set(merged['runtimes']) == {'runsc', 'nvidia'}
    assert merged['log-opts'] == {'labels': 'app', 'max-size': '50m', 'max-file': '5'}
    assert user['runtimes'] == {'runsc': {'path': '/usr/bin/runsc'}}, 'the input must not be changed'


def test_deep_merge_replaces_lists_and_scalars():
    merged = dd.deep_merge({'dns': ['192.0.2.53'], 'log-driver': 'journald'}, {'dns': ['192.0.2.1'], 'log-driver': 'json-file'})
    assert merged == {'dns': ['192.0.2.1'], 'log-driver': 'json-file'}


def test_deep_merge_dict_replaces_a_scalar():
    assert dd.deep_merge({'log-opts': 'bad'}, {'log-opts': {'max-size': '1m'}}) == {'log-opts': {'max-size': '1m'}}


def test_unset_only_removes_the_given_value():
    assert dd.unset_matching({'default-runtime': 'nvidia', 'debug': True}, {'default-runtime': 'nvidia'}) == {'debug': True}
    assert dd.unset_matching({'default-runtime': 'runsc'}, {'default-runtime': 'nvidia'}) == {'default-runtime': 'runsc'}
    assert dd.unset_matching({}, {'default-runtime': 'nvidia'}) == {}


def test_changed_keys():
    before = {'debug': True, 'log-opts': {'max-size': '10m'}, 'default-runtime': 'nvidia'}
    after = {'debug': True, 'log-opts': {'max-size': '50m', 'max-file': '5'}, 'runtimes': NVIDIA['runtimes']}
    assert dd.changed_keys(before, after) == ['default-runtime', 'log-opts.max-file', 'log-opts.max-size', 'runtimes']


def test_render_is_stable():
    one = dd.render({'b': 1, 'a': {'d': 2, 'c': 3}})
    two = dd.render({'a': {'c': 3, 'd': 2}, 'b': 1})
    assert one == two == '{\n  "a": {\n    "c": 3,\n    "d": 2\n  },\n  "b": 1\n}\n'


@pytest.mark.parametrize('text', [None, '', '  \n'])
def test_missing_or_empty_file_is_an_empty_config(text):
    assert dd.parse_config(text, PATH) == {}


def test_invalid_json_names_the_file_and_the_fix():
    with pytest.raises(dd.DaemonConfigError) as err:
        dd.parse_config('{"debug": true,,}', PATH)
    message = str(err.value)
    assert message.startswith('/etc/docker/daemon.json is not valid JSON (')
    assert 'line 1 column' in message
    assert 'python3 -m json.tool /etc/docker/daemon.json' in message
    assert 'move it away' in message


@pytest.mark.parametrize('text, kind', [('["debug"]', 'array'), ('"debug"', 'str'), ('3', 'int')])
def test_not_an_object(text, kind):
    with pytest.raises(dd.DaemonConfigError, match='holds a JSON %s, but dockerd expects an object' % kind):
        dd.parse_config(text, PATH)


def test_validate_accepts_the_role_settings():
    assert dd.validate_settings(dict(ROLE, **{'storage-driver': 'vfs', 'default-runtime': 'nvidia'})) == []


@pytest.mark.parametrize('settings, expected', [
    (['storage-driver'], 'settings must be a dict of daemon.json keys, got list'),
    ({'log-opts': {'max-file': 5, 'max-size': '50m'}}, 'log-opts values must be strings .* quote max-file'),
    ({'log-opts': ['max-size=1m']}, 'log-opts must be a dict, got list'),
    ({'runtimes': {'nvidia': '/usr/bin/nvidia-container-runtime'}}, 'runtimes.nvidia must be a dict with a path'),
    ({'runtimes': {'nvidia': {'runtimeArgs': []}}}, 'runtimes.nvidia must be a dict with a path'),
    ({'runtimes': ['nvidia']}, 'runtimes must be a dict of runtime name'),
    ({'hosts': ['tcp://0.0.0.0:2375']}, 'sets hosts: docker.service already passes -H fd://'),
    ({'x': {1, 2}}, 'cannot be written as JSON'),
])
def test_validate_rejects(settings, expected):
    errors = dd.validate_settings(settings)
    assert errors, settings
    assert any(__import__('re').search(expected, e) for e in errors), errors


def test_plan_new_file():
    result = dd.plan(None, ROLE, PATH)
    assert result['changed'] is True
    assert json.loads(result['after']) == ROLE
    assert result['before'] == ''
    assert result['changed_keys'] == ['log-driver', 'log-opts', 'runtimes']


def test_plan_merges_into_the_users_file():
    user = '{"debug": true, "dns": ["192.0.2.53"]}\n'
    result = dd.plan(user, ROLE, PATH)
    assert result['changed'] is True
    after = json.loads(result['after'])
    assert after['debug'] is True and after['dns'] == ['192.0.2.53']
    assert after['runtimes']['nvidia']['path'] == '/usr/bin/nvidia-container-runtime'
    assert result['before'] == user
    assert list(after) == sorted(after)


def test_plan_leaves_an_equivalent_file_alone():
    # Same settings, different formatting and key order: no rewrite.
    text = json.dumps(dd.deep_merge({'debug': True}, ROLE), indent=4)
    result = dd.plan(text, ROLE, PATH)
    assert result['changed'] is False
    assert result['after'] is None
    assert result['changed_keys'] == []


def test_plan_is_idempotent():
    first = dd.plan('{"debug": true}', ROLE, PATH)
    second = dd.plan(first['after'], ROLE, PATH)
    assert second['changed'] is False


def test_plan_tells_true_from_one():
    assert dd.plan('{"debug": 1}', {'debug': True}, PATH)['changed'] is True


def test_plan_unset():
    result = dd.plan(dd.render(dict(ROLE, **{'default-runtime': 'nvidia'})), ROLE, PATH,
                     unset={'default-runtime': 'nvidia'})
    assert result['changed'] is True
    assert 'default-runtime' not in result['config']
    assert result['changed_keys'] == ['default-runtime']


def test_plan_fails_before_anything_on_bad_input():
    with pytest.raises(dd.DaemonConfigError, match='not valid JSON'):
        dd.plan('{', ROLE, PATH)
    with pytest.raises(dd.DaemonConfigError, match='log-opts values must be strings'):
        dd.plan('{}', {'log-opts': {'max-file': 5}}, PATH)
    with pytest.raises(dd.DaemonConfigError, match='unset must be a dict'):
        dd.plan('{}', ROLE, PATH, unset=['default-runtime'])
