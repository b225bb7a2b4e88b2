//! Every value key an alert rule puts on its records besides the attributes on every alert
//! record, declared once with its unit ([`ALERT_VALUES`]). Each rule's row
//! (`crate::rules::catalogue::RULES`, `values`) lists the ones it carries, the rule's code
//! builds them with [`AlertValue::kv`], and `docs/events.md` (the rules' table) and
//! `docs/attributes.md` ([`markdown`]) are generated from them. A value named after a metric
//! (`hw.power`) is that metric's reading, in its unit.

use opentelemetry::{KeyValue, Value};

use super::attributes::{
    Values, GPU_INDEX, MIG_COMPUTE_INSTANCE_ID, MIG_GPU_INSTANCE_ID, PROCESS_PID, XID_CODE,
};

/// One value key of alert records: the key, its type and what it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertValue {
    /// The attribute key.
    pub key: &'static str,
    /// Its type ([`Values::Int`], [`Values::Double`] or [`Values::Text`]).
    pub values: Values,
    /// Unit and meaning in words, as the docs write it after the key.
    pub note: &'static str,
}

impl AlertValue {
    /// This key with `value`.
    pub fn kv(self, value: impl Into<Value>) -> KeyValue {
        KeyValue::new(self.key, value)
    }

    /// `` `key` (note) ``, as the rules' table writes it.
    pub fn doc(self) -> String {
        format!("`{}` ({})", self.key, self.note)
    }
}

const fn value(key: &'static str, values: Values, note: &'static str) -> AlertValue {
    AlertValue { key, values, note }
}

/// `hw.gpu.memory.usage` (int): memory used, By (`nvmlDeviceGetMemoryInfo_v2.used`).
pub const MEMORY_USAGE: AlertValue = value("hw.gpu.memory.usage", Values::Int, "By");
/// `hw.gpu.memory.limit` (int): total memory, By (`nvmlDeviceGetMemoryInfo_v2.total`).
pub const MEMORY_LIMIT: AlertValue = value("hw.gpu.memory.limit", Values::Int, "By");
/// `hw.gpu.memory.utilization` (double): used / total, 0..1.
pub const MEMORY_UTILIZATION: AlertValue =
    value("hw.gpu.memory.utilization", Values::Double, "0..1");
/// `process.pid` (int): the host PID of the process that appeared.
pub const APPEARED_PID: AlertValue = value(PROCESS_PID, Values::Int, "the process that appeared");
/// `nvidia.gpu.alert.memory.jump_time` (double): seconds from the process's appearance to
/// the pool's level.
pub const MEMORY_JUMP_TIME: AlertValue = value(
    "nvidia.gpu.alert.memory.jump_time",
    Values::Double,
    "s from its appearance to the level",
);
/// `nvidia.gpu.alert.memory.growth_rate` (double): By/s, the Theil-Sen slope.
pub const MEMORY_GROWTH_RATE: AlertValue = value(
    "nvidia.gpu.alert.memory.growth_rate",
    Values::Double,
    "By/s, Theil-Sen slope over DURATION",
);
/// `nvidia.gpu.alert.memory.growth` (int): By gained over the rule's duration.
pub const MEMORY_GROWTH: AlertValue = value(
    "nvidia.gpu.alert.memory.growth",
    Values::Int,
    "By over DURATION",
);
/// `nvidia.gpu.alert.memory.time_to_full` (double): seconds until used reaches total.
pub const MEMORY_TIME_TO_FULL: AlertValue = value(
    "nvidia.gpu.alert.memory.time_to_full",
    Values::Double,
    "s until used reaches total at that rate",
);
/// `hw.temperature` (double): the GPU die, Cel.
pub const TEMPERATURE: AlertValue = value("hw.temperature", Values::Double, "Cel, GPU die");
/// `nvidia.gpu.alert.temperature.memory` (double): the HBM, Cel.
pub const TEMPERATURE_MEMORY: AlertValue = value(
    "nvidia.gpu.alert.temperature.memory",
    Values::Double,
    "Cel, HBM, when NVML gives it",
);
/// `nvidia.gpu.alert.clocks_event.reasons` (text array): the active clock-event reasons.
pub const CLOCKS_EVENT_REASONS: AlertValue = value(
    "nvidia.gpu.alert.clocks_event.reasons",
    Values::TextArray,
    "the active reasons",
);
/// `hw.power` (double): W.
pub const POWER: AlertValue = value("hw.power", Values::Double, "W");
/// `nvidia.gpu.power.limit` (double): W.
pub const POWER_LIMIT: AlertValue = value("nvidia.gpu.power.limit", Values::Double, "W");
/// `hw.gpu.utilization` (double): `nvmlDeviceGetUtilizationRates.gpu`, 0..1.
pub const UTILIZATION: AlertValue = value("hw.gpu.utilization", Values::Double, "0..1");
/// `nvidia.gpu.alert.process.count` (int): compute processes listed.
pub const PROCESS_COUNT: AlertValue = value(
    "nvidia.gpu.alert.process.count",
    Values::Int,
    "compute processes listed",
);
/// `nvidia.gpu.alert.process.memory` (int): By held by the listed processes.
pub const PROCESS_MEMORY: AlertValue = value(
    "nvidia.gpu.alert.process.memory",
    Values::Int,
    "By held by the listed processes, where NVML tells",
);
/// `nvidia.gpu.alert.utilization.max` (double): the busiest GPU's utilization, 0..1.
pub const UTILIZATION_MAX: AlertValue =
    value("nvidia.gpu.alert.utilization.max", Values::Double, "0..1");
