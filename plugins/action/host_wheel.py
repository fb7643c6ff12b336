# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin for homelab.llm_server.host_wheel: the host programs' wheel, built on the controller."""

from __future__ import annotations

import hashlib
import os

from ansible.plugins.action import ActionBase

from ansible_collections.homelab.llm_server.plugins.plugin_utils import _host_wheel

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_DEST = '~/.cache/homelab.llm_server/host-wheel'


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(('dest',))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        dest = os.path.expanduser(self._task.args.get('dest') or DEFAULT_DEST)
        try:
            version = _host_wheel.collection_version(COLLECTION_ROOT)
            file_name, data, scripts = _host_wheel.build(os.path.join(COLLECTION_ROOT, 'host'), version)
            # A folder per content: two checkouts of one version (a release
            # and a change to it) never overwrite each other's wheel while
            # a play is about to copy it.
            digest = hashlib.sha256(data).hexdigest()[:16]
            path, written = _host_wheel.write(os.path.join(dest, digest), file_name, data)
        except (_host_wheel.HostWheelError, OSError) as e:
            result.update(failed=True, msg='Could not build the host programs\' wheel: %s' % e)
            return result
        # The controller's cache only: the copy that follows says whether the host changed.
        result.update(changed=False, path=path, file_name=file_name, version=version, scripts=scripts, sha256=digest,
                      written=written)
        return result
