//! The benchmark scenarios (`tests/scenarios/bench-8gpu*.json`) and the entry point the
//! benches drive, `sampling::with_session`: the files are what their generator writes, the
//! mock loads them, and one sample through the real NVML code path gives the scenario's
//! values for every GPU.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use common::{mock_library, scenario, workspace_root};
use gpu_otel_sidecar::config::{DeviceId, DeviceSelection};
use gpu_otel_sidecar::sampling::{self, DeviceSample, SamplerSettings};

/// The mock reads its variables in a copy's first init: one init at a time.
static INIT: Mutex<()> = Mutex::new(());

/// One sample of `selection` from a fresh copy of the mock replaying `name` at t = 0.
fn sample_once(name: &str, selection: DeviceSelection) -> Vec<DeviceSample> {
    let _guard = INIT.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::scratch_dir();
    // A new file each time: overwriting a loaded library (the mock is never unloaded) crashes.
    static COPIES: AtomicUsize = AtomicUsize::new(0);
    let n = COPIES.fetch_add(1, Ordering::Relaxed);
    let lib: PathBuf = dir.join(format!("{name}-{n}.so"));
    std::fs::copy(mock_library(), &lib).unwrap();
    std::env::set_var("NVML_MOCK_SCENARIO", scenario(&format!("{name}.json")));
    std::env::set_var("NVML_MOCK_TIME_SCALE", "0");
    std::env::set_var("NVML_MOCK_NO_LATENCY", "1");
    let settings = SamplerSettings {
        // The default cadence of the slow groups: a tick costs what it costs in a run.
        timing: gpu_otel_sidecar::sampling::Timing::every(std::time::Duration::from_secs(1)),
        nvml_library: lib,
        devices: selection,
        library_advice: Default::default(),
        proc_root: "/proc".into(),
        mps_clients: false,
    };
    let samples = sampling::with_session(&settings, |sample| sample());
    // The copy has read them; gone before the lock is released (other tests share this
    // process, and the programs they start must not inherit the mock's settings).
    for key in [
        "NVML_MOCK_SCENARIO",
        "NVML_MOCK_TIME_SCALE",
        "NVML_MOCK_NO_LATENCY",
    ] {
        std::env::remove_var(key);
    }
    let samples = samples.expect("init through the mock");
    // Mapped until the process ends; the file can go now.
    let _ = std::fs::remove_file(&settings.nvml_library);
    samples
}

const BUS_IDS: [&str; 8] = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"];

#[test]
fn eight_h200s_answer_the_first_recorded_row() {
    let samples = sample_once("bench-8gpu", DeviceSelection::All);
    assert_eq!(samples.len(), 8);
    for (i, s) in samples.iter().enumerate() {
        let i32 = i as u32;
        assert_eq!(s.info.index, i32);
        assert_eq!(
            s.info.uuid,
            format!("GPU-0c1d2e3f-4a5b-4c6d-8e7f-{i:012x}"),
            "GPU {i}"
        );
        assert_eq!(s.info.name.as_deref(), Some("NVIDIA H200"));
        assert_eq!(
            s.info.pci_bus_id.as_deref(),
            Some(format!("00000000:{}:00.0", BUS_IDS[i]).as_str())
        );
        // h200-under-load.json's first row (the recording at t = 0).
        assert_eq!(s.utilization_gpu_percent, Some(99));
        assert_eq!(s.utilization_memory_controller_percent, Some(24));
        assert_eq!(s.power_milliwatts, Some(690_599));
        assert_eq!(s.power_limit_milliwatts, Some(700_000));
        assert_eq!(s.temperature_gpu_celsius, Some(58));
        assert_eq!(s.temperature_memory_celsius, Some(49));
        assert_eq!(s.clock_sm_mhz, Some(1455));
        assert_eq!(s.clock_memory_mhz, Some(3201));
        assert_eq!(s.clocks_event_reasons, Some(4));
        assert_eq!(s.memory_total_bytes, Some(150_754_820_096));
        // v2 used = recorded used (1839071232) - reserved (644939776).
        assert_eq!(s.memory_used_bytes, Some(1_194_131_456));
        assert_eq!(s.memory_reserved_bytes, Some(644_939_776));
        assert_eq!(s.energy_millijoules, Some(7_749_089 + 1_000_000 * i as u64));
        let procs = s.processes.as_ref().expect("process list");
        assert_eq!(procs.len(), 1);
        assert_eq!(procs[0].pid, 10_000 + i32);
        assert_eq!(procs[0].used_memory_bytes, Some(1_184_890_880));
    }
}

#[test]
fn one_device_selection_samples_gpu_0_only() {
    let samples = sample_once(
        "bench-8gpu",
        DeviceSelection::List(vec![DeviceId::Index(0)]),
    );
    assert_eq!(samples.len(), 1);
    assert_eq!(
        samples[0].info.uuid,
        "GPU-0c1d2e3f-4a5b-4c6d-8e7f-000000000000"
    );
}

#[test]
fn mig_scenario_gpus_are_in_mig_mode_with_seven_instances_processes() {
    let samples = sample_once("bench-8gpu-mig7", DeviceSelection::All);
    let gpus: Vec<_> = samples
        .iter()
        .filter(|s| s.info.uuid.starts_with("GPU-"))
        .collect();
    assert_eq!(gpus.len(), 8);
    // The 8 GPUs and their 7 MIG devices each.
    assert_eq!(samples.len(), 64, "{} devices", samples.len());
    for (i, g) in gpus.iter().enumerate() {
        // Utilization rates answer NOT_SUPPORTED in MIG mode: absent, not 0.
        assert_eq!(g.utilization_gpu_percent, None, "GPU {i}");
        assert_eq!(g.power_milliwatts, Some(690_599));
        // A GPU in MIG mode reports its processes on its MIG devices, not itself.
        assert_eq!(g.processes, None, "GPU {i}");
        let instances: Vec<_> = samples
            .iter()
            .filter(|s| {
                s.info
                    .mig
                    .as_ref()
                    .is_some_and(|m| m.parent_uuid == g.info.uuid)
            })
            .collect();
        assert_eq!(instances.len(), 7, "GPU {i}");
        let mut pids: Vec<u32> = instances
            .iter()
            .flat_map(|s| s.processes.iter().flatten().map(|p| p.pid))
            .collect();
        pids.sort_unstable();
        let want: Vec<u32> = (0..7).map(|k| 20_000 + 100 * i as u32 + k).collect();
        assert_eq!(pids, want, "GPU {i}");
    }
}

#[test]
fn scenario_files_are_what_the_generator_writes() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let status = Command::new("python3")
        .arg(workspace_root().join("scripts/make-bench-scenarios.py"))
        .arg(dir)
        .status()
        .expect("python3 runs");
    assert!(status.success());
    for name in ["bench-8gpu.json", "bench-8gpu-mig7.json"] {
        let fresh = common::read_text(dir.join(name));
        let committed = common::read_text(scenario(name));
        assert!(
            fresh == committed,
            "{name} differs from scripts/make-bench-scenarios.py's output: run it"
        );
    }
}
