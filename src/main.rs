//! `gpu-otel-sidecar`: the agent binary. See the README for settings.
//!
//! Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT), 2 for a bad setting or argument
//! (one line on stderr naming the variable), 1 if the exporter cannot be set up or the
//! health port cannot be bound.
//!
//! `gpu-otel-sidecar health` asks the local agent's `/readyz` (for a Docker `HEALTHCHECK`
//! in an image without curl): exit 0 when ready, 1 otherwise.
//!
//! `gpu-otel-sidecar webhook` serves the admission webhook ([`gpu_otel_sidecar::webhook`]).
//!
//! `gpu-otel-sidecar check-config` reads the settings as the agent would and prints what it
//! understood (one JSON object), without loading NVML or connecting anywhere: exit 0, or 2
//! with the line the agent would print for a bad setting.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpu_otel_sidecar::attribution::pod_resources;
use gpu_otel_sidecar::config::{Config, DeviceSelection, LogFormat};
use gpu_otel_sidecar::report::{RunAccumulator, RunReporter, SampleLogger, XidRecorder};
use gpu_otel_sidecar::rules::{Rules, XidHook, XidReport};
use gpu_otel_sidecar::sampling::{
    DeviceEvent, DeviceEventKind, Observer, SampleGroup, Sampler, SamplerSettings, SharedState,
};
use gpu_otel_sidecar::telemetry::events::Events;
use gpu_otel_sidecar::telemetry::recorder::Recorder;
use gpu_otel_sidecar::telemetry::{Telemetry, TelemetryError};
use gpu_otel_sidecar::{attribution, health, logging, process_watch};

const USAGE: &str = "\
gpu-otel-sidecar: reads NVIDIA GPUs through NVML and pushes OpenTelemetry metrics and events
over OTLP.

Usage: gpu-otel-sidecar           run the agent until SIGTERM or SIGINT
       gpu-otel-sidecar health    ask the running agent's /readyz (GPU_SIDECAR_HEALTH_ADDR);
                                  exit 0 if ready, 1 if not
       gpu-otel-sidecar webhook   serve the admission webhook that injects the sidecar into
                                  GPU pods (GPU_SIDECAR_WEBHOOK_*; installed by the Helm chart)
       gpu-otel-sidecar check-config
                                  read the settings from the environment as the agent
                                  would and print what it understood as one JSON object
                                  (resource attributes decoded); exit 0, or 2 naming the
                                  bad setting. Loads no NVML, connects nowhere.
       gpu-otel-sidecar --help | --version

Exit codes: 0 stopped cleanly; 1 could not start (OTLP exporter set-up, health port in use);
            2 a bad setting or argument (named on stderr). `health`: 0 ready, 1 not.";

/// `--help`: the usage, then every setting's name and where their defaults are written.
fn help() -> String {
    format!(
        "{USAGE}\n\nSettings are environment variables; each one's default and what it accepts are in\n\
         docs/settings.md (in the source repository, generated from the same tables as this list):\n{}",
        gpu_otel_sidecar::config::known::settings_help()
    )
}

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        None => {}
        Some("health") => return health_command(),
        Some("webhook") => return gpu_otel_sidecar::webhook::command(),
        Some("check-config") => return check_config_command(),
        Some("--help" | "-h") => {
            print!("{}", help());
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

/// `gpu-otel-sidecar check-config`: the settings as the agent understands them, as one JSON
/// object on stdout (header values never shown); exit 2 with the agent's own message for a
/// bad setting.
fn check_config_command() -> ExitCode {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu-otel-sidecar: {e}");
            return ExitCode::from(2);
        }
    };
    println!("{}", config_summary(&config));
    ExitCode::SUCCESS
}

/// The `OTEL_EXPORTER_OTLP_PROTOCOL` value of a protocol.
fn protocol(p: gpu_otel_sidecar::config::Protocol) -> &'static str {
    match p {
        gpu_otel_sidecar::config::Protocol::Grpc => "grpc",
        gpu_otel_sidecar::config::Protocol::HttpProtobuf => "http/protobuf",
    }
}

