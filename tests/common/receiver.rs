//! An in-process OTLP receiver for tests, built on the official protobuf definitions
//! (`opentelemetry-proto`'s generated messages and tonic services).
//!
//! [`Receiver::grpc`] serves OTLP/gRPC (`MetricsService`, `LogsService`, gzip accepted);
//! [`Receiver::http`] serves OTLP/HTTP protobuf (`POST /v1/metrics`, `POST /v1/logs`,
//! `Content-Encoding: gzip` accepted). Either binds `127.0.0.1:0` and serves on a small tokio
//! runtime of its own, so it works from plain `#[test]` functions and from tokio tests of any
//! flavour, and a blocking wait in the test never starves it.
//!
//! Every request is kept with its arrival time, its headers (gRPC metadata or HTTP headers)
//! and whether its body was gzip-compressed. Faults are injected with [`Receiver::set_mode`],
//! [`Receiver::fail_next`], [`Receiver::stop`] and [`Receiver::restart`].
//!
//! [`Receiver::start_tls`] serves either protocol over TLS (rustls), optionally requiring a
//! client certificate signed by a given CA (mutual TLS).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::Read;
use std::net::{SocketAddr, TcpListener as StdTcpListener};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State as AxumState};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::logs::v1::logs_service_server::{
    LogsService, LogsServiceServer,
};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, NumberDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tonic::codec::CompressionEncoding;
use tonic_types::{ErrorDetails, StatusExt};

/// Largest request accepted, compressed or not (the defaults of tonic and axum are 4 MB and
/// 2 MB; a big host can send more than that).
const MAX_REQUEST_BYTES: usize = 64 << 20;

/// TLS settings of a receiver started with [`Receiver::start_tls`] (PEM text).
#[derive(Debug, Clone)]
pub struct ServerTls {
    /// The server's certificate chain.
    pub cert_pem: String,
    /// The server's private key.
    pub key_pem: String,
    /// When set, a client certificate signed by this CA is required (mutual TLS).
    pub client_ca_pem: Option<String>,
}

/// Which OTLP transport a [`Receiver`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP with protobuf bodies.
    Http,
}

impl Protocol {
    /// The value of `OTEL_EXPORTER_OTLP_PROTOCOL` that selects this transport.
    pub fn otel_name(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::Http => "http/protobuf",
        }
    }
}

/// Which OTLP signal a request carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `ExportMetricsServiceRequest`.
    Metrics,
    /// `ExportLogsServiceRequest`.
    Logs,
}

/// How the receiver answers the next requests. Change it at any time with
/// [`Receiver::set_mode`]; a request takes the mode in force when it arrives.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Mode {
    /// Store the request and answer success (gRPC OK, HTTP 200 with an empty protobuf body).
    #[default]
    Accept,
    /// Refuse: gRPC `UNAVAILABLE`, HTTP 503. With `retry_after`, gRPC carries a
    /// `google.rpc.RetryInfo` detail and HTTP a `Retry-After` header (whole seconds, rounded
    /// up). Both are retryable for an OTLP exporter.
    Unavailable {
        /// Server-suggested delay before retrying.
        retry_after: Option<Duration>,
    },
    /// Refuse: gRPC `RESOURCE_EXHAUSTED`, HTTP 429, `retry_after` as for `Unavailable`.
    /// Over gRPC this is retryable only with a `retry_after` (OTLP spec).
    ResourceExhausted {
        /// Server-suggested delay before retrying.
        retry_after: Option<Duration>,
    },
    /// Wait this long, then store the request and answer success. A client that gives up
    /// earlier leaves only an [`Attempt`].
    Delay(Duration),
    /// Refuse with an arbitrary status: `grpc` over gRPC, `http` over HTTP (e.g.
    /// `INVALID_ARGUMENT` / 400 for a non-retryable rejection).
    Fail {
        /// gRPC status code.
        grpc: tonic::Code,
        /// HTTP status code.
        http: u16,
    },
}

