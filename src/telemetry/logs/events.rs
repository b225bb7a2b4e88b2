//! Events: OpenTelemetry log records with an `event.name`, exported over OTLP as the logs
//! signal (`OTEL_LOGS_EXPORTER` = `otlp` | `console` | `none`): the general
//! `OTEL_EXPORTER_OTLP_*` settings the metrics use too, unless the `OTEL_EXPORTER_OTLP_LOGS_*`
//! forms say otherwise; TLS in [`crate::telemetry::otlp::tls`].
//!
//! **Nothing lost while the collector is away.** Whoever emits an event (the device-event
//! recorder, the rules, the run report) builds its OTLP `LogRecord` and puts it in the
//! [`Outbox`], a bounded FIFO of `OTEL_BLRP_MAX_QUEUE_SIZE` records
//! ([`DEFAULT_EVENTS_QUEUE_SIZE`](crate::config::DEFAULT_EVENTS_QUEUE_SIZE), sized from the
//! measured event sizes), and never waits on the
//! network. One task on the runtime (`otel-io`) sends them, in order, through the same OTLP
//! transport as the metrics ([`Transport`]: retries as the OTLP specification says, within
//! the OTLP timeout); a batch that still fails stays at the front of the outbox and is sent
//! again, after a backoff (1 s doubling to 5 s), until the collector takes it. A collector
//! down for minutes costs nothing but the outbox: when it is full, the oldest event is
//! dropped for the new one, counted in `gpu_sidecar.events.dropped` and said once per
//! outage. A batch the collector refuses for good (a permanent error: bad request,
//! unauthenticated) is dropped and counted the same way. A record is removed only once the
//! collector accepted it: one that timed out on the way but arrived may arrive twice.
//!
//! **Latency.** A lone event leaves as soon as it is emitted (plus the export itself); while
//! events keep coming, at most one export per `OTEL_BLRP_SCHEDULE_DELAY` (default 1 s),
//! unless `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE` records wait; an idle agent's events task does
//! not wake at all. At shutdown what is queued is sent within the shutdown bound; what is
//! still queued then is dropped and counted. Failed exports are logged like the metrics'
//! ([`ExportStatus`]): the first one at once, with the endpoint and the cause, then at most
//! once a minute, and one line when they work again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::logs::Severity;
use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_sdk::Resource;

use crate::catalogue::metrics::EVENTS_DROPPED;
use crate::config::{Config, ExporterKind};
use crate::telemetry::export_status::ExportStatus;
use crate::telemetry::logs::outbox::Outbox;
use crate::telemetry::metrics::encode::proto;
use crate::telemetry::metrics::recorded::{Counter, Recorded};
use crate::telemetry::otlp::Transport;
use crate::telemetry::TelemetryError;

/// One event to emit.
#[derive(Debug, Clone)]
pub struct Event {
    /// Stable `event.name`, e.g. `nvidia.gpu.xid`.
    pub name: &'static str,
    /// OTel severity (`Info`, `Warn`, `Error`, `Fatal` …).
    pub severity: Severity,
    /// Human-readable body: one sentence a person can act on.
    pub body: String,
    /// Attributes: the GPU's `hw.id`, the values that triggered it, …
    pub attributes: Vec<KeyValue>,
    /// When it happened (defaults to now when `None`).
    pub time: Option<SystemTime>,
}

