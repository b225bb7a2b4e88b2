"""Every agent setting the packaging sets is one the agent knows: the agent's own list
(`KNOWN_SETTINGS` in src/config.rs; it refuses unknown GPU_SIDECAR_* variables, so a typo
or a setting of a newer agent would stop the sidecar at startup) and the README's settings
table (a row starting with the variable) both have it."""

import re

from conftest import CHART, DOCKER, ROOT, env_map, load_yaml, render, sidecar_of

AGENT_PREFIXES = ("GPU_SIDECAR_", "OTEL_", "K8S_")
# Set by the chart only to build another value ($(K8S_HOST_IP) in the endpoint).
CHART_INTERNAL = {"K8S_HOST_IP"}


def documented():
    """Variables named in the first column of a README table row."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    names = set()
    for row in re.findall(r"^\| ([^|]+) \|", readme, flags=re.M):
        names |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", row))
    return names


def known_to_agent():
    """GPU_SIDECAR_* settings the binary accepts: KNOWN_SETTINGS in src/config.rs, and the
    webhook command's table (SETTINGS in src/webhook/settings.rs)."""
    src = (ROOT / "src" / "config.rs").read_text(encoding="utf-8")
    block = re.search(r"pub const KNOWN_SETTINGS: &\[&str\] = &\[(.*?)\];", src, flags=re.S)
    assert block, "KNOWN_SETTINGS not found in src/config.rs"
    webhook = (ROOT / "src" / "webhook" / "settings.rs").read_text(encoding="utf-8")
    own = set(re.findall(r'^\s*name: "(GPU_SIDECAR_WEBHOOK_[A-Z0-9_]+)",$', webhook, flags=re.M))
    assert own, "no setting found in src/webhook/settings.rs"
    return {"GPU_SIDECAR_" + n for n in re.findall(r'"([A-Z0-9_]+)"', block.group(1))} | own


def unknown(names):
    """Names the agent would refuse or that the README does not document."""
    own = {n for n in names if n.startswith("GPU_SIDECAR_")}
    return (own - known_to_agent()) | (agent_vars(names) - documented())


def agent_vars(names):
    return {n for n in names if n.startswith(AGENT_PREFIXES) and n not in CHART_INTERNAL}


def test_chart_settings_are_documented(helm):
    used = set()
    for sets in ([], ["mode=classic"], ["gpuVisibility.mode=dra"], ["gpuVisibility.mode=uuids", "gpuVisibility.uuids={GPU-1}"],
                 ["collector.headers.secretName=s", "telemetry.resourceAttributes.a=b"]):
        used |= set(env_map(sidecar_of(render(helm, *sets).pod_spec, load_yaml(CHART / "values.yaml")["containerName"])[1]))
    missing = unknown(used)
    assert not missing, f"the chart sets {sorted(missing)}, which the agent or README.md does not know"


def test_webhook_settings_are_documented(helm):
    """The webhook's Deployment: every variable it sets is known to the binary and the README."""
    used = set()
    for sets in ([], ["collector.headers.secretName=s", "collector.mode=service"], ["webhook.certManager.enabled=true"]):
        deployments = render(helm, "webhook.enabled=true", *sets).of_kind("Deployment")
        assert deployments, "no webhook Deployment rendered"
        for d in deployments:
            for c in d["spec"]["template"]["spec"]["containers"]:
                used |= {e["name"] for e in c["env"]}
    assert {"GPU_SIDECAR_WEBHOOK_TLS_CERT", "OTEL_EXPORTER_OTLP_ENDPOINT"} <= used
    missing = unknown(used)
    assert not missing, f"the webhook Deployment sets {sorted(missing)}, which the binary or README.md does not know"


def test_compose_and_image_settings_are_documented():
    env = set(load_yaml(DOCKER / "compose.yaml")["services"]["gpu-sidecar"]["environment"])
    env |= set(re.findall(r"\b([A-Z][A-Z0-9_]+)=", (ROOT / "Dockerfile").read_text()))
    missing = unknown(env)
    assert not missing, f"compose/Dockerfile set {sorted(missing)}, which the agent or README.md does not know"
