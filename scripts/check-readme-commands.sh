#!/usr/bin/env bash
# Runs the README's commands as written (taken from README.md, not copied here) and checks
# what a newcomer should see:
#
#   1. the first command of the first block (build, then run on this machine's GPUs), for
#      8 s, then SIGINT: without an NVIDIA driver, one line says so (`NVML library not
#      found`, once, though init is retried) and no other warning or error; exit 0. On a
#      machine with a driver, metrics are printed instead;
#   2. the replay command (the recorded H200 through the mock library), for 8 s, then
#      SIGINT: OTLP/JSON metrics on stdout with the recording's power, the run report event
#      on stdout too (console events come with console metrics), no warning or error; exit 0;
#   3. the replay piped through the README's `jq` filter, for 8 s, then SIGINT (the whole
#      pipeline, as Ctrl-C): one line per data point with the recording's power, no warning
#      or error, a clean stop. jq comes from PATH, else from a cache, else from Debian's
#      `jq` package (apt-get download + dpkg-deb -x; nothing is installed); where none can
#      be had the step is SKIPPED, loudly;
#   4. every thread named in those runs' log lines is a row of the README's thread table.
#
# The first block is exactly the two commands (run, test). The test command (its second
# line) is run by .ci/run, which takes it from here:
#   scripts/check-readme-commands.sh --test-command   prints it and exits.
# Usage: scripts/check-readme-commands.sh   (after `cargo build --release`)
# Cache: ${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}/jq
# (pipefail: a `grep -q` reading a pipe would end its writer with SIGPIPE and fail the
# pipeline; the checks below let every grep read to the end.)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# The shell blocks of README.md, in order: block N is $WORK/block-N.
awk -v dir="$WORK" '
  /^```sh$/ { n++; inside = 1; next }
  /^```$/ && inside { inside = 0; next }
  inside { print > (dir "/block-" n) }
' README.md
[ "$(wc -l <"$WORK/block-1")" = 2 ] || { echo "ERROR: README's first block is not the two commands (run, test):" >&2; cat "$WORK/block-1" >&2; exit 1; }
run_line="$(sed -n 1p "$WORK/block-1")"
# The test command without its comment.
test_line="$(sed -n 2p "$WORK/block-1" | sed 's/[[:space:]]*#.*$//')"
replay="$(cat "$WORK/block-2")"
filtered="$(cat "$WORK/block-3" 2>/dev/null || true)"
case "$run_line" in *"target/release/gpu-otel-sidecar"*) ;; *) echo "ERROR: README's first line is not the run command: $run_line" >&2; exit 1 ;; esac
case "$test_line" in "cargo test"*) ;; *) echo "ERROR: README's second line is not the test command: $test_line" >&2; exit 1 ;; esac
case "$replay" in *NVML_MOCK_SCENARIO*) ;; *) echo "ERROR: README's second shell block is not the replay command: $replay" >&2; exit 1 ;; esac
case "$filtered" in "$replay |"*"jq "*) ;; *) echo "ERROR: README's third shell block is not the replay piped through jq: $filtered" >&2; exit 1 ;; esac
if [ "${1:-}" = --test-command ]; then
  echo "$test_line"
  exit 0
fi
CACHE="${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}"

