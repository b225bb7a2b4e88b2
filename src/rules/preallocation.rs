//! Memory as frameworks use it: recognizing a preallocated pool.
//!
//! TensorFlow maps nearly all GPU memory when it starts unless memory growth is on
//! (`TF_FORCE_GPU_ALLOW_GROWTH`, `tf.config.experimental.set_memory_growth`); JAX takes 75 %
//! (`XLA_PYTHON_CLIENT_PREALLOCATE`, `XLA_PYTHON_CLIENT_MEM_FRACTION`); PyTorch's caching
//! allocator keeps what it reserved. NVML sees the pool, not how full it is, so "near full"
//! and "leaking" cannot be judged from outside while the memory is such a pool.
//!
//! [`PoolTracker`] recognizes the pattern per GPU from `nvmlDeviceGetMemoryInfo_v2.used`
//! and the compute process list (`nvmlDeviceGetComputeRunningProcesses_v3`): a process
//! appears (listed now, not at the previous read of the list; the processes of the agent's
//! first list were there before it looked, so they never count) and, at the same sample,
//! the next one, or any sample within `jump_within` of its appearance, the memory used
//! reaches `min_ratio` of total (from below it); from then on the memory is a pool as long
//! as it stays within [`FLAT_MARGIN`] of total of that level. It is used by `memory_preallocated` (the info
//! event), `memory_near_full` (held back while the memory is a pool) and the run report
//! (the pattern each GPU showed).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::id::{Hold, RuleId, RuleSettings};
use crate::sampling::snapshot::ratio_from_percent;
use crate::sampling::snapshot::{DeviceSample, DeviceState};

/// How far (a share of total memory) the memory may move from the level it jumped to and
/// still be the same pool: 1 % (a second process's CUDA context, ~0.5 GiB, fits on cards
/// of 48 GiB and more).
pub const FLAT_MARGIN: f64 = 0.01;

/// What makes a pool: the share of total memory reached, and how soon after the process
/// appeared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PoolParams {
    /// Share of total memory (0..1) the memory must reach, e.g. 0.7.
    pub min_ratio: f64,
    /// How long after the process first appeared the jump may be seen (besides the first
    /// sample after it, whatever the interval).
    pub jump_within: Duration,
    /// How long the memory must stay at the level to count as preallocated (the rule's
    /// DURATION; the run report's pattern).
    pub hold: Duration,
}

/// The pool recognition of `memory_preallocated`'s settings (THRESHOLD percent, reached
/// within DURATION / 6, held for DURATION); the run report uses it too.
pub fn pool_params(s: RuleSettings) -> PoolParams {
    let duration = match s.hold {
        Hold::Duration(d) => d,
        _ => RuleId::MemoryPreallocated.default_duration(),
    };
    PoolParams::from_rule(
        s.threshold
            .unwrap_or_else(|| RuleId::MemoryPreallocated.default_threshold()),
        duration,
    )
}

impl PoolParams {
    /// From the `memory_preallocated` rule's settings: THRESHOLD percent of total, reached
    /// within DURATION / 6 (10 s at the default minute).
    pub fn from_rule(threshold_percent: f64, duration: Duration) -> Self {
        Self {
            min_ratio: ratio_from_percent(threshold_percent),
            jump_within: duration / 6,
            hold: duration,
        }
    }
}

/// A recognized pool on one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pool {
    /// The process that appeared before the jump (host PID, as NVML lists it).
    pub pid: u32,
    /// Memory used at the jump, bytes: the pool's level.
    pub level_bytes: u64,
    /// Total memory, bytes.
    pub total_bytes: u64,
    /// When the process was first listed.
    pub appeared: Instant,
    /// When the memory was first seen at the level (the jump).
    pub since: Instant,
}

impl Pool {
    /// Whether `used` is still the pool: within [`FLAT_MARGIN`] of total of its level.
    fn holds(&self, used: u64) -> bool {
        (used as f64 - self.level_bytes as f64).abs() <= FLAT_MARGIN * self.total_bytes as f64
    }
}

