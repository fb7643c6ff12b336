# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Front door benchmark: latency the nginx proxy adds, and llm-bench's ceiling next to wrk.

Everything runs inside one disposable systemd container (podman, from
$LLM_SERVER_TEST_IMAGE), so the client, the proxy and the backend share the
container's loopback:

  backend  a zero-delay OpenAI-compatible answer from nginx itself: a server
           block on 127.0.0.1:18001 (dropped into /etc/nginx/conf.d/ after
           the role ran) that returns a canned chat.completion JSON, or a
           canned SSE stream when the request accepts text/event-stream, plus
           GET /health and /v1/models;
  proxy    the real nginx role (playbooks/proxy.yml) with nginx_backends
           [{name: zero, port: 18001}], one generated API key and
           nginx_tls_mode selfsigned, then again with nginx_tls_mode none;
  client   llm-bench (plugins/module_utils/_loadbench*.py, copied in as a
           package and run by the container's python3) and wrk (Debian's
           package).

Added latency: llm-bench at concurrency 1, not streamed and streamed, a
bounded number of requests after a warm-up, (a) straight to the backend and
(b) through the proxy over HTTPS with the key, the self-signed certificate as
CA and the proxy's server name resolving to 127.0.0.1; a and b alternate,
--repeats times, and the added latency is the median over the repeats of the
per-pair difference b - a at p50, p95 and p99. The same again with the plain
HTTP proxy (nginx_tls_mode none) shows the share of TLS.

Client ceiling: against the backend directly, llm-bench at concurrency 8 and
32 (one process, then --processes 2) and wrk (-t1, then -t2) with the Lua
script of benchmarks/loadbench_ceiling.py POSTing the same kind of body over
the same number of connections for --wrk-seconds; --ceiling-repeats rounds,
medians reported. Besides requests/s, each tool's requests per second of its
own CPU time: on a machine shared with other work a tool gets only part of a
core, and that figure says what one whole core of it would send.

  python3 benchmarks/front_door.py [--requests 3000] [--warmup 100] [--repeats 3]
      [--ceiling-requests 20000] [--ceiling-repeats 3] [--wrk-seconds 5] [--quick]

