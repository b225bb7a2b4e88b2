//! Kubernetes probes: `/healthz` (alive: the loops turn) and `/readyz` (ready: started, NVML up, a fresh
//! sample, events watched, exports succeeding), served over HTTP on `GPU_SIDECAR_HEALTH_ADDR`
//! (default `0.0.0.0:13134`, or a Unix socket: `unix:<path>`) with axum on the agent's tokio
//! runtime from the first moments of the start (before the kubelet is asked for the pod's
//! GPUs); plus the watchdog that logs (once) and counts an NVML thread stuck in a driver
//! call, and [`probe`], the client behind `gpu-otel-sidecar health` (a Docker `HEALTHCHECK`
//! without curl, and the `exec` probes of a `hostNetwork` pod's sidecar).
//!
//! Both endpoints answer `200` when every check passes and `503` otherwise, with a JSON body
//! naming each check, whether it passed and why:
//!
//! ```json
//! {"status": "not ready",
//!  "checks": {
//!    "nvml":     {"ok": false, "detail": "Failed to initialize NVML: Unknown Error (...)"},
//!    "sample":   {"ok": false, "detail": "no sample yet", "max_age_s": 10.0, "ticks": 0},
//!    "watchdog": {"ok": true,  "detail": "waiting for the next tick", "bound_s": 15.0},
//!    "export":   {"ok": true,  "detail": "no export due yet", "bound_s": 40.0}}}
//! ```
//!
//! Checks (the bounds are derived from the settings):
//! - `startup` (ready): the agent is not waiting on a start-up step (the kubelet's
//!   pod-resources answer with `GPU_SIDECAR_DEVICES=pod-resources`).
//! - `nvml` (ready): NVML initialized ([`SamplerBoard::status`]); else the cause and fix.
//! - `sample` (ready): the latest snapshot is at most two sample intervals old (at least
//!   1 s), the same bound beyond which nothing is exported. Lost GPUs are listed, and do not
//!   make the agent unready (they are reported as `hw.status{hw.state=failed}`).
//! - `watchdog` (ready and alive): the sampler thread has not been inside one NVML step
//!   (init, listing, tick, shutdown) longer than `GPU_SIDECAR_WATCHDOG_TIMEOUT`.
//! - `events` (ready): the XID/ECC event watcher is not inside one NVML call
//!   (`nvmlEventSetWait_v2`) longer than its own timeout plus `GPU_SIDECAR_WATCHDOG_TIMEOUT`,
//!   and is running when there is an NVML session with GPUs to watch. Not a liveness
//!   check: samples and exports go on, and a restart cannot free a driver call.
//! - `export` (ready): with `OTEL_METRICS_EXPORTER=otlp`, the last successful export is at
//!   most three export intervals plus the export bound old (counted from the export
//!   pipeline's start before the first); the bound is the smaller of the OTLP timeout and
//!   `OTEL_METRIC_EXPORT_TIMEOUT`.
//! - `export_loop` (alive): an export finished, successfully or not, within two export
//!   intervals plus two export bounds plus 5 s (the `export-clock` thread is turning).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::sampling::cadence::Timing;
use crate::sampling::{
    Activity, DeviceState, EventWatcherState, EventWatcherStatus, Hub, NvmlStatus, SamplerBoard,
    WatcherCall,
};
use crate::telemetry::export_status::ExportStatus;

/// The bounds the checks apply, from the agent's [`Timing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Oldest acceptable sample: [`Timing::max_sample_age`].
    pub max_sample_age: Duration,
    /// Longest acceptable NVML step, `GPU_SIDECAR_WATCHDOG_TIMEOUT`.
    pub watchdog: Duration,
    /// Oldest acceptable successful export (`None`: metrics are not sent over OTLP):
    /// [`Timing::export_success_max_age`].
    pub export_success: Option<Duration>,
    /// Longest acceptable time without any finished export (`None`: no exporter):
    /// [`Timing::export_loop_max_gap`].
    pub export_loop: Option<Duration>,
}

