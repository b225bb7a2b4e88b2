//! Tests of the integration-test harness itself (`tests/common`), without the agent: the OTLP
//! receiver against the real opentelemetry-otlp exporters and hand-built requests, its fault
//! modes, and the child-process wrapper driving ordinary programs.

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::{Duration, Instant};

use common::{http, Agent, Kind, Mode, Point, Protocol, Receiver};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{
    Compression, MetricExporter, WithExportConfig, WithHttpConfig, WithTonicConfig,
};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use prost::Message;
use tonic_types::StatusExt;

const WAIT: Duration = Duration::from_secs(10);

/// A meter provider exporting through `exporter`, with resource `service.name=selftest`.
fn provider(exporter: MetricExporter) -> SdkMeterProvider {
    SdkMeterProvider::builder()
        .with_reader(
            PeriodicReader::builder(exporter)
                .with_interval(Duration::from_secs(3600))
                .build(),
        )
        .with_resource(
            opentelemetry_sdk::Resource::builder_empty()
                .with_service_name("selftest")
                .build(),
        )
        .build()
}

/// Records `test.gauge` = 42.5 W {hw.id=GPU-x} and exports it now.
fn record_and_flush(provider: &SdkMeterProvider) {
    let gauge = provider
        .meter("selftest-meter")
        .f64_gauge("test.gauge")
        .with_unit("W")
        .build();
    gauge.record(42.5, &[KeyValue::new("hw.id", "GPU-x")]);
    provider.force_flush().expect("force_flush");
}

fn assert_test_gauge(points: &[Point]) {
    assert_eq!(points.len(), 1, "{points:#?}");
    let p = &points[0];
    assert_eq!(p.value, 42.5);
    assert!(!p.is_int);
    assert_eq!(p.unit, "W");
    assert_eq!(p.kind, Kind::Gauge);
    assert_eq!(
        p.attrs,
        BTreeMap::from([("hw.id".to_owned(), "GPU-x".to_owned())])
    );
    assert_eq!(p.attr("hw.id"), Some("GPU-x"));
    assert_eq!(
        p.resource.get("service.name").map(String::as_str),
        Some("selftest")
    );
    assert!(p.time_unix_nano > 0);
}

/// An `ExportMetricsServiceRequest` with one gauge point `test.gauge` = 42.5 W {hw.id=GPU-x}.
fn gauge_request() -> ExportMetricsServiceRequest {
    let string = |s: &str| AnyValue {
        value: Some(any_value::Value::StringValue(s.to_owned())),
    };
    let kv = |k: &str, v: &str| opentelemetry_proto::tonic::common::v1::KeyValue {
        key: k.to_owned(),
        value: Some(string(v)),
        ..Default::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "selftest")],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "hand-built".into(),
                    ..Default::default()
                }),
                metrics: vec![Metric {
                    name: "test.gauge".into(),
                    unit: "W".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: vec![NumberDataPoint {
                            attributes: vec![kv("hw.id", "GPU-x")],
                            time_unix_nano: 1_700_000_000_000_000_000,
                            value: Some(number_data_point::Value::AsDouble(42.5)),
                            ..Default::default()
                        }],
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_receiver_gets_a_real_gzip_export_with_metadata() {
    let rx = Receiver::grpc().await;
    assert_eq!(rx.protocol(), Protocol::Grpc);
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert("authorization", "Bearer s3cret".parse().unwrap());
    let exporter = MetricExporter::builder()
        .with_tonic()
        .with_endpoint(rx.endpoint())
        .with_compression(Compression::Gzip)
        .with_metadata(metadata)
        .build()
        .expect("tonic exporter");
    let provider = provider(exporter);
    // force_flush blocks: off the async workers (NOTES.md).
    let provider = tokio::task::spawn_blocking(move || {
        record_and_flush(&provider);
        provider
    })
    .await
    .unwrap();

    assert!(rx.wait_for_metric_async("test.gauge", WAIT).await);
    assert_test_gauge(&rx.points("test.gauge"));
    assert_test_gauge(&rx.last_points("test.gauge"));
    let p = &rx.points("test.gauge")[0];
    assert_eq!(p.scope_name, "selftest-meter");

    let requests = rx.metrics_requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].gzip, "headers: {:?}", requests[0].headers);
    assert_eq!(requests[0].header("Authorization"), Some("Bearer s3cret"));
    assert!(rx.metric_names().contains("test.gauge"));
    tokio::task::spawn_blocking(move || drop(provider.shutdown()))
        .await
        .unwrap();
}

