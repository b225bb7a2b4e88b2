//! Telemetry export: the OTel SDK `MeterProvider` with a `PeriodicReader` over the agent's
//! exporter, fed by the catalogue's instruments.
//!
//! The `PeriodicReader` runs on its own OS thread (`OTEL_METRIC_EXPORT_INTERVAL`); its
//! callbacks read the latest snapshot and never call NVML.

pub mod catalogue;
pub mod clock;
pub mod events;
pub mod export;
pub mod instruments;
pub mod recorder;
pub mod self_metrics;
pub mod tls;
pub mod xid;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider as _, NoopMeterProvider};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use crate::config::{Config, ExporterKind};
use crate::sampling::SharedState;
use export::{AgentExporter, ExportStatus, Inner};

/// Instrumentation scope name of every metric the agent exports.
pub const SCOPE: &str = "gpu-otel-sidecar";

/// Errors while setting telemetry up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built (endpoint, TLS).
    #[error("cannot build the OTLP metric exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The running metrics pipeline.
pub struct Telemetry {
    provider: Option<SdkMeterProvider>,
    clock: Option<clock::ExportClock>,
    /// Outcome of exports (for health).
    pub status: Arc<ExportStatus>,
    meter: Meter,
}

impl Telemetry {
    /// Builds the pipeline and registers the instruments. With `OTEL_METRICS_EXPORTER=none`
    /// nothing is exported. Must be called with a tokio runtime entered (gRPC).
    ///
    /// # Errors
    /// [`TelemetryError::Exporter`] if the OTLP exporter cannot be built.
    pub fn start(
        config: &Config,
        resource: Resource,
        shared: Arc<SharedState>,
    ) -> Result<Self, TelemetryError> {
        let status = Arc::new(ExportStatus::default());
        let (inner, target) = match config.metrics_exporter {
            ExporterKind::None => {
                return Ok(Self {
                    provider: None,
                    clock: None,
                    status,
                    meter: NoopMeterProvider::new().meter(SCOPE),
                })
            }
            ExporterKind::Console => (
                Inner::Console(export::ConsoleExporter),
                "stdout".to_string(),
            ),
            ExporterKind::Otlp => (
                Inner::Otlp(Box::new(export::otlp_metric_exporter(
                    &config.otlp,
                    status.transport_cause(),
                )?)),
                config.otlp.metrics_endpoint.clone(),
            ),
        };
        let exporter = AgentExporter::new(inner, target, status.clone());
        // The reader's own timer is parked: the export clock flushes right after samples.
        let reader = PeriodicReader::builder(exporter)
            .with_interval(PARKED_READER_INTERVAL)
            .build();
        let provider = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(reader)
            .build();
        let meter = provider.meter_with_scope(
            opentelemetry::InstrumentationScope::builder(SCOPE)
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
        );
        instruments::register(
            &meter,
            shared.clone(),
            max_snapshot_age(config.sample_interval),
        );
        self_metrics::register(&meter, shared.clone(), status.clone());
        let clock = clock::ExportClock::start(
            provider.clone(),
            shared,
            config.export_interval,
            config.sample_interval,
        );
        Ok(Self {
            provider: Some(provider),
            clock: Some(clock),
            status,
            meter,
        })
    }

    /// Stops the export clock (waiting at most `timeout` for an export in flight), so that
    /// the final sample is exported once, by [`Telemetry::shutdown`].
    pub fn stop_clock(&mut self, timeout: Duration) {
        if let Some(clock) = self.clock.take() {
            clock.stop(timeout);
        }
    }

    /// The agent's meter (scope `gpu-otel-sidecar`), for synchronous instruments recorded
    /// outside the catalogue's callbacks (the rules' `nvidia.gpu.alerts`); a no-op meter
    /// when `OTEL_METRICS_EXPORTER=none`.
    pub fn meter(&self) -> Meter {
        self.meter.clone()
    }

    /// SDK shutdown, whose reader makes one final collection and export, bounded by `timeout`. Runs on a
    /// plain thread: a blocking flush from an async worker can hang with tonic.
    /// Returns `false` if the bound was hit (the export is then abandoned).
    pub fn shutdown(mut self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        self.stop_clock(timeout);
        let Some(provider) = self.provider else {
            return true;
        };
        let timeout = deadline.saturating_duration_since(std::time::Instant::now());
        run_bounded("otel-shutdown", timeout, move || {
            // The reader's shutdown collects and exports once more (a force_flush first
            // would send the same points twice).
            if let Err(e) = provider.shutdown() {
                tracing::warn!("final export failed: {e}");
            }
        })
    }
}

/// Runs `f` on a plain thread named `name` and waits at most `timeout` for it: SDK
/// shutdowns block on the network, and from an async worker they can hang with tonic.
/// Returns `false` if the bound was hit (the thread is then left to finish or die with the
/// process).
pub(crate) fn run_bounded(
    name: &str,
    timeout: Duration,
    f: impl FnOnce() + Send + 'static,
) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            f();
            let _ = tx.send(());
        });
    spawned.is_ok() && rx.recv_timeout(timeout).is_ok()
}

/// The `PeriodicReader`'s own interval: far beyond any run, so only the export clock
/// ([`clock::ExportClock`]) and shutdown trigger exports.
const PARKED_READER_INTERVAL: Duration = Duration::from_secs(365 * 24 * 3600);

/// A snapshot older than this is not exported: two sample intervals, at least one second.
pub fn max_snapshot_age(sample_interval: Duration) -> Duration {
    (sample_interval * 2).max(Duration::from_secs(1))
}
