//! The run report: what a training run cost and how well it used the GPUs, computed from
//! every sample the agent took, not from the exported (last-value) points.
//!
//! [`RunAccumulator`] is the pure part: fed each [`Snapshot`] in order, it keeps running
//! sums, peaks, a utilization histogram and the energy counter, in memory that does not grow
//! with the length of the run. [`RunAccumulator::report`] turns that into a [`RunReport`]:
//! one [`Summary`] per GPU and one for the pod. [`RunReporter`] runs an accumulator on the
//! thread `run-report`, a consumer of the [`Hub`].
//!
//! How the numbers are made:
//! - **Samples.** A GPU's sample is *taken* when NVML answered at least one reading for it
//!   at that tick; it is *missed* when NVML answered nothing for it (every call failed, or
//!   the GPU was lost), and for every tick the subscription queue dropped.
//! - **Time-weighted values** (busy time, time held back, integrated power): each sample's
//!   value holds until the GPU's next tick, at most until it is stale (two sample intervals,
//!   at least 1 s: [`crate::sampling::cadence::stale_after`]; a longer gap, e.g. NVML
//!   re-initializing, is not attributed to anything). The last sample holds for no time:
//!   the run ends there.
//! - **Means and p95** are over samples (the sampler ticks at a fixed interval). p95 is the
//!   nearest-rank percentile of the integer utilization percentages.
//! - **Energy** is the difference of `nvmlDeviceGetTotalEnergyConsumption` (the sum of its
//!   non-negative steps: a counter reset, e.g. a driver reload, is skipped, not subtracted).
//!   Only when the counter gave fewer than two readings is power integrated over time
//!   instead; `energy_source` says which.
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
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::logs::Severity;
use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;
use serde::Serialize;

use super::efficiency::{self, Efficiency, EfficiencyAcc, MemoryPattern};
use crate::config::OutputTarget;
use crate::rules::preallocation::PoolParams;
use crate::sampling::consumer::{Consumer, ConsumerThread};
use crate::sampling::{
    DeviceEvent, DeviceEventKind, DeviceInfo, DeviceSample, GroupDuration, Hub, Interest, Sharing,
    Snapshot, CLOCKS_EVENT_REASONS,
};
use crate::telemetry::events::{Event, Events};

/// `event.name` of the report's log record, and the value of the `event.name` key that
/// starts the JSON document (so that it can be told apart from OTLP/JSON lines on stdout).
pub const EVENT_NAME: &str = "gpu.run.report";

/// Prefix of the event attributes that repeat the pod summary (`gpu.run.energy_j`, …).
pub const ATTRIBUTE_PREFIX: &str = "gpu.run.";

const JOULES_PER_KWH: f64 = 3.6e6;

/// Where a report's energy figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// Difference of the energy counter (`nvmlDeviceGetTotalEnergyConsumption`).
    Counter,
    /// Power (`nvmlDeviceGetPowerUsage`) integrated over time: the counter was not available.
    IntegratedPower,
    /// Pod only: some GPUs by counter, others by integrated power.
    Mixed,
}

/// Summary of one GPU, or of the whole pod (then time and energy are summed over GPUs).
/// `None` (JSON `null`) = NVML never gave the value during the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Seconds from the first to the last sample (pod: the first and last tick).
    pub wall_time_s: f64,
    /// Samples in which NVML answered at least one reading.
    pub samples_taken: u64,
    /// Ticks where NVML answered nothing for the GPU (errors, lost) plus ticks the queue
    /// dropped.
    pub samples_missed: u64,
    /// GPU-seconds with utilization above 0 (`nvmlDeviceGetUtilizationRates.gpu`).
    pub busy_gpu_s: Option<f64>,
    /// Mean GPU utilization over samples, ratio 0..1.
    pub utilization_mean: Option<f64>,
    /// 95th percentile (nearest rank) of GPU utilization, ratio 0..1.
    pub utilization_p95: Option<f64>,
    /// Peak memory used, bytes (`nvmlDeviceGetMemoryInfo_v2.used`, reserved memory not
    /// included). Pod: the peak of the per-tick sum over GPUs.
    pub memory_used_peak_bytes: Option<u64>,
    /// Mean memory used over samples, bytes.
    pub memory_used_mean_bytes: Option<u64>,
    /// Total memory, bytes (pod: sum over GPUs).
    pub memory_total_bytes: Option<u64>,
    /// Peak used as a share of total, ratio 0..1.
    pub memory_used_peak_ratio: Option<f64>,
    /// Energy used during the run, joules (mJ resolution).
    pub energy_j: Option<f64>,
    /// The same in kilowatt-hours.
    pub energy_kwh: Option<f64>,
    /// How `energy_j` was obtained.
    pub energy_source: Option<EnergySource>,
    /// Counter decreases skipped (driver reload); 0 normally.
    pub energy_counter_resets: u64,
    /// Mean power over samples, watts (pod: mean of the per-tick sum).
    pub power_mean_w: Option<f64>,
    /// Peak power, watts (pod: peak of the per-tick sum).
    pub power_peak_w: Option<f64>,
    /// Peak GPU die temperature, °C.
    pub temperature_gpu_peak_c: Option<u32>,
    /// Peak HBM temperature, °C (`NVML_FI_DEV_MEMORY_TEMP`).
    pub temperature_memory_peak_c: Option<u32>,
    /// Seconds with clocks held back by the software power cap (`sw_power_cap`).
    pub power_capped_s: Option<f64>,
    /// Seconds held back by thermal slowdown (`sw_thermal_slowdown`, `hw_thermal_slowdown`).
    pub thermal_slowdown_s: Option<f64>,
    /// Seconds held back by hardware slowdown (`hw_slowdown`, `hw_power_brake_slowdown`).
    pub hw_slowdown_s: Option<f64>,
    /// Seconds per clock-event reason seen (names of [`CLOCKS_EVENT_REASONS`]).
    pub clocks_event_s: BTreeMap<&'static str, f64>,
    /// XID errors by code (decimal string) → count.
    pub xid_count: BTreeMap<String, u64>,
    /// Profiling (GPM) figures, idle time holding memory and cost
    /// ([`super::efficiency`]).
    #[serde(flatten)]
    pub efficiency: Efficiency,
}

