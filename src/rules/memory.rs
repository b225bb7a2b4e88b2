//! Memory rules: `memory_near_full` (used at or above a fraction of total, unless the
//! memory is a framework's preallocated pool), `memory_preallocated` (that pool, reported
//! once) and `memory_leak` (used rising without coming back, with a robust slope and the
//! projected time until full).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;

use super::id::RuleId;
use super::id::{Hold, RuleSettings};
use super::preallocation::{MemoryState, PoolEnd, PoolParams, PoolTracker};
use super::rule::{Built, Deferred, Rule, Verdict};
use super::{gib, mib};
use crate::catalogue::alert_values;
use crate::sampling::snapshot::{percent_from_ratio, ratio_from_percent};
use crate::sampling::snapshot::{DeviceSample, DeviceState, Snapshot};

fn memory(d: &DeviceSample) -> Option<(u64, u64)> {
    match (d.state, d.memory_used_bytes, d.memory_total_bytes) {
        (DeviceState::Ok, Some(used), Some(total)) if total > 0 => Some((used, total)),
        _ => None,
    }
}

fn memory_values(used: u64, total: u64) -> Vec<KeyValue> {
    vec![
        alert_values::MEMORY_USAGE.kv(used as i64),
        alert_values::MEMORY_LIMIT.kv(total as i64),
    ]
}

/// `memory_near_full`: `used / total >= threshold` (`nvmlDeviceGetMemoryInfo_v2`), not
/// judged while the memory is a preallocated pool ([`PoolTracker`], when `memory_preallocated`
/// is enabled): NVML sees the pool, not how full it is.
pub(crate) struct NearFull {
    percent: f64,
    pools: Option<PoolTracker>,
}

impl NearFull {
    /// [`super::rule::Build`] for `memory_near_full`.
    pub(crate) fn build(s: &RuleSettings, d: &Deferred) -> Built {
        Built::judged(Self::new(s.threshold.unwrap_or_default(), d.pools), s)
    }

    /// `percent`: of total memory, e.g. 95; `pools`: the `memory_preallocated` rule's
    /// recognition, when it is enabled.
    pub(crate) fn new(percent: f64, pools: Option<PoolParams>) -> Self {
        Self {
            percent,
            pools: pools.map(PoolTracker::new),
        }
    }
}

impl Rule for NearFull {
    fn id(&self) -> RuleId {
        RuleId::MemoryNearFull
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        if let Some(p) = &mut self.pools {
            p.retain(|uuid| snapshot.devices.iter().any(|d| d.info.uuid == uuid));
        }
        for d in &snapshot.devices {
            let pooled = self.pools.as_mut().is_some_and(|p| {
                matches!(p.observe(d, snapshot.taken_instant), MemoryState::Pool(_))
            });
            let Some((used, total)) = memory(d).filter(|_| !pooled) else {
                out.push(Verdict::unknown(d));
                continue;
            };
            let ratio = used as f64 / total as f64;
            let mut values = vec![alert_values::MEMORY_UTILIZATION.kv(ratio)];
            values.extend(memory_values(used, total));
            out.push(Verdict::device(
                d,
                Some(percent_from_ratio(ratio) >= self.percent),
                values,
                format!(
                    "memory {:.1}% used ({} of {}; threshold {}%)",
                    percent_from_ratio(ratio),
                    gib(used as f64),
                    gib(total as f64),
                    self.percent
                ),
            ));
        }
    }
}

/// `memory_preallocated`: the memory is a framework's pool ([`PoolTracker`]): a process
/// appeared and the memory jumped to most of the GPU, then stayed flat.
pub(crate) struct Preallocated {
    pools: PoolTracker,
}

impl Preallocated {
    /// [`super::rule::Build`] for `memory_preallocated`: resolves at once.
    pub(crate) fn build(s: &RuleSettings, _: &Deferred) -> Built {
        Built::Judged {
            rule: Box::new(Self::new(super::preallocation::pool_params(*s))),
            clear: Hold::Immediate,
        }
    }

    pub(crate) fn new(params: PoolParams) -> Self {
        Self {
            pools: PoolTracker::new(params),
        }
    }
}

