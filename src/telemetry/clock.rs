//! The export clock: the thread `export-clock` exports each snapshot the sampler marked as
//! an export tick ([`Snapshot::export`]), as soon as it is published, so an exported value
//! is as old as reading NVML takes.
//!
//! The export schedule itself lives in the sampler ([`crate::sampling::cadence`]), which
//! reads the slow groups on export ticks only. Other snapshots only update the counters'
//! state (a reset between exports is still seen). When no export tick comes within one
//! export interval plus one sample interval (NVML down, a driver call wedged), it exports
//! anyway: the agent's own metrics go on, and GPU values, having no fresh export tick, are
//! left out. An export tick's snapshot that waited longer than two sample intervals (behind
//! a slow collector) is not exported either. The thread sleeps on its subscription between snapshots: it wakes once per
//! sample, and stopping ends the subscription, which wakes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::encode::Encoder;
use super::export::ExportStatus;
use super::recorded::Recorded;
use super::self_metrics::OwnValues;
use super::series::Stamp;
use super::transport::Transport;
use crate::sampling::{SharedState, Snapshot};

/// Everything one export needs; shared by the clock thread and the final export at
/// shutdown.
pub struct Exporter {
    pub(crate) encoder: Mutex<Encoder>,
    pub(crate) transport: Transport,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) recorded: Arc<Recorded>,
    pub(crate) shared: Arc<SharedState>,
    pub(crate) status: Arc<ExportStatus>,
    /// Where exports go (for logs; no secrets).
    pub(crate) target: String,
    /// Bound on one export, retries included.
    pub(crate) bound: Duration,
    /// Sequence number of the last snapshot exported (0: none).
    pub(crate) last_seq: AtomicU64,
}

impl Exporter {
    fn encoder(&self) -> std::sync::MutexGuard<'_, Encoder> {
        self.encoder.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows the counters of a snapshot that is not exported.
    pub fn observe(&self, snapshot: &Snapshot) {
        self.encoder().observe(snapshot);
    }

    /// Exports `snapshot`'s GPU metrics (none when `None`) with the agent's own and recorded
    /// metrics, within `bound`; records the outcome. The encoder's lock is not held while
    /// the request is on the network.
    pub fn export(&self, snapshot: Option<&Snapshot>, bound: Duration) -> bool {
        let own = OwnValues::read(&self.shared, &self.status);
        let batch = self
            .encoder()
            .encode(snapshot, &self.recorded, &own, Stamp::now());
        if let Some(s) = snapshot {
            self.last_seq.fetch_max(s.seq, Ordering::Relaxed);
        }
        let result = self
            .runtime
            .block_on(self.transport.send(&batch.request, bound));
        self.status.record(&result, &self.target);
        let ok = result.is_ok();
        if ok {
            self.encoder().accepted(batch);
        }
        ok
    }

    /// The final export at shutdown: the latest snapshot if it is fresh and not exported
    /// yet (the final sample), else only the agent's own metrics.
    pub fn export_last(&self, max_age: Duration, bound: Duration) -> bool {
        let latest = self
            .shared
            .fresh(max_age)
            .filter(|s| s.seq > self.last_seq.load(Ordering::Relaxed));
        self.export(latest.as_deref(), bound)
    }
}

/// Handle on the `export-clock` thread.
pub struct ExportClock {
    shared: Arc<SharedState>,
    subscription: u64,
    thread: Option<JoinHandle<()>>,
}

impl ExportClock {
    /// Starts the thread, subscribed to the sampler's snapshots in `shared`.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(
        exporter: Arc<Exporter>,
        shared: Arc<SharedState>,
        export_interval: Duration,
        sample_interval: Duration,
        max_age: Duration,
    ) -> Self {
        let (subscription, samples) = shared.subscribe_with_id(4);
        let idle = export_interval + sample_interval;
        let thread = std::thread::Builder::new()
            .name("export-clock".into())
            .spawn(move || {
                let mut idle_until = Instant::now() + idle;
                loop {
                    let wait = idle_until.saturating_duration_since(Instant::now());
                    match samples.recv_timeout(wait) {
                        // Queued behind a slow export for too long: its points would still
                        // carry their true time, but a burst of late exports helps nobody.
                        Ok(s) if s.export && s.taken_instant.elapsed() > max_age => {
                            exporter.observe(&s);
                        }
                        Ok(s) if s.export => {
                            exporter.export(Some(&s), exporter.bound);
                            idle_until = Instant::now() + idle;
                        }
                        Ok(s) => exporter.observe(&s),
                        Err(RecvTimeoutError::Timeout) => {
                            exporter.export(None, exporter.bound);
                            idle_until = Instant::now() + export_interval;
                        }
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .expect("spawn export-clock thread");
        Self {
            shared,
            subscription,
            thread: Some(thread),
        }
    }

    /// Stops the clock; waits at most `timeout` for an export in flight to end.
    pub fn stop(mut self, timeout: Duration) {
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
