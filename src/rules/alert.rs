//! What the engine returns: an alert's transition ([`Alert`], [`AlertState`]), and what it is
//! given besides snapshots ([`XidReport`]).

use std::borrow::Cow;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::KeyValue;

use super::id::RuleId;

pub use crate::catalogue::attributes::AlertState;

/// A transition to report as one record.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// Which rule.
    pub rule: RuleId,
    /// Fired or resolved.
    pub state: AlertState,
    /// The GPU (`hw.id`), the same on the firing and the resolved record.
    pub hw_id: Option<String>,
    /// `hw.id`, `hw.type`, `hw.vendor`, `hw.model` of that GPU, as on its metrics.
    pub device: Vec<KeyValue>,
    /// The device as the body names it (`label`: UUID, nvidia-smi index, PCI bus id).
    pub label: String,
    /// The sample's wall-clock time (`Snapshot::taken_at`), or the XID's.
    pub time: SystemTime,
    /// The threshold in force, in the setting's unit.
    pub threshold: Option<f64>,
    /// The values behind the judgement at this sample.
    pub values: Vec<KeyValue>,
    /// Firing: how long the condition had held (first true sample to this one). Resolved:
    /// how long it was firing.
    pub active_for: Duration,
    /// Firing: consecutive samples the condition held on (XID: 1). Resolved: 0.
    pub samples: u32,
    /// Firing: every reading of the GPU (`nvidia.gpu.reading.*`); resolved: empty.
    pub readings: Vec<KeyValue>,
    /// What was seen, in words.
    pub summary: String,
    /// What to do.
    pub hint: Cow<'static, str>,
}

/// An XID error seen by the NVML event watcher (`nvmlEventSetWait_v2`,
/// `nvmlEventTypeXidCriticalError`), for [`Engine::xid`](super::Engine::xid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidReport {
    /// UUID of the physical GPU (`EventData.device`), the `hw.id`.
    pub hw_id: String,
    /// The XID code (`eventData`).
    pub xid: u64,
    /// When it was seen (monotonic), to time the quiet period.
    pub at: Instant,
    /// When it was seen (wall clock), the record's time.
    pub time: SystemTime,
    /// MIG GPU instance it hit (`gpuInstanceId`), when NVML names one.
    pub gpu_instance_id: Option<u32>,
    /// MIG compute instance (`computeInstanceId`), when NVML names one.
    pub compute_instance_id: Option<u32>,
}
