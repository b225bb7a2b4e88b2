//! TLS towards the collector: a CA, a server certificate and a client certificate generated
//! here (rcgen), a receiver that requires the client certificate (mutual TLS), over gRPC
//! and HTTP, for metrics (the binary) and events (the library's pipeline). Handshake
//! failures (no client certificate, an untrusted server) are survived and visible.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::pki::Ca;
use common::{Agent, AgentBuilder, Protocol, Receiver, ServerTls};
use gpu_otel_sidecar::config::Config;
use gpu_otel_sidecar::telemetry::logs::events::{Event, Events};
use rcgen::ExtendedKeyUsagePurpose;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

/// Everything one test needs, written to files where the agent reads them.
struct Pki {
    /// The keys and certificates; removed when the test ends (pass or fail).
    dir: tempfile::TempDir,
    ca: Ca,
    server: (String, String),
    client: (String, String),
}

impl Pki {
    fn new(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(&format!("gpu-sidecar-tls-{name}-"))
            .tempdir()
            .unwrap();
        let ca = Ca::new("test collector CA");
        let server = ca.issue(
            &["127.0.0.1", "localhost"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let client = ca.issue(&["gpu-otel-sidecar"], ExtendedKeyUsagePurpose::ClientAuth);
        let pki = Self {
            dir,
            ca,
            server,
            client,
        };
        pki.write("ca.pem", &pki.ca.cert.pem());
        pki.write("client.pem", &pki.client.0);
        pki.write("client.key", &pki.client.1);
        pki
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    /// A receiver serving `protocol` with the server certificate, requiring a client
    /// certificate from this CA.
    fn receiver(&self, protocol: Protocol) -> Receiver {
        Receiver::start_tls(
            protocol,
            ServerTls {
                cert_pem: self.server.0.clone(),
                key_pem: self.server.1.clone(),
                client_ca_pem: Some(self.ca.cert.pem()),
            },
        )
    }

    /// The three TLS variables (CA, client certificate and key).
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", self.path("ca.pem")),
            (
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                self.path("client.pem"),
            ),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", self.path("client.key")),
        ]
    }
}

fn agent(rx: &Receiver) -> AgentBuilder {
    Agent::builder()
        .otlp(rx)
        .env_mock("four-gpu.json")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "1000")
}

fn readyz(agent: &Agent) -> (u16, Value) {
    let base = agent.health_url(WAIT).expect("health endpoint");
    let r = common::http::get(&format!("{base}/readyz")).unwrap();
    (r.status, serde_json::from_str(&r.text()).unwrap())
}

fn wait_readyz(agent: &Agent, want: u16) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, body) = readyz(agent);
        if status == want {
            return body;
        }
        assert!(Instant::now() < deadline, "{body:#}\n{}", agent.dump());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// With the CA and a client certificate the export goes through mutual TLS; without the
/// client certificate, or trusting another CA, the handshake fails: logged, not ready, the
/// agent keeps running, and nothing arrives.
fn mutual_tls(protocol: Protocol) {
    let pki = Pki::new(&format!("{protocol:?}"));
    let good_rx = pki.receiver(protocol);
    let mut good = agent(&good_rx).envs(pki.env()).spawn();

    let no_cert_rx = pki.receiver(protocol);
    let mut no_cert = agent(&no_cert_rx)
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", pki.path("ca.pem"))
        .spawn();

    let other = Ca::new("some other CA");
    let other_ca = pki.write("other-ca.pem", &other.cert.pem());
    let untrusted_rx = pki.receiver(protocol);
    let mut untrusted = agent(&untrusted_rx)
        .envs(pki.env())
        .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &other_ca)
        .spawn();

    assert!(good_rx.endpoint().starts_with("https://"));
    assert!(good_rx.wait_for_metric("hw.power", WAIT), "{}", good.dump());
    let power = good_rx.last_points("hw.power");
    let gpu0 = power
        .iter()
        .find(|p| p.attr("hw.id") == Some("GPU-00000000-0000-4000-8000-000000000000"))
        .expect("GPU 0 power");
    assert_eq!(gpu0.value, 100.0);
    wait_readyz(&good, 200);

    for (name, bad, rx) in [
        ("no client certificate", &mut no_cert, &no_cert_rx),
        ("untrusted server", &mut untrusted, &untrusted_rx),
    ] {
        assert!(
            bad.wait_for_stderr("metrics export failed", WAIT),
            "{name}\n{}",
            bad.dump()
        );
        let body = wait_readyz(bad, 503);
        assert_eq!(body["checks"]["export"]["ok"], false, "{name}: {body:#}");
        assert!(rx.metrics_requests().is_empty(), "{name}: data got through");
        assert!(bad.is_running(), "{name}");
        assert_eq!(
            bad.stderr_lines()
                .iter()
                .filter(|l| l.contains("metrics export failed"))
                .count(),
            1,
            "{name}: logged once"
        );
    }
    for a in [&mut good, &mut no_cert, &mut untrusted] {
        a.sigterm();
        assert_eq!(
            a.wait_exit(WAIT).and_then(|s| s.code()),
            Some(0),
            "{}",
            a.dump()
        );
        assert!(!a.dump().contains("PRIVATE KEY"));
    }
}

