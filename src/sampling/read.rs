//! The NVML calls themselves: device listing (GPUs and, in MIG mode, their MIG devices),
//! static facts, and the sampled fields in their groups ([`SampleGroup`]), each call through
//! [`Gate`] so an unsupported field is asked once and then left alone.
//!
//! The fast group is read every tick; each slow group at the ticks [`Due`] names (export
//! ticks, on its own cadence; see [`super::cadence`]), and its values are in that tick's
//! sample only: a group not read at a tick is absent from it, never carried over from an
//! earlier read. What a MIG device is asked: memory, processes, process utilization and GPM
//! (through its parent); power, energy, temperatures, clocks, ECC and row remapping belong
//! to the parent GPU and are read there only. A GPU in MIG mode reports its processes on its
//! MIG devices, not itself (no double counting).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

use super::cadence::{Due, SLOW_GROUPS};
use super::gpm::{GpmState, MIB};
use super::processes;
use super::raw::{self, ProcessInfoLayout, RawProcess};
use super::snapshot::{
    DeviceInfo, DeviceSample, DeviceState, GpmMetrics, IoTotals, MigPlacement, ProcessSample,
    ProcessUtilization,
};
use super::watch::Target;
use super::SampleGroup;
use crate::config::{DeviceId, DeviceSelection};
use crate::logging::LogLimiter;

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
    RemappedRows,
    ProcessUtilization,
    PcieThroughput,
    Gpm,
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
            Field::RemappedRows => "nvmlDeviceGetRemappedRows",
            Field::ProcessUtilization => "nvmlDeviceGetProcessUtilization",
            Field::PcieThroughput => "nvmlDeviceGetPcieThroughput",
            Field::Gpm => "nvmlGpmSampleGet/nvmlGpmMigSampleGet + nvmlGpmMetricsGet",
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
/// already logged, so each is said once; counts every error by call and code. Devices are
/// keyed by their slot in the reader's list (a MIG device shares its parent's NVML index).
/// A field that fails and answers again over and over is said at most once a minute (with
/// the count of failures in between), not twice per flap.
#[derive(Debug)]
pub(crate) struct Gate {
    unsupported: HashSet<(usize, Field)>,
    /// Fields failing now, and whether this run of failures was logged.
    failing: HashMap<(usize, Field), bool>,
    lines: LogLimiter<(usize, Field)>,
    errors: ErrorCounts,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            unsupported: HashSet::new(),
            failing: HashMap::new(),
            lines: LogLimiter::new(crate::logging::LOG_PERIOD),
            errors: ErrorCounts::new(),
        }
    }
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
    /// Counts one error of `call`.
    pub(crate) fn count(&mut self, call: &'static str, e: &NvmlError) {
        *self.errors.entry((call, error_code(e))).or_insert(0) += 1;
    }

    /// The errors counted since the last call.
    pub(crate) fn take_errors(&mut self) -> ErrorCounts {
        std::mem::take(&mut self.errors)
    }

    /// Whether `field` of the device in `slot` is known unsupported.
    pub(crate) fn is_unsupported(&self, slot: usize, field: Field) -> bool {
        self.unsupported.contains(&(slot, field))
    }

    /// Runs `call` for `field` of the device in `slot` (`info`) unless it is known
    /// unsupported. Returns the value, or `None` (logged once per device, field and kind of
    /// failure). Sets `*lost` when the device answered that it is lost.
    pub(crate) fn read<T>(
        &mut self,
        slot: usize,
        info: &DeviceInfo,
        field: Field,
        lost: &mut bool,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if *lost || self.unsupported.contains(&(slot, field)) {
            return None;
        }
        let index = info.index;
        let uuid = info.uuid.as_str();
        let key = (slot, field);
        match call() {
            Ok(v) => {
                if self.failing.remove(&key) == Some(true) {
                    tracing::info!(gpu = index, uuid, call = field.nvml_call(), "answers again");
                }
                Some(v)
            }
            Err(e) => {
                self.count(field.nvml_call(), &e);
                match verdict(&e) {
                    Verdict::Unsupported => {
                        self.unsupported.insert(key);
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
                        if !self.failing.contains_key(&key) {
                            let said = self.lines.admit(key, Instant::now());
                            if let Some(not_logged) = said {
                                tracing::warn!(
                                    gpu = index,
                                    uuid,
                                    call = field.nvml_call(),
                                    error = %e,
                                    failed_runs_not_logged = not_logged,
                                    "failed; the value is absent until it answers again (said at most once a minute)"
                                );
                            }
                            self.failing.insert(key, said.is_some());
                        }
                    }
                }
                None
            }
        }
    }
}