impl Limits {
    /// The bounds on `timing`'s periods.
    pub fn new(timing: &Timing) -> Self {
        Self {
            max_sample_age: timing.max_sample_age,
            watchdog: timing.watchdog,
            export_success: timing.export_success_max_age,
            export_loop: timing.export_loop_max_gap,
        }
    }
}

/// What the checks look at, taken at one instant (see [`Probes::inputs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Inputs {
    /// The start-up step the agent is waiting on, if any (e.g. the kubelet's answer).
    pub starting: Option<String>,
    /// NVML's state.
    pub nvml: NvmlStatus,
    /// Age of the latest snapshot, if any.
    pub sample_age: Option<Duration>,
    /// Ticks completed since start.
    pub ticks: u64,
    /// Duration of the last completed tick.
    pub last_tick: Option<Duration>,
    /// UUIDs of the GPUs reported lost in the latest snapshot.
    pub lost_gpus: Vec<String>,
    /// The NVML step the sampler is inside, and for how long.
    pub busy: Option<(Activity, Duration)>,
    /// The event watcher: its state and the NVML call it is inside.
    pub events: EventWatcherStatus,
    /// Time since the export pipeline started (zero before it has).
    pub uptime: Duration,
    /// Age of the last successful export.
    pub last_export_success: Option<Duration>,
    /// Age of the last finished export (success or failure).
    pub last_export_attempt: Option<Duration>,
    /// Failed exports in a row.
    pub consecutive_export_failures: u64,
    /// Failed exports since start.
    pub export_failures: u64,
}

/// The outcome of one endpoint: whether all its checks passed, and the JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Every check passed.
    pub ok: bool,
    /// `{"status": ..., "checks": {name: {"ok": bool, "detail": str, ...}}}`.
    pub body: Value,
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

fn check(ok: bool, detail: String, extra: Value) -> (bool, Value) {
    let mut map = Map::new();
    map.insert("ok".into(), ok.into());
    map.insert("detail".into(), detail.into());
    if let Value::Object(extra) = extra {
        map.extend(extra);
    }
    (ok, Value::Object(map))
}

fn nvml_check(i: &Inputs) -> (bool, Value) {
    match &i.nvml {
        NvmlStatus::Up { devices } => check(
            true,
            format!("NVML up, {devices} GPU(s) sampled"),
            json!({ "gpus": devices }),
        ),
        NvmlStatus::Down(down) => check(false, down.explain(), json!({})),
    }
}

fn sample_check(i: &Inputs, l: &Limits) -> (bool, Value) {
    let extra = json!({
        "age_s": i.sample_age.map(secs),
        "max_age_s": secs(l.max_sample_age),
        "ticks": i.ticks,
        "last_tick_duration_ms": i.last_tick.map(|d| (d.as_secs_f64() * 1e6).round() / 1e3),
        "lost_gpus": i.lost_gpus,
    });
    match i.sample_age {
        None => check(false, "no sample yet".into(), extra),
        Some(age) if age > l.max_sample_age => check(
            false,
            format!(
                "the last sample is {:.1} s old (bound {:.1} s): it is not exported",
                age.as_secs_f64(),
                l.max_sample_age.as_secs_f64()
            ),
            extra,
        ),
        Some(age) => {
            let mut detail = format!("last sample {:.3} s ago", age.as_secs_f64());
            if !i.lost_gpus.is_empty() {
                detail.push_str(&format!(
                    "; {} GPU(s) lost, reported as hw.status failed",
                    i.lost_gpus.len()
                ));
            }
            check(true, detail, extra)
        }
    }
}

fn watchdog_check(i: &Inputs, l: &Limits) -> (bool, Value) {
    let bound = json!({ "bound_s": secs(l.watchdog) });
    match i.busy {
        None => check(true, "waiting for the next tick".into(), bound),
        Some((activity, d)) => {
            let extra = json!({
                "busy": activity.as_str(),
                "busy_s": secs(d),
                "bound_s": secs(l.watchdog),
            });
            if d > l.watchdog {
                check(
                    false,
                    format!(
                        "the NVML sampler has been inside {} for {:.1} s (bound {:.1} s): a driver call does not return",
                        activity.as_str(),
                        d.as_secs_f64(),
                        l.watchdog.as_secs_f64()
                    ),
                    extra,
                )
            } else {
                check(true, format!("inside {}", activity.as_str()), extra)
            }
        }
    }
}

