//! A classic (non-native) sidecar that ends with the trainer, so that a Kubernetes Job
//! completes: `GPU_SIDECAR_EXIT_WITH_CONTAINERS=true` or `GPU_SIDECAR_EXIT_WITH_PROCESS=<name>`.
//! Both need the pod's process namespace shared (`shareProcessNamespace: true`: the other
//! containers' processes are visible in `/proc`).
//!
//! [`Follow::Containers`] follows the pod's other containers, whatever their processes are
//! called (`python3`, `torchrun`, `accelerate`, `deepspeed`, `mpirun`, a shell script): a
//! process belongs to another container when its `/proc/<pid>/cgroup` differs from the
//! agent's own (every container has a cgroup of its own; the agent's `exec` probes and a
//! `kubectl exec` into its container share its cgroup); in Kubernetes PID 1 is the pod's
//! infra process (`pause`), which lives as long as the pod, and does not count; zombies do not
//! count. The agent ends once none is left. The kubelet starts a pod's containers one after
//! the other in their order, so the GPU container, before the sidecar (the webhook appends
//! it), has started before the agent: none at the first scan means the trainer has already
//! ended (a run shorter than the agent's start), and the agent ends at once.
//!
//! [`Follow::Process`] follows a process name (`/proc/<pid>/comm`): the agent ends once a
//! process of that name, seen once, is gone; in a Kubernetes pod also once no process of the
//! other containers is left (the trainer ended before it was seen, or never had that name).
//!
//! Without a shared process namespace (the agent is PID 1 of its own) nothing of the other
//! containers can be seen: the agent says so once and does not end by itself.
//!
//! The pod's `restartPolicy` ([`RestartPolicy`], `GPU_SIDECAR_POD_RESTART_POLICY`) decides what
//! "ended" means. `Never` (a Job's pod): the end above, at once. `OnFailure`: the kubelet
//! restarts a trainer that failed, in the same pod, after its crash-loop back-off; the end
//! counts only once the trainer has stayed gone longer than that ([`RestartWait`]; from the
//! containers' end when a followed process ended before its container), and a trainer that
//! comes back resets it (the sidecar runs through every restart). `Always`: the
//! kubelet would restart the sidecar too, which would end again at once (a crash loop), so
//! the exit rules are refused with it (the webhook does not inject them into such pods).
//!
//! The scan runs on its own thread (`exit-watch`), once per [`POLL`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How often `/proc` is scanned.
pub const POLL: Duration = Duration::from_millis(500);

/// The pod's `restartPolicy`, as `GPU_SIDECAR_POD_RESTART_POLICY` gives it (the Downward API
/// cannot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartPolicy {
    /// `Never` (also what an unset variable means): the trainer's end is final.
    #[default]
    Never,
    /// `OnFailure`: a failed trainer is restarted in place after the kubelet's back-off.
    OnFailure,
    /// `Always`: every container is restarted, the sidecar too.
    Always,
}

impl RestartPolicy {
    /// The policy named as in a pod spec (`Never`, `OnFailure`, `Always`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Never" => Some(RestartPolicy::Never),
            "OnFailure" => Some(RestartPolicy::OnFailure),
            "Always" => Some(RestartPolicy::Always),
            _ => None,
        }
    }

    /// The name, as in a pod spec.
    pub fn as_str(self) -> &'static str {
        match self {
            RestartPolicy::Never => "Never",
            RestartPolicy::OnFailure => "OnFailure",
            RestartPolicy::Always => "Always",
        }
    }
}

/// The kubelet's crash-loop back-off before its first restart (doubling with each restart).
pub const KUBELET_BACK_OFF: Duration = Duration::from_secs(10);
/// The kubelet's longest crash-loop back-off.
pub const KUBELET_MAX_BACK_OFF: Duration = Duration::from_secs(300);
/// A container that ran this long before it ended is restarted with the first back-off again.
pub const KUBELET_BACK_OFF_RESET: Duration = Duration::from_secs(600);
/// Added to the back-off: the kubelet notices the end, retries its pod's sync (10 to 15 s
/// apart while in back-off) and starts the container.
pub const KUBELET_START_MARGIN: Duration = Duration::from_secs(20);

