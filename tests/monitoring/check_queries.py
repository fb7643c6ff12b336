# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Evaluate every PromQL expression of console pages and Grafana dashboards against a Prometheus.

    python3 tests/monitoring/check_queries.py --prometheus http://127.0.0.1:9090 \\
        roles/monitoring/files/consoles/llm-overview.html \\
        roles/monitoring/files/grafana/llm-server.json

Each expression is evaluated once (an instant query, /api/v1/query) and a
table of expression -> number of series is printed. Exit 1 when any
expression fails to evaluate or returns nothing (a misspelt metric or label
matches nothing without an error), or when a file holds a query this script
cannot read as a literal; each is listed with where it comes from.

Where the expressions come from:
- Console templates (*.html): the literal argument of every `query "..."`
  (or `query `...``) of the Go template, of every `prom_query_drilldown`
  (args "..."), and the `expr:` of every `new PromConsole.Graph({...})` in
  the page's scripts (a string or a list of strings). A query built at
  render time (`printf ... | query`, an expr holding {{ }}) cannot be
  checked and is reported as an error.
- Grafana dashboards (*.json): `targets[].expr` of every panel, panels of
  rows and collapsed rows included (and the old `rows[].panels`). Grafana's
  variables are replaced first: $__rate_interval, $__interval and
  $__range by --interval / --range (default 1m / 1h); a dashboard variable
  ($name, ${name}, ${name:format}, [[name]]) by its "All" value (allValue,
  else .*) when it offers All, else by its current value; a data source
  variable is never part of an expression. Anything else that looks like a
  variable (label_replace's ${1}) is left alone.

Some expressions are empty for a good reason. Each one let through is
printed with the reason, and nothing else is skipped or allowed unless
asked:
- An expression that reads only ALERTS (or ALERTS_FOR_STATE) may be empty:
  Prometheus has no such series while no alert is pending or firing, which
  is the healthy state. --require-alerts fails those too.
- --skip-engine vllm (or llamacpp; repeatable): skip expressions that
  reference only that engine's series (vllm: or llamacpp:), for a server
  where no such engine is scraped. Expressions that read both engines with
  `or` are still evaluated.
- --allow-empty REGEX (repeatable): an expression matching REGEX may return
  nothing (e.g. '^ALERTS' while no alert fires).

Standard library only (python3 of Debian 12 on the controller or the host).
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request

ENGINE_PREFIXES = {'vllm': 'vllm:', 'llamacpp': 'llamacpp:'}
# Series Prometheus writes only while an alert is pending or firing.
ALERT_SERIES = frozenset(('ALERTS', 'ALERTS_FOR_STATE'))

# ----------------------------------------------------------------------------- PromQL names

_AGGREGATIONS = frozenset((
    'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values', 'bottomk', 'topk',
    'quantile', 'limitk', 'limit_ratio'))
_KEYWORDS = frozenset((
    'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset',
    'atan2', 'inf', 'nan', 'start', 'end'))
_GROUPING = re.compile(r'\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_TOKEN = re.compile(
    r'(?P<duration>\d+(?:ms|[smhdwy])(?:\d+(?:ms|[smhdwy]))*)'
    r'|(?P<number>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)'
    r'|(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)'
    r'|(?P<other>.)', re.S)


def metric_names(expr):
    """The metric names an expression reads, sorted (a lexical scan, not a full PromQL parser).

    Strings, comments, label matchers {...}, ranges [...] and grouping label
    lists (by (...), on (...), ...) are dropped; of the words left, those
    followed by "(" are functions, aggregations take their grouping before
    the "(", and keywords are not names.
    """
    text = re.sub(r'#[^\n]*', ' ', _STRING.sub('""', expr))
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r'\{[^{}]*\}', ' ', text)
        text = re.sub(r'\[[^\[\]]*\]', ' ', text)
    # Once: what follows "sum by (...)" is itself in parentheses.
    text = _GROUPING.sub(' ', text)
    tokens = [(m.lastgroup, m.group()) for m in _TOKEN.finditer(text) if not m.group().isspace()]
    names = set()
    for position, (kind, value) in enumerate(tokens):
        if kind != 'name' or value in _KEYWORDS or value in _AGGREGATIONS:
            continue
        following = tokens[position + 1][1] if position + 1 < len(tokens) else ''
        if following == '(':
            continue  # a function
        names.add(value)
    return sorted(names)


