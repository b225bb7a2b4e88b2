//! The webhook's own metrics, [`ADMISSIONS`] and its certificate's [`CERTIFICATE_EXPIRY`] and
//! [`CERTIFICATE_RENEWAL`], and the pipeline that exports them.
//!
//! The definitions are in the metric catalogue (listed in
//! [`crate::catalogue::metrics::RECORDED`] and `docs/metrics.md`). The pipeline is the
//! agent's ([`Telemetry`]), with the agent's exporter settings as they are
//! (`OTEL_METRICS_EXPORTER`, `OTEL_EXPORTER_OTLP_*`, TLS files, `OTEL_METRIC_EXPORT_INTERVAL`):
//! the webhook has no NVML sampler, so no snapshot ever arrives and the export clock exports
//! what was recorded (and the export self-metrics) every export interval.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry_sdk::Resource;

use super::certs::Validity;
use super::inject::Outcome;
use crate::catalogue::metrics::{ADMISSIONS, CERTIFICATE_EXPIRY, CERTIFICATE_RENEWAL};
use crate::config::Config;
use crate::sampling::cadence::Timing;
use crate::sampling::{Hub, SamplerBoard};
use crate::telemetry::metrics::recorded::{Counter, Gauge};
use crate::telemetry::{Telemetry, TelemetryError};

/// Attributes of [`ADMISSIONS`]: what the webhook did ([`Outcome::as_str`]) and the
/// request's `dryRun`.
pub use crate::catalogue::attributes::{WEBHOOK_DRY_RUN as DRY_RUN, WEBHOOK_OUTCOME as OUTCOME};

/// The webhook's metrics pipeline (the agent's [`Telemetry`], fed by no sampler) and the
/// admissions counter.
pub struct WebhookMetrics {
    telemetry: Mutex<Option<Telemetry>>,
    admissions: Counter,
    certificate: CertificateGauges,
}

/// [`CERTIFICATE_EXPIRY`] and [`CERTIFICATE_RENEWAL`]: what is known of the certificate
/// served.
#[derive(Debug, Clone)]
pub struct CertificateGauges {
    expiry: Gauge,
    renewal: Gauge,
}

impl CertificateGauges {
    /// The served certificate's `validity` (`None`: none served, or not readable: both
    /// absent); `renews`: the webhook renews it itself (then [`CERTIFICATE_RENEWAL`] is set).
    pub fn set(&self, validity: Option<Validity>, renews: bool) {
        let secs = |t: std::time::SystemTime| {
            t.duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64())
        };
        match validity {
            Some(v) => {
                self.expiry.set(secs(v.not_after), &[]);
                if renews {
                    self.renewal.set(secs(v.renewal()), &[]);
                } else {
                    self.renewal.clear();
                }
            }
            None => {
                self.expiry.clear();
                self.renewal.clear();
            }
        }
    }
}

impl WebhookMetrics {
    /// Builds the pipeline from the agent's export settings (nothing is exported with
    /// `OTEL_METRICS_EXPORTER=none`). Must be called with a tokio runtime entered (the gRPC
    /// transport spawns its connection there).
    ///
    /// # Errors
    /// [`TelemetryError::Exporter`] if the OTLP transport cannot be built.
    pub fn start(config: &Config, resource: Resource) -> Result<Self, TelemetryError> {
        let telemetry = Telemetry::start(
            config,
            &Timing::from_config(config),
            resource,
            Arc::new(Hub::default()),
            Arc::new(SamplerBoard::default()),
        )?;
        let recorded = telemetry.recorded();
        let admissions = recorded.counter(&ADMISSIONS);
        let certificate = CertificateGauges {
            expiry: recorded.gauge(&CERTIFICATE_EXPIRY),
            renewal: recorded.gauge(&CERTIFICATE_RENEWAL),
        };
        Ok(Self {
            telemetry: Mutex::new(Some(telemetry)),
            admissions,
            certificate,
        })
    }

    /// The gauges of the served certificate.
    pub fn certificate(&self) -> CertificateGauges {
        self.certificate.clone()
    }

    /// Counts one answered AdmissionReview; `dry_run` is its `dryRun` (`None`: not a
    /// readable review).
    pub fn admitted(&self, outcome: Outcome, dry_run: Option<bool>) {
        let outcome = KeyValue::new(OUTCOME, outcome.as_str());
        match dry_run {
            Some(d) => self
                .admissions
                .add(1, &[outcome, KeyValue::new(DRY_RUN, d)]),
            None => self.admissions.add(1, &[outcome]),
        }
    }

    /// Final export, bounded by `timeout` (see [`Telemetry::shutdown`]); later calls do
    /// nothing. Returns `false` if the bound was hit.
    pub fn shutdown(&self, timeout: Duration) -> bool {
        let telemetry = self
            .telemetry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        telemetry.is_none_or(|t| t.shutdown(timeout))
    }
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
            .split(';')
            .next()
            .unwrap()
            .split(" | ")
            .map(|s| s.trim_matches('`'))
            .collect();
        let outcomes: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(listed, outcomes);
        assert!(ADMISSIONS.attributes.contains(&format!("`{DRY_RUN}`")));
    }
}
