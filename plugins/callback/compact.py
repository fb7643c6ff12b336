# Copyright (c) homelab.llm_server contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: compact
type: stdout
short_description: One line per play and role on screen, the full task log in a file
description:
  - Prints a line when a play starts and one when a role (or a play's own
    tasks) is done, with the elapsed time, how many tasks ran so far and how
    many changed. Failures and unreachable hosts are printed in full, as the
    default callback prints them, and so is the recap.
  - Everything the default callback would print goes to O(log_file), so the
    detail of a long run is one C(less) away.
  - Enable with C(ANSIBLE_STDOUT_CALLBACK=homelab.llm_server.compact) or
    C(stdout_callback = homelab.llm_server.compact) in C(ansible.cfg).
version_added: 0.4.0
author:
  - homelab.llm_server maintainers (@homelab)
extends_documentation_fragment:
  - default_callback
  - result_format_callback
options:
  log_file:
    description: File that receives the full task log (created, parent directories too; truncated at each run).
    type: path
    default: ~/.ansible/homelab.llm_server-last-run.log
    env:
      - name: LLM_SERVER_FULL_LOG
    ini:
      - section: callback_compact
        key: log_file
requirements:
  - set as stdout callback in configuration
"""

import os
import re
import time

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class _FileDisplay:
    """Stands in for the default callback's Display: its output goes to a file.

    With echo on, it also reaches the screen (used for failures and the recap).
    Everything else (warnings, verbosity, columns) is the real Display's.
    """

    def __init__(self, real, path):
        self._real = real
        self._file = open(path, "w", encoding="utf-8")  # pylint: disable=consider-using-with
        self.echo = False

    def display(self, msg, color=None, stderr=False, screen_only=False, log_only=False, newline=True, **kwargs):
        if not screen_only:
            self._file.write(_ANSI.sub("", msg) + ("\n" if newline else ""))
            self._file.flush()
        if self.echo and not log_only:
            self._real.display(msg, color=color, stderr=stderr, screen_only=screen_only, newline=newline)

    def banner(self, msg, color=None, cows=True):
        self.display("\n%s %s" % (msg.strip(), "*" * max(3, 78 - len(msg.strip()))), color=color)

    def _error(self, exception, *args, **kwargs):
        # A failed task's exception: on screen only with its failure (an
        # ignored error stays in the file).
        if self.echo:
            self._real._error(exception, *args, **kwargs)
        else:
            self.display("[ERROR]: %s" % getattr(getattr(exception, "event", None), "msg", exception))

    def close(self):
        self._file.close()

    def __getattr__(self, name):
        return getattr(self._real, name)


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "homelab.llm_server.compact"

    def __init__(self):
        super().__init__()
        self._screen = self._display
        self._started = time.monotonic()
        self._tasks_done = 0
        self._group = None
        self._group_tasks = 0
        self._group_changed = 0
        self._group_failed = 0
        self._group_started = self._started
        self._log_path = None

    def set_options(self, task_keys=None, var_options=None, direct=None):
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        path = os.path.abspath(os.path.expanduser(self.get_option("log_file")))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._log_path = path
        self._display = _FileDisplay(self._screen, path)

    # Screen lines -----------------------------------------------------------

    def _say(self, text, color=None):
        elapsed = int(time.monotonic() - self._started)
        self._screen.display("[%2d:%02d] %s" % (elapsed // 60, elapsed % 60, text), color=color)

    def _close_group(self):
        if self._group is None:
            return
        color = C.COLOR_ERROR if self._group_failed else (C.COLOR_CHANGED if self._group_changed else C.COLOR_OK)
        self._say(
            "  %-40s %3d tasks %3d changed%s  %5.1f s   (%d tasks so far)" % (
                self._group, self._group_tasks, self._group_changed,
                "  %d FAILED" % self._group_failed if self._group_failed else "",
                time.monotonic() - self._group_started, self._tasks_done),
            color=color)
        self._group = None

    def _enter_task(self, task):
        role = task._role.get_name() if task._role else "tasks of the play"
        if role != self._group:
            self._close_group()
            self._group = role
            self._group_tasks = self._group_changed = self._group_failed = 0
            self._group_started = time.monotonic()
        self._group_tasks += 1
        self._tasks_done += 1

    def _echoed(self, method, *args, **kwargs):
        self._display.echo = True
        try:
            method(*args, **kwargs)
        finally:
            self._display.echo = False

    # Events -----------------------------------------------------------------

    def v2_playbook_on_play_start(self, play):
        self._close_group()
        super().v2_playbook_on_play_start(play)
        name = play.get_name().strip() or ",".join(play.hosts)
        self._say("PLAY %s" % name, color=C.COLOR_HIGHLIGHT)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._enter_task(task)
        super().v2_playbook_on_task_start(task, is_conditional)

    def v2_playbook_on_handler_task_start(self, task):
        self._enter_task(task)
        super().v2_playbook_on_handler_task_start(task)

    def v2_runner_on_ok(self, result):
        if result.result.get("changed", False):
            self._group_changed += 1
        super().v2_runner_on_ok(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if ignore_errors:
            super().v2_runner_on_failed(result, ignore_errors=ignore_errors)
            return
        self._group_failed += 1
        self._close_group_before_detail(result)
        self._echoed(super().v2_runner_on_failed, result, ignore_errors=ignore_errors)

    def v2_runner_on_unreachable(self, result):
        self._group_failed += 1
        self._close_group_before_detail(result)
        self._echoed(super().v2_runner_on_unreachable, result)

    def _close_group_before_detail(self, result):
        # The task name heads the failure, as in the default output.
        self._screen.display("  task: %s" % result.task.get_name(), color=C.COLOR_ERROR)

    def v2_playbook_on_stats(self, stats):
        self._close_group()
        self._echoed(super().v2_playbook_on_stats, stats)
        self._screen.display("Full log: %s" % self._log_path)
        self._display.close()
