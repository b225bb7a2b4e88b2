//! The engine: runs every enabled rule over each snapshot, keeps each alert's state
//! (pending, firing) and returns the transitions to report. Pure: time is the snapshot's
//! (`taken_instant` for holds, `taken_at` for the records), nothing here reads a clock,
//! emits or blocks, so tests feed it synthetic snapshots.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;

use super::alert::{Alert, AlertState, XidReport};
use super::catalogue::{Hold, RuleId};
use super::preallocation::pool_params;
use super::rule::{device_label, label, Built, Deferred, Rule, Verdict};
use crate::catalogue::alert_values;
use crate::catalogue::metrics::{device_attributes, info_attributes, Number, CATALOGUE};
use crate::catalogue::xid;
use crate::config::RulesConfig;
use crate::sampling::{DeviceInfo, DeviceSample, DeviceState, Snapshot};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// True since `since`, on `samples` consecutive samples; not yet long enough.
    Pending { since: Instant, samples: u32 },
    /// Fired at `fired`; clear since `clear.0` on `clear.1` consecutive samples.
    Firing {
        fired: Instant,
        clear: Option<(Instant, u32)>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Step {
    Fire { held_for: Duration, samples: u32 },
    Resolve { firing_for: Duration },
}

fn satisfied(hold: Hold, since: Instant, samples: u32, now: Instant) -> bool {
    match hold {
        Hold::Immediate => true,
        Hold::Duration(d) => now.saturating_duration_since(since) >= d,
        Hold::Samples(n) => samples >= n,
    }
}

/// One alert's state machine, one sample at a time.
fn advance(
    phase: Option<Phase>,
    holds: Option<bool>,
    now: Instant,
    fire: Hold,
    clear: Hold,
) -> (Option<Phase>, Option<Step>) {
    let firing = |held_for, samples| {
        (
            Some(Phase::Firing {
                fired: now,
                clear: None,
            }),
            Some(Step::Fire { held_for, samples }),
        )
    };
    match (phase, holds) {
        (None, Some(true)) => {
            if satisfied(fire, now, 1, now) {
                firing(Duration::ZERO, 1)
            } else {
                (
                    Some(Phase::Pending {
                        since: now,
                        samples: 1,
                    }),
                    None,
                )
            }
        }
        (None, _) => (None, None),
        (Some(Phase::Pending { since, samples }), Some(true)) => {
            let samples = samples.saturating_add(1);
            if satisfied(fire, since, samples, now) {
                firing(now.saturating_duration_since(since), samples)
            } else {
                (Some(Phase::Pending { since, samples }), None)
            }
        }
        (Some(Phase::Pending { .. }), _) => (None, None),
        (Some(Phase::Firing { fired, .. }), Some(true)) => {
            (Some(Phase::Firing { fired, clear: None }), None)
        }
        (Some(Phase::Firing { fired, clear: c }), Some(false)) => {
            let (since, n) = c.map_or((now, 1), |(s, n)| (s, n.saturating_add(1)));
            if satisfied(clear, since, n, now) {
                (
                    None,
                    Some(Step::Resolve {
                        firing_for: now.saturating_duration_since(fired),
                    }),
                )
            } else {
                (
                    Some(Phase::Firing {
                        fired,
                        clear: Some((since, n)),
                    }),
                    None,
                )
            }
        }
        (Some(firing @ Phase::Firing { .. }), None) => (Some(firing), None),
    }
}

struct Tracked {
    phase: Phase,
    hw_id: Option<String>,
    device: Vec<KeyValue>,
    label: String,
}

struct Slot {
    rule: Box<dyn Rule>,
    fire: Hold,
    clear: Hold,
    threshold: Option<f64>,
}

struct XidState {
    fired: Instant,
    last: Instant,
    count: u64,
    device: Vec<KeyValue>,
    label: String,
    values: Vec<KeyValue>,
}

/// Every enabled rule and the state of every alert.
pub struct Engine {
    slots: Vec<Slot>,
    alerts: HashMap<(RuleId, String), Tracked>,
    xid: Option<(Duration, Option<f64>)>,
    xids: HashMap<(String, u64), XidState>,
    /// Last sample of each GPU in which it answered: readings for the records (for a lost
    /// GPU, the readings before it was lost).
    last_ok: HashMap<String, DeviceSample>,
    /// Device attributes and label of each GPU seen, for XID records.
    known: HashMap<String, (Vec<KeyValue>, String)>,
    scratch: Vec<Verdict>,
}

impl Engine {
    /// The enabled rules of `config`, with their thresholds and holds.
    pub fn new(config: &RulesConfig) -> Self {
        let mut slots = Vec::new();
        let mut xid = None;
        // What other rules need of the rules they defer to, when those are enabled.
        let enabled = |id: RuleId| {
            config
                .0
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, s)| *s)
                .filter(|s| s.enabled)
        };
        // What the rules that defer to others are told of them.
        let deferred = Deferred {
            pools: enabled(RuleId::MemoryPreallocated).map(pool_params),
            memory_bound: enabled(RuleId::MemoryBound)
                .and_then(|s| s.threshold.zip(s.second_threshold)),
        };
        for (id, s) in &config.0 {
            if !s.enabled {
                continue;
            }
            // Each rule is built by its row's constructor: no arm per rule here.
            match (id.spec().build)(s, &deferred) {
                Built::Judged { rule, clear } => slots.push(Slot {
                    rule,
                    fire: s.hold,
                    clear,
                    threshold: s.threshold,
                }),
                Built::Xid { quiet, threshold } => xid = Some((quiet, threshold)),
            }
        }
        Self {
            slots,
            alerts: HashMap::new(),
            xid,
            xids: HashMap::new(),
            last_ok: HashMap::new(),
            known: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    /// Whether any rule is enabled (else nothing needs the samples).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.xid.is_none()
    }

    /// The alerts firing now: rule and `hw.id` (for tests and health).
    pub fn firing(&self) -> Vec<(RuleId, Option<String>)> {
        let mut v: Vec<_> = self
            .alerts
            .iter()
            .filter(|(_, t)| matches!(t.phase, Phase::Firing { .. }))
            .map(|((id, _), t)| (*id, t.hw_id.clone()))
            .chain(
                self.xids
                    .keys()
                    .map(|(hw, _)| (RuleId::Xid, Some(hw.clone()))),
            )
            .collect();
        v.sort();
        v
    }

    /// Judges one snapshot (snapshots must come in order) and returns what fired or
    /// resolved at it.
    pub fn observe(&mut self, snapshot: &Snapshot) -> Vec<Alert> {
        let now = snapshot.taken_instant;
        for d in &snapshot.devices {
            if d.state == DeviceState::Ok {
                self.last_ok.insert(d.info.uuid.clone(), d.clone());
            }
            self.known
                .insert(d.info.uuid.clone(), (device_attributes(d), label(d)));
            // The parent GPU of a MIG device, for XIDs reported on it, unless it is sampled.
            if let Some(m) = &d.info.mig {
                if !snapshot
                    .devices
                    .iter()
                    .any(|g| g.info.uuid == m.parent_uuid)
                {
                    let p = parent_info(&d.info);
                    let lbl = device_label(&p);
                    self.known
                        .entry(p.uuid.clone())
                        .or_insert_with(|| (info_attributes(&p), lbl));
                }
            }
        }
        let mut out = Vec::new();
        for slot in &mut self.slots {
            let id = slot.rule.id();
            self.scratch.clear();
            slot.rule.evaluate(snapshot, &mut self.scratch);
            let mut seen = HashSet::new();
            for v in self.scratch.drain(..) {
                seen.insert(v.key.clone());
                let key = (id, v.key.clone());
                let tracked = self.alerts.remove(&key);
                let phase = tracked.as_ref().map(|t| t.phase);
                let (next, step) = advance(phase, v.holds, now, slot.fire, slot.clear);
                let (hw_id, device, lbl) = match (&tracked, step) {
                    // A firing alert keeps the GPU it named when it fired.
                    (Some(t), _) if matches!(t.phase, Phase::Firing { .. }) => {
                        (t.hw_id.clone(), t.device.clone(), t.label.clone())
                    }
                    _ => {
                        let d = v
                            .hw_id
                            .as_ref()
                            .and_then(|h| snapshot.devices.iter().find(|d| &d.info.uuid == h));
                        // Not sampled itself: the parent GPU of sampled MIG devices.
                        let parent = v.hw_id.as_ref().filter(|_| d.is_none()).and_then(|h| {
                            snapshot
                                .devices
                                .iter()
                                .find(|m| m.info.mig.as_ref().is_some_and(|p| &p.parent_uuid == h))
                        });
                        (
                            v.hw_id.clone(),
                            d.map(device_attributes)
                                .or_else(|| {
                                    parent
                                        .map(|m| parent_info(&m.info))
                                        .map(|i| info_attributes(&i))
                                })
                                .unwrap_or_else(|| {
                                    v.hw_id
                                        .iter()
                                        .map(|h| {
                                            KeyValue::new(
                                                crate::catalogue::attributes::HW_ID,
                                                h.clone(),
                                            )
                                        })
                                        .collect()
                                }),
                            d.map(label)
                                .or_else(|| parent.map(|m| device_label(&parent_info(&m.info))))
                                .unwrap_or_else(|| "the GPUs".to_string()),
                        )
                    }
                };
                match step {
                    Some(Step::Fire { held_for, samples }) => out.push(Alert {
                        rule: id,
                        state: AlertState::Firing,
                        hw_id: hw_id.clone(),
                        device: device.clone(),
                        label: lbl.clone(),
                        time: snapshot.taken_at,
                        threshold: slot.threshold,
                        values: v.values,
                        active_for: held_for,
                        samples,
                        readings: hw_id
                            .as_ref()
                            .and_then(|h| self.last_ok.get(h))
                            .map(readings)
                            .unwrap_or_default(),
                        summary: v.summary,
                        hint: id.spec().hint.into(),
                    }),
                    Some(Step::Resolve { firing_for }) => out.push(Alert {
                        rule: id,
                        state: AlertState::Resolved,
                        hw_id: hw_id.clone(),
                        device: device.clone(),
                        label: lbl.clone(),
                        time: snapshot.taken_at,
                        threshold: slot.threshold,
                        values: v.values,
                        active_for: firing_for,
                        samples: 0,
                        readings: Vec::new(),
                        summary: v.summary,
                        hint: id.spec().hint.into(),
                    }),
                    None => {}
                }
                if let Some(phase) = next {
                    self.alerts.insert(
                        key,
                        Tracked {
                            phase,
                            hw_id,
                            device,
                            label: lbl,
                        },
                    );
                }
            }
            // A subject the rule did not judge this time cannot be said to still hold:
            // its pending streak ends (a firing alert stays as it is).
            self.alerts.retain(|(rid, key), t| {
                *rid != id || seen.contains(key) || matches!(t.phase, Phase::Firing { .. })
            });
        }
        if let Some((quiet, threshold)) = self.xid {
            let done: Vec<_> = self
                .xids
                .iter()
                .filter(|(_, s)| now.saturating_duration_since(s.last) >= quiet)
                .map(|(k, _)| k.clone())
                .collect();
            for key in done {
                if let Some(s) = self.xids.remove(&key) {
                    let mut values = s.values;
                    values.push(alert_values::XID_COUNT.kv(s.count as i64));
                    out.push(Alert {
                        rule: RuleId::Xid,
                        state: AlertState::Resolved,
                        hw_id: Some(key.0.clone()),
                        device: s.device,
                        label: s.label,
                        time: snapshot.taken_at,
                        threshold,
                        values,
                        active_for: now.saturating_duration_since(s.fired),
                        samples: 0,
                        readings: Vec::new(),
                        summary: format!(
                            "XID {} reported {} time(s), none in the last {}",
                            key.1,
                            s.count,
                            humantime::format_duration(quiet)
                        ),
                        hint: xid::hint(key.1).into(),
                    });
                }
            }
        }
        out
    }

    /// An XID from the event watcher: fires at the first report of a code on a GPU; a
    /// repeat while it fires is counted and returns `None`. It resolves in
    /// [`Engine::observe`] once the code has not been reported for the rule's duration.
    /// `None` as well when the rule is disabled.
    pub fn xid(&mut self, report: &XidReport) -> Option<Alert> {
        let (_, threshold) = self.xid?;
        let key = (report.hw_id.clone(), report.xid);
        if let Some(s) = self.xids.get_mut(&key) {
            s.count += 1;
            if report.at > s.last {
                s.last = report.at;
            }
            return None;
        }
        let (device, lbl) = self.known.get(&report.hw_id).cloned().unwrap_or_else(|| {
            (
                vec![KeyValue::new(
                    crate::catalogue::attributes::HW_ID,
                    report.hw_id.clone(),
                )],
                report.hw_id.clone(),
            )
        });
        let mut values = vec![alert_values::XID.kv(report.xid as i64)];
        if let Some(g) = report.gpu_instance_id {
            values.push(alert_values::XID_GPU_INSTANCE.kv(i64::from(g)));
        }
        if let Some(c) = report.compute_instance_id {
            values.push(alert_values::XID_COMPUTE_INSTANCE.kv(i64::from(c)));
        }
        self.xids.insert(
            key,
            XidState {
                fired: report.at,
                last: report.at,
                count: 1,
                device: device.clone(),
                label: lbl.clone(),
                values: values.clone(),
            },
        );
        Some(Alert {
            rule: RuleId::Xid,
            state: AlertState::Firing,
            hw_id: Some(report.hw_id.clone()),
            device,
            label: lbl,
            time: report.time,
            threshold,
            values,
            active_for: Duration::ZERO,
            samples: 1,
            readings: self
                .last_ok
                .get(&report.hw_id)
                .map(readings)
                .unwrap_or_default(),
            summary: format!("XID {} reported", report.xid),
            hint: xid::hint(report.xid).into(),
        })
    }
}

