//! The state behind each exported sum and histogram series: its start time, what it counts
//! from, and what the collector last accepted (for delta temporality).
//!
//! OTLP carries a `start_time_unix_nano` on every data point; the agent sets it per series:
//! - **Totals read from NVML** (energy, ECC errors) and the byte counters the agent keeps
//!   count from the agent's *first reading* ([`Origin::FirstReading`]): the first point has
//!   that reading's time as start and value 0, so no point ever claims the driver's past
//!   (NVML's totals count since the driver loaded).
//! - **Counts the agent makes itself** (NVML errors, failed exports, XIDs, alerts, sample
//!   durations) count from 0 at the agent's start ([`Origin::AgentStart`]).
//! - A total that **goes down** (a driver reload or GPU reset restarts NVML's counters near
//!   0) starts a new stream: start time = the previous reading's time (the reset happened
//!   after it), counting from 0, so no sum ever goes down under one start time.
//! - When the **wall clock steps** (NTP correcting a node, a VM resumed) by more than
//!   [`CLOCK_STEP_TOLERANCE`] against the monotonic clock, every stream starts again at the
//!   next point: start = that point's time, value 0. A point never ends before it starts.
//! - **Delta** series report the change since the last point the collector *accepted*
//!   (a failed export's points are dropped, the next delta covers its interval), with that
//!   point's time as start.
//!
//! Elapsed time is always taken from the monotonic clock ([`Stamp::mono`]); the wall clock
//! only stamps points.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

/// A moment on both clocks: the wall clock stamps points, the monotonic one measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Wall-clock time (`time_unix_nano`).
    pub wall: SystemTime,
    /// Monotonic time, for elapsed durations.
    pub mono: Instant,
}

impl Stamp {
    /// Both clocks, now.
    pub fn now() -> Self {
        Self {
            wall: SystemTime::now(),
            mono: Instant::now(),
        }
    }
}

/// A wall-clock step larger than this against the monotonic clock, between two points,
/// restarts every cumulative stream. NTP slews small corrections; a step of a second or more
/// would otherwise show as a false rate (or as a point before its start).
pub const CLOCK_STEP_TOLERANCE: Duration = Duration::from_secs(1);

/// What a counter series counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A total kept elsewhere (NVML since the driver loaded; the agent's byte counters):
    /// counted from the first reading the agent exports, with that reading's time as start.
    FirstReading,
    /// A count the agent keeps from 0 since it started, at this time.
    AgentStart(SystemTime),
}

/// One cumulative point of a series, after the series' rules were applied.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cumulative {
    /// `start_time_unix_nano`.
    pub start: SystemTime,
    /// `time_unix_nano`.
    pub time: SystemTime,
    /// The value since `start`.
    pub value: f64,
}

/// Why a stream started again (for the one log line).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Restart {
    /// The source total went down (from, to): reset or driver reload.
    WentDown(f64, f64),
}

#[derive(Debug, Clone)]
struct Series {
    start: SystemTime,
    /// Raw value subtracted from readings (the first reading, or 0 after a reset).
    baseline: f64,
    last_raw: f64,
    last_time: SystemTime,
    /// The clock epoch the stream belongs to (see [`SeriesStore::clock`]).
    epoch: u64,
    last_seen: Instant,
    /// An up-down counter's series (forgotten sooner: a departed process's memory).
    up_down: bool,
    /// The cumulative value and time of the last point the collector accepted (delta).
    accepted: Option<(f64, SystemTime)>,
}

/// A point to remember once the export holding it was accepted (delta temporality).
#[derive(Debug, Clone)]
pub struct Accepted {
    key: String,
    epoch: u64,
    start: SystemTime,
    value: f64,
    time: SystemTime,
}

/// Every series' state, keyed by metric name and attributes ([`series_key`]). Series not
/// observed for a while are forgotten (a device gone for good, a process that ended), so
/// memory stays bounded.
#[derive(Debug)]
pub struct SeriesStore {
    series: HashMap<String, Series>,
    epoch: u64,
    last_stamp: Option<Stamp>,
    retention: Duration,
    up_down_retention: Duration,
}

/// The key of a series: its metric name and attributes, in order.
pub fn series_key(name: &str, attributes: &[opentelemetry::KeyValue]) -> String {
    let mut k = String::with_capacity(64);
    k.push_str(name);
    for kv in attributes {
        k.push('\u{1f}');
        k.push_str(kv.key.as_str());
        k.push('=');
        k.push_str(&kv.value.to_string());
    }
    k
}

