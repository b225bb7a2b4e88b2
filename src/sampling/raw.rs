//! The NVML calls that nvml-wrapper 0.13 does not wrap, or wraps with a struct layout the
//! driver may not use: made through its raw symbol table (`Nvml::lib()`), every one of them
//! through a `Result` (a symbol the library lacks answers `FailedToLoadSymbol`, never a
//! panic).
//!
//! - `nvmlDeviceGetComputeRunningProcesses_v3`: R535 drivers write a 32-byte
//!   `nvmlProcessInfo_t` (with `usedGpuCcProtectedMemory`) under the same `_v3` name that
//!   earlier and later drivers use with the 24-byte `nvmlProcessInfo_v2_t`; nvml-wrapper
//!   always passes 24-byte entries, so on such a driver it reads shifted fields and, with
//!   more than 15 processes, lets the driver write past its buffer. [`process_list`]
//!   sizes its buffer for the larger layout always and decodes with the layout
//!   [`ProcessInfoLayout::detect`] picks.
//! - `nvmlDeviceGetRemappedRows`, `nvmlDeviceGetGpuInstanceId`,
//!   `nvmlDeviceGetComputeInstanceId`, `nvmlDeviceRegisterEvents` (nvml-wrapper's version
//!   frees the whole event set when one device refuses) and `nvmlEventSetWait_v2`
//!   (nvml-wrapper's version drops the GPU and compute instance ids of an event).
//! - The older versions of the versioned calls ([`Versioned`]), which nvml-wrapper does not
//!   call: `nvmlDeviceGetMemoryInfo` (v1), `nvmlDeviceGetComputeRunningProcesses{,_v2}`,
//!   `nvmlDeviceGetMPSComputeRunningProcesses{,_v2}`, `nvmlDeviceGetPciInfo{,_v2}`,
//!   `nvmlDeviceGetCurrentClocksThrottleReasons` (raw, so that no bit is dropped) and
//!   `nvmlEventSetWait`. Which version a device gets is decided by
//!   [`super::read::Gate`].

use std::ffi::CStr;
use std::os::raw::{c_uint, c_ulonglong};

use nvml_wrapper::error::{nvml_sym, nvml_try, NvmlError};
use nvml_wrapper::{Device, EventSet, Nvml};
use nvml_wrapper_sys::bindings::{
    nvmlDevice_t, nvmlEventData_t, nvmlMemory_t, nvmlPciInfo_t,
    nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE, nvmlReturn_enum_NVML_SUCCESS, nvmlReturn_t,
    NvmlLib,
};

use super::snapshot::RemappedRows;

/// An NVML call the agent uses that exists in several versions. Each is made in its newest
/// version first; where that one is missing from the library or refused
/// ([`refused_version`]), the next older one is tried, and the first that answers is used
/// for that device for the rest of the NVML session (chosen once, logged once).
///
/// Not here: `nvmlInit_v2`, `nvmlDeviceGetCount_v2` and `nvmlDeviceGetHandleByIndex_v2`,
/// called inside nvml-wrapper; they are in every driver since R319 (NVML 5, 2013), older
/// than any driver a current CUDA or container toolkit runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Versioned {
    /// `nvmlDeviceGetMemoryInfo_v2` (R510+, with reserved memory), then
    /// `nvmlDeviceGetMemoryInfo` (no reserved memory; its used includes it).
    MemoryInfo,
    /// `nvmlDeviceGetComputeRunningProcesses_v3` (R510+), `_v2` (R470), then the v1 call
    /// (16-byte entries, no instance ids).
    ComputeProcesses,
    /// `nvmlDeviceGetMPSComputeRunningProcesses_v3`, `_v2`, then v1: MPS clients.
    MpsComputeProcesses,
    /// `nvmlDeviceGetCurrentClocksEventReasons` (R535+), then the older name
    /// `nvmlDeviceGetCurrentClocksThrottleReasons` (same bits).
    ClocksEventReasons,
    /// `nvmlDeviceGetPciInfo_v3`, `_v2`, then v1 (older ones: the bus id from `busIdLegacy`,
    /// its domain widened to 8 digits).
    PciInfo,
    /// `nvmlEventSetWait_v2` (R450+, with MIG instance ids), then `nvmlEventSetWait` (XIDs
    /// not attributable to a MIG instance).
    EventSetWait,
}

