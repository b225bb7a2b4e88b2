//! The engine and every rule on synthetic snapshots with explicit times (no clock, no
//! sleeping), and on the H200 recording.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::logs::Severity;
use opentelemetry::Value;

use super::alert::{Alert, AlertState};
use super::catalogue::{Hold, RuleId};
use super::engine::Engine;
use super::to_event;
use crate::config::{Config, RulesConfig};
use crate::sampling::{DeviceInfo, DeviceSample, DeviceState, ProcessSample, Snapshot};

pub(super) const GIB: u64 = 1 << 30;
pub(super) const TOTAL: u64 = 80 * GIB;

pub(super) fn info(index: u32) -> Arc<DeviceInfo> {
    Arc::new(DeviceInfo {
        index,
        uuid: format!("GPU-00000000-0000-4000-8000-00000000000{index}"),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        serial: None,
        pci_bus_id: Some(format!("00000000:{:02X}:00.0", 0x18 + 0x10 * index)),
        vbios_version: None,
        driver_version: None,
        mig: None,
        gpm_supported: None,
    })
}

/// A healthy busy GPU: 95 % busy, 40 GiB of 80 used by one process, 70 °C, 500 W of 700,
/// no clock-event reason.
pub(super) fn busy(index: u32) -> DeviceSample {
    let mut d = DeviceSample::empty(info(index), DeviceState::Ok);
    d.utilization_gpu_percent = Some(95);
    d.utilization_memory_controller_percent = Some(30);
    d.memory_total_bytes = Some(TOTAL);
    d.memory_used_bytes = Some(40 * GIB);
    d.memory_free_bytes = Some(40 * GIB);
    d.memory_reserved_bytes = Some(0);
    d.temperature_gpu_celsius = Some(70);
    d.power_milliwatts = Some(500_000);
    d.power_limit_milliwatts = Some(700_000);
    d.clock_sm_mhz = Some(1980);
    d.clocks_event_reasons = Some(0);
    d.performance_state = Some(0);
    d.processes = Some(vec![ProcessSample {
        pid: 1000 + index,
        used_memory_bytes: Some(40 * GIB),
        ..Default::default()
    }]);
    d
}

pub(super) struct Clock {
    pub(super) instant: Instant,
    pub(super) wall: SystemTime,
    seq: u64,
}

impl Clock {
    pub(super) fn new() -> Self {
        Self {
            instant: Instant::now(),
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
            seq: 0,
        }
    }

    pub(super) fn at(&mut self, secs: f64, devices: Vec<DeviceSample>) -> Snapshot {
        self.seq += 1;
        let d = Duration::from_secs_f64(secs);
        Snapshot {
            taken_at: self.wall + d,
            taken_instant: self.instant + d,
            seq: self.seq,
            export: true,
            devices,
        }
    }

    pub(super) fn secs(&self, a: &Alert) -> f64 {
        a.time.duration_since(self.wall).unwrap().as_secs_f64()
    }
}

pub(super) fn config(vars: &[(&str, &str)]) -> RulesConfig {
    Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .unwrap()
        .rules
}

/// Feeds samples every `step` seconds from 0 to `end` (inclusive), built by `f(t)`;
/// returns the alerts with their sample time in seconds.
pub(super) fn replay(
    engine: &mut Engine,
    step: f64,
    end: f64,
    mut f: impl FnMut(f64) -> Vec<DeviceSample>,
) -> Vec<(f64, Alert)> {
    let mut clock = Clock::new();
    let mut out = Vec::new();
    let n = (end / step).round() as u64;
    for i in 0..=n {
        let t = i as f64 * step;
        let snap = clock.at(t, f(t));
        for a in engine.observe(&snap) {
            assert_values_declared(&a);
            out.push((clock.secs(&a), a));
        }
    }
    out
}

/// Every value an alert carries is declared on its rule's row (`RuleSpec::values`).
pub(super) fn assert_values_declared(a: &Alert) {
    let declared = a.rule.spec().values;
    for kv in &a.values {
        assert!(
            declared.iter().any(|v| v.key == kv.key.as_str()),
            "{:?} carries {}, not on its row",
            a.rule,
            kv.key
        );
    }
}

pub(super) fn value<'a>(a: &'a Alert, key: &str) -> &'a Value {
    &a.values
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .unwrap_or_else(|| panic!("{key} not in {:?}", a.values))
        .value
}

pub(super) fn f64_of(v: &Value) -> f64 {
    match v {
        Value::F64(f) => *f,
        Value::I64(i) => *i as f64,
        other => panic!("not a number: {other:?}"),
    }
}

