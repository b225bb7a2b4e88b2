//! Older drivers: every versioned NVML call the agent uses falls back to its older version
//! where the newer one is missing or refused, chosen once per device and logged once
//! (`src/sampling/raw.rs`, `Versioned`). One scenario per fallback, written by
//! `scripts/gen-fallback-scenarios.py`, plus the reported case `memory-v2-missing.json`.

use crate::common;

use std::time::Duration;

use common::{scenario, Agent, AgentBuilder, Point, Protocol, Receiver};

const WAIT: Duration = Duration::from_secs(20);
const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

fn agent(rx: &Receiver, scenario_name: &str) -> AgentBuilder {
    Agent::builder()
        .otlp(rx)
        .env_mock(scenario_name)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
}

fn gpu(i: usize) -> String {
    format!("GPU-01d0d000-0000-4000-8000-00000000000{i}")
}

/// The value of the one point of `points` on `hw_id` with `attrs`, if any.
fn value(points: &[Point], hw_id: &str, attrs: &[(&str, &str)]) -> Option<f64> {
    let hits: Vec<&Point> = points
        .iter()
        .filter(|p| {
            p.attr("hw.id") == Some(hw_id) && attrs.iter().all(|(k, v)| p.attr(k) == Some(v))
        })
        .collect();
    assert!(
        hits.len() <= 1,
        "several points for {hw_id} {attrs:?}: {hits:#?}"
    );
    hits.first().map(|p| p.value)
}

fn nvml_errors(rx: &Receiver, call: &str, code: &str) -> Option<f64> {
    rx.last_points("gpu_sidecar.nvml.errors")
        .iter()
        .find(|p| p.attr("nvidia.nvml.call") == Some(call) && p.attr("error.type") == Some(code))
        .map(|p| p.value)
}

/// How many stderr lines announce the switch to `older`.
fn switches(agent: &Agent, older: &str) -> usize {
    let needle = format!("instead=\"{older}\"");
    agent
        .stderr_lines()
        .iter()
        .filter(|l| l.contains(&needle))
        .count()
}

/// Waits for a few exports (the switch must stay one line, not one per tick).
fn settle(rx: &Receiver, agent: &Agent) {
    assert!(
        rx.wait_until(WAIT, |r| r.metrics_requests().len() >= 4),
        "{}",
        agent.dump()
    );
}

fn stop(mut agent: Agent) -> Agent {
    agent.sigterm();
    assert_eq!(
        agent
            .wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0),
        "{}",
        agent.dump()
    );
    agent
}

/// The reported case: `nvmlDeviceGetMemoryInfo_v2` answers FUNCTION_NOT_FOUND, v1 answers.
/// Memory metrics, the sample log's memory columns and the run report's memory figures all
/// come from v1; the refusal is counted once and logged once.
#[test]
fn memory_v2_missing_uses_v1() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("samples.csv");
    let report = dir.path().join("report.json");
    let rx = Receiver::start(Protocol::Grpc);
    let agent = agent(&rx, "memory-v2-missing.json")
        .env("GPU_SIDECAR_SAMPLE_LOG", &log)
        .env("GPU_SIDECAR_REPORT_FILE", &report)
        .spawn();
    settle(&rx, &agent);
    let uuid = "GPU-00000000-0000-4000-8000-000000000000";
    let s = common::read_json(scenario("memory-v2-missing.json"));
    let total = s["devices"][0]["defaults"]["mem_total"].as_f64().unwrap();
    let used = s["devices"][0]["defaults"]["mem_used"].as_f64().unwrap();
    assert_eq!(
        value(&rx.last_points("hw.gpu.memory.usage"), uuid, &[]),
        Some(used)
    );
    assert_eq!(
        value(&rx.last_points("hw.gpu.memory.limit"), uuid, &[]),
        Some(total)
    );
    assert_eq!(
        value(&rx.last_points("hw.gpu.memory.utilization"), uuid, &[]),
        Some(used / total)
    );
    assert!(
        rx.points("nvidia.gpu.memory.reserved").is_empty(),
        "v1 does not tell reserved memory: absent, not 0"
    );
    assert_eq!(
        nvml_errors(
            &rx,
            "nvmlDeviceGetMemoryInfo_v2",
            "NVML_ERROR_FUNCTION_NOT_FOUND"
        ),
        Some(1.0),
        "counted once, when the older call was chosen"
    );
    let agent = stop(agent);
    assert_eq!(
        switches(&agent, "nvmlDeviceGetMemoryInfo"),
        1,
        "{}",
        agent.dump()
    );

    let csv = common::read_text(&log);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert!(!rows.is_empty());
    for r in &rows {
        assert_eq!(r[col("memory_used_mib")], ((used / MIB) as u64).to_string());
        assert_eq!(
            r[col("memory_total_mib")],
            ((total / MIB) as u64).to_string()
        );
    }
    let report = common::read_json(&report);
    assert_eq!(
        report["gpus"][0]["memory_used_peak_bytes"].as_f64(),
        Some(used)
    );
    assert_eq!(
        report["gpus"][0]["memory_total_bytes"].as_f64(),
        Some(total)
    );
}

