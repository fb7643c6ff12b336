# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-proxy-metrics (host/llm_server_host/proxy_metrics.py) run for real on a temporary access log.

The exporter runs as a process with its HTTP server on a free loopback port
and a short poll interval; the tests write the log as nginx and logrotate
would (appends, a line in two writes, rename and create, copytruncate, a
file that is missing first) and read /metrics over HTTP, parsed with
prometheus_client's own parser and checked with `promtool check metrics`
where promtool is at hand (make promtool). They poll /metrics until the
expected count is there, never sleep for a fixed time. The unit as the role
renders it is checked too, and that the series and labels the alert rules
(roles/nginx/files/prometheus/llm-proxy.rules.yml) use are served.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLE = os.path.join(REPO_ROOT, 'roles', 'nginx')
# The program as the host runs it: the package's module, from host/.
EXPORTER = [sys.executable, '-m', 'llm_server_host.proxy_metrics']
RULES = os.path.join(ROLE, 'files', 'prometheus', 'llm-proxy.rules.yml')
RULES_TEST = os.path.join(REPO_ROOT, 'tests', 'prometheus', 'llm-proxy.test.yml')
TEMPLATE = os.path.join(ROLE, 'templates', 'llm-proxy-metrics.service.j2')
POLL = 0.05
GROUP = 'llm_1_qwen3-32b'


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def promtool():
    path = os.environ.get('LLM_SERVER_PROMTOOL') or os.path.join(REPO_ROOT, 'build', 'promtool', 'promtool')
    return path if os.path.exists(path) else shutil.which('promtool')


def entry(**fields):
    """One llm_access line as nginx writes it (escape=json), for a proxied request unless fields say otherwise."""
    line = {
        'time': '2026-03-01T12:00:00+00:00', 'msec': 1772366400.123, 'request_id': 'f0e1d2c3b4a5968778695a4b3c2d1e0f',
        'remote_addr': '192.0.2.10', 'key': 'alice', 'method': 'POST', 'uri': '/v1/chat/completions', 'status': 200,
        'request_length': 512, 'bytes_sent': 1000, 'request_time': 1.5, 'model': 'qwen3-32b',
        'upstream_group': GROUP, 'upstream_addr': '127.0.0.1:8001', 'upstream_status': '200',
        'upstream_connect_time': '0.000', 'upstream_header_time': '0.200', 'upstream_response_time': '1.500',
    }
    line.update(fields)
    return json.dumps(line, separators=(',', ':')) + '\n'


def nginx_answered(status, **fields):
    """A request nginx answered itself (401, 429, ...): no upstream address or times."""
    return entry(status=status, upstream_addr='', upstream_status='', upstream_connect_time='',
                 upstream_header_time='', upstream_response_time='', request_time=0.0, **fields)


def append(path, text):
    with open(path, 'ab') as handle:
        handle.write(text.encode() if isinstance(text, str) else text)


class Scrape:
    """One /metrics answer: samples by name and labels."""

    def __init__(self, text):
        self.text = text
        self.samples = []
        self.families = {}
        for family in text_string_to_metric_families(text):
            self.families[family.name] = family
            for sample in family.samples:
                self.samples.append((sample.name, sample.labels, sample.value))

    def find(self, metric, /, **labels):
        wanted = {k: str(v) for k, v in labels.items()}
        return [(lab, value) for n, lab, value in self.samples
                if n == metric and all(lab.get(k) == v for k, v in wanted.items())]

    def value(self, metric, /, **labels):
        found = [(lab, value) for lab, value in self.find(metric, **labels)
                 if set(lab) == set(labels)]
        assert len(found) == 1, 'expected one %s%s, found %s' % (metric, labels, self.find(metric, **labels))
        return found[0][1]

    def names(self):
        return {n for n, _lab, _v in self.samples}


