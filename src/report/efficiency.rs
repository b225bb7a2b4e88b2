//! The run report's profiling and memory figures: what the GPUs did while "busy" (GPM
//! profiling means and p95 beside utilization, the tensor cores' share of busy time, PCIe
//! and NVLink bytes), time spent idle while holding memory and its cost, and the memory
//! pattern each GPU showed (preallocated, growing, steady).
//!
//! Fed the same samples as [`super::RunAccumulator`], in bounded memory:
//! - **GPM means** are time-weighted by each reading's window (`nvmlGpmMetricsGet` over
//!   `window_seconds`), every window counted once ([`GpmFeed`]: a tick that carries no
//!   reading, or carries the previous one again, adds nothing); **p95** is the nearest rank
//!   over windows, to whole percent. Ratios 0..1.
//! - **Tensor cores' share of busy time**: tensor-active time over busy time, both over the
//!   GPM windows: `Σ any_tensor x window / Σ utilization x window`, the utilization of a
//!   window being the mean of the samples in it.
//! - **Idle while holding memory**: time-weighted like busy time (a sample holds until the
//!   next tick, at most two intervals): utilization 0 % (no kernel ran) while a compute
//!   process holds memory (as `input_starvation` tells it).
//! - **Cost**: with a price per GPU-hour, the price x wall time of each physical GPU (MIG
//!   devices have none of their own), and the price x idle time.
//! - **Memory pattern**: `preallocated` when the memory was a framework's pool
//!   ([`PoolTracker`], the `memory_preallocated` rule's recognition) for at least that
//!   rule's DURATION and never grew past it; else `growing` when, over the second half of the
//!   run, memory used rose by at least 1 % of total (Theil-Sen slope of a series of at most
//!   128 bucket means); else `steady`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::histogram::Histogram;
use crate::rules::holds_memory;
use crate::rules::memory::theil_sen;
use crate::rules::preallocation::{MemoryState, PoolParams, PoolTracker};
use crate::rules::profiling::{percent, GpmFeed};
use crate::sampling::snapshot::ratio_from_percent;
use crate::sampling::{DeviceSample, DeviceState, GpmMetrics};

/// Which way the memory went during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryPattern {
    /// A framework's pool taken at start and held flat (`memory_preallocated`).
    Preallocated,
    /// Rising over the second half of the run by at least 1 % of total.
    Growing,
    /// Neither.
    Steady,
}

/// Profiling and memory figures of one GPU, or of the pod. `None` (JSON `null`) = not
/// available: no GPM on the GPU, no reading, or no price set.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Efficiency {
    /// Seconds covered by GPM windows (pod: GPU-seconds); `null` without GPM.
    pub gpm_window_s: Option<f64>,
    /// Mean SM activity (`NVML_GPM_METRIC_SM_UTIL`), ratio 0..1, time-weighted.
    pub sm_activity_mean: Option<f64>,
    /// 95th percentile of SM activity over GPM windows.
    pub sm_activity_p95: Option<f64>,
    /// Mean SM occupancy (`NVML_GPM_METRIC_SM_OCCUPANCY`), ratio 0..1.
    pub sm_occupancy_mean: Option<f64>,
    /// 95th percentile of SM occupancy.
    pub sm_occupancy_p95: Option<f64>,
    /// Mean tensor activity by op (`any`, `hmma`, `imma`, `dfma`: `NVML_GPM_METRIC_*_TENSOR_UTIL`),
    /// ratio 0..1; only the ops GPM answered.
    pub tensor_activity_mean: Option<BTreeMap<&'static str, f64>>,
    /// 95th percentile of tensor activity by op.
    pub tensor_activity_p95: Option<BTreeMap<&'static str, f64>>,
    /// Mean DRAM bandwidth used (`NVML_GPM_METRIC_DRAM_BW_UTIL`), share of the peak 0..1.
    pub dram_activity_mean: Option<f64>,
    /// 95th percentile of DRAM activity.
    pub dram_activity_p95: Option<f64>,
    /// Tensor-active time over busy time (utilization) within the GPM windows, ratio 0..1.
    pub tensor_active_share_of_busy: Option<f64>,
    /// PCIe bytes sent by the GPU during the run (`hw.gpu.io` transmit).
    pub pcie_transmit_bytes: Option<u64>,
    /// PCIe bytes received.
    pub pcie_receive_bytes: Option<u64>,
    /// NVLink bytes sent, all links.
    pub nvlink_transmit_bytes: Option<u64>,
    /// NVLink bytes received, all links.
    pub nvlink_receive_bytes: Option<u64>,
    /// GPU-hours at utilization 0 % while a compute process held memory.
    pub idle_memory_held_gpu_h: Option<f64>,
    /// Price per GPU-hour x GPU-hours of the run (physical GPUs), in the price's currency.
    pub cost: Option<f64>,
    /// Price per GPU-hour x `idle_memory_held_gpu_h`.
    pub idle_cost: Option<f64>,
}

