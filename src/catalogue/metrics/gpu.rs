//! The GPU metrics: one [`MetricDef`] per metric read from a [`DeviceSample`], with the
//! pure mapping from the sample to data points.

use opentelemetry::KeyValue;

use super::{device_hw_state, Fold, Instrument, MetricDef, Number, Point};
use crate::catalogue::attributes::{
    self, ClockType, GpuTask, HwState, IoDirection, MemoryErrorType, Pipe, SensorLocation, TensorOp,
};
use crate::catalogue::clocks_event_reasons::CLOCKS_EVENT_REASONS;
use crate::sampling::bounds;
use crate::sampling::{
    DeviceSample, DeviceState, GpmMetrics, ProcessSample, ProcessUtilization, SampleGroup,
};

fn kv(k: &'static str, v: &'static str) -> KeyValue {
    KeyValue::new(k, v)
}

fn push(out: &mut Vec<Point>, value: Option<f64>, attributes: Vec<KeyValue>) {
    if let Some(value) = value {
        out.push(Point { value, attributes });
    }
}

/// `process.pid` and, where known, `process.executable.name`.
fn process_attributes(p: &ProcessSample) -> Vec<KeyValue> {
    let mut v = vec![KeyValue::new(attributes::PROCESS_PID, i64::from(p.pid))];
    if let Some(name) = &p.executable_name {
        v.push(KeyValue::new(
            attributes::PROCESS_EXECUTABLE_NAME,
            name.clone(),
        ));
    }
    v
}

/// Pushes one point per listed process, `value` of it, with its attributes plus `extra`.
fn per_process(
    d: &DeviceSample,
    out: &mut Vec<Point>,
    value: impl Fn(&ProcessSample) -> Option<f64>,
    extra: &[KeyValue],
) {
    for p in d.processes.iter().flatten() {
        let mut attributes = process_attributes(p);
        attributes.extend_from_slice(extra);
        push(out, value(p), attributes);
    }
}

