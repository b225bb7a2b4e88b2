//! Alert rules and training diagnoses, reported as OpenTelemetry events.
//!
//! [`Rules::start`] subscribes to every snapshot and device event of the [`Hub`] and judges
//! each one on its own thread, `rules` (a [`Consumer`]), so the sampler never waits for it
//! (a full queue drops a snapshot for the rules, never blocks the sampler). The judgement is the pure
//! [`Engine`]: one file per rule family (`memory.rs` with `preallocation.rs`, `clocks.rs`,
//! `workload.rs`, `profiling.rs`, `health.rs`),
//! all following the one table [`catalogue::RULES`] (names, severities, settings, hints;
//! `docs/events.md` is generated from it). Each transition becomes one log record with
//! `event.name` `nvidia.gpu.alert.<rule>` ([`crate::telemetry::logs::events::Events::emit`]) and
//! adds 1 to the counter `nvidia.gpu.alerts`.
//!
//! XID errors come from the NVML event watcher, through the same subscription, in order with
//! the snapshots ([`xid_report`]).

pub mod alert;
pub mod catalogue;
mod clocks;
pub mod engine;
mod health;
pub(crate) mod id;
pub(crate) mod memory;
pub mod preallocation;
pub(crate) mod profiling;
pub(crate) mod rule;
mod workload;

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::logs::Severity;
use opentelemetry::KeyValue;

pub use alert::{Alert, AlertState, XidReport};
pub use catalogue::{AlertSeverity, Hold, RuleId, RULES};
pub use engine::Engine;
pub use preallocation::pool_params;
pub(crate) use workload::holds_memory;

use crate::catalogue::attributes;
use crate::catalogue::metrics::ALERTS;
use crate::config::RulesConfig;
use crate::sampling::consumer::{Consumer, ConsumerThread};
use crate::sampling::{DeviceEvent, DeviceEventKind, Hub, Interest, Snapshot};
use crate::telemetry::logs::events::{Event, Events};
use crate::telemetry::metrics::recorded::{Counter, Recorded};

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

/// Turns [`Alert`]s into records and counts them: an `nvidia.gpu.alerts` series is born
/// with its first transition, at 1, counting from the agent's start (its start time), so
/// nothing is exported for the transitions that never happened.
struct AlertReporter {
    events: Events,
    counter: Counter,
}

/// The attributes of one `nvidia.gpu.alerts` series.
fn alert_attributes(rule: RuleId, state: AlertState, hw_id: Option<&str>) -> Vec<KeyValue> {
    let spec = rule.spec();
    let mut attrs = vec![
        KeyValue::new(attributes::ALERT_RULE, spec.name),
        state.kv(),
        spec.severity.kv(),
    ];
    if let Some(h) = hw_id {
        attrs.push(KeyValue::new(attributes::HW_ID, h.to_string()));
    }
    attrs
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().min(u128::from(u64::MAX)) as u64)
}

impl AlertReporter {
    fn new(events: Events, recorded: &Arc<Recorded>) -> Self {
        Self {
            events,
            counter: recorded.counter(&ALERTS),
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
    attributes.push(KeyValue::new(attributes::ALERT_RULE, spec.name));
    attributes.push(alert.state.kv());
    attributes.push(spec.severity.kv());
    if let Some(t) = alert.threshold {
        attributes.push(KeyValue::new(attributes::ALERT_THRESHOLD, t));
    }
    attributes.push(KeyValue::new(
        attributes::ALERT_ACTIVE_FOR,
        alert.active_for.as_secs_f64(),
    ));
    let (severity, body) = match alert.state {
        AlertState::Firing => {
            attributes.push(KeyValue::new(
                attributes::ALERT_SAMPLES,
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

/// The rules' judgement of an XID event: on the physical GPU (`hw.id`), with the MIG
/// instance it hit when NVML names one; `None` for other events (ECC errors have no rule).
pub fn xid_report(event: &DeviceEvent) -> Option<XidReport> {
    let DeviceEventKind::Xid(code) = event.kind else {
        return None;
    };
    let mig = event.device.mig.as_ref();
    Some(XidReport {
        hw_id: event.gpu_uuid().to_string(),
        xid: code,
        at: Instant::now(),
        time: event.time,
        gpu_instance_id: mig.and_then(|m| m.gpu_instance_id),
        compute_instance_id: mig.and_then(|m| m.compute_instance_id),
    })
}

/// The rules as a consumer of the hub: every snapshot, and the XID events in order with
/// them (the first report of a code on a GPU fires `nvidia.gpu.alert.xid`, critical;
/// repeats while it fires are counted).
struct Judge {
    engine: Engine,
    reporter: AlertReporter,
}

impl Consumer for Judge {
    const INTEREST: Interest = Interest::BOTH;

    fn snapshot(&mut self, snapshot: &Arc<Snapshot>, _: &[crate::sampling::GroupDuration]) {
        for a in self.engine.observe(snapshot) {
            self.reporter.report(a);
        }
    }

    fn device_event(&mut self, event: &DeviceEvent) {
        if let Some(alert) = xid_report(event).and_then(|r| self.engine.xid(&r)) {
            self.reporter.report(alert);
        }
    }
}

/// The running rules: the `rules` thread, if any rule is enabled.
pub struct Rules {
    thread: Option<ConsumerThread>,
}

impl Rules {
    /// Starts the `rules` thread on `hub`'s snapshots and device events, emitting through
    /// `events` and counting in `recorded` (`nvidia.gpu.alerts`). With every rule disabled
    /// nothing is started.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(
        config: &RulesConfig,
        hub: &Arc<Hub>,
        events: Events,
        recorded: &Arc<Recorded>,
    ) -> Self {
        let engine = Engine::new(config);
        if engine.is_empty() {
            return Self { thread: None };
        }
        let reporter = AlertReporter::new(events, recorded);
        Self {
            thread: Some(ConsumerThread::start(
                "rules",
                hub,
                QUEUE,
                Judge { engine, reporter },
            )),
        }
    }

    /// Ends the rules' subscription and waits up to `timeout` for the thread to judge what
    /// is queued and end. Returns `false` if the bound was hit.
    pub fn stop(self, timeout: Duration) -> bool {
        self.thread.is_none_or(|t| t.stop(timeout))
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_device_faults;
#[cfg(test)]
mod tests_efficiency;
