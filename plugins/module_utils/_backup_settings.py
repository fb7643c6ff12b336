# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The backup role's settings: their checks before any change, and the sources as llm-backup reads them."""

from __future__ import annotations

import posixpath
import re

_NAME = re.compile(r'^[a-z][a-z0-9_-]{0,31}$')
_REMOTE = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_. -]*[A-Za-z0-9_.-]$|^[A-Za-z0-9_]$')
_FOLDER = re.compile(r'^(?!\.{1,2}$)[A-Za-z0-9_.-]+$')
# rclone's --bwlimit: a rate, or a timetable of "HH:MM,RATE" (and "Mon-HH:MM,RATE") entries.
_RATE = r'(off|[0-9]+(\.[0-9]+)?[BKMGTP]?(:[0-9]+(\.[0-9]+)?[BKMGTP]?)?)'
_BWLIMIT = re.compile(r'^(%s|((Mon|Tue|Wed|Thu|Fri|Sat|Sun)-)?[0-2][0-9]:[0-5][0-9],%s'
                      r'( ((Mon|Tue|Wed|Thu|Fri|Sat|Sun)-)?[0-2][0-9]:[0-5][0-9],%s)*)$' % (_RATE, _RATE, _RATE),
                      re.IGNORECASE)


def _whole(value, least):
    if isinstance(value, bool):
        return False
    try:
        return int(value) >= least and str(int(value)) == str(value).strip()
    except (TypeError, ValueError):
        return False


def _covers(root, include, path):
    """Whether the tree ROOT (or its INCLUDE paths) holds PATH."""
    roots = [posixpath.join(root, part) for part in include] if include else [root]
    for top in roots:
        top = top.rstrip('/') or '/'
        if path == top or path.startswith(top.rstrip('/') + '/'):
            return True
    return False


def source_errors(sources, state_dir):
    errors = []
    if not isinstance(sources, list) or not sources:
        return ['backup_sources must be a list of at least one source: {name, root, include, rollback, offsite}.']
    names = set()
    for index, source in enumerate(sources):
        if not isinstance(source, dict):
            errors.append('backup_sources[%d] must be a dict with name and root.' % index)
            continue
        name = source.get('name')
        where = "backup_sources '%s'" % name if isinstance(name, str) else 'backup_sources[%d]' % index
        if not isinstance(name, str) or not _NAME.match(name):
            errors.append('%s: name must be 1 to 32 lower case letters, digits, _ or -, starting with a letter.'
                          % where)
        elif name in names:
            errors.append('%s is named twice.' % where)
        names.add(name)
        root = source.get('root')
        if not isinstance(root, str) or not root.startswith('/'):
            errors.append('%s: root %r must be an absolute path.' % (where, root))
            continue
        include = source.get('include')
        if include is not None:
            if not isinstance(include, list) or not include:
                errors.append('%s: include must be a list of paths under root (or left out for all of it).' % where)
                continue
            for part in include:
                if (not isinstance(part, str) or part.startswith('/') or not part
                        or '..' in part.split('/') or part != posixpath.normpath(part)):
                    errors.append("%s: include '%s' must be a path relative to root %s, without .. or a leading /."
                                  % (where, part, root))
        elif root == '/':
            errors.append('%s: a source whose root is / must name its paths in include.' % where)
        if isinstance(state_dir, str) and _covers(root, include or [], state_dir):
            errors.append('%s holds backup_state_dir %s: llm-backup keeps its records and manifests outside the '
                          'backup. Move one of them.' % (where, state_dir))
        for flag in ('rollback', 'offsite'):
            if flag in source and not isinstance(source[flag], bool):
                errors.append('%s: %s must be true or false.' % (where, flag))
    return errors


