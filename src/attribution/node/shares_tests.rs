use std::time::{Duration, Instant};

use super::*;
use crate::sampling::{DeviceInfo, DeviceState, MigPlacement, ProcessSample, ProcessUtilization};

const MIB: u64 = crate::sampling::snapshot::BYTES_PER_MIB;

fn gpu(uuid: &str) -> DeviceSample {
    DeviceSample::empty(
        Arc::new(DeviceInfo {
            uuid: uuid.into(),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            ..Default::default()
        }),
        DeviceState::Ok,
    )
}

fn mig(uuid: &str, parent: &str, name: &str) -> DeviceSample {
    DeviceSample::empty(
        Arc::new(DeviceInfo {
            uuid: uuid.into(),
            name: Some(name.into()),
            mig: Some(MigPlacement {
                parent_uuid: parent.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        DeviceState::Ok,
    )
}

fn process(pid: u32, memory_mib: u64, sm_percent: Option<f64>) -> ProcessSample {
    ProcessSample {
        pid,
        used_memory_bytes: Some(memory_mib * MIB),
        executable_name: None,
        utilization: sm_percent.map(|sm| ProcessUtilization {
            sm_percent: sm,
            ..Default::default()
        }),
    }
}

fn snapshot(t_s: u64, devices: Vec<DeviceSample>) -> Snapshot {
    Snapshot {
        taken_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + t_s),
        taken_instant: Instant::now(),
        seq: t_s,
        export: true,
        devices,
    }
}

/// Pod `p<N>` for PIDs `N00..N99`; PIDs from 900 are in no pod.
fn pod_of(pid: u32) -> Option<Arc<PodRef>> {
    (pid < 900).then(|| {
        Arc::new(PodRef {
            uid: format!("pod-{}", pid / 100),
            name: None,
            namespace: None,
        })
    })
}

fn uid(s: &PodShare) -> Option<&str> {
    s.pod.as_ref().map(|p| p.uid.as_str())
}

fn shares(d: &DeviceSample) -> &[PodShare] {
    d.pods.as_deref().expect("shares")
}

fn share<'a>(d: &'a DeviceSample, pod: Option<&str>) -> &'a PodShare {
    shares(d)
        .iter()
        .find(|s| uid(s) == pod)
        .unwrap_or_else(|| panic!("no share of {pod:?} in {:#?}", d.pods))
}

fn sum(d: &DeviceSample, f: impl Fn(&PodShare) -> Option<i64>) -> i64 {
    shares(d).iter().map(|s| f(s).expect("every share")).sum()
}

/// Four pods' processes on one time-sliced GPU, one of them with two processes, and a
/// process in no pod.
fn time_sliced(t_s: u64, energy_mj: u64) -> Snapshot {
    let mut d = gpu("GPU-a");
    d.memory_used_bytes = Some(10_000 * MIB + 12_345);
    d.power_milliwatts = Some(400_001);
    d.energy_millijoules = Some(energy_mj);
    d.processes = Some(vec![
        process(100, 1000, Some(40.0)),
        process(200, 2000, Some(20.0)),
        process(300, 1500, Some(10.0)),
        process(301, 500, Some(10.0)),
        process(400, 3000, Some(0.0)),
        process(900, 256, Some(20.0)),
    ]);
    snapshot(t_s, vec![d])
}

#[test]
fn four_pods_on_a_time_sliced_gpu_memory_exact_shares_add_up() {
    let mut state = ShareState::default();
    let mut s = time_sliced(0, 5_000_000);
    attribute(&mut s, true, &pod_of, &mut state);
    let d = &s.devices[0];
    let order: Vec<Option<&str>> = shares(d).iter().map(uid).collect();
    assert_eq!(
        order,
        [
            Some("pod-1"),
            Some("pod-2"),
            Some("pod-3"),
            Some("pod-4"),
            None
        ],
        "pods by UID, then the not-attributed share"
    );
    // Memory: each pod's processes' sum, exactly; the rest is the process in no pod and
    // what no process holds.
    let mem = |p| share(d, p).memory_used_bytes;
    assert_eq!(mem(Some("pod-1")), Some((1000 * MIB) as i64));
    assert_eq!(
        mem(Some("pod-3")),
        Some((2000 * MIB) as i64),
        "two processes"
    );
    assert_eq!(mem(Some("pod-4")), Some((3000 * MIB) as i64));
    assert_eq!(mem(None), Some(((10_000 - 8000) * MIB + 12_345) as i64));
    assert_eq!(
        sum(d, |s| s.memory_used_bytes),
        d.memory_used_bytes.unwrap() as i64
    );
    assert_eq!(share(d, Some("pod-3")).processes, Some(2));
    // SM: the sum of the processes' shares.
    assert_eq!(share(d, Some("pod-3")).sm_ratio, Some(0.2));
    assert_eq!(share(d, Some("pod-4")).sm_ratio, Some(0.0));
    assert_eq!(share(d, None).sm_ratio, Some(0.2));
    // Power by SM share: 40:20:20:0 and 20 not attributed, of 400001 mW, in whole mW.
    let power = |p| share(d, p).power_milliwatts;
    assert_eq!(power(Some("pod-1")), Some(160_001));
    assert_eq!(power(Some("pod-2")), Some(80_000));
    assert_eq!(power(Some("pod-3")), Some(80_000));
    assert_eq!(power(Some("pod-4")), Some(0));
    assert_eq!(power(None), Some(80_000));
    assert_eq!(sum(d, |s| s.power_milliwatts.map(|p| p as i64)), 400_001);
    // The first energy reading: every share starts at 0, now.
    for s in shares(d) {
        assert_eq!(s.energy_millijoules, Some(0), "{s:?}");
        assert_eq!(s.energy_since, Some(s_time(0)));
    }

    // Ten seconds later: 4,000,000 mJ more, split the same way.
    let mut s = time_sliced(10, 9_000_000);
    attribute(&mut s, true, &pod_of, &mut state);
    let d = &s.devices[0];
    let energy = |p| share(d, p).energy_millijoules;
    assert_eq!(energy(Some("pod-1")), Some(1_600_000));
    assert_eq!(energy(Some("pod-2")), Some(800_000));
    assert_eq!(energy(Some("pod-3")), Some(800_000));
    assert_eq!(energy(Some("pod-4")), Some(0));
    assert_eq!(energy(None), Some(800_000));
    assert_eq!(
        sum(d, |s| s.energy_millijoules.map(|e| e as i64)),
        4_000_000
    );
    assert_eq!(share(d, Some("pod-2")).energy_since, Some(s_time(0)));
}

fn s_time(t_s: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + t_s)
}

