# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-health (host/llm_server_host/health.py) run for real against tests/doubles/openai_server in a subprocess.

The watch tests put a stand-in `systemctl` first in PATH: it prints the unit
properties the test wrote (so grace and unit states are exercised through the
real parsing), and the restart command appends a line to a file.

The metrics tests read the file each tick writes for node exporter's textfile
collector, with the names and labels that
roles/serving/files/prometheus/llm-engines.rules.yml reads, and check it with
`promtool check metrics` (LLM_SERVER_PROMTOOL, else build/promtool/promtool
from `make promtool`; skipped where it is missing). The role's side (the
settings it writes, the file its stop and prune steps remove) is rendered
with Ansible's Templar.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import time

import pytest
import yaml

from llm_server_host import health as llm_health

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
# The program as the host runs it: the package's module, from host/.
HOST_DIR = os.path.join(REPO_ROOT, 'host')
LLM_HEALTH = [sys.executable, '-m', 'llm_server_host.health']
HOST_ENV = dict(os.environ, PYTHONPATH=HOST_DIR)
TEST_SERVER = os.path.join(REPO_ROOT, 'tests', 'doubles', 'openai_server', 'openai_test_server.py')
API_KEY = 'sk-test-4f1c9d2e8b7a'
PROMTOOL = os.environ.get('LLM_SERVER_PROMTOOL') or os.path.join(REPO_ROOT, 'build', 'promtool', 'promtool')
needs_promtool = pytest.mark.skipif(not os.access(PROMTOOL, os.X_OK),
                                    reason='no promtool at %s: run `make promtool`' % PROMTOOL)


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class RunningServer:
    def __init__(self, proc, url):
        self.proc = proc
        self.url = url

    def control(self, **changes):
        import urllib.request
        request = urllib.request.Request(self.url + '/_control', data=json.dumps(changes).encode(),
                                         headers={'Content-Type': 'application/json'})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())


@pytest.fixture
def start_server():
    """start(*args, port=0) -> RunningServer; every server is stopped at teardown."""
    procs = []

    def start(*args, port=0):
        cmd = [sys.executable, TEST_SERVER, '--port', str(port)] + list(args)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline()
        assert line.startswith('listening on '), 'test server did not start: %r %s' % (line, proc.stderr.read())
        return RunningServer(proc, line.split()[-1])

    yield start
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=5)
        proc.stdout.close()
        proc.stderr.close()


def run_health(*args, timeout=30, env=None):
    """(rc, stdout, stderr, seconds) of llm-health with args."""
    start = time.monotonic()
    proc = subprocess.run(LLM_HEALTH + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=env or HOST_ENV, check=False)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def check(url, model, *extra):
    rc, out, err, seconds = run_health('check', '--url', url, '--model', model, *extra)
    lines = out.splitlines()
    assert len(lines) == 1, 'check must print one line, got %r (stderr %s)' % (out, err)
    return rc, json.loads(lines[0]), seconds


# ------------------------------------------------------------------ check


def test_check_healthy(start_server):
    server = start_server('--model', 'qwen3-32b')
    rc, result, _seconds = check(server.url, 'qwen3-32b')
    assert rc == 0
    assert result['healthy'] is True
    assert set(result) == {'healthy', 'reason', 'health_s', 'completion_s'}
    assert isinstance(result['health_s'], float) and isinstance(result['completion_s'], float)
    assert result['reason'].startswith('ok: /health answered 200')


def test_check_hung_engine_is_unhealthy_within_the_deadline(start_server):
    server = start_server('--model', 'm', '--hang-completions')
    rc, result, seconds = check(server.url, 'm', '--deadline', '0.6')
    assert rc == 1
    assert result['healthy'] is False
    assert result['reason'] == ('/health answered 200 but a 1-token completion did not answer within 0.6 s '
                                '(engine hung?)')
    # The completion had what /health left of the 0.6 s deadline, and the process ends right after.
    assert 0.55 <= result['health_s'] + result['completion_s'] <= 0.8
    assert seconds < 2


def test_check_runtime_hang_switch(start_server):
    server = start_server('--model', 'm')
    assert check(server.url, 'm')[0] == 0
    server.control(hang_completions=True)
    rc, result, _seconds = check(server.url, 'm', '--deadline', '0.5')
    assert rc == 1 and 'engine hung?' in result['reason']
    server.control(hang_completions=False)
    assert check(server.url, 'm')[0] == 0


def test_check_wrong_model_names_the_served_ones(start_server):
    server = start_server('--model', 'llama-70b', '--model', 'qwen3-8b')
    rc, result, _seconds = check(server.url, 'x')
    assert rc == 1
    assert result['reason'] == "completion answered 404: model 'x' not served (served: llama-70b, qwen3-8b)"


def test_check_connection_refused():
    port = free_port()
    rc, result, _seconds = check('http://127.0.0.1:%d' % port, 'm')
    assert rc == 1
    assert result['reason'].startswith('GET /health: connection refused by 127.0.0.1:%d' % port)
    assert result['completion_s'] is None


def test_check_health_status(start_server):
    server = start_server('--model', 'm', '--health-status', '503')
    rc, result, _seconds = check(server.url, 'm')
    assert rc == 1
    assert result['reason'].startswith('GET /health answered 503')
    assert result['completion_s'] is None


