//! Which GPUs belong to this pod, from the kubelet's pod-resources API.
//!
//! A sidecar cannot request the same device-plugin GPU as the training container, so with
//! `NVIDIA_VISIBLE_DEVICES=all` it sees every GPU of the node. With
//! `GPU_SIDECAR_DEVICES=pod-resources` the agent asks the kubelet
//! (`v1.PodResourcesLister` on the unix socket
//! `/var/lib/kubelet/pod-resources/kubelet.sock`, mounted read-only from the host) which
//! devices were allocated to its own pod (`K8S_POD_NAME` in `K8S_NAMESPACE_NAME`), and
//! reports only those.
//!
//! It calls `Get` (Kubernetes ≥ 1.34 by default; feature gate `KubeletPodResourcesGet`
//! before) and falls back to `List` when the kubelet answers `UNIMPLEMENTED`. The device ids
//! of the NVIDIA device plugin (UUIDs or indices, time-slicing replicas) and of GKE's
//! (`nvidia<minor>`, `/gi<k>`, `/vgpu<n>`) are understood: [`parse_device_id`].
//!
//! The messages below are the subset of `k8s.io/kubelet/pkg/apis/podresources/v1/api.proto`
//! the agent reads, with the same field numbers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};

use crate::config::{AllocatedDevice, DeviceId, POD_RESOURCES_MODE as MODE};

/// `ListPodResourcesRequest {}`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

/// `ListPodResourcesResponse { repeated PodResources pod_resources = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    /// Every pod on the node with its allocated resources.
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

/// `GetPodResourcesRequest { string pod_name = 1; string pod_namespace = 2; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodResourcesRequest {
    /// Pod name.
    #[prost(string, tag = "1")]
    pub pod_name: String,
    /// Pod namespace.
    #[prost(string, tag = "2")]
    pub pod_namespace: String,
}

/// `GetPodResourcesResponse { PodResources pod_resources = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GetPodResourcesResponse {
    /// The pod's resources.
    #[prost(message, optional, tag = "1")]
    pub pod_resources: Option<PodResources>,
}

/// `PodResources { string name = 1; string namespace = 2; repeated ContainerResources containers = 3; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    /// Pod name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Pod namespace.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// Its containers.
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

/// `ContainerResources { string name = 1; repeated ContainerDevices devices = 2; … }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    /// Container name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Device-plugin devices allocated to it.
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
}

/// `ContainerDevices { string resource_name = 1; repeated string device_ids = 2; … }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    /// Extended resource name, e.g. `nvidia.com/gpu` or `nvidia.com/mig-1g.18gb`.
    #[prost(string, tag = "1")]
    pub resource_name: String,
    /// Device ids as the device plugin named them.
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// gRPC method paths of `v1.PodResourcesLister`.
pub const LIST_PATH: &str = "/v1.PodResourcesLister/List";
/// See [`LIST_PATH`].
pub const GET_PATH: &str = "/v1.PodResourcesLister/Get";

/// Failure to learn the pod's GPUs.
#[derive(Debug, thiserror::Error)]
pub enum PodResourcesError {
    /// The socket could not be reached (not mounted, kubelet down, no permission).
    #[error("cannot connect to the kubelet pod-resources socket {path}: {source}")]
    Connect {
        /// Socket path.
        path: PathBuf,
        /// Transport error.
        source: tonic::transport::Error,
    },
    /// The kubelet answered with an error.
    #[error("kubelet pod-resources {method} failed: {status}")]
    Call {
        /// `Get` or `List`.
        method: &'static str,
        /// gRPC status.
        status: tonic::Status,
    },
    /// The kubelet did not answer in time (it accepted the connection, or not, and said
    /// nothing).
    #[error("the kubelet pod-resources socket {path} did not answer within {}", humantime::format_duration(*timeout))]
    Timeout {
        /// Socket path.
        path: PathBuf,
        /// The bound, [`ANSWER_TIMEOUT`].
        timeout: Duration,
    },
    /// The kubelet does not list this pod (yet).
    #[error("the kubelet does not list pod {namespace}/{name}")]
    PodNotFound {
        /// Pod namespace.
        namespace: String,
        /// Pod name.
        name: String,
    },
}

/// Whether a resource name is an NVIDIA GPU or MIG resource (`nvidia.com/gpu`,
/// `nvidia.com/gpu.shared`, `nvidia.com/mig-…`).
pub fn is_nvidia_gpu_resource(name: &str) -> bool {
    name == "nvidia.com/gpu"
        || name.starts_with("nvidia.com/gpu.")
        || name.starts_with("nvidia.com/mig-")
}

