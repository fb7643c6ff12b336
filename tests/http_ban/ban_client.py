# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A client of the home proxy for the ban tests (standard library only).

Sends COUNT chat completions with KEY over TLS, optionally behind a PROXY
protocol v1 header that claims --proxy-from as the client's address (as the
VPS door would), then, with --then-key, polls with that key every
--interval seconds until the answer is one of --until-status (0: the
connection was dropped or refused) or --timeout passes.
Prints one JSON object:

    {"statuses": [401, ...], "until": {"status": 403, "reached": true,
     "elapsed_s": 0.41, "polls": 5, "body": {...}}}

elapsed_s counts from the answer to the last of the COUNT requests: with bad
keys, the time the ban took to act. Every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import socket
import ssl
import sys
import time


class ProxiedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to CONNECT, with a PROXY v1 header sent before the TLS hello."""

    def __init__(self, connect, port, proxy_from, **kwargs):
        super().__init__(connect, port, **kwargs)
        self.proxy_from = proxy_from

    def connect(self):
        sock = socket.create_connection((self.host, self.port), self.timeout)
        if self.proxy_from:
            family = 'TCP6' if ipaddress.ip_address(self.proxy_from).version == 6 else 'TCP4'
            local = sock.getsockname()[0]
            if family == 'TCP6' and ':' not in local:
                local = '::1'
            sock.sendall(('PROXY %s %s %s 40000 %d\r\n' % (family, self.proxy_from, local, self.port)).encode())
        self.sock = self._context.wrap_socket(sock, server_hostname=self.server_name)


def ask(args, key):
    context = ssl.create_default_context(cafile=args.ca_file)
    conn = ProxiedHTTPSConnection(args.connect, args.port, args.proxy_from, context=context,
                                  timeout=args.connect_timeout)
    conn.server_name = args.server_name
    body = json.dumps({'model': args.model, 'max_tokens': 4,
                       'messages': [{'role': 'user', 'content': 'Say hello'}]})
    try:
        conn.request('POST', '/v1/chat/completions', body=body,
                     headers={'Host': args.server_name, 'Authorization': 'Bearer ' + key,
                              'Content-Type': 'application/json'})
        response = conn.getresponse()
        raw = response.read()
    except OSError as error:
        # Dropped or refused on the way (the VPS's ban at its door): status 0.
        return 0, 'unreachable: %s' % error
    finally:
        conn.close()
    try:
        data = json.loads(raw)
    except ValueError:
        data = raw.decode(errors='replace')[:300]
    return response.status, data


def read_key(path):
    if not path:
        return None
    with open(path) as handle:
        return handle.read().strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--connect', required=True, help='address to connect to')
    parser.add_argument('--port', type=int, default=443)
    parser.add_argument('--server-name', required=True, help='TLS SNI, Host and the certificate name')
    parser.add_argument('--ca-file', required=True)
    parser.add_argument('--proxy-from', help='send a PROXY v1 header claiming this client address')
    parser.add_argument('--model', default='tiny-chat')
    parser.add_argument('--key-file', required=True, help='file with the key of the COUNT requests')
    parser.add_argument('--count', type=int, default=1)
    parser.add_argument('--then-key-file', help='file with the key to poll with afterwards')
    parser.add_argument('--until-status', type=lambda text: [int(x) for x in text.split(',')], default=[403],
                        help='statuses, comma-separated, that end the polling; 0: unreachable')
    parser.add_argument('--connect-timeout', type=float, default=10.0)
    parser.add_argument('--interval', type=float, default=0.05)
    parser.add_argument('--timeout', type=float, default=30.0)
    args = parser.parse_args()
    if not 0 <= args.count <= 1000 or args.timeout > 600:
        parser.error('--count is at most 1000 and --timeout at most 600')

    out = {'statuses': []}
    last = None
    for _request in range(args.count):
        status, data = ask(args, read_key(args.key_file))
        out['statuses'].append(status)
        out['last_body'] = data
        last = time.monotonic()
    if args.then_key_file:
        key = read_key(args.then_key_file)
        start = last if last is not None else time.monotonic()
        polls = 0
        status, data = None, None
        while True:
            status, data = ask(args, key)
            polls += 1
            if status in args.until_status or time.monotonic() - start > args.timeout:
                break
            time.sleep(args.interval)
        out['until'] = {'status': status, 'reached': status in args.until_status,
                        'elapsed_s': round(time.monotonic() - start, 3), 'polls': polls, 'body': data}
    print(json.dumps(out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
