# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-backup on a host without ZFS: staged snapshots, rollback, and the off-site copy and drill through rclone's
real crypt remote over a local folder (the Molecule scenario `backup` covers ZFS and S3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from llm_server_host import backup, backup_manifest

RCLONE = shutil.which('rclone')
needs_rclone = pytest.mark.skipif(RCLONE is None, reason='rclone is not installed (scripts/setup-test-host.sh installs it)')


def _tree(root):
    os.makedirs(os.path.join(root, 'instances'), exist_ok=True)
    os.makedirs(os.path.join(root, 'private'), mode=0o700, exist_ok=True)
    with open(os.path.join(root, 'instances', 'qwen.json'), 'w', encoding='utf-8') as handle:
        handle.write('{"port": 8001}\n')
    with open(os.path.join(root, 'private', 'key.pem'), 'w', encoding='utf-8') as handle:
        handle.write('secret\n')
    os.chmod(os.path.join(root, 'private', 'key.pem'), 0o600)
    os.symlink('instances/qwen.json', os.path.join(root, 'current.json'))
    os.makedirs(os.path.join(root, 'empty'), exist_ok=True)


@pytest.fixture
def host(tmp_path):
    """A host's two trees (configuration, and chosen paths of a root) and llm-backup's settings for them."""
    config = tmp_path / 'etc-llm-server'
    _tree(str(config))
    outside = tmp_path / 'root'
    (outside / 'etc' / 'wireguard').mkdir(parents=True)
    (outside / 'etc' / 'wireguard' / 'wg0.key').write_text('wg private\n')
    (outside / 'etc' / 'other').write_text('not backed up\n')
    settings = {
        'version': 1,
        'state_dir': str(tmp_path / 'state'),
        'metrics_dir': str(tmp_path / 'metrics'),
        'sources': [
            {'name': 'config', 'root': str(config), 'rollback': True},
            {'name': 'keys', 'root': str(outside), 'include': ['etc/wireguard', 'etc/missing']},
        ],
        'keep': {'change': 3, 'offsite': 2},
    }
    (tmp_path / 'metrics').mkdir()
    return tmp_path, settings


def test_a_rollback_puts_back_what_a_change_altered_and_only_that(host):
    tmp_path, settings = host
    engine = backup.Backup(settings)
    before = backup_manifest.build(settings['sources'][0]['root'])
    taken = engine.snapshot('before the change')
    config = tmp_path / 'etc-llm-server'
    (config / 'instances' / 'qwen.json').write_text('{"port": 9999}\n')
    (config / 'instances' / 'new.json').write_text('{}\n')
    (config / 'private' / 'key.pem').unlink()
    os.chmod(config / 'private', 0o755)
    (config / 'current.json').unlink()
    os.symlink('instances/new.json', config / 'current.json')

    done = engine.rollback(engine.find(last=1))

    assert done['from'] == taken['name'] and done['restored'] == ['config']
    assert backup_manifest.build(str(config)) == before
    # The rollback took a snapshot of the state it replaced: the rollback can be undone.
    assert engine.snapshots()[0]['name'] == done['undo']
    assert engine.snapshots()[0]['reason'].startswith('before rolling back')


def test_a_source_of_chosen_paths_is_copied_and_restored_without_touching_the_rest_of_its_root(host):
    tmp_path, settings = host
    settings['sources'][1]['rollback'] = True
    engine = backup.Backup(settings)
    entry = engine.snapshot('keys')
    staged = tmp_path / 'state' / 'snapshots' / entry['name'] / 'keys'
    assert (staged / 'etc' / 'wireguard' / 'wg0.key').read_text() == 'wg private\n'
    assert not (staged / 'etc' / 'other').exists()
    (tmp_path / 'root' / 'etc' / 'wireguard' / 'wg0.key').write_text('changed\n')
    backup.Backup(settings).rollback(entry)
    assert (tmp_path / 'root' / 'etc' / 'wireguard' / 'wg0.key').read_text() == 'wg private\n'
    assert (tmp_path / 'root' / 'etc' / 'other').read_text() == 'not backed up\n'


def test_change_snapshots_are_pruned_to_the_number_kept(host):
    _tmp_path, settings = host
    ticks = iter(range(1_800_000_000, 1_800_000_100))
    engine = backup.Backup(settings, clock=lambda: next(ticks))
    names = [engine.snapshot('change %d' % number)['name'] for number in range(5)]
    assert [entry['name'] for entry in engine.snapshots()] == names[:-4:-1]
    assert sorted(os.listdir(os.path.join(settings['state_dir'], 'snapshots'))) == sorted(names[-3:])


def test_a_staged_copy_is_taken_again_when_the_source_changed_during_the_copy(host, monkeypatch):
    tmp_path, settings = host
    target = tmp_path / 'etc-llm-server' / 'instances' / 'qwen.json'
    copies = []
    real = backup.make_like

    def copy_then_change(*args, **kwargs):
        real(*args, **kwargs)
        copies.append(1)
        if len(copies) == 1:
            target.write_text('{"port": 8002}\n')

    monkeypatch.setattr(backup, 'make_like', copy_then_change)
    source = backup.Source(settings['sources'][0])
    copied = backup.stage(source, str(tmp_path / 'staged'))
    assert len(copies) == 2
    assert copied == source.manifest()
    assert (tmp_path / 'staged' / 'instances' / 'qwen.json').read_text() == '{"port": 8002}\n'


def test_a_source_that_never_holds_still_is_refused(host, monkeypatch):
    tmp_path, settings = host
    target = tmp_path / 'etc-llm-server' / 'instances' / 'qwen.json'
    real = backup.make_like

    def copy_then_change(*args, **kwargs):
        real(*args, **kwargs)
        target.write_text(target.read_text() + 'x')

    monkeypatch.setattr(backup, 'make_like', copy_then_change)
    with pytest.raises(backup.BackupError, match='kept changing during 3 copies'):
        backup.stage(backup.Source(settings['sources'][0]), str(tmp_path / 'staged'))


@pytest.fixture
def offsite(host, tmp_path):
    """The settings with an off-site remote: rclone's crypt over a local folder standing in for the bucket."""
    if RCLONE is None:
        pytest.skip('rclone is not installed (scripts/setup-test-host.sh installs it)')
    _tmp, settings = host
    bucket = tmp_path / 'bucket'
    bucket.mkdir()

    def obscure(text):
        return subprocess.run([RCLONE, 'obscure', text], check=True, capture_output=True, text=True).stdout.strip()

    conf = tmp_path / 'rclone.conf'
    conf.write_text('[llm-backup]\ntype = crypt\nremote = %s\npassword = %s\npassword2 = %s\n'
                    % (bucket, obscure('a long passphrase'), obscure('a salt')))
    settings['offsite'] = {'rclone': RCLONE, 'rclone_config': str(conf), 'remote': 'llm-backup:', 'max_delete': 50}
    return settings, bucket


def _all_names(folder):
    return [name for _folder, dirs, names in os.walk(folder) for name in dirs + names]


@needs_rclone
def test_the_offsite_copy_is_encrypted_and_a_drill_restores_it_byte_for_byte_with_a_deleted_file(offsite, tmp_path):
    settings, bucket = offsite
    config = tmp_path / 'etc-llm-server'
    engine = backup.Backup(settings)
    first = engine.copy_offsite()
    assert first['result'] == 'ok' and first['sources']['config']['files'] == 2
    # Names and contents are encrypted: nothing in the bucket says qwen or holds the key's text.
    assert not [name for name in _all_names(bucket) if 'qwen' in name or 'key' in name or 'current' in name]
    for folder, _dirs, names in os.walk(bucket):
        for name in names:
            assert b'secret' not in (open(os.path.join(folder, name), 'rb').read())

    (config / 'private' / 'key.pem').unlink()
    (config / 'instances' / 'qwen.json').write_text('{"port": 8003}\n')
    second = engine.copy_offsite()
    assert second['sources']['config']['deleted'] == ['private/key.pem']
    assert second['sources']['config']['overwritten'] == ['instances/qwen.json']

    report = engine.drill(into=str(tmp_path / 'drill'))
    assert report['result'] == 'ok', report
    assert report['sources']['config']['differences'] == []
    assert report['history'] == {'path': 'private/key.pem', 'source': 'config', 'stamp': second['stamp'],
                                 'result': 'ok'}
    restored = tmp_path / 'drill' / 'config'
    assert backup_manifest.build(str(restored)) == backup_manifest.build(str(config))
    assert os.readlink(restored / 'current.json') == 'instances/qwen.json'
    assert (restored / 'empty').is_dir()
    assert (tmp_path / 'drill' / '.history' / 'config' / 'private' / 'key.pem').read_text() == 'secret\n'

    metrics = (tmp_path / 'metrics' / 'llm_backup.prom').read_text()
    assert 'llm_backup_offsite_last_result 1\n' in metrics
    assert 'llm_backup_drill_last_result 1\n' in metrics
    assert 'llm_backup_offsite_last_success_timestamp_seconds %d' % int(second['attempt']) in metrics or \
        'llm_backup_offsite_last_success_timestamp_seconds %s' % second['attempt'] in metrics


@needs_rclone
def test_a_drill_finds_a_copy_that_lost_a_file(offsite, tmp_path):
    settings, bucket = offsite
    engine = backup.Backup(settings)
    engine.copy_offsite()
    # Remove one encrypted object behind rclone's back: the copy is no longer whole.
    victims = [os.path.join(folder, name) for folder, _dirs, names in os.walk(bucket) for name in names
               if len(names) == 1 and folder.count(os.sep) > str(bucket).count(os.sep) + 2]
    assert victims
    os.unlink(victims[0])
    report = engine.drill()
    assert report['result'] == 'failed'
    assert 'missing from the restored copy' in report['error'] or report['sources']['config']['differences']


@needs_rclone
def test_a_sampled_drill_checks_one_part_and_a_fresh_host_restores_with_the_remote_manifests_alone(offsite, tmp_path):
    settings, _bucket = offsite
    engine = backup.Backup(settings)
    engine.copy_offsite()
    report = engine.drill(sample=True, parts=2)
    assert report['result'] == 'ok' and report['mode'] == 'sample' and report['parts'] == 2
    total = len(backup_manifest.build(str(tmp_path / 'etc-llm-server')))
    assert 0 < report['sources']['config']['checked'] < total

    # A fresh host: no records, no manifests; only the settings and the remote's secrets.
    settings = dict(settings, state_dir=str(tmp_path / 'fresh-state'))
    restored, _phases = backup.Backup(settings).restore(str(tmp_path / 'fresh'))
    assert restored['config']['files'] == 2
    assert backup_manifest.build(str(tmp_path / 'fresh' / 'config')) == \
        backup_manifest.build(str(tmp_path / 'etc-llm-server'))
    assert (tmp_path / 'fresh' / 'keys' / 'etc' / 'wireguard' / 'wg0.key').read_text() == 'wg private\n'


@needs_rclone
def test_an_empty_source_never_replaces_the_offsite_copy(offsite, tmp_path):
    settings, bucket = offsite
    engine = backup.Backup(settings)
    engine.copy_offsite()
    before = _all_names(bucket)
    config = tmp_path / 'etc-llm-server'
    shutil.rmtree(config)
    config.mkdir()
    with pytest.raises(backup.BackupError, match='config .* holds no file: refusing to sync'):
        engine.copy_offsite()
    assert _all_names(bucket) == before
    runs = json.loads((tmp_path / 'state' / 'offsite.json').read_text())
    assert runs['runs'][-1]['result'] == 'failed' and runs['last_success']['result'] == 'ok'
    assert 'llm_backup_offsite_last_result 0' in engine.metrics()


@needs_rclone
def test_a_name_too_long_to_encrypt_is_named_before_anything_is_copied(offsite, tmp_path):
    settings, bucket = offsite
    (tmp_path / 'etc-llm-server' / ('n' * 150)).write_text('x')
    with pytest.raises(backup.BackupError, match='names longer than 143 bytes cannot be encrypted'):
        backup.Backup(settings).copy_offsite()
    assert _all_names(bucket) == []


def test_the_command_line_lists_snapshots_and_refuses_a_bad_rollback(host, capsys):
    tmp_path, settings = host
    path = tmp_path / 'backup.json'
    path.write_text(json.dumps(settings))
    assert backup.main(['--settings', str(path), 'snapshot', '--reason', 'site.yml']) == 0
    entry = json.loads(capsys.readouterr().out)
    assert backup.main(['--settings', str(path), 'list']) == 0
    listing = capsys.readouterr().out
    assert entry['name'] in listing and 'site.yml' in listing
    assert backup.main(['--settings', str(path), 'rollback', '--last', '5']) == backup.EXIT_ERROR
    assert 'there are 1 change snapshots' in capsys.readouterr().err
    path.write_text(json.dumps(dict(settings, version=2)))
    assert backup.main(['--settings', str(path), 'list']) == backup.EXIT_ERROR
    assert 'version must be 1' in capsys.readouterr().err


def test_a_snapshot_if_changed_is_taken_only_after_a_change_and_covers_the_rollback_sources(host):
    tmp_path, settings = host
    ticks = iter(range(1_800_000_000, 1_800_000_100))
    engine = backup.Backup(settings, clock=lambda: next(ticks))
    first = engine.snapshot('site.yml', if_changed=True)
    assert first['sources'] == {'config': 'staged'}
    again = engine.snapshot('site.yml', if_changed=True)
    assert again['reused'] and again['name'] == first['name']
    (tmp_path / 'etc-llm-server' / 'instances' / 'qwen.json').write_text('{"port": 8004}\n')
    third = engine.snapshot('site.yml', if_changed=True)
    assert 'reused' not in third and third['name'] != first['name']
    assert [entry['name'] for entry in engine.snapshots()] == [third['name'], first['name']]


@needs_rclone
def test_a_source_that_never_held_a_file_is_skipped_not_refused(offsite, tmp_path):
    settings, _bucket = offsite
    settings['sources'].append({'name': 'models', 'root': str(tmp_path / 'store'), 'include': ['manifests']})
    engine = backup.Backup(settings)
    record = engine.copy_offsite()
    assert record['result'] == 'ok'
    assert record['sources']['models'] == {'files': 0, 'bytes': 0, 'deleted': [], 'overwritten': [],
                                           'skipped': 'holds no file'}
    report = engine.drill()
    assert report['result'] == 'ok' and sorted(report['sources']) == ['config', 'keys']


@needs_rclone
def test_a_restore_in_place_puts_the_copy_back_on_a_new_disk_and_keeps_what_is_there(offsite, tmp_path):
    settings, _bucket = offsite
    backup.Backup(settings).copy_offsite()
    before = backup_manifest.build(str(tmp_path / 'etc-llm-server'))
    # A new disk: the trees are gone; the role already wrote its settings again.
    shutil.rmtree(tmp_path / 'etc-llm-server')
    shutil.rmtree(tmp_path / 'root' / 'etc' / 'wireguard')
    (tmp_path / 'etc-llm-server').mkdir()
    (tmp_path / 'etc-llm-server' / 'backup.json').write_text('{}\n')
    fresh = dict(settings, state_dir=str(tmp_path / 'new-state'))
    restored, _phases = backup.Backup(fresh).restore_in_place()
    assert sorted(restored) == ['config', 'keys']
    after = backup_manifest.build(str(tmp_path / 'etc-llm-server'))
    assert after.pop('backup.json')['type'] == 'file'
    assert after == before
    assert (tmp_path / 'root' / 'etc' / 'wireguard' / 'wg0.key').read_text() == 'wg private\n'
    assert (tmp_path / 'root' / 'etc' / 'other').read_text() == 'not backed up\n'


@needs_rclone
def test_check_restore_finds_what_changed_since_the_restore_in_place_and_lists_what_may(offsite, tmp_path):
    settings, _bucket = offsite
    backup.Backup(settings).copy_offsite()
    shutil.rmtree(tmp_path / 'etc-llm-server')
    fresh = backup.Backup(dict(settings, state_dir=str(tmp_path / 'new-state')))
    with pytest.raises(backup.BackupError, match='nothing was restored in place on this host'):
        fresh.check_restored()
    fresh.restore_in_place()
    # The roles ran since: they wrote a file of their own and found the restored ones as they would write them.
    (tmp_path / 'etc-llm-server' / 'instances' / 'other.json').write_text('{}\n')
    assert fresh.check_restored() == {'restored_at': fresh.check_restored()['restored_at'], 'result': 'ok',
                                      'changed_as_expected': [],
                                      'sources': {'config': {'checked': 7, 'differences': []},
                                                  'keys': {'checked': 4, 'differences': []}}}
    # One role wrote a restored file again, another changed a key's mode, a third removed a link.
    (tmp_path / 'etc-llm-server' / 'instances' / 'qwen.json').write_text('{"port": 8002}\n')
    os.chmod(tmp_path / 'root' / 'etc' / 'wireguard' / 'wg0.key', 0o640)
    (tmp_path / 'etc-llm-server' / 'current.json').unlink()
    report = fresh.check_restored(may_change=['config:instances/*.json'])
    assert report['result'] == 'failed'
    assert report['error'] == 'restored files changed since the restore in config, keys'
    assert [(found['source'], found['path']) for found in report['changed_as_expected']] == [
        ('config', 'instances/qwen.json')]
    assert report['sources']['config']['differences'] == [{'path': 'current.json', 'problem': 'missing'}]
    assert report['sources']['keys']['differences'] == [
        {'path': 'etc/wireguard/wg0.key', 'problem': 'differs', 'fields': {'mode': {'expected': '0644', 'found': '0640'}}}]
    # The command line: the report, and exit 1 while anything unexpected differs.
    settings_file = tmp_path / 'fresh.json'
    settings_file.write_text(json.dumps(dict(settings, state_dir=str(tmp_path / 'new-state'))))
    assert backup.main(['--settings', str(settings_file), 'check-restore', '--may-change', 'config:*']) == 1
    os.chmod(tmp_path / 'root' / 'etc' / 'wireguard' / 'wg0.key', 0o644)
    assert backup.main(['--settings', str(settings_file), 'check-restore', '--may-change', 'config:*']) == 0


@needs_rclone
def test_a_refused_source_stops_the_copy_before_any_source_is_sent_and_stays_refused(offsite, tmp_path):
    settings, bucket = offsite
    engine = backup.Backup(settings)
    engine.copy_offsite()
    before = sorted(_all_names(bucket))
    (tmp_path / 'etc-llm-server' / 'instances' / 'qwen.json').write_text('{"port": 9000}\n')
    shutil.rmtree(tmp_path / 'root' / 'etc' / 'wireguard')
    for _attempt in range(2):
        with pytest.raises(backup.BackupError, match='keys .* holds no file: refusing to sync'):
            engine.copy_offsite()
    # The changed configuration was not sent either: the run stopped before any sync.
    assert sorted(_all_names(bucket)) == before


@needs_rclone
def test_a_copy_without_a_change_sends_nothing_and_moves_nothing_to_history(offsite, tmp_path):
    settings, bucket = offsite
    engine = backup.Backup(settings)
    engine.copy_offsite()

    def objects():
        return {os.path.join(folder, name): os.stat(os.path.join(folder, name)).st_mtime_ns
                for folder, _dirs, names in os.walk(bucket) for name in names}

    before = objects()
    second = engine.copy_offsite()
    assert second['result'] == 'ok'
    # The staged snapshot keeps each file's time, so rclone finds every object already there.
    assert objects() == before