/// `_v2` refused with NOT_SUPPORTED (WSL) or UNKNOWN (R470): v1; a GPU whose `_v2` answers
/// keeps it (used without the reserved memory, and the reserved memory reported).
#[test]
fn memory_v2_refused_uses_v1_per_gpu() {
    let rx = Receiver::start(Protocol::Grpc);
    let agent = agent(&rx, "fallback-memory-info.json").spawn();
    settle(&rx, &agent);
    let usage = rx.last_points("hw.gpu.memory.usage");
    let reserved = rx.last_points("nvidia.gpu.memory.reserved");
    assert_eq!(value(&usage, &gpu(0), &[]), Some(4.0 * GIB));
    assert_eq!(value(&usage, &gpu(1), &[]), Some(5.0 * GIB));
    assert_eq!(value(&usage, &gpu(2), &[]), Some(6.0 * GIB - 512.0 * MIB));
    assert_eq!(value(&reserved, &gpu(0), &[]), None);
    assert_eq!(value(&reserved, &gpu(1), &[]), None);
    assert_eq!(value(&reserved, &gpu(2), &[]), Some(512.0 * MIB));
    assert_eq!(
        nvml_errors(
            &rx,
            "nvmlDeviceGetMemoryInfo_v2",
            "NVML_ERROR_NOT_SUPPORTED"
        ),
        Some(1.0)
    );
    assert_eq!(
        nvml_errors(&rx, "nvmlDeviceGetMemoryInfo_v2", "NVML_ERROR_UNKNOWN"),
        Some(1.0)
    );
    let agent = stop(agent);
    assert_eq!(
        switches(&agent, "nvmlDeviceGetMemoryInfo"),
        2,
        "{}",
        agent.dump()
    );
}

/// Compute processes through `_v2` (R470) and v1 (16-byte entries).
#[test]
fn process_lists_from_older_versions() {
    let rx = Receiver::start(Protocol::Grpc);
    let agent = agent(&rx, "fallback-processes.json").spawn();
    settle(&rx, &agent);
    let procs = rx.last_points("nvidia.gpu.process.memory.usage");
    assert_eq!(
        value(&procs, &gpu(0), &[("process.pid", "2000")]),
        Some(512.0 * MIB)
    );
    assert_eq!(
        value(&procs, &gpu(1), &[("process.pid", "2001")]),
        Some(1024.0 * MIB)
    );
    assert_eq!(procs.len(), 2, "{procs:#?}");
    let agent = stop(agent);
    assert_eq!(
        switches(&agent, "nvmlDeviceGetComputeRunningProcesses_v2"),
        1,
        "{}",
        agent.dump()
    );
    assert_eq!(
        switches(&agent, "nvmlDeviceGetComputeRunningProcesses"),
        1,
        "{}",
        agent.dump()
    );
}

/// `nvmlDeviceGetCurrentClocksEventReasons` missing (before R535): the older name answers.
#[test]
fn clock_event_reasons_from_the_older_name() {
    let rx = Receiver::start(Protocol::Grpc);
    let agent = agent(&rx, "fallback-clocks-reasons.json").spawn();
    settle(&rx, &agent);
    let reasons = rx.last_points("nvidia.gpu.clocks_event.active");
    let on = |r: &str| value(&reasons, &gpu(0), &[("nvidia.gpu.clocks_event.reason", r)]);
    assert_eq!(on("sw_power_cap"), Some(1.0));
    // Never active: not exported (a folded reason appears when first active).
    assert_eq!(on("gpu_idle"), None);
    let agent = stop(agent);
    assert_eq!(
        switches(&agent, "nvmlDeviceGetCurrentClocksThrottleReasons"),
        1,
        "{}",
        agent.dump()
    );
}

