# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVML worker: the child process that calls NVML for llm-gpu-exporter and llm-gpu-watchdog.

Everything here runs in the worker (the program with ``--worker``) or in a
probe (``--probe-gpu``), never in the process that starts them:
nvml_supervisor.py does that and gives every call its deadline. The programs
(gpu_exporter.py, gpu_watchdog.py) hand their ``--worker`` arguments to
worker_main.

Same figures as gpu_facts, by construction: every value gpu_facts also
reports is read by _nvml.read_device, the very function behind gpu_facts
(read_gpu). What gpu_facts does not read (utilisation, ECC error counts,
remapped rows, the PCIe replay counter, the driver's recovery action) is
read here (read_extra), and XID events by XidWatcher, a thread that waits on
an NVML event set with a short timeout. A field NVML does not give is named
in the GPU's ``unavailable`` with why (error_name; UNSUPPORTED: not offered).

The messages between worker and supervisor are this side's: JSON lines on
the worker's stdout; the supervisor sends ``{"op": "scrape", "id": N}``
lines on its stdin, and a worker whose stdin closes (the parent is gone)
exits. The worker sends:

- ``reading`` (position): the GPU it is about to touch, so that the
  supervisor knows which one hung;
- ``events`` (the GPU's identity, error): whether it took XID registration;
- ``ready`` (pid, system, gpus) once NVML is initialised, or ``fatal``
  (error) when it would not initialise, and exits;
- for scrape N, one ``gpu`` (read_gpu's record) or ``lost`` (index, error)
  per GPU as each is read, then ``done`` (error), each with id N;
- ``xid`` (the GPU's identity, xid) as each event arrives, ``event_error``
  when the wait fails;
- a probe sends one ``probe`` (position, error) and exits 0 only when it
  read the GPU.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
import traceback

from llm_server_host.collection import _nvml

pynvml = _nvml.pynvml

# How long nvmlEventSetWait blocks before the watcher loops (and can stop).
DEFAULT_EVENT_WAIT_MS = 500
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


# --- reading GPUs, XID events, scrapes --------------------------------------

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
