//! The event watcher: the thread `nvml-events`, started by the sampler for each NVML session
//! and sharing its `Nvml` (NVML handles are thread-safe; the watcher touches no GPM buffer).
//!
//! It creates an NVML event set and registers each watched GPU for XID critical errors and
//! single/double-bit ECC errors (`nvmlDeviceRegisterEvents`, masked by
//! `nvmlDeviceGetSupportedEventTypes`). Registration happens on this thread, so it never
//! delays sampling; a GPU whose registration fails with a transient error is retried with
//! backoff (1 s doubling to [`REGISTER_RETRY_CAP`]), said once; one that cannot report events
//! is said once and left alone. It then waits on the set (`nvmlEventSetWait_v2`), each wait
//! bounded by one sample interval and at most
//! [`EVENT_WAIT_MAX`](super::cadence::EVENT_WAIT_MAX), and publishes each event into the [`Hub`](super::Hub), where
//! it rides the consumers' subscriptions in order with the snapshots.
//!
//! **Wake-ups and latency.** `nvmlEventSetWait_v2` returns as soon as NVML has an event, so
//! an XID reaches the hub when the driver reports it, whatever the bound; the bound only
//! says how often an idle watcher wakes (once per sample interval, at least twice a second)
//! and how long it takes to notice the stop request. Nothing else wakes it: the stop request is a closed channel.
//!
//! **Heartbeat.** Every NVML call it makes is recorded in its [`Heartbeat`] (which call,
//! since when, and how long the call may take by itself), which the health checks read: a
//! wait that has not returned long after its own timeout is a driver call that is stuck.
//! The sampler never waits for the watcher to re-initialize NVML: the watcher holds its own
//! reference to the session's `Nvml`, and whichever of the two lets go last shuts it down.
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, Nvml};

use super::nvml_error::{self, classify, ErrorClass};
use super::raw::{self, Versioned};
use super::snapshot::DeviceInfo;
use crate::logging::LogLimiter;

/// `nvmlEventTypeSingleBitEccError`.
pub const EVENT_ECC_SINGLE_BIT: u64 = 0x1;
/// `nvmlEventTypeDoubleBitEccError`.
pub const EVENT_ECC_DOUBLE_BIT: u64 = 0x2;
/// `nvmlEventTypeXidCriticalError`.
pub const EVENT_XID: u64 = 0x8;
/// The event types watched.
pub const WATCHED_EVENTS: u64 = EVENT_ECC_SINGLE_BIT | EVENT_ECC_DOUBLE_BIT | EVENT_XID;

/// Longest delay between two tries of a registration that failed for a transient reason.
pub const REGISTER_RETRY_CAP: Duration = Duration::from_secs(60);

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceEventKind {
    /// An XID critical error with its code (`nvmlEventTypeXidCriticalError`, `eventData`;
    /// NVML reports the most recent XID of the GPU).
    Xid(u64),
    /// A single-bit (corrected) ECC error (`nvmlEventTypeSingleBitEccError`).
    EccSingleBit,
    /// A double-bit (uncorrected) ECC error (`nvmlEventTypeDoubleBitEccError`).
    EccDoubleBit,
}

/// In words, for log lines: `XID 79`, `single-bit ECC error`, `double-bit ECC error`.
impl std::fmt::Display for DeviceEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceEventKind::Xid(code) => write!(f, "XID {code}"),
            DeviceEventKind::EccSingleBit => f.write_str("single-bit ECC error"),
            DeviceEventKind::EccDoubleBit => f.write_str("double-bit ECC error"),
        }
    }
}

/// One event from a GPU.
#[derive(Debug, Clone)]
pub struct DeviceEvent {
    /// When the watcher received it (NVML events carry no time).
    pub time: SystemTime,
    /// The device it concerns: the MIG device when NVML names its GPU instance and that MIG
    /// device is watched, else the GPU.
    pub device: Arc<DeviceInfo>,
    /// What happened.
    pub kind: DeviceEventKind,
}

impl DeviceEvent {
    /// The physical GPU's UUID: the device's own, or its parent's for a MIG device (XIDs
    /// are counted and alerted per physical GPU).
    pub fn gpu_uuid(&self) -> &str {
        self.device
            .mig
            .as_ref()
            .map_or(&self.device.uuid, |m| &m.parent_uuid)
    }
}