/// With `restartPolicy: OnFailure`, how long the trainer must stay gone before its end counts
/// (`GPU_SIDECAR_RESTART_WAIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartWait {
    /// `kubelet`: the kubelet's back-off after `n` restarts ([`KUBELET_BACK_OFF`] × 2^n, at most
    /// [`KUBELET_MAX_BACK_OFF`]) plus [`KUBELET_START_MARGIN`].
    #[default]
    Kubelet,
    /// A fixed duration.
    Fixed(Duration),
}

impl RestartWait {
    /// The wait after the trainer ended, `restarts` restarts seen since the back-off was last
    /// reset.
    pub fn after(self, restarts: u32) -> Duration {
        match self {
            RestartWait::Kubelet => {
                let back_off = KUBELET_BACK_OFF
                    .checked_mul(1u32.checked_shl(restarts).unwrap_or(u32::MAX))
                    .unwrap_or(KUBELET_MAX_BACK_OFF)
                    .min(KUBELET_MAX_BACK_OFF);
                back_off + KUBELET_START_MARGIN
            }
            RestartWait::Fixed(d) => d,
        }
    }
}

/// What the agent ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Follow {
    /// The pod's other containers (`GPU_SIDECAR_EXIT_WITH_CONTAINERS=true`).
    Containers,
    /// A process name (`GPU_SIDECAR_EXIT_WITH_PROCESS`).
    Process(String),
}

/// The agent itself, as the scan tells its processes from the other containers'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    /// The agent's PID (in the namespace `/proc` shows).
    pub pid: u32,
    /// Its `/proc/self/cgroup` (`None`: unreadable; then only its PID is its own).
    pub cgroup: Option<String>,
    /// Whether PID 1 is the pod's infra process (in a Kubernetes pod), not a container's.
    pub pid1_is_infra: bool,
}

impl Me {
    /// The running agent: `/proc/self`, and whether it runs in Kubernetes.
    pub fn current(proc_root: &Path, in_kubernetes: bool) -> Self {
        Self {
            pid: std::process::id(),
            cgroup: std::fs::read_to_string(proc_root.join("self/cgroup")).ok(),
            pid1_is_infra: in_kubernetes,
        }
    }
}

/// One scan of `/proc`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scan {
    /// Live processes of the other containers.
    pub others: usize,
    /// Live processes named as [`Follow::Process`] says (in any container, the agent's
    /// included: outside a pod every process shares its cgroup).
    pub named: usize,
}

/// Whether a process is alive: not a zombie (`Z`) nor dead (`X`), per `/proc/<pid>/stat`.
fn alive(dir: &Path) -> bool {
    let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
        return false;
    };
    // `pid (comm) state …`: comm may hold spaces and parentheses; the state follows the last `)`.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X" | "x") | None)
}

/// Scans `proc_root` for the processes of the other containers, and those named `name`.
pub fn scan(proc_root: &Path, me: &Me, name: Option<&str>) -> Scan {
    let mut out = Scan::default();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|f| f.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me.pid || (pid == 1 && me.pid1_is_infra) {
            continue;
        }
        let dir = e.path();
        if !alive(&dir) {
            continue;
        }
        if let Some(name) = name {
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            if comm.trim_end_matches('\n') == name {
                out.named += 1;
            }
        }
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).ok();
        if me.cgroup.is_none() || cgroup != me.cgroup {
            out.others += 1;
        }
    }
    out
}

/// Why the agent ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The other containers' processes, seen, are gone.
    ContainersEnded,
    /// None was there at the first scan: they ended before the agent started.
    EndedBeforeStart,
    /// The named process, seen once, is gone.
    ProcessEnded,
    /// `OnFailure`: gone, and not restarted within the kubelet's back-off.
    NotRestarted,
}

impl End {
    /// The shutdown reason as logged.
    pub fn as_str(self) -> &'static str {
        match self {
            End::ContainersEnded => "the pod's other containers ended",
            End::EndedBeforeStart => "the pod's other containers ended before the agent started",
            End::ProcessEnded => "the training process ended",
            End::NotRestarted => "the pod's other containers ended for good: not restarted within the kubelet's restart back-off (restartPolicy OnFailure)",
        }
    }
}

