//! Events: OpenTelemetry log records with an `event.name`, exported over OTLP as the logs
//! signal (`OTEL_LOGS_EXPORTER` = `otlp` | `console` | `none`): the general
//! `OTEL_EXPORTER_OTLP_*` settings the metrics use too, unless the `OTEL_EXPORTER_OTLP_LOGS_*`
//! forms say otherwise; TLS in [`super::tls`].
//!
//! Records go through the SDK's `BatchLogProcessor` (its own thread, bounded queue,
//! `OTEL_BLRP_MAX_QUEUE_SIZE` (2048): an unreachable collector drops events, never grows
//! memory), so whoever emits an event (the sampler, a rule) never waits on the network.
//!
//! **Wake-ups and latency.** The SDK's processor exports on a timer (`scheduled_delay`) and
//! so wakes every `OTEL_BLRP_SCHEDULE_DELAY` even with nothing to send. Here its timer is
//! set to [`IDLE_SCHEDULE`] and a thread of ours, `otel-logs-flush`, sleeps until an event
//! is emitted and flushes at once, then at most once per `OTEL_BLRP_SCHEDULE_DELAY` (default
//! 1 s) while events keep coming: a lone event is sent as soon as it is emitted (plus the
//! export itself; before, up to one schedule delay later), one in a burst at most one
//! schedule delay later, and an idle agent's logs pipeline does not wake at all. A full batch (`OTEL_BLRP_MAX_EXPORT_BATCH_SIZE`) is sent at once by the SDK;
//! shutdown sends what is queued. A
//! failed OTLP export is logged like a failed metric export ([`ExportStatus`]): the first one
//! at once, with the endpoint and the cause, then at most once a minute.

use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::logs::{
    BatchConfigBuilder, BatchLogProcessor, LogBatch, LogExporter, SdkLogger, SdkLoggerProvider,
};
use opentelemetry_sdk::Resource;

use super::export::{ExportStatus, TransportCause};
use crate::config::{Config, ExporterKind, LogsBatch, OtlpExporter, Protocol};

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

/// The SDK batch processor's own export timer: long, so that it does not wake an idle agent;
/// `otel-logs-flush` flushes after each burst of events instead.
pub const IDLE_SCHEDULE: Duration = Duration::from_secs(24 * 3600);

/// Where events go. Clones share one pipeline (shutting one down shuts all down).
#[derive(Clone)]
pub struct Events {
    provider: Option<SdkLoggerProvider>,
    logger: Option<SdkLogger>,
    flush: Option<mpsc::SyncSender<()>>,
}

/// A cheap, cloneable handle that emits events into an [`Events`] pipeline from any thread
/// (the event watcher, rules). After [`Events::shutdown`], what it emits is dropped.
#[derive(Clone, Default)]
pub struct EventEmitter {
    logger: Option<SdkLogger>,
    /// Wakes `otel-logs-flush` (a full slot means a flush is already coming).
    flush: Option<mpsc::SyncSender<()>>,
}

impl EventEmitter {
    /// Emits one event (queued; never blocks on the network).
    pub fn emit(&self, event: Event) {
        let Some(logger) = &self.logger else {
            return;
        };
        let mut record = logger.create_log_record();
        record.set_event_name(event.name);
        record.set_severity_number(event.severity);
        record.set_severity_text(event.severity.name());
        record.set_body(AnyValue::from(event.body));
        let now = SystemTime::now();
        record.set_timestamp(event.time.unwrap_or(now));
        record.set_observed_timestamp(now);
        record.add_attributes(
            event
                .attributes
                .into_iter()
                .map(|kv| (kv.key, any_value(kv.value))),
        );
        logger.emit(record);
        if let Some(flush) = &self.flush {
            let _ = flush.try_send(());
        }
    }
}

/// Starts `otel-logs-flush`: it sleeps until an event is emitted and flushes `provider` at
/// once, then at most once per `delay` while events keep coming (those emitted meanwhile go
/// together in the next flush). It ends when every emitter is gone or the provider is shut
/// down.
fn start_flusher(provider: SdkLoggerProvider, delay: Duration) -> Option<mpsc::SyncSender<()>> {
    let (tx, rx) = mpsc::sync_channel::<()>(1);
    let spawned = std::thread::Builder::new()
        .name("otel-logs-flush".into())
        .spawn(move || {
            while rx.recv().is_ok() {
                loop {
                    if let Err(OTelSdkError::AlreadyShutdown) = provider.force_flush() {
                        return;
                    }
                    // One flush per delay at most: what is emitted meanwhile waits for it.
                    std::thread::sleep(delay);
                    match rx.try_recv() {
                        Ok(()) => continue,
                        Err(mpsc::TryRecvError::Empty) => break,
                        Err(mpsc::TryRecvError::Disconnected) => return,
                    }
                }
            }
        });
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::error!("cannot start the otel-logs-flush thread: {e}; events are sent only when a batch fills or at shutdown");
            None
        }
    }
}

