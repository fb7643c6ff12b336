# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-bench's load generator: the requests, the HTTP/1.1 client and the schedule.

What it does
  POST {base}/v1/chat/completions, N requests. The base URL may end in /v1 or
  not. Without --model, GET /v1/models names the model (its first id).
  Closed loop: C workers, each on its own keep-alive connection, send the next
  request as soon as their previous one ends. Open loop (--rate R): request i
  is due at t0 + a_i, with Poisson arrivals (exponential gaps of mean 1/R,
  seeded) or constant ones (i / R); at most C are in flight, so a request whose
  due time finds all C busy starts late, and schedule_lag_ms says by how much.
  Every run stops after N requests or --duration-limit seconds, whichever comes
  first; requests still in flight at the limit are abandoned and counted as
  `unfinished`, not as errors. With --processes K, K forked processes share
  the requests, the concurrency, the warm-up and the rate, and start together.

Prompts
  Each prompt is about P words of deterministic filler (common English words,
  about one token each, from --seed) led by a per-request tag of random hex,
  so that no two prompts share a prefix and prefix caching cannot answer them.
  Requests are pre-encoded once; per request only the tag is spliced in.

What it measures, per request
  ttft   streamed only: from sending the request to the first SSE event whose
         delta has non-empty content (or reasoning_content / reasoning).
  itl    streamed only: gaps between consecutive content events. Events that
         arrive in one read share one timestamp (a gap of 0), as seen by a client.
  tpot   streamed only: (e2e - ttft) / (output tokens - 1).
  e2e    from sending the request to the last byte of the answer.
  output tokens: usage.completion_tokens when the server sends it (streams ask
         for it with stream_options.include_usage), else the number of content
         events (streamed) or the words of the answer (not streamed).
  Errors by kind: connect (no TCP connection), tls (handshake or certificate),
  timeout (--timeout seconds per request passed), http_<code> (status >= 400),
  stream_cut (a stream ended without `data: [DONE]`, or the connection closed
  mid-answer), stream_error (an `event: error` or a data object with "error"),
  connection_closed (closed before any answer), bad_response (not HTTP, not
  JSON, or JSON where a stream was asked for).

run_benchmark turns the samples into results with _loadbench_stats.summarize.
"""

from __future__ import annotations

import asyncio
import datetime
import http.client
import json
import random
import re
import resource
import ssl
import time
from urllib.parse import urlsplit

from ._loadbench_stats import VERSION, BenchError, summarize

API_KEY_ENV = 'LLM_BENCH_API_KEY'

# The settings' defaults (normalise_settings); the command line and the module's options use them too.
DEFAULTS = {
    'model': None,
    'requests': 100,
    'concurrency': 1,
    'rate': None,
    'arrival': 'poisson',
    'stream': True,
    'prompt_tokens': 128,
    'max_tokens': 128,
    'timeout_s': 120.0,
    'duration_limit_s': 600.0,
    'warmup': 0,
    'processes': 1,
    'seed': 0,
    'ignore_eos': False,
    'ca_file': None,
    'insecure': False,
}

# Common one-token English words: the prompt filler.
_WORDS = ('the time people year way day man thing woman life child world school state family student group '
          'country problem hand part place case week company system program question work government number '
          'night point home water room mother area money story fact month lot right study book eye job word '
          'business issue side kind head house service friend father power hour game line end member law car '
          'city name team minute idea kid body back parent face others level office door health person art '
          'war history party result change morning reason research girl guy moment air teacher force').split()
_TAG = 'LLMBENCHTAG'
_TAG_WIDTH = 8
_MAX_HEAD = 65536
# A content event: one of these keys with a non-empty string value. Inside a JSON string a
# quote is always escaped, so these patterns only match the structure, never the text.
_CONTENT_RE = re.compile(rb'"(?:content|reasoning_content|reasoning|text)"\s*:\s*"(?!")')
_USAGE_RE = re.compile(rb'"completion_tokens"\s*:\s*(\d+)')
_clock = time.perf_counter


# ---------------------------------------------------------------- target and requests

class Target:
    """Where the requests go: scheme, host, port, /v1 base path and TLS settings."""

    def __init__(self, url, ca_file=None, insecure=False):
        parts = urlsplit(url or '')
        if parts.scheme not in ('http', 'https') or not parts.hostname:
            raise BenchError('url must be http:// or https:// with a host, like http://127.0.0.1:8000/v1; got %r'
                             % url)
        if parts.username or parts.password:
            raise BenchError('url must not carry credentials; give the API key with --api-key-file or %s'
                             % API_KEY_ENV)
        self.tls = parts.scheme == 'https'
        self.host = parts.hostname
        try:
            self.port = parts.port or (443 if self.tls else 80)
        except ValueError as exc:
            raise BenchError('url has an invalid port: %s' % exc) from exc
        path = parts.path.rstrip('/')
        for suffix in ('/chat/completions', '/models'):
            if path.endswith('/v1' + suffix):
                path = path[:-len(suffix)]
        if not path.endswith('/v1'):
            path += '/v1'
        self.base_path = path
        host = '[%s]' % self.host if ':' in self.host else self.host
        default_port = 443 if self.tls else 80
        self.host_header = host if self.port == default_port else '%s:%d' % (host, self.port)
        self.url = '%s://%s%s' % (parts.scheme, self.host_header, self.base_path)
        self.ssl_context = None
        if self.tls:
            try:
                self.ssl_context = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise BenchError('cannot load the CA file %s: %s' % (ca_file, exc)) from exc
            if insecure:
                self.ssl_context.check_hostname = False
                self.ssl_context.verify_mode = ssl.CERT_NONE

    def get_json(self, path, api_key, timeout):
        """GET base_path + path with the standard library's client; the decoded JSON."""
        if self.tls:
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self.ssl_context)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        headers = {'Accept': 'application/json', 'User-Agent': 'llm-bench/' + VERSION}
        if api_key:
            headers['Authorization'] = 'Bearer ' + api_key
        try:
            conn.request('GET', self.base_path + path, headers=headers)
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise BenchError('GET %s%s answered HTTP %d' % (self.url, path, response.status))
        return json.loads(body)


