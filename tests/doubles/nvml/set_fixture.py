# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Change values of an NVML double fixture in place, atomically, while programs read it.

    set_fixture.py FIXTURE KEY=VALUE [KEY=VALUE ...]

KEY is a dotted path (list items by their index): devices.0.temperature.gpu,
devices.1.hang_ms.*, devices.0.errors.nvmlDeviceGetPowerUsage. VALUE is JSON
(96, "NVML_ERROR_GPU_IS_LOST", {"*": 30000}) or, when it is not JSON, text;
a missing VALUE (KEY= with nothing after it) removes the key. The file is
written next to itself and renamed over, so a reader sees the old text or
the new one, never half of it; with "live": true in the fixture the double
answers from the new text at its next call.
"""

import json
import os
import sys
import tempfile


def set_path(document, path, value, remove):
    keys = path.split('.')
    node = document
    for key in keys[:-1]:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    last = keys[-1]
    if isinstance(node, list):
        if remove:
            del node[int(last)]
        else:
            node[int(last)] = value
    elif remove:
        node.pop(last, None)
    else:
        node[last] = value


def main(argv):
    if len(argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    fixture = argv[0]
    with open(fixture, encoding='utf-8') as handle:
        document = json.load(handle)
    for assignment in argv[1:]:
        path, _sep, text = assignment.partition('=')
        try:
            value = json.loads(text) if text else None
        except ValueError:
            value = text
        set_path(document, path, value, remove=text == '')
    directory = os.path.dirname(os.path.abspath(fixture))
    fd, tmp = tempfile.mkstemp(prefix='.fixture.', dir=directory)
    with os.fdopen(fd, 'w', encoding='utf-8') as handle:
        json.dump(document, handle, indent=1)
        handle.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, fixture)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
