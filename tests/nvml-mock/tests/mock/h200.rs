//! The H200 scenario answers through nvml-wrapper exactly what the real H200 answered
//! (tests/scenarios/h200-under-load.json, converted from tests/fixtures/nvml-h200).

use crate::common;

use std::time::{Duration, Instant};

use common::{frozen, scenario, Mock};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, TemperatureSensor,
};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;

const UUID: &str = "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5";

#[test]
fn h200_at_t0_matches_the_recording() {
    let (_m, nvml) = frozen("h200-under-load.json");

    assert_eq!(nvml.sys_driver_version().unwrap(), "580.159.04");
    assert_eq!(nvml.sys_nvml_version().unwrap(), "13.580.159.04");
    assert_eq!(nvml.sys_cuda_driver_version().unwrap(), 13000);
    assert_eq!(nvml.device_count().unwrap(), 1);

    let d = nvml.device_by_index(0).unwrap();
    // first row of series-under-load.jsonl
    assert_eq!(d.power_usage().unwrap(), 690599);
    assert_eq!(d.total_energy_consumption().unwrap(), 7749089);
    let u = d.utilization_rates().unwrap();
    assert_eq!((u.gpu, u.memory), (99, 24));
    assert_eq!(d.temperature(TemperatureSensor::Gpu).unwrap(), 58);
    assert_eq!(d.clock_info(Clock::SM).unwrap(), 1455);
    assert_eq!(d.clock_info(Clock::Graphics).unwrap(), 1455);
    assert_eq!(d.clock_info(Clock::Memory).unwrap(), 3201);
    assert_err!(d.clock_info(Clock::Video), NvmlError::NotSupported);
    // memory_info answers the recorded tuple exactly (used = series used - reserved)
    let mem = d.memory_info().unwrap();
    assert_eq!(
        (mem.total, mem.used, mem.free, mem.reserved, mem.version),
        (150754820096, 1194131456, 148915748864, 644939776, 33554472)
    );
    let procs = d.running_compute_processes().unwrap();
    let procs: Vec<(u32, u64)> = procs
        .iter()
        .map(|p| match p.used_gpu_memory {
            UsedGpuMemory::Used(b) => (p.pid, b),
            UsedGpuMemory::Unavailable => (p.pid, u64::MAX),
        })
        .collect();
    assert_eq!(procs, vec![(432, 1184890880)]);
    assert_eq!(
        d.running_compute_processes().unwrap()[0].gpu_instance_id,
        None
    );
    assert_eq!(d.running_compute_processes_count().unwrap(), 1);
    assert_eq!(d.running_graphics_processes_count().unwrap(), 0);
    assert!(d.running_graphics_processes().unwrap().is_empty());

    let fields = d.field_values_for(&[FieldId(82), FieldId(1)]).unwrap();
    let temp = fields[0].as_ref().unwrap();
    assert_eq!(temp.field, FieldId(82));
    assert_eq!(temp.value.as_ref().unwrap(), &SampleValue::U32(49));
    assert!(temp.timestamp > 0);
    let other = fields[1].as_ref().unwrap();
    assert_err!(other.value.as_ref(), NvmlError::NotSupported);

    assert_err!(d.fan_speed(0), NvmlError::InvalidArg);
    assert!(d.is_in_persistent_mode().unwrap());

    // the recorded Debug strings of calls-under-load.json for time-independent answers
    let dbg = |s: String, want: &str| assert_eq!(s, want);
    dbg(format!("{:?}", d.name().unwrap()), "\"NVIDIA H200\"");
    dbg(format!("{:?}", d.uuid().unwrap()), &format!("{UUID:?}"));
    dbg(format!("{:?}", d.serial().unwrap()), "\"1650000000017\"");
    dbg(
        format!("{:?}", d.pci_info().unwrap()),
        "PciInfo { bus: 0, bus_id: \"00000000:00:06.0\", device: 6, domain: 0, pci_device_id: 590680286, pci_sub_system_id: Some(415174878) }",
    );
    dbg(format!("{:?}", d.minor_number().unwrap()), "0");
    dbg(format!("{:?}", d.enforced_power_limit().unwrap()), "700000");
    dbg(
        format!("{:?}", d.power_management_limit().unwrap()),
        "700000",
    );
    dbg(
        format!("{:?}", d.max_clock_info(Clock::SM).unwrap()),
        "1980",
    );
    dbg(
        format!("{:?}", d.mig_mode().unwrap()),
        "MigMode { current: 0, pending: 0 }",
    );
    dbg(format!("{:?}", d.performance_state().unwrap()), "Zero");
    dbg(
        format!("{:?}", d.current_throttle_reasons().unwrap()),
        "ThrottleReasons(SW_POWER_CAP)",
    );
    dbg(
        format!("{:?}", d.encoder_utilization().unwrap()),
        "UtilizationInfo { utilization: 0, sampling_period: 100000 }",
    );
    dbg(
        format!("{:?}", d.decoder_utilization().unwrap()),
        "UtilizationInfo { utilization: 0, sampling_period: 100000 }",
    );
    dbg(
        format!("{:?}", d.supported_event_types()),
        "Ok(EventTypes(SINGLE_BIT_ECC_ERROR | DOUBLE_BIT_ECC_ERROR | PSTATE_CHANGE | CRITICAL_XID_ERROR | CLOCK_CHANGE | POWER_SOURCE_CHANGE | MIG_CONFIG_CHANGE))",
    );
    dbg(format!("{:?}", d.gpm_support().unwrap()), "true");
    for (err, want) in [(MemoryError::Corrected, 0), (MemoryError::Uncorrected, 0)] {
        assert_eq!(d.total_ecc_errors(err, EccCounter::Volatile).unwrap(), want);
        assert_eq!(
            d.total_ecc_errors(err, EccCounter::Aggregate).unwrap(),
            want
        );
    }
    assert_eq!(format!("{:?}", d.brand().unwrap()), "Nvidia");
    assert_eq!(format!("{:?}", d.architecture().unwrap()), "Hopper");
    assert_eq!(d.vbios_version().unwrap(), "96.00.A5.00.1A");
    assert_eq!(d.index().unwrap(), 0);

    // lookups
    let by_uuid = nvml.device_by_uuid(UUID).unwrap();
    assert_eq!(by_uuid.index().unwrap(), 0);
    assert_err!(
        nvml.device_by_uuid("GPU-00000000-0000-0000-0000-000000000000"),
        NvmlError::NotFound
    );
    assert_eq!(
        nvml.device_by_pci_bus_id("00000000:00:06.0")
            .unwrap()
            .index()
            .unwrap(),
        0
    );
    assert_err!(nvml.device_by_index(1), NvmlError::InvalidArg);
}

