# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Addresses and networks from inventory values, None for what is neither (Python's ipaddress, no netaddr)."""

from __future__ import annotations

import ipaddress


def network(value, strict=True):
    """The network ``value`` names; strict=False lets host bits be set (192.168.1.7/24)."""
    try:
        return ipaddress.ip_network(str(value), strict=strict)
    except ValueError:
        return None


def address(value):
    """The single address ``value`` names."""
    try:
        return ipaddress.ip_address(str(value))
    except ValueError:
        return None
