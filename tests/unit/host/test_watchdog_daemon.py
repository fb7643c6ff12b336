# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/llm_server_host/watchdog_daemon.py: the watchdog's rounds, in process.

The reads are snapshots as nvml_supervisor.Supervisor returns them and the
actions are recorded instead of run: what is checked here is which action
follows which reading, the holds, the budgets, dry run, the state files and
the metrics. The same loop against the NVML double, systemd and real engines
is the gpu_watchdog Molecule scenario.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

# The decisions as the daemon imports them (the wheel carries them as llm_server_host.collection).
from llm_server_host import watchdog_daemon as daemon
from llm_server_host.collection import _watchdog as wd
from llm_server_host.collection import _registry

UUIDS = {0: 'GPU-aaaa', 1: 'GPU-bbbb'}


def facts(index, temp, limit=600.0, max_clock=3000.0):
    return {'index': index, 'uuid': UUIDS[index], 'name': 'RTX', 'pci_bus_id': '00000000:%02X:00.0' % (index + 1),
            'temperature_c': temp, 'temperature_slowdown_c': 95.0, 'temperature_shutdown_c': 100.0,
            'power_limit_w': limit, 'power_limit_min_w': 150.0, 'power_limit_max_w': 600.0,
            'power_limit_default_w': 600.0, 'clocks': {'graphics_max_mhz': max_clock}}


class FakeSupervisor(object):
    def __init__(self):
        self.temps = {0: 40.0, 1: 40.0}
        self.limits = {0: 600.0, 1: 600.0}  # what NVML holds: the recorder's settings land here
        self.max_clocks = {0: 3000.0, 1: 3000.0}  # None: NVML reports no maximum graphics clock
        self.xids = {0: {}, 1: {}}
        self.events = {0: None, 1: None}
        self.recovery = {}

    def add_xid(self, gpu, xid, times=1):
        self.xids[gpu][xid] = self.xids[gpu].get(xid, 0) + times

    def scrape(self):
        gpus = []
        for index, temp in sorted(self.temps.items()):
            extra = {'recovery_action': self.recovery[index]} if index in self.recovery else {}
            gpus.append({'type': 'gpu', 'facts': facts(index, temp, self.limits[index], self.max_clocks[index]),
                         'extra': extra, 'unavailable': {}})
        return {'success': True, 'error': None, 'gpus': gpus, 'lost': [], 'events': dict(self.events),
                'xids': {index: {'uuid': UUIDS[index], 'name': 'RTX', 'counts': dict(counts)}
                         for index, counts in self.xids.items()}}


class Recorder(object):
    def __init__(self, fail=(), limits=None):
        self.calls = []
        self.fail = set(fail)
        self.limits = limits if limits is not None else {}

    def systemctl(self, verb, unit):
        self.calls.append(('systemctl', verb, unit))
        return verb not in self.fail, ''

    def nvml_set(self, kind, gpu, uuid, value=None):
        self.calls.append(('nvml', kind, gpu, uuid, value))
        if kind == 'power_limit' and kind not in self.fail:
            self.limits[gpu] = value
        return kind not in self.fail, 'NVML said no' if kind in self.fail else ''

    def reboot(self):
        self.calls.append(('reboot',))
        return True, ''

    def reap(self):
        return 0


class Clock(object):
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


