//! NVML sampling: the one thread that owns every NVML call.
//!
//! [`Sampler::start`] spawns the thread `nvml-sampler`. It loads the NVML library
//! (`GPU_SIDECAR_NVML_LIBRARY`), initializes it (`nvmlInit_v2`), reads each selected
//! device's static facts once, then reads the fast fields every sample interval and each
//! slow group ([`SampleGroup`]) on its own cadence, and publishes a [`Snapshot`] into
//! [`SharedState`]. The async side only ever reads [`SharedState`]; it never calls NVML.
//! The GPM sample buffers live on this thread only.
//!
//! For each NVML session the sampler also runs the event watcher thread `nvml-events`
//! ([`watch`]) on the same `Nvml`: XID and ECC events go to the [`Observer`] given to
//! [`Sampler::start_observed`], as do the durations of each group of calls. The sampler never
//! waits for the watcher to end a session (an `nvmlEventSetWait_v2` stuck in the driver does
//! not hold the re-initialization): the watcher keeps its own reference to the session's
//! `Nvml`, and whichever lets go last calls `nvmlShutdown`. Its heartbeat
//! ([`SharedState::event_watcher`]) is read by the health checks.
//!
//! A field that answers `NOT_SUPPORTED`, `INVALID_ARGUMENT` or `NOT_FOUND` (or whose symbol
//! the library lacks) is logged once per device and field, left absent, and not asked again
//! during the NVML session. When NVML cannot start, the cause is classified
//! ([`NvmlDown`]), logged once per distinct cause, and init is retried with capped
//! exponential backoff.
//!
//! The thread publishes a heartbeat ([`SharedState::busy`]: what it is doing and since
//! when) so that a call wedged in the driver, which cannot be interrupted, is seen by the
//! health checks, and it counts every error NVML answers ([`SharedState::nvml_errors`]).

pub mod bounds;
pub mod cadence;
mod gpm;
mod nvml_error;
mod processes;
mod raw;
mod read;
pub mod snapshot;
pub mod watch;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use crate::config::{Config, DeviceSelection, SlowIntervals};
use cadence::{Cadence, Due};
pub use raw::{refused_version, Versioned, VERSIONED};
pub use snapshot::{
    DeviceInfo, DeviceSample, DeviceState, GpmMetrics, IoTotals, MigPlacement, ProcessSample,
    ProcessUtilization, RemappedRows, Sharing, Snapshot,
};
pub use watch::{DeviceEvent, DeviceEventKind, WatcherCall};

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

/// Receives what the NVML threads see besides snapshots. Called on `nvml-sampler` and
/// `nvml-events`: must return quickly and never block on the network.
pub trait Observer: Send + Sync {
    /// One group of calls, over all devices, took `took` (once per tick the group ran).
    fn group_sampled(&self, group: SampleGroup, took: Duration) {
        let _ = (group, took);
    }

    /// A device event (XID, ECC) arrived.
    fn device_event(&self, event: DeviceEvent) {
        let _ = event;
    }
}

/// An [`Observer`] that ignores everything.
#[derive(Debug, Default)]
pub struct NoObserver;

impl Observer for NoObserver {}

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
        /// The error it answered, as nvml-wrapper names it.
        error: String,
    },
}

impl NvmlDown {
    pub(crate) fn classify(e: &NvmlError) -> Self {
        match e {
            NvmlError::LibloadingError(inner) => NvmlDown::LibraryNotFound(format!("{inner}")),
            NvmlError::DriverNotLoaded => NvmlDown::DriverNotLoaded,
            NvmlError::NoPermission => NvmlDown::NoPermission,
            NvmlError::LibRmVersionMismatch => NvmlDown::VersionMismatch,
            NvmlError::Unknown => NvmlDown::Unknown,
            NvmlError::GpuLost => NvmlDown::GpuLost,
            NvmlError::ResetRequired => NvmlDown::ResetRequired,
            other => NvmlDown::Other(format!("{other:?}")),
        }
    }

