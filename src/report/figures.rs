//! The run report's figures as people read them: one table ([`FIGURES`]) naming each
//! figure of a [`Summary`](super::Summary) (its JSON key), its label, its unit, and for
//! those that `compare` judges, which way is better and how the change is measured. The
//! page's summary table ([`super::page`]) and `compare` ([`super::compare`]) both follow it,
//! so a figure is labelled and formatted the same in both.
//!
//! Figures are read from the report's JSON ([`serde_json::Value`]), so a report written by
//! an older or newer agent (a field missing or added) still reads: a missing figure is
//! absent, like a `null` one. The report writes them as computed (full precision); they are
//! rounded only here, when shown ([`format_number`]).

use serde_json::Value;

/// A figure's unit, which decides how it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Seconds.
    Seconds,
    /// GPU-hours.
    GpuHours,
    /// Joules (shown with kilowatt-hours).
    Joules,
    /// The price's currency (`GPU_SIDECAR_PRICE_PER_GPU_HOUR`).
    Money,
    /// A ratio 0..1, shown as percent.
    Ratio,
    /// Bytes, shown in MiB or GiB.
    Bytes,
    /// Watts.
    Watts,
    /// Degrees Celsius.
    Celsius,
    /// A count.
    Count,
    /// A word (`energy_source`, `memory_pattern`) or a map (`xid_count`).
    Text,
}

/// Which way a figure is better, for `compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Better {
    /// Less is better (time, energy, cost, memory).
    Lower,
    /// More is better (utilization, activity).
    Higher,
}

/// How `compare` measures a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// `(new - base) / base`, percent.
    Relative,
    /// `(new - base) / base wall time`, percent: for time held back, which is often 0 in a
    /// good run (a relative change from 0 says nothing).
    ShareOfWallTime,
}

/// One figure of a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Figure {
    /// Stable name (the JSON key, `tensor_activity_mean.any` for a nested one).
    pub name: &'static str,
    /// Path of keys in a summary's JSON.
    pub path: &'static [&'static str],
    /// What people call it.
    pub label: &'static str,
    /// Its unit.
    pub unit: Unit,
    /// For `compare`: better direction and how the change is measured; `None` when not
    /// compared.
    pub compare: Option<(Better, Change)>,
    /// Only per GPU (the pod summary has no such field).
    pub gpu_only: bool,
}

const fn fig(name: &'static str, label: &'static str, unit: Unit) -> Figure {
    Figure {
        name,
        path: &[],
        label,
        unit,
        compare: None,
        gpu_only: false,
    }
}

const fn judged(mut f: Figure, better: Better, change: Change) -> Figure {
    f.compare = Some((better, change));
    f
}

const fn gpu_only(mut f: Figure) -> Figure {
    f.gpu_only = true;
    f
}

const fn at(mut f: Figure, path: &'static [&'static str]) -> Figure {
    f.path = path;
    f
}

use Better::{Higher, Lower};
use Change::{Relative, ShareOfWallTime};

