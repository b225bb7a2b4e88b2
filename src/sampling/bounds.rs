//! The physical bounds of every reading: one table ([`BOUNDS`]), from NVML's documentation
//! (`nvml.h`: units and value ranges of each call) and the H200 recording
//! (`tests/fixtures/nvml-h200` in the shared workspace: idle 116 W / 35 °C / 375 MHz, under
//! load 688-695 W of a 700 W limit, 58-60 °C, HBM 49-51 °C, SM 1425-1515 MHz of 1980,
//! memory clock 3201 MHz, 141 GiB).
//!
//! A value outside its bounds is not a measurement: it is one of NVML's sentinels answered
//! with `NVML_SUCCESS` (`0xFFFFFFFF` for a temperature or power, 255 or 0 for the memory
//! temperature of a GPU without an HBM sensor, -1 as a signed field value, all-ones
//! counters) or a corrupt reading. The sampler drops it before anything sees the sample
//! ([`enforce`]): the value is absent (never exported, judged by the rules, kept as a
//! run-report peak or written to the sample log), and one line per device and reading says
//! so. `docs/metrics.md` lists the bounds with the metrics they apply to.

use super::snapshot::DeviceSample;

/// A reading of the sampler (a field of [`DeviceSample`], or a value read before it becomes
/// one: PCIe throughput and GPM rates are checked before they are added to the byte totals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reading {
    /// `nvmlDeviceGetUtilizationRates.gpu`, %.
    UtilizationGpu,
    /// `nvmlDeviceGetUtilizationRates.memory`, %.
    UtilizationMemoryController,
    /// `nvmlDeviceGetEncoderUtilization`, %.
    UtilizationEncoder,
    /// `nvmlDeviceGetDecoderUtilization`, %.
    UtilizationDecoder,
    /// `nvmlDeviceGetMemoryInfo*.total`, bytes.
    MemoryTotal,
    /// `.used`, `.free`, `.reserved`, bytes: each at most the total.
    MemoryPart,
    /// `nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`, °C.
    TemperatureGpu,
    /// `nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)`, °C.
    TemperatureMemory,
    /// `nvmlDeviceGetPowerUsage`, mW.
    Power,
    /// `nvmlDeviceGetEnforcedPowerLimit`, mW.
    PowerLimit,
    /// `nvmlDeviceGetTotalEnergyConsumption`, mJ.
    Energy,
    /// `nvmlDeviceGetClockInfo`, MHz (graphics, SM, memory).
    Clock,
    /// `nvmlDeviceGetCurrentClocksEventReasons` bitmask.
    ClocksEventReasons,
    /// `nvmlDeviceGetPerformanceState`.
    PerformanceState,
    /// `nvmlDeviceGetTotalEccErrors`, count.
    EccErrors,
    /// `nvmlDeviceGetRemappedRows` row counts.
    RemappedRows,
    /// A process's `usedGpuMemory`, bytes: at most the device's total.
    ProcessMemory,
    /// `nvmlDeviceGetProcessUtilization` shares, %.
    ProcessUtilization,
    /// GPM activity metrics, % (`nvmlGpmMetricsGet`).
    GpmActivity,
    /// GPM PCIe rates, MiB/s.
    GpmPcie,
    /// GPM NVLink rates, MiB/s.
    GpmNvlink,
    /// `nvmlDeviceGetPcieThroughput`, KB/s.
    PcieThroughput,
}

/// The valid range of one reading, inclusive, in its NVML unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// Which reading.
    pub reading: Reading,
    /// Its name in logs and the docs.
    pub name: &'static str,
    /// The NVML unit of `min` and `max`.
    pub unit: &'static str,
    /// Lowest valid value.
    pub min: f64,
    /// Highest valid value.
    pub max: f64,
    /// Why these bounds (NVML's documentation, the recording, physics).
    pub why: &'static str,
}

impl Bound {
    /// Whether `v` is a possible reading.
    pub fn admits(&self, v: f64) -> bool {
        v.is_finite() && v >= self.min && v <= self.max
    }
}

const TIB: f64 = (1u64 << 40) as f64;

