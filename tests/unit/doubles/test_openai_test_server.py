# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/doubles/openai_server/openai_test_server.py: the wire format and behaviour other tests rely on.

Runs the server in a thread of this process (one subprocess test covers the command line).
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
TEST_SERVER = os.path.join(REPO_ROOT, 'tests', 'doubles', 'openai_server', 'openai_test_server.py')


def _load():
    spec = importlib.util.spec_from_file_location('openai_test_server', TEST_SERVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ots = _load()


@pytest.fixture
def serve():
    """serve(**make_server kwargs) -> (host, port) of a server running in a thread."""
    servers = []

    def start(**kwargs):
        kwargs.setdefault('models', ['m'])
        kwargs.setdefault('name', 'backend-a')
        server = ots.make_server(**kwargs)
        threading.Thread(target=server.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True).start()
        servers.append(server)
        return server.server_address[:2]

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def request(conn, method, path, body=None, headers=None):
    payload = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=payload, headers=dict({'Content-Type': 'application/json'}, **(headers or {})))
    response = conn.getresponse()
    return response, response.read()


def sse_events(raw):
    """The data: payloads of an SSE body, in order."""
    assert raw.endswith(b'\n\n')
    events = []
    for block in raw.decode().split('\n\n')[:-1]:
        assert block.startswith('data: '), block
        events.append(block[len('data: '):])
    return events


def test_health_models_and_keep_alive(serve):
    host, port = serve(models=['a', 'b'])
    conn = http.client.HTTPConnection(host, port, timeout=5)
    response, body = request(conn, 'GET', '/health')
    assert response.status == 200 and body == b''
    assert response.getheader('X-Backend') == 'backend-a'
    sock = conn.sock
    response, body = request(conn, 'GET', '/v1/models')
    assert conn.sock is sock, 'the second request must reuse the connection'
    assert int(response.getheader('Content-Length')) == len(body)
    models = json.loads(body)
    assert models['object'] == 'list' and [m['id'] for m in models['data']] == ['a', 'b']


def test_completion_text_names_the_backend_and_counts_tokens(serve):
    host, port = serve(tokens=16)
    conn = http.client.HTTPConnection(host, port, timeout=5)
    response, body = request(conn, 'POST', '/v1/completions',
                             {'model': 'm', 'prompt': 'one two three four', 'max_tokens': 5})
    assert response.status == 200
    data = json.loads(body)
    assert data['object'] == 'text_completion' and data['model'] == 'm'
    assert data['choices'][0]['text'] == ' backend-a-0 backend-a-1 backend-a-2 backend-a-3 backend-a-4'
    assert data['choices'][0]['finish_reason'] == 'length'
    assert data['usage'] == {'prompt_tokens': 4, 'completion_tokens': 5, 'total_tokens': 9}

    response, body = request(conn, 'POST', '/v1/chat/completions',
                             {'model': 'm', 'messages': [{'role': 'system', 'content': 'be brief'},
                                                         {'role': 'user', 'content': 'hello there'}]})
    data = json.loads(body)
    assert data['object'] == 'chat.completion'
    assert data['choices'][0]['message']['role'] == 'assistant'
    assert data['choices'][0]['message']['content'].count('backend-a-') == 16
    assert data['choices'][0]['finish_reason'] == 'stop'
    assert data['usage'] == {'prompt_tokens': 4, 'completion_tokens': 16, 'total_tokens': 20}


def test_streamed_completion_is_chunked_sse_and_the_connection_stays_usable(serve):
    host, port = serve()
    conn = http.client.HTTPConnection(host, port, timeout=5)
    response, body = request(conn, 'POST', '/v1/completions',
                             {'model': 'm', 'prompt': 'x', 'max_tokens': 3, 'stream': True})
    assert response.status == 200
    assert response.getheader('Content-Type') == 'text/event-stream'
    assert response.getheader('Transfer-Encoding') == 'chunked'
    events = sse_events(body)
    assert events[-1] == '[DONE]'
    chunks = [json.loads(event) for event in events[:-1]]
    assert [c['choices'][0]['text'] for c in chunks] == [' backend-a-0', ' backend-a-1', ' backend-a-2']
    assert [c['choices'][0]['finish_reason'] for c in chunks] == [None, None, 'length']
    assert all(c['object'] == 'text_completion' and 'usage' not in c for c in chunks)
    assert len({c['id'] for c in chunks}) == 1
    sock = conn.sock
    response, _body = request(conn, 'GET', '/health')
    assert response.status == 200 and conn.sock is sock


def test_streamed_chat_with_usage(serve):
    host, port = serve()
    conn = http.client.HTTPConnection(host, port, timeout=5)
    _response, body = request(conn, 'POST', '/v1/chat/completions',
                              {'model': 'm', 'messages': [{'role': 'user', 'content': 'a b c'}], 'max_tokens': 2,
                               'stream': True, 'stream_options': {'include_usage': True}})
    events = sse_events(body)
    assert events[-1] == '[DONE]'
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks[0]['choices'][0]['delta'] == {'role': 'assistant', 'content': ''}
    assert [c['choices'][0]['delta']['content'] for c in chunks[1:3]] == [' backend-a-0', ' backend-a-1']
    assert chunks[2]['choices'][0]['finish_reason'] == 'length'
    assert chunks[-1]['choices'] == []
    assert chunks[-1]['usage'] == {'prompt_tokens': 3, 'completion_tokens': 2, 'total_tokens': 5}
    assert all(c['object'] == 'chat.completion.chunk' for c in chunks)


