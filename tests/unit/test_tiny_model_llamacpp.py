# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The prebuilt llama-server archive (make llamacpp) serving the tiny model (make tiny-model).

The server runs from the unpacked archive, as the llamacpp role installs it,
with the flags the role uses. Token ids and counts below are worked out by
hand from the vocabulary in tests/gguf_model/README.md, not read from the
generator, so a tokenizer or template that drifts fails here. The model's
weights are random: its words are not checked, only their shape, and that
the same greedy request gives the same words streamed or not. Its output
layer leans towards six words, so replies are readable and can be checked
for shape: one word per token.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import tarfile
import time

import pytest
import requests

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
MODEL = os.path.join(REPO_ROOT, 'build', 'models', 'tiny-chat.gguf')
ALIAS = 'tiny-chat'
STARTUP_LIMIT_S = 30
REQUEST_TIMEOUT_S = 30


def _pinned_commit():
    with open(os.path.join(REPO_ROOT, 'Makefile'), encoding='utf-8') as f:
        return re.search(r'^LLAMACPP_COMMIT := (\S+)$', f.read(), re.M).group(1)


COMMIT = _pinned_commit()
# What `make llamacpp` links, whatever its build key: the archive the
# scenarios install.
ARCHIVE = os.path.join(REPO_ROOT, 'build', 'llamacpp', 'llama-server-cpu.tar.gz')

pytestmark = [
    pytest.mark.skipif(not os.path.isfile(ARCHIVE),
                       reason='%s is absent: run `make llamacpp`' % os.path.relpath(ARCHIVE, REPO_ROOT)),
    pytest.mark.skipif(not os.path.isfile(MODEL),
                       reason='%s is absent: run `make tiny-model`' % os.path.relpath(MODEL, REPO_ROOT)),
]

# "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" in token ids:
# 280 <|im_start|>; "user" = u s er (er = 276); 10 "\n"; "hi" = h i (no merge);
# 281 <|im_end|>; "assistant" has no merge, so its nine bytes.
CHAT_HI_PROMPT_IDS = ([280, 117, 115, 276, 10, 104, 105, 281, 10, 280]
                      + [97, 115, 115, 105, 115, 116, 97, 110, 116] + [10])
CHAT_HI = [{'role': 'user', 'content': 'hi'}]
# Greedy and no prompt reuse, so the same request computes the same tokens.
GREEDY = {'temperature': 0, 'cache_prompt': False}
# The words the model prefers (tests/gguf_model/README.md), each one token.
SPOKEN = re.compile(r'( (the|and|hello|world|is|of))+')


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    """The archive unpacked as the role would: PREFIX/bin/llama-server, PREFIX/VERSION."""
    prefix = tmp_path_factory.mktemp('llamacpp')
    # The data filter where the interpreter has it (3.11.4 on; Debian 12's
    # 3.11.2 does not): the archive is the one make llamacpp built.
    safe = {'filter': 'data'} if hasattr(tarfile, 'data_filter') else {}
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(prefix, **safe)
    return prefix


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.fixture(scope='module')
def server(installed, tmp_path_factory):
    """llama-server on a free local port, ready; yields its URL and how long start-up took."""
    port = _free_port()
    log_path = tmp_path_factory.mktemp('llama-server') / 'server.log'
    command = [str(installed / 'bin' / 'llama-server'), '-m', MODEL, '--alias', ALIAS,
               '--host', '127.0.0.1', '--port', str(port), '-c', '2048', '-np', '2',
               '--threads', '2', '--no-webui']
    url = 'http://127.0.0.1:%d' % port
    with open(log_path, 'wb') as log:
        started = time.monotonic()
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            ready_after = None
            while time.monotonic() - started < STARTUP_LIMIT_S and process.poll() is None:
                try:
                    if requests.get(url + '/health', timeout=2).status_code == 200:
                        ready_after = time.monotonic() - started
                        break
                except requests.ConnectionError:
                    pass
                time.sleep(0.05)
            if ready_after is None:
                pytest.fail('llama-server not ready after %d s (exit %s):\n%s'
                            % (STARTUP_LIMIT_S, process.poll(), log_path.read_text(errors='replace')[-4000:]))
            yield {'url': url, 'ready_after': ready_after, 'log': log_path}
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _post(server, path, body, **kwargs):
    response = requests.post(server['url'] + path, json=body, timeout=REQUEST_TIMEOUT_S, **kwargs)
    assert response.status_code == 200, response.text
    return response


def test_archive_holds_the_server_its_version_and_licenses():
    with tarfile.open(ARCHIVE) as tar:
        members = {m.name: m for m in tar.getmembers()}
        version = tar.extractfile('VERSION').read().decode()
    server_binary = members['bin/llama-server']
    assert server_binary.isfile() and server_binary.mode == 0o755
    assert members['LICENSE'].isfile()
    assert 'licenses/LICENSE-cpp-httplib' in members
    assert all(m.uid == 0 and m.gid == 0 for m in members.values())
    fields = dict(line.split('=', 1) for line in version.splitlines())
    assert fields['commit'] == COMMIT
    assert fields['backend'] == 'cpu'
    assert fields['source'].startswith('llama-cpp-python==')


