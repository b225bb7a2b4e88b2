//! The agent's own logs: `tracing` to stderr (stdout is kept for console exports), as text
//! or JSON lines, filtered by `GPU_SIDECAR_LOG_LEVEL`; and [`LogLimiter`], the rate limit of
//! lines about things that can repeat without bound.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `filter` was validated by [`crate::config`].
pub fn init(filter: &str, json: bool) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_thread_names(true);
    if json {
        builder.json().init();
    } else {
        builder.with_ansi(false).init();
    }
}

/// The period of rate-limited log lines ([`LogLimiter`]): at most one line per key per
/// minute, the same period as export failures.
pub const LOG_PERIOD: Duration = Duration::from_secs(60);

/// Most keys a [`LogLimiter`] remembers; past it, keys idle for a period are forgotten (and
/// all of them if that is not enough), so its memory is bounded whatever it is fed.
const MAX_KEYS: usize = 4096;

/// A rate limit for log lines about things that can repeat without bound (an XID storm, a
/// call that fails and answers again every tick): the first occurrence of each key is
/// logged, then at most one per period, which carries the number of occurrences not logged
/// since the previous line.
#[derive(Debug)]
pub struct LogLimiter<K> {
    period: Duration,
    /// Per key: when it was last logged, and the occurrences since then not logged.
    seen: HashMap<K, (Instant, u64)>,
}

impl<K: Eq + Hash> LogLimiter<K> {
    /// A limiter allowing one line per key per `period`.
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            seen: HashMap::new(),
        }
    }

    /// One occurrence of `key` at `now`: `Some(n)` to log it now, `n` being the occurrences
    /// of the key not logged since its previous line (0 for the first); `None` to stay
    /// silent (it is counted for the next line).
    pub fn admit(&mut self, key: K, now: Instant) -> Option<u64> {
        if !self.seen.contains_key(&key) && self.seen.len() >= MAX_KEYS {
            let period = self.period;
            self.seen
                .retain(|_, (at, _)| now.saturating_duration_since(*at) < period);
            if self.seen.len() >= MAX_KEYS {
                self.seen.clear();
            }
        }
        match self.seen.get_mut(&key) {
            None => {
                self.seen.insert(key, (now, 0));
                Some(0)
            }
            Some((at, suppressed)) if now.saturating_duration_since(*at) >= self.period => {
                *at = now;
                Some(std::mem::take(suppressed))
            }
            Some((_, suppressed)) => {
                *suppressed += 1;
                None
            }
        }
    }

    /// Whether `key` has been logged and not forgotten.
    pub fn knows(&self, key: &K) -> bool {
        self.seen.contains_key(key)
    }

    /// Forgets `key`: its next occurrence is logged at once.
    pub fn forget(&mut self, key: &K) {
        self.seen.remove(key);
    }
}

/// `error: source: source …`, one line.
pub(crate) fn with_sources(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_then_once_per_period_with_the_count_in_between() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(Duration::from_secs(60));
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(l.admit("xid 13", at(0)), Some(0));
        for s in 1..60 {
            assert_eq!(l.admit("xid 13", at(s)), None, "at {s} s");
        }
        assert_eq!(l.admit("xid 79", at(30)), Some(0), "another key is its own");
        assert_eq!(l.admit("xid 13", at(60)), Some(59));
        assert_eq!(l.admit("xid 13", at(61)), None);
        assert_eq!(l.admit("xid 13", at(200)), Some(1));
    }

    #[test]
    fn memory_is_bounded() {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(Duration::from_secs(60));
        for k in 0..(MAX_KEYS as u64 * 3) {
            assert_eq!(l.admit(k, t0), Some(0));
        }
        assert!(l.seen.len() <= MAX_KEYS);
    }
}
