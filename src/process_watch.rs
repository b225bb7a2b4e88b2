//! `GPU_SIDECAR_EXIT_WITH_PROCESS`: lets a classic (non-native) sidecar end with the
//! training process, so a Kubernetes Job completes. Needs `shareProcessNamespace: true`
//! (the training container's processes visible in `/proc`).

use std::time::Duration;

/// How often `/proc` is scanned.
pub const POLL: Duration = Duration::from_secs(1);

/// Whether a process whose `/proc/<pid>/comm` equals `name` exists under `proc_root`.
pub fn is_running(proc_root: &std::path::Path, name: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return false;
    };
    entries.flatten().any(|e| {
        let is_pid = e
            .file_name()
            .to_str()
            .is_some_and(|f| f.bytes().all(|b| b.is_ascii_digit()));
        is_pid
            && std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.trim_end_matches('\n') == name)
    })
}

/// Resolves once a process named `name` has been seen and then is gone. Logs when it is
/// first seen and when it ends.
pub async fn wait_until_gone(name: &str) {
    let proc_root = std::path::Path::new("/proc");
    let mut seen = false;
    loop {
        let running = is_running(proc_root, name);
        if running && !seen {
            tracing::info!(
                process = name,
                "watching the training process; the agent exits when it ends"
            );
            seen = true;
        } else if !running && seen {
            tracing::info!(process = name, "the training process ended");
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_process_by_comm() {
        let guard = tempfile::tempdir().unwrap();
        let root = guard.path();
        std::fs::create_dir_all(root.join("42")).unwrap();
        std::fs::create_dir_all(root.join("self")).unwrap();
        std::fs::write(root.join("42/comm"), "python\n").unwrap();
        std::fs::write(root.join("self/comm"), "trainer\n").unwrap();
        assert!(is_running(root, "python"));
        assert!(
            !is_running(root, "trainer"),
            "non-numeric entries are not processes"
        );
        assert!(!is_running(root, "pytho"));
    }
}
