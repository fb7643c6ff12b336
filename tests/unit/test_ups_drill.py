# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""molecule/ups/files/ups_drill.py: how the ups scenario's drills read NUT's answers.

upsrw prints what upsd or the driver answered and may exit 0 whatever it was,
so the drills parse the answer (upsrw_answer) and then read the value back
with upsc (value_taken) before a change counts. Drill.set_var runs against
stand-ins of upsrw and upsc on PATH: upsrw prints a given answer and changes
the value only when told to, upsc prints the value (the scenario itself runs
the real ones against dummy-ups).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
DRILL = os.path.join(REPO_ROOT, 'molecule', 'ups', 'files', 'ups_drill.py')


def _load():
    spec = importlib.util.spec_from_file_location('ups_drill', DRILL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ups_drill = _load()

# upsrw -s VAR=VALUE ...: prints answer.txt; sets the value in vars.json only when take exists.
UPSRW = r'''#!/usr/bin/env python3
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
variable, value = sys.argv[sys.argv.index('-s') + 1].split('=', 1)
if os.path.exists(os.path.join(here, 'take')):
    path = os.path.join(here, 'vars.json')
    values = json.load(open(path))
    values[variable] = value
    json.dump(values, open(path, 'w'))
answer = open(os.path.join(here, 'answer.txt')).read()
sys.stderr.write(answer)
sys.exit(1 if answer.startswith('Unexpected response') else 0)
'''

# upsc UPS VAR: the value from vars.json, or upsc's error for a variable the UPS does not have.
UPSC = r'''#!/usr/bin/env python3
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
values = json.load(open(os.path.join(here, 'vars.json')))
if sys.argv[2] not in values:
    sys.stderr.write('Error: Variable not supported by UPS\n')
    sys.exit(1)
print(values[sys.argv[2]])
'''


@pytest.mark.parametrize('rc, output, answer', [
    (0, 'SUCCESS', 'SUCCESS'),
    (0, 'Init SSL without certificate database\nSUCCESS\n', 'SUCCESS'),
    (0, 'OK', 'OK'),
])
def test_upsrw_answers_that_let_the_value_be_read_back(rc, output, answer):
    assert ups_drill.upsrw_answer(rc, output) == answer


@pytest.mark.parametrize('rc, output', [
    (1, 'Unexpected response from upsd: ERR ACCESS-DENIED'),   # upsd refused: upsrw exits 1
    (0, 'ERR INVALID-ARGUMENT'),                              # the driver refused: -w prints it, exits 0
    (0, 'ERR UNKNOWN'),
    (0, 'PENDING'),
    (0, ''),
    (1, 'OK'),
])
def test_upsrw_refusals_are_errors(rc, output):
    with pytest.raises(ups_drill.DrillError, match='upsrw was refused'):
        ups_drill.upsrw_answer(rc, output)


@pytest.mark.parametrize('variable, wanted, served, taken', [
    ('battery.charge', '25', '25', True),
    ('battery.charge', '25', '100', False),
    ('battery.charge', '25', None, False),
    ('ups.status', 'OB', 'OB DISCHRG', True),
    ('ups.status', 'OB LB', 'FSD OB LB', True),   # upsd's own FSD once upsmon asked for the shutdown
    ('ups.status', 'OL', 'OB', False),
    ('ups.status', 'OL', 'OL OB', False),         # still on battery
    ('ups.status', 'OB', 'OL', False),
])
def test_value_taken(variable, wanted, served, taken):
    assert ups_drill.value_taken(variable, wanted, served) is taken


@pytest.fixture
def nut(tmp_path, monkeypatch):
    """Stand-ins of upsrw and upsc first on PATH; a Drill as verify.yml makes it."""
    for name, text in (('upsrw', UPSRW), ('upsc', UPSC)):
        path = tmp_path / name
        path.write_text(text)
        path.chmod(0o755)
    (tmp_path / 'vars.json').write_text(json.dumps({'ups.status': 'OL', 'battery.charge': '100'}))
    (tmp_path / 'admin.password').write_text('secret\n')
    monkeypatch.setenv('PATH', '%s%s%s' % (tmp_path, os.pathsep, os.environ.get('PATH', '')))
    args = argparse.Namespace(engines='llm-a,llm-b', admin_password_file=str(tmp_path / 'admin.password'))

    def answer(text, take):
        (tmp_path / 'answer.txt').write_text(text + '\n')
        if take:
            (tmp_path / 'take').write_text('')
        elif (tmp_path / 'take').exists():
            (tmp_path / 'take').unlink()
    drill = ups_drill.Drill(args)
    drill.answer = answer
    return drill


def test_a_value_the_driver_set_counts(nut):
    nut.answer('SUCCESS', take=True)
    nut.set_var('battery.charge', '25', timeout=2)
    assert nut.upsc('battery.charge') == '25'


def test_a_bare_ok_with_the_value_unchanged_is_an_error(nut):
    # upsd passed it on, the driver did not set it: upsc still reads the old value.
    nut.answer('OK', take=False)
    with pytest.raises(ups_drill.DrillError) as err:
        nut.set_var('battery.charge', '25', timeout=0.3)
    assert "upsrw answered OK to battery.charge=25, but upsd still serves '100'" in str(err.value)
    assert 'did not take' in str(err.value)


@pytest.mark.parametrize('text', ['Unexpected response from upsd: ERR ACCESS-DENIED', 'ERR INVALID-ARGUMENT'])
def test_a_refused_set_is_an_error_even_when_exit_0(nut, text):
    nut.answer(text, take=False)
    with pytest.raises(ups_drill.DrillError, match='upsrw was refused'):
        nut.set_status('OB')
