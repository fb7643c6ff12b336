# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Screenshot a Prometheus console page with headless Chromium, and check its graphs drew.

    python3 tests/monitoring/screenshot.py \\
        --url http://127.0.0.1:9090/consoles/llm-overview.html \\
        --out docs/images/monitoring-overview.png

Steps, each failing with exit 1 and the reason:
1. GET the URL: Prometheus answers a template error with a 500 and its
   message, which is printed.
2. Chromium --dump-dom: the page as its scripts left it. Every graph of the
   console libraries (PromConsole.Graph: a td.rickshaw_graph inside a
   table.prom_graph_table, under the element given as `node`, named here by
   that element's id) must hold an SVG path with data points. A graph that
   shows "No timeseries returned" or "Error loading data", or is still
   loading, fails (--allow-no-data ID lets a named graph be empty, said so
   in the output); so does a page without any graph (--min-graphs). A graph
   whose series hold only NaN (a ratio or a quantile while nothing is
   served: the query works, there is no point to draw) is listed as "no
   data" and does not fail, unless --fail-on-nan.
3. Chromium --screenshot into --out.

Chromium runs with a new profile directory each time (removed afterwards),
no network beyond the page, and a virtual time budget: the page's requests
and scripts run until the budget of page time is spent, which takes far less
wall time. The graphs' time range comes from the URL's fragment, as the
console libraries write it: ...html#pctc{"duration":1800,"endTime":0} for
the last 30 minutes (the default is one hour).

Standard library only (Debian 12's python3). Chromium: Debian's `chromium`
package (scripts/setup-test-host.sh installs it on the test host).
"""

from __future__ import annotations

import argparse
import html.parser
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

DEFAULT_CHROMIUM = '/usr/bin/chromium'
# Flags for a reproducible, quiet, offline-friendly headless run (no sandbox:
# the test host runs this as root).
CHROMIUM_FLAGS = (
    '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--hide-scrollbars',
)
# Elements the HTML parser must not wait to see closed.
VOID_ELEMENTS = frozenset(('area', 'base', 'br', 'col', 'embed', 'hr', 'img', 'input', 'link', 'meta',
                           'param', 'source', 'track', 'wbr'))
# A series drawn with at least two points: "Mx,yLx,y..." (Rickshaw's line and
# area renderers; the axes' path.domain is drawn with H and V only).
_NUMBER = r'-?\d+(?:\.\d+)?(?:e[-+]?\d+)?'
DATA_PATH = re.compile(r'M\s*{0}\s*,\s*{0}\s*L\s*{0}\s*,\s*{0}'.format(_NUMBER), re.IGNORECASE)


class Node(object):
    __slots__ = ('tag', 'attrs', 'children', 'parent', 'text')

    def __init__(self, tag, attrs, parent):
        self.tag = tag
        self.attrs = dict(attrs)
        self.children = []
        self.parent = parent
        self.text = []

    def classes(self):
        return (self.attrs.get('class') or '').split()

    def iter(self):
        yield self
        for child in self.children:
            yield from child.iter()

    def all_text(self):
        return ' '.join(' '.join(node.text) for node in self.iter()).split()


class TreeBuilder(html.parser.HTMLParser):
    """A forgiving DOM tree from Chromium's serialisation (which closes its elements)."""

    def __init__(self):
        html.parser.HTMLParser.__init__(self, convert_charrefs=True)
        self.root = Node('#document', (), None)
        self.current = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, attrs, self.current)
        self.current.children.append(node)
        if tag not in VOID_ELEMENTS:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Node(tag, attrs, self.current))

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.current = node.parent

    def handle_data(self, data):
        if data.strip():
            self.current.text.append(data)


def graph_name(node):
    """The id of the nearest ancestor that has one (the `node` given to PromConsole.Graph)."""
    parent = node.parent
    while parent is not None:
        if parent.attrs.get('id'):
            return parent.attrs['id']
        parent = parent.parent
    return '(graph without an id)'


