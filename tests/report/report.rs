//! The run report and the sample log, through the real binary with the mock NVML: the H200
//! recording replayed for a known span and the report checked against numbers computed here
//! from `series-under-load.jsonl`; a gap in NVML's answers reported as missed samples; CSV
//! and JSONL logs read back with standard readers; write errors that leave export running.
//! Then what is made from them (`report/page.rs`): the HTML page (`report --html`,
//! `GPU_SIDECAR_REPORT_HTML`), a three-day log under its size bound, `compare`, and the
//! page in a real browser (ignored here; `scripts/check-report-page.sh` runs it).

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    h200_recording, read_json, read_text, scenario, wait_until, Agent, Protocol, Receiver,
};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

const COLUMNS: [&str; 13] = [
    "timestamp",
    "gpu_index",
    "gpu_uuid",
    "utilization_gpu_percent",
    "memory_used_mib",
    "memory_total_mib",
    "temperature_gpu_c",
    "power_w",
    "clock_sm_mhz",
    "clocks_event_reasons",
    "power_limit_w",
    "sm_activity_percent",
    "tensor_activity_percent",
];

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} not a number in {v}"))
}

/// Writes `scen` into `dir` and returns its path.
/// Samples of the run that have a row in the sample log: every one the report counts
/// (`samples_taken`), except the final one (the report's `ended_at`) when it came less than
/// half a sample interval after the previous row (the log then ends at that row).
fn samples_with_a_row(report: &Value, taken: u64, last_row_at: &str, interval: Duration) -> u64 {
    let ended = report["ended_at"].as_str().unwrap();
    if ended == last_row_at {
        return taken;
    }
    let at = |s: &str| humantime::parse_rfc3339(s).unwrap();
    let gap = at(ended).duration_since(at(last_row_at)).unwrap();
    assert!(
        gap < interval / 2,
        "the final sample came {gap:?} after the last row, yet it has no row"
    );
    taken - 1
}

fn write_scenario(dir: &Path, scen: &Value) -> PathBuf {
    let path = dir.join("scenario.json");
    std::fs::write(&path, serde_json::to_string(scen).unwrap()).unwrap();
    path
}

/// The report line on stdout (`GPU_SIDECAR_REPORT_FILE=-`).
fn stdout_report(agent: &Agent) -> Value {
    let lines: Vec<String> = agent
        .stdout_lines()
        .into_iter()
        .filter(|l| l.contains("\"event.name\":\"gpu.run.report\""))
        .collect();
    assert_eq!(lines.len(), 1, "one report line\n{}", agent.dump());
    serde_json::from_str(&lines[0]).expect("the report is one JSON object")
}

fn stop(agent: &mut Agent) {
    agent.sigterm();
    let status = agent.wait_exit(WAIT).expect("exits within the bound");
    assert_eq!(status.code(), Some(0), "{}", agent.dump());
}

/// The H200 recording replayed once, 10× faster, not looped, its first row held for 10 s of
/// scenario time (1 s real: the first sample surely reads it); the agent is stopped once the
/// last row is exported. The report must match the recording over that span.
const HOLD_FIRST_S: f64 = 10.0;
const TIME_SCALE: f64 = 10.0;

