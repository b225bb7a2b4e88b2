//! The one catalogue of exported metrics: name, instrument, unit, description, attributes
//! and NVML source, plus the pure function that turns a [`DeviceSample`] into data points.
//!
//! Export ([`crate::telemetry::encode`]), `docs/metrics.md` ([`markdown`]) and the
//! consistency test all follow [`CATALOGUE`]; adding a metric is one row.

use opentelemetry::KeyValue;

use crate::catalogue::clocks_event_reasons::{self, CLOCKS_EVENT_REASONS};
use crate::sampling::bounds::{self, Reading};
use crate::sampling::{
    DeviceInfo, DeviceSample, DeviceState, GpmMetrics, ProcessSample, ProcessUtilization,
    SampleGroup,
};

/// OpenTelemetry instrument kind of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instrument {
    /// Asynchronous gauge: the current value.
    Gauge,
    /// Asynchronous monotonic counter: a cumulative total.
    Counter,
    /// Asynchronous up-down counter: a cumulative value that can go down (sizes, states).
    UpDownCounter,
}

impl Instrument {
    /// Name used in `docs/metrics.md`.
    pub fn as_str(self) -> &'static str {
        match self {
            Instrument::Gauge => "gauge",
            Instrument::Counter => "counter",
            Instrument::UpDownCounter => "updowncounter",
        }
    }
}

/// Number type of the data points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Number {
    /// Double.
    F64,
    /// Integer (bytes, counts, states).
    Int,
}

/// One data point before the device's common attributes are added: the value and the
/// metric's own attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Value in the metric's unit.
    pub value: f64,
    /// Attributes specific to this metric (e.g. `hw.gpu.task`).
    pub attributes: Vec<KeyValue>,
}

/// Turns one device's sample into points; pushes nothing for a value NVML did not give.
pub type Extract = fn(&DeviceSample, &mut Vec<Point>);

/// One row of the catalogue.
#[derive(Debug, Clone, Copy)]
pub struct MetricDef {
    /// OTel metric name (semantic conventions where they exist, else `nvidia.gpu.*`).
    pub name: &'static str,
    /// Instrument kind.
    pub instrument: Instrument,
    /// Point number type.
    pub number: Number,
    /// The group of NVML calls the value comes from: its cadence, and so how old an
    /// exported value can be ([`age`]).
    pub group: SampleGroup,
    /// UCUM unit.
    pub unit: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Attribute keys this metric adds to the common device attributes, with their values.
    pub attributes: &'static str,
    /// NVML call(s) the value comes from, and the conversion.
    pub source: &'static str,
    /// The mapping.
    pub extract: Extract,
}

/// Attributes on every GPU data point.
pub const COMMON_ATTRIBUTES: &str = "`hw.id` (GPU UUID, or MIG device UUID), `hw.type` = `gpu`, `hw.vendor` = `NVIDIA`, `hw.model` (product name, when NVML gives it), on a MIG device `hw.parent` (its GPU's UUID), and on a GPU shared with other pods `nvidia.gpu.sharing` = `time_slicing` | `mps` (its values are the whole GPU's; see the README, Shared GPUs)";

