# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every alert rule of the collection, checked and unit-tested with promtool.

- Rule files are found as roles/*/files/prometheus/*.rules.yml (each next to
  the role that emits its series); each must pass `promtool check rules`.
- Unit tests are tests/prometheus/*.test.yml; each must pass `promtool test
  rules`, and every rule file must be loaded by at least one of them.
- Every alert rule (an alert name and its severity) must have a test case in
  which it fires (an `exp_alerts` entry with its severity) and one in which
  it is expected not to (a case for its alert name that lists no alert of
  that severity, `exp_alerts: []` or only the other severity of a pair): a
  rule without both fails here.
- Conventions the rules share: a severity of critical or warning, a summary
  and a description; an alert name used twice is a warning/critical pair; no
  retired vLLM series and no counter without `_total`.
- Alertmanager's inhibition (roles/monitoring/files/alertmanager/
  inhibit_rules.yml) is simulated on the alerts the unit tests expect: a
  warning is silenced exactly when the critical of its pair fires for the
  same thing, and every pair shows it at least once. `amtool check-config`
  checks the file where amtool is at hand.

promtool comes from Debian's prometheus package, extracted by `make promtool`
(LLM_SERVER_PROMTOOL, else build/promtool/promtool); amtool from Debian's
prometheus-alertmanager package (LLM_SERVER_AMTOOL, else
build/amtool/amtool). Tests that need them are skipped where they are missing.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess

import pytest
import yaml

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
RULE_FILES = sorted(glob.glob(os.path.join(REPO_ROOT, 'roles', '*', 'files', 'prometheus', '*.rules.yml')))
TEST_FILES = sorted(glob.glob(os.path.join(REPO_ROOT, 'tests', 'prometheus', '*.test.yml')))
INHIBIT_RULES = os.path.join(REPO_ROOT, 'roles', 'monitoring', 'files', 'alertmanager', 'inhibit_rules.yml')
PROMTOOL = os.environ.get('LLM_SERVER_PROMTOOL') or os.path.join(REPO_ROOT, 'build', 'promtool', 'promtool')
AMTOOL = os.environ.get('LLM_SERVER_AMTOOL') or os.path.join(REPO_ROOT, 'build', 'amtool', 'amtool')
needs_promtool = pytest.mark.skipif(not os.access(PROMTOOL, os.X_OK),
                                    reason='no promtool at %s: run `make promtool`' % PROMTOOL)
needs_amtool = pytest.mark.skipif(not os.access(AMTOOL, os.X_OK),
                                  reason='no amtool at %s (Debian prometheus-alertmanager)' % AMTOOL)

SEVERITIES = ('critical', 'warning')
# Labels that may differ between the warning and the critical of one pair
# by design: XID 79 (critical) silences XID 94 (warning) on the same GPU.
PAIR_DETAIL_LABELS = frozenset(('severity', 'xid'))
# Series that no longer exist (vLLM #29330 removed vllm:gpu_cache_usage_perc and hid
# time_per_output_token_seconds; llama-server's tools/server/README.md no
# longer lists kv_cache_usage_ratio), and counters whose
# exposed name ends in _total: a rule using the bare name matches nothing.
RETIRED = (
    (re.compile(r'vllm:gpu_cache_usage_perc'), 'removed: use vllm:kv_cache_usage_perc'),
    (re.compile(r'time_per_output_token_seconds'), 'hidden: use vllm:inter_token_latency_seconds'),
    (re.compile(r'llamacpp:kv_cache_usage_ratio'), 'no longer documented by llama-server'),
    (re.compile(r'(vllm:(prompt_tokens|generation_tokens|request_success|num_preemptions|prefix_cache_queries'
                r'|prefix_cache_hits)|llamacpp:(prompt_tokens|tokens_predicted|n_decode))(?!_total)\b'),
     'a counter: its series is named with _total'),
)


def relative(path):
    return os.path.relpath(path, REPO_ROOT)


def load_yaml(path):
    with open(path, encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def alert_rules():
    """[(rule file, rule dict)] for every alerting rule of every rule file."""
    found = []
    for path in RULE_FILES:
        for group in load_yaml(path).get('groups') or ():
            for rule in group.get('rules') or ():
                if 'alert' in rule:
                    found.append((path, rule))
    return found


def severity_of(rule):
    return (rule.get('labels') or {}).get('severity')


ALERTS = sorted({(rule['alert'], severity_of(rule)) for _path, rule in alert_rules()}, key=str)


def unit_test_cases():
    """[(test file, group index, alert_rule_test entry)] of every unit test file."""
    found = []
    for path in TEST_FILES:
        for index, group in enumerate(load_yaml(path).get('tests') or ()):
            for case in group.get('alert_rule_test') or ():
                found.append((path, index, case))
    return found


def expected_alerts(case):
    """The alerts a case expects, each as its full label set (alertname included)."""
    return [dict((alert.get('exp_labels') or {}), alertname=case['alertname']) for alert in case.get('exp_alerts') or ()]


# ------------------------------------------------------------------ files


def test_rule_and_test_files_are_found():
    assert RULE_FILES, 'no roles/*/files/prometheus/*.rules.yml'
    assert TEST_FILES, 'no tests/prometheus/*.test.yml'
    assert ALERTS


def test_every_rule_file_is_loaded_by_a_unit_test():
    loaded = set()
    for path in TEST_FILES:
        for name in load_yaml(path).get('rule_files') or ():
            rule_file = os.path.normpath(os.path.join(os.path.dirname(path), name))
            assert os.path.isfile(rule_file), '%s loads %s, which does not exist' % (relative(path), name)
            loaded.add(rule_file)
    untested = [relative(path) for path in RULE_FILES if os.path.normpath(path) not in loaded]
    assert not untested, 'rule files no tests/prometheus/*.test.yml loads: %s' % ', '.join(untested)


@needs_promtool
@pytest.mark.parametrize('path', RULE_FILES, ids=relative)
def test_promtool_check_rules(path):
    proc = subprocess.run([PROMTOOL, 'check', 'rules', path], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
@pytest.mark.parametrize('path', TEST_FILES, ids=relative)
def test_promtool_test_rules(path):
    proc = subprocess.run([PROMTOOL, 'test', 'rules', path], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------ coverage


@pytest.mark.parametrize('alertname,severity', ALERTS, ids=['%s-%s' % alert for alert in ALERTS])
def test_alert_has_a_firing_and_a_quiet_test(alertname, severity):
    cases = [case for _path, _index, case in unit_test_cases() if case.get('alertname') == alertname]
    fires = [case for case in cases
             if any(labels.get('severity') == severity for labels in expected_alerts(case))]
    quiet = [case for case in cases
             if not any(labels.get('severity') == severity for labels in expected_alerts(case))]
    assert fires, '%s (%s) never fires in tests/prometheus/*.test.yml: add a case where it does' % (
        alertname, severity)
    assert quiet, '%s (%s) is never expected quiet in tests/prometheus/*.test.yml: add a case where it is not' % (
        alertname, severity)


def test_every_tested_alert_exists():
    names = {name for name, _severity in ALERTS}
    unknown = sorted({case['alertname'] for _path, _index, case in unit_test_cases()} - names)
    assert not unknown, 'unit tests name alerts no rule file defines: %s' % ', '.join(unknown)


# ------------------------------------------------------------------ conventions


def test_alert_rules_follow_the_conventions():
    problems = []
    by_name = {}
    for path, rule in alert_rules():
        where = '%s: %s' % (relative(path), rule['alert'])
        by_name.setdefault(rule['alert'], []).append(severity_of(rule))
        if severity_of(rule) not in SEVERITIES:
            problems.append('%s: severity %r, not one of %s' % (where, severity_of(rule), ', '.join(SEVERITIES)))
        annotations = rule.get('annotations') or {}
        for key in ('summary', 'description'):
            if not str(annotations.get(key) or '').strip():
                problems.append('%s: no %s annotation' % (where, key))
    for name, severities in sorted(by_name.items()):
        if len(severities) > 1 and sorted(severities) != sorted(SEVERITIES):
            problems.append('%s: defined %d times with severities %s; an alert name is one rule or a '
                            'warning/critical pair' % (name, len(severities), severities))
    assert not problems, '\n'.join(problems)


def test_no_retired_series_or_counter_without_total():
    problems = []
    for path, rule in alert_rules():
        for pattern, why in RETIRED:
            for match in pattern.finditer(rule['expr']):
                problems.append('%s: %s uses %s (%s)' % (relative(path), rule['alert'], match.group(0), why))
    assert not problems, '\n'.join(problems)


# ------------------------------------------------------------------ inhibition

MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*$')


def parse_matcher(text):
    match = MATCHER.match(text)
    assert match, 'not a matcher this test understands: %r' % text
    name, op, value = match.group(1), match.group(2), match.group(3).replace('\\"', '"').replace('\\\\', '\\')
    return name, op, value


def matches(matcher, labels):
    name, op, value = matcher
    actual = labels.get(name, '')
    if op == '=':
        return actual == value
    if op == '!=':
        return actual != value
    found = re.fullmatch(value, actual) is not None
    return found if op == '=~' else not found


def inhibit_rules():
    data = load_yaml(INHIBIT_RULES)
    assert set(data) == {'inhibit_rules'}, 'the file holds only alertmanager.yml\'s inhibit_rules'
    rules = []
    for rule in data['inhibit_rules']:
        assert set(rule) <= {'source_matchers', 'target_matchers', 'equal'}, rule
        rules.append(([parse_matcher(m) for m in rule['source_matchers']],
                      [parse_matcher(m) for m in rule['target_matchers']],
                      list(rule.get('equal') or ())))
    return rules


def inhibited(target, firing, rules):
    """Whether Alertmanager would silence target, given the alerts firing beside it."""
    for source_matchers, target_matchers, equal in rules:
        if not all(matches(m, target) for m in target_matchers):
            continue
        for source in firing:
            if source is target:
                continue
            if all(matches(m, source) for m in source_matchers) and \
                    all(source.get(name, '') == target.get(name, '') for name in equal):
                return True
    return False


def same_thing(alert, other):
    keys = (set(alert) | set(other)) - PAIR_DETAIL_LABELS
    return all(alert.get(key) == other.get(key) for key in keys)


def test_inhibit_rules_are_valid_for_alertmanager_0_25():
    rules = inhibit_rules()
    assert rules
    for source_matchers, target_matchers, equal in rules:
        assert ('severity', '=', 'critical') in source_matchers
        assert ('severity', '=', 'warning') in target_matchers
        assert 'alertname' in equal, 'pairs share their alert name: without it any critical silences any warning'


def test_inhibition_silences_a_warning_exactly_while_its_critical_fires():
    """Simulated on every moment the unit tests expect: pairs by alert name, for the same GPU, engine, disk..."""
    rules = inhibit_rules()
    shown = set()
    problems = []
    for path, index, case in unit_test_cases():
        firing = expected_alerts(case)
        for alert in firing:
            if alert.get('severity') != 'warning':
                continue
            should = any(other.get('severity') == 'critical' and same_thing(alert, other) for other in firing)
            does = inhibited(alert, firing, rules)
            if should != does:
                problems.append('%s test %d at %s: %s %s silenced, but %s' % (
                    relative(path), index, case['eval_time'], alert, 'is' if does else 'is not',
                    'its critical fires' if should else 'no critical of its pair fires for the same thing'))
            if does:
                shown.add(alert['alertname'])
    assert not problems, '\n'.join(problems)
    pairs = {name for name, severity in ALERTS if severity == 'warning'} & \
        {name for name, severity in ALERTS if severity == 'critical'}
    missing = sorted(pairs - shown)
    assert not missing, ('warning/critical pairs whose unit tests never fire both at once for the same thing, so '
                         'their inhibition is untested: %s' % ', '.join(missing))


@needs_amtool
def test_amtool_accepts_the_inhibit_rules(tmp_path):
    config = {'route': {'receiver': 'none'}, 'receivers': [{'name': 'none'}]}
    config.update(load_yaml(INHIBIT_RULES))
    path = tmp_path / 'alertmanager.yml'
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run([AMTOOL, 'check-config', str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '1 inhibit rules' in proc.stdout, proc.stdout
