//! The clock-event (throttle) reasons: the bits of the mask that
//! `nvmlDeviceGetCurrentClocksEventReasons` (before R535:
//! `nvmlDeviceGetCurrentClocksThrottleReasons`) returns, each with its NVML name, the value
//! of the `nvidia.gpu.clocks_event.reason` attribute and what it means. The metric, the
//! `hw.status` judgement, the clock rules, the run report and the sample log all read this
//! table.

use nvml_wrapper_sys::bindings as nvml;

/// One clock-event reason bit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClocksEventReason {
    /// The bit in the mask.
    pub bit: u64,
    /// NVML's name for the bit (`nvml.h`).
    pub nvml_name: &'static str,
    /// Value of the `nvidia.gpu.clocks_event.reason` attribute (and the name used in the
    /// run report, the sample log and alert attributes).
    pub value: &'static str,
    /// What holds the clocks back, in a few words.
    pub meaning: &'static str,
}

/// `nvmlClocksEventReasonGpuIdle`.
pub const GPU_IDLE: u64 = nvml::nvmlClocksEventReasonGpuIdle as u64;
/// `nvmlClocksEventReasonApplicationsClocksSetting`.
pub const APPLICATIONS_CLOCKS_SETTING: u64 =
    nvml::nvmlClocksEventReasonApplicationsClocksSetting as u64;
/// `nvmlClocksEventReasonSwPowerCap`.
pub const SW_POWER_CAP: u64 = nvml::nvmlClocksEventReasonSwPowerCap as u64;
/// `nvmlClocksThrottleReasonHwSlowdown`.
pub const HW_SLOWDOWN: u64 = nvml::nvmlClocksThrottleReasonHwSlowdown as u64;
/// `nvmlClocksEventReasonSyncBoost`.
pub const SYNC_BOOST: u64 = nvml::nvmlClocksEventReasonSyncBoost as u64;
/// `nvmlClocksEventReasonSwThermalSlowdown`.
pub const SW_THERMAL_SLOWDOWN: u64 = nvml::nvmlClocksEventReasonSwThermalSlowdown as u64;
/// `nvmlClocksThrottleReasonHwThermalSlowdown`.
pub const HW_THERMAL_SLOWDOWN: u64 = nvml::nvmlClocksThrottleReasonHwThermalSlowdown as u64;
/// `nvmlClocksThrottleReasonHwPowerBrakeSlowdown`.
pub const HW_POWER_BRAKE_SLOWDOWN: u64 = nvml::nvmlClocksThrottleReasonHwPowerBrakeSlowdown as u64;
/// `nvmlClocksEventReasonDisplayClockSetting`.
pub const DISPLAY_CLOCK_SETTING: u64 = nvml::nvmlClocksEventReasonDisplayClockSetting as u64;

/// Every reason the agent names, in bit order.
pub const CLOCKS_EVENT_REASONS: &[ClocksEventReason] = &[
    ClocksEventReason {
        bit: GPU_IDLE,
        nvml_name: "nvmlClocksEventReasonGpuIdle",
        value: "gpu_idle",
        meaning: "nothing runs on the GPU",
    },
    ClocksEventReason {
        bit: APPLICATIONS_CLOCKS_SETTING,
        nvml_name: "nvmlClocksEventReasonApplicationsClocksSetting",
        value: "applications_clocks_setting",
        meaning: "the application clocks setting (nvidia-smi -ac) caps the clocks",
    },
    ClocksEventReason {
        bit: SW_POWER_CAP,
        nvml_name: "nvmlClocksEventReasonSwPowerCap",
        value: "sw_power_cap",
        meaning: "the software power cap holds the clocks back (normal at full load)",
    },
    ClocksEventReason {
        bit: HW_SLOWDOWN,
        nvml_name: "nvmlClocksThrottleReasonHwSlowdown",
        value: "hw_slowdown",
        meaning: "hardware slowdown (temperature or power brake, by a factor of two or more)",
    },
    ClocksEventReason {
        bit: SYNC_BOOST,
        nvml_name: "nvmlClocksEventReasonSyncBoost",
        value: "sync_boost",
        meaning: "held to the clocks of the other GPUs in its sync-boost group",
    },
    ClocksEventReason {
        bit: SW_THERMAL_SLOWDOWN,
        nvml_name: "nvmlClocksEventReasonSwThermalSlowdown",
        value: "sw_thermal_slowdown",
        meaning: "the driver slows the clocks to keep the GPU or memory temperature down",
    },
    ClocksEventReason {
        bit: HW_THERMAL_SLOWDOWN,
        nvml_name: "nvmlClocksThrottleReasonHwThermalSlowdown",
        value: "hw_thermal_slowdown",
        meaning: "the hardware slows the clocks because the GPU is too hot",
    },
    ClocksEventReason {
        bit: HW_POWER_BRAKE_SLOWDOWN,
        nvml_name: "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
        value: "hw_power_brake_slowdown",
        meaning: "an external power brake (the power supply or the system) slows the clocks",
    },
    ClocksEventReason {
        bit: DISPLAY_CLOCK_SETTING,
        nvml_name: "nvmlClocksEventReasonDisplayClockSetting",
        value: "display_clock_setting",
        meaning: "the display clock setting caps the clocks",
    },
];

/// Reasons that mean the card is degraded (not the power cap, which is normal at full
/// load): hardware slowdown, software and hardware thermal slowdown, hardware power brake.
/// Any of them makes `hw.status` `degraded` and fires `clocks_slowdown`.
pub const DEGRADING: u64 =
    HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN;

/// Every bit in [`CLOCKS_EVENT_REASONS`].
pub const KNOWN: u64 = {
    let mut mask = 0;
    let mut i = 0;
    while i < CLOCKS_EVENT_REASONS.len() {
        mask |= CLOCKS_EVENT_REASONS[i].bit;
        i += 1;
    }
    mask
};

/// Attribute values of the reasons set in `mask`, in table order (unknown bits left out).
pub fn values(mask: u64) -> Vec<&'static str> {
    CLOCKS_EVENT_REASONS
        .iter()
        .filter(|r| mask & r.bit != 0)
        .map(|r| r.value)
        .collect()
}

/// The bit of the reason whose attribute value is `value`; 0 for a name not in the table.
pub fn bit(value: &str) -> u64 {
    CLOCKS_EVENT_REASONS
        .iter()
        .find(|r| r.value == value)
        .map_or(0, |r| r.bit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bits_are_nvml_s() {
        let bits: Vec<u64> = CLOCKS_EVENT_REASONS.iter().map(|r| r.bit).collect();
        assert_eq!(
            bits,
            [0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80, 0x100],
            "nvml.h's clocks event reason bits"
        );
        assert_eq!(KNOWN, 0x1ff);
        assert_eq!(DEGRADING, 0x8 | 0x20 | 0x40 | 0x80);
    }

    #[test]
    fn values_and_bits_go_both_ways() {
        assert_eq!(values(0x24), ["sw_power_cap", "sw_thermal_slowdown"]);
        assert_eq!(values(0x1000), Vec::<&str>::new());
        for r in CLOCKS_EVENT_REASONS {
            assert_eq!(bit(r.value), r.bit);
            assert!(r.nvml_name.starts_with("nvmlClocks"));
        }
        assert_eq!(bit("no_such_reason"), 0);
    }
}
