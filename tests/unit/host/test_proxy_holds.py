# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-proxy-holds (host/llm_server_host/proxy_holds.py): each engine's server line in the
proxy's upstreams, marked down while anyone holds the engine, run for real
against a stand-in systemctl; and the role's template of its settings,
rendered through Ansible's Templar. nginx itself reads the files in the
gpu_watchdog scenario (a held engine gets no request, not even a first try)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llm_server_host import holds as _holds

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
# The program as the host runs it: the package's module, from host/.
PROGRAM = [sys.executable, '-m', 'llm_server_host.proxy_holds']
TEMPLATE = os.path.join(REPO, 'roles', 'nginx', 'templates', 'proxy-holds.json.j2')

ACTIVE = '127.0.0.1:8001 max_fails=1 fail_timeout=10s'
STANDBY = '127.0.0.1:8002 max_fails=0 backup'


class Proxy:
    def __init__(self, root, collection_root):
        self.root = root
        self.hold_dir = str(root / 'holds')
        self.engines_dir = root / 'engines'
        self.log = root / 'systemctl.log'
        self.nginx_state = root / 'nginx-active'
        self.nginx_state.write_text('0')
        # During a reload the stand-in runs reload-hook once if it is there: a hold written while the
        # service runs, which systemd's path unit would not start it again for.
        self.hook = root / 'reload-hook'
        (root / 'systemctl').write_text(
            '#!/bin/sh\necho "$@" >> "%s"\n'
            'if [ "$1" = reload ] && [ -f "%s" ]; then sh "%s"; rm -f "%s"; fi\n'
            'if [ "$1" = is-active ]; then exit $(cat "%s"); fi\nexit 0\n'
            % (self.log, self.hook, self.hook, self.hook, self.nginx_state))
        (root / 'systemctl').chmod(0o755)
        self.env = dict(os.environ, PYTHONPATH=os.path.join(REPO, 'host'))
        self.configure({'vllm-a': {'unit': 'vllm-a.service', 'server': ACTIVE},
                        'vllm-b': {'unit': 'vllm-b.service', 'server': STANDBY}})

    def configure(self, engines, **change):
        config = dict({'hold_dir': self.hold_dir, 'engines_dir': str(self.engines_dir), 'engines': engines,
                       'systemctl': str(self.root / 'systemctl')}, **change)
        (self.root / 'proxy-holds.json').write_text(json.dumps(config))

    def sync(self, *extra):
        return subprocess.run(PROGRAM + ['sync', '--config', str(self.root / 'proxy-holds.json')]
                              + list(extra), capture_output=True, text=True, timeout=30, check=False, env=self.env)

    def lines(self):
        return {entry[:-len('.conf')]: (self.engines_dir / entry).read_text()
                for entry in sorted(os.listdir(self.engines_dir))}

    def reloads(self):
        return self.log.read_text().splitlines().count('reload nginx.service') if self.log.exists() else 0


@pytest.fixture
def proxy(tmp_path, collection_root):
    return Proxy(tmp_path, collection_root)


def test_a_held_engine_is_marked_down_until_every_holder_lets_go(proxy):
    first = proxy.sync('--no-reload')
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ['vllm-a: up', 'vllm-b: up']
    assert proxy.lines() == {'vllm-a': 'server %s;\n' % ACTIVE, 'vllm-b': 'server %s;\n' % STANDBY}
    assert oct(os.stat(proxy.engines_dir / 'vllm-a.conf').st_mode & 0o777) == '0o644'
    # Nothing changed: nothing said, nothing reloaded.
    again = proxy.sync()
    assert again.returncode == 0 and again.stdout == '' and proxy.reloads() == 0

    proxy.nginx_state.write_text('0')  # exit 0: nginx runs
    _holds.write(proxy.hold_dir, 'ups', {'vllm-a.service': [{'reason': 'on battery', 'since': 1.0}]})
    _holds.write(proxy.hold_dir, 'owner', {'vllm-a.service': [{'reason': 'new fan', 'since': 2.0}]},
                 persistent=True)
    held = proxy.sync()
    assert held.returncode == 0, held.stderr
    assert held.stdout.splitlines() == ['vllm-a: down, held by the owner (new fan), the UPS (on battery)']
    assert proxy.lines()['vllm-a'] == ('# Held (llm-server status says by whom): nginx sends it nothing until it '
                                       'is released.\nserver %s down;\n' % ACTIVE)
    assert proxy.lines()['vllm-b'] == 'server %s;\n' % STANDBY
    assert proxy.reloads() == 1

    _holds.write(proxy.hold_dir, 'owner', {}, persistent=True)
    assert proxy.sync().stdout == ''  # the UPS still holds it
    _holds.write(proxy.hold_dir, 'ups', {})
    released = proxy.sync()
    assert released.stdout.splitlines() == ['vllm-a: up']
    assert proxy.lines()['vllm-a'] == 'server %s;\n' % ACTIVE
    assert proxy.reloads() == 2


