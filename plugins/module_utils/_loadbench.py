# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-bench: load benchmark of an OpenAI-compatible chat completions endpoint.

    llm-bench --url URL [--model M] [--requests N] [--concurrency C] [--rate R]
        [--arrival poisson|constant] [--stream|--no-stream] [--prompt-tokens P]
        [--max-tokens T] [--api-key-file F] [--ca-file F] [--insecure] [--timeout S]
        [--duration-limit S] [--warmup K] [--processes K] [--seed S] [--ignore-eos]
        [--threshold KEY=VALUE ...] [--baseline FILE] [--tolerance-pct X]
        [--json OUT] [--quiet]

Standard library only: the same file is the module_utils of the llm_benchmark
module and, copied onto a host, the command /usr/local/bin/llm-bench run by the
system python3. Exit codes: 0 all good, 1 thresholds or baseline missed (or no
request completed), 2 usage or setup error.

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
  `unfinished`, not as errors.

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
  Percentiles are linear interpolations between the closest ranks (numpy's
  default "linear" method); latencies are in milliseconds.

Results are a JSON object: requests, completed, errors, error_rate,
errors_by_kind, unfinished, duration_s, requests_per_s, output_tokens,
output_tokens_per_s, ttft_ms / itl_ms / tpot_ms / e2e_ms (count, mean, min,
p50, p95, p99, max), schedule_lag_ms (rate mode), settings, and client (CPU
seconds and per cent of one core used by the client itself: near 100 % x
processes, the client and not the server may be the limit).

Thresholds: KEY=VALUE, KEY<=VALUE or KEY>=VALUE (also < and >). KEY is
<latency>.<stat> (ttft_ms.p95, e2e_ms.p99, ...) or one of requests_per_s,
output_tokens_per_s, error_rate, errors, completed, unfinished. With `=` the
limit is a maximum for latencies, errors, error_rate and unfinished and a
minimum for the rates and completed. As a dict (the module):
{"ttft_ms.p95": 500, "output_tokens_per_s": ">=50"}.

Baseline: a previous JSON result. Each latency p50/p95/p99 and each rate is
compared; a latency more than --tolerance-pct higher (and at least 1 ms), or a
rate more than --tolerance-pct lower, is a regression.

The API key (--api-key-file, or the environment variable LLM_BENCH_API_KEY) is
sent as "Authorization: Bearer KEY" and never printed or written.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import http.client
import json
import math
import operator
import os
import platform
import random
import re
import resource
import ssl
import sys
import tempfile
import time
from urllib.parse import urlsplit

VERSION = '1.0'
API_KEY_ENV = 'LLM_BENCH_API_KEY'

LATENCY_METRICS = ('ttft_ms', 'itl_ms', 'tpot_ms', 'e2e_ms')
STATS = ('count', 'mean', 'min', 'p50', 'p95', 'p99', 'max')
PERCENTILES = (('p50', 50.0), ('p95', 95.0), ('p99', 99.0))
# Top-level metrics a threshold may name: True when higher is better.
TOP_LEVEL_METRICS = {
    'requests_per_s': True,
    'output_tokens_per_s': True,
    'completed': True,
    'error_rate': False,
    'errors': False,
    'unfinished': False,
}
BASELINE_RATES = ('requests_per_s', 'output_tokens_per_s')
# A latency change smaller than this is noise, whatever its percentage.
BASELINE_MIN_DELTA_MS = 1.0
DEFAULT_TOLERANCE_PCT = 10.0

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


class BenchError(Exception):
    """A usage or setup error: the run cannot start (exit code 2)."""


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
    """Run the benchmark; the results dict (see the module docstring). BenchError on setup errors."""
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


# ---------------------------------------------------------------- statistics

