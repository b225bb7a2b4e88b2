"""The Helm chart: sidecar placement, environment, securityContext and GPU visibility per mode,
the guards that refuse values that cannot work, and injection into another chart."""

import json
import re
import shutil
import subprocess

import pytest
import yaml

from conftest import (
    CHART,
    DOCKER,
    ROOT,
    check_config,
    env_map,
    helm_template,
    kube_env,
    load_yaml,
    render,
    sidecar_of,
    trainer_settings,
)

VALUES = load_yaml(CHART / "values.yaml")
SIDECAR = VALUES["containerName"]
TRAINER = VALUES["targetContainerName"]
UUIDS = ["GPU-8f6c2a7e-0c1d-4f7b-9a2b-1234567890ab", "MIG-5b7e0d2c-9f3a-5e1b-8c4d-abcdef012345"]

VISIBILITY = {
    "pod-resources": [],
    "dra": ["gpuVisibility.mode=dra"],
    "uuids": ["gpuVisibility.mode=uuids", "gpuVisibility.uuids={" + ",".join(UUIDS) + "}"],
    "all": ["gpuVisibility.mode=all"],
}


def container(pod_spec, name):
    for where in ("initContainers", "containers"):
        for c in pod_spec.get(where) or []:
            if c["name"] == name:
                return c
    raise AssertionError(f"no container {name}")


# --- placement ---------------------------------------------------------------------------


@pytest.mark.parametrize("visibility", sorted(VISIBILITY))
def test_native_sidecar_is_an_init_container_with_restart_always(helm, visibility):
    r = render(helm, *VISIBILITY[visibility])
    spec = r.pod_spec
    where, sc = sidecar_of(spec, SIDECAR)
    assert where == "initContainers"
    assert sc["restartPolicy"] == "Always"
    assert spec["restartPolicy"] == "Never"
    assert "shareProcessNamespace" not in spec
    assert [c["name"] for c in spec["containers"]] == [TRAINER]
    assert "GPU_SIDECAR_EXIT_WITH_PROCESS" not in env_map(sc)


@pytest.mark.parametrize("visibility", sorted(VISIBILITY))
def test_classic_sidecar_shares_the_process_namespace_and_exits_with_the_trainer(helm, visibility):
    r = render(helm, "mode=classic", *VISIBILITY[visibility])
    spec = r.pod_spec
    where, sc = sidecar_of(spec, SIDECAR)
    assert where == "containers"
    assert "restartPolicy" not in sc
    assert spec["shareProcessNamespace"] is True
    assert "initContainers" not in spec
    # It follows the pod's other containers, whatever the trainer's process is called.
    env = env_map(sc)
    assert env["GPU_SIDECAR_EXIT_WITH_CONTAINERS"] == "true"
    assert "GPU_SIDECAR_EXIT_WITH_PROCESS" not in env
    # After the trainer in the pod's containers: the kubelet starts them in this order, so a
    # trainer shorter than the sidecar's start has run (and ended) when the sidecar looks.
    names = [c["name"] for c in spec["containers"]]
    assert names.index(TRAINER) < names.index(SIDECAR)
    # Or a process name, when asked.
    sc = sidecar_of(render(helm, "mode=classic", "classic.exitWithProcess=python3", *VISIBILITY[visibility]).pod_spec, SIDECAR)[1]
    env = env_map(sc)
    assert env["GPU_SIDECAR_EXIT_WITH_PROCESS"] == "python3"
    assert "GPU_SIDECAR_EXIT_WITH_CONTAINERS" not in env


def test_classic_mode_renders_for_old_clusters_and_native_refuses_them(helm):
    r = render(helm, "mode=classic", kube_version="1.25.0")
    assert sidecar_of(r.pod_spec, SIDECAR)[0] == "containers"
    proc = helm_template(helm, kube_version="1.28.0", check=False)
    assert proc.returncode != 0 and "mode native needs Kubernetes >= 1.29" in proc.stderr


# --- environment -------------------------------------------------------------------------

DOWNWARD = {
    "K8S_POD_NAME": "metadata.name",
    "K8S_POD_UID": "metadata.uid",
    "K8S_NAMESPACE_NAME": "metadata.namespace",
    "K8S_NODE_NAME": "spec.nodeName",
}


