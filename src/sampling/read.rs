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

use super::bounds::{self, Reading};
use super::cadence::{Due, SLOW_GROUPS};
use super::event_watcher::Target;
use super::gpm::{GpmState, MIB};
use super::processes;
use super::raw::{self, ProcessInfoLayout, ProcessList, RawProcess, Versioned};
use super::snapshot::{
    DeviceInfo, DeviceSample, DeviceState, GpmMetrics, IoTotals, MigPlacement, ProcessSample,
    ProcessUtilization, Sharing,
};
use super::SampleGroup;
use crate::config::{DeviceId, DeviceSelection, POD_RESOURCES_MODE};
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
    MpsProcesses,
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
            Field::ClocksEventReasons => "nvmlDeviceGetCurrentClocksEventReasons",
            Field::PerformanceState => "nvmlDeviceGetPerformanceState",
            Field::EccCorrected => "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)",
            Field::EccUncorrected => "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
            Field::Processes => "nvmlDeviceGetComputeRunningProcesses_v3",
            Field::MpsProcesses => "nvmlDeviceGetMPSComputeRunningProcesses_v3",
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
    /// The version in use of each versioned call, by device slot (index into
    /// [`Versioned::versions`]; absent: the newest).
    versions: HashMap<(usize, Versioned), usize>,
    /// Readings that answered an impossible value, by device slot (said once).
    rejected: HashSet<(usize, Reading)>,
}

