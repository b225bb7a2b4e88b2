//! `gpu-otel-sidecar webhook`: a mutating admission webhook that injects the sidecar into
//! GPU pods that ask for it (annotation `gpu-otel-sidecar.io/inject: "true"`, or a namespace
//! labelled `gpu-otel-sidecar.io/inject=enabled`; `"false"` opts a pod out). The Helm chart
//! installs it (`webhook.enabled`): Deployment, Service, `MutatingWebhookConfiguration`,
//! serving certificate, and the sidecar to inject, rendered by the chart's named templates.
//!
//! Modules, in the order a request meets them:
//! - [`settings`]: the webhook's settings table (`GPU_SIDECAR_WEBHOOK_*`);
//! - [`server`]: HTTPS (axum, tokio-rustls), with [`certs`] re-reading the serving
//!   certificate when its files change, or [`managed`] keeping its own in a Secret and the
//!   configuration's `caBundle` (`GPU_SIDECAR_WEBHOOK_TLS_SECRET`);
//! - [`review`]: AdmissionReview in (kube-core, k8s-openapi), answer out;
//! - [`inject`]: the decision for one pod and its JSON patch (json-patch), with [`gpu`]
//!   (which containers use GPUs) and [`template`] (the sidecar as the chart renders it);
//! - [`metrics`]: `gpu_sidecar.webhook.admissions`, exported with the agent's OTLP/console
//!   exporter settings.
//!
//! Exit codes: 0 after SIGTERM/SIGINT, 2 for a bad setting or file (one line naming the
//! variable), 1 if the address cannot be bound or the exporter cannot be built.

pub mod certs;
pub mod gpu;
pub mod inject;
pub mod managed;
pub mod metrics;
pub mod review;
pub mod server;
pub mod settings;
pub mod template;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, DEFAULT_SERVICE_NAME};
use inject::{Injector, SidecarTemplate};
use settings::WebhookSettings;

/// `service.name` of the webhook when neither `OTEL_SERVICE_NAME` nor
/// `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_WEBHOOK_SERVICE_NAME: &str = "gpu-otel-sidecar-webhook";

/// Bound on finishing the requests in flight after the shutdown delay, and on the final
/// metrics export.
const DRAIN: Duration = Duration::from_secs(5);

