//! Which pod and container a process belongs to, from the text of its `/proc/<pid>/cgroup`
//! ([`pod_of`]): a pure function, tested on the layouts below without a node.
//!
//! The kubelet puts every pod in a cgroup of its own under `kubepods` and every container in
//! one below it. What the path looks like depends on the cgroup driver and the runtime:
//!
//! | driver | runtime | the process's cgroup (cgroup v2 line `0::…`; v1 lines `N:controller:…` alike) |
//! | --- | --- | --- |
//! | systemd | containerd | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope` |
//! | systemd | CRI-O | `…/kubepods-besteffort-pod<uid with _>.slice/crio-<id>.scope` |
//! | systemd | cri-dockerd | `…/kubepods-pod<uid with _>.slice/docker-<id>.scope` (Guaranteed: no QoS slice) |
//! | cgroupfs | containerd, cri-dockerd | `/kubepods/burstable/pod<uid>/<id>` |
//! | cgroupfs | CRI-O | `/kubepods/besteffort/pod<uid>/crio-<id>` |
//!
//! A prefix before `kubepods` (the kubelet's `--cgroup-root`, a kind node's own slice) and a
//! path relative to the reader's cgroup namespace (`/../../kubepods-…`, when the agent runs
//! in a cgroup namespace of its own) are allowed: the pod is the `pod<uid>` segment below a
//! `kubepods` segment. The systemd driver writes the UID with `_` for `-`; it is given back
//! with `-`, as the API server has it. A static pod's UID is 32 hex digits, not a UUID; both
//! are accepted. A process in no pod's cgroup (a system service, a user session, a process
//! started on the node with `docker run`) has no pod: never guessed.

/// The pod (and container) a process's cgroup names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupPod {
    /// The pod's UID (`k8s.pod.uid`), with `-` separators.
    pub pod_uid: String,
    /// The container's runtime id (`container.id`, 64 hex digits for containerd, CRI-O and
    /// Docker), when the process is in a container's cgroup; `None` when it sits in the
    /// pod's cgroup itself.
    pub container_id: Option<String>,
}

/// The pod and container named by the content of a `/proc/<pid>/cgroup` file, cgroup v1
/// (one line per hierarchy, `N:controllers:path`) or v2 (`0::path`): the first line whose
/// path is in a pod's cgroup. `None` when no line is (the process is in no pod).
pub fn pod_of(cgroup_file: &str) -> Option<CgroupPod> {
    cgroup_file.lines().find_map(|line| {
        // `hierarchy-id:controller-list:path`; the path may itself hold ':'.
        let mut parts = line.splitn(3, ':');
        let (_, _, path) = (parts.next()?, parts.next()?, parts.next()?);
        pod_of_path(path)
    })
}

/// [`pod_of`] for one cgroup path.
pub fn pod_of_path(path: &str) -> Option<CgroupPod> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let mut under_kubepods = false;
    for (i, segment) in segments.iter().enumerate() {
        let uid = if let Some(rest) = systemd_pod(segment) {
            Some(rest.replace('_', "-"))
        } else if under_kubepods {
            segment.strip_prefix("pod").map(str::to_string)
        } else {
            None
        };
        if let Some(uid) = uid.filter(|u| is_uid(u)) {
            return Some(CgroupPod {
                pod_uid: uid,
                container_id: segments.get(i + 1).and_then(|c| container_id(c)),
            });
        }
        under_kubepods |= segment.contains("kubepods");
    }
    None
}

/// The UID part of a systemd pod slice, `<…kubepods…>-pod<uid>.slice`.
fn systemd_pod(segment: &str) -> Option<&str> {
    let slice = segment.strip_suffix(".slice")?;
    let at = slice.rfind("-pod")?;
    slice[..at]
        .contains("kubepods")
        .then(|| &slice[at + "-pod".len()..])
}

/// A pod UID: a UUID (36 characters, `-` at 8, 13, 18, 23) or a static pod's 32 hex
/// digits.
fn is_uid(uid: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    match uid.len() {
        32 => hex(uid),
        36 => {
            let parts: Vec<&str> = uid.split('-').collect();
            parts.len() == 5
                && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
                && parts.iter().all(|p| hex(p))
        }
        _ => false,
    }
}

