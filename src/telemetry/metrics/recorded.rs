//! The metrics recorded as things happen ([`RECORDED`](crate::catalogue::metrics::RECORDED): XIDs,
//! alerts, sample durations, the webhook's certificate, the last XID of each code): cumulative
//! counts and histograms by attribute set, and gauges' last values (a last-event time is a gauge
//! in Unix seconds), kept in memory until each export reads them ([`Recorded::collect`],
//! [`Recorded::gauges`]).
//!
//! A series is born with its first increment (nothing is exported for what never
//! happened), counting from the agent's start: the encoder gives it the agent's start as
//! start time, so its first point (the first count, 1 for one event) says when the count
//! began, and backends that take start times as created timestamps see the step from 0.
//! Prometheus behind the collector's exporter sees no start time, so a count born at 1, or
//! born at 1 again in a restarted agent, shows no increase there: a [`TimeGauge`] (the Unix
//! time of the last event, `nvidia.gpu.xid.last_seen`) changes at every event, in every run,
//! and is what the shipped `GPUXidError` rule reads (docs/events.md, First occurrences).
//! Each metric keeps at most [`MAX_SERIES`] attribute sets; beyond that, new sets are
//! dropped with one warning, so memory stays bounded.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;

use crate::catalogue::metrics::AgentMetricDef;
use crate::telemetry::metrics::series::series_key;

/// Attribute sets kept per recorded metric (the SDK's default cardinality limit).
pub const MAX_SERIES: usize = 2000;

/// One counter series: its attributes and count.
#[derive(Debug, Clone)]
pub struct CounterValue {
    /// The metric.
    pub def: &'static AgentMetricDef,
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
    /// Count since the agent started.
    pub count: u64,
}

/// One histogram series: explicit buckets, cumulative since the agent started.
#[derive(Debug, Clone)]
pub struct HistogramValue {
    /// The metric.
    pub def: &'static AgentMetricDef,
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
    /// Upper bounds of the buckets (the last bucket is unbounded).
    pub bounds: &'static [f64],
    /// Counts per bucket, `bounds.len() + 1` of them.
    pub bucket_counts: Vec<u64>,
    /// Number of values.
    pub count: u64,
    /// Sum of the values.
    pub sum: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

/// One gauge series: its attributes and last value.
#[derive(Debug, Clone)]
pub struct GaugeValue {
    /// The metric.
    pub def: &'static AgentMetricDef,
    /// Its attributes.
    pub attributes: Vec<KeyValue>,
    /// The value last set (for a last-event time, Unix seconds with sub-second precision).
    pub value: f64,
}

#[derive(Debug, Default)]
struct State {
    counters: BTreeMap<String, CounterValue>,
    histograms: BTreeMap<String, HistogramValue>,
    gauges: BTreeMap<String, GaugeValue>,
    /// Metrics whose series limit was hit (warned once).
    full: Vec<&'static str>,
}

/// The store every recorded instrument writes to; the exporter reads it.
#[derive(Debug, Default)]
pub struct Recorded {
    state: Mutex<State>,
}

impl Recorded {
    /// An empty store.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A counter handle for `def`.
    pub fn counter(self: &Arc<Self>, def: &'static AgentMetricDef) -> Counter {
        Counter {
            def,
            store: self.clone(),
        }
    }

    /// A histogram handle for `def` with the explicit bucket upper bounds `bounds`.
    pub fn histogram(
        self: &Arc<Self>,
        def: &'static AgentMetricDef,
        bounds: &'static [f64],
    ) -> Histogram {
        Histogram {
            def,
            bounds,
            store: self.clone(),
        }
    }

    /// A gauge handle for `def`.
    pub fn gauge(self: &Arc<Self>, def: &'static AgentMetricDef) -> Gauge {
        Gauge {
            def,
            store: self.clone(),
        }
    }

