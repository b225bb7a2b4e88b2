//! The page's curves: each GPU's readings over the run, kept as min/max buckets so that a
//! run of minutes and one of three days are drawn from the same bounded memory and no peak
//! is lost.
//!
//! The time from the run's start is cut into buckets of one width; each bucket keeps, per
//! series, the lowest and the highest reading and when each came, and the clock-event
//! reasons seen in it (OR of the masks). When a reading falls past [`MAX_BUCKETS`], pairs of
//! neighbours are merged (the lower min, the higher max) and the width doubles. Drawn as a
//! line through each bucket's min and max in time order (a vertical stroke where they
//! differ), a one-sample spike three days in still reaches its height.
//!
//! Fed from the agent's own samples at shutdown ([`Point::of_sample`]) or from a sample
//! log's rows ([`super::input`]); the two give the same points.

use std::time::SystemTime;

use crate::catalogue::clocks_event_reasons;
use crate::report::sample_log::gpm_percent;
use crate::sampling::DeviceSample;

/// Buckets per GPU at most: about one per pixel column of a chart (its plot is 880 px
/// wide), two points each, so a series is drawn with at most 1,200 points.
pub const MAX_BUCKETS: usize = 600;

/// Where a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Panel {
    /// Percent, 0..100: utilization and the GPM activities.
    Activity,
    /// GiB, from 0: memory used, total and the pool's level.
    Memory,
    /// W, from 0: power and the enforced limit.
    Power,
    /// °C.
    Temperature,
}

/// One series the page can draw: its key (the sample log's column and the page's
/// `data-series`), label, panel, and how a reading is turned into the panel's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesSpec {
    /// The sample log's column, also the `data-series` attribute of its path.
    pub key: &'static str,
    /// Legend text.
    pub label: &'static str,
    /// The panel it is drawn in.
    pub panel: Panel,
}

/// The series kept per bucket, in [`Point::values`] order. (The pool's level is not a
/// reading: it comes from the report's `memory_pool_bytes`.)
pub const SERIES: [SeriesSpec; 8] = [
    SeriesSpec {
        key: "utilization_gpu_percent",
        label: "utilization",
        panel: Panel::Activity,
    },
    SeriesSpec {
        key: "sm_activity_percent",
        label: "SM activity",
        panel: Panel::Activity,
    },
    SeriesSpec {
        key: "tensor_activity_percent",
        label: "tensor activity",
        panel: Panel::Activity,
    },
    SeriesSpec {
        key: "memory_used_mib",
        label: "memory used",
        panel: Panel::Memory,
    },
    SeriesSpec {
        key: "memory_total_mib",
        label: "memory total",
        panel: Panel::Memory,
    },
    SeriesSpec {
        key: "power_w",
        label: "power",
        panel: Panel::Power,
    },
    SeriesSpec {
        key: "power_limit_w",
        label: "power limit",
        panel: Panel::Power,
    },
    SeriesSpec {
        key: "temperature_gpu_c",
        label: "temperature",
        panel: Panel::Temperature,
    },
];

/// Index of a series in [`SERIES`].
pub fn series_index(key: &str) -> Option<usize> {
    SERIES.iter().position(|s| s.key == key)
}

/// One GPU's readings at one time, in the panels' units (percent, MiB, W, °C); `None` where
/// nothing was read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Point {
    /// One value per [`SERIES`] entry.
    pub values: [Option<f64>; SERIES.len()],
    /// The clock-event reasons mask, when read.
    pub reasons: Option<u64>,
}

impl Point {
    /// The readings of one sample, as the sample log writes them (memory in MiB rounded
    /// down, GPM percent to 0.01), so that a page from the agent and one from its log agree.
    pub fn of_sample(s: &DeviceSample) -> Self {
        Self {
            values: [
                s.utilization_gpu_percent.map(f64::from),
                gpm_percent(s, |g| g.sm_util),
                gpm_percent(s, |g| g.any_tensor_util),
                s.memory_used_mib().map(|m| m as f64),
                s.memory_total_mib().map(|m| m as f64),
                s.power_watts(),
                s.power_limit_watts(),
                s.temperature_gpu_celsius.map(f64::from),
            ],
            reasons: s.clocks_event_reasons,
        }
    }
}

