# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_watchdog.py: the GPU watchdog's decisions, in process, with made-up times.

- XIDs: every row of the table and its copy in the runbook, the driver's
  recovery action before the table, 109 repeated within the window, 45 after
  another error, unknown XIDs.
- Heat: rising through each step (each action once), a jump past several
  steps, hysteresis and the cool-down restore, thresholds from the card, from
  the config and without either, power limits clamped to the card's range.
- Budgets: backoff doubling, the cap per hour, reboots per day across a JSON
  round trip, clocks that go backwards.
"""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils import _watchdog as wd
from llm_server_host import gpu_families as _gpu_families
from llm_server_host import nvml_supervisor as _nvml_supervisor

RUNBOOK = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'docs', 'runbooks', 'gpu-watchdog.md')

# --- XIDs ----------------------------------------------------------------------

# XID -> (action, severity): the runbook's XID table (docs/runbooks/gpu-watchdog.md).
EXPECTED = {
    13: (wd.RESTART_ENGINE_IF_UNHEALTHY, wd.WARNING),
    31: (wd.RESTART_ENGINE_IF_UNHEALTHY, wd.WARNING),
    43: (wd.RESTART_ENGINE_IF_UNHEALTHY, wd.WARNING),
    45: (wd.RESTART_ENGINE_IF_UNHEALTHY, wd.INFO),
    48: (wd.RESET_GPU, wd.CRITICAL),
    63: (wd.IGNORE, wd.INFO),
    64: (wd.RESET_GPU, wd.CRITICAL),
    79: (wd.REBOOT_HOST, wd.CRITICAL),
    94: (wd.RESTART_ENGINE, wd.WARNING),
    95: (wd.RESET_GPU, wd.CRITICAL),
    109: (wd.RESTART_ENGINE, wd.WARNING),
    119: (wd.RESET_GPU, wd.CRITICAL),
    120: (wd.RESET_GPU, wd.CRITICAL),
    154: (wd.IGNORE, wd.WARNING),
}


def test_table_covers_the_runbook_rows():
    assert set(wd.XID_TABLE) == set(EXPECTED)
    # The exporter pre-creates a counter for each of these XIDs.
    assert set(EXPECTED) <= set(_nvml_supervisor.PREINITIALISED_XIDS)


def runbook_xid_tables():
    """The rows of the runbook's 'The XID table' section: ({xid: cells}, {xid: cells} of the repeat table)."""
    with open(RUNBOOK, encoding='utf-8') as handle:
        text = handle.read()
    assert '\n## The XID table\n' in text, 'docs/runbooks/gpu-watchdog.md has no "## The XID table" section'
    section = text.split('\n## The XID table\n', 1)[1].split('\n## ', 1)[0]
    # The order above the table names every recovery action the driver may report.
    for name in wd.RECOVERY_ACTIONS.values():
        assert '`%s`' % name in section, 'the runbook does not say what the recovery action %s does' % name
    tables, header = {}, None
    for line in section.splitlines():
        if not line.startswith('|'):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip('|').split('|')]
        if header is None:
            header = cells[0]
            tables[header] = {}
        elif cells[0].isdigit():
            assert int(cells[0]) not in tables[header], 'XID %s twice in the runbook' % cells[0]
            tables[header][int(cells[0])] = cells
    return tables.get('XID', {}), tables.get('XID repeated', {})


def test_the_runbook_lists_every_row_of_the_table():
    rows, repeats = runbook_xid_tables()
    assert sorted(rows) == sorted(wd.XID_TABLE)
    for xid, rule in wd.XID_TABLE.items():
        _xid, name, action, severity, note, sources = rows[xid]
        assert (name, action, severity, note) == (rule.name, '`%s`' % rule.action, rule.severity, rule.note), xid
        assert sources.split('; ') == list(rule.sources), xid
    assert sorted(repeats) == sorted(wd.REPEAT_ESCALATION)
    for xid, (action, severity, why) in wd.REPEAT_ESCALATION.items():
        assert repeats[xid][1:] == ['`%s`' % action, severity, why], xid


