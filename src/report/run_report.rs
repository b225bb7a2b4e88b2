//! The run report: what a training run cost and how well it used the GPUs, computed from
//! every sample the agent took, not from the exported (last-value) points.
//!
//! [`RunAccumulator`] is the pure part: fed each [`Snapshot`] in order, it keeps running
//! sums, peaks, a utilization histogram and the energy counter, in memory that does not grow
//! with the length of the run. [`RunAccumulator::report`] turns that into a [`RunReport`]:
//! one [`Summary`] per GPU and one for the pod ([`super::summary`], which also publishes
//! it). [`RunReporter`](super::RunReporter) runs an accumulator on the thread `run-report`,
//! a consumer of the [`Hub`](crate::sampling::Hub) ([`super::reporter`]).
//!
//! How the numbers are made:
//! - **Samples.** A GPU's sample is *taken* when NVML answered at least one reading for it
//!   at that tick; it is *missed* when NVML answered nothing for it (every call failed, or
//!   the GPU was lost), and for every tick the subscription queue dropped.
//! - **Notes** say what the figures cannot: why a GPU has no GPM figures (not supported, lost
//!   before its first GPM window, the run shorter than one), a lost GPU, an energy counter
//!   that disagrees with power; each once.
//! - **Time-weighted values** (busy time, time held back, integrated power): each sample's
//!   value holds until the GPU's next tick, at most until it is stale (two sample intervals,
//!   at least 1 s: [`Timing::max_sample_age`]; a longer gap, e.g. NVML
//!   re-initializing, is not attributed to anything). The last sample holds for no time:
//!   the run ends there.
//! - **Means and p95** are over samples (the sampler ticks at a fixed interval). p95 is the
//!   nearest-rank percentile of the integer utilization percentages.
//! - **Energy** is the difference of `nvmlDeviceGetTotalEnergyConsumption` (the sum of its
//!   non-negative steps: a counter reset, e.g. a driver reload, is skipped, not subtracted).
//!   Only when the counter gave fewer than two readings is power integrated over time
//!   instead; `energy_source` says which. **Cross-check**: the power readings integrated over
//!   the span the counter covered (`energy_power_integral_j`) must agree with the counter
//!   within [`ENERGY_CHECK_TOLERANCE`] (or one sample interval's energy, when larger: the
//!   integral's own resolution); when they do not (a counter that froze while the GPU drew
//!   650 W), `energy_counter_agrees` is false and a note says so. Not checked when the counter
//!   was reset, or when power covered less than 90 % of that span.
//! - **ECC errors** (`ecc_uncorrected_errors`, `ecc_corrected_errors`): the increase of
//!   NVML's volatile totals during the run, counted as energy is (a reset skipped).
//! - **Lost**: `samples_lost` counts the ticks a GPU answered `GPU_IS_LOST` or
//!   `RESET_REQUIRED` (also in `samples_missed`); `lost_at_s`, the seconds from the run's first
//!   sample to the first of them.
//! - **Precision**: figures are written as computed (f64), not rounded: `compare` judges them
//!   at full precision; the page and `compare`'s table round for people.
//! - **Held back** comes from the clock-event reason bits
//!   ([`CLOCKS_EVENT_REASONS`]): `power_capped_s` = `sw_power_cap`; `thermal_slowdown_s` =
//!   `sw_thermal_slowdown` or `hw_thermal_slowdown`; `hw_slowdown_s` = `hw_slowdown` or
//!   `hw_power_brake_slowdown`. `clocks_event_s` gives each reason seen on its own.
//! - **Pod**: sums over GPUs for GPU-seconds, energy and samples; per-tick sums for memory and
//!   power; maxima for temperatures. A tick counts for the pod's memory (or power) only when
//!   every device it sums answered it, so a peak or mean always covers the same devices as
//!   the total beside it; when one never answers, the pod's figure is absent (its own
//!   summary says which). Memory sums the physical GPUs, plus the MIG devices whose GPU is
//!   not sampled (a pod holding MIG devices only: its share of the GPUs); a MIG device of a
//!   sampled GPU is in its GPU's memory already. Power and energy belong to physical GPUs
//!   only: absent for a pod that holds only MIG devices (the GPU is shared with others).
//!
//! Absent stays absent: a value NVML never gave is `null` in JSON, never 0.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::efficiency::{self, Efficiency, EfficiencyAcc};
use super::figures::duration;
use super::histogram::Histogram;
use super::page::curves::{Curves, Point};
use super::summary::{EnergySource, GpuSummary, RunReport, Summary, EVENT_NAME};
use crate::catalogue::clocks_event_reasons::{self, CLOCKS_EVENT_REASONS};
use crate::rules::preallocation::PoolParams;
use crate::sampling::snapshot::{joules_from_millijoules, watts_from_milliwatts};
use crate::sampling::{DeviceInfo, DeviceSample, DeviceState, Sharing, Snapshot, Timing};

