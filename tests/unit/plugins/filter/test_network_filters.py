# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/network.py through Ansible's templating, the way the http_ban role uses it."""

from __future__ import annotations

import pytest


def bad(render, values):
    return render('{{ values | homelab.llm_server.not_ip_networks }}', values=values)['value']


def test_addresses_and_networks_pass(render):
    assert bad(render, ['127.0.0.1/8', '::1', '10.77.0.1', '192.168.1.0/24', '2001:db8::/32']) == []


@pytest.mark.parametrize('entry', ['router.lan', '', '192.168.1.0/33', '10.0.0.256', ' 10.0.0.1', '10.0.0.0/24 ',
                                   '2001:db8::/129', '10.0.0.1-10.0.0.9'])
def test_wrong_entries_are_returned(render, entry):
    assert bad(render, ['127.0.0.1/8', entry]) == [entry]


def test_not_a_list(render):
    assert 'expects a list' in render('{{ "10.0.0.1" | homelab.llm_server.not_ip_networks }}')['error']


def public(render, values):
    return render('{{ values | homelab.llm_server.public_addresses }}', values=values)['value']


def test_own_networks_are_not_public(render):
    assert public(render, ['127.0.0.1', '::1', '10.77.0.2', '192.168.1.20', '172.16.0.1', 'fd00::7',
                           '100.64.1.1', '169.254.0.1', 'fe80::1', '203.0.113.7', 'router.lan', '10.0.0.0/8']) == []


@pytest.mark.parametrize('entry', ['0.0.0.0', '::', '8.8.8.8', '2a00:1450:4001::1', '198.51.99.1'])
def test_every_address_and_global_ones_are_public(render, entry):
    assert public(render, ['127.0.0.1', entry]) == [entry]


def test_public_not_a_list(render):
    assert 'expects a list' in render('{{ "0.0.0.0" | homelab.llm_server.public_addresses }}')['error']