# jq for block 3: PATH, else the cache, else Debian's packages (jq needs libjq1, libonig5),
# run through a wrapper in $WORK/bin that finds their libraries. Empty when none is had.
find_jq() {
  if command -v jq >/dev/null 2>&1; then echo "jq: $(command -v jq)"; return 0; fi
  local dir="$CACHE/jq"
  if [ ! -x "$dir/usr/bin/jq" ]; then
    if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
      return 1
    fi
    echo "jq: fetching Debian's jq, libjq1 and libonig5 (apt-get download; nothing is installed)"
    mkdir -p "$WORK/debs"
    if ! (cd "$WORK/debs" && apt-get download -q jq libjq1 libonig5 >"$WORK/apt.log" 2>&1); then
      if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq >>"$WORK/apt.log" 2>&1 || true
        (cd "$WORK/debs" && apt-get download -q jq libjq1 libonig5 >>"$WORK/apt.log" 2>&1) || true
      fi
    fi
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
    local deb
    for deb in "$WORK"/debs/*.deb; do [ -f "$deb" ] && dpkg-deb -x "$deb" "$dir.tmp"; done
    [ -x "$dir.tmp/usr/bin/jq" ] || { tail -n 3 "$WORK/apt.log" >&2; return 1; }
    mkdir -p "$CACHE" && rm -rf "$dir" && mv "$dir.tmp" "$dir"
  fi
  mkdir -p "$WORK/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$(dirname "$(find "$dir" -name 'libjq.so.1*' | sed -n 1p)")" "$dir/usr/bin/jq" >"$WORK/bin/jq"
  chmod +x "$WORK/bin/jq"
  PATH="$WORK/bin:$PATH"
  echo "jq: $dir/usr/bin/jq"
}

FAILED=0
check() { if eval "$2"; then echo "  ok: $1"; else echo "  FAIL: $1"; FAILED=1; fi; }

# run_for NAME SECONDS COMMAND: runs COMMAND in bash for SECONDS, then SIGINT (its whole
# process group, as Ctrl-C does); stdout and stderr to $WORK/NAME.out / .err, exit code to
# $WORK/NAME.rc. The health port is an ephemeral one on loopback, so that a busy 13134 on
# this machine cannot fail the check (the commands themselves are as written).
run_for() {
  local name="$1" secs="$2" cmd="$3"
  echo "\$ $cmd"
  set +e
  GPU_SIDECAR_HEALTH_ADDR=127.0.0.1:0 timeout --preserve-status -s INT -k 20 "$secs" bash -c "$cmd" \
    >"$WORK/$name.out" 2>"$WORK/$name.err"
  echo $? >"$WORK/$name.rc"
  set -e
  sed 's/^/  stderr: /' "$WORK/$name.err" | cut -c1-220
  echo "  stdout: $(wc -l <"$WORK/$name.out") lines"
}

# The agent must have exited 0 after the SIGINT, and said so.
exited_cleanly() { [ "$(cat "$WORK/$1.rc")" = 0 ] && grep -q ' stopped$' "$WORK/$1.err"; }
problems() { grep -cE ' (WARN|ERROR) ' "$WORK/$1.err" || true; }

echo "== README run command"
run_for run 8 "$run_line"
if ldconfig -p 2>/dev/null | grep 'libnvidia-ml\.so\.1 ' >/dev/null; then
  check "this machine has an NVIDIA driver: metrics are printed" "grep -q '^{\"resourceMetrics\"' '$WORK/run.out'"
  check "no warning or error" "[ \"\$(problems run)\" = 0 ]"
else
  check "no NVIDIA driver: one line says so" "[ \"\$(grep -c 'NVML library not found' '$WORK/run.err')\" = 1 ]"
  check "and nothing else warns or fails" "[ \"\$(problems run)\" = 1 ]"
fi
check "SIGINT: a clean stop (exit 0)" "exited_cleanly run"

echo "== README replay command"
run_for replay 8 "$replay"
check "metrics on stdout (OTLP/JSON), the recording's power" \
  "grep '^{\"resourceMetrics\"' '$WORK/replay.out' | grep '\"name\":\"hw.power\"' >/dev/null"
check "the run report event on stdout (console events)" \
  "grep '^{\"resourceLogs\"' '$WORK/replay.out' | grep 'gpu.run.report' >/dev/null"
check "no warning or error" "[ \"\$(problems replay)\" = 0 ]"
check "SIGINT: a clean stop (exit 0)" "exited_cleanly replay"

echo "== README replay through jq"
if find_jq; then
  run_for filtered 8 "$filtered"
  check "one line per data point, the recording's power" \
    "grep -E '^hw\.power [0-9.]+ W hw\.id=GPU-0c1d2e3f' '$WORK/filtered.out' >/dev/null"
  check "every line: name value unit attributes" \
    "! grep -vE '^[a-z_.]+ -?[0-9.e+-]+ [^ ]+( [a-z_.]+=[^ ]*)*$' '$WORK/filtered.out' >/dev/null"
  check "no warning or error (Ctrl-C ends jq too: the closed pipe is no failure)" "[ \"\$(problems filtered)\" = 0 ]"
  check "the agent stopped cleanly" "grep -q ' stopped$' '$WORK/filtered.err'"
else
  echo "  SKIPPED: no jq here and none obtainable (no apt-get/dpkg-deb, or the download failed); the README's jq filter is unchecked"
fi

echo "== README thread table"
table="$(awk '/^\| thread \| what it does \|/ { t = 1; next } t && /^\|/ { print; next } t { exit }' README.md |
  cut -d'|' -f2 | grep -o '`[^`]*`' | tr -d '`' | sort -u)"
seen="$(cat "$WORK"/*.err | grep -E '^[0-9]{4}-[0-9]{2}-[0-9]{2}T' | awk '{ print $3 }' | sort -u)"
for thread in $seen; do
  check "thread $thread of the logs is in the README's table" "printf '%s\n' \"\$table\" | grep -qx -- '$thread'"
done

[ "$FAILED" = 0 ] || { echo "README commands: FAILED" >&2; exit 1; }
echo "README commands: ok"