    /// [`NvmlDown::classify`] for a failed `nvmlInit_v2` through `library`: an error answered
    /// by a library that is not NVIDIA's (its file name does not start with `libnvidia-ml`)
    /// is [`NvmlDown::OtherLibrary`], whatever the code.
    pub(crate) fn classify_init(e: &NvmlError, library: &std::path::Path) -> Self {
        let nvidia = library
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("libnvidia-ml"));
        match e {
            NvmlError::LibloadingError(_) => Self::classify(e),
            _ if !nvidia => NvmlDown::OtherLibrary {
                library: library.display().to_string(),
                error: format!("{e:?}"),
            },
            _ => Self::classify(e),
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

#[derive(Debug, Default)]
struct Heartbeat {
    busy: Option<(Activity, Instant)>,
    last_tick_duration: Option<Duration>,
}

/// Errors NVML answered, by call and error code, counted since start (see
/// [`SharedState::nvml_errors`]).
pub type NvmlErrorCounts = BTreeMap<(String, String), u64>;

/// What the sampler publishes; read by the telemetry callbacks and the health checks.
#[derive(Debug)]
pub struct SharedState {
    latest: RwLock<Option<Arc<Snapshot>>>,
    subscribers: std::sync::Mutex<Vec<(u64, mpsc::SyncSender<Arc<Snapshot>>)>>,
    next_subscription: AtomicU64,
    status: RwLock<NvmlStatus>,
    ticks: AtomicU64,
    heartbeat: Mutex<Heartbeat>,
    nvml_errors: Mutex<NvmlErrorCounts>,
    watcher: Mutex<WatcherSlot>,
    watchers_running: AtomicUsize,
    stuck: Mutex<StuckCounts>,
}

/// The current NVML session's event watcher, as the sampler left it.
#[derive(Debug, Default, Clone)]
enum WatcherSlot {
    /// No NVML session, or nothing to watch in it.
    #[default]
    None,
    /// Running (or ended by itself), with its heartbeat.
    Started(Arc<watch::Heartbeat>),
    /// Not started: [`MAX_EVENT_WATCHERS`] watchers of earlier sessions are still inside a
    /// driver call.
    Refused,
}

/// The event watcher as the health checks see it ([`SharedState::event_watcher`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventWatcherState {
    /// No NVML session, or no GPU to watch in it.
    NotRunning,
    /// Watching; `Some` while inside an NVML call (most of the time: `nvmlEventSetWait_v2`).
    Running(Option<WatcherCall>),
    /// It returned by itself: no watched GPU can report events in this session (logged).
    Ended,
    /// Not started, because [`MAX_EVENT_WATCHERS`] watchers of earlier NVML sessions are still
    /// inside a driver call (they cannot be interrupted); started once one returns.
    Refused,
}

/// [`EventWatcherState`] and the watchers of earlier NVML sessions that have not returned
/// yet (left inside a driver call when their session ended).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventWatcherStatus {
    /// The current session's watcher.
    pub state: EventWatcherState,
    /// Watcher threads of earlier sessions still running.
    pub earlier_still_running: usize,
}

/// NVML steps that ran past `GPU_SIDECAR_WATCHDOG_TIMEOUT`, by thread and step (see
/// [`SharedState::count_stuck`]).
pub type StuckCounts = BTreeMap<(String, String), u64>;

