//! The OTLP exporters' settings: the standard `OTEL_EXPORTER_OTLP_*` and `OTEL_BLRP_*`
//! variables read into [`OtlpConfig`] and [`LogsBatch`], the TLS files loaded and checked.

use std::fmt;
use std::time::Duration;

use super::otel::{self, otlp_row, OtelDefault, OtelVariable};
use super::values::{parse_bool, parse_key_values, parse_millis};
use super::ConfigError;

/// OTLP transport, from `OTEL_EXPORTER_OTLP_PROTOCOL` (`grpc` | `http/protobuf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC over tonic (default here; port 4317).
    Grpc,
    /// OTLP/HTTP with protobuf bodies (port 4318, paths `/v1/metrics`, `/v1/logs`).
    HttpProtobuf,
}

impl Protocol {
    /// The `OTEL_EXPORTER_OTLP_PROTOCOL` value: `grpc` or `http/protobuf`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// A string whose value never appears in logs, errors or debug output (OTLP header values
/// carry tokens).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The contents of a PEM file given in a setting (certificates; not secret). Debug output
/// shows only its size.
#[derive(Clone, PartialEq, Eq)]
pub struct Pem(Vec<u8>);

impl Pem {
    /// The file's bytes, as read at startup.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<PEM, {} bytes>", self.0.len())
    }
}

/// TLS material for the OTLP exporters, read from the PEM files named by the standard
/// variables (the OTel crates do not read them). Used for `https://` endpoints only.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsFiles {
    /// Trusted CA certificate(s) for the collector's certificate,
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE`. `None`: the system's trust store.
    pub ca: Option<Pem>,
    /// Client certificate chain for mutual TLS, `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`.
    pub client_certificate: Option<Pem>,
    /// Client private key (PEM, PKCS#8, PKCS#1 or SEC1), `OTEL_EXPORTER_OTLP_CLIENT_KEY`.
    /// Given together with the certificate, or not at all. Secret.
    pub client_key: Option<Secret>,
}

impl TlsFiles {
    /// Whether any TLS file was given.
    pub fn is_set(&self) -> bool {
        self.ca.is_some() || self.client_certificate.is_some()
    }
}

/// One OTLP exporter's settings (metrics or logs), from the standard `OTEL_EXPORTER_OTLP_*`
/// variables: the signal's own form (`OTEL_EXPORTER_OTLP_METRICS_TIMEOUT`,
/// `OTEL_EXPORTER_OTLP_LOGS_PROTOCOL`, …) wins over the general one
/// (`OTEL_EXPORTER_OTLP_TIMEOUT`), as the OTLP exporter specification says.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpExporter {
    /// Transport, `OTEL_EXPORTER_OTLP_[SIGNAL_]PROTOCOL`; default gRPC.
    pub protocol: Protocol,
    /// Full URL: `OTEL_EXPORTER_OTLP_{METRICS,LOGS}_ENDPOINT` as given, or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` (plus `/v1/metrics` or `/v1/logs` over HTTP). Defaults:
    /// `http://localhost:4317` (gRPC), `http://localhost:4318/v1/{metrics,logs}` (HTTP).
    pub endpoint: String,
    /// Headers sent with every request, `OTEL_EXPORTER_OTLP_[SIGNAL_]HEADERS` (`k=v,k2=v2`,
    /// values percent-decoded). Values are secrets.
    pub headers: Vec<(String, Secret)>,
    /// Bound on one export, retries included, `OTEL_EXPORTER_OTLP_[SIGNAL_]TIMEOUT` in
    /// milliseconds; default 10000.
    pub timeout: Duration,
    /// gzip compression, `OTEL_EXPORTER_OTLP_[SIGNAL_]COMPRESSION` (`gzip` | `none`);
    /// default none.
    pub gzip: bool,
    /// CA and client certificate files (`OTEL_EXPORTER_OTLP_[SIGNAL_]CERTIFICATE`,
    /// `…_CLIENT_CERTIFICATE`, `…_CLIENT_KEY`).
    pub tls: TlsFiles,
    /// `OTEL_EXPORTER_OTLP_[SIGNAL_]INSECURE`: a schemeless endpoint was taken as `http://`
    /// (already applied to [`OtlpExporter::endpoint`]).
    pub insecure: bool,
}

/// Which OTLP signal an [`OtlpExporter`] is for: the infix of its per-signal variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `OTEL_EXPORTER_OTLP_METRICS_*`, path `/v1/metrics`.
    Metrics,
    /// `OTEL_EXPORTER_OTLP_LOGS_*`, path `/v1/logs` (the agent's events).
    Logs,
}

