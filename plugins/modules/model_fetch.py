#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Fetch a model's weights from the Hugging Face Hub into the model store, pinned and verified
version_added: 0.4.0
author: homelab.llm_server maintainers (@homelab)
description:
  - With O(state=present), makes O(repo) at the commit O(revision) complete and verified under O(store_dir), in
    huggingface_hub's cache layout; the engines then run from RV(path) with C(HF_HUB_OFFLINE=1).
  - Trusts only a manifest written last (C(manifests/models--ORG--NAME/COMMIT.json) under O(store_dir)), which lists
    the repo, the revision and each file's size, sha256 and git blob sha1. With it, every file is checked locally
    (size, mtime and a blob named by its hash; with O(reverify) the content's hashes), and the Hub is not asked.
  - Without it, the Hub's tree listing is read, the free space under O(store_dir) is compared with the larger of
    O(planner_weight_bytes) and the listed sizes (less what the store already holds) before any download, and the
    snapshot is fetched with huggingface_hub's C(snapshot_download), which resumes a cut connection with a Range
    header within the run and skips the files a previous run completed. Each file's sha256 (LFS) or git sha1 (the
    others) is then compared with the listing; a file that fails is fetched again with C(force_download), and one
    that fails twice stops the run.
  - With O(state=progress), waits up to O(wait_s) for a running fetch of the same model (the model_store role
    runs it in the background under systemd-run) and returns how far it is, for a role that polls and prints it.
