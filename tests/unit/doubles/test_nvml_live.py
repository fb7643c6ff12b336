# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVML test double while a process runs: live fixtures, setters, the shared state file.

See tests/doubles/nvml/README.md. A test drives a running process (pynvml
loaded from the double) over a pipe: ``Driver`` sends one Python expression
per line and reads one JSON answer per line, and the test rewrites the
fixture (write a temporary file, rename it over) between two calls. The
double checks the fixture and the state file at the start of every call, so
the call after a rename answers from the new file: no waiting needed, except
for XID events, which a thread of the driven process reports as they come.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import queue
import shutil
import stat
import subprocess
import sys
import tempfile
import threading

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
PARTIAL = os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'fixtures', 'dual_gpu_partial_support.json')

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999
APPLICATIONS_CLOCKS_SETTING = 0x2
SW_POWER_CAP = 0x4
NOBODY = 65534  # uid and gid of nobody

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason='NVML setters succeed for root only')

# The driven process: evaluates each stdin line with pynvml as `n` and the
# handles as `h`; answers {"value": ...} or {"error": NVML error code}, with
# the call's duration. watch(i) starts a thread that waits for XIDs of GPU i
# (beside the queries, as the GPU exporter does) and reports each as {"xid": ...}.
DRIVER = r'''
import ctypes, json, sys, threading, time
import pynvml as n

n.nvmlInit()
h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
_out = threading.Lock()


def emit(obj):
    with _out:
        sys.stdout.write(json.dumps(obj) + '\n')
        sys.stdout.flush()


def watch(index):
    events = n.nvmlEventSetCreate()
    n.nvmlDeviceRegisterEvents(h[index], n.nvmlEventTypeXidCriticalError, events)

    def loop():
        while True:
            try:
                data = n.nvmlEventSetWait_v2(events, 20)
            except n.NVMLError as err:
                if err.value != n.NVML_ERROR_TIMEOUT:
                    emit({'event_error': err.value})
                continue
            emit({'xid': data.eventData, 'gpu': n.nvmlDeviceGetIndex(data.device)})
    threading.Thread(target=loop, daemon=True).start()
    return 'watching'


def power_v2(index, milliwatts, scope=0, version=n.nvmlPowerValue_v2):
    # pynvml's own nvmlDeviceSetPowerManagementLimit_v2 drops the return code
    value = n.c_nvmlPowerValue_v2_t()
    value.version, value.powerScope, value.powerValueMw = version, scope, milliwatts
    return n._nvmlGetFunctionPointer('nvmlDeviceSetPowerManagementLimit_v2')(h[index], ctypes.byref(value))


def facts(index):
    from ansible_collections.homelab.llm_server.plugins.module_utils import _nvml
    return _nvml.read_device(h[index], index)


emit({'value': 'ready', 'seconds': 0})  # nvmlInit has read the fixture
for line in sys.stdin:
    start = time.monotonic()
    try:
        reply = {'value': eval(line)}
    except n.NVMLError as err:
        reply = {'error': err.value}
    reply['seconds'] = time.monotonic() - start
    emit(reply)
'''


class Driver(object):
    """A running process with pynvml on the double, driven one call at a time."""

    def __init__(self, env, python=sys.executable, **popen):
        self.proc = subprocess.Popen([python, '-c', DRIVER], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1, **popen)
        self.replies = queue.Queue()
        self.events = queue.Queue()
        self.stderr = None
        threading.Thread(target=self._read, daemon=True).start()
        # a test may rewrite the fixture as soon as this returns: not before nvmlInit read it
        self._reply()

    def _reply(self, timeout=10):
        reply = self.replies.get(timeout=timeout)
        if reply is None:
            raise AssertionError('the driven process exited:\n%s' % self.close())
        return reply

    def _read(self):
        for line in self.proc.stdout:
            message = json.loads(line)
            (self.replies if 'seconds' in message else self.events).put(message)
        self.replies.put(None)

    def call(self, expr, timeout=10):
        """{'value': ...} or {'error': code}, plus 'seconds'."""
        self.proc.stdin.write(expr + '\n')
        self.proc.stdin.flush()
        return self._reply(timeout)

    def value(self, expr):
        reply = self.call(expr)
        assert 'error' not in reply, '%s failed with NVML error %s' % (expr, reply['error'])
        return reply['value']

    def error(self, expr):
        return self.call(expr).get('error')

    def event(self, timeout=5):
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError('no XID event within %s s' % timeout) from None

    def close(self):
        if self.stderr is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.stderr = self.proc.stderr.read()
            self.proc.stderr.close()
        return self.stderr