impl Signal {
    /// `METRICS` or `LOGS`.
    pub fn infix(self) -> &'static str {
        match self {
            Signal::Metrics => "METRICS",
            Signal::Logs => "LOGS",
        }
    }

    /// The OTLP/HTTP path: `v1/metrics` or `v1/logs`.
    pub fn http_path(self) -> &'static str {
        match self {
            Signal::Metrics => "v1/metrics",
            Signal::Logs => "v1/logs",
        }
    }
}

/// Aggregation temporality the metrics exporter is asked for,
/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` (case-insensitive), as the OTLP
/// exporter specification defines it per instrument kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TemporalityPreference {
    /// `cumulative` (default): every sum and histogram is cumulative.
    #[default]
    Cumulative,
    /// `delta`: counters (monotonic sums) and histograms are delta; up-down counters stay
    /// cumulative.
    Delta,
    /// `lowmemory`: synchronous counters and histograms (those the agent records as things
    /// happen: XIDs, alerts, sample durations) are delta; observable counters (read from
    /// NVML or the agent's state) and up-down counters stay cumulative.
    LowMemory,
}

impl TemporalityPreference {
    /// The `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` value: `cumulative`, `delta`
    /// or `lowmemory`.
    pub fn as_str(self) -> &'static str {
        match self {
            TemporalityPreference::Cumulative => "cumulative",
            TemporalityPreference::Delta => "delta",
            TemporalityPreference::LowMemory => "lowmemory",
        }
    }
}

/// OTLP settings for both signals the agent exports.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// The metrics exporter (`OTEL_EXPORTER_OTLP_METRICS_*` over `OTEL_EXPORTER_OTLP_*`).
    pub metrics: OtlpExporter,
    /// The events' (log records') exporter (`OTEL_EXPORTER_OTLP_LOGS_*` over
    /// `OTEL_EXPORTER_OTLP_*`).
    pub logs: OtlpExporter,
    /// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`; default cumulative.
    pub temporality: TemporalityPreference,
}

/// Events held while the collector is slow or down, by default (`OTEL_BLRP_MAX_QUEUE_SIZE`;
/// the specification's 2048 is sized for applications' logs). Sized from the encoded OTLP
/// records measured on the H200 recording (`tests/agent/reliability.rs`,
/// `events_raised_during_a_60_s_outage_arrive_once_in_order`, which checks them): an XID
/// event 0.33-0.5 KiB, an alert with every reading of its GPU 2.5-2.7 KiB, the run report
/// ~4.2 KiB. 1024 hold a minute of a storm of 17 XIDs a second, or days of alerts, in at most
/// ~2.7 MiB (all alerts; ~0.5 MiB of XIDs).
pub const DEFAULT_EVENTS_QUEUE_SIZE: usize = 1024;

/// How events are queued and batched, from the `OTEL_BLRP_*` variables (the batch log
/// record processor's, applied by the agent's own events queue, `src/telemetry/logs/outbox.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogsBatch {
    /// `OTEL_BLRP_SCHEDULE_DELAY` (ms): while events keep coming, at most one export per
    /// this long (a lone event goes at once); default 1000.
    pub schedule_delay: Duration,
    /// `OTEL_BLRP_MAX_QUEUE_SIZE`: events held while the collector is slow or down (the
    /// oldest dropped first when full); default [`DEFAULT_EVENTS_QUEUE_SIZE`].
    pub max_queue_size: usize,
    /// `OTEL_BLRP_MAX_EXPORT_BATCH_SIZE`: events per export; default 512, at most the queue
    /// size.
    pub max_export_batch_size: usize,
}

impl Default for LogsBatch {
    /// The rows' defaults (`OTEL_BLRP_SCHEDULE_DELAY`, …).
    fn default() -> Self {
        let none = |_: &str| None;
        match parse_logs_batch(&none) {
            Ok(b) => b,
            Err(e) => unreachable!("the OTEL_BLRP_* defaults are valid: {e}"),
        }
    }
}

/// `OTEL_BLRP_*` (see [`LogsBatch`]), each read through its row.
pub(super) fn parse_logs_batch<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<LogsBatch, ConfigError> {
    let max_queue_size = otel::BLRP_MAX_QUEUE_SIZE.count(get)?;
    Ok(LogsBatch {
        schedule_delay: otel::BLRP_SCHEDULE_DELAY.millis(get)?,
        max_queue_size,
        // As the specification says: a batch is never larger than the queue.
        max_export_batch_size: otel::BLRP_MAX_EXPORT_BATCH_SIZE
            .count(get)?
            .min(max_queue_size),
    })
}

/// `row`'s variable for `signal` (see [`signal_var`]); `row` is the general one.
fn signal_row<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    signal: Signal,
    row: &OtelVariable,
) -> Option<(String, &'a str)> {
    let name = row
        .name
        .strip_prefix("OTEL_EXPORTER_OTLP_")
        .unwrap_or(row.name);
    signal_var(get, signal, name)
}

