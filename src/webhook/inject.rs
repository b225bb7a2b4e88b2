//! When the webhook injects, and what: the decision for one pod ([`Injector::admit`]), a pure
//! function from the pod to an [`Outcome`] and, when injecting, an RFC 6902 JSON patch.
//!
//! What is added is the sidecar as the chart renders it ([`SidecarTemplate`], from the chart's
//! named templates in `helm/gpu-otel-sidecar/templates/_sidecar.tpl`, the one source of the
//! sidecar), in the placement for the pod's network ([`SidecarTemplate::placement`]:
//! `hostNetwork` pods get the variant without a container port). Only what depends on the pod
//! changes:
//! - `K8S_CONTAINER_NAME` names the pod's GPU container (the one whose GPU count is above
//!   zero, or that holds a DRA claim: [`gpu_use`]; the annotation [`CONTAINER_ANNOTATION`]
//!   chooses among several);
//! - with `gpuVisibility: dra`, the sidecar's `resources.claims` are the GPU container's
//!   (copied as the pod has them), so it sees the same devices; the pod's own
//!   `resourceClaims` are left as they are.
//!
//! - in classic mode, the exit rule follows the pod's `restartPolicy` ([`ClassicExit`]): `Never`
//!   keeps it as rendered (without a `GPU_SIDECAR_POD_RESTART_POLICY` the rendering may carry
//!   from `extraEnv`); `OnFailure` adds `GPU_SIDECAR_POD_RESTART_POLICY=OnFailure` after
//!   it (the sidecar then waits out the kubelet's restarts of the trainer); `Always` (also
//!   the API server's default) leaves it out, and `shareProcessNamespace` with it: such a
//!   sidecar runs as long as the pod (ending by itself would only make the kubelet restart it).
//!
//! The patch only adds: the sidecar to `initContainers` (native) or `containers` (classic),
//! its volumes, the pod fields the templates set (`shareProcessNamespace` in classic mode,
//! unless the pod is `restartPolicy: Always`), and the annotation [`STATUS_ANNOTATION`]. A pod that already has a container named like
//! the sidecar is left as it is (idempotent, also across `reinvocationPolicy: IfNeeded`).

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;

use super::gpu::{gpu_use, GpuUse};
pub use super::template::{
    GpuVisibility, Named, PodFields, SidecarTemplate, TemplateError, TARGET_ENV,
};

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

/// What the webhook reads of a pod, as k8s-openapi types: its `metadata`, and of its `spec`
/// the containers, init containers, volumes and `hostNetwork`. The rest of the spec
/// (affinity, security context, …) and the `status` are not parsed: the decision does not
/// need them, and their parsers would add about 100 KiB to the binary. They are kept in the
/// pod, as the patch only adds.
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
    /// `hostNetwork`.
    #[serde(default)]
    pub host_network: Option<bool>,
    /// `restartPolicy` (the API server defaults it to `Always` before the webhook sees it).
    #[serde(default)]
    pub restart_policy: Option<String>,
}

/// What a classic sidecar ends with, by its pod's `restartPolicy`: the audit annotation
/// `classic-exit` of an injection in classic mode, and part of its logged reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassicExit {
    /// `Never`: the exit rule as rendered; the sidecar ends with the trainer.
    WithTrainer,
    /// `OnFailure`: the exit rule, waiting out the kubelet's restarts of the trainer.
    AfterRestarts,
    /// `Always`: no exit rule and no shared process namespace; the sidecar runs as long as
    /// the pod.
    None,
}

impl ClassicExit {
    /// The value of the audit annotation `classic-exit`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClassicExit::WithTrainer => "with_trainer",
            ClassicExit::AfterRestarts => "after_restarts",
            ClassicExit::None => "none",
        }
    }

    /// For a pod whose `restartPolicy` is `policy` (absent: `Always`, the default).
    pub fn of(policy: Option<&str>) -> Self {
        match policy {
            Some("Never") => ClassicExit::WithTrainer,
            Some("OnFailure") => ClassicExit::AfterRestarts,
            _ => ClassicExit::None,
        }
    }

    fn reason(self) -> &'static str {
        match self {
            ClassicExit::WithTrainer => "; restartPolicy Never: the classic sidecar ends with the pod's other containers",
            ClassicExit::AfterRestarts => "; restartPolicy OnFailure: the classic sidecar ends once the pod's other containers have ended and not been restarted within the kubelet's back-off",
            ClassicExit::None => "; restartPolicy Always: no exit rule, the classic sidecar runs as long as the pod",
        }
    }
}

