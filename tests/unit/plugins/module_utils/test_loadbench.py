# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_loadbench.py: llm-bench's command line, its launcher and the llm_benchmark module.

Against the real test server (tests/doubles/openai_server/openai_test_server.py), started as a
subprocess with known delays (the server fixture, conftest.py). These runs go through all of
llm-bench: _loadbench_client, _loadbench_stats and _loadbench_report behind the entry points.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils._loadbench import main
from ansible_collections.homelab.llm_server.plugins.module_utils._loadbench_client import API_KEY_ENV

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
LAUNCHER = os.path.join(REPO, 'scripts', 'llm-bench')
SECRET = 'sk-test-9f8e7d6c5b4a'


# ---------------------------------------------------------------- command line

def test_cli_exit_codes_thresholds_and_baseline(server, control, tmp_path, capsys):
    url = server('--tokens', '4', '--first-token-delay', '0.15')
    first = tmp_path / 'first.json'
    common = ['--url', url, '--requests', '4', '--concurrency', '2', '--max-tokens', '4']
    assert main(common + ['--threshold', 'ttft_ms.p95=1000', '--threshold', 'error_rate=0',
                          '--json', str(first)]) == 0
    out = capsys.readouterr().out
    assert 'thresholds: all met' in out and 'ttft_ms' in out
    saved = json.loads(first.read_text())
    assert saved['passed'] is True and saved['completed'] == 4 and saved['thresholds']['ttft_ms.p95'] == '<=1000'

    assert main(common + ['--threshold', 'ttft_ms.p95<=20', '--quiet']) == 1
    captured = capsys.readouterr()
    assert captured.out == ''
    assert 'FAILED: ttft_ms.p95' in captured.err and '> 20 ms (4 requests, 0 errors' in captured.err

    # Four times slower to the first token: a regression.
    control(url, first_token_delay=0.6)
    slow = tmp_path / 'slow.json'
    assert main(common + ['--baseline', str(first), '--json', str(slow)]) == 1
    captured = capsys.readouterr()
    assert 'regression' in captured.out and 'ttft_ms.p50' in captured.err and 'vs baseline' in captured.err
    assert json.loads(slow.read_text())['baseline']['failures']
    # Fast again, against the slow run: better, and so no failure. Not streamed, so that only e2e
    # and the rates are compared (a zero-delay ITL is scheduler noise on a loaded machine).
    control(url, first_token_delay=0.15)
    assert main(common + ['--baseline', str(slow), '--no-stream']) == 0
    out = capsys.readouterr().out
    assert 'better' in out and 'note: stream differs from the baseline' in out

    # Usage and setup errors: exit 2.
    assert main(common + ['--threshold', 'nonsense=1']) == 2
    assert main(common + ['--baseline', str(tmp_path / 'missing.json')]) == 2
    assert main(['--url', 'ftp://example.invalid']) == 2
    assert main(['--url', 'http://user:pw@127.0.0.1:9']) == 2
    assert 'must not carry credentials' in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(['--requests', '3'])
    assert exc.value.code == 2


def test_the_api_key_is_never_printed_or_written(server, tmp_path, capsys, monkeypatch):
    key_file = tmp_path / 'key'
    key_file.write_text(SECRET)
    url = server('--api-key-file', str(key_file))
    out = tmp_path / 'out.json'
    assert main(['--url', url, '--requests', '3', '--api-key-file', str(key_file), '--json', str(out)]) == 0
    monkeypatch.setenv(API_KEY_ENV, SECRET)
    assert main(['--url', url, '--requests', '3', '--json', '-']) == 0
    # A wrong key: the failure lines do not echo it either.
    monkeypatch.setenv(API_KEY_ENV, 'sk-wrong-1234567')
    assert main(['--url', url, '--model', 'test-model', '--requests', '2']) == 1
    captured = capsys.readouterr()
    text = captured.out + captured.err + out.read_text()
    assert SECRET not in text and 'sk-wrong-1234567' not in text
    assert json.loads(out.read_text())['settings']['api_key'] is True
    assert 'http_401 2' in captured.err


# ---------------------------------------------------------------- launcher and processes

