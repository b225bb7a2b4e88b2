//! Every name in src/symbols.rs is exported by the built library, and a symbol the mock
//! does not export is FailedToLoadSymbol through nvml-wrapper.

use crate::common;

use common::frozen;
use nvml_wrapper::error::NvmlError;

#[test]
fn listed_symbols_are_exported() {
    let (_m, nvml) = frozen("h200-under-load.json");
    let list = include_str!("../../src/symbols.rs");
    let names: Vec<&str> = list
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("nvml"))
        .collect();
    assert!(names.len() > 60, "{names:?}");
    for name in names {
        let sym = format!("{name}\0");
        let found = unsafe {
            nvml.lib()
                .__library
                .get::<unsafe extern "C" fn()>(sym.as_bytes())
                .is_ok()
        };
        assert!(found, "{name} is listed but not exported");
    }
    // not exported: nvml-wrapper's Result path reports it
    let d = nvml.device_by_index(0).unwrap();
    assert_err!(d.bar1_memory_info(), NvmlError::FailedToLoadSymbol(_));
    assert_err!(d.compute_mode(), NvmlError::FailedToLoadSymbol(_));
}
