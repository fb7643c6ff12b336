# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse rate and scrape time of llm-proxy-metrics, on a temporary access log.

Starts roles/nginx/files/llm-proxy-metrics.py on a free loopback port,
following an empty log, then:

- ingest: appends N llm_access lines at once (a mix of statuses, upstream
  groups and nginx's own answers, as the role's log format writes them) and
  times from the end of the write until llm_proxy_log_lines_total reaches N,
  scraping every 20 ms meanwhile (those scrapes are timed too: a scrape while
  the reader is busy). lines/s is N over that time, so it includes up to one
  poll interval; CPU/line is the exporter's own CPU time over N;
- idle scrapes: the HTTP scrape as the client sees it (request to last byte),
  a new connection each time as Prometheus' first scrape would, after a few
  warm-up scrapes, with the series of N lines in memory.

  python3 benchmarks/proxy_metrics.py [--lines 200000] [--scrapes 500] [--poll-interval 0.05] [--runs 3]

Writes build/bench-reports/proxy-metrics.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from _harness import ROOT, machine_line, percentile

# The program as the host runs it: the package's module, from host/.
EXPORTER = [sys.executable, '-m', 'llm_server_host.proxy_metrics']
REPORT = ROOT / 'build' / 'bench-reports' / 'proxy-metrics.json'
TICKS = os.sysconf('SC_CLK_TCK')
GROUPS = ['llm_1_qwen3-32b', 'llm_2_qwen3-8b', 'llm_3_gemma-3-27b']


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def cpu_seconds(pid):
    with open('/proc/%d/stat' % pid) as handle:
        fields = handle.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def log_lines(count, seed=1):
    """count llm_access lines as nginx writes them: mostly proxied requests, some of nginx's own answers."""
    rng = random.Random(seed)
    lines = []
    msec = 1772366400.0
    for index in range(count):
        msec += rng.random() / 10
        group = GROUPS[index % len(GROUPS)]
        roll = rng.random()
        if roll < 0.05:  # 401 or 429 from nginx itself
            status, addr, upstream_status, header, response = (401 if roll < 0.03 else 429), '', '', '', ''
            request_time = 0.0
        else:
            status = 502 if roll > 0.98 else 200
            addr = '127.0.0.1:8001' if roll < 0.9 else '127.0.0.1:8001, 127.0.0.1:8002'
            header = '%.3f' % rng.uniform(0.02, 3) if roll < 0.9 else '-, %.3f' % rng.uniform(0.02, 3)
            upstream_status = str(status) if roll < 0.9 else '502, %d' % status
            request_time = rng.uniform(0.05, 90)
            response = '%.3f' % request_time
        entry = {
            'time': '2026-03-01T12:00:00+00:00', 'msec': round(msec, 3), 'request_id': '%032x' % rng.getrandbits(128),
            'remote_addr': '192.0.2.%d' % rng.randrange(1, 255), 'key': 'key%d' % rng.randrange(10),
            'method': 'POST', 'uri': '/v1/chat/completions', 'status': status,
            'request_length': rng.randrange(200, 20000), 'bytes_sent': rng.randrange(300, 200000),
            'request_time': round(request_time, 3), 'model': group.split('_', 2)[2], 'upstream_group': group,
            'upstream_addr': addr, 'upstream_status': upstream_status, 'upstream_connect_time': '0.000' if addr else '',
            'upstream_header_time': header, 'upstream_response_time': response,
        }
        lines.append(json.dumps(entry, separators=(',', ':')))
    return ('\n'.join(lines) + '\n').encode()


def scrape(url):
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    elapsed = time.perf_counter() - start
    lines = None
    for line in text.splitlines():
        if line.startswith('llm_proxy_log_lines_total '):
            lines = float(line.split()[1])
    return elapsed, lines, len(text.splitlines())


def measure(count, scrapes, warmup, poll_interval, data):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, 'llm-access.log')
        open(log, 'wb').close()
        port = free_port()
        proc = subprocess.Popen(EXPORTER + ['--log', log, '--port', str(port), '--poll-interval', str(poll_interval)],
                                env=dict(os.environ, PYTHONPATH=str(ROOT / 'host')),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        url = 'http://127.0.0.1:%d/metrics' % port
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    socket.create_connection(('127.0.0.1', port), timeout=1).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        sys.exit('the exporter did not start: %s' % proc.stderr.read())
                    time.sleep(0.02)
            cpu_before = cpu_seconds(proc.pid)
            with open(log, 'ab') as handle:
                handle.write(data)
            written = time.perf_counter()
            busy = []
            while True:
                elapsed, lines, _count = scrape(url)
                busy.append(elapsed)
                if lines is not None and lines >= count:
                    break
                if time.perf_counter() - written > 600:
                    sys.exit('only %s of %d lines after 600 s' % (lines, count))
                time.sleep(0.02)
            ingest = time.perf_counter() - written
            cpu = cpu_seconds(proc.pid) - cpu_before
            for _warmup in range(warmup):
                scrape(url)
            idle, series = [], 0
            for _scrape in range(scrapes):
                elapsed, _lines, series = scrape(url)
                idle.append(elapsed)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return {
        'lines': count, 'bytes': len(data), 'ingest_s': ingest, 'lines_per_s': count / ingest,
        'cpu_s': cpu, 'cpu_us_per_line': cpu / count * 1e6, 'exposition_lines': series,
        'busy_scrape_s': {'n': len(busy), 'p50': percentile(busy, 50), 'p95': percentile(busy, 95), 'max': max(busy)},
        'idle_scrape_s': {'n': len(idle), 'p50': percentile(idle, 50), 'p95': percentile(idle, 95), 'max': max(idle)},
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--lines', type=int, default=200000)
    parser.add_argument('--scrapes', type=int, default=500)
    parser.add_argument('--warmup', type=int, default=20)
    parser.add_argument('--poll-interval', type=float, default=0.05)
    parser.add_argument('--runs', type=int, default=3)
    opts = parser.parse_args()
    data = log_lines(opts.lines)
    results = [measure(opts.lines, opts.scrapes, opts.warmup, opts.poll_interval, data) for _run in range(opts.runs)]
    print(machine_line())
    print('%d lines (%.1f MB) appended at once, poll interval %.2f s'
          % (opts.lines, len(data) / 1e6, opts.poll_interval))
    print()
    print('| run | ingest | lines/s | CPU/line | scrapes while reading: p50 | p95 | max '
          '| idle scrapes: p50 | p95 | max | exposition lines |')
    print('| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    for number, r in enumerate(results, 1):
        b, i = r['busy_scrape_s'], r['idle_scrape_s']
        print('| %d | %.2f s | %.0f | %.1f us | %.1f ms | %.1f ms | %.1f ms | %.2f ms | %.2f ms | %.2f ms | %d |' % (
            number, r['ingest_s'], r['lines_per_s'], r['cpu_us_per_line'], b['p50'] * 1e3, b['p95'] * 1e3,
            b['max'] * 1e3, i['p50'] * 1e3, i['p95'] * 1e3, i['max'] * 1e3, r['exposition_lines']))
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({'machine': machine_line(), 'poll_interval_s': opts.poll_interval,
                                  'results': results}, indent=2) + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