#[test]
fn report_matches_the_h200_recording() {
    let rec = h200_recording();
    let dir = tempfile::tempdir().unwrap();
    let mut scen = read_json(scenario("h200-under-load.json"));
    scen["loop"] = Value::Bool(false);
    let timeline = scen["devices"][0]["timeline"].as_array_mut().unwrap();
    assert_eq!(timeline.len(), rec.len());
    for row in timeline.iter_mut() {
        row["t"] = Value::from(num(row, "t") + HOLD_FIRST_S);
    }
    let mut first = timeline[0].clone();
    first["t"] = Value::from(0.0);
    timeline.insert(0, first);
    let scen_path = write_scenario(dir.path(), &scen);
    let log_path = dir.path().join("samples.jsonl");

    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock_path(&scen_path)
        .env("NVML_MOCK_TIME_SCALE", TIME_SCALE.to_string())
        .env("NVML_MOCK_NO_LATENCY", "1")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("GPU_SIDECAR_ENERGY_INTERVAL", "100ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("GPU_SIDECAR_REPORT_FILE", "-")
        .env("GPU_SIDECAR_SAMPLE_LOG", &log_path)
        .env("GPU_SIDECAR_SAMPLE_LOG_FORMAT", "jsonl")
        .env("K8S_POD_NAME", "resnet-train-0")
        .spawn();
    let first_row = &rec[0];
    let last_row = rec.last().unwrap();
    // hw.energy counts from the agent's first reading (the held first row).
    let last_j = (num(last_row, "energy_mj") - num(first_row, "energy_mj")) / 1000.0;
    assert!(
        rx.wait_until(WAIT, |r| r
            .points("hw.energy")
            .iter()
            .any(|p| (p.value - last_j).abs() < 1e-6)),
        "the last row was never exported\n{}",
        agent.dump()
    );
    stop(&mut agent);

    let report = stdout_report(&agent);
    assert_eq!(report["gpus"].as_array().unwrap().len(), 1);
    let gpu = &report["gpus"][0];
    let pod = &report["pod"];
    assert_eq!(gpu["uuid"], scen["devices"][0]["uuid"]);
    assert_eq!(gpu["name"], "NVIDIA H200");
    assert_eq!(report["resource"]["k8s.pod.name"], "resnet-train-0");

    // Energy: the counter's difference from the first row to the last.
    let energy = (num(last_row, "energy_mj") - num(first_row, "energy_mj")) / 1000.0;
    assert_eq!(num(gpu, "energy_j"), energy);
    assert_eq!(gpu["energy_source"], "counter");
    assert_eq!(num(pod, "energy_j"), energy);
    assert!((num(gpu, "energy_kwh") - energy / 3.6e6).abs() < 1e-9);

    // Utilization: the recording's rows are 99 and 100 %, mean ~0.99.
    let utils: Vec<f64> = rec
        .iter()
        .map(|r| r["util"][0].as_f64().unwrap() / 100.0)
        .collect();
    let rec_mean = utils.iter().sum::<f64>() / utils.len() as f64;
    let mean = num(gpu, "utilization_mean");
    let lo = utils.iter().cloned().fold(f64::MAX, f64::min);
    let hi = utils.iter().cloned().fold(f64::MIN, f64::max);
    assert!((lo..=hi).contains(&mean), "{mean} outside [{lo}, {hi}]");
    assert!((mean - rec_mean).abs() < 0.01, "{mean} vs {rec_mean}");
    assert!(utils.contains(&num(gpu, "utilization_p95")));

    // Peak temperature: 59-60 °C, a value of the recording.
    let temps: BTreeSet<u64> = rec.iter().map(|r| r["temp"].as_u64().unwrap()).collect();
    let peak = gpu["temperature_gpu_peak_c"].as_u64().unwrap();
    assert!((59..=60).contains(&peak) && temps.contains(&peak), "{peak}");

    // Memory: the recording's used (v1) less the reserved memory the _v2 call reports apart.
    let reserved = num(&scen["devices"][0]["defaults"], "mem_reserved");
    let used = first_row["mem"][1].as_f64().unwrap() - reserved;
    assert_eq!(num(gpu, "memory_used_peak_bytes"), used);
    assert_eq!(
        num(gpu, "memory_total_bytes"),
        first_row["mem"][0].as_f64().unwrap()
    );

    // The first sample falls in the held first row, the last after the recording's end: the
    // run spans at least the recording's 29.9 s, replayed 10x faster.
    let wall = num(gpu, "wall_time_s");
    let span = num(last_row, "t") - num(first_row, "t");
    assert!(wall >= span / TIME_SCALE - 0.001, "{wall} s");
    assert_eq!(num(gpu, "thermal_slowdown_s"), 0.0);
    assert_eq!(gpu["xid_count"], serde_json::json!({}));

    // The JSONL sample log of the same run: one row per sample, values of the recording.
    let rows: Vec<Value> = read_text(&log_path)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is one JSON object"))
        .collect();
    let last_row_at = rows.last().unwrap()["timestamp"].as_str().unwrap();
    let taken = gpu["samples_taken"].as_u64().unwrap();
    assert_eq!(
        rows.len() as u64,
        samples_with_a_row(&report, taken, last_row_at, Duration::from_millis(100))
    );
    assert_eq!(gpu["samples_missed"], 0);
    assert_eq!(report["ticks_dropped"], 0);
    let powers: BTreeSet<u64> = rec
        .iter()
        .map(|r| r["power_mw"].as_u64().unwrap())
        .collect();
    let mut peak_w: f64 = 0.0;
    for row in &rows {
        let keys: BTreeSet<&str> = row
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, COLUMNS.into_iter().collect());
        let w = num(row, "power_w");
        assert!(powers.contains(&((w * 1000.0).round() as u64)), "{w}");
        peak_w = peak_w.max(w);
        assert_eq!(row["clocks_event_reasons"], "sw_power_cap");
        assert_eq!(num(row, "memory_used_mib"), (used / 1048576.0).floor());
        assert!(row["timestamp"].as_str().unwrap().ends_with('Z'));
    }
    assert_eq!(num(gpu, "power_peak_w"), peak_w);

    // Every row reads SW power cap: held back the whole run, each sample holding until the
    // next (at most two 100 ms intervals), as the log's timestamps give it.
    assert!(rec.iter().all(|r| r["throttle"] == 4));
    let times: Vec<std::time::SystemTime> = rows
        .iter()
        .map(|r| humantime::parse_rfc3339(r["timestamp"].as_str().unwrap()).unwrap())
        .collect();
    let held: f64 = times
        .windows(2)
        .map(|w| {
            w[1].duration_since(w[0])
                .unwrap()
                .min(Duration::from_millis(200))
                .as_secs_f64()
        })
        .sum();
    let capped = num(gpu, "power_capped_s");
    assert!(
        (capped - held).abs() <= 0.002 * rows.len() as f64,
        "{capped} s capped, {held} s from the log"
    );
    assert!(capped <= wall && capped >= 0.8 * wall, "{capped} of {wall}");
    assert_eq!(
        rows[0]["power_w"].as_f64().unwrap() * 1000.0,
        num(first_row, "power_mw")
    );

    // The same report as one OTLP log record, event gpu.run.report.
    let events = rx.log_events("gpu.run.report");
    assert_eq!(events.len(), 1, "{events:#?}");
    // The event leaves the events list out (each went out as its own record).
    let body: Value = serde_json::from_str(&events[0].body).unwrap();
    let mut without_events = report.clone();
    without_events.as_object_mut().unwrap().remove("events");
    assert_eq!(body, without_events);
    assert!(body.get("events_dropped").is_some(), "{body}");
    assert_eq!(
        events[0].attr("gpu.run.energy_j"),
        Some(energy.to_string().as_str())
    );
    assert_eq!(events[0].attr("gpu.run.gpu_count"), Some("1"));
    assert_eq!(
        events[0].resource.get("k8s.pod.name").map(String::as_str),
        Some("resnet-train-0")
    );
}