fn startup_check(i: &Inputs) -> (bool, Value) {
    match &i.starting {
        Some(what) => check(false, what.clone(), json!({})),
        None => check(true, "started".into(), json!({})),
    }
}

/// Whether the watcher's call has run past its own timeout plus the watchdog bound.
fn watcher_stuck(c: &WatcherCall, bound: Duration) -> bool {
    c.busy_for > c.allowed + bound
}

fn events_check(i: &Inputs, l: &Limits) -> (bool, Value) {
    let earlier = i.events.earlier_still_running;
    let mut extra = json!({ "bound_s": secs(l.watchdog), "earlier_still_running": earlier });
    let left_behind = if earlier > 0 {
        format!(
            "; {earlier} watcher(s) of earlier NVML sessions still inside a driver call, left behind"
        )
    } else {
        String::new()
    };
    match &i.events.state {
        EventWatcherState::NotRunning => check(
            true,
            format!("no event watcher (no NVML session, or no GPU to watch){left_behind}"),
            extra,
        ),
        EventWatcherState::Ended => check(
            true,
            format!("no selected GPU can report XID or ECC events in this NVML session (see the log){left_behind}"),
            extra,
        ),
        EventWatcherState::Refused => check(
            false,
            format!("XID and ECC events are not watched: {earlier} event watchers of earlier NVML sessions are still inside a driver call that does not return; a new one starts when one returns"),
            extra,
        ),
        EventWatcherState::Running(None) => {
            check(true, format!("watching XID and ECC events{left_behind}"), extra)
        }
        EventWatcherState::Running(Some(c)) => {
            if let Value::Object(m) = &mut extra {
                m.insert("busy".into(), c.call.into());
                m.insert("busy_s".into(), secs(c.busy_for).into());
                m.insert("timeout_s".into(), secs(c.allowed).into());
            }
            if watcher_stuck(c, l.watchdog) {
                check(
                    false,
                    format!(
                        "the event watcher has been inside {} for {:.1} s (its own timeout {:.1} s, bound {:.1} s more): a driver call does not return; XID and ECC events are seen only once it does",
                        c.call,
                        c.busy_for.as_secs_f64(),
                        c.allowed.as_secs_f64(),
                        l.watchdog.as_secs_f64()
                    ),
                    extra,
                )
            } else {
                check(
                    true,
                    format!("watching XID and ECC events (inside {}){left_behind}", c.call),
                    extra,
                )
            }
        }
    }
}

fn export_check(i: &Inputs, l: &Limits) -> (bool, Value) {
    let Some(bound) = l.export_success else {
        return check(true, "metrics are not sent over OTLP".into(), json!({}));
    };
    let extra = json!({
        "last_success_age_s": i.last_export_success.map(secs),
        "bound_s": secs(bound),
        "consecutive_failures": i.consecutive_export_failures,
        "failures": i.export_failures,
    });
    match i.last_export_success {
        Some(age) if age <= bound => check(
            true,
            format!("last successful export {:.1} s ago", age.as_secs_f64()),
            extra,
        ),
        None if i.uptime <= bound => {
            let detail = if i.export_failures == 0 {
                "no export due yet".to_string()
            } else {
                format!(
                    "no successful export yet ({} failed); not ready if none succeeds within {:.1} s of start",
                    i.export_failures,
                    bound.as_secs_f64()
                )
            };
            check(true, detail, extra)
        }
        Some(age) => check(
            false,
            format!(
                "no successful export for {:.1} s (bound {:.1} s; {} failed in a row)",
                age.as_secs_f64(),
                bound.as_secs_f64(),
                i.consecutive_export_failures
            ),
            extra,
        ),
        None => check(
            false,
            format!(
                "no successful export since start {:.1} s ago ({} failed)",
                i.uptime.as_secs_f64(),
                i.export_failures
            ),
            extra,
        ),
    }
}