/// The exit rules' variables in the sidecar's environment.
const EXIT_RULES: [&str; 2] = [
    crate::config::settings::EXIT_WITH_CONTAINERS.name,
    crate::config::settings::EXIT_WITH_PROCESS.name,
];
/// The variable that tells the sidecar its pod's `restartPolicy`.
const RESTART_POLICY_ENV: &str = crate::config::settings::POD_RESTART_POLICY.name;

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
    /// No container requests a GPU (a count of zero is none): unchanged.
    NoGpu,
    /// A container's GPU quantity is not a Kubernetes quantity: unchanged (the API server
    /// refuses the pod later).
    InvalidQuantity,
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
    pub const ALL: [Outcome; 12] = [
        Outcome::Injected,
        Outcome::AlreadyInjected,
        Outcome::OptedOut,
        Outcome::NotRequested,
        Outcome::NoGpu,
        Outcome::InvalidQuantity,
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
            Outcome::InvalidQuantity => "invalid_quantity",
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

/// Who asked for the sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// Nobody: the pod opts out, or nothing asks.
    No,
    /// The pod's namespace label (the pod itself asked for nothing).
    ByNamespace,
    /// The pod's own annotation `gpu-otel-sidecar.io/inject: "true"`.
    ByPod,
}

/// The `reinvocationPolicy` of the webhook's entries in the `MutatingWebhookConfiguration`
/// (`GPU_SIDECAR_WEBHOOK_REINVOCATION_POLICY`): whether a call may be followed by another
/// for the same pod, after a later webhook changed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reinvocation {
    /// `IfNeeded`: a later webhook's change (a GPU container added, say) calls the webhook
    /// again, so a skip is not final and is not warned about.
    IfNeeded,
    /// `Never`: each call is final.
    Never,
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
    /// Whether the pod asked for the sidecar (then the decision is logged at `info`).
    pub requested: bool,
    /// In classic mode, what the injected sidecar ends with.
    pub exit: Option<ClassicExit>,
    /// Whether the client is told with a warning (`kubectl` prints it): a skip of a pod that
    /// asked for the sidecar, when no reinvocation can change it ([`Reinvocation::Never`]),
    /// and not for a pod without GPUs that only its namespace asked for (every CPU pod of an
    /// ML namespace).
    pub warn: bool,
}

impl Admission {
    fn skip(outcome: Outcome, requested: bool, reason: String) -> Self {
        Self {
            outcome,
            patch: None,
            target: None,
            reason,
            requested,
            exit: None,
            warn: false,
        }
    }
}

/// Decides and builds the patch for pods, from one [`SidecarTemplate`].
#[derive(Debug, Clone)]
pub struct Injector {
    template: SidecarTemplate,
    reinvocation: Reinvocation,
}

impl Injector {
    /// An injector for `template` (made by [`SidecarTemplate::load`] or
    /// [`SidecarTemplate::from_json`], so checked), for entries with
    /// [`Reinvocation::IfNeeded`] (the chart's default).
    pub fn new(template: SidecarTemplate) -> Self {
        Self {
            template,
            reinvocation: Reinvocation::IfNeeded,
        }
    }

    /// The same, for entries with `reinvocation`.
    pub fn with_reinvocation(mut self, reinvocation: Reinvocation) -> Self {
        self.reinvocation = reinvocation;
        self
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
        let asked = match (annotation(INJECT_ANNOTATION), scope) {
            (Some("false"), _) => {
                return Admission::skip(
                    Outcome::OptedOut,
                    false,
                    format!("the pod opts out ({INJECT_ANNOTATION}: \"false\")"),
                )
            }
            (Some("true"), _) => Asked::ByPod,
            (_, Scope::Namespace) => Asked::ByNamespace,
            (_, Scope::Pod) => Asked::No,
        };
        let mut decision = self.decide(asked, pod, spec);
        decision.warn = decision.outcome.is_skip_of_the_pods_making()
            && self.reinvocation == Reinvocation::Never
            && !(decision.outcome == Outcome::NoGpu && asked == Asked::ByNamespace);
        decision
    }

