# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Alerts delivered to Telegram by the real Alertmanager, end to end, in seconds.

Debian's Alertmanager 0.25 (bookworm's prometheus-alertmanager, extracted by
`make amtool` into build/alertmanager/: LLM_SERVER_ALERTMANAGER, else
build/alertmanager/alertmanager) runs against the Bot API stand-in
(tests/doubles/telegram_bot_api/bot_api.py) with a `telegram_configs` receiver and the
collection's inhibit rules (roles/monitoring/files/alertmanager/
inhibit_rules.yml). Alerts are posted to its v2 API as Prometheus would post
them, and the stand-in's record of sendMessage requests is what is asserted:

- a firing alert gives exactly one message, naming the alert and its
  serving_instance (the default template of 0.25 lists every label);
  re-posting it within repeat_interval gives none; posting it with endsAt
  in the past gives exactly one resolved message;
- a critical and a warning of one alert name for the same thing: only the
  critical is delivered (the warning is inhibited), while the same warning
  for another GPU is;
- a refused bot token is counted in alertmanager_notifications_failed_total
  {integration="telegram"}: Alertmanager retries a failed Telegram send until
  the notification's context ends, at least 10 s (notify.MinTimeout), so that
  alert is posted first, when the fixture starts, and checked last;
- the message template proposed for the collection's receiver
  (MESSAGE_TEMPLATE, Telegram's HTML mode) renders, escaped, and is accepted
  by the stand-in, which refuses HTML that Telegram would refuse;
- the stand-in answers refusals as Telegram does, and neither its record
  nor its log holds a token.
- `amtool check-config` (LLM_SERVER_AMTOOL, else build/amtool/amtool) accepts
  the generated alertmanager.yml.

Debian's build reads default.tmpl and email.tmpl at run time from
/usr/share/prometheus/alertmanager (upstream embeds them): the test runs a
copy of the binary in which that one path string is replaced, byte for byte,
by a relative one of the same length that leads to the copies `make amtool`
extracted next to the binary. An upstream binary is run as it is.

Skipped with a message where the binary is missing. Groups are keyed by all
labels (group_by: ['...']) and every test uses its own alert, so that each
test's messages are its own; group_wait and group_interval are 1 s.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
ALERTMANAGER = (os.environ.get('LLM_SERVER_ALERTMANAGER')
                or os.path.join(REPO_ROOT, 'build', 'alertmanager', 'alertmanager'))
AMTOOL = os.environ.get('LLM_SERVER_AMTOOL') or os.path.join(REPO_ROOT, 'build', 'amtool', 'amtool')
BOT_API = os.path.join(REPO_ROOT, 'tests', 'doubles', 'telegram_bot_api', 'bot_api.py')
INHIBIT_RULES = os.path.join(REPO_ROOT, 'roles', 'monitoring', 'files', 'alertmanager', 'inhibit_rules.yml')
BOT_API_SPEC = importlib.util.spec_from_file_location('bot_api', BOT_API)
BOT_API_MODULE = importlib.util.module_from_spec(BOT_API_SPEC)
BOT_API_SPEC.loader.exec_module(BOT_API_MODULE)

pytestmark = pytest.mark.skipif(
    not os.access(ALERTMANAGER, os.X_OK),
    reason="no alertmanager at %s: `make amtool` extracts it from Debian's prometheus-alertmanager" % ALERTMANAGER)

TOKEN = '123456789:AAE-stand-in-token_for-tests'
WRONG_TOKEN = '123456789:AAE-a-token-the-bot-api-refuses'
CHAT_ID = 424242
GROUP_INTERVAL = 1.0
# Long enough for two more flushes of a group: what "no further message" waits.
QUIET = 2 * GROUP_INTERVAL + 0.4
# Where Debian's alertmanager reads its templates; replaced in a copy of it.
DEBIAN_TEMPLATE_DIR = b'/usr/share/prometheus/alertmanager'
TEMPLATE_LINK = b'debian-templates'

# The collection's message template (parse_mode HTML), as the monitoring
# role installs it and names it in alertmanager.yml.
TEMPLATE_FILE = os.path.join(REPO_ROOT, 'roles', 'monitoring', 'files', 'alertmanager', 'llm-telegram.tmpl')
MESSAGE_TEMPLATE = '{{ template "llm.telegram.message" . }}'


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def wait_for(check, timeout, what, interval=0.05):
    """check()'s first true value, polled until timeout seconds have passed; what() says what failed."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError('after %.1f s: %s' % (timeout, what()))
        time.sleep(interval)


def http(url, data=None, timeout=5):
    """(status, body) of a GET, or of a POST of data as JSON."""
    request = urllib.request.Request(url)
    if data is not None:
        request.data = json.dumps(data).encode()
        request.add_header('Content-Type', 'application/json')
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as failed:
        return failed.code, failed.read().decode()
    except OSError:
        return None, ''


def rfc3339(moment):
    return moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc)


def alert(name, severity, labels, starts_at, ends_at=None, summary=None, description=None):
    """An alert as Prometheus posts it to /api/v2/alerts."""
    annotations = {'summary': summary or '%s (%s)' % (name, severity)}
    if description is not None:
        annotations['description'] = description
    posted = {'labels': dict(labels, alertname=name, severity=severity),
              'annotations': annotations,
              'startsAt': rfc3339(starts_at),
              'generatorURL': 'http://prometheus.test:9090/graph?g0.expr=up'}
    if ends_at is not None:
        posted['endsAt'] = rfc3339(ends_at)
    return posted


def load_yaml(path):
    with open(path, encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def telegram(token, port, message=None):
    config = {'bot_token': token, 'chat_id': CHAT_ID, 'api_url': 'http://127.0.0.1:%d' % port,
              'send_resolved': True}
    if message is not None:
        config['message'] = message
        config['parse_mode'] = 'HTML'
    return {'telegram_configs': [config]}


def alertmanager_config(bot_port):
    """alertmanager.yml: the default receiver with the default template, two more chosen by a test label."""
    config = {
        'route': {
            'receiver': 'telegram',
            'group_by': ['...'],
            'group_wait': '1s',
            'group_interval': '%ds' % GROUP_INTERVAL,
            'repeat_interval': '1h',
            'routes': [
                {'receiver': 'telegram-wrong-token', 'matchers': ['test_receiver="wrong-token"']},
                {'receiver': 'telegram-template', 'matchers': ['test_receiver="template"']},
            ],
        },
        'receivers': [
            dict(name='telegram', **telegram(TOKEN, bot_port)),
            dict(name='telegram-wrong-token', **telegram(WRONG_TOKEN, bot_port)),
            dict(name='telegram-template', **telegram(TOKEN, bot_port, MESSAGE_TEMPLATE)),
        ],
    }
    config['templates'] = [TEMPLATE_FILE]
    config.update(load_yaml(INHIBIT_RULES))
    return config


def runnable_alertmanager(workdir):
    """The binary to run in workdir: Debian's with its template directory made relative, or upstream's as it is."""
    with open(ALERTMANAGER, 'rb') as handle:
        binary = handle.read()
    # The directory itself, not its ui/ and no-ui/ subdirectories.
    places = [found.start() for found in re.finditer(re.escape(DEBIAN_TEMPLATE_DIR) + b'(?!/)', binary)]
    if not places:
        return ALERTMANAGER
    assert len(places) == 1, 'Debian template path found %d times in %s' % (len(places), ALERTMANAGER)
    templates = os.path.join(os.path.dirname(os.path.realpath(ALERTMANAGER)), 'templates')
    if not os.path.isfile(os.path.join(templates, 'default.tmpl')):
        pytest.skip('no %s/default.tmpl (Debian alertmanager reads it at run time): run `make amtool`' % templates)
    # ".////...////debian-templates": as long as the path it replaces, resolved from workdir.
    relative = b'.' + TEMPLATE_LINK.rjust(len(DEBIAN_TEMPLATE_DIR) - 1, b'/')
    os.symlink(templates, os.path.join(workdir, TEMPLATE_LINK.decode()))
    copy = os.path.join(workdir, 'alertmanager')
    place = places[0]
    with open(copy, 'wb') as handle:
        handle.write(binary[:place] + relative + binary[place + len(relative):])
    os.chmod(copy, 0o755)
    return copy


class Stack:
    """The stand-in and Alertmanager, and what a test reads from them."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.record = os.path.join(workdir, 'messages.jsonl')
        self.config = os.path.join(workdir, 'alertmanager.yml')
        self.bot_port = free_port()
        self.am_port = free_port()
        self.am_url = 'http://127.0.0.1:%d' % self.am_port
        self.processes = []

    def start(self):
        bot_log = open(os.path.join(self.workdir, 'bot_api.log'), 'wb')  # pylint: disable=consider-using-with
        bot = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, BOT_API, '--listen', '127.0.0.1', '--port', str(self.bot_port), '--token', TOKEN,
             '--record', self.record], stdout=subprocess.DEVNULL, stderr=bot_log)
        self.processes.append((bot, bot_log))
        with open(self.config, 'w', encoding='utf-8') as handle:
            yaml.safe_dump(alertmanager_config(self.bot_port), handle, sort_keys=False)
        am_log = open(os.path.join(self.workdir, 'alertmanager.log'), 'wb')  # pylint: disable=consider-using-with
        am = subprocess.Popen(  # pylint: disable=consider-using-with
            [runnable_alertmanager(self.workdir), '--config.file', self.config,
             '--storage.path', os.path.join(self.workdir, 'data'),
             '--web.listen-address', '127.0.0.1:%d' % self.am_port, '--cluster.listen-address=',
             '--log.level', 'debug'],
            cwd=self.workdir, stdout=subprocess.DEVNULL, stderr=am_log)
        self.processes.append((am, am_log))
        get_me = 'http://127.0.0.1:%d/bot%s/getMe' % (self.bot_port, TOKEN)
        self.wait_for(lambda: self.alive() and http(get_me)[0] == 200, 10, 'the Bot API stand-in answers getMe')
        self.wait_for(lambda: self.alive() and http(self.am_url + '/-/ready')[0] == 200, 10, 'Alertmanager is ready')

    def wait_for(self, check, timeout, what, interval=0.05):
        """wait_for(), with the logs of both servers in its failure."""
        return wait_for(check, timeout, lambda: '%s\n%s' % (what, self.logs()), interval)

    def alive(self):
        dead = [(process.args[1] if process.args[0] == sys.executable else process.args[0], process.returncode)
                for process, log in self.processes if process.poll() is not None]
        assert not dead, 'exited: %s\n%s' % (dead, self.logs())
        return True

    def logs(self):
        text = []
        for name in ('bot_api.log', 'alertmanager.log'):
            path = os.path.join(self.workdir, name)
            if os.path.exists(path):
                with open(path, encoding='utf-8', errors='replace') as handle:
                    text.append('--- %s (last lines)\n%s' % (name, ''.join(handle.readlines()[-15:])))
        return '\n'.join(text)

    def stop(self):
        for process, log in reversed(self.processes):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            log.close()

    def post(self, *alerts):
        status, body = http(self.am_url + '/api/v2/alerts', list(alerts))
        assert status == 200, 'POST /api/v2/alerts: %s %s' % (status, body)

    def alerts(self, name):
        status, body = http(self.am_url + '/api/v2/alerts?filter=' + urllib.parse.quote('alertname="%s"' % name))
        assert status == 200, body
        return json.loads(body)

    def requests(self):
        """Every sendMessage request the stand-in recorded."""
        if not os.path.exists(self.record):
            return []
        with open(self.record, encoding='utf-8') as handle:
            return [json.loads(line) for line in handle if line.strip()]

    def messages(self, *needles):
        """The messages delivered whose text contains every needle."""
        return [entry for entry in self.requests()
                if entry['ok'] and all(needle in entry['text'] for needle in needles)]

    def metric(self, name, integration='telegram'):
        status, body = http(self.am_url + '/metrics')
        assert status == 200, body
        pattern = re.compile(r'^%s\{integration="%s"\} (\S+)$' % (re.escape(name), re.escape(integration)), re.M)
        found = pattern.search(body)
        return float(found.group(1)) if found else 0.0