#[test]
fn grpc_mutual_tls() {
    mutual_tls(Protocol::Grpc);
}

#[test]
fn http_mutual_tls() {
    mutual_tls(Protocol::Http);
}

/// The events pipeline (OTel log records) uses the same TLS settings as the metrics.
#[test]
fn events_use_the_same_tls() {
    let pki = Pki::new("events");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    for protocol in [Protocol::Grpc, Protocol::Http] {
        let rx = pki.receiver(protocol);
        let mut vars: Vec<(String, String)> = rx.otlp_env();
        vars.extend(pki.env().into_iter().map(|(k, v)| (k.to_string(), v)));
        let config = Config::from_vars(vars).unwrap();
        let events = {
            let _guard = runtime.enter();
            Events::start(
                &config,
                opentelemetry_sdk::Resource::builder_empty().build(),
                &gpu_otel_sidecar::telemetry::metrics::recorded::Recorded::new(),
            )
            .unwrap()
        };
        events.emit(Event {
            name: "gpu_sidecar.test.tls",
            severity: opentelemetry::logs::Severity::Info,
            body: format!("over {protocol:?} with mutual TLS"),
            attributes: vec![opentelemetry::KeyValue::new("hw.id", "GPU-test")],
            time: None,
        });
        assert!(events.shutdown(Duration::from_secs(10)), "{protocol:?}");
        let got = rx.log_events("gpu_sidecar.test.tls");
        assert_eq!(got.len(), 1, "{protocol:?}: {:#?}", rx.log_records());
        assert_eq!(got[0].body, format!("over {protocol:?} with mutual TLS"));
        assert_eq!(got[0].attr("hw.id"), Some("GPU-test"));
    }
}

/// A TLS file that cannot be read, or holds no certificate, stops the agent with exit 2 and
/// one line naming the variable and the path.
#[test]
fn bad_tls_file_exits_2_naming_the_variable() {
    let pki = Pki::new("bad");
    let junk = pki.write("junk.pem", "-----BEGIN NOTHING-----\n");
    for (var, path) in [
        (
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            "/nonexistent/ca.pem".to_string(),
        ),
        (
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            junk.to_str().unwrap().to_string(),
        ),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", pki.path("client.pem")),
    ] {
        let mut a = Agent::builder()
            .envs(pki.env())
            .env(var, &path)
            .echo(false)
            .spawn();
        assert_eq!(
            a.wait_exit(WAIT).and_then(|s| s.code()),
            Some(2),
            "{}",
            a.dump()
        );
        let err = a.stderr_lines();
        assert_eq!(err.len(), 1, "{err:?}");
        assert!(err[0].contains(var) && err[0].contains(&path), "{}", err[0]);
    }
}

/// An `https://` endpoint without a CA file, where the system trust store has nothing
/// (`SSL_CERT_FILE` and `SSL_CERT_DIR` name nothing, as in an image without its CA bundle):
/// exit 1 at start, with one line that says what is missing and the two ways out, over gRPC
/// and HTTP alike.
#[test]
fn https_without_any_trusted_ca_stops_the_agent_in_one_line() {
    for protocol in ["grpc", "http/protobuf"] {
        let mut agent = Agent::builder()
            .env_mock("four-gpu.json")
            .env("GPU_SIDECAR_HEALTH_ADDR", "off")
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://127.0.0.1:4317")
            .env("SSL_CERT_FILE", "/nonexistent/ca-certificates.crt")
            .env("SSL_CERT_DIR", "/nonexistent/certs")
            .spawn();
        let code = agent.wait_exit(WAIT).and_then(|s| s.code());
        assert_eq!(code, Some(1), "{protocol}: {}", agent.dump());
        let problems: Vec<String> = agent
            .stderr_lines()
            .into_iter()
            .filter(|l| l.contains("ERROR") || l.contains("WARN"))
            .collect();
        assert_eq!(problems.len(), 1, "{protocol}: {}", agent.dump());
        for needed in [
            "https://127.0.0.1:4317",
            "no CA certificate",
            "/nonexistent/ca-certificates.crt",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ] {
            assert!(
                problems[0].contains(needed),
                "{protocol}: {needed}: {}",
                problems[0]
            );
        }
    }
}