def test_check_health_timeout():
    # A socket that listens but never accepts: the connection opens, nothing answers.
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        sock.listen(8)
        url = 'http://127.0.0.1:%d' % sock.getsockname()[1]
        rc, result, seconds = check(url, 'm', '--deadline', '0.5')
    assert rc == 1
    assert result['reason'] == 'GET /health timed out after 0.5 s'
    assert 0.4 <= result['health_s'] <= 0.8
    assert seconds < 2


def test_check_completion_error_status(start_server):
    server = start_server('--model', 'm', '--fail-status', '500')
    rc, result, _seconds = check(server.url, 'm')
    assert rc == 1
    assert result['reason'] == 'completion answered 500: failure set by the test'


def test_check_api_key_is_sent_and_never_printed(start_server, tmp_path):
    key_file = tmp_path / 'key'
    key_file.write_text(API_KEY + '\n')
    server = start_server('--model', 'm', '--api-key-file', str(key_file))

    rc, result, _seconds = check(server.url, 'm')
    assert rc == 1
    assert result['reason'].startswith('completion answered 401')

    wrong = tmp_path / 'wrong'
    wrong.write_text('sk-wrong-key-123456')
    rc, result, _seconds = check(server.url, 'm', '--api-key-file', str(wrong))
    assert rc == 1 and 'API key missing or wrong' in result['reason']

    rc, out, err, _seconds = run_health('check', '--url', server.url, '--model', 'm', '--api-key-file', str(key_file))
    assert rc == 0, out + err
    assert API_KEY not in out + err
    # The wrong model path also asks /v1/models with the key: the names come back.
    rc, out, err, _seconds = run_health('check', '--url', server.url, '--model', 'x', '--api-key-file', str(key_file))
    assert "(served: m)" in out and API_KEY not in out + err


def test_check_unreadable_key_file_is_a_usage_error(tmp_path):
    rc, out, err, _seconds = run_health('check', '--url', 'http://127.0.0.1:1', '--model', 'm',
                                        '--api-key-file', str(tmp_path / 'missing'))
    assert rc == 2 and out == ''
    assert 'cannot read the API key file' in err


def test_check_url_with_v1_suffix(start_server):
    server = start_server('--model', 'm')
    assert check(server.url + '/v1/', 'm')[0] == 0


# ------------------------------------------------------------------ wait


def test_wait_succeeds_when_the_server_comes_up_late(start_server):
    port = free_port()
    url = 'http://127.0.0.1:%d' % port
    waiter = subprocess.Popen(LLM_HEALTH + ['wait', '--url', url, '--model', 'm', '--timeout', '15',
                                            '--interval', '0.1', '--deadline', '2'],
                              env=HOST_ENV, stdout=subprocess.PIPE, text=True)
    try:
        # The server starts once the waiter has been refused, however slowly it started.
        first = waiter.stdout.readline()
        time.sleep(0.5)
        start_server('--model', 'm', port=port)
        out, _err = waiter.communicate(timeout=20)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 0, first + out
    lines = (first + out).splitlines()
    assert 'connection refused' in lines[0]
    assert lines[-1].startswith('healthy after ')
    elapsed = float(lines[-1].split()[2])
    assert 0.5 <= elapsed < 10


def test_wait_fails_after_the_timeout():
    url = 'http://127.0.0.1:%d' % free_port()
    rc, out, _err, seconds = run_health('wait', '--url', url, '--model', 'm', '--timeout', '1', '--interval', '0.2')
    assert rc == 1
    last = out.splitlines()[-1]
    assert last.startswith('not healthy after 1.')
    assert 'connection refused' in last
    # Progress is printed once per kind of failure, not once per check.
    assert len(out.splitlines()) == 2
    assert 1.0 <= seconds < 3


def test_wait_json_and_deadline_cut_to_the_timeout(start_server):
    server = start_server('--model', 'm', '--hang-completions')
    rc, out, _err, seconds = run_health('wait', '--url', server.url, '--model', 'm', '--timeout', '1',
                                        '--deadline', '15', '--json')
    assert rc == 1
    result = json.loads(out.splitlines()[-1])
    assert result['healthy'] is False and 'engine hung?' in result['reason']
    assert result['attempts'] == 1 and 1.0 <= result['elapsed_s'] < 1.5
    assert seconds < 3


# ------------------------------------------------------------------ watch


