# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""plugins/module_utils/_loadbench_report.py: llm-bench's plain-text report and failure summary, on made-up results.

The figures in it are _loadbench_stats.fmt's (tested with the statistics).
"""

from __future__ import annotations

from ansible_collections.homelab.llm_server.plugins.module_utils._loadbench_report import failure_summary, render_table

EMPTY = {'count': 0, 'mean': None, 'min': None, 'p50': None, 'p95': None, 'p99': None, 'max': None}
RESULTS = {'requests': 20, 'completed': 19, 'errors': 1, 'error_rate': 0.05, 'errors_by_kind': {'http_503': 1},
           'unfinished': 0, 'duration_s': 4.75, 'requests_per_s': 4.0, 'output_tokens': 148,
           'output_tokens_per_s': 31.2, 'client': {'cpu_s': 0.41, 'cpu_percent': 8.6},
           'ttft_ms': {'count': 19, 'mean': 420.5, 'min': 310.0, 'p50': 400.0, 'p95': 812.4, 'p99': 900.0, 'max': 905.25},
           'itl_ms': EMPTY, 'tpot_ms': EMPTY,
           'e2e_ms': {'count': 19, 'mean': 1500.0, 'min': 1200.0, 'p50': 1500.0, 'p95': 1900.0, 'p99': 2100.0,
                      'max': 2150.0},
           'settings': {'url': 'http://127.0.0.1:8000/v1', 'model': 'm1', 'concurrency': 4, 'rate': None,
                        'stream': True, 'prompt_tokens': 128, 'max_tokens': 64, 'processes': 1}}


def test_the_table_of_a_closed_loop_run():
    lines = render_table(RESULTS)
    assert lines[:5] == [
        'llm-bench: 20 requests to http://127.0.0.1:8000/v1, model m1',
        '  concurrency 4, streamed, prompt ~128 tokens, max_tokens 64, 1 process(es)',
        'completed 19, errors 1 (5 %), unfinished 0 in 4.75 s: 4 req/s, 31.20 output tok/s (148 tokens)',
        'client CPU 0.41 s (8.60 % of one core)',
        '']
    # Only the latencies measured get a row; the figures line up on the right.
    assert lines[5:] == [
        'latency (ms)  count   mean   min   p50    p95   p99    max',
        'ttft_ms          19  420.5   310   400  812.4   900  905.2',
        'e2e_ms           19   1500  1200  1500   1900  2100   2150',
        'error http_503: 1']


def test_the_table_of_a_rate_run_with_thresholds_and_a_baseline():
    results = dict(RESULTS, settings=dict(RESULTS['settings'], rate=2.5, arrival='poisson', stream=False),
                   schedule_lag_ms={'count': 20, 'mean': 1.5, 'min': 0.0, 'p50': 1.0, 'p95': 4.0, 'p99': 6.0,
                                    'max': 7.0})
    rows = [{'metric': 'ttft_ms.p95', 'baseline': 600.0, 'current': 812.4, 'change_pct': 35.4, 'verdict': 'regression'},
            {'metric': 'requests_per_s', 'baseline': 0.0, 'current': 4.0, 'change_pct': None, 'verdict': 'ok'}]
    lines = render_table(results, ['ttft_ms.p95 812.4 ms > 500 ms'], (rows, [], ['stream differs from the baseline']))
    assert lines[1] == '  rate 2.50 req/s (poisson), at most 4 in flight, not streamed, prompt ~128 tokens, max_tokens 64, ' \
        '1 process(es)'
    assert lines[5:10] == ['latency (ms)     count   mean   min   p50    p95   p99    max',
                           'ttft_ms             19  420.5   310   400  812.4   900  905.2',
                           'e2e_ms              19   1500  1200  1500   1900  2100   2150',
                           'schedule_lag_ms     20   1.50     0     1      4     6      7',
                           'error http_503: 1']
    at = lines.index('thresholds: MISSED')
    assert lines[at - 1] == '' and lines[at + 1] == '  missed ttft_ms.p95 812.4 ms > 500 ms'
    assert lines[at + 2:] == [
        '',
        'baseline        before    now  change %     verdict',
        'ttft_ms.p95        600  812.4     +35.4  regression',
        'requests_per_s       0      4         -          ok',
        'note: stream differs from the baseline']
    assert render_table(RESULTS, [])[-2:] == ['', 'thresholds: all met']
    assert render_table(RESULTS, None, ([], [], []))[-2:] == ['', 'baseline: no metric in common']


def test_the_figures_a_failure_message_ends_with():
    assert failure_summary(RESULTS) == '20 requests, 1 errors, 4 req/s, 31.20 output tok/s'
