# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The console pages and the Grafana dashboard, checked without a Prometheus.

- Grafana (roles/monitoring/files/grafana/*.json): the JSON loads; a fixed
  uid; its data source is the variable DS_PROMETHEUS of type datasource, and
  every panel and every query use it (so the dashboard imports into any
  Grafana); panel ids are unique (rows and collapsed rows included);
  dashboard variables are only matched with =~ (the checker replaces them
  by their All value, a regular expression). The provisioning examples
  parse and point where the documentation says.
- Console pages (roles/monitoring/files/consoles/*.html): every expression
  is a literal that tests/monitoring/check_queries.py can list (no query
  built at render time, which no tool could check).
- Every expression of both parses: written as recording rules into a
  temporary rule file that `promtool check rules` (Debian's 2.42, `make
  promtool`) must accept; skipped where promtool is missing.
- Every metric name an expression reads exists: the names the collection's
  own exporters write (llm-gpu-exporter's families, the health check's
  textfile), the names the alert rules read, and the external names listed
  in EXTERNAL_METRICS below with where each comes from.
- check_queries.py and screenshot.py themselves: name scanning, Grafana
  variables, --skip-engine and --allow-empty against a stub Prometheus on
  the loopback, and the graph check on rendered DOMs.
"""

from __future__ import annotations

import glob
import http.server
import importlib.util
import json
import os
import re
import subprocess
import threading
import urllib.parse

import pytest
import yaml

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
MONITORING_TESTS = os.path.join(REPO_ROOT, 'tests', 'monitoring')
CONSOLES = sorted(glob.glob(os.path.join(REPO_ROOT, 'roles', 'monitoring', 'files', 'consoles', '*.html')))
DASHBOARDS = sorted(glob.glob(os.path.join(REPO_ROOT, 'roles', 'monitoring', 'files', 'grafana', '*.json')))
PROVISIONING = os.path.join(REPO_ROOT, 'roles', 'monitoring', 'files', 'grafana', 'provisioning')
RULE_FILES = sorted(glob.glob(os.path.join(REPO_ROOT, 'roles', '*', 'files', 'prometheus', '*.rules.yml')))
# The host programs that write the series (host/llm_server_host).
GPU_FAMILIES = 'llm_server_host.gpu_families'
LLM_HEALTH = 'llm_server_host.health'
PROMTOOL = os.environ.get('LLM_SERVER_PROMTOOL') or os.path.join(REPO_ROOT, 'build', 'promtool', 'promtool')
needs_promtool = pytest.mark.skipif(not os.access(PROMTOOL, os.X_OK),
                                    reason='no promtool at %s: run `make promtool`' % PROMTOOL)

DS = {'type': 'prometheus', 'uid': '${DS_PROMETHEUS}'}
DASHBOARD_UID = 'llm-server-overview'

# Metric names from outside the collection, by where they come from. The
# collection's own (llm_gpu_*, llm_engine_probe_*) are read from its code,
# and every name its alert rules use is known too (see known_metrics).
EXTERNAL_METRICS = frozenset((
    # Prometheus itself: the up series of each scrape, and the alerts of the rules.
    'up', 'ALERTS', 'ALERTS_FOR_STATE',
    # vLLM 0.32's /metrics (vllm-project/vllm docs/design/metrics.md).
    'vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc',
    'vllm:prompt_tokens_total', 'vllm:generation_tokens_total', 'vllm:request_success_total',
    'vllm:num_preemptions_total', 'vllm:prefix_cache_queries_total', 'vllm:prefix_cache_hits_total',
    # llama-server --metrics (ggml-org/llama.cpp tools/server/README.md).
    'llamacpp:prompt_tokens_total', 'llamacpp:tokens_predicted_total', 'llamacpp:requests_processing',
    'llamacpp:requests_deferred', 'llamacpp:n_decode_total', 'llamacpp:n_busy_slots_per_decode',
    # The front door's exporter (nginx role, job llm_proxy): its counters.
    'llm_proxy_requests_total', 'llm_proxy_response_bytes_total',
    # Debian's prometheus-blackbox-exporter, http prober (job blackbox).
    'probe_success', 'probe_duration_seconds', 'probe_http_status_code', 'probe_ssl_earliest_cert_expiry',
))
# Histograms (read as NAME_bucket, NAME_sum, NAME_count), from the same sources.
EXTERNAL_HISTOGRAMS = frozenset((
    # vLLM 0.32
    'vllm:time_to_first_token_seconds', 'vllm:inter_token_latency_seconds', 'vllm:e2e_request_latency_seconds',
    'vllm:request_queue_time_seconds', 'vllm:request_prefill_time_seconds', 'vllm:request_decode_time_seconds',
    # the front door's exporter
    'llm_proxy_request_duration_seconds', 'llm_proxy_upstream_header_seconds',
))
# Series that no longer exist (vLLM #29330; llama-server's README), as in test_alert_rules.py.
RETIRED = ('vllm:gpu_cache_usage_perc', 'time_per_output_token_seconds', 'llamacpp:kv_cache_usage_ratio')


def load_script(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(MONITORING_TESTS, name + '.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_queries = load_script('check_queries')
screenshot = load_script('screenshot')


def relative(path):
    return os.path.relpath(path, REPO_ROOT)


def load_json(path):
    with open(path, encoding='utf-8') as handle:
        return json.load(handle)


def all_queries():
    """[Query] of every console page and dashboard (Grafana variables replaced)."""
    found = []
    for path in CONSOLES + DASHBOARDS:
        found.extend(check_queries.file_queries(path))
    return found


def unique_expressions():
    """{expression on one line: [where]} of every page and dashboard."""
    expressions = {}
    for query in all_queries():
        expressions.setdefault(check_queries.one_line(query.expr), []).append(query.source)
    return expressions


# ------------------------------------------------------------------ the files


def test_files_are_found():
    assert [os.path.basename(p) for p in CONSOLES] == ['llm-overview.html']
    assert [os.path.basename(p) for p in DASHBOARDS] == ['llm-server.json']


@pytest.mark.parametrize('path', DASHBOARDS, ids=relative)
def test_dashboard_loads_with_a_fixed_uid(path):
    dashboard = load_json(path)
    assert dashboard['uid'] == DASHBOARD_UID
    assert dashboard['title']
    assert 39 <= dashboard['schemaVersion'] < 42
    assert 'id' not in dashboard or dashboard['id'] is None, 'an id ties the JSON to one Grafana database'
    assert '__inputs' not in dashboard, 'file provisioning does not fill __inputs: use the DS_PROMETHEUS variable'


@pytest.mark.parametrize('path', DASHBOARDS, ids=relative)
def test_datasource_is_a_templated_variable(path):
    variables = {v['name']: v for v in load_json(path)['templating']['list']}
    assert variables['DS_PROMETHEUS']['type'] == 'datasource'
    assert variables['DS_PROMETHEUS']['query'] == 'prometheus'
    for variable in variables.values():
        if variable['type'] == 'query':
            assert variable['datasource'] == DS, variable['name']


@pytest.mark.parametrize('path', DASHBOARDS, ids=relative)
def test_every_panel_and_query_uses_the_datasource_variable(path):
    panels = list(check_queries.iter_panels(load_json(path)))
    queried = [p for p in panels if p['type'] != 'row']
    assert len(queried) >= 20
    wrong = []
    for panel in queried:
        if panel.get('datasource') != DS:
            wrong.append('panel %s %r: %r' % (panel['id'], panel['title'], panel.get('datasource')))
        if not panel.get('targets'):
            wrong.append('panel %s %r has no query' % (panel['id'], panel['title']))
        for target in panel.get('targets') or ():
            if target.get('datasource') != DS:
                wrong.append('panel %s %r query %s: %r' % (
                    panel['id'], panel['title'], target.get('refId'), target.get('datasource')))
            if not target.get('expr'):
                wrong.append('panel %s %r query %s has no expr' % (panel['id'], panel['title'], target.get('refId')))
    assert not wrong, '\n'.join(wrong)


@pytest.mark.parametrize('path', DASHBOARDS, ids=relative)
def test_panel_ids_and_ref_ids_are_unique(path):
    panels = list(check_queries.iter_panels(load_json(path)))
    ids = [panel['id'] for panel in panels]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    for panel in panels:
        refs = [target['refId'] for target in panel.get('targets') or ()]
        assert len(refs) == len(set(refs)), (panel['id'], refs)
        assert set(panel['gridPos']) >= {'h', 'w', 'x', 'y'}, panel['id']
        assert panel['gridPos']['x'] + panel['gridPos']['w'] <= 24, panel['id']


@pytest.mark.parametrize('path', DASHBOARDS, ids=relative)
def test_dashboard_variables_are_matched_as_regular_expressions(path):
    """A multi-value variable becomes a|b|c (and All .*): only =~ matches it."""
    dashboard = load_json(path)
    names = [v['name'] for v in dashboard['templating']['list'] if v['type'] != 'datasource']
    assert names
    for panel in check_queries.iter_panels(dashboard):
        for target in panel.get('targets') or ():
            for name in names:
                for match in re.finditer(r'(\S{0,3})"\$\{?%s\b' % name, target['expr']):
                    assert match.group(1).endswith('=~'), (panel['title'], target['expr'])


def test_provisioning_examples():
    with open(os.path.join(PROVISIONING, 'dashboards', 'llm-server.yml'), encoding='utf-8') as handle:
        providers = yaml.safe_load(handle)
    assert providers['apiVersion'] == 1
    (provider,) = providers['providers']
    assert provider['type'] == 'file'
    assert provider['options']['path'] == '/var/lib/grafana/dashboards/llm-server'
    with open(os.path.join(PROVISIONING, 'datasources', 'prometheus.yml'), encoding='utf-8') as handle:
        datasources = yaml.safe_load(handle)
    assert datasources['apiVersion'] == 1
    (datasource,) = datasources['datasources']
    assert datasource['type'] == 'prometheus'
    assert datasource['url'].startswith('http://')


# ------------------------------------------------------------------ the expressions


def test_console_expressions_are_literals():
    for path in CONSOLES:
        queries = check_queries.console_queries(path)
        dynamic = ['%s: %s' % (q.source, q.dynamic) for q in queries if q.dynamic]
        assert not dynamic, '\n'.join(dynamic)
        with open(path, encoding='utf-8') as handle:
            text = handle.read()
        assert text.count('new PromConsole.Graph(') >= 10
        assert len(queries) >= 40
        # Each graph's node is an element of the page (the screenshot check names graphs by it).
        for node in re.findall(r'node:\s*document\.querySelector\("#(\w+)"\)', text):
            assert text.count('id="%s"' % node) == 1, node


def test_expressions_are_found():
    expressions = unique_expressions()
    assert len(expressions) >= 50
    for expr in expressions:
        assert '$' not in expr.replace('${1}', ''), 'a Grafana variable left in %s' % expr
        assert '{{' not in expr, expr


@needs_promtool
def test_expressions_parse(tmp_path):
    """promtool 2.42 has no `check query`: each expression becomes a recording rule of a temporary file."""
    expressions = sorted(unique_expressions().items())
    rules = [{'record': 'llm_dashboard_check:expr_%d' % index, 'expr': expr}
             for index, (expr, _sources) in enumerate(expressions)]
    path = tmp_path / 'dashboards.rules.yml'
    path.write_text(yaml.safe_dump({'groups': [{'name': 'dashboards', 'rules': rules}]}, sort_keys=False))
    proc = subprocess.run([PROMTOOL, 'check', 'rules', str(path)], capture_output=True, text=True, check=False)
    where = '\n'.join('expr_%d: %s (%s)' % (i, expr, '; '.join(sources))
                      for i, (expr, sources) in enumerate(expressions))
    assert proc.returncode == 0, proc.stdout + proc.stderr + '\n' + where
    assert 'SUCCESS: %d rules found' % len(rules) in proc.stdout


@needs_promtool
def test_promtool_rejects_a_broken_expression(tmp_path):
    """The parse check above would catch a mistake."""
    path = tmp_path / 'broken.rules.yml'
    path.write_text(yaml.safe_dump({'groups': [{'name': 'x', 'rules': [
        {'record': 'llm_dashboard_check:expr_0', 'expr': 'sum by (gpu (llm_gpu_up)'}]}]}))
    proc = subprocess.run([PROMTOOL, 'check', 'rules', str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0


class _AllFields(dict):
    """A gpu_facts record or extra dict in which every field has a value (1)."""

    def __missing__(self, key):
        return 1

    def get(self, key, default=None):
        return self[key]


def exporter_metric_names():
    """Every family llm-gpu-exporter can write: build_families of a snapshot with every field read."""
    import importlib
    gpu_families = importlib.import_module(GPU_FAMILIES)
    facts = _AllFields(index=0, uuid='GPU-0', name='GPU', clocks=_AllFields(), throttle_reasons_mask=0xffff)
    snapshot = {
        'gpus': [{'facts': facts, 'extra': _AllFields(),
                  'unavailable': {'memory': 'not_supported', 'power_draw': 'timeout'}}],
        'xids': {0: {'counts': {79: 1}, 'uuid': 'GPU-0', 'name': 'GPU'}},
        'success': True,
    }
    return {family.name for family in gpu_families.build_families(snapshot)}


def health_metric_names():
    module = importlib.import_module(LLM_HEALTH)
    return {name for name, _kind, _help in module.METRIC_FAMILIES}


def rule_metric_names():
    names = set()
    for path in RULE_FILES:
        with open(path, encoding='utf-8') as handle:
            for group in yaml.safe_load(handle)['groups']:
                for rule in group['rules']:
                    names.update(check_queries.metric_names(rule['expr']))
    return names


def known_metrics():
    return exporter_metric_names() | health_metric_names() | rule_metric_names() | EXTERNAL_METRICS


def is_known(name, known):
    if name in known:
        return True
    base = re.sub(r'_(bucket|sum|count)$', '', name)
    return base != name and base in EXTERNAL_HISTOGRAMS


def test_known_metrics_come_from_the_code():
    exporter = exporter_metric_names()
    assert {'llm_gpu_temperature_celsius', 'llm_gpu_temperature_slowdown_celsius', 'llm_gpu_xid_errors_total',
            'llm_gpu_power_limit_watts', 'llm_gpu_up', 'llm_gpu_throttle_reason'} <= exporter
    assert health_metric_names() == {'llm_engine_probe_success', 'llm_engine_probe_timestamp_seconds',
                                     'llm_engine_probe_interval_seconds', 'llm_engine_probe_restarts_total'}
    assert 'llm_proxy_requests_total' in rule_metric_names()


def test_every_metric_name_is_known():
    known = known_metrics()
    unknown = []
    for expr, sources in sorted(unique_expressions().items()):
        names = check_queries.metric_names(expr)
        assert names or 'vector(' in expr, 'no metric name found in %s' % expr
        for name in names:
            if not is_known(name, known):
                unknown.append('%s in %s (%s)' % (name, expr, '; '.join(sources)))
    assert not unknown, '\n'.join(unknown)


def test_no_retired_series():
    for expr, sources in unique_expressions().items():
        for retired in RETIRED:
            assert retired not in expr, '%s (%s)' % (expr, '; '.join(sources))


# ------------------------------------------------------------------ check_queries.py


@pytest.mark.parametrize('expr, names', [
    ('llm_gpu_up', ['llm_gpu_up']),
    ('sum by (serving_instance) (vllm:num_requests_running) or sum by (serving_instance) '
     '(llamacpp:requests_processing)', ['llamacpp:requests_processing', 'vllm:num_requests_running']),
    ("max by (serving_instance) (vllm:kv_cache_usage_perc{serving_instance=~'a|b'})", ['vllm:kv_cache_usage_perc']),
    ("sum by (class) (label_replace(rate(x_total[5m]), 'class', '${1}xx', 'status', '(.)..'))", ['x_total']),
    ('histogram_quantile(0.95, sum(rate(h_bucket{le!="+Inf"}[5m:1m])) by (le))', ['h_bucket']),
    ('a * on (gpu) group_left (name) b offset 5m > bool 1e3', ['a', 'b']),
    ('(sum(rate(c_total{status=~"5.."}[5m])) or vector(0)) / time()', ['c_total']),
    ('count_values("v", up) # comment naming nothing_real', ['up']),
])
def test_metric_names(expr, names):
    assert check_queries.metric_names(expr) == names


def test_engine_only():
    assert check_queries.engine_only('histogram_quantile(0.95, rate(vllm:x_bucket[5m]))', ['vllm'])
    assert not check_queries.engine_only('vllm:a or llamacpp:b', ['vllm'])
    assert check_queries.engine_only('vllm:a or llamacpp:b', ['vllm', 'llamacpp'])
    assert not check_queries.engine_only('vllm:a / on () group_left up', ['vllm'])
    assert not check_queries.engine_only('vector(1)', ['vllm'])


def test_grafana_variables_are_replaced():
    dashboard = {'templating': {'list': [
        {'name': 'DS_PROMETHEUS', 'type': 'datasource'},
        {'name': 'engine', 'type': 'query', 'includeAll': True, 'multi': True, 'allValue': '.+',
         'current': {'value': ['$__all']}},
        {'name': 'one', 'type': 'custom', 'current': {'value': 'x'}},
    ]}}
    values = check_queries.grafana_variables(dashboard, '2m', '6h')
    expr = ('rate(a{e=~"$engine",f=~"${engine:regex}",o="[[one]]"}[$__rate_interval]) '
            '+ label_replace(b, "c", "${1}x", "d", "(.)") + $__range_s + c[${__interval}]')
    assert check_queries.substitute(expr, values) == (
        'rate(a{e=~".+",f=~".+",o="x"}[2m]) + label_replace(b, "c", "${1}x", "d", "(.)") + 21600 + c[2m]')


def test_grafana_extraction_reaches_collapsed_rows(tmp_path):
    path = tmp_path / 'dashboard.json'
    path.write_text(json.dumps({'dashboard': {'panels': [
        {'id': 1, 'type': 'timeseries', 'title': 'top', 'targets': [{'refId': 'A', 'expr': 'a[$__rate_interval]'}]},
        {'id': 2, 'type': 'row', 'title': 'closed', 'collapsed': True, 'panels': [
            {'id': 3, 'type': 'stat', 'title': 'inside', 'targets': [{'refId': 'A', 'expr': 'b'}, {'refId': 'B'}]}]},
    ], 'rows': [{'panels': [{'id': 4, 'title': 'old', 'targets': [{'refId': 'A', 'expr': 'c'}]}]}]}}))
    queries = check_queries.grafana_queries(str(path))
    assert [(q.expr, q.source) for q in queries] == [
        ('a[1m]', 'dashboard.json panel 1 "top" A'), ('b', 'dashboard.json panel 3 "inside" A'),
        ('c', 'dashboard.json panel 4 "old" A')]


def test_console_extraction(tmp_path):
    page = tmp_path / 'page.html'
    page.write_text('''{{/* query "not this" */}}
{{ range query "up{job='a'}" | sortByLabel "x" }}{{ end }}
{{ template "prom_query_drilldown" (args "sum(b)" "B") }}
{{ with printf "c{i='%s'}" .Params.i | query }}{{ end }}
<script>
new PromConsole.Graph({
  node: document.querySelector("#g"), // expr: "not this either"
  expr: ["d", 'e{f=\\'g\\'}'],
  name: function(m) { return m.x + "}"; },
});
new PromConsole.Graph({node: document.querySelector("#h"), expr: "i{j='{{ .Params.j }}'}"});
</script>
''')
    queries = check_queries.console_queries(str(page))
    assert [(q.expr, q.dynamic is None) for q in queries if q.dynamic is None] == [
        ("up{job='a'}", True), ('sum(b)', True), ('d', True), ("e{f='g'}", True)]
    dynamic = [q for q in queries if q.dynamic]
    assert len(dynamic) == 2
    assert 'render time' in dynamic[0].dynamic and ':4' in dynamic[0].source
    assert '{{ }}' in dynamic[1].dynamic


class _StubPrometheus(http.server.BaseHTTPRequestHandler):
    """/api/v1/query: empty for vllm: and ALERTS, an error for "broken", else two series."""

    def do_POST(self):
        length = int(self.headers['Content-Length'])
        expr = urllib.parse.parse_qs(self.rfile.read(length).decode())['query'][0]
        if 'broken' in expr:
            status, answer = 400, {'status': 'error', 'errorType': 'bad_data', 'error': 'parse error'}
        elif expr.startswith(('ALERTS', 'histogram_quantile(0.95, sum by (serving_instance, le) (rate(vllm:',
                              'max by (serving_instance) (vllm:')):
            status, answer = 200, {'status': 'success', 'data': {'resultType': 'vector', 'result': []}}
        else:
            status, answer = 200, {'status': 'success', 'data': {'resultType': 'vector', 'result': [
                {'metric': {}, 'value': [0, '1']}, {'metric': {}, 'value': [0, '2']}]}}
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub_prometheus():
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _StubPrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d' % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_checker_fails_on_empty_results_by_default(stub_prometheus, capsys):
    assert check_queries.main(['--prometheus', stub_prometheus] + CONSOLES + DASHBOARDS) == 1
    out, err = capsys.readouterr()
    assert 'skipped (' not in out and ', 0 skipped, 2 allowed empty, 3 problem(s)' in out
    assert 'kv_cache_usage_perc' in err and 'vllm:time_to_first_token_seconds_bucket' in err
    # No alert firing is the healthy state: said, not failed.
    assert "ALERTS{alertstate='firing'}\n      no alert is firing" in out
    assert 'ALERTS' not in err


def test_checker_requires_alerts_when_asked(stub_prometheus, capsys):
    assert check_queries.main(['--prometheus', stub_prometheus, '--require-alerts', '--skip-engine', 'vllm']
                              + CONSOLES + DASHBOARDS) == 1
    out, err = capsys.readouterr()
    assert ', 2 problem(s)' in out
    assert "ALERTS{alertstate='firing'}" in err and 'ALERTS{alertstate="firing"}' in err


def test_checker_skips_and_allows_only_when_asked(stub_prometheus, capsys):
    rc = check_queries.main(['--prometheus', stub_prometheus, '--skip-engine', 'vllm', '--require-alerts',
                             '--allow-empty', '^ALERTS'] + CONSOLES + DASHBOARDS)
    out, err = capsys.readouterr()
    assert rc == 0, out + err
    skipped = out.split('skipped (--skip-engine vllm)')[1].split('empty, and allowed')[0]
    assert 'vllm:time_to_first_token_seconds_bucket' in skipped
    assert 'vllm:inter_token_latency_seconds_bucket' in skipped
    assert 'vllm:kv_cache_usage_perc' in skipped
    # Expressions that read both engines are evaluated, not skipped.
    assert 'llamacpp:' not in skipped
    assert 'ALERTS{alertstate="firing"}\n      --allow-empty ^ALERTS; in' in out


def test_checker_reports_errors(stub_prometheus, tmp_path, capsys):
    page = tmp_path / 'broken.html'
    page.write_text('{{ with query "broken(" }}{{ end }}{{ with query "up" }}{{ end }}')
    assert check_queries.main(['--prometheus', stub_prometheus, str(page)]) == 1
    out, err = capsys.readouterr()
    assert 'bad_data: parse error' in err
    assert '      2  up' in out


# ------------------------------------------------------------------ screenshot.py

_GRAPH = ('<div id="%s"><table class="prom_graph_table"><tr><td class="rickshaw_graph">%s</td></tr>'
          '<tr><td><a class="prom_graph_link">+</a></td><td>%s</td></tr></table></div>')


def test_screenshot_graph_check():
    drawn = '<svg><g><path class="path" d="M1,2L3,4L5,6"></path></g><path class="domain" d="M4,0H0V160H4"></path></svg>'
    area = '<svg><g><path d="M1,2L3,4Z"></path></g></svg>'
    nan = '<svg><path class="path" fill="none"></path><path class="domain" d="M4,0H0V160H4"></path></svg>'
    legend = '<div class="rickshaw_legend"><ul><li class="line"><span class="label">GPU 0</span></li></ul></div>'
    dom = ''.join((
        _GRAPH % ('ok', drawn, legend),
        _GRAPH % ('area', area, ''),
        _GRAPH % ('nodata', '<div class="prom_graph_error">No timeseries returned</div>', ''),
        _GRAPH % ('loading', '<img class="prom_graph_loading" src="x.gif">', ''),
        _GRAPH % ('axes', '<svg><path class="domain" d="M4,0H0V160H4"></path></svg>', ''),
        _GRAPH % ('nan', nan, legend),
    ))
    results = {name: (state, detail) for name, state, detail in screenshot.check_graphs(
        '<html><body>%s</body></html>' % dom)}
    assert results['ok'] == (screenshot.DRAWN, '1 series')
    assert results['area'][0] == screenshot.DRAWN
    assert results['nodata'] == (screenshot.FAILED, 'No timeseries returned')
    assert results['loading'][0] == screenshot.FAILED and 'still loading' in results['loading'][1]
    assert results['axes'][0] == screenshot.FAILED and 'nothing drawn' in results['axes'][1]
    assert results['nan'][0] == screenshot.NO_VALUES and 'GPU 0' in results['nan'][1]
