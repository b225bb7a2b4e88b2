//! The sidecar as the chart renders it ([`SidecarTemplate`], the `sidecar.json` of the
//! webhook's ConfigMap): what the named templates of
//! `helm/gpu-otel-sidecar/templates/_sidecar.tpl` render for the chart's values, twice: for
//! pods on the pod network, and for `hostNetwork` pods ([`SidecarTemplate::host_network`]:
//! no container port, probes that run `gpu-otel-sidecar health` over a Unix socket in an
//! `emptyDir`, since a declared port of a `hostNetwork` pod is a host port the scheduler
//! counts and two pods on one node cannot share).
//!
//! ```json
//! {"gpuVisibility": "pod-resources",
//!  "podSpec": {…}, "initContainers": […], "containers": […], "volumes": […],
//!  "hostNetwork": {"podSpec": {…}, "initContainers": […], "containers": […], "volumes": […]}}
//! ```

use std::path::Path;

use k8s_openapi::api::core::v1::Container;
use serde::Deserialize;
use serde_json::Value;

/// The environment variable that names the GPU container in the sidecar.
pub const TARGET_ENV: &str = "K8S_CONTAINER_NAME";

/// A list item of which only the name matters here (a pod's or the sidecar's volume). Not
/// k8s-openapi's `Volume`: the webhook needs only the names, and that type's parser (thirty
/// volume sources) weighs about 95 KiB in the binary. The volumes are added as the chart
/// rendered them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Named {
    /// `name`.
    pub name: String,
}

/// How the sidecar sees the pod's GPUs (`gpuVisibility.mode` of the chart's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuVisibility {
    /// The kubelet's pod-resources API tells which GPUs the pod holds.
    PodResources,
    /// A DRA ResourceClaim shared with the GPU container.
    Dra,
    /// A fixed list of UUIDs.
    Uuids,
    /// Every GPU of the node.
    All,
}

impl GpuVisibility {
    /// The chart's `gpuVisibility.mode` value: `pod-resources`, `dra`, `uuids` or `all`.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuVisibility::PodResources => "pod-resources",
            GpuVisibility::Dra => "dra",
            GpuVisibility::Uuids => "uuids",
            GpuVisibility::All => "all",
        }
    }
}

/// Pod-level fields the named template `gpu-otel-sidecar.podSpec` renders.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodFields {
    /// `shareProcessNamespace` (classic mode: `true`).
    pub share_process_namespace: Option<bool>,
}

/// What is added to one kind of pod: each list is what one named template renders.
#[derive(Debug, Clone)]
pub struct Placement {
    /// `gpu-otel-sidecar.podSpec`.
    pub pod_spec: PodFields,
    /// `gpu-otel-sidecar.initContainers` (native mode: the sidecar, `restartPolicy: Always`).
    pub init_containers: Vec<Container>,
    /// `gpu-otel-sidecar.containers` (classic mode: the sidecar).
    pub containers: Vec<Container>,
    /// `gpu-otel-sidecar.volumes`, by name.
    pub volumes: Vec<Named>,
    /// The lists as the chart wrote them (what is added to pods is taken from here; the typed
    /// fields above check it).
    pub json: PlacementJson,
}

/// A [`Placement`]'s lists as JSON.
#[derive(Debug, Clone, Default)]
pub struct PlacementJson {
    /// `initContainers`.
    pub init_containers: Vec<Value>,
    /// `containers`.
    pub containers: Vec<Value>,
    /// `volumes`.
    pub volumes: Vec<Value>,
}

/// The sidecar as the chart renders it (`GPU_SIDECAR_WEBHOOK_SIDECAR`, JSON). Made by
/// [`SidecarTemplate::load`] or [`SidecarTemplate::from_json`], which check it.
#[derive(Debug, Clone)]
pub struct SidecarTemplate {
    /// `gpuVisibility.mode`.
    pub gpu_visibility: GpuVisibility,
    /// For pods on the pod network.
    pub pod_network: Placement,
    /// For `hostNetwork: true` pods (the named templates with the value `hostNetwork: true`).
    pub host_network: Placement,
}

/// One placement's shape, for parsing.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PlacementShape {
    #[serde(default)]
    pod_spec: PodFields,
    #[serde(default)]
    init_containers: Vec<Container>,
    #[serde(default)]
    containers: Vec<Container>,
    #[serde(default)]
    volumes: Vec<Named>,
}

