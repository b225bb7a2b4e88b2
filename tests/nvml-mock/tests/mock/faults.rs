//! Faults injected at scenario times, per call and device.

use crate::common;

use std::time::{Duration, Instant};

use common::Mock;
use nvml_wrapper::error::NvmlError;

const SCENARIO: &str = r#"{
  "loop": true,
  "devices": [
    {"uuid": "GPU-a", "timeline": [{"t": 0, "power_mw": 1000, "temp_gpu": 30}]},
    {"uuid": "GPU-b", "timeline": [{"t": 0, "power_mw": 2000, "temp_gpu": 31}]}
  ],
  "faults": [
    {"call": "nvmlDeviceGetPowerUsage", "device": 1, "code": 15},
    {"call": "*", "device": 0, "from_s": 0.4, "to_s": 0.8, "code": 15},
    {"call": "nvmlDeviceGetTemperature", "device": 1, "block_s": 0.2},
    {"call": "nvmlSystemGetDriverVersion", "from_s": 0, "code": 3}
  ]
}"#;

#[test]
fn faults_by_call_device_and_time() {
    let m = Mock::new();
    let f = m.dir.path("s.json");
    std::fs::write(&f, SCENARIO).unwrap();
    let nvml = m.init(&f, &[]).unwrap();
    let a = nvml.device_by_index(0).unwrap();
    let b = nvml.device_by_index(1).unwrap();
    // the scenario's driver_version defaults, but a forever fault answers NOT_SUPPORTED
    assert_err!(nvml.sys_driver_version(), NvmlError::NotSupported);
    assert_eq!(a.power_usage().unwrap(), 1000);
    assert_err!(b.power_usage(), NvmlError::GpuLost);
    // block_s: the call sleeps, then answers normally
    let t = Instant::now();
    assert_eq!(
        b.temperature(nvml_wrapper::enum_wrappers::device::TemperatureSensor::Gpu)
            .unwrap(),
        31
    );
    assert!(t.elapsed() >= Duration::from_millis(200));
    // GPU 0 falls off the bus between 0.4 s and 0.8 s, every call
    while t.elapsed() < Duration::from_millis(450) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_err!(a.power_usage(), NvmlError::GpuLost);
    assert_err!(a.uuid(), NvmlError::GpuLost);
    assert_err!(nvml.device_by_index(0), NvmlError::GpuLost);
    assert_eq!(nvml.device_by_index(1).unwrap().uuid().unwrap(), "GPU-b");
    while t.elapsed() < Duration::from_millis(900) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(a.power_usage().unwrap(), 1000);
}
