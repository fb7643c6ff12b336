# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-gpu-watchdog (host/llm_server_host/gpu_watchdog.py) as a program, against the NVML double.

Its child process for one NVML setting (--set) through the real pynvml and
the double's setters, and that child killed after set_timeout_s when the
setter hangs (the round goes on and counts the failure); the configuration
check the role validates with; one
round (`once`) reading the double through the GPU exporter's worker; a
running daemon that heats a GPU, is asked to release it and restores it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from llm_server_host import watchdog_daemon as _watchdog_daemon
from llm_server_host.collection import _registry

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
# The program as the host runs it (nvml_env puts host/ on PYTHONPATH).
PROGRAM = [sys.executable, '-m', 'llm_server_host.gpu_watchdog']
FIXTURE = os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'fixtures', 'watchdog_dual_rtx_pro_6000.json')
SET_FIXTURE = os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'set_fixture.py')

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='NVML setters answer NO_PERMISSION to a non-root user')


@pytest.fixture
def host(tmp_path, nvml_env):
    """A fixture of its own (live, state in tmp_path), a registry with one engine per GPU, a config."""
    with open(FIXTURE) as handle:
        fixture = json.load(handle)
    fixture['state_file'] = str(tmp_path / 'nvml-state.json')
    fixture['devices'][0]['xid_events_file'] = str(tmp_path / 'xid-gpu0')
    (tmp_path / 'xid-gpu0').write_text('')
    (tmp_path / 'kern.log').write_text('')
    (tmp_path / 'fixture.json').write_text(json.dumps(fixture))
    registry = tmp_path / 'instances'
    registry.mkdir()
    for name, gpu in (('engine-a', 0), ('engine-b', 1)):
        (registry / (name + '.json')).write_text(json.dumps(_registry.entry(name, 'llamacpp', 8101 + gpu, 'm', gpus=[gpu])))
    # systemctl stood in for by a recorder: the engines are not what this tests.
    recorder = tmp_path / 'systemctl'
    recorder.write_text('#!/bin/sh\necho "$*" >> %s\n' % (tmp_path / 'systemctl.log'))
    recorder.chmod(0o755)
    config = {'interval_s': 0.2, 'nvml_timeout_s': 2, 'registry_dir': str(registry),
              'state_dir': str(tmp_path / 'state'), 'run_dir': str(tmp_path / 'run'),
              'hold_dir': str(tmp_path / 'holds'),
              'metrics_dir': str(tmp_path / 'metrics'), 'kernel_log': str(tmp_path / 'kern.log'),
              'systemctl': str(recorder), 'heat': {'stop_after_s': 0.5, 'cool_for_s': 60}}
    (tmp_path / 'config.json').write_text(json.dumps(config))
    host = type('Host', (), {})()
    host.path = tmp_path
    host.env = nvml_env(str(tmp_path / 'fixture.json'))
    host.config = str(tmp_path / 'config.json')

    def state():
        try:
            return json.loads((tmp_path / 'nvml-state.json').read_text())
        except FileNotFoundError:
            return {}
    host.state = state
    return host