/// The attribute that marks a shared GPU ([`crate::sampling::Sharing`]).
pub const SHARING: &str = "nvidia.gpu.sharing";

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
    let mut v = vec![KeyValue::new("process.pid", i64::from(p.pid))];
    if let Some(name) = &p.executable_name {
        v.push(KeyValue::new("process.executable.name", name.clone()));
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
        extract: |d, out| {
            push(out, d.utilization_gpu_ratio(), vec![kv("hw.gpu.task", "general")]);
            push(out, d.utilization_encoder_ratio(), vec![kv("hw.gpu.task", "encoder")]);
            push(out, d.utilization_decoder_ratio(), vec![kv("hw.gpu.task", "decoder")]);
        },
    },
    MetricDef {
        name: "hw.gpu.memory.usage",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "By",
        description: "GPU memory used.",
        attributes: "",
        source: "`nvmlDeviceGetMemoryInfo_v2` (`.used`), bytes; on drivers without it `nvmlDeviceGetMemoryInfo` (v1: `.used` includes the reserved memory; see README, Older drivers)",
        extract: |d, out| push(out, d.memory_used_bytes.map(|b| b as f64), vec![]),
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
        extract: |d, out| push(out, d.memory_total_bytes.map(|b| b as f64), vec![]),
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
        extract: |d, out| push(out, d.memory_used_ratio(), vec![]),
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
        extract: |d, out| push(out, d.memory_reserved_bytes.map(|b| b as f64), vec![]),
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
        extract: |d, out| push(out, d.utilization_memory_controller_ratio(), vec![]),
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
        extract: |d, out| {
            push(out, d.temperature_gpu_celsius.map(f64::from), vec![kv("hw.sensor_location", "gpu")]);
            push(out, d.temperature_memory_celsius.map(f64::from), vec![kv("hw.sensor_location", "memory")]);
        },
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
        extract: |d, out| push(out, d.power_watts(), vec![]),
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
        extract: |d, out| push(out, d.power_limit_watts(), vec![]),
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
        extract: |d, out| push(out, d.energy_joules(), vec![]),
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
        extract: |d, out| {
            let hz = |mhz: Option<u32>| mhz.map(|m| f64::from(m) * 1e6);
            push(out, hz(d.clock_graphics_mhz), vec![kv("nvidia.gpu.clock.type", "graphics")]);
            push(out, hz(d.clock_sm_mhz), vec![kv("nvidia.gpu.clock.type", "sm")]);
            push(out, hz(d.clock_memory_mhz), vec![kv("nvidia.gpu.clock.type", "memory")]);
        },
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
        extract: |d, out| {
            if let Some(bits) = d.clocks_event_reasons {
                for r in CLOCKS_EVENT_REASONS {
                    let v = if bits & r.bit != 0 { 1.0 } else { 0.0 };
                    out.push(Point { value: v, attributes: vec![kv("nvidia.gpu.clocks_event.reason", r.value)] });
                }
            }
        },
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
        extract: |d, out| push(out, d.performance_state.map(f64::from), vec![]),
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
        extract: |d, out| {
            push(out, d.ecc_corrected_total.map(|n| n as f64), vec![kv("error.type", "corrected")]);
            push(out, d.ecc_uncorrected_total.map(|n| n as f64), vec![kv("error.type", "uncorrected")]);
        },
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
        extract: |d, out| {
            // NVML answered nothing for it at this tick: its state is unknown, not `ok`.
            if d.state == DeviceState::Ok && d.answered_nothing() {
                return;
            }
            let state = device_state(d);
            let mut facts = vec![KeyValue::new("nvidia.gpu.index", i64::from(d.info.index))];
            let i = &d.info;
            if let Some(m) = &i.mig {
                for (k, v) in [
                    ("nvidia.gpu.mig.gpu_instance_id", m.gpu_instance_id),
                    ("nvidia.gpu.mig.compute_instance_id", m.compute_instance_id),
                ] {
                    if let Some(v) = v {
                        facts.push(KeyValue::new(k, i64::from(v)));
                    }
                }
            }
            for (k, v) in [
                ("hw.serial_number", &i.serial),
                ("hw.firmware_version", &i.vbios_version),
                ("hw.driver_version", &i.driver_version),
                ("nvidia.gpu.pci.bus_id", &i.pci_bus_id),
            ] {
                if let Some(v) = v {
                    facts.push(KeyValue::new(k, v.clone()));
                }
            }
            for s in ["ok", "degraded", "failed"] {
                let mut attributes = vec![kv("hw.state", s)];
                attributes.extend(facts.iter().cloned());
                out.push(Point { value: if s == state { 1.0 } else { 0.0 }, attributes });
            }
        },
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
        extract: |d, out| {
            if let Some(r) = d.remapped_rows {
                push(out, Some(f64::from(r.correctable)), vec![kv("error.type", "corrected")]);
                push(out, Some(f64::from(r.uncorrectable)), vec![kv("error.type", "uncorrected")]);
            }
        },
    },
    MetricDef {
        name: "nvidia.gpu.process.memory.usage",
        instrument: Instrument::UpDownCounter,
        number: Number::Int,
        group: SampleGroup::Fast,
        unit: "By",
        description: "GPU memory held by one compute process. A process that has ended is no longer reported (no stale series).",
        attributes: "`process.pid` (host PID, as NVML reports it); `process.executable.name` where `/proc` shows the host PID namespace (see README)",
        source: "`nvmlDeviceGetComputeRunningProcesses_v3` (or `_v2`, v1 on older drivers; `usedGpuMemory`; entry layout chosen for the driver, R535's 32-byte struct included), every tick; a GPU in MIG mode reports its processes on its MIG devices; name from `/proc/<pid>/comm`",
        extract: |d, out| per_process(d, out, |p| p.used_memory_bytes.map(|b| b as f64), &[]),
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
        extract: |d, out| {
            for (task, f) in [
                ("general", ProcessUtilization::sm_ratio as fn(&_) -> f64),
                ("encoder", ProcessUtilization::encoder_ratio),
                ("decoder", ProcessUtilization::decoder_ratio),
            ] {
                per_process(d, out, |p| p.utilization.as_ref().map(f), &[kv("hw.gpu.task", task)]);
            }
        },
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
        extract: |d, out| per_process(d, out, |p| p.utilization.map(|u| u.memory_ratio()), &[]),
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
        extract: |d, out| push(out, GpmMetrics::ratio(d.gpm.and_then(|g| g.graphics_util)), vec![]),
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
        extract: |d, out| push(out, GpmMetrics::ratio(d.gpm.and_then(|g| g.sm_util)), vec![]),
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
        extract: |d, out| push(out, GpmMetrics::ratio(d.gpm.and_then(|g| g.sm_occupancy)), vec![]),
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
        extract: |d, out| {
            if let Some(g) = d.gpm {
                for (op, v) in [
                    ("any", g.any_tensor_util),
                    ("hmma", g.hmma_tensor_util),
                    ("imma", g.imma_tensor_util),
                    ("dfma", g.dfma_tensor_util),
                ] {
                    push(out, GpmMetrics::ratio(v), vec![kv("nvidia.gpu.tensor.op", op)]);
                }
            }
        },
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
        extract: |d, out| {
            if let Some(g) = d.gpm {
                for (pipe, v) in [
                    ("fp16", g.fp16_util),
                    ("fp32", g.fp32_util),
                    ("fp64", g.fp64_util),
                    ("integer", g.integer_util),
                ] {
                    push(out, GpmMetrics::ratio(v), vec![kv("nvidia.gpu.pipe", pipe)]);
                }
            }
        },
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
        extract: |d, out| push(out, GpmMetrics::ratio(d.gpm.and_then(|g| g.dram_bw_util)), vec![]),
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
        extract: |d, out| {
            push(out, d.io.pcie_transmit_bytes, vec![kv("network.io.direction", "transmit")]);
            push(out, d.io.pcie_receive_bytes, vec![kv("network.io.direction", "receive")]);
        },
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
        extract: |d, out| {
            push(out, d.io.nvlink_transmit_bytes, vec![kv("network.io.direction", "transmit")]);
            push(out, d.io.nvlink_receive_bytes, vec![kv("network.io.direction", "receive")]);
        },
    },
];

