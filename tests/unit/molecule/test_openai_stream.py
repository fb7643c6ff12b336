# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/molecule/openai_stream.py, the scenarios' openai client, run as they run it.

Against the OpenAI-compatible test server (tests/doubles/openai_server), a
subprocess on a free port: token i of backend NAME is the text " NAME-i".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
CLIENT = os.path.join(REPO_ROOT, 'tests', 'molecule', 'openai_stream.py')
TEST_SERVER = os.path.join(REPO_ROOT, 'tests', 'doubles', 'openai_server', 'openai_test_server.py')
KEY = 'sk-test-alice'


@pytest.fixture
def server(tmp_path):
    """start(*args) -> (base URL, process) of a test server that wants KEY."""
    key_file = tmp_path / 'server.key'
    key_file.write_text(KEY + '\n')
    procs = []

    def start(*args):
        proc = subprocess.Popen([sys.executable, TEST_SERVER, '--port', '0', '--api-key-file', str(key_file), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(proc)
        line = proc.stdout.readline()
        assert line.startswith('listening on '), line
        return line.split()[-1], proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def key_file(tmp_path):
    path = tmp_path / 'alice.key'
    path.write_text(KEY + '\n')
    return str(path)


def stream(*args, env=None):
    """The client's report (its exit status must be 0, whatever the server did)."""
    proc = subprocess.run([sys.executable, CLIENT, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **(env or {})), check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_streams_the_tokens_asked_for_and_lists_the_models(server, key_file):
    url, _proc = server('--model', 'beta-coder', '--model', 'alpha-chat', '--name', 'beta')
    result = stream('--base-url', url + '/v1', '--key-file', key_file, '--model', 'beta-coder', '--list-models')
    assert result['error'] is None, result
    assert result['models'] == ['alpha-chat', 'beta-coder']
    assert result['model'] == 'beta-coder'
    # Eight tokens by default, each a delta with text, the last beta-7; stopped by the limit.
    assert result['chunks'] == 8 and result['events'] >= 8
    assert result['text'].split() == ['beta-%d' % i for i in range(8)]
    assert result['finish_reason'] == 'length'
    assert result['wrong_key_status'] is None and result['killed'] is False


def test_the_key_from_the_environment_and_a_wrong_key_refused(server):
    url, _proc = server('--model', 'tiny-chat', '--name', 'home')
    result = stream('--base-url', url + '/v1', '--model', 'tiny-chat', '--max-tokens', '3', '--wrong-key',
                    env={'OPENAI_API_KEY': KEY})
    assert result['error'] is None, result
    assert result['text'].split() == ['home-0', 'home-1', 'home-2']
    assert result['models'] is None
    assert result['wrong_key_status'] == 401


def test_a_refused_key_is_reported_not_raised(server, tmp_path):
    url, _proc = server('--model', 'tiny-chat')
    wrong = tmp_path / 'wrong.key'
    wrong.write_text('sk-someone-else')
    result = stream('--base-url', url + '/v1', '--key-file', str(wrong), '--model', 'tiny-chat')
    assert result['error_type'] == 'openai.AuthenticationError'
    assert result['chunks'] == 0 and result['finish_reason'] is None


def test_address_connects_there_for_a_name_that_does_not_resolve(server, key_file):
    url, _proc = server('--model', 'tiny-chat', '--name', 'home')
    port = url.rsplit(':', 1)[1]
    # .invalid never resolves (RFC 2606): only the pinned address can reach the server.
    result = stream('--base-url', 'http://llm.invalid:%s/v1' % port, '--address', '127.0.0.1',
                    '--key-file', key_file, '--model', 'tiny-chat', '--wrong-key')
    assert result['error'] is None, result
    assert result['chunks'] == 8
    assert result['wrong_key_status'] == 401
    unpinned = stream('--base-url', 'http://llm.invalid:%s/v1' % port, '--key-file', key_file, '--model', 'tiny-chat')
    assert unpinned['error_type'] == 'openai.APIConnectionError'


def test_a_backend_killed_mid_stream_ends_the_stream_with_an_error(server, key_file):
    url, proc = server('--model', 'alpha-chat', '--name', 'alpha', '--tokens', '200', '--inter-token-delay', '0.05')
    result = stream('--base-url', url + '/v1', '--key-file', key_file, '--model', 'alpha-chat',
                    '--max-tokens', '200', '--timeout', '30', '--kill-after', '5', '--', 'kill', '-KILL', str(proc.pid))
    assert result['killed'] is True
    assert 5 <= result['chunks'] < 200
    assert result['finish_reason'] is None
    assert result['error_type'] == 'openai.APIConnectionError', result
    assert result['seconds_kill_to_end'] < 5
    assert 0 <= result['seconds_killed_to_end'] <= result['seconds_kill_to_end']


def test_a_kill_without_its_command_is_refused(key_file):
    proc = subprocess.run([sys.executable, CLIENT, '--base-url', 'http://127.0.0.1:9/v1', '--key-file', key_file,
                           '--model', 'm', '--kill-after', '2'], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2
    assert 'needs the command' in proc.stderr