pub(super) fn summary(alerts: &[(f64, Alert)]) -> Vec<(f64, RuleId, AlertState)> {
    alerts.iter().map(|(t, a)| (*t, a.rule, a.state)).collect()
}

#[test]
fn memory_near_full_fires_after_10_s_once_and_resolves_after_10_s_clear() {
    let mut engine = Engine::new(&config(&[]));
    // 1 s samples: 40 GiB until 5 s, 77 GiB (96.25 %) until 40 s, then 60 GiB.
    let alerts = replay(&mut engine, 1.0, 70.0, |t| {
        let mut d = busy(0);
        d.memory_used_bytes = Some(if (5.0..40.0).contains(&t) {
            77 * GIB
        } else if t >= 40.0 {
            60 * GIB
        } else {
            40 * GIB
        });
        vec![d]
    });
    assert_eq!(
        summary(&alerts),
        vec![
            (15.0, RuleId::MemoryNearFull, AlertState::Firing),
            (50.0, RuleId::MemoryNearFull, AlertState::Resolved),
        ]
    );
    let fired = &alerts[0].1;
    assert_eq!(fired.hw_id.as_deref(), Some(info(0).uuid.as_str()));
    assert_eq!(fired.active_for, Duration::from_secs(10));
    assert_eq!(fired.samples, 11);
    assert_eq!(fired.threshold, Some(95.0));
    assert_eq!(
        f64_of(value(fired, "hw.gpu.memory.utilization")),
        77.0 / 80.0
    );
    assert_eq!(
        f64_of(value(fired, "hw.gpu.memory.usage")),
        (77 * GIB) as f64
    );
    assert!(fired.summary.contains("96.2% used"), "{}", fired.summary);
    // The GPU's readings at firing, through the metric catalogue.
    let readings: BTreeMap<String, Value> = fired
        .readings
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.clone()))
        .collect();
    assert_eq!(readings["nvidia.gpu.reading.hw.power"], Value::F64(500.0));
    assert_eq!(
        readings["nvidia.gpu.reading.hw.gpu.memory.usage"],
        Value::I64((77 * GIB) as i64)
    );
    assert_eq!(
        readings["nvidia.gpu.reading.hw.temperature.gpu"],
        Value::F64(70.0)
    );
    assert_eq!(
        readings["nvidia.gpu.reading.hw.gpu.utilization.general"],
        Value::F64(0.95)
    );
    assert_eq!(readings["nvidia.gpu.reading.hw.status.ok"], Value::I64(1));
    assert!(!readings.contains_key("nvidia.gpu.reading.hw.temperature.memory"));
    let resolved = &alerts[1].1;
    assert_eq!(resolved.active_for, Duration::from_secs(35));
    assert!(resolved.readings.is_empty());
}

#[test]
fn temperature_high_needs_three_consecutive_samples() {
    let mut engine = Engine::new(&config(&[]));
    let temps = [80, 86, 86, 84, 86, 85, 90, 90, 84, 80, 86, 79, 70];
    let alerts = replay(&mut engine, 5.0, 5.0 * (temps.len() - 1) as f64, |t| {
        let mut d = busy(0);
        d.temperature_gpu_celsius = Some(temps[(t / 5.0).round() as usize]);
        vec![d]
    });
    // Hot at samples 1, 2 (broken by 84), then 4, 5, 6: fires at sample 6 (30 s). Clear
    // at 8, 9, (10 is hot again), 11, 12: resolves only after three in a row: never here.
    assert_eq!(
        summary(&alerts),
        vec![(30.0, RuleId::TemperatureHigh, AlertState::Firing)]
    );
    assert_eq!(alerts[0].1.samples, 3);
    assert_eq!(f64_of(value(&alerts[0].1, "hw.temperature")), 90.0);
    let mut engine = Engine::new(&config(&[]));
    let temps = [86, 86, 86, 84, 84, 84];
    let alerts = replay(&mut engine, 5.0, 25.0, |t| {
        let mut d = busy(0);
        d.temperature_gpu_celsius = Some(temps[(t / 5.0).round() as usize]);
        vec![d]
    });
    assert_eq!(
        summary(&alerts),
        vec![
            (10.0, RuleId::TemperatureHigh, AlertState::Firing),
            (25.0, RuleId::TemperatureHigh, AlertState::Resolved),
        ]
    );
}

