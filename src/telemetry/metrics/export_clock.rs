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
//! a slow collector) is not exported either. It is a [`Consumer`] of the hub: it sleeps on its
//! subscription between snapshots, wakes once per sample, and stopping ends the
//! subscription, which wakes it. It also records how long each group of NVML calls took
//! (`gpu_sidecar.sample.duration`, from the snapshot's group durations).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;

use crate::catalogue::metrics::SAMPLE_DURATION;
use crate::sampling::consumer::{Consumer, ConsumerThread};
use crate::sampling::{GroupDuration, Hub, Interest, SamplerBoard, Snapshot};
use crate::telemetry::export_status::ExportStatus;
use crate::telemetry::metrics::encode::Encoder;
use crate::telemetry::metrics::recorded::{Histogram, Recorded};
use crate::telemetry::metrics::self_metrics::OwnValues;
use crate::telemetry::metrics::series::Stamp;
use crate::telemetry::otlp::Transport;

/// Snapshots queued for the export clock: it hands each export to the runtime at once, so a
/// few absorb a descheduled thread; an export tick that waited longer is not exported.
const QUEUE: usize = 4;

/// Bucket bounds of `gpu_sidecar.sample.duration`, seconds: from the sub-microsecond cached
/// getters' sum (tens of µs per GPU) to PCIe throughput's ~40 ms per GPU and beyond.
pub const DURATION_BOUNDS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Attribute of `gpu_sidecar.sample.duration`.
pub use crate::catalogue::attributes::SAMPLE_GROUP as GROUP;

/// Everything one export needs; shared by the clock thread, the exports it hands to the
/// runtime, and the final export at shutdown.
pub struct Exporter {
    pub(crate) encoder: Mutex<Encoder>,
    pub(crate) transport: Transport,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) recorded: Arc<Recorded>,
    pub(crate) hub: Arc<Hub>,
    /// The sampler's state board: the agent's own metrics' NVML error and stuck counts.
    pub(crate) board: Arc<SamplerBoard>,
    pub(crate) status: Arc<ExportStatus>,
    /// Where exports go (for logs; no secrets).
    pub(crate) target: String,
    /// Bound on one export, retries included.
    pub(crate) bound: Duration,
    /// Sequence number of the last snapshot exported (0: none).
    pub(crate) last_seq: AtomicU64,
    /// Shutting down: the clock exports nothing more (the final export does), it only
    /// records the group durations of the snapshots that still come (the final sample's).
    pub(crate) paused: AtomicBool,
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

    fn build(&self, snapshot: Option<&Snapshot>) -> crate::telemetry::metrics::encode::Batch {
        let own = OwnValues::read(&self.board, &self.status);
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
    async fn send(&self, batch: crate::telemetry::metrics::encode::Batch, bound: Duration) -> bool {
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
            let result = crate::telemetry::otlp::console(&batch.request);
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

    /// Stops exporting from the clock (the final export follows at shutdown) and waits at
    /// most `timeout` for the export in flight to be answered.
    pub fn pause(&self, timeout: Duration) -> bool {
        self.paused.store(true, Ordering::SeqCst);
        self.wait_idle(timeout)
    }

    fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
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
                .hub
                .fresh(max_age)
                .filter(|s| s.seq > self.last_seq.load(Ordering::Relaxed));
            let batch = self.build(latest.as_deref());
            self.send(batch, deadline.saturating_duration_since(Instant::now()))
                .await
        })
    }
}

/// The export clock as a consumer of the hub's snapshots.
struct Clock {
    exporter: Arc<Exporter>,
    /// `gpu_sidecar.sample.duration`, recorded from each snapshot's group durations.
    durations: Histogram,
    /// `GPU_SIDECAR_METRICS_DETAIL`: one duration series per group, else one for the sample.
    by_group: bool,
    /// Longest wait for an export tick before exporting anyway.
    idle: Duration,
    export_interval: Duration,
    max_age: Duration,
    idle_until: Instant,
}

impl Consumer for Clock {
    const INTEREST: Interest = Interest::SNAPSHOTS;

    fn snapshot(&mut self, s: &Arc<Snapshot>, durations: &[GroupDuration]) {
        if self.by_group {
            for (group, took) in durations {
                self.durations
                    .record(took.as_secs_f64(), &[KeyValue::new(GROUP, group.as_str())]);
            }
        } else if !durations.is_empty() {
            let took: Duration = durations.iter().map(|(_, took)| *took).sum();
            self.durations.record(took.as_secs_f64(), &[]);
        }
        if self.exporter.is_paused() {
            // The final export takes the final sample as it is.
            return;
        }
        if s.export && s.taken_instant.elapsed() > self.max_age {
            // Queued behind a slow export for too long: its points would still carry their
            // true time, but a burst of late exports helps nobody.
            self.exporter.observe(s);
        } else if s.export {
            self.exporter.start_export(Some(s));
            self.idle_until = Instant::now() + self.idle;
        } else {
            self.exporter.observe(s);
        }
    }

    fn idle_deadline(&self) -> Option<Instant> {
        // Paused: no export anymore, only the last snapshots' durations to record.
        (!self.exporter.is_paused()).then_some(self.idle_until)
    }

    fn idle(&mut self) {
        if self.exporter.is_paused() {
            return;
        }
        self.exporter.start_export(None);
        self.idle_until = Instant::now() + self.export_interval;
    }
}

/// Handle on the `export-clock` thread.
pub struct ExportClock(ConsumerThread);

impl ExportClock {
    /// Starts the thread, subscribed to the snapshots of `hub`; with no export tick for
    /// `idle` it exports anyway, then every `export_interval` ([`Timing`](crate::sampling::cadence::Timing)).
    /// The sample durations are recorded by group of NVML calls when `by_group`
    /// (`GPU_SIDECAR_METRICS_DETAIL`), else one per sample.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(
        exporter: Arc<Exporter>,
        hub: &Arc<Hub>,
        export_interval: Duration,
        idle: Duration,
        max_age: Duration,
        by_group: bool,
    ) -> Self {
        let durations = exporter
            .recorded
            .histogram(&SAMPLE_DURATION, DURATION_BOUNDS);
        Self(ConsumerThread::start(
            "export-clock",
            hub,
            QUEUE,
            Clock {
                exporter,
                durations,
                by_group,
                idle,
                export_interval,
                max_age,
                idle_until: Instant::now() + idle,
            },
        ))
    }

    /// Stops the clock; waits at most `timeout` for it and for an export in flight to end.
    pub fn stop(self, timeout: Duration, exporter: &Exporter) {
        let deadline = Instant::now() + timeout;
        self.0.stop(timeout);
        exporter.wait_idle(deadline.saturating_duration_since(Instant::now()));
    }
}
