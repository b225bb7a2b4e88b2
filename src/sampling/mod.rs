//! NVML sampling: the one thread that owns every NVML call.
//!
//! [`Sampler::start`] spawns the thread `nvml-sampler`. It loads the NVML library
//! (`GPU_SIDECAR_NVML_LIBRARY`), initializes it (`nvmlInit_v2`), reads each selected
//! device's static facts once, then reads the per-tick fields every sample interval and
//! publishes a [`Snapshot`] into [`SharedState`]. The async side only ever reads
//! [`SharedState`]; it never calls NVML.
//!
//! A field that answers `NOT_SUPPORTED`, `INVALID_ARGUMENT` or `NOT_FOUND` (or whose symbol
//! the library lacks) is logged once per device and field, left absent, and not asked again
//! during the NVML session. When NVML cannot start, the cause is classified
//! ([`NvmlDown`]), logged once per distinct cause, and init is retried with capped
//! exponential backoff.

mod read;
pub mod snapshot;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::config::{Config, DeviceSelection};
pub use snapshot::{DeviceInfo, DeviceSample, DeviceState, ProcessSample, Snapshot};

/// Clock-event (throttle) reason bits of `nvmlDeviceGetCurrentClocksEventReasons`, with the
/// attribute value used for each (`nvidia.gpu.clocks_event.reason`).
pub const CLOCKS_EVENT_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// Why NVML is not usable, with the usual fix; one per distinct init failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NvmlDown {
    /// Not initialized yet.
    Starting,
    /// The library file could not be loaded (no driver installed, or not mounted in the
    /// container).
    LibraryNotFound(String),
    /// `NVML_ERROR_DRIVER_NOT_LOADED`.
    DriverNotLoaded,
    /// `NVML_ERROR_NO_PERMISSION`.
    NoPermission,
    /// `NVML_ERROR_LIB_RM_VERSION_MISMATCH`: library and kernel module differ.
    VersionMismatch,
    /// `NVML_ERROR_UNKNOWN` at init ("Failed to initialize NVML: Unknown Error").
    Unknown,
    /// Any other error, as NVML named it.
    Other(String),
}

impl NvmlDown {
    fn classify(e: &NvmlError) -> Self {
        match e {
            NvmlError::LibloadingError(inner) => NvmlDown::LibraryNotFound(format!("{inner}")),
            NvmlError::DriverNotLoaded => NvmlDown::DriverNotLoaded,
            NvmlError::NoPermission => NvmlDown::NoPermission,
            NvmlError::LibRmVersionMismatch => NvmlDown::VersionMismatch,
            NvmlError::Unknown => NvmlDown::Unknown,
            other => NvmlDown::Other(format!("{other:?}")),
        }
    }