def resolve_model(target, api_key, timeout):
    """The first model id of GET /v1/models."""
    try:
        listing = target.get_json('/models', api_key, timeout)
        return listing['data'][0]['id']
    except BenchError as exc:
        raise BenchError('%s; give the model name or check the url and the API key' % exc) from exc
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise BenchError('cannot list the models at %s/models (%s: %s); give the model name or check the url'
                         % (target.url, type(exc).__name__, exc)) from exc
    except (KeyError, IndexError, TypeError) as exc:
        raise BenchError('%s/models lists no model; give the model name' % target.url) from exc


class Payloads:
    """Pre-encoded requests: one byte string, with a per-request tag spliced into the prompt."""

    def __init__(self, target, model, settings, api_key=None, stream_seed=0):
        rnd = random.Random(settings['seed'])
        words = max(1, int(settings['prompt_tokens']) - 3)
        filler = ' '.join(rnd.choice(_WORDS) for _word in range(words))
        body = {'model': model,
                'messages': [{'role': 'user', 'content': 'ref-%s: %s' % (_TAG, filler)}],
                'max_tokens': int(settings['max_tokens']),
                'temperature': 0,
                'stream': bool(settings['stream'])}
        if settings['stream']:
            body['stream_options'] = {'include_usage': True}
        if settings.get('ignore_eos'):
            body['ignore_eos'] = True
        head, tail = json.dumps(body, separators=(',', ':')).encode('utf-8').split(_TAG.encode('ascii'))
        lines = ['POST %s/chat/completions HTTP/1.1' % target.base_path,
                 'Host: ' + target.host_header,
                 'User-Agent: llm-bench/' + VERSION,
                 'Accept: text/event-stream' if settings['stream'] else 'Accept: application/json',
                 'Content-Type: application/json',
                 'Content-Length: %d' % (len(head) + _TAG_WIDTH + len(tail))]
        if api_key:
            lines.append('Authorization: Bearer ' + api_key)
        self._prefix = ('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1') + head
        self._tail = tail
        # A different stream per process: prompts stay distinct across processes.
        self._rnd = random.Random('%s/%s' % (settings['seed'], stream_seed))

    def next(self):
        return self._prefix + b'%08x' % self._rnd.getrandbits(32) + self._tail


# ---------------------------------------------------------------- HTTP/1.1 client

# Parser states.
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILER, _UNTIL_CLOSE = range(7)
# Answer of a request on a reused keep-alive connection that the server had closed: resend once.
_RETRY = 'retry'


