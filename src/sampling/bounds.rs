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

pub use super::reading::Reading;
use super::snapshot::DeviceSample;

/// The valid range of one reading, inclusive, in its NVML unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    /// The NVML calls whose values it holds ([`Reading`]).
    pub readings: &'static [Reading],
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

/// GPU utilization: a value of [`Reading::Utilization`].
pub static UTILIZATION_GPU: Bound = Bound {
    readings: &[Reading::Utilization],
    name: "GPU utilization",
    unit: "%",
    min: 0.0,
    max: 100.0,
    why: "percent of the sample period (nvml.h `nvmlUtilization_t`)",
};

/// Memory controller utilization: a value of [`Reading::Utilization`].
pub static UTILIZATION_MEMORY_CONTROLLER: Bound = Bound {
    readings: &[Reading::Utilization],
    name: "memory controller utilization",
    unit: "%",
    min: 0.0,
    max: 100.0,
    why: "percent of the sample period",
};

/// Encoder utilization: a value of [`Reading::EncoderUtilization`].
pub static UTILIZATION_ENCODER: Bound = Bound {
    readings: &[Reading::EncoderUtilization],
    name: "encoder utilization",
    unit: "%",
    min: 0.0,
    max: 100.0,
    why: "percent of the sampling period",
};

/// Decoder utilization: a value of [`Reading::DecoderUtilization`].
pub static UTILIZATION_DECODER: Bound = Bound {
    readings: &[Reading::DecoderUtilization],
    name: "decoder utilization",
    unit: "%",
    min: 0.0,
    max: 100.0,
    why: "percent of the sampling period",
};

/// Memory total: a value of [`Reading::Memory`].
pub static MEMORY_TOTAL: Bound = Bound {
    readings: &[Reading::Memory],
    name: "memory total",
    unit: "bytes",
    min: 1.0,
    max: 4.0 * TIB,
    why: "installed memory: the H200 has 141 GiB, the largest GPUs of 2026 under 1 TiB",
};

/// Memory used, free, reserved: a value of [`Reading::Memory`].
pub static MEMORY_PART: Bound = Bound {
    readings: &[Reading::Memory],
    name: "memory used, free, reserved",
    unit: "bytes",
    min: 0.0,
    max: 4.0 * TIB,
    why: "parts of the memory: each also at most the total read with it",
};

/// GPU temperature: a value of [`Reading::TemperatureGpu`].
pub static TEMPERATURE_GPU: Bound = Bound {
    readings: &[Reading::TemperatureGpu],
    name: "GPU temperature",
    unit: "°C",
    min: 1.0,
    max: 150.0,
    why: "a running die: the H200 idles at 35 °C and slows down near 90 °C; GPUs shut down below 110 °C. 0 is a sensor that did not answer, 0xFFFFFFFF a sentinel",
};

/// Memory (HBM) temperature: a value of [`Reading::TemperatureMemory`].
pub static TEMPERATURE_MEMORY: Bound = Bound {
    readings: &[Reading::TemperatureMemory],
    name: "memory (HBM) temperature",
    unit: "°C",
    min: 1.0,
    max: 150.0,
    why: "the H200's HBM reads 38-51 °C; a GPU without an HBM sensor answers 0, 255, -1 or 0xFFFFFFFF with NVML_SUCCESS",
};

/// Power draw: a value of [`Reading::Power`].
pub static POWER: Bound = Bound {
    readings: &[Reading::Power],
    name: "power draw",
    unit: "mW",
    min: 1.0,
    max: 5_000_000.0,
    why: "a powered board draws more than 0 W (the H200: 116 W idle, 695 W at most under its 700 W limit); no board draws 5 kW; 0xFFFFFFFF mW is a sentinel",
};