/// Every figure the page shows, in its order; those with `compare` set are `compare`'s
/// table, in the same order.
pub const FIGURES: &[Figure] = &[
    judged(
        fig("wall_time_s", "wall time", Unit::Seconds),
        Lower,
        Relative,
    ),
    judged(fig("energy_j", "energy", Unit::Joules), Lower, Relative),
    fig("energy_source", "energy from", Unit::Text),
    fig(
        "energy_power_integral_j",
        "energy by power (cross-check)",
        Unit::Joules,
    ),
    judged(fig("cost", "cost", Unit::Money), Lower, Relative),
    fig(
        "idle_cost",
        "idle cost (0 % busy, memory held)",
        Unit::Money,
    ),
    fig(
        "idle_memory_held_gpu_h",
        "idle holding memory",
        Unit::GpuHours,
    ),
    judged(
        fig("utilization_mean", "utilization (mean)", Unit::Ratio),
        Higher,
        Relative,
    ),
    fig("utilization_p95", "utilization (p95)", Unit::Ratio),
    fig("busy_gpu_s", "busy GPU time", Unit::Seconds),
    judged(
        fig("sm_activity_mean", "SM activity (mean)", Unit::Ratio),
        Higher,
        Relative,
    ),
    fig("sm_occupancy_mean", "SM occupancy (mean)", Unit::Ratio),
    judged(
        at(
            fig(
                "tensor_activity_mean.any",
                "tensor activity (mean)",
                Unit::Ratio,
            ),
            &["tensor_activity_mean", "any"],
        ),
        Higher,
        Relative,
    ),
    fig(
        "tensor_active_share_of_busy",
        "tensor share of busy time",
        Unit::Ratio,
    ),
    fig("dram_activity_mean", "DRAM activity (mean)", Unit::Ratio),
    judged(
        fig("memory_used_peak_bytes", "memory peak", Unit::Bytes),
        Lower,
        Relative,
    ),
    fig("memory_used_mean_bytes", "memory (mean)", Unit::Bytes),
    fig("memory_total_bytes", "memory total", Unit::Bytes),
    gpu_only(fig("memory_pattern", "memory pattern", Unit::Text)),
    gpu_only(fig("memory_pool_bytes", "pool level", Unit::Bytes)),
    fig("power_mean_w", "power (mean)", Unit::Watts),
    fig("power_peak_w", "power (peak)", Unit::Watts),
    fig(
        "temperature_gpu_peak_c",
        "temperature (peak)",
        Unit::Celsius,
    ),
    fig(
        "temperature_memory_peak_c",
        "HBM temperature (peak)",
        Unit::Celsius,
    ),
    judged(
        fig("power_capped_s", "power-capped time", Unit::Seconds),
        Lower,
        ShareOfWallTime,
    ),
    judged(
        fig("thermal_slowdown_s", "thermal slowdown time", Unit::Seconds),
        Lower,
        ShareOfWallTime,
    ),
    judged(
        fig("hw_slowdown_s", "HW slowdown time", Unit::Seconds),
        Lower,
        ShareOfWallTime,
    ),
    fig("xid_count", "XID errors", Unit::Text),
    fig(
        "ecc_uncorrected_errors",
        "uncorrected ECC errors",
        Unit::Count,
    ),
    fig("ecc_corrected_errors", "corrected ECC errors", Unit::Count),
    fig("pcie_transmit_bytes", "PCIe sent", Unit::Bytes),
    fig("pcie_receive_bytes", "PCIe received", Unit::Bytes),
    fig("nvlink_transmit_bytes", "NVLink sent", Unit::Bytes),
    fig("nvlink_receive_bytes", "NVLink received", Unit::Bytes),
    fig("samples_taken", "samples taken", Unit::Count),
    fig("samples_missed", "samples missed", Unit::Count),
    fig(
        "samples_lost",
        "samples lost (GPU off the bus)",
        Unit::Count,
    ),
];

/// The figure named `name`.
pub fn figure(name: &str) -> Option<&'static Figure> {
    FIGURES.iter().find(|f| f.name == name)
}

static NULL: Value = Value::Null;