/// The metrics each reading's bounds ([`bounds::BOUNDS`]) hold: a value outside them is
/// dropped by the sampler, so none of these metrics carries it. Rendered as "Valid ranges"
/// in `docs/metrics.md`; a test checks every reading and every metric above is here.
pub static VALID_RANGES: &[(Reading, &[&str])] = &[
    (Reading::UtilizationGpu, &["hw.gpu.utilization"]),
    (
        Reading::UtilizationMemoryController,
        &["nvidia.gpu.memory_controller.utilization"],
    ),
    (Reading::UtilizationEncoder, &["hw.gpu.utilization"]),
    (Reading::UtilizationDecoder, &["hw.gpu.utilization"]),
    (
        Reading::MemoryTotal,
        &["hw.gpu.memory.limit", "hw.gpu.memory.utilization"],
    ),
    (
        Reading::MemoryPart,
        &[
            "hw.gpu.memory.usage",
            "hw.gpu.memory.utilization",
            "nvidia.gpu.memory.reserved",
        ],
    ),
    (Reading::TemperatureGpu, &["hw.temperature"]),
    (Reading::TemperatureMemory, &["hw.temperature"]),
    (Reading::Power, &["hw.power"]),
    (Reading::PowerLimit, &["nvidia.gpu.power.limit"]),
    (Reading::Energy, &["hw.energy"]),
    (Reading::Clock, &["nvidia.gpu.clock.frequency"]),
    (
        Reading::ClocksEventReasons,
        &["nvidia.gpu.clocks_event.active", "hw.status"],
    ),
    (Reading::PerformanceState, &["nvidia.gpu.performance_state"]),
    (Reading::EccErrors, &["hw.errors"]),
    (
        Reading::RemappedRows,
        &["nvidia.gpu.memory.remapped_rows", "hw.status"],
    ),
    (Reading::ProcessMemory, &["nvidia.gpu.process.memory.usage"]),
    (
        Reading::ProcessUtilization,
        &[
            "nvidia.gpu.process.utilization",
            "nvidia.gpu.process.memory_controller.utilization",
        ],
    ),
    (
        Reading::GpmActivity,
        &[
            "nvidia.gpu.graphics_engine.activity",
            "nvidia.gpu.sm.activity",
            "nvidia.gpu.sm.occupancy",
            "nvidia.gpu.tensor.activity",
            "nvidia.gpu.pipe.activity",
            "nvidia.gpu.dram.activity",
        ],
    ),
    (Reading::GpmPcie, &["hw.gpu.io"]),
    (Reading::GpmNvlink, &["nvidia.gpu.nvlink.io"]),
    (Reading::PcieThroughput, &["hw.gpu.io"]),
];

