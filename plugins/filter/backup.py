# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the backup role: its settings judged before any change, the sources as llm-backup reads them,
the restore drill's table, and a crypt remote's secrets in rclone's obscured form for rclone.conf."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _backup_settings, _rclone


def _kind(value):
    """What a value is, in the words of YAML (Ansible hands over its own list and dict types)."""
    if value is None:
        return 'null'
    if isinstance(value, bool):
        return 'a boolean'
    if isinstance(value, (int, float)):
        return 'a number (quote a numeric secret in YAML)'
    if isinstance(value, (bytes, bytearray)):
        return 'bytes'
    if isinstance(value, Mapping):
        return 'a dict'
    if isinstance(value, Sequence):
        return 'a list'
    return type(value).__name__


def rclone_obscure(secret):
    """``secret`` obscured as rclone.conf wants a crypt remote's password or salt; the same for the same secret."""
    # The message never quotes the value: it is a secret.
    if not isinstance(secret, str):
        raise AnsibleFilterError('rclone_obscure: expects the secret as a string, got %s' % _kind(secret))
    if not secret:
        raise AnsibleFilterError('rclone_obscure: the secret is empty (a crypt remote needs a password and a salt; '
                                 'give them from the vault)')
    if not _rclone.HAS_CRYPTOGRAPHY:
        raise AnsibleFilterError('rclone_obscure: needs the Python library cryptography on the controller '
                                 '(pip install cryptography): %s' % _rclone.CRYPTOGRAPHY_IMPORT_ERROR)
    try:
        return _rclone.obscure(secret)
    except UnicodeEncodeError as err:
        raise AnsibleFilterError('rclone_obscure: the secret is not valid text (%s)' % err.reason) from err


def backup_errors(settings):
    """What is wrong with the backup role's settings; [] when nothing is."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError('backup_errors: expects a dict of backup settings')
    return _backup_settings.backup_errors(settings)


def backup_sources(sources, zfs_mounts=None):
    """The sources, each with the ZFS dataset mounted at its root (or none)."""
    if not isinstance(sources, list):
        raise AnsibleFilterError('backup_sources: expects the list of backup_sources')
    return _backup_settings.backup_sources(sources, zfs_mounts or [])


def restore_drill_lines(report):
    """The restore drill's report as lines of a table."""
    if not isinstance(report, dict):
        raise AnsibleFilterError('restore_drill_lines: expects the report of llm-backup drill (a dict)')
    return _backup_settings.restore_drill_lines(report)


def restore_check_lines(report):
    """llm-backup check-restore's report as lines of a table."""
    if not isinstance(report, dict):
        raise AnsibleFilterError('restore_check_lines: expects the report of llm-backup check-restore (a dict)')
    return _backup_settings.restore_check_lines(report)


class FilterModule(object):
    """Backup filters."""

    def filters(self):
        return {
            'backup_errors': backup_errors,
            'backup_sources': backup_sources,
            'rclone_obscure': rclone_obscure,
            'restore_check_lines': restore_check_lines,
            'restore_drill_lines': restore_drill_lines,
        }
