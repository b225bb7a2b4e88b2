//! Plain data produced by the sampler: one [`Snapshot`] per tick, one [`DeviceSample`] per
//! GPU. Every reading is an `Option`: `None` means NVML did not give the value (unsupported,
//! failed, or the device is lost), never zero. Units are in the field names.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

/// Bytes in one MiB (2^20).
pub const BYTES_PER_MIB: u64 = 1024 * 1024;

/// Bytes in one KiB (2^10), the "KB" of NVML's PCIe throughput (KB/s).
pub const BYTES_PER_KIB: f64 = 1024.0;

/// A percentage (0..100, as NVML gives utilizations) as a ratio (0..1, the OTel unit `1`).
pub fn ratio_from_percent(percent: f64) -> f64 {
    percent / 100.0
}

/// A ratio (0..1) as a percentage (0..100), for messages and percent settings.
pub fn percent_from_ratio(ratio: f64) -> f64 {
    ratio * 100.0
}

/// Milliwatts (NVML's power unit) as watts (`W`).
pub fn watts_from_milliwatts(milliwatts: f64) -> f64 {
    milliwatts / 1000.0
}

/// Millijoules (NVML's energy unit) as joules (`J`).
pub fn joules_from_millijoules(millijoules: f64) -> f64 {
    millijoules / 1000.0
}

/// Bytes as whole MiB, rounded down.
pub fn mib_from_bytes(bytes: u64) -> u64 {
    bytes / BYTES_PER_MIB
}

/// Facts about a device that do not change while NVML is up; read once per NVML session.
///
/// A device is a GPU or, when MIG mode is on, one MIG device (GPU instance + compute
/// instance) of a GPU: then [`DeviceInfo::mig`] names its parent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceInfo {
    /// NVML index (`nvmlDeviceGetHandleByIndex_v2`), node-wide, as `nvidia-smi` numbers GPUs;
    /// for a MIG device, its parent GPU's index. Not the training process's `cuda:N` (CUDA
    /// numbers the GPUs visible to it from 0, in `CUDA_DEVICE_ORDER`): the UUID and the PCI
    /// bus id identify a GPU.
    pub index: u32,
    /// GPU UUID (`nvmlDeviceGetUUID`), e.g. `GPU-8f6c…`; the `hw.id` attribute.
    pub uuid: String,
    /// Product name (`nvmlDeviceGetName`), e.g. `NVIDIA H200`; the `hw.model` attribute.
    pub name: Option<String>,
    /// Board serial number (`nvmlDeviceGetSerial`); `hw.serial_number`.
    pub serial: Option<String>,
    /// PCI bus id (`nvmlDeviceGetPciInfo_v3`, or the older versions), e.g. `00000000:19:00.0`.
    pub pci_bus_id: Option<String>,
    /// VBIOS version (`nvmlDeviceGetVbiosVersion`); `hw.firmware_version`.
    pub vbios_version: Option<String>,
    /// Driver version (`nvmlSystemGetDriverVersion`), e.g. `580.159.04`; `hw.driver_version`.
    pub driver_version: Option<String>,
    /// For a MIG device: where it sits. `None` for a GPU.
    pub mig: Option<MigPlacement>,
    /// Whether GPM profiling is read for the device: `nvmlGpmQueryDeviceSupport` answered yes
    /// (Hopper and newer) and, for a MIG device, NVML gave its GPU instance id. `None`: not
    /// asked (a device known only from an event or a kubelet listing). The run report says
    /// with it why a device has no GPM figures.
    pub gpm_supported: Option<bool>,
}

/// Where a MIG device sits on its GPU (`nvmlDeviceGetMigDeviceHandleByIndex`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigPlacement {
    /// The parent GPU's UUID (`GPU-…`); the `hw.parent` attribute.
    pub parent_uuid: String,
    /// MIG device index on the parent (`nvmlDeviceGetMigDeviceHandleByIndex` argument).
    pub mig_index: u32,
    /// GPU instance id (`nvmlDeviceGetGpuInstanceId`); the id GPM MIG samples and XID events
    /// use.
    pub gpu_instance_id: Option<u32>,
    /// Compute instance id (`nvmlDeviceGetComputeInstanceId`).
    pub compute_instance_id: Option<u32>,
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

/// How a GPU is shared with other pods or jobs, the `nvidia.gpu.sharing` attribute: declared
/// with its values in the attribute catalogue.
pub use crate::catalogue::attributes::Sharing;