#[test]
fn a_process_that_exits_between_two_reads() {
    let mut state = ShareState::default();
    let mut s = time_sliced(0, 1_000_000);
    attribute(&mut s, true, &pod_of, &mut state);
    // pod-2's only process has ended by the next read.
    let mut s = time_sliced(10, 2_000_000);
    s.devices[0]
        .processes
        .as_mut()
        .unwrap()
        .retain(|p| p.pid != 200);
    attribute(&mut s, true, &pod_of, &mut state);
    let d = &s.devices[0];
    assert!(
        shares(d).iter().all(|s| uid(s) != Some("pod-2")),
        "no share for a pod without a process: {:#?}",
        d.pods
    );
    // The window's energy goes to the processes listed at its end: 40:20:0:20 of 1e6.
    assert_eq!(share(d, Some("pod-1")).energy_millijoules, Some(500_000));
    assert_eq!(share(d, Some("pod-3")).energy_millijoules, Some(250_000));
    assert_eq!(
        sum(d, |s| s.energy_millijoules.map(|e| e as i64)),
        1_000_000
    );
    assert_eq!(
        sum(d, |s| s.memory_used_bytes),
        d.memory_used_bytes.unwrap() as i64,
        "its memory is no one's now: in the not-attributed share"
    );
    // It comes back (a new process of the same pod): its energy total starts again.
    let mut s = time_sliced(20, 3_000_000);
    attribute(&mut s, true, &pod_of, &mut state);
    let p2 = share(&s.devices[0], Some("pod-2"));
    assert_eq!(p2.energy_since, Some(s_time(10)));
    assert_eq!(p2.energy_millijoules, Some(200_000));
}

