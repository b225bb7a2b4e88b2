//! The export clock: exports right after a sample, so an exported value is as old as one
//! sample's reading takes, not up to a whole sample interval.
//!
//! The SDK's `PeriodicReader` keeps its own timer, independent of the sampler's: each
//! export then carried the previous sample, up to one sample interval old (seen on the
//! H200: every value equalled `nvidia-smi` one interval earlier). Here the reader's own
//! timer is parked and the thread `export-clock` calls `force_flush` when an export is due
//! *and* a new sample has just been published. If no sample comes within a grace period
//! after the due time (a wedged driver call, NVML down), it exports anyway: self-metrics go
//! on, and stale GPU values are left out by [`crate::sampling::SharedState::fresh`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry_sdk::metrics::SdkMeterProvider;

use crate::sampling::SharedState;

/// When to export, given sample arrivals; pure, so it is tested without clocks.
#[derive(Debug, Clone)]
pub struct Schedule {
    interval: Duration,
    grace: Duration,
    due: Instant,
}

impl Schedule {
    /// First export due at `start` (the first sample is exported at once, so a collector or
    /// a person sees data within a second of start), then every `export_interval`; after a
    /// due time, wait up to `grace` for a fresh sample.
    pub fn new(start: Instant, export_interval: Duration, sample_interval: Duration) -> Self {
        Self {
            interval: export_interval,
            grace: sample_interval.min(export_interval / 2) + Duration::from_millis(50),
            due: start,
        }
    }

    /// A sample was just published at `now`: export if one is due.
    pub fn on_sample(&mut self, now: Instant) -> bool {
        let export = now >= self.due;
        if export {
            self.advance(now);
        }
        export
    }

    /// No sample came: export if the grace after the due time is over.
    pub fn on_idle(&mut self, now: Instant) -> bool {
        let export = now >= self.due + self.grace;
        if export {
            self.advance(now);
        }
        export
    }

    /// How long to wait for a sample before calling [`Schedule::on_idle`].
    pub fn wait(&self, now: Instant) -> Duration {
        if now < self.due {
            self.due - now
        } else {
            (self.due + self.grace).saturating_duration_since(now)
        }
    }

    /// The next due time.
    pub fn due(&self) -> Instant {
        self.due
    }

    fn advance(&mut self, now: Instant) {
        self.due += self.interval;
        if self.due <= now {
            self.due = now + self.interval;
        }
    }
}

/// Handle on the `export-clock` thread.
pub struct ExportClock {
    stop: Arc<AtomicBool>,
    shared: Arc<SharedState>,
    subscription: u64,
    thread: Option<JoinHandle<()>>,
}

impl ExportClock {
    /// Starts the thread, subscribed to the sampler's snapshots in `shared`. It sleeps until
    /// a sample arrives or an export is due (no polling): stopping ends its subscription,
    /// which wakes it.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(
        provider: SdkMeterProvider,
        shared: Arc<SharedState>,
        export_interval: Duration,
        sample_interval: Duration,
    ) -> Self {
        let (subscription, samples) = shared.subscribe_with_id(1);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("export-clock".into())
            .spawn(move || {
                let mut schedule = Schedule::new(Instant::now(), export_interval, sample_interval);
                loop {
                    let export = match samples.recv_timeout(schedule.wait(Instant::now())) {
                        Ok(_) => schedule.on_sample(Instant::now()),
                        Err(RecvTimeoutError::Timeout) => schedule.on_idle(Instant::now()),
                        Err(RecvTimeoutError::Disconnected) => return,
                    };
                    if export && !flag.load(Ordering::Relaxed) {
                        // Outcome is recorded (and logged) by the exporter itself.
                        let _ = provider.force_flush();
                    }
                }
            })
            .expect("spawn export-clock thread");
        Self {
            stop,
            shared,
            subscription,
            thread: Some(thread),
        }
    }

    /// Stops the clock; waits at most `timeout` for an export in flight to end.
    pub fn stop(mut self, timeout: Duration) {
        self.stop.store(true, Ordering::Relaxed);
        self.shared.unsubscribe(self.subscription);
        let deadline = Instant::now() + timeout;
        if let Some(t) = self.thread.take() {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn exports_at_the_first_sample_after_due() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 10 * S, 5 * S);
        assert!(
            s.on_sample(t0 + Duration::from_millis(2)),
            "the first sample goes out at once"
        );
        assert_eq!(s.due(), t0 + 10 * S);
        assert!(!s.on_sample(t0 + 5 * S), "not due yet");
        assert_eq!(s.wait(t0 + 5 * S), 5 * S);
        assert!(
            !s.on_idle(t0 + 10 * S),
            "due, but a sample is expected within the grace"
        );
        assert!(
            s.on_sample(t0 + 10 * S + Duration::from_millis(300)),
            "fresh sample after due"
        );
        assert_eq!(s.due(), t0 + 20 * S, "the schedule keeps its period");
    }

    #[test]
    fn exports_without_a_sample_after_the_grace() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 10 * S, 5 * S);
        assert!(s.on_sample(t0));
        let grace = 5 * S + Duration::from_millis(50);
        assert_eq!(s.wait(t0 + 10 * S), grace);
        assert!(!s.on_idle(t0 + 10 * S + grace - Duration::from_millis(1)));
        assert!(
            s.on_idle(t0 + 10 * S + grace),
            "wedged sampler: export anyway"
        );
        assert_eq!(s.due(), t0 + 20 * S);
    }

    #[test]
    fn fast_exports_with_slow_samples_are_not_held_more_than_half_an_interval() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 2 * S, 5 * S);
        assert!(s.on_sample(t0));
        assert!(s.on_idle(t0 + 2 * S + S + Duration::from_millis(50)));
        assert_eq!(s.due(), t0 + 4 * S);
    }

    #[test]
    fn a_late_export_resets_the_schedule_instead_of_bursting() {
        let t0 = Instant::now();
        let mut s = Schedule::new(t0, 10 * S, 5 * S);
        assert!(s.on_sample(t0));
        assert!(s.on_sample(t0 + 35 * S));
        assert_eq!(s.due(), t0 + 45 * S);
    }
}
