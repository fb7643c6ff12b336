# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model store: a model's weights from the Hugging Face Hub, pinned, checked and trusted only when complete.

The store is huggingface_hub's own cache layout under one directory (its
``cache_dir``): ``models--ORG--NAME/blobs/<etag>`` with the snapshot of each
pinned commit as links in ``models--ORG--NAME/snapshots/<commit>/``. An
engine gets that snapshot directory and HF_HUB_OFFLINE=1.

A fetch is trusted only through its manifest, written last and atomically,
``manifests/models--ORG--NAME/<commit>.json`` (format 1): repo, revision, and
per file its path, size, sha256, git blob sha1 (regular files), whether it is
an LFS file, its blob's name and mtime. A run that fails or is killed before
that leaves no manifest, so the next run checks and fetches again; the client
keeps the blobs that did complete and skips them.

Checks, all local once the manifest exists (no request to the Hub):
- every run: each file is there, with the manifest's size and mtime, and its
  blob is named by its hash (the sha256 of an LFS file, the git sha1 of the
  others: the Hub's names, so a check needs no server);
- after a download, or with ``reverify``: the content's sha256 (LFS) or git
  sha1 (others) against the Hub's tree listing (``lfs.oid`` / ``oid``).
A file that fails is fetched again with ``force_download``; one that still
fails stops the run, naming it.

Before any byte is downloaded, the free space under the store is compared with
the larger of the planner's weight size and the Hub's listed sizes (less what
the store already holds): too little stops with both figures.

huggingface_hub reads its environment when imported, so the module sets it
first (no progress bars, no telemetry, a private HF_HOME under the store) and
passes the endpoint and the token to each call.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

MANIFEST_FORMAT = 1
PROGRESS_FORMAT = 1
COMMIT_RE = re.compile(r'^[0-9a-f]{40}$')
REPO_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$')
_CHUNK = 1 << 20


class ModelStoreError(Exception):
    """A reason to stop, as a sentence for the play output."""

    def __init__(self, message, **details):
        super().__init__(message)
        self.details = details


# --- Layout ------------------------------------------------------------------------------------

def repo_folder_name(repo):
    return 'models--' + repo.replace('/', '--')


def snapshot_dir(store_dir, repo, revision):
    return os.path.join(store_dir, repo_folder_name(repo), 'snapshots', revision)


def manifest_path(store_dir, repo, revision):
    return os.path.join(store_dir, 'manifests', repo_folder_name(repo), revision + '.json')


def progress_path(store_dir, repo, revision):
    return os.path.join(store_dir, '.progress', '%s@%s.json' % (repo_folder_name(repo), revision))


def short(repo, revision):
    return '%s@%s' % (repo, revision[:12])


def human_bytes(value):
    value = float(value)
    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
        if abs(value) < 1024 or unit == 'TiB':
            return ('%d %s' % (value, unit)) if unit == 'B' else ('%.1f %s' % (value, unit))
        value /= 1024.0
    return '%d B' % value  # pragma: no cover


def validate(repo, revision):
    """Sentences for what is wrong with repo and revision; [] when they are fine."""
    errors = []
    if not REPO_RE.match(repo or ''):
        errors.append('the repo must be a Hugging Face repo id such as Qwen/Qwen3-8B, not %r' % (repo,))
    if not COMMIT_RE.match(revision or ''):
        errors.append('the revision of %s must be a full commit hash (40 hex digits, from the Hub\'s "Files and '
                      'versions" history), not %r: a branch or tag can move under you' % (repo, revision))
    return errors


# --- Hashes ------------------------------------------------------------------------------------

def file_hashes(path):
    """(sha256, git blob sha1) of a file's content, read once."""
    sha256 = hashlib.sha256()
    git = hashlib.sha1()
    git.update(b'blob %d\0' % os.path.getsize(path))
    with open(path, 'rb') as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b''):
            sha256.update(chunk)
            git.update(chunk)
    return sha256.hexdigest(), git.hexdigest()


