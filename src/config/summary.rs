//! What `gpu-otel-sidecar check-config` prints: everything the agent understood from the
//! environment, as one plain JSON object ([`summary`]): values as the settings write them
//! (`grpc`, `console`, `GPU-…`), durations in milliseconds (`*_ms`), sizes in bytes, no
//! Rust debug text, and no secret (header names without their values, TLS files as whether
//! they were given).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::otlp::OtlpExporter;
use super::{Config, DeviceSelection, LogFormat, SampleLogFormat};
use crate::rules::catalogue::{Hold, RULES};

/// Milliseconds of a duration, as a JSON number.
fn ms(d: std::time::Duration) -> Value {
    json!(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One OTLP exporter: protocol, endpoint, header names, timeout, compression, TLS files.
fn exporter(e: &OtlpExporter) -> Value {
    json!({
        "protocol": e.protocol.as_str(),
        "endpoint": e.endpoint,
        "header_names": e.headers.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        "timeout_ms": ms(e.timeout),
        "compression": if e.gzip { "gzip" } else { "none" },
        "tls": {
            "ca": if e.tls.ca.is_some() { "the file given" } else { "the system trust store" },
            "client_certificate": e.tls.client_certificate.is_some(),
        },
    })
}

/// The devices as `GPU_SIDECAR_DEVICES` names them: `"all"`, `"pod-resources"`, or the
/// list's entries as written (`["0", "GPU-…"]`).
fn devices(d: &DeviceSelection) -> Value {
    match d {
        DeviceSelection::All => json!("all"),
        DeviceSelection::PodResources => json!("pod-resources"),
        DeviceSelection::List(ids) => {
            json!(ids.iter().map(ToString::to_string).collect::<Vec<_>>())
        }
        DeviceSelection::Allocated(a) => {
            json!(a.iter().map(|d| d.plugin_id.as_str()).collect::<Vec<_>>())
        }
    }
}

/// Every rule by its name: `enabled`, and those of `threshold`, the second threshold (by
/// its suffix in lower case, e.g. `utilization`), `duration_ms` or `samples` it has.
fn rules(config: &Config) -> Value {
    let mut out = Map::new();
    for spec in RULES {
        let s = config.rules.get(spec.id);
        let mut rule = Map::new();
        rule.insert("enabled".into(), json!(s.enabled));
        if let Some(t) = s.threshold {
            rule.insert("threshold".into(), json!(t));
        }
        if let (Some(t), Some(named)) = (s.second_threshold, spec.second_threshold) {
            rule.insert(named.suffix.to_lowercase(), json!(t));
        }
        match s.hold {
            Hold::Immediate => {}
            Hold::Duration(d) => {
                rule.insert("duration_ms".into(), ms(d));
            }
            Hold::Samples(n) => {
                rule.insert("samples".into(), json!(n));
            }
        }
        out.insert(spec.name.into(), Value::Object(rule));
    }
    Value::Object(out)
}

/// What `check-config` prints for `config`, with `resource` (the decoded resource
/// attributes, `service.name` included) as [`crate::attribution::resource`] builds it.
///
/// Every field of [`Config`] is named here (the pattern has no `..`): a new setting does not
/// compile until it is printed.
pub fn summary(config: &Config, resource: &opentelemetry_sdk::Resource) -> Value {
    let Config {
        sample_interval,
        export_interval,
        slow_intervals,
        metrics_detail,
        devices: selection,
        pod_resources_socket,
        exit_with_process,
        proc_root,
        node,
        exit_with_containers,
        pod_restart_policy,
        restart_wait,
        in_kubernetes,
        toolkit,
        sees_all_node_gpus,
        nvml_library,
        log_format,
        log_level,
        shutdown_timeout,
        metrics_exporter,
        logs_exporter,
        otlp,
        health_addr,
        watchdog_timeout,
        // Both are in `resource`, as exported.
        service_name: _,
        resource_attributes: _,
        report_file,
        report_html,
        sample_log,
        rules: _,
        metric_export_timeout,
        logs_batch,
        sdk_disabled,
        otel_not_applied,
        price_per_gpu_hour,
    } = config;
    let resource: BTreeMap<String, String> = resource
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let not_applied: BTreeMap<&str, &str> = otel_not_applied
        .iter()
        .map(|(k, why)| (k.as_str(), why.as_str()))
        .collect();
    let sample_log = sample_log.as_ref().map(|l| {
        json!({
            "target": l.target.as_setting(),
            "format": match l.format {
                SampleLogFormat::Csv => "csv",
                SampleLogFormat::Jsonl => "jsonl",
            },
            "max_bytes": l.max_bytes,
        })
    });
    json!({
        "resource": resource,
        "sdk_disabled": sdk_disabled,
        "metrics_exporter": metrics_exporter.as_str(),
        "logs_exporter": logs_exporter.as_str(),
        "otlp": {
            "metrics": exporter(&otlp.metrics),
            "logs": exporter(&otlp.logs),
            "temporality": otlp.temporality.as_str(),
        },
        "export_interval_ms": ms(*export_interval),
        "metric_export_timeout_ms": ms(*metric_export_timeout),
        "logs_batch": {
            "schedule_delay_ms": ms(logs_batch.schedule_delay),
            "max_queue_size": logs_batch.max_queue_size,
            "max_export_batch_size": logs_batch.max_export_batch_size,
        },
        "otel_not_applied": not_applied,
        "sample_interval_ms": ms(*sample_interval),
        "slow_intervals_ms": {
            "process": ms(slow_intervals.process),
            "gpm": ms(slow_intervals.gpm),
            "energy": ms(slow_intervals.energy),
            "pcie": ms(slow_intervals.pcie),
        },
        "metrics_detail": metrics_detail,
        "devices": devices(selection),
        "nvidia_visible_devices_all": sees_all_node_gpus,
        "pod_resources_socket": pod_resources_socket.display().to_string(),
        "exit_with_process": exit_with_process,
        "proc_root": proc_root.display().to_string(),
        "node_mode": node,
        "exit_with_containers": exit_with_containers,
        "pod_restart_policy": pod_restart_policy.as_str(),
        "restart_wait": match restart_wait {
            crate::process_watch::RestartWait::Kubelet => "kubelet".to_string(),
            crate::process_watch::RestartWait::Fixed(d) => humantime::format_duration(*d).to_string(),
        },
        "in_kubernetes": in_kubernetes,
        "nvidia_container_toolkit": {
            "visible_devices": toolkit.visible_devices,
            "driver_capabilities": toolkit.driver_capabilities,
        },
        "nvml_library": nvml_library.display().to_string(),
        "log": {
            "format": match log_format {
                LogFormat::Text => "text",
                LogFormat::Json => "json",
            },
            "level": log_level,
        },
        "health_addr": health_addr.as_ref().map(|a| a.to_string()),
        "watchdog_timeout_ms": ms(*watchdog_timeout),
        "shutdown_timeout_ms": ms(*shutdown_timeout),
        "report_file": report_file.as_ref().map(super::OutputTarget::as_setting),
        "report_html": report_html.as_ref().map(|p| p.display().to_string()),
        "sample_log": sample_log,
        "price_per_gpu_hour": price_per_gpu_hour,
        "rules": rules(config),
    })
}
