# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The WireGuard tunnel between home servers and a VPS, judged before any change.

Pure functions over what the inventory says about each host of the play: the
role turns every message into a stop that names the variable and the fix.
"""

from __future__ import annotations

from ansible_collections.homelab.llm_server.plugins.module_utils import _addresses


def _network(value):
    return _addresses.network(value, strict=True)


def tunnel_errors(hosts):
    """Messages for what is wrong with the tunnel, [] when nothing is.

    ``hosts`` maps each inventory name of the play to a dict with: address
    (its tunnel address), subnet (the tunnel's subnet), vps (home: the VPS it
    dials; '' on the VPS), public_address (VPS: what home dials), port (VPS:
    its UDP port) and lan_subnets (home: the LAN's subnets).
    """
    errors = []
    vpses = {name for name, host in hosts.items() if not host.get('vps')}
    seen = {}
    for name in sorted(hosts):
        host = hosts[name]
        subnet = _network(host.get('subnet'))
        if subnet is None:
            errors.append("%s: wireguard_subnet '%s' is not a network such as 10.77.0.0/24 (an address with "
                          "the host bits zero and a prefix length)." % (name, host.get('subnet')))
            continue
        address = _addresses.address(host.get('address'))
        if address is None:
            errors.append("%s: wireguard_address '%s' is not an IP address: give each host of the tunnel one "
                          "address of wireguard_subnet (%s) in its host_vars." % (name, host.get('address'), subnet))
        elif address not in subnet or address in (subnet.network_address, subnet.broadcast_address):
            errors.append("%s: wireguard_address %s is not a host address of wireguard_subnet %s: pick one "
                          "inside it." % (name, address, subnet))
        elif str(address) in seen:
            errors.append("%s: wireguard_address %s is also %s's: give each host its own."
                          % (name, address, seen[str(address)]))
        else:
            seen[str(address)] = name
        for lan in host.get('lan_subnets') or []:
            lan_net = _network(lan)
            if lan_net is None:
                errors.append("%s: wireguard_lan_subnets names '%s', which is not a network such as "
                              "192.168.1.0/24." % (name, lan))
            elif lan_net.version == subnet.version and lan_net.overlaps(subnet):
                errors.append("%s: wireguard_subnet %s overlaps the LAN %s (wireguard_lan_subnets): packets "
                              "for one would be routed to the other. Pick a tunnel subnet the LAN does not use, "
                              "such as 10.77.0.0/24." % (name, subnet, lan_net))
        if host.get('vps'):
            if host['vps'] not in hosts:
                errors.append("%s: wireguard_vps names '%s', which is not a host of this play: add it to the "
                              "vps group (or name the VPS's inventory name)." % (name, host['vps']))
            elif host['vps'] not in vpses:
                errors.append("%s: wireguard_vps names '%s', which dials a VPS itself: name the VPS, a host "
                              "without wireguard_vps." % (name, host['vps']))
            elif _network(hosts[host['vps']].get('subnet')) != subnet:
                errors.append("%s: wireguard_subnet %s differs from its VPS %s's (%s): both ends of a tunnel "
                              "share one subnet." % (name, subnet, host['vps'], hosts[host['vps']].get('subnet')))
            continue
        public = str(host.get('public_address') or '').strip()
        if not public:
            errors.append("%s: a VPS needs wireguard_public_address, the address or DNS name the home server "
                          "dials (its public IPv4 address, e.g. 203.0.113.10)." % name)
            continue
        public_ip = _addresses.address(public)
        if public_ip is not None and (public_ip.is_loopback or public_ip.is_unspecified or public_ip.is_link_local
                                      or public_ip.is_multicast or public_ip in subnet):
            errors.append("%s: wireguard_public_address %s cannot be dialled from home (loopback, link-local, "
                          "unspecified, multicast or inside the tunnel itself): give the VPS's public address."
                          % (name, public_ip))
        port = host.get('port')
        if not isinstance(port, int) or not 1 <= port <= 65535:
            errors.append("%s: wireguard_port must be a UDP port from 1 to 65535, not %r." % (name, port))
    for vps in sorted(vpses):
        if not any(host.get('vps') == vps for host in hosts.values()):
            errors.append("%s: no home server of this play dials this VPS, and it has met none in an earlier "
                          "run: set wireguard_vps: %s on the home server, and run both ends together (a first "
                          "--limit must name the home server too)." % (vps, vps))
    return errors


def vps_peers(hosts, vps):
    """The home servers that dial ``vps``, sorted."""
    return sorted(name for name, host in hosts.items() if host.get('vps') == vps)
