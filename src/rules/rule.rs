//! What a rule is ([`Rule`]) and what it returns ([`Verdict`]), shared by the engine and
//! the rule families; and how an alert names a device ([`label`]).

use opentelemetry::KeyValue;

use std::time::Duration;

use super::id::{Hold, RuleId, RuleSettings};
use super::preallocation::PoolParams;
use crate::sampling::snapshot::{DeviceInfo, DeviceSample, Snapshot};

/// What a rule judged about one subject (a GPU, or the pod's GPUs together) at one sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The alert's identity within its rule: the GPU's UUID, or `pod` for a rule over all
    /// GPUs.
    pub key: String,
    /// The GPU the records name (`hw.id`); `None` when the rule cannot tell which.
    pub hw_id: Option<String>,
    /// `Some(true)` the condition holds, `Some(false)` it does not, `None` it cannot be
    /// judged (a reading NVML did not give, a lost GPU).
    pub holds: Option<bool>,
    /// The values the judgement rests on, as record attributes (empty when unknown).
    pub values: Vec<KeyValue>,
    /// What was seen, in words, without the GPU's name (e.g. `memory 97.2% used`).
    pub summary: String,
}

impl Verdict {
    /// A verdict about one GPU.
    pub fn device(
        d: &DeviceSample,
        holds: Option<bool>,
        values: Vec<KeyValue>,
        summary: String,
    ) -> Self {
        Self {
            key: d.info.uuid.clone(),
            hw_id: Some(d.info.uuid.clone()),
            holds,
            values,
            summary,
        }
    }

    /// A verdict about the physical GPU of MIG device `d` when the GPU itself is not sampled
    /// (only some of its MIG devices belong to this pod): keyed and named by the GPU's UUID
    /// (`hw.id`), so that one fault of the GPU is one alert, not one per MIG device.
    pub fn parent_of(
        d: &DeviceSample,
        holds: Option<bool>,
        values: Vec<KeyValue>,
        summary: String,
    ) -> Self {
        let uuid = d
            .info
            .mig
            .as_ref()
            .map_or(&d.info.uuid, |m| &m.parent_uuid)
            .clone();
        Self {
            key: uuid.clone(),
            hw_id: Some(uuid),
            holds,
            values,
            summary,
        }
    }

    /// "Cannot judge this GPU now".
    pub fn unknown(d: &DeviceSample) -> Self {
        Self::device(d, None, Vec::new(), String::new())
    }
}

/// A rule: judges each snapshot. A rule may keep its own history (the leak rule keeps a
/// series); it is given samples in order and never reads a clock.
pub(crate) trait Rule: Send {
    /// Which rule.
    fn id(&self) -> RuleId;
    /// Pushes one verdict per subject it judges in `snapshot`.
    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>);
}

/// How an alert text names a device: its UUID (the `hw.id`, what `nvidia-smi -L` and
/// `torch.cuda.get_device_properties(i).uuid` show), then NVML's node-wide index as
/// `nvidia-smi` numbers GPUs (not the training process's `cuda:N`) and the PCI bus id:
/// `GPU-8f6c… (nvidia-smi GPU 2, PCI 00000000:19:00.0)`; a MIG device
/// `MIG-… (on nvidia-smi GPU 2)`.
pub fn label(d: &DeviceSample) -> String {
    device_label(&d.info)
}

/// [`label`] from the static facts.
pub fn device_label(info: &DeviceInfo) -> String {
    if info.mig.is_some() {
        return format!("{} (on nvidia-smi GPU {})", info.uuid, info.index);
    }
    match &info.pci_bus_id {
        Some(pci) => format!("{} (nvidia-smi GPU {}, PCI {pci})", info.uuid, info.index),
        None => format!("{} (nvidia-smi GPU {})", info.uuid, info.index),
    }
}

/// What a rule's constructor is told of the rules it defers to, when those are enabled.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Deferred {
    /// `memory_preallocated`'s parameters: `memory_near_full` does not judge a GPU whose
    /// memory is a framework's pool.
    pub pools: Option<PoolParams>,
    /// `memory_bound`'s (DRAM activity, SM activity) thresholds, percent: `tensor_cores_idle`
    /// leaves a memory-bound GPU to it.
    pub memory_bound: Option<(f64, f64)>,
}

/// What a rule's constructor builds from its row's settings.
pub(crate) enum Built {
    /// A rule judged on every snapshot, firing after the settings' hold and resolving after
    /// `clear`.
    Judged {
        /// The rule.
        rule: Box<dyn Rule>,
        /// How long it must be clear before it resolves.
        clear: Hold,
    },
    /// The XID alert: judged on device events, quiet for `quiet` after the last XID;
    /// `threshold` XIDs of one code before it fires (`None`: the first).
    Xid {
        /// Resolves after this long without another XID of the code.
        quiet: Duration,
        /// The row's threshold, as set.
        threshold: Option<f64>,
    },
}

impl Built {
    /// `rule`, resolving after the same hold it fires after (most rules).
    pub(crate) fn judged(rule: impl Rule + 'static, s: &RuleSettings) -> Self {
        Built::Judged {
            rule: Box::new(rule),
            clear: s.hold,
        }
    }
}

/// A rule's constructor, carried by its row of [`super::catalogue::RULES`].
pub(crate) type Build = fn(&RuleSettings, &Deferred) -> Built;
