//! The run report's figures from hand-made and recorded samples.
use super::*;
use crate::sampling::DeviceState;
use std::time::UNIX_EPOCH;

fn info(index: u32, uuid: &str) -> Arc<DeviceInfo> {
    Arc::new(DeviceInfo {
        index,
        uuid: uuid.into(),
        name: Some("NVIDIA H200".into()),
        serial: None,
        pci_bus_id: None,
        vbios_version: None,
        driver_version: None,
        mig: None,
        gpm_supported: None,
    })
}

/// A sample with the fields the report reads.
#[allow(clippy::too_many_arguments)]
fn sample(
    info: &Arc<DeviceInfo>,
    util: Option<u32>,
    used: Option<u64>,
    total: Option<u64>,
    power_mw: Option<u32>,
    energy_mj: Option<u64>,
    temp: Option<u32>,
    reasons: Option<u64>,
) -> DeviceSample {
    let mut s = DeviceSample::empty(info.clone(), DeviceState::Ok);
    s.utilization_gpu_percent = util;
    s.memory_used_bytes = used;
    s.memory_total_bytes = total;
    s.power_milliwatts = power_mw;
    s.energy_millijoules = energy_mj;
    s.temperature_gpu_celsius = temp;
    s.clocks_event_reasons = reasons;
    s
}

struct Clock {
    base: Instant,
}

impl Clock {
    fn new() -> Self {
        Self {
            base: Instant::now(),
        }
    }

    fn snap(&self, seq: u64, t: f64, devices: Vec<DeviceSample>) -> Snapshot {
        Snapshot {
            taken_at: UNIX_EPOCH + Duration::from_secs(1_800_000_000) + Duration::from_secs_f64(t),
            taken_instant: self.base + Duration::from_secs_f64(t),
            seq,
            export: true,
            devices,
        }
    }
}