/// One GPU's summary with its identity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSummary {
    /// NVML index: the node-wide number `nvidia-smi` shows, not the training process's
    /// `cuda:N` (which counts the GPUs visible to it from 0, in `CUDA_DEVICE_ORDER`); match
    /// GPUs by `uuid` or `pci_bus_id`.
    pub index: u32,
    /// GPU (or MIG) UUID, the metrics' `hw.id`.
    pub uuid: String,
    /// PCI bus id (`nvmlDeviceGetPciInfo_v3`), as `nvidia-smi` and `/sys/bus/pci` show it.
    pub pci_bus_id: Option<String>,
    /// Product name, the metrics' `hw.model`.
    pub name: Option<String>,
    /// `time_slicing` or `mps` when the GPU was shared with other pods during the run (its
    /// figures are then the whole GPU's); `null` otherwise.
    pub sharing: Option<&'static str>,
    /// How its memory was used: `preallocated`, `growing` or `steady`; `null` when memory
    /// was never read.
    pub memory_pattern: Option<MemoryPattern>,
    /// The numbers.
    #[serde(flatten)]
    pub summary: Summary,
}

/// The whole report, serialized as one JSON object (one line).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// Always [`EVENT_NAME`].
    #[serde(rename = "event.name")]
    pub event_name: &'static str,
    /// First sample, RFC 3339 UTC (millisecond precision); `None` when no sample was taken.
    pub started_at: Option<String>,
    /// Last sample (the final one taken at shutdown).
    pub ended_at: Option<String>,
    /// The sample interval, seconds.
    pub sample_interval_s: f64,
    /// Snapshots the report received.
    pub ticks: u64,
    /// Snapshots the subscription queue dropped (also counted in `samples_missed`).
    pub ticks_dropped: u64,
    /// `GPU_SIDECAR_PRICE_PER_GPU_HOUR`, the price behind `cost` and `idle_cost`.
    pub price_per_gpu_hour: Option<f64>,
    /// What the figures cannot say, once each (e.g. a GPU without GPM).
    pub notes: Vec<String>,
    /// The OTel resource (`service.name`, `k8s.pod.name`, `host.name`, …).
    pub resource: BTreeMap<String, String>,
    /// Pod totals.
    pub pod: Summary,
    /// One per GPU, in NVML index order of first appearance.
    pub gpus: Vec<GpuSummary>,
}

/// Integer-percent histogram: exact mean and percentiles in fixed memory.
#[derive(Debug, Clone)]
pub(super) struct Histogram([u64; 101]);

impl Default for Histogram {
    fn default() -> Self {
        Self([0; 101])
    }
}

impl Histogram {
    pub(super) fn add(&mut self, percent: u32) {
        self.0[percent.min(100) as usize] += 1;
    }

    pub(super) fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    fn count(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Mean as a ratio 0..1.
    fn mean(&self) -> Option<f64> {
        let n = self.count();
        let sum: u64 = self.0.iter().enumerate().map(|(p, c)| p as u64 * c).sum();
        (n > 0).then(|| sum as f64 / n as f64 / 100.0)
    }

    /// Nearest-rank percentile `q` (0 < q ≤ 1) as a ratio 0..1.
    pub(super) fn percentile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (p, c) in self.0.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(p as f64 / 100.0);
            }
        }
        None
    }
}

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

/// Energy counter: sum of non-negative steps between consecutive readings.
#[derive(Debug, Clone, Copy, Default)]
struct EnergyCounter {
    last_mj: Option<u64>,
    readings: u64,
    sum_mj: u64,
    resets: u64,
}

impl EnergyCounter {
    fn add(&mut self, mj: u64) {
        if let Some(prev) = self.last_mj {
            if mj >= prev {
                self.sum_mj += mj - prev;
            } else {
                self.resets += 1;
            }
        }
        self.last_mj = Some(mj);
        self.readings += 1;
    }
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
    energy: EnergyCounter,
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
    CLOCKS_EVENT_REASONS
        .iter()
        .find(|(_, n)| *n == name)
        .map_or(0, |(b, _)| *b)
}

