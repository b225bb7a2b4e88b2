"""The admission webhook the chart installs (webhook.enabled).

- The rendered objects: Deployment (2 replicas, probes over HTTPS), PodDisruptionBudget,
  Service, MutatingWebhookConfiguration (failurePolicy Ignore, a short timeout, sideEffects
  None, its own namespace and kube-system excluded, reinvocationPolicy IfNeeded, one entry for
  labelled namespaces and one for annotated pods), the serving certificate kept by the webhook
  (the default: no key material rendered, with its RBAC), from Helm, cert-manager or a Secret
  of yours.
- The release binary run as `gpu-otel-sidecar webhook` with the Deployment's environment, the
  Secret's certificate and the ConfigMap's sidecar.json, reached over TLS as the API server
  reaches it (the Service's DNS name, the caBundle as the only trust).
- "Equals what the named templates render": the example Job's pod without the sidecar goes
  through the webhook; the patched pod (patch applied with `jsonpatch`) is exactly the pod the
  named templates render, for each mode. The patched pods, and those of the AdmissionReview
  fixtures in tests/fixtures/webhook/, pass kubernetes-validate --strict (1.29 and 1.33; DRA
  pods 1.33).
- tests/fixtures/webhook/sidecar-*.json (read by tests/webhook/webhook.rs) are what the chart renders
  (rewrite them with UPDATE_FIXTURES=1).
- GitOps: `helm template` twice renders the same; one running webhook (the binary, against a
  fake API server) serves both renders, trusted by the caBundle each applied configuration
  holds.

The binary: $GPU_OTEL_SIDECAR_BINARY, else target/release/gpu-otel-sidecar; without one the tests
that run it skip, unless REQUIRE_RELEASE_BINARY=1 (CI builds it first).
"""

import base64
import copy
import http.client
import json
import os
import socket
import ssl
import subprocess
import time

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from conftest import ROOT, Rendered, helm_template, render
from test_helm_chart import notes
from test_settings_documented import unknown

FIXTURES = ROOT / "tests" / "fixtures" / "webhook"
NAMESPACE = "gpu-otel-sidecar"
WEBHOOK = ["webhook.enabled=true"]
UUIDS = "gpuVisibility.uuids={GPU-8f6c2a7e-0c1d-4f7b-9a2b-1234567890ab}"

# name: (--set values, Kubernetes versions the patched pod is validated against)
VARIANTS = {
    "native-pod-resources": ([], ["1.29", "1.33"]),
    "classic-pod-resources": (["mode=classic"], ["1.29", "1.33"]),
    # The example Job with restartPolicy OnFailure: the webhook adapts its Never rendering.
    "classic-pod-resources-on-failure": (["mode=classic", "classic.restartPolicy=OnFailure"], ["1.29", "1.33"]),
    "native-dra": (["gpuVisibility.mode=dra"], ["1.33"]),
    "classic-dra": (["mode=classic", "gpuVisibility.mode=dra"], ["1.33"]),
    "native-uuids": (["gpuVisibility.mode=uuids", UUIDS], ["1.29", "1.33"]),
    "native-pod-resources-host-network": (["hostNetwork=true", "health.readinessProbe.enabled=true"], ["1.29", "1.33"]),
    "classic-uuids-host-network": (["mode=classic", "hostNetwork=true", "gpuVisibility.mode=uuids", UUIDS], ["1.29", "1.33"]),
    "native-all-gateway-headers": (
        ["gpuVisibility.mode=all", "collector.mode=service", "collector.protocol=http/protobuf",
         "collector.headers.secretName=otlp-auth", "health.readinessProbe.enabled=true"],
        ["1.29", "1.33"],
    ),
}


def rendered(helm, *sets, kube_version="1.33.0", cert_mode="helm"):
    """The chart with the webhook; its certificate made by Helm (files the binary reads here)
    unless `cert_mode` says otherwise (None: the chart's default)."""
    cert = [f"webhook.certificate.mode={cert_mode}"] if cert_mode else []
    return render(helm, *WEBHOOK, *cert, *sets, kube_version=kube_version, extra_args=["--namespace", NAMESPACE])


