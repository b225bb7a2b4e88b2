//! The outcome of the exports of each signal, metrics and events (logs) alike
//! ([`ExportStatus`]: the probes read the metrics', failures of both are logged at a bounded
//! rate, each naming its signal), and the OTLP exporter builders of the events' (logs)
//! pipeline.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};

use crate::config::OtlpExporter;

/// What the last exports of one signal did; read by health checks and logs.
#[derive(Debug)]
pub struct ExportStatus {
    state: Mutex<ExportState>,
    /// The signal, in log lines: `metrics` or `events`.
    signal: &'static str,
    /// What a failure means for the data, in log lines.
    on_failure: &'static str,
    /// Why the last HTTP export failed in transport (set by [`CauseReportingClient`]).
    cause: TransportCause,
}

impl Default for ExportStatus {
    /// The metrics' status.
    fn default() -> Self {
        Self::new(
            "metrics",
            "the data of this export is dropped (cumulative counters stay continuous), retrying at the next interval",
        )
    }
}

/// The cause of an OTLP/HTTP exporter's last transport failure (connection refused, DNS,
/// TLS, timeout), with its source chain. opentelemetry-otlp reports every such failure as
/// "HTTP export failed: network error" and keeps the cause to its debug logs; the client
/// records it here and [`ExportStatus::record`] adds it to the failure line.
#[derive(Debug, Clone, Default)]
pub struct TransportCause(Arc<Mutex<Option<String>>>);

impl TransportCause {
    fn set(&self, cause: String) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(cause);
    }

    /// The recorded cause, if any, leaving none.
    pub fn take(&self) -> Option<String> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// The OTLP/HTTP exporters' client: reqwest's blocking client, recording the cause of each
/// transport failure in a [`TransportCause`] before the exporter replaces it with "network
/// error".
#[derive(Debug)]
pub struct CauseReportingClient {
    client: reqwest::blocking::Client,
    cause: TransportCause,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for CauseReportingClient {
    async fn send_bytes(
        &self,
        request: opentelemetry_http::Request<opentelemetry_http::Bytes>,
    ) -> Result<
        opentelemetry_http::Response<opentelemetry_http::Bytes>,
        opentelemetry_http::HttpError,
    > {
        let result = self.client.send_bytes(request).await;
        if let Err(e) = &result {
            self.cause.set(crate::logging::with_sources(e.as_ref()));
        }
        result
    }
}

#[derive(Debug, Default, Clone)]
struct ExportState {
    last_success: Option<(Instant, SystemTime)>,
    last_failure: Option<Instant>,
    last_attempt: Option<Instant>,
    consecutive_failures: u64,
    total_failures: u64,
    total_exports: u64,
    last_logged_failure: Option<Instant>,
    /// Failures since the last failure line.
    unlogged_failures: u64,
    /// The current run of failures was logged (so its end is too).
    run_logged: bool,
}

/// Failure lines are at most one per this period, whatever the collector does (down for
/// hours, or flapping every few seconds): the first failure is logged, then the next one
/// due after this period, with the count of those in between. The end of a logged run of
/// failures is logged once ("works again").
pub const FAILURE_LOG_PERIOD: Duration = Duration::from_secs(60);

impl ExportStatus {
    /// A fresh status for `signal` (`metrics`, `events`), as log lines name it, where a
    /// failed export's line says `on_failure` (what happens to the data).
    pub fn new(signal: &'static str, on_failure: &'static str) -> Self {
        Self {
            state: Mutex::new(ExportState::default()),
            signal,
            on_failure,
            cause: TransportCause::default(),
        }
    }

    /// Where an HTTP exporter's client records transport causes for this status's lines.
    pub fn transport_cause(&self) -> TransportCause {
        self.cause.clone()
    }

    /// Instant and wall-clock time of the last successful export.
    pub fn last_success(&self) -> Option<(Instant, SystemTime)> {
        self.lock().last_success
    }

    /// Failed exports in a row (0 after a success).
    pub fn consecutive_failures(&self) -> u64 {
        self.lock().consecutive_failures
    }

    /// Failed exports since start.
    pub fn total_failures(&self) -> u64 {
        self.lock().total_failures
    }