def _atomic_write_json(path, value, mode=0o644):
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = '%s.tmp-%d' % (path, os.getpid())
    with open(tmp, 'w', encoding='utf-8') as handle:
        json.dump(value, handle, indent=1, sort_keys=True)
        handle.write('\n')
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    directory = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


# --- The local check ---------------------------------------------------------------------------

def read_manifest(store_dir, repo, revision):
    """The manifest of repo@revision, or None when there is none or it is not a complete one of ours."""
    try:
        with open(manifest_path(store_dir, repo, revision), encoding='utf-8') as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return None
    if (not isinstance(manifest, dict) or manifest.get('format') != MANIFEST_FORMAT
            or manifest.get('repo') != repo or manifest.get('revision') != revision
            or not isinstance(manifest.get('files'), list)):
        return None
    return manifest


def _expected_blob(entry):
    return entry['sha256'] if entry['lfs'] else entry['git_sha1']


def check_file(snapshot, entry, rehash):
    """Why one file of a manifest or a tree listing is not right, or None."""
    path = os.path.join(snapshot, entry['path'])
    try:
        stat = os.stat(path)
    except OSError:
        return 'missing'
    if stat.st_size != entry['size']:
        return 'size %d, the Hub lists %d' % (stat.st_size, entry['size'])
    blob = os.path.basename(os.path.realpath(path))
    if blob != _expected_blob(entry):
        return 'stored as blob %s, not under its hash %s' % (blob, _expected_blob(entry))
    if not rehash and entry.get('mtime_ns') is not None and stat.st_mtime_ns != entry['mtime_ns']:
        rehash = True  # changed since the manifest: read it again
    if rehash:
        sha256, git_sha1 = file_hashes(path)
        if entry['lfs'] and sha256 != entry['sha256']:
            return 'sha256 %s, the Hub lists %s' % (sha256, entry['sha256'])
        if not entry['lfs'] and git_sha1 != entry['git_sha1']:
            return 'git sha1 %s, the Hub lists %s' % (git_sha1, entry['git_sha1'])
    return None


def check_local(store_dir, repo, revision, rehash=False):
    """What the store holds of repo@revision, without the Hub.

    Returns {status: ready | missing | damaged, problems: {path: why}, manifest}.
    """
    manifest = read_manifest(store_dir, repo, revision)
    if manifest is None:
        return {'status': 'missing', 'problems': {}, 'manifest': None}
    snapshot = snapshot_dir(store_dir, repo, revision)
    problems = {}
    for entry in manifest['files']:
        why = check_file(snapshot, entry, rehash)
        if why:
            problems[entry['path']] = why
    return {'status': 'damaged' if problems else 'ready', 'problems': problems, 'manifest': manifest}


# --- The Hub -----------------------------------------------------------------------------------

def _hub(store_dir):
    """huggingface_hub, imported after its environment is set (it reads it at import)."""
    os.environ.setdefault('HF_HUB_DISABLE_PROGRESS_BARS', '1')
    os.environ.setdefault('HF_HUB_DISABLE_TELEMETRY', '1')
    os.environ.setdefault('HF_HUB_DISABLE_UPDATE_CHECK', '1')
    os.environ.setdefault('HF_HOME', os.path.join(store_dir, '.hf-home'))
    import huggingface_hub  # pylint: disable=import-outside-toplevel
    from huggingface_hub import errors  # pylint: disable=import-outside-toplevel
    from huggingface_hub.utils import disable_progress_bars  # pylint: disable=import-outside-toplevel
    disable_progress_bars()
    return huggingface_hub, errors


def read_token(token_file):
    """The token in token_file, or False (send none) when there is no file or it is empty."""
    if not token_file:
        return False
    try:
        with open(token_file, encoding='utf-8') as handle:
            token = handle.read().strip()
    except FileNotFoundError:
        return False
    return token or False


