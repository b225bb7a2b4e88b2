//! One GPU's chart: the geometry of its SVG (panels stacked over one time axis, their
//! scales and ticks, each series' path through its buckets' min and max, the time held back
//! as a lane on top, the run's events as numbered markers). The markup is the template's
//! (`page.html`); this module computes positions and path data only.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::curves::{Bucket, Curves, Extremes, Panel, SERIES};
use crate::catalogue::attributes::HW_ID;
use crate::report::run_report::HELD_BACK;

/// The SVG's width, px (its `viewBox`; the page scales it to the window).
pub const WIDTH: f64 = 960.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
const PANEL_H: f64 = 100.0;
const LANE_Y: f64 = 16.0;
const LANE_ROW: f64 = 5.0;
const FIRST_PANEL: f64 = 40.0;

/// A tick: its position (px, x or y) and label.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    /// Position, px.
    pub pos: f64,
    /// Label.
    pub label: String,
}

/// One series' path.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesView {
    /// [`SERIES`] key, or `memory_pool` for the pool's level.
    pub key: &'static str,
    /// Legend text.
    pub label: &'static str,
    /// CSS class (its colour).
    pub class: String,
    /// SVG path data.
    pub d: String,
    /// Points drawn.
    pub points: usize,
    /// Lowest and highest value drawn, in the panel's unit.
    pub min: f64,
    /// See `min`.
    pub max: f64,
}

/// One panel: a title, a y scale and its series.
#[derive(Debug, Clone, PartialEq)]
pub struct PanelView {
    /// Title with its unit.
    pub title: &'static str,
    /// Top of the plot area, px.
    pub top: f64,
    /// Height of the plot area, px.
    pub height: f64,
    /// y ticks.
    pub ticks: Vec<Tick>,
    /// The series drawn (those with a reading).
    pub series: Vec<SeriesView>,
    /// What is missing from it, when something is (`no GPM reading`, …).
    pub missing: Vec<&'static str>,
}

/// A rectangle of the held-back lane.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// Left, px.
    pub x: f64,
    /// Width, px.
    pub w: f64,
    /// Top, px.
    pub y: f64,
    /// CSS class.
    pub class: &'static str,
    /// Tooltip.
    pub title: String,
}

/// The marker of one event, or of events too close together to tell apart (within
/// [`MARKER_MERGE_PX`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// x, px (the first event's).
    pub x: f64,
    /// Their numbers in the page's events table, `1` or `1,2`.
    pub label: String,
    /// How many events it marks.
    pub events: usize,
    /// CSS class (the most severe one's severity).
    pub class: &'static str,
    /// Tooltip: time, name, state, body of each, one per line.
    pub title: String,
}

/// Events whose markers would be closer than this (px) share one.
pub const MARKER_MERGE_PX: f64 = 8.0;

/// The whole chart of one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartView {
    /// The GPU's UUID.
    pub uuid: String,
    /// SVG height, px.
    pub height: f64,
    /// Bottom of the last panel, px (the markers end there).
    pub bottom: f64,
    /// Panels, top to bottom.
    pub panels: Vec<PanelView>,
    /// Time ticks (x) with UTC labels.
    pub x_ticks: Vec<Tick>,
    /// Held-back lane.
    pub held_back: Vec<Span>,
    /// Event markers.
    pub markers: Vec<Marker>,
    /// Series drawn, over all panels.
    pub series_count: usize,
    /// Bucket width, s (how much time one drawn min/max pair covers).
    pub bucket_s: f64,
    /// x of the plots' left and right edges, px.
    pub left: f64,
    /// See `left`.
    pub right: f64,
    /// y of the held-back lane's rows, px, in [`HELD_BACK`] order.
    pub lane_rows: [f64; 3],
}

impl SeriesView {
    /// `58 to 60`: the range drawn.
    pub fn range_text(&self) -> String {
        use crate::report::figures::significant;
        format!(
            "{} to {}",
            significant(self.min, 4),
            significant(self.max, 4)
        )
    }
}

impl ChartView {
    /// How much time one bucket covers, in words.
    pub fn bucket_text(&self) -> String {
        crate::report::figures::duration(self.bucket_s)
    }
}

