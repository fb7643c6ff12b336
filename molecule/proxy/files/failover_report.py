# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read the proxy's JSON access log around a kill of the active engine.

    failover_report.py LOG FIRST_LINE KILL_EPOCH ACTIVE_ADDR STANDBY_ADDR

Looks at the log lines from FIRST_LINE (1-based) on, the requests of the load
run, and prints JSON: how many there were, how many were not answered 200,
how many nginx retried on the standby after the active engine failed them,
how many each engine finished after the kill, and the milliseconds from the
kill to the first answer the standby finished (nginx's $msec).
"""

import json
import sys


def final_upstream(entry):
    """The engine that gave the answer: the last of "addr1, addr2"."""
    return entry['upstream_addr'].split(',')[-1].strip()


def main():
    log, first_line, killed_at, active, standby = sys.argv[1:6]
    killed_at = float(killed_at)
    with open(log, encoding='utf-8') as handle:
        entries = [json.loads(line) for line in handle.read().splitlines()[int(first_line) - 1:] if line]
    entries = [entry for entry in entries if entry['uri'] == '/v1/chat/completions']
    after = [entry for entry in entries if entry['msec'] >= killed_at]
    standby_after = [entry for entry in after if final_upstream(entry) == standby]
    first_standby = min((entry['msec'] for entry in standby_after), default=None)
    print(json.dumps({
        'requests': len(entries),
        'not_200': len([entry for entry in entries if entry['status'] != 200]),
        'before_kill': len(entries) - len(after),
        'after_kill': len(after),
        'retried_on_standby': len([entry for entry in entries
                                   if ',' in entry['upstream_addr'] and final_upstream(entry) == standby]),
        'served_by_active_after_kill': len([entry for entry in after if final_upstream(entry) == active]),
        'served_by_standby_after_kill': len(standby_after),
        'ms_kill_to_first_standby_answer': (round((first_standby - killed_at) * 1000, 1)
                                            if first_standby is not None else None),
        'upstream_statuses': sorted({entry['upstream_status'] for entry in entries}),
    }))


if __name__ == '__main__':
    main()