@pytest.fixture
def setup(tmp_path):
    registry = tmp_path / 'instances'
    registry.mkdir()
    for name, gpus in (('llm-a', [0]), ('llm-b', [1]), ('llm-cpu', [])):
        (registry / (name + '.json')).write_text(json.dumps(_registry.entry(name, 'vllm', 8001, 'm', gpus=gpus)))

    def make(**overrides):
        fail = overrides.pop('fail', ())
        settings = {'registry_dir': str(registry), 'state_dir': str(tmp_path / 'state'),
                    'run_dir': str(tmp_path / 'run'), 'metrics_dir': str(tmp_path / 'metrics'),
                    'hold_dir': str(tmp_path / 'holds'),
                    'kernel_log': str(tmp_path / 'kern.log'),
                    'heat': {'stop_after_s': 10, 'cool_for_s': 60}}
        settings.update(overrides)
        config = daemon.load_config(settings)
        supervisor, clock, lines = FakeSupervisor(), Clock(), []
        actuator = Recorder(fail, supervisor.limits)
        watchdog = daemon.Watchdog(config, supervisor, actuator, lines.append, clock=clock, wall_clock=clock)
        return watchdog, supervisor, actuator, clock, lines

    (tmp_path / 'kern.log').write_text('')
    make.tmp = tmp_path
    return make


# --- configuration --------------------------------------------------------------

@pytest.mark.parametrize('settings, message', [
    ({'interval': 5}, 'unknown setting(s): interval'),
    ({'interval_s': 0}, 'interval_s must be a number above 0'),
    ({'restarts_per_hour': -1}, 'restarts_per_hour must be a whole number'),
    ({'dry_run': 'yes'}, 'dry_run must be true or false'),
    ({'run_dir': 'run'}, 'run_dir must be an absolute path'),
    ({'reboot_command': []}, 'reboot_command must be a non-empty list'),
    ({'heat': {'warn_c': 90, 'stop_c': 80}}, 'heat: warn_c (90) must not be above stop_c (80)'),
    ({'heat': {'power_fraction': 2}}, 'heat: power_fraction must be above 0 and at most 1'),
    ({'heat_per_gpu': {'0': {'clocks_c': 'hot'}}}, 'heat_per_gpu[0]: clocks_c must be a number'),
    ({'restart_backoff_initial_s': 60, 'restart_backoff_max_s': 30}, 'restart_backoff_max_s must not be below'),
])
def test_config_errors_name_the_setting(settings, message):
    with pytest.raises(daemon.ConfigError) as err:
        daemon.load_config(settings)
    assert message in str(err.value)


def test_config_defaults_and_per_gpu_override():
    config = daemon.load_config({'heat': {'cool_for_s': 120}, 'heat_per_gpu': {'1': {'warn_c': 70}}})
    assert config['interval_s'] == 5.0 and config['allow_reboot'] is False
    assert config['heat_per_gpu']['1'].warn_c == 70 and config['heat_per_gpu']['1'].cool_for_s == 120


def test_engines_by_gpu_reads_the_registry_and_leaves_out_what_breaks_its_contract(tmp_path):
    (tmp_path / 'a.json').write_text(json.dumps(_registry.entry('a', 'vllm', 8001, 'm', gpus=[0, 1])))
    (tmp_path / 'b.json').write_text(json.dumps(_registry.entry('b', 'vllm', 8002, 'm', gpus=[1])))
    (tmp_path / 'c.json').write_text(json.dumps(_registry.entry('c', 'llamacpp', 8101, 'm')))
    # Written by hand: a GPU index as a string, and no JSON at all.
    (tmp_path / 'd.json').write_text(json.dumps(dict(_registry.entry('d', 'vllm', 8003, 'm'), gpus=['1'])))
    (tmp_path / 'broken.json').write_text('{')
    assert daemon.engines_by_gpu(str(tmp_path)) == {0: ['a'], 1: ['a', 'b']}


# --- heat --------------------------------------------------------------------------