# What check_graphs finds for a graph.
DRAWN = 'drawn'
NO_VALUES = 'no values'
FAILED = 'failed'


def _ancestor(node, tag, css_class):
    parent = node.parent
    while parent is not None and not (parent.tag == tag and css_class in parent.classes()):
        parent = parent.parent
    return parent


def check_graphs(dom):
    """[(graph name, DRAWN | NO_VALUES | FAILED, detail)] for every PromConsole graph of a rendered page.

    NO_VALUES: the query answered with series (they are in the legend) whose
    every value is NaN, so there is no point to draw: a ratio or a quantile
    while there is no traffic. The query and the page work; there is nothing
    to see.
    """
    builder = TreeBuilder()
    builder.feed(dom)
    builder.close()
    results = []
    for node in builder.root.iter():
        if node.tag != 'td' or 'rickshaw_graph' not in node.classes():
            continue
        name = graph_name(node)
        table = _ancestor(node, 'table', 'prom_graph_table') or node
        legend = [' '.join(n.all_text()) for n in table.iter() if n.tag == 'span' and 'label' in n.classes()]
        errors = [' '.join(n.all_text()) for n in node.iter() if 'prom_graph_error' in n.classes()]
        paths = [n for n in node.iter() if n.tag == 'path' and 'domain' not in n.classes()]
        drawn = [p for p in paths if DATA_PATH.search(p.attrs.get('d') or '')]
        loading = any('prom_graph_loading' in n.classes() for n in node.iter())
        if errors:
            results.append((name, FAILED, '; '.join(errors)))
        elif drawn:
            results.append((name, DRAWN, '%d series' % len(legend)))
        elif loading:
            results.append((name, FAILED, 'still loading when the time budget ran out, or a query failed (the '
                                          'libraries leave the spinner on an error answer: try check_queries.py, '
                                          'or raise --budget-ms)'))
        elif legend:
            results.append((name, NO_VALUES, 'series %s, but every value is NaN (a ratio or quantile without '
                                             'traffic?)' % ', '.join(legend)))
        else:
            results.append((name, FAILED, 'nothing drawn (a script error? see the browser log with --verbose)'))
    return results


