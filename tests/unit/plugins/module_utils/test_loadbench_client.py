# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_loadbench_client.py: llm-bench's requests, HTTP client and load shapes.

Measurements run against the real test server (tests/doubles/openai_server/openai_test_server.py)
started as a subprocess with known delays (the server fixture, conftest.py); the HTTP
parser's corner cases run against a raw TCP server that sends canned bytes in small
pieces; TLS against the test server wrapped in a self-signed certificate made with openssl.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils._loadbench_client import Payloads, Target, _schedule, normalise_settings, run_benchmark
from ansible_collections.homelab.llm_server.plugins.module_utils._loadbench_stats import BenchError, evaluate

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
TEST_SERVER = os.path.join(REPO, 'tests', 'doubles', 'openai_server', 'openai_test_server.py')
SECRET = 'sk-test-9f8e7d6c5b4a'


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ots = _load('openai_test_server_for_loadbench', TEST_SERVER)


def bench(url, **settings):
    settings.setdefault('requests', 6)
    settings.setdefault('concurrency', 2)
    settings.setdefault('timeout_s', 20)
    settings.setdefault('duration_limit_s', 60)
    return run_benchmark(url, settings, settings.pop('api_key', None))


# ---------------------------------------------------------------- measurements

def test_streamed_ttft_itl_tpot_e2e_follow_the_server_delays(server):
    url = server('--model', 'm1', '--tokens', '6', '--first-token-delay', '0.1', '--inter-token-delay', '0.02')
    results = bench(url, requests=8, concurrency=2, max_tokens=50)
    assert results['errors'] == 0 and results['completed'] == 8, results['errors_by_kind']
    assert results['settings']['model'] == 'm1'
    # usage.completion_tokens from the last chunk: 6 per request.
    assert results['output_tokens'] == 48
    assert results['ttft_ms']['count'] == 8
    # Never faster than the server's sleeps; the upper margin absorbs a loaded machine.
    assert 100 <= results['ttft_ms']['p50'] <= 170, results['ttft_ms']
    # 5 gaps per request of 20 ms each.
    assert results['itl_ms']['count'] == 40
    assert 17 <= results['itl_ms']['p50'] <= 50, results['itl_ms']
    assert 19 <= results['tpot_ms']['p50'] <= 50, results['tpot_ms']
    assert 200 <= results['e2e_ms']['p50'] <= 300, results['e2e_ms']
    assert results['e2e_ms']['min'] <= results['e2e_ms']['p50'] <= results['e2e_ms']['p95'] <= \
        results['e2e_ms']['p99'] <= results['e2e_ms']['max']
    # Two workers of ~200 ms each: about 10 requests/s.
    assert 6 <= results['requests_per_s'] <= 10.5, results['requests_per_s']
    assert results['client']['cpu_s'] >= 0


def test_not_streamed_measures_e2e_only(server):
    url = server('--tokens', '5', '--first-token-delay', '0.1', '--inter-token-delay', '0.02')
    results = bench(url + '/v1/', stream=False, requests=4, max_tokens=3)
    assert results['errors'] == 0 and results['completed'] == 4
    assert results['ttft_ms'] == {'count': 0, 'mean': None, 'min': None, 'p50': None, 'p95': None,
                                  'p99': None, 'max': None}
    assert results['itl_ms']['count'] == 0
    # max_tokens 3 lowers the answer to 3 tokens: 100 + 2 x 20 ms.
    assert results['output_tokens'] == 12
    assert 140 <= results['e2e_ms']['p50'] <= 230, results['e2e_ms']
    assert results['settings']['url'].endswith('/v1') and results['settings']['stream'] is False


def test_model_is_the_first_of_v1_models(server):
    url = server('--model', 'first', '--model', 'second')
    assert bench(url, requests=1, concurrency=1)['settings']['model'] == 'first'
    assert bench(url, requests=1, concurrency=1, model='second')['completed'] == 1
    # An unknown model is the server's 404, counted per request.
    assert bench(url, requests=2, model='nope')['errors_by_kind'] == {'http_404': 2}


# ---------------------------------------------------------------- errors by kind

def test_http_errors_are_counted_by_status(server, control):
    url = server('--fail-status', '500')
    results = bench(url, requests=5)
    assert results['errors_by_kind'] == {'http_500': 5}
    assert results['completed'] == 0 and results['error_rate'] == 1.0
    control(url, fail_status=503)
    assert bench(url, requests=3, stream=False)['errors_by_kind'] == {'http_503': 3}


