use std::sync::Arc;

use super::*;
use crate::catalogue::clocks_event_reasons::CLOCKS_EVENT_REASONS;
use crate::sampling::bounds;
use crate::sampling::DeviceInfo;

/// The first row of the H200 recording (`series-under-load.jsonl`, t = 0).
fn h200() -> DeviceSample {
    let info = Arc::new(DeviceInfo {
        index: 0,
        uuid: "GPU-00000000-1111-2222-3333-444444444444".into(),
        name: Some("NVIDIA H200".into()),
        serial: Some("1650000000000".into()),
        pci_bus_id: Some("00000000:19:00.0".into()),
        vbios_version: Some("96.00.AF.00.01".into()),
        driver_version: Some("580.159.04".into()),
        mig: None,
        gpm_supported: None,
    });
    let mut d = DeviceSample::empty(info, DeviceState::Ok);
    d.utilization_gpu_percent = Some(99);
    d.utilization_memory_controller_percent = Some(24);
    d.memory_total_bytes = Some(150_754_820_096);
    d.memory_used_bytes = Some(1_839_071_232);
    d.temperature_gpu_celsius = Some(58);
    d.temperature_memory_celsius = Some(49);
    d.power_milliwatts = Some(690_599);
    d.power_limit_milliwatts = Some(700_000);
    d.energy_millijoules = Some(7_749_089);
    d.clock_sm_mhz = Some(1455);
    d.clocks_event_reasons = Some(4);
    d.performance_state = Some(0);
    d
}

fn def(name: &str) -> &'static MetricDef {
    CATALOGUE.iter().find(|d| d.name == name).unwrap()
}

fn attr(p: &Point, key: &str) -> Option<String> {
    p.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.to_string())
}

#[test]
fn h200_values_map_to_semconv_units() {
    let d = h200();
    let power = device_points(def("hw.power"), &d);
    assert_eq!(power.len(), 1);
    assert!((power[0].value - 690.599).abs() < 1e-9);
    assert_eq!(
        attr(&power[0], "hw.id").as_deref(),
        Some("GPU-00000000-1111-2222-3333-444444444444")
    );
    assert_eq!(attr(&power[0], "hw.type").as_deref(), Some("gpu"));
    assert_eq!(attr(&power[0], "hw.model").as_deref(), Some("NVIDIA H200"));
    assert_eq!(device_points(def("hw.energy"), &d)[0].value, 7749.089);
    assert_eq!(
        device_points(def("hw.gpu.memory.limit"), &d)[0].value,
        150_754_820_096.0
    );
    let util = device_points(def("hw.gpu.utilization"), &d);
    assert_eq!(util.len(), 1, "encoder/decoder not read: absent, not 0");
    assert_eq!(util[0].value, 0.99);
    assert_eq!(attr(&util[0], "hw.gpu.task").as_deref(), Some("general"));
    let mem_util = device_points(def("hw.gpu.memory.utilization"), &d)[0].value;
    assert!((mem_util - 1_839_071_232.0 / 150_754_820_096.0).abs() < 1e-12);
    let temps = device_points(def("hw.temperature"), &d);
    assert_eq!(temps.len(), 2);
    assert_eq!(
        (
            temps[1].value,
            attr(&temps[1], "hw.sensor_location").as_deref()
        ),
        (49.0, Some("memory"))
    );
    let clocks = device_points(def("nvidia.gpu.clock.frequency"), &d);
    assert_eq!(clocks.len(), 1);
    assert_eq!(clocks[0].value, 1_455_000_000.0);
}

