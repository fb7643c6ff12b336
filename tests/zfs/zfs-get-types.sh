#!/bin/sh
# Test hosts only, installed as /usr/local/sbin/zfs in front of zfs-fuse's:
# zfs-fuse has no `zfs get -t TYPE`, which sanoid 2.1.0 lists its snapshots
# with (`zfs get -Hrpt snapshot PROPERTY [DATASET...]`). That call is answered
# from `zfs list -t snapshot` and `zfs get -H -p`, in the same format; every
# other call goes to zfs-fuse's zfs unchanged.
if [ "$1" = get ] && [ "$2" = -Hrpt ] && [ "$3" = snapshot ]; then
  property=$4
  shift 4
  snapshots=$(/usr/sbin/zfs list -H -t snapshot -o name "$@" | grep @)
  [ -z "$snapshots" ] && exit 0
  # shellcheck disable=SC2086 # one argument per snapshot name
  exec /usr/sbin/zfs get -H -p "$property" $snapshots
fi
exec /usr/sbin/zfs "$@"
