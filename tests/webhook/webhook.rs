//! The admission webhook end to end: the real binary (`gpu-otel-sidecar webhook`) serving
//! TLS with a certificate made here (rcgen), fed the AdmissionReview fixtures of
//! `tests/fixtures/webhook/` (a TFJob worker, a GPU trainer with a data loader, a DRA pod, an
//! injected pod, a pod without GPUs, an opted-out pod) and malformed bodies. Each returned
//! patch is applied with the `json-patch` crate and the patched pod checked field by field;
//! the sidecar files are those the chart renders (`tests/packaging/test_webhook.py` checks
//! that, renders the named templates, compares, and validates the patched pods with
//! kubernetes-validate). Also: the admissions counter over OTLP, the certificate reload, the
//! refusals of bad settings, and the shutdown.

use crate::common;

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::http::{exchange, HttpResponse};
use common::{Agent, Receiver};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::ServerName;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);
const SIDECAR: &str = "gpu-otel-sidecar";

fn fixture(name: &str) -> PathBuf {
    common::workspace_root()
        .join("tests/fixtures/webhook")
        .join(name)
}

fn read_json(path: &Path) -> Value {
    common::read_json(path)
}

/// A CA and the server certificates it issues, written where the webhook reads them.
struct Pki {
    /// The keys and certificates; removed when the test ends (pass or fail).
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("gpu-sidecar-webhook-{name}-"))
            .tempdir()
            .unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "webhook test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        Self { dir, ca, ca_key }
    }

    /// Issues a server certificate named `cn` for the webhook's Service and 127.0.0.1:
    /// (cert PEM, key PEM, cert DER).
    fn issue(&self, cn: &str) -> (String, String, Vec<u8>) {
        let mut params = CertificateParams::new(vec![
            "gpu-otel-sidecar-webhook.gpu-otel-sidecar.svc".to_string(),
            "127.0.0.1".to_string(),
        ])
        .unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().to_vec())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `text` to `name` the way a Kubernetes Secret volume updates: a new file
    /// renamed over the old one.
    fn replace(&self, name: &str, text: &str) {
        let tmp = self.path(&format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.path(name)).unwrap();
    }

    /// Issues `cn` and installs it as tls.crt / tls.key; returns its DER.
    fn install(&self, cn: &str) -> Vec<u8> {
        let (cert, key, der) = self.issue(cn);
        self.replace("tls.crt", &cert);
        self.replace("tls.key", &key);
        der
    }

    /// A client trusting this CA only.
    fn client(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
        )
    }
}

/// The webhook binary with `sidecar` (a fixture file name) and the PKI's files.
fn webhook(pki: &Pki, sidecar: &str) -> common::AgentBuilder {
    Agent::builder()
        .arg("webhook")
        .env("GPU_SIDECAR_WEBHOOK_ADDR", "127.0.0.1:0")
        .env("GPU_SIDECAR_WEBHOOK_TLS_CERT", pki.path("tls.crt"))
        .env("GPU_SIDECAR_WEBHOOK_TLS_KEY", pki.path("tls.key"))
        .env("GPU_SIDECAR_WEBHOOK_SIDECAR", fixture(sidecar))
        .env("GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY", "300ms")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("GPU_SIDECAR_LOG_FORMAT", "json")
}

/// `127.0.0.1:PORT` from the webhook's `listening on https://…` line.
fn address(agent: &Agent) -> String {
    const NEEDLE: &str = "listening on https://";
    assert!(agent.wait_for_stderr(NEEDLE, WAIT), "{}", agent.dump());
    agent
        .stderr_lines()
        .iter()
        .find_map(|l| {
            let rest = &l[l.find(NEEDLE)? + NEEDLE.len()..];
            Some(rest.split([' ', '"']).next()?.to_string())
        })
        .unwrap()
}

/// One HTTPS request: (response, the certificate the server presented).
fn https(
    client: &Arc<rustls::ClientConfig>,
    addr: &str,
    method: &str,
    path: &str,
    body: &[u8],
) -> (HttpResponse, Vec<u8>) {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let name = ServerName::try_from("gpu-otel-sidecar-webhook.gpu-otel-sidecar.svc").unwrap();
    let conn = rustls::ClientConnection::new(client.clone(), name).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).unwrap();
    }
    let served: Vec<u8> = tls.conn.peer_certificates().unwrap()[0].to_vec();
    let headers = [("Content-Type", "application/json")];
    let response = exchange(
        tls,
        method,
        "gpu-otel-sidecar-webhook.gpu-otel-sidecar.svc",
        path,
        &headers,
        body,
    )
    .unwrap();
    (response, served)
}

/// Posts a review file; returns the response review's `response` and the pod as patched.
fn admit(client: &Arc<rustls::ClientConfig>, addr: &str, path: &str, file: &str) -> (Value, Value) {
    admit_review(client, addr, path, read_json(&fixture(file)), file)
}