/// The GPM fields the report summarizes, in this order.
const SM: usize = 0;
const OCCUPANCY: usize = 1;
const DRAM: usize = 2;
/// Reads one GPM field.
type Read = fn(&GpmMetrics) -> Option<f64>;
/// Tensor ops, their names in the report and the field they read.
const TENSOR: [(&str, Read); 4] = [
    ("any", |g| g.any_tensor_util),
    ("hmma", |g| g.hmma_tensor_util),
    ("imma", |g| g.imma_tensor_util),
    ("dfma", |g| g.dfma_tensor_util),
];
const FIELDS: usize = 3 + TENSOR.len();

fn field(g: &GpmMetrics, i: usize) -> Option<f64> {
    percent(match i {
        SM => g.sm_util,
        OCCUPANCY => g.sm_occupancy,
        DRAM => g.dram_bw_util,
        _ => TENSOR[i - 3].1(g),
    })
}

/// Time-weighted sum and a histogram of one GPM field.
#[derive(Debug, Clone, Default)]
struct FieldAcc {
    /// Σ percent x seconds.
    sum: f64,
    /// Σ seconds.
    weight: f64,
    windows: Histogram,
}

impl FieldAcc {
    fn add(&mut self, percent: f64, seconds: f64) {
        self.sum += percent * seconds;
        self.weight += seconds;
        self.windows.add(percent.round() as u32);
    }

    fn merge(&mut self, o: &FieldAcc) {
        self.sum += o.sum;
        self.weight += o.weight;
        self.windows.merge(&o.windows);
    }

    fn mean(&self) -> Option<f64> {
        (self.weight > 0.0).then(|| ratio_from_percent(self.sum / self.weight))
    }

    fn p95(&self) -> Option<f64> {
        self.windows.percentile(0.95)
    }
}

/// A series of bucket means over the whole run in at most [`RUN_POINTS`] points: when full,
/// neighbours are merged and the buckets made twice as wide.
#[derive(Debug, Clone)]
struct RunSeries {
    origin: Option<Instant>,
    width_s: f64,
    /// Closed buckets: (mean s since origin, mean bytes, samples).
    points: Vec<(f64, f64, u32)>,
    /// Open bucket: index, Σ t, Σ v, n.
    open: (u64, f64, f64, u32),
}

const RUN_POINTS: usize = 128;

impl Default for RunSeries {
    fn default() -> Self {
        Self {
            origin: None,
            width_s: 1.0,
            points: Vec::new(),
            open: (0, 0.0, 0.0, 0),
        }
    }
}