class _HTTPProtocol(asyncio.Protocol):
    """One keep-alive connection; parses responses as bytes arrive (Content-Length, chunked, SSE).

    A request's answer is a tuple (kind, tokens, token_times, t_end): kind None on success,
    tokens the output tokens, token_times the arrival times of the content events (streams).
    """

    def __init__(self, loop):
        self.loop = loop
        self.transport = None
        self.closed = False
        self.answered = 0
        self.deadline = 0.0
        self._fut = None
        self._buf = b''
        self._now = 0.0

    # -- connection

    def connection_made(self, transport):
        self.transport = transport

    def connection_lost(self, exc):
        self.closed = True
        if self._fut is None:
            return
        if self._state == _UNTIL_CLOSE:
            self._finish()
        elif not self._got_bytes and self.answered:
            self._resolve(_RETRY)
        elif not self._got_bytes:
            self._fail('connection_closed')
        else:
            self._fail('stream_cut')

    def close(self):
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # -- one request

    def request(self, payload, deadline, expect_stream):
        """Send payload; a future for the answer tuple (or _RETRY). _Run's watchdog enforces deadline."""
        self._fut = fut = self.loop.create_future()
        self.deadline = deadline
        self._state = _HEAD
        self._buf = b''
        self._got_bytes = False
        self._expect_stream = expect_stream
        self._status = 0
        self._sse = False
        self._close_after = False
        self._remaining = 0
        self._body = []
        self._sse_buf = b''
        self._done = False
        self._kind = None
        self._usage_tokens = None
        self._token_times = []
        self.transport.write(payload)
        return fut

    def overdue(self, now):
        return self._fut is not None and now >= self.deadline

    def time_out(self):
        self._fail('timeout')
        self.close()

    def _resolve(self, value):
        fut, self._fut = self._fut, None
        if not fut.done():
            fut.set_result(value)

    def _fail(self, kind):
        self._resolve((kind, 0, None, _clock()))

    # -- parsing

    def data_received(self, data):
        if self._fut is None:
            # Bytes nobody asked for: the connection is out of step.
            self.close()
            return
        self._now = _clock()
        self._got_bytes = True
        if self._buf:
            data = self._buf + data
            self._buf = b''
        try:
            self._consume(data)
        except (ValueError, IndexError):
            self._fail('bad_response')
            self.close()

    def _consume(self, data):
        pos = 0
        size = len(data)
        while pos < size:
            state = self._state
            if state == _HEAD:
                end = data.find(b'\r\n\r\n', pos)
                if end < 0:
                    if size - pos > _MAX_HEAD:
                        raise ValueError('response head too long')
                    self._buf = data[pos:]
                    return
                self._head(data[pos:end])
                pos = end + 4
                if self._state == _LENGTH and not self._remaining:
                    self._finish()
                    return
            elif state == _LENGTH:
                take = min(self._remaining, size - pos)
                self._on_body(data[pos:pos + take] if pos or take < size else data)
                pos += take
                self._remaining -= take
                if not self._remaining:
                    self._finish()
                    return
            elif state == _CHUNK_SIZE:
                end = data.find(b'\r\n', pos)
                if end < 0:
                    self._buf = data[pos:]
                    return
                chunk = int(data[pos:end].split(b';', 1)[0], 16)
                pos = end + 2
                if chunk:
                    self._remaining = chunk
                    self._state = _CHUNK_DATA
                else:
                    self._state = _TRAILER
            elif state == _CHUNK_DATA:
                take = min(self._remaining, size - pos)
                self._on_body(data[pos:pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    self._state = _CHUNK_CRLF
            elif state == _CHUNK_CRLF:
                if size - pos < 2:
                    self._buf = data[pos:]
                    return
                pos += 2
                self._state = _CHUNK_SIZE
            elif state == _TRAILER:
                end = data.find(b'\r\n', pos)
                if end < 0:
                    self._buf = data[pos:]
                    return
                if end == pos:
                    self._finish()
                    return
                pos = end + 2
            else:
                self._on_body(data[pos:] if pos else data)
                return

    def _head(self, head):
        if not head.startswith(b'HTTP/1.'):
            raise ValueError('not an HTTP/1.x response')
        status = int(head[9:12])
        if status < 200:
            # 100 Continue and friends: the real head follows.
            return
        lower = head.lower()
        length = _header(lower, b'\r\ncontent-length:')
        chunked = b'chunked' in (_header(lower, b'\r\ntransfer-encoding:') or b'')
        connection = _header(lower, b'\r\nconnection:') or b''
        content_type = _header(lower, b'\r\ncontent-type:') or b''
        self._status = status
        self._sse = status < 400 and content_type.startswith(b'text/event-stream')
        self._close_after = connection == b'close' or (head[5:8] == b'1.0' and connection != b'keep-alive')
        if chunked:
            self._state = _CHUNK_SIZE
        elif length is not None:
            self._state = _LENGTH
            self._remaining = int(length)
        else:
            self._state = _UNTIL_CLOSE
            self._close_after = True

    def _on_body(self, chunk):
        if not self._sse:
            self._body.append(chunk)
            return
        buf = self._sse_buf + chunk if self._sse_buf else chunk
        if b'\r' in buf:
            buf = buf.replace(b'\r\n', b'\n')
        end = buf.rfind(b'\n\n')
        if end < 0:
            self._sse_buf = buf
            return
        events, self._sse_buf = buf[:end + 2], buf[end + 2:]
        # Fast path for all the complete events of one read: every data line a JSON object or
        # [DONE], no error anywhere, no named events. Then counting content events is enough.
        if (b'error' in events or b'event:' in events or events.count(b'data:') != (
                events.count(b'data: {') + events.count(b'data:{') + events.count(b'data: [DONE]'))):
            self._events(events)
            return
        count = len(_CONTENT_RE.findall(events))
        if count:
            self._token_times.extend([self._now] * count)
        if b'data: [DONE]' in events:
            self._done = True
        usage = events.rfind(b'"completion_tokens"')
        if usage >= 0:
            match = _USAGE_RE.match(events, usage)
            if match:
                self._usage_tokens = int(match.group(1))

    def _events(self, events):
        """Complete events one by one (the general path)."""
        start = 0
        while True:
            end = events.find(b'\n\n', start)
            if end < 0:
                return
            block = events[start:end]
            start = end + 2
            # The usual event is one data line; anything else takes the general path.
            if block.startswith(b'data:') and b'\n' not in block:
                self._data(block[5:].strip(), False)
            else:
                self._block(block)

    def _block(self, block):
        """An SSE event in general: several data lines, an event name, comments."""
        error_event = False
        data = []
        for line in block.split(b'\n'):
            if line.startswith(b'data:'):
                data.append(line[5:].strip())
            elif line.startswith(b'event:'):
                error_event = line[6:].strip() == b'error'
        if data:
            self._data(b'\n'.join(data), error_event)
        elif error_event:
            self._kind = self._kind or 'stream_error'

    def _data(self, payload, error_event):
        """One event's data. Scanned, not decoded, unless it may carry an error: decoding every
        event would make the client, not the server, the limit of a fast stream."""
        if payload == b'[DONE]':
            self._done = True
            return
        if error_event or b'error' in payload:
            self._decoded(payload, error_event)
            return
        if not (payload.startswith(b'{') and payload.endswith(b'}')):
            self._kind = self._kind or 'bad_response'
            return
        if _CONTENT_RE.search(payload):
            self._token_times.append(self._now)
        if b'"completion_tokens"' in payload:
            match = _USAGE_RE.search(payload)
            if match:
                self._usage_tokens = int(match.group(1))

    def _decoded(self, payload, error_event):
        try:
            event = json.loads(payload)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            self._kind = self._kind or ('stream_error' if error_event else 'bad_response')
            return
        if error_event or event.get('error') or event.get('object') == 'error':
            self._kind = self._kind or 'stream_error'
            return
        choices = event.get('choices')
        if choices and isinstance(choices[0], dict):
            choice = choices[0]
            delta = choice.get('delta') or {}
            if (delta.get('content') or delta.get('reasoning_content') or delta.get('reasoning')
                    or choice.get('text')):
                self._token_times.append(self._now)
        usage = event.get('usage')
        if isinstance(usage, dict) and usage.get('completion_tokens') is not None:
            self._usage_tokens = int(usage['completion_tokens'])

    def _finish(self):
        self.answered += 1
        status = self._status
        tokens = 0
        times = None
        if status >= 400:
            kind = 'http_%d' % status
        elif self._sse:
            kind = self._kind or (None if self._done else 'stream_cut')
            times = self._token_times
            tokens = self._usage_tokens if self._usage_tokens is not None else len(times)
        elif self._expect_stream:
            kind = 'bad_response'
        else:
            kind, tokens = _whole_answer(b''.join(self._body))
        self._resolve((kind, tokens, times, self._now))
        if self._close_after:
            self.close()


def _header(lower_head, marker):
    """The value of a header in a lowered response head (marker: b'\\r\\nname:'), or None."""
    start = lower_head.find(marker)
    if start < 0:
        return None
    start += len(marker)
    end = lower_head.find(b'\r\n', start)
    return lower_head[start:end if end >= 0 else None].strip()


def _whole_answer(body):
    """(error kind or None, output tokens) of a non-streamed chat completion.

    Scanned for usage.completion_tokens first; decoded only when it may carry an error or has no usage.
    """
    if b'error' not in body and body.lstrip().startswith(b'{') and body.rstrip().endswith(b'}'):
        match = _USAGE_RE.search(body)
        if match:
            return None, int(match.group(1))
    try:
        answer = json.loads(body)
    except ValueError:
        return 'bad_response', 0
    if not isinstance(answer, dict):
        return 'bad_response', 0
    if answer.get('error') or answer.get('object') == 'error':
        return 'stream_error', 0
    usage = answer.get('usage') or {}
    if usage.get('completion_tokens') is not None:
        return None, int(usage['completion_tokens'])
    try:
        return None, len((answer['choices'][0]['message'].get('content') or '').split())
    except (KeyError, IndexError, TypeError, AttributeError):
        return 'bad_response', 0


async def _connect(target, timeout):
    loop = asyncio.get_running_loop()
    _transport, protocol = await asyncio.wait_for(
        loop.create_connection(lambda: _HTTPProtocol(loop), target.host, target.port,
                               ssl=target.ssl_context, server_hostname=target.host if target.tls else None),
        timeout)
    return protocol


def _connect_error_kind(exc):
    if isinstance(exc, ssl.SSLError):
        return 'tls'
    return 'connect'


# ---------------------------------------------------------------- load generation

class _Slot:
    """A worker's connection and whether a request is in flight on it."""

    __slots__ = ('protocol', 'busy')

    def __init__(self):
        self.protocol = None
        self.busy = False


class _Run:
    """One process's share of the load: `concurrency` workers over keep-alive connections."""

    def __init__(self, target, payloads, settings):
        self.target = target
        self.payloads = payloads
        self.timeout = float(settings['timeout_s'])
        self.stream = bool(settings['stream'])
        self.slots = [_Slot() for _slot in range(int(settings['concurrency']))]
        self.samples = []
        self.lags = []
        self._next = 0

    async def connect_all(self):
        async def one(slot):
            try:
                slot.protocol = await _connect(self.target, self.timeout)
            except (OSError, asyncio.TimeoutError):
                slot.protocol = None
        await asyncio.gather(*(one(slot) for slot in self.slots))

    def close_all(self):
        for slot in self.slots:
            if slot.protocol is not None:
                slot.protocol.close()

    async def watchdog(self):
        """Times out overdue requests: one periodic check instead of a timer per request."""
        period = min(0.1, self.timeout / 10)
        while True:
            await asyncio.sleep(period)
            now = _clock()
            for slot in self.slots:
                if slot.protocol is not None and slot.protocol.overdue(now):
                    slot.protocol.time_out()

    async def _send(self, slot):
        """One request on the slot's connection (connecting first if needed); a sample tuple."""
        payload = self.payloads.next()
        start = _clock()
        for _attempt in range(2):
            protocol = slot.protocol
            if protocol is None or protocol.closed:
                try:
                    protocol = slot.protocol = await _connect(self.target, self.timeout)
                except asyncio.TimeoutError:
                    return (start, _clock(), 'connect', 0, None)
                except OSError as exc:
                    return (start, _clock(), _connect_error_kind(exc), 0, None)
            answer = await protocol.request(payload, start + self.timeout, self.stream)
            if answer != _RETRY:
                kind, tokens, times, end = answer
                return (start, end, kind, tokens, times)
            slot.protocol = None
        return (start, _clock(), 'connection_closed', 0, None)

    async def _worker(self, slot, count, t0, schedule, deadline, samples):
        while self._next < count:
            index = self._next
            self._next += 1
            if schedule is not None:
                due = t0 + schedule[index]
                delay = due - _clock()
                if delay > 0:
                    await asyncio.sleep(delay)
            now = _clock()
            if now >= deadline:
                return
            if schedule is not None:
                self.lags.append(now - due)
            slot.busy = True
            samples.append(await self._send(slot))
            slot.busy = False

    async def phase(self, count, t0, schedule, deadline):
        """Run count requests from t0 (closed loop, or by schedule); (samples, unfinished, end time)."""
        self._next = 0
        samples = []
        tasks = [asyncio.ensure_future(self._worker(slot, count, t0, schedule, deadline, samples))
                 for slot in self.slots]
        _done, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - _clock()))
        unfinished = 0
        if pending:
            unfinished = sum(1 for slot in self.slots if slot.busy)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for slot in self.slots:
                if slot.busy and slot.protocol is not None:
                    slot.protocol.close()
                slot.busy = False
        return samples, unfinished, _clock()