def percentile(ordered, pct):
    """Linear interpolation between closest ranks of sorted values (numpy's default)."""
    if not ordered:
        return None
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def stats(values):
    """count, mean, min, p50, p95, p99, max of values (None when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return dict((name, 0 if name == 'count' else None) for name in STATS)
    out = {'count': len(ordered), 'mean': _round(sum(ordered) / len(ordered)), 'min': _round(ordered[0]),
           'max': _round(ordered[-1])}
    for name, pct in PERCENTILES:
        out[name] = _round(percentile(ordered, pct))
    return out


def _round(value):
    return None if value is None else round(value, 3)


def summarize(outcome, settings):
    """The results dict from raw samples (start, end, kind, tokens, token_times)."""
    samples = outcome['samples']
    ttft, itl, tpot, e2e = [], [], [], []
    errors = {}
    tokens = 0
    for start, end, kind, count, times in samples:
        if kind is not None:
            errors[kind] = errors.get(kind, 0) + 1
            continue
        tokens += count
        e2e.append((end - start) * 1000.0)
        if times:
            first = times[0]
            ttft.append((first - start) * 1000.0)
            previous = first
            for moment in times[1:]:
                itl.append((moment - previous) * 1000.0)
                previous = moment
            if count > 1:
                tpot.append((end - first) * 1000.0 / (count - 1))
    completed = len(e2e)
    error_count = sum(errors.values())
    duration = max(outcome['end'] - outcome['start'], 1e-9)
    results = {
        'requests': len(samples) + outcome['unfinished'],
        'completed': completed,
        'errors': error_count,
        'error_rate': round(error_count / len(samples), 4) if samples else 0.0,
        'errors_by_kind': dict(sorted(errors.items())),
        'unfinished': outcome['unfinished'],
        'duration_s': round(duration, 3),
        'requests_per_s': round(completed / duration, 2),
        'output_tokens': tokens,
        'output_tokens_per_s': round(tokens / duration, 2),
        'ttft_ms': stats(ttft),
        'itl_ms': stats(itl),
        'tpot_ms': stats(tpot),
        'e2e_ms': stats(e2e),
        'percentiles': 'linear interpolation between closest ranks',
        'client': {'cpu_s': round(outcome['cpu_s'], 3),
                   'cpu_percent': round(100.0 * outcome['cpu_s'] / duration, 1),
                   'processes': settings['processes'], 'cpus': os.cpu_count(),
                   'python': platform.python_version()},
        'tool': 'llm-bench ' + VERSION,
    }
    if settings['rate'] is not None:
        results['schedule_lag_ms'] = stats([lag * 1000.0 for lag in outcome['lags']])
    return results


# ---------------------------------------------------------------- thresholds and baseline

_THRESHOLD_RE = re.compile(r'^\s*([A-Za-z0-9_.]+?)\s*(<=|>=|<|>|=)\s*(.+?)\s*$')
_LIMIT_RE = re.compile(r'^\s*(<=|>=|<|>)?\s*([-+0-9.eE]+)\s*$')


def _higher_is_better(key):
    if key in TOP_LEVEL_METRICS:
        return TOP_LEVEL_METRICS[key]
    metric, _dot, stat = key.partition('.')
    if metric in LATENCY_METRICS and stat in STATS[1:]:
        return False
    raise BenchError('unknown threshold %r: use <metric>.<stat> with metric one of %s and stat one of %s, '
                     'or one of %s' % (key, ', '.join(LATENCY_METRICS), ', '.join(STATS[1:]),
                                       ', '.join(sorted(TOP_LEVEL_METRICS))))


def parse_thresholds(thresholds):
    """A dict {key: limit} or a list of "KEY=VALUE" strings -> list of (key, operator, limit)."""
    items = []
    if isinstance(thresholds, dict):
        items = list(thresholds.items())
    else:
        for text in thresholds or ():
            match = _THRESHOLD_RE.match(str(text))
            if not match:
                raise BenchError('threshold %r is not KEY=VALUE, KEY<=VALUE or KEY>=VALUE' % (text,))
            key, operator, value = match.groups()
            items.append((key, value if operator == '=' else operator + value))
    parsed = []
    for key, value in items:
        higher_better = _higher_is_better(key)
        operator = None
        if isinstance(value, bool):
            raise BenchError('threshold %s must be a number, got %r' % (key, value))
        if isinstance(value, (int, float)):
            limit = float(value)
        else:
            match = _LIMIT_RE.match(str(value))
            if not match:
                raise BenchError('threshold %s must be a number with an optional <=, >=, < or >, got %r'
                                 % (key, value))
            operator = match.group(1)
            try:
                limit = float(match.group(2))
            except ValueError as exc:
                raise BenchError('threshold %s must be a number, got %r' % (key, value)) from exc
        parsed.append((key, operator or ('>=' if higher_better else '<='), limit))
    return parsed


def metric_value(results, key):
    metric, _dot, stat = key.partition('.')
    if stat:
        return (results.get(metric) or {}).get(stat)
    return results.get(metric)


def _unit(key):
    if key.partition('.')[0].endswith('_ms'):
        return ' ms'
    if key == 'requests_per_s':
        return ' req/s'
    if key == 'output_tokens_per_s':
        return ' tok/s'
    return ''


def fmt(value):
    """A figure for people: 812.4, 31.2, 0.0123, 4."""
    if value is None:
        return '-'
    if isinstance(value, int) or float(value).is_integer():
        return '%d' % value
    if abs(value) >= 100:
        return '%.1f' % value
    if abs(value) >= 1:
        return '%.2f' % value
    return '%.3g' % value


_VIOLATION = {'<=': '>', '<': '>=', '>=': '<', '>': '<='}
_HOLDS = {'<=': operator.le, '<': operator.lt, '>=': operator.ge, '>': operator.gt}


def check_thresholds(results, thresholds):
    """Human-readable failures, e.g. "ttft_ms.p95 812.4 ms > 500 ms"; empty when all hold."""
    failures = []
    for key, operator, limit in parse_thresholds(thresholds):
        value = metric_value(results, key)
        unit = _unit(key)
        if value is None:
            failures.append('%s not measured (limit %s %s%s): no %s sample' % (
                key, operator, fmt(limit), unit,
                'streamed' if key.startswith(('ttft', 'itl', 'tpot')) else 'completed'))
        elif not _HOLDS[operator](value, limit):
            failures.append('%s %s%s %s %s%s' % (key, fmt(value), unit, _VIOLATION[operator], fmt(limit), unit))
    return failures


def load_baseline(path):
    """A previous JSON result; BenchError when it cannot be read or is not an llm-bench result."""
    try:
        with open(path, encoding='utf-8') as handle:
            baseline = json.load(handle)
    except (OSError, ValueError) as exc:
        raise BenchError('cannot read the baseline %s: %s' % (path, exc)) from exc
    if not isinstance(baseline, dict) or 'e2e_ms' not in baseline or 'requests_per_s' not in baseline:
        raise BenchError('%s is not an llm-bench result (no e2e_ms / requests_per_s)' % path)
    return baseline


def compare_baseline(results, baseline, tolerance_pct=DEFAULT_TOLERANCE_PCT):
    """(rows, failures, notes): each row {metric, baseline, current, change_pct, verdict}."""
    tolerance = float(tolerance_pct)
    if tolerance < 0:
        raise BenchError('tolerance_pct must be 0 or more, got %s' % tolerance_pct)
    rows, failures = [], []
    keys = ['%s.%s' % (metric, stat) for metric in LATENCY_METRICS for stat, _pct in PERCENTILES]
    for key in keys + list(BASELINE_RATES):
        old, new = metric_value(baseline, key), metric_value(results, key)
        if old is None or new is None:
            continue
        higher_better = key in BASELINE_RATES
        change = (new - old) / old * 100.0 if old else (0.0 if new == old else math.inf)
        worse = -change if higher_better else change
        verdict = 'ok'
        if worse > tolerance and (higher_better or new - old >= BASELINE_MIN_DELTA_MS):
            verdict = 'regression'
            failures.append('%s %s%s vs baseline %s%s (%+.1f %%, tolerance %s %%)' % (
                key, fmt(new), _unit(key), fmt(old), _unit(key), change, fmt(tolerance)))
        elif worse < -tolerance:
            verdict = 'better'
        rows.append({'metric': key, 'baseline': old, 'current': new,
                     'change_pct': None if math.isinf(change) else round(change, 1), 'verdict': verdict})
    notes = []
    old_settings, new_settings = baseline.get('settings') or {}, results.get('settings') or {}
    for key in ('model', 'stream', 'concurrency', 'rate', 'prompt_tokens', 'max_tokens', 'processes'):
        if key in old_settings and old_settings.get(key) != new_settings.get(key):
            notes.append('%s differs from the baseline: %s there, %s now' % (
                key, old_settings.get(key), new_settings.get(key)))
    return rows, failures, notes


# ---------------------------------------------------------------- report

def _align(rows, right_from=1):
    widths = [max(len(str(row[col])) for row in rows) for col in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [str(cell).rjust(widths[col]) if col >= right_from else str(cell).ljust(widths[col])
                 for col, cell in enumerate(row)]
        lines.append('  '.join(cells).rstrip())
    return lines


def render_table(results, threshold_failures=None, comparison=None):
    """Plain-text report lines: settings, totals, latency table, errors, thresholds, baseline."""
    settings = results.get('settings') or {}
    if settings.get('rate'):
        shape = 'rate %s req/s (%s), at most %s in flight' % (
            fmt(settings.get('rate')), settings.get('arrival'), settings.get('concurrency'))
    else:
        shape = 'concurrency %s' % settings.get('concurrency')
    lines = [
        'llm-bench: %s requests to %s, model %s' % (results['requests'], settings.get('url'), settings.get('model')),
        '  %s, %s, prompt ~%s tokens, max_tokens %s, %s process(es)' % (
            shape, 'streamed' if settings.get('stream') else 'not streamed', settings.get('prompt_tokens'),
            settings.get('max_tokens'), settings.get('processes', 1)),
        'completed %d, errors %d (%s %%), unfinished %d in %s s: %s req/s, %s output tok/s (%d tokens)' % (
            results['completed'], results['errors'], fmt(100.0 * results['error_rate']), results['unfinished'],
            fmt(results['duration_s']), fmt(results['requests_per_s']), fmt(results['output_tokens_per_s']),
            results['output_tokens']),
        'client CPU %s s (%s %% of one core)' % (fmt(results['client']['cpu_s']),
                                                 fmt(results['client']['cpu_percent'])),
        '',
    ]
    table = [('latency (ms)',) + STATS]
    for metric in LATENCY_METRICS + ('schedule_lag_ms',):
        if metric in results and results[metric]['count']:
            table.append((metric,) + tuple(fmt(results[metric][stat]) for stat in STATS))
    if len(table) > 1:
        lines.extend(_align(table))
    for kind, count in sorted(results['errors_by_kind'].items()):
        lines.append('error %s: %d' % (kind, count))
    if threshold_failures is not None:
        lines.append('')
        lines.append('thresholds: ' + ('all met' if not threshold_failures else 'MISSED'))
        lines.extend('  missed ' + failure for failure in threshold_failures)
    if comparison is not None:
        rows, _failures, notes = comparison
        lines.append('')
        if rows:
            table = [('baseline', 'before', 'now', 'change %', 'verdict')]
            table.extend((row['metric'], fmt(row['baseline']), fmt(row['current']),
                          '-' if row['change_pct'] is None else '%+.1f' % row['change_pct'], row['verdict'])
                         for row in rows)
            lines.extend(_align(table))
        else:
            lines.append('baseline: no metric in common')
        lines.extend('note: ' + note for note in notes)
    return lines


def failure_summary(results):
    """The figures a failure message ends with."""
    return '%d requests, %d errors, %s req/s, %s output tok/s' % (
        results['requests'], results['errors'], fmt(results['requests_per_s']), fmt(results['output_tokens_per_s']))


def write_json(path, data):
    """Write data as JSON to path through a temporary file in the same directory (mode 0644)."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, tmp = tempfile.mkstemp(prefix='.llm-bench-', suffix='.json', dir=directory)
    try:
        with os.fdopen(handle, 'w', encoding='utf-8') as out:
            json.dump(data, out, indent=2, sort_keys=True)
            out.write('\n')
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_api_key(path):
    """The API key from a file (first line, stripped); BenchError naming the file when unreadable."""
    try:
        with open(path, encoding='utf-8') as handle:
            key = handle.read().strip()
    except OSError as exc:
        raise BenchError('cannot read the API key file %s: %s' % (path, exc.strerror or exc)) from exc
    if not key:
        raise BenchError('the API key file %s is empty' % path)
    return key


