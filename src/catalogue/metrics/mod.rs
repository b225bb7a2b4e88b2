//! The one catalogue of exported metrics: name, instrument, unit, description, attributes
//! and NVML source, plus the pure function that turns a [`DeviceSample`] into data points.
//!
//! Export ([`crate::telemetry::metrics::encode`]), `docs/metrics.md` ([`markdown`]) and the
//! consistency test all follow [`CATALOGUE`]; adding a metric for a field already read is one
//! row of it: name, instrument, unit, attributes, NVML source, the valid ranges of its
//! readings ([`MetricDef::bounds`]) and the mapping.

use opentelemetry::KeyValue;

use crate::catalogue::attributes::{self, HwState};
use crate::catalogue::clocks_event_reasons;
use crate::sampling::bounds::Bound;
use crate::sampling::{DeviceInfo, DeviceSample, DeviceState, SampleGroup};

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

/// One row of the catalogue; `X` is how a value is taken ([`Extract`] from a device's
/// sample; node mode's per-pod rows take it from one pod's share, [`PodExtract`]).
#[derive(Debug, Clone, Copy)]
pub struct MetricDef<X = Extract> {
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
    /// The valid ranges of the readings the value is made of ([`Bound::readings`]): the
    /// sampler drops a value outside them, so no point of this metric carries it; rendered
    /// as "Valid ranges" in `docs/metrics.md`.
    pub bounds: &'static [&'static Bound],
    /// The mapping.
    pub extract: X,
    /// Which of its points are detail, exported by default only once they say something
    /// (see [`Fold`]).
    pub fold: Fold,
}

/// Which points of a metric the default export leaves out while they carry no information
/// (the series budget: docs/metrics.md, Series budget). A breakdown by kind whose kinds a job
/// mostly never uses (clock-event reasons, non-tensor pipes, a process's video engines) is
/// folded: each of those points is exported from the first export where its value is not 0,
/// then at every export, 0 or not (a series that went away would leave its last value, 1,
/// standing in a Prometheus exporter for minutes). With `GPU_SIDECAR_METRICS_DETAIL=true`
/// every point is exported from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fold {
    /// Every point, at every export.
    None,
    /// The points whose `attribute` is not one of `always` wait for their first non-zero
    /// value (every point when `always` is empty).
    UntilNonZero {
        /// The attribute that tells the kinds apart.
        attribute: &'static str,
        /// Kinds exported from the start all the same.
        always: &'static [&'static str],
    },
}

impl Fold {
    /// Whether the point with `attributes` waits for its first non-zero value.
    pub fn folds(&self, attributes: &[KeyValue]) -> bool {
        match self {
            Fold::None => false,
            Fold::UntilNonZero { attribute, always } => attributes
                .iter()
                .find(|kv| kv.key.as_str() == *attribute)
                .is_some_and(|kv| !always.contains(&kv.value.as_str().as_ref())),
        }
    }

    /// What `docs/metrics.md` says of it, after the attributes.
    pub fn doc(&self) -> Option<String> {
        match self {
            Fold::None => None,
            Fold::UntilNonZero { attribute, always } => {
                let which = if always.is_empty() {
                    format!("each `{attribute}`")
                } else {
                    let kept: Vec<String> = always.iter().map(|v| format!("`{v}`")).collect();
                    format!("each `{attribute}` but {}", kept.join(", "))
                };
                Some(format!(
                    "by default {which} is exported from the first export where it is not 0, then at every export (all from the start with `GPU_SIDECAR_METRICS_DETAIL=true`)"
                ))
            }
        }
    }
}

/// Attributes on every GPU data point.
pub const COMMON_ATTRIBUTES: &str = "`hw.id` (GPU UUID, or MIG device UUID), `hw.type` = `gpu`, `hw.vendor` = `NVIDIA`, `hw.model` (product name, when NVML gives it), on a MIG device `hw.parent` (its GPU's UUID), and on a GPU shared with other pods `nvidia.gpu.sharing` = `time_slicing` | `mps` (its values are the whole GPU's; see [Shared GPUs](kubernetes.md#shared-gpus-time-slicing-mps))";

/// The `hw.state` of a device: `failed`, `degraded` or `ok` ([`HwState`]).
pub fn device_hw_state(d: &DeviceSample) -> HwState {
    match d.state {
        DeviceState::Lost => HwState::Failed,
        DeviceState::Ok
            if d.clocks_event_reasons.unwrap_or(0) & clocks_event_reasons::DEGRADING != 0
                || d.remapped_rows.is_some_and(|r| r.pending || r.failed) =>
        {
            HwState::Degraded
        }
        DeviceState::Ok => HwState::Ok,
    }
}

/// [`device_hw_state`] as exported.
pub fn device_state(d: &DeviceSample) -> &'static str {
    device_hw_state(d).as_str()
}

/// The attributes every data point of this device carries (see [`COMMON_ATTRIBUTES`]).
pub fn device_attributes(d: &DeviceSample) -> Vec<KeyValue> {
    let mut v = info_attributes(&d.info);
    if let Some(mode) = d.sharing {
        v.push(mode.kv());
    }
    v
}

/// [`device_attributes`] from the static facts alone (for events and recorded metrics).
pub fn info_attributes(info: &DeviceInfo) -> Vec<KeyValue> {
    let mut v = vec![
        KeyValue::new(attributes::HW_ID, info.uuid.clone()),
        KeyValue::new(attributes::HW_TYPE, "gpu"),
        KeyValue::new(attributes::HW_VENDOR, "NVIDIA"),
    ];
    if let Some(name) = &info.name {
        v.push(KeyValue::new(attributes::HW_MODEL, name.clone()));
    }
    if let Some(m) = &info.mig {
        v.push(KeyValue::new(attributes::HW_PARENT, m.parent_uuid.clone()));
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

mod agent;
mod doc;
mod gpu;
mod pod;
#[cfg(test)]
mod tests;

pub use agent::*;
pub use doc::{age, markdown, H200Series, SERIES_BUDGET};
pub use gpu::CATALOGUE;
pub use pod::{
    PodExtract, PodMetricDef, ATTRIBUTION, NOT_ATTRIBUTED, POD_ATTRIBUTES, POD_CATALOGUE,
};
