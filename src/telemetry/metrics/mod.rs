//! The metrics signal: the thread `export-clock` that exports right after each export tick
//! ([`export_clock`]), each export built as OTLP messages from the catalogue ([`encode`]) with
//! each series' start time, resets and temporality ([`series`]); what the agent records as
//! it happens (sample durations, XIDs, alerts: [`recorded`]) and its own metrics' values
//! ([`self_metrics`]).

pub mod encode;
pub mod export_clock;
pub mod recorded;
pub mod self_metrics;
pub mod series;