/// The mask of a sample log's `clocks_event_reasons` (`sw_power_cap|0x1000`, `none`).
pub fn reasons_mask(names: &str) -> u64 {
    names
        .split('|')
        .map(|n| match n.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).unwrap_or(0),
            None => clocks_event_reasons::bit(n),
        })
        .fold(0, |a, b| a | b)
}

/// The lowest and highest reading of a series in a bucket, and when each came (s since the
/// start). Single precision keeps a bucket small (176 bytes for all series, ~100 KiB per GPU
/// at [`MAX_BUCKETS`]): exact for whole MiB, °C and percent, within 1e-4 of the sample log's
/// W and percent decimals (undone by [`Extremes::value`]); 16 ms over three days of time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Extremes {
    /// Lowest value.
    pub min: f32,
    /// Its time, s from the start.
    pub min_at: f32,
    /// Highest value.
    pub max: f32,
    /// Its time, s from the start.
    pub max_at: f32,
}

impl Extremes {
    /// A kept value back as the reading it was: to 0.001, the sample log's finest decimals
    /// (mW as W).
    pub fn value(v: f32) -> f64 {
        (f64::from(v) * 1000.0).round() / 1000.0
    }

    fn merge(self, o: Extremes) -> Extremes {
        let (min, min_at) = if o.min < self.min {
            (o.min, o.min_at)
        } else {
            (self.min, self.min_at)
        };
        let (max, max_at) = if o.max > self.max {
            (o.max, o.max_at)
        } else {
            (self.max, self.max_at)
        };
        Extremes {
            min,
            min_at,
            max,
            max_at,
        }
    }
}

/// One bucket of one GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Bucket {
    /// Per series, its extremes in the bucket.
    pub series: [Option<Extremes>; SERIES.len()],
    /// OR of the clock-event reasons read in the bucket; `None` when none was read.
    pub reasons: Option<u64>,
}

impl Bucket {
    fn merge(&mut self, o: &Bucket) {
        for (a, b) in self.series.iter_mut().zip(o.series) {
            *a = match (*a, b) {
                (Some(x), Some(y)) => Some(x.merge(y)),
                (x, None) => x,
                (None, y) => y,
            };
        }
        self.reasons = match (self.reasons, o.reasons) {
            (Some(x), Some(y)) => Some(x | y),
            (x, None) => x,
            (None, y) => y,
        };
    }

    fn add(&mut self, t: f64, p: &Point) {
        let mut one = Bucket {
            series: [None; SERIES.len()],
            reasons: p.reasons,
        };
        for (e, v) in one.series.iter_mut().zip(p.values) {
            *e = v.filter(|v| v.is_finite()).map(|v| Extremes {
                min: v as f32,
                min_at: t as f32,
                max: v as f32,
                max_at: t as f32,
            });
        }
        self.merge(&one);
    }
}

/// Every GPU's buckets over one time axis.
#[derive(Debug, Clone)]
pub struct Curves {
    origin: Option<SystemTime>,
    width_s: f64,
    gpus: Vec<(String, Vec<Bucket>)>,
    /// Readings before the start (a sample log continued from an earlier run).
    outside: u64,
}

impl Curves {
    /// Curves starting at `origin` (the first reading's time when `None`) with buckets
    /// `width_s` wide at first (at least 1 ms).
    pub fn new(origin: Option<SystemTime>, width_s: f64) -> Self {
        Self {
            origin,
            width_s: width_s.max(0.001),
            gpus: Vec::new(),
            outside: 0,
        }
    }

    /// Adds the reading `p` of the GPU `uuid` taken at `at`. A reading before the start is
    /// counted ([`Curves::outside`]), not drawn.
    pub fn add(&mut self, uuid: &str, at: SystemTime, p: &Point) {
        let origin = *self.origin.get_or_insert(at);
        let Ok(t) = at.duration_since(origin).map(|d| d.as_secs_f64()) else {
            self.outside += 1;
            return;
        };
        let mut k = (t / self.width_s) as usize;
        while k >= MAX_BUCKETS {
            self.halve();
            k = (t / self.width_s) as usize;
        }
        let i = match self.gpus.iter().position(|(u, _)| u == uuid) {
            Some(i) => i,
            None => {
                // Its whole bound at once (~100 KiB): the buckets never reallocate.
                self.gpus
                    .push((uuid.to_string(), Vec::with_capacity(MAX_BUCKETS)));
                self.gpus.len() - 1
            }
        };
        let buckets = &mut self.gpus[i].1;
        if buckets.len() <= k {
            buckets.resize(k + 1, Bucket::default());
        }
        buckets[k].add(t, p);
    }