@pytest.mark.parametrize('xid', sorted(EXPECTED))
def test_xid_from_the_table(xid):
    result = wd.xid_action(xid)
    assert (result.action, result.severity) == EXPECTED[xid]
    assert result.source == wd.SOURCE_TABLE
    assert result.xid == xid and result.recovery_action is None and not result.recheck
    rule = wd.XID_TABLE[xid]
    assert result.reason.startswith('XID %d, %s' % (xid, rule.name))
    for source in rule.sources:
        assert source in result.reason
    assert result.stops_engines == (result.action in (wd.RESET_GPU, wd.REBOOT_HOST))
    assert result.as_dict()['action'] == result.action


def test_table_rows_are_well_formed():
    for xid, rule in wd.XID_TABLE.items():
        assert rule.action in wd.ACTIONS, xid
        assert rule.severity in wd.SEVERITIES, xid
        assert rule.sources and rule.note and rule.name, xid


def test_xid_as_text_from_the_kernel_log():
    assert wd.xid_action('79').action == wd.REBOOT_HOST


@pytest.mark.parametrize('bad', ['Xid', None, -1, True, 4.5j])
def test_xid_must_be_a_number(bad):
    with pytest.raises(ValueError):
        wd.xid_action(bad)


def test_unknown_xid_is_logged_only():
    result = wd.xid_action(999)
    assert (result.action, result.severity, result.source) == (wd.IGNORE, wd.WARNING, wd.SOURCE_UNKNOWN)
    assert 'XID 999' in result.reason and 'log only' in result.reason


def test_recovery_action_codes_match_the_exporter():
    assert wd.RECOVERY_ACTIONS == _gpu_families.RECOVERY_ACTIONS


@pytest.mark.parametrize('recovery, action', [
    ('gpu_reset', wd.RESET_GPU),
    ('node_reboot', wd.REBOOT_HOST),
    ('drain_and_reset', wd.RESET_GPU),
    ('bus_reset', wd.RESET_GPU),
    ('system_reboot', wd.REBOOT_HOST),
])
@pytest.mark.parametrize('xid', [13, 63, 94, 999])
def test_recovery_action_comes_before_the_table(xid, recovery, action):
    code = {name: code for code, name in wd.RECOVERY_ACTIONS.items()}[recovery]
    for given in (recovery, code):
        result = wd.xid_action(xid, given)
        assert (result.action, result.source, result.recovery_action) == (action, wd.SOURCE_DRIVER, recovery)
        assert result.severity == wd.CRITICAL and result.stops_engines
        assert 'the driver asks' in result.reason


@pytest.mark.parametrize('xid, action', [
    (48, wd.RESTART_ENGINE),                    # table: reset; the driver: no recovery needed
    (79, wd.RESTART_ENGINE),
    (94, wd.RESTART_ENGINE),
    (13, wd.RESTART_ENGINE_IF_UNHEALTHY),
    (63, wd.IGNORE),
    (154, wd.IGNORE),
    (999, wd.IGNORE),
])
def test_recovery_action_none_caps_at_an_engine_restart(xid, action):
    result = wd.xid_action(xid, 0)
    assert (result.action, result.source, result.recovery_action) == (action, wd.SOURCE_DRIVER, 'none')
    assert result.severity == (wd.INFO if action == wd.IGNORE else wd.WARNING)
    assert not result.stops_engines


def test_drain_p2p_stops_the_engines_and_asks_to_read_again():
    result = wd.xid_action(154, 'drain_p2p')
    assert (result.action, result.recheck, result.source) == (wd.RESTART_ENGINE, True, wd.SOURCE_DRIVER)
    assert 'read the recovery action again' in result.reason


@pytest.mark.parametrize('recovery, name', [(5, 'recover_imex_domain'), (42, 'unknown_42')])
def test_recovery_action_not_for_this_box_falls_back_to_the_table(recovery, name):
    result = wd.xid_action(48, recovery)
    assert (result.action, result.source, result.recovery_action) == (wd.RESET_GPU, wd.SOURCE_TABLE, name)
    assert name in result.reason and 'the table decides' in result.reason
    unknown = wd.xid_action(999, recovery)
    assert (unknown.action, unknown.source) == (wd.IGNORE, wd.SOURCE_UNKNOWN)


