//! Telemetry export, by signal: the metrics ([`metrics`]: the agent builds each export
//! itself, as OTLP messages ([`metrics::encode`]), straight from the snapshot of an export
//! tick, on the thread `export-clock` ([`metrics::export_clock`])) and the events, OTLP log
//! records held in a bounded queue until they are delivered ([`logs`]); both signals go
//! through one OTLP connection setup ([`otlp`]: endpoint, headers, TLS, gzip, retries
//! within a bound) and report how their exports fare ([`export_status`]).
//!
//! Why not the SDK's metrics pipeline: there a point's time is the collection's, and a
//! cumulative series' start time is one per instrument, taken when the SDK created it. The
//! agent needs per-series start times (a counter counts from its first reading, a GPU reset
//! starts its series again, a wall-clock step starts every series again) and points stamped
//! with the time NVML answered; OTLP carries both per data point.

pub mod export_status;
pub mod logs;
pub mod metrics;
pub mod otlp;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry_sdk::Resource;

use crate::config::{Config, ExporterKind};
use crate::sampling::cadence::Timing;
use crate::sampling::{Hub, SamplerBoard};
use export_status::ExportStatus;
use metrics::encode;
use metrics::export_clock;
use metrics::recorded::Recorded;

/// Instrumentation scope name of every metric the agent exports.
pub const SCOPE: &str = "gpu-otel-sidecar";

/// Errors while setting telemetry up, naming the signal whose exporter failed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The metrics' OTLP exporter could not be built (endpoint, TLS).
    #[error("cannot build the OTLP metrics exporter: {0}")]
    Exporter(String),
    /// The events' OTLP logs transport could not be built (endpoint, TLS).
    #[error("cannot build the OTLP logs exporter (events): {0}")]
    LogsExporter(String),
}

/// The running metrics pipeline.
pub struct Telemetry {
    exporter: Option<Arc<export_clock::Exporter>>,
    clock: Option<export_clock::ExportClock>,
    /// Outcome of exports (for health).
    pub status: Arc<ExportStatus>,
    recorded: Arc<Recorded>,
    max_age: Duration,
}

impl Telemetry {
    /// Builds the pipeline and starts the export clock. With `OTEL_METRICS_EXPORTER=none`
    /// nothing is exported (what is recorded is kept, bounded, and dropped). Must be called
    /// with a tokio runtime entered (gRPC).
    ///
    /// # Errors
    /// [`TelemetryError::Exporter`] if the OTLP transport cannot be built.
    pub fn start(
        config: &Config,
        timing: &Timing,
        resource: Resource,
        hub: Arc<Hub>,
        board: Arc<SamplerBoard>,
    ) -> Result<Self, TelemetryError> {
        let status = Arc::new(ExportStatus::default());
        let recorded = Recorded::new();
        let max_age = timing.max_sample_age;
        let (transport, target) = match config.metrics_exporter {
            ExporterKind::None => {
                return Ok(Self {
                    exporter: None,
                    clock: None,
                    status,
                    recorded,
                    max_age,
                })
            }
            ExporterKind::Console => (otlp::Transport::Console, "stdout".to_string()),
            ExporterKind::Otlp => (
                otlp::Transport::otlp(&config.otlp.metrics).map_err(TelemetryError::Exporter)?,
                config.otlp.metrics.endpoint.clone(),
            ),
        };
        let encoder = encode::Encoder::new(
            &resource,
            config.otlp.temporality,
            timing.series_expiry,
            SystemTime::now(),
        )
        .with_detail(config.metrics_detail);
        let exporter = Arc::new(export_clock::Exporter {
            encoder: Mutex::new(encoder),
            transport,
            runtime: tokio::runtime::Handle::current(),
            recorded: recorded.clone(),
            hub: hub.clone(),
            board,
            status: status.clone(),
            target,
            bound: timing.export_bound,
            last_seq: AtomicU64::new(0),
            paused: std::sync::atomic::AtomicBool::new(false),
            in_flight: Arc::new(tokio::sync::Semaphore::new(1)),
        });
        let clock = export_clock::ExportClock::start(
            exporter.clone(),
            &hub,
            timing.export_interval,
            timing.export_idle,
            max_age,
            config.metrics_detail,
        );
        Ok(Self {
            exporter: Some(exporter),
            clock: Some(clock),
            status,
            recorded,
            max_age,
        })
    }

    /// Pauses the export clock (waiting at most `timeout` for an export in flight), so that
    /// the final sample is exported once, by [`Telemetry::shutdown`]; the clock still
    /// records the group durations of the snapshots that come until then.
    pub fn pause_exports(&self, timeout: Duration) {
        if let Some(exporter) = &self.exporter {
            exporter.pause(timeout);
        }
    }

    /// Where the metrics recorded as things happen go (the rules' `nvidia.gpu.alerts`, XIDs,
    /// sample durations); kept but never exported when `OTEL_METRICS_EXPORTER=none`.
    pub fn recorded(&self) -> Arc<Recorded> {
        self.recorded.clone()
    }

    /// The final export (the final sample, if it came in time), bounded by `timeout`. Runs
    /// on a plain thread: the export blocks on the network.
    /// Returns `false` if the bound was hit (the export is then abandoned).
    pub fn shutdown(mut self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        if let (Some(clock), Some(exporter)) = (self.clock.take(), &self.exporter) {
            clock.stop(timeout, exporter);
        }
        let Some(exporter) = self.exporter else {
            return true;
        };
        let timeout = deadline.saturating_duration_since(std::time::Instant::now());
        let max_age = self.max_age;
        let bound = exporter.bound.min(timeout);
        run_bounded("otel-shutdown", timeout, move || {
            exporter.export_last(max_age, bound);
        })
    }
}

/// Runs `f` on a plain thread named `name` and waits at most `timeout` for it: final exports
/// and SDK shutdowns block on the network, and from an async worker they can hang with tonic.
/// Returns `false` if the bound was hit (the thread is then left to finish or die with the
/// process).
pub(crate) fn run_bounded(
    name: &str,
    timeout: Duration,
    f: impl FnOnce() + Send + 'static,
) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            f();
            let _ = tx.send(());
        });
    spawned.is_ok() && rx.recv_timeout(timeout).is_ok()
}
