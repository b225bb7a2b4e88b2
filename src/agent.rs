//! The agent: the whole data flow in one place, started in flow order and stopped in reverse
//! under one deadline (`GPU_SIDECAR_SHUTDOWN_TIMEOUT`).
//!
//! ```text
//! probes (/healthz, /readyz) + watchdog        read the hub and the sampler's board; first
//! sampler: nvml-sampler (snapshots)            \
//!          nvml-events  (XID, ECC events)       }-> hub -> one queue per consumer, in order:
//!   export-clock   snapshots -> metrics export (OTLP, console)
//!   device-events  events    -> nvidia.gpu.xid.errors counter, XID log line, XID/ECC event
//!   rules          both      -> alerts (the XID alert included) as events + counters
//!   run-report     both      -> the run report at shutdown (XIDs by code included)
//!   sample-log     snapshots -> GPU_SIDECAR_SAMPLE_LOG
//! ```
//!
//! Where an XID goes is decided here, by who subscribes to device events: the
//! `device-events` recorder (counter, rate-limited log line, one log record per XID), the
//! rules (the `nvidia.gpu.alert.xid` alert, on the physical GPU) and the run report (count by
//! code, on the physical GPU). Each consumer is one [`Consumer`](crate::sampling::consumer::Consumer) on one
//! [`ConsumerThread`];
//! nothing else hands events around.
//!
//! Every consumer is subscribed before the sampler starts, so each sees every tick. At
//! shutdown: the export clock pauses first (the final sample then goes out once, in the final
//! export, after the rules and the run report have recorded into it), the sampler takes its
//! final sample, the subscriptions end, the consumers drain in reverse order of their start,
//! the run report is published (with the events emitted during the run, and its HTML page
//! when `GPU_SIDECAR_REPORT_HTML` is set), and the events and the metrics are flushed last.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_sdk::Resource;

use crate::attribution::node::{kubelet, NodeAttribution};
use crate::attribution::{self, pod_resources};
use crate::catalogue::resource;
use crate::config::{Config, DeviceSelection, ExporterKind};
use crate::probes;
use crate::process_watch;
use crate::report::timeline::EventTimeline;
use crate::report::{RunAccumulator, RunReporter, SampleLogger};
use crate::rules::Rules;
use crate::sampling::cadence::Timing;
use crate::sampling::consumer::ConsumerThread;
use crate::sampling::{Annotate, Hub, Sampler, SamplerBoard, SamplerSettings};
use crate::telemetry::logs::device_events::Recorder;
use crate::telemetry::logs::events::Events;
use crate::telemetry::{Telemetry, TelemetryError};

/// Why the agent could not start (exit code 1); the message names the cause.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The tokio runtime (thread `otel-io`) could not be created.
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    /// An `https://` endpoint without a usable trust store.
    #[error("{0}")]
    TrustStore(String),
    /// The probes' port could not be bound (`GPU_SIDECAR_HEALTH_ADDR`).
    #[error("{0}")]
    Probes(String),
    /// The OTLP exporter of the metrics or of the events could not be built.
    #[error("{0}")]
    Telemetry(#[from] TelemetryError),
}

/// Queue of the `device-events` subscription: XID and ECC events only, handled in
/// microseconds each; 1024 absorbs an XID storm while the thread is descheduled.
const DEVICE_EVENTS_QUEUE: usize = 1024;

