//! What the GPU does while it is "busy": `tensor_cores_idle` (busy, but the tensor cores
//! are not) and `memory_bound` (DRAM bandwidth near its peak while the SMs are mostly
//! idle), judged on GPM profiling windows (`nvmlGpmMetricsGet`, Hopper and newer).
//!
//! A GPM reading covers a window of `GPU_SIDECAR_GPM_INTERVAL`; ticks in between carry no
//! new reading (or the same one again). [`GpmFeed`] turns the snapshots into windows, each
//! seen once, with the mean utilization of the samples inside it. A rule judges each new
//! window and repeats that judgement on the ticks until the next one; with no new window
//! for [`STALE_WINDOWS`] windows the GPU cannot be judged (a failed read, a lost GPU). A
//! GPU without GPM is not judged at all (the sampler says once that it has none).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;

use super::id::RuleId;
use super::id::RuleSettings;
use super::rule::{Built, Deferred, Rule, Verdict};
use crate::catalogue::alert_values;
use crate::sampling::snapshot::ratio_from_percent;
use crate::sampling::snapshot::{DeviceSample, DeviceState, GpmMetrics, Snapshot};

/// Windows without a new reading after which a GPU's last judgement lapses.
pub(crate) const STALE_WINDOWS: f64 = 2.5;

/// One GPM window: the metrics and the utilization over it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GpmWindow {
    /// The reading (percent, as NVML gives them; `window_seconds` long).
    pub metrics: GpmMetrics,
    /// Mean of `nvmlDeviceGetUtilizationRates.gpu` over the samples taken in the window
    /// (those after the previous reading, up to and including this one), percent; `None`
    /// when none was answered.
    pub utilization_percent: Option<f64>,
}

#[derive(Debug, Default)]
struct FeedState {
    last: Option<GpmMetrics>,
    utilization_sum: u64,
    utilization_n: u32,
}

/// Per device, the GPM windows in the snapshots, each once: a tick that carries no reading,
/// or the previous one again (the same window, carried into a later tick), brings none.
#[derive(Debug, Default)]
pub(crate) struct GpmFeed {
    devices: HashMap<String, FeedState>,
}

impl GpmFeed {
    /// Feeds one device sample; returns the window it brings, if new.
    pub(crate) fn feed(&mut self, d: &DeviceSample) -> Option<GpmWindow> {
        let s = self.devices.entry(d.info.uuid.clone()).or_default();
        if d.state != DeviceState::Ok {
            return None;
        }
        if let Some(u) = d.utilization_gpu_percent {
            s.utilization_sum += u64::from(u.min(100));
            s.utilization_n += 1;
        }
        let g = d.gpm?;
        if s.last == Some(g) {
            return None;
        }
        s.last = Some(g);
        let utilization_percent =
            (s.utilization_n > 0).then(|| s.utilization_sum as f64 / f64::from(s.utilization_n));
        s.utilization_sum = 0;
        s.utilization_n = 0;
        Some(GpmWindow {
            metrics: g,
            utilization_percent,
        })
    }

    /// Forgets devices whose UUID `keep` refuses.
    pub(crate) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.devices.retain(|uuid, _| keep(uuid));
    }
}

/// A GPM percentage held to 0..100 (NVML's arithmetic can land a hair outside).
pub(crate) fn percent(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite()).map(|x| x.clamp(0.0, 100.0))
}

/// What a window-judging rule decides about one window.
type Judge = dyn Fn(&DeviceSample, &GpmWindow) -> (Option<bool>, Vec<KeyValue>, String);

/// A GPU's last judgement: when (the tick of its window), the window's length, and the
/// verdict's holds, values and summary.
struct LastJudgement {
    at: Instant,
    window_seconds: f64,
    holds: Option<bool>,
    values: Vec<KeyValue>,
    summary: String,
}

/// The last judgement of each GPU.
#[derive(Default)]
struct Judged {
    feed: GpmFeed,
    last: HashMap<String, LastJudgement>,
}

