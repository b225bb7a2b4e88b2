//! Faults a fresh-eyes review found (issue 13), each played as a user meets it: the agent
//! binary with the mock NVML (scenarios edited per test) exporting to the in-process OTLP
//! receiver. Each test failed on the code before its fix.
//!
//! - a stuck event watcher (`nvmlEventSetWait_v2` not returning) is seen: not ready, logged
//!   once, counted; the XIDs are counted once it returns; it never holds NVML's
//!   re-initialization;
//! - XIDs of another tenant's MIG device are not reported; a GPU lost under MIG devices of
//!   this pod is one alert;
//! - MIG listing errors are counted;
//! - an XID storm is counted in full and logged at a bounded rate;
//! - PCIe bytes are counted once when GPM's PCIe answers come and go;
//! - the health endpoint answers while the kubelet has not answered, and a health endpoint
//!   that cannot be served stops the agent before anything else starts.

use crate::common;
use crate::support::{count_lines, health as get, scenario_with, stop_ok, wait_ready};

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{scenario, Agent, AgentBuilder, Point, Protocol, Receiver};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

/// `<scratch>/<name>`: [`common::temp_path`] (removed when the test process exits).
fn temp_path(name: &str) -> PathBuf {
    common::temp_path(name)
}

/// The value of the one point with these attributes.
fn value(points: &[Point], attrs: &[(&str, &str)]) -> Option<f64> {
    let hits: Vec<_> = points
        .iter()
        .filter(|p| attrs.iter().all(|(k, v)| p.attr(k) == Some(*v)))
        .collect();
    assert!(hits.len() <= 1, "several points with {attrs:?}: {hits:#?}");
    hits.first().map(|p| p.value)
}

/// `nvidia.gpu.xid.errors` by (hw.id, code).
fn xids(rx: &Receiver) -> Vec<(String, String, f64)> {
    let mut v: Vec<_> = rx
        .last_points("nvidia.gpu.xid.errors")
        .iter()
        .map(|p| {
            (
                p.attr("hw.id").unwrap_or_default().to_string(),
                p.attr("nvidia.gpu.xid.code")
                    .unwrap_or_default()
                    .to_string(),
                p.value,
            )
        })
        .collect();
    v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    v
}

fn agent(rx: &Receiver, interval: &str) -> AgentBuilder {
    Agent::builder()
        .otlp(rx)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", interval)
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "700")
        .env("NVML_MOCK_NO_LATENCY", "1")
}

const H200: &str = "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5";

// ---------------------------------------------------------------------------------------------
// The event watcher

/// The shipped case (`nvmlEventSetWait_v2` hangs, XIDs arrive meanwhile), shortened: the
/// wait hangs 12 s from t = 1 s; XID 13 at 3 s and 8 s. Sampling every 500 ms (the
/// watcher's wait bound), watchdog 2 s: the watcher is stuck once a wait is 2.5 s old.
fn watcher_hang(name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    scenario_with("h200-event-watcher-hang.json", name, |v| {
        v["faults"] = json!([{
            "call": "nvmlEventSetWait_v2", "from_s": 1.0, "to_s": 2.0, "block_s": 12.0
        }]);
        v["events"] = json!([
            { "t": 3.0, "device": 0, "type": "xid", "data": 13 },
            { "t": 8.0, "device": 0, "type": "xid", "data": 13 }
        ]);
        edit(v);
    })
}

