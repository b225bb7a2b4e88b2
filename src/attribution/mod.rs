//! Attribution: the OTel resource that says whose GPU this is (service, pod, container,
//! node, host).
//!
//! Sources, by precedence (highest first): `OTEL_SERVICE_NAME` for `service.name`;
//! `OTEL_RESOURCE_ATTRIBUTES`; the Downward API variables (`K8S_POD_NAME` → `k8s.pod.name`,
//! `K8S_POD_UID` → `k8s.pod.uid`, `K8S_NAMESPACE_NAME` → `k8s.namespace.name`,
//! `K8S_NODE_NAME` → `k8s.node.name`, `K8S_CONTAINER_NAME` → `k8s.container.name`, the
//! GPU-using container, not the sidecar); `host.name` from the kernel. All but the last are
//! already merged in [`Config::resource_attributes`].
//!
//! `service.instance.id` is always set, so that two sidecars behind one collector never share
//! an identity (the Prometheus exporter turns it into the `instance` label and needs it for
//! `target_info`); see [`service_instance_id`].

pub mod node;
pub mod pod_resources;

use opentelemetry::KeyValue;
use opentelemetry_sdk::resource::{ResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::Resource;

use crate::catalogue::resource;
use crate::config::Config;

pub use crate::catalogue::resource::SERVICE_INSTANCE_ID;

/// `service.instance.id` when `OTEL_RESOURCE_ATTRIBUTES` does not give one, as the semantic
/// conventions recommend for Kubernetes (`docs/non-normative/k8s-attributes.md`, "How
/// `service.instance.id` should be calculated"):
///
/// - `<k8s.namespace.name>.<k8s.pod.name>.<k8s.container.name>` when the namespace and pod
///   name are known (`K8S_NAMESPACE_NAME`, `K8S_POD_NAME`; the container part is left out
///   when `K8S_CONTAINER_NAME` is unset). The container is the GPU-using one this sidecar
///   reports for: one sidecar per pod, so the id is unique among running pods, and stable
///   across restarts of the sidecar (a crash loop keeps one series).
/// - else `<k8s.pod.uid>.<k8s.container.name>` (or the UID alone) when only `K8S_POD_UID` is
///   known;
/// - else (outside Kubernetes) a random version 4 UUID, new at each start.
///
/// `attributes` are the merged configured attributes ([`Config::resource_attributes`]).
pub fn service_instance_id(attributes: &std::collections::BTreeMap<String, String>) -> String {
    if let Some(id) = attributes.get(SERVICE_INSTANCE_ID) {
        return id.clone();
    }
    let get = |k: &str| attributes.get(k).map(String::as_str);
    let container = get(resource::K8S_CONTAINER_NAME);
    let parts: Vec<&str> = match (
        get(resource::K8S_NAMESPACE_NAME),
        get(resource::K8S_POD_NAME),
        get(resource::K8S_POD_UID),
    ) {
        (Some(ns), Some(pod), _) => [Some(ns), Some(pod), container]
            .into_iter()
            .flatten()
            .collect(),
        (_, _, Some(uid)) => [Some(uid), container].into_iter().flatten().collect(),
        _ => return uuid::Uuid::new_v4().to_string(),
    };
    parts.join(".")
}

/// `service.instance.id` in node mode (one agent per node), when `OTEL_RESOURCE_ATTRIBUTES`
/// does not give one: the node's name (`k8s.node.name`, from `K8S_NODE_NAME`), else the
/// host name, else a random version 4 UUID. Stable across restarts of the DaemonSet's pod;
/// each pod's share goes out under `<this>.<pod uid>`.
pub fn node_instance_id(
    attributes: &std::collections::BTreeMap<String, String>,
    host: Option<&str>,
) -> String {
    attributes
        .get(resource::K8S_NODE_NAME)
        .map(String::as_str)
        .or(host)
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string)
}

