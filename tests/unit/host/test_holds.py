# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hold directory's contract (host/llm_server_host/holds.py)."""

from __future__ import annotations

import json
import os
import threading

import pytest

from llm_server_host import holds as _holds

HEAT = [{'reason': 'heat', 'since': 1.0, 'gpu': 0}]


def test_each_holder_writes_its_own_file_and_readers_see_them_all(tmp_path):
    _holds.write(str(tmp_path), 'watchdog', {'vllm-a.service': HEAT}, current_boot='b1')
    _holds.write(str(tmp_path), 'ups', {'vllm-a.service': [{'reason': 'on battery', 'since': 2.0}],
                                        'vllm-b.service': [{'reason': 'on battery', 'since': 2.0}]},
                 current_boot='b1')
    holds, problems = _holds.read(str(tmp_path), current_boot='b1')
    assert problems == [] and sorted(holds) == ['ups', 'watchdog']
    pairs = _holds.holders_of(holds, 'vllm-a.service', but='ups')
    assert _holds.describe(pairs) == 'the GPU watchdog (heat)'
    assert [h for h, _hold in _holds.holders_of(holds, 'vllm-a.service')] == ['ups', 'watchdog']
    data = json.loads((tmp_path / 'ups.json').read_text())
    assert data['version'] == 1 and data['boot_id'] == 'b1' and data['persistent'] is False
    assert oct(os.stat(tmp_path / 'ups.json').st_mode & 0o777) == '0o644'
    # No holds left: the file goes.
    _holds.write(str(tmp_path), 'ups', {}, current_boot='b1')
    assert not (tmp_path / 'ups.json').exists()


def test_a_runtime_hold_ends_with_its_boot_and_the_owners_does_not(tmp_path):
    _holds.write(str(tmp_path), 'watchdog', {'vllm-a.service': HEAT}, current_boot='b1')
    _holds.write(str(tmp_path), 'owner', {'vllm-a.service': [{'reason': 'new fan', 'since': 3.0}]},
                 persistent=True, current_boot='b1')
    holds, _problems = _holds.read(str(tmp_path), current_boot='b2')
    assert list(holds) == ['owner']


@pytest.mark.parametrize('content, problem', [
    ('{', 'Expecting'),
    ('[]', 'not a JSON object'),
    ('{"version": 2, "holder": "ups", "persistent": true, "engines": {}}', 'version is 2, not 1'),
    ('{"version": 1, "holder": "ups", "persistent": false, "engines": {}}', 'needs its boot_id'),
    ('{"version": 1, "holder": "ups", "persistent": true, "engines": {"vllm": [{"reason": "x", "since": 1}]}}',
     "engine 'vllm' is not a unit name"),
    ('{"version": 1, "holder": "ups", "persistent": true, "engines": {"a.service": [{"since": 1}]}}',
     'each hold needs a reason'),
    ('{"version": 1, "holder": "owner", "persistent": true, "engines": {}}', "written in another holder's file"),
])
def test_a_file_that_breaks_the_contract_is_left_out_and_named(tmp_path, content, problem):
    (tmp_path / 'ups.json').write_text(content)
    holds, problems = _holds.read(str(tmp_path), current_boot='b1')
    assert holds == {} and len(problems) == 1 and problem in problems[0], problems


def test_a_holder_file_that_breaks_the_contract_is_not_written(tmp_path):
    with pytest.raises(_holds.HoldError, match="engine 'vllm-a' is not a unit name"):
        _holds.write(str(tmp_path), 'ups', {'vllm-a': HEAT})
    with pytest.raises(_holds.HoldError, match='is not a holder name'):
        _holds.write(str(tmp_path), '../etc', {'vllm-a.service': HEAT})
    assert os.listdir(tmp_path) == []


def test_engine_names_and_units(tmp_path):
    assert _holds.unit_of('vllm-a') == _holds.unit_of('vllm-a.service') == 'vllm-a.service'
    with pytest.raises(_holds.HoldError):
        _holds.unit_of('vllm a; reboot')
    assert _holds.read(str(tmp_path / 'missing')) == ({}, [])


def test_two_updates_of_one_holder_at_once_both_land(tmp_path):
    """The owner runs two holds at once: the lock keeps each one's change."""
    entered, go = threading.Event(), threading.Event()

    def first():
        with _holds.updating(str(tmp_path), 'owner', persistent=True) as engines:
            entered.set()
            go.wait(10)
            engines['a.service'] = [{'reason': 'one', 'since': 1.0}]
    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(10)

    def second():
        with _holds.updating(str(tmp_path), 'owner', persistent=True) as engines:
            engines['b.service'] = [{'reason': 'two', 'since': 2.0}]
    other = threading.Thread(target=second)
    other.start()
    go.set()
    thread.join(10)
    other.join(10)
    assert sorted(_holds.own(str(tmp_path), 'owner')) == ['a.service', 'b.service']
