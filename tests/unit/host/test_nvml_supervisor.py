# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""host/llm_server_host/nvml_supervisor.py in process: a worker that cannot start.

The deadline, the quarantine, probes and stuck workers against the NVML
double are tested through the programs (test_gpu_exporter.py,
test_gpu_watchdog.py).
"""

from __future__ import annotations

import sys
import time

from llm_server_host import nvml_supervisor as _nvml_supervisor


def test_supervisor_reports_a_worker_that_cannot_start(tmp_path):
    """A worker command that fails at once: scrape_success 0 with its words, no exception, no wait."""
    script = tmp_path / 'worker.py'
    script.write_text('import sys\nsys.stdout.write(\'{"type": "fatal", "error": "no NVML here"}\\n\')\n')
    supervisor = _nvml_supervisor.Supervisor([sys.executable, str(script)], timeout=2, respawn_interval=60)
    try:
        supervisor.start()
        start = time.monotonic()
        first = supervisor.scrape()
        second = supervisor.scrape()
        assert time.monotonic() - start < 2
    finally:
        supervisor.close()
    assert not first['success'] and first['error'] == 'no NVML here'
    assert not second['success'] and second['error'] == 'no NVML here'
    assert second['restarts'] == 0, 'a worker that failed is not restarted within respawn_interval'
