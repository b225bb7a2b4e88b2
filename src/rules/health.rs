//! GPU health: `gpu_lost` (NVML reports the GPU lost). XID errors are the other health
//! rule; they arrive from the event watcher, not in samples ([`super::Engine::xid`]).

use opentelemetry::KeyValue;

use super::catalogue::RuleId;
use super::engine::{Rule, Verdict};
use crate::sampling::{DeviceState, Snapshot};

/// `gpu_lost`: [`DeviceState::Lost`] (`NVML_ERROR_GPU_IS_LOST`, `NVML_ERROR_RESET_REQUIRED`).
pub(crate) struct GpuLost;

impl Rule for GpuLost {
    fn id(&self) -> RuleId {
        RuleId::GpuLost
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        // A lost GPU takes its MIG devices with it: one alert, on the GPU, when it is sampled.
        let gpus: std::collections::HashSet<&str> = snapshot
            .devices
            .iter()
            .filter(|d| d.info.mig.is_none())
            .map(|d| d.info.uuid.as_str())
            .collect();
        for d in &snapshot.devices {
            if d.info
                .mig
                .as_ref()
                .is_some_and(|m| gpus.contains(m.parent_uuid.as_str()))
            {
                continue;
            }
            let lost = d.state == DeviceState::Lost;
            out.push(Verdict::device(
                d,
                Some(lost),
                vec![KeyValue::new("nvidia.gpu.index", i64::from(d.info.index))],
                if lost {
                    "NVML reports the GPU lost (fallen off the bus, or it needs a reset)".into()
                } else {
                    "the GPU answers NVML again".into()
                },
            ));
        }
    }
}