/// A physical GPU to watch, with the MIG devices events may be attributed to.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The GPU (its handle is looked up by UUID on the watcher thread).
    pub info: Arc<DeviceInfo>,
    /// Whether the GPU itself is reported (selected), not only some of its MIG devices.
    pub reported: bool,
    /// Its watched MIG devices.
    pub mig_devices: Vec<Arc<DeviceInfo>>,
}

/// The device an event with these instance ids concerns, or `None` when it concerns none
/// that this agent reports.
///
/// - No GPU instance named (`0xFFFFFFFF`): the whole GPU (`gpu`), which every MIG device on
///   it shares.
/// - A GPU instance: the one watched MIG device with that GPU instance (and compute
///   instance, when several share it). A GPU instance the agent watches but cannot narrow
///   down (several compute instances, none named) is reported on `gpu`.
/// - A GPU instance the agent does not watch: on `gpu` when the GPU itself is reported
///   (`reported`); else it is another tenant's MIG device, and `None`: a pod is never told
///   of another pod's error.
pub(crate) fn attribute(
    gpu: &Arc<DeviceInfo>,
    reported: bool,
    mig_devices: &[Arc<DeviceInfo>],
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
) -> Option<Arc<DeviceInfo>> {
    let Some(gi) = gpu_instance else {
        return Some(gpu.clone());
    };
    let same_gi: Vec<_> = mig_devices
        .iter()
        .filter(|d| d.mig.as_ref().and_then(|m| m.gpu_instance_id) == Some(gi))
        .collect();
    let hit = match (same_gi.len(), compute_instance) {
        (0, _) => None,
        (1, _) => Some(same_gi[0]),
        (_, Some(ci)) => same_gi
            .iter()
            .copied()
            .find(|d| d.mig.as_ref().and_then(|m| m.compute_instance_id) == Some(ci)),
        // Ours (the GPU instance is), but which compute instance is not said.
        (_, None) => return Some(gpu.clone()),
    };
    match hit {
        Some(d) => Some(d.clone()),
        None if reported => Some(gpu.clone()),
        None => None,
    }
}

/// Kind of an event from its type bits; `None` for types not watched.
pub(crate) fn kind(event_type: u64, data: u64) -> Option<DeviceEventKind> {
    if event_type & EVENT_XID != 0 {
        Some(DeviceEventKind::Xid(data))
    } else if event_type & EVENT_ECC_DOUBLE_BIT != 0 {
        Some(DeviceEventKind::EccDoubleBit)
    } else if event_type & EVENT_ECC_SINGLE_BIT != 0 {
        Some(DeviceEventKind::EccSingleBit)
    } else {
        None
    }
}

/// The NVML call an event watcher is inside, for the health checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatcherCall {
    /// The C function, e.g. `nvmlEventSetWait_v2`.
    pub call: &'static str,
    /// How long it has been inside it.
    pub busy_for: Duration,
    /// How long the call may take by itself: the wait's timeout (zero for calls without one).
    pub allowed: Duration,
}

/// One event watcher's heartbeat: the NVML call it is inside, since when, and how long that
/// call may take by itself. Written by the watcher around each call, read by the health
/// checks ([`super::SamplerBoard::event_watcher`]).
#[derive(Debug, Default)]
pub struct Heartbeat {
    state: Mutex<BeatState>,
}

#[derive(Debug, Default)]
struct BeatState {
    busy: Option<(&'static str, Instant, Duration)>,
    ended: bool,
}

impl Heartbeat {
    fn lock(&self) -> std::sync::MutexGuard<'_, BeatState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The call the watcher is inside now, if any.
    pub fn busy(&self) -> Option<WatcherCall> {
        self.lock().busy.map(|(call, since, allowed)| WatcherCall {
            call,
            busy_for: since.elapsed(),
            allowed,
        })
    }

    /// Whether the watcher has returned (stopped, or nothing could be watched).
    pub fn ended(&self) -> bool {
        self.lock().ended
    }

    /// Runs `f`, one NVML call allowed to take `allowed` by itself, recorded as busy.
    fn around<T>(&self, call: &'static str, allowed: Duration, f: impl FnOnce() -> T) -> T {
        self.lock().busy = Some((call, Instant::now(), allowed));
        let out = f();
        self.lock().busy = None;
        out
    }

