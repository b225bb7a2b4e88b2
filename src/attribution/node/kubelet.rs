//! Which pods the kubelet allocated each device to, from its pod-resources `List`
//! ([`Allocation`], polled by [`poll`] on the async runtime into a [`KubeletView`] the
//! sampler thread reads), and what that tells about the pods node mode sees:
//!
//! - **names** ([`names`]): the kubelet names pods, not UIDs; the processes' cgroups give
//!   UIDs, not names. Where a device is allocated to one pod alone (no replica, one pod) and
//!   the processes on it belong to one pod UID, that UID is that pod: its `k8s.pod.name` and
//!   `k8s.namespace.name` are known. Nowhere else is a name given (a time-sliced GPU's
//!   processes could be any of its holders'); a UID two devices name differently, or two
//!   UIDs one device's pod, gets no name. The rest is the collector's `k8sattributes`
//!   processor's, by UID.
//! - **sharing** ([`shared`]): a device the kubelet lists as replicas (time-slicing, MPS) or
//!   allocated to more than one pod is marked `nvidia.gpu.sharing=time_slicing`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::procfs;
use crate::attribution::pod_resources::{self, nvidia_device_ids, parse_device_id, PodResources};
use crate::config::DeviceId;
use crate::sampling::DeviceInfo;

/// One NVIDIA device the kubelet allocated to one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name.
    pub container: String,
    /// The device, as its plugin's id means it.
    pub id: DeviceId,
    /// A replica of a shared device (`<id>::<n>`, `…/vgpu<n>`).
    pub shared: bool,
}

/// Every NVIDIA device allocation in a `List` answer, and the device ids of NVIDIA
/// resources no known plugin form matches ([`parse_device_id`]).
pub fn allocations(pods: &[PodResources]) -> (Vec<Allocation>, Vec<String>) {
    let mut out = Vec::new();
    let mut unknown = Vec::new();
    for pod in pods {
        for (c, plugin_id) in nvidia_device_ids(pod) {
            match parse_device_id(plugin_id) {
                Some((id, shared)) => out.push(Allocation {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    container: c.name.clone(),
                    id,
                    shared,
                }),
                None => unknown.push(plugin_id.clone()),
            }
        }
    }
    (out, unknown)
}

/// The latest `List` answer, shared by the poller and the sampler thread.
#[derive(Debug, Default)]
pub struct KubeletView {
    latest: Mutex<Option<(Instant, Arc<Vec<Allocation>>)>>,
    /// The first question has been answered or has failed.
    asked: std::sync::atomic::AtomicBool,
}

impl KubeletView {
    /// Whether the first question has been answered or has failed.
    pub fn asked(&self) -> bool {
        self.asked.load(std::sync::atomic::Ordering::Acquire)
    }

    fn set_asked(&self) {
        self.asked.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Records an answer received now.
    pub fn set(&self, allocations: Vec<Allocation>) {
        *self.latest.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), Arc::new(allocations)));
    }

    /// The latest answer if it is younger than `max_age`: an older one may name pods that
    /// have left (names are not given from it).
    pub fn current(&self, max_age: Duration) -> Option<Arc<Vec<Allocation>>> {
        let latest = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        latest
            .as_ref()
            .filter(|(at, _)| at.elapsed() <= max_age)
            .map(|(_, a)| a.clone())
    }
}

/// How often [`poll`] asks the kubelet.
pub const POLL_INTERVAL: Duration = Duration::from_secs(10);

/// How long node mode waits at start for the kubelet's first answer (or failure) before it
/// samples.
pub const FIRST_ANSWER_WAIT: Duration = Duration::from_secs(2);

/// Answers older than this are not used ([`KubeletView::current`]).
pub const MAX_AGE: Duration = Duration::from_secs(35);