def write_json(path, data):
    """Atomic rewrite, as the double expects of a live fixture: temporary file, then rename."""
    tmp = '%s.tmp' % path
    with open(tmp, 'w') as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def base_fixture(state_file, live=True):
    with open(PARTIAL) as handle:
        data = json.load(handle)
    data['live'] = live
    data['state_file'] = str(state_file)
    data['devices'][0]['clocks_event_reasons'] = '0x1'  # idle: the setters' bits stand out
    return data


def diagnostics(stderr):
    return [line for line in stderr.splitlines() if line.startswith('fake_nvml:')]


@pytest.fixture
def drive(nvml_env, tmp_path):
    """drive(data=None) -> (Driver, a copy of data, fixture path); data defaults to a live fixture.

    A second call starts another process on the same fixture file.
    """
    drivers = []
    path = str(tmp_path / 'fixture.json')

    def start(data=None):
        if data is None:
            data = base_fixture(tmp_path / 'run' / 'fake-nvml' / 'state.json')
        if not os.path.exists(path):
            write_json(path, data)
        driver = Driver(nvml_env(fixture=path))
        drivers.append(driver)
        return driver, copy.deepcopy(data), path
    yield start
    for driver in drivers:
        driver.close()


# --- live fixture -------------------------------------------------------------

def test_a_running_process_sees_a_rewritten_fixture(drive):
    driver, data, path = drive()
    assert driver.value('n.nvmlDeviceGetTemperature(h[0], 0)') == 71
    data['devices'][0]['temperature']['gpu'] = 88
    data['devices'][1]['temperature']['slowdown'] = 80
    data['driver_version'] = '580.99.01'
    write_json(path, data)
    assert driver.value('n.nvmlDeviceGetTemperature(h[0], 0)') == 88
    assert driver.value('n.nvmlDeviceGetTemperatureThreshold(h[1], 1)') == 80
    assert driver.value('n.nvmlSystemGetDriverVersion()') == '580.99.01'
    # the handles taken at start-up stay valid, the device list stays as it was
    assert driver.value('[n.nvmlDeviceGetIndex(x) for x in h]') == [0, 1]
    assert diagnostics(driver.close()) == []


def test_without_live_a_rewrite_is_not_seen(drive, tmp_path):
    driver, data, path = drive(base_fixture(tmp_path / 'state.json', live=False))
    data['devices'][0]['temperature']['gpu'] = 88
    write_json(path, data)
    assert driver.value('n.nvmlDeviceGetTemperature(h[0], 0)') == 71


def test_an_error_added_live_fails_the_next_call_and_goes_again(drive):
    driver, data, path = drive()
    assert driver.value('n.nvmlDeviceGetPowerUsage(h[1])') == 21567
    data['devices'][1]['errors'] = {'nvmlDeviceGetPowerUsage': 'GPU_IS_LOST'}
    data['errors'] = {'nvmlSystemGetDriverVersion': 'UNKNOWN'}
    write_json(path, data)
    assert driver.error('n.nvmlDeviceGetPowerUsage(h[1])') == NVML_ERROR_GPU_IS_LOST
    assert driver.value('n.nvmlDeviceGetPowerUsage(h[0])') == 587250
    assert driver.error('n.nvmlSystemGetDriverVersion()') == NVML_ERROR_UNKNOWN
    del data['devices'][1]['errors'], data['errors']
    write_json(path, data)
    assert driver.value('n.nvmlDeviceGetPowerUsage(h[1])') == 21567
    assert driver.value('n.nvmlSystemGetDriverVersion()') == '580.95.05'


def test_a_hang_added_live_delays_the_call(drive):
    driver, data, path = drive()
    assert driver.call('n.nvmlDeviceGetPowerUsage(h[1])')['seconds'] < 0.1
    data['devices'][1]['hang_ms'] = {'nvmlDeviceGetPowerUsage': 300}
    write_json(path, data)
    slow = driver.call('n.nvmlDeviceGetPowerUsage(h[1])')
    assert slow['value'] == 21567
    assert 0.3 <= slow['seconds'] < 2
    assert driver.call('n.nvmlDeviceGetTemperature(h[1], 0)')['seconds'] < 0.1
    # the top-level map hangs every device that does not name the call itself
    data['devices'][1]['hang_ms'] = {}
    data['hang_ms'] = {'nvmlDeviceGetTemperature': 200}
    write_json(path, data)
    assert 0.2 <= driver.call('n.nvmlDeviceGetTemperature(h[0], 0)')['seconds'] < 2
    assert driver.call('n.nvmlDeviceGetPowerUsage(h[1])')['seconds'] < 0.1