def test_server_needs_only_system_libraries(installed):
    """ggml and llama are linked in; what is left comes with glibc, libstdc++6, libgcc-s1 and libgomp1."""
    result = subprocess.run(['ldd', str(installed / 'bin' / 'llama-server')],
                            capture_output=True, text=True, check=True)
    assert 'not found' not in result.stdout
    libraries = {os.path.basename(line.split()[0]) for line in result.stdout.splitlines() if line.strip()}
    system = {'linux-vdso.so.1', 'libc.so.6', 'libm.so.6', 'libstdc++.so.6', 'libgcc_s.so.1', 'libgomp.so.1'}
    assert {lib for lib in libraries if not lib.startswith('ld-linux')} <= system, result.stdout
    assert not any('ggml' in lib or 'llama' in lib for lib in libraries)


def test_version_names_the_pinned_commit(installed):
    """The sdist's shallow git history would stamp build 1; the build says 0 (unknown) instead."""
    fields = dict(line.split('=', 1) for line in (installed / 'VERSION').read_text().splitlines())
    result = subprocess.run([str(installed / 'bin' / 'llama-server'), '--version'],
                            capture_output=True, text=True, timeout=30, check=True)
    assert re.fullmatch(r'\d+\.\d+\.\d+(-dev)?', fields['version'])
    assert 'version: %s (build 0, commit %s)' % (fields['version'], COMMIT) in result.stdout + result.stderr


def test_server_is_ready_within_seconds(server):
    assert server['ready_after'] < STARTUP_LIMIT_S
    assert requests.get(server['url'] + '/health', timeout=5).json() == {'status': 'ok'}


def test_models_lists_the_alias(server):
    models = requests.get(server['url'] + '/v1/models', timeout=5).json()
    assert models['object'] == 'list'
    assert [m['id'] for m in models['data']] == [ALIAS]


def test_props_show_two_slots_sharing_the_context(server):
    props = requests.get(server['url'] + '/props', timeout=5).json()
    assert props['total_slots'] == 2
    # -c 2048 split between -np 2 slots.
    assert props['default_generation_settings']['n_ctx'] == 1024


def test_tokenizer_uses_the_merges_and_special_tokens(server):
    assert _post(server, '/tokenize', {'content': ' hello world'}).json()['tokens'] == [266, 271]
    assert _post(server, '/tokenize', {'content': 'user'}).json()['tokens'] == [117, 115, 276]
    assert _post(server, '/tokenize', {'content': '<|im_start|><|im_end|><|endoftext|>'}).json()['tokens'] \
        == [280, 281, 279]
    assert _post(server, '/detokenize', {'tokens': [266, 271]}).json()['content'] == ' hello world'


def test_chat_template_is_chatml(server):
    prompt = _post(server, '/apply-template', {'messages': CHAT_HI}).json()['prompt']
    assert prompt == '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n'
    assert _post(server, '/tokenize', {'content': prompt}).json()['tokens'] == CHAT_HI_PROMPT_IDS


def _chat(server, **extra):
    body = {'model': ALIAS, 'messages': CHAT_HI, 'max_tokens': 8}
    body.update(GREEDY)
    body.update(extra)
    return _post(server, '/v1/chat/completions', body, stream=extra.get('stream', False))


def test_chat_completion(server):
    reply = _chat(server).json()
    assert reply['object'] == 'chat.completion'
    assert reply['model'] == ALIAS
    choice = reply['choices'][0]
    assert choice['message']['role'] == 'assistant'
    content = choice['message']['content']
    assert SPOKEN.fullmatch(content), content
    # The model never prefers <|im_end|>, so it stops at max_tokens: 8 words.
    assert choice['finish_reason'] == 'length'
    assert len(content.split()) == 8
    assert reply['usage']['prompt_tokens'] == len(CHAT_HI_PROMPT_IDS) == 20
    assert reply['usage']['completion_tokens'] == 8
    assert reply['usage']['total_tokens'] == 28


def test_streamed_chat_completion_sends_the_same_words_as_events(server):
    expected = _chat(server).json()['choices'][0]['message']['content']
    response = _chat(server, stream=True)
    assert response.headers['Content-Type'].startswith('text/event-stream')
    events = [line for line in response.iter_lines(decode_unicode=True) if line]
    assert all(line.startswith('data: ') for line in events), events
    assert events[-1] == 'data: [DONE]'
    chunks = [json.loads(line[len('data: '):]) for line in events[:-1]]
    assert {chunk['object'] for chunk in chunks} == {'chat.completion.chunk'}
    assert chunks[0]['choices'][0]['delta'].get('role') == 'assistant'
    text = ''.join(chunk['choices'][0]['delta'].get('content') or '' for chunk in chunks if chunk['choices'])
    assert text == expected
    assert [c['choices'][0]['finish_reason'] for c in chunks if c['choices'] and c['choices'][0]['finish_reason']] \
        == ['length']


def test_completion_of_one_token_is_fast(server):
    started = time.monotonic()
    body = {'model': ALIAS, 'prompt': ' hello world', 'max_tokens': 1}
    body.update(GREEDY)
    reply = _post(server, '/v1/completions', body).json()
    elapsed = time.monotonic() - started
    assert reply['object'] == 'text_completion'
    assert reply['choices'][0]['finish_reason'] == 'length'
    assert SPOKEN.fullmatch(reply['choices'][0]['text'])
    # Two prompt tokens: no BOS is added and " hello", " world" are one token each.
    assert reply['usage']['prompt_tokens'] == 2
    assert reply['usage']['completion_tokens'] == 1
    assert elapsed < 5
