# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-ups: the LLM engines in step with the UPS (homelab.llm_server, ups role).

NUT's upsmon watches the UPS and runs upssched, as the unprivileged user nut,
on ONBATT, ONLINE and LOWBATT. upssched's command script (`sched`) cannot stop
a unit: it only writes what it asks for into a request file in a directory
nut may write to. A root systemd path unit watching that file runs `apply`,
which stops or starts exactly the engine units.

  llm-ups [--config F] sched EVENT
      upssched's CMDSCRIPT (as nut). engines-off (the on-battery timer fired)
      asks for "stop", power-back (ONLINE) for "start"; low-battery is only
      logged: upsmon itself shuts the host down (its SHUTDOWNCMD, as root).
  llm-ups [--config F] request stop|start
      The same request by hand (root or nut), e.g. to start the engines again
      after a test.
  llm-ups [--config F] apply
      Root, from the path unit: brings the engines to the last request.
      stop: stops the registered engine units that run, and records them
      (state_dir/state.json, under /run: a reboot forgets it). start: starts
      only the units the UPS stopped, once the UPS is on line and charged (see
      gate), then waits until each passes its health check (the serving
      role's llm-health wait). A newer request cuts a wait short. Exit 1
      when an engine started but did not pass its check.
  llm-ups [--config F] gate
      At boot, before the engines (a oneshot they are ordered after): waits
      until the UPS is on line and, when it reports battery.charge, charged
      to resume_charge_percent (or to battery.charge.restart when higher).
      Waits while on battery; at most resume_timeout_s for the charge; without
      any answer from the UPS for no_data_timeout_s it lets the engines start.
  llm-ups [--config F] collect
      One tick of the metrics timer: `upsc` into node exporter's textfile
      collector (llm_ups.prom) and the engines' side (llm_ups_engines.prom).
      A request not handled yet (written just as apply ended, when the path
      unit does not watch) starts apply_unit.
  llm-ups [--config F] status
      What the UPS says and what the UPS stopped, for a person.

The engine units are config engine_units, or (empty) every instance in the
serving registry (instances_dir/NAME.json, unit NAME.service), read when a
request is applied, not when the role ran.

The health checker (llm-health watch) leaves a unit that is not active
alone, so a stop is not undone; while it stops a unit, apply also holds the
checker's lock of that engine, so a check already under way cannot restart
it.

Standard library only: this runs on the target with the system python3.
"""

import argparse
import collections
import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import stat
import subprocess
import sys
import time

from llm_server_host import holds as _holds
from llm_server_host import log as _logging
from llm_server_host.collection import _registry
from llm_server_host.files import read_settings, write_atomically
from llm_server_host.textfile import Exposition

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

DEFAULT_CONFIG = '/etc/llm-server/ups.json'
CONFIG_DEFAULTS = {
    'ups': 'ups@localhost',
    'upsc': '/bin/upsc',
    'systemctl': '/bin/systemctl',
    'health_program': '/opt/llm-server/venv/bin/llm-health',
    'engine_units': [],
    'instances_dir': '/etc/llm-server/instances',
    'health_config_dir': '/etc/llm-server/health',
    'request_file': '/run/llm-server/ups-request/request',
    'state_dir': '/run/llm-server/ups',
    # The holds every actor respects (holds.py): the UPS's are ups.json there.
    'hold_dir': '/var/lib/llm-server/holds',
    'metrics_dir': None,
    'metrics_interval_s': 15,
    'resume_charge_percent': 30,
    'resume_timeout_s': 1800,
    'no_data_timeout_s': 120,
    'start_timeout_s': 900,
    'health_lock_timeout_s': 60,
    'command_timeout_s': 600,
    'poll_s': 2,
    'apply_unit': 'llm-ups-engines.service',
}
_NUMBER_KEYS = ('metrics_interval_s', 'resume_charge_percent', 'resume_timeout_s', 'no_data_timeout_s',
                'start_timeout_s', 'health_lock_timeout_s', 'command_timeout_s', 'poll_s')

# upssched's events (upssched.conf's timer and EXECUTE names) and what each asks for.
EVENTS = {'engines-off': 'stop', 'power-back': 'start', 'low-battery': None}
ACTIONS = ('stop', 'start')
REQUEST_RE = re.compile(r'^(stop|start) ([0-9]{1,20}) ([a-z][a-z-]{0,31})\n?$')
REQUEST_MAX = 128
RUNNING_STATES = ('active', 'activating', 'reloading')
UNIT_RE = re.compile(r'^[A-Za-z0-9:_.@-]+\.service$')
# ups.status flags written as series whether set or not (NUT's docs/new-drivers.txt).
STATUS_FLAGS = ('OL', 'OB', 'LB', 'HB', 'RB', 'CHRG', 'DISCHRG', 'BYPASS', 'CAL', 'OFF', 'OVER', 'TRIM',
                'BOOST', 'FSD')

Request = collections.namedtuple('Request', 'action stamp event')


class ConfigError(Exception):
    """A configuration or usage error: nothing was done, exit 2."""


LOG = logging.getLogger('llm-ups')


def _log(text):
    """What apply, gate and collect do, for the journal (their units' standard error)."""
    LOG.info('%s', text)


def _say(text):
    """The answer of an owner's command (status, request) on standard output."""
    sys.stdout.write(text + '\n')
    sys.stdout.flush()


def _one_line(text, limit=300):
    text = ' '.join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + '...'


# ---------------------------------------------------------------- configuration


def load_config(path):
    """The settings in path (a JSON object) over CONFIG_DEFAULTS. Raises ConfigError."""
    data = read_settings(path, ConfigError)
    unknown = sorted(set(data) - set(CONFIG_DEFAULTS))
    if unknown:
        raise ConfigError('%s: unknown keys %s' % (path, ', '.join(unknown)))
    config = dict(CONFIG_DEFAULTS)
    config.update(data)
    for key in _NUMBER_KEYS:
        try:
            config[key] = float(config[key])
        except (TypeError, ValueError):
            raise ConfigError('%s: %s must be a number, not %r' % (path, key, config[key]))
        if config[key] < 0:
            raise ConfigError('%s: %s must not be negative' % (path, key))
    if not isinstance(config['engine_units'], list):
        raise ConfigError('%s: engine_units must be a list' % path)
    config['engine_units'] = [normalize_unit(unit) for unit in config['engine_units']]
    return config


def normalize_unit(unit):
    """NAME or NAME.service as NAME.service. Raises ConfigError for anything else."""
    unit = str(unit)
    if not unit.endswith('.service'):
        unit += '.service'
    if not UNIT_RE.match(unit):
        raise ConfigError('%r is not a service unit name' % unit)
    return unit


def ups_label(config):
    return config['ups'].split('@', 1)[0]


# ---------------------------------------------------------------- files


def _lock_within(handle, timeout_s):
    """Whether an exclusive flock on handle was had within timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


@contextlib.contextmanager
def flocked(path, timeout_s=None):
    """An exclusive flock on path (created when missing) for the block: the open file, or None
    when timeout_s passed before the lock was had (without timeout_s it waits)."""
    handle = open(path, 'a', encoding='utf-8')
    try:
        if timeout_s is None:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            yield handle
        else:
            yield handle if _lock_within(handle, timeout_s) else None
    finally:
        handle.close()


# ---------------------------------------------------------------- requests


def read_request(path):
    """(Request, None), (None, None) when there is none, or (None, why it is unusable).

    The file is written by the user nut: it is opened without following a link, must be a
    regular file, and only a short line of the expected form counts.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, 'cannot read the request %s: %s' % (path, exc.strerror or exc)
    with os.fdopen(fd, 'rb') as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None, 'the request %s is not a regular file: ignored' % path
        data = handle.read(REQUEST_MAX + 1)
    match = REQUEST_RE.match(data.decode('ascii', 'replace')) if len(data) <= REQUEST_MAX else None
    if not match:
        return None, 'the request %s is not "stop|start STAMP EVENT": ignored' % path
    return Request(match.group(1), match.group(2), match.group(3)), None


def write_request(path, action, event):
    """Ask for action (stop or start) on behalf of event: the request file, replaced atomically."""
    if action not in ACTIONS:
        raise ConfigError('unknown request %r (stop or start)' % action)
    write_atomically(path, '%s %d %s\n' % (action, time.time_ns(), event))


# ---------------------------------------------------------------- state


def new_state():
    return {
        'stopped': [],
        'handled': None,
        'requests': {action: 0 for action in ACTIONS},
        'actions': {action: 0 for action in ACTIONS},
        'last_action': {action: None for action in ACTIONS},
        'waiting_for_power': False,
        'last_start_healthy': None,
    }


def _state_path(config):
    return os.path.join(config['state_dir'], 'state.json')


def load_state(config):
    """The stored state, or a fresh one when it is missing or unreadable (/run: a boot starts afresh)."""
    state = new_state()
    try:
        with open(_state_path(config), encoding='utf-8') as handle:
            stored = json.load(handle)
    except (OSError, ValueError):
        stored = {}
    if not isinstance(stored, dict):
        stored = {}
    for key, default in new_state().items():
        if key in stored and (default is None or isinstance(stored[key], type(default))):
            state[key] = stored[key]
    for key in ('requests', 'actions'):
        state[key] = {action: _count(state[key].get(action)) for action in ACTIONS}
    state['last_action'] = {action: _number(state['last_action'].get(action)) for action in ACTIONS}
    state['stopped'] = [unit for unit in state['stopped'] if isinstance(unit, str) and UNIT_RE.match(unit)]
    return state


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


@contextlib.contextmanager
def state_lock(config):
    os.makedirs(config['state_dir'], mode=0o755, exist_ok=True)
    with flocked(os.path.join(config['state_dir'], 'state.lock')) as handle:
        yield handle


HOLDER = 'ups'
HOLD_REASON = 'on battery'


def save_state(config, state, log=_log):
    """The state file, the UPS's holds and the engines' metrics from it (caller holds state_lock)."""
    write_atomically(_state_path(config), json.dumps(state, indent=2, sort_keys=True) + '\n')
    _sync_holds(config, state, log)
    _write_engines_metrics(config, state, log)


def _sync_holds(config, state, log):
    """The UPS's file in the hold directory: the units it stopped, written only when they changed."""
    held = _holds.own(config['hold_dir'], HOLDER)
    if set(held) == set(state['stopped']):
        return
    since = state['last_action']['stop'] or time.time()
    try:
        _holds.write(config['hold_dir'], HOLDER, {unit: held.get(unit) or [{'reason': HOLD_REASON, 'since': since}]
                                                  for unit in state['stopped']})
    except OSError as exc:
        log('cannot write the UPS\'s holds into %s: %s' % (config['hold_dir'], exc.strerror or exc))


def held_by_others(config, units):
    """{unit: [(holder, hold)]} of the units another holder (the GPU watchdog, the owner) holds."""
    holds, problems = _holds.read(config['hold_dir'])
    for problem in problems:
        LOG.warning('hold file left out: %s', problem)
    return {unit: pairs for unit in units for pairs in [_holds.holders_of(holds, unit, but=HOLDER)] if pairs}


def update_state(config, change, log=_log):
    """Applies change(state) to the stored state under the lock; returns the new state."""
    with state_lock(config):
        state = load_state(config)
        change(state)
        save_state(config, state, log)
        return state


# ---------------------------------------------------------------- systemd and engines


def _run(argv, timeout):
    """(rc, output) of argv; rc None when it could not run or timed out."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None, '%s did not finish within %d s' % (os.path.basename(argv[0]), timeout)
    except OSError as exc:
        return None, 'cannot run %s: %s' % (argv[0], exc.strerror or exc)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def engine_units(config):
    """The units to act on: engine_units, or every instance of the serving registry, now."""
    if config['engine_units']:
        return list(config['engine_units'])
    return [name + '.service' for name in _registry.names(config['instances_dir'])]


def unit_states(config, units):
    """{unit: {LoadState, ActiveState}} from systemctl show, in one call. Raises OSError when it fails."""
    if not units:
        return {}
    rc, out = _run([config['systemctl'], 'show', '--property=LoadState,ActiveState', '--'] + list(units), 60)
    if rc != 0:
        raise OSError('systemctl show failed: %s' % _one_line(out, 200))
    blocks = re.split(r'\n\s*\n', out.strip()) if out.strip() else []
    states = {}
    for unit, block in zip(units, blocks):
        props = {}
        for line in block.splitlines():
            key, sep, value = line.partition('=')
            if sep:
                props[key.strip()] = value.strip()
        states[unit] = props
    return states


def health_config(config, unit):
    """The serving role's health settings of the engine of unit, or None."""
    name = unit[:-len('.service')]
    try:
        with open(os.path.join(config['health_config_dir'], name + '.json'), encoding='utf-8') as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get('url') and data.get('model') else None


@contextlib.contextmanager
def health_checks_held(config, units, log):
    """Holds the health checker's lock of each engine (llm-health watch), bounded in time."""
    with contextlib.ExitStack() as stack:
        for unit in units:
            settings = health_config(config, unit)
            if settings is None:
                continue
            name = str(settings.get('name') or unit[:-len('.service')])
            state_dir = str(settings.get('state_dir') or '/var/lib/llm-server/health')
            if not os.path.isdir(state_dir):
                continue
            try:
                held = stack.enter_context(flocked(os.path.join(state_dir, '.%s.lock' % name),
                                                   config['health_lock_timeout_s']))
            except OSError as exc:
                log('%s: cannot take its health check lock (%s); stopping it anyway' % (unit, exc))
                continue
            if held is None:
                log('%s: its health check still ran after %d s; stopping it anyway'
                    % (unit, config['health_lock_timeout_s']))
        yield


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def read_ups(config):
    """({variable: value}, None) from `upsc UPS`, or (None, why not)."""
    try:
        proc = subprocess.run([config['upsc'], config['ups']], capture_output=True, text=True, timeout=15,
                              check=False)
    except subprocess.TimeoutExpired:
        return None, 'upsc did not answer within 15 s'
    except OSError as exc:
        return None, 'cannot run %s: %s' % (config['upsc'], exc.strerror or exc)
    if proc.returncode != 0:
        # upsc may say "Init SSL without certificate database" before its error.
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith('Error')]
        return None, _one_line((errors or lines or ['upsc answered rc %d' % proc.returncode])[-1], 200)
    values = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition(': ')
        if sep and re.match(r'^[a-z0-9_.]+$', key):
            values[key] = value.strip()
    if 'ups.status' not in values:
        return None, 'upsc listed no ups.status'
    return values, None


def power_verdict(config, values):
    """(ready, note) for what the UPS says now: on line and charged enough."""
    flags = values.get('ups.status', '').split()
    charge = _number(values.get('battery.charge'))
    restart = _number(values.get('battery.charge.restart'))
    need = max(config['resume_charge_percent'], restart or 0)
    if 'OB' in flags:
        return False, 'the UPS is on battery (%s)' % values.get('ups.status')
    if charge is None:
        return True, 'the UPS is on line (%s) and reports no battery.charge' % values.get('ups.status')
    if charge >= need:
        return True, 'the UPS is on line with the battery at %g%% (%g%% needed)' % (charge, need)
    return False, 'the UPS is on line with the battery at %g%%: waiting for %g%%' % (charge, need)


def wait_for_power(config, log, superseded=None, clock=time.monotonic, sleep=time.sleep):
    """Waits until the engines may start. Returns ready, timeout, no-data or superseded.

    While the UPS is on battery it waits on; on line, at most resume_timeout_s for the
    charge; without an answer from the UPS at all, no_data_timeout_s.
    """
    start = clock()
    last_note = None
    while True:
        values, error = read_ups(config)
        elapsed = clock() - start
        if values is None:
            note = 'no data from the UPS %s (%s)' % (config['ups'], error)
            if elapsed >= config['no_data_timeout_s']:
                log('%s for %d s: the engines start without it' % (note, elapsed))
                return 'no-data'
        else:
            ready, note = power_verdict(config, values)
            if ready:
                log(note + (' after %d s' % elapsed if last_note is not None else ''))
                return 'ready'
            on_battery = 'OB' in values.get('ups.status', '').split()
            if not on_battery and elapsed >= config['resume_timeout_s']:
                log('%s, still after %d s: the engines start anyway' % (note, elapsed))
                return 'timeout'
        if note != last_note:
            log(note)
            last_note = note
        if superseded is not None and superseded():
            return 'superseded'
        sleep(config['poll_s'])


# ---------------------------------------------------------------- apply


def _newer_request(config, stamp):
    """A function telling whether a request other than stamp has arrived."""
    def check():
        request, _why = read_request(config['request_file'])
        return request is not None and request.stamp != stamp
    return check


def do_stop(config, log):
    """Stops the engine units that run and records them. Returns stopped or nothing."""
    units = engine_units(config)
    states = unit_states(config, units)
    running = [unit for unit in units if states.get(unit, {}).get('ActiveState') in RUNNING_STATES]
    # Stopped already by another holder (the GPU watchdog, the owner): the UPS
    # holds them too, so a release by that holder on battery does not start
    # them, and starts them at power-back if that holder has let go by then.
    others = held_by_others(config, [unit for unit in units if unit not in running])
    if others:
        log('stop: %s held already (%s): held for the UPS too' % (
            ', '.join(sorted(others)), '; '.join(_holds.describe(pairs) for _unit, pairs in sorted(others.items()))))
    if not running and not others:
        log('stop: no engine runs (%s)' % (', '.join(units) or 'none registered'))
        return 'nothing'

    def record(state):
        state['stopped'] = sorted(set(state['stopped']) | set(running) | set(others))
    # Recorded first: a stop cut short still leaves the units to start again.
    update_state(config, record, log)
    if not running:
        return 'stopped'
    started = time.monotonic()
    with health_checks_held(config, running, log):
        rc, out = _run([config['systemctl'], 'stop', '--'] + running, config['command_timeout_s'])
    if rc != 0:
        log('stop: systemctl stop %s answered %s: %s' % (' '.join(running), rc, _one_line(out, 200)))

    def count(state):
        state['actions']['stop'] += 1
        state['last_action']['stop'] = time.time()
    update_state(config, count, log)
    log('stop: stopped %s in %.1f s' % (', '.join(running), time.monotonic() - started))
    return 'stopped'


def _health_argv(config, settings):
    argv = [config['health_program'], 'wait', '--url', str(settings['url']),
            '--model', str(settings['model']), '--timeout', '%g' % config['start_timeout_s'],
            '--deadline', str(settings.get('deadline_s') or 15), '--json']
    if settings.get('api_key_file'):
        argv += ['--api-key-file', str(settings['api_key_file'])]
    return argv


def _health_verdict(out):
    lines = [line for line in (out or '').splitlines() if line.strip()]
    try:
        data = json.loads(lines[-1])
        return bool(data.get('healthy')), str(data.get('reason', ''))
    except (IndexError, ValueError, AttributeError):
        return False, _one_line(out or 'no answer', 200)


def wait_healthy(config, units, log, superseded):
    """Waits for the health check of each unit at once. Returns (all healthy, superseded)."""
    waits = {}
    for unit in units:
        settings = health_config(config, unit)
        if settings is None:
            log('start: %s has no health check settings: not waited for' % unit)
            continue
        if not os.path.exists(config['health_program']):
            log('start: %s is missing: %s not waited for' % (config['health_program'], unit))
            continue
        try:
            waits[unit] = subprocess.Popen(_health_argv(config, settings), stdout=subprocess.PIPE,
                                           stderr=subprocess.STDOUT, text=True)
        except OSError as exc:
            log('start: cannot check %s: %s' % (unit, exc.strerror or exc))
    started = time.monotonic()
    try:
        while any(proc.poll() is None for proc in waits.values()):
            if superseded():
                return False, True
            time.sleep(0.5)
    finally:
        for proc in waits.values():
            if proc.poll() is None:
                proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
    healthy = True
    for unit, proc in sorted(waits.items()):
        ok, reason = _health_verdict(proc.stdout.read())
        healthy = healthy and ok
        log('start: %s %s after %.1f s: %s' % (unit, 'healthy' if ok else 'NOT healthy',
                                               time.monotonic() - started, reason))
    return healthy, False


def do_start(config, request, log):
    """Starts the units the UPS stopped, once the power allows. Returns started, unhealthy, nothing or superseded."""
    stopped = load_state(config)['stopped']
    if not stopped:
        log('start: the UPS stopped no engine; nothing to start')
        return 'nothing'
    superseded = _newer_request(config, request.stamp)
    update_state(config, lambda state: state.update(waiting_for_power=True), log)
    try:
        verdict = wait_for_power(config, log, superseded)
    finally:
        update_state(config, lambda state: state.update(waiting_for_power=False), log)
    if verdict == 'superseded':
        log('start: a newer request came while waiting for the power; %s stay stopped' % ', '.join(stopped))
        return 'superseded'
    states = unit_states(config, stopped)
    known = [unit for unit in stopped if states.get(unit, {}).get('LoadState') not in ('not-found', None)]
    gone = sorted(set(stopped) - set(known))
    if gone:
        log('start: %s no longer exist: not started' % ', '.join(gone))
    # The UPS lets go of all of them; one that another still holds is started
    # by the last holder to release it.
    others = held_by_others(config, known)
    for unit, pairs in sorted(others.items()):
        log('start: %s stays stopped: released by the UPS, still held by %s' % (unit, _holds.describe(pairs)))
    known = [unit for unit in known if unit not in others]

    # The UPS lets go first: each unit's condition reads the holds as it starts.
    def record(state):
        state['stopped'] = [unit for unit in state['stopped'] if unit not in stopped]
        state['actions']['start'] += 1
        state['last_action']['start'] = time.time()
        state['last_start_healthy'] = None
    update_state(config, record, log)
    began = time.monotonic()
    rc, out = (0, '')
    if known:
        rc, out = _run([config['systemctl'], 'start', '--'] + known, config['command_timeout_s'])
        if rc != 0:
            log('start: systemctl start %s answered %s: %s' % (' '.join(known), rc, _one_line(out, 200)))
    log('start: started %s (%.1f s)' % (', '.join(known) or 'nothing', time.monotonic() - began))
    healthy, cut_short = wait_healthy(config, known, log, superseded)
    if cut_short:
        log('start: a newer request came while waiting for the health checks')
        return 'superseded'
    healthy = healthy and rc == 0
    update_state(config, lambda state: state.update(last_start_healthy=healthy), log)
    return 'started' if healthy else 'unhealthy'


def apply(config, log=_log):
    """Applies requests until the last one is handled. Exit 0, or 1 when a start ended unhealthy."""
    os.makedirs(config['state_dir'], mode=0o755, exist_ok=True)
    code = EXIT_OK
    with flocked(os.path.join(config['state_dir'], 'apply.lock')):
        while True:
            request, why = read_request(config['request_file'])
            if why:
                log(why)
            state = load_state(config)
            if request is None or request.stamp == state['handled']:
                with state_lock(config):
                    save_state(config, load_state(config), log)
                return code

            def count(state, request=request):
                state['requests'][request.action] += 1
            update_state(config, count, log)
            log('request: %s (%s)' % (request.action, request.event))
            outcome = do_stop(config, log) if request.action == 'stop' else do_start(config, request, log)
            if outcome == 'unhealthy':
                code = EXIT_FAILED
            update_state(config, lambda state, request=request: state.update(handled=request.stamp), log)


# ---------------------------------------------------------------- metrics


def render_ups_metrics(config, values, data_timestamp, now):
    """llm_ups.prom: the UPS as upsd reports it (values None: it did not answer)."""
    ups = ups_label(config)
    this = dict(ups=ups)
    out = Exposition()
    out.family('llm_ups_up', 'gauge', 'Whether upsd answered for the UPS on the last tick (0: upsd down, driver '
               'not connected or data stale).', [(this, 1 if values is not None else 0)])
    out.family('llm_ups_data_timestamp_seconds', 'gauge', 'Unix time of the last answer from the UPS (0: none '
               'since boot); its age is how stale the UPS figures are.', [(this, data_timestamp or 0)])
    out.family('llm_ups_metrics_timestamp_seconds', 'gauge', 'Unix time of the last tick of the collector.',
               [(this, now)])
    out.family('llm_ups_metrics_interval_seconds', 'gauge', 'Seconds between ticks of the collector.',
               [(this, config['metrics_interval_s'])])
    if values is None:
        return out.text()
    flags = values.get('ups.status', '').split()
    known = [(dict(ups=ups, flag=flag), 1 if flag in flags else 0) for flag in STATUS_FLAGS]
    extra = [(dict(ups=ups, flag=flag), 1) for flag in sorted(set(flags) - set(STATUS_FLAGS))
             if re.match(r'^[A-Za-z0-9_.-]{1,32}$', flag)]
    out.family('llm_ups_status', 'gauge', 'ups.status, one series per flag: 1 when set (OL on line, OB on '
               'battery, LB low battery, FSD forced shutdown, ...).', known + extra)
    figures = (
        ('llm_ups_battery_charge_ratio', 'battery.charge', 0.01, 'Battery charge, 0 to 1 (battery.charge).'),
        ('llm_ups_battery_charge_low_ratio', 'battery.charge.low', 0.01,
         'The charge at which the UPS reports low battery, 0 to 1 (battery.charge.low).'),
        ('llm_ups_battery_runtime_seconds', 'battery.runtime', 1,
         "The UPS's estimate of the seconds left on battery at the present load (battery.runtime)."),
        ('llm_ups_battery_runtime_low_seconds', 'battery.runtime.low', 1,
         'The runtime at which the UPS reports low battery (battery.runtime.low).'),
        ('llm_ups_load_ratio', 'ups.load', 0.01, 'Load on the UPS, 0 to 1 of its rating (ups.load).'),
        ('llm_ups_input_voltage_volts', 'input.voltage', 1, 'Input voltage (input.voltage).'),
    )
    for name, variable, scale, help_text in figures:
        value = _number(values.get(variable))
        if value is not None:
            out.family(name, 'gauge', help_text, [(this, value * scale)])
    info = {'ups': ups, 'mfr': values.get('device.mfr') or values.get('ups.mfr', ''),
            'model': values.get('device.model') or values.get('ups.model', ''),
            'driver': values.get('driver.name', '')}
    out.family('llm_ups_info', 'gauge', 'The UPS: manufacturer, model and NUT driver.', [(dict(**info), 1)])
    return out.text()


def render_engines_metrics(state):
    """llm_ups_engines.prom: what the UPS side did to the engines."""
    out = Exposition()
    out.family('llm_ups_engines_stopped', 'gauge', 'Engines stopped because the UPS ran on battery, not yet '
               'started again.', [('', len(state['stopped']))])
    out.family('llm_ups_engine_stopped', 'gauge', 'One series per engine the UPS stopped, until it is started '
               'again.', [(dict(serving_instance=unit[:-len('.service')], unit=unit), 1)
                          for unit in state['stopped']])
    out.family('llm_ups_requests_total', 'counter', 'Requests of upssched (on battery too long: stop; power '
               'back: start) since boot.', [(dict(request=a), state['requests'][a]) for a in ACTIONS])
    out.family('llm_ups_actions_total', 'counter', 'Times engines were stopped or started for the UPS since boot.',
               [(dict(action=a), state['actions'][a]) for a in ACTIONS])
    out.family('llm_ups_last_action_timestamp_seconds', 'gauge', 'Unix time of the last stop or start for the UPS.',
               [(dict(action=a), state['last_action'][a]) for a in ACTIONS if state['last_action'][a]])
    out.family('llm_ups_waiting_for_power', 'gauge', '1 while a start waits for the UPS to be on line and charged.',
               [('', 1 if state['waiting_for_power'] else 0)])
    if state['last_start_healthy'] is not None:
        out.family('llm_ups_last_start_healthy', 'gauge', 'Whether every engine of the last start passed its '
                   'health check.', [('', 1 if state['last_start_healthy'] else 0)])
    return out.text()


def _write_engines_metrics(config, state, log):
    if not config['metrics_dir']:
        return
    path = os.path.join(config['metrics_dir'], 'llm_ups_engines.prom')
    try:
        write_atomically(path, render_engines_metrics(state))
    except OSError as exc:
        log('metrics not written to %s: %s' % (path, exc.strerror or exc))


def collect(config, log=_log, now=None):
    """One tick: the UPS's figures and the engines' side into the textfile collector."""
    now = time.time() if now is None else now
    values, error = read_ups(config)
    os.makedirs(config['state_dir'], mode=0o755, exist_ok=True)
    seen_path = os.path.join(config['state_dir'], 'collect.json')
    data_timestamp = 0
    try:
        with open(seen_path, encoding='utf-8') as handle:
            data_timestamp = float(json.load(handle).get('data_timestamp') or 0)
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    if values is not None:
        data_timestamp = now
        write_atomically(seen_path, json.dumps({'data_timestamp': now}) + '\n')
    else:
        log('no data from the UPS %s: %s' % (config['ups'], error))
    if config['metrics_dir']:
        write_atomically(os.path.join(config['metrics_dir'], 'llm_ups.prom'),
                         render_ups_metrics(config, values, data_timestamp, now))
    with state_lock(config):
        state = load_state(config)
        save_state(config, state, log)
    # A request written just as apply finished is not seen by the path unit
    # (it does not watch while its service runs): start apply for it here.
    request, _why = read_request(config['request_file'])
    if request is not None and request.stamp != state['handled']:
        try:
            running = unit_states(config, [config['apply_unit']]).get(config['apply_unit'], {}).get(
                'ActiveState') in RUNNING_STATES
        except OSError as exc:
            log(str(exc))
            running = True
        if not running:
            log('request %s (%s) not handled yet: starting %s'
                % (request.action, request.event, config['apply_unit']))
            rc, out = _run([config['systemctl'], 'start', '--no-block', config['apply_unit']], 30)
            if rc != 0:
                log('cannot start %s: %s' % (config['apply_unit'], _one_line(out, 200)))
    return EXIT_OK


def status(config, log=_say):
    values, error = read_ups(config)
    if values is None:
        log('UPS %s: no data (%s)' % (config['ups'], error))
    else:
        log('UPS %s: %s, battery %s%%, runtime %s s, load %s%%' % (
            config['ups'], values.get('ups.status'), values.get('battery.charge', '?'),
            values.get('battery.runtime', '?'), values.get('ups.load', '?')))
        log(power_verdict(config, values)[1])
    state = load_state(config)
    log('engines: %s' % ', '.join(engine_units(config)))
    log('stopped by the UPS: %s' % (', '.join(state['stopped']) or 'none'))
    others = held_by_others(config, engine_units(config))
    for unit, pairs in sorted(others.items()):
        log('%s is held by %s too' % (unit, _holds.describe(pairs)))
    request, why = read_request(config['request_file'])
    if request is not None:
        handled = '' if request.stamp == state['handled'] else ', not handled yet'
        log('last request: %s (%s)%s' % (request.action, request.event, handled))
    elif why:
        log(why)
    return EXIT_OK


# ---------------------------------------------------------------- command line


def _syslog(text):
    import syslog
    syslog.openlog('llm-ups', syslog.LOG_PID, syslog.LOG_DAEMON)
    syslog.syslog(syslog.LOG_NOTICE, text)


def sched(config, event, log=_syslog):
    if event not in EVENTS:
        log('upssched event %r is not one of %s: nothing done' % (event, ', '.join(sorted(EVENTS))))
        return EXIT_USAGE
    action = EVENTS[event]
    if action is None:
        log('%s: upsmon shuts the host down (its SHUTDOWNCMD); nothing else to do here' % event)
        return EXIT_OK
    write_request(config['request_file'], action, event)
    log('%s: asked to %s the LLM engines' % (event, action))
    return EXIT_OK


def _parser():
    parser = argparse.ArgumentParser(prog='llm-ups', description=__doc__.split('\n', 1)[0])
    parser.add_argument('--config', default=DEFAULT_CONFIG, help='JSON settings (default %s)' % DEFAULT_CONFIG)
    sub = parser.add_subparsers(dest='command', metavar='{sched,request,apply,gate,collect,status}')
    sub.required = True
    sched_parser = sub.add_parser('sched', help="upssched's command script (as nut)")
    sched_parser.add_argument('event', help=', '.join(sorted(EVENTS)))
    request_parser = sub.add_parser('request', help='ask for a stop or a start by hand')
    request_parser.add_argument('action', choices=ACTIONS)
    sub.add_parser('apply', help='stop or start the engines as last asked (root)')
    sub.add_parser('gate', help='wait until the UPS is on line and charged')
    sub.add_parser('collect', help='one tick of the metrics collector')
    sub.add_parser('status', help='the UPS and the engines it stopped')
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    _logging.setup(LOG.name)
    try:
        config = load_config(args.config)
        if args.command == 'sched':
            return sched(config, args.event)
        if args.command == 'request':
            write_request(config['request_file'], args.action, 'by-hand')
            _say('asked to %s the LLM engines' % args.action)
            return EXIT_OK
        if args.command == 'apply':
            return apply(config)
        if args.command == 'gate':
            wait_for_power(config, _log)
            return EXIT_OK
        if args.command == 'collect':
            return collect(config)
        return status(config)
    except ConfigError as exc:
        LOG.error('%s', exc)
        return EXIT_USAGE
    except OSError as exc:
        LOG.error('%s', exc)
        return EXIT_FAILED


if __name__ == '__main__':
    sys.exit(main())