def test_an_invalid_rewrite_keeps_the_previous_answers(drive):
    driver, data, path = drive()
    with open(path + '.tmp', 'w') as handle:
        handle.write('{"devices": [')
    os.replace(path + '.tmp', path)
    for _attempt in range(3):
        assert driver.value('n.nvmlDeviceGetTemperature(h[0], 0)') == 71
    # a different number of devices is refused too: handles must stay valid
    one_gpu = copy.deepcopy(data)
    del one_gpu['devices'][1]
    one_gpu['devices'][0]['temperature']['gpu'] = 50
    write_json(path, one_gpu)
    assert driver.value('n.nvmlDeviceGetTemperature(h[0], 0)') == 71
    data['devices'][0]['temperature']['gpu'] = 60
    write_json(path, data)
    assert driver.value('n.nvmlDeviceGetTemperature(h[0], 0)') == 60
    lines = diagnostics(driver.close())
    assert len(lines) == 2, lines  # one per bad version, however many calls
    assert 'invalid JSON' in lines[0] and 'keeping the previous fixture' in lines[0]
    assert '1 devices instead of 2' in lines[1]


def test_xid_events_after_a_reload_are_delivered_once(drive, tmp_path):
    xids = tmp_path / 'gpu0.xid'
    xids.write_text('48\n')  # before the registration: never delivered
    data = base_fixture(tmp_path / 'state.json')
    data['devices'][0]['xid_events'] = [31]
    data['devices'][0]['xid_events_file'] = str(xids)
    driver, data, path = drive(data)
    assert driver.value('watch(0)') == 'watching'
    assert driver.event() == {'xid': 31, 'gpu': 0}
    data['devices'][0]['temperature']['gpu'] = 90
    data['devices'][0]['xid_events'] = [31, 13]  # entries delivered before the reload stay delivered
    write_json(path, data)
    assert driver.value('n.nvmlDeviceGetTemperature(h[0], 0)') == 90
    assert driver.event() == {'xid': 13, 'gpu': 0}
    with open(str(xids), 'a') as handle:
        handle.write('79\n')
    assert driver.event() == {'xid': 79, 'gpu': 0}
    write_json(path, data)  # another reload: the file offset survives it
    assert driver.value('n.nvmlDeviceGetTemperature(h[0], 0)') == 90
    with open(str(xids), 'a') as handle:
        handle.write('94\n')
    assert driver.event() == {'xid': 94, 'gpu': 0}, '79 or 13 delivered twice'
    assert diagnostics(driver.close()) == []


# --- setters --------------------------------------------------------------------

@needs_root
def test_power_limit_setter(drive, tmp_path):
    driver, data, path = drive()
    state_file = data['state_file']
    assert driver.value('n.nvmlDeviceSetPowerManagementLimit(h[0], 450000)') is None
    assert driver.value('n.nvmlDeviceGetPowerManagementLimit(h[0])') == 450000
    assert driver.value('n.nvmlDeviceGetEnforcedPowerLimit(h[0])') == 450000
    assert driver.value('n.nvmlDeviceGetCurrentClocksEventReasons(h[0])') == 0x1 | SW_POWER_CAP
    assert driver.value('n.nvmlDeviceGetPowerManagementDefaultLimit(h[0])') == 600000
    with open(state_file) as handle:
        assert json.load(handle) == {'0': {'power_limit_mw': 450000}}
    assert stat.S_IMODE(os.stat(state_file).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(os.path.dirname(state_file)).st_mode) == 0o755
    assert os.listdir(os.path.dirname(state_file)) == ['state.json']  # no temporary file left
    # the range of nvmlDeviceGetPowerManagementLimitConstraints, bounds included
    assert driver.error('n.nvmlDeviceSetPowerManagementLimit(h[0], 149999)') == NVML_ERROR_INVALID_ARGUMENT
    assert driver.error('n.nvmlDeviceSetPowerManagementLimit(h[0], 600001)') == NVML_ERROR_INVALID_ARGUMENT
    assert driver.value('n.nvmlDeviceSetPowerManagementLimit(h[0], 150000)') is None
    # GPU 1 has no constraints in the fixture
    assert driver.error('n.nvmlDeviceSetPowerManagementLimit(h[1], 450000)') == NVML_ERROR_NOT_SUPPORTED
    # back to the default: no power cap reason, the key stays
    assert driver.value('n.nvmlDeviceSetPowerManagementLimit(h[0], 600000)') is None
    assert driver.value('n.nvmlDeviceGetCurrentClocksEventReasons(h[0])') == 0x1
    with open(state_file) as handle:
        assert json.load(handle) == {'0': {'power_limit_mw': 600000}}


