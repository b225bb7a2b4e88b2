//! Attribution: the OTel resource that says whose GPU this is (service, pod, container,
//! node, host).
//!
//! Sources, by precedence (highest first): `OTEL_SERVICE_NAME` for `service.name`;
//! `OTEL_RESOURCE_ATTRIBUTES`; the Downward API variables (`K8S_POD_NAME` → `k8s.pod.name`,
//! `K8S_POD_UID` → `k8s.pod.uid`, `K8S_NAMESPACE_NAME` → `k8s.namespace.name`,
//! `K8S_NODE_NAME` → `k8s.node.name`, `K8S_CONTAINER_NAME` → `k8s.container.name`, the
//! GPU-using container, not the sidecar); `host.name` from the kernel. All but the last are
//! already merged in [`Config::resource_attributes`].

pub mod pod_resources;

use opentelemetry::KeyValue;
use opentelemetry_sdk::resource::{ResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::Resource;

use crate::config::Config;

/// Builds the resource: `service.name`, `service.version`, the `telemetry.sdk.*`
/// attributes, `host.name` (`gethostname(2)`, unless given), and the configured attributes.
pub fn resource(config: &Config) -> Resource {
    let mut attrs: Vec<KeyValue> = Vec::new();
    if !config.resource_attributes.contains_key("host.name") {
        if let Some(h) = gethostname::gethostname()
            .to_str()
            .filter(|h| !h.is_empty())
        {
            attrs.push(KeyValue::new("host.name", h.to_string()));
        }
    }
    if !config.resource_attributes.contains_key("service.version") {
        attrs.push(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
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
}