impl Rule for Preallocated {
    fn id(&self) -> RuleId {
        RuleId::MemoryPreallocated
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        self.pools
            .retain(|uuid| snapshot.devices.iter().any(|d| d.info.uuid == uuid));
        for d in &snapshot.devices {
            let state = self.pools.observe(d, snapshot.taken_instant);
            let (MemoryState::Pool(_) | MemoryState::Plain { .. }, Some((used, total))) =
                (state, memory(d))
            else {
                out.push(Verdict::unknown(d));
                continue;
            };
            let ratio = used as f64 / total as f64;
            let mut values = Vec::new();
            let summary = match state {
                MemoryState::Pool(p) => {
                    let jump = p.since.saturating_duration_since(p.appeared);
                    values.push(alert_values::APPEARED_PID.kv(i64::from(p.pid)));
                    values.push(alert_values::MEMORY_JUMP_TIME.kv(jump.as_secs_f64(),
                    ));
                    format!(
                        "memory preallocated: {:.1}% of it ({} of {}) taken within {} of process {} appearing, and held flat: a framework's pool (TensorFlow maps nearly all GPU memory at start unless memory growth is on, JAX 75 %). NVML sees the pool, not how full it is, so near-full and leak judgements are not possible from outside: memory_near_full waits for memory that grows past the pool",
                        percent_from_ratio(ratio),
                        gib(used as f64),
                        gib(total as f64),
                        humantime::format_duration(Duration::from_millis(jump.as_millis() as u64)),
                        p.pid
                    )
                }
                MemoryState::Plain {
                    ended: Some((p, PoolEnd::Grew { .. })),
                } => format!(
                    "memory grew past the pool of process {} ({} used of {}): judged as growing memory again",
                    p.pid,
                    gib(used as f64),
                    gib(total as f64)
                ),
                MemoryState::Plain {
                    ended: Some((p, PoolEnd::Released { .. })),
                } => format!(
                    "the pool of process {} was released ({} used of {})",
                    p.pid,
                    gib(used as f64),
                    gib(total as f64)
                ),
                _ => format!(
                    "memory {:.1}% used, not a preallocated pool",
                    percent_from_ratio(ratio)
                ),
            };
            values.push(alert_values::MEMORY_UTILIZATION.kv(ratio));
            values.extend(memory_values(used, total));
            out.push(Verdict::device(
                d,
                Some(matches!(state, MemoryState::Pool(_))),
                values,
                summary,
            ));
        }
    }
}

/// Theil-Sen estimator: the median of the slopes between every pair of points (robust to
/// outliers and steps, unlike least squares), in value units per second. At most
/// `max_points` points are used, evenly spread over the series (so the cost is bounded
/// whatever the sample rate). `None` with fewer than two distinct times.
pub(crate) fn theil_sen(points: &[(f64, f64)], max_points: usize) -> Option<f64> {
    let n = points.len();
    let pick: Vec<(f64, f64)> = if n > max_points && max_points >= 2 {
        (0..max_points)
            .map(|i| points[i * (n - 1) / (max_points - 1)])
            .collect()
    } else {
        points.to_vec()
    };
    let mut slopes = Vec::with_capacity(pick.len() * pick.len() / 2);
    for (i, a) in pick.iter().enumerate() {
        for b in &pick[i + 1..] {
            let dt = b.0 - a.0;
            if dt > 0.0 {
                slopes.push((b.1 - a.1) / dt);
            }
        }
    }
    if slopes.is_empty() {
        return None;
    }
    let mid = slopes.len() / 2;
    let (_, m, _) = slopes.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *m;
    if slopes.len() % 2 == 1 {
        return Some(upper);
    }
    let lower = slopes[..mid]
        .iter()
        .copied()
        .max_by(f64::total_cmp)
        .unwrap_or(upper);
    Some((lower + upper) / 2.0)
}

