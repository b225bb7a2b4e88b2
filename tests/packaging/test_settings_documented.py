"""Every agent setting the packaging sets is one the agent knows and documents: a row of
docs/settings.md, which is generated from the agent's settings tables (the Rust test
`settings_doc_matches_the_tables` fails when the page and the code disagree). The agent
refuses unknown GPU_SIDECAR_* variables, so a typo or a setting of a newer agent would stop
the sidecar at startup."""

import re

from conftest import CHART, DOCKER, ROOT, env_map, load_yaml, render, sidecar_of

AGENT_PREFIXES = ("GPU_SIDECAR_", "OTEL_", "K8S_")
# Set by the chart only to build another value ($(K8S_HOST_IP) in the endpoint).
CHART_INTERNAL = {"K8S_HOST_IP"}
SETTINGS_DOC = ROOT / "docs" / "settings.md"


def documented():
    """Variables named in the first column of a docs/settings.md table row; a rule's
    `GPU_SIDECAR_RULE_<NAME>_{ENABLED,THRESHOLD}` row stands for each of its names."""
    page = SETTINGS_DOC.read_text(encoding="utf-8")
    names = set()
    for row in re.findall(r"^\| ([^|]+) \|", page, flags=re.M):
        for name in re.findall(r"`([A-Z][A-Z0-9_{},]+)`", row):
            m = re.fullmatch(r"([A-Z0-9_]+_)\{([A-Z0-9_,]+)\}", name)
            names |= {m.group(1) + s for s in m.group(2).split(",")} if m else {name}
    assert "GPU_SIDECAR_SAMPLE_INTERVAL" in names and "GPU_SIDECAR_WEBHOOK_TLS_CERT" in names
    return names


def known_to_agent():
    """GPU_SIDECAR_* settings the binary accepts: the ones docs/settings.md lists."""
    return {n for n in documented() if n.startswith("GPU_SIDECAR_")}


def unknown(names):
    """Names the agent would refuse or that docs/settings.md does not document."""
    own = {n for n in names if n.startswith("GPU_SIDECAR_")}
    return (own - known_to_agent()) | (agent_vars(names) - documented())


def agent_vars(names):
    return {n for n in names if n.startswith(AGENT_PREFIXES) and n not in CHART_INTERNAL}


def test_chart_settings_are_documented(helm):
    used = set()
    for sets in ([], ["mode=classic"], ["gpuVisibility.mode=dra"], ["gpuVisibility.mode=uuids", "gpuVisibility.uuids={GPU-1}"],
                 ["collector.headers.secretName=s", "telemetry.resourceAttributes.a=b"], ["hostNetwork=true"],
                 ["mode=classic", "classic.exitWithProcess=python3"]):
        used |= set(env_map(sidecar_of(render(helm, *sets).pod_spec, load_yaml(CHART / "values.yaml")["containerName"])[1]))
    missing = unknown(used)
    assert not missing, f"the chart sets {sorted(missing)}, which the agent or docs/settings.md does not know"


def test_webhook_settings_are_documented(helm):
    """The webhook's Deployment: every variable it sets is known to the binary and docs/settings.md."""
    used = set()
    for sets in ([], ["collector.headers.secretName=s", "collector.mode=service"], ["webhook.certificate.mode=cert-manager"],
                 ["webhook.certificate.mode=helm"]):
        deployments = render(helm, "webhook.enabled=true", *sets).of_kind("Deployment")
        assert deployments, "no webhook Deployment rendered"
        for d in deployments:
            for c in d["spec"]["template"]["spec"]["containers"]:
                used |= {e["name"] for e in c["env"]}
    assert {"GPU_SIDECAR_WEBHOOK_TLS_CERT", "GPU_SIDECAR_WEBHOOK_TLS_SECRET", "OTEL_EXPORTER_OTLP_ENDPOINT"} <= used
    missing = unknown(used)
    assert not missing, f"the webhook Deployment sets {sorted(missing)}, which the binary or docs/settings.md does not know"


def test_compose_and_image_settings_are_documented():
    env = set(load_yaml(DOCKER / "compose.yaml")["services"]["gpu-sidecar"]["environment"])
    env |= set(re.findall(r"\b([A-Z][A-Z0-9_]+)=", (ROOT / "Dockerfile").read_text()))
    missing = unknown(env)
    assert not missing, f"compose/Dockerfile set {sorted(missing)}, which the agent or docs/settings.md does not know"
