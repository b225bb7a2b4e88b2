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
//! probes: /healthz, /readyz, the NVML watchdog (read the hub)
//! attribution: the resource (pod, container, node)
//! ```
//!
//! - [`config`]: environment → typed settings, read once.
//! - [`sampling`]: the NVML thread and the event watcher ([`sampling::sampler`],
//!   [`sampling::event_watcher`]), plain [`sampling::Snapshot`] data with units in field
//!   names, the cadence ([`sampling::cadence`]), the [`sampling::Hub`] and the one consumer
//!   skeleton ([`sampling::consumer`]).
//! - [`telemetry`]: the metric catalogue, each export built as OTLP messages from an export
//!   tick's snapshot and sent over gRPC, HTTP or to stdout (`export-clock`); device events
//!   counted and sent as log records (`device-events`); events held in a bounded queue
//!   until the same OTLP transport delivers them.
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
