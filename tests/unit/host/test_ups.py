# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-ups (host/llm_server_host/ups.py) against stand-ins of systemctl, upsc and the health checker.

The stand-ins are small programs in a temporary directory, named in the
program's settings as the real ones are on the host:
- systemctl keeps each unit's LoadState and ActiveState in units.json,
  answers `show` as systemd does (one block per unit), and `stop`/`start`
  change the state and are logged to systemctl.log;
- upsc prints ups.txt (`variable: value` lines), or fails with its first line
  when that starts with "Error:";
- the health checker (llm-health.py wait --json) prints health.json.
The metrics files are checked with `promtool check metrics` where promtool is
at hand (LLM_SERVER_PROMTOOL, else build/promtool/promtool).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from llm_server_host import ups as llm_ups
from llm_server_host.collection import _registry

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
# The program as the host runs it: the package's module, from host/.
LLM_UPS = [sys.executable, '-m', 'llm_server_host.ups']
PROMTOOL = os.environ.get('LLM_SERVER_PROMTOOL') or os.path.join(REPO_ROOT, 'build', 'promtool', 'promtool')
needs_promtool = pytest.mark.skipif(not os.access(PROMTOOL, os.X_OK),
                                    reason='no promtool at %s: run `make promtool`' % PROMTOOL)


SYSTEMCTL = r'''
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
path = os.path.join(here, 'units.json')
units = json.load(open(path))
args = sys.argv[1:]
with open(os.path.join(here, 'systemctl.log'), 'a') as log:
    log.write(' '.join(args) + '\n')
names = args[args.index('--') + 1:] if '--' in args else [a for a in args[1:] if not a.startswith('-')]
if args[0] == 'show':
    blocks = []
    for name in names:
        unit = units.get(name, {'LoadState': 'not-found', 'ActiveState': 'inactive'})
        blocks.append('LoadState=%s\nActiveState=%s' % (unit['LoadState'], unit['ActiveState']))
    print('\n\n'.join(blocks))
elif args[0] in ('stop', 'start'):
    # As each engine unit's condition (llm-server may-start) does: a held unit is not started.
    import glob
    held = set()
    for hold_file in glob.glob(os.path.join(here, '..', 'holds', '*.json')):
        held |= set(json.load(open(hold_file))['engines'])
    for name in names:
        units.setdefault(name, {'LoadState': 'loaded', 'ActiveState': 'inactive'})
        if args[0] == 'stop' or name not in held:
            units[name]['ActiveState'] = 'active' if args[0] == 'start' else 'inactive'
    json.dump(units, open(path, 'w'))
'''

UPSC = r'''
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
text = open(os.path.join(here, 'ups.txt')).read()
if text.startswith('Error:'):
    sys.stderr.write(text.splitlines()[0] + '\n')
    sys.exit(1)
sys.stdout.write(text)
'''

HEALTH = r'''
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, 'health.log'), 'a') as log:
    log.write(' '.join(sys.argv[1:]) + '\n')
print(open(os.path.join(here, 'health.json')).read().strip())
'''

ON_LINE = 'battery.charge: 100\nbattery.runtime: 1800\nups.load: 35\nups.status: OL\ndriver.name: dummy-ups\n'