/// Posts `review` (`file`: what to call it in messages); returns the response review's
/// `response` and the pod as patched.
fn admit_review(
    client: &Arc<rustls::ClientConfig>,
    addr: &str,
    path: &str,
    review: Value,
    file: &str,
) -> (Value, Value) {
    let (r, _) = https(
        client,
        addr,
        "POST",
        path,
        &serde_json::to_vec(&review).unwrap(),
    );
    assert_eq!(r.status, 200, "{file}: {}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let answer: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(answer["kind"], "AdmissionReview");
    let response = answer["response"].clone();
    assert_eq!(response["uid"], review["request"]["uid"], "{file}");
    assert_eq!(response["allowed"], true, "{file}");
    let mut pod = review["request"]["object"].clone();
    if let Some(patch) = response["patch"].as_str() {
        assert_eq!(response["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut pod, &patch).unwrap();
    }
    (response, pod)
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .map(|a| a.iter().map(|c| c["name"].as_str().unwrap()).collect())
        .unwrap_or_default()
}

fn env_of(container: &Value, name: &str) -> Option<Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
        .cloned()
}

/// The sidecar as the chart rendered it into `sidecar` (first container of the file).
fn rendered_sidecar(sidecar: &str) -> Value {
    let t = read_json(&fixture(sidecar));
    t["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(t["containers"].as_array().unwrap())
        .next()
        .unwrap()
        .clone()
}

/// The rendered sidecar with `K8S_CONTAINER_NAME` set to `target` (what the webhook changes).
fn expected_sidecar(sidecar: &str, target: &str) -> Value {
    let mut c = rendered_sidecar(sidecar);
    for e in c["env"].as_array_mut().unwrap() {
        if e["name"] == "K8S_CONTAINER_NAME" {
            *e = json!({"name": "K8S_CONTAINER_NAME", "value": target});
        }
    }
    c
}

#[test]
fn fixtures_through_the_binary_over_tls() {
    let pki = Pki::new("fixtures");
    pki.install("webhook");
    let rx = Receiver::start(common::Protocol::Grpc);
    let mut agent = webhook(&pki, "sidecar-native-pod-resources.json")
        .otlp(&rx)
        .env("OTEL_METRICS_EXPORTER", "otlp")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("K8S_POD_NAME", "gpu-otel-sidecar-webhook-7d9f-abcde")
        .spawn();
    let addr = address(&agent);
    let client = pki.client();
    let sidecar = "sidecar-native-pod-resources.json";

    // A TFJob worker (one GPU container, "tensorflow"), opted in by annotation.
    let review = read_json(&fixture("review-tfjob-worker.json"));
    let before = &review["request"]["object"];
    let (response, pod) = admit(&client, &addr, "/mutate", "review-tfjob-worker.json");
    assert_eq!(response["auditAnnotations"]["outcome"], "injected");
    assert_eq!(
        pod["spec"]["initContainers"],
        json!([expected_sidecar(sidecar, "tensorflow")])
    );
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
    assert_eq!(
        pod["spec"]["volumes"],
        read_json(&fixture(sidecar))["volumes"]
    );
    assert_eq!(
        pod["metadata"]["annotations"]["gpu-otel-sidecar.io/status"],
        "injected"
    );
    // Nothing else of the pod changed.
    assert_eq!(pod["spec"]["containers"], before["spec"]["containers"]);
    assert_eq!(pod["metadata"]["labels"], before["metadata"]["labels"]);
    assert!(pod["spec"].get("shareProcessNamespace").is_none());
    let mut rest = pod.clone();
    let mut rest_before = before.clone();
    for p in [&mut rest, &mut rest_before] {
        let spec = p["spec"].as_object_mut().unwrap();
        spec.remove("initContainers");
        spec.remove("volumes");
        p["metadata"].as_object_mut().unwrap().remove("annotations");
    }
    assert_eq!(rest, rest_before);

    // A Job pod (generated name) in a labelled namespace: the trainer, not the data loader;
    // the sidecar after the pod's own init container, its volume after the pod's.
    let (_, pod) = admit(
        &client,
        &addr,
        "/mutate/namespace",
        "review-gpu-and-data-loader.json",
    );
    assert_eq!(
        names(&pod["spec"]["initContainers"]),
        ["fetch-shards", SIDECAR]
    );
    assert_eq!(
        pod["spec"]["initContainers"][1],
        expected_sidecar(sidecar, "trainer")
    );
    assert_eq!(
        names(&pod["spec"]["containers"]),
        ["data-loader", "trainer"]
    );
    assert_eq!(
        names(&pod["spec"]["volumes"]),
        ["shards", "gpu-otel-sidecar-pod-resources"]
    );

    // Left as they are, with the reason.
    for (path, file, outcome, reason) in [
        (
            "/mutate",
            "review-already-injected.json",
            "already_injected",
            "already has a container named \"gpu-otel-sidecar\"",
        ),
        (
            "/mutate",
            "review-no-gpu.json",
            "no_gpu",
            "no container requests a GPU",
        ),
        (
            "/mutate/namespace",
            "review-opted-out.json",
            "opted_out",
            "opts out",
        ),
        // The DRA pod asks, but this webhook's sidecar (pod-resources mode) would not see
        // its GPUs; in dra mode see the test below.
        (
            "/mutate",
            "review-dra.json",
            "visibility_mismatch",
            "gpuVisibility is pod-resources",
        ),
    ] {
        let (response, pod) = admit(&client, &addr, path, file);
        let before = read_json(&fixture(file))["request"]["object"].clone();
        assert_eq!(response["auditAnnotations"]["outcome"], outcome, "{file}");
        if outcome != "injected" {
            assert!(response.get("patch").is_none(), "{file}");
            assert_eq!(pod, before, "{file}");
            let message = response["status"]["message"].as_str().unwrap_or("");
            assert!(message.contains(reason), "{file}: {message}");
        }
    }
    // reinvocationPolicy IfNeeded (the chart's default): a later webhook may still add the
    // GPU and the second call inject, so no warning speaks of an outcome that may not stand.
    let (response, _) = admit(&client, &addr, "/mutate", "review-no-gpu.json");
    assert!(response.get("warnings").is_none(), "{response}");

    // A count of zero is no GPU: the trainer next to a `nvidia.com/gpu: 0` TensorBoard gets
    // the sidecar; a CPU pod whose chart writes 0 gets none (and no hostPath, no root).
    let file = "review-trainer-and-zero-gpu-tensorboard.json";
    let (response, pod) = admit(&client, &addr, "/mutate", file);
    assert_eq!(
        response["auditAnnotations"]["outcome"], "injected",
        "{response}"
    );
    assert_eq!(
        pod["spec"]["initContainers"],
        json!([expected_sidecar(sidecar, "trainer")])
    );
    let file = "review-cpu-zero-gpu.json";
    let (response, pod) = admit(&client, &addr, "/mutate/namespace", file);
    assert_eq!(
        response["auditAnnotations"]["outcome"], "no_gpu",
        "{response}"
    );
    assert_eq!(pod, read_json(&fixture(file))["request"]["object"]);
    // A count that is not a quantity: left alone, with the reason.
    let mut bad = read_json(&fixture("review-tfjob-worker.json"));
    bad["request"]["object"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] =
        json!("one");
    let (r, _) = https(
        &client,
        &addr,
        "POST",
        "/mutate",
        &serde_json::to_vec(&bad).unwrap(),
    );
    let response = &serde_json::from_slice::<Value>(&r.body).unwrap()["response"];
    assert_eq!(response["auditAnnotations"]["outcome"], "invalid_quantity");
    assert!(response["status"]["message"].as_str().unwrap().contains(
        "resources.limits[\"nvidia.com/gpu\"] = \"one\", which is not a Kubernetes quantity"
    ));
    // A dry run (kubectl apply --dry-run=server, a GitOps diff) is counted apart.
    let mut dry = read_json(&fixture("review-tfjob-worker.json"));
    dry["request"]["dryRun"] = json!(true);
    let (r, _) = https(
        &client,
        &addr,
        "POST",
        "/mutate",
        &serde_json::to_vec(&dry).unwrap(),
    );
    assert_eq!(r.status, 200);

    // Malformed bodies: 400 with a message, and the server goes on.
    let tfjob = read_json(&fixture("review-tfjob-worker.json"));
    let mut broken_pod = tfjob.clone();
    broken_pod["request"]["object"]["spec"]["containers"] = json!({"name": "tensorflow"});
    let mut no_request = tfjob.clone();
    no_request.as_object_mut().unwrap().remove("request");
    for (body, message) in [
        (b"".to_vec(), "empty body"),
        (b"not json".to_vec(), "not an AdmissionReview"),
        (
            serde_json::to_vec(&tfjob["request"]["object"]).unwrap(),
            "expected kind AdmissionReview",
        ),
        (serde_json::to_vec(&no_request).unwrap(), "has no request"),
        (serde_json::to_vec(&broken_pod).unwrap(), "not a v1 Pod"),
    ] {
        let (r, _) = https(&client, &addr, "POST", "/mutate", &body);
        assert_eq!(r.status, 400, "{}", r.text());
        assert!(
            r.text().contains(message),
            "{message:?} not in {}",
            r.text()
        );
    }
    let (r, _) = https(&client, &addr, "GET", "/readyz", b"");
    assert_eq!((r.status, r.text().as_str()), (200, "ready\n"));

    // One line per review with the pod's namespace and name (a generated name as its prefix).
    for needle in [
        r#""k8s.namespace.name":"ml","k8s.pod.name":"mnist-worker-0","k8s.container.name":"tensorflow","outcome":"injected""#,
        r#""k8s.namespace.name":"vision","k8s.pod.name":"resnet-train-*","k8s.container.name":"trainer","outcome":"injected""#,
        r#""k8s.namespace.name":"ml","k8s.pod.name":"tokenize-0","k8s.container.name":"","outcome":"no_gpu""#,
    ] {
        assert!(
            agent.stderr_lines().iter().any(|l| l.contains(needle)),
            "no log line with {needle}\n{}",
            agent.dump()
        );
    }

    // The admissions counter, by outcome and dry run, on the webhook's own resource.
    let want = [
        ("injected", Some("false"), 3.0),
        ("injected", Some("true"), 1.0),
        ("visibility_mismatch", Some("false"), 1.0),
        ("already_injected", Some("false"), 1.0),
        ("no_gpu", Some("false"), 3.0),
        ("invalid_quantity", Some("false"), 1.0),
        ("opted_out", Some("false"), 1.0),
        ("invalid", None, 5.0),
    ];
    let counted = || {
        let points = rx.last_points("gpu_sidecar.webhook.admissions");
        want.iter().all(|(outcome, dry_run, n)| {
            points.iter().any(|p| {
                p.attr("gpu_sidecar.webhook.outcome") == Some(outcome)
                    && p.attr("gpu_sidecar.webhook.dry_run") == *dry_run
                    && p.value == *n
            })
        })
    };
    assert!(
        common::wait_until(WAIT, counted),
        "{:?}\n{}",
        rx.last_points("gpu_sidecar.webhook.admissions"),
        agent.dump()
    );
    let p = &rx.last_points("gpu_sidecar.webhook.admissions")[0];
    assert_eq!(
        (p.unit.as_str(), &p.kind),
        (
            "{admission}",
            &common::Kind::Sum {
                monotonic: true,
                cumulative: true
            }
        )
    );
    assert_eq!(
        p.resource.get("service.name").map(String::as_str),
        Some("gpu-otel-sidecar-webhook")
    );
    assert_eq!(
        p.resource.get("k8s.pod.name").map(String::as_str),
        Some("gpu-otel-sidecar-webhook-7d9f-abcde")
    );

    agent.sigterm();
    assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
}

#[test]
fn dra_sidecar_joins_the_pods_claim() {
    let pki = Pki::new("dra");
    pki.install("webhook");
    let mut agent = webhook(&pki, "sidecar-native-dra.json").spawn();
    let addr = address(&agent);
    let client = pki.client();
    let (response, pod) = admit(&client, &addr, "/mutate", "review-dra.json");
    assert_eq!(response["auditAnnotations"]["outcome"], "injected");
    let sidecar = &pod["spec"]["initContainers"][0];
    // The chart's claim name ("gpu") is replaced by the GPU container's ("gpus").
    assert_eq!(sidecar["resources"]["claims"], json!([{"name": "gpus"}]));
    let mut expected = expected_sidecar("sidecar-native-dra.json", "finetune");
    expected["resources"]["claims"] = json!([{"name": "gpus"}]);
    assert_eq!(sidecar, &expected);
    assert_eq!(
        env_of(sidecar, "GPU_SIDECAR_DEVICES"),
        Some(json!({"name": "GPU_SIDECAR_DEVICES", "value": "all"}))
    );
    // The pod's claims and volumes as they were: DRA needs no hostPath.
    assert_eq!(
        pod["spec"]["resourceClaims"],
        json!([{"name": "gpus", "resourceClaimTemplateName": "two-h200"}])
    );
    assert!(pod["spec"].get("volumes").is_none());
    // A device-plugin pod has no claim to share.
    let (response, _) = admit(&client, &addr, "/mutate", "review-tfjob-worker.json");
    assert_eq!(
        response["auditAnnotations"]["outcome"],
        "visibility_mismatch"
    );
    agent.sigterm();
    assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
}

#[test]
fn classic_sidecar_is_a_container_with_a_shared_process_namespace() {
    let pki = Pki::new("classic");
    pki.install("webhook");
    let mut agent = webhook(&pki, "sidecar-classic-pod-resources.json").spawn();
    let addr = address(&agent);
    let (_, pod) = admit(&pki.client(), &addr, "/mutate", "review-tfjob-worker.json");
    assert_eq!(names(&pod["spec"]["containers"]), ["tensorflow", SIDECAR]);
    assert_eq!(
        pod["spec"]["containers"][1],
        expected_sidecar("sidecar-classic-pod-resources.json", "tensorflow")
    );
    // It follows the pod's other containers, whatever the trainer's process is called.
    assert_eq!(
        env_of(
            &pod["spec"]["containers"][1],
            "GPU_SIDECAR_EXIT_WITH_CONTAINERS"
        ),
        Some(json!({"name": "GPU_SIDECAR_EXIT_WITH_CONTAINERS", "value": "true"}))
    );
    assert!(env_of(
        &pod["spec"]["containers"][1],
        "GPU_SIDECAR_EXIT_WITH_PROCESS"
    )
    .is_none());
    assert_eq!(pod["spec"]["shareProcessNamespace"], true);
    assert!(pod["spec"].get("initContainers").is_none());
    agent.sigterm();
    assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
}

/// Replace the files, and the next handshake serves the new certificate; a broken pair is
/// refused (logged) and the last good one served until the files change again.
#[test]
fn renewed_certificate_is_served_from_the_next_handshake() {
    let pki = Pki::new("reload");
    let first = pki.install("first");
    let mut agent = webhook(&pki, "sidecar-native-pod-resources.json").spawn();
    let addr = address(&agent);
    let client = pki.client();
    let (r, served) = https(&client, &addr, "GET", "/healthz", b"");
    assert_eq!(r.status, 200);
    assert_eq!(served, first);

    let second = pki.install("second");
    assert_ne!(first, second);
    let (r, served) = https(&client, &addr, "GET", "/healthz", b"");
    assert_eq!(r.status, 200);
    assert_eq!(served, second, "the renewed certificate is not served");
    assert!(agent.wait_for_stderr("serving the new one", WAIT));

    // Half an update: a new certificate whose key has not arrived yet.
    let (third, _, _) = pki.issue("third");
    pki.replace("tls.crt", &third);
    let (r, served) = https(&client, &addr, "GET", "/healthz", b"");
    assert_eq!(r.status, 200);
    assert_eq!(served, second, "a certificate without its key was served");
    assert!(
        agent.wait_for_stderr("cannot be used", WAIT),
        "{}",
        agent.dump()
    );
    // The key arrives: the pair is served.
    let (cert, key, der) = pki.issue("fourth");
    pki.replace("tls.key", &key);
    pki.replace("tls.crt", &cert);
    let (_, served) = https(&client, &addr, "GET", "/healthz", b"");
    assert_eq!(served, der);

    agent.sigterm();
    assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
}

/// After SIGTERM it goes on answering for the shutdown delay, not ready, then exits 0.
#[test]
fn sigterm_answers_through_the_delay_then_exits() {
    let pki = Pki::new("sigterm");
    pki.install("webhook");
    let mut agent = webhook(&pki, "sidecar-native-pod-resources.json")
        .env("GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY", "3s")
        .spawn();
    let addr = address(&agent);
    let client = pki.client();
    agent.sigterm();
    assert!(agent.wait_for_stderr("shutting down", WAIT));
    let (r, _) = https(&client, &addr, "GET", "/readyz", b"");
    assert_eq!(r.status, 503);
    let (response, _) = admit(&client, &addr, "/mutate", "review-tfjob-worker.json");
    assert_eq!(response["auditAnnotations"]["outcome"], "injected");
    let status = agent.wait_exit(WAIT).unwrap();
    assert!(status.success(), "{}", agent.dump());
}

/// A bad setting or file stops the webhook with exit 2 and one line naming the variable.
#[test]
fn bad_settings_and_files_are_refused_by_name() {
    let pki = Pki::new("refused");
    pki.install("webhook");
    std::fs::write(pki.path("junk.pem"), "not a certificate\n").unwrap();
    std::fs::write(pki.path("sidecar.json"), "{\"gpuVisibility\": \"all\"}").unwrap();
    let cases: Vec<(&str, PathBuf, &str)> = vec![
        (
            "GPU_SIDECAR_WEBHOOK_TLS_CERT",
            pki.path("junk.pem"),
            "invalid GPU_SIDECAR_WEBHOOK_TLS_CERT=",
        ),
        (
            "GPU_SIDECAR_WEBHOOK_TLS_KEY",
            pki.path("missing.key"),
            "invalid GPU_SIDECAR_WEBHOOK_TLS_KEY=",
        ),
        (
            "GPU_SIDECAR_WEBHOOK_SIDECAR",
            pki.path("sidecar.json"),
            "invalid GPU_SIDECAR_WEBHOOK_SIDECAR: ",
        ),
        (
            "GPU_SIDECAR_WEBHOOK_SIDECAR",
            fixture("review-tfjob-worker.json"),
            "not a sidecar file as the chart renders it",
        ),
        (
            "GPU_SIDECAR_WEBHOOK_ADDR",
            PathBuf::from("localhost:8443"),
            "invalid GPU_SIDECAR_WEBHOOK_ADDR=\"localhost:8443\": expected an IP address and port",
        ),
        (
            "GPU_SIDECAR_WEBHOOK_ADRESS",
            PathBuf::from("0.0.0.0:8443"),
            "GPU_SIDECAR_WEBHOOK_ADRESS is not a setting; did you mean GPU_SIDECAR_WEBHOOK_ADDR?",
        ),
    ];
    for (var, value, message) in cases {
        let mut agent = webhook(&pki, "sidecar-native-pod-resources.json")
            .env(var, &value)
            .spawn();
        let status = agent.wait_exit(WAIT).unwrap();
        assert_eq!(status.code(), Some(2), "{var}: {}", agent.dump());
        assert!(
            agent.stderr_lines().iter().any(|l| l.contains(message)),
            "{var}: {message:?} not in\n{}",
            agent.dump()
        );
    }
    // A required file not set at all.
    let mut agent = Agent::builder()
        .arg("webhook")
        .env(
            "GPU_SIDECAR_WEBHOOK_SIDECAR",
            fixture("sidecar-native-dra.json"),
        )
        .spawn();
    assert_eq!(agent.wait_exit(WAIT).unwrap().code(), Some(2));
    assert!(
        agent.stderr_lines().iter().any(|l| l
            .contains("GPU_SIDECAR_WEBHOOK_TLS_CERT is not set: expected ")
            && l.contains("required")),
        "{}",
        agent.dump()
    );
}

/// `docs/settings.md` lists every webhook setting with its default, and `--help` the
/// command and the settings.
#[test]
fn settings_are_in_the_settings_doc_and_the_command_in_help() {
    use gpu_otel_sidecar::config::settings::{Component, SETTINGS};
    let doc = common::read_text(common::workspace_root().join("docs/settings.md"));
    let webhook: Vec<_> = SETTINGS
        .iter()
        .filter(|s| s.component == Component::Webhook)
        .collect();
    assert_eq!(webhook.len(), 13);
    for s in &webhook {
        let default = match s.unset {
            gpu_otel_sidecar::config::settings::Unset::Default(d) => format!("`{d}`"),
            gpu_otel_sidecar::config::settings::Unset::Means(m) => m.to_string(),
            gpu_otel_sidecar::config::settings::Unset::Required => "required".to_string(),
        };
        let row = format!("| `{}` | {default} |", s.name);
        assert!(doc.contains(&row), "docs/settings.md lacks {row}");
    }
    let mut agent = Agent::builder().arg("--help").spawn();
    assert!(agent.wait_exit(WAIT).unwrap().success());
    assert!(
        agent
            .stdout_lines()
            .iter()
            .any(|l| l.contains("gpu-otel-sidecar webhook")),
        "{}",
        agent.dump()
    );
    let help = agent.stdout_lines().join("\n");
    for s in &webhook {
        assert!(help.contains(s.name), "--help lacks {}: {help}", s.name);
    }
}

// ---------------------------------------------------------------------------------------------
// The injected sidecar at work: the settings of a patch, run as the kubelet would run them.

/// Downward API values of the pods below, as the kubelet fills them.
const FIELDS: &[(&str, &str)] = &[
    ("metadata.name", "nccl-allreduce-worker-1"),
    ("metadata.uid", "6a1d2c3b-0000-4000-8000-000000000021"),
    ("metadata.namespace", "hpc"),
    ("spec.nodeName", "gpu-node-3"),
    ("status.hostIP", "127.0.0.1"),
];

/// The environment the kubelet gives `container`: `fieldRef`s from `fields` (the pod's name
/// suffixed with `pod`), `metadata.labels['<key>']` from `labels` (the pod's
/// `metadata.labels`; `""` for a label the pod lacks, as the kubelet gives), and `$(VAR)`
/// references to earlier variables expanded.
fn kubelet_env(container: &Value, pod: &str, labels: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for e in container["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap().to_string();
        let value = match (e.get("value"), e.pointer("/valueFrom/fieldRef/fieldPath")) {
            (Some(v), _) => {
                let mut v = v.as_str().unwrap().to_string();
                for (k, val) in &out {
                    v = v.replace(&format!("$({k})"), val);
                }
                v
            }
            (None, Some(path)) if path.as_str().unwrap().starts_with("metadata.labels['") => {
                let key = path
                    .as_str()
                    .unwrap()
                    .strip_prefix("metadata.labels['")
                    .and_then(|k| k.strip_suffix("']"))
                    .unwrap();
                labels[key].as_str().unwrap_or_default().to_string()
            }
            (None, Some(path)) => {
                let (_, v) = FIELDS.iter().find(|(p, _)| p == path).unwrap();
                if *path == "metadata.name" {
                    format!("{v}-{pod}")
                } else {
                    v.to_string()
                }
            }
            _ => panic!("no value for {e}"),
        };
        out.push((name, value));
    }
    out
}

fn sidecar_of(pod: &Value) -> Value {
    pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(pod["spec"]["containers"].as_array().unwrap())
        .find(|c| c["name"] == SIDECAR)
        .unwrap()
        .clone()
}

fn injected(sidecar_file: &str, review: &str) -> Value {
    injected_review(sidecar_file, read_json(&fixture(review)), review).0
}

/// `review` (called `name`) through the webhook: the pod as patched, and the response.
fn injected_review(sidecar_file: &str, review: Value, name: &str) -> (Value, Value) {
    let pki = Pki::new(&format!("inject-{}", name.len()));
    pki.install("webhook");
    let mut agent = webhook(&pki, sidecar_file).spawn();
    let addr = address(&agent);
    let (response, pod) = admit_review(&pki.client(), &addr, "/mutate", review, name);
    assert_eq!(
        response["auditAnnotations"]["outcome"], "injected",
        "{response}"
    );
    agent.sigterm();
    assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
    std::fs::remove_dir_all(&pki.dir).unwrap();
    (pod, response)
}

/// A training job's pods get their job on the resource: the webhook injects a PyTorchJob
/// worker, a TFJob chief, a JobSet pod and a plain Job's pod; each patched pod's sidecar
/// environment, resolved against that pod as the kubelet would (its labels through the
/// Downward API), gives `check-config` exactly the pod's workload attributes: the labels it
/// has among the default list as `k8s.pod.label.<key>`, `k8s.job.name` for a batch Job's pod
/// (a JobSet pod is one), nothing for a label it lacks (`job-resources.json`, which
/// `tests/packaging/test_helm_chart.py` checks the named templates against too).
#[test]
fn training_job_pods_carry_their_job_on_the_resource() {
    let pki = Pki::new("jobs");
    pki.install("webhook");
    let mut agent = webhook(&pki, "sidecar-native-pod-resources.json").spawn();
    let addr = address(&agent);
    let table = read_json(&fixture("job-resources.json"));
    let cases: Vec<(&String, &Value)> = table
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.ends_with(".json"))
        .collect();
    assert_eq!(cases.len(), 4);
    for (review, expected) in cases {
        let (response, pod) = admit(&pki.client(), &addr, "/mutate", review);
        assert_eq!(
            response["auditAnnotations"]["outcome"], "injected",
            "{review}: {response}"
        );
        let sidecar = sidecar_of(&pod);
        let env = kubelet_env(&sidecar, "x", &pod["metadata"]["labels"]);
        let mut check = Agent::builder().arg("check-config").envs(env).spawn();
        let status = check.wait_exit(WAIT).unwrap();
        assert_eq!(status.code(), Some(0), "{review}: {}", check.dump());
        let out: Value = serde_json::from_str(&check.stdout_lines().join("\n")).unwrap();
        let workload: BTreeMap<String, String> = out["resource"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| *k == "k8s.job.name" || k.starts_with("k8s.pod.label."))
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        let expected: BTreeMap<String, String> = expected
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        assert_eq!(workload, expected, "{review}");
        assert_eq!(
            out["resource"]["k8s.pod.name"],
            format!("{}-x", FIELDS[0].1),
            "{review}"
        );
    }
    agent.sigterm();
    assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
    std::fs::remove_dir_all(&pki.dir).unwrap();
}

/// Two hostNetwork GPU pods on one node. The injected sidecar declares no port (in a
/// hostNetwork pod it would be the node's, counted by the scheduler) and serves its health on
/// a Unix socket in the pod's own emptyDir: two agents with exactly the injected settings run
/// on this host (each with its emptyDir mounted where the patch says, in a mount namespace of
/// its own) and both answer their `exec` probes. The pod-network settings, a fixed port,
/// collide: the second agent exits 1.
#[test]
fn two_host_network_gpu_pods_on_one_node_both_have_a_healthy_sidecar() {
    let pod = injected(
        "sidecar-native-pod-resources.json",
        "review-host-network-mpi-worker.json",
    );
    assert_eq!(pod["spec"]["hostNetwork"], true);
    let sidecar = sidecar_of(&pod);
    assert!(sidecar.get("ports").is_none(), "{sidecar}");
    // The MPI worker's own port is the one host port of the pod.
    assert_eq!(pod["spec"]["containers"][0]["ports"][0]["hostPort"], 2222);
    let liveness = sidecar["livenessProbe"]["exec"]["command"].clone();
    assert_eq!(
        liveness,
        json!(["/gpu-otel-sidecar", "health", "--liveness"])
    );
    let mount = sidecar["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "gpu-otel-sidecar-run")
        .unwrap()["mountPath"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == "gpu-otel-sidecar-run" && v["emptyDir"] == json!({})));
    let rx = Receiver::start(common::Protocol::Grpc);
    let bin = env!("CARGO_BIN_EXE_gpu-otel-sidecar");
    let (endpoint, protocol) = {
        let env = rx.otlp_env();
        (env[0].1.clone(), env[1].1.clone())
    };
    let start = |name: &str| {
        let mut env = kubelet_env(&sidecar, name, &pod["metadata"]["labels"]);
        for (k, v) in env.iter_mut() {
            match k.as_str() {
                // What the node's kubelet and collector would be: tests/agent/pod_resources.rs
                // covers the kubelet's part.
                "GPU_SIDECAR_DEVICES" => *v = "all".into(),
                "OTEL_EXPORTER_OTLP_ENDPOINT" => *v = endpoint.clone(),
                "OTEL_EXPORTER_OTLP_PROTOCOL" => *v = protocol.clone(),
                "OTEL_METRIC_EXPORT_INTERVAL" => *v = "300".into(),
                "GPU_SIDECAR_SAMPLE_INTERVAL" => *v = "300ms".into(),
                _ => {}
            }
        }
        // The pod's emptyDir at the patch's mountPath: a tmpfs in a mount namespace of its own.
        Agent::builder()
            .program("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                r#"mkdir -p "$1" && mount -t tmpfs emptydir "$1" && exec "$2""#,
                "sh",
                &mount,
                bin,
            ])
            .envs(env)
            .env_mock("h200-under-load.json")
            .spawn()
    };
    let mut pods = [start("a"), start("b")];
    let probe = |agent: &Agent, args: &[&str]| {
        let mut env = kubelet_env(&sidecar, "a", &pod["metadata"]["labels"]);
        env.retain(|(k, _)| k.starts_with("GPU_SIDECAR_HEALTH"));
        let pid = agent.pid().to_string();
        let mut cmd = vec!["-t", pid.as_str(), "-m", "--", bin];
        cmd.extend_from_slice(args);
        let mut p = Agent::builder()
            .program("nsenter")
            .args(cmd)
            .envs(env)
            .spawn();
        let status = p.wait_exit(WAIT).unwrap();
        (status.code(), p.stdout_lines().join("\n"))
    };
    for agent in &pods {
        assert!(
            agent.wait_for_stderr("health endpoint listening on unix:", WAIT),
            "{}",
            agent.dump()
        );
    }
    let ready = |agent: &Agent| common::wait_until(WAIT, || probe(agent, &["health"]).0 == Some(0));
    for agent in &pods {
        assert!(ready(agent), "not ready:\n{}", agent.dump());
        let (code, body) = probe(agent, &["health", "--liveness"]);
        assert_eq!(code, Some(0), "{body}\n{}", agent.dump());
        assert!(body.contains("\"status\":\"alive\""), "{body}");
    }
    // Both pods' data arrives, each under its own pod name.
    assert!(
        common::wait_until(WAIT, || {
            let points = rx.points("hw.power");
            ["a", "b"].iter().all(|pod| {
                points.iter().any(|p| {
                    p.resource.get("k8s.pod.name").map(String::as_str)
                        == Some(format!("nccl-allreduce-worker-1-{pod}").as_str())
                })
            })
        }),
        "{:?}",
        rx.points("hw.power")
    );
    for agent in &mut pods {
        agent.sigterm();
        assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
    }

    // What the pod-network placement would do there: one port for the node, the second exits 1
    // (the node: a network namespace of its own, so that nothing else on this machine counts).
    let mut node: Option<u32> = None;
    let mut on_port = |name: &str| {
        let pod_network = rendered_sidecar("sidecar-native-pod-resources.json");
        let env: Vec<_> = kubelet_env(&pod_network, name, &Value::Null)
            .into_iter()
            .filter(|(k, _)| k == "GPU_SIDECAR_HEALTH_ADDR")
            .collect();
        assert_eq!(env[0].1, "0.0.0.0:13134");
        let b = match node {
            None => Agent::builder().program("unshare").args(["--net", bin]),
            Some(pid) => {
                Agent::builder()
                    .program("nsenter")
                    .args(["-t", &pid.to_string(), "-n", "--", bin])
            }
        };
        let agent = b
            .envs(env)
            .env("OTEL_METRICS_EXPORTER", "none")
            .env("OTEL_LOGS_EXPORTER", "none")
            .env_mock("h200-under-load.json")
            .spawn();
        node.get_or_insert(agent.pid());
        agent
    };
    let mut first = on_port("a");
    assert!(
        first.wait_for_stderr("health endpoint listening", WAIT),
        "{}",
        first.dump()
    );
    let mut second = on_port("b");
    assert_eq!(
        second.wait_exit(WAIT).unwrap().code(),
        Some(1),
        "{}",
        second.dump()
    );
    assert!(second
        .dump()
        .contains("cannot listen on GPU_SIDECAR_HEALTH_ADDR=0.0.0.0:13134"));
    first.sigterm();
    assert!(first.wait_exit(WAIT).unwrap().success());
}

/// A classic sidecar with the injected settings, in a pod's shared process namespace, next
/// to trainers started as `python3`, a `torchrun`-like launcher with workers, and `bash -c`:
/// it exits 0 within seconds of the trainer's end, whatever its process is called; and at
/// once when the trainer ended (in under a second) before the sidecar started. A process of
/// its own container (a `kubectl exec`, an exec probe) and the pod's `pause` do not hold it.
/// While it waits for the kubelet (no pod-resources socket here) it ends all the same.
#[test]
fn classic_sidecar_ends_with_the_trainer_whatever_its_launcher() {
    let pod = injected(
        "sidecar-classic-pod-resources.json",
        "review-tfjob-worker.json",
    );
    assert_eq!(pod["spec"]["shareProcessNamespace"], true);
    let sidecar = sidecar_of(&pod);
    let env = kubelet_env(&sidecar, "classic", &pod["metadata"]["labels"]);
    assert!(env.contains(&("GPU_SIDECAR_EXIT_WITH_CONTAINERS".into(), "true".into())));
    let bin = env!("CARGO_BIN_EXE_gpu-otel-sidecar");
    let dir = common::temp_path("classic-trainers");
    std::fs::create_dir_all(&dir).unwrap();
    let torchrun = dir.join("torchrun");
    std::fs::write(
        &torchrun,
        "#!/bin/sh\n# a launcher: two workers, waits for both\nsleep 2 & sleep 2 & wait\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &torchrun,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )
    .unwrap();
    let torchrun = torchrun.display().to_string();
    let sidecar_of_pod = |p: &common::pod::Pod| {
        let (program, args) = p.exec("gpu-otel-sidecar", &[bin]);
        Agent::builder()
            .program(program)
            .args(args)
            .envs(env.clone())
            .env(
                "GPU_SIDECAR_POD_RESOURCES_SOCKET",
                dir.join("no-kubelet.sock"),
            )
            .env_mock("h200-under-load.json")
            .spawn()
    };
    for (name, trainer) in [
        (
            "python3",
            vec!["python3", "-c", "import time; time.sleep(2.5)"],
        ),
        ("torchrun", vec![torchrun.as_str()]),
        ("bash", vec!["bash", "-c", "sleep 1.5; sleep 1"]),
    ] {
        let p = common::pod::Pod::new(name);
        let mut trainer = p.start("trainer", &trainer);
        // A shell someone opened in the sidecar's container.
        let mut exec = p.start("gpu-otel-sidecar", &["sleep", "60"]);
        let mut agent = sidecar_of_pod(&p);
        assert!(
            agent.wait_for_stderr("watching the pod's other containers", WAIT),
            "{name}: {}",
            agent.dump()
        );
        assert!(agent.is_running(), "{name}: {}", agent.dump());
        assert!(trainer.wait().unwrap().success(), "{name}");
        let ended = std::time::Instant::now();
        let status = agent.wait_exit(WAIT);
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "{name}: {}",
            agent.dump()
        );
        eprintln!(
            "{name}: the sidecar exited {:?} after the trainer",
            ended.elapsed()
        );
        assert!(
            agent.dump().contains("the pod's other containers ended"),
            "{name}: {}",
            agent.dump()
        );
        // No kubelet socket here (a node with another kubelet root): said, and not waited on.
        assert!(
            agent.dump().contains(
                "does not exist: this node's kubelet keeps its pod-resources socket elsewhere"
            ),
            "{}",
            agent.dump()
        );
        assert!(
            p.running("gpu-otel-sidecar"),
            "the exec'd shell is still there"
        );
        let _ = exec.kill();
        let _ = exec.wait();
    }
    // A trainer done in under a second, before the sidecar's first look.
    let p = common::pod::Pod::new("short");
    let out = p.run("trainer", &["python3", "-c", "print('trained')"]);
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("trained"));
    let mut agent = sidecar_of_pod(&p);
    let status = agent.wait_exit(WAIT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", agent.dump());
    assert!(
        agent
            .dump()
            .contains("the pod's other containers ended before the agent started"),
        "{}",
        agent.dump()
    );
    drop(p);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Classic mode follows the pod's restartPolicy. A TFJob worker with `restartPolicy` set to
/// `Always` (a Deployment's, a LeaderWorkerSet's pod) and to `OnFailure`, injected by the
/// webhook, next to a trainer that ends and is restarted twice (by the test, as the kubelet
/// would, a second later), in a pod's process namespace with trainer and sidecar in cgroups of
/// their own: the sidecar runs through both restarts. After the trainer's last end, the
/// `OnFailure` sidecar ends once the wait for a restart is over (`GPU_SIDECAR_RESTART_WAIT`
/// set to 4 s here: by default the kubelet's back-off, 30 s and more), the `Always` one does
/// not end by itself (it has no exit rule: the webhook says so); a `Never` pod's sidecar ends
/// within seconds of the trainer, as before. Before, every classic pod got the exit rule:
/// the sidecar ended a second after the trainer's first end.
#[test]
fn classic_sidecar_follows_the_pods_restart_policy() {
    let bin = env!("CARGO_BIN_EXE_gpu-otel-sidecar");
    let dir = common::temp_path("classic-restarts");
    std::fs::create_dir_all(&dir).unwrap();
    let trainer = ["python3", "-c", "import time; time.sleep(1.5)"];
    for policy in ["Always", "OnFailure", "Never"] {
        let mut review = read_json(&fixture("review-tfjob-worker.json"));
        review["request"]["object"]["spec"]["restartPolicy"] = json!(policy);
        let (pod, response) = injected_review("sidecar-classic-pod-resources.json", review, policy);
        let exit = match policy {
            "Always" => "none",
            "OnFailure" => "after_restarts",
            _ => "with_trainer",
        };
        assert_eq!(
            response["auditAnnotations"]["classic-exit"], exit,
            "{response}"
        );
        assert_eq!(
            pod["spec"]
                .get("shareProcessNamespace")
                .and_then(Value::as_bool),
            (policy != "Always").then_some(true),
            "{policy}"
        );
        let env = kubelet_env(&sidecar_of(&pod), "restarts", &pod["metadata"]["labels"]);
        let var = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        assert_eq!(
            var("GPU_SIDECAR_EXIT_WITH_CONTAINERS"),
            (policy != "Always").then_some("true"),
            "{policy}"
        );
        assert_eq!(
            var("GPU_SIDECAR_POD_RESTART_POLICY"),
            (policy == "OnFailure").then_some("OnFailure"),
            "{policy}"
        );
        let p = common::pod::Pod::new(&policy.to_lowercase());
        let mut running = p.start("trainer", &trainer);
        let (program, args) = p.exec("gpu-otel-sidecar", &[bin]);
        let mut agent = Agent::builder()
            .program(program)
            .args(args)
            .envs(env.clone())
            .env("GPU_SIDECAR_RESTART_WAIT", "4s")
            .env(
                "GPU_SIDECAR_POD_RESOURCES_SOCKET",
                dir.join("no-kubelet.sock"),
            )
            .env_mock("h200-under-load.json")
            .spawn();
        assert!(
            agent.wait_for_stderr("pod-resources", WAIT),
            "{policy}: {}",
            agent.dump()
        );
        if policy == "Never" {
            assert!(running.wait().unwrap().success());
            let ended = std::time::Instant::now();
            let status = agent.wait_exit(WAIT);
            assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", agent.dump());
            assert!(
                ended.elapsed() < Duration::from_secs(5),
                "{:?}",
                ended.elapsed()
            );
            continue;
        }
        for restart in 1..=2 {
            assert!(running.wait().unwrap().success());
            std::thread::sleep(Duration::from_secs(1));
            assert!(
                agent.is_running(),
                "{policy}: the sidecar ended before restart {restart}: {}",
                agent.dump()
            );
            running = p.start("trainer", &trainer);
        }
        assert!(running.wait().unwrap().success());
        let ended = std::time::Instant::now();
        if policy == "OnFailure" {
            let status = agent.wait_exit(WAIT);
            assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", agent.dump());
            let after = ended.elapsed();
            assert!(
                (Duration::from_secs(3)..Duration::from_secs(10)).contains(&after),
                "ended {after:?} after the trainer's last end"
            );
            let dump = agent.dump();
            assert_eq!(
                dump.matches("the pod's other containers are back").count(),
                2,
                "{dump}"
            );
            assert!(
                dump.contains("not restarted within the kubelet's restart back-off"),
                "{dump}"
            );
        } else {
            std::thread::sleep(Duration::from_secs(6));
            assert!(agent.is_running(), "{policy}: {}", agent.dump());
            assert!(
                !agent.dump().contains("watching the pod's other containers"),
                "no exit rule: {}",
                agent.dump()
            );
            // (`nsenter`, which stands for the container runtime here, does not pass SIGTERM on.)
            agent.kill();
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---------------------------------------------------------------------------------------------
// A certificate the webhook keeps itself (GPU_SIDECAR_WEBHOOK_TLS_SECRET), against a fake API
// server: the Secret and the MutatingWebhookConfiguration as objects, JSON patches applied.

/// The API server's part: objects by path with a `resourceVersion` each (a `PUT` of another
/// version is refused `409 Conflict`, as the API server does), every call recorded, and each
/// `caBundle` the configuration held, with when.
#[derive(Default)]
struct FakeApi {
    objects: std::sync::Mutex<std::collections::BTreeMap<String, Value>>,
    calls: std::sync::Mutex<Vec<String>>,
    version: std::sync::atomic::AtomicU64,
    bundles: std::sync::Mutex<Vec<(std::time::Instant, Option<Vec<String>>)>>,
}

const TOKEN: &str = "service-account-token";
const MWC_PATH: &str =
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/gpu-otel-sidecar-webhook";
const SECRET_PATH: &str =
    "/api/v1/namespaces/gpu-otel-sidecar/secrets/gpu-otel-sidecar-webhook-tls";

impl FakeApi {
    fn get(&self, path: &str) -> Option<Value> {
        self.objects.lock().unwrap().get(path).cloned()
    }

    /// Stores `v` at `path` with a new `resourceVersion`.
    fn put(&self, path: &str, mut v: Value) -> Value {
        let rv = self
            .version
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1;
        v["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.objects
            .lock()
            .unwrap()
            .insert(path.to_string(), v.clone());
        if path == MWC_PATH {
            let bundle = self.ca_bundle();
            self.bundles
                .lock()
                .unwrap()
                .push((std::time::Instant::now(), bundle));
        }
        v
    }

    fn calls(&self, prefix: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|c| c.starts_with(prefix))
            .count()
    }

    /// The configuration as a chart rendering applies it: no `caBundle`.
    fn rendered_configuration() -> Value {
        let entry = |name: &str, path: &str| {
            json!({"name": name, "clientConfig": {"service": {"name": "gpu-otel-sidecar-webhook",
                   "namespace": "gpu-otel-sidecar", "path": path, "port": 443}},
                   "admissionReviewVersions": ["v1"], "sideEffects": "None"})
        };
        json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": "gpu-otel-sidecar-webhook"},
               "webhooks": [entry("namespace.inject.gpu-otel-sidecar.io", "/mutate/namespace"),
                            entry("pod.inject.gpu-otel-sidecar.io", "/mutate")]})
    }

    fn ca_bundle(&self) -> Option<Vec<String>> {
        let mwc = self.get(MWC_PATH)?;
        mwc["webhooks"]
            .as_array()?
            .iter()
            .map(|w| w["clientConfig"]["caBundle"].as_str().map(str::to_string))
            .collect()
    }

    /// The `caBundle` both entries held `ago` before now (an API server that takes it that
    /// much later), if they held the same one.
    fn bundle_as_of(&self, ago: Duration) -> Option<String> {
        let at = std::time::Instant::now().checked_sub(ago)?;
        let bundles = self.bundles.lock().unwrap();
        let (_, all) = bundles.iter().rev().find(|(t, _)| *t <= at)?;
        let all = all.as_ref()?;
        (all.len() == 2 && all[0] == all[1]).then(|| all[0].clone())
    }
}

async fn fake_api(
    axum::extract::State(api): axum::extract::State<Arc<FakeApi>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> (axum::http::StatusCode, String) {
    use axum::http::StatusCode;
    let path = uri.path().to_string();
    api.calls.lock().unwrap().push(format!("{method} {path}"));
    let status = |code: u16, message: &str| {
        (
            StatusCode::from_u16(code).unwrap(),
            json!({"kind": "Status", "code": code, "message": message}).to_string(),
        )
    };
    if headers.get("authorization").and_then(|v| v.to_str().ok())
        != Some(format!("Bearer {TOKEN}").as_str())
    {
        return status(401, "Unauthorized");
    }
    // One writer at a time, as etcd's compare-and-swap.
    static WRITE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _write = WRITE.lock().unwrap_or_else(|p| p.into_inner());
    match method.as_str() {
        "GET" => match api.get(&path) {
            Some(v) => (StatusCode::OK, v.to_string()),
            None => status(404, "not found"),
        },
        "POST" => {
            let v: Value = serde_json::from_slice(&body).unwrap();
            let at = format!("{path}/{}", v["metadata"]["name"].as_str().unwrap());
            if api.get(&at).is_some() {
                return status(409, "already exists");
            }
            let v = api.put(&at, v);
            (StatusCode::CREATED, v.to_string())
        }
        "PUT" => {
            let v: Value = serde_json::from_slice(&body).unwrap();
            let Some(current) = api.get(&path) else {
                return status(404, "not found");
            };
            if v["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
                return status(
                    409,
                    "the object has been modified; please apply your changes to the latest version and try again",
                );
            }
            // A Secret's type cannot change (an unset one is `Opaque`).
            let kind = |s: &Value| s["type"].as_str().unwrap_or("Opaque").to_string();
            if path.contains("/secrets/") && kind(&v) != kind(&current) {
                return status(
                    422,
                    &format!(
                        "Secret is invalid: type: Invalid value: {:?}: field is immutable",
                        kind(&v)
                    ),
                );
            }
            let v = api.put(&path, v);
            (StatusCode::OK, v.to_string())
        }
        "PATCH" => {
            assert_eq!(
                headers.get("content-type").unwrap(),
                "application/json-patch+json"
            );
            let Some(mut v) = api.get(&path) else {
                return status(404, "not found");
            };
            let patch: json_patch::Patch = serde_json::from_slice(&body).unwrap();
            if json_patch::patch(&mut v, &patch).is_err() {
                return status(422, "the patch does not apply");
            }
            let v = api.put(&path, v);
            (StatusCode::OK, v.to_string())
        }
        _ => status(405, "method not allowed"),
    }
}

/// Serves `api` over TLS on 127.0.0.1; returns the port and the CA's PEM.
fn serve_fake_api(api: Arc<FakeApi>, rt: &tokio::runtime::Runtime) -> (u16, String) {
    use rustls::pki_types::pem::PemObject;
    let ca = common::pki::Ca::new("fake API server CA");
    let (cert, key) = ca.issue(&["127.0.0.1"], rcgen::ExtendedKeyUsagePurpose::ServerAuth);
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .unwrap();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let router = axum::Router::new().fallback(fake_api).with_state(api);
    let tcp = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let port = tcp.local_addr().unwrap().port();
    rt.spawn(gpu_otel_sidecar::webhook::server::serve(
        tcp,
        Arc::new(tls),
        router,
        std::future::pending(),
        Duration::from_secs(1),
    ));
    (port, ca.cert.pem())
}

/// Whether a TLS handshake with `client`'s trust succeeds at `addr` (no panic: the webhook may
/// not serve the expected certificate yet).
fn handshakes(client: &Arc<rustls::ClientConfig>, addr: &str) -> bool {
    let Ok(mut tcp) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
    let name = ServerName::try_from("gpu-otel-sidecar-webhook.gpu-otel-sidecar.svc").unwrap();
    let mut conn = rustls::ClientConnection::new(client.clone(), name).unwrap();
    while conn.is_handshaking() {
        if conn.complete_io(&mut tcp).is_err() {
            return false;
        }
    }
    true
}

/// A client that trusts the `caBundle` the configuration holds now.
fn trusting(ca_bundle: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(ca_bundle)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        roots.add(c.unwrap()).unwrap();
    }
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// GitOps: the rendered manifests carry no certificate (the chart's default), so each sync
/// applies the same configuration, without `caBundle`. The webhook makes its CA and
/// certificate once (a Secret), writes the CA into the configuration, and sets it again when a
/// sync replaced the configuration; a second replica serves the same Secret; a deleted Secret
/// is made anew and the new CA written. A client that trusts the configuration's `caBundle`,
/// as the API server does, is served at every step.
#[test]
fn webhook_keeps_its_own_certificate_and_the_configurations_ca_bundle() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let api = Arc::new(FakeApi::default());
    api.put(MWC_PATH, FakeApi::rendered_configuration());
    let (port, api_ca) = serve_fake_api(api.clone(), &rt);
    let dir = tempfile::tempdir().unwrap();
    let sa = dir.path().join("serviceaccount");
    std::fs::create_dir(&sa).unwrap();
    std::fs::write(sa.join("token"), format!("{TOKEN}\n")).unwrap();
    std::fs::write(sa.join("ca.crt"), &api_ca).unwrap();
    std::fs::write(sa.join("namespace"), "gpu-otel-sidecar").unwrap();
    let replica = || {
        Agent::builder()
            .arg("webhook")
            .env("GPU_SIDECAR_WEBHOOK_ADDR", "127.0.0.1:0")
            .env(
                "GPU_SIDECAR_WEBHOOK_TLS_SECRET",
                "gpu-otel-sidecar-webhook-tls",
            )
            .env(
                "GPU_SIDECAR_WEBHOOK_CONFIGURATION",
                "gpu-otel-sidecar-webhook",
            )
            .env("GPU_SIDECAR_WEBHOOK_SERVICE_ACCOUNT_DIR", &sa)
            .env("GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL", "300ms")
            .env("GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL", "300ms")
            .env("GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP", "1s")
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", port.to_string())
            .env(
                "GPU_SIDECAR_WEBHOOK_SIDECAR",
                fixture("sidecar-native-pod-resources.json"),
            )
            .env("GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY", "100ms")
            .env("OTEL_METRICS_EXPORTER", "none")
            .env("GPU_SIDECAR_LOG_FORMAT", "json")
            .spawn()
    };
    let mut first = replica();
    let addr = address(&first);
    let bundle = |api: &FakeApi| -> Option<String> {
        let all = api.ca_bundle()?;
        (all.len() == 2 && all[0] == all[1]).then(|| all[0].clone())
    };
    assert!(
        common::wait_until(WAIT, || bundle(&api).is_some()),
        "no caBundle set: {:?}\n{}",
        api.calls.lock().unwrap(),
        first.dump()
    );
    let ca = bundle(&api).unwrap();
    let secret = api.get(SECRET_PATH).expect("the Secret is made");
    assert_eq!(secret["type"], "kubernetes.io/tls");
    assert_eq!(secret["data"]["ca.crt"].as_str().unwrap(), ca);
    assert!(
        secret["data"].get("ca.key").is_none(),
        "the CA's key is not kept"
    );
    // The API server, trusting the caBundle, is served.
    let served_once = {
        let client = trusting(&ca);
        assert!(common::wait_until(WAIT, || handshakes(&client, &addr)));
        let (response, _) = admit(&client, &addr, "/mutate", "review-tfjob-worker.json");
        assert_eq!(response["auditAnnotations"]["outcome"], "injected");
        https(&client, &addr, "GET", "/healthz", b"").1
    };

    // The next sync applies the same rendering again, by replacing (no caBundle in it).
    api.put(MWC_PATH, FakeApi::rendered_configuration());
    assert!(
        common::wait_until(WAIT, || bundle(&api).as_deref() == Some(ca.as_str())),
        "{}",
        first.dump()
    );
    assert_eq!(
        api.calls(&format!("PATCH {MWC_PATH}")),
        2,
        "set once, and again after the replace"
    );
    // A second replica serves the same certificate; the Secret is made once.
    let mut second = replica();
    let addr2 = address(&second);
    let client = trusting(&ca);
    assert!(common::wait_until(WAIT, || handshakes(&client, &addr2)));
    assert_eq!(
        https(&client, &addr2, "GET", "/healthz", b"").1,
        served_once
    );
    assert_eq!(
        api.calls("POST /api/v1/namespaces/gpu-otel-sidecar/secrets"),
        1
    );

    // Renewal: delete the Secret. A new CA and certificate, the new CA in the caBundle, and
    // both replicas serving it.
    api.objects.lock().unwrap().remove(SECRET_PATH);
    assert!(
        common::wait_until(WAIT, || bundle(&api).is_some_and(|b| b != ca)),
        "{}",
        first.dump()
    );
    let renewed = trusting(&bundle(&api).unwrap());
    for a in [&addr, &addr2] {
        assert!(
            common::wait_until(WAIT, || handshakes(&renewed, a)),
            "{a} does not serve the renewed certificate"
        );
    }
    for agent in [&mut first, &mut second] {
        agent.sigterm();
        assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
    }
    assert!(first
        .dump()
        .contains("made the webhook's CA and serving certificate"));
}

// ---------------------------------------------------------------------------------------------
// The certificate over a cluster's lifetime: rotations with two and three replicas, renewal
// before expiry, an expired pair found at start.

/// A fake API server holding the rendered configuration, and the service account files the
/// webhook's replicas read.
struct Cluster {
    _rt: tokio::runtime::Runtime,
    api: Arc<FakeApi>,
    port: u16,
    dir: tempfile::TempDir,
}

impl Cluster {
    fn new() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let api = Arc::new(FakeApi::default());
        api.put(MWC_PATH, FakeApi::rendered_configuration());
        let (port, api_ca) = serve_fake_api(api.clone(), &rt);
        let dir = tempfile::tempdir().unwrap();
        let sa = dir.path().join("serviceaccount");
        std::fs::create_dir(&sa).unwrap();
        std::fs::write(sa.join("token"), format!("{TOKEN}\n")).unwrap();
        std::fs::write(sa.join("ca.crt"), &api_ca).unwrap();
        std::fs::write(sa.join("namespace"), "gpu-otel-sidecar").unwrap();
        Self {
            _rt: rt,
            api,
            port,
            dir,
        }
    }

    /// A replica of the webhook keeping its certificate in the Secret, with `settings`.
    fn replica(&self, settings: &[(&str, &str)]) -> common::AgentBuilder {
        let mut b = Agent::builder()
            .arg("webhook")
            .env("GPU_SIDECAR_WEBHOOK_ADDR", "127.0.0.1:0")
            .env(
                "GPU_SIDECAR_WEBHOOK_TLS_SECRET",
                "gpu-otel-sidecar-webhook-tls",
            )
            .env(
                "GPU_SIDECAR_WEBHOOK_CONFIGURATION",
                "gpu-otel-sidecar-webhook",
            )
            .env(
                "GPU_SIDECAR_WEBHOOK_SERVICE_ACCOUNT_DIR",
                self.dir.path().join("serviceaccount"),
            )
            .env("KUBERNETES_SERVICE_HOST", "127.0.0.1")
            .env("KUBERNETES_SERVICE_PORT", self.port.to_string())
            .env(
                "GPU_SIDECAR_WEBHOOK_SIDECAR",
                fixture("sidecar-native-pod-resources.json"),
            )
            .env("GPU_SIDECAR_WEBHOOK_SHUTDOWN_DELAY", "100ms")
            .env("OTEL_METRICS_EXPORTER", "none")
            .env("GPU_SIDECAR_LOG_FORMAT", "json");
        for (k, v) in settings {
            b = b.env(k, v);
        }
        b
    }

    /// The `caBundle` both entries hold now.
    fn bundle(&self) -> Option<String> {
        self.api.bundle_as_of(Duration::ZERO)
    }
}

/// The number of CAs in a `caBundle` (base64 PEM).
fn cas_in(bundle: &str) -> usize {
    let pem = base64::engine::general_purpose::STANDARD
        .decode(bundle)
        .unwrap();
    String::from_utf8(pem)
        .unwrap()
        .matches("BEGIN CERTIFICATE")
        .count()
}

/// The certificate a TLS handshake with `client`'s trust is served at `addr` (DER), or why
/// the handshake failed.
fn served_by(client: &Arc<rustls::ClientConfig>, addr: &str) -> Result<Vec<u8>, String> {
    let mut tcp = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
    let name = ServerName::try_from("gpu-otel-sidecar-webhook.gpu-otel-sidecar.svc").unwrap();
    let mut conn = rustls::ClientConnection::new(client.clone(), name).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    Ok(conn.peer_certificates().unwrap()[0].to_vec())
}

/// `notAfter` of a DER certificate.
fn not_after(der: &[u8]) -> std::time::SystemTime {
    gpu_otel_sidecar::webhook::certs::Validity::of_chain([der])
        .unwrap()
        .not_after
}

/// What a sampler saw: handshakes made, failures (when, which replica, which trust, why),
/// and each distinct certificate served.
#[derive(Default)]
struct Samples {
    handshakes: usize,
    failures: Vec<String>,
    served: Vec<Vec<u8>>,
    most_cas: usize,
}

/// Every 100 ms until `stop`, a handshake with each replica by a client that trusts the
/// configuration's `caBundle` as it is now, and by one that trusts it as it was `lag` ago (an
/// API server that takes a new `caBundle` that much later).
fn sample(
    api: Arc<FakeApi>,
    addrs: Vec<String>,
    lag: Duration,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Samples> {
    std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        let mut out = Samples::default();
        while !stop.load(std::sync::atomic::Ordering::SeqCst) {
            for (view, ago) in [("current", Duration::ZERO), ("lagging", lag)] {
                let Some(bundle) = api.bundle_as_of(ago) else {
                    continue;
                };
                out.most_cas = out.most_cas.max(cas_in(&bundle));
                let client = trusting(&bundle);
                for a in &addrs {
                    out.handshakes += 1;
                    match served_by(&client, a) {
                        Ok(der) => {
                            if !out.served.contains(&der) {
                                out.served.push(der);
                            }
                        }
                        Err(e) => out.failures.push(format!(
                            "{:?} {a} ({view} caBundle of {} CAs): {e}",
                            t0.elapsed(),
                            cas_in(&bundle)
                        )),
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        out
    })
}

/// Deletes the Secret (the documented renewal) under `replicas` replicas while a client that
/// trusts the `caBundle` (now, and as a lagging API server had it 1 s before) handshakes with
/// every replica every 100 ms, for the whole rotation and two resyncs after it: not one
/// handshake fails. The `caBundle` carries both CAs meanwhile, then the new one alone, which
/// every replica serves. Before the overlap, the replica that made the new Secret switched
/// the `caBundle` at once while the others served the old certificate until their next
/// resync.
fn rotation_without_a_failed_handshake(replicas: usize) {
    let cluster = Cluster::new();
    let settings = [
        ("GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL", "200ms"),
        ("GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP", "1500ms"),
        ("GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL", "3s"),
    ];
    let mut agents: Vec<Agent> = (0..replicas)
        .map(|_| cluster.replica(&settings).spawn())
        .collect();
    let addrs: Vec<String> = agents.iter().map(address).collect();
    assert!(
        common::wait_until(WAIT, || cluster.bundle().is_some_and(|b| {
            let client = trusting(&b);
            addrs.iter().all(|a| handshakes(&client, a))
        })),
        "{}",
        agents[0].dump()
    );
    let original = cluster.bundle().unwrap();
    assert_eq!(cas_in(&original), 1);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = sample(
        cluster.api.clone(),
        addrs.clone(),
        Duration::from_secs(1),
        stop.clone(),
    );
    std::thread::sleep(Duration::from_millis(500));
    cluster.api.objects.lock().unwrap().remove(SECRET_PATH);
    let rotated = std::time::Instant::now();
    assert!(
        common::wait_until(Duration::from_secs(30), || cluster
            .bundle()
            .is_some_and(|b| b != original && cas_in(&b) == 1)),
        "{}",
        agents[0].dump()
    );
    eprintln!(
        "{replicas} replicas: the rotation took {:?}",
        rotated.elapsed()
    );
    // Two resyncs more.
    std::thread::sleep(Duration::from_secs(6));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let samples = sampler.join().unwrap();
    let dumps: String = agents.iter().map(Agent::dump).collect();
    assert!(
        samples.failures.is_empty(),
        "{} of {} handshakes failed:\n{}\n{dumps}",
        samples.failures.len(),
        samples.handshakes,
        samples.failures.join("\n")
    );
    assert!(
        samples.handshakes >= 80 * replicas,
        "{}",
        samples.handshakes
    );
    assert_eq!(
        samples.most_cas, 2,
        "both CAs in the caBundle during the rotation"
    );
    assert_eq!(
        samples.served.len(),
        2,
        "the old certificate, then the new one"
    );
    // Every replica serves the new certificate, which the new CA alone is trusted for.
    let new_only = trusting(&cluster.bundle().unwrap());
    for a in &addrs {
        assert_eq!(served_by(&new_only, a).unwrap(), samples.served[1], "{a}");
    }
    // One new Secret, however many replicas tried.
    let secret = cluster.api.get(SECRET_PATH).unwrap();
    assert!(secret["data"].get("previous-ca.crt").is_none(), "{secret}");
    for mut agent in agents.drain(..) {
        agent.sigterm();
        assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
    }
    assert!(
        dumps.contains("the previous CA stays in the caBundle"),
        "{dumps}"
    );
    assert!(
        dumps.contains("the previous CA leaves the caBundle"),
        "{dumps}"
    );
}

#[test]
fn rotation_with_two_replicas_fails_no_handshake() {
    rotation_without_a_failed_handshake(2);
}

#[test]
fn rotation_with_three_replicas_fails_no_handshake() {
    rotation_without_a_failed_handshake(3);
}

/// A CA and a certificate it signs for the webhook's Service, made by hand (or by another
/// tool): the certificate valid from `not_before` to `not_after`, the CA to `ca_not_after`.
/// Returns the pair and the certificate (DER).
fn pair_made_by_hand(
    not_before: std::time::SystemTime,
    ca_not_after: std::time::SystemTime,
    not_after: std::time::SystemTime,
) -> (gpu_otel_sidecar::webhook::managed::Pair, Vec<u8>) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "hand-made CA");
    ca_params.not_before = not_before.into();
    ca_params.not_after = ca_not_after.into();
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let mut params = CertificateParams::new(vec![
        "gpu-otel-sidecar-webhook.gpu-otel-sidecar.svc".to_string()
    ])
    .unwrap();
    params.not_before = not_before.into();
    params.not_after = not_after.into();
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    (
        gpu_otel_sidecar::webhook::managed::Pair {
            ca: ca.pem(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        },
        cert.der().to_vec(),
    )
}

/// A Secret whose CA and certificate expired a minute ago, as a webhook finds it at start
/// (its pods were down while it expired; `percona/percona-xtradb-cluster-operator#2548`).
fn expired_secret() -> (Value, Vec<u8>) {
    let now = std::time::SystemTime::now();
    let expired = now - Duration::from_secs(60);
    let (pair, der) = pair_made_by_hand(now - Duration::from_secs(7200), expired, expired);
    (
        gpu_otel_sidecar::webhook::managed::Stored::new(pair)
            .to_secret("gpu-otel-sidecar", "gpu-otel-sidecar-webhook-tls"),
        der,
    )
}

/// A certificate valid for 6 s: the Secret found expired at start is replaced before
/// anything is served (a client that accepts any certificate never gets the expired one);
/// then every certificate is renewed at two thirds of its validity, with the overlap, by one
/// replica of two: sampled every 100 ms for 15 s, no handshake of a client trusting the
/// `caBundle` fails and no certificate is served expired. The gauges say when the served
/// certificate expires and is renewed.
#[test]
fn short_lived_certificates_are_renewed_before_expiry_and_an_expired_pair_is_replaced() {
    let cluster = Cluster::new();
    let (secret, expired_der) = expired_secret();
    cluster.api.put(SECRET_PATH, secret);
    let rx = Receiver::start(common::Protocol::Grpc);
    let settings = [
        ("GPU_SIDECAR_WEBHOOK_CERT_VALIDITY", "6s"),
        ("GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP", "1s"),
        ("GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL", "200ms"),
        ("GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL", "2s"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
    ];
    // A client that takes any certificate, and records it.
    let any = Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate))
        .with_no_client_auth(),
    );
    let mut first = cluster
        .replica(&settings)
        .otlp(&rx)
        .env("OTEL_METRICS_EXPORTER", "otlp")
        .spawn();
    let addr = address(&first);
    let mut presented: Vec<Vec<u8>> = Vec::new();
    assert!(
        common::wait_until(WAIT, || {
            if let Ok(der) = served_by(&any, &addr) {
                presented.push(der);
            }
            !presented.is_empty()
        }),
        "{}",
        first.dump()
    );
    assert!(
        !presented.contains(&expired_der),
        "the expired certificate was served"
    );
    assert!(first.dump().contains("expired at"), "{}", first.dump());
    let mut second = cluster.replica(&settings).spawn();
    let addrs = vec![addr.clone(), address(&second)];
    assert!(common::wait_until(WAIT, || cluster.bundle().is_some_and(
        |b| addrs.iter().all(|a| handshakes(&trusting(&b), a))
    )));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = sample(
        cluster.api.clone(),
        addrs.clone(),
        Duration::ZERO,
        stop.clone(),
    );
    std::thread::sleep(Duration::from_secs(15));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let samples = sampler.join().unwrap();
    let dumps = format!("{}{}", first.dump(), second.dump());
    assert!(
        samples.failures.is_empty(),
        "{} of {} handshakes failed:\n{}\n{dumps}",
        samples.failures.len(),
        samples.handshakes,
        samples.failures.join("\n")
    );
    // A renewal every 3.8 s or so: at least three in 15 s, each served before it expired
    // (a client that verifies would have failed on an expired one; counted above).
    assert!(
        samples.served.len() >= 4,
        "{} certificates served in 15 s",
        samples.served.len()
    );
    assert!(dumps.contains("renewing the webhook's certificate (two thirds of its validity passed"));
    // The gauges of the first replica: the expiry of a certificate it served, the renewal
    // two thirds of the way to it.
    assert!(
        rx.wait_for_metric("gpu_sidecar.webhook.certificate.expiry", WAIT),
        "{:?}",
        rx.metric_names()
    );
    let expiry = rx.last_points("gpu_sidecar.webhook.certificate.expiry");
    let renewal = rx.last_points("gpu_sidecar.webhook.certificate.renewal");
    assert_eq!((expiry.len(), renewal.len()), (1, 1));
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as f64
    };
    let served_expiries: Vec<f64> = samples.served.iter().map(|d| secs(not_after(d))).collect();
    assert!(
        served_expiries.contains(&expiry[0].value),
        "{} not among {served_expiries:?}",
        expiry[0].value
    );
    // Validity 6 s from 0.6 s before it was made: renewal 2.2 s before expiry.
    let before = expiry[0].value - renewal[0].value;
    assert!((1.0..=3.5).contains(&before), "{before}");
    for agent in [&mut first, &mut second] {
        agent.sigterm();
        assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
    }
}

/// Takes any server certificate (the test looks at which it was).
#[derive(Debug)]
struct AnyCertificate;

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

// ---------------------------------------------------------------------------------------------
// Replays: reports against webhooks that keep their own certificate, rebuilt against the fake
// API server.

/// The Secret the replicas keep, as the fake API server holds it now.
fn secret_now(cluster: &Cluster) -> Value {
    cluster.api.get(SECRET_PATH).unwrap_or(Value::Null)
}

/// `data[key]` of `secret`, decoded.
fn secret_data(secret: &Value, key: &str) -> Option<String> {
    let b64 = secret["data"][key].as_str()?;
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap(),
    )
    .ok()
}

