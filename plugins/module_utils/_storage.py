# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checks of the storage role's settings (ZFS pool, datasets, snapshot retention) before any change."""

from __future__ import annotations

import re

# zpool(8): a pool name starts with a letter; these words name vdev types, not pools.
_POOL = re.compile(r'^[A-Za-z][A-Za-z0-9_.:-]{0,63}$')
_RESERVED = ('mirror', 'raidz', 'spare', 'log', 'cache', 'draid')
_DATASET_PART = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$')
# sanoid.conf's retention keys, in its order.
PERIODS = ('frequently', 'hourly', 'daily', 'weekly', 'monthly', 'yearly')
VDEVS = ('stripe', 'mirror')


def _count(value):
    """VALUE as a whole number of snapshots, or None (a bool is not a number here)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _under(path, root):
    path, root = path.rstrip('/') or '/', root.rstrip('/') or '/'
    return path == root or path.startswith(root + '/') or root.startswith(path + '/')


def template_errors(templates):
    errors = []
    if not isinstance(templates, dict):
        return ['storage_snapshot_templates must be a dict of template name to retention, e.g. '
                '{config: {hourly: 48, daily: 30, monthly: 6}}.']
    for name, retention in templates.items():
        if not isinstance(retention, dict):
            errors.append('storage_snapshot_templates.%s must be a dict such as {hourly: 48, daily: 30}.' % name)
            continue
        for period, value in retention.items():
            if period not in PERIODS:
                errors.append('storage_snapshot_templates.%s.%s: sanoid keeps only %s snapshots.'
                              % (name, period, ', '.join(PERIODS)))
            elif _count(value) is None:
                errors.append('storage_snapshot_templates.%s.%s %r must be a whole number of snapshots (0 or more): '
                              'sanoid keeps that many and prunes older ones by age.' % (name, period, value))
    return errors


def storage_errors(settings):
    """One message per mistake in the storage role's settings, naming the variable and the fix."""
    errors = []
    pool = settings.get('pool') or ''
    datasets = settings.get('datasets') or []
    templates = settings.get('templates') or {}
    errors += template_errors(templates)
    if not pool:
        if settings.get('create'):
            errors.append('storage_zfs_pool_create is true but storage_zfs_pool is empty: name the pool to create.')
        return errors
    if not _POOL.match(pool) or pool.split(':')[0] in _RESERVED or re.match(r'^c[0-9]', pool):
        errors.append("storage_zfs_pool '%s' is not a pool name: a letter, then letters, digits, _ . : or -, and not "
                      'a vdev word (mirror, raidz, spare, log, cache), nor c and a digit.' % pool)
    devices = settings.get('devices') or []
    if settings.get('create'):
        if not devices:
            errors.append('storage_zfs_pool_create is true but storage_zfs_pool_devices is empty: name the empty '
                          'disks for the pool, by id (/dev/disk/by-id/...).')
        for device in devices:
            if not isinstance(device, str) or not device.startswith('/'):
                errors.append("storage_zfs_pool_devices: '%s' must be an absolute path such as "
                              '/dev/disk/by-id/nvme-...' % (device,))
        if settings.get('vdev') not in VDEVS:
            errors.append("storage_zfs_pool_vdev '%s' must be one of %s." % (settings.get('vdev'), ', '.join(VDEVS)))
        elif settings.get('vdev') == 'mirror' and len(devices) < 2:
            errors.append('storage_zfs_pool_vdev is mirror: storage_zfs_pool_devices needs at least two disks.')
    names, mountpoints = set(), set()
    docker_roots = settings.get('docker_roots') or []
    for index, dataset in enumerate(datasets):
        where = 'storage_zfs_datasets[%d]' % index
        if not isinstance(dataset, dict) or not isinstance(dataset.get('name'), str):
            errors.append('%s must be a dict with a name (pool/...), a mountpoint and snapshots.' % where)
            continue
        name = dataset['name']
        where = "storage_zfs_datasets '%s'" % name
        if not name.startswith(pool + '/'):
            errors.append("%s is outside the pool '%s': every dataset must be %s/... (the role creates nothing in "
                          'another pool).' % (where, pool, pool))
        elif not all(_DATASET_PART.match(part) for part in name[len(pool) + 1:].split('/')):
            errors.append('%s: each part of a dataset name is letters, digits, _ . : or -.' % where)
        if name in names:
            errors.append('%s is named twice.' % where)
        names.add(name)
        mountpoint = dataset.get('mountpoint')
        if not isinstance(mountpoint, str) or not mountpoint.startswith('/') or mountpoint.rstrip('/') in ('', '/'):
            errors.append('%s: mountpoint %r must be an absolute path other than /.' % (where, mountpoint))
        else:
            if mountpoint in mountpoints:
                errors.append('%s: mountpoint %s is used twice.' % (where, mountpoint))
            mountpoints.add(mountpoint)
            for root in docker_roots:
                if _under(mountpoint, root):
                    errors.append('%s: mountpoint %s overlaps %s, where a container engine writes its layers: '
                                  'snapshots of it pile up by the thousand (sanoid#838). Keep it out of the '
                                  'backup datasets.' % (where, mountpoint, root))
        snapshots = dataset.get('snapshots', 'none')
        if snapshots != 'none' and snapshots not in templates:
            errors.append("%s: snapshots '%s' is neither none nor a template of storage_snapshot_templates (%s)."
                          % (where, snapshots, ', '.join(sorted(templates)) or 'none defined'))
        properties = dataset.get('properties', {})
        if not isinstance(properties, dict) or not all(isinstance(value, (str, int)) and not isinstance(value, bool)
                                                       for value in properties.values()):
            errors.append('%s: properties must be a dict of ZFS property to a value written as a string '
                          '(e.g. {atime: "off", recordsize: 1M}).' % where)
    return errors


# Properties whose values are sizes: `zfs get -p` answers them in bytes, and community.general.zfs compares text.
_SIZE_PROPERTIES = ('recordsize', 'volblocksize', 'quota', 'refquota', 'reservation', 'refreservation', 'volsize',
                    'special_small_blocks')
_SIZE = re.compile(r'^([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)i?B?$', re.IGNORECASE)


def zfs_properties(properties):
    """PROPERTIES with every value a string and sizes in bytes ('1M' -> '1048576'), as `zfs get -p` writes them."""
    normalised = {}
    for name, value in properties.items():
        text = str(value)
        match = _SIZE.match(text) if name in _SIZE_PROPERTIES else None
        if match:
            power = ' KMGTP'.index(match.group(2).upper() or ' ')
            text = str(int(float(match.group(1)) * 1024 ** power))
        normalised[name] = text
    return normalised


def zfs_option_args(options, flag):
    """['-o', 'name=value', ...] for zpool create (FLAG -o for the pool's properties, -O for its file system's)."""
    args = []
    for name, value in options.items():
        args += [flag, '%s=%s' % (name, value)]
    return args