class Host:
    """A temporary host: the stand-ins, the serving registry, the settings."""

    def __init__(self, root):
        self.root = root
        self.bin = root / 'bin'
        self.bin.mkdir()
        for name, text in (('systemctl', SYSTEMCTL), ('upsc', UPSC), ('llm-health.py', HEALTH)):
            path = self.bin / name
            path.write_text('#!%s\n%s' % (sys.executable, text))
            path.chmod(0o755)
        for sub in ('instances', 'health', 'metrics', 'state', 'request', 'health-state', 'holds'):
            (root / sub).mkdir()
        self.units({})
        self.ups(ON_LINE)
        self.health(True)
        self.config = {
            'ups': 'ups@localhost',
            'upsc': str(self.bin / 'upsc'),
            'systemctl': str(self.bin / 'systemctl'),
            'health_program': str(self.bin / 'llm-health.py'),
            'instances_dir': str(root / 'instances'),
            'health_config_dir': str(root / 'health'),
            'request_file': str(root / 'request' / 'request'),
            'state_dir': str(root / 'state'),
            'hold_dir': str(root / 'holds'),
            'metrics_dir': str(root / 'metrics'),
            'resume_charge_percent': 30,
            'resume_timeout_s': 30,
            'no_data_timeout_s': 5,
            'start_timeout_s': 60,
            'health_lock_timeout_s': 5,
            'poll_s': 0.05,
        }
        self.write_config()

    def write_config(self, **changes):
        self.config.update(changes)
        path = self.root / 'ups.json'
        path.write_text(json.dumps(self.config))
        return llm_ups.load_config(str(path))

    def units(self, units):
        (self.bin / 'units.json').write_text(json.dumps(units))

    def unit_states(self):
        return {name: unit['ActiveState'] for name, unit in json.loads((self.bin / 'units.json').read_text()).items()}

    def ups(self, text):
        (self.bin / 'ups.txt').write_text(text)

    def health(self, healthy, reason='ok: /health answered 200'):
        (self.bin / 'health.json').write_text(json.dumps({'healthy': healthy, 'reason': reason}))

    def engine(self, name, state='active', port=8101):
        (self.root / 'instances' / (name + '.json')).write_text(json.dumps(_registry.entry(name, 'llamacpp', port, 'tiny')))
        (self.root / 'health' / (name + '.json')).write_text(json.dumps({
            'name': name, 'url': 'http://127.0.0.1:%d' % port, 'model': 'tiny', 'unit': name + '.service',
            'deadline_s': 20, 'state_dir': str(self.root / 'health-state')}))
        units = json.loads((self.bin / 'units.json').read_text())
        units[name + '.service'] = {'LoadState': 'loaded', 'ActiveState': state}
        self.units(units)

    def systemctl_log(self):
        path = self.bin / 'systemctl.log'
        return [line for line in path.read_text().splitlines() if not line.startswith('show')] \
            if path.exists() else []

    def metrics(self, name='llm_ups_engines.prom'):
        values = {}
        for line in (self.root / 'metrics' / name).read_text().splitlines():
            if line and not line.startswith('#'):
                key, value = line.rsplit(' ', 1)
                values[key] = float(value)
        return values


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


def ask(host, action, event='test'):
    llm_ups.write_request(host.config['request_file'], action, event)


# ------------------------------------------------------------------ settings and requests


def test_settings_reject_unknown_keys_and_normalize_units(host):
    config = host.write_config(engine_units=['vllm-a', 'llamacpp-b.service'])
    assert config['engine_units'] == ['vllm-a.service', 'llamacpp-b.service']
    assert config['poll_s'] == 0.05
    host.config['typo'] = 1
    with pytest.raises(llm_ups.ConfigError, match='unknown keys typo'):
        host.write_config()
    del host.config['typo']
    with pytest.raises(llm_ups.ConfigError, match='not a service unit name'):
        host.write_config(engine_units=['bad name'])


def test_upssched_events_ask_for_a_stop_or_a_start_and_low_battery_only_logs(host):
    config = host.write_config()
    lines = []
    assert llm_ups.sched(config, 'engines-off', lines.append) == 0
    request, why = llm_ups.read_request(config['request_file'])
    assert why is None and request.action == 'stop' and request.event == 'engines-off'
    assert oct(os.stat(config['request_file']).st_mode & 0o777) == '0o644'
    assert llm_ups.sched(config, 'power-back', lines.append) == 0
    second, _why = llm_ups.read_request(config['request_file'])
    assert second.action == 'start' and second.stamp != request.stamp
    assert llm_ups.sched(config, 'low-battery', lines.append) == 0
    assert llm_ups.read_request(config['request_file'])[0] == second
    assert llm_ups.sched(config, 'ONBATT', lines.append) == 2
    assert 'nothing done' in lines[-1]
    # No temporary file is left beside the request.
    assert os.listdir(os.path.dirname(config['request_file'])) == ['request']