/// Asks the kubelet at `socket` for every pod's devices every [`POLL_INTERVAL`], forever
/// (cancel it to stop), recording each answer in `view`. A failure is logged the first time
/// and then once every 30 tries; names are not given while the answers are older than
/// [`MAX_AGE`].
pub async fn poll(socket: PathBuf, view: Arc<KubeletView>) {
    let mut failures = 0u32;
    let mut unknown_said = false;
    loop {
        match pod_resources::list(&socket).await {
            Ok(pods) => {
                if failures > 0 {
                    tracing::info!(socket = %socket.display(), "the kubelet's pod-resources socket answers again");
                }
                failures = 0;
                let (allocations, unknown) = allocations(&pods);
                if !unknown.is_empty() && !unknown_said {
                    unknown_said = true;
                    tracing::warn!(device_ids = %unknown.join(", "), "node mode: the kubelet lists NVIDIA devices whose ids no known device plugin writes; the pods holding them are not named from the kubelet");
                }
                view.set(allocations);
            }
            Err(e) => {
                if failures % 30 == 0 {
                    tracing::warn!("node mode: {e}; pods are reported by UID only (the collector's k8sattributes processor can add their names) and no GPU is marked shared from the kubelet's allocations; node mode needs the socket directory mounted read-only from the host (hostPath /var/lib/kubelet/pod-resources); retrying every {}s", POLL_INTERVAL.as_secs());
                }
                failures += 1;
            }
        }
        view.set_asked();
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The device minor numbers of the GPUs, by PCI bus id, read once
/// ([`procfs::device_minor`]), for GKE's device ids.
#[derive(Debug)]
pub struct Minors {
    root: PathBuf,
    known: HashMap<String, Option<u32>>,
}

impl Minors {
    /// Reads under the proc root `root`.
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
            known: HashMap::new(),
        }
    }

    fn of(&mut self, info: &DeviceInfo) -> Option<u32> {
        let bus = info.pci_bus_id.as_ref()?;
        let root = &self.root;
        *self
            .known
            .entry(bus.clone())
            .or_insert_with(|| procfs::device_minor(root, bus))
    }

    /// Whether allocation `id` names device `info`.
    pub fn matches(&mut self, id: &DeviceId, info: &DeviceInfo) -> bool {
        match (id, &info.mig) {
            (DeviceId::Uuid(u), _) => *u == info.uuid,
            (DeviceId::Index(i), None) => *i == info.index,
            (DeviceId::MigIndex { gpu, mig }, Some(m)) => *gpu == info.index && *mig == m.mig_index,
            (DeviceId::Minor(minor), None) => self.of(info) == Some(*minor),
            (
                DeviceId::GpuInstance {
                    minor,
                    gpu_instance_id,
                },
                Some(m),
            ) => m.gpu_instance_id == Some(*gpu_instance_id) && self.of(info) == Some(*minor),
            _ => false,
        }
    }
}

/// The allocations of one answer, indexed for [`Index::holders`]: those by UUID (most) by
/// UUID, the others (indices, minor numbers) to match against each device; each with its
/// position in the answer.
#[derive(Debug)]
pub struct Index<'a> {
    by_uuid: HashMap<&'a str, Vec<(usize, &'a Allocation)>>,
    others: Vec<(usize, &'a Allocation)>,
}

impl<'a> Index<'a> {
    /// Indexes `allocations`.
    pub fn new(allocations: &'a [Allocation]) -> Self {
        let mut by_uuid: HashMap<&str, Vec<(usize, &Allocation)>> = HashMap::new();
        let mut others = Vec::new();
        for (i, a) in allocations.iter().enumerate() {
            match &a.id {
                DeviceId::Uuid(u) => by_uuid.entry(u.as_str()).or_default().push((i, a)),
                _ => others.push((i, a)),
            }
        }
        Self { by_uuid, others }
    }

