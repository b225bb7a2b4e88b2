"""docker/compose.yaml and the configs it mounts fit together."""

import ast
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

from conftest import DOCKER, ROOT, check_config, load_yaml, trainer_settings

COMPOSE = DOCKER / "compose.yaml"
COLLECTOR = DOCKER / "otel-collector.yaml"


@pytest.fixture(scope="module")
def compose():
    return load_yaml(COMPOSE)


@pytest.fixture(scope="module")
def collector():
    return load_yaml(COLLECTOR)


def mounts(service):
    """container path -> (host path relative to docker/, read-only)."""
    out = {}
    for v in service.get("volumes") or []:
        parts = v.split(":")
        host, target = parts[0], parts[1]
        out[target] = (host, len(parts) > 2 and "ro" in parts[2].split(","))
    return out


def host_file(host):
    return (DOCKER / host).resolve()


def gpu_devices(service):
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert len(devices) == 1
    return devices[0]


def test_services(compose):
    assert set(compose["services"]) == {"trainer", "gpu-sidecar", "otel-collector", "prometheus", "grafana"}
    for name, svc in compose["services"].items():
        image = svc.get("image", "")
        if name != "trainer":
            assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image tag ({image})"


def test_trainer(compose):
    t = compose["services"]["trainer"]
    assert t["image"] == "tensorflow/tensorflow:latest-gpu"
    m = mounts(t)
    script_dir = [target for target, (host, ro) in m.items() if host.startswith("./trainer")]
    assert script_dir, "trainer script not mounted"
    host, ro = m[script_dir[0]]
    assert ro, "trainer script must be mounted read-only"
    script = " ".join(t["command"])
    assert f"{script_dir[0]}/train.py" in script
    train = host_file(host) / "train.py"
    ast.parse(train.read_text(encoding="utf-8"), filename=str(train))
    # synthetic data only: no dataset or weights download
    src = train.read_text(encoding="utf-8")
    assert "weights=None" in src and "tf.random" in src
    assert not re.search(r"(tfds|keras\.datasets|get_file|https?://)", src)
    d = gpu_devices(t)
    assert d["driver"] == "nvidia" and "gpu" in d["capabilities"]