    pub(crate) fn end(&self) {
        let mut s = self.lock();
        s.busy = None;
        s.ended = true;
    }
}

/// How the sampler asks the watcher to stop: dropping (or sending on) the sender ends it at
/// its next wake-up, which a stop request itself does not cause (NVML waits cannot be
/// interrupted).
pub(crate) struct StopSignal(pub mpsc::Receiver<()>);

impl StopSignal {
    fn requested(&self) -> bool {
        !matches!(self.0.try_recv(), Err(TryRecvError::Empty))
    }

    /// Sleeps up to `d`; true when stopping was requested meanwhile (it wakes at once then).
    fn sleep(&self, d: Duration) -> bool {
        !matches!(self.0.recv_timeout(d), Err(RecvTimeoutError::Timeout))
    }
}

/// What the watcher needs besides NVML.
pub(crate) struct Context<'a> {
    /// Stop request.
    pub stop: &'a StopSignal,
    /// Where events go (the hub).
    pub publish: &'a dyn Fn(DeviceEvent),
    /// Its heartbeat.
    pub beat: &'a Heartbeat,
    /// Where the errors NVML answers are counted, by call and code.
    pub count_error: &'a dyn Fn(&'static str, &NvmlError),
    /// The bound of one wait: [`Timing::event_wait`](super::cadence::Timing::event_wait)
    /// (one sample interval, at most [`EVENT_WAIT_MAX`](super::cadence::EVENT_WAIT_MAX)).
    pub wait: Duration,
    /// Whether a newer watcher (of a later NVML session) has started.
    pub superseded: &'a dyn Fn() -> bool,
}

enum Registration {
    GiveUp,
    Retry,
}

fn register<'n>(
    nvml: &'n Nvml,
    set: &EventSet<'n>,
    t: &Target,
    first_try: bool,
    cx: &Context<'_>,
) -> Result<Device<'n>, Registration> {
    let uuid = t.info.uuid.as_str();
    let failed = |call: &'static str, e: &NvmlError| {
        (cx.count_error)(call, e);
        failed(uuid, call, e, first_try)
    };
    let device = cx
        .beat
        .around("nvmlDeviceGetHandleByUUID", Duration::ZERO, || {
            nvml.device_by_uuid(uuid)
        })
        .map_err(|e| failed("nvmlDeviceGetHandleByUUID", &e))?;
    let supported = match cx
        .beat
        .around("nvmlDeviceGetSupportedEventTypes", Duration::ZERO, || {
            device.supported_event_types()
        }) {
        Ok(s) => s.bits(),
        Err(e) => return Err(failed("nvmlDeviceGetSupportedEventTypes", &e)),
    };
    let types = supported & WATCHED_EVENTS;
    if types == 0 {
        tracing::info!(
            uuid,
            supported,
            "this GPU reports no XID or ECC events; they are not watched"
        );
        return Err(Registration::GiveUp);
    }
    match cx
        .beat
        .around("nvmlDeviceRegisterEvents", Duration::ZERO, || {
            raw::register_events(nvml, &device, types, set)
        }) {
        Ok(()) => {
            tracing::info!(uuid, types, "watching XID and ECC events");
            Ok(device)
        }
        Err(e) => Err(failed("nvmlDeviceRegisterEvents", &e)),
    }
}

fn failed(uuid: &str, call: &str, e: &NvmlError, first_try: bool) -> Registration {
    match classify(e) {
        ErrorClass::Unsupported => {
            tracing::info!(uuid, call, error = %e, "XID and ECC events cannot be watched on this GPU");
            Registration::GiveUp
        }
        ErrorClass::Lost | ErrorClass::Transient => {
            if first_try {
                tracing::warn!(uuid, call, error = %e, "cannot watch XID and ECC events yet; retrying with backoff");
            } else {
                tracing::debug!(uuid, call, error = %e, "event registration failed again");
            }
            Registration::Retry
        }
    }
}

