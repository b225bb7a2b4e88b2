//! The hub: the bus that carries snapshots and device events, in order, from the NVML
//! threads to the consumers, and the sampler's state board (NVML status, heartbeats, error
//! counts) that the probes and the export read.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use super::event_watcher::{self, DeviceEvent, WatcherCall};
use super::queue::{self, Refused};
use super::{Activity, NvmlDown, NvmlStatus, SampleGroup, Snapshot};

/// How long one group of NVML calls took, over all devices, for one snapshot
/// (`gpu_sidecar.sample.duration`).
pub type GroupDuration = (SampleGroup, Duration);

/// What a subscription carries.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// One tick's snapshot, with its group durations.
    Snapshot {
        /// The snapshot.
        snapshot: Arc<Snapshot>,
        /// How long each group of calls took (the static group: with the first snapshot of
        /// an NVML session).
        durations: Arc<[GroupDuration]>,
    },
    /// An XID or ECC event.
    Event(Arc<DeviceEvent>),
}

/// What a subscription asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest {
    /// Snapshots (one per tick).
    pub snapshots: bool,
    /// Device events (XID, ECC).
    pub events: bool,
}

impl Interest {
    /// Snapshots only.
    pub const SNAPSHOTS: Interest = Interest {
        snapshots: true,
        events: false,
    };
    /// Device events only.
    pub const EVENTS: Interest = Interest {
        snapshots: false,
        events: true,
    };
    /// Both, in order.
    pub const BOTH: Interest = Interest {
        snapshots: true,
        events: true,
    };
}

#[derive(Debug)]
struct Subscriber {
    id: u64,
    interest: Interest,
    queue: queue::Sender<Delivery>,
}

#[derive(Debug, Default)]
struct Heartbeat {
    busy: Option<(Activity, Instant)>,
    last_tick_duration: Option<Duration>,
}

/// Errors NVML answered, by call and error code, counted since start (see
/// [`Hub::nvml_errors`]).
pub type NvmlErrorCounts = BTreeMap<(String, String), u64>;

/// The hub: the one bus between the NVML threads and the consumers, and the sampler's state
/// board. The sampler publishes each [`Snapshot`] ([`Hub::publish_sampled`]) and the event
/// watcher each [`DeviceEvent`] ([`Hub::publish_event`]); every subscription
/// ([`Hub::subscribe_to`]) gets what it asked for, in publish order, through its own bounded
/// queue. The probes and the export read the latest snapshot, NVML's status, the
/// heartbeats and the error counts here.
#[derive(Debug)]
pub struct Hub {
    latest: RwLock<Option<Arc<Snapshot>>>,
    subscribers: Mutex<Vec<Subscriber>>,
    /// Device events a full queue refused, over all subscribers.
    events_lost: AtomicU64,
    next_subscription: AtomicU64,
    status: RwLock<NvmlStatus>,
    ticks: AtomicU64,
    heartbeat: Mutex<Heartbeat>,
    nvml_errors: Mutex<NvmlErrorCounts>,
    watcher: Mutex<WatcherSlot>,
    pub(super) watchers_running: AtomicUsize,
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

/// The event watcher as the health checks see it ([`Hub::event_watcher`]).
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
/// [`Hub::count_stuck`]).
pub type StuckCounts = BTreeMap<(String, String), u64>;

impl Default for Hub {
    fn default() -> Self {
        Self {
            latest: RwLock::new(None),
            subscribers: Mutex::new(Vec::new()),
            events_lost: AtomicU64::new(0),
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

impl Hub {
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

    /// Publishes a snapshot without group durations: [`Hub::publish_sampled`] for tests and
    /// tools that drive the mapping directly.
    pub fn publish(&self, snapshot: Snapshot) {
        self.publish_sampled(snapshot, Vec::new());
    }

    /// Publishes a snapshot (sampler thread), with how long each group of NVML calls took for
    /// it, and hands it to every subscription that takes snapshots without waiting: a
    /// subscriber whose queue is full misses this one (the sampler never blocks on a
    /// consumer).
    pub fn publish_sampled(&self, snapshot: Snapshot, durations: Vec<GroupDuration>) {
        let snapshot = Arc::new(snapshot);
        *self.latest.write().unwrap_or_else(|p| p.into_inner()) = Some(snapshot.clone());
        self.ticks.fetch_add(1, Ordering::Relaxed);
        let durations: Arc<[GroupDuration]> = durations.into();
        self.deliver(
            |i| i.snapshots,
            || Delivery::Snapshot {
                snapshot: snapshot.clone(),
                durations: durations.clone(),
            },
        );
    }

    /// Publishes a device event (event watcher thread) to every subscription that takes
    /// events, in order with the snapshots, without waiting. A full queue loses the event for
    /// that subscriber: counted, and logged (the first, then every 1000th).
    pub fn publish_event(&self, event: DeviceEvent) {
        let event = Arc::new(event);
        let full = self.deliver(|i| i.events, || Delivery::Event(event.clone()));
        if full > 0 {
            let lost = self.events_lost.fetch_add(full, Ordering::Relaxed) + full;
            if lost == full || lost / 1000 != (lost - full) / 1000 {
                tracing::warn!(
                    lost_so_far = lost,
                    kind = %event.kind,
                    uuid = %event.device.uuid,
                    "a device event did not reach a consumer whose queue is full (it is stuck); said for the first and every 1000th"
                );
            }
        }
    }

    /// Device events lost to full queues since start (over all subscribers).
    pub fn events_lost(&self) -> u64 {
        self.events_lost.load(Ordering::Relaxed)
    }

    /// Offers one delivery to every subscriber `wants`; drops the subscriptions whose
    /// receiver is gone; returns how many queues were full.
    fn deliver(&self, wants: impl Fn(Interest) -> bool, delivery: impl Fn() -> Delivery) -> u64 {
        let mut full = 0;
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|s| {
            if !wants(s.interest) {
                return true;
            }
            match s.queue.offer(delivery()) {
                Ok(()) => true,
                Err(Refused::Full) => {
                    full += 1;
                    true
                }
                Err(Refused::Abandoned) => false,
            }
        });
        full
    }

    /// Everything `interest` names from now on, in publish order, through a queue of
    /// `capacity` (at least 1), with an id for [`Hub::unsubscribe`]: for the consumers
    /// ([`super::consumer::ConsumerThread`] subscribes them). Dropping the receiver
    /// unsubscribes.
    pub fn subscribe_to(
        &self,
        capacity: usize,
        interest: Interest,
    ) -> (u64, queue::Receiver<Delivery>) {
        let (tx, rx) = queue::bounded(capacity);
        let id = self.next_subscription.fetch_add(1, Ordering::Relaxed);
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Subscriber {
                id,
                interest,
                queue: tx,
            });
        (id, rx)
    }

    /// Ends one subscription: its receiver gets what is queued, then sees the channel
    /// closed, which wakes a consumer blocked on it.
    pub fn unsubscribe(&self, id: u64) {
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|s| s.id != id);
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

    pub(super) fn clear(&self) {
        *self.latest.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
