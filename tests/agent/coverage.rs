//! Full GPU coverage end to end: the agent binary with the mock NVML, exporting to an
//! in-process OTLP receiver. GPM profiling metrics and PCIe bytes, per-process metrics
//! (departed processes drop out), MIG devices, XID and ECC events, row remapping, and the
//! cost-aware schedule (slow calls counted in the mock, at their cadence, not every tick).
//! Expected values come from the scenario files.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use common::receiver::request_points;
use common::{scenario, Agent, Kind, Point, Protocol, Receiver};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

fn load(name: &str) -> Value {
    common::read_json(scenario(name))
}

/// `<scratch>/<name>`: [`common::temp_path`] (removed when the test process exits).
fn temp_path(name: &str) -> PathBuf {
    common::temp_path(name)
}

fn write_scenario(name: &str, v: &Value) -> PathBuf {
    let path = temp_path(name);
    std::fs::write(&path, serde_json::to_string_pretty(v).unwrap()).unwrap();
    path
}

fn on<'a>(points: &'a [Point], hw_id: &str) -> Vec<&'a Point> {
    points
        .iter()
        .filter(|p| p.attr("hw.id") == Some(hw_id))
        .collect()
}

fn with<'a>(points: &'a [Point], key: &str, value: &str) -> Vec<&'a Point> {
    points
        .iter()
        .filter(|p| p.attr(key) == Some(value))
        .collect()
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs().max(1e-12)
}

/// Number of ticks `k` in `0..ticks` with `k % every == 0`: how often a group due every
/// `every` ticks (read at tick 0) runs in `ticks` ticks.
fn runs(ticks: u64, every: u64) -> u64 {
    ticks.div_ceil(every)
}

fn stop(agent: &mut Agent) {
    agent.sigterm();
    let status = agent
        .wait_exit(Duration::from_secs(15))
        .expect("exits within the shutdown bound");
    assert_eq!(status.code(), Some(0), "{}", agent.dump());
}