#[test]
fn a_process_in_no_pod_is_not_attributed_and_a_gpu_with_no_pod_is_all_not_attributed() {
    let mut state = ShareState::default();
    let mut lonely = gpu("GPU-a");
    lonely.memory_used_bytes = Some(300 * MIB);
    lonely.power_milliwatts = Some(250_000);
    lonely.processes = Some(vec![process(950, 200, Some(90.0))]);
    let mut idle = gpu("GPU-b");
    idle.memory_used_bytes = Some(5 * MIB);
    idle.power_milliwatts = Some(70_000);
    idle.energy_millijoules = Some(42);
    idle.processes = Some(vec![]);
    let mut s = snapshot(0, vec![lonely, idle]);
    attribute(&mut s, true, &pod_of, &mut state);
    for d in &s.devices {
        let only: Vec<Option<&str>> = shares(d).iter().map(uid).collect();
        assert_eq!(only, [None], "{:#?}", d.pods);
    }
    let rest = share(&s.devices[0], None);
    assert_eq!(rest.memory_used_bytes, Some((300 * MIB) as i64));
    assert_eq!(rest.power_milliwatts, Some(250_000));
    assert_eq!(rest.sm_ratio, Some(0.9));
    assert_eq!(rest.processes, Some(1));
    let idle = share(&s.devices[1], None);
    assert_eq!(
        (
            idle.memory_used_bytes,
            idle.power_milliwatts,
            idle.processes
        ),
        (Some((5 * MIB) as i64), Some(70_000), Some(0))
    );
    assert_eq!(idle.sm_ratio, Some(0.0));
    assert_eq!(idle.energy_millijoules, Some(0));
}

#[test]
fn no_kernel_in_the_window_splits_power_by_memory_held() {
    let mut state = ShareState::default();
    let mut s = time_sliced(0, 0);
    for p in s.devices[0].processes.as_mut().unwrap() {
        p.utilization = None; // NOT_FOUND: no process ran
    }
    attribute(&mut s, true, &pod_of, &mut state);
    let d = &s.devices[0];
    // 1000:2000:2000:3000 MiB and 256 not attributed, of 400001 mW: 48449.73, 96899.47,
    // 96899.47, 145349.20 and 12403.13; the 2 mW the floors leave go to the largest
    // remainders.
    let power = |p| share(d, p).power_milliwatts.unwrap();
    assert_eq!(power(Some("pod-1")), 48_450);
    assert_eq!(power(Some("pod-2")), 96_900);
    assert_eq!(power(Some("pod-3")), 96_899);
    assert_eq!(power(Some("pod-4")), 145_349);
    assert_eq!(power(None), 12_403);
    assert_eq!(sum(d, |s| s.power_milliwatts.map(|p| p as i64)), 400_001);
    assert_eq!(share(d, Some("pod-1")).sm_ratio, None, "no sample: unknown");
    // A tick that does not read process utilization keeps the latest weights (here: none).
    let mut s = time_sliced(5, 0);
    attribute(&mut s, false, &pod_of, &mut state);
    assert_eq!(share(&s.devices[0], Some("pod-1")).sm_ratio, None);
    assert_eq!(
        share(&s.devices[0], Some("pod-4")).power_milliwatts,
        Some(power(Some("pod-4")))
    );
}

#[test]
fn weights_are_those_of_the_latest_process_utilization_read() {
    let mut state = ShareState::default();
    let mut s = time_sliced(0, 0);
    attribute(&mut s, true, &pod_of, &mut state);
    // Not read at this tick: the samples are absent, the weights are the last read's.
    let mut s = time_sliced(5, 0);
    for p in s.devices[0].processes.as_mut().unwrap() {
        p.utilization = None;
    }
    attribute(&mut s, false, &pod_of, &mut state);
    assert_eq!(
        share(&s.devices[0], Some("pod-1")).power_milliwatts,
        Some(160_001)
    );
}

#[test]
fn a_short_window_without_samples_keeps_the_weights_a_long_one_means_idle() {
    let mut state = ShareState::default();
    let mut s = time_sliced(0, 0);
    attribute(&mut s, true, &pod_of, &mut state);
    let no_samples = |at: Instant| {
        let mut s = time_sliced(1, 0);
        s.taken_instant = at;
        for p in s.devices[0].processes.as_mut().unwrap() {
            p.utilization = None;
        }
        s
    };
    let t0 = s.taken_instant;
    // 300 ms later: NVML had no sample yet; the SM weights hold.
    let mut s = no_samples(t0 + Duration::from_millis(300));
    attribute(&mut s, true, &pod_of, &mut state);
    assert_eq!(
        share(&s.devices[0], Some("pod-1")).power_milliwatts,
        Some(160_001)
    );
    // 5 s after the last read with samples: no kernel ran; by memory (1000 of 8256 MiB).
    let mut s = no_samples(t0 + Duration::from_secs(5));
    attribute(&mut s, true, &pod_of, &mut state);
    assert_eq!(
        share(&s.devices[0], Some("pod-1")).power_milliwatts,
        Some(48_450)
    );
}