def by_name(r, kind, suffix="-webhook"):
    found = [d for d in r.of_kind(kind) if d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"expected one {kind} named *{suffix}, got {[d['metadata']['name'] for d in r.of_kind(kind)]}"
    return found[0]


def sidecar_json(r):
    return json.loads(by_name(r, "ConfigMap")["data"]["sidecar.json"])


# --- the rendered objects -------------------------------------------------------------------


def test_webhook_is_off_by_default(helm):
    r = render(helm)
    assert not r.of_kind("MutatingWebhookConfiguration")
    assert not [d for d in r.docs if d["metadata"]["name"].endswith("-webhook")]


def test_webhook_configuration(helm):
    r = rendered(helm)
    mwc = r.one("MutatingWebhookConfiguration")
    hooks = {h["name"]: h for h in mwc["webhooks"]}
    assert set(hooks) == {"namespace.inject.gpu-otel-sidecar.io", "pod.inject.gpu-otel-sidecar.io"}
    service = by_name(r, "Service")
    ca = by_name(r, "Secret", "-webhook-tls")["data"]["ca.crt"]
    for name, path, label_op, condition in [
        ("namespace.inject.gpu-otel-sidecar.io", "/mutate/namespace", "In", "!= 'false'"),
        ("pod.inject.gpu-otel-sidecar.io", "/mutate", "NotIn", "== 'true'"),
    ]:
        h = hooks[name]
        assert h["failurePolicy"] == "Ignore"
        assert h["sideEffects"] == "None"
        assert h["timeoutSeconds"] <= 10
        assert h["reinvocationPolicy"] == "IfNeeded"
        assert h["admissionReviewVersions"] == ["v1"]
        assert h["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                               "resources": ["pods"], "scope": "Namespaced"}]
        svc = h["clientConfig"]["service"]
        assert (svc["name"], svc["namespace"], svc["path"], svc["port"]) == (
            service["metadata"]["name"], NAMESPACE, path, 443)
        assert h["clientConfig"]["caBundle"] == ca
        exprs = {e["key"]: e for e in h["namespaceSelector"]["matchExpressions"]}
        assert exprs["gpu-otel-sidecar.io/inject"] == {"key": "gpu-otel-sidecar.io/inject", "operator": label_op, "values": ["enabled"]}
        excluded = exprs["kubernetes.io/metadata.name"]
        assert excluded["operator"] == "NotIn"
        assert {"kube-system", NAMESPACE} <= set(excluded["values"])
        [cond] = h["matchConditions"]
        assert "gpu-otel-sidecar.io/inject" in cond["expression"] and condition in cond["expression"]
    # Clusters before 1.28 have no matchConditions (the webhook decides alone there).
    old = rendered(helm, "mode=classic", kube_version="1.27.0").one("MutatingWebhookConfiguration")
    assert all("matchConditions" not in h for h in old["webhooks"])
    more = rendered(helm, "webhook.excludeNamespaces={ci,batch}").one("MutatingWebhookConfiguration")
    for h in more["webhooks"]:
        values = {e["key"]: e for e in h["namespaceSelector"]["matchExpressions"]}["kubernetes.io/metadata.name"]["values"]
        assert values == ["kube-system", NAMESPACE, "ci", "batch"]


def test_webhook_deployment_service_and_disruption_budget(helm):
    r = rendered(helm, cert_mode=None)
    d = by_name(r, "Deployment")
    assert d["spec"]["replicas"] == 2
    pod = d["spec"]["template"]["spec"]
    # By default it keeps its own certificate: a service account that may do just that.
    assert pod["automountServiceAccountToken"] is True
    assert pod["serviceAccountName"] == by_name(r, "ServiceAccount")["metadata"]["name"]
    [c] = pod["containers"]
    assert c["args"] == ["webhook"]
    assert c["image"] == "gpu-otel-sidecar:0.1.0"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["GPU_SIDECAR_WEBHOOK_ADDR"] == "0.0.0.0:8443"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    mwc = r.one("MutatingWebhookConfiguration")
    assert env["GPU_SIDECAR_WEBHOOK_TLS_SECRET"] == "demo-gpu-otel-sidecar-webhook-tls"
    assert env["GPU_SIDECAR_WEBHOOK_CONFIGURATION"] == mwc["metadata"]["name"]
    assert env["GPU_SIDECAR_WEBHOOK_CERT_VALIDITY"] == "3650d"
    assert env["GPU_SIDECAR_WEBHOOK_REINVOCATION_POLICY"] == "IfNeeded"
    assert "GPU_SIDECAR_WEBHOOK_TLS_CERT" not in env and "tls" not in mounts
    assert env["GPU_SIDECAR_WEBHOOK_SIDECAR"] == mounts["sidecar"] + "/sidecar.json"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["sidecar"]["configMap"]["name"] == by_name(r, "ConfigMap")["metadata"]["name"]
    # With Helm's certificate: files from the Secret it renders, and no API access.
    helm_made = by_name(rendered(helm), "Deployment")["spec"]["template"]["spec"]
    assert helm_made["automountServiceAccountToken"] is False and "serviceAccountName" not in helm_made
    [hc] = helm_made["containers"]
    henv = {e["name"]: e.get("value") for e in hc["env"]}
    hmounts = {m["name"]: m["mountPath"] for m in hc["volumeMounts"]}
    assert henv["GPU_SIDECAR_WEBHOOK_TLS_CERT"] == hmounts["tls"] + "/tls.crt"
    assert henv["GPU_SIDECAR_WEBHOOK_TLS_KEY"] == hmounts["tls"] + "/tls.key"
    hvolumes = {v["name"]: v for v in helm_made["volumes"]}
    assert hvolumes["tls"]["secret"]["secretName"] == by_name(rendered(helm), "Secret", "-webhook-tls")["metadata"]["name"]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert c[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
    assert sc["capabilities"] == {"drop": ["ALL"]}
    # Every variable is one the binary and docs/settings.md know.
    assert not unknown(set(env)), unknown(set(env))
    selector = d["spec"]["selector"]["matchLabels"]
    svc = by_name(r, "Service")
    assert svc["spec"]["selector"] == selector
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}]
    pdb = by_name(r, "PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": selector}}
    # A change of what is injected rolls the webhook (it reads sidecar.json at start).
    other = by_name(rendered(helm, "mode=classic"), "Deployment")
    key = "checksum/sidecar"
    assert d["spec"]["template"]["metadata"]["annotations"][key] != other["spec"]["template"]["metadata"]["annotations"][key]


