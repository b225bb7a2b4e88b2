"""The Grafana dashboard and the alert rules query names that really exist: the metrics of
docs/metrics.md as the collector's Prometheus exporter names them."""

import json
import re

import pytest

from conftest import (
    DOCKER,
    PROMETHEUS_BUILTIN_SERIES,
    ROOT,
    instrument_kind,
    load_yaml,
    parse_metrics_doc,
    prometheus_label,
    prometheus_names,
    promql_refs,
)

DASHBOARD = DOCKER / "grafana" / "dashboards" / "gpu-otel-sidecar.json"
RULES = DOCKER / "prometheus-rules.yaml"


# --- the translation rule itself, on cases from the OTel/Prometheus compatibility spec ---


@pytest.mark.parametrize(
    "name, unit, instrument, expected",
    [
        ("system.io", "By", "counter", "system_io_bytes_total"),
        ("system.memory.usage", "By", "updowncounter", "system_memory_usage_bytes"),
        ("cpu.utilization", "1", "gauge", "cpu_utilization_ratio"),
        ("cpu.utilization", "1", "updowncounter", "cpu_utilization"),
        ("network.packets", "{packet}", "counter", "network_packets_total"),
        ("http.server.request.duration", "s", "histogram", "http_server_request_duration_seconds_bucket"),
        ("network.io.rate", "By/s", "gauge", "network_io_rate_bytes_per_second"),
        ("requests.total", "1", "counter", "requests_total"),
        ("disk.bytes", "By", "gauge", "disk_bytes"),
        ("temperature", "Cel", "gauge", "temperature_celsius"),
        ("foo", "{thing}/s", "gauge", "foo_per_second"),
        ("odd_unit", "widgets", "gauge", "odd_unit_widgets"),
        ("2xx.count", "1", "counter", "_2xx_count_total"),
    ],
)
def test_translation_rule(name, unit, instrument, expected):
    assert expected in prometheus_names(name, unit, instrument)


def test_label_translation():
    assert prometheus_label("hw.id") == "hw_id"
    assert prometheus_label("k8s.pod.name") == "k8s_pod_name"
    assert prometheus_label("nvidia.gpu.clocks_event.reason") == "nvidia_gpu_clocks_event_reason"
    assert prometheus_label("0abc") == "key_0abc"


def test_metrics_doc_parses():
    metrics, attributes = parse_metrics_doc()
    names = [m[0] for m in metrics]
    assert len(names) == len(set(names)), "duplicate metric rows in docs/metrics.md"
    for name, instrument, unit in metrics:
        instrument_kind(instrument)  # raises on an unknown kind
        assert unit, f"{name}: empty unit"
    assert "hw.id" in attributes


# --- the dashboard ---


def dashboard_targets():
    dash = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    out = []

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels") or [])

    for p in panels(dash["panels"]):
        for t in p.get("targets") or []:
            out.append((p["title"], t))
    return dash, out


def test_dashboard_is_wellformed():
    dash, targets = dashboard_targets()
    assert dash["uid"] == "gpu-otel-sidecar"
    assert targets, "dashboard has no queries"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    var_names = {v["name"] for v in dash["templating"]["list"]}
    # The sidecar picker is the instance (service.instance.id), which every sidecar has, in
    # Kubernetes or not; a pod picker was empty outside Kubernetes.
    assert {"datasource", "gpu", "instance", "job"} <= var_names
    assert "pod" not in var_names
    for title, t in targets:
        assert t.get("expr"), f"panel {title!r}: empty query"
        assert t["datasource"]["uid"] == "${datasource}", f"panel {title!r}: datasource not the variable"
        for var in re.findall(r"\$(?:\{)?([A-Za-z_][A-Za-z0-9_]*)", t["expr"]):
            assert var in var_names or var.startswith("__"), f"panel {title!r}: unknown variable ${var}"


def recorded():
    """The series the rules record (the dashboard's Jobs row reads the gpu_sidecar:job_* ones)."""
    return {r["record"] for r in all_rules() if "record" in r}


