//! Every attribute key the agent puts on a metric point or an event record, declared once
//! ([`ATTRIBUTES`]), and the closed value sets as types ([`GpuTask`], [`HwState`], …, each
//! with `as_str` and `kv`). The code that emits an attribute names its key here and, where
//! the values are a closed set, takes them from the type; `docs/attributes.md` is generated
//! from the table ([`markdown`]), and the metric catalogue's attribute text is checked
//! against the types (`src/catalogue/metrics/tests.rs`). Keys follow the OpenTelemetry
//! semantic conventions where one exists (`hw.*`, `process.*`, `error.type`,
//! `network.io.direction`), else `nvidia.gpu.*` for GPU facts and `gpu_sidecar.*` for the
//! agent's own.

use opentelemetry::KeyValue;

/// Declares a closed value set: an enum whose variants are the values of one attribute key.
macro_rules! closed_set {
    (
        $(#[doc = $doc:literal])*
        $name:ident = $key:literal {
            $( $(#[doc = $vdoc:literal])* $variant:ident = $value:literal, )+
        }
    ) => {
        $(#[doc = $doc])*
        #[doc = concat!("\n\nThe values of `", $key, "`.")]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[doc = $vdoc])* #[doc = concat!("`", $value, "`")] $variant, )+
        }

        impl $name {
            /// The attribute key.
            pub const KEY: &'static str = $key;
            /// Every value, in documentation order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Every value as exported, in documentation order.
            pub const VALUES: &'static [&'static str] = &[$($value),+];

            /// The value as exported.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $value,)+
                }
            }

            /// This value as an attribute.
            pub fn kv(self) -> KeyValue {
                KeyValue::new(Self::KEY, self.as_str())
            }

            /// `` `key` = `a` | `b` ``, as the docs write the set.
            pub fn doc() -> String {
                let values: Vec<String> = Self::VALUES.iter().map(|v| format!("`{v}`")).collect();
                format!("`{}` = {}", Self::KEY, values.join(" | "))
            }
        }
    };
}

closed_set! {
    /// The engine a utilization is of (semconv `hw.gpu.task`).
    GpuTask = "hw.gpu.task" {
        /// Graphics and compute (NVML's `.gpu`, a process's `smUtil`).
        General = "general",
        /// The video encoder.
        Encoder = "encoder",
        /// The video decoder.
        Decoder = "decoder",
    }
}

closed_set! {
    /// Where a temperature is read (semconv `hw.sensor_location`).
    SensorLocation = "hw.sensor_location" {
        /// The GPU die.
        Gpu = "gpu",
        /// The HBM.
        Memory = "memory",
    }
}

closed_set! {
    /// The kind of a memory (ECC) error, on `hw.errors`, `nvidia.gpu.memory.remapped_rows`
    /// and `nvidia.gpu.ecc` (semconv `error.type`; on `gpu_sidecar.nvml.errors` the same key
    /// carries an `NVML_ERROR_*` name instead).
    MemoryErrorType = "error.type" {
        /// Corrected (single-bit).
        Corrected = "corrected",
        /// Uncorrected (double-bit).
        Uncorrected = "uncorrected",
    }
}

closed_set! {
    /// A device's state on `hw.status` (semconv `hw.state`).
    HwState = "hw.state" {
        /// Answering, running at full speed (the power cap is normal).
        Ok = "ok",
        /// Thermal or hardware slowdown, or a pending or failed row remapping.
        Degraded = "degraded",
        /// NVML reports it lost.
        Failed = "failed",
    }
}

closed_set! {
    /// The direction of bytes moved (semconv `network.io.direction`).
    IoDirection = "network.io.direction" {
        /// Sent by the GPU.
        Transmit = "transmit",
        /// Received by the GPU.
        Receive = "receive",
    }
}

closed_set! {
    /// Which clock a frequency is of (`nvmlClockType_t`).
    ClockType = "nvidia.gpu.clock.type" {
        /// `NVML_CLOCK_GRAPHICS`.
        Graphics = "graphics",
        /// `NVML_CLOCK_SM`.
        Sm = "sm",
        /// `NVML_CLOCK_MEM`.
        Memory = "memory",
    }
}

