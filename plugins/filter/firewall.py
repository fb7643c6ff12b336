# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the default-deny nftables firewall of home servers and VPSes."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _firewall


def firewall_errors(settings):
    """What is wrong with one host's firewall settings; [] when nothing is."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError('firewall_errors: expects a dict of firewall settings')
    return _firewall.firewall_errors(settings)


def firewall_sources(networks):
    """Addresses and networks split into IPv4 and IPv6 lists for nft."""
    if not isinstance(networks, (list, tuple)):
        raise AnsibleFilterError('firewall_sources: expects a list of addresses or networks')
    return _firewall.firewall_sources(networks)


class FilterModule(object):
    """Firewall filters."""

    def filters(self):
        return {
            'firewall_errors': firewall_errors,
            'firewall_sources': firewall_sources,
        }