def test_sidecar_gets_same_gpus_utility_only(compose):
    trainer, sidecar = compose["services"]["trainer"], compose["services"]["gpu-sidecar"]
    t, s = gpu_devices(trainer), gpu_devices(sidecar)
    assert s["driver"] == "nvidia"
    assert s.get("device_ids") == t.get("device_ids") and s.get("count") == t.get("count"), \
        "the sidecar must be given the trainer's GPUs"
    nvidia_caps = set(s["capabilities"]) - {"gpu", "nvidia"}
    assert nvidia_caps == {"utility"}, f"sidecar driver capabilities: {nvidia_caps}"
    assert sidecar["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "utility"


def test_sidecar_hardening_and_build(compose):
    s = compose["services"]["gpu-sidecar"]
    assert s["read_only"] is True
    assert s["cap_drop"] == ["ALL"]
    assert any(o.replace("=", ":").startswith("no-new-privileges:true") for o in s["security_opt"])
    uid = str(s["user"]).split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    build = s["build"]
    context = (DOCKER / build["context"]).resolve()
    assert context == ROOT
    assert (context / build["dockerfile"]).is_file()


def test_sidecar_exports_to_the_collector(compose, collector):
    env = compose["services"]["gpu-sidecar"]["environment"]
    url = urlparse(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert url.hostname == "otel-collector"
    proto = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    receiver = collector["receivers"]["otlp"]["protocols"]["grpc" if proto == "grpc" else "http"]
    assert url.port == int(receiver["endpoint"].rsplit(":", 1)[1])
    # The resource names the trainer container.
    attrs = dict(kv.split("=", 1) for kv in env["OTEL_RESOURCE_ATTRIBUTES"].split(","))
    assert attrs.get("container.name") == "trainer"
    assert env["OTEL_METRIC_EXPORT_INTERVAL"].isdigit()


def test_sidecar_environment_passes_the_agents_config_check(compose, agent_binary):
    env = {k: str(v) for k, v in compose["services"]["gpu-sidecar"]["environment"].items()}
    rc, out, err = check_config(agent_binary, env)
    assert rc == 0, f"the agent refuses the compose environment: {err}"
    assert out["resource"]["container.name"] == "trainer"
    assert out["otlp"]["metrics"]["endpoint"] == env["OTEL_EXPORTER_OTLP_ENDPOINT"]


def test_collector_mounted_with_its_config(compose):
    c = compose["services"]["otel-collector"]
    assert "opentelemetry-collector-contrib" in c["image"]
    m = mounts(c)
    config_args = [a.split("=", 1)[1] for a in c["command"] if a.startswith("--config=")]
    assert config_args and config_args[0] in m
    host, ro = m[config_args[0]]
    assert ro and host_file(host) == COLLECTOR.resolve()


# Component types of the contrib distribution that this config may use.
KNOWN_TYPES = {
    "receivers": {"otlp", "prometheus", "hostmetrics"},
    "processors": {"batch", "memory_limiter", "resource", "attributes", "resourcedetection",
                   "k8sattributes", "filter", "transform"},
    "exporters": {"debug", "prometheus", "otlp", "otlphttp", "prometheusremotewrite", "file"},
    "extensions": {"health_check", "pprof", "zpages"},
}


def test_collector_pipelines_reference_defined_components(collector):
    pipelines = collector["service"]["pipelines"]
    assert {"metrics", "logs"} <= {p.split("/")[0] for p in pipelines}
    used = {kind: set() for kind in ("receivers", "processors", "exporters")}
    for pname, p in pipelines.items():
        assert p.get("receivers") and p.get("exporters"), f"pipeline {pname} incomplete"
        for kind in used:
            for comp in p.get(kind) or []:
                assert comp in (collector.get(kind) or {}), f"pipeline {pname}: {kind[:-1]} {comp!r} is not defined"
                used[kind].add(comp)
    for kind in used:
        for comp in collector.get(kind) or {}:
            assert comp.split("/")[0] in KNOWN_TYPES[kind], f"unknown {kind[:-1]} type {comp!r}"
            assert comp in used[kind], f"{kind[:-1]} {comp!r} defined but used by no pipeline"
    for ext in collector["service"].get("extensions") or []:
        assert ext in collector["extensions"], f"extension {ext!r} not defined"
        assert ext.split("/")[0] in KNOWN_TYPES["extensions"]
    # OTLP in over both transports; Prometheus out.
    assert {"grpc", "http"} <= set(collector["receivers"]["otlp"]["protocols"])
    assert "prometheus" in pipelines["metrics"]["exporters"]
    assert any(e.split("/")[0] == "debug" for e in pipelines["metrics"]["exporters"])
    # The exporter's default shapes (resource on target_info; job/instance on every series),
    # which the rules and the dashboard are written and tested for.
    prom = collector["exporters"]["prometheus"]
    assert not (prom.get("resource_to_telemetry_conversion") or {}).get("enabled"), prom
    assert prom.get("add_metric_suffixes", True) is True
    # A stopped sidecar's series do not linger for the default 5 minutes.
    assert prom["metric_expiration"] in ("30s", "1m"), prom
    # The processors run memory_limiter first, as the collector's docs ask.
    for p in pipelines.values():
        procs = p.get("processors") or []
        if "memory_limiter" in procs:
            assert procs[0] == "memory_limiter"


def test_prometheus_scrapes_the_collector_and_loads_the_rules(compose, collector):
    p = compose["services"]["prometheus"]
    m = mounts(p)
    cfg_path = [a.split("=", 1)[1] for a in p["command"] if a.startswith("--config.file=")][0]
    host, ro = m[cfg_path]
    assert ro
    cfg = load_yaml(host_file(host))
    port = collector["exporters"]["prometheus"]["endpoint"].rsplit(":", 1)[1]
    targets = [t for sc in cfg["scrape_configs"] for s in sc["static_configs"] for t in s["targets"]]
    assert f"otel-collector:{port}" in targets
    # job/instance are the sidecars' (service.name, service.instance.id), not the collector's.
    assert all(sc.get("honor_labels") is True for sc in cfg["scrape_configs"])
    rule_globs = cfg["rule_files"]
    rule_mounts = [(target, host) for target, (host, ro) in m.items() if Path(host).name == "prometheus-rules.yaml"]
    assert rule_mounts, "rules file not mounted"
    import fnmatch
    assert any(fnmatch.fnmatch(rule_mounts[0][0], g) for g in rule_globs), "mounted rules not matched by rule_files"


def test_grafana_provisioning(compose):
    g = compose["services"]["grafana"]
    m = mounts(g)
    prov = m["/etc/grafana/provisioning"]
    assert prov[1]
    prov_dir = host_file(prov[0])
    ds = load_yaml(prov_dir / "datasources" / "prometheus.yaml")["datasources"][0]
    assert ds["type"] == "prometheus" and urlparse(ds["url"]).hostname == "prometheus"
    assert urlparse(ds["url"]).port == int(compose["services"]["prometheus"]["ports"][0].rsplit(":", 1)[1])
    provider = load_yaml(prov_dir / "dashboards" / "gpu-otel-sidecar.yaml")["providers"][0]
    dash_dir = provider["options"]["path"]
    assert dash_dir in m, "dashboard directory not mounted where the provider looks"
    assert (host_file(m[dash_dir][0]) / "gpu-otel-sidecar.json").is_file()
    home = g["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(dash_dir + "/") and (host_file(m[dash_dir][0]) / Path(home).name).is_file()


def test_every_trainer_setting_is_passed_to_the_trainer(compose):
    """Each TRAIN_* the training script reads (and the docs say changes it) reaches it from
    the environment or .env, with the script's own default; compose's header names them all."""
    env = compose["services"]["trainer"]["environment"]
    header = COMPOSE.read_text().split("services:")[0]
    for name, default in trainer_settings().items():
        assert env.get(name) == f"${{{name}:-{default}}}", f"{name}: {env.get(name)!r}"
        assert name in header, f"{name} is not named in compose.yaml's settings"
