//! What names a rule and what its settings read to: [`RuleId`], [`Hold`] and
//! [`RuleSettings`]. This module depends on nothing else of the crate, so that the rule table
//! ([`super::catalogue::RULES`]) can name each rule's constructor in its family file while
//! the family files name their rule, and the configuration reads the table.

use std::time::Duration;

/// Identity of a rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RuleId {
    /// Memory used at or above a fraction of total.
    MemoryNearFull,
    /// Memory taken as a framework's pool at start and held flat.
    MemoryPreallocated,
    /// Memory used rising without returning, with the projected time until full.
    MemoryLeak,
    /// GPU die temperature at or above a limit.
    TemperatureHigh,
    /// Clocks held back by the software power cap.
    ClocksPowerCapped,
    /// Clocks held back by thermal or hardware slowdown.
    ClocksSlowdown,
    /// GPU mostly idle while a process holds its memory.
    InputStarvation,
    /// Large utilization spread among the pod's GPUs.
    UtilizationImbalance,
    /// GPU busy while its tensor cores are idle (GPM).
    TensorCoresIdle,
    /// DRAM bandwidth near its peak while the SMs are mostly idle (GPM).
    MemoryBound,
    /// NVML reports the GPU lost.
    GpuLost,
    /// An XID error was reported for the GPU.
    Xid,
}

/// How long a condition must hold before its alert fires (and be clear before it resolves).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// At the first sample where it holds.
    Immediate,
    /// Continuously for at least this long: from the first sample where it holds to a later
    /// sample where it still holds (sample times, `Snapshot::taken_instant`).
    Duration(Duration),
    /// On this many consecutive samples.
    Samples(u32),
}

/// One alert rule's settings: `GPU_SIDECAR_RULE_<NAME>_ENABLED`, `_THRESHOLD`, and
/// `_DURATION` or `_SAMPLES` (which ones a rule reads, their units and defaults:
/// [`super::catalogue::RULES`], `docs/events.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleSettings {
    /// `_ENABLED` (`true`/`false`); default true.
    pub enabled: bool,
    /// `_THRESHOLD` in the rule's unit (e.g. percent of total memory); `None` for a rule
    /// without one.
    pub threshold: Option<f64>,
    /// The second threshold (`_UTILIZATION`, `_SM_ACTIVITY`, …) in its unit; `None` for a
    /// rule without one.
    pub second_threshold: Option<f64>,
    /// `_DURATION` or `_SAMPLES`: how long the condition must hold.
    pub hold: Hold,
}