/// Every versioned call, in documentation order.
pub const VERSIONED: &[Versioned] = &[
    Versioned::MemoryInfo,
    Versioned::ComputeProcesses,
    Versioned::MpsComputeProcesses,
    Versioned::ClocksEventReasons,
    Versioned::PciInfo,
    Versioned::EventSetWait,
];

impl Versioned {
    /// The C names of its versions, newest first.
    pub fn versions(self) -> &'static [&'static str] {
        match self {
            Versioned::MemoryInfo => &["nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"],
            Versioned::ComputeProcesses => &[
                "nvmlDeviceGetComputeRunningProcesses_v3",
                "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses",
            ],
            Versioned::MpsComputeProcesses => &[
                "nvmlDeviceGetMPSComputeRunningProcesses_v3",
                "nvmlDeviceGetMPSComputeRunningProcesses_v2",
                "nvmlDeviceGetMPSComputeRunningProcesses",
            ],
            Versioned::ClocksEventReasons => &[
                "nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons",
            ],
            Versioned::PciInfo => &[
                "nvmlDeviceGetPciInfo_v3",
                "nvmlDeviceGetPciInfo_v2",
                "nvmlDeviceGetPciInfo",
            ],
            Versioned::EventSetWait => &["nvmlEventSetWait_v2", "nvmlEventSetWait"],
        }
    }

    /// What an older version gives less than the newest, for the log line and the docs.
    pub fn older_lacks(self) -> &'static str {
        match self {
            Versioned::MemoryInfo => "no reserved memory (nvidia.gpu.memory.reserved is absent) and used memory includes it, as nvidia-smi shows it on such drivers",
            Versioned::ComputeProcesses | Versioned::MpsComputeProcesses => "nothing the agent reads (PID and used memory)",
            Versioned::ClocksEventReasons => "nothing (the same bits under the older name)",
            Versioned::PciInfo => "nothing the agent reads (the bus id)",
            Versioned::EventSetWait => "no MIG instance ids: an XID is counted on the GPU, not on a MIG device",
        }
    }
}

/// Whether an error of a versioned call means that this version cannot be used here, so the
/// next older one should be tried: the symbol is missing from the library
/// (`FailedToLoadSymbol`), or the driver answers `NVML_ERROR_FUNCTION_NOT_FOUND`,
/// `NVML_ERROR_NOT_SUPPORTED`, `NVML_ERROR_ARGUMENT_VERSION_MISMATCH` (a struct version it
/// does not know) or `NVML_ERROR_UNKNOWN` (some WSL and R470 setups answer that for a
/// newer call while the older one works).
pub fn refused_version(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::FailedToLoadSymbol(_)
            | NvmlError::FunctionNotFound
            | NvmlError::NotSupported
            | NvmlError::Unknown
            | NvmlError::UnexpectedVariant(25)
    )
}

/// Framebuffer memory as one of the versions of `nvmlDeviceGetMemoryInfo` gives it, bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Memory {
    /// Total installed memory.
    pub total: u64,
    /// Used memory: v2 leaves the reserved memory out, v1 counts it in (total - free).
    pub used: u64,
    /// Unallocated memory.
    pub free: u64,
    /// Memory reserved by the driver and firmware; `None` from v1, which does not say.
    pub reserved: Option<u64>,
}

