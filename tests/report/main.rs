//! The run report, the sample log and what is made from them, one test executable
//! (`report.rs`, and `page.rs` inside it; shared helpers in `tests/common/`).

#[path = "../common/mod.rs"]
mod common;

mod report;