@pytest.fixture
def watch_env(tmp_path):
    """Stand-in systemctl in PATH; returns helpers to set the unit state and run ticks."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir()
    show_file = tmp_path / 'systemctl-show'
    calls = tmp_path / 'systemctl-calls'
    fake = bin_dir / 'systemctl'
    fake.write_text('#!/bin/sh\necho "$@" >> "%s"\n'
                    'if [ "$1" = show ] && [ -f "%s" ]; then cat "%s"; exit 0; fi\n'
                    'echo "System has not been booted with systemd" >&2; exit 1\n' % (calls, show_file, show_file))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = dict(HOST_ENV, PATH='%s%s%s' % (bin_dir, os.pathsep, os.environ.get('PATH', '')))

    class Watch:
        hold_dir = tmp_path / 'holds'
        restarts_file = tmp_path / 'restarts'
        state_dir = tmp_path / 'state'
        config_path = tmp_path / 'engine-a.json'
        calls_file = calls

        def unit(self, active='active', entered_s_ago=3600.0, load='loaded'):
            entered = int((time.monotonic() - entered_s_ago) * 1e6)
            show_file.write_text('LoadState=%s\nActiveState=%s\nSubState=running\n'
                                 'ActiveEnterTimestampMonotonic=%d\n' % (load, active, entered))

        def no_systemd(self):
            if show_file.exists():
                show_file.unlink()

        metrics_dir = tmp_path / 'metrics'
        metrics_file = metrics_dir / 'llm_engine_probe_engine-a.prom'

        def configure(self, url, **overrides):
            self.metrics_dir.mkdir(exist_ok=True)
            config = {'name': 'engine-a', 'url': url, 'model': 'm', 'unit': 'engine-a.service',
                      'deadline_s': 2, 'state_dir': str(self.state_dir), 'grace_s': 0,
                      'restart_command': ['sh', '-c', 'echo restart >> "$0"', str(self.restarts_file)],
                      'metrics_dir': str(self.metrics_dir), 'interval': '30s'}
            config.update(overrides)
            self.config_path.write_text(json.dumps(config))

        def tick(self):
            """(rc, what the tick logged without the program's prefix, its standard output)."""
            rc, out, err, _seconds = run_health('watch', '--config', self.config_path, env=env)
            said = '\n'.join(line.split('llm-health: ', 1)[-1] for line in err.splitlines())
            return rc, said, out

        def state(self):
            return json.loads((self.state_dir / 'engine-a.json').read_text())

        def restarts(self):
            return len(self.restarts_file.read_text().splitlines()) if self.restarts_file.exists() else 0

        def metrics(self):
            """{name: value} of the metrics file, each family once with the instance's labels."""
            return metric_values(self.metrics_file.read_text())

    watch = Watch()
    watch.unit()
    return watch


def test_watch_counts_failures_and_restarts_at_the_threshold(start_server, watch_env):
    server = start_server('--model', 'm', '--fail-status', '500')
    watch_env.configure(server.url, failures_before_restart=3, backoff_initial_s=30)

    for failure in (1, 2):
        rc, out, _err = watch_env.tick()
        assert rc == 1
        assert 'UNHEALTHY (failure %d of 3): completion answered 500' % failure in out
        assert len(out.splitlines()) == 1
        assert watch_env.state()['consecutive_failures'] == failure
        assert watch_env.restarts() == 0

    rc, out, _err = watch_env.tick()
    assert rc == 1
    assert 'failure 3 of 3' in out and 'restart 1; next restart allowed after 30 s' in out
    assert watch_env.restarts() == 1
    state = watch_env.state()
    assert state['restarts'] == 1 and state['consecutive_failures'] == 0
    assert state['next_allowed_restart'] - state['last_restart'] == pytest.approx(30)
    assert state['backoff_s'] == 60
    assert state['last_reason'] == 'completion answered 500: failure set by the test'
    assert state['last_restart_result'].startswith('ran `sh -c')
    assert state['last_restart_reason'] == 'completion answered 500: failure set by the test'
    # The unit state was read with systemctl show.
    assert 'show --property=LoadState,ActiveState,SubState,ActiveEnterTimestampMonotonic -- engine-a.service' \
        in watch_env.calls_file.read_text()
    assert sorted(os.listdir(watch_env.state_dir)) == ['.engine-a.lock', 'engine-a.json']


# Backoffs of seconds, not fractions: the second tick must come before the
# first backoff ends even on a loaded machine.
def test_watch_backoff_holds_back_then_allows_the_next_restart(start_server, watch_env):
    server = start_server('--model', 'm', '--fail-status', '503')
    watch_env.configure(server.url, failures_before_restart=1, backoff_initial_s=2, backoff_max_s=6)

    rc, out, _err = watch_env.tick()
    assert 'restart 1; next restart allowed after 2.0 s' in out
    first = watch_env.state()
    assert first['backoff_s'] == 4

    rc, out, _err = watch_env.tick()
    assert rc == 1 and 'restart held back by backoff for' in out
    assert watch_env.restarts() == 1
    assert watch_env.state()['restarts'] == 1

    time.sleep(max(0.0, first['next_allowed_restart'] - time.time()) + 0.05)
    rc, out, _err = watch_env.tick()
    assert 'restart 2; next restart allowed after 4.0 s' in out
    assert watch_env.restarts() == 2
    second = watch_env.state()
    assert second['next_allowed_restart'] - second['last_restart'] == pytest.approx(4)
    assert second['backoff_s'] == 6  # 8, capped by backoff_max_s

    time.sleep(max(0.0, second['next_allowed_restart'] - time.time()) + 0.05)
    rc, out, _err = watch_env.tick()
    assert 'restart 3; next restart allowed after 6.0 s' in out
    assert watch_env.state()['backoff_s'] == 6


def test_watch_success_resets_failures_and_later_the_backoff(start_server, watch_env):
    server = start_server('--model', 'm')
    watch_env.configure(server.url, failures_before_restart=2, backoff_initial_s=1, backoff_max_s=8,
                        backoff_reset_s=0.4)
    server.control(fail_status=500)
    watch_env.tick()
    watch_env.tick()  # restart 1: backoff 1 -> 2
    watch_env.tick()
    assert watch_env.state()['consecutive_failures'] == 1

    server.control(fail_status=0)
    rc, out, _err = watch_env.tick()
    assert rc == 0 and out.startswith('engine-a: healthy (/health ')
    state = watch_env.state()
    assert state['consecutive_failures'] == 0 and state['backoff_s'] == 2
    assert state['healthy_since'] == state['last_healthy']

    time.sleep(0.45)
    rc, out, _err = watch_env.tick()
    assert 'backoff back to 1.0 s' in out
    assert watch_env.state()['backoff_s'] == 1

    server.control(fail_status=500)
    rc, out, _err = watch_env.tick()
    assert 'failure 1 of 2' in out
    assert watch_env.state()['healthy_since'] is None
    assert watch_env.restarts() == 1


def test_watch_grace_after_the_unit_started(start_server, watch_env):
    server = start_server('--model', 'm', '--fail-status', '500')
    watch_env.configure(server.url, failures_before_restart=1, grace_s=60)
    watch_env.unit(entered_s_ago=1)
    rc, out, _err = watch_env.tick()
    assert rc == 0
    assert 'not counted, engine-a.service became active 1.' in out and '(grace 60 s)' in out
    assert watch_env.state()['consecutive_failures'] == 0 and watch_env.restarts() == 0

    watch_env.unit(entered_s_ago=61)
    rc, out, _err = watch_env.tick()
    assert rc == 1 and watch_env.restarts() == 1


@pytest.mark.parametrize('active', ['activating', 'inactive', 'failed'])
def test_watch_does_not_judge_a_unit_that_is_not_active(watch_env, active):
    watch_env.configure('http://127.0.0.1:%d' % free_port(), failures_before_restart=1)
    watch_env.unit(active=active)
    rc, out, _err = watch_env.tick()
    assert rc == 0
    assert out.strip() == 'engine-a: not checked, engine-a.service is %s (running)' % active
    assert watch_env.restarts() == 0 and watch_env.state()['consecutive_failures'] == 0


def test_watch_unknown_unit_is_a_configuration_error(watch_env):
    watch_env.configure('http://127.0.0.1:1')
    watch_env.unit(active='inactive', load='not-found')
    rc, said, out = watch_env.tick()
    assert rc == 2 and out == ''
    assert 'unit engine-a.service is not known to systemd' in said


def test_watch_without_systemd_checks_anyway(start_server, watch_env):
    server = start_server('--model', 'm')
    watch_env.configure(server.url)
    watch_env.no_systemd()
    rc, out, _err = watch_env.tick()
    assert rc == 0
    assert out.startswith('engine-a: healthy') and '[unit state unknown: systemctl show answered rc 1' in out


def test_watch_failing_restart_command_is_recorded(start_server, watch_env):
    server = start_server('--model', 'm', '--hang-completions')
    watch_env.configure(server.url, failures_before_restart=1, deadline_s=0.3,
                        restart_command=['sh', '-c', 'echo "Unit engine-a.service is masked." >&2; exit 1'])
    rc, out, _err = watch_env.tick()
    assert rc == 1
    assert 'engine hung?' in out
    assert 'failed (rc 1): Unit engine-a.service is masked.' in out
    state = watch_env.state()
    assert state['restarts'] == 1 and 'failed (rc 1)' in state['last_restart_result']


def test_watch_api_key_never_in_output_or_state(start_server, watch_env, tmp_path):
    key_file = tmp_path / 'key'
    key_file.write_text(API_KEY)
    server = start_server('--model', 'm', '--api-key-file', str(key_file))
    watch_env.configure(server.url, api_key_file=str(key_file))
    rc, out, err = watch_env.tick()
    assert rc == 0, out + err
    wrong = tmp_path / 'wrong'
    wrong.write_text('sk-other-key-98765')
    watch_env.configure(server.url, api_key_file=str(wrong))
    rc, out, err = watch_env.tick()
    assert rc == 1 and 'completion answered 401' in out
    state_text = (watch_env.state_dir / 'engine-a.json').read_text()
    for secret in (API_KEY, 'sk-other-key-98765'):
        assert secret not in out + err + state_text


def test_watch_unreadable_state_starts_afresh(start_server, watch_env):
    server = start_server('--model', 'm')
    watch_env.configure(server.url)
    watch_env.state_dir.mkdir()
    (watch_env.state_dir / 'engine-a.json').write_text('{not json')
    rc, out, _err = watch_env.tick()
    assert rc == 0 and 'unreadable' in out and 'starting afresh' in out
    assert watch_env.state()['consecutive_failures'] == 0
    assert not [name for name in os.listdir(watch_env.state_dir) if name.endswith('.tmp')]


def test_watch_bad_config_is_a_usage_error(watch_env):
    watch_env.configure('http://127.0.0.1:1', failures_before_restat=2)
    rc, said, out = watch_env.tick()
    assert rc == 2 and out == ''
    assert 'unknown key(s) failures_before_restat' in said


# ------------------------------------------------------------------ metrics

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
PROBE_LABELS = {'serving_instance': 'engine-a', 'unit': 'engine-a.service', 'model': 'm'}
# What llm-engines.rules.yml and its promtool tests read: name and type.
PROBE_FAMILIES = {
    'llm_engine_probe_success': 'gauge',
    'llm_engine_probe_timestamp_seconds': 'gauge',
    'llm_engine_probe_interval_seconds': 'gauge',
    'llm_engine_probe_restarts_total': 'counter',
}


def metric_values(text, labels=None):
    """{name: value} of an exposition text holding one sample a family, every one with HELP, TYPE and labels."""
    labels = PROBE_LABELS if labels is None else labels
    values, helped, types = {}, set(), {}
    for line in text.splitlines():
        if line.startswith('# HELP '):
            helped.add(line.split()[2])
        elif line.startswith('# TYPE '):
            _hash, _type, name, kind = line.split()
            types[name] = kind
        else:
            match = SAMPLE.match(line)
            assert match, 'not a sample line: %r' % line
            assert dict(LABEL.findall(match.group(2))) == labels, line
            assert match.group(1) not in values, 'two samples of %s' % match.group(1)
            values[match.group(1)] = float(match.group(3))
    assert types == PROBE_FAMILIES and helped == set(PROBE_FAMILIES), text
    assert set(values) == set(PROBE_FAMILIES), text
    return values


def promtool_check_metrics(text):
    proc = subprocess.run([PROMTOOL, 'check', 'metrics'], input=text, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, 'promtool check metrics: %s%s\n%s' % (proc.stdout, proc.stderr, text)


def test_watch_metrics_after_a_success(start_server, watch_env):
    server = start_server('--model', 'm')
    watch_env.configure(server.url)
    before = time.time()
    rc, out, _err = watch_env.tick()
    assert rc == 0 and 'metrics not written' not in out
    text = watch_env.metrics_file.read_text()
    values = metric_values(text)
    assert values['llm_engine_probe_success'] == 1
    assert before - 1 <= values['llm_engine_probe_timestamp_seconds'] <= time.time()
    # The time the tick ran, as its state file keeps it (to the millisecond).
    assert values['llm_engine_probe_timestamp_seconds'] == pytest.approx(watch_env.state()['last_check'], abs=0.001)
    assert values['llm_engine_probe_interval_seconds'] == 30
    assert values['llm_engine_probe_restarts_total'] == 0
    # Whole numbers without a fraction; the labels in the order the rules' tests write them.
    assert 'llm_engine_probe_success{serving_instance="engine-a",unit="engine-a.service",model="m"} 1\n' in text
    assert 'llm_engine_probe_interval_seconds{serving_instance="engine-a",unit="engine-a.service",model="m"} 30\n' \
        in text
    # Readable by node exporter, and no temporary file left beside it.
    assert stat.S_IMODE(watch_env.metrics_file.stat().st_mode) == 0o644
    assert os.listdir(watch_env.metrics_dir) == ['llm_engine_probe_engine-a.prom']


def test_watch_metrics_count_failures_and_restarts(start_server, watch_env):
    server = start_server('--model', 'm', '--fail-status', '500')
    watch_env.configure(server.url, failures_before_restart=2, backoff_initial_s=0, interval='1min 30s')

    rc, _out, _err = watch_env.tick()
    assert rc == 1
    values = watch_env.metrics()
    assert values['llm_engine_probe_success'] == 0 and values['llm_engine_probe_restarts_total'] == 0
    assert values['llm_engine_probe_interval_seconds'] == 90
    first_at = values['llm_engine_probe_timestamp_seconds']

    rc, out, _err = watch_env.tick()
    assert rc == 1 and 'restart 1;' in out
    values = watch_env.metrics()
    assert values['llm_engine_probe_success'] == 0 and values['llm_engine_probe_restarts_total'] == 1
    assert values['llm_engine_probe_timestamp_seconds'] > first_at

    # Healthy again: the counter stays where it was (a counter never goes down).
    server.control(fail_status=0)
    watch_env.tick()
    values = watch_env.metrics()
    assert values['llm_engine_probe_success'] == 1 and values['llm_engine_probe_restarts_total'] == 1

    server.control(fail_status=503)
    watch_env.tick()
    rc, out, _err = watch_env.tick()
    assert 'restart 2;' in out and watch_env.restarts() == 2
    values = watch_env.metrics()
    assert values['llm_engine_probe_success'] == 0 and values['llm_engine_probe_restarts_total'] == 2
    assert watch_env.state()['restarts'] == 2


def test_watch_metrics_restart_held_back_is_still_a_failure(start_server, watch_env):
    server = start_server('--model', 'm', '--fail-status', '500')
    watch_env.configure(server.url, failures_before_restart=1, backoff_initial_s=600)
    watch_env.tick()
    rc, out, _err = watch_env.tick()
    assert rc == 1 and 'held back by backoff' in out
    values = watch_env.metrics()
    assert values['llm_engine_probe_success'] == 0 and values['llm_engine_probe_restarts_total'] == 1


def test_watch_metrics_failure_in_the_grace_is_not_a_failure(start_server, watch_env):
    server = start_server('--model', 'm', '--fail-status', '500')
    watch_env.configure(server.url, failures_before_restart=1, grace_s=60)
    watch_env.unit(entered_s_ago=1)
    rc, out, _err = watch_env.tick()
    assert rc == 0 and 'not counted' in out
    assert watch_env.metrics()['llm_engine_probe_success'] == 1

    watch_env.unit(entered_s_ago=61)
    rc, _out, _err = watch_env.tick()
    assert rc == 1
    values = watch_env.metrics()
    assert values['llm_engine_probe_success'] == 0 and values['llm_engine_probe_restarts_total'] == 1


@pytest.mark.parametrize('active', ['activating', 'inactive', 'failed'])
def test_watch_metrics_unit_not_active_is_not_a_failure(watch_env, active):
    watch_env.configure('http://127.0.0.1:%d' % free_port(), failures_before_restart=1)
    watch_env.unit(active=active)
    rc, _out, _err = watch_env.tick()
    assert rc == 0
    values = watch_env.metrics()
    assert values['llm_engine_probe_success'] == 1 and values['llm_engine_probe_restarts_total'] == 0


def test_watch_restarts_survive_a_new_checker_process_and_a_new_configuration(start_server, watch_env):
    server = start_server('--model', 'm', '--fail-status', '500')
    watch_env.configure(server.url, failures_before_restart=1, backoff_initial_s=0)
    watch_env.tick()
    watch_env.tick()
    assert watch_env.metrics()['llm_engine_probe_restarts_total'] == 2
    # A new deployment rewrites the settings (another interval, deadline): the count is the state file's.
    server.control(fail_status=0)
    watch_env.configure(server.url, failures_before_restart=3, interval=15, deadline_s=5)
    watch_env.tick()
    values = watch_env.metrics()
    assert values['llm_engine_probe_restarts_total'] == 2 and values['llm_engine_probe_interval_seconds'] == 15


def test_watch_without_metrics_dir_writes_no_metrics(start_server, watch_env):
    server = start_server('--model', 'm')
    watch_env.configure(server.url, metrics_dir=None, interval=None)
    rc, out, _err = watch_env.tick()
    assert rc == 0 and 'metrics' not in out
    assert os.listdir(watch_env.metrics_dir) == []


def test_watch_unwritable_metrics_do_not_stop_the_check(start_server, watch_env):
    server = start_server('--model', 'm', '--fail-status', '500')
    missing = watch_env.metrics_dir / 'missing'
    watch_env.configure(server.url, failures_before_restart=1, metrics_dir=str(missing))
    rc, out, _err = watch_env.tick()
    # The restart happened and the state was kept; the line says why there is no file.
    assert rc == 1 and 'restart 1;' in out and watch_env.restarts() == 1
    assert out.rstrip().endswith('metrics not written to %s/llm_engine_probe_engine-a.prom: '
                                 'No such file or directory' % missing)
    assert watch_env.state()['restarts'] == 1


@needs_promtool
@pytest.mark.parametrize('fail_status, failures_before_restart, grace_s', [
    (0, 3, 0),      # healthy
    (500, 3, 0),    # a counted failure
    (500, 1, 0),    # a counted failure and a restart
    (500, 1, 60),   # a failure in the loading grace
])
def test_watch_metrics_pass_promtool(start_server, watch_env, fail_status, failures_before_restart, grace_s):
    server = start_server('--model', 'Qwen/Qwen3-32B', '--fail-status', str(fail_status))
    watch_env.configure(server.url, model='Qwen/Qwen3-32B', failures_before_restart=failures_before_restart,
                        grace_s=grace_s)
    watch_env.unit(entered_s_ago=1 if grace_s else 3600)
    watch_env.tick()
    promtool_check_metrics(watch_env.metrics_file.read_text())


def test_metrics_are_those_the_alert_rules_read():
    """Every llm_engine_probe_ series of the rules and of their promtool tests, with the labels the checker writes."""
    with open(os.path.join(REPO_ROOT, 'roles', 'serving', 'files', 'prometheus', 'llm-engines.rules.yml'),
              encoding='utf-8') as handle:
        rules = handle.read()
    with open(os.path.join(REPO_ROOT, 'tests', 'prometheus', 'llm-engines.test.yml'), encoding='utf-8') as handle:
        rule_tests = yaml.safe_load(handle)
    written = {name for name, _kind, _help in llm_health.METRIC_FAMILIES}
    assert set(re.findall(r'llm_engine_probe_[a-z_]+', rules)) == written == set(PROBE_FAMILIES)
    assert {kind for name, kind, _help in llm_health.METRIC_FAMILIES if name.endswith('_total')} == {'counter'}
    series = [entry['series'] for test in rule_tests['tests'] for entry in test['input_series']
              if entry['series'].startswith('llm_engine_probe_')]
    assert series
    for text in series:
        # job and instance are node exporter's scrape target; the rest comes from the file.
        labels = dict(LABEL.findall(text))
        assert set(labels) - {'job', 'instance'} == set(PROBE_LABELS), text
        assert labels['unit'] == labels['serving_instance'] + '.service', text


def test_metrics_label_values_are_escaped():
    config = {'name': 'a', 'unit': 'a.service', 'model': 'org/model "q"\\v1', 'interval': 30.0}
    text = llm_health.render_metrics(config, True, 1700000000.25, 3)
    assert 'model="org/model \\"q\\"\\\\v1"' in text
    values = metric_values(text, {'serving_instance': 'a', 'unit': 'a.service', 'model': 'org/model \\"q\\"\\\\v1'})
    assert values['llm_engine_probe_timestamp_seconds'] == 1700000000.25
    if os.access(PROMTOOL, os.X_OK):
        promtool_check_metrics(text)


# ------------------------------------------------------------------ the role's side (Ansible's Templar)


def _role_yaml(*parts):
    with open(os.path.join(REPO_ROOT, 'roles', 'serving', *parts), encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def _task(tasks, prefix):
    """The task whose name starts with prefix, looked for in blocks too."""
    for task in tasks:
        if task.get('name', '').startswith(prefix):
            return task
        found = _task(task.get('block', []), prefix) if 'block' in task else None
        if found:
            return found
    raise AssertionError('no task named %r' % prefix)


def _vars_expression(name):
    value = _role_yaml('vars', 'main.yml')[name]
    match = re.match(r'^\{\{\s*(.*?)\s*\}\}$', value)
    assert match, value
    return match.group(1)


def _metrics_dir_expression():
    return _vars_expression('_serving_metrics_dir')


def test_role_settings_metrics_file_and_its_removal(render, start_server, watch_env, tmp_path):
    """The settings instance.yml writes pass the checker, whose file the stop (stop.yml) and prune steps remove."""
    instance_tasks = _role_yaml('tasks', 'instance.yml')
    settings = _task(instance_tasks, 'Write the health check settings')['vars']['_serving_health_config']
    stop = _task(_role_yaml('tasks', 'stop.yml'), "Take out of the proxy's list")['loop']
    prune = _task(_role_yaml('tasks', 'prune_one.yml'), 'Remove the files of')['loop']
    template = ('{%% set _serving_metrics_dir = %s %%}{%% set _serving_scrape_dir = %s %%}'
                '{%% set _serving_registry_dir = %s %%}{%% set _serving_hold_dir = %s %%}'
                '{%% set _serving_scrape_file = %s %%}{%% set serving_prune_name = serving_instance.name %%}%s'
                % (_metrics_dir_expression(), _vars_expression('_serving_scrape_dir'),
                   _vars_expression('_serving_registry_dir'), _vars_expression('_serving_hold_dir'),
                   _vars_expression('_serving_scrape_file'),
                   json.dumps({'settings': settings, 'stop': stop, 'prune': prune})))
    server = start_server('--model', 'Qwen/Qwen3-32B')
    port = int(server.url.rsplit(':', 1)[1])
    defaults = _role_yaml('defaults', 'main.yml')
    variables = {key: value for key, value in defaults.items() if key.startswith('serving_health_')}
    variables.update(serving_instance={'name': 'engine-a', 'port': port, 'model_name': 'Qwen/Qwen3-32B'},
                     serving_config_dir=str(tmp_path / 'etc'), serving_state_dir=str(tmp_path / 'var'),
                     llm_server_metrics_dir=str(watch_env.metrics_dir))
    hold_dir = str(tmp_path / 'var' / 'holds')
    result = render(template, **variables)
    assert 'value' in result, result
    rendered = result['value'] if isinstance(result['value'], dict) else json.loads(result['value'])

    config = rendered['settings']
    assert config['metrics_dir'] == str(watch_env.metrics_dir) and config['interval'] == '30s'
    watch_env.metrics_dir.mkdir()
    watch_env.config_path.write_text(json.dumps(config))
    rc, out, err = watch_env.tick()
    assert rc == 0, out + err
    # The holds where the serving role keeps them (serving_state_dir/holds): nobody holds it.
    assert config['hold_dir'] == hold_dir
    text = watch_env.metrics_file.read_text()
    probe, held = text.split('# HELP llm_engine_held ')
    assert 'llm_engine_held{serving_instance="engine-a",unit="engine-a.service",model="Qwen/Qwen3-32B"} 0' in held
    values = metric_values(probe, dict(PROBE_LABELS, model='Qwen/Qwen3-32B'))
    assert values['llm_engine_probe_success'] == 1 and values['llm_engine_probe_interval_seconds'] == 30

    # Stopping and pruning the instance remove that very file, and its registration for Prometheus.
    assert str(watch_env.metrics_file) in rendered['stop']
    assert str(watch_env.metrics_file) in rendered['prune']
    scrape_file = '/etc/llm-server/scrape/llm_engine/engine-a.json'
    assert scrape_file in rendered['stop'] and scrape_file in rendered['prune']


def test_role_metrics_dir_defaults_to_node_exporters(render):
    result = render('{{ %s }}' % _metrics_dir_expression())
    assert result == {'value': '/var/lib/prometheus/node-exporter'}


# ------------------------------------------------------------------ configuration (in-process)


def _write_config(tmp_path, **values):
    path = tmp_path / 'c.json'
    path.write_text(json.dumps(values))
    return str(path)


def test_config_defaults_and_numbers_templated_as_strings(tmp_path):
    config = llm_health.load_watch_config(_write_config(
        tmp_path, name='vllm-main', url='http://127.0.0.1:8001/', model='m', unit='vllm-main.service',
        deadline_s='20', failures_before_restart='3', backoff_initial_s=60))
    assert config['url'] == 'http://127.0.0.1:8001'
    assert config['deadline_s'] == 20.0 and config['failures_before_restart'] == 3
    assert config['backoff_max_s'] == 900 and config['backoff_reset_s'] == 900
    assert config['grace_s'] == 600 and config['state_dir'] == '/var/lib/llm-server/health'
    assert config['restart_command'] == ['systemctl', 'restart', 'vllm-main.service']


@pytest.mark.parametrize('values, message', [
    ({'unit': None}, 'missing required key(s) unit'),
    ({'name': '../x'}, 'name'),
    ({'url': 'ftp://h'}, 'is not an http:// or https:// URL'),
    ({'failures_before_restart': 0}, 'failures_before_restart must be at least 1'),
    ({'failures_before_restart': 1.5}, 'must be a whole number'),
    ({'deadline_s': True}, 'deadline_s must be a number'),
    ({'backoff_initial_s': 60, 'backoff_max_s': 30}, 'backoff_max_s (30.0) must not be below'),
    ({'restart_command': 'systemctl restart x'}, 'restart_command must be a non-empty list'),
    ({'metrics_dir': '/srv/m'}, 'interval (the timer\'s period) is required with metrics_dir'),
    ({'metrics_dir': 'relative', 'interval': 30}, 'metrics_dir must be an absolute path'),
    ({'interval': '30 seconds please'}, "interval '30 seconds please' is not a systemd time span"),
    ({'interval': '1mon'}, 'is not a systemd time span'),
    ({'interval': 0}, 'interval must be above 0'),
    ({'interval': True}, 'interval must be a time span'),
])
def test_config_errors(tmp_path, values, message):
    base = {'name': 'a', 'url': 'http://127.0.0.1:8001', 'model': 'm', 'unit': 'a.service'}
    base.update(values)
    with pytest.raises(llm_health.ConfigError) as info:
        llm_health.load_watch_config(_write_config(tmp_path, **base))
    assert message in str(info.value)


@pytest.mark.parametrize('span, seconds', [
    ('30s', 30), ('30', 30), (45, 45), ('2.5', 2.5), ('1min', 60), ('1m30s', 90), ('1min 30s', 90),
    ('5 min', 300), ('1h', 3600), ('500ms', 0.5), ('2 minutes', 120), ('1M', 2629800),
])
def test_config_interval_is_a_systemd_time_span(tmp_path, span, seconds):
    config = llm_health.load_watch_config(_write_config(
        tmp_path, name='a', url='http://127.0.0.1:8001', model='m', unit='a.service', metrics_dir='/srv/m',
        interval=span))
    assert config['interval'] == pytest.approx(seconds)
    assert config['metrics_dir'] == '/srv/m'


# ------------------------------------------------------------------ holds


def test_watch_never_restarts_a_held_engine_and_says_who_holds_it(start_server, watch_env):
    from llm_server_host import holds as _holds
    server = start_server('--model', 'm', '--fail-status', '500')
    watch_env.configure(server.url, failures_before_restart=1, backoff_initial_s=0, hold_dir=str(watch_env.hold_dir))
    _holds.write(str(watch_env.hold_dir), 'owner', {'engine-a.service': [{'reason': 'new fan', 'since': 1.0}]},
                 persistent=True)
    _holds.write(str(watch_env.hold_dir), 'ups', {'engine-a.service': [{'reason': 'on battery', 'since': 2.0}]})

    rc, out, _err = watch_env.tick()
    assert rc == 1
    assert 'not restarted; held by the owner (new fan), the UPS (on battery)' in out
    assert watch_env.restarts() == 0
    text = watch_env.metrics_file.read_text()
    promtool_check_metrics(text)
    labels = 'serving_instance="engine-a",unit="engine-a.service",model="m"'
    assert 'llm_engine_held{%s} 1\n' % labels in text
    assert 'llm_engine_held_by{%s,holder="owner"} 1\n' % labels in text
    assert 'llm_engine_held_by{%s,holder="ups"} 1\n' % labels in text

    # Stopped by its holders: not checked, and the line says why it is down.
    watch_env.unit(active='inactive')
    rc, out, _err = watch_env.tick()
    assert rc == 0
    assert out.strip() == ('engine-a: not checked, engine-a.service is inactive (running); '
                           'held by the owner (new fan), the UPS (on battery)')

    # Released by both: 0, no holder, and the restart at the threshold again.
    _holds.write(str(watch_env.hold_dir), 'owner', {}, persistent=True)
    _holds.write(str(watch_env.hold_dir), 'ups', {})
    watch_env.unit()
    rc, out, _err = watch_env.tick()
    assert 'restart 1;' in out and watch_env.restarts() == 1
    text = watch_env.metrics_file.read_text()
    promtool_check_metrics(text)
    assert 'llm_engine_held{%s} 0\n' % labels in text and 'llm_engine_held_by{' not in text


def test_watch_without_hold_dir_writes_no_hold_metrics(start_server, watch_env):
    server = start_server('--model', 'm')
    watch_env.configure(server.url)
    watch_env.tick()
    assert 'llm_engine_held' not in watch_env.metrics_file.read_text()


def test_watch_refuses_a_relative_hold_dir(start_server, watch_env):
    server = start_server('--model', 'm')
    watch_env.configure(server.url, hold_dir='holds')
    rc, out, err = watch_env.tick()
    assert rc == 2 and 'hold_dir must be an absolute path' in out + err