def test_dashboard_queries_use_exported_names(metrics_catalogue):
    _, targets = dashboard_targets()
    known = set(metrics_catalogue["prometheus"]) | PROMETHEUS_BUILTIN_SERIES | recorded()
    used = set()
    for title, t in targets:
        metrics, labels = promql_refs(t["expr"])
        assert metrics, f"panel {title!r}: query names no metric: {t['expr']}"
        unknown = metrics - known
        assert not unknown, (
            f"panel {title!r} queries {sorted(unknown)}, which the collector does not export from "
            f"docs/metrics.md (exported: {sorted(metrics_catalogue['prometheus'])})"
        )
        bad_labels = labels - metrics_catalogue["labels"]
        assert not bad_labels, f"panel {title!r}: unknown labels {sorted(bad_labels)}"
        for legend_label in re.findall(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", t.get("legendFormat") or ""):
            assert legend_label in metrics_catalogue["labels"], f"panel {title!r}: legend label {legend_label}"
        used |= metrics
    # The dashboard covers the core of the catalogue.
    core = {"hw_gpu_utilization_ratio", "hw_gpu_memory_usage_bytes", "hw_gpu_memory_limit_bytes",
            "hw_power_watts", "hw_energy_joules_total", "hw_temperature_celsius"}
    assert core <= used, f"dashboard misses {sorted(core - used)}"


def test_dashboard_variables_use_exported_names(metrics_catalogue):
    dash, _ = dashboard_targets()
    for v in dash["templating"]["list"]:
        if v["type"] != "query":
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)", q)
        assert m, f"variable {v['name']}: expected label_values(selector, label), got {q}"
        metrics, labels = promql_refs(m.group(1))
        assert metrics <= set(metrics_catalogue["prometheus"]) | recorded(), f"variable {v['name']}: {metrics}"
        assert (labels | {m.group(2)}) <= metrics_catalogue["labels"], f"variable {v['name']}: {labels}"


def test_dashboard_counts_only_reporting_sidecars():
    # A stopped sidecar's series linger in the exporter (metric_expiration): every GPU query
    # keeps only sidecars whose last export is recent, and none groups by k8s labels (absent
    # outside Kubernetes, and on target_info only with the exporter's default settings).
    # The Jobs row reads the job records, built on gpu_sidecar:reporting (reporting sidecars
    # only, the pod's labels joined from target_info by the rules).
    _, targets = dashboard_targets()
    reporting = reporting_records()
    for title, t in targets:
        if "ALERTS" in t["expr"]:
            continue
        if promql_refs(t["expr"])[0] <= reporting - {"gpu_sidecar:reporting"}:
            continue
        assert "gpu_sidecar_export_last_success_seconds" in t["expr"], f"panel {title!r}: {t['expr']}"
        assert "k8s_" not in t["expr"], f"panel {title!r}: {t['expr']}"


# --- the alert rules ---


def all_rules():
    doc = load_yaml(RULES)
    return [r for g in doc["groups"] for r in g["rules"]]


def rules():
    return [r for r in all_rules() if "alert" in r]


def test_rules_use_exported_names(metrics_catalogue):
    records = {r["record"] for r in all_rules() if "record" in r}
    known = set(metrics_catalogue["prometheus"]) | records | {"target_info"}
    for r in all_rules():
        name = r.get("alert") or r["record"]
        metrics, labels = promql_refs(r["expr"])
        assert metrics, f"{name}: no metric"
        assert metrics <= known, f"{name}: {sorted(metrics - known)} not exported"
        assert labels <= metrics_catalogue["labels"], f"{name}: labels {sorted(labels - metrics_catalogue['labels'])}"
        for text in r.get("annotations", {}).values():
            for label in re.findall(r"\$labels\.([A-Za-z_][A-Za-z0-9_]*)", text):
                assert label in metrics_catalogue["labels"], f"{name}: annotation label {label}"