/// Every reading's bounds, in documentation order.
pub static BOUNDS: &[Bound] = &[
    Bound {
        reading: Reading::UtilizationGpu,
        name: "GPU utilization",
        unit: "%",
        min: 0.0,
        max: 100.0,
        why: "percent of the sample period (nvml.h `nvmlUtilization_t`)",
    },
    Bound {
        reading: Reading::UtilizationMemoryController,
        name: "memory controller utilization",
        unit: "%",
        min: 0.0,
        max: 100.0,
        why: "percent of the sample period",
    },
    Bound {
        reading: Reading::UtilizationEncoder,
        name: "encoder utilization",
        unit: "%",
        min: 0.0,
        max: 100.0,
        why: "percent of the sampling period",
    },
    Bound {
        reading: Reading::UtilizationDecoder,
        name: "decoder utilization",
        unit: "%",
        min: 0.0,
        max: 100.0,
        why: "percent of the sampling period",
    },
    Bound {
        reading: Reading::MemoryTotal,
        name: "memory total",
        unit: "bytes",
        min: 1.0,
        max: 4.0 * TIB,
        why: "installed memory: the H200 has 141 GiB, the largest GPUs of 2026 under 1 TiB",
    },
    Bound {
        reading: Reading::MemoryPart,
        name: "memory used, free, reserved",
        unit: "bytes",
        min: 0.0,
        max: 4.0 * TIB,
        why: "parts of the memory: each also at most the total read with it",
    },
    Bound {
        reading: Reading::TemperatureGpu,
        name: "GPU temperature",
        unit: "°C",
        min: 1.0,
        max: 150.0,
        why: "a running die: the H200 idles at 35 °C and slows down near 90 °C; GPUs shut down below 110 °C. 0 is a sensor that did not answer, 0xFFFFFFFF a sentinel",
    },
    Bound {
        reading: Reading::TemperatureMemory,
        name: "memory (HBM) temperature",
        unit: "°C",
        min: 1.0,
        max: 150.0,
        why: "the H200's HBM reads 38-51 °C; a GPU without an HBM sensor answers 0, 255, -1 or 0xFFFFFFFF with NVML_SUCCESS",
    },
    Bound {
        reading: Reading::Power,
        name: "power draw",
        unit: "mW",
        min: 1.0,
        max: 5_000_000.0,
        why: "a powered board draws more than 0 W (the H200: 116 W idle, 695 W at most under its 700 W limit); no board draws 5 kW; 0xFFFFFFFF mW is a sentinel",
    },
    Bound {
        reading: Reading::PowerLimit,
        name: "enforced power limit",
        unit: "mW",
        min: 1.0,
        max: 5_000_000.0,
        why: "the H200's limit is settable from 200 W to 700 W; boards of 2026 stay below 2 kW",
    },
    Bound {
        reading: Reading::Energy,
        name: "total energy",
        unit: "mJ",
        min: 0.0,
        max: 9.2e18,
        why: "a counter since the driver loaded (2.9e8 years at 1 kW fit below the bound); an all-ones u64 is a sentinel",
    },
    Bound {
        reading: Reading::Clock,
        name: "clock (graphics, SM, memory)",
        unit: "MHz",
        min: 1.0,
        max: 50_000.0,
        why: "the H200 runs 375-1980 MHz and its memory at 3201 MHz; GDDR memory clocks read up to ~16 GHz; 0xFFFFFFFF is a sentinel",
    },
    Bound {
        reading: Reading::ClocksEventReasons,
        name: "clock-event reasons",
        unit: "bitmask",
        min: 0.0,
        max: 65_535.0,
        why: "NVML defines bits 0x1 to 0x100 (nvmlClocksEventReasonAll = 0x1FF); a value with bits above the low 16 (all ones) is a sentinel",
    },
    Bound {
        reading: Reading::PerformanceState,
        name: "performance state",
        unit: "P-state",
        min: 0.0,
        max: 15.0,
        why: "P0-P15; NVML_PSTATE_UNKNOWN (32) is no state",
    },
    Bound {
        reading: Reading::EccErrors,
        name: "ECC error total",
        unit: "errors",
        min: 0.0,
        max: 9_007_199_254_740_992.0,
        why: "a counter since the driver loaded, exact up to 2^53; an all-ones u64 is a sentinel",
    },
    Bound {
        reading: Reading::RemappedRows,
        name: "remapped rows",
        unit: "rows",
        min: 0.0,
        max: 1_000_000.0,
        why: "HBM banks hold a few spare rows each (hundreds per GPU); 0xFFFFFFFF is a sentinel",
    },
    Bound {
        reading: Reading::ProcessMemory,
        name: "process memory",
        unit: "bytes",
        min: 0.0,
        max: 4.0 * TIB,
        why: "part of the device's memory: also at most its total when known",
    },
    Bound {
        reading: Reading::ProcessUtilization,
        name: "process utilization",
        unit: "%",
        min: 0.0,
        max: 100.0,
        why: "percent of the sample period (nvmlProcessUtilizationSample_t)",
    },
    Bound {
        reading: Reading::GpmActivity,
        name: "GPM activity",
        unit: "%",
        min: -1.0,
        max: 101.0,
        why: "percent of the GPM window; NVML's float arithmetic lands a hair outside 0-100 (held to 0..1 on export)",
    },
    Bound {
        reading: Reading::GpmPcie,
        name: "GPM PCIe rate",
        unit: "MiB/s",
        min: 0.0,
        max: 262_144.0,
        why: "PCIe 6.0 x16 moves ~121 GiB/s per direction; 256 GiB/s is twice that",
    },
    Bound {
        reading: Reading::GpmNvlink,
        name: "GPM NVLink rate",
        unit: "MiB/s",
        min: 0.0,
        max: 16_777_216.0,
        why: "NVLink 5 moves 1.8 TB/s per GPU; 16 TiB/s is eight times that",
    },
    Bound {
        reading: Reading::PcieThroughput,
        name: "PCIe throughput",
        unit: "KB/s",
        min: 0.0,
        max: 250_000_000.0,
        why: "PCIe 6.0 x16 moves ~124,000,000 KB/s per direction (the H200 recording: 7575 / 15580 KB/s); 0xFFFFFFFF is a sentinel",
    },
];

