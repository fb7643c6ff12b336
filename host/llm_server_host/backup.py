# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-backup: snapshots of the server's configuration and state, their encrypted off-site copy, and the restore drill.

    llm-backup snapshot [--reason TEXT]   snapshot every source now (before a change); prints its name
    llm-backup list [--json]              the snapshots this program took, newest first
    llm-backup rollback [NAME | --last N] put the sources marked for rollback back as they were in a snapshot
    llm-backup offsite                    snapshot, then copy each off-site source from it through rclone's crypt remote
    llm-backup drill [--sample]           restore the latest off-site copy into an empty place and compare it, byte for byte,
                                          with the manifest kept on this host; restore a deleted file from history
    llm-backup restore --into DIR         restore the latest off-site copy with the remote's own manifests (a fresh host)
    llm-backup restore --in-place         the same, each source where it belongs (a new disk); what it restored is noted
    llm-backup check-restore              compare what --in-place restored with the files now (after site.yml ran)
    llm-backup metrics                    write the metrics textfile (snapshot ages, pool health, last copy, last drill)

A source is a tree: a directory (ROOT) or chosen paths under it (INCLUDE). On a host with ZFS a source on a dataset is
snapshotted by ZFS and read through a read-only clone; any other source is snapshotted as a staged copy under the
state directory, taken until two reads of the source agree (a copy made while a file changed is taken again). The
off-site copy goes from that snapshot, never from the live tree, with `rclone sync --backup-dir`: what a run deletes or
overwrites moves to history/STAMP. The manifest of each copy (sha256 per file, modes, owners, link targets) is kept
twice: on this host, outside the backup, to check restores against, and on the remote, to restore modes, owners and
links on a host that has nothing else.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import fnmatch
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from llm_server_host import backup_manifest, files, log
from llm_server_host.textfile import Exposition

SETTINGS = '/etc/llm-server/backup.json'
VERSION = 1
# Standard name encryption makes a name about 1.6 times longer; past this a name no longer fits the 255 bytes of
# most file systems (rclone#2040).
NAME_LIMIT = 143
# Copies of a source taken until one matches a second read of the source.
STAGE_ATTEMPTS = 3
# How many off-site runs' records (and manifests) are kept on this host: the drill looks for a deleted file there.
RUNS_KEPT = 8
LOCK_WAIT_S = 600.0
# How long a busy view (a clone just read from) is tried again before its release fails.
RELEASE_DEADLINE_S = 30.0
EXIT_FAILED = 1
EXIT_ERROR = 2


class BackupError(Exception):
    """Something that stops a backup action; its message says what and where."""


def now():
    return time.time()


