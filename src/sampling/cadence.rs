//! The flow's cadence: every period it runs on, computed once from the settings
//! ([`Timing`]) and handed to every part that runs on one; when each group of NVML calls is made, and which ticks are
//! exported ([`Cadence`]).
//!
//! The sampler knows the export schedule (`OTEL_METRIC_EXPORT_INTERVAL`): a tick is an
//! *export tick* when an export is due at its start (within half a sample interval), and its
//! snapshot is marked so ([`crate::sampling::Snapshot::export`]); the export clock exports
//! exactly those. A slow group (energy, GPM, per-process utilization, PCIe throughput) whose
//! interval is the export interval or longer is read on export ticks only, when its interval
//! has passed since its last read (so at every Nth export for an interval N exports long).
//! One whose interval is shorter is read at its own cadence and at every export tick (the
//! reads between exports reach the rules and the run report, not the exporter). A value is
//! in the snapshot of the tick that read it only: never carried into later snapshots with
//! later times, so an exported point is never older than the tick that exported it. The
//! final sample at shutdown reads every group.

use std::time::{Duration, Instant};

use super::SampleGroup;
use crate::config::{Config, ExporterKind, SlowIntervals};

/// Most time between two NVML initialization attempts while NVML is down, whatever the
/// sample interval: NVML's init is a local call, and recovery follows NVML's return within
/// two sample intervals (see [`Timing::init_backoff_cap`]).
pub const INIT_BACKOFF_CAP: Duration = Duration::from_secs(5);

/// The longest one event wait (`nvmlEventSetWait_v2`) may be: a wait is bounded by one
/// sample interval and by this, so that the event watcher notices a stop within half a
/// second, returns, and NVML is shut down before the agent exits (at the default 5 s sample
/// interval a whole-interval wait outlasted the stop). An event ends a wait at once
/// whatever its bound; an idle watcher wakes twice a second (one driver call each).
pub const EVENT_WAIT_MAX: Duration = Duration::from_millis(500);

/// The shortest time a series with no point is kept before it expires
/// ([`Timing::series_expiry`]).
pub const SERIES_EXPIRY_MIN: Duration = Duration::from_secs(3600);

/// Every period of the flow, from the settings, in one place: the agent builds it once
/// ([`Timing::from_config`]) and hands it to every part that runs on a period (the sampler,
/// the event watcher, the export clock and its series, the probes and the watchdog, the run
/// report, the sample log). Nothing else derives a period from the settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The sampler's tick, `GPU_SIDECAR_SAMPLE_INTERVAL`.
    pub sample_interval: Duration,
    /// `OTEL_METRIC_EXPORT_INTERVAL`: which ticks are export ticks.
    pub export_interval: Duration,
    /// The slow groups' cadence (`GPU_SIDECAR_*_INTERVAL`).
    pub slow_intervals: SlowIntervals,
    /// When a snapshot is stale: two sample intervals, at least one second. A stale
    /// snapshot is not exported, makes the agent not ready, and a sample's value holds for
    /// the run report at most this long (a longer gap, e.g. NVML re-initializing, is
    /// attributed to nothing).
    pub max_sample_age: Duration,
    /// Half a sample interval: a due time (an export, a slow group) is met by a tick that
    /// starts up to this much before it (ticks never line up exactly with due times), and a
    /// sample this close after the sample log's previous row (the final sample at shutdown,
    /// right after a tick) is a near-copy, not written.
    pub tick_tolerance: Duration,
    /// Longest NVML step before the watchdog says it is stuck,
    /// `GPU_SIDECAR_WATCHDOG_TIMEOUT` (its default, three sample intervals and at least 10 s,
    /// is the settings').
    pub watchdog: Duration,
    /// The export clock exports anyway (the agent's own metrics) when no export tick came
    /// for this long: one export interval plus one sample interval.
    pub export_idle: Duration,
    /// The bound of one event wait (`nvmlEventSetWait_v2`): one sample interval, at most
    /// [`EVENT_WAIT_MAX`]; also the event watcher's longest idle wait.
    pub event_wait: Duration,
    /// The longest delay between two NVML initialization attempts: the sample interval, at
    /// most [`INIT_BACKOFF_CAP`].
    pub init_backoff_cap: Duration,
    /// A series with no point for this long is forgotten by the exporter (its start time
    /// with it): three times the slowest of the export interval and the slow groups'
    /// intervals, at least [`SERIES_EXPIRY_MIN`].
    pub series_expiry: Duration,
    /// The bound on one metrics export, retries included: the smaller of
    /// `OTEL_METRIC_EXPORT_TIMEOUT` and the metrics exporter's OTLP timeout (10 s when no
    /// exporter is configured).
    pub export_bound: Duration,
    /// The oldest acceptable successful export before `/readyz` says exports fail: three
    /// export intervals plus one export bound; `None` when metrics are not sent over OTLP.
    pub export_success_max_age: Option<Duration>,
    /// The longest acceptable time without any finished export (the export loop is stuck):
    /// two export intervals and 5 s (console), two (export interval + export bound) and 5 s
    /// (OTLP); `None` without an exporter.
    pub export_loop_max_gap: Option<Duration>,
}

