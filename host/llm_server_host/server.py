# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-server: hold an engine for maintenance, release it, and see who holds what.

An engine is held while anyone holds it: the UPS on battery, the GPU
watchdog for heat or an XID, the owner. Nobody starts a held engine: its
unit runs `llm-server may-start` first and is skipped while a hold counts
(the health checker's restart, the watchdog's restore, the UPS's power-back
and the boot alike). The last holder to release an engine starts it.

  llm-server status [ENGINE ...] [--json]
      Every registered engine (or those named): its unit's state and who
      holds it, why and since when.
  llm-server hold ENGINE [--reason TEXT]
      The owner's hold (kept across reboots), then the engine is stopped.
      ENGINE must be in the registry (a typo would hold nothing).
  llm-server release ENGINE
      Drops the owner's hold; starts the engine when nobody else holds it,
      otherwise says who still does.
  llm-server may-start UNIT
      The engine units' ExecCondition: exit 0 when nothing holds UNIT, 1 (and
      who holds it, for the journal) when something does.
  llm-server drain --engine llamacpp --url URL [--timeout S] [--grace S]
      An engine unit's ExecStop: waits until the engine at URL has no request
      in flight or queued (its /metrics), at most --timeout seconds, then
      sends its main process ($MAINPID) SIGTERM and waits --grace seconds
      for it to exit. llama-server stops its task loop on SIGTERM and never
      answers a request still in flight (the request hangs until its client
      gives up): draining first lets those finish. Should one arrive in the
      last instant, systemd's own SIGTERM after this is llama-server's
      second, on which it exits at once; the proxy retries the request on
      another engine. Exit 0 unless the arguments are wrong.

ENGINE is an engine's name in the registry (vllm-qwen3-cpu0) or its unit.
The settings (hold_dir, registry_dir, systemctl) come from --config, written
by the serving role. Exit 2: a usage or configuration error.

