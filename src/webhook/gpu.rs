//! Which containers of a pod use NVIDIA GPUs, from their `resources`.
//!
//! A container is a GPU container when it holds a DRA resource claim (`resources.claims`),
//! or when its quantity of a device-plugin GPU resource ([`is_nvidia_gpu_resource`]:
//! `nvidia.com/gpu`, `nvidia.com/gpu.*` as time-slicing renames it, `nvidia.com/mig-*`) is
//! above zero: the one in `limits`, or the one in `requests` where `limits` does not name
//! the resource (the API server defaults an extended resource's request to its limit). A
//! count of `0` (charts that template the count, a TensorBoard container next to the
//! trainer) is not a GPU. Quantities are parsed as Kubernetes writes them (kube_quantity:
//! `1`, `2k`, `1e3`); one that does not parse is a [`BadQuantity`], which the webhook gives
//! as its reason not to inject (the API server's own validation refuses such a pod later).

use k8s_openapi::api::core::v1::Container;
use kube_quantity::ParsedQuantity;

use crate::attribution::pod_resources::is_nvidia_gpu_resource;

/// How a container asks for GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuUse {
    /// A device-plugin GPU or MIG resource with a quantity above zero.
    pub device_plugin: bool,
    /// A DRA resource claim (`resources.claims`).
    pub dra: bool,
}

impl GpuUse {
    /// Whether the container uses a GPU at all.
    pub fn any(self) -> bool {
        self.device_plugin || self.dra
    }
}

/// A GPU quantity that is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("container {container:?} has resources.{field}[{resource:?}] = {value:?}, which is not a Kubernetes quantity")]
pub struct BadQuantity {
    /// The container.
    pub container: String,
    /// `limits` or `requests`.
    pub field: &'static str,
    /// The resource name.
    pub resource: String,
    /// The value as written.
    pub value: String,
}

/// How `c` asks for GPUs (see the module docs).
///
/// # Errors
/// [`BadQuantity`] for the first GPU quantity of `c` that does not parse.
pub fn gpu_use(c: &Container) -> Result<GpuUse, BadQuantity> {
    let Some(r) = c.resources.as_ref() else {
        return Ok(GpuUse::default());
    };
    let limits = r.limits.as_ref();
    let requests = r.requests.as_ref();
    let mut device_plugin = false;
    let names = limits
        .into_iter()
        .flatten()
        .chain(requests.into_iter().flatten())
        .map(|(name, _)| name)
        .filter(|name| is_nvidia_gpu_resource(name));
    for name in names {
        let (field, quantity) = match limits.and_then(|l| l.get(name)) {
            Some(q) => ("limits", q),
            None => match requests.and_then(|r| r.get(name)) {
                Some(q) => ("requests", q),
                None => continue,
            },
        };
        let bad = || BadQuantity {
            container: c.name.clone(),
            field,
            resource: name.clone(),
            value: quantity.0.clone(),
        };
        let count = ParsedQuantity::try_from(quantity)
            .ok()
            .and_then(|q| q.to_bytes_f64())
            .filter(|v| v.is_finite())
            .ok_or_else(bad)?;
        device_plugin |= count > 0.0;
    }
    Ok(GpuUse {
        device_plugin,
        dra: r.claims.as_ref().is_some_and(|claims| !claims.is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(resources: serde_json::Value) -> Container {
        serde_json::from_value(json!({"name": "c", "resources": resources})).unwrap()
    }

    fn uses(resources: serde_json::Value) -> Result<GpuUse, BadQuantity> {
        gpu_use(&container(resources))
    }

    const PLUGIN: GpuUse = GpuUse {
        device_plugin: true,
        dra: false,
    };

    #[test]
    fn a_count_above_zero_is_a_gpu_and_zero_is_not() {
        for (resources, want) in [
            (json!({"limits": {"nvidia.com/gpu": "1"}}), PLUGIN),
            (json!({"limits": {"nvidia.com/gpu": "2k"}}), PLUGIN),
            (json!({"requests": {"nvidia.com/gpu.shared": "1"}}), PLUGIN),
            (json!({"limits": {"nvidia.com/mig-1g.18gb": "1e0"}}), PLUGIN),
            (
                json!({"limits": {"nvidia.com/gpu": "0"}}),
                GpuUse::default(),
            ),
            (
                json!({"requests": {"nvidia.com/gpu": "0"}}),
                GpuUse::default(),
            ),
            (
                json!({"limits": {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.18gb": "1"}}),
                PLUGIN,
            ),
            // Limits decide where they name the resource.
            (
                json!({"limits": {"nvidia.com/gpu": "0"}, "requests": {"nvidia.com/gpu": "1"}}),
                GpuUse::default(),
            ),
            (
                json!({"limits": {"cpu": "2"}, "requests": {"nvidia.com/gpu": "1"}}),
                PLUGIN,
            ),
            (json!({"limits": {"amd.com/gpu": "1"}}), GpuUse::default()),
            (
                json!({"claims": [{"name": "gpu"}]}),
                GpuUse {
                    device_plugin: false,
                    dra: true,
                },
            ),
            (json!({"claims": []}), GpuUse::default()),
        ] {
            assert_eq!(uses(resources.clone()), Ok(want), "{resources}");
        }
    }

    #[test]
    fn a_quantity_that_does_not_parse_is_named() {
        let e = uses(json!({"limits": {"nvidia.com/gpu": "one"}})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "container \"c\" has resources.limits[\"nvidia.com/gpu\"] = \"one\", which is not a Kubernetes quantity"
        );
        assert_eq!(
            uses(json!({"requests": {"nvidia.com/mig-2g.35gb": "1 "}}))
                .unwrap_err()
                .field,
            "requests"
        );
        assert!(uses(json!({"limits": {"nvidia.com/gpu": "NaN"}})).is_err());
        // Other resources are not the webhook's business.
        assert_eq!(
            uses(json!({"limits": {"memory": "lots"}})),
            Ok(GpuUse::default())
        );
    }
}
