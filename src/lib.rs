//! gpu-otel-sidecar: reads NVIDIA GPUs through NVML and pushes OpenTelemetry metrics and
//! events over OTLP with the pod's and container's attributes.
//!
//! Start reading at [`agent`]: it starts the whole data flow in flow order and stops it in
//! reverse. One module per stage:
//!
//! ```text
//! config: the settings, read once ─> agent: starts the flow, stops it in reverse
//! sampling: nvml-sampler (snapshots) ─┐
//!           nvml-events (XID, ECC)  ──┴─> hub ─> one queue per consumer, in order:
//!   telemetry: export-clock (metrics), device-events (XID/ECC counter and log records)
//!   rules:     rules (alerts and diagnoses)
//!   report:    run-report, sample-log
//! probes: /healthz, /readyz, the NVML watchdog (read the hub and the sampler's board)
//! attribution: the resource (pod, container, node)
//! ```
//!
//! - [`config`]: environment → typed settings, read once.
//! - [`sampling`]: the NVML thread and the event watcher ([`sampling::sampler`],
//!   [`sampling::event_watcher`]), plain [`sampling::Snapshot`] data with units in field
//!   names, every period of the flow and the cadence ([`sampling::Timing`],
//!   [`sampling::cadence`]), the bus ([`sampling::Hub`]), the sampler's state board
//!   ([`sampling::SamplerBoard`]) and the one consumer skeleton ([`sampling::consumer`]).
//! - [`telemetry`]: by signal. [`telemetry::metrics`]: each export built as OTLP messages
//!   from an export tick's snapshot (`export-clock`); [`telemetry::logs`]: device events
//!   counted and sent as log records (`device-events`), events held in a bounded queue until
//!   delivered; [`telemetry::otlp`]: the one OTLP connection both use (gRPC, HTTP or stdout).
//! - [`rules`]: judges every sample and XID; alerts and diagnoses as events and counters.
//! - [`report`]: the run report and the sample log.
//! - [`attribution`]: the resource; [`probes`]: the Kubernetes probes and the NVML watchdog.
//! - [`webhook`]: the `webhook` command, the admission webhook that injects the sidecar into
//!   GPU pods.

#![warn(missing_docs)]

pub mod agent;
pub mod attribution;
pub mod catalogue;
pub mod config;
pub mod logging;
pub mod probes;
pub mod process_watch;
pub mod report;
pub mod rules;
pub mod sampling;
pub mod telemetry;
pub mod webhook;
