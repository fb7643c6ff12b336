# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/nginx.py through Ansible's templating (the messages: test_front_door.py)."""

from __future__ import annotations

GOOD = {
    'auth_required': True, 'api_keys': [{'name': 'ops', 'key': 'sk-one-0123456789abcdef'}],
    'tls_mode': 'selfsigned', 'certbot_email': '', 'acme_directory_url': 'https://acme.example/directory',
    'server_name': 'llm.lan', 'http_port': 80, 'https_port': 443, 'hsts_max_age': 31536000,
    'client_max_body_size': '8m', 'read_timeout_s': 300, 'connect_timeout_s': 2, 'upstream_max_fails': 1,
    'upstream_fail_timeout_s': 10, 'upstream_keepalive': 32, 'access_log': '/var/log/nginx/llm-access.log',
    'proxy_protocol_trusted': [], 'proxy_protocol_https_port': 8443, 'proxy_protocol_http_port': 8081,
    'proxy_protocol_plain_port': 0, 'backends': [{'name': 'engine-a', 'port': 8101, 'model': 'tiny'}],
    'backends_given': True, 'registry_dir': '/etc/llm-server/instances', 'check_mode': False,
    'metrics_enabled': True, 'metrics_listen_address': '127.0.0.1', 'metrics_port': 9836,
}


def test_good_settings_have_no_errors(render):
    assert render('{{ s | homelab.llm_server.nginx_errors }}', s=GOOD)['value'] == []


def test_a_mistake_is_named(render):
    value = render('{{ s | homelab.llm_server.nginx_errors | join(" ") }}',
                   s=dict(GOOD, api_keys=[{'name': 'ops', 'key': 'sk-one-0123456789abcdef'},
                                          {'name': 'ops', 'key': 'sk-two-0123456789abcdef'}]))['value']
    assert value == 'nginx_api_keys names ops more than once: give each key a name of its own.'


def test_settings_must_be_a_dict(render):
    assert 'expects a dict of nginx settings' in render('{{ [] | homelab.llm_server.nginx_errors }}')['error']