fn approx(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn energy_is_the_counter_difference_not_integrated_power() {
    let g = info(0, "GPU-a");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    // Power says 100 W, the counter says 250 J/s: the counter wins.
    for (k, e) in [1_000_000u64, 1_250_000, 1_500_000].into_iter().enumerate() {
        let s = sample(&g, Some(50), None, None, Some(100_000), Some(e), None, None);
        acc.add(&c.snap(k as u64 + 1, k as f64, vec![s]));
    }
    let r = acc.report(BTreeMap::new());
    let g0 = &r.gpus[0].summary;
    assert_eq!(g0.energy_j, Some(500.0));
    assert_eq!(g0.energy_source, Some(EnergySource::Counter));
    assert_eq!(g0.energy_kwh, Some(500.0 / 3.6e6));
    assert_eq!(g0.power_mean_w, Some(100.0));
    assert_eq!(r.pod.energy_j, Some(500.0));
    assert_eq!(r.pod.energy_source, Some(EnergySource::Counter));
    // ... and says that power (200 J over the counter's 2 s) does not agree.
    assert_eq!(
        (g0.energy_power_integral_j, g0.energy_counter_agrees),
        (Some(200.0), Some(false))
    );
    assert_eq!(r.pod.energy_counter_agrees, Some(false));
    let said: Vec<&String> = r
        .notes
        .iter()
        .filter(|n| n.contains("energy counter"))
        .collect();
    assert_eq!(said.len(), 1, "{:?}", r.notes);
    assert!(
        said[0].contains("counted 500 J") && said[0].contains("add up to 200 J"),
        "{said:?}"
    );
}

/// The frozen counter: 650 W for 20 s while the energy counter did not move. The
/// report keeps the counter's 0 J (its documented source) and says, once, that the power
/// readings add up to 13 kJ over the same span; a counter that agrees within the tolerance
/// (sampled power is coarser than the counter) raises nothing.
#[test]
fn an_energy_counter_that_disagrees_with_power_is_said() {
    let g = info(0, "GPU-a");
    let run = |energy: &dyn Fn(u64) -> u64| {
        let c = Clock::new();
        let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
        for k in 0..=20u64 {
            let s = sample(
                &g,
                Some(99),
                None,
                None,
                Some(650_000),
                Some(energy(k)),
                None,
                None,
            );
            acc.add(&c.snap(k + 1, k as f64, vec![s]));
        }
        acc.report(BTreeMap::new())
    };
    let frozen = run(&|_| 9_000_000);
    let s = &frozen.gpus[0].summary;
    assert_eq!(s.energy_j, Some(0.0));
    assert_eq!(s.energy_source, Some(EnergySource::Counter));
    assert_eq!(s.energy_power_integral_j, Some(13_000.0));
    assert_eq!(s.energy_counter_agrees, Some(false));
    let notes: Vec<&String> = frozen
        .notes
        .iter()
        .filter(|n| n.contains("energy"))
        .collect();
    assert_eq!(notes.len(), 1, "{:?}", frozen.notes);
    assert!(
        notes[0].contains("counted 0 J") && notes[0].contains("13000 J"),
        "{notes:?}"
    );
    // 20 % over the integral: within the 25 % tolerated.
    let close = run(&|k| 9_000_000 + k * 780_000);
    let s = &close.gpus[0].summary;
    assert_eq!(s.energy_counter_agrees, Some(true), "{s:?}");
    assert!(
        !close.notes.iter().any(|n| n.contains("energy")),
        "{:?}",
        close.notes
    );
}

#[test]
fn without_a_counter_power_is_integrated_and_said_so() {
    let g = info(0, "GPU-a");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    for (k, p) in [300_000u32, 500_000, 700_000].into_iter().enumerate() {
        let s = sample(&g, None, None, None, Some(p), None, None, None);
        acc.add(&c.snap(k as u64 + 1, k as f64, vec![s]));
    }
    let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
    // Each value holds until the next tick: 300 W × 1 s + 500 W × 1 s; the last holds 0 s.
    assert!(approx(s.energy_j.unwrap(), 800.0, 1e-6), "{s:?}");
    assert_eq!(s.energy_source, Some(EnergySource::IntegratedPower));
    assert_eq!(s.power_peak_w, Some(700.0));
    assert_eq!(s.power_mean_w, Some(500.0));
}

#[test]
fn a_counter_reset_is_skipped_not_subtracted() {
    let g = info(0, "GPU-a");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    for (k, e) in [5_000_000u64, 5_100_000, 20_000, 70_000]
        .into_iter()
        .enumerate()
    {
        let s = sample(&g, None, None, None, None, Some(e), None, None);
        acc.add(&c.snap(k as u64 + 1, k as f64, vec![s]));
    }
    let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
    assert_eq!(s.energy_j, Some(150.0));
    assert_eq!(s.energy_counter_resets, 1);
}

#[test]
fn missed_samples_are_errors_lost_gpus_and_queue_drops() {
    let a = info(0, "GPU-a");
    let b = info(1, "GPU-b");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_millis(100)));
    let ok = |i: &Arc<DeviceInfo>| sample(i, Some(10), None, None, None, None, None, None);
    acc.add(&c.snap(1, 0.0, vec![ok(&a), ok(&b)]));
    // Tick 2: GPU a answered nothing (every call failed), GPU b lost.
    acc.add(&c.snap(
        2,
        0.1,
        vec![
            DeviceSample::empty(a.clone(), DeviceState::Ok),
            DeviceSample::empty(b.clone(), DeviceState::Lost),
        ],
    ));
    // Ticks 3 and 4 dropped by the queue.
    acc.add(&c.snap(5, 0.4, vec![ok(&a), ok(&b)]));
    let r = acc.report(BTreeMap::new());
    assert_eq!((r.ticks, r.ticks_dropped), (3, 2));
    for g in &r.gpus {
        assert_eq!(
            (g.summary.samples_taken, g.summary.samples_missed),
            (2, 3),
            "{}",
            g.uuid
        );
    }
    assert_eq!((r.pod.samples_taken, r.pod.samples_missed), (4, 6));
    // GPU b was lost at tick 2 (0.1 s in): counted and said; a was not.
    let lost: Vec<(u64, Option<f64>)> = r
        .gpus
        .iter()
        .map(|g| (g.summary.samples_lost, g.summary.lost_at_s))
        .collect();
    assert_eq!(lost[0], (0, None));
    assert_eq!(lost[1].0, 1);
    assert!(approx(lost[1].1.unwrap(), 0.1, 1e-9), "{lost:?}");
    assert_eq!(r.pod.samples_lost, 1);
    assert!(r
        .notes
        .iter()
        .any(|n| n.starts_with("GPU-b") && n.contains("was lost")));
}

