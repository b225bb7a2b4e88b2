//! `gpu-otel-sidecar`: the agent binary. See the README for settings.
//!
//! Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for a bad setting (one line
//! on stderr naming the variable), 1 if the exporter cannot be set up.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use gpu_otel_sidecar::config::{Config, LogFormat};
use gpu_otel_sidecar::sampling::{Sampler, SamplerSettings, SharedState};
use gpu_otel_sidecar::telemetry::events::Events;
use gpu_otel_sidecar::telemetry::recorder::Recorder;
use gpu_otel_sidecar::telemetry::{Telemetry, TelemetryError};
use gpu_otel_sidecar::{attribution, logging};

const USAGE: &str = "\
gpu-otel-sidecar: reads NVIDIA GPUs through NVML and pushes OpenTelemetry metrics over OTLP.

Usage: gpu-otel-sidecar [--help | --version]

Configured by environment variables (OTEL_* and GPU_SIDECAR_*); see the README.";

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        None => {}
        Some("--help" | "-h") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some("--version" | "-V") => {
            println!("gpu-otel-sidecar {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("gpu-otel-sidecar: unknown argument {other:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu-otel-sidecar: {e}");
            return ExitCode::from(2);
        }
    };
    logging::init(&config.log_level, config.log_format == LogFormat::Json);
    run(config)
}

fn run(config: Config) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otel-io")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        exporter = ?config.metrics_exporter,
        endpoint = %config.otlp.metrics_endpoint,
        protocol = ?config.otlp.protocol,
        sample_interval_ms = config.sample_interval.as_millis() as u64,
        export_interval_ms = config.export_interval.as_millis() as u64,
        "starting"
    );
    let shared = Arc::new(SharedState::default());
    let resource = attribution::resource(&config);
    let started = {
        let _guard = runtime.enter();
        Telemetry::start(&config, resource.clone(), shared.clone()).and_then(|t| {
            Ok((
                t,
                Events::start(&config, resource).map_err(TelemetryError::Exporter)?,
            ))
        })
    };
    let (telemetry, events) = match started {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // After the pipelines: the sampler reports group durations and XID/ECC events into them.
    let recorder = Arc::new(Recorder::new(&telemetry.meter(), events.emitter()));
    let sampler = Sampler::start_observed(SamplerSettings::from(&config), shared.clone(), recorder);

    let signal = runtime.block_on(wait_for_signal());
    tracing::info!(signal, "shutting down: final sample and export");
    let deadline = Instant::now() + config.shutdown_timeout;
    if !sampler.stop(config.shutdown_timeout) {
        tracing::warn!(
            "the NVML sampler did not finish its final sample within {:?} (a driver call is stuck); exporting without it",
            config.shutdown_timeout
        );
    }
    if !events.shutdown(deadline.saturating_duration_since(Instant::now())) {
        tracing::warn!("queued events could not be exported before the shutdown bound");
    }
    if !telemetry.shutdown(deadline.saturating_duration_since(Instant::now())) {
        tracing::warn!(
            "the final export did not finish within GPU_SIDECAR_SHUTDOWN_TIMEOUT ({:?}); exiting without it",
            config.shutdown_timeout
        );
    }
    runtime.shutdown_background();
    tracing::info!("stopped");
    ExitCode::SUCCESS
}

async fn wait_for_signal() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        std::future::pending::<()>().await;
        unreachable!()
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}