/// What a device is, for what it is asked.
enum Role<'n> {
    /// A GPU; in MIG mode its processes are reported on its MIG devices.
    Gpu { mig_enabled: bool },
    /// A MIG device: GPM samples are taken on the parent for its GPU instance.
    Mig {
        parent: Device<'n>,
        gpu_instance_id: Option<u32>,
    },
}

struct Selected<'n> {
    device: Device<'n>,
    info: Arc<DeviceInfo>,
    role: Role<'n>,
    lost: bool,
    /// `None` where GPM is unsupported.
    gpm: Option<GpmState<'n>>,
    /// Whether the last GPM window answered PCIe bytes (`None` before the first window):
    /// the PCIe throughput call is the fallback when it did not.
    gpm_pcie: Option<bool>,
    gpm_unanswered_said: bool,
    /// The byte counters (running totals, kept across NVML sessions).
    io: IoTotals,
    pcie_previous: Option<(Instant, u32, u32)>,
    /// PCIe bytes are counted up to this instant. GPM windows and the throughput fallback
    /// both add bytes over a stretch of time; each adds only what lies after it, so when
    /// GPM's PCIe answers come and go no stretch is counted twice.
    pcie_counted_until: Option<Instant>,
    process_utilization_seen_us: u64,
    /// PIDs listed at the last successful process-utilization read: the next read's window
    /// covers them whole, so one without a sample there was idle (0). A process first
    /// listed after that read has no utilization until a read covers it.
    process_covered: HashSet<u32>,
    /// What the slow groups read at this tick (reset at each tick: nothing is carried).
    fresh: Fresh,
    // This tick's process list, and executable names by PID.
    processes: Option<Vec<RawProcess>>,
    names: HashMap<u32, Option<String>>,
}

impl<'n> Selected<'n> {
    fn new(device: Device<'n>, info: DeviceInfo, role: Role<'n>, io: IoTotals) -> Self {
        Self {
            device,
            info: Arc::new(info),
            role,
            lost: false,
            gpm: None,
            gpm_pcie: None,
            gpm_unanswered_said: false,
            io,
            pcie_previous: None,
            pcie_counted_until: None,
            process_utilization_seen_us: 0,
            process_covered: HashSet::new(),
            fresh: Fresh::default(),
            processes: None,
            names: HashMap::new(),
        }
    }

    /// Adds PCIe bytes at these rates (bytes per second; `None`: not answered) over
    /// `[from, to]`, only the part after what is already counted, then marks `to` counted.
    fn count_pcie(&mut self, from: Instant, to: Instant, tx: Option<f64>, rx: Option<f64>) {
        let from = self.pcie_counted_until.map_or(from, |c| c.max(from));
        let secs = to.saturating_duration_since(from).as_secs_f64();
        for (total, rate) in [
            (&mut self.io.pcie_transmit_bytes, tx),
            (&mut self.io.pcie_receive_bytes, rx),
        ] {
            if let Some(rate) = rate {
                *total = Some(total.unwrap_or(0.0) + rate * secs);
            }
        }
        if tx.is_some() || rx.is_some() {
            self.pcie_counted_until = Some(self.pcie_counted_until.map_or(to, |c| c.max(to)));
        }
        // Counted at this tick: in this tick's sample (and only this one).
        if tx.is_some() {
            self.fresh.io.pcie_transmit_bytes = self.io.pcie_transmit_bytes;
        }
        if rx.is_some() {
            self.fresh.io.pcie_receive_bytes = self.io.pcie_receive_bytes;
        }
    }

    fn is_gpu(&self) -> bool {
        matches!(self.role, Role::Gpu { .. })
    }

    fn reports_processes(&self) -> bool {
        !matches!(self.role, Role::Gpu { mig_enabled: true })
    }

    /// Forgets the windows in progress (the device is lost; nothing of it is exported, and
    /// a window across the loss would be a guess).
    fn drop_carried(&mut self) {
        self.fresh = Fresh::default();
        self.gpm_pcie = None;
        self.pcie_previous = None;
        self.process_covered.clear();
        self.processes = None;
        if let Some(g) = &mut self.gpm {
            g.reset();
        }
    }
}

