//! End to end: the agent binary, started as a process with the mock NVML replaying a
//! scenario, exporting to an in-process OTLP receiver. Values are checked against the
//! scenario files (and, for the H200, against the original recording).

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{h200_recording, read_json, scenario, Agent, Kind, Point, Protocol, Receiver};
use gpu_otel_sidecar::catalogue::metrics::{H200Series, SERIES_BUDGET};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

fn set(values: impl IntoIterator<Item = f64>) -> BTreeSet<u64> {
    values
        .into_iter()
        .map(|v| (v * 1e6).round() as u64)
        .collect()
}

fn one<'a>(points: &'a [Point], attr: (&str, &str)) -> &'a Point {
    let hits: Vec<_> = points
        .iter()
        .filter(|p| p.attr(attr.0) == Some(attr.1))
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "expected one point with {attr:?} in {points:#?}"
    );
    hits[0]
}

fn pod_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("K8S_POD_NAME", "resnet-train-0"),
        ("K8S_POD_UID", "4f1c7e2a-0000-4000-8000-000000000001"),
        ("K8S_NAMESPACE_NAME", "ml"),
        ("K8S_NODE_NAME", "gpu-node-7"),
        ("K8S_CONTAINER_NAME", "trainer"),
        ("K8S_UNUSED", ""),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "deployment.environment.name=test,k8s.node.name=from-otel",
        ),
        ("GPU_SIDECAR_SAMPLE_INTERVAL", "250ms"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
    ]
}

