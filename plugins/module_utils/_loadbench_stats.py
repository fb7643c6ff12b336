# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-bench's statistics and verdicts: results from raw samples, thresholds, baseline.

The results of a run (summarize) are a JSON object: requests, completed,
errors, error_rate, errors_by_kind, unfinished, duration_s, requests_per_s,
output_tokens, output_tokens_per_s, ttft_ms / itl_ms / tpot_ms / e2e_ms
(count, mean, min, p50, p95, p99, max), schedule_lag_ms (rate mode), settings,
and client (CPU seconds and per cent of one core used by the client itself:
near 100 % x processes, the client and not the server may be the limit).
Percentiles are linear interpolations between the closest ranks (numpy's
default "linear" method); latencies are in milliseconds.

Thresholds: KEY=VALUE, KEY<=VALUE or KEY>=VALUE (also < and >). KEY is
<latency>.<stat> (ttft_ms.p95, e2e_ms.p99, ...) or one of requests_per_s,
output_tokens_per_s, error_rate, errors, completed, unfinished. With `=` the
limit is a maximum for latencies, errors, error_rate and unfinished and a
minimum for the rates and completed. As a dict (the module):
{"ttft_ms.p95": 500, "output_tokens_per_s": ">=50"}.

Baseline: a previous JSON result. Each latency p50/p95/p99 and each rate is
compared; a latency more than --tolerance-pct higher (and at least 1 ms), or a
rate more than --tolerance-pct lower, is a regression.

