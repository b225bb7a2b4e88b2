//! `GPU_SIDECAR_DEVICES=pod-resources`: the agent asks a (fake) kubelet pod-resources
//! server on a unix socket which GPUs its pod holds, and exports only those of the 4-GPU
//! scenario.

mod common;

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::path::PathBuf;
use std::task::{Context, Poll};
use std::time::Duration;

use common::{scenario, Agent, Protocol, Receiver};
use gpu_otel_sidecar::attribution::pod_resources::{
    ContainerDevices, ContainerResources, GetPodResourcesRequest, GetPodResourcesResponse,
    ListPodResourcesRequest, ListPodResourcesResponse, PodResources, GET_PATH, LIST_PATH,
};
use tonic::body::Body;
use tonic::codegen::http;
use tonic::server::{Grpc, NamedService, UnaryService};

/// A kubelet pod-resources server with two pods; `Get` can be switched off (older kubelets).
#[derive(Clone)]
struct FakeKubelet {
    get_enabled: bool,
    pods: Vec<PodResources>,
}

fn pod(name: &str, gpus: &[&str]) -> PodResources {
    PodResources {
        name: name.into(),
        namespace: "ml".into(),
        containers: vec![
            ContainerResources {
                name: "trainer".into(),
                devices: vec![ContainerDevices {
                    resource_name: "nvidia.com/gpu".into(),
                    device_ids: gpus.iter().map(|s| s.to_string()).collect(),
                }],
            },
            ContainerResources {
                name: "gpu-sidecar".into(),
                devices: vec![],
            },
        ],
    }
}

struct List(Vec<PodResources>);
impl UnaryService<ListPodResourcesRequest> for List {
    type Response = ListPodResourcesResponse;
    type Future = std::future::Ready<Result<tonic::Response<Self::Response>, tonic::Status>>;
    fn call(&mut self, _: tonic::Request<ListPodResourcesRequest>) -> Self::Future {
        std::future::ready(Ok(tonic::Response::new(ListPodResourcesResponse {
            pod_resources: self.0.clone(),
        })))
    }
}

struct Get(Vec<PodResources>);
impl UnaryService<GetPodResourcesRequest> for Get {
    type Response = GetPodResourcesResponse;
    type Future = std::future::Ready<Result<tonic::Response<Self::Response>, tonic::Status>>;
    fn call(&mut self, req: tonic::Request<GetPodResourcesRequest>) -> Self::Future {
        let r = req.into_inner();
        let found = self
            .0
            .iter()
            .find(|p| p.name == r.pod_name && p.namespace == r.pod_namespace)
            .cloned();
        std::future::ready(match found {
            Some(p) => Ok(tonic::Response::new(GetPodResourcesResponse {
                pod_resources: Some(p),
            })),
            None => Err(tonic::Status::not_found("pod not found")),
        })
    }
}

impl NamedService for FakeKubelet {
    const NAME: &'static str = "v1.PodResourcesLister";
}

impl tower::Service<http::Request<Body>> for FakeKubelet {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>,
    >;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let path = req.uri().path().to_string();
            Ok(match path.as_str() {
                LIST_PATH => {
                    let mut grpc = Grpc::new(tonic_prost::ProstCodec::default());
                    grpc.unary(List(this.pods), req).await
                }
                GET_PATH if this.get_enabled => {
                    let mut grpc = Grpc::new(tonic_prost::ProstCodec::default());
                    grpc.unary(Get(this.pods), req).await
                }
                _ => tonic::Status::unimplemented(path).into_http(),
            })
        })
    }
}

fn start_kubelet(get_enabled: bool, dir: &std::path::Path) -> (PathBuf, tokio::runtime::Runtime) {
    serve_kubelet(
        get_enabled,
        dir,
        vec![
            pod("other-job", &["GPU-00000000-0000-4000-8000-000000000000"]),
            pod(
                "resnet-train-0",
                &[
                    "GPU-00000000-0000-4000-8000-000000000001",
                    "GPU-00000000-0000-4000-8000-000000000003",
                ],
            ),
        ],
    )
}