/// kyverno/kyverno#6317: a Secret made as `Opaque` (by hand, `kubectl create secret generic`,
/// or an older tool), with labels, annotations, an owner reference and a data key of someone
/// else's, due for renewal. The renewal writes the new pair into it and keeps all that: its
/// type (the API server refuses to change a Secret's type, so a write as `kubernetes.io/tls`
/// failed at every poll and the pair was never renewed), and what others put on it; then the
/// previous CA is dropped the same way.
#[test]
fn an_opaque_secret_made_by_hand_is_renewed_keeping_what_others_put_on_it() {
    let cluster = Cluster::new();
    let now = std::time::SystemTime::now();
    // Two thirds of its validity passed, a minute left.
    let until = now + Duration::from_secs(60);
    let (pair, original_der) = pair_made_by_hand(now - Duration::from_secs(100), until, until);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let owner = json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "gpu-otel-sidecar-webhook",
                        "uid": "4f1c2d9e-8a57-4d0b-9a57-2b0e5c1f7a10"}]);
    cluster.api.put(
        SECRET_PATH,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "gpu-otel-sidecar-webhook-tls", "namespace": "gpu-otel-sidecar",
                            "labels": {"team": "ml-platform"},
                            "annotations": {"backup.example.com/include": "true"},
                            "ownerReferences": owner},
               "data": {"ca.crt": b64(&pair.ca), "tls.crt": b64(&pair.cert), "tls.key": b64(&pair.key),
                        "README": b64("made by hand")}}),
    );
    let settings = [
        ("GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL", "200ms"),
        ("GPU_SIDECAR_WEBHOOK_ROTATION_OVERLAP", "1s"),
        ("GPU_SIDECAR_WEBHOOK_RESYNC_INTERVAL", "2s"),
    ];
    let mut agent = cluster.replica(&settings).spawn();
    let addr = address(&agent);
    // Renewed, and the rotation over (the previous CA dropped).
    assert!(
        common::wait_until(WAIT, || {
            let s = secret_now(&cluster);
            secret_data(&s, "tls.crt").is_some_and(|c| c != pair.cert)
                && s["data"].get("previous-ca.crt").is_none()
                && cluster.bundle().is_some_and(|b| cas_in(&b) == 1)
        }),
        "{}\n{}",
        secret_now(&cluster),
        agent.dump()
    );
    let secret = secret_now(&cluster);
    assert_eq!(secret["type"], "Opaque", "{secret}");
    assert_eq!(
        secret["metadata"]["labels"]["team"], "ml-platform",
        "{secret}"
    );
    assert_eq!(
        secret["metadata"]["annotations"]["backup.example.com/include"], "true",
        "{secret}"
    );
    assert_eq!(secret["metadata"]["ownerReferences"], owner, "{secret}");
    assert_eq!(
        secret_data(&secret, "README").as_deref(),
        Some("made by hand")
    );
    assert!(
        secret["metadata"]["annotations"]
            .get("gpu-otel-sidecar.io/serve-from")
            .is_none(),
        "{secret}"
    );
    // The renewed certificate is served, trusted by the caBundle.
    let bundle = cluster.bundle().unwrap();
    assert!(
        common::wait_until(WAIT, || served_by(&trusting(&bundle), &addr)
            .is_ok_and(|der| der != original_der)),
        "{}",
        agent.dump()
    );
    assert!(agent
        .dump()
        .contains("renewing the webhook's certificate (two thirds of its validity passed"));
    agent.sigterm();
    assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
}