def _schedule(count, rate, arrival, rnd, offset=0.0):
    """Due times (seconds after t0) of count requests at rate per second."""
    if rate is None:
        return None
    if arrival == 'constant':
        return [offset + index / rate for index in range(count)]
    due = []
    now = 0.0
    for _index in range(count):
        due.append(now)
        now += rnd.expovariate(rate)
    return due


def _cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _run_share(target, payloads, share, start_at=None, ready=None):
    """One process's whole run: connect, warm up, wait for start_at, measure."""
    run = _Run(target, payloads, share)
    watchdog = asyncio.ensure_future(run.watchdog())
    try:
        await run.connect_all()
        if share['warmup']:
            now = _clock()
            await run.phase(share['warmup'], now, None, now + share['duration_limit_s'])
        if ready is not None:
            start_at = await asyncio.get_running_loop().run_in_executor(None, ready)
        if start_at is None:
            start_at = _clock()
        delay = start_at - _clock()
        if delay > 0:
            await asyncio.sleep(delay)
        rnd = random.Random('%s/schedule/%s' % (share['seed'], share['index']))
        schedule = _schedule(share['requests'], share['rate'], share['arrival'], rnd, share['offset'])
        cpu = _cpu_seconds()
        samples, unfinished, end = await run.phase(share['requests'], start_at, schedule,
                                                   start_at + share['duration_limit_s'])
        cpu = _cpu_seconds() - cpu
    finally:
        watchdog.cancel()
        run.close_all()
    return {'samples': samples, 'unfinished': unfinished, 'start': start_at, 'end': end, 'cpu_s': cpu,
            'lags': run.lags}