/// Enforced power limit: a value of [`Reading::PowerLimit`].
pub static POWER_LIMIT: Bound = Bound {
    readings: &[Reading::PowerLimit],
    name: "enforced power limit",
    unit: "mW",
    min: 1.0,
    max: 5_000_000.0,
    why: "the H200's limit is settable from 200 W to 700 W; boards of 2026 stay below 2 kW",
};

/// Total energy: a value of [`Reading::Energy`].
pub static ENERGY: Bound = Bound {
    readings: &[Reading::Energy],
    name: "total energy",
    unit: "mJ",
    min: 0.0,
    max: 9.2e18,
    why: "a counter since the driver loaded (2.9e8 years at 1 kW fit below the bound); an all-ones u64 is a sentinel",
};

/// Clock (graphics, SM, memory): a value of [`Reading::ClockGraphics`], [`Reading::ClockSm`], [`Reading::ClockMemory`].
pub static CLOCK: Bound = Bound {
    readings: &[Reading::ClockGraphics, Reading::ClockSm, Reading::ClockMemory],
    name: "clock (graphics, SM, memory)",
    unit: "MHz",
    min: 1.0,
    max: 50_000.0,
    why: "the H200 runs 375-1980 MHz and its memory at 3201 MHz; GDDR memory clocks read up to ~16 GHz; 0xFFFFFFFF is a sentinel",
};

/// Clock-event reasons: a value of [`Reading::ClocksEventReasons`].
pub static CLOCKS_EVENT_REASONS: Bound = Bound {
    readings: &[Reading::ClocksEventReasons],
    name: "clock-event reasons",
    unit: "bitmask",
    min: 0.0,
    max: 65_535.0,
    why: "NVML defines bits 0x1 to 0x100 (nvmlClocksEventReasonAll = 0x1FF); a value with bits above the low 16 (all ones) is a sentinel",
};

/// Performance state: a value of [`Reading::PerformanceState`].
pub static PERFORMANCE_STATE: Bound = Bound {
    readings: &[Reading::PerformanceState],
    name: "performance state",
    unit: "P-state",
    min: 0.0,
    max: 15.0,
    why: "P0-P15; NVML_PSTATE_UNKNOWN (32) is no state",
};

/// ECC error total: a value of [`Reading::EccCorrected`], [`Reading::EccUncorrected`].
pub static ECC_ERRORS: Bound = Bound {
    readings: &[Reading::EccCorrected, Reading::EccUncorrected],
    name: "ECC error total",
    unit: "errors",
    min: 0.0,
    max: 9_007_199_254_740_992.0,
    why: "a counter since the driver loaded, exact up to 2^53; an all-ones u64 is a sentinel",
};

/// Remapped rows: a value of [`Reading::RemappedRows`].
pub static REMAPPED_ROWS: Bound = Bound {
    readings: &[Reading::RemappedRows],
    name: "remapped rows",
    unit: "rows",
    min: 0.0,
    max: 1_000_000.0,
    why: "HBM banks hold a few spare rows each (hundreds per GPU); 0xFFFFFFFF is a sentinel",
};

/// Process memory: a value of [`Reading::Processes`], [`Reading::MpsProcesses`].
pub static PROCESS_MEMORY: Bound = Bound {
    readings: &[Reading::Processes, Reading::MpsProcesses],
    name: "process memory",
    unit: "bytes",
    min: 0.0,
    max: 4.0 * TIB,
    why: "part of the device's memory: also at most its total when known",
};

/// Process utilization: a value of [`Reading::ProcessUtilization`].
pub static PROCESS_UTILIZATION: Bound = Bound {
    readings: &[Reading::ProcessUtilization],
    name: "process utilization",
    unit: "%",
    min: 0.0,
    max: 100.0,
    why: "percent of the sample period (nvmlProcessUtilizationSample_t)",
};

/// GPM activity: a value of [`Reading::Gpm`].
pub static GPM_ACTIVITY: Bound = Bound {
    readings: &[Reading::Gpm],
    name: "GPM activity",
    unit: "%",
    min: -1.0,
    max: 101.0,
    why: "percent of the GPM window; NVML's float arithmetic lands a hair outside 0-100 (held to 0..1 on export)",
};

