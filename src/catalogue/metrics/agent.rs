//! The agent's own metrics, which no [`DeviceSample`](crate::sampling::DeviceSample) gives:
//! those recorded as things happen ([`RECORDED`]: XIDs, sample durations, alerts, webhook
//! admissions).

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