impl SeriesStore {
    /// An empty store forgetting counter series unseen for `retention` (a GPU back within
    /// it keeps its start time) and up-down counter series unseen for `up_down_retention`.
    pub fn new(retention: Duration, up_down_retention: Duration) -> Self {
        Self {
            series: HashMap::new(),
            epoch: 0,
            last_stamp: None,
            retention,
            up_down_retention,
        }
    }

    /// Checks the wall clock against the monotonic clock at `now` (every point's stamp goes
    /// through here first). Returns the step, in seconds (negative: backwards), when the
    /// wall clock stepped since the last stamp; every stream then starts again.
    pub fn clock(&mut self, now: Stamp) -> Option<f64> {
        let step = self.last_stamp.and_then(|last| {
            let wall = signed_secs(now.wall, last.wall);
            let mono = if now.mono >= last.mono {
                (now.mono - last.mono).as_secs_f64()
            } else {
                -(last.mono - now.mono).as_secs_f64()
            };
            let step = wall - mono;
            (step.abs() > CLOCK_STEP_TOLERANCE.as_secs_f64()).then_some(step)
        });
        self.last_stamp = Some(now);
        if step.is_some() {
            self.epoch += 1;
        }
        step
    }

    /// A monotonic sum's point for a reading `raw` of the series `key` at `at` (whose clock
    /// was checked with [`SeriesStore::clock`]), and why its stream started again, if it
    /// did at this point because the total went down.
    pub fn counter(
        &mut self,
        key: &str,
        raw: f64,
        at: Stamp,
        origin: Origin,
    ) -> (Cumulative, Option<Restart>) {
        let epoch = self.epoch;
        let mut restart = None;
        let known = self
            .series
            .get(key)
            .map(|s| s.epoch == epoch && at.wall >= s.last_time);
        let s = match known {
            Some(true) => {
                let s = self.series.get_mut(key).expect("known");
                if raw < s.last_raw {
                    restart = Some(Restart::WentDown(s.last_raw, raw));
                    s.start = s.last_time;
                    s.baseline = 0.0;
                    s.accepted = None;
                }
                s
            }
            _ => {
                // New, or its clock stepped: start here.
                let (start, baseline) = match (known, origin) {
                    (None, Origin::AgentStart(t)) if t <= at.wall => (t, 0.0),
                    _ => (at.wall, raw),
                };
                self.series.insert(
                    key.to_string(),
                    Series {
                        start,
                        baseline,
                        last_raw: raw,
                        last_time: at.wall,
                        epoch,
                        last_seen: at.mono,
                        up_down: false,
                        accepted: None,
                    },
                );
                self.series.get_mut(key).expect("just inserted")
            }
        };
        s.last_raw = raw;
        s.last_time = at.wall;
        s.last_seen = at.mono;
        let point = Cumulative {
            start: s.start,
            time: at.wall,
            value: (raw - s.baseline).max(0.0),
        };
        (point, restart)
    }

    /// A non-monotonic sum's (up-down counter's) point: the value as read, with the time the
    /// series was first seen (or its clock last stepped) as start.
    pub fn up_down(&mut self, key: &str, value: f64, at: Stamp) -> Cumulative {
        let epoch = self.epoch;
        let s = self
            .series
            .entry(key.to_string())
            .and_modify(|s| {
                if s.epoch != epoch || at.wall < s.last_time {
                    s.start = at.wall;
                    s.epoch = epoch;
                    s.accepted = None;
                }
            })
            .or_insert_with(|| Series {
                start: at.wall,
                baseline: 0.0,
                last_raw: value,
                last_time: at.wall,
                epoch,
                last_seen: at.mono,
                up_down: true,
                accepted: None,
            });
        s.last_raw = value;
        s.last_time = at.wall;
        s.last_seen = at.mono;
        Cumulative {
            start: s.start,
            time: at.wall,
            value,
        }
    }

    /// The delta form of `point` (from [`SeriesStore::counter`] or a histogram's count or
    /// sum): the change since the last accepted point of the same stream, with that point's
    /// time as start; and what to remember once this export is accepted.
    pub fn delta(&self, key: &str, point: Cumulative) -> (Cumulative, Option<Accepted>) {
        let Some(s) = self.series.get(key) else {
            return (point, None);
        };
        let (base, start) = match s.accepted {
            Some((v, t)) if t >= point.start => (v, t),
            _ => (0.0, point.start),
        };
        let delta = Cumulative {
            start,
            time: point.time,
            value: (point.value - base).max(0.0),
        };
        let accepted = Accepted {
            key: key.to_string(),
            epoch: s.epoch,
            start: point.start,
            value: point.value,
            time: point.time,
        };
        (delta, Some(accepted))
    }

