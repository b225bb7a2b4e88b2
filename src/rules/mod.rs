//! Alert rules and training diagnoses, reported as OpenTelemetry events.
//!
//! [`Rules::start`] subscribes to every snapshot ([`SharedState::subscribe`]) and judges
//! each one on its own thread, `rules`, so the sampler never waits for it (a full queue
//! drops a snapshot for the rules, never blocks the sampler). The judgement is the pure
//! [`Engine`]: one file per rule family (`memory.rs` with `preallocation.rs`, `clocks.rs`,
//! `workload.rs`, `profiling.rs`, `health.rs`),
//! all following the one table [`catalogue::RULES`] (names, severities, settings, hints;
//! `docs/events.md` is generated from it). Each transition becomes one log record with
//! `event.name` `nvidia.gpu.alert.<rule>` ([`crate::telemetry::events::Events::emit`]) and
//! adds 1 to the counter `nvidia.gpu.alerts`.
//!
//! XID errors come from the NVML event watcher: it reports them through
//! [`XidHook::report`] (from [`Rules::xid_hook`]).

pub mod alert;
pub mod catalogue;
mod clocks;
pub mod engine;
mod health;
pub(crate) mod memory;
pub mod preallocation;
pub(crate) mod profiling;
pub(crate) mod rule;
mod workload;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use opentelemetry::logs::Severity;
use opentelemetry::KeyValue;

pub use alert::{Alert, AlertState, XidReport};
pub use catalogue::{AlertSeverity, Hold, RuleId, RULES};
pub use engine::{pool_params, Engine};
pub(crate) use workload::holds_memory;

use crate::catalogue::metrics::ALERTS;
use crate::config::RulesConfig;
use crate::sampling::SharedState;
use crate::sampling::Snapshot;
use crate::telemetry::events::{Event, Events};
use crate::telemetry::recorded::{Counter, Recorded};

/// Snapshots queued for the rules thread before the sampler starts dropping them for it.
const QUEUE: usize = 64;

/// Name of the alerts counter (a row of
/// [`RECORDED`](crate::catalogue::metrics::RECORDED)).
pub const ALERTS_COUNTER: &str = "nvidia.gpu.alerts";

/// `x` bytes as `12.3 GiB`.
pub(crate) fn gib(bytes: f64) -> String {
    format!("{:.1} GiB", bytes / (1u64 << 30) as f64)
}

/// `x` bytes as `12.3 MiB`.
pub(crate) fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1u64 << 20) as f64)
}

/// Turns [`Alert`]s into records and counts them.
struct Sink {
    events: Events,
    counter: Counter,
    /// The enabled rules (their alert series are created at 0 for each device).
    rules: Vec<RuleId>,
    /// Devices whose alert series exist.
    known: Mutex<std::collections::HashSet<String>>,
}

/// The attributes of one `nvidia.gpu.alerts` series.
fn alert_attributes(rule: RuleId, state: AlertState, hw_id: Option<&str>) -> Vec<KeyValue> {
    let spec = rule.spec();
    let mut attrs = vec![
        KeyValue::new("nvidia.gpu.alert.rule", spec.name),
        KeyValue::new("nvidia.gpu.alert.state", state.as_str()),
        KeyValue::new("nvidia.gpu.alert.severity", spec.severity.as_str()),
    ];
    if let Some(h) = hw_id {
        attrs.push(KeyValue::new("hw.id", h.to_string()));
    }
    attrs
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().min(u128::from(u64::MAX)) as u64)
}

