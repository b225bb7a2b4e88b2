//! [`Reading`]: every NVML call the sampler makes per tick, the one name the gate, the
//! bounds ([`super::bounds`]) and the error counts use for it. Each C name is spelled once,
//! in the table below: as `#[doc(alias)]` on its variant (so a search for the C name in the
//! API docs finds the Rust item, as in nvml-wrapper) and as [`Reading::nvml_call`], the
//! `nvidia.nvml.call` value of `gpu_sidecar.nvml.errors`.

/// Declares [`Reading`] from `Variant = "nvmlCName" ("ARGUMENT")` rows: the alias is the
/// bare C name; [`Reading::nvml_call`] adds the argument in parentheses, and `/ "alt"` and
/// `+ "then"` name the other calls of a reading made of several.
macro_rules! readings {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $c:literal $(/ $alt:literal)? $(+ $then:literal)? $(($arg:literal))?;
    )*) => {
        /// A per-tick NVML call of the sampler: its name in logs and error counts, and what
        /// the bounds ([`super::bounds::Bound::readings`]) hold.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reading {
            $(
                $(#[doc = $doc])*
                #[doc(alias = $c)]
                $(#[doc(alias = $alt)])?
                $(#[doc(alias = $then)])?
                $variant,
            )*
        }

        impl Reading {
            /// Every reading, in table order.
            pub const ALL: &'static [Reading] = &[$(Reading::$variant),*];

            /// The NVML C function (and argument) behind this reading, as logged and counted
            /// (`nvidia.nvml.call`).
            pub fn nvml_call(self) -> &'static str {
                match self {
                    $(
                        Reading::$variant => concat!(
                            $c $(, "/", $alt)? $(, " + ", $then)? $(, "(", $arg, ")")?
                        ),
                    )*
                }
            }
        }
    };
}

readings! {
    /// GPU and memory-controller busy, % (`.gpu`, `.memory`).
    Utilization = "nvmlDeviceGetUtilizationRates";
    /// Encoder busy, %.
    EncoderUtilization = "nvmlDeviceGetEncoderUtilization";
    /// Decoder busy, %.
    DecoderUtilization = "nvmlDeviceGetDecoderUtilization";
    /// Memory total, used, free, reserved, bytes (v1 `nvmlDeviceGetMemoryInfo` on older
    /// drivers: the versioned call picks it).
    Memory = "nvmlDeviceGetMemoryInfo_v2";
    /// GPU die temperature, °C.
    TemperatureGpu = "nvmlDeviceGetTemperature" ("NVML_TEMPERATURE_GPU");
    /// HBM temperature, °C (field value).
    TemperatureMemory = "nvmlDeviceGetFieldValues" ("NVML_FI_DEV_MEMORY_TEMP");
    /// Board power draw, mW.
    Power = "nvmlDeviceGetPowerUsage";
    /// Enforced power limit, mW.
    PowerLimit = "nvmlDeviceGetEnforcedPowerLimit";
    /// Energy since the driver loaded, mJ.
    Energy = "nvmlDeviceGetTotalEnergyConsumption";
    /// Graphics clock, MHz.
    ClockGraphics = "nvmlDeviceGetClockInfo" ("NVML_CLOCK_GRAPHICS");
    /// SM clock, MHz.
    ClockSm = "nvmlDeviceGetClockInfo" ("NVML_CLOCK_SM");
    /// Memory clock, MHz.
    ClockMemory = "nvmlDeviceGetClockInfo" ("NVML_CLOCK_MEM");
    /// Clock-event reasons bitmask.
    ClocksEventReasons = "nvmlDeviceGetCurrentClocksEventReasons";
    /// Performance state, P0-P15.
    PerformanceState = "nvmlDeviceGetPerformanceState";
    /// Corrected (volatile) ECC errors since the driver loaded.
    EccCorrected = "nvmlDeviceGetTotalEccErrors" ("CORRECTED, VOLATILE");
    /// Uncorrected (volatile) ECC errors since the driver loaded.
    EccUncorrected = "nvmlDeviceGetTotalEccErrors" ("UNCORRECTED, VOLATILE");
    /// Compute processes and their `usedGpuMemory`, bytes.
    Processes = "nvmlDeviceGetComputeRunningProcesses_v3";
    /// MPS compute processes and their `usedGpuMemory`, bytes.
    MpsProcesses = "nvmlDeviceGetMPSComputeRunningProcesses_v3";
    /// Remapped row counts and the pending / failed flags.
    RemappedRows = "nvmlDeviceGetRemappedRows";
    /// Per-process SM, memory, encoder and decoder shares, %.
    ProcessUtilization = "nvmlDeviceGetProcessUtilization";
    /// PCIe transmit and receive throughput, KB/s.
    PcieThroughput = "nvmlDeviceGetPcieThroughput";
    /// GPM samples and the metrics between two of them (activity %, PCIe and NVLink MiB/s).
    Gpm = "nvmlGpmSampleGet" / "nvmlGpmMigSampleGet" + "nvmlGpmMetricsGet";
}

#[cfg(test)]
mod tests {
    use super::Reading;

    /// The names logged and counted are NVML's, with the argument where one C function
    /// serves several readings.
    #[test]
    fn nvml_calls_are_the_c_names() {
        assert_eq!(Reading::Power.nvml_call(), "nvmlDeviceGetPowerUsage");
        assert_eq!(
            Reading::TemperatureGpu.nvml_call(),
            "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)"
        );
        assert_eq!(
            Reading::EccUncorrected.nvml_call(),
            "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)"
        );
        assert_eq!(
            Reading::Gpm.nvml_call(),
            "nvmlGpmSampleGet/nvmlGpmMigSampleGet + nvmlGpmMetricsGet"
        );
        let mut names: Vec<_> = Reading::ALL.iter().map(|r| r.nvml_call()).collect();
        assert_eq!(names.len(), 22);
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 22, "one name a reading");
    }
}