closed_set! {
    /// The tensor op kind of a GPM tensor activity.
    TensorOp = "nvidia.gpu.tensor.op" {
        /// `NVML_GPM_METRIC_ANY_TENSOR_UTIL`.
        Any = "any",
        /// `NVML_GPM_METRIC_HMMA_TENSOR_UTIL` (half precision).
        Hmma = "hmma",
        /// `NVML_GPM_METRIC_IMMA_TENSOR_UTIL` (integer).
        Imma = "imma",
        /// `NVML_GPM_METRIC_DFMA_TENSOR_UTIL` (FP64).
        Dfma = "dfma",
    }
}

closed_set! {
    /// The non-tensor pipe of a GPM pipe activity.
    Pipe = "nvidia.gpu.pipe" {
        /// `NVML_GPM_METRIC_FP16_UTIL`.
        Fp16 = "fp16",
        /// `NVML_GPM_METRIC_FP32_UTIL`.
        Fp32 = "fp32",
        /// `NVML_GPM_METRIC_FP64_UTIL`.
        Fp64 = "fp64",
        /// `NVML_GPM_METRIC_INTEGER_UTIL`.
        Integer = "integer",
    }
}

closed_set! {
    /// How a GPU is shared with other pods or jobs. A shared GPU's readings are the whole
    /// GPU's (every process on it, other pods' included), not this pod's share.
    Sharing = "nvidia.gpu.sharing" {
        /// Time-slicing: the kubelet lists the device as one replica of a GPU that other pods
        /// get replicas of too (NVIDIA plugin `<id>::<n>`, GKE `nvidia<N>/vgpu<M>`).
        TimeSlicing = "time_slicing",
        /// Multi-Process Service: `nvmlDeviceGetMPSComputeRunningProcesses_v3` lists MPS
        /// clients on the device (seen once, it stays marked for the NVML session).
        Mps = "mps",
    }
}

closed_set! {
    /// How bad an alert is: the record's severity (OTel severity from
    /// [`crate::rules::catalogue`]'s `AlertSeverity::otel`) and the attribute.
    AlertSeverity = "nvidia.gpu.alert.severity" {
        /// Worth knowing, nothing is wrong (OTel `INFO`, 9).
        Info = "info",
        /// Costs time or will fail if nothing is done (OTel `WARN`, 13).
        Warning = "warning",
        /// The job on this GPU is failing or about to (OTel `FATAL`, 21).
        Critical = "critical",
    }
}

closed_set! {
    /// What happened to an alert (`nvidia.gpu.alert.state`, and on `nvidia.gpu.alerts`).
    AlertState = "nvidia.gpu.alert.state" {
        /// The condition has held long enough.
        Firing = "firing",
        /// It has been clear long enough.
        Resolved = "resolved",
    }
}