/// What is known of the physical GPU of a MIG device from the MIG device's own facts: its
/// UUID, index, PCI bus id (a MIG device is on its GPU's) and driver (its product name is not
/// known, so `hw.model` is absent).
fn parent_info(mig: &DeviceInfo) -> DeviceInfo {
    DeviceInfo {
        index: mig.index,
        pci_bus_id: mig.pci_bus_id.clone(),
        uuid: mig
            .mig
            .as_ref()
            .map_or(&mig.uuid, |m| &m.parent_uuid)
            .clone(),
        driver_version: mig.driver_version.clone(),
        ..Default::default()
    }
}

/// Every reading of a GPU as attributes `nvidia.gpu.reading.<metric>[.<attribute value>]`,
/// through the metric catalogue's own mapping (so names, units and absences are the
/// metrics'): e.g. `nvidia.gpu.reading.hw.power` (W), `nvidia.gpu.reading.hw.temperature.gpu`
/// (Cel), `nvidia.gpu.reading.hw.status.ok` (1 or 0). A value NVML did not give is absent.
pub fn readings(d: &DeviceSample) -> Vec<KeyValue> {
    let mut out = Vec::new();
    let mut points = Vec::new();
    for def in CATALOGUE {
        points.clear();
        (def.extract)(d, &mut points);
        for p in &points {
            let key = match p.attributes.first() {
                Some(kv) => format!("nvidia.gpu.reading.{}.{}", def.name, kv.value.as_str()),
                None => format!("nvidia.gpu.reading.{}", def.name),
            };
            out.push(match def.number {
                Number::Int => KeyValue::new(key, p.value as i64),
                Number::F64 => KeyValue::new(key, p.value),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> Instant {
        Instant::now()
    }

    fn run(fire: Hold, clear: Hold, seq: &[(u64, Option<bool>)]) -> Vec<(u64, Step)> {
        let base = t0();
        let mut phase = None;
        let mut out = Vec::new();
        for (ms, holds) in seq {
            let (next, step) = advance(
                phase,
                *holds,
                base + Duration::from_millis(*ms),
                fire,
                clear,
            );
            phase = next;
            if let Some(s) = step {
                out.push((*ms, s));
            }
        }
        out
    }

    #[test]
    fn duration_hold_fires_after_not_before_and_once() {
        let d = Hold::Duration(Duration::from_secs(10));
        let seq: Vec<_> = (0..=30).map(|s| (s * 1000, Some(true))).collect();
        let steps = run(d, d, &seq);
        assert_eq!(
            steps,
            vec![(
                10_000,
                Step::Fire {
                    held_for: Duration::from_secs(10),
                    samples: 11
                }
            )]
        );
    }

    #[test]
    fn a_false_or_unknown_sample_restarts_the_streak() {
        let d = Hold::Duration(Duration::from_secs(10));
        let mut seq: Vec<_> = (0..=9).map(|s| (s * 1000, Some(true))).collect();
        seq.push((9_500, Some(false)));
        seq.extend((10..=19).map(|s| (s * 1000, Some(true))));
        seq.push((19_500, None));
        seq.extend((20..=30).map(|s| (s * 1000, Some(true))));
        let steps = run(d, d, &seq);
        assert_eq!(steps.len(), 1);
        assert_eq!(steps[0].0, 30_000);
    }

    #[test]
    fn resolves_after_clear_for_the_clear_hold_and_unknown_does_not_clear() {
        let fire = Hold::Samples(3);
        let clear = Hold::Samples(3);
        let seq = [
            (0, Some(true)),
            (1, Some(true)),
            (2, Some(true)), // fires
            (3, Some(false)),
            (4, Some(false)),
            (5, Some(true)), // clear streak broken
            (6, Some(false)),
            (7, None), // neither
            (8, Some(false)),
            (9, Some(false)), // third clear sample: resolves
            (10, Some(false)),
        ];
        let steps = run(fire, clear, &seq);
        assert_eq!(
            steps,
            vec![
                (
                    2,
                    Step::Fire {
                        held_for: Duration::from_millis(2),
                        samples: 3
                    }
                ),
                (
                    9,
                    Step::Resolve {
                        firing_for: Duration::from_millis(7)
                    }
                )
            ]
        );
    }

    #[test]
    fn immediate_fires_and_resolves_at_once() {
        let steps = run(
            Hold::Immediate,
            Hold::Immediate,
            &[
                (0, Some(false)),
                (5, Some(true)),
                (6, Some(true)),
                (7, Some(false)),
            ],
        );
        assert_eq!(
            steps,
            vec![
                (
                    5,
                    Step::Fire {
                        held_for: Duration::ZERO,
                        samples: 1
                    }
                ),
                (
                    7,
                    Step::Resolve {
                        firing_for: Duration::from_millis(2)
                    }
                )
            ]
        );
    }
}
