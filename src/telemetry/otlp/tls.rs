//! TLS for the OTLP exporters (metrics and events alike), with rustls and its `ring`
//! provider: the CA and client certificate files of `OTEL_EXPORTER_OTLP_CERTIFICATE`,
//! `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE` and `OTEL_EXPORTER_OTLP_CLIENT_KEY`, or of their
//! per-signal forms (`OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE`, …), read and checked by
//! [`crate::config`] (the OTel crates do not read these variables).
//!
//! TLS is used when the endpoint is `https://`. Without a CA file the system's trust store
//! is used (`/etc/ssl/certs` and the like); [`check_trust_store`] makes sure at startup that
//! it holds something, and an image without one stops the agent with exit 1 and one line
//! naming the problem. With a CA file, only that
//! CA is trusted. A client certificate makes it mutual TLS. A failing handshake is an export
//! failure like any other: logged at a bounded rate, visible in `/readyz`, retried.

use std::sync::Once;

use crate::config::{Config, ExporterKind, OtlpExporter};

/// Makes rustls' `ring` provider the process default (once). reqwest's rustls backend needs
/// a process-wide provider; tonic picks `ring` itself.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // An error means another provider is installed already, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn is_https(endpoint: &str) -> bool {
    endpoint
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
}

/// For every OTLP exporter in use whose endpoint is `https://` without a CA file
/// (`OTEL_EXPORTER_OTLP_CERTIFICATE`), checks that the system trust store (`SSL_CERT_FILE`,
/// `SSL_CERT_DIR`, else `/etc/ssl/certs` and the like, as rustls-native-certs finds them)
/// holds at least one certificate. Without this, an image lacking its CA bundle fails later
/// and less clearly (tonic: "no native certs found"; reqwest: a warning from its verifier and
/// "builder error").
///
/// # Errors
/// One line naming the variable, the endpoint, what was looked for and the two ways out.
pub fn check_trust_store(config: &Config) -> Result<(), String> {
    let c = &config.otlp;
    let endpoints = [
        (config.metrics_exporter, "metrics", &c.metrics, "METRICS_"),
        (config.logs_exporter, "events", &c.logs, "LOGS_"),
    ];
    // A signal whose exporter has its own CA file does not need the trust store.
    let Some((_, signal, exporter, infix)) = endpoints.into_iter().find(|(kind, _, e, _)| {
        *kind == ExporterKind::Otlp && e.tls.ca.is_none() && is_https(&e.endpoint)
    }) else {
        return Ok(());
    };
    let endpoint = &exporter.endpoint;
    let found = rustls_native_certs::load_native_certs();
    if !found.certs.is_empty() {
        return Ok(());
    }
    let looked = match found.errors.first() {
        Some(e) => format!(": {e}"),
        None => String::new(),
    };
    Err(format!(
        "the {signal} endpoint {endpoint} is https:// but there is no CA certificate to trust it with: \
         the system trust store is empty or missing{looked}; give the image its CA bundle \
         (/etc/ssl/certs/ca-certificates.crt, from ca-certificates) or set OTEL_EXPORTER_OTLP_CERTIFICATE \
         (or OTEL_EXPORTER_OTLP_{infix}CERTIFICATE) to the collector's CA"
    ))
}

/// Warns once per exporter when certificate files are given for a plain `http://`
/// endpoint (they are then not used).
fn warn_unused(c: &OtlpExporter, endpoint: &str) {
    if c.tls.is_set() && !is_https(endpoint) {
        tracing::warn!(
            endpoint,
            "OTEL_EXPORTER_OTLP_[SIGNAL_]CERTIFICATE / CLIENT_CERTIFICATE are set but the endpoint is not https://: TLS is not used"
        );
    }
}

/// The tonic TLS settings for `endpoint`, or `None` for a plain `http://` endpoint.
pub fn grpc(c: &OtlpExporter, endpoint: &str) -> Option<tonic::transport::ClientTlsConfig> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    warn_unused(c, endpoint);
    if !is_https(endpoint) {
        return None;
    }
    let mut tls = ClientTlsConfig::new();
    tls = match &c.tls.ca {
        Some(ca) => tls.ca_certificate(Certificate::from_pem(ca.bytes())),
        None => tls.with_native_roots(),
    };
    if let (Some(cert), Some(key)) = (&c.tls.client_certificate, &c.tls.client_key) {
        tls = tls.identity(Identity::from_pem(cert.bytes(), key.expose()));
    }
    Some(tls)
}

/// The async reqwest client for the OTLP/HTTP transport of metrics and events (it runs on the agent's
/// tokio runtime): for an `https://` endpoint, the CA and client certificate. Each request
/// sets its own timeout (what is left of the export's bound).
///
/// # Errors
/// A message if reqwest refuses the certificates (the files were checked by `config`); it
/// never holds the key.
pub fn http_client_async(c: &OtlpExporter, endpoint: &str) -> Result<reqwest::Client, String> {
    install_crypto_provider();
    warn_unused(c, endpoint);
    let mut b = reqwest::Client::builder();
    if is_https(endpoint) {
        if let Some(ca) = &c.tls.ca {
            let certs = reqwest::Certificate::from_pem_bundle(ca.bytes())
                .map_err(|e| format!("OTEL_EXPORTER_OTLP_CERTIFICATE: {e}"))?;
            b = b.tls_certs_only(certs);
        }
        if let (Some(cert), Some(key)) = (&c.tls.client_certificate, &c.tls.client_key) {
            let mut pem = key.expose().as_bytes().to_vec();
            pem.push(b'\n');
            pem.extend_from_slice(cert.bytes());
            // The error text comes from the PEM parser and names no key material.
            let id = reqwest::Identity::from_pem(&pem)
                .map_err(|e| format!("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE / CLIENT_KEY: {e}"))?;
            b = b.identity(id);
        }
    }
    b.build().map_err(|e| format!("HTTP client: {e}"))
}