/// The H200 scenario through the whole pipeline: names, units, kinds, values, attributes.
fn h200_end_to_end(protocol: Protocol, extra: &[(&str, &str)]) -> (Receiver, Agent) {
    let rx = Receiver::start(protocol);
    let mut b = Agent::builder().otlp(&rx).env_mock("h200-under-load.json");
    for (k, v) in pod_env().into_iter().chain(extra.iter().copied()) {
        b = b.env(k, v);
    }
    let agent = b.spawn();
    assert!(
        rx.wait_for_metric("hw.power", WAIT),
        "no hw.power arrived\n{}",
        agent.dump()
    );
    // Let a few exports arrive so that every metric has been seen.
    assert!(
        rx.wait_until(WAIT, |r| r.metrics_requests().len() >= 3),
        "{}",
        agent.dump()
    );

    let scen = read_json(scenario("h200-under-load.json"));
    let uuid = scen["devices"][0]["uuid"].as_str().unwrap().to_string();
    let rec = h200_recording();

    // Power: a value of the recording, in W, on the GPU's hw.id.
    let powers = set(rec.iter().map(|r| r["power_mw"].as_f64().unwrap() / 1000.0));
    for p in rx.points("hw.power") {
        assert_eq!(p.unit, "W");
        assert_eq!(p.kind, Kind::Gauge);
        assert!(
            powers.contains(&((p.value * 1e6).round() as u64)),
            "hw.power {} not in the recording",
            p.value
        );
        assert!(
            (680.0..=700.0).contains(&p.value),
            "~690.6 W under load, got {}",
            p.value
        );
        assert_eq!(p.attr("hw.id"), Some(uuid.as_str()));
        assert_eq!(p.attr("hw.type"), Some("gpu"));
        assert_eq!(p.attr("hw.vendor"), Some("NVIDIA"));
        assert_eq!(p.attr("hw.model"), Some("NVIDIA H200"));
        assert_eq!(p.scope_name, "gpu-otel-sidecar");
    }

    let limit = rx.last_points("hw.gpu.memory.limit");
    assert_eq!(limit.len(), 1);
    assert_eq!(limit[0].value, 150_754_820_096.0);
    assert!(limit[0].is_int);
    assert_eq!(limit[0].unit, "By");
    assert_eq!(
        limit[0].kind,
        Kind::Sum {
            monotonic: false,
            cumulative: true
        }
    );

    // The recording's `used` is nvmlDeviceGetMemoryInfo (v1), which counts the reserved
    // memory; the _v2 call the agent makes reports it apart (reserved 644939776 here).
    let reserved = scen["devices"][0]["defaults"]["mem_reserved"]
        .as_f64()
        .unwrap();
    assert_eq!(reserved, 644_939_776.0);
    let used = set(rec.iter().map(|r| r["mem"][1].as_f64().unwrap() - reserved));
    for p in rx.points("hw.gpu.memory.usage") {
        assert!(
            used.contains(&((p.value * 1e6).round() as u64)),
            "memory used {} not in the recording",
            p.value
        );
    }

    let util = rx.last_points("hw.gpu.utilization");
    let general = one(&util, ("hw.gpu.task", "general"));
    assert_eq!(general.value, 0.99);
    assert_eq!(general.unit, "1");
    assert_eq!(general.kind, Kind::Gauge);

    for p in rx.points("hw.temperature") {
        assert_eq!(p.unit, "Cel");
        match p.attr("hw.sensor_location") {
            Some("gpu") => assert!(
                (58.0..=60.0).contains(&p.value),
                "GPU temperature {}",
                p.value
            ),
            Some("memory") => assert!(
                (45.0..=55.0).contains(&p.value),
                "HBM temperature {}",
                p.value
            ),
            other => panic!("unexpected sensor {other:?}"),
        }
    }
    let gpu_temps = set(rec.iter().map(|r| r["temp"].as_f64().unwrap()));
    for p in rx
        .points("hw.temperature")
        .iter()
        .filter(|p| p.attr("hw.sensor_location") == Some("gpu"))
    {
        assert!(gpu_temps.contains(&((p.value * 1e6).round() as u64)));
    }

    // hw.energy counts from the agent's first reading (the recording's first row: the first
    // tick comes within ms of NVML's start), with that reading's time as start time: the
    // first point is 0 at its own start, later ones a difference of recorded totals.
    let first_mj = rec[0]["energy_mj"].as_f64().unwrap();
    let energies = set(rec
        .iter()
        .map(|r| (r["energy_mj"].as_f64().unwrap() - first_mj) / 1000.0));
    let mut energy = rx.points("hw.energy");
    energy.sort_by_key(|p| p.time_unix_nano);
    assert!(!energy.is_empty());
    assert_eq!(energy[0].value, 0.0, "{:?}", energy[0]);
    assert_eq!(energy[0].start_time_unix_nano, energy[0].time_unix_nano);
    for p in &energy {
        assert_eq!(p.unit, "J");
        assert_eq!(
            p.kind,
            Kind::Sum {
                monotonic: true,
                cumulative: true
            }
        );
        assert_eq!(p.start_time_unix_nano, energy[0].start_time_unix_nano);
        assert!(
            energies.contains(&((p.value * 1e6).round() as u64)),
            "energy {} J is not a difference of recorded totals from the first",
            p.value
        );
    }

    let limit_w = rx.last_points("nvidia.gpu.power.limit");
    assert_eq!(limit_w[0].value, 700.0);
    let reasons = rx.last_points("nvidia.gpu.clocks_event.active");
    assert_eq!(
        one(&reasons, ("nvidia.gpu.clocks_event.reason", "sw_power_cap")).value,
        1.0
    );
    // The other reasons were never active: not exported (the series budget).
    assert_eq!(reasons.len(), 1, "{reasons:#?}");
    let status = rx.last_points("hw.status");
    assert_eq!(
        one(&status, ("hw.state", "ok")).value,
        1.0,
        "power cap under load is not degraded"
    );
    assert_eq!(rx.last_points("nvidia.gpu.performance_state")[0].value, 0.0);
    let sm = rx.last_points("nvidia.gpu.clock.frequency");
    let sm_hz = one(&sm, ("nvidia.gpu.clock.type", "sm")).value;
    assert!((1.3e9..=2.0e9).contains(&sm_hz), "SM clock {sm_hz} Hz");
    assert_eq!(one(&sm, ("nvidia.gpu.clock.type", "memory")).value, 3.201e9);

    // Resource: Downward API, OTEL_RESOURCE_ATTRIBUTES winning on conflict, empty adds nothing.
    let res = &rx.points("hw.power")[0].resource;
    let expect: BTreeMap<&str, &str> = [
        ("service.name", "gpu-otel-sidecar"),
        ("k8s.pod.name", "resnet-train-0"),
        ("k8s.pod.uid", "4f1c7e2a-0000-4000-8000-000000000001"),
        ("k8s.namespace.name", "ml"),
        ("k8s.node.name", "from-otel"),
        ("k8s.container.name", "trainer"),
        ("deployment.environment.name", "test"),
        // The semantic conventions' Kubernetes recommendation: namespace.pod.container.
        ("service.instance.id", "ml.resnet-train-0.trainer"),
    ]
    .into();
    for (k, v) in expect {
        assert_eq!(
            res.get(k).map(String::as_str),
            Some(v),
            "resource {k} in {res:?}"
        );
    }
    assert!(res.contains_key("host.name"));
    (rx, agent)
}

fn sigterm_sends_final_export(rx: &Receiver, agent: &mut Agent) {
    // Exports every 500 ms: stop just after one, so the final export is the only one due
    // within the next 400 ms.
    let before = rx.metrics_requests().len();
    assert!(rx.wait_until(WAIT, |r| r.metrics_requests().len() > before));
    let n = rx.metrics_requests().len();
    let signalled = std::time::Instant::now();
    agent.sigterm();
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("exits within the shutdown bound");
    assert_eq!(status.code(), Some(0), "{}", agent.dump());
    assert!(
        rx.metrics_requests().len() > n,
        "no final export after SIGTERM\n{}",
        agent.dump()
    );
    // Exactly one final export (not a flush followed by a shutdown export of the same
    // points); the next periodic one was ~480 ms away.
    let after: Vec<_> = rx
        .metrics_requests()
        .into_iter()
        .filter(|r| r.at > signalled)
        .collect();
    assert_eq!(after.len(), 1, "exports after SIGTERM: {}", after.len());
    assert!(agent
        .stderr_lines()
        .iter()
        .any(|l| l.contains("shutting down")));
}