def test_by_default_the_webhook_keeps_its_certificate_and_may_do_only_that(helm):
    """GitOps: nothing in the rendering changes from one `helm template` to the next."""
    r = rendered(helm, cert_mode=None)
    assert not r.of_kind("Secret"), "no key material in the rendering"
    mwc = r.one("MutatingWebhookConfiguration")
    assert all("caBundle" not in h["clientConfig"] for h in mwc["webhooks"])
    name = mwc["metadata"]["name"]
    [role] = r.of_kind("Role")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [f"{name}-tls"], "verbs": ["get", "update"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
    ]
    [cluster_role] = r.of_kind("ClusterRole")
    assert cluster_role["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"],
                                      "resources": ["mutatingwebhookconfigurations"],
                                      "resourceNames": [name], "verbs": ["get", "patch"]}]
    sa = by_name(r, "ServiceAccount")["metadata"]["name"]
    for binding, kind in ((r.one("RoleBinding"), "Role"), (r.one("ClusterRoleBinding"), "ClusterRole")):
        assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
    # A certificate of your own.
    r = rendered(helm, "webhook.certificate.secretName=corp-tls", "webhook.certificate.caBundle=Q0E=", cert_mode="secret")
    assert not r.of_kind("Secret") and not r.of_kind("Role")
    assert all(h["clientConfig"]["caBundle"] == "Q0E=" for h in r.one("MutatingWebhookConfiguration")["webhooks"])
    volumes = {v["name"]: v for v in by_name(r, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "corp-tls"
    proc = helm_template(helm, "--set", "webhook.enabled=true", "--set", "webhook.certificate.mode=secret", check=False)
    assert proc.returncode != 0 and "needs webhook.certificate.secretName" in proc.stderr


def test_cert_manager_issues_the_certificate_instead_of_helm(helm):
    r = rendered(helm, "webhook.certificate.mode=cert-manager")
    assert not [s for s in r.of_kind("Secret") if s["metadata"]["name"].endswith("-webhook-tls")]
    mwc = r.one("MutatingWebhookConfiguration")
    certs = {c["metadata"]["name"]: c for c in r.of_kind("Certificate")}
    serving = certs["demo-gpu-otel-sidecar-webhook"]
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/demo-gpu-otel-sidecar-webhook"
    assert all("caBundle" not in h["clientConfig"] for h in mwc["webhooks"])
    assert serving["spec"]["secretName"] == "demo-gpu-otel-sidecar-webhook-tls"
    assert f"demo-gpu-otel-sidecar-webhook.{NAMESPACE}.svc" in serving["spec"]["dnsNames"]
    # Signed by a CA of its own (stable caBundle across renewals), itself self-signed.
    ca = certs["demo-gpu-otel-sidecar-webhook-ca"]
    assert ca["spec"]["isCA"] is True
    issuers = {i["metadata"]["name"]: i["spec"] for i in r.of_kind("Issuer")}
    assert serving["spec"]["issuerRef"]["name"] in issuers
    assert issuers[serving["spec"]["issuerRef"]["name"]] == {"ca": {"secretName": ca["spec"]["secretName"]}}
    assert issuers[ca["spec"]["issuerRef"]["name"]] == {"selfSigned": {}}
    # An issuer of your own.
    r = rendered(helm, "webhook.certificate.mode=cert-manager", "webhook.certManager.issuerRef.name=corp-ca",
                 "webhook.certManager.issuerRef.kind=ClusterIssuer")
    assert not r.of_kind("Issuer")
    [serving] = r.of_kind("Certificate")
    assert serving["spec"]["issuerRef"] == {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


def test_notes_say_how_to_ask(helm, tmp_path):
    text = notes(helm, tmp_path, *WEBHOOK)
    assert 'gpu-otel-sidecar.io/inject: "true"' in text and "gpu-otel-sidecar.io/inject=enabled" in text
    assert 'level "privileged"' in text
    assert 'level "privileged"' not in notes(helm, tmp_path, *WEBHOOK, "gpuVisibility.mode=dra")
    assert "Admission webhook" not in notes(helm, tmp_path)


@pytest.mark.parametrize("kube", ["1.29", "1.33"])
def test_rendered_webhook_objects_are_valid(helm, kube):
    for cert_mode, sets in ((None, []), ("helm", ["mode=classic"]), ("cert-manager", []), ("helm", ["hostNetwork=true"])):
        r = rendered(helm, *sets, kube_version=f"{kube}.0", cert_mode=cert_mode)
        for doc in r.docs:
            if doc["apiVersion"].startswith("cert-manager.io/"):
                continue  # a CRD without a schema in kubernetes-validate
            kubernetes_validate.validate(doc, kube, strict=True)


@pytest.mark.parametrize("name", ["native-pod-resources", "classic-pod-resources", "native-dra"])
def test_sidecar_fixtures_are_what_the_chart_renders(helm, name):
    """tests/webhook/webhook.rs injects these files; they must be the chart's rendering."""
    sets, _ = VARIANTS[name]
    text = by_name(rendered(helm, *sets), "ConfigMap")["data"]["sidecar.json"] + "\n"
    path = FIXTURES / f"sidecar-{name}.json"
    if os.environ.get("UPDATE_FIXTURES") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.read_text(encoding="utf-8") == text, f"{path.name} differs from the chart's rendering; UPDATE_FIXTURES=1 rewrites it"


# --- the binary with the chart's objects ----------------------------------------------------


@pytest.fixture(scope="module")
def binary():
    path = os.environ.get("GPU_OTEL_SIDECAR_BINARY") or str(ROOT / "target" / "release" / "gpu-otel-sidecar")
    if not os.path.isfile(path):
        if os.environ.get("REQUIRE_RELEASE_BINARY") == "1":
            pytest.fail(f"release binary {path} not found (cargo build --release)")
        pytest.skip(f"no release binary at {path}; build it to run the webhook")
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Webhook:
    """The binary serving what one chart rendering holds, as the API server reaches it."""

    def __init__(self, binary, r, tmp_path):
        secret = by_name(r, "Secret", "-webhook-tls")["data"]
        files = {name: base64.b64decode(secret[name]) for name in ("tls.crt", "tls.key", "ca.crt")}
        files["sidecar.json"] = by_name(r, "ConfigMap")["data"]["sidecar.json"].encode()
        for name, data in files.items():
            (tmp_path / name).write_bytes(data)
        [container] = by_name(r, "Deployment")["spec"]["template"]["spec"]["containers"]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        # The Deployment's own values (the Downward API ones cannot be resolved here).
        env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
        self.port = free_port()
        env.update({
            "GPU_SIDECAR_WEBHOOK_ADDR": f"127.0.0.1:{self.port}",
            "GPU_SIDECAR_WEBHOOK_TLS_CERT": str(tmp_path / "tls.crt"),
            "GPU_SIDECAR_WEBHOOK_TLS_KEY": str(tmp_path / "tls.key"),
            "GPU_SIDECAR_WEBHOOK_SIDECAR": str(tmp_path / "sidecar.json"),
            "GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY": "100ms",
            "OTEL_METRICS_EXPORTER": "none",
        })
        self.log = open(tmp_path / "webhook.log", "w+b")
        self.proc = subprocess.Popen([binary, "webhook"], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        mwc = r.one("MutatingWebhookConfiguration")
        self.paths = {h["name"].split(".")[0]: h["clientConfig"]["service"]["path"] for h in mwc["webhooks"]}
        service = mwc["webhooks"][0]["clientConfig"]["service"]
        # The name the API server connects to, verified against the caBundle alone.
        self.server_name = f"{service['name']}.{service['namespace']}.svc"
        self.context = ssl.create_default_context(cadata=files["ca.crt"].decode())
        deadline = time.monotonic() + 20
        while True:
            try:
                status, _ = self.request("GET", "/readyz")
                if status == 200:
                    break
            except OSError:
                pass
            assert self.proc.poll() is None, f"the webhook exited:\n{self.output()}"
            assert time.monotonic() < deadline, f"the webhook did not get ready:\n{self.output()}"
            time.sleep(0.1)

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def request(self, method, path, body=None):
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        conn = http.client.HTTPSConnection(self.server_name, self.port, context=self.context, timeout=10)
        conn.sock = self.context.wrap_socket(sock, server_hostname=self.server_name)
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, data

    def admit(self, entry, review):
        """Posts `review` to the webhook entry `entry` (pod | namespace): (response, pod as patched)."""
        status, data = self.request("POST", self.paths[entry], json.dumps(review).encode())
        assert status == 200, data
        answer = json.loads(data)
        response = answer["response"]
        assert response["uid"] == review["request"]["uid"] and response["allowed"] is True
        pod = copy.deepcopy(review["request"]["object"])
        if "patch" in response:
            assert response["patchType"] == "JSONPatch"
            pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
        return response, pod

    def stop(self):
        self.proc.terminate()
        code = self.proc.wait(timeout=20)
        self.log.close()
        return code


def review_of(pod, uid="5b2f7e1c-9a0d-4c3e-8f6b-1d2e3f405162"):
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": pod["metadata"]["namespace"], "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod, "oldObject": None, "dryRun": False,
        },
    }


def user_pod(r, annotations):
    """The example Job's pod as the user writes it: what the named templates add taken out."""
    job = r.job
    sidecar = sidecar_json(r)
    name = sidecar["initContainers"][0]["name"] if sidecar["initContainers"] else sidecar["containers"][0]["name"]
    spec = copy.deepcopy(job["spec"]["template"]["spec"])
    for key in ("initContainers", "containers"):
        kept = [c for c in spec.get(key, []) if c["name"] != name]
        if kept:
            spec[key] = kept
        else:
            spec.pop(key, None)
    ours = {v["name"] for v in sidecar["volumes"] + sidecar["hostNetwork"]["volumes"]}
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] not in ours]
    for key in sidecar["podSpec"]:
        spec.pop(key, None)
    metadata = copy.deepcopy(job["spec"]["template"]["metadata"])
    metadata.update({"generateName": f"{job['metadata']['name']}-", "namespace": "ml"})
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def validate_pod(pod, versions):
    for v in versions:
        kubernetes_validate.validate(pod, v, strict=True)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_injected_pod_equals_what_the_named_templates_render(helm, binary, tmp_path, variant):
    sets, versions = VARIANTS[variant]
    r = rendered(helm, *sets)
    webhook = Webhook(binary, r, tmp_path)
    try:
        expected = r.pod_spec
        # Annotated pod, anywhere.
        response, pod = webhook.admit("pod", review_of(user_pod(r, {"gpu-otel-sidecar.io/inject": "true"})))
        classic = "mode=classic" in sets
        exit_rule = {"classic-exit": "after_restarts" if "classic.restartPolicy=OnFailure" in sets else "with_trainer"}
        assert response["auditAnnotations"] == {"outcome": "injected", **(exit_rule if classic else {})}
        assert pod["spec"] == expected, json.dumps({"webhook": pod["spec"], "templates": expected}, indent=1)
        assert pod["metadata"]["annotations"] == {"gpu-otel-sidecar.io/inject": "true", "gpu-otel-sidecar.io/status": "injected"}
        validate_pod(pod, versions)
        # A pod of a labelled namespace, without the annotation.
        _, pod = webhook.admit("namespace", review_of(user_pod(r, None)))
        assert pod["spec"] == expected
        if classic:
            # A restartPolicy Always pod (a Deployment's): the same sidecar without the exit
            # rule, and no shared process namespace.
            always = user_pod(r, {"gpu-otel-sidecar.io/inject": "true"})
            always["spec"]["restartPolicy"] = "Always"
            response, pod = webhook.admit("pod", review_of(always))
            assert response["auditAnnotations"] == {"outcome": "injected", "classic-exit": "none"}
            want = copy.deepcopy(expected)
            want["restartPolicy"] = "Always"
            want.pop("shareProcessNamespace")
            for c in want["containers"]:
                c["env"] = [e for e in c.get("env", []) if not e["name"].startswith(("GPU_SIDECAR_EXIT_WITH_", "GPU_SIDECAR_POD_RESTART_POLICY"))]
            assert pod["spec"] == want, json.dumps({"webhook": pod["spec"], "expected": want}, indent=1)
            validate_pod(pod, versions)
        # The rendered pod itself is already injected: left as it is.
        rendered_pod = user_pod(r, {"gpu-otel-sidecar.io/inject": "true"})
        rendered_pod["spec"] = copy.deepcopy(expected)
        response, pod = webhook.admit("pod", review_of(rendered_pod))
        assert "patch" not in response and pod == rendered_pod
        assert response["auditAnnotations"] == {"outcome": "already_injected"}
    finally:
        assert webhook.stop() == 0, webhook.output()


