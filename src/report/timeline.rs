//! The run's events, in the order they were emitted, for the run report (`events`) and its
//! page: every alert (`nvidia.gpu.alert.<rule>`, firing and resolved), XID and ECC event
//! the agent emitted, with its time and GPU. [`EventTimeline::tap`] is handed to the events
//! pipeline ([`Events::with_tap`]), so an event is kept whether or not a logs exporter is
//! configured (`OTEL_LOGS_EXPORTER=none` included).
//!
//! Bounded: the first [`RUN_EVENTS_KEPT`] events are kept, later ones only counted
//! (`events_dropped`), so an XID storm neither grows memory nor the report's size. The
//! shutdown takes them before the report's own event is emitted.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::catalogue::attributes;
#[cfg(doc)]
use crate::telemetry::logs::events::Events;
use crate::telemetry::logs::events::{Event, Tap};

/// Events kept for the report; later ones are counted in `events_dropped`.
pub const RUN_EVENTS_KEPT: usize = 200;

/// One event of the run as the report gives it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunEvent {
    /// When it happened (the record's timestamp), RFC 3339 UTC, milliseconds.
    pub time: String,
    /// The record's `event.name`, e.g. `nvidia.gpu.alert.clocks_slowdown`, `nvidia.gpu.xid`.
    #[serde(rename = "event.name")]
    pub name: &'static str,
    /// OTel severity text (`INFO`, `WARN`, `ERROR`, `FATAL`, …).
    pub severity: &'static str,
    /// The GPU (`hw.id`: GPU or MIG UUID); `None` for an event about no single GPU.
    #[serde(rename = "hw.id")]
    pub hw_id: Option<String>,
    /// `firing` or `resolved` for an alert (`nvidia.gpu.alert.state`), else `None`.
    pub state: Option<String>,
    /// The record's body: one sentence a person can act on.
    pub body: String,
}

impl RunEvent {
    /// The report's view of `event`, emitted now if it carries no time.
    pub fn of(event: &Event) -> Self {
        let attr = |key: &str| {
            event
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.to_string())
        };
        let time = event.time.unwrap_or_else(std::time::SystemTime::now);
        Self {
            time: humantime::format_rfc3339_millis(time).to_string(),
            name: event.name,
            severity: event.severity.name(),
            hw_id: attr(attributes::HW_ID),
            state: attr(attributes::AlertState::KEY),
            body: event.body.clone(),
        }
    }
}

#[derive(Debug, Default)]
struct Kept {
    events: Vec<RunEvent>,
    dropped: u64,
}

/// The events emitted during the run, bounded ([`RUN_EVENTS_KEPT`]); shared between the
/// events pipeline (which records) and the shutdown (which takes them into the report).
#[derive(Debug, Default)]
pub struct EventTimeline(Mutex<Kept>);

impl EventTimeline {
    /// An empty timeline.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `event` (or counts it once [`RUN_EVENTS_KEPT`] are kept).
    pub fn record(&self, event: &Event) {
        let mut kept = self.kept();
        if kept.events.len() < RUN_EVENTS_KEPT {
            kept.events.push(RunEvent::of(event));
        } else {
            kept.dropped += 1;
        }
    }

    /// The hook for [`Events::with_tap`].
    pub fn tap(self: &Arc<Self>) -> Tap {
        let me = self.clone();
        Arc::new(move |e: &Event| me.record(e))
    }

    /// The events kept so far, in emission order, and how many were only counted.
    pub fn take(&self) -> (Vec<RunEvent>, u64) {
        let mut kept = self.kept();
        (
            std::mem::take(&mut kept.events),
            std::mem::take(&mut kept.dropped),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::logs::Severity;
    use opentelemetry::KeyValue;
    use std::time::{Duration, UNIX_EPOCH};

    fn alert(i: u64) -> Event {
        Event {
            name: "nvidia.gpu.alert.clocks_slowdown",
            severity: Severity::Warn,
            body: format!("GPU 0: slowdown {i}"),
            attributes: vec![
                KeyValue::new("hw.id", "GPU-0"),
                KeyValue::new("nvidia.gpu.alert.state", "firing"),
            ],
            time: Some(UNIX_EPOCH + Duration::from_millis(1_800_000_000_250 + i)),
        }
    }

    #[test]
    fn keeps_time_gpu_state_and_body_and_counts_past_the_bound() {
        let t = EventTimeline::new();
        let tap = t.tap();
        for i in 0..RUN_EVENTS_KEPT as u64 + 3 {
            tap(&alert(i));
        }
        let (events, dropped) = t.take();
        assert_eq!((events.len(), dropped), (RUN_EVENTS_KEPT, 3));
        assert_eq!(
            events[1],
            RunEvent {
                time: "2027-01-15T08:00:00.251Z".into(),
                name: "nvidia.gpu.alert.clocks_slowdown",
                severity: "WARN",
                hw_id: Some("GPU-0".into()),
                state: Some("firing".into()),
                body: "GPU 0: slowdown 1".into(),
            }
        );
        assert_eq!(t.take(), (Vec::new(), 0), "taken once");
    }
}