def test_a_wrong_api_key_gives_401s_and_a_right_one_works(server, tmp_path):
    key_file = tmp_path / 'key'
    key_file.write_text(SECRET + '\n')
    url = server('--api-key-file', str(key_file))
    assert bench(url, requests=3, model='test-model', api_key='wrong')['errors_by_kind'] == {'http_401': 3}
    results = bench(url, requests=3, api_key=SECRET)
    assert results['completed'] == 3 and results['settings']['api_key'] is True


def test_a_stream_cut_mid_answer_is_a_stream_cut(server, control):
    url = server('--tokens', '8', '--cut-stream-after', '3')
    results = bench(url, requests=4)
    assert results['errors_by_kind'] == {'stream_cut': 4}
    # The same server answers whole completions: the cut is only in streams.
    assert bench(url, requests=2, stream=False)['completed'] == 2
    control(url, cut_stream_after=0)
    assert bench(url, requests=2)['completed'] == 2


def test_connection_refused_is_connect(server):
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port = sock.getsockname()[1]
    results = bench('http://127.0.0.1:%d' % port, requests=3, model='m')
    assert results['errors_by_kind'] == {'connect': 3}
    with pytest.raises(BenchError, match='cannot list the models'):
        bench('http://127.0.0.1:%d' % port, requests=1)


def test_a_hung_server_gives_timeouts(server):
    url = server('--hang-completions')
    start = time.monotonic()
    results = bench(url, requests=4, concurrency=2, timeout_s=0.3)
    assert results['errors_by_kind'] == {'timeout': 4}
    # Two rounds of 0.3 s on two connections, not the default timeout.
    assert time.monotonic() - start < 5


def test_the_duration_limit_abandons_requests_in_flight(server):
    url = server('--hang-completions')
    start = time.monotonic()
    results = bench(url, requests=50, concurrency=3, stream=False, timeout_s=60, duration_limit_s=0.5)
    assert time.monotonic() - start < 5
    assert results['unfinished'] == 3 and results['requests'] == 3
    assert results['errors'] == 0 and results['completed'] == 0
    assert 0.5 <= results['duration_s'] < 1.5
    evaluate(results)
    assert results['passed'] is False
    assert results['threshold_failures'] == ['no request completed (3 unfinished)']


# ---------------------------------------------------------------- load shapes

def test_rate_mode_holds_the_rate(server):
    url = server()
    results = bench(url, requests=20, concurrency=4, rate=20, arrival='constant')
    assert results['completed'] == 20
    # Due at 0, 0.05, ..., 0.95 s: the last ends just after 0.95 s.
    assert 0.95 <= results['duration_s'] <= 1.3, results['duration_s']
    assert 15 <= results['requests_per_s'] <= 21
    assert results['schedule_lag_ms']['count'] == 20
    assert results['settings']['arrival'] == 'constant'


def test_rate_mode_with_too_few_workers_starts_late(server):
    url = server('--tokens', '2', '--first-token-delay', '0.1')
    results = bench(url, requests=6, concurrency=1, rate=100, arrival='constant')
    # One worker, 100 ms per request: the sixth is due at 50 ms but starts at ~500 ms.
    assert results['schedule_lag_ms']['max'] >= 400
    assert results['requests_per_s'] < 11


def test_poisson_arrivals_are_seeded_and_have_the_right_mean():
    first = _schedule(4000, 50.0, 'poisson', random.Random(7))
    again = _schedule(4000, 50.0, 'poisson', random.Random(7))
    assert first == again and first[0] == 0.0
    gaps = [b - a for a, b in zip(first, first[1:])]
    assert abs(sum(gaps) / len(gaps) - 0.02) < 0.002
    # Exponential gaps: about 63 % are shorter than the mean.
    assert 0.58 < sum(1 for gap in gaps if gap < 0.02) / len(gaps) < 0.68
    assert _schedule(3, 10.0, 'constant', None) == [0.0, 0.1, 0.2]


def test_prompts_have_the_length_asked_and_differ_per_request():
    target = Target('http://127.0.0.1:9/v1')
    settings = normalise_settings({'prompt_tokens': 200, 'max_tokens': 7, 'seed': 3})
    payloads = Payloads(target, 'm', settings, api_key=SECRET)
    requests = [payloads.next() for _index in range(50)]
    bodies = []
    for raw in requests:
        head, body = raw.split(b'\r\n\r\n', 1)
        assert b'Content-Length: %d' % len(body) in head
        assert b'Authorization: Bearer ' + SECRET.encode() in head
        bodies.append(json.loads(body))
    prompts = [body['messages'][0]['content'] for body in bodies]
    assert len(set(prompt.split(':')[0] for prompt in prompts)) == 50
    assert all(198 <= len(prompt.split()) <= 202 for prompt in prompts)
    assert bodies[0]['max_tokens'] == 7 and bodies[0]['stream'] is True
    assert bodies[0]['stream_options'] == {'include_usage': True} and bodies[0]['temperature'] == 0
    # Seeded: the same seed gives the same prompts.
    again = Payloads(target, 'm', settings, api_key=SECRET)
    assert [again.next() for _index in range(50)] == requests


