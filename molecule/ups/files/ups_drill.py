# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ups scenario's drills, run on the test host (as root) by verify.yml.

  ups_drill.py STEP --engines U1,U2 [options]
      STEP: ready, boot-gate, blip, outage, power-back, low-battery, restore

Each drill drives ups.status (or battery.charge) of the simulated UPS
(dummy-ups) with upsrw, polls (systemctl, upsc, the files of the ups role)
and times what happens on the monotonic clock; it prints one JSON object with
the figures and exits 0, or prints {"error": ...} and exits 1. NUT's clients
print the driver's answer and may exit 0 whatever it was (upscmd, nut#3383):
upsrw's answer is read (upsrw_answer: -w gives the driver's SUCCESS or its
refusal; a bare OK only says upsd passed it on), and each change is confirmed
by reading the value back with upsc before it counts (value_taken).
"""

import argparse
import json
import os
import subprocess
import sys
import time

UPS = 'ups@localhost'
BOOT_GATE = 'llm-ups-boot-gate.service'


class DrillError(Exception):
    pass


def run(argv, timeout=60):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def upsrw_answer(rc, output):
    """upsrw's answer to a SET: SUCCESS (-w, the driver set it) or OK (upsd passed it on; the outcome
    unknown until read back). Raises DrillError for anything else: upsd's own refusal (upsrw exits 1,
    "Unexpected response from upsd: ERR ACCESS-DENIED") or the driver's, which upsrw -w prints and
    exits 0 for ("ERR INVALID-ARGUMENT", "ERR UNKNOWN", ...)."""
    # The last line: upsrw may say "Init SSL without certificate database" first.
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    answer = lines[-1] if lines else ''
    if rc != 0 or answer not in ('SUCCESS', 'OK'):
        raise DrillError('upsrw was refused: rc %s, %r' % (rc, output))
    return answer


def value_taken(variable, wanted, served):
    """Whether upsd serves the value set: for ups.status the flags asked for (upsd adds FSD of its own
    once upsmon asked for the shutdown) and no OB unless asked; for any other variable the value."""
    if served is None:
        return False
    if variable != 'ups.status':
        return served == wanted
    flags, asked = set(served.split()), set(wanted.split())
    return asked <= flags and ('OB' in asked or 'OB' not in flags)


class Drill:
    def __init__(self, args):
        self.args = args
        self.engines = [unit if unit.endswith('.service') else unit + '.service'
                        for unit in args.engines.split(',') if unit]
        with open(args.admin_password_file, encoding='utf-8') as handle:
            self.password = handle.read().strip()

    # --- the UPS -------------------------------------------------------------------------------------

    def upsc(self, variable):
        # stdout only: upsc may add "Init SSL without certificate database" on stderr.
        proc = subprocess.run(['upsc', UPS, variable], capture_output=True, text=True, timeout=15, check=False)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def set_var(self, variable, value, timeout=10.0):
        """Sets a variable of the simulated UPS; returns the monotonic time just before it was set
        (upsd then serves it)."""
        asked = time.monotonic()
        # -w: upsd tracks the driver's answer; upsrw prints it and may exit 0 either way.
        rc, out = run(['upsrw', '-w', '-s', '%s=%s' % (variable, value), '-u', 'admin', '-p', self.password, UPS])
        answer = upsrw_answer(rc, out)
        deadline = time.monotonic() + timeout
        while True:
            served = self.upsc(variable)
            if value_taken(variable, value, served):
                return asked
            if time.monotonic() > deadline:
                raise DrillError('upsrw answered %s to %s=%s, but upsd still serves %r %g s later: the value '
                                 'did not take' % (answer, variable, value, served, timeout))
            time.sleep(0.05)

    def set_status(self, value):
        return self.set_var('ups.status', value)

    # --- the engines -----------------------------------------------------------------------------------

    def units(self):
        rc, out = run(['systemctl', 'show', '--property=ActiveState,InvocationID', '--'] + self.engines)
        if rc != 0:
            raise DrillError('systemctl show: %s' % out)
        states = {}
        for unit, block in zip(self.engines, out.split('\n\n')):
            props = dict(line.split('=', 1) for line in block.splitlines() if '=' in line)
            states[unit] = props
        return states

    def systemctl(self, *argv):
        rc, out = run(['systemctl'] + list(argv), 120)
        if rc != 0:
            raise DrillError('systemctl %s: %s' % (' '.join(argv), out))

    def unit_state(self, unit):
        return run(['systemctl', 'show', '--property=ActiveState', '--value', unit])[1]

    def wait_units(self, active_state, timeout, step=0.1):
        """Polls until every engine is in active_state; returns the monotonic time."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.units()
            if all(props.get('ActiveState') == active_state for props in states.values()):
                return time.monotonic()
            if time.monotonic() > deadline:
                raise DrillError('engines not %s after %d s: %s' % (active_state, timeout, states))
            time.sleep(step)

    def healthy(self, unit):
        with open('/etc/llm-server/health/%s.json' % unit[:-len('.service')], encoding='utf-8') as handle:
            settings = json.load(handle)
        rc, out = run(['/opt/llm-server/venv/bin/llm-health', 'check', '--url', settings['url'],
                       '--model', settings['model']], 60)
        return rc == 0, out

    def wait_healthy(self, timeout):
        deadline = time.monotonic() + timeout
        pending = list(self.engines)
        while pending:
            pending = [unit for unit in pending if not self.healthy(unit)[0]]
            if not pending:
                break
            if time.monotonic() > deadline:
                raise DrillError('not healthy after %d s: %s' % (timeout, {u: self.healthy(u)[1] for u in pending}))
            time.sleep(0.2)
        return time.monotonic()

    # --- the ups role's files ----------------------------------------------------------------------

    def request(self):
        try:
            with open(self.args.request_file, encoding='ascii') as handle:
                action, stamp, event = handle.read().split()
            return action, int(stamp), event
        except (OSError, ValueError):
            return None

    def metrics(self):
        values = {}
        try:
            with open(self.args.metrics_file, encoding='utf-8') as handle:
                for line in handle:
                    if line.strip() and not line.startswith('#'):
                        key, value = line.rsplit(' ', 1)
                        values[key] = float(value)
        except OSError:
            pass
        return values

    def wait_metric(self, key, value, timeout):
        deadline = time.monotonic() + timeout
        while self.metrics().get(key) != value:
            if time.monotonic() > deadline:
                raise DrillError('%s is %s, not %s, after %d s' % (key, self.metrics().get(key), value, timeout))
            time.sleep(0.1)
        return time.monotonic()

    def stopped_by_ups(self):
        try:
            with open(self.args.state_file, encoding='utf-8') as handle:
                return json.load(handle)['stopped']
        except (OSError, ValueError, KeyError):
            return None

    # --- the drills ------------------------------------------------------------------------------------

    def ready(self):
        """The starting point: on line, upsmon logged in, engines active and healthy."""
        self.set_status('OL')
        deadline = time.monotonic() + 30
        while '127.0.0.1' not in run(['upsc', '-c', UPS])[1]:
            if time.monotonic() > deadline:
                raise DrillError('upsmon is not logged in to upsd (upsc -c %s)' % UPS)
            time.sleep(0.2)
        self.wait_units('active', 60)
        self.wait_healthy(60)
        return {'engines': self.engines, 'ups_status': self.upsc('ups.status')}

    def boot_gate(self):
        """At boot on a nearly empty battery. The engines' drop-ins (Wants= and After= the boot gate)
        hold them: with the engines and the gate stopped and the charge below the gate's threshold,
        starting the engines as boot does pulls the gate in, and their start jobs wait while it polls;
        once the charge is back they start within one poll and pass their health check."""
        with open(self.args.ups_config, encoding='utf-8') as handle:
            settings = json.load(handle)
        poll_s = float(settings.get('poll_s', 2))  # llm-ups's default
        restart = self.upsc('battery.charge.restart')
        need = max(float(settings['resume_charge_percent']), float(restart or 0))
        full = self.upsc('battery.charge')
        if full is None or float(full) < need:
            raise DrillError('battery.charge is %r before the drill, not at least %g' % (full, need))
        low = '%g' % max(0.0, need - 5)
        self.wait_units('active', 60)
        self.systemctl('stop', *self.engines)
        # As after a boot, the gate has to run again before the engines may start.
        self.systemctl('stop', BOOT_GATE)
        self.set_var('battery.charge', low)
        try:
            began = time.monotonic()
            self.systemctl('start', '--no-block', *self.engines)
            # Two of the gate's polls and a second: the engines wait, the gate runs.
            held_until = began + 2 * poll_s + 1
            while time.monotonic() < held_until:
                states = self.units()
                if any(props.get('ActiveState') != 'inactive' for props in states.values()):
                    raise DrillError('an engine started %.1f s into the boot with the battery at %s%% (the gate '
                                     'waits for %g%%): %s' % (time.monotonic() - began, low, need, states))
                time.sleep(0.2)
            gate = self.unit_state(BOOT_GATE)
            if gate != 'activating':
                raise DrillError('%s is %r, not activating (waiting), with the battery at %s%%: the engines '
                                 'did not pull it in' % (BOOT_GATE, gate, low))
        finally:
            raised = self.set_var('battery.charge', full)
        active = self.wait_units('active', poll_s + 30)
        healthy = self.wait_healthy(self.args.start_timeout_s)
        limits = {'active': poll_s + 5, 'healthy': poll_s + 15}
        for what, when in (('active', active), ('healthy', healthy)):
            if when - raised > limits[what]:
                raise DrillError('the engines were %s %.1f s after the charge came back, later than the gate\'s '
                                 'poll + margin (%g s)' % (what, when - raised, limits[what]))
        return {'charge_low': low, 'need': need, 'held_s': round(held_until - began, 1), 'poll_s': poll_s,
                'active_after_s': round(active - raised, 2), 'healthy_after_s': round(healthy - raised, 2),
                'limits_s': limits, 'gate': self.unit_state(BOOT_GATE)}

    def blip(self):
        before = self.units()
        stops_before = self.metrics().get('llm_ups_actions_total{action="stop"}', 0)
        began_ns = time.time_ns()
        on_battery = began = self.set_status('OB')
        # The blip itself: the one fixed wait of these drills.
        time.sleep(max(0.0, on_battery + self.args.blip_s - time.monotonic()))
        on_line = self.set_status('OL')
        if on_line - on_battery >= self.args.timer_s:
            raise DrillError('the blip lasted %.1f s, not less than the timer (%g s): upsrw too slow?'
                             % (on_line - on_battery, self.args.timer_s))
        # upsmon saw it: ONLINE after ONBATT made upssched ask for a start (power-back).
        deadline = on_line + 15
        while True:
            request = self.request()
            if request and request[0] == 'start' and request[1] > began_ns:
                seen = time.monotonic()
                break
            if time.monotonic() > deadline:
                raise DrillError('upsmon did not see the %.1f s blip: no power-back request within 15 s (%s)'
                                 % (on_line - on_battery, request))
            time.sleep(0.05)
        # And nothing stops, past the moment the timer would have fired.
        until = began + self.args.timer_s + 5
        while time.monotonic() < until:
            now = self.units()
            changed = {u: now[u] for u in self.engines
                       if now[u].get('ActiveState') != 'active' or now[u].get('InvocationID') != before[u].get('InvocationID')}
            if changed:
                raise DrillError('an engine stopped or restarted %.1f s after a %.1f s blip: %s'
                                 % (time.monotonic() - began, on_line - on_battery, changed))
            time.sleep(0.2)
        stops = self.metrics().get('llm_ups_actions_total{action="stop"}', 0)
        if stops != stops_before:
            raise DrillError('llm_ups_actions_total{action="stop"} went from %s to %s' % (stops_before, stops))
        return {'blip_s': round(on_line - on_battery, 2), 'power_back_seen_after_s': round(seen - on_line, 2),
                'watched_s': round(time.monotonic() - began, 1), 'timer_s': self.args.timer_s}

    def outage(self):
        began = time.monotonic()
        self.set_status('OB')
        stopped = self.wait_units('inactive', self.args.timer_s + 30)
        limit = self.args.timer_s + 10
        if stopped - began > limit:
            raise DrillError('the engines stopped %.1f s after the power went, later than the timer + 10 s (%d s)'
                             % (stopped - began, limit))
        recorded = self.stopped_by_ups()
        if sorted(recorded or []) != sorted(self.engines):
            raise DrillError('the ups role recorded %s as stopped, not %s' % (recorded, self.engines))
        self.wait_metric('llm_ups_engines_stopped', len(self.engines), 10)
        # A deliberate stop: two health ticks later they are still down.
        hold_until = time.monotonic() + 2 * self.args.health_interval_s + 1
        while time.monotonic() < hold_until:
            states = self.units()
            if any(props.get('ActiveState') != 'inactive' for props in states.values()):
                raise DrillError('an engine came back while the power was out: %s' % states)
            time.sleep(0.2)
        return {'stopped_after_s': round(stopped - began, 2), 'limit_s': limit,
                'held_s': round(2 * self.args.health_interval_s + 1, 1)}

    def power_back(self):
        began = time.monotonic()
        self.set_status('OL')
        active = self.wait_units('active', 60)
        healthy = self.wait_healthy(self.args.start_timeout_s)
        reported = self.wait_metric('llm_ups_last_start_healthy', 1, self.args.start_timeout_s)
        self.wait_metric('llm_ups_engines_stopped', 0, 10)
        if self.stopped_by_ups() != []:
            raise DrillError('still recorded as stopped by the UPS: %s' % self.stopped_by_ups())
        return {'active_after_s': round(active - began, 2), 'healthy_after_s': round(healthy - began, 2),
                'reported_healthy_after_s': round(reported - began, 2)}

    def low_battery(self):
        record, flag = self.args.shutdown_record, self.args.powerdown_flag
        for path in (record, flag):
            if os.path.exists(path):
                raise DrillError('%s exists before the drill' % path)
        began = time.monotonic()
        self.set_status('OB LB')
        deadline = began + 60
        while not os.path.exists(record):
            if time.monotonic() > deadline:
                raise DrillError('no shutdown command within 60 s of OB LB (%s)' % record)
            time.sleep(0.05)
        called = time.monotonic()
        # upsmon writes the flag before it runs the command.
        if not os.path.exists(flag):
            raise DrillError('the shutdown command ran without the power-down flag %s' % flag)
        with open(record, encoding='utf-8') as handle:
            calls = handle.read().splitlines()
        return {'shutdown_command_after_s': round(called - began, 2), 'calls': calls, 'powerdown_flag': flag,
                'ups_status': self.upsc('ups.status')}

    def restore(self):
        """Back on line. upsd latched FSD, and a value set by upsrw is read-only once upsd
        restarts: the driver reads its .dev file again (OL), upsd forgets FSD. upsmon exited
        after the shutdown command: started again."""
        for path in (self.args.shutdown_record, self.args.powerdown_flag):
            if os.path.exists(path):
                os.unlink(path)
        for argv in (['systemctl', 'restart', 'nut-driver@ups.service'], ['systemctl', 'restart', 'nut-server'],
                     ['systemctl', 'start', 'nut-monitor']):
            rc, out = run(argv)
            if rc != 0:
                raise DrillError('%s: %s' % (' '.join(argv), out))
        deadline = time.monotonic() + 30
        while self.upsc('ups.status') != 'OL':
            if time.monotonic() > deadline:
                raise DrillError('ups.status is %r 30 s after the driver restarted' % self.upsc('ups.status'))
            time.sleep(0.2)
        # The on-battery timer stopped the engines during the drill, and upsmon does not report
        # the first OL after its start: ask for the start by hand, as the runbook says.
        rc, out = run(['/usr/local/sbin/llm-ups', 'request', 'start'])
        if rc != 0:
            raise DrillError('llm-ups request start: %s' % out)
        self.wait_units('active', 60)
        self.wait_healthy(self.args.start_timeout_s)
        return {'ups_status': self.upsc('ups.status')}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('step', choices=['ready', 'boot-gate', 'blip', 'outage', 'power-back', 'low-battery',
                                         'restore'])
    parser.add_argument('--engines', required=True)
    parser.add_argument('--timer-s', type=float, default=5)
    parser.add_argument('--blip-s', type=float, default=1.5)
    parser.add_argument('--health-interval-s', type=float, default=5)
    parser.add_argument('--start-timeout-s', type=float, default=60)
    parser.add_argument('--admin-password-file', default='/etc/nut/llm-server/admin.password')
    parser.add_argument('--request-file', default='/run/llm-server/ups-request/request')
    parser.add_argument('--state-file', default='/run/llm-server/ups/state.json')
    parser.add_argument('--metrics-file', default='/var/lib/prometheus/node-exporter/llm_ups_engines.prom')
    parser.add_argument('--shutdown-record', default='/var/lib/llm-test/shutdown-requests')
    parser.add_argument('--powerdown-flag', default='/run/nut/killpower')
    parser.add_argument('--ups-config', default='/etc/llm-server/ups.json')
    args = parser.parse_args()
    drill = Drill(args)
    try:
        result = getattr(drill, args.step.replace('-', '_'))()
    except (DrillError, OSError, subprocess.TimeoutExpired) as exc:
        print(json.dumps({'step': args.step, 'error': str(exc)}))
        return 1
    result['step'] = args.step
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == '__main__':
    sys.exit(main())