/// Runs the `webhook` command with the process environment; returns the exit code.
pub fn command() -> ExitCode {
    let vars: BTreeMap<String, String> = std::env::vars().collect();
    let (mut config, settings) = match Config::from_vars(vars.clone())
        .and_then(|c| Ok((c, WebhookSettings::from_vars(&vars)?)))
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu-otel-sidecar webhook: {e}");
            return ExitCode::from(2);
        }
    };
    let named = vars
        .get("OTEL_SERVICE_NAME")
        .is_some_and(|v| !v.trim().is_empty());
    if !named && config.service_name == DEFAULT_SERVICE_NAME {
        config.service_name = DEFAULT_WEBHOOK_SERVICE_NAME.to_string();
    }
    crate::logging::init(
        &config.log_level,
        config.log_format == crate::config::LogFormat::Json,
    );
    let injector = match SidecarTemplate::load(&settings.sidecar) {
        Ok(t) => Injector::new(t).with_reinvocation(settings.reinvocation),
        Err(e) => {
            eprintln!(
                "gpu-otel-sidecar webhook: invalid {}: {e}",
                settings::SIDECAR.name
            );
            return ExitCode::from(2);
        }
    };
    crate::telemetry::otlp::tls::install_crypto_provider();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let (certificate, files, keeper): (Arc<dyn rustls::server::ResolvesServerCert>, _, _) =
        match &settings.tls {
            settings::TlsSource::Files { cert, key } => {
                match certs::ReloadingCert::new(cert.clone(), key.clone(), provider.clone()) {
                    Ok(c) => {
                        let c = Arc::new(c);
                        (c.clone(), Some(c), None)
                    }
                    Err(e) => {
                        eprintln!("gpu-otel-sidecar webhook: invalid {e}");
                        return ExitCode::from(2);
                    }
                }
            }
            settings::TlsSource::Managed(m) => {
                match managed::Keeper::new(m.clone(), provider.clone()) {
                    Ok(k) => (k.serving(), None, Some(k)),
                    Err(e) => {
                        eprintln!(
                            "gpu-otel-sidecar webhook: {}={}: {e}",
                            settings::TLS_SECRET.name,
                            m.secret
                        );
                        return ExitCode::from(2);
                    }
                }
            }
        };
    let tls = match rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
    {
        Ok(b) => {
            let mut c = b.with_no_client_auth().with_cert_resolver(certificate);
            c.alpn_protocols = vec![b"http/1.1".to_vec()];
            // No session resumption: every new connection gets a full handshake, so a
            // renewed certificate is presented from the next connection on (the API server
            // keeps its connections open; full handshakes are rare).
            c.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            c.send_tls13_tickets = 0;
            Arc::new(c)
        }
        Err(e) => {
            tracing::error!("cannot set TLS up: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("webhook-io")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(config, settings, injector, tls, files, keeper))
}

/// How often the gauges of certificate files are set (the files are re-read then, as at a
/// handshake).
const FILES_CHECK: Duration = Duration::from_secs(10);

/// Sets the gauges of the certificate files' validity every [`FILES_CHECK`], and says once
/// when the one served has expired (the keeper of a managed certificate sets its own).
async fn watch_files(files: Arc<certs::ReloadingCert>, gauges: metrics::CertificateGauges) {
    let mut told: Option<std::time::SystemTime> = None;
    loop {
        let validity = files.served().1;
        gauges.set(validity, false);
        if let Some(v) = validity {
            if v.expired(std::time::SystemTime::now()) && told != Some(v.not_after) {
                tracing::error!(
                    expires = %v.expires(),
                    "the serving certificate expired at {}: the API server refuses it; renew it (cert-manager, helm upgrade, the Secret you provide)",
                    v.expires()
                );
                told = Some(v.not_after);
            }
        }
        tokio::time::sleep(FILES_CHECK).await;
    }
}

async fn run(
    config: Config,
    settings: WebhookSettings,
    injector: Injector,
    tls: Arc<rustls::ServerConfig>,
    files: Option<Arc<certs::ReloadingCert>>,
    keeper: Option<managed::Keeper>,
) -> ExitCode {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return ExitCode::FAILURE;
    };
    let tcp = match tokio::net::TcpListener::bind(settings.addr).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(
                "cannot listen on {}={}: {e}",
                settings::ADDR.name,
                settings.addr
            );
            return ExitCode::FAILURE;
        }
    };
    let metrics =
        match metrics::WebhookMetrics::start(&config, crate::attribution::resource(&config)) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::FAILURE;
            }
        };
    match (keeper, files) {
        (Some(k), _) => {
            tracing::info!(
                secret = %k.secret_ref(),
                "the serving certificate is kept in Secret {} (made if absent, renewed at two thirds of its validity) and its CAs written into the configuration's caBundle; TLS handshakes fail until it is read",
                k.secret_ref()
            );
            tokio::spawn(k.run(metrics.certificate()));
        }
        (None, Some(files)) => {
            tokio::spawn(watch_files(files, metrics.certificate()));
        }
        (None, None) => {}
    }
    let template = injector.template();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        sidecar = template.container_name(),
        placement = if template.pod_network.is_native() {
            "native (initContainers)"
        } else {
            "classic (containers)"
        },
        gpu_visibility = template.gpu_visibility.as_str(),
        "admission webhook listening on https://{} (POST /mutate, /mutate/namespace)",
        tcp.local_addr().map_or(settings.addr, |a| a)
    );
    let state = Arc::new(server::AppState {
        injector,
        metrics,
        shutting_down: AtomicBool::new(false),
    });
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(server::serve(
        tcp,
        tls,
        server::router(state.clone()),
        async move {
            let _ = stop_rx.await;
        },
        DRAIN,
    ));
    let signal = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    };
    state.shutting_down.store(true, Ordering::Relaxed);
    tracing::info!(
        signal,
        "shutting down: answering for {} more ({}), then finishing the requests in flight",
        humantime::format_duration(settings.shutdown_delay),
        settings::SHUTDOWN_DELAY.name
    );
    tokio::time::sleep(settings.shutdown_delay).await;
    let _ = stop_tx.send(());
    let _ = server.await;
    let flushed = tokio::task::spawn_blocking(move || state.metrics.shutdown(DRAIN))
        .await
        .unwrap_or(false);
    if !flushed {
        tracing::warn!(
            "the webhook's final metrics export did not finish within {}",
            humantime::format_duration(DRAIN)
        );
    }
    tracing::info!("stopped");
    ExitCode::SUCCESS
}
