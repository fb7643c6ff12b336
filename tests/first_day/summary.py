# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What `make demo` shows: the first_day scenario's report, compact.

    python3 tests/first_day/summary.py build/first-day
    molecule test -s first_day | python3 tests/first_day/summary.py --progress

With --progress it reads Molecule's output and prints one line per stage of
the scenario and per step of its converge and verify, with the time since
it began.

The scenario's verify writes the report (molecule/first_day/verify.yml) and
prints this summary as its last step, so `make test` runs it on every
report it writes. Exits 1 naming the first part of the report that is
missing.
"""

from __future__ import annotations

import html
import json
import os
import re
import select
import sys
import time
from pathlib import Path

RULE = '-' * 78


def load(report: Path, name: str):
    path = report / name
    if not path.exists():
        raise SystemExit('summary: %s is missing: the first_day scenario did not get that far' % path)
    return json.loads(path.read_text()) if name.endswith('.json') else path.read_text()


def heading(title: str) -> None:
    print()
    print(title)
    print(RULE)


def runs(report: Path) -> None:
    heading("The owner's path: a copy of inventories/example, the README's quick start as written")
    what = {1: 'stopped after the driver, asking for the reboot', 2: 'ran to the end',
            3: 'the same, on the collection installed from its tarball'}
    done = load(report, 'runs.json')
    for run in done:
        changed = ', '.join('%s changed=%s' % (host, counts.get('changed')) for host, counts in sorted(run['recap'].items()))
        print('  run %d: %-48s %7.1f s  (%s)' % (run['run'], what.get(run['run'], ''), run['seconds'], changed))
        if run.get('slowest_roles'):
            # Slowest first: the report's JSON comes back with its keys sorted by name.
            roles = sorted(run['slowest_roles'].items(), key=lambda item: -item[1])
            slowest = ('%s %.1f s' % (role.rsplit('.', 1)[-1], seconds) for role, seconds in roles)
            print('         slowest: %s' % ', '.join(slowest))
    if len(done) < 3:
        print('  (make test also runs it a third time, changed=0 from the installed tarball, and restarts an engine'
              ' with the Hub unreachable)')


def preflight(report: Path) -> None:
    data = load(report, 'preflight.json')
    heading('GPU inventory of %s (driver %s) and the preflight' % (data['host'], data.get('gpu_driver_version')))
    for gpu in data['gpus']:
        print('  GPU %s  %s  %s  %s GiB  BAR1 %s MiB  PCIe %s  %s W' % (
            gpu['index'], gpu['pci_bus_id'], gpu['name'], gpu['memory_total_gib'], gpu['bar1_total_mib'],
            gpu['pcie'], gpu['power_limit_w']))
    print('  preflight: %s (%s)' % (data['verdict'].upper(), ', '.join(
        '%d %s' % (n, k) for k, n in data['summary'].items() if n)))
    for check in data['checks']:
        if check['status'] != 'pass':
            print('    [%s] %s: %s' % (check['status'].upper(), check['id'], check['message']))


def plan(report: Path) -> None:
    heading('What fits (the README\'s plan command, before any download)')
    for line in load(report, 'llm-home-capacity.txt').splitlines():
        # The training estimates that follow are in the file.
        if line.startswith('Training from scratch'):
            break
        print('  ' + line)


def text(answer: str, width: int = 64) -> str:
    """An answer for one line: the tiny test model's weights are random, so is its text."""
    shown = ''.join(c if c.isprintable() else '\u00b7' for c in answer)
    return repr(shown if len(shown) <= width else shown[:width] + '...')


def stream(report: Path) -> None:
    data = load(report, 'stream.json')
    heading('An answer from the internet, through the VPS, with a key from the vault\n'
            '(the test model is tiny and its weights random: so is its text)')
    openai = data['openai']
    print('  openai client: %s  (%d chunks, model %s; a wrong key got %s)' % (
        text(openai['text']), openai['chunks'], openai['model'], openai['wrong_key_status']))
    deltas = []
    for event in data['curl_events']:
        payload = event[len('data: '):]
        if payload != '[DONE]':
            for choice in json.loads(payload).get('choices', []):
                deltas.append((choice.get('delta') or {}).get('content') or '')
    print('  the quick start\'s curl: %s  (%d events, then [DONE])' % (text(''.join(deltas)), len(data['curl_events']) - 1))


