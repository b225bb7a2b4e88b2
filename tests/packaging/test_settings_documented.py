"""Every agent setting the packaging sets is one the agent knows: the README's settings
table lists it (the agent refuses unknown GPU_SIDECAR_* variables, so a typo here would
stop the sidecar at startup)."""

import re

from conftest import CHART, DOCKER, ROOT, env_map, load_yaml, render, sidecar_of

AGENT_PREFIXES = ("GPU_SIDECAR_", "OTEL_", "K8S_")
# Set by the chart only to build another value ($(K8S_HOST_IP) in the endpoint).
CHART_INTERNAL = {"K8S_HOST_IP"}


def documented():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return set(re.findall(r"`([A-Z][A-Z0-9_]+)`", readme))


def agent_vars(names):
    return {n for n in names if n.startswith(AGENT_PREFIXES) and n not in CHART_INTERNAL}


def test_chart_settings_are_documented(helm):
    used = set()
    for sets in ([], ["mode=classic"], ["gpuVisibility.mode=dra"], ["gpuVisibility.mode=uuids", "gpuVisibility.uuids={GPU-1}"],
                 ["collector.headers.secretName=s", "telemetry.resourceAttributes.a=b"]):
        used |= set(env_map(sidecar_of(render(helm, *sets).pod_spec, load_yaml(CHART / "values.yaml")["containerName"])[1]))
    missing = agent_vars(used) - documented()
    assert not missing, f"the chart sets {sorted(missing)}, which README.md does not document"


def test_compose_and_image_settings_are_documented():
    env = set(load_yaml(DOCKER / "compose.yaml")["services"]["gpu-sidecar"]["environment"])
    env |= set(re.findall(r"\b([A-Z][A-Z0-9_]+)=", (ROOT / "Dockerfile").read_text()))
    missing = agent_vars(env) - documented()
    assert not missing, f"compose/Dockerfile set {sorted(missing)}, which README.md does not document"
