//! Global state of the mock: loaded scenario, init reference count, clock, call counting,
//! fault injection and the call wrapper every exported function goes through.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::rc::*;
use crate::scenario::{self, Dev, Row};

pub type Ret = Result<(), u32>;

pub struct Loaded {
    pub scenario: scenario::Scenario,
    pub all: Vec<Dev>,
    pub physical_count: usize,
    /// One leaked allocation per entry of `all`; its address is the nvmlDevice_t.
    handles: Vec<usize>,
    pub time_scale: f64,
    /// NVML_MOCK_NO_LATENCY set: ignore every `latency_us`.
    pub no_latency: bool,
}

impl Loaded {
    pub fn handle(&self, id: usize) -> *mut c_void {
        self.handles[id] as *mut c_void
    }

    pub fn resolve(&self, h: *mut c_void) -> Result<usize, u32> {
        if h.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        self.handles
            .iter()
            .position(|&p| p == h as usize)
            .ok_or(INVALID_ARGUMENT)
    }
}

struct Clock {
    start: Instant,
    start_wall_us: u64,
}

static CLOCK: OnceLock<Clock> = OnceLock::new();
static LOADED: OnceLock<Loaded> = OnceLock::new();
static LOAD_LOCK: Mutex<()> = Mutex::new(());
static REFCOUNT: Mutex<u32> = Mutex::new(0);

struct Counts {
    map: BTreeMap<&'static str, u64>,
    last_write: Option<Instant>,
}

static COUNTS: Mutex<Counts> = Mutex::new(Counts {
    map: BTreeMap::new(),
    last_write: None,
});
static CALL_LOG: OnceLock<Option<String>> = OnceLock::new();

/// Lock a mutex, ignoring poisoning (a panic inside a call must not wedge the mock).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn clock() -> &'static Clock {
    CLOCK.get_or_init(|| Clock {
        start: Instant::now(),
        start_wall_us: now_wall_us(),
    })
}

pub fn now_wall_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Scenario time: real seconds since the first nvmlInit call, times the time scale.
pub fn elapsed(l: &Loaded) -> f64 {
    clock().start.elapsed().as_secs_f64() * l.time_scale
}

/// Wall-clock microseconds (Unix) at which scenario time `e` happened (or will happen).
pub fn wall_us_at(l: &Loaded, e: f64) -> u64 {
    let c = clock();
    if l.time_scale <= 0.0 {
        return c.start_wall_us;
    }
    c.start_wall_us + ((e / l.time_scale) * 1e6) as u64
}

