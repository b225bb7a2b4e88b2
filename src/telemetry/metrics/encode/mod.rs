//! Builds each metrics export as an OTLP `ExportMetricsServiceRequest` (the official
//! protobuf messages of `opentelemetry-proto`) straight from the exported
//! [`Snapshot`]: names, units, instruments and values from the catalogue
//! ([`CATALOGUE`]), the agent's own metrics ([`crate::telemetry::metrics::self_metrics`]) and the recorded ones
//! ([`Recorded`]); start times, resets and temporality from [`SeriesStore`].
//!
//! Every GPU point carries the time of the tick that read its value (the snapshot's
//! `taken_at`): a slow group's value is in the snapshot of the tick that read it only, so
//! no point is older than its timestamp says. The agent's own metrics carry the export's
//! time.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{
    metric, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource as ProtoResource;

mod pods;
pub(crate) mod proto;

use crate::catalogue::attributes;
use crate::catalogue::metrics::{
    device_points, AgentMetricDef, Instrument, MetricDef, Number, CATALOGUE,
};
use crate::config::TemporalityPreference;
use crate::sampling::Snapshot;
use crate::telemetry::metrics::recorded::{HistogramValue, Recorded};
use crate::telemetry::metrics::self_metrics::OwnValues;
use crate::telemetry::metrics::series::{
    series_key, Accepted, Cumulative, Origin, Restart, SeriesStore, Stamp,
};
use proto::{histogram_point, number, point, temporality};

/// The OTel instrument kinds, as the temporality preference tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Asynchronous (observable) counter: read from NVML or the agent's state.
    ObservableCounter,
    /// Synchronous counter: incremented as things happen.
    Counter,
    /// Synchronous histogram.
    Histogram,
}

/// Whether `kind` is exported as delta under `preference` (OTLP exporter specification,
/// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`). Up-down counters and gauges are
/// never delta.
pub fn is_delta(preference: TemporalityPreference, kind: Kind) -> bool {
    match preference {
        TemporalityPreference::Cumulative => false,
        TemporalityPreference::Delta => true,
        TemporalityPreference::LowMemory => kind != Kind::ObservableCounter,
    }
}

/// One export: the request, and what the series remember once the collector accepted it.
#[derive(Debug)]
pub struct Batch {
    /// The OTLP request.
    pub request: ExportMetricsServiceRequest,
    /// Data points in it (every resource's).
    pub points: usize,
    accepted: Vec<Accepted>,
    histograms: Vec<(String, HistogramValue, SystemTime)>,
}

#[derive(Debug, Clone)]
struct HistogramState {
    start: SystemTime,
    epoch: u64,
    /// Subtracted from the recorded value: the value at the last clock step.
    base: Option<HistogramValue>,
    /// The value and time of the last accepted point (delta).
    accepted: Option<(HistogramValue, SystemTime)>,
}

/// Turns snapshots and the agent's own state into OTLP requests; owns the series' state.
#[derive(Debug)]
pub struct Encoder {
    resource: ProtoResource,
    scope: InstrumentationScope,
    temporality: TemporalityPreference,
    series: SeriesStore,
    started: SystemTime,
    /// Clock epoch: bumped at every wall-clock step (histograms restart then).
    epoch: u64,
    histograms: HashMap<String, HistogramState>,
    /// `GPU_SIDECAR_METRICS_DETAIL`: every point of a folded metric from the start.
    detail: bool,
    /// Folded series ([`crate::catalogue::metrics::Fold`]) exported so far (they stay), with
    /// when each was last seen; forgotten after `shown_retention` unseen.
    shown: HashMap<String, std::time::Instant>,
    shown_retention: Duration,
}

/// One metric being assembled.
struct Building {
    metrics: Vec<Metric>,
    points: usize,
}

impl Building {
    fn push(&mut self, name: &str, unit: &str, description: &str, data: metric::Data, n: usize) {
        if n == 0 {
            return;
        }
        self.points += n;
        self.metrics.push(Metric {
            name: name.to_string(),
            description: description.to_string(),
            unit: unit.to_string(),
            data: Some(data),
            ..Default::default()
        });
    }
}

/// The points of a catalogue metric as the OTLP data of its instrument (`delta`: a counter's
/// temporality).
fn instrument_data(
    instrument: Instrument,
    points: Vec<NumberDataPoint>,
    delta: bool,
) -> metric::Data {
    match instrument {
        Instrument::Gauge => metric::Data::Gauge(Gauge {
            data_points: points,
        }),
        Instrument::Counter => metric::Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: temporality(delta),
            is_monotonic: true,
        }),
        Instrument::UpDownCounter => metric::Data::Sum(Sum {
            data_points: points,
            aggregation_temporality: temporality(false),
            is_monotonic: false,
        }),
    }
}

