//! tests/scenarios/h200-mig-xid.json: MIG layout, GPM per GPU instance, XID events, GPU lost.

use crate::common;

use std::time::{Duration, Instant};

use common::{scenario, Mock};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::gpm::gpm_metrics_get;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const PARENT: &str = "GPU-0c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5";
const MIG0: &str = "MIG-5e6f7a8b-9c0d-5e1f-8a2b-3c4d5e6f7a80";
const MIG1: &str = "MIG-5e6f7a8b-9c0d-5e1f-8a2b-3c4d5e6f7a81";

#[test]
fn mig_layout_gpm_xid_and_gpu_lost() {
    let m = Mock::new();
    let nvml = m
        .init(
            &scenario("h200-mig-xid.json"),
            // events at t = 2, 4, 8 s arrive at 0.2, 0.4, 0.8 s
            &[("NVML_MOCK_TIME_SCALE", "10")],
        )
        .unwrap();
    let t0 = Instant::now();
    let d = nvml.device_by_index(0).unwrap();
    // register first: only events after registration are delivered
    let set = nvml.create_event_set().unwrap();
    let set = d
        .register_events(
            EventTypes::CRITICAL_XID_ERROR | EventTypes::DOUBLE_BIT_ECC_ERROR,
            set,
        )
        .unwrap();

    let mode = d.mig_mode().unwrap();
    assert_eq!((mode.current, mode.pending), (1, 1));
    assert_eq!(d.mig_device_count().unwrap(), 7);
    assert!(!d.mig_is_mig_device_handle().unwrap());
    assert_err!(d.utilization_rates(), NvmlError::NotSupported);
    assert_eq!(d.power_usage().unwrap(), 350_000);

    let m0 = d.mig_device_by_index(0).unwrap();
    let m1 = d.mig_device_by_index(1).unwrap();
    assert_err!(d.mig_device_by_index(2), NvmlError::NotFound);
    assert_err!(d.mig_device_by_index(7), NvmlError::InvalidArg);
    assert_eq!(m0.uuid().unwrap(), MIG0);
    assert_eq!(m1.uuid().unwrap(), MIG1);
    assert_eq!(m0.name().unwrap(), "NVIDIA H200 MIG 3g.71gb");
    assert!(m0.mig_is_mig_device_handle().unwrap());
    assert_eq!(m0.mig_parent_device().unwrap().uuid().unwrap(), PARENT);
    assert_err!(d.mig_parent_device(), NvmlError::InvalidArg);
    assert!(nvml
        .device_by_uuid(MIG1)
        .unwrap()
        .mig_is_mig_device_handle()
        .unwrap());
    unsafe {
        let lib = nvml.lib();
        for (dev, gi) in [(&m0, 1), (&m1, 9)] {
            let (mut g, mut c) = (99u32, 99u32);
            assert_eq!(lib.nvmlDeviceGetGpuInstanceId(dev.handle(), &mut g), 0);
            assert_eq!(lib.nvmlDeviceGetComputeInstanceId(dev.handle(), &mut c), 0);
            assert_eq!((g, c), (gi, 0));
        }
    }
    let mem = m0.memory_info().unwrap();
    assert_eq!((mem.total, mem.used), (71 * GIB, 20 * GIB));
    let p = m1.running_compute_processes().unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(
        (p[0].pid, p[0].gpu_instance_id, p[0].compute_instance_id),
        (4400, Some(9), Some(0))
    );
    let p = d.running_compute_processes().unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(
        p[0].used_gpu_memory,
        nvml_wrapper::enums::device::UsedGpuMemory::Used(20 * GIB - 64 * MIB)
    );
    assert_err!(m0.power_usage(), NvmlError::NotSupported);

    // GPM per GPU instance, through the parent
    let a = d.gpm_mig_sample(1).unwrap();
    let b = d.gpm_mig_sample(1).unwrap();
    let r = gpm_metrics_get(
        &nvml,
        &a,
        &b,
        &[GpmMetricId::GraphicsUtil, GpmMetricId::SmUtil],
    )
    .unwrap();
    assert_eq!(r[0].as_ref().unwrap().value, 90.0);
    assert_eq!(r[1].as_ref().unwrap().value, 85.0);
    assert_err!(d.gpm_mig_sample(5), NvmlError::InvalidArg);
    let c = d.gpm_sample().unwrap();
    // samples of different sources cannot be compared
    assert_err!(
        gpm_metrics_get(&nvml, &a, &c, &[GpmMetricId::GraphicsUtil]),
        NvmlError::InvalidArg
    );

    // XID 13 in GPU instance 1 at t = 2 s (0.2 s); the wrapper drops the instance ids, so
    // read them with the raw call
    unsafe {
        let lib = nvml.lib();
        let mut data: nvml_wrapper_sys::bindings::nvmlEventData_t = std::mem::zeroed();
        assert_eq!(lib.nvmlEventSetWait_v2(set.handle(), &mut data, 2000), 0);
        assert!(t0.elapsed() >= Duration::from_millis(190));
        assert_eq!((data.eventType, data.eventData), (8, 13));
        assert_eq!((data.gpuInstanceId, data.computeInstanceId), (1, 0));
        assert_eq!(data.device, d.handle());
    }
    // then XID 48 and the double-bit ECC event at t = 4 s
    let e = set.wait(2000).unwrap();
    assert_eq!(e.event_type, EventTypes::CRITICAL_XID_ERROR);
    assert!(matches!(e.event_data, Some(XidError::Value(48))));
    let e = set.wait(2000).unwrap();
    assert_eq!(e.event_type, EventTypes::DOUBLE_BIT_ECC_ERROR);
    assert!(e.event_data.is_none());
    // XID 79 at t = 8 s, and from then on the GPU is lost
    let e = set.wait(2000).unwrap();
    assert!(matches!(e.event_data, Some(XidError::Value(79))));
    assert!(t0.elapsed() >= Duration::from_millis(790));
    assert_err!(d.power_usage(), NvmlError::GpuLost);
    assert_err!(m0.memory_info(), NvmlError::GpuLost);
    assert_err!(nvml.device_by_index(0), NvmlError::GpuLost);
    // nothing more: the wait times out
    assert_err!(set.wait(30), NvmlError::Timeout);
    assert_eq!(nvml.device_count().unwrap(), 1);
}
