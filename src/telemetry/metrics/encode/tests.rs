use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point;

use super::*;
use crate::sampling::{DeviceInfo, DeviceSample, DeviceState};

fn device(energy_mj: Option<u64>) -> DeviceSample {
    let info = Arc::new(DeviceInfo {
        uuid: "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5".into(),
        name: Some("NVIDIA H200".into()),
        ..DeviceInfo::default()
    });
    let mut d = DeviceSample::empty(info, DeviceState::Ok);
    d.power_milliwatts = Some(700_000);
    d.memory_used_bytes = Some(1 << 30);
    d.ecc_corrected_total = Some(7);
    d.energy_millijoules = energy_mj;
    d
}

/// (name, start, time, value) of every sum point in `request`.
fn sums(request: &ExportMetricsServiceRequest) -> Vec<(String, u64, u64, f64)> {
    let mut out = Vec::new();
    for m in request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
    {
        if let Some(Data::Sum(sum)) = &m.data {
            for p in &sum.data_points {
                let v = match p.value {
                    Some(number_data_point::Value::AsDouble(v)) => v,
                    Some(number_data_point::Value::AsInt(v)) => v as f64,
                    None => f64::NAN,
                };
                out.push((m.name.clone(), p.start_time_unix_nano, p.time_unix_nano, v));
            }
        }
    }
    out
}

/// The encoder with an injected clock: snapshots every second, 700 J per second, the
/// wall clock stepped back one hour after the 5th. No sum point ends before it starts,
/// none goes down under one start time, the energy series starts again at the step.
#[test]
fn a_wall_clock_step_back_gives_no_point_before_its_start() {
    let resource = opentelemetry_sdk::Resource::builder_empty().build();
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let m0 = Instant::now();
    let mut enc = Encoder::new(
        &resource,
        TemporalityPreference::Cumulative,
        Duration::from_secs(3600),
        t0,
    );
    let recorded = Recorded::new();
    let mut energy = Vec::new();
    let mut all = Vec::new();
    for k in 0..10u32 {
        let step = if k >= 5 {
            Duration::from_secs(3600)
        } else {
            Duration::ZERO
        };
        let wall = t0 + Duration::from_secs(u64::from(k)) - step;
        let mono = m0 + Duration::from_secs(u64::from(k));
        let snap = Snapshot {
            taken_at: wall,
            taken_instant: mono,
            seq: u64::from(k) + 1,
            export: true,
            devices: vec![device(Some(3_600_000_000 + 700_000 * u64::from(k)))],
        };
        let now = Stamp {
            wall: wall + Duration::from_millis(2),
            mono: mono + Duration::from_millis(2),
        };
        let batch = enc.encode(Some(&snap), &recorded, &OwnValues::default(), now);
        for p in sums(&batch.request) {
            assert!(p.2 >= p.1, "tick {k}: {p:?} ends before it starts");
            if p.0 == "hw.energy" {
                energy.push(p.clone());
            }
            all.push(p);
        }
        enc.accepted(batch);
    }
    assert_eq!(
        energy[0].3, 0.0,
        "counts from the first reading, not 3.6 MJ"
    );
    assert_eq!(energy[4].3, 2800.0);
    assert_eq!(energy[5].3, 0.0, "a new stream at the step");
    assert_eq!(energy[9].3, 2800.0);
    assert_ne!(energy[5].1, energy[4].1);
    for name in ["hw.energy", "hw.errors", "gpu_sidecar.export.failures"] {
        let mine: Vec<_> = all.iter().filter(|p| p.0 == name).collect();
        for w in mine.windows(2) {
            if w[0].1 == w[1].1 {
                assert!(w[1].3 >= w[0].3, "{name} went down under one start");
            }
        }
    }
}

#[test]
fn temporality_preference_per_instrument_kind() {
    use TemporalityPreference::*;
    assert!(!is_delta(Cumulative, Kind::Counter));
    assert!(is_delta(Delta, Kind::ObservableCounter));
    assert!(is_delta(Delta, Kind::Histogram));
    assert!(!is_delta(LowMemory, Kind::ObservableCounter));
    assert!(is_delta(LowMemory, Kind::Counter));
    assert!(is_delta(LowMemory, Kind::Histogram));
}

