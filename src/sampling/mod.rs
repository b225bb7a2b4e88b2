//! NVML sampling and the hub: the one thread that owns every NVML call, and the bus that
//! carries what it reads to the consumers.
//!
//! [`Sampler::start`] ([`sampler`]) spawns the thread `nvml-sampler`. It loads the NVML
//! library (`GPU_SIDECAR_NVML_LIBRARY`), initializes it (`nvmlInit_v2`), reads each selected
//! device's static facts once, then reads the fast fields every sample interval and each
//! slow group ([`SampleGroup`]) on its own cadence ([`cadence`]), and publishes a
//! [`Snapshot`] into the [`Hub`] ([`hub`]). The async side only ever reads the hub; it never
//! calls NVML. The GPM sample buffers live on this thread only.
//!
//! For each NVML session the sampler also runs the event watcher thread `nvml-events`
//! ([`event_watcher`]) on the same `Nvml`: XID and ECC events are published into the hub
//! too, and reach the consumers' subscriptions in order with the snapshots. The sampler never
//! waits for the watcher to end a session (an `nvmlEventSetWait_v2` stuck in the driver does
//! not hold the re-initialization): the watcher keeps its own reference to the session's
//! `Nvml`, and whichever lets go last calls `nvmlShutdown`. Its heartbeat
//! ([`SamplerBoard::event_watcher`]) is read by the probes.
//!
//! Every consumer (export, rules, run report, sample log, device events) is one
//! [`consumer::Consumer`] on its own thread, fed by one hub subscription
//! ([`consumer::ConsumerThread`]).
//!
//! A field that answers `NOT_SUPPORTED`, `INVALID_ARGUMENT` or `NOT_FOUND` (or whose symbol
//! the library lacks) is logged once per device and field, left absent, and not asked again
//! during the NVML session. When NVML cannot start, the cause is classified
//! ([`NvmlDown`]), logged once per distinct cause, and init is retried with capped
//! exponential backoff.
//!
//! The thread publishes a heartbeat on its state board ([`SamplerBoard::busy`]: what it is doing and since when) so
//! that a call wedged in the driver, which cannot be interrupted, is seen by the probes, and
//! it counts every error NVML answers ([`SamplerBoard::nvml_errors`]).

pub mod board;
pub mod bounds;
pub mod cadence;
pub mod consumer;
pub mod event_watcher;
mod gpm;
pub mod hub;
pub mod library_advice;
mod nvml_error;
mod processes;
pub mod queue;
mod raw;
mod read;
pub mod reading;
pub mod sampler;
pub mod snapshot;

use nvml_wrapper::error::NvmlError;

pub use board::{
    EventWatcherState, EventWatcherStatus, NvmlErrorCounts, SamplerBoard, StuckCounts,
};
pub use cadence::{Timing, EVENT_WAIT_MAX, INIT_BACKOFF_CAP};
pub use event_watcher::{DeviceEvent, DeviceEventKind, WatcherCall};
pub use hub::{Delivery, GroupDuration, Hub, Interest};
pub use library_advice::LibraryAdvice;
pub use raw::{refused_version, Versioned, VERSIONED};
pub use sampler::{
    with_session, Annotate, Sampler, SamplerSettings, MAX_EVENT_WATCHERS,
    SILENT_TICKS_BEFORE_REINIT,
};
pub use snapshot::{
    DeviceInfo, DeviceSample, DeviceState, GpmMetrics, IoTotals, MigPlacement, PodRef, PodShare,
    ProcessSample, ProcessUtilization, RemappedRows, Sharing, Snapshot,
};

