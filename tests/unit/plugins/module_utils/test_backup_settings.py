# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The backup role's checks before any change, its sources for llm-backup, and the drill's table."""

from __future__ import annotations

import copy
import os

import yaml

from ansible_collections.homelab.llm_server.plugins.module_utils import _backup_settings

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))

SECRET = 'correct horse battery staple'


def defaults():
    with open(os.path.join(REPO_ROOT, 'roles', 'backup', 'defaults', 'main.yml'), encoding='utf-8') as handle:
        return yaml.safe_load(handle)


def settings(**changes):
    role = defaults()
    remotes = copy.deepcopy(role['backup_offsite_remotes'])
    remotes['llm-backup']['password'] = SECRET
    remotes['llm-backup']['password2'] = 'salt ' + SECRET
    base = {
        'state_dir': role['backup_state_dir'], 'sources': role['backup_sources'],
        'change_keep': role['backup_change_snapshots_keep'], 'drill_parts': role['backup_drill_parts'],
        'offsite_schedule': role['backup_offsite_schedule'], 'drill_schedule': role['backup_drill_schedule'],
        'offsite_enabled': True, 'encrypt': True, 'remote': role['backup_offsite_remote'], 'remotes': remotes,
        'max_delete': role['backup_offsite_max_delete'], 'bwlimit': role['backup_offsite_bwlimit'],
    }
    base.update(changes)
    return base


def test_the_role_defaults_with_the_vault_secrets_are_right():
    assert _backup_settings.backup_errors(settings()) == []
    assert _backup_settings.backup_errors(settings(offsite_enabled=False, remotes={})) == []


def test_an_unencrypted_remote_while_encryption_is_on_is_refused_without_quoting_a_secret():
    remotes = settings()['remotes']
    errors = _backup_settings.backup_errors(settings(remote='llm-backup-s3'))
    assert errors == ["backup_offsite_remote 'llm-backup-s3' is an rclone remote of type s3, which copies in the "
                      'clear, while backup_offsite_encrypt is true: name a remote of type crypt whose remote is the '
                      'bucket (the default backup_offsite_remotes shows one), or set backup_offsite_encrypt: false '
                      'to copy unencrypted.']
    assert _backup_settings.backup_errors(settings(remote='llm-backup-s3', encrypt=False)) == []
    remotes['llm-backup']['filename_encryption'] = 'off'
    remotes['llm-backup']['password2'] = ''
    errors = _backup_settings.backup_errors(settings(remotes=remotes))
    assert errors == ["backup_offsite_remotes 'llm-backup': filename_encryption must be standard (names encrypted) "
                      'while backup_offsite_encrypt is true.',
                      "backup_offsite_remotes 'llm-backup' needs password2 (from the vault, e.g. "
                      'vault_backup_crypt_salt): without it nothing can be decrypted.']
    assert not [error for error in errors if SECRET in error]


def test_a_missing_remote_a_wrong_timetable_and_bad_numbers_are_named():
    assert _backup_settings.backup_errors(settings(remote='elsewhere')) == [
        "backup_offsite_remote 'elsewhere' is not one of backup_offsite_remotes (llm-backup, llm-backup-s3)."]
    errors = _backup_settings.backup_errors(settings(bwlimit='fast at night', max_delete='all', change_keep=0,
                                            drill_parts='four', drill_schedule=''))
    assert any(e.startswith("backup_offsite_bwlimit 'fast at night' is not rclone's --bwlimit") for e in errors)
    assert "backup_offsite_max_delete 'all' must be a whole number of files, 1 or more." in errors
    assert 'backup_change_snapshots_keep 0 must be a whole number, 1 or more.' in errors
    assert any(e.startswith("backup_drill_parts 'four' must be a whole number") for e in errors)
    assert any(e.startswith("backup_drill_schedule '' must be a systemd calendar expression") for e in errors)
    assert _backup_settings.backup_errors(settings(bwlimit='10M')) == []
    assert _backup_settings.backup_errors(settings(bwlimit='Mon-08:00,512k Sat-00:00,off')) == []


def test_the_folder_in_the_bucket_is_one_name_and_never_reaches_another_hosts():
    assert _backup_settings.backup_errors(settings(folder='llm-home')) == []
    assert _backup_settings.backup_errors(settings(folder='old.llm-home_2')) == []
    for wrong in ('', '..', 'llm-home/../edge-vps', '/llm-home', 'two words'):
        assert _backup_settings.backup_errors(settings(folder=wrong)) == [
            'backup_offsite_folder %r must be one folder name in the bucket (letters, digits, _ . -; the host name '
            "by default), so that no host writes into another's copies." % (wrong,)], wrong


