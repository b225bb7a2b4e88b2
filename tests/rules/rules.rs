//! The alert rules end to end: the agent with the mock NVML replaying a rule scenario
//! (`tests/scenarios/rule-*.json`, written by `scripts/gen-rule-scenarios.py`) in
//! compressed time, its events received over OTLP logs.
//!
//! Time: the mock runs scenario time = real time since its first init x `NVML_MOCK_TIME_SCALE`,
//! and every rule duration is set to its default / scale, so the scenario unfolds as it
//! would at the defaults. A record's time is its sample's wall-clock time; converted with the
//! spawn time (which precedes the mock's init) it gives an upper bound of the sample's
//! scenario time. "Fires after the duration, not before" is asserted on that bound (a too
//! early firing would give a smaller one); "while the condition held" is asserted on the
//! values the record carries, which only occur in that phase of the scenario.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Agent, Kind, LogRecordView, Protocol, Receiver};
use gpu_otel_sidecar::rules::catalogue::{HoldSpec, RuleId, RULES};

const SAMPLE_S: f64 = 0.1;
const GIB: f64 = (1u64 << 30) as f64;
/// Real seconds of slack for a sample's reading after its time stamp.
const READ_SLACK_S: f64 = 0.05;

fn uuid(i: u32) -> String {
    format!("GPU-7e57a1e0-0000-4000-8000-00000000000{i}")
}

struct Run {
    rx: Receiver,
    agent: Agent,
    spawned_ns: u64,
    scale: f64,
}

impl Run {
    /// The agent on `scenario` at `scale`, sampling every 100 ms, every rule duration at
    /// its default / scale.
    fn start(scenario: &str, scale: f64, extra: &[(&str, &str)]) -> Self {
        let rx = Receiver::start(Protocol::Grpc);
        let mut b = Agent::builder()
            .otlp(&rx)
            .env_mock(scenario)
            .env("NVML_MOCK_TIME_SCALE", scale.to_string())
            .env("NVML_MOCK_NO_LATENCY", "1")
            .env(
                "GPU_SIDECAR_SAMPLE_INTERVAL",
                format!("{}ms", SAMPLE_S * 1000.0),
            )
            .env("OTEL_METRIC_EXPORT_INTERVAL", "500")
            .env("K8S_POD_NAME", "trainer-0")
            .env("K8S_NAMESPACE_NAME", "ml");
        for r in RULES {
            if let HoldSpec::Duration(d) = r.hold {
                let ms = (d.as_secs_f64() * 1000.0 / scale).round().max(1.0);
                b = b.env(r.var("DURATION"), format!("{ms}ms"));
            }
        }
        for (k, v) in extra {
            b = b.env(k, v);
        }
        let spawned_ns = now_ns();
        let agent = b.spawn();
        Self {
            rx,
            agent,
            spawned_ns,
            scale,
        }
    }

    /// Upper bound of the scenario time of the sample behind `r`.
    fn scen(&self, r: &LogRecordView) -> f64 {
        (r.time_unix_nano as f64 - self.spawned_ns as f64) / 1e9 * self.scale
    }

    /// Tolerance in scenario seconds for a reading taken just after its time stamp.
    fn slack(&self) -> f64 {
        READ_SLACK_S * self.scale
    }

    /// Every alert record so far, in arrival order.
    fn alerts(&self) -> Vec<LogRecordView> {
        let mut v = self.rx.log_records();
        v.retain(|r| r.event_name.starts_with("nvidia.gpu.alert."));
        v
    }

    fn find(&self, rule: &str, state: &str) -> Vec<LogRecordView> {
        self.alerts()
            .into_iter()
            .filter(|r| {
                r.event_name == format!("nvidia.gpu.alert.{rule}")
                    && r.attr("nvidia.gpu.alert.state") == Some(state)
            })
            .collect()
    }

    /// Waits for the record of `rule` in `state`, up to `scenario_s` of scenario time plus 10
    /// real seconds.
    fn wait_for(&self, rule: &str, state: &str, scenario_s: f64) -> LogRecordView {
        let timeout = Duration::from_secs_f64(scenario_s / self.scale + 10.0);
        assert!(
            self.rx
                .wait_until(timeout, |_| !self.find(rule, state).is_empty()),
            "no {rule} {state} record; got {:?}\n{}",
            names(&self.alerts()),
            self.agent.dump()
        );
        self.find(rule, state).remove(0)
    }

    /// Sleeps until the scenario has certainly reached `scenario_s`, plus the events'
    /// export delay (the batch processor exports every second).
    fn run_until(&self, scenario_s: f64) {
        let real = scenario_s / self.scale + 1.5;
        let elapsed = (now_ns() - self.spawned_ns) as f64 / 1e9;
        if real > elapsed {
            std::thread::sleep(Duration::from_secs_f64(real - elapsed));
        }
    }