#[test]
fn grpc_export_matches_the_h200_recording() {
    let (rx, mut agent) = h200_end_to_end(Protocol::Grpc, &[]);
    sigterm_sends_final_export(&rx, &mut agent);
}

#[test]
fn http_protobuf_export_with_gzip_and_headers() {
    let (rx, mut agent) = h200_end_to_end(
        Protocol::Http,
        &[
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20s3cr3t-token",
            ),
        ],
    );
    let reqs = rx.metrics_requests();
    assert!(reqs.iter().all(|r| r.gzip), "bodies are gzip-compressed");
    assert_eq!(reqs[0].header("authorization"), Some("Bearer s3cr3t-token"));
    sigterm_sends_final_export(&rx, &mut agent);
    let out = agent.dump();
    assert!(
        !out.contains("s3cr3t-token"),
        "a header value appeared in the agent's output"
    );
}

#[test]
fn four_gpus_with_unsupported_fields_absent() {
    let rx = Receiver::start(Protocol::Grpc);
    let agent = Agent::builder()
        .otlp(&rx)
        .env_mock("four-gpu.json")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "400")
        .spawn();
    assert!(
        rx.wait_until(WAIT, |r| r.metrics_requests().len() >= 2),
        "{}",
        agent.dump()
    );
    let scen = read_json(scenario("four-gpu.json"));
    let devices = scen["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 4);
    let status = rx.last_points("hw.status");
    let ids: BTreeSet<_> = status.iter().filter_map(|p| p.attr("hw.id")).collect();
    assert_eq!(ids.len(), 4, "{status:#?}");
    let power = rx.last_points("hw.power");
    let temps = rx.last_points("hw.temperature");
    for (i, dev) in devices.iter().enumerate() {
        let uuid = dev["uuid"].as_str().unwrap();
        assert!(ids.contains(uuid));
        let defaults = &dev["defaults"];
        let p: Vec<_> = power
            .iter()
            .filter(|p| p.attr("hw.id") == Some(uuid))
            .collect();
        let mem_t: Vec<_> = temps
            .iter()
            .filter(|p| {
                p.attr("hw.id") == Some(uuid) && p.attr("hw.sensor_location") == Some("memory")
            })
            .collect();
        if i == 2 {
            assert!(
                p.is_empty(),
                "GPU 2 power is NOT_SUPPORTED: absent, never 0; got {p:?}"
            );
            assert!(
                mem_t.is_empty(),
                "GPU 2 memory temperature is NOT_SUPPORTED: absent"
            );
        } else {
            assert_eq!(p.len(), 1);
            let expected = defaults["power_mw"].as_f64().unwrap() / 1000.0;
            assert_eq!(p[0].value, expected, "GPU {i}");
            assert_eq!(expected, 100.0 * (i as f64 + 1.0));
            assert_eq!(mem_t.len(), 1);
            assert_eq!(mem_t[0].value, defaults["temp_mem"].as_f64().unwrap());
        }
    }
    let log = agent.dump();
    assert!(
        log.contains("nvmlDeviceGetPowerUsage") && log.contains("not supported"),
        "unsupported field logged once\n{log}"
    );
    assert_eq!(
        agent
            .stderr_lines()
            .iter()
            .filter(|l| l.contains("nvmlDeviceGetPowerUsage") && l.contains("not supported"))
            .count(),
        1,
        "logged once, not every tick"
    );
}

#[test]
fn device_selection_by_index_and_uuid() {
    let scen = read_json(scenario("four-gpu.json"));
    let uuid3 = scen["devices"][3]["uuid"].as_str().unwrap().to_string();
    let rx = Receiver::start(Protocol::Grpc);
    let agent = Agent::builder()
        .otlp(&rx)
        .env_mock("four-gpu.json")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "400")
        .env("GPU_SIDECAR_DEVICES", format!("1,{uuid3}"))
        .spawn();
    assert!(rx.wait_for_metric("hw.status", WAIT), "{}", agent.dump());
    let ids: BTreeSet<String> = rx
        .points("hw.status")
        .iter()
        .filter_map(|p| p.attr("hw.id").map(str::to_string))
        .collect();
    let uuid1 = scen["devices"][1]["uuid"].as_str().unwrap().to_string();
    assert_eq!(ids, BTreeSet::from([uuid1, uuid3]));
}

