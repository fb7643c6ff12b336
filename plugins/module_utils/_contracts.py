# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the files the roles and the host programs share live: one default each.

Private to this collection. The roles reach these through the
homelab.llm_server.llm_server_dir lookup; docs/architecture.md describes each
contract (who writes, who reads, the format).

- registry: one JSON file per engine the serving role started (written by
  serving; read by nginx, gpu_watchdog, ups). Without its own variable it
  follows serving_config_dir, as it always has.
- scrape: Prometheus file_sd targets, one folder per job (written by serving,
  nginx, gpu_exporter; read by monitoring).
- metrics: node exporter's textfile collector (written by the host programs;
  read by monitoring's node exporter).
- hold: one JSON file per holder of engines (the UPS, the GPU watchdog, the
  owner's llm-server command) that nobody else may start; read by every engine
  unit's condition, those three and the serving role (_holds.py says the
  format). Without its own variable it follows serving_state_dir.
"""

from __future__ import annotations

DIRS = {
    'registry': '/etc/llm-server/instances',
    'scrape': '/etc/llm-server/scrape',
    'metrics': '/var/lib/prometheus/node-exporter',
    'hold': '/var/lib/llm-server/holds',
}
# The variable an owner sets to move each one.
VARIABLES = {name: 'llm_server_%s_dir' % name for name in DIRS}
# Those that, without their own variable, follow a directory of the serving role.
FOLLOWS = {'registry': ('serving_config_dir', 'instances'), 'hold': ('serving_state_dir', 'holds')}


def directory(name, value_of):
    """The directory of contract `name`; value_of(variable) -> the inventory's value or None."""
    if name not in DIRS:
        raise ValueError('unknown shared directory %r: one of %s' % (name, ', '.join(sorted(DIRS))))
    chosen = value_of(VARIABLES[name])
    if chosen in (None, ''):
        if name in FOLLOWS:
            parent = value_of(FOLLOWS[name][0])
            if parent not in (None, ''):
                return str(parent).rstrip('/') + '/' + FOLLOWS[name][1]
        return DIRS[name]
    chosen = str(chosen)
    if not chosen.startswith('/'):
        raise ValueError('%s must be an absolute path, not %r' % (VARIABLES[name], chosen))
    return chosen.rstrip('/') or '/'