fn call_log_path() -> Option<&'static str> {
    CALL_LOG
        .get_or_init(|| {
            std::env::var("NVML_MOCK_CALL_LOG")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .as_deref()
}

fn write_call_log(c: &mut Counts) {
    let Some(path) = call_log_path() else {
        return;
    };
    c.last_write = Some(Instant::now());
    let json = serde_json::to_string_pretty(&c.map).unwrap_or_else(|_| "{}".into());
    let tmp = format!("{path}.tmp{}", std::process::id());
    if std::fs::write(&tmp, json + "\n").is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

/// Seconds between the periodic writes of the call log (`NVML_MOCK_CALL_LOG_PERIOD_S`,
/// default 1): a benchmark sets it high so that only `nvmlShutdown` writes.
fn call_log_period() -> Duration {
    static PERIOD: OnceLock<Duration> = OnceLock::new();
    *PERIOD.get_or_init(|| {
        std::env::var("NVML_MOCK_CALL_LOG_PERIOD_S")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map_or(Duration::from_secs(1), |s| {
                Duration::try_from_secs_f64(s).unwrap_or(Duration::MAX)
            })
    })
}

pub fn count_call(sym: &'static str) {
    let mut c = lock(&COUNTS);
    *c.map.entry(sym).or_insert(0) += 1;
    let due = match c.last_write {
        None => true,
        Some(t) => t.elapsed() >= call_log_period(),
    };
    if due {
        write_call_log(&mut c);
    }
}

pub fn flush_call_log() {
    let mut c = lock(&COUNTS);
    write_call_log(&mut c);
}

/// Run `f`, turning a panic into NVML_ERROR_UNKNOWN (a panic must not cross the C ABI).
pub fn guard(sym: &'static str, f: impl FnOnce() -> Ret) -> u32 {
    count_call(sym);
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => {
            eprintln!("nvml-mock: panic inside {sym}");
            UNKNOWN
        }
    }
}

fn load() -> Result<&'static Loaded, String> {
    if let Some(l) = LOADED.get() {
        return Ok(l);
    }
    let _g = lock(&LOAD_LOCK);
    if let Some(l) = LOADED.get() {
        return Ok(l);
    }
    let path = std::env::var("NVML_MOCK_SCENARIO")
        .map_err(|_| "NVML_MOCK_SCENARIO is not set".to_string())?;
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read the scenario file NVML_MOCK_SCENARIO={path}: {e}"))?;
    let parsed = scenario::parse(&text)
        .map_err(|e| format!("invalid scenario NVML_MOCK_SCENARIO={path}: {e}"))?;
    let time_scale = match std::env::var("NVML_MOCK_TIME_SCALE") {
        Ok(s) if !s.trim().is_empty() => {
            let v: f64 = s
                .trim()
                .parse()
                .map_err(|_| format!("NVML_MOCK_TIME_SCALE={s:?} is not a number"))?;
            if !v.is_finite() || v < 0.0 {
                return Err(format!("NVML_MOCK_TIME_SCALE={s:?} must be >= 0"));
            }
            v
        }
        _ => parsed.scenario.time_scale.unwrap_or(1.0),
    };
    let handles = (0..parsed.all.len())
        .map(|i| Box::into_raw(Box::new(i as u64)) as usize)
        .collect();
    let loaded = Loaded {
        scenario: parsed.scenario,
        all: parsed.all,
        physical_count: parsed.physical_count,
        handles,
        time_scale,
        no_latency: std::env::var_os("NVML_MOCK_NO_LATENCY").is_some_and(|v| !v.is_empty()),
    };
    let _ = LOADED.set(loaded);
    Ok(LOADED.get().expect("just set"))
}

pub fn init(sym: &'static str) -> u32 {
    guard(sym, || {
        let _ = clock();
        let l = match load() {
            Ok(l) => l,
            Err(msg) => {
                eprintln!("nvml-mock: {msg}");
                return Err(UNKNOWN);
            }
        };
        if let Some(code) = l.scenario.init_error {
            if code != SUCCESS {
                return Err(code);
            }
        }
        apply_faults(l, sym, None, elapsed(l))?;
        *lock(&REFCOUNT) += 1;
        Ok(())
    })
}

pub fn shutdown(sym: &'static str) -> u32 {
    let r = guard(sym, || {
        let mut n = lock(&REFCOUNT);
        if *n == 0 {
            return Err(UNINITIALIZED);
        }
        *n -= 1;
        Ok(())
    });
    flush_call_log();
    r
}

/// The loaded scenario, if NVML is initialised.
pub fn initialized() -> Result<&'static Loaded, u32> {
    if *lock(&REFCOUNT) == 0 {
        return Err(UNINITIALIZED);
    }
    LOADED.get().ok_or(UNINITIALIZED)
}

/// Faults active at `e` for this call; the first one with a code decides. `device` is the
/// physical index the call is about (None for system calls: only device-less faults apply).
pub fn apply_faults(l: &Loaded, sym: &str, device: Option<usize>, e: f64) -> Ret {
    for f in &l.scenario.faults {
        if !f.matches_call(sym) || !f.active_at(e) {
            continue;
        }
        if let Some(d) = f.device {
            if device != Some(d) {
                continue;
            }
        }
        if let Some(b) = f.block_s {
            std::thread::sleep(Duration::from_secs_f64(b));
        }
        if let Some(code) = f.code {
            return Err(code);
        }
    }
    Ok(())
}