/// What the events task and every emitter share.
struct Shared {
    outbox: Mutex<Outbox<LogRecord>>,
    /// Wakes the events task: an event was emitted, or shutdown asks for a last flush.
    wake: tokio::sync::Notify,
    /// Signalled when the outbox changed (shutdown waits on it).
    changed: Condvar,
    /// Shutting down: emitters' events are dropped, the task flushes without pacing.
    closed: AtomicBool,
    /// `gpu_sidecar.events.dropped`.
    dropped: Counter,
    /// The same count, for the run report.
    dropped_total: AtomicU64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Outbox<LogRecord>> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts what the outbox dropped since the last call.
    fn count_drops(&self, outbox: &mut Outbox<LogRecord>) {
        let n = outbox.take_dropped();
        if n > 0 {
            self.dropped.add(n, &[]);
            self.dropped_total.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// A hook that sees every event emitted, before (and whether or not) it is exported: the
/// run report's timeline ([`crate::report::timeline`]).
pub type Tap = Arc<dyn Fn(&Event) + Send + Sync>;

/// Where events go. Clones share one pipeline (shutting one down shuts all down).
#[derive(Clone)]
pub struct Events {
    shared: Option<Arc<Shared>>,
    task: Option<Arc<tokio::task::JoinHandle<()>>>,
    tap: Option<Tap>,
}

/// A cheap, cloneable handle that emits events into an [`Events`] pipeline from any thread
/// (the event watcher, rules). After [`Events::shutdown`], what it emits is dropped.
#[derive(Clone, Default)]
pub struct EventEmitter {
    shared: Option<Arc<Shared>>,
    tap: Option<Tap>,
}

impl EventEmitter {
    /// Emits one event: shown to the tap first, then queued in the outbox, never blocking on
    /// the network.
    pub fn emit(&self, event: Event) {
        if let Some(tap) = &self.tap {
            tap(&event);
        }
        let Some(shared) = &self.shared else {
            return;
        };
        if shared.closed.load(Ordering::SeqCst) {
            return;
        }
        let record = log_record(event, SystemTime::now());
        let pushed = {
            let mut outbox = shared.lock();
            let pushed = outbox.push(record);
            shared.count_drops(&mut outbox);
            pushed
        };
        if pushed.first_drop {
            tracing::warn!(
                "the events queue is full (OTEL_BLRP_MAX_QUEUE_SIZE): the oldest events are dropped for the new ones while the collector does not take them, each counted in gpu_sidecar.events.dropped (this line once per outage)"
            );
        }
        shared.wake.notify_one();
    }
}

/// `event` as an OTLP log record, observed at `now`.
fn log_record(event: Event, now: SystemTime) -> LogRecord {
    LogRecord {
        time_unix_nano: proto::unix_nanos(event.time.unwrap_or(now)),
        observed_time_unix_nano: proto::unix_nanos(now),
        severity_number: event.severity as i32,
        severity_text: event.severity.name().to_string(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(event.body)),
        }),
        attributes: proto::attributes(&event.attributes),
        event_name: event.name.to_string(),
        ..Default::default()
    }
}

/// How the events task sends.
struct Sender {
    shared: Arc<Shared>,
    transport: Transport,
    resource: ResourceLogs,
    batch: usize,
    delay: Duration,
    timeout: Duration,
    status: ExportStatus,
    /// The logs endpoint, for log lines (no secrets).
    target: String,
}

/// What a failed events export's line says of a batch the collector refused for good (a
/// permanent error; a collector without a logs pipeline answers `UNIMPLEMENTED` or 404).
const EVENTS_REFUSED: &str = "the collector refused these events for good (a permanent error: it will never take them; a collector without a logs pipeline answers so): they are dropped, counted in gpu_sidecar.events.dropped, and so is every batch it refuses after";

/// What a failed events export's line says of a batch that failed for now.
const EVENTS_HELD: &str = "these events are held (up to OTEL_BLRP_MAX_QUEUE_SIZE, the oldest dropped first) and sent again until the collector takes them";

/// The delays between two sends of a batch that failed: 1 s doubling to 5 s, with jitter.
fn retry_backoff() -> impl Iterator<Item = Duration> {
    use backon::BackoffBuilder as _;
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build()
}

impl Sender {
    fn request(&self, records: Vec<LogRecord>) -> ExportLogsServiceRequest {
        let mut resource_logs = self.resource.clone();
        if let Some(scope) = resource_logs.scope_logs.first_mut() {
            scope.log_records = records;
        }
        ExportLogsServiceRequest {
            resource_logs: vec![resource_logs],
        }
    }

    async fn run(self) {
        let mut backoff = retry_backoff();
        let mut last_send: Option<Instant> = None;
        loop {
            let woken = self.shared.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let closed = self.shared.closed.load(Ordering::SeqCst);
            let waiting = self.shared.lock().len();
            if waiting == 0 {
                woken.await;
                continue;
            }
            // One export per schedule delay while events keep coming, unless a full batch
            // waits or this is the last flush.
            if !closed && waiting < self.batch {
                if let Some(due) = last_send.map(|t| t + self.delay) {
                    if Instant::now() < due {
                        tokio::select! {
                            () = tokio::time::sleep_until(due.into()) => {}
                            () = &mut woken => {}
                        }
                        continue;
                    }
                }
            }
            let Some(records) = self.shared.lock().take(self.batch) else {
                continue;
            };
            last_send = Some(Instant::now());
            let result = self
                .transport
                .send(&self.request(records), self.timeout)
                .await;
            let (retry, refused) = {
                let mut outbox = self.shared.lock();
                let outcome = match &result {
                    Ok(()) => {
                        outbox.delivered();
                        backoff = retry_backoff();
                        (None, None)
                    }
                    Err(e) if e.retryable() => {
                        outbox.failed();
                        (backoff.next(), None)
                    }
                    Err(_) => (None, Some(outbox.refused())),
                };
                self.shared.count_drops(&mut outbox);
                outcome
            };
            // One line per failure, saying what really happens to these events: held and sent
            // again, or refused for good and dropped (never both of the same batch).
            match refused {
                None => self.status.record(&result, &self.target),
                Some(n) => self
                    .status
                    .record_with(&result, &self.target, EVENTS_REFUSED, Some(n)),
            }
            self.shared.changed.notify_all();
            if let Some(delay) = retry {
                if !self.shared.closed.load(Ordering::SeqCst) {
                    // Emitted events wait for the next attempt; a shutdown does not.
                    let deadline = Instant::now() + delay;
                    while Instant::now() < deadline && !self.shared.closed.load(Ordering::SeqCst) {
                        let woken = self.shared.wake.notified();
                        tokio::select! {
                            () = tokio::time::sleep_until(deadline.into()) => {}
                            () = woken => {}
                        }
                    }
                }
            }
        }
    }
}

impl Events {
    /// A sink that drops every event (`OTEL_LOGS_EXPORTER=none`, and tests).
    pub fn disabled() -> Self {
        Self {
            shared: None,
            task: None,
            tap: None,
        }
    }

