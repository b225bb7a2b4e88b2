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

    /// The source of every `tracing::{error,warn,info,debug,trace}!` call in `src/` (tests
    /// left out), each with its file and line.
    fn log_calls() -> Vec<(String, String)> {
        fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|e| e == "rs") {
                    out.push(p);
                }
            }
        }
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        walk(&root.join("src"), &mut files);
        let mut calls = Vec::new();
        for file in files {
            let name = file.strip_prefix(root).unwrap().display().to_string();
            if name.contains("tests") {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let text = match text.find("#[cfg(test)]\nmod tests {") {
                Some(i) => &text[..i],
                None => &text[..],
            };
            for level in ["error", "warn", "info", "debug", "trace"] {
                let open = format!("tracing::{level}!(");
                for (start, _) in text.match_indices(&open) {
                    // The macro's arguments: up to the matching parenthesis, strings skipped.
                    let body = &text[start + open.len()..];
                    let (mut depth, mut end, mut chars) = (1, 0, body.char_indices());
                    while let Some((i, c)) = chars.next() {
                        match c {
                            '(' => depth += 1,
                            ')' => depth -= 1,
                            '"' => {
                                while let Some((_, c)) = chars.next() {
                                    match c {
                                        '\\' => {
                                            chars.next();
                                        }
                                        '"' => break,
                                        _ => {}
                                    }
                                }
                            }
                            _ => {}
                        }
                        if depth == 0 {
                            end = i;
                            break;
                        }
                    }
                    let line = text[..start].lines().count();
                    calls.push((format!("{name}:{line}"), body[..end].to_string()));
                }
            }
        }
        calls
    }

    /// The agent's log lines are read by people: no value in them is Rust's `Debug` text
    /// (`Uuid("GPU-…")`, `[SmOccupancy, …]`, `Grpc`, `Some(…)`). A field is written with
    /// `%` (Display) or as a plain value, never with `?`; a message never uses `{:?}`
    /// (durations go through `humantime::format_duration`). A GPM line printed Rust enum
    /// names, and others device ids and protocol names, before this test.
    #[test]
    fn log_lines_carry_no_debug_formatting() {
        let calls = log_calls();
        assert!(calls.len() > 100, "{} log calls found", calls.len());
        let mut found = Vec::new();
        for (at, body) in &calls {
            let debug_field = body.split(',').any(|arg| {
                let arg = arg.trim();
                arg.starts_with('?')
                    || arg
                        .split_once('=')
                        .is_some_and(|(_, v)| v.trim().starts_with('?'))
            });
            if debug_field || body.contains(":?}") || body.contains(":#?}") {
                found.push(format!(
                    "{at}: {}",
                    body.split_whitespace().collect::<Vec<_>>().join(" ")
                ));
            }
        }
        assert!(
            found.is_empty(),
            "Debug formatting in log lines:\n{}",
            found.join("\n")
        );
    }
}
