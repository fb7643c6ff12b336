# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Wait for an alert's message at the Telegram stand-in (tests/doubles/telegram_bot_api/bot_api.py).

    telegram_wait.py RECORD --after-line N --alert NAME --state FIRING|RESOLVED --timeout S
    telegram_wait.py RECORD --count

Polls RECORD (one JSON line per sendMessage the stand-in answered) for a
message that Telegram accepted (ok), written after its first N lines, whose
text names NAME in the state given. Prints that message as JSON and exits
0; after the deadline prints what did arrive and exits 1. With --count it
prints how many messages RECORD holds now (0 before the first), for
--after-line.
"""

import argparse
import json
import sys
import time


def lines_of(record):
    try:
        with open(record, encoding='utf-8') as handle:
            return handle.read().splitlines()
    except FileNotFoundError:
        return []


def messages(record, after):
    return [json.loads(line) for line in lines_of(record)[after:] if line.strip()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('record')
    parser.add_argument('--after-line', type=int, default=0)
    parser.add_argument('--count', action='store_true')
    parser.add_argument('--alert')
    parser.add_argument('--state', choices=['FIRING', 'RESOLVED'])
    parser.add_argument('--timeout', type=float, default=120)
    args = parser.parse_args()
    if args.count:
        print(len(lines_of(args.record)))
        return 0
    if not args.alert or not args.state:
        parser.error('--alert and --state are required to wait')
    started = time.monotonic()
    deadline = started + args.timeout
    while True:
        arrived = messages(args.record, args.after_line)
        for message in arrived:
            # One message may carry several alerts: the state on the alert's own line.
            lines = (message.get('text') or '').splitlines()
            if message.get('ok') and any(args.state in line and args.alert in line for line in lines):
                print(json.dumps({'time': message.get('time'), 'text': message['text'],
                                  'waited_s': round(time.monotonic() - started, 1)}))
                return 0
        if time.monotonic() > deadline:
            print(json.dumps({'error': 'no %s message about %s within %g s' % (args.state, args.alert, args.timeout),
                              'arrived': [m.get('text') for m in arrived]}))
            return 1
        time.sleep(0.5)


if __name__ == '__main__':
    sys.exit(main())
