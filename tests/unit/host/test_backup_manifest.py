# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/llm_server_host/backup_manifest.py: the manifest the restore drill checks a restored tree against,
on real trees (files, modes, links, a directory) copied with the standard library."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

from llm_server_host import backup_manifest


@pytest.fixture(name='tree')
def fixture_tree(tmp_path):
    """A small configuration tree as a backup holds one: a private key, a public file, a link, a folder."""
    root = tmp_path / 'etc-llm-server'
    (root / 'tls').mkdir(parents=True)
    (root / 'tls' / 'proxy.key').write_text('private\n')
    os.chmod(root / 'tls' / 'proxy.key', 0o600)
    (root / 'backends.yml').write_text('engines: []\n')
    os.symlink('tls/proxy.key', root / 'current.key')
    (root / 'empty').mkdir()
    return root


def restored(tree, tmp_path):
    copy = tmp_path / 'restored'
    shutil.copytree(tree, copy, symlinks=True)
    shutil.copystat(tree, copy)
    return copy


def test_the_manifest_names_every_path_with_what_a_restore_must_give_back(tree):
    entries = backup_manifest.build(str(tree))
    assert list(entries) == ['.', 'backends.yml', 'current.key', 'empty', 'tls', 'tls/proxy.key']
    key = entries['tls/proxy.key']
    assert key['type'] == 'file' and key['mode'] == '0600' and key['size'] == 8
    assert key['sha256'] == hashlib.sha256(b'private\n').hexdigest()
    assert key['uid'] == os.getuid() and key['gid'] == os.getgid()
    # A link is recorded as a link, not followed.
    assert entries['current.key'] == {'type': 'link', 'target': 'tls/proxy.key', 'mode': entries['current.key']['mode'],
                                      'uid': os.getuid(), 'gid': os.getgid()}
    assert entries['empty']['type'] == 'dir'


def test_an_exact_copy_has_no_difference(tree, tmp_path):
    result = backup_manifest.compare(backup_manifest.build(str(tree)), str(restored(tree, tmp_path)))
    assert result == {'checked': 6, 'differences': []}


def test_every_kind_of_difference_is_named(tree, tmp_path):
    expected = backup_manifest.build(str(tree))
    copy = restored(tree, tmp_path)
    (copy / 'backends.yml').write_text('engines: [changed]\n')
    os.chmod(copy / 'tls' / 'proxy.key', 0o644)
    os.unlink(copy / 'current.key')
    os.symlink('elsewhere', copy / 'current.key')
    os.rmdir(copy / 'empty')
    (copy / 'stray').write_text('not backed up\n')
    found = {d['path']: d for d in backup_manifest.compare(expected, str(copy))['differences']}
    assert set(found) == {'backends.yml', 'tls/proxy.key', 'current.key', 'empty', 'stray'}
    assert set(found['backends.yml']['fields']) == {'size', 'sha256'}
    assert found['tls/proxy.key']['fields'] == {'mode': {'expected': '0600', 'found': '0644'}}
    assert found['current.key']['fields']['target'] == {'expected': 'tls/proxy.key', 'found': 'elsewhere'}
    assert found['empty']['problem'] == 'missing'
    assert found['stray']['problem'] == 'not in the manifest'


def test_the_parts_cover_every_path_once():
    paths = ['file-%d' % n for n in range(200)]
    parts = [[p for p in paths if backup_manifest.in_part(p, part, 4)] for part in range(4)]
    assert sorted(sum(parts, [])) == sorted(paths)
    # Each week's part is a real share, not all or nothing.
    assert all(20 < len(part) < 80 for part in parts)


def test_a_part_checks_only_its_paths(tree, tmp_path):
    expected = backup_manifest.build(str(tree))
    copy = restored(tree, tmp_path)
    (copy / 'backends.yml').write_text('changed\n')
    results = [backup_manifest.compare(expected, str(copy), part, 3) for part in range(3)]
    assert sum(r['checked'] for r in results) == len(expected)
    assert sum(len(r['differences']) for r in results) == 1


def test_the_command_writes_then_checks_and_says_what_differs(tree, tmp_path, capsys):
    manifest = tmp_path / 'manifest.json'
    assert backup_manifest.main(['write', str(tree), str(manifest)]) == 0
    assert oct(manifest.stat().st_mode & 0o777) == '0o600'
    assert json.loads(manifest.read_text())['version'] == 1
    capsys.readouterr()
    copy = restored(tree, tmp_path)
    assert backup_manifest.main(['check', str(copy), str(manifest)]) == 0
    assert json.loads(capsys.readouterr().out) == {'checked': 6, 'differences': []}
    (copy / 'tls' / 'proxy.key').unlink()
    assert backup_manifest.main(['check', str(copy), str(manifest)]) == backup_manifest.EXIT_DIFFERENT
    answer = capsys.readouterr()
    assert json.loads(answer.out)['differences'] == [{'path': 'tls/proxy.key', 'problem': 'missing'}]
    assert answer.err == ''


@pytest.mark.parametrize('args, message', [
    (['check', '{root}', '{missing}'], 'cannot read'),
    (['check', '{root}', '{not_a_manifest}'], 'is not a manifest of version 1'),
    (['check', '{root}', '{manifest}', '--part', '3', '--parts', '3'], '--part must be from 0'),
    (['check', '{nowhere}', '{manifest}'], 'is not a directory'),
])
def test_bad_inputs_stop_with_their_cause(tree, tmp_path, capsys, args, message):
    names = {'root': str(tree), 'missing': str(tmp_path / 'none.json'), 'nowhere': str(tmp_path / 'nowhere'),
             'manifest': str(tmp_path / 'manifest.json'), 'not_a_manifest': str(tmp_path / 'other.json')}
    (tmp_path / 'other.json').write_text('{"engines": []}\n')
    backup_manifest.main(['write', str(tree), names['manifest']])
    capsys.readouterr()
    assert backup_manifest.main([a.format(**names) for a in args]) == backup_manifest.EXIT_ERROR
    answer = capsys.readouterr()
    assert message in answer.err and answer.out == ''