/// The watcher loop; returns when the stop is requested (at its next wake-up: within one
/// wait, unless a driver call hangs) or when nothing can ever be watched in this session.
pub(crate) fn run(nvml: &Nvml, targets: &[Target], cx: &Context<'_>) {
    if targets.is_empty() {
        return;
    }
    let wait_ms = u32::try_from(cx.wait.as_millis())
        .unwrap_or(u32::MAX)
        .max(1);
    let mut set: Option<EventSet<'_>> = None;
    let mut pending: Vec<usize> = (0..targets.len()).collect();
    let mut registered: Vec<(usize, Device<'_>)> = Vec::new();
    let mut next_try = Instant::now();
    let mut backoff = Duration::from_secs(1);
    let mut first_try = true;
    let mut wait_errors = LogLimiter::new(crate::logging::LOG_PERIOD);
    // Version of nvmlEventSetWait in use (0 = _v2, 1 = v1); see nvml_error::call_versioned.
    let mut wait_version = 0;
    while !cx.stop.requested() {
        if !pending.is_empty() && Instant::now() >= next_try {
            if set.is_none() {
                match cx.beat.around("nvmlEventSetCreate", Duration::ZERO, || {
                    nvml.create_event_set()
                }) {
                    Ok(s) => set = Some(s),
                    Err(e) => {
                        (cx.count_error)("nvmlEventSetCreate", &e);
                        if first_try {
                            tracing::warn!(error = %e, "nvmlEventSetCreate failed; XID and ECC events are not watched yet; retrying with backoff")
                        } else {
                            tracing::debug!(error = %e, "nvmlEventSetCreate failed again")
                        }
                    }
                }
            }
            if let Some(s) = &set {
                pending.retain(|&i| match register(nvml, s, &targets[i], first_try, cx) {
                    Ok(device) => {
                        registered.push((i, device));
                        false
                    }
                    Err(Registration::GiveUp) => false,
                    Err(Registration::Retry) => true,
                });
            }
            first_try = false;
            next_try = Instant::now() + backoff;
            backoff = (backoff * 2).min(REGISTER_RETRY_CAP);
        }
        let Some(s) = set.as_ref().filter(|_| !registered.is_empty()) else {
            if pending.is_empty() {
                return; // nothing can ever be watched in this session
            }
            if cx
                .stop
                .sleep(next_try.saturating_duration_since(Instant::now()))
            {
                return;
            }
            continue;
        };
        let call = Versioned::EventSetWait.versions()[wait_version];
        let waited = cx.beat.around(call, cx.wait, || {
            let (waited, refused) = nvml_error::call_versioned(
                &mut wait_version,
                Versioned::EventSetWait,
                None,
                "",
                |k| {
                    match raw::wait_event(nvml, s, wait_ms, k) {
                        // No event within the wait is an answer: this version works.
                        Err(NvmlError::Timeout) => Ok(None),
                        other => other.map(Some),
                    }
                },
            );
            if let Some(e) = refused {
                (cx.count_error)(call, &e);
            }
            waited.and_then(|ev| ev.ok_or(NvmlError::Timeout))
        });
        let call = Versioned::EventSetWait.versions()[wait_version];
        match waited {
            Ok(ev) if cx.stop.requested() => {
                // The session ended while this wait ran (a stuck one, typically): what is
                // queued is handed over, or dropped if a newer watcher may have it too.
                drain(nvml, s, wait_version, Some(ev), targets, &registered, cx);
                return;
            }
            Ok(ev) => deliver(ev, targets, &registered, cx.publish),
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                (cx.count_error)(call, &e);
                if let Some(suppressed) = wait_errors.admit(e.to_string(), Instant::now()) {
                    tracing::warn!(
                        error = %e,
                        call,
                        not_logged_since_last = suppressed,
                        "waiting for events failed; waiting again after one sample interval (said at most once a minute per error)"
                    );
                }
                if cx.stop.sleep(cx.wait) {
                    return;
                }
            }
        }
    }
}