def _hub_error(exc, repo, revision, endpoint, errors):
    """A ModelStoreError naming what the Hub did not find, or why it could not be asked."""
    if isinstance(exc, errors.RevisionNotFoundError):
        return ModelStoreError('%s has no revision %s on %s: check model_store revision (a commit of that repo)'
                               % (repo, revision, endpoint), reason='unknown_revision')
    if isinstance(exc, errors.GatedRepoError):
        return ModelStoreError('%s is gated on %s: accept its licence on the Hub with the account of the token, and '
                               'give that token (vault_hf_token)' % (repo, endpoint), reason='gated')
    if isinstance(exc, errors.RepositoryNotFoundError):
        return ModelStoreError('%s is not a repo on %s (or it is private and the token, if any, may not read it): '
                               'check the repo id' % (repo, endpoint), reason='unknown_repo')
    if isinstance(exc, errors.HfHubHTTPError):
        return ModelStoreError('%s@%s: the Hub at %s answered %s' % (repo, revision, endpoint, exc),
                               reason='hub_error')
    if type(exc).__name__ in ('ConnectError', 'ConnectTimeout', 'LocalEntryNotFoundError'):
        return ModelStoreError('%s@%s: the Hub at %s cannot be reached (%s: %s)'
                               % (repo, revision, endpoint, type(exc).__name__, exc), reason='unreachable')
    return ModelStoreError('%s@%s: the download from the Hub at %s failed (%s: %s). The files completed so far are '
                           'kept; the next run fetches the rest and checks them all.'
                           % (repo, revision, endpoint, type(exc).__name__, exc), reason='download')


def list_remote(store_dir, repo, revision, endpoint, token):
    """The Hub's file list of repo@revision: [{path, size, lfs, sha256 (LFS) or None, git_sha1}]."""
    hub, errors = _hub(store_dir)
    api = hub.HfApi(endpoint=endpoint, token=token)
    try:
        items = list(api.list_repo_tree(repo, revision=revision, recursive=True))
    except Exception as exc:  # pylint: disable=broad-except
        raise _hub_error(exc, repo, revision, endpoint, errors) from exc
    files = []
    for item in items:
        if not isinstance(item, hub.RepoFile):
            continue
        lfs = item.lfs is not None
        files.append({'path': item.path, 'size': int(item.lfs.size if lfs else item.size), 'lfs': lfs,
                      'sha256': item.lfs.sha256 if lfs else None, 'git_sha1': item.blob_id})
    if not files:
        raise ModelStoreError('%s@%s lists no files on %s' % (repo, revision, endpoint), reason='empty')
    return sorted(files, key=lambda entry: entry['path'])


def _blob_path(store_dir, repo, entry):
    return os.path.join(store_dir, repo_folder_name(repo), 'blobs', _expected_blob(entry))


def _present_bytes(store_dir, repo, files):
    """Bytes of the listed files whose blob is already in the store at its listed size."""
    present = 0
    for entry in files:
        try:
            if os.path.getsize(_blob_path(store_dir, repo, entry)) == entry['size']:
                present += entry['size']
        except OSError:
            pass
    return present


def _existing_parent(path):
    path = os.path.abspath(path)
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def disk_figures(store_dir, repo, files, planner_bytes=0, reserve_bytes=0):
    """The space check's figures: free, hub_bytes, planner_bytes, present_bytes, needed_bytes, enough."""
    hub_bytes = sum(entry['size'] for entry in files)
    present = _present_bytes(store_dir, repo, files)
    needed = max(hub_bytes, int(planner_bytes or 0)) - present + int(reserve_bytes or 0)
    free = shutil.disk_usage(_existing_parent(store_dir)).free
    return {'free_bytes': free, 'hub_bytes': hub_bytes, 'hub_files': len(files), 'planner_bytes': int(planner_bytes or 0),
            'present_bytes': present, 'reserve_bytes': int(reserve_bytes or 0), 'needed_bytes': max(needed, 0),
            'enough': free >= needed}