def reads_engine(expr, engine):
    """True when expr reads at least one series of the engine (its prefix)."""
    return any(name.startswith(ENGINE_PREFIXES[engine]) for name in metric_names(expr))


def engine_only(expr, engines):
    """True when every metric name of expr belongs to one of the engines (their prefixes)."""
    prefixes = tuple(ENGINE_PREFIXES[engine] for engine in engines)
    names = metric_names(expr)
    return bool(names) and bool(prefixes) and all(name.startswith(prefixes) for name in names)


# ----------------------------------------------------------------------------- console templates

class Query(object):
    """An expression and where it was found; dynamic: why it cannot be checked (or None)."""

    __slots__ = ('expr', 'source', 'dynamic')

    def __init__(self, expr, source, dynamic=None):
        self.expr = expr
        self.source = source
        self.dynamic = dynamic


def _go_string(literal):
    """The value of a Go string literal ("..." with escapes, or `raw`)."""
    if literal.startswith('`'):
        return literal[1:-1]
    try:
        return json.loads(literal)
    except ValueError:  # Go escapes JSON lacks (\x41, \a, octal)
        return codecs.decode(literal[1:-1], 'unicode_escape')


def _line_of(text, offset):
    return text.count('\n', 0, offset) + 1


_ACTION = re.compile(r'\{\{(.*?)\}\}', re.S)
_GO_LITERAL = r'("(?:[^"\\]|\\.)*"|`[^`]*`)'
_QUERY_CALL = re.compile(r'(?<![\w.])query\s+' + _GO_LITERAL)
_QUERY_PIPE = re.compile(_GO_LITERAL + r'\s*\|\s*query\b')
_QUERY_ANY = re.compile(r'(?<![\w.])query\b')
_DRILLDOWN = re.compile(r'template\s+"prom_query_drilldown"\s+\(\s*args\s+' + _GO_LITERAL)
_DRILLDOWN_ANY = re.compile(r'template\s+"prom_query_drilldown"')


def _template_queries(text, label):
    found = []
    for action in _ACTION.finditer(text):
        body = action.group(1)
        if body.lstrip('- ').startswith('/*'):
            continue  # a comment
        where = '%s:%d' % (label, _line_of(text, action.start()))
        literal_spans = []
        for pattern in (_QUERY_CALL, _QUERY_PIPE, _DRILLDOWN):
            for match in pattern.finditer(body):
                found.append(Query(_go_string(match.group(1)), where))
                literal_spans.append(match.span())
        uses = [m.start() for m in _QUERY_ANY.finditer(body)] + [m.start() for m in _DRILLDOWN_ANY.finditer(body)]
        for start in uses:
            if not any(span[0] <= start < span[1] for span in literal_spans):
                found.append(Query(body.strip(), where, 'a query built at render time: %s' % body.strip()))
    return found


_JS_TOKEN = re.compile(
    r'(?P<comment>//[^\n]*|/\*.*?\*/)'
    r'|(?P<string>"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|`(?:[^`\\]|\\.)*`)'
    r'|(?P<name>[A-Za-z_$][\w$]*)'
    r'|(?P<space>\s+)'
    r'|(?P<punct>.)', re.S)
_JS_ESCAPES = {'n': '\n', 't': '\t', 'r': '\r', 'b': '\b', 'f': '\f', 'v': '\v', '0': '\0'}


def _js_string(literal):
    """The value of a JavaScript string literal."""
    body, out, index = literal[1:-1], [], 0
    while index < len(body):
        char = body[index]
        if char != '\\':
            out.append(char)
            index += 1
            continue
        escaped = body[index + 1:index + 2]
        if escaped == 'u' and body[index + 2:index + 3] == '{':
            end = body.index('}', index)
            out.append(chr(int(body[index + 3:end], 16)))
            index = end + 1
        elif escaped == 'u':
            out.append(chr(int(body[index + 2:index + 6], 16)))
            index += 6
        elif escaped == 'x':
            out.append(chr(int(body[index + 2:index + 4], 16)))
            index += 4
        elif escaped == '\n':
            index += 2
        else:
            out.append(_JS_ESCAPES.get(escaped, escaped))
            index += 2
    return ''.join(out)