impl Default for SharedState {
    fn default() -> Self {
        Self {
            latest: RwLock::new(None),
            subscribers: std::sync::Mutex::new(Vec::new()),
            next_subscription: AtomicU64::new(0),
            status: RwLock::new(NvmlStatus::Down(NvmlDown::Starting)),
            ticks: AtomicU64::new(0),
            heartbeat: Mutex::new(Heartbeat::default()),
            nvml_errors: Mutex::new(BTreeMap::new()),
            watcher: Mutex::new(WatcherSlot::None),
            watchers_running: AtomicUsize::new(0),
            stuck: Mutex::new(BTreeMap::new()),
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
        subs.retain(|(_, tx)| match tx.try_send(snapshot.clone()) {
            Ok(()) | Err(mpsc::TrySendError::Full(_)) => true,
            Err(mpsc::TrySendError::Disconnected(_)) => false,
        });
    }

    /// Every snapshot from now on, in order, through a queue of `capacity` (at least 1):
    /// for consumers that need every sample (rules, run report, sample log), not only the
    /// latest. Dropping the receiver unsubscribes.
    pub fn subscribe(&self, capacity: usize) -> mpsc::Receiver<Arc<Snapshot>> {
        self.subscribe_with_id(capacity).1
    }

    /// [`SharedState::subscribe`], with an id for [`SharedState::unsubscribe`].
    pub fn subscribe_with_id(&self, capacity: usize) -> (u64, mpsc::Receiver<Arc<Snapshot>>) {
        let (tx, rx) = mpsc::sync_channel(capacity.max(1));
        let id = self.next_subscription.fetch_add(1, Ordering::Relaxed);
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, tx));
        (id, rx)
    }

    /// Ends one subscription: its receiver gets what is queued, then sees the channel
    /// closed, which wakes a consumer blocked on it.
    pub fn unsubscribe(&self, id: u64) {
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _)| *i != id);
    }

    /// Ends every subscription: each receiver still gets the snapshots already queued, then
    /// sees the channel closed (`recv` answers `Err`). Called at shutdown, after the sampler's
    /// final sample, so that consumers drain and finish; later snapshots reach no subscriber.
    pub fn close_subscriptions(&self) {
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// What the sampler thread is inside now (an NVML step) and how long it has been at it;
    /// `None` while it waits between ticks or between init retries. A duration far above the
    /// sample interval means a driver call is stuck.
    pub fn busy(&self) -> Option<(Activity, Duration)> {
        self.heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .busy
            .map(|(a, since)| (a, since.elapsed()))
    }

    /// How long the last completed tick took (every device read once).
    pub fn last_tick_duration(&self) -> Option<Duration> {
        self.heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_tick_duration
    }

    /// Every error NVML answered since start, by `(call, code)`: the C function (with its
    /// argument where it matters, e.g. `nvmlDeviceGetClockInfo(NVML_CLOCK_SM)`) and the
    /// `NVML_ERROR_*` name. A field that answers `NOT_SUPPORTED` is asked, and so counted,
    /// once per device and NVML session; a lost GPU is probed, and counted, once per tick.
    pub fn nvml_errors(&self) -> NvmlErrorCounts {
        self.nvml_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The event watcher of the current NVML session: whether it runs, the NVML call it is
    /// inside and for how long (a wait far past its own timeout is stuck in the driver), and
    /// how many watchers of earlier sessions have not returned yet.
    pub fn event_watcher(&self) -> EventWatcherStatus {
        let slot = self
            .watcher
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let running = self.watchers_running.load(Ordering::SeqCst);
        let (state, current_running) = match slot {
            WatcherSlot::None => (EventWatcherState::NotRunning, false),
            WatcherSlot::Refused => (EventWatcherState::Refused, false),
            WatcherSlot::Started(beat) if beat.ended() => (EventWatcherState::Ended, false),
            WatcherSlot::Started(beat) => (EventWatcherState::Running(beat.busy()), true),
        };
        EventWatcherStatus {
            state,
            earlier_still_running: running.saturating_sub(usize::from(current_running)),
        }
    }

    /// Counts one NVML step found running past `GPU_SIDECAR_WATCHDOG_TIMEOUT` (once per
    /// episode, by the watchdog): `thread` is `nvml-sampler` or `nvml-events`, `step` the
    /// sampler's [`Activity`] or the watcher's NVML call.
    pub fn count_stuck(&self, thread: &str, step: &str) {
        *self
            .stuck
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((thread.to_string(), step.to_string()))
            .or_insert(0) += 1;
    }

    /// Every stuck NVML step counted since start (`gpu_sidecar.nvml.stuck`).
    pub fn stuck_counts(&self) -> StuckCounts {
        self.stuck.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_watcher(&self, slot: WatcherSlot) {
        *self.watcher.lock().unwrap_or_else(|p| p.into_inner()) = slot;
    }

    /// Whether another watcher than the one with `beat` is the current one.
    fn watcher_superseded(&self, beat: &Arc<watch::Heartbeat>) -> bool {
        matches!(
            &*self.watcher.lock().unwrap_or_else(|p| p.into_inner()),
            WatcherSlot::Started(other) if !Arc::ptr_eq(other, beat)
        )
    }

    fn watcher_refused(&self) -> bool {
        matches!(
            *self.watcher.lock().unwrap_or_else(|p| p.into_inner()),
            WatcherSlot::Refused
        )
    }

    fn add_nvml_errors(&self, errors: impl IntoIterator<Item = ((&'static str, String), u64)>) {
        let mut counts = self.nvml_errors.lock().unwrap_or_else(|p| p.into_inner());
        for ((call, code), n) in errors {
            *counts.entry((call.to_string(), code)).or_insert(0) += n;
        }
    }

    /// Marks the start of an NVML step on the sampler thread.
    fn begin(&self, activity: Activity) {
        self.heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .busy = Some((activity, Instant::now()));
    }

    /// Marks the end of the current step; a tick's duration is kept.
    fn end(&self) {
        let mut h = self.heartbeat.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((activity, since)) = h.busy.take() {
            if activity == Activity::Tick {
                h.last_tick_duration = Some(since.elapsed());
            }
        }
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
    /// Export period (`OTEL_METRIC_EXPORT_INTERVAL`): which ticks are export ticks, the
    /// only ones that read the slow groups (see [`cadence`]).
    pub export_interval: Duration,
    /// Devices to sample.
    pub devices: DeviceSelection,
    /// Cadence of the slow groups.
    pub slow_intervals: SlowIntervals,
}

impl SamplerSettings {
    fn cadence(&self) -> Cadence {
        Cadence::new(self.interval, self.export_interval, self.slow_intervals)
    }
}

impl From<&Config> for SamplerSettings {
    fn from(c: &Config) -> Self {
        Self {
            nvml_library: c.nvml_library.clone(),
            interval: c.sample_interval,
            export_interval: c.export_interval,
            devices: c.devices.clone(),
            slow_intervals: c.slow_intervals,
        }
    }
}

enum Command {
    /// Take one last sample, shut NVML down, end the thread; all of it by `until`.
    FinalSampleAndStop { until: Instant },
}

/// Handle on the sampler thread.
pub struct Sampler {
    commands: mpsc::Sender<Command>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

/// Consecutive ticks in which no device answered anything before NVML is initialized again.
pub const SILENT_TICKS_BEFORE_REINIT: u32 = 3;

/// Init retry backoff: doubles from 1 s up to this cap.
pub const INIT_BACKOFF_CAP: Duration = Duration::from_secs(30);

/// Most event watcher threads at once: the current session's and one of an earlier session
/// still inside a driver call. Past it no new watcher is started until one returns (a stuck
/// driver call cannot be interrupted), so stuck threads never pile up.
pub const MAX_EVENT_WATCHERS: usize = 2;

impl Sampler {
    /// Spawns the `nvml-sampler` thread, with nobody observing durations and events.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(settings: SamplerSettings, shared: Arc<SharedState>) -> Self {
        Self::start_observed(settings, shared, Arc::new(NoObserver))
    }

    /// Spawns the `nvml-sampler` thread (and, per NVML session, `nvml-events`), reporting
    /// group durations and device events to `observer`.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start_observed(
        settings: SamplerSettings,
        shared: Arc<SharedState>,
        observer: Arc<dyn Observer>,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("nvml-sampler".into())
            .spawn(move || {
                run(&settings, &shared, &rx, &observer);
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
    /// after `timeout` and the thread is left behind. The event watcher is given up to half
    /// of what is left after the final sample to return from its current wait (at most one
    /// sample interval); if it has not, it shuts NVML down itself when it returns.
    pub fn stop(mut self, timeout: Duration) -> bool {
        let _ = self.commands.send(Command::FinalSampleAndStop {
            until: Instant::now() + timeout,
        });
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
    /// Stop the sampler; with the time by which everything must be done when asked to.
    Stop(Option<Instant>),
    Reinit,
    /// No device answered for [`SILENT_TICKS_BEFORE_REINIT`] ticks: re-initialize, and
    /// keep re-initializing until NVML lists as many devices again.
    Silent,
}

/// What one NVML session hands to the next.
#[derive(Default)]
struct Carry {
    /// Ticks since start.
    seq: u64,
    /// Byte counters, by UUID.
    io_totals: HashMap<String, IoTotals>,
    /// After NVML went silent: the device count to list again before sampling resumes.
    relist: Option<usize>,
    /// The export schedule and the slow groups' last reads.
    cadence: Option<Cadence>,
}

fn run(
    settings: &SamplerSettings,
    shared: &Arc<SharedState>,
    commands: &mpsc::Receiver<Command>,
    observer: &Arc<dyn Observer>,
) {
    let mut backoff = Duration::from_secs(1);
    let mut last_down: Option<NvmlDown> = None;
    let mut carry = Carry {
        cadence: Some(settings.cadence()),
        ..Carry::default()
    };
    loop {
        shared.begin(Activity::Init);
        let init = Nvml::builder()
            .lib_path(settings.nvml_library.as_os_str())
            .init();
        shared.end();
        match init {
            Ok(nvml) => {
                if last_down.take().is_some() {
                    tracing::info!("NVML is back");
                }
                backoff = Duration::from_secs(1);
                let nvml = Arc::new(nvml);
                let end = session(&nvml, settings, shared, commands, observer, &mut carry);
                match Arc::try_unwrap(nvml) {
                    Ok(nvml) => {
                        shared.begin(Activity::Shutdown);
                        let result = nvml.shutdown();
                        shared.end();
                        match result {
                            Err(e) => {
                                shared.add_nvml_errors([(("nvmlShutdown", nvml_error::error_code(&e)), 1)]);
                                tracing::warn!("nvmlShutdown failed: {e}");
                            }
                            Ok(()) => tracing::debug!("nvmlShutdown done"),
                        }
                    }
                    // The session's event watcher is still inside a wait: it shuts NVML down
                    // when that returns. The next session initializes NVML again meanwhile
                    // (NVML counts its initializations).
                    Err(_) => tracing::debug!(
                        "the event watcher still holds this NVML session; it calls nvmlShutdown when its wait returns"
                    ),
                }
                match end {
                    SessionEnd::Stop(_) => return,
                    SessionEnd::Reinit | SessionEnd::Silent => shared.clear(),
                }
            }
            Err(e) => {
                shared.add_nvml_errors([(("nvmlInit_v2", nvml_error::error_code(&e)), 1)]);
                let down = NvmlDown::classify_init(&e, &settings.nvml_library);
                // Status first: whoever reads the log line and then asks /readyz sees it.
                shared.set_status(NvmlStatus::Down(down.clone()));
                if last_down.as_ref() != Some(&down) {
                    tracing::error!(
                        retry_in_s = backoff.as_secs(),
                        "{}; retrying with backoff up to {}s",
                        down.explain(),
                        INIT_BACKOFF_CAP.as_secs()
                    );
                }
                last_down = Some(down);
                match commands.recv_timeout(backoff) {
                    Ok(Command::FinalSampleAndStop { .. })
                    | Err(RecvTimeoutError::Disconnected) => return,
                    Err(RecvTimeoutError::Timeout) => {}
                }
                backoff = (backoff * 2).min(INIT_BACKOFF_CAP);
            }
        }
    }
}

/// A running event watcher: dropping `stop` asks it to end (at its next wake-up); `done`
/// says it has.
struct Watcher {
    stop: mpsc::Sender<()>,
    done: mpsc::Receiver<()>,
}

/// Starts the session's event watcher (`nvml-events`) on `targets`, unless there is nothing
/// to watch or [`MAX_EVENT_WATCHERS`] are still running (earlier ones stuck in the driver;
/// said when `say`: the previous session's watcher may simply not have noticed its stop yet,
/// which takes up to one wait). Publishes its heartbeat for the health checks.
fn start_watcher(
    nvml: &Arc<Nvml>,
    targets: &[watch::Target],
    wait: Duration,
    shared: &Arc<SharedState>,
    observer: &Arc<dyn Observer>,
    say: bool,
) -> Option<Watcher> {
    if targets.is_empty() {
        shared.set_watcher(WatcherSlot::None);
        return None;
    }
    let running = shared.watchers_running.load(Ordering::SeqCst);
    if running >= MAX_EVENT_WATCHERS {
        if say {
            tracing::error!(
                stuck = running,
                "XID and ECC events are not watched: {running} event watchers of earlier NVML sessions are still inside a driver call that does not return; a new one starts when one returns"
            );
        }
        shared.set_watcher(WatcherSlot::Refused);
        return None;
    }
    let beat = Arc::new(watch::Heartbeat::default());
    let (stop_tx, stop_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let (nvml, targets, thread_shared, observer, thread_beat) = (
        nvml.clone(),
        targets.to_vec(),
        shared.clone(),
        observer.clone(),
        beat.clone(),
    );
    shared.watchers_running.fetch_add(1, Ordering::SeqCst);
    let spawned = std::thread::Builder::new()
        .name("nvml-events".into())
        .spawn(move || {
            let shared = thread_shared;
            let stop = watch::StopSignal(stop_rx);
            let count_error = |call: &'static str, e: &NvmlError| {
                shared.add_nvml_errors([((call, nvml_error::error_code(e)), 1)]);
            };
            watch::run(
                &nvml,
                &targets,
                &watch::Context {
                    stop: &stop,
                    observer: observer.as_ref(),
                    beat: &thread_beat,
                    count_error: &count_error,
                    wait,
                    superseded: &|| shared.watcher_superseded(&thread_beat),
                },
            );
            thread_beat.end();
            // The sampler has moved on (or stopped) without this session: last one out
            // shuts NVML down.
            if let Ok(nvml) = Arc::try_unwrap(nvml) {
                match nvml.shutdown() {
                    Ok(()) => tracing::debug!("nvmlShutdown done (by the event watcher)"),
                    Err(e) => {
                        shared.add_nvml_errors([(("nvmlShutdown", nvml_error::error_code(&e)), 1)]);
                        tracing::warn!("nvmlShutdown failed: {e}");
                    }
                }
            }
            shared.watchers_running.fetch_sub(1, Ordering::SeqCst);
            let _ = done_tx.send(());
        });
    match spawned {
        Ok(_) => {
            shared.set_watcher(WatcherSlot::Started(beat));
            Some(Watcher {
                stop: stop_tx,
                done: done_rx,
            })
        }
        Err(e) => {
            shared.watchers_running.fetch_sub(1, Ordering::SeqCst);
            shared.set_watcher(WatcherSlot::None);
            tracing::error!(
                "cannot start the nvml-events thread: {e}; XID and ECC events are not watched"
            );
            None
        }
    }
}

fn session(
    nvml: &Arc<Nvml>,
    settings: &SamplerSettings,
    shared: &Arc<SharedState>,
    commands: &mpsc::Receiver<Command>,
    observer: &Arc<dyn Observer>,
    carry: &mut Carry,
) -> SessionEnd {
    let opened = Instant::now();
    shared.begin(Activity::Listing);
    let listed = read::Reader::open(nvml, &settings.devices, &carry.io_totals);
    shared.end();
    let mut reader = match listed {
        Ok(mut r) => {
            shared.add_nvml_errors(r.take_errors());
            r
        }
        Err(e) => {
            shared.add_nvml_errors([(("nvmlDeviceGetCount_v2", nvml_error::error_code(&e)), 1)]);
            tracing::error!("NVML is up but listing devices failed: {e}; re-initializing");
            shared.set_status(NvmlStatus::Down(NvmlDown::Other(format!(
                "device listing: {e}"
            ))));
            return match commands.recv_timeout(Duration::from_secs(5)) {
                Ok(Command::FinalSampleAndStop { until }) => SessionEnd::Stop(Some(until)),
                Err(RecvTimeoutError::Disconnected) => SessionEnd::Stop(None),
                Err(RecvTimeoutError::Timeout) => SessionEnd::Reinit,
            };
        }
    };
    observer.group_sampled(SampleGroup::Static, opened.elapsed());
    if let Some(before) = carry.relist {
        if reader.device_count() < before {
            // Still broken: sampling fewer GPUs would hide the others; not ready, try again.
            shared.set_status(NvmlStatus::Down(NvmlDown::Other(format!(
                "NVML lists {} of the {before} devices it sampled before it stopped answering; re-initializing",
                reader.device_count()
            ))));
            return match commands.recv_timeout(Duration::from_secs(2)) {
                Ok(Command::FinalSampleAndStop { until }) => SessionEnd::Stop(Some(until)),
                Err(RecvTimeoutError::Disconnected) => SessionEnd::Stop(None),
                Err(RecvTimeoutError::Timeout) => SessionEnd::Reinit,
            };
        }
        tracing::info!(devices = reader.device_count(), "NVML answers again");
        carry.relist = None;
    }
    shared.set_status(NvmlStatus::Up {
        devices: reader.device_count(),
    });
    tracing::info!(
        devices = reader.device_count(),
        interval_ms = settings.interval.as_millis() as u64,
        export_interval_ms = settings.export_interval.as_millis() as u64,
        energy_interval_ms = settings.slow_intervals.energy.as_millis() as u64,
        process_interval_ms = settings.slow_intervals.process.as_millis() as u64,
        gpm_interval_ms = settings.slow_intervals.gpm.as_millis() as u64,
        pcie_interval_ms = settings.slow_intervals.pcie.as_millis() as u64,
        "sampling started"
    );
    let mut cadence = carry.cadence.take().unwrap_or_else(|| settings.cadence());
    cadence.new_session();
    let targets = reader.event_targets();
    // One wait per sample interval at most when nothing happens (an event ends a wait at
    // once, whatever its bound).
    let wait = settings.interval;
    let mut watcher = start_watcher(nvml, &targets, wait, shared, observer, false);
    let mut refused = 0u32;
    let end = ticks(
        &mut reader,
        &mut cadence,
        settings,
        shared,
        commands,
        observer.as_ref(),
        &mut carry.seq,
        &mut || {
            // Refused at the start (earlier watchers stuck): try again once one returned;
            // said once it has lasted more than a wait (not a watcher finishing its last one).
            if watcher.is_none() && shared.watcher_refused() {
                refused += 1;
                let say = refused == 2;
                watcher = start_watcher(nvml, &targets, wait, shared, observer, say);
            }
        },
    );
    carry.cadence = Some(cadence);
    carry.io_totals = reader.io_totals();
    if matches!(end, SessionEnd::Silent) {
        carry.relist = Some(reader.device_count());
    }
    drop(reader);
    shared.set_watcher(WatcherSlot::None);
    if let Some(Watcher { stop, done }) = watcher {
        drop(stop);
        // At shutdown only: give the watcher part of what is left to return from its wait,
        // so that NVML is shut down here. Never when re-initializing: a stuck watcher must
        // not hold the recovery.
        if let SessionEnd::Stop(Some(until)) = end {
            let left = until.saturating_duration_since(Instant::now()) / 2;
            if done.recv_timeout(left).is_err() {
                tracing::debug!(
                    "the event watcher did not return from its wait in {left:?}; it shuts NVML down when it does"
                );
            }
        }
    }
    end
}

/// The sampling loop of one NVML session; `between` runs after each tick.
#[allow(clippy::too_many_arguments)]
fn ticks(
    reader: &mut read::Reader<'_>,
    cadence: &mut Cadence,
    settings: &SamplerSettings,
    shared: &SharedState,
    commands: &mpsc::Receiver<Command>,
    observer: &dyn Observer,
    seq: &mut u64,
    between: &mut dyn FnMut(),
) -> SessionEnd {
    let mut timings = Vec::new();
    let mut sample = |due: Due, seq: &mut u64| {
        *seq += 1;
        shared.begin(Activity::Tick);
        let taken_at = SystemTime::now();
        let taken_instant = Instant::now();
        timings.clear();
        let devices = reader.sample(due, &mut timings);
        shared.end();
        shared.add_nvml_errors(reader.take_errors());
        for (group, took) in &timings {
            observer.group_sampled(*group, *took);
        }
        // Every answering device answered nothing: NVML itself has stopped working.
        let silent = devices.iter().any(|d| d.state == DeviceState::Ok)
            && devices
                .iter()
                .filter(|d| d.state == DeviceState::Ok)
                .all(DeviceSample::answered_nothing);
        shared.publish(Snapshot {
            taken_at,
            taken_instant,
            seq: *seq,
            export: due.export,
            devices,
        });
        silent
    };
    let mut next = Instant::now();
    let mut silent_ticks = 0u32;
    loop {
        let due = cadence.tick(Instant::now());
        silent_ticks = if sample(due, seq) {
            silent_ticks + 1
        } else {
            0
        };
        if silent_ticks >= SILENT_TICKS_BEFORE_REINIT {
            // E.g. "Unknown Error" on every call after the container lost its device cgroup
            // access: not ready, and NVML is initialized again (with backoff) until it answers.
            tracing::error!(
                ticks = silent_ticks,
                "no GPU answered any NVML call for {silent_ticks} ticks: NVML has stopped working (the calls' errors are logged above); re-initializing NVML"
            );
            shared.set_status(NvmlStatus::Down(NvmlDown::Other(
                "no GPU answered any NVML call; re-initializing".into(),
            )));
            return SessionEnd::Silent;
        }
        between();
        next += settings.interval;
        let now = Instant::now();
        if next < now {
            // Ticks took longer than the interval: skip the missed ones rather than burst.
            next = now + settings.interval;
        }
        match commands.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(Command::FinalSampleAndStop { until }) => {
                // Every group, so that the run report's energy covers the whole run and
                // the last export holds everything.
                sample(cadence.last(Instant::now()), seq);
                return SessionEnd::Stop(Some(until));
            }
            Err(RecvTimeoutError::Disconnected) => return SessionEnd::Stop(None),
        }
    }
}

/// Runs `f` inside one NVML session, outside the sampler thread: for benchmarks and tools
/// that drive the real sampling code path themselves.
///
/// Loads and initializes the library `settings.nvml_library` (`nvmlInit_v2`), lists the
/// devices `settings.devices` selects (as [`Sampler`] does; `PodResources` must have been
/// resolved into a list first, else nothing is selected) and reads their static facts, then
/// calls `f` with a closure that runs one sampler tick (the same code: the fast fields every
/// call, each slow group on its cadence from `settings`, unsupported fields asked once) and
/// returns one [`DeviceSample`] per device, in listing order. Each call counts as an export
/// tick `settings.interval` after the previous one (the slow groups' cadence follows from
/// that); the caller decides when to sample. NVML is shut down (`nvmlShutdown`) after `f`
/// returns.
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
        let mut cadence = Cadence::new(
            settings.interval,
            settings.interval,
            settings.slow_intervals,
        );
        let mut reader = read::Reader::open(&nvml, &settings.devices, &HashMap::new())?;
        let (t0, mut tick, mut timings) = (Instant::now(), 0u32, Vec::new());
        f(&mut || {
            let due = cadence.tick(t0 + settings.interval * tick);
            let devices = reader.sample(due, &mut timings);
            timings.clear();
            tick += 1;
            devices
        })
    };
    if let Err(e) = nvml.shutdown() {
        tracing::warn!("nvmlShutdown failed: {e}");
    }
    Ok(result)
}
