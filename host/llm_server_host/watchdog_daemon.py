# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The GPU watchdog's loop: read NVML, decide (_watchdog), act, keep state, write metrics.

Private to this collection. gpu_watchdog.py (llm-gpu-watchdog) is the thin
program around it.

Reading: nvml_supervisor.Supervisor, the GPU exporter's own NVML worker, so
every read is bounded in time (a GPU on which NVML hangs is left alone for a
while and the others are still read) and XID events arrive through NVML's
event set. Where a GPU does not report XID events, the kernel log's
"NVRM: Xid (PCI:...): N" lines stand in (/dev/kmsg, or a file in tests).

Acting, each step logged and counted (llm_watchdog_actions_total):
- power limits and clock locks through a short-lived NVML process of their
  own (the program with --set), killed after set_timeout_s: a setter stuck
  in the driver cannot hang the watchdog, even one that SIGKILL cannot end
  (left behind, counted in llm_watchdog_stuck_calls);
- engines through systemd (`systemctl --no-block`): stopping an engine
  drains it (its server stops accepting and finishes what it has, within
  the unit's TimeoutStopSec; the front door sends new requests to the
  other GPU or the standby). An engine the watchdog stopped is "held":
  the health check leaves a stopped unit alone, and only the watchdog (when
  the GPU has cooled) or `llm-gpu-watchdog release` starts it again;
- a reboot only with allow_reboot, at most reboots_per_day (a state file
  that survives the reboots it counts).

dry_run: every decision is made, logged and counted (result dry_run), and
nothing is changed; the heat steps advance as if they had been taken.

State under run_dir (/run: a power limit or clock lock NVML holds lasts as
long as the boot, and so does the memory of it): heat levels and the limits
to go back to, held engines, GPUs that need a person. Reboots under
state_dir (persistent).
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from llm_server_host import holds as _holds
from llm_server_host import textfile as _textfile
from llm_server_host.collection import _registry, _watchdog
from llm_server_host.files import write_atomically

METRICS_FILE = 'llm_gpu_watchdog.prom'

DEFAULTS = {
    'interval_s': 5.0,
    'dry_run': False,
    'nvml_timeout_s': 5.0,
    'set_timeout_s': 10.0,
    'quarantine_s': 300.0,
    'heat': {},
    'heat_per_gpu': {},
    'restarts_per_hour': 3,
    'restart_backoff_initial_s': 30.0,
    'restart_backoff_max_s': 600.0,
    'xid_repeat_window_s': 3600.0,
    'allow_reboot': False,
    'reboots_per_day': 1,
    'reboot_command': ['systemctl', 'reboot'],
    'systemctl': 'systemctl',
    'registry_dir': '/etc/llm-server/instances',
    'state_dir': '/var/lib/llm-server/watchdog',
    'run_dir': '/run/llm-server/watchdog',
    # The holds every actor respects (holds.py): the watchdog's are HOLDER.json there.
    'hold_dir': '/var/lib/llm-server/holds',
    'metrics_dir': None,
    'kernel_log': '/dev/kmsg',
}
_NUMBERS = ('interval_s', 'nvml_timeout_s', 'set_timeout_s', 'quarantine_s', 'xid_repeat_window_s')
_NON_NEGATIVE = ('restart_backoff_initial_s', 'restart_backoff_max_s')
_COUNTS = ('restarts_per_hour', 'reboots_per_day')
_PATHS = ('registry_dir', 'state_dir', 'run_dir', 'hold_dir')
# Its name in the hold directory.
HOLDER = 'watchdog'

# "NVRM: Xid (PCI:0000:01:00): 79, pid=..., GPU has fallen off the bus."
KERNEL_XID = re.compile(r'NVRM: Xid \(PCI:([0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F]+)(?:\.[0-9a-fA-F])?\): (\d+)')


class ConfigError(ValueError):
    pass


