//! Telemetry export: the OTel SDK `MeterProvider` with a `PeriodicReader` over the agent's
//! exporter, fed by the catalogue's instruments.
//!
//! The `PeriodicReader` runs on its own OS thread (`OTEL_METRIC_EXPORT_INTERVAL`); its
//! callbacks read the latest snapshot and never call NVML.

pub mod catalogue;
pub mod events;
pub mod export;
pub mod instruments;
pub mod recorder;
pub mod xid;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::{Meter, MeterProvider as _};
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
    /// Outcome of exports (for health).
    pub status: Arc<ExportStatus>,
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
                    status,
                })
            }
            ExporterKind::Console => (
                Inner::Console(export::ConsoleExporter),
                "stdout".to_string(),
            ),
            ExporterKind::Otlp => (
                Inner::Otlp(Box::new(export::otlp_metric_exporter(&config.otlp)?)),
                config.otlp.metrics_endpoint.clone(),
            ),
        };
        let exporter = AgentExporter::new(inner, target, status.clone());
        let reader = PeriodicReader::builder(exporter)
            .with_interval(config.export_interval)
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
        instruments::register(&meter, shared, max_snapshot_age(config.sample_interval));
        Ok(Self {
            provider: Some(provider),
            status,
        })
    }

    /// The agent's meter (scope [`SCOPE`]), for synchronous instruments such as the
    /// [`recorder`]'s; a no-op meter when metrics are not exported.
    pub fn meter(&self) -> Meter {
        let scope = opentelemetry::InstrumentationScope::builder(SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        match &self.provider {
            Some(p) => p.meter_with_scope(scope),
            None => opentelemetry::metrics::NoopMeterProvider::new().meter_with_scope(scope),
        }
    }

    /// One final collection and export, then SDK shutdown, bounded by `timeout`. Runs on a
    /// plain thread: a blocking flush from an async worker can hang with tonic.
    /// Returns `false` if the bound was hit (the export is then abandoned).
    pub fn shutdown(self, timeout: Duration) -> bool {
        let Some(provider) = self.provider else {
            return true;
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("otel-shutdown".into())
            .spawn(move || {
                if let Err(e) = provider.force_flush() {
                    tracing::warn!("final export failed: {e}");
                }
                if let Err(e) = provider.shutdown() {
                    tracing::debug!("meter provider shutdown: {e}");
                }
                let _ = tx.send(());
            });
        spawned.is_ok() && rx.recv_timeout(timeout).is_ok()
    }
}

/// A snapshot older than this is not exported: two sample intervals, at least one second.
pub fn max_snapshot_age(sample_interval: Duration) -> Duration {
    (sample_interval * 2).max(Duration::from_secs(1))
}