#[test]
fn power_cap_is_info_and_thermal_slowdown_is_warning() {
    let mut engine = Engine::new(&config(&[]));
    // Power cap 0..60 s (with one clear sample at 20 s), thermal slowdown 40..100 s.
    let alerts = replay(&mut engine, 5.0, 200.0, |t| {
        let mut d = busy(0);
        let mut bits = 0;
        if t < 60.0 && t != 20.0 {
            bits |= 0x4;
        }
        if (40.0..100.0).contains(&t) {
            bits |= 0x20;
        }
        d.clocks_event_reasons = Some(bits);
        d.power_milliwatts = Some(691_000);
        vec![d]
    });
    assert_eq!(
        summary(&alerts),
        vec![
            (55.0, RuleId::ClocksPowerCapped, AlertState::Firing),
            (70.0, RuleId::ClocksSlowdown, AlertState::Firing),
            (90.0, RuleId::ClocksPowerCapped, AlertState::Resolved),
            (130.0, RuleId::ClocksSlowdown, AlertState::Resolved),
        ]
    );
    let cap = &alerts[0].1;
    assert_eq!(
        value(cap, "nvidia.gpu.alert.clocks_event.reasons").to_string(),
        "[\"sw_power_cap\",\"sw_thermal_slowdown\"]"
    );
    assert_eq!(f64_of(value(cap, "hw.power")), 691.0);
    assert_eq!(f64_of(value(cap, "nvidia.gpu.power.limit")), 700.0);
    assert!(
        cap.summary.contains("691.0 W of a 700 W limit"),
        "{}",
        cap.summary
    );
    assert_eq!(to_event(cap).severity, Severity::Info);
    assert_eq!(to_event(&alerts[1].1).severity, Severity::Warn);
    assert!(alerts[1].1.summary.contains("sw_thermal_slowdown"));
    // A resolved record is INFO whatever the rule's severity.
    assert_eq!(to_event(&alerts[3].1).severity, Severity::Info);
}

#[test]
fn input_starvation_needs_a_process_holding_memory() {
    let run = |processes: Option<Vec<ProcessSample>>| {
        let mut engine = Engine::new(&config(&[]));
        replay(&mut engine, 5.0, 400.0, move |t| {
            let mut d = busy(0);
            d.processes = processes.clone();
            d.utilization_gpu_percent = Some(if (50.0..250.0).contains(&t) { 12 } else { 95 });
            vec![d]
        })
    };
    let holding = Some(vec![ProcessSample {
        pid: 7,
        used_memory_bytes: Some(30 * GIB),
        ..Default::default()
    }]);
    let alerts = run(holding);
    assert_eq!(
        summary(&alerts),
        vec![
            (170.0, RuleId::InputStarvation, AlertState::Firing),
            (370.0, RuleId::InputStarvation, AlertState::Resolved),
        ]
    );
    let a = &alerts[0].1;
    assert_eq!(f64_of(value(a, "hw.gpu.utilization")), 0.12);
    assert_eq!(f64_of(value(a, "nvidia.gpu.alert.process.count")), 1.0);
    assert_eq!(
        f64_of(value(a, "nvidia.gpu.alert.process.memory")),
        (30 * GIB) as f64
    );
    assert!(
        a.summary
            .contains("GPU 12% busy (threshold 20%) with 1 process(es) holding 30.0 GiB"),
        "{}",
        a.summary
    );
    // Unknown memory per process still counts as holding memory (a CUDA context).
    let unknown = Some(vec![ProcessSample {
        pid: 7,
        used_memory_bytes: None,
        ..Default::default()
    }]);
    assert_eq!(run(unknown).len(), 2);
    // An idle GPU with no process, or a process list NVML cannot read: never.
    assert!(run(Some(vec![])).is_empty());
    assert!(run(None).is_empty());
    assert!(run(Some(vec![ProcessSample {
        pid: 7,
        used_memory_bytes: Some(0),
        ..Default::default()
    }]))
    .is_empty());
}