/// While the wait hangs: `/readyz` 503 naming the watcher's call (and `/healthz` 200:
/// sampling and export go on), one line, `gpu_sidecar.nvml.stuck` counts it; when it
/// returns, both XIDs are counted, one line says so, and the agent is ready again.
#[test]
fn a_stuck_event_watcher_is_not_ready_logged_once_counted_and_its_xids_arrive_later() {
    let path = watcher_hang("watcher-hang", |_| {});
    let rx = Receiver::start(Protocol::Grpc);
    common::mock_library(); // built before the clock starts
    let started = Instant::now();
    let mut agent = agent(&rx, "500ms")
        .env_mock_path(&path)
        .env("GPU_SIDECAR_WATCHDOG_TIMEOUT", "2s")
        .spawn();
    wait_ready(&agent, 200, WAIT);
    assert!(
        agent.wait_for_stderr(
            "the XID/ECC event watcher has been inside nvmlEventSetWait_v2",
            WAIT
        ),
        "{}",
        agent.dump()
    );
    let (status, body) = get(&agent, "/readyz");
    assert_eq!(status, 503, "{body:#}");
    let events = &body["checks"]["events"];
    assert_eq!(events["ok"], false, "{body:#}");
    assert_eq!(events["busy"], "nvmlEventSetWait_v2");
    assert_eq!(events["timeout_s"], 0.5);
    for other in ["nvml", "sample", "watchdog", "export"] {
        assert_eq!(body["checks"][other]["ok"], true, "{other}: {body:#}");
    }
    let (status, body) = get(&agent, "/healthz");
    assert_eq!(status, 200, "sampling and export go on: {body:#}");
    // Counted, and the GPU's values keep flowing meanwhile.
    assert!(
        rx.wait_until(WAIT, |r| value(
            &r.last_points("gpu_sidecar.nvml.stuck"),
            &[
                ("thread.name", "nvml-events"),
                ("gpu_sidecar.nvml.step", "nvmlEventSetWait_v2")
            ]
        ) == Some(1.0)),
        "{:#?}",
        rx.last_points("gpu_sidecar.nvml.stuck")
    );
    let n = rx.points("hw.power").len();
    assert!(rx.wait_until(WAIT, |r| r.points("hw.power").len() > n + 2));
    assert!(
        xids(&rx).is_empty(),
        "nothing seen while stuck: {:?}",
        xids(&rx)
    );
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "still inside the hang"
    );

    // The wait returns at ~13 s: both XIDs (3 s and 8 s) are delivered then.
    assert!(
        rx.wait_until(Duration::from_secs(30), |r| xids(r)
            == vec![(H200.to_string(), "13".to_string(), 2.0)]),
        "{:?}\n{}",
        xids(&rx),
        agent.dump()
    );
    wait_ready(&agent, 200, WAIT);
    assert_eq!(
        count_lines(&agent, "the XID/ECC event watcher has been inside"),
        1,
        "logged once"
    );
    // Said by the health watchdog at its next round, which may come after /readyz is 200.
    agent.wait_for_stderr("the event watcher's call returned", WAIT);
    assert_eq!(
        count_lines(&agent, "the event watcher's call returned"),
        1,
        "{}",
        agent.dump()
    );
    stop_ok(&mut agent);
}