/// A GPU lost before its first GPM window says so, not "needs Hopper"; one that NVML says has
/// no GPM says that; a run shorter than a GPM window says that; each note once.
#[test]
fn gpm_notes_say_what_happened() {
    let timing = crate::sampling::Timing::every(Duration::from_secs(1));
    let window = timing.slow_intervals.gpm + timing.export_interval;
    let with = |uuid: &str, gpm: Option<bool>| {
        let mut i = (*info(0, uuid)).clone();
        i.gpm_supported = gpm;
        Arc::new(i)
    };
    let (lost, none, short) = (
        with("GPU-lost", Some(true)),
        with("GPU-old", Some(false)),
        with("GPU-short", Some(true)),
    );
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&timing);
    let ok = |i: &Arc<DeviceInfo>| sample(i, Some(90), None, None, None, None, None, None);
    let ticks = 3;
    for k in 0..ticks {
        let l = if k == 0 {
            ok(&lost)
        } else {
            DeviceSample::empty(lost.clone(), DeviceState::Lost)
        };
        acc.add(&c.snap(k + 1, k as f64, vec![l, ok(&none), ok(&short)]));
    }
    assert!(Duration::from_secs(ticks) < window, "{window:?}");
    let r = acc.report(BTreeMap::new());
    let gpm: Vec<&String> = r.notes.iter().filter(|n| n.contains("GPM")).collect();
    assert_eq!(gpm.len(), 3, "{:?}", r.notes);
    assert!(
        gpm[0].starts_with("GPU-lost")
            && gpm[0].contains("lost 1 s into the run, before its first GPM window"),
        "{}",
        gpm[0]
    );
    assert!(!gpm[0].contains("Hopper"), "{}", gpm[0]);
    assert!(
        gpm[1].starts_with("GPU-old") && gpm[1].contains("GPM is not supported"),
        "{}",
        gpm[1]
    );
    assert!(
        gpm[2].starts_with("GPU-short")
            && gpm[2].contains("the run ended 2 s after its first sample"),
        "{}",
        gpm[2]
    );
    let mut unique = r.notes.clone();
    unique.dedup();
    assert_eq!(unique, r.notes);
}

#[test]
fn held_back_categories_count_each_moment_once() {
    let g = info(0, "GPU-a");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    // 1 s power cap, 1 s both thermal bits, 1 s hw slowdown + power brake, 1 s idle.
    let masks = [0x4u64, 0x20 | 0x40, 0x8 | 0x80, 0x1, 0x0];
    for (k, m) in masks.into_iter().enumerate() {
        let s = sample(&g, None, None, None, None, None, None, Some(m));
        acc.add(&c.snap(k as u64 + 1, k as f64, vec![s]));
    }
    let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
    assert_eq!(s.power_capped_s, Some(1.0));
    assert_eq!(s.thermal_slowdown_s, Some(1.0));
    assert_eq!(s.hw_slowdown_s, Some(1.0));
    let expect: BTreeMap<&str, f64> = [
        ("sw_power_cap", 1.0),
        ("sw_thermal_slowdown", 1.0),
        ("hw_thermal_slowdown", 1.0),
        ("hw_slowdown", 1.0),
        ("hw_power_brake_slowdown", 1.0),
        ("gpu_idle", 1.0),
    ]
    .into();
    assert_eq!(s.clocks_event_s, expect);
    assert_eq!(s.wall_time_s, 4.0);
}

#[test]
fn held_back_reasons_are_named_in_the_sampling_table() {
    for (category, reasons) in HELD_BACK {
        for r in reasons {
            assert_ne!(bit(r), 0, "{category}: {r} not in CLOCKS_EVENT_REASONS");
        }
    }
}

#[test]
fn a_hold_lasts_at_most_two_intervals() {
    let g = info(0, "GPU-a");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    for (k, t) in [0.0, 1.0, 11.0].into_iter().enumerate() {
        let s = sample(&g, Some(100), None, None, None, None, None, Some(0x4));
        acc.add(&c.snap(k as u64 + 1, t, vec![s]));
    }
    let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
    assert_eq!(s.wall_time_s, 11.0);
    assert_eq!(s.busy_gpu_s, Some(3.0), "1 s + a 10 s gap capped at 2 s");
    assert_eq!(s.power_capped_s, Some(3.0));
}