/// GPM PCIe rate: a value of [`Reading::Gpm`].
pub static GPM_PCIE: Bound = Bound {
    readings: &[Reading::Gpm],
    name: "GPM PCIe rate",
    unit: "MiB/s",
    min: 0.0,
    max: 262_144.0,
    why: "PCIe 6.0 x16 moves ~121 GiB/s per direction; 256 GiB/s is twice that",
};

/// GPM NVLink rate: a value of [`Reading::Gpm`].
pub static GPM_NVLINK: Bound = Bound {
    readings: &[Reading::Gpm],
    name: "GPM NVLink rate",
    unit: "MiB/s",
    min: 0.0,
    max: 16_777_216.0,
    why: "NVLink 5 moves 1.8 TB/s per GPU; 16 TiB/s is eight times that",
};

/// PCIe throughput: a value of [`Reading::PcieThroughput`].
pub static PCIE_THROUGHPUT: Bound = Bound {
    readings: &[Reading::PcieThroughput],
    name: "PCIe throughput",
    unit: "KB/s",
    min: 0.0,
    max: 250_000_000.0,
    why: "PCIe 6.0 x16 moves ~124,000,000 KB/s per direction (the H200 recording: 7575 / 15580 KB/s); 0xFFFFFFFF is a sentinel",
};

/// Every bound, in documentation order.
pub static BOUNDS: &[&Bound] = &[
    &UTILIZATION_GPU,
    &UTILIZATION_MEMORY_CONTROLLER,
    &UTILIZATION_ENCODER,
    &UTILIZATION_DECODER,
    &MEMORY_TOTAL,
    &MEMORY_PART,
    &TEMPERATURE_GPU,
    &TEMPERATURE_MEMORY,
    &POWER,
    &POWER_LIMIT,
    &ENERGY,
    &CLOCK,
    &CLOCKS_EVENT_REASONS,
    &PERFORMANCE_STATE,
    &ECC_ERRORS,
    &REMAPPED_ROWS,
    &PROCESS_MEMORY,
    &PROCESS_UTILIZATION,
    &GPM_ACTIVITY,
    &GPM_PCIE,
    &GPM_NVLINK,
    &PCIE_THROUGHPUT,
];

