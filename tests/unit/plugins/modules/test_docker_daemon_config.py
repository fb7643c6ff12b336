# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run plugins/modules/docker_daemon_config.py as a subprocess, the way Ansible runs a module."""

from __future__ import annotations

import json
import stat

import pytest

SETTINGS = {
    'runtimes': {'nvidia': {'path': '/usr/bin/nvidia-container-runtime', 'runtimeArgs': []}},
    'log-driver': 'json-file',
    'log-opts': {'max-size': '50m', 'max-file': '5'},
}


@pytest.fixture
def run_module(module_runner):
    return lambda args, **kwargs: module_runner('docker_daemon_config', args, **kwargs)


@pytest.fixture
def daemon_json(tmp_path):
    return tmp_path / 'etc' / 'docker' / 'daemon.json'


def test_creates_the_file_and_its_directory(run_module, daemon_json):
    rc, result = run_module({'path': str(daemon_json), 'settings': SETTINGS})
    assert rc == 0, result
    assert result['changed'] is True
    assert json.loads(daemon_json.read_text()) == SETTINGS
    assert stat.S_IMODE(daemon_json.stat().st_mode) == 0o644
    assert stat.S_IMODE(daemon_json.parent.stat().st_mode) == 0o755
    assert result['changed_keys'] == ['log-driver', 'log-opts', 'runtimes']
    rc, again = run_module({'path': str(daemon_json), 'settings': SETTINGS})
    assert rc == 0 and again['changed'] is False


def test_merges_without_clobbering_and_keeps_the_mode(run_module, daemon_json):
    daemon_json.parent.mkdir(parents=True)
    daemon_json.write_text('{"debug": true, "dns": ["192.0.2.53"], "log-opts": {"labels": "app"}}')
    daemon_json.chmod(0o600)
    rc, result = run_module({'path': str(daemon_json), 'settings': SETTINGS}, diff=True)
    assert rc == 0, result
    written = json.loads(daemon_json.read_text())
    assert written['debug'] is True and written['dns'] == ['192.0.2.53']
    assert written['log-opts'] == {'labels': 'app', 'max-size': '50m', 'max-file': '5'}
    assert written['runtimes']['nvidia']['path'] == '/usr/bin/nvidia-container-runtime'
    assert stat.S_IMODE(daemon_json.stat().st_mode) == 0o600
    assert result['diff']['before'].startswith('{"debug": true')
    assert result['diff']['after'] == daemon_json.read_text()
    assert result['config'] == written


def test_check_mode_reports_without_writing(run_module, daemon_json):
    daemon_json.parent.mkdir(parents=True)
    daemon_json.write_text('{"debug": true}')
    rc, result = run_module({'path': str(daemon_json), 'settings': SETTINGS}, check_mode=True, diff=True)
    assert rc == 0 and result['changed'] is True
    assert daemon_json.read_text() == '{"debug": true}'
    assert '"nvidia"' in result['diff']['after']


def test_check_mode_on_a_fresh_host_creates_nothing(run_module, daemon_json):
    rc, result = run_module({'path': str(daemon_json), 'settings': SETTINGS}, check_mode=True)
    assert rc == 0 and result['changed'] is True
    assert not daemon_json.parent.exists()


def test_unset(run_module, daemon_json):
    run_module({'path': str(daemon_json), 'settings': dict(SETTINGS, **{'default-runtime': 'nvidia'})})
    rc, result = run_module({'path': str(daemon_json), 'settings': SETTINGS, 'unset': {'default-runtime': 'nvidia'}})
    assert rc == 0 and result['changed'] is True
    assert 'default-runtime' not in json.loads(daemon_json.read_text())


def test_invalid_existing_file_fails_and_is_left_alone(run_module, daemon_json):
    daemon_json.parent.mkdir(parents=True)
    daemon_json.write_text('{"debug": true,\n}')
    rc, result = run_module({'path': str(daemon_json), 'settings': SETTINGS})
    assert rc == 1 and result['failed']
    assert result['msg'].startswith('%s is not valid JSON' % daemon_json)
    assert 'json.tool' in result['msg']
    assert daemon_json.read_text() == '{"debug": true,\n}'


def test_malformed_settings_fail_before_writing(run_module, daemon_json):
    rc, result = run_module({'path': str(daemon_json), 'settings': {'log-opts': {'max-file': 5}}})
    assert rc == 1
    assert 'log-opts values must be strings' in result['msg']
    assert not daemon_json.exists()


def test_settings_must_be_a_dict(run_module, daemon_json):
    rc, result = run_module({'path': str(daemon_json), 'settings': ['storage-driver']})
    assert rc == 1
    assert 'settings' in result['msg'] and 'dict' in result['msg']