/// A fake kubelet serving `pods` on `<dir>/kubelet.sock`.
fn serve_kubelet(
    get_enabled: bool,
    dir: &std::path::Path,
    pods: Vec<PodResources>,
) -> (PathBuf, tokio::runtime::Runtime) {
    let socket = dir.join("kubelet.sock");
    let _ = std::fs::remove_file(&socket);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(async { tokio::net::UnixListener::bind(&socket) })
        .unwrap();
    let kubelet = FakeKubelet { get_enabled, pods };
    rt.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(kubelet)
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener))
            .await
            .unwrap();
    });
    (socket, rt)
}

fn exports_only_the_pods_gpus(get_enabled: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (socket, _rt) = start_kubelet(get_enabled, dir.path());
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock("four-gpu.json")
        .env("GPU_SIDECAR_DEVICES", "pod-resources")
        .env("GPU_SIDECAR_POD_RESOURCES_SOCKET", &socket)
        .env("K8S_POD_NAME", "resnet-train-0")
        .env("K8S_NAMESPACE_NAME", "ml")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .spawn();
    assert!(
        rx.wait_until(Duration::from_secs(20), |r| r.metrics_requests().len() >= 2),
        "{}",
        agent.dump()
    );
    let ids: BTreeSet<String> = rx
        .points("hw.status")
        .iter()
        .filter_map(|p| p.attr("hw.id").map(str::to_string))
        .collect();
    let scen = common::read_json(scenario("four-gpu.json"));
    let uuid = |i: usize| scen["devices"][i]["uuid"].as_str().unwrap().to_string();
    assert_eq!(ids, BTreeSet::from([uuid(1), uuid(3)]), "{}", agent.dump());
    assert!(
        !agent.dump().contains("every GPU of the node"),
        "no all-GPUs warning in this mode"
    );
    agent.sigterm();
    assert_eq!(
        agent
            .wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0)
    );
}

#[test]
fn pod_resources_get() {
    exports_only_the_pods_gpus(true);
}

#[test]
fn pod_resources_list_fallback_on_older_kubelets() {
    exports_only_the_pods_gpus(false);
}

#[test]
fn all_gpus_in_a_pod_is_warned_about() {
    let mut agent = Agent::builder()
        .env_mock("four-gpu.json")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("K8S_POD_NAME", "resnet-train-0")
        .env("NVIDIA_VISIBLE_DEVICES", "all")
        .spawn();
    assert!(
        agent.wait_for_stderr("every GPU of the node is reported", Duration::from_secs(10)),
        "{}",
        agent.dump()
    );
    agent.sigterm();
    assert_eq!(
        agent
            .wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0)
    );
}

#[test]
fn classic_sidecar_exits_when_the_training_process_ends() {
    // A copy of `sleep` under a unique name stands for the training process.
    let name = format!("trn{}", std::process::id() % 100_000);
    let bin = common::temp_path(&name);
    std::fs::copy("/bin/sleep", &bin).unwrap();
    // Another test thread forking while the copy was open for writing makes exec fail with
    // ETXTBSY for a moment: retry.
    let mut trainer = (0..100)
        .find_map(
            |_| match std::process::Command::new(&bin).arg("2").spawn() {
                Ok(child) => Some(child),
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(Duration::from_millis(20));
                    None
                }
                Err(e) => panic!("cannot start {}: {e}", bin.display()),
            },
        )
        .expect("the copied binary stays busy");
    let mut agent = Agent::builder()
        .env_mock("h200-under-load.json")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("GPU_SIDECAR_EXIT_WITH_PROCESS", &name)
        .spawn();
    assert!(
        agent.wait_for_stderr("watching the training process", Duration::from_secs(10)),
        "{}",
        agent.dump()
    );
    assert!(agent.is_running());
    trainer.wait().unwrap();
    let status = agent.wait_exit(Duration::from_secs(10));
    let _ = std::fs::remove_file(&bin);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", agent.dump());
    assert!(agent.dump().contains("the training process ended"));
}

