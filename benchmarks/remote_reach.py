# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Remote reach benchmark: what the VPS door and the WireGuard tunnel add to TTFT and to a streamed answer.

Runs on the Molecule scenario `remote` (molecule/remote), set up afresh with
Molecule's own commands (destroy, create, prepare, converge) and destroyed at the end,
while holding the lock file --lock (default /tmp/remote-scenario.lock), so
that others who run the same scenario on this machine wait. Three
containers: remote-home (10.91.1.10, behind a stand-in home router) runs
home's nginx with its pebble-issued certificate for llm.remote.test and the
OpenAI-compatible test server (tests/doubles/openai_server) as its engine (the
scenario's tests use llama.cpp; LLM_REMOTE_ENGINE=test-server asks for the
engine with fixed delays);
remote-vps (10.91.2.10) runs the door (nginx stream, SNI passthrough with the
PROXY protocol) and the WireGuard end 10.77.0.1 (wireguard-go, MTU 1380,
wireguard_mtu); remote-internet (10.91.2.20) is the client on the internet.

Added latency: llm-bench (plugins/module_utils/_loadbench*.py, copied into the
containers as a package and run by their python3), streamed, the same key, model, prompt
(--prompt-tokens words) and engine delays (set on the engine through its
POST /_control: --tokens tokens, --first-token-delay before the first,
--inter-token-delay between the others), the pebble root
(https://acme.remote.test:15000/roots/0) as the only CA:
  (a) at home: llm-bench on remote-home against https://llm.remote.test,
      the name resolved to 127.0.0.1 (a line added to home's /etc/hosts and
      removed at the end): home's nginx, its LAN listener, TLS, the engine;
  (b) through the VPS: llm-bench on remote-internet against
      https://llm.remote.test, resolving to the VPS (as public DNS would):
      the door, the tunnel, home's PROXY-protocol listener, TLS, the engine.
a and b alternate (the order flips every pair), --repeats pairs at
concurrency 1 and at --concurrency (8), each run a bounded number of requests
after a warm-up on keep-alive connections; the added latency is the median
over the pairs of the per-pair difference b - a at p50 and p95, for TTFT and
end to end (the last byte of the stream). Home's access log must show every
request of each run from the expected client address (127.0.0.1, or the
internet host's, which the PROXY protocol carries), answered by the engine.
A new connection's cost is measured the same way: TCP connect plus TLS
handshake (no session resumption), --handshakes per run, alternating.
With the engine's delays at 0 the tokens come as one burst, and each event
crosses the tunnel on its own: the whole answer then shows the per-packet
cost that paced tokens hide.

Tunnel throughput: bulk TCP between home and the VPS, a small Python
receiver/sender on the VPS and the client on home, each direction
--transfer-mib MiB, --throughput-repeats times, through the tunnel
(10.77.0.2 -> 10.77.0.1) and, for comparison, on the plain path the tunnel's
own UDP takes (home -> 10.91.2.10 through the stand-in router's NAT); plus
the round trip of one byte (TCP_NODELAY, --pings of them) on both paths. The
VPS's default-deny firewall drops that port: for the measurement only, one
rule is put first in our table's input chain with `nft insert rule inet
llm_firewall input ip saddr { TUNNEL-HOME, HOME-AS-SEEN } tcp dport PORT
accept comment "remote_reach benchmark"` and removed by its handle
afterwards (also at the start, should a killed run have left one). The
ruleset is never flushed and the firewall role is not re-run.

All three containers share this machine's CPUs and one kernel: no real WAN
latency, no loss, no uplink limit. The figures are the processing the door,
wireguard-go (userspace, in containers: the kernel module is faster), the
PROXY protocol and the extra TLS hop's packets cost; add the internet's round
trips (client to VPS, VPS to home: one each for the request and again for a
new connection's handshakes) on a real deployment. The throughput is
wireguard-go's CPU ceiling here, not an uplink's.

  python3 benchmarks/remote_reach.py [--requests 150] [--concurrent-requests 480] [--warmup 10]
      [--repeats 3] [--concurrency 8] [--handshakes 50] [--transfer-mib 64] [--throughput-repeats 3]
      [--pings 500] [--tokens 32] [--first-token-delay 0.02] [--inter-token-delay 0.005]
      [--prompt-tokens 256] [--reuse] [--lock FILE] [--quick]

Needs LLM_SERVER_TEST_IMAGE and LLM_SERVER_VLLM_WHEELS (the internet host's
openai client comes from those wheels), as `make bench` sets; the Makefile
also passes the mitogen strategy (taken here too when it is importable).
--reuse measures an already converged scenario and leaves it up. Prints
Markdown tables and writes build/bench-reports/remote-reach.json; the
scenario is destroyed at the end (KEEP=1 keeps it).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import time

import yaml

from _harness import ROOT, machine_line, percentile

SCENARIO = 'remote'
HOME, VPS, INTERNET = 'remote-home', 'remote-vps', 'remote-internet'
MOLECULE_YML = ROOT / 'molecule' / SCENARIO / 'molecule.yml'
REPORT = ROOT / 'build' / 'bench-reports' / 'remote-reach.json'
MOLECULE_LOG = ROOT / 'build' / 'bench-reports' / 'remote-reach-molecule.log'
# Paths inside the containers. llm-bench's files import each other relatively: a package, run with -m.
BENCH_PACKAGE = '/root/llm_bench'
BENCH = ['env', 'PYTHONPATH=/root', 'python3', '-m', 'llm_bench._loadbench']
KEY_FILE = '/root/bench-api-key'
CA_FILE = '/root/bench-pebble-root.pem'
ACCESS_LOG = '/var/log/nginx/llm-access.log'
HOSTS_MARK = '# remote_reach benchmark'
THROUGHPUT_PORT = 5201
NFT_COMMENT = 'remote_reach benchmark'
NFT_TABLE = ('inet', 'llm_firewall')
SERVER_PID = '/run/remote-reach-bench-server.pid'

# The pebble root, from the test ACME server's management port (as verify.yml fetches it).
_FETCH_ROOT = '''import ssl, sys, urllib.request
context = ssl.create_default_context(cafile=sys.argv[1])
with urllib.request.urlopen("https://acme.remote.test:15000/roots/0", timeout=10, context=context) as answer:
    sys.stdout.write(answer.read().decode())
'''

# Waits until a URL answers 200 with the CA file given.
_PROBE = '''import ssl, sys, time, urllib.request
context = ssl.create_default_context(cafile=sys.argv[2])
deadline = time.monotonic() + 60
while True:
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=5, context=context) as answer:
            if answer.status == 200:
                break
    except OSError as exc:
        error = exc
    if time.monotonic() > deadline:
        sys.exit("no answer from %s: %s" % (sys.argv[1], error))
    time.sleep(0.5)
'''

# The engine's behaviour, through its /_control (home's loopback).
_CONTROL = '''import json, sys, urllib.request
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=10) as answer:
    sys.stdout.write(answer.read().decode())
'''

# Requests of home's access log that the bench key sent from one client
# address and the engine answered 200.
_COUNT = '''import json, sys
count = 0
with open(sys.argv[1], encoding="utf-8") as log:
    for line in log:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        count += (entry.get("uri") == "/v1/chat/completions" and entry.get("status") == 200
                  and entry.get("key") == sys.argv[2] and entry.get("remote_addr") == sys.argv[3]
                  and entry.get("upstream_addr") == sys.argv[4])
print(count)
'''

# New connections: TCP connect plus TLS handshake (full, no resumption), in ms.
_HANDSHAKES = '''import json, socket, ssl, sys, time
name, cafile, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
context = ssl.create_default_context(cafile=cafile)
address = socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)[0][4]
times = []
for _ in range(count + 3):
    start = time.perf_counter()
    with socket.create_connection(address, timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=name):
            times.append((time.perf_counter() - start) * 1000.0)
print(json.dumps({"address": address[0], "ms": times[3:]}))
'''

# The throughput server on the VPS: one connection at a time; the first line
# says what to do: "up N" (read N bytes, answer ok), "down N" (send N bytes),
# "ping N" (N one-byte round trips), "quit". Gives up after 300 s idle; its
# process id is in SERVER_PID, for the clean-up should the run stop early.
_SERVER = '''import os, socket, sys
listener = socket.create_server(("0.0.0.0", int(sys.argv[1])))
listener.settimeout(300)
with open(sys.argv[2], "w") as pid:
    pid.write(str(os.getpid()))
print("ready", flush=True)
block = b"\\x5a" * (1 << 20)
while True:
    conn, _peer = listener.accept()
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        line = b""
        while not line.endswith(b"\\n"):
            chunk = conn.recv(1)
            if not chunk:
                break
            line += chunk
        words = line.decode().split()
        if not words or words[0] == "quit":
            break
        size = int(words[1])
        if words[0] == "up":
            left = size
            while left > 0:
                data = conn.recv(min(left, 1 << 20))
                if not data:
                    break
                left -= len(data)
            conn.sendall(b"ok\\n")
        elif words[0] == "down":
            left = size
            while left > 0:
                conn.sendall(block[:min(left, len(block))])
                left -= min(left, len(block))
        elif words[0] == "ping":
            for _ in range(size):
                conn.sendall(conn.recv(1))
'''

# The client on home: one measurement, as JSON.
_CLIENT = '''import json, socket, statistics, sys, time
host, port, mode, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
conn = socket.create_connection((host, port), timeout=60)
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
out = {"mode": mode}
if mode == "quit":
    conn.sendall(b"quit\\n")
elif mode == "up":
    block = b"\\xa5" * (1 << 20)
    start = time.perf_counter()
    conn.sendall(("up %d\\n" % size).encode())
    left = size
    while left > 0:
        conn.sendall(block[:min(left, len(block))])
        left -= min(left, len(block))
    assert conn.recv(3) == b"ok\\n"
    out["seconds"] = time.perf_counter() - start
elif mode == "down":
    start = time.perf_counter()
    conn.sendall(("down %d\\n" % size).encode())
    left = size
    while left > 0:
        data = conn.recv(1 << 20)
        assert data, "closed early"
        left -= len(data)
    out["seconds"] = time.perf_counter() - start
elif mode == "ping":
    conn.sendall(("ping %d\\n" % size).encode())
    times = []
    for _ in range(size):
        start = time.perf_counter()
        conn.sendall(b"x")
        assert conn.recv(1) == b"x"
        times.append((time.perf_counter() - start) * 1000.0)
    times = times[min(20, size // 10):]
    out["rtt_ms"] = times
conn.close()
print(json.dumps(out))
'''


def container_exec(container, argv, stdin=None, timeout=180, check=True):
    """A command in one of the scenario's containers; its stdout, or exit with what it said."""
    proc = subprocess.run(['podman', 'exec', '-i', container, *argv], input=stdin, capture_output=True, text=True,
                          check=False, timeout=timeout)
    if check and proc.returncode != 0:
        sys.exit('on %s, %s failed (%d): %s%s' % (container, ' '.join(argv[:3]), proc.returncode,
                                                  proc.stdout[-2000:], proc.stderr[-2000:]))
    return proc.stdout


def write_in(container, path, text, mode='0644'):
    """A file in a container from stdin: contents never appear on a command line."""
    container_exec(container, ['sh', '-c', 'umask 077 && cat > "$1" && chmod %s "$1"' % mode, 'write', path],
                   stdin=text)


def scenario_settings():
    """What the scenario sets: the name, key, engine, addresses (molecule/remote/molecule.yml)."""
    config = yaml.safe_load(MOLECULE_YML.read_text())
    variables = config['provisioner']['inventory']
    common = variables['group_vars']['all']
    home, vps = variables['host_vars'][HOME], variables['host_vars'][VPS]
    platforms = {platform['name']: platform for platform in config['platforms']}
    return {'name': common['remote_name'], 'api_key': common['remote_api_key'],
            'key_name': home['nginx_api_keys'][0]['name'], 'pebble_https_ca': common['remote_pebble_ca'],
            'engine_port': home['remote_test_engine']['port'], 'model': home['remote_test_engine']['model'],
            'home_tunnel': home['wireguard_address'], 'vps_tunnel': vps['wireguard_address'],
            'vps_public': vps.get('wireguard_public_address', vps['ansible_host']), 'internet_address': platforms[INTERNET]['ip'],
            'home_lan': platforms[HOME]['ip']}


def molecule_env():
    """The environment make bench gives Molecule: the venv first on PATH, mitogen where it is installed."""
    env = dict(os.environ)
    for name in ('LLM_SERVER_TEST_IMAGE', 'LLM_SERVER_VLLM_WHEELS'):
        if not env.get(name):
            sys.exit('%s is required (make bench sets it)' % name)
    env['PATH'] = os.path.dirname(sys.executable) + os.pathsep + env.get('PATH', '')
    # Home's engine with fixed delays instead of llama.cpp: the figures are
    # then the door's and the tunnel's cost, not the engine's variation.
    env['LLM_REMOTE_ENGINE'] = 'test-server'
    spec = importlib.util.find_spec('ansible_mitogen')
    if 'ANSIBLE_STRATEGY' not in env and spec and spec.submodule_search_locations:
        env['ANSIBLE_STRATEGY'] = 'mitogen_linear'
        env['ANSIBLE_STRATEGY_PLUGINS'] = os.path.join(spec.submodule_search_locations[0], 'plugins', 'strategy')
    return env


def molecule(phase, env, log):
    """One Molecule command on the scenario; its seconds, or exit with the end of its output."""
    start = time.monotonic()
    log.write('\n===== molecule %s -s %s\n' % (phase, SCENARIO))
    log.flush()
    proc = subprocess.run(['molecule', phase, '-s', SCENARIO], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)
    log.write(proc.stdout)
    log.flush()
    if proc.returncode != 0:
        tail = '\n'.join(proc.stdout.splitlines()[-60:])
        raise RuntimeError('molecule %s -s %s failed (rc %d); the whole output is in %s:\n%s'
                           % (phase, SCENARIO, proc.returncode, MOLECULE_LOG.relative_to(ROOT), tail))
    return round(time.monotonic() - start, 1)


@contextlib.contextmanager
def scenario(opts, phases):
    """The lock for the whole run; the scenario created, prepared and converged, destroyed at the end."""
    MOLECULE_LOG.parent.mkdir(parents=True, exist_ok=True)
    with open(opts.lock, 'a', encoding='utf-8') as lock:
        print('waiting for %s ...' % opts.lock, file=sys.stderr, flush=True)
        waited = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        phases['lock_wait'] = round(time.monotonic() - waited, 1)
        print('lock held after %.0f s' % phases['lock_wait'], file=sys.stderr, flush=True)
        if opts.reuse:
            yield
            return
        env = molecule_env()
        keep = os.environ.get('KEEP') == '1'
        with open(MOLECULE_LOG, 'w', encoding='utf-8') as log:
            try:
                # A run that left its containers (--destroy=never, KEEP=1) would make create and prepare no-ops.
                for phase in ('destroy', 'create', 'prepare', 'converge'):
                    print('molecule %s -s %s ...' % (phase, SCENARIO), file=sys.stderr, flush=True)
                    phases[phase if phase != 'destroy' else 'destroy_first'] = molecule(phase, env, log)
                yield
            except RuntimeError as exc:
                sys.exit(str(exc))
            finally:
                if keep:
                    print('KEEP=1: the scenario stays (molecule destroy -s %s)' % SCENARIO, file=sys.stderr)
                else:
                    print('molecule destroy -s %s ...' % SCENARIO, file=sys.stderr, flush=True)
                    try:
                        phases['destroy'] = molecule('destroy', env, log)
                    except RuntimeError as exc:
                        print(exc, file=sys.stderr)


# --------------------------------------------------------------------------------------- setup

def prepare_clients(settings, opts):
    """llm-bench, the key and the pebble root on home and the internet host; the name at home; engine delays."""
    root = container_exec(INTERNET, ['python3', '-', settings['pebble_https_ca']], stdin=_FETCH_ROOT)
    if 'BEGIN CERTIFICATE' not in root:
        sys.exit('the test ACME server gave no root: %r' % root[:200])
    for container in (HOME, INTERNET):
        container_exec(container, ['mkdir', '-p', BENCH_PACKAGE])
        write_in(container, BENCH_PACKAGE + '/__init__.py', '')
        for path in sorted((ROOT / 'plugins' / 'module_utils').glob('_loadbench*.py')):
            subprocess.run(['podman', 'cp', str(path), '%s:%s/%s' % (container, BENCH_PACKAGE, path.name)],
                           check=True, capture_output=True)
        write_in(container, KEY_FILE, settings['api_key'] + '\n', '0600')
        write_in(container, CA_FILE, root)
    container_exec(HOME, ['sh', '-c', 'grep -v "%s" /etc/hosts > /tmp/hosts.bench; cat /tmp/hosts.bench > /etc/hosts; '
                          'echo "127.0.0.1 %s %s" >> /etc/hosts' % (HOSTS_MARK, settings['name'], HOSTS_MARK)])
    set_engine(settings, {'tokens': opts.tokens, 'first_token_delay': opts.first_token_delay,
                          'inter_token_delay': opts.inter_token_delay})
    url = 'https://%s/healthz' % settings['name']
    for container in (HOME, INTERNET):
        container_exec(container, ['python3', '-', url, CA_FILE], stdin=_PROBE, timeout=90)


def set_engine(settings, changes):
    return json.loads(container_exec(HOME, ['python3', '-', 'http://127.0.0.1:%d/_control' % settings['engine_port'],
                                            json.dumps(changes)], stdin=_CONTROL))


def restore_home(settings):
    container_exec(HOME, ['sh', '-c', 'grep -v "%s" /etc/hosts > /tmp/hosts.bench; cat /tmp/hosts.bench > /etc/hosts'
                          % HOSTS_MARK], check=False)
    with contextlib.suppress(SystemExit, ValueError):
        set_engine(settings, {'tokens': 16, 'first_token_delay': 0.0, 'inter_token_delay': 0.0})


# ------------------------------------------------------------------------------- added latency

def answered(settings, client_address):
    upstream = '127.0.0.1:%d' % settings['engine_port']
    return int(container_exec(HOME, ['python3', '-', ACCESS_LOG, settings['key_name'], client_address, upstream],
                              stdin=_COUNT))


def llm_bench(settings, where, concurrency, requests, opts):
    """llm-bench at home or on the internet host; its results, after checking the run took the expected path."""
    container, client_address = ((HOME, '127.0.0.1') if where == 'home'
                                 else (INTERNET, settings['internet_address']))
    argv = [*BENCH, '--url', 'https://%s' % settings['name'], '--model', settings['model'],
            '--api-key-file', KEY_FILE, '--ca-file', CA_FILE, '--requests', str(requests),
            '--concurrency', str(concurrency), '--warmup', str(opts.warmup), '--stream',
            '--prompt-tokens', str(opts.prompt_tokens), '--max-tokens', str(opts.tokens),
            '--timeout', '30', '--duration-limit', '300', '--quiet', '--json', '-']
    before = answered(settings, client_address)
    results = json.loads(container_exec(container, argv, timeout=400))
    if results['errors'] or results['completed'] != requests:
        sys.exit('llm-bench had errors (%s): %s (%d of %d completed)'
                 % (where, results['errors_by_kind'], results['completed'], requests))
    if answered(settings, client_address) - before != requests + opts.warmup:
        sys.exit("home's access log does not show the %d requests of the %s run from %s, answered by the engine"
                 % (requests + opts.warmup, where, client_address))
    return results


def measure_latency(settings, opts):
    """Alternating home / through-the-VPS pairs at concurrency 1 and opts.concurrency; the raw rows."""
    rows = []
    for concurrency, requests in ((1, opts.requests), (opts.concurrency, opts.concurrent_requests)):
        for repeat in range(opts.repeats):
            order = ('home', 'vps') if repeat % 2 == 0 else ('vps', 'home')
            for where in order:
                print('  concurrency %d, pair %d, %s ...' % (concurrency, repeat + 1, where), file=sys.stderr,
                      flush=True)
                results = llm_bench(settings, where, concurrency, requests, opts)
                row = {'concurrency': concurrency, 'repeat': repeat, 'path': where, 'requests': results['completed'],
                       'requests_per_s': results['requests_per_s'],
                       'client_cpu_percent': results['client']['cpu_percent']}
                for metric in ('ttft', 'e2e'):
                    for pct in ('p50', 'p95', 'p99'):
                        row['%s_%s_ms' % (metric, pct)] = results['%s_ms' % metric][pct]
                rows.append(row)
    return rows


def measure_handshakes(settings, opts):
    """New connections (TCP + full TLS handshake), alternating home and through the VPS; the raw rows."""
    rows = []
    for repeat in range(opts.repeats):
        order = ('home', 'vps') if repeat % 2 == 0 else ('vps', 'home')
        for where in order:
            container = HOME if where == 'home' else INTERNET
            out = json.loads(container_exec(container, ['python3', '-', settings['name'], CA_FILE,
                                                        str(opts.handshakes)], stdin=_HANDSHAKES))
            expected = '127.0.0.1' if where == 'home' else settings['vps_public']
            if out['address'] != expected:
                sys.exit('%s resolved %s to %s, not %s' % (container, settings['name'], out['address'], expected))
            rows.append({'repeat': repeat, 'path': where, 'connections': len(out['ms']),
                         'connect_tls_p50_ms': round(percentile(out['ms'], 50), 3),
                         'connect_tls_p95_ms': round(percentile(out['ms'], 95), 3)})
    return rows


def paired(rows, keys, **match):
    """Per key: medians over the repeats of home, through the VPS, and their per-pair difference."""
    pairs = {}
    for row in rows:
        if all(row[k] == v for k, v in match.items()):
            pairs.setdefault(row['repeat'], {})[row['path']] = row
    entry = dict(match, pairs=len(pairs))
    for key in keys:
        entry['home_' + key] = round(statistics.median(p['home'][key] for p in pairs.values()), 3)
        entry['vps_' + key] = round(statistics.median(p['vps'][key] for p in pairs.values()), 3)
        entry['added_' + key] = round(statistics.median(p['vps'][key] - p['home'][key] for p in pairs.values()), 3)
    return entry


def summarize_latency(rows, handshakes, opts):
    summary = []
    for concurrency in (1, opts.concurrency):
        for metric in ('ttft', 'e2e'):
            keys = ['%s_%s_ms' % (metric, pct) for pct in ('p50', 'p95', 'p99')]
            entry = paired(rows, keys, concurrency=concurrency)
            entry['metric'] = metric
            summary.append(entry)
    entry = paired(handshakes, ['connect_tls_p50_ms', 'connect_tls_p95_ms'])
    entry.update(concurrency=1, metric='connect_tls')
    summary.append(entry)
    return summary


def print_latency(summary, opts):
    names = {'ttft': 'TTFT', 'e2e': 'whole streamed answer', 'connect_tls': 'new connection (TCP + TLS handshake)'}
    print('Added latency, streamed, median of %d alternating pairs (ms; added = through the VPS - at home, per pair; '
          '%d requests at concurrency 1, %d at %d, after %d warm-up each; %d connections per handshake run):'
          % (opts.repeats, opts.requests, opts.concurrent_requests, opts.concurrency, opts.warmup, opts.handshakes))
    print()
    print('| what | concurrency | at home p50 / p95 | through the VPS p50 / p95 | added p50 | added p95 |')
    print('| --- | ---: | ---: | ---: | ---: | ---: |')
    for entry in summary:
        prefix = '%s_' % entry['metric']
        print('| %s | %d | %.2f / %.2f | %.2f / %.2f | %.2f | %.2f |' % (
            names[entry['metric']], entry['concurrency'],
            entry['home_%sp50_ms' % prefix], entry['home_%sp95_ms' % prefix],
            entry['vps_%sp50_ms' % prefix], entry['vps_%sp95_ms' % prefix],
            entry['added_%sp50_ms' % prefix], entry['added_%sp95_ms' % prefix]))


# ------------------------------------------------------------------------------ the tunnel's throughput

def nft_vps(argv, check=True):
    return container_exec(VPS, ['nft', *argv], check=check)


def remove_bench_rules():
    """Delete, by handle, every rule of ours in the VPS's input chain that carries the benchmark's comment."""
    listing = nft_vps(['-a', 'list', 'chain', *NFT_TABLE, 'input'], check=False)
    for handle in re.findall(r'comment "%s" # handle (\d+)' % NFT_COMMENT, listing):
        nft_vps(['delete', 'rule', *NFT_TABLE, 'input', 'handle', handle])


@contextlib.contextmanager
def port_opened_on_vps(sources):
    """One accept rule first in the VPS's input chain for the measurement's port, removed afterwards."""
    remove_bench_rules()
    rule = ['ip', 'saddr', '{', ', '.join(sources), '}', 'tcp', 'dport', str(THROUGHPUT_PORT), 'accept',
            'comment', '"%s"' % NFT_COMMENT]
    echoed = nft_vps(['--echo', '--handle', 'insert', 'rule', *NFT_TABLE, 'input', *rule])
    try:
        yield ' '.join(rule), echoed.strip()
    finally:
        remove_bench_rules()


def home_client(host, mode, size, timeout=120):
    return json.loads(container_exec(HOME, ['python3', '-', host, str(THROUGHPUT_PORT), mode, str(size)],
                                     stdin=_CLIENT, timeout=timeout))


def measure_throughput(settings, opts):
    """Bulk TCP up and down, and one-byte round trips, through the tunnel and on the plain path."""
    endpoint = container_exec(VPS, ['wg', 'show', 'wg-llm', 'endpoints'])
    # Home's address as the VPS sees it (the stand-in router's NAT): where the tunnel's UDP comes from.
    seen = re.search(r'\s(\d+\.\d+\.\d+\.\d+):\d+', endpoint)
    if not seen:
        sys.exit("the VPS's WireGuard shows no endpoint for home: %r" % endpoint)
    home_seen = seen.group(1)
    paths = {'tunnel': settings['vps_tunnel'], 'plain': settings['vps_public']}
    size = opts.transfer_mib << 20
    rows, pings = [], []
    with port_opened_on_vps([settings['home_tunnel'], home_seen]) as (rule, echoed):
        server = subprocess.Popen(['podman', 'exec', VPS, 'python3', '-u', '-c', _SERVER, str(THROUGHPUT_PORT),
                                   SERVER_PID], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if server.stdout.readline().strip() != 'ready':
                sys.exit('the throughput server on the VPS did not start: %s' % server.stderr.read()[-2000:])
            for repeat in range(opts.throughput_repeats):
                for path, host in paths.items():
                    for direction, mode in (('home -> VPS', 'up'), ('VPS -> home', 'down')):
                        seconds = home_client(host, mode, size)['seconds']
                        rows.append({'repeat': repeat, 'path': path, 'direction': direction, 'bytes': size,
                                     'seconds': round(seconds, 4), 'mb_per_s': round(size / seconds / 1e6, 1)})
            for path, host in paths.items():
                rtts = home_client(host, 'ping', opts.pings)['rtt_ms']
                pings.append({'path': path, 'round_trips': len(rtts),
                              'rtt_p50_ms': round(percentile(rtts, 50), 4),
                              'rtt_p95_ms': round(percentile(rtts, 95), 4)})
            home_client(paths['plain'], 'quit', 0)
            server.wait(timeout=30)
        finally:
            if server.poll() is None:
                container_exec(VPS, ['sh', '-c', 'test -s "$1" && kill "$(cat "$1")"', 'stop', SERVER_PID],
                               check=False)
                server.wait(timeout=30)
            container_exec(VPS, ['rm', '-f', SERVER_PID], check=False)
    return {'rule': rule, 'nft_echo': echoed, 'home_as_seen_by_vps': home_seen, 'runs': rows, 'round_trips': pings}


def summarize_throughput(result):
    summary = []
    for path in ('tunnel', 'plain'):
        for direction in ('home -> VPS', 'VPS -> home'):
            runs = [row['mb_per_s'] for row in result['runs'] if row['path'] == path and row['direction'] == direction]
            summary.append({'path': path, 'direction': direction, 'runs': len(runs),
                            'mb_per_s_median': round(statistics.median(runs), 1),
                            'mb_per_s_min': min(runs), 'mb_per_s_max': max(runs)})
    return summary


def print_throughput(summary, result, facts, opts):
    labels = {'tunnel': 'WireGuard tunnel %s -> %s (wireguard-go, MTU %s)' % (
        facts['home_tunnel'], facts['vps_tunnel'], facts['wg_mtu_home']),
        'plain': 'plain path, home -> %s (the tunnel\'s own UDP path, through NAT; MTU %s)' % (
            facts['vps_public'], facts['eth_mtu_home'])}
    print('Bulk TCP between home and the VPS, %d MiB per run, median of %d (MB/s = 10^6 bytes/s); one-byte round '
          'trips (TCP_NODELAY, %d):' % (opts.transfer_mib, opts.throughput_repeats, opts.pings))
    print()
    print('| path | home -> VPS MB/s | VPS -> home MB/s | round trip p50 / p95 ms |')
    print('| --- | ---: | ---: | ---: |')
    for path in ('tunnel', 'plain'):
        up, down = [e for e in summary if e['path'] == path]
        ping = [p for p in result['round_trips'] if p['path'] == path][0]
        row = (labels[path], up['mb_per_s_median'], down['mb_per_s_median'], ping['rtt_p50_ms'], ping['rtt_p95_ms'])
        print('| %s | %.1f | %.1f | %.3f / %.3f |' % row)


# ------------------------------------------------------------------------------------------ facts

def scenario_facts(settings):
    script = ('import json, os, platform, subprocess\n'
              'def read(path):\n'
              '    try:\n'
              '        return open(path).read().strip()\n'
              '    except OSError:\n'
              '        return None\n'
              'def run(*argv):\n'
              '    try:\n'
              '        proc = subprocess.run(argv, capture_output=True, text=True)\n'
              '        return (proc.stdout + proc.stderr).strip().splitlines()[0]\n'
              '    except (OSError, IndexError):\n'
              '        return None\n'
              'print(json.dumps({"cpus": os.cpu_count(), "python": platform.python_version(),\n'
              '                  "wg_mtu": read("/sys/class/net/wg-llm/mtu"),\n'
              '                  "eth_mtu": read("/sys/class/net/eth0/mtu"),\n'
              '                  "nginx": run("nginx", "-v"), "wireguard_go": run("wireguard-go", "--version")}))\n')
    facts = dict(settings)
    facts.pop('api_key')
    for container, label in ((HOME, 'home'), (VPS, 'vps')):
        for key, value in json.loads(container_exec(container, ['python3', '-'], stdin=script)).items():
            facts['%s_%s' % (key, label)] = value
    return facts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add('--requests', type=int, default=150, help='requests per run at concurrency 1 (default 150)')
    add('--concurrency', type=int, default=8, help='the moderate concurrency (default 8)')
    add('--concurrent-requests', type=int, default=480, help='requests per run at --concurrency (default 480)')
    add('--warmup', type=int, default=10, help='warm-up requests per run (default 10)')
    add('--repeats', type=int, default=3, help='alternating home / through-the-VPS pairs (default 3)')
    add('--handshakes', type=int, default=50, help='new connections per handshake run (default 50)')
    add('--transfer-mib', type=int, default=64, help='MiB per throughput run (default 64)')
    add('--throughput-repeats', type=int, default=3, help='throughput runs per path and direction (default 3)')
    add('--pings', type=int, default=500, help='one-byte round trips per path (default 500)')
    add('--tokens', type=int, default=32, help="the engine's tokens per answer, and max_tokens (default 32)")
    add('--first-token-delay', type=float, default=0.02, help="the engine's seconds before the first token")
    add('--inter-token-delay', type=float, default=0.005, help="the engine's seconds between tokens")
    add('--prompt-tokens', type=int, default=256, help='prompt words per request (default 256)')
    add('--reuse', action='store_true', help='measure the converged scenario as it is; neither create nor destroy')
    add('--lock', default='/tmp/remote-scenario.lock', help='held for the whole run (default %(default)s)')
    add('--quick', action='store_true', help='1 pair of 40 / 160 requests, 20 handshakes, 1 x 16 MiB, 200 pings')
    opts = parser.parse_args()
    if opts.quick:
        opts.requests, opts.concurrent_requests, opts.repeats, opts.handshakes = 40, 160, 1, 20
        opts.transfer_mib, opts.throughput_repeats, opts.pings = 16, 1, 200
    settings = scenario_settings()
    phases = {}
    started = time.monotonic()
    with scenario(opts, phases):
        measured = time.monotonic()
        load_before = os.getloadavg()
        try:
            prepare_clients(settings, opts)
            facts = scenario_facts(settings)
            print('measuring the added latency ...', file=sys.stderr, flush=True)
            latency = measure_latency(settings, opts)
            handshakes = measure_handshakes(settings, opts)
            print("measuring the tunnel's throughput ...", file=sys.stderr, flush=True)
            throughput = measure_throughput(settings, opts)
        finally:
            restore_home(settings)
        load_after = os.getloadavg()
        phases['measurement'] = round(time.monotonic() - measured, 1)
    phases['total'] = round(time.monotonic() - started, 1)
    summary = summarize_latency(latency, handshakes, opts)
    throughput_summary = summarize_throughput(throughput)

    print(machine_line())
    print('Scenario: 3 containers on this machine, %s CPUs seen, Python %s; home %s, VPS %s, wireguard-go %s; '
          'wg-llm MTU %s (home) / %s (VPS) over eth0 MTU %s. Load average (1 min) before %.2f, after %.2f. '
          'Engine: tests/doubles/openai_server, %d tokens, %.3f s to the first, %.3f s between; prompt %d words.' % (
              facts['cpus_home'], facts['python_home'], facts['nginx_home'], facts['nginx_vps'],
              facts['wireguard_go_home'], facts['wg_mtu_home'], facts['wg_mtu_vps'], facts['eth_mtu_home'],
              load_before[0], load_after[0], opts.tokens, opts.first_token_delay, opts.inter_token_delay,
              opts.prompt_tokens))
    print('Scenario time: %s.' % ', '.join('%s %.0f s' % (k, v) for k, v in phases.items()))
    print()
    print_latency(summary, opts)
    print()
    print_throughput(throughput_summary, throughput, facts, opts)
    print()
    print('The throughput port was opened on the VPS for the measurement only: nft insert rule %s input %s '
          '(removed by its handle afterwards).' % (' '.join(NFT_TABLE), throughput['rule']))
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps({
        'machine': machine_line(), 'scenario': facts, 'phases_s': phases, 'load_before': list(load_before),
        'load_after': list(load_after),
        'settings': {key: getattr(opts, key) for key in (
            'requests', 'concurrency', 'concurrent_requests', 'warmup', 'repeats', 'handshakes', 'transfer_mib',
            'throughput_repeats', 'pings', 'tokens', 'first_token_delay', 'inter_token_delay', 'prompt_tokens',
            'quick', 'reuse')},
        'added_latency': summary, 'latency_runs': latency, 'handshake_runs': handshakes,
        'throughput': throughput_summary, 'throughput_runs': throughput}, indent=2) + '\n')
    print()
    print('JSON: %s' % REPORT.relative_to(ROOT))


if __name__ == '__main__':
    main()