/// Two sidecars outside Kubernetes reporting the same GPU to one collector: each has its own
/// `service.instance.id`, so the collector's Prometheus exporter (which makes it the
/// `instance` label) keeps their series apart, the agent's own `gpu_sidecar.*` ones included.
#[test]
fn two_sidecars_behind_one_collector_keep_distinct_identities() {
    let rx = Receiver::start(Protocol::Grpc);
    let spawn = || {
        Agent::builder()
            .otlp(&rx)
            .env_mock("h200-under-load.json")
            .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
            .spawn()
    };
    let (a, b) = (spawn(), spawn());
    let instances = |name: &str| -> BTreeSet<String> {
        rx.points(name)
            .iter()
            .filter_map(|p| p.resource.get("service.instance.id").cloned())
            .collect()
    };
    assert!(
        rx.wait_until(WAIT, |_| instances("hw.power").len() == 2
            && instances("gpu_sidecar.export.last_success").len() == 2),
        "{}\n{}",
        a.dump(),
        b.dump()
    );
    for id in instances("hw.power") {
        assert_eq!(uuid_version(&id), Some(4), "{id}");
    }
    // Every point of one export carries the same identity as its resource.
    for p in rx.points("hw.power") {
        assert!(p.resource.contains_key("service.instance.id"), "{p:?}");
    }
}

/// The version digit of a UUID in its text form, `None` if it is not one.
fn uuid_version(s: &str) -> Option<u32> {
    let groups: Vec<&str> = s.split('-').collect();
    let ok = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && s.chars().all(|c| c == '-' || c.is_ascii_hexdigit());
    ok.then(|| groups[2].chars().next()?.to_digit(16)).flatten()
}

#[test]
fn console_exporter_prints_otlp_json_lines_on_stdout() {
    let mut agent = Agent::builder()
        .env_mock("h200-under-load.json")
        .env("OTEL_METRICS_EXPORTER", "console")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "250ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .spawn();
    assert!(
        agent.wait_for_stdout("resourceMetrics", WAIT),
        "{}",
        agent.dump()
    );
    agent.sigterm();
    assert_eq!(
        agent
            .wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0)
    );
    let lines = agent.stdout_lines();
    let v: Value = serde_json::from_str(&lines[0]).expect("each stdout line is one JSON document");
    let metrics = &v["resourceMetrics"][0]["scopeMetrics"][0]["metrics"];
    let names: BTreeSet<_> = metrics
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains("hw.power") && names.contains("hw.gpu.memory.limit"),
        "{names:?}"
    );
    let power = metrics
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "hw.power")
        .unwrap();
    assert_eq!(power["unit"], "W");
    let value = power["gauge"]["dataPoints"][0]["asDouble"]
        .as_f64()
        .unwrap();
    assert!((680.0..700.0).contains(&value), "{value}");
    assert!(
        agent.stderr_lines().iter().any(|l| l.contains("starting")),
        "logs go to stderr"
    );
    // Console metrics bring the events to the console too (OTEL_LOGS_EXPORTER unset): the
    // run report is printed, not sent to a collector at localhost:4317 that is not there.
    let report = lines
        .iter()
        .find(|l| l.starts_with(r#"{"resourceLogs""#) && l.contains("gpu.run.report"))
        .unwrap_or_else(|| panic!("no run report event on stdout\n{}", agent.dump()));
    assert!(
        report.contains("GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5"),
        "the report covers the replayed H200: {report}"
    );
    assert!(!agent.dump().contains("export failed"), "{}", agent.dump());
}

/// `--help` names every setting of `docs/settings.md`'s tables (and nothing they lack), the
/// subcommand and the exit codes.
#[test]
fn help_lists_every_setting_and_the_subcommands() {
    let mut agent = Agent::builder().arg("--help").echo(false).spawn();
    let status = agent.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success());
    let help = agent.stdout_lines().join("\n");
    let doc = common::read_text(common::workspace_root().join("docs/settings.md"));
    let documented: BTreeSet<&str> = doc
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|row| row.split('|').nth(1).unwrap().split('`').skip(1).step_by(2))
        .collect();
    let listed: BTreeSet<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Settings are environment variables"))
        .skip(2)
        .flat_map(str::split_whitespace)
        .collect();
    assert!(documented.len() > 40, "{documented:?}");
    assert_eq!(listed, documented, "{help}");
    for needed in [
        "gpu-otel-sidecar health",
        "Exit codes: 0",
        "1 could not start",
        "2 a bad setting",
    ] {
        assert!(help.contains(needed), "{needed}: {help}");
    }
}

