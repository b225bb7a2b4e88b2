//! The agent binary as a child process: a clean environment in, captured output out.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::receiver::Receiver;

/// Variables passed through from the test's environment; everything else is dropped, so that
/// no `OTEL_*`, `GPU_SIDECAR_*`, `K8S_*` or `RUST_LOG` of the developer's shell leaks in.
/// (`LLVM_PROFILE_FILE` keeps coverage runs working.)
const PASSED_THROUGH: &[&str] = &["PATH", "HOME", "LLVM_PROFILE_FILE"];

/// Makes `command`'s child start with only the descriptors it is given (stdin, stdout,
/// stderr): every other descriptor the test process holds without `O_CLOEXEC` (one a shell
/// opened before `cargo test`, `exec 3>>file`, `/usr/bin/time -o FILE cargo test`) is marked
/// close-on-exec in the child before it execs, so the program under test is judged on what
/// it opened itself. Rust's own descriptors are close-on-exec already.
pub fn no_inherited_descriptors(command: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (close_range(2), fcntl(2), getrlimit(2)); it allocates
    // nothing and touches no lock.
    unsafe {
        command.pre_exec(|| {
            const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
            let marked = libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_uint,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            ) == 0;
            if !marked {
                // Kernels before 5.11: every possible descriptor, one by one.
                let mut limit = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                    limit.rlim_cur.min(1 << 20) as libc::c_int
                } else {
                    4096
                };
                for fd in 3..max {
                    let flags = libc::fcntl(fd, libc::F_GETFD);
                    if flags >= 0 {
                        libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
                    }
                }
            }
            Ok(())
        })
    }
}

/// Opens `path` for appending the way a shell's `exec 3>>path` or `/usr/bin/time -o path`
/// leaves it to every later child: without close-on-exec. For tests that check that the
/// program under test does not get it ([`no_inherited_descriptors`]).
///
/// # Panics
/// If the file cannot be opened or its flags cannot be changed.
pub fn inheritable_file_for_writing(path: &Path) -> std::fs::File {
    use std::os::fd::AsRawFd as _;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
    // SAFETY: fcntl(2) on a descriptor this function owns.
    let cleared = unsafe {
        let flags = libc::fcntl(file.as_raw_fd(), libc::F_GETFD);
        flags >= 0 && libc::fcntl(file.as_raw_fd(), libc::F_SETFD, flags & !libc::FD_CLOEXEC) == 0
    };
    assert!(cleared, "cannot clear FD_CLOEXEC on {}", path.display());
    file
}

/// Builds an [`Agent`]: `Agent::builder().otlp(&rx).env("K", "V").env_mock("x.json").spawn()`.
///
/// Later settings of the same variable replace earlier ones.
#[derive(Debug, Clone)]
pub struct AgentBuilder {
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    echo: bool,
}

