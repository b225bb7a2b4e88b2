//! Impossible values answered with `NVML_SUCCESS` (NVML's sentinels): absent everywhere,
//! logged once per GPU and reading (`src/sampling/bounds.rs`). The reported case
//! `sentinel-values.json`: six GPUs whose memory temperature answers 0, 0xFFFFFFFF,
//! NOT_SUPPORTED, -1 (signed) and 255, and whose GPU 5 answers 0xFFFFFFFF for its
//! temperature and power.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{Agent, Point, Protocol, Receiver};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

fn uuid(i: usize) -> String {
    format!("GPU-00000000-0000-4000-8000-00000000007{i}")
}

/// `hw.id` → value of the points of `points` with `attr`.
fn by_gpu(points: &[Point], attr: Option<(&str, &str)>) -> BTreeMap<String, f64> {
    points
        .iter()
        .filter(|p| attr.is_none_or(|(k, v)| p.attr(k) == Some(v)))
        .map(|p| (p.attr("hw.id").unwrap().to_string(), p.value))
        .collect()
}

#[test]
fn sentinels_are_never_exported_judged_or_kept_as_peaks() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let log = dir.path().join("samples.jsonl");
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock("sentinel-values.json")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        // One sample at or above 85 °C would be enough to alert.
        .env("GPU_SIDECAR_RULE_TEMPERATURE_HIGH_SAMPLES", "1")
        .env("GPU_SIDECAR_REPORT_FILE", &report)
        .env("GPU_SIDECAR_SAMPLE_LOG", &log)
        .env("GPU_SIDECAR_SAMPLE_LOG_FORMAT", "jsonl")
        .spawn();
    assert!(
        rx.wait_until(WAIT, |r| r.metrics_requests().len() >= 5),
        "{}",
        agent.dump()
    );

    // Exported: only the possible values.
    let temps = rx.points("hw.temperature");
    let memory = by_gpu(&temps, Some(("hw.sensor_location", "memory")));
    assert_eq!(
        memory,
        BTreeMap::from([(uuid(5), 50.0)]),
        "0, 0xFFFFFFFF, NOT_SUPPORTED, -1 and 255 are no temperatures"
    );
    let gpu = by_gpu(&temps, Some(("hw.sensor_location", "gpu")));
    assert_eq!(gpu.len(), 5, "{gpu:?}");
    assert!(!gpu.contains_key(&uuid(5)));
    assert!(gpu.values().all(|c| *c == 40.0), "{gpu:?}");
    let power = by_gpu(&rx.points("hw.power"), None);
    assert_eq!(power.len(), 5, "{power:?}");
    assert!(!power.contains_key(&uuid(5)));
    assert!(power.values().all(|w| *w == 100.0), "{power:?}");
    // The rest of GPU 5 is still reported.
    assert!(by_gpu(&rx.points("hw.gpu.utilization"), None).contains_key(&uuid(5)));

    agent.sigterm();
    assert_eq!(
        agent
            .wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0),
        "{}",
        agent.dump()
    );

    // Not judged: no temperature alert for 4,294,967,295 °C.
    let alerts: Vec<String> = rx
        .log_records()
        .iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .map(|r| r.event_name.clone())
        .collect();
    assert!(alerts.is_empty(), "{alerts:?}");

    // Not kept as peaks.
    let report = common::read_json(&report);
    let gpus = report["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 6);
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g["uuid"], uuid(i).as_str());
        let mem_peak = g["temperature_memory_peak_c"].as_u64();
        assert_eq!(mem_peak, (i == 5).then_some(50), "GPU {i}: {g}");
    }
    assert_eq!(gpus[5]["temperature_gpu_peak_c"], Value::Null);
    assert_eq!(gpus[5]["power_peak_w"], Value::Null);
    assert_eq!(gpus[0]["temperature_gpu_peak_c"].as_u64(), Some(40));
    assert_eq!(report["pod"]["temperature_gpu_peak_c"].as_u64(), Some(40));
    assert_eq!(
        report["pod"]["temperature_memory_peak_c"].as_u64(),
        Some(50)
    );
    // The pod's power is a sum over ticks where every GPU answered: GPU 5 never did.
    assert_eq!(report["pod"]["power_peak_w"], Value::Null);

    // Not in the sample log.
    let rows: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let gpu5: Vec<&Value> = rows
        .iter()
        .filter(|r| r["gpu_uuid"] == uuid(5).as_str())
        .collect();
    assert!(!gpu5.is_empty());
    for r in gpu5 {
        assert_eq!(r["temperature_gpu_c"], Value::Null, "{r}");
        assert_eq!(r["power_w"], Value::Null, "{r}");
    }

    // Logged once per GPU and reading: memory temperature on GPUs 0, 1, 3, 4; temperature
    // and power on GPU 5 (GPU 2's NOT_SUPPORTED is an unsupported field, said as such).
    let lines: Vec<String> = agent
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("impossible value"))
        .collect();
    assert_eq!(lines.len(), 6, "{lines:#?}");
    for (i, reading) in [
        (0, "memory (HBM) temperature"),
        (1, "memory (HBM) temperature"),
        (3, "memory (HBM) temperature"),
        (4, "memory (HBM) temperature"),
        (5, "GPU temperature"),
        (5, "power draw"),
    ] {
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains(&uuid(i)) && l.contains(&format!("reading=\"{reading}\"")))
                .count(),
            1,
            "GPU {i} {reading}: {lines:#?}"
        );
    }
}
