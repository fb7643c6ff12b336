# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A local stand-in for the Hugging Face Hub's HTTP API, for the model store's tests.

    python3 hub_server.py --repo ORG/NAME=COMMIT:DIR [--repo ...] \
        [--listen 127.0.0.1] [--port 0] [--lfs-port 0] [--ready-file FILE]

The real client (huggingface_hub, `snapshot_download` or `hf download`)
downloads from it through HF_ENDPOINT=http://127.0.0.1:PORT. Standard library
only (Python 3.11, Debian 12's python3), one file: it is copied into test
containers and run there with systemd-run. What it serves (as the Hub does,
see the test host notes on the Hub):

  GET  /api/models/{repo}/tree/{rev}[/{dir}]?recursive=true
       the file list: type, path, size, oid (the git blob sha1) and, for LFS
       files, lfs: {oid: sha256, size, pointerSize}. Directories are listed
       with type "directory".
  GET  /api/models/{repo}/revision/{rev}
       {id, sha, siblings}; the client asks this only for a branch name
       ("main" is the repo's one commit).
  HEAD/GET /{repo}/resolve/{rev}/{path}
       always with X-Repo-Commit. A regular file: 200 with ETag (its git
       sha1) and Content-Length. An LFS file: 302 to the LFS origin (the
       same host, --lfs-port) with X-Linked-Etag (sha256) and X-Linked-Size.
  HEAD/GET http://HOST:LFS_PORT/{repo}/{commit}/{path}   on the LFS origin
       the file, honouring `Range: bytes=N-` / `bytes=N-M` (206 + Content-Range).

An unknown repo is 404 with X-Error-Code: RepoNotFound, an unknown revision
404 with RevisionNotFound, a missing file 404 with EntryNotFound, and each an
X-Error-Message, as the Hub answers (the client turns the codes into
RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError).

A file is LFS when its name ends in .safetensors, .bin, .gguf, .pt or .pth, or
it is 1 MiB or more: what a Hub repo's .gitattributes does for model weights.

Faults, set by the test through the API port (JSON in, JSON out):
  POST   /_stand_in/faults   {"cut": {PATH: {"at": BYTES, "times": N}},
                              "corrupt": {PATH: {"times": N}},
                              "slow": {PATH: {"bytes_per_s": RATE, "times": N,
                                              "resumed_bytes_per_s": RATE2}}}
         replaces the faults. cut: a GET of PATH (either origin) announces
         the full Content-Length, sends the bytes up to absolute offset `at`
         and closes the connection, N times (-1: every time). corrupt: a GET
         of PATH serves the content with its first byte changed (same
         length), N times. slow: a GET of PATH is sent at RATE bytes a second
         (a slow link, so that a download takes long enough to watch); a GET
         with a Range from past the start (a resume) at RATE2 when given.
  GET    /_stand_in/requests the requests so far: method, origin (api or
         lfs), path, range (the Range header or null), status, token_sha256
         (the sha256 of the bearer token sent, or null: never the token).
  DELETE /_stand_in/requests forgets them.
Unreachable: stop the server (SIGTERM; systemctl stop of its unit).

It writes one JSON line to --ready-file (or stderr) once it listens:
{"port": P, "lfs_port": L}, so that port 0 may pick free ones.
"""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.parse

LFS_SUFFIXES = ('.safetensors', '.bin', '.gguf', '.pt', '.pth')
LFS_MIN_SIZE = 1 << 20
COMMIT_RE = re.compile(r'^[0-9a-f]{40}$')


def git_blob_sha1(path):
    """The git blob id of a file: sha1 over 'blob <size>\\0' + content."""
    digest = hashlib.sha1()
    digest.update(b'blob %d\0' % os.path.getsize(path))
    with open(path, 'rb') as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, 'rb') as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


class Repo:
    """One repo at one commit: the files under a directory, hashed once at start."""

    def __init__(self, repo_id, commit, directory):
        if not COMMIT_RE.match(commit):
            raise ValueError('%s: the commit must be 40 hex digits, not %r' % (repo_id, commit))
        self.repo_id, self.commit, self.directory = repo_id, commit, os.path.abspath(directory)
        self.files = {}
        for root, dirs, names in os.walk(self.directory):
            dirs.sort()
            for name in sorted(names):
                full = os.path.join(root, name)
                rel = os.path.relpath(full, self.directory).replace(os.sep, '/')
                if rel.startswith('.'):
                    continue
                size = os.path.getsize(full)
                entry = {'path': rel, 'full': full, 'size': size, 'oid': git_blob_sha1(full)}
                if name.endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE:
                    entry['lfs'] = {'oid': file_sha256(full), 'size': size, 'pointerSize': 134}
                self.files[rel] = entry

    def tree(self, prefix, recursive):
        prefix = prefix.strip('/')
        listed, dirs = [], set()
        for rel, entry in sorted(self.files.items()):
            if prefix and not rel.startswith(prefix + '/'):
                continue
            inner = rel[len(prefix) + 1:] if prefix else rel
            parts = inner.split('/')
            for depth in range(1, len(parts)):
                if not recursive and depth > 1:
                    break
                dirs.add('/'.join(([prefix] if prefix else []) + parts[:depth]))
            if not recursive and len(parts) > 1:
                continue
            item = {'type': 'file', 'oid': entry['oid'], 'size': entry['size'], 'path': rel}
            if 'lfs' in entry:
                item['lfs'] = dict(entry['lfs'])
            listed.append(item)
        directories = [{'type': 'directory', 'oid': hashlib.sha1(d.encode()).hexdigest(), 'size': 0, 'path': d}
                       for d in sorted(dirs)]
        return directories + listed


class State:
    def __init__(self, repos):
        self.repos = {repo.repo_id: repo for repo in repos}
        self.lock = threading.Lock()
        self.faults = {'cut': {}, 'corrupt': {}, 'slow': {}}
        self.requests = []
        self.lfs_port = None

    def take_fault(self, kind, path):
        """The fault of this kind for path, counted down; None when there is none (left)."""
        with self.lock:
            fault = self.faults[kind].get(path)
            if not fault or fault.get('times', 1) == 0:
                return None
            if fault.get('times', 1) > 0:
                fault['times'] = fault.get('times', 1) - 1
            return dict(fault)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    server_version = 'hub-stand-in/1'
    origin = 'api'

    def log_message(self, fmt, *args):  # one compact line per request, on stderr
        sys.stderr.write('%s %s\n' % (self.origin, fmt % args))

    @property
    def state(self):
        return self.server.state

    def _record(self, status):
        if self.path.startswith('/_stand_in/'):
            return
        with self.state.lock:
            bearer = (self.headers.get('Authorization') or '').partition('Bearer ')[2]
            self.state.requests.append({'method': self.command, 'origin': self.origin,
                                        'path': urllib.parse.urlsplit(self.path).path,
                                        'range': self.headers.get('Range'), 'status': status,
                                        'token_sha256': hashlib.sha256(bearer.encode()).hexdigest() if bearer else None})

    def _send(self, status, body=b'', headers=None, content_type='application/json'):
        self._record(status)
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if body or status != 302:
            self.send_header('Content-Type', content_type)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)

    def _json(self, status, value, headers=None):
        self._send(status, json.dumps(value).encode(), headers)

    def _error(self, code, message, extra=None):
        headers = {'X-Error-Code': code, 'X-Error-Message': message}
        headers.update(extra or {})
        self._json(404, {'error': message}, headers)

    def _repo_and_commit(self, repo_id, revision):
        repo = self.state.repos.get(repo_id)
        if repo is None:
            self._error('RepoNotFound', 'Repository not found')
            return None
        if revision not in (repo.commit, 'main'):
            self._error('RevisionNotFound', 'Invalid rev id: %s' % revision)
            return None
        return repo

    # --- the API origin --------------------------------------------------------------------
    def do_GET(self):  # noqa: N802 (http.server's name)
        self._dispatch()

    def do_HEAD(self):  # noqa: N802
        self._dispatch()

    def do_POST(self):  # noqa: N802
        if self.origin == 'api' and self.path == '/_stand_in/faults':
            length = int(self.headers.get('Content-Length') or 0)
            faults = json.loads(self.rfile.read(length) or b'{}')
            with self.state.lock:
                self.state.faults = {kind: dict(faults.get(kind) or {}) for kind in ('cut', 'corrupt', 'slow')}
            return self._json(200, self.state.faults)
        return self._json(404, {'error': 'not found'})

    def do_DELETE(self):  # noqa: N802
        if self.origin == 'api' and self.path == '/_stand_in/requests':
            with self.state.lock:
                self.state.requests = []
            return self._json(200, [])
        return self._json(404, {'error': 'not found'})

    def _dispatch(self):
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        if self.origin == 'lfs':
            return self._lfs(path)
        if path == '/_stand_in/requests':
            with self.state.lock:
                requests = list(self.state.requests)
            return self._send(200, json.dumps(requests).encode())
        match = re.match(r'^/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?$', path)
        if match:
            repo = self._repo_and_commit(match.group(1), match.group(2))
            if repo:
                recursive = urllib.parse.parse_qs(url.query).get('recursive', ['false'])[0].lower() == 'true'
                self._json(200, repo.tree(match.group(3) or '', recursive))
            return None
        match = re.match(r'^/api/models/([^/]+/[^/]+)/revision/([^/]+)$', path)
        if match:
            repo = self._repo_and_commit(match.group(1), match.group(2))
            if repo:
                self._json(200, {'id': repo.repo_id, 'modelId': repo.repo_id, 'sha': repo.commit, 'private': False,
                                 'siblings': [{'rfilename': rel} for rel in sorted(repo.files)]})
            return None
        match = re.match(r'^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$', path)
        if match:
            return self._resolve(*match.groups())
        return self._json(404, {'error': 'not found'})

    def _resolve(self, repo_id, revision, rel):
        repo = self._repo_and_commit(repo_id, revision)
        if repo is None:
            return None
        entry = repo.files.get(rel)
        if entry is None:
            return self._error('EntryNotFound', '%s does not exist at %s' % (rel, revision),
                               {'X-Repo-Commit': repo.commit})
        if 'lfs' in entry:
            host = (self.headers.get('Host') or '127.0.0.1').rsplit(':', 1)[0]
            location = 'http://%s:%d/%s/%s/%s' % (host, self.state.lfs_port, repo.repo_id, repo.commit,
                                                  urllib.parse.quote(rel))
            return self._send(302, b'', {'Location': location, 'X-Repo-Commit': repo.commit,
                                         'X-Linked-Etag': '"%s"' % entry['lfs']['oid'],
                                         'X-Linked-Size': str(entry['size']), 'ETag': '"%s"' % entry['oid']})
        return self._file(repo, entry, {'ETag': '"%s"' % entry['oid']})

    # --- the LFS origin --------------------------------------------------------------------
    def _lfs(self, path):
        match = re.match(r'^/([^/]+/[^/]+)/([0-9a-f]{40})/(.+)$', path)
        repo = self.state.repos.get(match.group(1)) if match else None
        entry = repo.files.get(match.group(3)) if repo and match.group(2) == repo.commit else None
        if entry is None or 'lfs' not in entry:
            return self._json(404, {'error': 'not found'})
        return self._file(repo, entry, {'ETag': '"%s"' % entry['lfs']['oid']})

    def _file(self, repo, entry, headers):
        size = entry['size']
        start, end = 0, size - 1
        status = 200
        spec = self.headers.get('Range')
        if spec:
            match = re.match(r'^bytes=(\d*)-(\d*)$', spec.strip())
            if not match or (not match.group(1) and not match.group(2)):
                return self._send(416, b'', {'Content-Range': 'bytes */%d' % size})
            if match.group(1):
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            else:
                start = max(size - int(match.group(2)), 0)
            if start >= size or start > end:
                return self._send(416, b'', {'Content-Range': 'bytes */%d' % size})
            status = 206
        headers = dict(headers)
        headers.update({'X-Repo-Commit': repo.commit, 'Accept-Ranges': 'bytes'})
        if status == 206:
            headers['Content-Range'] = 'bytes %d-%d/%d' % (start, end, size)
        length = end - start + 1
        cut = self.state.take_fault('cut', entry['path']) if self.command == 'GET' else None
        corrupt = self.state.take_fault('corrupt', entry['path']) if self.command == 'GET' else None
        slow = self.state.take_fault('slow', entry['path']) if self.command == 'GET' else None
        if slow is not None and start > 0:
            slow['bytes_per_s'] = slow.get('resumed_bytes_per_s', slow['bytes_per_s'])
        block = 1 << 20 if slow is None else max(1, min(1 << 18, int(slow['bytes_per_s'])))
        self._record(status)
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header('Content-Type', 'application/octet-stream')
        self.send_header('Content-Length', str(length))
        self.end_headers()
        if self.command == 'HEAD':
            return None
        stop = end + 1 if cut is None else max(start, min(int(cut['at']), end + 1))
        with open(entry['full'], 'rb') as handle:
            handle.seek(start)
            position = start
            while position < stop:
                chunk = handle.read(min(block, stop - position))
                if not chunk:
                    break
                if slow is not None:  # the link's pace: this block's share of a second
                    time.sleep(len(chunk) / float(slow['bytes_per_s']))
                if corrupt is not None and position == 0:
                    chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                self.wfile.write(chunk)
                position += len(chunk)
        if cut is not None:
            self.wfile.flush()
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return None


class LfsHandler(Handler):
    origin = 'lfs'


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class HubStandIn:
    """Both origins in threads of this process (the unit tests), or run by main()."""

    def __init__(self, repos, listen='127.0.0.1', port=0, lfs_port=0):
        self.state = State(repos)
        self.api = Server((listen, port), Handler)
        self.lfs = Server((listen, lfs_port), LfsHandler)
        self.api.state = self.lfs.state = self.state
        self.state.lfs_port = self.lfs.server_address[1]
        self.threads = []

    @property
    def port(self):
        return self.api.server_address[1]

    @property
    def lfs_port(self):
        return self.lfs.server_address[1]

    @property
    def endpoint(self):
        return 'http://%s:%d' % (self.api.server_address[0], self.port)

    def start(self):
        for server in (self.api, self.lfs):
            thread = threading.Thread(target=server.serve_forever, kwargs={'poll_interval': 0.1}, daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self):
        for server in (self.api, self.lfs):
            server.shutdown()
            server.server_close()
        for thread in self.threads:
            thread.join(timeout=10)


def parse_repo(text):
    match = re.match(r'^([^/=]+/[^/=]+)=([0-9a-f]{40}):(.+)$', text)
    if not match:
        raise argparse.ArgumentTypeError('--repo takes ORG/NAME=COMMIT:DIR (a 40-hex commit), not %r' % text)
    return Repo(*match.groups())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--repo', action='append', type=parse_repo, required=True)
    parser.add_argument('--listen', default='127.0.0.1')
    parser.add_argument('--port', type=int, default=0)
    parser.add_argument('--lfs-port', type=int, default=0)
    parser.add_argument('--ready-file')
    args = parser.parse_args(argv)
    hub = HubStandIn(args.repo, args.listen, args.port, args.lfs_port)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=hub.api.shutdown).start())
    threading.Thread(target=hub.lfs.serve_forever, daemon=True).start()
    ready = json.dumps({'port': hub.port, 'lfs_port': hub.lfs_port})
    if args.ready_file:
        with open(args.ready_file + '.tmp', 'w', encoding='utf-8') as handle:
            handle.write(ready + '\n')
        os.replace(args.ready_file + '.tmp', args.ready_file)
    sys.stderr.write('listening %s\n' % ready)
    sys.stderr.flush()
    hub.api.serve_forever()
    hub.lfs.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
