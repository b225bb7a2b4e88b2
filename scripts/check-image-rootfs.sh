#!/usr/bin/env bash
# The container image's contents, tested without a Docker engine (none runs here, and no base
# image can be pulled):
#
#   1. assemble the root filesystem the Dockerfile would produce: the Debian bookworm packages
#      that make up gcr.io/distroless/cc-debian12 (its static + base + cc layers, as its
#      Bazel rules list them; `apt-get download` + `dpkg-deb -x`), the files distroless
#      generates (passwd and group with `nonroot` = 65532, /tmp 1777, /home/nonroot,
#      nsswitch.conf, os-release, the CA bundle made from the ca-certificates package as
#      distroless makes it, /var/lib/dpkg/status.d), and the release binary where the
#      Dockerfile's COPY puts it;
#   2. report the size of the image those files make (uncompressed, and gzip'ed as layers);
#   3. run tests/packaging/image_rootfs.rs in it (`cargo test --test packaging -- --ignored image_rootfs::`): the
#      binary as UID 65532 with a read-only root, the mock NVML library mounted where the
#      NVIDIA Container Toolkit mounts libnvidia-ml.so.1; it starts, exports to a receiver on
#      loopback, answers `gpu-otel-sidecar health`, writes nothing outside the files it is
#      asked for, and sends over https:// with the image's CA bundle (one clear line without).
#
# Usage: scripts/check-image-rootfs.sh [--binary PATH] [--mock PATH] [--keep DIR]
#   --binary PATH  release binary (default target/release/gpu-otel-sidecar)
#   --mock PATH    mock NVML library (default target/release/libnvml_mock.so)
#   --keep DIR     assemble into DIR and leave it there (default: a temporary directory)
#
# Needs: root (mount namespaces, chroot), a Debian bookworm apt (the packages are bookworm's,
# as distroless/cc-debian12's are), unshare, setpriv, chroot. The .debs are cached in
# ${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}/distroless-cc-debian12.
# Exits non-zero if anything is missing or fails; nothing is skipped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}/distroless-cc-debian12"
BINARY="$ROOT/target/release/gpu-otel-sidecar"
MOCK="$ROOT/target/release/libnvml_mock.so"
KEEP=""

# gcr.io/distroless/cc-debian12, from GoogleContainerTools/distroless: static/static.bzl
# (base-files, netbase, tzdata, media-types, and the CA bundle made from ca-certificates),
# base/config.bzl BASE_PACKAGES["debian12"] (libc6, libssl3), cc/config.bzl
# CC_PACKAGES["debian12"] (libgomp1, libstdc++6, libgcc-s1, gcc-12-base).
PACKAGES=(base-files netbase tzdata media-types libc6 libssl3 libgomp1 libstdc++6 libgcc-s1 gcc-12-base)
CA_PACKAGE=ca-certificates

while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
    --mock) MOCK="${2:?--mock needs a path}"; shift 2 ;;
    --keep) KEEP="${2:?--keep needs a directory}"; shift 2 ;;
    -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

fail() { echo "ERROR: $*" >&2; exit 1; }
[ -x "$BINARY" ] || fail "no release binary at $BINARY (cargo build --release)"
[ -f "$MOCK" ] || fail "no mock NVML library at $MOCK (cargo build --release)"
[ "$(id -u)" -eq 0 ] || fail "needs root (mount namespaces and chroot)"
for tool in apt-get dpkg-deb unshare setpriv chroot; do
  command -v "$tool" >/dev/null || fail "$tool is not installed"
done
# shellcheck disable=SC1091
codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
[ "$codename" = bookworm ] \
  || fail "apt here is Debian '$codename', not bookworm: distroless/cc-debian12 is made of bookworm's packages"
unshare --mount --propagation private true 2>/dev/null \
  || fail "cannot make a mount namespace (unshare --mount): not root, or no CAP_SYS_ADMIN here"

if [ -n "$KEEP" ]; then
  WORK="$KEEP"; rm -rf "$WORK"; mkdir -p "$WORK"
else
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
fi
FS="$WORK/rootfs"
mkdir -p "$FS" "$CACHE"

# ---- 1. packages -------------------------------------------------------------------------
echo "== Debian bookworm packages of distroless/cc-debian12 (cache: $CACHE)"
fetch() {
  (cd "$CACHE" && apt-get download -q "$@") >"$WORK/apt.log" 2>&1
}
missing=()
for p in "${PACKAGES[@]}" "$CA_PACKAGE"; do
  v="$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')"
  deb="$(find "$CACHE" -maxdepth 1 -name "${p}_*.deb" 2>/dev/null | head -n 1)"
  if [ -z "$deb" ] || { [ -n "$v" ] && [ "$v" != "(none)" ] && [ "$(dpkg-deb -f "$deb" Version)" != "$v" ]; }; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  if ! fetch "${missing[@]}"; then
    echo "apt-get download failed; refreshing the package lists once"
    apt-get update -qq >>"$WORK/apt.log" 2>&1 || true
    fetch "${missing[@]}" || { tail -n 5 "$WORK/apt.log" >&2; fail "apt-get download ${missing[*]} failed"; }
  fi
fi
debs=()
for p in "${PACKAGES[@]}" "$CA_PACKAGE"; do
  # The newest cached version of each (an older one stays until the cache is cleared).
  deb="$(find "$CACHE" -maxdepth 1 -name "${p}_*.deb" | sort -V | tail -n 1)"
  [ -n "$deb" ] || fail "no .deb for $p"
  [ "$(dpkg-deb -f "$deb" Package)" = "$p" ] || fail "$deb is not $p"
  printf '  %-16s %s\n' "$p" "$(dpkg-deb -f "$deb" Version)"
  debs+=("$deb")