@pytest.mark.parametrize('content', ['reboot 1 x\n', 'stop\n', 'stop 12 engines-off\nstart 13 x\n', 'x' * 300])
def test_a_request_of_another_form_is_ignored(host, content):
    path = host.config['request_file']
    with open(path, 'w') as handle:
        handle.write(content)
    request, why = llm_ups.read_request(path)
    assert request is None and 'ignored' in why


def test_a_request_that_is_a_link_is_not_followed(host, tmp_path):
    target = tmp_path / 'elsewhere'
    target.write_text('stop 1 engines-off\n')
    os.symlink(str(target), host.config['request_file'])
    request, why = llm_ups.read_request(host.config['request_file'])
    assert request is None and 'cannot read' in why


# ------------------------------------------------------------------ stop and start


def test_stop_stops_only_running_engines_and_power_back_starts_only_those(host):
    host.engine('llamacpp-a', 'active', 8101)
    host.engine('llamacpp-b', 'active', 8102)
    # Stopped by its owner before the outage: the UPS must leave it so.
    host.engine('vllm-c', 'inactive', 8103)
    config = host.write_config()
    lines = []

    ask(host, 'stop', 'engines-off')
    assert llm_ups.apply(config, lines.append) == 0
    assert host.systemctl_log() == ['stop -- llamacpp-a.service llamacpp-b.service']
    assert host.unit_states() == {'llamacpp-a.service': 'inactive', 'llamacpp-b.service': 'inactive',
                                  'vllm-c.service': 'inactive'}
    state = llm_ups.load_state(config)
    assert state['stopped'] == ['llamacpp-a.service', 'llamacpp-b.service']
    metrics = host.metrics()
    assert metrics['llm_ups_engines_stopped'] == 2
    assert metrics['llm_ups_engine_stopped{serving_instance="llamacpp-a",unit="llamacpp-a.service"}'] == 1
    assert metrics['llm_ups_actions_total{action="stop"}'] == 1
    assert metrics['llm_ups_requests_total{request="stop"}'] == 1

    # The same request again (the path unit fired twice): nothing more.
    assert llm_ups.apply(config, lines.append) == 0
    assert len(host.systemctl_log()) == 1

    ask(host, 'start', 'power-back')
    assert llm_ups.apply(config, lines.append) == 0
    assert host.systemctl_log()[-1] == 'start -- llamacpp-a.service llamacpp-b.service'
    assert host.unit_states()['vllm-c.service'] == 'inactive'
    health_calls = (host.bin / 'health.log').read_text().splitlines()
    assert sorted(call.split()[2] for call in health_calls) == ['http://127.0.0.1:8101', 'http://127.0.0.1:8102']
    assert all('--timeout 60 --deadline 20 --json' in call for call in health_calls)
    metrics = host.metrics()
    assert metrics['llm_ups_engines_stopped'] == 0
    assert metrics['llm_ups_actions_total{action="start"}'] == 1
    assert metrics['llm_ups_last_start_healthy'] == 1
    assert not any(key.startswith('llm_ups_engine_stopped{') for key in metrics)
    assert any('healthy after' in line for line in lines)


def watchdog_holds(host, *units):
    """The GPU watchdog's file in the hold directory, as it writes it (this boot)."""
    _holds = llm_ups._holds
    _holds.write(host.config['hold_dir'], 'watchdog',
                 {unit: [{'gpu': 0, 'reason': 'heat', 'since': time.time()}] for unit in units})


