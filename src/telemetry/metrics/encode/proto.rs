//! Plain values as OTLP protobuf messages: times, attributes, numbers, data points.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::{KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue as ProtoKeyValue,
};
use opentelemetry_proto::tonic::metrics::v1::{
    number_data_point, AggregationTemporality, HistogramDataPoint, NumberDataPoint,
};

use crate::catalogue::metrics::Number;
use crate::telemetry::metrics::recorded::HistogramValue;

/// Nanoseconds since the Unix epoch (0 before it).
pub(crate) fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// An OTel attribute value as an OTLP `AnyValue`.
pub(crate) fn any_value(v: &Value) -> AnyValue {
    use opentelemetry::Array;
    let value = match v {
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::I64(i) => any_value::Value::IntValue(*i),
        Value::F64(f) => any_value::Value::DoubleValue(*f),
        Value::String(s) => any_value::Value::StringValue(s.to_string()),
        Value::Array(a) => {
            let values = match a {
                Array::Bool(v) => v.iter().map(|x| any_value(&Value::Bool(*x))).collect(),
                Array::I64(v) => v.iter().map(|x| any_value(&Value::I64(*x))).collect(),
                Array::F64(v) => v.iter().map(|x| any_value(&Value::F64(*x))).collect(),
                Array::String(v) => v
                    .iter()
                    .map(|x| any_value(&Value::String(x.clone())))
                    .collect(),
                _ => Vec::new(),
            };
            any_value::Value::ArrayValue(ArrayValue { values })
        }
        other => any_value::Value::StringValue(other.to_string()),
    };
    AnyValue { value: Some(value) }
}

/// OTel attributes as OTLP key-values.
pub(crate) fn attributes(attrs: &[KeyValue]) -> Vec<ProtoKeyValue> {
    attrs
        .iter()
        .map(|kv| ProtoKeyValue {
            key: kv.key.to_string(),
            value: Some(any_value(&kv.value)),
            ..Default::default()
        })
        .collect()
}

pub(super) fn number(number: Number, value: f64) -> number_data_point::Value {
    match number {
        Number::Int => number_data_point::Value::AsInt(value.round() as i64),
        Number::F64 => number_data_point::Value::AsDouble(value),
    }
}

pub(super) fn point(
    attrs: &[KeyValue],
    start: Option<SystemTime>,
    time: SystemTime,
    value: number_data_point::Value,
) -> NumberDataPoint {
    NumberDataPoint {
        attributes: attributes(attrs),
        start_time_unix_nano: start.map_or(0, unix_nanos),
        time_unix_nano: unix_nanos(time),
        value: Some(value),
        ..Default::default()
    }
}

pub(super) fn temporality(delta: bool) -> i32 {
    if delta {
        AggregationTemporality::Delta as i32
    } else {
        AggregationTemporality::Cumulative as i32
    }
}

/// `h` minus `base` (a histogram since `start`); min and max only when nothing is
/// subtracted (they cannot be).
pub(super) fn histogram_point(
    h: &HistogramValue,
    base: Option<&HistogramValue>,
    start: SystemTime,
    time: SystemTime,
) -> HistogramDataPoint {
    let (counts, count, sum, min, max) = match base {
        None => (
            h.bucket_counts.clone(),
            h.count,
            h.sum,
            (h.count > 0).then_some(h.min),
            (h.count > 0).then_some(h.max),
        ),
        Some(b) => (
            h.bucket_counts
                .iter()
                .zip(&b.bucket_counts)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
            h.count.saturating_sub(b.count),
            (h.sum - b.sum).max(0.0),
            None,
            None,
        ),
    };
    HistogramDataPoint {
        attributes: attributes(&h.attributes),
        start_time_unix_nano: unix_nanos(start),
        time_unix_nano: unix_nanos(time),
        count,
        sum: Some(sum),
        bucket_counts: counts,
        explicit_bounds: h.bounds.to_vec(),
        min,
        max,
        ..Default::default()
    }
}

/// A resource as its OTLP message: the attributes, sorted by key.
pub(crate) fn resource(
    resource: &opentelemetry_sdk::Resource,
) -> opentelemetry_proto::tonic::resource::v1::Resource {
    let mut attrs: Vec<KeyValue> = resource
        .iter()
        .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
        .collect();
    attrs.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
    opentelemetry_proto::tonic::resource::v1::Resource {
        attributes: attributes(&attrs),
        ..Default::default()
    }
}