/// Framebuffer memory, `version` 0 = `nvmlDeviceGetMemoryInfo_v2` (through nvml-wrapper),
/// 1 = `nvmlDeviceGetMemoryInfo`.
///
/// # Errors
/// As NVML answers; `FailedToLoadSymbol` without the symbol.
pub(crate) fn memory_info(
    nvml: &Nvml,
    device: &Device<'_>,
    version: usize,
) -> Result<Memory, NvmlError> {
    if version == 0 {
        let m = device.memory_info()?;
        return Ok(Memory {
            total: m.total,
            used: m.used,
            free: m.free,
            reserved: Some(m.reserved),
        });
    }
    let sym = nvml_sym(nvml.lib().nvmlDeviceGetMemoryInfo.as_ref())?;
    // SAFETY: live handle; a zeroed nvmlMemory_t (three integers) is valid.
    let m = unsafe {
        let mut m: nvmlMemory_t = std::mem::zeroed();
        nvml_try(sym(device.handle(), &mut m))?;
        m
    };
    Ok(Memory {
        total: m.total,
        used: m.used,
        free: m.free,
        reserved: None,
    })
}

/// Clock-event (throttle) reasons bitmask with every bit as the driver gave it, `version` 0 =
/// `nvmlDeviceGetCurrentClocksEventReasons`, 1 = `nvmlDeviceGetCurrentClocksThrottleReasons`.
///
/// # Errors
/// As NVML answers; `FailedToLoadSymbol` without the symbol.
pub(crate) fn clocks_event_reasons(
    nvml: &Nvml,
    device: &Device<'_>,
    version: usize,
) -> Result<u64, NvmlError> {
    let lib = nvml.lib();
    let sym = if version == 0 {
        nvml_sym(lib.nvmlDeviceGetCurrentClocksEventReasons.as_ref())?
    } else {
        nvml_sym(lib.nvmlDeviceGetCurrentClocksThrottleReasons.as_ref())?
    };
    let mut bits: c_ulonglong = 0;
    // SAFETY: live handle, valid out-pointer.
    nvml_try(unsafe { sym(device.handle(), &mut bits) })?;
    Ok(bits)
}

/// PCI bus id (`domain:bus:device.function`, 8-digit domain as `nvmlDeviceGetPciInfo_v3`
/// writes it), `version` 0 = `_v3` (`busId`), 1 = `_v2`, 2 = v1 (both: `busIdLegacy`, the
/// first 16 bytes of the structure in every version, 4-digit domain widened to 8).
///
/// # Errors
/// As NVML answers; `FailedToLoadSymbol` without the symbol.
pub(crate) fn pci_bus_id(
    nvml: &Nvml,
    device: &Device<'_>,
    version: usize,
) -> Result<String, NvmlError> {
    if version == 0 {
        return Ok(device.pci_info()?.bus_id);
    }
    let lib = nvml.lib();
    let sym = if version == 1 {
        nvml_sym(lib.nvmlDeviceGetPciInfo_v2.as_ref())?
    } else {
        nvml_sym(lib.nvmlDeviceGetPciInfo.as_ref())?
    };
    // SAFETY: live handle; a zeroed nvmlPciInfo_t is valid and larger than the older
    // structures, so the driver writes within it.
    let info = unsafe {
        let mut info: nvmlPciInfo_t = std::mem::zeroed();
        nvml_try(sym(device.handle(), &mut info))?;
        info
    };
    let bytes: Vec<u8> = info.busIdLegacy.iter().map(|c| *c as u8).collect();
    let legacy = CStr::from_bytes_until_nul(&bytes)
        .ok()
        .and_then(|c| c.to_str().ok())
        .ok_or(NvmlError::Unknown)?;
    Ok(widen_bus_id(legacy))
}

/// `0000:18:00.0` (legacy, 4-digit domain) → `00000000:18:00.0`; other forms unchanged.
fn widen_bus_id(id: &str) -> String {
    match id.split_once(':') {
        Some((domain, rest)) if domain.len() == 4 => format!("0000{domain}:{rest}"),
        _ => id.to_string(),
    }
}

/// Byte layout of the entries `nvmlDeviceGetComputeRunningProcesses_v3` writes (and
/// `nvmlDeviceGetMPSComputeRunningProcesses_v3`, same structure).
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