// ---------------------------------------------------------------------------------------------
// Other device plugins' ids (GKE), shared GPUs

/// A copy of scenario `name` under `dir`, changed by `edit`.
fn scenario_copy(
    dir: &std::path::Path,
    name: &str,
    edit: impl FnOnce(&mut serde_json::Value),
) -> PathBuf {
    let mut v = common::read_json(scenario(name));
    edit(&mut v);
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    path
}

fn gpu(i: usize) -> String {
    format!("GPU-00000000-0000-4000-8000-00000000000{i}")
}

/// Runs the agent in pod `resnet-train-0` whose devices the kubelet lists as `ids`, on
/// scenario `scenario_path`, until two exports; returns the receiver and the stopped agent.
fn run_in_pod(
    dir: &std::path::Path,
    scenario_path: &std::path::Path,
    ids: &[&str],
) -> (Receiver, Agent) {
    let (socket, _rt) = serve_kubelet(true, dir, vec![pod("resnet-train-0", ids)]);
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock_path(scenario_path)
        .env("GPU_SIDECAR_DEVICES", "pod-resources")
        .env("GPU_SIDECAR_POD_RESOURCES_SOCKET", &socket)
        .env("K8S_POD_NAME", "resnet-train-0")
        .env("K8S_NAMESPACE_NAME", "ml")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "200ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .spawn();
    assert!(
        rx.wait_until(Duration::from_secs(20), |r| r.metrics_requests().len() >= 3),
        "{}",
        agent.dump()
    );
    agent.sigterm();
    assert_eq!(
        agent
            .wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0),
        "{}",
        agent.dump()
    );
    (rx, agent)
}