def test_the_ups_holds_what_it_stops_and_what_another_holds_and_starts_only_what_nobody_holds(host):
    """The engine the watchdog stopped for heat is held by the UPS too on battery;
    at power-back it stays stopped while the watchdog holds it, and the UPS lets go."""
    _holds = llm_ups._holds
    host.engine('llamacpp-a', 'active', 8101)
    host.engine('llamacpp-b', 'inactive', 8102)
    watchdog_holds(host, 'llamacpp-b.service')
    config = host.write_config()
    lines = []

    ask(host, 'stop', 'engines-off')
    assert llm_ups.apply(config, lines.append) == 0
    assert host.systemctl_log() == ['stop -- llamacpp-a.service']
    assert sorted(_holds.own(config['hold_dir'], 'ups')) == ['llamacpp-a.service', 'llamacpp-b.service']
    assert any('llamacpp-b.service held already (the GPU watchdog (heat))' in line for line in lines)

    ask(host, 'start', 'power-back')
    assert llm_ups.apply(config, lines.append) == 0
    assert host.systemctl_log()[-1] == 'start -- llamacpp-a.service'
    # The UPS let go before it started it (each unit's condition reads the holds as it starts).
    assert host.unit_states() == {'llamacpp-a.service': 'active', 'llamacpp-b.service': 'inactive'}
    assert any('llamacpp-b.service stays stopped: released by the UPS, still held by the GPU watchdog (heat)'
               in line for line in lines)
    assert _holds.own(config['hold_dir'], 'ups') == {}
    assert not (host.root / 'holds' / 'ups.json').exists()


def test_power_back_starts_an_engine_whose_other_holder_let_go_on_battery(host):
    _holds = llm_ups._holds
    host.engine('llamacpp-b', 'inactive', 8102)
    watchdog_holds(host, 'llamacpp-b.service')
    config = host.write_config()
    ask(host, 'stop', 'engines-off')
    assert llm_ups.apply(config, [].append) == 0
    assert host.systemctl_log() == []
    # The GPU cooled on battery: the watchdog let go (and left it stopped, the UPS holding it).
    _holds.write(config['hold_dir'], 'watchdog', {})
    ask(host, 'start', 'power-back')
    assert llm_ups.apply(config, [].append) == 0
    assert host.systemctl_log() == ['start -- llamacpp-b.service']
    assert host.unit_states()['llamacpp-b.service'] == 'active'


def test_a_hold_from_another_boot_does_not_count(host):
    _holds = llm_ups._holds
    host.engine('llamacpp-b', 'inactive', 8102)
    _holds.write(host.config['hold_dir'], 'watchdog',
                 {'llamacpp-b.service': [{'reason': 'heat', 'since': 1.0}]}, current_boot='an-earlier-boot')
    config = host.write_config()
    ask(host, 'stop', 'engines-off')
    lines = []
    assert llm_ups.apply(config, lines.append) == 0
    assert 'stop: no engine runs (llamacpp-b.service)' in lines
    assert _holds.own(config['hold_dir'], 'ups') == {}


def test_a_blip_power_back_starts_nothing(host):
    host.engine('llamacpp-a', 'active')
    config = host.write_config()
    ask(host, 'start', 'power-back')
    lines = []
    assert llm_ups.apply(config, lines.append) == 0
    assert host.systemctl_log() == []
    assert 'nothing to start' in ' '.join(lines)
    metrics = host.metrics()
    assert metrics['llm_ups_requests_total{request="start"}'] == 1
    assert metrics['llm_ups_actions_total{action="start"}'] == 0


def test_engine_units_named_in_the_settings_replace_the_registry(host):
    host.engine('llamacpp-a', 'active')
    host.units({'llamacpp-a.service': {'LoadState': 'loaded', 'ActiveState': 'active'},
                'custom.service': {'LoadState': 'loaded', 'ActiveState': 'active'}})
    config = host.write_config(engine_units=['custom'])
    ask(host, 'stop')
    llm_ups.apply(config, lambda line: None)
    assert host.systemctl_log() == ['stop -- custom.service']