/// The bounds of `r`.
///
/// # Panics
/// Never: [`BOUNDS`] has a row for every [`Reading`] (a unit test checks it).
pub fn bound(r: Reading) -> &'static Bound {
    BOUNDS
        .iter()
        .find(|b| b.reading == r)
        .expect("BOUNDS has every reading")
}

/// Whether `v` is a possible value of `r`.
pub fn admits(r: Reading, v: f64) -> bool {
    bound(r).admits(v)
}

/// Drops every impossible value of `d` (sets it absent), calling `rejected(reading, value)`
/// for each. Memory parts and process memory are also held to the device's total when it is
/// known. Values checked before they reach the sample (PCIe throughput, GPM rates) are not
/// seen here.
pub fn enforce(d: &mut DeviceSample, mut rejected: impl FnMut(Reading, f64)) {
    macro_rules! check {
        ($field:expr, $reading:expr) => {
            if let Some(v) = $field {
                #[allow(clippy::cast_precision_loss, clippy::unnecessary_cast)]
                let x = v as f64;
                if !admits($reading, x) {
                    rejected($reading, x);
                    $field = None;
                }
            }
        };
    }
    check!(d.utilization_gpu_percent, Reading::UtilizationGpu);
    check!(
        d.utilization_memory_controller_percent,
        Reading::UtilizationMemoryController
    );
    check!(d.utilization_encoder_percent, Reading::UtilizationEncoder);
    check!(d.utilization_decoder_percent, Reading::UtilizationDecoder);
    check!(d.memory_total_bytes, Reading::MemoryTotal);
    check!(d.memory_used_bytes, Reading::MemoryPart);
    check!(d.memory_free_bytes, Reading::MemoryPart);
    check!(d.memory_reserved_bytes, Reading::MemoryPart);
    if let Some(total) = d.memory_total_bytes {
        for part in [
            &mut d.memory_used_bytes,
            &mut d.memory_free_bytes,
            &mut d.memory_reserved_bytes,
        ] {
            if let Some(v) = *part {
                if v > total {
                    rejected(Reading::MemoryPart, v as f64);
                    *part = None;
                }
            }
        }
    }
    check!(d.temperature_gpu_celsius, Reading::TemperatureGpu);
    check!(d.temperature_memory_celsius, Reading::TemperatureMemory);
    check!(d.power_milliwatts, Reading::Power);
    check!(d.power_limit_milliwatts, Reading::PowerLimit);
    check!(d.energy_millijoules, Reading::Energy);
    check!(d.clock_graphics_mhz, Reading::Clock);
    check!(d.clock_sm_mhz, Reading::Clock);
    check!(d.clock_memory_mhz, Reading::Clock);
    check!(d.clocks_event_reasons, Reading::ClocksEventReasons);
    check!(d.performance_state, Reading::PerformanceState);
    check!(d.ecc_corrected_total, Reading::EccErrors);
    check!(d.ecc_uncorrected_total, Reading::EccErrors);
    if let Some(r) = d.remapped_rows {
        for v in [r.correctable, r.uncorrectable] {
            if !admits(Reading::RemappedRows, f64::from(v)) {
                rejected(Reading::RemappedRows, f64::from(v));
                d.remapped_rows = None;
                break;
            }
        }
    }
    let total = d.memory_total_bytes;
    for p in d.processes.iter_mut().flatten() {
        if let Some(v) = p.used_memory_bytes {
            if !admits(Reading::ProcessMemory, v as f64) || total.is_some_and(|t| v > t) {
                rejected(Reading::ProcessMemory, v as f64);
                p.used_memory_bytes = None;
            }
        }
        if let Some(u) = p.utilization {
            let shares = [
                u.sm_percent,
                u.memory_percent,
                u.encoder_percent,
                u.decoder_percent,
            ];
            if let Some(bad) = shares
                .into_iter()
                .find(|v| !admits(Reading::ProcessUtilization, *v))
            {
                rejected(Reading::ProcessUtilization, bad);
                p.utilization = None;
            }
        }
    }
    if let Some(g) = &mut d.gpm {
        for v in [
            &mut g.graphics_util,
            &mut g.sm_util,
            &mut g.sm_occupancy,
            &mut g.integer_util,
            &mut g.any_tensor_util,
            &mut g.dfma_tensor_util,
            &mut g.hmma_tensor_util,
            &mut g.imma_tensor_util,
            &mut g.dram_bw_util,
            &mut g.fp64_util,
            &mut g.fp32_util,
            &mut g.fp16_util,
        ] {
            if let Some(x) = *v {
                if !admits(Reading::GpmActivity, x) {
                    rejected(Reading::GpmActivity, x);
                    *v = None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sampling::{DeviceInfo, DeviceState, ProcessSample};

    #[test]
    fn every_reading_has_one_bound() {
        let all = [
            Reading::UtilizationGpu,
            Reading::UtilizationMemoryController,
            Reading::UtilizationEncoder,
            Reading::UtilizationDecoder,
            Reading::MemoryTotal,
            Reading::MemoryPart,
            Reading::TemperatureGpu,
            Reading::TemperatureMemory,
            Reading::Power,
            Reading::PowerLimit,
            Reading::Energy,
            Reading::Clock,
            Reading::ClocksEventReasons,
            Reading::PerformanceState,
            Reading::EccErrors,
            Reading::RemappedRows,
            Reading::ProcessMemory,
            Reading::ProcessUtilization,
            Reading::GpmActivity,
            Reading::GpmPcie,
            Reading::GpmNvlink,
            Reading::PcieThroughput,
        ];
        assert_eq!(BOUNDS.len(), all.len());
        for r in all {
            assert_eq!(BOUNDS.iter().filter(|b| b.reading == r).count(), 1, "{r:?}");
            let b = bound(r);
            assert!(b.min <= b.max, "{r:?}");
        }
    }

    /// The H200 recording's extremes are all possible values.
    #[test]
    fn the_h200_recording_is_within_bounds() {
        for (r, v) in [
            (Reading::TemperatureGpu, 35.0),
            (Reading::TemperatureGpu, 60.0),
            (Reading::TemperatureMemory, 38.0),
            (Reading::TemperatureMemory, 51.0),
            (Reading::Power, 116_456.0),
            (Reading::Power, 695_054.0),
            (Reading::PowerLimit, 700_000.0),
            (Reading::Clock, 375.0),
            (Reading::Clock, 3201.0),
            (Reading::MemoryTotal, 150_754_820_096.0),
            (Reading::Energy, 28_415_527.0),
            (Reading::PcieThroughput, 15_580.0),
            (Reading::ClocksEventReasons, 4.0),
        ] {
            assert!(admits(r, v), "{r:?} {v}");
        }
    }

    #[test]
    fn sentinels_are_dropped_and_reported() {
        let info = Arc::new(DeviceInfo::default());
        let mut d = DeviceSample::empty(info, DeviceState::Ok);
        d.temperature_gpu_celsius = Some(u32::MAX);
        d.temperature_memory_celsius = Some(255);
        d.power_milliwatts = Some(u32::MAX);
        d.power_limit_milliwatts = Some(700_000);
        d.utilization_gpu_percent = Some(99);
        d.clocks_event_reasons = Some(u64::MAX);
        d.energy_millijoules = Some(u64::MAX);
        d.memory_total_bytes = Some(80 << 30);
        d.memory_used_bytes = Some(81 << 30);
        d.processes = Some(vec![ProcessSample {
            pid: 1,
            used_memory_bytes: Some(90 << 30),
            ..ProcessSample::default()
        }]);
        let mut seen = Vec::new();
        enforce(&mut d, |r, _| seen.push(r));
        assert_eq!(d.temperature_gpu_celsius, None);
        assert_eq!(d.temperature_memory_celsius, None);
        assert_eq!(d.power_milliwatts, None);
        assert_eq!(d.clocks_event_reasons, None);
        assert_eq!(d.energy_millijoules, None);
        assert_eq!(d.memory_used_bytes, None, "more than the total");
        assert_eq!(d.processes.as_ref().unwrap()[0].used_memory_bytes, None);
        assert_eq!(d.power_limit_milliwatts, Some(700_000));
        assert_eq!(d.utilization_gpu_percent, Some(99));
        assert_eq!(d.memory_total_bytes, Some(80 << 30));
        assert_eq!(
            seen,
            vec![
                Reading::MemoryPart,
                Reading::TemperatureGpu,
                Reading::TemperatureMemory,
                Reading::Power,
                Reading::Energy,
                Reading::ClocksEventReasons,
                Reading::ProcessMemory,
            ]
        );
        // 0 °C for the HBM of a GPU without the sensor.
        d.temperature_memory_celsius = Some(0);
        enforce(&mut d, |_, _| {});
        assert_eq!(d.temperature_memory_celsius, None);
    }
}
