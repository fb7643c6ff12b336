# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""TLS at the VPS (vps_door_tls_termination): the templates of both ends, rendered by Ansible's Templar.

- roles/vps_door/templates/stream.conf.j2: passthrough by default (ssl_preread, port 80 passed home);
  with termination a `listen ... ssl` server with the door's lineage towards home's plain listener,
  and no port-80 stream server (the http server has it); before the certificate exists, passthrough
  on the HTTPS port still.
- roles/vps_door/templates/http.conf.j2: the ACME challenge and the redirect for the served names only.
- roles/nginx/templates/llm-server.conf.j2: the plain PROXY-protocol listener serves the same API
  without TLS.
- roles/firewall/vars/main.yml: the plain listener is among home's default PROXY-protocol ports.
nginx itself checks these files in the remote scenario (verify-door-tls.yml).
"""

from __future__ import annotations

import os
import re

import yaml

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))


def _read(*parts):
    with open(os.path.join(REPO_ROOT, *parts), encoding='utf-8') as handle:
        return handle.read()


def _concrete(path):
    """A role's defaults or vars without the templated ones (the tests give those as values)."""
    values = yaml.safe_load(_read(*path)) or {}
    return {name: value for name, value in values.items() if not (isinstance(value, str) and '{{' in value)}


def _rendered(render, template, variables):
    result = render(template, **variables)
    assert 'value' in result, result
    return result['value']


# --- The VPS ---------------------------------------------------------------------------------

DOOR = dict(
    _concrete(('roles', 'vps_door', 'defaults', 'main.yml')),
    **_concrete(('roles', 'vps_door', 'vars', 'main.yml')),
)
DOOR.update({
    'ansible_managed': 'Ansible managed', 'ansible_facts': {'all_ipv6_addresses': []},
    'vps_door_server_names': ['llm.example.org', 'api.example.org'], 'vps_door_home_address': '10.77.0.2',
    '_vps_door_cert_live': '/etc/letsencrypt/live/llm-door',
    '_vps_door_tls': False, '_vps_door_tls_ready': False,
})


def door_stream(render, **change):
    return _rendered(render, _read('roles', 'vps_door', 'templates', 'stream.conf.j2'), dict(DOOR, **change))


def door_http(render, **change):
    return _rendered(render, _read('roles', 'vps_door', 'templates', 'http.conf.j2'), dict(DOOR, **change))


def server_blocks(conf):
    """The text of each top-level `server {` block inside the stream block (or the file)."""
    return re.findall(r'\n( *)server \{\n(.*?)\n\1\}', conf, re.S)


def test_passthrough_by_default(render):
    conf = door_stream(render)
    assert 'ssl_preread on;' in conf
    assert 'ssl_certificate' not in conf
    assert '"sni":"$ssl_preread_server_name"' in conf
    assert 'api.example.org 10.77.0.2:8443;' in conf and 'llm.example.org 10.77.0.2:8443;' in conf
    # Port 80 passed home, for certbot at home.
    assert 'proxy_pass 10.77.0.2:8081;' in conf
    assert 'TLS passes through unread' in conf


def test_termination_ends_tls_with_the_doors_lineage(render):
    conf = door_stream(render, _vps_door_tls=True, _vps_door_tls_ready=True)
    https = [block[1] for block in server_blocks(conf) if 'listen 443' in block[1]]
    assert len(https) == 1, conf
    https = https[0]
    assert 'listen 443 ssl;' in https
    assert 'ssl_certificate /etc/letsencrypt/live/llm-door/fullchain.pem;' in https
    assert 'ssl_certificate_key /etc/letsencrypt/live/llm-door/privkey.pem;' in https
    assert 'ssl_protocols TLSv1.2 TLSv1.3;' in https
    assert 'ssl_session_cache shared:llm_door_tls:10m;' in https
    assert 'proxy_protocol on;' in https
    assert 'proxy_timeout 600s;' in https and 'limit_conn llm_door_per_address 20;' in https
    # Each served name to home's plain listener; anything else to the closed socket.
    assert re.search(r'map \$ssl_server_name \$llm_door_https_upstream \{\n'
                     r'\s+api\.example\.org 10\.77\.0\.2:8082;\n\s+llm\.example\.org 10\.77\.0\.2:8082;\n'
                     r'\s+default unix:/run/nginx-llm-door-closed\.sock;', conf), conf
    assert '"sni":"$ssl_server_name"' in conf
    assert 'ssl_preread' not in conf
    # Port 80 is the http server's (http.conf.j2), not passed home.
    assert 'listen 80' not in conf and ':8081' not in conf
    assert 'TLS ENDS HERE' in conf


def test_termination_before_the_certificate_passes_tls_through(render):
    conf = door_stream(render, _vps_door_tls=True, _vps_door_tls_ready=False)
    assert 'ssl_preread on;' in conf and 'ssl_certificate' not in conf
    assert 'listen 80' not in conf


def test_ipv6_listeners(render):
    conf = door_stream(render, _vps_door_tls=True, _vps_door_tls_ready=True,
                       ansible_facts={'all_ipv6_addresses': ['2001:db8::10']})
    assert 'listen [::]:443 ssl;' in conf