/// Calls version `*chosen` of `v` (`call(k)` makes version `k`), then the older ones while a
/// version is missing or refused ([`raw::refused_version`]). The first older version that
/// answers becomes `*chosen` for the next calls, and one line says so (`index`, `uuid` name
/// the device; `None` for a library-wide call).
///
/// Returns the answer or the error to judge (the newest version's, unless an older one
/// failed for another reason, such as a lost GPU), and, when it switched, the newer
/// version's refusal (to be counted under its name).
pub(crate) fn call_versioned<T>(
    chosen: &mut usize,
    v: Versioned,
    index: Option<u32>,
    uuid: &str,
    mut call: impl FnMut(usize) -> Result<T, NvmlError>,
) -> (Result<T, NvmlError>, Option<NvmlError>) {
    let names = v.versions();
    let start = (*chosen).min(names.len() - 1);
    let mut error: Option<NvmlError> = None;
    for k in start..names.len() {
        match call(k) {
            Ok(t) => {
                if k == start {
                    return (Ok(t), None);
                }
                let refused = error.take();
                *chosen = k;
                tracing::info!(
                    gpu = index,
                    uuid,
                    call = names[start],
                    error = %refused.as_ref().map(|e| e.to_string()).unwrap_or_default(),
                    instead = names[k],
                    "this driver does not answer the newer NVML call; the older one answers and is used from now on. It gives {}",
                    v.older_lacks()
                );
                return (Ok(t), refused);
            }
            Err(e) => {
                let go_on = raw::refused_version(&e);
                if error.is_none() || !go_on {
                    error = Some(e);
                }
                if !go_on {
                    break;
                }
            }
        }
    }
    (Err(error.expect("at least one version was called")), None)
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            unsupported: HashSet::new(),
            failing: HashMap::new(),
            lines: LogLimiter::new(crate::logging::LOG_PERIOD),
            errors: ErrorCounts::new(),
            versions: HashMap::new(),
            rejected: HashSet::new(),
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

    /// An impossible `value` of `reading` on the device in `slot` was dropped
    /// ([`bounds`]): one warning per device and reading.
    pub(crate) fn reject(&mut self, slot: usize, info: &DeviceInfo, reading: Reading, value: f64) {
        if self.rejected.insert((slot, reading)) {
            let b = bounds::bound(reading);
            tracing::warn!(
                gpu = info.index,
                uuid = %info.uuid,
                reading = b.name,
                value,
                valid = %format!("{} to {} {}", b.min, b.max, b.unit),
                "NVML answered an impossible value (a sentinel or a corrupt reading): it is left out (absent), as is every impossible value of this reading on this GPU"
            );
        }
    }

    /// `value` of `reading` if it is possible, else `None` (and [`Gate::reject`]).
    pub(crate) fn admit(
        &mut self,
        slot: usize,
        info: &DeviceInfo,
        reading: Reading,
        value: f64,
    ) -> Option<f64> {
        if bounds::admits(reading, value) {
            Some(value)
        } else {
            self.reject(slot, info, reading, value);
            None
        }
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
        self.read_named(slot, info, field, field.nvml_call(), lost, call)
    }

    /// As [`Gate::read`] for a field read through a versioned call `v`: `call(k)` makes
    /// version `k` ([`Versioned::versions`]); see [`call_versioned`]. The version chosen is
    /// kept for the device in `slot` for the rest of the NVML session.
    pub(crate) fn read_versioned<T>(
        &mut self,
        slot: usize,
        info: &DeviceInfo,
        field: Field,
        v: Versioned,
        lost: &mut bool,
        call: impl FnMut(usize) -> Result<T, NvmlError>,
    ) -> Option<T> {
        if *lost || self.unsupported.contains(&(slot, field)) {
            return None;
        }
        let start = self.versions.get(&(slot, v)).copied().unwrap_or(0);
        let mut chosen = start;
        let (result, refused) = call_versioned(&mut chosen, v, Some(info.index), &info.uuid, call);
        if let Some(e) = refused {
            self.count(v.versions()[start], &e);
            self.versions.insert((slot, v), chosen);
        }
        self.read_named(slot, info, field, v.versions()[chosen], lost, || result)
    }

    /// [`Gate::read`], with the C name `call_name` in logs and counts.
    fn read_named<T>(
        &mut self,
        slot: usize,
        info: &DeviceInfo,
        field: Field,
        call_name: &'static str,
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
                    tracing::info!(gpu = index, uuid, call = call_name, "answers again");
                }
                Some(v)
            }
            Err(e) => {
                self.count(call_name, &e);
                match verdict(&e) {
                    Verdict::Unsupported => {
                        self.unsupported.insert(key);
                        tracing::info!(
                            gpu = index,
                            uuid,
                            call = call_name,
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
                                    call = call_name,
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
    /// The kubelet lists this device as one replica of a shared GPU (time-slicing).
    kubelet_shared: bool,
    /// MPS clients were seen on this device in this NVML session.
    mps_seen: bool,
    /// The sharing warning was given for this device.
    sharing_said: bool,
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
            kubelet_shared: false,
            mps_seen: false,
            sharing_said: false,
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

/// The static facts of a device, errors counted. `pci_version` is the version of
/// `nvmlDeviceGetPciInfo` in use for this listing (see [`call_versioned`]).
fn static_info(
    gate: &mut Gate,
    nvml: &Nvml,
    device: &Device<'_>,
    index: u32,
    uuid: String,
    driver: &Option<String>,
    pci_version: &mut usize,
) -> DeviceInfo {
    let start = *pci_version;
    let (pci, refused) = call_versioned(pci_version, Versioned::PciInfo, Some(index), &uuid, |k| {
        raw::pci_bus_id(nvml, device, k)
    });
    if let Some(e) = refused {
        gate.count(Versioned::PciInfo.versions()[start], &e);
    }
    let pci_bus_id = counted(gate, Versioned::PciInfo.versions()[*pci_version], pci);
    DeviceInfo {
        index,
        name: counted(gate, "nvmlDeviceGetName", device.name()),
        serial: counted(gate, "nvmlDeviceGetSerial", device.serial()),
        pci_bus_id,
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
        let mut pci_version = 0;
        // The ids to match (a user's list, or the kubelet's), with the kubelet's "shared".
        let (ids, shared): (Vec<&DeviceId>, Vec<bool>) = match selection {
            DeviceSelection::List(ids) => (ids.iter().collect(), vec![false; ids.len()]),
            DeviceSelection::Allocated(a) => (
                a.iter().map(|d| &d.id).collect(),
                a.iter().map(|d| d.shared).collect(),
            ),
            // Resolved into Allocated before sampling starts; never "all".
            DeviceSelection::All | DeviceSelection::PodResources => (Vec::new(), Vec::new()),
        };
        let all = *selection == DeviceSelection::All;
        let needs_minor = ids
            .iter()
            .any(|id| matches!(id, DeviceId::Minor(_) | DeviceId::GpuInstance { .. }));
        // Some(shared) when selected.
        let mut wanted = |id_matches: &dyn Fn(&DeviceId) -> bool| -> Option<bool> {
            if all {
                return Some(false);
            }
            let hits: Vec<usize> = (0..ids.len()).filter(|&p| id_matches(ids[p])).collect();
            matched.extend(hits.iter().copied());
            (!hits.is_empty()).then(|| hits.iter().any(|&p| shared[p]))
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
            // The device file's minor number, for device plugins that name GPUs by it.
            let minor = if needs_minor {
                device.minor_number().ok()
            } else {
                None
            };
            let gpu_wanted = wanted(&|id| match id {
                DeviceId::Index(i) => *i == index,
                DeviceId::Uuid(u) => *u == uuid,
                DeviceId::Minor(m) => Some(*m) == minor,
                DeviceId::MigIndex { .. } | DeviceId::GpuInstance { .. } => false,
            });
            let gpu_selected = gpu_wanted.is_some();
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
                    let gpu_instance_id = counted(
                        &mut gate,
                        "nvmlDeviceGetGpuInstanceId",
                        raw::gpu_instance_id(nvml, &md),
                    );
                    let mig_wanted = wanted(&|id| match id {
                        DeviceId::Uuid(u) => *u == mig_uuid,
                        DeviceId::MigIndex { gpu, mig } => *gpu == index && *mig == mig_index,
                        DeviceId::GpuInstance {
                            minor: m,
                            gpu_instance_id: g,
                        } => Some(*m) == minor && Some(*g) == gpu_instance_id,
                        DeviceId::Index(_) | DeviceId::Minor(_) => false,
                    });
                    let Some(mig_shared) = mig_wanted.or(gpu_wanted) else {
                        continue;
                    };
                    let mut info = static_info(
                        &mut gate,
                        nvml,
                        &md,
                        index,
                        mig_uuid,
                        &driver_version,
                        &mut pci_version,
                    );
                    info.mig = Some(MigPlacement {
                        parent_uuid: uuid.clone(),
                        mig_index,
                        gpu_instance_id,
                        compute_instance_id: counted(
                            &mut gate,
                            "nvmlDeviceGetComputeInstanceId",
                            raw::compute_instance_id(nvml, &md),
                        ),
                    });
                    migs.push((md, info, mig_shared || gpu_wanted == Some(true)));
                }
            }
            if !gpu_selected && migs.is_empty() {
                continue;
            }
            let info = static_info(
                &mut gate,
                nvml,
                &device,
                index,
                uuid,
                &driver_version,
                &mut pci_version,
            );
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
                    tracing::info!(gpu = index, uuid = %info.uuid, "GPM is not supported on this GPU (nvmlGpmQueryDeviceSupport; Hopper and newer): the GPM profiling metrics (nvidia.gpu.sm.activity, nvidia.gpu.tensor.activity, ...) are not emitted for it, the rules tensor_cores_idle and memory_bound do not judge it, its run report profiling figures are null, and PCIe bytes come from nvmlDeviceGetPcieThroughput");
                    false
                }
            };
            let parent_uuid = info.uuid.clone();
            if let Some(shared) = gpu_wanted {
                let io0 = io.get(&info.uuid).copied().unwrap_or_default();
                let mut sel = Selected::new(device, info, Role::Gpu { mig_enabled }, io0);
                sel.gpm = gpm_supported.then(GpmState::default);
                sel.kubelet_shared = shared;
                devices.push(sel);
            } else {
                unselected_parents.push(Arc::new(info));
            }
            for (md, info, shared) in migs {
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
                sel.kubelet_shared = shared;
                devices.push(sel);
            }
        }
        match selection {
            DeviceSelection::List(ids) => {
                for (pos, id) in ids.iter().enumerate() {
                    if !matched.contains(&pos) {
                        tracing::warn!(device = ?id, "GPU_SIDECAR_DEVICES names a device NVML does not show");
                    }
                }
            }
            DeviceSelection::Allocated(a) => {
                for (pos, d) in a.iter().enumerate() {
                    if !matched.contains(&pos) {
                        tracing::warn!(
                            device = %d.plugin_id,
                            means = ?d.id,
                            "{POD_RESOURCES_MODE}: the kubelet allocated this device to the pod, and no GPU or MIG device NVML shows matches it; it is not reported"
                        );
                    }
                }
            }
            DeviceSelection::All | DeviceSelection::PodResources => {}
        }
        if devices.is_empty() {
            let mode = match selection {
                DeviceSelection::Allocated(_) => POD_RESOURCES_MODE,
                _ => "GPU_SIDECAR_DEVICES",
            };
            if count == 0 {
                tracing::warn!("NVML shows no GPU: nothing to report");
            } else {
                tracing::warn!(
                    "{mode} selects none of the {count} GPUs NVML shows (indices 0 to {}): nothing to report",
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
                asked |= read_slow(group, &mut self.gate, nvml, self.layout, slot, d, &mut lost);
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
            s.sharing = sharing(d);
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
        // Impossible values (NVML's sentinels answered with SUCCESS) go before anyone sees
        // the sample: absent, not exported, judged or kept as peaks.
        let gate = &mut self.gate;
        for (slot, s) in out.iter_mut().enumerate() {
            let info = s.info.clone();
            bounds::enforce(s, |reading, value| gate.reject(slot, &info, reading, value));
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
    let memory = gate.read_versioned(
        slot,
        &info,
        Field::Memory,
        Versioned::MemoryInfo,
        &mut lost,
        |k| raw::memory_info(nvml, dev, k),
    );
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
        s.memory_reserved_bytes = m.reserved;
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
        s.temperature_memory_celsius = read!(Field::TemperatureMemory, memory_temperature(dev))
            .and_then(|c| gate.admit(slot, &info, Reading::TemperatureMemory, c))
            .map(|c| c.round() as u32);
        s.power_milliwatts = read!(Field::Power, dev.power_usage());
        s.power_limit_milliwatts = read!(Field::PowerLimit, dev.enforced_power_limit());
        s.clock_graphics_mhz = read!(Field::ClockGraphics, dev.clock_info(Clock::Graphics));
        s.clock_sm_mhz = read!(Field::ClockSm, dev.clock_info(Clock::SM));
        s.clock_memory_mhz = read!(Field::ClockMemory, dev.clock_info(Clock::Memory));
        s.clocks_event_reasons = gate.read_versioned(
            slot,
            &info,
            Field::ClocksEventReasons,
            Versioned::ClocksEventReasons,
            &mut lost,
            |k| raw::clocks_event_reasons(nvml, dev, k),
        );
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
        sel.processes = gate.read_versioned(
            slot,
            &info,
            Field::Processes,
            Versioned::ComputeProcesses,
            &mut lost,
            |k| raw::process_list(nvml, dev, ProcessList::Compute, k, layout),
        );
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

/// Whether and how the device is shared, from the kubelet's listing and the MPS clients
/// seen so far; the first time it is, one warning says so.
fn sharing(sel: &mut Selected<'_>) -> Option<Sharing> {
    let mode = if sel.mps_seen {
        Sharing::Mps
    } else if sel.kubelet_shared {
        Sharing::TimeSlicing
    } else {
        return None;
    };
    if !sel.sharing_said {
        sel.sharing_said = true;
        let why = match mode {
            Sharing::TimeSlicing => "the kubelet lists it as one replica of a time-sliced GPU",
            Sharing::Mps => "MPS clients run on it",
        };
        tracing::warn!(
            gpu = sel.info.index,
            uuid = %sel.info.uuid,
            sharing = mode.as_str(),
            "this GPU is shared with other pods ({why}): its readings are the whole GPU's, every process on it included, other pods' too; they are reported under this pod's attributes, marked nvidia.gpu.sharing={}",
            mode.as_str()
        );
    }
    Some(mode)
}

/// Reads one slow group for one device; returns whether an NVML call was made.
fn read_slow<'n>(
    group: SampleGroup,
    gate: &mut Gate,
    nvml: &'n Nvml,
    layout: ProcessInfoLayout,
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
            if !d.mps_seen {
                // MPS clients on the device: it is shared (until NVML is initialized again).
                let dev = &d.device;
                d.mps_seen = gate
                    .read_versioned(
                        slot,
                        &info,
                        Field::MpsProcesses,
                        Versioned::MpsComputeProcesses,
                        lost,
                        |k| raw::process_list(nvml, dev, ProcessList::Mps, k, layout),
                    )
                    .is_some_and(|clients| !clients.is_empty());
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
                    // An impossible rate is left out, not added to the byte totals.
                    let mut rate = |reading: Reading, mib_s: Option<f64>| {
                        mib_s.and_then(|v| gate.admit(slot, &info, reading, v))
                    };
                    let (pcie_tx, pcie_rx, nvlink_tx, nvlink_rx) = (
                        rate(Reading::GpmPcie, r.pcie_tx_mib_s),
                        rate(Reading::GpmPcie, r.pcie_rx_mib_s),
                        rate(Reading::GpmNvlink, r.nvlink_tx_mib_s),
                        rate(Reading::GpmNvlink, r.nvlink_rx_mib_s),
                    );
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
                        pcie_tx.map(|m| m * MIB),
                        pcie_rx.map(|m| m * MIB),
                    );
                    let (io, fresh) = (&mut d.io, &mut d.fresh.io);
                    add(
                        &mut io.nvlink_transmit_bytes,
                        &mut fresh.nvlink_transmit_bytes,
                        nvlink_tx,
                    );
                    add(
                        &mut io.nvlink_receive_bytes,
                        &mut fresh.nvlink_receive_bytes,
                        nvlink_rx,
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
            let rates = rates.filter(|(tx, rx)| {
                // Both or neither: an interval needs both ends of both directions.
                let tx_ok = gate.admit(slot, &info, Reading::PcieThroughput, f64::from(*tx));
                let rx_ok = gate.admit(slot, &info, Reading::PcieThroughput, f64::from(*rx));
                tx_ok.is_some() && rx_ok.is_some()
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

/// HBM temperature (°C) through the field-values API, as the driver gave it (a sentinel
/// such as -1 or 255 included: [`bounds`] judges it); the per-field return code is the
/// answer.
#[allow(clippy::cast_precision_loss)]
fn memory_temperature(dev: &Device<'_>) -> Result<f64, NvmlError> {
    let mut values = dev.field_values_for(&[FieldId(NVML_FI_DEV_MEMORY_TEMP)])?;
    let sample = values.pop().ok_or(NvmlError::NotSupported)??;
    Ok(match sample.value? {
        SampleValue::U32(v) => f64::from(v),
        SampleValue::U64(v) => v as f64,
        SampleValue::I64(v) => v as f64,
        SampleValue::F64(v) => v,
    })
}
