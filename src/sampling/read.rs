//! The NVML calls themselves: device listing, static facts, and the per-tick fields, each
//! through [`Gate`] so an unsupported field is asked once and then left alone.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

use super::snapshot::{DeviceInfo, DeviceSample, DeviceState, ProcessSample};
use crate::config::{DeviceId, DeviceSelection};

/// NVML field id of the HBM temperature (`NVML_FI_DEV_MEMORY_TEMP`).
const NVML_FI_DEV_MEMORY_TEMP: u32 = 82;

/// A per-tick field: its name in logs and the NVML call behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Field {
    Utilization,
    EncoderUtilization,
    DecoderUtilization,
    Memory,
    TemperatureGpu,
    TemperatureMemory,
    Power,
    PowerLimit,
    Energy,
    ClockGraphics,
    ClockSm,
    ClockMemory,
    ClocksEventReasons,
    PerformanceState,
    EccCorrected,
    EccUncorrected,
    Processes,
}

impl Field {
    /// The NVML C function (and argument) that reads this field.
    pub(crate) fn nvml_call(self) -> &'static str {
        match self {
            Field::Utilization => "nvmlDeviceGetUtilizationRates",
            Field::EncoderUtilization => "nvmlDeviceGetEncoderUtilization",
            Field::DecoderUtilization => "nvmlDeviceGetDecoderUtilization",
            Field::Memory => "nvmlDeviceGetMemoryInfo_v2",
            Field::TemperatureGpu => "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
            Field::TemperatureMemory => "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)",
            Field::Power => "nvmlDeviceGetPowerUsage",
            Field::PowerLimit => "nvmlDeviceGetEnforcedPowerLimit",
            Field::Energy => "nvmlDeviceGetTotalEnergyConsumption",
            Field::ClockGraphics => "nvmlDeviceGetClockInfo(NVML_CLOCK_GRAPHICS)",
            Field::ClockSm => "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
            Field::ClockMemory => "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
            Field::ClocksEventReasons => "nvmlDeviceGetCurrentClocksThrottleReasons",
            Field::PerformanceState => "nvmlDeviceGetPerformanceState",
            Field::EccCorrected => "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)",
            Field::EccUncorrected => "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
            Field::Processes => "nvmlDeviceGetComputeRunningProcesses_v3",
        }
    }
}

/// The `NVML_ERROR_*` name of an error (the `error.type` of `gpu_sidecar.nvml.errors`).
/// Errors of the wrapper itself map to the NVML code closest in meaning: a library that
/// cannot be loaded is `NVML_ERROR_LIBRARY_NOT_FOUND`, a missing symbol
/// `NVML_ERROR_FUNCTION_NOT_FOUND`; a code the wrapper does not know is `NVML_ERROR_<n>`.
pub(crate) fn error_code(e: &NvmlError) -> String {
    let name = match e {
        NvmlError::Uninitialized => "UNINITIALIZED",
        NvmlError::InvalidArg => "INVALID_ARGUMENT",
        NvmlError::NotSupported => "NOT_SUPPORTED",
        NvmlError::NoPermission => "NO_PERMISSION",
        NvmlError::NotFound => "NOT_FOUND",
        NvmlError::InsufficientSize(_) => "INSUFFICIENT_SIZE",
        NvmlError::InsufficientPower => "INSUFFICIENT_POWER",
        NvmlError::DriverNotLoaded => "DRIVER_NOT_LOADED",
        NvmlError::Timeout => "TIMEOUT",
        NvmlError::IrqIssue => "IRQ_ISSUE",
        NvmlError::LibraryNotFound | NvmlError::LibloadingError(_) => "LIBRARY_NOT_FOUND",
        NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_) => "FUNCTION_NOT_FOUND",
        NvmlError::CorruptedInfoROM => "CORRUPTED_INFOROM",
        NvmlError::GpuLost => "GPU_IS_LOST",
        NvmlError::ResetRequired => "RESET_REQUIRED",
        NvmlError::OperatingSystem => "OPERATING_SYSTEM",
        NvmlError::LibRmVersionMismatch => "LIB_RM_VERSION_MISMATCH",
        NvmlError::InUse => "IN_USE",
        NvmlError::InsufficientMemory => "MEMORY",
        NvmlError::NoData => "NO_DATA",
        NvmlError::VgpuEccNotSupported => "VGPU_ECC_NOT_SUPPORTED",
        NvmlError::UnexpectedVariant(code) => return format!("NVML_ERROR_{code}"),
        // Errors of the wrapper's own conversions (strings, bit sets, PCI info).
        _ => "UNKNOWN",
    };
    format!("NVML_ERROR_{name}")
}

