//! The per-pod metrics of node mode (`gpu-otel-sidecar node`): each pod's share of each
//! device ([`PodShare`], computed by [`crate::attribution::node::shares`]), one row per
//! metric in the shape of [`super::MetricDef`], its value from one share.
//!
//! A pod's points go out on a resource of their own: the node's attributes, `k8s.pod.uid`,
//! `k8s.pod.name` and `k8s.namespace.name` where known, `service.instance.id` the node's
//! followed by `.<pod uid>` (so that two pods' series never merge behind a Prometheus
//! exporter). The share no pod is known to hold goes out on the node's resource, marked
//! [`NOT_ATTRIBUTED`]. These series never repeat the GPU's own: summed over pods and the
//! not-attributed share, each adds up to the device's figure (`hw.gpu.memory.usage`,
//! `hw.power`, `hw.energy`), which stays on the node's resource once.

use super::{Fold, Instrument, MetricDef, Number};
use crate::sampling::bounds;
use crate::sampling::{PodShare, SampleGroup};

pub use crate::catalogue::attributes::{ATTRIBUTION, NOT_ATTRIBUTED};

/// Attributes on every per-pod data point, and where the pod is.
pub const POD_ATTRIBUTES: &str = "the device's attributes (`hw.id`, `hw.type`, `hw.vendor`, `hw.model`, `hw.parent` on a MIG device, `nvidia.gpu.sharing` where shared); the pod on the resource (`k8s.pod.uid`, and `k8s.pod.name`, `k8s.namespace.name` where the kubelet allocates one of its devices to it alone; the collector's `k8sattributes` processor adds the rest by UID); the share of no known pod on the node's resource with `nvidia.gpu.attribution` = `not_attributed`";

/// How a per-pod metric takes its value from one share, in the metric's unit; `None` when
/// not known at this tick.
pub type PodExtract = fn(&PodShare) -> Option<f64>;

/// One per-pod metric: a [`MetricDef`] row whose value comes from one share. Its name is
/// `nvidia.gpu.pod.*` (semconv has no per-pod GPU metric); its attributes add to
/// [`POD_ATTRIBUTES`].
pub type PodMetricDef = MetricDef<PodExtract>;

/// Every per-pod metric, in documentation order.
pub static POD_CATALOGUE: &[PodMetricDef] = &[
    MetricDef {
        name: "nvidia.gpu.pod.memory.usage",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "By",
        description: "GPU memory the pod's processes hold on the device (exact).",
        attributes: "",
        source: "`nvmlDeviceGetComputeRunningProcesses_v3` and `nvmlDeviceGetMPSComputeRunningProcesses_v3` (`usedGpuMemory`), every tick, each process's pod from `/proc/<pid>/cgroup`: the sum over the pod's processes. Not attributed: `nvmlDeviceGetMemoryInfo_v2.used` minus every pod's (processes in no pod, the driver's own; negative when NVML's per-process figures add up to more). Absent where NVML does not tell one process's memory. Pods and the not-attributed share add up to the device's `hw.gpu.memory.usage` exactly",
        bounds: &[&bounds::PROCESS_MEMORY, &bounds::MEMORY_PART],
        fold: Fold::None,
        extract: |s| s.memory_used_bytes.map(|b| b as f64),
    },
    MetricDef {
        name: "nvidia.gpu.pod.utilization",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Process,
        unit: "1",
        description: "Sum of the SM shares of the pod's processes on the device over the last window.",
        attributes: "",
        source: "`nvmlDeviceGetProcessUtilization` (`smUtil`), as `nvidia.gpu.process.utilization`, summed over the pod's processes (NVML's per-process measure, not `hw.gpu.utilization`'s); percent / 100. Not attributed: the processes in no pod",
        bounds: &[&bounds::PROCESS_UTILIZATION],
        fold: Fold::None,
        extract: |s| s.sm_ratio,
    },
    MetricDef {
        name: "nvidia.gpu.pod.power",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Fast,
        unit: "W",
        description: "The pod's share of the GPU's power draw (apportioned).",
        attributes: "",
        source: "`nvmlDeviceGetPowerUsage` (mW) split in proportion to each pod's weight, in whole mW (largest remainder): its processes' SM shares from the latest `nvmlDeviceGetProcessUtilization` read (on a MIG device times its compute slices, the `<n>g` of its profile); when no process had an SM share, the memory they hold; when none holds any, all not attributed. On the physical GPU only; pods and the not-attributed share add up to `hw.power` exactly. See docs/kubernetes.md, One agent per node",
        bounds: &[&bounds::POWER],
        fold: Fold::None,
        extract: |s| s.power_milliwatts.map(|mw| mw as f64 / 1000.0),
    },
    MetricDef {
        name: "nvidia.gpu.pod.energy",
        instrument: Instrument::Counter,
        number: Number::F64,
        group: SampleGroup::Energy,
        unit: "J",
        description: "The pod's share of the GPU's energy (apportioned) since its start time.",
        attributes: "",
        source: "`nvmlDeviceGetTotalEnergyConsumption`: each window between two readings (mJ) split by the weights of `nvidia.gpu.pod.power`, in whole mJ; the window's energy goes to the processes listed at its end; a window in which NVML's total went down is not split; / 1000. Start time: the start of the first window the pod was given a share of. On the physical GPU only; over any stretch, pods and the not-attributed share add up to `hw.energy`'s increase",
        bounds: &[&bounds::ENERGY],
        fold: Fold::None,
        extract: |s| s.energy_millijoules.map(|mj| mj as f64 / 1000.0),
    },
    MetricDef {
        name: "nvidia.gpu.pod.processes",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "{process}",
        description: "The pod's compute processes on the device (MPS clients included).",
        attributes: "",
        source: "`nvmlDeviceGetComputeRunningProcesses_v3` and `nvmlDeviceGetMPSComputeRunningProcesses_v3`, every tick, by `/proc/<pid>/cgroup`",
        bounds: &[],
        fold: Fold::None,
        extract: |s| s.processes.map(f64::from),
    },
];
