//! The export clock: the thread `export-clock` exports each snapshot the sampler marked as
//! an export tick ([`Snapshot::export`]), as soon as it is published, so an exported value
//! is as old as reading NVML takes. It builds the request and hands the sending to the
//! runtime (`otel-io`), one export at a time.
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

/// Everything one export needs; shared by the clock thread, the exports it hands to the
/// runtime, and the final export at shutdown.
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
    /// One export at a time: an export is built only once the previous one was answered
    /// (delta series start where the last accepted point ended).
    pub(crate) in_flight: Arc<tokio::sync::Semaphore>,
}

impl Exporter {
    fn encoder(&self) -> std::sync::MutexGuard<'_, Encoder> {
        self.encoder.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows the counters of a snapshot that is not exported.
    pub fn observe(&self, snapshot: &Snapshot) {
        self.encoder().observe(snapshot);
    }

    fn build(&self, snapshot: Option<&Snapshot>) -> super::encode::Batch {
        let own = OwnValues::read(&self.shared, &self.status);
        let batch = self
            .encoder()
            .encode(snapshot, &self.recorded, &own, Stamp::now());
        if let Some(s) = snapshot {
            self.last_seq.fetch_max(s.seq, Ordering::Relaxed);
        }
        batch
    }

    /// Sends a built export within `bound`, records the outcome, and on success lets the
    /// series remember it. The encoder's lock is not held while the request is on the
    /// network.
    async fn send(&self, batch: super::encode::Batch, bound: Duration) -> bool {
        let result = self.transport.send(&batch.request, bound).await;
        self.status.record(&result, &self.target);
        let ok = result.is_ok();
        if ok {
            self.encoder().accepted(batch);
        }
        ok
    }

    /// From the clock thread: builds the export of `snapshot`'s GPU metrics (none when
    /// `None`) with the agent's own and recorded metrics, and hands the sending to the
    /// runtime, so the thread goes back to waiting at once (it wakes once per sample). The
    /// console exporter writes on this thread. While the previous export is still being
    /// answered (a slow collector), this one is skipped: its counters are followed, and the
    /// next export covers them; nothing queues up.
    pub fn start_export(self: &Arc<Self>, snapshot: Option<&Snapshot>) {
        let Ok(permit) = Arc::clone(&self.in_flight).try_acquire_owned() else {
            if let Some(s) = snapshot {
                self.observe(s);
            }
            tracing::debug!("the previous metrics export is still in flight; this one is skipped");
            return;
        };
        let batch = self.build(snapshot);
        if let Transport::Console = self.transport {
            let result = super::transport::console(&batch.request);
            self.status.record(&result, &self.target);
            if result.is_ok() {
                self.encoder().accepted(batch);
            }
            return;
        }
        let exporter = self.clone();
        self.runtime.spawn(async move {
            exporter.send(batch, exporter.bound).await;
            drop(permit);
        });
    }

    /// Waits at most `timeout` for the export in flight to be answered.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.runtime.block_on(async {
            tokio::time::timeout(timeout, self.in_flight.acquire())
                .await
                .is_ok_and(|p| p.is_ok())
        })
    }

    /// The final export at shutdown, within `bound` (the wait for an export still in flight
    /// included): the latest snapshot if it is fresh and not exported yet (the final
    /// sample), else only the agent's own metrics. Blocks; call from a plain thread.
    pub fn export_last(&self, max_age: Duration, bound: Duration) -> bool {
        let deadline = Instant::now() + bound;
        self.runtime.block_on(async {
            let Ok(Ok(_permit)) = tokio::time::timeout(bound, self.in_flight.acquire()).await
            else {
                return false;
            };
            let latest = self
                .shared
                .fresh(max_age)
                .filter(|s| s.seq > self.last_seq.load(Ordering::Relaxed));
            let batch = self.build(latest.as_deref());
            self.send(batch, deadline.saturating_duration_since(Instant::now()))
                .await
        })
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
                            exporter.start_export(Some(&s));
                            idle_until = Instant::now() + idle;
                        }
                        Ok(s) => exporter.observe(&s),
                        Err(RecvTimeoutError::Timeout) => {
                            exporter.start_export(None);
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

    /// Stops the clock; waits at most `timeout` for it and for an export in flight to end.
    pub fn stop(mut self, timeout: Duration, exporter: &Exporter) {
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
        exporter.wait_idle(deadline.saturating_duration_since(Instant::now()));
    }
}