/// The HTTP receiver from a plain `#[test]`, fed by the blocking reqwest exporter.
#[test]
fn http_receiver_gets_a_real_export_with_headers() {
    let rx = Receiver::start(Protocol::Http);
    // reqwest is built with rustls and no bundled provider: a process must install one
    // before the SDK builds its default HTTP client (the agent does this at startup).
    gpu_otel_sidecar::telemetry::otlp::tls::install_crypto_provider();
    let exporter = MetricExporter::builder()
        .with_http()
        .with_endpoint(rx.metrics_url())
        .with_headers(HashMap::from([(
            "authorization".to_owned(),
            "Bearer s3cret".to_owned(),
        )]))
        .build()
        .expect("http exporter");
    let provider = provider(exporter);
    record_and_flush(&provider);

    assert!(rx.wait_for_metric("test.gauge", WAIT));
    assert_test_gauge(&rx.points("test.gauge"));
    let requests = rx.metrics_requests();
    assert_eq!(requests.len(), 1);
    assert!(!requests[0].gzip);
    assert_eq!(requests[0].header("authorization"), Some("Bearer s3cret"));
    assert!(rx.decode_errors().is_empty());
    let _ = provider.shutdown();
}

#[test]
fn http_receiver_decodes_gzip_and_answers_protobuf() {
    let rx = Receiver::start(Protocol::Http);
    let body = gzip(&gauge_request().encode_to_vec());
    let response = http::post(
        &rx.metrics_url(),
        &[
            ("Content-Type", "application/x-protobuf"),
            ("Content-Encoding", "gzip"),
        ],
        &body,
    )
    .unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("application/x-protobuf")
    );

    let points = rx.points("test.gauge");
    assert_test_gauge(&points);
    assert_eq!(points[0].scope_name, "hand-built");
    assert_eq!(points[0].time_unix_nano, 1_700_000_000_000_000_000);
    assert!(rx.metrics_requests()[0].gzip);

    // Not protobuf: refused with 400, noted, not stored.
    let response = http::post(
        &rx.metrics_url(),
        &[("Content-Type", "application/x-protobuf")],
        b"\xff\xff\xff",
    )
    .unwrap();
    assert_eq!(response.status, 400);
    assert_eq!(rx.decode_errors().len(), 1);
    assert_eq!(rx.metrics_requests().len(), 1);
}

