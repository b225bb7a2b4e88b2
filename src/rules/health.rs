//! GPU health: `gpu_lost` (NVML reports the GPU lost). XID errors are the other health
//! rule; they arrive from the event watcher, not in samples ([`super::Engine::xid`]).

use super::id::RuleId;
use super::id::{Hold, RuleSettings};
use super::rule::{Built, Deferred, Rule, Verdict};
use std::collections::HashSet;

use crate::catalogue::alert_values;
use crate::sampling::snapshot::{DeviceSample, DeviceState, Snapshot};

/// `gpu_lost`: [`DeviceState::Lost`] (`NVML_ERROR_GPU_IS_LOST`, `NVML_ERROR_RESET_REQUIRED`).
pub(crate) struct GpuLost;

impl GpuLost {
    /// [`super::rule::Build`] for `gpu_lost`: resolves at the first sample it answers.
    pub(crate) fn build(_: &RuleSettings, _: &Deferred) -> Built {
        Built::Judged {
            rule: Box::new(Self),
            clear: Hold::Immediate,
        }
    }
}

/// [`super::rule::Build`] for `xid`: judged on the device events (by the engine), quiet
/// for DURATION (the row's default unset) before it resolves.
pub(crate) fn xid(s: &RuleSettings, _: &Deferred) -> Built {
    let quiet = match s.hold {
        Hold::Duration(d) => d,
        _ => super::RuleId::Xid.default_duration(),
    };
    Built::Xid {
        quiet,
        threshold: s.threshold,
    }
}

impl Rule for GpuLost {
    fn id(&self) -> RuleId {
        RuleId::GpuLost
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        // A lost GPU takes its MIG devices with it: one alert per physical GPU, on the GPU,
        // whether it is sampled itself or only through MIG devices of this pod (then its
        // MIG devices are lost together; one alert, not one per MIG device).
        let mut judged: HashSet<&str> = HashSet::new();
        for d in &snapshot.devices {
            let gpu_uuid = d
                .info
                .mig
                .as_ref()
                .map_or(d.info.uuid.as_str(), |m| m.parent_uuid.as_str());
            if !judged.insert(gpu_uuid) {
                continue;
            }
            // The GPU itself when sampled, else all its MIG devices here.
            let members: Vec<&DeviceSample> = match snapshot
                .devices
                .iter()
                .find(|g| g.info.mig.is_none() && g.info.uuid == gpu_uuid)
            {
                Some(g) => vec![g],
                None => snapshot
                    .devices
                    .iter()
                    .filter(|m| {
                        m.info
                            .mig
                            .as_ref()
                            .is_some_and(|p| p.parent_uuid == gpu_uuid)
                    })
                    .collect(),
            };
            let lost = members.iter().any(|m| m.state == DeviceState::Lost);
            let values = vec![alert_values::LOST_GPU_INDEX.kv(i64::from(d.info.index))];
            let summary = if lost {
                "NVML reports the GPU lost (fallen off the bus, or it needs a reset)".to_string()
            } else {
                "the GPU answers NVML again".to_string()
            };
            out.push(match members.first() {
                Some(g) if g.info.mig.is_none() => Verdict::device(g, Some(lost), values, summary),
                _ => Verdict::parent_of(d, Some(lost), values, summary),
            });
        }
    }
}