/// Labels of the held-back lane's rows, in [`HELD_BACK`] order.
pub const HELD_BACK_LABELS: [&str; 3] = ["power cap", "thermal slowdown", "HW slowdown"];

/// The run's time axis: `start` and its length.
#[derive(Debug, Clone, Copy)]
pub struct Axis {
    /// Left end.
    pub start: SystemTime,
    /// Length, s (> 0).
    pub span_s: f64,
}

impl Axis {
    fn x(&self, at_s: f64) -> f64 {
        LEFT + (at_s / self.span_s).clamp(0.0, 1.0) * PLOT_W
    }

    /// x of a wall-clock time.
    fn x_of(&self, t: SystemTime) -> f64 {
        let s = match t.duration_since(self.start) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        self.x(s)
    }
}

/// Epoch seconds of a time (0 before 1970).
fn epoch_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Time ticks: the first step of 1 s … 2 d that gives at most 8, at multiples of it (UTC).
pub fn time_ticks(axis: &Axis) -> Vec<Tick> {
    const STEPS: [f64; 20] = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
        10800.0, 21600.0, 43200.0, 86400.0, 172_800.0, 432_000.0,
    ];
    let step = STEPS
        .into_iter()
        .find(|s| axis.span_s / s <= 8.0)
        .unwrap_or(432_000.0);
    let t0 = epoch_s(axis.start);
    let mut t = (t0 / step).ceil() * step;
    let mut out = Vec::new();
    while t <= t0 + axis.span_s + 1e-9 {
        let at = UNIX_EPOCH + std::time::Duration::from_secs_f64(t);
        let rfc = humantime::format_rfc3339_seconds(at).to_string();
        let label = if axis.span_s >= 86_400.0 {
            format!("{} {}", &rfc[5..10], &rfc[11..16])
        } else if step < 60.0 {
            rfc[11..19].to_string()
        } else {
            rfc[11..16].to_string()
        };
        out.push(Tick {
            pos: axis.x(t - t0),
            label,
        });
        t += step;
    }
    out
}

/// Up to about five "nice" ticks (1, 2, 5 × 10ⁿ) from `lo` to `hi`.
pub fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / 4.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 5.0)
        .unwrap_or(10.0 * mag);
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while v <= hi + step * 1e-6 {
        out.push((v * 1e6).round() / 1e6);
        v += step;
    }
    out
}

fn tick_label(v: f64) -> String {
    crate::report::figures::significant(v, 3)
}

/// The panels' order, titles, and how a reading becomes the panel's unit.
const PANELS: [(Panel, &str, f64); 4] = [
    (Panel::Activity, "Activity (%)", 1.0),
    (Panel::Memory, "Memory (GiB)", 1.0 / 1024.0),
    (Panel::Power, "Power (W)", 1.0),
    (Panel::Temperature, "Temperature (°C)", 1.0),
];

/// The y range of a panel from the values drawn in it.
fn y_range(panel: Panel, lo: f64, hi: f64) -> (f64, f64) {
    match panel {
        Panel::Activity => (0.0, 100.0),
        Panel::Memory | Panel::Power => {
            let top = (hi * 1.05).max(1.0);
            let step = nice_ticks(0.0, top).get(1).copied().unwrap_or(top);
            (0.0, (top / step).ceil() * step)
        }
        Panel::Temperature => (
            ((lo - 5.0) / 10.0).floor().max(0.0) * 10.0,
            ((hi + 5.0) / 10.0).ceil() * 10.0,
        ),
    }
}

/// A series' points `(s from the curves' start, value)` in time order: each bucket's min
/// and max, in the order they came.
fn points(buckets: &[Bucket], i: usize, scale: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    for e in buckets.iter().filter_map(|b| b.series[i]) {
        let min = (f64::from(e.min_at), Extremes::value(e.min));
        let max = (f64::from(e.max_at), Extremes::value(e.max));
        let (a, b) = if min.0 <= max.0 {
            (min, max)
        } else {
            (max, min)
        };
        out.push((a.0, a.1 * scale));
        if b != a {
            out.push((b.0, b.1 * scale));
        }
    }
    out
}