/// `memory_leak`: per GPU, the memory used over the last `window` (the rule's DURATION),
/// kept as the means of time buckets `window / (LOCAL_PARTS x LOCAL_BUCKETS)` wide (5 s for
/// the default 10 minutes; at most 121 points per GPU whatever the sample rate). Each time a
/// bucket closes, two Theil-Sen slopes are fitted to the closed buckets, and every sample
/// until the next close is judged on them:
/// - **rising**: the slope of the last `window / LOCAL_PARTS` is at least half the rate
///   `min_growth x total / window` (a plateau, a drop or a sawtooth's fall makes it false);
/// - once the series spans the whole window: the slope over it, times the window, is at
///   least `min_growth x total`.
///
/// The engine fires when that has held for `window` (so a rise shorter than the window
/// never fires), and resolves once it has not held for `window / LOCAL_PARTS`. The cost per
/// sample is flat: an O(1) update, plus the two fits once per bucket (at most 25 and 64
/// points), however long the run and however fast the sampling.
pub(crate) struct Leak {
    min_growth: f64,
    window: Duration,
    local: Duration,
    bucket: Duration,
    series: HashMap<String, Series>,
}

/// Buckets in the "still rising" span (`window / LOCAL_PARTS`).
const LOCAL_BUCKETS: u32 = 24;
/// Points the whole-window slope is fitted to (evenly spread over the buckets): 64 points
/// are 2016 pairs.
const FIT_POINTS: usize = 64;

/// One GPU's bucketed series.
struct Series {
    /// Time of the GPU's first sample: bucket `k` spans `origin + k x width`.
    origin: Instant,
    /// The open bucket: its index, and the sums of its samples' times (s since `origin`),
    /// values and count.
    open: (u64, f64, f64, u32),
    /// Closed buckets' means, oldest first: (s since `origin`, bytes).
    closed: VecDeque<(f64, f64)>,
    /// The slopes fitted at the last close: (last `local`, whole window), bytes per second.
    fit: Option<(f64, f64)>,
}

impl Series {
    fn new(origin: Instant) -> Self {
        Self {
            origin,
            open: (0, 0.0, 0.0, 0),
            closed: VecDeque::new(),
            fit: None,
        }
    }
}

impl Leak {
    /// [`super::rule::Build`] for `memory_leak`: DURATION is its window (the row's default unset);
    /// it resolves once it has not been rising for a fifth of it.
    pub(crate) fn build(s: &RuleSettings, _: &Deferred) -> Built {
        let window = match s.hold {
            Hold::Duration(d) => d,
            _ => RuleId::MemoryLeak.default_duration(),
        };
        Built::Judged {
            rule: Box::new(Self::new(s.threshold.unwrap_or_default(), window)),
            clear: Hold::Duration(window / Self::LOCAL_PARTS),
        }
    }

    /// The "still rising" check looks at the last `window / LOCAL_PARTS`.
    pub(crate) const LOCAL_PARTS: u32 = 5;

    /// `percent`: minimum growth over `window`, percent of total memory.
    pub(crate) fn new(percent: f64, window: Duration) -> Self {
        let local = window / Self::LOCAL_PARTS;
        Self {
            min_growth: ratio_from_percent(percent),
            window,
            local,
            bucket: (local / LOCAL_BUCKETS).max(Duration::from_micros(1)),
            series: HashMap::new(),
        }
    }

    /// Adds one sample to `s`; when it closes a bucket, trims the series to the window and
    /// fits the slopes again.
    fn add(&self, s: &mut Series, now: Instant, used: f64) {
        let t = now.saturating_duration_since(s.origin).as_secs_f64();
        let k = (t / self.bucket.as_secs_f64()) as u64;
        let (open_k, sum_t, sum_v, n) = s.open;
        if n > 0 && k != open_k {
            let n = f64::from(n);
            s.closed.push_back((sum_t / n, sum_v / n));
            // Keep the window, plus the newest point at or before its start (coverage).
            let window = self.window.as_secs_f64();
            while s.closed.len() >= 2 && t - s.closed[1].0 >= window {
                s.closed.pop_front();
            }
            let local = self.local.as_secs_f64();
            let pts: Vec<(f64, f64)> = s.closed.iter().copied().collect();
            let from = pts.partition_point(|(pt, _)| t - pt > local);
            s.fit = Some((
                theil_sen(&pts[from..], FIT_POINTS).unwrap_or(0.0),
                theil_sen(&pts, FIT_POINTS).unwrap_or(0.0),
            ));
            s.open = (k, t, used, 1);
        } else {
            s.open = (k, sum_t + t, sum_v + used, n + 1);
        }
    }
}