Prints Markdown tables and writes build/bench-reports/front-door.json; the
container is removed at the end (KEEP=1 keeps it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time

from _harness import ROOT, machine_line
from loadbench_ceiling import _CHAT, _UNITS, _WRK_LUA, MODEL, _nginx_string, _sse_body

CONTAINER = 'llm-bench-front'
# The name clients use for the proxy; the container resolves it to 127.0.0.1.
SERVER_NAME = 'front-door.bench.test'
BACKEND_PORT = 18001
BACKEND = 'http://127.0.0.1:%d' % BACKEND_PORT
BACKEND_CONF = '/etc/nginx/conf.d/zz-bench-zero-backend.conf'
# Paths inside the container. llm-bench's files import each other relatively: a package, run with -m.
BENCH_PACKAGE = '/root/llm_bench'
BENCH = ['env', 'PYTHONPATH=/root', 'python3', '-m', 'llm_bench._loadbench']
KEY_FILE = '/root/bench-api-key'
CA_FILE = '/etc/llm-server/tls/proxy.crt'
WRK_SCRIPT = '/root/post.lua'
ACCESS_LOG = '/var/log/nginx/llm-access.log'
REPORT = ROOT / 'build' / 'bench-reports' / 'front-door.json'
PERCENTILES = ('p50', 'p95', 'p99')

# wrk under python3 in the container: its output and the CPU it used.
_WRK_RUNNER = '''import json, resource, subprocess, sys, time
start = time.monotonic()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=False, timeout=120)
elapsed = time.monotonic() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": proc.returncode, "out": proc.stdout, "err": proc.stderr, "elapsed": elapsed,
                  "cpu": usage.ru_utime + usage.ru_stime}))
'''

# Waits until a URL in the container answers 200 (the image has no curl);
# a second argument is the CA file for HTTPS.
_PROBE = '''import ssl, sys, time, urllib.request
context = ssl.create_default_context(cafile=sys.argv[2]) if len(sys.argv) > 2 else None
deadline = time.monotonic() + 20
while True:
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=2, context=context) as answer:
            if answer.status == 200:
                break
    except OSError:
        pass
    if time.monotonic() > deadline:
        sys.exit("no answer from " + sys.argv[1])
    time.sleep(0.2)
'''

# Counts the requests of the proxy's access log that the bench key sent and
# the zero-delay backend answered: proof that the proxied runs took that path.
_COUNT_PROXIED = '''import json, sys
count = 0
with open(sys.argv[1], encoding="utf-8") as log:
    for line in log:
        entry = json.loads(line)
        count += (entry["uri"] == "/v1/chat/completions" and entry["status"] == 200 and entry["key"] == "bench"
                  and entry["upstream_addr"] == sys.argv[2] and entry["upstream_status"] == "200")
print(count)
'''


def backend_conf():
    """The zero-delay backend: nginx answers at once with canned bodies (no access log, as an engine has none)."""
    models = {'object': 'list', 'data': [{'id': MODEL, 'object': 'model', 'created': 0, 'owned_by': 'bench'}]}
    return '\n'.join([
        '# Zero-delay backend of benchmarks/front_door.py: canned answers, no work.',
        'server {',
        '    listen 127.0.0.1:%d;' % BACKEND_PORT,
        '    access_log off;',
        '    location = /health { default_type application/json; return 200 \'{"status":"ok"}\'; }',
        '    location = /v1/models { default_type application/json; return 200 %s; }'
        % _nginx_string(json.dumps(models)),
        '    location = /v1/chat/completions {',
        '        if ($http_accept = "text/event-stream") { rewrite ^ /_bench_stream last; }',
        '        default_type application/json;',
        '        return 200 %s;' % _nginx_string(json.dumps(_CHAT, separators=(',', ':'))),
        '    }',
        '    location = /_bench_stream { internal; default_type text/event-stream; return 200 %s; }'
        % _nginx_string(_sse_body()),
        '}',
        ''])


def podman_exec(argv, stdin=None, timeout=180):
    """A command in the container; its stdout, or exit with what it said."""
    proc = subprocess.run(['podman', 'exec', '-i', CONTAINER, *argv], input=stdin, capture_output=True, text=True,
                          check=False, timeout=timeout)
    if proc.returncode != 0:
        sys.exit('in the container, %s failed (%d): %s%s' % (argv[0], proc.returncode, proc.stdout[-2000:],
                                                             proc.stderr[-2000:]))
    return proc.stdout


def write_in_container(path, text, mode='0644'):
    """A file in the container from stdin: contents never appear on a command line."""
    podman_exec(['sh', '-c', 'umask 077 && cat > "$1" && chmod %s "$1"' % mode, 'write', path], stdin=text)


@contextlib.contextmanager
def bench_container(image, keep):
    """The disposable systemd container, booted; removed afterwards unless keep."""
    subprocess.run(['podman', 'rm', '-f', CONTAINER], capture_output=True, check=False)
    subprocess.run(['podman', 'run', '-d', '--name', CONTAINER, '--hostname', CONTAINER, '--privileged',
                    '--ulimit', 'nofile=1024:1024', '--ulimit', 'nproc=4096:4096',
                    '--add-host', '%s:127.0.0.1' % SERVER_NAME, image, '/sbin/init'],
                   check=True, capture_output=True)
    try:
        # Right after the start, systemctl may find no systemd to ask yet: ask again.
        deadline = time.monotonic() + 180
        state = ''
        while state not in ('running', 'degraded') and time.monotonic() < deadline:
            state = subprocess.run(['podman', 'exec', CONTAINER, 'systemctl', 'is-system-running', '--wait'],
                                   capture_output=True, text=True, check=False, timeout=180).stdout.strip()
            if state not in ('running', 'degraded'):
                time.sleep(0.5)
        if state not in ('running', 'degraded'):
            sys.exit('systemd in the container did not come up: %s' % state)
        yield
    finally:
        if keep:
            print('KEEP=1: the container %s stays (podman rm -f %s)' % (CONTAINER, CONTAINER), file=sys.stderr)
        else:
            subprocess.run(['podman', 'rm', '-f', CONTAINER], capture_output=True, check=False)


def apply_proxy_role(workdir, api_key, tls_mode):
    """playbooks/proxy.yml against the container; the key goes in a 0600 vars file, not on the command line."""
    inventory = os.path.join(workdir, 'inventory.json')
    with open(inventory, 'w', encoding='utf-8') as handle:
        json.dump({'all': {'children': {'llamacpp_servers': {'hosts': {CONTAINER: {
            'ansible_connection': 'containers.podman.podman', 'ansible_host': CONTAINER}}}}}}, handle)
    variables = os.path.join(workdir, 'proxy-vars.json')
    with open(os.open(variables, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 'w', encoding='utf-8') as handle:
        json.dump({'nginx_backends': [{'name': 'zero', 'port': BACKEND_PORT, 'model': MODEL}],
                   'nginx_server_name': SERVER_NAME, 'nginx_tls_mode': tls_mode,
                   'nginx_api_keys': [{'name': 'bench', 'key': api_key}]}, handle)
    # Facts in memory only: the checkout's fact cache may hold an older container of this name.
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / 'ansible.cfg'), ANSIBLE_CACHE_PLUGIN='memory')
    start = time.monotonic()
    proc = subprocess.run(['ansible-playbook', '-i', inventory, 'playbooks/proxy.yml', '-e', '@' + variables],
                          cwd=ROOT, capture_output=True, text=True, check=False, env=env, timeout=900)
    if proc.returncode != 0:
        sys.exit('playbooks/proxy.yml (nginx_tls_mode %s) failed:\n%s' % (tls_mode, proc.stdout[-4000:]))
    return round(time.monotonic() - start, 1)