impl RunSeries {
    fn add(&mut self, at: Instant, bytes: u64) {
        let origin = *self.origin.get_or_insert(at);
        let t = at.saturating_duration_since(origin).as_secs_f64();
        let k = (t / self.width_s) as u64;
        let (ok, st, sv, n) = self.open;
        if n > 0 && k != ok {
            self.points.push((st / f64::from(n), sv / f64::from(n), n));
            if self.points.len() >= RUN_POINTS {
                self.points = self
                    .points
                    .chunks(2)
                    .map(|c| {
                        let n: u32 = c.iter().map(|p| p.2).sum();
                        let w = |f: fn(&(f64, f64, u32)) -> f64| {
                            c.iter().map(|p| f(p) * f64::from(p.2)).sum::<f64>() / f64::from(n)
                        };
                        (w(|p| p.0), w(|p| p.1), n)
                    })
                    .collect();
                self.width_s *= 2.0;
            }
            self.open = ((t / self.width_s) as u64, t, bytes as f64, 1);
        } else {
            self.open = (k, st + t, sv + bytes as f64, n + 1);
        }
    }

    /// Growth over the second half of the run, bytes (Theil-Sen slope x half the span).
    fn late_growth(&self) -> Option<f64> {
        let (_, st, sv, n) = self.open;
        let mut pts: Vec<(f64, f64)> = self.points.iter().map(|p| (p.0, p.1)).collect();
        if n > 0 {
            pts.push((st / f64::from(n), sv / f64::from(n)));
        }
        let end = pts.last()?.0;
        let from = pts.partition_point(|p| p.0 < end / 2.0);
        let slope = theil_sen(&pts[from..], RUN_POINTS)?;
        Some(slope * end / 2.0)
    }
}

/// Profiling and memory accumulation of one GPU.
#[derive(Debug)]
pub(super) struct EfficiencyAcc {
    feed: GpmFeed,
    fields: [FieldAcc; FIELDS],
    window_s: f64,
    /// Σ any-tensor percent x s and Σ utilization percent x s, over windows with both.
    tensor_busy: (f64, f64),
    io: [Option<f64>; 4],
    /// The previous sample's idle-while-holding state, held until the next tick.
    held: Option<(Instant, Option<bool>)>,
    idle_s: f64,
    idle_known: bool,
    pools: PoolTracker,
    pool_params: PoolParams,
    /// The level of a pool held for the rule's DURATION, once seen (bytes); and whether
    /// memory grew past one.
    preallocated: Option<u64>,
    grew_past_pool: bool,
    memory_total: Option<u64>,
    run: RunSeries,
}

impl EfficiencyAcc {
    pub(super) fn new(pool_params: PoolParams) -> Self {
        Self {
            feed: GpmFeed::default(),
            fields: Default::default(),
            window_s: 0.0,
            tensor_busy: (0.0, 0.0),
            io: [None; 4],
            held: None,
            idle_s: 0.0,
            idle_known: false,
            pools: PoolTracker::new(pool_params),
            pool_params,
            preallocated: None,
            grew_past_pool: false,
            memory_total: None,
            run: RunSeries::default(),
        }
    }

    /// Adds one sample taken at `at`; the previous one's idle state holds until then, at
    /// most `cap`. A sample where NVML answered nothing ends the hold and adds nothing else.
    pub(super) fn add(&mut self, s: &DeviceSample, at: Instant, cap: Duration) {
        if let Some((then, Some(idle))) = self.held.take() {
            self.idle_known = true;
            if idle {
                self.idle_s += at.saturating_duration_since(then).min(cap).as_secs_f64();
            }
        }
        if s.state != DeviceState::Ok || s.answered_nothing() {
            return;
        }
        let idle = match (s.utilization_gpu_percent, holds_memory(s)) {
            (Some(u), Some((holds, _, _))) => Some(u == 0 && holds),
            _ => None,
        };
        self.idle_known |= idle.is_some();
        self.held = Some((at, idle));
        if let Some(w) = self.feed.feed(s) {
            let secs = w.metrics.window_seconds;
            if secs > 0.0 {
                self.window_s += secs;
                for (i, f) in self.fields.iter_mut().enumerate() {
                    if let Some(v) = field(&w.metrics, i) {
                        f.add(v, secs);
                    }
                }
                if let (Some(t), Some(u)) =
                    (percent(w.metrics.any_tensor_util), w.utilization_percent)
                {
                    self.tensor_busy.0 += t * secs;
                    self.tensor_busy.1 += u * secs;
                }
            }
        }
        let io = [
            s.io.pcie_transmit_bytes,
            s.io.pcie_receive_bytes,
            s.io.nvlink_transmit_bytes,
            s.io.nvlink_receive_bytes,
        ];
        for (acc, v) in self.io.iter_mut().zip(io) {
            if let Some(v) = v.filter(|v| v.is_finite()) {
                *acc = Some(acc.map_or(v, |a| a.max(v)));
            }
        }
        match self.pools.observe(s, at) {
            MemoryState::Pool(p)
                if at.saturating_duration_since(p.since) >= self.pool_params.hold =>
            {
                self.preallocated = Some(p.level_bytes);
            }
            MemoryState::Plain {
                ended: Some((_, crate::rules::preallocation::PoolEnd::Grew { .. })),
            } => self.grew_past_pool = true,
            _ => {}
        }
        if let (Some(used), Some(total)) = (s.memory_used_bytes, s.memory_total_bytes) {
            self.memory_total = Some(total);
            self.run.add(at, used);
        }
    }

