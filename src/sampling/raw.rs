//! The NVML calls that nvml-wrapper 0.13 does not wrap, or wraps with a struct layout the
//! driver may not use: made through its raw symbol table (`Nvml::lib()`), every one of them
//! through a `Result` (a symbol the library lacks answers `FailedToLoadSymbol`, never a
//! panic).
//!
//! - `nvmlDeviceGetComputeRunningProcesses_v3`: R535 drivers write a 32-byte
//!   `nvmlProcessInfo_t` (with `usedGpuCcProtectedMemory`) under the same `_v3` name that
//!   earlier and later drivers use with the 24-byte `nvmlProcessInfo_v2_t`; nvml-wrapper
//!   always passes 24-byte entries, so on such a driver it reads shifted fields and, with
//!   more than 15 processes, lets the driver write past its buffer. [`compute_processes`]
//!   sizes its buffer for the larger layout always and decodes with the layout
//!   [`ProcessInfoLayout::detect`] picks.
//! - `nvmlDeviceGetRemappedRows`, `nvmlDeviceGetGpuInstanceId`,
//!   `nvmlDeviceGetComputeInstanceId`, `nvmlDeviceRegisterEvents` (nvml-wrapper's version
//!   frees the whole event set when one device refuses) and `nvmlEventSetWait_v2`
//!   (nvml-wrapper's version drops the GPU and compute instance ids of an event).

use std::os::raw::c_uint;

use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::{Device, EventSet, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlEventData_t, nvmlProcessInfo_t, nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE,
    nvmlReturn_enum_NVML_SUCCESS, NvmlLib,
};

use super::snapshot::RemappedRows;

/// Byte layout of the entries `nvmlDeviceGetComputeRunningProcesses_v3` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProcessInfoLayout {
    /// `nvmlProcessInfo_v2_t`: pid u32, (pad), usedGpuMemory u64, gpuInstanceId u32,
    /// computeInstanceId u32; 24 bytes. Drivers before R535, and R535+ drivers that have
    /// `nvmlDeviceGetRunningProcessDetailList` (NVIDIA moved the larger struct there).
    V2,
    /// The same plus usedGpuCcProtectedMemory u64; 32 bytes. R535 drivers without
    /// `nvmlDeviceGetRunningProcessDetailList`.
    V3CcProtected,
}

/// The larger of the two entry sizes: every buffer is sized with it, so a wrong guess never
/// lets the driver write past the buffer.
const MAX_STRIDE: usize = 32;

impl ProcessInfoLayout {
    /// Entry size in bytes.
    pub(crate) fn stride(self) -> usize {
        match self {
            ProcessInfoLayout::V2 => 24,
            ProcessInfoLayout::V3CcProtected => 32,
        }
    }

    /// Picks the layout from the symbols the library exports, as nvitop does: R535 added
    /// `nvmlDeviceGetConfComputeMemSizeInfo` together with the 32-byte struct; the drivers
    /// that went back to 24 bytes added `nvmlDeviceGetRunningProcessDetailList` for it.
    pub(crate) fn detect(lib: &NvmlLib) -> Self {
        Self::from_symbols(
            lib.nvmlDeviceGetConfComputeMemSizeInfo.is_ok(),
            lib.nvmlDeviceGetRunningProcessDetailList.is_ok(),
        )
    }

    fn from_symbols(has_conf_compute_mem_size_info: bool, has_process_detail_list: bool) -> Self {
        if has_conf_compute_mem_size_info && !has_process_detail_list {
            ProcessInfoLayout::V3CcProtected
        } else {
            ProcessInfoLayout::V2
        }
    }
}

/// One entry of the compute process list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawProcess {
    /// Host PID.
    pub pid: u32,
    /// GPU memory in bytes; `None` for `NVML_VALUE_NOT_AVAILABLE`.
    pub used_memory_bytes: Option<u64>,
}

/// Decodes `count` entries of `layout` from `bytes` (native endianness, as the driver wrote
/// them). Entries that do not fit in `bytes` are dropped.
pub(crate) fn decode_processes(
    bytes: &[u8],
    count: usize,
    layout: ProcessInfoLayout,
) -> Vec<RawProcess> {
    let stride = layout.stride();
    bytes
        .chunks_exact(stride)
        .take(count)
        .map(|e| {
            let pid = u32::from_ne_bytes(e[0..4].try_into().expect("4 bytes"));
            let used = u64::from_ne_bytes(e[8..16].try_into().expect("8 bytes"));
            RawProcess {
                pid,
                used_memory_bytes: (used != u64::MAX).then_some(used),
            }
        })
        .collect()
}