/// Drops every impossible value of `d` (sets it absent), calling `rejected(reading, value)`
/// for each. Memory parts and process memory are also held to the device's total when it is
/// known. Values checked before they reach the sample (PCIe throughput, GPM rates) are not
/// seen here.
pub fn enforce(d: &mut DeviceSample, mut rejected: impl FnMut(&'static Bound, f64)) {
    macro_rules! check {
        ($field:expr, $reading:expr) => {
            if let Some(v) = $field {
                #[allow(clippy::cast_precision_loss, clippy::unnecessary_cast)]
                let x = v as f64;
                if !$reading.admits(x) {
                    rejected($reading, x);
                    $field = None;
                }
            }
        };
    }
    check!(d.utilization_gpu_percent, &UTILIZATION_GPU);
    check!(
        d.utilization_memory_controller_percent,
        &UTILIZATION_MEMORY_CONTROLLER
    );
    check!(d.utilization_encoder_percent, &UTILIZATION_ENCODER);
    check!(d.utilization_decoder_percent, &UTILIZATION_DECODER);
    check!(d.memory_total_bytes, &MEMORY_TOTAL);
    check!(d.memory_used_bytes, &MEMORY_PART);
    check!(d.memory_free_bytes, &MEMORY_PART);
    check!(d.memory_reserved_bytes, &MEMORY_PART);
    if let Some(total) = d.memory_total_bytes {
        for part in [
            &mut d.memory_used_bytes,
            &mut d.memory_free_bytes,
            &mut d.memory_reserved_bytes,
        ] {
            if let Some(v) = *part {
                if v > total {
                    rejected(&MEMORY_PART, v as f64);
                    *part = None;
                }
            }
        }
    }
    check!(d.temperature_gpu_celsius, &TEMPERATURE_GPU);
    check!(d.temperature_memory_celsius, &TEMPERATURE_MEMORY);
    check!(d.power_milliwatts, &POWER);
    check!(d.power_limit_milliwatts, &POWER_LIMIT);
    check!(d.energy_millijoules, &ENERGY);
    check!(d.clock_graphics_mhz, &CLOCK);
    check!(d.clock_sm_mhz, &CLOCK);
    check!(d.clock_memory_mhz, &CLOCK);
    check!(d.clocks_event_reasons, &CLOCKS_EVENT_REASONS);
    check!(d.performance_state, &PERFORMANCE_STATE);
    check!(d.ecc_corrected_total, &ECC_ERRORS);
    check!(d.ecc_uncorrected_total, &ECC_ERRORS);
    if let Some(r) = d.remapped_rows {
        for v in [r.correctable, r.uncorrectable] {
            if !REMAPPED_ROWS.admits(f64::from(v)) {
                rejected(&REMAPPED_ROWS, f64::from(v));
                d.remapped_rows = None;
                break;
            }
        }
    }
    let total = d.memory_total_bytes;
    for p in d.processes.iter_mut().flatten() {
        if let Some(v) = p.used_memory_bytes {
            if !PROCESS_MEMORY.admits(v as f64) || total.is_some_and(|t| v > t) {
                rejected(&PROCESS_MEMORY, v as f64);
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
            if let Some(bad) = shares.into_iter().find(|v| !PROCESS_UTILIZATION.admits(*v)) {
                rejected(&PROCESS_UTILIZATION, bad);
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
                if !GPM_ACTIVITY.admits(x) {
                    rejected(&GPM_ACTIVITY, x);
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

    /// Every reading is held by a bound, and every bound is a range.
    #[test]
    fn every_reading_has_a_bound() {
        for r in Reading::ALL {
            assert!(
                BOUNDS.iter().any(|b| b.readings.contains(r)),
                "{r:?} has no bound"
            );
        }
        for b in BOUNDS {
            assert!(b.min <= b.max, "{}", b.name);
            assert!(!b.readings.is_empty(), "{}", b.name);
        }
        let mut names: Vec<_> = BOUNDS.iter().map(|b| b.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), BOUNDS.len(), "bound names are unique");
    }

    /// The H200 recording's extremes are all possible values.
    #[test]
    fn the_h200_recording_is_within_bounds() {
        for (r, v) in [
            (&TEMPERATURE_GPU, 35.0),
            (&TEMPERATURE_GPU, 60.0),
            (&TEMPERATURE_MEMORY, 38.0),
            (&TEMPERATURE_MEMORY, 51.0),
            (&POWER, 116_456.0),
            (&POWER, 695_054.0),
            (&POWER_LIMIT, 700_000.0),
            (&CLOCK, 375.0),
            (&CLOCK, 3201.0),
            (&MEMORY_TOTAL, 150_754_820_096.0),
            (&ENERGY, 28_415_527.0),
            (&PCIE_THROUGHPUT, 15_580.0),
            (&CLOCKS_EVENT_REASONS, 4.0),
        ] {
            assert!(r.admits(v), "{} {v}", r.name);
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
                &MEMORY_PART,
                &TEMPERATURE_GPU,
                &TEMPERATURE_MEMORY,
                &POWER,
                &ENERGY,
                &CLOCKS_EVENT_REASONS,
                &PROCESS_MEMORY,
            ]
        );
        // 0 °C for the HBM of a GPU without the sensor.
        d.temperature_memory_celsius = Some(0);
        enforce(&mut d, |_, _| {});
        assert_eq!(d.temperature_memory_celsius, None);
    }
}