def _graph_queries(text, label):
    """expr of every `new PromConsole.Graph({...})` in the scripts of a page."""
    found = []
    for script in re.finditer(r'<script\b[^>]*>(.*?)</script>', text, re.S | re.I):
        offset = script.start(1)
        tokens = [(m.lastgroup, m.group(), offset + m.start()) for m in _JS_TOKEN.finditer(script.group(1))
                  if m.lastgroup not in ('space', 'comment')]
        index = 0
        while index < len(tokens):
            values = [value for _kind, value, _pos in tokens[index:index + 5]]
            if values == ['new', 'PromConsole', '.', 'Graph', '(']:
                index = _read_graph_call(tokens, index + 5, text, label, found)
            else:
                index += 1
    return found


def _read_graph_call(tokens, index, text, label, found):
    """Read the argument of PromConsole.Graph( from tokens[index]; return the index after it."""
    depth = 1
    where = '%s:%d' % (label, _line_of(text, tokens[index - 1][2]))
    seen_expr = False
    while index < len(tokens) and depth > 0:
        kind, value, position = tokens[index]
        if value in '([{' and kind == 'punct':
            depth += 1
        elif value in ')]}' and kind == 'punct':
            depth -= 1
        elif depth == 2 and kind in ('name', 'string') and index + 1 < len(tokens) and tokens[index + 1][1] == ':':
            key = _js_string(value) if kind == 'string' else value
            if key == 'expr':
                seen_expr = True
                where = '%s:%d' % (label, _line_of(text, position))
                index = _read_expr_value(tokens, index + 2, where, found)
                continue
        index += 1
    if not seen_expr:
        found.append(Query('', where, 'a PromConsole.Graph without an expr: key'))
    return index


def _read_expr_value(tokens, index, where, found):
    """expr: "..." or expr: ["...", ...]; anything else is reported as dynamic."""
    kind, value, _pos = tokens[index]
    items = []
    if kind == 'string':
        items.append(tokens[index])
        index += 1
    elif value == '[':
        index += 1
        while index < len(tokens) and tokens[index][1] != ']':
            if tokens[index][0] == 'string':
                items.append(tokens[index])
            elif tokens[index][1] != ',':
                found.append(Query(tokens[index][1], where, 'an expr list item that is not a string literal'))
            index += 1
        index += 1
    else:
        found.append(Query(value, where, 'an expr that is not a string literal or a list of them'))
        return index + 1
    if index < len(tokens) and tokens[index][1] not in (',', '}'):
        found.append(Query(tokens[index][1], where, 'an expr built from more than a literal'))
    for _kind, literal, _pos in items:
        if literal.startswith('`') and '${' in literal:
            found.append(Query(_js_string(literal), where, 'a template literal with ${...}'))
            continue
        expr = _js_string(literal)
        if '{{' in expr:
            found.append(Query(expr, where, 'an expr filled in at render time ({{ }})'))
        else:
            found.append(Query(expr, where))
    return index


def console_queries(path):
    """[Query] of a console template, in the order of the page."""
    with open(path, encoding='utf-8') as handle:
        text = handle.read()
    label = os.path.basename(path)
    queries = _template_queries(text, label) + _graph_queries(text, label)
    return sorted(queries, key=lambda q: int(q.source.rsplit(':', 1)[1]))


# ----------------------------------------------------------------------------- Grafana

def iter_panels(dashboard):
    """Every panel of a dashboard: top level, inside rows (collapsed or not), old-style rows."""
    def walk(panels):
        for panel in panels or ():
            yield panel
            yield from walk(panel.get('panels'))
    yield from walk(dashboard.get('panels'))
    for row in dashboard.get('rows') or ():
        yield from walk(row.get('panels'))


