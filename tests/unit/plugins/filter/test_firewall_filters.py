# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/firewall.py, and the firewall role's rules as nft reads them."""

from __future__ import annotations

import os

import pytest
import yaml

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
RULES_TEMPLATE = os.path.join(REPO_ROOT, 'roles', 'firewall', 'templates', 'rules.nft.j2')

HOME = {'role': 'home', 'ssh_port': 22, 'ssh_allow_from': [], 'lan_subnets': ['192.168.1.0/24'],
        'tunnel_subnet': '10.77.0.0/24', 'web_ports': [80, 443], 'proxy_protocol_ports': [8081, 8443],
        'proxy_protocol_sources': ['10.77.0.1'], 'monitoring_ports': [9090, 9100],
        'monitoring_sources': ['10.77.0.0/24'], 'ups_port': 3493, 'ups_sources': [],
        'wireguard_port': 51820, 'rollback_after_s': 45,
        'controller_address': '192.168.1.20'}
VPS = dict(HOME, role='vps', lan_subnets=[], ssh_allow_from=[], proxy_protocol_ports=[],
           proxy_protocol_sources=[], controller_address='203.0.113.9')


def errors(render, base, **change):
    return render('{{ s | homelab.llm_server.firewall_errors }}', s=dict(base, **change))['value']


def test_good_settings_have_no_errors(render):
    assert errors(render, HOME) == []
    assert errors(render, VPS) == []


@pytest.mark.parametrize('base, change, expected', [
    (VPS, {'ssh_allow_from': ['198.51.100.0/24']},
     'SSH would be closed to this controller: it connects from 203.0.113.9, which is in none of '
     'firewall_ssh_allow_from (198.51.100.0/24). Add it'),
    (HOME, {'controller_address': '203.0.113.9'},
     'it connects from 203.0.113.9, which is in none of firewall_lan_subnets, the tunnel subnet or '
     'firewall_ssh_allow_from (192.168.1.0/24, 10.77.0.0/24)'),
    (HOME, {'lan_subnets': ['192.168.1.0/33']}, "firewall_lan_subnets entry '192.168.1.0/33' is not an address"),
    (HOME, {'lan_subnets': []}, 'firewall_lan_subnets is empty'),
    (HOME, {'monitoring_ports': [443]}, 'firewall_web_ports and firewall_monitoring_ports both open TCP port 443'),
    (VPS, {'ssh_port': 443}, 'firewall_ssh_port and firewall_web_ports both open TCP port 443'),
    (HOME, {'web_ports': [80, 'https']}, "firewall_web_ports: 'https' is not a TCP port"),
    (VPS, {'wireguard_port': 70000}, "firewall_wireguard_port '70000' is not a UDP port"),
    (HOME, {'rollback_after_s': 5}, "firewall_rollback_after_s '5' must be 10 to 600 seconds"),
    (HOME, {'role': 'edge'}, "firewall_host_role 'edge' must be home or vps"),
    (HOME, {'ups_port': 9090}, 'firewall_monitoring_ports and firewall_ups_port both open TCP port 9090'),
    (HOME, {'ups_sources': ['nas.lan']}, "firewall_ups_sources entry 'nas.lan' is not an address"),
])
def test_mistakes_are_named(render, base, change, expected):
    found = errors(render, base, **change)
    assert any(expected in message for message in found), found


def test_controller_check_is_skipped_without_a_network_connection(render):
    assert errors(render, VPS, ssh_allow_from=['198.51.100.7'], controller_address='') == []
    # A VPS without an allow-list takes SSH from anywhere, the controller included.
    assert errors(render, VPS, controller_address='198.51.100.7') == []
    # The tunnel counts at home: a controller coming through it is let in.
    assert errors(render, HOME, controller_address='10.77.0.1') == []


def test_sources_split_by_family(render):
    value = render('{{ n | homelab.llm_server.firewall_sources }}',
                   n=['fd00::/64', '192.168.1.0/24', '10.77.0.1', '10.77.0.1/32', '192.168.1.7/24'])['value']
    assert value == {'v4': ['10.77.0.1', '192.168.1.0/24'], 'v6': ['fd00::/64']}