#[test]
fn imbalance_fires_once_for_the_pod_named_after_the_idlest_gpu() {
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 5.0, 600.0, |t| {
        (0..4)
            .map(|i| {
                let mut d = busy(i);
                d.utilization_gpu_percent = Some(match (i, t) {
                    (2, t) if (100.0..300.0).contains(&t) => 30,
                    (_, _) => 90 + i,
                });
                // From 400 s GPU 3 holds no memory: no longer a pod-wide imbalance question.
                if i == 3 && t >= 400.0 {
                    d.processes = Some(vec![]);
                    d.utilization_gpu_percent = Some(0);
                }
                d
            })
            .collect()
    });
    assert_eq!(
        summary(&alerts),
        vec![
            (220.0, RuleId::UtilizationImbalance, AlertState::Firing),
            (420.0, RuleId::UtilizationImbalance, AlertState::Resolved),
        ]
    );
    let a = &alerts[0].1;
    assert_eq!(a.hw_id.as_deref(), Some(info(2).uuid.as_str()));
    assert_eq!(alerts[1].1.hw_id.as_deref(), Some(info(2).uuid.as_str()));
    assert_eq!(
        f64_of(value(a, "nvidia.gpu.alert.utilization.spread")),
        0.63
    );
    assert_eq!(f64_of(value(a, "nvidia.gpu.alert.utilization.min")), 0.30);
    assert_eq!(f64_of(value(a, "nvidia.gpu.alert.utilization.max")), 0.93);
    assert_eq!(
        value(a, "nvidia.gpu.alert.busiest.hw.id").to_string(),
        info(3).uuid
    );
    assert_eq!(
        value(a, "nvidia.gpu.alert.utilizations").to_string(),
        "[0.9,0.91,0.3,0.93]"
    );
    // The text names every GPU by its UUID, with the nvidia-smi index and PCI bus id.
    let body = to_event(a).body;
    for i in 0..4 {
        assert!(body.contains(&info(i).uuid), "{body}");
    }
    assert!(
        body.contains(&format!(
            "{} (nvidia-smi GPU 2, PCI 00000000:38:00.0) 30%",
            info(2).uuid
        )),
        "{body}"
    );
    // GPU 2 at 30 % is not starving (threshold 20 %): nothing else fired.
    // One GPU alone: the rule has nothing to compare.
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 5.0, 600.0, |_| {
        let mut d = busy(0);
        d.utilization_gpu_percent = Some(30);
        vec![d]
    });
    assert!(alerts.is_empty());
}

/// Memory (GiB) of a job: loads to 20 GiB in the first 30 s, then flat with ±0.0625 GiB
/// jitter; from `leak_from` it grows `rate` GiB per minute.
fn job_memory(t: f64, leak_from: f64, rate: f64) -> u64 {
    let base = if t < 30.0 { 20.0 * t / 30.0 } else { 20.0 };
    let jitter = if (t as u64 / 5) % 2 == 0 {
        0.0625
    } else {
        -0.0625
    };
    let leak = if t > leak_from {
        rate * (t - leak_from) / 60.0
    } else {
        0.0
    };
    ((base + jitter + leak) * GIB as f64) as u64
}

fn leak_run(rate: f64, leak_from: f64, end: f64, drop_at: Option<f64>) -> Vec<(f64, Alert)> {
    let mut engine = Engine::new(&config(&[]));
    replay(&mut engine, 5.0, end, |t| {
        let mut d = busy(0);
        let used = match drop_at {
            Some(x) if t >= x => 20 * GIB,
            _ => job_memory(t, leak_from, rate),
        };
        d.memory_used_bytes = Some(used);
        vec![d]
    })
}

#[test]
fn memory_leak_fires_after_ten_minutes_of_rise_with_time_to_full() {
    // Leak of 0.5 GiB/min from 300 s; memory drops back at 1500 s.
    let alerts = leak_run(0.5, 300.0, 2000.0, Some(1500.0));
    let s = summary(&alerts);
    assert_eq!(s.len(), 2, "{s:?}");
    let (fired_at, a) = (&alerts[0].0, &alerts[0].1);
    assert_eq!((a.rule, a.state), (RuleId::MemoryLeak, AlertState::Firing));
    // Rising for 10 min after the leak started, not before; the local check needs a
    // minute or so of rise to see it.
    assert!(*fired_at >= 300.0 + 600.0, "fired at {fired_at}");
    assert!(*fired_at <= 300.0 + 600.0 + 120.0, "fired at {fired_at}");
    let rate = f64_of(value(a, "nvidia.gpu.alert.memory.growth_rate"));
    let expected = 0.5 * GIB as f64 / 60.0;
    assert!(
        (rate - expected).abs() / expected < 0.05,
        "{rate} vs {expected}"
    );
    let used = f64_of(value(a, "hw.gpu.memory.usage"));
    let to_full = f64_of(value(a, "nvidia.gpu.alert.memory.time_to_full"));
    let expected_to_full = (TOTAL as f64 - used) / expected;
    assert!(
        (to_full - expected_to_full).abs() / expected_to_full < 0.05,
        "{to_full} vs {expected_to_full}"
    );
    // About 25 GiB used of 80 at 0.5 GiB/min: full in about 110 minutes.
    assert!((6000.0..7200.0).contains(&to_full), "{to_full}");
    let growth = f64_of(value(a, "nvidia.gpu.alert.memory.growth"));
    assert!(
        (growth - 5.0 * GIB as f64).abs() < 0.3 * GIB as f64,
        "{growth}"
    );
    assert!(
        a.summary.contains("rising 512.0 MiB/min") || a.summary.contains("rising 51"),
        "{}",
        a.summary
    );
    // The drop ends the rise once it weighs in the last 2 min (10 min / 5), and resolves
    // it after the clear hold (2 min more).
    let (resolved_at, r) = (&alerts[1].0, &alerts[1].1);
    assert_eq!(r.state, AlertState::Resolved);
    assert!((1620.0..=1740.0).contains(resolved_at), "{resolved_at}");
}