    /// Whether a GPM window was ever read.
    pub(super) fn has_gpm(&self) -> bool {
        self.window_s > 0.0
    }

    /// The pool's level (bytes) when the pattern is `preallocated`.
    pub(super) fn pool_level(&self) -> Option<u64> {
        self.preallocated
            .filter(|_| self.pattern() == Some(MemoryPattern::Preallocated))
    }

    /// The memory pattern; `None` when memory was never read.
    pub(super) fn pattern(&self) -> Option<MemoryPattern> {
        let total = self.memory_total.filter(|t| *t > 0)?;
        if self.preallocated.is_some() && !self.grew_past_pool {
            return Some(MemoryPattern::Preallocated);
        }
        let grew = self
            .run
            .late_growth()
            .is_some_and(|g| g >= 0.01 * total as f64);
        Some(if grew || self.grew_past_pool {
            MemoryPattern::Growing
        } else {
            MemoryPattern::Steady
        })
    }

    /// The figures of this GPU over `wall_s` seconds; `price` per GPU-hour; `physical`: not
    /// a MIG device (only a GPU has a cost of its own).
    pub(super) fn summary(&self, wall_s: f64, price: Option<f64>, physical: bool) -> Efficiency {
        let mut e = profile(&[self]);
        let idle_h = self.idle_known.then(|| self.idle_s / 3600.0);
        e.idle_memory_held_gpu_h = idle_h;
        e.cost = price.filter(|_| physical).map(|p| p * wall_s / 3600.0);
        e.idle_cost = price.zip(idle_h).map(|(p, h)| p * h);
        e
    }
}

/// GPM figures over `accs` together (time-weighted) and their I/O bytes summed.
fn profile(accs: &[&EfficiencyAcc]) -> Efficiency {
    let mut fields: [FieldAcc; FIELDS] = Default::default();
    let mut window_s = 0.0;
    let mut tensor_busy = (0.0, 0.0);
    for a in accs {
        window_s += a.window_s;
        for (f, o) in fields.iter_mut().zip(a.fields.iter()) {
            f.merge(o);
        }
        tensor_busy.0 += a.tensor_busy.0;
        tensor_busy.1 += a.tensor_busy.1;
    }
    let tensor = |stat: fn(&FieldAcc) -> Option<f64>| {
        let m: BTreeMap<&'static str, f64> = TENSOR
            .iter()
            .enumerate()
            .filter_map(|(k, (name, _))| stat(&fields[3 + k]).map(|v| (*name, v)))
            .collect();
        (!m.is_empty()).then_some(m)
    };
    let io = |i: usize| -> Option<u64> {
        accs.iter()
            .filter_map(|a| a.io[i])
            .fold(None, |s: Option<f64>, v| Some(s.unwrap_or(0.0) + v))
            .map(|b| b.round() as u64)
    };
    Efficiency {
        gpm_window_s: (window_s > 0.0).then_some(window_s),
        sm_activity_mean: fields[SM].mean(),
        sm_activity_p95: fields[SM].p95(),
        sm_occupancy_mean: fields[OCCUPANCY].mean(),
        sm_occupancy_p95: fields[OCCUPANCY].p95(),
        tensor_activity_mean: tensor(FieldAcc::mean),
        tensor_activity_p95: tensor(FieldAcc::p95),
        dram_activity_mean: fields[DRAM].mean(),
        dram_activity_p95: fields[DRAM].p95(),
        tensor_active_share_of_busy: (tensor_busy.1 > 0.0).then(|| tensor_busy.0 / tensor_busy.1),
        pcie_transmit_bytes: io(0),
        pcie_receive_bytes: io(1),
        nvlink_transmit_bytes: io(2),
        nvlink_receive_bytes: io(3),
        idle_memory_held_gpu_h: None,
        cost: None,
        idle_cost: None,
    }
}