const JOULES_PER_KWH: f64 = 3.6e6;

/// How far the energy counter may be from the power readings integrated over the same span,
/// as a share of the integral, before the report says they disagree: sampled power held
/// between ticks misses the load's swings within a tick (a few percent under training), a
/// counter that froze or jumped is off by far more.
pub const ENERGY_CHECK_TOLERANCE: f64 = 0.25;

/// Sum, count and maximum of a series.
#[derive(Debug, Clone, Copy, Default)]
struct Stats {
    sum: u128,
    n: u64,
    max: Option<u64>,
}

impl Stats {
    fn add(&mut self, v: u64) {
        self.sum += u128::from(v);
        self.n += 1;
        self.max = Some(self.max.map_or(v, |m| m.max(v)));
    }

    fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum as f64 / self.n as f64)
    }
}

/// The values of a GPU's latest sample, held until its next tick.
#[derive(Debug, Clone, Copy)]
struct Held {
    at: Instant,
    utilization: Option<u32>,
    reasons: Option<u64>,
    power_mw: Option<u32>,
}

/// A total NVML keeps since the driver loaded (energy in mJ, ECC errors): the sum of its
/// non-negative steps between consecutive readings (a reset is skipped, not subtracted).
#[derive(Debug, Clone, Copy, Default)]
struct TotalCounter {
    last: Option<u64>,
    readings: u64,
    sum: u64,
    resets: u64,
}

impl TotalCounter {
    fn add(&mut self, v: u64) {
        if let Some(prev) = self.last {
            if v >= prev {
                self.sum += v - prev;
            } else {
                self.resets += 1;
            }
        }
        self.last = Some(v);
        self.readings += 1;
    }

    /// The increase during the run; `None` when never read.
    fn increase(&self) -> Option<u64> {
        (self.readings > 0).then_some(self.sum)
    }
}

/// The power integral at the energy counter's first and latest readings: (mJ, seconds
/// covered, when), so that the counter is checked against power over the same span.
#[derive(Debug, Clone, Copy)]
struct PowerAt {
    mj: f64,
    covered_s: f64,
    at: Instant,
}

#[derive(Debug)]
struct GpuAcc {
    info: Arc<DeviceInfo>,
    efficiency: EfficiencyAcc,
    first: Option<Instant>,
    last: Option<Instant>,
    taken: u64,
    missed: u64,
    held: Option<Held>,
    utilization: Histogram,
    busy_s: f64,
    memory_used: Stats,
    memory_total: Option<u64>,
    memory_peak_ratio: Option<f64>,
    energy: TotalCounter,
    /// The power integral at the counter's first and latest readings.
    energy_span: Option<(PowerAt, PowerAt)>,
    /// Uncorrected and corrected ECC errors.
    ecc: [TotalCounter; 2],
    /// Ticks the GPU was lost, and when it was first.
    lost: u64,
    lost_at: Option<Instant>,
    power: Stats,
    power_integrated_mj: f64,
    power_integrated_s: f64,
    temperature_gpu_max: Option<u32>,
    temperature_memory_max: Option<u32>,
    reasons_known_s: f64,
    reason_s: [f64; CLOCKS_EVENT_REASONS.len()],
    held_back_s: [f64; HELD_BACK.len()],
    /// How the GPU was shared, when it was (the last mode seen).
    sharing: Option<Sharing>,
}

/// The report's held-back categories and the clock-event reasons each one covers (a sample
/// counts once for a category even when several of its reasons are set).
pub const HELD_BACK: [(&str, &[&str]); 3] = [
    ("power_capped_s", &["sw_power_cap"]),
    (
        "thermal_slowdown_s",
        &["sw_thermal_slowdown", "hw_thermal_slowdown"],
    ),
    ("hw_slowdown_s", &["hw_slowdown", "hw_power_brake_slowdown"]),
];

