# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fail2ban's action for the HTTP ban of homelab.llm_server (role http_ban).

At home every connection from the internet arrives from the VPS's tunnel
address, so the ban acts in nginx, by the client address the PROXY protocol
carried: this keeps the file of banned addresses that nginx's
``geo $llm_banned`` includes, one ``ADDRESS 1;`` line each, and reloads nginx
after ``nginx -t`` accepts it. It also writes the Prometheus textfile for
node exporter.

    llm-http-ban [paths] start|stop|flush      the file emptied (fail2ban
                                              restores its live bans after
                                              start, one ban each)
    llm-http-ban [paths] ban ADDRESS RESTORED  the address added; counted in
                                              llm_http_bans_total unless
                                              RESTORED is 1 (a ban fail2ban
                                              brings back from its database)
    llm-http-ban [paths] unban ADDRESS         the address removed

The file nginx reads is the list of what is banned; the counter is kept in a
state file so it never goes down across restarts. Calls are serialised with
a lock; every file is replaced atomically (temporary file, rename).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import subprocess
import sys

from llm_server_host import log as _log
from llm_server_host.files import write_atomically
from llm_server_host.textfile import Exposition

LOG = logging.getLogger('llm-http-ban')

HEADER = (
    "# Client addresses banned by fail2ban (jail {jail}) through llm-http-ban.\n"
    "# Rewritten at every ban and unban: do not edit. Included by nginx's\n"
    "# geo $llm_banned; a banned address gets 403.\n"
)


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def parse_banned(text):
    """The addresses of a banned-addresses file, in its order."""
    banned = []
    for line in (text or '').splitlines():
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        address = line.split()[0]
        with contextlib.suppress(ValueError):
            banned.append(normalise(address))
    return banned


def render_banned(jail, banned):
    def key(address):
        network = ipaddress.ip_network(address, strict=False)
        return (network.version, network.network_address, network.prefixlen)
    return HEADER.format(jail=jail) + ''.join('%s 1;\n' % a for a in sorted(set(banned), key=key))


def normalise(address):
    """An address or network as nginx's geo reads it; ValueError if it is neither."""
    network = ipaddress.ip_network(address.strip(), strict=False)
    if network.prefixlen == network.max_prefixlen:
        return str(network.network_address)
    return str(network)


def read_state(path):
    text = read_text(path)
    if not text:
        return {'bans_total': 0}
    try:
        state = json.loads(text)
        return {'bans_total': int(state.get('bans_total', 0))}
    except (ValueError, TypeError, AttributeError):
        return {'bans_total': 0}


def render_metrics(jail, bans_total, banned, applied):
    jail_label = {'jail': jail}
    out = Exposition()
    out.family('llm_http_bans_total', 'counter', 'Client addresses banned at the HTTP layer (nginx) by fail2ban; '
               'bans restored after a restart are not counted again.', [(jail_label, bans_total)])
    out.family('llm_http_banned_addresses', 'gauge', 'Client addresses banned at the HTTP layer now.',
               [(jail_label, len(banned))])
    out.family('llm_http_ban_applied', 'gauge', '1 when nginx serves the current list of banned addresses, 0 when '
               'the last change failed nginx -t or its reload.', [(jail_label, 1 if applied else 0)])
    return out.text()


def nginx_active():
    return subprocess.run(['systemctl', 'is-active', '--quiet', 'nginx.service'], check=False).returncode == 0


def apply(args, banned):
    """Writes the file nginx includes and reloads nginx; False if nginx refused it."""
    old = read_text(args.banned_file)
    new = render_banned(args.jail, banned)
    if old == new:
        return True
    write_atomically(args.banned_file, new)
    check = subprocess.run(['nginx', '-t', '-q'], capture_output=True, text=True, check=False)
    if check.returncode != 0:
        # The previous list stays live; nginx is not reloaded.
        if old is None:
            os.unlink(args.banned_file)
        else:
            write_atomically(args.banned_file, old)
        LOG.error('nginx -t refused the new list, kept the previous one: %s', check.stderr.strip())
        return False
    if nginx_active():
        reload = subprocess.run(['systemctl', 'reload', 'nginx.service'], capture_output=True, text=True,
                                check=False)
        if reload.returncode != 0:
            LOG.error('reloading nginx failed: %s', reload.stderr.strip())
            return False
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0])
    parser.add_argument('--jail', required=True)
    parser.add_argument('--banned-file', required=True)
    parser.add_argument('--metrics-file', required=True)
    parser.add_argument('--state-file', required=True)
    parser.add_argument('command', choices=['start', 'stop', 'flush', 'ban', 'unban'])
    parser.add_argument('address', nargs='?')
    parser.add_argument('restored', nargs='?', default='0')
    args = parser.parse_args(argv)
    _log.setup(LOG.name)

    address = None
    if args.command in ('ban', 'unban'):
        try:
            address = normalise(args.address or '')
        except ValueError:
            parser.error('%s: %r is not an IP address or network' % (args.command, args.address))

    os.makedirs(os.path.dirname(args.state_file), exist_ok=True)
    with open(args.state_file + '.lock', 'w') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_state(args.state_file)
        banned = parse_banned(read_text(args.banned_file))
        if args.command in ('start', 'stop', 'flush'):
            banned = []
        elif args.command == 'ban':
            if address not in banned:
                banned.append(address)
                if args.restored.strip() != '1':
                    state['bans_total'] += 1
        else:
            banned = [a for a in banned if a != address]

        applied = apply(args, banned)
        if not applied:
            banned = parse_banned(read_text(args.banned_file))
        write_atomically(args.state_file, json.dumps(state) + '\n')
        write_atomically(args.metrics_file, render_metrics(args.jail, state['bans_total'], banned, applied))
    return 0 if applied else 1


if __name__ == '__main__':
    sys.exit(main())