class Exporter:
    def __init__(self, proc, port, stderr_path):
        self.proc = proc
        self.url = 'http://127.0.0.1:%d/metrics' % port
        self.stderr_path = stderr_path

    def scrape(self):
        with urllib.request.urlopen(self.url, timeout=5) as response:
            return Scrape(response.read().decode())

    def wait(self, predicate, timeout=2.5):
        """The first scrape for which predicate(scrape) holds; polls every POLL seconds."""
        deadline = time.monotonic() + timeout
        while True:
            scrape = self.scrape()
            if predicate(scrape):
                return scrape
            assert self.proc.poll() is None, 'the exporter exited: %s' % self.stderr()
            if time.monotonic() > deadline:
                raise AssertionError('not reached in %.1f s; last scrape:\n%s\nstderr:\n%s'
                                     % (timeout, scrape.text, self.stderr()))
            time.sleep(POLL)

    def wait_lines(self, count, timeout=2.5):
        return self.wait(lambda s: s.value('llm_proxy_log_lines_total') >= count, timeout)

    def stderr(self):
        with open(self.stderr_path) as handle:
            return handle.read()


@pytest.fixture
def start_exporter(tmp_path):
    """start_exporter(log path, *args) -> Exporter once /metrics answers; stopped after the test."""
    started = []

    def start(log, *args):
        port = free_port()
        stderr_path = str(tmp_path / ('exporter-%d.err' % len(started)))
        env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, 'host'))
        with open(stderr_path, 'w') as stderr:
            proc = subprocess.Popen(EXPORTER + ['--log', str(log), '--port', str(port),
                                                '--poll-interval', str(POLL)] + list(args),
                                    env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        exporter = Exporter(proc, port, stderr_path)
        started.append(exporter)
        deadline = time.monotonic() + 2.5
        while True:
            try:
                socket.create_connection(('127.0.0.1', port), timeout=1).close()
                return exporter
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError('exporter did not listen: %s' % exporter.stderr())
                time.sleep(0.02)

    yield start
    for exporter in started:
        if exporter.proc.poll() is None:
            exporter.proc.terminate()
        try:
            exporter.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            exporter.proc.kill()
            exporter.proc.wait()


@pytest.fixture
def log(tmp_path):
    path = tmp_path / 'llm-access.log'
    path.write_text('')
    return path


# --- what is counted ---------------------------------------------------------------

def test_requests_by_status_and_group(start_exporter, log):
    exporter = start_exporter(log)
    lines = ([entry()] * 3 + [entry(status=502, upstream_status='502, 502',
                                    upstream_addr='127.0.0.1:8001, 127.0.0.1:8002')] * 2
             + [entry(upstream_group='llm_2_small', bytes_sent=50)]
             + [nginx_answered(401, key='', bytes_sent=300), nginx_answered(429, bytes_sent=200)]
             # /healthz is proxied to llm_health, whatever $llm_upstream says.
             + [entry(uri='/healthz', method='GET', upstream_addr='127.0.0.1:8001', bytes_sent=20)]
             # Bounded labels: a status that is not three digits, a group that is no upstream name.
             + [entry(status=0), entry(status='abc'), entry(status=1000), entry(upstream_group='{evil} "x"')])
    append(log, ''.join(lines))
    scrape = exporter.wait_lines(len(lines))
    v = scrape.value
    assert v('llm_proxy_requests_total', status='200', upstream_group=GROUP) == 3
    assert v('llm_proxy_requests_total', status='502', upstream_group=GROUP) == 2
    assert v('llm_proxy_requests_total', status='200', upstream_group='llm_2_small') == 1
    assert v('llm_proxy_requests_total', status='401', upstream_group='') == 1
    assert v('llm_proxy_requests_total', status='429', upstream_group='') == 1
    assert v('llm_proxy_requests_total', status='200', upstream_group='llm_health') == 1
    assert v('llm_proxy_requests_total', status='other', upstream_group=GROUP) == 3
    assert v('llm_proxy_requests_total', status='200', upstream_group='other') == 1
    # A group's 5xx start at 0, so that rate() sees the first one.
    assert v('llm_proxy_requests_total', status='503', upstream_group='llm_2_small') == 0
    assert v('llm_proxy_requests_total', status='504', upstream_group=GROUP) == 0
    assert v('llm_proxy_response_bytes_total', upstream_group=GROUP) == 8000
    assert v('llm_proxy_response_bytes_total', upstream_group='') == 500
    assert v('llm_proxy_log_lines_total') == len(lines)
    assert v('llm_proxy_log_lines_invalid_total') == 0
    assert v('llm_proxy_log_last_line_timestamp_seconds') == pytest.approx(1772366400.123)
    assert v('llm_proxy_log_readable') == 1
    # Never the key, the address, the URI or the model.
    labels = {name for _n, lab, _v in scrape.samples for name in lab}
    assert labels == {'status', 'upstream_group', 'le'}
    values = {value for _n, lab, _v in scrape.samples for value in lab.values()}
    assert not values & {'alice', '192.0.2.10', '/v1/chat/completions', 'qwen3-32b', '127.0.0.1:8001'}


def test_histograms(start_exporter, log):
    exporter = start_exporter(log)
    lines = [
        entry(request_time=0.03, upstream_header_time='0.020'),
        entry(request_time=0.2, upstream_header_time='2.000, 0.300'),  # next upstream: the last try
        entry(request_time=7.0, upstream_header_time='0.100 : 0.040'),  # internal redirect: the last
        entry(request_time=400.0, upstream_header_time='-'),
        entry(request_time=1.0, upstream_header_time=''),
        entry(request_time=1.0, upstream_header_time='0.500, -'),  # the last try sent no header
        nginx_answered(401),
    ]
    append(log, ''.join(lines))
    scrape = exporter.wait_lines(len(lines))
    bucket = 'llm_proxy_request_duration_seconds_bucket'
    v = scrape.value
    assert v(bucket, upstream_group=GROUP, le='0.05') == 1
    assert v(bucket, upstream_group=GROUP, le='0.25') == 2
    assert v(bucket, upstream_group=GROUP, le='1.0') == 4, 'a bucket counts values equal to its bound'
    assert v(bucket, upstream_group=GROUP, le='10.0') == 5
    assert v(bucket, upstream_group=GROUP, le='300.0') == 5
    assert v(bucket, upstream_group=GROUP, le='+Inf') == 6
    assert v('llm_proxy_request_duration_seconds_count', upstream_group=GROUP) == 6
    assert v('llm_proxy_request_duration_seconds_sum', upstream_group=GROUP) == pytest.approx(409.23)
    assert v('llm_proxy_request_duration_seconds_count', upstream_group='') == 1
    bounds = [lab['le'] for lab, _value in scrape.find(bucket, upstream_group=GROUP)]
    assert bounds[0] == '0.05' and bounds[-2:] == ['300.0', '+Inf'] and len(bounds) == 14
    header = 'llm_proxy_upstream_header_seconds'
    assert v(header + '_count', upstream_group=GROUP) == 3
    assert v(header + '_sum', upstream_group=GROUP) == pytest.approx(0.36)
    assert v(header + '_bucket', upstream_group=GROUP, le='0.05') == 2
    assert v(header + '_bucket', upstream_group=GROUP, le='0.5') == 3
    assert scrape.find(header + '_count', upstream_group='') == [], 'no upstream, no header time'


def test_partial_line_waits_for_its_newline(start_exporter, log):
    exporter = start_exporter(log)
    line = entry(status=503)
    append(log, entry() + line[:40])
    scrape = exporter.wait_lines(1)
    # Both writes were read at once: the unfinished line is held back.
    assert scrape.value('llm_proxy_requests_total', status='503', upstream_group=GROUP) == 0
    append(log, line[40:])
    scrape = exporter.wait_lines(2)
    assert scrape.value('llm_proxy_requests_total', status='503', upstream_group=GROUP) == 1
    assert scrape.value('llm_proxy_log_lines_invalid_total') == 0


def test_malformed_lines_are_counted_not_fatal(start_exporter, log):
    exporter = start_exporter(log)
    bad = [b'not json at all\n', b'[1, 2, 3]\n', b'{"uri": "/v1/x"}\n', b'\xff\xfe{"status": 200\n', b'\n',
           b'{"status": 200, "request_time": "x", "bytes_sent": null, "msec": true, "upstream_header_time": 5,'
           b' "upstream_addr": 7}\n',
           b'[' * 100000 + b'\n']
    append(log, b''.join(bad) + entry().encode())
    scrape = exporter.wait_lines(len(bad) + 1)
    assert scrape.value('llm_proxy_log_lines_total') == len(bad) + 1
    assert scrape.value('llm_proxy_log_lines_invalid_total') == len(bad) - 1
    # The odd but valid object is a request nginx answered itself, without a duration.
    assert scrape.value('llm_proxy_requests_total', status='200', upstream_group='') == 1
    assert scrape.value('llm_proxy_requests_total', status='200', upstream_group=GROUP) == 1
    assert exporter.proc.poll() is None


def test_rename_rotation(start_exporter, log):
    exporter = start_exporter(log)
    append(log, entry())
    exporter.wait_lines(1)
    rotated = log.with_name(log.name + '.1')
    os.rename(log, rotated)
    # nginx writes to the renamed file until it reopens its logs.
    append(rotated, entry(status=502))
    append(log, entry(status=201) * 2)
    scrape = exporter.wait_lines(4)
    assert scrape.value('llm_proxy_requests_total', status='502', upstream_group=GROUP) == 1
    assert scrape.value('llm_proxy_requests_total', status='201', upstream_group=GROUP) == 2
    assert scrape.value('llm_proxy_log_readable') == 1
    append(log, entry(status=202))
    scrape = exporter.wait_lines(5)
    assert scrape.value('llm_proxy_requests_total', status='202', upstream_group=GROUP) == 1
    assert scrape.value('llm_proxy_log_lines_invalid_total') == 0


def test_copytruncate(start_exporter, log):
    exporter = start_exporter(log)
    append(log, entry() * 3)
    exporter.wait_lines(3)
    inode = os.stat(log).st_ino
    with open(log, 'r+b') as handle:  # logrotate's copytruncate: same file, size 0
        handle.truncate(0)
    append(log, entry(status=504))
    assert os.stat(log).st_ino == inode
    scrape = exporter.wait_lines(4)
    assert scrape.value('llm_proxy_requests_total', status='504', upstream_group=GROUP) == 1
    assert scrape.value('llm_proxy_requests_total', status='200', upstream_group=GROUP) == 3
    assert scrape.value('llm_proxy_log_lines_invalid_total') == 0


def test_missing_file_then_created_then_removed(start_exporter, tmp_path):
    log = tmp_path / 'later.log'
    exporter = start_exporter(log)
    # The first read happens before the HTTP server answers.
    scrape = exporter.scrape()
    assert scrape.value('llm_proxy_log_readable') == 0
    assert scrape.value('llm_proxy_log_lines_total') == 0
    assert scrape.find('llm_proxy_log_last_line_timestamp_seconds') == []
    # A file that appears later is new: read from its beginning.
    log.write_text(entry() + entry(status=500))
    scrape = exporter.wait_lines(2)
    assert scrape.value('llm_proxy_log_readable') == 1
    assert scrape.value('llm_proxy_requests_total', status='500', upstream_group=GROUP) == 1
    log.unlink()
    exporter.wait(lambda s: s.value('llm_proxy_log_readable') == 0)


def test_unreadable_path(start_exporter, tmp_path):
    exporter = start_exporter(tmp_path)  # a directory: opened, but no read
    assert exporter.scrape().value('llm_proxy_log_readable') == 0
    assert 'cannot read' in exporter.stderr()


def test_a_restart_starts_at_the_end(start_exporter, log):
    # History, and a line nginx is writing when the exporter starts.
    append(log, entry() * 5 + entry(status=500)[:30])
    exporter = start_exporter(log)
    scrape = exporter.scrape()
    assert scrape.value('llm_proxy_log_lines_total') == 0
    assert scrape.find('llm_proxy_requests_total') == []
    append(log, entry(status=500)[30:] + entry(status=201))
    scrape = exporter.wait_lines(1)
    assert scrape.value('llm_proxy_log_lines_total') == 1, 'the rest of the line it started in is not counted'
    assert scrape.value('llm_proxy_log_lines_invalid_total') == 0
    assert scrape.value('llm_proxy_requests_total', status='201', upstream_group=GROUP) == 1
    assert scrape.find('llm_proxy_requests_total', status='200') == []


def test_sigterm_stops_it(start_exporter, log):
    exporter = start_exporter(log)
    exporter.proc.send_signal(signal.SIGTERM)
    assert exporter.proc.wait(timeout=2.5) == 0


# --- the exposition --------------------------------------------------------------------

def test_exposition_passes_promtool(start_exporter, log):
    tool = promtool()
    if not tool:
        pytest.skip('promtool not found (make promtool)')
    exporter = start_exporter(log)
    append(log, entry() + entry(status=502) + nginx_answered(401) + 'garbage\n')
    scrape = exporter.wait_lines(4)
    proc = subprocess.run([tool, 'check', 'metrics'], input=scrape.text, capture_output=True, text=True,
                          timeout=30, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout + proc.stderr == ''


def _rule_selectors():
    """{metric: {label names}} of every llm_proxy_ series the alert rules select."""
    with open(RULES) as handle:
        rules = yaml.safe_load(handle)
    found = {}
    for group in rules['groups']:
        for rule in group['rules']:
            for match in re.finditer(r'\b(llm_proxy_[a-z_]+)(\{([^}]*)\})?', rule['expr']):
                labels = found.setdefault(match.group(1), set())
                for matcher in filter(None, (m.strip() for m in (match.group(3) or '').split(','))):
                    labels.add(re.match(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)', matcher).group(1))
    return found


def _rule_test_labels():
    """{metric: {label names}} of the series tests/prometheus/llm-proxy.test.yml feeds the rules."""
    with open(RULES_TEST) as handle:
        tests = yaml.safe_load(handle)
    found = {}
    for test in tests['tests']:
        for series in test['input_series']:
            match = re.match(r'([a-z_]+)\{(.*)\}$', series['series'])
            found.setdefault(match.group(1), set()).update(
                name for name in re.findall(r'([a-z_]+)="', match.group(2)) if name not in ('job', 'instance'))
    return found


def test_the_alert_rules_series_are_served(start_exporter, log):
    selectors = _rule_selectors()
    assert selectors == {'llm_proxy_requests_total': {'status'}}
    exporter = start_exporter(log)
    append(log, entry(status=502) + nginx_answered(401))
    scrape = exporter.wait_lines(2)
    for metric, labels in list(selectors.items()) + list(_rule_test_labels().items()):
        served = scrape.find(metric)
        assert served, metric
        for lab, _value in served:
            assert labels <= set(lab), (metric, labels, lab)
    # The rules' 5xx matcher finds the 502, as the rules' tests feed it.
    assert scrape.value('llm_proxy_requests_total', status='502', upstream_group=GROUP) == 1
    assert scrape.value('llm_proxy_requests_total', status='401', upstream_group='') == 1
    assert scrape.families['llm_proxy_requests'].type == 'counter'


# --- the unit the role writes ----------------------------------------------------------

_RENDER = r'''
import json, sys
import yaml
from ansible.plugins.loader import init_plugin_loader
init_plugin_loader([sys.argv[1]])
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

def trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: trusted(v) for k, v in value.items()}
    return value

role, overrides = sys.argv[2], json.loads(sys.argv[3])
variables = {}
# The host_programs role's defaults come first: the role includes it (public).
for path in ('%s/../host_programs/defaults/main.yml' % role, '%s/defaults/main.yml' % role, '%s/vars/main.yml' % role):
    with open(path) as handle:
        variables.update(trusted(yaml.safe_load(handle)))
variables.update(role_path=role, ansible_managed='Ansible managed', inventory_hostname='home')
variables.update(overrides)
templar = Templar(loader=DataLoader(), variables=variables)
out = {}
for name, text in json.loads(sys.stdin.read()).items():
    out[name] = templar.template(trust_as_template(text), escape_backslashes=False)
print(json.dumps(out))
'''


def render_role(collection_root, templates, **overrides):
    """{name: rendered} for {name: template text}, with the role's defaults and vars (as the role has them)."""
    proc = subprocess.run([sys.executable, '-c', _RENDER, collection_root, ROLE, json.dumps(overrides)],
                          input=json.dumps(templates), capture_output=True, text=True, timeout=60, check=False,
                          cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def unit_settings(text):
    result = {}
    for line in text.splitlines():
        if line and not line.startswith(('#', '[')):
            key, _separator, value = line.partition('=')
            result.setdefault(key, []).append(value)
    return result


def exporter_parser():
    from llm_server_host import proxy_metrics
    return proxy_metrics.parse_args


def test_the_unit_runs_the_program_unprivileged_in_adm_and_hardened(collection_root):
    with open(TEMPLATE) as handle:
        template = handle.read()
    rendered = render_role(collection_root, {
        'unit': template, 'url': '{{ _nginx_metrics_url }}', 'venv': '{{ _nginx_metrics_venv }}',
    }, nginx_access_log='/var/log/nginx/odd name %h.log')
    unit = unit_settings(rendered['unit'])
    argv = shlex.split(unit['ExecStart'][0])
    assert argv[0] == '/opt/llm-server/venv/bin/llm-proxy-metrics'
    args = exporter_parser()(argv[1:])
    assert (args.log, args.listen_address, args.port) == ('/var/log/nginx/odd name %%h.log', '127.0.0.1', 9836)
    assert unit['User'] == ['llm-proxy-metrics'] and unit['Group'] == ['llm-proxy-metrics']
    assert unit['SupplementaryGroups'] == ['adm']
    assert unit['Restart'] == ['always']
    for key, value in (('NoNewPrivileges', 'yes'), ('ProtectSystem', 'strict'), ('ProtectHome', 'yes'),
                       ('PrivateTmp', 'yes'), ('PrivateDevices', 'yes'), ('CapabilityBoundingSet', ''),
                       ('RestrictAddressFamilies', 'AF_INET AF_INET6 AF_UNIX'), ('SystemCallFilter', '@system-service')):
        assert unit[key] == [value], key
    assert rendered['url'] == 'http://127.0.0.1:9836/metrics'
    # The common role's environment, where it installs prometheus-client for every exporter.
    with open(os.path.join(REPO_ROOT, 'roles', 'common', 'defaults', 'main.yml')) as handle:
        assert rendered['venv'] == yaml.safe_load(handle)['common_venv_path']


def test_the_play_asks_metrics_where_the_exporter_listens(collection_root):
    for address, url in (('0.0.0.0', 'http://127.0.0.1:9836/metrics'), ('::', 'http://[::1]:9836/metrics'),
                         ('10.77.0.2', 'http://10.77.0.2:9836/metrics')):
        rendered = render_role(collection_root, {'url': '{{ _nginx_metrics_url }}'},
                               nginx_metrics_listen_address=address)
        assert rendered['url'] == url


@pytest.mark.skipif(not shutil.which('systemd-analyze'), reason='systemd-analyze is not installed')
def test_systemd_accepts_the_unit(collection_root, tmp_path):
    venv = tmp_path / 'venv' / 'bin'
    venv.mkdir(parents=True)
    (venv / 'llm-proxy-metrics').symlink_to(sys.executable)
    with open(TEMPLATE) as handle:
        text = render_role(collection_root, {'unit': handle.read()}, common_venv_path=str(tmp_path / 'venv'))['unit']
    path = tmp_path / 'llm-proxy-metrics.service'
    path.write_text(text)
    proc = subprocess.run(['systemd-analyze', 'verify', str(path)], capture_output=True, text=True, timeout=60,
                          check=False)
    ours = [line for line in (proc.stdout + proc.stderr).splitlines() if path.name in line]
    assert proc.returncode == 0 and ours == [], proc.stdout + proc.stderr