def _shares(settings):
    """Split requests, concurrency, warmup and rate over the processes."""
    processes = settings['processes']

    def part(total, index):
        return total // processes + (1 if index < total % processes else 0)

    shares = []
    for index in range(processes):
        share = dict(settings, index=index, requests=part(settings['requests'], index),
                     concurrency=part(settings['concurrency'], index), warmup=part(settings['warmup'], index),
                     offset=0.0)
        if settings['rate'] is not None:
            share['rate'] = settings['rate'] / processes
            # Constant arrivals interleave: process i starts i / rate later.
            share['offset'] = index / settings['rate']
        shares.append(share)
    return shares


def _child(conn, target, payloads, share):
    """A --processes worker: report ready, get the common start time, run, send back the samples."""
    def ready():
        conn.send('ready')
        return conn.recv()
    try:
        outcome = asyncio.run(_run_share(target, payloads, share, ready=ready))
        conn.send(('ok', outcome))
    except Exception as exc:  # pylint: disable=broad-except
        conn.send(('error', '%s: %s' % (type(exc).__name__, exc)))
    finally:
        conn.close()


def _run_processes(target, model, settings, api_key):
    # Imported here: a single-process run (the usual one) does not pay for it.
    import multiprocessing  # pylint: disable=import-outside-toplevel

    context = multiprocessing.get_context('fork')
    children = []
    for share in _shares(settings):
        payloads = Payloads(target, model, settings, api_key, stream_seed=share['index'])
        parent_end, child_end = context.Pipe()
        process = context.Process(target=_child, args=(child_end, target, payloads, share), daemon=True)
        process.start()
        child_end.close()
        children.append((process, parent_end))
    outcomes = []
    try:
        for _process, conn in children:
            message = conn.recv()
            if message != 'ready':
                raise BenchError('a benchmark process failed: %s' % (message[1],))
        start_at = _clock() + 0.05
        for _process, conn in children:
            conn.send(start_at)
        for _process, conn in children:
            status, outcome = conn.recv()
            if status != 'ok':
                raise BenchError('a benchmark process failed: %s' % outcome)
            outcomes.append(outcome)
    except EOFError as exc:
        raise BenchError('a benchmark process ended without its results') from exc
    finally:
        for process, conn in children:
            conn.close()
            process.join(5)
            if process.is_alive():
                process.terminate()
    return {'samples': [sample for outcome in outcomes for sample in outcome['samples']],
            'unfinished': sum(outcome['unfinished'] for outcome in outcomes),
            'start': min(outcome['start'] for outcome in outcomes),
            'end': max(outcome['end'] for outcome in outcomes),
            'cpu_s': sum(outcome['cpu_s'] for outcome in outcomes),
            'lags': [lag for outcome in outcomes for lag in outcome['lags']]}