def test_launcher_with_two_processes_merges_their_samples(server, tmp_path):
    url = server('--tokens', '3', '--first-token-delay', '0.02')
    out = tmp_path / 'out.json'
    proc = subprocess.run([LAUNCHER, '--url', url, '--requests', '15', '--concurrency', '4',
                           '--processes', '2', '--json', str(out)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ, PYTHON=sys.executable))
    assert proc.returncode == 0, proc.stderr
    assert '2 process(es)' in proc.stdout
    results = json.loads(out.read_text())
    assert results['completed'] == 15 and results['output_tokens'] == 45
    assert results['ttft_ms']['count'] == 15 and results['client']['processes'] == 2
    # Prompts differ across processes too (distinct request tags), and the run took about 4 rounds.
    assert 0.06 <= results['duration_s'] < 2
    assert os.access(LAUNCHER, os.X_OK)


# ---------------------------------------------------------------- the module

def test_module_passes_writes_its_output_and_changes_nothing(module_runner, server, tmp_path):
    url = server('--tokens', '4')
    output = tmp_path / 'bench.json'
    rc, result = module_runner('llm_benchmark', {'url': url, 'requests': 5, 'concurrency': 2,
                                                 'thresholds': {'e2e_ms.p99': 5000, 'completed': 5},
                                                 'output': str(output)})
    assert rc == 0, result
    assert result['changed'] is False and result['passed'] is True and result['threshold_failures'] == []
    assert result['results']['completed'] == 5 and result['results']['output_tokens'] == 20
    assert any(line.startswith('e2e_ms') for line in result['table'])
    assert json.loads(output.read_text())['completed'] == 5
    assert oct(output.stat().st_mode & 0o777) == '0o644'


def test_module_fails_with_the_figures_when_thresholds_are_missed(module_runner, server, tmp_path):
    url = server('--tokens', '4', '--first-token-delay', '0.05')
    args = {'url': url, 'requests': 4, 'thresholds': {'ttft_ms.p95': 10, 'output_tokens_per_s': '>=1'}}
    rc, result = module_runner('llm_benchmark', args)
    assert rc == 1 and result['failed'] is True
    assert result['msg'].startswith('Benchmark missed its thresholds: ttft_ms.p95 ')
    assert '> 10 ms (4 requests, 0 errors, ' in result['msg'] and 'output tok/s)' in result['msg']
    assert result['passed'] is False and result['results']['completed'] == 4
    rc, result = module_runner('llm_benchmark', dict(args, fail_on_threshold=False))
    assert rc == 0 and result['passed'] is False and len(result['threshold_failures']) == 1


def test_module_in_check_mode_measures_but_writes_nothing(module_runner, server, tmp_path):
    url = server()
    output = tmp_path / 'bench.json'
    rc, result = module_runner('llm_benchmark', {'url': url, 'requests': 2, 'output': str(output)},
                               check_mode=True)
    assert rc == 0, result
    assert result['results']['completed'] == 2 and not output.exists()


def test_module_baseline_regression_and_api_key(module_runner, server, control, tmp_path):
    key_file = tmp_path / 'key'
    key_file.write_text(SECRET)
    url = server('--api-key-file', str(key_file), '--tokens', '3', '--first-token-delay', '0.03')
    baseline = tmp_path / 'baseline.json'
    rc, result = module_runner('llm_benchmark', {'url': url, 'requests': 4, 'api_key': SECRET,
                                                 'output': str(baseline)})
    assert rc == 0, result
    assert SECRET not in json.dumps(result) and SECRET not in baseline.read_text()
    control(url, first_token_delay=0.12)
    rc, result = module_runner('llm_benchmark', {'url': url, 'requests': 4, 'api_key_file': str(key_file),
                                                 'baseline': str(baseline)})
    assert rc == 1
    assert 'Benchmark regressed against the baseline: ' in result['msg'] and 'ttft_ms.p50' in result['msg']
    assert result['baseline_failures'] and result['results']['baseline']['rows']


def test_module_bad_input(module_runner, server, tmp_path):
    url = server()
    rc, result = module_runner('llm_benchmark', {'url': url, 'thresholds': {'ttft_ms.p42': 1}})
    assert rc == 1 and 'unknown threshold' in result['msg']
    rc, result = module_runner('llm_benchmark', {'url': url, 'api_key_file': str(tmp_path / 'nokey')})
    assert rc == 1 and 'cannot read the API key file' in result['msg']
    rc, result = module_runner('llm_benchmark', {'url': url, 'api_key': 'sk-some-key-0123', 'api_key_file': '/x'})
    assert rc == 1 and 'mutually exclusive' in result['msg']
