#!/usr/bin/env bash
# ansible-test sanity on a copy of the collection laid out where ansible-test
# expects it (.../ansible_collections/homelab/llm_server).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# ansible-test bootstraps pip in each of its virtual environments with a
# script downloaded from a host outside the package registries. Stand in for
# it with the interpreter's own ensurepip followed by a pip install from the
# package index, in a private HOME so the user's ~/.ansible is left alone.
export HOME="$root/build/ansible-test-home"
reqs_py=$(python3 -c 'import ansible_test, os; print(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py"))')
pip_version=$(sed -n "s/^ *pip='\([0-9.]*\)',.*/\1/p" "$reqs_py" | head -n 1)
bootstrap="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
mkdir -p "$(dirname "$bootstrap")"
cat > "$bootstrap" <<'PY'
"""Stand-in for get-pip.py: ensurepip, then pip installs the requested versions."""
import subprocess
import sys

# In a child process: ensurepip blanks the pip configuration of its own process.
subprocess.check_call([sys.executable, '-m', 'ensurepip', '--upgrade'])
args = [a for a in sys.argv[1:] if a not in ('--no-setuptools', '--no-wheel')]
subprocess.check_call([sys.executable, '-m', 'pip', 'install', '--quiet'] + args)
PY

# Outside the checkout: inside it, ansible-test would list files through git
# and find none of the copy tracked. One copy per checkout: two checkouts
# tested side by side must not test each other's files.
dest="${TMPDIR:-/tmp}/llm-server-sanity-$(printf '%s' "$root" | sha256sum | cut -c1-12)/ansible_collections/homelab/llm_server"
mkdir -p "$dest"
# The simulated sysfs trees keep the kernel's own names (0000:01:00.0, device
# links), which the Windows-minded file name tests reject; they are test data.
rsync -a --delete --exclude-from=<(printf '%s\n' .venv .cache .collections .ansible build reports \
  tests/output .git __pycache__ .pytest_cache 'tests/sysfs/preflight/*/') "$root/" "$dest/"
cd "$dest"
ansible-test sanity --venv --requirements --python 3.11 --color no "$@"