#[test]
fn utilization_mean_p95_busy_and_memory() {
    let g = info(0, "GPU-a");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    // 20 samples: utilization 0, 5, 10, …, 95 %; memory used grows 1 GiB per sample.
    let gib = 1u64 << 30;
    for k in 0..20u64 {
        let s = sample(
            &g,
            Some(k as u32 * 5),
            Some((k + 1) * gib),
            Some(80 * gib),
            None,
            None,
            Some(40 + k as u32 % 3),
            None,
        );
        acc.add(&c.snap(k + 1, k as f64, vec![s]));
    }
    let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
    let values: Vec<f64> = (0..20).map(|k| k as f64 * 0.05).collect();
    let mean = values.iter().sum::<f64>() / 20.0;
    assert!(approx(s.utilization_mean.unwrap(), mean, 1e-12), "{s:?}");
    // Nearest rank: ceil(0.95 × 20) = 19th value = 90 %.
    assert_eq!(s.utilization_p95, Some(0.9));
    // Utilization 0 at t = 0 holds 1 s; the other 18 holds count; the last holds 0 s.
    assert_eq!(s.busy_gpu_s, Some(18.0));
    assert_eq!(s.memory_used_peak_bytes, Some(20 * gib));
    assert_eq!(s.memory_used_mean_bytes, Some(21 * gib / 2));
    assert_eq!(s.memory_total_bytes, Some(80 * gib));
    assert_eq!(s.memory_used_peak_ratio, Some(0.25));
    assert_eq!(s.temperature_gpu_peak_c, Some(42));
}

#[test]
fn absent_values_stay_null() {
    let g = info(0, "GPU-a");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    for k in 0..3u64 {
        let s = sample(&g, Some(50), None, None, None, None, None, None);
        acc.add(&c.snap(k + 1, k as f64, vec![s]));
    }
    let r = acc.report(BTreeMap::new());
    let v: serde_json::Value = serde_json::from_str(&r.to_json_line()).unwrap();
    for gpu_or_pod in [&v["gpus"][0], &v["pod"]] {
        for key in [
            "energy_j",
            "energy_source",
            "power_mean_w",
            "power_peak_w",
            "temperature_gpu_peak_c",
            "memory_used_peak_bytes",
            "power_capped_s",
        ] {
            assert!(gpu_or_pod[key].is_null(), "{key} in {gpu_or_pod}");
        }
        assert_eq!(gpu_or_pod["busy_gpu_s"], 2.0);
    }
    assert_eq!(v["event.name"], EVENT_NAME);
    let attrs = r.attributes();
    assert!(attrs.iter().all(|kv| kv.key.as_str() != "gpu.run.energy_j"));
    assert!(attrs
        .iter()
        .any(|kv| kv.key.as_str() == "gpu.run.busy_gpu_s"
            && kv.value == opentelemetry::Value::F64(2.0)));
}

#[test]
fn pod_sums_gpus_and_leaves_mig_instances_out_of_memory_power_energy() {
    let a = info(0, "GPU-a");
    let b = info(1, "GPU-b");
    let m = info(1, "MIG-b1");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    for k in 0..3u64 {
        let e = 1_000_000 + k * 100_000;
        acc.add(&c.snap(
            k + 1,
            k as f64,
            vec![
                sample(
                    &a,
                    Some(100),
                    Some(10),
                    Some(100),
                    Some(300_000),
                    Some(e),
                    Some(50),
                    Some(4),
                ),
                sample(
                    &b,
                    Some(0),
                    Some(20),
                    Some(100),
                    Some(100_000),
                    Some(e),
                    Some(60),
                    Some(0),
                ),
                sample(&m, Some(80), Some(15), Some(50), None, None, None, None),
            ],
        ));
    }
    let r = acc.report(BTreeMap::new());
    assert_eq!(r.gpus.len(), 3);
    let p = &r.pod;
    assert_eq!(p.energy_j, Some(400.0));
    assert_eq!(p.power_mean_w, Some(400.0));
    assert_eq!(p.power_peak_w, Some(400.0));
    assert_eq!(p.memory_used_peak_bytes, Some(30));
    assert_eq!(p.memory_total_bytes, Some(200));
    assert_eq!(p.memory_used_peak_ratio, Some(0.15));
    assert_eq!(p.temperature_gpu_peak_c, Some(60));
    // GPU a busy 2 s, b idle, MIG instance busy 2 s.
    assert_eq!(p.busy_gpu_s, Some(4.0));
    assert_eq!(p.power_capped_s, Some(2.0));
    assert_eq!(p.utilization_mean, Some(0.6));
    assert_eq!(p.wall_time_s, 2.0);
}