def test_heat_steps_stop_and_restore(setup):
    watchdog, supervisor, actuator, clock, lines = setup()
    watchdog.tick()
    assert actuator.calls == []
    supervisor.temps[0] = 88.0  # warn 87 (slowdown 95 - 8)
    watchdog.tick()
    assert actuator.calls == [('nvml', 'power_limit', 0, 'GPU-aaaa', 480.0)]
    supervisor.temps[0] = 92.0  # clocks 91
    watchdog.tick()
    assert actuator.calls[-1] == ('nvml', 'lock_clocks', 0, 'GPU-aaaa', 2100.0)
    supervisor.temps[0] = 95.0  # stop 94, held for stop_after_s
    watchdog.tick()
    clock.now += 11
    watchdog.tick()
    assert actuator.calls[-1] == ('systemctl', 'stop', 'llm-a')
    assert list(watchdog.held) == ['llm-a']
    assert ('systemctl', 'stop', 'llm-b') not in actuator.calls
    # Cooling below warn - hysteresis (82) for cool_for_s restores in order.
    supervisor.temps[0] = 70.0
    watchdog.tick()
    clock.now += 61
    watchdog.tick()
    assert actuator.calls[-3:] == [('nvml', 'unlock_clocks', 0, 'GPU-aaaa', None),
                                   ('nvml', 'power_limit', 0, 'GPU-aaaa', 600.0),
                                   ('systemctl', 'start', 'llm-a')]
    assert watchdog.held == {}
    watchdog.write_metrics()
    text = (setup.tmp / 'metrics' / daemon.METRICS_FILE).read_text()
    assert 'llm_watchdog_actions_total{action="stop_engines",gpu="0",result="done"} 1' in text
    assert 'llm_watchdog_heat_level{gpu="0"} 0' in text
    assert 'llm_watchdog_heat_threshold_celsius{gpu="0",step="power"} 87' in text


def heat_stop(watchdog, supervisor, clock):
    supervisor.temps[0] = 95.0
    watchdog.tick()
    clock.now += 11
    watchdog.tick()


def cool_down(watchdog, supervisor, clock):
    supervisor.temps[0] = 70.0
    watchdog.tick()
    clock.now += 61
    watchdog.tick()


def test_the_watchdogs_holds_are_its_file_in_the_hold_directory(setup):
    watchdog, supervisor, _actuator, clock, _lines = setup()
    heat_stop(watchdog, supervisor, clock)
    holds, problems = daemon._holds.read(str(setup.tmp / 'holds'))
    assert problems == [] and list(holds) == ['watchdog']
    assert [(h['gpu'], h['reason']) for h in holds['watchdog']['llm-a.service']] == [(0, 'heat')]
    # A new daemon (a restart of the service) picks its holds up again.
    again, _s, _a, _c, _l = setup()
    assert list(again.held) == ['llm-a']
    cool_down(watchdog, supervisor, clock)
    assert daemon._holds.read(str(setup.tmp / 'holds'))[0] == {}


def holds_seen_at(actuator, verb, hold_dir):
    """The holds on disk each time the watchdog calls systemctl VERB (a list that fills as it runs)."""
    seen = []
    record = actuator.systemctl

    def systemctl(called, unit):
        if called == verb:
            seen.append(daemon._holds.read(str(hold_dir))[0])
        return record(called, unit)
    actuator.systemctl = systemctl
    return seen


def test_the_watchdog_lets_go_before_it_starts_the_engine(setup):
    """The unit's condition (llm-server may-start) reads the holds when systemd
    starts it: by then the watchdog's own hold must be gone from its file."""
    watchdog, supervisor, actuator, clock, _lines = setup()
    heat_stop(watchdog, supervisor, clock)
    seen = holds_seen_at(actuator, 'start', setup.tmp / 'holds')
    cool_down(watchdog, supervisor, clock)
    assert actuator.calls[-1] == ('systemctl', 'start', 'llm-a')
    assert seen == [{}]


def test_the_watchdog_holds_the_engine_before_it_stops_it(setup):
    """The proxy marks a held engine down (llm-proxy-holds): held first, no new
    request reaches it while its stop drains the ones in flight."""
    watchdog, supervisor, actuator, clock, _lines = setup()
    seen = holds_seen_at(actuator, 'stop', setup.tmp / 'holds')
    heat_stop(watchdog, supervisor, clock)
    assert actuator.calls[-1] == ('systemctl', 'stop', 'llm-a')
    assert [list(holds['watchdog']) for holds in seen] == [['llm-a.service']]