/// What `check-config` prints.
fn config_summary(config: &Config) -> serde_json::Value {
    let resource: std::collections::BTreeMap<String, String> = attribution::resource(config)
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let devices = match &config.devices {
        DeviceSelection::All => "all".to_string(),
        DeviceSelection::PodResources | DeviceSelection::Allocated(_) => {
            "pod-resources".to_string()
        }
        DeviceSelection::List(ids) => format!("{ids:?}"),
    };
    serde_json::json!({
        "resource": resource,
        "metrics_exporter": format!("{:?}", config.metrics_exporter).to_lowercase(),
        "logs_exporter": format!("{:?}", config.logs_exporter).to_lowercase(),
        "otlp": {
            "protocol": protocol(config.otlp.metrics.protocol),
            "metrics_endpoint": config.otlp.metrics.endpoint,
            "logs_protocol": protocol(config.otlp.logs.protocol),
            "logs_endpoint": config.otlp.logs.endpoint,
            "header_names": config.otlp.metrics.headers.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            "timeout_ms": config.otlp.metrics.timeout.as_millis() as u64,
            "temporality": format!("{:?}", config.otlp.temporality).to_lowercase(),
        },
        "otel_not_applied": config.otel_not_applied.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
        "export_interval_ms": config.export_interval.as_millis() as u64,
        "sample_interval_ms": config.sample_interval.as_millis() as u64,
        "devices": devices,
        "health_addr": config.health_addr.map(|a| a.to_string()),
    })
}