/// Errors seen since the last [`Gate::take_errors`], by (call, code).
pub(crate) type ErrorCounts = BTreeMap<(&'static str, String), u64>;

/// Remembers which (device, field) pairs NVML does not answer, and which errors were
/// already logged, so each is said once; counts every error by call and code.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    unsupported: HashSet<(u32, Field)>,
    failing: HashSet<(u32, Field)>,
    errors: ErrorCounts,
}

/// What one call's error means for the field and the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Unsupported here: absent for the rest of the session, not asked again.
    Unsupported,
    /// The device is gone (`GPU_IS_LOST`, `RESET_REQUIRED`).
    Lost,
    /// A failure this tick: absent now, asked again next tick.
    Transient,
}

pub(crate) fn verdict(e: &NvmlError) -> Verdict {
    match e {
        NvmlError::NotSupported
        | NvmlError::InvalidArg
        | NvmlError::NotFound
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::FunctionNotFound => Verdict::Unsupported,
        NvmlError::GpuLost | NvmlError::ResetRequired => Verdict::Lost,
        _ => Verdict::Transient,
    }
}

impl Gate {
    /// Runs `call` for `field` of device `index` unless it is known unsupported. Returns the
    /// value, or `None` (logged once per device, field and kind of failure). Sets `*lost`
    /// when the device answered that it is lost.
    /// Counts one error of `call`.
    pub(crate) fn count(&mut self, call: &'static str, e: &NvmlError) {
        *self.errors.entry((call, error_code(e))).or_insert(0) += 1;
    }

    /// The errors counted since the last call.
    pub(crate) fn take_errors(&mut self) -> ErrorCounts {
        std::mem::take(&mut self.errors)
    }

    pub(crate) fn read<T>(
        &mut self,
        index: u32,
        uuid: &str,
        field: Field,
        lost: &mut bool,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if *lost || self.unsupported.contains(&(index, field)) {
            return None;
        }
        match call() {
            Ok(v) => {
                if self.failing.remove(&(index, field)) {
                    tracing::info!(gpu = index, uuid, call = field.nvml_call(), "answers again");
                }
                Some(v)
            }
            Err(e) => {
                self.count(field.nvml_call(), &e);
                match verdict(&e) {
                    Verdict::Unsupported => {
                        self.unsupported.insert((index, field));
                        tracing::info!(
                            gpu = index,
                            uuid,
                            call = field.nvml_call(),
                            error = %e,
                            "not supported on this device; the value will be absent and not asked again"
                        );
                    }
                    Verdict::Lost => {
                        *lost = true;
                    }
                    Verdict::Transient => {
                        if self.failing.insert((index, field)) {
                            tracing::warn!(
                                gpu = index,
                                uuid,
                                call = field.nvml_call(),
                                error = %e,
                                "failed; the value is absent until it answers again"
                            );
                        }
                    }
                }
                None
            }
        }
    }
}

struct Selected<'n> {
    device: Device<'n>,
    info: Arc<DeviceInfo>,
    lost: bool,
}

/// The devices of one NVML session and their gates.
pub(crate) struct Reader<'n> {
    devices: Vec<Selected<'n>>,
    gate: Gate,
}