/// Why a pool is no more.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PoolEnd {
    /// The memory rose past the pool's level (plus the margin): it grows after all.
    Grew {
        /// Memory used at that sample, bytes.
        used_bytes: u64,
    },
    /// The memory fell below the level (minus the margin): the pool was released, or its
    /// process ended.
    Released {
        /// Memory used at that sample, bytes.
        used_bytes: u64,
    },
}

/// The state of one GPU's memory at one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryState {
    /// NVML did not give the memory (or the GPU is lost): nothing can be said.
    Unknown,
    /// A preallocated pool.
    Pool(Pool),
    /// Memory as it is: not (or no longer) a pool. `ended` names a pool that ended at
    /// this sample.
    Plain {
        /// A pool that ended at this sample, and why.
        ended: Option<(Pool, PoolEnd)>,
    },
}

#[derive(Debug, Default)]
struct Gpu {
    /// PIDs listed at the previous sample where the list was read.
    pids: Vec<u32>,
    /// Whether a process list was ever read.
    listed: bool,
    /// Memory used at the previous sample, share of total.
    previous_ratio: Option<f64>,
    /// A process appeared (pid, when, samples since) while the memory was below the mark.
    armed: Option<(u32, Instant, u32)>,
    pool: Option<Pool>,
}

/// Per GPU: is the memory a preallocated pool? Feed every sample in order.
#[derive(Debug)]
pub struct PoolTracker {
    params: PoolParams,
    gpus: HashMap<String, Gpu>,
}

impl PoolTracker {
    /// A tracker with these parameters.
    pub fn new(params: PoolParams) -> Self {
        Self {
            params,
            gpus: HashMap::new(),
        }
    }

    /// Forgets GPUs whose UUID `keep` refuses (gone from the snapshots).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.gpus.retain(|uuid, _| keep(uuid));
    }

    /// Feeds one sample of one GPU, taken at `now`; returns the state of its memory.
    pub fn observe(&mut self, d: &DeviceSample, now: Instant) -> MemoryState {
        let g = self.gpus.entry(d.info.uuid.clone()).or_default();
        let (DeviceState::Ok, Some(used), Some(total)) =
            (d.state, d.memory_used_bytes, d.memory_total_bytes)
        else {
            return MemoryState::Unknown;
        };
        if total == 0 {
            return MemoryState::Unknown;
        }
        let ratio = used as f64 / total as f64;
        let previous_ratio = g.previous_ratio.replace(ratio);
        // A process listed now and not at the previous list. The first list's processes
        // were there before the agent looked: when they appeared is not known.
        let mut appeared = None;
        if let Some(ps) = &d.processes {
            let mut pids: Vec<u32> = ps.iter().map(|p| p.pid).collect();
            pids.sort_unstable();
            if g.listed {
                appeared = pids
                    .iter()
                    .copied()
                    .find(|p| g.pids.binary_search(p).is_err());
            }
            g.pids = pids;
            g.listed = true;
        }
        if let Some(pool) = g.pool {
            if pool.holds(used) {
                return MemoryState::Pool(pool);
            }
            g.pool = None;
            g.armed = None;
            let end = if used > pool.level_bytes {
                PoolEnd::Grew { used_bytes: used }
            } else {
                PoolEnd::Released { used_bytes: used }
            };
            return MemoryState::Plain {
                ended: Some((pool, end)),
            };
        }
        if let Some(pid) = appeared {
            // A jump starts below the mark: a process joining memory already that full is
            // not a pool being taken.
            if previous_ratio.is_none_or(|r| r < self.params.min_ratio)
                || ratio < self.params.min_ratio
            {
                g.armed = Some((pid, now, 0));
            }
        }
        if let Some((pid, at, samples)) = g.armed {
            if ratio >= self.params.min_ratio {
                let pool = Pool {
                    pid,
                    level_bytes: used,
                    total_bytes: total,
                    appeared: at,
                    since: now,
                };
                g.pool = Some(pool);
                g.armed = None;
                return MemoryState::Pool(pool);
            }
            let samples = samples + 1;
            // Armed at this sample (0), the next one (1), or while within the time.
            if samples > 1 && now.saturating_duration_since(at) > self.params.jump_within {
                g.armed = None;
            } else {
                g.armed = Some((pid, at, samples));
            }
        }
        MemoryState::Plain { ended: None }
    }
}