@pytest.mark.parametrize('bad', ['reboot_now', 1.0, True, [1]])
def test_recovery_action_must_be_a_code_or_a_known_name(bad):
    with pytest.raises(ValueError):
        wd.xid_action(48, bad)


def test_154_follows_the_recovery_action():
    assert wd.xid_action(154, 'gpu_reset').action == wd.RESET_GPU
    assert wd.xid_action(154, 'node_reboot').action == wd.REBOOT_HOST
    assert wd.xid_action(154, 'none').action == wd.IGNORE
    alone = wd.xid_action(154)
    assert (alone.action, alone.severity) == (wd.IGNORE, wd.WARNING)


def test_109_repeated_resets_the_gpu():
    assert wd.xid_action(109, repeated=True).action == wd.RESET_GPU
    assert wd.xid_action(109, repeated=True).source == wd.SOURCE_REPEAT
    # Other XIDs have no repeat rule.
    assert wd.xid_action(13, repeated=True).action == wd.RESTART_ENGINE_IF_UNHEALTHY
    # The driver's verdict still comes first.
    assert wd.xid_action(109, 'none', repeated=True).action == wd.RESTART_ENGINE


def test_policy_109_escalates_within_the_hour_per_gpu():
    policy = wd.XidPolicy()
    first = policy.decide(1000.0, 0, 109)
    assert (first.action, first.source) == (wd.RESTART_ENGINE, wd.SOURCE_TABLE)
    other_gpu = policy.decide(1100.0, 1, 109)
    assert other_gpu.action == wd.RESTART_ENGINE
    again = policy.decide(1000.0 + 3599, 0, 109)
    assert (again.action, again.severity, again.source) == (wd.RESET_GPU, wd.CRITICAL, wd.SOURCE_REPEAT)
    assert 'second context switch timeout' in again.reason
    # An hour after the last one, a 109 is a first one again.
    assert policy.decide(1000.0 + 3599 + 3600, 0, 109).action == wd.RESTART_ENGINE


def test_policy_repeat_window_is_configurable():
    policy = wd.XidPolicy(repeat_window_s=60)
    policy.decide(0, 'GPU-a', 109)
    assert policy.decide(61, 'GPU-a', 109).action == wd.RESTART_ENGINE
    assert policy.decide(62, 'GPU-a', 109).action == wd.RESET_GPU


def test_policy_45_after_another_error_adds_nothing():
    policy = wd.XidPolicy()
    assert policy.decide(0, 0, 48).action == wd.RESET_GPU
    follows = policy.decide(1, 0, 45)
    assert (follows.action, follows.severity) == (wd.IGNORE, wd.INFO)
    assert 'after XID 48' in follows.reason
    # On the other GPU, or long after, a 45 stands alone.
    assert policy.decide(2, 1, 45).action == wd.RESTART_ENGINE_IF_UNHEALTHY
    assert policy.decide(1000, 0, 45).action == wd.RESTART_ENGINE_IF_UNHEALTHY


def test_policy_45_after_an_informational_xid_still_checks_the_engine():
    policy = wd.XidPolicy()
    assert policy.decide(0, 0, 63).action == wd.IGNORE
    assert policy.decide(1, 0, 45).action == wd.RESTART_ENGINE_IF_UNHEALTHY


def test_policy_clock_going_backwards_counts_as_a_repeat():
    policy = wd.XidPolicy()
    policy.decide(10000.0, 0, 109)
    assert policy.decide(5.0, 0, 109).action == wd.RESET_GPU


def test_policy_passes_the_recovery_action_through():
    policy = wd.XidPolicy()
    assert policy.decide(0, 0, 13, recovery_action=1).action == wd.RESET_GPU


# --- heat ------------------------------------------------------------------------

RTX = dict(slowdown_c=95, shutdown_c=98, power_limit_w=600.0, power_min_w=150.0, power_max_w=600.0,
           power_default_w=600.0, clock_max_mhz=3090)


def reading(temp, **overrides):
    return wd.HeatReading(**dict(RTX, temperature_c=temp, **overrides))


def kinds(actions):
    return [action.kind for action in actions]


