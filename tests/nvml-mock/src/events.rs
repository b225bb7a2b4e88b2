//! Event sets: the scenario's `events` are delivered by nvmlEventSetWait_v2 to every set that
//! registered the event's device and type before the event's time.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::rc::*;
use crate::runtime::{self, dev_call, guard, initialized, lock, out};
use crate::types::*;

/// Default supported event types: what the H200 answered (SBE, DBE, PState, XID, Clock,
/// PowerSource, MigConfigChange).
pub const DEFAULT_SUPPORTED: u64 = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x80 | 0x100;

#[derive(Default)]
struct Set {
    /// (physical device index, event type bits, scenario time of registration)
    regs: Vec<(usize, u64, f64)>,
    /// indexes into scenario.events already delivered to this set
    delivered: Vec<bool>,
}

static SETS: Mutex<Option<HashMap<usize, Set>>> = Mutex::new(None);

fn with_sets<R>(f: impl FnOnce(&mut HashMap<usize, Set>) -> R) -> R {
    let mut g = lock(&SETS);
    f(g.get_or_insert_with(HashMap::new))
}

fn supported(dev: &crate::scenario::Dev) -> u64 {
    dev.spec.supported_event_types.unwrap_or(DEFAULT_SUPPORTED)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(device: Device, types: *mut u64) -> u32 {
    dev_call("nvmlDeviceGetSupportedEventTypes", device, |c| {
        out(types, supported(c.dev))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut *mut c_void) -> u32 {
    guard("nvmlEventSetCreate", || {
        initialized()?;
        if set.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let p = Box::into_raw(Box::new(0u64)) as usize;
        with_sets(|m| m.insert(p, Set::default()));
        out(set, p as *mut c_void)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: Device,
    event_types: u64,
    set: *mut c_void,
) -> u32 {
    dev_call("nvmlDeviceRegisterEvents", device, |c| {
        if c.dev.is_mig() {
            return Err(NOT_SUPPORTED);
        }
        if event_types & !supported(c.dev) != 0 {
            return Err(NOT_SUPPORTED);
        }
        let idx = c.dev.phys_index;
        let e = c.e;
        with_sets(|m| match m.get_mut(&(set as usize)) {
            Some(s) => {
                s.regs.push((idx, event_types, e));
                Ok(())
            }
            None => Err(INVALID_ARGUMENT),
        })
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: *mut c_void,
    data: *mut EventData,
    timeout_ms: u32,
) -> u32 {
    wait(
        "nvmlEventSetWait_v2",
        set,
        data.is_null(),
        timeout_ms,
        |ev| data.write(ev),
    )
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetWait(
    set: *mut c_void,
    data: *mut EventDataV1,
    timeout_ms: u32,
) -> u32 {
    wait("nvmlEventSetWait", set, data.is_null(), timeout_ms, |ev| {
        // The v1 structure: no instance ids.
        data.write(EventDataV1 {
            device: ev.device,
            eventType: ev.eventType,
            eventData: ev.eventData,
        })
    })
}

/// Both versions of the wait; `write` stores the event in the caller's structure.
unsafe fn wait(
    name: &'static str,
    set: *mut c_void,
    data_is_null: bool,
    timeout_ms: u32,
    write: impl FnOnce(EventData),
) -> u32 {
    let mut write = Some(write);
    guard(name, || {
        let l = initialized()?;
        if data_is_null {
            return Err(INVALID_ARGUMENT);
        }
        let key = set as usize;
        if !with_sets(|m| m.contains_key(&key)) {
            return Err(INVALID_ARGUMENT);
        }
        runtime::apply_faults(l, name, None, runtime::elapsed(l))?;
        let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        let events = &l.scenario.events;
        loop {
            let e = runtime::elapsed(l);
            let found = with_sets(|m| {
                let s = m.get_mut(&key)?;
                if s.delivered.len() < events.len() {
                    s.delivered.resize(events.len(), false);
                }
                // The earliest due, undelivered, registered event; and the time of the next
                // one that is not due yet (to sleep until it, not poll).
                let mut best: Option<usize> = None;
                let mut next_t: Option<f64> = None;
                for (i, ev) in events.iter().enumerate() {
                    if s.delivered[i] {
                        continue;
                    }
                    let bits = ev.kind.bits().unwrap_or(0);
                    let registered = s
                        .regs
                        .iter()
                        .any(|(d, ty, at)| *d == ev.device && ty & bits != 0 && ev.t >= *at);
                    if !registered {
                        continue;
                    }
                    if ev.t > e {
                        next_t = Some(next_t.map_or(ev.t, |n: f64| n.min(ev.t)));
                    } else if best.is_none_or(|b| events[b].t > ev.t) {
                        best = Some(i);
                    }
                }
                if let Some(i) = best {
                    s.delivered[i] = true;
                }
                Some((best, next_t))
            });
            let Some((found, next_t)) = found else {
                // the set was freed while we waited
                return Err(INVALID_ARGUMENT);
            };
            if let Some(i) = found {
                let ev = &events[i];
                let bits = ev.kind.bits().unwrap_or(0);
                if let Some(write) = write.take() {
                    write(EventData {
                        // like NVML: the physical device; a MIG event carries the instance ids
                        device: l.handle(ev.device),
                        eventType: bits,
                        eventData: ev.data,
                        gpuInstanceId: ev.gpu_instance_id.unwrap_or(NO_VALUE),
                        computeInstanceId: ev.compute_instance_id.unwrap_or(NO_VALUE),
                    });
                }
                return Ok(());
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(TIMEOUT);
            }
            // Sleep until the next registered event is due or the timeout ends, as the real
            // call blocks in the driver: no polling, so a caller's wake-ups are its own.
            let until_next = next_t
                .filter(|_| l.time_scale > 0.0)
                .map(|t| Duration::from_secs_f64(((t - e) / l.time_scale).max(0.0)));
            let nap = until_next.map_or(deadline - now, |d| d.min(deadline - now));
            std::thread::sleep(nap.max(Duration::from_micros(100)));
            if initialized().is_err() {
                return Err(UNINITIALIZED);
            }
        }
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlEventSetFree(set: *mut c_void) -> u32 {
    guard("nvmlEventSetFree", || {
        initialized()?;
        let key = set as usize;
        if with_sets(|m| m.remove(&key)).is_none() {
            return Err(INVALID_ARGUMENT);
        }
        drop(Box::from_raw(key as *mut u64));
        Ok(())
    })
}
