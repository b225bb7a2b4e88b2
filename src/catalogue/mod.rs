//! One table per fact about what the agent reports, each read by every part that needs it:
//! every metric ([`metrics`]), every event ([`events`]), every attribute key ([`attributes`]), every resource attribute key ([`resource`]) and alert value key ([`alert_values`]), the XID codes ([`xid`]) and the clock-event reasons
//! ([`clocks_event_reasons`]).
pub mod alert_values;
pub mod attributes;
pub mod clocks_event_reasons;
pub mod events;
pub mod metrics;
pub mod resource;
pub mod xid;
