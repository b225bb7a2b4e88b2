//! Which GPUs the agent reports (`GPU_SIDECAR_DEVICES`): [`DeviceSelection`] and the ways
//! the device plugins name a device ([`DeviceId`]).

/// Which GPUs to report, `GPU_SIDECAR_DEVICES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceSelection {
    /// Every device NVML shows.
    All,
    /// Only these: NVML indices, GPU UUIDs (`GPU-…`) or MIG UUIDs (`MIG-…`).
    List(Vec<DeviceId>),
    /// The devices the kubelet allocated to this pod (`pod-resources`): asked at start from
    /// the pod-resources socket, then resolved into [`DeviceSelection::Allocated`].
    PodResources,
    /// The devices the kubelet's pod-resources API lists for this pod (what
    /// [`DeviceSelection::PodResources`] resolves to at start).
    Allocated(Vec<AllocatedDevice>),
}

/// One entry of a device list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceId {
    /// NVML device index (as `nvidia-smi` numbers GPUs).
    Index(u32),
    /// A GPU UUID (`GPU-…`) or MIG device UUID (`MIG-…`).
    Uuid(String),
    /// A GPU by its device-file minor number (`/dev/nvidia<N>`, `nvmlDeviceGetMinorNumber`):
    /// GKE's device plugin names GPUs `nvidia<N>`.
    Minor(u32),
    /// A MIG device by its GPU's NVML index and its MIG device index
    /// (`nvmlDeviceGetMigDeviceHandleByIndex`): the NVIDIA device plugin's `index` strategy
    /// names MIG devices `<gpu>:<mig>`.
    MigIndex {
        /// The GPU's NVML index.
        gpu: u32,
        /// The MIG device index on it.
        mig: u32,
    },
    /// A MIG device by its GPU's minor number and its GPU instance id
    /// (`nvmlDeviceGetGpuInstanceId`): GKE names MIG partitions `nvidia<N>/gi<K>`.
    GpuInstance {
        /// The GPU's device-file minor number.
        minor: u32,
        /// The GPU instance id.
        gpu_instance_id: u32,
    },
}

/// As written in `GPU_SIDECAR_DEVICES` (and by the device plugins): `0`, `GPU-…`, `MIG-…`,
/// `nvidia3`, `0:1`, `nvidia0/gi3`.
impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceId::Index(i) => write!(f, "{i}"),
            DeviceId::Uuid(u) => f.write_str(u),
            DeviceId::Minor(m) => write!(f, "nvidia{m}"),
            DeviceId::MigIndex { gpu, mig } => write!(f, "{gpu}:{mig}"),
            DeviceId::GpuInstance {
                minor,
                gpu_instance_id,
            } => write!(f, "nvidia{minor}/gi{gpu_instance_id}"),
        }
    }
}

/// `GPU_SIDECAR_DEVICES=pod-resources` in words for log lines: the variable, and the Helm
/// chart value that sets it (users of the chart never set the variable themselves).
pub const POD_RESOURCES_MODE: &str =
    "GPU_SIDECAR_DEVICES=pod-resources (the Helm chart's gpuVisibility.mode=pod-resources)";

/// A device the kubelet allocated to this pod, as its device plugin named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedDevice {
    /// The GPU or MIG device NVML shows for it.
    pub id: DeviceId,
    /// The device plugin's id, as the kubelet lists it (e.g. `nvidia1/vgpu3`), for logs.
    pub plugin_id: String,
    /// Whether the plugin hands out this device as one replica of a shared GPU
    /// (time-slicing: `<uuid>::<n>`, `nvidia<N>/vgpu<M>`): other pods may hold it too.
    pub shared: bool,
}