/// A slow group not read at a tick is not in that tick's export: energy is absent from
/// a snapshot that did not read it, never the last reading under a later time.
#[test]
fn a_value_not_read_at_the_tick_is_not_exported() {
    let resource = opentelemetry_sdk::Resource::builder_empty().build();
    let mut enc = Encoder::new(
        &resource,
        TemporalityPreference::Cumulative,
        Duration::from_secs(3600),
        SystemTime::now(),
    );
    let snap = |seq: u64, e: Option<u64>| Snapshot {
        taken_at: SystemTime::now(),
        taken_instant: Instant::now(),
        seq,
        export: true,
        devices: vec![device(e)],
    };
    let names = |b: &Batch| -> Vec<String> {
        b.request.resource_metrics[0].scope_metrics[0]
            .metrics
            .iter()
            .map(|m| m.name.clone())
            .collect()
    };
    let r = Recorded::new();
    let b = enc.encode(
        Some(&snap(1, Some(5))),
        &r,
        &OwnValues::default(),
        Stamp::now(),
    );
    assert!(names(&b).contains(&"hw.energy".to_string()));
    let b = enc.encode(
        Some(&snap(2, None)),
        &r,
        &OwnValues::default(),
        Stamp::now(),
    );
    assert!(!names(&b).contains(&"hw.energy".to_string()));
    assert!(names(&b).contains(&"hw.power".to_string()));
}

/// The clock-event reasons of each export, `(reason, value)`.
fn reasons(request: &ExportMetricsServiceRequest) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for m in request
        .resource_metrics
        .iter()
        .flat_map(|r| &r.scope_metrics)
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == "nvidia.gpu.clocks_event.active")
    {
        if let Some(Data::Sum(sum)) = &m.data {
            for p in &sum.data_points {
                let reason = p
                    .attributes
                    .iter()
                    .find(|kv| kv.key == "nvidia.gpu.clocks_event.reason")
                    .and_then(|kv| kv.value.clone())
                    .map(|v| format!("{:?}", v.value))
                    .unwrap_or_default();
                let v = match p.value {
                    Some(number_data_point::Value::AsInt(v)) => v as f64,
                    _ => f64::NAN,
                };
                out.push((reason, v));
            }
        }
    }
    out
}

/// A folded breakdown: a clock-event reason is exported from the first export where it is
/// active, then at every export, 0 included (never left standing at 1 by going away);
/// with detail, every reason from the start.
#[test]
fn folded_reasons_appear_when_first_active_and_stay() {
    let resource = opentelemetry_sdk::Resource::builder_empty().build();
    let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let m0 = Instant::now();
    let recorded = Recorded::new();
    // Power cap at every export, thermal slowdown (0x40) at the second only.
    let bits = [0x4u64, 0x44, 0x4];
    let run = |detail: bool| -> Vec<Vec<(String, f64)>> {
        let mut enc = Encoder::new(
            &resource,
            TemporalityPreference::Cumulative,
            Duration::from_secs(3600),
            t0,
        )
        .with_detail(detail);
        bits.iter()
            .enumerate()
            .map(|(k, b)| {
                let mut d = device(None);
                d.clocks_event_reasons = Some(*b);
                let at = Stamp {
                    wall: t0 + Duration::from_secs(k as u64),
                    mono: m0 + Duration::from_secs(k as u64),
                };
                let snap = Snapshot {
                    taken_at: at.wall,
                    taken_instant: at.mono,
                    seq: k as u64 + 1,
                    export: true,
                    devices: vec![d],
                };
                reasons(
                    &enc.encode(Some(&snap), &recorded, &OwnValues::default(), at)
                        .request,
                )
            })
            .collect()
    };
    let s = |r: &str| {
        format!(
            "{:?}",
            Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(r.into()))
        )
    };
    let default = run(false);
    assert_eq!(default[0], [(s("sw_power_cap"), 1.0)]);
    assert_eq!(
        default[1],
        [(s("sw_power_cap"), 1.0), (s("hw_thermal_slowdown"), 1.0)]
    );
    assert_eq!(
        default[2],
        [(s("sw_power_cap"), 1.0), (s("hw_thermal_slowdown"), 0.0)],
        "a reason once shown stays, at 0"
    );
    let detail = run(true);
    assert!(detail.iter().all(|e| e.len() == 9), "{detail:?}");
}