fn export_loop_check(i: &Inputs, l: &Limits) -> (bool, Value) {
    let Some(bound) = l.export_loop else {
        return check(true, "no metrics exporter".into(), json!({}));
    };
    let age = i.last_export_attempt.unwrap_or(i.uptime);
    let extra =
        json!({ "last_export_age_s": i.last_export_attempt.map(secs), "bound_s": secs(bound) });
    if age <= bound {
        check(true, "exports are turning".into(), extra)
    } else {
        check(
            false,
            format!(
                "no export has finished for {:.1} s (bound {:.1} s): the export thread is stuck",
                age.as_secs_f64(),
                bound.as_secs_f64()
            ),
            extra,
        )
    }
}

fn report(checks: Vec<(&str, (bool, Value))>, good: &str, bad: &str) -> Report {
    let ok = checks.iter().all(|(_, (ok, _))| *ok);
    let map: Map<String, Value> = checks
        .into_iter()
        .map(|(name, (_, v))| (name.to_string(), v))
        .collect();
    Report {
        ok,
        body: json!({ "status": if ok { good } else { bad }, "checks": map }),
    }
}

/// `/readyz`: started, NVML up, a fresh sample, the sampler not stuck, events watched,
/// exports succeeding.
pub fn readiness(i: &Inputs, l: &Limits) -> Report {
    report(
        vec![
            ("startup", startup_check(i)),
            ("nvml", nvml_check(i)),
            ("sample", sample_check(i, l)),
            ("watchdog", watchdog_check(i, l)),
            ("events", events_check(i, l)),
            ("export", export_check(i, l)),
        ],
        "ready",
        "not ready",
    )
}

/// `/healthz`: the sampler is not stuck and the export thread turns.
pub fn liveness(i: &Inputs, l: &Limits) -> Report {
    report(
        vec![
            ("watchdog", watchdog_check(i, l)),
            ("export_loop", export_loop_check(i, l)),
        ],
        "alive",
        "stuck",
    )
}

/// The live sources of the checks. Created first thing at start, so that the endpoints
/// answer while the agent waits on a start-up step; the export pipeline is attached when it
/// starts ([`Probes::exports_started`]).
#[derive(Debug)]
pub struct Probes {
    hub: Arc<Hub>,
    board: Arc<SamplerBoard>,
    /// The export pipeline's status and when it started.
    export: OnceLock<(Arc<ExportStatus>, Instant)>,
    starting: Mutex<Option<String>>,
    limits: Limits,
}

impl Probes {
    /// Checks over the latest snapshot on `hub` and the sampler's state on `board`, with
    /// `limits`.
    pub fn new(hub: Arc<Hub>, board: Arc<SamplerBoard>, limits: Limits) -> Self {
        Self {
            hub,
            board,
            export: OnceLock::new(),
            starting: Mutex::new(None),
            limits,
        }
    }

    /// The export pipeline has started with `export` as its status: its bounds count from
    /// now. Later calls are ignored.
    pub fn exports_started(&self, export: Arc<ExportStatus>) {
        let _ = self.export.set((export, Instant::now()));
    }

    /// The start-up step the agent waits on now (`None`: none); `/readyz` says it.
    pub fn set_starting(&self, what: Option<String>) {
        *self.starting.lock().unwrap_or_else(|p| p.into_inner()) = what;
    }

    /// The inputs as of now.
    pub fn inputs(&self) -> Inputs {
        let latest = self.hub.latest();
        let export = self.export.get();
        Inputs {
            starting: self
                .starting
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            nvml: self.board.status(),
            sample_age: latest.as_ref().map(|s| s.taken_instant.elapsed()),
            ticks: self.hub.ticks(),
            last_tick: self.board.last_tick_duration(),
            lost_gpus: latest
                .iter()
                .flat_map(|s| &s.devices)
                .filter(|d| d.state == DeviceState::Lost)
                .map(|d| d.info.uuid.clone())
                .collect(),
            busy: self.board.busy(),
            events: self.board.event_watcher(),
            uptime: export.map_or(Duration::ZERO, |(_, t)| t.elapsed()),
            last_export_success: export
                .and_then(|(e, _)| e.last_success())
                .map(|(t, _)| t.elapsed()),
            last_export_attempt: export
                .and_then(|(e, _)| e.last_attempt())
                .map(|t| t.elapsed()),
            consecutive_export_failures: export.map_or(0, |(e, _)| e.consecutive_failures()),
            export_failures: export.map_or(0, |(e, _)| e.total_failures()),
        }
    }