    /// Every gauge series, as last set.
    pub fn gauges(&self) -> Vec<GaugeValue> {
        self.lock().gauges.values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every counter and histogram series, as of now.
    pub fn collect(&self) -> (Vec<CounterValue>, Vec<HistogramValue>) {
        let s = self.lock();
        (
            s.counters.values().cloned().collect(),
            s.histograms.values().cloned().collect(),
        )
    }
}

fn room<T>(map: &BTreeMap<String, T>, full: &mut Vec<&'static str>, def: &AgentMetricDef) -> bool {
    let per_metric = map
        .keys()
        .filter(|k| k.split('\u{1f}').next() == Some(def.name))
        .count();
    if per_metric < MAX_SERIES {
        return true;
    }
    if !full.contains(&def.name) {
        full.push(def.name);
        tracing::warn!(
            metric = def.name,
            "{MAX_SERIES} attribute sets reached; new ones are dropped"
        );
    }
    false
}

/// A monotonic counter recorded as things happen.
#[derive(Debug, Clone)]
pub struct Counter {
    def: &'static AgentMetricDef,
    store: Arc<Recorded>,
}

impl Counter {
    /// Adds `n` to the series of `attributes`, creating it (with the count `n`) on its
    /// first increment.
    pub fn add(&self, n: u64, attributes: &[KeyValue]) {
        let key = series_key(self.def.name, attributes);
        let mut s = self.store.lock();
        let State { counters, full, .. } = &mut *s;
        if let Some(c) = counters.get_mut(&key) {
            c.count += n;
        } else if room(counters, full, self.def) {
            counters.insert(
                key,
                CounterValue {
                    def: self.def,
                    attributes: attributes.to_vec(),
                    count: n,
                },
            );
        }
    }
}

/// A gauge: the last value set, exported at each export until it is cleared. A last-event time
/// ([`Gauge::set_time`]) is one too, its value a Unix time in seconds (as
/// `gpu_sidecar.export.last_success`; Prometheus' own practice for "when did it last happen",
/// e.g. cAdvisor's `container_last_seen`): unlike a count, it changes at every event, also at
/// the first one and in a restarted agent, whatever the backend makes of start times.
#[derive(Debug, Clone)]
pub struct Gauge {
    def: &'static AgentMetricDef,
    store: Arc<Recorded>,
}

impl Gauge {
    /// Sets the series of `attributes` to `value` (creating it).
    pub fn set(&self, value: f64, attributes: &[KeyValue]) {
        let key = series_key(self.def.name, attributes);
        let mut s = self.store.lock();
        let State { gauges, full, .. } = &mut *s;
        if let Some(g) = gauges.get_mut(&key) {
            g.value = value;
        } else if room(gauges, full, self.def) {
            gauges.insert(
                key,
                GaugeValue {
                    def: self.def,
                    attributes: attributes.to_vec(),
                    value,
                },
            );
        }
    }

    /// Removes every series of the metric: it is absent from the next export on (a value
    /// no longer known is not exported).
    pub fn clear(&self) {
        self.store
            .lock()
            .gauges
            .retain(|_, g| !std::ptr::eq(g.def, self.def));
    }