/// Decodes `count` entries of `stride` bytes from `bytes` (native endianness, as the driver
/// wrote them): pid at 0, used memory at 8, in every version (16, 24 or 32 bytes). Entries
/// that do not fit in `bytes` are dropped.
pub(crate) fn decode_processes(bytes: &[u8], count: usize, stride: usize) -> Vec<RawProcess> {
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

/// Which running-process list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProcessList {
    /// Compute processes (`nvmlDeviceGetComputeRunningProcesses*`).
    Compute,
    /// MPS client processes (`nvmlDeviceGetMPSComputeRunningProcesses*`): non-empty only
    /// while the GPU runs an MPS server with clients.
    Mps,
}

/// The processes of `list` on `device`, through version `version` of the call (0 = `_v3`,
/// 1 = `_v2`, 2 = v1; see [`Versioned::ComputeProcesses`]). Two-call protocol: a NULL buffer
/// first (INSUFFICIENT_SIZE with the count, or SUCCESS for none), then a buffer with room for
/// 5 more (processes may start in between), retried twice if they still did not fit. `_v3`
/// entries are decoded with `layout`; every buffer has room for the largest layout.
///
/// # Errors
/// As NVML answers (`GpuLost`, `NotSupported`, …); `FailedToLoadSymbol` without the symbol.
pub(crate) fn process_list(
    nvml: &Nvml,
    device: &Device<'_>,
    list: ProcessList,
    version: usize,
    layout: ProcessInfoLayout,
) -> Result<Vec<RawProcess>, NvmlError> {
    let lib = nvml.lib();
    // SAFETY: the raw handle of a live `Device`, used only for calls of this `Nvml`.
    let handle: nvmlDevice_t = unsafe { device.handle() };
    // SAFETY (each closure): the handle comes from a live `Device` of this `Nvml`; the
    // buffer passed has room for `*n` entries of the largest layout.
    match (list, version) {
        (ProcessList::Compute, 0) => {
            let sym = nvml_sym(lib.nvmlDeviceGetComputeRunningProcesses_v3.as_ref())?;
            two_call(layout.stride(), |n, p| unsafe { sym(handle, n, p.cast()) })
        }
        (ProcessList::Compute, 1) => {
            let sym = nvml_sym(lib.nvmlDeviceGetComputeRunningProcesses_v2.as_ref())?;
            two_call(24, |n, p| unsafe { sym(handle, n, p.cast()) })
        }
        (ProcessList::Compute, _) => {
            let sym = nvml_sym(lib.nvmlDeviceGetComputeRunningProcesses.as_ref())?;
            two_call(16, |n, p| unsafe { sym(handle, n, p.cast()) })
        }
        (ProcessList::Mps, 0) => {
            let sym = nvml_sym(lib.nvmlDeviceGetMPSComputeRunningProcesses_v3.as_ref())?;
            two_call(layout.stride(), |n, p| unsafe { sym(handle, n, p.cast()) })
        }
        (ProcessList::Mps, 1) => {
            let sym = nvml_sym(lib.nvmlDeviceGetMPSComputeRunningProcesses_v2.as_ref())?;
            two_call(24, |n, p| unsafe { sym(handle, n, p.cast()) })
        }
        (ProcessList::Mps, _) => {
            let sym = nvml_sym(lib.nvmlDeviceGetMPSComputeRunningProcesses.as_ref())?;
            two_call(16, |n, p| unsafe { sym(handle, n, p.cast()) })
        }
    }
}

/// The two-call protocol of the process lists, entries `stride` bytes apart; `call(n, buf)`
/// makes the NVML call with count pointer `n` and buffer `buf` (NULL on the first call).
fn two_call(
    stride: usize,
    mut call: impl FnMut(*mut c_uint, *mut u64) -> nvmlReturn_t,
) -> Result<Vec<RawProcess>, NvmlError> {
    let mut count: c_uint = 0;
    let rc = call(&mut count, std::ptr::null_mut());
    if rc != nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
        nvml_try(rc)?;
        return Ok(Vec::new());
    }
    for _ in 0..3 {
        let capacity = count as usize + 5;
        // u64 words: 8-byte alignment, as the structures need.
        let mut buf = vec![0u64; capacity * MAX_STRIDE / 8];
        let mut n = capacity as c_uint;
        let rc = call(&mut n, buf.as_mut_ptr());
        if rc == nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE {
            count = n;
            continue;
        }
        nvml_try(rc)?;
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        return Ok(decode_processes(&bytes, (n as usize).min(capacity), stride));
    }
    Err(NvmlError::InsufficientSize(Some(count as usize)))
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

