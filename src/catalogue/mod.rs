//! One table per fact about what the agent reports, each read by every part that needs it:
//! the XID codes ([`xid`]).
pub mod xid;