/// What a device-plugin device id names, and whether it is one replica of a shared GPU;
/// `None` for a form no known plugin writes. The forms:
///
/// | plugin | GPU | MIG device | shared replica |
/// | --- | --- | --- | --- |
/// | NVIDIA, `DEVICE_ID_STRATEGY=uuid` (default) | `GPU-…` | `MIG-…` | `<id>::<n>` (time-slicing, MPS) |
/// | NVIDIA, `DEVICE_ID_STRATEGY=index` | `<index>` | `<gpu index>:<mig index>` | `<id>::<n>` |
/// | GKE (`container-engine-accelerators`) | `nvidia<minor>` | `nvidia<minor>/gi<gpu instance id>` | `…/vgpu<n>` (time-sharing) |
///
/// GKE's number is the device file's minor number (`/dev/nvidia<minor>`,
/// `nvmlDeviceGetMinorNumber`), not the NVML index; its `gi<k>` is the GPU instance id
/// (`nvmlDeviceGetGpuInstanceId`).
pub fn parse_device_id(id: &str) -> Option<(DeviceId, bool)> {
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    // The NVIDIA plugin's replicas: `<id>::<replica>`.
    let (base, replica) = match id.split_once("::") {
        Some((base, n)) => {
            number(n)?;
            (base, true)
        }
        None => (id, false),
    };
    if let Some(rest) = base.strip_prefix("nvidia") {
        // GKE: nvidia<minor>[/gi<k>][/vgpu<n>]
        let mut parts = rest.split('/');
        let minor = number(parts.next()?)?;
        let mut gpu_instance_id = None;
        let mut shared = replica;
        let mut next = parts.next();
        if let Some(gi) = next.and_then(|p| p.strip_prefix("gi")) {
            gpu_instance_id = Some(number(gi)?);
            next = parts.next();
        }
        if let Some(n) = next {
            number(n.strip_prefix("vgpu")?)?;
            shared = true;
            next = parts.next();
        }
        if next.is_some() {
            return None;
        }
        let id = match gpu_instance_id {
            None => DeviceId::Minor(minor),
            Some(gpu_instance_id) => DeviceId::GpuInstance {
                minor,
                gpu_instance_id,
            },
        };
        return Some((id, shared));
    }
    if (base.starts_with("GPU-") || base.starts_with("MIG-")) && base.len() > 4 {
        return Some((DeviceId::Uuid(base.to_string()), replica));
    }
    if let Some(i) = number(base) {
        return Some((DeviceId::Index(i), replica));
    }
    let (gpu, mig) = base.split_once(':')?;
    Some((
        DeviceId::MigIndex {
            gpu: number(gpu)?,
            mig: number(mig)?,
        },
        replica,
    ))
}

/// Every device id of an NVIDIA GPU or MIG resource ([`is_nvidia_gpu_resource`]) allocated
/// to a container of `pod`, in order, with its container.
pub fn nvidia_device_ids(
    pod: &PodResources,
) -> impl Iterator<Item = (&ContainerResources, &String)> {
    pod.containers.iter().flat_map(|c| {
        c.devices
            .iter()
            .filter(|d| is_nvidia_gpu_resource(&d.resource_name))
            .flat_map(move |d| d.device_ids.iter().map(move |id| (c, id)))
    })
}

/// The NVIDIA devices allocated to any container of `pod`, in order, one entry per device
/// (replicas of one GPU merged, shared if any is), and the device ids of NVIDIA resources
/// no known plugin form matches ([`parse_device_id`]).
pub fn gpu_devices(pod: &PodResources) -> (Vec<AllocatedDevice>, Vec<String>) {
    let mut out: Vec<AllocatedDevice> = Vec::new();
    let mut unknown = Vec::new();
    for (_, plugin_id) in nvidia_device_ids(pod) {
        let Some((id, shared)) = parse_device_id(plugin_id) else {
            if !unknown.contains(plugin_id) {
                unknown.push(plugin_id.clone());
            }
            continue;
        };
        match out.iter_mut().find(|a| a.id == id) {
            Some(a) => a.shared |= shared,
            None => out.push(AllocatedDevice {
                id,
                plugin_id: plugin_id.clone(),
                shared,
            }),
        }
    }
    (out, unknown)
}

/// A boxed future: the connection and the `List` call are compiled once for both their
/// callers (the sidecar's `pod_gpus`, node mode's `list`), not once inside each.
type Boxed<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, PodResourcesError>> + Send + 'a>>;

fn connect(socket: &Path) -> Boxed<'_, Channel> {
    Box::pin(connect_unboxed(socket))
}

async fn connect_unboxed(socket: &Path) -> Result<Channel, PodResourcesError> {
    let path = socket.to_path_buf();
    // The URI is required by the API but unused: the connector dials the unix socket.
    Endpoint::from_static("http://kubelet.invalid")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|source| PodResourcesError::Connect {
            path: socket.to_path_buf(),
            source,
        })
}