# ---------------------------------------------------------------- HTTP parser corner cases

class RawServer:
    """A TCP server that answers each request with the next canned response, sent in small pieces."""

    def __init__(self, responses, piece=7, pause=0.001):
        self.responses = list(responses)
        self.piece = piece
        self.pause = pause
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(('127.0.0.1', 0))
        self.sock.listen(16)
        self.url = 'http://127.0.0.1:%d' % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b''
        with conn:
            while self.responses:
                while b'\r\n\r\n' not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b'\r\n\r\n', 1)
                length = int([line.split(b':')[1] for line in head.split(b'\r\n')
                              if line.lower().startswith(b'content-length')][0])
                while len(buf) < length:
                    buf += conn.recv(65536)
                buf = buf[length:]
                response, close = self.responses.pop(0)
                for start in range(0, len(response), self.piece):
                    conn.sendall(response[start:start + self.piece])
                    time.sleep(self.pause)
                if close:
                    return

    def close(self):
        self.sock.close()


def _sse(*events):
    return b''.join(b'data: ' + (event if isinstance(event, bytes) else json.dumps(event).encode()) + b'\n\n'
                    for event in events)


def _chunked(body, size=10):
    return b''.join(b'%x;ext=1\r\n%s\r\n' % (len(body[i:i + size]), body[i:i + size])
                    for i in range(0, len(body), size)) + b'0\r\nX-Trailer: y\r\n\r\n'


STREAM_HEAD = b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n'
GOOD_EVENTS = ({'choices': [{'index': 0, 'delta': {'role': 'assistant', 'content': ''}}]},
               {'choices': [{'index': 0, 'delta': {'reasoning_content': 'hmm'}}]},
               {'choices': [{'index': 0, 'delta': {'content': 'a "quoted" b'}}]},
               {'choices': [{'index': 0, 'delta': {'content': 'c'}}], 'usage': None},
               {'choices': [], 'usage': {'prompt_tokens': 3, 'completion_tokens': 9,
                                         'completion_tokens_details': {'reasoning_tokens': 1}}})


def raw_bench(responses, stream=True, requests=None, **kwargs):
    raw = RawServer(responses, **kwargs)
    try:
        count = requests or len(raw.responses)
        return bench(raw.url, model='m', requests=count, concurrency=1, stream=stream, timeout_s=5), raw
    finally:
        raw.close()


def test_parser_chunked_sse_in_pieces_with_crlf_events_and_trailers():
    crlf_stream = _sse(*GOOD_EVENTS).replace(b'\n', b'\r\n') + b'data: [DONE]\r\n\r\n'
    results, raw = raw_bench([(STREAM_HEAD + _chunked(_sse(*GOOD_EVENTS) + b'data: [DONE]\n\n'), False),
                              (STREAM_HEAD + _chunked(crlf_stream, 33), False)])
    assert results['errors_by_kind'] == {} and results['completed'] == 2
    # Reasoning and content tokens count for TTFT/ITL; the usage event's 9 is the output count.
    assert results['output_tokens'] == 18
    assert results['itl_ms']['count'] == 4
    assert raw.connections == 1


def test_parser_without_usage_counts_content_events_and_reads_content_length_streams():
    events = _sse(*GOOD_EVENTS[:4]) + b': a comment line\n\n' + b'data: [DONE]\n\n'
    head = b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n' % len(events)
    results, _raw = raw_bench([(head + events, False)])
    assert results['completed'] == 1 and results['output_tokens'] == 3


def test_parser_error_events_and_a_missing_done():
    error_event = b'event: error\ndata: {"message": "backend went away"}\n\n'
    data_error = _sse({'error': {'message': 'overloaded', 'code': 503}})
    vllm_error = _sse({'object': 'error', 'message': 'engine dead', 'code': 500})
    no_done = _sse(*GOOD_EVENTS)
    close_delimited = b'HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n' + _sse(*GOOD_EVENTS)
    results, _raw = raw_bench([(STREAM_HEAD + _chunked(_sse(GOOD_EVENTS[2]) + error_event), False),
                               (STREAM_HEAD + _chunked(data_error + b'data: [DONE]\n\n'), False),
                               (STREAM_HEAD + _chunked(vllm_error + b'data: [DONE]\n\n'), False),
                               (STREAM_HEAD + _chunked(no_done), False),
                               (close_delimited, True)])
    assert results['errors_by_kind'] == {'stream_error': 3, 'stream_cut': 2}


