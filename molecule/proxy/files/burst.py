# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Send N requests back to back, each on a new connection; print the statuses.

    burst.py URL KEY_FILE N [CA_FILE]

Prints {"statuses": [...], "seconds": S, "last_error": {...}} where last_error
is the status, headers and JSON body of the last non-200 answer.
"""

import json
import ssl
import sys
import time
import urllib.error
import urllib.request


def main():
    url, key_file, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    context = ssl.create_default_context(cafile=sys.argv[4]) if len(sys.argv) > 4 else None
    with open(key_file, encoding='utf-8') as handle:
        key = handle.read().strip()
    statuses, last_error = [], None
    started = time.monotonic()
    for _attempt in range(count):
        request = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + key})
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as answer:
                answer.read()
                statuses.append(answer.status)
        except urllib.error.HTTPError as error:
            statuses.append(error.code)
            last_error = {'status': error.code, 'headers': dict(error.headers),
                          'body': json.loads(error.read() or b'null')}
    print(json.dumps({'statuses': statuses, 'seconds': round(time.monotonic() - started, 3),
                      'last_error': last_error}))


if __name__ == '__main__':
    main()
