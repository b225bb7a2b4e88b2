#!/usr/bin/env bash
# Checks the Prometheus alert rules with promtool:
#   promtool check rules docker/prometheus-rules.yaml
#   promtool test rules  tests/packaging/*.test.yaml   (unit tests with synthetic series;
#                        prometheus-rules-jobs.test.yaml is written by
#                        scripts/gen-job-rule-tests.py, checked up to date first)
#   promtool check metrics < tests/golden/h200-export.prom
#                        (the golden export as the Collector's Prometheus exporter serves it,
#                        written by tests/agent/golden.rs: names, HELP, TYPE, counters' _total)
#
# promtool comes from PATH, else from $PROMTOOL, else from a cache, else it is extracted from
# Debian's `prometheus` package with `apt-get download` + `dpkg-deb -x` (nothing is installed;
# about 19 MB, once). Where no apt-get/dpkg-deb exists the script says so and exits 0 (the
# rules are then unchecked, loudly); a failing check or a failed download exits non-zero.
#
# Usage: scripts/check-rules.sh
# Cache: ${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}/promtool
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}"
RULES="$ROOT/docker/prometheus-rules.yaml"

find_promtool() {
  if [ -n "${PROMTOOL:-}" ]; then return 0; fi
  if command -v promtool >/dev/null 2>&1; then PROMTOOL="$(command -v promtool)"; return 0; fi
  local dir="$CACHE/promtool"
  if [ -x "$dir/usr/bin/promtool" ]; then PROMTOOL="$dir/usr/bin/promtool"; return 0; fi
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    echo "SKIPPED: promtool not obtainable here (no apt-get/dpkg-deb); the rules are unchecked"
    exit 0
  fi
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
  local work="$WORK"
  echo "promtool: fetching Debian's prometheus package (apt-get download; nothing is installed)"
  if ! (cd "$work" && apt-get download -q prometheus >"$work/apt.log" 2>&1); then
    if [ "$(id -u)" -eq 0 ]; then
      echo "apt-get download failed; refreshing the package lists once"
      apt-get update -qq >>"$work/apt.log" 2>&1 || true
      (cd "$work" && apt-get download -q prometheus >>"$work/apt.log" 2>&1) || true
    fi
  fi
  local deb; deb="$(find "$work" -maxdepth 1 -name 'prometheus_*.deb' | sed -n 1p)"
  if [ -z "$deb" ]; then
    echo "ERROR: cannot download Debian's prometheus package:" >&2
    tail -n 3 "$work/apt.log" >&2
    exit 1
  fi
  mkdir -p "$CACHE"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  dpkg-deb -x "$deb" "$dir.tmp"
  [ -x "$dir.tmp/usr/bin/promtool" ] || { echo "ERROR: $deb has no usr/bin/promtool" >&2; exit 1; }
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  PROMTOOL="$dir/usr/bin/promtool"
}

# The job rules' tests are generated (both shapes of the exporter's series): up to date?
python3 "$ROOT/scripts/gen-job-rule-tests.py" --check
find_promtool
"$PROMTOOL" --version 2>&1 | sed -n 1p
"$PROMTOOL" check rules "$RULES"
shopt -s nullglob
tests=("$ROOT"/tests/packaging/*.test.yaml)
if [ "${#tests[@]}" -eq 0 ]; then
  echo "ERROR: no promtool unit tests under tests/packaging/" >&2
  exit 1
fi
"$PROMTOOL" test rules "${tests[@]}"
golden="$ROOT/tests/golden/h200-export.prom"
[ -f "$golden" ] || { echo "ERROR: $golden is missing (UPDATE_DOCS=1 cargo test --test agent golden:: writes it)" >&2; exit 1; }
echo "promtool check metrics < tests/golden/h200-export.prom"
"$PROMTOOL" check metrics <"$golden"
