//! What node mode reads under the proc root (`GPU_SIDECAR_PROC_ROOT`, default `/proc`):
//! each GPU process's `<root>/<host pid>/cgroup` ([`Processes`]) and the GPUs' device minor
//! numbers in `<root>/driver/nvidia/gpus/<PCI bus id>/information` ([`device_minor`]), for
//! GKE's device ids.
//!
//! NVML names processes by host PID, so `<root>/<pid>` is the right process only in the host
//! PID namespace (`hostPID: true`): [`crate::sampling`]'s check (`<root>/2/comm` is
//! `kthreadd`) says whether it is.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::cgroup::{pod_of, CgroupPod};

/// The pod of each GPU process, by host PID, read once per process.
#[derive(Debug)]
pub struct Processes {
    root: PathBuf,
    /// What each listed PID's cgroup file said (`None`: in no pod). A PID whose file could
    /// not be read (the process ended after NVML listed it) is not kept: asked again if
    /// NVML lists it again.
    known: HashMap<u32, Option<Arc<CgroupPod>>>,
}

impl Processes {
    /// Reads under `root` (the proc root).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            known: HashMap::new(),
        }
    }

    /// The pod of `pid`, from `<root>/<pid>/cgroup` the first time it is asked; `None` when
    /// its cgroup names no pod or the file cannot be read (the process has ended).
    pub fn pod(&mut self, pid: u32) -> Option<Arc<CgroupPod>> {
        if let Some(known) = self.known.get(&pid) {
            return known.clone();
        }
        let file = std::fs::read_to_string(self.root.join(pid.to_string()).join("cgroup"));
        match file {
            Ok(text) => {
                let pod = pod_of(&text).map(Arc::new);
                match &pod {
                    Some(p) => tracing::debug!(
                        pid,
                        pod_uid = %p.pod_uid,
                        container_id = p.container_id.as_deref().unwrap_or("?"),
                        "GPU process attributed to a pod by its cgroup"
                    ),
                    None => tracing::debug!(
                        pid,
                        "GPU process in no pod's cgroup: its share is not attributed"
                    ),
                }
                self.known.insert(pid, pod.clone());
                pod
            }
            Err(e) => {
                tracing::debug!(pid, error = %e, "cannot read the GPU process's cgroup (it has ended, or the agent is not in the host PID namespace): its share is not attributed");
                None
            }
        }
    }

    /// Forgets every PID not in `listed` (the processes NVML lists now).
    pub fn retain(&mut self, listed: &std::collections::HashSet<u32>) {
        self.known.retain(|pid, _| listed.contains(pid));
    }
}

/// The device minor number (`/dev/nvidia<N>`) of the GPU at `pci_bus_id` (NVML's form,
/// `00000000:18:00.0`), from `<root>/driver/nvidia/gpus/0000:18:00.0/information`
/// (`Device Minor: N`); `None` when the file is not there or says no number.
pub fn device_minor(root: &Path, pci_bus_id: &str) -> Option<u32> {
    // The driver's directory names the domain with 4 digits, in lower case.
    let bus = pci_bus_id.to_ascii_lowercase();
    let short = bus.get(bus.len().checked_sub(12)?..)?;
    let text = std::fs::read_to_string(
        root.join("driver/nvidia/gpus")
            .join(short)
            .join("information"),
    )
    .ok()?;
    text.lines().find_map(|l| {
        l.strip_prefix("Device Minor:")
            .and_then(|v| v.trim().parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_pid_once_and_forgets_ended_ones() {
        let dir = tempfile::tempdir().unwrap();
        let uid = "0f3c1d2e-aaaa-4bbb-8ccc-123456789abc";
        std::fs::create_dir_all(dir.path().join("100")).unwrap();
        std::fs::write(
            dir.path().join("100/cgroup"),
            format!("0::/kubepods/pod{uid}\n"),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("200")).unwrap();
        std::fs::write(
            dir.path().join("200/cgroup"),
            "0::/system.slice/x.service\n",
        )
        .unwrap();
        let mut p = Processes::new(dir.path());
        assert_eq!(p.pod(100).unwrap().pod_uid, uid);
        assert_eq!(p.pod(200), None);
        assert_eq!(p.pod(300), None, "no such process");
        // Read once: a changed file is not read again while the PID is listed.
        std::fs::write(dir.path().join("100/cgroup"), "0::/\n").unwrap();
        assert_eq!(p.pod(100).unwrap().pod_uid, uid);
        p.retain(&[200].into_iter().collect());
        assert_eq!(p.pod(100), None, "forgotten, read again");
        // A process that appears later is read then.
        std::fs::create_dir_all(dir.path().join("300")).unwrap();
        std::fs::write(
            dir.path().join("300/cgroup"),
            format!("0::/kubepods/pod{uid}\n"),
        )
        .unwrap();
        assert_eq!(p.pod(300).unwrap().pod_uid, uid);
    }

    #[test]
    fn minor_number_from_the_driver_information_file() {
        let dir = tempfile::tempdir().unwrap();
        let gpu = dir.path().join("driver/nvidia/gpus/0000:2a:00.0");
        std::fs::create_dir_all(&gpu).unwrap();
        std::fs::write(
            gpu.join("information"),
            "Model: \t\t NVIDIA H200\nIRQ:   \t\t 12\nDevice Minor: \t 3\nBus Type: \t PCIe\n",
        )
        .unwrap();
        assert_eq!(device_minor(dir.path(), "00000000:2A:00.0"), Some(3));
        assert_eq!(device_minor(dir.path(), "00000000:18:00.0"), None);
        assert_eq!(device_minor(dir.path(), "bad"), None);
    }
}
