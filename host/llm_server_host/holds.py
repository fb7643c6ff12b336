# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One hold that every actor respects: the hold directory's contract as code.

Private to this collection. An engine is held while any holder holds it: the
UPS on battery, the GPU watchdog for heat or an XID, the owner for
maintenance (`llm-server hold`). Nobody starts a held engine: each engine
unit asks `llm-server may-start` first (its ExecCondition), so neither the
health checker's restart, the watchdog's restore, the UPS's power-back nor
the boot starts it; the last holder to release it starts it.

The directory (llm_server_hold_dir) holds one file per holder, HOLDER.json,
written whole (a temporary file renamed) and only by that holder, so no two
writers share a file:

    {"version": 1, "holder": "ups", "boot_id": "...", "persistent": false,
     "engines": {"vllm-a.service": [{"reason": "on battery", "since": 1764000000.0,
                                     "message": "..."}]}}

A holder that is not persistent (the UPS, the watchdog: their reasons end
with the boot) writes the boot's id, and its file counts only during that
boot. The owner's holds are persistent: a maintenance hold outlives a reboot.

Standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re

from llm_server_host.files import write_atomically

VERSION = 1
HOLDER_RE = re.compile(r'^[a-z][a-z0-9_-]{0,31}$')
UNIT_RE = re.compile(r'^[A-Za-z0-9_.@:-]+\.service$')
BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id'
# Who holds, as a person reads it.
HOLDER_NAMES = {'ups': 'the UPS', 'watchdog': 'the GPU watchdog', 'owner': 'the owner'}


class HoldError(ValueError):
    pass


def boot_id(path=BOOT_ID_FILE):
    try:
        with open(path, encoding='ascii') as handle:
            return handle.read().strip()
    except OSError:
        return ''


def unit_of(engine):
    """The systemd unit of an engine given by its registry name or its unit."""
    unit = engine if engine.endswith('.service') else engine + '.service'
    if not UNIT_RE.match(unit):
        raise HoldError('%r is not an engine name (letters, digits and _ . @ : - only)' % engine)
    return unit


def holder_name(holder):
    return HOLDER_NAMES.get(holder, holder)


def validate(data):
    """Why a holder file's content breaks the contract; empty when it keeps it."""
    if not isinstance(data, dict):
        return ['not a JSON object']
    errors = []
    if data.get('version') != VERSION:
        errors.append('version is %r, not %d' % (data.get('version'), VERSION))
    if not isinstance(data.get('holder'), str) or not HOLDER_RE.match(data['holder']):
        errors.append('holder %r is not a holder name' % (data.get('holder'),))
    if not isinstance(data.get('persistent'), bool):
        errors.append('persistent must be true or false')
    if not data.get('persistent') and not isinstance(data.get('boot_id'), str):
        errors.append('a hold that ends with the boot needs its boot_id')
    engines = data.get('engines')
    if not isinstance(engines, dict):
        return errors + ['engines must be an object of unit: [holds]']
    for unit, holds in engines.items():
        if not isinstance(unit, str) or not UNIT_RE.match(unit):
            errors.append('engine %r is not a unit name (NAME.service)' % (unit,))
        if not isinstance(holds, list) or not holds:
            errors.append('%s: its holds must be a non-empty list' % unit)
            continue
        for hold in holds:
            if not isinstance(hold, dict) or not isinstance(hold.get('reason'), str) or not hold['reason']:
                errors.append('%s: each hold needs a reason' % unit)
            elif not isinstance(hold.get('since'), (int, float)) or isinstance(hold.get('since'), bool):
                errors.append('%s: each hold needs since (seconds since the epoch)' % unit)
    return errors


def read(hold_dir, current_boot=None):
    """({holder: {unit: [hold, ...]}}, [problems]) of the holds that count now.

    A file that cannot be read or breaks the contract is left out and named in
    problems; a holder's file from another boot is left out silently."""
    current_boot = boot_id() if current_boot is None else current_boot
    holds, problems = {}, []
    try:
        names = sorted(os.listdir(hold_dir))
    except FileNotFoundError:
        return holds, problems
    except OSError as exc:
        return holds, ['%s: %s' % (hold_dir, exc.strerror or exc)]
    for name in names:
        if not name.endswith('.json') or name.startswith('.'):
            continue
        path = os.path.join(hold_dir, name)
        try:
            with open(path, encoding='utf-8') as handle:
                data = json.load(handle)
        except (OSError, ValueError) as exc:
            problems.append('%s: %s' % (path, exc))
            continue
        errors = validate(data)
        if not errors and data['holder'] + '.json' != name:
            errors = ['holder %r written in another holder\'s file' % data['holder']]
        if errors:
            problems.append('%s: %s' % (path, '; '.join(errors)))
            continue
        if not data['persistent'] and data['boot_id'] != current_boot:
            continue
        if data['engines']:
            holds[data['holder']] = data['engines']
    return holds, problems


def holders_of(holds, unit, but=None):
    """[(holder, hold)] of every hold on unit, but those of holder `but`."""
    return [(holder, hold) for holder, engines in sorted(holds.items()) if holder != but
            for hold in engines.get(unit, [])]


def describe(pairs):
    """'the UPS (on battery), the owner (new fan)' for holders_of's answer."""
    return ', '.join('%s (%s)' % (holder_name(holder), hold['reason']) for holder, hold in pairs)


def write(hold_dir, holder, engines, persistent=False, current_boot=None):
    """Replaces holder's file with its holds now ({unit: [hold, ...]}); no holds removes it."""
    data = {'version': VERSION, 'holder': holder, 'persistent': bool(persistent),
            'boot_id': boot_id() if current_boot is None else current_boot,
            'engines': {unit: list(holds) for unit, holds in sorted(engines.items()) if holds}}
    errors = validate(data)
    if errors:
        raise HoldError('holds of %s not written: %s' % (holder, '; '.join(errors)))
    path = os.path.join(hold_dir, holder + '.json')
    if not data['engines']:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    os.makedirs(hold_dir, mode=0o755, exist_ok=True)
    # Readable by all: the engine units' condition runs as their own user.
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True) + '\n')


def own(hold_dir, holder, current_boot=None):
    """holder's own holds as its file has them now ({} when none count)."""
    holds, _problems = read(hold_dir, current_boot)
    return {unit: list(entries) for unit, entries in holds.get(holder, {}).items()}


@contextlib.contextmanager
def updating(hold_dir, holder, persistent=False, current_boot=None):
    """Yields holder's holds ({unit: [hold]}) to change in place, under a lock of
    that holder's file, and writes them back: two commands of one holder at
    once (the owner's, say) do not lose each other's change."""
    os.makedirs(hold_dir, mode=0o755, exist_ok=True)
    with open(os.path.join(hold_dir, '.%s.lock' % holder), 'a', encoding='utf-8') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        engines = own(hold_dir, holder, current_boot)
        yield engines
        write(hold_dir, holder, engines, persistent, current_boot)