/// Every metric the agent exports, in documentation order.
pub static CATALOGUE: &[MetricDef] = &[
    MetricDef {
        name: "hw.gpu.utilization",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Fast,
        unit: "1",
        description: "Fraction of the last sample period during which the GPU engine was busy.",
        attributes: "`hw.gpu.task` = `general` | `encoder` | `decoder`",
        source: "`nvmlDeviceGetUtilizationRates` (`.gpu`), `nvmlDeviceGetEncoderUtilization`, `nvmlDeviceGetDecoderUtilization`; percent / 100",
        bounds: &[&bounds::UTILIZATION_GPU, &bounds::UTILIZATION_ENCODER, &bounds::UTILIZATION_DECODER],
        extract: |d, out| {
            push(out, d.utilization_gpu_ratio(), vec![GpuTask::General.kv()]);
            push(out, d.utilization_encoder_ratio(), vec![GpuTask::Encoder.kv()]);
            push(out, d.utilization_decoder_ratio(), vec![GpuTask::Decoder.kv()]);
        },
        fold: Fold::None,
    },
    MetricDef {
        name: "hw.gpu.memory.usage",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "By",
        description: "GPU memory used.",
        attributes: "",
        source: "`nvmlDeviceGetMemoryInfo_v2` (`.used`), bytes; on drivers without it `nvmlDeviceGetMemoryInfo` (v1: `.used` includes the reserved memory; see [Older drivers](operations.md#older-drivers))",
        bounds: &[&bounds::MEMORY_PART],
        extract: |d, out| push(out, d.memory_used_bytes.map(|b| b as f64), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "hw.gpu.memory.limit",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "By",
        description: "Size of the GPU memory.",
        attributes: "",
        source: "`nvmlDeviceGetMemoryInfo_v2` (`.total`), bytes (or v1, as above)",
        bounds: &[&bounds::MEMORY_TOTAL],
        extract: |d, out| push(out, d.memory_total_bytes.map(|b| b as f64), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "hw.gpu.memory.utilization",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Fast,
        unit: "1",
        description: "Fraction of GPU memory used (used / total).",
        attributes: "",
        source: "`nvmlDeviceGetMemoryInfo_v2` (or v1, as above), `.used / .total`",
        bounds: &[&bounds::MEMORY_TOTAL, &bounds::MEMORY_PART],
        extract: |d, out| push(out, d.memory_used_ratio(), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.memory.reserved",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "By",
        description: "GPU memory reserved by the driver and firmware (not usable by applications).",
        attributes: "",
        source: "`nvmlDeviceGetMemoryInfo_v2` (`.reserved`), bytes; absent where only v1 answers",
        bounds: &[&bounds::MEMORY_PART],
        extract: |d, out| push(out, d.memory_reserved_bytes.map(|b| b as f64), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.memory_controller.utilization",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Fast,
        unit: "1",
        description: "Fraction of the last sample period during which device memory was being read or written.",
        attributes: "",
        source: "`nvmlDeviceGetUtilizationRates` (`.memory`); percent / 100",
        bounds: &[&bounds::UTILIZATION_MEMORY_CONTROLLER],
        extract: |d, out| push(out, d.utilization_memory_controller_ratio(), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "hw.temperature",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Fast,
        unit: "Cel",
        description: "Temperature of the GPU die or of its memory.",
        attributes: "`hw.sensor_location` = `gpu` | `memory`",
        source: "`nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`; `nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)`; °C",
        bounds: &[&bounds::TEMPERATURE_GPU, &bounds::TEMPERATURE_MEMORY],
        extract: |d, out| {
            push(out, d.temperature_gpu_celsius.map(f64::from), vec![SensorLocation::Gpu.kv()]);
            push(out, d.temperature_memory_celsius.map(f64::from), vec![SensorLocation::Memory.kv()]);
        },
        fold: Fold::None,
    },
    MetricDef {
        name: "hw.power",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Fast,
        unit: "W",
        description: "Power drawn by the GPU board.",
        attributes: "",
        source: "`nvmlDeviceGetPowerUsage`; mW / 1000",
        bounds: &[&bounds::POWER],
        extract: |d, out| push(out, d.power_watts(), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.power.limit",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Fast,
        unit: "W",
        description: "Power limit the driver enforces (the cap the board is held to).",
        attributes: "",
        source: "`nvmlDeviceGetEnforcedPowerLimit`; mW / 1000",
        bounds: &[&bounds::POWER_LIMIT],
        extract: |d, out| push(out, d.power_limit_watts(), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "hw.energy",
        instrument: Instrument::Counter,
        number: Number::F64,
        group: SampleGroup::Energy,
        unit: "J",
        description: "Energy consumed by the GPU since the agent's first reading (start time: that reading's time; a new start time when NVML's total goes down, after a driver reload or GPU reset).",
        attributes: "",
        source: "`nvmlDeviceGetTotalEnergyConsumption` (mJ since the driver loaded) / 1000, minus the first reading",
        bounds: &[&bounds::ENERGY],
        extract: |d, out| push(out, d.energy_joules(), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.clock.frequency",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Fast,
        unit: "Hz",
        description: "Current clock frequency.",
        attributes: "`nvidia.gpu.clock.type` = `graphics` | `sm` | `memory`",
        source: "`nvmlDeviceGetClockInfo(NVML_CLOCK_GRAPHICS | NVML_CLOCK_SM | NVML_CLOCK_MEM)`; MHz × 10⁶",
        bounds: &[&bounds::CLOCK],
        extract: |d, out| {
            let hz = |mhz: Option<u32>| mhz.map(|m| f64::from(m) * 1e6);
            push(out, hz(d.clock_graphics_mhz), vec![ClockType::Graphics.kv()]);
            push(out, hz(d.clock_sm_mhz), vec![ClockType::Sm.kv()]);
            push(out, hz(d.clock_memory_mhz), vec![ClockType::Memory.kv()]);
        },
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.clocks_event.active",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "1",
        description: "1 while the reason is holding the clocks back (clock-event or throttle reason), else 0.",
        attributes: "`nvidia.gpu.clocks_event.reason` = `gpu_idle` | `applications_clocks_setting` | `sw_power_cap` | `hw_slowdown` | `sync_boost` | `sw_thermal_slowdown` | `hw_thermal_slowdown` | `hw_power_brake_slowdown` | `display_clock_setting`",
        source: "`nvmlDeviceGetCurrentClocksEventReasons` (older drivers: `nvmlDeviceGetCurrentClocksThrottleReasons`; `nvmlClocksEventReasons` bitmask), one point per bit",
        bounds: &[&bounds::CLOCKS_EVENT_REASONS],
        extract: |d, out| {
            if let Some(bits) = d.clocks_event_reasons {
                for r in CLOCKS_EVENT_REASONS {
                    let v = if bits & r.bit != 0 { 1.0 } else { 0.0 };
                    out.push(Point { value: v, attributes: vec![kv(attributes::CLOCKS_EVENT_REASON, r.value)] });
                }
            }
        },
        fold: Fold::UntilNonZero { attribute: attributes::CLOCKS_EVENT_REASON, always: &[] },
    },
    MetricDef {
        name: "nvidia.gpu.performance_state",
        instrument: Instrument::Gauge,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "{pstate}",
        description: "Performance state: 0 (P0, maximum performance) to 15 (P15, minimum).",
        attributes: "",
        source: "`nvmlDeviceGetPerformanceState`",
        bounds: &[&bounds::PERFORMANCE_STATE],
        extract: |d, out| push(out, d.performance_state.map(f64::from), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "hw.errors",
        instrument: Instrument::Counter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "{error}",
        description: "ECC memory errors since the agent's first reading (start time: that reading's time; a new start time when NVML's total goes down, after a driver reload or GPU reset).",
        attributes: "`error.type` = `corrected` | `uncorrected`",
        source: "`nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_CORRECTED | _UNCORRECTED, NVML_VOLATILE_ECC)` (since the driver loaded), minus the first reading",
        bounds: &[&bounds::ECC_ERRORS],
        extract: |d, out| {
            push(out, d.ecc_corrected_total.map(|n| n as f64), vec![MemoryErrorType::Corrected.kv()]);
            push(out, d.ecc_uncorrected_total.map(|n| n as f64), vec![MemoryErrorType::Uncorrected.kv()]);
        },
        fold: Fold::None,
    },
    MetricDef {
        name: "hw.status",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "1",
        description: "1 for the device's current state, 0 for the others: `failed` when NVML reports it lost, `degraded` while thermal or hardware slowdown holds its clocks back or a row remapping is pending or failed, else `ok` (running at the power cap is normal). Carries the static facts.",
        attributes: "`hw.state` = `ok` | `degraded` | `failed`; `hw.serial_number`, `hw.firmware_version` (VBIOS), `hw.driver_version`, `nvidia.gpu.pci.bus_id`, `nvidia.gpu.index` (NVML's node-wide index as `nvidia-smi` numbers GPUs, not the training process's `cuda:N`: match GPUs by `hw.id` (UUID) or `nvidia.gpu.pci.bus_id`) where known; on a MIG device `nvidia.gpu.mig.gpu_instance_id`, `nvidia.gpu.mig.compute_instance_id`",
        source: "device state from error codes (`NVML_ERROR_GPU_IS_LOST`, `NVML_ERROR_RESET_REQUIRED`); `nvmlDeviceGetCurrentClocksEventReasons`; `nvmlDeviceGetRemappedRows` (`isPending`, `failureOccurred`); static: `nvmlDeviceGetSerial`, `nvmlDeviceGetVbiosVersion`, `nvmlSystemGetDriverVersion`, `nvmlDeviceGetPciInfo_v3` (or `_v2`, v1), `nvmlDeviceGetGpuInstanceId`, `nvmlDeviceGetComputeInstanceId`",
        bounds: &[&bounds::CLOCKS_EVENT_REASONS, &bounds::REMAPPED_ROWS],
        extract: |d, out| {
            // NVML answered nothing for it at this tick: its state is unknown, not `ok`.
            if d.state == DeviceState::Ok && d.answered_nothing() {
                return;
            }
            let state = device_hw_state(d);
            let mut facts = vec![KeyValue::new(attributes::GPU_INDEX, i64::from(d.info.index))];
            let i = &d.info;
            if let Some(m) = &i.mig {
                for (k, v) in [
                    (attributes::MIG_GPU_INSTANCE_ID, m.gpu_instance_id),
                    (attributes::MIG_COMPUTE_INSTANCE_ID, m.compute_instance_id),
                ] {
                    if let Some(v) = v {
                        facts.push(KeyValue::new(k, i64::from(v)));
                    }
                }
            }
            for (k, v) in [
                (attributes::HW_SERIAL_NUMBER, &i.serial),
                (attributes::HW_FIRMWARE_VERSION, &i.vbios_version),
                (attributes::HW_DRIVER_VERSION, &i.driver_version),
                (attributes::PCI_BUS_ID, &i.pci_bus_id),
            ] {
                if let Some(v) = v {
                    facts.push(KeyValue::new(k, v.clone()));
                }
            }
            for s in HwState::ALL {
                let mut attributes = vec![s.kv()];
                attributes.extend(facts.iter().cloned());
                out.push(Point { value: if *s == state { 1.0 } else { 0.0 }, attributes });
            }
        },
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.memory.remapped_rows",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "{row}",
        description: "Memory rows remapped to spare rows since the GPU was made (Ampere and newer); a pending or failed remapping sets `hw.status` to `degraded`.",
        attributes: "`error.type` = `corrected` | `uncorrected` (the kind of error that caused the remapping)",
        source: "`nvmlDeviceGetRemappedRows` (`corrRows`, `uncRows`), every tick, GPUs only",
        bounds: &[&bounds::REMAPPED_ROWS],
        extract: |d, out| {
            if let Some(r) = d.remapped_rows {
                push(out, Some(f64::from(r.correctable)), vec![MemoryErrorType::Corrected.kv()]);
                push(out, Some(f64::from(r.uncorrectable)), vec![MemoryErrorType::Uncorrected.kv()]);
            }
        },
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.process.memory.usage",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "By",
        description: "GPU memory held by one compute process. A process that has ended is no longer reported (no stale series).",
        attributes: "`process.pid` (host PID, as NVML reports it); `process.executable.name` where `/proc` shows the host PID namespace (see [Process IDs](sampling.md#processes-mig-and-events))",
        source: "`nvmlDeviceGetComputeRunningProcesses_v3` (or `_v2`, v1 on older drivers; `usedGpuMemory`; entry layout chosen for the driver, R535's 32-byte struct included), every tick; a GPU in MIG mode reports its processes on its MIG devices; name from `/proc/<pid>/comm`",
        bounds: &[&bounds::PROCESS_MEMORY],
        extract: |d, out| per_process(d, out, |p| p.used_memory_bytes.map(|b| b as f64), &[]),
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.process.utilization",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Process,
        unit: "1",
        description: "Fraction of the last process-utilization window during which the engine worked for this process.",
        attributes: "`process.pid`, `process.executable.name` (as above); `hw.gpu.task` = `general` (SM, 3D/compute) | `encoder` | `decoder`",
        source: "`nvmlDeviceGetProcessUtilization` (`smUtil`, `encUtil`, `decUtil`) every `GPU_SIDECAR_PROCESS_INTERVAL`: mean of the samples since the previous read; a process listed at the previous read with no sample in a window where NVML sampled others was idle, 0; no sample at all (`NVML_ERROR_NOT_FOUND`) leaves every process absent and the window open; a process first listed after the previous read and without a sample is absent until a read covers it; percent / 100",
        bounds: &[&bounds::PROCESS_UTILIZATION],
        extract: |d, out| {
            for (task, f) in [
                (GpuTask::General, ProcessUtilization::sm_ratio as fn(&_) -> f64),
                (GpuTask::Encoder, ProcessUtilization::encoder_ratio),
                (GpuTask::Decoder, ProcessUtilization::decoder_ratio),
            ] {
                per_process(d, out, |p| p.utilization.as_ref().map(f), &[task.kv()]);
            }
        },
        fold: Fold::UntilNonZero { attribute: GpuTask::KEY, always: &[GpuTask::General.as_str()] },
    },
    MetricDef {
        name: "nvidia.gpu.process.memory_controller.utilization",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Process,
        unit: "1",
        description: "Fraction of the last process-utilization window during which device memory was read or written for this process.",
        attributes: "`process.pid`, `process.executable.name` (as above)",
        source: "`nvmlDeviceGetProcessUtilization` (`memUtil`), as `nvidia.gpu.process.utilization`; percent / 100",
        bounds: &[&bounds::PROCESS_UTILIZATION],
        extract: |d, out| per_process(d, out, |p| p.utilization.map(|u| u.memory_ratio()), &[]),
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.graphics_engine.activity",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Gpm,
        unit: "1",
        description: "GPM: fraction of the last GPM window during which the graphics or compute engine was active.",
        attributes: "",
        source: "GPM (Hopper and newer): `nvmlGpmMetricsGet(NVML_GPM_METRIC_GRAPHICS_UTIL)` over consecutive `nvmlGpmSampleGet` samples (MIG device: `nvmlGpmMigSampleGet` on the parent) `GPU_SIDECAR_GPM_INTERVAL` apart; percent / 100",
        bounds: &[&bounds::GPM_ACTIVITY],
        extract: |d, out| push(out, GpmMetrics::ratio(d.gpm.and_then(|g| g.graphics_util)), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.sm.activity",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Gpm,
        unit: "1",
        description: "GPM: fraction of the last GPM window during which the SMs had at least one warp resident, averaged over SMs.",
        attributes: "",
        source: "GPM: `NVML_GPM_METRIC_SM_UTIL`, as above",
        bounds: &[&bounds::GPM_ACTIVITY],
        extract: |d, out| push(out, GpmMetrics::ratio(d.gpm.and_then(|g| g.sm_util)), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.sm.occupancy",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Gpm,
        unit: "1",
        description: "GPM: resident warps as a fraction of the maximum, averaged over SMs and the last GPM window.",
        attributes: "",
        source: "GPM: `NVML_GPM_METRIC_SM_OCCUPANCY`, as above",
        bounds: &[&bounds::GPM_ACTIVITY],
        extract: |d, out| push(out, GpmMetrics::ratio(d.gpm.and_then(|g| g.sm_occupancy)), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.tensor.activity",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Gpm,
        unit: "1",
        description: "GPM: fraction of the last GPM window during which the tensor pipes were active (any, or one kind).",
        attributes: "`nvidia.gpu.tensor.op` = `any` | `hmma` (half precision) | `imma` (integer) | `dfma` (FP64), each where GPM answers it",
        source: "GPM: `NVML_GPM_METRIC_ANY_TENSOR_UTIL`, `_HMMA_TENSOR_UTIL`, `_IMMA_TENSOR_UTIL`, `_DFMA_TENSOR_UTIL`, as above",
        bounds: &[&bounds::GPM_ACTIVITY],
        extract: |d, out| {
            if let Some(g) = d.gpm {
                for (op, v) in [
                    (TensorOp::Any, g.any_tensor_util),
                    (TensorOp::Hmma, g.hmma_tensor_util),
                    (TensorOp::Imma, g.imma_tensor_util),
                    (TensorOp::Dfma, g.dfma_tensor_util),
                ] {
                    push(out, GpmMetrics::ratio(v), vec![op.kv()]);
                }
            }
        },
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.pipe.activity",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Gpm,
        unit: "1",
        description: "GPM: fraction of the last GPM window during which the SMs did non-tensor math of a kind.",
        attributes: "`nvidia.gpu.pipe` = `fp16` | `fp32` | `fp64` | `integer`, each where GPM answers it",
        source: "GPM: `NVML_GPM_METRIC_FP16_UTIL`, `_FP32_UTIL`, `_FP64_UTIL`, `_INTEGER_UTIL`, as above",
        bounds: &[&bounds::GPM_ACTIVITY],
        extract: |d, out| {
            if let Some(g) = d.gpm {
                for (pipe, v) in [
                    (Pipe::Fp16, g.fp16_util),
                    (Pipe::Fp32, g.fp32_util),
                    (Pipe::Fp64, g.fp64_util),
                    (Pipe::Integer, g.integer_util),
                ] {
                    push(out, GpmMetrics::ratio(v), vec![pipe.kv()]);
                }
            }
        },
        fold: Fold::UntilNonZero { attribute: Pipe::KEY, always: &[] },
    },
    MetricDef {
        name: "nvidia.gpu.dram.activity",
        instrument: Instrument::Gauge,
        number: Number::F64,
        group: SampleGroup::Gpm,
        unit: "1",
        description: "GPM: DRAM bandwidth used as a fraction of the peak, over the last GPM window.",
        attributes: "",
        source: "GPM: `NVML_GPM_METRIC_DRAM_BW_UTIL`, as above",
        bounds: &[&bounds::GPM_ACTIVITY],
        extract: |d, out| push(out, GpmMetrics::ratio(d.gpm.and_then(|g| g.dram_bw_util)), vec![]),
        fold: Fold::None,
    },
    MetricDef {
        name: "hw.gpu.io",
        instrument: Instrument::Counter,
        number: Number::Int,
        group: SampleGroup::Pcie,
        unit: "By",
        description: "Bytes the GPU sent or received over PCIe since the agent's first reading.",
        attributes: "`network.io.direction` = `transmit` | `receive`",
        source: "With GPM: `NVML_GPM_METRIC_PCIE_TX_PER_SEC` / `_RX_PER_SEC` (MiB/s, mean over each GPM window) × the window, summed: a count of every byte. Without GPM: `nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES | _RX_BYTES)` (KB/s over a ~20 ms window) every `GPU_SIDECAR_PCIE_INTERVAL`, mean of consecutive readings × the time between them: an estimate. Absent until a first interval is complete",
        bounds: &[&bounds::GPM_PCIE, &bounds::PCIE_THROUGHPUT],
        extract: |d, out| {
            push(out, d.io.pcie_transmit_bytes, vec![IoDirection::Transmit.kv()]);
            push(out, d.io.pcie_receive_bytes, vec![IoDirection::Receive.kv()]);
        },
        fold: Fold::None,
    },
    MetricDef {
        name: "nvidia.gpu.nvlink.io",
        instrument: Instrument::Counter,
        number: Number::Int,
        group: SampleGroup::Gpm,
        unit: "By",
        description: "Bytes the GPU sent or received over all its NVLinks since the agent's first reading.",
        attributes: "`network.io.direction` = `transmit` | `receive`",
        source: "GPM: `NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC` / `_RX_PER_SEC` (MiB/s, mean over each GPM window) × the window, summed; absent where GPM or NVLink is missing",
        bounds: &[&bounds::GPM_NVLINK],
        extract: |d, out| {
            push(out, d.io.nvlink_transmit_bytes, vec![IoDirection::Transmit.kv()]);
            push(out, d.io.nvlink_receive_bytes, vec![IoDirection::Receive.kv()]);
        },
        fold: Fold::None,
    },
];
