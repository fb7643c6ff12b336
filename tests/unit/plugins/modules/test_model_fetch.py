# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run plugins/modules/model_fetch.py as Ansible does, against the Hub's stand-in (tests/doubles/hf_hub/hub_server.py)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import urllib.request

import pytest

pytest.importorskip('huggingface_hub')

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
sys.path.insert(0, os.path.join(REPO_ROOT, 'tests', 'doubles', 'hf_hub'))
import hub_server  # noqa: E402 pylint: disable=wrong-import-position

REPO = 'llm-test/module-store'
COMMIT = '9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d'
TOKEN = 'hf_unit_4b1d9e7c2a6f'


@pytest.fixture()
def hub(tmp_path):
    root = tmp_path / 'repo'
    root.mkdir()
    (root / 'config.json').write_text('{"model_type": "qwen3"}\n')
    (root / 'model.safetensors').write_bytes(os.urandom(3 << 20))
    stand_in = hub_server.HubStandIn([hub_server.Repo(REPO, COMMIT, str(root))]).start()
    yield stand_in
    stand_in.stop()


@pytest.fixture
def run_module(module_runner):
    return lambda args, **kwargs: module_runner('model_fetch', args, **kwargs)


def test_fetch_then_nothing_to_do_with_the_token_from_its_file(run_module, hub, tmp_path):
    token_file = tmp_path / 'hf-token'
    token_file.write_text(TOKEN + '\n')
    token_file.chmod(0o600)
    args = {'repo': REPO, 'revision': COMMIT, 'store_dir': str(tmp_path / 'store'), 'endpoint': hub.endpoint,
            'token_file': str(token_file), 'planner_weight_bytes': 1000}
    rc, result = run_module(args, check_mode=True)
    assert rc == 0 and (result['changed'], result['status']) == (True, 'would_fetch'), result
    assert not (tmp_path / 'store').exists()
    rc, result = run_module(args)
    assert rc == 0 and (result['changed'], result['status'], result['files']) == (True, 'fetched', 2), result
    assert TOKEN not in json.dumps(result)
    with urllib.request.urlopen(hub.endpoint + '/_stand_in/requests') as response:
        seen = {request['token_sha256'] for request in json.loads(response.read()) if request['origin'] == 'api'}
    assert seen == {hashlib.sha256(TOKEN.encode()).hexdigest()}
    rc, again = run_module(args)
    assert rc == 0 and (again['changed'], again['status']) == (False, 'ready'), again
    rc, progress = run_module(dict(args, state='progress', wait_s=0))
    assert rc == 0 and progress['status'] == 'done' and progress['msg'].endswith('(100%), 2 of 2 files (done)')


def test_a_stop_is_a_failure_with_the_message(run_module, hub, tmp_path):
    rc, result = run_module({'repo': REPO, 'revision': '1' * 40, 'store_dir': str(tmp_path / 'store'),
                             'endpoint': hub.endpoint})
    assert rc == 1 and result['failed'] is True
    assert result['msg'].startswith('%s has no revision %s on %s' % (REPO, '1' * 40, hub.endpoint))
    assert result['reason'] == 'unknown_revision'