/// GPM values, per-process values, PCIe bytes from GPM and from the PCIe throughput call,
/// the unsupported-GPM path said once, and the slow groups at their cadence: one run of two
/// H200s (the recording's scenario, and a copy without GPM), call counts from the mock.
#[test]
fn slow_groups_run_at_their_cadence_with_gpm_and_pcie_bytes() {
    let mut scen = load("h200-under-load.json");
    let gpu0 = scen["devices"][0].clone();
    let mut gpu1 = gpu0.clone();
    gpu1["uuid"] = json!("GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e6");
    gpu1["serial"] = json!("1650000000018");
    gpu1["pci_bus_id"] = json!("00000000:00:07.0");
    gpu1["minor_number"] = json!(1);
    gpu1["gpm_supported"] = json!(false);
    scen["devices"] = json!([gpu0.clone(), gpu1.clone()]);
    let path = write_scenario("two-h200-one-without-gpm.json", &scen);
    let call_log = temp_path("calls.json");
    let _ = std::fs::remove_file(&call_log);

    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock_path(&path)
        .env("NVML_MOCK_NO_LATENCY", "1")
        .env("NVML_MOCK_CALL_LOG", &call_log)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("GPU_SIDECAR_ENERGY_INTERVAL", "500ms")
        .env("GPU_SIDECAR_GPM_INTERVAL", "300ms")
        .env("GPU_SIDECAR_PCIE_INTERVAL", "400ms")
        .env("GPU_SIDECAR_PROCESS_INTERVAL", "1s")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        // The sample durations by group, and the pipes at 0 (folded by default).
        .env("GPU_SIDECAR_METRICS_DETAIL", "true")
        .spawn();
    let uuid0 = gpu0["uuid"].as_str().unwrap();
    let uuid1 = gpu1["uuid"].as_str().unwrap();
    // Two PCIe reads on GPU 1 make its first interval; a process read at tick 10 follows.
    assert!(
        rx.wait_until(WAIT, |r| {
            on(&r.last_points("hw.gpu.io"), uuid1).len() == 2
                && r.last_points("gpu_sidecar.sample.duration")
                    .iter()
                    .any(|p| {
                        p.attr("gpu_sidecar.sample.group") == Some("process") && p.count >= Some(2)
                    })
        }),
        "{}",
        agent.dump()
    );
    let live = rx.last_points("nvidia.gpu.sm.activity");
    stop(&mut agent);

    // --- cadence, from the mock's call counts (written at nvmlShutdown, after the last tick).
    // Exports every 300 ms (every 3rd tick); the slow groups are read on export ticks only,
    // each once its interval has passed: GPM (300 ms) at every export, energy (500 ms) and
    // PCIe (400 ms) at every 2nd, process utilization (1 s) at every 4th; the final sample
    // reads every group once more. A tick that runs late moves a read by one export, so
    // the counts are checked within one read.
    let calls: BTreeMap<String, u64> =
        serde_json::from_value(common::read_json(&call_log)).unwrap();
    let n = |sym: &str| calls.get(sym).copied().unwrap_or(0);
    let ticks = n("nvmlDeviceGetPowerUsage") / 2;
    assert!(ticks >= 12, "{calls:?}");
    let regular = ticks - 1;
    let near = |got: u64, want: u64, what: &str| {
        assert!(
            got + 1 >= want && got <= want + 1,
            "{what}: {got} reads, about {want} expected over {ticks} ticks; {calls:?}"
        );
    };
    let energy = n("nvmlDeviceGetTotalEnergyConsumption");
    assert_eq!(energy % 2, 0, "both GPUs at each read");
    near(energy / 2, runs(regular, 6) + 1, "energy every 6th tick");
    near(
        n("nvmlGpmSampleGet"),
        runs(regular, 3) + 1,
        "GPM every 3rd tick, GPU 0 only",
    );
    assert_eq!(
        n("nvmlGpmMetricsGet"),
        n("nvmlGpmSampleGet") - 1,
        "one metrics call per sample pair"
    );
    let pcie = n("nvmlDeviceGetPcieThroughput");
    near(
        pcie / 2,
        runs(regular, 6) + 1,
        "PCIe (TX + RX) every 6th tick, only on the GPU without GPM PCIe counters",
    );
    let process_reads = runs(regular, 12) + 1;
    let pu = n("nvmlDeviceGetProcessUtilization");
    assert!(
        (2 * (process_reads - 1)..=4 * (process_reads + 1)).contains(&pu),
        "process utilization every 12th tick on both GPUs (1 or 2 calls a read): {pu} for about {process_reads} reads"
    );
    assert!(pu < ticks, "not every tick");
    assert_eq!(n("nvmlDeviceGetMaxClockInfo"), 0, "not needed");

    // --- the self-metric agrees with the counts (final export, after the sampler stopped)
    let durations = rx.last_points("gpu_sidecar.sample.duration");
    let count = |group: &str| {
        let p = with(&durations, "gpu_sidecar.sample.group", group);
        assert_eq!(p.len(), 1, "{group}: {durations:#?}");
        assert_eq!((p[0].unit.as_str(), p[0].kind), ("s", Kind::Histogram));
        p[0].count.unwrap()
    };
    assert_eq!(count("fast"), ticks);
    assert_eq!(count("static"), 1);
    assert_eq!(count("energy"), energy / 2);
    assert_eq!(count("gpm"), n("nvmlGpmSampleGet"));
    assert_eq!(count("pcie"), pcie / 2);

    // --- a slow group's value is in the export of the tick that read it, and in no other:
    // as many hw.energy points per GPU as energy reads were exported, never more.
    let energy_exports = rx
        .metrics_requests()
        .iter()
        .filter(|r| !on(&request_points(&r.request, "hw.energy"), uuid0).is_empty())
        .count() as u64;
    assert!(
        energy_exports <= energy / 2 && energy_exports + 2 >= energy / 2,
        "{energy_exports} exports carry hw.energy for {} reads",
        energy / 2
    );

    // --- GPM on GPU 0: the scenario's values, as ratios; nothing for GPU 1 (unsupported)
    let gpm = &gpu0["defaults"]["gpm"];
    let pct = |k: &str| gpm[k].as_f64().unwrap() / 100.0;
    let one = |name: &str, attr: Option<(&str, &str)>| -> f64 {
        let points = rx.last_points(name);
        let mine: Vec<_> = on(&points, uuid0)
            .into_iter()
            .filter(|p| attr.is_none_or(|(k, v)| p.attr(k) == Some(v)))
            .collect();
        assert_eq!(mine.len(), 1, "{name} {attr:?}: {points:#?}");
        assert_eq!(
            (mine[0].unit.as_str(), mine[0].kind),
            ("1", Kind::Gauge),
            "{name}"
        );
        assert!(
            on(&points, uuid1).is_empty(),
            "{name} for the GPU without GPM"
        );
        mine[0].value
    };
    assert!(close(
        one("nvidia.gpu.sm.activity", None),
        pct("sm_util"),
        1e-9
    ));
    assert!(close(
        one("nvidia.gpu.sm.occupancy", None),
        pct("sm_occupancy"),
        1e-9
    ));
    assert!(close(
        one("nvidia.gpu.graphics_engine.activity", None),
        pct("graphics_util"),
        1e-9
    ));
    assert!(close(
        one("nvidia.gpu.dram.activity", None),
        pct("dram_bw_util"),
        1e-9
    ));
    let tensor = ("nvidia.gpu.tensor.op", "any");
    assert!(close(
        one("nvidia.gpu.tensor.activity", Some(tensor)),
        pct("any_tensor_util"),
        1e-9
    ));
    let hmma = ("nvidia.gpu.tensor.op", "hmma");
    assert!(close(
        one("nvidia.gpu.tensor.activity", Some(hmma)),
        pct("hmma_tensor_util"),
        1e-9
    ));
    assert_eq!(
        one(
            "nvidia.gpu.pipe.activity",
            Some(("nvidia.gpu.pipe", "fp32"))
        ),
        0.0
    );
    let tensor_ops: BTreeSet<_> = on(&rx.last_points("nvidia.gpu.tensor.activity"), uuid0)
        .iter()
        .filter_map(|p| p.attr("nvidia.gpu.tensor.op").map(str::to_string))
        .collect();
    assert_eq!(
        tensor_ops,
        BTreeSet::from(["any".to_string(), "hmma".to_string()]),
        "IMMA and DFMA are not in the scenario: absent, never 0"
    );
    assert!(!live.is_empty() && on(&live, uuid1).is_empty());
    assert_eq!(
        agent
            .stderr_lines()
            .iter()
            .filter(|l| l.contains("GPM is not supported"))
            .count(),
        1,
        "said once\n{}",
        agent.dump()
    );
    assert!(agent
        .stderr_lines()
        .iter()
        .any(|l| l.contains("GPM is not supported") && l.contains(uuid1)));

    // --- hw.gpu.io: GPM bytes on GPU 0, integrated PCIe throughput on GPU 1. Each GPU's
    // rates are constant, so receive / transmit is the scenario's ratio.
    let io = rx.last_points("hw.gpu.io");
    let dir = |uuid: &str, d: &str| {
        let p: Vec<_> = on(&io, uuid)
            .into_iter()
            .filter(|p| p.attr("network.io.direction") == Some(d))
            .collect();
        assert_eq!(p.len(), 1, "{uuid} {d}: {io:#?}");
        assert_eq!(
            (p[0].unit.as_str(), p[0].kind, p[0].is_int),
            (
                "By",
                Kind::Sum {
                    monotonic: true,
                    cumulative: true
                },
                true
            )
        );
        p[0].value
    };
    let (tx0, rx0) = (dir(uuid0, "transmit"), dir(uuid0, "receive"));
    let (tx1, rx1) = (dir(uuid1, "transmit"), dir(uuid1, "receive"));
    assert!(tx0 > 0.0 && tx1 > 0.0);
    assert!(
        close(
            rx0 / tx0,
            gpm["pcie_rx_per_sec"].as_f64().unwrap() / gpm["pcie_tx_per_sec"].as_f64().unwrap(),
            1e-5
        ),
        "{rx0} / {tx0}"
    );
    let d = &gpu1["defaults"];
    assert!(
        close(
            rx1 / tx1,
            d["pcie_rx_kbps"].as_f64().unwrap() / d["pcie_tx_kbps"].as_f64().unwrap(),
            1e-5
        ),
        "{rx1} / {tx1}"
    );
    // Bytes of at most the agent's life at the scenario's rates (MiB/s for GPM).
    let life_s = 60.0;
    assert!(tx0 <= gpm["pcie_tx_per_sec"].as_f64().unwrap() * 1_048_576.0 * life_s);
    assert!(tx1 <= d["pcie_tx_kbps"].as_f64().unwrap() * 1024.0 * life_s);

    // --- per-process values of the recording: pid 432, 1184890880 B, SM 94 %, memory 22 %
    let mem = rx.last_points("nvidia.gpu.process.memory.usage");
    let p432 = on(&mem, uuid0);
    assert_eq!(p432.len(), 1, "{mem:#?}");
    assert_eq!(p432[0].attr("process.pid"), Some("432"));
    assert_eq!(p432[0].value, 1_184_890_880.0);
    assert_eq!(
        (p432[0].unit.as_str(), p432[0].kind),
        (
            "By",
            Kind::Sum {
                monotonic: false,
                cumulative: true
            }
        )
    );
    let util = rx.last_points("nvidia.gpu.process.utilization");
    let sm: Vec<_> = on(&util, uuid0)
        .into_iter()
        .filter(|p| p.attr("hw.gpu.task") == Some("general"))
        .collect();
    assert_eq!(sm.len(), 1, "{util:#?}");
    assert_eq!(sm[0].value, 0.94);
    let mc = rx.last_points("nvidia.gpu.process.memory_controller.utilization");
    assert!(
        !mc.is_empty() && mc.iter().all(|p| p.value == 0.22),
        "{mc:#?}"
    );
}

