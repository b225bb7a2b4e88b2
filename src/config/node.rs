//! Node mode's configuration (`gpu-otel-sidecar node`): [`Config::into_node`].

use super::{settings as S, Config, ConfigError, DeviceSelection};
use crate::catalogue::resource;

/// The resource attributes node mode leaves out of the node's resource: set for a pod (the
/// Downward API's `K8S_POD_NAME`, …), they would name the agent's own pod, not the pods
/// whose shares it reports (each share's resource names its own pod).
pub const NODE_MODE_DROPS: &[&str] = &[
    resource::K8S_POD_NAME,
    resource::K8S_POD_UID,
    resource::K8S_NAMESPACE_NAME,
    resource::K8S_CONTAINER_NAME,
];

impl Config {
    /// This configuration in node mode (`gpu-otel-sidecar node`): [`Config::node`] set,
    /// the pod attributes [`NODE_MODE_DROPS`] left out of the resource (returned, for one
    /// log line), and the rule `utilization_imbalance` off (it compares one pod's GPUs; a
    /// node's GPUs belong to different pods).
    ///
    /// # Errors
    /// `GPU_SIDECAR_DEVICES=pod-resources` (node mode reports every GPU of the node, or a
    /// list).
    pub fn into_node(mut self) -> Result<(Self, Vec<String>), ConfigError> {
        if matches!(
            self.devices,
            DeviceSelection::PodResources | DeviceSelection::Allocated(_)
        ) {
            return Err(ConfigError::new(
                S::DEVICES.name,
                "pod-resources",
                "all or a list of devices in node mode (gpu-otel-sidecar node reports every GPU of the node and asks the kubelet which pods hold each)",
            ));
        }
        self.node = true;
        let dropped = NODE_MODE_DROPS
            .iter()
            .filter(|k| self.resource_attributes.remove(**k).is_some())
            .map(|k| (*k).to_string())
            .collect();
        self.rules.for_node();
        Ok((self, dropped))
    }
}
