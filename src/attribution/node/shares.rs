//! Each pod's share of each device at one tick ([`attribute`]): a pure function over a
//! [`Snapshot`] and which pod each process belongs to, with the little state that windows
//! need ([`ShareState`]: the last energy reading, each process's last SM share, each pod's
//! energy total). Unit-tested here without a GPU.
//!
//! The method, as `docs/metrics.md` and `docs/kubernetes.md` state it:
//!
//! - **Memory** (exact): a pod's share of a device is the sum of `usedGpuMemory` of its
//!   processes on it (compute processes and MPS clients). The not-attributed share is the
//!   device's used memory (`nvmlDeviceGetMemoryInfo_v2.used`) minus every pod's: processes
//!   in no pod, the driver's own allocations. Shares add up to the device's used memory
//!   exactly. Where NVML does not tell one process's memory, that pod's share and the
//!   not-attributed share are absent (never a partial sum presented as the whole).
//! - **SM utilization** (exact, of what NVML gives): the sum of the pod's processes'
//!   `smUtil` over the last process-utilization window; at the ticks that read it.
//! - **Power and energy** (apportioned, per physical GPU): each process weighs its SM share
//!   from the latest process-utilization read (on a MIG device, times the device's compute
//!   slices, the `<n>g` of its profile name, as its SM share is of the slice); a pod
//!   weighs the sum of its processes' weights. A read that gives no process any sample
//!   (NVML answers `NOT_FOUND`) less than [`NO_SAMPLE_HOLD`] after the last read that did
//!   keeps that read's weights (NVML had no sample yet for so short a window, as at the
//!   final sample at shutdown); later, it means no kernel ran. When no listed process has
//!   any weight (no kernel ran in the window), processes weigh the memory they hold. When none holds any
//!   (no process, or none whose memory NVML tells), everything goes to the not-attributed
//!   share. The GPU's power (mW, `nvmlDeviceGetPowerUsage`) and the energy of each window
//!   between two energy readings (mJ, the difference of `nvmlDeviceGetTotalEnergyConsumption`)
//!   are split in proportion to the weights, in whole mW and mJ by the largest-remainder
//!   method, so that the shares add up to the GPU's figure exactly; the not-attributed share
//!   is what the pods' shares leave. A window in which NVML's total went down (driver
//!   reload, GPU reset) is not split.
//! - A pod's energy total counts from the start of the first window it was given a share
//!   of ([`PodShare::energy_since`]); a pod with no process left on the GPU drops out (its
//!   series ends).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::sampling::{DeviceSample, PodRef, PodShare, Snapshot};

/// A process-utilization read without any sample this soon after the last read with some
/// keeps that read's weights: NVML samples processes about once a second, so a shorter
/// window can hold none while kernels ran.
pub const NO_SAMPLE_HOLD: Duration = Duration::from_secs(1);

/// What [`attribute`] keeps between ticks, per physical GPU (by UUID).
#[derive(Debug, Default)]
pub struct ShareState {
    gpus: HashMap<String, GpuState>,
}

#[derive(Debug, Default)]
struct GpuState {
    /// Each process's weight from the latest process-utilization read.
    sm_weight: HashMap<u32, f64>,
    /// When the latest read that gave some process a sample was made.
    sm_sampled_at: Option<Instant>,
    /// The last energy reading (mJ) and its time.
    energy: Option<(u64, SystemTime)>,
    /// Each pod's energy total (mJ) and since when (key `None`: not attributed).
    totals: HashMap<Option<String>, (u64, SystemTime)>,
}

