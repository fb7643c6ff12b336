# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""End-to-end probe of the VPS door: door, tunnel, home proxy, GET /healthz.

Installed by homelab.llm_server.host_programs and run by the vps_door role's timer llm-door-probe.
For each served name it connects to the door on this host (ADDRESS:PORT,
the VPS's own listener), sends that name as the TLS SNI, so the connection
takes the clients' path (nginx stream, the WireGuard tunnel, the home
proxy's PROXY-protocol listener), checks the certificate home presents
against the CA bundle (the system's by default) and the name, and asks for
/healthz. Success is an HTTP 200. The result goes to a file for node
exporter's textfile collector, replaced atomically (temporary file in the
same directory, renamed; mode 0644). Why a probe failed goes to stderr (the
journal); nothing secret is involved: /healthz needs no API key.

usage: llm-door-probe --name NAME [--name NAME]... --output FILE.prom
         [--address 127.0.0.1] [--port 443] [--path /healthz] [--ca-file FILE]
         [--timeout S] [--interval S]
Exits 0 when the file is written, whatever the probes found; 1 when not.
"""

from __future__ import annotations

import argparse
import http.client
import logging
import socket
import ssl
import sys
import time

from llm_server_host import log as _log
from llm_server_host.files import write_atomically
from llm_server_host.textfile import Exposition

LOG = logging.getLogger('llm-door-probe')


class DoorConnection(http.client.HTTPSConnection):
    """HTTPS to ADDRESS:PORT with NAME as SNI, certificate checked for NAME, Host: NAME."""

    def __init__(self, name, address, port, context, timeout):
        super().__init__(name, port, context=context, timeout=timeout)
        self._door = (address, port)
        self._name = name
        self._context = context

    def connect(self):
        sock = socket.create_connection(self._door, self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self._name)


def probe(name, address, port, path, context, timeout):
    """{'success': 0|1, 'status': HTTP status or 0, 'duration': s, 'error': text or None}."""
    started = time.monotonic()
    status, error = 0, None
    connection = DoorConnection(name, address, port, context, timeout)
    try:
        connection.request('GET', path, headers={'User-Agent': 'llm-door-probe', 'Connection': 'close'})
        response = connection.getresponse()
        response.read()
        status = response.status
        if status != 200:
            error = 'HTTP %d' % status
    except ssl.SSLCertVerificationError as exc:
        error = 'certificate not trusted: %s' % exc.verify_message
    except (OSError, http.client.HTTPException) as exc:
        error = '%s: %s' % (type(exc).__name__, exc)
    finally:
        connection.close()
    return {'success': 1 if status == 200 else 0, 'status': status,
            'duration': time.monotonic() - started, 'error': error}


# (name, result key, decimals kept, help)
FAMILIES = [
    ('llm_tunnel_probe_success', 'success', 0,
     '1 when GET /healthz through the VPS door and the tunnel answered 200, else 0.'),
    ('llm_tunnel_probe_duration_seconds', 'duration', 6,
     'Time of the last probe: connect, TLS, request and answer through the door and the tunnel.'),
    ('llm_tunnel_probe_http_status', 'status', 0,
     'HTTP status of the last probe; 0 when no HTTP answer came (no connection, TLS failed).'),
    ('llm_tunnel_probe_timestamp_seconds', 'timestamp', 3,
     'Unix time of the last probe; a value that stops moving means the probe no longer runs.'),
    ('llm_tunnel_probe_interval_seconds', 'interval', 0,
     'Seconds between probes (the timer\'s period).'),
]


def render(results):
    out = Exposition()
    for name, key, decimals, help_text in FAMILIES:
        out.family(name, 'gauge', help_text, [({'server_name': server_name}, round(result[key], decimals))
                                              for server_name, result in sorted(results.items())])
    return out.text()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0])
    parser.add_argument('--name', action='append', required=True, help='a served name (repeatable)')
    parser.add_argument('--output', required=True, help='the .prom file in the textfile collector directory')
    parser.add_argument('--address', default='127.0.0.1', help='where the door listens on this host')
    parser.add_argument('--port', type=int, default=443)
    parser.add_argument('--path', default='/healthz')
    parser.add_argument('--ca-file', default='', help='CA bundle for home\'s certificate; empty: the system\'s')
    parser.add_argument('--timeout', type=float, default=10.0)
    parser.add_argument('--interval', type=int, default=0, help='the timer\'s period, written as a metric')
    args = parser.parse_args(argv)
    _log.setup(LOG.name)
    try:
        context = ssl.create_default_context(cafile=args.ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        LOG.error('cannot read the CA bundle %s: %s', args.ca_file, exc)
        context = None
    results = {}
    for name in args.name:
        if context is None:
            result = {'success': 0, 'status': 0, 'duration': 0.0, 'error': 'no CA bundle'}
        else:
            result = probe(name, args.address, args.port, args.path, context, args.timeout)
        result.update(timestamp=time.time(), interval=args.interval)
        if result['error']:
            LOG.warning('%s via %s:%d: %s after %.3f s', name, args.address, args.port, result['error'],
                        result['duration'])
        results[name] = result
    try:
        write_atomically(args.output, render(results))
    except OSError as exc:
        LOG.error('cannot write %s: %s', args.output, exc)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
