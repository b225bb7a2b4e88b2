//! GPM (GPU Performance Monitoring): samples and metrics computed from the scenario.
//!
//! A sample remembers which device (or MIG instance) and which scenario time it was taken
//! at. `nvmlGpmMetricsGet` answers, per metric, the time-weighted mean of the timeline's
//! `gpm` values between the two samples (the value in force at sample 2 when both were
//! taken at the same scenario time).

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use crate::rc::*;
use crate::runtime::{self, dev_call, guard, initialized, lock, out, Ret};
use crate::types::*;

/// (scenario key, metric id, short name, long name, unit); names are NUL-terminated.
const METRICS: &[(&str, u32, &str, &str, &str)] = &[
    (
        "graphics_util",
        1,
        "GR_UTIL\0",
        "Graphics utilization\0",
        "%\0",
    ),
    ("sm_util", 2, "SM_UTIL\0", "SM utilization\0", "%\0"),
    ("sm_occupancy", 3, "SM_OCCUP\0", "SM occupancy\0", "%\0"),
    (
        "integer_util",
        4,
        "INT_UTIL\0",
        "Integer utilization\0",
        "%\0",
    ),
    (
        "any_tensor_util",
        5,
        "ANY_TENSOR_UTIL\0",
        "Tensor utilization\0",
        "%\0",
    ),
    (
        "dfma_tensor_util",
        6,
        "DFMA_TENSOR_UTIL\0",
        "DFMA tensor utilization\0",
        "%\0",
    ),
    (
        "hmma_tensor_util",
        7,
        "HMMA_TENSOR_UTIL\0",
        "HMMA tensor utilization\0",
        "%\0",
    ),
    (
        "imma_tensor_util",
        9,
        "IMMA_TENSOR_UTIL\0",
        "IMMA tensor utilization\0",
        "%\0",
    ),
    (
        "dram_bw_util",
        10,
        "DRAM_BW_UTIL\0",
        "DRAM bandwidth utilization\0",
        "%\0",
    ),
    ("fp64_util", 11, "FP64_UTIL\0", "FP64 utilization\0", "%\0"),
    ("fp32_util", 12, "FP32_UTIL\0", "FP32 utilization\0", "%\0"),
    ("fp16_util", 13, "FP16_UTIL\0", "FP16 utilization\0", "%\0"),
    (
        "pcie_tx_per_sec",
        20,
        "PCIE_TX\0",
        "PCIe transmit bandwidth\0",
        "MB/s\0",
    ),
    (
        "pcie_rx_per_sec",
        21,
        "PCIE_RX\0",
        "PCIe receive bandwidth\0",
        "MB/s\0",
    ),
    (
        "nvdec_0_util",
        30,
        "NVDEC_0_UTIL\0",
        "NVDEC 0 utilization\0",
        "%\0",
    ),
    (
        "nvjpg_0_util",
        40,
        "NVJPG_0_UTIL\0",
        "NVJPG 0 utilization\0",
        "%\0",
    ),
    (
        "nvofa_0_util",
        50,
        "NVOFA_0_UTIL\0",
        "NVOFA 0 utilization\0",
        "%\0",
    ),
    (
        "nvlink_total_rx_per_sec",
        60,
        "NVLINK_RX\0",
        "NVLink receive bandwidth\0",
        "MB/s\0",
    ),
    (
        "nvlink_total_tx_per_sec",
        61,
        "NVLINK_TX\0",
        "NVLink transmit bandwidth\0",
        "MB/s\0",
    ),
];

/// Scenario key -> metric id: a name from the table above, or the id as a decimal string.
pub fn metric_id(key: &str) -> Option<u32> {
    if let Some(m) = METRICS.iter().find(|m| m.0 == key) {
        return Some(m.1);
    }
    key.parse::<u32>()
        .ok()
        .filter(|id| *id >= 1 && (*id as usize) < GPM_METRIC_MAX)
}

fn info(id: u32) -> GpmMetricInfo {
    match METRICS.iter().find(|m| m.1 == id) {
        Some(m) => GpmMetricInfo {
            shortName: m.2.as_ptr() as *const c_char,
            longName: m.3.as_ptr() as *const c_char,
            unit: m.4.as_ptr() as *const c_char,
        },
        None => GpmMetricInfo {
            shortName: std::ptr::null(),
            longName: std::ptr::null(),
            unit: std::ptr::null(),
        },
    }
}

#[derive(Clone, Copy)]
struct Taken {
    /// id in Loaded::all (a MIG device's id for a MIG sample)
    dev: usize,
    e: f64,
}

/// Live samples: address -> taken state.
static SAMPLES: Mutex<Option<HashMap<usize, Option<Taken>>>> = Mutex::new(None);

fn with_samples<R>(f: impl FnOnce(&mut HashMap<usize, Option<Taken>>) -> R) -> R {
    let mut g = lock(&SAMPLES);
    f(g.get_or_insert_with(HashMap::new))
}