#[test]
fn h200_slow_and_phase2_calls() {
    let m = Mock::new();
    let nvml = m
        .init(
            &scenario("h200-under-load.json"),
            &[("NVML_MOCK_TIME_SCALE", "0")],
        )
        .unwrap();
    let d = nvml.device_by_index(0).unwrap();

    // recorded latency: pcie_throughput blocks ~20 ms
    let t = Instant::now();
    assert_eq!(d.pcie_throughput(PcieUtilCounter::Send).unwrap(), 7575);
    assert!(t.elapsed() >= Duration::from_millis(20));
    assert_eq!(d.pcie_throughput(PcieUtilCounter::Receive).unwrap(), 15580);

    // process utilization: one sample per tick, NOT_FOUND once seen
    let s = d.process_utilization_stats(None).unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].pid, s[0].sm_util, s[0].mem_util), (432, 94, 22));
    assert_err!(
        d.process_utilization_stats(s[0].timestamp),
        NvmlError::NotFound
    );

    // GPM: two samples, metrics = the recorded values
    use nvml_wrapper::enums::gpm::GpmMetricId;
    let a = d.gpm_sample().unwrap();
    let b = d.gpm_sample().unwrap();
    let r = nvml_wrapper::gpm::gpm_metrics_get(
        &nvml,
        &a,
        &b,
        &[
            GpmMetricId::GraphicsUtil,
            GpmMetricId::SmOccupancy,
            GpmMetricId::PcieRxPerSec,
            GpmMetricId::IntegerUtil,
        ],
    )
    .unwrap();
    let gr = r[0].as_ref().unwrap();
    assert_eq!(gr.value, 99.1715282994206);
    assert_eq!(gr.metric_info.unit, "%");
    assert_eq!(r[1].as_ref().unwrap().value, 14.12299890150723);
    assert_eq!(r[2].as_ref().unwrap().value, 14.066004354539032);
    assert_err!(r[3].as_ref(), NvmlError::NotSupported);

    // MIG disabled: the mode answers, no MIG device exists
    assert_eq!(d.mig_device_count().unwrap(), 7);
    assert_err!(d.mig_device_by_index(0), NvmlError::NotFound);
    assert!(!d.mig_is_mig_device_handle().unwrap());

    // events: nothing scheduled -> Timeout after the wait
    let set = nvml.create_event_set().unwrap();
    let set = d
        .register_events(EventTypes::CRITICAL_XID_ERROR, set)
        .unwrap();
    let t = Instant::now();
    assert_err!(set.wait(50), NvmlError::Timeout);
    assert!(t.elapsed() >= Duration::from_millis(50));

    // raw calls nvml-wrapper does not wrap
    unsafe {
        let lib = nvml.lib();
        let h = d.handle();
        let (mut a, mut b, mut c, mut e) = (9u32, 9u32, 9u32, 9u32);
        assert_eq!(
            lib.nvmlDeviceGetRemappedRows(h, &mut a, &mut b, &mut c, &mut e),
            0
        );
        assert_eq!((a, b, c, e), (0, 0, 0, 0));
        // v1 memory info: used includes reserved
        let mut m1: nvml_wrapper_sys::bindings::nvmlMemory_t = std::mem::zeroed();
        assert_eq!(lib.nvmlDeviceGetMemoryInfo(h, &mut m1), 0);
        assert_eq!(
            (m1.total, m1.used, m1.free),
            (150754820096, 1839071232, 148915748864)
        );
        // v2 with a wrong version: NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        let mut m2: nvml_wrapper_sys::bindings::nvmlMemory_v2_t = std::mem::zeroed();
        m2.version = 1;
        assert_eq!(lib.nvmlDeviceGetMemoryInfo_v2(h, &mut m2), 25);
        let mut r = 0u64;
        assert_eq!(lib.nvmlDeviceGetCurrentClocksEventReasons(h, &mut r), 0);
        assert_eq!(r, 4);
        let mut gi = 0u32;
        assert_eq!(lib.nvmlDeviceGetGpuInstanceId(h, &mut gi), 3);
        let mut fan = 0u32;
        assert_eq!(lib.nvmlDeviceGetFanSpeed(h, &mut fan), 2);
        let s = std::ffi::CStr::from_ptr(lib.nvmlErrorString(15));
        assert_eq!(s.to_str().unwrap(), "GPU is lost");

        // init is reference counted; calls after the last shutdown are UNINITIALIZED
        assert_eq!(lib.nvmlInit_v2(), 0);
        assert_eq!(lib.nvmlShutdown(), 0);
        assert_eq!(lib.nvmlShutdown(), 0);
        let mut n = 0u32;
        assert_eq!(lib.nvmlDeviceGetCount_v2(&mut n), 1);
        assert_eq!(lib.nvmlDeviceGetPowerUsage(h, &mut n), 1);
        assert_eq!(lib.nvmlShutdown(), 1);
        assert_eq!(lib.nvmlInitWithFlags(0), 0);
        assert_eq!(lib.nvmlDeviceGetCount_v2(&mut n), 0);
        assert_eq!(n, 1);
        // handles stay valid across re-init
        assert_eq!(lib.nvmlDeviceGetPowerUsage(h, &mut n), 0);
        assert_eq!(n, 690599);
    }
}