def offsite_errors(settings):
    errors = []
    remotes = settings.get('remotes')
    name = settings.get('remote')
    if not isinstance(remotes, dict) or not remotes:
        return ['backup_offsite_remotes must define the rclone remotes (name: {type: ..., ...}) when '
                'backup_offsite_enabled is true.']
    if name not in remotes:
        return ["backup_offsite_remote '%s' is not one of backup_offsite_remotes (%s)."
                % (name, ', '.join(sorted(remotes)))]
    for remote_name, remote in remotes.items():
        if not isinstance(remote_name, str) or not _REMOTE.match(remote_name):
            errors.append("backup_offsite_remotes: '%s' is not an rclone remote name (letters, digits, _ . - and "
                          'spaces inside).' % (remote_name,))
        if not isinstance(remote, dict) or not remote.get('type'):
            errors.append("backup_offsite_remotes '%s' needs a type (s3, crypt, ...)." % remote_name)
            continue
        for key, value in remote.items():
            if not isinstance(value, (str, int, bool)) or '\n' in str(value):
                errors.append("backup_offsite_remotes '%s': %s must be one line of text." % (remote_name, key))
    folder = settings.get('folder')
    if folder is not None and (not isinstance(folder, str) or not _FOLDER.match(folder)):
        errors.append('backup_offsite_folder %r must be one folder name in the bucket (letters, digits, _ . -; '
                      'the host name by default), so that no host writes into another\'s copies.' % (folder,))
    remote = remotes[name]
    if settings.get('encrypt'):
        if not isinstance(remote, dict) or remote.get('type') != 'crypt':
            errors.append("backup_offsite_remote '%s' is an rclone remote of type %s, which copies in the clear, "
                          'while backup_offsite_encrypt is true: name a remote of type crypt whose remote is the '
                          'bucket (the default backup_offsite_remotes shows one), or set backup_offsite_encrypt: '
                          'false to copy unencrypted.' % (name, remote.get('type') if isinstance(remote, dict)
                                                          else 'unknown'))
        else:
            if remote.get('filename_encryption', 'standard') != 'standard':
                errors.append("backup_offsite_remotes '%s': filename_encryption must be standard (names encrypted) "
                              'while backup_offsite_encrypt is true.' % name)
            if str(remote.get('directory_name_encryption', 'true')).lower() != 'true':
                errors.append("backup_offsite_remotes '%s': directory_name_encryption must be true while "
                              'backup_offsite_encrypt is true.' % name)
            for key, vault in (('password', 'vault_backup_crypt_password'), ('password2', 'vault_backup_crypt_salt')):
                if not remote.get(key):
                    errors.append("backup_offsite_remotes '%s' needs %s (from the vault, e.g. %s): without it "
                                  'nothing can be decrypted.' % (name, key, vault))
            below = str(remote.get('remote', ''))
            if ':' in below and below.split(':', 1)[0] not in remotes:
                errors.append("backup_offsite_remotes '%s': its remote %s names no remote of "
                              'backup_offsite_remotes.' % (name, below))
    if not _whole(settings.get('max_delete'), 1):
        errors.append('backup_offsite_max_delete %r must be a whole number of files, 1 or more.'
                      % (settings.get('max_delete'),))
    bwlimit = settings.get('bwlimit') or ''
    if bwlimit and not _BWLIMIT.match(str(bwlimit)):
        errors.append("backup_offsite_bwlimit '%s' is not rclone's --bwlimit: a rate (10M) or a timetable such as "
                      "'08:00,2M 23:00,off'." % bwlimit)
    return errors


def backup_errors(settings):
    """One message per mistake in the backup role's settings, naming the variable and the fix."""
    errors = []
    state_dir = settings.get('state_dir')
    if not isinstance(state_dir, str) or not state_dir.startswith('/') or state_dir.rstrip('/') == '':
        errors.append('backup_state_dir %r must be an absolute path other than /.' % (state_dir,))
    errors += source_errors(settings.get('sources'), state_dir)
    if not _whole(settings.get('change_keep'), 1):
        errors.append('backup_change_snapshots_keep %r must be a whole number, 1 or more.'
                      % (settings.get('change_keep'),))
    if not _whole(settings.get('drill_parts'), 1):
        errors.append('backup_drill_parts %r must be a whole number, 1 or more (1: every weekly drill checks every '
                      'file).' % (settings.get('drill_parts'),))
    for name in ('offsite_schedule', 'drill_schedule'):
        value = settings.get(name)
        if not isinstance(value, str) or not value.strip() or '\n' in value:
            errors.append('backup_%s %r must be a systemd calendar expression such as daily or *-*-* 03:30:00.'
                          % (name, value))
    if settings.get('offsite_enabled'):
        errors += offsite_errors(settings)
    return errors