def evaluate(results, thresholds=None, baseline=None, tolerance_pct=DEFAULT_TOLERANCE_PCT):
    """Add threshold_failures, baseline (rows, failures, notes) and passed to results; returns it."""
    failures = check_thresholds(results, thresholds) if thresholds else []
    if not results['completed']:
        failures.append('no request completed (%s)' % (
            ', '.join('%s %d' % item for item in sorted(results['errors_by_kind'].items()))
            or '%d unfinished' % results['unfinished']))
    results['thresholds'] = dict((key, '%s%s' % (op, fmt(limit)))
                                 for key, op, limit in parse_thresholds(thresholds or {}))
    results['threshold_failures'] = failures
    baseline_failures = []
    if baseline is not None:
        rows, baseline_failures, notes = compare_baseline(results, baseline, tolerance_pct)
        results['baseline'] = {'rows': rows, 'failures': baseline_failures, 'notes': notes,
                               'tolerance_pct': float(tolerance_pct)}
    results['passed'] = not failures and not baseline_failures
    return results


# ---------------------------------------------------------------- command line

def _parser():
    parser = argparse.ArgumentParser(
        prog='llm-bench', description='Load benchmark of an OpenAI-compatible chat completions endpoint.',
        epilog='Exit codes: 0 all good, 1 thresholds or baseline missed (or no request completed), '
               '2 usage or setup error. The API key may also come from the environment variable %s.'
               % API_KEY_ENV)
    add = parser.add_argument
    add('--url', required=True, help='base URL, with or without /v1 (http://127.0.0.1:8000/v1)')
    add('--model', help='model name (default: the first of GET /v1/models)')
    add('--requests', type=int, default=DEFAULTS['requests'], help='requests to send (default %(default)s)')
    add('--concurrency', type=int, default=DEFAULTS['concurrency'],
        help='workers, each on its own connection; with --rate the most in flight (default %(default)s)')
    add('--rate', type=float, help='open loop: requests per second (default: closed loop)')
    add('--arrival', choices=('poisson', 'constant'), default=DEFAULTS['arrival'],
        help='arrivals with --rate (default %(default)s)')
    add('--stream', dest='stream', action='store_true', default=True, help='stream the answers (default)')
    add('--no-stream', dest='stream', action='store_false', help='whole answers; no TTFT or ITL')
    add('--prompt-tokens', type=int, default=DEFAULTS['prompt_tokens'],
        help='prompt length in words, about one token each (default %(default)s)')
    add('--max-tokens', type=int, default=DEFAULTS['max_tokens'], help='max_tokens (default %(default)s)')
    add('--ignore-eos', action='store_true', help='send "ignore_eos": true (vLLM, llama.cpp): max_tokens every time')
    add('--api-key-file', help='file holding the API key (Authorization: Bearer)')
    add('--ca-file', help='CA bundle to verify the server certificate with')
    add('--insecure', action='store_true', help='do not verify the server certificate')
    add('--timeout', type=float, default=DEFAULTS['timeout_s'], dest='timeout_s',
        help='seconds one request may take (default %(default)s)')
    add('--duration-limit', type=float, default=DEFAULTS['duration_limit_s'], dest='duration_limit_s',
        help='seconds the measured run may take; in-flight requests are then abandoned (default %(default)s)')
    add('--warmup', type=int, default=DEFAULTS['warmup'], help='requests sent first and not measured')
    add('--processes', type=int, default=DEFAULTS['processes'],
        help='client processes sharing the load, for more than one core can send (default %(default)s)')
    add('--seed', type=int, default=DEFAULTS['seed'], help='seed of the prompts and arrivals')
    add('--threshold', action='append', default=[], metavar='KEY=VALUE',
        help='e.g. ttft_ms.p95=500, e2e_ms.p99<=2000, error_rate=0, output_tokens_per_s>=50; repeat')
    add('--baseline', help='a previous --json result to compare with')
    add('--tolerance-pct', type=float, default=DEFAULT_TOLERANCE_PCT,
        help='regression tolerance against the baseline, in per cent (default %(default)s)')
    add('--json', dest='json_out', metavar='OUT', help='write the results as JSON (- for stdout)')
    add('--quiet', action='store_true', help='print only what failed')
    return parser


