//! Sends an OTLP export request ([`OtlpRequest`]: the metrics' `ExportMetricsServiceRequest`
//! and the events' `ExportLogsServiceRequest`, the same transport for both): over OTLP/gRPC
//! with tonic's client and the messages `opentelemetry-proto` generates (tonic does TLS,
//! gzip, metadata), over OTLP/HTTP with protobuf bodies through reqwest, or as one line of
//! OTLP/JSON on stdout (console).
//!
//! Retries follow the OTLP exporter specification, with `backon`'s exponential backoff
//! (200 ms doubling to 5 s, with jitter): over gRPC `CANCELLED`, `DEADLINE_EXCEEDED`,
//! `ABORTED`, `OUT_OF_RANGE`, `UNAVAILABLE`, `DATA_LOSS`, and `RESOURCE_EXHAUSTED` when the
//! status carries a `RetryInfo`, whose delay is honoured; over HTTP 429, 502, 503 and 504,
//! honouring `Retry-After` (seconds or an HTTP date); a connection that cannot be made or
//! times out, on both. The whole export, attempts and waits, is bounded by the export
//! timeout: a retry that would end past it is not made. What a failed export's data
//! becomes is the caller's: the metrics drop it (cumulative counters stay continuous), the
//! events keep it in their queue and send it again ([`crate::telemetry::logs::outbox`]).

pub mod tls;

use std::io::Write as _;
use std::time::{Duration, Instant, SystemTime};

use backon::{ExponentialBuilder, Retryable};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
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