/// Runs the agent until SIGTERM or SIGINT (or the end of what `GPU_SIDECAR_EXIT_WITH_CONTAINERS`
/// or `GPU_SIDECAR_EXIT_WITH_PROCESS` follows).
///
/// # Errors
/// [`StartError`] when a part of the flow cannot start; nothing is left running then.
pub fn run(config: Config) -> Result<(), StartError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otel-io")
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    let mut signals = {
        let _guard = runtime.enter();
        Signals::install()
    };
    // Every period of the flow, built once and handed to each part that runs on one.
    let timing = Timing::from_config(&config);
    log_start(&config, &timing);
    crate::telemetry::otlp::tls::install_crypto_provider();
    crate::telemetry::otlp::tls::check_trust_store(&config)
        .map_err(|e| StartError::TrustStore(e.to_string()))?;

    // The hub, and the probes that read it: they answer while the agent waits for the
    // kubelet, and a failure to serve them stops the agent before anything else has started.
    let hub = Arc::new(Hub::default());
    let board = Arc::new(SamplerBoard::default());
    let checks = Arc::new(probes::Probes::new(
        hub.clone(),
        board.clone(),
        probes::Limits::new(&timing),
    ));
    if let Some(addr) = &config.health_addr {
        let bound = probes::start(&runtime, addr, checks.clone()).map_err(StartError::Probes)?;
        tracing::info!("health endpoint listening on {bound} (/healthz, /readyz)");
    }
    runtime.spawn(probes::watchdog(board.clone(), timing.watchdog));
    let follow = match (&config.exit_with_process, config.exit_with_containers) {
        (Some(name), _) => Some(process_watch::Follow::Process(name.clone())),
        (None, true) => Some(process_watch::Follow::Containers),
        (None, false) => None,
    };
    if let Some(follow) = follow {
        let on_failure = (config.pod_restart_policy == process_watch::RestartPolicy::OnFailure)
            .then_some(config.restart_wait);
        signals.follow(
            follow,
            config.in_kubernetes,
            config.proc_root.clone(),
            on_failure,
        );
    }

    let mut settings = SamplerSettings::new(&config, timing);
    if let DeviceSelection::PodResources = config.devices {
        let Some(ids) = pod_gpus(&config, &runtime, &mut signals, &checks) else {
            tracing::info!("stopped before the pod's GPUs were known");
            runtime.shutdown_background();
            return Ok(());
        };
        settings.devices = DeviceSelection::Allocated(ids);
    } else if matches!(config.devices, DeviceSelection::All)
        && config.sees_all_node_gpus
        && config
            .resource_attributes
            .contains_key(resource::K8S_POD_NAME)
    {
        tracing::warn!(
            "GPU_SIDECAR_DEVICES=all with NVIDIA_VISIBLE_DEVICES=all: every GPU of the node is reported under this pod's attributes, not only this pod's GPUs. \
             Use GPU_SIDECAR_DEVICES=pod-resources, a DRA ResourceClaim shared with the trainer, or a list of UUIDs"
        );
    }
    let resource = attribution::resource(&config);
    // Node mode: the kubelet's allocations, asked on the runtime; the shares, added on the
    // sampler thread.
    let annotate: Option<Box<dyn Annotate>> = config.node.then(|| {
        let view = Arc::new(kubelet::KubeletView::default());
        runtime.spawn(kubelet::poll(
            config.pod_resources_socket.clone(),
            view.clone(),
        ));
        // The first answer (or failure), before the first sample, so that the first export
        // already marks shared GPUs and names pods; a kubelet that does not answer soon is
        // not waited for.
        let first = Instant::now() + kubelet::FIRST_ANSWER_WAIT;
        while !view.asked() && Instant::now() < first {
            std::thread::sleep(Duration::from_millis(10));
        }
        Box::new(NodeAttribution::new(&config.proc_root, view)) as Box<dyn Annotate>
    });

    // Everything that can fail to start is started before the sampler: past this point the
    // only way out is the shutdown sequence. Every event emitted is also kept for the report.
    let timeline = EventTimeline::new();
    let (events, telemetry) = {
        let _guard = runtime.enter();
        let telemetry = Telemetry::start(
            &config,
            &timing,
            resource.clone(),
            hub.clone(),
            board.clone(),
        )?;
        let events = Events::start(&config, resource.clone(), &telemetry.recorded())?
            .with_tap(timeline.tap());
        (events, telemetry)
    };
    checks.exports_started(telemetry.status.clone());
    let flow = Flow::start(
        &config, &hub, &board, settings, events, telemetry, timeline, annotate,
    );

    let signal = runtime.block_on(signals.recv());
    tracing::info!(
        signal,
        "shutting down: final sample and export (a second SIGINT or SIGTERM stops at once)"
    );
    let first_signal_at = std::time::Instant::now();
    let steps = StopSteps::new(config.sample_log.is_some());
    runtime.spawn(second_signal(signals, steps.clone(), first_signal_at));
    flow.stop(&config, &hub, &board, &resource, &steps);
    runtime.shutdown_background();
    tracing::info!("stopped");
    Ok(())
}

