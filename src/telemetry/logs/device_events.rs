//! The device-event recorder: the consumer (thread `device-events`, subscribed to the hub's
//! device events only, so it wakes only when one comes) that counts XIDs
//! (`nvidia.gpu.xid.errors`, and the time of each code's last report, `nvidia.gpu.xid.last_seen`) and emits one event per XID or ECC error. Every XID is counted and sent; its log line is rate-limited
//! (the first of each code on each device at once, then at most one a minute with the count
//! in between), so an XID storm does not flood the log. The instruments are the catalogue's recorded metrics
//! ([`RECORDED`](crate::catalogue::metrics::RECORDED)).

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::KeyValue;

use crate::catalogue::metrics::{info_attributes, XID_ERRORS, XID_LAST_SEEN};
use crate::logging::{LogLimiter, LOG_PERIOD};
use crate::sampling::consumer::Consumer;
use crate::sampling::{DeviceEvent, DeviceEventKind, Interest};
use crate::telemetry::logs::events::EventEmitter;
use crate::telemetry::logs::xid_event::{to_event, XID_CODE};
use crate::telemetry::metrics::recorded::{Counter, Gauge, Recorded};

/// Records the device events (a [`Consumer`] of the hub's events).
pub struct Recorder {
    xid: Counter,
    /// `nvidia.gpu.xid.last_seen`: what the `GPUXidError` rule reads.
    xid_last_seen: Gauge,
    events: EventEmitter,
    /// XID log lines, by device UUID and code.
    xid_lines: LogLimiter<(String, u64)>,
}

impl Recorder {
    /// Records into `recorded`; events go to `events`.
    pub fn new(recorded: &Arc<Recorded>, events: EventEmitter) -> Self {
        Self {
            xid: recorded.counter(&XID_ERRORS),
            xid_last_seen: recorded.gauge(&XID_LAST_SEEN),
            events,
            xid_lines: LogLimiter::new(LOG_PERIOD),
        }
    }
}

impl Consumer for Recorder {
    const INTEREST: Interest = Interest::EVENTS;

    fn device_event(&mut self, event: &DeviceEvent) {
        if let DeviceEventKind::Xid(code) = event.kind {
            let mut attributes = info_attributes(&event.device);
            attributes.push(KeyValue::new(XID_CODE, code as i64));
            self.xid.add(1, &attributes);
            self.xid_last_seen.set_time(event.time, &attributes);
            let logged = self
                .xid_lines
                .admit((event.device.uuid.clone(), code), Instant::now());
            if let Some(not_logged) = logged {
                tracing::warn!(
                    uuid = %event.device.uuid,
                    xid = code,
                    not_logged_since_last = not_logged,
                    "XID error (every one is counted in nvidia.gpu.xid.errors and sent as an event; this line at most once a minute per GPU and code)"
                );
            }
        }
        self.events.emit(to_event(event));
    }
}
