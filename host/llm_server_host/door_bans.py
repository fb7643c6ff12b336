# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Drops at the VPS's door the client addresses that home banned (role http_ban, entry point vps).

    llm-door-bans CONFIG.json

CONFIG (written by the role): {"sources": [URL, ...], "ports": [80, 443],
"max_age_s": 3600, "timeout_s": 5, "state": FILE, "metrics": FILE}.

Each home lists what its fail2ban banned (the file nginx's geo $llm_banned
reads, served only to this VPS through the tunnel): the VPS pulls it, so
home holds no credential for the VPS. This keeps the table inet
llm_door_bans: a set of IPv4 and one of IPv6 addresses, and an input chain
that drops them at the door's ports before the door passes them home. The
table is rewritten with one `nft -f` (add, delete, define: atomic) only when
its contents change or it is missing (after a boot). A list that cannot be
fetched keeps its last addresses for --max-age seconds (home's ban lasts no
longer), then they go; the bans at home act either way.

Prints one JSON line: {"applied": bool, "addresses": N, "failed": [URL...]}.
"""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import logging
import subprocess
import sys
import time
import urllib.request

from llm_server_host import log as _log
from llm_server_host.files import read_settings, write_atomically
from llm_server_host.textfile import Exposition

LOG = logging.getLogger('llm-door-bans')
TABLE = 'llm_door_bans'
NFT = '/usr/sbin/nft'


def parse_list(text):
    """The networks of a banned-addresses file (`ADDRESS 1;` lines, # comments); others are skipped."""
    networks = []
    for line in text.splitlines():
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        with contextlib.suppress(ValueError):
            networks.append(ipaddress.ip_network(line.split()[0].rstrip(';'), strict=False))
    return networks


def collapse(networks):
    """IPv4 and IPv6 lists without overlaps (an nft interval set refuses overlapping elements)."""
    return ([str(n) for n in ipaddress.collapse_addresses(n for n in networks if n.version == 4)],
            [str(n) for n in ipaddress.collapse_addresses(n for n in networks if n.version == 6)])


def render_table(v4, v6, ports):
    """The ruleset file: create, delete and define the table in one transaction."""
    def elements(items):
        return '        elements = { %s }\n' % ', '.join(items) if items else ''
    port_set = '{ %s }' % ', '.join(str(p) for p in sorted(ports))
    return (
        'add table inet {table}\n'
        'delete table inet {table}\n'
        'table inet {table} {{\n'
        '    comment "homelab.llm_server http_ban: client addresses banned at home"\n'
        '    set banned_v4 {{\n'
        '        type ipv4_addr\n'
        '        flags interval\n'
        '{v4}'
        '    }}\n'
        '    set banned_v6 {{\n'
        '        type ipv6_addr\n'
        '        flags interval\n'
        '{v6}'
        '    }}\n'
        '    chain input {{\n'
        '        type filter hook input priority filter - 5; policy accept;\n'
        '        ip saddr @banned_v4 tcp dport {ports} drop\n'
        '        ip6 saddr @banned_v6 tcp dport {ports} drop\n'
        '    }}\n'
        '}}\n'
    ).format(table=TABLE, v4=elements(v4), v6=elements(v6), ports=port_set)


def fetch(url, timeout):
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (an http URL from the inventory)
        return response.read().decode('utf-8', 'replace')


def read_state(path):
    with contextlib.suppress(FileNotFoundError, ValueError):
        with open(path) as handle:
            state = json.load(handle)
        if isinstance(state, dict):
            return state
    return {}


def gather(sources, state, now, max_age, fetcher):
    """Each source's addresses (fetched, or the last ones while younger than max_age) and the failed URLs."""
    sources_state = state.get('sources', {})
    kept, failed, networks = {}, [], []
    for url in sources:
        try:
            addresses = [str(n) for n in parse_list(fetcher(url))]
            kept[url] = {'fetched_at': now, 'addresses': addresses}
        except (OSError, ValueError):
            failed.append(url)
            last = sources_state.get(url)
            if last and now - float(last.get('fetched_at', 0)) <= max_age:
                kept[url] = last
        networks.extend(ipaddress.ip_network(a) for a in kept.get(url, {}).get('addresses', []))
    return kept, failed, networks


def render_metrics(sources, kept, failed, count):
    out = Exposition()
    out.family('llm_door_banned_addresses', 'gauge',
               'Client addresses (or networks) that home banned, dropped at the door.', [({}, count)])
    out.family('llm_door_bans_source_up', 'gauge', '1 when the last pull of a home\'s list of banned addresses worked.',
               [({'source': url}, url not in failed) for url in sources])
    out.family('llm_door_bans_source_last_success_timestamp_seconds', 'gauge', 'When a home\'s list was last pulled.',
               [({'source': url}, round(float(kept[url]['fetched_at']), 3)) for url in sources if url in kept])
    return out.text()


def table_exists():
    return subprocess.run([NFT, 'list', 'table', 'inet', TABLE], capture_output=True, check=False).returncode == 0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='the JSON file the role writes')
    args = parser.parse_args(argv)
    _log.setup(LOG.name)
    try:
        config = read_settings(args.config)
    except ValueError as exc:
        LOG.error('%s', exc)
        return 2

    sources = list(config['sources'])
    state = read_state(config['state'])
    timeout = float(config.get('timeout_s', 5))
    kept, failed, networks = gather(sources, state, time.time(), float(config.get('max_age_s', 3600)),
                                    lambda url: fetch(url, timeout))
    v4, v6 = collapse(networks)
    ruleset = render_table(v4, v6, [int(p) for p in config['ports']])

    applied = False
    if ruleset != state.get('ruleset') or not table_exists():
        proc = subprocess.run([NFT, '-f', '-'], input=ruleset, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            LOG.error('nft refused the table: %s', proc.stderr.strip())
            return 1
        applied = True
    write_atomically(config['state'], json.dumps({'ruleset': ruleset, 'sources': kept}), mode=0o600)
    write_atomically(config['metrics'], render_metrics(sources, kept, failed, len(v4) + len(v6)))
    # The answer, on standard output: the role reads it (changed, and the sources not pulled).
    print(json.dumps({'applied': applied, 'addresses': len(v4) + len(v6), 'failed': failed}))
    return 0


if __name__ == '__main__':
    sys.exit(main())
