# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ceiling of the benchmark client (llm-bench) itself, next to wrk, against a zero-delay nginx.

The backend is Debian's nginx started by hand on 127.0.0.1 with a generated
configuration whose locations answer at once with canned bodies:
  /v1/chat/completions          a chat.completion JSON (4 tokens, with usage)
  /stream/v1/chat/completions   an SSE stream: role delta, 16 content events,
                                a usage event and [DONE] (text/event-stream,
                                Content-Length-delimited, one write)
so the only work per request is the client's. llm-bench then runs at
concurrency 1, 8 and 32, not streamed and streamed, for a bounded count of
requests (and with --processes 2 where one core may be its limit), and wrk
(one thread, then two) with a small Lua script that POSTs the same kind of JSON
body over the same number of connections for a fixed time.

Reported per run: requests/s, p50 and p99 latency, and the client's CPU in per
cent of one core (llm-bench: its own getrusage over the measured run; wrk: the
child's getrusage over its run). nginx runs with one worker, so on a 2-CPU
machine the server has one core and the client the other.

  python3 benchmarks/loadbench_ceiling.py [--requests 10000] [--wrk-seconds 5] [--quick]

Needs nginx and wrk (Debian packages `nginx`, `wrk`); run as root, it installs
them with apt-get when missing. Prints a Markdown table for docs/benchmarks.md
and writes build/bench-reports/loadbench-ceiling.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from _harness import ROOT, machine_line

LLM_BENCH = ROOT / 'scripts' / 'llm-bench'
REPORT = ROOT / 'build' / 'bench-reports' / 'loadbench-ceiling.json'
MODEL = 'ceiling-model'

_CHAT = {'id': 'chatcmpl-ceiling', 'object': 'chat.completion', 'created': 0, 'model': MODEL,
         'choices': [{'index': 0, 'message': {'role': 'assistant', 'content': ' a b c d'},
                      'logprobs': None, 'finish_reason': 'length'}],
         'usage': {'prompt_tokens': 16, 'completion_tokens': 4, 'total_tokens': 20}}


def _sse_body(tokens=16):
    def event(choices, usage=None):
        return 'data: %s\n\n' % json.dumps({'id': 'chatcmpl-ceiling', 'object': 'chat.completion.chunk',
                                            'created': 0, 'model': MODEL, 'choices': choices, 'usage': usage},
                                           separators=(',', ':'))
    parts = [event([{'index': 0, 'delta': {'role': 'assistant', 'content': ''}, 'finish_reason': None}])]
    parts += [event([{'index': 0, 'delta': {'content': ' t%d' % index},
                      'finish_reason': 'length' if index == tokens - 1 else None}]) for index in range(tokens)]
    parts.append(event([], {'prompt_tokens': 16, 'completion_tokens': tokens, 'total_tokens': 16 + tokens}))
    parts.append('data: [DONE]\n\n')
    return ''.join(parts)


def _nginx_string(text):
    """A single-quoted nginx string: escape backslashes, quotes and newlines ($ never occurs here)."""
    assert '$' not in text
    return "'%s'" % text.replace('\\', '\\\\').replace("'", "\\'").replace('\n', '\\n')


def nginx_config(workdir, port):
    models = {'object': 'list', 'data': [{'id': MODEL, 'object': 'model'}]}
    return '\n'.join([
        'worker_processes 1;',
        'error_log %s/error.log warn;' % workdir,
        'pid %s/nginx.pid;' % workdir,
        'events { worker_connections 1024; }',
        'http {',
        '  access_log off;',
        '  client_body_temp_path %s/body;' % workdir,
        '  keepalive_requests 10000000;',
        '  server {',
        '    listen 127.0.0.1:%d;' % port,
        '    location = /v1/models { default_type application/json; return 200 %s; }'
        % _nginx_string(json.dumps(models)),
        '    location = /v1/chat/completions { default_type application/json; return 200 %s; }'
        % _nginx_string(json.dumps(_CHAT, separators=(',', ':'))),
        '    location = /stream/v1/chat/completions { default_type text/event-stream; return 200 %s; }'
        % _nginx_string(_sse_body()),
        '  }',
        '}',
        ''])


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def ensure_tools():
    missing = [tool for tool in ('nginx', 'wrk') if not shutil.which(tool) and not os.path.exists('/usr/sbin/' + tool)]
    if not missing:
        return
    if os.geteuid() != 0:
        sys.exit('needs %s (Debian packages nginx, wrk); run as root to install them' % ' and '.join(missing))
    env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
    subprocess.run(['apt-get', 'update', '-qq'], check=True, env=env)
    subprocess.run(['apt-get', 'install', '-y', '-qq', '--no-install-recommends', 'nginx', 'wrk'], check=True,
                   env=env)


class Nginx:
    """nginx in the foreground on a free port of 127.0.0.1, in a temporary prefix."""

    def __init__(self):
        self.workdir = tempfile.mkdtemp(prefix='llm-bench-ceiling-')
        self.port = _free_port()
        self.proc = None

    def __enter__(self):
        conf = os.path.join(self.workdir, 'nginx.conf')
        with open(conf, 'w', encoding='utf-8') as handle:
            handle.write(nginx_config(self.workdir, self.port))
        binary = shutil.which('nginx') or '/usr/sbin/nginx'
        self.proc = subprocess.Popen([binary, '-p', self.workdir, '-c', conf, '-g', 'daemon off;'],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit('nginx did not start: %s' % self.proc.stderr.read().decode(errors='replace'))
            try:
                socket.create_connection(('127.0.0.1', self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        sys.exit('nginx did not listen on 127.0.0.1:%d within 10 s' % self.port)

    def __exit__(self, *exc):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def url(self, stream):
        return 'http://127.0.0.1:%d%s' % (self.port, '/stream' if stream else '')


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_llm_bench(url, stream, concurrency, requests, processes):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, 'result.json')
        cmd = [str(LLM_BENCH), '--url', url, '--model', MODEL, '--requests', str(requests),
               '--concurrency', str(concurrency), '--processes', str(processes), '--prompt-tokens', '16',
               '--max-tokens', '16', '--duration-limit', '60', '--timeout', '10', '--quiet', '--json', out,
               '--stream' if stream else '--no-stream']
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=120,
                              env=dict(os.environ, PYTHON=sys.executable))
        if proc.returncode != 0:
            sys.exit('llm-bench failed (%d): %s' % (proc.returncode, proc.stderr))
        with open(out, encoding='utf-8') as handle:
            results = json.load(handle)
    if results['errors'] or results['completed'] != requests:
        sys.exit('llm-bench had errors against the zero-delay backend: %s' % results['errors_by_kind'])
    return {'tool': 'llm-bench' + (' --processes %d' % processes if processes > 1 else ''),
            'mode': 'stream' if stream else 'no-stream', 'concurrency': concurrency,
            'requests': results['completed'], 'seconds': results['duration_s'],
            'requests_per_s': results['requests_per_s'], 'p50_ms': results['e2e_ms']['p50'],
            'p99_ms': results['e2e_ms']['p99'], 'client_cpu_percent': results['client']['cpu_percent']}


_WRK_LUA = '''wrk.method = "POST"
wrk.body = %s
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Accept"] = %s
'''
_UNITS = {'us': 0.001, 'ms': 1.0, 's': 1000.0}


def run_wrk(url, stream, concurrency, seconds, threads, workdir):
    body = json.dumps({'model': MODEL, 'messages': [{'role': 'user', 'content': 'the time people year ' * 4}],
                       'max_tokens': 16, 'temperature': 0, 'stream': stream}, separators=(',', ':'))
    script = os.path.join(workdir, 'post.lua')
    with open(script, 'w', encoding='utf-8') as handle:
        handle.write(_WRK_LUA % (json.dumps(body), '"text/event-stream"' if stream else '"application/json"'))
    threads = min(threads, concurrency)
    cpu = _children_cpu()
    start = time.monotonic()
    proc = subprocess.run(['wrk', '-t%d' % threads, '-c%d' % concurrency, '-d%ds' % seconds, '--latency',
                           '-s', script, url + '/v1/chat/completions'],
                          capture_output=True, text=True, check=False, timeout=seconds + 60)
    elapsed = time.monotonic() - start
    cpu = _children_cpu() - cpu
    if proc.returncode != 0:
        sys.exit('wrk failed: %s' % proc.stderr)
    out = proc.stdout
    if 'Non-2xx' in out or 'Socket errors' in out:
        sys.exit('wrk saw errors against the zero-delay backend:\n' + out)
    rate = float(re.search(r'Requests/sec:\s+([0-9.]+)', out).group(1))
    latency = dict((pct, float(value) * _UNITS[unit])
                   for pct, value, unit in re.findall(r'^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$', out, re.M))
    total = int(re.search(r'(\d+) requests in', out).group(1))
    return {'tool': 'wrk -t%d' % threads, 'mode': 'stream' if stream else 'no-stream', 'concurrency': concurrency,
            'requests': total, 'seconds': round(elapsed, 3), 'requests_per_s': rate,
            'p50_ms': latency.get('50'), 'p99_ms': latency.get('99'),
            'client_cpu_percent': round(100.0 * cpu / elapsed, 1)}


def print_rows(rows):
    print('| tool | mode | concurrency | req/s | p50 ms | p99 ms | client CPU % |')
    print('| --- | --- | ---: | ---: | ---: | ---: | ---: |')
    for row in rows:
        print('| %s | %s | %d | %.0f | %.3f | %.3f | %.0f |' % (
            row['tool'], row['mode'], row['concurrency'], row['requests_per_s'], row['p50_ms'], row['p99_ms'],
            row['client_cpu_percent']))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--requests', type=int, default=10000, help='llm-bench requests per run (default 10000)')
    parser.add_argument('--wrk-seconds', type=int, default=5, help='seconds per wrk run (default 5)')
    parser.add_argument('--concurrency', type=int, action='append', help='default: 1, 8 and 32')
    parser.add_argument('--quick', action='store_true', help='2000 requests and 2 s of wrk per run')
    opts = parser.parse_args()
    if opts.quick:
        opts.requests, opts.wrk_seconds = 2000, 2
    levels = opts.concurrency or [1, 8, 32]
    ensure_tools()
    rows = []
    load_before = os.getloadavg()
    with Nginx() as nginx:
        for stream in (False, True):
            url = nginx.url(stream)
            for concurrency in levels:
                requests = opts.requests if concurrency > 1 else max(1, opts.requests // 2)
                rows.append(run_llm_bench(url, stream, concurrency, requests, 1))
                if concurrency > 1:
                    rows.append(run_llm_bench(url, stream, concurrency, requests, 2))
                rows.append(run_wrk(url, stream, concurrency, opts.wrk_seconds, 1, nginx.workdir))
                if concurrency > 1:
                    rows.append(run_wrk(url, stream, concurrency, opts.wrk_seconds, 2, nginx.workdir))
    load_after = os.getloadavg()
    print(machine_line())
    print('Load average before %.2f, after %.2f (other work shares these CPUs); nginx: 1 worker, zero delay.'
          % (load_before[0], load_after[0]))
    print()
    print_rows(rows)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({'machine': machine_line(), 'load_before': load_before[0],
                                  'load_after': load_after[0], 'rows': rows}, indent=2) + '\n')
    print()
    print('JSON: %s' % REPORT.relative_to(ROOT))


if __name__ == '__main__':
    main()