impl Sink {
    fn new(events: Events, recorded: &Arc<Recorded>, rules: Vec<RuleId>) -> Self {
        Self {
            events,
            counter: recorded.counter(&ALERTS),
            rules,
            known: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// Creates at 0 every alert series the rules may produce for the devices of
    /// `snapshot` not seen before (each enabled rule, firing and resolved), so that a
    /// backend sees the first firing as an increase: `increase()` and `rate()` need a point
    /// before it.
    fn ensure_series(&self, snapshot: &Snapshot) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        for d in &snapshot.devices {
            if known.insert(d.info.uuid.clone()) {
                for rule in &self.rules {
                    for state in [AlertState::Firing, AlertState::Resolved] {
                        self.counter
                            .ensure(&alert_attributes(*rule, state, Some(&d.info.uuid)));
                    }
                }
            }
        }
    }

    fn report(&self, alert: Alert) {
        let event = to_event(&alert);
        let spec = alert.rule.spec();
        let attrs = alert_attributes(alert.rule, alert.state, alert.hw_id.as_deref());
        self.counter.add(1, &attrs);
        match (alert.state, spec.severity) {
            (AlertState::Firing, AlertSeverity::Warning | AlertSeverity::Critical) => {
                tracing::warn!(event = spec.event_name, "{}", event.body)
            }
            _ => tracing::info!(event = spec.event_name, "{}", event.body),
        }
        self.events.emit(event);
    }
}

/// The record for one transition: `event.name` `nvidia.gpu.alert.<rule>`; severity the
/// rule's when firing, `INFO` when resolved; attributes as `docs/events.md` lists them.
pub fn to_event(alert: &Alert) -> Event {
    let spec = alert.rule.spec();
    let mut attributes = alert.device.clone();
    attributes.push(KeyValue::new("nvidia.gpu.alert.rule", spec.name));
    attributes.push(KeyValue::new(
        "nvidia.gpu.alert.state",
        alert.state.as_str(),
    ));
    attributes.push(KeyValue::new(
        "nvidia.gpu.alert.severity",
        spec.severity.as_str(),
    ));
    if let Some(t) = alert.threshold {
        attributes.push(KeyValue::new("nvidia.gpu.alert.threshold", t));
    }
    attributes.push(KeyValue::new(
        "nvidia.gpu.alert.active_for",
        alert.active_for.as_secs_f64(),
    ));
    let (severity, body) = match alert.state {
        AlertState::Firing => {
            attributes.push(KeyValue::new(
                "nvidia.gpu.alert.samples",
                i64::from(alert.samples),
            ));
            let held = if alert.active_for.is_zero() {
                String::new()
            } else {
                format!(
                    " for {}",
                    humantime::format_duration(round_ms(alert.active_for))
                )
            };
            (
                spec.severity.otel(),
                format!("{}: {}{held}. {}", alert.label, alert.summary, alert.hint),
            )
        }
        AlertState::Resolved => (
            Severity::Info,
            format!(
                "{}: {} resolved after firing for {}: {}.",
                alert.label,
                spec.name,
                humantime::format_duration(round_ms(alert.active_for)),
                alert.summary
            ),
        ),
    };
    attributes.extend(alert.values.iter().cloned());
    attributes.extend(alert.readings.iter().cloned());
    Event {
        name: spec.event_name,
        severity,
        body,
        attributes,
        time: Some(alert.time),
    }
}

/// For the NVML event watcher: reports an XID to the rules (any thread; cheap to clone).
#[derive(Clone)]
pub struct XidHook {
    inner: Option<(Arc<Mutex<Engine>>, Arc<Sink>)>,
}

impl XidHook {
    /// Judges one XID now, on the caller's thread (the engine's lock is held only while
    /// it decides; emitting queues the record): the first report of a code on a GPU fires
    /// `nvidia.gpu.alert.xid` (critical); repeats while it fires are counted.
    pub fn report(&self, report: XidReport) {
        let Some((engine, sink)) = &self.inner else {
            return;
        };
        let alert = engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .xid(&report);
        if let Some(a) = alert {
            sink.report(a);
        }
    }
}

/// The running rules: the `rules` thread and the XID hook.
pub struct Rules {
    thread: Option<JoinHandle<()>>,
    done: Option<mpsc::Receiver<()>>,
    hook: XidHook,
}

impl Rules {
    /// Starts the `rules` thread on `shared`'s snapshots, emitting through `events` and
    /// counting in `recorded` (`nvidia.gpu.alerts`). With every rule disabled nothing is
    /// started.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(
        config: &RulesConfig,
        shared: &SharedState,
        events: Events,
        recorded: &Arc<Recorded>,
    ) -> Self {
        let engine = Engine::new(config);
        if engine.is_empty() {
            return Self {
                thread: None,
                done: None,
                hook: XidHook { inner: None },
            };
        }
        let engine = Arc::new(Mutex::new(engine));
        let enabled = config
            .0
            .iter()
            .filter(|(_, s)| s.enabled)
            .map(|(id, _)| *id)
            .collect();
        let sink = Arc::new(Sink::new(events, recorded, enabled));
        let rx = shared.subscribe(QUEUE);
        let (done_tx, done_rx) = mpsc::channel();
        let (e, s) = (engine.clone(), sink.clone());
        let thread = std::thread::Builder::new()
            .name("rules".into())
            .spawn(move || {
                for snapshot in rx {
                    s.ensure_series(&snapshot);
                    let alerts = e
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .observe(&snapshot);
                    for a in alerts {
                        s.report(a);
                    }
                }
                let _ = done_tx.send(());
            })
            .expect("spawn rules thread");
        Self {
            thread: Some(thread),
            done: Some(done_rx),
            hook: XidHook {
                inner: Some((engine, sink)),
            },
        }
    }

    /// The hook the XID watcher reports through.
    pub fn xid_hook(&self) -> XidHook {
        self.hook.clone()
    }

    /// Waits up to `timeout` for the thread to judge what is queued and end. Call after
    /// [`SharedState::close_subscriptions`] (which ends its input). Returns `false` if the
    /// bound was hit.
    pub fn stop(mut self, timeout: Duration) -> bool {
        let Some(done) = self.done.take() else {
            return true;
        };
        match done.recv_timeout(timeout) {
            Ok(()) => {
                if let Some(t) = self.thread.take() {
                    let _ = t.join();
                }
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_device_faults;
#[cfg(test)]
mod tests_efficiency;