/// The container id in a container's cgroup segment: `cri-containerd-<id>.scope`,
/// `crio-<id>.scope`, `docker-<id>.scope`, `crio-<id>` or a bare `<id>`. `None` for
/// anything else (CRI-O's `crio-conmon-<id>` monitor, a nested cgroup name).
fn container_id(segment: &str) -> Option<String> {
    let s = segment.strip_suffix(".scope").unwrap_or(segment);
    let id = ["cri-containerd-", "crio-", "docker-", "cri-dockerd-"]
        .iter()
        .find_map(|p| s.strip_prefix(p))
        .unwrap_or(s);
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0f3c1d2e-aaaa-4bbb-8ccc-123456789abc";
    const UID_: &str = "0f3c1d2e_aaaa_4bbb_8ccc_123456789abc";
    const ID: &str = "4c1b5d2a9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b";

    fn pod(container: Option<&str>) -> Option<CgroupPod> {
        Some(CgroupPod {
            pod_uid: UID.into(),
            container_id: container.map(str::to_string),
        })
    }

    #[test]
    fn cgroup_v2_systemd_driver_every_runtime() {
        for (qos, runtime) in [
            (
                "kubepods-burstable.slice/kubepods-burstable-",
                "cri-containerd-",
            ),
            ("kubepods-besteffort.slice/kubepods-besteffort-", "crio-"),
            ("kubepods-", "docker-"),
        ] {
            let file = format!("0::/kubepods.slice/{qos}pod{UID_}.slice/{runtime}{ID}.scope\n");
            assert_eq!(pod_of(&file), pod(Some(ID)), "{file}");
        }
    }

    #[test]
    fn cgroup_v2_cgroupfs_driver() {
        assert_eq!(
            pod_of(&format!("0::/kubepods/burstable/pod{UID}/{ID}\n")),
            pod(Some(ID))
        );
        assert_eq!(
            pod_of(&format!("0::/kubepods/besteffort/pod{UID}/crio-{ID}\n")),
            pod(Some(ID))
        );
        // Guaranteed QoS: the pod right under kubepods.
        assert_eq!(
            pod_of(&format!("0::/kubepods/pod{UID}/{ID}\n")),
            pod(Some(ID))
        );
    }

    #[test]
    fn cgroup_v1_lines_any_hierarchy() {
        let file = format!(
            "12:hugetlb:/\n11:memory:/kubepods/burstable/pod{UID}/{ID}\n\
             10:cpu,cpuacct:/kubepods/burstable/pod{UID}/{ID}\n1:name=systemd:/kubepods/burstable/pod{UID}/{ID}\n"
        );
        assert_eq!(pod_of(&file), pod(Some(ID)));
        let systemd = format!(
            "4:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope\n0::/\n"
        );
        assert_eq!(pod_of(&systemd), pod(Some(ID)));
    }

    #[test]
    fn prefixes_and_cgroup_namespaces() {
        // The agent in a cgroup namespace of its own sees other pods relative to its root.
        let relative =
            format!("0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{ID}.scope\n");
        assert_eq!(pod_of(&relative), pod(Some(ID)));
        // A kind node: the kubelet's slices inside the node container's.
        let kind = format!(
            "0::/system.slice/docker-abc.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod{UID_}.slice/cri-containerd-{ID}.scope\n"
        );
        assert_eq!(pod_of(&kind), pod(Some(ID)));
        // --cgroup-root=/custom
        assert_eq!(
            pod_of(&format!("0::/custom/kubepods/pod{UID}/{ID}\n")),
            pod(Some(ID))
        );
    }

    #[test]
    fn container_unknown_or_absent() {
        // In the pod's cgroup itself, or in CRI-O's conmon scope.
        assert_eq!(pod_of(&format!("0::/kubepods/pod{UID}\n")), pod(None));
        assert_eq!(
            pod_of(&format!(
                "0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{ID}.scope\n"
            )),
            pod(None)
        );
    }

    #[test]
    fn static_pod_uid() {
        let uid = "6f1c2b3a4d5e6f708192a3b4c5d6e7f8";
        assert_eq!(
            pod_of(&format!("0::/kubepods/burstable/pod{uid}/{ID}\n")),
            Some(CgroupPod {
                pod_uid: uid.into(),
                container_id: Some(ID.into())
            })
        );
    }

    #[test]
    fn processes_in_no_pod_are_not_attributed() {
        for file in [
            "0::/system.slice/containerd.service\n".to_string(),
            "0::/user.slice/user-1000.slice/session-3.scope\n".to_string(),
            format!("0::/system.slice/docker-{ID}.scope\n"),
            "0::/\n".to_string(),
            // "pod…" outside kubepods, and a malformed UID inside it.
            format!("0::/podman/pod{UID}/{ID}\n"),
            "0::/kubepods/burstable/podnot-a-uid/abc\n".to_string(),
            format!("0::/kubepods.slice/kubepods-pod{}.slice\n", &UID_[..20]),
            String::new(),
        ] {
            assert_eq!(pod_of(&file), None, "{file:?}");
        }
    }
}