/// Processes appear and leave: a departed process's series stops at once; a new process
/// without utilization samples has no utilization until a read covers it, then is idle (0);
/// the executable name comes from /proc when the agent sees the host PID namespace.
#[test]
fn departed_processes_drop_out_and_new_ones_appear() {
    // A live process stands in for pid 4242, so that /proc has a name for it.
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("start sleep");
    let live_pid = child.id();
    let mut scen = load("h200-processes.json");
    for row in scen["devices"][0]["timeline"].as_array_mut().unwrap() {
        for key in ["processes", "process_util"] {
            for entry in row[key].as_array_mut().unwrap() {
                if entry[0] == 4242 {
                    entry[0] = json!(live_pid);
                }
            }
        }
    }
    let path = write_scenario("processes.json", &scen);
    let uuid = scen["devices"][0]["uuid"].as_str().unwrap().to_string();

    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock_path(&path)
        .env("NVML_MOCK_TIME_SCALE", "2")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("GPU_SIDECAR_PROCESS_INTERVAL", "200ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .spawn();
    let pids = |points: &[Point]| -> BTreeSet<String> {
        points
            .iter()
            .filter_map(|p| p.attr("process.pid").map(str::to_string))
            .collect()
    };
    let live = live_pid.to_string();
    // t = 4 s (2 s real): the third row is in force; wait for its utilization too.
    assert!(
        rx.wait_until(WAIT, |r| {
            let util = r.last_points("nvidia.gpu.process.utilization");
            pids(&r.last_points("nvidia.gpu.process.memory.usage")).contains("6262")
                && with(&util, "process.pid", &live)
                    .iter()
                    .any(|p| p.attr("hw.gpu.task") == Some("general") && p.value == 0.90)
                && !with(&util, "process.pid", "6262").is_empty()
        }),
        "{}",
        agent.dump()
    );
    stop(&mut agent);
    let _ = child.kill();
    let _ = child.wait();

    // Every export, in order: which pids it reports.
    let exports: Vec<Vec<Point>> = rx
        .metrics_requests()
        .iter()
        .map(|r| request_points(&r.request, "nvidia.gpu.process.memory.usage"))
        .filter(|p| !p.is_empty())
        .collect();
    let seen: Vec<BTreeSet<String>> = exports.iter().map(|p| pids(p)).collect();
    let first_without = seen
        .iter()
        .position(|s| !s.contains("5151"))
        .expect("5151 leaves");
    assert!(first_without > 0, "5151 was there at first: {seen:?}");
    assert!(
        seen[first_without..].iter().all(|s| !s.contains("5151")),
        "a departed process never comes back (no stale series): {seen:?}"
    );
    let first_with_new = seen.iter().position(|s| s.contains("6262")).unwrap();
    assert!(first_with_new > first_without);
    assert_eq!(
        seen.last().unwrap(),
        &BTreeSet::from([live.clone(), "6262".to_string()])
    );

    // Values of the scenario's rows.
    let memory = |points: &[Point], pid: &str| {
        let p = with(points, "process.pid", pid);
        assert_eq!(p.len(), 1, "{points:#?}");
        assert_eq!(p[0].attr("hw.id"), Some(uuid.as_str()));
        p[0].value
    };
    assert_eq!(memory(&exports[0], "5151"), 1_073_741_824.0);
    assert_eq!(memory(&exports[0], &live), 2_147_483_648.0);
    let last = exports.last().unwrap();
    assert_eq!(memory(last, &live), 3_221_225_472.0);
    assert_eq!(memory(last, "6262"), 536_870_912.0);
    let util = rx.last_points("nvidia.gpu.process.utilization");
    let general = |pid: &str| {
        let p: Vec<_> = with(&util, "process.pid", pid)
            .into_iter()
            .filter(|p| p.attr("hw.gpu.task") == Some("general"))
            .collect();
        assert_eq!(p.len(), 1, "{util:#?}");
        p[0].value
    };
    assert_eq!(general(&live), 0.90);
    // 6262 has no utilization sample. A read covers it only when it was listed at the
    // previous read: then it was idle (0); at the first read after it appeared, it has no
    // value (NVML may not have sampled it yet), never a 0 NVML did not give.
    let reads: Vec<(BTreeSet<String>, Vec<Point>)> = rx
        .metrics_requests()
        .iter()
        .filter_map(|r| {
            let util = request_points(&r.request, "nvidia.gpu.process.utilization");
            (!util.is_empty()).then(|| {
                (
                    pids(&request_points(
                        &r.request,
                        "nvidia.gpu.process.memory.usage",
                    )),
                    util,
                )
            })
        })
        .collect();
    let mut uncovered = 0;
    for pair in reads.windows(2) {
        let ((listed_before, _), (listed, util)) = (&pair[0], &pair[1]);
        let new: Vec<_> = with(util, "process.pid", "6262");
        if listed.contains("6262") && !listed_before.contains("6262") {
            uncovered += 1;
            assert!(
                new.is_empty(),
                "6262 first listed: no value yet, got {new:#?}"
            );
        }
        if listed_before.contains("6262") {
            assert!(
                !new.is_empty() && new.iter().all(|p| p.value == 0.0),
                "{new:#?}"
            );
        }
    }
    assert_eq!(uncovered, 1, "{reads:#?}");
    assert_eq!(
        general("6262"),
        0.0,
        "covered by a whole window, no sample: idle"
    );
    let mc = rx.last_points("nvidia.gpu.process.memory_controller.utilization");
    assert_eq!(with(&mc, "process.pid", &live)[0].value, 0.32);

    // The name: only where /proc shows the host PID namespace (kthreadd visible).
    let host_ns = std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd");
    let named = with(last, "process.pid", &live)[0]
        .attr("process.executable.name")
        .map(str::to_string);
    if host_ns {
        assert_eq!(named.as_deref(), Some("sleep"));
    } else {
        assert_eq!(
            named, None,
            "not the host PID namespace: no name rather than a wrong one"
        );
    }
}

/// MIG: every MIG device is a device of its own with its memory, GPM and processes; power,
/// energy, temperature and clocks only on the GPU; GPU_SIDECAR_DEVICES takes a MIG UUID.
#[test]
fn mig_devices_are_reported_on_their_own_and_power_once_per_gpu() {
    let scen = load("h200-mig-3g2g1g1g.json");
    let gpu = &scen["devices"][0];
    let parent = gpu["uuid"].as_str().unwrap();
    let instances = gpu["mig"]["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 4);
    let rx = Receiver::start(Protocol::Http);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock("h200-mig-3g2g1g1g.json")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("GPU_SIDECAR_GPM_INTERVAL", "200ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .spawn();
    assert!(
        rx.wait_until(WAIT, |r| r.last_points("nvidia.gpu.sm.activity").len() == 5),
        "{}",
        agent.dump()
    );
    stop(&mut agent);

    for name in [
        "hw.power",
        "hw.energy",
        "nvidia.gpu.clock.frequency",
        "hw.temperature",
    ] {
        let points = rx.last_points(name);
        assert!(!points.is_empty(), "{name}");
        assert!(
            points
                .iter()
                .all(|p| p.attr("hw.id") == Some(parent) && p.attr("hw.parent").is_none()),
            "{name} only on the GPU: {points:#?}"
        );
    }
    let power = rx.last_points("hw.power");
    assert_eq!(power.len(), 1, "power exactly once per physical GPU");
    assert_eq!(
        power[0].value,
        gpu["defaults"]["power_mw"].as_f64().unwrap() / 1000.0
    );

    let limit = rx.last_points("hw.gpu.memory.limit");
    let usage = rx.last_points("hw.gpu.memory.usage");
    assert_eq!(limit.len(), 5);
    let (mut sum_limit, mut sum_usage) = (0.0, 0.0);
    let sm = rx.last_points("nvidia.gpu.sm.activity");
    let procs = rx.last_points("nvidia.gpu.process.memory.usage");
    let status = rx.last_points("hw.status");
    for inst in instances {
        let id = inst["uuid"].as_str().unwrap();
        let d = &inst["defaults"];
        let l = on(&limit, id);
        assert_eq!(l.len(), 1, "{id}");
        assert_eq!(l[0].attr("hw.parent"), Some(parent));
        assert_eq!(l[0].attr("hw.model"), inst["name"].as_str());
        assert_eq!(l[0].value, d["mem_total"].as_f64().unwrap());
        let u = on(&usage, id);
        assert_eq!(
            u[0].value,
            d["mem_used"].as_f64().unwrap(),
            "{id}: mem_reserved 0"
        );
        sum_limit += l[0].value;
        sum_usage += u[0].value;
        let s = on(&sm, id);
        assert_eq!(s.len(), 1);
        assert!(
            close(
                s[0].value,
                d["gpm"]["sm_util"].as_f64().unwrap() / 100.0,
                1e-9
            ),
            "{id}"
        );
        let mine: Vec<_> = on(&procs, id);
        let expected = d["processes"].as_array().unwrap();
        assert_eq!(mine.len(), expected.len(), "{id}");
        for (p, e) in mine.iter().zip(expected) {
            assert_eq!(p.attr("process.pid"), Some(e[0].to_string().as_str()));
            assert_eq!(p.value, e[1].as_f64().unwrap());
        }
        let st = on(&status, id);
        assert_eq!(
            st[0].attr("nvidia.gpu.mig.gpu_instance_id"),
            Some(inst["gpu_instance_id"].to_string().as_str())
        );
    }
    let parent_limit = on(&limit, parent)[0].value;
    let parent_usage = on(&usage, parent)[0].value;
    assert!(sum_limit <= parent_limit, "{sum_limit} > {parent_limit}");
    assert!(sum_usage <= parent_usage, "{sum_usage} > {parent_usage}");
    assert!(
        on(&procs, parent).is_empty(),
        "processes on their MIG devices, not twice"
    );
    assert!(close(
        on(&sm, parent)[0].value,
        gpu["defaults"]["gpm"]["sm_util"].as_f64().unwrap() / 100.0,
        1e-9
    ));

    // One MIG device selected by its UUID: only it, and nothing of the GPU.
    let pick = instances[1]["uuid"].as_str().unwrap();
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock("h200-mig-3g2g1g1g.json")
        .env("GPU_SIDECAR_DEVICES", pick)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .spawn();
    assert!(rx.wait_for_metric("hw.status", WAIT), "{}", agent.dump());
    assert!(rx.wait_until(WAIT, |r| r.metrics_requests().len() >= 2));
    stop(&mut agent);
    let ids: BTreeSet<String> = rx
        .points("hw.gpu.memory.usage")
        .iter()
        .chain(rx.points("hw.status").iter())
        .filter_map(|p| p.attr("hw.id").map(str::to_string))
        .collect();
    assert_eq!(ids, BTreeSet::from([pick.to_string()]));
    assert!(
        !rx.has_metric("hw.power"),
        "the GPU's power is not the MIG device's"
    );
}

/// XID events: the watcher's registration fails at first and is retried; then each XID
/// counts in nvidia.gpu.xid.errors and emits one event; a double-bit ECC event emits one
/// event; a pending row remapping makes hw.status degraded.
#[test]
fn xid_events_are_counted_and_emitted_and_pending_remap_degrades() {
    let scen = load("h200-xid-remap.json");
    let uuid = scen["devices"][0]["uuid"].as_str().unwrap();
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock("h200-xid-remap.json")
        .env("NVML_MOCK_TIME_SCALE", "2")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .spawn();
    let xids = |r: &Receiver| -> BTreeMap<String, f64> {
        r.last_points("nvidia.gpu.xid.errors")
            .iter()
            .map(|p| (p.attr("nvidia.gpu.xid.code").unwrap().to_string(), p.value))
            .collect()
    };
    let degraded = |r: &Receiver| {
        with(&r.last_points("hw.status"), "hw.state", "degraded")
            .first()
            .is_some_and(|p| p.value == 1.0)
    };
    // Before t = 6 s (3 s real) the rows are fine.
    assert!(rx.wait_for_metric("hw.status", WAIT));
    assert!(!degraded(&rx), "no remapping pending yet");
    assert!(
        rx.wait_until(WAIT, |r| {
            xids(r) == BTreeMap::from([("13".into(), 2.0), ("79".into(), 1.0)])
                && degraded(r)
                && r.log_events("nvidia.gpu.xid").len() == 3
        }),
        "{:?}\n{}",
        xids(&rx),
        agent.dump()
    );
    stop(&mut agent);
    // The first registration failed (UNKNOWN until t = 1.5 s): said once, retried.
    let retries: Vec<_> = agent
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("cannot watch XID and ECC events yet"))
        .collect();
    assert_eq!(retries.len(), 1, "{}", agent.dump());
    assert!(retries[0].contains("nvmlDeviceRegisterEvents"));

    // The xid alert series of the GPU is born with the first XID (t = 3 s), at 1, counting
    // from the agent's start (its start time precedes the first XID's record): nothing at 0
    // before (the shipped GPUXidError rule catches a series born at 1).
    let xid_alert: Vec<_> = rx
        .points("nvidia.gpu.alerts")
        .into_iter()
        .filter(|p| {
            p.attr("nvidia.gpu.alert.rule") == Some("xid")
                && p.attr("nvidia.gpu.alert.state") == Some("firing")
                && p.attr("hw.id") == Some(uuid)
        })
        .collect();
    assert!(
        xid_alert.first().is_some_and(|p| p.value >= 1.0),
        "{xid_alert:?}"
    );
    let first_xid = rx
        .log_events("nvidia.gpu.xid")
        .iter()
        .map(|r| r.time_unix_nano)
        .min()
        .unwrap();
    assert!(
        xid_alert.iter().all(|p| p.start_time_unix_nano < first_xid),
        "{xid_alert:?}"
    );

    let counter = rx.last_points("nvidia.gpu.xid.errors");
    for p in &counter {
        assert_eq!(p.unit, "{error}");
        assert_eq!(
            p.kind,
            Kind::Sum {
                monotonic: true,
                cumulative: true
            }
        );
        assert_eq!(p.attr("hw.id"), Some(uuid));
        assert_eq!(p.attr("hw.model"), Some("NVIDIA H200"));
    }
    assert_eq!(
        xids(&rx),
        BTreeMap::from([("13".into(), 2.0), ("79".into(), 1.0)]),
        "+1 for the XID 79, +2 for the two XID 13s, nothing more"
    );
    let events = rx.log_events("nvidia.gpu.xid");
    assert_eq!(events.len(), 3, "one event per XID: {events:#?}");
    let by_code = |code: &str| -> Vec<_> {
        events
            .iter()
            .filter(|e| e.attr("nvidia.gpu.xid.code") == Some(code))
            .collect()
    };
    let x79 = by_code("79");
    assert_eq!(x79.len(), 1);
    assert!(
        x79[0].body.contains("XID 79") && x79[0].body.contains("fallen off the bus"),
        "{}",
        x79[0].body
    );
    assert_eq!(x79[0].severity_text, "FATAL");
    assert_eq!(x79[0].attr("hw.id"), Some(uuid));
    assert!(x79[0].time_unix_nano > 0);
    let x13 = by_code("13");
    assert_eq!(x13.len(), 2);
    assert!(x13
        .iter()
        .all(|e| e.severity_text == "WARN" && e.body.contains("XID 13")));
    // nvidia.gpu.xid.last_seen: per code, the time of its last report (the later XID 13's).
    let last_seen: BTreeMap<String, f64> = rx
        .last_points("nvidia.gpu.xid.last_seen")
        .iter()
        .map(|p| (p.attr("nvidia.gpu.xid.code").unwrap().to_string(), p.value))
        .collect();
    let secs = |e: &&common::LogRecordView| e.time_unix_nano as f64 / 1e9;
    let latest_13 = x13.iter().map(secs).fold(f64::MIN, f64::max);
    assert_eq!(last_seen.len(), 2, "{last_seen:?}");
    assert!(
        (last_seen["79"] - secs(&x79[0])).abs() < 1e-3,
        "{last_seen:?}"
    );
    assert!((last_seen["13"] - latest_13).abs() < 1e-3, "{last_seen:?}");
    let ecc = rx.log_events("nvidia.gpu.ecc");
    assert_eq!(ecc.len(), 1, "{ecc:#?}");
    assert_eq!(ecc[0].attr("error.type"), Some("uncorrected"));

    let status = rx.last_points("hw.status");
    assert_eq!(with(&status, "hw.state", "degraded")[0].value, 1.0);
    assert_eq!(with(&status, "hw.state", "ok")[0].value, 0.0);
    let rows = rx.last_points("nvidia.gpu.memory.remapped_rows");
    assert_eq!(with(&rows, "error.type", "uncorrected")[0].value, 1.0);
    assert_eq!(with(&rows, "error.type", "corrected")[0].value, 0.0);
    assert_eq!(rows[0].unit, "{row}");
}