def run(policy, steps, base=None):
    """[(now, temp)] -> {now: [kinds]} for the steps that acted."""
    base = RTX if base is None else base
    acted = {}
    for now, temp in steps:
        actions = policy.step(now, wd.HeatReading(**dict(base, temperature_c=temp)))
        for action in actions:
            assert action.kind in wd.HEAT_ACTIONS
            assert action.message.startswith('GPU 0 at ')
        if actions:
            acted[now] = kinds(actions)
    return acted


def test_thresholds_from_the_card():
    limits = wd.heat_thresholds(wd.HeatConfig(), 95, 98)
    # stop: the lower of slowdown - 1 (94) and shutdown - 5 (93).
    assert limits[:4] == (87, 91, 93, 82)
    assert limits.basis == 'slowdown 95 C, shutdown 98 C'
    h100 = wd.heat_thresholds(None, 89, 92)
    assert h100[:3] == (81, 85, 87)
    roomy = wd.heat_thresholds({}, 95, 110)
    assert roomy.stop_c == 94


def test_thresholds_missing_fall_back_to_fixed_defaults():
    none = wd.heat_thresholds(None, None, None)
    assert none[:3] == (wd.FALLBACK_SLOWDOWN_C - 8, wd.FALLBACK_SLOWDOWN_C - 4, wd.FALLBACK_SLOWDOWN_C - 1)
    assert none[:3] == (79, 83, 86)
    assert 'no slowdown temperature reported' in none.basis and 'no shutdown' in none.basis
    no_shutdown = wd.heat_thresholds(None, 95, None)
    assert no_shutdown[:3] == (87, 91, 94)
    only_shutdown = wd.heat_thresholds(None, None, 88)
    assert only_shutdown[:3] == (79, 83, 83)


def test_thresholds_overridden_and_kept_in_order():
    config = wd.HeatConfig(warn_c=80, clocks_c=85, stop_c=90, hysteresis_c=2)
    assert wd.heat_thresholds(config, 95, 98)[:4] == (80, 85, 90, 78)
    # A low stop set alone pulls the earlier steps down with it.
    assert wd.heat_thresholds(wd.HeatConfig(stop_c=85), 95, 98)[:3] == (85, 85, 85)
    assert wd.heat_thresholds({'warn_below_slowdown_c': 10}, 95, 98).warn_c == 85


@pytest.mark.parametrize('bad', [
    dict(warn_c=90, clocks_c=85),
    dict(clocks_c=95, stop_c=90),
    dict(power_fraction=0),
    dict(power_fraction=1.5),
    dict(clock_fraction=-0.1),
    dict(hysteresis_c=-1),
    dict(cool_for_s=float('nan')),
    dict(power_limit_w=0),
    dict(stop_after_s='30'),
    dict(warm_c=80),
])
def test_heat_config_rejects_bad_settings(bad):
    with pytest.raises(ValueError):
        wd.HeatConfig.from_dict(bad)


def test_rising_through_each_step_acts_once_per_step():
    policy = wd.HeatPolicy(gpu=0)
    acted = run(policy, [(0, 70), (10, 86), (20, 87), (21, 88), (22, 90), (30, 91), (31, 92), (40, 93),
                         (69, 93.5), (70, 94), (71, 95), (200, 96), (300, 88)])
    assert acted == {20: ['lower_power_limit'], 30: ['lock_clocks'], 70: ['stop_engines']}
    assert policy.level == wd.ENGINES_STOPPED and policy.level_name == 'engines_stopped'


def test_step_messages_and_values():
    policy = wd.HeatPolicy(gpu=0)
    lower, = policy.step(0, reading(87))
    assert (lower.kind, lower.value, lower.previous) == ('lower_power_limit', 480.0, 600.0)
    assert lower.level_name == 'power_lowered'
    assert lower.message == ('GPU 0 at 87 C (power step at 87 C; slowdown 95 C, shutdown 98 C): power limit '
                             'lowered from 600 W to 480 W (80 % of the default 600 W)')
    lock, = policy.step(1, reading(91))
    assert (lock.kind, lock.value) == ('lock_clocks', 2163.0)
    assert '70 % of the maximum 3090 MHz' in lock.message
    assert policy.step(2, reading(93)) == []
    stop, = policy.step(32, reading(93))
    assert stop.kind == 'stop_engines' and 'for 30 s' in stop.message and 'stopping the engines' in stop.message
    assert stop.as_dict()['kind'] == 'stop_engines'