def grafana_variables(dashboard, interval='1m', time_range='1h'):
    """{variable name: replacement} for the expressions of a dashboard."""
    seconds = _duration_seconds(time_range)
    values = {
        '__rate_interval': interval, '__interval': interval, '__range': time_range,
        '__interval_ms': str(_duration_seconds(interval) * 1000), '__range_s': str(seconds),
        '__range_ms': str(seconds * 1000),
    }
    for variable in (dashboard.get('templating') or {}).get('list') or ():
        name = variable.get('name')
        if not name or variable.get('type') == 'datasource':
            continue
        current = (variable.get('current') or {}).get('value')
        if isinstance(current, list):
            current = current[0] if len(current) == 1 else '|'.join(current)
        if variable.get('includeAll') and (current in (None, '', '$__all') or variable.get('multi')):
            values[name] = variable.get('allValue') or '.*'
        elif current not in (None, '', '$__all'):
            values[name] = str(current)
        elif variable.get('type') in ('constant', 'textbox', 'custom') and variable.get('query'):
            values[name] = str(variable['query']).split(',', maxsplit=1)[0].strip()
        else:
            values[name] = '.*'
    return values


def _duration_seconds(text):
    units = {'ms': 0.001, 's': 1, 'm': 60, 'h': 3600, 'd': 86400, 'w': 604800, 'y': 31536000}
    total = 0.0
    for number, unit in re.findall(r'(\d+)(ms|[smhdwy])', text):
        total += int(number) * units[unit]
    return int(total)


_GRAFANA_VARIABLE = re.compile(r'\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]')


def substitute(expr, values):
    """expr with Grafana's variables replaced; unknown ones (label_replace's ${1}) left as they are."""
    def replace(match):
        name = match.group(1) or match.group(2) or match.group(3)
        return values.get(name, match.group(0))
    return _GRAFANA_VARIABLE.sub(replace, expr)


def grafana_queries(path, interval='1m', time_range='1h'):
    """[Query] of a Grafana dashboard (its JSON model, or an export with the dashboard inside)."""
    with open(path, encoding='utf-8') as handle:
        document = json.load(handle)
    dashboard = document.get('dashboard', document)
    values = grafana_variables(dashboard, interval, time_range)
    label = os.path.basename(path)
    found = []
    for panel in iter_panels(dashboard):
        for target in panel.get('targets') or ():
            expr = target.get('expr')
            if not expr:
                continue
            where = '%s panel %s "%s" %s' % (label, panel.get('id'), panel.get('title', ''), target.get('refId', ''))
            found.append(Query(substitute(expr, values), where.rstrip()))
    return found


def file_queries(path, interval='1m', time_range='1h'):
    if path.endswith('.json'):
        return grafana_queries(path, interval, time_range)
    return console_queries(path)


# ----------------------------------------------------------------------------- Prometheus

def evaluate(prometheus, expr, timeout):
    """(number of series, None) or (None, error text) of an instant query."""
    url = prometheus.rstrip('/') + '/api/v1/query'
    body = urllib.parse.urlencode({'query': expr}).encode()
    request = urllib.request.Request(url, data=body, headers={'Content-Type': 'application/x-www-form-urlencoded'})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as err:
        try:
            answer = json.load(err)
        except ValueError:
            return None, 'HTTP %d' % err.code
    except (urllib.error.URLError, OSError, ValueError) as err:
        return None, 'no answer: %s' % err
    if answer.get('status') != 'success':
        return None, '%s: %s' % (answer.get('errorType', 'error'), answer.get('error', answer))
    data = answer.get('data') or {}
    if data.get('resultType') in ('scalar', 'string'):
        return 1, None
    return len(data.get('result') or ()), None