/// One compute process on a device (`nvmlDeviceGetComputeRunningProcesses_v3`), with its
/// share of the engines from `nvmlDeviceGetProcessUtilization`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessSample {
    /// Host PID as NVML reports it (not the PID in the sidecar's namespace).
    pub pid: u32,
    /// GPU memory held by the process in bytes; `None` when NVML cannot tell (no
    /// permission, or Windows WDDM).
    pub used_memory_bytes: Option<u64>,
    /// Executable name (`/proc/<pid>/comm`), only when the agent runs in the host PID
    /// namespace (`hostPID`), where NVML's host PIDs are its own; else `None`.
    pub executable_name: Option<String>,
    /// Engine shares over the process-utilization window that ended at this tick; `None` at
    /// ticks that did not read it, where the call is unsupported or failed, and for a process
    /// that started within the window without a sample in it (see [`ProcessUtilization`]).
    pub utilization: Option<ProcessUtilization>,
}

/// One process's engine shares, percent, averaged over the samples NVML buffered since the
/// previous read (`nvmlDeviceGetProcessUtilization`). A process listed at the previous read
/// and without a sample in a window where NVML sampled others was idle there (NVML lists
/// only processes with a non-zero share): 0. One first listed after the previous read has no
/// value until a read covers it; a window with no sample at all gives no value to anyone.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessUtilization {
    /// SM (3D/compute) share, percent (`smUtil`).
    pub sm_percent: f64,
    /// Memory controller (frame buffer) share, percent (`memUtil`).
    pub memory_percent: f64,
    /// Encoder share, percent (`encUtil`).
    pub encoder_percent: f64,
    /// Decoder share, percent (`decUtil`).
    pub decoder_percent: f64,
}

impl ProcessUtilization {
    /// [`Self::sm_percent`] as a ratio 0..1.
    pub fn sm_ratio(&self) -> f64 {
        ratio_from_percent(self.sm_percent)
    }

    /// [`Self::memory_percent`] as a ratio 0..1.
    pub fn memory_ratio(&self) -> f64 {
        ratio_from_percent(self.memory_percent)
    }

    /// [`Self::encoder_percent`] as a ratio 0..1.
    pub fn encoder_ratio(&self) -> f64 {
        ratio_from_percent(self.encoder_percent)
    }

    /// [`Self::decoder_percent`] as a ratio 0..1.
    pub fn decoder_ratio(&self) -> f64 {
        ratio_from_percent(self.decoder_percent)
    }
}

/// GPM profiling metrics of one device over the last pair of GPM samples
/// (`nvmlGpmMetricsGet`); percent 0..100 as NVML gives them, `None` where the metric is not
/// answered.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpmMetrics {
    /// Seconds between the two samples.
    pub window_seconds: f64,
    /// `NVML_GPM_METRIC_GRAPHICS_UTIL`: graphics or compute engine active, %.
    pub graphics_util: Option<f64>,
    /// `NVML_GPM_METRIC_SM_UTIL`: SMs with at least one warp resident, %.
    pub sm_util: Option<f64>,
    /// `NVML_GPM_METRIC_SM_OCCUPANCY`: resident warps of the maximum, %.
    pub sm_occupancy: Option<f64>,
    /// `NVML_GPM_METRIC_INTEGER_UTIL`: integer pipe, %.
    pub integer_util: Option<f64>,
    /// `NVML_GPM_METRIC_ANY_TENSOR_UTIL`: any tensor pipe, %.
    pub any_tensor_util: Option<f64>,
    /// `NVML_GPM_METRIC_DFMA_TENSOR_UTIL`: FP64 tensor (DFMA), %.
    pub dfma_tensor_util: Option<f64>,
    /// `NVML_GPM_METRIC_HMMA_TENSOR_UTIL`: half-precision tensor (HMMA), %.
    pub hmma_tensor_util: Option<f64>,
    /// `NVML_GPM_METRIC_IMMA_TENSOR_UTIL`: integer tensor (IMMA), %.
    pub imma_tensor_util: Option<f64>,
    /// `NVML_GPM_METRIC_DRAM_BW_UTIL`: DRAM bandwidth used, % of peak.
    pub dram_bw_util: Option<f64>,
    /// `NVML_GPM_METRIC_FP64_UTIL`: non-tensor FP64 pipe, %.
    pub fp64_util: Option<f64>,
    /// `NVML_GPM_METRIC_FP32_UTIL`: non-tensor FP32 pipe, %.
    pub fp32_util: Option<f64>,
    /// `NVML_GPM_METRIC_FP16_UTIL`: non-tensor FP16 pipe, %.
    pub fp16_util: Option<f64>,
}

