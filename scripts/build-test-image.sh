#!/usr/bin/env bash
# Build the Debian 12 systemd image that stands in for the home server in
# Molecule and the demo. No registry can be reached, so the root filesystem
# comes from Debian's packages through debootstrap. The tag is a hash of this
# recipe: an unchanged recipe reuses the image, a changed one rebuilds it.
set -euo pipefail

IMAGE_NAME=${IMAGE_NAME:-localhost/llm-server-test}
SUITE=bookworm
# openssh-server: one scenario reaches its hosts over SSH, as users reach a server.
PACKAGES=python3,python3-venv,python3-apt,systemd,systemd-sysv,sudo,ca-certificates,iproute2,procps,kmod,openssh-server

recipe_hash=$( { cat "$0"; echo "$PACKAGES"; } | sha256sum | cut -c1-12)
image="${IMAGE_NAME}:debian12-${recipe_hash}"

if podman image exists "$image"; then
  echo "$image"
  exit 0
fi

rootfs=$(mktemp -d /var/tmp/llm-server-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "building $image with debootstrap (about a minute)" >&2
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" >"$rootfs.log" 2>&1; then
  tail -n 30 "$rootfs.log" >&2
  exit 1
fi
rm -f "$rootfs.log"
# Containers have no console login and no udev-managed hardware: mask the
# units that would only fail or wait in a container.
for unit in getty.target systemd-udevd.service systemd-udev-trigger.service \
            systemd-modules-load.service sys-kernel-config.mount \
            systemd-remount-fs.service systemd-firstboot.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
# Keep the package lists, as on an installed server (check mode cannot
# refresh them).
rm -rf "$rootfs"/var/cache/apt/archives/*.deb
echo 'APT::Install-Recommends "false";' > "$rootfs/etc/apt/apt.conf.d/90no-recommends"
tar -C "$rootfs" -c . | podman import \
  --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' \
  - "$image" >&2
# Keep only the newest build of this recipe family.
podman images --format '{{.Repository}}:{{.Tag}}' \
  | grep "^${IMAGE_NAME}:debian12-" | grep -v ":debian12-${recipe_hash}$" \
  | xargs -r podman rmi >&2 || true
echo "$image"