def normalise_settings(settings):
    """Defaults filled in and checked; a BenchError names the bad setting and what is allowed."""
    merged = dict(DEFAULTS)
    merged.update({key: value for key, value in (settings or {}).items() if value is not None})
    checks = (('requests', 1), ('concurrency', 1), ('prompt_tokens', 1), ('max_tokens', 1), ('processes', 1),
              ('warmup', 0))
    for key, minimum in checks:
        try:
            merged[key] = int(merged[key])
        except (TypeError, ValueError) as exc:
            raise BenchError('%s must be a whole number, got %r' % (key, merged[key])) from exc
        if merged[key] < minimum:
            raise BenchError('%s must be at least %d, got %d' % (key, minimum, merged[key]))
    for key in ('timeout_s', 'duration_limit_s'):
        merged[key] = float(merged[key])
        if merged[key] <= 0:
            raise BenchError('%s must be more than 0 seconds, got %s' % (key, merged[key]))
    if merged['rate'] is not None:
        merged['rate'] = float(merged['rate'])
        if merged['rate'] <= 0:
            raise BenchError('rate must be more than 0 requests/s (leave it unset for a closed loop)')
    if merged['arrival'] not in ('poisson', 'constant'):
        raise BenchError('arrival must be poisson or constant, got %r' % merged['arrival'])
    if merged['processes'] > merged['concurrency']:
        raise BenchError('processes (%d) must not exceed concurrency (%d): each process needs a connection'
                         % (merged['processes'], merged['concurrency']))
    merged['stream'] = bool(merged['stream'])
    merged['ignore_eos'] = bool(merged['ignore_eos'])
    merged['insecure'] = bool(merged['insecure'])
    return merged


