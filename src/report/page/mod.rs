//! The run report as one self-contained HTML page (`gpu-otel-sidecar report … --html`,
//! `GPU_SIDECAR_REPORT_HTML`): per GPU, utilization, SM and tensor activity, memory used
//! against total (and the pool's level when preallocated), power against the limit and
//! temperature over the run's time axis, the time held back (power cap, thermal, HW
//! slowdown) as a lane, the run's events as numbered markers; the summary table (pod totals
//! and each GPU, [`FIGURES`]), what was absent and why, and the events.
//!
//! No script and nothing fetched: the charts are inline SVG, drawn from min/max buckets
//! ([`curves`]: any run length gives at most 1,200 points per series) with the geometry of
//! [`chart`] and the markup of the askama template `page.html`; the stylesheet is inlined
//! and follows `prefers-color-scheme` (light and dark).
//!
//! Elements a test (or a script) can find: `figure.gpu-chart[data-gpu-uuid]` per GPU with
//! `data-series-count`, `path.series[data-series]` per series (with `data-points`,
//! `data-min`, `data-max` in the panel's unit), `td[data-figure][data-scope]` per summary
//! cell with the JSON value in `data-value`, `tr.event` per event.

pub mod chart;
pub mod curves;
pub mod input;

use std::path::Path;

use askama::Template;
use serde_json::Value;

use super::figures::{Figure, FIGURES};
use super::read::time;
use super::summary::RunReport;
use crate::catalogue::attributes;
use crate::catalogue::resource;
use chart::{Axis, ChartView, HELD_BACK_LABELS, WIDTH};
pub use curves::Curves;

/// Where the curves come from, said on the page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CurvesSource {
    /// The agent's own samples, at shutdown.
    Agent,
    /// Sample log files, with what reading them left out.
    SampleLog(String),
    /// None given.
    None,
}

/// One cell of the summary table.
#[derive(Debug, Clone, PartialEq)]
struct Cell {
    scope: String,
    text: String,
    /// The JSON value (`data-value`).
    value: String,
    /// Why it is absent, when it is.
    absent: Option<String>,
    /// The figure has no meaning for this column (a GPU-only figure of the pod).
    na: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct Row {
    name: &'static str,
    label: &'static str,
    cells: Vec<Cell>,
}

#[derive(Debug, Clone, PartialEq)]
struct EventRow {
    n: usize,
    time: String,
    gpu: String,
    name: String,
    state: String,
    class: &'static str,
    body: String,
}

#[derive(Template)]
#[template(path = "page.html", config = "src/report/page/askama.toml")]
struct Page<'a> {
    title: String,
    facts: Vec<(&'static str, String)>,
    columns: Vec<String>,
    rows: Vec<Row>,
    notes: Vec<String>,
    absent: Vec<String>,
    charts: Vec<(String, Option<ChartView>)>,
    curves_note: String,
    events: Vec<EventRow>,
    events_dropped: u64,
    resource: Vec<(String, String)>,
    width: f64,
    held_back_labels: &'a [&'static str],
    version: &'static str,
}

fn gpus(report: &Value) -> &[Value] {
    report["gpus"].as_array().map_or(&[], Vec::as_slice)
}

/// `GPU 0 · NVIDIA H200`.
fn gpu_title(g: &Value) -> String {
    let index = g["index"].as_u64().map_or("?".into(), |i| i.to_string());
    match g["name"].as_str() {
        Some(n) => format!("GPU {index} · {n}"),
        None => format!("GPU {index}"),
    }
}

/// Why a figure is absent from a summary, in words.
fn absent_reason(f: &Figure, report: &Value, gpu: Option<&Value>) -> String {
    let name = f.name;
    let mig = gpu.is_some_and(|g| g["uuid"].as_str().is_some_and(|u| u.starts_with("MIG-")));
    if name.starts_with("sm_") || name.starts_with("tensor_") || name.starts_with("dram_") {
        // Why is the report's note (not supported, lost before its first window, a short run):
        // said once, there.
        "no GPM reading (why: see the notes)".into()
    } else if name == "energy_power_integral_j" {
        "not cross-checked (energy from power itself, a counter reset, or power read over less than 90 % of the counter's span)".into()
    } else if name.starts_with("ecc_") {
        "NVML gave no ECC counts (ECC off, or not supported)".into()
    } else if name.ends_with("cost") && report["price_per_gpu_hour"].is_null() {
        "no price set (GPU_SIDECAR_PRICE_PER_GPU_HOUR)".into()
    } else if mig && (name.starts_with("power") || name.starts_with("energy") || name == "cost") {
        "power and energy belong to the physical GPU, not a MIG device".into()
    } else if name.starts_with("nvlink") {
        "NVML gave no NVLink byte counters (no NVLink on this GPU, or not read)".into()
    } else if name == "temperature_memory_peak_c" {
        "no HBM temperature answered (NVML_FI_DEV_MEMORY_TEMP)".into()
    } else if gpu.is_none() && (name.starts_with("power") || name.starts_with("energy")) {
        "not every GPU answered it (see each GPU's column)".into()
    } else {
        "NVML never answered it during the run".into()
    }
}