    /// Sets the series of `attributes` to `at` (an event's time) as Unix seconds, creating it
    /// on its first event. A later call replaces the value, even with an earlier time (the wall
    /// clock stepped back): the last event's time is what it says.
    pub fn set_time(&self, at: SystemTime, attributes: &[KeyValue]) {
        self.set(unix_seconds(at), attributes);
    }
}

/// `t` as Unix seconds (negative before 1970, which no event time is).
pub fn unix_seconds(t: SystemTime) -> f64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// An explicit-bucket histogram recorded as things happen.
#[derive(Debug, Clone)]
pub struct Histogram {
    def: &'static AgentMetricDef,
    bounds: &'static [f64],
    store: Arc<Recorded>,
}

impl Histogram {
    /// Records `value` in the series of `attributes`.
    pub fn record(&self, value: f64, attributes: &[KeyValue]) {
        let key = series_key(self.def.name, attributes);
        let mut s = self.store.lock();
        let State {
            histograms, full, ..
        } = &mut *s;
        if !histograms.contains_key(&key) {
            if !room(histograms, full, self.def) {
                return;
            }
            histograms.insert(
                key.clone(),
                HistogramValue {
                    def: self.def,
                    attributes: attributes.to_vec(),
                    bounds: self.bounds,
                    bucket_counts: vec![0; self.bounds.len() + 1],
                    count: 0,
                    sum: 0.0,
                    min: f64::INFINITY,
                    max: f64::NEG_INFINITY,
                },
            );
        }
        let h = histograms.get_mut(&key).expect("inserted");
        let bucket = self.bounds.partition_point(|b| *b < value);
        h.bucket_counts[bucket] += 1;
        h.count += 1;
        h.sum += value;
        h.min = h.min.min(value);
        h.max = h.max.max(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalogue::metrics::{ALERTS, SAMPLE_DURATION, XID_LAST_SEEN};
    use std::time::Duration;

    #[test]
    fn counter_series_are_born_with_their_first_increment() {
        let r = Recorded::new();
        let c = r.counter(&ALERTS);
        let attrs = [KeyValue::new("hw.id", "GPU-a")];
        assert!(r.collect().0.is_empty(), "nothing before the first event");
        c.add(1, &attrs);
        assert_eq!(r.collect().0[0].count, 1);
        c.add(1, &[KeyValue::new("hw.id", "GPU-b")]);
        let (counters, _) = r.collect();
        assert_eq!(
            counters.iter().map(|c| c.count).collect::<Vec<_>>(),
            vec![1, 1]
        );
    }

    #[test]
    fn a_time_gauge_holds_the_last_events_time() {
        let r = Recorded::new();
        let g = r.gauge(&XID_LAST_SEEN);
        let a = [KeyValue::new("hw.id", "GPU-a")];
        assert!(r.gauges().is_empty(), "nothing before the first event");
        let t0 = UNIX_EPOCH + Duration::from_millis(1_800_000_000_250);
        g.set_time(t0, &a);
        assert_eq!(r.gauges()[0].value, 1_800_000_000.25);
        g.set_time(t0 + Duration::from_secs(42), &a);
        // A wall clock stepped back: the last event is still the one said.
        g.set_time(
            t0 - Duration::from_secs(1),
            &[KeyValue::new("hw.id", "GPU-b")],
        );
        let values: Vec<f64> = r.gauges().iter().map(|g| g.value).collect();
        assert_eq!(values, vec![1_800_000_042.25, 1_799_999_999.25]);
    }

    #[test]
    fn histogram_buckets_are_upper_inclusive() {
        let r = Recorded::new();
        let h = r.histogram(&SAMPLE_DURATION, &[0.001, 0.01]);
        for v in [0.0005, 0.001, 0.005, 0.5] {
            h.record(v, &[]);
        }
        let (_, hs) = r.collect();
        assert_eq!(hs[0].bucket_counts, vec![2, 1, 1]);
        assert_eq!((hs[0].count, hs[0].min, hs[0].max), (4, 0.0005, 0.5));
        assert!((hs[0].sum - 0.5065).abs() < 1e-12);
    }

    #[test]
    fn gauges_keep_the_last_value_until_cleared() {
        use crate::catalogue::metrics::CERTIFICATE_EXPIRY;
        let r = Recorded::new();
        let g = r.gauge(&CERTIFICATE_EXPIRY);
        assert!(r.gauges().is_empty(), "absent until set");
        g.set(1.0, &[]);
        g.set(2.0, &[]);
        assert_eq!(r.gauges().len(), 1);
        assert_eq!(r.gauges()[0].value, 2.0);
        g.clear();
        assert!(r.gauges().is_empty());
    }

    #[test]
    fn series_per_metric_are_bounded() {
        let r = Recorded::new();
        let c = r.counter(&ALERTS);
        for i in 0..(MAX_SERIES + 10) {
            c.add(1, &[KeyValue::new("hw.id", i as i64)]);
        }
        assert_eq!(r.collect().0.len(), MAX_SERIES);
    }
}