    /// One line: the cause and the usual fix.
    pub fn explain(&self) -> String {
        match self {
            NvmlDown::Starting => "NVML not initialized yet".into(),
            NvmlDown::LibraryNotFound(detail) => format!(
                "NVML library not found ({detail}): no NVIDIA driver on this machine, or the container was not given it; \
                 run with the NVIDIA Container Toolkit and NVIDIA_DRIVER_CAPABILITIES=utility, or set GPU_SIDECAR_NVML_LIBRARY"
            ),
            NvmlDown::DriverNotLoaded => "NVIDIA driver not loaded (NVML_ERROR_DRIVER_NOT_LOADED): load the kernel module (nvidia-smi on the host tells)".into(),
            NvmlDown::NoPermission => "no permission to talk to the NVIDIA driver (NVML_ERROR_NO_PERMISSION): the container needs the /dev/nvidia* devices (NVIDIA Container Toolkit)".into(),
            NvmlDown::VersionMismatch => "NVML library and kernel driver versions differ (NVML_ERROR_LIB_RM_VERSION_MISMATCH): the driver was upgraded without a reboot or the container mounts another version; reboot the node or restart the pod".into(),
            NvmlDown::Unknown => "Failed to initialize NVML: Unknown Error (NVML_ERROR_UNKNOWN): typically the container lost its device cgroup access after `systemctl daemon-reload` on the host; restart the pod (and see NVIDIA Container Toolkit's note on systemd cgroup drivers)".into(),
            NvmlDown::Other(e) => format!("NVML failed to initialize: {e}"),
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

/// What the sampler publishes; read by the telemetry callbacks and the health checks.
#[derive(Debug)]
pub struct SharedState {
    latest: RwLock<Option<Arc<Snapshot>>>,
    subscribers: std::sync::Mutex<Vec<mpsc::SyncSender<Arc<Snapshot>>>>,
    status: RwLock<NvmlStatus>,
    ticks: AtomicU64,
}

impl Default for SharedState {
    fn default() -> Self {
        Self {
            latest: RwLock::new(None),
            subscribers: std::sync::Mutex::new(Vec::new()),
            status: RwLock::new(NvmlStatus::Down(NvmlDown::Starting)),
            ticks: AtomicU64::new(0),
        }
    }
}

impl SharedState {
    /// The latest snapshot, if any tick completed.
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.latest
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The latest snapshot if it was taken less than `max_age` ago: a stale one is never
    /// exported as if fresh.
    pub fn fresh(&self, max_age: Duration) -> Option<Arc<Snapshot>> {
        self.latest()
            .filter(|s| s.taken_instant.elapsed() <= max_age)
    }

    /// NVML's current status.
    pub fn status(&self) -> NvmlStatus {
        self.status
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Ticks completed since start.
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// Publishes a snapshot (sampler thread, and tests that drive the mapping directly), and
    /// hands it to every subscriber without waiting: a subscriber whose queue is full misses
    /// this one (the sampler never blocks on a consumer).
    pub fn publish(&self, snapshot: Snapshot) {
        let snapshot = Arc::new(snapshot);
        *self.latest.write().unwrap_or_else(|p| p.into_inner()) = Some(snapshot.clone());
        self.ticks.fetch_add(1, Ordering::Relaxed);
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|tx| match tx.try_send(snapshot.clone()) {
            Ok(()) | Err(mpsc::TrySendError::Full(_)) => true,
            Err(mpsc::TrySendError::Disconnected(_)) => false,
        });
    }

    /// Every snapshot from now on, in order, through a queue of `capacity` (at least 1):
    /// for consumers that need every sample (rules, run report, sample log), not only the
    /// latest. Dropping the receiver unsubscribes.
    pub fn subscribe(&self, capacity: usize) -> mpsc::Receiver<Arc<Snapshot>> {
        let (tx, rx) = mpsc::sync_channel(capacity.max(1));
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tx);
        rx
    }

    fn set_status(&self, status: NvmlStatus) {
        *self.status.write().unwrap_or_else(|p| p.into_inner()) = status;
    }

    fn clear(&self) {
        *self.latest.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Settings the sampler needs, taken from [`Config`].
#[derive(Debug, Clone)]
pub struct SamplerSettings {
    /// Library to load.
    pub nvml_library: PathBuf,
    /// Tick period.
    pub interval: Duration,
    /// Devices to sample.
    pub devices: DeviceSelection,
}

impl From<&Config> for SamplerSettings {
    fn from(c: &Config) -> Self {
        Self {
            nvml_library: c.nvml_library.clone(),
            interval: c.sample_interval,
            devices: c.devices.clone(),
        }
    }
}

enum Command {
    /// Take one last sample, shut NVML down, end the thread.
    FinalSampleAndStop,
}

/// Handle on the sampler thread.
pub struct Sampler {
    commands: mpsc::Sender<Command>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

/// Init retry backoff: doubles from 1 s up to this cap.
pub const INIT_BACKOFF_CAP: Duration = Duration::from_secs(30);

impl Sampler {
    /// Spawns the `nvml-sampler` thread.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(settings: SamplerSettings, shared: Arc<SharedState>) -> Self {
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("nvml-sampler".into())
            .spawn(move || {
                run(&settings, &shared, &rx);
                let _ = done_tx.send(());
            })
            .expect("spawn nvml-sampler thread");
        Self {
            commands: tx,
            done: done_rx,
            thread: Some(thread),
        }
    }

    /// Asks for one final sample and NVML shutdown, and waits up to `timeout` for it. A
    /// sampler wedged inside a driver call cannot be interrupted: then this returns `false`
    /// after `timeout` and the thread is left behind.
    pub fn stop(mut self, timeout: Duration) -> bool {
        let _ = self.commands.send(Command::FinalSampleAndStop);
        match self.done.recv_timeout(timeout) {
            Ok(()) => {
                if let Some(t) = self.thread.take() {
                    let _ = t.join();
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// What ended an NVML session.
enum SessionEnd {
    Stop,
    Reinit,
}

fn run(settings: &SamplerSettings, shared: &SharedState, commands: &mpsc::Receiver<Command>) {
    let mut backoff = Duration::from_secs(1);
    let mut last_down: Option<NvmlDown> = None;
    let mut seq = 0u64;
    loop {
        let init = Nvml::builder()
            .lib_path(settings.nvml_library.as_os_str())
            .init();
        match init {
            Ok(nvml) => {
                if last_down.take().is_some() {
                    tracing::info!("NVML is back");
                }
                backoff = Duration::from_secs(1);
                let end = session(&nvml, settings, shared, commands, &mut seq);
                if let Err(e) = nvml.shutdown() {
                    tracing::warn!("nvmlShutdown failed: {e}");
                } else {
                    tracing::debug!("nvmlShutdown done");
                }
                match end {
                    SessionEnd::Stop => return,
                    SessionEnd::Reinit => shared.clear(),
                }
            }
            Err(e) => {
                let down = NvmlDown::classify(&e);
                if last_down.as_ref() != Some(&down) {
                    tracing::error!(
                        retry_in_s = backoff.as_secs(),
                        "{}; retrying with backoff up to {}s",
                        down.explain(),
                        INIT_BACKOFF_CAP.as_secs()
                    );
                }
                shared.set_status(NvmlStatus::Down(down.clone()));
                last_down = Some(down);
                match commands.recv_timeout(backoff) {
                    Ok(Command::FinalSampleAndStop) | Err(RecvTimeoutError::Disconnected) => return,
                    Err(RecvTimeoutError::Timeout) => {}
                }
                backoff = (backoff * 2).min(INIT_BACKOFF_CAP);
            }
        }
    }
}

fn session(
    nvml: &Nvml,
    settings: &SamplerSettings,
    shared: &SharedState,
    commands: &mpsc::Receiver<Command>,
    seq: &mut u64,
) -> SessionEnd {
    let mut reader = match read::Reader::open(nvml, &settings.devices) {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("NVML is up but listing devices failed: {e}; re-initializing");
            shared.set_status(NvmlStatus::Down(NvmlDown::Other(format!(
                "device listing: {e}"
            ))));
            return match commands.recv_timeout(Duration::from_secs(5)) {
                Ok(Command::FinalSampleAndStop) | Err(RecvTimeoutError::Disconnected) => {
                    SessionEnd::Stop
                }
                Err(RecvTimeoutError::Timeout) => SessionEnd::Reinit,
            };
        }
    };
    shared.set_status(NvmlStatus::Up {
        devices: reader.device_count(),
    });
    tracing::info!(
        devices = reader.device_count(),
        interval_ms = settings.interval.as_millis() as u64,
        "sampling started"
    );
    let mut next = Instant::now();
    loop {
        *seq += 1;
        let snapshot = Snapshot {
            taken_at: SystemTime::now(),
            taken_instant: Instant::now(),
            seq: *seq,
            devices: reader.sample(),
        };
        shared.publish(snapshot);
        next += settings.interval;
        let now = Instant::now();
        if next < now {
            // Ticks took longer than the interval: skip the missed ones rather than burst.
            next = now + settings.interval;
        }
        match commands.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(Command::FinalSampleAndStop) => {
                *seq += 1;
                shared.publish(Snapshot {
                    taken_at: SystemTime::now(),
                    taken_instant: Instant::now(),
                    seq: *seq,
                    devices: reader.sample(),
                });
                return SessionEnd::Stop;
            }
            Err(RecvTimeoutError::Disconnected) => return SessionEnd::Stop,
        }
    }
}

/// Runs `f` inside one NVML session, outside the sampler thread: for benchmarks and tools
/// that drive the real sampling code path themselves.
///
/// Loads and initializes the library `settings.nvml_library` (`nvmlInit_v2`), lists the
/// devices `settings.devices` selects (as [`Sampler`] does; `PodResources` must have been
/// resolved into a list first, else nothing is selected) and reads their static facts, then
/// calls `f` with a closure that reads every per-tick field of every selected device once
/// (the same code as each sampler tick, unsupported fields asked once included) and returns one
/// [`DeviceSample`] per device, in NVML index order. `settings.interval` is not used: the
/// caller decides when to sample. NVML is shut down (`nvmlShutdown`) after `f` returns.
///
/// # Errors
/// The [`NvmlError`] of the library load, `nvmlInit_v2` or the device listing
/// (`nvmlDeviceGetCount_v2`); a failing `nvmlShutdown` is logged, not returned.
pub fn with_session<R>(
    settings: &SamplerSettings,
    f: impl FnOnce(&mut dyn FnMut() -> Vec<DeviceSample>) -> R,
) -> Result<R, NvmlError> {
    let nvml = Nvml::builder()
        .lib_path(settings.nvml_library.as_os_str())
        .init()?;
    let result = {
        let mut reader = read::Reader::open(&nvml, &settings.devices)?;
        f(&mut || reader.sample())
    };
    if let Err(e) = nvml.shutdown() {
        tracing::warn!("nvmlShutdown failed: {e}");
    }
    Ok(result)
}
