# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A FUSE file system whose one file never answers a read: a call stuck in the kernel.

    python stuck_fs.py MOUNTPOINT

Stands in for a GPU driver that holds a call: a process that reads
MOUNTPOINT/stuck waits in the kernel for the daemon's answer, which never
comes. Once the read has reached the daemon, that wait is uninterruptible
(state D) and SIGKILL does not end it (fs/fuse/dev.c, request_wait_answer).
It ends when the connection goes away: the daemon exits (its /dev/fuse is
closed) or /sys/fs/fuse/connections/N/abort is written. Needs libfuse2
(fusepy loads it) and /dev/fuse; runs in the foreground until killed.
"""

from __future__ import annotations

import errno
import stat
import sys
import threading
import time

from fuse import FUSE, FuseOSError, Operations  # fusepy

CONTENT_SIZE = 4096


class StuckFS(Operations):
    def __init__(self):
        self.never = threading.Event()
        self.reads = 0

    def getattr(self, path, fh=None):
        now = time.time()
        if path == '/':
            return {'st_mode': stat.S_IFDIR | 0o755, 'st_nlink': 2, 'st_ctime': now, 'st_mtime': now, 'st_atime': now}
        if path == '/stuck':
            return {'st_mode': stat.S_IFREG | 0o444, 'st_nlink': 1, 'st_size': CONTENT_SIZE,
                    'st_ctime': now, 'st_mtime': now, 'st_atime': now}
        raise FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        return ['.', '..', 'stuck']

    def open(self, path, flags):
        return 0

    def read(self, path, size, offset, fh):
        self.reads += 1
        self.never.wait()  # the answer that never comes
        return b''


def main(argv):
    if len(argv) != 2:
        sys.stderr.write('usage: stuck_fs.py MOUNTPOINT\n')
        return 2
    # direct_io: every read goes to the daemon, none is served from the page cache.
    FUSE(StuckFS(), argv[1], foreground=True, nothreads=False, direct_io=True)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