async fn unary<Req, Resp>(
    channel: Channel,
    path: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("kubelet not ready: {e}")))?;
    let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
    grpc.unary(
        tonic::Request::new(request),
        PathAndQuery::from_static(path),
        codec,
    )
    .await
    .map(tonic::Response::into_inner)
}

/// `List` on a connected channel: every pod of the node.
fn list_on(channel: Channel) -> Boxed<'static, Vec<PodResources>> {
    Box::pin(async move {
        unary::<_, ListPodResourcesResponse>(channel, LIST_PATH, ListPodResourcesRequest {})
            .await
            .map(|r| r.pod_resources)
            .map_err(|status| PodResourcesError::Call {
                method: "List",
                status,
            })
    })
}

/// Asks the kubelet at `socket` for the GPUs of pod `namespace/name`.
///
/// # Errors
/// [`PodResourcesError`]: socket unreachable, call failed, or pod not listed.
pub async fn pod_gpus(
    socket: &Path,
    namespace: &str,
    name: &str,
) -> Result<(Vec<AllocatedDevice>, Vec<String>), PodResourcesError> {
    let channel = connect(socket).await?;
    let get = GetPodResourcesRequest {
        pod_name: name.to_string(),
        pod_namespace: namespace.to_string(),
    };
    let pod = match unary::<_, GetPodResourcesResponse>(channel.clone(), GET_PATH, get).await {
        Ok(resp) => resp.pod_resources,
        Err(status) if status.code() == tonic::Code::Unimplemented => {
            tracing::debug!("kubelet pod-resources Get is not enabled; using List");
            list_on(channel)
                .await?
                .into_iter()
                .find(|p| p.name == name && p.namespace == namespace)
        }
        Err(status) => {
            return Err(PodResourcesError::Call {
                method: "Get",
                status,
            })
        }
    };
    let pod = pod.ok_or_else(|| PodResourcesError::PodNotFound {
        namespace: namespace.to_string(),
        name: name.to_string(),
    })?;
    Ok(gpu_devices(&pod))
}

/// Asks the kubelet at `socket` for every pod of the node and its devices (`List`; node
/// mode), within [`ANSWER_TIMEOUT`].
///
/// # Errors
/// [`PodResourcesError`]: socket unreachable, call failed, or no answer in time.
pub async fn list(socket: &Path) -> Result<Vec<PodResources>, PodResourcesError> {
    let call = async {
        let channel = connect(socket).await?;
        list_on(channel).await
    };
    tokio::time::timeout(ANSWER_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(PodResourcesError::Timeout {
                path: socket.to_path_buf(),
                timeout: ANSWER_TIMEOUT,
            })
        })
}

