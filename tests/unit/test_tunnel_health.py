# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The tunnel's health for Prometheus: the host programs, and the alert rules.

- llm-tunnel-metrics (host/llm_server_host/tunnel_metrics.py) runs for real against a stand-in
  `wg` first in PATH (it prints what `wg show IF latest-handshakes|transfer`
  print, and fails the test if asked for `dump`, which prints the private key).
- llm-door-probe (host/llm_server_host/door_probe.py) probes a local HTTPS server with a
  certificate made here for a name, as the VPS probes its door.
- Every file written is checked with `promtool check metrics` (the parser and
  linter of the Prometheus exposition format that node exporter's textfile
  collector uses); the alert rules are checked with every other rule file by
  tests/unit/test_alert_rules.py. promtool comes from Debian's prometheus
  package, extracted by `make promtool` (LLM_SERVER_PROMTOOL, else
  build/promtool/promtool); the promtool checks are skipped where it is missing.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import ssl
import stat
import subprocess
import sys
import threading

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
# The programs as the hosts run them: the package's modules, from host/.
METRICS_PROGRAM = [sys.executable, '-m', 'llm_server_host.tunnel_metrics']
PROBE_PROGRAM = [sys.executable, '-m', 'llm_server_host.door_probe']
PROGRAM_ENV = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, 'host'))
PROMTOOL = os.environ.get('LLM_SERVER_PROMTOOL') or os.path.join(REPO_ROOT, 'build', 'promtool', 'promtool')
needs_promtool = pytest.mark.skipif(not os.access(PROMTOOL, os.X_OK),
                                    reason='no promtool at %s: run `make promtool`' % PROMTOOL)

VPS_KEY = 'VPSpublicKeyAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA='
HOME_KEY = 'HOMEpublicKeyBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB='
STRANGER_KEY = 'STRANGERpublicKeyCCCCCCCCCCCCCCCCCCCCCCCCC='
PRIVATE_KEY = 'cHJpdmF0ZSBrZXkgdGhhdCBtdXN0IG5ldmVyIGxlYWs='

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def samples(text):
    """[(name, {label: value}, float)] of an exposition text (enough for what the scripts write)."""
    found = []
    for line in text.splitlines():
        if line.startswith('#') or not line.strip():
            continue
        match = SAMPLE.match(line)
        assert match, 'not a sample line: %r' % line
        found.append((match.group(1), dict(LABEL.findall(match.group(2) or '')), float(match.group(3))))
    return found


def value(found, name, **labels):
    hits = [v for n, l, v in found if n == name and all(l.get(k) == w for k, w in labels.items())]
    assert len(hits) == 1, '%s%s: %d samples in %r' % (name, labels, len(hits), found)
    return hits[0]


def promtool_check_metrics(text):
    if not os.access(PROMTOOL, os.X_OK):
        return
    proc = subprocess.run([PROMTOOL, 'check', 'metrics'], input=text, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, 'promtool check metrics: %s%s\n%s' % (proc.stdout, proc.stderr, text)


# ------------------------------------------------------------------ tunnel metrics

FAKE_WG = '''#!/bin/sh
echo "$*" >> "$WG_CALLS"
case "$3" in
  dump) echo "dump asked for: it prints the private key" >&2; echo "{private}	x	51820	off"; exit 3 ;;
  latest-handshakes) [ -f "$WG_DIR/handshakes" ] || {{ echo "Unable to access interface: No such device" >&2; exit 1; }}
                     cat "$WG_DIR/handshakes" ;;
  transfer) cat "$WG_DIR/transfer" ;;
  *) exit 2 ;;
esac
'''.format(private=PRIVATE_KEY)


@pytest.fixture
def fake_wg(tmp_path):
    """A directory with a stand-in `wg`; write handshakes/transfer files in it (none: interface down)."""
    bindir = tmp_path / 'bin'
    bindir.mkdir()
    wg = bindir / 'wg'
    wg.write_text(FAKE_WG)
    wg.chmod(0o755)
    env = dict(PROGRAM_ENV, PATH='%s:%s' % (bindir, os.environ['PATH']), WG_DIR=str(tmp_path),
               WG_CALLS=str(tmp_path / 'calls'))
    return tmp_path, env


def run_metrics(env, out, *peers):
    args = METRICS_PROGRAM + ['--interface', 'wg-llm', '--output', str(out)]
    for peer in peers:
        args += ['--peer', peer]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=30, check=False)