def run(host, *args, timeout=30):
    return subprocess.run(PROGRAM + list(args), env=host.env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def wait_for(predicate, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_set_power_limit_and_clocks_through_the_double(host):
    proc = run(host, '--set', 'power_limit', '--gpu', '1', '--uuid', 'GPU-a1c9e7f2-5b3d-4e8a-9f60-7c2d1e4b3a95',
               '--value', '450')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert host.state()['1']['power_limit_mw'] == 450000
    assert run(host, '--set', 'lock_clocks', '--gpu', '0', '--value', '1500').returncode == 0
    assert host.state()['0']['locked_clocks_mhz'] == [1500, 1500]
    assert run(host, '--set', 'unlock_clocks', '--gpu', '0').returncode == 0
    assert 'locked_clocks_mhz' not in host.state().get('0', {})


def test_set_refuses_out_of_range_and_a_wrong_gpu(host):
    proc = run(host, '--set', 'power_limit', '--gpu', '0', '--value', '700')
    assert proc.returncode == 1 and 'Invalid Argument' in proc.stdout
    proc = run(host, '--set', 'power_limit', '--gpu', '0', '--uuid', 'GPU-someone-else', '--value', '450')
    assert proc.returncode == 1 and 'not GPU-someone-else: nothing set' in proc.stdout
    assert host.state() == {}


def hang_power_setter(host, milliseconds):
    """GPU 0's power setter sleeps first, as NVML does on a GPU that fell off the bus."""
    path = host.path / 'fixture.json'
    fixture = json.loads(path.read_text())
    fixture['devices'][0]['hang_ms'] = {'nvmlDeviceSetPowerManagementLimit': milliseconds}
    path.write_text(json.dumps(fixture))


def test_a_setter_that_hangs_is_killed_after_set_timeout_s(host, monkeypatch):
    hang_power_setter(host, 60000)
    for name, value in host.env.items():  # the child inherits this process's environment
        monkeypatch.setenv(name, value)
    config = _watchdog_daemon.load_config({'set_timeout_s': 1})
    actuator = _watchdog_daemon.Actuator(config, PROGRAM)
    started = time.monotonic()
    ok, detail = actuator.nvml_set('power_limit', 0, None, 450)
    took = time.monotonic() - started
    assert not ok and 'did not finish within 1 s (killed)' in detail, detail
    # Bounded by set_timeout_s, not by the 60 s the setter sleeps.
    assert 1.0 <= took < 2.5, took
    assert host.state() == {}


def test_a_round_goes_on_past_a_hanging_setter_and_counts_it(host):
    hang_power_setter(host, 60000)
    config = json.loads((host.path / 'config.json').read_text())
    config['set_timeout_s'] = 1
    (host.path / 'config.json').write_text(json.dumps(config))
    subprocess.run([sys.executable, SET_FIXTURE, str(host.path / 'fixture.json'), 'devices.0.temperature.gpu=92'],
                   check=True)
    started = time.monotonic()
    # A setter the watchdog waited for would keep this round past the 30 s limit (TimeoutExpired).
    proc = run(host, '--config', host.config, 'once', timeout=30)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert 'set the power limit of GPU 0 to 480 W: failed' in proc.stderr
    assert 'did not finish within 1 s (killed)' in proc.stderr
    metrics = (host.path / 'metrics' / 'llm_gpu_watchdog.prom').read_text()
    assert 'llm_watchdog_actions_total{action="lower_power_limit",gpu="0",result="failed"} 1' in metrics
    # The next step of the same round still acted.
    assert 'llm_watchdog_actions_total{action="lock_clocks",gpu="0",result="done"} 1' in metrics
    assert host.state()['0'] == {'locked_clocks_mhz': [2163, 2163]}
    assert took < config['set_timeout_s'] + 5, took


def test_check_names_the_bad_setting(host, tmp_path):
    bad = tmp_path / 'bad.json'
    bad.write_text(json.dumps({'heat': {'warn_c': 90, 'stop_c': 80}}))
    proc = run(host, '--config', str(bad), 'check')
    assert proc.returncode == 2
    assert 'heat: warn_c (90) must not be above stop_c (80)' in proc.stderr
    assert run(host, '--config', host.config, 'check').returncode == 0


def test_one_round_reads_both_gpus(host):
    proc = run(host, '--config', host.config, 'once')
    assert proc.returncode == 0, proc.stderr
    metrics = (host.path / 'metrics' / 'llm_gpu_watchdog.prom').read_text()
    assert 'llm_watchdog_heat_threshold_celsius{gpu="0",step="stop"} 93' in metrics
    assert 'llm_watchdog_kernel_log_fallback{gpu="1"} 1' in metrics
    assert 'llm_watchdog_nvml_success 1' in metrics


def test_daemon_heats_then_a_person_releases(host):
    daemon = subprocess.Popen(PROGRAM + ['--config', host.config, 'run'], env=host.env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        metrics = host.path / 'metrics' / 'llm_gpu_watchdog.prom'
        assert wait_for(metrics.exists)
        started = time.monotonic()
        subprocess.run([sys.executable, SET_FIXTURE, str(host.path / 'fixture.json'),
                        'devices.0.temperature.gpu=97'], check=True)
        assert wait_for(lambda: host.state().get('0', {}).get('power_limit_mw') == 480000)
        reaction = time.monotonic() - started
        assert wait_for(lambda: host.state().get('0', {}).get('locked_clocks_mhz') == [2163, 2163])
        log = host.path / 'systemctl.log'
        assert wait_for(lambda: log.exists() and 'stop --no-block engine-a.service' in log.read_text())
        # Cooled, but cool_for_s is a minute: a person releases it instead.
        subprocess.run([sys.executable, SET_FIXTURE, str(host.path / 'fixture.json'),
                        'devices.0.temperature.gpu=50'], check=True)
        proc = run(host, '--config', host.config, 'release', '0')
        assert proc.returncode == 0, proc.stderr
        assert 'start --no-block engine-a.service' in log.read_text()
        assert host.state()['0']['power_limit_mw'] == 600000
        assert 'locked_clocks_mhz' not in host.state().get('0', {})
        status = json.loads(run(host, '--config', host.config, 'status').stdout)
        assert status['held'] == {} and status['attention'] == {}
        assert reaction < 5, reaction
    finally:
        daemon.terminate()
        output = daemon.communicate(timeout=15)[0]
    assert daemon.returncode == 0, output