/// The variable that sets `name` for `signal`: its per-signal form
/// (`OTEL_EXPORTER_OTLP_METRICS_TIMEOUT`) when set, else the general one
/// (`OTEL_EXPORTER_OTLP_TIMEOUT`); with its value.
pub(super) fn signal_var<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    signal: Signal,
    name: &str,
) -> Option<(String, &'a str)> {
    let own = format!("OTEL_EXPORTER_OTLP_{}_{name}", signal.infix());
    if let Some(v) = get(&own) {
        return Some((own, v));
    }
    let general = format!("OTEL_EXPORTER_OTLP_{name}");
    get(&general).map(|v| (general, v))
}

pub(super) fn parse_otlp<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<OtlpConfig, ConfigError> {
    let var = otel::TEMPORALITY_PREFERENCE.name;
    let set = get(var).map(|v| v.trim().to_ascii_lowercase());
    let temporality = match set
        .as_deref()
        .unwrap_or(otel::TEMPORALITY_PREFERENCE.default_word())
    {
        "cumulative" => TemporalityPreference::Cumulative,
        "delta" => TemporalityPreference::Delta,
        "lowmemory" => TemporalityPreference::LowMemory,
        _ => {
            return Err(ConfigError::new(
                var,
                get(var).unwrap_or_default(),
                "cumulative, delta or lowmemory",
            ))
        }
    };
    Ok(OtlpConfig {
        metrics: parse_exporter_settings(get, Signal::Metrics)?,
        logs: parse_exporter_settings(get, Signal::Logs)?,
        temporality,
    })
}

/// One signal's exporter settings (see [`OtlpExporter`]).
pub(super) fn parse_exporter_settings<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    signal: Signal,
) -> Result<OtlpExporter, ConfigError> {
    let var = |name: &str| signal_var(get, signal, name);
    let (protocol_var, protocol_v) = signal_row(get, signal, &otlp_row::PROTOCOL)
        .unwrap_or((String::new(), otlp_row::PROTOCOL.default_word()));
    let protocol = match protocol_v {
        "grpc" => Protocol::Grpc,
        "http/protobuf" => Protocol::HttpProtobuf,
        v => {
            let name = protocol_var;
            return Err(ConfigError::new(
                &name,
                v,
                "grpc or http/protobuf (http/json is not supported)",
            ));
        }
    };
    let insecure = match signal_row(get, signal, &otlp_row::INSECURE) {
        None => match otlp_row::INSECURE.default {
            OtelDefault::Bool(b) => b,
            other => unreachable!("OTEL_EXPORTER_OTLP_INSECURE's default {other:?}"),
        },
        Some((name, v)) => parse_bool(&name, v)?,
    };
    let own_endpoint = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.infix());
    let endpoint = match get(&own_endpoint) {
        // The per-signal endpoint is the full URL, used as given.
        Some(v) => check_endpoint(&own_endpoint, v, insecure)?,
        None => {
            let base = match get("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(v) => check_endpoint("OTEL_EXPORTER_OTLP_ENDPOINT", v, insecure)?,
                None => match (otlp_row::ENDPOINT.default, protocol) {
                    (OtelDefault::Endpoints { grpc, .. }, Protocol::Grpc) => grpc.to_string(),
                    (OtelDefault::Endpoints { http, .. }, Protocol::HttpProtobuf) => {
                        http.to_string()
                    }
                    (other, _) => {
                        unreachable!("OTEL_EXPORTER_OTLP_ENDPOINT's default {other:?}")
                    }
                },
            };
            match protocol {
                Protocol::Grpc => base,
                Protocol::HttpProtobuf => {
                    format!("{}/{}", base.trim_end_matches('/'), signal.http_path())
                }
            }
        }
    };
    let headers = match var("HEADERS") {
        None => Vec::new(),
        Some((name, v)) => parse_key_values(&name, v, true)?
            .into_iter()
            .map(|(k, v)| {
                let k = k.to_ascii_lowercase();
                let ok = tonic::codegen::http::HeaderName::from_bytes(k.as_bytes()).is_ok()
                    && tonic::codegen::http::HeaderValue::from_str(&v).is_ok();
                if ok {
                    Ok((k, Secret(v)))
                } else {
                    Err(ConfigError::new(
                        &name,
                        "<redacted>",
                        format!("valid HTTP header names and visible ASCII values (the entry for {k:?} is not)"),
                    ))
                }
            })
            .collect::<Result<_, _>>()?,
    };
    let timeout = match signal_row(get, signal, &otlp_row::TIMEOUT) {
        None => otlp_row::TIMEOUT.default_millis(),
        Some((name, v)) => parse_millis(&name, v)?,
    };
    let (compression_var, compression) = signal_row(get, signal, &otlp_row::COMPRESSION)
        .unwrap_or((String::new(), otlp_row::COMPRESSION.default_word()));
    let gzip = match compression {
        "none" => false,
        "gzip" => true,
        v => return Err(ConfigError::new(&compression_var, v, "gzip or none")),
    };
    let tls = parse_tls(get, signal)?;
    Ok(OtlpExporter {
        protocol,
        endpoint,
        headers,
        timeout,
        gzip,
        tls,
        insecure,
    })
}

