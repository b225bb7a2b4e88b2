//! The admission webhook end to end, one test executable (`webhook.rs`; shared helpers in
//! `tests/common/`).

#[path = "../common/mod.rs"]
mod common;

mod webhook;