/// One stored (accepted) export request.
#[derive(Debug, Clone)]
pub struct Received<T> {
    /// When the request arrived (before any [`Mode::Delay`]).
    pub at: Instant,
    /// Request headers (gRPC metadata, or HTTP headers), names lower-case, repeated headers
    /// joined with `", "`.
    pub headers: BTreeMap<String, String>,
    /// Whether the body was gzip-compressed (gRPC `grpc-encoding: gzip`, HTTP
    /// `Content-Encoding: gzip`).
    pub gzip: bool,
    /// The decoded request.
    pub request: T,
}

impl<T> Received<T> {
    /// A header's value, looked up case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// One request as it arrived, whatever the answer (rejected and abandoned requests too).
#[derive(Debug, Clone)]
pub struct Attempt {
    /// Metrics or logs.
    pub signal: Signal,
    /// Arrival time.
    pub at: Instant,
    /// Headers, as in [`Received::headers`].
    pub headers: BTreeMap<String, String>,
    /// Whether the body was gzip-compressed.
    pub gzip: bool,
    /// The mode that answered it.
    pub mode: Mode,
}

/// How a metric's points aggregate, from the OTLP `Metric.data` variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `Gauge`.
    Gauge,
    /// `Sum`, with `is_monotonic` and whether the temporality is cumulative (else delta).
    Sum {
        /// `is_monotonic` (a counter, as opposed to an up-down counter).
        monotonic: bool,
        /// `AGGREGATION_TEMPORALITY_CUMULATIVE`.
        cumulative: bool,
    },
    /// Explicit-bucket `Histogram`.
    Histogram,
    /// `ExponentialHistogram`.
    ExponentialHistogram,
    /// `Summary`.
    Summary,
}

/// One data point, flattened with its metric's, scope's and resource's context.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Metric name.
    pub name: String,
    /// The value: `as_double`, or `as_int` converted; for histograms and summaries the sum.
    /// `NaN` when the point has none.
    pub value: f64,
    /// Whether the value came from `as_int`.
    pub is_int: bool,
    /// For histograms and summaries, the count; `None` for number points.
    pub count: Option<u64>,
    /// Metric unit (UCUM), `""` when unset.
    pub unit: String,
    /// Metric description.
    pub description: String,
    /// Aggregation kind.
    pub kind: Kind,
    /// Data point attributes, values stringified (see [`any_value_string`]).
    pub attrs: BTreeMap<String, String>,
    /// Resource attributes, values stringified.
    pub resource: BTreeMap<String, String>,
    /// `time_unix_nano`.
    pub time_unix_nano: u64,
    /// `start_time_unix_nano` (0 for gauges from most SDKs).
    pub start_time_unix_nano: u64,
    /// Instrumentation scope name (the meter name).
    pub scope_name: String,
}

impl Point {
    /// A data point attribute.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.get(key).map(String::as_str)
    }
}

/// One log record, flattened with its scope's and resource's context.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRecordView {
    /// `event_name` (`""` for a plain log record).
    pub event_name: String,
    /// `severity_text`.
    pub severity_text: String,
    /// `severity_number` (e.g. 9 INFO, 13 WARN, 17 ERROR).
    pub severity_number: i32,
    /// The body, stringified (see [`any_value_string`]); `""` when absent.
    pub body: String,
    /// Record attributes, values stringified.
    pub attrs: BTreeMap<String, String>,
    /// Resource attributes, values stringified.
    pub resource: BTreeMap<String, String>,
    /// Instrumentation scope name (the logger name).
    pub scope_name: String,
    /// `time_unix_nano` (0 when unset).
    pub time_unix_nano: u64,
    /// `observed_time_unix_nano`.
    pub observed_time_unix_nano: u64,
}

impl LogRecordView {
    /// A record attribute.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attrs.get(key).map(String::as_str)
    }
}