def backup_sources(sources, zfs_mounts):
    """SOURCES for llm-backup's settings, each with the dataset mounted exactly at its root (from the lines of
    `zfs list -H -o name,mountpoint,mounted`), or none: a staged copy."""
    mounted = {}
    for line in zfs_mounts or []:
        fields = line.split('\t')
        if len(fields) == 3 and fields[2] == 'yes' and fields[1].startswith('/'):
            mounted[fields[1].rstrip('/') or '/'] = fields[0]
    result = []
    for source in sources:
        entry = {'name': source['name'], 'root': source['root'], 'rollback': bool(source.get('rollback', False)),
                 'offsite': bool(source.get('offsite', True))}
        if source.get('include'):
            entry['include'] = list(source['include'])
        else:
            entry['dataset'] = mounted.get(source['root'].rstrip('/') or '/')
        result.append(entry)
    return result


def restore_drill_lines(report):
    """The restore drill's report (llm-backup drill's JSON) as lines of a table, for the play's output."""
    mode = report.get('mode', 'full')
    if mode == 'sample':
        mode = 'part %s of %s' % (int(report.get('part', 0)) + 1, report.get('parts', '?'))
    lines = ['restore drill of the copy %s (%s): %s in %.1f s' % (report.get('stamp', '-'), mode,
                                                                  report.get('result', '?'),
                                                                  float(report.get('seconds', 0)))]
    if report.get('error'):
        lines.append('error: %s' % report['error'])
    phases = report.get('phases', {})
    header = ('source', 'files', 'bytes', 'checked', 'diffs', 'restore s', 'check s')
    lines.append('%-12s %7s %12s %8s %6s %9s %8s' % header)
    for name, found in sorted(report.get('sources', {}).items()):
        lines.append('%-12s %7d %12d %8d %6d %9.2f %8.2f' % (
            name, found.get('files', 0), found.get('bytes', 0), found.get('checked', 0),
            len(found.get('differences', [])), float(phases.get('restore %s' % name, 0)),
            float(phases.get('check %s' % name, 0))))
        for difference in found.get('differences', [])[:5]:
            lines.append('  %s: %s' % (difference.get('path'), difference.get('problem')))
    history = report.get('history') or {}
    if history.get('path'):
        lines.append('history: %s/%s from the copy of %s: %s (%.2f s)' % (
            history.get('source'), history['path'], history.get('stamp'), history.get('result'),
            float(phases.get('history', 0))))
    elif history:
        lines.append('history: %s (%s)' % (history.get('result'), history.get('why', '')))
    return lines


def restore_check_lines(report):
    """llm-backup check-restore's report (what site.yml did to the files an in-place restore put back) as lines."""
    lines = ['restored files after site.yml: %s' % report.get('result', '?')]
    if report.get('error'):
        lines.append('error: %s' % report['error'])
    lines.append('%-12s %8s %8s' % ('source', 'checked', 'changed'))
    for name, found in sorted(report.get('sources', {}).items()):
        lines.append('%-12s %8d %8d' % (name, found.get('checked', 0), len(found.get('differences', []))))
        for difference in found.get('differences', [])[:5]:
            lines.append('  %s: %s %s' % (difference.get('path'), difference.get('problem'),
                                          ', '.join(sorted(difference.get('fields', {})))))
    for difference in report.get('changed_as_expected', []):
        lines.append('changed as expected: %s/%s' % (difference.get('source'), difference.get('path')))
    return [line.rstrip() for line in lines]
