# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/llm_server_host/systemd.py: sd_notify's datagrams, read by a real socket as systemd reads them."""

from __future__ import annotations

import socket
import uuid

from llm_server_host import systemd


def _listener(address):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(5)
    return sock


def test_the_fields_arrive_in_one_datagram_a_line_each(tmp_path):
    path = str(tmp_path / 'notify')
    with _listener(path) as sock:
        assert systemd.notify('READY=1', 'STATUS=round 1\nsecond line', environ={'NOTIFY_SOCKET': path})
        assert sock.recv(4096) == b'READY=1\nSTATUS=round 1 second line'


def test_an_abstract_socket_is_reached_by_its_at_sign_name():
    name = 'llm-server-test-%s' % uuid.uuid4().hex
    with _listener('\0' + name) as sock:
        assert systemd.notify('WATCHDOG=1', environ={'NOTIFY_SOCKET': '@' + name})
        assert sock.recv(4096) == b'WATCHDOG=1'


def test_outside_systemd_nothing_is_sent_and_nothing_fails(tmp_path):
    assert systemd.notify('READY=1', environ={}) is False
    # systemd gone (its socket removed): the daemon goes on.
    assert systemd.notify('READY=1', environ={'NOTIFY_SOCKET': str(tmp_path / 'gone')}) is False
