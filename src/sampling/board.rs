//! The sampler's state board: what the NVML threads are doing and have met (NVML's status,
//! the sampler's heartbeat, the event watchers, the errors NVML answered, the steps found
//! stuck), written by the sampler and the watchdog through this API only, read by the
//! probes and the agent's own metrics. The snapshots and device events go over the bus
//! ([`super::Hub`]), not here.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::event_watcher::{self, WatcherCall};
use super::{Activity, NvmlDown, NvmlStatus};

#[derive(Debug, Default)]
struct Heartbeat {
    busy: Option<(Activity, Instant)>,
    last_tick_duration: Option<Duration>,
}

/// Errors NVML answered, by call and error code, counted since start (see
/// [`SamplerBoard::nvml_errors`]).
pub type NvmlErrorCounts = BTreeMap<(String, String), u64>;

/// The sampler's state board (see the module). One per agent, shared by the sampler, the
/// event watchers, the watchdog, the probes and the export.
#[derive(Debug)]
pub struct SamplerBoard {
    status: RwLock<NvmlStatus>,
    heartbeat: Mutex<Heartbeat>,
    nvml_errors: Mutex<NvmlErrorCounts>,
    watcher: Mutex<WatcherSlot>,
    watchers_running: AtomicUsize,
    stuck: Mutex<StuckCounts>,
}

/// The current NVML session's event watcher, as the sampler left it.
#[derive(Debug, Default, Clone)]
pub(super) enum WatcherSlot {
    /// No NVML session, or nothing to watch in it.
    #[default]
    None,
    /// Running (or ended by itself), with its heartbeat.
    Started(Arc<event_watcher::Heartbeat>),
    /// Not started: [`MAX_EVENT_WATCHERS`](super::MAX_EVENT_WATCHERS) watchers of earlier sessions are still inside a
    /// driver call.
    Refused,
}

/// The event watcher as the health checks see it ([`SamplerBoard::event_watcher`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventWatcherState {
    /// No NVML session, or no GPU to watch in it.
    NotRunning,
    /// Watching; `Some` while inside an NVML call (most of the time: `nvmlEventSetWait_v2`).
    Running(Option<WatcherCall>),
    /// It returned by itself: no watched GPU can report events in this session (logged).
    Ended,
    /// Not started, because [`MAX_EVENT_WATCHERS`](super::MAX_EVENT_WATCHERS) watchers of earlier NVML sessions are still
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
/// [`SamplerBoard::count_stuck`]).
pub type StuckCounts = BTreeMap<(String, String), u64>;

impl Default for SamplerBoard {
    fn default() -> Self {
        Self {
            status: RwLock::new(NvmlStatus::Down(NvmlDown::Starting)),
            heartbeat: Mutex::new(Heartbeat::default()),
            nvml_errors: Mutex::new(BTreeMap::new()),
            watcher: Mutex::new(WatcherSlot::None),
            watchers_running: AtomicUsize::new(0),
            stuck: Mutex::new(BTreeMap::new()),
        }
    }
}

impl SamplerBoard {
    /// NVML's current status.
    pub fn status(&self) -> NvmlStatus {
        self.status
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
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

    /// How many event watcher threads (`nvml-events`) are running. Each holds its NVML
    /// session and, when it is the last holder, shuts it down as it ends: after the sampler
    /// stopped, 0 means NVML has been shut down (`nvmlShutdown` called), more that a watcher
    /// is still inside a driver call.
    pub fn event_watchers_running(&self) -> usize {
        self.watchers_running.load(Ordering::SeqCst)
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

    pub(super) fn set_watcher(&self, slot: WatcherSlot) {
        *self.watcher.lock().unwrap_or_else(|p| p.into_inner()) = slot;
    }

    /// Whether another watcher than the one with `beat` is the current one.
    pub(super) fn watcher_superseded(&self, beat: &Arc<event_watcher::Heartbeat>) -> bool {
        matches!(
            &*self.watcher.lock().unwrap_or_else(|p| p.into_inner()),
            WatcherSlot::Started(other) if !Arc::ptr_eq(other, beat)
        )
    }

    pub(super) fn watcher_refused(&self) -> bool {
        matches!(
            *self.watcher.lock().unwrap_or_else(|p| p.into_inner()),
            WatcherSlot::Refused
        )
    }

    pub(super) fn add_nvml_errors(
        &self,
        errors: impl IntoIterator<Item = ((&'static str, String), u64)>,
    ) {
        let mut counts = self.nvml_errors.lock().unwrap_or_else(|p| p.into_inner());
        for ((call, code), n) in errors {
            *counts.entry((call.to_string(), code)).or_insert(0) += n;
        }
    }

    /// Marks the start of an NVML step on the sampler thread.
    pub(super) fn begin(&self, activity: Activity) {
        self.heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .busy = Some((activity, Instant::now()));
    }

    /// Marks the end of the current step; a tick's duration is kept.
    pub(super) fn end(&self) {
        let mut h = self.heartbeat.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((activity, since)) = h.busy.take() {
            if activity == Activity::Tick {
                h.last_tick_duration = Some(since.elapsed());
            }
        }
    }

    pub(super) fn set_status(&self, status: NvmlStatus) {
        *self.status.write().unwrap_or_else(|p| p.into_inner()) = status;
    }

    /// An event watcher thread is about to start: counted in
    /// [`SamplerBoard::event_watchers_running`] until [`SamplerBoard::watcher_ended`].
    pub(super) fn watcher_started(&self) {
        self.watchers_running.fetch_add(1, Ordering::SeqCst);
    }

    /// An event watcher thread ended (or could not be spawned).
    pub(super) fn watcher_ended(&self) {
        self.watchers_running.fetch_sub(1, Ordering::SeqCst);
    }
}
