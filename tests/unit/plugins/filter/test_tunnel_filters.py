# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/tunnel.py through Ansible's templating, the way the wireguard role uses it."""

from __future__ import annotations

import copy

import pytest


GOOD = {
    'llm-home': {'address': '10.77.0.2', 'subnet': '10.77.0.0/24', 'vps': 'edge', 'public_address': '',
                 'port': 51820, 'lan_subnets': ['192.168.1.0/24']},
    'edge': {'address': '10.77.0.1', 'subnet': '10.77.0.0/24', 'vps': '', 'public_address': '203.0.113.10',
             'port': 51820, 'lan_subnets': []},
}


def errors(render, change=None):
    hosts = copy.deepcopy(GOOD)
    for host, values in (change or {}).items():
        hosts.setdefault(host, {}).update(values)
    return render('{{ hosts | homelab.llm_server.tunnel_errors }}', hosts=hosts)['value']


def test_a_good_tunnel_has_no_errors(render):
    assert errors(render) == []


def test_peers_of_a_vps(render):
    hosts = copy.deepcopy(GOOD)
    hosts['second-home'] = dict(GOOD['llm-home'], address='10.77.0.3')
    assert render("{{ hosts | homelab.llm_server.tunnel_peers('edge') }}", hosts=hosts)['value'] == [
        'llm-home', 'second-home']


@pytest.mark.parametrize('change, expected', [
    ({'llm-home': {'lan_subnets': ['10.77.0.0/16']}},
     'llm-home: wireguard_subnet 10.77.0.0/24 overlaps the LAN 10.77.0.0/16 (wireguard_lan_subnets)'),
    ({'llm-home': {'lan_subnets': ['192.168.1.0/33']}}, "wireguard_lan_subnets names '192.168.1.0/33'"),
    ({'edge': {'public_address': ''}}, 'edge: a VPS needs wireguard_public_address'),
    ({'edge': {'public_address': '127.0.0.1'}}, 'edge: wireguard_public_address 127.0.0.1 cannot be dialled'),
    ({'edge': {'public_address': '10.77.0.9'}}, 'edge: wireguard_public_address 10.77.0.9 cannot be dialled'),
    ({'edge': {'port': 70000}}, 'edge: wireguard_port must be a UDP port from 1 to 65535'),
    ({'llm-home': {'address': '10.77.1.2'}},
     'llm-home: wireguard_address 10.77.1.2 is not a host address of wireguard_subnet 10.77.0.0/24'),
    ({'llm-home': {'address': '10.77.0.255'}}, 'wireguard_address 10.77.0.255 is not a host address'),
    ({'llm-home': {'address': 'home'}}, "llm-home: wireguard_address 'home' is not an IP address"),
    ({'llm-home': {'address': '10.77.0.1'}}, "wireguard_address 10.77.0.1 is also edge's"),
    ({'llm-home': {'subnet': '10.77.0.1/24', 'address': '10.77.0.2'}},
     "llm-home: wireguard_subnet '10.77.0.1/24' is not a network"),
    ({'llm-home': {'vps': 'elsewhere'}}, "wireguard_vps names 'elsewhere', which is not a host of this play"),
    ({'llm-home': {'vps': 'edge'}, 'edge': {'vps': 'llm-home'}}, 'which dials a VPS itself'),
    ({'llm-home': {'subnet': '10.78.0.0/24', 'address': '10.78.0.2'}}, 'differs from its VPS edge'),
])
def test_mistakes_are_named(render, change, expected):
    found = errors(render, change)
    assert any(expected in message for message in found), found


def test_a_vps_without_home_server(render):
    found = render('{{ hosts | homelab.llm_server.tunnel_errors }}', hosts={'edge': GOOD['edge']})['value']
    assert found == ['edge: no home server of this play dials this VPS, and it has met none in an earlier run: set '
                     'wireguard_vps: edge on the home server, and run both ends together (a first --limit must name '
                     'the home server too).']


def test_not_a_dict(render):
    assert 'tunnel_errors: expects a dict' in render('{{ [1] | homelab.llm_server.tunnel_errors }}')['error']