/// Kind of a recorded (synchronous) metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordedInstrument {
    /// Monotonic counter, incremented as things happen.
    Counter,
    /// Explicit-bucket histogram.
    Histogram,
}

impl RecordedInstrument {
    /// Name used in `docs/metrics.md`.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordedInstrument::Counter => "counter",
            RecordedInstrument::Histogram => "histogram",
        }
    }
}

/// A metric recorded as things happen (events, timings) rather than read from a snapshot;
/// registered by [`crate::telemetry::recorder`], documented with the catalogue.
#[derive(Debug, Clone, Copy)]
pub struct RecordedDef {
    /// OTel metric name.
    pub name: &'static str,
    /// Instrument kind.
    pub instrument: RecordedInstrument,
    /// UCUM unit.
    pub unit: &'static str,
    /// One-line description.
    pub description: &'static str,
    /// Attribute keys, with their values.
    pub attributes: &'static str,
    /// Where the value comes from.
    pub source: &'static str,
}

/// `nvidia.gpu.xid.errors`: one per XID event.
pub static XID_ERRORS: RecordedDef = RecordedDef {
    name: "nvidia.gpu.xid.errors",
    instrument: RecordedInstrument::Counter,
    unit: "{error}",
    description: "XID critical errors reported by the driver since the agent started; each also emits an `nvidia.gpu.xid` event naming the error.",
    attributes: "the device attributes (the MIG device when NVML names its GPU instance); `nvidia.gpu.xid.code` (int)",
    source: "`nvmlEventSetWait_v2` (drivers before R450: `nvmlEventSetWait`, no MIG attribution) on an event set registered for `nvmlEventTypeXidCriticalError` (`eventData` = the XID), thread `nvml-events`",
};

