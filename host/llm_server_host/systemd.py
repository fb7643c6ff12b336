# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The service manager's notification protocol (sd_notify(3)) for the daemons.

A unit with ``Type=notify`` is active only once its daemon says READY=1, so
``systemctl start`` and the roles' waits mean "serving", not "forked". With
``WatchdogSec=`` systemd kills and restarts a daemon whose pings stop: the
backstop for a loop that hangs in spite of its deadlines.

One datagram to $NOTIFY_SOCKET is the whole protocol, so this needs no
library (the VPS's venv has no index to install one from). Outside systemd
(a test, the owner at a shell) every call is a no-op.
"""

from __future__ import annotations

import os
import socket


def notify(*fields, environ=None):
    """Send FIELDS ('READY=1', 'WATCHDOG=1', 'STATUS=...') to systemd; False when nobody listens."""
    address = (os.environ if environ is None else environ).get('NOTIFY_SOCKET', '')
    if not address or not fields:
        return False
    if address.startswith('@'):  # an abstract socket
        address = '\0' + address[1:]
    message = '\n'.join(field.replace('\n', ' ') for field in fields).encode('utf-8')
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(message)
    except OSError:
        return False
    return True