    /// `/readyz` now.
    pub fn readiness(&self) -> Report {
        readiness(&self.inputs(), &self.limits)
    }

    /// `/healthz` now.
    pub fn liveness(&self) -> Report {
        liveness(&self.inputs(), &self.limits)
    }
}

/// How often the watchdog looks: a third of the bound (so a stuck step is said at most a
/// third of the bound late), which is at most once per sample interval with the default
/// bound (three sample intervals).
pub fn watchdog_period(bound: Duration) -> Duration {
    (bound / 3).max(Duration::from_millis(50))
}

/// Logs, once each, when an NVML thread has been inside one NVML step longer than the
/// bound, and when that ends, and counts each such episode ([`SamplerBoard::count_stuck`],
/// `gpu_sidecar.nvml.stuck`): the sampler (`nvml-sampler`, any step beyond `bound`) and the
/// event watcher (`nvml-events`, a call beyond its own timeout plus `bound`). Runs until
/// the runtime shuts down.
pub async fn watchdog(board: Arc<SamplerBoard>, bound: Duration) {
    let mut interval = tokio::time::interval(watchdog_period(bound));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stuck: Option<Activity> = None;
    let mut watcher_was_stuck: Option<&'static str> = None;
    loop {
        interval.tick().await;
        match (board.busy(), stuck) {
            (Some((activity, d)), None) if d > bound => {
                tracing::error!(
                    activity = activity.as_str(),
                    busy_s = d.as_secs(),
                    "the NVML sampler has been inside {} for more than {} (GPU_SIDECAR_WATCHDOG_TIMEOUT): a driver call does not return and cannot be interrupted; readiness is false and nothing is exported until it returns (nvidia-smi on the node will likely hang too; the driver or GPU may need a reset)",
                    activity.as_str(),
                    humantime::format_duration(bound)
                );
                board.count_stuck("nvml-sampler", activity.as_str());
                stuck = Some(activity);
            }
            (Some((activity, d)), Some(was)) if activity == was && d > bound => {}
            (_, Some(was)) => {
                tracing::info!(activity = was.as_str(), "the NVML sampler is turning again");
                stuck = None;
            }
            _ => {}
        }
        let events = board.event_watcher();
        let now_stuck = match &events.state {
            EventWatcherState::Running(Some(c)) if watcher_stuck(c, bound) => Some(c),
            _ => None,
        };
        match (now_stuck, watcher_was_stuck) {
            (Some(c), None) => {
                tracing::error!(
                    call = c.call,
                    busy_s = c.busy_for.as_secs(),
                    "the XID/ECC event watcher has been inside {} for {:.0} s, more than its own timeout ({}) plus {} (GPU_SIDECAR_WATCHDOG_TIMEOUT): a driver call does not return; readiness is false, and XID and ECC events are seen only once it returns (sampling and export go on, and a re-initialization of NVML does not wait for it)",
                    c.call,
                    c.busy_for.as_secs_f64(),
                    humantime::format_duration(c.allowed),
                    humantime::format_duration(bound)
                );
                board.count_stuck("nvml-events", c.call);
                watcher_was_stuck = Some(c.call);
            }
            (Some(_), Some(_)) | (None, None) => {}
            (None, Some(call)) => {
                if events.earlier_still_running == 0 {
                    tracing::info!(call, "the event watcher's call returned; it watches again");
                } else {
                    tracing::warn!(
                        call,
                        left_behind = events.earlier_still_running,
                        "the NVML session of the stuck event watcher ended: it is left inside the driver call, and the new session watches events"
                    );
                }
                watcher_was_stuck = None;
            }
        }
    }
}

mod server;
pub use server::{probe, probe_target, serve, start, Endpoint};

#[cfg(test)]
mod tests;
