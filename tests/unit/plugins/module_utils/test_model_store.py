# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The model store (plugins/module_utils/_model_store.py) with the real huggingface_hub client.

The Hub is the local stand-in tests/doubles/hf_hub/hub_server.py on 127.0.0.1 (two
origins: the API and the LFS files' redirect target), serving a repo the test
writes: a 12 MiB LFS file (over the client's 10 MiB resume step) and two
regular files. Its faults cut a connection, corrupt a file or, stopped, make
the Hub unreachable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils import _model_store

pytest.importorskip('huggingface_hub')

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
sys.path.insert(0, os.path.join(REPO_ROOT, 'tests', 'doubles', 'hf_hub'))
import hub_server  # noqa: E402 pylint: disable=wrong-import-position

REPO = 'llm-test/tiny-store'
COMMIT = '3f1c2a9e8b7d6c5f4e3d2c1b0a9f8e7d6c5b4a39'
OTHER_COMMIT = '0' * 39 + '1'
MIB = 1 << 20
BIG = 'model.safetensors'
BIG_SIZE = 12 * MIB + 4321


@pytest.fixture(scope='module')
def repo_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp('hub-repo')
    with open(root / BIG, 'wb') as handle:
        handle.write(os.urandom(BIG_SIZE))
    (root / 'config.json').write_text(json.dumps({'model_type': 'qwen3', 'hidden_size': 128}) + '\n')
    (root / 'tokenizer').mkdir()
    (root / 'tokenizer' / 'tokenizer.json').write_text('{"version": "1.0"}\n')
    return root


@pytest.fixture()
def hub(repo_dir):
    stand_in = hub_server.HubStandIn([hub_server.Repo(REPO, COMMIT, str(repo_dir))]).start()
    stand_in.stopped = False
    yield stand_in
    if not stand_in.stopped:
        stand_in.stop()


def _call(hub, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(hub.endpoint + path, data=data, method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def faults(hub, **kinds):
    _call(hub, 'POST', '/_stand_in/faults', kinds)


def requests(hub):
    return _call(hub, 'GET', '/_stand_in/requests')


def clear_requests(hub):
    _call(hub, 'DELETE', '/_stand_in/requests')


def fetch(hub, store, **kwargs):
    return _model_store.fetch(str(store), REPO, kwargs.pop('revision', COMMIT), hub.endpoint, **kwargs)


def test_first_fetch_verifies_and_writes_the_manifest_last(hub, tmp_path, repo_dir):
    store = tmp_path / 'models'
    result = fetch(hub, store)
    assert result['status'] == 'fetched' and result['changed']
    assert result['path'] == str(store / 'models--llm-test--tiny-store' / 'snapshots' / COMMIT)
    with open(result['manifest'], encoding='utf-8') as handle:
        manifest = json.load(handle)
    assert (manifest['format'], manifest['repo'], manifest['revision']) == (1, REPO, COMMIT)
    by_path = {entry['path']: entry for entry in manifest['files']}
    assert sorted(by_path) == ['config.json', BIG, 'tokenizer/tokenizer.json']
    big_sha256 = _model_store.file_hashes(str(repo_dir / BIG))[0]
    assert by_path[BIG]['lfs'] and by_path[BIG]['sha256'] == big_sha256 == by_path[BIG]['blob']
    assert by_path[BIG]['size'] == BIG_SIZE
    config_sha256, config_sha1 = _model_store.file_hashes(str(repo_dir / 'config.json'))
    assert by_path['config.json'] == dict(by_path['config.json'], lfs=False, sha256=config_sha256,
                                          git_sha1=config_sha1, blob=config_sha1)
    with open(os.path.join(result['path'], BIG), 'rb') as served, open(repo_dir / BIG, 'rb') as original:
        assert served.read() == original.read()
    progress = _model_store.read_progress(_model_store.progress_path(str(store), REPO, COMMIT))
    assert (progress['phase'], progress['bytes_done'], progress['files_done']) == ('done', progress['bytes_total'], 3)


def test_a_second_run_asks_the_hub_nothing(hub, tmp_path):
    store = tmp_path / 'models'
    fetch(hub, store)
    clear_requests(hub)
    again = fetch(hub, store)
    assert (again['status'], again['changed']) == ('ready', False)
    assert requests(hub) == []
    # Even reading every file's hashes again needs no server.
    hub.stop()
    hub.stopped = True
    assert fetch(hub, store, reverify=True)['status'] == 'ready'


def test_a_connection_cut_halfway_through_is_resumed_from_10_mib(hub, tmp_path):
    store = tmp_path / 'models'
    faults(hub, cut={BIG: {'at': 11 * MIB, 'times': 1}})
    result = fetch(hub, store)
    assert result['status'] == 'fetched' and result['refetched'] == []
    gets = [(r['range'], r['status']) for r in requests(hub) if r['origin'] == 'lfs' and r['method'] == 'GET']
    assert gets == [(None, 200), ('bytes=%d-' % (10 * MIB), 206)]
    assert _model_store.check_local(str(store), REPO, COMMIT, rehash=True)['status'] == 'ready'


def test_a_failed_run_leaves_nothing_the_next_run_trusts(hub, tmp_path):
    store = tmp_path / 'models'
    faults(hub, cut={BIG: {'at': 11 * MIB, 'times': -1}})
    with pytest.raises(_model_store.ModelStoreError) as failed:
        fetch(hub, store)
    assert str(failed.value).startswith('%s@%s: the download from the Hub at %s failed (RemoteProtocolError'
                                        % (REPO, COMMIT, hub.endpoint))
    assert not os.path.exists(_model_store.manifest_path(str(store), REPO, COMMIT))
    assert _model_store.check_local(str(store), REPO, COMMIT)['status'] == 'missing'
    progress = _model_store.read_progress(_model_store.progress_path(str(store), REPO, COMMIT))
    assert progress['phase'] == 'failed'
    # The regular files completed and are kept; the next run fetches the rest and checks everything.
    faults(hub)
    clear_requests(hub)
    result = fetch(hub, store)
    assert result['status'] == 'fetched'
    fetched = sorted(r['path'].rsplit('/', 1)[-1] for r in requests(hub) if r['method'] == 'GET' and r['status'] < 300)
    assert BIG in fetched
    assert _model_store.check_local(str(store), REPO, COMMIT, rehash=True)['status'] == 'ready'


def test_a_corrupted_download_is_detected_and_fetched_again(hub, tmp_path, repo_dir):
    store = tmp_path / 'models'
    faults(hub, corrupt={BIG: {'times': 1}})
    result = fetch(hub, store)
    assert result['status'] == 'fetched' and result['refetched'] == [BIG]
    lfs_gets = [r for r in requests(hub) if r['origin'] == 'lfs' and r['method'] == 'GET']
    assert len(lfs_gets) == 2
    with open(os.path.join(result['path'], BIG), 'rb') as served, open(repo_dir / BIG, 'rb') as original:
        assert served.read() == original.read()


def test_a_file_corrupted_in_the_store_is_found_locally_and_fetched_again(hub, tmp_path):
    store = tmp_path / 'models'
    path = fetch(hub, store)['path']
    blob = os.path.realpath(os.path.join(path, BIG))
    with open(blob, 'r+b') as handle:
        handle.seek(5 * MIB)
        byte = handle.read(1)
        handle.seek(5 * MIB)
        handle.write(bytes([byte[0] ^ 0x01]))
    local = _model_store.check_local(str(store), REPO, COMMIT)
    assert local['status'] == 'damaged' and 'sha256' in local['problems'][BIG]
    clear_requests(hub)
    result = fetch(hub, store)
    assert result['status'] == 'fetched' and result['refetched'] == [BIG]
    assert _model_store.check_local(str(store), REPO, COMMIT, rehash=True)['status'] == 'ready'


def test_a_file_corrupted_for_good_stops_the_run_naming_it(hub, tmp_path):
    store = tmp_path / 'models'
    faults(hub, corrupt={BIG: {'times': -1}})
    with pytest.raises(_model_store.ModelStoreError) as failed:
        fetch(hub, store)
    assert 'fetched twice and still wrong: %s: sha256' % BIG in str(failed.value)
    assert _model_store.check_local(str(store), REPO, COMMIT)['status'] == 'missing'


def test_too_little_disk_stops_before_downloading_with_the_figures(hub, tmp_path, repo_dir):
    store = tmp_path / 'models'
    free = _model_store.disk_figures(str(store), REPO, [])['free_bytes']
    with pytest.raises(_model_store.ModelStoreError) as failed:
        fetch(hub, store, planner_bytes=free + 10 * MIB * 1024)
    message = str(failed.value)
    assert 'not enough disk space' in message and 'Nothing was downloaded' in message
    figures = failed.value.details['disk']
    assert figures['hub_bytes'] == sum(p.stat().st_size for p in repo_dir.rglob('*') if p.is_file())
    assert '(%d bytes) in 3 files' % figures['hub_bytes'] in message
    assert "the planner's weight size is" in message and '(%d bytes)' % (free + 10 * MIB * 1024) in message
    assert [r for r in requests(hub) if '/resolve/' in r['path'] or r['origin'] == 'lfs'] == []
    assert not os.path.exists(store / 'models--llm-test--tiny-store' / 'blobs')


def test_the_hubs_sizes_alone_can_stop_it(hub, tmp_path):
    store = tmp_path / 'models'
    free = _model_store.disk_figures(str(store), REPO, [])['free_bytes']
    with pytest.raises(_model_store.ModelStoreError) as failed:
        fetch(hub, store, planner_bytes=1, reserve_bytes=free - BIG_SIZE // 2)
    assert failed.value.details['disk']['needed_bytes'] > failed.value.details['disk']['free_bytes']


def test_an_unknown_revision_or_repo_stops_with_its_name(hub, tmp_path):
    with pytest.raises(_model_store.ModelStoreError) as revision:
        fetch(hub, tmp_path / 'models', revision=OTHER_COMMIT)
    assert str(revision.value).startswith('%s has no revision %s' % (REPO, OTHER_COMMIT))
    with pytest.raises(_model_store.ModelStoreError) as repo:
        _model_store.fetch(str(tmp_path / 'models'), 'llm-test/no-such-model', COMMIT, hub.endpoint)
    assert str(repo.value).startswith('llm-test/no-such-model is not a repo on %s' % hub.endpoint)


@pytest.mark.parametrize('repo, revision, words', [
    (REPO, 'main', 'must be a full commit hash'),
    (REPO, COMMIT[:12], 'must be a full commit hash'),
    ('tiny-store', COMMIT, 'must be a Hugging Face repo id'),
])
def test_bad_input_is_refused_before_asking(repo, revision, words, tmp_path):
    with pytest.raises(_model_store.ModelStoreError) as failed:
        _model_store.fetch(str(tmp_path), repo, revision, 'http://127.0.0.1:9')
    assert words in str(failed.value)


def test_check_mode_reads_the_listing_and_writes_nothing(hub, tmp_path):
    store = tmp_path / 'models'
    result = fetch(hub, store, check_mode=True)
    assert (result['status'], result['changed'], result['disk']['hub_bytes'] > BIG_SIZE) == ('would_fetch', True, True)
    assert not store.exists()
    assert [r for r in requests(hub) if '/resolve/' in r['path'] or r['origin'] == 'lfs'] == []


def test_an_unreachable_hub_is_named(hub, tmp_path):
    endpoint = hub.endpoint
    hub.stop()
    hub.stopped = True
    with pytest.raises(_model_store.ModelStoreError) as failed:
        fetch(hub, tmp_path / 'models')
    assert str(failed.value).startswith('%s@%s: the Hub at %s cannot be reached' % (REPO, COMMIT, endpoint))


def test_an_offline_engine_start_finds_the_snapshot_without_the_hub(hub, tmp_path):
    """What an engine does with HF_HUB_OFFLINE=1: the client resolves the pinned commit from the store alone."""
    store = tmp_path / 'models'
    path = fetch(hub, store)['path']
    hub.stop()
    hub.stopped = True
    code = ('from huggingface_hub import snapshot_download; '
            'print(snapshot_download(%r, revision=%r, cache_dir=%r))' % (REPO, COMMIT, str(store)))
    env = dict(os.environ, HF_HUB_OFFLINE='1', HF_HOME=str(tmp_path / 'hf-home'), HF_ENDPOINT=hub.endpoint)
    answer = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, timeout=120,
                            check=True)
    assert answer.stdout.strip() == path


def test_the_stand_ins_slow_link_paces_a_resume_at_its_own_rate(hub):
    """A GET with a Range from past the start goes at resumed_bytes_per_s: the
    model_store scenario slows the resume so that the play's progress sees it."""
    faults(hub, slow={BIG: {'bytes_per_s': 64 * MIB, 'resumed_bytes_per_s': 256 * 1024, 'times': -1}})
    url = 'http://127.0.0.1:%d/%s/%s/%s' % (hub.lfs_port, REPO, COMMIT, BIG)
    timings = []
    for first in (0, BIG_SIZE - 384 * 1024):
        started = time.monotonic()
        request = urllib.request.Request(url, headers={'Range': 'bytes=%d-' % first})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert len(response.read()) == BIG_SIZE - first
        timings.append(time.monotonic() - started)
    # 12 MiB at 64 MiB/s, then 384 KiB at 256 KiB/s.
    assert timings[0] < 1.2 and timings[1] >= 1.4, timings


def test_progress_is_reported_while_a_fetch_runs(hub, tmp_path):
    """On a slow link (4 MiB/s) the record shows part of the bytes while the fetch runs, all of them at its end."""
    store = tmp_path / 'models'
    path = _model_store.progress_path(str(store), REPO, COMMIT)
    faults(hub, slow={BIG: {'bytes_per_s': 4 * MIB, 'times': 1}})
    results = []
    worker = threading.Thread(target=lambda: results.append(fetch(hub, store, progress_interval=0.2)))
    worker.start()
    seen = []
    while worker.is_alive():
        record = _model_store.wait_progress(path, 0.5)[0]
        if record and record['phase'] == 'downloading':
            seen.append(record['bytes_done'])
    worker.join(120)
    assert results and results[0]['status'] == 'fetched'
    total = _model_store.read_progress(path)['bytes_total']
    # The partial LFS file counts: more than the small files' bytes while it downloads.
    assert any(MIB < done < total for done in seen), seen
    assert seen == sorted(seen)
    record = _model_store.read_progress(path)
    assert record['phase'] == 'done' and record['bytes_done'] == total
    line = _model_store.progress_line(record)
    assert line.startswith('%s@%s: ' % (REPO, COMMIT[:12])) and '(100%), 3 of 3 files (done)' in line
    assert _model_store.progress_line(dict(record, phase='downloading', bytes_done=total // 4,
                                           files_done=1, bytes_per_s=2 * MIB)).endswith(
        '(25%), 1 of 3 files, 2.0 MiB/s (downloading)')


def test_the_command_writes_its_result_and_the_wait_ends_on_it(hub, tmp_path):
    """The role's way: the file run as a command in the background, the wait ending on its result file."""
    store, result_file = tmp_path / 'models', tmp_path / 'result.json'
    command = [sys.executable, _model_store.__file__, '--store-dir', str(store), '--repo', REPO, '--revision', COMMIT,
               '--endpoint', hub.endpoint, '--result-file', str(result_file)]
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, HF_HOME=str(tmp_path / 'hf-home')))
    record, result, finished = _model_store.wait_progress(
        _model_store.progress_path(str(store), REPO, COMMIT), 120, result_file=str(result_file))
    assert worker.wait(60) == 0
    assert finished and result['failed'] is False and result['status'] == 'fetched'
    assert record['phase'] == 'done' and oct(result_file.stat().st_mode & 0o777) == '0o600'
    unknown = [OTHER_COMMIT if word == COMMIT else word for word in command]
    answer = subprocess.run(unknown, capture_output=True, text=True, check=False, timeout=120,
                            env=dict(os.environ, HF_HOME=str(tmp_path / 'hf-home')))
    assert answer.returncode == 1 and answer.stdout.startswith('%s has no revision %s' % (REPO, OTHER_COMMIT))
    assert json.loads(result_file.read_text())['reason'] == 'unknown_revision'


def test_a_unit_that_stopped_without_a_result_ends_the_wait(tmp_path):
    record, result, finished = _model_store.wait_progress(str(tmp_path / 'none.json'), 60,
                                                          result_file=str(tmp_path / 'result.json'),
                                                          unit='llm-model-fetch-no-such-unit.service')
    assert (record, result, finished) == (None, None, True)