/// Compute processes on `device` (`nvmlDeviceGetComputeRunningProcesses_v3`), two-call
/// protocol: a NULL buffer first (INSUFFICIENT_SIZE with the count, or SUCCESS for none),
/// then a buffer with room for 5 more (processes may start in between), retried twice if
/// they still did not fit.
///
/// # Errors
/// As NVML answers (`GpuLost`, `NotSupported`, …); `FailedToLoadSymbol` without the symbol.
pub(crate) fn compute_processes(
    nvml: &Nvml,
    device: &Device<'_>,
    layout: ProcessInfoLayout,
) -> Result<Vec<RawProcess>, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetComputeRunningProcesses_v3.as_ref())?;
    // SAFETY: the handle comes from a live `Device` of this `Nvml`; every buffer passed has
    // room for `n` entries of the largest layout, and the driver writes at most `n`.
    unsafe {
        let handle: nvmlDevice_t = device.handle();
        let mut count: c_uint = 0;
        let rc = sym(handle, &mut count, std::ptr::null_mut());
        if rc != nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            nvml_try(rc)?;
            return Ok(Vec::new());
        }
        for _ in 0..3 {
            let capacity = count as usize + 5;
            // u64 words: 8-byte alignment, as the struct needs.
            let mut buf = vec![0u64; capacity * MAX_STRIDE / 8];
            let mut n = capacity as c_uint;
            let rc = sym(handle, &mut n, buf.as_mut_ptr().cast::<nvmlProcessInfo_t>());
            if rc == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
                count = n;
                continue;
            }
            nvml_try(rc)?;
            let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
            return Ok(decode_processes(&bytes, (n as usize).min(capacity), layout));
        }
        Err(NvmlError::InsufficientSize(Some(count as usize)))
    }
}

/// Row remapping state (`nvmlDeviceGetRemappedRows`).
///
/// # Errors
/// As NVML answers (`NotSupported` before Ampere).
pub(crate) fn remapped_rows(nvml: &Nvml, device: &Device<'_>) -> Result<RemappedRows, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetRemappedRows.as_ref())?;
    let (mut corr, mut unc, mut pending, mut failed) = (0, 0, 0, 0);
    // SAFETY: live handle, four valid out-pointers.
    nvml_try(unsafe {
        sym(
            device.handle(),
            &mut corr,
            &mut unc,
            &mut pending,
            &mut failed,
        )
    })?;
    Ok(RemappedRows {
        correctable: corr,
        uncorrectable: unc,
        pending: pending != 0,
        failed: failed != 0,
    })
}

/// GPU instance id of a MIG device (`nvmlDeviceGetGpuInstanceId`).
///
/// # Errors
/// As NVML answers (`NotSupported` for a GPU).
pub(crate) fn gpu_instance_id(nvml: &Nvml, device: &Device<'_>) -> Result<u32, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetGpuInstanceId.as_ref())?;
    let mut id: c_uint = 0;
    // SAFETY: live handle, valid out-pointer.
    nvml_try(unsafe { sym(device.handle(), &mut id) })?;
    Ok(id)
}

/// Compute instance id of a MIG device (`nvmlDeviceGetComputeInstanceId`).
///
/// # Errors
/// As NVML answers (`NotSupported` for a GPU).
pub(crate) fn compute_instance_id(nvml: &Nvml, device: &Device<'_>) -> Result<u32, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetComputeInstanceId.as_ref())?;
    let mut id: c_uint = 0;
    // SAFETY: live handle, valid out-pointer.
    nvml_try(unsafe { sym(device.handle(), &mut id) })?;
    Ok(id)
}

/// Adds `device`'s events of the `types` bitmask to `set` (`nvmlDeviceRegisterEvents`),
/// leaving the set usable when the device refuses.
///
/// # Errors
/// As NVML answers (`NotSupported` for a type the device cannot report, or a MIG device).
pub(crate) fn register_events(
    nvml: &Nvml,
    device: &Device<'_>,
    types: u64,
    set: &EventSet<'_>,
) -> Result<(), NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlDeviceRegisterEvents.as_ref())?;
    // SAFETY: live device and set handles of this `Nvml`.
    nvml_try(unsafe { sym(device.handle(), types, set.handle()) })
}

