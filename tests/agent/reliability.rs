//! Reliability: every known failure survived and visible. The agent binary runs with the
//! mock NVML (faults injected through scenario files) and exports to the in-process OTLP
//! receiver (faults injected through its modes, stop and restart). For each fault: the
//! expected log line, readiness (`/readyz`), recovery, and the values that arrive after it.
//!
//! The soak (`soak_flapping_collector_memory_stays_flat`) prints the agent's RSS after
//! warm-up and at the end (`cargo test --test agent reliability::soak -- --nocapture`).

use crate::common;
use crate::support::{count_lines, health, scenario_json, scenario_with, stop_ok, wait_ready};

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Agent, AgentBuilder, Mode, Point, Protocol, Receiver};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------------------------
// helpers

/// `<scratch>/<name>`: [`common::temp_path`] (removed when the test process exits).
fn temp_path(name: &str) -> PathBuf {
    common::temp_path(name)
}

fn has(p: &Point, attrs: &[(&str, &str)]) -> bool {
    attrs.iter().all(|(k, v)| p.attr(k) == Some(*v))
}

/// The value of the one point of `points` with `attrs`, if any.
fn value(points: &[Point], attrs: &[(&str, &str)]) -> Option<f64> {
    let hits: Vec<_> = points.iter().filter(|p| has(p, attrs)).collect();
    assert!(hits.len() <= 1, "several points with {attrs:?}: {hits:#?}");
    hits.first().map(|p| p.value)
}

fn uuid(i: usize) -> String {
    format!("GPU-00000000-0000-4000-8000-00000000000{i}")
}

