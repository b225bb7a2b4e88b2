//! A mock `libnvidia-ml.so`: exports the NVML C symbols the agent uses and answers them
//! from a scenario file (`NVML_MOCK_SCENARIO`). See README.md in this crate for the format.

#![allow(clippy::missing_safety_doc)]

mod events;
mod ffi;
mod gpm;
mod rc;
mod runtime;
mod scenario;
mod symbols;
mod types;