impl GpmMetrics {
    /// A GPM percentage (one of this struct's fields) as a ratio, held to 0..1 (NVML's float
    /// arithmetic can land a hair outside 0..100).
    pub fn ratio(percent: Option<f64>) -> Option<f64> {
        percent.map(|p| ratio_from_percent(p).clamp(0.0, 1.0))
    }
}

/// Bytes moved since the agent started counting for this device (cumulative; never reset
/// while the agent runs, NVML re-inits included). In a [`DeviceSample`], only the totals
/// updated at that tick are `Some` (a GPM window or a PCIe throughput interval ended then).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct IoTotals {
    /// PCIe bytes sent by the GPU.
    pub pcie_transmit_bytes: Option<f64>,
    /// PCIe bytes received by the GPU.
    pub pcie_receive_bytes: Option<f64>,
    /// NVLink bytes sent, all links.
    pub nvlink_transmit_bytes: Option<f64>,
    /// NVLink bytes received, all links.
    pub nvlink_receive_bytes: Option<f64>,
}

/// Row remapping state (`nvmlDeviceGetRemappedRows`), Ampere and newer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemappedRows {
    /// Rows remapped for correctable errors.
    pub correctable: u32,
    /// Rows remapped for uncorrectable errors.
    pub uncorrectable: u32,
    /// A remapping is pending (takes effect at the next GPU reset).
    pub pending: bool,
    /// A remapping failed (no spare row left).
    pub failed: bool,
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
    /// Total framebuffer memory, bytes (`nvmlDeviceGetMemoryInfo_v2.total`, or v1's on
    /// drivers without `_v2`).
    pub memory_total_bytes: Option<u64>,
    /// Used memory, bytes (`nvmlDeviceGetMemoryInfo_v2.used`; on drivers without `_v2`,
    /// `nvmlDeviceGetMemoryInfo.used`, which includes the reserved memory).
    pub memory_used_bytes: Option<u64>,
    /// Free memory, bytes (`nvmlDeviceGetMemoryInfo_v2.free`, or v1's).
    pub memory_free_bytes: Option<u64>,
    /// Memory reserved by the driver and firmware, bytes (`nvmlDeviceGetMemoryInfo_v2.reserved`;
    /// `None` where only v1 answers).
    pub memory_reserved_bytes: Option<u64>,
    /// GPU die temperature, °C (`nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`).
    pub temperature_gpu_celsius: Option<u32>,
    /// HBM temperature, °C (`nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)`).
    pub temperature_memory_celsius: Option<u32>,
    /// Power draw, milliwatts (`nvmlDeviceGetPowerUsage`).
    pub power_milliwatts: Option<u32>,
    /// Enforced power limit, milliwatts (`nvmlDeviceGetEnforcedPowerLimit`).
    pub power_limit_milliwatts: Option<u32>,
    /// Energy since the driver was loaded, millijoules (`nvmlDeviceGetTotalEnergyConsumption`);
    /// only at ticks that read the energy group, else `None`.
    pub energy_millijoules: Option<u64>,
    /// Graphics clock, MHz (`nvmlDeviceGetClockInfo(NVML_CLOCK_GRAPHICS)`).
    pub clock_graphics_mhz: Option<u32>,
    /// SM clock, MHz (`nvmlDeviceGetClockInfo(NVML_CLOCK_SM)`).
    pub clock_sm_mhz: Option<u32>,
    /// Memory clock, MHz (`nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)`).
    pub clock_memory_mhz: Option<u32>,
    /// Clock-event (throttle) reasons bitmask (`nvmlDeviceGetCurrentClocksEventReasons`, or
    /// `nvmlDeviceGetCurrentClocksThrottleReasons` on drivers before R535);
    /// see [`crate::catalogue::clocks_event_reasons`].
    pub clocks_event_reasons: Option<u64>,
    /// Performance state, 0 (P0, maximum) to 15 (`nvmlDeviceGetPerformanceState`).
    pub performance_state: Option<u32>,
    /// Corrected ECC errors since driver load
    /// (`nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)`).
    pub ecc_corrected_total: Option<u64>,
    /// Uncorrected ECC errors since driver load (same call, `UNCORRECTED`).
    pub ecc_uncorrected_total: Option<u64>,
    /// Compute processes; `None` when the list could not be read, and on a GPU in MIG mode
    /// (its processes are reported on its MIG devices).
    pub processes: Option<Vec<ProcessSample>>,
    /// GPM profiling metrics of the GPM window that ended at this tick; `None` where GPM is
    /// unsupported, before the second GPM sample, and at ticks that did not read GPM.
    pub gpm: Option<GpmMetrics>,
    /// PCIe and NVLink byte counters updated at this tick (`None`: not updated now).
    pub io: IoTotals,
    /// Row remapping state; `None` where unsupported.
    pub remapped_rows: Option<RemappedRows>,
    /// Whether and how the device is shared with other pods; `None`: not known to be.
    pub sharing: Option<Sharing>,
    /// Node mode only (`gpu-otel-sidecar node`): each pod's share of this device, and the
    /// share no pod is known to hold ([`PodShare::pod`] `None`), added on the sampler thread
    /// after the NVML reads ([`crate::attribution::node`]); `None` in sidecar mode.
    pub pods: Option<Vec<PodShare>>,
}