    /// Exports tried since start.
    pub fn total_exports(&self) -> u64 {
        self.lock().total_exports
    }

    /// When the last export finished (successfully or not): the export loop is turning.
    pub fn last_attempt(&self) -> Option<Instant> {
        self.lock().last_attempt
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ExportState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one export's outcome and logs at a bounded rate (see [`FAILURE_LOG_PERIOD`]).
    pub fn record<E: std::fmt::Display>(&self, result: &Result<(), E>, target: &str) {
        // Taken whatever the outcome: a cause left by an attempt the exporter retried with
        // success must not be shown with a later, different failure.
        let cause = self.cause.take();
        let mut s = self.lock();
        s.total_exports += 1;
        let now = Instant::now();
        s.last_attempt = Some(now);
        match result {
            Ok(()) => {
                if s.consecutive_failures > 0 && s.run_logged {
                    tracing::info!(
                        target_endpoint = target,
                        failed_exports = s.consecutive_failures,
                        "{} export works again",
                        self.signal
                    );
                }
                s.run_logged = false;
                s.consecutive_failures = 0;
                s.last_success = Some((now, SystemTime::now()));
            }
            Err(e) => {
                s.consecutive_failures += 1;
                s.total_failures += 1;
                s.last_failure = Some(now);
                let due = s
                    .last_logged_failure
                    .is_none_or(|t| now.duration_since(t) >= FAILURE_LOG_PERIOD);
                if due {
                    let not_logged = std::mem::take(&mut s.unlogged_failures);
                    s.last_logged_failure = Some(now);
                    s.run_logged = true;
                    let cause = cause.map(|c| format!(" ({c})")).unwrap_or_default();
                    tracing::warn!(
                        target_endpoint = target,
                        failed_in_a_row = s.consecutive_failures,
                        failed_since_last_report = not_logged,
                        "{} export failed: {e}{cause}; {}; next report of this in {}s at most",
                        self.signal,
                        self.on_failure,
                        FAILURE_LOG_PERIOD.as_secs()
                    );
                } else {
                    s.unlogged_failures += 1;
                }
            }
        }
    }
}

/// Points the events' OTLP/gRPC exporter builder at its endpoint with the validated
/// settings: timeout, headers as metadata, TLS (for `https`), gzip.
pub(crate) fn configure_tonic<B: WithExportConfig + WithTonicConfig>(
    builder: B,
    c: &OtlpExporter,
) -> B {
    let endpoint = c.endpoint.as_str();
    let mut metadata = tonic::metadata::MetadataMap::new();
    // Keys and values were validated in `config`.
    for (k, v) in &c.headers {
        if let (Ok(key), Ok(value)) = (
            tonic::metadata::MetadataKey::from_bytes(k.as_bytes()),
            v.expose().parse(),
        ) {
            metadata.insert(key, value);
        }
    }
    let mut b = builder
        .with_endpoint(endpoint)
        .with_timeout(c.timeout)
        .with_metadata(metadata);
    if let Some(tls) = super::tls::grpc(c, endpoint) {
        b = b.with_tls_config(tls);
    }
    if c.gzip {
        b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
    }
    b
}

/// Points the events' OTLP/HTTP protobuf exporter builder at its endpoint (a full URL) with
/// the validated settings: our rustls HTTP client (recording transport failures' causes in
/// `cause`), timeout, headers, gzip.
///
/// # Errors
/// The HTTP client cannot be built (TLS files).
pub(crate) fn configure_http<B: WithExportConfig + WithHttpConfig>(
    builder: B,
    c: &OtlpExporter,
    cause: TransportCause,
) -> Result<B, opentelemetry_otlp::ExporterBuildError> {
    let endpoint = c.endpoint.as_str();
    let headers: HashMap<String, String> = c
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().to_string()))
        .collect();
    let mut b = builder
        .with_http_client(CauseReportingClient {
            client: super::tls::http_client(c, endpoint)?,
            cause,
        })
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_timeout(c.timeout)
        .with_headers(headers);
    if c.gzip {
        b = b.with_compression(opentelemetry_otlp::Compression::Gzip);
    }
    Ok(b)
}
