//! Plain data produced by the sampler: one [`Snapshot`] per tick, one [`DeviceSample`] per
//! GPU. Every reading is an `Option`: `None` means NVML did not give the value (unsupported,
//! failed, or the device is lost), never zero. Units are in the field names.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// Facts about a device that do not change while NVML is up; read once per NVML session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// NVML index (`nvmlDeviceGetHandleByIndex_v2`), as `nvidia-smi` numbers GPUs.
    pub index: u32,
    /// GPU UUID (`nvmlDeviceGetUUID`), e.g. `GPU-8f6c…`; the `hw.id` attribute.
    pub uuid: String,
    /// Product name (`nvmlDeviceGetName`), e.g. `NVIDIA H200`; the `hw.model` attribute.
    pub name: Option<String>,
    /// Board serial number (`nvmlDeviceGetSerial`); `hw.serial_number`.
    pub serial: Option<String>,
    /// PCI bus id (`nvmlDeviceGetPciInfo_v3`), e.g. `00000000:19:00.0`.
    pub pci_bus_id: Option<String>,
    /// VBIOS version (`nvmlDeviceGetVbiosVersion`); `hw.firmware_version`.
    pub vbios_version: Option<String>,
    /// Driver version (`nvmlSystemGetDriverVersion`), e.g. `580.159.04`; `hw.driver_version`.
    pub driver_version: Option<String>,
}

/// Whether NVML can still talk to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceState {
    /// Answering.
    Ok,
    /// `NVML_ERROR_GPU_IS_LOST` (fallen off the bus) or `NVML_ERROR_RESET_REQUIRED`:
    /// no readings until it answers again.
    Lost,
}

/// One compute process on a device (`nvmlDeviceGetComputeRunningProcesses_v3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSample {
    /// Host PID as NVML reports it (not the PID in the sidecar's namespace).
    pub pid: u32,
    /// GPU memory held by the process in bytes; `None` when NVML cannot tell (no
    /// permission, or Windows WDDM).
    pub used_memory_bytes: Option<u64>,
}

/// The readings of one device at one tick.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceSample {
    /// Static facts (shared between ticks).
    pub info: Arc<DeviceInfo>,
    /// Lost or answering.
    pub state: DeviceState,
    /// GPU busy, percent of the last sample period (`nvmlDeviceGetUtilizationRates.gpu`).
    pub utilization_gpu_percent: Option<u32>,
    /// Memory controller busy, percent (`nvmlDeviceGetUtilizationRates.memory`).
    pub utilization_memory_controller_percent: Option<u32>,
    /// Encoder busy, percent (`nvmlDeviceGetEncoderUtilization`).
    pub utilization_encoder_percent: Option<u32>,
    /// Decoder busy, percent (`nvmlDeviceGetDecoderUtilization`).
    pub utilization_decoder_percent: Option<u32>,
    /// Total framebuffer memory, bytes (`nvmlDeviceGetMemoryInfo_v2.total`).
    pub memory_total_bytes: Option<u64>,
    /// Used memory, bytes (`nvmlDeviceGetMemoryInfo_v2.used`).
    pub memory_used_bytes: Option<u64>,
    /// Free memory, bytes (`nvmlDeviceGetMemoryInfo_v2.free`).
    pub memory_free_bytes: Option<u64>,
    /// Memory reserved by the driver and firmware, bytes (`nvmlDeviceGetMemoryInfo_v2.reserved`).
    pub memory_reserved_bytes: Option<u64>,
    /// GPU die temperature, °C (`nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`).
    pub temperature_gpu_celsius: Option<u32>,
    /// HBM temperature, °C (`nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)`).
    pub temperature_memory_celsius: Option<u32>,
    /// Power draw, milliwatts (`nvmlDeviceGetPowerUsage`).
    pub power_milliwatts: Option<u32>,
    /// Enforced power limit, milliwatts (`nvmlDeviceGetEnforcedPowerLimit`).
    pub power_limit_milliwatts: Option<u32>,
    /// Energy since the driver was loaded, millijoules (`nvmlDeviceGetTotalEnergyConsumption`).
    pub energy_millijoules: Option<u64>,
    /// Graphics clock, MHz (`nvmlDeviceGetClockInfo(NVML_CLOCK_GRAPHICS)`).
    pub clock_graphics_mhz: Option<u32>,
    /// SM clock, MHz (`nvmlDeviceGetClockInfo(NVML_CLOCK_SM)`).
    pub clock_sm_mhz: Option<u32>,
    /// Memory clock, MHz (`nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)`).
    pub clock_memory_mhz: Option<u32>,
    /// Clock-event (throttle) reasons bitmask (`nvmlDeviceGetCurrentClocksThrottleReasons`);
    /// see [`crate::sampling::CLOCKS_EVENT_REASONS`].
    pub clocks_event_reasons: Option<u64>,
    /// Performance state, 0 (P0, maximum) to 15 (`nvmlDeviceGetPerformanceState`).
    pub performance_state: Option<u32>,
    /// Corrected ECC errors since driver load
    /// (`nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)`).
    pub ecc_corrected_total: Option<u64>,
    /// Uncorrected ECC errors since driver load (same call, `UNCORRECTED`).
    pub ecc_uncorrected_total: Option<u64>,
    /// Compute processes; `None` when the list could not be read.
    pub processes: Option<Vec<ProcessSample>>,
}

impl DeviceSample {
    /// A sample with no readings (every field `None`).
    pub fn empty(info: Arc<DeviceInfo>, state: DeviceState) -> Self {
        Self {
            info,
            state,
            utilization_gpu_percent: None,
            utilization_memory_controller_percent: None,
            utilization_encoder_percent: None,
            utilization_decoder_percent: None,
            memory_total_bytes: None,
            memory_used_bytes: None,
            memory_free_bytes: None,
            memory_reserved_bytes: None,
            temperature_gpu_celsius: None,
            temperature_memory_celsius: None,
            power_milliwatts: None,
            power_limit_milliwatts: None,
            energy_millijoules: None,
            clock_graphics_mhz: None,
            clock_sm_mhz: None,
            clock_memory_mhz: None,
            clocks_event_reasons: None,
            performance_state: None,
            ecc_corrected_total: None,
            ecc_uncorrected_total: None,
            processes: None,
        }
    }
}

/// Everything read at one tick.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// Wall-clock time the tick started.
    pub taken_at: SystemTime,
    /// Monotonic time the tick started (for staleness checks).
    pub taken_instant: Instant,
    /// Tick number since the agent started (1-based).
    pub seq: u64,
    /// One entry per selected device, in NVML index order.
    pub devices: Vec<DeviceSample>,
}