/// NVML answers UNKNOWN to every device call for one second: those ticks are missed samples,
/// one per empty row of the sample log.
#[test]
fn a_gap_in_nvml_answers_is_reported_as_missed_samples() {
    let dir = tempfile::tempdir().unwrap();
    let mut scen = read_json(scenario("h200-under-load.json"));
    scen["faults"] = serde_json::json!([
        {"call": "nvmlDeviceGet*", "device": 0, "from_s": 1.0, "to_s": 2.0, "code": 999}
    ]);
    let scen_path = write_scenario(dir.path(), &scen);
    let report_path = dir.path().join("report.json");
    let log_path = dir.path().join("samples.csv");
    let mut agent = Agent::builder()
        .env_mock_path(&scen_path)
        .env("NVML_MOCK_NO_LATENCY", "1")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_LOGS_EXPORTER", "none")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("GPU_SIDECAR_ENERGY_INTERVAL", "100ms")
        .env("GPU_SIDECAR_REPORT_FILE", &report_path)
        .env("GPU_SIDECAR_SAMPLE_LOG", &log_path)
        .spawn();
    // Wait until the log shows good rows after the gap.
    let recovered = || -> bool {
        let Ok(mut reader) = csv::Reader::from_path(&log_path) else {
            return false;
        };
        let empty: Vec<bool> = reader
            .records()
            .map_while(Result::ok)
            .filter(|r| r.len() == COLUMNS.len())
            .map(|r| r.iter().skip(3).all(str::is_empty))
            .collect();
        empty.windows(2).any(|w| w[0] && !w[1])
    };
    assert!(
        wait_until(WAIT, recovered),
        "NVML never answered again\n{}",
        agent.dump()
    );
    std::thread::sleep(Duration::from_millis(300));
    stop(&mut agent);

    let report = read_json(&report_path);
    let gpu = &report["gpus"][0];
    let mut reader = csv::Reader::from_path(&log_path).unwrap();
    assert_eq!(
        reader.headers().unwrap(),
        &csv::StringRecord::from(COLUMNS.to_vec())
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    let empty = rows
        .iter()
        .filter(|r| r.iter().skip(3).all(str::is_empty))
        .count() as u64;
    let missed = gpu["samples_missed"].as_u64().unwrap();
    // Ticks come at most every 100 ms (never in a burst): at most 11 fall into the 1 s fault.
    assert!(
        (1..=11).contains(&missed),
        "{missed} missed\n{}",
        agent.dump()
    );
    assert_eq!(missed, empty, "every missed sample is an empty row");
    let taken = gpu["samples_taken"].as_u64().unwrap();
    let last_row_at = &rows.last().unwrap()[0];
    assert_eq!(
        samples_with_a_row(&report, taken, last_row_at, Duration::from_millis(100)),
        rows.len() as u64 - empty
    );
    // The empty rows are one stretch, and the good rows around it are at least the fault's
    // 1 s apart (timestamps have ms resolution).
    let is_empty: Vec<bool> = rows
        .iter()
        .map(|r| r.iter().skip(3).all(str::is_empty))
        .collect();
    let first_empty = is_empty.iter().position(|e| *e).unwrap();
    let after = first_empty + missed as usize;
    assert!(is_empty[first_empty..after].iter().all(|e| *e));
    assert!(!is_empty[after..].iter().any(|e| *e), "one gap");
    assert!(
        first_empty > 0 && after < rows.len(),
        "good rows on both sides: {is_empty:?}"
    );
    let at = |i: usize| humantime::parse_rfc3339(&rows[i][0]).unwrap();
    let span = at(after).duration_since(at(first_empty - 1)).unwrap();
    assert!(span >= Duration::from_millis(999), "{span:?}");
    assert_eq!(report["pod"]["samples_missed"].as_u64(), Some(missed));
    assert_eq!(report["ticks_dropped"], 0);
    // Values before and after the gap are still the recording's.
    assert_eq!(gpu["energy_source"], "counter");
    assert!(num(gpu, "energy_j") > 0.0);
}

/// Four GPUs, no collector: the CSV reads back with the scenario's values, the NOT_SUPPORTED
/// power of GPU 2 an empty field, and the pod's power absent (not every GPU answered).
#[test]
fn csv_log_of_four_gpus_without_a_collector() {
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("samples.csv");
    let report_path = dir.path().join("report.json");
    let mut agent = Agent::builder()
        .env_mock("four-gpu.json")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_LOGS_EXPORTER", "none")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("GPU_SIDECAR_ENERGY_INTERVAL", "100ms")
        .env("GPU_SIDECAR_SAMPLE_LOG", &log_path)
        .env("GPU_SIDECAR_REPORT_FILE", &report_path)
        .spawn();
    assert!(
        wait_until(WAIT, || std::fs::read_to_string(&log_path)
            .map(|t| t.lines().count() > 4 * 3)
            .unwrap_or(false)),
        "{}",
        agent.dump()
    );
    stop(&mut agent);

    let scen = read_json(scenario("four-gpu.json"));
    let devices = scen["devices"].as_array().unwrap();
    let mut reader = csv::Reader::from_path(&log_path).unwrap();
    assert_eq!(
        reader.headers().unwrap(),
        &csv::StringRecord::from(COLUMNS.to_vec())
    );
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len() % 4, 0);
    for row in &rows {
        let i: usize = row[1].parse().unwrap();
        let dev = &devices[i];
        let d = &dev["defaults"];
        let unsupported: Vec<&str> = dev["unsupported"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(&row[2], dev["uuid"].as_str().unwrap());
        assert_eq!(row[3].parse::<f64>().unwrap(), num(d, "util_gpu"));
        assert_eq!(
            row[4].parse::<f64>().unwrap(),
            (num(d, "mem_used") / 1048576.0).floor()
        );
        assert_eq!(
            row[5].parse::<f64>().unwrap(),
            (num(d, "mem_total") / 1048576.0).floor()
        );
        assert_eq!(row[6].parse::<f64>().unwrap(), num(d, "temp_gpu"));
        if unsupported.contains(&"nvmlDeviceGetPowerUsage") {
            assert_eq!(
                &row[7], "",
                "GPU {i}: NOT_SUPPORTED power is empty, never 0"
            );
        } else {
            assert_eq!(row[7].parse::<f64>().unwrap(), num(d, "power_mw") / 1000.0);
        }
        assert_eq!(row[8].parse::<f64>().unwrap(), num(d, "clock_sm_mhz"));
        assert_eq!(num(d, "clocks_event_reasons"), 0.0);
        assert_eq!(&row[9], "none");
        assert!(humantime::parse_rfc3339(&row[0]).is_ok(), "{}", &row[0]);
    }

    let report = read_json(&report_path);
    let gpus = report["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 4);
    let mut energy_sum = 0.0;
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g["uuid"], devices[i]["uuid"]);
        assert_eq!(
            num(g, "utilization_mean"),
            num(&devices[i]["defaults"], "util_gpu") / 100.0
        );
        assert_eq!(g["energy_source"], "counter");
        energy_sum += num(g, "energy_j");
        assert_eq!(g["power_mean_w"].is_null(), i == 2, "GPU {i}");
    }
    assert!((num(&report["pod"], "energy_j") - energy_sum).abs() < 1e-6);
    assert!(
        report["pod"]["power_mean_w"].is_null(),
        "GPU 2 never answered power: no pod total"
    );
}