/// `OnFailure`: the restarts seen and the end being waited out.
#[derive(Debug, Clone)]
struct Restarts {
    wait: RestartWait,
    /// Restarts seen since the kubelet's back-off was last reset.
    count: u32,
    /// When the trainer was last seen (re)started (the first scan for the first run).
    running_since: Option<Instant>,
    /// When its end was first seen, while waiting for a restart.
    gone_since: Option<Instant>,
    /// Whether that end was the containers' (else only the named process's).
    containers_gone: bool,
}

/// The decision over successive scans.
#[derive(Debug, Clone)]
pub struct Watch {
    follow: Follow,
    /// Whether, in a pod, no process of the other containers ends the watch.
    in_pod: bool,
    scans: u64,
    seen_named: bool,
    /// `OnFailure` only.
    restarts: Option<Restarts>,
}

impl Watch {
    /// A watch of `follow`; `in_pod`: the agent is in a Kubernetes pod with a shared process
    /// namespace. The trainer's end is final (`restartPolicy: Never`).
    pub fn new(follow: Follow, in_pod: bool) -> Self {
        Self {
            follow,
            in_pod,
            scans: 0,
            seen_named: false,
            restarts: None,
        }
    }

    /// The same for a pod with `restartPolicy: OnFailure`: an end counts once it has lasted
    /// `wait`.
    pub fn on_failure(mut self, wait: RestartWait) -> Self {
        self.restarts = Some(Restarts {
            wait,
            count: 0,
            running_since: None,
            gone_since: None,
            containers_gone: false,
        });
        self
    }

    /// Takes one scan made at `now`; `Some` when the agent is to end.
    pub fn observe_at(&mut self, s: Scan, now: Instant) -> Option<End> {
        if let Some(r) = &mut self.restarts {
            r.running_since.get_or_insert(now);
            // Back from an end being waited out: the containers restarted (or, if only the
            // named process had gone, that process again).
            let back = match r.gone_since {
                Some(_) if r.containers_gone => s.others > 0,
                Some(_) => s.named > 0,
                None => false,
            };
            if let (true, Some(since)) = (back, r.gone_since) {
                let ran = since.saturating_duration_since(r.running_since.unwrap_or(since));
                // The kubelet resets its back-off for a container that ran ten minutes.
                r.count = if ran >= KUBELET_BACK_OFF_RESET {
                    1
                } else {
                    r.count + 1
                };
                r.gone_since = None;
                r.running_since = Some(now);
                self.seen_named = false;
                tracing::info!(
                    restarts = r.count,
                    "the pod's other containers are back (restarted by the kubelet): the agent goes on"
                );
            }
        }
        let in_pod = self.in_pod;
        let end = self.observe(s);
        let Some(r) = &mut self.restarts else {
            return end;
        };
        match (end, r.gone_since) {
            (Some(_), None) => {
                r.gone_since = Some(now);
                r.containers_gone = in_pod && s.others == 0;
                let wait = r.wait.after(r.count);
                tracing::info!(
                    wait = %humantime::format_duration(wait),
                    "the trainer ended; restartPolicy OnFailure: the agent waits {} for the kubelet to restart it before it ends",
                    humantime::format_duration(wait)
                );
                wait.is_zero().then_some(End::NotRestarted)
            }
            // Only the named process had gone, and now its container has ended too: the
            // kubelet's back-off starts from this end, and so does the wait.
            (Some(_), Some(_)) if in_pod && !r.containers_gone && s.others == 0 => {
                r.gone_since = Some(now);
                r.containers_gone = true;
                r.wait.after(r.count).is_zero().then_some(End::NotRestarted)
            }
            (Some(_), Some(since)) => (now.saturating_duration_since(since)
                >= r.wait.after(r.count))
            .then_some(End::NotRestarted),
            (None, _) => {
                r.gone_since = None;
                None
            }
        }
    }

    /// The process name to count, if any.
    pub fn name(&self) -> Option<&str> {
        match &self.follow {
            Follow::Process(n) => Some(n),
            Follow::Containers => None,
        }
    }

