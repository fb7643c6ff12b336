# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The storage role's checks before any change, and ZFS properties as `zfs get -p` writes them."""

from __future__ import annotations

from ansible_collections.homelab.llm_server.plugins.module_utils import _storage

TEMPLATES = {'config': {'hourly': 48, 'daily': 30}, 'metrics': {'hourly': 24}}


def settings(**changes):
    base = {
        'pool': 'tank', 'create': False, 'devices': [], 'vdev': 'stripe', 'templates': TEMPLATES,
        'docker_roots': ['/var/lib/docker', '/var/lib/containers'],
        'datasets': [
            {'name': 'tank/llm-server/models', 'mountpoint': '/srv/models', 'snapshots': 'none',
             'properties': {'recordsize': '1M', 'atime': 'off'}},
            {'name': 'tank/llm-server/config', 'mountpoint': '/etc/llm-server', 'snapshots': 'config'},
        ],
    }
    base.update(changes)
    return base


def test_the_defaults_and_no_pool_at_all_are_right():
    assert _storage.storage_errors(settings()) == []
    assert _storage.storage_errors(settings(pool='', datasets=[])) == []


def test_a_dataset_outside_the_pool_is_named():
    errors = _storage.storage_errors(settings(datasets=[
        {'name': 'other/models', 'mountpoint': '/srv/models', 'snapshots': 'none'}]))
    assert errors == ["storage_zfs_datasets 'other/models' is outside the pool 'tank': every dataset must be tank/... "
                      '(the role creates nothing in another pool).']


def test_a_retention_that_is_not_a_number_is_named_with_the_rule():
    errors = _storage.storage_errors(settings(templates={'config': {'hourly': 'many', 'daily': 30},
                                                         'metrics': {'hourly': True, 'fortnightly': 2}}))
    assert errors[0].startswith("storage_snapshot_templates.config.hourly 'many' must be a whole number of snapshots")
    assert 'prunes older ones by age' in errors[0]
    assert errors[1].startswith('storage_snapshot_templates.metrics.hourly True must be a whole number')
    assert errors[2] == ('storage_snapshot_templates.metrics.fortnightly: sanoid keeps only frequently, hourly, '
                         'daily, weekly, monthly, yearly snapshots.')


def test_a_pool_to_create_needs_its_disks_by_absolute_path_and_a_mirror_two():
    assert _storage.storage_errors(settings(create=True))[0].startswith(
        'storage_zfs_pool_create is true but storage_zfs_pool_devices is empty')
    assert _storage.storage_errors(settings(create=True, devices=['sdb'])) == [
        "storage_zfs_pool_devices: 'sdb' must be an absolute path such as /dev/disk/by-id/nvme-..."]
    assert _storage.storage_errors(settings(create=True, devices=['/dev/sdb'], vdev='mirror')) == [
        'storage_zfs_pool_vdev is mirror: storage_zfs_pool_devices needs at least two disks.']
    assert _storage.storage_errors(settings(create=True, devices=['/dev/sdb'], vdev='raidz'))[0].startswith(
        "storage_zfs_pool_vdev 'raidz' must be one of stripe, mirror")
    assert _storage.storage_errors(settings(pool='', create=True))[0].startswith(
        'storage_zfs_pool_create is true but storage_zfs_pool is empty')


def test_pool_names_that_zpool_refuses_are_refused():
    for name in ('mirror', 'c0t0', '1tank', 'tank/x'):
        assert _storage.storage_errors(settings(pool=name, datasets=[]))[0].startswith(
            "storage_zfs_pool '%s' is not a pool name" % name), name


def test_a_dataset_over_container_storage_a_missing_template_and_a_shared_mountpoint_are_refused():
    errors = _storage.storage_errors(settings(datasets=[
        {'name': 'tank/docker', 'mountpoint': '/var/lib/docker', 'snapshots': 'config'},
        {'name': 'tank/var', 'mountpoint': '/var/lib', 'snapshots': 'hourly'},
        {'name': 'tank/x', 'mountpoint': '/var/lib', 'snapshots': 'none', 'properties': {'atime': False}},
    ]))
    assert any('mountpoint /var/lib/docker overlaps /var/lib/docker' in e and 'sanoid#838' in e for e in errors)
    assert any("'tank/var': mountpoint /var/lib overlaps /var/lib/docker" in e for e in errors)
    assert "storage_zfs_datasets 'tank/var': snapshots 'hourly' is neither none nor a template of " \
           'storage_snapshot_templates (config, metrics).' in errors
    assert "storage_zfs_datasets 'tank/x': mountpoint /var/lib is used twice." in errors
    assert any("'tank/x': properties must be a dict" in e for e in errors)


def test_sizes_become_bytes_and_other_values_strings():
    assert _storage.zfs_properties({'recordsize': '1M', 'atime': 'off', 'quota': '1.5G', 'copies': 2,
                                    'refquota': 'none'}) == {
        'recordsize': '1048576', 'atime': 'off', 'quota': str(int(1.5 * 1024 ** 3)), 'copies': '2',
        'refquota': 'none'}
    assert _storage.zfs_properties({'recordsize': '128K'}) == {'recordsize': '131072'}


def test_pool_options_become_zpool_create_arguments():
    assert _storage.zfs_option_args({'ashift': '12'}, '-o') == ['-o', 'ashift=12']
    assert _storage.zfs_option_args({'atime': 'off', 'compression': 'on'}, '-O') == [
        '-O', 'atime=off', '-O', 'compression=on']
