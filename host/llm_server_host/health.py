# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-health: health check of an OpenAI-compatible LLM server (vLLM, llama.cpp's llama-server).

GET /health alone is not enough: vLLM keeps answering it while its engine is
hung (vLLM issue 39863). A check therefore also asks for a 1-token completion,
and both must answer within one deadline.

  llm-health check --url http://127.0.0.1:8001 --model NAME [--api-key-file F] [--deadline 15]
      One check. Prints one JSON line
      {"healthy": bool, "reason": str, "health_s": float, "completion_s": float or null}
      (completion_s is null when the completion was not tried). Exit 0 healthy, 1 not.
  llm-health wait --url ... --model ... [--timeout 600] [--interval 2] [--deadline 15] [--json]
      Checks until healthy or until the timeout passes. Prints a line whenever
      the reason changes, then a last line with the verdict, the elapsed time
      and the last reason (with --json the last line is JSON). Exit 0 healthy, 1 not.
  llm-health watch --config /etc/llm-server/health/NAME.json
      One tick of a systemd timer: check, count consecutive failures in the
      state file and restart the unit at the threshold, with backoff; with
      metrics_dir, write the result for node exporter's textfile collector.
      Exit 0 healthy (or not judged), 1 unhealthy, 2 bad configuration.

Exit 2 means a usage or configuration error in every subcommand. The API
key is sent as "Authorization: Bearer KEY" and never printed.

The watch configuration is a JSON object:
  name, url, model, unit      required; name names the state file {state_dir}/{name}.json
  deadline_s                  15     seconds for /health and the completion together
  failures_before_restart     3      consecutive failed ticks before a restart
  backoff_initial_s           30     after a restart, no other one for this long; the
  backoff_max_s               900    window doubles with each restart, up to backoff_max_s
  backoff_reset_s             backoff_max_s: healthy this long without a break, the
                              window starts again from backoff_initial_s
  grace_s                     600    failures within grace_s of the unit becoming active
                              are not counted: the engine is still loading its model
  state_dir                   /var/lib/llm-server/health
  api_key_file                none
  restart_command             ["systemctl", "restart", unit]
  restart_timeout_s           300
  metrics_dir                 none   node exporter's textfile collector directory: each
                              tick writes {metrics_dir}/llm_engine_probe_{name}.prom
  interval                    the timer's period, required with metrics_dir: a
                              systemd time span ("30s", "1min 30s") or seconds
  hold_dir                    none   the holds (llm-server hold, the UPS, the GPU
                              watchdog): a held engine is never restarted, and
                              the metrics say who holds it
Numbers may be JSON strings ("20"). Unknown keys are an error (a typo would
otherwise be ignored).

The metrics file (labels serving_instance=name, unit, model) holds
llm_engine_probe_success (0 only for a failure that counts: the unit active
and past its grace, or its state unknown; 1 for a healthy engine, a failure
within the grace and a unit that is not active), llm_engine_probe_timestamp_seconds
(when the tick ran), llm_engine_probe_interval_seconds and the counter
llm_engine_probe_restarts_total (the state file's restarts, so it survives
from one tick to the next). With hold_dir it also holds llm_engine_held (1
while anyone holds the engine, else 0) and one llm_engine_held_by sample
(label holder: ups, watchdog, owner) per holder. It is replaced atomically (a temporary file in the
same directory, renamed) with mode 0644. A tick that did not finish (another
one holds the lock, a configuration error) writes nothing, so its timestamp
ages. A file that cannot be written is reported on the tick's line and does
not change its exit code: the check and its restarts go on. The role removes
the file when the instance is stopped or pruned.

The unit's state comes from `systemctl show`. A unit that is not "active"
(activating, inactive, failed, ...) is not checked and its failure count is
reset: systemd's own Restart= handles a crashed service, and a stopped one was
stopped on purpose. Without systemctl the check runs and the line says so.