/// The slow groups' readings of one tick, for one device.
#[derive(Debug, Default)]
struct Fresh {
    energy_millijoules: Option<u64>,
    gpm: Option<GpmMetrics>,
    /// The counters updated at this tick (their running totals), the others `None`.
    io: IoTotals,
    /// Process shares of this tick's process-utilization read.
    process_utilization: Option<HashMap<u32, ProcessUtilization>>,
}

/// The devices of one NVML session and their gates.
pub(crate) struct Reader<'n> {
    nvml: &'n Nvml,
    devices: Vec<Selected<'n>>,
    /// GPUs not selected themselves whose MIG devices are (watched for events).
    unselected_parents: Vec<Arc<DeviceInfo>>,
    gate: Gate,
    layout: ProcessInfoLayout,
    /// `/proc` when it shows the host PID namespace (process names readable).
    proc_root: Option<PathBuf>,
}

/// The value, or `None` with the error counted under `call`.
fn counted<T>(gate: &mut Gate, call: &'static str, r: Result<T, NvmlError>) -> Option<T> {
    r.map_err(|e| gate.count(call, &e)).ok()
}

fn static_info(
    gate: &mut Gate,
    device: &Device<'_>,
    index: u32,
    uuid: String,
    driver: &Option<String>,
) -> DeviceInfo {
    DeviceInfo {
        index,
        name: counted(gate, "nvmlDeviceGetName", device.name()),
        serial: counted(gate, "nvmlDeviceGetSerial", device.serial()),
        pci_bus_id: counted(gate, "nvmlDeviceGetPciInfo_v3", device.pci_info()).map(|p| p.bus_id),
        vbios_version: counted(gate, "nvmlDeviceGetVbiosVersion", device.vbios_version()),
        driver_version: driver.clone(),
        uuid,
        mig: None,
    }
}