/// `hw.id`: the GPU's UUID, or the MIG device's (semconv).
pub const HW_ID: &str = "hw.id";
/// `hw.type`: always `gpu` (semconv).
pub const HW_TYPE: &str = "hw.type";
/// `hw.vendor`: always `NVIDIA` (semconv).
pub const HW_VENDOR: &str = "hw.vendor";
/// `hw.model`: the product name, `nvmlDeviceGetName` (semconv).
pub const HW_MODEL: &str = "hw.model";
/// `hw.parent`: a MIG device's GPU UUID (semconv).
pub const HW_PARENT: &str = "hw.parent";
/// `hw.serial_number`: `nvmlDeviceGetSerial` (semconv).
pub const HW_SERIAL_NUMBER: &str = "hw.serial_number";
/// `hw.firmware_version`: the VBIOS, `nvmlDeviceGetVbiosVersion` (semconv).
pub const HW_FIRMWARE_VERSION: &str = "hw.firmware_version";
/// `hw.driver_version`: `nvmlSystemGetDriverVersion` (semconv).
pub const HW_DRIVER_VERSION: &str = "hw.driver_version";
/// `nvidia.gpu.index`: NVML's node-wide index (int), as `nvidia-smi` numbers GPUs.
pub const GPU_INDEX: &str = "nvidia.gpu.index";
/// `nvidia.gpu.pci.bus_id`: `nvmlDeviceGetPciInfo_v3` `.busId`.
pub const PCI_BUS_ID: &str = "nvidia.gpu.pci.bus_id";
/// `nvidia.gpu.mig.gpu_instance_id` (int), `nvmlDeviceGetGpuInstanceId`.
pub const MIG_GPU_INSTANCE_ID: &str = "nvidia.gpu.mig.gpu_instance_id";
/// `nvidia.gpu.mig.compute_instance_id` (int), `nvmlDeviceGetComputeInstanceId`.
pub const MIG_COMPUTE_INSTANCE_ID: &str = "nvidia.gpu.mig.compute_instance_id";
/// `process.pid` (int): the host PID NVML reports (semconv).
pub const PROCESS_PID: &str = "process.pid";
/// `process.executable.name`: `/proc/<pid>/comm` (semconv).
pub const PROCESS_EXECUTABLE_NAME: &str = "process.executable.name";
/// `nvidia.gpu.xid.code` (int): the XID.
pub const XID_CODE: &str = "nvidia.gpu.xid.code";
/// `nvidia.gpu.clocks_event.reason`: one bit of `nvmlClocksEventReasons`
/// ([`crate::catalogue::clocks_event_reasons`]).
pub const CLOCKS_EVENT_REASON: &str = "nvidia.gpu.clocks_event.reason";
/// `nvidia.gpu.alert.rule`: a rule's name.
pub const ALERT_RULE: &str = "nvidia.gpu.alert.rule";
/// `nvidia.gpu.alert.threshold` (double): the threshold in force, in the setting's unit.
pub const ALERT_THRESHOLD: &str = "nvidia.gpu.alert.threshold";
/// `nvidia.gpu.alert.active_for` (double): seconds held (firing) or firing (resolved).
pub const ALERT_ACTIVE_FOR: &str = "nvidia.gpu.alert.active_for";
/// `nvidia.gpu.alert.samples` (int): consecutive samples the condition held.
pub const ALERT_SAMPLES: &str = "nvidia.gpu.alert.samples";
/// `nvidia.nvml.call`: an NVML C function ([`crate::sampling::reading::Reading::nvml_call`]).
pub const NVML_CALL: &str = "nvidia.nvml.call";
/// `gpu_sidecar.nvml.step`: the NVML thread's step that is stuck.
pub const NVML_STEP: &str = "gpu_sidecar.nvml.step";
/// `error.type` on `gpu_sidecar.nvml.errors`: an `NVML_ERROR_*` name (semconv; the key of
/// [`MemoryErrorType`], whose values are for the memory-error metrics).
pub const ERROR_TYPE: &str = MemoryErrorType::KEY;
/// `thread.name`: the agent's thread, `nvml-sampler` or `nvml-events` (semconv).
pub const THREAD_NAME: &str = "thread.name";
/// `gpu_sidecar.sample.group`: the group of NVML reads a `gpu_sidecar.sample.duration`
/// point times.
pub const SAMPLE_GROUP: &str = "gpu_sidecar.sample.group";
/// `gpu_sidecar.webhook.outcome`: what the webhook did with an admission request.
pub const WEBHOOK_OUTCOME: &str = "gpu_sidecar.webhook.outcome";
/// `gpu_sidecar.webhook.dry_run`: the admission request's `dryRun` (absent for a body that
/// is not a review).
pub const WEBHOOK_DRY_RUN: &str = "gpu_sidecar.webhook.dry_run";
/// `nvidia.gpu.attribution`: marks the share of no known pod (on the node's resource).
pub const ATTRIBUTION: &str = "nvidia.gpu.attribution";
/// The value of [`ATTRIBUTION`] on the not-attributed share.
pub const NOT_ATTRIBUTED: &str = "not_attributed";

/// What an attribute's values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// One of these strings (a closed set's `VALUES`).
    Closed(&'static [&'static str]),
    /// Text, as described.
    Text,
    /// An integer.
    Int,
    /// A double.
    Double,
    /// An array of strings.
    TextArray,
    /// An array of doubles.
    DoubleArray,
    /// The type of the field it carries: a double, an int or a text (the run report's
    /// `gpu.run.<field>`, whose fields `docs/run-report.md` lists).
    AsField,
}