def test_a_jump_takes_every_step_passed_in_order():
    policy = wd.HeatPolicy(gpu=0)
    assert kinds(policy.step(0, reading(96))) == ['lower_power_limit', 'lock_clocks']
    assert policy.step(29, reading(96)) == []
    assert kinds(policy.step(30, reading(96))) == ['stop_engines']


def test_stop_without_delay():
    policy = wd.HeatPolicy({'stop_after_s': 0}, gpu=0)
    assert kinds(policy.step(0, reading(93))) == ['lower_power_limit', 'lock_clocks', 'stop_engines']


def test_stop_timer_starts_again_below_the_stop_threshold():
    policy = wd.HeatPolicy(gpu=0)
    acted = run(policy, [(0, 93), (20, 93), (25, 92), (30, 93), (59, 93), (60, 93)])
    assert acted == {0: ['lower_power_limit', 'lock_clocks'], 60: ['stop_engines']}


def test_hysteresis_and_cool_down_restore():
    policy = wd.HeatPolicy(gpu=0)
    steps = [
        (0, 88),      # power lowered
        (10, 86),     # below the warn threshold but not below 82: no cooling yet
        (20, 82),     # 82 is not below 82
        (30, 81),     # cooling starts
        (300, 80),    # 270 s
        (329, 75),    # 299 s
        (330, 83),    # warm again: the cooling starts over
        (340, 81),
        (639, 81),    # 299 s
        (640, 81),    # 300 s: restored
        (650, 81),    # nothing more
        (700, 87),    # a new episode acts again
    ]
    acted = run(policy, steps)
    assert acted == {0: ['lower_power_limit'], 640: ['restore_power_limit'], 700: ['lower_power_limit']}


def test_restore_undoes_what_was_done_in_order():
    policy = wd.HeatPolicy(gpu=0)
    run(policy, [(0, 96), (30, 96)])
    actions = policy.step(40, reading(60))
    assert actions == []
    actions = policy.step(340, reading(60))
    assert kinds(actions) == ['unlock_clocks', 'restore_power_limit', 'start_engines']
    restore = actions[1]
    assert (restore.value, restore.level) == (600.0, wd.NORMAL)
    assert 'below 82 C for 300 s' in restore.message and 'back to 600 W' in restore.message
    assert policy.level == wd.NORMAL and policy.restore_power_limit_w is None


def test_clocks_locked_then_restored_without_an_engine_start():
    policy = wd.HeatPolicy(gpu=0)
    run(policy, [(0, 91), (10, 70)])
    assert kinds(policy.step(310, reading(70))) == ['unlock_clocks', 'restore_power_limit']


def test_missing_temperature_does_nothing_and_cooling_must_start_over():
    policy = wd.HeatPolicy(gpu=0)
    run(policy, [(0, 88), (10, 70)])
    assert policy.step(200, reading(None)) == []
    assert policy.step(310, reading(70)) == []
    assert kinds(policy.step(610, reading(70))) == ['restore_power_limit']


def test_power_limit_clamped_to_the_cards_minimum():
    policy = wd.HeatPolicy({'power_fraction': 0.2}, gpu=0)
    lower, = policy.step(0, reading(88))
    assert lower.value == 150.0
    assert "the card's minimum 150 W; 20 % of the default 600 W would be below it" in lower.message


def test_power_limit_clamped_to_the_cards_maximum_and_never_raised():
    policy = wd.HeatPolicy({'power_limit_w': 700}, gpu=0)
    lower, = policy.step(0, reading(88, power_limit_w=550.0))
    # 700 W clamped to 600 W, still above the 550 W in force: the limit stays.
    assert (lower.value, lower.previous) == (550.0, 550.0)
    assert 'stays at 550 W' in lower.message and "the card's maximum 600 W" in lower.message


