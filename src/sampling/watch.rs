//! The event watcher: the thread `nvml-events`, started by the sampler for each NVML session
//! and sharing its `Nvml` (NVML handles are thread-safe; the watcher touches no GPM buffer).
//!
//! It creates an NVML event set and registers each watched GPU for XID critical errors and
//! single/double-bit ECC errors (`nvmlDeviceRegisterEvents`, masked by
//! `nvmlDeviceGetSupportedEventTypes`). Registration happens on this thread, so it never
//! delays sampling; a GPU whose registration fails with a transient error is retried with
//! backoff (1 s doubling to [`REGISTER_RETRY_CAP`]), said once; one that cannot report events
//! is said once and left alone. It then
//! waits on the set (`nvmlEventSetWait_v2`) in slices of [`WAIT_MS`] so that it notices the
//! stop request, and hands each event to the [`Observer`](super::Observer).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet, Nvml};

use super::raw::{self, Versioned};
use super::read::{self, verdict, Verdict};
use super::snapshot::DeviceInfo;
use super::Observer;

/// `nvmlEventTypeSingleBitEccError`.
pub const EVENT_ECC_SINGLE_BIT: u64 = 0x1;
/// `nvmlEventTypeDoubleBitEccError`.
pub const EVENT_ECC_DOUBLE_BIT: u64 = 0x2;
/// `nvmlEventTypeXidCriticalError`.
pub const EVENT_XID: u64 = 0x8;
/// The event types watched.
pub const WATCHED_EVENTS: u64 = EVENT_ECC_SINGLE_BIT | EVENT_ECC_DOUBLE_BIT | EVENT_XID;

/// Longest single wait, milliseconds: the watcher's reaction time to a stop request.
pub const WAIT_MS: u32 = 250;
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

/// A physical GPU to watch, with the MIG devices events may be attributed to.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The GPU (its handle is looked up by UUID on the watcher thread).
    pub info: Arc<DeviceInfo>,
    /// Its watched MIG devices.
    pub mig_devices: Vec<Arc<DeviceInfo>>,
}

/// The device an event with these instance ids concerns: the one watched MIG device of
/// `gpu` with that GPU instance (and compute instance, when several share it), else `gpu`.
pub(crate) fn attribute(
    gpu: &Arc<DeviceInfo>,
    mig_devices: &[Arc<DeviceInfo>],
    gpu_instance: Option<u32>,
    compute_instance: Option<u32>,
) -> Arc<DeviceInfo> {
    let Some(gi) = gpu_instance else {
        return gpu.clone();
    };
    let same_gi: Vec<_> = mig_devices
        .iter()
        .filter(|d| d.mig.as_ref().and_then(|m| m.gpu_instance_id) == Some(gi))
        .collect();
    let hit = match (same_gi.len(), compute_instance) {
        (1, _) => Some(same_gi[0]),
        (_, Some(ci)) => same_gi
            .into_iter()
            .find(|d| d.mig.as_ref().and_then(|m| m.compute_instance_id) == Some(ci)),
        _ => None,
    };
    hit.unwrap_or(gpu).clone()
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

enum Registration {
    GiveUp,
    Retry,
}

fn register<'n>(
    nvml: &'n Nvml,
    set: &EventSet<'n>,
    t: &Target,
    first_try: bool,
) -> Result<Device<'n>, Registration> {
    let uuid = t.info.uuid.as_str();
    let failed = |call: &str, e: &NvmlError| failed(uuid, call, e, first_try);
    let device = nvml
        .device_by_uuid(uuid)
        .map_err(|e| failed("nvmlDeviceGetHandleByUUID", &e))?;
    let supported = match device.supported_event_types() {
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
    match raw::register_events(nvml, &device, types, set) {
        Ok(()) => {
            tracing::info!(uuid, types, "watching XID and ECC events");
            Ok(device)
        }
        Err(e) => Err(failed("nvmlDeviceRegisterEvents", &e)),
    }
}

fn failed(uuid: &str, call: &str, e: &NvmlError, first_try: bool) -> Registration {
    match verdict(e) {
        Verdict::Unsupported => {
            tracing::info!(uuid, call, error = %e, "XID and ECC events cannot be watched on this GPU");
            Registration::GiveUp
        }
        Verdict::Lost | Verdict::Transient => {
            if first_try {
                tracing::warn!(uuid, call, error = %e, "cannot watch XID and ECC events yet; retrying with backoff");
            } else {
                tracing::debug!(uuid, call, error = %e, "event registration failed again");
            }
            Registration::Retry
        }
    }
}