    /// The allocations naming device `info`, in the answer's order.
    pub fn holders(&self, info: &DeviceInfo, minors: &mut Minors) -> Vec<&'a Allocation> {
        let by_uuid: &[(usize, &Allocation)] = self
            .by_uuid
            .get(info.uuid.as_str())
            .map_or(&[], Vec::as_slice);
        let others: Vec<(usize, &Allocation)> = self
            .others
            .iter()
            .filter(|(_, a)| minors.matches(&a.id, info))
            .copied()
            .collect();
        // Both are in the answer's order: merge them.
        let (mut i, mut j) = (0, 0);
        let mut out = Vec::with_capacity(by_uuid.len() + others.len());
        while i < by_uuid.len() || j < others.len() {
            let take_uuid = j == others.len() || (i < by_uuid.len() && by_uuid[i].0 < others[j].0);
            if take_uuid {
                out.push(by_uuid[i].1);
                i += 1;
            } else {
                out.push(others[j].1);
                j += 1;
            }
        }
        out
    }
}

/// The allocations naming device `info`.
pub fn holders<'a>(
    allocations: &'a [Allocation],
    info: &DeviceInfo,
    minors: &mut Minors,
) -> Vec<&'a Allocation> {
    Index::new(allocations).holders(info, minors)
}

/// Whether the kubelet shares the device among pods: a replica, or more than one pod.
pub fn shared(holders: &[&Allocation]) -> bool {
    holders.iter().any(|a| a.shared)
        || holders
            .windows(2)
            .any(|w| (&w[0].namespace, &w[0].pod) != (&w[1].namespace, &w[1].pod))
}

