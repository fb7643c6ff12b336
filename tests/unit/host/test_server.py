# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-server (host/llm_server_host/server.py): the owner's hold, release and status and
the engine units' condition, against a stand-in systemctl (its units in a JSON
file, every call logged); the drain of an engine unit's stop, against a
stand-in of llama-server's /metrics and a process in its place."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

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


# ---------------------------------------------------------------- drain (an engine unit's ExecStop)

class Metrics(http.server.BaseHTTPRequestHandler):
    """llama-server's /metrics: busy for the first `busy_polls` reads, idle after."""
    reads = []
    busy_polls = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        busy = 1 if len(self.reads) < self.busy_polls else 0
        self.reads.append((time.monotonic(), busy))
        body = ('llamacpp:prompt_tokens_total 18\nllamacpp:requests_processing %d\n'
                'llamacpp:requests_deferred 0\n' % busy).encode()
        self.send_response(200)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def engine_metrics():
    Metrics.reads = []
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


# The engine's main process: writes when SIGTERM came; exits on it, or (ignore)
# only on the second one, as llama-server does with a request in flight.
ENGINE = r'''
import signal, sys, time
seen = []
def term(*_):
    seen.append(time.monotonic())
    open(sys.argv[1], 'a').write('%r\n' % seen[-1])
    if sys.argv[2] == 'exit' or len(seen) > 1:
        sys.exit(0)
signal.signal(signal.SIGTERM, term)
open(sys.argv[1] + '.ready', 'w').close()
while True:
    time.sleep(0.05)
'''


def start_engine(tmp_path, mode):
    marks = tmp_path / 'sigterm'
    proc = subprocess.Popen([sys.executable, '-c', ENGINE, str(marks), mode])
    deadline = time.monotonic() + 20
    while not os.path.exists(str(marks) + '.ready') and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc, marks


def drain(host, url, pid, *extra):
    env = dict(host.env, MAINPID=str(pid))
    return subprocess.run(PROGRAM + ['drain', '--engine', 'llamacpp', '--url', url] + list(extra),
                          capture_output=True, text=True, timeout=60, check=False, env=env)


def test_drain_waits_for_the_requests_in_flight_then_stops_the_engine(host, tmp_path, engine_metrics):
    Metrics.busy_polls = 4
    proc, marks = start_engine(tmp_path, 'exit')
    done = drain(host, 'http://127.0.0.1:%d' % engine_metrics.server_port, proc.pid)
    assert proc.wait(timeout=10) == 0
    assert done.returncode == 0, done.stderr
    assert 'draining http://127.0.0.1:' in done.stderr and '1 request(s) in flight or queued' in done.stderr
    sigterms = [float(line) for line in marks.read_text().split()]
    last_busy = max(at for at, busy in Metrics.reads if busy)
    first_idle = min(at for at, busy in Metrics.reads if not busy)
    # One SIGTERM, after the engine said it had nothing left.
    assert len(sigterms) == 1 and sigterms[0] > first_idle > last_busy


def test_drain_of_an_engine_without_metrics_stops_it_at_once(host, tmp_path):
    proc, marks = start_engine(tmp_path, 'exit')
    done = drain(host, 'http://127.0.0.1:9', proc.pid)
    assert proc.wait(timeout=10) == 0 and done.returncode == 0
    assert 'does not answer its /metrics: nothing to drain' in done.stderr
    assert len(marks.read_text().split()) == 1


def test_drain_says_so_when_the_engine_hangs_on_sigterm(host, tmp_path, engine_metrics):
    """A request that came in the last instant: llama-server does not exit on the
    first SIGTERM; drain gives up after --grace, and systemd's SIGTERM ends it."""
    Metrics.busy_polls = 0
    proc, marks = start_engine(tmp_path, 'ignore')
    try:
        done = drain(host, 'http://127.0.0.1:%d' % engine_metrics.server_port, proc.pid, '--grace', '0.5')
        assert done.returncode == 0
        assert 'did not exit within 0.5 s of SIGTERM: a request came in as it stopped' in done.stderr
        assert proc.poll() is None and len(marks.read_text().split()) == 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()


def test_drain_gives_up_waiting_after_its_timeout(host, tmp_path, engine_metrics):
    Metrics.busy_polls = 10 ** 6
    proc, _marks = start_engine(tmp_path, 'exit')
    started = time.monotonic()
    done = drain(host, 'http://127.0.0.1:%d' % engine_metrics.server_port, proc.pid, '--timeout', '1')
    assert proc.wait(timeout=10) == 0 and done.returncode == 0
    assert 'still has 1 request(s) after 1 s: stopping it anyway' in done.stderr
    assert 1.0 <= time.monotonic() - started < 20


@pytest.mark.parametrize('args, message', [
    (['--engine', 'vllm', '--url', 'http://127.0.0.1:1'], "invalid choice: 'vllm'"),
    (['--engine', 'llamacpp', '--url', 'http://127.0.0.1:1', '--timeout', '0'], 'must be more than 0, not 0'),
    (['--engine', 'llamacpp'], 'the following arguments are required: --url'),
])
def test_drain_refuses_bad_arguments(host, args, message):
    proc = subprocess.run(PROGRAM + ['drain'] + args, capture_output=True, text=True, timeout=30,
                          check=False, env=host.env)
    assert proc.returncode == 2 and message in proc.stderr