#[test]
fn clocks_event_bits_and_status() {
    let d = h200();
    let reasons = device_points(def("nvidia.gpu.clocks_event.active"), &d);
    assert_eq!(reasons.len(), CLOCKS_EVENT_REASONS.len());
    let documented = def("nvidia.gpu.clocks_event.active").attributes;
    for r in CLOCKS_EVENT_REASONS {
        assert!(
            documented.contains(&format!("`{}`", r.value)),
            "{}",
            r.value
        );
    }
    let active: Vec<_> = reasons
        .iter()
        .filter(|p| p.value == 1.0)
        .map(|p| attr(p, "nvidia.gpu.clocks_event.reason").unwrap())
        .collect();
    assert_eq!(active, vec!["sw_power_cap"]);
    assert_eq!(device_state(&d), "ok", "power cap at full load is normal");
    let mut hot = h200();
    hot.clocks_event_reasons = Some(0x20 | 0x4);
    assert_eq!(device_state(&hot), "degraded");
    let status = device_points(def("hw.status"), &hot);
    let on: Vec<_> = status
        .iter()
        .filter(|p| p.value == 1.0)
        .map(|p| attr(p, "hw.state").unwrap())
        .collect();
    assert_eq!(on, vec!["degraded"]);
    assert_eq!(
        attr(&status[0], "hw.driver_version").as_deref(),
        Some("580.159.04")
    );
}

/// Every bound holds a metric, and every GPU metric has the bounds of its readings.
#[test]
fn every_bound_and_metric_has_a_valid_range() {
    for b in bounds::BOUNDS {
        assert!(
            CATALOGUE
                .iter()
                .any(|d| d.bounds.iter().any(|x| x.name == b.name)),
            "{} holds no metric",
            b.name
        );
    }
    for d in CATALOGUE {
        assert!(!d.bounds.is_empty(), "{} has no valid range", d.name);
    }
}

#[test]
fn lost_device_reports_failed_and_nothing_else() {
    let d = DeviceSample::empty(h200().info, DeviceState::Lost);
    for def in CATALOGUE {
        let points = device_points(def, &d);
        if def.name == "hw.status" {
            let on: Vec<_> = points
                .iter()
                .filter(|p| p.value == 1.0)
                .map(|p| attr(p, "hw.state").unwrap())
                .collect();
            assert_eq!(on, vec!["failed"]);
        } else {
            assert!(points.is_empty(), "{} emitted for a lost GPU", def.name);
        }
    }
}

/// The closed value sets: the points of the H200 sample carry only their values, and every
/// metric that has one of those keys documents all its values.
#[test]
fn closed_attribute_sets_are_what_is_emitted_and_documented() {
    use crate::catalogue::attributes::{
        ClockType, GpuTask, HwState, IoDirection, MemoryErrorType, Pipe, SensorLocation, TensorOp,
    };
    let sets: [(&str, &[&str]); 8] = [
        (GpuTask::KEY, GpuTask::VALUES),
        (SensorLocation::KEY, SensorLocation::VALUES),
        (MemoryErrorType::KEY, MemoryErrorType::VALUES),
        (HwState::KEY, HwState::VALUES),
        (IoDirection::KEY, IoDirection::VALUES),
        (ClockType::KEY, ClockType::VALUES),
        (TensorOp::KEY, TensorOp::VALUES),
        (Pipe::KEY, Pipe::VALUES),
    ];
    let d = h200();
    let mut seen = std::collections::BTreeSet::new();
    for def in CATALOGUE {
        for p in device_points(def, &d) {
            for (key, values) in sets {
                if let Some(v) = attr(&p, key) {
                    assert!(values.contains(&v.as_str()), "{}: {key} = {v}", def.name);
                    seen.insert(key);
                }
            }
        }
        for (key, values) in sets {
            if def.attributes.contains(&format!("`{key}` = ")) {
                for v in values {
                    assert!(
                        def.attributes.contains(&format!("`{v}`")),
                        "{}: {key} value {v} not documented",
                        def.name
                    );
                }
            }
        }
    }
    // The H200 sample has no ECC totals, PCIe bytes or GPM window.
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        [
            GpuTask::KEY,
            SensorLocation::KEY,
            HwState::KEY,
            ClockType::KEY
        ]
    );
}