#[test]
fn memory_leak_ignores_loading_plateaus_sawtooth_and_slow_growth() {
    // Load then flat for an hour.
    assert!(leak_run(0.0, 0.0, 3600.0, None).is_empty());
    // Below the threshold: 1 % of 80 GiB per 10 min is 0.08 GiB/min; 0.03 GiB/min is not a
    // leak by this setting.
    assert!(leak_run(0.03, 300.0, 3600.0, None).is_empty());
    // Sawtooth: rises 0.5 GiB/min for 8 minutes, falls back, again and again.
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 5.0, 3600.0, |t| {
        let mut d = busy(0);
        let phase = t % 540.0;
        let rise = if phase < 480.0 {
            0.5 * phase / 60.0
        } else {
            0.0
        };
        d.memory_used_bytes = Some(((20.0 + rise) * GIB as f64) as u64);
        vec![d]
    });
    assert!(alerts.is_empty(), "{:?}", summary(&alerts));
}

#[test]
fn disabled_rules_and_changed_thresholds() {
    let vars = [
        ("GPU_SIDECAR_RULE_MEMORY_NEAR_FULL_ENABLED", "false"),
        ("GPU_SIDECAR_RULE_TEMPERATURE_HIGH_THRESHOLD", "60"),
        ("GPU_SIDECAR_RULE_TEMPERATURE_HIGH_SAMPLES", "1"),
    ];
    let mut engine = Engine::new(&config(&vars));
    let alerts = replay(&mut engine, 1.0, 30.0, |_| {
        let mut d = busy(0);
        d.memory_used_bytes = Some(79 * GIB);
        vec![d]
    });
    assert_eq!(
        summary(&alerts),
        vec![(0.0, RuleId::TemperatureHigh, AlertState::Firing)]
    );
    let every_rule_off: Vec<(String, String)> = super::RULES
        .iter()
        .map(|r| (r.var("ENABLED"), "false".to_string()))
        .collect();
    let c = Config::from_vars(every_rule_off).unwrap().rules;
    assert!(Engine::new(&c).is_empty());
    assert!(!c.any_enabled());
    assert_eq!(c.get(RuleId::TemperatureHigh).hold, Hold::Samples(3));
}

#[test]
fn event_record_carries_names_severity_attributes_and_hint() {
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 1.0, 12.0, |_| {
        let mut d = busy(0);
        d.memory_used_bytes = Some(78 * GIB);
        vec![d]
    });
    let e = to_event(&alerts[0].1);
    assert_eq!(e.name, "nvidia.gpu.alert.memory_near_full");
    assert_eq!(e.severity, Severity::Warn);
    let attrs: BTreeMap<String, String> = e
        .attributes
        .iter()
        .map(|kv| (kv.key.to_string(), kv.value.to_string()))
        .collect();
    assert_eq!(attrs["hw.id"], info(0).uuid);
    assert_eq!(attrs["hw.type"], "gpu");
    assert_eq!(attrs["nvidia.gpu.alert.rule"], "memory_near_full");
    assert_eq!(attrs["nvidia.gpu.alert.state"], "firing");
    assert_eq!(attrs["nvidia.gpu.alert.severity"], "warning");
    assert_eq!(attrs["nvidia.gpu.alert.threshold"], "95");
    assert_eq!(attrs["nvidia.gpu.alert.active_for"], "10");
    assert_eq!(attrs["nvidia.gpu.alert.samples"], "11");
    assert_eq!(attrs["nvidia.gpu.reading.hw.power"], "500");
    assert_eq!(
        e.body,
        format!(
            "{} (nvidia-smi GPU 0, PCI 00000000:18:00.0): memory 97.5% used (78.0 GiB of 80.0 GiB; threshold 95%) for 10s. {}",
            info(0).uuid,
            RuleId::MemoryNearFull.spec().hint
        )
    );
    assert_eq!(
        e.time,
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_010))
    );
}