FIXTURE_OUTCOMES = {
    # file: (webhook entry, outcome, Kubernetes versions)
    "review-tfjob-worker.json": ("pod", "injected", ["1.29", "1.33"]),
    "review-gpu-and-data-loader.json": ("namespace", "injected", ["1.29", "1.33"]),
    "review-dra.json": ("pod", "injected", ["1.33"]),  # in dra mode
    "review-already-injected.json": ("pod", "already_injected", ["1.29", "1.33"]),
    "review-no-gpu.json": ("pod", "no_gpu", ["1.29", "1.33"]),
    "review-trainer-and-zero-gpu-tensorboard.json": ("pod", "injected", ["1.29", "1.33"]),
    "review-cpu-zero-gpu.json": ("namespace", "no_gpu", ["1.29", "1.33"]),
    "review-host-network-mpi-worker.json": ("pod", "injected", ["1.29", "1.33"]),
    "review-opted-out.json": ("namespace", "opted_out", ["1.29", "1.33"]),
    # A training job's pods (their labels reach the agent: tests/webhook/webhook.rs, job-resources.json).
    "review-pytorchjob-worker.json": ("pod", "injected", ["1.29", "1.33"]),
    "review-tfjob-chief.json": ("pod", "injected", ["1.29", "1.33"]),
    "review-jobset-pod.json": ("pod", "injected", ["1.29", "1.33"]),
    "review-plain-job.json": ("pod", "injected", ["1.29", "1.33"]),
}


