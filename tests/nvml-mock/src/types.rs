//! C structs of the NVML ABI (layouts as in nvml-wrapper-sys 0.10 / nvml.h of NVML 13).

#![allow(non_snake_case)]

use std::ffi::{c_char, c_void};

pub type Device = *mut c_void;

#[repr(C)]
pub struct PciInfo {
    pub busIdLegacy: [c_char; 16],
    pub domain: u32,
    pub bus: u32,
    pub device: u32,
    pub pciDeviceId: u32,
    pub pciSubSystemId: u32,
    pub busId: [c_char; 32],
}

#[repr(C)]
pub struct Utilization {
    pub gpu: u32,
    pub memory: u32,
}

#[repr(C)]
pub struct Memory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

#[repr(C)]
pub struct MemoryV2 {
    pub version: u32,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// NVML_STRUCT_VERSION(Memory, 2) = sizeof(nvmlMemory_v2_t) | 2 << 24
pub const MEMORY_V2_VERSION: u32 = 0x0200_0028;

/// nvmlProcessInfo_t (= nvmlProcessInfo_v2_t), what the *_v3 process calls fill.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfo {
    pub pid: u32,
    pub usedGpuMemory: u64,
    pub gpuInstanceId: u32,
    pub computeInstanceId: u32,
}

/// `nvmlProcessInfo_v1_t`: what `nvmlDeviceGetComputeRunningProcesses` (v1) writes.
#[repr(C)]
pub struct ProcessInfoV1 {
    pub pid: u32,
    pub usedGpuMemory: u64,
}

#[repr(C)]
pub struct FieldValue {
    pub fieldId: u32,
    pub scopeId: u32,
    pub timestamp: i64,
    pub latencyUsec: i64,
    pub valueType: u32,
    pub nvmlReturn: u32,
    /// union nvmlValue_t (8 bytes)
    pub value: u64,
}

pub const VALUE_TYPE_DOUBLE: u32 = 0;
pub const VALUE_TYPE_UNSIGNED_INT: u32 = 1;
pub const VALUE_TYPE_UNSIGNED_LONG_LONG: u32 = 3;
pub const VALUE_TYPE_SIGNED_LONG_LONG: u32 = 4;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessUtilizationSample {
    pub pid: u32,
    pub timeStamp: u64,
    pub smUtil: u32,
    pub memUtil: u32,
    pub encUtil: u32,
    pub decUtil: u32,
}

/// The structure `nvmlEventSetWait` (v1) writes: no instance ids.
#[repr(C)]
pub struct EventDataV1 {
    pub device: Device,
    pub eventType: u64,
    pub eventData: u64,
}

#[repr(C)]
pub struct EventData {
    pub device: Device,
    pub eventType: u64,
    pub eventData: u64,
    pub gpuInstanceId: u32,
    pub computeInstanceId: u32,
}

#[repr(C)]
pub struct GpmSupport {
    pub version: u32,
    pub isSupportedDevice: u32,
}

#[repr(C)]
pub struct GpmMetricInfo {
    pub shortName: *const c_char,
    pub longName: *const c_char,
    pub unit: *const c_char,
}

#[repr(C)]
pub struct GpmMetric {
    pub metricId: u32,
    pub nvmlReturn: u32,
    pub value: f64,
    pub metricInfo: GpmMetricInfo,
}

pub const GPM_METRIC_MAX: usize = 210;

#[repr(C)]
pub struct GpmMetricsGet {
    pub version: u32,
    pub numMetrics: u32,
    pub sample1: *mut c_void,
    pub sample2: *mut c_void,
    pub metrics: [GpmMetric; GPM_METRIC_MAX],
}

pub const GPM_METRICS_GET_VERSION: u32 = 1;
pub const GPM_SUPPORT_VERSION: u32 = 1;

/// Not available marker for gpuInstanceId / computeInstanceId.
pub const NO_VALUE: u32 = 0xFFFF_FFFF;

#[cfg(test)]
mod layout {
    use super::*;
    use nvml_wrapper_sys::bindings as b;
    use std::mem::{offset_of, size_of};

    #[test]
    fn sizes_match_the_bindings() {
        assert_eq!(size_of::<PciInfo>(), size_of::<b::nvmlPciInfo_t>());
        assert_eq!(
            offset_of!(PciInfo, busId),
            offset_of!(b::nvmlPciInfo_t, busId)
        );
        assert_eq!(size_of::<Utilization>(), size_of::<b::nvmlUtilization_t>());
        assert_eq!(size_of::<Memory>(), size_of::<b::nvmlMemory_t>());
        assert_eq!(size_of::<MemoryV2>(), size_of::<b::nvmlMemory_v2_t>());
        assert_eq!(
            MEMORY_V2_VERSION as usize,
            size_of::<b::nvmlMemory_v2_t>() | (2 << 24)
        );
        assert_eq!(size_of::<ProcessInfo>(), size_of::<b::nvmlProcessInfo_t>());
        assert_eq!(
            offset_of!(ProcessInfo, gpuInstanceId),
            offset_of!(b::nvmlProcessInfo_t, gpuInstanceId)
        );
        assert_eq!(size_of::<FieldValue>(), size_of::<b::nvmlFieldValue_t>());
        assert_eq!(
            offset_of!(FieldValue, value),
            offset_of!(b::nvmlFieldValue_t, value)
        );
        assert_eq!(
            offset_of!(FieldValue, nvmlReturn),
            offset_of!(b::nvmlFieldValue_t, nvmlReturn)
        );
        assert_eq!(
            size_of::<ProcessUtilizationSample>(),
            size_of::<b::nvmlProcessUtilizationSample_t>()
        );
        assert_eq!(size_of::<EventData>(), size_of::<b::nvmlEventData_t>());
        assert_eq!(size_of::<GpmSupport>(), size_of::<b::nvmlGpmSupport_t>());
        assert_eq!(size_of::<GpmMetric>(), size_of::<b::nvmlGpmMetric_t>());
        assert_eq!(
            size_of::<GpmMetricsGet>(),
            size_of::<b::nvmlGpmMetricsGet_t>()
        );
        assert_eq!(
            offset_of!(GpmMetricsGet, metrics),
            offset_of!(b::nvmlGpmMetricsGet_t, metrics)
        );
        assert_eq!(GPM_METRICS_GET_VERSION, b::NVML_GPM_METRICS_GET_VERSION);
        assert_eq!(GPM_SUPPORT_VERSION, b::NVML_GPM_SUPPORT_VERSION);
        assert_eq!(
            GPM_METRIC_MAX,
            b::nvmlGpmMetricId_t_NVML_GPM_METRIC_MAX as usize
        );
    }
}