@pytest.mark.parametrize("mode", ["native", "classic"])
def test_downward_api_env(helm, mode):
    r = render(helm, f"mode={mode}", "targetContainerName=trainer")
    env = env_map(sidecar_of(r.pod_spec, SIDECAR)[1])
    for name, path in DOWNWARD.items():
        assert env[name] == ("fieldRef", path), name
    assert env["K8S_CONTAINER_NAME"] == "trainer"
    container(r.pod_spec, "trainer")  # the named container exists
    assert env["OTEL_SERVICE_NAME"] == "gpu-otel-sidecar"
    assert env["OTEL_METRIC_EXPORT_INTERVAL"] == "10000"
    assert env["GPU_SIDECAR_SAMPLE_INTERVAL"] == "5s"
    assert env["GPU_SIDECAR_HEALTH_ADDR"] == f"0.0.0.0:{VALUES['health']['port']}"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"


# --- the pod's workload (docs/kubernetes.md#jobs) ------------------------------------------

WEBHOOK_FIXTURES = ROOT / "tests" / "fixtures" / "webhook"
JOB_RESOURCES = json.loads((WEBHOOK_FIXTURES / "job-resources.json").read_text(encoding="utf-8"))
JOB_FIXTURES = sorted(k for k in JOB_RESOURCES if k.endswith(".json"))


def label_variable(key):
    """The agent's variable for the pod label `key` (src/config/job.rs, label_variable)."""
    return "K8S_POD_LABEL_" + re.sub(r"[^A-Za-z0-9]", "_", key).upper()


def test_pod_labels_are_downward_api_variables(helm, tmp_path):
    """Each label of telemetry.podLabels, and the three read for k8s.job.name, is one variable
    with its fieldRef; GPU_SIDECAR_POD_LABELS names the list. A list of your own replaces it."""
    env = env_map(sidecar_of(render(helm).pod_spec, SIDECAR)[1])
    keys = VALUES["telemetry"]["podLabels"]
    assert "training.kubeflow.org/job-name" in keys and "jobset.sigs.k8s.io/jobset-name" in keys
    for key in ["batch.kubernetes.io/job-name", "job-name", "controller-uid", *keys]:
        assert env[label_variable(key)] == ("fieldRef", f"metadata.labels['{key}']"), key
    assert env["GPU_SIDECAR_POD_LABELS"] == ",".join(keys)
    assert env["K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_JOB_NAME"] == ("fieldRef", "metadata.labels['training.kubeflow.org/job-name']")
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"telemetry": {"podLabels": ["team", "example.com/run-id"]}}), encoding="utf-8")
    env = env_map(sidecar_of(render(helm, extra_args=["-f", str(values)]).pod_spec, SIDECAR)[1])
    assert env["GPU_SIDECAR_POD_LABELS"] == "team,example.com/run-id"
    assert env["K8S_POD_LABEL_EXAMPLE_COM_RUN_ID"] == ("fieldRef", "metadata.labels['example.com/run-id']")
    assert "K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_JOB_NAME" not in env


@pytest.mark.parametrize("review", JOB_FIXTURES)
def test_named_templates_give_the_pods_job_to_the_agent(helm, agent_binary, review):
    """The named templates' sidecar, resolved against the webhook fixture's pod as the kubelet
    would (its labels), gives check-config the same workload attributes as the webhook's patch
    (tests/webhook/webhook.rs reads the same table)."""
    pod = json.loads((WEBHOOK_FIXTURES / review).read_text(encoding="utf-8"))["request"]["object"]
    _, sc = sidecar_of(render(helm).pod_spec, SIDECAR)
    rc, out, err = check_config(agent_binary, kube_env(sc, labels=pod["metadata"]["labels"]))
    assert rc == 0, f"the agent refuses the rendered environment: {err}"
    workload = {k: v for k, v in out["resource"].items() if k == "k8s.job.name" or k.startswith("k8s.pod.label.")}
    assert workload == JOB_RESOURCES[review]


def test_a_pod_label_variable_of_no_listed_key_is_refused(helm, agent_binary):
    _, sc = sidecar_of(render(helm).pod_spec, SIDECAR)
    env = kube_env(sc)
    env["K8S_POD_LABEL_TEAM"] = "vision"
    rc, _, err = check_config(agent_binary, env)
    assert rc == 2 and "K8S_POD_LABEL_TEAM" in err and "GPU_SIDECAR_POD_LABELS" in err, err


