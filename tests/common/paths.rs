//! Where things are: the workspace, the mock NVML library, scenarios and fixtures.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace root (the agent crate's manifest directory).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `<root>/tests/scenarios/<name>`: a scenario file for the mock NVML library (give the name
/// with its extension). The path is returned whether or not the file exists.
pub fn scenario(name: &str) -> PathBuf {
    workspace_root().join("tests").join("scenarios").join(name)
}

/// `<root>/tests/fixtures/nvml-h200`: the real H200 recording (see its README for where it
/// came from). The path is returned whether or not it exists; read files through
/// [`read_text`] or [`h200_recording`], which name the path when it is missing.
pub fn fixture_dir() -> PathBuf {
    workspace_root()
        .join("tests")
        .join("fixtures")
        .join("nvml-h200")
}

/// The whole text of `path`.
///
/// # Panics
/// If it cannot be read, with the path and the OS error (a bare "No such file or directory"
/// names nothing).
pub fn read_text(path: impl AsRef<Path>) -> String {
    let path = path.as_ref();
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `path` parsed as one JSON document.
///
/// # Panics
/// If it cannot be read or parsed (the message names the path).
pub fn read_json(path: impl AsRef<Path>) -> serde_json::Value {
    let path = path.as_ref();
    serde_json::from_str(&read_text(path))
        .unwrap_or_else(|e| panic!("{} is not valid JSON: {e}", path.display()))
}

/// The rows of the recording's `series-under-load.jsonl` (118 rows, one every ~0.25 s; keys
/// described in the fixture's README).
///
/// # Panics
/// If the file is missing or a line is not JSON (the message names the path and line).
pub fn h200_recording() -> Vec<serde_json::Value> {
    let path = fixture_dir().join("series-under-load.jsonl");
    read_text(&path)
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1))
        })
        .collect()
}

/// Path of the mock NVML shared library `libnvml_mock.so` (workspace crate `tests/nvml-mock`).
///
/// `$NVML_MOCK_LIB`, when set, is returned as is. Otherwise the crate is built once per test
/// process with `$CARGO build -p nvml-mock --target-dir <target>/nvml-mock` (`<target>` is the
/// directory this test binary was built in; a target directory of its own, because the outer
/// `cargo test` holds the lock on `<target>/debug`; the mock's own tests build into the same
/// one), without incremental data, and `<target>/nvml-mock/debug/libnvml_mock.so` is returned.
/// Several test processes building at once (cargo-nextest) are serialised by cargo's own
/// lock; after the first it is a no-op.
///
/// # Panics
/// If cargo cannot be run, the build fails (its output is in the message), or the library is
/// not where it should be.
pub fn mock_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(path) = std::env::var_os("NVML_MOCK_LIB") {
            return PathBuf::from(path);
        }
        let root = workspace_root();
        let target_dir = target_dir().join("nvml-mock");
        build_mock(&root, &target_dir);
        let lib = target_dir.join("debug").join("libnvml_mock.so");
        assert!(
            lib.is_file(),
            "nvml-mock built but {} is missing",
            lib.display()
        );
        lib
    })
    .clone()
}

/// This test process's scratch directory (`<temp>/gpu-otel-sidecar-test-XXXXXX`), created
/// on first use and removed with everything in it when the process exits (an `atexit`
/// handler: the test harness exits normally after failed tests too), so that a test run
/// leaves nothing in the temp directory.
///
/// # Panics
/// If the directory cannot be created.
pub fn scratch_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove_scratch_dir() {
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    DIR.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("gpu-otel-sidecar-test-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a scratch directory: {e}"))
            .keep();
        // SAFETY: registers a plain function; it runs once, at exit.
        unsafe {
            libc::atexit(remove_scratch_dir);
        }
        dir
    })
}

/// `<scratch_dir>/<name>`, for a file this test process writes (a scenario, a call log).
pub fn temp_path(name: &str) -> PathBuf {
    scratch_dir().join(name)
}

/// Longest path a Unix socket address holds (`sun_path`, less its terminating NUL).
const SOCKET_PATH_MAX: usize = 107;

/// A path for a Unix socket named `name`: [`temp_path`] where that fits in a socket address,
/// else the same name in a short scratch directory of this process under `/tmp` (removed
/// at exit like [`scratch_dir`]): a deep checkout's `TMPDIR` (CI's is inside its clone)
/// makes paths too long to bind.
///
/// # Panics
/// If the short directory cannot be created, or `name` is too long even there.
pub fn socket_path(name: &str) -> PathBuf {
    let path = temp_path(name);
    if path.as_os_str().len() <= SOCKET_PATH_MAX {
        return path;
    }
    static SHORT: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn remove_short_dir() {
        if let Some(dir) = SHORT.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let dir = SHORT.get_or_init(|| {
        let dir = tempfile::Builder::new()
            .prefix("gos-")
            .tempdir_in("/tmp")
            .unwrap_or_else(|e| panic!("cannot create a short socket directory in /tmp: {e}"))
            .keep();
        // SAFETY: registers a plain function; it runs once, at exit.
        unsafe {
            libc::atexit(remove_short_dir);
        }
        dir
    });
    let path = dir.join(name);
    assert!(
        path.as_os_str().len() <= SOCKET_PATH_MAX,
        "socket path too long: {}",
        path.display()
    );
    path
}

/// The mock library under the name the NVIDIA Container Toolkit mounts NVIDIA's under
/// (`<dir>/libnvidia-ml.so.1`, a symbolic link to [`mock_library`]), for tests where the mock
/// stands in for the driver's library: the agent gives driver advice only for a library of
/// that name.
///
/// # Panics
/// As [`mock_library`], or if the link cannot be made.
pub fn mock_as_nvidia_library() -> PathBuf {
    static LINK: OnceLock<PathBuf> = OnceLock::new();
    LINK.get_or_init(|| {
        let lib = mock_library();
        let dir = scratch_dir().join("nvml-mock-as-nvidia");
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        let link = dir.join("libnvidia-ml.so.1");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link)
            .unwrap_or_else(|e| panic!("cannot link {} to {}: {e}", link.display(), lib.display()));
        link
    })
    .clone()
}

/// The cargo target directory this test binary was built in (`<target>/<profile>/deps/<test>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.ancestors()
        .nth(3)
        .unwrap_or_else(|| panic!("{} is not under <target>/<profile>/deps", exe.display()))
        .to_path_buf()
}

fn build_mock(root: &Path, target_dir: &Path) {
    // `CARGO` is set by `cargo test` (and cargo-nextest); the compile-time value is a fallback.
    let cargo = std::env::var_os("CARGO")
        .or_else(|| option_env!("CARGO").map(Into::into))
        .unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .current_dir(root)
        .arg("build")
        .arg("-p")
        .arg("nvml-mock")
        .arg("--manifest-path")
        .arg(root.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        // Built once and rarely changed: incremental data would only take disk.
        .env("CARGO_INCREMENTAL", "0")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo:?} to build nvml-mock: {e}"));
    assert!(
        output.status.success(),
        "building nvml-mock failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}