def load_config(data):
    """The daemon's configuration from a dict (the role's JSON): defaults filled in, every value checked."""
    if not isinstance(data, dict):
        raise ConfigError('the configuration must be a JSON object')
    unknown = sorted(set(data) - set(DEFAULTS))
    if unknown:
        raise ConfigError('unknown setting(s): %s' % ', '.join(unknown))
    config = dict(DEFAULTS)
    config.update(data)
    for name in _NUMBERS:
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise ConfigError('%s must be a number above 0, not %r' % (name, value))
        config[name] = float(value)
    for name in _NON_NEGATIVE:
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ConfigError('%s must be a number, 0 or more, not %r' % (name, value))
        config[name] = float(value)
    for name in _COUNTS:
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError('%s must be a whole number, 0 or more, not %r' % (name, value))
    if config['restart_backoff_max_s'] < config['restart_backoff_initial_s']:
        raise ConfigError('restart_backoff_max_s must not be below restart_backoff_initial_s')
    for name in ('dry_run', 'allow_reboot'):
        if not isinstance(config[name], bool):
            raise ConfigError('%s must be true or false, not %r' % (name, config[name]))
    for name in _PATHS:
        if not isinstance(config[name], str) or not config[name].startswith('/'):
            raise ConfigError('%s must be an absolute path, not %r' % (name, config[name]))
    for name in ('metrics_dir', 'kernel_log'):
        value = config[name]
        if value is not None and (not isinstance(value, str) or (value and not value.startswith('/'))):
            raise ConfigError('%s must be an absolute path, "" or null, not %r' % (name, value))
    command = config['reboot_command']
    if not isinstance(command, list) or not command or not all(isinstance(word, str) and word for word in command):
        raise ConfigError('reboot_command must be a non-empty list of words, not %r' % (command,))
    if not isinstance(config['systemctl'], str) or not config['systemctl']:
        raise ConfigError('systemctl must be a command name or path')
    try:
        config['heat'] = _watchdog.HeatConfig.from_dict(config['heat'])
    except (TypeError, ValueError) as err:
        raise ConfigError('heat: %s' % err) from None
    per_gpu = config['heat_per_gpu']
    if not isinstance(per_gpu, dict):
        raise ConfigError('heat_per_gpu must map a GPU index or UUID to heat settings')
    checked = {}
    for gpu, settings in per_gpu.items():
        if not isinstance(settings, dict):
            raise ConfigError('heat_per_gpu[%s] must be an object of heat settings' % gpu)
        merged = dict(_heat_dict(config['heat']), **settings)
        try:
            checked[str(gpu)] = _watchdog.HeatConfig.from_dict(merged)
        except (TypeError, ValueError) as err:
            raise ConfigError('heat_per_gpu[%s]: %s' % (gpu, err)) from None
    config['heat_per_gpu'] = checked
    return config


def _heat_dict(heat):
    return dict(heat.__dict__)


def engines_by_gpu(registry_dir):
    """{NVML index: [engine names]} from the serving registry (each entry's "gpus"); an entry that breaks
    the contract is left out (llm-server status names it)."""
    result = {}
    entries, _problems = _registry.read(registry_dir)
    for name, entry in entries.items():
        for gpu in entry['gpus']:
            result.setdefault(gpu, []).append(name)
    return result