/// SVG path data through `pts` (px), a new subpath after each gap.
fn path_data(pts: &[(f64, f64, bool)]) -> String {
    let mut d = String::with_capacity(pts.len() * 12);
    for (x, y, jump) in pts {
        let _ = write!(d, "{}{x:.1} {y:.1}", if *jump { 'M' } else { 'L' });
    }
    d
}

/// What a panel lacks, in words, for a series with no reading.
fn missing_text(key: &str) -> &'static str {
    match key {
        "sm_activity_percent" | "tensor_activity_percent" => {
            // Why is the report's note (said once, under the summary); from a sample log,
            // these are its sm_activity_percent and tensor_activity_percent columns.
            "no GPM reading (why: see the notes)"
        }
        "power_limit_w" => "no power limit read",
        _ => "no reading",
    }
}

/// The chart of the GPU `gpu` (a GPU summary of the report) from `curves`; `events` are the
/// report's, numbered from 1 in their order.
pub fn chart(gpu: &Value, curves: &Curves, axis: &Axis, events: &[Value]) -> ChartView {
    let uuid = gpu["uuid"].as_str().unwrap_or_default().to_string();
    let buckets = curves.gpu(&uuid).unwrap_or(&[]);
    let width = curves.width_s();
    let offset = curves
        .origin()
        .map_or(0.0, |o| epoch_s(o) - epoch_s(axis.start));
    let gap = 2.5 * width;
    let mut panels = Vec::new();
    let mut top = FIRST_PANEL;
    for (panel, title, scale) in PANELS {
        let mut drawn: Vec<(usize, Vec<(f64, f64)>)> = Vec::new();
        let mut missing = Vec::new();
        for (i, spec) in SERIES.iter().enumerate().filter(|(_, s)| s.panel == panel) {
            let pts = points(buckets, i, scale);
            if pts.is_empty() {
                missing.push(missing_text(spec.key));
            } else {
                drawn.push((i, pts));
            }
        }
        let pool = (panel == Panel::Memory)
            .then(|| gpu["memory_pool_bytes"].as_f64())
            .flatten()
            .map(|b| b / (1024.0 * 1024.0 * 1024.0));
        let values = drawn.iter().flat_map(|(_, p)| p.iter().map(|p| p.1));
        let lo = values.clone().chain(pool).fold(f64::INFINITY, f64::min);
        let hi = values.chain(pool).fold(f64::NEG_INFINITY, f64::max);
        let (y0, y1) = if lo.is_finite() {
            y_range(panel, lo, hi)
        } else {
            y_range(panel, 0.0, 1.0)
        };
        let bottom = top + 16.0 + PANEL_H;
        let y = |v: f64| bottom - ((v - y0) / (y1 - y0)).clamp(0.0, 1.0) * PANEL_H;
        let mut series: Vec<SeriesView> = drawn
            .iter()
            .map(|(i, pts)| {
                let mut px = Vec::with_capacity(pts.len());
                let mut prev: Option<f64> = None;
                for (t, v) in pts {
                    let jump = prev.is_none_or(|p| t - p > gap);
                    px.push((axis.x(t + offset), y(*v), jump));
                    prev = Some(*t);
                }
                let vals = pts.iter().map(|p| p.1);
                SeriesView {
                    key: SERIES[*i].key,
                    label: SERIES[*i].label,
                    class: format!("s{i}"),
                    d: path_data(&px),
                    points: px.len(),
                    min: vals.clone().fold(f64::INFINITY, f64::min),
                    max: vals.fold(f64::NEG_INFINITY, f64::max),
                }
            })
            .collect();
        if let Some(level) = pool {
            series.push(SeriesView {
                key: "memory_pool",
                label: "pool level (preallocated)",
                class: "pool".into(),
                d: path_data(&[(LEFT, y(level), true), (LEFT + PLOT_W, y(level), false)]),
                points: 2,
                min: level,
                max: level,
            });
        }
        panels.push(PanelView {
            title,
            top: top + 16.0,
            height: PANEL_H,
            ticks: nice_ticks(y0, y1)
                .into_iter()
                .map(|v| Tick {
                    pos: y(v),
                    label: tick_label(v),
                })
                .collect(),
            series,
            missing,
        });
        top = bottom + 22.0;
    }
    let bottom = top - 22.0;
    ChartView {
        series_count: panels.iter().map(|p| p.series.len()).sum(),
        held_back: held_back(buckets, width, offset, axis),
        markers: markers(&uuid, events, axis),
        uuid,
        height: bottom + 26.0,
        bottom,
        panels,
        x_ticks: time_ticks(axis),
        bucket_s: width,
        left: LEFT,
        right: LEFT + PLOT_W,
        lane_rows: [0.0, 1.0, 2.0].map(|r| LANE_Y + r * LANE_ROW),
    }
}