fn held_back_mask(i: usize) -> u64 {
    HELD_BACK[i].1.iter().map(|n| bit(n)).fold(0, |a, b| a | b)
}

fn is_mig(info: &DeviceInfo) -> bool {
    info.uuid.starts_with("MIG-")
}

/// Whether a device's memory is part of the pod's: a physical GPU, or a MIG device whose GPU
/// is not among `devices` (a MIG device of a sampled GPU is in that GPU's memory already; one
/// whose GPU is not known is left out).
fn counts_for_pod_memory(info: &DeviceInfo, sampled: impl Fn(&str) -> bool) -> bool {
    if !is_mig(info) {
        return true;
    }
    info.mig
        .as_ref()
        .is_some_and(|m| !sampled(m.parent_uuid.as_str()))
}

fn max_opt(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn bit(name: &str) -> u64 {
    clocks_event_reasons::bit(name)
}

impl GpuAcc {
    fn new(info: Arc<DeviceInfo>, pools: PoolParams) -> Self {
        Self {
            info,
            efficiency: EfficiencyAcc::new(pools),
            first: None,
            last: None,
            taken: 0,
            missed: 0,
            held: None,
            utilization: Histogram::default(),
            busy_s: 0.0,
            memory_used: Stats::default(),
            memory_total: None,
            memory_peak_ratio: None,
            energy: TotalCounter::default(),
            energy_span: None,
            ecc: [TotalCounter::default(); 2],
            lost: 0,
            lost_at: None,
            power: Stats::default(),
            power_integrated_mj: 0.0,
            power_integrated_s: 0.0,
            temperature_gpu_max: None,
            temperature_memory_max: None,
            reasons_known_s: 0.0,
            reason_s: [0.0; CLOCKS_EVENT_REASONS.len()],
            held_back_s: [0.0; HELD_BACK.len()],
            sharing: None,
        }
    }

    /// Ends the previous sample's hold at `now` (at most `cap`).
    fn close_hold(&mut self, now: Instant, cap: Duration) {
        let Some(h) = self.held.take() else {
            return;
        };
        let dt = now.saturating_duration_since(h.at).min(cap).as_secs_f64();
        if h.utilization.is_some_and(|u| u > 0) {
            self.busy_s += dt;
        }
        if let Some(r) = h.reasons {
            self.reasons_known_s += dt;
            for (i, b) in CLOCKS_EVENT_REASONS.iter().map(|r| r.bit).enumerate() {
                if r & b != 0 {
                    self.reason_s[i] += dt;
                }
            }
            for (i, t) in self.held_back_s.iter_mut().enumerate() {
                if r & held_back_mask(i) != 0 {
                    *t += dt;
                }
            }
        }
        if let Some(p) = h.power_mw {
            self.power_integrated_mj += f64::from(p) * dt;
            self.power_integrated_s += dt;
        }
    }

    fn add(&mut self, s: &DeviceSample, at: Instant, cap: Duration) {
        self.close_hold(at, cap);
        self.efficiency.add(s, at, cap);
        self.first.get_or_insert(at);
        self.last = Some(at);
        if s.sharing.is_some() {
            self.sharing = s.sharing;
        }
        if s.state == DeviceState::Lost {
            self.lost += 1;
            self.lost_at.get_or_insert(at);
        }
        if s.answered_nothing() {
            self.missed += 1;
            // The energy counter may still have been read at this tick (its own cadence).
            if let Some(mj) = s.energy_millijoules {
                self.add_energy(mj, at);
            }
            return;
        }
        self.taken += 1;
        self.held = Some(Held {
            at,
            utilization: s.utilization_gpu_percent,
            reasons: s.clocks_event_reasons,
            power_mw: s.power_milliwatts,
        });
        if let Some(u) = s.utilization_gpu_percent {
            self.utilization.add(u);
        }
        if let Some(total) = s.memory_total_bytes {
            self.memory_total = Some(total);
        }
        if let Some(used) = s.memory_used_bytes {
            if self.memory_used.max.is_none_or(|m| used > m) {
                self.memory_peak_ratio = s.memory_used_ratio();
            }
            self.memory_used.add(used);
        }
        if let Some(mj) = s.energy_millijoules {
            self.add_energy(mj, at);
        }
        for (c, v) in self
            .ecc
            .iter_mut()
            .zip([s.ecc_uncorrected_total, s.ecc_corrected_total])
        {
            if let Some(v) = v {
                c.add(v);
            }
        }
        if let Some(p) = s.power_milliwatts {
            self.power.add(u64::from(p));
        }
        self.temperature_gpu_max = max_opt(self.temperature_gpu_max, s.temperature_gpu_celsius);
        self.temperature_memory_max =
            max_opt(self.temperature_memory_max, s.temperature_memory_celsius);
    }

    /// One energy counter reading at `at` (after this tick's hold was closed, so the power
    /// integral runs to `at`).
    fn add_energy(&mut self, mj: u64, at: Instant) {
        self.energy.add(mj);
        let now = PowerAt {
            mj: self.power_integrated_mj,
            covered_s: self.power_integrated_s,
            at,
        };
        self.energy_span = Some(
            self.energy_span
                .map_or((now, now), |(first, _)| (first, now)),
        );
    }

    /// The power readings integrated over the span the energy counter covered (joules), and
    /// whether the counter agrees with it ([`ENERGY_CHECK_TOLERANCE`], or the energy of one
    /// `interval` at the span's mean power when larger); `None` when not checked (energy
    /// from power itself, a counter reset, power covering less than 90 % of the span).
    fn energy_check(&self, interval: Duration) -> Option<(f64, bool)> {
        let (first, last) = self.energy_span?;
        if self.energy.readings < 2 || self.energy.resets > 0 {
            return None;
        }
        let span = last.at.saturating_duration_since(first.at).as_secs_f64();
        let covered = last.covered_s - first.covered_s;
        if span <= 0.0 || covered < 0.9 * span {
            return None;
        }
        let integral = joules_from_millijoules(last.mj - first.mj);
        let counter = joules_from_millijoules(self.energy.sum as f64);
        let resolution = integral / covered * interval.as_secs_f64();
        let allowed = (ENERGY_CHECK_TOLERANCE * integral).max(resolution);
        Some((integral, (counter - integral).abs() <= allowed))
    }

    /// Joules and where they come from.
    fn energy_j(&self) -> Option<(f64, EnergySource)> {
        if self.energy.readings >= 2 {
            Some((
                joules_from_millijoules(self.energy.sum as f64),
                EnergySource::Counter,
            ))
        } else if self.power_integrated_s > 0.0 {
            Some((
                joules_from_millijoules(self.power_integrated_mj),
                EnergySource::IntegratedPower,
            ))
        } else {
            None
        }
    }

    /// Whether clock-event reasons were ever answered.
    fn reasons_known(&self) -> bool {
        self.reasons_known_s > 0.0 || self.held.and_then(|h| h.reasons).is_some()
    }

    /// The GPU's summary; `run_start` is the run's first sample, `interval` the sample
    /// interval.
    fn summary(
        &self,
        xids: Option<&BTreeMap<u64, u64>>,
        price: Option<f64>,
        run_start: Option<Instant>,
        interval: Duration,
    ) -> Summary {
        let wall = match (self.first, self.last) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        let energy = self.energy_j();
        let check = self
            .energy_check(interval)
            .filter(|_| energy.is_some_and(|(_, s)| s == EnergySource::Counter));
        let known = self.reasons_known();
        let held = |i: usize| known.then_some(self.held_back_s[i]);
        Summary {
            wall_time_s: wall,
            samples_taken: self.taken,
            samples_missed: self.missed,
            samples_lost: self.lost,
            lost_at_s: self
                .lost_at
                .zip(run_start.or(self.first))
                .map(|(l, s)| l.saturating_duration_since(s).as_secs_f64()),
            busy_gpu_s: (self.utilization.count() > 0).then_some(self.busy_s),
            utilization_mean: self.utilization.mean(),
            utilization_p95: self.utilization.percentile(0.95),
            memory_used_peak_bytes: self.memory_used.max,
            memory_used_mean_bytes: self.memory_used.mean().map(|m| m.round() as u64),
            memory_total_bytes: self.memory_total,
            memory_used_peak_ratio: self.memory_peak_ratio,
            energy_j: energy.map(|(j, _)| j),
            energy_kwh: energy.map(|(j, _)| j / JOULES_PER_KWH),
            energy_source: energy.map(|(_, s)| s),
            energy_counter_resets: self.energy.resets,
            energy_power_integral_j: check.map(|(j, _)| j),
            energy_counter_agrees: check.map(|(_, ok)| ok),
            ecc_uncorrected_errors: self.ecc[0].increase(),
            ecc_corrected_errors: self.ecc[1].increase(),
            power_mean_w: self.power.mean().map(watts_from_milliwatts),
            power_peak_w: self.power.max.map(|mw| watts_from_milliwatts(mw as f64)),
            temperature_gpu_peak_c: self.temperature_gpu_max,
            temperature_memory_peak_c: self.temperature_memory_max,
            power_capped_s: held(0),
            thermal_slowdown_s: held(1),
            hw_slowdown_s: held(2),
            clocks_event_s: CLOCKS_EVENT_REASONS
                .iter()
                .zip(self.reason_s.iter())
                .filter(|(_, s)| **s > 0.0)
                .map(|(r, s)| (r.value, *s))
                .collect(),
            xid_count: xid_strings(xids),
            efficiency: self.efficiency.summary(wall, price, !is_mig(&self.info)),
        }
    }
}

fn xid_strings(xids: Option<&BTreeMap<u64, u64>>) -> BTreeMap<String, u64> {
    xids.map(|m| m.iter().map(|(k, v)| (k.to_string(), *v)).collect())
        .unwrap_or_default()
}

/// Everything the report needs, accumulated sample by sample in bounded memory.
///
/// Feed it every snapshot in order ([`RunAccumulator::add`]), XIDs as they happen
/// ([`RunAccumulator::record_xid`]), and build the report at the end
/// ([`RunAccumulator::report`]). The stream is taken to start at tick 1: any earlier or
/// skipped [`Snapshot::seq`] is a snapshot the queue dropped.
#[derive(Debug)]
pub struct RunAccumulator {
    sample_interval: Duration,
    /// Export and GPM intervals: the first GPM window ends one GPM interval after the first
    /// export tick, at an export tick.
    first_gpm_window: Duration,
    /// The longest time one sample's value is held: until it is stale
    /// ([`Timing::max_sample_age`]).
    hold_cap: Duration,
    price_per_gpu_hour: Option<f64>,
    pools: PoolParams,
    first: Option<(SystemTime, Instant)>,
    last: Option<(SystemTime, Instant)>,
    ticks: u64,
    dropped: u64,
    last_seq: u64,
    gpus: Vec<GpuAcc>,
    by_uuid: HashMap<String, usize>,
    pod_memory_used: Stats,
    pod_power: Stats,
    xids: BTreeMap<String, BTreeMap<u64, u64>>,
    /// Every GPU's readings as min/max buckets, for the HTML page (only when asked for).
    curves: Option<Curves>,
}

impl RunAccumulator {
    /// An empty accumulator for a sampler on `timing`.
    pub fn new(timing: &Timing) -> Self {
        Self {
            sample_interval: timing.sample_interval,
            first_gpm_window: timing.slow_intervals.gpm + timing.export_interval,
            hold_cap: timing.max_sample_age,
            price_per_gpu_hour: None,
            pools: PoolParams::default(),
            first: None,
            last: None,
            ticks: 0,
            dropped: 0,
            last_seq: 0,
            gpus: Vec::new(),
            by_uuid: HashMap::new(),
            pod_memory_used: Stats::default(),
            pod_power: Stats::default(),
            xids: BTreeMap::new(),
            curves: None,
        }
    }

    /// Also keeps every GPU's curves for the HTML page ([`Curves`], bounded memory).
    pub fn with_curves(mut self) -> Self {
        self.curves = Some(Curves::new(None, self.sample_interval.as_secs_f64()));
        self
    }

    /// The curves kept so far (`None` unless [`RunAccumulator::with_curves`]).
    pub fn curves(&self) -> Option<&Curves> {
        self.curves.as_ref()
    }

    /// Prices the run (`cost`, `idle_cost`) at `price` per GPU-hour.
    pub fn with_price_per_gpu_hour(mut self, price: Option<f64>) -> Self {
        self.price_per_gpu_hour = price;
        self
    }

    /// Recognizes preallocated memory with these parameters (the `memory_preallocated`
    /// rule's settings, [`crate::rules::pool_params`]) for `memory_pattern`.
    pub fn with_pool_params(mut self, pools: PoolParams) -> Self {
        self.pools = pools;
        self
    }

    /// Adds one snapshot (the next one the subscription delivered).
    pub fn add(&mut self, snap: &Snapshot) {
        let gap = snap.seq.saturating_sub(self.last_seq + 1);
        self.last_seq = self.last_seq.max(snap.seq);
        self.dropped += gap;
        self.ticks += 1;
        self.first
            .get_or_insert((snap.taken_at, snap.taken_instant));
        self.last = Some((snap.taken_at, snap.taken_instant));
        let cap = self.hold_cap;
        // Summed only when every device it covers answered (`None` otherwise).
        let mut memory_sum: Option<u64> = Some(0);
        let mut memory_units = 0;
        let mut power_sum: Option<u64> = Some(0);
        let mut physical = 0;
        for s in &snap.devices {
            let i = match self.by_uuid.get(&s.info.uuid) {
                Some(i) => *i,
                None => {
                    self.gpus.push(GpuAcc::new(s.info.clone(), self.pools));
                    self.by_uuid
                        .insert(s.info.uuid.clone(), self.gpus.len() - 1);
                    self.gpus.len() - 1
                }
            };
            if let Some(c) = &mut self.curves {
                c.add(&s.info.uuid, snap.taken_at, &Point::of_sample(s));
            }
            let gpu = &mut self.gpus[i];
            gpu.missed += gap;
            gpu.add(s, snap.taken_instant, cap);
            if counts_for_pod_memory(&s.info, |u| snap.devices.iter().any(|d| d.info.uuid == u)) {
                memory_units += 1;
                memory_sum = memory_sum
                    .zip(s.memory_used_bytes)
                    .map(|(a, used)| a + used);
            }
            if is_mig(&s.info) {
                continue;
            }
            physical += 1;
            power_sum = power_sum
                .zip(s.power_milliwatts)
                .map(|(a, p)| a + u64::from(p));
        }
        if let Some(m) = memory_sum.filter(|_| memory_units > 0) {
            self.pod_memory_used.add(m);
        }
        if let Some(p) = power_sum.filter(|_| physical > 0) {
            self.pod_power.add(p);
        }
    }

    /// Counts one XID error (`nvmlEventTypeXidCriticalError`, `eventData` = the code) on the
    /// GPU with this UUID (for a MIG instance, its parent GPU's UUID, as NVML reports it).
    /// The hook for the event watcher; until it calls this, `xid_count` stays empty.
    pub fn record_xid(&mut self, gpu_uuid: &str, xid: u64) {
        *self
            .xids
            .entry(gpu_uuid.to_string())
            .or_default()
            .entry(xid)
            .or_default() += 1;
    }

    /// Snapshots received so far.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// The report so far, with `resource` as its resource attributes.
    pub fn report(&self, resource: BTreeMap<String, String>) -> RunReport {
        let price = self.price_per_gpu_hour;
        let run_start = self.first.map(|(_, i)| i);
        let gpus: Vec<GpuSummary> = self
            .gpus
            .iter()
            .map(|g| GpuSummary {
                index: g.info.index,
                uuid: g.info.uuid.clone(),
                pci_bus_id: g.info.pci_bus_id.clone(),
                name: g.info.name.clone(),
                sharing: g.sharing.map(Sharing::as_str),
                memory_pattern: g.efficiency.pattern(),
                memory_pool_bytes: g.efficiency.pool_level(),
                summary: g.summary(
                    self.xids.get(&g.info.uuid),
                    price,
                    run_start,
                    self.sample_interval,
                ),
            })
            .collect();
        let mut pod = self.pod_summary(&gpus);
        pod.efficiency = efficiency::pod(
            &self
                .gpus
                .iter()
                .zip(&gpus)
                .map(|(g, s)| (&g.efficiency, &s.summary.efficiency, !is_mig(&g.info)))
                .collect::<Vec<_>>(),
            price,
        );
        let mut notes: Vec<String> = Vec::new();
        for (g, s) in self.gpus.iter().zip(&gpus) {
            for note in self.notes(g, &s.summary) {
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
        }
        RunReport {
            event_name: EVENT_NAME,
            started_at: self.first.map(|(t, _)| rfc3339(t)),
            ended_at: self.last.map(|(t, _)| rfc3339(t)),
            sample_interval_s: self.sample_interval.as_secs_f64(),
            ticks: self.ticks,
            ticks_dropped: self.dropped,
            price_per_gpu_hour: price,
            notes,
            job: super::job::job_identity(&resource),
            resource,
            pod,
            gpus,
            events: Vec::new(),
            events_dropped: 0,
            events_undelivered: 0,
        }
    }

    /// What the figures of GPU `g` (its summary `s`) cannot say, in words: a lost GPU, why it
    /// has no GPM figures (what happened, not a guess), an energy counter that disagrees with
    /// the power readings.
    fn notes(&self, g: &GpuAcc, s: &Summary) -> Vec<String> {
        let label = crate::rules::rule::device_label(&g.info);
        let mut notes = Vec::new();
        if let Some(at) = s.lost_at_s {
            notes.push(format!(
                "{label} was lost (NVML_ERROR_GPU_IS_LOST or RESET_REQUIRED) {} into the run: {} samples not answered; its figures cover the time before",
                duration(at),
                s.samples_lost
            ));
        }
        if !g.efficiency.has_gpm() {
            let answered = match (g.first, g.lost_at.or(g.last)) {
                (Some(a), Some(b)) => b.saturating_duration_since(a),
                _ => Duration::ZERO,
            };
            let why = match (g.info.gpm_supported, s.lost_at_s) {
                (Some(false), _) => "GPM is not supported on it (nvmlGpmQueryDeviceSupport: Hopper and newer; on a MIG device, NVML must also name its GPU instance)".to_string(),
                (_, Some(at)) => format!(
                    "it was lost {} into the run, before its first GPM window ended",
                    duration(at)
                ),
                (Some(true), _) if answered < self.first_gpm_window => format!(
                    "the run ended {} after its first sample, before its first GPM window (GPU_SIDECAR_GPM_INTERVAL after the first export) ended",
                    duration(answered.as_secs_f64())
                ),
                (Some(true), _) => "GPM answered no reading during the run (the agent's log names the failing nvmlGpm call)".to_string(),
                (None, _) => "whether it supports GPM was not asked (GPM needs Hopper or newer)".to_string(),
            };
            notes.push(format!(
                "{label} gave no GPM reading: {why}; its profiling figures (sm_activity, tensor_activity, dram_activity, tensor_active_share_of_busy, ...) are null"
            ));
        }
        if let (Some(false), Some(integral), Some(counter)) = (
            s.energy_counter_agrees,
            s.energy_power_integral_j,
            s.energy_j,
        ) {
            notes.push(format!(
                "{label}: its energy counter (nvmlDeviceGetTotalEnergyConsumption) counted {counter:.0} J while its power readings (nvmlDeviceGetPowerUsage) add up to {integral:.0} J over the same span: they disagree by more than {:.0} %, so energy_j (from the counter) is doubtful",
                ENERGY_CHECK_TOLERANCE * 100.0
            ));
        }
        notes
    }

    /// The pod's summary, from the accumulators and the GPUs' summaries (`gpus`, in the same
    /// order).
    fn pod_summary(&self, gpus: &[GpuSummary]) -> Summary {
        let wall = match (self.first, self.last) {
            (Some((_, a)), Some((_, b))) => b.saturating_duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        let physical: Vec<&GpuAcc> = self.gpus.iter().filter(|g| !is_mig(&g.info)).collect();
        let mut utilization = Histogram::default();
        for g in &self.gpus {
            utilization.merge(&g.utilization);
        }
        let sum_known = |f: &dyn Fn(&GpuAcc) -> Option<f64>| -> Option<f64> {
            self.gpus
                .iter()
                .filter_map(f)
                .fold(None, |acc, v| Some(acc.unwrap_or(0.0) + v))
        };
        let energies: Vec<Option<(f64, EnergySource)>> =
            physical.iter().map(|g| g.energy_j()).collect();
        let energy = if energies.is_empty() || energies.iter().any(Option::is_none) {
            None
        } else {
            let j: f64 = energies.iter().flatten().map(|(j, _)| j).sum();
            let first = energies[0].map(|(_, s)| s);
            let source = if energies.iter().all(|e| e.map(|(_, s)| s) == first) {
                first.unwrap_or(EnergySource::Mixed)
            } else {
                EnergySource::Mixed
            };
            Some((j, source))
        };
        // The same devices as the per-tick memory sums.
        let memory_units: Vec<&GpuAcc> = self
            .gpus
            .iter()
            .filter(|g| counts_for_pod_memory(&g.info, |u| self.by_uuid.contains_key(u)))
            .collect();
        let memory_total = memory_units
            .iter()
            .map(|g| g.memory_total)
            .try_fold(0u64, |a, t| t.map(|t| a + t))
            .filter(|_| !memory_units.is_empty());
        let held =
            |i: usize| sum_known(&|g: &GpuAcc| g.reasons_known().then_some(g.held_back_s[i]));
        // Physical GPUs' summaries (energy and ECC belong to them).
        let physical_summaries: Vec<&Summary> = gpus
            .iter()
            .filter(|g| !g.uuid.starts_with("MIG-"))
            .map(|g| &g.summary)
            .collect();
        let sum_u64 = |f: fn(&Summary) -> Option<u64>| {
            physical_summaries
                .iter()
                .filter_map(|s| f(s))
                .fold(None, |a: Option<u64>, v| Some(a.unwrap_or(0) + v))
        };
        let checks: Vec<bool> = physical_summaries
            .iter()
            .filter_map(|s| s.energy_counter_agrees)
            .collect();
        let mut clocks_event_s: BTreeMap<&'static str, f64> = BTreeMap::new();
        for g in &self.gpus {
            for (name, s) in CLOCKS_EVENT_REASONS
                .iter()
                .map(|r| r.value)
                .zip(g.reason_s.iter())
            {
                if *s > 0.0 {
                    *clocks_event_s.entry(name).or_default() += s;
                }
            }
        }
        let mut xids: BTreeMap<u64, u64> = BTreeMap::new();
        for per_gpu in self.xids.values() {
            for (code, n) in per_gpu {
                *xids.entry(*code).or_default() += n;
            }
        }
        Summary {
            wall_time_s: wall,
            samples_taken: self.gpus.iter().map(|g| g.taken).sum(),
            samples_missed: self.gpus.iter().map(|g| g.missed).sum(),
            samples_lost: self.gpus.iter().map(|g| g.lost).sum(),
            lost_at_s: gpus
                .iter()
                .filter_map(|g| g.summary.lost_at_s)
                .reduce(f64::min),
            busy_gpu_s: sum_known(&|g: &GpuAcc| (g.utilization.count() > 0).then_some(g.busy_s)),
            utilization_mean: utilization.mean(),
            utilization_p95: utilization.percentile(0.95),
            memory_used_peak_bytes: self.pod_memory_used.max,
            memory_used_mean_bytes: self.pod_memory_used.mean().map(|m| m.round() as u64),
            memory_total_bytes: memory_total,
            memory_used_peak_ratio: self
                .pod_memory_used
                .max
                .zip(memory_total.filter(|t| *t > 0))
                .map(|(u, t)| u as f64 / t as f64),
            energy_j: energy.map(|(j, _)| j),
            energy_kwh: energy.map(|(j, _)| j / JOULES_PER_KWH),
            energy_source: energy.map(|(_, s)| s),
            energy_counter_resets: physical.iter().map(|g| g.energy.resets).sum(),
            energy_power_integral_j: physical_summaries
                .iter()
                .filter_map(|s| s.energy_power_integral_j)
                .reduce(|a, b| a + b),
            energy_counter_agrees: (!checks.is_empty()).then(|| checks.iter().all(|ok| *ok)),
            ecc_uncorrected_errors: sum_u64(|s| s.ecc_uncorrected_errors),
            ecc_corrected_errors: sum_u64(|s| s.ecc_corrected_errors),
            power_mean_w: self.pod_power.mean().map(watts_from_milliwatts),
            power_peak_w: self
                .pod_power
                .max
                .map(|mw| watts_from_milliwatts(mw as f64)),
            temperature_gpu_peak_c: self
                .gpus
                .iter()
                .fold(None, |m, g| max_opt(m, g.temperature_gpu_max)),
            temperature_memory_peak_c: self
                .gpus
                .iter()
                .fold(None, |m, g| max_opt(m, g.temperature_memory_max)),
            power_capped_s: held(0),
            thermal_slowdown_s: held(1),
            hw_slowdown_s: held(2),
            clocks_event_s,
            xid_count: xid_strings(Some(&xids)),
            efficiency: Efficiency::default(),
        }
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests;
