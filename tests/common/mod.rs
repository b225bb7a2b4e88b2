//! Shared harness for the integration tests. Each test executable (`tests/<kind>/main.rs`:
//! `agent`, `webhook`, `rules`, `report`, `packaging`) declares it once,
//! `#[path = "../common/mod.rs"] mod common;`, and its modules use the re-exports:
//!
//! ```ignore
//! use crate::common::{Agent, Kind, Receiver};
//!
//! #[tokio::test(flavor = "multi_thread")]
//! async fn exports_power() {
//!     let rx = Receiver::grpc().await;
//!     let mut agent = Agent::builder()
//!         .otlp(&rx)
//!         .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
//!         .env_mock("h200-idle.json")
//!         .spawn();
//!     assert!(rx.wait_for_metric("hw.power", Duration::from_secs(10)), "{}", agent.dump());
//!     let p = &rx.last_points("hw.power")[0];
//!     assert_eq!((p.unit.as_str(), &p.kind), ("W", &Kind::Gauge));
//!     agent.sigterm();
//!     assert!(agent.wait_exit(Duration::from_secs(10)).unwrap().success());
//! }
//! ```
//!
//! What is here:
//! - [`receiver`]: [`Receiver`], an in-process OTLP receiver (gRPC or HTTP/protobuf) built on
//!   the official protobuf definitions, with fault knobs ([`Mode`]) and flattened views of what
//!   arrived ([`Point`], [`LogRecordView`]).
//! - [`agent`]: [`Agent`], the agent binary run as a child process with a clean environment
//!   and its output captured line by line.
//! - [`paths`]: [`mock_library`] (builds the mock `libnvml_mock.so` once), [`scenario`],
//!   [`fixture_dir`], [`workspace_root`], [`temp_path`] (in a scratch directory removed
//!   when the test process exits), and reads that name the missing path
//!   ([`read_text`], [`read_json`], [`h200_recording`]).
//! - [`pki`]: a throw-away CA issuing certificates, for TLS tests.
//! - [`pod`]: a pod's shared process namespace (a PID namespace, a cgroup per container),
//!   for the classic sidecar's tests.
//! - [`http`]: a tiny blocking HTTP/1.1 client ([`http::get`], [`http::post`]) for health
//!   endpoints and hand-made OTLP/HTTP requests.
//!
//! Everything is usable from plain `#[test]` functions and from `#[tokio::test]` ones of
//! either flavour: the receiver serves on its own background runtime, and every wait in this
//! harness is a plain blocking call (the receiver also offers `_async` variants).

// Each test crate uses a different part of the harness.
#![allow(dead_code, unused_imports)]

pub mod agent;
pub mod http;
pub mod paths;
pub mod pki;
pub mod pod;
pub mod receiver;

pub use agent::{Agent, AgentBuilder};
pub use paths::{
    fixture_dir, h200_recording, mock_as_nvidia_library, mock_library, read_json, read_text,
    scenario, scratch_dir, socket_path, temp_path, workspace_root,
};
pub use receiver::{
    Attempt, Kind, LogRecordView, Mode, Point, Protocol, Received, Receiver, ServerTls, Signal,
};

use std::time::{Duration, Instant};

/// Polls `condition` every 20 ms until it returns true or `timeout` passes; returns whether
/// it became true. A blocking call: fine in plain tests and in multi-thread tokio tests.
pub fn wait_until(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