def _rules(render, **variables):
    defaults = {
        'firewall_host_role': 'home', 'firewall_ssh_port': 22, 'firewall_ssh_allow_from': [],
        '_firewall_lan': ['192.168.1.0/24', 'fd00:1::/64'], 'firewall_tunnel_subnet': '10.77.0.0/24',
        'firewall_web_ports': [80, 443], 'firewall_wireguard_port': 51820,
        'firewall_proxy_protocol_ports': [8081, 8443], 'firewall_proxy_protocol_sources': ['10.77.0.1'],
        'firewall_monitoring_ports': [9090, 9100], 'firewall_monitoring_sources': ['10.77.0.0/24'],
        'firewall_monitoring_refused': [],
        'firewall_extra_rules': [], 'firewall_block_forwarding': False,
        'firewall_ups_port': 3493, 'firewall_ups_sources': [],
    }
    defaults.update(variables)
    with open(RULES_TEMPLATE, encoding='utf-8') as handle:
        result = render(handle.read(), **defaults)
    assert 'value' in result, result
    return 'table inet llm_firewall {\n%s\n}\n' % result['value']


def test_home_rules(render, nft_check):
    ruleset = _rules(render)
    assert 'ip saddr { 10.77.0.0/24, 192.168.1.0/24 } tcp dport 22 accept' in ruleset
    assert 'ip6 saddr { fd00:1::/64 } tcp dport 22 accept' in ruleset
    assert 'ip saddr { 192.168.1.0/24 } tcp dport { 80, 443 } accept' in ruleset
    assert 'ip saddr { 10.77.0.1 } tcp dport { 8081, 8443 } accept' in ruleset
    assert 'ip saddr { 10.77.0.0/24 } tcp dport { 9090, 9100 } accept' in ruleset
    assert 'hook forward' not in ruleset
    check = nft_check(ruleset)
    assert check.returncode == 0, check.stderr


def test_vps_rules(render, nft_check):
    ruleset = _rules(render, firewall_host_role='vps', _firewall_lan=[], firewall_proxy_protocol_ports=[],
                     firewall_proxy_protocol_sources=[], firewall_ssh_allow_from=['198.51.100.7', '2001:db8::/48'],
                     firewall_block_forwarding=True, firewall_monitoring_sources=[])
    assert 'ip saddr { 198.51.100.7 } tcp dport 22 accept' in ruleset
    assert 'ip6 saddr { 2001:db8::/48 } tcp dport 22 accept' in ruleset
    assert '\n        tcp dport { 80, 443 } accept' in ruleset
    assert 'udp dport 51820 accept' in ruleset
    assert 'type filter hook forward priority filter; policy drop;' in ruleset
    assert '9100' not in ruleset
    check = nft_check(ruleset)
    assert check.returncode == 0, check.stderr


def test_home_refuses_monitoring_to_the_vps_before_it_accepts_the_tunnel(render, nft_check):
    ruleset = _rules(render, firewall_monitoring_refused=['10.77.0.1'])
    drop = 'ip saddr { 10.77.0.1 } tcp dport { 9090, 9100 } drop comment "monitoring never from these"'
    accept = 'ip saddr { 10.77.0.0/24 } tcp dport { 9090, 9100 } accept comment "monitoring"'
    assert drop in ruleset and accept in ruleset
    assert ruleset.index(drop) < ruleset.index(accept)
    # The door's listeners stay open to the VPS.
    assert 'ip saddr { 10.77.0.1 } tcp dport { 8081, 8443 } accept' in ruleset
    assert nft_check(ruleset).returncode == 0


def test_vps_opens_its_node_exporter_to_home_alone(render, nft_check):
    ruleset = _rules(render, firewall_host_role='vps', _firewall_lan=[], firewall_proxy_protocol_ports=[],
                     firewall_proxy_protocol_sources=[], firewall_monitoring_ports=[9100],
                     firewall_monitoring_sources=['10.77.0.2'])
    assert 'ip saddr { 10.77.0.2 } tcp dport { 9100 } accept comment "monitoring"' in ruleset
    assert '10.77.0.0/24' not in ruleset and '9090' not in ruleset
    assert nft_check(ruleset).returncode == 0


def _default(render, name, **variables):
    with open(os.path.join(REPO_ROOT, 'roles', 'firewall', 'vars', 'main.yml'), encoding='utf-8') as handle:
        expressions = yaml.safe_load(handle)
    values = dict({'firewall_tunnel_subnet': '10.77.0.0/24'}, **variables)
    # Variables reach the templar as data, not templates: the one this uses goes first.
    for first in ('_firewall_vps_homes', '_firewall_dialled_vps'):
        values[first] = render(expressions[first], **values)['value']
    return render(expressions[name], **values)