/// Stringifies an OTLP `AnyValue`: strings as they are, ints, doubles (Rust `Display`, so
/// `1.0` gives `"1"`) and bools as Rust prints them, bytes as lower-case hex, arrays as
/// `[a, b]`, key-value lists as `{k: v, ...}`, an empty value as `""`.
pub fn any_value_string(value: &AnyValue) -> String {
    match &value.value {
        None => String::new(),
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BytesValue(bytes)) => {
            bytes.iter().map(|b| format!("{b:02x}")).collect()
        }
        Some(any_value::Value::ArrayValue(array)) => {
            let items: Vec<String> = array.values.iter().map(any_value_string).collect();
            format!("[{}]", items.join(", "))
        }
        Some(any_value::Value::KvlistValue(list)) => {
            let items: Vec<String> = list
                .values
                .iter()
                .map(|kv| format!("{}: {}", kv.key, kv_value_string(kv)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        // Profiles-only string-table reference; not used by metrics or logs.
        Some(any_value::Value::StringValueStrindex(index)) => format!("strindex:{index}"),
    }
}

fn kv_value_string(kv: &KeyValue) -> String {
    kv.value.as_ref().map(any_value_string).unwrap_or_default()
}

/// Attributes as a sorted map with stringified values.
pub fn attr_map(attrs: &[KeyValue]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .map(|kv| (kv.key.clone(), kv_value_string(kv)))
        .collect()
}

fn resource_map(resource: &Option<Resource>) -> BTreeMap<String, String> {
    resource
        .as_ref()
        .map(|r| attr_map(&r.attributes))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Shared storage and request handling

#[derive(Default)]
struct Store {
    mode: Mode,
    /// One-shot modes for the next requests ([`Receiver::fail_next`]), taken before `mode`.
    queued: VecDeque<Mode>,
    metrics: Vec<Received<ExportMetricsServiceRequest>>,
    logs: Vec<Received<ExportLogsServiceRequest>>,
    attempts: Vec<Attempt>,
    decode_errors: Vec<String>,
}

#[derive(Default)]
struct Shared {
    store: Mutex<Store>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panicking test thread must not hide what the receiver got.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }
}

enum Payload {
    Metrics(ExportMetricsServiceRequest),
    Logs(ExportLogsServiceRequest),
}

impl Payload {
    fn signal(&self) -> Signal {
        match self {
            Payload::Metrics(_) => Signal::Metrics,
            Payload::Logs(_) => Signal::Logs,
        }
    }
}

/// Records the attempt, applies the mode, and stores the payload when accepted. `Err` carries
/// the refusing mode.
async fn handle(
    shared: &Shared,
    headers: BTreeMap<String, String>,
    gzip: bool,
    payload: Payload,
) -> Result<(), Mode> {
    let at = Instant::now();
    let mode = {
        let mut store = shared.lock();
        let mode = store
            .queued
            .pop_front()
            .unwrap_or_else(|| store.mode.clone());
        store.attempts.push(Attempt {
            signal: payload.signal(),
            at,
            headers: headers.clone(),
            gzip,
            mode: mode.clone(),
        });
        mode
    };
    match mode {
        Mode::Accept => {}
        Mode::Delay(delay) => tokio::time::sleep(delay).await,
        refusal => return Err(refusal),
    }
    let mut store = shared.lock();
    match payload {
        Payload::Metrics(request) => store.metrics.push(Received {
            at,
            headers,
            gzip,
            request,
        }),
        Payload::Logs(request) => store.logs.push(Received {
            at,
            headers,
            gzip,
            request,
        }),
    }
    Ok(())
}

fn header_map(headers: &HeaderMap) -> BTreeMap<String, String> {
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        map.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    map
}

// ---------------------------------------------------------------------------------------------
// gRPC

struct GrpcService(Arc<Shared>);

impl GrpcService {
    async fn receive<T>(
        &self,
        request: tonic::Request<T>,
        wrap: fn(T) -> Payload,
    ) -> Result<(), tonic::Status> {
        let headers = header_map(&request.metadata().clone().into_headers());
        let gzip = headers
            .get("grpc-encoding")
            .is_some_and(|e| e.eq_ignore_ascii_case("gzip"));
        handle(&self.0, headers, gzip, wrap(request.into_inner()))
            .await
            .map_err(grpc_status)
    }
}

#[tonic::async_trait]
impl MetricsService for GrpcService {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        self.receive(request, Payload::Metrics).await?;
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl LogsService for GrpcService {
    async fn export(
        &self,
        request: tonic::Request<ExportLogsServiceRequest>,
    ) -> Result<tonic::Response<ExportLogsServiceResponse>, tonic::Status> {
        self.receive(request, Payload::Logs).await?;
        Ok(tonic::Response::new(ExportLogsServiceResponse::default()))
    }
}

fn grpc_status(mode: Mode) -> tonic::Status {
    let with_retry = |code, message: &str, retry_after: Option<Duration>| match retry_after {
        Some(delay) => tonic::Status::with_error_details(
            code,
            message,
            ErrorDetails::with_retry_info(Some(delay)),
        ),
        None => tonic::Status::new(code, message),
    };
    match mode {
        Mode::Unavailable { retry_after } => with_retry(
            tonic::Code::Unavailable,
            "test receiver: unavailable",
            retry_after,
        ),
        Mode::ResourceExhausted { retry_after } => with_retry(
            tonic::Code::ResourceExhausted,
            "test receiver: resource exhausted",
            retry_after,
        ),
        Mode::Fail { grpc, .. } => tonic::Status::new(grpc, "test receiver: injected failure"),
        Mode::Accept | Mode::Delay(_) => unreachable!("not a refusal"),
    }
}

async fn serve_grpc(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    tls: Option<ServerTls>,
) {
    let metrics = MetricsServiceServer::from_arc(Arc::new(GrpcService(shared.clone())))
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(MAX_REQUEST_BYTES);
    let logs = LogsServiceServer::from_arc(Arc::new(GrpcService(shared)))
        .accept_compressed(CompressionEncoding::Gzip)
        .max_decoding_message_size(MAX_REQUEST_BYTES);
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        let mut config = tonic::transport::ServerTlsConfig::new().identity(
            tonic::transport::Identity::from_pem(&tls.cert_pem, &tls.key_pem),
        );
        if let Some(ca) = &tls.client_ca_pem {
            config = config.client_ca_root(tonic::transport::Certificate::from_pem(ca));
        }
        builder = builder.tls_config(config).expect("gRPC server TLS config");
    }
    if let Err(e) = builder
        .add_service(metrics)
        .add_service(logs)
        .serve_with_incoming(incoming)
        .await
    {
        eprintln!("[otlp receiver] gRPC server failed: {e}");
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

async fn http_export(
    shared: Arc<Shared>,
    signal: Signal,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let gzip = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|e| e.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let decoded = decode_http_body(signal, &headers, gzip, &body);
    let payload = match decoded {
        Ok(payload) => payload,
        Err(message) => {
            eprintln!("[otlp receiver] {message}");
            shared.lock().decode_errors.push(message.clone());
            return (StatusCode::BAD_REQUEST, message).into_response();
        }
    };
    match handle(&shared, header_map(&headers), gzip, payload).await {
        Ok(()) => {
            let body = match signal {
                Signal::Metrics => ExportMetricsServiceResponse::default().encode_to_vec(),
                Signal::Logs => ExportLogsServiceResponse::default().encode_to_vec(),
            };
            protobuf_response(StatusCode::OK, body)
        }
        Err(mode) => http_refusal(mode),
    }
}

fn decode_http_body(
    signal: Signal,
    headers: &HeaderMap,
    gzip: bool,
    body: &[u8],
) -> Result<Payload, String> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !content_type.starts_with("application/x-protobuf") {
        return Err(format!(
            "unsupported Content-Type {content_type:?} (want application/x-protobuf)"
        ));
    }
    let mut raw = Vec::new();
    let bytes: &[u8] = if gzip {
        flate2::read::GzDecoder::new(body)
            .take(MAX_REQUEST_BYTES as u64)
            .read_to_end(&mut raw)
            .map_err(|e| format!("bad gzip body: {e}"))?;
        &raw
    } else {
        body
    };
    match signal {
        Signal::Metrics => ExportMetricsServiceRequest::decode(bytes).map(Payload::Metrics),
        Signal::Logs => ExportLogsServiceRequest::decode(bytes).map(Payload::Logs),
    }
    .map_err(|e| format!("bad protobuf body for {signal:?}: {e}"))
}

fn protobuf_response(status: StatusCode, body: Vec<u8>) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        )],
        body,
    )
        .into_response()
}