SETTING_KEYS = ('model', 'requests', 'concurrency', 'rate', 'arrival', 'stream', 'prompt_tokens', 'max_tokens',
                'timeout_s', 'duration_limit_s', 'warmup', 'processes', 'seed', 'ignore_eos', 'ca_file', 'insecure')


def main(argv=None):
    args = _parser().parse_args(argv)
    report = sys.stderr if args.json_out == '-' else sys.stdout
    try:
        api_key = read_api_key(args.api_key_file) if args.api_key_file else os.environ.get(API_KEY_ENV) or None
        thresholds = list(args.threshold)
        parse_thresholds(thresholds)
        baseline = load_baseline(args.baseline) if args.baseline else None
        settings = dict((key, getattr(args, key)) for key in SETTING_KEYS)
        results = run_benchmark(args.url, settings, api_key)
        evaluate(results, thresholds, baseline, args.tolerance_pct)
    except BenchError as exc:
        sys.stderr.write('llm-bench: %s\n' % exc)
        return 2
    except KeyboardInterrupt:
        sys.stderr.write('llm-bench: interrupted\n')
        return 130
    failures = results['threshold_failures'] + (results.get('baseline') or {}).get('failures', [])
    if not args.quiet:
        comparison = None
        if baseline is not None:
            comparison = (results['baseline']['rows'], results['baseline']['failures'], results['baseline']['notes'])
        report.write('\n'.join(render_table(results, results['threshold_failures'] if thresholds else None,
                                            comparison)) + '\n')
    if args.json_out == '-':
        sys.stdout.write(json.dumps(results, indent=2, sort_keys=True) + '\n')
    elif args.json_out:
        try:
            write_json(args.json_out, results)
        except OSError as exc:
            sys.stderr.write('llm-bench: cannot write %s: %s\n' % (args.json_out, exc))
            return 2
    if failures:
        sys.stderr.write('llm-bench: FAILED: %s (%s)\n' % ('; '.join(failures), failure_summary(results)))
        return 1
    return 0