impl<'n> Reader<'n> {
    /// Lists devices (`nvmlDeviceGetCount_v2`, `nvmlDeviceGetHandleByIndex_v2`; in MIG mode
    /// `nvmlDeviceGetMigDeviceHandleByIndex`), reads their static facts and keeps those that
    /// `selection` names: a GPU by index or UUID (with all its MIG devices), a MIG device by
    /// its UUID. `io` carries the byte counters of a previous NVML session, by UUID. Every
    /// error NVML answers here is counted ([`Reader::take_errors`]), except `NOT_FOUND` for
    /// an empty MIG slot, which is how NVML lists MIG devices.
    pub(crate) fn open(
        nvml: &'n Nvml,
        selection: &DeviceSelection,
        io: &HashMap<String, IoTotals>,
    ) -> Result<Self, NvmlError> {
        let mut gate = Gate::default();
        let count = nvml.device_count()?;
        let driver_version = counted(
            &mut gate,
            "nvmlSystemGetDriverVersion",
            nvml.sys_driver_version(),
        );
        let layout = ProcessInfoLayout::detect(nvml.lib());
        if layout == ProcessInfoLayout::V3CcProtected {
            tracing::info!("this driver writes the R535 32-byte nvmlProcessInfo_t under nvmlDeviceGetComputeRunningProcesses_v3; process lists are decoded with it");
        }
        let proc_root = Path::new("/proc");
        let proc_root =
            processes::in_host_pid_namespace(proc_root).then(|| proc_root.to_path_buf());
        let mut devices = Vec::new();
        let mut unselected_parents = Vec::new();
        let mut matched = HashSet::new();
        let mut wanted = |id_matches: &dyn Fn(&DeviceId) -> bool| match selection {
            DeviceSelection::All => true,
            DeviceSelection::List(ids) => {
                let hits: Vec<usize> = (0..ids.len()).filter(|&p| id_matches(&ids[p])).collect();
                matched.extend(hits.iter().copied());
                !hits.is_empty()
            }
            // Resolved into a list before sampling starts; never "all".
            DeviceSelection::PodResources => false,
        };
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
            let gpu_selected = wanted(&|id| match id {
                DeviceId::Index(i) => *i == index,
                DeviceId::Uuid(u) => *u == uuid,
            });
            let mig_enabled = counted(&mut gate, "nvmlDeviceGetMigMode", device.mig_mode())
                .is_some_and(|m| m.current == 1);
            let mut migs = Vec::new();
            if mig_enabled {
                let max = counted(
                    &mut gate,
                    "nvmlDeviceGetMaxMigDeviceCount",
                    device.mig_device_count(),
                )
                .unwrap_or(7);
                for mig_index in 0..max {
                    let md = match device.mig_device_by_index(mig_index) {
                        Ok(d) => d,
                        // An empty slot: the answer, not an error.
                        Err(NvmlError::NotFound) => continue,
                        Err(e) => {
                            gate.count("nvmlDeviceGetMigDeviceHandleByIndex", &e);
                            tracing::warn!(gpu = index, mig_index, error = %e, "cannot get a handle for this MIG device; it is skipped");
                            continue;
                        }
                    };
                    let mig_uuid = match md.uuid() {
                        Ok(u) => u,
                        Err(e) => {
                            gate.count("nvmlDeviceGetUUID", &e);
                            tracing::warn!(
                                gpu = index,
                                mig_index,
                                error = %e,
                                "nvmlDeviceGetUUID failed on a MIG device; it is skipped"
                            );
                            continue;
                        }
                    };
                    let selected = wanted(&|id| matches!(id, DeviceId::Uuid(u) if *u == mig_uuid));
                    if !(gpu_selected || selected) {
                        continue;
                    }
                    let mut info = static_info(&mut gate, &md, index, mig_uuid, &driver_version);
                    info.mig = Some(MigPlacement {
                        parent_uuid: uuid.clone(),
                        mig_index,
                        gpu_instance_id: counted(
                            &mut gate,
                            "nvmlDeviceGetGpuInstanceId",
                            raw::gpu_instance_id(nvml, &md),
                        ),
                        compute_instance_id: counted(
                            &mut gate,
                            "nvmlDeviceGetComputeInstanceId",
                            raw::compute_instance_id(nvml, &md),
                        ),
                    });
                    migs.push((md, info));
                }
            }
            if !gpu_selected && migs.is_empty() {
                continue;
            }
            let info = static_info(&mut gate, &device, index, uuid, &driver_version);
            tracing::info!(
                gpu = index,
                uuid = %info.uuid,
                name = info.name.as_deref().unwrap_or("?"),
                pci_bus_id = info.pci_bus_id.as_deref().unwrap_or("?"),
                mig_enabled,
                mig_devices = migs.len(),
                reported = gpu_selected,
                "GPU found"
            );
            let gpm_supported = match counted(
                &mut gate,
                "nvmlGpmQueryDeviceSupport",
                device.gpm_support(),
            ) {
                Some(true) => true,
                Some(false) | None => {
                    tracing::info!(gpu = index, uuid = %info.uuid, "GPM is not supported on this GPU (nvmlGpmQueryDeviceSupport; Hopper and newer): the GPM profiling metrics (nvidia.gpu.sm.activity, nvidia.gpu.tensor.activity, ...) are not emitted for it, and PCIe bytes come from nvmlDeviceGetPcieThroughput");
                    false
                }
            };
            let parent_uuid = info.uuid.clone();
            if gpu_selected {
                let io0 = io.get(&info.uuid).copied().unwrap_or_default();
                let mut sel = Selected::new(device, info, Role::Gpu { mig_enabled }, io0);
                sel.gpm = gpm_supported.then(GpmState::default);
                devices.push(sel);
            } else {
                unselected_parents.push(Arc::new(info));
            }
            for (md, info) in migs {
                tracing::info!(
                    gpu = index,
                    uuid = %info.uuid,
                    parent = %parent_uuid,
                    name = info.name.as_deref().unwrap_or("?"),
                    "MIG device found"
                );
                let gpu_instance_id = info.mig.as_ref().and_then(|m| m.gpu_instance_id);
                // A second handle on the parent, for GPM MIG samples.
                let parent = match nvml.device_by_index(index) {
                    Ok(p) => p,
                    Err(e) => {
                        gate.count("nvmlDeviceGetHandleByIndex_v2", &e);
                        tracing::error!(gpu = index, uuid = %info.uuid, error = %e, "cannot get the parent GPU's handle; this MIG device is skipped");
                        continue;
                    }
                };
                let io0 = io.get(&info.uuid).copied().unwrap_or_default();
                let mut sel = Selected::new(
                    md,
                    info,
                    Role::Mig {
                        parent,
                        gpu_instance_id,
                    },
                    io0,
                );
                sel.gpm = (gpm_supported && gpu_instance_id.is_some()).then(GpmState::default);
                devices.push(sel);
            }
        }
        if let DeviceSelection::List(ids) = selection {
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
        Ok(Self {
            nvml,
            devices,
            unselected_parents,
            gate,
            layout,
            proc_root,
        })
    }

