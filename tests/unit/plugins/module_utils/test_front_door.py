# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_front_door.py: the nginx role's input checks, word for word as the role stops on them."""

from __future__ import annotations

import os
import sys

import pytest

# The checkout is the collection through .collections/ (see ansible.cfg).
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
sys.path.insert(0, os.path.join(REPO, '.collections'))

# pylint: disable-next=wrong-import-position
from ansible_collections.homelab.llm_server.plugins.module_utils._front_door import nginx_errors  # noqa: E402

K1 = 'sk-bad-input-0123456789abcdef'
K2 = 'sk-bad-input-fedcba9876543210'
ENGINE = {'name': 'engine-a', 'port': 8101, 'model': 'tiny', 'host': '127.0.0.1', 'standby': False}
# What the role's _nginx_settings holds for a valid host behind a VPS door (molecule/bad_input's start).
GOOD = {
    'auth_required': True, 'api_keys': [{'name': 'ops', 'key': K1}],
    'tls_mode': 'selfsigned', 'certbot_email': '', 'acme_directory_url': 'https://acme-v02.api.letsencrypt.org/directory',
    'server_name': 'llm.lan', 'http_port': 80, 'https_port': 443, 'hsts_max_age': 31536000,
    'client_max_body_size': '8m', 'read_timeout_s': 300, 'connect_timeout_s': 2, 'upstream_max_fails': 1,
    'upstream_fail_timeout_s': 10, 'upstream_keepalive': 32, 'access_log': '/var/log/nginx/llm-access.log',
    'proxy_protocol_trusted': ['10.77.0.1'], 'proxy_protocol_https_port': 8443, 'proxy_protocol_http_port': 8081,
    'proxy_protocol_plain_port': 0, 'backends': [ENGINE], 'backends_given': True,
    'registry_dir': '/etc/llm-server/instances', 'check_mode': False,
    'metrics_enabled': True, 'metrics_listen_address': '127.0.0.1', 'metrics_port': 9836,
}
NO_BACKENDS = ('No backends: nginx_backends is empty and the serving registry (/etc/llm-server/instances) lists no '
               'engine on this host. Run the vllm or llamacpp role on this host first, or list the engines in '
               'nginx_backends ({name, port, model, host, standby}).')
BAD_BACKEND = ('needs a name of letters, digits and _ . @ - (its unit, NAME.service, is what a hold names), '
               'a port from 1 to 65535, a host name or IPv4 address (127.0.0.1 when the engine runs '
               'here), standby true or false, and a model name of letters, digits and . _ : / @ + - (the served '
               'model name clients send), not ')
METRICS = 'The request metrics exporter (llm-proxy-metrics, nginx_metrics_enabled): '


def errors(**change):
    return nginx_errors(dict(GOOD, **change))


def test_valid_settings_have_no_errors():
    assert not errors()
    # Without a door, without TLS (its port may then be the HTTP one's), without keys when none are required.
    assert not errors(proxy_protocol_trusted=[], tls_mode='none', https_port=80, auth_required=False, api_keys=[])
    assert not errors(tls_mode='certbot', certbot_email='admin@example.org')
    assert not errors(api_keys=[{'name': 'ops', 'key': K1, 'rate': '5r/s', 'burst': 10}, {'name': 'ci', 'key': K2}])
    assert not errors(proxy_protocol_plain_port=8082, proxy_protocol_trusted=['10.77.0.1', 'fd00::1/64'])
    # Check mode before the engines exist; an engine elsewhere may use the exporter's port.
    assert not errors(backends=[], check_mode=True)
    assert not errors(backends=[dict(ENGINE, host='10.0.0.5', port=9836)])
    assert not errors(metrics_enabled=False, metrics_listen_address='localhost', metrics_port=80)
    assert not errors(metrics_listen_address='::')


