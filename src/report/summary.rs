//! What the run report says: one [`Summary`] per GPU and one for the pod, in a
//! [`RunReport`], and how it is published (the `gpu.run.report` event, a file, stdout).

use std::collections::BTreeMap;
use std::io::Write;

use opentelemetry::logs::Severity;
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use serde::Serialize;

use super::efficiency::{Efficiency, MemoryPattern};
use super::timeline::RunEvent;
use crate::config::OutputTarget;
use crate::telemetry::logs::events::{Event, Events};

/// `event.name` of the report's log record, and the value of the `event.name` key that
/// starts the JSON document (so that it can be told apart from OTLP/JSON lines on stdout).
pub const EVENT_NAME: &str = crate::catalogue::events::RUN_REPORT.name;

/// Prefix of the event attributes that repeat the pod summary (`gpu.run.energy_j`, …).
pub const ATTRIBUTE_PREFIX: &str = "gpu.run.";

/// Where a report's energy figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// Difference of the energy counter (`nvmlDeviceGetTotalEnergyConsumption`).
    Counter,
    /// Power (`nvmlDeviceGetPowerUsage`) integrated over time: the counter was not available.
    IntegratedPower,
    /// Pod only: some GPUs by counter, others by integrated power.
    Mixed,
}

/// Summary of one GPU, or of the whole pod (then time and energy are summed over GPUs).
/// `None` (JSON `null`) = NVML never gave the value during the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Seconds from the first to the last sample (pod: the first and last tick).
    pub wall_time_s: f64,
    /// Samples in which NVML answered at least one reading.
    pub samples_taken: u64,
    /// Ticks where NVML answered nothing for the GPU (errors, lost) plus ticks the queue
    /// dropped.
    pub samples_missed: u64,
    /// Ticks where NVML answered `NVML_ERROR_GPU_IS_LOST` or `NVML_ERROR_RESET_REQUIRED` for
    /// the GPU (fallen off the bus); also counted in `samples_missed`. Pod: summed.
    pub samples_lost: u64,
    /// Seconds from the run's first sample to the first tick the GPU was lost; `None` (JSON
    /// `null`): never lost. Pod: the earliest.
    pub lost_at_s: Option<f64>,
    /// GPU-seconds with utilization above 0 (`nvmlDeviceGetUtilizationRates.gpu`).
    pub busy_gpu_s: Option<f64>,
    /// Mean GPU utilization over samples, ratio 0..1.
    pub utilization_mean: Option<f64>,
    /// 95th percentile (nearest rank) of GPU utilization, ratio 0..1.
    pub utilization_p95: Option<f64>,
    /// Peak memory used, bytes (`nvmlDeviceGetMemoryInfo_v2.used`, reserved memory not
    /// included). Pod: the peak of the per-tick sum over GPUs.
    pub memory_used_peak_bytes: Option<u64>,
    /// Mean memory used over samples, bytes.
    pub memory_used_mean_bytes: Option<u64>,
    /// Total memory, bytes (pod: sum over GPUs).
    pub memory_total_bytes: Option<u64>,
    /// Peak used as a share of total, ratio 0..1.
    pub memory_used_peak_ratio: Option<f64>,
    /// Energy used during the run, joules (mJ resolution).
    pub energy_j: Option<f64>,
    /// The same in kilowatt-hours.
    pub energy_kwh: Option<f64>,
    /// How `energy_j` was obtained.
    pub energy_source: Option<EnergySource>,
    /// Counter decreases skipped (driver reload); 0 normally.
    pub energy_counter_resets: u64,
    /// Power readings (`nvmlDeviceGetPowerUsage`) integrated over the span the energy counter
    /// covered, joules: the cross-check of `energy_j` when it comes from the counter; `None`
    /// when not checked (see [`super::run_report`]). Pod: summed over the GPUs checked.
    pub energy_power_integral_j: Option<f64>,
    /// Whether the counter's energy is within
    /// [`ENERGY_CHECK_TOLERANCE`](super::run_report::ENERGY_CHECK_TOLERANCE) of that integral;
    /// `None` when not checked. Pod: false when any GPU's is.
    pub energy_counter_agrees: Option<bool>,
    /// Uncorrected ECC errors during the run (increase of
    /// `nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)`); `None` where NVML never answered
    /// (ECC off or unsupported). Pod: summed over the physical GPUs that answered.
    pub ecc_uncorrected_errors: Option<u64>,
    /// Corrected ECC errors during the run (the same call, `CORRECTED`).
    pub ecc_corrected_errors: Option<u64>,
    /// Mean power over samples, watts (pod: mean of the per-tick sum).
    pub power_mean_w: Option<f64>,
    /// Peak power, watts (pod: peak of the per-tick sum).
    pub power_peak_w: Option<f64>,
    /// Peak GPU die temperature, °C.
    pub temperature_gpu_peak_c: Option<u32>,
    /// Peak HBM temperature, °C (`NVML_FI_DEV_MEMORY_TEMP`).
    pub temperature_memory_peak_c: Option<u32>,
    /// Seconds with clocks held back by the software power cap (`sw_power_cap`).
    pub power_capped_s: Option<f64>,
    /// Seconds held back by thermal slowdown (`sw_thermal_slowdown`, `hw_thermal_slowdown`).
    pub thermal_slowdown_s: Option<f64>,
    /// Seconds held back by hardware slowdown (`hw_slowdown`, `hw_power_brake_slowdown`).
    pub hw_slowdown_s: Option<f64>,
    /// Seconds per clock-event reason seen (names of [`CLOCKS_EVENT_REASONS`](crate::catalogue::clocks_event_reasons::CLOCKS_EVENT_REASONS)).
    pub clocks_event_s: BTreeMap<&'static str, f64>,
    /// XID errors by code (decimal string) → count.
    pub xid_count: BTreeMap<String, u64>,
    /// Profiling (GPM) figures, idle time holding memory and cost
    /// ([`super::efficiency`]).
    #[serde(flatten)]
    pub efficiency: Efficiency,
}

