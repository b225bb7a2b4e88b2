//! The probes' checks, their bounds and the HTTP endpoints.
use super::*;
use crate::config::Config;
use crate::sampling::NvmlDown;

fn limits() -> Limits {
    Limits {
        max_sample_age: Duration::from_secs(2),
        watchdog: Duration::from_secs(10),
        export_success: Some(Duration::from_secs(40)),
        export_loop: Some(Duration::from_secs(45)),
    }
}

fn healthy() -> Inputs {
    Inputs {
        starting: None,
        nvml: NvmlStatus::Up { devices: 4 },
        sample_age: Some(Duration::from_millis(300)),
        ticks: 12,
        last_tick: Some(Duration::from_micros(1500)),
        lost_gpus: vec![],
        busy: None,
        events: waiting(Duration::from_millis(700)),
        uptime: Duration::from_secs(60),
        last_export_success: Some(Duration::from_secs(3)),
        last_export_attempt: Some(Duration::from_secs(3)),
        consecutive_export_failures: 0,
        export_failures: 2,
    }
}

/// The event watcher inside a 1 s `nvmlEventSetWait_v2` for `d`.
fn waiting(d: Duration) -> EventWatcherStatus {
    EventWatcherStatus {
        state: EventWatcherState::Running(Some(WatcherCall {
            call: "nvmlEventSetWait_v2",
            busy_for: d,
            allowed: Duration::from_secs(1),
        })),
        earlier_still_running: 0,
    }
}

fn failing(r: &Report) -> Vec<String> {
    r.body["checks"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, c)| c["ok"] == false)
        .map(|(k, _)| k.clone())
        .collect()
}

#[test]
fn healthy_agent_is_ready_and_alive() {
    let r = readiness(&healthy(), &limits());
    assert!(r.ok, "{}", r.body);
    assert_eq!(r.body["status"], "ready");
    assert_eq!(r.body["checks"]["nvml"]["gpus"], 4);
    assert_eq!(r.body["checks"]["sample"]["last_tick_duration_ms"], 1.5);
    assert_eq!(r.body["checks"]["export"]["failures"], 2);
    let l = liveness(&healthy(), &limits());
    assert!(l.ok);
    assert_eq!(l.body["status"], "alive");
}

#[test]
fn nvml_down_says_why() {
    let mut i = healthy();
    i.nvml = NvmlStatus::Down(NvmlDown::Unknown);
    i.sample_age = None;
    let r = readiness(&i, &limits());
    assert!(!r.ok);
    assert_eq!(failing(&r), vec!["nvml", "sample"]);
    assert!(r.body["checks"]["nvml"]["detail"]
        .as_str()
        .unwrap()
        .contains("daemon-reload"));
    assert!(
        liveness(&i, &limits()).ok,
        "NVML down is not a reason to restart"
    );
}

#[test]
fn stale_sample_and_stuck_sampler() {
    let mut i = healthy();
    i.sample_age = Some(Duration::from_millis(2100));
    i.busy = Some((Activity::Tick, Duration::from_millis(10_100)));
    let r = readiness(&i, &limits());
    assert_eq!(failing(&r), vec!["sample", "watchdog"]);
    assert_eq!(r.body["checks"]["watchdog"]["busy"], "sampling tick");
    let l = liveness(&i, &limits());
    assert_eq!(failing(&l), vec!["watchdog"]);
    // At the bound exactly, still fine.
    i.sample_age = Some(Duration::from_secs(2));
    i.busy = Some((Activity::Tick, Duration::from_secs(10)));
    assert!(readiness(&i, &limits()).ok);
}

#[test]
fn export_bound_counts_from_start_until_a_first_success() {
    let mut i = healthy();
    i.last_export_success = None;
    i.uptime = Duration::from_secs(39);
    assert!(readiness(&i, &limits()).ok);
    i.uptime = Duration::from_secs(41);
    let r = readiness(&i, &limits());
    assert_eq!(failing(&r), vec!["export"]);
    let mut i = healthy();
    i.last_export_success = Some(Duration::from_secs(41));
    i.consecutive_export_failures = 9;
    let r = readiness(&i, &limits());
    assert!(r.body["checks"]["export"]["detail"]
        .as_str()
        .unwrap()
        .contains("9 failed in a row"));
    // Not exporting over OTLP: no export condition.
    let l = Limits {
        export_success: None,
        ..limits()
    };
    assert!(readiness(&i, &l).ok);
}

#[test]
fn lost_gpu_is_listed_but_ready() {
    let mut i = healthy();
    i.lost_gpus = vec!["GPU-1".into()];
    let r = readiness(&i, &limits());
    assert!(r.ok);
    assert_eq!(r.body["checks"]["sample"]["lost_gpus"][0], "GPU-1");
}