@pytest.mark.parametrize('change, expected', [
    # API keys.
    ({'api_keys': []}, ['nginx_api_keys is empty while nginx_auth_required is true: add at least one {name, key} '
                        '(keys from the vault), or set nginx_auth_required: false for a proxy open to everyone who '
                        'can reach it.']),
    ({'api_keys': [{'name': 'Ops', 'key': K1}]},
     ["nginx_api_keys: the name 'Ops' must be 1 to 64 lowercase letters, digits, _ or - (the access log and the "
      "rate limits go by it)."]),
    ({'api_keys': [{'name': 'ops', 'key': K1}, {'name': 'ops', 'key': K2}]},
     ['nginx_api_keys names ops more than once: give each key a name of its own.']),
    ({'api_keys': [{'name': 'ops', 'key': 'short'}]},
     ['nginx_api_keys: the key of ops must be a bearer token of at least 16 characters from A-Z a-z 0-9 . _ ~ + / - '
      '(trailing = allowed), such as the output of `openssl rand -hex 32`.']),
    ({'api_keys': [{'name': 'c', 'key': K2}, {'name': 'a', 'key': K1}, {'name': 'b', 'key': K1}, {'name': 'd', 'key': K2}]},
     ['nginx_api_keys: a and b have the same key: give each name a key of its own.',
      'nginx_api_keys: c and d have the same key: give each name a key of its own.']),
    # Bearer tokens are case-sensitive, as nginx's map of them (a ~ regex) is: two keys.
    ({'api_keys': [{'name': 'a', 'key': K1}, {'name': 'b', 'key': K1.upper()}]}, []),
    ({'api_keys': [{'name': 'ops', 'key': K1, 'rate': '5/s'}]},
     ["nginx_api_keys: the rate of ops must be nginx syntax such as 5r/s or 60r/m, not '5/s'."]),
    ({'api_keys': [{'name': 'ops', 'key': K1, 'burst': 5}, {'name': 'ci', 'key': K2, 'burst': 0}]},
     ['nginx_api_keys: ops has a burst but no rate: add a rate such as 5r/s, or drop the burst.']),
    # TLS.
    ({'tls_mode': 'certbot'},
     ['nginx_certbot_email is empty: certbot (nginx_tls_mode: certbot) needs an email address for the ACME account; '
      'set nginx_certbot_email or choose nginx_tls_mode: selfsigned.']),
    ({'tls_mode': 'certbot', 'certbot_email': 'admin', 'acme_directory_url': 'ftp://acme'},
     ["nginx_certbot_email must be an email address such as admin@example.org, not 'admin'.",
      "nginx_acme_directory_url must be the URL of an ACME directory, such as "
      "https://acme-v02.api.letsencrypt.org/directory, not 'ftp://acme'."]),
    ({'server_name': 'a b'},
     ["nginx_server_name must be one host name or IP address (the certificate's name), not 'a b'."]),
    ({'http_port': 8080, 'https_port': 8080},
     ['nginx_http_port and nginx_https_port are both 8080: give them different ports.']),
    ({'hsts_max_age': -1},
     ['nginx_hsts_max_age must be 0 or more seconds (0 tells browsers to forget the HSTS policy).']),
    # Request limits and timeouts.
    ({'client_max_body_size': '8mb'},
     ["nginx_client_max_body_size must be an nginx size such as 8m or 512k, not '8mb'."]),
    ({'read_timeout_s': 0, 'connect_timeout_s': -1, 'upstream_fail_timeout_s': 0, 'upstream_keepalive': 0},
     ['nginx_read_timeout_s must be more than 0, not 0.', 'nginx_connect_timeout_s must be more than 0, not -1.',
      'nginx_upstream_fail_timeout_s must be more than 0, not 0.',
      'nginx_upstream_keepalive must be more than 0, not 0.']),
    ({'upstream_max_fails': -1}, ['nginx_upstream_max_fails must be 0 (never skip an engine) or more.']),
    ({'access_log': 'llm.log'}, ["nginx_access_log must be an absolute path, not 'llm.log'."]),
    ({'http_port': 0, 'https_port': 70000},
     ['nginx_http_port must be a port from 1 to 65535.', 'nginx_https_port must be a port from 1 to 65535.']),
    # A port given as text is not a port, as in the Jinja check.
    ({'http_port': '80'}, ['nginx_http_port must be a port from 1 to 65535.']),
    # PROXY protocol listeners.
    ({'proxy_protocol_trusted': ['vps.example', '10.77.0.1/24', '::ffff:1.2.3.4']},
     ["nginx_proxy_protocol_trusted: 'vps.example' is not an IPv4 or IPv6 address or CIDR range (the VPS's tunnel "
      "address, e.g. 10.77.0.1).",
      "nginx_proxy_protocol_trusted: '::ffff:1.2.3.4' is not an IPv4 or IPv6 address or CIDR range (the VPS's "
      "tunnel address, e.g. 10.77.0.1)."]),
    ({'proxy_protocol_https_port': 8101},
     ["Port 8101 is both a PROXY protocol listener (nginx_proxy_protocol_https_port or "
      "nginx_proxy_protocol_http_port) and the engine engine-a: give the PROXY protocol listener another port (and "
      "the VPS door's vps_door_home_*_port the same)."]),
    ({'proxy_protocol_http_port': 443},
     ["Port 443 is both a PROXY protocol listener (nginx_proxy_protocol_https_port or "
      "nginx_proxy_protocol_http_port) and nginx_https_port: give the PROXY protocol listener another port (and "
      "the VPS door's vps_door_home_*_port the same)."]),
    ({'proxy_protocol_https_port': 8081},
     ['nginx_proxy_protocol_https_port and nginx_proxy_protocol_http_port are both 8081: give them different '
      'ports.']),
    ({'proxy_protocol_https_port': 0, 'proxy_protocol_http_port': 65536},
     ['nginx_proxy_protocol_https_port must be a port from 1 to 65535.',
      'nginx_proxy_protocol_http_port must be a port from 1 to 65535.']),
    ({'proxy_protocol_plain_port': -1},
     ['nginx_proxy_protocol_plain_port must be 0 (no such listener) or a port from 1 to 65535.']),
    ({'proxy_protocol_plain_port': 8081},
     ["nginx_proxy_protocol_plain_port 8081 is also nginx_proxy_protocol_http_port: give the plain PROXY protocol "
      "listener a port of its own (and the VPS door's vps_door_home_plain_port the same), such as 8082."]),
    ({'proxy_protocol_plain_port': 8101},
     ["nginx_proxy_protocol_plain_port 8101 is also the engine engine-a: give the plain PROXY protocol listener a "
      "port of its own (and the VPS door's vps_door_home_plain_port the same), such as 8082."]),
    # Without trusted addresses the listeners are not made, and their ports not judged.
    ({'proxy_protocol_plain_port': 8082, 'proxy_protocol_trusted': [], 'proxy_protocol_https_port': 8101},
     ["nginx_proxy_protocol_plain_port is 8082, but nginx_proxy_protocol_trusted is empty: no listener could be "
      "made for it. Set nginx_proxy_protocol_trusted to the VPS's tunnel address, or "
      "nginx_proxy_protocol_plain_port to 0."]),
    # Backends.
    ({'backends': []}, [NO_BACKENDS]),
    ({'backends': [dict(ENGINE, name='')], 'backends_given': False},
     ['/etc/llm-server/instances: the backend ' + BAD_BACKEND + '{"name": "", "host": "127.0.0.1", "port": 8101, '
      '"model": "tiny", "standby": false}.']),
    ({'backends': [dict(ENGINE, port='abc')]},
     ['nginx_backends: the backend engine-a ' + BAD_BACKEND + '{"name": "engine-a", "host": "127.0.0.1", '
      '"port": "abc", "model": "tiny", "standby": false}.']),
    ({'backends': [{'name': 'x', 'port': 8102, 'model': 'bad model', 'standby': 'maybe'}]},
     ['nginx_backends: the backend x ' + BAD_BACKEND + '{"name": "x", "host": "127.0.0.1", "port": 8102, '
      '"model": "bad model", "standby": "maybe"}.']),
    ({'backends': [dict(ENGINE, name='engine a')]},
     ['nginx_backends: the backend engine a ' + BAD_BACKEND + '{"name": "engine a", "host": "127.0.0.1", '
      '"port": 8101, "model": "tiny", "standby": false}.']),
    ({'backends': [ENGINE, dict(ENGINE, name='engine-b'), dict(ENGINE, name='engine-c', host='gpu2')]},
     ['Two backends are both 127.0.0.1:8101: each engine has its own port.']),
    # The request metrics exporter: the first of its messages says whose.
    ({'metrics_listen_address': '10.0.0.0/8'},
     [METRICS + "nginx_metrics_listen_address '10.0.0.0/8' is not an IP address: give one of this host's "
      "addresses (127.0.0.1 by default, its tunnel address, or 0.0.0.0 / :: for all), not a host name or a "
      "network."]),
    ({'metrics_port': 80},
     [METRICS + 'nginx_metrics_port 80 must be 1024 to 65535 (the exporter runs without privileges); 9836 by '
      'default.',
      'nginx_metrics_port 80 is also nginx_http_port: give the exporter a port of its own (9836 by default).']),
    ({'metrics_port': 8101},
     [METRICS + 'nginx_metrics_port 8101 is also the engine engine-a: give the exporter a port of its own (9836 by '
      'default).']),
    ({'metrics_port': 8443},
     [METRICS + 'nginx_metrics_port 8443 is also nginx_proxy_protocol_https_port: give the exporter a port of its '
      'own (9836 by default).']),
    ({'metrics_port': 8082, 'proxy_protocol_plain_port': 8082},
     [METRICS + 'nginx_metrics_port 8082 is also nginx_proxy_protocol_plain_port: give the exporter a port of its '
      'own (9836 by default).']),
])
def test_each_mistake_is_named_word_for_word(change, expected):
    assert errors(**change) == expected


