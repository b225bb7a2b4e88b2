//! The mock NVML library's tests, one test executable: each module loads private copies of
//! the built library through nvml-wrapper (`tests/common/`) and checks what a scenario makes
//! it answer.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod faults;
mod four_gpu;
mod h200;
mod init_errors;
mod mig_events;
mod symbols;
