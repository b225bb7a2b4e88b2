//! The profiling rules (`tensor_cores_idle`, `memory_bound`) and the preallocation
//! recognition (`memory_preallocated`, `memory_near_full` held back) on synthetic
//! snapshots with explicit times.

use opentelemetry::Value;

use super::alert::AlertState;
use super::catalogue::RuleId;
use super::engine::Engine;
use super::tests::{busy, config, f64_of, replay, summary, value, Clock, GIB, TOTAL};
use crate::sampling::{DeviceSample, GpmMetrics, ProcessSample};

/// A GPM window of `window` seconds with these percentages.
fn gpm(window: f64, sm: f64, tensor: f64, fp32: f64, dram: f64) -> GpmMetrics {
    GpmMetrics {
        window_seconds: window,
        graphics_util: Some(99.0),
        sm_util: Some(sm),
        sm_occupancy: Some(30.0),
        any_tensor_util: Some(tensor),
        hmma_tensor_util: Some(tensor),
        dram_bw_util: Some(dram),
        fp32_util: Some(fp32),
        ..GpmMetrics::default()
    }
}

/// The H200 under two bf16 jobs: SM 88 %, tensor 82 %, DRAM 17 %.
fn bf16(window: f64) -> GpmMetrics {
    gpm(window, 88.0, 82.0, 3.0, 17.0)
}

/// An fp32 matmul job: SM 90 %, no tensor math, FP32 pipe 62 %.
fn fp32(window: f64) -> GpmMetrics {
    gpm(window, 90.0, 0.0, 62.0, 20.0)
}

/// A copy loop: DRAM 92 % of peak, SM 22 %.
fn copy_loop(window: f64) -> GpmMetrics {
    gpm(window, 22.0, 0.0, 1.0, 92.0)
}

/// How the sampler hands GPM windows to consumers: read every `every` seconds (the first
/// read makes no window), and between reads either the last window again (`carried`, as
/// the sampler does today) or none (as a sampler that exports slow groups only on the tick
/// that read them does).
fn with_gpm(
    mut d: DeviceSample,
    t: f64,
    every: f64,
    carried: bool,
    f: impl Fn(f64) -> GpmMetrics,
) -> DeviceSample {
    let read_tick = (t / every).round() * every == t;
    let last_read = (t / every).floor() * every;
    d.gpm = if last_read < every {
        None
    } else if read_tick || carried {
        // A window ends at each read; its window_seconds is measured, so two windows are
        // never equal (here: the read time is folded into it).
        let mut g = f(last_read);
        g.window_seconds = every + last_read * 1e-9;
        Some(g)
    } else {
        None
    };
    d
}

#[test]
fn tensor_cores_idle_fires_once_on_fp32_and_resolves_after_the_switch_to_bf16() {
    for carried in [true, false] {
        let mut engine = Engine::new(&config(&[]));
        // 1 s samples at 98 % busy, GPM every 10 s: fp32 until 600 s, then bf16.
        let alerts = replay(&mut engine, 1.0, 1200.0, |t| {
            let mut d = busy(0);
            d.utilization_gpu_percent = Some(98);
            vec![with_gpm(d, t, 10.0, carried, |end| {
                if end <= 600.0 {
                    fp32(10.0)
                } else {
                    bf16(10.0)
                }
            })]
        });
        let s = summary(&alerts);
        assert_eq!(s.len(), 2, "carried {carried}: {s:?}");
        let (fired_at, a) = (&alerts[0].0, &alerts[0].1);
        assert_eq!(
            (a.rule, a.state),
            (RuleId::TensorCoresIdle, AlertState::Firing)
        );
        // The first window ends at 10 s (the first read, at 0 s, starts it): 5 minutes
        // later.
        assert_eq!(*fired_at, 310.0, "carried {carried}");
        assert_eq!(f64_of(value(a, "hw.gpu.utilization")), 0.98);
        assert_eq!(f64_of(value(a, "nvidia.gpu.tensor.activity")), 0.0);
        assert_eq!(f64_of(value(a, "nvidia.gpu.sm.activity")), 0.9);
        assert_eq!(f64_of(value(a, "nvidia.gpu.pipe.activity.fp32")), 0.62);
        assert_eq!(a.threshold, Some(10.0));
        assert!(
            a.summary
                .contains("the GPU is busy (98% of the time) but its tensor cores are not"),
            "{}",
            a.summary
        );
        assert!(a.summary.contains("fp32 matmuls"), "{}", a.summary);
        // The first bf16 window ends at 610 s; clear for 5 minutes.
        let (resolved_at, r) = (&alerts[1].0, &alerts[1].1);
        assert_eq!(r.state, AlertState::Resolved);
        assert_eq!(*resolved_at, 910.0, "carried {carried}");
        assert_eq!(f64_of(value(r, "nvidia.gpu.tensor.activity")), 0.82);
    }
}