/// What the liveness probe allows the export loop beyond two export periods (and, over
/// OTLP, two export bounds) before it says the loop is stuck: a loaded node's scheduling
/// delays, not a period of the flow.
const EXPORT_LOOP_SLACK: Duration = Duration::from_secs(5);

impl Timing {
    /// The periods `config` sets: called once, by the agent (and by the webhook's own
    /// metrics).
    pub fn from_config(config: &Config) -> Self {
        Self::new(
            config.sample_interval,
            config.export_interval,
            config.slow_intervals,
            config.watchdog_timeout,
        )
        .with_exporter(config.metrics_exporter, config.metrics_export_bound())
    }

    /// The export periods for metrics sent by `exporter`, each export bounded by `bound`.
    pub fn with_exporter(mut self, exporter: ExporterKind, bound: Duration) -> Self {
        let ei = self.export_interval;
        self.export_bound = bound;
        self.export_success_max_age = (exporter == ExporterKind::Otlp).then(|| ei * 3 + bound);
        self.export_loop_max_gap = match exporter {
            ExporterKind::None => None,
            ExporterKind::Console => Some(ei * 2 + EXPORT_LOOP_SLACK),
            ExporterKind::Otlp => Some((ei + bound) * 2 + EXPORT_LOOP_SLACK),
        };
        self
    }

    /// The periods for these intervals, without an exporter ([`Timing::with_exporter`]).
    pub fn new(
        sample_interval: Duration,
        export_interval: Duration,
        slow_intervals: SlowIntervals,
        watchdog: Duration,
    ) -> Self {
        let slowest = [
            slow_intervals.energy,
            slow_intervals.gpm,
            slow_intervals.pcie,
            slow_intervals.process,
            export_interval,
        ]
        .into_iter()
        .max()
        .unwrap_or(export_interval);
        Self {
            sample_interval,
            export_interval,
            slow_intervals,
            max_sample_age: (sample_interval * 2).max(Duration::from_secs(1)),
            tick_tolerance: sample_interval / 2,
            watchdog,
            export_idle: export_interval + sample_interval,
            event_wait: sample_interval.min(EVENT_WAIT_MAX),
            init_backoff_cap: sample_interval.min(INIT_BACKOFF_CAP),
            series_expiry: (slowest * 3).max(SERIES_EXPIRY_MIN),
            export_bound: Duration::from_secs(10),
            export_success_max_age: None,
            export_loop_max_gap: None,
        }
    }

    /// The periods of a sampler ticking every `sample_interval` with the settings'
    /// defaults for the rest (10 s exports, the default slow intervals, the watchdog's
    /// default of three sample intervals and at least 10 s):
    /// for tests and tools that drive one part directly.
    pub fn every(sample_interval: Duration) -> Self {
        Self::new(
            sample_interval,
            Duration::from_secs(10),
            SlowIntervals::default(),
            (sample_interval * 3).max(Duration::from_secs(10)),
        )
    }

    /// The delays between NVML initialization attempts while NVML is down (init failing,
    /// the device listing failing, fewer devices listed than before): from 1 s (or the cap
    /// when shorter) doubling up to [`Timing::init_backoff_cap`]. So an attempt comes at
    /// most one sample interval after NVML answers again, and the first sample follows it:
    /// the agent is ready again within two sample intervals. Without jitter (one local
    /// library, nothing to spread out); backon's exponential backoff, without end.
    pub fn init_backoff(&self) -> impl Iterator<Item = Duration> {
        use backon::BackoffBuilder as _;
        let cap = self.init_backoff_cap;
        backon::ExponentialBuilder::default()
            .with_min_delay(cap.min(Duration::from_secs(1)))
            .with_max_delay(cap)
            .with_factor(2.0)
            .without_max_times()
            .build()
    }
}

/// The groups to read at one tick (the fast group always), and whether the tick is
/// exported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Due {
    /// This tick's snapshot is to be exported.
    pub export: bool,
    /// `nvmlDeviceGetTotalEnergyConsumption`.
    pub energy: bool,
    /// `nvmlDeviceGetPcieThroughput` (GPUs without GPM PCIe counters).
    pub pcie: bool,
    /// `nvmlDeviceGetProcessUtilization`.
    pub process: bool,
    /// GPM samples and metrics.
    pub gpm: bool,
}