/// `check-config`: the settings as the agent understood them (resource attributes decoded),
/// without NVML; a bad setting exits 2 with the agent's own line.
#[test]
fn check_config_prints_what_the_agent_understood() {
    let mut agent = Agent::builder()
        .arg("check-config")
        .env("K8S_POD_NAME", "train-0")
        .env("K8S_NAMESPACE_NAME", "ml")
        .env(
            "OTEL_RESOURCE_ATTRIBUTES",
            "team=vision%2C%20research,run.id=12345678,city=Z%C3%BCrich",
        )
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization=Bearer%20secret",
        )
        // No NVML library here: check-config must not need one.
        .env("GPU_SIDECAR_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1")
        .spawn();
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("exits at once");
    assert_eq!(status.code(), Some(0), "{}", agent.dump());
    let out: Value = serde_json::from_str(&agent.stdout_lines().join("\n")).unwrap();
    let res = &out["resource"];
    assert_eq!(res["team"], "vision, research");
    assert_eq!(res["run.id"], "12345678");
    assert_eq!(res["city"], "Zürich");
    assert_eq!(res["service.instance.id"], "ml.train-0");
    assert_eq!(
        out["otlp"]["metrics"]["header_names"],
        serde_json::json!(["authorization"])
    );
    assert!(
        !agent.dump().contains("secret"),
        "header values never shown"
    );
    // The defaults of what the first version left out: the rules, the report file, the
    // sample log, the shutdown bound and the watchdog.
    assert_eq!(out["shutdown_timeout_ms"], 5000);
    assert_eq!(out["watchdog_timeout_ms"], 15000);
    assert_eq!(out["report_file"], Value::Null);
    assert_eq!(out["sample_log"], Value::Null);
    assert_eq!(
        out["rules"]["memory_near_full"],
        serde_json::json!({"enabled": true, "threshold": 95.0, "duration_ms": 10000})
    );
    assert_eq!(out["rules"].as_object().unwrap().len(), 12, "{out:#}");

    // Everything set, as the settings write it: plain JSON values, no Rust debug text.
    let mut agent = Agent::builder()
        .arg("check-config")
        .env("GPU_SIDECAR_DEVICES", "0,GPU-8f6c1e2d,MIG-5e6f7a8b")
        .env("GPU_SIDECAR_REPORT_FILE", "/out/report.json")
        .env("GPU_SIDECAR_SAMPLE_LOG", "-")
        .env("GPU_SIDECAR_SAMPLE_LOG_FORMAT", "jsonl")
        .env("GPU_SIDECAR_SAMPLE_LOG_MAX_BYTES", "1MiB")
        .env("GPU_SIDECAR_SHUTDOWN_TIMEOUT", "3s")
        .env("GPU_SIDECAR_WATCHDOG_TIMEOUT", "40s")
        .env("GPU_SIDECAR_RULE_TENSOR_CORES_IDLE_UTILIZATION", "80%")
        .env("GPU_SIDECAR_RULE_TEMPERATURE_HIGH_SAMPLES", "4")
        .env("GPU_SIDECAR_RULE_XID_ENABLED", "false")
        .env("OTEL_METRICS_EXPORTER", "console")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta")
        .env("OTEL_EXPORTER_OTLP_ENDPIONT", "http://collector:4318")
        .spawn();
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("exits at once");
    assert_eq!(status.code(), Some(0), "{}", agent.dump());
    let text = agent.stdout_lines().join("\n");
    let out: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        out["devices"],
        serde_json::json!(["0", "GPU-8f6c1e2d", "MIG-5e6f7a8b"])
    );
    assert_eq!(out["report_file"], "/out/report.json");
    assert_eq!(
        out["sample_log"],
        serde_json::json!({"target": "-", "format": "jsonl", "max_bytes": 1_048_576})
    );
    assert_eq!(out["shutdown_timeout_ms"], 3000);
    assert_eq!(out["watchdog_timeout_ms"], 40000);
    assert_eq!(out["rules"]["tensor_cores_idle"]["utilization"], 80.0);
    assert_eq!(out["rules"]["temperature_high"]["samples"], 4);
    assert_eq!(out["rules"]["xid"]["enabled"], false);
    assert_eq!(out["metrics_exporter"], "console");
    assert_eq!(out["logs_exporter"], "console");
    assert_eq!(out["otlp"]["metrics"]["protocol"], "http/protobuf");
    assert_eq!(out["otlp"]["temporality"], "delta");
    assert!(
        out["otel_not_applied"]["OTEL_EXPORTER_OTLP_ENDPIONT"]
            .as_str()
            .unwrap()
            .ends_with("did you mean OTEL_EXPORTER_OTLP_ENDPOINT?"),
        "{out:#}"
    );
    // Rust's Debug forms: enum variants with payloads, struct braces, capitalized variants.
    for debug in [
        "Index(",
        "Uuid(",
        "Some(",
        "Duration",
        "Grpc",
        "HttpProtobuf",
        "Console",
        "Delta",
        "Csv",
        "Jsonl",
    ] {
        assert!(!text.contains(debug), "{debug} in {out:#}");
    }

    let mut agent = Agent::builder()
        .arg("check-config")
        .env("OTEL_RESOURCE_ATTRIBUTES", "team=vision, research")
        .spawn();
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("exits at once");
    assert_eq!(status.code(), Some(2), "{}", agent.dump());
    assert!(agent.stdout_lines().is_empty());
    let err = agent.stderr_lines();
    assert_eq!(err.len(), 1, "{err:?}");
    assert!(err[0].contains("OTEL_RESOURCE_ATTRIBUTES"), "{}", err[0]);
}

