//! What the webhook injects and when: the sidecar as the chart renders it
//! ([`SidecarTemplate`], the `sidecar.json` of the webhook's ConfigMap), and the decision
//! for one pod ([`Injector::admit`]), a pure function from the pod to an [`Outcome`] and,
//! when injecting, an RFC 6902 JSON patch.
//!
//! The chart's named templates (`helm/gpu-otel-sidecar/templates/_sidecar.tpl`) stay the one
//! source of the sidecar: the chart renders them into `sidecar.json`, and the webhook adds
//! what they render, changing only what depends on the pod:
//! - `K8S_CONTAINER_NAME` names the pod's GPU container (the one requesting `nvidia.com/gpu`,
//!   `nvidia.com/gpu.*` or `nvidia.com/mig-*`, or holding a DRA claim; the annotation
//!   [`CONTAINER_ANNOTATION`] chooses among several);
//! - with `gpuVisibility: dra`, the sidecar's `resources.claims` are the GPU container's
//!   (copied as the pod has them), so it sees the same devices; the pod's own
//!   `resourceClaims` are left as they are.
//!
//! The patch only adds: the sidecar to `initContainers` (native) or `containers` (classic),
//! its volumes, the pod fields the templates set (`shareProcessNamespace` in classic mode),
//! and the annotation [`STATUS_ANNOTATION`]. A pod that already has a container named like
//! the sidecar is left as it is (idempotent, also across `reinvocationPolicy: IfNeeded`).

use std::path::Path;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use crate::attribution::pod_resources::is_nvidia_gpu_resource;

/// Pod annotation that opts a pod in (`"true"`) or out (`"false"`).
pub const INJECT_ANNOTATION: &str = "gpu-otel-sidecar.io/inject";
/// Namespace label that opts every pod of the namespace in (value [`NAMESPACE_LABEL_VALUE`]).
pub const NAMESPACE_LABEL: &str = "gpu-otel-sidecar.io/inject";
/// The value of [`NAMESPACE_LABEL`] that opts a namespace in.
pub const NAMESPACE_LABEL_VALUE: &str = "enabled";
/// Pod annotation naming the GPU container the sidecar reports for, when several request GPUs.
pub const CONTAINER_ANNOTATION: &str = "gpu-otel-sidecar.io/container";
/// Annotation the webhook sets on a pod it injected into (value `injected`).
pub const STATUS_ANNOTATION: &str = "gpu-otel-sidecar.io/status";
/// The environment variable that names the GPU container in the sidecar.
pub const TARGET_ENV: &str = "K8S_CONTAINER_NAME";

/// What the webhook reads of a pod, as k8s-openapi types: its `metadata`, and of its `spec`
/// the containers, init containers and volumes. The rest of the spec (affinity, security
/// context, …) and the `status` are not parsed: the decision does not need them, and their
/// parsers would add about 100 KiB to the binary. They are kept in the pod, as the patch
/// only adds.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PodView {
    /// `metadata`.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: Option<PodSpecView>,
}

/// The parts of a `PodSpec` the webhook reads (k8s-openapi's field types).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecView {
    /// `containers`.
    #[serde(default)]
    pub containers: Vec<Container>,
    /// `initContainers`.
    #[serde(default)]
    pub init_containers: Option<Vec<Container>>,
    /// `volumes`, by name.
    #[serde(default)]
    pub volumes: Option<Vec<Named>>,
}

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

/// The sidecar as the chart renders it (`GPU_SIDECAR_WEBHOOK_SIDECAR`, JSON): each list is
/// what one named template renders for the chart's values. Made by [`SidecarTemplate::load`]
/// or [`SidecarTemplate::from_json`], which check it.
#[derive(Debug, Clone)]
pub struct SidecarTemplate {
    /// `gpuVisibility.mode`.
    pub gpu_visibility: GpuVisibility,
    /// `gpu-otel-sidecar.podSpec`.
    pub pod_spec: PodFields,
    /// `gpu-otel-sidecar.initContainers` (native mode: the sidecar, `restartPolicy: Always`).
    pub init_containers: Vec<Container>,
    /// `gpu-otel-sidecar.containers` (classic mode: the sidecar).
    pub containers: Vec<Container>,
    /// `gpu-otel-sidecar.volumes`, by name.
    pub volumes: Vec<Named>,
    /// The file as read: what is added to pods is taken from here, as the chart wrote it
    /// (the typed fields above check it).
    json: Value,
}

/// The file's shape, for parsing.
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