impl AgentBuilder {
    /// Sets one environment variable.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Sets several environment variables.
    pub fn envs<K, V>(mut self, vars: impl IntoIterator<Item = (K, V)>) -> Self
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (key, value) in vars {
            self = self.env(key, value);
        }
        self
    }

    /// Points the agent's OTLP exporter at `receiver` (`OTEL_EXPORTER_OTLP_ENDPOINT` and
    /// `OTEL_EXPORTER_OTLP_PROTOCOL`, see [`Receiver::otlp_env`]).
    pub fn otlp(self, receiver: &Receiver) -> Self {
        self.envs(receiver.otlp_env())
    }

    /// Loads the mock NVML library replaying scenario `tests/scenarios/<scenario_name>`:
    /// sets `GPU_SIDECAR_NVML_LIBRARY` to the mock under NVIDIA's library name
    /// ([`mock_as_nvidia_library`](super::paths::mock_as_nvidia_library), built on first use) and `NVML_MOCK_SCENARIO` to [`scenario`](super::scenario)`(scenario_name)`.
    pub fn env_mock(self, scenario_name: &str) -> Self {
        self.env_mock_path(super::scenario(scenario_name))
    }

    /// As [`AgentBuilder::env_mock`], with a scenario path anywhere (e.g. under
    /// [`fixture_dir`](super::fixture_dir)).
    pub fn env_mock_path(self, scenario: impl AsRef<Path>) -> Self {
        self.env(
            "GPU_SIDECAR_NVML_LIBRARY",
            super::paths::mock_as_nvidia_library(),
        )
        .env("NVML_MOCK_SCENARIO", scenario.as_ref())
    }

    /// Adds a command-line argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds command-line arguments.
    pub fn args<A: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = A>) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Runs another program instead of the agent binary (same environment handling).
    pub fn program(mut self, program: impl AsRef<Path>) -> Self {
        self.program = program.as_ref().to_owned();
        self
    }

    /// Whether each output line is also printed to the test's stderr as
    /// `[agent stderr] ...` (default true; the test harness shows it only for failing tests).
    pub fn echo(mut self, echo: bool) -> Self {
        self.echo = echo;
        self
    }

    /// Starts the process.
    ///
    /// # Panics
    /// If the program cannot be started.
    pub fn spawn(self) -> Agent {
        let mut command = Command::new(&self.program);
        no_inherited_descriptors(&mut command)
            .args(&self.args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for key in PASSED_THROUGH {
            if let Some(value) = std::env::var_os(key) {
                command.env(key, value);
            }
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.program.display()));
        let stdout = Arc::new(Lines::default());
        let stderr = Arc::new(Lines::default());
        let readers = vec![
            read_lines(
                child.stdout.take().expect("piped stdout"),
                stdout.clone(),
                self.echo.then_some("[agent stdout]"),
            ),
            read_lines(
                child.stderr.take().expect("piped stderr"),
                stderr.clone(),
                self.echo.then_some("[agent stderr]"),
            ),
        ];
        Agent {
            child,
            status: None,
            stdout,
            stderr,
            _readers: readers,
        }
    }
}

/// Lines captured from one pipe.
#[derive(Default)]
struct Lines {
    state: Mutex<LinesState>,
    changed: Condvar,
}

#[derive(Default)]
struct LinesState {
    lines: Vec<String>,
    /// The pipe reached end of file: no more lines will come.
    closed: bool,
}