/// `gpu_sidecar.sample.duration`: the agent's own cost.
pub static SAMPLE_DURATION: RecordedDef = RecordedDef {
    name: "gpu_sidecar.sample.duration",
    instrument: RecordedInstrument::Histogram,
    unit: "s",
    description: "Time one group of NVML calls took, over all devices, each time the group ran (the agent's own cost; see the schedule in the README).",
    attributes: "`gpu_sidecar.sample.group` = `static` | `fast` | `energy` | `pcie` | `process` | `gpm`",
    source: "wall-clock time around the group's calls on the `nvml-sampler` thread",
};

/// `nvidia.gpu.alerts`: one per alert transition of the rules engine.
pub static ALERTS: RecordedDef = RecordedDef {
    name: "nvidia.gpu.alerts",
    instrument: RecordedInstrument::Counter,
    unit: "{alert}",
    description: "Alert transitions of the agent's rules: 1 per firing, 1 per resolution (see docs/events.md).",
    attributes: "`nvidia.gpu.alert.rule` = `memory_near_full` | `memory_preallocated` | `memory_leak` | `temperature_high` | `clocks_power_capped` | `clocks_slowdown` | `input_starvation` | `utilization_imbalance` | `tensor_cores_idle` | `memory_bound` | `gpu_lost` | `xid`; `nvidia.gpu.alert.state` = `firing` | `resolved`; `nvidia.gpu.alert.severity` = `info` | `warning` | `critical`; `hw.id` (the GPU the alert names)",
    source: "the rules engine (`src/rules/`), at each transition",
};

/// Every recorded metric, in documentation order.
pub static RECORDED: &[&RecordedDef] = &[
    &XID_ERRORS,
    &SAMPLE_DURATION,
    &ALERTS,
    &crate::webhook::metrics::ADMISSIONS,
];

/// The `hw.state` of a device: `failed`, `degraded` or `ok`.
pub fn device_state(d: &DeviceSample) -> &'static str {
    match d.state {
        DeviceState::Lost => "failed",
        DeviceState::Ok
            if d.clocks_event_reasons.unwrap_or(0) & clocks_event_reasons::DEGRADING != 0
                || d.remapped_rows.is_some_and(|r| r.pending || r.failed) =>
        {
            "degraded"
        }
        DeviceState::Ok => "ok",
    }
}

/// The attributes every data point of this device carries (see [`COMMON_ATTRIBUTES`]).
pub fn device_attributes(d: &DeviceSample) -> Vec<KeyValue> {
    let mut v = info_attributes(&d.info);
    if let Some(mode) = d.sharing {
        v.push(KeyValue::new(SHARING, mode.as_str()));
    }
    v
}

/// [`device_attributes`] from the static facts alone (for events and recorded metrics).
pub fn info_attributes(info: &DeviceInfo) -> Vec<KeyValue> {
    let mut v = vec![
        KeyValue::new("hw.id", info.uuid.clone()),
        KeyValue::new("hw.type", "gpu"),
        KeyValue::new("hw.vendor", "NVIDIA"),
    ];
    if let Some(name) = &info.name {
        v.push(KeyValue::new("hw.model", name.clone()));
    }
    if let Some(m) = &info.mig {
        v.push(KeyValue::new("hw.parent", m.parent_uuid.clone()));
    }
    v
}

/// All points of one metric for one device, with the common attributes first.
pub fn device_points(def: &MetricDef, d: &DeviceSample) -> Vec<Point> {
    let mut own = Vec::new();
    (def.extract)(d, &mut own);
    if own.is_empty() {
        return own;
    }
    let common = device_attributes(d);
    for p in &mut own {
        let mut attrs = common.clone();
        attrs.append(&mut p.attributes);
        p.attributes = attrs;
    }
    own
}