    /// Errors counted since the last call (listing included), by call and code.
    pub(crate) fn take_errors(&mut self) -> ErrorCounts {
        self.gate.take_errors()
    }

    pub(crate) fn device_count(&self) -> usize {
        self.devices.len()
    }

    /// The byte counters, by UUID, to carry into the next NVML session.
    pub(crate) fn io_totals(&self) -> HashMap<String, IoTotals> {
        self.devices
            .iter()
            .map(|d| (d.info.uuid.clone(), d.io))
            .collect()
    }

    /// The physical GPUs whose events concern the selected devices, each with its selected
    /// MIG devices.
    pub(crate) fn event_targets(&self) -> Vec<Target> {
        let mut targets: Vec<Target> = self
            .devices
            .iter()
            .filter(|d| d.is_gpu())
            .map(|d| Target {
                info: d.info.clone(),
                reported: true,
                mig_devices: Vec::new(),
            })
            .chain(self.unselected_parents.iter().map(|info| Target {
                info: info.clone(),
                reported: false,
                mig_devices: Vec::new(),
            }))
            .collect();
        for d in &self.devices {
            if let Some(m) = &d.info.mig {
                if let Some(t) = targets.iter_mut().find(|t| t.info.uuid == m.parent_uuid) {
                    t.mig_devices.push(d.info.clone());
                }
            }
        }
        targets
    }

    /// Reads the fast fields of every device, and each slow group that `due` names; pushes
    /// the time each group took, over all devices, to `timings`. A slow group's values are
    /// in the returned samples only when it was read now.
    pub(crate) fn sample(
        &mut self,
        due: Due,
        timings: &mut Vec<(SampleGroup, Duration)>,
    ) -> Vec<DeviceSample> {
        let started = Instant::now();
        let nvml = self.nvml;
        for d in &mut self.devices {
            d.fresh = Fresh::default();
        }
        let (gate, layout, proc_root) = (&mut self.gate, self.layout, self.proc_root.as_deref());
        let mut out: Vec<DeviceSample> = self
            .devices
            .iter_mut()
            .enumerate()
            .map(|(slot, d)| sample_fast(gate, nvml, layout, proc_root, slot, d))
            .collect();
        timings.push((SampleGroup::Fast, started.elapsed()));

        for group in SLOW_GROUPS {
            if !due.reads(group) {
                continue;
            }
            let started = Instant::now();
            let mut asked = false;
            for (slot, (d, s)) in self.devices.iter_mut().zip(out.iter_mut()).enumerate() {
                if d.lost {
                    continue;
                }
                let mut lost = false;
                asked |= read_slow(group, &mut self.gate, nvml, slot, d, &mut lost);
                if lost {
                    tracing::error!(gpu = d.info.index, uuid = %d.info.uuid, "GPU is lost (fallen off the bus or needs a reset); it is reported as failed, the other GPUs go on");
                    d.lost = true;
                    d.drop_carried();
                    *s = DeviceSample::empty(d.info.clone(), DeviceState::Lost);
                }
            }
            if asked {
                timings.push((group, started.elapsed()));
            }
        }

        for (d, s) in self.devices.iter_mut().zip(out.iter_mut()) {
            if d.lost {
                continue;
            }
            let fresh = std::mem::take(&mut d.fresh);
            s.energy_millijoules = fresh.energy_millijoules;
            s.gpm = fresh.gpm;
            s.io = fresh.io;
            let covered = &d.process_covered;
            s.processes = d.processes.as_ref().map(|list| {
                list.iter()
                    .map(|p| ProcessSample {
                        pid: p.pid,
                        used_memory_bytes: p.used_memory_bytes,
                        executable_name: d.names.get(&p.pid).cloned().flatten(),
                        // Read now: its samples' mean, or idle (0) when the window covered
                        // it whole; a process that started within the window and has no
                        // sample is absent (NVML may not have sampled it yet).
                        utilization: fresh.process_utilization.as_ref().and_then(|u| {
                            u.get(&p.pid)
                                .copied()
                                .or_else(|| covered.contains(&p.pid).then(Default::default))
                        }),
                    })
                    .collect()
            });
            if fresh.process_utilization.is_some() {
                d.process_covered = d.processes.iter().flatten().map(|p| p.pid).collect();
            }
        }
        out
    }
}