/// A group of NVML calls read together on one cadence; the `gpu_sidecar.sample.group`
/// attribute of the sample-duration self-metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SampleGroup {
    /// Device listing and static facts, once per NVML session.
    Static,
    /// Every tick: utilization, memory, temperatures, power, clocks, clock-event reasons,
    /// performance state, ECC totals, row remapping, the compute process list.
    Fast,
    /// `nvmlDeviceGetTotalEnergyConsumption` (`GPU_SIDECAR_ENERGY_INTERVAL`).
    Energy,
    /// `nvmlDeviceGetPcieThroughput`, GPUs without GPM PCIe counters only
    /// (`GPU_SIDECAR_PCIE_INTERVAL`).
    Pcie,
    /// `nvmlDeviceGetProcessUtilization` (`GPU_SIDECAR_PROCESS_INTERVAL`).
    Process,
    /// GPM samples and metrics (`GPU_SIDECAR_GPM_INTERVAL`).
    Gpm,
}

impl SampleGroup {
    /// Every group, in documentation order.
    pub const ALL: [SampleGroup; 6] = [
        SampleGroup::Static,
        SampleGroup::Fast,
        SampleGroup::Energy,
        SampleGroup::Pcie,
        SampleGroup::Process,
        SampleGroup::Gpm,
    ];

    /// The attribute value: `static`, `fast`, `energy`, `pcie`, `process` or `gpm`.
    pub fn as_str(self) -> &'static str {
        match self {
            SampleGroup::Static => "static",
            SampleGroup::Fast => "fast",
            SampleGroup::Energy => "energy",
            SampleGroup::Pcie => "pcie",
            SampleGroup::Process => "process",
            SampleGroup::Gpm => "gpm",
        }
    }
}

/// Why NVML is not usable, with the usual fix; one per distinct init failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlDown {
    /// Not initialized yet.
    Starting,
    /// The library file could not be loaded (no driver installed, or not mounted in the
    /// container): the loader's message, and what to do where the agent runs.
    LibraryNotFound(String, LibraryAdvice),
    /// `NVML_ERROR_DRIVER_NOT_LOADED`.
    DriverNotLoaded,
    /// `NVML_ERROR_NO_PERMISSION`.
    NoPermission,
    /// `NVML_ERROR_LIB_RM_VERSION_MISMATCH`: library and kernel module differ.
    VersionMismatch,
    /// `NVML_ERROR_UNKNOWN` at init ("Failed to initialize NVML: Unknown Error").
    Unknown,
    /// `NVML_ERROR_GPU_IS_LOST` at init or device listing: a GPU has fallen off the bus.
    GpuLost,
    /// `NVML_ERROR_RESET_REQUIRED` at init or device listing: a GPU needs a reset.
    ResetRequired,
    /// Any other error, as NVML named it.
    Other(String),
    /// `nvmlInit_v2` failed in a library that is not NVIDIA's `libnvidia-ml`
    /// (`GPU_SIDECAR_NVML_LIBRARY` names another file, such as the test mock): the driver
    /// advice does not apply, the library's own messages say why.
    OtherLibrary {
        /// The library as configured.
        library: String,
        /// The error it answered, as NVML names it (`NVML_ERROR_UNKNOWN`).
        error: String,
    },
}

impl NvmlDown {
    pub(crate) fn classify(e: &NvmlError) -> Self {
        match e {
            NvmlError::LibloadingError(inner) => {
                NvmlDown::LibraryNotFound(format!("{inner}"), LibraryAdvice::default())
            }
            NvmlError::DriverNotLoaded => NvmlDown::DriverNotLoaded,
            NvmlError::NoPermission => NvmlDown::NoPermission,
            NvmlError::LibRmVersionMismatch => NvmlDown::VersionMismatch,
            NvmlError::Unknown => NvmlDown::Unknown,
            NvmlError::GpuLost => NvmlDown::GpuLost,
            NvmlError::ResetRequired => NvmlDown::ResetRequired,
            other => NvmlDown::Other(nvml_error::error_code(other)),
        }
    }

