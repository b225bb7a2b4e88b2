//! [`Gate`]: every per-tick NVML call goes through it, so an unsupported reading is asked once
//! and then left alone, each failure is said once (or once a minute while it flaps), every
//! error is counted by call and code, and an impossible value is dropped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use nvml_wrapper::error::NvmlError;

use crate::logging::LogLimiter;
use crate::sampling::bounds::{Bound, Reading};
use crate::sampling::nvml_error::{call_versioned, classify, error_code, ErrorClass};
use crate::sampling::raw::Versioned;
use crate::sampling::snapshot::DeviceInfo;

/// Errors seen since the last [`Gate::take_errors`], by (call, code).
pub(crate) type ErrorCounts = BTreeMap<(&'static str, String), u64>;

/// Remembers which (device, reading) pairs NVML does not answer, and which errors were
/// already logged, so each is said once; counts every error by call and code. Devices are
/// keyed by their slot in the reader's list (a MIG device shares its parent's NVML index).
/// A reading that fails and answers again over and over is said at most once a minute (with
/// the count of failures in between), not twice per flap.
#[derive(Debug)]
pub(crate) struct Gate {
    unsupported: HashSet<(usize, Reading)>,
    /// Readings failing now, and whether this run of failures was logged.
    failing: HashMap<(usize, Reading), bool>,
    lines: LogLimiter<(usize, Reading)>,
    errors: ErrorCounts,
    /// The version in use of each versioned call, by device slot (index into
    /// [`Versioned::versions`]; absent: the newest).
    versions: HashMap<(usize, Versioned), usize>,
    /// Bounds a value broke, by device slot and bound name (said once).
    rejected: HashSet<(usize, &'static str)>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            unsupported: HashSet::new(),
            failing: HashMap::new(),
            lines: LogLimiter::new(crate::logging::LOG_PERIOD),
            errors: ErrorCounts::new(),
            versions: HashMap::new(),
            rejected: HashSet::new(),
        }
    }
}

impl Gate {
    /// Counts one error of `call`.
    pub(crate) fn count(&mut self, call: &'static str, e: &NvmlError) {
        *self.errors.entry((call, error_code(e))).or_insert(0) += 1;
    }

    /// The errors counted since the last call.
    pub(crate) fn take_errors(&mut self) -> ErrorCounts {
        std::mem::take(&mut self.errors)
    }

    /// An impossible `value` (outside `b`) on the device in `slot` was dropped
    /// ([`crate::sampling::bounds`]): one warning per device and reading.
    pub(crate) fn reject(&mut self, slot: usize, info: &DeviceInfo, b: &'static Bound, value: f64) {
        if self.rejected.insert((slot, b.name)) {
            tracing::warn!(
                gpu = info.index,
                uuid = %info.uuid,
                reading = b.name,
                value,
                valid = %format!("{} to {} {}", b.min, b.max, b.unit),
                "NVML answered an impossible value (a sentinel or a corrupt reading): it is left out (absent), as is every impossible value of this reading on this GPU"
            );
        }
    }

    /// `value` if `bound` admits it, else `None` (and [`Gate::reject`]).
    pub(crate) fn admit(
        &mut self,
        slot: usize,
        info: &DeviceInfo,
        bound: &'static Bound,
        value: f64,
    ) -> Option<f64> {
        if bound.admits(value) {
            Some(value)
        } else {
            self.reject(slot, info, bound, value);
            None
        }
    }

    /// Whether `reading` of the device in `slot` is known unsupported.
    pub(crate) fn is_unsupported(&self, slot: usize, reading: Reading) -> bool {
        self.unsupported.contains(&(slot, reading))
    }

    /// Runs `call` for `reading` of the device in `slot` (`info`) unless it is known
    /// unsupported. Returns the value, or `None` (logged once per device, reading and kind of
    /// failure). Sets `*lost` when the device answered that it is lost.
    pub(crate) fn read<T>(
        &mut self,
        slot: usize,
        info: &DeviceInfo,
        reading: Reading,
        lost: &mut bool,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        self.read_named(slot, info, reading, reading.nvml_call(), lost, call)
    }

    /// As [`Gate::read`] for a reading read through a versioned call `v`: `call(k)` makes
    /// version `k` ([`Versioned::versions`]); see [`call_versioned`]. The version chosen is
    /// kept for the device in `slot` for the rest of the NVML session.
    pub(crate) fn read_versioned<T>(
        &mut self,
        slot: usize,
        info: &DeviceInfo,
        reading: Reading,
        v: Versioned,
        lost: &mut bool,
        call: impl FnMut(usize) -> Result<T, NvmlError>,
    ) -> Option<T> {
        if *lost || self.unsupported.contains(&(slot, reading)) {
            return None;
        }
        let start = self.versions.get(&(slot, v)).copied().unwrap_or(0);
        let mut chosen = start;
        let (result, refused) = call_versioned(&mut chosen, v, Some(info.index), &info.uuid, call);
        if let Some(e) = refused {
            self.count(v.versions()[start], &e);
            self.versions.insert((slot, v), chosen);
        }
        self.read_named(slot, info, reading, v.versions()[chosen], lost, || result)
    }

    /// [`Gate::read`], with the C name `call_name` in logs and counts.
    fn read_named<T>(
        &mut self,
        slot: usize,
        info: &DeviceInfo,
        reading: Reading,
        call_name: &'static str,
        lost: &mut bool,
        call: impl FnOnce() -> Result<T, NvmlError>,
    ) -> Option<T> {
        if *lost || self.unsupported.contains(&(slot, reading)) {
            return None;
        }
        let index = info.index;
        let uuid = info.uuid.as_str();
        let key = (slot, reading);
        match call() {
            Ok(v) => {
                if self.failing.remove(&key) == Some(true) {
                    tracing::info!(gpu = index, uuid, call = call_name, "answers again");
                }
                Some(v)
            }
            Err(e) => {
                self.count(call_name, &e);
                match classify(&e) {
                    ErrorClass::Unsupported => {
                        self.unsupported.insert(key);
                        tracing::info!(
                            gpu = index,
                            uuid,
                            call = call_name,
                            error = %e,
                            "not supported on this device; the value will be absent and not asked again"
                        );
                    }
                    ErrorClass::Lost => {
                        *lost = true;
                    }
                    ErrorClass::Transient => {
                        if !self.failing.contains_key(&key) {
                            let said = self.lines.admit(key, Instant::now());
                            if let Some(not_logged) = said {
                                tracing::warn!(
                                    gpu = index,
                                    uuid,
                                    call = call_name,
                                    error = %e,
                                    failed_runs_not_logged = not_logged,
                                    "failed; the value is absent until it answers again (said at most once a minute)"
                                );
                            }
                            self.failing.insert(key, said.is_some());
                        }
                    }
                }
                None
            }
        }
    }
}
