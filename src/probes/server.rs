//! The probes' HTTP server (axum) on a TCP address or a Unix socket
//! (`GPU_SIDECAR_HEALTH_ADDR=unix:<path>`), and the client behind `gpu-otel-sidecar health`.
//!
//! A Unix socket is for pods whose ports are the node's (`hostNetwork: true`): a socket file
//! in the pod's own `emptyDir` cannot collide with another pod's, where a fixed TCP port
//! would (the second agent on the node could not bind it, and a declared `containerPort`
//! becomes a host port the scheduler counts). The kubelet cannot send an HTTP probe to a
//! socket, so such pods are probed with `exec: gpu-otel-sidecar health`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{Probes, Report};
use crate::config::HealthAddr;

fn respond(r: Report) -> Response {
    let status = if r.ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        r.body.to_string(),
    )
        .into_response()
}

/// Where the probes are served, once bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `http://<address>` (port 0 replaced by the one given).
    Tcp(SocketAddr),
    /// A Unix socket file.
    Unix(PathBuf),
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "http://{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

fn cannot_listen(addr: &HealthAddr, e: impl std::fmt::Display) -> String {
    format!(
        "cannot listen on GPU_SIDECAR_HEALTH_ADDR={addr}: {e}; choose another address or set it to off"
    )
}

/// Binds `path` as a Unix socket. A socket file left by an earlier agent (a restarted
/// container keeps its `emptyDir`) that nobody answers on is replaced; one that answers is
/// in use.
fn bind_unix(path: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    match std::os::unix::net::UnixListener::bind(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let is_socket =
                std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
            let answered = std::os::unix::net::UnixStream::connect(path).is_ok();
            if !is_socket || answered {
                return Err(e);
            }
            std::fs::remove_file(path)?;
            std::os::unix::net::UnixListener::bind(path)
        }
        other => other,
    }
}

/// Binds `addr` and serves `/healthz` and `/readyz` on `runtime` until it shuts down;
/// returns where it serves (port 0 becomes the one given). Done first thing at start, so
/// that nothing else is running yet when it fails.
///
/// # Errors
/// One line naming `GPU_SIDECAR_HEALTH_ADDR`, the address and the cause (in use, not
/// permitted, not an address of this host, no such directory).
pub fn start(
    runtime: &tokio::runtime::Runtime,
    addr: &HealthAddr,
    health: Arc<Probes>,
) -> Result<Endpoint, String> {
    let _guard = runtime.enter();
    match addr {
        HealthAddr::Tcp(a) => {
            let listener = std::net::TcpListener::bind(a)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(tokio::net::TcpListener::from_std)
                .and_then(|l| l.local_addr().map(|a| (l, a)));
            let (listener, bound) = listener.map_err(|e| cannot_listen(addr, e))?;
            runtime.spawn(serve(listener, health));
            Ok(Endpoint::Tcp(bound))
        }
        HealthAddr::Unix(path) => {
            let listener = bind_unix(path)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(tokio::net::UnixListener::from_std)
                .map_err(|e| cannot_listen(addr, e))?;
            runtime.spawn(serve(listener, health));
            Ok(Endpoint::Unix(path.clone()))
        }
    }
}

/// Serves `/healthz` and `/readyz` on `listener` (TCP or Unix) until the runtime shuts down.
pub async fn serve<L>(listener: L, health: Arc<Probes>)
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let app = axum::Router::new()
        .route(
            "/healthz",
            get(|State(h): State<Arc<Probes>>| async move { respond(h.liveness()) }),
        )
        .route(
            "/readyz",
            get(|State(h): State<Arc<Probes>>| async move { respond(h.readiness()) }),
        )
        .with_state(health);
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!("health endpoint stopped: {e}");
    }
}

/// The address to probe for a listener on `addr`: the unspecified address (`0.0.0.0`,
/// `::`) becomes the loopback one.
pub fn probe_target(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}

/// `GET <path>` (`/readyz` or `/healthz`) of the agent at `addr` (the unspecified address
/// probed on loopback; a Unix socket through its file), for `gpu-otel-sidecar health`.
/// Returns the HTTP status and the body.
///
/// # Errors
/// A line saying why no answer came (connection refused, no such socket, timeout).
pub fn probe(addr: &HealthAddr, path: &str, timeout: Duration) -> Result<(u16, String), String> {
    crate::telemetry::otlp::tls::install_crypto_provider();
    let builder = reqwest::blocking::Client::builder()
        .timeout(timeout)
        .no_proxy();
    let (builder, url, shown) = match addr {
        HealthAddr::Tcp(a) => {
            let url = format!("http://{}{path}", probe_target(*a));
            (builder, url.clone(), url)
        }
        HealthAddr::Unix(socket) => (
            builder.unix_socket(socket.as_path()),
            format!("http://localhost{path}"),
            format!("unix:{} {path}", socket.display()),
        ),
    };
    let client = builder.build().map_err(|e| format!("HTTP client: {e}"))?;
    let response = client.get(&url).send().map_err(|e| {
        let why = crate::logging::with_sources(&e);
        if e.is_timeout() {
            format!(
                "asked {shown}, and no answer came within {}: an agent listens there but does not answer (overloaded, or stopped in a debugger)",
                humantime::format_duration(timeout)
            )
        } else if e.is_connect() {
            format!(
                "asked {shown}, and nothing answered ({why}): no agent is running here with GPU_SIDECAR_HEALTH_ADDR={addr} (an agent with another address, or with the endpoint off, is not found)"
            )
        } else {
            format!("asked {shown}: {why}")
        }
    })?;
    let status = response.status().as_u16();
    let body = response.text().map_err(|e| format!("{shown}: {e}"))?;
    Ok((status, body))
}
