# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-server (host/llm_server_host/server.py): the owner's hold, release and status, and
the engine units' condition, against a stand-in systemctl (its units in a JSON
file, every call logged)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llm_server_host import holds as _holds
from llm_server_host.collection import _registry

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
# The program as the host runs it: the package's module, from host/.
PROGRAM = [sys.executable, '-m', 'llm_server_host.server']

SYSTEMCTL = r'''
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
units = json.load(open(os.path.join(here, 'units.json')))
args = sys.argv[1:]
with open(os.path.join(here, 'systemctl.log'), 'a') as log:
    log.write(' '.join(args) + '\n')
names = args[args.index('--') + 1:]
if args[0] == 'show':
    print('\n'.join(units.get(name, 'inactive') for name in names))
else:
    for name in names:
        units[name] = 'active' if args[0] == 'start' else 'inactive'
    json.dump(units, open(os.path.join(here, 'units.json'), 'w'))
'''


class Host:
    def __init__(self, root, collection_root):
        self.root = root
        (root / 'instances').mkdir()
        for name in ('vllm-a', 'vllm-b'):
            (root / 'instances' / (name + '.json')).write_text(json.dumps(_registry.entry(name, 'vllm', 8001, 'm')))
        (root / 'systemctl').write_text('#!%s\n%s' % (sys.executable, SYSTEMCTL))
        (root / 'systemctl').chmod(0o755)
        (root / 'units.json').write_text(json.dumps({'vllm-a.service': 'active', 'vllm-b.service': 'active'}))
        self.hold_dir = str(root / 'holds')
        (root / 'llm-server.json').write_text(json.dumps({
            'hold_dir': self.hold_dir, 'registry_dir': str(root / 'instances'),
            'systemctl': str(root / 'systemctl')}))
        self.env = dict(os.environ, PYTHONPATH=os.path.join(REPO, 'host'))

    def run(self, *args):
        return subprocess.run(PROGRAM + ['--config', str(self.root / 'llm-server.json')] + list(args),
                              capture_output=True, text=True, timeout=30, check=False, env=self.env)

    def calls(self):
        path = self.root / 'systemctl.log'
        return [line for line in path.read_text().splitlines() if not line.startswith('show')] \
            if path.exists() else []

    def states(self):
        return json.loads((self.root / 'units.json').read_text())


@pytest.fixture
def host(tmp_path, collection_root):
    return Host(tmp_path, collection_root)


def test_the_owners_hold_stops_the_engine_and_keeps_every_start_away_until_released(host):
    proc = host.run('hold', 'vllm-a', '--reason', 'new fan')
    assert proc.returncode == 0, proc.stderr
    assert host.calls() == ['stop -- vllm-a.service'] and host.states()['vllm-a.service'] == 'inactive'
    assert 'held by the owner (new fan) and stopped' in proc.stdout
    # The owner's hold outlives the boot.
    assert _holds.read(host.hold_dir, current_boot='a-later-boot')[0]['owner']['vllm-a.service'][0]['reason'] \
        == 'new fan'
    refused = host.run('may-start', 'vllm-a.service')
    assert refused.returncode == 1
    assert 'vllm-a.service is held by the owner (new fan): not started' in refused.stderr
    assert host.run('may-start', 'vllm-b.service').returncode == 0

    status = host.run('status', '--json')
    rows = {row['unit']: row for row in json.loads(status.stdout)['engines']}
    assert rows['vllm-a.service']['state'] == 'inactive'
    assert [(h['holder'], h['reason']) for h in rows['vllm-a.service']['holds']] == [('owner', 'new fan')]
    assert rows['vllm-b.service']['holds'] == []
    assert 'held by the owner: new fan since' in host.run('status').stdout

    released = host.run('release', 'vllm-a')
    assert released.returncode == 0 and 'released and started' in released.stdout
    assert host.calls()[-1] == 'start -- vllm-a.service' and host.states()['vllm-a.service'] == 'active'
    assert host.run('may-start', 'vllm-a').returncode == 0


def test_a_release_leaves_the_engine_stopped_while_another_still_holds_it(host):
    host.run('hold', 'vllm-a')
    _holds.write(host.hold_dir, 'ups', {'vllm-a.service': [{'reason': 'on battery', 'since': 5.0}]})
    released = host.run('release', 'vllm-a')
    assert released.returncode == 0
    assert 'stays stopped: still held by the UPS (on battery)' in released.stdout
    assert host.calls() == ['stop -- vllm-a.service']
    assert 'held by the UPS (on battery)' in host.run('may-start', 'vllm-a.service').stderr


def test_a_broken_hold_file_holds_nothing_and_is_named(host):
    os.makedirs(host.hold_dir)
    with open(os.path.join(host.hold_dir, 'ups.json'), 'w') as handle:
        handle.write('{')
    proc = host.run('may-start', 'vllm-a.service')
    assert proc.returncode == 0 and 'hold file left out' in proc.stderr


@pytest.mark.parametrize('args, message', [
    (['hold', 'vllm a'], "'vllm a' is not an engine name"),
    (['hold', 'vllm-a', '--reason', ' '], '--reason must say why'),
    # A typo holds nothing that runs: refused, naming what is registered.
    (['hold', 'vllm-c'], 'vllm-c is not a registered engine ('),
    (['hold', 'vllm-c.service'], 'registered: vllm-a, vllm-b'),
])
def test_bad_input_is_refused_with_exit_2(host, args, message):
    proc = host.run(*args)
    assert proc.returncode == 2 and message in proc.stderr
    assert host.calls() == []


def test_a_release_of_an_engine_no_longer_registered_drops_its_hold(host):
    # Held, then taken out of the inventory: its hold can still be let go.
    host.run('hold', 'vllm-b')
    os.unlink(os.path.join(str(host.root), 'instances', 'vllm-b.json'))
    released = host.run('release', 'vllm-b')
    assert released.returncode == 0, released.stderr
    assert 'not in the registry any more' in released.stdout
    assert _holds.read(host.hold_dir)[0] == {}
    assert host.calls() == ['stop -- vllm-b.service']