def start_backend():
    """Drop the zero-delay server block next to the role's and reload nginx; wait until it answers."""
    write_in_container(BACKEND_CONF, backend_conf())
    podman_exec(['nginx', '-t', '-q'])
    podman_exec(['systemctl', 'reload', 'nginx'])
    podman_exec(['python3', '-', BACKEND + '/health'], stdin=_PROBE)


def copy_llm_bench():
    """llm-bench's files (plugins/module_utils/_loadbench*.py) into the container as the package llm_bench."""
    podman_exec(['mkdir', '-p', BENCH_PACKAGE])
    write_in_container(BENCH_PACKAGE + '/__init__.py', '')
    for path in sorted((ROOT / 'plugins' / 'module_utils').glob('_loadbench*.py')):
        subprocess.run(['podman', 'cp', str(path), '%s:%s/%s' % (CONTAINER, BENCH_PACKAGE, path.name)],
                       check=True, capture_output=True)


def llm_bench(url, stream, concurrency, requests, warmup, processes=1, proxy=False):
    """llm-bench in the container; its results, after checking that every request succeeded."""
    argv = [*BENCH, '--url', url, '--model', MODEL, '--requests', str(requests),
            '--concurrency', str(concurrency), '--processes', str(processes), '--warmup', str(warmup),
            '--prompt-tokens', '16', '--max-tokens', '16', '--duration-limit', '60', '--timeout', '10',
            '--stream' if stream else '--no-stream', '--quiet', '--json', '-']
    if proxy:
        argv += ['--api-key-file', KEY_FILE]
        if url.startswith('https:'):
            argv += ['--ca-file', CA_FILE]
    logged = proxied_count() if proxy else 0
    results = json.loads(podman_exec(argv, timeout=150))
    if results['errors'] or results['completed'] != requests:
        sys.exit('llm-bench had errors against %s: %s (%d of %d completed)'
                 % (url, results['errors_by_kind'], results['completed'], requests))
    if proxy and proxied_count() - logged != requests + warmup:
        sys.exit('the access log of the proxy does not show the %d requests of the run (key bench, answered by %s)'
                 % (requests + warmup, BACKEND))
    return results


def proxied_count():
    return int(podman_exec(['python3', '-', ACCESS_LOG, '127.0.0.1:%d' % BACKEND_PORT], stdin=_COUNT_PROXIED))


