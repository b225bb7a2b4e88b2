//! Sends an `ExportMetricsServiceRequest`: over OTLP/gRPC with the tonic client that
//! `opentelemetry-proto` generates (tonic does TLS, gzip, metadata), over OTLP/HTTP with
//! protobuf bodies through reqwest, or as one line of OTLP/JSON on stdout (console).
//!
//! Retries follow the OTLP exporter specification, with `backon`'s exponential backoff
//! (200 ms doubling to 5 s, with jitter): over gRPC `CANCELLED`, `DEADLINE_EXCEEDED`,
//! `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE`, `DATA_LOSS`, and `RESOURCE_EXHAUSTED` when the
//! status carries a `RetryInfo`, whose delay is honoured; over HTTP 429, 502, 503 and 504,
//! honouring `Retry-After` (seconds or an HTTP date); a connection that cannot be made or
//! times out, on both. The whole export, attempts and waits, is bounded by the export
//! timeout: a retry that would end past it is not made. A failed export's data is dropped;
//! nothing queues up.

use std::io::Write as _;
use std::time::{Duration, Instant, SystemTime};

use backon::{ExponentialBuilder, Retryable};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use prost::Message as _;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;

use crate::config::{OtlpExporter, Protocol};

/// Why an export (or one attempt of it) failed. Never holds a header value.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ExportError {
    message: String,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl ExportError {
    fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retryable: false,
            retry_after: None,
        }
    }

    fn transient(message: impl Into<String>, retry_after: Option<Duration>) -> Self {
        Self {
            message: message.into(),
            retryable: true,
            retry_after,
        }
    }

    /// Whether the specification says to retry it.
    pub fn retryable(&self) -> bool {
        self.retryable
    }

    /// The delay the collector asked for (gRPC `RetryInfo`, HTTP `Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

/// Where metrics go.
#[derive(Debug, Clone)]
pub enum Transport {
    /// OTLP/gRPC (`opentelemetry.proto.collector.metrics.v1.MetricsService/Export`).
    Grpc {
        /// The generated client on a lazily connected channel (reconnects by itself).
        client: MetricsServiceClient<Channel>,
        /// `OTEL_EXPORTER_OTLP_[METRICS_]HEADERS` as metadata.
        metadata: tonic::metadata::MetadataMap,
    },
    /// OTLP/HTTP with a protobuf body, `POST` to the full URL.
    Http {
        /// The async client (TLS settings in it).
        client: reqwest::Client,
        /// The metrics URL.
        url: String,
        /// Content type, encoding and the configured headers.
        headers: reqwest::header::HeaderMap,
        /// gzip the body.
        gzip: bool,
    },
    /// One line of OTLP/JSON (the protobuf JSON mapping) per export on stdout.
    Console,
}

/// The backoff between attempts.
fn backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
}

