# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_registry.py: the engine registry's contract, written, read and checked.

The filters the roles use (registry_entry, registry_entries) run through
Ansible's templating; the host programs read the same file from the wheel.
"""

from __future__ import annotations

import base64
import json
import os
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
sys.path.insert(0, os.path.join(REPO, '.collections'))

# pylint: disable-next=wrong-import-position
from ansible_collections.homelab.llm_server.plugins.module_utils import _registry  # noqa: E402

INSTANCE = {'name': 'vllm-qwen3-cpu0', 'engine': 'vllm', 'port': '8001', 'model_name': 'qwen3', 'standby': False,
            'gpus': ['0'], 'unit': 'vllm-qwen3-cpu0.service', 'description': 'ignored'}


def test_an_entry_carries_the_version_and_is_read_back_unchanged(tmp_path):
    entry = _registry.entry('engine-a', 'llamacpp', 8101, 'tiny-chat', standby=True, gpus=[1])
    assert entry == {'version': 1, 'name': 'engine-a', 'engine': 'llamacpp', 'host': '127.0.0.1', 'port': 8101,
                     'model': 'tiny-chat', 'standby': True, 'gpus': [1]}
    (tmp_path / 'engine-a.json').write_text(json.dumps(entry))
    assert _registry.read(str(tmp_path)) == ({'engine-a': entry}, [])


def test_an_entry_that_breaks_the_contract_is_not_written():
    with pytest.raises(ValueError, match=r'registry entry engine-a: port 0 is not a port; gpus \[-1\] is not a list'):
        _registry.entry('engine-a', 'llamacpp', 0, 'tiny-chat', gpus=[-1])


def test_an_entry_of_an_earlier_collection_reads_as_version_1(tmp_path):
    # What the serving role wrote before the version field: the same fields.
    (tmp_path / 'engine-a.json').write_text(json.dumps(
        {'name': 'engine-a', 'engine': 'vllm', 'host': '127.0.0.1', 'port': 8001, 'model': 'm', 'standby': False,
         'gpus': [0]}))
    entries, problems = _registry.read(str(tmp_path))
    assert problems == [] and entries['engine-a']['version'] == 1 and entries['engine-a']['gpus'] == [0]


@pytest.mark.parametrize('change, problem', [
    ({'version': 2}, 'version 2 is newer than this collection reads (1): update the collection'),
    ({'version': '1'}, "version '1' is not a version"),
    ({'name': 'engine-b'}, "name 'engine-b' is not the file name 'engine-a'"),
    ({'engine': 'ollama'}, "engine 'ollama' is not one of vllm, llamacpp, engine"),
    ({'port': '8001'}, "port '8001' is not a port"),
    ({'port': True}, 'port True is not a port'),
    ({'model': ''}, "model '' is not a served model name"),
    ({'standby': 'no'}, "standby 'no' is not true or false"),
    ({'gpus': [0, 'x']}, "gpus [0, 'x'] is not a list of NVML indexes"),
])
def test_each_break_of_the_contract_is_named_and_the_entry_left_out(tmp_path, change, problem):
    entry = dict(_registry.entry('engine-a', 'vllm', 8001, 'm', gpus=[0]), **change)
    (tmp_path / 'engine-a.json').write_text(json.dumps(entry))
    (tmp_path / 'engine-b.json').write_text(json.dumps(_registry.entry('engine-b', 'vllm', 8002, 'm')))
    entries, problems = _registry.read(str(tmp_path))
    assert list(entries) == ['engine-b']
    assert problems == ['%s: %s' % (tmp_path / 'engine-a.json', problem)]


def test_names_come_from_the_files_even_when_an_entry_cannot_be_read(tmp_path):
    (tmp_path / 'engine-b.json').write_text('{not json')
    (tmp_path / 'engine-a.json').write_text(json.dumps(_registry.entry('engine-a', 'vllm', 8001, 'm')))
    (tmp_path / 'not an engine.json').write_text('{}')
    (tmp_path / 'notes.txt').write_text('')
    assert _registry.names(str(tmp_path)) == ['engine-a', 'engine-b']
    entries, problems = _registry.read(str(tmp_path))
    assert list(entries) == ['engine-a'] and problems[0].startswith('%s: cannot be read' % (tmp_path / 'engine-b.json'))
    assert _registry.read(str(tmp_path / 'missing')) == ({}, [])


def test_parse_fills_in_the_defaults_of_an_entry():
    # Written before the version field, and without standby and gpus: read as version 1, the defaults filled in.
    text = json.dumps({'name': 'engine-a', 'engine': 'vllm', 'host': '127.0.0.1', 'port': 8001, 'model': 'm'})
    assert _registry.parse(text, 'engine-a') == ({'version': 1, 'name': 'engine-a', 'engine': 'vllm',
                                                  'host': '127.0.0.1', 'port': 8001, 'model': 'm',
                                                  'standby': False, 'gpus': []}, [])
    entry = _registry.entry('engine-a', 'llamacpp', 8101, 'tiny-chat', standby=True, gpus=[1])
    assert _registry.parse(json.dumps(entry), 'engine-a') == (entry, [])


@pytest.mark.parametrize('text, problems', [
    ('{not json', ['cannot be read: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)']),
    ('', ['cannot be read: Expecting value: line 1 column 1 (char 0)']),
    ('[1, 2]', ['not a JSON object']),
    ('"engine-a"', ['not a JSON object']),
    (json.dumps(dict(_registry.entry('engine-a', 'vllm', 8001, 'm'), name='engine-b', port=0)),
     ["name 'engine-b' is not the file name 'engine-a'", 'port 0 is not a port']),
])
def test_parse_names_what_keeps_an_entry_out(text, problems):
    assert _registry.parse(text, 'engine-a') == (None, problems)


def test_the_serving_roles_instance_becomes_its_entry(render):
    assert render('{{ i | homelab.llm_server.registry_entry }}', i=INSTANCE)['value'] == {
        'version': 1, 'name': 'vllm-qwen3-cpu0', 'engine': 'vllm', 'host': '127.0.0.1', 'port': 8001,
        'model': 'qwen3', 'standby': False, 'gpus': [0]}
    error = render('{{ i | homelab.llm_server.registry_entry }}', i=dict(INSTANCE, port='x'))['error']
    assert 'registry_entry: ' in error


def _slurped(path, data):
    text = data if isinstance(data, str) else json.dumps(data)
    return {'source': path, 'content': base64.b64encode(text.encode()).decode(), 'item': {'path': path}}


def test_the_proxy_reads_the_entries_and_stops_on_one_that_breaks_the_contract(render):
    good = _registry.entry('engine-a', 'llamacpp', 8101, 'tiny-chat')
    results = [_slurped('/etc/llm-server/instances/engine-a.json', good)]
    assert render('{{ r | homelab.llm_server.registry_entries }}', r=results)['value'] == [good]
    results.append(_slurped('/etc/llm-server/instances/engine-b.json', dict(good, name='engine-b', version=3)))
    results.append(_slurped('/etc/llm-server/instances/engine-c.json', '{'))
    error = render('{{ r | homelab.llm_server.registry_entries }}', r=results)['error']
    assert ('/etc/llm-server/instances/engine-b.json: version 3 is newer than this collection reads (1): update '
            'the collection') in error
    assert '/etc/llm-server/instances/engine-c.json: cannot be read' in error
    assert 'run the vllm or llamacpp role again to write it anew' in error
