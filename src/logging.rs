//! The agent's own logs: `tracing` to stderr (stdout is kept for console exports), as text
//! or JSON lines, filtered by `GPU_SIDECAR_LOG_LEVEL`.

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