The verdicts are phrased for people ("ttft_ms.p95 812.4 ms > 500 ms"), so the
figures and units (fmt, _unit) are here, and the report uses them too. This is
the lowest of llm-bench's modules (the client and the report import it, it
imports neither), so BenchError and VERSION, which all of them use, are here.
"""

from __future__ import annotations

import json
import math
import operator
import os
import platform
import re

# The tool's version: in the results (tool) and in the client's User-Agent.
VERSION = '1.0'

LATENCY_METRICS = ('ttft_ms', 'itl_ms', 'tpot_ms', 'e2e_ms')
STATS = ('count', 'mean', 'min', 'p50', 'p95', 'p99', 'max')
PERCENTILES = (('p50', 50.0), ('p95', 95.0), ('p99', 99.0))
# Top-level metrics a threshold may name: True when higher is better.
TOP_LEVEL_METRICS = {
    'requests_per_s': True,
    'output_tokens_per_s': True,
    'completed': True,
    'error_rate': False,
    'errors': False,
    'unfinished': False,
}
BASELINE_RATES = ('requests_per_s', 'output_tokens_per_s')
# A latency change smaller than this is noise, whatever its percentage.
BASELINE_MIN_DELTA_MS = 1.0
DEFAULT_TOLERANCE_PCT = 10.0


class BenchError(Exception):
    """A usage or setup error: the run cannot start (exit code 2)."""


# ---------------------------------------------------------------- figures for people

def _unit(key):
    if key.partition('.')[0].endswith('_ms'):
        return ' ms'
    if key == 'requests_per_s':
        return ' req/s'
    if key == 'output_tokens_per_s':
        return ' tok/s'
    return ''


def fmt(value):
    """A figure for people: 812.4, 31.2, 0.0123, 4."""
    if value is None:
        return '-'
    if isinstance(value, int) or float(value).is_integer():
        return '%d' % value
    if abs(value) >= 100:
        return '%.1f' % value
    if abs(value) >= 1:
        return '%.2f' % value
    return '%.3g' % value


# ---------------------------------------------------------------- statistics

def percentile(ordered, pct):
    """Linear interpolation between closest ranks of sorted values (numpy's default)."""
    if not ordered:
        return None
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(math.floor(rank))
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def stats(values):
    """count, mean, min, p50, p95, p99, max of values (None when there are none)."""
    ordered = sorted(values)
    if not ordered:
        return dict((name, 0 if name == 'count' else None) for name in STATS)
    out = {'count': len(ordered), 'mean': _round(sum(ordered) / len(ordered)), 'min': _round(ordered[0]),
           'max': _round(ordered[-1])}
    for name, pct in PERCENTILES:
        out[name] = _round(percentile(ordered, pct))
    return out


def _round(value):
    return None if value is None else round(value, 3)


def summarize(outcome, settings):
    """The results dict from raw samples (start, end, kind, tokens, token_times)."""
    samples = outcome['samples']
    ttft, itl, tpot, e2e = [], [], [], []
    errors = {}
    tokens = 0
    for start, end, kind, count, times in samples:
        if kind is not None:
            errors[kind] = errors.get(kind, 0) + 1
            continue
        tokens += count
        e2e.append((end - start) * 1000.0)
        if times:
            first = times[0]
            ttft.append((first - start) * 1000.0)
            previous = first
            for moment in times[1:]:
                itl.append((moment - previous) * 1000.0)
                previous = moment
            if count > 1:
                tpot.append((end - first) * 1000.0 / (count - 1))
    completed = len(e2e)
    error_count = sum(errors.values())
    duration = max(outcome['end'] - outcome['start'], 1e-9)
    results = {
        'requests': len(samples) + outcome['unfinished'],
        'completed': completed,
        'errors': error_count,
        'error_rate': round(error_count / len(samples), 4) if samples else 0.0,
        'errors_by_kind': dict(sorted(errors.items())),
        'unfinished': outcome['unfinished'],
        'duration_s': round(duration, 3),
        'requests_per_s': round(completed / duration, 2),
        'output_tokens': tokens,
        'output_tokens_per_s': round(tokens / duration, 2),
        'ttft_ms': stats(ttft),
        'itl_ms': stats(itl),
        'tpot_ms': stats(tpot),
        'e2e_ms': stats(e2e),
        'percentiles': 'linear interpolation between closest ranks',
        'client': {'cpu_s': round(outcome['cpu_s'], 3),
                   'cpu_percent': round(100.0 * outcome['cpu_s'] / duration, 1),
                   'processes': settings['processes'], 'cpus': os.cpu_count(),
                   'python': platform.python_version()},
        'tool': 'llm-bench ' + VERSION,
    }
    if settings['rate'] is not None:
        results['schedule_lag_ms'] = stats([lag * 1000.0 for lag in outcome['lags']])
    return results


# ---------------------------------------------------------------- thresholds and baseline

_THRESHOLD_RE = re.compile(r'^\s*([A-Za-z0-9_.]+?)\s*(<=|>=|<|>|=)\s*(.+?)\s*$')
_LIMIT_RE = re.compile(r'^\s*(<=|>=|<|>)?\s*([-+0-9.eE]+)\s*$')


def _higher_is_better(key):
    if key in TOP_LEVEL_METRICS:
        return TOP_LEVEL_METRICS[key]
    metric, _dot, stat = key.partition('.')
    if metric in LATENCY_METRICS and stat in STATS[1:]:
        return False
    raise BenchError('unknown threshold %r: use <metric>.<stat> with metric one of %s and stat one of %s, '
                     'or one of %s' % (key, ', '.join(LATENCY_METRICS), ', '.join(STATS[1:]),
                                       ', '.join(sorted(TOP_LEVEL_METRICS))))


def parse_thresholds(thresholds):
    """A dict {key: limit} or a list of "KEY=VALUE" strings -> list of (key, operator, limit)."""
    items = []
    if isinstance(thresholds, dict):
        items = list(thresholds.items())
    else:
        for text in thresholds or ():
            match = _THRESHOLD_RE.match(str(text))
            if not match:
                raise BenchError('threshold %r is not KEY=VALUE, KEY<=VALUE or KEY>=VALUE' % (text,))
            key, operator, value = match.groups()
            items.append((key, value if operator == '=' else operator + value))
    parsed = []
    for key, value in items:
        higher_better = _higher_is_better(key)
        operator = None
        if isinstance(value, bool):
            raise BenchError('threshold %s must be a number, got %r' % (key, value))
        if isinstance(value, (int, float)):
            limit = float(value)
        else:
            match = _LIMIT_RE.match(str(value))
            if not match:
                raise BenchError('threshold %s must be a number with an optional <=, >=, < or >, got %r'
                                 % (key, value))
            operator = match.group(1)
            try:
                limit = float(match.group(2))
            except ValueError as exc:
                raise BenchError('threshold %s must be a number, got %r' % (key, value)) from exc
        parsed.append((key, operator or ('>=' if higher_better else '<='), limit))
    return parsed


def metric_value(results, key):
    metric, _dot, stat = key.partition('.')
    if stat:
        return (results.get(metric) or {}).get(stat)
    return results.get(metric)


_VIOLATION = {'<=': '>', '<': '>=', '>=': '<', '>': '<='}
_HOLDS = {'<=': operator.le, '<': operator.lt, '>=': operator.ge, '>': operator.gt}


def check_thresholds(results, thresholds):
    """Human-readable failures, e.g. "ttft_ms.p95 812.4 ms > 500 ms"; empty when all hold."""
    failures = []
    for key, operator, limit in parse_thresholds(thresholds):
        value = metric_value(results, key)
        unit = _unit(key)
        if value is None:
            failures.append('%s not measured (limit %s %s%s): no %s sample' % (
                key, operator, fmt(limit), unit,
                'streamed' if key.startswith(('ttft', 'itl', 'tpot')) else 'completed'))
        elif not _HOLDS[operator](value, limit):
            failures.append('%s %s%s %s %s%s' % (key, fmt(value), unit, _VIOLATION[operator], fmt(limit), unit))
    return failures


def load_baseline(path):
    """A previous JSON result; BenchError when it cannot be read or is not an llm-bench result."""
    try:
        with open(path, encoding='utf-8') as handle:
            baseline = json.load(handle)
    except (OSError, ValueError) as exc:
        raise BenchError('cannot read the baseline %s: %s' % (path, exc)) from exc
    if not isinstance(baseline, dict) or 'e2e_ms' not in baseline or 'requests_per_s' not in baseline:
        raise BenchError('%s is not an llm-bench result (no e2e_ms / requests_per_s)' % path)
    return baseline


def compare_baseline(results, baseline, tolerance_pct=DEFAULT_TOLERANCE_PCT):
    """(rows, failures, notes): each row {metric, baseline, current, change_pct, verdict}."""
    tolerance = float(tolerance_pct)
    if tolerance < 0:
        raise BenchError('tolerance_pct must be 0 or more, got %s' % tolerance_pct)
    rows, failures = [], []
    keys = ['%s.%s' % (metric, stat) for metric in LATENCY_METRICS for stat, _pct in PERCENTILES]
    for key in keys + list(BASELINE_RATES):
        old, new = metric_value(baseline, key), metric_value(results, key)
        if old is None or new is None:
            continue
        higher_better = key in BASELINE_RATES
        change = (new - old) / old * 100.0 if old else (0.0 if new == old else math.inf)
        worse = -change if higher_better else change
        verdict = 'ok'
        if worse > tolerance and (higher_better or new - old >= BASELINE_MIN_DELTA_MS):
            verdict = 'regression'
            failures.append('%s %s%s vs baseline %s%s (%+.1f %%, tolerance %s %%)' % (
                key, fmt(new), _unit(key), fmt(old), _unit(key), change, fmt(tolerance)))
        elif worse < -tolerance:
            verdict = 'better'
        rows.append({'metric': key, 'baseline': old, 'current': new,
                     'change_pct': None if math.isinf(change) else round(change, 1), 'verdict': verdict})
    notes = []
    old_settings, new_settings = baseline.get('settings') or {}, results.get('settings') or {}
    for key in ('model', 'stream', 'concurrency', 'rate', 'prompt_tokens', 'max_tokens', 'processes'):
        if key in old_settings and old_settings.get(key) != new_settings.get(key):
            notes.append('%s differs from the baseline: %s there, %s now' % (
                key, old_settings.get(key), new_settings.get(key)))
    return rows, failures, notes


def evaluate(results, thresholds=None, baseline=None, tolerance_pct=DEFAULT_TOLERANCE_PCT):
    """Add threshold_failures, baseline (rows, failures, notes) and passed to results; returns it."""
    failures = check_thresholds(results, thresholds) if thresholds else []
    if not results['completed']:
        failures.append('no request completed (%s)' % (
            ', '.join('%s %d' % item for item in sorted(results['errors_by_kind'].items()))
            or '%d unfinished' % results['unfinished']))
    results['thresholds'] = dict((key, '%s%s' % (op, fmt(limit)))
                                 for key, op, limit in parse_thresholds(thresholds or {}))
    results['threshold_failures'] = failures
    baseline_failures = []
    if baseline is not None:
        rows, baseline_failures, notes = compare_baseline(results, baseline, tolerance_pct)
        results['baseline'] = {'rows': rows, 'failures': baseline_failures, 'notes': notes,
                               'tolerance_pct': float(tolerance_pct)}
    results['passed'] = not failures and not baseline_failures
    return results
