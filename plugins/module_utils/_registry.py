# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The engine registry (contract 1 of docs/architecture.md), as code.

Private to this collection. One JSON object per engine the serving role
started, in the registry directory as NAME.json; the engine's unit is
NAME.service. Written by the serving role (its `registry_entry` filter
calls entry()); read by the nginx role (the `registry_entries` filter
calls parse()), llm-gpu-watchdog, llm-ups and llm-server (read() and
names(), from the host programs' wheel, which carries this file).

An entry without a version was written by a collection before the field;
it is read as version 1, the same fields. An entry of a later version, or
one that breaks the contract, is left out by read() with the reason.
"""

from __future__ import annotations

import glob
import json
import os
import re

VERSION = 1
ENGINES = ('vllm', 'llamacpp', 'engine')
# Engine names are systemd unit names without '.service' (the serving role's).
NAME_RE = re.compile(r'^[A-Za-z0-9:_.@-]+$')
# How a problem of an entry that is not JSON (or not text) begins.
UNREADABLE = 'cannot be read: '


def entry(name, engine, port, model, standby=False, gpus=(), host='127.0.0.1'):
    """The registry's entry of one engine, checked: what the serving role writes. ValueError when it breaks
    the contract."""
    data = {'version': VERSION, 'name': name, 'engine': engine, 'host': host, 'port': port, 'model': model,
            'standby': standby, 'gpus': list(gpus)}
    problems = check(data, name)
    if problems:
        raise ValueError('registry entry %s: %s' % (name, '; '.join(problems)))
    return data


def check(data, name):
    """The ways DATA (an entry read from NAME.json) breaks the contract: [] when it is an entry."""
    if not isinstance(data, dict):
        return ['not a JSON object']
    problems = []
    version = data.get('version', 1)
    if not _integer(version) or version < 1:
        problems.append('version %r is not a version' % (version,))
    elif version > VERSION:
        problems.append('version %d is newer than this collection reads (%d): update the collection'
                        % (version, VERSION))
    if data.get('name') != name:
        problems.append('name %r is not the file name %r' % (data.get('name'), name))
    if data.get('engine') not in ENGINES:
        problems.append('engine %r is not one of %s' % (data.get('engine'), ', '.join(ENGINES)))
    if not isinstance(data.get('host'), str) or not data['host']:
        problems.append('host %r is not a host' % (data.get('host'),))
    if not _integer(data.get('port')) or not 1 <= data['port'] <= 65535:
        problems.append('port %r is not a port' % (data.get('port'),))
    if not isinstance(data.get('model'), str) or not data['model']:
        problems.append('model %r is not a served model name' % (data.get('model'),))
    if not isinstance(data.get('standby', False), bool):
        problems.append('standby %r is not true or false' % (data.get('standby'),))
    gpus = data.get('gpus', [])
    if not isinstance(gpus, list) or not all(_integer(gpu) and gpu >= 0 for gpu in gpus):
        problems.append('gpus %r is not a list of NVML indexes' % (gpus,))
    return problems


def names(registry_dir):
    """The engines of the registry by their file names, sorted, whatever the files hold: a stop must reach
    an engine whose entry cannot be read."""
    found = []
    for path in sorted(glob.glob(os.path.join(registry_dir, '*.json'))):
        name = os.path.basename(path)[:-len('.json')]
        if NAME_RE.match(name):
            found.append(name)
    return found


def parse(text, name):
    """(entry, [problem]) of TEXT, the JSON of NAME.json: the entry checked and its defaults filled in, or None
    and why not. The one reading of an entry, for read() and the nginx role's `registry_entries` filter."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, [UNREADABLE + str(exc)]
    problems = check(data, name)
    if problems:
        return None, problems
    return dict(data, version=data.get('version', 1), standby=data.get('standby', False),
                gpus=data.get('gpus', [])), []


def read(registry_dir):
    """({name: entry}, [problem]) of the registry: each entry read and checked; one that cannot be read or
    breaks the contract is left out, its problem named."""
    entries, problems = {}, []
    for name in names(registry_dir):
        path = os.path.join(registry_dir, name + '.json')
        try:
            with open(path, encoding='utf-8') as handle:
                text = handle.read()
        except (OSError, ValueError) as exc:
            problems.append('%s: %s%s' % (path, UNREADABLE, exc))
            continue
        data, broken = parse(text, name)
        if broken:
            problems.append('%s: %s' % (path, '; '.join(broken)))
            continue
        entries[name] = data
    return entries, problems


def _integer(value):
    return isinstance(value, int) and not isinstance(value, bool)
