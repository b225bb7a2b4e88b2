//! The webhook's own metric, [`ADMISSIONS`], and the pipeline that exports it.
//!
//! The definition is a [`RecordedDef`] listed in the metric catalogue
//! ([`crate::telemetry::catalogue::RECORDED`], `docs/metrics.md`). The pipeline takes the
//! agent's exporter settings as they are (`OTEL_METRICS_EXPORTER`, `OTEL_EXPORTER_OTLP_*`,
//! TLS files, `OTEL_METRIC_EXPORT_INTERVAL`) and the agent's exporter
//! ([`crate::telemetry::export`]); only its timer differs: the webhook has no samples to
//! follow, so the SDK's `PeriodicReader` exports every export interval.

use std::time::Duration;

use opentelemetry::metrics::{Counter, Meter, MeterProvider as _, NoopMeterProvider};
use opentelemetry::KeyValue;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::Resource;

use super::inject::Outcome;
use crate::config::{Config, ExporterKind};
use crate::telemetry::catalogue::{RecordedDef, RecordedInstrument};
use crate::telemetry::export::{self, AgentExporter, ExportStatus, Inner};
use crate::telemetry::{TelemetryError, SCOPE};

/// Attribute of [`ADMISSIONS`]: what the webhook did ([`Outcome::as_str`]).
pub const OUTCOME: &str = "gpu_sidecar.webhook.outcome";

/// `gpu_sidecar.webhook.admissions`: AdmissionReviews answered, by outcome.
pub static ADMISSIONS: RecordedDef = RecordedDef {
    name: "gpu_sidecar.webhook.admissions",
    instrument: RecordedInstrument::Counter,
    unit: "{admission}",
    description: "AdmissionReviews the admission webhook answered since it started, by what it did with the pod (exported by the `webhook` command's own process, not by sidecars).",
    attributes: "`gpu_sidecar.webhook.outcome` = `injected` | `already_injected` | `opted_out` | `not_requested` | `no_gpu` | `ambiguous_container` | `unknown_container` | `visibility_mismatch` | `volume_conflict` | `ignored` | `invalid`",
    source: "the `webhook` command (`src/webhook/`), one per `POST /mutate` or `/mutate/namespace` answered",
};

/// The webhook's metrics pipeline: a meter provider (none with `OTEL_METRICS_EXPORTER=none`)
/// and the admissions counter.
pub struct WebhookMetrics {
    provider: Option<SdkMeterProvider>,
    admissions: Counter<u64>,
}

impl WebhookMetrics {
    /// Builds the pipeline from the agent's export settings. Must be called with a tokio
    /// runtime entered (the gRPC exporter spawns its connection there).
    ///
    /// # Errors
    /// [`TelemetryError::Exporter`] if the OTLP exporter cannot be built.
    pub fn start(config: &Config, resource: Resource) -> Result<Self, TelemetryError> {
        let status = std::sync::Arc::new(ExportStatus::default());
        let (inner, target) = match config.metrics_exporter {
            ExporterKind::None => {
                return Ok(Self {
                    provider: None,
                    admissions: counter(&NoopMeterProvider::new().meter(SCOPE)),
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
        let exporter = AgentExporter::new(inner, target, status);
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
        Ok(Self {
            provider: Some(provider),
            admissions: counter(&meter),
        })
    }

    /// Counts one answered AdmissionReview.
    pub fn admitted(&self, outcome: Outcome) {
        self.admissions
            .add(1, &[KeyValue::new(OUTCOME, outcome.as_str())]);
    }

    /// Final export, bounded by `timeout`, on a plain thread (see
    /// [`crate::telemetry::Telemetry::shutdown`]). Returns `false` if the bound was hit.
    pub fn shutdown(&self, timeout: Duration) -> bool {
        let Some(provider) = self.provider.clone() else {
            return true;
        };
        crate::telemetry::run_bounded("otel-shutdown", timeout, move || {
            if let Err(e) = provider.shutdown() {
                tracing::warn!("final export of the webhook's metrics failed: {e}");
            }
        })
    }
}

/// Registers [`ADMISSIONS`] on `meter`.
fn counter(meter: &Meter) -> Counter<u64> {
    meter
        .u64_counter(ADMISSIONS.name)
        .with_unit(ADMISSIONS.unit)
        .with_description(ADMISSIONS.description)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented attribute values are exactly the outcomes.
    #[test]
    fn documented_outcomes_are_the_outcomes() {
        let listed: Vec<&str> = ADMISSIONS
            .attributes
            .split(" = ")
            .nth(1)
            .unwrap()
            .split(" | ")
            .map(|s| s.trim_matches('`'))
            .collect();
        let outcomes: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(listed, outcomes);
    }
}