/// A sample log that cannot be written (a full disk; a path under a regular file) gives one
/// error line and the metrics keep flowing.
#[test]
fn sample_log_write_errors_do_not_stop_metric_export() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("plain-file");
    std::fs::write(&not_a_dir, "x").unwrap();
    for (target, error) in [
        (PathBuf::from("/dev/full"), "No space left on device"),
        (not_a_dir.join("samples.csv"), "Not a directory"),
    ] {
        let rx = Receiver::start(Protocol::Grpc);
        let mut agent = Agent::builder()
            .otlp(&rx)
            .env_mock("h200-under-load.json")
            .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
            .env("GPU_SIDECAR_ENERGY_INTERVAL", "100ms")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
            .env("GPU_SIDECAR_SAMPLE_LOG", &target)
            .spawn();
        assert!(
            agent.wait_for_stderr("cannot write the sample log", WAIT),
            "{}",
            agent.dump()
        );
        let n = rx.metrics_requests().len();
        assert!(
            rx.wait_until(WAIT, |r| r.metrics_requests().len() >= n + 3),
            "export stopped after the sample log error\n{}",
            agent.dump()
        );
        assert!(rx.has_metric("hw.power"));
        stop(&mut agent);
        let errors: Vec<String> = agent
            .stderr_lines()
            .into_iter()
            .filter(|l| l.contains("cannot write the sample log"))
            .collect();
        assert_eq!(
            errors.len(),
            1,
            "one error, not one per sample: {errors:#?}"
        );
        assert!(
            errors[0].contains(error) && errors[0].contains(target.to_str().unwrap()),
            "{}",
            errors[0]
        );
    }
}

