# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where an owner's run spends its time, for the first_day scenario's report: the
test harness enables this callback on the owner's runs (tests/first_day/owner.py),
the collection does not ship it. Each task's time is from its start to the next
task's start, all hosts together; it is written as JSON to $RUN_TIMINGS_FILE:
{"playbook": its file, "seconds": total, "roles": {role: seconds}, "tasks": [[seconds, role, task], ...]}
(roles slowest first, the 25 slowest tasks)."""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: run_timings
type: aggregate
short_description: Time per role and per task of a run, as JSON (a test harness callback)
description:
  - Writes the seconds spent per role and the slowest tasks to the file named by E(RUN_TIMINGS_FILE).
requirements:
  - enabled in callbacks_enabled
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'run_timings'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._began = time.monotonic()
        self._current: tuple[str, str, float] | None = None
        self._tasks: list[tuple[float, str, str]] = []
        self._playbook: str | None = None

    def _close(self) -> None:
        if self._current is not None:
            role, name, started = self._current
            self._tasks.append((time.monotonic() - started, role, name))
            self._current = None

    def _start(self, task) -> None:
        self._close()
        role = task._role.get_name() if task._role is not None else '(playbook)'
        self._current = (role, task.get_name(), time.monotonic())

    def v2_playbook_on_start(self, playbook):
        # Where the playbook was loaded from: this checkout or an installed copy.
        self._playbook = os.path.abspath(playbook._file_name)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task)

    def v2_playbook_on_play_start(self, play):
        self._close()

    def v2_playbook_on_stats(self, stats):
        self._close()
        path = os.environ.get('RUN_TIMINGS_FILE')
        if not path:
            return
        roles: dict[str, float] = {}
        for seconds, role, _name in self._tasks:
            roles[role] = roles.get(role, 0.0) + seconds
        slowest = sorted(self._tasks, reverse=True)[:25]
        with open(path, 'w', encoding='utf-8') as handle:
            json.dump({'playbook': self._playbook, 'seconds': round(time.monotonic() - self._began, 1),
                       'tasks_run': len(self._tasks),
                       'roles': {k: round(v, 1) for k, v in sorted(roles.items(), key=lambda kv: -kv[1])},
                       'tasks': [[round(s, 1), r, n] for s, r, n in slowest]}, handle, indent=1)
