//! The outcome of the exports of each signal, metrics and events (logs) alike
//! ([`ExportStatus`]: the probes read the metrics', failures of both are logged at a bounded
//! rate, each naming its signal).

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// What the last exports of one signal did; read by health checks and logs.
#[derive(Debug)]
pub struct ExportStatus {
    state: Mutex<ExportState>,
    /// The signal, in log lines: `metrics` or `events`.
    signal: &'static str,
    /// What a failure means for the data, in log lines.
    on_failure: &'static str,
}

impl Default for ExportStatus {
    /// The metrics' status.
    fn default() -> Self {
        Self::new(
            "metrics",
            "the data of this export is dropped (cumulative counters stay continuous), retrying at the next interval",
        )
    }
}

#[derive(Debug, Default, Clone)]
struct ExportState {
    last_success: Option<(Instant, SystemTime)>,
    last_failure: Option<Instant>,
    last_attempt: Option<Instant>,
    consecutive_failures: u64,
    total_failures: u64,
    total_exports: u64,
    last_logged_failure: Option<Instant>,
    /// Failures since the last failure line.
    unlogged_failures: u64,
    /// The current run of failures was logged (so its end is too).
    run_logged: bool,
    /// What the last logged failure said happened to the data.
    logged_fate: Option<String>,
}

/// Failure lines are at most one per this period, whatever the collector does (down for
/// hours, or flapping every few seconds): the first failure is logged, then the next one
/// due after this period, with the count of those in between. The end of a logged run of
/// failures is logged once ("works again"). A failure whose data meets another fate than the
/// last one logged (held and sent again, then refused for good and dropped) is logged at
/// once: the log never leaves the last word to a fate that no longer holds.
pub const FAILURE_LOG_PERIOD: Duration = Duration::from_secs(60);

impl ExportStatus {
    /// A fresh status for `signal` (`metrics`, `events`), as log lines name it, where a
    /// failed export's line says `on_failure` (what happens to the data).
    pub fn new(signal: &'static str, on_failure: &'static str) -> Self {
        Self {
            state: Mutex::new(ExportState::default()),
            signal,
            on_failure,
        }
    }

    /// Instant and wall-clock time of the last successful export.
    pub fn last_success(&self) -> Option<(Instant, SystemTime)> {
        self.lock().last_success
    }

    /// Failed exports in a row (0 after a success).
    pub fn consecutive_failures(&self) -> u64 {
        self.lock().consecutive_failures
    }

    /// Failed exports since start.
    pub fn total_failures(&self) -> u64 {
        self.lock().total_failures
    }

    /// Exports tried since start.
    pub fn total_exports(&self) -> u64 {
        self.lock().total_exports
    }

    /// When the last export finished (successfully or not): the export loop is turning.
    pub fn last_attempt(&self) -> Option<Instant> {
        self.lock().last_attempt
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ExportState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one export's outcome and logs at a bounded rate (see [`FAILURE_LOG_PERIOD`]);
    /// a failure's line says the signal's fate for its data (given at [`ExportStatus::new`]).
    pub fn record<E: std::fmt::Display>(&self, result: &Result<(), E>, target: &str) {
        self.record_with(result, target, self.on_failure, None);
    }

    /// As [`ExportStatus::record`], for a failure whose data met `fate` instead (one
    /// sentence: what happened to it), `dropped` items of it dropped. Logged at once when
    /// `fate` is not what the last failure line said; at the bounded rate otherwise.
    pub fn record_with<E: std::fmt::Display>(
        &self,
        result: &Result<(), E>,
        target: &str,
        fate: &str,
        dropped: Option<usize>,
    ) {
        let mut s = self.lock();
        s.total_exports += 1;
        let now = Instant::now();
        s.last_attempt = Some(now);
        match result {
            Ok(()) => {
                if s.consecutive_failures > 0 && s.run_logged {
                    tracing::info!(
                        target_endpoint = target,
                        failed_exports = s.consecutive_failures,
                        "{} export works again",
                        self.signal
                    );
                }
                s.run_logged = false;
                s.consecutive_failures = 0;
                s.last_success = Some((now, SystemTime::now()));
            }
            Err(e) => {
                s.consecutive_failures += 1;
                s.total_failures += 1;
                s.last_failure = Some(now);
                let due = s
                    .last_logged_failure
                    .is_none_or(|t| now.duration_since(t) >= FAILURE_LOG_PERIOD)
                    || s.logged_fate.as_deref() != Some(fate);
                if due {
                    let not_logged = std::mem::take(&mut s.unlogged_failures);
                    s.last_logged_failure = Some(now);
                    s.run_logged = true;
                    s.logged_fate = Some(fate.to_string());
                    let period = FAILURE_LOG_PERIOD.as_secs();
                    match dropped {
                        None => tracing::warn!(
                            target_endpoint = target,
                            failed_in_a_row = s.consecutive_failures,
                            failed_since_last_report = not_logged,
                            "{} export failed: {e}; {fate}; next report of this in {period}s at most",
                            self.signal,
                        ),
                        Some(n) => tracing::error!(
                            target_endpoint = target,
                            failed_in_a_row = s.consecutive_failures,
                            failed_since_last_report = not_logged,
                            dropped = n,
                            "{} export failed: {e}; {fate}; next report of this in {period}s at most",
                            self.signal,
                        ),
                    }
                } else {
                    s.unlogged_failures += 1;
                }
            }
        }
    }
}