    /// [`NvmlDown::classify`] for a failed `nvmlInit_v2` through `library`, where a missing
    /// library gets `advice`: an error answered by a library that is not NVIDIA's (its file
    /// name does not start with `libnvidia-ml`) is [`NvmlDown::OtherLibrary`], whatever the
    /// code.
    pub(crate) fn classify_init(
        e: &NvmlError,
        library: &std::path::Path,
        advice: &LibraryAdvice,
    ) -> Self {
        let nvidia = library
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("libnvidia-ml"));
        match e {
            NvmlError::LibloadingError(inner) => {
                NvmlDown::LibraryNotFound(format!("{inner}"), advice.clone())
            }
            _ if !nvidia => NvmlDown::OtherLibrary {
                library: library.display().to_string(),
                error: nvml_error::error_code(e),
            },
            _ => Self::classify(e),
        }
    }

    /// One line: the cause and the usual fix.
    pub fn explain(&self) -> String {
        match self {
            NvmlDown::Starting => "NVML not initialized yet".into(),
            NvmlDown::LibraryNotFound(detail, advice) => {
                format!("NVML library not found ({detail}): {}", advice.explain())
            }
            NvmlDown::DriverNotLoaded => "NVIDIA driver not loaded (NVML_ERROR_DRIVER_NOT_LOADED): load the kernel module (nvidia-smi on the host tells)".into(),
            NvmlDown::NoPermission => "no permission to talk to the NVIDIA driver (NVML_ERROR_NO_PERMISSION): the container needs the /dev/nvidia* devices (NVIDIA Container Toolkit)".into(),
            NvmlDown::VersionMismatch => "NVML library and kernel driver versions differ (NVML_ERROR_LIB_RM_VERSION_MISMATCH): the driver was upgraded without a reboot or the container mounts another version; reboot the node or restart the pod".into(),
            NvmlDown::Unknown => "Failed to initialize NVML: Unknown Error (NVML_ERROR_UNKNOWN): typically the container lost its device cgroup access after `systemctl daemon-reload` on the host; restart the pod (and see NVIDIA Container Toolkit's note on systemd cgroup drivers)".into(),
            NvmlDown::GpuLost => "a GPU has fallen off the bus (NVML_ERROR_GPU_IS_LOST): the kernel log (dmesg) shows Xid 79; the node needs a reboot or the GPU a reset (nvidia-smi -r), and its hardware checked if it recurs".into(),
            NvmlDown::ResetRequired => "a GPU needs a reset (NVML_ERROR_RESET_REQUIRED): reset it with nvidia-smi -r -i <index> once no process uses it, or reboot the node".into(),
            NvmlDown::Other(e) => format!("NVML failed to initialize: {e}"),
            NvmlDown::OtherLibrary { library, error } => format!(
                "nvmlInit_v2 failed with {error} in {library} (GPU_SIDECAR_NVML_LIBRARY), which is not NVIDIA's libnvidia-ml: \
                 the library's own message on stderr says why (for the test mock: NVML_MOCK_SCENARIO must name a readable, valid scenario file)"
            ),
        }
    }
}

/// NVML's state as the rest of the agent sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlStatus {
    /// Initialized; this many devices are being sampled.
    Up {
        /// Selected devices.
        devices: usize,
    },
    /// Not usable, and why.
    Down(NvmlDown),
}

/// What the sampler thread is doing, for the watchdog: each step that calls NVML and can
/// block in the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// `nvmlInit_v2` (library load and driver handshake).
    Init,
    /// Device listing and static facts (`nvmlDeviceGetCount_v2`, handles, UUIDs, names).
    Listing,
    /// One sample of every device.
    Tick,
    /// `nvmlShutdown`.
    Shutdown,
}

impl Activity {
    /// Lower-case name for logs and the health body.
    pub fn as_str(self) -> &'static str {
        match self {
            Activity::Init => "nvmlInit",
            Activity::Listing => "device listing",
            Activity::Tick => "sampling tick",
            Activity::Shutdown => "nvmlShutdown",
        }
    }
}