/// One attribute key: where it is and what its values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributeDef {
    /// The key.
    pub key: &'static str,
    /// Its values.
    pub values: Values,
    /// Where it is found and what it says.
    pub description: &'static str,
}

const fn row(key: &'static str, values: Values, description: &'static str) -> AttributeDef {
    AttributeDef {
        key,
        values,
        description,
    }
}

/// Every attribute key of the agent's metric points and event records (the rule-specific
/// values of alert records are listed with their rule in `docs/events.md`), in
/// documentation order.
pub static ATTRIBUTES: &[AttributeDef] = &[
    row(HW_ID, Values::Text, "every GPU point and event: the GPU's UUID, or the MIG device's"),
    row(HW_TYPE, Values::Closed(&["gpu"]), "every GPU point and event"),
    row(HW_VENDOR, Values::Closed(&["NVIDIA"]), "every GPU point and event"),
    row(HW_MODEL, Values::Text, "every GPU point and event, when NVML gives the product name"),
    row(HW_PARENT, Values::Text, "on a MIG device: its GPU's UUID"),
    row(Sharing::KEY, Values::Closed(Sharing::VALUES), "on a GPU shared with other pods (its values are the whole GPU's)"),
    row(HwState::KEY, Values::Closed(HwState::VALUES), "`hw.status`: one point per state, 1 for the current one"),
    row(HW_SERIAL_NUMBER, Values::Text, "`hw.status`, where known"),
    row(HW_FIRMWARE_VERSION, Values::Text, "`hw.status`: the VBIOS, where known"),
    row(HW_DRIVER_VERSION, Values::Text, "`hw.status`, where known"),
    row(PCI_BUS_ID, Values::Text, "`hw.status`, where known"),
    row(GPU_INDEX, Values::Int, "`hw.status`, `nvidia.gpu.alert.gpu_lost`: NVML's node-wide index as `nvidia-smi` numbers GPUs, not the training process's `cuda:N`"),
    row(MIG_GPU_INSTANCE_ID, Values::Int, "`hw.status` of a MIG device; `nvidia.gpu.alert.xid` when NVML names it"),
    row(MIG_COMPUTE_INSTANCE_ID, Values::Int, "as `nvidia.gpu.mig.gpu_instance_id`"),
    row(GpuTask::KEY, Values::Closed(GpuTask::VALUES), "`hw.gpu.utilization`, `nvidia.gpu.process.utilization`: which engine"),
    row(SensorLocation::KEY, Values::Closed(SensorLocation::VALUES), "`hw.temperature`: the die or the HBM"),
    row(MemoryErrorType::KEY, Values::Closed(MemoryErrorType::VALUES), "`hw.errors`, `nvidia.gpu.memory.remapped_rows`, `nvidia.gpu.ecc`; on `gpu_sidecar.nvml.errors` an `NVML_ERROR_*` name"),
    row(IoDirection::KEY, Values::Closed(IoDirection::VALUES), "`hw.gpu.io`, `nvidia.gpu.nvlink.io`"),
    row(ClockType::KEY, Values::Closed(ClockType::VALUES), "`nvidia.gpu.clock.frequency`"),
    row(CLOCKS_EVENT_REASON, Values::Text, "`nvidia.gpu.clocks_event.active`: one reason of NVML's bitmask (the values: docs/metrics.md)"),
    row(TensorOp::KEY, Values::Closed(TensorOp::VALUES), "`nvidia.gpu.tensor.activity`"),
    row(Pipe::KEY, Values::Closed(Pipe::VALUES), "`nvidia.gpu.pipe.activity`"),
    row(PROCESS_PID, Values::Int, "per-process metrics; `nvidia.gpu.alert.memory_preallocated`: the host PID"),
    row(PROCESS_EXECUTABLE_NAME, Values::Text, "per-process metrics, where `/proc` shows the host PID namespace"),
    row(ATTRIBUTION, Values::Closed(&[NOT_ATTRIBUTED]), "node mode's per-pod metrics: the share of no known pod"),
    row(XID_CODE, Values::Int, "`nvidia.gpu.xid`, `nvidia.gpu.xid.errors`, `nvidia.gpu.alert.xid`"),
    row(ALERT_RULE, Values::Text, "alert records and `nvidia.gpu.alerts`: the rule's name (docs/events.md)"),
    row(AlertState::KEY, Values::Closed(AlertState::VALUES), "alert records and `nvidia.gpu.alerts`"),
    row(AlertSeverity::KEY, Values::Closed(AlertSeverity::VALUES), "alert records and `nvidia.gpu.alerts` (also on resolved records)"),
    row(ALERT_THRESHOLD, Values::Double, "alert records of rules with a threshold"),
    row(ALERT_ACTIVE_FOR, Values::Double, "alert records: seconds the condition had held (firing) or the alert was firing (resolved)"),
    row(ALERT_SAMPLES, Values::Int, "firing alert records: consecutive samples on which the condition held"),
    row("nvidia.gpu.reading.<metric>[.<attribute value>]", Values::Double, "firing alert records: every reading of the GPU at that sample, in its metric's unit"),
    row(NVML_CALL, Values::Text, "`gpu_sidecar.nvml.errors`: the C function"),
    row(NVML_STEP, Values::Text, "`gpu_sidecar.nvml.stuck`: the step of the NVML thread"),
    row(THREAD_NAME, Values::Closed(&["nvml-sampler", "nvml-events"]), "`gpu_sidecar.nvml.stuck` (semconv)"),
    row(SAMPLE_GROUP, Values::Closed(&["static", "fast", "energy", "pcie", "process", "gpm"]), "`gpu_sidecar.sample.duration` with `GPU_SIDECAR_METRICS_DETAIL=true`"),
    row(WEBHOOK_OUTCOME, Values::Text, "`gpu_sidecar.webhook.admissions`: what the webhook did (docs/metrics.md)"),
    row(WEBHOOK_DRY_RUN, Values::Text, "`gpu_sidecar.webhook.admissions`: `true` for a dry run"),
    row("gpu.run.<field>", Values::AsField, "`gpu.run.report`: the pod summary, one attribute per field"),
];