def fetch(url, timeout):
    """(status, body text) of a GET."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode('utf-8', 'replace')
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode('utf-8', 'replace')


def run_chromium(chromium, url, extra, width, height, budget_ms, timeout, verbose):
    """stdout of one headless Chromium run with a new profile directory."""
    profile = tempfile.mkdtemp(prefix='llm-console-chromium-')
    try:
        command = [chromium] + list(CHROMIUM_FLAGS) + [
            '--user-data-dir=%s' % profile,
            '--window-size=%d,%d' % (width, height),
            '--virtual-time-budget=%d' % budget_ms,
        ] + list(extra) + [url]
        if verbose:
            command.insert(1, '--enable-logging=stderr')
            print('+ ' + ' '.join(command), file=sys.stderr)
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False)
        stderr = proc.stderr.decode('utf-8', 'replace')
        if verbose:
            for line in stderr.splitlines():
                if 'CONSOLE' in line or 'Uncaught' in line:
                    print('  browser: ' + line, file=sys.stderr)
        if proc.returncode != 0:
            raise RuntimeError('chromium exited with %d: %s' % (proc.returncode, stderr.strip()[-2000:]))
        return proc.stdout.decode('utf-8', 'replace')
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def parse_size(text):
    match = re.match(r'^(\d+)[,x](\d+)$', text)
    if not match:
        raise argparse.ArgumentTypeError('expected WIDTH,HEIGHT, e.g. 1400,2000')
    return int(match.group(1)), int(match.group(2))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', maxsplit=1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--url', required=True, help='the console page, e.g. http://127.0.0.1:9090/consoles/llm-overview.html')
    parser.add_argument('--out', help='PNG file to write (no screenshot without it: only the graph check)')
    parser.add_argument('--chromium', default=DEFAULT_CHROMIUM, help='browser binary (default %(default)s)')
    parser.add_argument('--window-size', type=parse_size, default=(1400, 2000), metavar='W,H',
                        help='browser window, which is also the screenshot size (default 1400,2000)')
    parser.add_argument('--budget-ms', type=int, default=15000,
                        help="virtual time the page's scripts and requests get (default %(default)s)")
    parser.add_argument('--timeout', type=float, default=120, help='wall-clock limit per browser run in seconds')
    parser.add_argument('--allow-no-data', action='append', default=[], metavar='GRAPH_ID',
                        help='a graph (its element id) that may show no data (repeatable)')
    parser.add_argument('--fail-on-nan', action='store_true',
                        help='also fail a graph whose series hold only NaN (by default it is listed as "no data")')
    parser.add_argument('--min-graphs', type=int, default=1, help='fewest graphs the page must have (default 1)')
    parser.add_argument('--dom-out', help='also write the rendered DOM here')
    parser.add_argument('--verbose', action='store_true', help="show the browser command and its console messages")
    args = parser.parse_args(argv)

    if not os.access(args.chromium, os.X_OK):
        print('screenshot: no browser at %s (Debian: apt-get install chromium)' % args.chromium, file=sys.stderr)
        return 1
    page_url = args.url.split('#', 1)[0]
    try:
        status, body = fetch(page_url, args.timeout)
    except (urllib.error.URLError, OSError) as err:
        print('screenshot: %s does not answer: %s' % (page_url, err), file=sys.stderr)
        return 1
    if status != 200:
        print('screenshot: %s answered %d:\n%s' % (page_url, status, body.strip()[:2000]), file=sys.stderr)
        return 1

    width, height = args.window_size
    try:
        dom = run_chromium(args.chromium, args.url, ['--dump-dom'], width, height, args.budget_ms, args.timeout,
                           args.verbose)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as err:
        print('screenshot: --dump-dom failed: %s' % err, file=sys.stderr)
        return 1
    if args.dom_out:
        with open(args.dom_out, 'w', encoding='utf-8') as handle:
            handle.write(dom)

    failed = 0
    results = check_graphs(dom)
    allowed = set(args.allow_no_data)
    for name, state, detail in results:
        if state == DRAWN:
            print('ok       %s (%s)' % (name, detail))
        elif name in allowed:
            print('allowed  %s: %s (--allow-no-data)' % (name, detail))
        elif state == NO_VALUES and not args.fail_on_nan:
            print('no data  %s: %s' % (name, detail))
        else:
            print('FAILED   %s: %s' % (name, detail))
            failed += 1
    unknown = sorted(allowed - set(result[0] for result in results))
    for name in unknown:
        print('note     --allow-no-data %s: the page has no graph of that id' % name)
    if len(results) < args.min_graphs:
        print('FAILED   the page has %d graph(s), fewer than --min-graphs %d' % (len(results), args.min_graphs))
        failed += 1

    if args.out:
        out = os.path.abspath(args.out)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if os.path.exists(out):
            os.remove(out)
        try:
            run_chromium(args.chromium, args.url, ['--screenshot=%s' % out], width, height, args.budget_ms,
                         args.timeout, args.verbose)
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as err:
            print('screenshot: --screenshot failed: %s' % err, file=sys.stderr)
            return 1
        if not os.path.isfile(out) or os.path.getsize(out) == 0:
            print('screenshot: chromium wrote no %s' % out, file=sys.stderr)
            return 1
        print('wrote %s (%dx%d)' % (args.out, width, height))

    if failed:
        print('%d of %d graph(s) did not draw' % (failed, len(results)))
        return 1
    print('%d of %d graph(s) drew data' % (len([r for r in results if r[1] == DRAWN]), len(results)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