def test_http10_stream_is_close_delimited(serve):
    host, port = serve()
    with socket.create_connection((host, port), timeout=5) as sock:
        body = json.dumps({'model': 'm', 'prompt': 'x', 'max_tokens': 2, 'stream': True}).encode()
        sock.sendall(b'POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\n'
                     b'Content-Length: %d\r\n\r\n%s' % (len(body), body))
        raw = b''
        while True:
            data = sock.recv(65536)
            if not data:
                break
            raw += data
    head, _separator, payload = raw.partition(b'\r\n\r\n')
    assert b'Transfer-Encoding' not in head and b'Connection: close' in head
    assert sse_events(payload)[-1] == '[DONE]' and len(sse_events(payload)) == 3


def test_token_delays(serve):
    host, port = serve(first_token_delay=0.2, inter_token_delay=0.05)
    conn = http.client.HTTPConnection(host, port, timeout=5)
    start = time.monotonic()
    conn.request('POST', '/v1/completions', body=json.dumps({'model': 'm', 'prompt': 'x', 'max_tokens': 3,
                                                             'stream': True}))
    response = conn.getresponse()
    assert response.read1().startswith(b'data: {')
    first_token_s = time.monotonic() - start
    response.read()
    total_s = time.monotonic() - start
    assert 0.2 <= first_token_s < 0.35
    assert 0.3 <= total_s < 0.5  # 0.2 + 2 x 0.05


def test_zero_delay_by_default(serve):
    host, port = serve()
    conn = http.client.HTTPConnection(host, port, timeout=5)
    request(conn, 'POST', '/v1/completions', {'model': 'm', 'prompt': 'x'})
    start = time.monotonic()
    for _request in range(50):
        request(conn, 'POST', '/v1/completions', {'model': 'm', 'prompt': 'x', 'max_tokens': 1})
    # Nagle plus delayed ACKs would cost ~40 ms a request; 50 requests must stay far below that.
    assert (time.monotonic() - start) / 50 < 0.02


def test_hang_switch_keeps_health_and_releases_pending_requests(serve):
    host, port = serve()
    control = http.client.HTTPConnection(host, port, timeout=5)
    response, body = request(control, 'POST', '/_control', {'hang_completions': True})
    assert response.status == 200 and json.loads(body)['hang_completions'] is True

    hung = http.client.HTTPConnection(host, port, timeout=0.3)
    with pytest.raises(socket.timeout):
        request(hung, 'POST', '/v1/completions', {'model': 'm', 'prompt': 'x'})
    hung.close()
    assert request(control, 'GET', '/health')[0].status == 200

    results = []
    pending = http.client.HTTPConnection(host, port, timeout=5)
    waiter = threading.Thread(target=lambda: results.append(
        request(pending, 'POST', '/v1/completions', {'model': 'm', 'prompt': 'x', 'max_tokens': 1})))
    waiter.start()
    time.sleep(0.2)
    assert not results
    request(control, 'POST', '/_control', {'hang_completions': False})
    waiter.join(5)
    assert results and results[0][0].status == 200


def test_failures_model_errors_and_control_validation(serve):
    host, port = serve(fail_status=503)
    conn = http.client.HTTPConnection(host, port, timeout=5)
    response, body = request(conn, 'POST', '/v1/completions', {'model': 'm', 'prompt': 'x'})
    assert response.status == 503 and json.loads(body)['error']['message'] == 'failure set by the test'
    response, body = request(conn, 'POST', '/v1/completions', {'model': 'nope', 'prompt': 'x'})
    assert response.status == 404
    assert json.loads(body)['error'] == {'message': 'The model `nope` does not exist.', 'type': 'NotFoundError',
                                         'param': 'model', 'code': 404}
    response, body = request(conn, 'POST', '/_control', {'hang': True})
    assert response.status == 400 and 'unknown key' in json.loads(body)['error']['message']
    response, _body = request(conn, 'POST', '/_control', {'health_status': 503, 'fail_status': 0})
    assert request(conn, 'GET', '/health')[0].status == 503
    assert request(conn, 'POST', '/v1/completions', {'model': 'm', 'prompt': 'x'})[0].status == 200


def test_api_key(serve):
    host, port = serve(api_key='sk-abc')
    conn = http.client.HTTPConnection(host, port, timeout=5)
    assert request(conn, 'GET', '/health')[0].status == 200
    assert request(conn, 'GET', '/v1/models')[0].status == 401
    assert request(conn, 'POST', '/v1/completions', {'model': 'm', 'prompt': 'x'})[0].status == 401
    auth = {'Authorization': 'Bearer sk-abc'}
    assert request(conn, 'POST', '/v1/completions', {'model': 'm', 'prompt': 'x'}, auth)[0].status == 200


def test_command_line(tmp_path):
    key = tmp_path / 'key'
    key.write_text('sk-cli\n')
    proc = subprocess.Popen([sys.executable, TEST_SERVER, '--port', '0', '--model', 'x', '--name', 'backend-b',
                             '--tokens', '2', '--api-key-file', str(key)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith('listening on http://127.0.0.1:')
        port = int(line.rsplit(':', 1)[1])
        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=5)
        response, body = request(conn, 'POST', '/v1/completions', {'prompt': 'x'}, {'Authorization': 'Bearer sk-cli'})
        assert response.getheader('X-Backend') == 'backend-b'
        assert json.loads(body)['choices'][0]['text'] == ' backend-b-0 backend-b-1'
    finally:
        proc.terminate()
        proc.wait(5)
        proc.stdout.close()
