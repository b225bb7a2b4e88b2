//! GPM (GPU Performance Monitoring, Hopper and newer): profiling metrics computed by NVML
//! from two samples of the device's counters.
//!
//! Each device that supports GPM has one [`GpmState`], owned by the reader on the
//! `nvml-sampler` thread: it holds the previous sample (a driver buffer that NVML's docs say
//! is not safe to use from two threads; `GpmSample` is not `Sync`). Every GPM read takes a
//! new sample (`nvmlGpmSampleGet`, or `nvmlGpmMigSampleGet` on the parent for a MIG device)
//! and, when a previous one exists, asks `nvmlGpmMetricsGet` for the metrics over the pair,
//! so consecutive windows tile the time without gaps. The older sample is then freed.

use std::time::Instant;

use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;
use nvml_wrapper::{GpmSample, Nvml};

use super::snapshot::{GpmMetrics, BYTES_PER_MIB};

/// Bytes per MiB: GPM reports PCIe and NVLink traffic in MiB/s (`nvml.h`).
pub(crate) const MIB: f64 = BYTES_PER_MIB as f64;

/// The metrics asked for at each GPM read, in this order.
pub(crate) const METRICS: &[GpmMetricId] = &[
    GpmMetricId::GraphicsUtil,
    GpmMetricId::SmUtil,
    GpmMetricId::SmOccupancy,
    GpmMetricId::IntegerUtil,
    GpmMetricId::AnyTensorUtil,
    GpmMetricId::DfmaTensorUtil,
    GpmMetricId::HmmaTensorUtil,
    GpmMetricId::ImmaTensorUtil,
    GpmMetricId::DramBwUtil,
    GpmMetricId::Fp64Util,
    GpmMetricId::Fp32Util,
    GpmMetricId::Fp16Util,
    GpmMetricId::PcieTxPerSec,
    GpmMetricId::PcieRxPerSec,
    GpmMetricId::NvlinkTotalTxPerSec,
    GpmMetricId::NvlinkTotalRxPerSec,
];

/// NVML's name of a GPM metric (`NVML_GPM_METRIC_SM_OCCUPANCY`), for log lines.
pub(crate) fn nvml_name(id: GpmMetricId) -> String {
    let name = match id {
        GpmMetricId::GraphicsUtil => "GRAPHICS_UTIL",
        GpmMetricId::SmUtil => "SM_UTIL",
        GpmMetricId::SmOccupancy => "SM_OCCUPANCY",
        GpmMetricId::IntegerUtil => "INTEGER_UTIL",
        GpmMetricId::AnyTensorUtil => "ANY_TENSOR_UTIL",
        GpmMetricId::DfmaTensorUtil => "DFMA_TENSOR_UTIL",
        GpmMetricId::HmmaTensorUtil => "HMMA_TENSOR_UTIL",
        GpmMetricId::ImmaTensorUtil => "IMMA_TENSOR_UTIL",
        GpmMetricId::DramBwUtil => "DRAM_BW_UTIL",
        GpmMetricId::Fp64Util => "FP64_UTIL",
        GpmMetricId::Fp32Util => "FP32_UTIL",
        GpmMetricId::Fp16Util => "FP16_UTIL",
        GpmMetricId::PcieTxPerSec => "PCIE_TX_PER_SEC",
        GpmMetricId::PcieRxPerSec => "PCIE_RX_PER_SEC",
        GpmMetricId::NvlinkTotalTxPerSec => "NVLINK_TOTAL_TX_PER_SEC",
        GpmMetricId::NvlinkTotalRxPerSec => "NVLINK_TOTAL_RX_PER_SEC",
        // Not asked for (not in METRICS): NVML's numeric id.
        other => return format!("NVML_GPM_METRIC {}", other.as_c()),
    };
    format!("NVML_GPM_METRIC_{name}")
}