# ---------------------------------------------------------------- Ansible module

ARGUMENT_SPEC = {
    'url': {'type': 'str', 'required': True},
    'model': {'type': 'str'},
    'requests': {'type': 'int', 'default': DEFAULTS['requests']},
    'concurrency': {'type': 'int', 'default': DEFAULTS['concurrency']},
    'rate': {'type': 'float'},
    'arrival': {'type': 'str', 'default': DEFAULTS['arrival'], 'choices': ['poisson', 'constant']},
    'stream': {'type': 'bool', 'default': DEFAULTS['stream']},
    'prompt_tokens': {'type': 'int', 'default': DEFAULTS['prompt_tokens'], 'no_log': False},
    'max_tokens': {'type': 'int', 'default': DEFAULTS['max_tokens'], 'no_log': False},
    'ignore_eos': {'type': 'bool', 'default': False},
    'api_key': {'type': 'str', 'no_log': True},
    'api_key_file': {'type': 'path'},
    'ca_file': {'type': 'path'},
    'validate_certs': {'type': 'bool', 'default': True},
    'timeout': {'type': 'float', 'default': DEFAULTS['timeout_s']},
    'duration_limit': {'type': 'float', 'default': DEFAULTS['duration_limit_s']},
    'warmup': {'type': 'int', 'default': DEFAULTS['warmup']},
    'processes': {'type': 'int', 'default': DEFAULTS['processes']},
    'seed': {'type': 'int', 'default': DEFAULTS['seed']},
    'thresholds': {'type': 'dict', 'default': {}},
    'baseline': {'type': 'path'},
    'tolerance_pct': {'type': 'float', 'default': DEFAULT_TOLERANCE_PCT},
    'output': {'type': 'path'},
    'fail_on_threshold': {'type': 'bool', 'default': True},
}
MUTUALLY_EXCLUSIVE = [('api_key', 'api_key_file')]