def test_groups_keep_the_order_of_the_former_tasks():
    found = errors(api_keys=[{'name': 'Ops', 'key': K1}], server_name='a b', access_log='x', backends=[],
                   proxy_protocol_trusted=['vps'], metrics_port=80)
    assert [m.split(' ')[0] for m in found] == [
        'nginx_api_keys:', 'nginx_server_name', 'nginx_access_log', 'nginx_proxy_protocol_trusted:', 'No',
        'The', 'nginx_metrics_port']


def test_metrics_are_judged_only_when_enabled():
    assert errors(metrics_enabled=False, metrics_port=8101) == []


def test_no_message_holds_a_key():
    keys = ['sk-secret-aaaaaaaaaaaaaaaa', 'sk-secret-aaaaaaaaaaaaaaaa', 'tiny', 'sk secret with spaces',
            'sk-secret-bbbbbbbbbbbbbbbb', 'SK-SECRET-BBBBBBBBBBBBBBBB']
    api_keys = [{'name': 'a', 'key': keys[0], 'rate': '5/s'}, {'name': 'a', 'key': keys[1], 'burst': 3},
                {'name': 'B B', 'key': keys[2], 'rate': '1r/h'}, {'name': 'c', 'key': keys[3]},
                {'name': 'd', 'key': keys[4], 'burst': 2}, {'name': 'e', 'key': keys[5]}]
    found = errors(api_keys=api_keys, tls_mode='certbot', server_name='?', backends=[], metrics_port=80)
    assert len(found) > 10
    text = ' '.join(found)
    for key in keys:
        assert key not in text
        assert key.lower() not in text.lower()


def test_registry_entries_get_the_defaults_of_a_backend():
    # The role's _nginx_backend_list fills them; the filter does the same for a bare entry.
    assert errors(backends=[{'name': 'a', 'port': 8101, 'model': 'tiny'}]) == []
