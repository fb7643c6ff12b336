# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/llm_server_host/log.py: plain lines at a shell, priorities for the journal."""

from __future__ import annotations

import os

from llm_server_host import log


def _read(path):
    with open(path) as handle:
        return handle.read()


def test_at_a_shell_the_lines_are_plain(tmp_path):
    path = tmp_path / 'stderr'
    with open(path, 'w') as stream:
        logger = log.setup('llm-test-plain', stream=stream, environ={})
        logger.info('watching')
        logger.error('metrics not written: %s', 'disk full')
    assert _read(path) == 'llm-test-plain: watching\nllm-test-plain: metrics not written: disk full\n'


def test_into_the_journal_each_line_carries_its_priority(tmp_path):
    path = tmp_path / 'stderr'
    with open(path, 'w') as stream:
        status = os.fstat(stream.fileno())
        environ = {'JOURNAL_STREAM': '%d:%d' % (status.st_dev, status.st_ino)}
        logger = log.setup('llm-test-journal', stream=stream, environ=environ)
        logger.debug('not shown at INFO')
        logger.info('watching')
        logger.warning('NVML: GPU 0 did not answer')
        logger.error('two\nlines')
        logger.critical('gone')
    assert _read(path).splitlines() == [
        '<6>llm-test-journal: watching',
        '<4>llm-test-journal: NVML: GPU 0 did not answer',
        '<3>llm-test-journal: two',
        '<3>lines',
        '<2>llm-test-journal: gone',
    ]


def test_another_stream_than_the_journals_stays_plain(tmp_path):
    # A command run from a unit with its output piped elsewhere inherits
    # $JOURNAL_STREAM; only the stream systemd named gets the prefixes.
    other = tmp_path / 'other'
    other.write_text('')
    status = os.stat(other)
    with open(tmp_path / 'stderr', 'w') as stream:
        assert not log.to_journal(stream, {'JOURNAL_STREAM': '%d:%d' % (status.st_dev, status.st_ino)})
        assert not log.to_journal(stream, {'JOURNAL_STREAM': 'nonsense'})


def test_setting_up_twice_keeps_one_handler(tmp_path):
    with open(tmp_path / 'stderr', 'w') as stream:
        log.setup('llm-test-twice', stream=stream, environ={})
        logger = log.setup('llm-test-twice', stream=stream, environ={})
        logger.info('once')
    assert _read(tmp_path / 'stderr') == 'llm-test-twice: once\n'
