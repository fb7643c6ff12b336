# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the WireGuard tunnel between home servers and a VPS."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _tunnel


def _hosts(value, name):
    if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
        raise AnsibleFilterError('%s: expects a dict of inventory name to host settings' % name)
    return value


def tunnel_errors(hosts):
    """What is wrong with the tunnel the play's hosts describe; [] when nothing is."""
    return _tunnel.tunnel_errors(_hosts(hosts, 'tunnel_errors'))


def tunnel_peers(hosts, vps):
    """The home servers of the play that dial ``vps``."""
    return _tunnel.vps_peers(_hosts(hosts, 'tunnel_peers'), vps)


class FilterModule(object):
    """Tunnel filters."""

    def filters(self):
        return {
            'tunnel_errors': tunnel_errors,
            'tunnel_peers': tunnel_peers,
        }
