# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Kill a unit with SIGKILL once the load run has logged COUNT completions.

    kill_at.py LOG FIRST_LINE COUNT UNIT [TIMEOUT_S]

Counts the /v1/chat/completions lines of the access log from FIRST_LINE
(1-based) on, as failover_report.py reads them: the blackbox probe of
/healthz writes to the same log. Polls every 5 ms and, once there are
COUNT, runs `systemctl kill --signal=SIGKILL UNIT`. Prints the epoch time
of the kill (the clock nginx's $msec uses), or exits 1 on timeout.
"""

import subprocess
import sys
import time

COMPLETION = b'"uri":"/v1/chat/completions"'


def count_completions(path, first_line):
    with open(path, 'rb') as handle:
        return sum(1 for number, line in enumerate(handle, 1) if number >= first_line and COMPLETION in line)


def main():
    log, first_line, target, unit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    deadline = time.monotonic() + (float(sys.argv[5]) if len(sys.argv) > 5 else 120.0)
    while count_completions(log, first_line) < target:
        if time.monotonic() > deadline:
            print('the log did not reach %d completions in time' % target, file=sys.stderr)
            return 1
        time.sleep(0.005)
    killed_at = time.time()
    subprocess.run(['systemctl', 'kill', '--signal=SIGKILL', unit], check=True)
    print('%.6f' % killed_at)
    return 0


if __name__ == '__main__':
    sys.exit(main())