options:
  repo:
    description: The Hugging Face repo id, such as V(Qwen/Qwen3-8B).
    type: str
    required: true
  revision:
    description: The commit to fetch, its full 40-hex hash. A branch or tag is refused.
    type: str
    required: true
  store_dir:
    description: The model store (huggingface_hub's C(cache_dir)).
    type: path
    required: true
  endpoint:
    description: The Hub's URL (C(HF_ENDPOINT)); a mirror's, or a test stand-in's.
    type: str
    default: https://huggingface.co
  token_file:
    description:
      - A file holding the Hugging Face token (mode 0600), for gated or private repos. A missing or empty file
        sends no token. The token is never returned or logged.
    type: path
  planner_weight_bytes:
    description: The capacity planner's weight size of the model; the free-space check needs at least this much.
    type: int
    default: 0
  reserve_bytes:
    description: Space to leave free under O(store_dir) after the download.
    type: int
    default: 0
  reverify:
    description: Read every file's content again against the manifest's hashes, instead of sizes, names and mtimes.
    type: bool
    default: false
  max_workers:
    description: Files downloaded at once.
    type: int
    default: 8
  state:
    description:
      - V(present) fetches (or checks) the model. V(progress) only reports on a fetch of it that runs already.
    type: str
    choices: [present, progress]
    default: present
  wait_s:
    description: With O(state=progress), how long to wait for the fetch to end before reporting where it is.
    type: float
    default: 10
  result_file:
    description:
      - With O(state=progress), the file where the fetch running in the background writes its result (the model_store
        role runs C(_model_store.py) as a command under systemd-run); the wait ends as soon as it is there. Without
        it, the wait ends when the fetch reports done or failed.
    type: path
  unit:
    description: With O(result_file), the systemd unit that runs the fetch; when it is no longer active the wait ends.
    type: str
requirements:
  - huggingface_hub (2.4.0 is the version the collection installs into its virtual environment)
extends_documentation_fragment:
  - homelab.llm_server.attributes
  - homelab.llm_server.attributes.no_diff
notes:
  - In check mode the manifest is checked and, without one, the Hub's listing is read and the free space compared;
    nothing is written.
  - Running engines are not touched; a new model is fetched beside the one they serve.
"""

EXAMPLES = r"""
- name: Fetch the model
  homelab.llm_server.model_fetch:
    repo: Qwen/Qwen3-8B
    revision: b968826d9c46dd6066d109eabc6255188de91218
    store_dir: /srv/models
    token_file: /etc/llm-server/hf-token
    planner_weight_bytes: 16381470720

- name: Report how far a fetch running in the background is
  homelab.llm_server.model_fetch:
    repo: Qwen/Qwen3-8B
    revision: b968826d9c46dd6066d109eabc6255188de91218
    store_dir: /srv/models
    state: progress
    wait_s: 15
"""

RETURN = r"""
path:
  description: The snapshot directory to serve from.
  returned: always
  type: str
  sample: /srv/models/models--Qwen--Qwen3-8B/snapshots/b968826d9c46dd6066d109eabc6255188de91218
manifest:
  description: The manifest's path (present once the model is complete and verified).
  returned: always
  type: str
status:
  description: V(ready) (already complete), V(fetched), V(would_fetch) (check mode) or, for O(state=progress), the phase.
  returned: always
  type: str
files:
  description: Number of files of the model.
  returned: state=present
  type: int
bytes_total:
  description: Total size of the model's files.
  returned: state=present
  type: int
refetched:
  description: Files fetched again because the store's copy or the first download did not match the Hub's hashes.
  returned: state=present
  type: list
  elements: str
problems:
  description: What the local check found wrong, per file.
  returned: state=present
  type: dict
disk:
  description: The free-space check's figures (free, hub, planner, present, reserve and needed bytes).
  returned: when the Hub was asked
  type: dict
progress:
  description: With O(state=progress), the fetch's last record (bytes_done, bytes_total, files_done, files_total, phase).
  returned: state=progress
  type: dict
finished:
  description: With O(state=progress), whether the fetch has ended (its result file is there, or its unit stopped).
  returned: state=progress
  type: bool
result:
  description: With O(state=progress) and O(result_file), the fetch's result once it has ended (C(failed), C(msg), ...).
  returned: state=progress
  type: dict
msg:
  description: One line for the play output.
  returned: always
  type: str
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import huggingface_hub  # noqa: F401 pylint: disable=unused-import
except ImportError:
    HAS_HUB = False
    HUB_IMPORT_ERROR = traceback.format_exc()
else:
    HAS_HUB = True
    HUB_IMPORT_ERROR = None

from ansible_collections.homelab.llm_server.plugins.module_utils import _model_store


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo=dict(type='str', required=True),
            revision=dict(type='str', required=True),
            store_dir=dict(type='path', required=True),
            endpoint=dict(type='str', default='https://huggingface.co'),
            token_file=dict(type='path'),
            planner_weight_bytes=dict(type='int', default=0),
            reserve_bytes=dict(type='int', default=0),
            reverify=dict(type='bool', default=False),
            max_workers=dict(type='int', default=8),
            state=dict(type='str', choices=['present', 'progress'], default='present'),
            wait_s=dict(type='float', default=10),
            result_file=dict(type='path'),
            unit=dict(type='str'),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params['state'] == 'progress':
        path = _model_store.progress_path(params['store_dir'], params['repo'], params['revision'])
        record, result, finished = _model_store.wait_progress(path, params['wait_s'], params['result_file'],
                                                              params['unit'])
        module.exit_json(changed=False, progress=record or {}, status=(record or {}).get('phase', 'unknown'),
                         finished=finished, result=result,
                         path=_model_store.snapshot_dir(params['store_dir'], params['repo'], params['revision']),
                         manifest=_model_store.manifest_path(params['store_dir'], params['repo'], params['revision']),
                         msg=_model_store.progress_line(record))

    if not HAS_HUB:
        module.fail_json(msg=missing_required_lib('huggingface_hub'), exception=HUB_IMPORT_ERROR)
    try:
        result = _model_store.fetch(
            params['store_dir'], params['repo'], params['revision'], params['endpoint'].rstrip('/'),
            token=_model_store.read_token(params['token_file']), planner_bytes=params['planner_weight_bytes'],
            reserve_bytes=params['reserve_bytes'], reverify=params['reverify'], check_mode=module.check_mode,
            max_workers=params['max_workers'])
    except _model_store.ModelStoreError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