def latency_row(results, variant, stream, repeat, target):
    row = {'front_door': variant, 'mode': 'stream' if stream else 'no-stream', 'repeat': repeat, 'target': target,
           'requests': results['completed'], 'requests_per_s': results['requests_per_s'],
           'client_cpu_percent': results['client']['cpu_percent']}
    row.update(('e2e_%s_ms' % pct, results['e2e_ms'][pct]) for pct in PERCENTILES)
    if stream:
        row['ttft_p50_ms'] = results['ttft_ms']['p50']
    return row


def measure_latency(variant, proxy_url, opts):
    """Alternate direct (a) and proxied (b) runs at concurrency 1; the raw rows."""
    rows = []
    for stream in (False, True):
        for repeat in range(opts.repeats):
            direct = llm_bench(BACKEND, stream, 1, opts.requests, opts.warmup)
            rows.append(latency_row(direct, variant, stream, repeat, 'direct'))
            proxied = llm_bench(proxy_url, stream, 1, opts.requests, opts.warmup, proxy=True)
            rows.append(latency_row(proxied, variant, stream, repeat, 'proxy'))
    return rows


def summarize_latency(rows):
    """Per front door and mode: medians over the repeats of direct, proxied and their paired difference."""
    summary = []
    for variant in dict.fromkeys(row['front_door'] for row in rows):
        for mode in ('no-stream', 'stream'):
            pairs = {}
            for row in rows:
                if row['front_door'] == variant and row['mode'] == mode:
                    pairs.setdefault(row['repeat'], {})[row['target']] = row
            if not pairs:
                continue
            entry = {'front_door': variant, 'mode': mode, 'repeats': len(pairs)}
            for pct in PERCENTILES:
                key = 'e2e_%s_ms' % pct
                entry['direct_%s_ms' % pct] = round(statistics.median(p['direct'][key] for p in pairs.values()), 3)
                entry['proxy_%s_ms' % pct] = round(statistics.median(p['proxy'][key] for p in pairs.values()), 3)
                entry['added_%s_ms' % pct] = round(statistics.median(
                    p['proxy'][key] - p['direct'][key] for p in pairs.values()), 3)
            summary.append(entry)
    return summary


def print_latency(summary, opts):
    print('Added latency at concurrency 1, %d requests after %d warm-up, median of %d alternating pairs '
          '(ms; added = proxied - direct per pair):' % (opts.requests, opts.warmup, opts.repeats))
    print()
    print('| front door | mode | direct p50 / p95 / p99 | proxied p50 / p95 / p99 | added p50 | added p95 | added p99 |')
    print('| --- | --- | ---: | ---: | ---: | ---: | ---: |')
    for entry in summary:
        print('| %s | %s | %s | %s | %.3f | %.3f | %.3f |' % (
            entry['front_door'], entry['mode'],
            ' / '.join('%.3f' % entry['direct_%s_ms' % pct] for pct in PERCENTILES),
            ' / '.join('%.3f' % entry['proxy_%s_ms' % pct] for pct in PERCENTILES),
            entry['added_p50_ms'], entry['added_p95_ms'], entry['added_p99_ms']))


def bench_ceiling_row(results, concurrency, processes):
    return {'tool': 'llm-bench' + (' --processes %d' % processes if processes > 1 else ''), 'mode': 'no-stream',
            'concurrency': concurrency, 'requests': results['completed'], 'seconds': results['duration_s'],
            'requests_per_s': results['requests_per_s'], 'p50_ms': results['e2e_ms']['p50'],
            'p99_ms': results['e2e_ms']['p99'], 'client_cpu_percent': results['client']['cpu_percent']}