/// The held-back lane: for each category of [`HELD_BACK`], one rectangle per run of
/// buckets in which one of its reasons was set.
fn held_back(buckets: &[Bucket], width: f64, offset: f64, axis: &Axis) -> Vec<Span> {
    let mut out = Vec::new();
    for (row, (_, reasons)) in HELD_BACK.iter().enumerate() {
        let mask = reasons
            .iter()
            .map(|r| crate::catalogue::clocks_event_reasons::bit(r))
            .fold(0, |a, b| a | b);
        // A bucket with no reading keeps the previous one's state for up to two buckets
        // (a sample holds until the next, as in the report): a tick that fell into the
        // bucket before does not cut the lane.
        let mut on = Vec::with_capacity(buckets.len());
        let mut last: Option<(usize, bool)> = None;
        for (k, b) in buckets.iter().enumerate() {
            let state = match b.reasons {
                Some(r) => r & mask != 0,
                None => last.is_some_and(|(at, s)| s && k - at <= 2),
            };
            if b.reasons.is_some() {
                last = Some((k, state));
            }
            on.push(state);
        }
        let mut k = 0;
        while k < on.len() {
            if !on[k] {
                k += 1;
                continue;
            }
            let start = k;
            while k < on.len() && on[k] {
                k += 1;
            }
            let (a, b) = (start as f64 * width + offset, k as f64 * width + offset);
            let x = axis.x(a);
            out.push(Span {
                x,
                w: (axis.x(b) - x).max(1.0),
                y: LANE_Y + row as f64 * LANE_ROW,
                class: ["hb0", "hb1", "hb2"][row],
                title: format!(
                    "{} ({}): {} for about {}",
                    HELD_BACK_LABELS[row],
                    reasons.join(", "),
                    clock(axis, a),
                    crate::report::figures::duration(b - a)
                ),
            });
        }
    }
    out
}

/// `HH:MM:SS` UTC of `s` after the axis' start.
fn clock(axis: &Axis, s: f64) -> String {
    let t = epoch_s(axis.start) + s.max(0.0);
    let rfc = humantime::format_rfc3339_seconds(UNIX_EPOCH + std::time::Duration::from_secs_f64(t))
        .to_string();
    rfc[11..19].to_string()
}

/// CSS class of an OTel severity text.
pub fn severity_class(severity: &str) -> &'static str {
    match severity {
        s if s.starts_with("ERROR") || s.starts_with("FATAL") => "sev-error",
        s if s.starts_with("WARN") => "sev-warn",
        _ => "sev-info",
    }
}