#[test]
fn bad_setting_exits_2_naming_the_variable() {
    for (var, value, accepts) in [
        ("GPU_SIDECAR_SAMPLE_INTERVAL", "fast", "500ms, 5s or 1m"),
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "http/json",
            "grpc or http/protobuf",
        ),
        (
            "GPU_SIDECAR_DEVICES",
            "first",
            "all, pod-resources, or a comma-separated list",
        ),
        (
            "OTEL_METRICS_EXPORTER",
            "prometheus",
            "otlp, console or none",
        ),
    ] {
        let mut agent = Agent::builder().env(var, value).spawn();
        let status = agent
            .wait_exit(Duration::from_secs(10))
            .expect("exits at once");
        assert_eq!(status.code(), Some(2), "{var}={value}\n{}", agent.dump());
        let err = agent.stderr_lines();
        assert_eq!(err.len(), 1, "one line: {err:?}");
        assert!(
            err[0].contains(var) && err[0].contains(value) && err[0].contains(accepts),
            "{}",
            err[0]
        );
    }
}

/// The README's replay command with a wrong `NVML_MOCK_SCENARIO`: the mock says why on stderr,
/// and the agent's line says the library is not NVIDIA's and points there, instead of the
/// driver advice ("restart the pod") that fits a real `libnvidia-ml`.
#[test]
fn a_wrong_mock_scenario_gets_advice_for_the_mock_not_the_driver() {
    let library = common::mock_library();
    let mut agent = Agent::builder()
        .env("OTEL_METRICS_EXPORTER", "console")
        .env("GPU_SIDECAR_HEALTH_ADDR", "off")
        .env("GPU_SIDECAR_NVML_LIBRARY", &library)
        .env(
            "NVML_MOCK_SCENARIO",
            "tests/scenarios/no-such-scenario.json",
        )
        .spawn();
    assert!(
        agent.wait_for_stderr("GPU_SIDECAR_NVML_LIBRARY", WAIT),
        "{}",
        agent.dump()
    );
    let err = agent.stderr_lines();
    assert!(
        err.iter().any(|l| l.starts_with(
            "nvml-mock: cannot read the scenario file NVML_MOCK_SCENARIO=tests/scenarios/no-such-scenario.json: No such file"
        )),
        "the mock names the variable and the path: {err:#?}"
    );
    let line = err
        .iter()
        .find(|l| l.contains("ERROR") && l.contains("nvmlInit_v2"))
        .unwrap_or_else(|| panic!("{err:#?}"));
    assert!(
        line.contains(&library.display().to_string())
            && line.contains("not NVIDIA's libnvidia-ml")
            && line.contains("NVML_MOCK_SCENARIO"),
        "{line}"
    );
    for driver_advice in ["restart the pod", "daemon-reload", "cgroup"] {
        assert!(!agent.dump().contains(driver_advice), "{}", agent.dump());
    }
    agent.sigint();
    assert_eq!(
        agent.wait_exit(WAIT).and_then(|s| s.code()),
        Some(0),
        "{}",
        agent.dump()
    );
}

#[test]
fn nvml_init_error_is_explained_and_the_agent_keeps_running() {
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock("init-unknown-error.json")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .spawn();
    assert!(
        agent.wait_for_stderr("Unknown Error", WAIT),
        "{}",
        agent.dump()
    );
    assert!(
        agent.dump().contains("daemon-reload"),
        "names the usual cause"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(agent.is_running(), "keeps running and retrying");
    assert!(
        !rx.has_metric("hw.power"),
        "nothing exported as if a GPU were there"
    );
    agent.sigterm();
    assert_eq!(
        agent
            .wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0)
    );
}

