#!/usr/bin/env bash
# Runs the README's run commands as written (taken from README.md, not copied here) and
# checks what a newcomer should see:
#
#   1. the first command of the first block (build, then run on this machine's GPUs), for
#      8 s, then SIGINT: without an NVIDIA driver, one line says so (`NVML library not
#      found`, once, though init is retried) and no other warning or error; exit 0. On a
#      machine with a driver, metrics are printed instead;
#   2. the replay command (the recorded H200 through the mock library), for 8 s, then
#      SIGINT: OTLP/JSON metrics on stdout with the recording's power, the run report event
#      on stdout too (console events come with console metrics), no warning or error; exit 0.
#
# The test command (the first block's second line) is run by .ci/run itself.
# Usage: scripts/check-readme-commands.sh   (after `cargo build --release`)
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
run_line="$(sed -n 1p "$WORK/block-1")"
replay="$(cat "$WORK/block-2")"
case "$run_line" in *"target/release/gpu-otel-sidecar"*) ;; *) echo "ERROR: README's first line is not the run command: $run_line" >&2; exit 1 ;; esac
case "$replay" in *NVML_MOCK_SCENARIO*) ;; *) echo "ERROR: README's second shell block is not the replay command: $replay" >&2; exit 1 ;; esac

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

[ "$FAILED" = 0 ] || { echo "README commands: FAILED" >&2; exit 1; }
echo "README commands: ok"