/// The fields read every tick. A lost device is probed with one cheap call per tick to
/// notice its return.
fn sample_fast(
    gate: &mut Gate,
    nvml: &Nvml,
    layout: ProcessInfoLayout,
    proc_root: Option<&Path>,
    slot: usize,
    sel: &mut Selected<'_>,
) -> DeviceSample {
    let dev = &sel.device;
    let info = sel.info.clone();
    let index = info.index;
    let uuid = info.uuid.as_str();
    let was_lost = sel.lost;
    let mut lost = false;
    let memory = gate.read(slot, &info, Field::Memory, &mut lost, || dev.memory_info());
    if lost {
        if !was_lost {
            tracing::error!(gpu = index, uuid, "GPU is lost (fallen off the bus or needs a reset); it is reported as failed, the other GPUs go on");
        }
        sel.lost = true;
        sel.drop_carried();
        return DeviceSample::empty(info, DeviceState::Lost);
    }
    if was_lost {
        tracing::info!(gpu = index, uuid, "GPU answers again");
        sel.lost = false;
    }
    let mut s = DeviceSample::empty(info.clone(), DeviceState::Ok);
    if let Some(m) = memory {
        s.memory_total_bytes = Some(m.total);
        s.memory_used_bytes = Some(m.used);
        s.memory_free_bytes = Some(m.free);
        s.memory_reserved_bytes = Some(m.reserved);
    }
    macro_rules! read {
        ($field:expr, $call:expr) => {
            gate.read(slot, &info, $field, &mut lost, || $call)
        };
    }
    if sel.is_gpu() {
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
        s.clock_graphics_mhz = read!(Field::ClockGraphics, dev.clock_info(Clock::Graphics));
        s.clock_sm_mhz = read!(Field::ClockSm, dev.clock_info(Clock::SM));
        s.clock_memory_mhz = read!(Field::ClockMemory, dev.clock_info(Clock::Memory));
        s.clocks_event_reasons =
            read!(Field::ClocksEventReasons, dev.current_throttle_reasons()).map(|r| r.bits());
        s.performance_state = read!(Field::PerformanceState, dev.performance_state())
            .map(|p| p.as_c())
            // NVML_PSTATE_UNKNOWN (32) is no state: absent, not 32.
            .filter(|p| *p <= 15);
        s.ecc_corrected_total = read!(
            Field::EccCorrected,
            dev.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)
        );
        s.ecc_uncorrected_total = read!(
            Field::EccUncorrected,
            dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile)
        );
        s.remapped_rows = read!(Field::RemappedRows, raw::remapped_rows(nvml, dev));
    }
    if sel.reports_processes() {
        sel.processes = read!(Field::Processes, raw::compute_processes(nvml, dev, layout));
        let current: HashSet<u32> = sel.processes.iter().flatten().map(|p| p.pid).collect();
        sel.names.retain(|pid, _| current.contains(pid));
        for pid in current {
            sel.names.entry(pid).or_insert_with(|| {
                proc_root.and_then(|root| processes::executable_name(root, pid))
            });
        }
    }
    if lost {
        tracing::error!(gpu = index, uuid, "GPU is lost (fallen off the bus or needs a reset); it is reported as failed, the other GPUs go on");
        sel.lost = true;
        sel.drop_carried();
        return DeviceSample::empty(info, DeviceState::Lost);
    }
    s
}

