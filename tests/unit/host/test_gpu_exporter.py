# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-gpu-exporter (host/llm_server_host/gpu_exporter.py) run for real against the NVML double.

The exporter runs as a process with its HTTP server on a free loopback port,
its NVML worker loading the double (tests/doubles/nvml) through
LD_LIBRARY_PATH, exactly as it would load libnvidia-ml.so.1. /metrics is
parsed with prometheus_client's own parser and checked with `promtool check
metrics` where promtool is at hand (make promtool).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
# The program as the host runs it (nvml_env puts host/ on PYTHONPATH).
EXPORTER = [sys.executable, '-m', 'llm_server_host.gpu_exporter']
FIXTURES = os.path.join(REPO_ROOT, 'tests', 'doubles', 'nvml', 'fixtures')
PARTIAL = 'dual_gpu_partial_support'
RTX = 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition'
UUID0 = 'GPU-3f8a2c41-7d5e-4b9a-8c16-0e2f4a6b8d10'
UUID1 = 'GPU-5e0c7a9b-2f41-4d83-b6a2-91c3d8e47f06'


def fixture_data(name):
    with open(os.path.join(FIXTURES, name + '.json')) as handle:
        return json.load(handle)


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def promtool():
    path = os.environ.get('LLM_SERVER_PROMTOOL') or os.path.join(REPO_ROOT, 'build', 'promtool', 'promtool')
    return path if os.path.exists(path) else shutil.which('promtool')


class Scrape:
    """One /metrics answer: samples by name and labels, and the wall time it took."""

    def __init__(self, text, seconds):
        self.text = text
        self.seconds = seconds
        self.samples = []
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.samples.append((sample.name, sample.labels, sample.value))

    def find(self, metric, /, **labels):
        """[(labels, value)] of the samples of metric whose labels include these (a label may be `name`)."""
        wanted = {k: str(v) for k, v in labels.items()}
        return [(lab, value) for n, lab, value in self.samples
                if n == metric and all(lab.get(k) == v for k, v in wanted.items())]

    def value(self, metric, /, **labels):
        found = self.find(metric, **labels)
        assert len(found) == 1, 'expected one %s%s, found %s' % (metric, labels, found)
        return found[0][1]

    def names(self):
        return {n for n, _lab, _v in self.samples}


class Exporter:
    def __init__(self, proc, port, stderr_path):
        self.proc = proc
        self.url = 'http://127.0.0.1:%d/metrics' % port
        self.stderr_path = stderr_path

    def scrape(self, timeout=30):
        start = time.monotonic()
        with urllib.request.urlopen(self.url, timeout=timeout) as response:
            text = response.read().decode()
        return Scrape(text, time.monotonic() - start)

    def stderr(self):
        with open(self.stderr_path) as handle:
            return handle.read()


@pytest.fixture
def start_exporter(nvml_env, tmp_path):
    """start_exporter(fixture, *args) -> Exporter once /metrics answers; stopped after the test."""
    started = []

    def start(fixture, *args):
        port = free_port()
        stderr_path = str(tmp_path / ('exporter-%d.err' % len(started)))
        with open(stderr_path, 'w') as stderr:
            proc = subprocess.Popen(EXPORTER + ['--port', str(port)] + list(args),
                                    env=nvml_env(fixture=fixture), stdout=subprocess.DEVNULL, stderr=stderr)
        exporter = Exporter(proc, port, stderr_path)
        started.append(exporter)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(('127.0.0.1', port), timeout=1).close()
                return exporter
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError('exporter did not listen: %s' % exporter.stderr())
                time.sleep(0.05)

    yield start
    for exporter in started:
        exporter.proc.terminate()
        try:
            exporter.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            exporter.proc.kill()


def custom_fixture(tmp_path, edit, base=PARTIAL):
    data = fixture_data(base)
    edit(data)
    path = tmp_path / 'custom.json'
    path.write_text(json.dumps(data))
    return str(path)


# --- two GPUs, one with every field and one with much "not supported" --------

def test_two_gpus_metrics(start_exporter):
    scrape = start_exporter(PARTIAL).scrape()
    v = scrape.value
    assert v('llm_gpu_exporter_scrape_success') == 1
    g0 = {'gpu': 0, 'uuid': UUID0, 'name': RTX}
    g1 = {'gpu': 1, 'uuid': UUID1, 'name': RTX}
    assert v('llm_gpu_up', **g0) == v('llm_gpu_up', **g1) == 1
    assert v('llm_gpu_info', pci_bus_id='0000:01:00.0', architecture='blackwell', driver_version='580.95.05',
             **g0) == 1
    assert v('llm_gpu_temperature_celsius', **g0) == 71
    assert v('llm_gpu_temperature_slowdown_celsius', **g0) == 95
    assert v('llm_gpu_temperature_shutdown_celsius', **g0) == 98
    assert v('llm_gpu_power_draw_watts', **g0) == 587.25
    assert v('llm_gpu_power_limit_watts', **g0) == 600
    assert (v('llm_gpu_power_limit_min_watts', **g0), v('llm_gpu_power_limit_max_watts', **g0)) == (150, 600)
    assert v('llm_gpu_clock_hertz', clock='sm', **g0) == 2617e6
    assert v('llm_gpu_clock_max_hertz', clock='memory', **g0) == 14001e6
    assert v('llm_gpu_utilization_ratio', **g0) == 0.97
    assert v('llm_gpu_memory_utilization_ratio', **g0) == 0.63
    assert v('llm_gpu_memory_total_bytes', **g0) == 102641336320
    assert v('llm_gpu_memory_used_bytes', **g0) == 91268055040
    assert v('llm_gpu_memory_free_bytes', **g0) == 102641336320 - 566231040 - 91268055040
    assert (v('llm_gpu_pcie_link_generation', **g1), v('llm_gpu_pcie_link_generation_max', **g1)) == (1, 5)
    assert (v('llm_gpu_pcie_link_width', **g0), v('llm_gpu_pcie_link_width_max', **g0)) == (16, 16)
    assert v('llm_gpu_pcie_replays_total', **g0) == 2
    assert v('llm_gpu_throttle_reason', reason='sw_power_cap', **g0) == 1
    assert v('llm_gpu_throttle_reason', reason='hw_slowdown', **g0) == 0
    assert v('llm_gpu_throttle_reason', reason='gpu_idle', **g1) == 1
    assert (v('llm_gpu_ecc_enabled', **g0), v('llm_gpu_ecc_enabled', **g1)) == (1, 0)
    assert len(scrape.find('llm_gpu_throttle_reason', **g0)) == 9
    assert v('llm_gpu_ecc_errors_total', error_type='corrected', **g0) == 3
    assert v('llm_gpu_ecc_errors_aggregate_total', error_type='corrected', **g0) == 17
    assert v('llm_gpu_ecc_errors_total', error_type='uncorrected', **g0) == 0
    assert v('llm_gpu_remapped_rows', cause='correctable', **g0) == 1
    assert v('llm_gpu_remapped_rows_pending', **g0) == v('llm_gpu_remapped_rows_failure', **g0) == 0
    assert v('llm_gpu_recovery_action', **g0) == 0
    assert v('llm_gpu_xid_errors_total', xid=79, **g0) == 0, 'critical XIDs start at 0'
    duration = v('llm_gpu_exporter_scrape_duration_seconds')
    assert 0 < duration < 2
    # Every series is in base units with the llm_gpu_ prefix and gpu/uuid/name labels.
    for name, labels, _value in scrape.samples:
        assert name.startswith('llm_gpu_'), name
        if not name.startswith('llm_gpu_exporter_') or name.endswith(('_unsupported', '_read_errors')):
            assert {'gpu', 'uuid', 'name'} <= set(labels), (name, labels)


def test_not_supported_fields_are_left_out_and_counted(start_exporter):
    scrape = start_exporter(PARTIAL).scrape()
    g1 = {'gpu': 1, 'uuid': UUID1}
    for name in ('llm_gpu_ecc_errors_total', 'llm_gpu_ecc_errors_aggregate_total',
                 'llm_gpu_remapped_rows', 'llm_gpu_remapped_rows_pending', 'llm_gpu_recovery_action',
                 'llm_gpu_temperature_shutdown_celsius', 'llm_gpu_power_limit_min_watts',
                 'llm_gpu_power_limit_max_watts', 'llm_gpu_xid_errors_total'):
        assert scrape.find(name, **g1) == [], name
        assert scrape.find(name, gpu=0), name
    unsupported = sorted(lab['field'] for lab, value in scrape.find('llm_gpu_exporter_unsupported', **g1))
    assert unsupported == ['ecc_errors', 'ecc_errors_aggregate', 'power_limit_constraints',
                           'recovery_action', 'remapped_rows', 'temperature_shutdown', 'xid_events']
    assert scrape.find('llm_gpu_exporter_unsupported', gpu=0) == []
    assert scrape.find('llm_gpu_exporter_read_errors') == []
    assert scrape.value('llm_gpu_exporter_scrape_success') == 1, 'not supported is not a failure'


def test_recovery_action_reported_as_the_driver_gives_it(start_exporter, tmp_path):
    """A GPU whose driver asks for a reset: the code itself, so the alert and the watchdog can act on it."""
    def edit(data):
        data['devices'][0]['field_values']['NVML_FI_DEV_GET_GPU_RECOVERY_ACTION'] = 1  # gpu_reset
    scrape = start_exporter(custom_fixture(tmp_path, edit)).scrape()
    assert scrape.value('llm_gpu_recovery_action', gpu=0) == 1
    assert scrape.find('llm_gpu_recovery_action', gpu=1) == []


def test_replay_counter_and_throttle_reasons_not_supported(start_exporter, tmp_path):
    """Cards and drivers without the replay counter or the throttle reasons: those series are left out and said."""
    def edit(data):
        del data['devices'][0]['pcie']['replay_counter']
        del data['devices'][0]['clocks_event_reasons']
    scrape = start_exporter(custom_fixture(tmp_path, edit)).scrape()
    assert scrape.find('llm_gpu_pcie_replays_total', gpu=0) == []
    assert scrape.find('llm_gpu_throttle_reason', gpu=0) == []
    assert scrape.find('llm_gpu_pcie_replays_total', gpu=1), 'the other GPU still has its own'
    assert scrape.find('llm_gpu_throttle_reason', gpu=1)
    unsupported = sorted(lab['field'] for lab, value in scrape.find('llm_gpu_exporter_unsupported', gpu=0))
    assert unsupported == ['pcie_replays', 'throttle_reasons']
    assert scrape.value('llm_gpu_exporter_scrape_success') == 1


def test_exposition_passes_promtool(start_exporter):
    tool = promtool()
    if not tool:
        pytest.skip('promtool not found (make promtool)')
    scrape = start_exporter(PARTIAL).scrape()
    proc = subprocess.run([tool, 'check', 'metrics'], input=scrape.text, capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_read_errors_are_not_unsupported(start_exporter, tmp_path):
    def edit(data):
        data['devices'][0]['errors'] = {'nvmlDeviceGetPowerUsage': 'GPU_IS_LOST'}
        data['devices'][1]['errors'] = {'nvmlDeviceGetHandleByIndex': 'GPU_IS_LOST'}
    scrape = start_exporter(custom_fixture(tmp_path, edit)).scrape()
    assert scrape.find('llm_gpu_power_draw_watts', gpu=0) == []
    assert scrape.value('llm_gpu_exporter_read_errors', gpu=0, field='power_draw', error='gpu_is_lost') == 1
    assert scrape.value('llm_gpu_up', gpu=1) == 0
    assert scrape.value('llm_gpu_exporter_read_errors', gpu=1, field='device', error='gpu_is_lost') == 1
    assert scrape.value('llm_gpu_temperature_celsius', gpu=0) == 71
    assert scrape.value('llm_gpu_exporter_scrape_success') == 0, 'GPU 1 was not read'


# --- XIDs ---------------------------------------------------------------------

def wait_for(exporter, predicate, seconds=15):
    deadline = time.monotonic() + seconds
    while True:
        scrape = exporter.scrape()
        if predicate(scrape) or time.monotonic() > deadline:
            return scrape
        time.sleep(0.1)


def test_xid_events_are_counted_per_xid(start_exporter, tmp_path):
    events = tmp_path / 'gpu0.xid'
    events.write_text('')

    def edit(data):
        data['devices'][0]['xid_events'] = [13, 13, 13, 79]
        data['devices'][0]['xid_events_file'] = str(events)
    exporter = start_exporter(custom_fixture(tmp_path, edit), '--event-wait-ms', '100')

    def xid(scrape, number):
        found = scrape.find('llm_gpu_xid_errors_total', gpu=0, uuid=UUID0, name=RTX, xid=number)
        return found[0][1] if found else None

    scrape = wait_for(exporter, lambda s: xid(s, 79) == 1)
    assert (xid(scrape, 13), xid(scrape, 79), xid(scrape, 48)) == (3, 1, 0)
    # More while the exporter runs, an XID not pre-initialised among them.
    with events.open('a') as handle:
        handle.write('13\n13\n92\n')
    scrape = wait_for(exporter, lambda s: xid(s, 92) == 1)
    assert (xid(scrape, 13), xid(scrape, 79), xid(scrape, 92)) == (5, 1, 1)
    assert scrape.find('llm_gpu_xid_errors_total', gpu=1) == [], 'GPU 1 has no XID events'
    assert scrape.value('llm_gpu_exporter_unsupported', gpu=1, field='xid_events') == 1
    assert scrape.value('llm_gpu_exporter_scrape_success') == 1


# --- a hung NVML call -----------------------------------------------------------

def test_hung_call_is_bounded_and_the_other_gpu_still_read(start_exporter, tmp_path):
    def edit(data):
        data['devices'][1]['hang_ms'] = {'nvmlDeviceGetPowerUsage': 60000}
    exporter = start_exporter(custom_fixture(tmp_path, edit), '--timeout', '1', '--quarantine', '600')
    first = exporter.scrape()
    assert first.seconds < 1 + 1.0, 'the scrape waited %.2f s for a 1 s deadline' % first.seconds
    assert first.value('llm_gpu_exporter_scrape_success') == 0
    assert first.value('llm_gpu_exporter_scrape_timeouts_total') == 1
    assert first.value('llm_gpu_up', gpu=0) == 1 and first.value('llm_gpu_temperature_celsius', gpu=0) == 71
    assert first.value('llm_gpu_up', gpu=1, uuid=UUID1) == 0
    assert first.find('llm_gpu_temperature_celsius', gpu=1) == []
    # The stuck worker was killed and a new one, started at once, leaves GPU 1
    # alone: answers well within the deadline, GPU 0 read.
    time.sleep(0.5)
    second = exporter.scrape()
    assert second.seconds < 1
    assert second.value('llm_gpu_exporter_scrape_success') == 0
    assert second.value('llm_gpu_exporter_scrape_timeouts_total') == 1
    assert second.value('llm_gpu_exporter_worker_restarts_total') == 1
    assert second.value('llm_gpu_exporter_stuck_workers') == 0
    assert second.value('llm_gpu_power_draw_watts', gpu=0) == 587.25
    assert second.value('llm_gpu_up', gpu=1) == 0
    assert second.value('llm_gpu_exporter_read_errors', gpu=1, field='device', error='quarantined') == 1
    assert 'leaving GPU 1 alone' in exporter.stderr()


def test_quarantine_ends_with_a_probe_that_never_blinds_the_other_gpu(start_exporter, tmp_path):
    """After the quarantine a probe process tries the lost GPU while the worker reads the other.

    Still hung: the probe is killed at the start-up limit and the GPU left
    alone again, and no scrape waited or missed GPU 0 meanwhile. Answering
    again: a new worker takes it back.
    """
    def edit(data):
        data['live'] = True
        data['devices'][1]['hang_ms'] = {'nvmlDeviceGetPowerUsage': 60000}
    fixture = custom_fixture(tmp_path, edit)
    exporter = start_exporter(fixture, '--timeout', '1', '--quarantine', '1', '--startup-limit', '2')
    assert exporter.scrape().value('llm_gpu_exporter_scrape_timeouts_total') == 1
    time.sleep(1.2)
    deadline = time.monotonic() + 10
    while True:
        scrape = exporter.scrape()
        assert scrape.seconds < 0.9, 'a scrape waited %.2f s while the probe ran' % scrape.seconds
        assert scrape.value('llm_gpu_up', gpu=0) == 1 and scrape.value('llm_gpu_up', gpu=1) == 0
        assert scrape.value('llm_gpu_exporter_scrape_timeouts_total') == 1
        if scrape.value('llm_gpu_exporter_probe_failures_total') == 1:
            break
        assert time.monotonic() < deadline, exporter.stderr()
        time.sleep(0.2)
    assert 'GPU 1 tried again: NVML did not answer within 2 s' in exporter.stderr()
    # The GPU answers again: the next probe reads it and a new worker takes it back.
    data = json.loads(open(fixture).read())
    del data['devices'][1]['hang_ms']
    with open(fixture + '.new', 'w') as handle:
        handle.write(json.dumps(data))
    os.replace(fixture + '.new', fixture)
    deadline = time.monotonic() + 10
    while True:
        scrape = exporter.scrape()
        if scrape.value('llm_gpu_up', gpu=1) == 1:
            break
        assert scrape.value('llm_gpu_up', gpu=0) == 1
        assert time.monotonic() < deadline, exporter.stderr()
        time.sleep(0.2)
    assert scrape.value('llm_gpu_exporter_scrape_success') == 1
    assert scrape.value('llm_gpu_exporter_scrape_timeouts_total') == 1
    assert scrape.value('llm_gpu_exporter_probe_failures_total') == 1
    assert 'GPU 1 answered NVML again' in exporter.stderr()


def test_nvml_that_does_not_initialise(start_exporter):
    exporter = start_exporter('nvml_init_failure')
    scrape = exporter.scrape()
    assert scrape.value('llm_gpu_exporter_scrape_success') == 0
    assert scrape.find('llm_gpu_up') == []
    assert exporter.proc.poll() is None
    assert 'The NVIDIA kernel module is not loaded' in exporter.stderr()


# --- the same figures as gpu_facts -------------------------------------------

# (gpu_facts key, metric, factor, extra labels)
SAME_AS_GPU_FACTS = (
    ('temperature_c', 'llm_gpu_temperature_celsius', 1, {}),
    ('temperature_slowdown_c', 'llm_gpu_temperature_slowdown_celsius', 1, {}),
    ('temperature_shutdown_c', 'llm_gpu_temperature_shutdown_celsius', 1, {}),
    ('power_draw_w', 'llm_gpu_power_draw_watts', 1, {}),
    ('power_limit_w', 'llm_gpu_power_limit_watts', 1, {}),
    ('power_limit_default_w', 'llm_gpu_power_limit_default_watts', 1, {}),
    ('power_limit_min_w', 'llm_gpu_power_limit_min_watts', 1, {}),
    ('power_limit_max_w', 'llm_gpu_power_limit_max_watts', 1, {}),
    ('memory_total_bytes', 'llm_gpu_memory_total_bytes', 1, {}),
    ('memory_used_bytes', 'llm_gpu_memory_used_bytes', 1, {}),
    ('memory_free_bytes', 'llm_gpu_memory_free_bytes', 1, {}),
    ('pcie_link_gen_current', 'llm_gpu_pcie_link_generation', 1, {}),
    ('pcie_link_gen_max', 'llm_gpu_pcie_link_generation_max', 1, {}),
    ('pcie_link_gen_gpu_max', 'llm_gpu_pcie_link_generation_gpu_max', 1, {}),
    ('pcie_link_width_current', 'llm_gpu_pcie_link_width', 1, {}),
    ('pcie_link_width_max', 'llm_gpu_pcie_link_width_max', 1, {}),
    ('ecc_enabled', 'llm_gpu_ecc_enabled', 1, {}),
    ('persistence_mode', 'llm_gpu_persistence_mode', 1, {}),
    ('clocks.graphics_mhz', 'llm_gpu_clock_hertz', 1e6, {'clock': 'graphics'}),
    ('clocks.sm_mhz', 'llm_gpu_clock_hertz', 1e6, {'clock': 'sm'}),
    ('clocks.memory_mhz', 'llm_gpu_clock_hertz', 1e6, {'clock': 'memory'}),
    ('clocks.graphics_max_mhz', 'llm_gpu_clock_max_hertz', 1e6, {'clock': 'graphics'}),
    ('clocks.sm_max_mhz', 'llm_gpu_clock_max_hertz', 1e6, {'clock': 'sm'}),
    ('clocks.memory_max_mhz', 'llm_gpu_clock_max_hertz', 1e6, {'clock': 'memory'}),
)


@pytest.mark.parametrize('fixture', [PARTIAL, 'target_dual_rtx_pro_6000', 'degraded_dual_rtx_pro_6000'])
def test_figures_equal_gpu_facts(start_exporter, run_gpu_facts, fixture):
    rc, result, stderr = run_gpu_facts({'vendors': ['nvidia']}, fixture=fixture)
    assert rc == 0, stderr
    gpus = result['ansible_facts']['gpus']
    scrape = start_exporter(fixture).scrape()
    compared = 0
    for gpu in gpus:
        labels = {'gpu': gpu['index'], 'uuid': gpu['uuid'], 'name': gpu['name']}
        assert scrape.value('llm_gpu_info', pci_bus_id=gpu['pci_bus_id'], architecture=gpu['architecture'],
                            driver_version=result['ansible_facts']['gpu_driver_version'], **labels) == 1
        for key, metric, factor, extra in SAME_AS_GPU_FACTS:
            value = gpu
            for part in key.split('.'):
                value = value[part]
            found = scrape.find(metric, **dict(labels, **extra))
            if value is None:
                assert found == [], (metric, labels)
            else:
                assert [v for _lab, v in found] == [float(value) * factor], (key, metric, labels)
                compared += 1
        held = {lab['reason'] for lab, v in scrape.find('llm_gpu_throttle_reason', **labels) if v == 1}
        assert held == set(gpu['throttle_reasons'])
    assert compared >= 40


def test_installed_wheel_runs_without_the_collection(nvml_env, tmp_path):
    """On the host the program comes from the wheel, which carries _nvml: no collection there."""
    from ansible_collections.homelab.llm_server.plugins.plugin_utils import _host_wheel
    name, data, _scripts = _host_wheel.build(os.path.join(REPO_ROOT, 'host'), '0.0.1')
    wheel, _written = _host_wheel.write(str(tmp_path), name, data)
    installed = tmp_path / 'installed'
    subprocess.run([sys.executable, '-m', 'pip', 'install', '--quiet', '--no-index', '--no-deps',
                    '--disable-pip-version-check', '--target', str(installed), wheel],
                   check=True, capture_output=True, timeout=120)
    env = nvml_env(fixture=PARTIAL)
    in_checkout = subprocess.run(EXPORTER + ['--once'], env=env, capture_output=True, text=True,
                                 timeout=60, check=False)
    assert in_checkout.returncode == 0, in_checkout.stderr
    env['PYTHONPATH'] = str(installed)
    probe = subprocess.run([sys.executable, '-c', 'import ansible_collections.homelab.llm_server'], env=env,
                           capture_output=True, text=True, timeout=60, check=False, cwd=str(tmp_path))
    assert probe.returncode != 0, 'the collection must not be importable here'
    on_host = subprocess.run(EXPORTER + ['--once'], env=env,
                             capture_output=True, text=True, timeout=60, check=False, cwd=str(tmp_path))
    assert on_host.returncode == 0, on_host.stderr

    def lines(text):
        return [line for line in text.splitlines() if 'scrape_duration' not in line]
    assert lines(on_host.stdout) == lines(in_checkout.stdout)
    assert 'llm_gpu_up{' in on_host.stdout