/// PCI bus id through `_v2` and v1 (the legacy 4-digit-domain field, widened).
#[test]
fn pci_bus_id_from_older_versions() {
    let rx = Receiver::start(Protocol::Grpc);
    let agent = agent(&rx, "fallback-pci-info.json").spawn();
    settle(&rx, &agent);
    let status = rx.last_points("hw.status");
    let bus = |i: usize| {
        status
            .iter()
            .find(|p| p.attr("hw.id") == Some(gpu(i).as_str()))
            .and_then(|p| p.attr("nvidia.gpu.pci.bus_id").map(str::to_string))
    };
    assert_eq!(bus(0).as_deref(), Some("00000000:18:00.0"));
    assert_eq!(bus(1).as_deref(), Some("00000000:28:00.0"));
    let agent = stop(agent);
    // GPU 0 switched to _v2; GPU 1 started at _v2 (the version in use for this listing) and
    // switched to v1.
    assert_eq!(
        switches(&agent, "nvmlDeviceGetPciInfo_v2"),
        1,
        "{}",
        agent.dump()
    );
    assert_eq!(
        switches(&agent, "nvmlDeviceGetPciInfo"),
        1,
        "{}",
        agent.dump()
    );
}

/// `nvmlEventSetWait_v2` missing (before R450): XIDs arrive through `nvmlEventSetWait`.
#[test]
fn xid_events_through_the_v1_wait() {
    let rx = Receiver::start(Protocol::Grpc);
    let agent = agent(&rx, "fallback-event-wait.json").spawn();
    let xids = |r: &Receiver| {
        let points = r.last_points("nvidia.gpu.xid.errors");
        (
            value(&points, &gpu(0), &[("nvidia.gpu.xid.code", "79")]),
            value(&points, &gpu(0), &[("nvidia.gpu.xid.code", "13")]),
        )
    };
    assert!(
        rx.wait_until(WAIT, |r| xids(r) == (Some(1.0), Some(1.0))),
        "{:?}\n{}",
        xids(&rx),
        agent.dump()
    );
    let agent = stop(agent);
    assert_eq!(switches(&agent, "nvmlEventSetWait"), 1, "{}", agent.dump());
}

/// Every versioned call and its older versions are in `docs/operations.md`'s table, with what the
/// older versions give less.
#[test]
fn every_fallback_is_documented() {
    let doc = common::read_text(common::workspace_root().join("docs/operations.md"));
    for v in gpu_otel_sidecar::sampling::VERSIONED {
        let names = v.versions();
        let older: Vec<String> = names[1..].iter().map(|n| format!("`{n}`")).collect();
        let row = format!(
            "| `{}` | {} | {} |",
            names[0],
            older.join(", "),
            v.older_lacks()
        );
        assert!(doc.contains(&row), "docs/operations.md lacks {row}");
    }
}

/// MPS clients seen through `_v2` and v1 of `nvmlDeviceGetMPSComputeRunningProcesses`: both
/// GPUs are marked shared (`nvidia.gpu.sharing=mps`).
#[test]
fn mps_clients_from_older_versions() {
    let rx = Receiver::start(Protocol::Grpc);
    let agent = agent(&rx, "fallback-mps-processes.json").spawn();
    settle(&rx, &agent);
    for i in 0..2 {
        let status = rx.last_points("hw.status");
        let p = status
            .iter()
            .find(|p| p.attr("hw.id") == Some(gpu(i).as_str()))
            .unwrap_or_else(|| panic!("GPU {i}: {}", agent.dump()));
        assert_eq!(p.attr("nvidia.gpu.sharing"), Some("mps"), "GPU {i}: {p:?}");
    }
    let agent = stop(agent);
    assert_eq!(
        switches(&agent, "nvmlDeviceGetMPSComputeRunningProcesses_v2"),
        1,
        "{}",
        agent.dump()
    );
    assert_eq!(
        switches(&agent, "nvmlDeviceGetMPSComputeRunningProcesses"),
        1,
        "{}",
        agent.dump()
    );
}
