//! The agent's own metrics (`gpu_sidecar.*`): how its NVML calls and its exports fare.
//! Exported with the GPU metrics, same resource and scope; defined in the metric catalogue
//! ([`SELF_METRICS`](crate::catalogue::metrics::SELF_METRICS)) and listed in
//! `docs/metrics.md`.

use crate::sampling::SamplerBoard;
use crate::telemetry::export_status::ExportStatus;

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
    pub fn read(board: &SamplerBoard, status: &ExportStatus) -> Self {
        Self {
            nvml_errors: board.nvml_errors(),
            nvml_stuck: board.stuck_counts(),
            export_failures: status.total_failures(),
            last_success: status.last_success().map(|(_, at)| at),
        }
    }
}
