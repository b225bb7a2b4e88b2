//! Tests of the configuration: defaults, every error message, the tables against each other.

use super::*;
use crate::rules::catalogue::{Hold, RuleId, RULES};

fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_vars(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

#[test]
fn defaults() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c.sample_interval, Duration::from_secs(5));
    assert_eq!(c.export_interval, Duration::from_secs(10));
    assert_eq!(c.devices, DeviceSelection::All);
    assert_eq!(c.nvml_library, PathBuf::from("libnvidia-ml.so.1"));
    assert_eq!(c.otlp.metrics.protocol, Protocol::Grpc);
    assert_eq!(c.otlp.metrics.endpoint, "http://localhost:4317");
    assert_eq!(c.metrics_exporter, ExporterKind::Otlp);
    assert_eq!(c.service_name, "gpu-otel-sidecar");
    assert!(c.resource_attributes.is_empty());
    assert!(!c.otlp.metrics.gzip);
}

#[test]
fn durations_take_units() {
    let c = cfg(&[("GPU_SIDECAR_SAMPLE_INTERVAL", "500ms")]).unwrap();
    assert_eq!(c.sample_interval, Duration::from_millis(500));
    let c = cfg(&[("GPU_SIDECAR_SAMPLE_INTERVAL", "1m")]).unwrap();
    assert_eq!(c.sample_interval, Duration::from_secs(60));
    let e = cfg(&[("GPU_SIDECAR_SAMPLE_INTERVAL", "5")]).unwrap_err();
    assert_eq!(e.var, "GPU_SIDECAR_SAMPLE_INTERVAL");
    assert_eq!(
        e.to_string(),
        "invalid GPU_SIDECAR_SAMPLE_INTERVAL=\"5\": expected a duration with a unit such as 500ms, 5s or 1m, greater than zero"
    );
    assert!(cfg(&[("GPU_SIDECAR_SAMPLE_INTERVAL", "0s")]).is_err());
}

#[test]
fn slow_intervals_default_and_parse() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c.slow_intervals, SlowIntervals::default());
    assert_eq!(c.slow_intervals.pcie, Duration::from_secs(30));
    let c = cfg(&[
        ("GPU_SIDECAR_GPM_INTERVAL", "2s"),
        ("GPU_SIDECAR_ENERGY_INTERVAL", "1m"),
        ("GPU_SIDECAR_PROCESS_INTERVAL", ""),
    ])
    .unwrap();
    assert_eq!(c.slow_intervals.gpm, Duration::from_secs(2));
    assert_eq!(c.slow_intervals.energy, Duration::from_secs(60));
    assert_eq!(c.slow_intervals.process, Duration::from_secs(10));
    let e = cfg(&[("GPU_SIDECAR_PCIE_INTERVAL", "often")]).unwrap_err();
    assert_eq!(e.var, "GPU_SIDECAR_PCIE_INTERVAL");
}

#[test]
fn devices_list() {
    let c = cfg(&[("GPU_SIDECAR_DEVICES", "0, GPU-abc,MIG-def")]).unwrap();
    assert_eq!(
        c.devices,
        DeviceSelection::List(vec![
            DeviceId::Index(0),
            DeviceId::Uuid("GPU-abc".into()),
            DeviceId::Uuid("MIG-def".into())
        ])
    );
    assert_eq!(
        cfg(&[("GPU_SIDECAR_DEVICES", "gpu0")]).unwrap_err().var,
        "GPU_SIDECAR_DEVICES"
    );
}

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
fn resource_merge_otel_wins_and_empty_adds_nothing() {
    let c = cfg(&[
        ("K8S_POD_NAME", "trainer-0"),
        ("K8S_NAMESPACE_NAME", "ml"),
        ("K8S_NODE_NAME", ""),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "k8s.namespace.name=override,team=vision%20ai,service.name=svc",
        ),
    ])
    .unwrap();
    assert_eq!(c.resource_attributes["k8s.pod.name"], "trainer-0");
    assert_eq!(c.resource_attributes["k8s.namespace.name"], "override");
    assert_eq!(c.resource_attributes["team"], "vision ai");
    assert!(!c.resource_attributes.contains_key("k8s.node.name"));
    assert_eq!(c.service_name, "svc");
    let c = cfg(&[
        ("OTEL_RESOURCE_ATTRIBUTES", "service.name=svc"),
        ("OTEL_SERVICE_NAME", "named"),
    ])
    .unwrap();
    assert_eq!(c.service_name, "named");
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