/// Reads and checks the PEM files of the TLS variables: each must be readable and hold what
/// it should (certificates, or one private key); the client certificate and key come as a
/// pair. Errors name the variable and the path, never the key's contents.
pub(super) fn parse_tls<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    signal: Signal,
) -> Result<TlsFiles, ConfigError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    // Each file comes from its per-signal variable when set, else from the general one; the
    // errors name the variable that was read.
    let ca_var = signal_var(get, signal, "CERTIFICATE");
    let cert_var = signal_var(get, signal, "CLIENT_CERTIFICATE");
    let key_var = signal_var(get, signal, "CLIENT_KEY");
    let name_of = |v: &Option<(String, &str)>, general: &str| {
        v.as_ref()
            .map_or_else(|| general.to_string(), |(n, _)| n.clone())
    };
    let (ca_name, cert_name, key_name) = (
        name_of(&ca_var, "OTEL_EXPORTER_OTLP_CERTIFICATE"),
        name_of(&cert_var, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"),
        name_of(&key_var, "OTEL_EXPORTER_OTLP_CLIENT_KEY"),
    );
    let (ca_v, cert_v, key_v) = (ca_name.as_str(), cert_name.as_str(), key_name.as_str());
    let read = |var: &str, path: &str, what: &str| -> Result<Vec<u8>, ConfigError> {
        std::fs::read(path).map_err(|e| {
            ConfigError::new(var, path, format!("a readable PEM file with {what} ({e})"))
        })
    };
    let certificates = |var: &str, path: &str| -> Result<Pem, ConfigError> {
        let what = "one or more certificates";
        let bytes = read(var, path, what)?;
        let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
        match certs {
            Ok(c) if !c.is_empty() => Ok(Pem(bytes)),
            Ok(_) => Err(ConfigError::new(
                var,
                path,
                format!("a PEM file with {what} (none found)"),
            )),
            Err(e) => Err(ConfigError::new(
                var,
                path,
                format!("a PEM file with {what} ({e})"),
            )),
        }
    };
    let ca = ca_var.map(|(_, p)| certificates(ca_v, p)).transpose()?;
    let client_certificate = cert_var.map(|(_, p)| certificates(cert_v, p)).transpose()?;
    let client_key = match key_var.map(|(_, p)| p) {
        None => None,
        Some(path) => {
            let what = "one private key (PKCS#8, PKCS#1 or SEC1)";
            let bytes = read(key_v, path, what)?;
            if PrivateKeyDer::from_pem_slice(&bytes).is_err() {
                return Err(ConfigError::new(
                    key_v,
                    path,
                    format!("a PEM file with {what}"),
                ));
            }
            match String::from_utf8(bytes) {
                Ok(text) => Some(Secret(text)),
                Err(_) => {
                    return Err(ConfigError::new(
                        key_v,
                        path,
                        format!("a PEM file with {what}"),
                    ))
                }
            }
        }
    };
    match (&client_certificate, &client_key) {
        (Some(_), None) => {
            return Err(ConfigError::new(
                key_v,
                "",
                format!("a private key file: {cert_v} is set, and mutual TLS needs both"),
            ))
        }
        (None, Some(_)) => {
            return Err(ConfigError::new(
                cert_v,
                "",
                format!("a certificate file: {key_v} is set, and mutual TLS needs both"),
            ))
        }
        _ => {}
    }
    Ok(TlsFiles {
        ca,
        client_certificate,
        client_key,
    })
}

/// An endpoint must be an `http://` or `https://` URL. A schemeless `host:port` means
/// https, or http when `OTEL_EXPORTER_OTLP_INSECURE=true`.
pub(super) fn check_endpoint(var: &str, v: &str, insecure: bool) -> Result<String, ConfigError> {
    let expected = "a URL such as http://otel-collector:4317 (or host:port)";
    let url = if v.starts_with("http://") || v.starts_with("https://") {
        v.to_string()
    } else if v.contains("://") {
        return Err(ConfigError::new(var, v, expected));
    } else if insecure {
        format!("http://{v}")
    } else {
        format!("https://{v}")
    };
    match url.parse::<tonic::codegen::http::Uri>() {
        Ok(uri) if uri.host().is_some() => Ok(url),
        _ => Err(ConfigError::new(var, v, expected)),
    }
}