fn mig_info(index: u32, uuid: &str, parent: &str, gi: u32) -> Arc<DeviceInfo> {
    Arc::new(DeviceInfo {
        index,
        uuid: uuid.into(),
        name: Some("NVIDIA H200 MIG 3g.71gb".into()),
        mig: Some(crate::sampling::MigPlacement {
            parent_uuid: parent.into(),
            mig_index: gi,
            gpu_instance_id: Some(gi),
            compute_instance_id: Some(0),
        }),
        ..DeviceInfo::default()
    })
}

#[test]
fn a_pod_holding_only_mig_devices_gets_their_memory_not_the_gpus_power() {
    // Two MIG devices of GPU-p, which this pod does not hold (another tenant has the rest).
    let m1 = mig_info(0, "MIG-1", "GPU-p", 1);
    let m2 = mig_info(0, "MIG-2", "GPU-p", 2);
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    for k in 0..3u64 {
        acc.add(&c.snap(
            k + 1,
            k as f64,
            vec![
                sample(&m1, None, Some(10 + k), Some(70), None, None, None, None),
                sample(&m2, None, Some(5), Some(30), None, None, None, None),
            ],
        ));
    }
    let p = acc.report(BTreeMap::new()).pod;
    assert_eq!(p.memory_used_peak_bytes, Some(17));
    assert_eq!(p.memory_used_mean_bytes, Some(16));
    assert_eq!(p.memory_total_bytes, Some(100));
    assert_eq!(p.memory_used_peak_ratio, Some(0.17));
    assert_eq!(
        (p.power_mean_w, p.energy_j),
        (None, None),
        "the GPU's power is not this pod's"
    );
    assert_eq!(p.samples_taken, 6);
}

#[test]
fn pod_memory_covers_the_same_gpus_as_its_total_or_is_absent() {
    let a = info(0, "GPU-a");
    let b = info(1, "GPU-b");
    let c = Clock::new();
    // GPU b does not answer memory at tick 2, while GPU a peaks there: a sum over GPU a
    // alone is not the pod's.
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    for (k, (ua, ub)) in [(10, Some(10)), (40, None), (10, Some(10))]
        .into_iter()
        .enumerate()
    {
        acc.add(&c.snap(
            k as u64 + 1,
            k as f64,
            vec![
                sample(&a, Some(50), Some(ua), Some(100), None, None, None, None),
                sample(&b, Some(50), ub, Some(100), None, None, None, None),
            ],
        ));
    }
    let p = acc.report(BTreeMap::new()).pod;
    assert_eq!(p.memory_used_peak_bytes, Some(20));
    assert_eq!(p.memory_used_mean_bytes, Some(20));
    assert_eq!(p.memory_total_bytes, Some(200));
    assert_eq!(p.memory_used_peak_ratio, Some(0.1));
    // GPU b never answers memory: the pod's figures are absent, not GPU a's alone.
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    for k in 0..3u64 {
        acc.add(&c.snap(
            k + 1,
            k as f64,
            vec![
                sample(&a, Some(50), Some(30), Some(100), None, None, None, None),
                sample(&b, Some(50), None, None, None, None, None, None),
            ],
        ));
    }
    let r = acc.report(BTreeMap::new());
    let p = &r.pod;
    assert_eq!(
        (
            p.memory_used_peak_bytes,
            p.memory_used_mean_bytes,
            p.memory_total_bytes,
            p.memory_used_peak_ratio
        ),
        (None, None, None, None)
    );
    // GPU a's own summary still has its memory.
    assert_eq!(r.gpus[0].summary.memory_used_peak_bytes, Some(30));
}