fn http_refusal(mode: Mode) -> Response {
    let (status, retry_after) = match mode {
        Mode::Unavailable { retry_after } => (StatusCode::SERVICE_UNAVAILABLE, retry_after),
        Mode::ResourceExhausted { retry_after } => (StatusCode::TOO_MANY_REQUESTS, retry_after),
        Mode::Fail { http, .. } => (
            StatusCode::from_u16(http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            None,
        ),
        Mode::Accept | Mode::Delay(_) => unreachable!("not a refusal"),
    };
    let mut response = protobuf_response(status, Vec::new());
    if let Some(delay) = retry_after {
        let seconds = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

/// A TLS listener for axum: TCP accept, then the rustls handshake (bounded to 5 s; a failed
/// handshake is reported on stderr and the next connection accepted).
struct TlsListener {
    tcp: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl TlsListener {
    fn new(tcp: tokio::net::TcpListener, tls: &ServerTls) -> Self {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let certs: Vec<_> = CertificateDer::pem_slice_iter(tls.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .expect("server certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(tls.key_pem.as_bytes()).expect("server key PEM");
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("TLS versions");
        let builder = match &tls.client_ca_pem {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                    roots.add(cert.expect("client CA PEM")).expect("client CA");
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    roots.into(),
                    provider,
                )
                .build()
                .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(certs, key)
            .expect("server certificate and key");
        Self {
            tcp,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.tcp.accept().await {
                Ok(conn) => conn,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            match tokio::time::timeout(Duration::from_secs(5), self.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => return (tls, addr),
                Ok(Err(e)) => eprintln!("[otlp receiver] TLS handshake failed: {e}"),
                Err(_) => eprintln!("[otlp receiver] TLS handshake timed out"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

async fn serve_http(
    shared: Arc<Shared>,
    listener: tokio::net::TcpListener,
    tls: Option<ServerTls>,
) {
    let route = |signal| {
        post(
            move |AxumState(shared): AxumState<Arc<Shared>>, headers: HeaderMap, body: Bytes| {
                http_export(shared, signal, headers, body)
            },
        )
    };
    let app = axum::Router::new()
        .route("/v1/metrics", route(Signal::Metrics))
        .route("/v1/logs", route(Signal::Logs))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(shared);
    let served = match tls {
        Some(tls) => axum::serve(TlsListener::new(listener, &tls), app).await,
        None => axum::serve(listener, app).await,
    };
    if let Err(e) = served {
        eprintln!("[otlp receiver] HTTP server failed: {e}");
    }
}

// ---------------------------------------------------------------------------------------------
// The receiver

/// An in-process OTLP receiver (see the [module docs](self)).
///
/// Cheap to query from any thread (`&self` everywhere; share it with `Arc` if needed).
/// Dropping it shuts the server down.
pub struct Receiver {
    protocol: Protocol,
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The runtime serving the current incarnation; `None` while stopped.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    /// TLS settings ([`Receiver::start_tls`]); `None` for plain TCP.
    tls: Option<ServerTls>,
}

impl Receiver {
    /// Starts an OTLP/gRPC receiver on `127.0.0.1:<free port>`. (Async for symmetry with the
    /// tests that use it; [`Receiver::start`] is the same thing, blocking.)
    pub async fn grpc() -> Receiver {
        Receiver::start(Protocol::Grpc)
    }

    /// Starts an OTLP/HTTP protobuf receiver on `127.0.0.1:<free port>`.
    pub async fn http() -> Receiver {
        Receiver::start(Protocol::Http)
    }

    /// Starts a receiver for `protocol` on `127.0.0.1:<free port>`; callable from anywhere,
    /// inside or outside a tokio runtime.
    ///
    /// # Panics
    /// If no port can be bound or no runtime built.
    pub fn start(protocol: Protocol) -> Receiver {
        Self::start_with(protocol, None)
    }

    /// As [`Receiver::start`], serving TLS: the endpoint is then
    /// `https://127.0.0.1:PORT` (the server certificate must name `127.0.0.1`).
    pub fn start_tls(protocol: Protocol, tls: ServerTls) -> Receiver {
        Self::start_with(protocol, Some(tls))
    }

    fn start_with(protocol: Protocol, tls: Option<ServerTls>) -> Receiver {
        let shared = Arc::new(Shared::default());
        let listener = StdTcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local_addr");
        let runtime = launch(protocol, shared.clone(), listener, tls.clone());
        Receiver {
            protocol,
            addr,
            shared,
            runtime: Mutex::new(Some(runtime)),
            tls,
        }
    }

    /// The transport this receiver speaks.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    /// The listening address (the same across [`Receiver::restart`]).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base endpoint, `http://127.0.0.1:PORT` (`https://` with TLS): the value for
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (an HTTP exporter appends `/v1/metrics` and `/v1/logs`
    /// itself).
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1/metrics` (for signal-specific HTTP endpoint settings).
    pub fn metrics_url(&self) -> String {
        format!("{}/v1/metrics", self.endpoint())
    }

    /// `http://127.0.0.1:PORT/v1/logs`.
    pub fn logs_url(&self) -> String {
        format!("{}/v1/logs", self.endpoint())
    }

    /// The environment that points a standard OTLP exporter here:
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn otlp_env(&self) -> Vec<(String, String)> {
        vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), self.endpoint()),
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL".into(),
                self.protocol.otel_name().into(),
            ),
        ]
    }

    // --- fault knobs ---

    /// Sets how requests are answered from now on (requests already waiting in a
    /// [`Mode::Delay`] are not affected).
    pub fn set_mode(&self, mode: Mode) {
        self.shared.lock().mode = mode;
    }

    /// The mode in force (ignoring queued [`Receiver::fail_next`] modes).
    pub fn mode(&self) -> Mode {
        self.shared.lock().mode.clone()
    }

    /// Answers the next `n` requests (either signal) with `mode`, then falls back to the mode
    /// set with [`Receiver::set_mode`]. Calls queue up behind each other.
    pub fn fail_next(&self, n: usize, mode: Mode) {
        let mut store = self.shared.lock();
        store.queued.extend(std::iter::repeat_n(mode, n));
    }

    /// Shuts the listener down and drops every open connection, as a crashed collector would:
    /// once this returns, connecting to the port is refused. Stored data is kept. No-op when
    /// already stopped.
    pub fn stop(&self) {
        let runtime = self
            .runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(runtime) = runtime {
            // Shutting down waits for the runtime's threads, which must not happen on an async
            // worker thread: do it on a plain thread.
            std::thread::spawn(move || runtime.shutdown_timeout(Duration::from_secs(5)))
                .join()
                .expect("receiver shutdown thread panicked");
        }
    }

    /// Serves again on the same port (stopping first if running). Stored data and the mode
    /// are kept.
    ///
    /// # Panics
    /// If the port cannot be bound again within 5 s.
    pub fn restart(&self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match StdTcpListener::bind(self.addr) {
                Ok(listener) => break listener,
                // The old listener may take a moment to close.
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("cannot bind {} again: {e}", self.addr),
            }
        };
        let runtime = launch(
            self.protocol,
            self.shared.clone(),
            listener,
            self.tls.clone(),
        );
        *self.runtime.lock().unwrap_or_else(|e| e.into_inner()) = Some(runtime);
    }

    /// Whether the listener is up (not [`Receiver::stop`]ped).
    pub fn is_running(&self) -> bool {
        self.runtime
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// Forgets everything received so far (requests, attempts, decode errors); the mode stays.
    pub fn clear(&self) {
        let mut store = self.shared.lock();
        store.metrics.clear();
        store.logs.clear();
        store.attempts.clear();
        store.decode_errors.clear();
    }

    // --- raw queries ---

    /// Every accepted metrics request, in the order they were stored.
    pub fn metrics_requests(&self) -> Vec<Received<ExportMetricsServiceRequest>> {
        self.shared.lock().metrics.clone()
    }

    /// Every accepted logs request, in the order they were stored.
    pub fn log_requests(&self) -> Vec<Received<ExportLogsServiceRequest>> {
        self.shared.lock().logs.clone()
    }

    /// Every request that arrived, whatever the answer, in arrival order.
    pub fn attempts(&self) -> Vec<Attempt> {
        self.shared.lock().attempts.clone()
    }

    /// HTTP requests that could not be decoded (bad gzip, bad protobuf, wrong content type);
    /// each was answered 400 and is not in [`Receiver::attempts`]. (A gRPC decode failure is
    /// answered by tonic before reaching the receiver and is not seen here.)
    pub fn decode_errors(&self) -> Vec<String> {
        self.shared.lock().decode_errors.clone()
    }

    // --- flattened views ---

    /// Names of every metric received so far.
    pub fn metric_names(&self) -> BTreeSet<String> {
        let store = self.shared.lock();
        store
            .metrics
            .iter()
            .flat_map(|r| &r.request.resource_metrics)
            .flat_map(|rm| &rm.scope_metrics)
            .flat_map(|sm| &sm.metrics)
            .map(|m| m.name.clone())
            .collect()
    }

    /// Whether any accepted request contained metric `name`.
    pub fn has_metric(&self, name: &str) -> bool {
        let store = self.shared.lock();
        store
            .metrics
            .iter()
            .any(|r| request_has_metric(&r.request, name))
    }

    /// Every data point of metric `name` across all accepted requests, in arrival order.
    pub fn points(&self, name: &str) -> Vec<Point> {
        let store = self.shared.lock();
        let mut points = Vec::new();
        for received in &store.metrics {
            collect_points(&received.request, name, &mut points);
        }
        points
    }

    /// The data points of metric `name` in the latest stored request that contained it
    /// (one export cycle's worth); empty if none did.
    pub fn last_points(&self, name: &str) -> Vec<Point> {
        let store = self.shared.lock();
        let mut points = Vec::new();
        if let Some(received) = store
            .metrics
            .iter()
            .rev()
            .find(|r| request_has_metric(&r.request, name))
        {
            collect_points(&received.request, name, &mut points);
        }
        points
    }

    /// Every log record across all accepted logs requests, in arrival order.
    pub fn log_records(&self) -> Vec<LogRecordView> {
        let store = self.shared.lock();
        let mut records = Vec::new();
        for received in &store.logs {
            for rl in &received.request.resource_logs {
                let resource = resource_map(&rl.resource);
                for sl in &rl.scope_logs {
                    let scope_name = sl
                        .scope
                        .as_ref()
                        .map(|s| s.name.clone())
                        .unwrap_or_default();
                    for record in &sl.log_records {
                        records.push(LogRecordView {
                            event_name: record.event_name.clone(),
                            severity_text: record.severity_text.clone(),
                            severity_number: record.severity_number,
                            body: record
                                .body
                                .as_ref()
                                .map(any_value_string)
                                .unwrap_or_default(),
                            attrs: attr_map(&record.attributes),
                            resource: resource.clone(),
                            scope_name: scope_name.clone(),
                            time_unix_nano: record.time_unix_nano,
                            observed_time_unix_nano: record.observed_time_unix_nano,
                        });
                    }
                }
            }
        }
        records
    }

    /// Log records whose `event_name` is `event_name`.
    pub fn log_events(&self, event_name: &str) -> Vec<LogRecordView> {
        let mut records = self.log_records();
        records.retain(|r| r.event_name == event_name);
        records
    }

    // --- waiting ---

    /// Blocks until metric `name` has arrived or `timeout` passes; returns whether it arrived.
    pub fn wait_for_metric(&self, name: &str, timeout: Duration) -> bool {
        super::wait_until(timeout, || self.has_metric(name))
    }

    /// [`Receiver::wait_for_metric`] without blocking the calling async task.
    pub async fn wait_for_metric_async(&self, name: &str, timeout: Duration) -> bool {
        self.wait_until_async(timeout, |rx| rx.has_metric(name))
            .await
    }

    /// Blocks until a log record with this `event_name` has arrived or `timeout` passes.
    pub fn wait_for_log_event(&self, event_name: &str, timeout: Duration) -> bool {
        super::wait_until(timeout, || !self.log_events(event_name).is_empty())
    }

    /// Blocks until `condition(self)` holds or `timeout` passes (polled every 20 ms).
    pub fn wait_until(&self, timeout: Duration, condition: impl Fn(&Receiver) -> bool) -> bool {
        super::wait_until(timeout, || condition(self))
    }

    /// [`Receiver::wait_until`] without blocking the calling async task (needs a tokio
    /// runtime with the time driver).
    pub async fn wait_until_async(
        &self,
        timeout: Duration,
        condition: impl Fn(&Receiver) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if condition(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let runtime = self
            .runtime
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(runtime) = runtime {
            // Allowed inside an async context, unlike dropping the runtime.
            runtime.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("protocol", &self.protocol)
            .field("endpoint", &self.endpoint())
            .field("running", &self.is_running())
            .finish_non_exhaustive()
    }
}

/// Builds a runtime and serves `protocol` on `listener` there.
fn launch(
    protocol: Protocol,
    shared: Arc<Shared>,
    listener: StdTcpListener,
    tls: Option<ServerTls>,
) -> tokio::runtime::Runtime {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("otlp-receiver")
        .enable_all()
        .build()
        .expect("build receiver runtime");
    listener
        .set_nonblocking(true)
        .expect("set listener non-blocking");
    runtime.spawn(async move {
        let listener =
            tokio::net::TcpListener::from_std(listener).expect("register listener with tokio");
        match protocol {
            Protocol::Grpc => serve_grpc(shared, listener, tls).await,
            Protocol::Http => serve_http(shared, listener, tls).await,
        }
    });
    runtime
}

/// The data points of metric `name` in one request (one export cycle), flattened as by
/// [`Receiver::points`].
pub fn request_points(request: &ExportMetricsServiceRequest, name: &str) -> Vec<Point> {
    let mut points = Vec::new();
    collect_points(request, name, &mut points);
    points
}

fn request_has_metric(request: &ExportMetricsServiceRequest, name: &str) -> bool {
    request
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
        .any(|m| m.name == name)
}

fn collect_points(request: &ExportMetricsServiceRequest, name: &str, out: &mut Vec<Point>) {
    for rm in &request.resource_metrics {
        let resource = resource_map(&rm.resource);
        for sm in &rm.scope_metrics {
            let scope_name = sm
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for metric in sm.metrics.iter().filter(|m| m.name == name) {
                let point = |kind, value, is_int, count, attrs: &[KeyValue], time, start| Point {
                    name: metric.name.clone(),
                    value,
                    is_int,
                    count,
                    unit: metric.unit.clone(),
                    description: metric.description.clone(),
                    kind,
                    attrs: attr_map(attrs),
                    resource: resource.clone(),
                    time_unix_nano: time,
                    start_time_unix_nano: start,
                    scope_name: scope_name.clone(),
                };
                let number = |kind, dp: &NumberDataPoint| {
                    let (value, is_int) = match dp.value {
                        Some(number_data_point::Value::AsDouble(d)) => (d, false),
                        Some(number_data_point::Value::AsInt(i)) => (i as f64, true),
                        None => (f64::NAN, false),
                    };
                    point(
                        kind,
                        value,
                        is_int,
                        None,
                        &dp.attributes,
                        dp.time_unix_nano,
                        dp.start_time_unix_nano,
                    )
                };
                match &metric.data {
                    None => {}
                    Some(Data::Gauge(gauge)) => {
                        out.extend(gauge.data_points.iter().map(|dp| number(Kind::Gauge, dp)))
                    }
                    Some(Data::Sum(sum)) => {
                        let kind = Kind::Sum {
                            monotonic: sum.is_monotonic,
                            cumulative: sum.aggregation_temporality
                                == AggregationTemporality::Cumulative as i32,
                        };
                        out.extend(sum.data_points.iter().map(|dp| number(kind, dp)));
                    }
                    Some(Data::Histogram(histogram)) => {
                        out.extend(histogram.data_points.iter().map(|dp| {
                            point(
                                Kind::Histogram,
                                dp.sum.unwrap_or(f64::NAN),
                                false,
                                Some(dp.count),
                                &dp.attributes,
                                dp.time_unix_nano,
                                dp.start_time_unix_nano,
                            )
                        }))
                    }
                    Some(Data::ExponentialHistogram(histogram)) => {
                        out.extend(histogram.data_points.iter().map(|dp| {
                            point(
                                Kind::ExponentialHistogram,
                                dp.sum.unwrap_or(f64::NAN),
                                false,
                                Some(dp.count),
                                &dp.attributes,
                                dp.time_unix_nano,
                                dp.start_time_unix_nano,
                            )
                        }))
                    }
                    Some(Data::Summary(summary)) => {
                        out.extend(summary.data_points.iter().map(|dp| {
                            point(
                                Kind::Summary,
                                dp.sum,
                                false,
                                Some(dp.count),
                                &dp.attributes,
                                dp.time_unix_nano,
                                dp.start_time_unix_nano,
                            )
                        }))
                    }
                }
            }
        }
    }
}
