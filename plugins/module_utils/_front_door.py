# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nginx front door's inputs, judged before any change.

Pure functions over the settings the nginx role gathers for one host
(``_nginx_settings``): the role stops on the messages, joined with spaces. Each
message names the variable and the fix; an API key is named by its name, and
no message ever holds a key.

The checks follow the Jinja tests they replace: values are matched as text
(as Ansible's ``match`` test does, with ``re.match``), ports are compared as
given (a port given as text is not in range), and a backend's port is read as
Jinja's ``int`` filter reads it.
"""

from __future__ import annotations

import collections
import json
import re

from ansible_collections.homelab.llm_server.plugins.module_utils import _addresses

# Names (API key names, served model names) that are safe in nginx strings,
# regexes and JSON without escaping.
KEY_NAME_PATTERN = r'^[a-z0-9_-]{1,64}$'
MODEL_PATTERN = r'^[A-Za-z0-9._:/@+-]{1,200}$'
# RFC 6750 bearer token characters; at least 16 of them.
KEY_PATTERN = r'^[A-Za-z0-9._~+/-]{16,}=*$'
RATE_PATTERN = r'^[1-9][0-9]*r/[sm]$'
SIZE_PATTERN = r'^[0-9]+[kKmMgG]?$'
EMAIL_PATTERN = r'^[^@\s]+@[^@\s]+$'
ACME_URL_PATTERN = r'^https?://'
SERVER_NAME_PATTERN = r'^[A-Za-z0-9._:-]+$'
BACKEND_HOST_PATTERN = r'^[A-Za-z0-9._-]+$'
# A backend's name names its include file and its unit (NAME.service), whose holds mark it down.
BACKEND_NAME_PATTERN = r'^[A-Za-z0-9_.@-]{1,200}$'
# What nginx's set_real_ip_from is given: an address or CIDR range by its
# shape (a wrong number is left to nginx -t and the firewall role's check).
TRUSTED_PATTERN = r'^([0-9]{1,3}[.]){3}[0-9]{1,3}(/[0-9]{1,2})?$|^[0-9A-Fa-f:]+(/[0-9]{1,3})?$'

# A backend's defaults (the role's _nginx_backend_list fills them too).
BACKEND_DEFAULTS = {'name': '', 'host': '127.0.0.1', 'port': 0, 'model': '', 'standby': False}
LOCAL_HOSTS = ('127.0.0.1', 'localhost', '::1')
PORTS = range(1, 65536)

METRICS_PREFIX = 'The request metrics exporter (llm-proxy-metrics, nginx_metrics_enabled): '


def _text(value):
    """``value`` as the text Ansible's tests and Jinja's ``string`` filter see."""
    return value if isinstance(value, str) else str(value)


def _shown(value):
    """``value`` as a message shows it: Ansible renders None as nothing."""
    return '' if value is None else _text(value)


def _matches(value, pattern):
    return re.match(pattern, _text(value)) is not None


def _jinja_int(value):
    """Jinja's ``int`` filter: 0 for what is not a number, "42.7" is 42."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return 0


def _repeated(values):
    """The values that occur more than once, in the order they first occur."""
    return [value for value, count in collections.Counter(values).items() if count > 1]


def api_key_errors(settings):
    """API keys: names, keys and rate limits; each key named by its name."""
    errors = []
    keys = [k for k in settings.get('api_keys') or [] if isinstance(k, dict)]
    if settings.get('auth_required') and not keys:
        errors.append('nginx_api_keys is empty while nginx_auth_required is true: add at least one {name, key} '
                      '(keys from the vault), or set nginx_auth_required: false for a proxy open to everyone who '
                      'can reach it.')
    names = [_text(k.get('name')) for k in keys]
    for name in names:
        if not _matches(name, KEY_NAME_PATTERN):
            errors.append("nginx_api_keys: the name '%s' must be 1 to 64 lowercase letters, digits, _ or - (the "
                          "access log and the rate limits go by it)." % name)
    for name in _repeated(names):
        errors.append('nginx_api_keys names %s more than once: give each key a name of its own.' % name)
    for k in keys:
        if not _matches(k.get('key'), KEY_PATTERN):
            errors.append('nginx_api_keys: the key of %s must be a bearer token of at least 16 characters from '
                          'A-Z a-z 0-9 . _ ~ + / - (trailing = allowed), such as the output of '
                          '`openssl rand -hex 32`.' % _shown(k.get('name')))
    # Entries that share a key, by their names only, in the order of their keys.
    groups = {}
    for k in keys:
        groups.setdefault(k.get('key'), []).append(k.get('name'))
    for group_key in sorted(groups, key=str):  # as groupby ordered them; never shown
        if len(groups[group_key]) > 1:
            errors.append('nginx_api_keys: %s have the same key: give each name a key of its own.'
                          % ' and '.join(_text(n) for n in groups[group_key]))
    rate_limited = [k for k in keys if k.get('rate')]
    for k in rate_limited:
        if not _matches(k['rate'], RATE_PATTERN):
            # The rate of the first entry of that name, as the check it replaces showed it.
            first = next(e for e in keys if e.get('name') == k.get('name'))
            errors.append("nginx_api_keys: the rate of %s must be nginx syntax such as 5r/s or 60r/m, not '%s'."
                          % (_shown(k.get('name')), _shown(first.get('rate', k['rate']))))
    limited_names = [k.get('name') for k in rate_limited]
    for k in keys:
        if k.get('burst') and k.get('name') not in limited_names:
            errors.append('nginx_api_keys: %s has a burst but no rate: add a rate such as 5r/s, or drop the '
                          'burst.' % _shown(k.get('name')))
    return errors


def tls_errors(settings):
    """The TLS mode, certbot's account and directory, the server name, the two ports and HSTS."""
    errors = []
    mode = settings.get('tls_mode')
    email = settings.get('certbot_email')
    if mode == 'certbot' and len(email) == 0:
        errors.append('nginx_certbot_email is empty: certbot (nginx_tls_mode: certbot) needs an email address for '
                      'the ACME account; set nginx_certbot_email or choose nginx_tls_mode: selfsigned.')
    elif mode == 'certbot' and not _matches(email, EMAIL_PATTERN):
        errors.append("nginx_certbot_email must be an email address such as admin@example.org, not '%s'." % _shown(email))
    url = settings.get('acme_directory_url')
    if mode == 'certbot' and not _matches(url, ACME_URL_PATTERN):
        errors.append("nginx_acme_directory_url must be the URL of an ACME directory, such as "
                      "https://acme-v02.api.letsencrypt.org/directory, not '%s'." % _shown(url))
    server_name = settings.get('server_name')
    if not _matches(server_name, SERVER_NAME_PATTERN):
        errors.append("nginx_server_name must be one host name or IP address (the certificate's name), not '%s'."
                      % _shown(server_name))
    if mode != 'none' and settings.get('http_port') == settings.get('https_port'):
        errors.append('nginx_http_port and nginx_https_port are both %s: give them different ports.'
                      % _shown(settings.get('http_port')))
    if settings.get('hsts_max_age') < 0:
        errors.append('nginx_hsts_max_age must be 0 or more seconds (0 tells browsers to forget the HSTS policy).')
    return errors


def request_errors(settings):
    """The request size, the timeouts, the upstreams' limits, the access log and the two ports."""
    errors = []
    size = settings.get('client_max_body_size')
    if not _matches(size, SIZE_PATTERN):
        errors.append("nginx_client_max_body_size must be an nginx size such as 8m or 512k, not '%s'." % _shown(size))
    for key in ('read_timeout_s', 'connect_timeout_s', 'upstream_fail_timeout_s', 'upstream_keepalive'):
        if settings.get(key) <= 0:
            errors.append('nginx_%s must be more than 0, not %s.' % (key, _shown(settings.get(key))))
    if settings.get('upstream_max_fails') < 0:
        errors.append('nginx_upstream_max_fails must be 0 (never skip an engine) or more.')
    access_log = settings.get('access_log')
    if not _matches(access_log, '^/'):
        errors.append("nginx_access_log must be an absolute path, not '%s'." % _shown(access_log))
    for key in ('http_port', 'https_port'):
        if settings.get(key) not in PORTS:
            errors.append('nginx_%s must be a port from 1 to 65535.' % key)
    return errors


def _engine_ports(backends):
    """{port as text: 'the engine NAME'}; of two engines on one port, the later in the list."""
    return {_text(b.get('port')): 'the engine ' + _text(b.get('name')) for b in backends}


def proxy_protocol_errors(settings, backends):
    """The listeners that expect the PROXY protocol, when nginx_proxy_protocol_trusted is not empty."""
    errors = []
    trusted = settings.get('proxy_protocol_trusted') or []
    plain = settings.get('proxy_protocol_plain_port')
    if len(trusted) > 0:
        https, http = settings.get('proxy_protocol_https_port'), settings.get('proxy_protocol_http_port')
        for entry in trusted:
            if not _matches(entry, TRUSTED_PATTERN):
                errors.append("nginx_proxy_protocol_trusted: '%s' is not an IPv4 or IPv6 address or CIDR range "
                              "(the VPS's tunnel address, e.g. 10.77.0.1)." % _shown(entry))
        # What else listens on a port of this host: the proxy's own ports and the engines behind it.
        in_use = dict(_engine_ports(backends))
        in_use.update({_text(settings.get('http_port')): 'nginx_http_port',
                       _text(settings.get('https_port')): 'nginx_https_port'})
        for port in (_text(https), _text(http)):
            if port in in_use:
                errors.append('Port %s is both a PROXY protocol listener (nginx_proxy_protocol_https_port or '
                              'nginx_proxy_protocol_http_port) and %s: give the PROXY protocol listener another '
                              "port (and the VPS door's vps_door_home_*_port the same)." % (port, in_use[port]))
        if https == http:
            errors.append('nginx_proxy_protocol_https_port and nginx_proxy_protocol_http_port are both %s: give '
                          'them different ports.' % _shown(http))
        for key in ('proxy_protocol_https_port', 'proxy_protocol_http_port'):
            if settings.get(key) not in PORTS:
                errors.append('nginx_%s must be a port from 1 to 65535.' % key)
        if plain not in range(0, 65536):
            errors.append('nginx_proxy_protocol_plain_port must be 0 (no such listener) or a port from 1 to 65535.')
        # The plain listener (a door that ends TLS itself) beside all the ports above.
        taken = dict(in_use)
        taken.update({_text(https): 'nginx_proxy_protocol_https_port', _text(http): 'nginx_proxy_protocol_http_port'})
        if plain > 0 and _text(plain) in taken:
            errors.append("nginx_proxy_protocol_plain_port %s is also %s: give the plain PROXY protocol listener a "
                          "port of its own (and the VPS door's vps_door_home_plain_port the same), such as 8082."
                          % (plain, taken[_text(plain)]))
    # The plain listener exists only for a door whose address is trusted.
    if plain != 0 and len(trusted) == 0:
        errors.append('nginx_proxy_protocol_plain_port is %s, but nginx_proxy_protocol_trusted is empty: no '
                      "listener could be made for it. Set nginx_proxy_protocol_trusted to the VPS's tunnel "
                      'address, or nginx_proxy_protocol_plain_port to 0.' % plain)
    return errors


def _backend_wrong(backend):
    return (not _matches(backend.get('name', ''), BACKEND_NAME_PATTERN)
            or _jinja_int(backend.get('port', 0)) not in PORTS
            or not _matches(backend.get('host'), BACKEND_HOST_PATTERN)
            or not _matches(backend.get('model', ''), MODEL_PATTERN)
            or _text(backend.get('standby')).lower() not in ('true', 'false'))


def backend_errors(settings, backends):
    """The engines behind the proxy: some unless in check mode, each well formed, one per host:port."""
    errors = []
    if not backends and not settings.get('check_mode'):
        errors.append('No backends: nginx_backends is empty and the serving registry (%s) lists no engine on this '
                      'host. Run the vllm or llamacpp role on this host first, or list the engines in '
                      'nginx_backends ({name, port, model, host, standby}).' % settings.get('registry_dir'))
    source = 'nginx_backends' if settings.get('backends_given') else settings.get('registry_dir')
    for backend in backends:
        if not isinstance(backend, dict) or _backend_wrong(backend):
            name = _shown(backend.get('name', '?')) if isinstance(backend, dict) else '?'
            errors.append('%s: the backend %sneeds a name of letters, digits and _ . @ - (its unit, NAME.service, '
                          'is what a hold names), a port from 1 to 65535, a host name or IPv4 address '
                          '(127.0.0.1 when the engine runs here), standby true or false, and a model name of '
                          'letters, digits and . _ : / @ + - (the served model name clients send), not %s.'
                          % (source, name + ' ' if name else '', json.dumps(backend, default=str)))
    addresses = ['%s:%s' % (b.get('host'), b.get('port')) for b in backends if isinstance(b, dict)]
    for address in _repeated(addresses):
        errors.append('Two backends are both %s: each engine has its own port.' % address)
    return errors


def _metrics_address_ok(address):
    # What the not_ip_networks filter accepts, less the networks.
    return (isinstance(address, str) and address != '' and address.strip() == address and '/' not in address
            and _addresses.network(address, strict=False) is not None)


def metrics_errors(settings, backends):
    """llm-proxy-metrics' address and port, when nginx_metrics_enabled; the first message says whose they are."""
    errors = []
    if not settings.get('metrics_enabled'):
        return errors
    address, port = settings.get('metrics_listen_address'), settings.get('metrics_port')
    if not _metrics_address_ok(address):
        errors.append("nginx_metrics_listen_address '%s' is not an IP address: give one of this host's addresses "
                      "(127.0.0.1 by default, its tunnel address, or 0.0.0.0 / :: for all), not a host name or a "
                      "network." % _shown(address))
    if not 1024 <= _jinja_int(port) <= 65535:
        errors.append('nginx_metrics_port %s must be 1024 to 65535 (the exporter runs without privileges); 9836 by '
                      'default.' % _shown(port))
    # Every port nginx listens on, and those of the engines on this host.
    taken = _engine_ports([b for b in backends if b.get('host') in LOCAL_HOSTS])
    taken[_text(settings.get('http_port'))] = 'nginx_http_port'
    if settings.get('tls_mode') != 'none':
        taken[_text(settings.get('https_port'))] = 'nginx_https_port'
    trusted = settings.get('proxy_protocol_trusted') or []
    if len(trusted) > 0:
        taken[_text(settings.get('proxy_protocol_https_port'))] = 'nginx_proxy_protocol_https_port'
        taken[_text(settings.get('proxy_protocol_http_port'))] = 'nginx_proxy_protocol_http_port'
        if settings.get('proxy_protocol_plain_port') > 0:
            taken[_text(settings.get('proxy_protocol_plain_port'))] = 'nginx_proxy_protocol_plain_port'
    if _text(port) in taken:
        errors.append('nginx_metrics_port %s is also %s: give the exporter a port of its own (9836 by default).'
                      % (port, taken[_text(port)]))
    if errors:
        errors[0] = METRICS_PREFIX + errors[0]
    return errors


def nginx_errors(settings):
    """Messages for what is wrong with one host's nginx settings, [] when nothing is.

    ``settings`` (the role's ``_nginx_settings``): the role's variables without their
    ``nginx_`` prefix (auth_required, api_keys, tls_mode, certbot_email,
    acme_directory_url, server_name, http_port, https_port, hsts_max_age,
    client_max_body_size, read_timeout_s, connect_timeout_s, upstream_max_fails,
    upstream_fail_timeout_s, upstream_keepalive, access_log,
    proxy_protocol_trusted, proxy_protocol_https_port, proxy_protocol_http_port,
    proxy_protocol_plain_port, metrics_enabled, metrics_listen_address,
    metrics_port), and backends (the engines in use, sorted by name),
    backends_given (nginx_backends is not empty), registry_dir (where the
    engines were looked up otherwise) and check_mode.
    """
    entries = [dict(BACKEND_DEFAULTS, **b) if isinstance(b, dict) else b for b in settings.get('backends') or []]
    backends = [b for b in entries if isinstance(b, dict)]
    return (api_key_errors(settings) + tls_errors(settings) + request_errors(settings)
            + proxy_protocol_errors(settings, backends) + backend_errors(settings, entries)
            + metrics_errors(settings, backends))