/// hashicorp/vault-helm#725, hashicorp/vault-k8s#388: the Secret exists but holds nothing (made
/// beforehand as a placeholder, by a GitOps repository or a policy), and every replica failed
/// on it ("failed to find any PEM data") until someone deleted it. The webhook fills it (an
/// update carrying its `resourceVersion`, keeping its labels) and serves it.
#[test]
fn an_empty_secret_made_beforehand_is_filled() {
    let cluster = Cluster::new();
    cluster.api.put(
        SECRET_PATH,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": "gpu-otel-sidecar-webhook-tls", "namespace": "gpu-otel-sidecar",
                            "labels": {"team": "ml-platform"}}}),
    );
    let settings = [("GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL", "200ms")];
    let mut agents: Vec<Agent> = (0..2).map(|_| cluster.replica(&settings).spawn()).collect();
    let addrs: Vec<String> = agents.iter().map(address).collect();
    assert!(
        common::wait_until(WAIT, || cluster.bundle().is_some_and(|b| {
            let client = trusting(&b);
            addrs.iter().all(|a| handshakes(&client, a))
        })),
        "{}\n{}",
        secret_now(&cluster),
        agents[0].dump()
    );
    let secret = secret_now(&cluster);
    assert_eq!(secret["type"], "Opaque", "{secret}");
    assert_eq!(
        secret["metadata"]["labels"]["team"], "ml-platform",
        "{secret}"
    );
    assert!(secret_data(&secret, "ca.crt").is_some_and(|ca| ca.contains("BEGIN CERTIFICATE")));
    assert_eq!(
        cluster.api.calls("POST "),
        0,
        "it exists: filled, not created"
    );
    for mut agent in agents.drain(..) {
        agent.sigterm();
        assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
    }
}