def test_a_cooled_gpu_does_not_start_an_engine_the_ups_holds(setup):
    """On battery the watchdog's restore lets go of its hold but leaves the
    engine stopped; the UPS starts it at power-back."""
    watchdog, supervisor, actuator, clock, lines = setup()
    heat_stop(watchdog, supervisor, clock)
    assert actuator.calls[-1] == ('systemctl', 'stop', 'llm-a')
    daemon._holds.write(str(setup.tmp / 'holds'), 'ups',
                        {'llm-a.service': [{'reason': 'on battery', 'since': 1000.0}]})
    cool_down(watchdog, supervisor, clock)
    assert ('systemctl', 'start', 'llm-a') not in actuator.calls
    assert 'llm-a stays stopped: released by the watchdog, still held by the UPS (on battery)' in lines
    assert watchdog.held == {}
    assert list(daemon._holds.read(str(setup.tmp / 'holds'))[0]) == ['ups']


def test_dry_run_changes_nothing_and_says_so(setup):
    watchdog, supervisor, actuator, clock, lines = setup(dry_run=True)
    supervisor.temps[0] = 99.0
    watchdog.tick()
    clock.now += 11
    watchdog.tick()
    assert actuator.calls == []
    # Nor does it hold anything: the proxy would take the engine out.
    assert daemon._holds.read(str(setup.tmp / 'holds'))[0] == {}
    assert any(line.startswith('dry run: would set the power limit of GPU 0 to 480 W') for line in lines)
    assert any(line.startswith('dry run: would stop engine llm-a') for line in lines)
    watchdog.write_metrics()
    text = (setup.tmp / 'metrics' / daemon.METRICS_FILE).read_text()
    assert 'llm_watchdog_actions_total{action="lower_power_limit",gpu="0",result="dry_run"} 1' in text
    assert 'llm_watchdog_dry_run 1' in text


def test_heat_state_survives_a_restart_of_the_daemon(setup):
    watchdog, supervisor, actuator, clock, lines = setup()
    supervisor.temps[0] = 88.0
    watchdog.tick()
    again, supervisor2, actuator2, clock2, _lines = setup()
    supervisor2.temps[0] = 88.0
    again.tick()
    assert actuator2.calls == []  # already lowered: not again
    assert again.heat[0].restore_power_limit_w == 600.0


def test_a_failed_setting_is_logged_and_counted(setup):
    watchdog, supervisor, actuator, clock, lines = setup(fail=('power_limit',))
    supervisor.temps[1] = 88.0
    watchdog.tick()
    assert any('set the power limit of GPU 1 to 480 W: failed (NVML said no)' in line for line in lines)
    watchdog.write_metrics()
    assert 'llm_watchdog_actions_total{action="lower_power_limit",gpu="1",result="failed"} 1' in (
        setup.tmp / 'metrics' / daemon.METRICS_FILE).read_text()


def test_a_clock_step_without_a_clock_to_lock_at_is_skipped_and_counted(setup):
    watchdog, supervisor, actuator, clock, lines = setup()
    supervisor.max_clocks[0] = None  # and no clock_mhz in the settings
    supervisor.temps[0] = 92.0  # past the power step (87) and the clock step (91)
    watchdog.tick()
    assert actuator.calls == [('nvml', 'power_limit', 0, 'GPU-aaaa', 480.0)]  # no lock_clocks call
    assert watchdog.heat[0].level == wd.CLOCKS_LOCKED
    assert any('clock step skipped, graphics clocks not locked' in line for line in lines)
    watchdog.write_metrics()
    text = (setup.tmp / 'metrics' / daemon.METRICS_FILE).read_text()
    assert 'llm_watchdog_actions_total{action="lock_clocks",gpu="0",result="skipped"} 1' in text
    assert 'action="lock_clocks",gpu="0",result="done"' not in text


