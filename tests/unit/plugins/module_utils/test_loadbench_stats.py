# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_loadbench_stats.py: llm-bench's statistics, thresholds, baseline and verdicts.

In process, on made-up samples and results: no server.
"""

from __future__ import annotations

import pytest

from ansible_collections.homelab.llm_server.plugins.module_utils._loadbench_stats import (
    BenchError,
    check_thresholds,
    compare_baseline,
    evaluate,
    fmt,
    percentile,
    parse_thresholds,
    stats,
    summarize,
)


def test_percentiles_are_linear_interpolation():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 95) == pytest.approx(3.85)
    assert percentile([7.0], 99) == 7.0
    assert stats([]) == {'count': 0, 'mean': None, 'min': None, 'p50': None, 'p95': None, 'p99': None,
                         'max': None}
    assert stats(range(1, 101))['p99'] == pytest.approx(99.01)


def test_summarize_turns_samples_into_results():
    # (start, end, error kind, output tokens, content event times): a stream, an HTTP error, a whole answer.
    outcome = {'samples': [(0.0, 0.5, None, 3, [0.1, 0.2, 0.4]), (0.0, 0.2, 'http_500', 0, None),
                           (0.1, 0.4, None, 2, None)],
               'unfinished': 1, 'start': 0.0, 'end': 1.0, 'cpu_s': 0.25, 'lags': [0.01, 0.02]}
    results = summarize(outcome, {'processes': 1, 'rate': 2.0})
    assert {key: results[key] for key in ('requests', 'completed', 'errors', 'error_rate', 'errors_by_kind',
                                          'unfinished', 'duration_s', 'requests_per_s', 'output_tokens',
                                          'output_tokens_per_s', 'tool')} == {
        'requests': 4, 'completed': 2, 'errors': 1, 'error_rate': 0.3333, 'errors_by_kind': {'http_500': 1},
        'unfinished': 1, 'duration_s': 1.0, 'requests_per_s': 2.0, 'output_tokens': 5, 'output_tokens_per_s': 5.0,
        'tool': 'llm-bench 1.0'}
    # Only the stream has a first token, gaps between its events and a time per output token.
    assert results['ttft_ms'] == {'count': 1, 'mean': 100.0, 'min': 100.0, 'p50': 100.0, 'p95': 100.0,
                                  'p99': 100.0, 'max': 100.0}
    assert results['itl_ms']['count'] == 2 and results['itl_ms']['min'] == 100.0 and results['itl_ms']['max'] == 200.0
    assert results['tpot_ms']['count'] == 1 and results['tpot_ms']['p50'] == 200.0
    assert results['e2e_ms']['count'] == 2 and results['e2e_ms']['p50'] == 400.0 and results['e2e_ms']['p95'] == 490.0
    assert results['schedule_lag_ms']['p50'] == 15.0
    assert results['client']['cpu_percent'] == 25.0 and results['client']['processes'] == 1
    # Closed loop: no schedule, no schedule_lag_ms.
    assert 'schedule_lag_ms' not in summarize(outcome, {'processes': 1, 'rate': None})


# ---------------------------------------------------------------- thresholds and baseline

RESULTS = {'requests': 20, 'completed': 20, 'errors': 0, 'error_rate': 0.0, 'unfinished': 0,
           'requests_per_s': 4.0, 'output_tokens_per_s': 31.2,
           'ttft_ms': {'count': 20, 'p50': 400.0, 'p95': 812.4, 'p99': 900.0},
           'e2e_ms': {'count': 20, 'p50': 1500.0, 'p95': 1900.0, 'p99': 2100.0},
           'itl_ms': {'count': 0, 'p50': None, 'p95': None, 'p99': None}}


def test_threshold_syntax_and_failure_lines():
    assert parse_thresholds({'ttft_ms.p95': 500, 'output_tokens_per_s': '>=50', 'error_rate': 0}) == [
        ('ttft_ms.p95', '<=', 500.0), ('output_tokens_per_s', '>=', 50.0), ('error_rate', '<=', 0.0)]
    assert parse_thresholds(['e2e_ms.p99<=2000', 'requests_per_s=1', 'completed > 10']) == [
        ('e2e_ms.p99', '<=', 2000.0), ('requests_per_s', '>=', 1.0), ('completed', '>', 10.0)]
    failures = check_thresholds(RESULTS, {'ttft_ms.p95': 500, 'e2e_ms.p99': '<2100', 'error_rate': 0,
                                          'output_tokens_per_s': '>=50', 'requests_per_s': 1,
                                          'itl_ms.p50': 100})
    assert failures == ['ttft_ms.p95 812.4 ms > 500 ms', 'e2e_ms.p99 2100 ms >= 2100 ms',
                        'output_tokens_per_s 31.20 tok/s < 50 tok/s',
                        'itl_ms.p50 not measured (limit <= 100 ms): no streamed sample']
    for bad, message in (({'ttft_ms.p42': 1}, 'unknown threshold'), ({'latency': 1}, 'unknown threshold'),
                         ({'e2e_ms.p99': 'fast'}, 'must be a number'), ({'errors': True}, 'must be a number'),
                         (['e2e_ms.p99'], 'is not KEY=VALUE')):
        with pytest.raises(BenchError, match=message):
            parse_thresholds(bad)


def test_baseline_comparison():
    baseline = dict(RESULTS, settings={'stream': True, 'concurrency': 4})
    current = dict(RESULTS, requests_per_s=3.0, settings={'stream': True, 'concurrency': 8},
                   ttft_ms={'count': 20, 'p50': 404.0, 'p95': 1000.0, 'p99': 950.0},
                   e2e_ms={'count': 20, 'p50': 1000.0, 'p95': 1900.5, 'p99': 2100.0})
    rows, failures, notes = compare_baseline(current, baseline, 10)
    verdicts = dict((row['metric'], row['verdict']) for row in rows)
    assert verdicts == {'ttft_ms.p50': 'ok', 'ttft_ms.p95': 'regression', 'ttft_ms.p99': 'ok',
                        'e2e_ms.p50': 'better', 'e2e_ms.p95': 'ok', 'e2e_ms.p99': 'ok',
                        'requests_per_s': 'regression', 'output_tokens_per_s': 'ok'}
    assert failures == ['ttft_ms.p95 1000 ms vs baseline 812.4 ms (+23.1 %, tolerance 10 %)',
                        'requests_per_s 3 req/s vs baseline 4 req/s (-25.0 %, tolerance 10 %)']
    assert notes == ['concurrency differs from the baseline: 4 there, 8 now']
    # Under 1 ms is noise, whatever the percentage.
    tiny = dict(RESULTS, itl_ms={'count': 9, 'p50': 0.1, 'p95': 0.2, 'p99': 0.3})
    slower = dict(RESULTS, itl_ms={'count': 9, 'p50': 0.5, 'p95': 0.9, 'p99': 1.2})
    assert compare_baseline(slower, tiny, 10)[1] == []


def test_evaluate_adds_the_verdicts():
    baseline = dict(RESULTS, ttft_ms={'count': 20, 'p50': 400.0, 'p95': 600.0, 'p99': 900.0})
    results = evaluate(dict(RESULTS), {'ttft_ms.p95': 500, 'completed': 20}, baseline, 10)
    assert results['thresholds'] == {'ttft_ms.p95': '<=500', 'completed': '>=20'}
    assert results['threshold_failures'] == ['ttft_ms.p95 812.4 ms > 500 ms']
    assert results['baseline']['failures'] == ['ttft_ms.p95 812.4 ms vs baseline 600 ms (+35.4 %, tolerance 10 %)']
    assert results['baseline']['tolerance_pct'] == 10.0 and results['baseline']['rows']
    assert results['passed'] is False
    passed = evaluate(dict(RESULTS), {'completed': 20})
    assert passed['passed'] is True and passed['threshold_failures'] == [] and 'baseline' not in passed
    # Nothing completed fails the run even without thresholds, naming the errors.
    failed = evaluate(dict(RESULTS, completed=0, errors_by_kind={'connect': 3, 'timeout': 1}))
    assert failed['passed'] is False and failed['threshold_failures'] == ['no request completed (connect 3, timeout 1)']


def test_figures_for_people():
    assert [fmt(value) for value in (None, 4, 4.0, 812.44, 123.456, 31.2, -2.5, 0.0123)] == [
        '-', '4', '4', '812.4', '123.5', '31.20', '-2.50', '0.0123']