Standard library only: this runs on the target with the system python3.
"""

import argparse
import errno
import fcntl
import http.client
import json
import logging
import math
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from urllib.parse import urlsplit

from llm_server_host import holds as _holds
from llm_server_host import log as _log
from llm_server_host.files import read_settings, write_atomically
from llm_server_host.textfile import Exposition

EXIT_HEALTHY = 0
EXIT_UNHEALTHY = 1
EXIT_USAGE = 2

COMPLETION_PAYLOAD = {'prompt': 'ping', 'max_tokens': 1, 'temperature': 0}
_REASON_MAX = 300
_DIGITS_RE = re.compile(r'[0-9]+(\.[0-9]+)?')


class ConfigError(Exception):
    """A configuration or usage error: nothing was checked, exit 2."""


class CheckTimeout(Exception):
    """The deadline passed before the server answered."""


# ---------------------------------------------------------------- HTTP


def _left(deadline_at):
    left = deadline_at - time.monotonic()
    if left <= 0:
        raise CheckTimeout()
    return left


def _http(method, base_url, path, deadline_at, api_key=None, payload=None):
    """One request on a fresh connection; returns (status, body bytes) before deadline_at.

    Every socket operation gets what is left of the deadline as its timeout,
    and the answer counts only if it arrived in time.
    """
    parts = urlsplit(base_url)
    timeout = _left(deadline_at)
    if parts.scheme == 'https':
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    headers = {'Accept': 'application/json', 'User-Agent': 'llm-health', 'Connection': 'close'}
    body = None
    if payload is not None:
        body = json.dumps(payload).encode('utf-8')
        headers['Content-Type'] = 'application/json'
    if api_key:
        headers['Authorization'] = 'Bearer ' + api_key
    try:
        conn.connect()
        sock = conn.sock
        sock.settimeout(_left(deadline_at))
        conn.request(method, parts.path.rstrip('/') + path, body=body, headers=headers)
        sock.settimeout(_left(deadline_at))
        response = conn.getresponse()
        sock.settimeout(_left(deadline_at))
        data = response.read()
        _left(deadline_at)
        return response.status, data
    except socket.timeout:
        raise CheckTimeout()
    finally:
        conn.close()


def _describe_error(exc, base_url):
    """A short sentence for a failed connection or exchange."""
    where = urlsplit(base_url).netloc
    if isinstance(exc, ConnectionRefusedError):
        return 'connection refused by %s (nothing listening: service stopped, crashed or still starting)' % where
    if isinstance(exc, socket.gaierror):
        return 'cannot resolve %s: %s' % (urlsplit(base_url).hostname, exc.strerror or exc)
    if isinstance(exc, http.client.RemoteDisconnected):
        return 'the server at %s closed the connection without answering' % where
    if isinstance(exc, ConnectionResetError):
        return 'connection reset by %s' % where
    if isinstance(exc, ssl.SSLError):
        return 'TLS error with %s: %s' % (where, exc)
    if isinstance(exc, http.client.HTTPException):
        return 'malformed HTTP answer from %s (%s)' % (where, exc.__class__.__name__)
    if isinstance(exc, OSError) and exc.strerror:
        return '%s (%s)' % (exc.strerror, where)
    return '%s: %s' % (exc.__class__.__name__, exc)


def _one_line(text, limit=_REASON_MAX):
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _error_message(body):
    """The message of an OpenAI-style error body ({"error": {"message"}} or vLLM's older flat form)."""
    try:
        data = json.loads(body.decode('utf-8', 'replace'))
    except ValueError:
        return _one_line(body.decode('utf-8', 'replace'), 200)
    if isinstance(data, dict):
        error = data.get('error')
        if isinstance(error, dict) and error.get('message'):
            return _one_line(error['message'], 200)
        for key in ('error', 'message', 'detail'):
            if isinstance(data.get(key), str) and data[key]:
                return _one_line(data[key], 200)
    return _one_line(json.dumps(data), 200)


def _served_models(base_url, deadline_at, api_key):
    """(list of model ids, None) or (None, why they could not be listed)."""
    try:
        status, body = _http('GET', base_url, '/v1/models', deadline_at, api_key)
    except CheckTimeout:
        return None, 'GET /v1/models did not answer in time'
    except (OSError, http.client.HTTPException) as exc:
        return None, 'GET /v1/models: ' + _describe_error(exc, base_url)
    if status != 200:
        return None, 'GET /v1/models answered %d' % status
    try:
        data = json.loads(body.decode('utf-8', 'replace'))
        return [str(entry['id']) for entry in data['data']], None
    except (ValueError, KeyError, TypeError):
        return None, 'GET /v1/models answered 200 without a model list'


# ---------------------------------------------------------------- check


def normalize_url(url):
    """The server root: trailing slashes and a trailing /v1 removed. Raises ConfigError."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        raise ConfigError('url %r is not an http:// or https:// URL with a host' % url)
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ConfigError('url %r has an invalid port' % url)
    root = url.strip().rstrip('/')
    if root.endswith('/v1'):
        root = root[:-3]
    return root


def run_check(url, model, deadline_s, api_key=None):
    """GET /health, then a 1-token completion, both within deadline_s. Returns the result dict."""
    start = time.monotonic()
    deadline_at = start + deadline_s
    result = {'healthy': False, 'reason': '', 'health_s': None, 'completion_s': None}
    status, body, error = None, b'', None
    try:
        status, body = _http('GET', url, '/health', deadline_at, api_key)
    except CheckTimeout:
        error = 'GET /health timed out after %.1f s' % deadline_s
    except (OSError, http.client.HTTPException) as exc:
        error = 'GET /health: ' + _describe_error(exc, url)
    result['health_s'] = round(time.monotonic() - start, 3)
    if error is None and status != 200:
        message = _error_message(body) if body.strip() else ''
        error = 'GET /health answered %d' % status + (': ' + message if message else '')
    if error is not None:
        result['reason'] = error
        return result

    completion_start = time.monotonic()
    left = deadline_at - completion_start
    payload = dict(COMPLETION_PAYLOAD, model=model)
    try:
        status, body = _http('POST', url, '/v1/completions', deadline_at, api_key, payload)
    except CheckTimeout:
        status = None
        error = ('/health answered 200 but a 1-token completion did not answer within %.1f s (engine hung?)'
                 % max(left, 0.0))
    except (OSError, http.client.HTTPException) as exc:
        status = None
        error = '/health answered 200 but the completion failed: ' + _describe_error(exc, url)
    result['completion_s'] = round(time.monotonic() - completion_start, 3)
    if status is not None:
        error = _judge_completion(url, model, api_key, deadline_at, status, body)
    if error is not None:
        result['reason'] = error
        return result
    result['healthy'] = True
    result['reason'] = 'ok: /health answered 200 in %s s, a 1-token completion in %s s' % (
        result['health_s'], result['completion_s'])
    return result


def _judge_completion(url, model, api_key, deadline_at, status, body):
    """None when the completion answer is good, else the reason."""
    if status == 200:
        try:
            data = json.loads(body.decode('utf-8', 'replace'))
        except ValueError:
            return 'completion answered 200 but the body is not JSON: %s' % _one_line(body.decode('utf-8', 'replace'), 120)
        if not isinstance(data, dict) or not isinstance(data.get('choices'), list) or not data['choices']:
            return 'completion answered 200 but the body holds no choices: %s' % _one_line(json.dumps(data), 120)
        return None
    message = _error_message(body) if body.strip() else ''
    if status in (400, 404):
        # An unknown model is 404 in vLLM and 400 in some other servers: ask which are served.
        served, why_not = _served_models(url, deadline_at, api_key)
        if served is not None and model not in served:
            return "completion answered %d: model '%s' not served (served: %s)" % (
                status, model, ', '.join(served) or 'none')
        if served is None and status == 404:
            return "completion answered 404: %s (served models unknown: %s)" % (message or 'not found', why_not)
    if status == 401 or status == 403:
        return 'completion answered %d: %s (API key missing or wrong: see --api-key-file)' % (
            status, message or 'unauthorized')
    return 'completion answered %d' % status + (': ' + message if message else '')


def read_api_key(path):
    """The bearer token in path (surrounding whitespace removed), or None without a path."""
    if not path:
        return None
    try:
        with open(path, encoding='utf-8') as handle:
            key = handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError('cannot read the API key file %s: %s' % (path, getattr(exc, 'strerror', None) or exc))
    if not key:
        raise ConfigError('the API key file %s is empty' % path)
    return key


def redact(text, api_key):
    """text with the API key replaced, in case a server echoes it back."""
    if api_key and len(api_key) >= 4:
        return text.replace(api_key, '<api key>')
    return text


# ---------------------------------------------------------------- wait


def run_wait(url, model, timeout_s, interval_s, deadline_s, api_key=None, progress=None):
    """Checks until healthy or timeout_s passed. Returns (result, elapsed_s, attempts).

    A check never runs past the timeout: its deadline is cut to what is left.
    progress(elapsed_s, reason) is called whenever the reason changes.
    """
    start = time.monotonic()
    attempts = 0
    last_reason = None
    while True:
        left = timeout_s - (time.monotonic() - start)
        result = run_check(url, model, max(min(deadline_s, left), 0.001), api_key)
        attempts += 1
        elapsed = time.monotonic() - start
        # Timings inside a reason change from one check to the next; only a new kind of failure is shown.
        kind = _DIGITS_RE.sub('#', result['reason'])
        if progress is not None and kind != last_reason and not result['healthy']:
            progress(elapsed, result['reason'])
        last_reason = kind
        if result['healthy']:
            return result, elapsed, attempts
        left = timeout_s - elapsed
        if left <= 0:
            return result, elapsed, attempts
        time.sleep(min(interval_s, left))


# ---------------------------------------------------------------- watch

NAME_RE = re.compile(r'^[A-Za-z0-9_@][A-Za-z0-9_.@-]*$')
WATCH_DEFAULTS = {
    'deadline_s': 15.0,
    'failures_before_restart': 3,
    'backoff_initial_s': 30.0,
    'backoff_max_s': 900.0,
    # Healthy this long without a break: the backoff starts again from backoff_initial_s.
    'backoff_reset_s': None,  # None: backoff_max_s
    'state_dir': '/var/lib/llm-server/health',
    'api_key_file': None,
    'restart_command': None,  # None: ["systemctl", "restart", unit]
    # Failures within grace_s of the unit becoming active are not counted: the model is loading.
    'grace_s': 600.0,
    'restart_timeout_s': 300.0,
    # node exporter's textfile collector directory; None writes no metrics.
    'metrics_dir': None,
    # The timer's period (a systemd time span or seconds), written as a metric.
    'interval': None,
    # The holds' directory (holds.py's contract); None reads no holds.
    'hold_dir': None,
}
WATCH_REQUIRED = ('name', 'url', 'model', 'unit')
_NUMBERS = {  # key: (minimum, integer)
    'deadline_s': (0.001, False),
    'failures_before_restart': (1, True),
    'backoff_initial_s': (0, False),
    'backoff_max_s': (0, False),
    'backoff_reset_s': (0, False),
    'grace_s': (0, False),
    'restart_timeout_s': (1, False),
}


def _number(key, value, minimum, integer):
    # Ansible may template numbers into strings ("20"): accept those too.
    if isinstance(value, bool):
        raise ConfigError('%s must be a number, not %r' % (key, value))
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ConfigError('%s must be a number, not %r' % (key, value))
    if not isinstance(value, (int, float)) or math.isnan(value) or math.isinf(value):
        raise ConfigError('%s must be a number, not %r' % (key, value))
    if integer:
        if value != int(value):
            raise ConfigError('%s must be a whole number, not %r' % (key, value))
        value = int(value)
    else:
        value = float(value)
    if value < minimum:
        raise ConfigError('%s must be at least %s, not %r' % (key, minimum, value))
    return value


# systemd.time(7): the units of a time span, case-sensitive (m is minutes, M months).
_TIMESPAN_UNITS = {
    'usec': 1e-6, 'us': 1e-6, '\u00b5s': 1e-6, 'msec': 1e-3, 'ms': 1e-3,
    'seconds': 1.0, 'second': 1.0, 'sec': 1.0, 's': 1.0, '': 1.0,
    'minutes': 60.0, 'minute': 60.0, 'min': 60.0, 'm': 60.0,
    'hours': 3600.0, 'hour': 3600.0, 'hr': 3600.0, 'h': 3600.0,
    'days': 86400.0, 'day': 86400.0, 'd': 86400.0,
    'weeks': 604800.0, 'week': 604800.0, 'w': 604800.0,
    'months': 2629800.0, 'month': 2629800.0, 'M': 2629800.0,
    'years': 31557600.0, 'year': 31557600.0, 'y': 31557600.0,
}
_TIMESPAN_PART_RE = re.compile(r'\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z\u00b5]*)')


def parse_timespan(key, value):
    """Seconds of a systemd time span ("30s", "1min 30s", "2m") or of a number. Raises ConfigError."""
    if isinstance(value, bool):
        raise ConfigError('%s must be a time span, not %r' % (key, value))
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text, seconds, position = value.strip(), 0.0, 0
        while position < len(text):
            match = _TIMESPAN_PART_RE.match(text, position)
            if not match or match.group(2) not in _TIMESPAN_UNITS:
                raise ConfigError('%s %r is not a systemd time span such as 30s or 1min' % (key, value))
            seconds += float(match.group(1)) * _TIMESPAN_UNITS[match.group(2)]
            position = match.end()
    else:
        raise ConfigError('%s must be a time span, not %r' % (key, value))
    if math.isnan(seconds) or math.isinf(seconds) or seconds <= 0:
        raise ConfigError('%s must be above 0, not %r' % (key, value))
    return seconds


def load_watch_config(path):
    """The watch configuration with defaults filled in. Raises ConfigError."""
    raw = read_settings(path, ConfigError)
    unknown = sorted(set(raw) - set(WATCH_REQUIRED) - set(WATCH_DEFAULTS))
    if unknown:
        raise ConfigError('%s: unknown key(s) %s; known keys: %s' % (
            path, ', '.join(unknown), ', '.join(WATCH_REQUIRED + tuple(sorted(WATCH_DEFAULTS)))))
    missing = [key for key in WATCH_REQUIRED if not raw.get(key)]
    if missing:
        raise ConfigError('%s: missing required key(s) %s' % (path, ', '.join(missing)))
    config = dict(WATCH_DEFAULTS)
    config.update((key, value) for key, value in raw.items() if value is not None)
    for key in WATCH_REQUIRED + ('state_dir',):
        if not isinstance(config[key], str):
            raise ConfigError('%s must be a string, not %r' % (key, config[key]))
    if not NAME_RE.match(config['name']):
        raise ConfigError('name %r may hold only letters, digits and _ . @ - (it names the state file)' % config['name'])
    config['url'] = normalize_url(config['url'])
    if config['backoff_reset_s'] is None:
        config['backoff_reset_s'] = config['backoff_max_s']
    for key, (minimum, integer) in _NUMBERS.items():
        config[key] = _number(key, config[key], minimum, integer)
    if config['backoff_max_s'] < config['backoff_initial_s']:
        raise ConfigError('backoff_max_s (%s) must not be below backoff_initial_s (%s)' % (
            config['backoff_max_s'], config['backoff_initial_s']))
    command = config['restart_command']
    if command is None:
        config['restart_command'] = ['systemctl', 'restart', config['unit']]
    elif not isinstance(command, list) or not command or not all(isinstance(arg, str) and arg for arg in command):
        raise ConfigError('restart_command must be a non-empty list of strings, not %r' % (command,))
    if config['hold_dir'] is not None and (not isinstance(config['hold_dir'], str)
                                           or not config['hold_dir'].startswith('/')):
        raise ConfigError('hold_dir must be an absolute path, not %r' % (config['hold_dir'],))
    if config['api_key_file'] is not None and not isinstance(config['api_key_file'], str):
        raise ConfigError('api_key_file must be a path, not %r' % (config['api_key_file'],))
    if config['metrics_dir'] is not None:
        if not isinstance(config['metrics_dir'], str) or not config['metrics_dir'].startswith('/'):
            raise ConfigError('metrics_dir must be an absolute path, not %r' % (config['metrics_dir'],))
        if config['interval'] is None:
            raise ConfigError('interval (the timer\'s period) is required with metrics_dir: the alert on a probe '
                              'that stopped running compares the last timestamp with it')
    if config['interval'] is not None:
        config['interval'] = parse_timespan('interval', config['interval'])
    return config


def unit_state(unit):
    """(properties dict, None) from systemctl show, or (None, why not)."""
    cmd = ['systemctl', 'show', '--property=LoadState,ActiveState,SubState,ActiveEnterTimestampMonotonic',
           '--', unit]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, 'cannot run systemctl: %s' % _one_line(exc, 120)
    if proc.returncode != 0:
        return None, 'systemctl show answered rc %d: %s' % (proc.returncode, _one_line(proc.stderr, 120))
    props = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition('=')
        if sep:
            props[key.strip()] = value.strip()
    return props, None


def _new_state(config, backoff_s):
    return {
        'name': config['name'],
        'consecutive_failures': 0,
        'restarts': 0,
        'backoff_s': backoff_s,
        'last_restart': None,
        'next_allowed_restart': None,
        'last_restart_result': None,
        'last_restart_reason': None,
        'last_check': None,
        'last_healthy': None,
        'healthy_since': None,
        'last_reason': None,
    }


def load_state(path, config):
    """(state, note): a fresh state when the file is missing or unreadable (note says why)."""
    state = _new_state(config, config['backoff_initial_s'])
    note = None
    try:
        with open(path, encoding='utf-8') as handle:
            stored = json.load(handle)
        if not isinstance(stored, dict):
            raise ValueError('not a JSON object')
        state.update((key, stored[key]) for key in state if key in stored)
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        note = 'state file %s unreadable (%s), starting afresh' % (path, _one_line(exc, 120))
    try:
        backoff = float(state['backoff_s'])
    except (TypeError, ValueError):
        backoff = config['backoff_initial_s']
    # The configuration may have changed since the state was written.
    state['backoff_s'] = min(max(backoff, config['backoff_initial_s']), config['backoff_max_s'])
    for key in ('consecutive_failures', 'restarts'):
        if not isinstance(state[key], int) or isinstance(state[key], bool) or state[key] < 0:
            state[key] = 0
    state['name'] = config['name']
    return state, note


def save_state(path, state):
    """Write the state atomically: a temporary file in the same directory, then rename."""
    write_atomically(path, json.dumps(state, indent=2, sort_keys=True) + '\n')


# ---------------------------------------------------------------- metrics

METRIC_FAMILIES = (  # name, type, help
    ('llm_engine_probe_success', 'gauge',
     '0 when the last health check failed in a way that counts (unit active and past its loading grace), '
     'else 1.'),
    ('llm_engine_probe_timestamp_seconds', 'gauge',
     'Unix time of the last health check; a value that stops moving means the check no longer runs.'),
    ('llm_engine_probe_interval_seconds', 'gauge', "Seconds between health checks (the timer's period)."),
    ('llm_engine_probe_restarts_total', 'counter',
     'Restarts of the engine by its health check (attempts, kept in its state file).'),
)
HOLD_FAMILIES = (  # name, type, help: written with hold_dir
    ('llm_engine_held', 'gauge',
     '1 while anyone holds the engine stopped (llm-server hold, the UPS, the GPU watchdog), else 0.'),
    ('llm_engine_held_by', 'gauge', '1 for each holder of the engine (label holder).'),
)


def metrics_path(metrics_dir, name):
    """The textfile collector file of instance name."""
    return os.path.join(metrics_dir, 'llm_engine_probe_%s.prom' % name)


def render_metrics(config, success, timestamp, restarts, holders=None):
    """The exposition text of one tick: a HELP and a TYPE line and one sample per family.

    holders (the holder names, with hold_dir) adds llm_engine_held and one
    llm_engine_held_by sample per holder."""
    labels = {'serving_instance': config['name'], 'unit': config['unit'], 'model': config['model']}
    values = {
        'llm_engine_probe_success': 1 if success else 0,
        'llm_engine_probe_timestamp_seconds': round(timestamp, 3),
        'llm_engine_probe_interval_seconds': config['interval'],
        'llm_engine_probe_restarts_total': restarts,
    }
    out = Exposition()
    for name, kind, help_text in METRIC_FAMILIES:
        out.family(name, kind, help_text, [(labels, values[name])])
    if holders is not None:
        (held, held_kind, held_help), (by, by_kind, by_help) = HOLD_FAMILIES
        out.family(held, held_kind, held_help, [(labels, 1 if holders else 0)])
        out.family(by, by_kind, by_help, [(dict(labels, holder=holder), 1) for holder in sorted(set(holders))])
    return out.text()


def _write_metrics(config, state, code, holds):
    """Writes the tick's metrics; returns None, or why they could not be written."""
    path = metrics_path(config['metrics_dir'], config['name'])
    holders = None if holds is None else [holder for holder, _hold in holds]
    text = render_metrics(config, code == EXIT_HEALTHY, state['last_check'], state['restarts'], holders)
    try:
        write_atomically(path, text)
    except OSError as exc:
        return 'metrics not written to %s: %s' % (path, exc.strerror or exc)
    return None


def _seconds(value):
    return '%d s' % round(value) if value >= 10 else '%.1f s' % value


def watch_tick(config, api_key, now=None):
    """One tick. Returns (exit code, log line). Updates the state file."""
    name = config['name']
    state_dir = config['state_dir']
    os.makedirs(state_dir, mode=0o750, exist_ok=True)
    state_path = os.path.join(state_dir, name + '.json')
    lock = open(os.path.join(state_dir, '.%s.lock' % name), 'a', encoding='utf-8')
    try:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return EXIT_HEALTHY, '%s: skipped, another check of it is still running' % name
            raise
        state, note = load_state(state_path, config)
        holds = _holds_on(config)
        code, line = _tick(config, api_key, state, now, holds or [])
        save_state(state_path, state)
        if note:
            line += '; ' + note
        if config['metrics_dir'] is not None:
            # Only counted failures return EXIT_UNHEALTHY: a failure in the grace, a unit
            # that is not active and a healthy engine all return EXIT_HEALTHY.
            why_not = _write_metrics(config, state, code, holds)
            if why_not:
                line += '; ' + why_not
        return code, line
    finally:
        lock.close()


def _holds_on(config):
    """[(holder, hold)] on the engine's unit, or None without hold_dir.

    A hold file that breaks the contract holds nothing (as for the unit's own
    condition); llm-server status names it."""
    if config['hold_dir'] is None:
        return None
    holds, _problems = _holds.read(config['hold_dir'])
    return _holds.holders_of(holds, config['unit'])


def _tick(config, api_key, state, now, holds):
    name, unit = config['name'], config['unit']
    held = '; held by %s' % _holds.describe(holds) if holds else ''
    now = time.time() if now is None else now
    state['last_check'] = now

    props, unknown_why = unit_state(unit)
    in_grace_for = None
    if props is not None:
        if props.get('LoadState') == 'not-found':
            raise ConfigError('unit %s is not known to systemd' % unit)
        active = props.get('ActiveState', '')
        if active != 'active':
            # Not judged: "activating" is a loading engine, and systemd's Restart= owns a failed
            # one; an inactive one was stopped on purpose. Old failures belonged to the last run.
            state['consecutive_failures'] = 0
            state['healthy_since'] = None
            return EXIT_HEALTHY, '%s: not checked, %s is %s (%s)%s' % (
                name, unit, active or 'unknown', props.get('SubState', '?'), held)
        try:
            entered_us = int(props.get('ActiveEnterTimestampMonotonic') or 0)
        except ValueError:
            entered_us = 0
        # systemd's monotonic timestamps and time.monotonic() are both CLOCK_MONOTONIC.
        active_for = time.monotonic() - entered_us / 1e6
        if entered_us > 0 and active_for < config['grace_s']:
            in_grace_for = active_for

    result = run_check(config['url'], config['model'], config['deadline_s'], api_key)
    reason = redact(result['reason'], api_key)
    suffix = '' if props is not None else ' [unit state unknown: %s]' % unknown_why

    if result['healthy']:
        state['consecutive_failures'] = 0
        state['last_healthy'] = now
        if state['healthy_since'] is None:
            state['healthy_since'] = now
        line = '%s: healthy (/health %s s, completion %s s)' % (name, result['health_s'], result['completion_s'])
        healthy_for = now - state['healthy_since']
        if state['backoff_s'] > config['backoff_initial_s'] and healthy_for >= config['backoff_reset_s']:
            state['backoff_s'] = config['backoff_initial_s']
            line += '; backoff back to %s after %s healthy' % (_seconds(state['backoff_s']), _seconds(healthy_for))
        return EXIT_HEALTHY, line + suffix

    state['healthy_since'] = None
    state['last_reason'] = reason
    if in_grace_for is not None:
        state['consecutive_failures'] = 0
        return EXIT_HEALTHY, '%s: not counted, %s became active %s ago (grace %s): %s%s' % (
            name, unit, _seconds(in_grace_for), _seconds(config['grace_s']), reason, suffix)

    state['consecutive_failures'] += 1
    failures, threshold = state['consecutive_failures'], config['failures_before_restart']
    line = '%s: UNHEALTHY (failure %d of %d): %s' % (name, failures, threshold, reason)
    if failures < threshold:
        return EXIT_UNHEALTHY, line + suffix
    if holds:
        # Whoever holds it restarts nothing either: the last holder to let go starts it.
        return EXIT_UNHEALTHY, line + '; not restarted%s%s' % (held, suffix)
    allowed_at = state['next_allowed_restart']
    if allowed_at is not None and now < allowed_at:
        return EXIT_UNHEALTHY, line + '; restart held back by backoff for %s more%s' % (
            _seconds(allowed_at - now), suffix)

    window = state['backoff_s']
    outcome = _restart(config)
    state['restarts'] += 1
    state['last_restart'] = now
    state['next_allowed_restart'] = now + window
    state['backoff_s'] = min(window * 2, config['backoff_max_s'])
    state['last_restart_result'] = outcome
    state['last_restart_reason'] = reason
    state['consecutive_failures'] = 0
    return EXIT_UNHEALTHY, line + '; %s (restart %d; next restart allowed after %s)%s' % (
        outcome, state['restarts'], _seconds(window), suffix)


def _restart(config):
    """Runs the restart command; returns what happened, in words."""
    command = config['restart_command']
    shown = ' '.join(command)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=config['restart_timeout_s'],
                              check=False)
    except subprocess.TimeoutExpired:
        return 'restart command `%s` did not finish within %s' % (shown, _seconds(config['restart_timeout_s']))
    except OSError as exc:
        return 'restart command `%s` could not run: %s' % (shown, exc.strerror or exc)
    if proc.returncode != 0:
        return 'restart command `%s` failed (rc %d): %s' % (shown, proc.returncode,
                                                            _one_line(proc.stderr or proc.stdout, 160))
    return 'ran `%s`' % shown