/// `gpu-otel-sidecar health`: prints the `/readyz` body; exit 0 when ready.
fn health_command() -> ExitCode {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu-otel-sidecar: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(addr) = config.health_addr else {
        eprintln!(
            "gpu-otel-sidecar health: the health endpoint is off (GPU_SIDECAR_HEALTH_ADDR=off)"
        );
        return ExitCode::FAILURE;
    };
    match health::probe(addr, Duration::from_secs(3)) {
        Ok((status, body)) => {
            println!("{body}");
            if status == 200 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("gpu-otel-sidecar health: {e}");
            ExitCode::FAILURE
        }
    }
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
    let mut signals = {
        let _guard = runtime.enter();
        Signals::install()
    };
    let destination = match config.metrics_exporter {
        gpu_otel_sidecar::config::ExporterKind::Otlp => format!(
            "OTLP {:?} to {} ({:?})",
            config.otlp.metrics.protocol, config.otlp.metrics.endpoint, config.otlp.temporality
        ),
        other => format!("{other:?}"),
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        metrics = %destination,
        sample_interval_ms = config.sample_interval.as_millis() as u64,
        export_interval_ms = config.export_interval.as_millis() as u64,
        "starting"
    );
    if config.sdk_disabled {
        tracing::info!("OTEL_SDK_DISABLED=true: no metrics and no events are exported");
    }
    if !config.otel_not_applied.is_empty() {
        let list = config
            .otel_not_applied
            .iter()
            .map(|(var, why)| format!("{var} ({why})"))
            .collect::<Vec<_>>()
            .join("; ");
        tracing::warn!(
            "these OpenTelemetry variables are set but do not apply to this agent, and are ignored: {list} (docs/otel-variables.md)"
        );
    }
    if config.sample_interval > config.export_interval {
        tracing::warn!(
            "GPU_SIDECAR_SAMPLE_INTERVAL ({:?}) is longer than OTEL_METRIC_EXPORT_INTERVAL ({:?}): GPU metrics are exported once per sample, less often than the export interval",
            config.sample_interval,
            config.export_interval
        );
    }
    gpu_otel_sidecar::telemetry::tls::install_crypto_provider();
    if let Err(e) = gpu_otel_sidecar::telemetry::tls::check_trust_store(&config) {
        tracing::error!("{e}");
        return ExitCode::FAILURE;
    }
    // The health endpoint first: it answers while the agent waits for the kubelet, and a
    // failure to serve it stops the agent before anything else has started.
    let shared = Arc::new(SharedState::default());
    let checks = Arc::new(health::Health::new(
        shared.clone(),
        health::Limits::from_config(&config),
    ));
    if let Some(addr) = config.health_addr {
        match health::start(&runtime, addr, checks.clone()) {
            Ok(bound) => {
                tracing::info!("health endpoint listening on http://{bound} (/healthz, /readyz)")
            }
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    runtime.spawn(health::watchdog(shared.clone(), config.watchdog_timeout));
    let mut settings = SamplerSettings::from(&config);
    match &config.devices {
        DeviceSelection::PodResources => {
            let (ns, pod) = (
                config
                    .resource_attributes
                    .get("k8s.namespace.name")
                    .cloned()
                    .unwrap_or_default(),
                config
                    .resource_attributes
                    .get("k8s.pod.name")
                    .cloned()
                    .unwrap_or_default(),
            );
            let socket = config.pod_resources_socket.clone();
            checks.set_starting(Some(format!(
                "waiting for the kubelet's pod-resources answer (GPU_SIDECAR_DEVICES=pod-resources, socket {}): which GPUs this pod holds",
                socket.display()
            )));
            let resolved = runtime.block_on(async {
                tokio::select! {
                    ids = pod_resources::wait_for_pod_gpus(&socket, &ns, &pod) => Some(ids),
                    _ = signals.recv() => None,
                }
            });
            match resolved {
                Some(ids) => settings.devices = DeviceSelection::Allocated(ids),
                None => {
                    tracing::info!("stopped before the pod's GPUs were known");
                    runtime.shutdown_background();
                    return ExitCode::SUCCESS;
                }
            }
            checks.set_starting(None);
        }
        DeviceSelection::All
            if config.sees_all_node_gpus
                && config.resource_attributes.contains_key("k8s.pod.name") =>
        {
            tracing::warn!(
                "GPU_SIDECAR_DEVICES=all with NVIDIA_VISIBLE_DEVICES=all: every GPU of the node is reported under this pod's attributes, not only this pod's GPUs. \
                 Use GPU_SIDECAR_DEVICES=pod-resources, a DRA ResourceClaim shared with the trainer, or a list of UUIDs"
            );
        }
        _ => {}
    }
    let resource = attribution::resource(&config);
    // Everything that can fail to start is started before the sampler: past this point the
    // only way out is the shutdown sequence below.
    let started = {
        let _guard = runtime.enter();
        Events::start(&config, resource.clone())
            .map_err(TelemetryError::from)
            .and_then(|e| {
                Ok((
                    Telemetry::start(&config, resource.clone(), shared.clone())?,
                    e,
                ))
            })
    };
    let (mut telemetry, events) = match started {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::FAILURE;
        }
    };
    checks.exports_started(telemetry.status.clone());
    // Subscribed before the sampler starts, so that they see every tick.
    let run_report = RunReporter::start_with(
        &shared,
        RunAccumulator::new(config.sample_interval)
            .with_price_per_gpu_hour(config.price_per_gpu_hour)
            .with_pool_params(gpu_otel_sidecar::rules::pool_params(
                config
                    .rules
                    .get(gpu_otel_sidecar::rules::RuleId::MemoryPreallocated),
            )),
    );
    let sample_log = config
        .sample_log
        .clone()
        .map(|c| SampleLogger::start(c, &shared));
    // Before the sampler, so that the rules see every tick too.
    let rules = Rules::start(
        &config.rules,
        &shared,
        events.clone(),
        &telemetry.recorded(),
    );
    // After the pipelines: the sampler reports group durations and XID/ECC events into them,
    // and each XID also to the rules and the run report.
    let observer = Arc::new(DeviceEvents {
        recorder: Recorder::new(&telemetry.recorded(), events.emitter()),
        rules: rules.xid_hook(),
        report: run_report.xid_recorder(),
    });
    let sampler = Sampler::start_observed(settings, shared.clone(), observer);

    let signal = runtime.block_on(async {
        match &config.exit_with_process {
            None => signals.recv().await,
            Some(name) => tokio::select! {
                s = signals.recv() => s,
                () = process_watch::wait_until_gone(name) => "the watched process ended",
            },
        }
    });
    tracing::info!(signal, "shutting down: final sample and export");
    let deadline = Instant::now() + config.shutdown_timeout;
    telemetry.stop_clock(config.shutdown_timeout / 4);
    // Half the bound at most for the final sample, so that a stuck driver call leaves time
    // for the final export.
    let sampler_bound = config.shutdown_timeout / 2;
    if !sampler.stop(sampler_bound) {
        tracing::warn!(
            "the NVML sampler did not finish its final sample within {sampler_bound:?} (a driver call is stuck); exporting without it"
        );
    }
    // Every sample is in: end the subscriptions, let the consumers (rules, sample log, run
    // report) drain and finish, then the run report goes out before the events and metrics
    // are flushed.
    shared.close_subscriptions();
    if !rules.stop(deadline.saturating_duration_since(Instant::now())) {
        tracing::warn!(
            "the rules did not finish judging the last samples before the shutdown bound"
        );
    }
    if let Some(log) = sample_log {
        let bound = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_secs(1));
        if !log.finish(bound) {
            tracing::warn!("the sample log is stuck writing; exiting without its last rows");
        }
    }
    let report = run_report.finish(
        deadline.saturating_duration_since(Instant::now()),
        &resource,
    );
    report.publish(&events, config.report_file.as_ref());
    // Events get half of what is left, so a slow collector cannot starve the final export
    // of the metrics.
    if !events.shutdown(deadline.saturating_duration_since(Instant::now()) / 2) {
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

/// Where the sampler's observations go: metrics and events ([`Recorder`]), and each XID also
/// to the rules (the `nvidia.gpu.alert.xid` alert) and the run report (XID count by code),
/// under the physical GPU's UUID.
struct DeviceEvents {
    recorder: Recorder,
    rules: XidHook,
    report: XidRecorder,
}

impl Observer for DeviceEvents {
    fn group_sampled(&self, group: SampleGroup, took: Duration) {
        self.recorder.group_sampled(group, took);
    }

    fn device_event(&self, event: DeviceEvent) {
        if let DeviceEventKind::Xid(code) = event.kind {
            let mig = event.device.mig.as_ref();
            let gpu_uuid = mig.map_or(&event.device.uuid, |m| &m.parent_uuid);
            self.report.record(gpu_uuid, code);
            self.rules.report(XidReport {
                hw_id: gpu_uuid.clone(),
                xid: code,
                at: Instant::now(),
                time: event.time,
                gpu_instance_id: mig.and_then(|m| m.gpu_instance_id),
                compute_instance_id: mig.and_then(|m| m.compute_instance_id),
            });
        }
        self.recorder.device_event(event);
    }
}

/// SIGTERM and SIGINT handlers, installed first thing so that a signal during start-up is
/// a clean shutdown, not the default kill.
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    /// Installs the handlers; needs a tokio runtime entered.
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        let (term, int) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        );
        if term.is_err() || int.is_err() {
            tracing::error!("cannot install signal handlers; stop with SIGKILL");
        }
        Self {
            term: term.ok(),
            int: int.ok(),
        }
    }

    /// Resolves with the name of the first signal received.
    async fn recv(&mut self) -> &'static str {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(&mut self.term) => "SIGTERM",
            () = next(&mut self.int) => "SIGINT",
        }
    }
}