def run_benchmark(url, settings=None, api_key=None):
    """Run the benchmark; the results dict (see _loadbench_stats). BenchError on setup errors."""
    settings = normalise_settings(settings)
    target = Target(url, settings['ca_file'], settings['insecure'])
    model = settings['model'] or resolve_model(target, api_key, settings['timeout_s'])
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
    if settings['processes'] > 1:
        outcome = _run_processes(target, model, settings, api_key)
    else:
        share = _shares(settings)[0]
        outcome = asyncio.run(_run_share(target, Payloads(target, model, settings, api_key), share))
    results = summarize(outcome, settings)
    results['settings'] = {
        'url': target.url, 'model': model, 'requests': settings['requests'],
        'concurrency': settings['concurrency'], 'rate': settings['rate'],
        'arrival': settings['arrival'] if settings['rate'] is not None else None,
        'stream': settings['stream'], 'prompt_tokens': settings['prompt_tokens'],
        'max_tokens': settings['max_tokens'], 'warmup': settings['warmup'], 'timeout_s': settings['timeout_s'],
        'duration_limit_s': settings['duration_limit_s'], 'processes': settings['processes'],
        'seed': settings['seed'], 'ignore_eos': settings['ignore_eos'], 'api_key': bool(api_key),
        'tls_verify': target.tls and not settings['insecure'],
    }
    results['started_at'] = started_at
    return results