def message(alert: dict) -> str:
    first = re.sub(r'<[^>]+>', '', html.unescape(alert['text'].splitlines()[0]))
    return '%s  (at the Telegram stand-in %.0f s after the wait began)' % (first, alert['waited_s'])


def power_cut(report: Path) -> None:
    data = load(report, 'power-cut.json')
    heading('A power cut of %.0f s that the UPS rides out' % data['cut_s'])
    for line in data['on_battery_status'][:6]:
        print('  | ' + line)
    print('  %d engines kept running (the same invocations); an answer streamed on battery: %s' % (
        data['engines'], text(data['streamed_on_battery']['text'], 24)))
    print('  ' + message(data['firing']))
    print('  ' + message(data['resolved']))


def tunnel(report: Path) -> None:
    heading('The tunnel cut on the VPS')
    print('  ' + message(load(report, 'tunnel-alert.json')))


def health(report: Path) -> None:
    heading('Check health (the README\'s commands over SSH)')
    for result in load(report, 'health.json'):
        print('  $ ' + result['command'])
        for line in result['output'].splitlines()[:14]:
            print('    ' + line)


def console(report: Path) -> None:
    heading('The console page, through the README\'s SSH tunnel')
    path = report / 'console.png'
    if not path.exists():
        raise SystemExit('summary: %s is missing' % path)
    print('  %s (%d KiB)' % (path, path.stat().st_size // 1024))


ANSI = re.compile(r'\x1b\[[0-9;]*m')
STAGE = re.compile(r'^INFO\s+\S+ \S+ (?P<stage>[\w-]+): (?P<what>Executing|Executed: .*)$')
TASK = re.compile(r'^\W*TASK \[(?P<task>[^\]]+)')


# Ansible's first line of a task's result on one host.
RESULT = re.compile(r"^\W*(?P<status>ok|changed|skipping|fatal|failed|included|unreachable|FAILED - RETRYING)\b")
# A task still without a result after this long is shown: a skipped one has
# its result at once, a long one (the install) shows while it runs.
SHOW_AFTER_S = 1.0


def lines_with_pauses(stream, pause_s: float):
    """The lines of a pipe, and None each time it stays silent for pause_s."""
    fd = stream.fileno()
    buffered = b''
    while True:
        ready = select.select([fd], [], [], pause_s)[0]
        if not ready:
            yield None
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            if buffered:
                yield buffered.decode(errors='replace')
            return
        buffered += chunk
        *whole, buffered = buffered.split(b'\n')
        for line in whole:
            yield line.decode(errors='replace')


def progress(lines) -> None:
    """Molecule's output in, one line per stage and per converge or verify step out.

    lines: Molecule's lines, with None where the output paused. A step is shown
    once it has a result other than skipping on some host, or after a pause
    without one: the steps make demo leaves to make test are not listed.
    """
    started = time.monotonic()
    stage = ''
    pending = None
    for raw in lines:
        if raw is None:
            if pending:
                print(pending, flush=True)
                pending = None
            continue
        line = ANSI.sub('', raw).strip()
        clock = '[%2d:%02d]' % divmod(int(time.monotonic() - started), 60)
        match = RESULT.match(line)
        if match and pending:
            if match.group('status') != 'skipping':
                print(pending, flush=True)
                pending = None
            continue
        match = STAGE.match(line) or TASK.match(line)
        if match:
            # The next header ends the wait for a result: every host skipped it.
            pending = None
        if match and match.re is STAGE:
            stage = match.group('stage') if match.group('what') == 'Executing' else ''
            print('%s %s: %s' % (clock, match.group('stage'), match.group('what').lower()), flush=True)
        elif match and stage in ('converge', 'verify') and not match.group('task').startswith('Gathering'):
            pending = '%s   %s' % (clock, match.group('task'))
    if pending:
        print(pending, flush=True)


def main(argv: list[str]) -> int:
    if argv[1:] == ['--progress']:
        progress(lines_with_pauses(sys.stdin, SHOW_AFTER_S))
        return 0
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    report = Path(argv[1])
    for part in (runs, preflight, plan, stream, power_cut, tunnel, health, console):
        part(report)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
