"""The alert rules pass promtool, as a file (docker/) and as the chart's PrometheusRule."""

import subprocess

import yaml

from conftest import DOCKER, ROOT, render

RULES = DOCKER / "prometheus-rules.yaml"


def run(cmd):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_promtool_check_rules_file(promtool):
    out = run([promtool, "check", "rules", RULES])
    assert "SUCCESS" in out


def test_promtool_unit_tests(promtool):
    out = run([promtool, "test", "rules", ROOT / "tests" / "packaging" / "prometheus-rules.test.yaml"])
    assert "SUCCESS" in out


def test_promtool_check_chart_prometheusrule(promtool, helm, tmp_path):
    rule = render(helm, "prometheusRule.enabled=true").one("PrometheusRule")
    path = tmp_path / "chart-rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    assert "SUCCESS" in run([promtool, "check", "rules", path])


def test_promtool_check_prometheus_config(promtool, tmp_path):
    # The config names its rule files by their path in the container: point the glob at
    # the repository's file for the check.
    cfg = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    cfg["rule_files"] = [str(RULES)]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    assert "SUCCESS" in run([promtool, "check", "config", path])


def test_docs_say_what_the_rules_are_written_for():
    """The rules, the collector config and the packaging tests assume the Prometheus
    exporter's defaults (resource attributes on target_info); every doc that mentions
    resource_to_telemetry_conversion says the rules work the same with it (the chart's README
    once said they needed it)."""
    header = RULES.read_text().split("groups:")[0]
    assert "DEFAULT settings" in header and "target_info" in header, header
    assert "With resource_to_telemetry_conversion enabled the rules work the same." in header
    docs = [ROOT / "README.md", ROOT / "helm" / "gpu-otel-sidecar" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    mentioned = []
    for doc in docs:
        for paragraph in doc.read_text().split("\n\n"):
            if "resource_to_telemetry_conversion" in paragraph:
                mentioned.append(doc.name)
                flat = " ".join(paragraph.split())
                assert "work the same" in flat and "target_info" in flat, f"{doc}: {flat}"
    assert "README.md" in mentioned, "the chart's README says which exporter settings the rules need"
