//! The container image's contents, run without Docker. `scripts/check-image-rootfs.sh`
//! assembles the root filesystem the Dockerfile would produce (the Debian bookworm packages
//! of `gcr.io/distroless/cc-debian12`, distroless's users, and the release binary where the
//! Dockerfile copies it), then runs these tests with `--ignored` and
//! `GPU_OTEL_SIDECAR_TEST_ROOTFS` set. Each test runs the binary in it through
//! `scripts/run-in-image-rootfs.sh`: UID/GID 65532, no_new_privs, a read-only root, the mock
//! NVML library mounted where the NVIDIA Container Toolkit mounts `libnvidia-ml.so.1`, and
//! the image's environment (distroless's `PATH` and `SSL_CERT_FILE`, the Dockerfile's `ENV`).
//! They need root (mount namespaces), hence `#[ignore]` in a plain `cargo test`.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::pki::Ca;
use common::{read_json, read_text, workspace_root, Agent, AgentBuilder, Protocol, Receiver};
use common::{scenario, ServerTls};
use rcgen::ExtendedKeyUsagePurpose;

const WAIT: Duration = Duration::from_secs(30);
const NEEDS: &str =
    "needs root and an assembled image root filesystem: scripts/check-image-rootfs.sh";
/// Where the NVIDIA Container Toolkit mounts the driver's NVML library in a Debian-based image
/// (a directory of the loader's default search path).
const NVML_IN_IMAGE: &str = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1";
const BUNDLE_IN_IMAGE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The assembled root filesystem (`GPU_OTEL_SIDECAR_TEST_ROOTFS`).
fn rootfs() -> PathBuf {
    let dir = std::env::var_os("GPU_OTEL_SIDECAR_TEST_ROOTFS")
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("GPU_OTEL_SIDECAR_TEST_ROOTFS is not set: these tests {NEEDS}"));
    assert!(
        dir.join("gpu-otel-sidecar").is_file(),
        "{} has no /gpu-otel-sidecar: {NEEDS}",
        dir.display()
    );
    dir
}

/// The mock NVML library (`GPU_OTEL_SIDECAR_TEST_MOCK`, the release build from the script), else
/// the tests' own build.
fn mock() -> PathBuf {
    std::env::var_os("GPU_OTEL_SIDECAR_TEST_MOCK")
        .map(PathBuf::from)
        .unwrap_or_else(common::mock_library)
}

