#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine to run the test suite: podman with runc
# and the cgroupfs manager (crun fails on hybrid cgroups), explicit ulimits
# (rootful podman cannot raise them above the host's), debootstrap for the
# locally built image, gcc for the NVML test double, g++, cmake and git for
# llama-server (scripts/build-llamacpp.sh), the SSH client for the scenario
# that reaches its hosts over SSH, nftables for the firewall's unit tests and
# the stand-in home router of the remote scenario, chromium (headless) for
# screenshots and render checks of the Prometheus console pages
# (tests/monitoring/screenshot.py), libfuse2 for the FUSE file system whose
# reads never return (tests/fuse/stuck_fs.py: a call stuck in the kernel),
# rclone for llm-backup's unit tests (its crypt remote over a local folder).
set -euo pipefail

need=()
for pkg in podman runc debootstrap gcc g++ cmake git make python3-venv rsync shellcheck apt-utils gnupg openssh-client nftables chromium libfuse2 rclone; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

conf=/etc/containers/containers.conf
want='# Managed by homelab.llm_server scripts/setup-test-host.sh
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"'
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$want" ]; then
  mkdir -p /etc/containers
  printf '%s\n' "$want" > "$conf"
  echo "wrote $conf"
fi