impl Lines {
    fn lock(&self) -> MutexGuard<'_, LinesState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn snapshot(&self) -> Vec<String> {
        self.lock().lines.clone()
    }

    /// Waits until a line contains `needle`, the pipe closes, or `timeout` passes.
    fn wait_for(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        let mut checked = 0;
        loop {
            if state.lines[checked..].iter().any(|l| l.contains(needle)) {
                return true;
            }
            checked = state.lines.len();
            let now = Instant::now();
            if state.closed || now >= deadline {
                return false;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Waits until the pipe closes or `timeout` passes.
    fn wait_closed(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        while !state.closed {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

fn read_lines(
    pipe: impl Read + Send + 'static,
    sink: Arc<Lines>,
    echo_prefix: Option<&'static str>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("agent-output".into())
        .spawn(move || {
            let mut reader = BufReader::new(pipe);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        let line = line.trim_end_matches(['\n', '\r']).to_owned();
                        if let Some(prefix) = echo_prefix {
                            eprintln!("{prefix} {line}");
                        }
                        sink.lock().lines.push(line);
                        sink.changed.notify_all();
                    }
                }
            }
            sink.lock().closed = true;
            sink.changed.notify_all();
        })
        .expect("spawn output reader thread")
}

/// A running agent process (see [`AgentBuilder`]). Dropping it kills the process if it is
/// still running.
///
/// All waits are blocking calls: fine in plain tests and in multi-thread tokio tests.
pub struct Agent {
    child: Child,
    status: Option<ExitStatus>,
    stdout: Arc<Lines>,
    stderr: Arc<Lines>,
    _readers: Vec<JoinHandle<()>>,
}

impl Agent {
    /// A builder for the agent binary (`CARGO_BIN_EXE_gpu-otel-sidecar`), with an environment
    /// of only `PATH` and `HOME` (and `LLVM_PROFILE_FILE` if set) until more is added, plus
    /// `GPU_SIDECAR_HEALTH_ADDR=127.0.0.1:0` (a free port per agent, so that agents of
    /// parallel tests do not fight over the default 13134; see [`Agent::health_url`]).
    pub fn builder() -> AgentBuilder {
        AgentBuilder {
            program: PathBuf::from(env!("CARGO_BIN_EXE_gpu-otel-sidecar")),
            args: Vec::new(),
            env: vec![("GPU_SIDECAR_HEALTH_ADDR".into(), "127.0.0.1:0".into())],
            echo: true,
        }
    }

    /// `http://127.0.0.1:PORT`: the health endpoint's base URL, from the agent's
    /// `health endpoint listening on http://…` log line (waits up to `timeout` for it).
    pub fn health_url(&self, timeout: Duration) -> Option<String> {
        const NEEDLE: &str = "health endpoint listening on ";
        if !self.wait_for_stderr(NEEDLE, timeout) {
            return None;
        }
        self.stderr_lines().iter().find_map(|l| {
            let rest = &l[l.find(NEEDLE)? + NEEDLE.len()..];
            Some(rest.split_whitespace().next()?.to_string())
        })
    }

    /// Starts the agent with the given environment variables (on top of the minimal one).
    pub fn spawn<K: AsRef<OsStr>, V: AsRef<OsStr>>(env: impl IntoIterator<Item = (K, V)>) -> Agent {
        Agent::builder().envs(env).spawn()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every stdout line so far (without line endings).
    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.snapshot()
    }

    /// Every stderr line so far (without line endings).
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.snapshot()
    }

    /// Waits until a stdout line contains `needle`; false on timeout or once stdout closed
    /// (the process exited) without such a line.
    pub fn wait_for_stdout(&self, needle: &str, timeout: Duration) -> bool {
        self.stdout.wait_for(needle, timeout)
    }

    /// Waits until a stderr line contains `needle`; false on timeout or once stderr closed
    /// (the process exited) without such a line.
    pub fn wait_for_stderr(&self, needle: &str, timeout: Duration) -> bool {
        self.stderr.wait_for(needle, timeout)
    }

    /// Everything captured so far, for assertion messages.
    pub fn dump(&self) -> String {
        let mut out = String::from("--- agent stdout ---\n");
        for line in self.stdout_lines() {
            out.push_str(&line);
            out.push('\n');
        }
        out.push_str("--- agent stderr ---\n");
        for line in self.stderr_lines() {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    /// Sends SIGTERM (no-op once the process has been reaped).
    pub fn sigterm(&mut self) {
        self.signal(libc::SIGTERM);
    }

    /// Sends SIGINT (no-op once the process has been reaped).
    pub fn sigint(&mut self) {
        self.signal(libc::SIGINT);
    }

    /// Sends `signal` (a `libc::SIG*` number); no-op once the process has been reaped, so a
    /// recycled pid is never hit.
    pub fn signal(&mut self, signal: libc::c_int) {
        if self.try_status().is_none() {
            let pid = libc::pid_t::try_from(self.pid()).expect("pid fits pid_t");
            // SAFETY: kill(2) has no memory-safety preconditions; the child is not reaped yet,
            // so the pid is still ours.
            unsafe {
                libc::kill(pid, signal);
            }
        }
    }

    /// The exit status if the process has exited (reaping it), without waiting.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait on agent");
        }
        self.status
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.try_status().is_none()
    }

    /// Waits up to `timeout` for the process to exit and returns its status, after letting
    /// the output readers drain (so [`Agent::stderr_lines`] is complete). On timeout the process
    /// is killed (SIGKILL) and `None` is returned.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                // A grandchild holding the pipes open must not stall the test for long.
                self.stdout.wait_closed(Duration::from_secs(2));
                self.stderr.wait_closed(Duration::from_secs(2));
                return Some(status);
            }
            if Instant::now() >= deadline {
                self.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills the process (SIGKILL) and reaps it; no-op if it has already exited.
    pub fn kill(&mut self) {
        if self.try_status().is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }

    /// Resident set size in KiB (`VmRSS` from `/proc/<pid>/status`); `None` once the process
    /// has exited.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("pid", &self.child.id())
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}
