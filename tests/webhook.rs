//! The admission webhook end to end: the real binary (`gpu-otel-sidecar webhook`) serving
//! TLS with a certificate made here (rcgen), fed the AdmissionReview fixtures of
//! `tests/fixtures/webhook/` (a TFJob worker, a GPU trainer with a data loader, a DRA pod, an
//! injected pod, a pod without GPUs, an opted-out pod) and malformed bodies. Each returned
//! patch is applied with the `json-patch` crate and the patched pod checked field by field;
//! the sidecar files are those the chart renders (`tests/packaging/test_webhook.py` checks
//! that, renders the named templates, compares, and validates the patched pods with
//! kubernetes-validate). Also: the admissions counter over OTLP, the certificate reload, the
//! refusals of bad settings, and the shutdown.

mod common;

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
    let review = read_json(&fixture(file));
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
    let (response, _) = admit(&client, &addr, "/mutate", "review-no-gpu.json");
    assert!(
        response["warnings"][0]
            .as_str()
            .unwrap()
            .contains("not injected: no container requests a GPU"),
        "{response}"
    );

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

    // The admissions counter, by outcome, on the webhook's own resource.
    let want = [
        ("injected", 2.0),
        ("visibility_mismatch", 1.0),
        ("already_injected", 1.0),
        ("no_gpu", 2.0),
        ("opted_out", 1.0),
        ("invalid", 5.0),
    ];
    let counted = || {
        let points = rx.last_points("gpu_sidecar.webhook.admissions");
        want.iter().all(|(outcome, n)| {
            points
                .iter()
                .any(|p| p.attr("gpu_sidecar.webhook.outcome") == Some(outcome) && p.value == *n)
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
    assert_eq!(
        env_of(
            &pod["spec"]["containers"][1],
            "GPU_SIDECAR_EXIT_WITH_PROCESS"
        ),
        Some(json!({"name": "GPU_SIDECAR_EXIT_WITH_PROCESS", "value": "python"}))
    );
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
    assert_eq!(webhook.len(), 5);
    for s in &webhook {
        let default = s
            .default_value()
            .map_or("required".to_string(), |d| format!("`{d}`"));
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