fn cell(f: &Figure, report: &Value, summary: &Value, gpu: Option<&Value>, scope: &str) -> Cell {
    let v = f.value(summary);
    let na = (f.gpu_only && gpu.is_none()) || (f.name == "memory_pool_bytes" && v.is_null());
    Cell {
        scope: scope.into(),
        text: if na { String::new() } else { f.format(v) },
        value: if v.is_null() {
            String::new()
        } else {
            v.to_string()
        },
        absent: (v.is_null() && !na).then(|| absent_reason(f, report, gpu)),
        na,
    }
}

fn summary_rows(report: &Value) -> (Vec<Row>, Vec<String>) {
    let mut absent: Vec<(String, &'static str, String)> = Vec::new();
    let rows = FIGURES
        .iter()
        .map(|f| {
            let mut cells = vec![cell(f, report, &report["pod"], None, "pod")];
            for g in gpus(report) {
                let scope = g["uuid"].as_str().unwrap_or_default();
                cells.push(cell(f, report, g, Some(g), scope));
            }
            for (c, col) in cells
                .iter()
                .zip(std::iter::once("pod".to_string()).chain(gpus(report).iter().map(gpu_title)))
            {
                if let Some(why) = &c.absent {
                    absent.push((col, f.label, why.clone()));
                }
            }
            Row {
                name: f.name,
                label: f.label,
                cells,
            }
        })
        .collect();
    // One line per column and reason: "GPU 1 · NVIDIA A100: SM activity, …: no GPM reading".
    let mut lines: Vec<(String, String, Vec<&str>)> = Vec::new();
    for (col, label, why) in absent {
        match lines.iter_mut().find(|l| l.0 == col && l.1 == why) {
            Some(l) => l.2.push(label),
            None => lines.push((col, why, vec![label])),
        }
    }
    let lines = lines
        .into_iter()
        .map(|(col, why, labels)| format!("{col}: {}: {why}", labels.join(", ")))
        .collect();
    (rows, lines)
}

fn facts(report: &Value) -> Vec<(&'static str, String)> {
    let r = &report["resource"];
    let text = |v: &Value| v.as_str().map(str::to_string);
    let pod = match (
        text(&r[resource::K8S_NAMESPACE_NAME]),
        text(&r[resource::K8S_POD_NAME]),
    ) {
        (Some(ns), Some(p)) => Some(format!("{ns}/{p}")),
        (None, Some(p)) => Some(p),
        _ => None,
    };
    let gpu_list = gpus(report)
        .iter()
        .map(gpu_title)
        .collect::<Vec<_>>()
        .join(", ");
    [
        ("pod", pod),
        ("container", text(&r[resource::K8S_CONTAINER_NAME])),
        (
            "node",
            text(&r[resource::K8S_NODE_NAME]).or_else(|| text(&r[resource::HOST_NAME])),
        ),
        ("started", text(&report["started_at"])),
        ("ended", text(&report["ended_at"])),
        (
            "wall time",
            report["pod"]["wall_time_s"]
                .as_f64()
                .map(super::figures::duration),
        ),
        ("GPUs", Some(gpu_list).filter(|s| !s.is_empty())),
        (
            "sample interval",
            report["sample_interval_s"]
                .as_f64()
                .map(super::figures::duration),
        ),
        (
            "price per GPU-hour",
            report["price_per_gpu_hour"].as_f64().map(|p| p.to_string()),
        ),
    ]
    .into_iter()
    .filter_map(|(k, v)| v.map(|v| (k, v)))
    .collect()
}

fn event_rows(report: &Value) -> Vec<EventRow> {
    let index: std::collections::HashMap<&str, String> = gpus(report)
        .iter()
        .filter_map(|g| Some((g["uuid"].as_str()?, format!("GPU {}", g["index"]))))
        .collect();
    let events = report["events"].as_array().map_or(&[][..], Vec::as_slice);
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            let hw = e[attributes::HW_ID].as_str();
            EventRow {
                n: i + 1,
                time: s("time"),
                gpu: hw.map_or("pod".into(), |h| index.get(h).cloned().unwrap_or(h.into())),
                name: s("event.name"),
                state: s("state"),
                class: chart::severity_class(e["severity"].as_str().unwrap_or_default()),
                body: s("body"),
            }
        })
        .collect()
}