@needs_root
def test_power_limit_setter_v2(drive):
    driver, _data, _path = drive()
    assert driver.value('power_v2(0, 300000)') == 0
    assert driver.value('n.nvmlDeviceGetPowerManagementLimit(h[0])') == 300000
    assert driver.value('power_v2(0, 700000)') == NVML_ERROR_INVALID_ARGUMENT
    assert driver.value('power_v2(1, 300000)') == NVML_ERROR_NOT_SUPPORTED
    assert driver.value('power_v2(0, 300000, scope=2)') == NVML_ERROR_NOT_SUPPORTED  # memory
    assert driver.value('power_v2(0, 300000, scope=9)') == NVML_ERROR_INVALID_ARGUMENT
    assert driver.value('power_v2(0, 300000, version=1)') == NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    # pynvml's wrapper, which ignores what the library answers
    assert driver.value('n.nvmlDeviceSetPowerManagementLimit_v2(h[0], 0, 250000)') == 0
    assert driver.value('n.nvmlDeviceGetPowerManagementLimit(h[0])') == 250000


@needs_root
def test_locked_clocks_setter(drive, tmp_path):
    data = base_fixture(tmp_path / 'state.json')
    del data['devices'][1]['clocks']['max_graphics']
    driver, data, path = drive(data)
    assert driver.value('n.nvmlDeviceSetGpuLockedClocks(h[0], 210, 1500)') is None
    assert driver.value('n.nvmlDeviceGetClockInfo(h[0], n.NVML_CLOCK_GRAPHICS)') == 1500
    assert driver.value('n.nvmlDeviceGetClockInfo(h[0], n.NVML_CLOCK_SM)') == 1500
    assert driver.value('n.nvmlDeviceGetClockInfo(h[0], n.NVML_CLOCK_MEM)') == 14001
    assert driver.value('n.nvmlDeviceGetClock(h[0], n.NVML_CLOCK_GRAPHICS, n.NVML_CLOCK_ID_CURRENT)') == 1500
    assert driver.value('n.nvmlDeviceGetMaxClockInfo(h[0], n.NVML_CLOCK_GRAPHICS)') == 3090
    assert driver.value('n.nvmlDeviceGetCurrentClocksThrottleReasons(h[0])') == 0x1 | APPLICATIONS_CLOCKS_SETTING
    with open(data['state_file']) as handle:
        assert json.load(handle) == {'0': {'locked_clocks_mhz': [210, 1500]}}
    assert driver.error('n.nvmlDeviceSetGpuLockedClocks(h[0], 1500, 210)') == NVML_ERROR_INVALID_ARGUMENT
    assert driver.error('n.nvmlDeviceSetGpuLockedClocks(h[1], 210, 1500)') == NVML_ERROR_NOT_SUPPORTED
    assert driver.error('n.nvmlDeviceResetGpuLockedClocks(h[1])') == NVML_ERROR_NOT_SUPPORTED
    assert driver.value('n.nvmlDeviceSetPowerManagementLimit(h[0], 500000)') is None
    assert driver.value('n.nvmlDeviceResetGpuLockedClocks(h[0])') is None
    assert driver.value('n.nvmlDeviceGetClockInfo(h[0], n.NVML_CLOCK_GRAPHICS)') == 2617
    assert driver.value('n.nvmlDeviceGetCurrentClocksEventReasons(h[0])') == 0x1 | SW_POWER_CAP
    with open(data['state_file']) as handle:
        assert json.load(handle) == {'0': {'power_limit_mw': 500000}}