/// Issue 12 (standard settings): the per-signal forms win. Metrics go over HTTP/protobuf to
/// a `/v1/metrics` URL while the general settings (gRPC) carry the events; delta temporality
/// makes counters and the histogram deltas (contiguous: each starts where the last accepted
/// one ended) and leaves up-down counters cumulative; a variable that does not apply is named
/// in one warning at start.
#[test]
fn per_signal_settings_and_delta_temporality() {
    let metrics = Receiver::start(Protocol::Http);
    let logs = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .env_mock("h200-under-load.json")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", logs.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
        .env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", metrics.metrics_url())
        .env("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta")
        .env("OTEL_TRACES_EXPORTER", "otlp")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
        .env("GPU_SIDECAR_ENERGY_INTERVAL", "200ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("GPU_SIDECAR_REPORT_FILE", "/dev/null")
        .spawn();
    assert!(
        metrics.wait_until(WAIT, |r| r.points("hw.energy").len() >= 4),
        "{}",
        agent.dump()
    );
    agent.sigterm();
    assert_eq!(
        agent.wait_exit(WAIT).unwrap().code(),
        Some(0),
        "{}",
        agent.dump()
    );
    assert!(metrics.log_requests().is_empty(), "events go over gRPC");
    assert!(
        !logs.log_events("gpu.run.report").is_empty(),
        "the run report event reached the gRPC receiver\n{}",
        agent.dump()
    );
    assert!(logs.metrics_requests().is_empty(), "metrics go over HTTP");

    let mut energy = metrics.points("hw.energy");
    energy.sort_by_key(|p| p.time_unix_nano);
    for p in &energy {
        assert_eq!(
            p.kind,
            Kind::Sum {
                monotonic: true,
                cumulative: false
            }
        );
        assert!(p.value >= 0.0 && p.time_unix_nano >= p.start_time_unix_nano);
    }
    for w in energy.windows(2) {
        assert_eq!(
            w[1].start_time_unix_nano, w[0].time_unix_nano,
            "each delta starts where the last accepted one ended"
        );
    }
    assert!(
        energy.iter().map(|p| p.value).sum::<f64>() > 0.0,
        "the deltas add up to the energy used: {energy:#?}"
    );
    let usage = metrics.last_points("hw.gpu.memory.usage");
    assert_eq!(
        usage[0].kind,
        Kind::Sum {
            monotonic: false,
            cumulative: true
        },
        "up-down counters stay cumulative"
    );
    let durations = metrics.last_points("gpu_sidecar.sample.duration");
    assert!(!durations.is_empty());
    let warned: Vec<_> = agent
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("do not apply to this agent"))
        .collect();
    assert_eq!(warned.len(), 1, "{}", agent.dump());
    assert!(warned[0].contains("OTEL_TRACES_EXPORTER"), "{}", warned[0]);
}

/// A series: its metric's name and its attributes.
type Series = (String, Vec<(String, String)>);

/// The series of one export: (metric name, its attributes), one per data point.
fn series_of(
    r: &common::Received<
        opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest,
    >,
) -> BTreeSet<Series> {
    let mut out = BTreeSet::new();
    for name in r
        .request
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .map(|m| m.name.clone())
        .collect::<BTreeSet<_>>()
    {
        for p in common::receiver::request_points(&r.request, &name) {
            let n = out.len();
            out.insert((name.clone(), p.attrs.into_iter().collect()));
            assert_eq!(
                out.len(),
                n + 1,
                "{name}: two points with one attribute set"
            );
        }
    }
    out
}

/// The H200 recording's exports with every slow group in each (as with the defaults, where
/// energy, GPM and per-process utilization come every 10 s with each export): each export's
/// series, and all of them together.
fn h200_series(detail: bool) -> (Vec<BTreeSet<Series>>, Receiver) {
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock("h200-under-load.json")
        .env("NVML_MOCK_NO_LATENCY", "1")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "500ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "1000")
        .env("GPU_SIDECAR_ENERGY_INTERVAL", "1s")
        .env("GPU_SIDECAR_GPM_INTERVAL", "1s")
        .env("GPU_SIDECAR_PROCESS_INTERVAL", "1s")
        .env("GPU_SIDECAR_METRICS_DETAIL", detail.to_string())
        .spawn();
    assert!(
        rx.wait_until(WAIT, |r| r.metrics_requests().len() >= 6),
        "{}",
        agent.dump()
    );
    agent.sigterm();
    assert!(
        agent.wait_exit(WAIT).is_some_and(|s| s.success()),
        "{}",
        agent.dump()
    );
    let exports = rx.metrics_requests().iter().map(series_of).collect();
    (exports, rx)
}