/// The profiling figures of the run report against values computed here from
/// `report-efficiency.json` (written by `scripts/gen-rule-scenarios.py`): GPU 0's four
/// phases (fp32, bf16, idle holding memory, a copy loop) between a lead-in and a tail that
/// hold the phases' means, so the run's time-weighted GPM means are the phases' means
/// whatever the exact start and stop; GPU 1 has no GPM; GPU 2 takes a TensorFlow-style pool.
#[test]
fn report_profiling_figures_match_the_scenario() {
    let scen = read_json(scenario("report-efficiency.json"));
    let dir = tempfile::tempdir().unwrap();
    let log_path = dir.path().join("samples.jsonl");
    let report_path = dir.path().join("report.json");
    let mut agent = Agent::builder()
        .env_mock("report-efficiency.json")
        .env("NVML_MOCK_TIME_SCALE", "10")
        .env("NVML_MOCK_NO_LATENCY", "1")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_LOGS_EXPORTER", "none")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("GPU_SIDECAR_GPM_INTERVAL", "100ms")
        .env("GPU_SIDECAR_PRICE_PER_GPU_HOUR", "3.6")
        .env("GPU_SIDECAR_RULE_MEMORY_PREALLOCATED_DURATION", "1s")
        .env("GPU_SIDECAR_REPORT_FILE", &report_path)
        .env("GPU_SIDECAR_SAMPLE_LOG", &log_path)
        .env("GPU_SIDECAR_SAMPLE_LOG_FORMAT", "jsonl")
        .spawn();
    let gpu0_rows = || -> Vec<Value> {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["gpu_index"] == 0)
            .collect()
    };
    // Stop once the tail (busy 65 %) has followed the copy loop (60 %) for half a second.
    let in_tail = || {
        let utils: Vec<Value> = gpu0_rows()
            .iter()
            .map(|r| r["utilization_gpu_percent"].clone())
            .collect();
        utils
            .iter()
            .position(|u| u == 60)
            .is_some_and(|i| utils[i..].iter().filter(|u| **u == 65).count() >= 5)
    };
    assert!(wait_until(WAIT, in_tail), "{}", agent.dump());
    stop(&mut agent);
    let report = read_json(&report_path);
    let close = |v: &Value, expected: f64, tol: f64| {
        let x = v
            .as_f64()
            .unwrap_or_else(|| panic!("not a number: {v} (expected {expected})"));
        assert!((x - expected).abs() <= tol, "{x} vs {expected} ± {tol}");
    };

    // GPU 0: the phases' means, from the scenario's rows (phase rows: t = 5, 20, 35, 50).
    let rows = scen["devices"][0]["timeline"].as_array().unwrap();
    let phases: Vec<&Value> = rows
        .iter()
        .filter(|r| (5.0..65.0).contains(&num(r, "t")))
        .collect();
    assert_eq!(phases.len(), 4);
    let phase_mean = |key: &str| {
        phases.iter().map(|r| num(&r["gpm"], key)).sum::<f64>() / phases.len() as f64 / 100.0
    };
    let phase_max = |key: &str| {
        phases
            .iter()
            .map(|r| num(&r["gpm"], key))
            .fold(0.0, f64::max)
            / 100.0
    };
    let gpu0 = &report["gpus"][0];
    close(&gpu0["sm_activity_mean"], phase_mean("sm_util"), 1e-3);
    close(&gpu0["sm_occupancy_mean"], phase_mean("sm_occupancy"), 1e-3);
    close(
        &gpu0["dram_activity_mean"],
        phase_mean("dram_bw_util"),
        1e-3,
    );
    close(
        &gpu0["tensor_activity_mean"]["any"],
        phase_mean("any_tensor_util"),
        1e-3,
    );
    close(
        &gpu0["tensor_activity_mean"]["hmma"],
        phase_mean("hmma_tensor_util"),
        1e-3,
    );
    assert!(
        gpu0["tensor_activity_mean"].get("imma").is_none(),
        "not answered: absent"
    );
    // p95 over windows: the busiest phase's value (each phase is ~15 of ~75 windows).
    close(&gpu0["sm_activity_p95"], phase_max("sm_util"), 1e-9);
    close(&gpu0["dram_activity_p95"], phase_max("dram_bw_util"), 1e-9);
    close(
        &gpu0["tensor_activity_p95"]["any"],
        phase_max("any_tensor_util"),
        1e-9,
    );
    // Tensor-active time over busy time: Σ tensor / Σ utilization over the phases. The
    // report pairs each window with the utilization sampled at its end: each of the four
    // phase changes can shift up to one window (1 s of ~75 s) of the busy time.
    let util_sum: f64 = phases.iter().map(|r| num(r, "util_gpu")).sum();
    let tensor_sum: f64 = phases
        .iter()
        .map(|r| num(&r["gpm"], "any_tensor_util"))
        .sum();
    close(
        &gpu0["tensor_active_share_of_busy"],
        tensor_sum / util_sum,
        0.015,
    );
    // PCIe: the scenario's MiB/s over the time GPM covered (the sampler counts each window
    // up to the end of its read, never twice). The agent times a window by its own clock and
    // the mock counts bytes by its scaled clock (10x here) at the call: a few µs apart per
    // window on an idle machine, but a loaded one delays a call by milliseconds between the
    // two readings (0.33 % seen on the 2-core machine with four builds running), hence 1 %.
    let covered = num(gpu0, "gpm_window_s");
    let wall = num(gpu0, "wall_time_s");
    assert!(
        covered <= wall + 1e-3 && covered >= wall - 0.25,
        "{covered} of {wall}"
    );
    let rate = |key: &str| num(&rows[0]["gpm"], key) * 1048576.0;
    for (field, key) in [
        ("pcie_transmit_bytes", "pcie_tx_per_sec"),
        ("pcie_receive_bytes", "pcie_rx_per_sec"),
    ] {
        let expected = rate(key) * covered;
        close(&gpu0[field], expected, expected * 0.01);
    }
    assert!(gpu0["nvlink_transmit_bytes"].is_null());
    // Idle while holding memory: the 0 % rows of the sample log, each held until the next
    // row (at most two intervals), as the report holds its samples.
    let log = gpu0_rows();
    let at = |r: &Value| humantime::parse_rfc3339(r["timestamp"].as_str().unwrap()).unwrap();
    let idle_s: f64 = log
        .windows(2)
        .filter(|w| w[0]["utilization_gpu_percent"] == 0)
        .map(|w| {
            at(&w[1])
                .duration_since(at(&w[0]))
                .unwrap()
                .min(Duration::from_millis(200))
                .as_secs_f64()
        })
        .sum();
    assert!(
        (1.3..=1.7).contains(&idle_s),
        "the 15 s phase at 10x: {idle_s}"
    );
    close(
        &gpu0["idle_memory_held_gpu_h"],
        idle_s / 3600.0,
        0.01 / 3600.0,
    );
    // 3.6 per GPU-hour is 0.001 per GPU-second.
    close(&gpu0["cost"], wall * 0.001, 1e-4);
    close(&gpu0["idle_cost"], idle_s * 0.001, 2e-5);
    assert_eq!(gpu0["memory_pattern"], "steady");

    // GPU 1, without GPM: every profiling figure null, said once in the notes.
    let gpu1 = &report["gpus"][1];
    for key in [
        "gpm_window_s",
        "sm_activity_mean",
        "sm_activity_p95",
        "sm_occupancy_mean",
        "tensor_activity_mean",
        "tensor_activity_p95",
        "dram_activity_mean",
        "tensor_active_share_of_busy",
        "pcie_transmit_bytes",
    ] {
        assert!(gpu1[key].is_null(), "{key}: {}", gpu1[key]);
    }
    assert_eq!(gpu1["idle_memory_held_gpu_h"], 0.0);
    assert_eq!(gpu1["memory_pattern"], "growing");
    let notes = report["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let uuid1 = scen["devices"][1]["uuid"].as_str().unwrap();
    assert!(
        notes[0].as_str().unwrap().contains(uuid1) && notes[0].as_str().unwrap().contains("GPM"),
        "{notes:?}"
    );

    // GPU 2: a TensorFlow-style pool, bf16 figures throughout.
    let gpu2 = &report["gpus"][2];
    assert_eq!(gpu2["memory_pattern"], "preallocated");
    let bf16 = &scen["devices"][2]["timeline"][1]["gpm"];
    close(
        &gpu2["sm_activity_mean"],
        num(bf16, "sm_util") / 100.0,
        1e-6,
    );

    // The pod: GPM means weighted by each GPU's covered time; costs and idle time summed.
    let pod = &report["pod"];
    let (w0, w2) = (covered, num(gpu2, "gpm_window_s"));
    close(
        &pod["sm_activity_mean"],
        (phase_mean("sm_util") * w0 + num(bf16, "sm_util") / 100.0 * w2) / (w0 + w2),
        1e-3,
    );
    close(&pod["gpm_window_s"], w0 + w2, 2e-3);
    let gpus = report["gpus"].as_array().unwrap();
    let cost: f64 = gpus.iter().map(|g| num(g, "cost")).sum();
    close(&pod["cost"], cost, 2e-4);
    close(
        &pod["idle_memory_held_gpu_h"],
        num(gpu0, "idle_memory_held_gpu_h"),
        2e-6,
    );
    assert_eq!(report["price_per_gpu_hour"], 3.6);
}

