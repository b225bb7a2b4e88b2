//! The alert rules end to end, one test executable (`rules.rs`; shared helpers in
//! `tests/common/`).

#[path = "../common/mod.rs"]
mod common;

mod rules;