/// The common settings of the agents here: fast sampling (the energy counter too, so it
/// moves within a test) and exports, short OTLP timeout.
fn fast(rx: &Receiver) -> AgentBuilder {
    Agent::builder()
        .otlp(rx)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("GPU_SIDECAR_ENERGY_INTERVAL", "100ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "700")
}

/// `gpu_sidecar.nvml.errors` for one call and code in the latest export that has it.
fn nvml_errors(rx: &Receiver, call: &str, code: &str) -> Option<f64> {
    value(
        &rx.last_points("gpu_sidecar.nvml.errors"),
        &[("nvidia.nvml.call", call), ("error.type", code)],
    )
}

// ---------------------------------------------------------------------------------------------
// NVML lifecycle

/// Without `libnvidia-ml.so.1` inside a Kubernetes pod whose NVIDIA Container Toolkit
/// variables are already set (the Helm chart sets both; the image sets
/// `NVIDIA_DRIVER_CAPABILITIES=utility`), asking for `utility` helps nobody: the line and
/// `/readyz` name the causes that remain there (the node's toolkit ignoring the variable in
/// unprivileged containers, the runtime class, CDI) and the chart's README; without
/// `NVIDIA_VISIBLE_DEVICES` they say that is missing instead.
#[test]
fn nvml_missing_in_a_pod_names_what_remains() {
    let pod = |visible: Option<&str>| {
        let b = Agent::builder()
            .env("GPU_SIDECAR_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
            .env("OTEL_METRICS_EXPORTER", "none")
            .env("OTEL_LOGS_EXPORTER", "none")
            .env("KUBERNETES_SERVICE_HOST", "10.96.0.1")
            .env("K8S_POD_NAME", "resnet-train-0")
            .env("K8S_NAMESPACE_NAME", "ml")
            .env("NVIDIA_DRIVER_CAPABILITIES", "utility");
        match visible {
            Some(v) => b.env("NVIDIA_VISIBLE_DEVICES", v),
            None => b,
        }
        .spawn()
    };
    let line_of = |agent: &Agent| {
        assert!(
            agent.wait_for_stderr("NVML library not found", WAIT),
            "{}",
            agent.dump()
        );
        agent
            .stderr_lines()
            .into_iter()
            .find(|l| l.contains("NVML library not found"))
            .unwrap()
    };
    let mut both = pod(Some("all"));
    let line = line_of(&both);
    for words in [
        "NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility are set",
        "accept-nvidia-visible-devices-envvar-when-unprivileged",
        "runtimeClassName",
        "CDI",
        "README",
    ] {
        assert!(line.contains(words), "{words:?} not in {line}");
    }
    assert!(
        !line.contains(
            "run with the NVIDIA Container Toolkit and NVIDIA_DRIVER_CAPABILITIES=utility"
        ),
        "{line}"
    );
    let body = wait_ready(&both, 503, WAIT);
    let detail = body["checks"]["nvml"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("accept-nvidia-visible-devices-envvar-when-unprivileged"),
        "{body:#}"
    );
    let mut none = pod(None);
    let line = line_of(&none);
    assert!(line.contains("NVIDIA_VISIBLE_DEVICES is not set"), "{line}");
    for agent in [&mut both, &mut none] {
        agent.sigterm();
        assert!(agent.wait_exit(WAIT).unwrap().success(), "{}", agent.dump());
    }
}

/// Each init failure: one line naming the cause and the usual fix (once, though init is
/// retried), `/readyz` 503 saying the same, retries with backoff counted in
/// `gpu_sidecar.nvml.errors{nvidia.nvml.call=nvmlInit_v2}`, and the agent keeps running.
#[test]
fn nvml_init_errors_are_explained_retried_and_not_ready() {
    // (code, NVML name, words of the usual fix)
    let cases: &[(Option<u32>, &str, &str)] = &[
        (Some(4), "NVML_ERROR_NO_PERMISSION", "/dev/nvidia"),
        (Some(9), "NVML_ERROR_DRIVER_NOT_LOADED", "kernel module"),
        (Some(15), "NVML_ERROR_GPU_IS_LOST", "Xid 79"),
        (Some(16), "NVML_ERROR_RESET_REQUIRED", "nvidia-smi -r"),
        (
            Some(18),
            "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
            "reboot the node",
        ),
        (Some(999), "NVML_ERROR_UNKNOWN", "daemon-reload"),
        (None, "NVML library not found", "NVIDIA Container Toolkit"),
    ];
    let runs: Vec<_> = cases
        .iter()
        .map(|&(code, name, fix)| {
            let rx = Receiver::start(Protocol::Grpc);
            let b = Agent::builder()
                .otlp(&rx)
                .env("OTEL_METRIC_EXPORT_INTERVAL", "300");
            let b = match code {
                Some(code) => b.env_mock_path(scenario_json(
                    &format!("init-error-{code}"),
                    json!({ "init_error": code, "devices": [] }),
                )),
                None => b.env("GPU_SIDECAR_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1"),
            };
            (code, name, fix, rx, b.spawn())
        })
        .collect();
    for (code, name, fix, rx, mut agent) in runs {
        assert!(
            agent.wait_for_stderr(name, WAIT),
            "{name}\n{}",
            agent.dump()
        );
        let line = agent
            .stderr_lines()
            .into_iter()
            .find(|l| l.contains(name))
            .unwrap();
        assert!(line.contains(fix), "the fix is named: {line}");
        assert!(
            line.contains("ERROR") && line.contains("retrying"),
            "{line}"
        );
        let body = wait_ready(&agent, 503, WAIT);
        assert_eq!(body["checks"]["nvml"]["ok"], false, "{body:#}");
        assert!(
            body["checks"]["nvml"]["detail"]
                .as_str()
                .unwrap()
                .contains(name),
            "{body:#}"
        );
        // Retried (init at 0, 1, 3 s, ...): the count grows, the line is said once.
        let code_name = match code {
            Some(_) => name,
            None => "NVML_ERROR_LIBRARY_NOT_FOUND",
        };
        assert!(
            rx.wait_until(WAIT, |r| nvml_errors(r, "nvmlInit_v2", code_name)
                .is_some_and(|n| n >= 3.0)),
            "{code_name}: {:#?}\n{}",
            rx.last_points("gpu_sidecar.nvml.errors"),
            agent.dump()
        );
        assert_eq!(count_lines(&agent, name), 1, "{}", agent.dump());
        assert!(
            !rx.has_metric("hw.power"),
            "nothing exported as if a GPU were there"
        );
        assert!(agent.is_running());
        stop_ok(&mut agent);
    }
}

/// NVML answers DRIVER_NOT_LOADED for its first 2.5 s: the agent says so, is not ready,
/// retries (1 s, then 2 s later), and recovers by itself: ready, and the values flow.
#[test]
fn nvml_comes_back_by_itself() {
    let path = scenario_with("four-gpu.json", "init-window", |v| {
        v["faults"] = json!([{ "call": "nvmlInit*", "to_s": 2.5, "code": 9 }]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = fast(&rx).env_mock_path(&path).spawn();
    assert!(
        agent.wait_for_stderr("NVML_ERROR_DRIVER_NOT_LOADED", WAIT),
        "{}",
        agent.dump()
    );
    let body = wait_ready(&agent, 503, WAIT);
    assert_eq!(body["checks"]["nvml"]["ok"], false);
    assert!(
        agent.wait_for_stderr("NVML is back", WAIT),
        "{}",
        agent.dump()
    );
    let body = wait_ready(&agent, 200, WAIT);
    assert_eq!(body["checks"]["nvml"]["gpus"], 4, "{body:#}");
    assert!(rx.wait_for_metric("hw.gpu.utilization", WAIT));
    let util = rx.last_points("hw.gpu.utilization");
    for i in 0..4 {
        assert_eq!(
            value(&util, &[("hw.id", &uuid(i)), ("hw.gpu.task", "general")]),
            Some(f64::from(10 * (i as u32 + 1)) / 100.0),
            "GPU {i} after recovery"
        );
    }
    // Retried every sample interval (100 ms) for 2.5 s, each failure counted, said once.
    let failed = nvml_errors(&rx, "nvmlInit_v2", "NVML_ERROR_DRIVER_NOT_LOADED").unwrap();
    assert!((10.0..=26.0).contains(&failed), "{failed} failed inits");
    assert_eq!(count_lines(&agent, "NVML_ERROR_DRIVER_NOT_LOADED"), 1);
    stop_ok(&mut agent);
}

/// A driver reload: from t = 1 s to 19 s every NVML call fails, init included (18 s). The
/// agent notices (one line), is not ready, retries init at most one sample interval (1 s)
/// apart, and is ready again within two sample intervals of NVML answering (before, the
/// backoff had doubled to 16 s by then: ready ~15 s late). The failure and the recovery are
/// each said once.
#[test]
fn nvml_back_after_18_s_is_followed_within_two_sample_intervals() {
    let path = scenario_with("four-gpu.json", "driver-reload", |v| {
        v["faults"] = json!([
            { "call": "*", "from_s": 1.0, "to_s": 19.0, "code": 9 },
            { "call": "nvmlInit*", "from_s": 1.0, "to_s": 19.0, "code": 9 },
        ]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    let spawned = Instant::now();
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "1s")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "1000")
        .env_mock_path(&path)
        .spawn();
    // The mock's clock starts at the first init, which comes just before this line.
    assert!(
        agent.wait_for_stderr("sampling started", WAIT),
        "{}",
        agent.dump()
    );
    let first_init = Instant::now();
    assert!(
        agent.wait_for_stderr("NVML_ERROR_DRIVER_NOT_LOADED", WAIT),
        "{}",
        agent.dump()
    );
    let body = wait_ready(&agent, 503, WAIT);
    assert_eq!(body["checks"]["nvml"]["ok"], false, "{body:#}");
    // NVML answers again 19 s after the mock's first init.
    wait_ready(&agent, 200, Duration::from_secs(40));
    let back = first_init.elapsed();
    println!("ready again {back:?} after the first init (NVML answers from 19 s)");
    assert!(
        spawned.elapsed() >= Duration::from_secs(19),
        "ready at {back:?}\n{}",
        agent.dump()
    );
    // Two sample intervals, and half a second for the test's own polling and reading.
    assert!(
        back <= Duration::from_millis(19_000 + 2_000 + 500),
        "ready {back:?} after the first init: more than two sample intervals after NVML answered\n{}",
        agent.dump()
    );
    assert_eq!(
        count_lines(&agent, "NVML_ERROR_DRIVER_NOT_LOADED"),
        1,
        "{}",
        agent.dump()
    );
    assert_eq!(count_lines(&agent, "NVML is back"), 1, "{}", agent.dump());
    assert_eq!(
        count_lines(&agent, "NVML answers again"),
        1,
        "{}",
        agent.dump()
    );
    assert!(rx.wait_until(WAIT, |r| value(
        &r.last_points("hw.power"),
        &[("hw.id", &uuid(3))]
    ) == Some(400.0)));
    stop_ok(&mut agent);
}

/// GPU 1 of four falls off the bus at t = 2 s: it is reported `hw.status{hw.state=failed}`
/// with no other value, the other three go on with their values, the agent stays ready and
/// lists the lost GPU, one line says so, and the errors are counted.
#[test]
fn nvml_failing_on_every_call_mid_run_is_reinitialized_and_recovers() {
    // From 1.5 s to 4 s every call (but init) answers UNKNOWN, as after a device cgroup loss.
    let path = scenario_with("four-gpu.json", "all-unknown", |v| {
        v["faults"] = json!([{ "call": "*", "from_s": 1.5, "to_s": 4.0, "code": 999 }]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = fast(&rx).env_mock_path(&path).spawn();
    assert!(
        agent.wait_for_stderr("re-initializing NVML", WAIT),
        "{}",
        agent.dump()
    );
    // Not ready, and no GPU reported `ok` with nothing behind it.
    let body = wait_ready(&agent, 503, WAIT);
    assert_eq!(body["checks"]["nvml"]["ok"], false, "{body:#}");
    let n = rx.metrics_requests().len();
    // Back by itself once NVML answers: ready, and the scenario's values again.
    wait_ready(&agent, 200, Duration::from_secs(20));
    assert!(rx.wait_until(WAIT, |r| r.metrics_requests().len() > n + 1));
    let power = rx.last_points("hw.power");
    assert_eq!(
        value(&power, &[("hw.id", &uuid(3))]),
        Some(400.0),
        "{power:#?}"
    );
    let ok_without_readings = rx.metrics_requests()[..].iter().any(|r| {
        let status = common::receiver::request_points(&r.request, "hw.status");
        let power = common::receiver::request_points(&r.request, "hw.power");
        status
            .iter()
            .any(|p| p.attr("hw.state") == Some("ok") && p.value == 1.0)
            && power.is_empty()
    });
    assert!(
        !ok_without_readings,
        "a GPU was reported ok in an export without any reading"
    );
    stop_ok(&mut agent);
}

#[test]
fn gpu_lost_mid_run_is_failed_while_the_others_go_on() {
    let path = scenario_with("four-gpu.json", "gpu1-lost", |v| {
        v["faults"] = json!([{ "call": "*", "device": 1, "from_s": 2.0, "code": 15 }]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = fast(&rx).env_mock_path(&path).spawn();
    let lost = uuid(1);
    let failed = |r: &Receiver| {
        value(
            &r.last_points("hw.status"),
            &[("hw.id", &lost), ("hw.state", "failed")],
        ) == Some(1.0)
    };
    assert!(rx.wait_until(WAIT, failed), "{}", agent.dump());
    // Before the loss GPU 1 was ok and had values.
    let before: Vec<_> = rx
        .points("hw.power")
        .into_iter()
        .filter(|p| p.attr("hw.id") == Some(lost.as_str()))
        .collect();
    assert!(before.iter().all(|p| p.value == 200.0) && !before.is_empty());
    // One more export after the loss, then look at it whole.
    let n = rx.metrics_requests().len();
    assert!(rx.wait_until(WAIT, |r| r.metrics_requests().len() >= n + 2));
    let status = rx.last_points("hw.status");
    let util = rx.last_points("hw.gpu.utilization");
    let power = rx.last_points("hw.power");
    let memory = rx.last_points("hw.gpu.memory.usage");
    for i in 0..4 {
        let id = uuid(i);
        let state = |s| value(&status, &[("hw.id", &id), ("hw.state", s)]);
        let util_i = value(&util, &[("hw.id", &id), ("hw.gpu.task", "general")]);
        if i == 1 {
            assert_eq!((state("failed"), state("ok")), (Some(1.0), Some(0.0)));
            assert_eq!(util_i, None, "a lost GPU has no utilization, not 0");
            assert!(power.iter().all(|p| p.attr("hw.id") != Some(id.as_str())));
            assert!(memory.iter().all(|p| p.attr("hw.id") != Some(id.as_str())));
        } else {
            assert_eq!(
                (state("failed"), state("ok")),
                (Some(0.0), Some(1.0)),
                "GPU {i}"
            );
            assert_eq!(
                util_i,
                Some(f64::from(10 * (i as u32 + 1)) / 100.0),
                "GPU {i}"
            );
        }
    }
    assert_eq!(value(&power, &[("hw.id", &uuid(0))]), Some(100.0));
    assert_eq!(value(&power, &[("hw.id", &uuid(3))]), Some(400.0));
    let body = wait_ready(&agent, 200, WAIT);
    assert_eq!(
        body["checks"]["sample"]["lost_gpus"],
        json!([lost]),
        "{body:#}"
    );
    assert_eq!(count_lines(&agent, "GPU is lost"), 1, "{}", agent.dump());
    assert!(
        nvml_errors(&rx, "nvmlDeviceGetMemoryInfo_v2", "NVML_ERROR_GPU_IS_LOST")
            .is_some_and(|n| n >= 1.0),
        "{:#?}",
        rx.last_points("gpu_sidecar.nvml.errors")
    );
    stop_ok(&mut agent);
}

/// A driver call blocks for 30 s (`block_s`). The watchdog logs it once and `/readyz` and
/// `/healthz` turn 503 naming the stuck step; exports go on without GPU values (no stale
/// values as if fresh); when the call returns, the agent is ready again and values flow.
/// A second agent gets SIGTERM while wedged and still exits 0 within the shutdown bound.
#[test]
fn wedged_driver_call_is_caught_by_the_watchdog() {
    let path = scenario_with("h200-under-load.json", "wedge", |v| {
        v["faults"] = json!([{
            "call": "nvmlDeviceGetPowerUsage", "from_s": 2.0, "to_s": 2.6, "block_s": 30.0
        }]);
    });
    let rx = Receiver::start(Protocol::Grpc);
    let settings = |b: AgentBuilder| {
        b.env_mock_path(&path)
            .env("NVML_MOCK_NO_LATENCY", "1")
            .env("GPU_SIDECAR_WATCHDOG_TIMEOUT", "2s")
            .env("GPU_SIDECAR_SHUTDOWN_TIMEOUT", "2s")
    };
    let mut agent = settings(fast(&rx)).spawn();
    let rx2 = Receiver::start(Protocol::Grpc);
    let mut second = settings(fast(&rx2)).spawn();

    assert!(
        agent.wait_for_stderr("the NVML sampler has been inside sampling tick", WAIT),
        "{}",
        agent.dump()
    );
    let wedged_at = Instant::now();
    let (status, body) = health(&agent, "/readyz");
    assert_eq!(status, 503, "{body:#}");
    assert_eq!(body["checks"]["watchdog"]["ok"], false);
    assert_eq!(body["checks"]["watchdog"]["busy"], "sampling tick");
    assert_eq!(
        body["checks"]["sample"]["ok"], false,
        "the last sample is stale"
    );
    let (status, body) = health(&agent, "/healthz");
    assert_eq!(
        (status, body["status"].as_str()),
        (503, Some("stuck")),
        "{body:#}"
    );

    // Exports go on (self-metrics), with no GPU values while the sample is stale.
    let n = rx.metrics_requests().len();
    assert!(rx.wait_until(WAIT, |r| r.metrics_requests().len() >= n + 3));
    let recent = &rx.metrics_requests()[n..];
    for r in recent {
        let names: BTreeSet<_> = r
            .request
            .resource_metrics
            .iter()
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
            .map(|m| m.name.as_str())
            .collect();
        assert!(
            names.contains("gpu_sidecar.export.last_success"),
            "{names:?}"
        );
        assert!(
            !names.contains("hw.power"),
            "stale values exported: {names:?}"
        );
    }

    // SIGTERM while wedged: exits 0 within the 2 s bound (the stuck thread is left behind).
    assert!(second.wait_for_stderr("has been inside sampling tick", WAIT));
    let t = Instant::now();
    second.sigterm();
    let status = second.wait_exit(WAIT).expect("exits");
    assert_eq!(status.code(), Some(0), "{}", second.dump());
    assert!(
        t.elapsed() < Duration::from_millis(3500),
        "{:?}",
        t.elapsed()
    );
    assert!(second.dump().contains("did not finish its final sample"));

    // The call returns after 30 s: ready again, values flow.
    assert!(
        agent.wait_for_stderr("turning again", Duration::from_secs(45)),
        "{}",
        agent.dump()
    );
    assert!(
        wedged_at.elapsed() > Duration::from_secs(20),
        "it was wedged for ~30 s"
    );
    wait_ready(&agent, 200, WAIT);
    let n = rx.points("hw.power").len();
    assert!(rx.wait_until(WAIT, |r| r.points("hw.power").len() > n));
    for p in &rx.points("hw.power")[n..] {
        assert!(
            (680.0..=700.0).contains(&p.value),
            "a recorded value: {}",
            p.value
        );
    }
    assert_eq!(
        count_lines(&agent, "has been inside sampling tick"),
        1,
        "logged once"
    );
    stop_ok(&mut agent);
}

// ---------------------------------------------------------------------------------------------
// Collector faults

/// hw.energy of each GPU: one start time for the whole run, values never going back, and
/// the last one above the first.
fn assert_energy_continuous(rx: &Receiver, gpus: usize) {
    let points = rx.points("hw.energy");
    for i in 0..gpus {
        let mut mine: Vec<_> = points
            .iter()
            .filter(|p| p.attr("hw.id") == Some(uuid(i).as_str()))
            .collect();
        mine.sort_by_key(|p| p.time_unix_nano);
        let starts: BTreeSet<_> = mine.iter().map(|p| p.start_time_unix_nano).collect();
        assert_eq!(starts.len(), 1, "GPU {i}: start time changed: {starts:?}");
        for w in mine.windows(2) {
            assert!(w[1].value >= w[0].value, "GPU {i}: energy went back {w:#?}");
        }
        assert!(
            mine.last().unwrap().value > mine[0].value,
            "GPU {i}: energy grows"
        );
    }
}

/// Waits until the receiver saw `n` requests answered by a mode for which `pick` holds.
fn wait_attempts(rx: &Receiver, n: usize, pick: impl Fn(&Mode) -> bool) -> bool {
    rx.wait_until(WAIT, |r| {
        r.attempts().iter().filter(|a| pick(&a.mode)).count() >= n
    })
}

/// Waits for a newly stored metrics request carrying hw.energy.
fn wait_new_data(rx: &Receiver, agent: &Agent) {
    let n = rx.metrics_requests().len();
    assert!(
        rx.wait_until(WAIT, |r| r.metrics_requests().len() > n
            && r.has_metric("hw.energy")),
        "no data after the fault\n{}",
        agent.dump()
    );
}

/// Collector down at start, then refusing with UNAVAILABLE and RESOURCE_EXHAUSTED (with
/// retry info), too slow, and killed and restarted: the agent never crashes, is not ready
/// while nothing gets through, logs one failure line and one recovery line for the lot
/// (rate-bounded), resumes, and the cumulative counters are continuous.
fn collector_faults(protocol: Protocol) {
    let rx = Receiver::start(protocol);
    rx.stop();
    let mut agent = fast(&rx).env_mock("four-gpu.json").spawn();

    // Down at start.
    assert!(
        agent.wait_for_stderr("metrics export failed", WAIT),
        "{}",
        agent.dump()
    );
    let body = wait_ready(&agent, 503, WAIT);
    assert_eq!(body["checks"]["export"]["ok"], false, "{body:#}");
    assert_eq!(body["checks"]["nvml"]["ok"], true);
    rx.restart();
    wait_new_data(&rx, &agent);
    wait_ready(&agent, 200, WAIT);

    let retry = Some(Duration::from_millis(300));
    for mode in [
        Mode::Unavailable { retry_after: retry },
        Mode::ResourceExhausted { retry_after: retry },
        Mode::Delay(Duration::from_secs(2)),
    ] {
        let seen = rx.attempts().iter().filter(|a| a.mode == mode).count();
        rx.set_mode(mode.clone());
        assert!(
            wait_attempts(&rx, seen + 2, |m| *m == mode),
            "{mode:?} not hit\n{}",
            agent.dump()
        );
        rx.set_mode(Mode::Accept);
        wait_new_data(&rx, &agent);
    }
    // Killed for 2 s, restarted.
    rx.stop();
    std::thread::sleep(Duration::from_secs(2));
    assert!(agent.is_running());
    rx.restart();
    wait_new_data(&rx, &agent);
    wait_ready(&agent, 200, WAIT);

    assert!(agent.is_running(), "never crashed");
    assert_eq!(
        count_lines(&agent, "metrics export failed"),
        1,
        "{}",
        agent.dump()
    );
    assert_eq!(
        count_lines(&agent, "metrics export works again"),
        1,
        "{}",
        agent.dump()
    );
    assert_energy_continuous(&rx, 4);
    // Self-metrics tell the story.
    let failures = value(&rx.last_points("gpu_sidecar.export.failures"), &[]).unwrap();
    assert!(failures >= 4.0, "failed exports counted: {failures}");
    let last = value(&rx.last_points("gpu_sidecar.export.last_success"), &[]).unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - 10.0..=now).contains(&last),
        "last success {last}, now {now}"
    );
    stop_ok(&mut agent);
}

#[test]
fn collector_faults_over_grpc() {
    collector_faults(Protocol::Grpc);
}

#[test]
fn collector_faults_over_http() {
    collector_faults(Protocol::Http);
}

/// SIGTERM while the collector hangs (answers nothing for 60 s) and while it is down: exit
/// 0 within `GPU_SIDECAR_SHUTDOWN_TIMEOUT` (default 5 s, and 1 s), NVML shut down
/// (`nvmlShutdown` in the mock's call log).
#[test]
fn shutdown_during_an_outage_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let hanging = Receiver::start(Protocol::Grpc);
    hanging.set_mode(Mode::Delay(Duration::from_secs(60)));
    let down = Receiver::start(Protocol::Http);
    down.stop();
    let runs = [
        (&hanging, None, Duration::from_secs(5)),
        (&down, Some("1s"), Duration::from_secs(1)),
    ];
    let mut agents: Vec<_> = runs
        .iter()
        .enumerate()
        .map(|(i, (rx, timeout, _))| {
            let mut b = Agent::builder()
                .otlp(rx)
                .env_mock("four-gpu.json")
                .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
                .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
                .env("NVML_MOCK_CALL_LOG", dir.join(format!("calls-{i}.json")));
            if let Some(t) = timeout {
                b = b.env("GPU_SIDECAR_SHUTDOWN_TIMEOUT", t);
            }
            b.spawn()
        })
        .collect();
    assert!(hanging.wait_until(WAIT, |r| !r.attempts().is_empty()));
    assert!(agents[1].wait_for_stderr("metrics export failed", WAIT));
    for (i, ((_, _, bound), agent)) in runs.iter().zip(agents.iter_mut()).enumerate() {
        let t = Instant::now();
        agent.sigterm();
        let status = agent.wait_exit(WAIT).expect("exits");
        let took = t.elapsed();
        println!("agent {i}: exit {status:?} {took:?} after SIGTERM (bound {bound:?})");
        assert_eq!(status.code(), Some(0), "{}", agent.dump());
        assert!(
            took <= *bound + Duration::from_millis(1000),
            "took {took:?}"
        );
        let calls = common::read_json(dir.join(format!("calls-{i}.json")));
        assert_eq!(calls["nvmlShutdown"], 1, "{calls:#}");
        assert!(agent.dump().contains("stopped"));
    }
}

/// NVML is shut down on every stop, at the default settings too (a 5 s sample interval and
/// a 5 s shutdown bound): the event watcher's wait ends within half a second of the stop, so
/// `nvmlShutdown` is called before the agent exits, whether the stop is quick (nothing to
/// export) or waits on a collector that is not there.
#[test]
fn nvml_is_shut_down_on_every_stop_at_the_default_settings() {
    let dir = tempfile::tempdir().unwrap();
    let down = Receiver::start(Protocol::Grpc);
    down.stop();
    let runs: [(&str, AgentBuilder); 2] = [
        (
            "nothing to export",
            Agent::builder()
                .env("OTEL_METRICS_EXPORTER", "none")
                .env("OTEL_LOGS_EXPORTER", "none"),
        ),
        ("no collector", Agent::builder().otlp(&down)),
    ];
    let mut agents: Vec<(&str, Agent, std::path::PathBuf)> = runs
        .into_iter()
        .enumerate()
        .map(|(i, (what, b))| {
            let log = dir.path().join(format!("calls-{i}.json"));
            let agent = b
                .env_mock("h200-under-load.json")
                .env("NVML_MOCK_CALL_LOG", &log)
                .spawn();
            (what, agent, log)
        })
        .collect();
    for (what, agent, _) in &agents {
        assert!(
            agent.wait_for_stderr("sampling started", WAIT),
            "{what}\n{}",
            agent.dump()
        );
    }
    // The event watchers are inside a wait now (registration takes microseconds).
    std::thread::sleep(Duration::from_millis(1500));
    for (what, agent, log) in &mut agents {
        agent.sigint();
        let status = agent.wait_exit(WAIT).expect("exits");
        assert_eq!(status.code(), Some(0), "{what}\n{}", agent.dump());
        let calls = common::read_json(&*log);
        assert!(
            calls["nvmlEventSetWait_v2"].as_u64().unwrap_or(0) >= 1,
            "{what}: the event watcher ran: {calls:#}"
        );
        assert_eq!(
            calls["nvmlShutdown"],
            1,
            "{what}: {calls:#}\n{}",
            agent.dump()
        );
        assert!(
            !agent.dump().contains("NVML is not shut down"),
            "{what}\n{}",
            agent.dump()
        );
    }
}

/// A second SIGINT or SIGTERM during the stop ends it at once, exit 0, with one line saying
/// what was skipped (here the stop waits on a collector that answers nothing for 60 s).
#[test]
fn a_second_signal_ends_the_stop_at_once() {
    for (first, second, name) in [
        (libc::SIGINT, libc::SIGINT, "SIGINT"),
        (libc::SIGTERM, libc::SIGTERM, "SIGTERM"),
    ] {
        let hanging = Receiver::start(Protocol::Grpc);
        hanging.set_mode(Mode::Delay(Duration::from_secs(60)));
        let mut agent = fast(&hanging)
            .env_mock("four-gpu.json")
            .env("OTEL_EXPORTER_OTLP_TIMEOUT", "30000")
            .env("GPU_SIDECAR_SHUTDOWN_TIMEOUT", "20s")
            .spawn();
        assert!(hanging.wait_until(WAIT, |r| !r.attempts().is_empty()));
        agent.signal(first);
        assert!(
            agent.wait_for_stderr("shutting down: final sample and export", WAIT),
            "{}",
            agent.dump()
        );
        // Into the stop: the final sample is taken, the exports wait on the collector.
        std::thread::sleep(Duration::from_millis(500));
        assert!(agent.is_running(), "still stopping: {}", agent.dump());
        let t = Instant::now();
        agent.signal(second);
        let status = agent.wait_exit(WAIT).expect("exits");
        let took = t.elapsed();
        assert_eq!(status.code(), Some(0), "{}", agent.dump());
        assert!(
            took < Duration::from_secs(2),
            "took {took:?}\n{}",
            agent.dump()
        );
        let line = agent
            .stderr_lines()
            .into_iter()
            .find(|l| l.contains(&format!("{name} again: stopping at once, without ")))
            .unwrap_or_else(|| panic!("no line says what was skipped\n{}", agent.dump()));
        assert!(line.contains("the final metrics export"), "{line}");
        assert!(line.ends_with("(exit 0)"), "{line}");
        assert!(!agent.dump().contains(" stopped"), "{}", agent.dump());
    }
}

/// The same SIGINT twice, as GNU `timeout` sends it (to the agent, then to its process
/// group), is one stop request: the stop runs to its end, the run report is written. Before,
/// a copy that arrived once the stop had begun ended it at once, and the report of
/// `timeout -s INT 60 gpu-otel-sidecar` was lost in about a third of the runs. Here the
/// second copy is sent as soon as the stop has begun (the agent's own line), well within
/// the 250 ms that make one request; a try where the machine delayed it past 150 ms is done
/// again (at most three).
#[test]
fn the_same_signal_twice_at_once_is_one_stop_request() {
    let mut tries = 0;
    loop {
        tries += 1;
        let rx = Receiver::start(Protocol::Grpc);
        let report = temp_path(&format!("same-signal-report-{tries}.json"));
        let mut agent = fast(&rx)
            .env_mock("four-gpu.json")
            .env("GPU_SIDECAR_REPORT_FILE", &report)
            .spawn();
        assert!(
            rx.wait_until(WAIT, |r| !r.metrics_requests().is_empty()),
            "{}",
            agent.dump()
        );
        let first = Instant::now();
        agent.signal(libc::SIGINT);
        assert!(
            agent.wait_for_stderr("shutting down: final sample and export", WAIT),
            "{}",
            agent.dump()
        );
        agent.signal(libc::SIGINT);
        let gap = first.elapsed();
        let status = agent.wait_exit(WAIT).expect("exits");
        assert_eq!(status.code(), Some(0), "{}", agent.dump());
        if gap > Duration::from_millis(150) && tries < 3 {
            continue;
        }
        let dump = agent.dump();
        assert!(!dump.contains("stopping at once"), "gap {gap:?}\n{dump}");
        assert!(
            dump.contains("SIGINT again within 250ms of the first"),
            "gap {gap:?}\n{dump}"
        );
        assert!(dump.contains(" stopped"), "{dump}");
        let written = common::read_json(&report);
        assert_eq!(
            written["gpus"].as_array().map(Vec::len),
            Some(4),
            "{written:#}"
        );
        break;
    }
}

/// No collector, over HTTP: the metrics' failure line and the events' (the run report at
/// shutdown is the only event here) each say what failed underneath ("Connection refused"),
/// not only "network error" (opentelemetry-otlp's, for the events); the events' line names the logs endpoint
/// and comes once; the SDK's causeless "Failed to shutdown" is not logged for the events.
#[test]
fn failed_exports_over_http_name_their_cause_and_events_say_so_once() {
    let down = Receiver::start(Protocol::Http);
    down.stop();
    let mut agent = Agent::builder()
        .otlp(&down)
        .env_mock("four-gpu.json")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
        .env("GPU_SIDECAR_SHUTDOWN_TIMEOUT", "3s")
        .spawn();
    assert!(
        agent.wait_for_stderr("metrics export failed", WAIT),
        "{}",
        agent.dump()
    );
    let metrics_line = agent
        .stderr_lines()
        .into_iter()
        .find(|l| l.contains("metrics export failed"))
        .unwrap();
    // The metrics' own transport (src/telemetry/otlp/mod.rs) names the cause itself.
    assert!(
        metrics_line.contains("Connection refused"),
        "the cause is named: {metrics_line}"
    );
    stop_ok(&mut agent);
    let events: Vec<String> = agent
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("events export failed"))
        .collect();
    assert_eq!(events.len(), 1, "{}", agent.dump());
    assert!(
        events[0].contains(&down.logs_url()) && events[0].contains("Connection refused"),
        "endpoint and cause: {}",
        events[0]
    );
    assert!(
        !agent
            .stderr_lines()
            .iter()
            .any(|l| l.contains("otel-logs-shutdown") && l.contains("Failed to shutdown")),
        "{}",
        agent.dump()
    );
}

/// A collector without a logs pipeline refuses every events export for good (gRPC
/// `UNIMPLEMENTED`): the log tells one story per batch, "refused for good, dropped", never
/// "held and sent again" for the same events (before, the first two lines said both). A
/// collector that first fails for now (`UNAVAILABLE`: held, sent again) and then refuses for
/// good gets that second fate said at once, within the minute the failure lines are limited
/// to, so the last word is the fate that holds.
#[test]
fn events_refused_for_good_tell_one_story() {
    let scen = h200_with_xids("refused-events", &[(0.3, 79), (2.0, 13)]);
    let rx = Receiver::start(Protocol::Grpc);
    rx.set_mode(Mode::Fail {
        grpc: tonic::Code::Unimplemented,
        http: 404,
    });
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock_path(&scen)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
        .env("OTEL_BLRP_SCHEDULE_DELAY", "100")
        .spawn();
    assert!(
        agent.wait_for_stderr("events export failed", WAIT),
        "{}",
        agent.dump()
    );
    stop_ok(&mut agent);
    let events: Vec<String> = agent
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("events export failed") || l.contains("refused"))
        .collect();
    assert_eq!(events.len(), 1, "one line, the rest counted: {events:#?}");
    assert!(
        events[0].contains("refused these events for good")
            && events[0].contains("dropped")
            && events[0].contains("gRPC status 12")
            && !events[0].contains("held"),
        "{}",
        events[0]
    );

    // Held first, then refused: both fates said, in that order, the second at once.
    let rx = Receiver::start(Protocol::Grpc);
    rx.set_mode(Mode::Unavailable { retry_after: None });
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock_path(&scen)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
        .env("OTEL_BLRP_SCHEDULE_DELAY", "100")
        .spawn();
    assert!(
        agent.wait_for_stderr("are held (up to OTEL_BLRP_MAX_QUEUE_SIZE", WAIT),
        "{}",
        agent.dump()
    );
    let held_at = Instant::now();
    rx.set_mode(Mode::Fail {
        grpc: tonic::Code::Unimplemented,
        http: 404,
    });
    assert!(
        agent.wait_for_stderr("refused these events for good", WAIT),
        "{}",
        agent.dump()
    );
    assert!(
        held_at.elapsed() < Duration::from_secs(30),
        "{:?}",
        held_at.elapsed()
    );
    stop_ok(&mut agent);
    let lines: Vec<String> = agent
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("events export failed"))
        .collect();
    let fates: Vec<&str> = lines
        .iter()
        .map(|l| {
            if l.contains("for good") {
                "refused"
            } else {
                "held"
            }
        })
        .collect();
    assert_eq!(fates.first(), Some(&"held"), "{lines:#?}");
    assert_eq!(fates.last(), Some(&"refused"), "{lines:#?}");
}

/// `(event.name, XID code)` of each record, in arrival order.
fn xid_records(rx: &Receiver) -> Vec<(String, String)> {
    rx.log_records()
        .into_iter()
        .filter(|r| r.event_name == "nvidia.gpu.xid" || r.event_name == "nvidia.gpu.alert.xid")
        .map(|r| {
            let code = r
                .attr("nvidia.gpu.xid.code")
                .unwrap_or_default()
                .to_string();
            (r.event_name, code)
        })
        .collect()
}

/// A scenario of the H200 with these XIDs: `(scenario time, code)`.
fn h200_with_xids(name: &str, xids: &[(f64, u32)]) -> PathBuf {
    scenario_with("h200-under-load.json", name, |v| {
        v["events"] = xids
            .iter()
            .map(|(t, code)| json!({ "t": t, "device": 0, "type": "xid", "data": code }))
            .collect();
    })
}

/// The issue's case: the collector goes away for 60 s and comes back on the same port.
/// Every XID event and every alert (the xid rule fires on the first report of each code)
/// raised meanwhile arrives once, in order, soon after it is back; nothing is dropped. The
/// records' encoded sizes are within what `DEFAULT_QUEUE_SIZE` was sized from.
#[test]
fn events_raised_during_a_60_s_outage_arrive_once_in_order() {
    const CODES: [u32; 11] = [13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 92];
    let xids: Vec<(f64, u32)> = CODES
        .iter()
        .enumerate()
        .map(|(i, c)| (5.0 * (i + 1) as f64, *c))
        .collect();
    let path = h200_with_xids("xids-during-outage", &xids);
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock_path(&path)
        .env("NVML_MOCK_NO_LATENCY", "1")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "500ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "1000")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")
        .spawn();
    assert!(rx.wait_for_metric("hw.power", WAIT), "{}", agent.dump());
    rx.stop();
    let down = Instant::now();
    // The first XID (t = 5 s) comes while it is down.
    assert!(agent.wait_for_stderr("XID error", WAIT), "{}", agent.dump());
    assert!(rx.log_records().is_empty(), "{:#?}", rx.log_records());
    std::thread::sleep(Duration::from_secs(60).saturating_sub(down.elapsed()));
    assert!(agent.wait_for_stderr("events export failed", WAIT));
    assert!(
        agent
            .stderr_lines()
            .iter()
            .filter(|l| l.contains("XID error"))
            .count()
            >= 10
    );
    rx.restart();
    let back = Instant::now();
    let all = 2 * CODES.len();
    assert!(
        rx.wait_until(Duration::from_secs(20), |r| xid_records(r).len() >= all),
        "{:#?}\n{}",
        xid_records(&rx),
        agent.dump()
    );
    println!(
        "{all} events delivered {:?} after the collector came back",
        back.elapsed()
    );
    stop_ok(&mut agent);
    let got = xid_records(&rx);
    // Once each.
    let mut want: Vec<(String, String)> = CODES
        .iter()
        .flat_map(|c| {
            [
                ("nvidia.gpu.xid".to_string(), c.to_string()),
                ("nvidia.gpu.alert.xid".to_string(), c.to_string()),
            ]
        })
        .collect();
    let mut sorted = got.clone();
    sorted.sort();
    want.sort();
    assert_eq!(sorted, want, "each once: {got:#?}");
    // In order: each kind in the order of the XIDs, and all of them by time.
    for kind in ["nvidia.gpu.xid", "nvidia.gpu.alert.xid"] {
        let codes: Vec<String> = got
            .iter()
            .filter(|(n, _)| n == kind)
            .map(|(_, c)| c.clone())
            .collect();
        let expected: Vec<String> = CODES.iter().map(u32::to_string).collect();
        assert_eq!(codes, expected, "{kind} in order");
    }
    let times: Vec<u64> = rx
        .log_records()
        .into_iter()
        .filter(|r| r.event_name.contains("xid"))
        .map(|r| r.time_unix_nano)
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert!(
        !rx.has_metric("gpu_sidecar.events.dropped"),
        "{:#?}",
        rx.points("gpu_sidecar.events.dropped")
    );
    assert_eq!(count_lines(&agent, "events queue is full"), 0);
    // One line for the outage (a second one a minute later at most).
    assert!(
        (1..=2).contains(&count_lines(&agent, "events export failed")),
        "{}",
        agent.dump()
    );
    assert_eq!(
        count_lines(&agent, "events export works again"),
        1,
        "{}",
        agent.dump()
    );
    // What the default queue size was sized from (DEFAULT_EVENTS_QUEUE_SIZE).
    use prost::Message as _;
    for req in rx.log_requests() {
        for r in req
            .request
            .resource_logs
            .iter()
            .flat_map(|rl| &rl.scope_logs)
            .flat_map(|sl| &sl.log_records)
        {
            let size = r.encoded_len();
            let most = match r.event_name.as_str() {
                "nvidia.gpu.xid" => 1024,
                "nvidia.gpu.alert.xid" => 3 * 1024,
                "gpu.run.report" => 8 * 1024,
                _ => continue,
            };
            println!("{}: {size} bytes", r.event_name);
            assert!(size <= most, "{}: {size} bytes", r.event_name);
        }
    }
}

/// A queue smaller than the outage: `OTEL_BLRP_MAX_QUEUE_SIZE=4` and eight XIDs while the
/// collector is down. The four oldest are dropped (one line says so), the four newest
/// arrive in order once it is back, and `gpu_sidecar.events.dropped` counts 4, born with
/// the first drop.
#[test]
fn a_queue_smaller_than_the_outage_drops_the_oldest_and_counts_them() {
    const CODES: [u32; 8] = [13, 31, 43, 45, 48, 61, 62, 63];
    let xids: Vec<(f64, u32)> = CODES
        .iter()
        .enumerate()
        .map(|(i, c)| (0.5 * (i + 1) as f64, *c))
        .collect();
    let path = h200_with_xids("xids-small-queue", &xids);
    let rx = Receiver::start(Protocol::Grpc);
    rx.stop();
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock_path(&path)
        .env("NVML_MOCK_NO_LATENCY", "1")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "500ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "1000")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
        .env("OTEL_BLRP_MAX_QUEUE_SIZE", "4")
        .env("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "2")
        .env("GPU_SIDECAR_RULE_XID_ENABLED", "false")
        .spawn();
    assert!(
        agent.wait_for_stderr("events queue is full", WAIT),
        "{}",
        agent.dump()
    );
    // Every XID seen (the last at t = 4 s), then back.
    assert!(common::wait_until(WAIT, || count_lines(&agent, "xid=63") == 1));
    std::thread::sleep(Duration::from_secs(1));
    rx.restart();
    let last4: Vec<(String, String)> = CODES[4..]
        .iter()
        .map(|c| ("nvidia.gpu.xid".to_string(), c.to_string()))
        .collect();
    assert!(
        rx.wait_until(WAIT, |r| xid_records(r).len() >= 4),
        "{}",
        agent.dump()
    );
    let dropped = |r: &Receiver| value(&r.last_points("gpu_sidecar.events.dropped"), &[]);
    assert!(
        rx.wait_until(WAIT, |r| dropped(r) == Some(4.0)),
        "{:?}\n{}",
        rx.points("gpu_sidecar.events.dropped"),
        agent.dump()
    );
    stop_ok(&mut agent);
    assert_eq!(xid_records(&rx), last4, "the four newest, in order");
    let p = &rx.points("gpu_sidecar.events.dropped")[0];
    assert_eq!((p.unit.as_str(), p.is_int), ("{event}", true));
    assert_eq!(
        count_lines(&agent, "events queue is full"),
        1,
        "{}",
        agent.dump()
    );
}

// ---------------------------------------------------------------------------------------------
// Secrets

/// A token in `OTEL_EXPORTER_OTLP_HEADERS` is sent, and never appears in the agent's output
/// (trace-level logs, text and JSON) through refusals, an unauthenticated answer, a
/// collector down, a TLS handshake failure, and a bad setting.
#[test]
fn header_value_never_appears_in_any_output() {
    const TOKEN: &str = "tok-5ecr3t-9f2a";
    let header = format!("authorization=Bearer%20{TOKEN},x-tenant=acme");
    let grpc = Receiver::start(Protocol::Grpc);
    let http = Receiver::start(Protocol::Http);
    let spawn = |rx: &Receiver, format: &str| {
        fast(rx)
            .env_mock("four-gpu.json")
            .env("OTEL_EXPORTER_OTLP_HEADERS", &header)
            .env("GPU_SIDECAR_LOG_LEVEL", "trace")
            .env("GPU_SIDECAR_LOG_FORMAT", format)
            .spawn()
    };
    let mut agents = vec![spawn(&grpc, "text"), spawn(&http, "json")];
    // TLS towards a plain-text receiver: the handshake fails. (A CA file of its own, so
    // that the test does not depend on the machine's trust store.)
    let plain = Receiver::start(Protocol::Grpc);
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca = rcgen::CertificateParams::new(vec!["test CA".to_string()])
        .unwrap()
        .self_signed(&ca_key)
        .unwrap();
    let ca_path = temp_path("secrets-ca.pem");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    agents.push(
        Agent::builder()
            .env_mock("four-gpu.json")
            .env("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_path)
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("https://{}", plain.addr()),
            )
            .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
            .env("OTEL_EXPORTER_OTLP_HEADERS", &header)
            .env("GPU_SIDECAR_LOG_LEVEL", "debug")
            .spawn(),
    );
    for rx in [&grpc, &http] {
        assert!(rx.wait_for_metric("hw.energy", WAIT));
        rx.set_mode(Mode::Fail {
            grpc: tonic::Code::Unauthenticated,
            http: 401,
        });
    }
    std::thread::sleep(Duration::from_millis(800));
    for rx in [&grpc, &http] {
        rx.set_mode(Mode::Unavailable {
            retry_after: Some(Duration::from_millis(100)),
        });
    }
    std::thread::sleep(Duration::from_millis(800));
    for rx in [&grpc, &http] {
        rx.stop();
    }
    std::thread::sleep(Duration::from_millis(800));
    for rx in [&grpc, &http] {
        rx.set_mode(Mode::Accept);
        rx.restart();
    }
    assert!(agents[2].wait_for_stderr("metrics export failed", WAIT));
    for rx in [&grpc, &http] {
        let n = rx.metrics_requests().len();
        assert!(rx.wait_until(WAIT, |r| r.metrics_requests().len() > n));
        let sent = rx
            .metrics_requests()
            .last()
            .unwrap()
            .header("authorization")
            .map(String::from);
        assert_eq!(sent.as_deref(), Some(format!("Bearer {TOKEN}").as_str()));
        assert!(rx
            .attempts()
            .iter()
            .any(|a| matches!(a.mode, Mode::Fail { .. })));
    }
    for agent in &mut agents {
        agent.sigterm();
        assert_eq!(agent.wait_exit(WAIT).and_then(|s| s.code()), Some(0));
    }
    // A bad header list stops the agent, without echoing the value.
    let mut bad = Agent::builder()
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("authorization={TOKEN},broken"),
        )
        .spawn();
    assert_eq!(bad.wait_exit(WAIT).and_then(|s| s.code()), Some(2));
    agents.push(bad);
    for agent in &agents {
        let out = agent.dump();
        assert!(out.lines().count() > 5 || out.contains("OTEL_EXPORTER_OTLP_HEADERS"));
        assert!(!out.contains(TOKEN), "the header value leaked:\n{out}");
        assert!(!out.contains("5ecr3t"), "part of the header value leaked");
    }
    assert!(agents[0].dump().contains("TRACE"), "trace level was on");
}

// ---------------------------------------------------------------------------------------------
// Health command

/// `gpu-otel-sidecar health` asks the running agent's `/readyz`: exit 0 when ready, 1 when
/// not ready or when nothing answers.
#[test]
fn health_command_reports_readiness_by_exit_code() {
    let rx = Receiver::start(Protocol::Grpc);
    let ready = fast(&rx).env_mock("four-gpu.json").spawn();
    let broken = Agent::builder()
        .otlp(&rx)
        .env("GPU_SIDECAR_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
        .spawn();
    wait_ready(&ready, 200, WAIT);
    let addr = |a: &Agent| {
        a.health_url(WAIT)
            .unwrap()
            .trim_start_matches("http://")
            .to_string()
    };
    let probe = |addr: &str| {
        let mut p = Agent::builder()
            .arg("health")
            .env("GPU_SIDECAR_HEALTH_ADDR", addr)
            .echo(false)
            .spawn();
        let code = p.wait_exit(WAIT).and_then(|s| s.code());
        (
            code,
            p.stdout_lines().join("\n"),
            p.stderr_lines().join("\n"),
        )
    };
    let (code, out, _) = probe(&addr(&ready));
    assert_eq!(code, Some(0), "{out}");
    let body: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(body["status"], "ready");
    let (code, out, _) = probe(&addr(&broken));
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("NVML library not found"), "{out}");
    // 0.0.0.0 is probed on loopback; nothing listens on this port.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let (code, _, err) = probe(&format!("0.0.0.0:{port}"));
    assert_eq!(code, Some(1));
    // What it tried, why nothing answered, and what that means (not only reqwest's "error
    // sending request").
    assert!(
        err.contains(&format!(
            "asked http://127.0.0.1:{port}/readyz, and nothing answered ("
        )),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
    assert!(
        err.contains(&format!(
            "no agent is running here with GPU_SIDECAR_HEALTH_ADDR=0.0.0.0:{port}"
        )),
        "{err}"
    );
    let (code, _, err) = probe("off");
    assert_eq!(code, Some(1));
    assert!(err.contains("off"), "{err}");
}

/// The health port in use: exit 1 with one line naming the setting.
#[test]
fn health_port_in_use_is_named() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let mut agent = Agent::builder()
        .env("GPU_SIDECAR_HEALTH_ADDR", &addr)
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("GPU_SIDECAR_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
        .spawn();
    assert_eq!(agent.wait_exit(WAIT).and_then(|s| s.code()), Some(1));
    assert!(
        agent
            .dump()
            .contains(&format!("GPU_SIDECAR_HEALTH_ADDR={addr}")),
        "{}",
        agent.dump()
    );
}

/// Every self-metric is documented (in `docs/metrics.md`, generated from the catalogue)
/// with its instrument and unit.
#[test]
fn self_metrics_are_documented() {
    let doc = common::read_text(common::workspace_root().join("docs/metrics.md"));
    for m in gpu_otel_sidecar::catalogue::metrics::SELF_METRICS {
        let row = format!(
            "| `{}` | {} | `{}` |",
            m.name,
            m.instrument.as_str(),
            m.unit
        );
        assert!(doc.contains(&row), "docs/metrics.md lacks {row}");
    }
}

// ---------------------------------------------------------------------------------------------
// Least privilege

/// The agent writes nothing to disk: while it runs (sampling, exporting, serving health,
/// failing exports), every file it holds open is open read-only; only pipes, sockets and
/// kernel objects are written.
#[test]
fn agent_holds_no_file_open_for_writing() {
    // What the shell of `exec 3>>file` or `/usr/bin/time -o FILE cargo test` hands the test
    // process: the agent must not be blamed for it.
    let dir = tempfile::tempdir().unwrap();
    let _inherited = common::agent::inheritable_file_for_writing(&dir.path().join("time.out"));
    let rx = Receiver::start(Protocol::Http);
    let mut agent = fast(&rx).env_mock("four-gpu.json").spawn();
    assert!(rx.wait_for_metric("hw.energy", WAIT));
    wait_ready(&agent, 200, WAIT);
    rx.stop();
    assert!(agent.wait_for_stderr("metrics export failed", WAIT));
    let proc_dir = PathBuf::from(format!("/proc/{}", agent.pid()));
    let mut files = BTreeSet::new();
    for _ in 0..5 {
        for entry in std::fs::read_dir(proc_dir.join("fd")).unwrap() {
            let entry = entry.unwrap();
            let Ok(target) = std::fs::read_link(entry.path()) else {
                continue; // closed meanwhile
            };
            if !target.is_absolute() {
                continue; // pipe:[…], socket:[…], anon_inode:[…]
            }
            let Ok(info) = std::fs::read_to_string(proc_dir.join("fdinfo").join(entry.file_name()))
            else {
                continue;
            };
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
                .unwrap();
            let access = flags & 0o3;
            assert!(
                access == 0 || target == std::path::Path::new("/dev/null"),
                "{} open for writing (flags {flags:o})",
                target.display()
            );
            files.insert(target);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    println!("files held open: {files:?}");
    stop_ok(&mut agent);
}

// ---------------------------------------------------------------------------------------------
// Soak

/// At least 10^5 ticks at a 1 ms sample interval, exports every 50 ms, with the collector
/// flapping (accepting, killed, refusing, slow, and one 20 s outage): RSS at the end within
/// 1 MiB of RSS after warm-up. Prints both.
#[test]
fn soak_flapping_collector_memory_stays_flat() {
    const TICKS: u64 = 100_000;
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock("four-gpu.json")
        .env("NVML_MOCK_NO_LATENCY", "1")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "1ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "50")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
        .echo(false)
        .spawn();
    let ticks = |agent: &Agent| -> u64 {
        health(agent, "/readyz").1["checks"]["sample"]["ticks"]
            .as_u64()
            .unwrap_or(0)
    };
    let started = Instant::now();
    let flap = |rx: &Receiver, phase: u64| match phase % 5 {
        0 => rx.set_mode(Mode::Accept),
        1 => rx.stop(),
        2 => {
            rx.restart();
            rx.set_mode(Mode::Unavailable {
                retry_after: Some(Duration::from_millis(50)),
            })
        }
        3 => rx.set_mode(Mode::Delay(Duration::from_millis(400))),
        _ => rx.set_mode(Mode::ResourceExhausted { retry_after: None }),
    };
    // Warm-up: 10^4 ticks and one full flap cycle.
    let mut phase = 0;
    while ticks(&agent) < 10_000 || phase < 5 {
        flap(&rx, phase);
        phase += 1;
        std::thread::sleep(Duration::from_millis(1500));
        assert!(agent.is_running(), "{}", agent.dump());
    }
    rx.set_mode(Mode::Accept);
    rx.clear();
    std::thread::sleep(Duration::from_secs(2));
    let warm = agent.rss_kib().unwrap();
    let warm_ticks = ticks(&agent);
    println!(
        "soak: RSS after warm-up {warm} KiB at {warm_ticks} ticks ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    let mut long_outage_done = false;
    while ticks(&agent) < TICKS {
        if !long_outage_done && ticks(&agent) > 40_000 {
            // A long outage: nothing may queue up.
            rx.stop();
            std::thread::sleep(Duration::from_secs(20));
            rx.restart();
            long_outage_done = true;
        }
        flap(&rx, phase);
        phase += 1;
        std::thread::sleep(Duration::from_millis(1500));
        rx.clear();
        assert!(agent.is_running(), "{}", agent.dump());
    }
    rx.set_mode(Mode::Accept);
    if !rx.is_running() {
        rx.restart();
    }
    std::thread::sleep(Duration::from_secs(2));
    let end = agent.rss_kib().unwrap();
    let end_ticks = ticks(&agent);
    let secs = started.elapsed().as_secs_f64();
    println!("soak: RSS at the end {end} KiB at {end_ticks} ticks ({secs:.0} s)");
    println!(
        "soak: difference {} KiB; {} failure lines, {} recovery lines",
        end as i64 - warm as i64,
        count_lines(&agent, "metrics export failed"),
        count_lines(&agent, "works again")
    );
    assert!(long_outage_done);
    assert!(end_ticks >= TICKS, "{end_ticks} ticks");
    assert!(
        end <= warm + 1024,
        "RSS grew from {warm} KiB to {end} KiB over {} ticks",
        end_ticks - warm_ticks
    );
    // At most one failure line per minute (plus the first), however often it flapped.
    let bound = (secs / 60.0).ceil() as usize + 1;
    assert!(count_lines(&agent, "metrics export failed") <= bound);
    assert!(count_lines(&agent, "works again") <= bound);
    assert!(rx.wait_for_metric("hw.energy", WAIT), "resumes");
    stop_ok(&mut agent);
}