/// A client that takes any certificate (to see which one a replica serves).
fn any_certificate() -> Arc<rustls::ClientConfig> {
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate))
        .with_no_client_auth(),
    )
}

/// hashicorp/vault-k8s#124 (replicas that each made a certificate of their own, and patched
/// the caBundle with theirs: intermittent "bad certificate") and
/// aws/amazon-eks-pod-identity-webhook#35 (a restarted replica asked for a new certificate
/// instead of reusing the stored one). Three replicas started at the same moment without a
/// Secret: one Secret is made, every replica serves its certificate, the caBundle holds its CA
/// alone. A replica restarted afterwards serves the same certificate and writes nothing.
#[test]
fn replicas_started_together_make_one_certificate_and_a_restart_reuses_it() {
    let cluster = Cluster::new();
    let settings = [("GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL", "200ms")];
    let mut agents: Vec<Agent> = (0..3).map(|_| cluster.replica(&settings).spawn()).collect();
    let addrs: Vec<String> = agents.iter().map(address).collect();
    assert!(
        common::wait_until(WAIT, || cluster.bundle().is_some_and(|b| {
            let client = trusting(&b);
            addrs.iter().all(|a| handshakes(&client, a))
        })),
        "{}",
        agents[0].dump()
    );
    let bundle = cluster.bundle().unwrap();
    assert_eq!(cas_in(&bundle), 1);
    let served: Vec<Vec<u8>> = addrs
        .iter()
        .map(|a| served_by(&any_certificate(), a).unwrap())
        .collect();
    assert!(served.iter().all(|d| *d == served[0]), "one certificate");
    let secret = secret_now(&cluster);
    let rv = secret["metadata"]["resourceVersion"].clone();
    let dumps: String = agents.iter().map(Agent::dump).collect();
    assert_eq!(
        dumps
            .matches("made the webhook's CA and serving certificate")
            .count(),
        1,
        "{dumps}"
    );
    // A restart: the replica reads the Secret and serves it; nothing is written.
    let mut old = agents.remove(0);
    old.sigterm();
    assert!(old.wait_exit(WAIT).unwrap().success(), "{}", old.dump());
    let writes = |api: &FakeApi| api.calls("POST ") + api.calls("PUT ") + api.calls("PATCH ");
    let before = writes(&cluster.api);
    let restarted = cluster.replica(&settings).spawn();
    let addr = address(&restarted);
    assert!(
        common::wait_until(WAIT, || handshakes(&trusting(&bundle), &addr)),
        "{}",
        restarted.dump()
    );
    assert_eq!(served_by(&any_certificate(), &addr).unwrap(), served[0]);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(writes(&cluster.api), before, "the restart wrote nothing");
    assert_eq!(secret_now(&cluster)["metadata"]["resourceVersion"], rv);
    agents.push(restarted);
    for mut agent in agents.drain(..) {
        agent.sigterm();
        assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
    }
}