def disk_message(store_dir, repo, revision, figures):
    return ('%s: not enough disk space under %s: %s free (%d bytes), the download needs %s (%d bytes): the Hub lists '
            '%s (%d bytes) in %d files, the planner\'s weight size is %s (%d bytes), %s already in the store, '
            '%s to keep free. Nothing was downloaded.'
            % (short(repo, revision), store_dir, human_bytes(figures['free_bytes']), figures['free_bytes'],
               human_bytes(figures['needed_bytes']), figures['needed_bytes'], human_bytes(figures['hub_bytes']),
               figures['hub_bytes'], figures['hub_files'], human_bytes(figures['planner_bytes']),
               figures['planner_bytes'], human_bytes(figures['present_bytes']), human_bytes(figures['reserve_bytes'])))


# --- Progress ----------------------------------------------------------------------------------

class ProgressWriter:
    """Writes the bytes on disk of a running download to a JSON file every `interval` seconds.

    Bytes done = the listed files' complete blobs + the client's partial
    files of them (``<etag>[.<random>].incomplete`` in the blobs folder): what
    is on disk, whichever way the client writes.
    """

    def __init__(self, path, store_dir, repo, revision, files, interval=1.0):
        self.path, self.store_dir, self.repo, self.revision = path, store_dir, repo, revision
        self.files, self.interval = files, interval
        self.total = sum(entry['size'] for entry in files)
        self.started = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._last = None

    def sample(self, phase):
        blobs = os.path.join(self.store_dir, repo_folder_name(self.repo), 'blobs')
        done, files_done = 0, 0
        wanted = {_expected_blob(entry): entry['size'] for entry in self.files}
        try:
            names = os.listdir(blobs)
        except OSError:
            names = []
        for name in names:
            try:
                size = os.path.getsize(os.path.join(blobs, name))
            except OSError:
                continue
            if name in wanted and size == wanted[name]:
                done += size
                files_done += 1
            elif name.endswith('.incomplete') and name.split('.', 1)[0] in wanted:
                # <etag>.incomplete, or <etag>.<random>.incomplete (huggingface_hub 2.4's private temporary name)
                done += size
        now = time.time()
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = max(done - self._last[1], 0) / (now - self._last[0])
        self._last = (now, done)
        record = {'format': PROGRESS_FORMAT, 'repo': self.repo, 'revision': self.revision, 'phase': phase,
                  'bytes_done': min(done, self.total), 'bytes_total': self.total, 'files_done': files_done,
                  'files_total': len(self.files), 'bytes_per_s': rate, 'elapsed_s': now - self.started,
                  'pid': os.getpid(), 'updated': now}
        _atomic_write_json(self.path, record)
        return record

    def _run(self):
        while not self._stop.wait(self.interval):
            try:
                self.sample('downloading')
            except OSError:
                pass

    def __enter__(self):
        self.sample('downloading')
        self._thread.start()
        return self

    def finish(self, phase):
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            self.sample(phase)
        except OSError:
            pass

    def __exit__(self, exc_type, exc, tb):
        if not self._stop.is_set():
            self.finish('failed' if exc_type else 'verifying')


def progress_line(record):
    if not record:
        return 'no download has reported yet'
    total = record.get('bytes_total') or 0
    done = record.get('bytes_done') or 0
    percent = (100.0 * done / total) if total else 100.0
    line = '%s: %s of %s (%.0f%%), %d of %d files' % (
        short(record['repo'], record['revision']), human_bytes(done), human_bytes(total), percent,
        record.get('files_done', 0), record.get('files_total', 0))
    if record.get('phase') == 'downloading' and record.get('bytes_per_s'):
        line += ', %s/s' % human_bytes(record['bytes_per_s'])
    return line + ' (%s)' % record.get('phase', '?')


