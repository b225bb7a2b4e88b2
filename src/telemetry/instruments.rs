//! Registers every [`CATALOGUE`] row as an asynchronous OTel instrument whose callback reads
//! the latest fresh [`Snapshot`](crate::sampling::Snapshot) from [`SharedState`].
//!
//! Callbacks run on the SDK's `PeriodicReader` thread at each collection; they never call
//! NVML. A snapshot older than `max_age` is not observed: nothing is exported rather than
//! stale values presented as fresh. Observable instruments export only the attribute sets
//! observed in the current cycle, so a departed device or state drops out.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::{AsyncInstrument, Meter};

use super::catalogue::{device_points, Instrument, MetricDef, Number, CATALOGUE};
use crate::sampling::SharedState;

fn observe_all<T>(
    def: &'static MetricDef,
    shared: &SharedState,
    max_age: Duration,
    obs: &dyn AsyncInstrument<T>,
    convert: fn(f64) -> T,
) {
    let Some(snapshot) = shared.fresh(max_age) else {
        return;
    };
    for d in &snapshot.devices {
        for p in device_points(def, d) {
            obs.observe(convert(p.value), &p.attributes);
        }
    }
}

/// Registers all catalogue metrics on `meter`.
pub fn register(meter: &Meter, shared: Arc<SharedState>, max_age: Duration) {
    for def in CATALOGUE {
        let s = shared.clone();
        macro_rules! build {
            ($method:ident, $conv:expr) => {{
                meter
                    .$method(def.name)
                    .with_unit(def.unit)
                    .with_description(def.description)
                    .with_callback(move |obs| observe_all(def, &s, max_age, obs, $conv))
                    .build();
            }};
        }
        match (def.instrument, def.number) {
            (Instrument::Gauge, Number::F64) => build!(f64_observable_gauge, |v| v),
            (Instrument::Gauge, Number::Int) => build!(i64_observable_gauge, |v| v as i64),
            (Instrument::Counter, Number::F64) => build!(f64_observable_counter, |v| v),
            (Instrument::Counter, Number::Int) => build!(u64_observable_counter, |v| v as u64),
            (Instrument::UpDownCounter, Number::F64) => {
                build!(f64_observable_up_down_counter, |v| v)
            }
            (Instrument::UpDownCounter, Number::Int) => {
                build!(i64_observable_up_down_counter, |v| v as i64)
            }
        }
    }
}