def test_http_server_answers_the_challenge_for_the_served_names_only(render):
    conf = door_http(render, _vps_door_tls=True)
    blocks = [block[1] for block in server_blocks('\n' + conf)]
    assert len(blocks) == 2, conf
    default, served = blocks
    assert 'listen 80 default_server;' in default and 'return 444;' in default
    assert 'server_name api.example.org llm.example.org;' in served
    assert 'location ^~ /.well-known/acme-challenge/ {\n        root /var/lib/llm-server/door-acme;' in served
    assert 'return 301 https://$host$request_uri;' in served
    # The stream log's fields, never the path.
    assert '"sni":"","host":"$host"' in conf and '$request_uri' not in conf.split('server {')[0]


def test_http_redirect_names_a_port_other_than_443(render):
    assert 'return 301 https://$host:8443$request_uri;' in door_http(render, vps_door_https_port=8443)


# --- Home ------------------------------------------------------------------------------------

HOME = dict(_concrete(('roles', 'nginx', 'defaults', 'main.yml')), **_concrete(('roles', 'nginx', 'vars', 'main.yml')))
HOME.update({
    'ansible_managed': 'Ansible managed', 'ansible_facts': {'all_ipv6_addresses': []},
    'nginx_server_name': 'llm.example.org', 'nginx_certbot_cert_name': 'llm.example.org',
    'nginx_tls_mode': 'certbot', '_nginx_tls_ready': True,
    '_nginx_tls_certificate': '/etc/letsencrypt/live/llm.example.org/fullchain.pem',
    '_nginx_tls_certificate_key': '/etc/letsencrypt/live/llm.example.org/privkey.pem',
    '_nginx_keys_conf': '/etc/nginx/llm-server/api-keys.conf',
    '_nginx_models_json': '/etc/nginx/llm-server/models.json',
    '_nginx_banned_conf': '/etc/nginx/llm-server/banned-addresses.conf',
    '_nginx_engines_dir': '/etc/nginx/llm-server/engines',
    '_nginx_backend_list': [{'name': 'engine-a', 'host': '127.0.0.1', 'port': 8201, 'model': 'tiny-chat',
                             'standby': False}],
    '_nginx_models': ['tiny-chat'], '_nginx_route_by_model': False, '_nginx_rate_limited_keys': [],
    'nginx_proxy_protocol_trusted': ['10.77.0.1'],
})


def home_conf(render, **change):
    return _rendered(render, _read('roles', 'nginx', 'templates', 'llm-server.conf.j2'), dict(HOME, **change))


def home_servers(conf):
    """{first listen line: server body} for the servers at the file's top level."""
    return {re.search(r'listen ([^;]+);', body).group(1): body
            for body in re.findall(r'\nserver \{\n(.*?)\n\}', conf, re.S)}


def test_no_plain_listener_by_default(render):
    conf = home_conf(render)
    assert 'proxy_protocol default_server' in conf
    assert '8082' not in conf


def test_plain_listener_serves_the_api_without_tls(render):
    servers = home_servers(home_conf(render, nginx_proxy_protocol_plain_port=8082))
    plain = servers['8082 proxy_protocol default_server']
    https = servers['443 ssl default_server']
    assert 'ssl' not in plain.replace('ssl_', '') and 'ssl_certificate' not in plain
    assert 'return 301' not in plain
    # The same API: keys, locations, the log, bans, the real client address from the header.
    for line in ['location /v1/ {', 'location = /healthz {', 'if ($llm_api_key_name = "") {',
                 'if ($llm_banned) {', 'access_log /var/log/nginx/llm-access.log llm_access;',
                 'set_real_ip_from 10.77.0.1;', 'real_ip_header proxy_protocol;', 'proxy_pass http://$llm_upstream;',
                 'Strict-Transport-Security']:
        assert line in plain, line
        assert line in https, line
    # The client spoke HTTPS to the door.
    assert 'proxy_set_header X-Forwarded-Proto https;' in plain
    assert 'proxy_set_header X-Forwarded-Proto $scheme;' in https
    # The body is the HTTPS server's without its TLS lines.

    def without_tls(body):
        return [line for line in body.splitlines() if line.strip()
                and not re.match(r'\s*(listen |ssl_|proxy_set_header X-Forwarded-Proto )', line)]
    assert without_tls(plain) == without_tls(https)


def test_plain_listener_needs_a_trusted_sender(render):
    assert '8082' not in home_conf(render, nginx_proxy_protocol_plain_port=8082, nginx_proxy_protocol_trusted=[])


def test_plain_listener_behind_a_plain_http_proxy(render):
    servers = home_servers(home_conf(render, nginx_proxy_protocol_plain_port=8082, nginx_tls_mode='none'))
    assert 'location /v1/ {' in servers['8082 proxy_protocol default_server']


def test_firewall_opens_the_plain_listener_to_the_door(render):
    expression = yaml.safe_load(_read('roles', 'firewall', 'vars', 'main.yml'))['_firewall_default_proxy_protocol_ports']
    base = {'firewall_proxy_protocol_sources': ['10.77.0.1']}
    assert render(expression, **base)['value'] == [8081, 8443]
    assert render(expression, nginx_proxy_protocol_plain_port=8082, **base)['value'] == [8081, 8443, 8082]
    assert render(expression, nginx_proxy_protocol_plain_port=0, **base)['value'] == [8081, 8443]
    assert render(expression, nginx_proxy_protocol_plain_port=8082, firewall_proxy_protocol_sources=[])['value'] == []