def test_a_lower_limit_set_by_hand_stays_and_is_restored():
    policy = wd.HeatPolicy(gpu=0)
    lower, = policy.step(0, reading(88, power_limit_w=400.0))
    assert (lower.value, lower.previous) == (400.0, 400.0)
    run(policy, [(10, 70)])
    restore, = policy.step(310, reading(70, power_limit_w=400.0))
    assert restore.value == 400.0


def test_configured_power_limit_and_clock():
    policy = wd.HeatPolicy({'power_limit_w': 350, 'clock_mhz': 1800}, gpu=0)
    lower, lock = policy.step(0, reading(92))
    assert (lower.value, lock.value) == (350.0, 1800.0)
    assert 'the configured 350 W' in lower.message and 'the configured clock' in lock.message


def test_power_from_the_limit_in_force_when_no_default():
    policy = wd.HeatPolicy(gpu=0)
    lower, = policy.step(0, reading(88, power_default_w=None, power_min_w=None, power_max_w=None,
                                    power_limit_w=500.0))
    assert lower.value == 400.0 and 'of the limit in force 500 W' in lower.message


def test_unknown_power_and_clock_say_so():
    policy = wd.HeatPolicy(gpu=0)
    unknown = dict(power_limit_w=None, power_default_w=None, power_min_w=None, power_max_w=None, clock_max_mhz=None)
    lower, lock = policy.step(0, reading(92, **unknown))
    assert lower.value is None and 'NVML reports no power limit' in lower.message
    # Nothing to lock at: the message says the step is skipped, not that something was locked.
    assert lock.value is None and 'clock step skipped, graphics clocks not locked' in lock.message
    assert 'no maximum graphics clock' in lock.message and 'lowest' not in lock.message
    assert policy.level == wd.CLOCKS_LOCKED  # the stop step still follows
    run(policy, [(10, 70)], base=dict(RTX, **unknown))
    unlock, restore = policy.step(310, reading(70, **unknown))
    assert unlock.kind == 'unlock_clocks'
    assert restore.value is None and 'left as it is' in restore.message


def test_thresholds_remembered_when_a_read_fails():
    policy = wd.HeatPolicy(gpu=0)
    policy.step(0, reading(60, slowdown_c=89, shutdown_c=92))
    # The thresholds are not read this time: the card's earlier answer holds (warn 81).
    lower, = policy.step(1, reading(82, slowdown_c=None, shutdown_c=None))
    assert 'power step at 81 C' in lower.message


def test_missing_thresholds_use_the_fallback():
    policy = wd.HeatPolicy(gpu=0)
    assert policy.step(0, reading(78, slowdown_c=None, shutdown_c=None)) == []
    lower, = policy.step(1, reading(79, slowdown_c=None, shutdown_c=None))
    assert 'no slowdown temperature reported, 87 C assumed' in lower.message


def test_heat_clock_going_backwards_restarts_the_timers():
    policy = wd.HeatPolicy(gpu=0)
    run(policy, [(1000, 93)])
    # Set back by 900 s: the stop timer starts again at 100.
    assert policy.step(100, reading(93)) == []
    assert policy.step(129, reading(93)) == []
    assert kinds(policy.step(130, reading(93))) == ['stop_engines']


def test_heat_state_survives_a_daemon_restart():
    policy = wd.HeatPolicy(gpu=0)
    policy.step(0, reading(92))
    saved = json.loads(json.dumps(policy.state()))
    assert saved == {'version': 1, 'level': wd.CLOCKS_LOCKED, 'restore_power_limit_w': 600.0}
    again = wd.HeatPolicy(gpu=0, state=saved)
    # The limit now in force is the lowered one; the restore goes back to the original.
    lowered = dict(power_limit_w=480.0)
    assert again.step(100, reading(92, **lowered)) == []
    again.step(110, reading(70, **lowered))
    actions = again.step(410, reading(70, **lowered))
    assert kinds(actions) == ['unlock_clocks', 'restore_power_limit']
    assert (actions[1].value, actions[1].previous) == (600.0, 480.0)


@pytest.mark.parametrize('bad', [{'version': 2}, {'level': 7}, {'level': True}, {'restore_power_limit_w': 'x'}, [1]])
def test_heat_state_rejects_what_it_cannot_read(bad):
    with pytest.raises(ValueError):
        wd.HeatPolicy(state=bad)