/// Publishes one event, on the device [`attribute`] names (none: dropped).
fn deliver(
    ev: raw::RawEvent,
    targets: &[Target],
    registered: &[(usize, Device<'_>)],
    publish: &dyn Fn(DeviceEvent),
) {
    let Some(kind) = kind(ev.event_type, ev.data) else {
        return;
    };
    // SAFETY: comparing handles only; nothing is dereferenced.
    let target = registered
        .iter()
        .find(|(_, d)| unsafe { d.handle() } == ev.device)
        .map(|(i, _)| &targets[*i]);
    let Some(target) = target else {
        tracing::debug!(%kind, "event from a GPU that is not watched");
        return;
    };
    let Some(device) = attribute(
        &target.info,
        target.reported,
        &target.mig_devices,
        ev.gpu_instance_id,
        ev.compute_instance_id,
    ) else {
        tracing::debug!(
            %kind,
            gpu = %target.info.uuid,
            gpu_instance_id = ev.gpu_instance_id,
            compute_instance_id = ev.compute_instance_id,
            "event of a MIG device this agent does not report (another tenant's); not reported"
        );
        return;
    };
    publish(DeviceEvent {
        time: SystemTime::now(),
        device,
        kind,
    });
}

/// Most queued events a stopping watcher takes from its set.
const MAX_DRAINED: usize = 1024;

/// A watcher whose session has ended takes what its set still holds (waits with a zero
/// timeout, `first` included). If no newer watcher has registered since (the agent is
/// stopping, or the next session has not started one yet), the events are published:
/// they happened while it was stuck and nobody else saw them. If one has, they are dropped
/// and counted in one line: NVML events carry no time, so those that reached both sets
/// cannot be told from those only this one holds, and counting an XID twice would be false.
fn drain(
    nvml: &Nvml,
    set: &EventSet<'_>,
    wait_version: usize,
    first: Option<raw::RawEvent>,
    targets: &[Target],
    registered: &[(usize, Device<'_>)],
    cx: &Context<'_>,
) {
    let superseded = (cx.superseded)();
    let mut dropped = 0usize;
    let mut next = first;
    for _ in 0..MAX_DRAINED {
        let ev = match next.take() {
            Some(ev) => ev,
            None => match raw::wait_event(nvml, set, 0, wait_version) {
                Ok(ev) => ev,
                Err(_) => break,
            },
        };
        if superseded {
            dropped += usize::from(kind(ev.event_type, ev.data).is_some());
        } else {
            deliver(ev, targets, registered, cx.publish);
        }
    }
    if dropped > 0 {
        tracing::warn!(
            dropped,
            "the event watcher of an ended NVML session returned with XID/ECC events still queued; they are not reported, because the new session's watcher may have reported the same ones (NVML events carry no time)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_from_type_bits() {
        assert_eq!(kind(0x8, 79), Some(DeviceEventKind::Xid(79)));
        assert_eq!(kind(0x2, 0), Some(DeviceEventKind::EccDoubleBit));
        assert_eq!(kind(0x1, 0), Some(DeviceEventKind::EccSingleBit));
        assert_eq!(kind(0x4, 0), None, "pstate changes are not watched");
    }

    #[test]
    fn events_go_to_the_mig_device_of_their_gpu_instance() {
        use crate::sampling::snapshot::MigPlacement;
        let gpu = Arc::new(DeviceInfo {
            uuid: "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5".into(),
            ..DeviceInfo::default()
        });
        let mig = |uuid: &str, gi, ci| {
            Arc::new(DeviceInfo {
                uuid: uuid.into(),
                mig: Some(MigPlacement {
                    parent_uuid: gpu.uuid.clone(),
                    mig_index: 0,
                    gpu_instance_id: Some(gi),
                    compute_instance_id: Some(ci),
                }),
                ..DeviceInfo::default()
            })
        };
        let migs = vec![mig("MIG-a", 1, 0), mig("MIG-b", 9, 0), mig("MIG-c", 9, 1)];
        let to =
            |reported, gi, ci| attribute(&gpu, reported, &migs, gi, ci).map(|d| d.uuid.clone());
        for reported in [true, false] {
            assert_eq!(to(reported, Some(1), Some(0)).unwrap(), "MIG-a");
            assert_eq!(to(reported, Some(1), None).unwrap(), "MIG-a");
            assert_eq!(to(reported, Some(9), Some(1)).unwrap(), "MIG-c");
            assert_eq!(
                to(reported, Some(9), None).unwrap(),
                gpu.uuid,
                "ours, but which compute instance is not said: the GPU"
            );
            assert_eq!(to(reported, None, None).unwrap(), gpu.uuid, "the whole GPU");
        }
        // A GPU instance none of the watched MIG devices has: on the GPU when the GPU is
        // reported, else another tenant's, not reported at all.
        assert_eq!(to(true, Some(5), Some(0)).unwrap(), gpu.uuid);
        assert_eq!(to(false, Some(5), Some(0)), None, "another tenant's XID");
        assert_eq!(
            to(false, Some(9), Some(7)),
            None,
            "another tenant's compute instance"
        );
    }
}