/// The pod's figures: GPM over the physical GPUs that have it (over the MIG devices when no
/// physical GPU has GPM readings), I/O bytes over the physical GPUs, idle time and costs
/// summed over `gpus` (each with its own figures and whether it is a physical GPU).
pub(super) fn pod(gpus: &[(&EfficiencyAcc, &Efficiency, bool)], price: Option<f64>) -> Efficiency {
    let physical: Vec<&EfficiencyAcc> = gpus.iter().filter(|g| g.2).map(|g| g.0).collect();
    let with_gpm: Vec<&EfficiencyAcc> = physical.iter().copied().filter(|a| a.has_gpm()).collect();
    let gpm_set: Vec<&EfficiencyAcc> = if with_gpm.is_empty() {
        gpus.iter()
            .filter(|g| !g.2 && g.0.has_gpm())
            .map(|g| g.0)
            .collect()
    } else {
        with_gpm
    };
    let mut e = profile(&gpm_set);
    let io = profile(&physical);
    e.pcie_transmit_bytes = io.pcie_transmit_bytes;
    e.pcie_receive_bytes = io.pcie_receive_bytes;
    e.nvlink_transmit_bytes = io.nvlink_transmit_bytes;
    e.nvlink_receive_bytes = io.nvlink_receive_bytes;
    let sum = |f: fn(&Efficiency) -> Option<f64>| {
        gpus.iter()
            .filter_map(|g| f(g.1))
            .fold(None, |s: Option<f64>, v| Some(s.unwrap_or(0.0) + v))
    };
    let idle_h = gpus
        .iter()
        .filter(|g| g.0.idle_known)
        .map(|g| g.0.idle_s / 3600.0)
        .fold(None, |s: Option<f64>, v| Some(s.unwrap_or(0.0) + v));
    e.idle_memory_held_gpu_h = idle_h;
    e.cost = sum(|x| x.cost);
    e.idle_cost = price.zip(idle_h).map(|(p, h)| p * h);
    e
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;
    use std::time::{Duration, Instant, SystemTime};

    use super::super::RunAccumulator;
    use super::*;
    use crate::report::RunReport;
    use crate::sampling::{DeviceInfo, ProcessSample, Snapshot};

    const GIB: u64 = 1 << 30;

    /// `a` is `b` to the last few bits (figures are written at full precision).
    fn close(a: Option<f64>, b: f64) {
        assert!(
            a.is_some_and(|a| (a - b).abs() <= 1e-12 * b.abs().max(1.0)),
            "{a:?} vs {b}"
        );
    }

    fn info(index: u32, uuid: &str) -> Arc<DeviceInfo> {
        Arc::new(DeviceInfo {
            index,
            uuid: uuid.into(),
            name: Some("NVIDIA H200".into()),
            ..DeviceInfo::default()
        })
    }

    /// A busy GPU with one process holding `used` of 80 GiB.
    fn sample(info: &Arc<DeviceInfo>, util: u32, used: u64) -> DeviceSample {
        let mut s = DeviceSample::empty(info.clone(), DeviceState::Ok);
        s.utilization_gpu_percent = Some(util);
        s.memory_total_bytes = Some(80 * GIB);
        s.memory_used_bytes = Some(used);
        s.processes = Some(vec![ProcessSample {
            pid: 4242,
            used_memory_bytes: Some(used),
            ..Default::default()
        }]);
        s
    }

    fn gpm(window: f64, sm: f64, tensor: f64, dram: f64) -> GpmMetrics {
        GpmMetrics {
            window_seconds: window,
            sm_util: Some(sm),
            sm_occupancy: Some(sm / 2.0),
            any_tensor_util: Some(tensor),
            hmma_tensor_util: Some(tensor),
            dram_bw_util: Some(dram),
            ..GpmMetrics::default()
        }
    }

    /// Feeds `(t, samples)` at 1 s ticks and returns the report.
    fn run(price: Option<f64>, ticks: Vec<(f64, Vec<DeviceSample>)>) -> RunReport {
        let base = Instant::now();
        let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)))
            .with_price_per_gpu_hour(price);
        for (k, (t, devices)) in ticks.into_iter().enumerate() {
            acc.add(&Snapshot {
                taken_at: SystemTime::UNIX_EPOCH + Duration::from_secs_f64(1.8e9 + t),
                taken_instant: base + Duration::from_secs_f64(t),
                seq: k as u64 + 1,
                export: true,
                devices,
            });
        }
        acc.report(BTreeMap::new())
    }

    /// Windows of unequal length, each carried into the ticks until the next one (as the
    /// sampler does) or present only on its own tick: the same figures, weighted by length.
    #[test]
    fn gpm_means_are_weighted_by_window_and_each_window_counts_once() {
        let g = info(0, "GPU-a");
        // Windows end at 10 s (10 s long: SM 90, tensor 0, DRAM 20), 12 s (2 s: SM 30,
        // tensor 80, DRAM 60), 30 s (18 s: SM 50, tensor 40, DRAM 10).
        let windows = [
            (10.0, gpm(10.0, 90.0, 0.0, 20.0)),
            (12.0, gpm(2.0, 30.0, 80.0, 60.0)),
            (30.0, gpm(18.0, 50.0, 40.0, 10.0)),
        ];
        let build = |carried: bool| {
            (0..=30)
                .map(|t| {
                    let t = f64::from(t);
                    let mut s = sample(&g, if t <= 10.0 { 100 } else { 50 }, 40 * GIB);
                    s.gpm = windows
                        .iter()
                        .rev()
                        .find(|(end, _)| *end <= t)
                        .filter(|(end, _)| carried || *end == t)
                        .map(|(_, w)| *w);
                    (t, vec![s])
                })
                .collect::<Vec<_>>()
        };
        let a = run(None, build(true));
        let b = run(None, build(false));
        assert_eq!(a, b, "carried or not, the same windows");
        let e = &a.gpus[0].summary.efficiency;
        // Integrals computed by hand: (90x10 + 30x2 + 50x18) / 30 = 62 %.
        close(e.sm_activity_mean, 0.62);
        close(e.sm_occupancy_mean, 0.31);
        close(
            e.dram_activity_mean,
            (20.0 * 10.0 + 60.0 * 2.0 + 10.0 * 18.0) / 30.0 / 100.0,
        );
        let tensor = e.tensor_activity_mean.as_ref().unwrap();
        close(
            Some(tensor["any"]),
            (80.0 * 2.0 + 40.0 * 18.0) / 30.0 / 100.0,
        );
        assert_eq!(
            tensor.keys().copied().collect::<Vec<_>>(),
            vec!["any", "hmma"]
        );
        assert_eq!(e.gpm_window_s, Some(30.0));
        // p95 over the three windows, nearest rank: the largest.
        assert_eq!(e.sm_activity_p95, Some(0.9));
        assert_eq!(e.dram_activity_p95, Some(0.6));
        // Busy: the first window's 11 samples (0..10 s) at 100 %, then 50 %.
        // Tensor-active / busy = (0x10 + 80x2 + 40x18) / (100x10 + 50x2 + 50x18).
        close(e.tensor_active_share_of_busy, 880.0 / 2000.0);
    }

    #[test]
    fn without_gpm_the_figures_are_null_and_a_note_says_so() {
        let g = info(0, "GPU-a");
        let r = run(
            None,
            (0..5)
                .map(|t| (f64::from(t), vec![sample(&g, 99, GIB)]))
                .collect(),
        );
        let e = &r.gpus[0].summary.efficiency;
        assert_eq!(e.gpm_window_s, None);
        assert_eq!(e.sm_activity_mean, None);
        assert_eq!(e.tensor_activity_mean, None);
        assert_eq!(e.tensor_active_share_of_busy, None);
        assert_eq!((e.cost, e.idle_cost), (None, None));
        assert_eq!(r.pod.efficiency.sm_activity_mean, None);
        assert_eq!(r.notes.len(), 1);
        assert!(
            r.notes[0].contains("GPU-a") && r.notes[0].contains("no GPM"),
            "{:?}",
            r.notes
        );
        let json: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
        assert!(json["gpus"][0]["sm_activity_mean"].is_null());
        assert!(json["pod"]["tensor_activity_p95"].is_null());
    }

    #[test]
    fn idle_time_holding_memory_and_its_cost() {
        let g = info(0, "GPU-a");
        let m = info(0, "MIG-a1");
        // 0-10 s busy, 10-25 s idle holding memory, 25-30 s idle with no process.
        let ticks = (0..=30)
            .map(|t| {
                let t = f64::from(t);
                let mut s = sample(&g, if t < 10.0 { 95 } else { 0 }, 40 * GIB);
                if t >= 25.0 {
                    s.processes = Some(Vec::new());
                }
                let mut mig = sample(&m, 0, GIB);
                mig.utilization_gpu_percent = None; // NOT_SUPPORTED on MIG devices
                (t, vec![s, mig])
            })
            .collect();
        let r = run(Some(3.6), ticks);
        let e = &r.gpus[0].summary.efficiency;
        close(e.idle_memory_held_gpu_h, 15.0 / 3600.0);
        // 3.6 per GPU-hour: 0.001 per GPU-second.
        close(e.cost, 0.03);
        close(e.idle_cost, 0.015);
        // The MIG device: no utilization, no idle time, no cost of its own.
        let mig = &r.gpus[1].summary.efficiency;
        assert_eq!(
            (mig.idle_memory_held_gpu_h, mig.cost, mig.idle_cost),
            (None, None, None)
        );
        close(r.pod.efficiency.cost, 0.03);
        close(r.pod.efficiency.idle_cost, 0.015);
        assert_eq!(r.price_per_gpu_hour, Some(3.6));
    }

    #[test]
    fn memory_patterns() {
        let (a, b, c) = (info(0, "GPU-a"), info(1, "GPU-b"), info(2, "GPU-c"));
        let ticks = (0..=600)
            .step_by(5)
            .map(|t| {
                let t = f64::from(t);
                // a: loads 20 GiB in 30 s, then flat: steady.
                let a_used = (20.0 * t.min(30.0) / 30.0 * GIB as f64) as u64 + GIB / 2;
                // b: grows 1 GiB a minute all along: growing.
                let b_used = GIB + (t / 60.0 * GIB as f64) as u64;
                // c: no process until 10 s, then 97 % within 5 s, flat: preallocated.
                let mut cs = sample(
                    &c,
                    90,
                    if t < 15.0 {
                        GIB / 4
                    } else {
                        80 * GIB / 100 * 97
                    },
                );
                if t < 10.0 {
                    cs.processes = Some(Vec::new());
                }
                (t, vec![sample(&a, 90, a_used), sample(&b, 90, b_used), cs])
            })
            .collect();
        let r = run(None, ticks);
        let patterns: Vec<_> = r.gpus.iter().map(|g| g.memory_pattern).collect();
        assert_eq!(
            patterns,
            vec![
                Some(MemoryPattern::Steady),
                Some(MemoryPattern::Growing),
                Some(MemoryPattern::Preallocated)
            ]
        );
        let json: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
        assert_eq!(json["gpus"][2]["memory_pattern"], "preallocated");
    }
}
