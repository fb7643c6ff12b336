# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What an off-site copy and a restore drill cost: llm-backup's own code, rclone's crypt remote and an S3 server
(moto's, on loopback), on this machine, without a container.

A tree of --files files holding --mib MiB in all (random bytes: nothing to compress) is the source. Each run:
the first copy (a staged snapshot, then rclone sync through the crypt remote and cryptcheck), a change of 1 in 20
files and a deletion, the second copy, then the full drill (restore into an empty place, the compare against the
host's manifest, the deleted file back from history) and a sampled one (1 part of 4). Prints a table of the
medians and, with --json FILE, every run's figures.

    .venv/bin/python benchmarks/backup_drill.py --mib 256 --files 400 --runs 3

Needs rclone (Debian's) and moto's server (`pip install "moto[s3]" flask flask-cors`, as tests/s3/requirements.txt)
on this machine. Loopback only: the ceiling of the tools here, not a home uplink's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(ROOT, 'host'))

from llm_server_host import backup  # noqa: E402 pylint: disable=wrong-import-position


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def start_s3(port):
    server = shutil.which('moto_server')
    argv = [server] if server else [sys.executable, '-m', 'moto.server']
    process = subprocess.Popen(argv + ['-H', '127.0.0.1', '-p', str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen('http://127.0.0.1:%d/' % port, timeout=2).close()
            return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit('moto_server did not answer on port %d within 60 s' % port)


def make_tree(root, files, mib):
    size = mib * 1024 * 1024 // files
    for number in range(files):
        folder = os.path.join(root, 'dir%02d' % (number % 20))
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, 'file%05d.bin' % number), 'wb') as handle:
            handle.write(os.urandom(size))


def one_run(work, port, files, mib):
    source = os.path.join(work, 'source')
    make_tree(source, files, mib)
    rclone = shutil.which('rclone')

    def obscure(text):
        return subprocess.run([rclone, 'obscure', text], check=True, capture_output=True, text=True).stdout.strip()

    conf = os.path.join(work, 'rclone.conf')
    with open(conf, 'w', encoding='utf-8') as handle:
        handle.write('[s3]\ntype = s3\nprovider = Other\nendpoint = http://127.0.0.1:%d\naccess_key_id = bench\n'
                     'secret_access_key = bench\nregion = us-east-1\nforce_path_style = true\n\n'
                     '[llm-backup]\ntype = crypt\nremote = s3:bench-%d/host\npassword = %s\npassword2 = %s\n'
                     % (port, int(time.time() * 1000), obscure('bench password'), obscure('bench salt')))
    settings = {'version': 1, 'state_dir': os.path.join(work, 'state'),
                'sources': [{'name': 'state', 'root': source, 'rollback': True}],
                'offsite': {'rclone': rclone, 'rclone_config': conf, 'remote': 'llm-backup:', 'max_delete': 1000}}
    engine = backup.Backup(settings)
    figures = {}
    started = time.monotonic()
    first = engine.copy_offsite()
    figures['first copy s'] = time.monotonic() - started
    for number in range(0, files, 20):
        path = os.path.join(source, 'dir%02d' % (number % 20), 'file%05d.bin' % number)
        with open(path, 'r+b') as handle:
            handle.write(os.urandom(4096))
    os.unlink(os.path.join(source, 'dir01', 'file00001.bin'))
    started = time.monotonic()
    engine.copy_offsite()
    figures['second copy s'] = time.monotonic() - started
    report = engine.drill()
    if report['result'] != 'ok':
        raise SystemExit('the drill failed: %s' % json.dumps(report)[:2000])
    figures['drill s'] = report['seconds']
    figures['drill restore s'] = report['phases']['restore state']
    figures['drill check s'] = report['phases']['check state']
    figures['drill history s'] = report['phases']['history']
    sampled = engine.drill(sample=True, parts=4)
    figures['sampled drill s'] = sampled['seconds']
    figures['files'] = first['sources']['state']['files']
    figures['bytes'] = first['sources']['state']['bytes']
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--mib', type=int, default=256)
    parser.add_argument('--files', type=int, default=400)
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--json')
    args = parser.parse_args(argv)
    if not shutil.which('rclone'):
        raise SystemExit('rclone is not installed (apt install rclone)')
    # This machine's CA bundle variable makes rclone's S3 backend fail before any request.
    os.environ.pop('AWS_CA_BUNDLE', None)
    port = free_port()
    server = start_s3(port)
    runs = []
    try:
        for _run in range(args.runs):
            work = tempfile.mkdtemp(prefix='llm-backup-bench-')
            try:
                runs.append(one_run(work, port, args.files, args.mib))
            finally:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print('%d files, %.0f MiB, %d runs (median, min, max)' % (runs[0]['files'], runs[0]['bytes'] / 1048576, len(runs)))
    for key in [k for k in runs[0] if k.endswith(' s')]:
        values = [run[key] for run in runs]
        print('  %-18s %7.2f %7.2f %7.2f' % (key, statistics.median(values), min(values), max(values)))
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as handle:
            json.dump({'mib': args.mib, 'files': args.files, 'runs': runs}, handle, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