def test_fixture_pods_are_valid_after_the_patch(helm, binary, tmp_path):
    assert {p.name for p in FIXTURES.glob("review-*.json")} == set(FIXTURE_OUTCOMES)
    for variant in ("native-pod-resources", "classic-dra"):
        r = rendered(helm, *VARIANTS[variant][0])
        workdir = tmp_path / variant
        workdir.mkdir()
        webhook = Webhook(binary, r, workdir)
        try:
            for name, (entry, outcome, versions) in FIXTURE_OUTCOMES.items():
                review = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
                response, pod = webhook.admit(entry, review)
                if outcome == "injected" and variant.endswith("-dra") != (name == "review-dra.json"):
                    # dra mode and device-plugin GPUs (no claim to share), or pod-resources
                    # mode and DRA GPUs (not listed by the kubelet's pod-resources API)
                    outcome = "visibility_mismatch"
                expected = {"outcome": outcome}
                if outcome == "injected" and variant.startswith("classic"):
                    policy = review["request"]["object"]["spec"].get("restartPolicy", "Always")
                    expected["classic-exit"] = {"Never": "with_trainer", "OnFailure": "after_restarts"}.get(policy, "none")
                assert response["auditAnnotations"] == expected, (variant, name, response)
                validate_pod(pod, versions)
        finally:
            assert webhook.stop() == 0, webhook.output()