#[test]
fn h200_replays_in_time_and_counts_calls() {
    let m = Mock::new();
    let log = m.dir.path("calls.json");
    let nvml = m
        .init(
            &scenario("h200-under-load.json"),
            &[
                // 30.153 s of recording per 0.3 s
                ("NVML_MOCK_TIME_SCALE", "100"),
                ("NVML_MOCK_CALL_LOG", log.to_str().unwrap()),
                ("NVML_MOCK_NO_LATENCY", "1"),
            ],
        )
        .unwrap();
    let d = nvml.device_by_index(0).unwrap();
    let mut last = 0u64;
    let mut powers = std::collections::BTreeSet::new();
    let mut n = 0u64;
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(1200) {
        let e = d.total_energy_consumption().unwrap();
        assert!(e >= last, "energy went backwards: {last} -> {e}");
        last = e;
        powers.insert(d.power_usage().unwrap());
        n += 1;
        std::thread::sleep(Duration::from_millis(2));
    }
    // 1.2 s * 100 = 120 s of scenario time = 3 full loops of the 30.153 s recording:
    // the counter went past the recording's last value
    // (first + 3 wraps * (last - first) = last + 2 wraps)
    assert!(last >= 28415527 + 2 * (28415527 - 7749089), "energy {last}");
    assert!(
        powers.len() > 20,
        "power must follow the recording: {powers:?}"
    );

    // the call log was written while running (every 1 s) and at shutdown
    let during: serde_json::Value = common::read_json(&log);
    assert!(during["nvmlDeviceGetPowerUsage"].as_u64().unwrap() > 0);
    nvml.shutdown().unwrap();
    let after: serde_json::Value = common::read_json(&log);
    assert_eq!(after["nvmlDeviceGetPowerUsage"].as_u64().unwrap(), n);
    assert_eq!(
        after["nvmlDeviceGetTotalEnergyConsumption"]
            .as_u64()
            .unwrap(),
        n
    );
    assert_eq!(after["nvmlInit_v2"].as_u64().unwrap(), 1);
    assert_eq!(after["nvmlShutdown"].as_u64().unwrap(), 1);
}

#[test]
fn a_long_call_log_period_leaves_the_writing_to_shutdown() {
    let m = Mock::new();
    let log = m.dir.path("calls.json");
    let nvml = m
        .init(
            &scenario("h200-under-load.json"),
            &[
                ("NVML_MOCK_CALL_LOG", log.to_str().unwrap()),
                ("NVML_MOCK_CALL_LOG_PERIOD_S", "1e9"),
                ("NVML_MOCK_NO_LATENCY", "1"),
            ],
        )
        .unwrap();
    let d = nvml.device_by_index(0).unwrap();
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed() < Duration::from_millis(1200) {
        d.power_usage().unwrap();
        n += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    // only the first call (the init) wrote, more than 1 s ago
    let during: serde_json::Value = common::read_json(&log);
    assert_eq!(during["nvmlInit_v2"].as_u64(), Some(1));
    assert_eq!(during.get("nvmlDeviceGetPowerUsage"), None);
    nvml.shutdown().unwrap();
    let after: serde_json::Value = common::read_json(&log);
    assert_eq!(after["nvmlDeviceGetPowerUsage"].as_u64(), Some(n));
}