impl Due {
    /// Every group, exported: the first tick of a session and the final sample.
    pub fn everything() -> Self {
        Self {
            export: true,
            energy: true,
            pcie: true,
            process: true,
            gpm: true,
        }
    }

    /// Whether `group` is read at this tick.
    pub fn reads(&self, group: SampleGroup) -> bool {
        match group {
            SampleGroup::Static | SampleGroup::Fast => true,
            SampleGroup::Energy => self.energy,
            SampleGroup::Pcie => self.pcie,
            SampleGroup::Process => self.process,
            SampleGroup::Gpm => self.gpm,
        }
    }

    fn set(&mut self, group: SampleGroup) {
        match group {
            SampleGroup::Static | SampleGroup::Fast => {}
            SampleGroup::Energy => self.energy = true,
            SampleGroup::Pcie => self.pcie = true,
            SampleGroup::Process => self.process = true,
            SampleGroup::Gpm => self.gpm = true,
        }
    }
}

/// The slow groups, in the order they are read.
pub const SLOW_GROUPS: [SampleGroup; 4] = [
    SampleGroup::Energy,
    SampleGroup::Process,
    SampleGroup::Gpm,
    SampleGroup::Pcie,
];

/// The export schedule and each slow group's last read; pure (the caller passes the time),
/// so it is tested without clocks.
#[derive(Debug, Clone)]
pub struct Cadence {
    export_interval: Duration,
    tolerance: Duration,
    next_export: Option<Instant>,
    intervals: SlowIntervals,
    last_read: [Option<Instant>; SLOW_GROUPS.len()],
}

impl Cadence {
    /// Exports every [`Timing::export_interval`] (the first at the first tick); slow groups
    /// every [`Timing::slow_intervals`]; a due time is met by a tick that starts up to
    /// [`Timing::tick_tolerance`] before it.
    pub fn new(timing: &Timing) -> Self {
        Self {
            export_interval: timing.export_interval,
            tolerance: timing.tick_tolerance,
            next_export: None,
            intervals: timing.slow_intervals,
            last_read: [None; SLOW_GROUPS.len()],
        }
    }

    fn interval(&self, group: SampleGroup) -> Duration {
        match group {
            SampleGroup::Energy => self.intervals.energy,
            SampleGroup::Pcie => self.intervals.pcie,
            SampleGroup::Process => self.intervals.process,
            SampleGroup::Gpm => self.intervals.gpm,
            SampleGroup::Static | SampleGroup::Fast => Duration::ZERO,
        }
    }

    /// What to do at a tick starting at `now`.
    pub fn tick(&mut self, now: Instant) -> Due {
        let mut due = Due::default();
        let export = self.next_export.is_none_or(|at| now + self.tolerance >= at);
        if export {
            due.export = true;
            let mut next = self.next_export.unwrap_or(now) + self.export_interval;
            if next <= now {
                // Ticks ran late (a slow driver call, NVML down): restart the schedule rather
                // than exporting several ticks in a row.
                next = now + self.export_interval;
            }
            self.next_export = Some(next);
        }
        for (i, group) in SLOW_GROUPS.into_iter().enumerate() {
            let interval = self.interval(group);
            let since_ok =
                self.last_read[i].is_none_or(|last| now + self.tolerance >= last + interval);
            let read = if interval < self.export_interval {
                // Its own cadence, and fresh at every export.
                export || since_ok
            } else {
                export && since_ok
            };
            if read {
                self.last_read[i] = Some(now);
                due.set(group);
            }
        }
        due
    }

    /// The final sample: every group, exported.
    pub fn last(&mut self, now: Instant) -> Due {
        self.last_read = [Some(now); SLOW_GROUPS.len()];
        Due::everything()
    }

