# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The default-deny firewall of a home server or a VPS, judged before any change.

Pure functions over the settings the firewall role gathers for one host: the
role turns every message into a stop that names the variable and the fix, and
renders its nftables table from ``firewall_sources``.
"""

from __future__ import annotations

from ansible_collections.homelab.llm_server.plugins.module_utils import _addresses

# Which variable each source list comes from, for the messages.
SOURCE_VARIABLES = {
    'lan_subnets': 'firewall_lan_subnets',
    'ssh_allow_from': 'firewall_ssh_allow_from',
    'proxy_protocol_sources': 'firewall_proxy_protocol_sources',
    'monitoring_sources': 'firewall_monitoring_sources',
    'monitoring_refused': 'firewall_monitoring_refused',
    'ups_sources': 'firewall_ups_sources',
}
PORT_VARIABLES = {
    'ssh_port': 'firewall_ssh_port',
    'web_ports': 'firewall_web_ports',
    'proxy_protocol_ports': 'firewall_proxy_protocol_ports',
    'monitoring_ports': 'firewall_monitoring_ports',
    'ups_port': 'firewall_ups_port',
}


def _network(value):
    return _addresses.network(value, strict=False)


def _port(value):
    if isinstance(value, bool):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        return None
    return port if 1 <= port <= 65535 and str(value).strip() == str(port) else None


def firewall_sources(networks):
    """Split addresses and networks into sorted IPv4 and IPv6 lists, as nft wants them."""
    split = {'v4': [], 'v6': []}
    for network in sorted({n for n in (_network(v) for v in networks or []) if n is not None},
                          key=lambda n: (n.version, n)):
        text = str(network.network_address) if network.num_addresses == 1 else str(network)
        split['v4' if network.version == 4 else 'v6'].append(text)
    return split


def ssh_sources(settings):
    """Where SSH is accepted from: None means from anywhere."""
    if settings.get('role') == 'vps':
        return list(settings.get('ssh_allow_from') or []) or None
    sources = list(settings.get('lan_subnets') or []) + list(settings.get('ssh_allow_from') or [])
    if settings.get('tunnel_subnet'):
        sources.append(settings['tunnel_subnet'])
    return sources


def firewall_errors(settings):
    """Messages for what is wrong with one host's firewall settings, [] when nothing is.

    ``settings``: role ('home' or 'vps'), ssh_port, lan_subnets, ssh_allow_from,
    tunnel_subnet ('' without a tunnel), web_ports, proxy_protocol_ports,
    proxy_protocol_sources, monitoring_ports, monitoring_sources, ups_port,
    ups_sources (NUT's upsd for machines that follow the UPS), wireguard_port (VPS), rollback_after_s, and controller_address: the
    address the host sees this controller's SSH connection come from ('' when
    the connection is not over the network).
    """
    errors = []
    role = settings.get('role')
    if role not in ('home', 'vps'):
        errors.append("firewall_host_role '%s' must be home or vps." % role)
        return errors

    for key, variable in SOURCE_VARIABLES.items():
        for entry in settings.get(key) or []:
            if _network(entry) is None:
                errors.append("%s entry '%s' is not an address or network such as 192.168.1.0/24 or "
                              "2001:db8::/64." % (variable, entry))
    if settings.get('tunnel_subnet') and _network(settings['tunnel_subnet']) is None:
        errors.append("firewall_tunnel_subnet '%s' is not a network such as 10.77.0.0/24."
                      % settings['tunnel_subnet'])
    if role == 'home' and not settings.get('lan_subnets'):
        errors.append("firewall_lan_subnets is empty and the host has no default IPv4 route to take its LAN "
                      "from: list the LAN's subnets, or nothing on the LAN could reach SSH or the API.")

    # One port, one purpose: a port opened for two would open it to both's sources.
    claimed = {}
    for key, variable in PORT_VARIABLES.items():
        values = settings.get(key)
        values = values if isinstance(values, list) else [values]
        for value in values:
            port = _port(value)
            if port is None:
                errors.append("%s: '%s' is not a TCP port (1 to 65535)." % (variable, value))
            elif port in claimed and claimed[port] != variable:
                errors.append("%s and %s both open TCP port %d: give each service its own port."
                              % (claimed[port], variable, port))
            else:
                claimed[port] = variable
    if role == 'vps' and _port(settings.get('wireguard_port')) is None:
        errors.append("firewall_wireguard_port '%s' is not a UDP port (1 to 65535)." % settings.get('wireguard_port'))

    window = settings.get('rollback_after_s')
    if _port(window) is None or not 10 <= int(window) <= 600:
        errors.append("firewall_rollback_after_s '%s' must be 10 to 600 seconds: long enough for this "
                      "controller to reconnect, short enough to wait for." % window)

    controller = _addresses.address(settings.get('controller_address') or '')
    sources = ssh_sources(settings)
    if controller is not None and sources is not None and not errors:
        if not any(controller in _network(s) for s in sources):
            errors.append(
                "SSH would be closed to this controller: it connects from %s, which is in none of %s (%s). "
                "Add it (or its network) to firewall_ssh_allow_from, or the firewall would lock the play out."
                % (controller,
                   'firewall_ssh_allow_from' if role == 'vps' else
                   'firewall_lan_subnets, the tunnel subnet or firewall_ssh_allow_from',
                   ', '.join(str(s) for s in sources) or 'nothing'))
    return errors