/// `nvidia.gpu.alert.utilization.min` (double): the idlest GPU's utilization, 0..1.
pub const UTILIZATION_MIN: AlertValue =
    value("nvidia.gpu.alert.utilization.min", Values::Double, "0..1");
/// `nvidia.gpu.alert.utilization.spread` (double): max - min, 0..1.
pub const UTILIZATION_SPREAD: AlertValue = value(
    "nvidia.gpu.alert.utilization.spread",
    Values::Double,
    "0..1",
);
/// `nvidia.gpu.alert.busiest.hw.id` (text): the busiest GPU's UUID.
pub const BUSIEST_HW_ID: AlertValue = value(
    "nvidia.gpu.alert.busiest.hw.id",
    Values::Text,
    "the busiest GPU's UUID",
);
/// `nvidia.gpu.alert.hw_ids` (text array): every GPU's UUID, in NVML index order.
pub const HW_IDS: AlertValue = value(
    "nvidia.gpu.alert.hw_ids",
    Values::TextArray,
    "every GPU, in NVML index order",
);
/// `nvidia.gpu.alert.utilizations` (double array): every GPU's utilization, 0..1, in NVML
/// index order.
pub const UTILIZATIONS: AlertValue = value(
    "nvidia.gpu.alert.utilizations",
    Values::DoubleArray,
    "every GPU's, in NVML index order",
);
/// `nvidia.gpu.tensor.activity` (double): any tensor op, GPM, 0..1.
pub const TENSOR_ACTIVITY: AlertValue = value(
    "nvidia.gpu.tensor.activity",
    Values::Double,
    "any tensor op, 0..1, where GPM answers it",
);
/// `nvidia.gpu.tensor.activity.hmma` (double): half-precision tensor ops, GPM, 0..1.
pub const TENSOR_ACTIVITY_HMMA: AlertValue = value(
    "nvidia.gpu.tensor.activity.hmma",
    Values::Double,
    "0..1, where GPM answers it",
);
/// `nvidia.gpu.sm.activity` (double): GPM, 0..1.
pub const SM_ACTIVITY: AlertValue = value(
    "nvidia.gpu.sm.activity",
    Values::Double,
    "0..1, where GPM answers it",
);
/// `nvidia.gpu.sm.occupancy` (double): GPM, 0..1.
pub const SM_OCCUPANCY: AlertValue = value(
    "nvidia.gpu.sm.occupancy",
    Values::Double,
    "0..1, where GPM answers it",
);
/// `nvidia.gpu.pipe.activity.fp32` (double): GPM, 0..1.
pub const PIPE_ACTIVITY_FP32: AlertValue = value(
    "nvidia.gpu.pipe.activity.fp32",
    Values::Double,
    "0..1, where GPM answers it",
);
/// `nvidia.gpu.dram.activity` (double): share of the peak DRAM bandwidth, GPM, 0..1.
pub const DRAM_ACTIVITY: AlertValue = value(
    "nvidia.gpu.dram.activity",
    Values::Double,
    "0..1, where GPM answers it",
);
/// `nvidia.gpu.alert.gpm.window` (double): seconds of the GPM window judged.
pub const GPM_WINDOW: AlertValue = value("nvidia.gpu.alert.gpm.window", Values::Double, "s");
/// `nvidia.gpu.index` (int): NVML's node-wide index.
pub const LOST_GPU_INDEX: AlertValue = value(
    GPU_INDEX,
    Values::Int,
    "NVML's node-wide index as `nvidia-smi` numbers GPUs, not the training process's `cuda:N`: match GPUs by `hw.id` (UUID) or `nvidia.gpu.pci.bus_id`",
);
/// `nvidia.gpu.xid.code` (int): the XID.
pub const XID: AlertValue = value(XID_CODE, Values::Int, "the XID");
/// `nvidia.gpu.alert.xid.count` (int): reports while firing, on the resolved record.
pub const XID_COUNT: AlertValue = value(
    "nvidia.gpu.alert.xid.count",
    Values::Int,
    "reports while firing, on the resolved record",
);
/// `nvidia.gpu.mig.gpu_instance_id` (int): the MIG GPU instance an XID hit.
pub const XID_GPU_INSTANCE: AlertValue =
    value(MIG_GPU_INSTANCE_ID, Values::Int, "when NVML names it");