    /// Merges neighbours pairwise and doubles the width, in place (no allocation).
    fn halve(&mut self) {
        for (_, buckets) in &mut self.gpus {
            let n = buckets.len().div_ceil(2);
            for j in 0..n {
                let mut b = buckets[2 * j];
                if let Some(o) = buckets.get(2 * j + 1) {
                    b.merge(o);
                }
                buckets[j] = b;
            }
            buckets.truncate(n);
        }
        self.width_s *= 2.0;
    }

    /// The start of the time axis (`None` before the first reading).
    pub fn origin(&self) -> Option<SystemTime> {
        self.origin
    }

    /// The buckets' width, s.
    pub fn width_s(&self) -> f64 {
        self.width_s
    }

    /// The buckets of one GPU (bucket `k` covers `k * width_s ..` from the start).
    pub fn gpu(&self, uuid: &str) -> Option<&[Bucket]> {
        self.gpus
            .iter()
            .find(|(u, _)| u == uuid)
            .map(|(_, b)| b.as_slice())
    }

    /// Readings left out because they came before the start.
    pub fn outside(&self) -> u64 {
        self.outside
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn temp(v: f64) -> Point {
        let mut p = Point::default();
        p.values[7] = Some(v);
        p
    }

    /// Three days at 5 s (51,840 readings), one reading of 90 °C among 60 °C ones at hour
    /// 40: at most MAX_BUCKETS buckets, and the spike is a bucket's max at its own time.
    #[test]
    fn three_days_fit_the_bound_and_keep_a_one_sample_peak() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut c = Curves::new(None, 5.0);
        let spike_at = 40 * 3600;
        for i in 0..(3 * 86_400 / 5) {
            let s = i * 5;
            let v = if s == spike_at {
                90.0
            } else {
                60.0 + (i % 3) as f64
            };
            c.add("GPU-0", t0 + Duration::from_secs(s), &temp(v));
        }
        let b = c.gpu("GPU-0").unwrap();
        assert!(b.len() <= MAX_BUCKETS, "{}", b.len());
        assert!(b.len() > MAX_BUCKETS / 2, "{}", b.len());
        assert_eq!(c.width_s(), 5.0 * 128.0);
        let peaks: Vec<Extremes> = b.iter().filter_map(|b| b.series[7]).collect();
        let top = peaks.iter().map(|e| e.max).fold(0.0, f32::max);
        assert_eq!(top, 90.0);
        let spike = peaks.iter().find(|e| e.max == 90.0).unwrap();
        assert_eq!(spike.max_at, spike_at as f32);
        assert!(peaks
            .iter()
            .all(|e| e.min == 60.0 || e.max == 90.0 || e.min >= 60.0));
        assert_eq!(peaks.iter().map(|e| e.min).fold(f32::MAX, f32::min), 60.0);
        assert_eq!(std::mem::size_of::<Bucket>(), 176);
    }

    #[test]
    fn reasons_are_or_ed_and_absent_values_leave_gaps() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut c = Curves::new(Some(t0), 1.0);
        let mut p = temp(50.0);
        p.reasons = Some(reasons_mask("sw_power_cap"));
        c.add("GPU-0", t0 + Duration::from_millis(100), &p);
        p.reasons = Some(reasons_mask("sw_thermal_slowdown|0x1000"));
        c.add("GPU-0", t0 + Duration::from_millis(600), &p);
        c.add("GPU-0", t0 + Duration::from_secs(3), &Point::default());
        c.add("GPU-0", t0 - Duration::from_secs(3), &p);
        let b = c.gpu("GPU-0").unwrap();
        assert_eq!(b.len(), 4);
        assert_eq!(b[0].reasons, Some(0x4 | 0x20 | 0x1000));
        assert!(b[1].series[7].is_none() && b[3].series[7].is_none());
        assert_eq!(c.outside(), 1);
    }
}