#[test]
fn report_and_sample_log_settings() {
    let c = cfg(&[]).unwrap();
    assert_eq!(
        (c.report_file, c.sample_log, c.report_html),
        (None, None, None)
    );
    let c = cfg(&[("GPU_SIDECAR_REPORT_HTML", "/out/run.html")]).unwrap();
    assert_eq!(c.report_html, Some("/out/run.html".into()));
    let e = cfg(&[("GPU_SIDECAR_REPORT_HTML", "-")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("GPU_SIDECAR_REPORT_HTML") && e.contains("a file path (not -)"),
        "{e}"
    );
    let c = cfg(&[
        ("GPU_SIDECAR_REPORT_FILE", "-"),
        ("GPU_SIDECAR_SAMPLE_LOG", "/var/log/gpu.csv"),
    ])
    .unwrap();
    assert_eq!(c.report_file, Some(OutputTarget::Stdout));
    assert_eq!(
        c.sample_log,
        Some(SampleLogConfig {
            target: OutputTarget::Path("/var/log/gpu.csv".into()),
            format: SampleLogFormat::Csv,
            max_bytes: 100 * 1024 * 1024,
            sample_interval: Duration::from_secs(5),
        })
    );
    let c = cfg(&[
        ("GPU_SIDECAR_REPORT_FILE", "/out/report.json"),
        ("GPU_SIDECAR_SAMPLE_LOG", "-"),
        ("GPU_SIDECAR_SAMPLE_LOG_FORMAT", "jsonl"),
        ("GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES", "512KiB"),
    ])
    .unwrap();
    assert_eq!(
        c.report_file,
        Some(OutputTarget::Path("/out/report.json".into()))
    );
    let log = c.sample_log.unwrap();
    assert_eq!(log.target, OutputTarget::Stdout);
    assert_eq!(log.format, SampleLogFormat::Jsonl);
    assert_eq!(log.max_bytes, 512 * 1024);
    let c = cfg(&[
        ("GPU_SIDECAR_SAMPLE_LOG", "x.csv"),
        ("GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES", "4096"),
    ])
    .unwrap();
    assert_eq!(c.sample_log.unwrap().max_bytes, 4096);
    for (var, value) in [
        ("GPU_SIDECAR_SAMPLE_LOG_FORMAT", "json"),
        ("GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES", "0"),
        ("GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES", "big"),
        ("GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES", "-5"),
    ] {
        let e = cfg(&[(var, value)]).unwrap_err();
        assert_eq!((e.var.as_str(), e.value.as_str()), (var, value));
    }
}

#[test]
fn exit_with_containers_and_the_pods_environment() {
    let c = cfg(&[]).unwrap();
    assert!(!c.exit_with_containers && !c.in_kubernetes);
    assert_eq!(c.toolkit, ToolkitEnv::default());
    let c = cfg(&[
        ("GPU_SIDECAR_EXIT_WITH_CONTAINERS", "true"),
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        ("NVIDIA_VISIBLE_DEVICES", "all"),
        ("NVIDIA_DRIVER_CAPABILITIES", "utility"),
    ])
    .unwrap();
    assert!(c.exit_with_containers && c.in_kubernetes);
    assert_eq!(c.toolkit.visible_devices.as_deref(), Some("all"));
    assert_eq!(c.toolkit.driver_capabilities.as_deref(), Some("utility"));
    assert!(cfg(&[("K8S_POD_NAME", "p")]).unwrap().in_kubernetes);
    let e = cfg(&[("GPU_SIDECAR_EXIT_WITH_CONTAINERS", "yes")]).unwrap_err();
    assert_eq!(e.var, "GPU_SIDECAR_EXIT_WITH_CONTAINERS");
    let e = cfg(&[
        ("GPU_SIDECAR_EXIT_WITH_CONTAINERS", "true"),
        ("GPU_SIDECAR_EXIT_WITH_PROCESS", "python"),
    ])
    .unwrap_err();
    assert_eq!(e.var, "GPU_SIDECAR_EXIT_WITH_CONTAINERS");
    assert!(
        e.to_string()
            .contains("GPU_SIDECAR_EXIT_WITH_PROCESS=python"),
        "{e}"
    );
}

#[test]
fn health_addr_default_off_and_bad() {
    let c = cfg(&[]).unwrap();
    assert_eq!(
        c.health_addr,
        Some(HealthAddr::Tcp("0.0.0.0:13134".parse().unwrap()))
    );
    // Three sample intervals (5 s by default), at least 10 s.
    assert_eq!(c.watchdog_timeout, Duration::from_secs(15));
    let c = cfg(&[("GPU_SIDECAR_SAMPLE_INTERVAL", "1s")]).unwrap();
    assert_eq!(c.watchdog_timeout, Duration::from_secs(10));
    let c = cfg(&[("GPU_SIDECAR_HEALTH_ADDR", "off")]).unwrap();
    assert_eq!(c.health_addr, None);
    let c = cfg(&[("GPU_SIDECAR_HEALTH_ADDR", "127.0.0.1:0")]).unwrap();
    assert_eq!(
        c.health_addr,
        Some(HealthAddr::Tcp("127.0.0.1:0".parse().unwrap()))
    );
    let c = cfg(&[(
        "GPU_SIDECAR_HEALTH_ADDR",
        "unix:/run/gpu-otel-sidecar/health.sock",
    )])
    .unwrap();
    assert_eq!(
        c.health_addr,
        Some(HealthAddr::Unix("/run/gpu-otel-sidecar/health.sock".into()))
    );
    assert_eq!(
        c.health_addr.unwrap().to_string(),
        "unix:/run/gpu-otel-sidecar/health.sock"
    );
    let long = format!("unix:/{}", "s".repeat(107));
    for bad in [":13134", "unix:health.sock", "unix:", long.as_str()] {
        let e = cfg(&[("GPU_SIDECAR_HEALTH_ADDR", bad)]).unwrap_err();
        assert_eq!(
            (e.var.as_str(), e.value.as_str()),
            ("GPU_SIDECAR_HEALTH_ADDR", bad)
        );
    }
    let c = cfg(&[("GPU_SIDECAR_SAMPLE_INTERVAL", "10s")]).unwrap();
    assert_eq!(c.watchdog_timeout, Duration::from_secs(30));
    let c = cfg(&[("GPU_SIDECAR_WATCHDOG_TIMEOUT", "2s")]).unwrap();
    assert_eq!(c.watchdog_timeout, Duration::from_secs(2));
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
fn bad_enums_name_what_they_accept() {
    let e = cfg(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]).unwrap_err();
    assert_eq!(
        e.expected,
        "grpc or http/protobuf (http/json is not supported)"
    );
    let e = cfg(&[("OTEL_METRICS_EXPORTER", "prometheus")]).unwrap_err();
    assert_eq!(e.expected, "otlp, console or none");
    let e = cfg(&[("GPU_SIDECAR_LOG_LEVEL", "verbose")]).unwrap_err();
    assert_eq!(e.var, "GPU_SIDECAR_LOG_LEVEL");
    let e = cfg(&[("OTEL_METRIC_EXPORT_INTERVAL", "10s")]).unwrap_err();
    assert_eq!(e.var, "OTEL_METRIC_EXPORT_INTERVAL");
}

#[test]
fn rule_settings_defaults_and_overrides() {
    let c = cfg(&[]).unwrap();
    let m = c.rules.get(RuleId::MemoryNearFull);
    assert_eq!(
        m,
        RuleSettings {
            enabled: true,
            threshold: Some(95.0),
            second_threshold: None,
            hold: Hold::Duration(Duration::from_secs(10)),
        }
    );
    assert_eq!(c.rules.get(RuleId::TemperatureHigh).hold, Hold::Samples(3));
    assert_eq!(c.rules.get(RuleId::GpuLost).hold, Hold::Immediate);
    assert_eq!(c.rules.get(RuleId::GpuLost).threshold, None);
    assert!(c.rules.any_enabled());
    let c = cfg(&[
        ("GPU_SIDECAR_RULE_MEMORY_NEAR_FULL_THRESHOLD", "90%"),
        ("GPU_SIDECAR_RULE_MEMORY_NEAR_FULL_DURATION", "1m"),
        ("GPU_SIDECAR_RULE_TEMPERATURE_HIGH_SAMPLES", "5"),
        ("GPU_SIDECAR_RULE_TEMPERATURE_HIGH_THRESHOLD", "80.5"),
        ("GPU_SIDECAR_RULE_XID_ENABLED", "false"),
    ])
    .unwrap();
    let m = c.rules.get(RuleId::MemoryNearFull);
    assert_eq!(m.threshold, Some(90.0));
    assert_eq!(m.hold, Hold::Duration(Duration::from_secs(60)));
    let t = c.rules.get(RuleId::TemperatureHigh);
    assert_eq!((t.threshold, t.hold), (Some(80.5), Hold::Samples(5)));
    assert!(!c.rules.get(RuleId::Xid).enabled);
}

#[test]
fn bad_rule_settings_name_the_variable() {
    for (var, value) in [
        ("GPU_SIDECAR_RULE_MEMORY_NEAR_FULL_THRESHOLD", "0"),
        ("GPU_SIDECAR_RULE_MEMORY_NEAR_FULL_THRESHOLD", "101"),
        ("GPU_SIDECAR_RULE_MEMORY_NEAR_FULL_THRESHOLD", "0.95x"),
        ("GPU_SIDECAR_RULE_TEMPERATURE_HIGH_THRESHOLD", "85%"),
        ("GPU_SIDECAR_RULE_TEMPERATURE_HIGH_SAMPLES", "0"),
        ("GPU_SIDECAR_RULE_INPUT_STARVATION_DURATION", "120"),
        ("GPU_SIDECAR_RULE_GPU_LOST_ENABLED", "yes"),
    ] {
        let e = cfg(&[(var, value)]).unwrap_err();
        assert_eq!((e.var.as_str(), e.value.as_str()), (var, value), "{e}");
    }
    let e = cfg(&[("GPU_SIDECAR_RULE_MEMORY_NEAR_FULL_THRESHOLD", "101")]).unwrap_err();
    assert_eq!(
        e.expected,
        "a number above 0 up to 100 (percent of total GPU memory)"
    );
    // A rule without a threshold has no such setting.
    let e = cfg(&[("GPU_SIDECAR_RULE_GPU_LOST_THRESHOLD", "1")]).unwrap_err();
    assert!(
        matches!(e.problem, ConfigProblem::NoSuchSetting { .. }),
        "{e}"
    );
}

#[test]
fn price_and_second_thresholds() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c.price_per_gpu_hour, None);
    let tc = c.rules.get(RuleId::TensorCoresIdle);
    assert_eq!(
        (tc.threshold, tc.second_threshold),
        (Some(10.0), Some(90.0))
    );
    let mb = c.rules.get(RuleId::MemoryBound);
    assert_eq!(
        (mb.threshold, mb.second_threshold),
        (Some(80.0), Some(50.0))
    );
    assert_eq!(c.rules.get(RuleId::MemoryNearFull).second_threshold, None);
    let c = cfg(&[
        ("GPU_SIDECAR_PRICE_PER_GPU_HOUR", "2.5"),
        ("GPU_SIDECAR_RULE_TENSOR_CORES_IDLE_UTILIZATION", "80%"),
        ("GPU_SIDECAR_RULE_MEMORY_BOUND_SM_ACTIVITY", "30"),
    ])
    .unwrap();
    assert_eq!(c.price_per_gpu_hour, Some(2.5));
    assert_eq!(
        c.rules.get(RuleId::TensorCoresIdle).second_threshold,
        Some(80.0)
    );
    assert_eq!(
        c.rules.get(RuleId::MemoryBound).second_threshold,
        Some(30.0)
    );
    for (var, v, expected) in [
        (
            "GPU_SIDECAR_PRICE_PER_GPU_HOUR",
            "-1",
            "a price per GPU-hour: a number from 0, in any currency, e.g. 2.50",
        ),
        (
            "GPU_SIDECAR_PRICE_PER_GPU_HOUR",
            "$3",
            "a price per GPU-hour: a number from 0, in any currency, e.g. 2.50",
        ),
        (
            "GPU_SIDECAR_RULE_TENSOR_CORES_IDLE_UTILIZATION",
            "0",
            "a number above 0 up to 100 (percent GPU utilization)",
        ),
    ] {
        let e = cfg(&[(var, v)]).unwrap_err();
        assert_eq!((e.var.as_str(), e.expected.as_str()), (var, expected));
    }
}