/// One event as `nvmlEventSetWait_v2` delivers it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawEvent {
    /// The physical GPU's handle.
    pub device: nvmlDevice_t,
    /// `nvmlEventType*` bit.
    pub event_type: u64,
    /// The XID code for an XID event.
    pub data: u64,
    /// GPU instance id, `None` for 0xFFFFFFFF (not attributable to one).
    pub gpu_instance_id: Option<u32>,
    /// Compute instance id, `None` for 0xFFFFFFFF.
    pub compute_instance_id: Option<u32>,
}

/// Waits up to `timeout_ms` for one event of `set` (`nvmlEventSetWait_v2`).
///
/// # Errors
/// `Timeout` when none came; as NVML answers otherwise.
pub(crate) fn wait_event(
    nvml: &Nvml,
    set: &EventSet<'_>,
    timeout_ms: u32,
) -> Result<RawEvent, NvmlError> {
    let sym = nvml_sym(nvml.lib().nvmlEventSetWait_v2.as_ref())?;
    // SAFETY: a zeroed nvmlEventData_t is valid (pointers and integers); live set handle.
    let (rc, data) = unsafe {
        let mut data: nvmlEventData_t = std::mem::zeroed();
        (sym(set.handle(), &mut data, timeout_ms), data)
    };
    if rc != nvmlReturn_enum_NVML_SUCCESS {
        nvml_try(rc)?;
    }
    let id = |v: c_uint| (v != u32::MAX).then_some(v);
    Ok(RawEvent {
        device: data.device,
        event_type: data.eventType,
        data: data.eventData,
        gpu_instance_id: id(data.gpuInstanceId),
        compute_instance_id: id(data.computeInstanceId),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(stride: usize, pid: u32, used: u64, gi: u32, ci: u32) -> Vec<u8> {
        let mut e = vec![0u8; stride];
        e[0..4].copy_from_slice(&pid.to_ne_bytes());
        e[8..16].copy_from_slice(&used.to_ne_bytes());
        e[16..20].copy_from_slice(&gi.to_ne_bytes());
        e[20..24].copy_from_slice(&ci.to_ne_bytes());
        e
    }

    #[test]
    fn layout_follows_the_symbols() {
        use ProcessInfoLayout::*;
        assert_eq!(
            ProcessInfoLayout::from_symbols(false, false),
            V2,
            "before R535"
        );
        assert_eq!(
            ProcessInfoLayout::from_symbols(true, false),
            V3CcProtected,
            "R535"
        );
        assert_eq!(
            ProcessInfoLayout::from_symbols(true, true),
            V2,
            "R550 and later"
        );
    }

    #[test]
    fn decodes_both_strides() {
        // The recorded H200 process, then a second one whose memory NVML cannot tell.
        for layout in [ProcessInfoLayout::V2, ProcessInfoLayout::V3CcProtected] {
            let s = layout.stride();
            let mut bytes = entry(s, 432, 1_184_890_880, u32::MAX, u32::MAX);
            bytes.extend(entry(s, 7001, u64::MAX, 1, 0));
            bytes.extend(vec![0xAA; 5 * 32]);
            let got = decode_processes(&bytes, 2, layout);
            assert_eq!(
                got,
                vec![
                    RawProcess {
                        pid: 432,
                        used_memory_bytes: Some(1_184_890_880)
                    },
                    RawProcess {
                        pid: 7001,
                        used_memory_bytes: None
                    },
                ],
                "{layout:?}"
            );
        }
    }

    #[test]
    fn the_wrong_stride_misreads_the_second_entry() {
        // What nvml-wrapper does on an R535 driver: 32-byte entries read 24 bytes apart.
        let mut bytes = entry(32, 432, 1_184_890_880, u32::MAX, u32::MAX);
        bytes.extend(entry(32, 7001, 2_000_000, 1, 0));
        let misread = decode_processes(&bytes, 2, ProcessInfoLayout::V2);
        assert_ne!(misread[1].pid, 7001);
        let right = decode_processes(&bytes, 2, ProcessInfoLayout::V3CcProtected);
        assert_eq!(right[1].pid, 7001);
    }
}
