# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One way for every host program to log: 'program: message' on standard error.

Under systemd (standard error is the journal's stream, $JOURNAL_STREAM)
each line starts with its syslog priority, '<3>' for an error, which
journald reads as the entry's priority: ``journalctl -p warning -u UNIT``
then shows what went wrong and nothing else. At a shell the lines are
plain.
"""

from __future__ import annotations

import logging
import os
import sys

# logging's levels as syslog priorities (sd-daemon(3)).
_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))


def _priority(levelno):
    for level, priority in _PRIORITIES:
        if levelno >= level:
            return priority
    return 7


class JournalPrefix(logging.Formatter):
    """'<priority>program: message', a line per line of the message."""

    def format(self, record):
        prefix = '<%d>' % _priority(record.levelno)
        return '\n'.join(prefix + line for line in super().format(record).splitlines() or [''])


def to_journal(stream, environ=None):
    """Whether STREAM is the journal's stream that systemd named in $JOURNAL_STREAM ('device:inode')."""
    value = (os.environ if environ is None else environ).get('JOURNAL_STREAM', '')
    try:
        device, inode = (int(part) for part in value.split(':'))
        status = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (status.st_dev, status.st_ino) == (device, inode)


def setup(program, level=logging.INFO, stream=None, environ=None):
    """The logger of PROGRAM, writing to STREAM (standard error): call once, from main()."""
    stream = sys.stderr if stream is None else stream
    handler = logging.StreamHandler(stream)
    formatter = JournalPrefix if to_journal(stream, environ) else logging.Formatter
    handler.setFormatter(formatter('%(name)s: %(message)s'))
    logger = logging.getLogger(program)
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False
    return logger