def test_errors_and_hangs_apply_to_the_setters(drive):
    driver, data, path = drive()
    data['devices'][0]['errors'] = {'nvmlDeviceSetPowerManagementLimit': 'GPU_IS_LOST'}
    data['errors'] = {'nvmlDeviceSetGpuLockedClocks': 'UNKNOWN'}
    data['devices'][0]['hang_ms'] = {'nvmlDeviceResetGpuLockedClocks': 200}
    data['devices'][0]['clocks_event_reasons'] = '0x1'
    write_json(path, data)
    assert driver.error('n.nvmlDeviceSetPowerManagementLimit(h[0], 450000)') == NVML_ERROR_GPU_IS_LOST
    assert driver.value('power_v2(0, 450000)') == NVML_ERROR_GPU_IS_LOST  # _v2 matches its base name
    assert driver.error('n.nvmlDeviceSetGpuLockedClocks(h[1], 210, 1500)') == NVML_ERROR_UNKNOWN
    reset = driver.call('n.nvmlDeviceResetGpuLockedClocks(h[0])')
    assert 0.2 <= reset['seconds'] < 2


@pytest.fixture
def unprivileged(fake_nvml_libdir):
    """dict(libdir, workdir, python, pythonpath, popen) for a process that is not root.

    Run as root, the process gets uid and gid nobody through Popen's user and
    group (not a preexec_fn: the test process has threads). Everything it
    loads sits in a directory it can read; the interpreter is this one if
    that user may run it (a virtual environment may point into root's home),
    else the system's, with a copy of this pynvml.
    """
    workdir = tempfile.mkdtemp(prefix='fake_nvml_live_')
    try:
        os.chmod(workdir, 0o755)
        libdir = os.path.join(workdir, 'lib')
        shutil.copytree(fake_nvml_libdir, libdir)
        os.chmod(libdir, 0o755)  # copied with the mode of pytest's private directory
        pydir = os.path.join(workdir, 'py')
        os.mkdir(pydir)
        shutil.copy(importlib.util.find_spec('pynvml').origin, pydir)
        found = dict(libdir=libdir, workdir=workdir, python=sys.executable, pythonpath=pydir, popen={'cwd': workdir})
        if os.geteuid() == 0:
            found['popen'].update(user=NOBODY, group=NOBODY, extra_groups=[])
            for python in (sys.executable, shutil.which('python3', path=os.defpath)):
                try:
                    probe = subprocess.run([python, '-c', 'import pynvml'], env={'PYTHONPATH': pydir},
                                           capture_output=True, check=False, timeout=30, **found['popen'])
                except (OSError, TypeError):  # not allowed to run it; Python < 3.9 has no user=
                    continue
                if probe.returncode == 0:
                    found['python'] = python
                    break
            else:
                pytest.skip('uid %d can run no Python interpreter here' % NOBODY)
        yield found
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_setters_refuse_callers_that_are_not_root(nvml_env, unprivileged):
    workdir = unprivileged['workdir']
    state_file = os.path.join(workdir, 'state', 'state.json')
    fixture = os.path.join(workdir, 'fixture.json')
    write_json(fixture, base_fixture(state_file, live=False))
    os.chmod(fixture, 0o644)
    env = dict(nvml_env(fixture=fixture), LD_LIBRARY_PATH=unprivileged['libdir'])
    if os.geteuid() == 0:
        # what root sets, a user's process reads (the state file is 0644)
        root = Driver(env)
        try:
            assert root.value('n.nvmlDeviceSetPowerManagementLimit(h[0], 450000)') is None
        finally:
            root.close()
    driver = Driver(dict(env, PYTHONPATH=unprivileged['pythonpath']), python=unprivileged['python'],
                    **unprivileged['popen'])
    try:
        assert driver.value('__import__("os").geteuid()') != 0
        assert driver.error('n.nvmlDeviceSetPowerManagementLimit(h[0], 400000)') == NVML_ERROR_NO_PERMISSION
        assert driver.value('power_v2(0, 400000)') == NVML_ERROR_NO_PERMISSION
        assert driver.error('n.nvmlDeviceSetGpuLockedClocks(h[0], 210, 1500)') == NVML_ERROR_NO_PERMISSION
        assert driver.error('n.nvmlDeviceResetGpuLockedClocks(h[0])') == NVML_ERROR_NO_PERMISSION
        # what the device cannot do and bad arguments are answered before the permission check
        assert driver.error('n.nvmlDeviceSetPowerManagementLimit(h[1], 400000)') == NVML_ERROR_NOT_SUPPORTED
        assert driver.error('n.nvmlDeviceSetPowerManagementLimit(h[0], 1)') == NVML_ERROR_INVALID_ARGUMENT
        assert driver.error('n.nvmlDeviceSetGpuLockedClocks(h[0], 2, 1)') == NVML_ERROR_INVALID_ARGUMENT
        expected = 450000 if os.geteuid() == 0 else 600000
        assert driver.value('n.nvmlDeviceGetPowerManagementLimit(h[0])') == expected
    finally:
        stderr = driver.close()
    assert diagnostics(stderr) == []
    if os.geteuid() == 0:
        with open(state_file) as handle:
            assert json.load(handle) == {'0': {'power_limit_mw': 450000}}  # as root left it
    else:
        assert not os.path.exists(state_file)


