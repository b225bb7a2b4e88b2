//! The logs signal: the agent's events as OTLP log records ([`events`]: alerts, XID and ECC
//! errors, the run report), held in a bounded queue while the collector is away
//! ([`outbox`]); the XID/ECC event ([`xid_event`]) and the `device-events` consumer that
//! counts, logs and emits each one ([`device_events`]).

pub mod device_events;
pub mod events;
pub mod outbox;
pub mod xid_event;