@pytest.fixture(scope='module')
def stack(tmp_path_factory):
    """Alertmanager and the stand-in, with the refused-token alert already posted (its failure takes 10 s)."""
    running = Stack(str(tmp_path_factory.mktemp('telegram')))
    try:
        running.start()
        running.post(alert('LLMNodeDown', 'critical', {'instance': 'gpu-host:9100', 'test_receiver': 'wrong-token'},
                           utc_now()))
        running.wrong_token_posted = time.monotonic()
        yield running
    finally:
        running.stop()


def assert_quiet(stack, count, what):
    """count() stays what it is now for QUIET seconds (two more flushes), and that is returned."""
    before = count()
    deadline = time.monotonic() + QUIET
    while time.monotonic() < deadline:
        assert count() == before, what
        time.sleep(0.1)
    stack.alive()
    return before


def test_amtool_accepts_the_generated_config(stack):
    if not os.access(AMTOOL, os.X_OK):
        pytest.skip('no amtool at %s: run `make amtool`' % AMTOOL)
    proc = subprocess.run([AMTOOL, 'check-config', stack.config], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '1 inhibit rules' in proc.stdout and '3 receivers' in proc.stdout, proc.stdout


def test_firing_alert_is_sent_once_and_resolved_once(stack):
    labels = {'serving_instance': 'llm-qwen-coder', 'instance': '127.0.0.1:8001', 'job': 'llm_engine'}
    started = utc_now() - datetime.timedelta(minutes=5)
    firing = alert('LLMEngineDown', 'critical', labels, started)
    stack.post(firing)

    # (a) One message, naming the alert and its serving instance.
    sent = stack.wait_for(lambda: stack.messages('LLMEngineDown', 'llm-qwen-coder'), 10,
                          'a Telegram message for LLMEngineDown')
    assert len(sent) == 1, sent
    message = sent[0]
    assert message['chat_id'] == CHAT_ID and message['token_ok'] and message['parse_mode'] == 'HTML', message
    assert 'Alerts Firing:' in message['text'], message['text']
    assert ' - alertname = LLMEngineDown' in message['text'], message['text']
    assert ' - serving_instance = llm-qwen-coder' in message['text'], message['text']
    assert 'Alerts Resolved:' not in message['text'], message['text']

    # (b) Prometheus sends a firing alert again at every evaluation: within
    # repeat_interval that is no new message.
    for repeat in range(3):
        time.sleep(0.2 * repeat)
        stack.post(firing)
    assert assert_quiet(stack, lambda: len(stack.messages('LLMEngineDown', 'llm-qwen-coder')),
                        'the alert posted again within repeat_interval was sent again') == 1

    # (c) Resolved: exactly one more message, listing it as resolved.
    stack.post(alert('LLMEngineDown', 'critical', labels, started, ends_at=utc_now() - datetime.timedelta(seconds=1)))
    resolved = stack.wait_for(lambda: [entry for entry in stack.messages('LLMEngineDown', 'llm-qwen-coder')
                                       if 'Alerts Resolved:' in entry['text']], 10, 'a resolved message')
    assert 'Alerts Firing:' not in resolved[0]['text'], resolved[0]['text']
    assert assert_quiet(stack, lambda: len(stack.messages('LLMEngineDown', 'llm-qwen-coder')),
                        'more than one resolved message') == 2


def test_critical_inhibits_its_warning_for_the_same_gpu(stack):
    gpu0 = {'instance': 'gpu-host:9835', 'job': 'llm_gpu', 'gpu': '0', 'uuid': 'GPU-0', 'name': 'RTX 3090'}
    gpu1 = dict(gpu0, gpu='1', uuid='GPU-1')
    now = utc_now()
    stack.post(alert('LLMGpuHot', 'critical', gpu0, now), alert('LLMGpuHot', 'warning', gpu0, now),
               alert('LLMGpuHot', 'warning', gpu1, now))

    def hot(severity, gpu):
        return stack.messages(' - alertname = LLMGpuHot', ' - severity = %s' % severity, ' - gpu = %s' % gpu)

    stack.wait_for(lambda: hot('critical', '0') and hot('warning', '1'), 10,
                   'messages for the critical on GPU 0 and the warning on GPU 1')
    states = {(found['labels']['severity'], found['labels']['gpu']): found['status']
              for found in stack.alerts('LLMGpuHot')}
    assert states[('warning', '0')]['state'] == 'suppressed' and states[('warning', '0')]['inhibitedBy'], states
    assert not states[('warning', '1')]['inhibitedBy'] and not states[('critical', '0')]['inhibitedBy'], states
    assert assert_quiet(stack, lambda: len(hot('warning', '0')), 'the inhibited warning was sent') == 0
    assert len(hot('critical', '0')) == 1 and len(hot('warning', '1')) == 1


def test_collection_template_is_accepted_and_says_what_to_do(stack):
    labels = {'serving_instance': 'llm-big', 'gpu': '1', 'instance': 'gpu-host:9835', 'llm_server': 'llm-home',
              'test_receiver': 'template'}
    started = utc_now()
    summary = 'Engine llm-big <queue> & "waiting" > 10'
    description = 'See who sends them: jq -r .key /var/log/nginx/llm-access.log | sort | uniq -c'
    stack.post(alert('LLMEngineQueueGrowing', 'warning', labels, started, summary=summary, description=description))
    sent = stack.wait_for(lambda: stack.messages('LLMEngineQueueGrowing'), 10,
                          'a message from the HTML template (the stand-in refuses broken HTML)')
    assert len(sent) == 1, sent
    assert sent[0]['text'].startswith('<b>FIRING</b> LLMEngineQueueGrowing (warning) on llm-home\n'), sent[0]['text']
    # As Telegram shows it: tags gone, the summary's characters back as they were.
    shown = BOT_API_MODULE.html_to_text(sent[0]['text']).strip()
    assert shown.splitlines() == ['FIRING LLMEngineQueueGrowing (warning) on llm-home', summary, description], shown
    stack.post(alert('LLMEngineQueueGrowing', 'warning', labels, started, ends_at=utc_now(), summary=summary,
                     description=description))
    resolved = stack.wait_for(lambda: stack.messages('<b>RESOLVED</b> LLMEngineQueueGrowing'), 10, 'a resolved message')
    # The resolution says which, not again what to do.
    shown = BOT_API_MODULE.html_to_text(resolved[0]['text']).strip()
    assert shown.splitlines() == ['RESOLVED LLMEngineQueueGrowing (warning) on llm-home', summary], shown


def test_stand_in_answers_like_telegram(stack):
    base = 'http://127.0.0.1:%d/bot' % stack.bot_port
    status, body = http(base + TOKEN + '/sendMessage', {'chat_id': 'not-a-chat', 'text': 'x'})
    assert (status, json.loads(body)) == (400, {'ok': False, 'error_code': 400,
                                                'description': 'Bad Request: chat not found'})
    status, body = http(base + WRONG_TOKEN + '/getMe')
    assert (status, json.loads(body)) == (401, {'ok': False, 'error_code': 401, 'description': 'Unauthorized'})
    status, body = http(base + TOKEN + '/sendMessage', {'chat_id': CHAT_ID, 'text': '<b>open', 'parse_mode': 'HTML'})
    assert status == 400 and "can't parse entities" in json.loads(body)['description'], body
    status, body = http(base + TOKEN + '/sendMessage', {'chat_id': str(CHAT_ID), 'text': 'a &amp; <i>b</i>',
                                                        'parse_mode': 'HTML'})
    result = json.loads(body)['result']
    assert status == 200 and result['text'] == 'a & b' and result['chat'] == {
        'id': CHAT_ID, 'type': 'private', 'first_name': 'Test'}, body


def test_refused_token_counts_as_failed_notification(stack):
    attempts = stack.wait_for(lambda: [entry for entry in stack.requests() if 'LLMNodeDown' in (entry['text'] or '')],
                              10, 'the stand-in saw the alert sent with the wrong token')
    assert all(not entry['token_ok'] and entry['status'] == 401 and not entry['ok'] for entry in attempts), attempts
    # Each refused try at once; the notification once Alertmanager gives up
    # retrying, 10 s after its first try.
    stack.wait_for(lambda: stack.metric('alertmanager_notification_requests_failed_total') >= 1, 5,
                   'alertmanager_notification_requests_failed_total{integration="telegram"} counted a refused try')
    stack.wait_for(lambda: stack.metric('alertmanager_notifications_failed_total') >= 1,
                   max(1.0, stack.wrong_token_posted + 30 - time.monotonic()),
                   'alertmanager_notifications_failed_total{integration="telegram"} counted the refused token',
                   interval=0.2)
    with open(stack.record, encoding='utf-8') as handle:
        recorded = handle.read()
    assert TOKEN not in recorded and WRONG_TOKEN not in recorded, 'a token was written to the record'
    with open(os.path.join(stack.workdir, 'bot_api.log'), encoding='utf-8') as handle:
        logged = handle.read()
    assert TOKEN not in logged and WRONG_TOKEN not in logged, 'a token was written to the log'
