# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-bench's human report: the plain-text table of a run and the figures a failure message ends with.

render_table: the settings, the totals, a latency table (count, mean, min,
p50, p95, p99, max per latency, schedule_lag_ms in rate mode), the errors by
kind, the thresholds missed and the baseline comparison, as lines. The
figures are _loadbench_stats.fmt's, as in the verdicts.
"""

from __future__ import annotations

from ._loadbench_stats import LATENCY_METRICS, STATS, fmt


def _align(rows, right_from=1):
    widths = [max(len(str(row[col])) for row in rows) for col in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [str(cell).rjust(widths[col]) if col >= right_from else str(cell).ljust(widths[col])
                 for col, cell in enumerate(row)]
        lines.append('  '.join(cells).rstrip())
    return lines


def render_table(results, threshold_failures=None, comparison=None):
    """Plain-text report lines: settings, totals, latency table, errors, thresholds, baseline."""
    settings = results.get('settings') or {}
    if settings.get('rate'):
        shape = 'rate %s req/s (%s), at most %s in flight' % (
            fmt(settings.get('rate')), settings.get('arrival'), settings.get('concurrency'))
    else:
        shape = 'concurrency %s' % settings.get('concurrency')
    lines = [
        'llm-bench: %s requests to %s, model %s' % (results['requests'], settings.get('url'), settings.get('model')),
        '  %s, %s, prompt ~%s tokens, max_tokens %s, %s process(es)' % (
            shape, 'streamed' if settings.get('stream') else 'not streamed', settings.get('prompt_tokens'),
            settings.get('max_tokens'), settings.get('processes', 1)),
        'completed %d, errors %d (%s %%), unfinished %d in %s s: %s req/s, %s output tok/s (%d tokens)' % (
            results['completed'], results['errors'], fmt(100.0 * results['error_rate']), results['unfinished'],
            fmt(results['duration_s']), fmt(results['requests_per_s']), fmt(results['output_tokens_per_s']),
            results['output_tokens']),
        'client CPU %s s (%s %% of one core)' % (fmt(results['client']['cpu_s']),
                                                 fmt(results['client']['cpu_percent'])),
        '',
    ]
    table = [('latency (ms)',) + STATS]
    for metric in LATENCY_METRICS + ('schedule_lag_ms',):
        if metric in results and results[metric]['count']:
            table.append((metric,) + tuple(fmt(results[metric][stat]) for stat in STATS))
    if len(table) > 1:
        lines.extend(_align(table))
    for kind, count in sorted(results['errors_by_kind'].items()):
        lines.append('error %s: %d' % (kind, count))
    if threshold_failures is not None:
        lines.append('')
        lines.append('thresholds: ' + ('all met' if not threshold_failures else 'MISSED'))
        lines.extend('  missed ' + failure for failure in threshold_failures)
    if comparison is not None:
        rows, _failures, notes = comparison
        lines.append('')
        if rows:
            table = [('baseline', 'before', 'now', 'change %', 'verdict')]
            table.extend((row['metric'], fmt(row['baseline']), fmt(row['current']),
                          '-' if row['change_pct'] is None else '%+.1f' % row['change_pct'], row['verdict'])
                         for row in rows)
            lines.extend(_align(table))
        else:
            lines.append('baseline: no metric in common')
        lines.extend('note: ' + note for note in notes)
    return lines


def failure_summary(results):
    """The figures a failure message ends with."""
    return '%d requests, %d errors, %s req/s, %s output tok/s' % (
        results['requests'], results['errors'], fmt(results['requests_per_s']), fmt(results['output_tokens_per_s']))