/// `docs/attributes.md`, generated from [`ATTRIBUTES`].
pub fn markdown() -> String {
    let cell = |t: &str| t.replace('|', "\\|");
    let mut s = String::from(
        "# Attributes\n\n\
         Generated from `src/catalogue/attributes.rs`, `alert_values.rs` and `resource.rs` (the test `attributes_doc_matches_catalogue` \
         fails when this file and the code disagree; regenerate every generated doc with \
         `UPDATE_DOCS=1 cargo test --test docs`).\n\n\
         Every attribute key on the agent's metric points ([metrics.md](metrics.md)) and event \
         records ([events.md](events.md)); each alert rule's own values are listed with the rule. \
         Resource attributes (pod, container, node, `service.*`) are listed at the end; how \
         to set them is in [kubernetes.md](kubernetes.md).\n\n\
         | key | values | on |\n| --- | --- | --- |\n",
    );
    for a in ATTRIBUTES {
        let values = match a.values {
            Values::Closed(v) => v
                .iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(" \\| "),
            Values::Text => "text".to_string(),
            Values::Int => "int".to_string(),
            Values::Double => "double".to_string(),
            Values::TextArray => "text array".to_string(),
            Values::DoubleArray => "double array".to_string(),
            Values::AsField => "the field's: double, int or text".to_string(),
        };
        s.push_str(&format!(
            "| `{}` | {values} | {} |\n",
            a.key,
            cell(a.description)
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_listed_once() {
        let mut keys: Vec<_> = ATTRIBUTES.iter().map(|a| a.key).collect();
        keys.sort_unstable();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "a key listed twice");
        for set in [GpuTask::KEY, HwState::KEY, AlertState::KEY, Pipe::KEY] {
            assert!(keys.contains(&set), "{set}");
        }
    }

    #[test]
    fn a_closed_set_is_its_values() {
        assert_eq!(GpuTask::Encoder.as_str(), "encoder");
        assert_eq!(GpuTask::ALL.len(), GpuTask::VALUES.len());
        assert_eq!(
            GpuTask::doc(),
            "`hw.gpu.task` = `general` | `encoder` | `decoder`"
        );
        let kv = HwState::Degraded.kv();
        assert_eq!(
            (kv.key.as_str(), kv.value.as_str().as_ref()),
            ("hw.state", "degraded")
        );
    }
}