/// The `(namespace, name)` of pod UIDs, from devices each given as its holders and the
/// distinct pod UIDs of its processes (see the module's rule): a device held by one pod
/// alone, whose processes are of one UID, names that UID. A UID named two ways, or a pod
/// named for two UIDs, is left out.
pub fn names(devices: &[(Vec<&Allocation>, Vec<&str>)]) -> HashMap<String, (String, String)> {
    let mut found: HashMap<String, Option<(String, String)>> = HashMap::new();
    for (holders, uids) in devices {
        let [uid] = uids.as_slice() else {
            continue;
        };
        let Some(first) = holders.first() else {
            continue;
        };
        if shared(holders) {
            continue;
        }
        let name = (first.namespace.clone(), first.pod.clone());
        found
            .entry((*uid).to_string())
            .and_modify(|n| {
                if n.as_ref() != Some(&name) {
                    *n = None;
                }
            })
            .or_insert(Some(name));
    }
    let mut per_name: HashMap<(String, String), usize> = HashMap::new();
    for n in found.values().flatten() {
        *per_name.entry(n.clone()).or_default() += 1;
    }
    found
        .into_iter()
        .filter_map(|(uid, n)| n.filter(|n| per_name[n] == 1).map(|n| (uid, n)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::pod_resources::{ContainerDevices, ContainerResources};
    use crate::sampling::MigPlacement;

    fn pod(name: &str, ids: &[&str]) -> PodResources {
        PodResources {
            name: name.into(),
            namespace: "ml".into(),
            containers: vec![ContainerResources {
                name: "main".into(),
                devices: vec![ContainerDevices {
                    resource_name: "nvidia.com/gpu".into(),
                    device_ids: ids.iter().map(|s| s.to_string()).collect(),
                }],
            }],
        }
    }

    fn gpu(uuid: &str, index: u32, bus: &str) -> DeviceInfo {
        DeviceInfo {
            uuid: uuid.into(),
            index,
            pci_bus_id: Some(bus.into()),
            ..Default::default()
        }
    }

    #[test]
    fn holders_by_every_plugin_id_form() {
        let dir = tempfile::tempdir().unwrap();
        let info = dir.path().join("driver/nvidia/gpus/0000:28:00.0");
        std::fs::create_dir_all(&info).unwrap();
        std::fs::write(info.join("information"), "Device Minor: \t 7\n").unwrap();
        let (allocs, unknown) = allocations(&[
            pod("a", &["GPU-1::0", "nvidia7"]),
            pod("b", &["GPU-1::1", "0"]),
            pod("c", &["MIG-x", "1:2", "nvidia7/gi5", "what"]),
        ]);
        assert_eq!(unknown, ["what"]);
        let mut minors = Minors::new(dir.path());
        let names = |h: Vec<&Allocation>| h.iter().map(|a| a.pod.clone()).collect::<Vec<_>>();
        let g0 = gpu("GPU-0", 0, "00000000:18:00.0");
        let g1 = gpu("GPU-1", 1, "00000000:28:00.0");
        assert_eq!(names(holders(&allocs, &g0, &mut minors)), ["b"]);
        assert_eq!(names(holders(&allocs, &g1, &mut minors)), ["a", "a", "b"]);
        assert!(shared(&holders(&allocs, &g1, &mut minors)));
        assert!(!shared(&holders(&allocs, &g0, &mut minors)));
        let mig = |uuid: &str, mig_index, gi| DeviceInfo {
            uuid: uuid.into(),
            index: 1,
            pci_bus_id: Some("00000000:28:00.0".into()),
            mig: Some(MigPlacement {
                parent_uuid: "GPU-1".into(),
                mig_index,
                gpu_instance_id: Some(gi),
                compute_instance_id: Some(0),
            }),
            ..Default::default()
        };
        assert_eq!(
            names(holders(&allocs, &mig("MIG-x", 0, 1), &mut minors)),
            ["c"]
        );
        assert_eq!(
            names(holders(&allocs, &mig("MIG-y", 2, 1), &mut minors)),
            ["c"]
        );
        assert_eq!(
            names(holders(&allocs, &mig("MIG-z", 3, 5), &mut minors)),
            ["c"]
        );
        assert!(holders(&allocs, &mig("MIG-w", 4, 6), &mut minors).is_empty());
    }

    #[test]
    fn names_only_where_one_pod_alone_holds_the_device() {
        let (allocs, _) = allocations(&[
            pod("alone", &["GPU-0"]),
            pod("shared-1", &["GPU-1::0"]),
            pod("shared-2", &["GPU-1::1"]),
            pod("two-uids", &["GPU-2"]),
            pod("idle", &["GPU-3"]),
        ]);
        let on = |uuid: &str| {
            allocs
                .iter()
                .filter(|a| a.id == DeviceId::Uuid(uuid.into()))
                .collect::<Vec<_>>()
        };
        let named = names(&[
            (on("GPU-0"), vec!["uid-a"]),
            // A time-sliced GPU: its processes could be either holder's.
            (on("GPU-1"), vec!["uid-s"]),
            // Two pods' processes on an exclusive GPU (one sees all GPUs): no name.
            (on("GPU-2"), vec!["uid-x", "uid-y"]),
            (on("GPU-3"), vec![]),
            // Not allocated by the kubelet at all.
            (vec![], vec!["uid-z"]),
        ]);
        assert_eq!(
            named,
            HashMap::from([("uid-a".to_string(), ("ml".to_string(), "alone".to_string()))])
        );
    }

    #[test]
    fn conflicting_names_are_left_out() {
        let (allocs, _) = allocations(&[pod("p", &["GPU-0"]), pod("q", &["GPU-1"])]);
        let on = |uuid: &str| {
            allocs
                .iter()
                .filter(|a| a.id == DeviceId::Uuid(uuid.into()))
                .collect::<Vec<_>>()
        };
        // One UID on both pods' exclusive GPUs.
        assert!(names(&[(on("GPU-0"), vec!["u"]), (on("GPU-1"), vec!["u"])]).is_empty());
        // Two UIDs for pod p (a stale answer after p was replaced).
        assert!(names(&[(on("GPU-0"), vec!["u"]), (on("GPU-0"), vec!["v"])]).is_empty());
    }

    #[test]
    fn an_old_answer_is_not_used() {
        let view = KubeletView::default();
        assert!(view.current(MAX_AGE).is_none());
        view.set(vec![]);
        assert!(view.current(MAX_AGE).is_some());
        assert!(view.current(Duration::ZERO).is_none());
    }
}