/// A signal within this time of the first is the same stop request delivered twice (GNU
/// `timeout` sends its signal to the child and then to its process group), not a second one:
/// a person's second Ctrl-C comes later.
const SAME_STOP_REQUEST: std::time::Duration = std::time::Duration::from_millis(250);

/// What the stop has still to do, in its order: a second signal names what it skips.
struct StopSteps(std::sync::Mutex<Vec<&'static str>>);

impl StopSteps {
    const FINAL_SAMPLE: &'static str = "the final sample";
    const NVML_SHUTDOWN: &'static str = "NVML's shutdown (nvmlShutdown)";
    const SAMPLE_LOG: &'static str = "the sample log's last rows";
    const RULES: &'static str = "the alert rules' judgement of the last samples";
    const DEVICE_EVENTS: &'static str = "the XID and ECC events still being recorded";
    const RUN_REPORT: &'static str = "the run report";
    const EVENTS: &'static str = "the events still queued for the collector";
    const FINAL_EXPORT: &'static str = "the final metrics export";

    fn new(sample_log: bool) -> Arc<Self> {
        let mut steps = vec![Self::FINAL_SAMPLE, Self::NVML_SHUTDOWN];
        if sample_log {
            steps.push(Self::SAMPLE_LOG);
        }
        steps.extend([
            Self::RULES,
            Self::DEVICE_EVENTS,
            Self::RUN_REPORT,
            Self::EVENTS,
            Self::FINAL_EXPORT,
        ]);
        Arc::new(Self(std::sync::Mutex::new(steps)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<&'static str>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `step` is done (or given up on, with its own warning).
    fn done(&self, step: &'static str) {
        self.lock().retain(|s| *s != step);
    }

    /// What is left, in words: `a, b and c`.
    fn left(&self) -> String {
        let steps = self.lock();
        match steps.as_slice() {
            [] => String::new(),
            [one] => (*one).to_string(),
            [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
        }
    }
}

/// A second SIGINT or SIGTERM during the stop: one line saying what is skipped, then exit 0
/// at once (the user asked twice; nothing waits on the collector or on NVML any longer).
async fn second_signal(mut signals: Signals, steps: Arc<StopSteps>, first_at: std::time::Instant) {
    // Signals only: the trainer's end (already the cause, or not) is no reason to hurry.
    let signal = loop {
        let signal = Signals::signal(&mut signals.term, &mut signals.int).await;
        if first_at.elapsed() >= SAME_STOP_REQUEST {
            break signal;
        }
        // GNU `timeout` signals its child, then its whole process group (the child again);
        // a wrapper forwarding a terminal's Ctrl-C can do the same: one request, not two.
        tracing::info!(
            "{signal} again within {} of the first: the same stop request (as a process \
             group's signal arrives twice), the stop goes on",
            humantime::format_duration(SAME_STOP_REQUEST)
        );
    };
    let left = steps.left();
    if left.is_empty() {
        tracing::warn!("{signal} again: stopping at once; nothing was left to do (exit 0)");
    } else {
        tracing::warn!("{signal} again: stopping at once, without {left} (exit 0)");
    }
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit(2) ends the process without running exit handlers: none of the loaded
    // libraries' (NVML's among them) may run while another thread is inside one of its calls.
    unsafe { libc::_exit(0) }
}

/// The running flow, from the export clock to the sampler, in start order.
struct Flow {
    events: Events,
    timeline: Arc<EventTimeline>,
    telemetry: Telemetry,
    device_events: ConsumerThread,
    rules: Rules,
    run_report: RunReporter,
    sample_log: Option<SampleLogger>,
    sampler: Sampler,
}

impl Flow {
    /// Starts the consumers (the export clock already runs in `telemetry`), then the sampler.
    #[allow(clippy::too_many_arguments)]
    fn start(
        config: &Config,
        hub: &Arc<Hub>,
        board: &Arc<SamplerBoard>,
        settings: SamplerSettings,
        events: Events,
        telemetry: Telemetry,
        timeline: Arc<EventTimeline>,
        annotate: Option<Box<dyn Annotate>>,
    ) -> Self {
        // The one `Timing` the agent built, handed to each consumer that runs on a period.
        let timing = &{ settings.timing };
        let device_events = ConsumerThread::start(
            "device-events",
            hub,
            DEVICE_EVENTS_QUEUE,
            Recorder::new(&telemetry.recorded(), events.emitter()),
        );
        let rules = Rules::start(&config.rules, hub, events.clone(), &telemetry.recorded());
        let acc = RunAccumulator::new(timing)
            .with_price_per_gpu_hour(config.price_per_gpu_hour)
            .with_pool_params(crate::rules::pool_params(
                config.rules.get(crate::rules::RuleId::MemoryPreallocated),
            ));
        let run_report = RunReporter::start_with(
            hub,
            match config.report_html {
                Some(_) => acc.with_curves(),
                None => acc,
            },
        );
        let sample_log = config
            .sample_log
            .clone()
            .map(|c| SampleLogger::start(c, timing, hub));
        let sampler = Sampler::start(settings, hub.clone(), board.clone(), annotate);
        Self {
            events,
            timeline,
            telemetry,
            device_events,
            rules,
            run_report,
            sample_log,
            sampler,
        }
    }

    /// Stops everything in reverse under one deadline, `GPU_SIDECAR_SHUTDOWN_TIMEOUT` from
    /// now; the report goes out before the events and the metrics are flushed. Each step
    /// done is struck off `steps`.
    fn stop(
        self,
        config: &Config,
        hub: &Hub,
        board: &SamplerBoard,
        resource: &Resource,
        steps: &StopSteps,
    ) {
        let Flow {
            events,
            timeline,
            telemetry,
            device_events,
            rules,
            run_report,
            sample_log,
            sampler,
        } = self;
        let deadline = Instant::now() + config.shutdown_timeout;
        let left = || deadline.saturating_duration_since(Instant::now());
        telemetry.pause_exports(config.shutdown_timeout / 4);
        // Half the bound at most for the final sample and NVML's shutdown, so that a stuck
        // driver call leaves time for the final export.
        let sampler_bound = config.shutdown_timeout / 2;
        let sampled = sampler.stop(sampler_bound);
        if sampled {
            steps.done(StopSteps::FINAL_SAMPLE);
        } else {
            tracing::warn!(
                "the NVML sampler did not finish its final sample within {} (a driver call is stuck); exporting without it, and NVML is not shut down",
                humantime::format_duration(sampler_bound)
            );
        }
        if sampled && board.event_watchers_running() == 0 {
            steps.done(StopSteps::NVML_SHUTDOWN);
        }
        // Every sample is in: end the subscriptions; each consumer drains and finishes.
        hub.close_subscriptions();
        if let Some(log) = sample_log {
            if !log.finish(left().min(Duration::from_secs(1))) {
                tracing::warn!("the sample log is stuck writing; exiting without its last rows");
            }
            steps.done(StopSteps::SAMPLE_LOG);
        }
        let (mut report, curves) = run_report.finish(left(), resource);
        if !rules.stop(left()) {
            tracing::warn!(
                "the rules did not finish judging the last samples before the shutdown bound"
            );
        }
        steps.done(StopSteps::RULES);
        if !device_events.stop(left()) {
            tracing::warn!("device events were still being recorded at the shutdown bound");
        }
        steps.done(StopSteps::DEVICE_EVENTS);
        (report.events, report.events_dropped) = timeline.take();
        report.events_undelivered = events.dropped();
        report.publish(&events, config.report_file.as_ref());
        if let Some(path) = &config.report_html {
            crate::report::page::write_report(path, &report, curves.as_ref());
        }
        steps.done(StopSteps::RUN_REPORT);
        // Events get half of what is left, so a slow collector cannot starve the final
        // export of the metrics.
        if !events.shutdown(left() / 2) {
            tracing::warn!("queued events could not be exported before the shutdown bound");
        }
        steps.done(StopSteps::EVENTS);
        if !telemetry.shutdown(left()) {
            tracing::warn!(
                "the final export did not finish within GPU_SIDECAR_SHUTDOWN_TIMEOUT ({}); exiting without it",
                humantime::format_duration(config.shutdown_timeout)
            );
        }
        steps.done(StopSteps::FINAL_EXPORT);
        // The event watcher of the last NVML session shuts NVML down when its wait returns
        // (within EVENT_WAIT_MAX, usually before the sampler's bound ran out): it is given
        // what is left of the bound.
        if !sampled {
            return;
        }
        while board.event_watchers_running() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if board.event_watchers_running() == 0 {
            steps.done(StopSteps::NVML_SHUTDOWN);
        } else {
            tracing::warn!(
                "NVML is not shut down: the XID/ECC event watcher is inside a driver call that has not returned by the shutdown bound"
            );
        }
    }
}

/// The start-up log lines: what is exported where, and settings that do not apply.
fn log_start(config: &Config, timing: &Timing) {
    let destination = match config.metrics_exporter {
        ExporterKind::Otlp => format!(
            "OTLP {} to {} ({} temporality)",
            config.otlp.metrics.protocol.as_str(),
            config.otlp.metrics.endpoint,
            config.otlp.temporality.as_str()
        ),
        other => other.as_str().to_string(),
    };
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        mode = if config.node { "node" } else { "sidecar" },
        metrics = %destination,
        sample_interval_ms = timing.sample_interval.as_millis() as u64,
        export_interval_ms = timing.export_interval.as_millis() as u64,
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
    if timing.sample_interval > timing.export_interval {
        tracing::warn!(
            "GPU_SIDECAR_SAMPLE_INTERVAL ({}) is longer than OTEL_METRIC_EXPORT_INTERVAL ({}): GPU metrics are exported once per sample, less often than the export interval",
            humantime::format_duration(timing.sample_interval),
            humantime::format_duration(timing.export_interval)
        );
    }
}

/// `GPU_SIDECAR_DEVICES=pod-resources`: waits for the kubelet to say which GPUs this pod
/// holds (not ready meanwhile); `None` when a signal came first.
fn pod_gpus(
    config: &Config,
    runtime: &tokio::runtime::Runtime,
    signals: &mut Signals,
    checks: &probes::Probes,
) -> Option<Vec<crate::config::AllocatedDevice>> {
    let attribute = |key: &str| {
        config
            .resource_attributes
            .get(key)
            .cloned()
            .unwrap_or_default()
    };
    let (ns, pod) = (
        attribute(resource::K8S_NAMESPACE_NAME),
        attribute(resource::K8S_POD_NAME),
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
    if resolved.is_some() {
        checks.set_starting(None);
    }
    resolved
}

/// SIGTERM and SIGINT handlers, installed first thing so that a signal during start-up is
/// a clean shutdown, not the default kill; and the end of the trainer a classic sidecar
/// follows (`GPU_SIDECAR_EXIT_WITH_CONTAINERS`, `_EXIT_WITH_PROCESS`), watched from the start
/// too, so that a sidecar still waiting for the kubelet also ends with it.
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
    trainer: Option<tokio::sync::oneshot::Receiver<process_watch::End>>,
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
            trainer: None,
        }
    }

    /// Also ends on `follow`'s end (see [`process_watch`]).
    fn follow(
        &mut self,
        follow: process_watch::Follow,
        in_kubernetes: bool,
        proc_root: std::path::PathBuf,
        on_failure: Option<process_watch::RestartWait>,
    ) {
        self.trainer = Some(process_watch::start(
            follow,
            in_kubernetes,
            proc_root,
            on_failure,
        ));
    }

    /// Resolves with the name of the first signal received, or why the trainer's end ends
    /// the agent.
    async fn recv(&mut self) -> &'static str {
        async fn trainer(
            rx: &mut Option<tokio::sync::oneshot::Receiver<process_watch::End>>,
        ) -> &'static str {
            match rx.as_mut() {
                Some(r) => match r.await {
                    Ok(end) => end.as_str(),
                    // The watch thread is gone without a word: nothing more to wait for.
                    Err(_) => std::future::pending().await,
                },
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            s = Self::signal(&mut self.term, &mut self.int) => s,
            why = trainer(&mut self.trainer) => why,
        }
    }

    async fn signal(
        term: &mut Option<tokio::signal::unix::Signal>,
        int: &mut Option<tokio::signal::unix::Signal>,
    ) -> &'static str {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(term) => "SIGTERM",
            () = next(int) => "SIGINT",
        }
    }
}