def test_a_hold_written_while_it_runs_is_synced_before_it_ends(proxy):
    proxy.nginx_state.write_text('0')
    proxy.sync()
    reloads = proxy.reloads()
    # The owner holds vllm-b while the run for the UPS's hold of vllm-a reloads nginx.
    proxy.hook.write_text('%s -c "from llm_server_host import holds; holds.write(%r, \'owner\', '
                          '{\'vllm-b.service\': [{\'reason\': \'new fan\', \'since\': 2.0}]}, persistent=True)"\n'
                          % (sys.executable, proxy.hold_dir))
    _holds.write(proxy.hold_dir, 'ups', {'vllm-a.service': [{'reason': 'on battery', 'since': 1.0}]})
    run = proxy.sync()
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ['vllm-a: down, held by the UPS (on battery)',
                                       'vllm-b: down, held by the owner (new fan)']
    # One round for each change: the second one starts because the holds differ from those read first.
    assert not proxy.hook.exists() and proxy.reloads() == reloads + 2
    assert all(line.endswith(' down;\n') for line in proxy.lines().values())


def test_no_reload_while_nginx_is_stopped_or_asked_not_to(proxy):
    proxy.nginx_state.write_text('3')  # inactive
    assert proxy.sync().returncode == 0
    _holds.write(proxy.hold_dir, 'watchdog', {'vllm-b.service': [{'reason': 'heat', 'since': 1.0}]})
    proxy.nginx_state.write_text('0')
    assert proxy.sync('--no-reload').stdout.startswith('vllm-b: down')
    assert proxy.reloads() == 0


def test_the_files_of_engines_gone_from_the_proxy_are_removed(proxy):
    proxy.sync('--no-reload')
    proxy.configure({'vllm-a': {'unit': 'vllm-a.service', 'server': ACTIVE}})
    assert proxy.sync('--no-reload').stdout.splitlines() == ['vllm-b: removed']
    assert list(proxy.lines()) == ['vllm-a']


@pytest.mark.parametrize('change, message', [
    ({'hold_dir': 'holds'}, "hold_dir must be an absolute path, not 'holds'"),
    ({'engines': {'a b': {'unit': 'a.service', 'server': ACTIVE}}}, "engine name 'a b' may hold only"),
    ({'engines': {'a': {'unit': 'a.service', 'server': '127.0.0.1:1; include /etc/passwd'}}},
     "the server line must be one directive's arguments"),
    ({'engines': {'a': {'server': ACTIVE}}}, 'engine a needs a unit and a server line'),
])
def test_a_bad_configuration_is_refused_with_exit_2(proxy, change, message):
    proxy.configure(change.pop('engines', {'a': {'unit': 'a.service', 'server': ACTIVE}}), **change)
    proc = proxy.sync()
    assert proc.returncode == 2 and message in proc.stderr
    assert not proxy.engines_dir.exists()


def test_the_roles_template_gives_each_engine_the_line_its_upstream_had(render):
    """Active engines: max_fails and fail_timeout; a standby beside an active one: a backup that never fails;
    a model with only standbys: they are all it has, so active lines."""
    with open(TEMPLATE, encoding='utf-8') as handle:
        template = handle.read()
    backends = [
        {'name': 'vllm-a', 'host': '127.0.0.1', 'port': 8001, 'model': 'qwen', 'standby': False},
        {'name': 'vllm-b', 'host': '127.0.0.1', 'port': 8002, 'model': 'qwen', 'standby': True},
        {'name': 'llama-c', 'host': '10.0.0.5', 'port': 8101, 'model': 'gemma', 'standby': True},
    ]
    result = render(template, _nginx_backend_list=backends, _nginx_hold_dir='/var/lib/llm-server/holds',
                    _nginx_engines_dir='/etc/nginx/llm-server/engines', nginx_upstream_max_fails=2,
                    nginx_upstream_fail_timeout_s=15)
    assert 'value' in result, result
    config = json.loads(result['value']) if isinstance(result['value'], str) else result['value']
    assert config == {
        'hold_dir': '/var/lib/llm-server/holds', 'engines_dir': '/etc/nginx/llm-server/engines',
        'engines': {
            'vllm-a': {'unit': 'vllm-a.service', 'server': '127.0.0.1:8001 max_fails=2 fail_timeout=15s'},
            'vllm-b': {'unit': 'vllm-b.service', 'server': '127.0.0.1:8002 max_fails=0 backup'},
            'llama-c': {'unit': 'llama-c.service', 'server': '10.0.0.5:8101 max_fails=2 fail_timeout=15s'},
        }}