def test_malformed_reviews_get_400(helm, binary, tmp_path):
    webhook = Webhook(binary, rendered(helm), tmp_path)
    try:
        for body, message in [
            (b"", b"empty body"),
            (b"{", b"not an AdmissionReview"),
            (json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode(), b"expected kind AdmissionReview"),
        ]:
            status, data = webhook.request("POST", "/mutate", body)
            assert status == 400 and message in data, (status, data)
    finally:
        assert webhook.stop() == 0, webhook.output()


# --- GitOps: `helm template` twice, one webhook ---------------------------------------------


class FakeApiServer:
    """The API server's part for a webhook that keeps its own certificate: objects by path
    over HTTPS (a CA and a certificate for 127.0.0.1 made with the openssl CLI), a service
    account token checked, JSON patches applied (jsonpatch)."""

    TOKEN = "gitops-test-token"

    def __init__(self, tmp_path):
        import http.server
        import threading

        self.objects, self.calls = {}, []
        d = tmp_path / "api-pki"
        d.mkdir()
        run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True)  # noqa: E731
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
            "-subj", "/CN=fake API CA", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"),
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", str(d / "tls.key"), "-out", str(d / "tls.csr"))
        (d / "ext").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        run("x509", "-req", "-in", str(d / "tls.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
            "-CAcreateserial", "-days", "1", "-extfile", str(d / "ext"), "-out", str(d / "tls.crt"))
        self.ca = (d / "ca.crt").read_text()
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def handle_any(self):
                api.calls.append(f"{self.command} {self.path}")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Authorization") != f"Bearer {api.TOKEN}":
                    return self.reply(401, {"kind": "Status", "message": "Unauthorized"})
                found = api.objects.get(self.path)
                if self.command == "GET":
                    return self.reply(200, found) if found else self.reply(404, {"kind": "Status", "message": "not found"})
                if self.command == "POST":
                    obj = json.loads(body)
                    at = f"{self.path}/{obj['metadata']['name']}"
                    if at in api.objects:
                        return self.reply(409, {"kind": "Status", "message": "already exists"})
                    api.objects[at] = obj
                    return self.reply(201, obj)
                if self.command == "PATCH" and found:
                    assert self.headers.get("Content-Type") == "application/json-patch+json"
                    api.objects[self.path] = jsonpatch.apply_patch(found, json.loads(body))
                    return self.reply(200, api.objects[self.path])
                return self.reply(404, {"kind": "Status", "message": "not found"})

            do_GET = do_POST = do_PATCH = handle_any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(d / "tls.crt", d / "tls.key")
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def path_of(doc):
        name = doc["metadata"]["name"]
        if doc["kind"] == "MutatingWebhookConfiguration":
            return f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"
        return f"/api/v1/namespaces/{NAMESPACE}/{doc['kind'].lower()}s/{name}"

    def replace(self, r):
        """`kubectl replace` of every object of rendering `r` (what is not in it stays)."""
        for doc in r.docs:
            self.objects[self.path_of(doc)] = copy.deepcopy(doc)

    def ca_bundles(self, mwc_name):
        mwc = self.objects[f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{mwc_name}"]
        return {h["clientConfig"].get("caBundle") for h in mwc["webhooks"]}

    def stop(self):
        self.server.shutdown()


def test_two_helm_template_renders_are_served_by_one_running_webhook(helm, binary, tmp_path):
    """Argo CD, Flux and `helm template | kubectl apply` render with `helm template`. With the
    chart's defaults the two renders are the same (no key material: the webhook keeps its own
    certificate); a webhook started from the first, still running when the second is applied
    (by replacing: caBundle gone), is trusted by the caBundle each render's configuration holds
    once applied: the API server, trusting that, gets every pod injected."""
    args = ["--set", "webhook.enabled=true", "--namespace", NAMESPACE]
    first, second = (helm_template(helm, *args).stdout for _ in range(2))
    assert first == second, "two renders differ: a GitOps sync would apply another CA"
    r1 = Rendered(list(yaml.safe_load_all(first)))
    r2 = Rendered(list(yaml.safe_load_all(second)))
    assert not r1.of_kind("Secret")
    mwc_name = r1.one("MutatingWebhookConfiguration")["metadata"]["name"]
    api = FakeApiServer(tmp_path)
    api.replace(r1)
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(FakeApiServer.TOKEN)
    (sa / "ca.crt").write_text(api.ca)
    (sa / "namespace").write_text(NAMESPACE)
    (tmp_path / "sidecar.json").write_text(by_name(r1, "ConfigMap")["data"]["sidecar.json"])
    [container] = by_name(r1, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
    port = free_port()
    env.update({
        "GPU_SIDECAR_WEBHOOK_ADDR": f"127.0.0.1:{port}",
        "GPU_SIDECAR_WEBHOOK_SIDECAR": str(tmp_path / "sidecar.json"),
        "GPU_SIDECAR_WEBHOOK_SERVICE_ACCOUNT_DIR": str(sa),
        "GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL": "300ms",
        "GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY": "100ms",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(api.port),
        "OTEL_METRICS_EXPORTER": "none",
    })
    log = open(tmp_path / "webhook.log", "w+b")
    proc = subprocess.Popen([binary, "webhook"], env=env, stdout=log, stderr=subprocess.STDOUT)
    service = r1.one("MutatingWebhookConfiguration")["webhooks"][0]["clientConfig"]["service"]
    server_name = f"{service['name']}.{service['namespace']}.svc"

    def output():
        log.seek(0)
        return log.read().decode(errors="replace")

    def admit_trusting(bundle):
        context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        conn = http.client.HTTPSConnection(server_name, port, context=context, timeout=10)
        conn.sock = context.wrap_socket(sock, server_hostname=server_name)
        review = review_of(user_pod(r1, {"gpu-otel-sidecar.io/inject": "true"}))
        conn.request("POST", "/mutate", body=json.dumps(review).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, json.loads(data)["response"]

    try:
        bundles = []
        for render in (r1, r2):
            api.replace(render)  # the sync: the configuration as rendered, without caBundle
            deadline = time.monotonic() + 20
            while True:
                found = api.ca_bundles(mwc_name)
                if len(found) == 1 and None not in found:
                    break
                assert proc.poll() is None, output()
                assert time.monotonic() < deadline, f"no caBundle set: {api.calls}\n{output()}"
                time.sleep(0.1)
            [bundle] = found
            bundles.append(bundle)
            deadline = time.monotonic() + 20
            while True:
                try:
                    status, response = admit_trusting(bundle)
                    break
                except OSError:
                    assert time.monotonic() < deadline, output()
                    time.sleep(0.1)
            assert status == 200 and response["auditAnnotations"] == {"outcome": "injected"}, response
        # One CA for both renders, the one in the Secret the webhook made once.
        assert bundles[0] == bundles[1]
        secret = api.objects[f"/api/v1/namespaces/{NAMESPACE}/secrets/{mwc_name}-tls"]
        assert secret["data"]["ca.crt"] == bundles[0]
        assert sum(c.startswith("POST ") for c in api.calls) == 1
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0, output()
        log.close()
        api.stop()
