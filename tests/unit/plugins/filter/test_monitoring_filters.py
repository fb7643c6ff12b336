# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/filter/monitoring.py through Ansible's templating, the way the monitoring role uses it."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
RULE_FILES = sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'files', 'prometheus', '*.rules.yml')))


@pytest.mark.parametrize('value, seconds', [
    ('15s', 15), ('5m', 300), ('1h30m', 5400), ('30d', 2592000), ('2w', 1209600), ('1y', 31536000),
    ('100ms', 0.1), ('0', 0), ('0s', 0), ('5m0s', 300),
])
def test_durations(render, value, seconds):
    assert render('{{ value | homelab.llm_server.prometheus_duration_seconds }}', value=value)['value'] == seconds


@pytest.mark.parametrize('value', ['', '30', '1.5h', '1m1h', '15 s', '15S', 'abc', '-5m', '1d ', None, 15])
def test_not_durations(render, value):
    assert render('{{ value | homelab.llm_server.prometheus_duration_seconds }}', value=value)['value'] is None


def test_not_durations_names_the_wrong_ones_in_order(render):
    values = {'scrape': '15s', 'evaluation': '1 minute', 'retention': '30d', 'group_wait': 30}
    assert render('{{ values | homelab.llm_server.not_prometheus_durations }}',
                  values=values)['value'] == ['evaluation', 'group_wait']


def test_alert_names_of_the_collection(render):
    files = [yaml.safe_load(open(path)) for path in RULE_FILES]
    names = render('{{ files | homelab.llm_server.prometheus_alert_names }}', files=files)['value']
    assert 'LLMEngineDown' in names and 'LLMGpuHot' in names
    assert names == sorted(set(names))
    # Every name once, though several have a warning and a critical rule.
    rules = [rule['alert'] for rule_file in files for group in rule_file['groups'] for rule in group['rules']
             if 'alert' in rule]
    assert len(rules) > len(names) and set(rules) == set(names)


def test_for_overrides_every_rule_of_the_name_and_only_those(render):
    path = next(path for path in RULE_FILES if path.endswith('llm-gpu.rules.yml'))
    original = yaml.safe_load(open(path))
    changed = render("{{ rules | homelab.llm_server.prometheus_rules_for({'LLMGpuHot': '30s'}) }}",
                     rules=original)['value']
    before = [rule for group in original['groups'] for rule in group['rules']]
    after = [rule for group in changed['groups'] for rule in group['rules']]
    assert len(before) == len(after) and len([rule for rule in after if rule.get('alert') == 'LLMGpuHot']) == 2
    for old, new in zip(before, after):
        if old.get('alert') == 'LLMGpuHot':
            assert new['for'] == '30s'
            assert {key: value for key, value in new.items() if key not in ('for', 'annotations')} == \
                {key: value for key, value in old.items() if key not in ('for', 'annotations')}
            assert new['annotations']['summary'] == old['annotations']['summary']
        else:
            assert new == old
    # The input is left as it was.
    assert original == yaml.safe_load(open(path))


def test_the_description_names_the_new_wait(render):
    path = next(path for path in RULE_FILES if path.endswith('llm-engines.rules.yml'))
    original = yaml.safe_load(open(path))
    changed = render("{{ rules | homelab.llm_server.prometheus_rules_for({'LLMEngineDown': '90s', "
                     "'LLMEngineProbeFailing': '1h', 'LLMEngineKVCacheFull': '0s'}) }}", rules=original)['value']
    rules = {rule['alert']: rule for group in changed['groups'] for rule in group['rules'] if 'alert' in rule}
    old = {rule['alert']: rule for group in original['groups'] for rule in group['rules'] if 'alert' in rule}
    assert 'for 5 minutes' in old['LLMEngineDown']['annotations']['description']
    assert 'for 90 seconds' in rules['LLMEngineDown']['annotations']['description']
    assert '2 minutes' in old['LLMEngineProbeFailing']['annotations']['description']
    assert '1 hour' in rules['LLMEngineProbeFailing']['annotations']['description']
    assert '2 minutes' not in rules['LLMEngineProbeFailing']['annotations']['description']
    assert 'a moment' in rules['LLMEngineKVCacheFull']['annotations']['description']


def test_only_the_wait_is_renamed_not_other_figures(render):
    rules = {'groups': [{'name': 'g', 'rules': [{
        'alert': 'A', 'expr': 'x < 600', 'for': '15m',
        'annotations': {'description': 'less than 10 minutes of battery for 15 minutes (115 minutes, 1.15 minutes)'}}]}]}
    changed = render("{{ rules | homelab.llm_server.prometheus_rules_for({'A': '1h30m'}) }}", rules=rules)['value']
    assert changed['groups'][0]['rules'][0]['annotations']['description'] == \
        'less than 10 minutes of battery for 90 minutes (115 minutes, 1.15 minutes)'


def test_zero_wait_removes_for(render):
    rules = {'groups': [{'name': 'g', 'rules': [{'alert': 'A', 'expr': 'up == 0', 'for': '5m'}]}]}
    changed = render("{{ rules | homelab.llm_server.prometheus_rules_for({'A': '0s'}) }}", rules=rules)['value']
    assert 'for' not in changed['groups'][0]['rules'][0]


def test_wrong_arguments(render):
    assert 'expects a list' in render('{{ {} | homelab.llm_server.prometheus_alert_names }}')['error']
    assert 'expects a dict' in render("{{ {} | homelab.llm_server.prometheus_rules_for(['A']) }}")['error']