/// Every rule's variables are known settings (the rule table names them), and a
/// variable of a rule that does not exist is refused.
/// The settings table: unique prefixed names, the webhook's under `GPU_SIDECAR_WEBHOOK_`;
/// every default is a value its command accepts when set explicitly, and means the same
/// as unset.
/// `--help` names every setting of `docs/settings.md`'s tables, the webhook's included.
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

#[test]
fn proc_root_and_node_mode() {
    let c = cfg(&[]).unwrap();
    assert_eq!(c.proc_root, PathBuf::from("/proc"));
    assert!(!c.node);
    let c = cfg(&[("GPU_SIDECAR_PROC_ROOT", "/host/proc")]).unwrap();
    assert_eq!(c.proc_root, PathBuf::from("/host/proc"));
    let (node, dropped) = c.into_node().unwrap();
    assert!(node.node && dropped.is_empty());
    assert!(!node.rules.get(RuleId::UtilizationImbalance).enabled);
    assert!(node.rules.get(RuleId::InputStarvation).enabled);
    let e = cfg(&[
        ("GPU_SIDECAR_DEVICES", "pod-resources"),
        ("K8S_POD_NAME", "p"),
        ("K8S_NAMESPACE_NAME", "n"),
    ])
    .unwrap()
    .into_node()
    .unwrap_err();
    assert_eq!(e.var, "GPU_SIDECAR_DEVICES");
    assert!(e.expected.contains("node mode"), "{e}");
}

mod names;
