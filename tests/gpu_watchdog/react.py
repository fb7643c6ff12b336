# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Change the simulated GPUs, then time how long until the watchdog's effect shows.

    react.py [--set KEY=VALUE ...] [--append FILE=LINE ...] [--run COMMAND ...]
             [--until CONDITION ...] [--hold CONDITION ...] [--timeout S] [--fixture FILE]

--set changes the NVML double's fixture (tests/doubles/nvml/set_fixture.py,
atomically); --append adds a line to a file (an XID for the double's
xid_events_file, an "NVRM: Xid" line for the kernel log); --run runs a shell
command (the simulated UPS's upsrw), which must exit 0. Then it polls every
50 ms until every --until condition holds, or for --timeout seconds while
every --hold condition must keep holding. Conditions:

  json:FILE:PATH=VALUE   the JSON file's value at the dotted PATH equals VALUE (JSON)
  json:FILE:PATH=        the JSON file has nothing at PATH
  unit:NAME=STATE        systemd's ActiveState of NAME (active, inactive, ...; a|b for either)
  text:FILE~REGEX        the file's text matches REGEX (multi-line)

Prints one JSON line: {"seconds": time from the change to the conditions
holding, "ok": bool, "failed": the conditions that did not hold}. Exit 0
when they held, 1 when not.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

# Installed side by side on the test host; in a checkout it is the double's.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, '..', 'doubles', 'nvml')]
import set_fixture  # noqa: E402 pylint: disable=wrong-import-position

MISSING = object()


def json_value(path, dotted):
    try:
        with open(path, encoding='utf-8') as handle:
            node = json.load(handle)
    except (OSError, ValueError):
        return MISSING
    for key in dotted.split('.'):
        if isinstance(node, list):
            try:
                node = node[int(key)]
            except (ValueError, IndexError):
                return MISSING
        elif isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return MISSING
    return node


def holds(condition):
    kind, _sep, rest = condition.partition(':')
    if kind == 'json':
        path, _sep, rest = rest.partition(':')
        dotted, _sep, expected = rest.partition('=')
        value = json_value(path, dotted)
        return value is MISSING if expected == '' else value == json.loads(expected)
    if kind == 'unit':
        name, _sep, state = rest.partition('=')
        out = subprocess.run(['systemctl', 'show', '-p', 'ActiveState', '--value', name],
                             stdout=subprocess.PIPE, universal_newlines=True, check=False).stdout.strip()
        return out in state.split('|')
    if kind == 'text':
        path, _sep, pattern = rest.partition('~')
        try:
            with open(path, encoding='utf-8') as handle:
                return re.search(pattern, handle.read(), re.M) is not None
        except OSError:
            return False
    raise SystemExit('unknown condition %r' % condition)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--fixture', default='/etc/fake-nvml/fixture.json')
    parser.add_argument('--set', action='append', default=[])
    parser.add_argument('--append', action='append', default=[])
    parser.add_argument('--run', action='append', default=[])
    parser.add_argument('--until', action='append', default=[])
    parser.add_argument('--hold', action='append', default=[])
    parser.add_argument('--timeout', type=float, default=30.0)
    args = parser.parse_args()
    start = time.monotonic()
    if args.set:
        set_fixture.main([args.fixture] + args.set)
    for item in args.append:
        path, _sep, line = item.partition('=')
        with open(path, 'a', encoding='utf-8') as handle:
            handle.write(line + '\n')
    for command in args.run:
        proc = subprocess.run(['/bin/sh', '-c', command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, check=False)
        if proc.returncode != 0:
            print(json.dumps({'seconds': 0, 'ok': False, 'failed': ['run: %s' % proc.stdout.strip()]}))
            return 1
    deadline = start + args.timeout
    while True:
        failed = [c for c in args.hold if not holds(c)]
        if failed:
            break
        failed = [c for c in args.until if not holds(c)]
        if args.until and not failed:
            break
        if time.monotonic() >= deadline:
            if not args.until:
                failed = []
            break
        time.sleep(0.05)
    ok = not failed
    print(json.dumps({'seconds': round(time.monotonic() - start, 2), 'ok': ok, 'failed': failed}))
    return 0 if ok else 1


if __name__ == '__main__':
    sys.exit(main())
