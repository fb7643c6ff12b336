# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read node exporter textfile-collector files on a test host, for verify (python3 only, no packages).

usage: read-prom-files.py [--secret FILE] FILE.prom...
Prints JSON: now (this host's clock), secret_found (whether the content of
--secret, e.g. the tunnel's private key, is in any file; never printed), and
per file its text, mode, owner, mtime and samples [{name, labels, peer,
value}]. A line that is neither a comment nor a sample stops it (exit 1).
"""

import json
import os
import re
import sys
import time

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def main(argv):
    secret = None
    if argv[:1] == ['--secret']:
        with open(argv[1]) as stream:
            secret = stream.read().strip()
        argv = argv[2:]
    out = {'now': time.time(), 'secret_found': False, 'files': {}}
    for path in argv:
        if not os.path.exists(path):
            out['files'][path] = None
            continue
        with open(path) as stream:
            text = stream.read()
        info = os.stat(path)
        samples = []
        for line in text.splitlines():
            if line.startswith('#') or not line.strip():
                continue
            match = SAMPLE.match(line)
            if not match:
                print('%s: not a sample line: %r' % (path, line), file=sys.stderr)
                return 1
            labels = dict(LABEL.findall(match.group(2) or ''))
            samples.append({'name': match.group(1), 'labels': labels, 'peer': labels.get('peer', ''),
                            'value': float(match.group(3))})
        out['secret_found'] = out['secret_found'] or bool(secret and secret in text)
        out['files'][path] = {'text': text, 'mode': '%04o' % (info.st_mode & 0o7777), 'owner': info.st_uid,
                              'mtime': info.st_mtime, 'samples': samples}
    print(json.dumps(out))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