impl Transport {
    /// The OTLP transport for `c`. Must run with a tokio runtime entered (the gRPC channel
    /// spawns its connection task there).
    ///
    /// # Errors
    /// A message naming the problem: an endpoint tonic refuses, TLS settings it cannot use,
    /// an HTTP client reqwest cannot build.
    pub fn otlp(c: &OtlpExporter) -> Result<Self, String> {
        match c.protocol {
            Protocol::Grpc => {
                let mut endpoint = tonic::transport::Endpoint::from_shared(c.endpoint.clone())
                    .map_err(|e| format!("OTLP endpoint {}: {e}", c.endpoint))?;
                if let Some(tls) = super::tls::grpc(c, &c.endpoint) {
                    endpoint = endpoint
                        .tls_config(tls)
                        .map_err(|e| format!("TLS settings for {}: {e}", c.endpoint))?;
                }
                let mut client = MetricsServiceClient::new(endpoint.connect_lazy());
                if c.gzip {
                    client = client
                        .send_compressed(CompressionEncoding::Gzip)
                        .accept_compressed(CompressionEncoding::Gzip);
                }
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
                Ok(Self::Grpc { client, metadata })
            }
            Protocol::HttpProtobuf => {
                use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
                let mut headers = HeaderMap::new();
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/x-protobuf"),
                );
                for (k, v) in &c.headers {
                    if let (Ok(name), Ok(mut value)) = (
                        HeaderName::from_bytes(k.as_bytes()),
                        HeaderValue::from_str(v.expose()),
                    ) {
                        value.set_sensitive(true);
                        headers.insert(name, value);
                    }
                }
                if c.gzip {
                    headers.insert(
                        reqwest::header::CONTENT_ENCODING,
                        HeaderValue::from_static("gzip"),
                    );
                }
                let client = super::tls::http_client_async(c, &c.endpoint)?;
                Ok(Self::Http {
                    client,
                    url: c.endpoint.clone(),
                    headers,
                    gzip: c.gzip,
                })
            }
        }
    }

    /// Sends `request`, retrying as the specification says, all within `bound`.
    ///
    /// # Errors
    /// The last attempt's error (with the attempts made when more than one), or that the
    /// bound was reached.
    pub async fn send(
        &self,
        request: &ExportMetricsServiceRequest,
        bound: Duration,
    ) -> Result<(), ExportError> {
        if let Self::Console = self {
            return console(request);
        }
        let deadline = Instant::now() + bound;
        let body = match self {
            Self::Http { gzip, .. } => Some(http_body(request, *gzip)?),
            _ => None,
        };
        let attempts = std::sync::atomic::AtomicU32::new(0);
        let attempt = || {
            attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let left = deadline.saturating_duration_since(Instant::now());
            let body = body.clone();
            async move {
                if left.is_zero() {
                    return Err(ExportError::permanent("export timeout reached"));
                }
                self.attempt(request, body, left).await
            }
        };
        let outcome = attempt
            .retry(backoff())
            .when(|e: &ExportError| e.retryable())
            .adjust(|e: &ExportError, delay| {
                // The collector's delay wins; no retry that would end past the bound.
                let delay = e.retry_after().or(delay)?;
                (Instant::now() + delay < deadline).then_some(delay)
            })
            .notify(|e: &ExportError, delay| {
                tracing::debug!(
                    "metrics export attempt failed: {e}; retrying in {}",
                    humantime::format_duration(delay)
                );
            });
        let result = tokio::time::timeout(bound, outcome).await;
        let attempts = attempts.load(std::sync::atomic::Ordering::Relaxed);
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) if attempts > 1 => Err(ExportError::permanent(format!(
                "{e} (after {attempts} attempts)"
            ))),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ExportError::permanent(format!(
                "no answer within the export timeout ({} ms)",
                bound.as_millis()
            ))),
        }
    }

    async fn attempt(
        &self,
        request: &ExportMetricsServiceRequest,
        body: Option<Vec<u8>>,
        left: Duration,
    ) -> Result<(), ExportError> {
        match self {
            Self::Grpc { client, metadata } => {
                let mut req = tonic::Request::new(request.clone());
                *req.metadata_mut() = metadata.clone();
                req.set_timeout(left);
                match client.clone().export(req).await {
                    Ok(resp) => {
                        partial_success(&resp.into_inner());
                        Ok(())
                    }
                    Err(status) => Err(grpc_error(&status)),
                }
            }
            Self::Http {
                client,
                url,
                headers,
                ..
            } => {
                let sent = client
                    .post(url.as_str())
                    .headers(headers.clone())
                    .body(body.unwrap_or_default())
                    .timeout(left)
                    .send()
                    .await;
                let resp = match sent {
                    Ok(r) => r,
                    // Connection refused, reset, timed out: worth another attempt.
                    Err(e) => {
                        return Err(ExportError::transient(
                            format!(
                                "HTTP request to {url} failed: {}",
                                crate::logging::with_sources(&e)
                            ),
                            None,
                        ))
                    }
                };
                let status = resp.status();
                if status.is_success() {
                    if let Ok(bytes) = resp.bytes().await {
                        if let Ok(r) = ExportMetricsServiceResponse::decode(bytes) {
                            partial_success(&r);
                        }
                    }
                    return Ok(());
                }
                let retry_after = resp
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_retry_after);
                let message = format!("the collector answered HTTP {status} at {url}");
                match status.as_u16() {
                    429 | 502 | 503 | 504 => Err(ExportError::transient(message, retry_after)),
                    _ => Err(ExportError::permanent(message)),
                }
            }
            Self::Console => console(request),
        }
    }
}

