//! The agent's own metrics (`gpu_sidecar.*`): how its NVML calls and its exports fare.
//! Exported with the GPU metrics, same resource and scope; listed in the README ("Health and
//! self-metrics"), where a test checks each row of [`SELF_METRICS`] appears.

use super::export::ExportStatus;
use crate::sampling::Hub;

/// One self-metric, as documented: name, instrument, unit, attributes, description.
#[derive(Debug, Clone, Copy)]
pub struct SelfMetric {
    /// Metric name.
    pub name: &'static str,
    /// `counter` or `gauge`.
    pub instrument: &'static str,
    /// UCUM unit.
    pub unit: &'static str,
    /// Data point attributes.
    pub attributes: &'static str,
    /// What it counts or shows.
    pub description: &'static str,
}

/// `gpu_sidecar.nvml.errors`: errors NVML answered, by call and code.
pub const NVML_ERRORS: SelfMetric = SelfMetric {
    name: "gpu_sidecar.nvml.errors",
    instrument: "counter",
    unit: "{error}",
    attributes: "`nvidia.nvml.call` (C function, e.g. `nvmlDeviceGetPowerUsage`, `nvmlInit_v2`), `error.type` (`NVML_ERROR_*` name)",
    description: "Errors NVML answered since start. A field that answers NOT_SUPPORTED is asked (and counted) once per GPU and NVML session; a lost GPU is probed (and counted) once per tick.",
};

/// `gpu_sidecar.nvml.stuck`: NVML steps that ran past the watchdog bound.
pub const NVML_STUCK: SelfMetric = SelfMetric {
    name: "gpu_sidecar.nvml.stuck",
    instrument: "counter",
    unit: "{call}",
    attributes: "`thread.name` (`nvml-sampler` or `nvml-events`), `gpu_sidecar.nvml.step` (the sampler's step, e.g. `sampling tick`, or the watcher's call, e.g. `nvmlEventSetWait_v2`)",
    description: "NVML steps found running past GPU_SIDECAR_WATCHDOG_TIMEOUT (for the event watcher: past its wait's own timeout plus that bound) since start, one per episode: a driver call that does not return. Logged once each; readiness is false meanwhile.",
};

/// `gpu_sidecar.export.failures`: failed metric exports.
pub const EXPORT_FAILURES: SelfMetric = SelfMetric {
    name: "gpu_sidecar.export.failures",
    instrument: "counter",
    unit: "{export}",
    attributes: "none",
    description: "Metric exports that failed since start (after the exporter's own retries); the data of a failed export is dropped, cumulative counters stay continuous.",
};

/// `gpu_sidecar.export.last_success`: time of the last successful metric export.
pub const EXPORT_LAST_SUCCESS: SelfMetric = SelfMetric {
    name: "gpu_sidecar.export.last_success",
    instrument: "gauge",
    unit: "s",
    attributes: "none",
    description:
        "Unix time (seconds) of the last successful metric export; absent until one succeeded.",
};

/// Every self-metric.
pub const SELF_METRICS: &[SelfMetric] = &[
    NVML_ERRORS,
    NVML_STUCK,
    EXPORT_FAILURES,
    EXPORT_LAST_SUCCESS,
];

/// What the self-metrics report at one export, read from the sampler's state and the
/// export status (no NVML call, no lock held for long).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnValues {
    /// `gpu_sidecar.nvml.errors`: by (call, code).
    pub nvml_errors: crate::sampling::NvmlErrorCounts,
    /// `gpu_sidecar.nvml.stuck`: by (thread, step).
    pub nvml_stuck: crate::sampling::StuckCounts,
    /// `gpu_sidecar.export.failures`.
    pub export_failures: u64,
    /// `gpu_sidecar.export.last_success`.
    pub last_success: Option<std::time::SystemTime>,
}

impl OwnValues {
    /// The values now.
    pub fn read(hub: &Hub, status: &ExportStatus) -> Self {
        Self {
            nvml_errors: hub.nvml_errors(),
            nvml_stuck: hub.stuck_counts(),
            export_failures: status.total_failures(),
            last_success: status.last_success().map(|(_, at)| at),
        }
    }
}