/// Markers of the events about this GPU (its `hw.id`) or about no single GPU, in time
/// order; events closer than [`MARKER_MERGE_PX`] share a marker.
fn markers(uuid: &str, events: &[Value], axis: &Axis) -> Vec<Marker> {
    let rank = |c: &str| {
        ["sev-info", "sev-warn", "sev-error"]
            .iter()
            .position(|s| *s == c)
    };
    let mut marks: Vec<(f64, usize, &'static str, String)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e[HW_ID].as_str().is_none_or(|h| h == uuid))
        .filter_map(|(i, e)| {
            let t = crate::report::read::time(&e["time"])?;
            let name = e["event.name"].as_str().unwrap_or_default();
            let state = e["state"]
                .as_str()
                .map(|s| format!(" ({s})"))
                .unwrap_or_default();
            let class = severity_class(e["severity"].as_str().unwrap_or_default());
            let title = format!(
                "#{} {} {name}{state}: {}",
                i + 1,
                e["time"].as_str().unwrap_or_default(),
                e["body"].as_str().unwrap_or_default()
            );
            Some((axis.x_of(t), i + 1, class, title))
        })
        .collect();
    marks.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<Marker> = Vec::new();
    for (x, n, class, title) in marks {
        match out.last_mut() {
            Some(m) if x - m.x < MARKER_MERGE_PX => {
                m.label = format!("{},{n}", m.label);
                m.events += 1;
                m.title = format!("{}\n{title}", m.title);
                if rank(class) > rank(m.class) {
                    m.class = class;
                }
            }
            _ => out.push(Marker {
                x,
                label: n.to_string(),
                events: 1,
                class,
                title,
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::page::curves::Point;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn ticks_fit_the_span_and_read_as_utc() {
        let start = UNIX_EPOCH + Duration::from_millis(1_764_564_600_834); // 2025-12-01T04:50:00.834Z
        let short = time_ticks(&Axis {
            start,
            span_s: 10.0,
        });
        assert_eq!(short[0].label, "04:50:02");
        assert_eq!(short.len(), 5);
        let days = time_ticks(&Axis {
            start,
            span_s: 3.0 * 86_400.0,
        });
        assert!(days.len() <= 8 && days.len() >= 3, "{days:?}");
        assert_eq!(days[0].label, "12-01 12:00");
        assert!(days.windows(2).all(|w| w[0].pos < w[1].pos));
        assert_eq!(nice_ticks(0.0, 100.0), [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(nice_ticks(50.0, 70.0), [50.0, 55.0, 60.0, 65.0, 70.0]);
    }

    /// Two points 1 s apart, then a 10 s gap (nothing read), then two more: two subpaths;
    /// the held-back lane covers the power-capped buckets (and holds two more into the
    /// gap); an event of another GPU is not marked, two close together share a marker.
    #[test]
    fn a_gap_in_the_readings_is_a_gap_in_the_line() {
        let start = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut curves = Curves::new(Some(start), 1.0);
        for s in [0, 1, 12, 13] {
            let mut p = Point::default();
            p.values[0] = Some(50.0 + s as f64);
            p.reasons = Some(if s < 5 { 0x4 } else { 0 });
            curves.add("GPU-0", start + Duration::from_secs(s), &p);
        }
        let gpu = json!({"uuid": "GPU-0"});
        let events = [
            json!({"time": "2027-01-15T08:00:05.000Z", "event.name": "nvidia.gpu.xid", "severity": "ERROR", "hw.id": "GPU-0", "body": "XID 79"}),
            json!({"time": "2027-01-15T08:00:06.000Z", "event.name": "nvidia.gpu.xid", "severity": "ERROR", "hw.id": "GPU-1", "body": "XID 79"}),
            json!({"time": "2027-01-15T08:00:05.050Z", "event.name": "nvidia.gpu.alert.xid", "severity": "WARN", "state": "firing", "body": "XID 79 seen"}),
        ];
        let axis = Axis {
            start,
            span_s: 14.0,
        };
        let c = chart(&gpu, &curves, &axis, &events);
        let util = &c.panels[0].series[0];
        assert_eq!(util.key, "utilization_gpu_percent");
        assert_eq!(util.d.matches('M').count(), 2, "{}", util.d);
        assert_eq!((util.points, util.min, util.max), (4, 50.0, 63.0));
        assert_eq!(c.series_count, 1);
        assert_eq!(c.panels[0].missing.len(), 2);
        assert_eq!(c.held_back.len(), 1);
        assert_eq!(c.held_back[0].class, "hb0");
        // Capped at 0 s and 1 s, each holding until the next reading, at most two buckets
        // into the gap that follows.
        assert!((c.held_back[0].w - 4.0 / 14.0 * PLOT_W).abs() < 1e-6);
        // The XID and the alert 50 ms later share one marker, the more severe colour.
        assert_eq!(c.markers.len(), 1);
        let m = &c.markers[0];
        assert_eq!(
            (m.label.as_str(), m.events, m.class),
            ("1,3", 2, "sev-error")
        );
        assert!(
            m.title.contains("#1 ") && m.title.contains("\n#3 "),
            "{}",
            m.title
        );
        assert!((c.markers[0].x - (LEFT + 5.0 / 14.0 * PLOT_W)).abs() < 1e-6);
    }
}