def test_reading_from_gpu_facts():
    facts = {'temperature_c': 71, 'temperature_slowdown_c': 95, 'temperature_shutdown_c': None,
             'power_limit_w': 600.0, 'power_limit_default_w': 600.0, 'power_limit_min_w': 150.0,
             'power_limit_max_w': 600.0, 'clocks': {'graphics_max_mhz': 3090}}
    assert wd.HeatReading.from_facts(facts) == wd.HeatReading(71, 95, None, 600.0, 150.0, 600.0, 600.0, 3090)
    assert wd.HeatReading.from_facts({}) == wd.HeatReading(None)


def test_step_takes_a_dict_reading():
    policy = wd.HeatPolicy()
    lower, = policy.step(0, dict(RTX, temperature_c=90))
    assert lower.message.startswith('GPU at 90 C')


# --- budgets ---------------------------------------------------------------------

def test_restart_backoff_doubles_up_to_the_maximum():
    budget = wd.RestartBudget(per_hour=10, backoff_initial_s=10, backoff_max_s=40)
    assert budget.allowed(0)
    budget.record(0)
    assert not budget.allowed(9.9) and budget.next_allowed_at(5) == 10
    assert 'backing off 10 s after restart 1 in a row; next in 5 s' in budget.explain(5)
    waits = []
    now = 0.0
    for dummy in range(5):
        nxt = budget.next_allowed_at(now)
        waits.append(nxt - now)
        now = nxt
        assert budget.allowed(now)
        budget.record(now)
    assert waits == [10, 20, 40, 40, 40]


def test_restart_backoff_run_ends_after_a_quiet_period():
    budget = wd.RestartBudget(per_hour=10, backoff_initial_s=10, backoff_max_s=640, reset_after_s=600)
    for now in (0, 10, 30, 70):
        budget.record(now)
    assert budget.backoff_s(100) == 80
    assert budget.next_allowed_at(100) == 150
    assert budget.next_allowed_at(669) == 669
    # 600 s after the last restart, a new run starts with no wait.
    assert budget.backoff_s(670) == 0 and budget.allowed(670)
    budget.record(670)
    assert budget.next_allowed_at(671) == 680


def test_restart_cap_per_rolling_hour():
    budget = wd.RestartBudget(per_hour=3, backoff_initial_s=0, backoff_max_s=0)
    for now in (0, 100, 200):
        assert budget.allowed(now)
        budget.record(now)
    assert not budget.allowed(300)
    assert budget.next_allowed_at(300) == 3600
    assert 'no restart: 3 restarts in the last 60 min already, the cap; next in 55 min' == budget.explain(300)
    assert not budget.allowed(3599.9)
    assert budget.allowed(3600)
    budget.record(3600)
    assert budget.next_allowed_at(3601) == 3700


def test_restart_cap_and_backoff_together():
    budget = wd.RestartBudget(per_hour=2, backoff_initial_s=30, backoff_max_s=600)
    budget.record(0)
    assert budget.next_allowed_at(1) == 30
    budget.record(30)
    # Backoff would allow 90, the cap says 3600.
    assert budget.next_allowed_at(31) == 3600
    assert 'the cap' in budget.explain(31)


def test_restarts_disabled():
    budget = wd.RestartBudget(per_hour=0)
    assert not budget.allowed(0) and budget.next_allowed_at(0) is None
    assert budget.explain(0) == 'restarts are disabled (per_hour 0)'


def test_restart_allowed_message():
    assert wd.RestartBudget(per_hour=3).explain(0) == 'restart allowed (0 of 3 in the last 60 min)'


def test_restart_clock_going_backwards_never_opens_the_budget():
    budget = wd.RestartBudget(per_hour=2, backoff_initial_s=30, backoff_max_s=600)
    budget.record(10000)
    budget.record(10030)
    # Set back by a day: both restarts count as just now, and the cap holds for an hour from now.
    now = 10040 - 86400
    assert not budget.allowed(now)
    assert budget.next_allowed_at(now) == now + 3600