impl SidecarTemplate {
    /// Reads and checks the file: exactly one sidecar container (in `initContainers` or
    /// `containers`) with a `K8S_CONTAINER_NAME` variable.
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

    /// The template in `json` (the file's contents), checked (see [`SidecarTemplate::check`]).
    ///
    /// # Errors
    /// What is wrong, in words.
    pub fn from_json(json: Value) -> Result<Self, String> {
        // Parsed from a `Value`, as the pods are: one copy of the k8s-openapi parsers.
        let shape: Shape = serde_json::from_value(json.clone()).map_err(|e| {
            format!(
                "not a sidecar file as the chart renders it ({e}); expected {{\"gpuVisibility\": …, \"podSpec\": {{…}}, \"initContainers\": […], \"containers\": […], \"volumes\": […]}}"
            )
        })?;
        let template = Self {
            gpu_visibility: shape.gpu_visibility,
            pod_spec: shape.pod_spec,
            init_containers: shape.init_containers,
            containers: shape.containers,
            volumes: shape.volumes,
            json,
        };
        template.check()?;
        Ok(template)
    }

    /// Checks the shape: exactly one sidecar container (in `initContainers` or `containers`)
    /// with a `K8S_CONTAINER_NAME` variable.
    ///
    /// # Errors
    /// What is wrong, in words.
    fn check(&self) -> Result<(), String> {
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
        Ok(())
    }

    /// The sidecar container's name.
    pub fn container_name(&self) -> &str {
        self.init_containers
            .iter()
            .chain(&self.containers)
            .next()
            .map_or("", |c| c.name.as_str())
    }
}

/// What the webhook did with one AdmissionReview: the `gpu_sidecar.webhook.outcome`
/// attribute of `gpu_sidecar.webhook.admissions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The sidecar was added.
    Injected,
    /// The pod already has the sidecar: unchanged.
    AlreadyInjected,
    /// The pod says `gpu-otel-sidecar.io/inject: "false"`: unchanged.
    OptedOut,
    /// Neither the pod's annotation nor its namespace asked for the sidecar: unchanged.
    NotRequested,
    /// No container requests a GPU: unchanged.
    NoGpu,
    /// Several containers request GPUs and [`CONTAINER_ANNOTATION`] does not choose one.
    AmbiguousContainer,
    /// [`CONTAINER_ANNOTATION`] names no GPU-requesting container of the pod.
    UnknownContainer,
    /// The GPU container's GPUs are not of the kind the sidecar's `gpuVisibility` sees:
    /// `dra` and no resource claim to share, or `pod-resources` (which lists device-plugin
    /// GPUs) and only DRA claims.
    VisibilityMismatch,
    /// The pod already has a volume named like one the sidecar needs: unchanged.
    VolumeConflict,
    /// Not a pod being created (another kind or operation): unchanged.
    Ignored,
    /// The request was not a readable AdmissionReview: answered 400.
    Invalid,
}

impl Outcome {
    /// Every outcome, in documentation order.
    pub const ALL: [Outcome; 11] = [
        Outcome::Injected,
        Outcome::AlreadyInjected,
        Outcome::OptedOut,
        Outcome::NotRequested,
        Outcome::NoGpu,
        Outcome::AmbiguousContainer,
        Outcome::UnknownContainer,
        Outcome::VisibilityMismatch,
        Outcome::VolumeConflict,
        Outcome::Ignored,
        Outcome::Invalid,
    ];

    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Injected => "injected",
            Outcome::AlreadyInjected => "already_injected",
            Outcome::OptedOut => "opted_out",
            Outcome::NotRequested => "not_requested",
            Outcome::NoGpu => "no_gpu",
            Outcome::AmbiguousContainer => "ambiguous_container",
            Outcome::UnknownContainer => "unknown_container",
            Outcome::VisibilityMismatch => "visibility_mismatch",
            Outcome::VolumeConflict => "volume_conflict",
            Outcome::Ignored => "ignored",
            Outcome::Invalid => "invalid",
        }
    }
}

/// Which webhook entry of the `MutatingWebhookConfiguration` sent the pod: that decides
/// whether the pod asked for the sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `POST /mutate`: pods in any namespace (but the excluded ones); injected when annotated
    /// `gpu-otel-sidecar.io/inject: "true"`.
    Pod,
    /// `POST /mutate/namespace`: pods of namespaces labelled
    /// `gpu-otel-sidecar.io/inject=enabled`; injected unless annotated `"false"`.
    Namespace,
}