def benchmark_from_params(params, check_mode=False):
    """The module's work: run, evaluate, write the output file; a dict for exit_json (failed + msg on failure)."""
    try:
        api_key = params.get('api_key') or (read_api_key(params['api_key_file'])
                                            if params.get('api_key_file') else None)
        thresholds = params.get('thresholds') or {}
        parse_thresholds(thresholds)
        baseline = load_baseline(params['baseline']) if params.get('baseline') else None
        settings = {'model': params.get('model'), 'requests': params['requests'],
                    'concurrency': params['concurrency'], 'rate': params.get('rate'), 'arrival': params['arrival'],
                    'stream': params['stream'], 'prompt_tokens': params['prompt_tokens'],
                    'max_tokens': params['max_tokens'], 'ignore_eos': params['ignore_eos'],
                    'timeout_s': params['timeout'], 'duration_limit_s': params['duration_limit'],
                    'warmup': params['warmup'], 'processes': params['processes'], 'seed': params['seed'],
                    'ca_file': params.get('ca_file'), 'insecure': not params['validate_certs']}
        results = run_benchmark(params['url'], settings, api_key)
        evaluate(results, thresholds, baseline, params['tolerance_pct'])
    except BenchError as exc:
        return {'failed': True, 'changed': False, 'msg': str(exc)}
    baseline_info = results.get('baseline')
    comparison = None
    if baseline_info is not None:
        comparison = (baseline_info['rows'], baseline_info['failures'], baseline_info['notes'])
    outcome = {'changed': False, 'results': results, 'threshold_failures': results['threshold_failures'],
               'baseline_failures': baseline_info['failures'] if baseline_info else [],
               'passed': results['passed'],
               'table': render_table(results, results['threshold_failures'] if thresholds else None, comparison)}
    if params.get('output') and not check_mode:
        try:
            write_json(params['output'], results)
        except OSError as exc:
            return dict(outcome, failed=True, msg='cannot write the results to %s: %s' % (params['output'], exc))
    if not results['passed'] and params['fail_on_threshold']:
        parts = []
        if outcome['threshold_failures']:
            parts.append('Benchmark missed its thresholds: ' + '; '.join(outcome['threshold_failures']))
        if outcome['baseline_failures']:
            parts.append('Benchmark regressed against the baseline: ' + '; '.join(outcome['baseline_failures']))
        outcome.update(failed=True, msg='%s (%s)' % ('. '.join(parts), failure_summary(results)))
    return outcome


if __name__ == '__main__':
    sys.exit(main())  # pylint: disable=ansible-bad-function