/// Waits up to `timeout_ms` for one event of `set`: `version` 0 = `nvmlEventSetWait_v2`,
/// 1 = `nvmlEventSetWait` (its structure has no instance ids: both `None`).
///
/// # Errors
/// `Timeout` when none came; as NVML answers otherwise.
pub(crate) fn wait_event(
    nvml: &Nvml,
    set: &EventSet<'_>,
    timeout_ms: u32,
    version: usize,
) -> Result<RawEvent, NvmlError> {
    let lib = nvml.lib();
    let sym = if version == 0 {
        nvml_sym(lib.nvmlEventSetWait_v2.as_ref())?
    } else {
        nvml_sym(lib.nvmlEventSetWait.as_ref())?
    };
    // SAFETY: a zeroed nvmlEventData_t is valid (pointers and integers) and at least as large
    // as the v1 structure; live set handle.
    let (rc, data) = unsafe {
        let mut data: nvmlEventData_t = std::mem::zeroed();
        (sym(set.handle(), &mut data, timeout_ms), data)
    };
    if rc != nvmlReturn_enum_NVML_SUCCESS {
        nvml_try(rc)?;
    }
    let id = |v: c_uint| (version == 0 && v != u32::MAX).then_some(v);
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
            let got = decode_processes(&bytes, 2, layout.stride());
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
    fn decodes_v1_entries() {
        // nvmlProcessInfo_v1_t: pid, (pad), usedGpuMemory; 16 bytes.
        let mut bytes = Vec::new();
        for (pid, used) in [(432u32, 1_184_890_880u64), (7001, u64::MAX)] {
            let mut e = vec![0u8; 16];
            e[0..4].copy_from_slice(&pid.to_ne_bytes());
            e[8..16].copy_from_slice(&used.to_ne_bytes());
            bytes.extend(e);
        }
        let got = decode_processes(&bytes, 2, 16);
        assert_eq!(got[0].pid, 432);
        assert_eq!(got[0].used_memory_bytes, Some(1_184_890_880));
        assert_eq!((got[1].pid, got[1].used_memory_bytes), (7001, None));
    }

    #[test]
    fn legacy_bus_ids_are_widened() {
        assert_eq!(widen_bus_id("0000:18:00.0"), "00000000:18:00.0");
        assert_eq!(widen_bus_id("00000000:18:00.0"), "00000000:18:00.0");
    }

    #[test]
    fn refused_versions() {
        assert!(refused_version(&NvmlError::FunctionNotFound));
        assert!(refused_version(&NvmlError::NotSupported));
        assert!(refused_version(&NvmlError::Unknown));
        assert!(refused_version(&NvmlError::UnexpectedVariant(25)));
        assert!(!refused_version(&NvmlError::GpuLost));
        assert!(!refused_version(&NvmlError::NoPermission));
        assert!(!refused_version(&NvmlError::Timeout));
        for v in VERSIONED {
            assert!(v.versions().len() >= 2, "{v:?}");
        }
    }

    #[test]
    fn the_wrong_stride_misreads_the_second_entry() {
        // What nvml-wrapper does on an R535 driver: 32-byte entries read 24 bytes apart.
        let mut bytes = entry(32, 432, 1_184_890_880, u32::MAX, u32::MAX);
        bytes.extend(entry(32, 7001, 2_000_000, 1, 0));
        let misread = decode_processes(&bytes, 2, ProcessInfoLayout::V2.stride());
        assert_ne!(misread[1].pid, 7001);
        let right = decode_processes(&bytes, 2, ProcessInfoLayout::V3CcProtected.stride());
        assert_eq!(right[1].pid, 7001);
    }
}