# --- the state file -----------------------------------------------------------------

@needs_root
def test_the_state_file_is_shared_between_processes(drive, tmp_path):
    data = base_fixture(tmp_path / 'state.json', live=False)  # read whether or not the fixture is live
    first, _data, _path = drive(data)
    second, _data, _path = drive(data)
    assert first.value('n.nvmlDeviceSetPowerManagementLimit(h[0], 450000)') is None
    assert second.value('n.nvmlDeviceGetPowerManagementLimit(h[0])') == 450000
    assert second.value('n.nvmlDeviceSetGpuLockedClocks(h[0], 210, 1800)') is None
    # each setter reads the file before it writes: neither change is lost
    with open(data['state_file']) as handle:
        assert json.load(handle) == {'0': {'power_limit_mw': 450000, 'locked_clocks_mhz': [210, 1800]}}
    assert first.value('n.nvmlDeviceGetClockInfo(h[0], n.NVML_CLOCK_SM)') == 1800
    assert first.value('n.nvmlDeviceResetGpuLockedClocks(h[0])') is None
    assert second.value('n.nvmlDeviceGetClockInfo(h[0], n.NVML_CLOCK_SM)') == 2617
    # a missing file is the state after boot
    os.unlink(data['state_file'])
    assert second.value('n.nvmlDeviceGetPowerManagementLimit(h[0])') == 600000
    # an unusable file: the previous state stays, one diagnostic
    write_json(data['state_file'], {'0': {'power_limit_mw': 400000}})
    assert second.value('n.nvmlDeviceGetPowerManagementLimit(h[0])') == 400000
    with open(data['state_file'] + '.tmp', 'w') as handle:
        handle.write('{')
    os.replace(data['state_file'] + '.tmp', data['state_file'])
    assert second.value('n.nvmlDeviceGetPowerManagementLimit(h[0])') == 400000
    assert second.value('n.nvmlDeviceGetEnforcedPowerLimit(h[0])') == 400000
    lines = diagnostics(second.close())
    assert len(lines) == 1 and 'invalid JSON in state file' in lines[0], lines


@needs_root
def test_what_gpu_facts_and_the_exporter_read_reflects_the_state(drive):
    driver, _data, _path = drive()
    assert driver.value('n.nvmlDeviceSetPowerManagementLimit(h[0], 450000)') is None
    assert driver.value('n.nvmlDeviceSetGpuLockedClocks(h[0], 210, 1500)') is None
    gpu = driver.value('facts(0)')
    assert gpu['power_limit_w'] == 450.0
    assert gpu['power_limit_default_w'] == 600.0
    assert gpu['clocks']['graphics_mhz'] == 1500 and gpu['clocks']['sm_mhz'] == 1500
    assert gpu['clocks']['graphics_max_mhz'] == 3090
    assert gpu['throttle_reasons'] == ['gpu_idle', 'applications_clocks_setting', 'sw_power_cap']
    other = driver.value('facts(1)')
    assert other['power_limit_w'] == 600.0 and other['clocks']['graphics_mhz'] == 180


def test_a_live_fixture_can_name_another_state_file(drive, tmp_path):
    driver, data, path = drive()
    write_json(str(tmp_path / 'other.json'), {'0': {'power_limit_mw': 300000, 'locked_clocks_mhz': [100, 900]}})
    data['state_file'] = str(tmp_path / 'other.json')
    write_json(path, data)
    assert driver.value('n.nvmlDeviceGetPowerManagementLimit(h[0])') == 300000
    assert driver.value('n.nvmlDeviceGetClockInfo(h[0], n.NVML_CLOCK_GRAPHICS)') == 900