/// A pod that holds a share of a device, as node mode knows it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodRef {
    /// The pod's UID (`k8s.pod.uid`), from its processes' `/proc/<pid>/cgroup`.
    pub uid: String,
    /// `k8s.pod.name`, where the kubelet's pod-resources `List` shows a device of this
    /// pod's processes allocated to one pod alone; else `None` (the collector's
    /// `k8sattributes` processor adds it from the UID).
    pub name: Option<String>,
    /// `k8s.namespace.name`, known with [`Self::name`].
    pub namespace: Option<String>,
}

/// One pod's share of one device (or the share of no known pod) at one tick. Memory and
/// SM utilization are on the device the processes run on (a GPU, or a MIG device); power
/// and energy on the physical GPU only. `None`: not known at this tick.
#[derive(Debug, Clone, PartialEq)]
pub struct PodShare {
    /// The pod; `None` for the share not attributed to any pod (processes whose cgroup
    /// names no pod, memory no process holds, power and energy no process's work explains).
    pub pod: Option<Arc<PodRef>>,
    /// Its compute processes on this device (MPS clients included) at this tick; `None` on
    /// a device whose processes are listed elsewhere (a GPU in MIG mode: on its MIG devices)
    /// or not known.
    pub processes: Option<u32>,
    /// GPU memory its processes hold, bytes: the sum of their `usedGpuMemory`, exact. For the
    /// not-attributed share: the device's used memory minus every pod's (negative when
    /// NVML's per-process figures add up to more than its device figure).
    pub memory_used_bytes: Option<i64>,
    /// Sum of its processes' SM shares over the process-utilization window that ended at this
    /// tick (`nvmlDeviceGetProcessUtilization`), ratio; only at ticks that read it.
    pub sm_ratio: Option<f64>,
    /// Its share of the GPU's power draw, milliwatts (apportioned; see
    /// [`crate::attribution::node::shares`]); on a physical GPU only.
    pub power_milliwatts: Option<u64>,
    /// Its share of the GPU's energy since [`Self::energy_since`], millijoules (apportioned
    /// window by window); only at ticks that read the energy, on a physical GPU.
    pub energy_millijoules: Option<u64>,
    /// When its energy total started: the start of the first window it was given a share
    /// of.
    pub energy_since: Option<SystemTime>,
}

impl PodShare {
    /// An empty share of `pod` (every figure `None`).
    pub fn new(pod: Option<Arc<PodRef>>) -> Self {
        Self {
            pod,
            processes: None,
            memory_used_bytes: None,
            sm_ratio: None,
            power_milliwatts: None,
            energy_millijoules: None,
            energy_since: None,
        }
    }
}

impl DeviceSample {
    /// [`Self::utilization_gpu_percent`] as a ratio 0..1.
    pub fn utilization_gpu_ratio(&self) -> Option<f64> {
        self.utilization_gpu_percent
            .map(|p| ratio_from_percent(f64::from(p)))
    }

    /// [`Self::utilization_memory_controller_percent`] as a ratio 0..1.
    pub fn utilization_memory_controller_ratio(&self) -> Option<f64> {
        self.utilization_memory_controller_percent
            .map(|p| ratio_from_percent(f64::from(p)))
    }

    /// [`Self::utilization_encoder_percent`] as a ratio 0..1.
    pub fn utilization_encoder_ratio(&self) -> Option<f64> {
        self.utilization_encoder_percent
            .map(|p| ratio_from_percent(f64::from(p)))
    }

    /// [`Self::utilization_decoder_percent`] as a ratio 0..1.
    pub fn utilization_decoder_ratio(&self) -> Option<f64> {
        self.utilization_decoder_percent
            .map(|p| ratio_from_percent(f64::from(p)))
    }

    /// [`Self::power_milliwatts`] in watts.
    pub fn power_watts(&self) -> Option<f64> {
        self.power_milliwatts
            .map(|mw| watts_from_milliwatts(f64::from(mw)))
    }

    /// [`Self::power_limit_milliwatts`] in watts.
    pub fn power_limit_watts(&self) -> Option<f64> {
        self.power_limit_milliwatts
            .map(|mw| watts_from_milliwatts(f64::from(mw)))
    }

