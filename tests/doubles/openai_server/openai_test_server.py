# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A small OpenAI-compatible HTTP server for tests of clients and proxies. Not an engine.

    python3 tests/doubles/openai_server/openai_test_server.py --port 0 --model NAME [--model OTHER]
        [--name backend-a] [--tokens 16] [--first-token-delay 0] [--inter-token-delay 0]
        [--cut-stream-after 0] [--hang-completions] [--fail-status 0] [--health-status 200]
        [--api-key-file F] [--verbose]

It prints "listening on http://HOST:PORT" once it accepts connections (--port 0
picks a free port). Endpoints: GET /health, GET /v1/models, POST /v1/completions,
POST /v1/chat/completions (non-streamed, or SSE with "stream": true), and
GET/POST /_control to read or change the behaviour of a running server, e.g.
{"hang_completions": true}. See README.md next to this file.

Standard library only; HTTP/1.1 with keep-alive, TCP_NODELAY and no per-request
logging unless --verbose, so that it adds little to a proxy's measured latency.
"""

import argparse
import http.server
import json
import select
import socket
import sys
import threading
import time
import uuid

# Behaviour that POST /_control may change at run time: key -> type.
CONTROL_KEYS = {
    'hang_completions': bool,
    'fail_status': int,
    'health_status': int,
    'tokens': int,
    'first_token_delay': float,
    'inter_token_delay': float,
    'cut_stream_after': int,
}


class Behaviour:
    """What the server does; shared by all request threads."""

    def __init__(self, models, name, api_key=None, **settings):
        self.models = list(models)
        self.name = name
        self.api_key = api_key
        self.lock = threading.Lock()
        self.settings = {'hang_completions': False, 'fail_status': 0, 'health_status': 200,
                         'tokens': 16, 'first_token_delay': 0.0, 'inter_token_delay': 0.0,
                         'cut_stream_after': 0}
        self.settings.update(settings)
        # Set while completions may proceed; cleared while they hang.
        self.released = threading.Event()
        self._sync_release()

    def _sync_release(self):
        if self.settings['hang_completions']:
            self.released.clear()
        else:
            self.released.set()

    def snapshot(self):
        with self.lock:
            return dict(self.settings)

    def update(self, changes):
        """Apply a /_control body; raises ValueError naming a bad key or value."""
        if not isinstance(changes, dict):
            raise ValueError('the body must be a JSON object')
        parsed = {}
        for key, value in changes.items():
            kind = CONTROL_KEYS.get(key)
            if kind is None:
                raise ValueError('unknown key %r; known: %s' % (key, ', '.join(sorted(CONTROL_KEYS))))
            if kind is bool and not isinstance(value, bool):
                raise ValueError('%s must be true or false' % key)
            if kind is not bool and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError('%s must be a number' % key)
            parsed[key] = kind(value)
        with self.lock:
            self.settings.update(parsed)
            self._sync_release()
            return dict(self.settings)


def token_text(name, index):
    """The text of generated token number index: it names the backend that answered."""
    return ' %s-%d' % (name, index)


def count_words(value):
    """Prompt tokens, counted as whitespace-separated words (a stand-in for a tokenizer)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        return sum(count_words(item) for item in value)
    if isinstance(value, dict):
        return count_words(value.get('content', '')) + count_words(value.get('text', ''))
    return 0


