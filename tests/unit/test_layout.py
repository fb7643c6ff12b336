# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The unit tests mirror the tree: a test file under tests/unit/host/, plugins/<kind>/ and scripts/ is named
after the module it tests, and the test doubles live in tests/doubles/ only."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
UNIT = ROOT / 'tests' / 'unit'
# Tests of a module through a layer named in their file name (Ansible's templating, a playbook run),
# or of the data a module reads.
SUFFIXES = ('_filters', '_action')
DATA = {'plugins/module_utils/test_capacity_data.py': 'data/planner'}


def module_of(test):
    """The module a mirrored test file is about, or None."""
    relative = test.relative_to(UNIT)
    stem = relative.stem[len('test_'):]
    for suffix in SUFFIXES:
        stem = stem[:-len(suffix)] if stem.endswith(suffix) else stem
    if relative.parts[0] == 'host':
        candidates = [ROOT / 'host' / 'llm_server_host' / (stem + '.py')]
    elif relative.parts[0] == 'plugins':
        folder = ROOT / 'plugins' / relative.parts[1]
        candidates = [folder / (stem + '.py'), folder / ('_%s.py' % stem)]
    else:
        candidates = [ROOT / 'scripts' / (stem + '.py'), ROOT / 'scripts' / (stem.replace('_', '-') + '.py')]
    return next((c for c in candidates if c.exists()), None)


def test_each_mirrored_test_names_its_module():
    tests = [t for folder in ('host', 'plugins', 'scripts') for t in sorted((UNIT / folder).rglob('test_*.py'))]
    assert len(tests) > 50
    orphans = [str(t.relative_to(UNIT)) for t in tests
               if module_of(t) is None and str(t.relative_to(UNIT)) not in DATA]
    assert orphans == [], 'move each to the place that mirrors its module, or name the module in its file name'


def test_the_doubles_live_in_tests_doubles():
    doubles = sorted(p.name for p in (ROOT / 'tests' / 'doubles').iterdir() if p.is_dir())
    assert doubles == ['hf_hub', 'nvml', 'openai_server', 'telegram_bot_api']
    readme = (ROOT / 'tests' / 'doubles' / 'README.md').read_text(encoding='utf-8')
    assert all('`%s/`' % name in readme for name in doubles)
    for old in ('nvml_double', 'openai_server', 'telegram_bot_api', 'hf_hub'):
        left = [p for p in (ROOT / 'tests' / old).rglob('*') if p.is_file() and '__pycache__' not in p.parts]
        assert left == [], 'tests/%s moved to tests/doubles/' % old