    /// The same pipeline, every event also shown to `tap` (also with no exporter). Set it
    /// before making emitters: an [`EventEmitter`] made earlier does not call it.
    pub fn with_tap(mut self, tap: Tap) -> Self {
        self.tap = Some(tap);
        self
    }

    /// Builds the events pipeline (outbox, transport, the task that sends) for `resource`,
    /// counting dropped events in `recorded` (`gpu_sidecar.events.dropped`). Must run with
    /// a tokio runtime entered (the task and the gRPC channel live there).
    ///
    /// # Errors
    /// [`TelemetryError::LogsExporter`] if the OTLP transport cannot be built (endpoint,
    /// TLS settings).
    pub fn start(
        config: &Config,
        resource: Resource,
        recorded: &Arc<Recorded>,
    ) -> Result<Self, TelemetryError> {
        let (transport, target) = match config.logs_exporter {
            ExporterKind::None => return Ok(Self::disabled()),
            ExporterKind::Console => (Transport::Console, "stdout".to_string()),
            ExporterKind::Otlp => (
                Transport::otlp(&config.otlp.logs).map_err(TelemetryError::LogsExporter)?,
                config.otlp.logs.endpoint.clone(),
            ),
        };
        let b = config.logs_batch;
        let shared = Arc::new(Shared {
            outbox: Mutex::new(Outbox::new(b.max_queue_size)),
            wake: tokio::sync::Notify::new(),
            changed: Condvar::new(),
            closed: AtomicBool::new(false),
            dropped: recorded.counter(&EVENTS_DROPPED),
            dropped_total: AtomicU64::new(0),
        });
        let resource = ResourceLogs {
            resource: Some(proto::resource(&resource)),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: crate::telemetry::SCOPE.to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            schema_url: resource.schema_url().unwrap_or_default().to_string(),
        };
        let sender = Sender {
            shared: shared.clone(),
            transport,
            resource,
            batch: b.max_export_batch_size,
            delay: b.schedule_delay,
            timeout: config.otlp.logs.timeout,
            status: ExportStatus::new("events", EVENTS_HELD),
            target,
        };
        let task = tokio::runtime::Handle::current().spawn(sender.run());
        Ok(Self {
            shared: Some(shared),
            task: Some(Arc::new(task)),
            tap: None,
        })
    }

    /// Emits one event (queued; never blocks on the network).
    pub fn emit(&self, event: Event) {
        self.emitter().emit(event);
    }

    /// A handle for emitting from other threads.
    pub fn emitter(&self) -> EventEmitter {
        EventEmitter {
            shared: self.shared.clone(),
            tap: self.tap.clone(),
        }
    }

    /// Events dropped so far before the collector took them (`gpu_sidecar.events.dropped`):
    /// the run report's `events_undelivered`.
    pub fn dropped(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |s| s.dropped_total.load(Ordering::Relaxed))
    }

    /// Events waiting for the collector (for tests and the shutdown line).
    pub fn queued(&self) -> usize {
        self.shared.as_ref().map_or(0, |s| s.lock().len())
    }

    /// Sends what is queued, waiting at most `timeout` (a plain blocking wait: call it from
    /// a plain thread), then stops the task. What is still queued then is dropped, counted
    /// and logged. Events emitted from now on are dropped. Returns `false` if the bound was
    /// hit with events still queued.
    pub fn shutdown(self, timeout: Duration) -> bool {
        let Some(shared) = self.shared else {
            return true;
        };
        shared.closed.store(true, Ordering::SeqCst);
        shared.wake.notify_one();
        let deadline = Instant::now() + timeout;
        let mut outbox = shared.lock();
        while !outbox.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            outbox = shared
                .changed
                .wait_timeout(outbox, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let delivered = outbox.is_empty();
        if !delivered {
            let n = outbox.abandon();
            shared.count_drops(&mut outbox);
            tracing::warn!(
                "{n} events could not be delivered before the shutdown bound: they are dropped (counted in gpu_sidecar.events.dropped)"
            );
        }
        drop(outbox);
        if let Some(task) = self.task {
            task.abort();
        }
        delivered
    }
}

#[cfg(test)]
mod tests;