def one_line(expr):
    return ' '.join(expr.split())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument('files', nargs='+', help='console templates (*.html) and Grafana dashboards (*.json)')
    parser.add_argument('--prometheus', required=True, help='base URL, e.g. http://127.0.0.1:9090')
    parser.add_argument('--skip-engine', action='append', default=[], choices=sorted(ENGINE_PREFIXES),
                        help="skip expressions that read only this engine's series (repeatable)")
    parser.add_argument('--only-engine', choices=sorted(ENGINE_PREFIXES),
                        help="evaluate only the expressions that read this engine's series (where it alone runs)")
    parser.add_argument('--allow-empty', action='append', default=[], metavar='REGEX',
                        help='expressions matching REGEX may return nothing (repeatable)')
    parser.add_argument('--require-alerts', action='store_true',
                        help='fail an empty expression of ALERTS too (by default allowed: no alert fires)')
    parser.add_argument('--interval', default='1m', help='value of $__rate_interval and $__interval (default 1m)')
    parser.add_argument('--range', dest='time_range', default='1h', help='value of $__range (default 1h)')
    parser.add_argument('--timeout', type=float, default=30, help='seconds per query')
    parser.add_argument('--width', type=int, default=120, help='cut expressions in the table at this width (0: never)')
    parser.add_argument('--list', action='store_true', help='only list the expressions (no Prometheus needed)')
    args = parser.parse_args(argv if argv is not None else sys.argv[1:])
    allow = [re.compile(pattern) for pattern in args.allow_empty]

    by_expr = {}
    problems = []
    for path in args.files:
        try:
            queries = file_queries(path, args.interval, args.time_range)
        except (OSError, ValueError) as err:
            problems.append('%s: cannot read: %s' % (path, err))
            continue
        if not queries:
            problems.append('%s: no expression found' % path)
        for query in queries:
            if query.dynamic:
                problems.append('%s: cannot check %s' % (query.source, query.dynamic))
            else:
                by_expr.setdefault(one_line(query.expr), []).append(query.source)

    if args.list:
        for expr, sources in by_expr.items():
            print('%s\t%s' % (expr, ', '.join(sources)))
        for problem in problems:
            print('ERROR ' + problem, file=sys.stderr)
        return 1 if problems else 0

    rows = []
    skipped = []
    not_here = 0
    for expr, sources in by_expr.items():
        if args.only_engine and not reads_engine(expr, args.only_engine):
            not_here += 1
            continue
        if args.skip_engine and engine_only(expr, args.skip_engine):
            skipped.append((expr, sources))
            continue
        count, error = evaluate(args.prometheus, expr, args.timeout)
        allowed = None
        if count == 0:
            matched = [pattern.pattern for pattern in allow if pattern.search(expr)]
            names = metric_names(expr)
            if matched:
                allowed = '--allow-empty %s' % ' --allow-empty '.join(matched)
            elif names and set(names) <= ALERT_SERIES and not args.require_alerts:
                allowed = 'no alert is firing (ALERTS has no series then)'
        rows.append((expr, sources, count, error, allowed))

    def cut(text):
        return text if not args.width or len(text) <= args.width else text[:args.width - 1] + '…'

    print('%7s  %s' % ('series', 'expression'))
    for expr, sources, count, error, allowed in rows:
        mark = 'ERROR' if error else ('empty*' if allowed else ('EMPTY' if count == 0 else str(count)))
        print('%7s  %s' % (mark, cut(expr)))
    if skipped:
        print('\nskipped (--skip-engine %s): each reads only %s series, and no such engine is scraped:' % (
            ' --skip-engine '.join(args.skip_engine), ' or '.join(ENGINE_PREFIXES[e] for e in args.skip_engine)))
        for expr, sources in skipped:
            print('  - %s\n      reads %s; in %s' % (expr, ', '.join(metric_names(expr)), '; '.join(sources)))
    if not_here:
        print('\nnot evaluated (--only-engine %s): %d expressions that read no %s series' % (
            args.only_engine, not_here, ENGINE_PREFIXES[args.only_engine]))
    if args.only_engine and not rows:
        problems.append('no expression reads %s series' % ENGINE_PREFIXES[args.only_engine])
    allowed_rows = [row for row in rows if row[4]]
    if allowed_rows:
        print('\nempty, and allowed:')
        for expr, sources, _count, _error, why in allowed_rows:
            print('  - %s\n      %s; in %s' % (expr, why, '; '.join(sources)))

    for expr, sources, count, error, allowed in rows:
        if error:
            problems.append('%s: %s\n      %s' % ('; '.join(sources), error, expr))
        elif count == 0 and not allowed:
            problems.append('%s: empty result (no series match)\n      %s' % ('; '.join(sources), expr))
    print('\n%d expression(s) evaluated, %d skipped, %d allowed empty, %d problem(s)' % (
        len(rows), len(skipped), len(allowed_rows), len(problems)))
    if problems:
        print('\nFAILED:', file=sys.stderr)
        for problem in problems:
            print('  - ' + problem, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