def run_wrk(concurrency, seconds, threads):
    """wrk in the container against the backend; the same row shape as loadbench_ceiling's."""
    threads = min(threads, concurrency)
    report = json.loads(podman_exec(['python3', '-', 'wrk', '-t%d' % threads, '-c%d' % concurrency,
                                     '-d%ds' % seconds, '--latency', '-s', WRK_SCRIPT,
                                     BACKEND + '/v1/chat/completions'], stdin=_WRK_RUNNER, timeout=seconds + 150))
    out = report['out']
    if report['rc'] != 0 or 'Non-2xx' in out or 'Socket errors' in out:
        sys.exit('wrk failed or saw errors against the zero-delay backend:\n%s%s' % (out, report['err']))
    latency = dict((pct, float(value) * _UNITS[unit])
                   for pct, value, unit in re.findall(r'^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$', out, re.M))
    return {'tool': 'wrk -t%d' % threads, 'mode': 'no-stream', 'concurrency': concurrency,
            'requests': int(re.search(r'(\d+) requests in', out).group(1)), 'seconds': round(report['elapsed'], 3),
            'requests_per_s': float(re.search(r'Requests/sec:\s+([0-9.]+)', out).group(1)),
            'p50_ms': latency['50'], 'p99_ms': latency['99'],
            'client_cpu_percent': round(100.0 * report['cpu'] / report['elapsed'], 1)}


def measure_ceiling(opts):
    """llm-bench (1 and 2 processes) and wrk (1 and 2 threads) at the same concurrency against the backend."""
    body = json.dumps({'model': MODEL, 'messages': [{'role': 'user', 'content': 'the time people year ' * 4}],
                       'max_tokens': 16, 'temperature': 0, 'stream': False}, separators=(',', ':'))
    write_in_container(WRK_SCRIPT, _WRK_LUA % (json.dumps(body), '"application/json"'))
    rows = []
    # Rounds, so that a burst of other work on the shared CPUs hits one run of each, not all runs of one tool.
    for repeat in range(opts.ceiling_repeats):
        for concurrency in (8, 32):
            for processes in (1, 2):
                results = llm_bench(BACKEND, False, concurrency, opts.ceiling_requests, 10 * concurrency, processes)
                rows.append(dict(bench_ceiling_row(results, concurrency, processes), repeat=repeat))
            for threads in (1, 2):
                rows.append(dict(run_wrk(concurrency, opts.wrk_seconds, threads), repeat=repeat))
    return rows


def summarize_ceiling(rows):
    """Per tool and concurrency, the median of each figure over the rounds, and requests per client CPU-second."""
    summary = []
    for tool, concurrency in dict.fromkeys((row['tool'], row['concurrency']) for row in rows):
        runs = [row for row in rows if row['tool'] == tool and row['concurrency'] == concurrency]
        entry = {'tool': tool, 'mode': 'no-stream', 'concurrency': concurrency, 'runs': len(runs)}
        for key in ('requests_per_s', 'p50_ms', 'p99_ms', 'client_cpu_percent'):
            entry[key] = round(statistics.median(row[key] for row in runs), 3)
        # What the client would send with one whole core: the figure a loaded machine distorts least.
        entry['requests_per_cpu_s'] = round(statistics.median(
            row['requests_per_s'] * 100.0 / row['client_cpu_percent'] for row in runs if row['client_cpu_percent']))
        summary.append(entry)
    return summary


def print_ceiling(summary):
    print('| tool | concurrency | req/s | p50 ms | p99 ms | client CPU % | req per client CPU-second |')
    print('| --- | ---: | ---: | ---: | ---: | ---: | ---: |')
    for entry in summary:
        print('| %s | %d | %.0f | %.3f | %.3f | %.0f | %.0f |' % (
            entry['tool'], entry['concurrency'], entry['requests_per_s'], entry['p50_ms'], entry['p99_ms'],
            entry['client_cpu_percent'], entry['requests_per_cpu_s']))


