//! A pod's shared process namespace on this machine (`shareProcessNamespace: true`), for the
//! classic sidecar's tests: `unshare --pid --fork --mount-proc --net` makes a PID namespace
//! whose PID 1 stands for the infra container's `pause`, and a network namespace of the pod's
//! own (its ports are not this machine's; its loopback up, as the runtime's CNI sets it, so
//! that an exec probe reaches `127.0.0.1`); each "container" is a cgroup of its own (as every
//! container runtime gives), its processes entering the namespaces with `nsenter`. Needs
//! root (cgroups, namespaces), as CI and these machines run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A writable cgroup hierarchy: cgroup v2's root (or its unified mount), else v1's `pids`.
fn hierarchy() -> PathBuf {
    for candidate in [
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/systemd",
    ] {
        let p = Path::new(candidate);
        let probe = p.join(format!("gpu-otel-sidecar-probe-{}", std::process::id()));
        if p.join("cgroup.procs").exists() && std::fs::create_dir(&probe).is_ok() {
            let _ = std::fs::remove_dir(&probe);
            return p.to_path_buf();
        }
    }
    panic!("no writable cgroup hierarchy under /sys/fs/cgroup: these tests need root");
}

/// One pod: its PID namespace (PID 1: `sleep`, standing for `pause`) and its containers'
/// cgroups. Dropped: every process in it is killed and the cgroups removed.
pub struct Pod {
    root: PathBuf,
    pause: Child,
    /// Host PID of the namespace's PID 1.
    pid1: u32,
}

impl Pod {
    /// A new pod named `name` (cgroup directory names include the test's PID).
    pub fn new(name: &str) -> Self {
        let root = hierarchy().join(format!(
            "gpu-otel-sidecar-test-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir(&root);
        std::fs::create_dir(&root).unwrap();
        let pause_cg = root.join("pause");
        std::fs::create_dir(&pause_cg).unwrap();
        let pause = Command::new("sh")
            .args([
                "-c",
                r#"echo $$ > "$1/cgroup.procs" && exec unshare --pid --fork --mount-proc --net sh -c 'ip link set lo up 2>/dev/null; exec sleep infinity'"#,
                "sh",
            ])
            .arg(&pause_cg)
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare");
        // PID 1 of the namespace is unshare's child.
        let unshare = pause.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let pid1 = loop {
            let children =
                std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"))
                    .unwrap_or_default();
            if let Some(pid) = children.split_whitespace().next() {
                break pid.parse().unwrap();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "unshare --pid --fork started no child"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        Self { root, pause, pid1 }
    }

    /// The cgroup of container `name` (made on first use).
    fn cgroup(&self, name: &str) -> PathBuf {
        let cg = self.root.join(name);
        let _ = std::fs::create_dir(&cg);
        cg
    }

    /// (`program`, `args`) that run `command` as a process of container `container`: in its
    /// cgroup, in the pod's PID, mount (its own `/proc`) and network namespaces.
    pub fn exec(&self, container: &str, command: &[&str]) -> (String, Vec<String>) {
        let mut args = vec![
            "-c".to_string(),
            r#"cg="$1"; pid1="$2"; shift 2; echo $$ > "$cg/cgroup.procs" && exec nsenter -t "$pid1" -p -m -n -- "$@""#
                .to_string(),
            "sh".to_string(),
            self.cgroup(container).display().to_string(),
            self.pid1.to_string(),
        ];
        args.extend(command.iter().map(|s| s.to_string()));
        ("sh".to_string(), args)
    }

    /// Runs `command` in container `container` and waits for it (stdout captured).
    pub fn run(&self, container: &str, command: &[&str]) -> std::process::Output {
        let (program, args) = self.exec(container, command);
        Command::new(program).args(args).output().unwrap()
    }

    /// Starts `command` in container `container`.
    pub fn start(&self, container: &str, command: &[&str]) -> Child {
        let (program, args) = self.exec(container, command);
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// Kills every process of container `container` with SIGKILL, as the kernel's OOM killer
    /// or the runtime does (exit code 137).
    pub fn kill(&self, container: &str) {
        let procs = std::fs::read_to_string(self.cgroup(container).join("cgroup.procs"))
            .unwrap_or_default();
        for pid in procs
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }

    /// Whether a process of container `container` is still running.
    pub fn running(&self, container: &str) -> bool {
        std::fs::read_to_string(self.cgroup(container).join("cgroup.procs"))
            .is_ok_and(|procs| !procs.trim().is_empty())
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        // PID 1 gone: the kernel kills every process of the namespace.
        unsafe {
            libc::kill(self.pid1 as i32, libc::SIGKILL);
        }
        let _ = self.pause.kill();
        let _ = self.pause.wait();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            for e in entries.flatten().filter(|e| e.path().is_dir()) {
                while std::fs::remove_dir(e.path()).is_err() && std::time::Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
        let _ = std::fs::remove_dir(&self.root);
    }
}