/// kyverno/kyverno#13639 (and #10063): the CA expired while the certificate it signed was
/// still valid, and nothing renewed it. A Secret whose CA expired a minute ago, its
/// certificate valid for a year more: found at start, replaced at once; the certificate of
/// the expired CA is never served, and the caBundle holds the new CA alone.
#[test]
fn a_ca_expired_before_its_certificate_is_replaced_at_start() {
    let cluster = Cluster::new();
    let now = std::time::SystemTime::now();
    let (pair, leaf) = pair_made_by_hand(
        now - Duration::from_secs(86_400),
        now - Duration::from_secs(60),
        now + Duration::from_secs(365 * 86_400),
    );
    cluster.api.put(
        SECRET_PATH,
        gpu_otel_sidecar::webhook::managed::Stored::new(pair)
            .to_secret("gpu-otel-sidecar", "gpu-otel-sidecar-webhook-tls"),
    );
    let mut agent = cluster
        .replica(&[("GPU_SIDECAR_WEBHOOK_SECRET_POLL_INTERVAL", "200ms")])
        .spawn();
    let addr = address(&agent);
    let mut presented: Vec<Vec<u8>> = Vec::new();
    assert!(
        common::wait_until(WAIT, || {
            if let Ok(der) = served_by(&any_certificate(), &addr) {
                presented.push(der);
            }
            cluster
                .bundle()
                .is_some_and(|b| handshakes(&trusting(&b), &addr))
        }),
        "{}",
        agent.dump()
    );
    assert!(
        !presented.contains(&leaf),
        "the expired CA's certificate was served"
    );
    assert_eq!(cas_in(&cluster.bundle().unwrap()), 1);
    assert!(agent.dump().contains("expired at"), "{}", agent.dump());
    agent.sigterm();
    assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
}