def test_sources_are_named_once_with_relative_paths_and_never_hold_the_state_directory():
    errors = _backup_settings.backup_errors(settings(sources=[
        {'name': 'config', 'root': '/etc/llm-server'},
        {'name': 'config', 'root': 'var/lib'},
        {'name': 'Keys', 'root': '/', 'include': ['/etc/wireguard', 'etc/../root']},
        {'name': 'all', 'root': '/'},
        {'name': 'state', 'root': '/var/lib'},
    ]))
    assert "backup_sources 'config' is named twice." in errors
    assert "backup_sources 'config': root 'var/lib' must be an absolute path." in errors
    assert any(e.startswith("backup_sources 'Keys': name must be") for e in errors)
    assert "backup_sources 'Keys': include '/etc/wireguard' must be a path relative to root /, without .. or a " \
           'leading /.' in errors
    assert "backup_sources 'all': a source whose root is / must name its paths in include." in errors
    assert "backup_sources 'state' holds backup_state_dir /var/lib/llm-backup: llm-backup keeps its records and " \
           'manifests outside the backup. Move one of them.' in errors


def test_a_source_on_a_mounted_dataset_is_snapshotted_by_zfs_and_any_other_is_staged():
    lines = ['tank\tnone\tno', 'tank/llm-server/config\t/etc/llm-server\tyes',
             'tank/llm-server/state\t/var/lib/llm-server\tno', 'tank/llm-server/models\t/srv/models\tyes']
    sources = _backup_settings.backup_sources(defaults()['backup_sources'], lines)
    assert [(s['name'], s.get('dataset'), s['rollback'], s['offsite']) for s in sources] == [
        ('config', 'tank/llm-server/config', True, True),
        ('state', None, True, True),
        ('keys', None, False, True),
        ('models', None, False, True),
    ]
    assert sources[3]['include'] == ['manifests']
    assert _backup_settings.backup_sources(defaults()['backup_sources'], [])[0]['dataset'] is None


def test_the_drill_report_reads_as_a_table():
    report = {'stamp': '2026-11-29T074500Z', 'mode': 'sample', 'part': 1, 'parts': 4, 'result': 'ok',
              'seconds': 3.25, 'phases': {'restore config': 1.5, 'check config': 0.25, 'history': 0.5},
              'sources': {'config': {'files': 12, 'bytes': 3456, 'checked': 5, 'differences': []}},
              'history': {'path': 'a.json', 'source': 'config', 'stamp': '2026-11-29T074500Z', 'result': 'ok'}}
    lines = _backup_settings.restore_drill_lines(report)
    assert lines[0] == 'restore drill of the copy 2026-11-29T074500Z (part 2 of 4): ok in 3.2 s'
    assert lines[2].split() == ['config', '12', '3456', '5', '0', '1.50', '0.25']
    assert lines[3] == 'history: config/a.json from the copy of 2026-11-29T074500Z: ok (0.50 s)'
    failed = dict(report, result='failed', error='differences in config',
                  sources={'config': {'files': 1, 'bytes': 1, 'checked': 1,
                                      'differences': [{'path': 'x', 'problem': 'missing'}]}},
                  history={'result': 'skipped', 'why': 'no file was deleted'})
    lines = _backup_settings.restore_drill_lines(failed)
    assert 'error: differences in config' in lines and '  x: missing' in lines
    assert lines[-1] == 'history: skipped (no file was deleted)'


def test_the_check_of_the_restored_files_reads_as_a_table():
    report = {'result': 'failed', 'error': 'restored files changed since the restore in config',
              'sources': {'config': {'checked': 9, 'differences': [
                  {'path': 'tls/proxy.key', 'problem': 'differs',
                   'fields': {'sha256': {}, 'size': {}}}]},
                  'state': {'checked': 4, 'differences': []}},
              'changed_as_expected': [{'source': 'state', 'path': 'releases/tiny.bench.json', 'problem': 'differs'}]}
    assert _backup_settings.restore_check_lines(report) == [
        'restored files after site.yml: failed',
        'error: restored files changed since the restore in config',
        'source        checked  changed',
        'config              9        1',
        '  tls/proxy.key: differs sha256, size',
        'state               4        0',
        'changed as expected: state/releases/tiny.bench.json',
    ]
