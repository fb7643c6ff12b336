# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fixtures of the llm-bench tests (test_loadbench*.py): the OpenAI-compatible test server.

  server   factory: start(*args) -> base URL of tests/doubles/openai_server/openai_test_server.py,
           a subprocess on a free port (--port 0), stopped at the end of the test
  control  control(url, **changes): the running server's POST /_control (delays, failures)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import pytest

TEST_SERVER = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..',
                                            'doubles', 'openai_server', 'openai_test_server.py'))


@pytest.fixture
def server(tmp_path):
    """start(*args) -> base URL of a test server subprocess (--port 0)."""
    procs = []

    def start(*args):
        log = open(tmp_path / ('server-%d.log' % len(procs)), 'w', encoding='utf-8')  # pylint: disable=consider-using-with
        proc = subprocess.Popen([sys.executable, TEST_SERVER, '--port', '0', *args], stdout=subprocess.PIPE,
                                stderr=log, text=True)
        procs.append((proc, log))
        line = proc.stdout.readline()
        assert line.startswith('listening on '), line
        return line.split()[-1]

    yield start
    for proc, log in procs:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def control():
    """control(url, **changes) -> the server's answer to POST /_control with changes."""
    def post(url, **changes):
        request = urllib.request.Request(url + '/_control', data=json.dumps(changes).encode(), method='POST',
                                         headers={'Content-Type': 'application/json'})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)
    return post
