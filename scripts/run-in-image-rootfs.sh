#!/usr/bin/env bash
# Runs a command inside the image's root filesystem (assembled by
# scripts/check-image-rootfs.sh) the way a container runtime runs the sidecar, without Docker:
#
#   - a private mount namespace (nothing is mounted on the host);
#   - ROOTFS read-only (Kubernetes' readOnlyRootFilesystem, `docker run --read-only`), unless
#     --rw is given; /proc and /dev from the host; the network is the host's (loopback
#     reaches a receiver started outside);
#   - each --bind SRC:DST mounted read-only at DST, each --bind-rw SRC:DST writable (a volume);
#     DST must exist in ROOTFS (the assembly creates the mount points a runtime would:
#     /proc, /dev, /sys, /mnt/scenarios, /mnt/out, and the empty file
#     /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 where the NVIDIA Container Toolkit mounts
#     the driver's NVML library);
#   - CMD runs as UID and GID 65532 (the image's USER), with no supplementary groups and
#     no_new_privs (allowPrivilegeEscalation: false); as a non-root user it has no
#     capabilities.
#
# Usage: scripts/run-in-image-rootfs.sh [--rw] [--bind SRC:DST]... [--bind-rw SRC:DST]...
#            ROOTFS -- CMD [ARGS...]
# Needs root (unshare, mount, chroot). The environment is passed to CMD as it is.
set -euo pipefail

RW=0
BINDS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rw) RW=1; shift ;;
    --bind) BINDS+=("ro:${2:?--bind needs SRC:DST}"); shift 2 ;;
    --bind-rw) BINDS+=("rw:${2:?--bind-rw needs SRC:DST}"); shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    --) echo "missing ROOTFS before --" >&2; exit 2 ;;
    *) break ;;
  esac
done
ROOTFS="${1:?usage: $0 [--rw] [--bind SRC:DST]... ROOTFS -- CMD [ARGS...]}"
shift
[ "${1:-}" = "--" ] || { echo "expected -- after ROOTFS" >&2; exit 2; }
shift
[ $# -gt 0 ] || { echo "no command to run" >&2; exit 2; }
[ -d "$ROOTFS" ] || { echo "no root filesystem at $ROOTFS" >&2; exit 2; }
ROOTFS="$(cd "$ROOTFS" && pwd)"
# The tools by absolute path: PATH is CMD's (the image's), and may lack the sbin directories.
tool() { PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" command -v "$1" || { echo "run-in-image-rootfs: $1 is not installed" >&2; exit 2; }; }
UNSHARE="$(tool unshare)"; MOUNT="$(tool mount)"; SETPRIV="$(tool setpriv)"; CHROOT="$(tool chroot)"

# The inner script runs in the new mount namespace, as root, then becomes 65532.
# shellcheck disable=SC2016
exec "$UNSHARE" --mount --propagation private -- "$BASH" -c '
  set -euo pipefail
  mount="$1"; setpriv="$2"; chroot="$3"; root="$4"; rw="$5"; n="$6"; shift 6
  "$mount" --bind "$root" "$root"
  "$mount" --rbind /proc "$root/proc"
  "$mount" --rbind /dev "$root/dev"
  for _ in $(seq 1 "$n"); do
    spec="$1"; shift
    mode="${spec%%:*}"; rest="${spec#*:}"; src="${rest%%:*}"; dst="${rest#*:}"
    [ -e "$root$dst" ] || { echo "run-in-image-rootfs: no mount point $dst in the root filesystem" >&2; exit 2; }
    "$mount" --bind "$src" "$root$dst"
    [ "$mode" = rw ] || "$mount" -o remount,bind,ro "$root$dst"
  done
  [ "$rw" = 1 ] || "$mount" -o remount,bind,ro "$root"
  shift # --
  exec "$setpriv" --no-new-privs "$chroot" --userspec=65532:65532 --groups=65532 "$root" "$@"
' run-in-image-rootfs "$MOUNT" "$SETPRIV" "$CHROOT" "$ROOTFS" "$RW" "${#BINDS[@]}" "${BINDS[@]}" -- "$@"