/// Splits `amount` in proportion to `weights` (all >= 0), in whole units by the
/// largest-remainder method: the parts add up to `amount` exactly. All weights zero (or
/// none): every part 0.
pub fn apportion(amount: u64, weights: &[f64]) -> Vec<u64> {
    let total: f64 = weights.iter().sum();
    if total <= 0.0 || !total.is_finite() {
        return vec![0; weights.len()];
    }
    let quotas: Vec<f64> = weights.iter().map(|w| amount as f64 * w / total).collect();
    let mut parts: Vec<u64> = quotas.iter().map(|q| q.floor() as u64).collect();
    let given: u64 = parts.iter().sum();
    let mut left = amount.saturating_sub(given);
    let mut order: Vec<usize> = (0..weights.len()).filter(|&i| weights[i] > 0.0).collect();
    order.sort_by(|&a, &b| {
        let (fa, fb) = (quotas[a] - quotas[a].floor(), quotas[b] - quotas[b].floor());
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        parts[*i] += 1;
        left -= 1;
    }
    parts
}

/// The compute slices of a MIG device from its profile name (`NVIDIA H200 MIG 3g.71gb` →
/// 3); `None` when the name has no `<n>g.`.
pub fn mig_slices(name: &str) -> Option<u32> {
    name.split_whitespace().find_map(|w| {
        let (n, rest) = w.split_once("g.")?;
        (!rest.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .then(|| n.parse().ok())
            .flatten()
    })
}

/// One process as the shares see it.
struct Proc {
    key: Option<String>,
    pid: u32,
    memory: Option<u64>,
    /// SM percent read at this tick (`None`: not read now, or no sample for it).
    sm_percent: Option<f64>,
    /// Weight multiplier of its device (MIG slices; 1 on a whole GPU).
    scale: f64,
}

/// Fills [`DeviceSample::pods`] of every device of `snapshot`: memory and SM shares on each
/// device that lists processes, power and energy shares on each physical GPU. `pod_of`
/// names each process's pod (`None`: in no pod); `process_read` says whether this tick read
/// the process utilization (then a process without a sample had no SM share in the window).
pub fn attribute(
    snapshot: &mut Snapshot,
    process_read: bool,
    pod_of: &dyn Fn(u32) -> Option<Arc<PodRef>>,
    state: &mut ShareState,
) {
    let mut refs: BTreeMap<String, Arc<PodRef>> = BTreeMap::new();
    // Each physical GPU's MIG devices, by the GPU's UUID.
    let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
    for (j, d) in snapshot.devices.iter().enumerate() {
        if let Some(m) = &d.info.mig {
            children.entry(m.parent_uuid.as_str()).or_default().push(j);
        }
    }
    // Per device: its processes.
    let mut per_device: Vec<Option<Vec<Proc>>> = Vec::with_capacity(snapshot.devices.len());
    let scales = device_scales(&snapshot.devices, &children);
    for (d, scale) in snapshot.devices.iter().zip(&scales) {
        per_device.push(d.processes.as_ref().map(|list| {
            list.iter()
                .map(|p| {
                    let pod = pod_of(p.pid);
                    let key = pod.map(|r| {
                        let uid = r.uid.clone();
                        refs.entry(uid.clone()).or_insert(r);
                        uid
                    });
                    Proc {
                        key,
                        pid: p.pid,
                        memory: p.used_memory_bytes,
                        sm_percent: p.utilization.map(|u| u.sm_percent),
                        scale: *scale,
                    }
                })
                .collect()
        }));
    }
    let reference = |key: &Option<String>| key.as_ref().map(|k| refs[k].clone());

    // Memory and SM on the devices that list processes.
    let mut shares: Vec<BTreeMap<Option<String>, PodShare>> =
        vec![BTreeMap::new(); snapshot.devices.len()];
    for (i, d) in snapshot.devices.iter().enumerate() {
        let Some(procs) = &per_device[i] else {
            continue;
        };
        let map = &mut shares[i];
        map.insert(None, PodShare::new(None));
        map.get_mut(&None).expect("inserted").processes = Some(0);
        for p in procs {
            let s = map
                .entry(p.key.clone())
                .or_insert_with(|| PodShare::new(reference(&p.key)));
            s.processes = Some(s.processes.unwrap_or(0) + 1);
        }
        let every_memory = procs.iter().all(|p| p.memory.is_some());
        for (key, s) in map.iter_mut() {
            let mine = procs.iter().filter(|p| &p.key == key);
            let known: Option<u64> = mine.clone().map(|p| p.memory).sum();
            s.memory_used_bytes = known.map(|b| b as i64);
            if process_read {
                let read: Vec<f64> = mine.filter_map(|p| p.sm_percent).collect();
                s.sm_ratio =
                    (key.is_none() || !read.is_empty()).then(|| read.iter().sum::<f64>() / 100.0);
            }
        }
        // The not-attributed share: what the pods' leave of the device's used memory.
        let pods: i64 = map
            .iter()
            .filter(|(k, _)| k.is_some())
            .filter_map(|(_, s)| s.memory_used_bytes)
            .sum();
        let rest = map.get_mut(&None).expect("inserted");
        rest.memory_used_bytes = match (every_memory, d.memory_used_bytes) {
            (true, Some(used)) => Some(used as i64 - pods),
            _ => None,
        };
    }

    // Power and energy on each physical GPU, split over the processes of its devices.
    for (i, d) in snapshot.devices.iter().enumerate() {
        if d.info.mig.is_some() {
            continue;
        }
        let members: Vec<usize> = if per_device[i].is_some() {
            vec![i]
        } else {
            children
                .get(d.info.uuid.as_str())
                .cloned()
                .unwrap_or_default()
        };
        let procs: Vec<&Proc> = members
            .iter()
            .filter_map(|&j| per_device[j].as_ref())
            .flatten()
            .collect();
        let gpu = state.gpus.entry(d.info.uuid.clone()).or_default();
        if process_read {
            let now = snapshot.taken_instant;
            let sampled = procs.iter().any(|p| p.sm_percent.is_some());
            let hold = gpu
                .sm_sampled_at
                .is_some_and(|t| now.saturating_duration_since(t) < NO_SAMPLE_HOLD);
            if sampled || !hold {
                gpu.sm_weight = procs
                    .iter()
                    .map(|p| (p.pid, p.sm_percent.unwrap_or(0.0) * p.scale))
                    .collect();
            }
            if sampled {
                gpu.sm_sampled_at = Some(now);
            }
        }
        let (keys, weights) = weights(&procs, &gpu.sm_weight);
        let map = &mut shares[i];
        if d.power_milliwatts.is_some() || d.energy_millijoules.is_some() {
            map.entry(None).or_insert_with(|| PodShare::new(None));
            for k in &keys {
                map.entry(k.clone())
                    .or_insert_with(|| PodShare::new(reference(k)));
            }
        }
        if let Some(p) = d.power_milliwatts {
            let parts = apportion(u64::from(p), &weights);
            let pods: u64 = split_to(map, &keys, &parts, |s, v| s.power_milliwatts = Some(v));
            map.get_mut(&None).expect("inserted").power_milliwatts = Some(u64::from(p) - pods);
        }
        if let Some(e) = d.energy_millijoules {
            let now = snapshot.taken_at;
            let window = match gpu.energy {
                Some((e0, t0)) if e >= e0 => Some((e - e0, t0)),
                Some((e0, _)) => {
                    tracing::debug!(gpu = %d.info.uuid, from = e0, to = e, "NVML's energy total went down: this window is not split among pods");
                    None
                }
                None => None,
            };
            gpu.energy = Some((e, now));
            let parts = window.map_or_else(
                || vec![0; keys.len()],
                |(delta, _)| apportion(delta, &weights),
            );
            let since = window.map_or(now, |(_, t0)| t0);
            let mut given = 0;
            let mut credited: Vec<Option<String>> = Vec::with_capacity(keys.len() + 1);
            for (k, part) in keys.iter().zip(&parts) {
                if k.is_some() {
                    given += part;
                    add(&mut gpu.totals, k, *part, since);
                    credited.push(k.clone());
                }
            }
            let rest = window.map_or(0, |(delta, _)| delta - given);
            add(&mut gpu.totals, &None, rest, since);
            credited.push(None);
            // A pod with no process left on the GPU and nothing credited now drops out.
            gpu.totals.retain(|k, _| credited.contains(k));
            for (k, (total, since)) in &gpu.totals {
                let s = map
                    .entry(k.clone())
                    .or_insert_with(|| PodShare::new(reference(k)));
                s.energy_millijoules = Some(*total);
                s.energy_since = Some(*since);
            }
        }
    }

    for (d, map) in snapshot.devices.iter_mut().zip(shares) {
        if map.is_empty() {
            continue;
        }
        // Pods by UID, then the not-attributed share.
        let mut list: Vec<PodShare> = map.into_values().collect();
        list.rotate_left(1);
        d.pods = Some(list);
    }
}

/// Adds `part` to the total of `key`, created `since` when new.
fn add(
    totals: &mut HashMap<Option<String>, (u64, SystemTime)>,
    key: &Option<String>,
    part: u64,
    since: SystemTime,
) {
    totals.entry(key.clone()).or_insert((0, since)).0 += part;
}

/// Sets each pod key's part with `set` (the not-attributed key is left to the caller);
/// returns the sum given to pods.
fn split_to(
    map: &mut BTreeMap<Option<String>, PodShare>,
    keys: &[Option<String>],
    parts: &[u64],
    set: impl Fn(&mut PodShare, u64),
) -> u64 {
    let mut given = 0;
    for (k, part) in keys.iter().zip(parts) {
        if k.is_some() {
            set(map.get_mut(k).expect("inserted"), *part);
            given += part;
        }
    }
    given
}

/// The keys (pods, and `None`) of the listed processes and their weights: SM shares
/// (`sm_weight`, by PID) when any is above 0, else the memory they hold, else all 0.
fn weights(procs: &[&Proc], sm_weight: &HashMap<u32, f64>) -> (Vec<Option<String>>, Vec<f64>) {
    let mut by_key: BTreeMap<Option<String>, (f64, f64)> = BTreeMap::new();
    for p in procs {
        let w = by_key.entry(p.key.clone()).or_default();
        w.0 += sm_weight.get(&p.pid).copied().unwrap_or(0.0);
        w.1 += p.memory.unwrap_or(0) as f64;
    }
    let sm_total: f64 = by_key.values().map(|w| w.0).sum();
    let keys = by_key.keys().cloned().collect();
    let weights = by_key
        .values()
        .map(|&(sm, memory)| if sm_total > 0.0 { sm } else { memory })
        .collect();
    (keys, weights)
}

/// Each device's weight multiplier: 1 for a whole GPU; for the MIG devices of one GPU their
/// compute slices ([`mig_slices`]) when every one's name tells, else their memory totals
/// (GiB) when every one's is known, else 1.
fn device_scales(devices: &[DeviceSample], children: &HashMap<&str, Vec<usize>>) -> Vec<f64> {
    let mut scales = vec![1.0; devices.len()];
    let slices = |s: &DeviceSample| s.info.name.as_deref().and_then(mig_slices);
    for siblings in children.values() {
        let all = |f: &dyn Fn(&DeviceSample) -> bool| siblings.iter().all(|&j| f(&devices[j]));
        for &j in siblings {
            let d = &devices[j];
            scales[j] = if all(&|s| slices(s).is_some()) {
                f64::from(slices(d).unwrap_or(1))
            } else if all(&|s| s.memory_total_bytes.is_some()) {
                d.memory_total_bytes.unwrap_or(0) as f64 / (1u64 << 30) as f64
            } else {
                1.0
            };
        }
    }
    scales
}

#[cfg(test)]
#[path = "shares_tests.rs"]
mod tests;