def read_progress(path):
    try:
        with open(path, encoding='utf-8') as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def unit_active(unit):
    """Whether the systemd unit running a fetch is still active (activating, active or deactivating)."""
    try:
        answer = subprocess.run(['systemctl', 'is-active', unit], capture_output=True, text=True, timeout=30,
                                check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return answer.stdout.strip() in ('active', 'activating', 'deactivating', 'reloading')


def read_result(result_file):
    try:
        with open(result_file, encoding='utf-8') as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def wait_progress(path, wait_s, result_file=None, unit=None, poll_s=0.5):
    """(progress record, result or None, finished) once the fetch ends or after wait_s, whichever is first.

    The end is its result file when given (with the unit that runs it: a unit
    that stopped without one has ended too), else the record's phase.
    """
    deadline = time.monotonic() + max(float(wait_s), 0.0)
    while True:
        record = read_progress(path)
        if result_file:
            result = read_result(result_file)
            if result is not None:
                return read_progress(path), result, True
            if unit and not unit_active(unit):
                result = read_result(result_file)  # written just before the unit stopped
                return read_progress(path), result, True
        elif record and record.get('phase') in ('done', 'failed'):
            return record, None, True
        if time.monotonic() >= deadline:
            return record, None, False
        time.sleep(min(poll_s, max(deadline - time.monotonic(), 0.0)))


# --- The fetch ---------------------------------------------------------------------------------

def _manifest_files(snapshot, files):
    """The manifest's file records, hashing every file; raises ModelStoreError listing those that do not match."""
    records, problems = [], {}
    for entry in files:
        why = check_file(snapshot, dict(entry, mtime_ns=None), rehash=True)
        if why:
            problems[entry['path']] = why
            continue
        path = os.path.join(snapshot, entry['path'])
        sha256, git_sha1 = file_hashes(path)
        records.append({'path': entry['path'], 'size': entry['size'], 'lfs': entry['lfs'], 'sha256': sha256,
                        'git_sha1': git_sha1, 'blob': os.path.basename(os.path.realpath(path)),
                        'mtime_ns': os.stat(path).st_mtime_ns})
    return records, problems


def fetch(store_dir, repo, revision, endpoint, token=False, planner_bytes=0, reserve_bytes=0, reverify=False,
          check_mode=False, max_workers=8, progress_interval=1.0):
    """Make repo@revision complete and verified in the store. Returns a result dict; raises ModelStoreError."""
    errors = validate(repo, revision)
    if errors:
        raise ModelStoreError('; '.join(errors), reason='bad_input')
    snapshot = snapshot_dir(store_dir, repo, revision)
    result = {'repo': repo, 'revision': revision, 'path': snapshot,
              'manifest': manifest_path(store_dir, repo, revision), 'refetched': [], 'problems': {}}
    local = check_local(store_dir, repo, revision, rehash=reverify)
    result['problems'] = local['problems']
    if local['status'] == 'ready':
        result.update(status='ready', changed=False, files=len(local['manifest']['files']),
                      bytes_total=sum(entry['size'] for entry in local['manifest']['files']),
                      msg='%s is in the store, verified (%s)' % (short(repo, revision),
                                                                 'hashes read' if reverify else 'sizes, names, mtimes'))
        return result

    files = list_remote(store_dir, repo, revision, endpoint, token)
    figures = disk_figures(store_dir, repo, files, planner_bytes, reserve_bytes)
    result.update(disk=figures, files=len(files), bytes_total=figures['hub_bytes'])
    if not figures['enough']:
        raise ModelStoreError(disk_message(store_dir, repo, revision, figures), reason='disk', disk=figures)
    if check_mode:
        result.update(status='would_fetch', changed=True,
                      msg='%s would be fetched: %s to download, %s free'
                      % (short(repo, revision), human_bytes(figures['hub_bytes'] - figures['present_bytes']),
                         human_bytes(figures['free_bytes'])))
        return result

    # Nothing is trusted from here until the new manifest is in place.
    try:
        os.unlink(manifest_path(store_dir, repo, revision))
    except FileNotFoundError:
        pass
    os.makedirs(store_dir, mode=0o755, exist_ok=True)
    hub, hub_errors = _hub(store_dir)
    damaged = sorted(local['problems'])
    progress = ProgressWriter(progress_path(store_dir, repo, revision), store_dir, repo, revision, files,
                              interval=progress_interval)
    with progress:
        try:
            for path in damaged:  # a pointer that is there would be skipped by snapshot_download
                hub.hf_hub_download(repo, path, revision=revision, cache_dir=store_dir, endpoint=endpoint,
                                    token=token, force_download=True)
            hub.snapshot_download(repo, revision=revision, cache_dir=store_dir, endpoint=endpoint, token=token,
                                  max_workers=max_workers)
        except Exception as exc:  # pylint: disable=broad-except
            raise _hub_error(exc, repo, revision, endpoint, hub_errors) from exc
        progress.finish('verifying')
    result['refetched'] = damaged
    records, problems = _manifest_files(snapshot, files)
    if problems:
        # Fetched again from scratch (force_download); a second failure stops the run.
        result['refetched'] = sorted(set(damaged) | set(problems))
        try:
            for path in sorted(problems):
                hub.hf_hub_download(repo, path, revision=revision, cache_dir=store_dir, endpoint=endpoint,
                                    token=token, force_download=True)
        except Exception as exc:  # pylint: disable=broad-except
            progress.finish('failed')
            raise _hub_error(exc, repo, revision, endpoint, hub_errors) from exc
        records, problems = _manifest_files(snapshot, files)
        if problems:
            progress.finish('failed')
            raise ModelStoreError('%s: fetched twice and still wrong: %s. Nothing in the store is trusted for it.'
                                  % (short(repo, revision), '; '.join('%s: %s' % item for item in sorted(problems.items()))),
                                  reason='verify', problems=problems)
    manifest = {'format': MANIFEST_FORMAT, 'repo': repo, 'revision': revision, 'endpoint': endpoint,
                'snapshot': snapshot, 'files': records, 'bytes_total': sum(entry['size'] for entry in records),
                'completed': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}
    _atomic_write_json(manifest_path(store_dir, repo, revision), manifest)
    progress.finish('done')
    result.update(status='fetched', changed=True,
                  msg='%s fetched and verified: %d files, %s%s' % (
                      short(repo, revision), len(records), human_bytes(manifest['bytes_total']),
                      (', fetched again: ' + ', '.join(result['refetched'])) if result['refetched'] else ''))
    return result


# --- The fetch as a command (the model_store role runs it under systemd-run) -------------------

def main(argv=None):
    """Fetch one model and write the result (or the reason it stopped) to --result-file, atomically.

    The role copies this file to the host and runs it as a transient systemd
    unit, so a long download goes on without the controller's connection;
    the module model_fetch (state=progress) reports on it meanwhile.
    """
    import argparse  # pylint: disable=import-outside-toplevel
    parser = argparse.ArgumentParser(description='Fetch a model into the model store.')
    parser.add_argument('--store-dir', required=True)
    parser.add_argument('--repo', required=True)
    parser.add_argument('--revision', required=True)
    parser.add_argument('--endpoint', required=True)
    parser.add_argument('--token-file')
    parser.add_argument('--planner-bytes', type=int, default=0)
    parser.add_argument('--reserve-bytes', type=int, default=0)
    parser.add_argument('--reverify', action='store_true')
    parser.add_argument('--max-workers', type=int, default=8)
    parser.add_argument('--result-file', required=True)
    args = parser.parse_args(argv)
    try:
        result = fetch(args.store_dir, args.repo, args.revision, args.endpoint.rstrip('/'),
                       token=read_token(args.token_file), planner_bytes=args.planner_bytes,
                       reserve_bytes=args.reserve_bytes, reverify=args.reverify, max_workers=args.max_workers)
        answer = dict(result, failed=False)
    except ModelStoreError as exc:
        answer = dict(exc.details, failed=True, msg=str(exc))
    except Exception as exc:  # pylint: disable=broad-except
        answer = {'failed': True, 'reason': 'error',
                  'msg': '%s@%s: %s: %s' % (args.repo, args.revision, type(exc).__name__, exc)}
    _atomic_write_json(args.result_file, answer, mode=0o600)
    sys.stdout.write(answer['msg'] + '\n')
    return 1 if answer['failed'] else 0


if __name__ == '__main__':
    raise SystemExit(main())