def write_atomic(path, text, mode=0o644):
    """write_atomically, its directory made first (the run directory is under /run)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    write_atomically(path, text, mode)


def read_json(path, default):
    try:
        with open(path, encoding='utf-8') as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default


def _bus(value):
    """'00000000:01:00.0' or '0000:01:00' -> '01:00' (bus and device: what the kernel line and NVML share)."""
    parts = str(value or '').lower().split(':')
    if len(parts) < 3:
        return None
    return '%02x:%s' % (int(parts[-2], 16), parts[-1].split('.')[0].zfill(2))


class KernelLog(object):
    """New "NVRM: Xid" lines of the kernel log: /dev/kmsg (records) or a plain file (lines, for tests)."""

    def __init__(self, path):
        self.path = path
        self._fd = None
        self._offset = None
        self._kmsg = path == '/dev/kmsg' or path.startswith('/dev/')
        self.error = None

    def _open(self):
        if self._fd is not None:
            return True
        try:
            if self._kmsg:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
                os.lseek(self._fd, 0, os.SEEK_END)  # what came before the watchdog is not news
            else:
                self._fd = os.open(self.path, os.O_RDONLY)
                if self._offset is None:
                    self._offset = os.fstat(self._fd).st_size
        except OSError as err:
            self._fd = None
            self.error = '%s: %s' % (self.path, err.strerror)
            return False
        self.error = None
        return True

    def read(self):
        """[(bus 'bb:dd', xid)] that appeared since the last call."""
        if not self._open():
            return []
        lines = []
        if self._kmsg:
            while True:
                try:
                    record = os.read(self._fd, 8192)
                except BlockingIOError:
                    break
                except OSError as err:
                    if err.errno == errno.EPIPE:  # records overwritten before they were read
                        continue
                    self.error = '%s: %s' % (self.path, err.strerror)
                    break
                if not record:
                    break
                lines.append(record.decode('utf-8', 'replace').split(';', 1)[-1])
        else:
            size = os.fstat(self._fd).st_size
            if size < self._offset:  # truncated or replaced
                self._offset = 0
            os.lseek(self._fd, self._offset, os.SEEK_SET)
            chunk = b''
            while True:
                data = os.read(self._fd, 65536)
                if not data:
                    break
                chunk += data
            complete = chunk[:chunk.rfind(b'\n') + 1]
            self._offset += len(complete)
            lines = complete.decode('utf-8', 'replace').splitlines()
        found = []
        for line in lines:
            match = KERNEL_XID.search(line)
            if match:
                found.append((_bus(match.group(1)), int(match.group(2))))
        return found


class Actuator(object):
    """What the watchdog changes: systemd units, NVML settings, the reboot. Each call -> (ok, detail).

    Each call is a child process in a session of its own, its output in a
    file (a grandchild holding a pipe cannot keep the call open). At its
    deadline the whole session is killed; a child that still does not exit
    within KILL_WAIT_S sits in the kernel (a setter in uninterruptible sleep
    inside the driver, where SIGKILL waits for the call to return): the loop
    leaves it behind in `stuck`, goes on with its rounds, and reap() notices
    when it is gone.
    """

    KILL_WAIT_S = 1.0

    def __init__(self, config, setter_command):
        self.config = config
        self.setter_command = list(setter_command)
        self.stuck = []  # (Popen, what it was running)

    def systemctl(self, verb, unit):
        command = [self.config['systemctl'], verb, '--no-block', unit + '.service']
        return self._run(command, 30.0)

    def nvml_set(self, kind, gpu, uuid, value=None):
        command = self.setter_command + ['--set', kind, '--gpu', str(gpu)]
        if uuid:
            command += ['--uuid', uuid]
        if value is not None:
            command += ['--value', '%g' % value]
        return self._run(command, self.config['set_timeout_s'])

    def reboot(self):
        return self._run(list(self.config['reboot_command']), 60.0)

    def reap(self):
        """Forget the left-behind calls that have exited since; -> how many are still stuck."""
        self.stuck = [(proc, what) for proc, what in self.stuck if proc.poll() is None]
        return len(self.stuck)

    def _run(self, command, timeout):
        with tempfile.TemporaryFile(mode='w+') as output:
            try:
                proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        close_fds=True, universal_newlines=True)
            except OSError as err:
                return False, '%s: %s' % (command[0], err.strerror)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False, self._abandon(proc, command, timeout)
            output.seek(0)
            text = ' '.join(output.read().split())[-400:]
        if proc.returncode != 0:
            return False, 'exit %d: %s' % (proc.returncode, text or 'no output')
        return True, text

    def _abandon(self, proc, command, timeout):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:  # the group is gone already
            pass
        try:
            proc.wait(timeout=self.KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            self.stuck.append((proc, ' '.join(command)[-200:]))
            return ('%s did not finish within %g s and did not exit when killed (stuck in the kernel, '
                    'pid %d left behind)' % (command[0], timeout, proc.pid))
        return '%s did not finish within %g s (killed)' % (command[0], timeout)


class Metrics(object):
    """Counters and gauges kept in memory, written as a textfile for node exporter."""

    HELP = {
        'llm_watchdog_last_run_timestamp_seconds': ('gauge', 'When the watchdog last finished a round.'),
        'llm_watchdog_interval_seconds': ('gauge', 'Seconds between rounds.'),
        'llm_watchdog_dry_run': ('gauge', '1 when the watchdog only says what it would do.'),
        'llm_watchdog_nvml_success': ('gauge', '1 when the last round read every GPU through NVML in time.'),
        'llm_watchdog_heat_level': ('gauge', 'Heat step of the GPU: 0 normal, 1 power limit lowered, '
                                             '2 clocks locked, 3 engines stopped.'),
        'llm_watchdog_heat_threshold_celsius': ('gauge', 'The temperature at which each heat step acts.'),
        'llm_watchdog_actions_total': ('counter', 'Actions decided, by kind and result '
                                                  '(done, failed, dry_run, suppressed, skipped).'),
        'llm_watchdog_xid_events_total': ('counter', 'XID events the watchdog handled, by XID and action.'),
        'llm_watchdog_engine_held': ('gauge', '1 for each engine the watchdog stopped and holds stopped.'),
        'llm_watchdog_gpu_needs_attention': ('gauge', '1 when a GPU needs a reset or a reboot that the '
                                                      'watchdog did not do.'),
        'llm_watchdog_kernel_log_fallback': ('gauge', '1 when XIDs of this GPU come from the kernel log '
                                                      '(NVML events not supported).'),
        'llm_watchdog_stuck_calls': ('gauge', 'Calls the watchdog killed at their deadline that have not exited '
                                              '(stuck in the driver); the loop goes on without them.'),
    }

    def __init__(self):
        self.counters = {}  # (name, labels tuple) -> value
        self.gauges = {}

    def count(self, name, labels, amount=1):
        key = (name, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0) + amount

    def set(self, name, labels, value):
        self.gauges[(name, tuple(sorted(labels.items())))] = value

    def clear(self, name):
        for key in [key for key in self.gauges if key[0] == name]:
            del self.gauges[key]

    def render(self):
        merged = dict(self.gauges)
        merged.update(self.counters)
        out = _textfile.Exposition()
        for name in sorted(set(key[0] for key in merged)):
            kind, text = self.HELP.get(name, ('gauge', name))
            out.family(name, kind, text, [(key[1], merged[key]) for key in sorted(key for key in merged if key[0] == name)])
        return out.text()


class Watchdog(object):
    """One round per tick(): read, decide, act, save, write metrics."""

    def __init__(self, config, supervisor, actuator, log, clock=time.monotonic, wall_clock=time.time):
        self.config = config
        self.supervisor = supervisor
        self.actuator = actuator
        self.log = log
        self.clock = clock
        self.wall_clock = wall_clock
        self.metrics = Metrics()
        self.xid_policy = _watchdog.XidPolicy(repeat_window_s=config['xid_repeat_window_s'])
        self.restart_budgets = {}
        self.xid_seen = {}  # index -> {xid: count handled}
        self.kernel_log = KernelLog(config['kernel_log']) if config['kernel_log'] else None
        self._kernel_log_error = None
        self._heat_path = os.path.join(config['run_dir'], 'heat.json')
        self._attention_path = os.path.join(config['run_dir'], 'attention.json')
        self._reboots_path = os.path.join(config['state_dir'], 'reboots.json')
        saved = read_json(self._heat_path, {})
        self.heat = {}
        for index, state in saved.items():
            try:
                self.heat[int(index)] = _watchdog.HeatPolicy(self._heat_config(int(index), None),
                                                             gpu=int(index), state=state)
            except (TypeError, ValueError) as err:
                self.log('heat state of GPU %s not loaded (%s): starting from normal' % (index, err))
        # The engines it stopped (name -> [{gpu, reason, since, message}]): its
        # file in the hold directory (by unit), which counts for this boot only.
        self.held = {unit[:-len('.service')]: holds
                     for unit, holds in _holds.own(config['hold_dir'], HOLDER).items()}
        self._held_written = json.dumps(self.held, sort_keys=True)
        self.attention = read_json(self._attention_path, {})
        self.recovery_actions = {}
        self.dry = config['dry_run']

    # -- helpers -------------------------------------------------------------

    def _heat_config(self, index, uuid):
        per_gpu = self.config['heat_per_gpu']
        return per_gpu.get(str(index)) or (per_gpu.get(uuid) if uuid else None) or self.config['heat']

    def _save(self):
        state = {str(index): policy.state() for index, policy in sorted(self.heat.items())}
        write_atomic(self._heat_path, json.dumps(state, indent=1, sort_keys=True) + '\n')
        self._save_holds()
        write_atomic(self._attention_path, json.dumps(self.attention, indent=1, sort_keys=True) + '\n')

    def _save_holds(self):
        """Its file in the hold directory, when its holds changed (never in a dry run: the
        proxy would take the engine out, and nothing would start it)."""
        if self.dry:
            return
        held = json.dumps(self.held, sort_keys=True)
        if held != self._held_written:
            _holds.write(self.config['hold_dir'], HOLDER,
                         {_holds.unit_of(name): holds for name, holds in self.held.items()})
            self._held_written = held

    def _act(self, gpu, action, what, call):
        """Carry out one action (or say what it would do): log, count, return True when done."""
        if self.dry:
            self.log('dry run: would %s' % what)
            self.metrics.count('llm_watchdog_actions_total', {'gpu': gpu, 'action': action, 'result': 'dry_run'})
            return True
        ok, detail = call()
        result = 'done' if ok else 'failed'
        self.log('%s: %s%s' % (what, result, '' if ok or not detail else ' (%s)' % detail))
        self.metrics.count('llm_watchdog_actions_total', {'gpu': gpu, 'action': action, 'result': result})
        return ok

    def _hold(self, unit, gpu, reason, message):
        holds = self.held.setdefault(unit, [])
        if not any(hold['gpu'] == gpu and hold['reason'] == reason for hold in holds):
            holds.append({'gpu': gpu, 'reason': reason, 'since': self.wall_clock(), 'message': message})

    def stop_engines(self, gpu, engines, reason, message, action):
        for unit in engines:
            already = unit in self.held and self.held[unit]
            self._hold(unit, gpu, reason, message)
            if already:
                self.log('%s is already stopped by the watchdog (%s)' % (
                    unit, ', '.join('%s on GPU %s' % (h['reason'], h['gpu']) for h in self.held[unit])))
                continue
            # Held first: the proxy marks it down while its requests drain.
            self._save_holds()
            self._act(gpu, action, 'stop engine %s on GPU %s' % (unit, gpu),
                      lambda unit=unit: self.actuator.systemctl('stop', unit))

    def release(self, gpu, reason, action):
        """Drop the watchdog's holds of this reason on this GPU; start the engines nothing else holds."""
        for unit in sorted(self.held):
            holds = self.held[unit]
            remaining = [hold for hold in holds
                         if not (hold['gpu'] == gpu and reason in (None, hold['reason']))]
            if len(remaining) == len(holds):
                continue
            if remaining:
                self.held[unit] = remaining
                self.log('%s stays stopped: %s' % (unit, ', '.join(
                    '%s on GPU %s' % (hold['reason'], hold['gpu']) for hold in remaining)))
                continue
            del self.held[unit]
            # The UPS on battery or the owner may hold it too: the last to release it starts it.
            others = _holds.holders_of(_holds.read(self.config['hold_dir'])[0], _holds.unit_of(unit), but=HOLDER)
            if others:
                self.log('%s stays stopped: released by the watchdog, still held by %s' % (
                    unit, _holds.describe(others)))
                continue
            # Let go first: the unit's condition reads the holds when it starts.
            self._save_holds()
            self._act(gpu, action, 'start engine %s on GPU %s again' % (unit, gpu),
                      lambda unit=unit: self.actuator.systemctl('start', unit))

    # -- one round ---------------------------------------------------------------

    def _release_requests(self, gpus):
        """Requests of `llm-gpu-watchdog release`: a person fixed the GPU (or all of them)."""
        directory = os.path.join(self.config['run_dir'], 'release')
        for path in sorted(glob.glob(os.path.join(directory, '*'))):
            name = os.path.basename(path)
            if name.startswith('.'):
                continue
            if name == 'all':
                targets = sorted(set(int(hold['gpu']) for holds in self.held.values() for hold in holds)
                                 | set(int(gpu) for gpu in self.attention) | set(self.heat))
            else:
                try:
                    targets = [int(name)]
                except ValueError:
                    targets = []
            for gpu in targets:
                self.log('release of GPU %s asked for' % gpu)
                self.attention.pop(str(gpu), None)
                policy = self.heat.pop(gpu, None)
                if policy is not None and policy.level > _watchdog.NORMAL:
                    uuid = ((gpus.get(gpu) or {}).get('facts') or {}).get('uuid')
                    if policy.level >= _watchdog.CLOCKS_LOCKED:
                        self._act(gpu, _watchdog.UNLOCK_CLOCKS, 'unlock the graphics clocks of GPU %s' % gpu,
                                  lambda gpu=gpu, uuid=uuid: self.actuator.nvml_set('unlock_clocks', gpu, uuid))
                    if policy.restore_power_limit_w is not None:
                        watts = policy.restore_power_limit_w
                        self._act(gpu, _watchdog.RESTORE_POWER_LIMIT,
                                  'set the power limit of GPU %s back to %g W' % (gpu, watts),
                                  lambda gpu=gpu, uuid=uuid, watts=watts: self.actuator.nvml_set(
                                      'power_limit', gpu, uuid, watts))
                self.release(gpu, None, 'release')
            try:
                os.unlink(path)
            except OSError:
                pass

    def tick(self):
        now = self.clock()
        snapshot = self.supervisor.scrape()
        engines = engines_by_gpu(self.config['registry_dir'])
        gpus = {}
        for message in snapshot.get('gpus') or ():
            facts = message.get('facts') or {}
            if facts.get('index') is not None:
                gpus[facts['index']] = message
                action = (message.get('extra') or {}).get('recovery_action')
                self.recovery_actions[facts['index']] = action
        self._release_requests(gpus)
        self._xids(now, snapshot, gpus, engines)
        for index in sorted(gpus):
            self._heat(now, index, gpus[index], engines.get(index, []))
        self._save()
        self._gauges(snapshot, gpus)
        return snapshot

    def _xids(self, now, snapshot, gpus, engines):
        for index, entry in sorted((snapshot.get('xids') or {}).items(), key=lambda item: str(item[0])):
            if index is None:
                continue
            seen = self.xid_seen.setdefault(index, {})
            for xid, count in sorted(entry.get('counts', {}).items()):
                new = count - seen.get(xid, 0)
                seen[xid] = count
                for _event in range(max(0, new)):
                    self.handle_xid(now, int(index), int(xid), engines.get(int(index), []), "NVML's events")
        fallback = [index for index, error in (snapshot.get('events') or {}).items()
                    if index is not None and error is not None]
        self.metrics.clear('llm_watchdog_kernel_log_fallback')
        for index in fallback:
            self.metrics.set('llm_watchdog_kernel_log_fallback', {'gpu': index}, 1)
        if not fallback or self.kernel_log is None:
            return
        by_bus = {}
        for index in fallback:
            facts = (gpus.get(index) or {}).get('facts') or {}
            bus = _bus(facts.get('pci_bus_id'))
            if bus:
                by_bus[bus] = index
        for bus, xid in self.kernel_log.read():
            index = by_bus.get(bus)
            if index is not None:
                self.handle_xid(now, index, xid, engines.get(index, []), 'the kernel log')
        if self.kernel_log.error != self._kernel_log_error:  # once per change, not every round
            self.log('kernel log: %s' % (self.kernel_log.error or 'read again'))
            self._kernel_log_error = self.kernel_log.error

    def handle_xid(self, now, gpu, xid, engines, source):
        decision = self.xid_policy.decide(now, gpu, xid, self.recovery_actions.get(gpu))
        self.metrics.count('llm_watchdog_xid_events_total', {'gpu': gpu, 'xid': xid, 'action': decision.action})
        self.log('GPU %s: XID %d (from %s): %s -> %s' % (gpu, xid, source, decision.reason, decision.action))
        if decision.action == _watchdog.IGNORE:
            return decision
        if decision.action == _watchdog.RESTART_ENGINE_IF_UNHEALTHY:
            self.log('GPU %s: the engines\' health checks restart them if they fail' % gpu)
            return decision
        if decision.action == _watchdog.RESTART_ENGINE:
            for unit in engines:
                if self.held.get(unit):
                    continue
                budget = self.restart_budgets.setdefault(unit, _watchdog.RestartBudget(
                    per_hour=self.config['restarts_per_hour'],
                    backoff_initial_s=self.config['restart_backoff_initial_s'],
                    backoff_max_s=self.config['restart_backoff_max_s']))
                if not budget.allowed(now):
                    self.log('engine %s on GPU %s: %s' % (unit, gpu, budget.explain(now)))
                    self.metrics.count('llm_watchdog_actions_total',
                                       {'gpu': gpu, 'action': 'restart_engine', 'result': 'suppressed'})
                    continue
                budget.record(now)
                self._act(gpu, 'restart_engine', 'restart engine %s on GPU %s after XID %d' % (unit, gpu, xid),
                          lambda unit=unit: self.actuator.systemctl('restart', unit))
            return decision
        # A reset or a reboot: the engines stop first, a person is told.
        self.stop_engines(gpu, engines, 'xid', decision.reason, 'stop_engines')
        self.attention[str(gpu)] = {'action': decision.action, 'xid': xid, 'reason': decision.reason,
                                    'since': self.wall_clock()}
        if not self.config['allow_reboot']:
            self.log('GPU %s needs %s; reboots are not allowed here (llm_server_allow_reboot): its engines stay '
                     'stopped until a person resets the GPU or reboots, then runs llm-gpu-watchdog release %s'
                     % (gpu, 'a reboot' if decision.action == _watchdog.REBOOT_HOST else 'a GPU reset', gpu))
            self.metrics.count('llm_watchdog_actions_total',
                               {'gpu': gpu, 'action': 'reboot_host', 'result': 'suppressed'})
            return decision
        self._reboot(gpu, decision)
        return decision

    def _reboot(self, gpu, decision):
        wall = self.wall_clock()
        try:
            budget = _watchdog.RebootBudget(self.config['reboots_per_day'], state=read_json(self._reboots_path, {}))
        except ValueError as err:
            self.log('no reboot: the reboot record %s is unreadable (%s)' % (self._reboots_path, err))
            self.metrics.count('llm_watchdog_actions_total',
                               {'gpu': gpu, 'action': 'reboot_host', 'result': 'suppressed'})
            return
        if not budget.allowed(wall):
            self.log('GPU %s: %s' % (gpu, budget.explain(wall)))
            self.metrics.count('llm_watchdog_actions_total',
                               {'gpu': gpu, 'action': 'reboot_host', 'result': 'suppressed'})
            return
        if not self.dry:
            budget.record(wall, 'GPU %s: %s' % (gpu, decision.reason))
            write_atomic(self._reboots_path, json.dumps(budget.state(), indent=1) + '\n')
            self._save()
        self._act(gpu, 'reboot_host', 'reboot the host for GPU %s (XID %d)' % (gpu, decision.xid),
                  self.actuator.reboot)

    def _heat(self, now, index, message, engines):
        facts = message.get('facts') or {}
        policy = self.heat.get(index)
        config = self._heat_config(index, facts.get('uuid'))
        if policy is None:
            policy = self.heat[index] = _watchdog.HeatPolicy(config, gpu=index)
        # A policy loaded from /run knew only the index: a setting keyed by the
        # GPU's UUID applies from the first reading on.
        policy.config = config
        reading = _watchdog.HeatReading.from_facts(facts)
        for action in policy.step(now, reading):
            self._heat_action(index, facts.get('uuid'), action, engines)
        limits = policy.thresholds()
        for step, value in (('power', limits.warn_c), ('clocks', limits.clocks_c), ('stop', limits.stop_c),
                            ('restore', limits.restore_below_c)):
            self.metrics.set('llm_watchdog_heat_threshold_celsius', {'gpu': index, 'step': step}, value)
        self.metrics.set('llm_watchdog_heat_level', {'gpu': index}, policy.level)

    def _heat_action(self, index, uuid, action, engines):
        self.log(action.message)
        kind = action.kind
        if kind in (_watchdog.LOWER_POWER_LIMIT, _watchdog.RESTORE_POWER_LIMIT):
            if action.value is None or (action.previous is not None and action.value == action.previous):
                return
            self._act(index, kind, 'set the power limit of GPU %s to %g W' % (index, action.value),
                      lambda: self.actuator.nvml_set('power_limit', index, uuid, action.value))
        elif kind == _watchdog.LOCK_CLOCKS:
            if action.value is None:
                # Nothing to lock at (the message says why): counted, so a step that never acts shows.
                self.metrics.count('llm_watchdog_actions_total', {'gpu': index, 'action': kind, 'result': 'skipped'})
                return
            self._act(index, kind, 'lock the graphics clocks of GPU %s at %g MHz' % (index, action.value),
                      lambda: self.actuator.nvml_set('lock_clocks', index, uuid, action.value))
        elif kind == _watchdog.UNLOCK_CLOCKS:
            self._act(index, kind, 'unlock the graphics clocks of GPU %s' % index,
                      lambda: self.actuator.nvml_set('unlock_clocks', index, uuid))
        elif kind == _watchdog.STOP_ENGINES:
            if not engines:
                self.log('GPU %s: no engine registered on it to stop' % index)
            self.stop_engines(index, engines, 'heat', action.message, kind)
        elif kind == _watchdog.START_ENGINES:
            self.release(index, 'heat', kind)

    def _gauges(self, snapshot, gpus):
        metrics = self.metrics
        metrics.set('llm_watchdog_last_run_timestamp_seconds', {}, round(self.wall_clock(), 3))
        metrics.set('llm_watchdog_interval_seconds', {}, self.config['interval_s'])
        metrics.set('llm_watchdog_dry_run', {}, 1 if self.dry else 0)
        metrics.set('llm_watchdog_nvml_success', {}, 1 if snapshot.get('success') else 0)
        metrics.set('llm_watchdog_stuck_calls', {}, self.actuator.reap())
        metrics.clear('llm_watchdog_engine_held')
        for unit, holds in sorted(self.held.items()):
            for hold in holds:
                metrics.set('llm_watchdog_engine_held',
                            {'serving_instance': unit, 'gpu': hold['gpu'], 'reason': hold['reason']}, 1)
        metrics.clear('llm_watchdog_gpu_needs_attention')
        for gpu, entry in sorted(self.attention.items()):
            labels = {'gpu': gpu, 'action': entry['action'], 'xid': entry['xid']}
            metrics.set('llm_watchdog_gpu_needs_attention', labels, 1)

    def write_metrics(self):
        directory = self.config['metrics_dir']
        if directory:
            write_atomic(os.path.join(directory, METRICS_FILE), self.metrics.render())

    def forget_metrics(self):
        """At start: the file a previous run left says nothing of this one (whoever waits for a first round)."""
        directory = self.config['metrics_dir']
        if directory:
            try:
                os.unlink(os.path.join(directory, METRICS_FILE))
            except FileNotFoundError:
                pass