fn supported(dev: &crate::scenario::Dev) -> bool {
    dev.spec
        .gpm_supported
        .unwrap_or_else(|| dev.spec.architecture.is_some_and(|a| a >= 9))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmQueryDeviceSupport(device: Device, s: *mut GpmSupport) -> u32 {
    dev_call("nvmlGpmQueryDeviceSupport", device, |c| {
        if s.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        if (*s).version != GPM_SUPPORT_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        (*s).isSupportedDevice = u32::from(supported(c.dev));
        Ok(())
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleAlloc(sample: *mut *mut c_void) -> u32 {
    guard("nvmlGpmSampleAlloc", || {
        initialized()?;
        if sample.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let p = Box::into_raw(Box::new(0u64)) as usize;
        with_samples(|m| m.insert(p, None));
        out(sample, p as *mut c_void)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleFree(sample: *mut c_void) -> u32 {
    guard("nvmlGpmSampleFree", || {
        initialized()?;
        let p = sample as usize;
        if with_samples(|m| m.remove(&p)).is_none() {
            return Err(INVALID_ARGUMENT);
        }
        drop(Box::from_raw(p as *mut u64));
        Ok(())
    })
}

fn take(sample: *mut c_void, dev: usize, e: f64) -> Ret {
    let p = sample as usize;
    with_samples(|m| match m.get_mut(&p) {
        Some(slot) => {
            *slot = Some(Taken { dev, e });
            Ok(())
        }
        None => Err(INVALID_ARGUMENT),
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmSampleGet(device: Device, sample: *mut c_void) -> u32 {
    dev_call("nvmlGpmSampleGet", device, |c| {
        if !supported(c.dev) {
            return Err(NOT_SUPPORTED);
        }
        take(sample, c.id, c.e)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMigSampleGet(
    device: Device,
    gpu_instance_id: u32,
    sample: *mut c_void,
) -> u32 {
    dev_call("nvmlGpmMigSampleGet", device, |c| {
        if c.dev.is_mig() {
            return Err(INVALID_ARGUMENT);
        }
        if !supported(c.dev) {
            return Err(NOT_SUPPORTED);
        }
        let child = c
            .dev
            .mig_children
            .iter()
            .copied()
            .find(|&id| c.l.all[id].spec.gpu_instance_id == Some(gpu_instance_id))
            .ok_or(INVALID_ARGUMENT)?;
        take(sample, child, c.e)
    })
}

/// Time-weighted mean of metric `key` over [e1, e2] on a device's timeline.
pub(crate) fn mean(dev: &crate::scenario::Dev, id: u32, e1: f64, e2: f64) -> Result<f64, u32> {
    let tl = &dev.timeline;
    let value_at = |e: f64| -> Result<f64, u32> {
        let (row, _) = tl.at(e).ok_or(NOT_SUPPORTED)?;
        let gpm = row.gpm.as_ref().ok_or(NOT_SUPPORTED)?;
        gpm.iter()
            .find(|(k, _)| metric_id(k) == Some(id))
            .map(|(_, v)| *v)
            .ok_or(NOT_SUPPORTED)
    };
    if e2 <= e1 {
        return value_at(e2);
    }
    let mut acc = 0.0;
    let mut cur = e1;
    let mut guard = 0u32;
    while cur < e2 {
        let (_, _, end) = tl.segment(cur).ok_or(NOT_SUPPORTED)?;
        let seg_end = end.min(e2);
        let v = value_at(cur)?;
        // a segment end at or before `cur` (float rounding) must still make progress
        let seg_end = if seg_end <= cur { e2 } else { seg_end };
        acc += v * (seg_end - cur);
        cur = seg_end;
        guard += 1;
        if guard > 1_000_000 {
            break;
        }
    }
    Ok(acc / (e2 - e1))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlGpmMetricsGet(m: *mut GpmMetricsGet) -> u32 {
    guard("nvmlGpmMetricsGet", || {
        let l = initialized()?;
        if m.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let m = &mut *m;
        if m.version != GPM_METRICS_GET_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        if m.numMetrics as usize > GPM_METRIC_MAX {
            return Err(INVALID_ARGUMENT);
        }
        let (s1, s2) = with_samples(|map| {
            (
                map.get(&(m.sample1 as usize)).copied(),
                map.get(&(m.sample2 as usize)).copied(),
            )
        });
        let (Some(Some(s1)), Some(Some(s2))) = (s1, s2) else {
            return Err(INVALID_ARGUMENT);
        };
        if s1.dev != s2.dev || s2.e < s1.e {
            return Err(INVALID_ARGUMENT);
        }
        let dev = &l.all[s1.dev];
        let e = runtime::elapsed(l);
        runtime::device_found(l, "nvmlGpmMetricsGet", s1.dev, e)?;
        for i in 0..m.numMetrics as usize {
            let metric = &mut m.metrics[i];
            let id = metric.metricId;
            metric.metricInfo = info(id);
            if id == 0 || id as usize >= GPM_METRIC_MAX {
                metric.nvmlReturn = INVALID_ARGUMENT;
                continue;
            }
            match mean(dev, id, s1.e, s2.e) {
                Ok(v) => {
                    metric.value = v;
                    metric.nvmlReturn = SUCCESS;
                }
                Err(code) => {
                    metric.value = 0.0;
                    metric.nvmlReturn = code;
                }
            }
        }
        Ok(())
    })
}