impl Rule for Leak {
    fn id(&self) -> RuleId {
        RuleId::MemoryLeak
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        let now = snapshot.taken_instant;
        self.series
            .retain(|uuid, _| snapshot.devices.iter().any(|d| &d.info.uuid == uuid));
        for d in &snapshot.devices {
            let Some((used, total)) = memory(d) else {
                out.push(Verdict::unknown(d));
                continue;
            };
            let mut series = self
                .series
                .remove(&d.info.uuid)
                .unwrap_or_else(|| Series::new(now));
            self.add(&mut series, now, used as f64);
            let verdict = self.judge(d, &series, now, used, total);
            self.series.insert(d.info.uuid.clone(), series);
            out.push(verdict);
        }
    }
}

impl Leak {
    fn judge(&self, d: &DeviceSample, s: &Series, now: Instant, used: u64, total: u64) -> Verdict {
        let span = match s.closed.front() {
            Some((t0, _)) => now
                .saturating_duration_since(s.origin)
                .saturating_sub(Duration::from_secs_f64(*t0)),
            None => Duration::ZERO,
        };
        let Some((local_slope, slope)) = s.fit.filter(|_| span >= self.local) else {
            return Verdict::unknown(d);
        };
        let window_s = self.window.as_secs_f64();
        let min_bytes = self.min_growth * total as f64;
        let rising = local_slope > 0.0 && local_slope * window_s >= min_bytes / 2.0;
        let covered = span >= self.window;
        let growth = slope * window_s;
        let holds = rising && (!covered || growth >= min_bytes);
        let free = total.saturating_sub(used) as f64;
        let mut values = vec![
            alert_values::MEMORY_GROWTH_RATE.kv(slope),
            alert_values::MEMORY_GROWTH.kv(growth.round() as i64),
        ];
        let to_full = (slope > 0.0).then(|| free / slope);
        if let Some(s) = to_full {
            values.push(alert_values::MEMORY_TIME_TO_FULL.kv(s));
        }
        values.extend(memory_values(used, total));
        let over = humantime::format_duration(if covered { self.window } else { span });
        let summary = match to_full {
            Some(s) if rising => format!(
                "memory used {} of {}, rising {}/min over the last {over} ({} gained); full in about {}",
                gib(used as f64),
                gib(total as f64),
                mib(slope * 60.0),
                gib(growth),
                humantime::format_duration(Duration::from_secs(s.round().min(1e12) as u64)),
            ),
            _ => format!(
                "memory used {} of {}, not rising ({}/min over the last {over})",
                gib(used as f64),
                gib(total as f64),
                mib(slope * 60.0),
            ),
        };
        Verdict::device(d, Some(holds), values, summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theil_sen_ignores_outliers_and_handles_steps() {
        // 10 per second, with two wild outliers.
        let mut pts: Vec<(f64, f64)> = (0..21).map(|i| (i as f64, 10.0 * i as f64)).collect();
        pts[5].1 = 1e9;
        pts[15].1 = -1e9;
        let s = theil_sen(&pts, 128).unwrap();
        assert!((s - 10.0).abs() < 1e-9, "{s}");
        // Subsampled: still the slope.
        let many: Vec<(f64, f64)> = (0..5000)
            .map(|i| (i as f64 * 0.1, 3.0 * i as f64 * 0.1))
            .collect();
        assert!((theil_sen(&many, 64).unwrap() - 3.0).abs() < 1e-9);
        // Flat with jitter: ~0.
        let jitter: Vec<(f64, f64)> = (0..40)
            .map(|i| (i as f64, if i % 2 == 0 { 100.0 } else { 164.0 }))
            .collect();
        assert!(theil_sen(&jitter, 128).unwrap().abs() < 1e-9);
        assert_eq!(theil_sen(&[(1.0, 2.0)], 128), None);
        assert_eq!(theil_sen(&[(1.0, 2.0), (1.0, 3.0)], 128), None);
    }
}