#[test]
fn xids_are_counted_by_code_per_gpu_and_for_the_pod() {
    let a = info(0, "GPU-a");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_secs(1)));
    acc.add(&c.snap(
        1,
        0.0,
        vec![sample(&a, Some(1), None, None, None, None, None, None)],
    ));
    acc.record_xid("GPU-a", 79);
    acc.record_xid("GPU-a", 13);
    acc.record_xid("GPU-a", 13);
    acc.record_xid("GPU-gone", 48);
    let r = acc.report(BTreeMap::new());
    let expect: BTreeMap<String, u64> = [("13".into(), 2), ("79".into(), 1)].into();
    assert_eq!(r.gpus[0].summary.xid_count, expect);
    let pod: BTreeMap<String, u64> = [("13".into(), 2), ("48".into(), 1), ("79".into(), 1)].into();
    assert_eq!(r.pod.xid_count, pod);
}

/// The real H200 recording fed straight into the accumulator, checked against numbers
/// computed here from the same rows.
#[test]
fn the_h200_recording_summarised() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/nvml-h200/series-under-load.jsonl");
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let g = info(0, "GPU-h200");
    let c = Clock::new();
    let mut acc = RunAccumulator::new(&crate::sampling::Timing::every(Duration::from_millis(250)));
    let num = |r: &serde_json::Value, k: &str| r[k].as_u64().unwrap();
    for (k, r) in rows.iter().enumerate() {
        let s = sample(
            &g,
            Some(r["util"][0].as_u64().unwrap() as u32),
            Some(r["mem"][1].as_u64().unwrap()),
            Some(r["mem"][0].as_u64().unwrap()),
            Some(num(r, "power_mw") as u32),
            Some(num(r, "energy_mj")),
            Some(num(r, "temp") as u32),
            Some(num(r, "throttle")),
        );
        acc.add(&c.snap(k as u64 + 1, r["t"].as_f64().unwrap(), vec![s]));
    }
    let s = acc.report(BTreeMap::new()).gpus[0].summary.clone();
    let n = rows.len() as f64;
    let first = &rows[0];
    let last = rows.last().unwrap();
    let span = last["t"].as_f64().unwrap() - first["t"].as_f64().unwrap();
    let energy = (num(last, "energy_mj") - num(first, "energy_mj")) as f64 / 1000.0;
    assert_eq!(s.energy_j, Some(energy));
    assert!(approx(energy, 20_666.438, 1e-9));
    assert_eq!(s.samples_taken, rows.len() as u64);
    assert!(approx(s.wall_time_s, span, 1e-3));
    let util_mean = rows
        .iter()
        .map(|r| r["util"][0].as_f64().unwrap())
        .sum::<f64>()
        / n
        / 100.0;
    assert!(approx(s.utilization_mean.unwrap(), util_mean, 1e-4));
    assert!(approx(util_mean, 0.99, 0.01));
    let mut utils: Vec<u64> = rows
        .iter()
        .map(|r| r["util"][0].as_u64().unwrap())
        .collect();
    utils.sort_unstable();
    let p95 = utils[(0.95 * n).ceil() as usize - 1] as f64 / 100.0;
    assert_eq!(s.utilization_p95, Some(p95));
    let peak_temp = rows.iter().map(|r| num(r, "temp")).max().unwrap();
    assert_eq!(s.temperature_gpu_peak_c, Some(peak_temp as u32));
    assert!((59..=60).contains(&peak_temp));
    let mean_w = rows.iter().map(|r| num(r, "power_mw") as f64).sum::<f64>() / n / 1000.0;
    assert!(approx(s.power_mean_w.unwrap(), mean_w, 1e-3));
    // Every row reads 4 (SW power cap): held back for the whole span.
    assert!(rows.iter().all(|r| num(r, "throttle") == 4));
    assert!(approx(s.power_capped_s.unwrap(), span, 1e-3));
    assert_eq!(s.thermal_slowdown_s, Some(0.0));
    let busy = rows.iter().all(|r| r["util"][0].as_u64().unwrap() > 0);
    assert!(busy && approx(s.busy_gpu_s.unwrap(), span, 1e-3));
    // The counter and the integrated power agree to within 1 % over the recording.
    let integrated: f64 = rows
        .windows(2)
        .map(|w| {
            num(&w[0], "power_mw") as f64 / 1000.0
                * (w[1]["t"].as_f64().unwrap() - w[0]["t"].as_f64().unwrap())
        })
        .sum();
    assert!(
        (energy / integrated - 1.0).abs() < 0.01,
        "{energy} vs {integrated}"
    );
}
