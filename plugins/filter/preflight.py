# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters for the results of homelab.llm_server.preflight_checks."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.homelab.llm_server.plugins.module_utils._preflight import (
    STATUSES,
    report_lines,
)


def preflight_report_lines(checks, statuses=None, with_fix=True):
    """Render preflight check results to text lines.

    ``checks`` is the ``checks`` list of preflight_checks or its whole
    registered result. ``statuses`` limits the output to these statuses.
    """
    if isinstance(checks, dict):
        checks = checks.get('checks', [])
    if not isinstance(checks, (list, tuple)):
        raise AnsibleFilterError('preflight_report_lines expects a list of checks or a preflight_checks result')
    if isinstance(statuses, str):
        statuses = [statuses]
    if statuses is not None:
        unknown = [status for status in statuses if status not in STATUSES]
        if unknown:
            raise AnsibleFilterError('preflight_report_lines: unknown status(es) %s; valid: %s'
                                     % (', '.join(map(str, unknown)), ', '.join(STATUSES)))
    for check in checks:
        if not isinstance(check, dict):
            raise AnsibleFilterError('preflight_report_lines: every check must be a dict, got %r' % (check,))
    return report_lines(checks, statuses=statuses, with_fix=with_fix)


class FilterModule(object):
    """Preflight filters."""

    def filters(self):
        return {
            'preflight_report_lines': preflight_report_lines,
        }
