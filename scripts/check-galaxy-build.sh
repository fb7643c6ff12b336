#!/usr/bin/env bash
# Build the collection tarball, install it into an empty directory and use it
# from outside this checkout: the module answers through the NVML test double
# and the roles load from the installed copy.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$work"
# An empty configuration: nothing of this checkout's ansible.cfg applies.
touch ansible.cfg
export ANSIBLE_CONFIG="$work/ansible.cfg"
# The installed copy first, then the collections of the ansible package.
bundled=$(python3 -c 'import ansible_collections, os; print(os.path.dirname(list(ansible_collections.__path__)[0]))')
export ANSIBLE_COLLECTIONS_PATH="$work/collections:$bundled"
ansible-galaxy collection build --force --output-path "$work" "$root" >/dev/null
tarball=$(ls "$work"/homelab-llm_server-*.tar.gz)
# --no-deps: the dependencies come with the ansible package, not from a Galaxy server.
ansible-galaxy collection install --offline --no-deps -p "$work/collections" "$tarball" >/dev/null
echo "built and installed $(basename "$tarball") ($(du -h "$tarball" | cut -f1))"
out=$(LD_LIBRARY_PATH="$root/build/nvml" \
      FAKE_NVML_FIXTURE="$root/tests/doubles/nvml/fixtures/target_dual_rtx_pro_6000.json" \
      ansible localhost -c local -m homelab.llm_server.gpu_facts \
        -e "ansible_python_interpreter=$(command -v python3)" 2>/dev/null)
echo "$out" | grep -q '"gpu_count": 2' || { echo "gpu_facts from the installed tarball failed: $out"; exit 1; }
# The host programs' wheel, built from the installed copy (its version from
# MANIFEST.json), runs with nothing but python3.
out=$(ansible localhost -c local -m homelab.llm_server.host_wheel -a "dest=$work/wheels" 2>/dev/null)
wheel=$(echo "$out" | sed -n 's/^ *"path": "\(.*\)",\?$/\1/p')
case "$wheel" in
  */llm_server_host-"$(basename "$tarball" .tar.gz | sed 's/^homelab-llm_server-//')"-py3-none-any.whl) ;;
  *) echo "host_wheel from the installed tarball failed: $out"; exit 1 ;;
esac
PYTHONPATH="$wheel" python3 -m llm_server_host.bench --help >/dev/null
ansible-doc -t role homelab.llm_server.preflight >/dev/null
ansible-playbook --syntax-check "$work/collections/ansible_collections/homelab/llm_server/playbooks/site.yml" -i localhost, >/dev/null 2>&1
ansible-playbook --syntax-check homelab.llm_server.preflight -i localhost, >/dev/null 2>&1
echo "the installed collection works from $work: gpu_facts, the host programs' wheel, role docs, playbooks"