def request_release(config, gpu, wait_s=None, poll_s=0.2):
    """`llm-gpu-watchdog release [GPU]`: ask the running daemon to let go of a GPU (or all); wait until it did.

    A file under run_dir/release/ that the daemon picks up at its next round
    (it alone writes its state). Returns True once the daemon removed it.
    """
    directory = os.path.join(config['run_dir'], 'release')
    path = os.path.join(directory, 'all' if gpu is None else str(int(gpu)))
    write_atomic(path, '%s\n' % time.time())
    deadline = time.monotonic() + (3 * config['interval_s'] + config['nvml_timeout_s'] + 10
                                   if wait_s is None else wait_s)
    while time.monotonic() < deadline:
        if not os.path.exists(path):
            return True
        time.sleep(poll_s)
    return False


# --- the setter process ---------------------------------------------------------

SET_KINDS = ('power_limit', 'lock_clocks', 'unlock_clocks')


def nvml_set(pynvml, kind, gpu, uuid=None, value=None):
    """One NVML setting, in a process of its own (the program with --set). Returns a message; raises on failure."""
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(gpu))
        if uuid:
            actual = pynvml.nvmlDeviceGetUUID(handle)
            actual = actual.decode() if isinstance(actual, bytes) else actual
            if actual != uuid:
                raise RuntimeError('GPU %s is %s now, not %s: nothing set' % (gpu, actual, uuid))
        if kind == 'power_limit':
            milliwatts = int(round(float(value) * 1000))
            pynvml.nvmlDeviceSetPowerManagementLimit(handle, milliwatts)
            return 'GPU %s power limit %d mW' % (gpu, milliwatts)
        if kind == 'lock_clocks':
            # One value for both ends, as nvidia-smi --lock-gpu-clocks=N does.
            mhz = int(value)
            pynvml.nvmlDeviceSetGpuLockedClocks(handle, mhz, mhz)
            return 'GPU %s graphics clocks locked at %d MHz' % (gpu, mhz)
        if kind == 'unlock_clocks':
            pynvml.nvmlDeviceResetGpuLockedClocks(handle)
            return 'GPU %s graphics clocks unlocked' % gpu
        raise ValueError('unknown setting %r' % kind)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # pylint: disable=broad-except
            pass


def set_main(pynvml, kind, gpu, uuid, value, out=sys.stdout):
    if pynvml is None:
        out.write('The Python library nvidia-ml-py (module pynvml) is not installed.\n')
        return 2
    try:
        message = nvml_set(pynvml, kind, gpu, uuid, value)
    except Exception as err:  # pylint: disable=broad-except
        out.write('%s\n' % err)
        return 1
    out.write(message + '\n')
    return 0
