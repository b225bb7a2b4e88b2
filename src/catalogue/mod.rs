//! One table per fact about what the agent reports, each read by every part that needs it:
//! the XID codes ([`xid`]) and the clock-event reasons ([`clocks_event_reasons`]).
pub mod clocks_event_reasons;
pub mod xid;