# ---------------------------------------------------------------- command line


def _positive(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError('%r is not a number' % text)
    if value <= 0:
        raise argparse.ArgumentTypeError('%r must be above 0' % text)
    return value


def _parser():
    parser = argparse.ArgumentParser(prog='llm-health', description=__doc__.split('\n', 1)[0])
    sub = parser.add_subparsers(dest='command', metavar='{check,wait,watch}')
    sub.required = True

    def target(p):
        p.add_argument('--url', required=True, help='server root, e.g. http://127.0.0.1:8001')
        p.add_argument('--model', required=True, help='model name the server serves')
        p.add_argument('--api-key-file', help='file holding the bearer token')
        p.add_argument('--deadline', type=_positive, default=15.0,
                       help='seconds for /health and the completion together (default 15)')

    target(sub.add_parser('check', help='one check, one JSON line'))
    wait = sub.add_parser('wait', help='check until healthy or the timeout passes')
    target(wait)
    wait.add_argument('--timeout', type=_positive, default=600.0, help='seconds (default 600)')
    wait.add_argument('--interval', type=_positive, default=2.0, help='seconds between checks (default 2)')
    wait.add_argument('--json', action='store_true', help='print the verdict as one JSON line')
    watch = sub.add_parser('watch', help='one tick of the systemd timer')
    watch.add_argument('--config', required=True, help='JSON settings, e.g. /etc/llm-server/health/NAME.json')
    return parser


LOG = logging.getLogger('llm-health')


def _emit(text):
    """A command's answer (check, wait) on standard output; what happened goes to LOG."""
    sys.stdout.write(text + '\n')
    sys.stdout.flush()


def main(argv=None):
    args = _parser().parse_args(argv)
    _log.setup(LOG.name)
    api_key = None
    try:
        if args.command == 'watch':
            config = load_watch_config(args.config)
            api_key = read_api_key(config['api_key_file'])
            code, line = watch_tick(config, api_key)
            # A counted failure is a warning: `journalctl -p warning -u llm-health@UNIT` lists them.
            LOG.log(logging.WARNING if code == EXIT_UNHEALTHY else logging.INFO, '%s', redact(line, api_key))
            return code
        url = normalize_url(args.url)
        api_key = read_api_key(args.api_key_file)
        if args.command == 'check':
            result = run_check(url, args.model, args.deadline, api_key)
            result['reason'] = redact(result['reason'], api_key)
            _emit(json.dumps(result, sort_keys=True))
            return EXIT_HEALTHY if result['healthy'] else EXIT_UNHEALTHY

        def progress(elapsed, reason):
            _emit('%.1f s: %s' % (elapsed, redact(reason, api_key)))

        result, elapsed, attempts = run_wait(url, args.model, args.timeout, args.interval, args.deadline,
                                             api_key, progress)
        result['reason'] = redact(result['reason'], api_key)
        if args.json:
            result.update(elapsed_s=round(elapsed, 3), attempts=attempts)
            _emit(json.dumps(result, sort_keys=True))
        else:
            verdict = 'healthy' if result['healthy'] else 'not healthy'
            checks = '1 check' if attempts == 1 else '%d checks' % attempts
            _emit('%s after %.1f s (%s): %s' % (verdict, elapsed, checks, result['reason']))
        return EXIT_HEALTHY if result['healthy'] else EXIT_UNHEALTHY
    except ConfigError as exc:
        LOG.error('%s', redact(str(exc), api_key))
        return EXIT_USAGE
    except OSError as exc:
        # The state directory or its files (the checks themselves catch their errors).
        LOG.error('%s', redact(str(exc), api_key))
        return EXIT_USAGE


if __name__ == '__main__':
    sys.exit(main())
