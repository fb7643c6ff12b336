# Copyright: homelab.llm_server maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llm-bench: the collection's load benchmark for OpenAI-compatible servers.

The code is the llm_benchmark module's (plugins/module_utils/_loadbench.py
and the _loadbench_client, _loadbench_stats and _loadbench_report it imports,
standard library only), so the gate and a person measure the same way.
"""

from __future__ import annotations

import sys

from llm_server_host.collection._loadbench import main

if __name__ == '__main__':
    sys.exit(main())