/// One GPU's summary with its identity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSummary {
    /// NVML index: the node-wide number `nvidia-smi` shows, not the training process's
    /// `cuda:N` (which counts the GPUs visible to it from 0, in `CUDA_DEVICE_ORDER`); match
    /// GPUs by `uuid` or `pci_bus_id`.
    pub index: u32,
    /// GPU (or MIG) UUID, the metrics' `hw.id`.
    pub uuid: String,
    /// PCI bus id (`nvmlDeviceGetPciInfo_v3`), as `nvidia-smi` and `/sys/bus/pci` show it.
    pub pci_bus_id: Option<String>,
    /// Product name, the metrics' `hw.model`.
    pub name: Option<String>,
    /// `time_slicing` or `mps` when the GPU was shared with other pods during the run (its
    /// figures are then the whole GPU's); `null` otherwise.
    pub sharing: Option<&'static str>,
    /// How its memory was used: `preallocated`, `growing` or `steady`; `null` when memory
    /// was never read.
    pub memory_pattern: Option<MemoryPattern>,
    /// `preallocated`: the level of the framework's pool, bytes used when it was recognized
    /// (`memory_preallocated`); `null` for the other patterns.
    pub memory_pool_bytes: Option<u64>,
    /// The numbers.
    #[serde(flatten)]
    pub summary: Summary,
}