def test_an_engine_that_fails_its_check_after_power_back_fails_the_run(host):
    host.engine('llamacpp-a', 'active')
    config = host.write_config()
    ask(host, 'stop')
    llm_ups.apply(config, lambda line: None)
    host.health(False, 'GET /health: connection refused')
    ask(host, 'start')
    lines = []
    assert llm_ups.apply(config, lines.append) == 1
    assert host.metrics()['llm_ups_last_start_healthy'] == 0
    assert 'NOT healthy' in ' '.join(lines) and 'connection refused' in ' '.join(lines)
    # Started all the same: systemd and the health checker own it now.
    assert llm_ups.load_state(config)['stopped'] == []


def test_a_stop_waits_for_a_health_check_under_way(host):
    """A check holding its lock could restart the engine just stopped: the stop waits for it."""
    host.engine('llamacpp-a', 'active')
    config = host.write_config()
    lock_path = str(host.root / 'health-state' / '.llamacpp-a.lock')
    released = []

    def hold():
        with llm_ups.flocked(lock_path):
            time.sleep(0.6)
            released.append(time.monotonic())

    holder = threading.Thread(target=hold)
    holder.start()
    time.sleep(0.1)
    ask(host, 'stop')
    llm_ups.apply(config, lambda line: None)
    stopped_at = time.monotonic()
    holder.join()
    assert released and released[0] <= stopped_at
    assert host.systemctl_log() == ['stop -- llamacpp-a.service']


def test_a_check_that_never_ends_delays_the_stop_only_so_long(host):
    host.engine('llamacpp-a', 'active')
    config = host.write_config(health_lock_timeout_s=0.3)
    lock_path = str(host.root / 'health-state' / '.llamacpp-a.lock')
    with llm_ups.flocked(lock_path):
        # flock locks belong to the open file: a second open in this process waits like another process.
        ask(host, 'stop')
        lines = []
        started = time.monotonic()
        llm_ups.apply(config, lines.append)
        assert time.monotonic() - started < 3
    assert 'stopping it anyway' in ' '.join(lines)
    assert host.unit_states()['llamacpp-a.service'] == 'inactive'


def test_power_back_waits_for_the_charge_and_a_new_outage_cuts_it_short(host):
    host.engine('llamacpp-a', 'active')
    config = host.write_config(resume_charge_percent=40)
    ask(host, 'stop')
    llm_ups.apply(config, lambda line: None)
    host.ups('battery.charge: 12\nups.status: OL CHRG\n')
    ask(host, 'start', 'power-back')
    lines = []
    worker = threading.Thread(target=lambda: llm_ups.apply(config, lines.append))
    worker.start()
    deadline = time.monotonic() + 5
    while 'waiting for 40%' not in ' '.join(lines) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert host.metrics()['llm_ups_waiting_for_power'] == 1
    # The power goes again before the battery charged: the start is dropped, the stop handled.
    host.ups('battery.charge: 12\nups.status: OB DISCHRG\n')
    ask(host, 'stop', 'engines-off')
    worker.join(10)
    assert not worker.is_alive()
    assert all(not line.startswith('start') for line in host.systemctl_log())
    assert llm_ups.load_state(config)['stopped'] == ['llamacpp-a.service']
    assert host.metrics()['llm_ups_waiting_for_power'] == 0
    assert 'a newer request came' in ' '.join(lines)


# ------------------------------------------------------------------ the power gate


