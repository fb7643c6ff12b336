"""The model store's download throughput from the Hub's stand-in, and what its checks cost.

    .venv/bin/python benchmarks/model_store_download.py [--mib 512] [--files 2] [--runs 3]

Serves a generated repo (FILES safetensors files of MIB MiB in all, random
bytes) from tests/doubles/hf_hub/hub_server.py on 127.0.0.1 and runs the store's own
command (plugins/module_utils/_model_store.py, as the model_store role runs it
on the host) with the real huggingface_hub client against it: a first fetch
into an empty store (download, then every file's sha256 checked against the
Hub's listing), then a re-run on the full store (the manifest's local checks,
no request). Prints MiB/s of the first fetch and the seconds of each, median
of RUNS. Loopback only: the figure is the client's and the checks' ceiling on
this machine, not a home link's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HUB = REPO / 'tests' / 'doubles' / 'hf_hub' / 'hub_server.py'
STORE = REPO / 'plugins' / 'module_utils' / '_model_store.py'
COMMIT = '0123456789abcdef0123456789abcdef01234567'


def make_repo(path: Path, mib: int, files: int) -> None:
    path.mkdir(parents=True)
    (path / 'config.json').write_text(json.dumps({'model_type': 'qwen3'}))
    each = mib * 2 ** 20 // files
    for index in range(files):
        with open(path / ('model-%05d-of-%05d.safetensors' % (index + 1, files)), 'wb') as handle:
            left = each
            while left:
                chunk = min(left, 2 ** 22)
                handle.write(os.urandom(chunk))
                left -= chunk


def start_hub(repo_dir: Path, ready: Path) -> tuple[subprocess.Popen, int]:
    hub = subprocess.Popen([sys.executable, str(HUB), '--repo', 'bench/model=%s:%s' % (COMMIT, repo_dir),
                            '--listen', '127.0.0.1', '--port', '0', '--lfs-port', '0', '--ready-file', str(ready)],
                           stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ready.exists() and ready.read_text().strip():
            return hub, json.loads(ready.read_text().splitlines()[0])['port']
        if hub.poll() is not None:
            raise SystemExit('the Hub stand-in exited: %s' % hub.returncode)
        time.sleep(0.05)
    hub.kill()
    raise SystemExit('the Hub stand-in did not say it listens within 30 s')


def fetch(store: Path, port: int, result: Path) -> float:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(STORE), '--store-dir', str(store), '--repo', 'bench/model',
                           '--revision', COMMIT, '--endpoint', 'http://127.0.0.1:%d' % port,
                           '--result-file', str(result)], capture_output=True, text=True, timeout=900, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit('the store failed (%d): %s%s' % (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:]))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--mib', type=int, default=512)
    parser.add_argument('--files', type=int, default=2)
    parser.add_argument('--runs', type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix='llm-store-bench-'))
    try:
        make_repo(work / 'repo', args.mib, args.files)
        hub, port = start_hub(work / 'repo', work / 'ready')
        try:
            first, again = [], []
            for run in range(args.runs):
                store = work / ('store-%d' % run)
                first.append(fetch(store, port, work / ('first-%d.json' % run)))
                again.append(fetch(store, port, work / ('again-%d.json' % run)))
                shutil.rmtree(store)
        finally:
            hub.terminate()
            hub.wait(timeout=10)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median = statistics.median(first)
    print('| measurement | runs | median | min | max |')
    print('| --- | ---: | ---: | ---: | ---: |')
    print('| first fetch of %d MiB in %d files (download + sha256 checks) | %d | %.2f s (%.0f MiB/s) | %.2f s | %.2f s |'
          % (args.mib, args.files, args.runs, median, args.mib / median, min(first), max(first)))
    print('| re-run on the full store (local checks, no request) | %d | %.2f s | %.2f s | %.2f s |'
          % (args.runs, statistics.median(again), min(again), max(again)))


if __name__ == '__main__':
    main()