def container_facts():
    script = ('import json, os, platform, subprocess\n'
              'nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()\n'
              'wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True)\n'
              'print(json.dumps({"cpus": os.cpu_count(), "python": platform.python_version(), "nginx": nginx,\n'
              '                  "wrk": (wrk.stdout + wrk.stderr).splitlines()[0]}))\n')
    facts = json.loads(podman_exec(['python3', '-'], stdin=script))
    workers = re.search(r'^\s*worker_processes\s+(\S+);', podman_exec(['cat', '/etc/nginx/nginx.conf']), re.M)
    facts['nginx_worker_processes'] = workers.group(1) if workers else None
    return facts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--image', default=os.environ.get('LLM_SERVER_TEST_IMAGE'))
    parser.add_argument('--requests', type=int, default=3000, help='requests per latency run (default 3000)')
    parser.add_argument('--warmup', type=int, default=100, help='warm-up requests per latency run (default 100)')
    parser.add_argument('--repeats', type=int, default=3, help='alternating direct/proxied pairs (default 3)')
    parser.add_argument('--ceiling-requests', type=int, default=20000,
                        help='requests per llm-bench ceiling run (default 20000)')
    parser.add_argument('--wrk-seconds', type=int, default=5, help='seconds per wrk run (default 5)')
    parser.add_argument('--ceiling-repeats', type=int, default=3, help='rounds of the ceiling runs (default 3)')
    parser.add_argument('--quick', action='store_true',
                        help='500 requests, 1 pair, 1 round of 2000 ceiling requests and 2 s of wrk')
    opts = parser.parse_args()
    if not opts.image:
        parser.error('--image or LLM_SERVER_TEST_IMAGE is required (make bench sets it)')
    if opts.quick:
        opts.requests, opts.warmup, opts.repeats = 500, 50, 1
        opts.ceiling_requests, opts.ceiling_repeats, opts.wrk_seconds = 2000, 1, 2
    api_key = 'sk-bench-' + secrets.token_urlsafe(24)
    load_before = os.getloadavg()
    role_seconds = {}
    with tempfile.TemporaryDirectory(prefix='llm-bench-front-') as workdir, \
            bench_container(opts.image, os.environ.get('KEEP') == '1'):
        role_seconds['selfsigned'] = apply_proxy_role(workdir, api_key, 'selfsigned')
        start_backend()
        copy_llm_bench()
        write_in_container(KEY_FILE, api_key + '\n', '0600')
        podman_exec(['apt-get', 'install', '-y', '-qq', '--no-install-recommends', 'wrk'], timeout=300)
        podman_exec(['python3', '-', 'https://%s/healthz' % SERVER_NAME, CA_FILE], stdin=_PROBE)
        facts = container_facts()
        latency = measure_latency('nginx HTTPS (selfsigned)', 'https://%s' % SERVER_NAME, opts)
        ceiling = measure_ceiling(opts)
        role_seconds['none'] = apply_proxy_role(workdir, api_key, 'none')
        podman_exec(['python3', '-', 'http://%s/healthz' % SERVER_NAME], stdin=_PROBE)
        latency += measure_latency('nginx HTTP (tls none)', 'http://%s' % SERVER_NAME, opts)
    load_after = os.getloadavg()
    summary = summarize_latency(latency)
    ceiling_summary = summarize_ceiling(ceiling)

    print(machine_line())
    print('Container: %d CPUs seen, Python %s, %s (worker_processes %s), %s. Load average (1 min) before %.2f, '
          'after %.2f: other work shares these CPUs.' % (
              facts['cpus'], facts['python'], facts['nginx'], facts['nginx_worker_processes'], facts['wrk'],
              load_before[0], load_after[0]))
    print()
    print_latency(summary, opts)
    print()
    print('Client ceiling against the zero-delay backend, not streamed (llm-bench %d requests, wrk %d s; '
          'median of %d rounds):' % (opts.ceiling_requests, opts.wrk_seconds, opts.ceiling_repeats))
    print()
    print_ceiling(ceiling_summary)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({
        'machine': machine_line(), 'container': facts, 'load_before': list(load_before),
        'load_after': list(load_after), 'role_apply_s': role_seconds,
        'settings': {'requests': opts.requests, 'warmup': opts.warmup, 'repeats': opts.repeats,
                     'ceiling_requests': opts.ceiling_requests, 'ceiling_repeats': opts.ceiling_repeats,
                     'wrk_seconds': opts.wrk_seconds},
        'added_latency': summary, 'latency_runs': latency, 'ceiling': ceiling_summary, 'ceiling_runs': ceiling},
        indent=2) + '\n')
    print()
    print('JSON: %s' % REPORT.relative_to(ROOT))


if __name__ == '__main__':
    main()