# --- XIDs ----------------------------------------------------------------------------

def test_application_xid_leaves_it_to_the_health_check(setup):
    watchdog, supervisor, actuator, clock, lines = setup()
    supervisor.add_xid(0, 13)
    watchdog.tick()
    assert actuator.calls == []
    assert any('health checks restart them' in line for line in lines)


def test_restart_xids_are_capped(setup):
    watchdog, supervisor, actuator, clock, lines = setup(restarts_per_hour=3, restart_backoff_initial_s=1,
                                                         restart_backoff_max_s=1)
    for _round in range(10):
        supervisor.add_xid(1, 94)
        watchdog.tick()
        clock.now += 60
    restarts = [call for call in actuator.calls if call[:2] == ('systemctl', 'restart')]
    assert restarts == [('systemctl', 'restart', 'llm-b')] * 3
    assert any('the cap' in line for line in lines)
    watchdog.write_metrics()
    text = (setup.tmp / 'metrics' / daemon.METRICS_FILE).read_text()
    assert 'llm_watchdog_actions_total{action="restart_engine",gpu="1",result="suppressed"} 7' in text
    assert 'llm_watchdog_xid_events_total{action="restart_engine",gpu="1",xid="94"} 10' in text


def test_restart_backoff_between_faults(setup):
    watchdog, supervisor, actuator, clock, lines = setup(restart_backoff_initial_s=30)
    supervisor.add_xid(1, 94)
    watchdog.tick()
    clock.now += 5
    supervisor.add_xid(1, 94)
    watchdog.tick()
    assert [call for call in actuator.calls if call[1] == 'restart'] == [('systemctl', 'restart', 'llm-b')]
    assert any('backing off' in line for line in lines)


def test_reset_xid_stops_the_engines_and_needs_a_person(setup):
    watchdog, supervisor, actuator, clock, lines = setup()
    supervisor.add_xid(0, 48)
    watchdog.tick()
    assert actuator.calls == [('systemctl', 'stop', 'llm-a')]
    assert watchdog.attention['0']['action'] == wd.RESET_GPU
    assert any('reboots are not allowed here' in line for line in lines)
    watchdog.write_metrics()
    text = (setup.tmp / 'metrics' / daemon.METRICS_FILE).read_text()
    assert 'llm_watchdog_gpu_needs_attention{action="reset_gpu",gpu="0",xid="48"} 1' in text
    assert 'llm_watchdog_engine_held{gpu="0",reason="xid",serving_instance="llm-a"} 1' in text
    # Cooling cannot start an engine that an XID holds.
    supervisor.temps[0] = 40.0
    watchdog.tick()
    assert actuator.calls == [('systemctl', 'stop', 'llm-a')]


def test_driver_recovery_action_comes_first(setup):
    watchdog, supervisor, actuator, clock, lines = setup()
    supervisor.recovery[1] = 2  # node_reboot
    supervisor.add_xid(1, 94)   # the table alone would restart
    watchdog.tick()
    assert actuator.calls == [('systemctl', 'stop', 'llm-b')]
    assert watchdog.attention['1']['action'] == wd.REBOOT_HOST


def test_reboot_only_when_allowed_and_once_a_day(setup):
    watchdog, supervisor, actuator, clock, lines = setup(allow_reboot=True, reboots_per_day=1)
    supervisor.add_xid(0, 79)
    watchdog.tick()
    assert actuator.calls == [('systemctl', 'stop', 'llm-a'), ('reboot',)]
    record = json.loads((setup.tmp / 'state' / 'reboots.json').read_text())
    assert len(record['reboots']) == 1 and 'GPU 0' in record['reboots'][0]['reason']
    # The next boot's watchdog reads the record: no second reboot that day.
    again, supervisor2, actuator2, clock2, lines2 = setup(allow_reboot=True, reboots_per_day=1)
    clock2.now = clock.now + 3600
    supervisor2.add_xid(0, 79)
    again.tick()
    assert ('reboot',) not in actuator2.calls
    assert any('no reboot: 1 in the last' in line for line in lines2)


