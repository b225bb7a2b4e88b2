//! What an NVML error is: its `NVML_ERROR_*` name ([`error_code`]), what it means for the
//! field and the device ([`classify`]), and the fallback from a newer versioned call to an
//! older one ([`call_versioned`]). Shared by the sampler ([`super::read`]) and the event
//! watcher ([`super::event_watcher`]).

use nvml_wrapper::error::NvmlError;

use super::raw::{self, Versioned};

/// The `NVML_ERROR_*` name of an error (the `error.type` of `gpu_sidecar.nvml.errors`).
/// Errors of the wrapper itself map to the NVML code closest in meaning: a library that
/// cannot be loaded is `NVML_ERROR_LIBRARY_NOT_FOUND`, a missing symbol
/// `NVML_ERROR_FUNCTION_NOT_FOUND`; a code the wrapper does not know is `NVML_ERROR_<n>`.
pub(crate) fn error_code(e: &NvmlError) -> String {
    let name = match e {
        NvmlError::Uninitialized => "UNINITIALIZED",
        NvmlError::InvalidArg => "INVALID_ARGUMENT",
        NvmlError::NotSupported => "NOT_SUPPORTED",
        NvmlError::NoPermission => "NO_PERMISSION",
        NvmlError::NotFound => "NOT_FOUND",
        NvmlError::InsufficientSize(_) => "INSUFFICIENT_SIZE",
        NvmlError::InsufficientPower => "INSUFFICIENT_POWER",
        NvmlError::DriverNotLoaded => "DRIVER_NOT_LOADED",
        NvmlError::Timeout => "TIMEOUT",
        NvmlError::IrqIssue => "IRQ_ISSUE",
        NvmlError::LibraryNotFound | NvmlError::LibloadingError(_) => "LIBRARY_NOT_FOUND",
        NvmlError::FunctionNotFound | NvmlError::FailedToLoadSymbol(_) => "FUNCTION_NOT_FOUND",
        NvmlError::CorruptedInfoROM => "CORRUPTED_INFOROM",
        NvmlError::GpuLost => "GPU_IS_LOST",
        NvmlError::ResetRequired => "RESET_REQUIRED",
        NvmlError::OperatingSystem => "OPERATING_SYSTEM",
        NvmlError::LibRmVersionMismatch => "LIB_RM_VERSION_MISMATCH",
        NvmlError::InUse => "IN_USE",
        NvmlError::InsufficientMemory => "MEMORY",
        NvmlError::NoData => "NO_DATA",
        NvmlError::VgpuEccNotSupported => "VGPU_ECC_NOT_SUPPORTED",
        NvmlError::UnexpectedVariant(code) => return format!("NVML_ERROR_{code}"),
        // Errors of the wrapper's own conversions (strings, bit sets, PCI info).
        _ => "UNKNOWN",
    };
    format!("NVML_ERROR_{name}")
}

/// Calls version `*chosen` of `v` (`call(k)` makes version `k`), then the older ones while a
/// version is missing or refused ([`raw::refused_version`]). The first older version that
/// answers becomes `*chosen` for the next calls, and one line says so (`index`, `uuid` name
/// the device; `None` for a library-wide call).
///
/// Returns the answer or the error to judge (the newest version's, unless an older one
/// failed for another reason, such as a lost GPU), and, when it switched, the newer
/// version's refusal (to be counted under its name).
pub(crate) fn call_versioned<T>(
    chosen: &mut usize,
    v: Versioned,
    index: Option<u32>,
    uuid: &str,
    mut call: impl FnMut(usize) -> Result<T, NvmlError>,
) -> (Result<T, NvmlError>, Option<NvmlError>) {
    let names = v.versions();
    let start = (*chosen).min(names.len() - 1);
    let mut error: Option<NvmlError> = None;
    for k in start..names.len() {
        match call(k) {
            Ok(t) => {
                if k == start {
                    return (Ok(t), None);
                }
                let refused = error.take();
                *chosen = k;
                tracing::info!(
                    gpu = index,
                    uuid,
                    call = names[start],
                    error = %refused.as_ref().map(|e| e.to_string()).unwrap_or_default(),
                    instead = names[k],
                    "this driver does not answer the newer NVML call; the older one answers and is used from now on. It gives {}",
                    v.older_lacks()
                );
                return (Ok(t), refused);
            }
            Err(e) => {
                let go_on = raw::refused_version(&e);
                if error.is_none() || !go_on {
                    error = Some(e);
                }
                if !go_on {
                    break;
                }
            }
        }
    }
    (Err(error.expect("at least one version was called")), None)
}

/// What one call's error means for the field and the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorClass {
    /// Unsupported here: absent for the rest of the session, not asked again.
    Unsupported,
    /// The device is gone (`GPU_IS_LOST`, `RESET_REQUIRED`).
    Lost,
    /// A failure this tick: absent now, asked again next tick.
    Transient,
}

pub(crate) fn classify(e: &NvmlError) -> ErrorClass {
    match e {
        NvmlError::NotSupported
        | NvmlError::InvalidArg
        | NvmlError::NotFound
        | NvmlError::FailedToLoadSymbol(_)
        | NvmlError::FunctionNotFound => ErrorClass::Unsupported,
        NvmlError::GpuLost | NvmlError::ResetRequired => ErrorClass::Lost,
        _ => ErrorClass::Transient,
    }
}
