//! gpu-otel-sidecar: reads NVIDIA GPUs through NVML and pushes OpenTelemetry metrics over
//! OTLP with the pod's and container's attributes.
//!
//! Data flow, one module per stage: [`config`] (environment → typed settings) →
//! [`sampling`] (the NVML thread → [`sampling::Snapshot`]) → [`telemetry`] (the metric
//! catalogue, each export built as OTLP messages and sent over gRPC, HTTP or to stdout;
//! events through the OTel SDK's logs pipeline), with [`attribution`] giving the resource
//! (pod, container, node), and [`health`] (the `/healthz` and `/readyz` endpoints, the
//! sampler watchdog). [`rules`] judges every sample and reports alerts and diagnoses as
//! events; [`report`] writes the run report and the sample log. [`webhook`] is the
//! `webhook` command: the admission webhook that injects the sidecar into GPU pods.

#![warn(missing_docs)]

pub mod agent;
pub mod attribution;
pub mod config;
pub mod logging;
pub mod probes;
pub mod process_watch;
pub mod report;
pub mod rules;
pub mod sampling;
pub mod telemetry;
pub mod webhook;