/// An OTLP export request: what the transport needs to know of a signal.
pub trait OtlpRequest:
    prost::Message + serde::Serialize + Clone + Default + Send + Sync + 'static
{
    /// The collector's answer.
    type Response: prost::Message + Default + Send + 'static;
    /// The gRPC method, e.g. `/opentelemetry.proto.collector.metrics.v1.MetricsService/Export`.
    const PATH: &'static str;
    /// What a partial success refused: the count and what it counts, and the message.
    fn refused(response: &Self::Response) -> Option<(i64, &'static str, String)>;
}

impl OtlpRequest for ExportMetricsServiceRequest {
    type Response = ExportMetricsServiceResponse;
    const PATH: &'static str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
    fn refused(r: &Self::Response) -> Option<(i64, &'static str, String)> {
        let p = r.partial_success.as_ref()?;
        (p.rejected_data_points > 0 || !p.error_message.is_empty()).then(|| {
            (
                p.rejected_data_points,
                "data points",
                p.error_message.clone(),
            )
        })
    }
}

impl OtlpRequest for ExportLogsServiceRequest {
    type Response = ExportLogsServiceResponse;
    const PATH: &'static str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
    fn refused(r: &Self::Response) -> Option<(i64, &'static str, String)> {
        let p = r.partial_success.as_ref()?;
        (p.rejected_log_records > 0 || !p.error_message.is_empty())
            .then(|| (p.rejected_log_records, "events", p.error_message.clone()))
    }
}

/// Where one signal goes.
#[derive(Debug, Clone)]
pub enum Transport {
    /// OTLP/gRPC (the signal's `Export` method, [`OtlpRequest::PATH`]).
    Grpc {
        /// A lazily connected channel (reconnects by itself).
        channel: Channel,
        /// gzip requests (and accept gzip answers).
        gzip: bool,
        /// `OTEL_EXPORTER_OTLP_[SIGNAL_]HEADERS` as metadata.
        metadata: tonic::metadata::MetadataMap,
    },
    /// OTLP/HTTP with a protobuf body, `POST` to the full URL.
    Http {
        /// The async client (TLS settings in it).
        client: reqwest::Client,
        /// The signal's URL (`…/v1/metrics`, `…/v1/logs`).
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
                if let Some(tls) = crate::telemetry::otlp::tls::grpc(c, &c.endpoint) {
                    endpoint = endpoint
                        .tls_config(tls)
                        .map_err(|e| format!("TLS settings for {}: {e}", c.endpoint))?;
                }
                let channel = endpoint.connect_lazy();
                Ok(Self::Grpc {
                    channel,
                    gzip: c.gzip,
                    metadata: tonic::metadata::MetadataMap::from_headers(configured_headers(c)),
                })
            }
            Protocol::HttpProtobuf => {
                use reqwest::header::{HeaderValue, CONTENT_TYPE};
                let mut headers = configured_headers(c);
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/x-protobuf"),
                );
                if c.gzip {
                    headers.insert(
                        reqwest::header::CONTENT_ENCODING,
                        HeaderValue::from_static("gzip"),
                    );
                }
                let client = crate::telemetry::otlp::tls::http_client_async(c, &c.endpoint)?;
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
    pub async fn send<R: OtlpRequest>(
        &self,
        request: &R,
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
                    "export attempt failed: {e}; retrying in {}",
                    humantime::format_duration(delay)
                );
            });
        let result = tokio::time::timeout(bound, outcome).await;
        let attempts = attempts.load(std::sync::atomic::Ordering::Relaxed);
        // The last attempt's error keeps whether it is worth trying again later (a caller
        // that holds the data, as the events do, sends it again then).
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) if attempts > 1 => Err(ExportError {
                message: format!("{e} (after {attempts} attempts)"),
                ..e
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ExportError::transient(
                format!(
                    "no answer within the export timeout ({} ms)",
                    bound.as_millis()
                ),
                None,
            )),
        }
    }

    async fn attempt<R: OtlpRequest>(
        &self,
        request: &R,
        body: Option<Vec<u8>>,
        left: Duration,
    ) -> Result<(), ExportError> {
        match self {
            Self::Grpc {
                channel,
                gzip,
                metadata,
            } => {
                let mut grpc = tonic::client::Grpc::new(channel.clone());
                if *gzip {
                    grpc = grpc
                        .send_compressed(CompressionEncoding::Gzip)
                        .accept_compressed(CompressionEncoding::Gzip);
                }
                grpc.ready().await.map_err(|e| {
                    ExportError::transient(
                        format!(
                            "the collector cannot be reached: {}",
                            crate::logging::with_sources(&e)
                        ),
                        None,
                    )
                })?;
                let mut req = tonic::Request::new(request.clone());
                *req.metadata_mut() = metadata.clone();
                req.set_timeout(left);
                let codec = tonic_prost::ProstCodec::<R, R::Response>::default();
                let path = tonic::codegen::http::uri::PathAndQuery::from_static(R::PATH);
                match grpc.unary(req, path, codec).await {
                    Ok(resp) => {
                        partial_success::<R>(&resp.into_inner());
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
                        if let Ok(r) = R::Response::decode(bytes) {
                            partial_success::<R>(&r);
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

/// `OTEL_EXPORTER_OTLP_[SIGNAL_]HEADERS`, once for both protocols: the HTTP request headers,
/// or (gRPC) the request metadata built from them. Each value is marked sensitive (never in
/// debug output); keys and values were validated in `config`.
fn configured_headers(c: &OtlpExporter) -> tonic::codegen::http::HeaderMap {
    use tonic::codegen::http::{HeaderMap, HeaderName, HeaderValue};
    let mut headers = HeaderMap::new();
    for (k, v) in &c.headers {
        if let (Ok(name), Ok(mut value)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v.expose()),
        ) {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
    }
    headers
}

/// The protobuf body, gzipped when asked.
fn http_body<R: OtlpRequest>(request: &R, gzip: bool) -> Result<Vec<u8>, ExportError> {
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
pub fn console<R: OtlpRequest>(request: &R) -> Result<(), ExportError> {
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

/// Logs what a collector refused while accepting the rest (not retried).
fn partial_success<R: OtlpRequest>(r: &R::Response) {
    if let Some((rejected, what, message)) = R::refused(r) {
        tracing::warn!(
            rejected,
            "the collector accepted the export partly, refusing {rejected} {what}: {message}"
        );
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
