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
    // The pod's restart policy: Never by default, OnFailure with the kubelet's wait or a
    // fixed one, Always refusing the exit rules (a crash loop), a bad value named.
    use crate::process_watch::{RestartPolicy, RestartWait};
    let c = cfg(&[]).unwrap();
    assert_eq!(
        (c.pod_restart_policy, c.restart_wait),
        (RestartPolicy::Never, RestartWait::Kubelet)
    );
    let c = cfg(&[
        ("GPU_SIDECAR_EXIT_WITH_CONTAINERS", "true"),
        ("GPU_SIDECAR_POD_RESTART_POLICY", "OnFailure"),
        ("GPU_SIDECAR_RESTART_WAIT", "45s"),
    ])
    .unwrap();
    assert_eq!(
        (c.pod_restart_policy, c.restart_wait),
        (
            RestartPolicy::OnFailure,
            RestartWait::Fixed(Duration::from_secs(45))
        )
    );
    assert!(cfg(&[("GPU_SIDECAR_POD_RESTART_POLICY", "Always")]).is_ok());
    for (rule, value) in [
        ("GPU_SIDECAR_EXIT_WITH_CONTAINERS", "true"),
        ("GPU_SIDECAR_EXIT_WITH_PROCESS", "python"),
    ] {
        let e = cfg(&[(rule, value), ("GPU_SIDECAR_POD_RESTART_POLICY", "Always")]).unwrap_err();
        assert_eq!((e.var.as_str(), e.value.as_str()), (rule, value));
        assert!(e.to_string().contains("crash loop"), "{e}");
    }
    for (var, value) in [
        ("GPU_SIDECAR_POD_RESTART_POLICY", "onfailure"),
        ("GPU_SIDECAR_RESTART_WAIT", "soon"),
    ] {
        let e = cfg(&[(var, value)]).unwrap_err();
        assert_eq!(e.var, var);
    }
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
mod otel;