/// Writes each batch of events as one line of OTLP/JSON (`ExportLogsServiceRequest`) on stdout.
#[derive(Debug, Default)]
pub struct ConsoleLogExporter {
    resource: Option<Resource>,
}

impl LogExporter for ConsoleLogExporter {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let resource: ResourceAttributesWithSchema = match &self.resource {
            Some(r) => r.into(),
            None => (&Resource::builder_empty().build()).into(),
        };
        let request = ExportLogsServiceRequest {
            resource_logs:
                opentelemetry_proto::transform::logs::tonic::group_logs_by_resource_and_scope(
                    &batch, &resource,
                ),
        };
        let line = serde_json::to_string(&request)
            .map_err(|e| OTelSdkError::InternalFailure(format!("JSON encoding: {e}")))?;
        super::transport::console_line(&line)
            .map_err(|e| OTelSdkError::InternalFailure(format!("stdout: {e}")))
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = Some(resource.clone());
    }
}

fn otlp_log_exporter(
    c: &OtlpExporter,
    cause: TransportCause,
) -> Result<opentelemetry_otlp::LogExporter, opentelemetry_otlp::ExporterBuildError> {
    let builder = opentelemetry_otlp::LogExporter::builder();
    match c.protocol {
        Protocol::Grpc => super::export::configure_tonic(builder.with_tonic(), c).build(),
        Protocol::HttpProtobuf => {
            super::export::configure_http(builder.with_http(), c, cause)?.build()
        }
    }
}

/// The batch processor for `exporter`, configured from the validated `OTEL_BLRP_*`
/// settings (set explicitly: the SDK would otherwise read the environment itself), its timer
/// at [`IDLE_SCHEDULE`] (`otel-logs-flush` applies `OTEL_BLRP_SCHEDULE_DELAY`).
fn batch<E: LogExporter + 'static>(exporter: E, b: LogsBatch) -> BatchLogProcessor {
    BatchLogProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_scheduled_delay(IDLE_SCHEDULE)
                .with_max_queue_size(b.max_queue_size)
                .with_max_export_batch_size(b.max_export_batch_size)
                .build(),
        )
        .build()
}

/// The OTLP log exporter, recording each export's outcome in an [`ExportStatus`] (which logs
/// failures at a bounded rate, naming the endpoint and the cause).
#[derive(Debug)]
struct AgentLogExporter {
    otlp: opentelemetry_otlp::LogExporter,
    /// The logs endpoint, for log lines (no secrets).
    target: String,
    status: Arc<ExportStatus>,
}

impl LogExporter for AgentLogExporter {
    async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
        let result = self.otlp.export(batch).await;
        self.status.record(&result, &self.target);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.otlp.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.otlp.set_resource(resource);
    }
}

/// A metric attribute value as a log attribute value.
fn any_value(v: opentelemetry::Value) -> AnyValue {
    use opentelemetry::{Array, Value};
    match v {
        Value::Bool(b) => AnyValue::Boolean(b),
        Value::I64(i) => AnyValue::Int(i),
        Value::F64(f) => AnyValue::Double(f),
        Value::String(s) => AnyValue::String(s),
        Value::Array(Array::I64(a)) => {
            AnyValue::ListAny(Box::new(a.into_iter().map(AnyValue::Int).collect()))
        }
        Value::Array(Array::F64(a)) => {
            AnyValue::ListAny(Box::new(a.into_iter().map(AnyValue::Double).collect()))
        }
        Value::Array(Array::Bool(a)) => {
            AnyValue::ListAny(Box::new(a.into_iter().map(AnyValue::Boolean).collect()))
        }
        Value::Array(Array::String(a)) => {
            AnyValue::ListAny(Box::new(a.into_iter().map(AnyValue::String).collect()))
        }
        other => AnyValue::String(other.to_string().into()),
    }
}