/// `nvidia.gpu.mig.compute_instance_id` (int): the MIG compute instance an XID hit.
pub const XID_COMPUTE_INSTANCE: AlertValue =
    value(MIG_COMPUTE_INSTANCE_ID, Values::Int, "when NVML names it");

/// Every alert value key, in documentation order.
pub static ALERT_VALUES: &[AlertValue] = &[
    MEMORY_UTILIZATION,
    MEMORY_USAGE,
    MEMORY_LIMIT,
    APPEARED_PID,
    MEMORY_JUMP_TIME,
    MEMORY_GROWTH_RATE,
    MEMORY_GROWTH,
    MEMORY_TIME_TO_FULL,
    TEMPERATURE,
    TEMPERATURE_MEMORY,
    CLOCKS_EVENT_REASONS,
    POWER,
    POWER_LIMIT,
    UTILIZATION,
    PROCESS_COUNT,
    PROCESS_MEMORY,
    UTILIZATION_MAX,
    UTILIZATION_MIN,
    UTILIZATION_SPREAD,
    BUSIEST_HW_ID,
    HW_IDS,
    UTILIZATIONS,
    TENSOR_ACTIVITY,
    TENSOR_ACTIVITY_HMMA,
    SM_ACTIVITY,
    SM_OCCUPANCY,
    PIPE_ACTIVITY_FP32,
    DRAM_ACTIVITY,
    GPM_WINDOW,
    LOST_GPU_INDEX,
    XID,
    XID_COUNT,
    XID_GPU_INSTANCE,
    XID_COMPUTE_INSTANCE,
];

/// The alert-values section of `docs/attributes.md`.
pub fn markdown() -> String {
    let mut s = String::from(
        "\n## Alert values\n\n\
         The values an alert record carries besides those on every alert record; which rule \
         carries which is in [events.md](events.md#rules). A key named after a metric is that \
         metric's reading.\n\n\
         | key | values | holds |\n| --- | --- | --- |\n",
    );
    for v in ALERT_VALUES {
        let kind = match v.values {
            Values::Int => "int",
            Values::Double => "double",
            Values::Text | Values::Closed(_) => "text",
            Values::TextArray => "text array",
            Values::DoubleArray => "double array",
            Values::AsField => "the field's",
        };
        s.push_str(&format!(
            "| `{}` | {kind} | {} |\n",
            v.key,
            v.note.replace('|', "\\|")
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alert_value_key_is_listed_once() {
        let mut keys: Vec<_> = ALERT_VALUES.iter().map(|v| v.key).collect();
        keys.sort_unstable();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "a key listed twice");
        assert_eq!(
            MEMORY_GROWTH.kv(5_i64),
            KeyValue::new("nvidia.gpu.alert.memory.growth", 5_i64)
        );
        assert_eq!(POWER.doc(), "`hw.power` (W)");
    }

    /// A value named after a metric (not `nvidia.gpu.alert.*` and not an attribute key of the
    /// catalogue) is a metric of the catalogue, so it is that metric's reading.
    #[test]
    fn a_value_named_after_a_metric_is_a_metric() {
        let attributes = super::super::attributes::ATTRIBUTES;
        for v in ALERT_VALUES {
            if v.key.starts_with("nvidia.gpu.alert.") || attributes.iter().any(|a| a.key == v.key) {
                continue;
            }
            assert!(
                super::super::metrics::CATALOGUE
                    .iter()
                    .any(|m| m.name == v.key || v.key.starts_with(&format!("{}.", m.name))),
                "{} is neither an alert key, an attribute nor a metric",
                v.key
            );
        }
    }
}