def test_parser_connection_close_keep_alive_and_100_continue_whole_answers():
    answer = json.dumps({'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': 'one two three'}}]})
    plain = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n' % len(answer)
    responses = [(b'HTTP/1.1 100 Continue\r\n\r\n' + plain + b'\r\n' + answer.encode(), False),
                 (plain + b'Connection: close\r\n\r\n' + answer.encode(), True),
                 (b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n' + answer.encode(), True),
                 (plain + b'\r\n' + answer.encode(), False)]
    results, raw = raw_bench(responses, stream=False)
    assert results['errors_by_kind'] == {} and results['completed'] == 4
    # No usage: the words of the answer.
    assert results['output_tokens'] == 12
    # Connection: close and the close-delimited HTTP/1.0 answer each needed a new connection.
    assert raw.connections == 3


def test_parser_rejects_garbage_and_a_json_answer_to_a_stream():
    answer = b'{"choices": []}'
    json_head = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n' % len(answer)
    results, _raw = raw_bench([(b'SSH-2.0-OpenSSH_9.2\r\n\r\n', True), (json_head + answer, False)])
    assert results['errors_by_kind'] == {'bad_response': 2}


def test_a_server_closing_an_idle_keep_alive_connection_is_retried_once():
    answer = json.dumps({'choices': [], 'usage': {'completion_tokens': 2}}).encode()
    head = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n' % len(answer)

    class ClosingServer(RawServer):
        """Closes every connection after one answer, without saying so (as an idle timeout does)."""

        def _serve(self, conn):
            with conn:
                conn.recv(65536)
                conn.sendall(head + answer)
                time.sleep(0.05)

    raw = ClosingServer([])
    try:
        results = bench(raw.url, model='m', requests=4, concurrency=1, stream=False, timeout_s=5)
    finally:
        raw.close()
    assert results['errors_by_kind'] == {} and results['completed'] == 4
    assert results['output_tokens'] == 8


# ---------------------------------------------------------------- TLS

@pytest.fixture(scope='module')
def tls_server(tmp_path_factory):
    if not shutil.which('openssl'):
        pytest.skip('openssl is needed to make a self-signed certificate')
    tmp = tmp_path_factory.mktemp('tls')
    cert, key = tmp / 'cert.pem', tmp / 'key.pem'
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
                    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', str(key), '-out', str(cert)],
                   check=True, capture_output=True)
    httpd = ots.make_server(models=['tls-model'], tokens=4)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True).start()
    yield 'https://localhost:%d/v1' % httpd.server_address[1], str(cert)
    httpd.shutdown()
    httpd.server_close()


def test_tls_with_the_ca_file_without_it_and_insecure(tls_server):
    url, cert = tls_server
    results = bench(url, requests=3, ca_file=cert)
    assert results['completed'] == 3 and results['output_tokens'] == 12
    assert results['settings']['model'] == 'tls-model' and results['settings']['tls_verify'] is True
    # Unknown issuer: a setup error while listing the models, a tls error per request with the model given.
    with pytest.raises(BenchError, match='CERTIFICATE_VERIFY_FAILED'):
        bench(url, requests=1)
    assert bench(url, requests=2, model='tls-model')['errors_by_kind'] == {'tls': 2}
    assert bench(url, requests=2, insecure=True, stream=False)['completed'] == 2


# ---------------------------------------------------------------- target and settings

def test_url_normalisation():
    for url, expected in (('http://127.0.0.1:8000', 'http://127.0.0.1:8000/v1'),
                          ('http://127.0.0.1:8000/', 'http://127.0.0.1:8000/v1'),
                          ('http://127.0.0.1:8000/v1/', 'http://127.0.0.1:8000/v1'),
                          ('http://127.0.0.1:8000/v1/chat/completions', 'http://127.0.0.1:8000/v1'),
                          ('https://llm.example.org:443/api', 'https://llm.example.org/api/v1'),
                          ('http://[::1]:8080/v1', 'http://[::1]:8080/v1')):
        assert Target(url).url == expected
    for url in ('127.0.0.1:8000', 'ftp://h/', 'http://u:p@h/', 'http://h:99999/'):
        with pytest.raises(BenchError):
            Target(url)


def test_settings_are_checked():
    for settings, message in (({'requests': 0}, 'requests must be at least 1'),
                              ({'concurrency': 'x'}, 'concurrency must be a whole number'),
                              ({'rate': -1}, 'rate must be more than 0'),
                              ({'arrival': 'burst'}, 'arrival must be poisson or constant'),
                              ({'processes': 4, 'concurrency': 2}, 'must not exceed concurrency'),
                              ({'timeout_s': 0}, 'timeout_s must be more than 0')):
        with pytest.raises(BenchError, match=message):
            normalise_settings(settings)