impl Judged {
    /// Pushes a verdict for every GPU that has GPM: the judgement of a new window, or the
    /// last one repeated until it lapses.
    fn evaluate(&mut self, snapshot: &Snapshot, judge: &Judge, out: &mut Vec<Verdict>) {
        let now = snapshot.taken_instant;
        let keep = |uuid: &str| snapshot.devices.iter().any(|d| d.info.uuid == uuid);
        self.feed.retain(keep);
        self.last.retain(|uuid, _| keep(uuid));
        for d in &snapshot.devices {
            if d.state != DeviceState::Ok {
                if self.last.contains_key(&d.info.uuid) {
                    out.push(Verdict::unknown(d));
                }
                continue;
            }
            if let Some(w) = self.feed.feed(d) {
                let (holds, values, summary) = judge(d, &w);
                self.last.insert(
                    d.info.uuid.clone(),
                    LastJudgement {
                        at: now,
                        window_seconds: w.metrics.window_seconds,
                        holds,
                        values,
                        summary,
                    },
                );
            }
            let Some(last) = self.last.get(&d.info.uuid) else {
                continue; // no GPM reading yet, or none at all: not judged
            };
            let stale = Duration::from_secs_f64((last.window_seconds * STALE_WINDOWS).max(1.0));
            if now.saturating_duration_since(last.at) > stale {
                out.push(Verdict::unknown(d));
            } else {
                out.push(Verdict::device(
                    d,
                    last.holds,
                    last.values.clone(),
                    last.summary.clone(),
                ));
            }
        }
    }
}

fn pct(p: f64) -> String {
    format!("{p:.0}%")
}

/// `tensor_cores_idle`: over a GPM window, utilization (`nvmlDeviceGetUtilizationRates.gpu`,
/// mean of the window's samples) at or above `utilization` percent while the tensor pipes
/// (`NVML_GPM_METRIC_ANY_TENSOR_UTIL`) are active less than `threshold` percent of the time,
/// and the window is not memory-bound by `memory_bound`'s thresholds (when that rule is on:
/// the more specific diagnosis).
pub(crate) struct TensorCoresIdle {
    threshold: f64,
    utilization: f64,
    memory_bound: Option<(f64, f64)>,
    judged: Judged,
}

impl TensorCoresIdle {
    /// [`super::rule::Build`] for `tensor_cores_idle`: leaves memory-bound GPUs to
    /// `memory_bound` when that is enabled.
    pub(crate) fn build(s: &RuleSettings, d: &Deferred) -> Built {
        let t = s.threshold.unwrap_or_default();
        let utilization = s
            .second_threshold
            .unwrap_or_else(|| RuleId::TensorCoresIdle.default_second_threshold());
        Built::judged(Self::new(t, utilization, d.memory_bound), s)
    }

    /// `threshold`: tensor activity, percent; `utilization`: percent;
    /// `memory_bound`: that rule's (DRAM, SM activity) thresholds when it is enabled.
    pub(crate) fn new(threshold: f64, utilization: f64, memory_bound: Option<(f64, f64)>) -> Self {
        Self {
            threshold,
            utilization,
            memory_bound,
            judged: Judged::default(),
        }
    }
}

impl Rule for TensorCoresIdle {
    fn id(&self) -> RuleId {
        RuleId::TensorCoresIdle
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        let (threshold, utilization, memory_bound) =
            (self.threshold, self.utilization, self.memory_bound);
        let judge = move |_: &DeviceSample, w: &GpmWindow| {
            let g = &w.metrics;
            let (Some(util), Some(tensor)) = (w.utilization_percent, percent(g.any_tensor_util))
            else {
                return (None, Vec::new(), String::new());
            };
            let sm = percent(g.sm_util);
            let fp32 = percent(g.fp32_util);
            let dram = percent(g.dram_bw_util);
            let bound = match (memory_bound, dram, sm) {
                (Some((d, s)), Some(dram), Some(sm)) => dram >= d && sm < s,
                _ => false,
            };
            let mut values = vec![
                alert_values::UTILIZATION.kv(ratio_from_percent(util)),
                alert_values::TENSOR_ACTIVITY.kv(ratio_from_percent(tensor)),
            ];
            if let Some(h) = percent(g.hmma_tensor_util) {
                values.push(alert_values::TENSOR_ACTIVITY_HMMA.kv(ratio_from_percent(h)));
            }
            if let Some(s) = sm {
                values.push(alert_values::SM_ACTIVITY.kv(ratio_from_percent(s)));
            }
            if let Some(f) = fp32 {
                values.push(alert_values::PIPE_ACTIVITY_FP32.kv(ratio_from_percent(f)));
            }
            if let Some(d) = dram {
                values.push(alert_values::DRAM_ACTIVITY.kv(ratio_from_percent(d)));
            }
            values.push(alert_values::GPM_WINDOW.kv(g.window_seconds));
            let mut seen = Vec::new();
            if let Some(s) = sm {
                seen.push(format!("SM activity {}", pct(s)));
            }
            if let Some(f) = fp32 {
                seen.push(format!("FP32 pipe {}", pct(f)));
            }
            if let Some(d) = dram {
                seen.push(format!("DRAM {}", pct(d)));
            }
            seen.push(format!(
                "thresholds {}% busy, {}% tensor",
                utilization, threshold
            ));
            let holds = util >= utilization && tensor < threshold && !bound;
            let summary = if holds {
                format!(
                    "the GPU is busy ({} of the time) but its tensor cores are not (active {:.1}% of the time; {}): kernels without tensor math (fp32 matmuls, element-wise or data-movement bound work)",
                    pct(util), tensor, seen.join(", ")
                )
            } else {
                format!(
                    "GPU {} busy, tensor cores active {:.1}% of the time ({})",
                    pct(util),
                    tensor,
                    seen.join(", ")
                )
            };
            (Some(holds), values, summary)
        };
        self.judged.evaluate(snapshot, &judge, out);
    }
}