def gate(host, config, values_seq):
    """wait_for_power on a fake clock: values_seq is what upsc says at each poll."""
    now = [0.0]
    seq = list(values_seq)

    def read_ups(_config):
        item = seq.pop(0) if len(seq) > 1 else seq[0]
        return (None, item) if isinstance(item, str) else (item, None)

    original = llm_ups.read_ups
    llm_ups.read_ups = read_ups
    lines = []
    try:
        verdict = llm_ups.wait_for_power(config, lines.append, clock=lambda: now[0],
                                         sleep=lambda s: now.__setitem__(0, now[0] + 10))
    finally:
        llm_ups.read_ups = original
    return verdict, now[0], lines


def test_gate_passes_at_once_on_line_and_charged(host):
    config = host.write_config()
    assert gate(host, config, [{'ups.status': 'OL', 'battery.charge': '100'}])[:2] == ('ready', 0)


def test_gate_waits_for_the_charge_then_for_at_most_the_timeout(host):
    config = host.write_config(resume_charge_percent=30, resume_timeout_s=60)
    verdict, waited, lines = gate(host, config, [{'ups.status': 'OL CHRG', 'battery.charge': '10'}] * 3
                                  + [{'ups.status': 'OL CHRG', 'battery.charge': '31'}])
    assert (verdict, waited) == ('ready', 30)
    assert lines[0] == 'the UPS is on line with the battery at 10%: waiting for 30%'
    verdict, waited, lines = gate(host, config, [{'ups.status': 'OL', 'battery.charge': '10'}])
    assert (verdict, waited) == ('timeout', 60)
    assert 'start anyway' in lines[-1]


def test_gate_uses_the_ups_restart_charge_when_higher(host):
    config = host.write_config(resume_charge_percent=30)
    values = {'ups.status': 'OL', 'battery.charge': '40', 'battery.charge.restart': '50'}
    verdict, _waited, lines = gate(host, config, [values] * 2 + [dict(values, **{'battery.charge': '50'})])
    assert verdict == 'ready' and 'waiting for 50%' in lines[0]


def test_gate_waits_on_battery_beyond_the_timeout(host):
    config = host.write_config(resume_timeout_s=60)
    verdict, waited, _lines = gate(host, config, [{'ups.status': 'OB DISCHRG', 'battery.charge': '90'}] * 20
                                   + [{'ups.status': 'OL', 'battery.charge': '90'}])
    assert (verdict, waited) == ('ready', 200)


def test_gate_without_a_ups_lets_the_engines_start(host):
    config = host.write_config(no_data_timeout_s=30)
    verdict, waited, lines = gate(host, config, ['Error: Driver not connected'])
    assert (verdict, waited) == ('no-data', 30)
    assert 'Driver not connected' in lines[0]
    verdict, _waited, lines = gate(host, config, [{'ups.status': 'OL'}])
    assert verdict == 'ready' and 'no battery.charge' in lines[0]


def test_gate_subcommand_runs_against_upsc(host):
    host.write_config()
    proc = subprocess.run(LLM_UPS + ['--config', str(host.root / 'ups.json'), 'gate'],
                          capture_output=True, text=True, timeout=30, check=False,
                          env=dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, 'host')))
    assert proc.returncode == 0, proc.stderr
    # What the gate did is for the journal (standard error); nothing is an answer on standard output.
    assert proc.stderr.startswith('llm-ups: the UPS is on line with the battery at 100%') and proc.stdout == ''


def test_owner_commands_answer_on_stdout_and_errors_go_to_stderr(host):
    host.write_config()
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, 'host'))

    def llm_ups(*args, config=str(host.root / 'ups.json')):
        return subprocess.run(LLM_UPS + ['--config', config, *args], capture_output=True, text=True, timeout=30,
                              check=False, env=env)

    proc = llm_ups('request', 'stop')
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, 'asked to stop the LLM engines\n', '')
    proc = llm_ups('status')
    assert proc.returncode == 0 and 'UPS ups@localhost: OL, battery 100%' in proc.stdout and proc.stderr == ''
    proc = llm_ups('status', config=str(host.root / 'missing.json'))
    assert proc.returncode == 2 and proc.stdout == ''
    assert proc.stderr.startswith('llm-ups: ') and 'missing.json' in proc.stderr