/// Longest wait for one answer of the kubelet (connection and call), after which the question
/// is asked again: a kubelet that accepts the connection and never answers does not hold the
/// agent forever without a word.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks until the kubelet answers with this pod's GPUs: every 5 s (each try bounded by
/// [`ANSWER_TIMEOUT`]), logging the first failure and then once a minute. Never returns an
/// error; cancel it to give up. A device id of an NVIDIA resource that no known
/// device-plugin form matches is warned about (naming the mode) and left out.
pub async fn wait_for_pod_gpus(socket: &Path, namespace: &str, name: &str) -> Vec<AllocatedDevice> {
    let mut tries = 0u32;
    loop {
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, pod_gpus(socket, namespace, name))
            .await
            .unwrap_or_else(|_| {
                Err(PodResourcesError::Timeout {
                    path: socket.to_path_buf(),
                    timeout: ANSWER_TIMEOUT,
                })
            });
        match answer {
            Ok((devices, unknown)) => {
                if !unknown.is_empty() {
                    tracing::warn!(
                        pod = name,
                        namespace,
                        device_ids = %unknown.join(", "),
                        "{MODE}: the kubelet lists NVIDIA devices for this pod whose ids no known device plugin writes (GPU-/MIG- UUIDs, NVML indices, <gpu>:<mig>, nvidia<N>[/gi<K>][/vgpu<M>], each optionally ::<replica>); they are not reported"
                    );
                }
                if devices.is_empty() {
                    tracing::warn!(
                        pod = name,
                        namespace,
                        "{MODE}: the kubelet lists no NVIDIA GPU for this pod: nothing to report"
                    );
                } else {
                    let ids: Vec<&str> = devices.iter().map(|d| d.plugin_id.as_str()).collect();
                    tracing::info!(pod = name, namespace, devices = %ids.join(", "), "this pod's GPUs, from the kubelet pod-resources API");
                }
                return devices;
            }
            Err(e) => {
                if tries % 12 == 0 {
                    let hint = unreachable_socket_hint(socket, socket.exists());
                    tracing::warn!("{e}; {hint}; retrying every 5 s");
                }
                tries += 1;
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }
}

/// What to do about a kubelet socket that does not answer: when the file is not there at all
/// (the chart mounts the node's directory with `DirectoryOrCreate`, so the pod starts on a
/// node whose kubelet keeps it elsewhere), the kubelet root is named.
pub fn unreachable_socket_hint(socket: &Path, exists: bool) -> String {
    if exists {
        format!("{MODE} needs the kubelet's socket mounted read-only from the host (the chart's hostPath <kubeletRoot>/pod-resources) and the kubelet running")
    } else {
        format!(
            "{} does not exist: this node's kubelet keeps its pod-resources socket elsewhere (its --root-dir is not /var/lib/kubelet: k0s /var/lib/k0s/kubelet, MicroK8s /var/snap/microk8s/common/var/lib/kubelet; set the Helm chart's kubeletRoot), or the node's directory is not mounted there; {MODE} waits, the trainer is not held",
            socket.display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_socket_names_the_kubelet_root() {
        let path = Path::new("/var/lib/kubelet/pod-resources/kubelet.sock");
        let missing = unreachable_socket_hint(path, false);
        assert!(missing.starts_with("/var/lib/kubelet/pod-resources/kubelet.sock does not exist"));
        assert!(missing.contains("kubeletRoot") && missing.contains("/var/lib/k0s/kubelet"));
        assert!(!unreachable_socket_hint(path, true).contains("does not exist"));
    }

    fn allocated(id: DeviceId, plugin_id: &str, shared: bool) -> AllocatedDevice {
        AllocatedDevice {
            id,
            plugin_id: plugin_id.into(),
            shared,
        }
    }

    #[test]
    fn collects_nvidia_devices_of_every_container_once() {
        let pod = PodResources {
            name: "train-0".into(),
            namespace: "ml".into(),
            containers: vec![
                ContainerResources {
                    name: "trainer".into(),
                    devices: vec![
                        ContainerDevices {
                            resource_name: "nvidia.com/gpu".into(),
                            device_ids: vec!["GPU-a".into(), "GPU-b".into()],
                        },
                        ContainerDevices {
                            resource_name: "example.com/fpga".into(),
                            device_ids: vec!["fpga0".into()],
                        },
                    ],
                },
                ContainerResources {
                    name: "helper".into(),
                    devices: vec![
                        ContainerDevices {
                            resource_name: "nvidia.com/mig-1g.18gb".into(),
                            device_ids: vec!["MIG-c".into(), "GPU-a".into()],
                        },
                        ContainerDevices {
                            resource_name: "nvidia.com/gpu".into(),
                            device_ids: vec![
                                "3".into(),
                                "GPU-b::1".into(),
                                "GPU-d::0".into(),
                                "gpu-zero".into(),
                            ],
                        },
                    ],
                },
            ],
        };
        assert_eq!(
            gpu_devices(&pod),
            (
                vec![
                    allocated(DeviceId::Uuid("GPU-a".into()), "GPU-a", false),
                    allocated(DeviceId::Uuid("GPU-b".into()), "GPU-b", true),
                    allocated(DeviceId::Uuid("MIG-c".into()), "MIG-c", false),
                    allocated(DeviceId::Index(3), "3", false),
                    allocated(DeviceId::Uuid("GPU-d".into()), "GPU-d::0", true),
                ],
                vec!["gpu-zero".to_string()]
            )
        );
    }

    #[test]
    fn device_plugin_id_forms() {
        let parse = |s: &str| parse_device_id(s);
        // NVIDIA device plugin
        assert_eq!(
            parse("GPU-8f6c"),
            Some((DeviceId::Uuid("GPU-8f6c".into()), false))
        );
        assert_eq!(
            parse("MIG-12ab::3"),
            Some((DeviceId::Uuid("MIG-12ab".into()), true))
        );
        assert_eq!(parse("2"), Some((DeviceId::Index(2), false)));
        assert_eq!(parse("2::0"), Some((DeviceId::Index(2), true)));
        assert_eq!(
            parse("1:4"),
            Some((DeviceId::MigIndex { gpu: 1, mig: 4 }, false))
        );
        // GKE
        assert_eq!(parse("nvidia0"), Some((DeviceId::Minor(0), false)));
        assert_eq!(parse("nvidia1/vgpu3"), Some((DeviceId::Minor(1), true)));
        assert_eq!(
            parse("nvidia0/gi3"),
            Some((
                DeviceId::GpuInstance {
                    minor: 0,
                    gpu_instance_id: 3
                },
                false
            ))
        );
        assert_eq!(
            parse("nvidia2/gi9/vgpu0"),
            Some((
                DeviceId::GpuInstance {
                    minor: 2,
                    gpu_instance_id: 9
                },
                true
            ))
        );
        for bad in [
            "nvidia",
            "nvidiaX",
            "nvidia0/vgpu1/gi2",
            "nvidia0/foo",
            "GPU-",
            "1:",
            "a::1",
            "GPU-a::x",
            "",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