@pytest.mark.parametrize('kwargs', [
    dict(per_hour=-1), dict(per_hour=1.5), dict(per_hour=True), dict(backoff_initial_s=-1),
    dict(backoff_initial_s=60, backoff_max_s=30), dict(window_s=0), dict(reset_after_s=float('inf')),
])
def test_restart_budget_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        wd.RestartBudget(**kwargs)


def test_now_must_be_a_number():
    with pytest.raises(ValueError):
        wd.RestartBudget().allowed(None)
    with pytest.raises(ValueError):
        wd.HeatPolicy().step(float('nan'), reading(50))


DAY = 86400.0
T0 = 1764057600.0  # 2025-11-25 08:00 UTC


def round_trip(budget, per_day):
    return wd.RebootBudget(per_day, state=json.loads(json.dumps(budget.state())))


def test_reboot_cap_per_day_survives_a_json_round_trip():
    budget = wd.RebootBudget(per_day=1)
    assert budget.allowed(T0)
    budget.record(T0, reason='XID 79 on GPU 0')
    after_reboot = round_trip(budget, 1)
    assert after_reboot.state() == {'version': 1, 'reboots': [{'at': T0, 'reason': 'XID 79 on GPU 0'}]}
    assert not after_reboot.allowed(T0 + 300)
    assert after_reboot.next_allowed_at(T0 + 300) == T0 + DAY
    assert after_reboot.explain(T0 + 300) == 'no reboot: 1 in the last 24.0 h already, the cap; next in 23.9 h'
    assert after_reboot.allowed(T0 + DAY)
    # Reboots older than the window are dropped from the state.
    assert round_trip(after_reboot, 1).state()['reboots'] == []


def test_reboot_cap_of_two():
    budget = wd.RebootBudget(per_day=2)
    budget.record(T0)
    budget = round_trip(budget, 2)
    assert budget.allowed(T0 + 600)
    budget.record(T0 + 600)
    budget = round_trip(budget, 2)
    assert not budget.allowed(T0 + 700) and budget.count(T0 + 700) == 2
    assert budget.next_allowed_at(T0 + 700) == T0 + DAY
    assert budget.allowed(T0 + DAY) and budget.explain(T0 + DAY) == 'reboot allowed (1 of 2 in the last 24.0 h)'


def test_reboots_disabled():
    budget = wd.RebootBudget(per_day=0)
    assert not budget.allowed(T0) and budget.next_allowed_at(T0) is None
    assert budget.explain(T0) == 'reboots are disabled (per_day 0)'


def test_reboot_clock_going_backwards_counts_from_now_and_expires():
    budget = wd.RebootBudget(per_day=1)
    budget.record(T0)
    # After the reboot the clock reads a year earlier (RTC lost, no NTP yet).
    early = T0 - 365 * DAY
    budget = round_trip(budget, 1)
    assert not budget.allowed(early)
    # The daemon saves the state after allowed(): the reboot now counts from then...
    budget = round_trip(budget, 1)
    assert budget.state()['reboots'][0]['at'] == early
    assert not budget.allowed(early + DAY - 1)
    # ...and expires a day later, rather than a year.
    assert budget.allowed(early + DAY)


@pytest.mark.parametrize('state', [
    {'version': 2, 'reboots': []},
    {'reboots': {}},
    {'reboots': [{'when': T0}]},
    {'reboots': [{'at': 'yesterday'}]},
    {'reboots': [{'at': T0, 'reason': 5}]},
    ['not', 'a', 'dict'],
])
def test_reboot_state_rejects_what_it_cannot_read(state):
    with pytest.raises(ValueError):
        wd.RebootBudget(1, state=state)


@pytest.mark.parametrize('state', [None, {}, {'version': 1, 'reboots': []}])
def test_reboot_state_empty(state):
    assert wd.RebootBudget(1, state=state).allowed(T0)


def test_reboot_state_sorted_on_load():
    state = {'reboots': [{'at': T0 + 100}, {'at': T0}]}
    budget = wd.RebootBudget(2, state=state)
    assert [entry['at'] for entry in budget.state()['reboots']] == [T0, T0 + 100]
    assert budget.next_allowed_at(T0 + 200) == T0 + DAY