/// Rounds to `decimals` decimal places (presentation only).
fn round(x: f64, decimals: i32) -> f64 {
    let f = 10f64.powi(decimals);
    (x * f).round() / f
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
            energy: EnergyCounter::default(),
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
            for (i, (b, _)) in CLOCKS_EVENT_REASONS.iter().enumerate() {
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
        if s.answered_nothing() {
            self.missed += 1;
            // The energy counter may still have been read at this tick (its own cadence).
            if let Some(mj) = s.energy_millijoules {
                self.energy.add(mj);
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
                self.memory_peak_ratio = s
                    .memory_total_bytes
                    .filter(|t| *t > 0)
                    .map(|t| used as f64 / t as f64);
            }
            self.memory_used.add(used);
        }
        if let Some(mj) = s.energy_millijoules {
            self.energy.add(mj);
        }
        if let Some(p) = s.power_milliwatts {
            self.power.add(u64::from(p));
        }
        self.temperature_gpu_max = max_opt(self.temperature_gpu_max, s.temperature_gpu_celsius);
        self.temperature_memory_max =
            max_opt(self.temperature_memory_max, s.temperature_memory_celsius);
    }

    /// Joules and where they come from.
    fn energy_j(&self) -> Option<(f64, EnergySource)> {
        if self.energy.readings >= 2 {
            Some((self.energy.sum_mj as f64 / 1000.0, EnergySource::Counter))
        } else if self.power_integrated_s > 0.0 {
            Some((
                self.power_integrated_mj / 1000.0,
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

    fn summary(&self, xids: Option<&BTreeMap<u64, u64>>, price: Option<f64>) -> Summary {
        let wall = match (self.first, self.last) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        let energy = self.energy_j();
        let known = self.reasons_known();
        let held = |i: usize| known.then(|| round(self.held_back_s[i], 3));
        Summary {
            wall_time_s: round(wall, 3),
            samples_taken: self.taken,
            samples_missed: self.missed,
            busy_gpu_s: (self.utilization.count() > 0).then(|| round(self.busy_s, 3)),
            utilization_mean: self.utilization.mean().map(|m| round(m, 4)),
            utilization_p95: self.utilization.percentile(0.95),
            memory_used_peak_bytes: self.memory_used.max,
            memory_used_mean_bytes: self.memory_used.mean().map(|m| m.round() as u64),
            memory_total_bytes: self.memory_total,
            memory_used_peak_ratio: self.memory_peak_ratio.map(|r| round(r, 4)),
            energy_j: energy.map(|(j, _)| round(j, 3)),
            energy_kwh: energy.map(|(j, _)| round(j / JOULES_PER_KWH, 9)),
            energy_source: energy.map(|(_, s)| s),
            energy_counter_resets: self.energy.resets,
            power_mean_w: self.power.mean().map(|mw| round(mw / 1000.0, 3)),
            power_peak_w: self.power.max.map(|mw| mw as f64 / 1000.0),
            temperature_gpu_peak_c: self.temperature_gpu_max,
            temperature_memory_peak_c: self.temperature_memory_max,
            power_capped_s: held(0),
            thermal_slowdown_s: held(1),
            hw_slowdown_s: held(2),
            clocks_event_s: CLOCKS_EVENT_REASONS
                .iter()
                .zip(self.reason_s.iter())
                .filter(|(_, s)| **s > 0.0)
                .map(|((_, name), s)| (*name, round(*s, 3)))
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
}

impl RunAccumulator {
    /// An empty accumulator for a sampler ticking every `sample_interval`.
    pub fn new(sample_interval: Duration) -> Self {
        Self {
            sample_interval,
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
        }
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

    /// The longest time one sample's value is held: until it is stale
    /// ([`crate::sampling::cadence::stale_after`]).
    fn hold_cap(&self) -> Duration {
        crate::sampling::cadence::stale_after(self.sample_interval)
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
        let cap = self.hold_cap();
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
                summary: g.summary(self.xids.get(&g.info.uuid), price),
            })
            .collect();
        let mut pod = self.pod_summary();
        pod.efficiency = efficiency::pod(
            &self
                .gpus
                .iter()
                .zip(&gpus)
                .map(|(g, s)| (&g.efficiency, &s.summary.efficiency, !is_mig(&g.info)))
                .collect::<Vec<_>>(),
            price,
        );
        let notes = self
            .gpus
            .iter()
            .filter(|g| !g.efficiency.has_gpm())
            .map(|g| {
                format!(
                    "{} gave no GPM reading (GPM needs Hopper or newer, nvmlGpmQueryDeviceSupport): its profiling figures (sm_activity, tensor_activity, dram_activity, tensor_active_share_of_busy, ...) are null",
                    crate::rules::engine::device_label(&g.info)
                )
            })
            .collect();
        RunReport {
            event_name: EVENT_NAME,
            started_at: self.first.map(|(t, _)| rfc3339(t)),
            ended_at: self.last.map(|(t, _)| rfc3339(t)),
            sample_interval_s: self.sample_interval.as_secs_f64(),
            ticks: self.ticks,
            ticks_dropped: self.dropped,
            price_per_gpu_hour: price,
            notes,
            resource,
            pod,
            gpus,
        }
    }

    fn pod_summary(&self) -> Summary {
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
        let held = |i: usize| {
            sum_known(&|g: &GpuAcc| g.reasons_known().then_some(g.held_back_s[i]))
                .map(|s| round(s, 3))
        };
        let mut clocks_event_s: BTreeMap<&'static str, f64> = BTreeMap::new();
        for g in &self.gpus {
            for ((_, name), s) in CLOCKS_EVENT_REASONS.iter().zip(g.reason_s.iter()) {
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
            wall_time_s: round(wall, 3),
            samples_taken: self.gpus.iter().map(|g| g.taken).sum(),
            samples_missed: self.gpus.iter().map(|g| g.missed).sum(),
            busy_gpu_s: sum_known(&|g: &GpuAcc| (g.utilization.count() > 0).then_some(g.busy_s))
                .map(|s| round(s, 3)),
            utilization_mean: utilization.mean().map(|m| round(m, 4)),
            utilization_p95: utilization.percentile(0.95),
            memory_used_peak_bytes: self.pod_memory_used.max,
            memory_used_mean_bytes: self.pod_memory_used.mean().map(|m| m.round() as u64),
            memory_total_bytes: memory_total,
            memory_used_peak_ratio: self
                .pod_memory_used
                .max
                .zip(memory_total.filter(|t| *t > 0))
                .map(|(u, t)| round(u as f64 / t as f64, 4)),
            energy_j: energy.map(|(j, _)| round(j, 3)),
            energy_kwh: energy.map(|(j, _)| round(j / JOULES_PER_KWH, 9)),
            energy_source: energy.map(|(_, s)| s),
            energy_counter_resets: physical.iter().map(|g| g.energy.resets).sum(),
            power_mean_w: self.pod_power.mean().map(|mw| round(mw / 1000.0, 3)),
            power_peak_w: self.pod_power.max.map(|mw| mw as f64 / 1000.0),
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
            clocks_event_s: clocks_event_s
                .into_iter()
                .map(|(k, v)| (k, round(v, 3)))
                .collect(),
            xid_count: xid_strings(Some(&xids)),
            efficiency: Efficiency::default(),
        }
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

impl RunReport {
    /// The report as one line of JSON (no trailing newline).
    pub fn to_json_line(&self) -> String {
        // Serializing plain structs of numbers, strings and maps with string keys cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The pod summary as event attributes `gpu.run.<field>` (absent values and the
    /// per-reason and XID maps left out; those are in the body), plus `gpu.run.gpu_count`.
    pub fn attributes(&self) -> Vec<KeyValue> {
        let mut out = vec![KeyValue::new(
            format!("{ATTRIBUTE_PREFIX}gpu_count"),
            self.gpus.len() as i64,
        )];
        if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(&self.pod) {
            for (k, v) in fields {
                let key = format!("{ATTRIBUTE_PREFIX}{k}");
                match v {
                    serde_json::Value::Number(n) => {
                        if let Some(i) = n.as_i64() {
                            out.push(KeyValue::new(key, i));
                        } else if let Some(f) = n.as_f64() {
                            out.push(KeyValue::new(key, f));
                        }
                    }
                    serde_json::Value::String(s) => out.push(KeyValue::new(key, s)),
                    _ => {}
                }
            }
        }
        out
    }

    /// The `gpu.run.report` event: body = the JSON document, attributes = the pod summary.
    pub fn event(&self) -> Event {
        Event {
            name: EVENT_NAME,
            severity: Severity::Info,
            body: self.to_json_line(),
            attributes: self.attributes(),
            time: None,
        }
    }

    /// Emits the event and writes the report to `target` (`-`: one line on stdout, else the
    /// file, replaced). A write error is logged; it never stops the shutdown.
    pub fn publish(&self, events: &Events, target: Option<&OutputTarget>) {
        events.emit(self.event());
        let line = self.to_json_line();
        match target {
            None => {}
            Some(OutputTarget::Stdout) => {
                let mut out = std::io::stdout().lock();
                if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
                    tracing::error!(error = %e, "cannot write the run report to stdout");
                }
            }
            Some(OutputTarget::Path(path)) => {
                if let Err(e) = std::fs::write(path, format!("{line}\n")) {
                    tracing::error!(path = %path.display(), error = %e, "cannot write the run report file (GPU_SIDECAR_REPORT_FILE)");
                }
            }
        }
        let p = &self.pod;
        tracing::info!(
            gpus = self.gpus.len(),
            wall_time_s = p.wall_time_s,
            samples_taken = p.samples_taken,
            samples_missed = p.samples_missed,
            utilization_mean = p.utilization_mean,
            energy_j = p.energy_j,
            "run report"
        );
    }
}

/// The resource's attributes as strings.
pub fn resource_map(resource: &Resource) -> BTreeMap<String, String> {
    resource
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The run report as a consumer of the hub: each snapshot, and each XID (counted on its
/// physical GPU), in order. The accumulator sits behind a lock only so that
/// [`RunReporter::finish`] can report what was received when the thread is late.
struct Accumulate(Arc<Mutex<RunAccumulator>>);

impl Accumulate {
    fn acc(&self) -> std::sync::MutexGuard<'_, RunAccumulator> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Consumer for Accumulate {
    const INTEREST: Interest = Interest::BOTH;

    fn snapshot(&mut self, snapshot: &Arc<Snapshot>, _: &[GroupDuration]) {
        self.acc().add(snapshot);
    }

    fn device_event(&mut self, event: &DeviceEvent) {
        if let DeviceEventKind::Xid(code) = event.kind {
            self.acc().record_xid(event.gpu_uuid(), code);
        }
    }
}

/// A [`RunAccumulator`] on the thread `run-report`, fed by a hub subscription.
pub struct RunReporter {
    acc: Arc<Mutex<RunAccumulator>>,
    thread: ConsumerThread,
}

impl RunReporter {
    /// Subscribes to `hub` (queue of [`super::QUEUE_CAPACITY`]) and starts the thread.
    /// Call before the sampler starts, so that no tick is missed.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(hub: &Arc<Hub>, sample_interval: Duration) -> Self {
        Self::start_with(hub, RunAccumulator::new(sample_interval))
    }

    /// As [`RunReporter::start`], with an accumulator set up by the caller (price, pool
    /// recognition).
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start_with(hub: &Arc<Hub>, acc: RunAccumulator) -> Self {
        let acc = Arc::new(Mutex::new(acc));
        let thread = ConsumerThread::start(
            "run-report",
            hub,
            super::QUEUE_CAPACITY,
            Accumulate(acc.clone()),
        );
        Self { acc, thread }
    }

    /// Ends the subscription, waits up to `timeout` for the queue to drain and builds the
    /// report. On timeout the report covers what was received so far.
    pub fn finish(self, timeout: Duration, resource: &Resource) -> RunReport {
        if !self.thread.stop(timeout) {
            tracing::warn!("the run report did not receive every sample before the shutdown bound");
        }
        self.acc
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .report(resource_map(resource))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::DeviceState;
    use std::time::UNIX_EPOCH;

    fn info(index: u32, uuid: &str) -> Arc<DeviceInfo> {
        Arc::new(DeviceInfo {
            index,
            uuid: uuid.into(),
            name: Some("NVIDIA H200".into()),
            serial: None,
            pci_bus_id: None,
            vbios_version: None,
            driver_version: None,
            mig: None,
        })
    }

    /// A sample with the fields the report reads.
    #[allow(clippy::too_many_arguments)]
    fn sample(
        info: &Arc<DeviceInfo>,
        util: Option<u32>,
        used: Option<u64>,
        total: Option<u64>,
        power_mw: Option<u32>,
        energy_mj: Option<u64>,
        temp: Option<u32>,
        reasons: Option<u64>,
    ) -> DeviceSample {
        let mut s = DeviceSample::empty(info.clone(), DeviceState::Ok);
        s.utilization_gpu_percent = util;
        s.memory_used_bytes = used;
        s.memory_total_bytes = total;
        s.power_milliwatts = power_mw;
        s.energy_millijoules = energy_mj;
        s.temperature_gpu_celsius = temp;
        s.clocks_event_reasons = reasons;
        s
    }

    struct Clock {
        base: Instant,
    }

    impl Clock {
        fn new() -> Self {
            Self {
                base: Instant::now(),
            }
        }

        fn snap(&self, seq: u64, t: f64, devices: Vec<DeviceSample>) -> Snapshot {
            Snapshot {
                taken_at: UNIX_EPOCH
                    + Duration::from_secs(1_800_000_000)
                    + Duration::from_secs_f64(t),
                taken_instant: self.base + Duration::from_secs_f64(t),
                seq,
                export: true,
                devices,
            }
        }
    }

    fn approx(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn energy_is_the_counter_difference_not_integrated_power() {
        let g = info(0, "GPU-a");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        // Power says 100 W, the counter says 250 J/s: the counter wins.
        for (k, e) in [1_000_000u64, 1_250_000, 1_500_000].into_iter().enumerate() {
            let s = sample(&g, Some(50), None, None, Some(100_000), Some(e), None, None);
            acc.add(&c.snap(k as u64 + 1, k as f64, vec![s]));
        }
        let r = acc.report(BTreeMap::new());
        let g0 = &r.gpus[0].summary;
        assert_eq!(g0.energy_j, Some(500.0));
        assert_eq!(g0.energy_source, Some(EnergySource::Counter));
        assert_eq!(g0.energy_kwh, Some(round(500.0 / 3.6e6, 9)));
        assert_eq!(g0.power_mean_w, Some(100.0));
        assert_eq!(r.pod.energy_j, Some(500.0));
        assert_eq!(r.pod.energy_source, Some(EnergySource::Counter));
    }

    #[test]
    fn without_a_counter_power_is_integrated_and_said_so() {
        let g = info(0, "GPU-a");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        for (k, p) in [300_000u32, 500_000, 700_000].into_iter().enumerate() {
            let s = sample(&g, None, None, None, Some(p), None, None, None);
            acc.add(&c.snap(k as u64 + 1, k as f64, vec![s]));
        }
        let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
        // Each value holds until the next tick: 300 W × 1 s + 500 W × 1 s; the last holds 0 s.
        assert!(approx(s.energy_j.unwrap(), 800.0, 1e-6), "{s:?}");
        assert_eq!(s.energy_source, Some(EnergySource::IntegratedPower));
        assert_eq!(s.power_peak_w, Some(700.0));
        assert_eq!(s.power_mean_w, Some(500.0));
    }

    #[test]
    fn a_counter_reset_is_skipped_not_subtracted() {
        let g = info(0, "GPU-a");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        for (k, e) in [5_000_000u64, 5_100_000, 20_000, 70_000]
            .into_iter()
            .enumerate()
        {
            let s = sample(&g, None, None, None, None, Some(e), None, None);
            acc.add(&c.snap(k as u64 + 1, k as f64, vec![s]));
        }
        let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
        assert_eq!(s.energy_j, Some(150.0));
        assert_eq!(s.energy_counter_resets, 1);
    }

    #[test]
    fn missed_samples_are_errors_lost_gpus_and_queue_drops() {
        let a = info(0, "GPU-a");
        let b = info(1, "GPU-b");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_millis(100));
        let ok = |i: &Arc<DeviceInfo>| sample(i, Some(10), None, None, None, None, None, None);
        acc.add(&c.snap(1, 0.0, vec![ok(&a), ok(&b)]));
        // Tick 2: GPU a answered nothing (every call failed), GPU b lost.
        acc.add(&c.snap(
            2,
            0.1,
            vec![
                DeviceSample::empty(a.clone(), DeviceState::Ok),
                DeviceSample::empty(b.clone(), DeviceState::Lost),
            ],
        ));
        // Ticks 3 and 4 dropped by the queue.
        acc.add(&c.snap(5, 0.4, vec![ok(&a), ok(&b)]));
        let r = acc.report(BTreeMap::new());
        assert_eq!((r.ticks, r.ticks_dropped), (3, 2));
        for g in &r.gpus {
            assert_eq!(
                (g.summary.samples_taken, g.summary.samples_missed),
                (2, 3),
                "{}",
                g.uuid
            );
        }
        assert_eq!((r.pod.samples_taken, r.pod.samples_missed), (4, 6));
    }

    #[test]
    fn held_back_categories_count_each_moment_once() {
        let g = info(0, "GPU-a");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        // 1 s power cap, 1 s both thermal bits, 1 s hw slowdown + power brake, 1 s idle.
        let masks = [0x4u64, 0x20 | 0x40, 0x8 | 0x80, 0x1, 0x0];
        for (k, m) in masks.into_iter().enumerate() {
            let s = sample(&g, None, None, None, None, None, None, Some(m));
            acc.add(&c.snap(k as u64 + 1, k as f64, vec![s]));
        }
        let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
        assert_eq!(s.power_capped_s, Some(1.0));
        assert_eq!(s.thermal_slowdown_s, Some(1.0));
        assert_eq!(s.hw_slowdown_s, Some(1.0));
        let expect: BTreeMap<&str, f64> = [
            ("sw_power_cap", 1.0),
            ("sw_thermal_slowdown", 1.0),
            ("hw_thermal_slowdown", 1.0),
            ("hw_slowdown", 1.0),
            ("hw_power_brake_slowdown", 1.0),
            ("gpu_idle", 1.0),
        ]
        .into();
        assert_eq!(s.clocks_event_s, expect);
        assert_eq!(s.wall_time_s, 4.0);
    }

    #[test]
    fn held_back_reasons_are_named_in_the_sampling_table() {
        for (category, reasons) in HELD_BACK {
            for r in reasons {
                assert_ne!(bit(r), 0, "{category}: {r} not in CLOCKS_EVENT_REASONS");
            }
        }
    }

    #[test]
    fn a_hold_lasts_at_most_two_intervals() {
        let g = info(0, "GPU-a");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        for (k, t) in [0.0, 1.0, 11.0].into_iter().enumerate() {
            let s = sample(&g, Some(100), None, None, None, None, None, Some(0x4));
            acc.add(&c.snap(k as u64 + 1, t, vec![s]));
        }
        let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
        assert_eq!(s.wall_time_s, 11.0);
        assert_eq!(s.busy_gpu_s, Some(3.0), "1 s + a 10 s gap capped at 2 s");
        assert_eq!(s.power_capped_s, Some(3.0));
    }

    #[test]
    fn utilization_mean_p95_busy_and_memory() {
        let g = info(0, "GPU-a");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        // 20 samples: utilization 0, 5, 10, …, 95 %; memory used grows 1 GiB per sample.
        let gib = 1u64 << 30;
        for k in 0..20u64 {
            let s = sample(
                &g,
                Some(k as u32 * 5),
                Some((k + 1) * gib),
                Some(80 * gib),
                None,
                None,
                Some(40 + k as u32 % 3),
                None,
            );
            acc.add(&c.snap(k + 1, k as f64, vec![s]));
        }
        let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
        let values: Vec<f64> = (0..20).map(|k| k as f64 * 0.05).collect();
        let mean = values.iter().sum::<f64>() / 20.0;
        assert_eq!(s.utilization_mean, Some(round(mean, 4)));
        // Nearest rank: ceil(0.95 × 20) = 19th value = 90 %.
        assert_eq!(s.utilization_p95, Some(0.9));
        // Utilization 0 at t = 0 holds 1 s; the other 18 holds count; the last holds 0 s.
        assert_eq!(s.busy_gpu_s, Some(18.0));
        assert_eq!(s.memory_used_peak_bytes, Some(20 * gib));
        assert_eq!(s.memory_used_mean_bytes, Some(21 * gib / 2));
        assert_eq!(s.memory_total_bytes, Some(80 * gib));
        assert_eq!(s.memory_used_peak_ratio, Some(0.25));
        assert_eq!(s.temperature_gpu_peak_c, Some(42));
    }

    #[test]
    fn absent_values_stay_null() {
        let g = info(0, "GPU-a");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        for k in 0..3u64 {
            let s = sample(&g, Some(50), None, None, None, None, None, None);
            acc.add(&c.snap(k + 1, k as f64, vec![s]));
        }
        let r = acc.report(BTreeMap::new());
        let v: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
        for gpu_or_pod in [&v["gpus"][0], &v["pod"]] {
            for key in [
                "energy_j",
                "energy_source",
                "power_mean_w",
                "power_peak_w",
                "temperature_gpu_peak_c",
                "memory_used_peak_bytes",
                "power_capped_s",
            ] {
                assert!(gpu_or_pod[key].is_null(), "{key} in {gpu_or_pod}");
            }
            assert_eq!(gpu_or_pod["busy_gpu_s"], 2.0);
        }
        assert_eq!(v["event.name"], EVENT_NAME);
        let attrs = r.attributes();
        assert!(attrs.iter().all(|kv| kv.key.as_str() != "gpu.run.energy_j"));
        assert!(attrs
            .iter()
            .any(|kv| kv.key.as_str() == "gpu.run.busy_gpu_s"
                && kv.value == opentelemetry::Value::F64(2.0)));
    }

    #[test]
    fn pod_sums_gpus_and_leaves_mig_instances_out_of_memory_power_energy() {
        let a = info(0, "GPU-a");
        let b = info(1, "GPU-b");
        let m = info(1, "MIG-b1");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        for k in 0..3u64 {
            let e = 1_000_000 + k * 100_000;
            acc.add(&c.snap(
                k + 1,
                k as f64,
                vec![
                    sample(
                        &a,
                        Some(100),
                        Some(10),
                        Some(100),
                        Some(300_000),
                        Some(e),
                        Some(50),
                        Some(4),
                    ),
                    sample(
                        &b,
                        Some(0),
                        Some(20),
                        Some(100),
                        Some(100_000),
                        Some(e),
                        Some(60),
                        Some(0),
                    ),
                    sample(&m, Some(80), Some(15), Some(50), None, None, None, None),
                ],
            ));
        }
        let r = acc.report(BTreeMap::new());
        assert_eq!(r.gpus.len(), 3);
        let p = &r.pod;
        assert_eq!(p.energy_j, Some(400.0));
        assert_eq!(p.power_mean_w, Some(400.0));
        assert_eq!(p.power_peak_w, Some(400.0));
        assert_eq!(p.memory_used_peak_bytes, Some(30));
        assert_eq!(p.memory_total_bytes, Some(200));
        assert_eq!(p.memory_used_peak_ratio, Some(0.15));
        assert_eq!(p.temperature_gpu_peak_c, Some(60));
        // GPU a busy 2 s, b idle, MIG instance busy 2 s.
        assert_eq!(p.busy_gpu_s, Some(4.0));
        assert_eq!(p.power_capped_s, Some(2.0));
        assert_eq!(p.utilization_mean, Some(0.6));
        assert_eq!(p.wall_time_s, 2.0);
    }

    fn mig_info(index: u32, uuid: &str, parent: &str, gi: u32) -> Arc<DeviceInfo> {
        Arc::new(DeviceInfo {
            index,
            uuid: uuid.into(),
            name: Some("NVIDIA H200 MIG 3g.71gb".into()),
            mig: Some(crate::sampling::MigPlacement {
                parent_uuid: parent.into(),
                mig_index: gi,
                gpu_instance_id: Some(gi),
                compute_instance_id: Some(0),
            }),
            ..DeviceInfo::default()
        })
    }

    #[test]
    fn a_pod_holding_only_mig_devices_gets_their_memory_not_the_gpus_power() {
        // Two MIG devices of GPU-p, which this pod does not hold (another tenant has the rest).
        let m1 = mig_info(0, "MIG-1", "GPU-p", 1);
        let m2 = mig_info(0, "MIG-2", "GPU-p", 2);
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        for k in 0..3u64 {
            acc.add(&c.snap(
                k + 1,
                k as f64,
                vec![
                    sample(&m1, None, Some(10 + k), Some(70), None, None, None, None),
                    sample(&m2, None, Some(5), Some(30), None, None, None, None),
                ],
            ));
        }
        let p = acc.report(BTreeMap::new()).pod;
        assert_eq!(p.memory_used_peak_bytes, Some(17));
        assert_eq!(p.memory_used_mean_bytes, Some(16));
        assert_eq!(p.memory_total_bytes, Some(100));
        assert_eq!(p.memory_used_peak_ratio, Some(0.17));
        assert_eq!(
            (p.power_mean_w, p.energy_j),
            (None, None),
            "the GPU's power is not this pod's"
        );
        assert_eq!(p.samples_taken, 6);
    }

    #[test]
    fn pod_memory_covers_the_same_gpus_as_its_total_or_is_absent() {
        let a = info(0, "GPU-a");
        let b = info(1, "GPU-b");
        let c = Clock::new();
        // GPU b does not answer memory at tick 2, while GPU a peaks there: a sum over GPU a
        // alone is not the pod's.
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        for (k, (ua, ub)) in [(10, Some(10)), (40, None), (10, Some(10))]
            .into_iter()
            .enumerate()
        {
            acc.add(&c.snap(
                k as u64 + 1,
                k as f64,
                vec![
                    sample(&a, Some(50), Some(ua), Some(100), None, None, None, None),
                    sample(&b, Some(50), ub, Some(100), None, None, None, None),
                ],
            ));
        }
        let p = acc.report(BTreeMap::new()).pod;
        assert_eq!(p.memory_used_peak_bytes, Some(20));
        assert_eq!(p.memory_used_mean_bytes, Some(20));
        assert_eq!(p.memory_total_bytes, Some(200));
        assert_eq!(p.memory_used_peak_ratio, Some(0.1));
        // GPU b never answers memory: the pod's figures are absent, not GPU a's alone.
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        for k in 0..3u64 {
            acc.add(&c.snap(
                k + 1,
                k as f64,
                vec![
                    sample(&a, Some(50), Some(30), Some(100), None, None, None, None),
                    sample(&b, Some(50), None, None, None, None, None, None),
                ],
            ));
        }
        let r = acc.report(BTreeMap::new());
        let p = &r.pod;
        assert_eq!(
            (
                p.memory_used_peak_bytes,
                p.memory_used_mean_bytes,
                p.memory_total_bytes,
                p.memory_used_peak_ratio
            ),
            (None, None, None, None)
        );
        // GPU a's own summary still has its memory.
        assert_eq!(r.gpus[0].summary.memory_used_peak_bytes, Some(30));
    }

    #[test]
    fn xids_are_counted_by_code_per_gpu_and_for_the_pod() {
        let a = info(0, "GPU-a");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_secs(1));
        acc.add(&c.snap(
            1,
            0.0,
            vec![sample(&a, Some(1), None, None, None, None, None, None)],
        ));
        acc.record_xid("GPU-a", 79);
        acc.record_xid("GPU-a", 13);
        acc.record_xid("GPU-a", 13);
        acc.record_xid("GPU-gone", 48);
        let r = acc.report(BTreeMap::new());
        let expect: BTreeMap<String, u64> = [("13".into(), 2), ("79".into(), 1)].into();
        assert_eq!(r.gpus[0].summary.xid_count, expect);
        let pod: BTreeMap<String, u64> =
            [("13".into(), 2), ("48".into(), 1), ("79".into(), 1)].into();
        assert_eq!(r.pod.xid_count, pod);
    }

    /// The real H200 recording fed straight into the accumulator, checked against numbers
    /// computed here from the same rows.
    #[test]
    fn the_h200_recording_summarised() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/nvml-h200/series-under-load.jsonl");
        let rows: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let g = info(0, "GPU-h200");
        let c = Clock::new();
        let mut acc = RunAccumulator::new(Duration::from_millis(250));
        let num = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap();
        for (k, r) in rows.iter().enumerate() {
            let s = sample(
                &g,
                Some(r["util"][0].as_u64().unwrap() as u32),
                Some(r["mem"][1].as_u64().unwrap()),
                Some(r["mem"][0].as_u64().unwrap()),
                Some(num(r, "power_mw") as u32),
                Some(num(r, "energy_mj")),
                Some(num(r, "temp") as u32),
                Some(num(r, "throttle")),
            );
            acc.add(&c.snap(k as u64 + 1, r["t"].as_f64().unwrap(), vec![s]));
        }
        let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
        let n = rows.len() as f64;
        let first = &rows[0];
        let last = rows.last().unwrap();
        let span = last["t"].as_f64().unwrap() - first["t"].as_f64().unwrap();
        let energy = (num(last, "energy_mj") - num(first, "energy_mj")) as f64 / 1000.0;
        assert_eq!(s.energy_j, Some(energy));
        assert!(approx(energy, 20_666.438, 1e-9));
        assert_eq!(s.samples_taken, rows.len() as u64);
        assert!(approx(s.wall_time_s, span, 1e-3));
        let util_mean = rows
            .iter()
            .map(|r| r["util"][0].as_f64().unwrap())
            .sum::<f64>()
            / n
            / 100.0;
        assert!(approx(s.utilization_mean.unwrap(), util_mean, 1e-4));
        assert!(approx(util_mean, 0.99, 0.01));
        let mut utils: Vec<u64> = rows
            .iter()
            .map(|r| r["util"][0].as_u64().unwrap())
            .collect();
        utils.sort_unstable();
        let p95 = utils[(0.95 * n).ceil() as usize - 1] as f64 / 100.0;
        assert_eq!(s.utilization_p95, Some(p95));
        let peak_temp = rows.iter().map(|r| num(r, "temp")).max().unwrap();
        assert_eq!(s.temperature_gpu_peak_c, Some(peak_temp as u32));
        assert!((59..=60).contains(&peak_temp));
        let mean_w = rows.iter().map(|r| num(r, "power_mw") as f64).sum::<f64>() / n / 1000.0;
        assert!(approx(s.power_mean_w.unwrap(), mean_w, 1e-3));
        // Every row reads 4 (SW power cap): held back for the whole span.
        assert!(rows.iter().all(|r| num(r, "throttle") == 4));
        assert!(approx(s.power_capped_s.unwrap(), span, 1e-3));
        assert_eq!(s.thermal_slowdown_s, Some(0.0));
        let busy = rows.iter().all(|r| r["util"][0].as_u64().unwrap() > 0);
        assert!(busy && approx(s.busy_gpu_s.unwrap(), span, 1e-3));
        // The counter and the integrated power agree to within 1 % over the recording.
        let integrated: f64 = rows
            .windows(2)
            .map(|w| {
                num(&w[0], "power_mw") as f64 / 1000.0
                    * (w[1]["t"].as_f64().unwrap() - w[0]["t"].as_f64().unwrap())
            })
            .sum();
        assert!(
            (energy / integrated - 1.0).abs() < 0.01,
            "{energy} vs {integrated}"
        );
    }
}
