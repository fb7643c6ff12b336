# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-http-ban (host/llm_server_host/http_ban.py), fail2ban's action, with nginx and systemctl stood in for on PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
# The program as the host runs it: the package's module, from host/.
HELPER = [sys.executable, '-m', 'llm_server_host.http_ban']


@pytest.fixture
def ban(tmp_path):
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    # nginx -t refuses a list with the marker address in it; systemctl logs its calls.
    (bin_dir / 'nginx').write_text('#!/bin/sh\ngrep -q "192.0.2.66 " %s && { echo "bad list" >&2; exit 1; }\nexit 0\n'
                                   % (tmp_path / 'banned.conf'))
    (bin_dir / 'systemctl').write_text('#!/bin/sh\necho "$*" >> %s\nexit 0\n' % (tmp_path / 'calls'))
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)
    env = dict(os.environ, PATH='%s:%s' % (bin_dir, os.environ['PATH']), PYTHONPATH=str(REPO_ROOT / 'host'))

    def run(*args):
        argv = HELPER + ['--jail', 'llm-http', '--banned-file', str(tmp_path / 'banned.conf'),
                         '--metrics-file', str(tmp_path / 'metrics.prom'),
                         '--state-file', str(tmp_path / 'state' / 'state.json')]
        proc = subprocess.run(argv + list(args), env=env, capture_output=True, text=True, check=False)
        return proc

    run.path = tmp_path
    return run


def listed(path):
    return [line.split()[0] for line in (path / 'banned.conf').read_text().splitlines()
            if line and not line.startswith('#')]


def metrics(path):
    values = {}
    for line in (path / 'metrics.prom').read_text().splitlines():
        if not line.startswith('#'):
            name, value = line.rsplit(' ', 1)
            values[name.split('{')[0]] = int(value)
    return values


def reloads(path):
    calls = path / 'calls'
    return calls.read_text().count('reload nginx.service') if calls.exists() else 0


def test_ban_and_unban_rewrite_the_list_and_the_metrics(ban):
    assert ban('start').returncode == 0
    assert ban('ban', '203.0.113.7', '0').returncode == 0
    assert ban('ban', '2001:db8::7', '0').returncode == 0
    assert listed(ban.path) == ['203.0.113.7', '2001:db8::7']
    assert (ban.path / 'banned.conf').read_text().splitlines()[-1] == '2001:db8::7 1;'
    assert metrics(ban.path) == {'llm_http_bans_total': 2, 'llm_http_banned_addresses': 2, 'llm_http_ban_applied': 1}
    assert ban('unban', '203.0.113.7').returncode == 0
    assert listed(ban.path) == ['2001:db8::7']
    assert metrics(ban.path)['llm_http_banned_addresses'] == 1
    assert metrics(ban.path)['llm_http_bans_total'] == 2


def test_restored_bans_are_listed_but_not_counted_again(ban):
    ban('ban', '203.0.113.7', '0')
    ban('stop')
    assert listed(ban.path) == []
    ban('start')
    ban('ban', '203.0.113.7', '1')
    assert listed(ban.path) == ['203.0.113.7']
    assert metrics(ban.path)['llm_http_bans_total'] == 1
    assert json.loads((ban.path / 'state' / 'state.json').read_text()) == {'bans_total': 1}


def test_an_unchanged_list_does_not_reload_nginx(ban):
    ban('start')
    ban('ban', '203.0.113.7', '0')
    before = reloads(ban.path)
    ban('ban', '203.0.113.7', '0')
    ban('unban', '198.51.100.1')
    assert reloads(ban.path) == before
    assert metrics(ban.path)['llm_http_bans_total'] == 1


def test_a_list_nginx_refuses_is_rolled_back(ban):
    ban('ban', '203.0.113.7', '0')
    proc = ban('ban', '192.0.2.66', '0')
    assert proc.returncode == 1
    assert 'bad list' in proc.stderr
    assert listed(ban.path) == ['203.0.113.7']
    assert metrics(ban.path)['llm_http_ban_applied'] == 0
    assert metrics(ban.path)['llm_http_banned_addresses'] == 1


def test_not_an_address_is_refused_before_anything_is_written(ban):
    proc = ban('ban', '203.0.113.7; }', '0')
    assert proc.returncode == 2
    assert 'not an IP address' in proc.stderr
    assert not (ban.path / 'banned.conf').exists()


def test_networks_are_listed_as_nginx_reads_them(ban):
    ban('ban', '198.51.100.9/24', '0')
    ban('ban', '2001:DB8:0::0009', '0')
    assert listed(ban.path) == ['198.51.100.0/24', '2001:db8::9']