# What the inventory says: a home server dialling edge-vps, another home
# dialling it too, and a third that dials no VPS.
INVENTORY = {
    'groups': {'all': ['llm-home', 'second-home', 'lan-only', 'edge-vps']},
    'hostvars': {
        'llm-home': {'inventory_hostname': 'llm-home', 'wireguard_vps': 'edge-vps', 'wireguard_address': '10.77.0.2'},
        'second-home': {'inventory_hostname': 'second-home', 'wireguard_vps': 'edge-vps',
                        'wireguard_address': '10.77.0.3'},
        'lan-only': {'inventory_hostname': 'lan-only'},
        'edge-vps': {'inventory_hostname': 'edge-vps', 'wireguard_address': '10.77.0.1'},
    },
}


@pytest.mark.parametrize('host, role, ports, sources, refused', [
    ('llm-home', 'home', [9090, 9093, 9100, 9115], ['10.77.0.0/24'], ['10.77.0.1']),
    ('edge-vps', 'vps', [9100], ['10.77.0.2', '10.77.0.3'], []),
    ('lan-only', 'home', [9090, 9093, 9100, 9115], ['10.77.0.0/24'], []),
])
def test_monitoring_defaults_follow_the_inventory(render, host, role, ports, sources, refused):
    host_vars = dict(INVENTORY['hostvars'][host], firewall_host_role=role, groups=INVENTORY['groups'],
                     hostvars=INVENTORY['hostvars'])
    assert _default(render, '_firewall_default_monitoring_ports', **host_vars)['value'] == ports
    assert _default(render, '_firewall_default_monitoring_sources', **host_vars)['value'] == sources
    assert _default(render, '_firewall_default_monitoring_refused', **host_vars)['value'] == refused
    # The door's listeners take the same address when nginx_proxy_protocol_trusted is not set.
    assert _default(render, '_firewall_default_proxy_protocol_sources', **host_vars)['value'] == refused
    assert _default(render, '_firewall_default_proxy_protocol_sources', nginx_proxy_protocol_trusted=['10.77.0.9'],
                    **host_vars)['value'] == (['10.77.0.9'] if role == 'home' else [])


def test_vps_without_allow_list_takes_ssh_from_anywhere(render, nft_check):
    ruleset = _rules(render, firewall_host_role='vps', _firewall_lan=[], firewall_monitoring_sources=[])
    assert '\n        tcp dport 22 accept comment "ssh"' in ruleset
    assert nft_check(ruleset).returncode == 0


def test_a_misspelt_extra_rule_is_refused_by_nft(render, nft_check):
    check = nft_check(_rules(render, firewall_extra_rules=['tcp dport 8080 acept']))
    assert check.returncode != 0 and 'syntax error' in check.stderr


def test_upsd_is_closed_unless_it_has_followers(render, nft_check):
    assert '3493' not in _rules(render)
    ruleset = _rules(render, firewall_ups_sources=['192.168.1.0/24', 'fd00:1::/64'])
    assert 'ip saddr { 192.168.1.0/24 } tcp dport 3493 accept comment "the UPS for its followers"' in ruleset
    assert 'ip6 saddr { fd00:1::/64 } tcp dport 3493 accept' in ruleset
    assert nft_check(ruleset).returncode == 0


@pytest.mark.parametrize('variables, expected', [
    ({}, []),
    ({'ups_netserver': True, 'ups_enabled': True}, ['192.168.1.0/24']),
    # The ups role is off unless the inventory turns it on.
    ({'ups_netserver': True}, []),
    ({'ups_netserver': True, 'ups_enabled': False}, []),
    ({'ups_netserver': True, 'firewall_host_role': 'vps'}, []),
])
def test_upsd_opens_to_the_lan_with_the_ups_roles_netserver(render, variables, expected):
    with open(os.path.join(REPO_ROOT, 'roles', 'firewall', 'vars', 'main.yml'), encoding='utf-8') as handle:
        expression = yaml.safe_load(handle)['_firewall_default_ups_sources']
    values = dict({'firewall_host_role': 'home', '_firewall_lan': ['192.168.1.0/24']}, **variables)
    assert render(expression, **values)['value'] == expected