/// The shortest time an up-down counter series (or a folded kind's first appearance) is
/// kept unseen: a tenth of the counters' retention, but never under a minute.
const SHORT_RETENTION_MIN: Duration = Duration::from_secs(60);

impl Encoder {
    /// An encoder for `resource`, asked for `temporality`; counter series unseen for
    /// `retention` are forgotten (up-down counter series after a tenth of it, at least a
    /// minute); the agent's own counts start at `started`.
    pub fn new(
        resource: &opentelemetry_sdk::Resource,
        temporality: TemporalityPreference,
        retention: Duration,
        started: SystemTime,
    ) -> Self {
        let short_retention = (retention / 10).max(SHORT_RETENTION_MIN);
        Self {
            resource: proto::resource(resource),
            scope: InstrumentationScope {
                name: crate::telemetry::SCOPE.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                ..Default::default()
            },
            temporality,
            series: SeriesStore::new(retention, short_retention),
            started,
            epoch: 0,
            histograms: HashMap::new(),
            detail: false,
            shown: HashMap::new(),
            shown_retention: short_retention,
        }
    }

    /// With `detail` (`GPU_SIDECAR_METRICS_DETAIL`), every point of a folded metric is
    /// exported from the start; without, each waits for its first non-zero value.
    pub fn with_detail(mut self, detail: bool) -> Self {
        self.detail = detail;
        self
    }

    /// Whether the point of `def` with `attributes` and `value` is exported now: always,
    /// unless it is folded and has been 0 at every export so far.
    fn shown(&mut self, def: &MetricDef, attributes: &[KeyValue], value: f64, at: Stamp) -> bool {
        if self.detail || !def.fold.folds(attributes) {
            return true;
        }
        let key = series_key(def.name, attributes);
        if value == 0.0 && !self.shown.contains_key(&key) {
            return false;
        }
        self.shown.insert(key, at.mono);
        true
    }

    fn check_clock(&mut self, at: Stamp) {
        if let Some(step) = self.series.clock(at) {
            self.epoch += 1;
            tracing::warn!(
                step_s = step,
                "the wall clock stepped {} by {:.3} s against the monotonic clock: every cumulative metric series starts again (new start time) so that no point ends before it starts",
                if step < 0.0 { "back" } else { "forward" },
                step.abs()
            );
        }
    }

    fn log_restart(name: &str, attrs: &[KeyValue], restart: Option<Restart>) {
        if let Some(Restart::WentDown(from, to)) = restart {
            let hw_id = attrs
                .iter()
                .find(|kv| kv.key.as_str() == attributes::HW_ID)
                .map(|kv| kv.value.to_string())
                .unwrap_or_default();
            tracing::info!(
                metric = name,
                hw_id,
                from,
                to,
                "NVML's total went down (driver reloaded or GPU reset): the series starts again with a new start time"
            );
        }
    }

    /// Follows the counters of a snapshot that is not exported (a reset between exports is
    /// still seen as one).
    pub fn observe(&mut self, snapshot: &Snapshot) {
        let at = Stamp {
            wall: snapshot.taken_at,
            mono: snapshot.taken_instant,
        };
        self.check_clock(at);
        for def in CATALOGUE
            .iter()
            .filter(|d| d.instrument == Instrument::Counter)
        {
            for d in &snapshot.devices {
                for p in device_points(def, d) {
                    let key = series_key(def.name, &p.attributes);
                    let (_, restart) = self.series.counter(&key, p.value, at, Origin::FirstReading);
                    Self::log_restart(def.name, &p.attributes, restart);
                }
            }
        }
    }

