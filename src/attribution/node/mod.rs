//! Node mode's attribution (`gpu-otel-sidecar node`): one agent for every GPU of a node,
//! and each pod's share of each device it uses.
//!
//! The same sampler, catalogue, rules and run report as the sidecar; what differs is who
//! the readings belong to. The GPUs are reported once, on the node's resource (no pod
//! attributes); each pod's share goes out on a resource of its own (`k8s.pod.uid`), and what
//! no pod is known to hold on the node's, marked not attributed. [`NodeAttribution`] adds
//! the shares to each snapshot on the sampler thread, after its NVML reads and before it is
//! published (it makes no NVML call), so every consumer sees the same figures:
//!
//! 1. each GPU process's pod, from `<proc root>/<host pid>/cgroup` ([`procfs`], [`cgroup`]):
//!    its UID, never guessed (a process in no pod's cgroup is not attributed);
//! 2. the pods' names where the kubelet's pod-resources `List` allocates a device to one
//!    pod alone, and which devices the kubelet shares ([`kubelet`]);
//! 3. the shares ([`shares`]): memory exact, SM utilization from the processes' samples,
//!    power and energy apportioned, all adding up to the device's figure with the
//!    not-attributed share.
//!
//! Names elsewhere come from the collector's `k8sattributes` processor, which associates each
//! pod's resource by `k8s.pod.uid` (docs/kubernetes.md gives the configuration): that keeps
//! the agent free of an API client and of any RBAC (a watch of the node's pods would add a
//! Kubernetes client to the binary, a service-account token to every node, and one watch per
//! node on the API server), while the collector agent on the node usually runs that
//! processor already.

pub mod cgroup;
pub mod kubelet;
pub mod procfs;
pub mod shares;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::sampling::{Annotate, PodRef, Sharing, Snapshot};
use cgroup::CgroupPod;
use kubelet::{KubeletView, Minors};
use procfs::Processes;
use shares::ShareState;

/// Adds each pod's share of each device to every snapshot ([`Annotate`]).
#[derive(Debug)]
pub struct NodeAttribution {
    processes: Processes,
    minors: Minors,
    kubelet: Arc<KubeletView>,
    shares: ShareState,
    /// The reference of each pod seen, by UID (kept while its processes are listed).
    refs: HashMap<String, Arc<PodRef>>,
}

impl NodeAttribution {
    /// Reads processes under `proc_root`; pod names and sharing from `kubelet` (the latest
    /// `List` answer, kept by [`kubelet::poll`]). Says once when `proc_root` is not the host
    /// PID namespace's: no process can be attributed then.
    pub fn new(proc_root: &Path, kubelet: Arc<KubeletView>) -> Self {
        let host = std::fs::read_to_string(proc_root.join("2/comm"))
            .is_ok_and(|c| c.trim_end() == "kthreadd");
        if !host {
            tracing::warn!(
                proc_root = %proc_root.display(),
                "node mode: this proc root does not show the host PID namespace (its PID 2 is not kthreadd): NVML's host PIDs cannot be looked up, so every GPU's use is reported not attributed; run the agent with hostPID: true (the Helm chart's node.enabled does)"
            );
        }
        Self {
            processes: Processes::new(proc_root),
            minors: Minors::new(proc_root),
            kubelet,
            shares: ShareState::default(),
            refs: HashMap::new(),
        }
    }
}

impl Annotate for NodeAttribution {
    fn annotate(&mut self, snapshot: &mut Snapshot, process_read: bool) {
        // 1. Each listed process's pod.
        let listed: HashSet<u32> = snapshot
            .devices
            .iter()
            .flat_map(|d| d.processes.iter().flatten().map(|p| p.pid))
            .collect();
        self.processes.retain(&listed);
        let pods: HashMap<u32, Arc<CgroupPod>> = listed
            .iter()
            .filter_map(|&pid| self.processes.pod(pid).map(|p| (pid, p)))
            .collect();

        // 2. Names and sharing from the kubelet's allocations.
        let mut named = HashMap::new();
        if let Some(allocations) = self.kubelet.current(kubelet::MAX_AGE) {
            let index = kubelet::Index::new(&allocations);
            let mut per_device = Vec::with_capacity(snapshot.devices.len());
            for d in &mut snapshot.devices {
                let holders = index.holders(&d.info, &mut self.minors);
                if d.sharing.is_none() && kubelet::shared(&holders) {
                    d.sharing = Some(Sharing::TimeSlicing);
                }
                let mut uids: Vec<&str> = d
                    .processes
                    .iter()
                    .flatten()
                    .filter_map(|p| pods.get(&p.pid).map(|c| c.pod_uid.as_str()))
                    .collect();
                uids.sort_unstable();
                uids.dedup();
                per_device.push((holders, uids));
            }
            named = kubelet::names(&per_device);
        }

        // 3. One reference per pod (a new one when its name becomes known), then the shares.
        let uids: HashSet<&str> = pods.values().map(|c| c.pod_uid.as_str()).collect();
        self.refs.retain(|uid, _| uids.contains(uid.as_str()));
        for uid in uids {
            let (name, namespace) = match named.get(uid) {
                Some((ns, name)) => (Some(name.clone()), Some(ns.clone())),
                None => (None, None),
            };
            let fresh = || {
                Arc::new(PodRef {
                    uid: uid.to_string(),
                    name: name.clone(),
                    namespace: namespace.clone(),
                })
            };
            match self.refs.get_mut(uid) {
                Some(r) if r.name == name && r.namespace == namespace => {}
                Some(r) => *r = fresh(),
                None => {
                    self.refs.insert(uid.to_string(), fresh());
                }
            }
        }
        let refs = &self.refs;
        let pod_of = |pid: u32| pods.get(&pid).and_then(|c| refs.get(&c.pod_uid).cloned());
        shares::attribute(snapshot, process_read, &pod_of, &mut self.shares);
    }
}