/// NVML's names of GPM metrics, comma-separated.
pub(crate) fn nvml_names(ids: &[GpmMetricId]) -> String {
    ids.iter()
        .map(|id| nvml_name(*id))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What one pair of GPM samples gave.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GpmReading {
    /// The ratios, percent.
    pub metrics: GpmMetrics,
    /// PCIe MiB/s sent by the GPU over the window.
    pub pcie_tx_mib_s: Option<f64>,
    /// PCIe MiB/s received.
    pub pcie_rx_mib_s: Option<f64>,
    /// NVLink MiB/s sent, all links.
    pub nvlink_tx_mib_s: Option<f64>,
    /// NVLink MiB/s received, all links.
    pub nvlink_rx_mib_s: Option<f64>,
    /// Metrics NVML did not answer in this window.
    pub unanswered: Vec<GpmMetricId>,
}

/// Maps `nvmlGpmMetricsGet`'s per-metric answers (in [`METRICS`] order) to a reading.
pub(crate) fn reading(
    window_seconds: f64,
    results: &[(GpmMetricId, Result<f64, NvmlError>)],
) -> GpmReading {
    let mut r = GpmReading {
        metrics: GpmMetrics {
            window_seconds,
            ..GpmMetrics::default()
        },
        ..GpmReading::default()
    };
    for (id, value) in results {
        let v = match value {
            Ok(v) if v.is_finite() => *v,
            _ => {
                r.unanswered.push(*id);
                continue;
            }
        };
        let m = &mut r.metrics;
        let slot = match id {
            GpmMetricId::GraphicsUtil => &mut m.graphics_util,
            GpmMetricId::SmUtil => &mut m.sm_util,
            GpmMetricId::SmOccupancy => &mut m.sm_occupancy,
            GpmMetricId::IntegerUtil => &mut m.integer_util,
            GpmMetricId::AnyTensorUtil => &mut m.any_tensor_util,
            GpmMetricId::DfmaTensorUtil => &mut m.dfma_tensor_util,
            GpmMetricId::HmmaTensorUtil => &mut m.hmma_tensor_util,
            GpmMetricId::ImmaTensorUtil => &mut m.imma_tensor_util,
            GpmMetricId::DramBwUtil => &mut m.dram_bw_util,
            GpmMetricId::Fp64Util => &mut m.fp64_util,
            GpmMetricId::Fp32Util => &mut m.fp32_util,
            GpmMetricId::Fp16Util => &mut m.fp16_util,
            GpmMetricId::PcieTxPerSec => &mut r.pcie_tx_mib_s,
            GpmMetricId::PcieRxPerSec => &mut r.pcie_rx_mib_s,
            GpmMetricId::NvlinkTotalTxPerSec => &mut r.nvlink_tx_mib_s,
            GpmMetricId::NvlinkTotalRxPerSec => &mut r.nvlink_rx_mib_s,
            _ => continue,
        };
        *slot = Some(v);
    }
    r
}

/// The previous GPM sample of one device, and when it was taken.
#[derive(Default)]
pub(crate) struct GpmState<'n> {
    previous: Option<(GpmSample<'n>, Instant)>,
}

impl<'n> GpmState<'n> {
    /// Takes a new sample with `take`; with a previous one, returns the metrics over the
    /// pair (`Ok(None)` on the first read). The new sample becomes the previous one even when
    /// the metrics call fails, so one failure costs one window, not the pairing.
    ///
    /// # Errors
    /// The sample or the metrics call's error (`NotSupported`, `GpuLost`, …).
    pub(crate) fn read(
        &mut self,
        nvml: &'n Nvml,
        take: impl FnOnce() -> Result<GpmSample<'n>, NvmlError>,
    ) -> Result<Option<GpmReading>, NvmlError> {
        let sample = take()?;
        let now = Instant::now();
        let result = match &self.previous {
            Some((prev, at)) => gpm_metrics_get(nvml, prev, &sample, METRICS).map(|answers| {
                let pairs: Vec<_> = METRICS
                    .iter()
                    .zip(answers)
                    .map(|(id, a)| (*id, a.map(|m| m.value)))
                    .collect();
                Some(reading(now.duration_since(*at).as_secs_f64(), &pairs))
            }),
            None => Ok(None),
        };
        // Dropping the replaced sample frees it (nvmlGpmSampleFree).
        self.previous = Some((sample, now));
        result
    }

    /// Frees the held sample (after a failure that breaks the pairing, e.g. a lost GPU).
    pub(crate) fn reset(&mut self) {
        self.previous = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h200_recorded_values_map_and_missing_ones_stay_absent() {
        // calls-under-load.json's `gpm` values; IMMA, DFMA, integer and NVLink unanswered.
        let recorded = [
            (GpmMetricId::GraphicsUtil, Ok(99.1715282994206)),
            (GpmMetricId::SmUtil, Ok(95.56651965164566)),
            (GpmMetricId::SmOccupancy, Ok(14.12299890150723)),
            (GpmMetricId::IntegerUtil, Err(NvmlError::NotSupported)),
            (GpmMetricId::AnyTensorUtil, Ok(92.7755935884092)),
            (GpmMetricId::HmmaTensorUtil, Ok(92.77559359866086)),
            (GpmMetricId::ImmaTensorUtil, Err(NvmlError::NotSupported)),
            (GpmMetricId::DramBwUtil, Ok(17.203204525442032)),
            (GpmMetricId::Fp32Util, Ok(0.0)),
            (GpmMetricId::PcieTxPerSec, Ok(5.579914947040484)),
            (GpmMetricId::PcieRxPerSec, Ok(14.066004354539032)),
            (
                GpmMetricId::NvlinkTotalRxPerSec,
                Err(NvmlError::NotSupported),
            ),
        ];
        let r = reading(1.0, &recorded);
        assert_eq!(r.metrics.sm_util, Some(95.56651965164566));
        assert_eq!(r.metrics.hmma_tensor_util, Some(92.77559359866086));
        assert_eq!(r.metrics.fp32_util, Some(0.0), "an answered 0 is a value");
        assert_eq!(r.metrics.imma_tensor_util, None);
        assert_eq!(r.metrics.fp64_util, None, "not asked here: absent");
        assert_eq!(r.pcie_rx_mib_s, Some(14.066004354539032));
        assert_eq!(r.nvlink_rx_mib_s, None);
        assert_eq!(
            r.unanswered,
            vec![
                GpmMetricId::IntegerUtil,
                GpmMetricId::ImmaTensorUtil,
                GpmMetricId::NvlinkTotalRxPerSec
            ]
        );
        assert_eq!(r.metrics.window_seconds, 1.0);
    }
}