/// Everything a device call needs.
pub struct Ctx<'a> {
    pub l: &'a Loaded,
    pub id: usize,
    pub dev: &'a Dev,
    pub e: f64,
}

impl<'a> Ctx<'a> {
    pub fn row(&self) -> Result<&'a Row, u32> {
        self.dev
            .timeline
            .at(self.e)
            .map(|(r, _)| r)
            .ok_or(NOT_SUPPORTED)
    }

    pub fn counter(&self, c: scenario::Counter) -> Result<u64, u32> {
        if self.dev.spec.linear_counters {
            return self
                .dev
                .timeline
                .counter_linear(c, self.e)
                .ok_or(NOT_SUPPORTED);
        }
        let (row, wraps) = self.dev.timeline.at(self.e).ok_or(NOT_SUPPORTED)?;
        self.dev
            .timeline
            .counter(c, row, wraps)
            .ok_or(NOT_SUPPORTED)
    }

    /// Per-device constant answers: `errors`, then `unsupported`.
    pub fn static_error(&self, name: &str) -> Ret {
        if let Some(code) = self.dev.spec.errors.get(name) {
            return Err(*code);
        }
        if self.dev.spec.unsupported.iter().any(|s| s == name) {
            return Err(NOT_SUPPORTED);
        }
        Ok(())
    }
}

fn latency(l: &Loaded, dev: &Dev, sym: &str) {
    if l.no_latency {
        return;
    }
    if let Some(us) = dev.spec.latency_us.get(sym) {
        if *us > 0 {
            std::thread::sleep(Duration::from_micros(*us));
        }
    }
}

/// Common path of every call that takes an nvmlDevice_t.
pub fn dev_call(sym: &'static str, h: *mut c_void, f: impl FnOnce(&Ctx) -> Ret) -> u32 {
    guard(sym, || {
        let l = initialized()?;
        let id = l.resolve(h)?;
        let dev = &l.all[id];
        let e = elapsed(l);
        apply_faults(l, sym, Some(dev.phys_index), e)?;
        let ctx = Ctx { l, id, dev, e };
        ctx.static_error(sym)?;
        latency(l, dev, sym);
        f(&ctx)
    })
}

/// Common path of calls without a device.
pub fn sys_call(sym: &'static str, f: impl FnOnce(&'static Loaded, f64) -> Ret) -> u32 {
    guard(sym, || {
        let l = initialized()?;
        let e = elapsed(l);
        apply_faults(l, sym, None, e)?;
        f(l, e)
    })
}

/// Apply device faults/errors for a call that found its device itself (by index, UUID...).
pub fn device_found(l: &Loaded, sym: &str, id: usize, e: f64) -> Ret {
    let dev = &l.all[id];
    apply_faults(l, sym, Some(dev.phys_index), e)?;
    let ctx = Ctx { l, id, dev, e };
    ctx.static_error(sym)?;
    latency(l, dev, sym);
    Ok(())
}

/// Write `v` through an out pointer.
///
/// # Safety
/// `p` is null or valid for a write of `T`.
pub unsafe fn out<T>(p: *mut T, v: T) -> Ret {
    if p.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    p.write(v);
    Ok(())
}

/// Copy a string into a caller buffer of `len` bytes, NUL-terminated.
///
/// # Safety
/// `buf` is null or valid for `len` bytes.
pub unsafe fn out_str(buf: *mut std::ffi::c_char, len: u32, s: &str) -> Ret {
    if buf.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let bytes = s.as_bytes();
    if (len as usize) < bytes.len() + 1 {
        return Err(INSUFFICIENT_SIZE);
    }
    std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf as *mut u8, bytes.len());
    *buf.add(bytes.len()) = 0;
    Ok(())
}
