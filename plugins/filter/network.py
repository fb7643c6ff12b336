# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for addresses and networks, with Python's ipaddress (no netaddr on the controller)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _addresses


def _is_network(value):
    # Host bits may be set (127.0.0.1/8 is fail2ban's own example).
    return (isinstance(value, str) and value != '' and value.strip() == value
            and _addresses.network(value, strict=False) is not None)


def not_ip_networks(values):
    """The entries of ``values`` that are neither an IP address nor a network in CIDR notation."""
    if not isinstance(values, (list, tuple)):
        raise AnsibleFilterError('not_ip_networks: expects a list, got %s' % type(values).__name__)
    return [value for value in values if not _is_network(value)]


def public_addresses(values):
    """The entries of ``values`` that reach beyond this host's own networks: every address (0.0.0.0, ::) or a
    globally routable one. Private, loopback, link-local and shared (100.64.0.0/10) addresses are not public."""
    if not isinstance(values, (list, tuple)):
        raise AnsibleFilterError('public_addresses: expects a list, got %s' % type(values).__name__)
    found = []
    for value in values:
        ip = _addresses.address(value) if isinstance(value, str) else None
        if ip is not None and (ip.is_unspecified or ip.is_global):
            found.append(value)
    return found


class FilterModule(object):
    """Address filters."""

    def filters(self):
        return {
            'not_ip_networks': not_ip_networks,
            'public_addresses': public_addresses,
        }