Standard library only: this runs on the target with the system python3.
"""

import argparse
import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from llm_server_host import holds as _holds
from llm_server_host import log as _log
from llm_server_host.collection import _registry
from llm_server_host.files import read_settings

DEFAULT_CONFIG = '/etc/llm-server/llm-server.json'
HOLDER = 'owner'
LOG = logging.getLogger('llm-server')
COMMAND_TIMEOUT_S = 300
# The gauges that say an engine is still working on something, by engine.
BUSY_METRICS = {'llamacpp': ('llamacpp:requests_processing', 'llamacpp:requests_deferred')}
DRAIN_POLL_S = 0.2


def load_config(path):
    try:
        config = read_settings(path)
    except ValueError as exc:
        raise SystemExit('llm-server: %s' % exc) from None
    missing = [key for key in ('hold_dir', 'registry_dir') if not isinstance(config.get(key), str)]
    if missing:
        raise SystemExit('llm-server: %s lacks %s' % (path, ', '.join(missing)))
    config.setdefault('systemctl', 'systemctl')
    return config


def registered(config):
    """The units of the engines in the registry, by name."""
    return [name + '.service' for name in _registry.names(config['registry_dir'])]


def systemctl(config, *args):
    try:
        proc = subprocess.run([config['systemctl']] + list(args), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 1, str(exc)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def active_states(config, units):
    rc, out = systemctl(config, 'show', '--property=ActiveState', '--value', '--', *units)
    values = out.splitlines() if rc == 0 else []
    return dict(zip(units, values)) if len(values) == len(units) else {unit: 'unknown' for unit in units}


def _warn(problems):
    for problem in problems:
        LOG.warning('hold file left out: %s', problem)


def status(config, engines, as_json):
    units = [_holds.unit_of(engine) for engine in engines] or registered(config)
    holds, problems = _holds.read(config['hold_dir'])
    _warn(problems)
    # Entries the GPU watchdog leaves out (it reads their GPUs); the engines are listed all the same.
    _entries, broken = _registry.read(config['registry_dir'])
    for problem in broken:
        LOG.warning('registry entry left out by the GPU watchdog: %s', problem)
    problems = problems + broken
    states = active_states(config, units) if units else {}
    rows = [{'unit': unit, 'state': states.get(unit, 'unknown'),
             'holds': [dict(hold, holder=holder) for holder, hold in _holds.holders_of(holds, unit)]}
            for unit in units]
    if as_json:
        print(json.dumps({'engines': rows, 'problems': problems}, indent=1, sort_keys=True))
        return 0
    if not rows:
        print('no engine is registered in %s' % config['registry_dir'])
    for row in rows:
        held = '; '.join('held by %s: %s since %s' % (
            _holds.holder_name(hold['holder']), hold['reason'],
            time.strftime('%Y-%m-%d %H:%M', time.localtime(hold['since']))) for hold in row['holds'])
        print('%-40s %-12s %s' % (row['unit'], row['state'], held or 'not held'))
    return 0


def hold(config, engine, reason):
    unit = _holds.unit_of(engine)
    known = registered(config)
    if unit not in known:
        # A typo would hold nothing that runs, and the engine meant would go on serving.
        raise _holds.HoldError('%s is not a registered engine (%s); registered: %s' % (
            engine, config['registry_dir'], ', '.join(name[:-len('.service')] for name in known) or 'none'))
    with _holds.updating(config['hold_dir'], HOLDER, persistent=True) as engines:
        if not engines.get(unit):
            engines[unit] = [{'reason': reason, 'since': time.time()}]
    rc, out = systemctl(config, 'stop', '--', unit)
    if rc != 0:
        LOG.error('%s is held, but systemctl stop answered %s: %s', unit, rc, out)
        return 1
    print('%s held by the owner (%s) and stopped; `llm-server release %s` starts it again'
          % (unit, engines[unit][0]['reason'], engine))
    return 0


def release(config, engine):
    unit = _holds.unit_of(engine)
    with _holds.updating(config['hold_dir'], HOLDER, persistent=True) as engines:
        had = engines.pop(unit, None)
    if not had:
        print('%s was not held by the owner' % unit)
    holds, problems = _holds.read(config['hold_dir'])
    _warn(problems)
    others = _holds.holders_of(holds, unit)
    if others:
        print('%s stays stopped: still held by %s' % (unit, _holds.describe(others)))
        return 0
    if not had:
        return 0
    if unit not in registered(config):
        print("%s released; not started: it is not in the registry any more" % unit)
        return 0
    rc, out = systemctl(config, 'start', '--', unit)
    if rc != 0:
        LOG.error('systemctl start %s answered %s: %s', unit, rc, out)
        return 1
    print('%s released and started' % unit)
    return 0


def may_start(config, unit):
    holds, problems = _holds.read(config['hold_dir'])
    # A file nobody can read holds nothing: an engine is not kept down by a
    # broken file (status and the journal name it).
    _warn(problems)
    others = _holds.holders_of(holds, _holds.unit_of(unit))
    if others:
        LOG.warning('%s is held by %s: not started (it starts when the last holder releases it)',
                    unit, _holds.describe(others))
        return 1
    return 0


def busy_requests(url, names, timeout_s=2.0):
    """Requests the engine is working on or has queued (from its /metrics); None when unreadable."""
    try:
        with urllib.request.urlopen(url.rstrip('/') + '/metrics', timeout=timeout_s) as answer:
            text = answer.read().decode('utf-8', 'replace')
    except (OSError, ValueError, urllib.error.URLError):
        return None
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in names:
            try:
                values[parts[0]] = float(parts[1])
            except ValueError:
                return None
    return sum(values.values()) if len(values) == len(names) else None


def _alive(pid):
    """True while pid runs (a zombie waiting for systemd to reap it has exited)."""
    try:
        with open('/proc/%d/stat' % pid, encoding='ascii', errors='replace') as stat:
            return stat.read().rsplit(')', 1)[1].split()[0] != 'Z'
    except (OSError, IndexError):
        return False


def drain(engine, url, timeout_s, grace_s, main_pid):
    names = BUSY_METRICS[engine]
    deadline = time.monotonic() + timeout_s
    busy = busy_requests(url, names)
    if busy:
        LOG.info('draining %s: %d request(s) in flight or queued; waiting at most %d s', url, busy, timeout_s)
    while busy and time.monotonic() < deadline:
        time.sleep(DRAIN_POLL_S)
        busy = busy_requests(url, names)
    if busy:
        LOG.warning('%s still has %d request(s) after %d s: stopping it anyway', url, busy, timeout_s)
    elif busy is None:
        # Not loaded yet, or already gone: nothing it could finish.
        LOG.info('%s does not answer its /metrics: nothing to drain', url)
    if main_pid is None:
        LOG.info('no $MAINPID: systemd stops the engine')
        return 0
    try:
        os.kill(main_pid, signal.SIGTERM)
    except ProcessLookupError:
        return 0
    deadline = time.monotonic() + grace_s
    while _alive(main_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(main_pid):
        LOG.warning('the engine (pid %d) did not exit within %s s of SIGTERM: a request came in as it stopped; '
                    "systemd's SIGTERM makes it exit at once, and the proxy retries the request", main_pid, grace_s)
    return 0


def _positive(text):
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError('must be more than 0, not %s' % text)
    return value


def _parser():
    parser = argparse.ArgumentParser(prog='llm-server', description=__doc__.splitlines()[0])
    parser.add_argument('--config', default=DEFAULT_CONFIG)
    sub = parser.add_subparsers(dest='command', required=True)
    show = sub.add_parser('status', help='who holds which engine')
    show.add_argument('engines', nargs='*', metavar='ENGINE')
    show.add_argument('--json', action='store_true')
    take = sub.add_parser('hold', help="the owner's hold: stop the engine and keep it stopped")
    take.add_argument('engine', metavar='ENGINE')
    take.add_argument('--reason', default='maintenance')
    give = sub.add_parser('release', help="drop the owner's hold; start the engine if nobody else holds it")
    give.add_argument('engine', metavar='ENGINE')
    check = sub.add_parser('may-start', help="the engine units' ExecCondition")
    check.add_argument('unit', metavar='UNIT')
    empty = sub.add_parser('drain', help="an engine unit's ExecStop: let the requests in flight finish, then stop it")
    empty.add_argument('--engine', required=True, choices=sorted(BUSY_METRICS))
    empty.add_argument('--url', required=True, help='the engine itself, http://127.0.0.1:PORT')
    empty.add_argument('--timeout', type=_positive, default=60.0, help='the longest wait for the requests (s)')
    empty.add_argument('--grace', type=_positive, default=5.0, help='the wait for the exit after SIGTERM (s)')
    return parser


def _main_pid():
    text = os.environ.get('MAINPID', '')
    return int(text) if text.isdigit() and int(text) > 1 else None


def main(argv=None):
    args = _parser().parse_args(argv)
    _log.setup(LOG.name)
    if args.command == 'drain':
        # Needs neither the holds nor the registry: it runs as the engine's user.
        return drain(args.engine, args.url, args.timeout, args.grace, _main_pid())
    config = load_config(args.config)
    try:
        if args.command == 'status':
            return status(config, args.engines, args.json)
        if args.command == 'hold':
            if not args.reason.strip():
                raise _holds.HoldError('--reason must say why')
            return hold(config, args.engine, args.reason.strip())
        if args.command == 'release':
            return release(config, args.engine)
        return may_start(config, args.unit)
    except (_holds.HoldError, OSError) as exc:
        LOG.error('%s', exc)
        return 2


if __name__ == '__main__':
    sys.exit(main())
