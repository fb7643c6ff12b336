# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The WireGuard tunnel's state as a file for node exporter's textfile collector.

Installed by homelab.llm_server.host_programs and run by the wireguard role's timer
llm-tunnel-metrics-IF. Reads ``wg show IF latest-handshakes`` and
``wg show IF transfer``: never ``wg show IF dump``, which prints the
interface's private key, so no key ever reaches this process. Each peer is
labelled with the inventory name the role gave for its public key. The file
is replaced atomically (a temporary file in the same directory, renamed), so
node exporter never reads half of it.

usage: llm-tunnel-metrics --interface IF --output FILE.prom [--peer NAME,PUBLIC_KEY,MAX_AGE_S]...

A configured peer that the interface does not list (the interface is down,
or the peer was dropped) is written with a last handshake of 0, like a peer
that never shook hands: the stale-handshake alert then fires for it too.
Exits 0 when the file is written (an interface that is down is a value, not
an error), 1 when it is not.
"""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

from llm_server_host import log as _log
from llm_server_host.files import write_atomically
from llm_server_host.textfile import Exposition

LOG = logging.getLogger('llm-tunnel-metrics')

WG_TIMEOUT_S = 10


def parse_peer(text):
    """NAME,PUBLIC_KEY,MAX_AGE_S (a public key is base64: no commas)."""
    parts = text.split(',')
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise argparse.ArgumentTypeError('a peer is NAME,PUBLIC_KEY,MAX_AGE_S, not %r' % text)
    try:
        max_age = float(parts[2])
    except ValueError:
        raise argparse.ArgumentTypeError('MAX_AGE_S of peer %s is not a number: %r' % (parts[0], parts[2]))
    return {'name': parts[0], 'public_key': parts[1], 'max_age_s': max_age}


def wg_show(interface, what):
    """Lines of `wg show IF WHAT` split on tabs, or None when the interface does not answer."""
    try:
        result = subprocess.run(['wg', 'show', interface, what], capture_output=True, text=True,
                                timeout=WG_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        LOG.warning('wg show %s %s: %s', interface, what, exc)
        return None
    if result.returncode != 0:
        LOG.warning('wg show %s %s: %s', interface, what, result.stderr.strip())
        return None
    return [line.split('\t') for line in result.stdout.splitlines() if line.strip()]


def read_tunnel(interface):
    """(up, {public_key: {'handshake': s, 'rx': bytes, 'tx': bytes}})."""
    handshakes = wg_show(interface, 'latest-handshakes')
    transfer = wg_show(interface, 'transfer') if handshakes is not None else None
    if handshakes is None or transfer is None:
        return False, {}
    peers = {}
    for fields in handshakes:
        if len(fields) == 2:
            peers.setdefault(fields[0], {})['handshake'] = int(fields[1])
    for fields in transfer:
        if len(fields) == 3:
            peers.setdefault(fields[0], {}).update(rx=int(fields[1]), tx=int(fields[2]))
    return True, peers


FAMILIES = [
    ('llm_wireguard_interface_up', 'gauge',
     '1 when the tunnel interface answers wg show, 0 when it is down or missing.'),
    ('llm_wireguard_peer_last_handshake_timestamp_seconds', 'gauge',
     'Unix time of the last handshake with the peer; 0 for none (never, or the interface is down).'),
    ('llm_wireguard_peer_handshake_max_age_seconds', 'gauge',
     'Age past which the peer\'s last handshake is stale: 120 s rekey plus three keepalive periods.'),
    ('llm_wireguard_peer_receive_bytes_total', 'counter',
     'Bytes received from the peer since the interface came up.'),
    ('llm_wireguard_peer_transmit_bytes_total', 'counter',
     'Bytes sent to the peer since the interface came up.'),
]


def render(interface, up, seen, configured):
    """The exposition text: one HELP/TYPE block per family, peers sorted by name."""
    samples = {name: [] for name, _type, _help in FAMILIES}
    samples['llm_wireguard_interface_up'].append(([('interface', interface)], 1 if up else 0))
    by_key = {peer['public_key']: peer for peer in configured}
    keys = sorted(set(by_key) | set(seen), key=lambda k: (by_key.get(k, {}).get('name', '\uffff'), k))
    for key in keys:
        peer = by_key.get(key)
        pairs = [('interface', interface), ('peer', peer['name'] if peer else 'unknown'), ('public_key', key)]
        state = seen.get(key, {})
        samples['llm_wireguard_peer_last_handshake_timestamp_seconds'].append((pairs, state.get('handshake', 0)))
        if peer:
            samples['llm_wireguard_peer_handshake_max_age_seconds'].append((pairs, peer['max_age_s']))
        if 'rx' in state:
            samples['llm_wireguard_peer_receive_bytes_total'].append((pairs, state['rx']))
            samples['llm_wireguard_peer_transmit_bytes_total'].append((pairs, state['tx']))
    out = Exposition()
    for name, kind, help_text in FAMILIES:
        if samples[name]:
            out.family(name, kind, help_text, samples[name])
    return out.text()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0])
    parser.add_argument('--interface', required=True)
    parser.add_argument('--output', required=True, help='the .prom file in the textfile collector directory')
    parser.add_argument('--peer', action='append', default=[], type=parse_peer,
                        help='NAME,PUBLIC_KEY,MAX_AGE_S of a peer the interface should have (repeatable)')
    args = parser.parse_args(argv)
    _log.setup(LOG.name)
    up, seen = read_tunnel(args.interface)
    try:
        write_atomically(args.output, render(args.interface, up, seen, args.peer))
    except OSError as exc:
        LOG.error('cannot write %s: %s', args.output, exc)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
