//! How the job uses its GPUs: `input_starvation` (a GPU mostly idle while a process holds
//! its memory) and `utilization_imbalance` (the pod's GPUs unevenly busy).

use opentelemetry::{Array, StringValue, Value};

use super::gib;
use super::id::RuleId;
use super::id::RuleSettings;
use super::rule::{Built, Deferred, Rule, Verdict};
use crate::catalogue::alert_values;
use crate::sampling::snapshot::ratio_from_percent;
use crate::sampling::snapshot::{DeviceSample, DeviceState, Snapshot};

/// Whether a compute process holds memory on the GPU (`nvmlDeviceGetComputeRunningProcesses_v3`):
/// a listed process with used memory above 0, or unknown (NVML could not say how much, but
/// a CUDA context always holds some). `None` when the list could not be read. With it, the
/// number of processes and the memory they hold where NVML says.
pub(crate) fn holds_memory(d: &DeviceSample) -> Option<(bool, usize, u64)> {
    let ps = d.processes.as_ref()?;
    let holds = ps.iter().any(|p| p.used_memory_bytes != Some(0));
    let bytes = ps.iter().filter_map(|p| p.used_memory_bytes).sum();
    Some((holds, ps.len(), bytes))
}

/// `input_starvation`: `nvmlDeviceGetUtilizationRates.gpu < threshold` while a process
/// holds memory ([`holds_memory`]).
pub(crate) struct Starvation {
    percent: f64,
}

impl Starvation {
    /// [`super::rule::Build`] for `input_starvation`.
    pub(crate) fn build(s: &RuleSettings, _: &Deferred) -> Built {
        Built::judged(Self::new(s.threshold.unwrap_or_default()), s)
    }

    /// `percent`: utilization below which the GPU counts as starved, e.g. 20.
    pub(crate) fn new(percent: f64) -> Self {
        Self { percent }
    }
}

impl Rule for Starvation {
    fn id(&self) -> RuleId {
        RuleId::InputStarvation
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        for d in &snapshot.devices {
            let (DeviceState::Ok, Some(util), Some((holds, count, bytes))) =
                (d.state, d.utilization_gpu_percent, holds_memory(d))
            else {
                out.push(Verdict::unknown(d));
                continue;
            };
            let mut values = vec![
                alert_values::UTILIZATION.kv(ratio_from_percent(f64::from(util))),
                alert_values::PROCESS_COUNT.kv(count as i64),
                alert_values::PROCESS_MEMORY.kv(bytes as i64),
            ];
            if let Some(u) = d.memory_used_bytes {
                values.push(alert_values::MEMORY_USAGE.kv(u as i64));
            }
            let who = if holds {
                format!(
                    "{count} process(es) holding {} of GPU memory",
                    gib(bytes as f64)
                )
            } else {
                "no process holding GPU memory".to_string()
            };
            out.push(Verdict::device(
                d,
                Some(holds && f64::from(util) < self.percent),
                values,
                format!("GPU {util}% busy (threshold {}%) with {who}", self.percent),
            ));
        }
    }
}

/// `utilization_imbalance`: over every GPU of the snapshot (at least two), each answering
/// with a process holding memory, `max - min` of `nvmlDeviceGetUtilizationRates.gpu` at
/// or above `threshold` points. One subject for the pod (`pod`), named after the idlest
/// GPU.
pub(crate) struct Imbalance {
    points: f64,
}

impl Imbalance {
    /// [`super::rule::Build`] for `utilization_imbalance`.
    pub(crate) fn build(s: &RuleSettings, _: &Deferred) -> Built {
        Built::judged(Self::new(s.threshold.unwrap_or_default()), s)
    }

    /// `points`: the spread in percentage points, e.g. 50.
    pub(crate) fn new(points: f64) -> Self {
        Self { points }
    }
}

impl Rule for Imbalance {
    fn id(&self) -> RuleId {
        RuleId::UtilizationImbalance
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        if snapshot.devices.len() < 2 {
            return;
        }
        let mut gpus = Vec::with_capacity(snapshot.devices.len());
        for d in &snapshot.devices {
            match (d.state, d.utilization_gpu_percent, holds_memory(d)) {
                (DeviceState::Ok, Some(u), Some((holds, _, _))) => gpus.push((d, u, holds)),
                _ => {
                    out.push(Verdict {
                        key: "pod".into(),
                        hw_id: None,
                        holds: None,
                        values: Vec::new(),
                        summary: String::new(),
                    });
                    return;
                }
            }
        }
        // First minimum and first maximum, in NVML index order.
        let mut idlest = gpus[0];
        let mut busiest = gpus[0];
        for g in &gpus[1..] {
            if g.1 < idlest.1 {
                idlest = *g;
            }
            if g.1 > busiest.1 {
                busiest = *g;
            }
        }
        let spread = f64::from(busiest.1 - idlest.1);
        let all_hold = gpus.iter().all(|g| g.2);
        let values = vec![
            alert_values::UTILIZATION_MAX.kv(ratio_from_percent(f64::from(busiest.1))),
            alert_values::UTILIZATION_MIN.kv(ratio_from_percent(f64::from(idlest.1))),
            alert_values::UTILIZATION_SPREAD.kv(ratio_from_percent(spread)),
            alert_values::BUSIEST_HW_ID.kv(busiest.0.info.uuid.clone()),
            alert_values::HW_IDS.kv(Value::Array(Array::String(
                gpus.iter()
                    .map(|g| StringValue::from(g.0.info.uuid.clone()))
                    .collect(),
            ))),
            alert_values::UTILIZATIONS.kv(Value::Array(Array::F64(
                gpus.iter()
                    .map(|g| ratio_from_percent(f64::from(g.1)))
                    .collect(),
            ))),
        ];
        let busy: Vec<String> = gpus
            .iter()
            .map(|g| format!("{} {}%", super::rule::device_label(&g.0.info), g.1))
            .collect();
        let mut summary = format!(
            "GPU utilization spread {spread} points across {} GPUs ({}; threshold {} points)",
            gpus.len(),
            busy.join(", "),
            self.points
        );
        if !all_hold {
            summary.push_str(", not every GPU holds memory");
        }
        out.push(Verdict {
            key: "pod".into(),
            hw_id: Some(idlest.0.info.uuid.clone()),
            holds: Some(all_hold && spread >= self.points),
            values,
            summary,
        });
    }
}