/// The report's notes, each once (a report merged by hand, or an older agent's, may repeat
/// one).
fn notes(report: &Value) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for n in report["notes"].as_array().into_iter().flatten() {
        if let Some(n) = n.as_str().filter(|n| !out.iter().any(|o| o == n)) {
            out.push(n.to_string());
        }
    }
    out
}

/// The time axis: the report's start to its end; else the curves' start, over what they
/// hold.
fn axis(report: &Value, curves: Option<&Curves>) -> Option<Axis> {
    let start = time(&report["started_at"]).or_else(|| curves?.origin())?;
    let end = time(&report["ended_at"]);
    let span_s = end
        .and_then(|e| e.duration_since(start).ok())
        .map(|d| d.as_secs_f64())
        .filter(|s| *s > 0.0)
        .unwrap_or(1.0);
    Some(Axis { start, span_s })
}

/// The page of `report` (its JSON), with charts from `curves` when given.
pub fn render(report: &Value, curves: Option<&Curves>, source: &CurvesSource) -> String {
    let (rows, absent) = summary_rows(report);
    let events: Vec<Value> = report["events"].as_array().cloned().unwrap_or_default();
    let axis = axis(report, curves);
    let charts = gpus(report)
        .iter()
        .map(|g| {
            let c = curves
                .zip(axis.as_ref())
                .map(|(c, a)| chart::chart(g, c, a, &events));
            (gpu_title(g), c)
        })
        .collect();
    let curves_note = match source {
        CurvesSource::Agent => "Curves: every sample the agent took, at shutdown.".to_string(),
        CurvesSource::SampleLog(s) => format!("Curves: {s}."),
        CurvesSource::None => "No curves: give the run's sample log (gpu-otel-sidecar report REPORT.json --samples SAMPLE_LOG --html OUT.html), or set GPU_SIDECAR_REPORT_HTML in the agent.".to_string(),
    };
    let pod = report["resource"][resource::K8S_POD_NAME]
        .as_str()
        .or(report["resource"][resource::HOST_NAME].as_str())
        .unwrap_or("GPU run");
    let page = Page {
        title: format!("Run report: {pod}"),
        facts: facts(report),
        columns: std::iter::once("pod".to_string())
            .chain(gpus(report).iter().map(gpu_title))
            .collect(),
        rows,
        notes: notes(report),
        absent,
        charts,
        curves_note,
        events: event_rows(report),
        events_dropped: report["events_dropped"].as_u64().unwrap_or(0),
        resource: report["resource"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default(),
        width: WIDTH,
        held_back_labels: &HELD_BACK_LABELS,
        version: env!("CARGO_PKG_VERSION"),
    };
    // Rendering writes into a String and every value is Display: it cannot fail.
    page.render().unwrap_or_default()
}

/// Writes the page of `report` to `path` (`GPU_SIDECAR_REPORT_HTML`, at shutdown), with
/// `curves` from the agent's samples. A write error is logged; it never stops the shutdown.
pub fn write_report(path: &Path, report: &RunReport, curves: Option<&Curves>) {
    let json = serde_json::to_value(report).unwrap_or_default();
    let source = match curves {
        Some(_) => CurvesSource::Agent,
        None => CurvesSource::None,
    };
    match write(path, &json, curves, &source) {
        Ok(()) => tracing::info!(path = %path.display(), "run report page written"),
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot write the run report page (GPU_SIDECAR_REPORT_HTML)")
        }
    }
}

/// Renders and writes the page to `path` (replaced).
///
/// # Errors
/// The write's error.
pub fn write(
    path: &Path,
    report: &Value,
    curves: Option<&Curves>,
    source: &CurvesSource,
) -> std::io::Result<()> {
    std::fs::write(path, render(report, curves, source))
}

#[cfg(test)]
mod tests;