    fn decide(&self, asked: Asked, pod: &PodView, spec: &Value) -> Admission {
        if asked == Asked::No {
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
        let mut gpu: Vec<(usize, &Container, GpuUse)> = Vec::new();
        for (index, c) in pod_spec.containers.iter().enumerate() {
            match gpu_use(c) {
                Ok(u) if u.any() => gpu.push((index, c, u)),
                Ok(_) => {}
                Err(e) => {
                    return Admission::skip(
                        Outcome::InvalidQuantity,
                        true,
                        format!("{e}: it cannot be told whether it uses a GPU"),
                    )
                }
            }
        }
        let chosen = match annotation_of(pod, CONTAINER_ANNOTATION) {
            Some(name) => match gpu.iter().find(|(_, c, _)| c.name == name) {
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
                        "no container requests a GPU (a count above zero of nvidia.com/gpu, nvidia.com/gpu.*, nvidia.com/mig-*, or a DRA resource claim)".into(),
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
        let (index, target, uses) = chosen;
        let claims = spec
            .pointer(&format!("/containers/{index}/resources/claims"))
            .filter(|c| c.as_array().is_some_and(|a| !a.is_empty()))
            .cloned();
        let mismatch = match self.template.gpu_visibility {
            GpuVisibility::Dra if claims.is_none() => Some(
                "gpuVisibility is dra, but container {} holds no resource claim for the sidecar to share",
            ),
            GpuVisibility::PodResources if !uses.device_plugin => Some(
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
        let host_network = pod_spec.host_network == Some(true);
        let placement = self.template.placement(host_network);
        if let Some(clash) = placement.volumes.iter().find(|v| {
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

        let exit =
            (!placement.is_native()).then(|| ClassicExit::of(pod_spec.restart_policy.as_deref()));
        let adapt = |container: &Value| -> Value {
            let mut c = container.clone();
            if let Some(env) = c.get_mut("env").and_then(Value::as_array_mut) {
                for e in env.iter_mut().filter(|e| e["name"] == TARGET_ENV) {
                    *e = serde_json::json!({"name": TARGET_ENV, "value": target.name});
                }
                let is_rule = |e: &Value| EXIT_RULES.iter().any(|r| e["name"] == *r);
                match exit {
                    Some(ClassicExit::AfterRestarts) => {
                        if let Some(i) = env.iter().position(is_rule) {
                            env.retain(|e| e["name"] != RESTART_POLICY_ENV);
                            env.insert(
                                i + 1,
                                serde_json::json!({"name": RESTART_POLICY_ENV, "value": "OnFailure"}),
                            );
                        }
                    }
                    Some(ClassicExit::None) => {
                        env.retain(|e| !is_rule(e) && e["name"] != RESTART_POLICY_ENV);
                    }
                    // The pod's policy, not one in the rendered environment (`extraEnv`).
                    Some(ClassicExit::WithTrainer) => {
                        env.retain(|e| e["name"] != RESTART_POLICY_ENV);
                    }
                    None => {}
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
        if pod.metadata.annotations.is_none() {
            add(
                PointerBuf::from_tokens(["metadata", "annotations"]),
                Value::Object(Default::default()),
            );
        }
        add(
            PointerBuf::from_tokens(["metadata", "annotations", STATUS_ANNOTATION]),
            Value::String("injected".into()),
        );
        let share = placement
            .pod_spec
            .share_process_namespace
            .filter(|_| exit != Some(ClassicExit::None));
        if let Some(share) = share {
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
        let json = &placement.json;
        append(
            "initContainers",
            pod_spec.init_containers.is_some(),
            json.init_containers.iter().map(adapt).collect(),
        );
        append(
            "containers",
            true,
            json.containers.iter().map(adapt).collect(),
        );
        append("volumes", pod_spec.volumes.is_some(), json.volumes.clone());
        Admission {
            outcome: Outcome::Injected,
            patch: Some(Patch(ops)),
            target: Some(target.name.clone()),
            reason: format!(
                "sidecar {sidecar_name:?} injected for container {:?}{}{}",
                target.name,
                if host_network {
                    " (hostNetwork pod: no container port, probed over a Unix socket)"
                } else {
                    ""
                },
                exit.map_or("", ClassicExit::reason)
            ),
            requested: true,
            exit,
            warn: false,
        }
    }
}

impl Outcome {
    /// Whether this is a skip caused by what the pod holds (its containers, GPUs, volumes),
    /// which a later webhook's change may still turn into an injection.
    fn is_skip_of_the_pods_making(self) -> bool {
        matches!(
            self,
            Outcome::NoGpu
                | Outcome::InvalidQuantity
                | Outcome::AmbiguousContainer
                | Outcome::UnknownContainer
                | Outcome::VisibilityMismatch
                | Outcome::VolumeConflict
        )
    }
}

fn annotation_of<'a>(pod: &'a PodView, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

fn names(containers: &[(usize, &Container, GpuUse)]) -> String {
    if containers.is_empty() {
        return "none does".into();
    }
    containers
        .iter()
        .map(|(_, c, _)| c.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
