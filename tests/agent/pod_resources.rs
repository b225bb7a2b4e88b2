//! `GPU_SIDECAR_DEVICES=pod-resources`: the agent asks a (fake) kubelet pod-resources
//! server on a unix socket which GPUs its pod holds, and exports only those of the 4-GPU
//! scenario.

use crate::common;

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

// ---------------------------------------------------------------------------------------------
// Node mode: one agent for every GPU of the node, each pod's share

const NODE: &str = "node-shared-gpus.json";

/// The UID of test pod `n` (a UUID as the API server writes them).
fn uid(n: u32) -> String {
    format!("{n:08x}-0000-4000-8000-{n:012x}")
}

/// A 64-hex-digit container id.
fn container(n: u32) -> String {
    format!("{n:064x}")
}

/// The cgroup file of a process of pod `n` in one of four layouts: cgroup v2 with the
/// systemd driver and containerd, v2 with cgroupfs and containerd, v1 with cgroupfs, v2 with
/// systemd and CRI-O.
fn cgroup_file(n: u32, layout: u32) -> String {
    let (u, c) = (uid(n), container(n));
    let u_ = u.replace('-', "_");
    match layout % 4 {
        0 => format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u_}.slice/cri-containerd-{c}.scope\n"),
        1 => format!("0::/kubepods/besteffort/pod{u}/{c}\n"),
        2 => format!("12:memory:/kubepods/burstable/pod{u}/{c}\n11:devices:/kubepods/burstable/pod{u}/{c}\n1:name=systemd:/kubepods/burstable/pod{u}/{c}\n"),
        _ => format!("0::/kubepods.slice/kubepods-pod{u_}.slice/crio-{c}.scope\n"),
    }
}

/// Host PID → pod number of the scenario's processes; pod 99 runs the MPS server.
const PIDS: &[(u32, u32)] = &[
    (1101, 1),
    (1201, 2),
    (1301, 3),
    (1302, 3),
    (1401, 4),
    (2001, 99),
    (2101, 5),
    (2201, 6),
    (3101, 7),
    (4101, 8),
    (4201, 9),
    (4301, 10),
];