/// Sleeps up to `d` in short slices; returns early (true) when `stop` is set.
fn pause(stop: &AtomicBool, d: Duration) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if stop.load(Ordering::Relaxed) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(u64::from(WAIT_MS)).min(until - Instant::now()));
    }
    stop.load(Ordering::Relaxed)
}

/// The watcher loop; returns when `stop` is set (within [`WAIT_MS`], unless a driver call
/// hangs).
pub(crate) fn run(nvml: &Nvml, targets: &[Target], stop: &AtomicBool, observer: &dyn Observer) {
    if targets.is_empty() {
        return;
    }
    let mut set: Option<EventSet<'_>> = None;
    let mut pending: Vec<usize> = (0..targets.len()).collect();
    let mut registered: Vec<(usize, Device<'_>)> = Vec::new();
    let mut next_try = Instant::now();
    let mut backoff = Duration::from_secs(1);
    let mut first_try = true;
    let mut last_error: Option<String> = None;
    // Version of nvmlEventSetWait in use (0 = _v2); see read::call_versioned.
    let mut wait_version = 0;
    while !stop.load(Ordering::Relaxed) {
        if !pending.is_empty() && Instant::now() >= next_try {
            if set.is_none() {
                match nvml.create_event_set() {
                    Ok(s) => set = Some(s),
                    Err(e) if first_try => {
                        tracing::warn!(error = %e, "nvmlEventSetCreate failed; XID and ECC events are not watched yet; retrying with backoff")
                    }
                    Err(e) => tracing::debug!(error = %e, "nvmlEventSetCreate failed again"),
                }
            }
            if let Some(s) = &set {
                pending.retain(|&i| match register(nvml, s, &targets[i], first_try) {
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
            if pause(stop, next_try.saturating_duration_since(Instant::now())) {
                return;
            }
            continue;
        };
        let (waited, _refused) =
            read::call_versioned(&mut wait_version, Versioned::EventSetWait, None, "", |k| {
                match raw::wait_event(nvml, s, WAIT_MS, k) {
                    // No event within the wait is an answer: this version works.
                    Err(NvmlError::Timeout) => Ok(None),
                    other => other.map(Some),
                }
            });
        match waited.and_then(|ev| ev.ok_or(NvmlError::Timeout)) {
            Ok(ev) => {
                last_error = None;
                let Some(kind) = kind(ev.event_type, ev.data) else {
                    continue;
                };
                // SAFETY: comparing handles only; nothing is dereferenced.
                let target = registered
                    .iter()
                    .find(|(_, d)| unsafe { d.handle() } == ev.device)
                    .map(|(i, _)| &targets[*i]);
                let Some(target) = target else {
                    tracing::debug!(?kind, "event from a GPU that is not watched");
                    continue;
                };
                observer.device_event(DeviceEvent {
                    time: SystemTime::now(),
                    device: attribute(
                        &target.info,
                        &target.mig_devices,
                        ev.gpu_instance_id,
                        ev.compute_instance_id,
                    ),
                    kind,
                });
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    tracing::warn!(error = %e, call = Versioned::EventSetWait.versions()[wait_version], "waiting for events failed; waiting again");
                    last_error = Some(text);
                }
                if pause(stop, Duration::from_millis(u64::from(WAIT_MS))) {
                    return;
                }
            }
        }
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
        assert_eq!(attribute(&gpu, &migs, Some(1), Some(0)).uuid, "MIG-a");
        assert_eq!(attribute(&gpu, &migs, Some(1), None).uuid, "MIG-a");
        assert_eq!(attribute(&gpu, &migs, Some(9), Some(1)).uuid, "MIG-c");
        assert_eq!(
            attribute(&gpu, &migs, Some(9), None).uuid,
            gpu.uuid,
            "ambiguous: the GPU"
        );
        assert_eq!(
            attribute(&gpu, &migs, Some(5), Some(0)).uuid,
            gpu.uuid,
            "not watched"
        );
        assert_eq!(attribute(&gpu, &migs, None, None).uuid, gpu.uuid);
    }
}