class Handler(http.server.BaseHTTPRequestHandler):
    """One connection; HTTP/1.1 keep-alive, so several requests may arrive on it."""

    protocol_version = 'HTTP/1.1'
    server_version = 'openai-test-server/1'
    sys_version = ''
    disable_nagle_algorithm = True

    # -------------------------------------------------------------- plumbing

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        if self.server.verbose:
            sys.stderr.write('%s %s\n' % (self.address_string(), format % args))

    def _send(self, status, payload=None, content_type='application/json', extra_headers=None):
        """One write for headers and body (no small second segment for Nagle to hold back)."""
        if payload is None:
            body = b''
        elif isinstance(payload, bytes):
            body = payload
        else:
            body = json.dumps(payload, separators=(',', ':')).encode('utf-8')
        lines = ['HTTP/1.1 %d %s' % (status, self.responses.get(status, ('',))[0]),
                 'Content-Type: ' + content_type,
                 'Content-Length: %d' % len(body),
                 'X-Backend: ' + self.server.behaviour.name]
        for key, value in (extra_headers or {}).items():
            lines.append('%s: %s' % (key, value))
        if self.close_connection:
            lines.append('Connection: close')
        head = ('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1')
        self.wfile.write(head + body)
        if self.server.verbose:
            self.log_request(status, len(body))

    def _error(self, status, message, kind, param=None):
        self._send(status, {'error': {'message': message, 'type': kind, 'param': param, 'code': status}})

    def _read_body(self):
        """The request body (Content-Length or chunked)."""
        if 'chunked' in (self.headers.get('Transfer-Encoding') or '').lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b';', 1)[0].strip() or b'0', 16)
                if size == 0:
                    while self.rfile.readline() not in (b'\r\n', b'\n', b''):
                        pass
                    return b''.join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get('Content-Length') or 0)
        return self.rfile.read(length) if length else b''

    def _json_body(self):
        """The request body as a JSON object, or None after answering 400."""
        try:
            data = json.loads(self._read_body() or b'{}')
        except ValueError:
            self._error(400, 'the request body is not valid JSON', 'BadRequestError')
            return None
        if not isinstance(data, dict):
            self._error(400, 'the request body must be a JSON object', 'BadRequestError')
            return None
        return data

    def _authorized(self):
        key = self.server.behaviour.api_key
        if key is None or self.headers.get('Authorization') == 'Bearer ' + key:
            return True
        self._error(401, 'Unauthorized', 'AuthenticationError')
        return False

    def _client_gone(self):
        """True when the client closed its side (a hung request then ends quietly)."""
        try:
            readable = select.select([self.connection], [], [], 0)[0]
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b''
        except OSError:
            return True

    def _hang_while_switched_on(self):
        """Block while completions hang. False when the client went away meanwhile."""
        released = self.server.behaviour.released
        while not released.wait(0.05):
            if self._client_gone():
                self.close_connection = True
                return False
        return True

    # -------------------------------------------------------------- routes

    def do_GET(self):  # pylint: disable=invalid-name
        path = self.path.split('?', 1)[0]
        behaviour = self.server.behaviour
        if path == '/health':
            status = behaviour.snapshot()['health_status']
            if status == 200:
                self._send(200)
            else:
                self._error(status, 'unhealthy (set by the test)', 'ServiceUnavailableError')
        elif path == '/v1/models':
            if self._authorized():
                created = int(self.server.started)
                self._send(200, {'object': 'list', 'data': [
                    {'id': model, 'object': 'model', 'created': created, 'owned_by': 'openai-test-server',
                     'root': model, 'parent': None, 'max_model_len': 4096}
                    for model in behaviour.models]})
        elif path == '/_control':
            self._send(200, behaviour.snapshot())
        else:
            self._error(404, 'no route GET %s' % path, 'NotFoundError')

    def do_POST(self):  # pylint: disable=invalid-name
        path = self.path.split('?', 1)[0]
        if path == '/_control':
            data = self._json_body()
            if data is not None:
                try:
                    self._send(200, self.server.behaviour.update(data))
                except ValueError as exc:
                    self._error(400, str(exc), 'BadRequestError')
        elif path in ('/v1/completions', '/v1/chat/completions'):
            self._complete(chat=path.endswith('/chat/completions'))
        else:
            self._read_body()
            self._error(404, 'no route POST %s' % path, 'NotFoundError')

    def _complete(self, chat):
        request = self._json_body()
        if request is None or not self._authorized():
            return
        behaviour = self.server.behaviour
        model = request.get('model') or behaviour.models[0]
        if model not in behaviour.models:
            self._error(404, 'The model `%s` does not exist.' % model, 'NotFoundError', 'model')
            return
        settings = behaviour.snapshot()
        stream = bool(request.get('stream'))
        if settings['hang_completions'] and not stream and not self._hang_while_switched_on():
            return
        if settings['fail_status']:
            self._error(settings['fail_status'], 'failure set by the test', 'InternalServerError')
            return
        limit = request.get('max_completion_tokens') if chat else None
        limit = limit if limit is not None else request.get('max_tokens')
        count = settings['tokens'] if limit is None else max(0, min(int(limit), settings['tokens']))
        prompt_tokens = count_words(request.get('messages') if chat else request.get('prompt'))
        answer = {
            'id': ('chatcmpl-' if chat else 'cmpl-') + uuid.uuid4().hex,
            'object': 'chat.completion' if chat else 'text_completion',
            'created': int(time.time()),
            'model': model,
            'finish_reason': 'length' if limit is not None and count >= int(limit) else 'stop',
            'count': count,
            'usage': {'prompt_tokens': prompt_tokens, 'completion_tokens': count,
                      'total_tokens': prompt_tokens + count},
        }
        if stream:
            self._stream(chat, answer, settings, request)
        else:
            self._whole(chat, answer, settings)

    def _whole(self, chat, answer, settings):
        if answer['count']:
            time.sleep(settings['first_token_delay'] + settings['inter_token_delay'] * (answer['count'] - 1))
        text = ''.join(token_text(self.server.behaviour.name, i) for i in range(answer['count']))
        if chat:
            choice = {'index': 0, 'message': {'role': 'assistant', 'content': text},
                      'logprobs': None, 'finish_reason': answer['finish_reason']}
        else:
            choice = {'index': 0, 'text': text, 'logprobs': None, 'finish_reason': answer['finish_reason']}
        self._send(200, {'id': answer['id'], 'object': answer['object'], 'created': answer['created'],
                         'model': answer['model'], 'choices': [choice], 'usage': answer['usage']})

    def _stream(self, chat, answer, settings, request):
        """Server-sent events, chunked so the connection stays usable (close-delimited for HTTP/1.0)."""
        chunked = self.request_version != 'HTTP/1.0'
        frame = self._chunk if chunked else bytes
        head = ['HTTP/1.1 200 OK', 'Content-Type: text/event-stream', 'Cache-Control: no-cache',
                'X-Backend: ' + self.server.behaviour.name]
        if chunked:
            head.append('Transfer-Encoding: chunked')
        else:
            self.close_connection = True
        if self.close_connection:
            head.append('Connection: close')
        self.wfile.write(('\r\n'.join(head) + '\r\n\r\n').encode('latin-1'))
        # Like a hung vLLM: the headers went out, then nothing comes.
        if settings['hang_completions'] and not self._hang_while_switched_on():
            return
        kind = 'chat.completion.chunk' if chat else 'text_completion'
        include_usage = bool((request.get('stream_options') or {}).get('include_usage'))

        def event(choices, usage=None):
            data = {'id': answer['id'], 'object': kind, 'created': answer['created'],
                    'model': answer['model'], 'choices': choices}
            if include_usage:
                data['usage'] = usage
            return frame(b'data: ' + json.dumps(data, separators=(',', ':')).encode('utf-8') + b'\n\n')

        if chat:
            self.wfile.write(event([{'index': 0, 'delta': {'role': 'assistant', 'content': ''},
                                     'logprobs': None, 'finish_reason': None}]))
        for index in range(answer['count']):
            if settings['cut_stream_after'] and index == settings['cut_stream_after']:
                # A crashed engine or proxy: the connection closes mid-stream, with no [DONE].
                self.close_connection = True
                return
            time.sleep(settings['first_token_delay'] if index == 0 else settings['inter_token_delay'])
            text = token_text(self.server.behaviour.name, index)
            last = index == answer['count'] - 1
            finish = answer['finish_reason'] if last else None
            if chat:
                choice = {'index': 0, 'delta': {'content': text}, 'logprobs': None, 'finish_reason': finish}
            else:
                choice = {'index': 0, 'text': text, 'logprobs': None, 'finish_reason': finish}
            self.wfile.write(event([choice]))
        if not answer['count']:
            empty = {'index': 0, 'delta': {}} if chat else {'index': 0, 'text': ''}
            empty.update(logprobs=None, finish_reason=answer['finish_reason'])
            self.wfile.write(event([empty]))
        tail = event([], answer['usage']) if include_usage else b''
        self.wfile.write(tail + frame(b'data: [DONE]\n\n') + (b'0\r\n\r\n' if chunked else b''))

    @staticmethod
    def _chunk(data):
        return b'%x\r\n%s\r\n' % (len(data), data)