/// A made-up proc root: the host PID namespace's (PID 2 is kthreadd), a cgroup file for each
/// pod process, pid 1901 in a login session (no pod), pid 1501 gone (no directory), and the
/// driver's information file of GPU 3 (minor number 3, for GKE's `nvidia3`).
fn fake_proc(root: &std::path::Path) {
    let write = |path: &str, text: &str| {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write("2/comm", "kthreadd\n");
    for (i, &(pid, n)) in PIDS.iter().enumerate() {
        write(&format!("{pid}/cgroup"), &cgroup_file(n, i as u32));
        write(&format!("{pid}/comm"), "python3\n");
    }
    write(
        "1901/cgroup",
        "0::/user.slice/user-1000.slice/session-4.scope\n",
    );
    write(
        "driver/nvidia/gpus/0000:48:00.0/information",
        "Model: \t\t NVIDIA H100 80GB HBM3\nDevice Minor: \t 3\n",
    );
}

fn node_gpu(i: u32) -> String {
    format!("GPU-00000000-0000-4000-8000-0000000000a{i}")
}

fn node_mig(k: u32) -> String {
    format!("MIG-00000000-0000-5000-8000-0000000000b{k}")
}

/// The kubelet's allocations: GPU 0 time-sliced among pods 1-4, GPU 1 (MPS) among 5 and 6,
/// GPU 3 to pod 7 alone (GKE's id), the 3g MIG device to pod 8 alone, the 1g one
/// time-sliced between 9 and 10; GPU 2 to no one.
fn node_pods() -> Vec<PodResources> {
    let replica = |id: String, r: u32| format!("{id}::{r}");
    let mut pods: Vec<PodResources> = (1..=4)
        .map(|n| pod(&format!("p{n}"), &[&replica(node_gpu(0), n)]))
        .collect();
    pods.push(pod("p5", &[&replica(node_gpu(1), 0)]));
    pods.push(pod("p6", &[&replica(node_gpu(1), 1)]));
    pods.push(pod("p7", &["nvidia3"]));
    pods.push(pod("p8", &[&node_mig(0)]));
    pods.push(pod("p9", &[&replica(node_mig(1), 0)]));
    pods.push(pod("p10", &[&replica(node_mig(1), 1)]));
    pods
}

/// (time, `hw.id`, pod UID or "" for the not-attributed share) → value, of metric `name`.
fn shares_of(rx: &Receiver, name: &str) -> Vec<((u64, String, String), f64)> {
    rx.points(name)
        .into_iter()
        .map(|p| {
            let pod = p.resource.get("k8s.pod.uid").cloned().unwrap_or_default();
            if pod.is_empty() {
                assert_eq!(
                    p.attr("nvidia.gpu.attribution"),
                    Some("not_attributed"),
                    "{p:?}"
                );
            } else {
                assert_eq!(p.attr("nvidia.gpu.attribution"), None, "{p:?}");
            }
            (
                (p.time_unix_nano, p.attr("hw.id").unwrap().to_string(), pod),
                p.value,
            )
        })
        .collect()
}

/// The device's own metric `name` by (time, `hw.id`).
fn device_values(rx: &Receiver, name: &str) -> std::collections::BTreeMap<(u64, String), f64> {
    rx.points(name)
        .into_iter()
        .map(|p| {
            assert!(!p.resource.contains_key("k8s.pod.uid"), "{p:?}");
            (
                (p.time_unix_nano, p.attr("hw.id").unwrap().to_string()),
                p.value,
            )
        })
        .collect()
}

/// Sums `shares` by (time, device).
fn summed(
    shares: &[((u64, String, String), f64)],
) -> std::collections::BTreeMap<(u64, String), f64> {
    let mut out = std::collections::BTreeMap::new();
    for ((t, id, _), v) in shares {
        *out.entry((*t, id.clone())).or_insert(0.0) += v;
    }
    out
}

/// One share: metric `name`, device `hw_id`, pod `n` (0: not attributed), at time `t`.
fn share_at(shares: &[((u64, String, String), f64)], t: u64, hw_id: &str, n: u32) -> Option<f64> {
    let pod = if n == 0 { String::new() } else { uid(n) };
    shares
        .iter()
        .find(|((time, id, p), _)| *time == t && id == hw_id && *p == pod)
        .map(|(_, v)| *v)
}

const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

/// `gpu-otel-sidecar node` on the node scenario, a made-up /proc and a fake kubelet: every
/// GPU and MIG device once on the node's resource; each pod's memory exact, power and
/// energy apportioned, the shares adding up to the device's figures with the not-attributed
/// share; names only where a device is one pod's alone; a process that ends drops out.
#[test]
fn node_mode_reports_every_gpu_once_and_each_pods_share() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    fake_proc(&proc_root);
    let (socket, _rt) = serve_kubelet(false, dir.path(), node_pods());
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock(NODE)
        .arg("node")
        .env("GPU_SIDECAR_PROC_ROOT", &proc_root)
        .env("GPU_SIDECAR_POD_RESOURCES_SOCKET", &socket)
        .env("K8S_NODE_NAME", "node-a")
        // The DaemonSet's own pod: left out of the node's resource.
        .env("K8S_POD_NAME", "gpu-otel-sidecar-node-x7k2p")
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .env("GPU_SIDECAR_PROCESS_INTERVAL", "300ms")
        .env("GPU_SIDECAR_ENERGY_INTERVAL", "300ms")
        .spawn();
    // Pid 1201 (pod 2) ends at t = 2 s: wait for two exports without it.
    let without_p2 = |rx: &Receiver| {
        let mut times: Vec<u64> = rx
            .points("hw.power")
            .iter()
            .map(|p| p.time_unix_nano)
            .collect();
        times.dedup();
        let with: BTreeSet<u64> = rx
            .points("nvidia.gpu.pod.memory.usage")
            .iter()
            .filter(|p| p.resource.get("k8s.pod.uid") == Some(&uid(2)))
            .map(|p| p.time_unix_nano)
            .collect();
        times.iter().filter(|t| !with.contains(t)).count() >= 2 && !with.is_empty()
    };
    assert!(
        rx.wait_until(Duration::from_secs(30), without_p2),
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

    // Every GPU and MIG device once, on the node's resource.
    let status = rx.last_points("hw.status");
    let ids: BTreeSet<&str> = status.iter().filter_map(|p| p.attr("hw.id")).collect();
    let mut want: BTreeSet<String> = (0..5).map(node_gpu).collect();
    want.extend((0..2).map(node_mig));
    assert_eq!(
        ids,
        want.iter().map(String::as_str).collect(),
        "{}",
        agent.dump()
    );
    assert_eq!(status.len(), 7 * 3, "one hw.status per device and state");
    for p in &status {
        assert_eq!(
            p.resource.get("k8s.node.name").map(String::as_str),
            Some("node-a")
        );
        assert_eq!(
            p.resource.get("service.instance.id").map(String::as_str),
            Some("node-a")
        );
        for k in [
            "k8s.pod.name",
            "k8s.pod.uid",
            "k8s.namespace.name",
            "k8s.container.name",
        ] {
            assert!(
                !p.resource.contains_key(k),
                "{k} on the node's resource: {p:?}"
            );
        }
    }
    let sharing: std::collections::BTreeMap<String, String> = status
        .iter()
        .map(|p| {
            (
                p.attr("hw.id").unwrap().to_string(),
                p.attr("nvidia.gpu.sharing").unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        sharing[&node_gpu(0)],
        "time_slicing",
        "the kubelet's replicas"
    );
    assert_eq!(sharing[&node_gpu(1)], "mps", "MPS clients");
    assert_eq!(sharing[&node_gpu(3)], "", "one pod's alone");
    assert_eq!(sharing[&node_mig(1)], "time_slicing");
    assert_eq!(sharing[&node_mig(0)], "");

    let memory = shares_of(&rx, "nvidia.gpu.pod.memory.usage");
    let power = shares_of(&rx, "nvidia.gpu.pod.power");
    let energy = shares_of(&rx, "nvidia.gpu.pod.energy");
    let processes = shares_of(&rx, "nvidia.gpu.pod.processes");
    let utilization = shares_of(&rx, "nvidia.gpu.pod.utilization");

    // Shares add up to the device's figure, at every export, for every device.
    let device_memory = device_values(&rx, "hw.gpu.memory.usage");
    let memory_sums = summed(&memory);
    assert!(!memory_sums.is_empty());
    for (key, sum) in &memory_sums {
        assert_eq!(Some(sum), device_memory.get(key), "memory of {key:?}");
    }
    let device_power = device_values(&rx, "hw.power");
    let power_sums = summed(&power);
    for (key, sum) in &power_sums {
        let gpu = device_power
            .get(key)
            .unwrap_or_else(|| panic!("hw.power of {key:?}"));
        assert_eq!(
            (sum * 1000.0).round(),
            (gpu * 1000.0).round(),
            "power of {key:?}"
        );
    }
    assert_eq!(
        power_sums
            .keys()
            .map(|(_, id)| id.clone())
            .collect::<BTreeSet<_>>(),
        (0..5).map(node_gpu).collect(),
        "power on the physical GPUs only, each once"
    );

    // An export before pid 1201 ended (the first) and the last one.
    let times: BTreeSet<u64> = memory.iter().map(|((t, _, _), _)| *t).collect();
    let first = *times.iter().next().unwrap();
    let last = *times.iter().last().unwrap();
    let g = |i| node_gpu(i);
    // GPU 0, time-sliced: each pod's memory exactly its processes' (pod 3: two of them);
    // the processes in no pod (1901) or gone from /proc (1501) are not attributed.
    assert_eq!(share_at(&memory, first, &g(0), 1), Some(2.0 * GIB));
    assert_eq!(share_at(&memory, first, &g(0), 2), Some(3.0 * GIB));
    assert_eq!(share_at(&memory, first, &g(0), 3), Some(2.5 * GIB));
    assert_eq!(share_at(&memory, first, &g(0), 4), Some(4.0 * GIB));
    assert_eq!(share_at(&memory, first, &g(0), 0), Some(8.5 * GIB));
    assert_eq!(share_at(&processes, first, &g(0), 3), Some(2.0));
    assert_eq!(share_at(&processes, first, &g(0), 0), Some(2.0));
    // Power by SM share, 40:20:20:0 and 20 not attributed, of 400.001 W.
    assert_eq!(share_at(&power, first, &g(0), 1), Some(160.001));
    assert_eq!(share_at(&power, first, &g(0), 2), Some(80.0));
    assert_eq!(share_at(&power, first, &g(0), 0), Some(80.0));
    assert_eq!(share_at(&utilization, first, &g(0), 3), Some(0.2));
    // Pid 1201 has ended: pod 2 is gone, its memory no one's, its weight no one's.
    assert_eq!(share_at(&memory, last, &g(0), 2), None);
    assert_eq!(share_at(&memory, last, &g(0), 0), Some(11.5 * GIB));
    assert_eq!(share_at(&power, last, &g(0), 1), Some(200.001));
    assert_eq!(share_at(&power, last, &g(0), 3), Some(100.0));
    // GPU 1, MPS: the clients are their pods' (from the MPS list), the server its pod's.
    assert_eq!(share_at(&memory, last, &g(1), 5), Some(GIB));
    assert_eq!(share_at(&memory, last, &g(1), 6), Some(2.0 * GIB));
    assert_eq!(share_at(&memory, last, &g(1), 99), Some(64.0 * MIB));
    assert_eq!(share_at(&power, last, &g(1), 5), Some(112.5));
    assert_eq!(share_at(&power, last, &g(1), 6), Some(187.5));
    assert_eq!(share_at(&power, last, &g(1), 99), Some(0.0));
    // GPU 2, no pod: all of it not attributed.
    assert_eq!(share_at(&memory, last, &g(2), 0), Some(512.0 * MIB));
    assert_eq!(share_at(&power, last, &g(2), 0), Some(70.0));
    assert_eq!(
        memory
            .iter()
            .filter(|((t, id, p), _)| *t == last && *id == g(2) && !p.is_empty())
            .count(),
        0
    );
    // GPU 3, one pod's alone.
    assert_eq!(share_at(&power, last, &g(3), 7), Some(500.0));
    assert_eq!(share_at(&memory, last, &g(3), 0), Some(8.0 * MIB));
    // GPU 4 in MIG mode: memory on each MIG device (the 1g one shared by pods 9 and 10),
    // power on the GPU by SM share × compute slices: 50 % × 3, 30 % × 1, 70 % × 1.
    assert_eq!(share_at(&memory, last, &node_mig(1), 9), Some(GIB));
    assert_eq!(share_at(&memory, last, &node_mig(1), 10), Some(2.0 * GIB));
    assert_eq!(share_at(&memory, last, &node_mig(1), 0), Some(GIB));
    assert_eq!(share_at(&power, last, &g(4), 8), Some(252.0));
    assert_eq!(share_at(&power, last, &g(4), 9), Some(50.4));
    assert_eq!(share_at(&power, last, &g(4), 10), Some(117.6));
    assert_eq!(share_at(&power, last, &g(4), 0), Some(0.0));

    // Energy: on every GPU, each series' latest value (pod 2's from its last export) adds up
    // to hw.energy's at the last export.
    let device_energy = device_values(&rx, "hw.energy");
    for i in 0..5 {
        let mut latest: std::collections::BTreeMap<String, (u64, f64)> = Default::default();
        for ((t, id, pod), v) in &energy {
            if *id == g(i) && latest.get(pod).is_none_or(|(t0, _)| t0 < t) {
                latest.insert(pod.clone(), (*t, *v));
            }
        }
        let last_energy = device_energy
            .iter()
            .filter(|((_, id), _)| *id == g(i))
            .max_by_key(|((t, _), _)| *t)
            .map(|(_, v)| *v)
            .unwrap();
        let sum: f64 = latest.values().map(|(_, v)| v).sum();
        assert!(
            (sum - last_energy).abs() < 1e-6,
            "GPU {i}: {sum} J of {last_energy} J: {latest:?}"
        );
        assert!(last_energy > 0.0, "GPU {i}");
    }
    assert!(energy
        .iter()
        .any(|((_, id, pod), _)| *id == g(0) && *pod == uid(2)));

    // Each pod on a resource of its own; named only where a device is its alone.
    let resources: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>> =
        rx.last_points("nvidia.gpu.pod.power")
            .into_iter()
            .filter_map(|p| Some((p.resource.get("k8s.pod.uid")?.clone(), p.resource)))
            .collect();
    for n in [7, 8] {
        let r = &resources[&uid(n)];
        assert_eq!(r.get("k8s.pod.name"), Some(&format!("p{n}")), "{r:?}");
        assert_eq!(r.get("k8s.namespace.name").map(String::as_str), Some("ml"));
        assert_eq!(
            r.get("service.instance.id"),
            Some(&format!("node-a.{}", uid(n)))
        );
        assert_eq!(r.get("k8s.node.name").map(String::as_str), Some("node-a"));
    }
    for n in [1, 3, 5, 9, 10, 99] {
        let r = &resources[&uid(n)];
        assert_eq!(
            r.get("k8s.pod.name"),
            None,
            "pod {n} shares its device: {r:?}"
        );
    }
    assert!(
        agent.dump().contains("left out of the node's resource"),
        "{}",
        agent.dump()
    );
}

/// Without hostPID (a proc root whose PID 2 is not kthreadd) and without the kubelet's
/// socket, nothing is guessed: every device's use is not attributed, and both are said.
#[test]
fn node_mode_without_host_pids_or_kubelet_attributes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let proc_root = dir.path().join("proc");
    std::fs::create_dir_all(proc_root.join("2")).unwrap();
    std::fs::write(proc_root.join("2/comm"), "sh\n").unwrap();
    let rx = Receiver::start(Protocol::Grpc);
    let mut agent = Agent::builder()
        .otlp(&rx)
        .env_mock(NODE)
        .arg("node")
        .env("GPU_SIDECAR_PROC_ROOT", &proc_root)
        .env(
            "GPU_SIDECAR_POD_RESOURCES_SOCKET",
            dir.path().join("none.sock"),
        )
        .env("GPU_SIDECAR_SAMPLE_INTERVAL", "100ms")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "300")
        .env("GPU_SIDECAR_REPORT_FILE", dir.path().join("report.json"))
        .spawn();
    assert!(
        rx.wait_until(Duration::from_secs(20), |r| r.metrics_requests().len() >= 2),
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
    let memory = rx.points("nvidia.gpu.pod.memory.usage");
    assert!(!memory.is_empty());
    for p in &memory {
        assert!(!p.resource.contains_key("k8s.pod.uid"), "{p:?}");
        assert_eq!(p.attr("nvidia.gpu.attribution"), Some("not_attributed"));
    }
    let dump = agent.dump();
    assert!(
        dump.contains("does not show the host PID namespace"),
        "{dump}"
    );
    assert!(
        dump.contains("node mode: cannot connect to the kubelet pod-resources socket"),
        "{dump}"
    );
    // The run report covers the node's devices, one summary each.
    let report = common::read_json(dir.path().join("report.json"));
    let uuids: BTreeSet<&str> = report["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids.len(), 7, "{report:#}");
    assert!(uuids.contains(node_gpu(2).as_str()) && uuids.contains(node_mig(1).as_str()));
    assert!(
        report["resource"].get("k8s.pod.name").is_none(),
        "{report:#}"
    );
}

#[test]
fn node_mode_refuses_pod_resources_devices() {
    let mut agent = Agent::builder()
        .env_mock(NODE)
        .arg("node")
        .env("GPU_SIDECAR_DEVICES", "pod-resources")
        .env("K8S_POD_NAME", "x")
        .env("K8S_NAMESPACE_NAME", "y")
        .spawn();
    assert_eq!(
        agent
            .wait_exit(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(2)
    );
    assert!(
        agent.dump().contains("GPU_SIDECAR_DEVICES"),
        "{}",
        agent.dump()
    );
}