#[test]
fn unknown_process_memory_leaves_that_pod_and_the_rest_absent() {
    let mut state = ShareState::default();
    let mut s = time_sliced(0, 0);
    s.devices[0].processes.as_mut().unwrap()[1].used_memory_bytes = None;
    attribute(&mut s, true, &pod_of, &mut state);
    let d = &s.devices[0];
    assert_eq!(share(d, Some("pod-2")).memory_used_bytes, None);
    assert_eq!(share(d, None).memory_used_bytes, None, "not a partial sum");
    assert_eq!(
        share(d, Some("pod-1")).memory_used_bytes,
        Some((1000 * MIB) as i64)
    );
}

#[test]
fn mig_with_sharing_memory_on_each_mig_device_power_on_the_gpu_by_slices() {
    let mut state = ShareState::default();
    let mut parent = gpu("GPU-m");
    parent.power_milliwatts = Some(420_000);
    parent.energy_millijoules = Some(1_000);
    let mut big = mig("MIG-3", "GPU-m", "NVIDIA H200 MIG 3g.71gb");
    big.memory_used_bytes = Some(40_000 * MIB);
    big.processes = Some(vec![process(100, 39_000, Some(50.0))]);
    // A 1g device time-sliced between two pods.
    let mut small = mig("MIG-1", "GPU-m", "NVIDIA H200 MIG 1g.18gb");
    small.memory_used_bytes = Some(4_000 * MIB);
    small.processes = Some(vec![
        process(200, 1_000, Some(30.0)),
        process(300, 2_000, Some(70.0)),
    ]);
    let mut s = snapshot(0, vec![parent, big, small]);
    attribute(&mut s, true, &pod_of, &mut state);
    let (gpu, big, small) = (&s.devices[0], &s.devices[1], &s.devices[2]);
    // Memory and SM on each MIG device; not on the GPU.
    assert_eq!(
        share(small, Some("pod-3")).memory_used_bytes,
        Some((2_000 * MIB) as i64)
    );
    assert_eq!(
        share(small, None).memory_used_bytes,
        Some((1_000 * MIB) as i64)
    );
    assert_eq!(share(big, Some("pod-1")).sm_ratio, Some(0.5));
    assert!(shares(gpu)
        .iter()
        .all(|s| s.memory_used_bytes.is_none() && s.processes.is_none()));
    assert!(shares(small).iter().all(|s| s.power_milliwatts.is_none()));
    // Power on the GPU: 50 % of 3 slices = 1.5, 30 % and 70 % of 1 slice = 0.3 and 0.7.
    let power = |p| share(gpu, p).power_milliwatts.unwrap();
    assert_eq!(power(Some("pod-1")), 252_000);
    assert_eq!(power(Some("pod-2")), 50_400);
    assert_eq!(power(Some("pod-3")), 117_600);
    assert_eq!(power(None), 0);
    assert_eq!(sum(gpu, |s| s.power_milliwatts.map(|p| p as i64)), 420_000);
}

#[test]
fn a_window_where_the_total_went_down_is_not_split() {
    let mut state = ShareState::default();
    let mut s = time_sliced(0, 5_000_000);
    attribute(&mut s, true, &pod_of, &mut state);
    let mut s = time_sliced(10, 300);
    attribute(&mut s, true, &pod_of, &mut state);
    assert_eq!(
        sum(&s.devices[0], |s| s.energy_millijoules.map(|e| e as i64)),
        0
    );
    let mut s = time_sliced(20, 1_300);
    attribute(&mut s, true, &pod_of, &mut state);
    assert_eq!(
        sum(&s.devices[0], |s| s.energy_millijoules.map(|e| e as i64)),
        1_000
    );
}

#[test]
fn apportion_adds_up_exactly() {
    assert_eq!(apportion(10, &[1.0, 1.0, 1.0]), [4, 3, 3]);
    assert_eq!(apportion(7, &[0.0, 0.0]), [0, 0]);
    assert_eq!(apportion(7, &[]), Vec::<u64>::new());
    assert_eq!(apportion(5, &[0.0, 2.0]), [0, 5]);
    let mut seed = 12345u64;
    for n in 1..40 {
        let weights: Vec<f64> = (0..n)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                (seed >> 33) as f64 / 1e6
            })
            .collect();
        let amount = seed % 10_000_000;
        assert_eq!(apportion(amount, &weights).iter().sum::<u64>(), amount);
    }
}

#[test]
fn mig_slices_from_profile_names() {
    assert_eq!(mig_slices("NVIDIA H200 MIG 3g.71gb"), Some(3));
    assert_eq!(mig_slices("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), Some(1));
    assert_eq!(mig_slices("NVIDIA H100 MIG 1g.10gb+me"), Some(1));
    assert_eq!(mig_slices("NVIDIA H200"), None);
}