    /// [`Self::energy_millijoules`] in joules (since the driver loaded).
    pub fn energy_joules(&self) -> Option<f64> {
        self.energy_millijoules
            .map(|mj| joules_from_millijoules(mj as f64))
    }

    /// Used memory as a ratio 0..1 of the total ([`Self::memory_used_bytes`] /
    /// [`Self::memory_total_bytes`]); `None` when either is absent or the total is 0.
    pub fn memory_used_ratio(&self) -> Option<f64> {
        match (self.memory_used_bytes, self.memory_total_bytes) {
            (Some(u), Some(t)) if t > 0 => Some(u as f64 / t as f64),
            _ => None,
        }
    }

    /// [`Self::memory_used_bytes`] in whole MiB, rounded down.
    pub fn memory_used_mib(&self) -> Option<u64> {
        self.memory_used_bytes.map(mib_from_bytes)
    }

    /// [`Self::memory_total_bytes`] in whole MiB, rounded down.
    pub fn memory_total_mib(&self) -> Option<u64> {
        self.memory_total_bytes.map(mib_from_bytes)
    }

    /// Whether NVML answered nothing for this device at this tick: lost, or every reading
    /// absent. The slow groups (energy, GPM, PCIe bytes, per-process utilization) are read
    /// at some ticks only, so they are left out of the judgement.
    pub fn answered_nothing(&self) -> bool {
        if self.state == DeviceState::Lost {
            return true;
        }
        let empty = DeviceSample::empty(self.info.clone(), self.state);
        let mut now = self.clone();
        now.energy_millijoules = None;
        now.gpm = None;
        now.io = empty.io;
        now.processes = None;
        now.sharing = None;
        now.pods = None;
        now == empty
    }

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
            gpm: None,
            io: IoTotals::default(),
            remapped_rows: None,
            sharing: None,
            pods: None,
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
    /// An export tick: the export clock exports this snapshot, and the slow groups due were
    /// read at this tick (they are read at export ticks only; see
    /// [`crate::sampling::cadence`]).
    pub export: bool,
    /// One entry per selected device, in NVML index order.
    pub devices: Vec<DeviceSample>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_give_the_exported_units() {
        let mut d = DeviceSample::empty(Arc::new(DeviceInfo::default()), DeviceState::Ok);
        assert_eq!(d.power_watts(), None);
        assert_eq!(d.memory_used_ratio(), None);
        d.utilization_gpu_percent = Some(37);
        d.utilization_memory_controller_percent = Some(100);
        d.power_milliwatts = Some(312_456);
        d.power_limit_milliwatts = Some(700_000);
        d.energy_millijoules = Some(1_234_567);
        d.memory_used_bytes = Some(3 * BYTES_PER_MIB + 5);
        d.memory_total_bytes = Some(12 * BYTES_PER_MIB);
        assert_eq!(d.utilization_gpu_ratio(), Some(0.37));
        assert_eq!(d.utilization_memory_controller_ratio(), Some(1.0));
        assert_eq!(d.utilization_encoder_ratio(), None);
        assert_eq!(d.power_watts(), Some(312.456));
        assert_eq!(d.power_limit_watts(), Some(700.0));
        assert_eq!(d.energy_joules(), Some(1234.567));
        assert_eq!(d.memory_used_mib(), Some(3));
        assert_eq!(d.memory_total_mib(), Some(12));
        assert_eq!(
            d.memory_used_ratio(),
            Some((3.0 * 1_048_576.0 + 5.0) / 12_582_912.0)
        );
        d.memory_total_bytes = Some(0);
        assert_eq!(d.memory_used_ratio(), None);
        let u = ProcessUtilization {
            sm_percent: 50.0,
            memory_percent: 25.0,
            encoder_percent: 0.0,
            decoder_percent: 100.0,
        };
        assert_eq!((u.sm_ratio(), u.memory_ratio()), (0.5, 0.25));
        assert_eq!((u.encoder_ratio(), u.decoder_ratio()), (0.0, 1.0));
        assert_eq!(GpmMetrics::ratio(Some(100.000_01)), Some(1.0));
        assert_eq!(GpmMetrics::ratio(Some(-0.000_01)), Some(0.0));
        assert_eq!(GpmMetrics::ratio(Some(42.0)), Some(0.42));
        assert_eq!(GpmMetrics::ratio(None), None);
        assert_eq!(percent_from_ratio(0.25), 25.0);
        assert_eq!(BYTES_PER_KIB * 2.0, 2048.0);
    }
}