# The alerts on errors hold 5 minutes after the error, also when the sidecar stopped meanwhile
# (a job that crashed on the XID): they join the 5-minute variant of gpu_sidecar:reporting.
ERROR_ALERTS = {"GPUXidError", "GPUUncorrectedErrors"}


def reporting_records():
    """gpu_sidecar:reporting (and its 5-minute variant gpu_sidecar:reported_5m) and the records
    built on them (transitively): series of reporting sidecars only."""
    records = {r["record"]: promql_refs(r["expr"])[0] for r in all_rules() if "record" in r}
    out = {"gpu_sidecar:reporting", "gpu_sidecar:reported_5m"}
    while True:
        more = {name for name, refs in records.items() if refs & out} - out
        if not more:
            return out
        out |= more


def test_every_alert_counts_only_reporting_sidecars_and_groups_by_instance():
    reporting = reporting_records()
    assert "gpu_sidecar:job_member" in reporting
    job_group = {r["alert"] for g in load_yaml(RULES)["groups"] if g["name"] == "gpu-otel-sidecar.job"
                 for r in g["rules"] if "alert" in r}
    for r in rules():
        metrics, _ = promql_refs(r["expr"])
        assert metrics & reporting, f"{r['alert']}: not joined with gpu_sidecar:reporting"
        assert ("gpu_sidecar:reported_5m" in metrics) == (r["alert"] in ERROR_ALERTS), r["alert"]
        # A sidecar is (job, instance); pod labels come from target_info and may be absent.
        # A job's alerts compare the workers of one job (its records group by the job).
        for by in re.findall(r"\bby\s*\(([^)]*)\)", r["expr"]):
            if r["alert"] in job_group:
                assert {x.strip() for x in by.split(",")} >= {"k8s_namespace_name", "training_job"}, f"{r['alert']}: by ({by})"
            else:
                assert {x.strip() for x in by.split(",")} == {"job", "instance"}, f"{r['alert']}: by ({by})"


def test_rules_have_the_required_alerts():
    by_name = {r["alert"]: r for r in rules()}
    assert len(by_name) == len(rules()), "duplicate alert names"
    for name in ("GPUMemoryNearlyFull", "GPUTemperatureHigh", "GPUThermalThrottling"):
        assert name in by_name, f"missing alert {name}"
    for r in rules():
        assert r["labels"]["severity"] in ("info", "warning", "critical"), r["alert"]
        assert r["annotations"].get("summary") and r["annotations"].get("description"), r["alert"]
    mem = by_name["GPUMemoryNearlyFull"]
    assert "0.95" in mem["expr"] and mem["for"] == "10s"
    assert "85" in by_name["GPUTemperatureHigh"]["expr"]


# --- the golden export's Prometheus form ---


def test_golden_prometheus_form_names_each_metric_by_this_rule():
    """tests/golden/h200-export.prom (written by tests/agent/golden.rs, in Rust) has one family
    per metric of tests/golden/h200-export.json, named and typed as prometheus_names() here
    says, plus target_info: the two implementations of the translator agree."""
    golden = ROOT / "tests" / "golden"
    export = json.loads((golden / "h200-export.json").read_text())
    types = {}
    for line in (golden / "h200-export.prom").read_text().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
    expected = {"target_info": "gauge"}
    for rm in export["resourceMetrics"]:
        for sm in rm["scopeMetrics"]:
            for m in sm["metrics"]:
                if "gauge" in m:
                    instrument, kind = "gauge", "gauge"
                elif "sum" in m and m["sum"].get("isMonotonic"):
                    instrument, kind = "counter", "counter"
                elif "sum" in m:
                    instrument, kind = "updowncounter", "gauge"
                else:
                    assert "histogram" in m, m["name"]
                    instrument, kind = "histogram", "histogram"
                name = prometheus_names(m["name"], m["unit"], instrument)[0]
                expected[name.removesuffix("_bucket") if kind == "histogram" else name] = kind
    assert types == expected
