#!/usr/bin/env bash
# Opens the run report's HTML page in real headless Chromium (tests/report/page.rs,
# report_page_in_chromium): the H200 replay's report and sample log rendered by
# `gpu-otel-sidecar report`, then loaded by Debian's `chromium` driven by playwright-core
# (scripts/report-page-check.cjs): no console error, no request leaving the file, one chart
# per GPU with its series drawn, the summary's energy equal to the JSON's, light and dark.
# Screenshots are left in target/report-page/; GPU_OTEL_SIDECAR_UPDATE_SCREENSHOT=1 copies
# the light one to docs/run-report-page.png.
#
# What it needs, fetched when missing: Debian's `chromium` (apt-get install, as root) and
# Node.js with npm (apt-get install nodejs npm, as root); playwright-core from npm into a
# cache (no browser is downloaded: it drives /usr/bin/chromium). Where Chromium cannot be
# installed (not root, no apt-get) the script says so and exits 0 (the check is then not
# run, loudly); a failed install or check exits non-zero.
#
# Usage: scripts/check-report-page.sh
# Cache: ${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}/playwright-core-<version>
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}"
PLAYWRIGHT_VERSION=1.65.1
CHROMIUM="${GPU_OTEL_SIDECAR_TEST_CHROMIUM:-/usr/bin/chromium}"

apt_install() {
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "SKIPPED: $* not installed and not installable here (needs root and apt-get); the browser check of the report page is not run"
    exit 0
  fi
  echo "installing Debian's $* (apt-get)"
  local log; log="$(mktemp)"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >"$log" 2>&1; then
    echo "apt-get install failed; refreshing the package lists once"
    apt-get update -qq >>"$log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >>"$log" 2>&1 || {
      echo "ERROR: cannot install $*:" >&2; tail -n 5 "$log" >&2; exit 1; }
  fi
  rm -f "$log"
}

[ -x "$CHROMIUM" ] || apt_install chromium
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm
echo "chromium: $("$CHROMIUM" --version 2>/dev/null || echo "$CHROMIUM")"

PW_DIR="$CACHE/playwright-core-$PLAYWRIGHT_VERSION"
if [ ! -f "$PW_DIR/node_modules/playwright-core/package.json" ]; then
  echo "playwright-core $PLAYWRIGHT_VERSION: fetching from npm into $PW_DIR"
  rm -rf "$PW_DIR.tmp" && mkdir -p "$PW_DIR.tmp"
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$PW_DIR.tmp" --no-save --no-audit \
    --no-fund --loglevel=error "playwright-core@$PLAYWRIGHT_VERSION"
  rm -rf "$PW_DIR" && mv "$PW_DIR.tmp" "$PW_DIR"
fi

cd "$ROOT"
GPU_OTEL_SIDECAR_TEST_PLAYWRIGHT="$PW_DIR/node_modules/playwright-core" \
GPU_OTEL_SIDECAR_TEST_CHROMIUM="$CHROMIUM" \
  cargo test --test report -- --ignored --exact report::page::report_page_in_chromium
echo "screenshots: $ROOT/target/report-page/"