/// The decision for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    /// What was done.
    pub outcome: Outcome,
    /// The patch, for [`Outcome::Injected`].
    pub patch: Option<Patch>,
    /// The GPU container the sidecar reports for, when one was chosen.
    pub target: Option<String>,
    /// Why, in one sentence (logged, and the response's status message).
    pub reason: String,
    /// Whether the pod asked for the sidecar (then a skip is worth a warning to the client).
    pub requested: bool,
}

impl Admission {
    fn skip(outcome: Outcome, requested: bool, reason: String) -> Self {
        Self {
            outcome,
            patch: None,
            target: None,
            reason,
            requested,
        }
    }
}

/// Decides and builds the patch for pods, from one [`SidecarTemplate`].
#[derive(Debug, Clone)]
pub struct Injector {
    template: SidecarTemplate,
    /// The template's containers, as JSON (each admission copies and adapts them).
    init_containers: Vec<Value>,
    containers: Vec<Value>,
    volumes: Vec<Value>,
}

impl Injector {
    /// An injector for `template` (made by [`SidecarTemplate::load`] or
    /// [`SidecarTemplate::from_json`], so checked).
    pub fn new(template: SidecarTemplate) -> Self {
        let list = |key: &str| -> Vec<Value> {
            template.json[key].as_array().cloned().unwrap_or_default()
        };
        Self {
            init_containers: list("initContainers"),
            containers: list("containers"),
            volumes: list("volumes"),
            template,
        }
    }

    /// The template this injector adds.
    pub fn template(&self) -> &SidecarTemplate {
        &self.template
    }

    /// The decision for `pod` (as typed) whose spec is `spec` (the same pod's `spec`, as
    /// the request carried it: the GPU container's claims are copied from there, so that
    /// fields this build does not know are kept).
    pub fn admit(&self, scope: Scope, pod: &PodView, spec: &Value) -> Admission {
        let annotations = pod.metadata.annotations.as_ref();
        let annotation = |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str);
        let requested = match (annotation(INJECT_ANNOTATION), scope) {
            (Some("false"), _) => {
                return Admission::skip(
                    Outcome::OptedOut,
                    false,
                    format!("the pod opts out ({INJECT_ANNOTATION}: \"false\")"),
                )
            }
            (Some("true"), _) | (_, Scope::Namespace) => true,
            (_, Scope::Pod) => false,
        };
        if !requested {
            return Admission::skip(
                Outcome::NotRequested,
                false,
                format!(
                    "the pod does not ask for the sidecar ({INJECT_ANNOTATION}: \"true\", or the namespace label {NAMESPACE_LABEL}={NAMESPACE_LABEL_VALUE})"
                ),
            );
        }
        let Some(pod_spec) = pod.spec.as_ref() else {
            return Admission::skip(Outcome::NoGpu, true, "the pod has no spec".into());
        };
        let sidecar_name = self.template.container_name();
        let present = pod_spec
            .init_containers
            .iter()
            .flatten()
            .chain(&pod_spec.containers)
            .any(|c| c.name == sidecar_name);
        if present {
            return Admission::skip(
                Outcome::AlreadyInjected,
                true,
                format!("the pod already has a container named {sidecar_name:?}"),
            );
        }
        let gpu: Vec<(usize, &Container)> = pod_spec
            .containers
            .iter()
            .enumerate()
            .filter(|(_, c)| requests_gpu(c))
            .collect();
        let chosen = match annotation(CONTAINER_ANNOTATION) {
            Some(name) => match gpu.iter().find(|(_, c)| c.name == name) {
                Some(hit) => *hit,
                None => {
                    return Admission::skip(
                        Outcome::UnknownContainer,
                        true,
                        format!(
                            "{CONTAINER_ANNOTATION} names {name:?}, which is not a container of the pod requesting a GPU ({})",
                            names(&gpu)
                        ),
                    )
                }
            },
            None => match gpu.as_slice() {
                [] => {
                    return Admission::skip(
                        Outcome::NoGpu,
                        true,
                        "no container requests a GPU (nvidia.com/gpu, nvidia.com/gpu.*, nvidia.com/mig-*, or a DRA resource claim)".into(),
                    )
                }
                [one] => *one,
                several => {
                    return Admission::skip(
                        Outcome::AmbiguousContainer,
                        true,
                        format!(
                            "several containers request GPUs ({}): name the one to report for with the annotation {CONTAINER_ANNOTATION}",
                            names(several)
                        ),
                    )
                }
            },
        };
        let (index, target) = chosen;
        let claims = spec
            .pointer(&format!("/containers/{index}/resources/claims"))
            .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
            .cloned();
        let mismatch = match self.template.gpu_visibility {
            GpuVisibility::Dra if claims.is_none() => Some(
                "gpuVisibility is dra, but container {} holds no resource claim for the sidecar to share",
            ),
            GpuVisibility::PodResources if !requests_device_plugin_gpu(target) => Some(
                "gpuVisibility is pod-resources, which sees device-plugin GPUs (nvidia.com/gpu, nvidia.com/mig-*), but container {} holds only DRA claims: install the chart with gpuVisibility.mode=dra for such pods",
            ),
            _ => None,
        };
        if let Some(why) = mismatch {
            return Admission::skip(
                Outcome::VisibilityMismatch,
                true,
                why.replace("{}", &format!("{:?}", target.name)),
            );
        }
        if let Some(clash) = self.template.volumes.iter().find(|v| {
            pod_spec
                .volumes
                .iter()
                .flatten()
                .any(|mine| mine.name == v.name)
        }) {
            return Admission::skip(
                Outcome::VolumeConflict,
                true,
                format!(
                    "the pod already has a volume named {:?}, which the sidecar needs",
                    clash.name
                ),
            );
        }

