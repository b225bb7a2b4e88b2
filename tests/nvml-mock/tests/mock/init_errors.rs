//! Init failures: scenario init_error, missing or invalid scenario files, init faults.

use crate::common;

use std::time::Duration;

use common::{scenario, Mock};
use nvml_wrapper::error::NvmlError;

#[test]
fn init_unknown_error_scenario() {
    let m = Mock::new();
    let r = m.init(&scenario("init-unknown-error.json"), &[]);
    assert_err!(r, NvmlError::Unknown);
    // stays failing, like the real "Unknown Error" after a cgroup change
    let r = m.init(&scenario("init-unknown-error.json"), &[]);
    assert_err!(r, NvmlError::Unknown);
}

#[test]
fn missing_or_invalid_scenario_is_unknown() {
    let m = Mock::new();
    let missing = m.dir.path("nope.json");
    assert_err!(m.init(&missing, &[]), NvmlError::Unknown);

    let m = Mock::new();
    let bad = m.dir.path("bad.json");
    // a typo in a row field is an error, not a silent NOT_SUPPORTED
    std::fs::write(
        &bad,
        r#"{"devices": [{"uuid": "GPU-1", "timeline": [{"t": 0, "power_w": 5}]}]}"#,
    )
    .unwrap();
    assert_err!(m.init(&bad, &[]), NvmlError::Unknown);

    let m = Mock::new();
    let bad = m.dir.path("bad2.json");
    std::fs::write(
        &bad,
        r#"{"devices": [{"uuid": "GPU-1", "unsupported": ["nvmlDeviceGetPowerUsag"]}]}"#,
    )
    .unwrap();
    assert_err!(m.init(&bad, &[]), NvmlError::Unknown);
}

#[test]
fn init_error_codes_map_to_nvml_errors() {
    for (code, want) in [
        (9, NvmlError::DriverNotLoaded),
        (4, NvmlError::NoPermission),
        (18, NvmlError::LibRmVersionMismatch),
    ] {
        let m = Mock::new();
        let f = m.dir.path("s.json");
        std::fs::write(&f, format!(r#"{{"init_error": {code}, "devices": []}}"#)).unwrap();
        assert_eq!(
            m.init(&f, &[]).err().map(|e| e.to_string()),
            Some(want.to_string())
        );
    }
}

#[test]
fn init_fault_window_then_recovery() {
    let m = Mock::new();
    let f = m.dir.path("s.json");
    std::fs::write(
        &f,
        r#"{"devices": [{"uuid": "GPU-1", "timeline": [{"t": 0, "power_mw": 5000}]}],
            "faults": [{"call": "nvmlInit*", "to_s": 0.3, "code": 9}]}"#,
    )
    .unwrap();
    assert_err!(m.init(&f, &[]), NvmlError::DriverNotLoaded);
    std::thread::sleep(Duration::from_millis(350));
    let nvml = m.init(&f, &[]).unwrap();
    assert_eq!(
        nvml.device_by_index(0).unwrap().power_usage().unwrap(),
        5000
    );
}