/// The file's shape, for parsing: the pod-network placement's fields at the top level, as
/// [`PlacementShape`]'s (serde cannot `flatten` under `deny_unknown_fields`).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Shape {
    gpu_visibility: GpuVisibility,
    #[serde(default)]
    pod_spec: PodFields,
    #[serde(default)]
    init_containers: Vec<Container>,
    #[serde(default)]
    containers: Vec<Container>,
    #[serde(default)]
    volumes: Vec<Named>,
    host_network: PlacementShape,
}

/// A sidecar file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct TemplateError {
    /// The file.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

fn lists(json: &Value) -> PlacementJson {
    let list = |key: &str| json[key].as_array().cloned().unwrap_or_default();
    PlacementJson {
        init_containers: list("initContainers"),
        containers: list("containers"),
        volumes: list("volumes"),
    }
}

impl Placement {
    fn new(shape: PlacementShape, json: &Value) -> Self {
        Self {
            pod_spec: shape.pod_spec,
            init_containers: shape.init_containers,
            containers: shape.containers,
            volumes: shape.volumes,
            json: lists(json),
        }
    }

    /// The one sidecar container, checked: exactly one (in `initContainers` or
    /// `containers`) with a `K8S_CONTAINER_NAME` variable.
    fn sidecar(&self) -> Result<&Container, String> {
        let all: Vec<&Container> = self
            .init_containers
            .iter()
            .chain(&self.containers)
            .collect();
        let [sidecar] = all.as_slice() else {
            return Err(format!(
                "expected exactly one sidecar container in initContainers or containers, found {}",
                all.len()
            ));
        };
        let has_target = sidecar.env.iter().flatten().any(|e| e.name == TARGET_ENV);
        if !has_target {
            return Err(format!(
                "the sidecar container {:?} has no {TARGET_ENV} variable",
                sidecar.name
            ));
        }
        Ok(sidecar)
    }

    /// Whether the sidecar goes to `initContainers` (a native sidecar).
    pub fn is_native(&self) -> bool {
        !self.init_containers.is_empty()
    }
}

impl SidecarTemplate {
    /// Reads and checks the file (see [`SidecarTemplate::from_json`]).
    ///
    /// # Errors
    /// [`TemplateError`] naming the file and the problem.
    pub fn load(path: &Path) -> Result<Self, TemplateError> {
        let err = |reason: String| TemplateError {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read(path).map_err(|e| err(format!("cannot read it ({e})")))?;
        let json: Value =
            serde_json::from_slice(&text).map_err(|e| err(format!("not JSON ({e})")))?;
        Self::from_json(json).map_err(err)
    }

    /// The template in `json` (the file's contents), checked: in each placement exactly one
    /// sidecar container (in `initContainers` or `containers`) with a `K8S_CONTAINER_NAME`
    /// variable, of the same name and place in both.
    ///
    /// # Errors
    /// What is wrong, in words.
    pub fn from_json(json: Value) -> Result<Self, String> {
        // Parsed from a `Value`, as the pods are: one copy of the k8s-openapi parsers.
        let shape: Shape = serde_json::from_value(json.clone()).map_err(|e| {
            format!(
                "not a sidecar file as the chart renders it ({e}); expected {{\"gpuVisibility\": …, \"podSpec\": {{…}}, \"initContainers\": […], \"containers\": […], \"volumes\": […], \"hostNetwork\": {{\"podSpec\": …, \"initContainers\": …, \"containers\": …, \"volumes\": …}}}}"
            )
        })?;
        let template = Self {
            gpu_visibility: shape.gpu_visibility,
            pod_network: Placement::new(
                PlacementShape {
                    pod_spec: shape.pod_spec,
                    init_containers: shape.init_containers,
                    containers: shape.containers,
                    volumes: shape.volumes,
                },
                &json,
            ),
            host_network: Placement::new(shape.host_network, &json["hostNetwork"]),
        };
        let pod = template.pod_network.sidecar()?;
        let host = template
            .host_network
            .sidecar()
            .map_err(|e| format!("hostNetwork: {e}"))?;
        if pod.name != host.name
            || template.pod_network.is_native() != template.host_network.is_native()
        {
            return Err(format!(
                "hostNetwork: the sidecar {:?} differs in name or placement from {:?}",
                host.name, pod.name
            ));
        }
        Ok(template)
    }

    /// The placement for a pod: [`SidecarTemplate::host_network`] when `host_network`.
    pub fn placement(&self, host_network: bool) -> &Placement {
        if host_network {
            &self.host_network
        } else {
            &self.pod_network
        }
    }

    /// The sidecar container's name.
    pub fn container_name(&self) -> &str {
        self.pod_network
            .init_containers
            .iter()
            .chain(&self.pod_network.containers)
            .next()
            .map_or("", |c| c.name.as_str())
    }
}