    /// The cumulative values and times of an accepted export's delta points become the
    /// base of the next deltas (unless their stream started again meanwhile).
    pub fn accept(&mut self, accepted: Vec<Accepted>) {
        for a in accepted {
            if let Some(s) = self.series.get_mut(&a.key) {
                if s.epoch == a.epoch && s.start == a.start {
                    s.accepted = Some((a.value, a.time));
                }
            }
        }
    }

    /// Forgets series not observed for their retention period, as of `now`.
    pub fn expire(&mut self, now: Instant) {
        let (counters, up_down) = (self.retention, self.up_down_retention);
        self.series.retain(|_, s| {
            let keep = if s.up_down { up_down } else { counters };
            now.saturating_duration_since(s.last_seen) <= keep
        });
    }

    /// How many series are kept.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// Whether no series is kept.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

/// `a - b` in seconds, negative when `a` is earlier.
fn signed_secs(a: SystemTime, b: SystemTime) -> f64 {
    match a.duration_since(b) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    /// An injectable clock: the wall clock can step while the monotonic one runs on.
    struct Clock {
        wall: SystemTime,
        mono: Instant,
    }

    impl Clock {
        fn new() -> Self {
            Self {
                wall: UNIX_EPOCH + Duration::from_secs(1_800_000_000),
                mono: Instant::now(),
            }
        }
        fn advance(&mut self, secs: f64) -> Stamp {
            let d = Duration::from_secs_f64(secs);
            self.wall += d;
            self.mono += d;
            self.stamp()
        }
        fn step_wall(&mut self, secs: f64) {
            if secs >= 0.0 {
                self.wall += Duration::from_secs_f64(secs);
            } else {
                self.wall -= Duration::from_secs_f64(-secs);
            }
        }
        fn stamp(&self) -> Stamp {
            Stamp {
                wall: self.wall,
                mono: self.mono,
            }
        }
    }

    fn counter(store: &mut SeriesStore, raw: f64, at: Stamp) -> (Cumulative, Option<Restart>) {
        store.clock(at);
        store.counter("hw.energy", raw, at, Origin::FirstReading)
    }

    #[test]
    fn a_total_counts_from_the_first_reading_with_its_time_as_start() {
        // The 3.6 MJ counter: the first point is 0 at its own start, not 3.6 MJ.
        let (mut c, mut store) = (
            Clock::new(),
            SeriesStore::new(Duration::from_secs(3600), Duration::from_secs(60)),
        );
        let t0 = c.advance(0.0);
        let (p, r) = counter(&mut store, 3_600_000.0, t0);
        assert_eq!((p.start, p.time, p.value, r), (t0.wall, t0.wall, 0.0, None));
        let t1 = c.advance(1.0);
        let (p, _) = counter(&mut store, 3_600_700.0, t1);
        assert_eq!((p.start, p.time, p.value), (t0.wall, t1.wall, 700.0));
    }

    #[test]
    fn a_total_that_goes_down_starts_a_new_stream_without_a_drop() {
        // counter-reset-midrun: 5,000 J, 5,300 J, then the driver reloads: 300 J, 600 J.
        let (mut c, mut store) = (
            Clock::new(),
            SeriesStore::new(Duration::from_secs(3600), Duration::from_secs(60)),
        );
        let t0 = c.advance(0.0);
        counter(&mut store, 5000.0, t0);
        let t1 = c.advance(1.0);
        assert_eq!(counter(&mut store, 5300.0, t1).0.value, 300.0);
        let t2 = c.advance(1.0);
        let (p, r) = counter(&mut store, 300.0, t2);
        assert_eq!(r, Some(Restart::WentDown(5300.0, 300.0)));
        assert_eq!(
            (p.start, p.value),
            (t1.wall, 300.0),
            "counted from 0 since the reset"
        );
        let t3 = c.advance(1.0);
        let (p, r) = counter(&mut store, 600.0, t3);
        assert_eq!((p.start, p.value, r), (t1.wall, 600.0, None));
    }

    #[test]
    fn a_wall_clock_step_back_starts_every_stream_again_and_no_point_ends_before_its_start() {
        let (mut c, mut store) = (
            Clock::new(),
            SeriesStore::new(Duration::from_secs(3600), Duration::from_secs(60)),
        );
        let mut last = None;
        let mut points = Vec::new();
        for k in 0..20 {
            let at = if k == 10 {
                c.step_wall(-3600.0);
                c.advance(1.0)
            } else {
                c.advance(1.0)
            };
            let step = store.clock(at);
            assert_eq!(step.is_some(), k == 10, "tick {k}: {step:?}");
            let (p, _) = store.counter(
                "hw.energy",
                1000.0 + 700.0 * f64::from(k),
                at,
                Origin::FirstReading,
            );
            let u = store.up_down("hw.gpu.memory.usage", 5.0, at);
            assert!(
                p.time >= p.start && u.time >= u.start,
                "tick {k}: {p:?} {u:?}"
            );
            if let Some(prev) = last {
                let prev: Cumulative = prev;
                assert!(
                    p.start != prev.start || p.value >= prev.value,
                    "tick {k}: a sum went down under one start"
                );
            }
            last = Some(p);
            points.push(p);
        }
        assert_eq!(points[10].value, 0.0, "the new stream starts at the step");
        assert_eq!(points[11].value, 700.0);
        assert_ne!(points[10].start, points[9].start);
        // Forward steps restart too (the interval across them is not a true rate).
        c.step_wall(120.0);
        assert!(store.clock(c.advance(1.0)).is_some_and(|s| s > 100.0));
        // Small jitter does not.
        c.step_wall(-0.2);
        assert_eq!(store.clock(c.advance(1.0)), None);
    }

    #[test]
    fn agent_counts_start_at_the_agent_start() {
        let (mut c, mut store) = (
            Clock::new(),
            SeriesStore::new(Duration::from_secs(3600), Duration::from_secs(60)),
        );
        let started = c.advance(0.0).wall;
        let at = c.advance(30.0);
        store.clock(at);
        let (p, _) = store.counter("x", 2.0, at, Origin::AgentStart(started));
        assert_eq!((p.start, p.value), (started, 2.0));
    }

    #[test]
    fn delta_is_the_change_since_the_last_accepted_point() {
        let (mut c, mut store) = (
            Clock::new(),
            SeriesStore::new(Duration::from_secs(3600), Duration::from_secs(60)),
        );
        let t0 = c.advance(0.0);
        let (p0, _) = counter(&mut store, 100.0, t0);
        let (d0, a0) = store.delta("hw.energy", p0);
        assert_eq!((d0.start, d0.value), (t0.wall, 0.0));
        store.accept(vec![a0.unwrap()]);
        let t1 = c.advance(1.0);
        let (p1, _) = counter(&mut store, 800.0, t1);
        let (d1, _a1) = store.delta("hw.energy", p1);
        assert_eq!((d1.start, d1.time, d1.value), (t0.wall, t1.wall, 700.0));
        // That export failed (not accepted): the next delta covers both intervals.
        let t2 = c.advance(1.0);
        let (p2, _) = counter(&mut store, 1500.0, t2);
        let (d2, a2) = store.delta("hw.energy", p2);
        assert_eq!((d2.start, d2.value), (t0.wall, 1400.0));
        store.accept(vec![a2.unwrap()]);
        // A reset: the delta restarts with the new stream.
        let t3 = c.advance(1.0);
        let (p3, _) = counter(&mut store, 50.0, t3);
        let (d3, _) = store.delta("hw.energy", p3);
        assert_eq!((d3.start, d3.value), (t2.wall, 50.0));
    }

    #[test]
    fn unseen_series_are_forgotten() {
        let (mut c, mut store) = (
            Clock::new(),
            SeriesStore::new(Duration::from_secs(60), Duration::from_secs(10)),
        );
        let t0 = c.advance(0.0);
        counter(&mut store, 1.0, t0);
        store.up_down("nvidia.gpu.process.memory.usage", 5.0, t0);
        store.expire(c.advance(9.0).mono);
        assert_eq!(store.len(), 2);
        store.expire(c.advance(2.0).mono);
        assert_eq!(store.len(), 1, "a departed process's series goes first");
        store.expire(c.advance(48.0).mono);
        assert_eq!(store.len(), 1);
        store.expire(c.advance(2.0).mono);
        assert!(store.is_empty());
    }
}
