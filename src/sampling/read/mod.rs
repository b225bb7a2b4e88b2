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

use std::collections::{HashMap, HashSet};
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
use super::nvml_error::call_versioned;
use super::processes;
use super::raw::{self, ProcessInfoLayout, ProcessList, RawProcess, Versioned};
use super::snapshot::{
    DeviceInfo, DeviceSample, DeviceState, GpmMetrics, IoTotals, MigPlacement, ProcessSample,
    ProcessUtilization, Sharing, BYTES_PER_KIB,
};
use super::SampleGroup;
use crate::config::{DeviceId, DeviceSelection, POD_RESOURCES_MODE};

mod gate;
mod groups;

pub(crate) use gate::{ErrorCounts, Gate};
use groups::{log_unlisted, read_slow, sample_fast, sharing};

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
    /// Node mode: the MPS clients are listed every tick, with the compute processes.
    mps_every_tick: bool,
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
            mps_every_tick: false,
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
    /// The proc root when it shows the host PID namespace (process names readable).
    proc_root: Option<PathBuf>,
}

/// What the reader does besides the NVML reads every mode makes.
#[derive(Debug, Clone)]
pub(crate) struct ReadOptions {
    /// The proc root (`GPU_SIDECAR_PROC_ROOT`): process names from `<root>/<pid>/comm`.
    pub proc_root: PathBuf,
    /// List MPS clients every tick and report them with the compute processes (node mode).
    pub mps_clients: bool,
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
        gpm_supported: None,
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
        options: &ReadOptions,
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
        let proc_root = options.proc_root.as_path();
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
            let mut info = static_info(
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
            info.gpm_supported = Some(gpm_supported);
            let parent_uuid = info.uuid.clone();
            if let Some(shared) = gpu_wanted {
                let io0 = io.get(&info.uuid).copied().unwrap_or_default();
                let mut sel = Selected::new(device, info, Role::Gpu { mig_enabled }, io0);
                sel.gpm = gpm_supported.then(GpmState::default);
                sel.kubelet_shared = shared;
                sel.mps_every_tick = options.mps_clients;
                devices.push(sel);
            } else {
                unselected_parents.push(Arc::new(info));
            }
            for (md, mut info, shared) in migs {
                tracing::info!(
                    gpu = index,
                    uuid = %info.uuid,
                    parent = %parent_uuid,
                    name = info.name.as_deref().unwrap_or("?"),
                    "MIG device found"
                );
                let gpu_instance_id = info.mig.as_ref().and_then(|m| m.gpu_instance_id);
                info.gpm_supported = Some(gpm_supported && gpu_instance_id.is_some());
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
                sel.mps_every_tick = options.mps_clients;
                devices.push(sel);
            }
        }
        match selection {
            DeviceSelection::List(ids) => {
                for (pos, id) in ids.iter().enumerate() {
                    if !matched.contains(&pos) {
                        tracing::warn!(device = %id, "GPU_SIDECAR_DEVICES names a device NVML does not show");
                    }
                }
            }
            DeviceSelection::Allocated(a) => {
                for (pos, d) in a.iter().enumerate() {
                    if !matched.contains(&pos) {
                        tracing::warn!(
                            device = %d.plugin_id,
                            means = %d.id,
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