/// The H200 recording (tests/scenarios/h200-under-load.json, converted from the real
/// fixture), replayed twice at its own times: only the power cap it really had fires.
#[test]
fn h200_recording_fires_only_the_power_cap() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scenarios/h200-under-load.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let scen: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dev = &scen["devices"][0];
    let reserved = dev["defaults"]["mem_reserved"].as_u64().unwrap();
    let limit = dev["defaults"]["power_limit_mw"].as_u64().unwrap() as u32;
    let rows = dev["timeline"].as_array().unwrap();
    let info = Arc::new(DeviceInfo {
        index: 0,
        uuid: dev["uuid"].as_str().unwrap().into(),
        name: Some("NVIDIA H200".into()),
        serial: None,
        pci_bus_id: None,
        vbios_version: None,
        driver_version: None,
        mig: None,
        gpm_supported: None,
    });
    let period = 30.153;
    let mut engine = Engine::new(&config(&[]));
    let mut clock = Clock::new();
    let mut alerts = Vec::new();
    for lap in 0..3 {
        for r in rows {
            let u = |k: &str| r[k].as_u64().unwrap();
            let mut d = DeviceSample::empty(info.clone(), DeviceState::Ok);
            d.utilization_gpu_percent = Some(u("util_gpu") as u32);
            d.memory_total_bytes = Some(u("mem_total"));
            d.memory_used_bytes = Some(u("mem_used") - reserved);
            d.temperature_gpu_celsius = Some(u("temp_gpu") as u32);
            d.power_milliwatts = Some(u("power_mw") as u32);
            d.power_limit_milliwatts = Some(limit);
            d.clocks_event_reasons = Some(u("clocks_event_reasons"));
            d.processes = Some(
                r["processes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| ProcessSample {
                        pid: p[0].as_u64().unwrap() as u32,
                        used_memory_bytes: p[1].as_u64(),
                        ..Default::default()
                    })
                    .collect(),
            );
            let t = lap as f64 * period + r["t"].as_f64().unwrap();
            let snap = clock.at(t, vec![d]);
            for a in engine.observe(&snap) {
                alerts.push((clock.secs(&a), a));
            }
        }
    }
    assert_eq!(alerts.len(), 1, "{:?}", summary(&alerts));
    let (t, a) = &alerts[0];
    assert_eq!(
        (a.rule, a.state),
        (RuleId::ClocksPowerCapped, AlertState::Firing)
    );
    assert!((30.0..30.6).contains(t), "{t}");
    let w = f64_of(value(a, "hw.power"));
    assert!((687.0..696.0).contains(&w), "{w}");
    assert_eq!(f64_of(value(a, "nvidia.gpu.power.limit")), 700.0);
    assert_eq!(to_event(a).severity, Severity::Info);
}

/// Cost of judging one snapshot: 8 GPUs, all leaking (both leak slopes fitted at each 5 s
/// bucket), 1 s samples for 20 minutes. A measurement, not an assertion:
/// `cargo test --release --lib rules::tests::observe_cost -- --ignored --nocapture`; the
/// curve over a run's length is `GPU_SIDECAR_BENCH_RULES_CURVE=1 cargo bench --bench tick`.
#[test]
#[ignore]
fn observe_cost() {
    for (step, label) in [(1.0, "1 s"), (0.1, "100 ms")] {
        let mut engine = Engine::new(&config(&[]));
        let mut clock = Clock::new();
        let n = (1200.0 / step) as u64;
        let mut times = Vec::new();
        for i in 0..=n {
            let t = i as f64 * step;
            let devices = (0..8)
                .map(|g| {
                    let mut d = busy(g);
                    d.memory_used_bytes = Some(job_memory(t, 0.0, 0.5));
                    d
                })
                .collect();
            let snap = clock.at(t, devices);
            let start = Instant::now();
            let _ = engine.observe(&snap);
            if t >= 600.0 {
                times.push(start.elapsed());
            }
        }
        times.sort();
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        eprintln!(
            "observe(), 8 GPUs, {label} samples, 10-min leak window: mean {:?}, median {:?}, max {:?}",
            mean,
            times[times.len() / 2],
            times[times.len() - 1]
        );
    }
}