def test_release_restores_and_starts(setup):
    watchdog, supervisor, actuator, clock, lines = setup()
    supervisor.add_xid(0, 48)
    supervisor.temps[0] = 92.0
    watchdog.tick()
    assert watchdog.heat[0].level == wd.CLOCKS_LOCKED
    supervisor.temps[0] = 40.0
    os.makedirs(str(setup.tmp / 'run' / 'release'))
    (setup.tmp / 'run' / 'release' / '0').write_text('now')
    actuator.calls.clear()
    watchdog.tick()
    assert actuator.calls == [('nvml', 'unlock_clocks', 0, 'GPU-aaaa', None),
                              ('nvml', 'power_limit', 0, 'GPU-aaaa', 600.0),
                              ('systemctl', 'start', 'llm-a')]
    assert watchdog.attention == {} and watchdog.held == {}
    assert not (setup.tmp / 'run' / 'release' / '0').exists()


def test_kernel_log_stands_in_where_events_are_not_supported(setup):
    watchdog, supervisor, actuator, clock, lines = setup()
    supervisor.events[1] = 'not_supported'
    watchdog.tick()
    with open(str(setup.tmp / 'kern.log'), 'a') as handle:
        handle.write('[  12.3] NVRM: Xid (PCI:0000:02:00): 94, pid=1234, name=python3, Ch 00000008\n')
        handle.write('[  12.4] NVRM: Xid (PCI:0000:01:00): 94, pid=1234, events of GPU 0 come from NVML\n')
    watchdog.tick()
    assert actuator.calls == [('systemctl', 'restart', 'llm-b')]
    assert any('from the kernel log' in line for line in lines)
    watchdog.write_metrics()
    assert 'llm_watchdog_kernel_log_fallback{gpu="1"} 1' in (
        setup.tmp / 'metrics' / daemon.METRICS_FILE).read_text()


def test_kernel_log_parses_kmsg_records():
    assert daemon.KERNEL_XID.search('4,1234,5678,-;NVRM: Xid (PCI:0000:41:00): 79, pid=\'<unknown>\'').groups() == (
        '0000:41:00', '79')
    assert daemon._bus('00000000:41:00.0') == daemon._bus('0000:41:00') == '41:00'


def test_request_release_times_out_without_a_daemon(tmp_path):
    config = daemon.load_config({'run_dir': str(tmp_path), 'interval_s': 0.1, 'nvml_timeout_s': 0.1})
    assert daemon.request_release(config, 1, wait_s=0.3, poll_s=0.05) is False
    assert (tmp_path / 'release' / '1').exists()


def test_per_gpu_settings_by_uuid_apply_after_a_restart(setup):
    watchdog, supervisor, actuator, clock, lines = setup(heat_per_gpu={'GPU-bbbb': {'warn_c': 70}})
    supervisor.temps[1] = 72.0
    watchdog.tick()
    assert actuator.calls == [('nvml', 'power_limit', 1, 'GPU-bbbb', 480.0)]
    # The next daemon loads GPU 1's state from /run by index, then reads its UUID.
    again, supervisor2, actuator2, clock2, _lines = setup(heat_per_gpu={'GPU-bbbb': {'warn_c': 70}})
    supervisor2.temps[1] = 72.0
    again.tick()
    assert again.heat[1].thresholds().warn_c == 70
    assert actuator2.calls == []


def test_an_unreadable_kernel_log_is_said_once(setup):
    watchdog, supervisor, actuator, clock, lines = setup(kernel_log=str(setup.tmp / 'missing.log'))
    supervisor.events[1] = 'not_supported'
    watchdog.tick()
    watchdog.tick()
    said = [line for line in lines if line.startswith('kernel log: ')]
    assert len(said) == 1 and 'missing.log' in said[0]