impl<'n> Reader<'n> {
    /// Lists devices (`nvmlDeviceGetCount_v2`, `nvmlDeviceGetHandleByIndex_v2`), reads their
    /// static facts and keeps those that `selection` names.
    pub(crate) fn open(nvml: &'n Nvml, selection: &DeviceSelection) -> Result<Self, NvmlError> {
        let wanted: Option<&[DeviceId]> = match selection {
            DeviceSelection::All => None,
            DeviceSelection::List(ids) => Some(ids),
            // Resolved into a list before sampling starts; never "all".
            DeviceSelection::PodResources => Some(&[]),
        };
        let mut gate = Gate::default();
        let count = nvml.device_count()?;
        let driver_version = nvml.sys_driver_version().ok();
        let mut devices = Vec::new();
        let mut matched = HashSet::new();
        for index in 0..count {
            let device = match nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    gate.count("nvmlDeviceGetHandleByIndex_v2", &e);
                    log_unlisted(index, "nvmlDeviceGetHandleByIndex_v2", &e);
                    continue;
                }
            };
            let uuid = match device.uuid() {
                Ok(u) => u,
                Err(e) => {
                    gate.count("nvmlDeviceGetUUID", &e);
                    log_unlisted(index, "nvmlDeviceGetUUID", &e);
                    continue;
                }
            };
            if let Some(ids) = wanted {
                let hit = ids.iter().position(|id| match id {
                    DeviceId::Index(i) => *i == index,
                    DeviceId::Uuid(u) => *u == uuid,
                });
                match hit {
                    Some(pos) => {
                        matched.insert(pos);
                    }
                    None => continue,
                }
            }
            let info = DeviceInfo {
                index,
                name: device.name().ok(),
                serial: device.serial().ok(),
                pci_bus_id: device.pci_info().ok().map(|p| p.bus_id),
                vbios_version: device.vbios_version().ok(),
                driver_version: driver_version.clone(),
                uuid,
            };
            tracing::info!(
                gpu = index,
                uuid = %info.uuid,
                name = info.name.as_deref().unwrap_or("?"),
                pci_bus_id = info.pci_bus_id.as_deref().unwrap_or("?"),
                "GPU found"
            );
            devices.push(Selected {
                device,
                info: Arc::new(info),
                lost: false,
            });
        }
        if let Some(ids) = wanted {
            for (pos, id) in ids.iter().enumerate() {
                if !matched.contains(&pos) {
                    tracing::warn!(device = ?id, "GPU_SIDECAR_DEVICES names a device NVML does not show");
                }
            }
        }
        if devices.is_empty() {
            if count == 0 {
                tracing::warn!("NVML shows no GPU: nothing to report");
            } else {
                tracing::warn!(
                    "GPU_SIDECAR_DEVICES selects none of the {count} GPUs NVML shows (indices 0 to {}): nothing to report",
                    count - 1
                );
            }
        }
        Ok(Self { devices, gate })
    }

    pub(crate) fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// Errors counted since the last call (listing included), by call and code.
    pub(crate) fn take_errors(&mut self) -> ErrorCounts {
        self.gate.take_errors()
    }

    /// Reads every per-tick field of every device.
    pub(crate) fn sample(&mut self) -> Vec<DeviceSample> {
        let gate = &mut self.gate;
        self.devices
            .iter_mut()
            .map(|d| sample_device(gate, d))
            .collect()
    }
}