class Server(http.server.ThreadingHTTPServer):
    """ThreadingHTTPServer with a larger accept queue, for concurrent benchmark clients."""

    daemon_threads = True
    request_queue_size = 256

    def __init__(self, address, behaviour, verbose=False):
        if ':' in address[0]:
            self.address_family = socket.AF_INET6
        self.behaviour = behaviour
        self.verbose = verbose
        self.started = time.time()
        super().__init__(address, Handler)


def make_server(host='127.0.0.1', port=0, models=('test-model',), name='test', api_key=None, verbose=False,
                **settings):
    """A bound Server (call serve_forever, e.g. in a thread); port 0 picks a free one."""
    return Server((host, port), Behaviour(models, name, api_key, **settings), verbose)


def _parser():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--host', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0, help='0 picks a free port (printed on start)')
    parser.add_argument('--model', action='append', help='served model name; repeat for several')
    parser.add_argument('--name', default='test', help='backend name for X-Backend and the completion text')
    parser.add_argument('--tokens', type=int, default=16, help='tokens per completion (max_tokens lowers it)')
    parser.add_argument('--first-token-delay', type=float, default=0.0, help='seconds before the first token')
    parser.add_argument('--inter-token-delay', type=float, default=0.0, help='seconds between tokens')
    parser.add_argument('--cut-stream-after', type=int, default=0,
                        help='streams close their connection after this many tokens (0: never)')
    parser.add_argument('--hang-completions', action='store_true', help='completions never answer; /health stays 200')
    parser.add_argument('--fail-status', type=int, default=0, help='completions answer this status (0: they work)')
    parser.add_argument('--health-status', type=int, default=200, help='status of GET /health')
    parser.add_argument('--api-key-file', help='require "Authorization: Bearer KEY" on /v1/*')
    parser.add_argument('--verbose', action='store_true', help='log every request to stderr')
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    api_key = None
    if args.api_key_file:
        with open(args.api_key_file, encoding='utf-8') as handle:
            api_key = handle.read().strip()
    server = make_server(args.host, args.port, args.model or ['test-model'], args.name, api_key, args.verbose,
                         tokens=args.tokens, first_token_delay=args.first_token_delay,
                         inter_token_delay=args.inter_token_delay, hang_completions=args.hang_completions,
                         fail_status=args.fail_status, health_status=args.health_status,
                         cut_stream_after=args.cut_stream_after)
    host, port = server.server_address[:2]
    sys.stdout.write('listening on http://%s:%d\n' % (host if ':' not in host else '[%s]' % host, port))
    sys.stdout.flush()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == '__main__':
    sys.exit(main())
