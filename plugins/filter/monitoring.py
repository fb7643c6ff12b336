# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for the monitoring role: Prometheus durations and alert rules."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# Prometheus' duration: units from the largest to the smallest, each at most
# once, at least one (model.ParseDuration); "0" alone is zero.
_DURATION = re.compile(r'^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$')
_UNIT_SECONDS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


def prometheus_duration_seconds(value):
    """Seconds of a Prometheus duration (``90s``, ``1h30m``, ``15d``); None when it is not one."""
    if not isinstance(value, str) or value == '':
        return None
    if value == '0':
        return 0
    match = _DURATION.match(value)
    if match is None or not any(match.groups()):
        return None
    return sum(int(count) * unit for count, unit in zip(match.groups(), _UNIT_SECONDS) if count)


def not_prometheus_durations(values):
    """The keys of ``values`` (name to value) whose value is not a Prometheus duration, in their order."""
    if not isinstance(values, dict):
        raise AnsibleFilterError('not_prometheus_durations: expects a dict of name to duration, got %s'
                                 % type(values).__name__)
    return [name for name, value in values.items() if prometheus_duration_seconds(value) is None]


def _alert_rules(rule_files):
    for rule_file in rule_files:
        for group in (rule_file or {}).get('groups') or []:
            for rule in group.get('rules') or []:
                if 'alert' in rule:
                    yield rule


def prometheus_alert_names(rule_files):
    """The alert names of a list of rule files (each as loaded from YAML), sorted, once each."""
    if not isinstance(rule_files, (list, tuple)):
        raise AnsibleFilterError('prometheus_alert_names: expects a list of rule files, got %s' % type(rule_files).__name__)
    return sorted({rule['alert'] for rule in _alert_rules(rule_files)})


def _wait_in_words(seconds):
    """How an alert's text says a wait: "5 minutes", "1 hour", "90 seconds", "a moment" for none."""
    if not seconds:
        return 'a moment'
    if seconds % 3600 == 0:
        count, unit = seconds // 3600, 'hour'
    elif seconds % 60 == 0:
        count, unit = seconds // 60, 'minute'
    else:
        count, unit = seconds, 'second'
    return '%g %s%s' % (count, unit, '' if count == 1 else 's')


def _say_new_wait(annotations, old_seconds, new_seconds):
    """Annotations whose mentions of the old wait ("For 5 minutes ...") name the new one."""
    said = re.compile(r'(?<![\d.])%s\b' % re.escape(_wait_in_words(old_seconds)))
    return {key: said.sub(_wait_in_words(new_seconds), value) if isinstance(value, str) else value
            for key, value in annotations.items()}


def _copy_containers(value):
    """A copy of nested mappings and lists that shares the scalars (immutable) with the original.

    copy.deepcopy also copied the data tags Ansible attaches to every string
    loaded from a file: 4 of the 4.25 s the monitoring role's no-op run spent
    on the collection's alert rules.
    """
    if isinstance(value, Mapping):
        return {key: _copy_containers(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy_containers(item) for item in value]
    return value


def prometheus_rules_for(rule_file, overrides):
    """A copy of a rule file (as loaded from YAML) whose alerts named in ``overrides`` get that ``for``.

    Every rule under an alert name gets it (the warning and the critical rule
    of one condition alike); "0s" removes the wait. A description that names
    the old wait ("for 5 minutes") names the new one.
    """
    if not isinstance(overrides, dict):
        raise AnsibleFilterError('prometheus_rules_for: expects a dict of alert name to duration, got %s'
                                 % type(overrides).__name__)
    result = _copy_containers(rule_file)
    for rule in _alert_rules([result]):
        if rule['alert'] in overrides:
            duration = str(overrides[rule['alert']])
            old_seconds = prometheus_duration_seconds(str(rule.get('for', '0')))
            new_seconds = prometheus_duration_seconds(duration)
            if new_seconds in (None, 0):
                rule.pop('for', None)
            else:
                rule['for'] = duration
            if old_seconds and new_seconds is not None and rule.get('annotations'):
                rule['annotations'] = _say_new_wait(rule['annotations'], old_seconds, new_seconds)
    return result


class FilterModule(object):
    """Monitoring filters."""

    def filters(self):
        return {
            'prometheus_duration_seconds': prometheus_duration_seconds,
            'not_prometheus_durations': not_prometheus_durations,
            'prometheus_alert_names': prometheus_alert_names,
            'prometheus_rules_for': prometheus_rules_for,
        }