impl Events {
    /// A sink that drops every event (`OTEL_LOGS_EXPORTER=none`, and tests).
    pub fn disabled() -> Self {
        Self {
            provider: None,
            logger: None,
            flush: None,
        }
    }

    /// Builds the logs pipeline. Must run with a tokio runtime entered (gRPC).
    ///
    /// # Errors
    /// The SDK's build error for the OTLP exporter.
    pub fn start(
        config: &Config,
        resource: Resource,
    ) -> Result<Self, opentelemetry_otlp::ExporterBuildError> {
        let builder = SdkLoggerProvider::builder().with_resource(resource);
        let provider = match config.logs_exporter {
            ExporterKind::None => return Ok(Self::disabled()),
            ExporterKind::Console => {
                builder.with_log_processor(batch(ConsoleLogExporter::default(), config.logs_batch))
            }
            ExporterKind::Otlp => {
                let status = Arc::new(ExportStatus::new(
                    "events",
                    "these events are lost (nothing is queued for later)",
                ));
                builder.with_log_processor(batch(
                    AgentLogExporter {
                        otlp: otlp_log_exporter(&config.otlp.logs, status.transport_cause())?,
                        target: config.otlp.logs.endpoint.clone(),
                        status,
                    },
                    config.logs_batch,
                ))
            }
        }
        .build();
        Ok(Self::on(provider, config.logs_batch.schedule_delay))
    }

    /// Emits into `provider`, flushed `schedule_delay` after each burst of events.
    fn on(provider: SdkLoggerProvider, schedule_delay: Duration) -> Self {
        let logger = provider.logger(super::SCOPE);
        let flush = start_flusher(provider.clone(), schedule_delay);
        Self {
            provider: Some(provider),
            logger: Some(logger),
            flush,
        }
    }

    /// Emits one event (queued; never blocks on the network).
    pub fn emit(&self, event: Event) {
        self.emitter().emit(event);
    }

    /// A handle for emitting from other threads.
    pub fn emitter(&self) -> EventEmitter {
        EventEmitter {
            logger: self.logger.clone(),
            flush: self.flush.clone(),
        }
    }

    /// Exports what is queued and shuts down, on a plain thread, bounded by `timeout`.
    /// Returns `false` if the bound was hit.
    pub fn shutdown(self, timeout: Duration) -> bool {
        let Some(provider) = self.provider else {
            return true;
        };
        super::run_bounded("otel-logs-shutdown", timeout, move || {
            // Shutdown exports what the batch processor holds. A failed export was logged by
            // `AgentLogExporter` with its cause; the SDK's own error for it says only
            // "Failed to shutdown", so it is not logged again.
            let _ = provider.shutdown();
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Instant;

    use opentelemetry::logs::Severity;

    use super::*;

    /// Keeps the body of every record it is given.
    #[derive(Debug, Clone, Default)]
    struct Keep(Arc<Mutex<Vec<String>>>);

    impl LogExporter for Keep {
        async fn export(&self, batch: LogBatch<'_>) -> OTelSdkResult {
            let mut kept = self.0.lock().unwrap();
            for (record, _) in batch.iter() {
                if let Some(AnyValue::String(body)) = record.body() {
                    kept.push(body.to_string());
                }
            }
            Ok(())
        }
    }

    /// With the SDK's own timer at [`IDLE_SCHEDULE`], events still go out while the agent
    /// runs (not only at shutdown), in order: the first at once, the next within one
    /// `OTEL_BLRP_SCHEDULE_DELAY`.
    #[test]
    fn events_are_sent_while_running_not_at_the_sdk_timer() {
        let kept = Keep::default();
        let delay = Duration::from_millis(50);
        let provider = SdkLoggerProvider::builder()
            .with_log_processor(batch(
                kept.clone(),
                LogsBatch {
                    schedule_delay: delay,
                    ..LogsBatch::default()
                },
            ))
            .build();
        let events = Events::on(provider, delay);
        let emitter = events.emitter();
        let event = |body: &str| Event {
            name: "nvidia.gpu.xid",
            severity: Severity::Error,
            body: body.into(),
            attributes: Vec::new(),
            time: None,
        };
        emitter.emit(event("XID 79"));
        emitter.emit(event("XID 48"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while kept.0.lock().unwrap().len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            *kept.0.lock().unwrap(),
            ["XID 79", "XID 48"],
            "sent while running, without waiting for the SDK's {IDLE_SCHEDULE:?} timer"
        );
        assert!(events.shutdown(Duration::from_secs(5)));
    }
}