/// `hw.id` → `nvidia.gpu.sharing` (empty when unmarked) of every reported device.
fn reported(rx: &Receiver) -> std::collections::BTreeMap<String, String> {
    rx.points("hw.status")
        .iter()
        .map(|p| {
            (
                p.attr("hw.id").unwrap().to_string(),
                p.attr("nvidia.gpu.sharing").unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// GKE names GPUs by their device file's minor number (`nvidia<N>`, not the NVML index)
/// and time-shared ones `nvidia<N>/vgpu<M>`. Here minor numbers run backwards (GPU index 3
/// is /dev/nvidia0): the pod's GPUs are indices 3 and 2, and the time-shared one is marked.
#[test]
fn gke_minor_numbers_and_time_sharing() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario_copy(dir.path(), "four-gpu.json", |v| {
        for (i, d) in v["devices"].as_array_mut().unwrap().iter_mut().enumerate() {
            d["minor_number"] = (3 - i).into();
        }
    });
    let (rx, agent) = run_in_pod(dir.path(), &path, &["nvidia0", "nvidia1/vgpu3"]);
    assert_eq!(
        reported(&rx),
        std::collections::BTreeMap::from([
            (gpu(2), "time_slicing".to_string()),
            (gpu(3), String::new()),
        ]),
        "{}",
        agent.dump()
    );
    // Every point of the shared GPU says so, not only hw.status.
    for p in rx.points("hw.gpu.utilization") {
        let shared = p.attr("hw.id") == Some(gpu(2).as_str());
        assert_eq!(
            p.attr("nvidia.gpu.sharing"),
            shared.then_some("time_slicing"),
            "{p:?}"
        );
    }
    let warnings: Vec<String> = agent
        .stderr_lines()
        .into_iter()
        .filter(|l| l.contains("is shared with other pods"))
        .collect();
    assert_eq!(warnings.len(), 1, "once: {warnings:#?}");
    assert!(warnings[0].contains(&gpu(2)), "{warnings:#?}");
    assert!(!agent
        .dump()
        .contains("no GPU or MIG device NVML shows matches"));
}

/// GKE's MIG partitions are `nvidia<N>/gi<K>` (K the GPU instance id); the NVIDIA plugin's
/// `index` strategy writes `<gpu>:<mig>`.
#[test]
fn mig_devices_by_gpu_instance_and_by_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario("h200-mig-3g2g1g1g.json");
    let mig = |k: char| format!("MIG-7a8b9c0d-1e2f-5a3b-8c4d-5e6f7a8b9cb{k}");
    let (rx, agent) = run_in_pod(dir.path(), &path, &["nvidia0/gi3", "0:2"]);
    let ids: BTreeSet<String> = reported(&rx).into_keys().collect();
    assert_eq!(
        ids,
        BTreeSet::from([mig('1'), mig('2')]),
        "{}",
        agent.dump()
    );
}

/// Ids no plugin writes, and ids NVML has no device for: warned about, naming the mode the
/// user chose (the variable and the chart value that sets it); the rest is reported.
#[test]
fn unknown_and_unmatched_ids_name_the_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario("four-gpu.json");
    let (rx, agent) = run_in_pod(dir.path(), &path, &["nvidia1", "nvidia9", "gpu-zero"]);
    let ids: BTreeSet<String> = reported(&rx).into_keys().collect();
    assert_eq!(ids, BTreeSet::from([gpu(1)]), "{}", agent.dump());
    let mode =
        "GPU_SIDECAR_DEVICES=pod-resources (the Helm chart's gpuVisibility.mode=pod-resources)";
    let lines = agent.stderr_lines();
    let unknown: Vec<&String> = lines.iter().filter(|l| l.contains("gpu-zero")).collect();
    assert!(
        unknown
            .iter()
            .any(|l| l.contains(mode) && l.contains("no known device plugin writes")),
        "{unknown:#?}"
    );
    let unmatched: Vec<&String> = lines.iter().filter(|l| l.contains("nvidia9")).collect();
    assert!(
        unmatched
            .iter()
            .any(|l| l.contains(mode) && l.contains("no GPU or MIG device NVML shows matches")),
        "{unmatched:#?}"
    );
    assert!(!agent.dump().contains("GPU_SIDECAR_DEVICES names a device"));
}

/// The NVIDIA plugin's time-slicing replicas (`<uuid>::<n>`) mark the GPU shared; MPS
/// clients on a GPU mark it `mps` (here through `_v2`: the `_v3` call is refused).
#[test]
fn nvidia_replicas_and_mps_mark_the_gpu_shared() {
    let dir = tempfile::tempdir().unwrap();
    let path = scenario_copy(dir.path(), "four-gpu.json", |v| {
        let d = &mut v["devices"][1];
        d["defaults"]["mps_processes"] = serde_json::json!([[1001, 536870912]]);
        d["errors"]["nvmlDeviceGetMPSComputeRunningProcesses_v3"] = 13.into();
    });
    let (rx, agent) = run_in_pod(
        dir.path(),
        &path,
        &[
            "GPU-00000000-0000-4000-8000-000000000000::0",
            "GPU-00000000-0000-4000-8000-000000000000::3",
            "GPU-00000000-0000-4000-8000-000000000001",
            "GPU-00000000-0000-4000-8000-000000000002",
        ],
    );
    assert_eq!(
        reported(&rx),
        std::collections::BTreeMap::from([
            (gpu(0), "time_slicing".to_string()),
            (gpu(1), "mps".to_string()),
            (gpu(2), String::new()),
        ]),
        "{}",
        agent.dump()
    );
    assert_eq!(
        agent
            .stderr_lines()
            .iter()
            .filter(|l| l.contains("is shared with other pods"))
            .count(),
        2,
        "{}",
        agent.dump()
    );
}
