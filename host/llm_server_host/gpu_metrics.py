# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""NVIDIA GPU metrics for Prometheus through NVML: the logic of llm-gpu-exporter.

Private to this collection. gpu_exporter.py (llm-gpu-exporter) is the thin
program around it (HTTP with prometheus_client, arguments).

Same figures as gpu_facts, by construction: every value gpu_facts also
reports is read by _nvml.read_device, the very function behind gpu_facts,
and only turned into base units here (MHz -> Hz, percent -> ratio). What
gpu_facts does not read (utilisation, ECC error counts, remapped rows, the
PCIe replay counter, the driver's recovery action, XID events) is read here.

A lost GPU can hang an NVML call for good (uninterruptible sleep in the
driver), and a thread stuck in a C call can be neither cancelled nor
replaced: NVML's own locks then hold every other caller in that process. So
NVML is called in a child process only (the worker, ``--worker``), and the
exporter's HTTP process never loads NVML:

- the worker answers a scrape request with one message per GPU as each GPU
  is read, then ``done``; the parent waits for them up to a deadline;
- the worker says which GPU it is about to touch; past the deadline the
  parent answers with what arrived (GPUs not read are ``llm_gpu_up 0``) and
  ``llm_gpu_exporter_scrape_success 0``, SIGKILLs the worker and quarantines
  the GPU it was stuck on: the next worker (started at once, or once the old
  one has exited) leaves that GPU alone for ``quarantine`` seconds, so one
  hung GPU does not blind the exporter to the others; after the quarantine a
  probe, a process of its own that reads that GPU once (``--probe-gpu``),
  tries it while the worker goes on reading the others: only a probe that
  reads it within the start-up limit lets a new worker take it back, and a
  probe that hangs or fails starts another quarantine. So a GPU that is still
  lost never blinds the others again (a new worker that hung at start-up on it
  would leave every GPU unread for the start-up limit);
- a process stuck inside the driver cannot be killed until the driver lets
  go; at most MAX_STUCK_WORKERS such processes are left behind, after that
  no worker is started until one exits, and scrapes answer at once with
  ``scrape_success 0`` and ``llm_gpu_exporter_stuck_workers``;
- XIDs arrive through an NVML event set that a thread of the worker waits on
  with a short timeout; each event is passed to the parent at once and
  counted there, so the counts survive a worker's replacement.

Worker -> parent messages are JSON lines on the worker's stdout; the parent
sends ``{"op": "scrape", "id": N}`` lines on its stdin. A worker whose stdin
closes (the parent is gone) exits.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import threading
import time
import traceback

from llm_server_host.collection import _nvml

pynvml = _nvml.pynvml

PREFIX = 'llm_gpu_'
DEFAULT_LISTEN_ADDRESS = '127.0.0.1'
# The port of nvidia_gpu_exporter (utkuozdemir), the GPU exporter people run
# on a box like this one: dashboards and firewall notes written for a GPU
# exporter find this one there, and the two never run side by side.
DEFAULT_PORT = 9835
# Far below Prometheus' default scrape timeout (10 s): Prometheus gets an
# answer with scrape_success 0 and the GPUs that did answer, rather than
# timing out itself and losing every series; 40 times the target scrape time.
DEFAULT_TIMEOUT_S = 2.0
# How long nvmlEventSetWait blocks before the watcher loops (and can stop).
DEFAULT_EVENT_WAIT_MS = 500
# A worker may take this long to start (import, nvmlInit, event registration)
# before it is taken as stuck in NVML; scrapes meanwhile answer scrape_success 0.
STARTUP_LIMIT_S = 30.0
# A worker that exited on its own (NVML would not initialise) is started again
# at most this often.
RESPAWN_INTERVAL_S = 5.0
# A GPU on which NVML hung is left alone this long, then tried again by a probe.
DEFAULT_QUARANTINE_S = 300.0
# Workers killed after a timeout that may still sit in the driver before no
# new worker is started: each further one would likely hang the same way.
MAX_STUCK_WORKERS = 2

# XIDs whose counter exists at 0 from the start on every GPU that reports
# events, so that increase() sees their first occurrence (a series that
# appears with the value 1 has no increase): the XIDs of
# the GPU watchdog's XID table (docs/runbooks/gpu-watchdog.md) and nvidia_gpu_exporter's
# critical list. Any other XID gets its series when it first happens.
PREINITIALISED_XIDS = (13, 31, 43, 45, 48, 62, 63, 64, 74, 79, 94, 95, 109, 119, 120, 154)

# nvmlDeviceGpuRecoveryAction_t
RECOVERY_ACTIONS = {
    0: 'none', 1: 'gpu_reset', 2: 'node_reboot', 3: 'drain_p2p', 4: 'drain_and_reset',
    5: 'recover_imex_domain', 6: 'bus_reset', 7: 'system_reboot',
}
FI_DEV_GET_GPU_RECOVERY_ACTION = 230
EVENT_TYPE_XID = 0x8
NVML_ERROR_TIMEOUT = 10
# Answers that mean "this GPU, driver or binding does not offer it".
UNSUPPORTED = frozenset(('not_supported', 'function_not_found'))

# Fields that gpu_facts reads too: (field, key of the _nvml record, NVML
# functions behind it). A field whose value is None is left out of the
# metrics and reported as unsupported or as a read error.
FACT_FIELDS = (
    ('temperature', 'temperature_c', ('nvmlDeviceGetTemperatureV', 'nvmlDeviceGetTemperature')),
    ('temperature_slowdown', 'temperature_slowdown_c', ('nvmlDeviceGetTemperatureThreshold',)),
    ('temperature_shutdown', 'temperature_shutdown_c', ('nvmlDeviceGetTemperatureThreshold',)),
    ('power_draw', 'power_draw_w', ('nvmlDeviceGetPowerUsage',)),
    ('power_limit', 'power_limit_w', ('nvmlDeviceGetPowerManagementLimit', 'nvmlDeviceGetEnforcedPowerLimit')),
    ('power_limit_default', 'power_limit_default_w', ('nvmlDeviceGetPowerManagementDefaultLimit',)),
    ('power_limit_constraints', 'power_limit_min_w', ('nvmlDeviceGetPowerManagementLimitConstraints',)),
    ('memory', 'memory_total_bytes', ('nvmlDeviceGetMemoryInfo',)),
    ('pcie_link_generation', 'pcie_link_gen_current', ('nvmlDeviceGetCurrPcieLinkGeneration',)),
    ('pcie_link_generation_max', 'pcie_link_gen_max', ('nvmlDeviceGetMaxPcieLinkGeneration',)),
    ('pcie_link_generation_gpu_max', 'pcie_link_gen_gpu_max', ('nvmlDeviceGetGpuMaxPcieLinkGeneration',)),
    ('pcie_link_width', 'pcie_link_width_current', ('nvmlDeviceGetCurrPcieLinkWidth',)),
    ('pcie_link_width_max', 'pcie_link_width_max', ('nvmlDeviceGetMaxPcieLinkWidth',)),
    ('clock_graphics', 'clocks.graphics_mhz', ('nvmlDeviceGetClockInfo',)),
    ('clock_sm', 'clocks.sm_mhz', ('nvmlDeviceGetClockInfo',)),
    ('clock_memory', 'clocks.memory_mhz', ('nvmlDeviceGetClockInfo',)),
    ('clock_max_graphics', 'clocks.graphics_max_mhz', ('nvmlDeviceGetMaxClockInfo',)),
    ('clock_max_sm', 'clocks.sm_max_mhz', ('nvmlDeviceGetMaxClockInfo',)),
    ('clock_max_memory', 'clocks.memory_max_mhz', ('nvmlDeviceGetMaxClockInfo',)),
    ('throttle_reasons', 'throttle_reasons_mask',
     ('nvmlDeviceGetCurrentClocksEventReasons', 'nvmlDeviceGetCurrentClocksThrottleReasons')),
    ('ecc_mode', 'ecc_enabled', ('nvmlDeviceGetEccMode',)),
    ('persistence_mode', 'persistence_mode', ('nvmlDeviceGetPersistenceMode',)),
)
CLOCKS = ('graphics', 'sm', 'memory')
GPU_LABELS = ('gpu', 'uuid', 'name')


# --- errors ------------------------------------------------------------------

def _error_names():
    names = {}
    if pynvml is not None:
        for attr in dir(pynvml):
            if attr.startswith('NVML_ERROR_'):
                value = getattr(pynvml, attr)
                if isinstance(value, int):
                    names.setdefault(value, attr[len('NVML_ERROR_'):].lower())
    return names


_ERROR_NAMES = _error_names()


def error_name(code):
    """'not_supported' for 3, 'gpu_is_lost' for 15, ... ('error_N' when pynvml has no name)."""
    if isinstance(code, str):
        return code
    return _ERROR_NAMES.get(code, 'error_%s' % (code,))


class _CallRecorder(object):
    """Stands in for the pynvml module inside _nvml while the worker reads a GPU.

    Passes every call through and notes the NVML error of each failed one by
    function name, so that a field _nvml.read_device leaves None can be told
    apart as "not supported" or "failed". Used in the worker process only.
    """

    def __init__(self, module):
        self._module = module
        self.failed = {}

    def __getattr__(self, name):
        value = getattr(self._module, name)
        if not (name.startswith('nvml') and callable(value)):
            return value
        failed = self.failed
        error_class = self._module.NVMLError

        def call(*args):
            try:
                return value(*args)
            except error_class as err:
                failed[name] = error_name(err.value)
                raise
            except Exception:
                failed[name] = 'python_error'
                raise
        return call


def _reason(failed, functions):
    """Why a field is missing: the first error other than "not supported", else not_supported."""
    found = [failed[name] for name in functions if name in failed]
    for error in found:
        if error not in UNSUPPORTED:
            return error
    # NOT_SUPPORTED, FUNCTION_NOT_FOUND, or a binding without the function at all.
    return found[0] if found else 'not_supported'


def _lookup(record, dotted):
    value = record
    for part in dotted.split('.'):
        value = value.get(part) if isinstance(value, dict) else None
    return value


# --- worker: the process that calls NVML ------------------------------------

class _Channel(object):
    """JSON lines to the parent; one lock, as the scrape and the XID watcher both write."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, message):
        line = json.dumps(message, separators=(',', ':'), sort_keys=True) + '\n'
        with self._lock:
            self._stream.write(line)
            self._stream.flush()


def _ask(unavailable, field, function, *args):
    """One NVML call of the exporter's own; a failure notes the field in unavailable."""
    func = getattr(pynvml, function, None)
    if func is None:
        unavailable.setdefault(field, 'function_not_found')
        return None
    try:
        return func(*args)
    except pynvml.NVMLError as err:
        unavailable.setdefault(field, error_name(err.value))
    except Exception:  # ctypes.ArgumentError and the like from an unexpected binding
        unavailable.setdefault(field, 'python_error')
    return None


_VALUE_MEMBERS = {0: 'dVal', 1: 'uiVal', 2: 'ulVal', 3: 'ullVal', 4: 'sllVal', 5: 'siVal', 6: 'usVal'}


def _field_value(handle, field_id, unavailable, field):
    values = _ask(unavailable, field, 'nvmlDeviceGetFieldValues', handle, [field_id])
    if values is None:
        return None
    value = values[0]
    if value.nvmlReturn != 0:
        unavailable.setdefault(field, error_name(value.nvmlReturn))
        return None
    member = _VALUE_MEMBERS.get(value.valueType)
    if member is None:
        unavailable.setdefault(field, 'python_error')
        return None
    return getattr(value.value, member)


def read_extra(handle, unavailable):
    """What gpu_facts does not read: utilisation, ECC counts, remapped rows, replays, recovery action."""
    extra = {}
    util = _ask(unavailable, 'utilization', 'nvmlDeviceGetUtilizationRates', handle)
    if util is not None:
        extra['utilization_gpu_percent'] = util.gpu
        extra['utilization_memory_percent'] = util.memory
    for counter, field in ((getattr(pynvml, 'NVML_VOLATILE_ECC', 0), 'ecc_errors'),
                           (getattr(pynvml, 'NVML_AGGREGATE_ECC', 1), 'ecc_errors_aggregate')):
        for kind, error_type in (('corrected', getattr(pynvml, 'NVML_MEMORY_ERROR_TYPE_CORRECTED', 0)),
                                 ('uncorrected', getattr(pynvml, 'NVML_MEMORY_ERROR_TYPE_UNCORRECTED', 1))):
            value = _ask(unavailable, field, 'nvmlDeviceGetTotalEccErrors', handle, error_type, counter)
            if value is not None:
                extra['%s_%s' % (field, kind)] = value
    rows = _ask(unavailable, 'remapped_rows', 'nvmlDeviceGetRemappedRows', handle)
    if rows is not None:
        extra['remapped_rows_correctable'], extra['remapped_rows_uncorrectable'] = rows[0], rows[1]
        extra['remapped_rows_pending'], extra['remapped_rows_failure'] = int(bool(rows[2])), int(bool(rows[3]))
    replays = _ask(unavailable, 'pcie_replays', 'nvmlDeviceGetPcieReplayCounter', handle)
    if replays is not None:
        extra['pcie_replay_counter'] = replays
    field_id = getattr(pynvml, 'NVML_FI_DEV_GET_GPU_RECOVERY_ACTION', FI_DEV_GET_GPU_RECOVERY_ACTION)
    action = _field_value(handle, field_id, unavailable, 'recovery_action')
    if action is not None:
        extra['recovery_action'] = int(action)
    return extra


def read_gpu(handle, position, recorder=None):
    """One GPU: {'facts': the gpu_facts record, 'extra': {...}, 'unavailable': {field: error}}.

    recorder: the _CallRecorder installed as _nvml.pynvml (install_recorder),
    which tells why a field of the record is None.
    """
    if recorder is not None:
        recorder.failed.clear()
    facts = _nvml.read_device(handle, position)
    failed = dict(recorder.failed) if recorder is not None else {}
    unavailable = {}
    for field, key, functions in FACT_FIELDS:
        if _lookup(facts, key) is None:
            unavailable[field] = _reason(failed, functions)
    extra = read_extra(handle, unavailable)
    return {'facts': facts, 'extra': extra, 'unavailable': unavailable}


def install_recorder():
    """Put a _CallRecorder between _nvml and pynvml (in the worker process only)."""
    recorder = _CallRecorder(pynvml)
    _nvml.pynvml = recorder
    return recorder


def _address(handle):
    return ctypes.cast(handle, ctypes.c_void_p).value


class XidWatcher(threading.Thread):
    """Waits on an NVML event set for XID events and sends each one at once."""

    def __init__(self, channel, gpus, wait_ms=DEFAULT_EVENT_WAIT_MS):
        threading.Thread.__init__(self, name='xid-watcher')
        self.daemon = True
        self._channel = channel
        self._gpus = gpus  # [(identity dict, handle)]
        self._wait_ms = int(wait_ms)
        self._devices = {}
        self._event_set = None

    def register(self):
        """Register every GPU for XID events; one 'events' message per GPU says whether it took."""
        try:
            self._event_set = pynvml.nvmlEventSetCreate()
        except Exception as err:  # NVMLError, or a binding without events
            reason = error_name(err.value) if isinstance(err, pynvml.NVMLError) else 'function_not_found'
            for identity, _handle in self._gpus:
                self._channel.send(dict(identity, type='events', error=reason))
            return
        for identity, handle in self._gpus:
            error = None
            self._channel.send({'type': 'reading', 'position': identity['position']})
            try:
                supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
                if not supported & EVENT_TYPE_XID:
                    error = 'not_supported'
                else:
                    pynvml.nvmlDeviceRegisterEvents(handle, EVENT_TYPE_XID, self._event_set)
            except pynvml.NVMLError as err:
                error = error_name(err.value)
            except Exception:  # a binding without the call
                error = 'function_not_found'
            if error is None:
                self._devices[_address(handle)] = identity
            self._channel.send(dict(identity, type='events', error=error))

    def run(self):
        if not self._devices:
            return
        wait = getattr(pynvml, 'nvmlEventSetWait_v2', None) or pynvml.nvmlEventSetWait
        while True:
            try:
                data = wait(self._event_set, self._wait_ms)
            except pynvml.NVMLError as err:
                if err.value == NVML_ERROR_TIMEOUT:
                    continue
                self._channel.send({'type': 'event_error', 'error': error_name(err.value)})
                time.sleep(1.0)
                continue
            if not data.eventType & EVENT_TYPE_XID:
                continue
            identity = self._devices.get(_address(data.device)) or {'index': None, 'uuid': None, 'name': None}
            self._channel.send(dict(identity, type='xid', xid=int(data.eventData)))


def _identity(facts):
    return {'index': facts['index'], 'uuid': facts['uuid'], 'name': facts['name']}


def _serve_scrape(channel, request_id, recorder, skip):
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as err:
        channel.send({'type': 'done', 'id': request_id, 'error': 'NVML could not count the GPUs: %s' % err})
        return
    for position in range(count):
        if position in skip:
            channel.send({'type': 'lost', 'id': request_id, 'index': position, 'error': 'quarantined'})
            continue
        channel.send({'type': 'reading', 'position': position})
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(position)
        except pynvml.NVMLError as err:
            channel.send({'type': 'lost', 'id': request_id, 'index': position, 'error': error_name(err.value)})
            continue
        try:
            message = read_gpu(handle, position, recorder)
        except Exception:  # a bug here must not take the worker down with it
            traceback.print_exc()
            channel.send({'type': 'lost', 'id': request_id, 'index': position, 'error': 'python_error'})
            continue
        message.update(type='gpu', id=request_id)
        channel.send(message)
    channel.send({'type': 'done', 'id': request_id, 'error': None})


def probe_main(position, stdout=None):
    """A quarantined GPU tried once: initialise NVML and read that GPU as a scrape would, then exit.

    Prints {'type': 'probe', 'position', 'error'} (error None when it was
    read); exits 0 only then. No XID registration: the worker keeps those.
    """
    channel = _Channel(stdout or sys.stdout)
    if pynvml is None:
        channel.send({'type': 'probe', 'position': position, 'error': 'nvidia-ml-py is not installed'})
        return 2
    try:
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(position)
    except pynvml.NVMLError as err:
        channel.send({'type': 'probe', 'position': position, 'error': error_name(err.value)})
        return 1
    read_gpu(handle, position, install_recorder())
    channel.send({'type': 'probe', 'position': position, 'error': None})
    return 0


def worker_main(stdin=None, stdout=None, event_wait_ms=DEFAULT_EVENT_WAIT_MS, skip=(), probe=None):
    """The NVML worker: initialise, register for XIDs, then answer scrape requests until stdin closes.

    skip: positions (NVML indexes) of GPUs not to touch at all (quarantined).
    probe: a position to read once instead (probe_main), for the Supervisor's
    probe of a quarantined GPU.
    """
    if probe is not None:
        return probe_main(probe, stdout)
    skip = frozenset(skip)
    stdin = stdin or sys.stdin
    channel = _Channel(stdout or sys.stdout)
    if pynvml is None:
        channel.send({'type': 'fatal', 'error': 'The Python library nvidia-ml-py (module pynvml) is not installed.'})
        return 2
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        channel.send({'type': 'fatal', 'error': _nvml.init_error_message(err)})
        return 2
    system = {
        'driver_version': _nvml._text(_nvml._query(pynvml.nvmlSystemGetDriverVersion)),
        'nvml_version': _nvml._text(_nvml._query(pynvml.nvmlSystemGetNVMLVersion)),
    }
    gpus = []
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as err:
        channel.send({'type': 'fatal', 'error': 'NVML could not count the GPUs: %s.' % err})
        return 2
    for position in range(count):
        if position in skip:
            continue
        channel.send({'type': 'reading', 'position': position})
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(position)
        except pynvml.NVMLError:
            continue  # reported by every scrape as 'lost'
        identity = {
            'index': _nvml._query(pynvml.nvmlDeviceGetIndex, handle),
            'uuid': _nvml._text(_nvml._query(pynvml.nvmlDeviceGetUUID, handle)),
            'name': _nvml._text(_nvml._query(pynvml.nvmlDeviceGetName, handle)),
        }
        if identity['index'] is None:
            identity['index'] = position
        identity['position'] = position
        gpus.append((identity, handle))
    watcher = XidWatcher(channel, gpus, event_wait_ms)
    watcher.register()
    recorder = install_recorder()
    channel.send({'type': 'ready', 'pid': os.getpid(), 'system': system, 'gpus': [g[0] for g in gpus]})
    watcher.start()
    for line in stdin:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        if request.get('op') == 'scrape':
            _serve_scrape(channel, request.get('id'), recorder, skip)
    return 0


# --- parent: deadlines, workers, counts kept across workers -----------------

class _Worker(object):
    def __init__(self, proc, started):
        self.proc = proc
        self.started = started
        self.skip = frozenset()
        self.position = None  # the GPU the worker is touching now
        self.ready = False
        self.alive = True
        self.fatal = None
        self.scrapes = {}


class Supervisor(object):
    """Runs the NVML worker and answers each scrape within the deadline.

    command: how to start a worker (the exporter program with --worker).
    scrape() returns a snapshot dict for build_families(); it never raises
    and never takes longer than timeout (plus the time to start a process).
    """

    def __init__(self, command, timeout=DEFAULT_TIMEOUT_S, preinitialised_xids=PREINITIALISED_XIDS,
                 env=None, startup_limit=STARTUP_LIMIT_S, respawn_interval=RESPAWN_INTERVAL_S,
                 quarantine=DEFAULT_QUARANTINE_S, max_stuck=MAX_STUCK_WORKERS, log=None):
        self.command = list(command)
        self.timeout = float(timeout)
        self.preinitialised_xids = tuple(preinitialised_xids)
        self.env = env
        self.startup_limit = max(float(startup_limit), self.timeout)
        self.respawn_interval = float(respawn_interval)
        self.quarantine_s = float(quarantine)
        self.max_stuck = int(max_stuck)
        self.log = log or (lambda message: None)
        self._cond = threading.Condition()
        self._scrape_lock = threading.Lock()
        self._worker = None
        self._stuck = []
        self._next_id = 0
        self._spawns = 0
        self._last_spawn = None
        self._closed = False
        # Kept across workers.
        self.system = {}
        self.known_gpus = {}   # index -> identity
        self.events = {}       # index -> None (XID events registered) or the error
        self.xids = {}         # index -> {'uuid', 'name', 'counts': {xid: n}}
        self.quarantine = {}   # position -> monotonic time it ends (then a probe tries it)
        self.timeouts = 0
        self.probe_failures = 0
        self._probes = {}      # position -> the probe's process (None while it starts)
        self._stuck_probes = 0

    # -- worker life -----------------------------------------------------------

    def start(self):
        with self._scrape_lock:
            if self._worker is None:
                self._spawn()

    def close(self):
        with self._cond:
            self._closed = True
            worker, self._worker = self._worker, None
            probes = [proc for proc in self._probes.values() if proc is not None]
        if worker is not None:
            self._kill(worker)
        for proc in probes:
            try:
                proc.kill()
            except OSError:
                pass

    def _quarantined(self):
        """The GPUs the worker leaves alone: until a probe has read them again, not until a time."""
        with self._cond:
            return frozenset(self.quarantine)

    def _start_due_probes(self):
        """A probe for each GPU whose quarantine has run out and that no probe is trying now."""
        now = time.monotonic()
        with self._cond:
            if self._closed:
                return
            due = [p for p, until in self.quarantine.items() if until <= now and p not in self._probes]
            for position in due:
                self._probes[position] = None
        for position in due:
            thread = threading.Thread(target=self._probe, args=(position,), name='gpu-probe-%d' % position)
            thread.daemon = True
            thread.start()

    def _probe(self, position):
        """Read a quarantined GPU in a process of its own, within the start-up limit."""
        error = None
        try:
            proc = subprocess.Popen(self.command + ['--probe-gpu', str(position)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, env=self.env, close_fds=True, universal_newlines=True)
        except OSError as err:
            proc, error = None, 'could not start a probe: %s' % err
        if proc is not None:
            with self._cond:
                self._probes[position] = proc
            try:
                output = proc.communicate(timeout=self.startup_limit)[0]
            except subprocess.TimeoutExpired:
                error = 'NVML did not answer within %.0f s' % self.startup_limit
                proc.kill()
                try:
                    proc.wait(timeout=0.05)
                except subprocess.TimeoutExpired:
                    with self._cond:
                        self._stuck_probes += 1
                    proc.wait()  # as long as the driver holds it; no other probe of this GPU meanwhile
                    with self._cond:
                        self._stuck_probes -= 1
            else:
                answers = []
                for line in output.splitlines():
                    try:
                        answers.append(json.loads(line))
                    except ValueError:
                        pass
                if proc.returncode != 0 or not answers:
                    error = (answers[-1].get('error') if answers else None) or 'the probe exited %s' % proc.returncode
        with self._cond:
            del self._probes[position]
            if error is None:
                self.quarantine.pop(position, None)  # the next scrape hands it to a new worker
            else:
                self.probe_failures += 1
                self.quarantine[position] = time.monotonic() + self.quarantine_s
        if error is None:
            self.log('GPU %d answered NVML again: a new worker reads it' % position)
        else:
            self.log('GPU %d tried again: %s; leaving it alone for %.0f s more' % (position, error, self.quarantine_s))

    def _spawn(self):
        skip = self._quarantined()
        command = self.command + (['--skip-gpus', ','.join(str(p) for p in sorted(skip))] if skip else [])
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                env=self.env, close_fds=True, universal_newlines=True, bufsize=1)
        worker = _Worker(proc, time.monotonic())
        worker.skip = skip
        reader = threading.Thread(target=self._read, args=(worker,), name='worker-reader')
        reader.daemon = True
        reader.start()
        with self._cond:
            self._worker = worker
            self._spawns += 1
            self._last_spawn = worker.started
        return worker

    @staticmethod
    def _kill(worker):
        try:
            worker.proc.kill()
        except OSError:
            pass

    def _abandon(self, worker, why):
        """Kill a worker stuck in NVML and quarantine the GPU it was stuck on.

        Called with _scrape_lock held. A fresh worker starts at once while
        fewer than max_stuck killed ones have not exited, else when one exits.
        """
        with self._cond:
            position = worker.position
            if position is not None:
                self.quarantine[position] = time.monotonic() + self.quarantine_s
            if self._worker is worker:
                self._worker = None
        self.log('%s: killing NVML worker %d%s' % (
            why, worker.proc.pid, '' if position is None else
            ' and leaving GPU %d alone for %.0f s' % (position, self.quarantine_s)))
        self._kill(worker)
        try:
            worker.proc.wait(timeout=0.05)  # a process in a plain sleep dies at once
        except subprocess.TimeoutExpired:
            with self._cond:
                self._stuck.append(worker)
            reaper = threading.Thread(target=self._reap, args=(worker,), name='worker-reaper')
            reaper.daemon = True
            reaper.start()
        else:
            self._close_stdin(worker)
        if len(self._stuck) < self.max_stuck and not self._closed:
            self._spawn()  # ready for the next scrape, leaving the quarantined GPU alone

    @staticmethod
    def _close_stdin(worker):
        try:
            worker.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def _reap(self, worker):
        """Wait for a killed worker stuck in the driver to exit; start a new one if none runs."""
        worker.proc.wait()  # as long as the driver holds it
        self._close_stdin(worker)
        with self._scrape_lock:
            with self._cond:
                self._stuck.remove(worker)
                replace = self._worker is None and not self._closed
            if replace:
                self._spawn()

    def _retire(self, worker):
        """Stop an idle worker (its quarantine list is out of date): close its stdin, then kill it."""
        with self._cond:
            if self._worker is worker:
                self._worker = None
        self._close_stdin(worker)
        self._kill(worker)

    def _read(self, worker):
        for line in worker.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self._handle(worker, message)
                self._cond.notify_all()
        worker.proc.stdout.close()
        with self._cond:
            worker.alive = False
            self._cond.notify_all()
        if worker.fatal:
            self.log('NVML worker %d: %s' % (worker.proc.pid, worker.fatal))
        try:
            worker.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def _handle(self, worker, message):
        kind = message.get('type')
        if kind == 'reading':
            worker.position = message.get('position')
            return
        if kind in ('gpu', 'lost', 'events'):
            worker.position = None
        if kind in ('gpu', 'lost', 'done'):
            scrape = worker.scrapes.get(message.get('id'))
            if scrape is None:
                return
            if kind == 'gpu':
                scrape['gpus'].append(message)
                self.known_gpus[message['facts']['index']] = _identity(message['facts'])
            elif kind == 'lost':
                scrape['lost'].append(message)
            else:
                scrape['done'] = True
                scrape['error'] = message.get('error')
        elif kind == 'xid':
            entry = self.xids.setdefault(message.get('index'), {'counts': {}})
            entry.update(uuid=message.get('uuid'), name=message.get('name'))
            xid = int(message['xid'])
            entry['counts'][xid] = entry['counts'].get(xid, 0) + 1
        elif kind == 'events':
            index = message.get('index')
            self.events[index] = message.get('error')
            if message.get('error') is None:
                entry = self.xids.setdefault(index, {'counts': {}})
                entry.update(uuid=message.get('uuid'), name=message.get('name'))
                for xid in self.preinitialised_xids:
                    entry['counts'].setdefault(xid, 0)
        elif kind == 'ready':
            worker.ready = True
            self.system = message.get('system') or {}
            for identity in message.get('gpus') or ():
                self.known_gpus[identity['index']] = identity
        elif kind == 'fatal':
            worker.fatal = message.get('error')
        elif kind == 'event_error':
            self.log('NVML event wait failed: %s' % message.get('error'))

    # -- scrapes ---------------------------------------------------------------

    def scrape(self):
        """Everything build_families needs, read within self.timeout seconds."""
        start = time.monotonic()
        deadline = start + self.timeout
        snapshot = {'success': False, 'error': None, 'gpus': [], 'lost': []}
        if self._scrape_lock.acquire(timeout=self.timeout):
            try:
                self._scrape_locked(snapshot, deadline)
            finally:
                self._scrape_lock.release()
        else:
            snapshot['error'] = 'another scrape still holds the NVML worker'
        with self._cond:
            snapshot.update(
                system=dict(self.system), known_gpus=dict(self.known_gpus), events=dict(self.events),
                xids={index: {'uuid': entry.get('uuid'), 'name': entry.get('name'),
                              'counts': dict(entry['counts'])} for index, entry in self.xids.items()},
                timeouts=self.timeouts, restarts=max(0, self._spawns - 1), probe_failures=self.probe_failures,
                stuck_workers=len(self._stuck) + self._stuck_probes)
        snapshot['duration'] = time.monotonic() - start
        return snapshot

    def _scrape_locked(self, snapshot, deadline):
        self._start_due_probes()
        with self._cond:
            worker, stuck = self._worker, len(self._stuck)
        if worker is not None and worker.alive and worker.skip - self._quarantined():
            self._retire(worker)  # a probe read a quarantined GPU: a new worker takes it back
            worker = None
        if worker is None or not worker.alive:
            if stuck >= self.max_stuck:
                snapshot['error'] = ('%d NVML workers killed after a timeout have not exited (stuck in the driver)'
                                     % stuck)
                return
            if (worker is not None and self._last_spawn is not None
                    and time.monotonic() - self._last_spawn < self.respawn_interval):
                snapshot['error'] = worker.fatal or 'the NVML worker exited'
                return
            worker = self._spawn()
        with self._cond:
            while not worker.ready and worker.alive and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            ready, alive, fatal = worker.ready, worker.alive, worker.fatal
        if not ready:
            if not alive:
                snapshot['error'] = fatal or 'the NVML worker exited while starting'
            else:
                snapshot['error'] = 'the NVML worker is still starting (nvmlInit or event registration)'
                if time.monotonic() - worker.started > self.startup_limit:
                    self._abandon(worker, 'NVML worker not ready after %.0f s' % self.startup_limit)
            return
        with self._cond:
            self._next_id += 1
            request_id = self._next_id
            scrape = worker.scrapes[request_id] = {'gpus': [], 'lost': [], 'done': False, 'error': None}
        try:
            worker.proc.stdin.write(json.dumps({'op': 'scrape', 'id': request_id}) + '\n')
            worker.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the worker is gone: the reader marks it not alive
        with self._cond:
            while not scrape['done'] and worker.alive and time.monotonic() < deadline:
                self._cond.wait(deadline - time.monotonic())
            worker.scrapes.pop(request_id, None)
            done, alive = scrape['done'], worker.alive
            snapshot['gpus'] = list(scrape['gpus'])
            snapshot['lost'] = list(scrape['lost'])
        if done:
            snapshot['error'] = scrape['error']
            if worker.skip and not snapshot['error']:
                snapshot['error'] = 'NVML hung on GPU %s before: left alone for now' % (
                    ', '.join(str(p) for p in sorted(worker.skip)))
            elif snapshot['lost'] and not snapshot['error']:
                snapshot['error'] = 'NVML could not open %s' % ', '.join(
                    'GPU %s (%s)' % (lost['index'], lost['error']) for lost in snapshot['lost'])
            snapshot['success'] = snapshot['error'] is None
        elif not alive:
            snapshot['error'] = 'the NVML worker exited during the scrape: %s' % (worker.fatal or 'no reason given')
        else:
            with self._cond:
                self.timeouts += 1
            snapshot['error'] = 'NVML did not answer within %.3g s' % self.timeout
            self._abandon(worker, snapshot['error'])


# --- metric families ----------------------------------------------------------

class Family(object):
    """A metric family as plain data: the exporter turns it into prometheus_client's."""

    __slots__ = ('name', 'kind', 'help', 'labels', 'samples')

    def __init__(self, name, kind, help_text, labels=GPU_LABELS):
        self.name = name
        self.kind = kind
        self.help = help_text
        self.labels = tuple(labels)
        self.samples = []

    def add(self, label_values, value):
        self.samples.append((tuple('' if v is None else str(v) for v in label_values), value))

    def __repr__(self):
        return 'Family(%r, %d samples)' % (self.name, len(self.samples))


class _Families(object):
    def __init__(self):
        self._by_name = {}
        self.order = []

    def get(self, name, kind, help_text, extra_labels=()):
        family = self._by_name.get(name)
        if family is None:
            family = Family(name, kind, help_text, GPU_LABELS + tuple(extra_labels))
            self._by_name[name] = family
            self.order.append(family)
        return family


# (metric, help, field of FACT_FIELDS / extra, getter(facts, extra), scale)
_GAUGES = (
    ('temperature_celsius', 'GPU core temperature.',
     lambda f, e: f['temperature_c'], 1),
    ('temperature_slowdown_celsius', 'Temperature at which the GPU slows its clocks down (NVML slowdown threshold).',
     lambda f, e: f['temperature_slowdown_c'], 1),
    ('temperature_shutdown_celsius', 'Temperature at which the GPU shuts down (NVML shutdown threshold).',
     lambda f, e: f['temperature_shutdown_c'], 1),
    ('power_draw_watts', 'Power the board draws.', lambda f, e: f['power_draw_w'], 1),
    ('power_limit_watts', 'Power limit in force (power management limit).', lambda f, e: f['power_limit_w'], 1),
    ('power_limit_default_watts', 'Power limit the board ships with.', lambda f, e: f['power_limit_default_w'], 1),
    ('power_limit_min_watts', 'Lowest power limit that can be set.', lambda f, e: f['power_limit_min_w'], 1),
    ('power_limit_max_watts', 'Highest power limit that can be set.', lambda f, e: f['power_limit_max_w'], 1),
    ('utilization_ratio', 'Fraction of the last sample period in which a kernel ran on the GPU (0-1).',
     lambda f, e: e.get('utilization_gpu_percent'), 0.01),
    ('memory_utilization_ratio', 'Fraction of the last sample period in which device memory was read or written (0-1).',
     lambda f, e: e.get('utilization_memory_percent'), 0.01),
    ('memory_total_bytes', 'Device memory in total.', lambda f, e: f['memory_total_bytes'], 1),
    ('memory_used_bytes', 'Device memory allocated.', lambda f, e: f['memory_used_bytes'], 1),
    ('memory_free_bytes', 'Device memory free.', lambda f, e: f['memory_free_bytes'], 1),
    ('pcie_link_generation', 'PCIe generation the link runs at now (GPUs drop it at idle).',
     lambda f, e: f['pcie_link_gen_current'], 1),
    ('pcie_link_generation_max', 'Highest PCIe generation the GPU and its slot can both run.',
     lambda f, e: f['pcie_link_gen_max'], 1),
    ('pcie_link_generation_gpu_max', 'Highest PCIe generation the GPU supports.',
     lambda f, e: f['pcie_link_gen_gpu_max'], 1),
    ('pcie_link_width', 'PCIe lanes the link runs with now.', lambda f, e: f['pcie_link_width_current'], 1),
    ('pcie_link_width_max', 'Most PCIe lanes the GPU and its slot can both run.',
     lambda f, e: f['pcie_link_width_max'], 1),
    ('ecc_enabled', '1 when ECC is enabled on the device memory.', lambda f, e: f['ecc_enabled'], 1),
    ('persistence_mode', '1 when persistence mode is on.', lambda f, e: f['persistence_mode'], 1),
    ('remapped_rows_pending', '1 when a remapped row waits for a GPU reset to take effect.',
     lambda f, e: e.get('remapped_rows_pending'), 1),
    ('remapped_rows_failure', '1 when a row remapping failed (a hardware-return criterion).',
     lambda f, e: e.get('remapped_rows_failure'), 1),
    ('recovery_action', "The driver's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION): %s." % ', '.join(
        '%d %s' % item for item in sorted(RECOVERY_ACTIONS.items())),
     lambda f, e: e.get('recovery_action'), 1),
)


def _number(value, scale=1):
    if isinstance(value, bool):
        value = int(value)
    if scale == 1:
        return value
    return round(value * scale, 6)


def _gpu_families(families, message):
    facts, extra = message['facts'], message['extra']
    labels = (facts['index'], facts['uuid'], facts['name'])
    for suffix, help_text, getter, scale in _GAUGES:
        value = getter(facts, extra)
        if value is not None:
            families.get(PREFIX + suffix, 'gauge', help_text).add(labels, _number(value, scale))
    clocks = facts.get('clocks') or {}
    for clock in CLOCKS:
        for key, name, help_text in (
                ('%s_mhz' % clock, 'clock_hertz', 'Clock frequency now.'),
                ('%s_max_mhz' % clock, 'clock_max_hertz', 'Highest clock frequency the GPU runs this clock at.')):
            if clocks.get(key) is not None:
                families.get(PREFIX + name, 'gauge', help_text, ('clock',)).add(
                    labels + (clock,), clocks[key] * 1000000)
    mask = facts.get('throttle_reasons_mask')
    if mask is not None:
        family = families.get(PREFIX + 'throttle_reason', 'gauge',
                              '1 while this reason holds the clocks down (NVML clocks event reasons).', ('reason',))
        known = 0
        for bit, reason in _nvml.THROTTLE_REASONS:
            family.add(labels + (reason,), 1 if mask & bit else 0)
            known |= bit
        for reason in _nvml.throttle_reason_names(mask & ~known) or ():
            family.add(labels + (reason,), 1)
    for name, prefix, help_text in (
            ('ecc_errors_total', 'ecc_errors', 'ECC errors since the driver loaded (volatile count).'),
            ('ecc_errors_aggregate_total', 'ecc_errors_aggregate', 'ECC errors over the life of the board (aggregate count).')):
        for kind in ('corrected', 'uncorrected'):
            value = extra.get('%s_%s' % (prefix, kind))
            if value is not None:
                families.get(PREFIX + name, 'counter', help_text, ('error_type',)).add(labels + (kind,), value)
    for kind in ('correctable', 'uncorrectable'):
        value = extra.get('remapped_rows_%s' % kind)
        if value is not None:
            families.get(PREFIX + 'remapped_rows', 'gauge',
                         'Memory rows remapped, by the kind of error that caused it.', ('cause',)).add(
                labels + (kind,), value)
    if extra.get('pcie_replay_counter') is not None:
        families.get(PREFIX + 'pcie_replays_total', 'counter',
                     'PCIe replays (link-level retransmissions) since the driver loaded.').add(
            labels, extra['pcie_replay_counter'])


def build_families(snapshot):
    """The metric families of one scrape, from Supervisor.scrape()'s snapshot (pure)."""
    families = _Families()
    up = families.get(PREFIX + 'up', 'gauge', '1 when this scrape read the GPU through NVML, 0 when it did not answer.')
    info = families.get(PREFIX + 'info', 'gauge', 'The GPU and its driver; always 1.',
                        ('pci_bus_id', 'architecture', 'driver_version'))
    unsupported = families.get(
        'llm_gpu_exporter_unsupported', 'gauge',
        '1 for each field the GPU, driver or binding does not offer (NVML answered not supported): its series is left out.',
        ('field',))
    read_errors = families.get(
        'llm_gpu_exporter_read_errors', 'gauge',
        '1 for each field NVML failed to read in this scrape, by NVML error: its series is left out.',
        ('field', 'error'))
    system = snapshot.get('system') or {}
    read = set()
    for message in sorted(snapshot.get('gpus') or (), key=lambda m: m['facts']['index']):
        facts = message['facts']
        labels = (facts['index'], facts['uuid'], facts['name'])
        read.add(facts['index'])
        up.add(labels, 1)
        info.add(labels + (facts.get('pci_bus_id'), facts.get('architecture'), system.get('driver_version')), 1)
        _gpu_families(families, message)
        for field, error in sorted(message.get('unavailable', {}).items()):
            if error in UNSUPPORTED:
                unsupported.add(labels + (field,), 1)
            else:
                read_errors.add(labels + (field, error), 1)
    events = snapshot.get('events') or {}
    for index, error in sorted(events.items(), key=lambda item: (item[0] is None, item[0])):
        identity = (snapshot.get('known_gpus') or {}).get(index) or {}
        labels = (index, identity.get('uuid'), identity.get('name'))
        if error in UNSUPPORTED:
            unsupported.add(labels + ('xid_events',), 1)
        elif error is not None:
            read_errors.add(labels + ('xid_events', error), 1)
    known = dict(snapshot.get('known_gpus') or {})
    for lost in snapshot.get('lost') or ():
        identity = known.setdefault(lost['index'], {'index': lost['index'], 'uuid': None, 'name': None})
        read_errors.add((lost['index'], identity.get('uuid'), identity.get('name'), 'device', lost['error']), 1)
    for index in sorted(i for i in known if i not in read):
        identity = known[index]
        up.add((index, identity.get('uuid'), identity.get('name')), 0)
    xid = families.get(PREFIX + 'xid_errors_total', 'counter',
                       'XID errors the driver reported for the GPU (NVML XID events), by XID.', ('xid',))
    for index, entry in sorted((snapshot.get('xids') or {}).items(), key=lambda item: (item[0] is None, item[0])):
        for number, count in sorted(entry['counts'].items()):
            xid.add((index if index is not None else 'unknown', entry.get('uuid'), entry.get('name'), number), count)
    exporter = (
        ('llm_gpu_exporter_scrape_success', 'gauge',
         '1 when every GPU was read within the deadline, 0 when NVML failed or did not answer in time.',
         1 if snapshot.get('success') else 0),
        ('llm_gpu_exporter_scrape_duration_seconds', 'gauge', 'Time this scrape took to read NVML.',
         round(snapshot.get('duration') or 0.0, 6)),
        ('llm_gpu_exporter_scrape_timeouts_total', 'counter',
         'Scrapes in which NVML did not answer within the deadline (the worker was killed and replaced).',
         snapshot.get('timeouts', 0)),
        ('llm_gpu_exporter_worker_restarts_total', 'counter', 'NVML worker processes started after the first.',
         snapshot.get('restarts', 0)),
        ('llm_gpu_exporter_probe_failures_total', 'counter',
         'Tries of a GPU left alone after a hang (a probe process of their own) that hung or failed again.',
         snapshot.get('probe_failures', 0)),
        ('llm_gpu_exporter_stuck_workers', 'gauge',
         'NVML workers and probes killed after a timeout that have not exited yet (stuck in the driver).',
         snapshot.get('stuck_workers', 0)),
    )
    result = [family for family in families.order if family.samples]
    for name, kind, help_text, value in exporter:
        family = Family(name, kind, help_text, ())
        family.add((), value)
        result.append(family)
    return result
