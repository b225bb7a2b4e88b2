//! Helpers: load a private copy of the mock through nvml-wrapper with a given scenario.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

/// Serialises "set env + nvmlInit" (the mock reads its env at its first init).
static ENV_LOCK: Mutex<()> = Mutex::new(());
static COPIES: AtomicUsize = AtomicUsize::new(0);

/// The mock library to load. `cargo test` does not build a cdylib-only crate's library for
/// its integration tests, so this builds it once per test process with a nested
/// `cargo build -p nvml-mock` into `<target>/nvml-mock` (a separate target dir: no lock
/// conflict with the running `cargo test`; the agent's tests build the same library there,
/// so the second build is a no-op), without incremental data.
/// `NVML_MOCK_LIB=/path/libnvml_mock.so` skips that.
pub fn built_mock() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(p) = std::env::var_os("NVML_MOCK_LIB") {
                return PathBuf::from(p);
            }
            // the test executable is <target>/<profile>/deps/<name>
            let exe = std::env::current_exe().expect("current_exe");
            let target = exe
                .ancestors()
                .nth(3)
                .expect("<target>/<profile>/deps/<test>")
                .join("nvml-mock");
            // The workspace's manifest and `-p`, exactly as the agent's tests build it.
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "--quiet", "-p", "nvml-mock", "--manifest-path"])
                .arg(&manifest)
                .arg("--target-dir")
                .arg(&target)
                .env("CARGO_INCREMENTAL", "0")
                .status()
                .expect("run cargo build for the mock");
            assert!(status.success(), "building libnvml_mock.so failed");
            let so = target.join("debug").join("libnvml_mock.so");
            assert!(so.exists(), "{} is missing", so.display());
            so
        })
        .clone()
}

/// `path` parsed as one JSON document; panics naming the path if it is missing or not JSON.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()))
}

pub fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scenarios")
        .join(name)
}

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        let n = COPIES.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("nvml-mock-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One private copy of the mock library (own state), plus its temp dir.
pub struct Mock {
    pub dir: TempDir,
    pub lib: PathBuf,
}

impl Mock {
    pub fn new() -> Self {
        let dir = TempDir::new();
        let lib = dir.path("libnvml_mock.so");
        std::fs::copy(built_mock(), &lib).expect("copy mock");
        Mock { dir, lib }
    }

    /// Set the mock's env and init NVML through nvml-wrapper.
    pub fn init(&self, scenario: &Path, env: &[(&str, &str)]) -> Result<Nvml, NvmlError> {
        let _g = ENV_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        for k in [
            "NVML_MOCK_SCENARIO",
            "NVML_MOCK_TIME_SCALE",
            "NVML_MOCK_CALL_LOG",
            "NVML_MOCK_NO_LATENCY",
            "NVML_MOCK_CALL_LOG_PERIOD_S",
        ] {
            std::env::remove_var(k);
        }
        std::env::set_var("NVML_MOCK_SCENARIO", scenario);
        for (k, v) in env {
            std::env::set_var(k, v);
        }
        Nvml::builder().lib_path(self.lib.as_os_str()).init()
    }
}

/// Init a private copy with one of the shipped scenarios, time frozen at t = 0.
pub fn frozen(name: &str) -> (Mock, Nvml) {
    let m = Mock::new();
    let nvml = m
        .init(&scenario(name), &[("NVML_MOCK_TIME_SCALE", "0")])
        .expect("init");
    (m, nvml)
}

/// `assert_err!(expr, NvmlError::NotSupported)`: NvmlError is not PartialEq.
#[macro_export]
macro_rules! assert_err {
    ($e:expr, $p:pat) => {
        match $e {
            Err($p) => {}
            other => panic!(
                "expected Err({}), got {:?}",
                stringify!($p),
                other.map(|_| ())
            ),
        }
    };
}