/// `memory_bound`: over a GPM window, DRAM bandwidth (`NVML_GPM_METRIC_DRAM_BW_UTIL`, share
/// of the peak) at or above `threshold` percent while SM activity
/// (`NVML_GPM_METRIC_SM_UTIL`) is below `sm_activity` percent.
pub(crate) struct MemoryBound {
    threshold: f64,
    sm_activity: f64,
    judged: Judged,
}

impl MemoryBound {
    /// [`super::rule::Build`] for `memory_bound`.
    pub(crate) fn build(s: &RuleSettings, _: &Deferred) -> Built {
        let t = s.threshold.unwrap_or_default();
        let second = s
            .second_threshold
            .unwrap_or_else(|| RuleId::MemoryBound.default_second_threshold());
        Built::judged(Self::new(t, second), s)
    }

    /// `threshold`: DRAM bandwidth, percent of peak; `sm_activity`: percent.
    pub(crate) fn new(threshold: f64, sm_activity: f64) -> Self {
        Self {
            threshold,
            sm_activity,
            judged: Judged::default(),
        }
    }
}

impl Rule for MemoryBound {
    fn id(&self) -> RuleId {
        RuleId::MemoryBound
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        let (threshold, sm_activity) = (self.threshold, self.sm_activity);
        let judge = move |_: &DeviceSample, w: &GpmWindow| {
            let g = &w.metrics;
            let (Some(dram), Some(sm)) = (percent(g.dram_bw_util), percent(g.sm_util)) else {
                return (None, Vec::new(), String::new());
            };
            let mut values = vec![
                alert_values::DRAM_ACTIVITY.kv(ratio_from_percent(dram)),
                alert_values::SM_ACTIVITY.kv(ratio_from_percent(sm)),
            ];
            if let Some(o) = percent(g.sm_occupancy) {
                values.push(alert_values::SM_OCCUPANCY.kv(ratio_from_percent(o)));
            }
            if let Some(t) = percent(g.any_tensor_util) {
                values.push(alert_values::TENSOR_ACTIVITY.kv(ratio_from_percent(t)));
            }
            if let Some(u) = w.utilization_percent {
                values.push(alert_values::UTILIZATION.kv(ratio_from_percent(u)));
            }
            values.push(alert_values::GPM_WINDOW.kv(g.window_seconds));
            let holds = dram >= threshold && sm < sm_activity;
            let summary = if holds {
                format!(
                    "DRAM bandwidth at {} of its peak while SM activity is {} (thresholds {}% / {}%): the kernels wait on memory, not on math",
                    pct(dram), pct(sm), threshold, sm_activity
                )
            } else {
                format!(
                    "DRAM bandwidth {} of peak, SM activity {} (thresholds {}% / {}%)",
                    pct(dram),
                    pct(sm),
                    threshold,
                    sm_activity
                )
            };
            (Some(holds), values, summary)
        };
        self.judged.evaluate(snapshot, &judge, out);
    }
}
