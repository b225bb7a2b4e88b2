//! Heat and clocks: `temperature_high` (die temperature at or above a limit),
//! `clocks_power_capped` (the software power cap holds the clocks back) and
//! `clocks_slowdown` (thermal or hardware slowdown does).

use opentelemetry::{Array, KeyValue, StringValue, Value};

use super::id::RuleId;
use super::id::RuleSettings;
use super::rule::{Built, Deferred, Rule, Verdict};
use crate::catalogue::alert_values;
use crate::catalogue::clocks_event_reasons::{self, DEGRADING, SW_POWER_CAP};
use crate::sampling::snapshot::{DeviceSample, DeviceState, Snapshot};

/// `temperature_high`: `nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU) >= threshold` °C.
pub(crate) struct TemperatureHigh {
    celsius: f64,
}

impl TemperatureHigh {
    /// [`super::rule::Build`] for `temperature_high`.
    pub(crate) fn build(s: &RuleSettings, _: &Deferred) -> Built {
        Built::judged(Self::new(s.threshold.unwrap_or_default()), s)
    }

    /// `celsius`: the limit.
    pub(crate) fn new(celsius: f64) -> Self {
        Self { celsius }
    }
}

impl Rule for TemperatureHigh {
    fn id(&self) -> RuleId {
        RuleId::TemperatureHigh
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        for d in &snapshot.devices {
            let (DeviceState::Ok, Some(t)) = (d.state, d.temperature_gpu_celsius) else {
                out.push(Verdict::unknown(d));
                continue;
            };
            let mut values = vec![alert_values::TEMPERATURE.kv(f64::from(t))];
            if let Some(m) = d.temperature_memory_celsius {
                values.push(alert_values::TEMPERATURE_MEMORY.kv(f64::from(m)));
            }
            out.push(Verdict::device(
                d,
                Some(f64::from(t) >= self.celsius),
                values,
                format!("GPU temperature {t} °C (threshold {} °C)", self.celsius),
            ));
        }
    }
}

fn reasons_value(bits: u64) -> KeyValue {
    alert_values::CLOCKS_EVENT_REASONS.kv(Value::Array(Array::String(
        clocks_event_reasons::values(bits)
            .into_iter()
            .map(StringValue::from)
            .collect(),
    )))
}

fn clock_verdict(
    d: &DeviceSample,
    mask: u64,
    what: &str,
    extra: impl FnOnce(&DeviceSample, &mut Vec<KeyValue>) -> String,
) -> Verdict {
    let (DeviceState::Ok, Some(bits)) = (d.state, d.clocks_event_reasons) else {
        return Verdict::unknown(d);
    };
    let mut values = vec![reasons_value(bits)];
    let detail = extra(d, &mut values);
    let active = clocks_event_reasons::values(bits & mask);
    let summary = if active.is_empty() {
        format!("clocks not held back by {what}{detail}")
    } else {
        format!("clocks held back by {}{detail}", active.join(", "))
    };
    Verdict::device(d, Some(bits & mask != 0), values, summary)
}

/// `clocks_power_capped`: clock-event reason `sw_power_cap` set
/// (`nvmlDeviceGetCurrentClocksThrottleReasons`).
pub(crate) struct PowerCapped;

impl PowerCapped {
    /// [`super::rule::Build`] for `clocks_power_capped`.
    pub(crate) fn build(s: &RuleSettings, _: &Deferred) -> Built {
        Built::judged(Self, s)
    }
}

impl Rule for PowerCapped {
    fn id(&self) -> RuleId {
        RuleId::ClocksPowerCapped
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        for d in &snapshot.devices {
            out.push(clock_verdict(
                d,
                SW_POWER_CAP,
                "the power cap",
                |d, values| {
                    let (power, limit) = (d.power_watts(), d.power_limit_watts());
                    if let Some(p) = power {
                        values.push(alert_values::POWER.kv(p));
                    }
                    if let Some(l) = limit {
                        values.push(alert_values::POWER_LIMIT.kv(l));
                    }
                    match (power, limit) {
                        (Some(p), Some(l)) => format!(" (drawing {p:.1} W of a {l:.0} W limit)"),
                        _ => String::new(),
                    }
                },
            ));
        }
    }
}

/// `clocks_slowdown`: any of `hw_slowdown`, `sw_thermal_slowdown`, `hw_thermal_slowdown`,
/// `hw_power_brake_slowdown` set ([`DEGRADING`]).
pub(crate) struct Slowdown;

impl Slowdown {
    /// [`super::rule::Build`] for `clocks_slowdown`.
    pub(crate) fn build(s: &RuleSettings, _: &Deferred) -> Built {
        Built::judged(Self, s)
    }
}

impl Rule for Slowdown {
    fn id(&self) -> RuleId {
        RuleId::ClocksSlowdown
    }

    fn evaluate(&mut self, snapshot: &Snapshot, out: &mut Vec<Verdict>) {
        for d in &snapshot.devices {
            out.push(clock_verdict(
                d,
                DEGRADING,
                "thermal or hardware slowdown",
                |d, values| {
                    if let Some(t) = d.temperature_gpu_celsius {
                        values.push(alert_values::TEMPERATURE.kv(f64::from(t)));
                    }
                    if let Some(p) = d.power_watts() {
                        values.push(alert_values::POWER.kv(p));
                    }
                    match d.temperature_gpu_celsius {
                        Some(t) => format!(" (GPU at {t} °C)"),
                        None => String::new(),
                    }
                },
            ));
        }
    }
}
