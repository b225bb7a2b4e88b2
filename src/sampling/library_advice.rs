//! What to do when `libnvidia-ml.so.1` cannot be loaded, from where the agent runs: a
//! machine or container given no driver, or a Kubernetes pod whose NVIDIA Container Toolkit
//! variables are set but were not acted on (the causes that remain there are the node's,
//! not the pod's). `docs/operations.md` (When NVML is missing) tells the cases apart.

use crate::config::Config;

/// Where the agent runs, as far as a missing NVML library is concerned; read from the
/// configuration (`NVIDIA_VISIBLE_DEVICES`, `NVIDIA_DRIVER_CAPABILITIES`,
/// `KUBERNETES_SERVICE_HOST` / `K8S_POD_NAME`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LibraryAdvice {
    /// Not in a Kubernetes pod, `NVIDIA_DRIVER_CAPABILITIES` without `utility`.
    #[default]
    Machine,
    /// Not in a Kubernetes pod, `utility` already asked for: the container was given no GPU.
    MachineWithUtility,
    /// In a pod without `NVIDIA_VISIBLE_DEVICES` (or `void`): the toolkit adds nothing.
    PodWithoutDevices,
    /// In a pod whose `NVIDIA_DRIVER_CAPABILITIES` lacks `utility`.
    PodWithoutUtility(String),
    /// In a pod with both variables as the toolkit wants them (`NVIDIA_VISIBLE_DEVICES`):
    /// the node's toolkit did not act on them.
    PodToolkitIgnored(String),
}

fn has_utility(capabilities: &str) -> bool {
    capabilities
        .split(',')
        .map(str::trim)
        .any(|c| c == "utility" || c == "all")
}

impl LibraryAdvice {
    /// The case `config` describes.
    pub fn from_config(config: &Config) -> Self {
        let devices = config
            .toolkit
            .visible_devices
            .as_deref()
            .filter(|v| *v != "void");
        let capabilities = config.toolkit.driver_capabilities.as_deref();
        let utility = capabilities.is_some_and(has_utility);
        match (config.in_kubernetes, devices) {
            (false, _) if utility => LibraryAdvice::MachineWithUtility,
            (false, _) => LibraryAdvice::Machine,
            (true, None) => LibraryAdvice::PodWithoutDevices,
            (true, Some(_)) if !utility => {
                LibraryAdvice::PodWithoutUtility(capabilities.unwrap_or("").to_string())
            }
            (true, Some(d)) => LibraryAdvice::PodToolkitIgnored(d.to_string()),
        }
    }

    /// The advice, one clause to follow `NVML library not found (…): `.
    pub fn explain(&self) -> String {
        match self {
            LibraryAdvice::Machine => "no NVIDIA driver on this machine, or the container was not given it; \
                 run with the NVIDIA Container Toolkit and NVIDIA_DRIVER_CAPABILITIES=utility, or set GPU_SIDECAR_NVML_LIBRARY"
                .into(),
            LibraryAdvice::MachineWithUtility => "no NVIDIA driver on this machine, or the container was given no GPU \
                 (NVIDIA_DRIVER_CAPABILITIES=utility is set: run it with the NVIDIA Container Toolkit, `docker run --gpus`, \
                 or compose's device reservations), or set GPU_SIDECAR_NVML_LIBRARY"
                .into(),
            LibraryAdvice::PodWithoutDevices => "in this Kubernetes pod NVIDIA_VISIBLE_DEVICES is not set, so the NVIDIA \
                 Container Toolkit mounts no driver library into this container: with a DRA claim the sidecar must hold \
                 the GPU container's claim (resources.claims); otherwise set NVIDIA_VISIBLE_DEVICES (the Helm chart's \
                 gpuVisibility modes pod-resources, uuids and all do)"
                .into(),
            LibraryAdvice::PodWithoutUtility(v) => format!(
                "in this Kubernetes pod NVIDIA_DRIVER_CAPABILITIES={v:?} lacks utility, the capability for which the \
                 NVIDIA Container Toolkit mounts libnvidia-ml.so.1: set NVIDIA_DRIVER_CAPABILITIES=utility"
            ),
            LibraryAdvice::PodToolkitIgnored(devices) => format!(
                "NVIDIA_VISIBLE_DEVICES={devices} and NVIDIA_DRIVER_CAPABILITIES=utility are set in this Kubernetes pod, \
                 yet the NVIDIA Container Toolkit mounted no libnvidia-ml.so.1: the node's toolkit ignores \
                 NVIDIA_VISIBLE_DEVICES in unprivileged containers (accept-nvidia-visible-devices-envvar-when-unprivileged \
                 = false, GPUs given only as volume mounts or CDI devices of the device plugin), or the pod does not run \
                 with the NVIDIA runtime (its runtimeClassName, where nvidia is not the node's default runtime; a \
                 CDI-only node), or the node has no NVIDIA driver. The Helm chart's README (gpuVisibility) says what \
                 each mode needs: gpuVisibility.mode=dra needs no such variable"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn advice(pairs: &[(&str, &str)]) -> LibraryAdvice {
        let vars = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        LibraryAdvice::from_config(&Config::from_vars(vars).unwrap())
    }

    #[test]
    fn the_advice_follows_where_the_agent_runs() {
        let pod = ("KUBERNETES_SERVICE_HOST", "10.96.0.1");
        let all = ("NVIDIA_VISIBLE_DEVICES", "all");
        let utility = ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility");
        assert_eq!(advice(&[]), LibraryAdvice::Machine);
        assert_eq!(advice(&[utility]), LibraryAdvice::MachineWithUtility);
        assert_eq!(advice(&[pod, utility]), LibraryAdvice::PodWithoutDevices);
        assert_eq!(
            advice(&[pod, utility, ("NVIDIA_VISIBLE_DEVICES", "void")]),
            LibraryAdvice::PodWithoutDevices
        );
        assert_eq!(
            advice(&[pod, all, ("NVIDIA_DRIVER_CAPABILITIES", "compute")]),
            LibraryAdvice::PodWithoutUtility("compute".into())
        );
        let ignored = advice(&[pod, all, utility]);
        assert_eq!(ignored, LibraryAdvice::PodToolkitIgnored("all".into()));
        let text = ignored.explain();
        for words in [
            "accept-nvidia-visible-devices-envvar-when-unprivileged",
            "runtimeClassName",
            "CDI",
            "README",
        ] {
            assert!(text.contains(words), "{words}: {text}");
        }
        assert!(!text.contains("set NVIDIA_DRIVER_CAPABILITIES"), "{text}");
        // The Downward API's pod name says "pod" too.
        assert_eq!(
            advice(&[
                ("K8S_POD_NAME", "p"),
                ("NVIDIA_VISIBLE_DEVICES", "GPU-1"),
                utility
            ]),
            LibraryAdvice::PodToolkitIgnored("GPU-1".into())
        );
    }
}