impl Figure {
    /// Its value in `summary` (a pod or GPU summary object); `Null` when absent.
    pub fn value<'a>(&self, summary: &'a Value) -> &'a Value {
        let path: &[&str] = if self.path.is_empty() {
            std::slice::from_ref(&self.name)
        } else {
            self.path
        };
        path.iter()
            .try_fold(summary, |v, k| v.get(k))
            .unwrap_or(&NULL)
    }

    /// Its value as a number, when it is one.
    pub fn number(&self, summary: &Value) -> Option<f64> {
        self.value(summary).as_f64()
    }

    /// `v` as people read it, in this figure's unit; `—` when absent.
    pub fn format(&self, v: &Value) -> String {
        if v.is_null() {
            return "—".into();
        }
        if let Some(x) = v.as_f64() {
            return format_number(self.unit, x);
        }
        match v {
            Value::String(s) => s.clone(),
            Value::Object(m) if m.is_empty() => "none".into(),
            Value::Object(m) => m
                .iter()
                .map(|(k, n)| format!("XID {k}: {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            other => other.to_string(),
        }
    }
}

/// `x` in `unit` as people read it.
pub fn format_number(unit: Unit, x: f64) -> String {
    match unit {
        Unit::Seconds => duration(x),
        Unit::GpuHours => format!("{} GPU-h ({})", significant(x, 3), duration(x * 3600.0)),
        // To the millijoule, the energy counter's resolution.
        Unit::Joules => format!("{} J ({} kWh)", decimals(x, 3), significant(x / 3.6e6, 3)),
        // Cents from 1 up; below, three significant digits (a short run costs fractions
        // of a cent, and two of them should not read alike when they differ).
        Unit::Money if x.abs() >= 1.0 => format!("{x:.2}"),
        Unit::Money => significant(x, 3),
        Unit::Ratio => format!("{:.1} %", x * 100.0),
        Unit::Bytes => bytes(x),
        Unit::Watts => format!("{x:.1} W"),
        Unit::Celsius => format!("{x} °C"),
        Unit::Count | Unit::Text => format!("{x}"),
    }
}

/// Seconds as `9.989 s`, `12 min 05 s`, `3 h 02 min`, `2 d 04 h`.
pub fn duration(s: f64) -> String {
    let whole = s.round() as u64;
    match s {
        s if s < 120.0 => format!("{} s", significant(s, 4)),
        _ if whole < 3600 => format!("{} min {:02} s", whole / 60, whole % 60),
        _ if whole < 86_400 => format!("{} h {:02} min", whole / 3600, whole % 3600 / 60),
        _ => format!("{} d {:02} h", whole / 86_400, whole % 86_400 / 3600),
    }
}

/// Bytes in MiB below 1 GiB, else GiB.
pub fn bytes(b: f64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if b < 1024.0 * MIB {
        format!("{:.1} MiB", b / MIB)
    } else {
        format!("{:.2} GiB", b / (1024.0 * MIB))
    }
}

/// `x` to at most `places` decimal places, without trailing zeros (`6911.11`, `13000`).
pub fn decimals(x: f64, places: usize) -> String {
    let s = format!("{x:.places$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `x` to `digits` significant digits, without trailing zeros (`0.00192`, `9.989`, `0`).
pub fn significant(x: f64, digits: i32) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (digits - 1 - magnitude).max(0) as usize;
    let s = format!("{x:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_figure_reads_its_field_and_formats_it() {
        let s = json!({
            "wall_time_s": 9.989, "energy_j": 6911.11, "tensor_activity_mean": {"any": 0.9278},
            "memory_used_peak_bytes": 1194131456u64, "xid_count": {"79": 2}, "cost": null,
        });
        let f = |n| figure(n).unwrap();
        assert_eq!(
            f("wall_time_s").format(f("wall_time_s").value(&s)),
            "9.989 s"
        );
        assert_eq!(
            f("energy_j").format(f("energy_j").value(&s)),
            "6911.11 J (0.00192 kWh)"
        );
        let tensor = f("tensor_activity_mean.any");
        assert_eq!(tensor.number(&s), Some(0.9278));
        assert_eq!(tensor.format(tensor.value(&s)), "92.8 %");
        assert_eq!(
            f("memory_used_peak_bytes").format(&json!(1194131456u64)),
            "1.11 GiB"
        );
        assert_eq!(f("xid_count").format(f("xid_count").value(&s)), "XID 79: 2");
        assert_eq!(f("cost").format(f("cost").value(&s)), "—");
        assert_eq!(
            f("sm_activity_mean").format(f("sm_activity_mean").value(&s)),
            "—"
        );
        assert_eq!(format_number(Unit::Money, 0.00974999), "0.00975");
        assert_eq!(
            format_number(Unit::Joules, 13000.000000000002),
            "13000 J (0.00361 kWh)"
        );
        assert_eq!(format_number(Unit::Money, 1234.5678), "1234.57");
        assert_eq!(duration(3725.0), "1 h 02 min");
        assert_eq!(duration(3.0 * 86_400.0 + 7200.0), "3 d 02 h");
        assert_eq!(duration(725.0), "12 min 05 s");
    }

    #[test]
    fn the_compared_figures_are_the_ones_the_issue_names() {
        let compared: Vec<&str> = FIGURES
            .iter()
            .filter(|f| f.compare.is_some())
            .map(|f| f.name)
            .collect();
        assert_eq!(
            compared,
            [
                "wall_time_s",
                "energy_j",
                "cost",
                "utilization_mean",
                "sm_activity_mean",
                "tensor_activity_mean.any",
                "memory_used_peak_bytes",
                "power_capped_s",
                "thermal_slowdown_s",
                "hw_slowdown_s"
            ]
        );
    }
}