#[test]
fn bf16_a_gpu_without_gpm_and_a_half_busy_gpu_raise_nothing() {
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 1.0, 900.0, |t| {
        let mut no_gpm = busy(1);
        no_gpm.utilization_gpu_percent = Some(99);
        let mut half = busy(2);
        half.utilization_gpu_percent = Some(60);
        vec![
            with_gpm(busy(0), t, 10.0, true, |_| bf16(10.0)),
            no_gpm,
            with_gpm(half, t, 10.0, true, |_| fp32(10.0)),
        ]
    });
    assert!(alerts.is_empty(), "{:?}", summary(&alerts));
}

#[test]
fn gpm_windows_that_stop_coming_end_the_judgement() {
    let mut engine = Engine::new(&config(&[]));
    // fp32 windows until 200 s, then GPM fails (no window) for the rest: never 5 minutes.
    let alerts = replay(&mut engine, 1.0, 900.0, |t| {
        let d = busy(0);
        if t <= 200.0 {
            vec![with_gpm(d, t, 10.0, false, |_| fp32(10.0))]
        } else {
            vec![d]
        }
    });
    assert!(alerts.is_empty(), "{:?}", summary(&alerts));
    // A firing alert is not resolved by the lapse: it waits for a window that says so.
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 1.0, 1500.0, |t| {
        let d = busy(0);
        if t <= 500.0 {
            vec![with_gpm(d, t, 10.0, false, |_| fp32(10.0))]
        } else {
            vec![d]
        }
    });
    assert_eq!(
        summary(&alerts),
        vec![(310.0, RuleId::TensorCoresIdle, AlertState::Firing)]
    );
}

#[test]
fn memory_bound_fires_for_a_copy_loop_instead_of_tensor_cores_idle() {
    let run = |vars: &[(&str, &str)]| {
        let mut engine = Engine::new(&config(vars));
        replay(&mut engine, 1.0, 1000.0, |t| {
            let mut d = busy(0);
            d.utilization_gpu_percent = Some(99);
            vec![with_gpm(d, t, 10.0, true, |end| {
                if end <= 600.0 {
                    copy_loop(10.0)
                } else {
                    bf16(10.0)
                }
            })]
        })
    };
    let alerts = run(&[]);
    assert_eq!(
        summary(&alerts),
        vec![
            (310.0, RuleId::MemoryBound, AlertState::Firing),
            (910.0, RuleId::MemoryBound, AlertState::Resolved),
        ]
    );
    let a = &alerts[0].1;
    assert_eq!(f64_of(value(a, "nvidia.gpu.dram.activity")), 0.92);
    assert_eq!(f64_of(value(a, "nvidia.gpu.sm.activity")), 0.22);
    assert_eq!(f64_of(value(a, "hw.gpu.utilization")), 0.99);
    assert_eq!(a.threshold, Some(80.0));
    assert!(
        a.summary
            .contains("DRAM bandwidth at 92% of its peak while SM activity is 22%"),
        "{}",
        a.summary
    );
    // With memory_bound off, the copy loop is busy work without tensor math.
    let alerts = run(&[("GPU_SIDECAR_RULE_MEMORY_BOUND_ENABLED", "false")]);
    assert_eq!(
        summary(&alerts),
        vec![
            (310.0, RuleId::TensorCoresIdle, AlertState::Firing),
            (910.0, RuleId::TensorCoresIdle, AlertState::Resolved),
        ]
    );
    // Thresholds are settings.
    let alerts = run(&[
        ("GPU_SIDECAR_RULE_MEMORY_BOUND_SM_ACTIVITY", "20"),
        ("GPU_SIDECAR_RULE_TENSOR_CORES_IDLE_ENABLED", "false"),
    ]);
    assert!(alerts.is_empty(), "{:?}", summary(&alerts));
}

/// A TensorFlow-style job on GPU 0, sampled every 5 s: no process until 10 s, then its
/// process with its context (0.5 GiB), 97 % of the memory from 12 s (seen at 15 s), flat,
/// gone at `exit`. `after(t)` may change the memory once the pool is taken.
fn tensorflow(t: f64, exit: f64, after: impl Fn(f64) -> Option<u64>) -> DeviceSample {
    let mut d = busy(0);
    let (used, process) = if t < 10.0 || t >= exit {
        (GIB / 4, false)
    } else if t < 12.0 {
        (GIB / 2, true)
    } else {
        (after(t).unwrap_or(TOTAL / 100 * 97), true)
    };
    d.memory_used_bytes = Some(used);
    d.processes = Some(if process {
        vec![ProcessSample {
            pid: 7300,
            used_memory_bytes: Some(used),
            ..Default::default()
        }]
    } else {
        Vec::new()
    });
    d
}

