//! Tests of the standard `OTEL_*` variables: the exporters, the OTLP endpoints, headers
//! and TLS files, the per-signal forms, and the table against `docs/otel-variables.md`.

use super::*;
use crate::config::otel as rows;

#[test]
fn http_endpoints_get_signal_paths() {
    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
        (
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
            "http://other:4318/custom",
        ),
    ])
    .unwrap();
    assert_eq!(c.otlp.metrics.endpoint, "http://collector:4318/v1/metrics");
    assert_eq!(c.otlp.logs.endpoint, "http://other:4318/custom");
    let c = cfg(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]).unwrap();
    assert_eq!(c.otlp.metrics.endpoint, "http://localhost:4318/v1/metrics");
}

#[test]
fn schemeless_endpoint_is_https_unless_insecure() {
    let c = cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317")]).unwrap();
    assert_eq!(c.otlp.metrics.endpoint, "https://collector:4317");
    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
        ("OTEL_EXPORTER_OTLP_INSECURE", "true"),
    ])
    .unwrap();
    assert_eq!(c.otlp.metrics.endpoint, "http://collector:4317");
    assert!(cfg(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://x")]).is_err());
}

#[test]
fn header_values_are_secret() {
    let c = cfg(&[(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "Authorization=Bearer%20tok123,x-tenant=a",
    )])
    .unwrap();
    assert_eq!(c.otlp.metrics.headers[0].0, "authorization");
    assert_eq!(c.otlp.metrics.headers[0].1.expose(), "Bearer tok123");
    assert!(!format!("{c:?}").contains("tok123"));
    let e = cfg(&[("OTEL_EXPORTER_OTLP_HEADERS", "tok123-without-key")]).unwrap_err();
    assert!(!e.to_string().contains("tok123"), "{e}");
}

/// The `webhook` command reads the agent's configuration too (logging, OTLP): its own
/// names are accepted, a typo of them is not.
/// A misspelled name gets the one nearest name, not the list of all of them; a name
/// like none of them gets where they are listed.
#[test]
fn console_metrics_bring_console_events_unless_told_otherwise() {
    let kinds = |vars: &[(&str, &str)]| {
        let c = cfg(vars).unwrap();
        (c.metrics_exporter, c.logs_exporter)
    };
    assert_eq!(kinds(&[]), (ExporterKind::Otlp, ExporterKind::Otlp));
    assert_eq!(
        kinds(&[("OTEL_METRICS_EXPORTER", "console")]),
        (ExporterKind::Console, ExporterKind::Console)
    );
    assert_eq!(
        kinds(&[
            ("OTEL_METRICS_EXPORTER", "console"),
            ("OTEL_LOGS_EXPORTER", "otlp")
        ]),
        (ExporterKind::Console, ExporterKind::Otlp)
    );
    assert_eq!(
        kinds(&[
            ("OTEL_METRICS_EXPORTER", "console"),
            ("OTEL_LOGS_EXPORTER", "none")
        ]),
        (ExporterKind::Console, ExporterKind::None)
    );
    assert_eq!(
        kinds(&[("OTEL_METRICS_EXPORTER", "none")]),
        (ExporterKind::None, ExporterKind::Otlp)
    );
}

/// A fresh directory under the system temp dir for one test, removed when the guard drops
/// (at the end of the test, passed or failed: TLS keys are written there).
fn temp_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("gpu-sidecar-config-{name}-"))
        .tempdir()
        .unwrap()
}