    fn stop(mut self) -> Receiver {
        self.agent.sigterm();
        let status = self.agent.wait_exit(Duration::from_secs(15));
        assert!(status.is_some_and(|s| s.success()), "{}", self.agent.dump());
        self.rx
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn names(records: &[LogRecordView]) -> Vec<(String, String)> {
    records
        .iter()
        .map(|r| {
            (
                r.event_name.clone(),
                r.attr("nvidia.gpu.alert.state").unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn num(r: &LogRecordView, key: &str) -> f64 {
    r.attr(key)
        .unwrap_or_else(|| panic!("{key} missing in {:#?}", r.attrs))
        .parse()
        .unwrap_or_else(|e| panic!("{key}: {e}"))
}

/// What every alert record carries: name, severity, rule, state, GPU, pod, hint, readings.
fn check_record(r: &LogRecordView, rule: RuleId, state: &str, hw_id: &str) {
    let spec = rule.spec();
    assert_eq!(r.event_name, spec.event_name);
    assert_eq!(r.attr("nvidia.gpu.alert.rule"), Some(spec.name));
    assert_eq!(r.attr("nvidia.gpu.alert.state"), Some(state));
    assert_eq!(
        r.attr("nvidia.gpu.alert.severity"),
        Some(spec.severity.as_str())
    );
    assert_eq!(r.attr("hw.id"), Some(hw_id), "{:#?}", r.attrs);
    assert_eq!(r.attr("hw.type"), Some("gpu"));
    assert_eq!(r.attr("hw.vendor"), Some("NVIDIA"));
    assert_eq!(
        r.resource.get("k8s.pod.name").map(String::as_str),
        Some("trainer-0")
    );
    assert_eq!(
        r.resource.get("k8s.namespace.name").map(String::as_str),
        Some("ml")
    );
    assert_eq!(r.scope_name, "gpu-otel-sidecar");
    if state == "firing" {
        let (number, text) = match spec.severity.as_str() {
            "info" => (9, "INFO"),
            "warning" => (13, "WARN"),
            _ => (21, "FATAL"),
        };
        assert_eq!(
            (r.severity_number, r.severity_text.as_str()),
            (number, text)
        );
        assert!(r.body.ends_with(spec.hint), "{}", r.body);
        // The text names the GPU by its UUID (the training process's cuda:N is not
        // NVML's index).
        assert!(r.body.contains(hw_id), "{}", r.body);
        assert!(
            r.attrs.keys().any(|k| k.starts_with("nvidia.gpu.reading.")),
            "no readings: {:#?}",
            r.attrs
        );
    } else {
        assert_eq!((r.severity_number, r.severity_text.as_str()), (9, "INFO"));
        assert!(r.body.contains("resolved after firing for"), "{}", r.body);
    }
}

#[test]
fn leaking_job_fires_memory_leak_with_time_to_full_then_resolves() {
    let scale = 120.0;
    let run = Run::start("rule-leaking-job.json", scale, &[]);
    let fired = run.wait_for("memory_leak", "firing", 1000.0);
    let resolved = run.wait_for("memory_leak", "resolved", 1500.0);
    check_record(&fired, RuleId::MemoryLeak, "firing", &uuid(0));
    check_record(&resolved, RuleId::MemoryLeak, "resolved", &uuid(0));
    // The leak starts at 300 s: ten minutes of rise are needed.
    let at = run.scen(&fired);
    assert!(at >= 900.0 - run.slack(), "fired at scenario {at:.0} s");
    // Fired during the leak, after about ten minutes of it: 20 GiB + 0.5 GiB/min.
    let used = num(&fired, "hw.gpu.memory.usage");
    assert!((24.9 * GIB..27.6 * GIB).contains(&used), "{}", used / GIB);
    // The slope is measured in real time: the scenario's 0.5 GiB/min x scale.
    let rate = num(&fired, "nvidia.gpu.alert.memory.growth_rate");
    let expected = 0.5 * GIB / 60.0 * scale;
    assert!(
        (rate - expected).abs() / expected < 0.1,
        "{rate} vs {expected}"
    );
    let to_full = num(&fired, "nvidia.gpu.alert.memory.time_to_full") * scale;
    let expected_to_full = (80.0 * GIB - used) / (0.5 * GIB / 60.0);
    assert!(
        (to_full - expected_to_full).abs() / expected_to_full < 0.1,
        "{to_full} vs {expected_to_full} scenario s"
    );
    assert_eq!(num(&fired, "hw.gpu.memory.limit"), 80.0 * GIB);
    assert!(fired.body.contains("full in about"), "{}", fired.body);
    // The job restarts at 1200 s; resolved once not rising for 2 min.
    let at = run.scen(&resolved);
    assert!(at >= 1200.0 + 120.0 - run.slack(), "resolved at {at:.0} s");
    run.run_until(1500.0);
    let rx = run.stop();
    let all: Vec<_> = rx
        .log_records()
        .into_iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .collect();
    assert_eq!(
        names(&all),
        vec![
            ("nvidia.gpu.alert.memory_leak".into(), "firing".into()),
            ("nvidia.gpu.alert.memory_leak".into(), "resolved".into()),
        ]
    );
}

#[test]
fn starving_job_fires_input_starvation_after_two_minutes_not_for_a_dip() {
    let scale = 120.0;
    let run = Run::start("rule-starving-job.json", scale, &[]);
    let fired = run.wait_for("input_starvation", "firing", 500.0);
    check_record(&fired, RuleId::InputStarvation, "firing", &uuid(0));
    // Starved from 240 s (the 60-120 s dip is too short): 2 min later at the earliest.
    let at = run.scen(&fired);
    assert!(at >= 360.0 - run.slack(), "fired at scenario {at:.0} s");
    assert_eq!(num(&fired, "hw.gpu.utilization"), 0.12);
    assert_eq!(num(&fired, "nvidia.gpu.alert.process.count"), 1.0);
    let held = num(&fired, "nvidia.gpu.alert.process.memory");
    assert!((held - 30.0 * GIB).abs() <= 64.0 * 1048576.0, "{held}");
    assert_eq!(num(&fired, "nvidia.gpu.alert.threshold"), 20.0);
    assert!(
        num(&fired, "nvidia.gpu.alert.active_for") * scale >= 120.0 - run.slack(),
        "{:?}",
        fired.attrs
    );
    let resolved = run.wait_for("input_starvation", "resolved", 800.0);
    check_record(&resolved, RuleId::InputStarvation, "resolved", &uuid(0));
    let at = run.scen(&resolved);
    assert!(at >= 540.0 + 120.0 - run.slack(), "resolved at {at:.0} s");
    // From 900 s the GPU is idle with no process: not starvation.
    run.run_until(1300.0);
    let rx = run.stop();
    let all: Vec<_> = rx
        .log_records()
        .into_iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .collect();
    assert_eq!(all.len(), 2, "{:?}", names(&all));
}

#[test]
fn imbalanced_pod_fires_once_named_after_the_idle_gpu() {
    let scale = 120.0;
    let run = Run::start("rule-imbalanced-pod.json", scale, &[]);
    let fired = run.wait_for("utilization_imbalance", "firing", 400.0);
    check_record(&fired, RuleId::UtilizationImbalance, "firing", &uuid(2));
    let at = run.scen(&fired);
    assert!(at >= 240.0 - run.slack(), "fired at scenario {at:.0} s");
    assert_eq!(num(&fired, "nvidia.gpu.alert.utilization.min"), 0.30);
    assert_eq!(num(&fired, "nvidia.gpu.alert.utilization.max"), 0.95);
    assert_eq!(num(&fired, "nvidia.gpu.alert.utilization.spread"), 0.65);
    assert_eq!(
        fired.attr("nvidia.gpu.alert.busiest.hw.id"),
        Some(uuid(3).as_str())
    );
    assert_eq!(
        fired.attr("nvidia.gpu.alert.utilizations"),
        Some("[0.92, 0.93, 0.3, 0.95]")
    );
    assert_eq!(
        fired.attr("nvidia.gpu.alert.hw_ids").map(str::to_string),
        Some(format!(
            "[{}, {}, {}, {}]",
            uuid(0),
            uuid(1),
            uuid(2),
            uuid(3)
        ))
    );
    assert_eq!(
        num(&fired, "nvidia.gpu.reading.hw.gpu.utilization.general"),
        0.30
    );
    let resolved = run.wait_for("utilization_imbalance", "resolved", 900.0);
    check_record(
        &resolved,
        RuleId::UtilizationImbalance,
        "resolved",
        &uuid(2),
    );
    let at = run.scen(&resolved);
    assert!(at >= 720.0 - run.slack(), "resolved at {at:.0} s");
    // From 840 s GPU 3 holds no memory: no pod-wide judgement, no starvation either.
    run.run_until(1200.0);
    let rx = run.stop();
    let all: Vec<_> = rx
        .log_records()
        .into_iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .collect();
    assert_eq!(all.len(), 2, "{:?}", names(&all));
}

#[test]
fn throttling_card_power_cap_is_info_hw_slowdown_is_warning_and_counted() {
    let scale = 60.0;
    let run = Run::start("rule-throttling-card.json", scale, &[]);
    let cap = run.wait_for("clocks_power_capped", "firing", 200.0);
    check_record(&cap, RuleId::ClocksPowerCapped, "firing", &uuid(0));
    // The 20 s cap at the start is too short; from 60 s, 30 s are needed.
    let at = run.scen(&cap);
    assert!(at >= 90.0 - run.slack(), "fired at scenario {at:.0} s");
    assert_eq!(
        cap.attr("nvidia.gpu.alert.clocks_event.reasons"),
        Some("[sw_power_cap]")
    );
    assert_eq!(num(&cap, "hw.power"), 699.0);
    assert_eq!(num(&cap, "nvidia.gpu.power.limit"), 700.0);
    assert_eq!(
        num(
            &cap,
            "nvidia.gpu.reading.nvidia.gpu.clocks_event.active.sw_power_cap"
        ),
        1.0
    );
    let cap_end = run.wait_for("clocks_power_capped", "resolved", 350.0);
    check_record(&cap_end, RuleId::ClocksPowerCapped, "resolved", &uuid(0));
    assert!(run.scen(&cap_end) >= 270.0 - run.slack());
    let slow = run.wait_for("clocks_slowdown", "firing", 450.0);
    check_record(&slow, RuleId::ClocksSlowdown, "firing", &uuid(0));
    let at = run.scen(&slow);
    assert!(at >= 330.0 - run.slack(), "fired at scenario {at:.0} s");
    assert_eq!(
        slow.attr("nvidia.gpu.alert.clocks_event.reasons"),
        Some("[hw_slowdown]")
    );
    let slow_end = run.wait_for("clocks_slowdown", "resolved", 600.0);
    check_record(&slow_end, RuleId::ClocksSlowdown, "resolved", &uuid(0));
    assert!(run.scen(&slow_end) >= 510.0 - run.slack());
    // The counter, by rule and state.
    let counted = |rx: &Receiver| -> BTreeMap<(String, String), f64> {
        rx.last_points("nvidia.gpu.alerts")
            .into_iter()
            .map(|p| {
                (
                    (
                        p.attr("nvidia.gpu.alert.rule").unwrap().to_string(),
                        p.attr("nvidia.gpu.alert.state").unwrap().to_string(),
                    ),
                    p.value,
                )
            })
            .collect()
    };
    // A series per transition that happened, each born with it at 1 (nothing is exported
    // for the rules and states that never fired): four of them.
    let fired = |rx: &Receiver| counted(rx).len();
    assert!(
        run.rx
            .wait_until(Duration::from_secs(10), |rx| fired(rx) == 4),
        "{:?}",
        counted(&run.rx)
    );
    let spawned = run.spawned_ns;
    let rx = run.stop();
    let all_series = counted(&rx);
    assert_eq!(all_series.len(), 4, "{all_series:?}");
    let born: Vec<_> = rx.points("nvidia.gpu.alerts");
    assert!(
        born.iter().all(|p| p.value >= 1.0),
        "no alert series at 0: {born:#?}"
    );
    // Counting from the agent's start: one start time for all, before the first transition.
    let starts: std::collections::BTreeSet<_> =
        born.iter().map(|p| p.start_time_unix_nano).collect();
    assert_eq!(starts.len(), 1, "{starts:?}");
    let start = *starts.first().unwrap();
    assert!(
        start >= spawned && start < cap.time_unix_nano,
        "start {start}, first firing {}",
        cap.time_unix_nano
    );
    let points: Vec<_> = rx
        .last_points("nvidia.gpu.alerts")
        .into_iter()
        .filter(|p| p.value > 0.0)
        .collect();
    assert_eq!(points.len(), 4);
    for p in &points {
        assert_eq!(p.value, 1.0, "{p:?}");
        assert_eq!(p.unit, "{alert}");
        assert_eq!(
            p.kind,
            Kind::Sum {
                monotonic: true,
                cumulative: true
            }
        );
        assert_eq!(p.attr("hw.id"), Some(uuid(0).as_str()));
    }
    let severities: BTreeMap<_, _> = points
        .iter()
        .map(|p| {
            (
                p.attr("nvidia.gpu.alert.rule").unwrap().to_string(),
                p.attr("nvidia.gpu.alert.severity").unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(severities["clocks_power_capped"], "info");
    assert_eq!(severities["clocks_slowdown"], "warning");
    let all: Vec<_> = rx
        .log_records()
        .into_iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .collect();
    assert_eq!(all.len(), 4, "{:?}", names(&all));
}

#[test]
fn overheating_card_fires_on_three_hot_samples_and_thermal_slowdown() {
    let scale = 60.0;
    let run = Run::start("rule-overheating-card.json", scale, &[]);
    let hot = run.wait_for("temperature_high", "firing", 250.0);
    check_record(&hot, RuleId::TemperatureHigh, "firing", &uuid(0));
    // 88 C from 120 s (the lone 86 C sample at 100 s is not three in a row): the third
    // hot sample comes two sample intervals later at the earliest.
    let at = run.scen(&hot);
    let two_ticks = (2.0 * SAMPLE_S - 0.03) * scale;
    assert!(
        at >= 120.0 + two_ticks - run.slack(),
        "fired at scenario {at:.1} s"
    );
    assert_eq!(num(&hot, "hw.temperature"), 88.0);
    assert_eq!(num(&hot, "nvidia.gpu.alert.temperature.memory"), 94.0);
    assert_eq!(num(&hot, "nvidia.gpu.alert.samples"), 3.0);
    assert_eq!(num(&hot, "nvidia.gpu.alert.threshold"), 85.0);
    let slow = run.wait_for("clocks_slowdown", "firing", 350.0);
    check_record(&slow, RuleId::ClocksSlowdown, "firing", &uuid(0));
    assert!(run.scen(&slow) >= 210.0 - run.slack());
    assert_eq!(
        slow.attr("nvidia.gpu.alert.clocks_event.reasons"),
        Some("[sw_thermal_slowdown]")
    );
    assert_eq!(num(&slow, "hw.temperature"), 88.0);
    let cool = run.wait_for("temperature_high", "resolved", 550.0);
    check_record(&cool, RuleId::TemperatureHigh, "resolved", &uuid(0));
    assert!(run.scen(&cool) >= 420.0 + two_ticks - run.slack());
    let fast = run.wait_for("clocks_slowdown", "resolved", 600.0);
    assert!(run.scen(&fast) >= 450.0 - run.slack());
    let rx = run.stop();
    let all: Vec<_> = rx
        .log_records()
        .into_iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .collect();
    assert_eq!(all.len(), 4, "{:?}", names(&all));
}

#[test]
fn clean_run_fires_nothing() {
    let scale = 120.0;
    let run = Run::start("rule-clean-run.json", scale, &[]);
    // Loading, then well past the longest rule (the 10-minute leak window).
    run.run_until(1200.0);
    assert!(
        run.rx.has_metric("hw.gpu.utilization"),
        "{}",
        run.agent.dump()
    );
    let rx = run.stop();
    let all: Vec<_> = rx
        .log_records()
        .into_iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .collect();
    assert!(all.is_empty(), "{:#?}", names(&all));
    // Nothing fired, so no alert series was sent (none at 0 for what never happened).
    assert!(
        !rx.has_metric("nvidia.gpu.alerts"),
        "{:#?}",
        rx.points("nvidia.gpu.alerts")
    );
}

/// The real H200 recording: nothing fires but the power cap it really had (SW power cap
/// on every row, ~691 W of 700 W).
#[test]
fn h200_recording_fires_only_the_power_cap() {
    let scale = 120.0;
    let run = Run::start("h200-under-load.json", scale, &[]);
    let cap = run.wait_for("clocks_power_capped", "firing", 100.0);
    let h200 = "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5";
    check_record(&cap, RuleId::ClocksPowerCapped, "firing", h200);
    assert_eq!(cap.attr("hw.model"), Some("NVIDIA H200"));
    let w = num(&cap, "hw.power");
    assert!((687.0..=696.0).contains(&w), "{w}");
    assert_eq!(num(&cap, "nvidia.gpu.power.limit"), 700.0);
    assert!(run.scen(&cap) >= 30.0 - run.slack());
    // Past the longest rule (the 10-minute leak window).
    run.run_until(720.0);
    let rx = run.stop();
    let all: Vec<_> = rx
        .log_records()
        .into_iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .collect();
    assert_eq!(
        names(&all),
        vec![(
            "nvidia.gpu.alert.clocks_power_capped".into(),
            "firing".into()
        )]
    );
}

/// XID 79 two seconds after the agent started (the real H200 recording with one event): no
/// XID or alert series before it (nothing at 0 for what has not happened), then both born at 1
/// with the agent's start as start time, in an export of the first seconds, and at 1 in every
/// export after; beside them `nvidia.gpu.xid.last_seen` at the XID's time. Then the same agent
/// again (the same pod, container and identity: a restarted sidecar) with its own XID 79: the
/// count is born at 1 again, exactly as in the first run (so behind the collector's Prometheus
/// exporter, which loses start times, Prometheus sees 1 then 1 and `increase()` reads 0), while
/// `last_seen` moves to the second XID's time. These are the shapes the promtool tests of
/// `GPUXidError` feed the shipped rule (tests/packaging/prometheus-rules-agent.test.yaml, "an
/// xid in the first export interval" and "an xid in each run of a restarted sidecar").
#[test]
fn xid_at_start_is_a_series_born_at_1_from_the_agents_start() {
    let mut v: serde_json::Value = common::read_json(common::scenario("h200-under-load.json"));
    v["events"] = serde_json::json!([{ "t": 2.0, "device": 0, "type": "xid", "data": 79 }]);
    let path = common::temp_path("xid-at-start.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let h200 = "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5";
    // One run: (the XID event's time, the count's shape, last_seen's values), export by export.
    let run = || {
        let rx = Receiver::start(Protocol::Grpc);
        let spawned = now_ns();
        let mut agent = Agent::builder()
            .otlp(&rx)
            .env_mock_path(&path)
            .env("NVML_MOCK_NO_LATENCY", "1")
            .env("GPU_SIDECAR_SAMPLE_INTERVAL", "500ms")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "1000")
            .env("K8S_POD_NAME", "trainer-0")
            .env("K8S_NAMESPACE_NAME", "ml")
            .env("K8S_CONTAINER_NAME", "trainer")
            .spawn();
        assert!(
            rx.wait_for_log_event("nvidia.gpu.xid", Duration::from_secs(20)),
            "{}",
            agent.dump()
        );
        let xid_time = rx.log_events("nvidia.gpu.xid")[0].time_unix_nano;
        // Two more exports after the one that carried it.
        let born_in = |r: &common::Received<_>| {
            !common::receiver::request_points(&r.request, "nvidia.gpu.xid.errors").is_empty()
        };
        assert!(rx.wait_until(Duration::from_secs(20), |r| {
            r.metrics_requests().iter().filter(|q| born_in(q)).count() >= 3
        }));
        agent.sigterm();
        assert!(agent
            .wait_exit(Duration::from_secs(15))
            .is_some_and(|s| s.success()));
        // Export by export (as Prometheus scrapes them): absent, ..., then 1, 1, ...
        let mut shape = Vec::new();
        let mut last_seen = Vec::new();
        for r in rx.metrics_requests() {
            let xid = common::receiver::request_points(&r.request, "nvidia.gpu.xid.errors");
            let seen = common::receiver::request_points(&r.request, "nvidia.gpu.xid.last_seen");
            let alert: Vec<_> = common::receiver::request_points(&r.request, "nvidia.gpu.alerts")
                .into_iter()
                .filter(|p| p.attr("nvidia.gpu.alert.rule") == Some("xid"))
                .collect();
            assert_eq!(xid.len(), seen.len(), "born together: {xid:#?} {seen:#?}");
            match xid.as_slice() {
                [] => {
                    assert!(
                        shape.iter().all(Option::is_none),
                        "the series went away: {shape:?}"
                    );
                    assert!(
                        alert.is_empty(),
                        "an alert series before the XID: {alert:#?}"
                    );
                    shape.push(None);
                }
                [p] => {
                    assert_eq!(p.attr("hw.id"), Some(h200));
                    assert_eq!(p.attr("nvidia.gpu.xid.code"), Some("79"));
                    assert_eq!(
                        p.kind,
                        Kind::Sum {
                            monotonic: true,
                            cumulative: true
                        }
                    );
                    // From the agent's start: before the XID and before the first export.
                    assert!(p.start_time_unix_nano >= spawned, "{p:?}");
                    assert!(p.start_time_unix_nano < xid_time, "{p:?}");
                    let [a] = alert.as_slice() else {
                        panic!("one xid alert series with the XID series: {alert:#?}")
                    };
                    assert_eq!(a.attr("nvidia.gpu.alert.state"), Some("firing"));
                    assert_eq!(
                        (a.value, a.start_time_unix_nano),
                        (1.0, p.start_time_unix_nano)
                    );
                    let s = &seen[0];
                    assert_eq!((s.kind, s.unit.as_str()), (Kind::Gauge, "s"), "{s:?}");
                    assert_eq!(s.attrs, p.attrs, "the same series' attributes");
                    last_seen.push(s.value);
                    shape.push(Some(p.value));
                }
                more => panic!("one XID series: {more:#?}"),
            }
        }
        let first = shape.iter().position(Option::is_some).unwrap();
        assert!(
            first >= 1,
            "the first export (at start) comes before the XID: {shape:?}"
        );
        assert!(
            shape[first..].iter().all(|v| *v == Some(1.0)),
            "born at 1 and staying there: {shape:?}"
        );
        let first_export = rx.metrics_requests()[0].at;
        let born = rx.metrics_requests().into_iter().find(born_in).unwrap().at;
        assert!(
            born.duration_since(first_export) < Duration::from_secs(5),
            "in an export of the first seconds: {:?}",
            born.duration_since(first_export)
        );
        (xid_time, shape, last_seen)
    };
    let (t1, shape1, seen1) = run();
    let (t2, shape2, seen2) = run();
    // The count: the same shape in both runs (what Prometheus cannot tell apart).
    assert_eq!(
        shape1.iter().flatten().collect::<Vec<_>>().first(),
        shape2.iter().flatten().collect::<Vec<_>>().first()
    );
    // last_seen: the XID's own time (the event's, to the microsecond), in every export of its
    // run, and another value in the second run.
    for (t, seen) in [(t1, &seen1), (t2, &seen2)] {
        let secs = t as f64 / 1e9;
        assert!(
            seen.iter().all(|v| (v - secs).abs() < 1e-3),
            "{seen:?} against the event's {secs}"
        );
    }
    assert!(seen2[0] > seen1[0] + 1.0, "{seen1:?} then {seen2:?}");
}

#[test]
fn lost_gpu_is_critical_with_its_last_readings() {
    // h200-mig-xid.json: from 8 s every call on GPU 0 answers GPU_IS_LOST.
    let scale = 4.0;
    let run = Run::start("h200-mig-xid.json", scale, &[]);
    let lost = run.wait_for("gpu_lost", "firing", 12.0);
    let h200 = "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5";
    check_record(&lost, RuleId::GpuLost, "firing", h200);
    assert!(run.scen(&lost) >= 8.0 - run.slack());
    assert_eq!(num(&lost, "nvidia.gpu.index"), 0.0);
    // The readings from before it was lost.
    assert_eq!(num(&lost, "nvidia.gpu.reading.hw.power"), 350.0);
    assert_eq!(num(&lost, "nvidia.gpu.reading.hw.temperature.gpu"), 45.0);
    let rx = run.stop();
    let all: Vec<_> = rx
        .log_records()
        .into_iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .collect();
    // One gpu_lost (on the GPU, not again for each MIG device), and one xid alert per code
    // the scenario injects before the loss (13 at 2 s, 48 at 4 s, 79 at 8 s).
    let mut seen = names(&all);
    seen.sort();
    let mut expected = vec![(
        "nvidia.gpu.alert.gpu_lost".to_string(),
        "firing".to_string(),
    )];
    expected.extend((0..3).map(|_| ("nvidia.gpu.alert.xid".to_string(), "firing".to_string())));
    assert_eq!(seen, expected, "{:?}", names(&all));
    let mut codes: Vec<f64> = all
        .iter()
        .filter(|r| r.event_name == "nvidia.gpu.alert.xid")
        .map(|r| num(r, "nvidia.gpu.xid.code"))
        .collect();
    codes.sort_by(f64::total_cmp);
    assert_eq!(codes, vec![13.0, 48.0, 79.0]);
}

#[test]
fn console_logs_exporter_prints_alerts_as_otlp_json() {
    let scale = 120.0;
    let mut agent = Agent::builder()
        .env_mock("h200-under-load.json")
        .env("NVML_MOCK_TIME_SCALE", scale.to_string())
        .env("NVML_MOCK_NO_LATENCY", "1")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("GPU_SIDECAR_RULE_CLOCKS_POWER_CAPPED_DURATION", "250ms")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_LOGS_EXPORTER", "console")
        .spawn();
    assert!(
        agent.wait_for_stdout(
            "nvidia.gpu.alert.clocks_power_capped",
            Duration::from_secs(20)
        ),
        "{}",
        agent.dump()
    );
    let line = agent
        .stdout_lines()
        .into_iter()
        .find(|l| l.contains("nvidia.gpu.alert.clocks_power_capped"))
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&line).unwrap();
    let record = &json["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
    assert_eq!(record["eventName"], "nvidia.gpu.alert.clocks_power_capped");
    assert_eq!(record["severityText"], "INFO");
    assert!(record["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|kv| kv["key"] == "nvidia.gpu.alert.state" && kv["value"]["stringValue"] == "firing"));
    agent.sigterm();
    assert!(agent
        .wait_exit(Duration::from_secs(15))
        .is_some_and(|s| s.success()));
}

#[test]
fn a_bad_rule_setting_stops_with_exit_2_naming_it() {
    let mut agent = Agent::builder()
        .env("GPU_SIDECAR_RULE_MEMORY_NEAR_FULL_THRESHOLD", "150")
        .spawn();
    let status = agent.wait_exit(Duration::from_secs(10)).expect("exits");
    assert_eq!(status.code(), Some(2));
    let err = agent.stderr_lines().join("\n");
    assert!(
        err.contains("invalid GPU_SIDECAR_RULE_MEMORY_NEAR_FULL_THRESHOLD=\"150\": expected a number above 0 up to 100 (percent of total GPU memory)"),
        "{err}"
    );
}

/// Alert records of `rx` by rule, state and GPU, in arrival order.
fn alert_list(rx: &Receiver) -> Vec<(String, String, String)> {
    rx.log_records()
        .into_iter()
        .filter(|r| r.event_name.starts_with("nvidia.gpu.alert."))
        .map(|r| {
            (
                r.attr("nvidia.gpu.alert.rule").unwrap_or("").to_string(),
                r.attr("nvidia.gpu.alert.state").unwrap_or("").to_string(),
                r.attr("hw.id").unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// `a` within 1e-9 of `b` (GPM values are the mock's time-weighted means: exact to an ulp).
fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

/// GPM read at every sample, as the rules need in compressed time.
const GPM_EVERY_SAMPLE: (&str, &str) = ("GPU_SIDECAR_GPM_INTERVAL", "100ms");

#[test]
fn fp32_job_fires_tensor_cores_idle_once_and_resolves_on_bf16() {
    let scale = 120.0;
    let run = Run::start("rule-tensor-cores.json", scale, &[GPM_EVERY_SAMPLE]);
    let fired = run.wait_for("tensor_cores_idle", "firing", 500.0);
    check_record(&fired, RuleId::TensorCoresIdle, "firing", &uuid(0));
    // fp32 from the start: 5 minutes of it are needed.
    let at = run.scen(&fired);
    assert!(at >= 300.0 - run.slack(), "fired at scenario {at:.0} s");
    // The scenario's fp32 phase: 98 % busy, tensor 0, SM 90 %, FP32 pipe 62 %, DRAM 20 %.
    assert_eq!(num(&fired, "hw.gpu.utilization"), 0.98);
    assert_eq!(num(&fired, "nvidia.gpu.tensor.activity"), 0.0);
    assert!(
        approx(num(&fired, "nvidia.gpu.sm.activity"), 0.9),
        "{:?}",
        fired.attrs
    );
    assert!(
        approx(num(&fired, "nvidia.gpu.pipe.activity.fp32"), 0.62),
        "{:?}",
        fired.attrs
    );
    assert!(
        approx(num(&fired, "nvidia.gpu.dram.activity"), 0.2),
        "{:?}",
        fired.attrs
    );
    assert_eq!(num(&fired, "nvidia.gpu.alert.threshold"), 10.0);
    assert!(
        fired
            .body
            .contains("the GPU is busy (98% of the time) but its tensor cores are not"),
        "{}",
        fired.body
    );
    assert_eq!(
        num(&fired, "nvidia.gpu.reading.nvidia.gpu.tensor.activity.hmma"),
        0.0
    );
    // bf16 from 600 s: resolved 5 minutes later.
    let resolved = run.wait_for("tensor_cores_idle", "resolved", 1100.0);
    check_record(&resolved, RuleId::TensorCoresIdle, "resolved", &uuid(0));
    let at = run.scen(&resolved);
    assert!(at >= 900.0 - run.slack(), "resolved at scenario {at:.0} s");
    assert!(approx(num(&resolved, "nvidia.gpu.tensor.activity"), 0.82));
    run.run_until(1200.0);
    let rx = run.stop();
    // Nothing for GPU 1 (bf16 throughout) or GPU 2 (no GPM), nothing else.
    assert_eq!(
        alert_list(&rx),
        vec![
            ("tensor_cores_idle".into(), "firing".into(), uuid(0)),
            ("tensor_cores_idle".into(), "resolved".into(), uuid(0)),
        ]
    );
    // The A100 exports no GPM metric at all: absent, not 0.
    let no_gpm: Vec<_> = rx
        .points("nvidia.gpu.tensor.activity")
        .into_iter()
        .filter(|p| p.attr("hw.id") == Some(uuid(2).as_str()))
        .collect();
    assert!(no_gpm.is_empty(), "{no_gpm:?}");
    assert!(rx
        .points("nvidia.gpu.tensor.activity")
        .iter()
        .any(|p| p.attr("hw.id") == Some(uuid(1).as_str()) && approx(p.value, 0.82)));
}

#[test]
fn copy_loop_fires_memory_bound_not_tensor_cores_idle() {
    let scale = 120.0;
    let run = Run::start("rule-memory-bound.json", scale, &[GPM_EVERY_SAMPLE]);
    let fired = run.wait_for("memory_bound", "firing", 500.0);
    check_record(&fired, RuleId::MemoryBound, "firing", &uuid(0));
    // The copy loop runs from 60 s: 5 minutes of it.
    let at = run.scen(&fired);
    assert!(at >= 360.0 - run.slack(), "fired at scenario {at:.0} s");
    assert!(approx(num(&fired, "nvidia.gpu.dram.activity"), 0.92));
    assert!(approx(num(&fired, "nvidia.gpu.sm.activity"), 0.22));
    assert_eq!(num(&fired, "nvidia.gpu.alert.threshold"), 80.0);
    assert!(
        fired.body.contains("the kernels wait on memory"),
        "{}",
        fired.body
    );
    let resolved = run.wait_for("memory_bound", "resolved", 1000.0);
    let at = run.scen(&resolved);
    assert!(at >= 900.0 - run.slack(), "resolved at scenario {at:.0} s");
    run.run_until(1000.0);
    let rx = run.stop();
    assert_eq!(
        alert_list(&rx),
        vec![
            ("memory_bound".into(), "firing".into(), uuid(0)),
            ("memory_bound".into(), "resolved".into(), uuid(0)),
        ]
    );
}

#[test]
fn preallocated_pool_is_one_info_event_and_growing_memory_still_near_full() {
    let scale = 60.0;
    let run = Run::start("rule-preallocating-job.json", scale, &[]);
    let pool = run.wait_for("memory_preallocated", "firing", 200.0);
    check_record(&pool, RuleId::MemoryPreallocated, "firing", &uuid(0));
    // The process appears at 10 s and takes 97 % at 12 s; flat for a minute.
    let at = run.scen(&pool);
    assert!(at >= 72.0 - run.slack(), "fired at scenario {at:.0} s");
    assert_eq!(num(&pool, "process.pid"), 7300.0);
    let ratio = num(&pool, "hw.gpu.memory.utilization");
    assert!((ratio - 0.97).abs() < 1e-6, "{ratio}");
    assert_eq!(num(&pool, "hw.gpu.memory.limit"), 80.0 * GIB);
    assert!(
        pool.body.contains("memory preallocated: 97.0%"),
        "{}",
        pool.body
    );
    let full = run.wait_for("memory_near_full", "firing", 500.0);
    check_record(&full, RuleId::MemoryNearFull, "firing", &uuid(1));
    let at = run.scen(&full);
    assert!(
        at >= 396.0 + 10.0 - run.slack(),
        "fired at scenario {at:.0} s"
    );
    let released = run.wait_for("memory_preallocated", "resolved", 700.0);
    assert!(run.scen(&released) >= 640.0 - run.slack());
    run.run_until(720.0);
    let rx = run.stop();
    // One info event for the pool (and its end when the process exits); memory_near_full
    // only for the GPU whose memory grew.
    assert_eq!(
        alert_list(&rx),
        vec![
            ("memory_preallocated".into(), "firing".into(), uuid(0)),
            ("memory_near_full".into(), "firing".into(), uuid(1)),
            ("memory_preallocated".into(), "resolved".into(), uuid(0)),
        ]
    );
}