/// Reads one slow group for one device; returns whether an NVML call was made.
fn read_slow<'n>(
    group: SampleGroup,
    gate: &mut Gate,
    nvml: &'n Nvml,
    slot: usize,
    d: &mut Selected<'n>,
    lost: &mut bool,
) -> bool {
    let info = d.info.clone();
    match group {
        SampleGroup::Energy if d.is_gpu() => {
            let dev = &d.device;
            d.fresh.energy_millijoules = gate.read(slot, &info, Field::Energy, lost, || {
                dev.total_energy_consumption()
            });
            true
        }
        SampleGroup::Process if d.reports_processes() => {
            let dev = &d.device;
            let seen = d.process_utilization_seen_us;
            let samples = gate.read(slot, &info, Field::ProcessUtilization, lost, || {
                // NOT_FOUND: no sample since `seen`, i.e. no process ran in the window.
                match dev.process_utilization_stats(seen) {
                    Err(NvmlError::NotFound) => Ok(Vec::new()),
                    other => other,
                }
            });
            // No sample at all since the last read (NOT_FOUND, or a window shorter than
            // NVML's sampling period): nothing is known for this window, not "all idle"; the
            // window goes on to the next read.
            if let Some(samples) = samples.filter(|s| !s.is_empty()) {
                if let Some(latest) = samples.iter().map(|s| s.timestamp).max() {
                    d.process_utilization_seen_us = latest;
                }
                d.fresh.process_utilization = Some(processes::average(&samples));
            }
            true
        }
        SampleGroup::Gpm => {
            let Selected {
                device,
                role,
                gpm: Some(state),
                ..
            } = &mut *d
            else {
                return false;
            };
            let reading = match role {
                Role::Gpu { .. } => gate.read(slot, &info, Field::Gpm, lost, || {
                    state.read(nvml, || device.gpm_sample())
                }),
                Role::Mig {
                    parent,
                    gpu_instance_id: Some(gi),
                } => {
                    let gi = *gi;
                    gate.read(slot, &info, Field::Gpm, lost, || {
                        state.read(nvml, || parent.gpm_mig_sample(gi))
                    })
                }
                Role::Mig { .. } => return false,
            };
            match reading {
                Some(Some(r)) => {
                    let window = r.metrics.window_seconds;
                    let add =
                        |total: &mut Option<f64>, now: &mut Option<f64>, mib_s: Option<f64>| {
                            if let Some(rate) = mib_s {
                                *total = Some(total.unwrap_or(0.0) + rate * MIB * window);
                                *now = *total;
                            }
                        };
                    // The window ends at the sample just taken.
                    let end = Instant::now();
                    let start = end
                        .checked_sub(Duration::from_secs_f64(window.max(0.0)))
                        .unwrap_or(end);
                    d.count_pcie(
                        start,
                        end,
                        r.pcie_tx_mib_s.map(|m| m * MIB),
                        r.pcie_rx_mib_s.map(|m| m * MIB),
                    );
                    let (io, fresh) = (&mut d.io, &mut d.fresh.io);
                    add(
                        &mut io.nvlink_transmit_bytes,
                        &mut fresh.nvlink_transmit_bytes,
                        r.nvlink_tx_mib_s,
                    );
                    add(
                        &mut io.nvlink_receive_bytes,
                        &mut fresh.nvlink_receive_bytes,
                        r.nvlink_rx_mib_s,
                    );
                    d.gpm_pcie = Some(r.pcie_tx_mib_s.is_some() || r.pcie_rx_mib_s.is_some());
                    if !r.unanswered.is_empty() && !d.gpm_unanswered_said {
                        d.gpm_unanswered_said = true;
                        tracing::info!(gpu = info.index, uuid = %info.uuid, unanswered = ?r.unanswered, "GPM does not answer these metrics on this device; they are absent");
                    }
                    d.fresh.gpm = Some(r.metrics);
                }
                Some(None) => {} // first sample: no window yet
                None => {
                    if gate.is_unsupported(slot, Field::Gpm) {
                        d.gpm = None; // frees the held sample
                    }
                }
            }
            true
        }
        SampleGroup::Pcie if d.is_gpu() && (d.gpm.is_none() || d.gpm_pcie == Some(false)) => {
            let dev = &d.device;
            let rates = gate.read(slot, &info, Field::PcieThroughput, lost, || {
                Ok((
                    dev.pcie_throughput(PcieUtilCounter::Send)?,
                    dev.pcie_throughput(PcieUtilCounter::Receive)?,
                ))
            });
            if let Some((tx, rx)) = rates {
                let now = Instant::now();
                if let Some((then, tx0, rx0)) = d.pcie_previous {
                    // KB/s (1024 bytes) sampled over ~20 ms: the mean of the two readings
                    // times the time between them (less what GPM already counted) is an
                    // estimate, not a count.
                    let rate = |a: u32, b: u32| (f64::from(a) + f64::from(b)) / 2.0 * 1024.0;
                    d.count_pcie(then, now, Some(rate(tx0, tx)), Some(rate(rx0, rx)));
                }
                d.pcie_previous = Some((now, tx, rx));
            }
            true
        }
        _ => false,
    }
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