/// A job's pods each write their run report; `merge` adds them up per job. Three workers of
/// the PyTorchJob nlp/bert-large and one of another job run with the injected sidecar's
/// label variables (the pod labels the kubelet fills); each report names its job, and the
/// job report's sums and weighted mean are those of its pods' reports.
#[test]
fn a_jobs_pod_reports_merge_into_the_jobs_report() {
    let dir = tempfile::tempdir().unwrap();
    let pods = [
        ("bert-large", "bert-large-worker-0", "0"),
        ("bert-large", "bert-large-worker-1", "1"),
        ("bert-large", "bert-large-worker-2", "2"),
        ("mnist", "mnist-worker-0", "0"),
    ];
    let mut agents: Vec<(Agent, PathBuf)> = pods
        .iter()
        .map(|(job, pod, index)| {
            let path = dir.path().join(format!("{pod}.json"));
            let agent = Agent::builder()
                .env_mock("h200-under-load.json")
                .env("NVML_MOCK_NO_LATENCY", "1")
                .env("OTEL_METRICS_EXPORTER", "none")
                .env("OTEL_LOGS_EXPORTER", "none")
                .env("GPU_SIDECAR_HEALTH_ADDR", "off")
                .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
                .env("GPU_SIDECAR_ENERGY_INTERVAL", "100ms")
                .env("GPU_SIDECAR_PRICE_PER_GPU_HOUR", "3.6")
                .env("GPU_SIDECAR_REPORT_FILE", &path)
                .env("K8S_POD_NAME", pod)
                .env("K8S_NAMESPACE_NAME", "nlp")
                .env("K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_JOB_NAME", job)
                .env("K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_REPLICA_TYPE", "worker")
                .env("K8S_POD_LABEL_TRAINING_KUBEFLOW_ORG_REPLICA_INDEX", index)
                .env("K8S_POD_LABEL_JOBSET_SIGS_K8S_IO_JOBSET_NAME", "")
                .spawn();
            (agent, path)
        })
        .collect();
    for (agent, _) in &agents {
        assert!(agent.wait_for_stderr("starting", WAIT), "{}", agent.dump());
    }
    std::thread::sleep(Duration::from_millis(1500));
    for (agent, _) in &mut agents {
        stop(agent);
    }
    let reports: Vec<Value> = agents.iter().map(|(_, p)| read_json(p.clone())).collect();
    for (report, (job, pod, _)) in reports.iter().zip(&pods) {
        assert_eq!(
            report["job"],
            serde_json::json!({"namespace": "nlp", "name": job, "from": "k8s.pod.label.training.kubeflow.org/job-name"}),
            "{pod}"
        );
        assert_eq!(
            report["resource"]["k8s.pod.label.training.kubeflow.org/replica-type"],
            "worker"
        );
        assert!(report["resource"]
            .get("k8s.pod.label.jobset.sigs.k8s.io/jobset-name")
            .is_none());
    }
    let mut merge = Agent::builder()
        .arg("merge")
        .args(agents.iter().map(|(_, p)| p.display().to_string()))
        .spawn();
    let status = merge.wait_exit(WAIT).unwrap();
    assert_eq!(status.code(), Some(0), "{}", merge.dump());
    let jobs: Vec<Value> = merge
        .stdout_lines()
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(jobs.len(), 2, "{}", merge.dump());
    let (bert, mnist) = (&jobs[0], &jobs[1]);
    assert_eq!(bert["event.name"], "gpu.job.report");
    assert_eq!(bert["job"]["name"], "bert-large");
    assert_eq!(mnist["job"]["name"], "mnist");
    assert_eq!(bert["pods"], 3);
    assert_eq!(mnist["pods"], 1);
    let members = &reports[..3];
    let sum = |key: &str| members.iter().map(|r| num(&r["pod"], key)).sum::<f64>();
    assert_eq!(
        bert["gpu_count"].as_u64().unwrap() as usize,
        members
            .iter()
            .map(|r| r["gpus"].as_array().unwrap().len())
            .sum::<usize>()
    );
    for key in ["energy_j", "busy_gpu_s", "cost", "idle_cost"] {
        assert!(
            (num(bert, key) - sum(key)).abs() < 1e-9 * sum(key).max(1.0),
            "{key}: {} against {}",
            bert[key],
            sum(key)
        );
    }
    assert!(sum("energy_j") > 0.0 && sum("cost") > 0.0);
    let samples = sum("samples_taken");
    let weighted = members
        .iter()
        .map(|r| num(&r["pod"], "utilization_mean") * num(&r["pod"], "samples_taken"))
        .sum::<f64>()
        / samples;
    assert!((num(bert, "utilization_mean") - weighted).abs() < 1e-12);
    assert_eq!(num(mnist, "energy_j"), num(&reports[3]["pod"], "energy_j"));
    let earliest = members
        .iter()
        .map(|r| r["started_at"].as_str().unwrap())
        .min();
    assert_eq!(bert["started_at"].as_str(), earliest);
    assert_eq!(bert["workers"].as_array().unwrap().len(), 3);

    // A report of no job is refused by name.
    let lone = dir.path().join("notebook.json");
    let mut r = reports[3].clone();
    r["resource"] = serde_json::json!({"k8s.pod.name": "notebook"});
    std::fs::write(&lone, r.to_string()).unwrap();
    let mut merge = Agent::builder()
        .arg("merge")
        .arg(lone.display().to_string())
        .spawn();
    assert_eq!(merge.wait_exit(WAIT).unwrap().code(), Some(2));
    assert!(
        merge
            .dump()
            .contains("notebook.json: its resource names no job"),
        "{}",
        merge.dump()
    );
}

/// The page, `compare`, the browser check.
#[path = "page.rs"]
mod page;
