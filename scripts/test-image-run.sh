#!/bin/sh
# Runs a command of an image the way a container runtime would, for `npm run test:image`
# (scripts/test-image.ts) on a machine where `podman run` cannot (this one's sandbox refuses crun's
# rlimits). Started under `unshare --mount --pid --fork --propagation private`, so it is PID 1 of a
# PID namespace and every mount it makes goes away with it. The image's root filesystem (a podman
# container's, mounted) becomes a read-only `/` with /proc, /dev, a read-only /sys, tmpfs on /run and
# /tmp (as `read_only: true` + `tmpfs:` give in compose.yaml), the secrets under /run/secrets, a host
# folder as the data volume, and the host's uid claims (so that executor uids clash with no other
# Fount server on this host). Then the command runs chrooted, keeping PID 1, with the capability
# bounding set given (setpriv syntax: -all,+chown,…) and no_new_privs.
#
# Usage: test-image-run.sh <rootfs> <data dir> <secrets dir> <caps> <command…>
set -eu
root=$1 data=$2 secrets=$3 caps=$4
shift 4

mount --bind "$root" "$root"
mount -o remount,bind,ro "$root"
mount -t proc -o nosuid,nodev,noexec proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
mount -o remount,bind,ro "$root/sys"
mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs "$root/run"
mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs "$root/tmp"
mkdir -p "$root/run/secrets" "$root/run/fount/uids" /run/fount/uids
mount --bind "$secrets" "$root/run/secrets"
mount --bind /run/fount/uids "$root/run/fount/uids"
mount --bind "$data" "$root/var/lib/fount"
for f in /etc/resolv.conf /etc/hosts; do
  if [ -f "$root$f" ] && [ -f "$f" ]; then mount --bind "$f" "$root$f"; fi
done

exec chroot "$root" /usr/bin/setpriv --bounding-set="$caps" --inh-caps=-all --no-new-privs -- "$@"