    /// A new NVML session starts: every group is read at its first tick (GPM and PCIe need
    /// a first sample to make a window), the export schedule goes on.
    pub fn new_session(&mut self) {
        self.last_read = [None; SLOW_GROUPS.len()];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn defaults() -> SlowIntervals {
        SlowIntervals::default()
    }

    /// Runs `n` ticks `sample` apart (each a few ms late, as real ticks are) and returns,
    /// per tick, (export, energy, process, gpm, pcie).
    fn run(sample: Duration, export: Duration, n: u32) -> Vec<(bool, bool, bool, bool, bool)> {
        let t0 = Instant::now();
        let mut c = Cadence::new(&Timing::new(sample, export, defaults(), 10 * S));
        (0..n)
            .map(|k| {
                let d = c.tick(t0 + sample * k + Duration::from_millis(3 + u64::from(k % 3)));
                (d.export, d.energy, d.process, d.gpm, d.pcie)
            })
            .collect()
    }

    #[test]
    fn defaults_export_every_other_tick_and_read_slow_groups_at_exports() {
        // 5 s samples, 10 s exports; energy, GPM, processes every 10 s; PCIe every 30 s.
        let ticks = run(5 * S, 10 * S, 8);
        let exports: Vec<bool> = ticks.iter().map(|t| t.0).collect();
        assert_eq!(
            exports,
            [true, false, true, false, true, false, true, false]
        );
        for (k, t) in ticks.iter().enumerate() {
            assert_eq!(t.1, t.0, "tick {k}: energy read exactly on export ticks");
            assert_eq!(t.2, t.0, "tick {k}: process utilization too");
            assert_eq!(t.3, t.0, "tick {k}: GPM too");
        }
        let pcie: Vec<usize> = (0..8).filter(|&k| ticks[k].4).collect();
        assert_eq!(pcie, [0, 6], "every third export");
    }

    #[test]
    fn fast_exports_read_slow_groups_at_every_nth_export() {
        // 1 s samples and exports: every tick exported, energy every 10th.
        let ticks = run(S, S, 25);
        assert!(ticks.iter().all(|t| t.0));
        let energy: Vec<usize> = (0..25).filter(|&k| ticks[k].1).collect();
        assert_eq!(energy, [0, 10, 20]);
    }

    #[test]
    fn samples_slower_than_exports_export_every_tick() {
        let ticks = run(5 * S, S, 4);
        assert!(ticks.iter().all(|t| t.0), "{ticks:?}");
        assert_eq!(
            ticks.iter().filter(|t| t.1).count(),
            2,
            "energy at 0 s and 10 s"
        );
    }

    #[test]
    fn groups_faster_than_exports_keep_their_cadence_and_are_fresh_at_exports() {
        // GPM every 3 s, 1 s samples, 10 s exports: read at 0, 3, 6, 9, 10 (export), 13, ...
        let t0 = Instant::now();
        let intervals = SlowIntervals {
            gpm: 3 * S,
            ..SlowIntervals::default()
        };
        let mut c = Cadence::new(&Timing::new(S, 10 * S, intervals, 10 * S));
        let gpm: Vec<u32> = (0..21)
            .filter(|&k| c.tick(t0 + S * k + Duration::from_millis(3)).gpm)
            .collect();
        assert_eq!(gpm, [0, 3, 6, 9, 10, 13, 16, 19, 20]);
    }

    #[test]
    fn late_ticks_restart_the_schedule_and_the_last_sample_reads_everything() {
        let t0 = Instant::now();
        let mut c = Cadence::new(&Timing::new(S, 2 * S, defaults(), 10 * S));
        assert!(c.tick(t0).export);
        assert!(!c.tick(t0 + S).export);
        // A tick 30 s late (NVML was down): exported, then the period starts from it.
        assert!(c.tick(t0 + 32 * S).export);
        assert!(!c.tick(t0 + 33 * S).export);
        assert!(c.tick(t0 + 34 * S).export);
        assert_eq!(c.last(t0 + 34 * S + S / 2), Due::everything());
        c.new_session();
        let d = c.tick(t0 + 35 * S);
        assert!(!d.export && !d.energy, "not an export tick: nothing slow");
        let d = c.tick(t0 + 36 * S);
        assert!(d.export && d.energy && d.gpm && d.pcie && d.process);
    }
}

#[cfg(test)]
mod timing_tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    /// Every derived period at the defaults (5 s samples, 10 s exports) and at a fast and
    /// a slow sample interval.
    #[test]
    fn every_period_derives_from_the_settings_in_one_place() {
        let t = Timing::new(5 * S, 10 * S, SlowIntervals::default(), 15 * S);
        assert_eq!(t.max_sample_age, 10 * S);
        assert_eq!(t.tick_tolerance, 2500 * Duration::from_millis(1));
        assert_eq!(t.export_idle, 15 * S);
        assert_eq!(t.event_wait, Duration::from_millis(500));
        assert_eq!(t.init_backoff_cap, 5 * S);
        // The slowest interval is PCIe's 30 s: 90 s, below the one-hour floor.
        assert_eq!(t.series_expiry, 3600 * S);
        let fast = Timing::new(
            Duration::from_millis(200),
            S,
            SlowIntervals::default(),
            10 * S,
        );
        assert_eq!(fast.max_sample_age, S, "at least one second");
        assert_eq!(fast.event_wait, Duration::from_millis(200));
        assert_eq!(fast.init_backoff_cap, Duration::from_millis(200));
        let slow = SlowIntervals {
            energy: 2000 * S,
            ..SlowIntervals::default()
        };
        let t = Timing::new(60 * S, 120 * S, slow, 180 * S);
        assert_eq!(t.series_expiry, 6000 * S);
        assert_eq!(t.init_backoff_cap, INIT_BACKOFF_CAP);
        assert_eq!(Timing::every(S).watchdog, 10 * S);
    }
}