# ------------------------------------------------------------------ metrics


def test_collect_writes_the_ups_figures_and_keeps_the_last_answer_time(host):
    config = host.write_config(metrics_interval_s=15)
    host.ups('battery.charge: 87\nbattery.runtime: 1260\nups.load: 42\nups.status: OB DISCHRG ALARM\n'
             'input.voltage: 0.0\ndevice.mfr: Eaton\ndevice.model: 5E 1100i\ndriver.name: usbhid-ups\n')
    assert llm_ups.collect(config, lambda line: None, now=1000.0) == 0
    metrics = host.metrics('llm_ups.prom')
    assert metrics['llm_ups_up{ups="ups"}'] == 1
    assert metrics['llm_ups_status{ups="ups",flag="OB"}'] == 1
    assert metrics['llm_ups_status{ups="ups",flag="OL"}'] == 0
    assert metrics['llm_ups_status{ups="ups",flag="ALARM"}'] == 1
    assert metrics['llm_ups_battery_charge_ratio{ups="ups"}'] == pytest.approx(0.87)
    assert metrics['llm_ups_battery_runtime_seconds{ups="ups"}'] == 1260
    assert metrics['llm_ups_load_ratio{ups="ups"}'] == pytest.approx(0.42)
    assert metrics['llm_ups_data_timestamp_seconds{ups="ups"}'] == 1000
    assert metrics['llm_ups_metrics_interval_seconds{ups="ups"}'] == 15
    assert metrics['llm_ups_info{ups="ups",mfr="Eaton",model="5E 1100i",driver="usbhid-ups"}'] == 1
    assert host.metrics()['llm_ups_engines_stopped'] == 0

    host.ups('Error: Data stale\n')
    lines = []
    llm_ups.collect(config, lines.append, now=1015.0)
    metrics = host.metrics('llm_ups.prom')
    assert metrics['llm_ups_up{ups="ups"}'] == 0
    assert metrics['llm_ups_data_timestamp_seconds{ups="ups"}'] == 1000
    assert metrics['llm_ups_metrics_timestamp_seconds{ups="ups"}'] == 1015
    assert not any(key.startswith('llm_ups_status') for key in metrics)
    assert 'Data stale' in lines[0]


def test_collect_starts_apply_for_a_request_it_missed(host):
    config = host.write_config()
    host.units({'llm-ups-engines.service': {'LoadState': 'loaded', 'ActiveState': 'inactive'}})
    ask(host, 'stop')
    lines = []
    llm_ups.collect(config, lines.append)
    assert host.systemctl_log() == ['start --no-block llm-ups-engines.service']
    llm_ups.apply(config, lambda line: None)
    llm_ups.collect(config, lines.append)
    assert len(host.systemctl_log()) == 1


@needs_promtool
def test_metrics_files_pass_promtool(host):
    host.engine('llamacpp-a', 'active')
    config = host.write_config()
    ask(host, 'stop')
    llm_ups.apply(config, lambda line: None)
    llm_ups.collect(config, lambda line: None)
    for name in ('llm_ups.prom', 'llm_ups_engines.prom'):
        text = (host.root / 'metrics' / name).read_text()
        proc = subprocess.run([PROMTOOL, 'check', 'metrics'], input=text, capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, name + ': ' + proc.stdout + proc.stderr


def test_status_tells_what_the_ups_stopped(host):
    host.engine('llamacpp-a', 'active')
    config = host.write_config()
    ask(host, 'stop')
    llm_ups.apply(config, lambda line: None)
    lines = []
    llm_ups.status(config, lines.append)
    text = '\n'.join(lines)
    assert 'UPS ups@localhost: OL, battery 100%' in text
    assert 'stopped by the UPS: llamacpp-a.service' in text
    assert 'last request: stop (test)' in text
