//! The `gpu_lost` and `xid` rules: faults of the device itself.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::logs::Severity;
use opentelemetry::{KeyValue, Value};

use super::alert::{AlertState, XidReport};
use super::catalogue::RuleId;
use super::engine::Engine;
use super::tests::*;
use super::to_event;
use crate::sampling::{DeviceInfo, DeviceSample, DeviceState};

#[test]
fn gpu_lost_fires_at_once_with_the_last_readings_and_resolves_when_back() {
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 1.0, 10.0, |t| {
        if (3.0..6.0).contains(&t) {
            vec![DeviceSample::empty(info(0), DeviceState::Lost)]
        } else {
            vec![busy(0)]
        }
    });
    assert_eq!(
        summary(&alerts),
        vec![
            (3.0, RuleId::GpuLost, AlertState::Firing),
            (6.0, RuleId::GpuLost, AlertState::Resolved),
        ]
    );
    let a = &alerts[0].1;
    assert_eq!(to_event(a).severity, Severity::Fatal);
    assert!(a
        .readings
        .contains(&KeyValue::new("nvidia.gpu.reading.hw.power", 500.0)));
    assert!(a
        .device
        .contains(&KeyValue::new("hw.model", "NVIDIA H100 80GB HBM3")));
}

/// A MIG device of GPU 0 (GPU instance `gi`), 10 GiB of 20 used.
fn mig(gi: u32) -> DeviceSample {
    let parent = info(0);
    let mut d = DeviceSample::empty(
        Arc::new(DeviceInfo {
            index: 0,
            uuid: format!("MIG-00000000-0000-4000-8000-0000000000{gi:02}"),
            name: Some("NVIDIA H100 80GB HBM3 MIG 3g.40gb".into()),
            mig: Some(crate::sampling::MigPlacement {
                parent_uuid: parent.uuid.clone(),
                mig_index: gi,
                gpu_instance_id: Some(gi),
                compute_instance_id: Some(0),
            }),
            ..DeviceInfo::default()
        }),
        DeviceState::Ok,
    );
    d.memory_total_bytes = Some(20 * GIB);
    d.memory_used_bytes = Some(10 * GIB);
    d
}

#[test]
fn gpu_lost_fires_once_per_gpu_when_only_its_mig_devices_are_sampled() {
    let mut engine = Engine::new(&config(&[]));
    // This pod holds two MIG devices of GPU 0, not the GPU; the GPU is lost from 3 s to 6 s
    // (both MIG devices with it).
    let alerts = replay(&mut engine, 1.0, 10.0, |t| {
        [1, 2]
            .map(|gi| {
                let m = mig(gi);
                if (3.0..6.0).contains(&t) {
                    DeviceSample::empty(m.info, DeviceState::Lost)
                } else {
                    m
                }
            })
            .to_vec()
    });
    assert_eq!(
        summary(&alerts),
        vec![
            (3.0, RuleId::GpuLost, AlertState::Firing),
            (6.0, RuleId::GpuLost, AlertState::Resolved),
        ],
        "one alert for the GPU, not one per MIG device"
    );
    let gpu = info(0).uuid.clone();
    for (_, a) in &alerts {
        assert_eq!(a.hw_id.as_deref(), Some(gpu.as_str()));
        assert!(a.device.contains(&KeyValue::new("hw.id", gpu.clone())));
        assert!(a.device.contains(&KeyValue::new("hw.type", "gpu")));
        assert_eq!(a.label, format!("{gpu} (nvidia-smi GPU 0)"));
    }
    // The GPU sampled with its MIG devices: still one alert, the GPU's, with its model.
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 1.0, 4.0, |t| {
        let lost = t >= 2.0;
        let gpu = if lost {
            DeviceSample::empty(info(0), DeviceState::Lost)
        } else {
            busy(0)
        };
        let migs = [1, 2].map(|gi| {
            let m = mig(gi);
            if lost {
                DeviceSample::empty(m.info, DeviceState::Lost)
            } else {
                m
            }
        });
        let mut v = vec![gpu];
        v.extend(migs);
        v
    });
    assert_eq!(
        summary(&alerts),
        vec![(2.0, RuleId::GpuLost, AlertState::Firing)]
    );
    assert!(alerts[0]
        .1
        .device
        .contains(&KeyValue::new("hw.model", "NVIDIA H100 80GB HBM3")));
}

#[test]
fn a_lost_gpu_neither_fires_nor_resolves_the_other_rules() {
    let mut engine = Engine::new(&config(&[("GPU_SIDECAR_RULE_GPU_LOST_ENABLED", "false")]));
    let alerts = replay(&mut engine, 1.0, 60.0, |t| {
        if (20.0..40.0).contains(&t) {
            return vec![DeviceSample::empty(info(0), DeviceState::Lost)];
        }
        let mut d = busy(0);
        d.memory_used_bytes = Some(78 * GIB);
        vec![d]
    });
    // Full from 0: fires at 10 s; lost for 20 s (unknown): stays firing, no second record.
    assert_eq!(
        summary(&alerts),
        vec![(10.0, RuleId::MemoryNearFull, AlertState::Firing)]
    );
    assert_eq!(
        engine.firing(),
        vec![(RuleId::MemoryNearFull, Some(info(0).uuid.clone()))]
    );
}