# --- calls that do not come back (the real Actuator) -----------------------------------

def _wait_until(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, 'not within %g s' % timeout
        time.sleep(0.05)


def _state(pid):
    with open('/proc/%d/stat' % pid) as handle:
        return handle.read().rsplit(')', 1)[1].split()[0]


def test_a_setter_stuck_in_the_kernel_is_left_behind_and_the_call_returns(stuck_file):
    # The setter reads a file whose daemon never answers: uninterruptible
    # sleep, as a call stuck in the driver. SIGKILL does not end it.
    config = daemon.load_config({'set_timeout_s': 0.5})
    actuator = daemon.Actuator(config, [sys.executable, '-c', 'import sys; open(%r).read()' % stuck_file.path])
    started = time.monotonic()
    ok, detail = actuator.nvml_set('power_limit', 0, 'GPU-aaaa', 300)
    took = time.monotonic() - started
    assert not ok
    assert 'did not exit when killed' in detail, detail
    assert took < 0.5 + actuator.KILL_WAIT_S + 2, took
    [(proc, what)] = actuator.stuck
    assert 'power_limit' in what
    assert _state(proc.pid) == 'D'
    assert actuator.reap() == 1
    os.kill(proc.pid, 9)  # killed once more: still there
    time.sleep(0.2)
    assert proc.poll() is None and actuator.reap() == 1


def test_a_stuck_setter_exits_once_the_driver_lets_go(stuck_file):
    config = daemon.load_config({'set_timeout_s': 0.3})
    actuator = daemon.Actuator(config, [sys.executable, '-c', 'import sys; open(%r).read()' % stuck_file.path])
    assert actuator.nvml_set('lock_clocks', 1, None, 2100)[0] is False
    assert actuator.reap() == 1
    # The daemon goes away (a reset, in the driver's case): the read fails, the process exits.
    stuck_file.release()
    _wait_until(lambda: actuator.reap() == 0)


def test_a_child_that_leaves_a_grandchild_holding_its_output_returns_at_once():
    actuator = daemon.Actuator(daemon.load_config({}), [])
    started = time.monotonic()
    ok, detail = actuator._run(['sh', '-c', 'echo set; sleep 30 & exit 0'], 10.0)
    assert (ok, detail) == (True, 'set')
    assert time.monotonic() - started < 5


def test_a_hanging_call_is_killed_with_its_children():
    actuator = daemon.Actuator(daemon.load_config({}), [])
    ok, detail = actuator._run(['sh', '-c', 'sleep 60 & echo $! > /dev/stderr; wait'], 0.5)
    assert not ok and detail.endswith('did not finish within 0.5 s (killed)'), detail
    assert actuator.stuck == [] and actuator.reap() == 0


def test_a_round_goes_on_past_a_stuck_setter_and_says_so(setup, stuck_file):
    watchdog, supervisor, _recorder, clock, lines = setup(set_timeout_s=0.3)
    watchdog.actuator = daemon.Actuator(watchdog.config,
                                        [sys.executable, '-c', 'import sys; open(%r).read()' % stuck_file.path])
    supervisor.temps[0] = 88.0  # warn: the power limit is lowered, and the setter sticks
    started = time.monotonic()
    watchdog.tick()
    clock.now += 5
    watchdog.tick()  # the next round: not waiting for the stuck one
    assert time.monotonic() - started < 2 * (0.3 + watchdog.actuator.KILL_WAIT_S) + 3
    watchdog.write_metrics()
    text = (setup.tmp / 'metrics' / daemon.METRICS_FILE).read_text()
    assert 'llm_watchdog_actions_total{action="lower_power_limit",gpu="0",result="failed"}' in text
    assert 'llm_watchdog_stuck_calls 1' in text or 'llm_watchdog_stuck_calls 2' in text, text
    assert any('did not exit when killed' in line for line in lines), lines
