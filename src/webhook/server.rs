//! The HTTPS server: axum on a TLS listener (tokio-rustls, HTTP/1.1), with the serving
//! certificate resolved per handshake ([`super::certs::ReloadingCert`]).
//!
//! Routes: `POST /mutate` ([`Scope::Pod`]), `POST /mutate/namespace` ([`Scope::Namespace`]),
//! `GET /healthz` (200 while serving), `GET /readyz` (200, 503 once shutting down). Bodies
//! are limited to [`MAX_BODY`]. TLS handshakes run concurrently, each bounded by
//! [`HANDSHAKE_TIMEOUT`], so a client that stalls in its handshake holds up nobody.

use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::inject::{Injector, Scope};
use super::metrics::WebhookMetrics;
use super::review::answer;

/// Largest request body accepted: a pod is at most ~1.5 MiB in etcd, and a CREATE review
/// carries it once.
pub const MAX_BODY: usize = 4 * 1024 * 1024;

/// Bound on one TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the handlers share.
pub struct AppState {
    /// The decision maker.
    pub injector: Injector,
    /// `gpu_sidecar.webhook.admissions`.
    pub metrics: WebhookMetrics,
    /// Set on SIGTERM: `/readyz` answers 503 from then on.
    pub shutting_down: AtomicBool,
}

/// The router (no TLS): the routes above over `state`.
pub fn router(state: Arc<AppState>) -> axum::Router {
    axum::Router::new()
        .route("/mutate", post(mutate_pod))
        .route("/mutate/namespace", post(mutate_namespace))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

async fn mutate_pod(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    respond(&s, Scope::Pod, &body)
}

async fn mutate_namespace(State(s): State<Arc<AppState>>, body: Bytes) -> Response {
    respond(&s, Scope::Namespace, &body)
}

fn respond(s: &AppState, scope: Scope, body: &[u8]) -> Response {
    let a = answer(&s.injector, scope, body);
    s.metrics.admitted(a.outcome, a.dry_run);
    let status = StatusCode::from_u16(a.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, [(header::CONTENT_TYPE, a.content_type)], a.body).into_response()
}

async fn readyz(State(s): State<Arc<AppState>>) -> Response {
    if s.shutting_down.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    } else {
        (StatusCode::OK, "ready\n").into_response()
    }
}

/// Accepted TLS connections, handed to axum as they finish their handshakes.
struct TlsListener {
    connections: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.connections.recv().await {
            Some(c) => c,
            // The acceptor is gone (runtime shutting down): accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Accepts TCP connections on `tcp` and runs each TLS handshake on its own task.
async fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    out: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    loop {
        let (stream, peer) = match tcp.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait, do not spin.
                tracing::warn!("accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (acceptor, out) = (acceptor.clone(), out.clone());
        tokio::spawn(async move {
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let _ = out.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    }
}

/// Serves `router` over TLS on `tcp` until `shutdown` resolves, then lets the requests in
/// flight finish (idle keep-alive connections are closed), at most `drain` long.
pub async fn serve(
    tcp: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
) {
    let local = match tcp.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::error!("the webhook's listener has no address: {e}");
            return;
        }
    };
    let (tx, rx) = mpsc::channel(64);
    let acceptor = tokio::spawn(accept_loop(tcp, TlsAcceptor::from(tls), tx));
    let (stopping_tx, stopping_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(
        TlsListener {
            connections: rx,
            local,
        },
        router,
    )
    .with_graceful_shutdown(async move {
        shutdown.await;
        let _ = stopping_tx.send(());
    });
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        result = &mut server => {
            if let Err(e) = result {
                tracing::error!("the webhook server stopped: {e}");
            }
        }
        _ = async {
            let _ = stopping_rx.await;
            tokio::time::sleep(drain).await;
        } => {
            tracing::warn!(
                "requests still in flight after {}; exiting without them",
                humantime::format_duration(drain)
            );
        }
    }
    acceptor.abort();
}