def test_metrics_label_peers_and_never_ask_for_the_private_key(fake_wg):
    directory, env = fake_wg
    (directory / 'handshakes').write_text('%s\t1700000000\n%s\t0\n' % (HOME_KEY, STRANGER_KEY))
    (directory / 'transfer').write_text('%s\t1234\t5678\n%s\t0\t92\n' % (HOME_KEY, STRANGER_KEY))
    out = directory / 'llm_wireguard_wg-llm.prom'
    proc = run_metrics(env, out, 'llm-home,%s,195' % HOME_KEY, 'other-home,%s,240' % VPS_KEY)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ''
    text = out.read_text()
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert PRIVATE_KEY not in text
    assert 'dump' not in (directory / 'calls').read_text()
    # Nothing left beside the file (the temporary file was renamed).
    assert sorted(p.name for p in directory.iterdir()) == ['bin', 'calls', 'handshakes', out.name, 'transfer']
    promtool_check_metrics(text)
    found = samples(text)
    home = {'interface': 'wg-llm', 'peer': 'llm-home', 'public_key': HOME_KEY}
    assert value(found, 'llm_wireguard_interface_up', interface='wg-llm') == 1
    assert value(found, 'llm_wireguard_peer_last_handshake_timestamp_seconds', **home) == 1700000000
    assert value(found, 'llm_wireguard_peer_receive_bytes_total', **home) == 1234
    assert value(found, 'llm_wireguard_peer_transmit_bytes_total', **home) == 5678
    assert value(found, 'llm_wireguard_peer_handshake_max_age_seconds', **home) == 195
    # A peer the interface has but the role did not name; one the role named that the interface lacks.
    assert value(found, 'llm_wireguard_peer_last_handshake_timestamp_seconds', peer='unknown',
                 public_key=STRANGER_KEY) == 0
    missing = {'peer': 'other-home', 'public_key': VPS_KEY}
    assert value(found, 'llm_wireguard_peer_last_handshake_timestamp_seconds', **missing) == 0
    assert value(found, 'llm_wireguard_peer_handshake_max_age_seconds', **missing) == 240
    assert not [n for n, l, _v in found if l.get('peer') == 'other-home' and n.endswith('_bytes_total')]


def test_metrics_of_an_interface_that_is_down(fake_wg):
    directory, env = fake_wg
    out = directory / 'llm_wireguard_wg-llm.prom'
    out.write_text('llm_wireguard_interface_up{interface="wg-llm"} 1\n')
    proc = run_metrics(env, out, 'edge-vps,%s,195' % VPS_KEY)
    assert proc.returncode == 0, proc.stderr
    assert 'No such device' in proc.stderr
    text = out.read_text()
    promtool_check_metrics(text)
    found = samples(text)
    assert value(found, 'llm_wireguard_interface_up', interface='wg-llm') == 0
    # The VPS it should have reads "no handshake", so the stale-handshake alert covers a down interface.
    assert value(found, 'llm_wireguard_peer_last_handshake_timestamp_seconds', peer='edge-vps') == 0
    assert not [n for n, _l, _v in found if n.endswith('_bytes_total')]


def test_metrics_file_that_cannot_be_written(fake_wg):
    directory, env = fake_wg
    (directory / 'handshakes').write_text('')
    (directory / 'transfer').write_text('')
    proc = run_metrics(env, directory / 'missing-dir' / 'x.prom')
    assert proc.returncode == 1
    assert 'cannot write' in proc.stderr


# ------------------------------------------------------------------ door probe

NAME = 'llm.door.test'


@pytest.fixture(scope='module')
def certificate(tmp_path_factory):
    """(cert, key) for NAME, self-signed: the probe's CA bundle is the certificate itself."""
    if not shutil.which('openssl'):
        pytest.skip('no openssl')
    directory = tmp_path_factory.mktemp('tls')
    cert, key = directory / 'cert.pem', directory / 'key.pem'
    subprocess.run(['openssl', 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
                    '-nodes', '-days', '1', '-subj', '/CN=' + NAME, '-addext', 'subjectAltName=DNS:' + NAME,
                    '-keyout', str(key), '-out', str(cert)], check=True, capture_output=True)
    return cert, key


