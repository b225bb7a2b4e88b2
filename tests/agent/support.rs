//! Helpers of the agent's fault and reliability tests: scenario files of their own, the
//! health endpoint, log lines, a clean stop.

use crate::common::{self, scenario, Agent};

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a helper waits for the agent (its health endpoint, its exit).
const WAIT: Duration = Duration::from_secs(20);

/// `<scratch>/<name>`: [`common::temp_path`] (removed when the test process exits).
fn temp_path(name: &str) -> PathBuf {
    common::temp_path(name)
}

/// Writes `tests/scenarios/<base>` with `edit` applied to a temp file; returns its path.
pub(crate) fn scenario_with(base: &str, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut v = common::read_json(scenario(base));
    edit(&mut v);
    scenario_json(name, v)
}

/// A scenario file of its own with the given JSON.
pub(crate) fn scenario_json(name: &str, v: Value) -> PathBuf {
    let path = temp_path(&format!("{name}.json"));
    std::fs::write(&path, v.to_string()).unwrap();
    path
}

/// `GET <health>/<path>`: status and JSON body.
pub(crate) fn health(agent: &Agent, path: &str) -> (u16, Value) {
    let base = agent
        .health_url(WAIT)
        .unwrap_or_else(|| panic!("no health endpoint\n{}", agent.dump()));
    let r = common::http::get(&format!("{base}{path}"))
        .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", agent.dump()));
    let body = serde_json::from_str(&r.text())
        .unwrap_or_else(|e| panic!("{path} body is not JSON ({e}): {}", r.text()));
    (r.status, body)
}

/// Polls `/readyz` until its status is `want` (200 or 503); returns the last body.
pub(crate) fn wait_ready(agent: &Agent, want: u16, timeout: Duration) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let (status, body) = health(agent, "/readyz");
        if status == want {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {status} (wanted {want}): {body:#}\n{}",
            agent.dump()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(crate) fn count_lines(agent: &Agent, needle: &str) -> usize {
    agent
        .stderr_lines()
        .iter()
        .filter(|l| l.contains(needle))
        .count()
}

/// SIGTERM, and the agent exits 0 within [`WAIT`].
pub(crate) fn stop_ok(agent: &mut Agent) {
    agent.sigterm();
    let status = agent.wait_exit(WAIT).expect("exits after SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", agent.dump());
}
