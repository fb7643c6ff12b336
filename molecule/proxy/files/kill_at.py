# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kill a unit with SIGKILL once the access log has LINES lines.

    kill_at.py LOG LINES UNIT [TIMEOUT_S]

Polls the log every 5 ms and, once it has LINES lines, runs
`systemctl kill --signal=SIGKILL UNIT`. Prints the epoch time of the kill
(the clock nginx's $msec uses), or exits 1 on timeout.
"""

import subprocess
import sys
import time


def count_lines(path):
    with open(path, 'rb') as handle:
        return handle.read().count(b'\n')


def main():
    log, target, unit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    deadline = time.monotonic() + (float(sys.argv[4]) if len(sys.argv) > 4 else 120.0)
    while count_lines(log) < target:
        if time.monotonic() > deadline:
            print('the log did not reach %d lines in time' % target, file=sys.stderr)
            return 1
        time.sleep(0.005)
    killed_at = time.time()
    subprocess.run(['systemctl', 'kill', '--signal=SIGKILL', unit], check=True)
    print('%.6f' % killed_at)
    return 0


if __name__ == '__main__':
    sys.exit(main())