/// The counts measured equal those kept in `tests/golden/h200-series.json`, which
/// `docs/metrics.md` states (`tests/docs/metrics.rs` reads them); with `UPDATE_DOCS=1` the
/// file is written first, so `UPDATE_DOCS=1 cargo test` writes it and then the docs (the
/// `agent` tests run before the `docs` tests).
fn assert_h200_series(measured: H200Series) {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/h200-series.json");
    let text = serde_json::to_string_pretty(&serde_json::json!({
        "about": "Series in the largest export of tests/scenarios/h200-under-load.json, measured by tests/agent/e2e.rs (h200_default_export_stays_within_the_series_budget); docs/metrics.md states them. Written by UPDATE_DOCS=1 cargo test.",
        "default": measured.default,
        "detail": measured.detail,
    }))
    .unwrap()
        + "\n";
    if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &text).unwrap();
    }
    let kept = read_json(&path);
    assert_eq!(
        (kept["default"].as_u64(), kept["detail"].as_u64()),
        (Some(measured.default as u64), Some(measured.detail as u64)),
        "the H200 export's series changed; if meant, run UPDATE_DOCS=1 cargo test (tests/golden/ and then docs/metrics.md)"
    );
}

/// The series budget: the H200 recording's default export carries at most 40 series for its
/// one GPU (everything in the export counted, the agent's own included), each saying
/// something, and exactly the count docs/metrics.md states; the detail setting exports the
/// folded series too (its count is stated there as well).
#[test]
fn h200_default_export_stays_within_the_series_budget() {
    let (exports, rx) = h200_series(false);
    let all: BTreeSet<_> = exports.iter().flatten().cloned().collect();
    let most = exports.iter().map(BTreeSet::len).max().unwrap();
    let names = |set: &BTreeSet<Series>, metric: &str| -> Vec<Vec<(String, String)>> {
        set.iter()
            .filter(|(n, _)| n == metric)
            .map(|(_, a)| a.clone())
            .collect()
    };
    println!(
        "default: {most} series in the largest export, {} in all exports together",
        all.len()
    );
    assert!(most <= SERIES_BUDGET, "{most} series: {all:#?}");
    assert_eq!(
        all.len(),
        most,
        "no series beyond those of the largest export: {all:#?}"
    );
    let default_most = most;
    // Nothing at 0 for what never happened, and the folds: the reason that is active, no pipe
    // at 0, the process's SM share only, one sample-duration series.
    for counter in [
        "nvidia.gpu.alerts",
        "nvidia.gpu.xid.errors",
        "nvidia.gpu.xid.last_seen",
        "gpu_sidecar.export.failures",
    ] {
        assert!(names(&all, counter).is_empty(), "{counter}");
    }
    let reasons = names(&all, "nvidia.gpu.clocks_event.active");
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(reasons[0].contains(&(
        "nvidia.gpu.clocks_event.reason".into(),
        "sw_power_cap".into()
    )));
    assert!(names(&all, "nvidia.gpu.pipe.activity").is_empty());
    let tasks = names(&all, "nvidia.gpu.process.utilization");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert!(tasks[0].contains(&("hw.gpu.task".into(), "general".into())));
    assert_eq!(names(&all, "gpu_sidecar.sample.duration"), [vec![]]);
    // What the dashboard and the rules read is all there.
    for metric in [
        "hw.gpu.utilization",
        "hw.gpu.memory.usage",
        "hw.gpu.memory.limit",
        "hw.gpu.memory.utilization",
        "nvidia.gpu.memory.reserved",
        "nvidia.gpu.memory_controller.utilization",
        "hw.temperature",
        "hw.power",
        "nvidia.gpu.power.limit",
        "hw.energy",
        "nvidia.gpu.clock.frequency",
        "nvidia.gpu.performance_state",
        "hw.errors",
        "hw.status",
        "nvidia.gpu.tensor.activity",
        "nvidia.gpu.dram.activity",
        "nvidia.gpu.sm.activity",
        "gpu_sidecar.export.last_success",
    ] {
        assert!(!names(&all, metric).is_empty(), "{metric} missing");
    }
    assert_eq!(
        names(&all, "hw.gpu.utilization").len(),
        3,
        "general, encoder, decoder"
    );
    assert_eq!(names(&all, "hw.status").len(), 3, "ok, degraded, failed");
    let count = rx.last_points("gpu_sidecar.sample.duration")[0]
        .count
        .unwrap();
    assert!(count >= 6, "one value per sample: {count}");

    let (exports, _) = h200_series(true);
    let all: BTreeSet<_> = exports.iter().flatten().cloned().collect();
    let most = exports.iter().map(BTreeSet::len).max().unwrap();
    println!(
        "detail: {most} series in the largest export, {} in all exports together",
        all.len()
    );
    assert_h200_series(H200Series {
        default: default_most,
        detail: most,
    });
    assert_eq!(names(&all, "nvidia.gpu.clocks_event.active").len(), 9);
    assert_eq!(
        names(&all, "nvidia.gpu.pipe.activity").len(),
        3,
        "fp16, fp32, fp64 (no integer on the H200)"
    );
    assert_eq!(names(&all, "nvidia.gpu.process.utilization").len(), 3);
    assert!(
        names(&all, "gpu_sidecar.sample.duration").len() >= 4,
        "by group"
    );
}