#[test]
fn log_records_are_flattened() {
    let rx = Receiver::start(Protocol::Http);
    let string = |s: &str| AnyValue {
        value: Some(any_value::Value::StringValue(s.to_owned())),
    };
    let request = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
                    key: "k8s.pod.name".into(),
                    value: Some(string("trainer-0")),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    event_name: "nvidia.gpu.xid".into(),
                    severity_number: 17,
                    severity_text: "ERROR".into(),
                    body: Some(string("XID 79 on GPU-x")),
                    attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
                        key: "nvidia.gpu.xid".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::IntValue(79)),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let response = http::post(
        &rx.logs_url(),
        &[("Content-Type", "application/x-protobuf")],
        &request.encode_to_vec(),
    )
    .unwrap();
    assert_eq!(response.status, 200);
    assert!(rx.wait_for_log_event("nvidia.gpu.xid", WAIT));
    let records = rx.log_records();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r.event_name, "nvidia.gpu.xid");
    assert_eq!((r.severity_number, r.severity_text.as_str()), (17, "ERROR"));
    assert_eq!(r.body, "XID 79 on GPU-x");
    assert_eq!(r.attr("nvidia.gpu.xid"), Some("79"));
    assert_eq!(r.resource["k8s.pod.name"], "trainer-0");
    assert_eq!(rx.log_requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_unavailable_carries_retry_info_then_accepts() {
    let rx = Receiver::grpc().await;
    let mut client = MetricsServiceClient::connect(rx.endpoint()).await.unwrap();

    rx.set_mode(Mode::Unavailable {
        retry_after: Some(Duration::from_secs(2)),
    });
    let status = client.export(gauge_request()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let retry = status.get_details_retry_info().expect("RetryInfo detail");
    assert_eq!(retry.retry_delay, Some(Duration::from_secs(2)));

    rx.set_mode(Mode::ResourceExhausted { retry_after: None });
    let status = client.export(gauge_request()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(status.get_details_retry_info().is_none());

    assert!(rx.metrics_requests().is_empty());
    assert_eq!(rx.attempts().len(), 2);

    rx.set_mode(Mode::Accept);
    client.export(gauge_request()).await.unwrap();
    assert_test_gauge(&rx.points("test.gauge"));
    let attempts = rx.attempts();
    assert_eq!(attempts.len(), 3);
    assert_eq!(attempts[2].mode, Mode::Accept);

    // fail_next: one refusal, then the standing mode again.
    rx.fail_next(
        1,
        Mode::Fail {
            grpc: tonic::Code::InvalidArgument,
            http: 400,
        },
    );
    let status = client.export(gauge_request()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    client.export(gauge_request()).await.unwrap();
    assert_eq!(rx.metrics_requests().len(), 2);
}

#[test]
fn http_refusals_carry_retry_after() {
    let rx = Receiver::start(Protocol::Http);
    let body = gauge_request().encode_to_vec();
    let send = || {
        http::post(
            &rx.metrics_url(),
            &[("Content-Type", "application/x-protobuf")],
            &body,
        )
        .unwrap()
    };

    rx.set_mode(Mode::Unavailable {
        retry_after: Some(Duration::from_millis(1500)),
    });
    let response = send();
    assert_eq!(response.status, 503);
    assert_eq!(response.header("retry-after"), Some("2"));

    rx.set_mode(Mode::ResourceExhausted {
        retry_after: Some(Duration::from_secs(3)),
    });
    let response = send();
    assert_eq!(response.status, 429);
    assert_eq!(response.header("retry-after"), Some("3"));

    rx.set_mode(Mode::Unavailable { retry_after: None });
    let response = send();
    assert_eq!(response.status, 503);
    assert_eq!(response.header("retry-after"), None);

    assert!(rx.metrics_requests().is_empty());
    assert_eq!(rx.attempts().len(), 3);
    rx.set_mode(Mode::Accept);
    assert_eq!(send().status, 200);
    assert_eq!(rx.metrics_requests().len(), 1);
}

#[test]
fn delay_mode_answers_late() {
    let rx = Receiver::start(Protocol::Http);
    rx.set_mode(Mode::Delay(Duration::from_millis(300)));
    let started = Instant::now();
    let response = http::post(
        &rx.metrics_url(),
        &[("Content-Type", "application/x-protobuf")],
        &gauge_request().encode_to_vec(),
    )
    .unwrap();
    assert_eq!(response.status, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(rx.metrics_requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_refuses_connections_and_restart_serves_the_same_port() {
    let rx = Receiver::grpc().await;
    let endpoint = rx.endpoint();
    let mut client = MetricsServiceClient::connect(endpoint.clone())
        .await
        .unwrap();
    client.export(gauge_request()).await.unwrap();

    rx.stop();
    assert!(!rx.is_running());
    // The open connection was dropped and new ones are refused.
    assert!(client.export(gauge_request()).await.is_err());
    assert!(std::net::TcpStream::connect(rx.addr()).is_err());

    rx.restart();
    assert_eq!(rx.endpoint(), endpoint);
    let mut client = MetricsServiceClient::connect(endpoint).await.unwrap();
    client.export(gauge_request()).await.unwrap();
    assert_eq!(rx.metrics_requests().len(), 2);
    assert_eq!(rx.points("test.gauge").len(), 2);
    assert_eq!(rx.last_points("test.gauge").len(), 1);
}

#[test]
fn agent_wrapper_clears_the_environment_and_captures_output() {
    let mut child = Agent::builder()
        .program("/usr/bin/env")
        .env("GPU_SIDECAR_X", "1")
        .env("K", "first")
        .env("K", "second")
        .spawn();
    let status = child.wait_exit(WAIT).expect("env exits");
    assert!(status.success());
    let mut keys: Vec<String> = child
        .stdout_lines()
        .iter()
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_owned()))
        .collect();
    keys.sort();
    // GPU_SIDECAR_HEALTH_ADDR=127.0.0.1:0 is the builder's default (a free health port).
    keys.retain(|k| {
        ![
            "PATH",
            "HOME",
            "LLVM_PROFILE_FILE",
            "GPU_SIDECAR_HEALTH_ADDR",
        ]
        .contains(&k.as_str())
    });
    assert_eq!(keys, ["GPU_SIDECAR_X", "K"], "{}", child.dump());
    assert!(child.stdout_lines().contains(&"K=second".to_owned()));
    assert!(child.wait_for_stdout("GPU_SIDECAR_X=1", Duration::ZERO));
}

#[test]
fn agent_wrapper_signals_and_measures() {
    use std::os::unix::process::ExitStatusExt;

    let mut child = Agent::builder()
        .program("/bin/sh")
        .args(["-c", "echo ready >&2; exec sleep 30"])
        .spawn();
    assert!(child.wait_for_stderr("ready", WAIT));
    assert!(!child.wait_for_stderr("never printed", Duration::from_millis(50)));
    assert!(common::wait_until(WAIT, || child
        .rss_kib()
        .is_some_and(|k| k > 0)));
    assert!(child.is_running());
    child.sigterm();
    let status = child.wait_exit(WAIT).expect("sleep exits on SIGTERM");
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    assert_eq!(child.rss_kib(), None);

    let mut stuck = Agent::builder()
        .program("/bin/sh")
        .args(["-c", "trap '' INT; echo armed >&2; exec sleep 30"])
        .spawn();
    assert!(stuck.wait_for_stderr("armed", WAIT));
    stuck.sigint();
    assert_eq!(stuck.wait_exit(Duration::from_millis(300)), None);
    assert!(!stuck.is_running());
}

#[test]
fn mock_library_is_built_and_paths_resolve() {
    let lib = common::mock_library();
    assert!(lib.is_file(), "{}", lib.display());
    assert!(lib.ends_with("libnvml_mock.so"));
    assert!(common::scenario("x.json").ends_with("tests/scenarios/x.json"));
    assert!(
        common::fixture_dir().join("README.md").is_file(),
        "{}",
        common::fixture_dir().display()
    );
}

/// A descriptor the test process inherited without close-on-exec (a shell's `exec 3>>file`
/// before `cargo test`) does not reach the program the harness starts: it is judged on what
/// it opened itself.
#[test]
fn programs_started_by_the_harness_inherit_no_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("timing.log");
    let _held = common::agent::inheritable_file_for_writing(&path);
    let mut ls = Agent::builder()
        .program("ls")
        .args(["-l", "/proc/self/fd/"])
        .echo(false)
        .spawn();
    assert!(ls.wait_exit(WAIT).expect("ls exits").success());
    let listing = ls.stdout_lines().join("\n");
    assert!(
        listing.contains("/proc/"),
        "ls lists its own descriptors: {listing}"
    );
    assert!(
        !listing.contains(path.to_str().unwrap()),
        "{} reached the child:\n{listing}",
        path.display()
    );
}
