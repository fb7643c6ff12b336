#!/usr/bin/env bash
# Run ansible-test sanity on a copy of the collection laid out where
# ansible-test expects it (.../ansible_collections/homelab/llm_server).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/build/sanity/ansible_collections/homelab/llm_server"
mkdir -p "$dest"
rsync -a --delete --exclude-from=<(printf '%s\n' .venv .cache .collections build reports tests/output .git __pycache__ .pytest_cache) "$root/" "$dest/"
cd "$dest"
# ansible-test's own tool pins (pylint, yamllint, voluptuous...) go into a
# separate virtual environment so the project's pins stay as they are.
ansible-test sanity --venv --requirements --python "$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" \
  --color no "$@"