/// The protobuf body, gzipped when asked.
fn http_body(request: &ExportMetricsServiceRequest, gzip: bool) -> Result<Vec<u8>, ExportError> {
    let bytes = request.encode_to_vec();
    if !gzip {
        return Ok(bytes);
    }
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(&bytes)
        .and_then(|()| enc.finish())
        .map_err(|e| ExportError::permanent(format!("gzip: {e}")))
}

/// Writes `request` as one line of OTLP/JSON on stdout.
///
/// # Errors
/// Encoding or writing failed.
pub fn console(request: &ExportMetricsServiceRequest) -> Result<(), ExportError> {
    let line = serde_json::to_string(request)
        .map_err(|e| ExportError::permanent(format!("JSON encoding: {e}")))?;
    console_line(&line).map_err(|e| ExportError::permanent(format!("stdout: {e}")))
}

/// Writes one line on stdout, for the console exporters (metrics and events). Once stdout's
/// reader has gone (`… | jq` or `… | head` ended: Ctrl-C ends the whole pipeline), the
/// lines have nowhere to go: that is said once, at info level, and not as an export failure
/// (`Broken pipe` on each later export, the final one included, read like a fault).
///
/// # Errors
/// Any other write error.
pub(crate) fn console_line(line: &str) -> std::io::Result<()> {
    static READER_GONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{line}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            if !READER_GONE.swap(true, std::sync::atomic::Ordering::Relaxed) {
                tracing::info!(
                    "stdout was closed by its reader (the end of a pipe such as `| jq`): console output stops here"
                );
            }
            Ok(())
        }
        other => other,
    }
}

/// A gRPC status as an export error, retryable as the specification says.
fn grpc_error(status: &tonic::Status) -> ExportError {
    use tonic::Code;
    use tonic_types::StatusExt as _;
    let retry_after = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay);
    let message = format!(
        "the collector answered gRPC status {} ({}): {}",
        i32::from(status.code()),
        status.code(),
        status.message()
    );
    match status.code() {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => ExportError::transient(message, retry_after),
        // Only when the collector says when to come back.
        Code::ResourceExhausted if retry_after.is_some() => {
            ExportError::transient(message, retry_after)
        }
        _ => ExportError::permanent(message),
    }
}

/// Logs the points a collector refused while accepting the rest (not retried).
fn partial_success(r: &ExportMetricsServiceResponse) {
    if let Some(p) = &r.partial_success {
        if p.rejected_data_points > 0 || !p.error_message.is_empty() {
            tracing::warn!(
                rejected_data_points = p.rejected_data_points,
                "the collector accepted the export partly: {}",
                p.error_message
            );
        }
    }
}

/// `Retry-After`: delay seconds, or an HTTP date.
fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_rules_follow_the_otlp_specification() {
        use tonic::Code;
        for code in [
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unavailable,
            Code::DataLoss,
        ] {
            assert!(
                grpc_error(&tonic::Status::new(code, "x")).retryable(),
                "{code:?}"
            );
        }
        for code in [
            Code::InvalidArgument,
            Code::Unauthenticated,
            Code::PermissionDenied,
            Code::ResourceExhausted,
            Code::Internal,
        ] {
            assert!(
                !grpc_error(&tonic::Status::new(code, "x")).retryable(),
                "{code:?}"
            );
        }
        use tonic_types::{ErrorDetails, StatusExt};
        let status = tonic::Status::with_error_details(
            Code::ResourceExhausted,
            "slow down",
            ErrorDetails::with_retry_info(Some(Duration::from_millis(300))),
        );
        let e = grpc_error(&status);
        assert!(e.retryable());
        assert_eq!(e.retry_after(), Some(Duration::from_millis(300)));
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        let later = SystemTime::now() + Duration::from_secs(120);
        let d = parse_retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