/// The whole report, serialized as one JSON object (one line).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// Always [`EVENT_NAME`].
    #[serde(rename = "event.name")]
    pub event_name: &'static str,
    /// First sample, RFC 3339 UTC (millisecond precision); `None` when no sample was taken.
    pub started_at: Option<String>,
    /// Last sample (the final one taken at shutdown).
    pub ended_at: Option<String>,
    /// The sample interval, seconds.
    pub sample_interval_s: f64,
    /// Snapshots the report received.
    pub ticks: u64,
    /// Snapshots the subscription queue dropped (also counted in `samples_missed`).
    pub ticks_dropped: u64,
    /// `GPU_SIDECAR_PRICE_PER_GPU_HOUR`, the price behind `cost` and `idle_cost`.
    pub price_per_gpu_hour: Option<f64>,
    /// What the figures cannot say, once each (e.g. a GPU without GPM).
    pub notes: Vec<String>,
    /// The training job the pod belongs to, from `resource` ([`super::job::job_identity`]);
    /// `null` for a pod of no job. The `merge` command adds up a job's reports.
    pub job: Option<super::job::JobIdentity>,
    /// The OTel resource (`service.name`, `k8s.pod.name`, `host.name`, …).
    pub resource: BTreeMap<String, String>,
    /// Pod totals.
    pub pod: Summary,
    /// One per GPU, in NVML index order of first appearance.
    pub gpus: Vec<GpuSummary>,
    /// The events emitted during the run (alerts, XIDs, ECC errors), in order, at most
    /// [`RUN_EVENTS_KEPT`](super::timeline::RUN_EVENTS_KEPT) ([`super::timeline`]).
    pub events: Vec<RunEvent>,
    /// Events emitted past that bound (counted, not kept).
    pub events_dropped: u64,
    /// Events (alerts, XIDs, ECC errors) the agent dropped before the collector took them, up
    /// to the report (`gpu_sidecar.events.dropped` then: the queue full during a collector
    /// outage, or refused for good); those still queued at the report are not known yet.
    pub events_undelivered: u64,
}

impl RunReport {
    /// The report as one line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // Serializing plain structs of numbers, strings and maps with string keys cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The pod summary as event attributes `gpu.run.<field>` (absent values and the
    /// per-reason and XID maps left out; those are in the body), plus `gpu.run.gpu_count`.
    pub fn attributes(&self) -> Vec<KeyValue> {
        let mut out = vec![KeyValue::new(
            format!("{ATTRIBUTE_PREFIX}gpu_count"),
            self.gpus.len() as i64,
        )];
        if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(&self.pod) {
            for (k, v) in fields {
                let key = format!("{ATTRIBUTE_PREFIX}{k}");
                match v {
                    serde_json::Value::Number(n) => {
                        if let Some(i) = n.as_i64() {
                            out.push(KeyValue::new(key, i));
                        } else if let Some(f) = n.as_f64() {
                            out.push(KeyValue::new(key, f));
                        }
                    }
                    serde_json::Value::String(s) => out.push(KeyValue::new(key, s)),
                    _ => {}
                }
            }
        }
        out
    }

    /// The `gpu.run.report` event: body = the JSON document without its `events` list (each
    /// of those reached the backend as its own record, and the list would make the report
    /// the largest record in the events queue), attributes = the pod summary.
    pub fn event(&self) -> Event {
        let mut body = serde_json::to_value(self).unwrap_or_default();
        if let Some(fields) = body.as_object_mut() {
            fields.remove("events");
        }
        Event {
            name: EVENT_NAME,
            severity: Severity::Info,
            body: body.to_string(),
            attributes: self.attributes(),
            time: None,
        }
    }

    /// Emits the event and writes the report to `target` (`-`: one line on stdout, else the
    /// file, replaced). A write error is logged; it never stops the shutdown.
    pub fn publish(&self, events: &Events, target: Option<&OutputTarget>) {
        events.emit(self.event());
        let line = self.to_json_line();
        match target {
            None => {}
            Some(OutputTarget::Stdout) => {
                let mut out = std::io::stdout().lock();
                if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
                    tracing::error!(error = %e, "cannot write the run report to stdout");
                }
            }
            Some(OutputTarget::Path(path)) => {
                if let Err(e) = std::fs::write(path, format!("{line}\n")) {
                    tracing::error!(path = %path.display(), error = %e, "cannot write the run report file (GPU_SIDECAR_REPORT_FILE)");
                }
            }
        }
        let p = &self.pod;
        tracing::info!(
            gpus = self.gpus.len(),
            wall_time_s = p.wall_time_s,
            samples_taken = p.samples_taken,
            samples_missed = p.samples_missed,
            utilization_mean = p.utilization_mean,
            energy_j = p.energy_j,
            "run report"
        );
    }
}

/// The resource's attributes as strings.
pub fn resource_map(resource: &Resource) -> BTreeMap<String, String> {
    resource
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