/// linkerd/linkerd2#8033 (a sidecar left running after its Job's work, killed by its
/// liveness probe: exit 137, the pod failed), openkruise/kruise#1285 (a sidecar that ends
/// must end 0 or the Job counts a failure) and openkruise/kruise#1366 (in a `restartPolicy:
/// OnFailure` Job the sidecar was itself restarted, exit 137, while the main container came
/// and went). An injected `OnFailure` classic sidecar, its trainer ended: while it waits for
/// the kubelet to restart the trainer, its liveness probe (run in its container, as the
/// kubelet's exec would) says alive. Killed then (SIGKILL, as the OOM killer does) and
/// started again (the kubelet restarts it, exit 137 being a failure), the new sidecar finds no
/// trainer, waits, goes on when the trainer is restarted, and once the trainer has ended and
/// not come back it exits 0.
#[test]
fn an_on_failure_sidecar_is_alive_while_it_waits_and_comes_back_from_its_own_restart() {
    let bin = env!("CARGO_BIN_EXE_gpu-otel-sidecar");
    let dir = common::temp_path("on-failure-sidecar-restart");
    std::fs::create_dir_all(&dir).unwrap();
    let mut review = read_json(&fixture("review-tfjob-worker.json"));
    review["request"]["object"]["spec"]["restartPolicy"] = json!("OnFailure");
    let (pod, _) = injected_review("sidecar-classic-pod-resources.json", review, "OnFailure");
    let env = kubelet_env(&sidecar_of(&pod), "onfailure", &pod["metadata"]["labels"]);
    let p = common::pod::Pod::new("onfailure-restart");
    let sidecar = || {
        let (program, args) = p.exec("gpu-otel-sidecar", &[bin]);
        Agent::builder()
            .program(program)
            .args(args)
            .envs(env.clone())
            .env("GPU_SIDECAR_RESTART_WAIT", "4s")
            .env(
                "GPU_SIDECAR_POD_RESOURCES_SOCKET",
                dir.join("no-kubelet.sock"),
            )
            .env_mock("h200-under-load.json")
            .spawn()
    };
    let trainer = ["python3", "-c", "import time; time.sleep(1.5)"];
    let mut running = p.start("trainer", &trainer);
    let mut first = sidecar();
    assert!(
        first.wait_for_stderr("watching the pod's other containers", WAIT),
        "{}",
        first.dump()
    );
    assert!(running.wait().unwrap().success());
    assert!(
        first.wait_for_stderr("the agent waits", WAIT),
        "{}",
        first.dump()
    );
    // The kubelet's exec liveness probe, in the sidecar's container.
    let mut probe: Vec<String> = vec!["env".into()];
    probe.extend(
        env.iter()
            .filter(|(k, _)| k.starts_with("GPU_SIDECAR_HEALTH"))
            .map(|(k, v)| format!("{k}={v}")),
    );
    probe.extend([bin.to_string(), "health".into(), "--liveness".into()]);
    let probe: Vec<&str> = probe.iter().map(String::as_str).collect();
    let out = p.run("gpu-otel-sidecar", &probe);
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && body.contains("\"status\":\"alive\""),
        "{:?} {body} {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        first.dump()
    );
    assert!(first.is_running(), "{}", first.dump());
    // OOM-killed while waiting; the kubelet starts it again.
    p.kill("gpu-otel-sidecar");
    let _ = first.wait_exit(WAIT);
    let mut second = sidecar();
    assert!(
        second.wait_for_stderr("the agent waits", WAIT),
        "the restarted sidecar finds no trainer and waits: {}",
        second.dump()
    );
    std::thread::sleep(Duration::from_secs(1));
    running = p.start("trainer", &trainer);
    assert!(
        second.wait_for_stderr("the pod's other containers are back", WAIT),
        "{}",
        second.dump()
    );
    assert!(running.wait().unwrap().success());
    let ended = std::time::Instant::now();
    let status = second.wait_exit(WAIT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", second.dump());
    assert!(
        (Duration::from_secs(3)..Duration::from_secs(10)).contains(&ended.elapsed()),
        "ended {:?} after the trainer's last end",
        ended.elapsed()
    );
    drop(p);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// argoproj/argo-workflows#1570: a workflow step's pod (`restartPolicy: Never`) holds the
/// `main` container, Argo's `wait` container (it outlives `main`, saving its outputs) and a
/// user's `sidecars:` entry, which Argo kills once `main` is done. The injected classic
/// sidecar, next to all three in the pod's process namespace, goes on while any of them
/// runs (the `wait` container still saving outputs after `main` ended and the user's
/// sidecar was killed) and exits 0 within seconds of the last.
#[test]
fn classic_sidecar_in_an_argo_step_ends_after_the_last_container() {
    let bin = env!("CARGO_BIN_EXE_gpu-otel-sidecar");
    let dir = common::temp_path("argo-step");
    std::fs::create_dir_all(&dir).unwrap();
    let mut review = read_json(&fixture("review-tfjob-worker.json"));
    review["request"]["object"]["spec"]["restartPolicy"] = json!("Never");
    let (pod, _) = injected_review("sidecar-classic-pod-resources.json", review, "argo");
    let env = kubelet_env(&sidecar_of(&pod), "argo", &pod["metadata"]["labels"]);
    let p = common::pod::Pod::new("argo-step");
    let mut main = p.start("main", &["python3", "-c", "import time; time.sleep(1.5)"]);
    let mut wait = p.start("wait", &["sh", "-c", "sleep 3.5"]);
    let mut postgres = p.start("postgres", &["sleep", "60"]);
    let (program, args) = p.exec("gpu-otel-sidecar", &[bin]);
    let mut agent = Agent::builder()
        .program(program)
        .args(args)
        .envs(env)
        .env(
            "GPU_SIDECAR_POD_RESOURCES_SOCKET",
            dir.join("no-kubelet.sock"),
        )
        .env_mock("h200-under-load.json")
        .spawn();
    assert!(
        agent.wait_for_stderr("watching the pod's other containers", WAIT),
        "{}",
        agent.dump()
    );
    assert!(main.wait().unwrap().success());
    // Argo kills the user's sidecar once main is done.
    p.kill("postgres");
    let _ = postgres.wait();
    std::thread::sleep(Duration::from_millis(1200));
    assert!(
        agent.is_running(),
        "ended while the wait container runs: {}",
        agent.dump()
    );
    assert!(wait.wait().unwrap().success());
    let ended = std::time::Instant::now();
    let status = agent.wait_exit(WAIT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", agent.dump());
    assert!(
        ended.elapsed() < Duration::from_secs(5),
        "{:?}",
        ended.elapsed()
    );
    drop(p);
    std::fs::remove_dir_all(&dir).unwrap();
}