        let adapt = |container: &Value| -> Value {
            let mut c = container.clone();
            if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
                for e in env.iter_mut().filter(|e| e["name"] == TARGET_ENV) {
                    *e = serde_json::json!({"name": TARGET_ENV, "value": target.name});
                }
            }
            if self.template.gpu_visibility == GpuVisibility::Dra {
                if let (Some(resources), Some(claims)) = (
                    c.as_object_mut().map(|o| {
                        o.entry("resources")
                            .or_insert_with(|| Value::Object(Default::default()))
                    }),
                    claims.as_ref(),
                ) {
                    resources["claims"] = claims.clone();
                }
            }
            c
        };
        let mut ops = Vec::new();
        let mut add = |path: PointerBuf, value: Value| {
            ops.push(PatchOperation::Add(AddOperation { path, value }));
        };
        if annotations.is_none() {
            add(
                PointerBuf::from_tokens(["metadata", "annotations"]),
                Value::Object(Default::default()),
            );
        }
        add(
            PointerBuf::from_tokens(["metadata", "annotations", STATUS_ANNOTATION]),
            Value::String("injected".into()),
        );
        if let Some(share) = self.template.pod_spec.share_process_namespace {
            add(
                PointerBuf::from_tokens(["spec", "shareProcessNamespace"]),
                Value::Bool(share),
            );
        }
        let mut append = |field: &str, exists: bool, items: Vec<Value>| {
            if items.is_empty() {
                return;
            }
            if exists {
                for item in items {
                    add(PointerBuf::from_tokens(["spec", field, "-"]), item);
                }
            } else {
                add(
                    PointerBuf::from_tokens(["spec", field]),
                    Value::Array(items),
                );
            }
        };
        append(
            "initContainers",
            pod_spec.init_containers.is_some(),
            self.init_containers.iter().map(adapt).collect(),
        );
        append(
            "containers",
            true,
            self.containers.iter().map(adapt).collect(),
        );
        append("volumes", pod_spec.volumes.is_some(), self.volumes.clone());
        Admission {
            outcome: Outcome::Injected,
            patch: Some(Patch(ops)),
            target: Some(target.name.clone()),
            reason: format!(
                "sidecar {sidecar_name:?} injected for container {:?}",
                target.name
            ),
            requested: true,
        }
    }
}

/// Whether `c` requests an NVIDIA GPU: a GPU or MIG extended resource in its limits or
/// requests ([`is_nvidia_gpu_resource`], the same test the pod-resources client applies), or
/// a DRA resource claim.
pub fn requests_gpu(c: &Container) -> bool {
    requests_device_plugin_gpu(c)
        || c.resources
            .as_ref()
            .and_then(|r| r.claims.as_ref())
            .is_some_and(|c| !c.is_empty())
}

/// Whether `c` requests a GPU or MIG extended resource of the NVIDIA device plugin (the
/// devices the kubelet's pod-resources API lists).
pub fn requests_device_plugin_gpu(c: &Container) -> bool {
    let Some(r) = c.resources.as_ref() else {
        return false;
    };
    let listed = |m: &Option<std::collections::BTreeMap<String, _>>| {
        m.iter()
            .flatten()
            .any(|(name, _)| is_nvidia_gpu_resource(name))
    };
    listed(&r.limits) || listed(&r.requests)
}

fn names(containers: &[(usize, &Container)]) -> String {
    if containers.is_empty() {
        return "none does".into();
    }
    containers
        .iter()
        .map(|(_, c)| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
