"""Shared helpers for the packaging tests (run by scripts/check-packaging.sh).

Tools come from the environment the check script prepares:
  HELM       path of the helm binary (required for the Helm tests)
  PROMTOOL   path of promtool (the rule tests skip, loudly, without it)
  GPU_OTEL_SIDECAR_BINARY, REQUIRE_RELEASE_BINARY: see test_binary.py
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "gpu-otel-sidecar"
DOCKER = ROOT / "docker"
METRICS_DOC = ROOT / "docs" / "metrics.md"


# ---------------------------------------------------------------------------------------
# tools


def _tool(env_name, default_name):
    path = os.environ.get(env_name) or shutil.which(default_name)
    return path if path and os.access(path, os.X_OK) else None


@pytest.fixture(scope="session")
def helm():
    path = _tool("HELM", "helm")
    if not path:
        pytest.fail("helm not found: set HELM (scripts/check-packaging.sh installs it)")
    return path


@pytest.fixture(scope="session")
def promtool():
    path = _tool("PROMTOOL", "promtool")
    if not path:
        pytest.skip("promtool not available (Debian package `prometheus`); rule checks skipped")
    return path


# ---------------------------------------------------------------------------------------
# Helm rendering


class Rendered:
    """The documents of one `helm template` run, with lookups by kind."""

    def __init__(self, docs, notes=""):
        self.docs = [d for d in docs if d]
        self.notes = notes

    def of_kind(self, kind):
        return [d for d in self.docs if d.get("kind") == kind]

    def one(self, kind):
        found = self.of_kind(kind)
        assert len(found) == 1, f"expected one {kind}, got {len(found)}"
        return found[0]

    @property
    def job(self):
        return self.one("Job")

    @property
    def pod_spec(self):
        return self.job["spec"]["template"]["spec"]


def helm_template(helm, *args, chart=CHART, release="demo", kube_version="1.33.0", check=True):
    cmd = [helm, "template", release, str(chart), "--kube-version", kube_version, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return proc


def render(helm, *sets, kube_version="1.33.0", extra_args=(), release="demo", chart=CHART):
    args = []
    for s in sets:
        args += ["--set", s]
    args += list(extra_args)
    proc = helm_template(helm, *args, chart=chart, release=release, kube_version=kube_version)
    return Rendered(list(yaml.safe_load_all(proc.stdout)))


def sidecar_of(pod_spec, name="gpu-otel-sidecar"):
    """(where, container): where is 'initContainers' or 'containers'."""
    hits = []
    for where in ("initContainers", "containers"):
        for c in pod_spec.get(where) or []:
            if c["name"] == name:
                hits.append((where, c))
    assert len(hits) == 1, f"sidecar {name!r} found {len(hits)} times"
    return hits[0]


def env_map(container):
    """name -> value (str) or ('fieldRef', path) or ('secretKeyRef', name, key)."""
    out = {}
    for e in container.get("env") or []:
        assert e["name"] not in out, f"duplicate env {e['name']}"
        if "value" in e:
            out[e["name"]] = e["value"]
        else:
            src = e["valueFrom"]
            if "fieldRef" in src:
                out[e["name"]] = ("fieldRef", src["fieldRef"]["fieldPath"])
            elif "secretKeyRef" in src:
                out[e["name"]] = ("secretKeyRef", src["secretKeyRef"]["name"], src["secretKeyRef"]["key"])
            else:
                out[e["name"]] = ("other", src)
    return out


# Downward API values for rendered pods, as the kubelet would fill them.
FIELD_VALUES = {
    "metadata.name": "resnet-train-0",
    "metadata.uid": "4f1c7e2a-0000-4000-8000-000000000001",
    "metadata.namespace": "ml",
    "spec.nodeName": "gpu-node-7",
    "status.hostIP": "10.0.0.7",
}


def kube_env(container, fields=FIELD_VALUES, secrets=None, labels=None):
    """The environment the kubelet gives `container`: fieldRefs from `fields` (and
    `metadata.labels['<key>']` from `labels`, "" for a label the pod lacks, as the kubelet
    gives), secretKeyRefs from `secrets` {(name, key): value}, and `$(VAR)` references to
    variables defined earlier in the list expanded (`$$` is a literal `$`), as Kubernetes does."""
    out = {}
    for e in container.get("env") or []:
        if "value" in e:
            value = re.sub(
                r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                lambda m: "$" if m.group(0) == "$$" else out.get(m.group(1), m.group(0)),
                e["value"],
            )
        else:
            src = e["valueFrom"]
            label = re.fullmatch(r"metadata\.labels\['([^']+)'\]", src.get("fieldRef", {}).get("fieldPath", ""))
            if label:
                value = (labels or {}).get(label.group(1), "")
            elif "fieldRef" in src:
                value = fields[src["fieldRef"]["fieldPath"]]
            elif "secretKeyRef" in src:
                ref = src["secretKeyRef"]
                value = (secrets or {})[(ref["name"], ref["key"])]
            else:
                raise AssertionError(f"unhandled env source {src}")
        out[e["name"]] = value
    return out


@pytest.fixture(scope="session")
def agent_binary():
    """The agent binary: $GPU_OTEL_SIDECAR_BINARY, else target/release, else target/debug. Without
    one the test skips, unless REQUIRE_RELEASE_BINARY=1 (CI builds it first)."""
    candidates = [os.environ.get("GPU_OTEL_SIDECAR_BINARY")] + [
        str(ROOT / "target" / p / "gpu-otel-sidecar") for p in ("release", "debug")
    ]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    if os.environ.get("REQUIRE_RELEASE_BINARY") == "1":
        pytest.fail("no agent binary (cargo build --release)")
    pytest.skip("no agent binary; build it to run its config check on rendered charts")


def check_config(binary, env):
    """Runs `gpu-otel-sidecar check-config` with exactly `env` (plus PATH): (rc, stdout JSON or
    None, stderr)."""
    import json

    proc = subprocess.run(
        [binary, "check-config"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    parsed = json.loads(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, parsed, proc.stderr


# ---------------------------------------------------------------------------------------
# docs/metrics.md and the collector's Prometheus translation

# The OpenTelemetry Collector's Prometheus exporter (collector-contrib, default
# add_metric_suffixes / UnderscoreEscapingWithSuffixes), as implemented by
# pkg/translator/prometheus and prometheus/otlptranslator:
#  - the name is split into tokens on every character outside [a-zA-Z0-9:], joined by "_";
#  - the UCUM unit becomes a suffix token: its main part through a unit table (By->bytes,
#    W->watts, ...; unknown units kept as written, "1" -> nothing), a "/x" part becomes
#    "per_<x>" through a per-unit table; a unit with {annotations} adds nothing; a token
#    already in the name is not repeated;
#  - monotonic sums get "_total" (moved to the end), gauges in unit "1" get "_ratio";
#    non-monotonic sums (UpDownCounters) get neither;
#  - a name starting with a digit is prefixed with "_".
UNIT_MAP = {
    "d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds",
    "us": "microseconds", "ns": "nanoseconds",
    "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes",
    "TiBy": "tibibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes",
    "TBy": "terabytes",
    "m": "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts", "g": "grams",
    "Cel": "celsius", "Hz": "hertz", "1": "", "%": "percent",
}
PER_UNIT_MAP = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}

_INVALID_METRIC_CHARS = re.compile(r"[^a-zA-Z0-9:]")


def _clean_unit(unit):
    unit = re.sub(r"__+", "_", _INVALID_METRIC_CHARS.sub("_", unit))
    return unit.lstrip("_")


def _unit_suffixes(unit):
    main, per = "", ""
    parts = unit.split("/", 1)
    m = parts[0].strip()
    if m and "{" not in m and "}" not in m:
        main = UNIT_MAP.get(m, m)
    if len(parts) > 1 and parts[1]:
        p = parts[1].strip()
        if p and "{" not in p and "}" not in p:
            per = PER_UNIT_MAP.get(p, p)
        if per:
            per = "per_" + per
    return main, per


def prometheus_names(name, unit, instrument):
    """Names under which one OTel metric appears in Prometheus (several for histograms)."""
    kind = instrument_kind(instrument)
    tokens = [t for t in _INVALID_METRIC_CHARS.split(name) if t]
    main, per = _unit_suffixes(unit)
    main, per = _clean_unit(main), _clean_unit(per)
    if main in tokens:
        main = ""
    if per == "per_":
        per = ""
    else:
        per = per.rstrip("_")
        if per in tokens:
            per = ""
    if per:
        main = main.rstrip("_")
    if main:
        tokens.append(main)
    if per:
        tokens.append(per)
    if kind == "counter":
        tokens = [t for t in tokens if t != "total"] + ["total"]
    if unit == "1" and kind == "gauge":
        tokens = [t for t in tokens if t != "ratio"] + ["ratio"]
    base = "_".join(tokens)
    if base and base[0].isdigit():
        base = "_" + base
    if kind == "histogram":
        return [base + "_bucket", base + "_sum", base + "_count"]
    return [base]


def instrument_kind(instrument):
    """counter (monotonic sum) | updowncounter (non-monotonic sum) | gauge | histogram."""
    i = instrument.strip().lower().replace("_", "").replace("-", "").replace(" ", "")
    i = i.removeprefix("observable").removeprefix("asynchronous").removeprefix("async")
    if i in ("counter", "sum", "monotonicsum"):
        return "counter"
    if i in ("updowncounter", "nonmonotonicsum"):
        return "updowncounter"
    if i == "gauge":
        return "gauge"
    if i in ("histogram", "exponentialhistogram"):
        return "histogram"
    raise ValueError(f"unknown instrument kind {instrument!r}")


def prometheus_label(attribute):
    """An attribute name as a Prometheus label (pkg/translator/prometheus NormalizeLabel)."""
    label = re.sub(r"[^a-zA-Z0-9_]", "_", attribute)
    if label[0].isdigit():
        label = "key_" + label
    elif label.startswith("_") and not label.startswith("__"):
        label = "key" + label
    return label


def _cells(line):
    line = line.strip()
    if not line.startswith("|"):
        return None
    # split on | not escaped as \|
    cells = re.split(r"(?<!\\)\|", line.strip("|"))
    return [c.strip() for c in cells]


def parse_metrics_doc(path=METRICS_DOC):
    """[(name, instrument, unit)] from the table rows `| `name` | instrument | `unit` | ...`,
    and the set of attribute names (every backticked dotted name that is not a metric)."""
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: the metric catalogue must be documented there")
    text = path.read_text(encoding="utf-8")
    metrics = []
    for line in text.splitlines():
        cells = _cells(line)
        if not cells or len(cells) < 3:
            continue
        m = re.fullmatch(r"`([a-z][a-z0-9_.]*)`", cells[0])
        if not m:
            continue
        unit = re.fullmatch(r"`([^`]*)`", cells[2])
        assert unit, f"metrics.md: unit of {m.group(1)} not in backticks: {cells[2]!r}"
        metrics.append((m.group(1), cells[1], unit.group(1)))
    names = {m[0] for m in metrics}
    attributes = {a for a in re.findall(r"`([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)`", text) if a not in names}
    return metrics, attributes


# Resource attributes the agent sets (DESIGN.md) or that the chart/compose add; with
# resource_to_telemetry_conversion they are labels on every series.
RESOURCE_ATTRIBUTES = {
    "service.name", "service.instance.id", "service.namespace", "host.name",
    "k8s.pod.name", "k8s.pod.uid", "k8s.namespace.name", "k8s.node.name", "k8s.container.name",
    "container.name", "deployment.environment.name",
    # The pod's workload (docs/kubernetes.md#jobs): the chart's default podLabels.
    "k8s.job.name",
} | {"k8s.pod.label." + key for key in yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["telemetry"]["podLabels"]}
# Labels that Prometheus or the exporter add themselves.
PROMETHEUS_LABELS = {"job", "instance", "__name__", "alertname", "alertstate", "severity", "otel_scope_name", "otel_scope_version"}
# Labels the rules of docker/prometheus-rules.yaml make: a job's name (gpu-otel-sidecar.job)
# and which signal a straggler was found in.
PROMETHEUS_LABELS |= {"training_job", "signal"}
# Series Prometheus itself produces.
PROMETHEUS_BUILTIN_SERIES = {"ALERTS", "ALERTS_FOR_STATE", "up", "target_info"}


# ---------------------------------------------------------------------------------------
# PromQL


GRAFANA_RANGE_VARS = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "${__range}": "1h",
                      "${__rate_interval}": "1m", "${__interval}": "1m"}


# Dashboard variables that stand for a number in a query (the Jobs row's price).
GRAFANA_VALUE_VARS = {"$price": "0"}


def promql_refs(expr):
    """(metric names, label names) an expression refers to, from a real PromQL parser."""
    import promql_parser

    for var, value in {**GRAFANA_RANGE_VARS, **GRAFANA_VALUE_VARS}.items():
        expr = expr.replace(var, value)
    ast = promql_parser.parse(expr)
    metrics, labels = set(), set()

    def walk(node):
        t = type(node).__name__
        if t == "VectorSelector":
            if node.name:
                metrics.add(node.name)
            matchers = list(node.matchers.matchers)
            for group in node.matchers.or_matchers or []:
                matchers += list(group)
            for m in matchers:
                if m.name == "__name__":
                    metrics.add(m.value)
                else:
                    labels.add(m.name)
        elif t == "MatrixSelector":
            walk(node.vector_selector)
        elif t == "AggregateExpr":
            if node.modifier is not None:
                labels.update(node.modifier.labels)
            walk(node.expr)
            if node.param is not None:
                walk(node.param)
        elif t == "BinaryExpr":
            mod = node.modifier
            if mod is not None:
                if mod.matching is not None:
                    labels.update(mod.matching.labels)
                labels.update(mod.group_labels or [])
            walk(node.lhs)
            walk(node.rhs)
        elif t in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
            walk(node.expr)
        elif t == "Call":
            for a in node.args:
                walk(a)
        elif t in ("NumberLiteral", "StringLiteral"):
            pass
        else:
            raise AssertionError(f"unhandled PromQL node {t}")

    walk(ast)
    return metrics, labels


SELF_METRICS_DOC = ROOT / "docs" / "metrics.md"


def parse_self_metrics(path=SELF_METRICS_DOC):
    """[(name, instrument, unit)] of the agent's own metrics, from docs/metrics.md's Self-metrics rows
    `| `gpu_sidecar.…` | instrument | `unit` | …`, and their attribute names."""
    metrics, attributes = [], set()
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = _cells(line)
        if not cells or len(cells) < 4:
            continue
        m = re.fullmatch(r"`(gpu_sidecar\.[a-z0-9_.]+)`", cells[0])
        unit = re.fullmatch(r"`([^`]*)`", cells[2])
        if m and unit:
            metrics.append((m.group(1), cells[1], unit.group(1)))
            attributes |= set(re.findall(r"`([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)`", cells[3]))
    return metrics, attributes


@pytest.fixture(scope="session")
def metrics_catalogue():
    metrics, attributes = parse_metrics_doc()
    assert metrics, "docs/metrics.md has no metric rows"
    own, own_attributes = parse_self_metrics()
    assert own, "docs/metrics.md lists no gpu_sidecar.* self-metric"
    attributes = attributes | own_attributes
    prom = {}
    for name, instrument, unit in metrics + own:
        for p in prometheus_names(name, unit, instrument):
            prom[p] = name
    labels = {prometheus_label(a) for a in attributes | RESOURCE_ATTRIBUTES} | PROMETHEUS_LABELS
    return {"metrics": metrics, "prometheus": prom, "labels": labels}


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def trainer_settings():
    """The TRAIN_* variables docker/trainer/train.py reads (env_int("TRAIN_…") and
    os.environ.get("TRAIN_…")), each with its default as the script writes it."""
    text = (DOCKER / "trainer" / "train.py").read_text()
    found = dict(re.findall(r'(?:env_int|os\.environ\.get)\("(TRAIN_[A-Z_]+)", "?([^")]*)"?\)', text))
    assert len(found) >= 6, found
    return found