#[test]
fn tls_files_are_read_and_checked() {
    let guard = temp_dir("tls");
    let dir = guard.path();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (ca, crt, pem_key, junk) = (
        dir.join("ca.pem"),
        dir.join("client.pem"),
        dir.join("client.key"),
        dir.join("junk.pem"),
    );
    std::fs::write(&ca, cert.pem()).unwrap();
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&pem_key, key.serialize_pem()).unwrap();
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let p = |p: &PathBuf| p.to_str().unwrap().to_string();

    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_CERTIFICATE", &p(&ca)),
        ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &p(&crt)),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &p(&pem_key)),
    ])
    .unwrap();
    assert_eq!(
        c.otlp.metrics.tls.ca.as_ref().unwrap().bytes(),
        cert.pem().as_bytes()
    );
    assert_eq!(
        c.otlp.metrics.tls.client_key.as_ref().unwrap().expose(),
        key.serialize_pem()
    );
    let debug = format!("{c:?}");
    assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    assert!(!debug.contains("BEGIN CERTIFICATE"), "{debug}");

    let e = cfg(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem")]).unwrap_err();
    assert_eq!(e.var, "OTEL_EXPORTER_OTLP_CERTIFICATE");
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    let e = cfg(&[("OTEL_EXPORTER_OTLP_CERTIFICATE", &p(&junk))]).unwrap_err();
    assert_eq!(e.var, "OTEL_EXPORTER_OTLP_CERTIFICATE");
    assert!(e.expected.contains("none found"), "{e}");
    // A certificate where the key should be, and a key where a certificate should be.
    let e = cfg(&[
        ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &p(&crt)),
        ("OTEL_EXPORTER_OTLP_CLIENT_KEY", &p(&crt)),
    ])
    .unwrap_err();
    assert_eq!(e.var, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
    let e = cfg(&[("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &p(&pem_key))]).unwrap_err();
    assert_eq!(e.var, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE");
    // Mutual TLS needs both halves.
    let e = cfg(&[("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", &p(&crt))]).unwrap_err();
    assert_eq!(e.var, "OTEL_EXPORTER_OTLP_CLIENT_KEY");
    assert_eq!(
        e.to_string(),
        "OTEL_EXPORTER_OTLP_CLIENT_KEY is not set: expected a private key file: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE is set, and mutual TLS needs both"
    );
    let e = cfg(&[("OTEL_EXPORTER_OTLP_CLIENT_KEY", &p(&pem_key))]).unwrap_err();
    assert_eq!(e.var, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE");
}

#[test]
fn per_signal_otlp_settings_win_over_the_general_ones() {
    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "3000"),
        ("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "700"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=a"),
        ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-tenant=m"),
        ("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "gzip"),
    ])
    .unwrap();
    // The general endpoint gets the signal's path once the signal speaks HTTP.
    assert_eq!(c.otlp.metrics.protocol, Protocol::HttpProtobuf);
    assert_eq!(c.otlp.metrics.endpoint, "http://collector:4317/v1/metrics");
    assert_eq!(c.otlp.logs.protocol, Protocol::Grpc);
    assert_eq!(c.otlp.logs.endpoint, "http://collector:4317");
    assert_eq!(c.otlp.metrics.timeout, Duration::from_millis(3000));
    assert_eq!(c.otlp.logs.timeout, Duration::from_millis(700));
    assert_eq!(c.otlp.metrics.headers[0].1.expose(), "m");
    assert_eq!(c.otlp.logs.headers[0].1.expose(), "a");
    assert!(c.otlp.logs.gzip && !c.otlp.metrics.gzip);
    // The case: a per-signal HTTP protocol with a /v1/metrics URL.
    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf"),
        (
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "http://collector:4318/v1/metrics",
        ),
    ])
    .unwrap();
    assert_eq!(c.otlp.metrics.protocol, Protocol::HttpProtobuf);
    assert_eq!(c.otlp.metrics.endpoint, "http://collector:4318/v1/metrics");
    assert_eq!(c.otlp.logs.protocol, Protocol::Grpc);
    // Errors name the variable that was read.
    let e = cfg(&[("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "soon")]).unwrap_err();
    assert_eq!(e.var, "OTEL_EXPORTER_OTLP_LOGS_TIMEOUT");
    let e = cfg(&[("OTEL_EXPORTER_OTLP_METRICS_INSECURE", "yes")]).unwrap_err();
    assert_eq!(e.var, "OTEL_EXPORTER_OTLP_METRICS_INSECURE");
}

#[test]
fn temporality_sdk_disabled_and_export_timeout() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c.otlp.temporality, TemporalityPreference::Cumulative);
    assert_eq!(c.metric_export_timeout, Duration::from_secs(30));
    assert_eq!(c.metrics_export_bound(), Duration::from_secs(10));
    for (v, t) in [
        ("delta", TemporalityPreference::Delta),
        ("LowMemory", TemporalityPreference::LowMemory),
        ("CUMULATIVE", TemporalityPreference::Cumulative),
    ] {
        let c = cfg(&[("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", v)]).unwrap();
        assert_eq!(c.otlp.temporality, t, "{v}");
    }
    let e = cfg(&[(
        "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE",
        "deltas",
    )])
    .unwrap_err();
    assert_eq!(e.expected, "cumulative, delta or lowmemory");
    let c = cfg(&[
        ("OTEL_SDK_DISABLED", "true"),
        ("OTEL_METRICS_EXPORTER", "console"),
    ])
    .unwrap();
    assert!(c.sdk_disabled);
    assert_eq!(
        (c.metrics_exporter, c.logs_exporter),
        (ExporterKind::None, ExporterKind::None)
    );
    let c = cfg(&[("OTEL_METRIC_EXPORT_TIMEOUT", "2000")]).unwrap();
    assert_eq!(c.metrics_export_bound(), Duration::from_secs(2));
    let c = cfg(&[("OTEL_BLRP_MAX_QUEUE_SIZE", "100")]).unwrap();
    assert_eq!(c.logs_batch.max_queue_size, 100);
    assert_eq!(
        c.logs_batch.max_export_batch_size, 100,
        "a batch fits the queue"
    );
    assert_eq!(
        cfg(&[("OTEL_BLRP_MAX_QUEUE_SIZE", "0")]).unwrap_err().var,
        "OTEL_BLRP_MAX_QUEUE_SIZE"
    );
}

/// Sets every variable of the table, one at a time, to its example value: an honoured
/// one changes the configuration (and is not in the warning), one that does not apply
/// leaves it as it was and is named in the warning, with the table's reason.
#[test]
fn every_otel_variable_is_honoured_or_named_in_the_warning() {
    let guard = temp_dir("otel-vars");
    let dir = guard.path();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (ca, crt, pem_key) = (dir.join("ca.pem"), dir.join("c.pem"), dir.join("c.key"));
    std::fs::write(&ca, cert.pem()).unwrap();
    std::fs::write(&crt, cert.pem()).unwrap();
    std::fs::write(&pem_key, key.serialize_pem()).unwrap();
    let file = |example: &str| match example {
        "<ca>" => ca.to_str().unwrap().to_string(),
        "<cert>" => crt.to_str().unwrap().to_string(),
        "<key>" => pem_key.to_str().unwrap().to_string(),
        other => other.to_string(),
    };
    let baseline = cfg(&[]).unwrap();
    for row in OTEL_VARIABLES {
        let name = row.name.replace('*', "EXAMPLE");
        let mut vars = vec![(name.clone(), file(row.example))];
        // Mutual TLS needs both halves; a certificate matters for https only.
        if row.example == "<cert>" {
            vars.push((
                name.replace("CLIENT_CERTIFICATE", "CLIENT_KEY"),
                file("<key>"),
            ));
        }
        if row.example == "<key>" {
            vars.push((
                name.replace("CLIENT_KEY", "CLIENT_CERTIFICATE"),
                file("<cert>"),
            ));
        }
        let c = Config::from_vars(vars.clone())
            .unwrap_or_else(|e| panic!("{name}={}: {e}", row.example));
        let warned: Vec<&str> = c.otel_not_applied.iter().map(|(k, _)| k.as_str()).collect();
        match row.used {
            OtelUse::Honoured => {
                assert!(warned.is_empty(), "{name}: honoured but warned: {warned:?}");
                assert_ne!(c, baseline, "{name}={} changes nothing", row.example);
            }
            OtelUse::NotApplied => {
                assert_eq!(warned, vec![name.as_str()], "{name}");
                assert_eq!(c.otel_not_applied[0].1, row.what);
                let mut c = c.clone();
                c.otel_not_applied.clear();
                assert_eq!(c, baseline, "{name} is ignored");
            }
        }
    }
    let c = cfg(&[("OTEL_TRACES_SAMPLER", "always_on"), ("OTEL_MADE_UP", "1")]).unwrap();
    assert_eq!(c.otel_not_applied.len(), 2);
    assert!(
        c.otel_not_applied[0].1.contains("not a variable"),
        "{:?}",
        c.otel_not_applied
    );
    assert_eq!(c.otel_not_applied[1].1, "the agent exports no traces");
    // A misspelled standard name is warned about with the name it is probably a typo of;
    // nothing is refused.
    let c = cfg(&[
        ("OTEL_EXPORTER_OTLP_ENDPIONT", "http://collector:4317"),
        ("OTEL_METRICS_EXPORT_INTERVAL", "1000"),
        ("OTEL_SEMCONV_STABILITY_OPT_IN", "http"),
    ])
    .unwrap();
    let warned: BTreeMap<&str, &str> = c
        .otel_not_applied
        .iter()
        .map(|(k, why)| (k.as_str(), why.as_str()))
        .collect();
    assert!(
        warned["OTEL_EXPORTER_OTLP_ENDPIONT"]
            .ends_with("; did you mean OTEL_EXPORTER_OTLP_ENDPOINT?"),
        "{warned:?}"
    );
    assert!(
        warned["OTEL_METRICS_EXPORT_INTERVAL"]
            .ends_with("; did you mean OTEL_METRIC_EXPORT_INTERVAL?"),
        "{warned:?}"
    );
    assert!(
        !warned["OTEL_SEMCONV_STABILITY_OPT_IN"].contains("did you mean"),
        "{warned:?}"
    );
    assert_eq!(c.otlp.metrics.endpoint, "http://localhost:4317");
}

/// Every honoured variable's default comes from its row, typed: unset, the configuration
/// holds the row's value, and the docs' text is derived from the same value.
#[test]
fn unset_otel_variables_take_their_rows_typed_defaults() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c.export_interval, Duration::from_millis(10_000));
    assert_eq!(
        c.export_interval,
        rows::METRIC_EXPORT_INTERVAL.default_millis()
    );
    assert_eq!(c.metric_export_timeout, Duration::from_millis(30_000));
    assert_eq!(c.otlp.metrics.timeout, Duration::from_millis(10_000));
    assert_eq!(
        c.otlp.logs.timeout,
        rows::otlp_row::TIMEOUT.default_millis()
    );
    assert_eq!(c.logs_batch, LogsBatch::default());
    assert_eq!(
        (
            c.logs_batch.schedule_delay,
            c.logs_batch.max_queue_size,
            c.logs_batch.max_export_batch_size
        ),
        (Duration::from_millis(1000), 1024, 512)
    );
    assert_eq!(c.otlp.temporality, TemporalityPreference::Cumulative);
    assert_eq!(c.logs_exporter, ExporterKind::Otlp);
    assert!(!c.sdk_disabled && !c.otlp.logs.insecure && !c.otlp.logs.gzip);
    let c = cfg(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]).unwrap();
    assert_eq!(c.otlp.logs.endpoint, "http://localhost:4318/v1/logs");
    assert_eq!(
        rows::LOGS_EXPORTER.default.markdown(),
        "`otlp` (`console` when `OTEL_METRICS_EXPORTER=console`)"
    );
    assert_eq!(rows::METRIC_EXPORT_TIMEOUT.default.markdown(), "`30000`");
    assert_eq!(
        rows::otlp_row::ENDPOINT.default.markdown(),
        "`http://localhost:4317` (gRPC), `http://localhost:4318` (HTTP)"
    );
}
