# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-door-bans (host/llm_server_host/door_bans.py): the VPS's pull of home's bans into an nftables table."""

from __future__ import annotations

import ipaddress
import json

from llm_server_host import door_bans as bans

# What home's action writes (llm-http-ban's render_banned).
HOME_LIST = """# Client addresses banned by fail2ban (jail llm-http) through llm-http-ban.
# Rewritten at every ban and unban: do not edit. Included by nginx's
# geo $llm_banned; a banned address gets 403.
198.51.100.7 1;
203.0.113.0/24 1;
203.0.113.9 1;
2001:db8::5 1;
not-an-address 1;
"""


def test_the_home_list_is_read_and_overlaps_collapse():
    v4, v6 = bans.collapse(bans.parse_list(HOME_LIST))
    assert v4 == ['198.51.100.7/32', '203.0.113.0/24']
    assert v6 == ['2001:db8::5/128']


def test_an_empty_list_gives_empty_sets():
    text = bans.render_table([], [], [443, 80])
    assert 'elements' not in text
    assert 'tcp dport { 80, 443 } drop' in text


def test_nft_accepts_the_table(nft_check):
    v4, v6 = bans.collapse(bans.parse_list(HOME_LIST))
    for text in (bans.render_table(v4, v6, [80, 443]), bans.render_table([], [], [80, 443])):
        proc = nft_check(text)
        assert proc.returncode == 0, proc.stderr


def test_a_failed_pull_keeps_the_last_addresses_until_they_are_too_old():
    def down(url):
        raise OSError('connection refused')
    state = {'sources': {'http://h/b': {'fetched_at': 1000.0, 'addresses': ['198.51.100.7/32']}}}
    kept, failed, networks = bans.gather(['http://h/b'], state, 1000.0 + 60, 3600, down)
    assert failed == ['http://h/b']
    assert networks == [ipaddress.ip_network('198.51.100.7/32')]
    assert kept['http://h/b']['fetched_at'] == 1000.0
    kept, failed, networks = bans.gather(['http://h/b'], state, 1000.0 + 3601, 3600, down)
    assert failed == ['http://h/b'] and networks == [] and kept == {}


def test_each_home_counts_and_the_metrics_say_which_failed():
    lists = {'http://a/b': '198.51.100.7 1;\n', 'http://c/b': None}

    def fetcher(url):
        if lists[url] is None:
            raise OSError('timed out')
        return lists[url]
    kept, failed, networks = bans.gather(list(lists), {}, 2000.0, 3600, fetcher)
    text = bans.render_metrics(list(lists), kept, failed, len(networks))
    assert 'llm_door_banned_addresses 1\n' in text
    assert 'llm_door_bans_source_up{source="http://a/b"} 1\n' in text
    assert 'llm_door_bans_source_up{source="http://c/b"} 0\n' in text
    assert 'llm_door_bans_source_last_success_timestamp_seconds{source="http://a/b"} 2000\n' in text
    assert 'source="http://c/b"} 2000' not in text


def test_settings_that_cannot_be_read_are_an_error_in_the_journal(tmp_path, capsys):
    assert bans.main([str(tmp_path / 'missing.json')]) == 2
    out, err = capsys.readouterr()
    assert out == '' and err.startswith('llm-door-bans: cannot read %s' % (tmp_path / 'missing.json'))


def test_the_answer_is_on_standard_output_for_the_role(tmp_path, capsys, monkeypatch):
    # roles/http_ban/tasks/vps.yml reads stdout as JSON: applied (changed) and the sources not pulled.
    config = tmp_path / 'door-bans.json'
    config.write_text(json.dumps({'sources': [], 'ports': [443], 'state': str(tmp_path / 'state.json'),
                                  'metrics': str(tmp_path / 'bans.prom')}))
    monkeypatch.setattr(bans, 'NFT', 'true')
    monkeypatch.setattr(bans, 'table_exists', lambda: False)
    assert bans.main([str(config)]) == 0
    out, _err = capsys.readouterr()
    assert json.loads(out) == {'applied': True, 'addresses': 0, 'failed': []}