done

# ---- 2. the root filesystem ------------------------------------------------------------------
echo "== assembling the root filesystem in $FS"
mkdir -p "$FS/var/lib/dpkg/status.d"
for deb in "${debs[@]}"; do
  p="$(dpkg-deb -f "$deb" Package)"
  dpkg-deb -f "$deb" >"$FS/var/lib/dpkg/status.d/$p"
  [ "$p" = "$CA_PACKAGE" ] && continue
  dpkg-deb -x "$deb" "$FS"
done
# The CA bundle as distroless makes it: every certificate of ca-certificates'
# /usr/share/ca-certificates, in sorted order, in /etc/ssl/certs/ca-certificates.crt (no
# update-ca-certificates, no hashed links), plus the package's copyright.
ca_tmp="$WORK/ca"
mkdir -p "$ca_tmp" "$FS/etc/ssl/certs" "$FS/usr/share/doc/ca-certificates"
dpkg-deb -x "$(printf '%s\n' "${debs[@]}" | grep "/${CA_PACKAGE}_")" "$ca_tmp"
find "$ca_tmp/usr/share/ca-certificates" -type f | sort | xargs cat >"$FS/etc/ssl/certs/ca-certificates.crt"
chmod 0555 "$FS/etc/ssl/certs/ca-certificates.crt"
cp "$ca_tmp/usr/share/doc/ca-certificates/copyright" "$FS/usr/share/doc/ca-certificates/copyright"
echo "  CA bundle: $(grep -c 'BEGIN CERTIFICATE' "$FS/etc/ssl/certs/ca-certificates.crt") certificates"
# Users, groups and directories distroless generates (common/BUILD.bazel), os-release.
cat >"$FS/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$FS/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
EOF
cat >"$FS/etc/nsswitch.conf" <<'EOF'
passwd:         files
group:          files
shadow:         files
hosts:          files dns
networks:       files
protocols:      files
services:       files
EOF
rm -f "$FS/etc/os-release"
cat >"$FS/etc/os-release" <<EOF
PRETTY_NAME="Distroless"
NAME="Debian GNU/Linux"
ID="debian"
VERSION_ID="$(cut -d. -f1 "$FS/etc/debian_version")"
VERSION="Debian GNU/Linux $(cut -d. -f1 "$FS/etc/debian_version") (bookworm)"
EOF
install -d -m 1777 "$FS/tmp"
install -d -m 0700 "$FS/root"
install -d -m 0755 "$FS/home"
install -d -m 0700 -o 65532 -g 65532 "$FS/home/nonroot"
base_bytes="$(du -sb --apparent-size "$FS" | cut -f1)"

# The binary, where the Dockerfile's COPY from the builder stage puts it, as its USER runs it.
copy="$(grep -E '^COPY --from=builder .*gpu-otel-sidecar' "$ROOT/Dockerfile")" || fail "no COPY --from=builder of the binary in the Dockerfile"
dest="$(awk '{print $NF}' <<<"$copy")"
[ "${dest#/}" != "$dest" ] || fail "the Dockerfile copies the binary to a relative path: $dest"
grep -qE '^USER 65532:65532$' "$ROOT/Dockerfile" || fail "the Dockerfile's USER is not 65532:65532 (scripts/run-in-image-rootfs.sh runs as that)"
grep -qE "^ENTRYPOINT \[\"$dest\"\]" "$ROOT/Dockerfile" || fail "the Dockerfile's ENTRYPOINT is not [\"$dest\"]"
install -D -m 0755 -o 0 -g 0 "$BINARY" "$FS$dest"
[ "$dest" = /gpu-otel-sidecar ] || fail "tests/packaging/image_rootfs.rs runs /gpu-otel-sidecar; the Dockerfile puts it at $dest"
binary_bytes="$(stat -c %s "$FS$dest")"

# ---- 3. size --------------------------------------------------------------------------------
# An image is its layers' tar archives; registries store them gzip'ed. Two layers here: the
# base (everything but the binary) and the binary's.
layer_gz() { tar --numeric-owner --sort=name -C "$FS" -cf - "$@" | gzip -9n | wc -c; }
base_gz="$(layer_gz --exclude ".${dest}" .)"
binary_gz="$(layer_gz ".${dest}")"
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1000000 }'; }
echo "== image size (files of the Dockerfile's image, without Docker's metadata)"
echo "  distroless/cc-debian12 (assembled): $(mb "$base_bytes") uncompressed, $(mb "$base_gz") gzip'ed"
echo "  /gpu-otel-sidecar layer:            $(mb "$binary_bytes") uncompressed, $(mb "$binary_gz") gzip'ed"
echo "  image:                              $(mb $((base_bytes + binary_bytes))) uncompressed, $(mb $((base_gz + binary_gz))) to pull"

# Mount points a container runtime and the NVIDIA Container Toolkit create at run time (not
# part of the image's size): /proc, /dev, /sys, volumes, and the driver library's file.
mkdir -p "$FS/proc" "$FS/dev" "$FS/sys" "$FS/mnt/scenarios" "$FS/mnt/out"
touch "$FS/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"

# ---- 4. run it ------------------------------------------------------------------------------
echo "== the binary's libraries resolve in the image (as 65532, read-only root)"
env -i PATH=/usr/bin:/bin "$ROOT/scripts/run-in-image-rootfs.sh" "$FS" -- /gpu-otel-sidecar --version
echo "== tests/packaging/image_rootfs.rs in the image"
cd "$ROOT"
GPU_OTEL_SIDECAR_TEST_ROOTFS="$FS" GPU_OTEL_SIDECAR_TEST_MOCK="$MOCK" \
  cargo test --test packaging -- --ignored --test-threads=1 image_rootfs::