class Healthz(http.server.BaseHTTPRequestHandler):
    status = 200
    seen = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).seen.append((self.path, self.headers.get('Host')))
        body = b'{"status": "ok"}'
        self.send_response(type(self).status)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args):
        pass


@pytest.fixture
def door(certificate):
    """An HTTPS server on 127.0.0.1 with NAME's certificate; yields its port and the handler class."""
    handler = type('Handler', (Healthz,), {'status': 200, 'seen': []})
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*[str(p) for p in certificate])
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler
    server.shutdown()
    server.server_close()


def run_probe(out, port, *extra):
    args = PROBE_PROGRAM + ['--name', NAME, '--output', str(out), '--address', '127.0.0.1',
                            '--port', str(port), '--timeout', '5', '--interval', '15'] + list(extra)
    return subprocess.run(args, env=PROGRAM_ENV, capture_output=True, text=True, timeout=30, check=False)


def test_probe_success_through_the_door(door, certificate, tmp_path):
    port, handler = door
    out = tmp_path / 'llm_tunnel_probe.prom'
    proc = run_probe(out, port, '--ca-file', str(certificate[0]))
    assert proc.returncode == 0 and proc.stderr == '', proc.stderr
    text = out.read_text()
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    promtool_check_metrics(text)
    found = samples(text)
    assert value(found, 'llm_tunnel_probe_success', server_name=NAME) == 1
    assert value(found, 'llm_tunnel_probe_http_status', server_name=NAME) == 200
    assert 0 < value(found, 'llm_tunnel_probe_duration_seconds', server_name=NAME) < 5
    assert value(found, 'llm_tunnel_probe_interval_seconds', server_name=NAME) == 15
    assert value(found, 'llm_tunnel_probe_timestamp_seconds', server_name=NAME) > 1.7e9
    # The name went as the Host header (and as SNI: the certificate was checked for it).
    assert handler.seen == [('/healthz', '%s:%d' % (NAME, port))]


def test_probe_fails_on_an_untrusted_certificate(door, tmp_path):
    port, handler = door
    out = tmp_path / 'llm_tunnel_probe.prom'
    proc = run_probe(out, port)  # the system's CAs do not know the self-signed certificate
    assert proc.returncode == 0
    assert 'certificate not trusted' in proc.stderr
    found = samples(out.read_text())
    assert value(found, 'llm_tunnel_probe_success', server_name=NAME) == 0
    assert value(found, 'llm_tunnel_probe_http_status', server_name=NAME) == 0
    assert handler.seen == []


def test_probe_fails_on_an_error_status(door, certificate, tmp_path):
    port, handler = door
    handler.status = 502
    out = tmp_path / 'llm_tunnel_probe.prom'
    proc = run_probe(out, port, '--ca-file', str(certificate[0]))
    assert 'HTTP 502' in proc.stderr
    found = samples(out.read_text())
    assert value(found, 'llm_tunnel_probe_success', server_name=NAME) == 0
    assert value(found, 'llm_tunnel_probe_http_status', server_name=NAME) == 502


def test_probe_fails_when_the_door_closes(certificate, tmp_path):
    # A listener that closes every connection at once, as the door does when home is unreachable.
    import socket
    with socket.socket() as listener:
        listener.bind(('127.0.0.1', 0))
        listener.listen(8)
        port = listener.getsockname()[1]

        def close_all():
            for _attempt in range(2):
                conn, _addr = listener.accept()
                conn.close()
        thread = threading.Thread(target=close_all, daemon=True)
        thread.start()
        out = tmp_path / 'llm_tunnel_probe.prom'
        proc = run_probe(out, port, '--ca-file', str(certificate[0]))
    assert proc.returncode == 0
    found = samples(out.read_text())
    assert value(found, 'llm_tunnel_probe_success', server_name=NAME) == 0
    assert value(found, 'llm_tunnel_probe_http_status', server_name=NAME) == 0