    /// One export at `now`: the GPU metrics of `snapshot` (none when `None`), the agent's
    /// own metrics (`own`) and the recorded ones.
    pub fn encode(
        &mut self,
        snapshot: Option<&Snapshot>,
        recorded: &Recorded,
        own: &OwnValues,
        now: Stamp,
    ) -> Batch {
        let mut out = Building {
            metrics: Vec::new(),
            points: 0,
        };
        let mut accepted = Vec::new();
        let mut pods = Vec::new();
        if let Some(snap) = snapshot {
            self.gpu_metrics(snap, &mut out, &mut accepted);
            pods = self.pod_metrics(snap, &mut out, &mut accepted);
        }
        self.check_clock(now);
        self.own_metrics(own, now, &mut out, &mut accepted);
        let histograms = self.recorded_metrics(recorded, now, &mut out, &mut accepted);
        self.series.expire(now.mono);
        let keep = self.shown_retention;
        self.shown
            .retain(|_, seen| now.mono.saturating_duration_since(*seen) < keep);
        let node = ResourceMetrics {
            resource: Some(self.resource.clone()),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(self.scope.clone()),
                metrics: out.metrics,
                ..Default::default()
            }],
            ..Default::default()
        };
        let request = ExportMetricsServiceRequest {
            resource_metrics: std::iter::once(node).chain(pods).collect(),
        };
        Batch {
            request,
            points: out.points,
            accepted,
            histograms,
        }
    }

    /// The collector accepted `batch`: its delta points become the base of the next ones.
    pub fn accepted(&mut self, batch: Batch) {
        self.series.accept(batch.accepted);
        for (key, value, time) in batch.histograms {
            if let Some(h) = self.histograms.get_mut(&key) {
                h.accepted = Some((value, time));
            }
        }
    }

    /// A monotonic sum's point (delta or cumulative) for a reading.
    #[allow(clippy::too_many_arguments)]
    fn counter_point(
        &mut self,
        name: &str,
        attrs: &[KeyValue],
        raw: f64,
        at: Stamp,
        origin: Origin,
        delta: bool,
        accepted: &mut Vec<Accepted>,
    ) -> Cumulative {
        let key = series_key(name, attrs);
        let (p, restart) = self.series.counter(&key, raw, at, origin);
        Self::log_restart(name, attrs, restart);
        if !delta {
            return p;
        }
        let (d, a) = self.series.delta(&key, p);
        accepted.extend(a);
        d
    }

    fn gpu_metrics(&mut self, snap: &Snapshot, out: &mut Building, accepted: &mut Vec<Accepted>) {
        let at = Stamp {
            wall: snap.taken_at,
            mono: snap.taken_instant,
        };
        self.check_clock(at);
        for def in CATALOGUE {
            let mut points = Vec::new();
            let delta = def.instrument == Instrument::Counter
                && is_delta(self.temporality, Kind::ObservableCounter);
            for d in &snap.devices {
                for p in device_points(def, d) {
                    if !self.shown(def, &p.attributes, p.value, at) {
                        continue;
                    }
                    let dp = match def.instrument {
                        Instrument::Gauge => {
                            point(&p.attributes, None, at.wall, number(def.number, p.value))
                        }
                        Instrument::Counter => {
                            let c = self.counter_point(
                                def.name,
                                &p.attributes,
                                p.value,
                                at,
                                Origin::FirstReading,
                                delta,
                                accepted,
                            );
                            point(
                                &p.attributes,
                                Some(c.start),
                                c.time,
                                number(def.number, c.value),
                            )
                        }
                        Instrument::UpDownCounter => {
                            let c = self.series.up_down(
                                &series_key(def.name, &p.attributes),
                                p.value,
                                at,
                            );
                            point(
                                &p.attributes,
                                Some(c.start),
                                c.time,
                                number(def.number, c.value),
                            )
                        }
                    };
                    points.push(dp);
                }
            }
            let n = points.len();
            let data = instrument_data(def.instrument, points, delta);
            out.push(def.name, def.unit, def.description, data, n);
        }
    }

    fn own_metrics(
        &mut self,
        own: &OwnValues,
        now: Stamp,
        out: &mut Building,
        accepted: &mut Vec<Accepted>,
    ) {
        use crate::catalogue::metrics::{
            EXPORT_FAILURES, EXPORT_LAST_SUCCESS, NVML_ERRORS, NVML_STUCK,
        };
        let delta = is_delta(self.temporality, Kind::ObservableCounter);
        let origin = Origin::AgentStart(self.started);
        let mut sum = |enc: &mut Self,
                       m: &AgentMetricDef,
                       values: Vec<(Vec<KeyValue>, u64)>,
                       out: &mut Building| {
            let points: Vec<NumberDataPoint> = values
                .into_iter()
                .map(|(attrs, v)| {
                    let c =
                        enc.counter_point(m.name, &attrs, v as f64, now, origin, delta, accepted);
                    point(&attrs, Some(c.start), c.time, number(Number::Int, c.value))
                })
                .collect();
            let n = points.len();
            out.push(
                m.name,
                m.unit,
                m.description,
                metric::Data::Sum(Sum {
                    data_points: points,
                    aggregation_temporality: temporality(delta),
                    is_monotonic: true,
                }),
                n,
            );
        };
        let errors = own
            .nvml_errors
            .iter()
            .map(|((call, code), n)| {
                (
                    vec![
                        KeyValue::new(attributes::NVML_CALL, call.clone()),
                        KeyValue::new(attributes::ERROR_TYPE, code.clone()),
                    ],
                    *n,
                )
            })
            .collect();
        sum(self, &NVML_ERRORS, errors, out);
        let stuck = own
            .nvml_stuck
            .iter()
            .map(|((thread, step), n)| {
                (
                    vec![
                        KeyValue::new(attributes::THREAD_NAME, thread.clone()),
                        KeyValue::new(attributes::NVML_STEP, step.clone()),
                    ],
                    *n,
                )
            })
            .collect();
        sum(self, &NVML_STUCK, stuck, out);
        // Born with the first failure, counting from the agent's start, as every count of
        // events is: nothing is exported for failures that never happened.
        let failures = (own.export_failures > 0)
            .then(|| (Vec::new(), own.export_failures))
            .into_iter()
            .collect();
        sum(self, &EXPORT_FAILURES, failures, out);
        if let Some(t) = own.last_success {
            let secs = t
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            out.push(
                EXPORT_LAST_SUCCESS.name,
                EXPORT_LAST_SUCCESS.unit,
                EXPORT_LAST_SUCCESS.description,
                metric::Data::Gauge(Gauge {
                    data_points: vec![point(&[], None, now.wall, number(Number::F64, secs))],
                }),
                1,
            );
        }
    }

    fn recorded_metrics(
        &mut self,
        recorded: &Recorded,
        now: Stamp,
        out: &mut Building,
        accepted: &mut Vec<Accepted>,
    ) -> Vec<(String, HistogramValue, SystemTime)> {
        let (counters, histograms) = recorded.collect();
        let delta = is_delta(self.temporality, Kind::Counter);
        let origin = Origin::AgentStart(self.started);
        let mut by_def: Vec<(&'static AgentMetricDef, Vec<NumberDataPoint>)> = Vec::new();
        for c in counters {
            let p = self.counter_point(
                c.def.name,
                &c.attributes,
                c.count as f64,
                now,
                origin,
                delta,
                accepted,
            );
            let dp = point(
                &c.attributes,
                Some(p.start),
                p.time,
                number(Number::Int, p.value),
            );
            match by_def.iter_mut().find(|(d, _)| std::ptr::eq(*d, c.def)) {
                Some((_, v)) => v.push(dp),
                None => by_def.push((c.def, vec![dp])),
            }
        }
        for (def, points) in by_def {
            let n = points.len();
            out.push(
                def.name,
                def.unit,
                def.description,
                metric::Data::Sum(Sum {
                    data_points: points,
                    aggregation_temporality: temporality(delta),
                    is_monotonic: true,
                }),
                n,
            );
        }
        // Gauges (the webhook's certificate times, last-event times): stamped with the
        // export's time.
        let mut by_def: Vec<(&'static AgentMetricDef, Vec<NumberDataPoint>)> = Vec::new();
        for g in recorded.gauges() {
            let dp = point(&g.attributes, None, now.wall, number(Number::F64, g.value));
            match by_def.iter_mut().find(|(d, _)| std::ptr::eq(*d, g.def)) {
                Some((_, v)) => v.push(dp),
                None => by_def.push((g.def, vec![dp])),
            }
        }
        for (def, points) in by_def {
            let n = points.len();
            out.push(
                def.name,
                def.unit,
                def.description,
                metric::Data::Gauge(Gauge {
                    data_points: points,
                }),
                n,
            );
        }
        let hdelta = is_delta(self.temporality, Kind::Histogram);
        let mut pending = Vec::new();
        let mut by_def: Vec<(&'static AgentMetricDef, Vec<HistogramDataPoint>)> = Vec::new();
        for h in histograms {
            let key = series_key(h.def.name, &h.attributes);
            let (epoch, started) = (self.epoch, self.started);
            let state = self
                .histograms
                .entry(key.clone())
                .or_insert_with(|| HistogramState {
                    start: started,
                    epoch,
                    base: None,
                    accepted: None,
                });
            if state.epoch != epoch {
                // The wall clock stepped: a new stream from here.
                *state = HistogramState {
                    start: now.wall,
                    epoch,
                    base: Some(h.clone()),
                    accepted: None,
                };
            }
            let (base, start) = match (&state.accepted, hdelta) {
                (Some((v, t)), true) => (Some(v), *t),
                _ => (state.base.as_ref(), state.start),
            };
            let dp = histogram_point(&h, base, start, now.wall);
            if hdelta {
                pending.push((key, h.clone(), now.wall));
            }
            match by_def.iter_mut().find(|(d, _)| std::ptr::eq(*d, h.def)) {
                Some((_, v)) => v.push(dp),
                None => by_def.push((h.def, vec![dp])),
            }
        }
        for (def, points) in by_def {
            let n = points.len();
            out.push(
                def.name,
                def.unit,
                def.description,
                metric::Data::Histogram(Histogram {
                    data_points: points,
                    aggregation_temporality: temporality(hdelta),
                }),
                n,
            );
        }
        pending
    }
}

#[cfg(test)]
mod tests;
