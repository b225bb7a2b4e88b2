//! Exported NVML symbols: init, system, enumeration, device getters, MIG.

use std::ffi::{c_char, CStr};

use crate::rc::*;
use crate::runtime::{
    self, dev_call, device_found, guard, initialized, out, out_str, sys_call, Ctx, Ret,
};
use crate::scenario::{parse_bus_id, Counter};
use crate::types::*;

/// Read a required value from the row in force; absent means NOT_SUPPORTED.
macro_rules! row {
    ($c:expr, $field:ident) => {
        $c.row()?.$field.ok_or(NOT_SUPPORTED)?
    };
}

// ---------------------------------------------------------------- init, system

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> u32 {
    runtime::init("nvmlInit_v2")
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(_flags: u32) -> u32 {
    runtime::init("nvmlInitWithFlags")
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> u32 {
    runtime::shutdown("nvmlShutdown")
}

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: u32) -> *const c_char {
    runtime::count_call("nvmlErrorString");
    error_string(result).as_ptr() as *const c_char
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: u32) -> u32 {
    sys_call("nvmlSystemGetDriverVersion", |l, _| {
        out_str(version, length, &l.scenario.driver_version)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: u32) -> u32 {
    sys_call("nvmlSystemGetNVMLVersion", |l, _| {
        out_str(version, length, &l.scenario.nvml_version)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(v: *mut i32) -> u32 {
    sys_call("nvmlSystemGetCudaDriverVersion", |l, _| {
        out(v, l.scenario.cuda_driver_version)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(v: *mut i32) -> u32 {
    sys_call("nvmlSystemGetCudaDriverVersion_v2", |l, _| {
        out(v, l.scenario.cuda_driver_version)
    })
}

// ---------------------------------------------------------------- enumeration

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut u32) -> u32 {
    sys_call("nvmlDeviceGetCount_v2", |l, _| {
        out(count, l.physical_count as u32)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: u32, device: *mut Device) -> u32 {
    const SYM: &str = "nvmlDeviceGetHandleByIndex_v2";
    guard(SYM, || {
        let l = initialized()?;
        let e = runtime::elapsed(l);
        let idx = index as usize;
        if idx >= l.physical_count {
            runtime::apply_faults(l, SYM, None, e)?;
            return Err(INVALID_ARGUMENT);
        }
        device_found(l, SYM, idx, e)?;
        out(device, l.handle(idx))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(
    uuid: *const c_char,
    device: *mut Device,
) -> u32 {
    const SYM: &str = "nvmlDeviceGetHandleByUUID";
    guard(SYM, || {
        let l = initialized()?;
        let e = runtime::elapsed(l);
        if uuid.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let want = CStr::from_ptr(uuid).to_string_lossy();
        let Some(id) = l
            .all
            .iter()
            .position(|d| d.spec.uuid.as_deref() == Some(want.as_ref()))
        else {
            runtime::apply_faults(l, SYM, None, e)?;
            return Err(NOT_FOUND);
        };
        device_found(l, SYM, id, e)?;
        out(device, l.handle(id))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut Device,
) -> u32 {
    const SYM: &str = "nvmlDeviceGetHandleByPciBusId_v2";
    guard(SYM, || {
        let l = initialized()?;
        let e = runtime::elapsed(l);
        if bus_id.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let want = CStr::from_ptr(bus_id).to_string_lossy().to_string();
        let want = parse_bus_id(&want).ok_or(INVALID_ARGUMENT)?;
        let Some(id) = l.all[..l.physical_count]
            .iter()
            .position(|d| d.spec.pci_bus_id.as_deref().and_then(parse_bus_id) == Some(want))
        else {
            runtime::apply_faults(l, SYM, None, e)?;
            return Err(NOT_FOUND);
        };
        device_found(l, SYM, id, e)?;
        out(device, l.handle(id))
    })
}

// ---------------------------------------------------------------- static facts

fn physical_only(c: &Ctx) -> Ret {
    if c.dev.is_mig() {
        Err(NOT_SUPPORTED)
    } else {
        Ok(())
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: Device, index: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetIndex", device, |c| {
        physical_only(c)?;
        out(index, c.dev.phys_index as u32)
    })
}

unsafe fn static_str(
    sym: &'static str,
    device: Device,
    buf: *mut c_char,
    len: u32,
    pick: fn(&crate::scenario::DeviceSpec) -> Option<&String>,
) -> u32 {
    dev_call(sym, device, |c| {
        let s = pick(&c.dev.spec).ok_or(NOT_SUPPORTED)?;
        out_str(buf, len, s)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(device: Device, name: *mut c_char, length: u32) -> u32 {
    static_str("nvmlDeviceGetName", device, name, length, |s| {
        s.name.as_ref()
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(device: Device, uuid: *mut c_char, length: u32) -> u32 {
    static_str("nvmlDeviceGetUUID", device, uuid, length, |s| {
        s.uuid.as_ref()
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetSerial(
    device: Device,
    serial: *mut c_char,
    length: u32,
) -> u32 {
    static_str("nvmlDeviceGetSerial", device, serial, length, |s| {
        s.serial.as_ref()
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetVbiosVersion(
    device: Device,
    version: *mut c_char,
    length: u32,
) -> u32 {
    static_str("nvmlDeviceGetVbiosVersion", device, version, length, |s| {
        s.vbios_version.as_ref()
    })
}

fn copy_c(dst: &mut [c_char], s: &str) {
    let max = dst.len().saturating_sub(1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(max)) {
        *d = b as c_char;
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v3(device: Device, pci: *mut PciInfo) -> u32 {
    dev_call("nvmlDeviceGetPciInfo_v3", device, |c| {
        pci_info(c, pci, true)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo_v2(device: Device, pci: *mut PciInfo) -> u32 {
    dev_call("nvmlDeviceGetPciInfo_v2", device, |c| {
        pci_info(c, pci, false)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPciInfo(device: Device, pci: *mut PciInfo) -> u32 {
    dev_call("nvmlDeviceGetPciInfo", device, |c| pci_info(c, pci, false))
}

/// Fills `pci`: with `v3`, the whole `nvmlPciInfo_t`; else as the older calls do, only its
/// first 36 bytes (`busIdLegacy`, domain, bus, device, ids), the part every version shares.
unsafe fn pci_info(c: &Ctx, pci: *mut PciInfo, v3: bool) -> Ret {
    let bus_id = c.dev.spec.pci_bus_id.as_ref().ok_or(NOT_SUPPORTED)?;
    let (domain, bus, dev) = parse_bus_id(bus_id).ok_or(NOT_SUPPORTED)?;
    if pci.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let mut info = PciInfo {
        busIdLegacy: [0; 16],
        domain,
        bus,
        device: dev,
        pciDeviceId: c.dev.spec.pci_device_id.unwrap_or(0),
        pciSubSystemId: c.dev.spec.pci_sub_system_id.unwrap_or(0),
        busId: [0; 32],
    };
    copy_c(&mut info.busId, bus_id);
    // legacy form: 4-digit domain
    let func = bus_id.rsplit('.').next().unwrap_or("0");
    let legacy = format!("{:04x}:{:02x}:{:02x}.{}", domain & 0xffff, bus, dev, func);
    copy_c(&mut info.busIdLegacy, &legacy.to_uppercase());
    if v3 {
        pci.write(info);
    } else {
        let p = &mut *pci;
        p.busIdLegacy = info.busIdLegacy;
        p.domain = info.domain;
        p.bus = info.bus;
        p.device = info.device;
        p.pciDeviceId = info.pciDeviceId;
        p.pciSubSystemId = info.pciSubSystemId;
    }
    Ok(())
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMinorNumber(device: Device, minor: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetMinorNumber", device, |c| {
        out(minor, c.dev.spec.minor_number.ok_or(NOT_SUPPORTED)?)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetBrand(device: Device, brand: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetBrand", device, |c| {
        out(brand, c.dev.spec.brand.ok_or(NOT_SUPPORTED)?)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetArchitecture(device: Device, arch: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetArchitecture", device, |c| {
        out(arch, c.dev.spec.architecture.ok_or(NOT_SUPPORTED)?)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPersistenceMode(device: Device, mode: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetPersistenceMode", device, |c| {
        let m = c.dev.spec.persistence_mode.ok_or(NOT_SUPPORTED)?;
        out(mode, u32::from(m))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: Device,
    clock_type: u32,
    clock: *mut u32,
) -> u32 {
    dev_call("nvmlDeviceGetMaxClockInfo", device, |c| {
        let m = c.dev.spec.max_clocks_mhz.ok_or(NOT_SUPPORTED)?;
        let v = match clock_type {
            0 => m.graphics,
            1 => m.sm,
            2 => m.mem,
            3 => m.video,
            _ => return Err(INVALID_ARGUMENT),
        };
        out(clock, v.ok_or(NOT_SUPPORTED)?)
    })
}

// ---------------------------------------------------------------- timeline values

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(device: Device, u: *mut Utilization) -> u32 {
    dev_call("nvmlDeviceGetUtilizationRates", device, |c| {
        let gpu = row!(c, util_gpu);
        let memory = row!(c, util_mem);
        out(u, Utilization { gpu, memory })
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: Device,
    util: *mut u32,
    period_us: *mut u32,
) -> u32 {
    dev_call("nvmlDeviceGetEncoderUtilization", device, |c| {
        let v = row!(c, util_enc);
        if period_us.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        out(util, v)?;
        out(
            period_us,
            c.dev.spec.codec_sampling_period_us.unwrap_or(100_000),
        )
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: Device,
    util: *mut u32,
    period_us: *mut u32,
) -> u32 {
    dev_call("nvmlDeviceGetDecoderUtilization", device, |c| {
        let v = row!(c, util_dec);
        if period_us.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        out(util, v)?;
        out(
            period_us,
            c.dev.spec.codec_sampling_period_us.unwrap_or(100_000),
        )
    })
}

/// (total, reserved, free, used as v2 reports it, used as v1 reports it)
fn memory(c: &Ctx) -> Result<(u64, u64, u64, u64, u64), u32> {
    let r = c.row()?;
    let total = r.mem_total.ok_or(NOT_SUPPORTED)?;
    let used_v1 = r.mem_used.ok_or(NOT_SUPPORTED)?;
    let reserved = r.mem_reserved.unwrap_or(0);
    let free = r.mem_free.unwrap_or(total.saturating_sub(used_v1));
    Ok((
        total,
        reserved,
        free,
        used_v1.saturating_sub(reserved),
        used_v1,
    ))
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: Device, m: *mut Memory) -> u32 {
    dev_call("nvmlDeviceGetMemoryInfo", device, |c| {
        let (total, _, free, _, used) = memory(c)?;
        out(m, Memory { total, free, used })
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: Device, m: *mut MemoryV2) -> u32 {
    dev_call("nvmlDeviceGetMemoryInfo_v2", device, |c| {
        if m.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        if (*m).version != MEMORY_V2_VERSION {
            return Err(ARGUMENT_VERSION_MISMATCH);
        }
        let (total, reserved, free, used, _) = memory(c)?;
        m.write(MemoryV2 {
            version: MEMORY_V2_VERSION,
            total,
            reserved,
            free,
            used,
        });
        Ok(())
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: Device,
    sensor: u32,
    temp: *mut u32,
) -> u32 {
    dev_call("nvmlDeviceGetTemperature", device, |c| {
        if sensor != 0 {
            return Err(INVALID_ARGUMENT);
        }
        out(temp, row!(c, temp_gpu))
    })
}

const FI_DEV_MEMORY_TEMP: u32 = 82;

/// One field's answer: (valueType, raw 8 bytes) or a return code.
fn field_value(c: &Ctx, id: u32) -> Result<(u32, u64), u32> {
    let key = format!("field:{id}");
    runtime::apply_faults(c.l, &key, Some(c.dev.phys_index), c.e)?;
    c.static_error(&key)?;
    let r = c.row()?;
    if let Some(n) = r.fields.as_ref().and_then(|f| f.get(&id.to_string())) {
        if let Some(u) = n.as_u64() {
            return Ok((VALUE_TYPE_UNSIGNED_LONG_LONG, u));
        }
        if let Some(i) = n.as_i64() {
            return Ok((VALUE_TYPE_SIGNED_LONG_LONG, i as u64));
        }
        if let Some(f) = n.as_f64() {
            return Ok((VALUE_TYPE_DOUBLE, f.to_bits()));
        }
    }
    if id == FI_DEV_MEMORY_TEMP {
        if let Some(t) = r.temp_mem {
            return Ok((VALUE_TYPE_UNSIGNED_INT, u64::from(t)));
        }
    }
    Err(NOT_SUPPORTED)
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: Device,
    count: i32,
    values: *mut FieldValue,
) -> u32 {
    dev_call("nvmlDeviceGetFieldValues", device, |c| {
        if count <= 0 || values.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        let now = runtime::now_wall_us() as i64;
        for i in 0..count as usize {
            let fv = &mut *values.add(i);
            fv.timestamp = now;
            fv.latencyUsec = 0;
            match field_value(c, fv.fieldId) {
                Ok((ty, raw)) => {
                    fv.valueType = ty;
                    fv.value = raw;
                    fv.nvmlReturn = SUCCESS;
                }
                Err(code) => {
                    fv.value = 0;
                    fv.nvmlReturn = code;
                }
            }
        }
        Ok(())
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(device: Device, power: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetPowerUsage", device, |c| {
        out(power, row!(c, power_mw))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(device: Device, limit: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetEnforcedPowerLimit", device, |c| {
        out(limit, row!(c, power_limit_mw))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPowerManagementLimit(device: Device, limit: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetPowerManagementLimit", device, |c| {
        let r = c.row()?;
        let v = r
            .power_mgmt_limit_mw
            .or(r.power_limit_mw)
            .ok_or(NOT_SUPPORTED)?;
        out(limit, v)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: Device,
    energy: *mut u64,
) -> u32 {
    dev_call("nvmlDeviceGetTotalEnergyConsumption", device, |c| {
        out(energy, c.counter(Counter::Energy)?)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: Device,
    clock_type: u32,
    clock: *mut u32,
) -> u32 {
    dev_call("nvmlDeviceGetClockInfo", device, |c| {
        let r = c.row()?;
        let v = match clock_type {
            0 => r.clock_graphics_mhz,
            1 => r.clock_sm_mhz,
            2 => r.clock_mem_mhz,
            3 => r.clock_video_mhz,
            _ => return Err(INVALID_ARGUMENT),
        };
        out(clock, v.ok_or(NOT_SUPPORTED)?)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: Device,
    reasons: *mut u64,
) -> u32 {
    dev_call("nvmlDeviceGetCurrentClocksThrottleReasons", device, |c| {
        out(reasons, row!(c, clocks_event_reasons))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksEventReasons(
    device: Device,
    reasons: *mut u64,
) -> u32 {
    dev_call("nvmlDeviceGetCurrentClocksEventReasons", device, |c| {
        out(reasons, row!(c, clocks_event_reasons))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPerformanceState(device: Device, pstate: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetPerformanceState", device, |c| {
        out(pstate, row!(c, pstate))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: Device,
    error_type: u32,
    counter_type: u32,
    count: *mut u64,
) -> u32 {
    dev_call("nvmlDeviceGetTotalEccErrors", device, |c| {
        let counter = match (error_type, counter_type) {
            (0, 0) => Counter::EccCorrected,
            (1, 0) => Counter::EccUncorrected,
            (0, 1) => Counter::EccCorrectedAggregate,
            (1, 1) => Counter::EccUncorrectedAggregate,
            _ => return Err(INVALID_ARGUMENT),
        };
        out(count, c.counter(counter)?)
    })
}

/// The two-call protocol of the running-process lists; `write(i, entry)` writes entry `i`
/// in the version's layout.
unsafe fn process_list(
    list: &[Vec<u64>],
    count: *mut u32,
    buffer_is_null: bool,
    mut write: impl FnMut(usize, &[u64]),
) -> Ret {
    if count.is_null() {
        return Err(INVALID_ARGUMENT);
    }
    let n = list.len();
    if n == 0 {
        *count = 0;
        return Ok(());
    }
    if buffer_is_null || (*count as usize) < n {
        *count = n as u32;
        return Err(INSUFFICIENT_SIZE);
    }
    for (i, p) in list.iter().enumerate() {
        write(i, p);
    }
    *count = n as u32;
    Ok(())
}

fn as_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(NO_VALUE)
}

/// `nvmlProcessInfo_v2_t` entries (the `_v2` and `_v3` calls).
unsafe fn processes(list: &[Vec<u64>], count: *mut u32, infos: *mut ProcessInfo) -> Ret {
    process_list(list, count, infos.is_null(), |i, p| {
        infos.add(i).write(ProcessInfo {
            pid: as_u32(p[0]),
            usedGpuMemory: p[1],
            gpuInstanceId: p.get(2).map_or(NO_VALUE, |v| as_u32(*v)),
            computeInstanceId: p.get(3).map_or(NO_VALUE, |v| as_u32(*v)),
        })
    })
}

/// `nvmlProcessInfo_v1_t` entries (the v1 calls).
unsafe fn processes_v1(list: &[Vec<u64>], count: *mut u32, infos: *mut ProcessInfoV1) -> Ret {
    process_list(list, count, infos.is_null(), |i, p| {
        infos.add(i).write(ProcessInfoV1 {
            pid: as_u32(p[0]),
            usedGpuMemory: p[1],
        })
    })
}

/// The row's MPS client list; absent: none (SUCCESS, count 0), as on a GPU without MPS.
fn mps_list(c: &Ctx) -> Vec<Vec<u64>> {
    match c.dev.timeline.at(c.e) {
        Some((r, _)) => r.mps_processes.clone().unwrap_or_default(),
        None => Vec::new(),
    }
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(
    device: Device,
    count: *mut u32,
    infos: *mut ProcessInfo,
) -> u32 {
    dev_call("nvmlDeviceGetComputeRunningProcesses_v2", device, |c| {
        let list = c.row()?.processes.as_ref().ok_or(NOT_SUPPORTED)?;
        processes(list, count, infos)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(
    device: Device,
    count: *mut u32,
    infos: *mut ProcessInfoV1,
) -> u32 {
    dev_call("nvmlDeviceGetComputeRunningProcesses", device, |c| {
        let list = c.row()?.processes.as_ref().ok_or(NOT_SUPPORTED)?;
        processes_v1(list, count, infos)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v3(
    device: Device,
    count: *mut u32,
    infos: *mut ProcessInfo,
) -> u32 {
    dev_call("nvmlDeviceGetMPSComputeRunningProcesses_v3", device, |c| {
        processes(&mps_list(c), count, infos)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses_v2(
    device: Device,
    count: *mut u32,
    infos: *mut ProcessInfo,
) -> u32 {
    dev_call("nvmlDeviceGetMPSComputeRunningProcesses_v2", device, |c| {
        processes(&mps_list(c), count, infos)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMPSComputeRunningProcesses(
    device: Device,
    count: *mut u32,
    infos: *mut ProcessInfoV1,
) -> u32 {
    dev_call("nvmlDeviceGetMPSComputeRunningProcesses", device, |c| {
        processes_v1(&mps_list(c), count, infos)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: Device,
    count: *mut u32,
    infos: *mut ProcessInfo,
) -> u32 {
    dev_call("nvmlDeviceGetComputeRunningProcesses_v3", device, |c| {
        let list = c.row()?.processes.as_ref().ok_or(NOT_SUPPORTED)?;
        processes(list, count, infos)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: Device,
    count: *mut u32,
    infos: *mut ProcessInfo,
) -> u32 {
    dev_call("nvmlDeviceGetGraphicsRunningProcesses_v3", device, |c| {
        let empty = Vec::new();
        let list = match c.dev.timeline.at(c.e) {
            Some((r, _)) => r.graphics_processes.as_ref().unwrap_or(&empty),
            None => &empty,
        };
        processes(list, count, infos)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed(device: Device, speed: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetFanSpeed", device, |c| {
        out(speed, row!(c, fan_speed_pct))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetFanSpeed_v2(
    device: Device,
    fan: u32,
    speed: *mut u32,
) -> u32 {
    dev_call("nvmlDeviceGetFanSpeed_v2", device, |c| {
        let v = row!(c, fan_speed_pct);
        if fan != 0 {
            return Err(INVALID_ARGUMENT);
        }
        out(speed, v)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: Device,
    counter: u32,
    value: *mut u32,
) -> u32 {
    dev_call("nvmlDeviceGetPcieThroughput", device, |c| {
        let r = c.row()?;
        let v = match counter {
            0 => r.pcie_tx_kbps,
            1 => r.pcie_rx_kbps,
            _ => return Err(INVALID_ARGUMENT),
        };
        out(value, v.ok_or(NOT_SUPPORTED)?)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: Device,
    corr: *mut u32,
    unc: *mut u32,
    pending: *mut u32,
    failure: *mut u32,
) -> u32 {
    dev_call("nvmlDeviceGetRemappedRows", device, |c| {
        let [a, b, p, f] = row!(c, remapped_rows);
        if corr.is_null() || unc.is_null() || pending.is_null() || failure.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        corr.write(a);
        unc.write(b);
        pending.write(p);
        failure.write(f);
        Ok(())
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: Device,
    samples: *mut ProcessUtilizationSample,
    count: *mut u32,
    last_seen: u64,
) -> u32 {
    dev_call("nvmlDeviceGetProcessUtilization", device, |c| {
        if count.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        // samples are taken every process_util_period_s of scenario time
        let period = c.dev.spec.process_util_period_s.unwrap_or(1.0);
        let tick = (c.e / period).floor() * period;
        let (row, _) = c.dev.timeline.at(tick).ok_or(NOT_SUPPORTED)?;
        let list = row.process_util.as_ref().ok_or(NOT_SUPPORTED)?;
        let ts = runtime::wall_us_at(c.l, tick);
        if list.is_empty() || ts <= last_seen {
            return Err(NOT_FOUND);
        }
        let n = list.len();
        if samples.is_null() || (*count as usize) < n {
            *count = n as u32;
            return Err(INSUFFICIENT_SIZE);
        }
        for (i, p) in list.iter().enumerate() {
            samples.add(i).write(ProcessUtilizationSample {
                pid: p[0] as u32,
                timeStamp: ts,
                smUtil: p[1] as u32,
                memUtil: p[2] as u32,
                encUtil: p[3] as u32,
                decUtil: p[4] as u32,
            });
        }
        *count = n as u32;
        Ok(())
    })
}

// ---------------------------------------------------------------- MIG

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: Device,
    current: *mut u32,
    pending: *mut u32,
) -> u32 {
    dev_call("nvmlDeviceGetMigMode", device, |c| {
        physical_only(c)?;
        let mig = c.dev.spec.mig.as_ref().ok_or(NOT_SUPPORTED)?;
        if pending.is_null() {
            return Err(INVALID_ARGUMENT);
        }
        out(current, mig.current)?;
        out(pending, mig.pending.unwrap_or(mig.current))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: Device, count: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetMaxMigDeviceCount", device, |c| {
        physical_only(c)?;
        let mig = c.dev.spec.mig.as_ref().ok_or(NOT_SUPPORTED)?;
        out(count, mig.max_devices.unwrap_or(7))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: Device,
    index: u32,
    mig_device: *mut Device,
) -> u32 {
    dev_call("nvmlDeviceGetMigDeviceHandleByIndex", device, |c| {
        if c.dev.is_mig() {
            return Err(INVALID_ARGUMENT);
        }
        let mig = c.dev.spec.mig.as_ref().ok_or(NOT_SUPPORTED)?;
        if index >= mig.max_devices.unwrap_or(7) {
            return Err(INVALID_ARGUMENT);
        }
        if mig.current != 1 {
            return Err(NOT_FOUND);
        }
        let id = *c.dev.mig_children.get(index as usize).ok_or(NOT_FOUND)?;
        out(mig_device, c.l.handle(id))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceIsMigDeviceHandle(device: Device, is_mig: *mut u32) -> u32 {
    dev_call("nvmlDeviceIsMigDeviceHandle", device, |c| {
        out(is_mig, u32::from(c.dev.is_mig()))
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: Device,
    device: *mut Device,
) -> u32 {
    dev_call(
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        mig_device,
        |c| {
            let parent = c.dev.parent.ok_or(INVALID_ARGUMENT)?;
            out(device, c.l.handle(parent))
        },
    )
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetGpuInstanceId(device: Device, id: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetGpuInstanceId", device, |c| {
        out(id, c.dev.spec.gpu_instance_id.ok_or(NOT_SUPPORTED)?)
    })
}

/// # Safety
/// C ABI.
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeInstanceId(device: Device, id: *mut u32) -> u32 {
    dev_call("nvmlDeviceGetComputeInstanceId", device, |c| {
        out(id, c.dev.spec.compute_instance_id.ok_or(NOT_SUPPORTED)?)
    })
}
