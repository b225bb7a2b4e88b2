#!/usr/bin/env bash
# Runs the wall-clock step test (tests/agent/time.rs,
# wall_clock_step_back_of_an_hour_never_gives_a_point_before_its_start): the agent with
# Debian's libfaketime preloaded steps its wall clock back one hour mid-run (the monotonic
# clock left alone, DONT_FAKE_MONOTONIC=1), and no exported point may end before it starts.
#
# libfaketime comes from $GPU_OTEL_SIDECAR_TEST_LIBFAKETIME, else from a cache, else it is
# extracted from Debian's `libfaketime` package with `apt-get download` + `dpkg-deb -x`
# (nothing is installed; about 50 kB, once). Where no apt-get/dpkg-deb exists the script says
# so and exits 0 (the test is then not run, loudly); a failed download or test exits non-zero.
#
# Usage: scripts/check-clock-step.sh
# Cache: ${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}/libfaketime
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}"

find_libfaketime() {
  if [ -n "${GPU_OTEL_SIDECAR_TEST_LIBFAKETIME:-}" ]; then return 0; fi
  local dir="$CACHE/libfaketime"
  local lib
  lib="$(find "$dir" -name 'libfaketimeMT.so.1' 2>/dev/null | head -n 1 || true)"
  if [ -n "$lib" ]; then GPU_OTEL_SIDECAR_TEST_LIBFAKETIME="$lib"; return 0; fi
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    echo "SKIPPED: libfaketime not obtainable here (no apt-get/dpkg-deb); the wall-clock step test is not run"
    exit 0
  fi
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
  local work="$WORK"
  echo "libfaketime: fetching Debian's libfaketime package (apt-get download; nothing is installed)"
  if ! (cd "$work" && apt-get download -q libfaketime >"$work/apt.log" 2>&1); then
    if [ "$(id -u)" -eq 0 ]; then
      echo "apt-get download failed; refreshing the package lists once"
      apt-get update -qq >>"$work/apt.log" 2>&1 || true
      (cd "$work" && apt-get download -q libfaketime >>"$work/apt.log" 2>&1) || true
    fi
  fi
  local deb; deb="$(find "$work" -maxdepth 1 -name 'libfaketime_*.deb' | head -n 1)"
  if [ -z "$deb" ]; then
    echo "ERROR: cannot download Debian's libfaketime package:" >&2
    tail -n 3 "$work/apt.log" >&2
    exit 1
  fi
  mkdir -p "$CACHE"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  dpkg-deb -x "$deb" "$dir.tmp"
  lib="$(find "$dir.tmp" -name 'libfaketimeMT.so.1' | head -n 1)"
  [ -n "$lib" ] || { echo "ERROR: $deb has no libfaketimeMT.so.1" >&2; exit 1; }
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  GPU_OTEL_SIDECAR_TEST_LIBFAKETIME="$(find "$dir" -name 'libfaketimeMT.so.1' | head -n 1)"
}

find_libfaketime
echo "libfaketime: $GPU_OTEL_SIDECAR_TEST_LIBFAKETIME"
cd "$ROOT"
GPU_OTEL_SIDECAR_TEST_LIBFAKETIME="$GPU_OTEL_SIDECAR_TEST_LIBFAKETIME" \
  cargo test --test agent -- --ignored --exact time::wall_clock_step_back_of_an_hour_never_gives_a_point_before_its_start