/// How old a value of `group` can be when exported, and how often it is in an export.
pub fn age(group: SampleGroup) -> &'static str {
    match group {
        SampleGroup::Static | SampleGroup::Fast => {
            "read at every tick; in every export, read by the tick it is exported with"
        }
        SampleGroup::Energy => {
            "read at the export tick it is exported with, every `GPU_SIDECAR_ENERGY_INTERVAL` (rounded to whole exports; at every export when shorter); absent from the other exports"
        }
        SampleGroup::Process => {
            "read at the export tick it is exported with, every `GPU_SIDECAR_PROCESS_INTERVAL` (rounded to whole exports; at every export when shorter); the mean over the window since the previous read"
        }
        SampleGroup::Gpm => {
            "read at the export tick it is exported with, every `GPU_SIDECAR_GPM_INTERVAL` (rounded to whole exports; at every export when shorter); the mean over the window since the previous GPM sample"
        }
        SampleGroup::Pcie => {
            "updated when a GPM window ends (`GPU_SIDECAR_GPM_INTERVAL`) or, on GPUs without GPM PCIe counters, at a PCIe throughput read (`GPU_SIDECAR_PCIE_INTERVAL`), at export ticks; in the export of that tick only"
        }
    }
}

/// `docs/metrics.md`, generated from [`CATALOGUE`].
pub fn markdown() -> String {
    let mut s = String::from(
        "# Metrics\n\n\
         Generated from `src/catalogue/metrics/` (the test `metrics_doc_matches_catalogue` fails when \
         this file and the code disagree; regenerate with `UPDATE_DOCS=1 cargo test --test metrics_doc`).\n\n\
         Ratios are 0..1, units are UCUM. A value NVML does not give is absent, never 0.\n\n",
    );
    s.push_str(&format!(
        "Every GPU data point carries {COMMON_ATTRIBUTES}.\n\n"
    ));
    s.push_str(
        "## Time\n\n\
         One rule for every metric: **an exported point's time is within one sample tick of when NVML \
         produced its value.** Each GPU data point's `time_unix_nano` is the start of the sample tick \
         that read its value, and the export follows that tick at once (the sampler marks the ticks that \
         are exported: one every `OTEL_METRIC_EXPORT_INTERVAL`). A value not read at an exported tick is \
         not in that export: nothing is carried from an earlier read under a later time. The fast group \
         is read at every tick; each slow group (energy, per-process utilization, GPM, PCIe throughput) at \
         export ticks, every N-th export for an interval of N exports (column *age*), and when its \
         interval is shorter than the export interval also at its own cadence between exports (those \
         reads reach the rules and the run report, not the exporter); the final sample at shutdown \
         reads every group. Reading a tick takes under 1 ms per GPU for the fast group; the \
         energy counter costs ~4 ms of CPU per GPU on an H200 (which is why it has its own interval).\n\n\
         **Start times.** A counter (sum) read from a total counts from the agent's first reading of \
         that series: its first point has that reading's time as start time and the value 0 (NVML's \
         energy and ECC totals count since the driver loaded; that past is not claimed). When NVML's \
         total goes down (driver reload, GPU reset), the series starts again: start time = the previous \
         reading's time, counting from 0. When the wall clock steps by more than 1 s against the \
         monotonic clock (NTP correcting the node), every series starts again at the next point (start \
         time = its time, value 0). Both are logged once. No point ends before it starts, and no sum goes \
         down under one start time. An up-down counter's start time is when the agent first saw it. \
         Gauges carry no start time. Elapsed times (GPM and PCIe windows, the run report) come from the \
         monotonic clock. Sums and the histogram are cumulative unless \
         `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` asks for delta (a delta point covers the time \
         since the last point the collector accepted).\n\n",
    );
    s.push_str("| name | instrument | unit | attributes | NVML source | age | description |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- | --- |\n");
    let cell = |t: &str| t.replace('|', "\\|");
    for d in CATALOGUE {
        s.push_str(&format!(
            "| `{}` | {} | `{}` | {} | {} | {} | {} |\n",
            d.name,
            d.instrument.as_str(),
            d.unit,
            cell(d.attributes),
            cell(d.source),
            cell(age(d.group)),
            cell(d.description)
        ));
    }
    s.push_str(
        "\n## Valid ranges\n\n\
         NVML answers some values it does not have with `NVML_SUCCESS` and a sentinel \
         (`0xFFFFFFFF` for a temperature or power, 255 or 0 for the HBM temperature of a GPU \
         without that sensor, -1 as a signed field value, all-ones counters). A reading outside \
         its range below is dropped by the sampler before anything sees the sample: the value \
         is absent (not exported, not judged by the rules, not a run-report peak, an empty \
         sample-log field), and one warning per GPU and reading names the value and the range \
         (`src/sampling/bounds.rs`).\n\n",
    );
    s.push_str("| reading | valid (NVML unit) | metrics | why |\n| --- | --- | --- | --- |\n");
    for b in bounds::BOUNDS {
        let metrics: Vec<String> = VALID_RANGES
            .iter()
            .filter(|(r, _)| *r == b.reading)
            .flat_map(|(_, m)| m.iter().map(|n| format!("`{n}`")))
            .collect();
        s.push_str(&format!(
            "| {} | {} to {} {} | {} | {} |\n",
            b.name,
            b.min,
            b.max,
            b.unit,
            metrics.join(", "),
            cell(b.why)
        ));
    }
    s.push_str(
        "\n## Recorded as they happen\n\n\
         Synchronous instruments, counting from 0 at the agent's start (start time: the agent's start), \
         stamped with the export's time. Every `nvidia.gpu.alerts` series the rules may produce (each \
         enabled rule, firing and resolved, for each device) is exported at 0 from the device's first \
         sample, so a first firing is an increase that `increase()` and `rate()` see. An \
         `nvidia.gpu.xid.errors` series appears with the first XID of its code on its device (the codes \
         are not known in advance); alert on `nvidia.gpu.alerts{nvidia.gpu.alert.rule=xid}` (as the \
         shipped `GPUXidError` rule does), which exists at 0 before.\n\n",
    );
    s.push_str("| name | instrument | unit | attributes | source | description |\n");
    s.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for d in RECORDED {
        s.push_str(&format!(
            "| `{}` | {} | `{}` | {} | {} | {} |\n",
            d.name,
            d.instrument.as_str(),
            d.unit,
            cell(d.attributes),
            cell(d.source),
            cell(d.description)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::sampling::DeviceInfo;

    /// The first row of the H200 recording (`series-under-load.jsonl`, t = 0).
    fn h200() -> DeviceSample {
        let info = Arc::new(DeviceInfo {
            index: 0,
            uuid: "GPU-00000000-1111-2222-3333-444444444444".into(),
            name: Some("NVIDIA H200".into()),
            serial: Some("1650000000000".into()),
            pci_bus_id: Some("00000000:19:00.0".into()),
            vbios_version: Some("96.00.AF.00.01".into()),
            driver_version: Some("580.159.04".into()),
            mig: None,
        });
        let mut d = DeviceSample::empty(info, DeviceState::Ok);
        d.utilization_gpu_percent = Some(99);
        d.utilization_memory_controller_percent = Some(24);
        d.memory_total_bytes = Some(150_754_820_096);
        d.memory_used_bytes = Some(1_839_071_232);
        d.temperature_gpu_celsius = Some(58);
        d.temperature_memory_celsius = Some(49);
        d.power_milliwatts = Some(690_599);
        d.power_limit_milliwatts = Some(700_000);
        d.energy_millijoules = Some(7_749_089);
        d.clock_sm_mhz = Some(1455);
        d.clocks_event_reasons = Some(4);
        d.performance_state = Some(0);
        d
    }

    fn def(name: &str) -> &'static MetricDef {
        CATALOGUE.iter().find(|d| d.name == name).unwrap()
    }

    fn attr(p: &Point, key: &str) -> Option<String> {
        p.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    }

    #[test]
    fn h200_values_map_to_semconv_units() {
        let d = h200();
        let power = device_points(def("hw.power"), &d);
        assert_eq!(power.len(), 1);
        assert!((power[0].value - 690.599).abs() < 1e-9);
        assert_eq!(
            attr(&power[0], "hw.id").as_deref(),
            Some("GPU-00000000-1111-2222-3333-444444444444")
        );
        assert_eq!(attr(&power[0], "hw.type").as_deref(), Some("gpu"));
        assert_eq!(attr(&power[0], "hw.model").as_deref(), Some("NVIDIA H200"));
        assert_eq!(device_points(def("hw.energy"), &d)[0].value, 7749.089);
        assert_eq!(
            device_points(def("hw.gpu.memory.limit"), &d)[0].value,
            150_754_820_096.0
        );
        let util = device_points(def("hw.gpu.utilization"), &d);
        assert_eq!(util.len(), 1, "encoder/decoder not read: absent, not 0");
        assert_eq!(util[0].value, 0.99);
        assert_eq!(attr(&util[0], "hw.gpu.task").as_deref(), Some("general"));
        let mem_util = device_points(def("hw.gpu.memory.utilization"), &d)[0].value;
        assert!((mem_util - 1_839_071_232.0 / 150_754_820_096.0).abs() < 1e-12);
        let temps = device_points(def("hw.temperature"), &d);
        assert_eq!(temps.len(), 2);
        assert_eq!(
            (
                temps[1].value,
                attr(&temps[1], "hw.sensor_location").as_deref()
            ),
            (49.0, Some("memory"))
        );
        let clocks = device_points(def("nvidia.gpu.clock.frequency"), &d);
        assert_eq!(clocks.len(), 1);
        assert_eq!(clocks[0].value, 1_455_000_000.0);
    }

    #[test]
    fn clocks_event_bits_and_status() {
        let d = h200();
        let reasons = device_points(def("nvidia.gpu.clocks_event.active"), &d);
        assert_eq!(reasons.len(), CLOCKS_EVENT_REASONS.len());
        let documented = def("nvidia.gpu.clocks_event.active").attributes;
        for r in CLOCKS_EVENT_REASONS {
            assert!(
                documented.contains(&format!("`{}`", r.value)),
                "{}",
                r.value
            );
        }
        let active: Vec<_> = reasons
            .iter()
            .filter(|p| p.value == 1.0)
            .map(|p| attr(p, "nvidia.gpu.clocks_event.reason").unwrap())
            .collect();
        assert_eq!(active, vec!["sw_power_cap"]);
        assert_eq!(device_state(&d), "ok", "power cap at full load is normal");
        let mut hot = h200();
        hot.clocks_event_reasons = Some(0x20 | 0x4);
        assert_eq!(device_state(&hot), "degraded");
        let status = device_points(def("hw.status"), &hot);
        let on: Vec<_> = status
            .iter()
            .filter(|p| p.value == 1.0)
            .map(|p| attr(p, "hw.state").unwrap())
            .collect();
        assert_eq!(on, vec!["degraded"]);
        assert_eq!(
            attr(&status[0], "hw.driver_version").as_deref(),
            Some("580.159.04")
        );
    }

    #[test]
    fn every_reading_and_metric_has_a_valid_range() {
        for b in bounds::BOUNDS {
            assert!(
                VALID_RANGES.iter().any(|(r, _)| *r == b.reading),
                "{:?} holds no metric",
                b.reading
            );
        }
        for (r, names) in VALID_RANGES {
            for n in *names {
                assert!(
                    CATALOGUE.iter().any(|d| d.name == *n),
                    "{r:?}: no metric {n}"
                );
            }
        }
        for d in CATALOGUE {
            assert!(
                VALID_RANGES
                    .iter()
                    .any(|(_, names)| names.contains(&d.name)),
                "{} has no valid range",
                d.name
            );
        }
    }

    #[test]
    fn lost_device_reports_failed_and_nothing_else() {
        let d = DeviceSample::empty(h200().info, DeviceState::Lost);
        for def in CATALOGUE {
            let points = device_points(def, &d);
            if def.name == "hw.status" {
                let on: Vec<_> = points
                    .iter()
                    .filter(|p| p.value == 1.0)
                    .map(|p| attr(p, "hw.state").unwrap())
                    .collect();
                assert_eq!(on, vec!["failed"]);
            } else {
                assert!(points.is_empty(), "{} emitted for a lost GPU", def.name);
            }
        }
    }
}