#[test]
fn export_loop_stall_is_not_alive() {
    let mut i = healthy();
    i.last_export_attempt = Some(Duration::from_secs(46));
    assert_eq!(failing(&liveness(&i, &limits())), vec!["export_loop"]);
}

#[test]
fn a_stuck_event_watcher_is_not_ready_but_alive() {
    let mut i = healthy();
    // Its own 1 s timeout plus the 10 s bound: fine at 11 s, stuck after.
    i.events = waiting(Duration::from_secs(11));
    assert!(readiness(&i, &limits()).ok);
    i.events = waiting(Duration::from_millis(11_100));
    let r = readiness(&i, &limits());
    assert_eq!(failing(&r), vec!["events"]);
    let c = &r.body["checks"]["events"];
    assert_eq!(c["busy"], "nvmlEventSetWait_v2");
    assert_eq!(c["timeout_s"], 1.0);
    assert!(c["detail"]
        .as_str()
        .unwrap()
        .contains("a driver call does not return"));
    assert!(
        liveness(&i, &limits()).ok,
        "sampling and export go on; a restart cannot free a driver call"
    );
    // Left behind by a re-initialization: the new session's watcher decides.
    i.events = EventWatcherStatus {
        earlier_still_running: 1,
        ..waiting(Duration::from_millis(10))
    };
    let r = readiness(&i, &limits());
    assert!(r.ok, "{}", r.body);
    assert_eq!(r.body["checks"]["events"]["earlier_still_running"], 1);
    // Too many left behind: no watcher started, said.
    i.events = EventWatcherStatus {
        state: EventWatcherState::Refused,
        earlier_still_running: 2,
    };
    assert_eq!(failing(&readiness(&i, &limits())), vec!["events"]);
}

#[test]
fn waiting_for_the_kubelet_is_alive_not_ready() {
    // Before NVML and the exports have started.
    let i = Inputs {
        starting: Some("waiting for the kubelet's pod-resources answer".into()),
        nvml: NvmlStatus::Down(NvmlDown::Starting),
        sample_age: None,
        ticks: 0,
        last_tick: None,
        busy: None,
        events: EventWatcherStatus {
            state: EventWatcherState::NotRunning,
            earlier_still_running: 0,
        },
        uptime: Duration::ZERO,
        last_export_success: None,
        last_export_attempt: None,
        consecutive_export_failures: 0,
        export_failures: 0,
        ..healthy()
    };
    let r = readiness(&i, &limits());
    assert_eq!(failing(&r), vec!["nvml", "sample", "startup"]);
    assert!(r.body["checks"]["startup"]["detail"]
        .as_str()
        .unwrap()
        .contains("pod-resources"));
    let l = liveness(&i, &limits());
    assert!(l.ok, "{}", l.body);
}

#[test]
fn the_watchdog_looks_at_most_once_per_sample_interval_by_default() {
    // Default bound: three sample intervals (at least 10 s).
    for interval_s in [1u64, 5, 10] {
        let bound = Duration::from_secs((interval_s * 3).max(10));
        assert!(watchdog_period(bound) >= Duration::from_secs(interval_s));
    }
    assert_eq!(
        watchdog_period(Duration::from_secs(2)),
        Duration::from_nanos(666_666_666)
    );
}

#[test]
fn probe_target_uses_loopback_for_any() {
    assert_eq!(
        probe_target("0.0.0.0:13134".parse().unwrap()),
        "127.0.0.1:13134".parse().unwrap()
    );
    assert_eq!(
        probe_target("[::]:9".parse().unwrap()),
        "[::1]:9".parse().unwrap()
    );
    assert_eq!(
        probe_target("10.0.0.7:9".parse().unwrap()),
        "10.0.0.7:9".parse().unwrap()
    );
}

#[test]
fn limits_follow_the_settings() {
    let c = Config::from_vars([
        (
            "OTEL_METRIC_EXPORT_INTERVAL".to_string(),
            "1000".to_string(),
        ),
        ("OTEL_EXPORTER_OTLP_TIMEOUT".to_string(), "2000".to_string()),
        (
            "GPU_SIDECAR_SAMPLE_INTERVAL".to_string(),
            "250ms".to_string(),
        ),
    ])
    .unwrap();
    let l = Limits::new(&Timing::from_config(&c));
    assert_eq!(l.max_sample_age, Duration::from_secs(1));
    assert_eq!(l.watchdog, Duration::from_secs(10));
    assert_eq!(l.export_success, Some(Duration::from_secs(5)));
    assert_eq!(l.export_loop, Some(Duration::from_secs(11)));
}