/// The same hang, and NVML answering nothing from 2 s to 6 s: the sampler re-initializes
/// NVML without waiting for the stuck watcher and is ready again after NVML recovers (within
/// a sample interval of it), while the old watcher is still inside its wait (it returns at
/// ~13 s), with a new one watching. The XIDs at 8 s and 10 s reach both event sets: counted
/// once each (by the new watcher); the old one says how many queued events it does not
/// report (the 3 s one, which only it saw, among them).
#[test]
fn a_stuck_event_watcher_does_not_hold_nvml_reinitialization() {
    let path = watcher_hang("watcher-hang-silent", |v| {
        v["faults"].as_array_mut().unwrap().push(json!({
            "call": "*", "from_s": 2.0, "to_s": 6.0, "code": 999
        }));
        v["events"] = json!([
            { "t": 3.0, "device": 0, "type": "xid", "data": 13 },
            { "t": 8.0, "device": 0, "type": "xid", "data": 13 },
            { "t": 10.0, "device": 0, "type": "xid", "data": 31 }
        ]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    common::mock_library(); // built before the clock starts
    let started = Instant::now();
    let mut agent = agent(&rx, "500ms")
        .env_mock_path(&path)
        .env("GPU_SIDECAR_WATCHDOG_TIMEOUT", "2s")
        .spawn();
    assert!(
        agent.wait_for_stderr("re-initializing NVML", WAIT),
        "{}",
        agent.dump()
    );
    wait_ready(&agent, 503, WAIT);
    // Every change of /readyz until ready, for the failure message.
    let mut seen: Vec<(Duration, u16, Vec<String>)> = Vec::new();
    let body = loop {
        let (status, body) = get(&agent, "/readyz");
        let failing: Vec<String> = body["checks"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, c)| c["ok"] == false)
            .map(|(k, c)| format!("{k}: {}", c["detail"]))
            .collect();
        if seen
            .last()
            .is_none_or(|(_, s, f)| (*s, f) != (status, &failing))
        {
            seen.push((started.elapsed(), status, failing));
        }
        if status == 200 {
            break body;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{seen:#?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let ready_after = started.elapsed();
    assert!(
        ready_after < Duration::from_secs(12),
        "ready {ready_after:?} after start: before the stuck wait returns (~13 s)\n{seen:#?}\n{}",
        agent.dump()
    );
    assert_eq!(
        body["checks"]["events"]["earlier_still_running"], 1,
        "{body:#}"
    );
    assert!(agent
        .stderr_lines()
        .iter()
        .any(|l| l.contains("NVML answers again")));
    // The values flow again.
    let n = rx.points("hw.power").len();
    assert!(rx.wait_until(WAIT, |r| r.points("hw.power").len() > n));
    // XIDs 13 (8 s) and 31 (10 s) from the new watcher; the old one returns at ~13 s with
    // all three queued and reports none of them.
    let once = vec![
        (H200.to_string(), "13".to_string(), 1.0),
        (H200.to_string(), "31".to_string(), 1.0),
    ];
    assert!(rx.wait_until(WAIT, |r| xids(r) == once), "{:?}", xids(&rx));
    assert!(
        agent.wait_for_stderr("returned with XID/ECC events still queued", WAIT),
        "{}",
        agent.dump()
    );
    assert!(agent
        .stderr_lines()
        .iter()
        .any(|l| l.contains("still queued") && l.contains("dropped=3")));
    let n = rx.metrics_requests().len();
    assert!(rx.wait_until(WAIT, |r| r.metrics_requests().len() > n + 2));
    assert_eq!(xids(&rx), once, "not counted twice");
    stop_ok(&mut agent);
}

/// With 5 s sampling each wait of the watcher lasts up to 5 s, yet an XID is seen when NVML
/// reports it (its event's time is the XID's, give or take the agent's start-up; not the
/// watcher's next wake-up at ~5 s), and it reaches the collector within the events queue's
/// 1 s.
#[test]
fn an_xid_is_seen_when_nvml_reports_it_not_at_the_next_wake_up() {
    let path = scenario_with("h200-event-watcher-hang.json", "xid-latency", |v| {
        v["faults"] = json!([]);
        v["events"] = json!([{ "t": 2.0, "device": 0, "type": "xid", "data": 79 }]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    common::mock_library(); // built before the clock starts
    let spawned = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut agent = agent(&rx, "5s").env_mock_path(&path).spawn();
    assert!(rx.wait_until(WAIT, |r| !r.log_events("nvidia.gpu.xid").is_empty()));
    let arrived = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let e = &rx.log_events("nvidia.gpu.xid")[0];
    // The mock's clock starts at the agent's first nvmlInit, a little after the spawn.
    let seen_after_s = (e.time_unix_nano - spawned) as f64 / 1e9;
    // The next wake-up of an idle watcher would be at ~5 s.
    assert!(
        (2.0..4.0).contains(&seen_after_s),
        "XID at 2 s seen at {seen_after_s:.3} s"
    );
    let sent_after_s = (arrived - e.time_unix_nano) as f64 / 1e9;
    assert!(sent_after_s < 1.5, "sent {sent_after_s:.3} s after");
    stop_ok(&mut agent);
}

/// Every wait hangs 30 s and NVML stops answering twice, so each new NVML session leaves its
/// watcher behind: at most two watcher threads are kept (the third session starts none),
/// said once, and `/readyz` says events are not watched, instead of stuck threads piling up.
#[test]
fn stuck_event_watchers_do_not_pile_up() {
    let path = watcher_hang("watcher-pile", |v| {
        v["faults"] = json!([
            { "call": "nvmlEventSetWait_v2", "from_s": 0.0, "to_s": 10.0, "block_s": 30.0 },
            { "call": "*", "device": 0, "from_s": 0.5, "to_s": 1.0, "code": 999 },
            { "call": "*", "device": 0, "from_s": 3.5, "to_s": 4.0, "code": 999 }
        ]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = agent(&rx, "100ms").env_mock_path(&path).spawn();
    assert!(
        agent.wait_for_stderr(
            "XID and ECC events are not watched: 2 event watchers of earlier NVML sessions",
            WAIT
        ),
        "{}",
        agent.dump()
    );
    let body = wait_ready(&agent, 503, WAIT);
    let events = &body["checks"]["events"];
    assert_eq!(events["ok"], false, "{body:#}");
    assert_eq!(events["earlier_still_running"], 2, "{body:#}");
    assert_eq!(count_lines(&agent, "re-initializing NVML"), 2);
    assert_eq!(count_lines(&agent, "XID and ECC events are not watched"), 1);
    let threads = std::fs::read_dir(format!("/proc/{}/task", agent.pid()))
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|c| c.trim() == "nvml-events")
        })
        .count();
    assert_eq!(threads, 2, "two stuck watchers, no third");
    // Shutdown does not wait for them.
    let t = Instant::now();
    stop_ok(&mut agent);
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
}

// ---------------------------------------------------------------------------------------------
// MIG: tenants and lost GPUs

/// This pod holds two MIG devices (GPU instances 2 and 3) of a GPU whose other two belong to
/// another pod. XID 13 in GPU instance 9 (the other pod's) is not reported here; XID 31 in
/// GPU instance 3 is, on that MIG device; XID 48 without an instance (the whole GPU) is, on
/// the GPU. The GPU is lost at 3 s: one `gpu_lost` alert, on the GPU, not one per MIG device.
#[test]
fn mig_devices_of_this_pod_see_their_xids_only_and_one_gpu_lost() {
    let scen = common::read_json(scenario("h200-mig-3g2g1g1g.json"));
    let migs: Vec<String> = scen["devices"][0]["mig"]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["uuid"].as_str().unwrap().to_string())
        .collect();
    let path = scenario_with("h200-mig-3g2g1g1g.json", "mig-tenants", |v| {
        v["events"] = json!([
            { "t": 1.0, "device": 0, "type": "xid", "data": 13, "gpu_instance_id": 9, "compute_instance_id": 0 },
            { "t": 1.5, "device": 0, "type": "xid", "data": 31, "gpu_instance_id": 3, "compute_instance_id": 0 },
            { "t": 2.0, "device": 0, "type": "xid", "data": 48 }
        ]);
        v["faults"] = json!([{ "call": "*", "device": 0, "from_s": 3.0, "code": 15 }]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = agent(&rx, "100ms")
        .env_mock_path(&path)
        .env("GPU_SIDECAR_DEVICES", format!("{},{}", migs[0], migs[1]))
        .spawn();
    assert!(
        rx.wait_until(WAIT, |r| !r
            .log_events("nvidia.gpu.alert.gpu_lost")
            .is_empty()
            && xids(r).len() >= 2),
        "{:?}\n{}",
        xids(&rx),
        agent.dump()
    );
    // One more second: a second alert or a late XID would have come by now.
    std::thread::sleep(Duration::from_secs(1));
    stop_ok(&mut agent);
    assert_eq!(
        xids(&rx),
        vec![
            (H200.to_string(), "48".to_string(), 1.0),
            (migs[1].clone(), "31".to_string(), 1.0),
        ],
        "no XID 13: it hit the other pod's MIG device"
    );
    let xid_events = rx.log_events("nvidia.gpu.xid");
    assert_eq!(xid_events.len(), 2, "{xid_events:#?}");
    assert!(xid_events
        .iter()
        .all(|e| e.attr("nvidia.gpu.xid.code") != Some("13")));
    let lost = rx.log_events("nvidia.gpu.alert.gpu_lost");
    assert_eq!(lost.len(), 1, "one alert for the GPU: {lost:#?}");
    assert_eq!(lost[0].attr("hw.id"), Some(H200));
    assert_eq!(lost[0].attr("nvidia.gpu.alert.state"), Some("firing"));
}

/// A MIG device handle NVML refuses (UNKNOWN) is counted in `gpu_sidecar.nvml.errors`, once
/// per slot asked, besides the warning.
#[test]
fn mig_listing_errors_are_counted() {
    let path = scenario_with("h200-mig-3g2g1g1g.json", "mig-listing", |v| {
        v["faults"] = json!([{ "call": "nvmlDeviceGetMigDeviceHandleByIndex", "code": 999 }]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = agent(&rx, "100ms").env_mock_path(&path).spawn();
    let errors = |r: &Receiver| {
        value(
            &r.last_points("gpu_sidecar.nvml.errors"),
            &[
                ("nvidia.nvml.call", "nvmlDeviceGetMigDeviceHandleByIndex"),
                ("error.type", "NVML_ERROR_UNKNOWN"),
            ],
        )
    };
    assert!(
        rx.wait_until(WAIT, |r| errors(r).is_some()),
        "{:#?}\n{}",
        rx.last_points("gpu_sidecar.nvml.errors"),
        agent.dump()
    );
    // The mock's MIG slots: 7 (max_devices), each asked once at listing.
    assert_eq!(errors(&rx), Some(7.0));
    stop_ok(&mut agent);
}

// ---------------------------------------------------------------------------------------------
// XID storm

/// 300 XID 13 in one second and one XID 79: every one counted and sent as an event, two log
/// lines (one per GPU and code), not 301.
#[test]
fn an_xid_storm_is_counted_in_full_and_logged_at_a_bounded_rate() {
    let path = scenario_with("h200-event-watcher-hang.json", "xid-storm", |v| {
        v["faults"] = json!([]);
        let mut events: Vec<Value> = (0..300)
            .map(|k| json!({ "t": 1.0 + f64::from(k) / 300.0, "device": 0, "type": "xid", "data": 13 }))
            .collect();
        events.push(json!({ "t": 2.5, "device": 0, "type": "xid", "data": 79 }));
        v["events"] = Value::Array(events);
    });
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = agent(&rx, "100ms").env_mock_path(&path).spawn();
    let want = vec![
        (H200.to_string(), "13".to_string(), 300.0),
        (H200.to_string(), "79".to_string(), 1.0),
    ];
    assert!(
        rx.wait_until(WAIT, |r| xids(r) == want),
        "{:?}\n{}",
        xids(&rx),
        agent.dump()
    );
    assert!(
        rx.wait_until(WAIT, |r| r.log_events("nvidia.gpu.xid").len() == 301),
        "{}",
        rx.log_events("nvidia.gpu.xid").len()
    );
    stop_ok(&mut agent);
    assert_eq!(count_lines(&agent, "XID error"), 2, "{}", agent.dump());
}

// ---------------------------------------------------------------------------------------------
// PCIe bytes

/// GPM's PCIe answers come and go every second (rows without `pcie_*_per_sec`), the
/// throughput call taking over meanwhile; both say 10 MiB/s out, 20 MiB/s in. The bytes
/// counted never exceed the rate times the time the agent has run (a stretch counted by
/// both sources would).
#[test]
fn pcie_bytes_are_counted_once_when_gpm_answers_come_and_go() {
    const MIB: f64 = 1_048_576.0;
    let path = scenario_with("h200-event-watcher-hang.json", "pcie-flaps", |v| {
        v["faults"] = json!([]);
        v["events"] = json!([]);
        let d = &mut v["devices"][0];
        let mut with = d["defaults"]["gpm"].clone();
        with["pcie_tx_per_sec"] = json!(10.0);
        with["pcie_rx_per_sec"] = json!(20.0);
        let mut without = with.clone();
        let w = without.as_object_mut().unwrap();
        w.remove("pcie_tx_per_sec");
        w.remove("pcie_rx_per_sec");
        d["defaults"]["gpm"] = with.clone();
        d["defaults"]["pcie_tx_kbps"] = json!(10 * 1024);
        d["defaults"]["pcie_rx_kbps"] = json!(20 * 1024);
        d["timeline"] = json!([
            { "t": 0.0, "gpm": without },
            { "t": 1.0, "gpm": with },
            { "t": 2.0, "gpm": without },
            { "t": 3.0, "gpm": with },
            { "t": 4.0, "gpm": without },
            { "t": 5.0, "gpm": with },
        ]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    common::mock_library(); // built before the clock starts
    let spawned = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut agent = agent(&rx, "100ms")
        .env_mock_path(&path)
        .env("GPU_SIDECAR_GPM_INTERVAL", "100ms")
        .env("GPU_SIDECAR_PCIE_INTERVAL", "100ms")
        .spawn();
    let io = |r: &Receiver, direction: &str| {
        r.last_points("hw.gpu.io")
            .into_iter()
            .find(|p| p.attr("network.io.direction") == Some(direction))
    };
    // Past the last flip (5 s), and a second more.
    assert!(
        rx.wait_until(WAIT, |r| io(r, "transmit")
            .is_some_and(|p| p.time_unix_nano > spawned + 6_500_000_000)),
        "{}",
        agent.dump()
    );
    stop_ok(&mut agent);
    for (direction, rate) in [("transmit", 10.0 * MIB), ("receive", 20.0 * MIB)] {
        let p = io(&rx, direction).unwrap();
        let ran = (p.time_unix_nano - spawned) as f64 / 1e9;
        assert!(
            p.value <= rate * ran,
            "{direction}: {} bytes in {ran:.2} s is more than {rate} B/s can carry: counted twice",
            p.value
        );
        assert!(
            p.value >= rate * (ran - 1.5),
            "{direction}: {} bytes in {ran:.2} s: too little",
            p.value
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Health endpoint at start

/// A kubelet that accepts the connection and never answers (a unix socket nobody accepts on):
/// the health endpoint answers meanwhile, alive and not ready, saying what it waits for.
#[test]
fn health_answers_while_the_kubelet_has_not() {
    let socket = common::socket_path("silent-kubelet.sock");
    let _ = std::fs::remove_file(&socket);
    let _kubelet = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mut agent = Agent::builder()
        .env_mock("four-gpu.json")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_LOGS_EXPORTER", "none")
        .env("GPU_SIDECAR_DEVICES", "pod-resources")
        .env("GPU_SIDECAR_POD_RESOURCES_SOCKET", &socket)
        .env("K8S_POD_NAME", "train-0")
        .env("K8S_NAMESPACE_NAME", "ml")
        .spawn();
    let (status, body) = get(&agent, "/healthz");
    assert_eq!(status, 200, "{body:#}");
    let (status, body) = get(&agent, "/readyz");
    assert_eq!(status, 503, "{body:#}");
    let startup = &body["checks"]["startup"];
    assert_eq!(startup["ok"], false, "{body:#}");
    assert!(
        startup["detail"]
            .as_str()
            .unwrap()
            .contains("pod-resources"),
        "{body:#}"
    );
    stop_ok(&mut agent);
}

/// The health port is taken: the agent stops at once with exit 1 naming it, before it asks
/// the kubelet (which never answers here) or initializes NVML.
#[test]
fn a_health_endpoint_that_cannot_be_served_stops_the_agent_before_anything_starts() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let socket = common::socket_path("silent-kubelet-2.sock");
    let _ = std::fs::remove_file(&socket);
    let _kubelet = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let calls = temp_path("health-taken-calls.json");
    let _ = std::fs::remove_file(&calls);
    common::mock_library(); // built before the clock starts
    let t = Instant::now();
    let mut agent = Agent::builder()
        .env_mock("four-gpu.json")
        .env("NVML_MOCK_CALL_LOG", &calls)
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("GPU_SIDECAR_HEALTH_ADDR", &addr)
        .env("GPU_SIDECAR_DEVICES", "pod-resources")
        .env("GPU_SIDECAR_POD_RESOURCES_SOCKET", &socket)
        .env("K8S_POD_NAME", "train-0")
        .env("K8S_NAMESPACE_NAME", "ml")
        .spawn();
    let status = agent.wait_exit(Duration::from_secs(10));
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(1),
        "exits 1 at once\n{}",
        agent.dump()
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(agent
        .dump()
        .contains(&format!("cannot listen on GPU_SIDECAR_HEALTH_ADDR={addr}")));
    assert!(!calls.exists(), "NVML was never called");
}
