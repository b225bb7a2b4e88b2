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

/// One resource attribute: its key and where its value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceKey {
    /// The key.
    pub key: &'static str,
    /// Where the value comes from.
    pub source: &'static str,
}

const fn key(key: &'static str, source: &'static str) -> ResourceKey {
    ResourceKey { key, source }
}

/// Every resource attribute the agent sets, in documentation order (besides the SDK's
/// `telemetry.sdk.*` and what `OTEL_RESOURCE_ATTRIBUTES` adds).
pub static RESOURCE_KEYS: &[ResourceKey] = &[
    key(SERVICE_NAME, "`OTEL_SERVICE_NAME`, else `gpu-otel-sidecar`"),
    key(SERVICE_VERSION, "the agent's version, unless configured"),
    key(SERVICE_INSTANCE_ID, "always set: `<namespace>.<pod>.<container>`, `<pod uid>.<container>`, in node mode the node's name, else a random UUID (unless configured)"),
    key(K8S_POD_NAME, "`K8S_POD_NAME` (Downward API `metadata.name`)"),
    key(K8S_POD_UID, "`K8S_POD_UID` (Downward API `metadata.uid`)"),
    key(K8S_NAMESPACE_NAME, "`K8S_NAMESPACE_NAME` (Downward API `metadata.namespace`)"),
    key(K8S_NODE_NAME, "`K8S_NODE_NAME` (Downward API `spec.nodeName`)"),
    key(K8S_CONTAINER_NAME, "`K8S_CONTAINER_NAME`: the GPU-using container, not the sidecar"),
    key(K8S_JOB_NAME, "the pod label `batch.kubernetes.io/job-name`, read from `K8S_POD_LABEL_*`"),
    key("k8s.pod.label.<key>", "`K8S_POD_LABEL_<KEY>` (Downward API `metadata.labels['<key>']`)"),
    key(HOST_NAME, "`gethostname(2)`, unless configured"),
];

/// The resource section of `docs/attributes.md`, generated from [`RESOURCE_KEYS`].
pub fn markdown() -> String {
    let mut s = String::from(
        "\n## Resource attributes\n\n\
         On the resource of every metric and event (the pod, container, node and agent); see \
         [kubernetes.md](kubernetes.md) for how to set them.\n\n\
         | key | from |\n| --- | --- |\n",
    );
    for k in RESOURCE_KEYS {
        s.push_str(&format!(
            "| `{}` | {} |\n",
            k.key,
            k.source.replace('|', "\\|")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_label_row_is_the_prefix() {
        assert!(RESOURCE_KEYS
            .iter()
            .any(|k| k.key == format!("{K8S_POD_LABEL_PREFIX}<key>")));
        let mut keys: Vec<_> = RESOURCE_KEYS.iter().map(|k| k.key).collect();
        keys.sort_unstable();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "a key listed twice");
    }
}