/// Builds the resource: `service.name`, `service.version`, `service.instance.id` (see
/// [`service_instance_id`]), the `telemetry.sdk.*` attributes, `host.name`
/// (`gethostname(2)`, unless given), and the configured attributes.
pub fn resource(config: &Config) -> Resource {
    let mut attrs: Vec<KeyValue> = Vec::new();
    let host = gethostname::gethostname()
        .to_str()
        .filter(|h| !h.is_empty())
        .map(str::to_string);
    if !config.resource_attributes.contains_key(SERVICE_INSTANCE_ID) {
        let id = if config.node {
            node_instance_id(&config.resource_attributes, host.as_deref())
        } else {
            service_instance_id(&config.resource_attributes)
        };
        attrs.push(KeyValue::new(SERVICE_INSTANCE_ID, id));
    }
    if !config.resource_attributes.contains_key(resource::HOST_NAME) {
        if let Some(h) = host {
            attrs.push(KeyValue::new(resource::HOST_NAME, h));
        }
    }
    if !config
        .resource_attributes
        .contains_key(resource::SERVICE_VERSION)
    {
        attrs.push(KeyValue::new(
            resource::SERVICE_VERSION,
            env!("CARGO_PKG_VERSION"),
        ));
    }
    attrs.extend(
        config
            .resource_attributes
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
    );
    let telemetry: Box<dyn ResourceDetector> = Box::new(TelemetryResourceDetector);
    Resource::builder_empty()
        .with_detector(telemetry)
        .with_attributes(attrs)
        .with_service_name(config.service_name.clone())
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_attributes_and_service_name() {
        let c = Config::from_vars(
            [
                ("K8S_POD_NAME", "trainer-0"),
                ("K8S_CONTAINER_NAME", "trainer"),
                ("OTEL_RESOURCE_ATTRIBUTES", "host.name=node-a"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        )
        .unwrap();
        let r = resource(&c);
        let get = |k: &'static str| {
            r.get(&opentelemetry::Key::from_static_str(k))
                .map(|v| v.to_string())
        };
        assert_eq!(get("k8s.pod.name").as_deref(), Some("trainer-0"));
        assert_eq!(get("k8s.container.name").as_deref(), Some("trainer"));
        assert_eq!(get("host.name").as_deref(), Some("node-a"));
        assert_eq!(get("service.name").as_deref(), Some("gpu-otel-sidecar"));
        assert_eq!(get("telemetry.sdk.language").as_deref(), Some("rust"));
        assert_eq!(get("k8s.pod.uid"), None);
    }

    fn instance_id(vars: &[(&str, &str)]) -> String {
        let c =
            Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string()))).unwrap();
        resource(&c)
            .get(&opentelemetry::Key::from_static_str(SERVICE_INSTANCE_ID))
            .expect("service.instance.id is always set")
            .to_string()
    }

    #[test]
    fn service_instance_id_follows_the_kubernetes_recommendation() {
        assert_eq!(
            instance_id(&[
                ("K8S_NAMESPACE_NAME", "ml"),
                ("K8S_POD_NAME", "resnet-train-0"),
                ("K8S_POD_UID", "0f3c1d2e-aaaa-4bbb-8ccc-123456789abc"),
                ("K8S_CONTAINER_NAME", "trainer"),
            ]),
            "ml.resnet-train-0.trainer"
        );
        assert_eq!(
            instance_id(&[("K8S_NAMESPACE_NAME", "ml"), ("K8S_POD_NAME", "train-0")]),
            "ml.train-0"
        );
        assert_eq!(
            instance_id(&[
                ("K8S_POD_UID", "0f3c1d2e-aaaa-4bbb-8ccc-123456789abc"),
                ("K8S_CONTAINER_NAME", "trainer"),
            ]),
            "0f3c1d2e-aaaa-4bbb-8ccc-123456789abc.trainer"
        );
        // OTEL_RESOURCE_ATTRIBUTES wins.
        assert_eq!(
            instance_id(&[
                ("K8S_NAMESPACE_NAME", "ml"),
                ("K8S_POD_NAME", "train-0"),
                ("OTEL_RESOURCE_ATTRIBUTES", "service.instance.id=mine"),
            ]),
            "mine"
        );
    }

    #[test]
    fn node_mode_is_the_node_and_names_no_pod() {
        let (c, dropped) = Config::from_vars(
            [
                ("K8S_NODE_NAME", "gpu-node-7"),
                ("K8S_POD_NAME", "gpu-otel-sidecar-node-x7k2p"),
                ("K8S_NAMESPACE_NAME", "monitoring"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string())),
        )
        .unwrap()
        .into_node()
        .unwrap();
        assert_eq!(dropped, ["k8s.pod.name", "k8s.namespace.name"]);
        let r = resource(&c);
        let get = |k: &'static str| {
            r.get(&opentelemetry::Key::from_static_str(k))
                .map(|v| v.to_string())
        };
        assert_eq!(get(SERVICE_INSTANCE_ID).as_deref(), Some("gpu-node-7"));
        assert_eq!(get("k8s.node.name").as_deref(), Some("gpu-node-7"));
        assert_eq!(get("k8s.pod.name"), None);
        assert_eq!(
            node_instance_id(&Default::default(), Some("host-a")),
            "host-a"
        );
    }

    #[test]
    fn outside_kubernetes_each_start_gets_a_random_uuid() {
        let (a, b) = (instance_id(&[]), instance_id(&[]));
        let parsed = uuid::Uuid::parse_str(&a).expect("a UUID");
        assert_eq!(parsed.get_version_num(), 4);
        assert_ne!(
            a, b,
            "two sidecars outside Kubernetes never share an identity"
        );
    }
}