def test_endpoint_node_local_agent(helm):
    sc = sidecar_of(render(helm).pod_spec, SIDECAR)[1]
    names = [e["name"] for e in sc["env"]]
    env = env_map(sc)
    assert env["K8S_HOST_IP"] == ("fieldRef", "status.hostIP")
    # $(VAR) expansion needs the variable defined earlier in the list.
    assert names.index("K8S_HOST_IP") < names.index("OTEL_EXPORTER_OTLP_ENDPOINT")
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://$(K8S_HOST_IP):4317"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in env
    http = env_map(sidecar_of(render(helm, "collector.protocol=http/protobuf").pod_spec, SIDECAR)[1])
    assert http["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://$(K8S_HOST_IP):4318"
    assert http["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"


def test_endpoint_service_and_headers_from_secret(helm):
    r = render(helm, "collector.mode=service", "collector.service.name=otelcol-gateway",
               "collector.service.namespace=observability", "collector.headers.secretName=otlp-auth",
               "collector.headers.secretKey=otlp-headers", "telemetry.resourceAttributes.team=vision",
               "telemetry.resourceAttributes.deployment\\.environment\\.name=prod")
    env = env_map(sidecar_of(r.pod_spec, SIDECAR)[1])
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otelcol-gateway.observability.svc.cluster.local:4317"
    assert "K8S_HOST_IP" not in env
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == ("secretKeyRef", "otlp-auth", "otlp-headers")
    assert env["OTEL_RESOURCE_ATTRIBUTES"] == "deployment.environment.name=prod,team=vision"
    r = render(helm, "collector.mode=endpoint", "collector.endpoint=https://otlp.example.net:4317")
    assert env_map(sidecar_of(r.pod_spec, SIDECAR)[1])["OTEL_EXPORTER_OTLP_ENDPOINT"] == "https://otlp.example.net:4317"


# --- securityContext and resources -------------------------------------------------------


def assert_restricted(sc, non_root=True):
    s = sc["securityContext"]
    assert s["allowPrivilegeEscalation"] is False
    assert s["readOnlyRootFilesystem"] is True
    assert s["capabilities"]["drop"] == ["ALL"]
    assert not s["capabilities"].get("add")
    assert s["seccompProfile"]["type"] == "RuntimeDefault"
    assert s.get("privileged", False) is False
    if non_root:
        assert s["runAsNonRoot"] is True
        assert s["runAsUser"] != 0
    else:
        assert s["runAsUser"] == 0 and s["runAsNonRoot"] is False


@pytest.mark.parametrize("mode", ["native", "classic"])
@pytest.mark.parametrize("visibility", ["dra", "uuids", "all"])
def test_security_context_restricted(helm, mode, visibility):
    sc = sidecar_of(render(helm, f"mode={mode}", *VISIBILITY[visibility]).pod_spec, SIDECAR)[1]
    assert_restricted(sc)


@pytest.mark.parametrize("mode", ["native", "classic"])
def test_security_context_pod_resources(helm, mode):
    # The kubelet's pod-resources socket accepts root only: UID 0, everything else restricted.
    sc = sidecar_of(render(helm, f"mode={mode}").pod_spec, SIDECAR)[1]
    assert_restricted(sc, non_root=False)
    sc = sidecar_of(render(helm, f"mode={mode}", "gpuVisibility.podResources.runAsRoot=false").pod_spec, SIDECAR)[1]
    assert_restricted(sc)


def quantity(q):
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    m = re.fullmatch(r"([0-9.]+)(m|Ki|Mi|Gi)?", str(q))
    return float(m.group(1)) * units.get(m.group(2), 1)


def test_small_requests_and_limits(helm):
    sc = sidecar_of(render(helm).pod_spec, SIDECAR)[1]
    res = sc["resources"]
    assert quantity(res["requests"]["cpu"]) <= 0.1
    assert quantity(res["requests"]["memory"]) <= 64 * 2**20
    assert quantity(res["limits"]["memory"]) <= 128 * 2**20
    assert quantity(res["limits"]["cpu"]) <= 0.5
    assert "nvidia.com/gpu" not in res.get("limits", {}), "a sidecar cannot take a device-plugin GPU"


@pytest.mark.parametrize("root, path", [
    ("/var/lib/k0s/kubelet", "/var/lib/k0s/kubelet/pod-resources"),
    ("/var/snap/microk8s/common/var/lib/kubelet/", "/var/snap/microk8s/common/var/lib/kubelet/pod-resources"),
])
def test_kubelet_root_moves_the_host_path_not_the_socket_in_the_container(helm, root, path):
    spec = render(helm, f"kubeletRoot={root}").pod_spec
    [vol] = hostpath_volumes(spec)
    assert vol["hostPath"] == {"path": path, "type": "DirectoryOrCreate"}
    sc = sidecar_of(spec, SIDECAR)[1]
    [mount] = sc["volumeMounts"]
    assert mount["mountPath"] == "/var/lib/kubelet/pod-resources"
    assert env_map(sc)["GPU_SIDECAR_POD_RESOURCES_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    # An explicit hostPath wins.
    spec = render(helm, f"kubeletRoot={root}", "gpuVisibility.podResources.hostPath=/run/kubelet/pod-resources").pod_spec
    assert hostpath_volumes(spec)[0]["hostPath"]["path"] == "/run/kubelet/pod-resources"


@pytest.mark.parametrize("mode", ["native", "classic"])
def test_host_network_pods_declare_no_port_and_are_probed_over_a_socket(helm, mode):
    """In a hostNetwork pod a declared port is the node's: two such pods on a node collide."""
    r = render(helm, f"mode={mode}", "hostNetwork=true", "health.readinessProbe.enabled=true")
    spec = r.pod_spec
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    sc = sidecar_of(spec, SIDECAR)[1]
    assert "ports" not in sc
    assert sc["livenessProbe"]["exec"]["command"] == ["/gpu-otel-sidecar", "health", "--liveness"]
    assert sc["readinessProbe"]["exec"]["command"] == ["/gpu-otel-sidecar", "health"]
    assert "httpGet" not in sc["livenessProbe"] and "httpGet" not in sc["readinessProbe"]
    env = env_map(sc)
    assert env["GPU_SIDECAR_HEALTH_ADDR"] == "unix:/run/gpu-otel-sidecar/health.sock"
    mounts = {m["name"]: m for m in sc["volumeMounts"]}
    assert mounts["gpu-otel-sidecar-run"]["mountPath"] == "/run/gpu-otel-sidecar"
    assert "readOnly" not in mounts["gpu-otel-sidecar-run"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["gpu-otel-sidecar-run"] == {"name": "gpu-otel-sidecar-run", "emptyDir": {}}
    # Not in other pods.
    sc = sidecar_of(render(helm, f"mode={mode}").pod_spec, SIDECAR)[1]
    assert sc["ports"][0]["containerPort"] == VALUES["health"]["port"]


def test_probes(helm):
    sc = sidecar_of(render(helm).pod_spec, SIDECAR)[1]
    port = {p["name"]: p["containerPort"] for p in sc["ports"]}
    assert sc["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert port[sc["livenessProbe"]["httpGet"]["port"]] == VALUES["health"]["port"]
    assert "readinessProbe" not in sc, "sidecar readiness must not gate the pod by default"
    sc = sidecar_of(render(helm, "health.readinessProbe.enabled=true").pod_spec, SIDECAR)[1]
    assert sc["readinessProbe"]["httpGet"]["path"] == "/readyz"


# --- GPU visibility ----------------------------------------------------------------------


def hostpath_volumes(spec):
    return [v for v in spec.get("volumes") or [] if "hostPath" in v]


@pytest.mark.parametrize("mode", ["native", "classic"])
def test_visibility_pod_resources(helm, mode):
    r = render(helm, f"mode={mode}")
    spec = r.pod_spec
    sc = sidecar_of(spec, SIDECAR)[1]
    env = env_map(sc)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["GPU_SIDECAR_DEVICES"] == "pod-resources"
    assert env["GPU_SIDECAR_POD_RESOURCES_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    [vol] = hostpath_volumes(spec)
    # DirectoryOrCreate: a node whose kubelet keeps its sockets elsewhere still starts the pod.
    assert vol["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "DirectoryOrCreate"}
    [mount] = sc["volumeMounts"]
    assert mount["name"] == vol["name"] and mount["readOnly"] is True
    assert env["GPU_SIDECAR_POD_RESOURCES_SOCKET"].startswith(mount["mountPath"] + "/")
    # The trainer holds the device-plugin GPU and mounts nothing of the host.
    trainer = container(spec, TRAINER)
    assert trainer["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert all(m["name"] != vol["name"] for m in trainer.get("volumeMounts") or [])
    assert "resourceClaims" not in spec and not r.of_kind("ResourceClaimTemplate")


@pytest.mark.parametrize("mode", ["native", "classic"])
def test_visibility_dra_shared_claim(helm, mode):
    r = render(helm, f"mode={mode}", "gpuVisibility.mode=dra")
    spec = r.pod_spec
    sc = sidecar_of(spec, SIDECAR)[1]
    trainer = container(spec, TRAINER)
    env = env_map(sc)
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["GPU_SIDECAR_DEVICES"] == "all"
    assert sc["resources"]["claims"] == [{"name": "gpu"}]
    assert trainer["resources"]["claims"] == [{"name": "gpu"}]
    assert "nvidia.com/gpu" not in trainer["resources"].get("limits", {})
    [claim] = spec["resourceClaims"]
    rct = r.one("ResourceClaimTemplate")
    assert claim == {"name": "gpu", "resourceClaimTemplateName": rct["metadata"]["name"]}
    assert rct["apiVersion"] == "resource.k8s.io/v1beta1"
    [req] = rct["spec"]["spec"]["devices"]["requests"]
    assert req["deviceClassName"] == "gpu.nvidia.com" and req["count"] == 1
    assert not hostpath_volumes(spec)
    assert_restricted(sc)


def test_visibility_dra_v1_and_existing_claim(helm):
    r = render(helm, "gpuVisibility.mode=dra", kube_version="1.34.0",
               extra_args=["--api-versions", "resource.k8s.io/v1/ResourceClaimTemplate"])
    rct = r.one("ResourceClaimTemplate")
    assert rct["apiVersion"] == "resource.k8s.io/v1"
    assert rct["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    r = render(helm, "gpuVisibility.mode=dra", "gpuVisibility.dra.resourceClaimName=team-gpus")
    assert r.pod_spec["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "team-gpus"}]
    assert not r.of_kind("ResourceClaimTemplate")
    proc = helm_template(helm, "--set", "gpuVisibility.mode=dra", kube_version="1.29.0", check=False)
    assert proc.returncode != 0 and "needs Kubernetes >= 1.32" in proc.stderr


def test_visibility_uuids(helm):
    spec = render(helm, *VISIBILITY["uuids"]).pod_spec
    env = env_map(sidecar_of(spec, SIDECAR)[1])
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(UUIDS)
    assert env["GPU_SIDECAR_DEVICES"] == ",".join(UUIDS)
    assert not hostpath_volumes(spec)
    proc = helm_template(helm, "--set", "gpuVisibility.mode=uuids", check=False)
    assert proc.returncode != 0 and "needs gpuVisibility.uuids" in proc.stderr
    proc = helm_template(helm, "--set", "gpuVisibility.mode=uuids", "--set", "gpuVisibility.uuids={0}", check=False)
    assert proc.returncode != 0 and "values don't meet the specifications" in proc.stderr


def test_visibility_all_warns(helm, tmp_path):
    spec = render(helm, *VISIBILITY["all"]).pod_spec
    env = env_map(sidecar_of(spec, SIDECAR)[1])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["GPU_SIDECAR_DEVICES"] == "all"
    assert "every GPU on the node is reported" in notes(helm, tmp_path, "gpuVisibility.mode=all")
    assert "every GPU on the node" not in notes(helm, tmp_path, "gpuVisibility.mode=dra")


def notes(helm, tmp_path, *sets):
    """NOTES.txt rendered (helm template does not render it; wrap it in a ConfigMap)."""
    chart = tmp_path / "chart"
    if chart.exists():
        shutil.rmtree(chart)
    shutil.copytree(CHART, chart)
    shutil.copy(CHART / "templates" / "NOTES.txt", chart / "files" / "NOTES.txt")
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "zz-notes.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n'
        '  notes: {{ tpl (.Files.Get "files/NOTES.txt") . | quote }}\n'
    )
    r = render(helm, *sets, chart=chart)
    return [d for d in r.of_kind("ConfigMap") if d["metadata"]["name"] == "notes"][0]["data"]["notes"]


def test_notes_render_for_every_mode(helm, tmp_path):
    for mode in ("native", "classic"):
        for vis in VISIBILITY:
            text = notes(helm, tmp_path, f"mode={mode}", *VISIBILITY[vis])
            assert f"Sidecar placement: {mode}" in text and f"GPU visibility: {vis}" in text


# --- values guards and schema ------------------------------------------------------------


@pytest.mark.parametrize("bad", ["mode=sidecar", "gpuVisibility.mode=nvidia", "collector.protocol=udp",
                                 "telemetry.logFormat=xml", "health.port=0", "unknownKey=1"])
def test_schema_rejects(helm, bad):
    proc = helm_template(helm, "--set", bad, check=False)
    assert proc.returncode != 0, f"{bad} was accepted"


def test_schema_accepts_a_global_section(helm):
    render(helm, "global.imageRegistry=example.org")


# --- the example Job, the rules, the script -----------------------------------------------


def test_example_job_runs_the_compose_training_script(helm):
    r = render(helm)
    assert (CHART / "files" / "train.py").read_bytes() == (DOCKER / "trainer" / "train.py").read_bytes(), \
        "helm/gpu-otel-sidecar/files/train.py must be a copy of docker/trainer/train.py"
    cm = [d for d in r.of_kind("ConfigMap") if "train.py" in d.get("data", {})][0]
    assert cm["data"]["train.py"].strip() == (DOCKER / "trainer" / "train.py").read_text().strip()
    trainer = container(r.pod_spec, TRAINER)
    assert trainer["image"] == "tensorflow/tensorflow:latest-gpu"
    mount = [m for m in trainer["volumeMounts"] if m["mountPath"] == "/opt/trainer"][0]
    vol = [v for v in r.pod_spec["volumes"] if v["name"] == mount["name"]][0]
    assert vol["configMap"]["name"] == cm["metadata"]["name"]
    assert trainer["command"][-1] == "/opt/trainer/train.py"
    assert not render(helm, "example.enabled=false").of_kind("Job")


def test_example_job_passes_every_trainer_setting(helm):
    """The example Job sets each TRAIN_* the training script reads, with the script's
    default, and a value changes it."""
    want = trainer_settings()
    env = env_map(container(render(helm).pod_spec, TRAINER))
    assert {k: v for k, v in env.items() if k.startswith("TRAIN_")} == want
    env = env_map(container(render(helm, "example.imageSize=224", "example.mixedPrecision=true").pod_spec, TRAINER))
    assert (env["TRAIN_IMAGE_SIZE"], env["TRAIN_MIXED_PRECISION"]) == ("224", "1")


def test_prometheus_rule_is_the_docker_rules_file(helm):
    assert (CHART / "files" / "prometheus-rules.yaml").read_bytes() == (DOCKER / "prometheus-rules.yaml").read_bytes(), \
        "helm/gpu-otel-sidecar/files/prometheus-rules.yaml must be a copy of docker/prometheus-rules.yaml"
    assert not render(helm).of_kind("PrometheusRule")
    rule = render(helm, "prometheusRule.enabled=true", "prometheusRule.labels.release=kube-prometheus-stack").one("PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == load_yaml(DOCKER / "prometheus-rules.yaml")


# --- injection into a user's chart ---------------------------------------------------------


@pytest.fixture
def parent_chart(tmp_path):
    chart = tmp_path / "my-training"
    shutil.copytree(ROOT / "tests" / "packaging" / "fixtures" / "my-training", chart)
    shutil.copytree(CHART, chart / "charts" / "gpu-otel-sidecar")
    return chart


@pytest.mark.parametrize("mode", ["native", "classic"])
@pytest.mark.parametrize("visibility", ["pod-resources", "dra"])
def test_injection_into_another_chart(helm, parent_chart, mode, visibility):
    r = render(helm, f"gpu-otel-sidecar.mode={mode}", f"gpu-otel-sidecar.gpuVisibility.mode={visibility}",
               chart=parent_chart, release="exp1")
    job = r.job
    assert job["metadata"]["name"] == "exp1-learn"
    spec = job["spec"]["template"]["spec"]
    where, sc = sidecar_of(spec, SIDECAR)
    assert where == ("initContainers" if mode == "native" else "containers")
    # the user's own init container stays first
    assert spec["initContainers"][0]["name"] == "fetch-data"
    assert sc["image"] == f"gpu-otel-sidecar:{yaml.safe_load((CHART / 'Chart.yaml').read_text())['appVersion']}"
    env = env_map(sc)
    assert env["K8S_CONTAINER_NAME"] == "learner"
    assert spec.get("shareProcessNamespace", False) is (mode == "classic")
    if visibility == "dra":
        [claim] = spec["resourceClaims"]
        assert claim["resourceClaimTemplateName"] == r.one("ResourceClaimTemplate")["metadata"]["name"]
        assert container(spec, "learner")["resources"]["claims"] == [{"name": "gpu"}]
    else:
        assert env["GPU_SIDECAR_DEVICES"] == "pod-resources"
        assert hostpath_volumes(spec)
    assert not [d for d in r.docs if d["kind"] == "Job" and d["metadata"]["name"] != "exp1-learn"], \
        "the example Job must not be rendered when disabled"


@pytest.mark.parametrize("policy", ["Never", "OnFailure", "Always"])
def test_classic_templates_follow_the_pods_restart_policy(helm, parent_chart, policy):
    """classic.restartPolicy: Never gets the exit rule, OnFailure the rule and
    GPU_SIDECAR_POD_RESTART_POLICY, Always neither, nor the shared process namespace."""
    r = render(helm, "gpu-otel-sidecar.mode=classic", f"gpu-otel-sidecar.classic.restartPolicy={policy}",
               chart=parent_chart, release="exp1")
    spec = r.job["spec"]["template"]["spec"]
    _, sc = sidecar_of(spec, SIDECAR)
    env = env_map(sc)
    assert env.get("GPU_SIDECAR_EXIT_WITH_CONTAINERS") == (None if policy == "Always" else "true")
    assert env.get("GPU_SIDECAR_POD_RESTART_POLICY") == ("OnFailure" if policy == "OnFailure" else None)
    assert spec.get("shareProcessNamespace", False) is (policy != "Always")


def test_classic_restart_policy_values_are_checked(helm):
    proc = helm_template(helm, "--set", "mode=classic", "--set", "classic.restartPolicy=Sometimes", check=False)
    assert proc.returncode != 0 and "classic.restartPolicy" in proc.stderr
    # The example is a Job: its pods cannot be Always.
    proc = helm_template(helm, "--set", "mode=classic", "--set", "classic.restartPolicy=Always", check=False)
    assert proc.returncode != 0 and "the example is a Job" in proc.stderr
    job = render(helm, "mode=classic", "classic.restartPolicy=OnFailure").job
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_lint_strict_for_the_parent_chart(helm, parent_chart):
    proc = subprocess.run([helm, "lint", "--strict", str(parent_chart)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the agent reads what the chart writes -------------------------------------------------

# Values that a plain printf turned into a string the agent refuses (a comma), or changed
# (a number YAML reads as a float, 12345678 -> 1.2345678e+07), or that need encoding.
AWKWARD_ATTRIBUTES = {
    "team": "vision, research",
    "formula": "a=b+c",
    "note": "  padded space ",
    "city": "Zürich 東京",
    "pct": "100%",
    "literal": "%2C is a comma",
    "run.id": 12345678,
    "big": 123456789012,
    "ratio": 0.25,
    "enabled": True,
}
# As written in values.yaml.
AWKWARD_EXPECTED = {
    "team": "vision, research",
    "formula": "a=b+c",
    "note": "  padded space ",
    "city": "Zürich 東京",
    "pct": "100%",
    "literal": "%2C is a comma",
    "run.id": "12345678",
    "big": "123456789012",
    "ratio": "0.25",
    "enabled": "true",
}


def test_resource_attributes_reach_the_agent_as_written(helm, agent_binary, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump({"telemetry": {"resourceAttributes": AWKWARD_ATTRIBUTES}}, allow_unicode=True),
        encoding="utf-8",
    )
    r = render(helm, extra_args=["-f", str(values)])
    _, sc = sidecar_of(r.pod_spec, SIDECAR)
    rc, out, err = check_config(agent_binary, kube_env(sc))
    assert rc == 0, f"the agent refuses the rendered environment: {err}"
    resource = out["resource"]
    for key, want in AWKWARD_EXPECTED.items():
        assert resource.get(key) == want, f"{key}: {resource.get(key)!r} != {want!r}"
    # The pod's identity came through the Downward API.
    assert resource["k8s.pod.name"] == "resnet-train-0"
    assert resource["service.instance.id"] == f"ml.resnet-train-0.{TRAINER}"


@pytest.mark.parametrize("mode", ["native", "classic"])
@pytest.mark.parametrize("visibility", sorted(VISIBILITY))
def test_rendered_environment_passes_the_agents_config_check(helm, agent_binary, mode, visibility):
    sets = [f"mode={mode}", *VISIBILITY[visibility], "collector.headers.secretName=otlp",
            "collector.headers.secretKey=headers"]
    r = render(helm, *sets)
    _, sc = sidecar_of(r.pod_spec, SIDECAR)
    env = kube_env(sc, secrets={("otlp", "headers"): "authorization=Bearer%20t0k"})
    rc, out, err = check_config(agent_binary, env)
    assert rc == 0, f"the agent refuses the rendered environment: {err}"
    assert out["otlp"]["metrics"]["endpoint"] == "http://10.0.0.7:4317"
    assert out["otlp"]["metrics"]["header_names"] == ["authorization"]


@pytest.mark.parametrize("sets", [["hostNetwork=true"], ["mode=classic", "hostNetwork=true"],
                                  ["mode=classic", "classic.exitWithProcess=python3"]])
def test_host_network_and_classic_environments_pass_the_agents_config_check(helm, agent_binary, sets):
    _, sc = sidecar_of(render(helm, *sets).pod_spec, SIDECAR)
    rc, out, err = check_config(agent_binary, kube_env(sc))
    assert rc == 0, f"the agent refuses the rendered environment: {err}"
    want = "unix:/run/gpu-otel-sidecar/health.sock" if "hostNetwork=true" in sets else "0.0.0.0:13134"
    assert out["health_addr"] == want


@pytest.mark.parametrize("key", ["a,b", "a=b", "a b", "50%"])
def test_resource_attribute_keys_the_agent_cannot_read_are_refused(helm, key, tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"telemetry": {"resourceAttributes": {key: "x"}}}))
    proc = helm_template(helm, "-f", str(values), check=False)
    assert proc.returncode != 0
    assert "telemetry.resourceAttributes key" in proc.stderr, proc.stderr


# --- one agent per node (node.enabled) ---------------------------------------------------

NODE = ["node.enabled=true"]


def node_daemonset(r):
    ds = r.one("DaemonSet")
    assert ds["metadata"]["labels"]["app.kubernetes.io/component"] == "node"
    return ds, ds["spec"]["template"]["spec"]


def test_node_daemonset_is_off_by_default(helm):
    assert render(helm).of_kind("DaemonSet") == []


def test_node_daemonset_has_host_pids_the_socket_read_only_and_no_other_privilege(helm):
    ds, spec = node_daemonset(render(helm, *NODE))
    assert spec["hostPID"] is True
    for key in ("hostNetwork", "hostIPC", "serviceAccountName"):
        assert key not in spec, key
    assert spec["automountServiceAccountToken"] is False
    [c] = spec["containers"]
    assert c["args"] == ["node"]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["privileged"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # The kubelet's socket is root-only: UID 0 by default, with nothing else.
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    [mount] = c["volumeMounts"]
    assert mount == {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True}
    [vol] = spec["volumes"]
    assert vol["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    env = env_map(c)
    assert env["GPU_SIDECAR_POD_RESOURCES_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert env["GPU_SIDECAR_PROC_ROOT"] == "/proc"
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["GPU_SIDECAR_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert env["K8S_NODE_NAME"] == ("fieldRef", "spec.nodeName")
    # No pod identity: the node's resource names no pod.
    for name in ("K8S_POD_NAME", "K8S_POD_UID", "K8S_NAMESPACE_NAME", "K8S_CONTAINER_NAME"):
        assert name not in env, name
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://$(K8S_HOST_IP):4317"
    # GPU nodes: the GPU operator's label, NVIDIA's taint.
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert c["resources"]["limits"]["memory"] == "96Mi"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert c["ports"] == [{"name": "health", "containerPort": VALUES["health"]["port"], "protocol": "TCP"}]
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()


def test_node_agent_finds_the_socket_under_the_kubelet_root(helm):
    _, spec = node_daemonset(render(helm, *NODE, "kubeletRoot=/var/lib/k0s/kubelet"))
    [vol] = spec["volumes"]
    assert vol["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources"
    c = spec["containers"][0]
    assert c["volumeMounts"][0]["mountPath"] == "/var/lib/k0s/kubelet/pod-resources"
    assert env_map(c)["GPU_SIDECAR_POD_RESOURCES_SOCKET"] == "/var/lib/k0s/kubelet/pod-resources/kubelet.sock"
    _, spec = node_daemonset(render(helm, *NODE, "node.podResources.hostPath=/run/kubelet/pr/"))
    assert spec["volumes"][0]["hostPath"]["path"] == "/run/kubelet/pr"


def test_node_agent_can_run_as_non_root_where_the_socket_allows(helm):
    _, spec = node_daemonset(render(helm, *NODE, "node.podResources.runAsRoot=false", "node.runtimeClassName=nvidia"))
    sc = spec["containers"][0]["securityContext"]
    assert sc["runAsUser"] == 65532 and sc["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["runtimeClassName"] == "nvidia"


def test_node_agent_beside_or_instead_of_injection(helm):
    beside = render(helm, *NODE, "webhook.enabled=true")
    assert beside.of_kind("DaemonSet") and beside.of_kind("MutatingWebhookConfiguration")
    assert beside.of_kind("Job")
    instead = render(helm, *NODE, "example.enabled=false", kube_version="1.25.0")
    assert [d["kind"] for d in instead.docs] == ["DaemonSet"]


def test_node_agent_environment_passes_the_agents_config_check(helm, agent_binary):
    _, spec = node_daemonset(render(helm, *NODE, "collector.mode=service"))
    rc, out, err = check_config(agent_binary, kube_env(spec["containers"][0]))
    assert rc == 0, f"the agent refuses the rendered environment: {err}"
    assert out["devices"] == "all"
    assert out["resource"]["k8s.node.name"] == "gpu-node-7"
    assert "k8s.pod.name" not in out["resource"]


def test_node_values_are_checked_by_the_schema(helm):
    proc = helm_template(helm, "--set", "node.enabled=true", "--set", "node.podResources.hostPath=relative", check=False)
    assert proc.returncode != 0 and "hostPath" in proc.stderr, proc.stderr
    proc = helm_template(helm, "--set", "node.bogus=1", check=False)
    assert proc.returncode != 0, proc.stderr