def stamp_of(seconds):
    """The snapshot name's time: UTC, sortable, without characters ZFS or S3 keys mind."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime('%Y-%m-%dT%H%M%SZ')


def run(argv, ok=(0,), env=None, capture=True):
    """Run ARGV; its output, or BackupError with the command and what it printed last."""
    try:
        done = subprocess.run(argv, check=False, capture_output=capture, text=True, env=env)
    except OSError as exc:
        raise BackupError('cannot run %s: %s' % (argv[0], exc.strerror or exc)) from None
    if done.returncode not in ok:
        said = ((done.stderr or '') + (done.stdout or '')).strip().splitlines()[-5:] if capture else []
        raise BackupError('%s exited %d%s' % (' '.join(argv[:3]), done.returncode,
                                              (': ' + ' / '.join(said)) if said else ''))
    return done


# --- Settings -----------------------------------------------------------------------------------------------

def load_settings(path):
    data = files.read_settings(path, BackupError)
    if data.get('version') != VERSION:
        raise BackupError('%s: version must be %d' % (path, VERSION))
    names = set()
    for source in data.get('sources') or []:
        name = source.get('name')
        if not name or name in names or '/' in name:
            raise BackupError('%s: every source needs a name of its own without "/" (found %r)' % (path, name))
        names.add(name)
        if not os.path.isabs(source.get('root') or ''):
            raise BackupError('%s: source %s needs an absolute root' % (path, name))
    if not names:
        raise BackupError('%s: no sources' % path)
    return data


class Source:
    """One tree the backup covers, as the settings describe it."""

    def __init__(self, spec):
        self.name = spec['name']
        self.root = spec['root']
        self.include = spec.get('include')
        self.dataset = spec.get('dataset')
        self.rollback = bool(spec.get('rollback'))
        self.offsite = bool(spec.get('offsite', True))

    def manifest(self):
        """The manifest entries of what the source holds now, keyed by path under ROOT; none when ROOT is missing
        (a part of the server not set up on this host)."""
        if not os.path.isdir(self.root):
            return {}
        if self.include is None:
            return backup_manifest.build(self.root)
        entries = {'.': backup_manifest.describe(self.root)}
        for relative in self.include:
            full = os.path.join(self.root, relative)
            if not os.path.lexists(full):
                continue
            parts = relative.split('/')
            for depth in range(1, len(parts)):
                parent = '/'.join(parts[:depth])
                entries[parent] = backup_manifest.describe(os.path.join(self.root, parent))
            entries[relative] = backup_manifest.describe(full)
            if os.path.isdir(full) and not os.path.islink(full):
                for path, entry in backup_manifest.build(full).items():
                    if path != '.':
                        entries[os.path.join(relative, path)] = entry
        return dict(sorted(entries.items()))


# --- Trees ----------------------------------------------------------------------------------------------------

def _set_attributes(path, entry):
    os.lchown(path, entry['uid'], entry['gid'])
    if entry['type'] != 'link':
        os.chmod(path, int(entry['mode'], 8))


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def make_like(target, wanted, source_root=None, present=None, prune=True):
    """Make the tree at TARGET hold what the manifest entries WANTED describe.

    A file's bytes come from SOURCE_ROOT (the same path under it); without one they must be there already
    (restored by rclone) and only their modes and owners are set. PRESENT is what TARGET holds now (all of it by
    default; a source of chosen paths passes only those, so nothing else under its root is touched); with PRUNE,
    the paths of PRESENT that WANTED does not name are removed. What already matches is left alone, so a rollback
    touches only what changed."""
    if present is None:
        present = backup_manifest.build(target) if os.path.isdir(target) else {}
    for path in sorted((p for p in present if p not in wanted and prune), key=lambda p: -p.count('/')):
        _remove(os.path.join(target, path))
    os.makedirs(target, exist_ok=True)
    # Parents before children; the attributes of directories last, so a read-only directory is filled first.
    for path, entry in wanted.items():
        full = os.path.normpath(os.path.join(target, path))
        found = present.get(path)
        if found == entry:
            continue
        if found is not None and found['type'] != entry['type']:
            _remove(full)
            found = None
        if entry['type'] == 'dir':
            os.makedirs(full, exist_ok=True)
        elif entry['type'] == 'link':
            if found is not None and found.get('target') != entry['target']:
                os.unlink(full)
                found = None
            if found is None:
                os.symlink(entry['target'], full)
        elif entry['type'] == 'file':
            if source_root is not None and (found is None or found.get('sha256') != entry['sha256']):
                partial = full + '.llm-backup-partial'
                # With its modification time: rclone compares size and time, and a file with a new time would be
                # sent again, its earlier copy moved to history, every night.
                shutil.copy2(os.path.join(source_root, path), partial)
                os.replace(partial, full)
            elif source_root is None and found is None:
                raise BackupError('%s is missing from the restored copy' % full)
        if entry['type'] != 'dir':
            _set_attributes(full, entry)
    for path, entry in sorted(wanted.items(), key=lambda item: -item[0].count('/')):
        if entry['type'] == 'dir':
            _set_attributes(os.path.normpath(os.path.join(target, path)), entry)


def stage(source, dest):
    """A copy of SOURCE at DEST that equals the source at one moment: copied until a second read agrees."""
    for _attempt in range(STAGE_ATTEMPTS):
        before = source.manifest()
        if not before:
            os.makedirs(dest, exist_ok=True)
            return {}
        make_like(dest, before, source.root)
        after = source.manifest()
        copied = backup_manifest.build(dest)
        if before == after == copied:
            return copied
    raise BackupError('%s kept changing during %d copies; try again when it is quiet' % (source.root, STAGE_ATTEMPTS))


# --- ZFS ------------------------------------------------------------------------------------------------------

class Zfs:
    """The few ZFS commands the backup needs, in forms kernel ZFS and zfs-fuse both answer."""

    def __init__(self, zfs='zfs', zpool='zpool'):
        self.zfs = zfs
        self.zpool = zpool

    def snapshot(self, dataset, name):
        run([self.zfs, 'snapshot', '%s@%s' % (dataset, name)])

    def destroy_snapshot(self, dataset, name):
        run([self.zfs, 'destroy', '%s@%s' % (dataset, name)])

    def snapshots(self, dataset):
        """[(snapshot name, creation time)] of DATASET itself, oldest first."""
        out = run([self.zfs, 'get', '-H', '-p', '-o', 'name,value', 'creation', '-r', dataset]).stdout
        found = []
        for line in out.splitlines():
            name, _tab, value = line.partition('\t')
            head, at, snap = name.partition('@')
            if at and head == dataset:
                found.append((snap, int(value)))
        return sorted(found, key=lambda item: item[1])

    def view(self, dataset, name, mountpoint):
        """A read-only clone of DATASET@NAME mounted at MOUNTPOINT (kernel ZFS and zfs-fuse alike; zfs-fuse has no
        .zfs directory); its dataset name, to release."""
        clone = dataset + '-llm-backup-view'
        self.release(clone)
        run([self.zfs, 'clone', '-o', 'mountpoint=' + mountpoint, '-o', 'readonly=on', '%s@%s' % (dataset, name), clone])
        return clone

    def release(self, clone, deadline_s=RELEASE_DEADLINE_S):
        """Unmount and destroy a view. A mount just read from can be busy for a moment (zfs-fuse's more than the
        kernel's): tried again until the deadline."""
        if not clone.endswith('-llm-backup-view'):
            raise BackupError('refusing to destroy %s: not a view of this program' % clone)
        deadline = time.monotonic() + deadline_s
        while run([self.zfs, 'list', '-H', '-o', 'name', clone], ok=(0, 1)).returncode == 0:
            run([self.zfs, 'unmount', '-f', clone], ok=(0, 1))
            try:
                run([self.zfs, 'destroy', '-f', clone])
            except BackupError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def pools(self, names):
        """{pool: (health, capacity ratio)} of the pools NAMES."""
        found = {}
        for name in names:
            done = run([self.zpool, 'list', '-H', '-o', 'name,health,capacity', name], ok=(0, 1))
            fields = done.stdout.split('\t') if done.returncode == 0 else []
            if len(fields) == 3:
                found[name] = (fields[1].strip(), float(fields[2].strip().rstrip('%') or 0) / 100)
            else:
                found[name] = ('MISSING', 0.0)
        return found


# --- The backup ---------------------------------------------------------------------------------------------

class Backup:

    def __init__(self, settings, zfs=None, clock=now):
        self.settings = settings
        self.sources = [Source(spec) for spec in settings['sources']]
        self.state_dir = settings['state_dir']
        self.zfs = zfs or Zfs()
        self.clock = clock
        self.offsite = settings.get('offsite')

    # Records kept under the state directory, never in the backup.
    def _path(self, *parts):
        return os.path.join(self.state_dir, *parts)

    def _read(self, name, default):
        path = self._path(name)
        if not os.path.exists(path):
            return default
        return files.read_settings(path, BackupError)

    def _write(self, name, data):
        files.write_atomically(self._path(name), json.dumps(data, indent=1, sort_keys=True) + '\n', mode=0o600)

    @contextlib.contextmanager
    def locked(self):
        """One action at a time: the timers' runs and Ansible's never overlap."""
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        with open(self._path('lock'), 'w', encoding='utf-8') as handle:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise BackupError('another llm-backup run holds %s' % self._path('lock')) from None
                    time.sleep(0.5)
            yield

    # Snapshots ------------------------------------------------------------------------------------------------
    def _sources_of(self, kind):
        """A change snapshot covers what a rollback puts back; an off-site one what is copied off-site."""
        return [source for source in self.sources if (source.rollback if kind == 'change' else source.offsite)]

    @staticmethod
    def _digest(sources):
        text = json.dumps({source.name: source.manifest() for source in sources}, sort_keys=True)
        return hashlib.sha256(text.encode('utf-8')).hexdigest()

    def snapshot(self, reason, kind='change', if_changed=False):
        """Snapshot the sources of KIND now. With IF_CHANGED, a change snapshot is taken only when they differ from
        the newest one (a run of site.yml that changed nothing leaves nothing new to roll back to)."""
        sources = self._sources_of(kind)
        digest = self._digest(sources) if kind == 'change' else None
        index = self._read('snapshots.json', {'snapshots': []})
        if if_changed:
            newest = [entry for entry in index['snapshots'] if entry['kind'] == kind]
            if newest and newest[-1].get('digest') == digest:
                return dict(newest[-1], reused=True)
        taken = self.clock()
        name = 'llm-backup_%s' % stamp_of(taken)
        if any(entry['name'] == name for entry in index['snapshots']):
            time.sleep(1.0)
            return self.snapshot(reason, kind, if_changed)
        where = {}
        for source in sources:
            if source.dataset:
                self.zfs.snapshot(source.dataset, name)
                where[source.name] = 'zfs'
            else:
                stage(source, self._path('snapshots', name, source.name))
                where[source.name] = 'staged'
        entry = {'name': name, 'time': taken, 'reason': reason, 'kind': kind, 'sources': where}
        if digest:
            entry['digest'] = digest
        index['snapshots'].append(entry)
        self._write('snapshots.json', index)
        self.prune(kind)
        return entry

    def snapshots(self):
        return list(reversed(self._read('snapshots.json', {'snapshots': []})['snapshots']))

    def prune(self, kind):
        """Keep the newest KEEP snapshots of a kind (the change snapshots, the off-site ones)."""
        keep = int(self.settings.get('keep', {}).get(kind, 10))
        index = self._read('snapshots.json', {'snapshots': []})
        of_kind = [entry for entry in index['snapshots'] if entry['kind'] == kind]
        for entry in of_kind[:-keep] if keep else of_kind:
            self._drop(entry)
            index['snapshots'].remove(entry)
        self._write('snapshots.json', index)

    def _drop(self, entry):
        for source in self.sources:
            how = entry['sources'].get(source.name)
            if how == 'zfs':
                if any(snap == entry['name'] for snap, _created in self.zfs.snapshots(source.dataset)):
                    self.zfs.destroy_snapshot(source.dataset, entry['name'])
        _remove(self._path('snapshots', entry['name']))

    def find(self, name=None, last=None):
        snapshots = self.snapshots()
        if name:
            for entry in snapshots:
                if entry['name'] == name:
                    return entry
            raise BackupError('no snapshot named %s (llm-backup list shows them)' % name)
        changes = [entry for entry in snapshots if entry['kind'] == 'change']
        if not last or last > len(changes):
            raise BackupError('there are %d change snapshots; --last must be from 1 to that' % len(changes))
        return changes[last - 1]

    @contextlib.contextmanager
    def view(self, entry, source):
        """The directory that shows SOURCE as snapshot ENTRY holds it."""
        if entry['sources'].get(source.name) == 'zfs':
            mountpoint = self._path('views', source.name)
            os.makedirs(mountpoint, exist_ok=True)
            clone = self.zfs.view(source.dataset, entry['name'], mountpoint)
            try:
                yield mountpoint
            finally:
                self.zfs.release(clone)
        else:
            yield self._path('snapshots', entry['name'], source.name)

    def rollback(self, entry):
        """Put the rollback sources back as ENTRY holds them, after a snapshot of how they are now."""
        before = self.snapshot('before rolling back to %s' % entry['name'])
        restored = []
        for source in self.sources:
            if not source.rollback or source.name not in entry['sources']:
                continue
            with self.view(entry, source) as view:
                make_like(source.root, backup_manifest.build(view), view, present=source.manifest())
            restored.append(source.name)
        return {'restored': restored, 'from': entry['name'], 'undo': before['name']}

    # Off-site -------------------------------------------------------------------------------------------------
    def _rclone(self, *args, ok=(0,)):
        if not self.offsite:
            raise BackupError('no off-site remote is set (backup_offsite_enabled)')
        argv = [self.offsite.get('rclone', 'rclone'), '--config', self.offsite['rclone_config']]
        return run(argv + list(args), ok=ok)

    def _remote(self, *parts):
        return self.offsite['remote'] + '/'.join(part.strip('/') for part in parts if part)

    def copy_offsite(self):
        started = self.clock()
        record = {'attempt': started, 'result': 'failed'}
        runs = self._read('offsite.json', {'runs': []})
        try:
            entry = self.snapshot('off-site copy', kind='offsite')
            record.update(stamp=entry['name'].split('_', 1)[1], snapshot=entry['name'], sources={})
            manifests = self._path('manifests', record['stamp'])
            os.makedirs(manifests, mode=0o700, exist_ok=True)
            # What the remote holds: the last copy that succeeded (a failed one may have stopped half-way).
            previous = runs.get('last_success')
            # Every source is read and judged before anything is sent: a refused one leaves the remote untouched.
            with contextlib.ExitStack() as views:
                plans = [self._plan_source(views, entry, source, previous)
                         for source in self.sources if source.offsite]
                for source, view, manifest in plans:
                    record['sources'][source.name] = self._copy_source(source, view, manifest, record['stamp'],
                                                                       manifests, previous)
            record['result'] = 'ok'
            record['seconds'] = round(self.clock() - started, 3)
        except BackupError as exc:
            record['error'] = str(exc)
            raise
        finally:
            runs['runs'] = (runs['runs'] + [record])[-RUNS_KEPT:]
            if record['result'] == 'ok':
                runs['last_success'] = record
            self._write('offsite.json', runs)
            self._prune_manifests(runs)
            self.metrics()
        return record

    def _plan_source(self, views, entry, source, previous):
        """(SOURCE, its view, its manifest) once the guards let it be copied; its manifest None when it holds no
        file and never did."""
        view = views.enter_context(self.view(entry, source))
        manifest = backup_manifest.build(view)
        if not any(item['type'] == 'file' for item in manifest.values()):
            copied = (previous or {}).get('sources', {}).get(source.name, {}).get('files') \
                if (previous or {}).get('result') == 'ok' else 0
            if copied:
                # An emptied or unmounted source would make sync delete the whole copy (rclone#4298, #1032).
                raise BackupError('%s (%s) holds no file: refusing to sync it over the off-site copy, which holds %d'
                                  % (source.name, source.root, copied))
            # Nothing there yet (no model store, no WireGuard on this host): nothing to copy, nothing to delete.
            return source, view, None
        long_names = [path for path in manifest if len(os.path.basename(path).encode()) > NAME_LIMIT]
        if long_names:
            raise BackupError('%s: names longer than %d bytes cannot be encrypted (rclone#2040): %s'
                              % (source.name, NAME_LIMIT, ', '.join(long_names[:5])))
        return source, view, manifest

    def _copy_source(self, source, view, manifest, stamp, manifests, previous):
        if manifest is None:
            return {'files': 0, 'bytes': 0, 'deleted': [], 'overwritten': [], 'skipped': 'holds no file'}
        regular = [path for path, item in manifest.items() if item['type'] == 'file']
        local_manifest = os.path.join(manifests, source.name + '.json')
        text = json.dumps({'version': backup_manifest.VERSION, 'entries': manifest}, sort_keys=True) + '\n'
        files.write_atomically(local_manifest, text, mode=0o600)
        if previous and previous.get('stamp'):
            earlier = self._path('manifests', previous['stamp'], source.name + '.json')
            with contextlib.suppress(OSError):
                with open(earlier, encoding='utf-8') as handle:
                    unchanged = handle.read() == text
                if unchanged:
                    # The same manifest keeps its time: rclone leaves the remote's copy (and its history) alone.
                    stat = os.stat(earlier)
                    os.utime(local_manifest, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        flags = ['--skip-links', '--create-empty-src-dirs', '--max-delete', str(self.offsite.get('max_delete', 1000))]
        if self.offsite.get('bwlimit'):
            flags += ['--bwlimit', self.offsite['bwlimit']]
        self._rclone('sync', view, self._remote('current', source.name),
                     '--backup-dir', self._remote('history', stamp, source.name), *flags)
        self._rclone('copyto', local_manifest, self._remote('meta', source.name + '.json'),
                     '--backup-dir', self._remote('history', stamp, 'meta'))
        self._rclone('cryptcheck', '--skip-links', view, self._remote('current', source.name))
        gone, overwritten = [], []
        if previous and previous.get('result') == 'ok' and previous.get('sources', {}).get(source.name, {}).get('files'):
            before = self._manifest(previous['stamp'], source.name)
            for path, item in before.items():
                if item['type'] != 'file':
                    continue
                if path not in manifest:
                    gone.append(path)
                elif manifest[path].get('sha256') != item['sha256']:
                    overwritten.append(path)
        return {'files': len(regular), 'bytes': sum(manifest[path]['size'] for path in regular),
                'deleted': gone[:50], 'overwritten': overwritten[:50]}

    def _manifest(self, stamp, source_name):
        data = files.read_settings(self._path('manifests', stamp, source_name + '.json'), BackupError)
        return data['entries']

    def _prune_manifests(self, runs):
        kept = {run_.get('stamp') for run_ in runs['runs']} | {runs.get('last_success', {}).get('stamp')}
        folder = self._path('manifests')
        for stamp in os.listdir(folder) if os.path.isdir(folder) else []:
            if stamp not in kept:
                shutil.rmtree(os.path.join(folder, stamp), ignore_errors=True)

    # Restore ---------------------------------------------------------------------------------------------------
    def restore(self, into, sources=None, meta_from_remote=True, part=None):
        """Restore the latest off-site copy of SOURCES into INTO/<source>, with modes, owners and links."""
        phases = {}
        restored = {}
        copied = {name[:-len('.json')] for name in self._rclone('lsf', self._remote('meta')).stdout.split()}
        for source in self.sources:
            if not source.offsite or (sources and source.name not in sources) or source.name not in copied:
                continue
            target = os.path.join(into, source.name)
            if os.path.lexists(target) and os.listdir(target):
                raise BackupError('%s is not empty: a restore goes into an empty place' % target)
            started = self.clock()
            if meta_from_remote:
                meta_file = os.path.join(into, '.%s.manifest.json' % source.name)
                self._rclone('copyto', self._remote('meta', source.name + '.json'), meta_file)
                wanted = files.read_settings(meta_file, BackupError)['entries']
                os.unlink(meta_file)
            else:
                wanted = self._manifest(self.last_success()['stamp'], source.name)
            if part is not None:
                chosen = {path: item for path, item in wanted.items()
                          if item['type'] != 'file' or backup_manifest.in_part(path, *part)}
            else:
                chosen = wanted
            args = ['copy', self._remote('current', source.name), target]
            if part is not None:
                listing = os.path.join(into, '.%s.files' % source.name)
                with open(listing, 'w', encoding='utf-8') as handle:
                    handle.writelines(path + '\n' for path, item in chosen.items() if item['type'] == 'file')
                args += ['--files-from', listing]
            os.makedirs(target, mode=0o700, exist_ok=True)
            self._rclone(*args)
            if part is not None:
                os.unlink(listing)
            # Nothing pruned: a file the manifest does not name is the drill's finding, not ours to hide.
            make_like(target, chosen, prune=False)
            restored[source.name] = {'files': sum(1 for item in chosen.values() if item['type'] == 'file'),
                                     'bytes': sum(item.get('size', 0) for item in chosen.values()
                                                  if item['type'] == 'file')}
            phases['restore %s' % source.name] = round(self.clock() - started, 3)
        return restored, phases

    def restore_in_place(self, sources=None):
        """Restore the latest copy where each source belongs: through an empty place, then the copy's paths made
        like the copy over what is there (what the role wrote since, such as llm-backup's own settings, stays)."""
        record = {'version': VERSION, 'time': self.clock(), 'sources': {}}
        with self._place(None) as place:
            restored, phases = self.restore(place, sources=sources)
            for source in self.sources:
                if source.name in restored:
                    copy = os.path.join(place, source.name)
                    wanted = backup_manifest.build(copy)
                    make_like(source.root, wanted, copy, present=source.manifest(), prune=False)
                    record['sources'][source.name] = {'root': source.root, 'entries': wanted}
        # What went back where: the playbook that runs site.yml next checks that the roles left it as it is.
        self._write('restored.json', record)
        return restored, phases

    def check_restored(self, may_change=()):
        """Compare each path the last in-place restore put back with what is there now: the roles that ran since
        should have found their files as they would write them. MAY_CHANGE holds SOURCE:GLOB patterns of paths
        expected to change (the gate's figures of a release that passed again); they are listed, not failed."""
        record = self._read('restored.json', None)
        if not record:
            raise BackupError('nothing was restored in place on this host (%s is missing)'
                              % self._path('restored.json'))
        report = {'restored_at': record['time'], 'sources': {}, 'changed_as_expected': []}
        problems = []
        for name, restored in sorted(record['sources'].items()):
            result = backup_manifest.compare_present(restored['entries'], restored['root'])
            unexpected = []
            for difference in result['differences']:
                if any(fnmatch.fnmatchcase('%s:%s' % (name, difference['path']), pattern) for pattern in may_change):
                    report['changed_as_expected'].append(dict(difference, source=name))
                else:
                    unexpected.append(difference)
            report['sources'][name] = {'checked': result['checked'], 'differences': unexpected[:50]}
            if unexpected:
                problems.append(name)
        report['result'] = 'failed' if problems else 'ok'
        if problems:
            report['error'] = 'restored files changed since the restore in ' + ', '.join(problems)
        return report

    def last_success(self):
        record = self._read('offsite.json', {'runs': []}).get('last_success')
        if not record:
            raise BackupError('no off-site copy has succeeded yet: nothing to restore')
        return record

    def drill(self, into=None, sample=False, parts=4):
        """Restore the latest copy into an empty place, check it against this host's manifest, and a deleted file."""
        started = self.clock()
        report = {'started': started, 'mode': 'sample' if sample else 'full', 'result': 'failed', 'phases': {}}
        runs = self._read('offsite.json', {'runs': []})
        try:
            record = self.last_success()
            report['stamp'] = record['stamp']
            part = None
            if sample:
                week = int(datetime.datetime.fromtimestamp(started, datetime.timezone.utc).strftime('%V'))
                part = (week % parts, parts)
                report.update(part=part[0], parts=parts)
            with self._place(into) as place:
                restored, phases = self.restore(place, meta_from_remote=True, part=part)
                report['phases'].update(phases)
                report['sources'] = {}
                for name, counts in restored.items():
                    checked_at = self.clock()
                    expected = self._manifest(record['stamp'], name)
                    result = backup_manifest.compare(expected, os.path.join(place, name),
                                                     *(part if part else (0, 1)))
                    report['sources'][name] = dict(counts, checked=result['checked'],
                                                   differences=result['differences'][:20])
                    report['phases']['check %s' % name] = round(self.clock() - checked_at, 3)
                history_at = self.clock()
                report['history'] = self._drill_history(runs, place)
                report['phases']['history'] = round(self.clock() - history_at, 3)
            problems = [name for name, found in report['sources'].items() if found['differences']]
            if report['history'].get('result') == 'failed':
                problems.append('history')
            report['result'] = 'failed' if problems else 'ok'
            if problems:
                report['error'] = 'differences in ' + ', '.join(problems)
        except BackupError as exc:
            report['error'] = str(exc)
        report['seconds'] = round(self.clock() - started, 3)
        drills = self._read('drill.json', {})
        drills['last'] = report
        if report['result'] == 'ok':
            drills['last_success'] = report
        self._write('drill.json', drills)
        self.metrics()
        return report

    @contextlib.contextmanager
    def _place(self, into):
        if into:
            os.makedirs(into, mode=0o700, exist_ok=True)
            if os.listdir(into):
                raise BackupError('%s is not empty: a drill restores into an empty place' % into)
            yield into
            return
        os.makedirs(self._path('drills'), mode=0o700, exist_ok=True)
        place = tempfile.mkdtemp(dir=self._path('drills'))
        try:
            yield place
        finally:
            shutil.rmtree(place, ignore_errors=True)

    def _drill_history(self, runs, place):
        """Restore one file that a recent copy deleted or overwrote from history, and compare it with the copy
        before."""
        ok_runs = [record for record in runs['runs'] if record.get('result') == 'ok']
        candidates = [(later, earlier, name, path)
                      for kind in ('deleted', 'overwritten')
                      for later, earlier in zip(reversed(ok_runs[1:]), reversed(ok_runs[:-1]))
                      for name, found in sorted(later.get('sources', {}).items())
                      for path in found.get(kind, [])]
        # A deleted file first: the case a history is for.
        for later, earlier, name, path in candidates:
            try:
                expected = self._manifest(earlier['stamp'], name)[path]
            except (BackupError, KeyError):
                continue
            target = os.path.join(place, '.history', name, path)
            self._rclone('copyto', self._remote('history', later['stamp'], name, path), target)
            found_sha = backup_manifest.describe(target).get('sha256')
            return {'path': path, 'source': name, 'stamp': later['stamp'],
                    'result': 'ok' if found_sha == expected['sha256'] else 'failed'}
        return {'result': 'skipped', 'why': 'no file was deleted or overwritten in the last %d copies' % len(ok_runs)}

    # Metrics ---------------------------------------------------------------------------------------------------
    def metrics(self):
        out = Exposition()
        newest = []
        # The sources snapshotted on a schedule (sanoid's, the nightly copy's): an old newest snapshot of one of
        # them means the schedule stopped. Those snapshotted only before changes have no age to alert on.
        for source in self.sources:
            if not (source.dataset or (self.offsite and source.offsite)):
                continue
            times = [entry['time'] for entry in self.snapshots() if entry['sources'].get(source.name)]
            if source.dataset:
                times += [created for _snap, created in self.zfs.snapshots(source.dataset)]
            newest.append(({'source': source.name}, max(times) if times else 0))
        out.family('llm_backup_snapshot_newest_timestamp_seconds', 'gauge',
                   'When the newest snapshot of each source was taken (by sanoid or llm-backup); 0 for never.', newest)
        pools = sorted({source.dataset.split('/')[0] for source in self.sources if source.dataset})
        health = self.zfs.pools(pools) if pools else {}
        out.family('llm_backup_pool_healthy', 'gauge', 'Whether the ZFS pool is ONLINE.',
                   [({'pool': pool, 'health': state}, state == 'ONLINE') for pool, (state, _ratio) in health.items()])
        out.family('llm_backup_pool_capacity_ratio', 'gauge', 'How full the ZFS pool is.',
                   [({'pool': pool}, ratio) for pool, (_state, ratio) in health.items()])
        runs = self._read('offsite.json', {'runs': []})
        last = runs['runs'][-1] if runs['runs'] else {}
        success = runs.get('last_success', {})
        out.family('llm_backup_offsite_enabled', 'gauge', 'Whether an off-site copy is set up.', [({}, bool(self.offsite))])
        out.family('llm_backup_offsite_last_attempt_timestamp_seconds', 'gauge',
                   'When the last off-site copy started; 0 for never.', [({}, last.get('attempt', 0))])
        out.family('llm_backup_offsite_last_success_timestamp_seconds', 'gauge',
                   'When the last successful off-site copy started; 0 for never.', [({}, success.get('attempt', 0))])
        out.family('llm_backup_offsite_last_result', 'gauge', 'Whether the last off-site copy succeeded (1) or not (0).',
                   [({}, last.get('result') == 'ok')] if last else [])
        out.family('llm_backup_offsite_bytes', 'gauge', 'Bytes in the last successful off-site copy, per source.',
                   [({'source': name}, found['bytes']) for name, found in sorted(success.get('sources', {}).items())])
        drills = self._read('drill.json', {})
        out.family('llm_backup_drill_last_timestamp_seconds', 'gauge', 'When the last restore drill started; 0 for never.',
                   [({}, drills.get('last', {}).get('started', 0))])
        out.family('llm_backup_drill_last_success_timestamp_seconds', 'gauge',
                   'When the last successful restore drill started; 0 for never.',
                   [({}, drills.get('last_success', {}).get('started', 0))])
        out.family('llm_backup_drill_last_result', 'gauge', 'Whether the last restore drill found the copy whole (1).',
                   [({}, drills['last']['result'] == 'ok')] if drills.get('last') else [])
        metrics_dir = self.settings.get('metrics_dir')
        if metrics_dir and os.path.isdir(metrics_dir):
            files.write_atomically(os.path.join(metrics_dir, 'llm_backup.prom'), out.text())
        return out.text()


# --- Command line -------------------------------------------------------------------------------------------

def _parser():
    parser = argparse.ArgumentParser(prog='llm-backup', description=__doc__.splitlines()[0])
    parser.add_argument('--settings', default=os.environ.get('LLM_BACKUP_SETTINGS', SETTINGS))
    commands = parser.add_subparsers(dest='command', required=True)
    snap = commands.add_parser('snapshot', help='snapshot every source now')
    snap.add_argument('--reason', default='by hand')
    snap.add_argument('--if-changed', action='store_true',
                      help='only when the sources differ from the newest change snapshot')
    listing = commands.add_parser('list', help='the snapshots, newest first')
    listing.add_argument('--json', action='store_true')
    back = commands.add_parser('rollback', help='put the rollback sources back as a snapshot holds them')
    back.add_argument('name', nargs='?')
    back.add_argument('--last', type=int)
    commands.add_parser('offsite', help='copy the off-site sources from a new snapshot')
    drill = commands.add_parser('drill', help='restore the latest copy into an empty place and compare it')
    drill.add_argument('--sample', action='store_true', help="this week's part of the files only")
    drill.add_argument('--into', help='an empty directory to restore into (a temporary one by default)')
    drill.add_argument('--report', help='also write the report here')
    restore = commands.add_parser('restore', help="restore the latest copy with the remote's manifests")
    place = restore.add_mutually_exclusive_group(required=True)
    place.add_argument('--into', help='an empty directory: each source restored into DIR/SOURCE')
    place.add_argument('--in-place', action='store_true',
                       help="each source restored where it belongs (a new disk): the copy's files replace what "
                            'is there, and nothing else is removed')
    restore.add_argument('--source', action='append')
    check = commands.add_parser('check-restore',
                                help='compare what the last in-place restore put back with the files now')
    check.add_argument('--may-change', action='append', default=[], metavar='SOURCE:GLOB',
                       help='paths expected to change since (listed, not failed), such as state:releases/*bench.json')
    commands.add_parser('metrics', help='write the metrics textfile')
    return parser


def _table(snapshots):
    lines = ['%-3s %-31s %-8s %s' % ('#', 'NAME', 'KIND', 'REASON')]
    for number, entry in enumerate(snapshots, 1):
        lines.append('%-3d %-31s %-8s %s' % (number, entry['name'], entry['kind'], entry['reason']))
    return '\n'.join(lines)


def main(argv=None):
    logger = log.setup('llm-backup')
    args = _parser().parse_args(argv)
    try:
        backup = Backup(load_settings(args.settings))
        if args.command == 'list':
            snapshots = backup.snapshots()
            print(json.dumps(snapshots, indent=1) if args.json else _table(snapshots))
            return 0
        if args.command == 'metrics':
            backup.metrics()
            return 0
        if args.command == 'check-restore':
            report = backup.check_restored(args.may_change)
            print(json.dumps(report, indent=1, sort_keys=True))
            if report['result'] != 'ok':
                logger.error('%s', report['error'])
                return EXIT_FAILED
            return 0
        with backup.locked():
            if args.command == 'snapshot':
                entry = backup.snapshot(args.reason, if_changed=args.if_changed)
                print(json.dumps(entry, sort_keys=True))
            elif args.command == 'rollback':
                if bool(args.name) == bool(args.last):
                    raise BackupError('name a snapshot or give --last N, not both')
                print(json.dumps(backup.rollback(backup.find(args.name, args.last)), sort_keys=True))
            elif args.command == 'offsite':
                print(json.dumps(backup.copy_offsite(), sort_keys=True))
            elif args.command == 'drill':
                report = backup.drill(args.into, sample=args.sample,
                                      parts=int(backup.settings.get('drill_parts', 4)))
                text = json.dumps(report, indent=1, sort_keys=True)
                if args.report:
                    files.write_atomically(args.report, text + '\n', mode=0o600)
                print(text)
                if report['result'] != 'ok':
                    logger.error('drill failed: %s', report.get('error'))
                    return EXIT_FAILED
            elif args.command == 'restore':
                if args.in_place:
                    restored, phases = backup.restore_in_place(sources=args.source)
                else:
                    restored, phases = backup.restore(args.into, sources=args.source)
                print(json.dumps({'restored': restored, 'phases': phases}, sort_keys=True))
    except BackupError as exc:
        logger.error('%s', exc)
        return EXIT_ERROR
    return 0


if __name__ == '__main__':
    sys.exit(main())
