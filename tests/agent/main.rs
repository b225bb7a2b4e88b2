//! The agent end to end, one test executable: the binary (or, for `bench_scenarios`, the
//! library's sampler) with the mock NVML library replaying a scenario, exporting to the
//! in-process OTLP receiver of `tests/common/`. One module per subject; each module's
//! docstring says what it covers. Run one with `cargo test --test agent <module>::`.
//!
//! The modules share this process: none sets the process's working directory or signal
//! handlers, and the harness hands no inherited descriptor to the programs it starts. The
//! only environment variables set in the process are the mock's (`bench_scenarios`, while
//! it holds its lock, removed again before it lets go); the agents the harness starts get a
//! clean environment.

#[path = "../common/mod.rs"]
mod common;

mod bench_scenarios;
mod coverage;
mod e2e;
mod faults;
mod golden;
mod harness_selftest;
mod old_drivers;
mod pod_resources;
mod reliability;
mod sentinels;
mod support;
mod time;
mod tls;
