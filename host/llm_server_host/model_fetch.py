# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-model-fetch: fetch one model into the model store, pinned to its revision, checked file by file.

The code is the model_fetch module's (plugins/module_utils/_model_store.py,
with huggingface_hub from the venv); the model_store role runs it as a
transient systemd unit so that a long download goes on without the
controller's connection, and the module reports on it meanwhile.
"""

from __future__ import annotations

import sys

from llm_server_host.collection._model_store import main

if __name__ == '__main__':
    sys.exit(main())