/// The image's environment: distroless's (`PATH`, `SSL_CERT_FILE`; `HOME` of its `nonroot`
/// user) and every `ENV` of the Dockerfile.
fn image_env() -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = [
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("SSL_CERT_FILE", BUNDLE_IN_IMAGE),
        ("HOME", "/home/nonroot"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let dockerfile = read_text(workspace_root().join("Dockerfile"));
    let mut lines = dockerfile.lines();
    while let Some(line) = lines.next() {
        let Some(mut rest) = line.strip_prefix("ENV ") else {
            continue;
        };
        loop {
            let continued = rest.trim_end().ends_with('\\');
            for pair in rest.trim_end().trim_end_matches('\\').split_whitespace() {
                let (k, v) = pair.split_once('=').expect("ENV key=value");
                env.insert(k.to_string(), v.to_string());
            }
            match (continued, lines.next()) {
                (true, Some(next)) => rest = next,
                _ => break,
            }
        }
    }
    assert_eq!(env["NVIDIA_DRIVER_CAPABILITIES"], "utility", "{env:?}");
    env
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A run of `args` in the image: the launcher, its mounts, the image's environment, the
/// H200 recording as the mock's scenario, a health port of its own.
struct Run {
    rw: bool,
    binds: Vec<(PathBuf, &'static str, bool)>,
    env: BTreeMap<String, String>,
}

impl Run {
    fn new() -> Self {
        let mut env = image_env();
        env.insert(
            "GPU_SIDECAR_HEALTH_ADDR".into(),
            format!("127.0.0.1:{}", free_port()),
        );
        env.insert(
            "NVML_MOCK_SCENARIO".into(),
            "/mnt/scenarios/h200-under-load.json".into(),
        );
        Self {
            rw: false,
            binds: vec![
                (mock(), NVML_IN_IMAGE, false),
                (scenario(""), "/mnt/scenarios", false),
            ],
            env,
        }
    }

    fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    fn otlp(mut self, rx: &Receiver) -> Self {
        self.env.extend(rx.otlp_env());
        self
    }

    fn bind(mut self, src: impl Into<PathBuf>, dst: &'static str, writable: bool) -> Self {
        self.binds.push((src.into(), dst, writable));
        self
    }

    fn launcher_args(&self, command: &[&str]) -> Vec<String> {
        let mut args = vec![workspace_root()
            .join("scripts/run-in-image-rootfs.sh")
            .display()
            .to_string()];
        if self.rw {
            args.push("--rw".into());
        }
        for (src, dst, writable) in &self.binds {
            args.push(if *writable { "--bind-rw" } else { "--bind" }.into());
            args.push(format!("{}:{dst}", src.display()));
        }
        args.push(rootfs().display().to_string());
        args.push("--".into());
        args.extend(command.iter().map(|s| s.to_string()));
        args
    }

    /// The agent (`/gpu-otel-sidecar`, the Dockerfile's ENTRYPOINT), started.
    fn spawn(&self) -> Agent {
        self.builder(&["/gpu-otel-sidecar"]).spawn()
    }

    fn builder(&self, command: &[&str]) -> AgentBuilder {
        Agent::builder()
            .program("bash")
            .args(self.launcher_args(command))
            .envs(self.env.clone())
    }

    /// Runs `command` to its end in the image: (exit code, stdout, stderr).
    fn output(&self, command: &[&str]) -> (Option<i32>, String, String) {
        let out = Command::new("bash")
            .args(self.launcher_args(command))
            .env_clear()
            .envs(self.env.clone())
            .output()
            .expect("run the launcher");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// `/proc/<pid>/status` fields of the agent (the launcher `exec`s all the way, so the
/// child's pid is the agent's).
fn proc_status(agent: &Agent) -> BTreeMap<String, String> {
    read_text(format!("/proc/{}/status", agent.pid()))
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn stop_ok(agent: &mut Agent) {
    agent.sigterm();
    let code = agent.wait_exit(WAIT).and_then(|s| s.code());
    assert_eq!(code, Some(0), "{}", agent.dump());
}

/// Starts in the image as 65532 with a read-only root, reads the mock through the toolkit's
/// mount point, exports the recording's values to a receiver on loopback, and answers
/// `gpu-otel-sidecar health` (the Dockerfile's HEALTHCHECK) from a second process in the
/// image.
#[test]
#[ignore = "needs root and an assembled image root filesystem: scripts/check-image-rootfs.sh"]
fn starts_exports_and_answers_health_as_the_image_runs_it() {
    let rx = Receiver::start(Protocol::Grpc);
    let run = Run::new()
        .otlp(&rx)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "250ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "500");
    let mut agent = run.spawn();
    assert!(rx.wait_for_metric("hw.power", WAIT), "{}", agent.dump());
    let status = proc_status(&agent);
    assert_eq!(status["Uid"], "65532\t65532\t65532\t65532", "{status:?}");
    assert_eq!(status["Gid"], "65532\t65532\t65532\t65532", "{status:?}");
    assert_eq!(status["NoNewPrivs"], "1");
    assert_eq!(status["CapEff"], "0000000000000000");
    let root = std::fs::read_link(format!("/proc/{}/root", agent.pid())).unwrap();
    assert_eq!(root, rootfs());

    // The recording's power (690-693 W under load), from NVML as mounted by the toolkit.
    let power = rx.last_points("hw.power");
    let w = power[0].value;
    assert!((680.0..700.0).contains(&w), "{w} W");
    assert_eq!(
        power[0].attr("hw.id"),
        Some("GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5")
    );
    let (code, body, err) = run.output(&["/gpu-otel-sidecar", "health"]);
    assert_eq!(code, Some(0), "health: {body}{err}\n{}", agent.dump());
    let body: serde_json::Value = serde_json::from_str(&body).expect("the /readyz body");
    assert_eq!(body["status"], "ready", "{body:#}");
    assert_eq!(body["checks"]["nvml"]["gpus"], 1, "{body:#}");
    stop_ok(&mut agent);
    assert!(
        !agent.dump().contains("Read-only file system"),
        "{}",
        agent.dump()
    );
}

/// Every file of the root filesystem: (size, modification time, mode), without the mount
/// points of the run.
fn tree(root: &Path) -> BTreeMap<PathBuf, (u64, SystemTime, u32)> {
    use std::os::unix::fs::MetadataExt;
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (u64, SystemTime, u32)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if ["proc", "dev", "sys", "mnt"]
                .iter()
                .any(|m| rel.starts_with(m))
            {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            out.insert(rel, (meta.len(), meta.modified().unwrap(), meta.mode()));
            if meta.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// With a writable root (where UID 65532 may write in `/tmp` and `/home/nonroot`), the
/// agent writes nothing there: only the run report and the sample log, in the volume they
/// were asked for (docs/kubernetes.md, "Least privilege").
#[test]
#[ignore = "needs root and an assembled image root filesystem: scripts/check-image-rootfs.sh"]
fn writes_only_the_files_it_is_asked_for() {
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().to_path_buf();
    std::os::unix::fs::chown(&out, Some(65532), Some(65532)).unwrap();
    let before = tree(&rootfs());
    let rx = Receiver::start(Protocol::Http);
    let mut run = Run::new()
        .otlp(&rx)
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "250ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "500")
        .env("GPU_SIDECAR_REPORT_FILE", "/mnt/out/report.json")
        .env("GPU_SIDECAR_SAMPLE_LOG", "/mnt/out/samples.csv")
        .bind(&out, "/mnt/out", true);
    run.rw = true;
    let mut agent = run.spawn();
    assert!(rx.wait_for_metric("hw.power", WAIT), "{}", agent.dump());
    assert!(
        rx.wait_until(WAIT, |r| r.metrics_requests().len() >= 3),
        "{}",
        agent.dump()
    );
    stop_ok(&mut agent);
    let after = tree(&rootfs());
    let changed: Vec<_> = after
        .iter()
        .filter(|(p, v)| before.get(*p) != Some(v))
        .map(|(p, _)| p)
        .chain(before.keys().filter(|p| !after.contains_key(*p)))
        .collect();
    assert!(changed.is_empty(), "the agent changed {changed:?}");
    let mut written: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written, ["report.json", "samples.csv"]);
    let report = read_json(out.join("report.json"));
    assert_eq!(
        report["gpus"][0]["uuid"],
        "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5"
    );
    assert!(read_text(out.join("samples.csv")).starts_with("timestamp,gpu_index,"));
}

/// A receiver serving TLS with a certificate of a new CA, and the image's CA bundle with that
/// CA appended (as a user adds a private CA to the image's bundle), written to a file.
fn tls_receiver(protocol: Protocol, dir: &Path) -> (Receiver, PathBuf) {
    let ca = Ca::new("private collector CA");
    let (cert_pem, key_pem) = ca.issue(&["127.0.0.1"], ExtendedKeyUsagePurpose::ServerAuth);
    let rx = Receiver::start_tls(
        protocol,
        ServerTls {
            cert_pem,
            key_pem,
            client_ca_pem: None,
        },
    );
    let image_bundle = read_text(rootfs().join(BUNDLE_IN_IMAGE.trim_start_matches('/')));
    assert!(
        image_bundle.matches("BEGIN CERTIFICATE").count() > 100,
        "the image's bundle holds Debian's CAs"
    );
    let bundle = dir.join(format!("bundle-{protocol:?}.crt"));
    std::fs::write(&bundle, format!("{image_bundle}{}", ca.cert.pem())).unwrap();
    (rx, bundle)
}

/// `https://` over gRPC and HTTP, trusting what the image's CA bundle (at distroless's path,
/// named by its `SSL_CERT_FILE`) holds: metrics arrive.
#[test]
#[ignore = "needs root and an assembled image root filesystem: scripts/check-image-rootfs.sh"]
fn https_works_with_the_images_ca_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    for protocol in [Protocol::Grpc, Protocol::Http] {
        let (rx, bundle) = tls_receiver(protocol, dir);
        assert!(rx.endpoint().starts_with("https://"));
        let mut agent = Run::new()
            .otlp(&rx)
            .env("GPU_SIDECAR_SAMPLE_INTERVAL", "250ms")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "500")
            .bind(&bundle, BUNDLE_IN_IMAGE, false)
            .spawn();
        assert!(
            rx.wait_for_metric("hw.power", WAIT),
            "{protocol:?}\n{}",
            agent.dump()
        );
        stop_ok(&mut agent);
        assert!(!agent.dump().contains("export failed"), "{}", agent.dump());
    }
}

/// The same `https://` endpoints in an image without a CA bundle (an empty `/etc/ssl/certs`):
/// one clear line says why nothing can be sent, and nothing arrives.
#[test]
#[ignore = "needs root and an assembled image root filesystem: scripts/check-image-rootfs.sh"]
fn https_without_a_ca_bundle_fails_in_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let empty = dir.join("empty-certs");
    std::fs::create_dir_all(&empty).unwrap();
    for protocol in [Protocol::Grpc, Protocol::Http] {
        let (rx, _) = tls_receiver(protocol, dir);
        let mut agent = Run::new()
            .otlp(&rx)
            .env("GPU_SIDECAR_SAMPLE_INTERVAL", "250ms")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "500")
            .bind(&empty, "/etc/ssl/certs", false)
            .spawn();
        let exited = agent.wait_exit(Duration::from_secs(5));
        if exited.is_none() {
            stop_ok(&mut agent);
        }
        let errors: Vec<String> = agent
            .stderr_lines()
            .into_iter()
            .filter(|l| l.contains("ERROR") || l.contains("WARN"))
            .collect();
        println!("{protocol:?}: exit {exited:?}: {errors:#?}");
        assert!(!rx.has_metric("hw.power"), "{protocol:?}: nothing is sent");
        assert_eq!(errors.len(), 1, "{protocol:?}: one line\n{}", agent.dump());
        assert!(
            errors[0].contains("CA") || errors[0].contains("certificate"),
            "{protocol:?}: the line names the missing certificates: {}",
            errors[0]
        );
    }
}
