//! tests/scenarios/four-gpu.json: the expected values documented in the README.

use crate::common;

use common::frozen;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::{SampleValue, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

#[test]
fn four_gpus_distinct_values_and_gpu2_not_supported() {
    let (_m, nvml) = frozen("four-gpu.json");
    assert_eq!(nvml.device_count().unwrap(), 4);
    for i in 0..4u32 {
        let n = u64::from(i) + 1;
        let d = nvml.device_by_index(i).unwrap();
        let uuid = format!("GPU-00000000-0000-4000-8000-00000000000{i}");
        assert_eq!(d.uuid().unwrap(), uuid);
        assert_eq!(
            nvml.device_by_uuid(uuid.as_str()).unwrap().index().unwrap(),
            i
        );
        assert_eq!(d.name().unwrap(), "NVIDIA H100 80GB HBM3");
        assert_eq!(d.serial().unwrap(), format!("165000000000{i}"));
        assert_eq!(
            d.pci_info().unwrap().bus_id,
            format!("00000000:{:02X}:00.0", 0x18 + 0x10 * i)
        );
        assert_eq!(d.minor_number().unwrap(), i);
        let u = d.utilization_rates().unwrap();
        assert_eq!((u.gpu, u.memory), (10 * (i + 1), 5 * (i + 1)));
        assert_eq!(d.temperature(TemperatureSensor::Gpu).unwrap(), 40 + i);
        let mem = d.memory_info().unwrap();
        assert_eq!((mem.total, mem.used, mem.reserved), (80 * GIB, n * GIB, 0));
        assert_eq!(mem.free, 80 * GIB - n * GIB);
        assert_eq!(d.enforced_power_limit().unwrap(), 700_000);
        assert_eq!(d.total_energy_consumption().unwrap(), 1_000_000 * n);
        assert_eq!(d.clock_info(Clock::SM).unwrap(), 1000 + 100 * i);
        assert_eq!(d.clock_info(Clock::Graphics).unwrap(), 1000 + 100 * i);
        assert_eq!(d.clock_info(Clock::Memory).unwrap(), 2619);
        assert_err!(d.fan_speed(0), NvmlError::InvalidArg);
        let procs = d.running_compute_processes().unwrap();
        let temp = d
            .field_values_for(&[FieldId(82)])
            .unwrap()
            .remove(0)
            .unwrap();
        if i == 2 {
            assert_err!(d.power_usage(), NvmlError::NotSupported);
            assert_err!(temp.value, NvmlError::NotSupported);
        } else {
            assert_eq!(d.power_usage().unwrap(), 100_000 * (i + 1));
            assert_eq!(temp.value.unwrap(), SampleValue::U32(50 + i));
        }
        if i == 3 {
            assert!(procs.is_empty());
            assert_err!(d.process_utilization_stats(None), NvmlError::NotFound);
        } else {
            assert_eq!(procs.len(), 1);
            assert_eq!(procs[0].pid, 1000 + i);
            assert_eq!(procs[0].used_gpu_memory, UsedGpuMemory::Used(512 * MIB * n));
            let s = d.process_utilization_stats(None).unwrap();
            assert_eq!(
                (s[0].pid, s[0].sm_util, s[0].mem_util),
                (1000 + i, 10 * (i + 1), 5 * (i + 1))
            );
        }
        // no "mig" in the scenario: NOT_SUPPORTED
        assert_err!(d.mig_mode(), NvmlError::NotSupported);
    }
}
