# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files the host programs read (their settings) and replace whole (state, settings, hold files, metrics textfiles)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile


def read_settings(path, error=ValueError):
    """The JSON object in PATH: a program's settings, as its role wrote them.

    Anything else raises ERROR (an exception class) with one of 'cannot read
    PATH: why', 'PATH is not JSON: why' or 'PATH must hold a JSON object'.
    """
    try:
        with open(path, encoding='utf-8') as handle:
            data = json.load(handle)
    except OSError as exc:
        raise error('cannot read %s: %s' % (path, exc.strerror or exc)) from None
    except ValueError as exc:
        raise error('%s is not JSON: %s' % (path, exc)) from None
    if not isinstance(data, dict):
        raise error('%s must hold a JSON object' % path)
    return data


def write_atomically(path, text, mode=0o644):
    """Replace PATH with TEXT: nobody ever reads half of it.

    The text goes to a temporary file beside PATH (a dot file ending in
    .tmp, so node exporter's textfile collector, which reads *.prom, never
    takes it), synced, given MODE, then renamed over PATH.
    """
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(path), suffix='.tmp')
    try:
        with os.fdopen(handle, 'w', encoding='utf-8') as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
            os.fchmod(stream.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