#[test]
fn xid_fires_once_per_code_counts_repeats_and_resolves_after_quiet() {
    let mut engine = Engine::new(&config(&[("GPU_SIDECAR_RULE_XID_DURATION", "1m")]));
    let mut clock = Clock::new();
    assert!(engine.observe(&clock.at(0.0, vec![busy(0)])).is_empty());
    let report = |clock: &Clock, secs: f64, xid: u64| XidReport {
        hw_id: info(0).uuid.clone(),
        xid,
        at: clock.instant + Duration::from_secs_f64(secs),
        time: clock.wall + Duration::from_secs_f64(secs),
        gpu_instance_id: Some(1),
        compute_instance_id: Some(0),
    };
    let a = engine.xid(&report(&clock, 2.0, 13)).expect("fires");
    assert_values_declared(&a);
    assert_eq!((a.rule, a.state), (RuleId::Xid, AlertState::Firing));
    assert_eq!(value(&a, "nvidia.gpu.xid.code"), &Value::I64(13));
    assert_eq!(value(&a, "nvidia.gpu.mig.gpu_instance_id"), &Value::I64(1));
    assert!(a.hint.starts_with("XID 13 (graphics engine exception)"));
    assert!(a
        .device
        .contains(&KeyValue::new("hw.model", "NVIDIA H100 80GB HBM3")));
    assert!(!a.readings.is_empty());
    assert_eq!(to_event(&a).severity, Severity::Fatal);
    assert!(engine.xid(&report(&clock, 30.0, 13)).is_none());
    let b = engine
        .xid(&report(&clock, 31.0, 79))
        .expect("another code fires");
    assert!(b.hint.contains("fallen off the bus"));
    // 13 last seen at 30 s: quiet for 1 min at 90 s.
    assert!(engine.observe(&clock.at(89.0, vec![busy(0)])).is_empty());
    let r = engine.observe(&clock.at(90.0, vec![busy(0)]));
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].state, AlertState::Resolved);
    assert_eq!(value(&r[0], "nvidia.gpu.xid.code"), &Value::I64(13));
    assert_eq!(value(&r[0], "nvidia.gpu.alert.xid.count"), &Value::I64(2));
    assert_eq!(r[0].active_for, Duration::from_secs(88));
    let r = engine.observe(&clock.at(91.0, vec![busy(0)]));
    assert_eq!(r.len(), 1);
    assert_eq!(value(&r[0], "nvidia.gpu.xid.code"), &Value::I64(79));
    // Disabled: nothing.
    let mut engine = Engine::new(&config(&[("GPU_SIDECAR_RULE_XID_ENABLED", "false")]));
    assert!(engine.xid(&report(&clock, 2.0, 13)).is_none());
}

/// One XID, one text: the `nvidia.gpu.xid` event's body and the `xid` alert's body give the
/// same meaning and advice for every code (they once gave different advice for 45, 48 and
/// 63/64).
#[test]
fn an_xid_reads_the_same_in_its_event_and_in_its_alert() {
    use crate::sampling::{DeviceEvent, DeviceEventKind};
    let mut engine = Engine::new(&config(&[]));
    let mut clock = Clock::new();
    engine.observe(&clock.at(0.0, vec![busy(0)]));
    let device = info(0);
    let label = format!(
        "{} ({})",
        device.uuid,
        device.name.as_deref().unwrap_or_default()
    );
    for code in [
        13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 12345,
    ] {
        let event = crate::telemetry::logs::xid_event::to_event(&DeviceEvent {
            time: clock.wall,
            device: device.clone(),
            kind: DeviceEventKind::Xid(code),
        });
        let alert = engine
            .xid(&XidReport {
                hw_id: device.uuid.clone(),
                xid: code,
                at: clock.instant,
                time: clock.wall,
                gpu_instance_id: None,
                compute_instance_id: None,
            })
            .expect("fires");
        let record = to_event(&alert).body;
        let from_event = event
            .body
            .split_once(&format!("XID {code} on {label}: "))
            .map(|(_, t)| t.to_string())
            .unwrap_or_else(|| panic!("event body: {}", event.body));
        let hint = record
            .split_once(&format!("XID {code} reported. "))
            .map(|(_, t)| t)
            .unwrap_or_else(|| panic!("alert body: {record}"));
        let from_alert = match hint.strip_prefix(&format!("XID {code} (")) {
            Some(rest) => rest.replacen("): ", ": ", 1),
            None => hint
                .strip_prefix(&format!("XID {code}: "))
                .unwrap_or(hint)
                .to_string(),
        };
        assert_eq!(from_event, from_alert, "XID {code}");
    }
}