fn sample_device(gate: &mut Gate, sel: &mut Selected<'_>) -> DeviceSample {
    let dev = &sel.device;
    let index = sel.info.index;
    let uuid = sel.info.uuid.as_str();
    let was_lost = sel.lost;
    // A lost device is probed with one cheap call per tick to notice its return.
    let mut lost = false;
    let memory = gate.read(index, uuid, Field::Memory, &mut lost, || dev.memory_info());
    if lost {
        if !was_lost {
            tracing::error!(gpu = index, uuid, "GPU is lost (fallen off the bus or needs a reset); it is reported as failed, the other GPUs go on");
        }
        sel.lost = true;
        return DeviceSample::empty(sel.info.clone(), DeviceState::Lost);
    }
    if was_lost {
        tracing::info!(gpu = index, uuid, "GPU answers again");
        sel.lost = false;
    }
    let mut s = DeviceSample::empty(sel.info.clone(), DeviceState::Ok);
    if let Some(m) = memory {
        s.memory_total_bytes = Some(m.total);
        s.memory_used_bytes = Some(m.used);
        s.memory_free_bytes = Some(m.free);
        s.memory_reserved_bytes = Some(m.reserved);
    }
    macro_rules! read {
        ($field:expr, $call:expr) => {
            gate.read(index, uuid, $field, &mut lost, || $call)
        };
    }
    if let Some(u) = read!(Field::Utilization, dev.utilization_rates()) {
        s.utilization_gpu_percent = Some(u.gpu);
        s.utilization_memory_controller_percent = Some(u.memory);
    }
    s.utilization_encoder_percent =
        read!(Field::EncoderUtilization, dev.encoder_utilization()).map(|u| u.utilization);
    s.utilization_decoder_percent =
        read!(Field::DecoderUtilization, dev.decoder_utilization()).map(|u| u.utilization);
    s.temperature_gpu_celsius = read!(
        Field::TemperatureGpu,
        dev.temperature(TemperatureSensor::Gpu)
    );
    s.temperature_memory_celsius = read!(Field::TemperatureMemory, memory_temperature(dev));
    s.power_milliwatts = read!(Field::Power, dev.power_usage());
    s.power_limit_milliwatts = read!(Field::PowerLimit, dev.enforced_power_limit());
    s.energy_millijoules = read!(Field::Energy, dev.total_energy_consumption());
    s.clock_graphics_mhz = read!(Field::ClockGraphics, dev.clock_info(Clock::Graphics));
    s.clock_sm_mhz = read!(Field::ClockSm, dev.clock_info(Clock::SM));
    s.clock_memory_mhz = read!(Field::ClockMemory, dev.clock_info(Clock::Memory));
    s.clocks_event_reasons =
        read!(Field::ClocksEventReasons, dev.current_throttle_reasons()).map(|r| r.bits());
    s.performance_state = read!(Field::PerformanceState, dev.performance_state()).map(|p| p.as_c());
    s.ecc_corrected_total = read!(
        Field::EccCorrected,
        dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
    );
    s.ecc_uncorrected_total = read!(
        Field::EccUncorrected,
        dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
    );
    s.processes = read!(Field::Processes, dev.running_compute_processes()).map(|ps| {
        ps.into_iter()
            .map(|p| ProcessSample {
                pid: p.pid,
                used_memory_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect()
    });
    if lost {
        tracing::error!(gpu = index, uuid, "GPU is lost (fallen off the bus or needs a reset); it is reported as failed, the other GPUs go on");
        sel.lost = true;
        return DeviceSample::empty(sel.info.clone(), DeviceState::Lost);
    }
    s
}

/// One line for a GPU that cannot be listed (no handle or no UUID, so no `hw.id` to report
/// it under), naming the cause and the fix when it is a known one.
fn log_unlisted(index: u32, call: &str, e: &NvmlError) {
    match e {
        NvmlError::GpuLost | NvmlError::ResetRequired => tracing::error!(
            gpu = index,
            call,
            "this GPU cannot be reported: {}",
            super::NvmlDown::classify(e).explain()
        ),
        _ => tracing::error!(gpu = index, call, error = %e, "cannot list this GPU; it is skipped"),
    }
}

/// HBM temperature through the field-values API; the per-field return code is the answer.
fn memory_temperature(dev: &Device<'_>) -> Result<u32, NvmlError> {
    let mut values = dev.field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP)])?;
    let sample = values.pop().ok_or(NvmlError::NotSupported)??;
    match sample.value? {
        SampleValue::U32(v) => Ok(v),
        SampleValue::U64(v) => u32::try_from(v).map_err(|_| NvmlError::Unknown),
        SampleValue::I64(v) => u32::try_from(v).map_err(|_| NvmlError::Unknown),
        SampleValue::F64(v) if v >= 0.0 => Ok(v.round() as u32),
        SampleValue::F64(_) => Err(NvmlError::Unknown),
    }
}
