# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/llm_server_host/files.py: the one reader of settings and the one writer every host program replaces its files with."""

from __future__ import annotations

import os
import stat

import pytest

from llm_server_host import files


def test_the_file_is_replaced_whole_with_its_mode_and_nothing_left_beside_it(tmp_path):
    path = tmp_path / 'llm_engine_probe_a.prom'
    path.write_text('old\n')
    files.write_atomically(str(path), 'new\n', mode=0o600)
    assert path.read_text() == 'new\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ['llm_engine_probe_a.prom']
    files.write_atomically(str(path), 'newer\n')
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    path = tmp_path / 'state.json'
    path.write_text('{}\n')

    def broken_fsync(_fd):
        raise OSError('disk gone')
    monkeypatch.setattr(files.os, 'fsync', broken_fsync)
    with pytest.raises(OSError, match='disk gone'):
        files.write_atomically(str(path), '{"a": 1}\n')
    assert path.read_text() == '{}\n'
    assert os.listdir(tmp_path) == ['state.json']


def test_the_temporary_file_is_never_one_node_exporter_reads(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def watch(source, target):
        seen.append(os.path.basename(source))
        real_replace(source, target)
    monkeypatch.setattr(files.os, 'replace', watch)
    files.write_atomically(str(tmp_path / 'llm_ups.prom'), 'x 1\n')
    assert len(seen) == 1 and seen[0].startswith('.llm_ups.prom.') and seen[0].endswith('.tmp')


@pytest.mark.parametrize('content, message', [
    (None, 'cannot read {path}: No such file or directory'),
    ('{"a": ', '{path} is not JSON: Expecting value'),
    ('[1, 2]', '{path} must hold a JSON object'),
])
def test_read_settings_says_why_a_file_is_not_settings(tmp_path, content, message):
    class SettingsError(Exception):
        pass

    path = tmp_path / 'settings.json'
    if content is not None:
        path.write_text(content)
    with pytest.raises(SettingsError) as raised:
        files.read_settings(str(path), SettingsError)
    assert str(raised.value).startswith(message.format(path=path))


def test_read_settings_returns_the_object(tmp_path):
    path = tmp_path / 'settings.json'
    path.write_text('{"hold_dir": "/run/llm-server/holds", "engines": []}')
    assert files.read_settings(str(path)) == {'hold_dir': '/run/llm-server/holds', 'engines': []}