    /// Takes one scan; `Some` when the trainer has ended (final with `restartPolicy: Never`;
    /// [`Watch::observe_at`] waits out `OnFailure`'s restarts).
    pub fn observe(&mut self, s: Scan) -> Option<End> {
        let first = self.scans == 0;
        self.scans += 1;
        let none_left = s.others == 0;
        match &self.follow {
            Follow::Containers if none_left && first => Some(End::EndedBeforeStart),
            Follow::Containers if none_left => Some(End::ContainersEnded),
            Follow::Containers => None,
            Follow::Process(name) => {
                if s.named > 0 && !self.seen_named {
                    tracing::info!(
                        process = %name,
                        "watching the training process; the agent exits when it ends"
                    );
                    self.seen_named = true;
                }
                if self.seen_named && s.named == 0 {
                    Some(End::ProcessEnded)
                } else if self.in_pod && none_left {
                    Some(if first {
                        End::EndedBeforeStart
                    } else {
                        End::ContainersEnded
                    })
                } else {
                    None
                }
            }
        }
    }
}

/// Starts the thread `exit-watch` scanning `proc_root` for `follow`; the returned receiver
/// gets the reason once the agent is to end. Without a shared process namespace (the agent
/// is PID 1) it logs why and never sends.
///
/// # Panics
/// If the OS refuses to create a thread.
pub fn start(
    follow: Follow,
    in_kubernetes: bool,
    proc_root: PathBuf,
    on_failure: Option<RestartWait>,
) -> tokio::sync::oneshot::Receiver<End> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let me = Me::current(&proc_root, in_kubernetes);
    let setting = match &follow {
        Follow::Containers => "GPU_SIDECAR_EXIT_WITH_CONTAINERS",
        Follow::Process(_) => "GPU_SIDECAR_EXIT_WITH_PROCESS",
    };
    if me.pid == 1 {
        tracing::error!(
            "{setting}: the agent is PID 1, alone in its process namespace, so the trainer's processes cannot be seen and the agent does not end by itself: the pod needs shareProcessNamespace: true (the chart's classic mode sets it)"
        );
        // Keep the sender: a dropped one would read as "ended".
        std::mem::forget(tx);
        return rx;
    }
    let mut watch = Watch::new(follow.clone(), in_kubernetes);
    if let Some(wait) = on_failure {
        watch = watch.on_failure(wait);
    }
    std::thread::Builder::new()
        .name("exit-watch".into())
        .spawn(move || {
            let first = scan(&proc_root, &me, watch.name());
            if follow == Follow::Containers && first.others > 0 {
                tracing::info!(
                    processes = first.others,
                    "watching the pod's other containers; the agent exits when none of their processes is left"
                );
            }
            let mut s = first;
            loop {
                if let Some(end) = watch.observe_at(s, Instant::now()) {
                    tracing::info!(reason = end.as_str(), "{}", end.as_str());
                    let _ = tx.send(end);
                    return;
                }
                std::thread::sleep(POLL);
                s = scan(&proc_root, &me, watch.name());
            }
        })
        .expect("spawn exit-watch thread");
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake `/proc`: (pid, comm, state, cgroup), removed when the guard drops.
    fn fake(procs: &[(u32, &str, &str, &str)]) -> tempfile::TempDir {
        let guard = tempfile::tempdir().unwrap();
        let root = guard.path();
        for (pid, comm, state, cgroup) in procs {
            let dir = root.join(pid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(dir.join("stat"), format!("{pid} ({comm}) {state} 0 0 0")).unwrap();
            std::fs::write(dir.join("cgroup"), format!("0::{cgroup}\n")).unwrap();
        }
        std::fs::create_dir_all(root.join("self")).unwrap();
        guard
    }

    fn me(pid: u32) -> Me {
        Me {
            pid,
            cgroup: Some("0::/\n".into()),
            pid1_is_infra: true,
        }
    }

    #[test]
    fn other_containers_are_told_by_their_cgroup() {
        let guard = fake(&[
            (1, "pause", "S", "/../sandbox"),
            (7, "torchrun", "S", "/../trainer"),
            (9, "python3", "R", "/../trainer"),
            (12, "python3", "Z", "/../trainer"),
            (20, "gpu-otel-sidecar", "S", "/"),
            (31, "gpu-otel-sideca", "S", "/"),
            (33, "python3", "S", "/"),
        ]);
        let root = guard.path();
        assert_eq!(
            scan(root, &me(20), Some("python3")),
            Scan {
                others: 2,
                named: 2
            }
        );
        // Outside Kubernetes PID 1 is a container's process (compose: the trainer).
        let compose = Me {
            pid1_is_infra: false,
            ..me(20)
        };
        assert_eq!(scan(root, &compose, None).others, 3);
        assert_eq!(scan(root, &compose, Some("pause")).named, 1);
        // Without its own cgroup, only the agent's PID is its own.
        let unknown = Me {
            cgroup: None,
            ..me(20)
        };
        assert_eq!(scan(root, &unknown, None).others, 4);
    }

    #[test]
    fn containers_end_when_none_is_left_or_at_once_when_none_was_there() {
        let some = Scan {
            others: 2,
            named: 0,
        };
        let none = Scan::default();
        let mut w = Watch::new(Follow::Containers, true);
        assert_eq!(w.observe(some), None);
        assert_eq!(w.observe(some), None);
        assert_eq!(w.observe(none), Some(End::ContainersEnded));
        let mut w = Watch::new(Follow::Containers, true);
        assert_eq!(w.observe(none), Some(End::EndedBeforeStart));
    }

    /// `OnFailure`: the trainer gone and back twice (the kubelet's restarts) does not end the
    /// watch; gone longer than the back-off after the restarts seen does. The kubelet's
    /// schedule: 10 s doubling to 5 min, plus the margin; reset after ten minutes of running.
    #[test]
    fn on_failure_waits_out_the_kubelets_back_off() {
        let some = Scan {
            others: 2,
            named: 0,
        };
        let none = Scan::default();
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut w = Watch::new(Follow::Containers, true).on_failure(RestartWait::Kubelet);
        assert_eq!(w.observe_at(some, s(0)), None);
        assert_eq!(
            w.observe_at(none, s(10)),
            None,
            "first end: waits 10 s + 20 s"
        );
        assert_eq!(w.observe_at(none, s(39)), None);
        assert_eq!(w.observe_at(some, s(40)), None, "first restart");
        assert_eq!(w.observe_at(none, s(50)), None);
        assert_eq!(
            w.observe_at(none, s(89)),
            None,
            "after one restart: 20 s + 20 s"
        );
        assert_eq!(w.observe_at(some, s(90)), None, "second restart");
        assert_eq!(w.observe_at(none, s(100)), None);
        assert_eq!(w.observe_at(none, s(159)), None, "after two: 40 s + 20 s");
        assert_eq!(w.observe_at(none, s(160)), Some(End::NotRestarted));
        // Many restarts: at most 5 min + 20 s.
        assert_eq!(RestartWait::Kubelet.after(9), Duration::from_secs(320));
        assert_eq!(RestartWait::Kubelet.after(40), Duration::from_secs(320));
        // A run of ten minutes resets the back-off.
        let mut w = Watch::new(Follow::Containers, true).on_failure(RestartWait::Kubelet);
        for (at, scan) in [(0, some), (5, none), (6, some), (7, none), (8, some)] {
            assert_eq!(w.observe_at(scan, s(at)), None);
        }
        assert_eq!(w.observe_at(none, s(700)), None);
        assert_eq!(
            w.observe_at(some, s(710)),
            None,
            "restart after a long run: count 1"
        );
        assert_eq!(w.observe_at(none, s(720)), None);
        assert_eq!(
            w.observe_at(none, s(760)),
            Some(End::NotRestarted),
            "20 s + 20 s"
        );
        // A fixed wait; and a trainer gone before the first scan waits too.
        let mut w = Watch::new(Follow::Containers, true)
            .on_failure(RestartWait::Fixed(Duration::from_secs(3)));
        assert_eq!(w.observe_at(none, s(0)), None);
        assert_eq!(w.observe_at(none, s(3)), Some(End::NotRestarted));
        // Never: the first end is final, as before.
        let mut w = Watch::new(Follow::Containers, true);
        assert_eq!(w.observe_at(some, s(0)), None);
        assert_eq!(w.observe_at(none, s(1)), Some(End::ContainersEnded));
    }

    /// `OnFailure` with a process name: a restarted container's launcher, before the named
    /// process is seen again, is a restart, not the process's end.
    #[test]
    fn on_failure_follows_a_name_through_restarts() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let running = Scan {
            others: 3,
            named: 1,
        };
        let launcher = Scan {
            others: 1,
            named: 0,
        };
        let wait = RestartWait::Fixed(Duration::from_secs(5));
        let mut w = Watch::new(Follow::Process("python".into()), true).on_failure(wait);
        assert_eq!(w.observe_at(running, s(0)), None);
        assert_eq!(w.observe_at(Scan::default(), s(1)), None, "gone: waiting");
        assert_eq!(
            w.observe_at(launcher, s(2)),
            None,
            "restarted: the launcher first"
        );
        assert_eq!(w.observe_at(launcher, s(3)), None);
        assert_eq!(w.observe_at(running, s(4)), None);
        assert_eq!(
            w.observe_at(launcher, s(5)),
            None,
            "python gone, container alive: waiting"
        );
        assert_eq!(w.observe_at(launcher, s(10)), Some(End::NotRestarted));
    }

    /// `OnFailure` with a process name, whose container goes on a little after it (`python
    /// train.py; upload.sh`, a launcher's cleanup): the kubelet's back-off starts when the
    /// container ends, so the wait starts again then. Before, it counted from the process's
    /// end only, and a container restarted within the wait after its own end, but not after
    /// the process's, lost its sidecar just before. (A container that goes on longer than the
    /// wait after its process ended ends the sidecar, as before: the process has not come
    /// back.)
    #[test]
    fn on_failure_counts_the_wait_from_the_containers_end() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let running = Scan {
            others: 3,
            named: 1,
        };
        let uploading = Scan {
            others: 1,
            named: 0,
        };
        let wait = RestartWait::Fixed(Duration::from_secs(5));
        let mut w = Watch::new(Follow::Process("python".into()), true).on_failure(wait);
        assert_eq!(w.observe_at(running, s(0)), None);
        for at in 1..=3 {
            assert_eq!(
                w.observe_at(uploading, s(at)),
                None,
                "python failed at 1 s, the container still uploads at {at} s"
            );
        }
        for at in 4..=8 {
            assert_eq!(
                w.observe_at(Scan::default(), s(at)),
                None,
                "the container ended at 4 s; at {at} s"
            );
        }
        assert_eq!(w.observe_at(uploading, s(9)), None, "restarted");
        assert_eq!(w.observe_at(running, s(11)), None, "python again");
        // Its last end: python at 20, the container at 21, and 5 s after that.
        assert_eq!(w.observe_at(uploading, s(20)), None);
        assert_eq!(w.observe_at(Scan::default(), s(21)), None);
        assert_eq!(w.observe_at(Scan::default(), s(25)), None);
        assert_eq!(
            w.observe_at(Scan::default(), s(26)),
            Some(End::NotRestarted)
        );
        // A container that outlives the wait after its process: ended, as before.
        let mut w = Watch::new(Follow::Process("python".into()), true).on_failure(wait);
        assert_eq!(w.observe_at(running, s(0)), None);
        assert_eq!(w.observe_at(uploading, s(1)), None);
        assert_eq!(w.observe_at(uploading, s(6)), Some(End::NotRestarted));
    }

    #[test]
    fn a_name_is_followed_once_seen_and_in_a_pod_with_the_containers() {
        let running = Scan {
            others: 3,
            named: 1,
        };
        let launcher_only = Scan {
            others: 1,
            named: 0,
        };
        let mut w = Watch::new(Follow::Process("python".into()), false);
        assert_eq!(w.observe(launcher_only), None, "not seen yet");
        assert_eq!(w.observe(running), None);
        assert_eq!(w.observe(launcher_only), Some(End::ProcessEnded));
        // Outside a pod, nothing else ends it.
        let mut w = Watch::new(Follow::Process("python".into()), false);
        assert_eq!(w.observe(Scan::default()), None);
        // In a pod, the trainer's container gone ends it, seen or not.
        let mut w = Watch::new(Follow::Process("python".into()), true);
        assert_eq!(w.observe(Scan::default()), Some(End::EndedBeforeStart));
        let mut w = Watch::new(Follow::Process("python".into()), true);
        assert_eq!(w.observe(launcher_only), None);
        assert_eq!(w.observe(Scan::default()), Some(End::ContainersEnded));
    }
}