#[test]
fn a_preallocated_pool_is_one_info_event_and_no_memory_near_full() {
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 5.0, 900.0, |t| {
        vec![tensorflow(t, 640.0, |_| None)]
    });
    // Seen at 15 s; flat for a minute; released when the process exits.
    assert_eq!(
        summary(&alerts),
        vec![
            (75.0, RuleId::MemoryPreallocated, AlertState::Firing),
            (640.0, RuleId::MemoryPreallocated, AlertState::Resolved),
        ]
    );
    let a = &alerts[0].1;
    assert_eq!(value(a, "process.pid"), &Value::I64(7300));
    assert_eq!(f64_of(value(a, "nvidia.gpu.alert.memory.jump_time")), 5.0);
    assert!((f64_of(value(a, "hw.gpu.memory.utilization")) - 0.97).abs() < 1e-6);
    assert_eq!(a.threshold, Some(70.0));
    assert!(
        a.summary.contains("memory preallocated: 97.0%"),
        "{}",
        a.summary
    );
    assert!(a.summary.contains("not how full it is"), "{}", a.summary);
    assert!(
        alerts[1].1.summary.contains("was released"),
        "{}",
        alerts[1].1.summary
    );
    // The old judgement, with the recognition off: memory_near_full 10 s after the jump.
    let mut engine = Engine::new(&config(&[(
        "GPU_SIDECAR_RULE_MEMORY_PREALLOCATED_ENABLED",
        "false",
    )]));
    let alerts = replay(&mut engine, 5.0, 300.0, |t| {
        vec![tensorflow(t, 640.0, |_| None)]
    });
    assert_eq!(
        summary(&alerts),
        vec![(25.0, RuleId::MemoryNearFull, AlertState::Firing)]
    );
}

#[test]
fn memory_that_grows_past_the_pool_is_judged_again() {
    // A 75 % pool that grows to 97 % from 200 s (a framework allowed to grow).
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 5.0, 400.0, |t| {
        vec![tensorflow(t, 10_000.0, |t| {
            Some(if t < 200.0 {
                TOTAL / 4 * 3
            } else {
                TOTAL / 100 * 97
            })
        })]
    });
    assert_eq!(
        summary(&alerts),
        vec![
            (75.0, RuleId::MemoryPreallocated, AlertState::Firing),
            (200.0, RuleId::MemoryPreallocated, AlertState::Resolved),
            (210.0, RuleId::MemoryNearFull, AlertState::Firing),
        ]
    );
    assert!(
        alerts[1].1.summary.contains("grew past the pool"),
        "{}",
        alerts[1].1.summary
    );
}

#[test]
fn growing_memory_and_processes_joining_a_full_gpu_are_not_pools() {
    // Growing from 10 GiB by 10 GiB a minute to 96 %: memory_near_full as always.
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 5.0, 600.0, |t| {
        let mut d = busy(0);
        let used = (10.0 * GIB as f64 + 10.0 * GIB as f64 * t / 60.0).min(0.96 * TOTAL as f64);
        d.memory_used_bytes = Some(used as u64);
        vec![d]
    });
    let s = summary(&alerts);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(
        (s[0].1, s[0].2),
        (RuleId::MemoryNearFull, AlertState::Firing)
    );
    // 95 % of 80 GiB is reached at 396 s (seen at 400 s); 10 s later.
    assert_eq!(s[0].0, 410.0);
    // A second process joining a GPU already 96 % full is not a pool being taken.
    let mut engine = Engine::new(&config(&[]));
    let alerts = replay(&mut engine, 5.0, 120.0, |t| {
        let mut d = busy(0);
        d.memory_used_bytes = Some(TOTAL / 100 * 96);
        if t >= 30.0 {
            if let Some(ps) = &mut d.processes {
                ps.push(ProcessSample {
                    pid: 4444,
                    used_memory_bytes: Some(GIB / 2),
                    ..Default::default()
                });
            }
        }
        vec![d]
    });
    assert_eq!(
        summary(&alerts),
        vec![(10.0, RuleId::MemoryNearFull, AlertState::Firing)]
    );
    // A process that was already there when the agent started: when it appeared is not
    // known, so its memory is judged as memory.
    let mut clock = Clock::new();
    let mut engine = Engine::new(&config(&[]));
    let mut fired = Vec::new();
    for k in 0..=10 {
        fired.extend(
            engine.observe(&clock.at(k as f64 * 5.0, vec![tensorflow(15.0, 640.0, |_| None)])),
        );
    }
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].rule, RuleId::MemoryNearFull);
}
