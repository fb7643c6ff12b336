#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: docker_daemon_config
short_description: Merge settings into Docker's daemon.json without clobbering the user's
version_added: 0.4.0
author: homelab.llm_server maintainers (@homelab)
description:
  - Reads the existing Docker daemon configuration file (if any), deep-merges O(settings) into it and writes
    the result back only when it differs from what the file says.
  - Objects merge key by key, so keys the user set and this module is not given stay as they are; any
    other value (string, number, list) given in O(settings) replaces the one in the file.
  - The file is written as two-space indented JSON with sorted keys, so the same settings always give the
    same file. A file that already holds the wanted settings is left untouched, whatever its formatting.
  - Fails without changing anything when the existing file is not a JSON object, or when O(settings) holds
    values dockerd would refuse at start-up (non-string C(log-opts) values, a C(runtimes) entry without
    a path, C(hosts), which conflicts with C(-H fd://) in C(docker.service)).
  - The module does not restart dockerd; notify a handler when it reports a change.
options:
  path:
    description: The daemon configuration file. Its directory is created (mode C(0755)) when missing.
    type: path
    default: /etc/docker/daemon.json
  settings:
    description:
      - "daemon.json keys to merge into the file, for example
        C({runtimes: {nvidia: {path: /usr/bin/nvidia-container-runtime, runtimeArgs: []}}})."
    type: dict
    required: true
  unset:
    description:
      - "Top-level keys to remove when the file holds exactly the given value, for example
        C({default-runtime: nvidia}) to take back a default runtime set earlier while leaving a
        different one the user chose."
      - Applied after the merge.
    type: dict
    default: {}
extends_documentation_fragment:
  - homelab.llm_server.attributes
  - homelab.llm_server.attributes.diff
notes:
  - A new file is created with mode C(0644); an existing file keeps its owner and mode.
"""

EXAMPLES = r"""
- name: Register the NVIDIA runtime and rotate container logs
  homelab.llm_server.docker_daemon_config:
    settings:
      runtimes:
        nvidia:
          path: /usr/bin/nvidia-container-runtime
          runtimeArgs: []
      log-driver: json-file
      log-opts:
        max-size: 50m
        max-file: "5"
    unset:
      default-runtime: nvidia
  notify: Restart docker

- name: Only validate the existing file and the settings
  homelab.llm_server.docker_daemon_config:
    settings:
      storage-driver: vfs
  check_mode: true
"""

RETURN = r"""
path:
  description: The daemon configuration file.
  returned: always
  type: str
  sample: /etc/docker/daemon.json
config:
  description: The configuration after the merge (what the file holds, or would hold in check mode).
  returned: success
  type: dict
  sample: {"debug": true, "log-driver": "json-file", "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime", "runtimeArgs": []}}}
changed_keys:
  description: Dotted paths of the keys added, changed or removed by the merge.
  returned: success
  type: list
  elements: str
  sample: [log-driver, runtimes.nvidia]
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native

from ansible_collections.homelab.llm_server.plugins.module_utils._docker_daemon import DaemonConfigError, plan


def _read(path):
    try:
        with open(path, 'rb') as handle:
            return handle.read().decode('utf-8')
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise DaemonConfigError('%s is not UTF-8 text (%s): fix the file or move it away' % (path, exc))


def _write(module, path, text):
    directory = os.path.dirname(path) or '.'
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    new_file = not os.path.exists(path)
    fd, tmp = tempfile.mkstemp(prefix='.daemon.json.', dir=directory)
    with os.fdopen(fd, 'wb') as handle:
        handle.write(to_bytes(text))
    module.atomic_move(tmp, path)
    if new_file:
        module.set_mode_if_different(path, '0644', False)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', default='/etc/docker/daemon.json'),
            settings=dict(type='dict', required=True),
            unset=dict(type='dict', default={}),
        ),
        supports_check_mode=True,
    )
    path = module.params['path']
    try:
        result = plan(_read(path), module.params['settings'], path, unset=module.params['unset'])
    except (DaemonConfigError, OSError) as exc:
        module.fail_json(msg=to_native(exc), path=path)

    if result['changed'] and not module.check_mode:
        try:
            _write(module, path, result['after'])
        except OSError as exc:
            module.fail_json(msg='cannot write %s: %s' % (path, to_native(exc)), path=path)

    output = dict(changed=result['changed'], path=path, config=result['config'],
                  changed_keys=result['changed_keys'])
    if module._diff and result['changed']:
        output['diff'] = dict(before=result['before'], after=result['after'],
                              before_header=path, after_header=path)
    module.exit_json(**output)


if __name__ == '__main__':
    main()
