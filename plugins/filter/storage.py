# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the storage role: its ZFS settings judged before any change."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils import _storage


def storage_errors(settings):
    """What is wrong with the storage role's settings; [] when nothing is."""
    if not isinstance(settings, dict):
        raise AnsibleFilterError('storage_errors: expects a dict of storage settings')
    return _storage.storage_errors(settings)


def zfs_properties(properties):
    """ZFS properties as `zfs get -p` writes them: strings, sizes in bytes."""
    if not isinstance(properties, dict):
        raise AnsibleFilterError('zfs_properties: expects a dict of ZFS properties')
    return _storage.zfs_properties(properties)


def zfs_option_args(options, flag='-o'):
    """zpool create's arguments for a dict of properties: ['-o', 'name=value', ...]."""
    if not isinstance(options, dict) or flag not in ('-o', '-O'):
        raise AnsibleFilterError('zfs_option_args: expects a dict of properties and the flag -o or -O')
    return _storage.zfs_option_args(options, flag)


class FilterModule(object):
    """Storage filters."""

    def filters(self):
        return {
            'storage_errors': storage_errors,
            'zfs_option_args': zfs_option_args,
            'zfs_properties': zfs_properties,
        }
