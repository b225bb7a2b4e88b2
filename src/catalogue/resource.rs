//! Every resource attribute key the agent sets or reads (the pod, container, node, host and
//! service the telemetry is from), declared once. They are the OpenTelemetry semantic
//! conventions' names (`k8s.*`, `host.*`, `service.*`); where each value comes from (the
//! Downward API variables, `OTEL_RESOURCE_ATTRIBUTES`, the kernel) is in
//! `crate::config::DOWNWARD_API` and `crate::attribution`, and `docs/kubernetes.md`.

/// `k8s.pod.name`: the pod's name (`K8S_POD_NAME`, Downward API `metadata.name`).
pub const K8S_POD_NAME: &str = "k8s.pod.name";
/// `k8s.pod.uid`: the pod's UID (`K8S_POD_UID`, Downward API `metadata.uid`).
pub const K8S_POD_UID: &str = "k8s.pod.uid";
/// `k8s.namespace.name`: the pod's namespace (`K8S_NAMESPACE_NAME`).
pub const K8S_NAMESPACE_NAME: &str = "k8s.namespace.name";
/// `k8s.node.name`: the node's name (`K8S_NODE_NAME`, Downward API `spec.nodeName`).
pub const K8S_NODE_NAME: &str = "k8s.node.name";
/// `k8s.container.name`: the GPU-using container the sidecar reports for
/// (`K8S_CONTAINER_NAME`), not the sidecar.
pub const K8S_CONTAINER_NAME: &str = "k8s.container.name";
/// `k8s.job.name`: the batch Job the pod belongs to (label `batch.kubernetes.io/job-name`).
pub const K8S_JOB_NAME: &str = "k8s.job.name";
/// The prefix of a pod label attribute: `k8s.pod.label.<key>`.
pub const K8S_POD_LABEL_PREFIX: &str = "k8s.pod.label.";
/// `host.name`: `gethostname(2)`, unless configured.
pub const HOST_NAME: &str = "host.name";
/// `service.name`: `OTEL_SERVICE_NAME`, else `gpu-otel-sidecar`.
pub const SERVICE_NAME: &str = "service.name";
/// `service.version`: the agent's version (`CARGO_PKG_VERSION`), unless configured.
pub const SERVICE_VERSION: &str = "service.version";
/// `service.instance.id`: the agent's identity, always set
/// (`crate::attribution::service_instance_id`).
pub const SERVICE_INSTANCE_ID: &str = "service.instance.id";
