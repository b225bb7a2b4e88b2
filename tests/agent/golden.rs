//! One golden export: what the agent sends for the recorded H200 under load
//! (`tests/scenarios/h200-under-load.json`, time frozen at its first row), in two forms that
//! are checked in and diffed here on every run:
//!
//! - `tests/golden/h200-export.json`: the first export as OTLP/JSON (the console exporter's
//!   line, parsed into the official protobuf types and written back pretty, in the order the
//!   agent sent it);
//! - `tests/golden/h200-export.prom`: the same export in the Prometheus text exposition
//!   format, named as the Collector's `prometheus` exporter does with its default settings
//!   (`add_metric_suffixes: true`, no timestamps): unit and `_total`/`_ratio` suffixes, the
//!   attributes as labels plus `job` and `instance`, the resource as `target_info`.
//!   `scripts/check-rules.sh` lints it with `promtool check metrics`.
//!
//! What varies from run to run is normalized, nothing else: every timestamp (the distinct
//! non-zero `timeUnixNano`/`startTimeUnixNano` values, in order, become 2026-01-01T00:00:00Z
//! plus 0, 1, 2 … s, so equal times stay equal and order is kept), the resource's `host.name`
//! and `service.instance.id`, and the observations of the agent's own timings (histograms in
//! seconds: their sum, min and max become 0 s, and the count sits in the first bucket).
//! The agent reads an empty `/proc` (`GPU_SIDECAR_PROC_ROOT`): the scenario's pid 432 gets no
//! `process.executable.name` from whatever process has that pid on the machine running this.
//! A changed value, name, unit, type, attribute or description of any metric fails the test.
//!
//! Regenerate both files with `UPDATE_DOCS=1 cargo test --test agent golden::` (the
//! convention of the generated docs), and read the diff before committing it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::common::{self, Agent};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, Metric};

const WAIT: Duration = Duration::from_secs(20);
const GOLDEN_JSON: &str = "tests/golden/h200-export.json";
const GOLDEN_PROM: &str = "tests/golden/h200-export.prom";

/// 2026-01-01T00:00:00Z in nanoseconds since the Unix epoch: the first normalized timestamp.
const NORMALIZED_EPOCH_NS: u64 = 1_767_225_600_000_000_000;

/// The first export of the H200 scenario with time frozen at t = 0 (every NVML answer is the
/// recording's first row), printed by the console exporter, parsed.
fn h200_first_export() -> ExportMetricsServiceRequest {
    // An empty /proc: the scenario's pid 432 may be a live process on the machine running the
    // test, whose name the agent would add as `process.executable.name`.
    let proc_root = common::scratch_dir().join("golden-proc");
    std::fs::create_dir_all(&proc_root).unwrap();
    let mut agent = Agent::builder()
        .env("GPU_SIDECAR_PROC_ROOT", &proc_root)
        .env_mock("h200-under-load.json")
        .env("NVML_MOCK_TIME_SCALE", "0")
        .env("OTEL_METRICS_EXPORTER", "console")
        .env("OTEL_LOGS_EXPORTER", "none")
        .spawn();
    assert!(
        agent.wait_for_stdout("\"resourceMetrics\"", WAIT),
        "no export on stdout\n{}",
        agent.dump()
    );
    agent.sigterm();
    let status = agent.wait_exit(WAIT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{}", agent.dump());
    let lines = agent.stdout_lines();
    let first = lines
        .iter()
        .find(|l| l.contains("\"resourceMetrics\""))
        .expect("the line waited for");
    serde_json::from_str(first)
        .unwrap_or_else(|e| panic!("the console line is not OTLP/JSON ({e}):\n{first}"))
}

/// The value of `attrs[key]`, as a mutable reference.
fn attr_mut<'a>(attrs: &'a mut [KeyValue], key: &str) -> Option<&'a mut AnyValue> {
    attrs
        .iter_mut()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_mut())
}

/// Every `(start) time_unix_nano` of every point of `m`.
fn point_times(m: &mut Metric) -> Vec<&mut u64> {
    match m.data.as_mut() {
        Some(metric::Data::Gauge(g)) => g
            .data_points
            .iter_mut()
            .flat_map(|p| [&mut p.start_time_unix_nano, &mut p.time_unix_nano])
            .collect(),
        Some(metric::Data::Sum(s)) => s
            .data_points
            .iter_mut()
            .flat_map(|p| [&mut p.start_time_unix_nano, &mut p.time_unix_nano])
            .collect(),
        Some(metric::Data::Histogram(h)) => h
            .data_points
            .iter_mut()
            .flat_map(|p| [&mut p.start_time_unix_nano, &mut p.time_unix_nano])
            .collect(),
        other => panic!(
            "{}: a metric type this export does not have: {other:?}",
            m.name
        ),
    }
}

/// Replaces what varies between runs (see the module's docstring); nothing else.
fn normalize(request: &mut ExportMetricsServiceRequest) {
    for rm in &mut request.resource_metrics {
        let resource = rm.resource.as_mut().expect("a resource");
        for (key, value) in [
            ("host.name", "golden-host"),
            (
                "service.instance.id",
                "00000000-0000-4000-8000-000000000000",
            ),
        ] {
            let v = attr_mut(&mut resource.attributes, key)
                .unwrap_or_else(|| panic!("the resource has no {key}"));
            v.value = Some(any_value::Value::StringValue(value.to_owned()));
        }
        let metrics = rm.scope_metrics.iter_mut().flat_map(|s| &mut s.metrics);
        let mut times: Vec<&mut u64> = metrics.flat_map(point_times).collect();
        let distinct: BTreeSet<u64> = times.iter().map(|t| **t).filter(|t| *t != 0).collect();
        let rank: BTreeMap<u64, u64> = distinct.into_iter().zip(0..).collect();
        for t in &mut times {
            if **t != 0 {
                **t = NORMALIZED_EPOCH_NS + rank[&**t] * 1_000_000_000;
            }
        }
        for m in rm.scope_metrics.iter_mut().flat_map(|s| &mut s.metrics) {
            if let (Some(metric::Data::Histogram(h)), "s") = (m.data.as_mut(), m.unit.as_str()) {
                for p in &mut h.data_points {
                    p.sum = Some(0.0);
                    p.min = Some(0.0);
                    p.max = Some(0.0);
                    for (i, c) in p.bucket_counts.iter_mut().enumerate() {
                        *c = if i == 0 { p.count } else { 0 };
                    }
                }
            }
        }
    }
}

/// A float as Go's `strconv.FormatFloat(v, 'g', -1, 64)` writes it, which is how the
/// Prometheus client library (and so the Collector's exporter) writes sample values and `le`
/// bounds: the shortest digits that read back as `v`, in exponent form (`e+09`, `e-05`) when
/// the exponent is below -4 or at least 6; `+Inf`, `-Inf`, `NaN`.
fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let sci = format!("{v:e}"); // shortest round-trip digits: "1.194131456e9", "-1e-5"
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    if (-4..6).contains(&exp) {
        format!("{v}") // Rust's Display: the same shortest digits, never an exponent
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    }
}

/// OTLP units to Prometheus unit words (the Collector's translator, `unitMap`).
fn unit_word(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "%" => "percent",
        _ => return None,
    })
}

/// The "per" unit words (`perUnitMap`).
fn per_unit_word(unit: &str) -> Option<&'static str> {
    Some(match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        _ => return None,
    })
}

/// An OTLP metric's shape, which decides its name's suffixes and its Prometheus type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Gauge,
    /// A cumulative sum; a monotonic one is a Prometheus counter, any other a gauge.
    Sum {
        monotonic: bool,
    },
    Histogram,
}

impl Shape {
    /// The `# TYPE` word.
    fn prometheus_type(self) -> &'static str {
        match self {
            Shape::Gauge | Shape::Sum { monotonic: false } => "gauge",
            Shape::Sum { monotonic: true } => "counter",
            Shape::Histogram => "histogram",
        }
    }
}

/// Prometheus's words of a unit that are not letters, digits or `:` become `_` (cleanUpUnit).
fn clean_unit(word: &str) -> String {
    let mapped: String = word
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == ':' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut out = String::new();
    for c in mapped.chars() {
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    out.trim_start_matches('_').to_owned()
}

/// The metric name the Collector's Prometheus exporter gives an OTLP metric with its default
/// `add_metric_suffixes: true` (the OTel-to-Prometheus translator's `normalizeName`): the name
/// split at every character that is not a letter, digit or `:`; the unit's word appended
/// (`By` → `bytes`, `By/s` → `bytes_per_second`; a unit in braces, `{error}`, adds nothing)
/// unless the name has it already; `total` last for a monotonic sum; `ratio` last for a gauge
/// of unit `1` (an OTLP gauge: a non-monotonic sum of unit `1` gets no suffix); joined
/// with `_`.
fn prometheus_name(name: &str, unit: &str, shape: Shape) -> String {
    let mut tokens: Vec<String> = name
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == ':'))
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    let (main, per) = match unit.split_once('/') {
        Some((m, p)) => (m.trim(), Some(p.trim())),
        None => (unit.trim(), None),
    };
    let braced = |u: &str| u.contains(['{', '}']);
    let main = if main.is_empty() || braced(main) || main == "1" {
        String::new()
    } else {
        clean_unit(unit_word(main).unwrap_or(main))
    };
    let per = match per {
        Some(p) if !p.is_empty() && !braced(p) => clean_unit(per_unit_word(p).unwrap_or(p)),
        _ => String::new(),
    };
    let mut main = if tokens.contains(&main) {
        String::new()
    } else {
        main
    };
    // As the translator does: "per_<word>" is compared with the name's tokens, which never
    // hold a `_`, so it is always added.
    let per = if per.is_empty() {
        String::new()
    } else {
        format!("per_{}", per.trim_end_matches('_'))
    };
    if !per.is_empty() {
        main = main.trim_end_matches('_').to_owned();
    }
    tokens.extend([main, per].into_iter().filter(|t| !t.is_empty()));
    if shape == (Shape::Sum { monotonic: true }) {
        tokens.retain(|t| t != "total");
        tokens.push("total".into());
    }
    if unit == "1" && shape == Shape::Gauge {
        tokens.retain(|t| t != "ratio");
        tokens.push("ratio".into());
    }
    let joined = tokens.join("_");
    if joined.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{joined}")
    } else {
        joined
    }
}

/// An attribute key as a Prometheus label name (the translator's `NormalizeLabel`): every
/// character that is not a letter, digit or `_` becomes `_`; `key_` before a leading digit,
/// `key` before a single leading `_`.
fn prometheus_label(key: &str) -> String {
    let label: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if label.starts_with(|c: char| c.is_ascii_digit()) {
        format!("key_{label}")
    } else if label.starts_with('_') && !label.starts_with("__") {
        format!("key{label}")
    } else {
        label
    }
}

/// An attribute value as a label value (pdata's `AsString`).
fn label_value(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => go_float(*d),
        other => panic!("an attribute value this export does not have: {other:?}"),
    }
}

/// One exposed series: its labels (sorted by name) and its sample lines.
type Series = (BTreeMap<String, String>, Vec<String>);

/// `name{a="x",b="y"} value`, label values escaped as the text format wants.
fn sample(
    name: &str,
    labels: &BTreeMap<String, String>,
    extra: Option<(&str, &str)>,
    value: &str,
) -> String {
    let escape = |v: &str| {
        v.replace('\\', r"\\")
            .replace('"', "\\\"")
            .replace('\n', r"\n")
    };
    let pairs: Vec<String> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(extra)
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if pairs.is_empty() {
        format!("{name} {value}")
    } else {
        format!("{name}{{{}}} {value}", pairs.join(","))
    }
}

/// The export as the Collector's Prometheus exporter serves it (text format 0.0.4, default
/// settings): families sorted by name, each with `# HELP` (the description) and `# TYPE`;
/// series sorted by their label values; `target_info` with the resource's attributes but
/// `service.name` (→ `job`), `service.namespace` and `service.instance.id` (→ `instance`).
fn prometheus_text(request: &ExportMetricsServiceRequest) -> String {
    let mut families: BTreeMap<String, (String, &str, Vec<Series>)> = BTreeMap::new();
    for rm in &request.resource_metrics {
        let resource = &rm.resource.as_ref().expect("a resource").attributes;
        let get = |key: &str| {
            resource
                .iter()
                .find(|kv| kv.key == key)
                .map(|kv| label_value(&kv.value))
        };
        let service = get("service.name").expect("service.name");
        let job = match get("service.namespace") {
            Some(ns) => format!("{ns}/{service}"),
            None => service,
        };
        let instance = get("service.instance.id").expect("service.instance.id");
        let with_target = |mut labels: BTreeMap<String, String>| {
            labels.insert("job".into(), job.clone());
            labels.insert("instance".into(), instance.clone());
            labels
        };
        let target: BTreeMap<String, String> = resource
            .iter()
            .filter(|kv| {
                !["service.name", "service.namespace", "service.instance.id"]
                    .contains(&kv.key.as_str())
            })
            .map(|kv| (prometheus_label(&kv.key), label_value(&kv.value)))
            .collect();
        let target = with_target(target);
        let line = sample("target_info", &target, None, "1");
        families
            .entry("target_info".into())
            .or_insert_with(|| ("Target metadata".into(), "gauge", Vec::new()))
            .2
            .push((target, vec![line]));

        for m in rm.scope_metrics.iter().flat_map(|s| &s.metrics) {
            let labels_of = |attrs: &[KeyValue]| {
                with_target(
                    attrs
                        .iter()
                        .map(|kv| (prometheus_label(&kv.key), label_value(&kv.value)))
                        .collect(),
                )
            };
            let number = |v: &Option<number_data_point::Value>| match v {
                Some(number_data_point::Value::AsDouble(d)) => go_float(*d),
                Some(number_data_point::Value::AsInt(i)) => go_float(*i as f64),
                None => panic!("{}: a point without a value", m.name),
            };
            let (shape, series): (Shape, Vec<Series>) = match m.data.as_ref() {
                Some(metric::Data::Gauge(g)) => {
                    let name = prometheus_name(&m.name, &m.unit, Shape::Gauge);
                    let series = g.data_points.iter().map(|p| {
                        let labels = labels_of(&p.attributes);
                        let line = sample(&name, &labels, None, &number(&p.value));
                        (labels, vec![line])
                    });
                    (Shape::Gauge, series.collect())
                }
                Some(metric::Data::Sum(s)) => {
                    assert_eq!(s.aggregation_temporality, 2, "{}: cumulative", m.name);
                    let shape = Shape::Sum {
                        monotonic: s.is_monotonic,
                    };
                    let name = prometheus_name(&m.name, &m.unit, shape);
                    let series = s.data_points.iter().map(|p| {
                        let labels = labels_of(&p.attributes);
                        let line = sample(&name, &labels, None, &number(&p.value));
                        (labels, vec![line])
                    });
                    (shape, series.collect())
                }
                Some(metric::Data::Histogram(h)) => {
                    assert_eq!(h.aggregation_temporality, 2, "{}: cumulative", m.name);
                    let name = prometheus_name(&m.name, &m.unit, Shape::Histogram);
                    let series = h.data_points.iter().map(|p| {
                        let labels = labels_of(&p.attributes);
                        let mut lines = Vec::new();
                        let mut cumulative = 0;
                        for (bound, count) in p.explicit_bounds.iter().zip(&p.bucket_counts) {
                            cumulative += count;
                            let le = go_float(*bound);
                            let v = go_float(cumulative as f64);
                            lines.push(sample(
                                &format!("{name}_bucket"),
                                &labels,
                                Some(("le", &le)),
                                &v,
                            ));
                        }
                        let count = go_float(p.count as f64);
                        lines.push(sample(
                            &format!("{name}_bucket"),
                            &labels,
                            Some(("le", "+Inf")),
                            &count,
                        ));
                        let sum = go_float(p.sum.expect("a histogram sum"));
                        lines.push(sample(&format!("{name}_sum"), &labels, None, &sum));
                        lines.push(sample(&format!("{name}_count"), &labels, None, &count));
                        (labels, lines)
                    });
                    (Shape::Histogram, series.collect())
                }
                other => panic!(
                    "{}: a metric type this export does not have: {other:?}",
                    m.name
                ),
            };
            let name = prometheus_name(&m.name, &m.unit, shape);
            let kind = shape.prometheus_type();
            let family = families
                .entry(name.clone())
                .or_insert_with(|| (m.description.clone(), kind, Vec::new()));
            assert_eq!(family.1, kind, "{name}: two types under one name");
            family.2.extend(series);
        }
    }
    let mut out = String::new();
    for (name, (help, kind, mut series)) in families {
        let help = help.replace('\\', r"\\").replace('\n', r"\n");
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {}\n", kind));
        series.sort_by(|a, b| a.0.values().cmp(b.0.values()));
        for (_, lines) in series {
            for line in lines {
                out.push_str(&line);
                out.push('\n');
            }
        }
    }
    out
}

/// Compares `fresh` with the checked-in `rel` (under the workspace root), or writes it there
/// when `UPDATE_DOCS=1`. Returns the difference as a message, `None` when equal.
fn compare_or_update(rel: &str, fresh: &str) -> Option<String> {
    let path = common::workspace_root().join(rel);
    if std::env::var_os("UPDATE_DOCS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, fresh).unwrap_or_else(|e| panic!("cannot write {rel}: {e}"));
        return None;
    }
    let golden = if Path::new(&path).is_file() {
        common::read_text(&path)
    } else {
        String::new()
    };
    if golden == fresh {
        return None;
    }
    let (g, f): (Vec<_>, Vec<_>) = (golden.lines().collect(), fresh.lines().collect());
    let at = (0..g.len().max(f.len()))
        .find(|&i| g.get(i) != f.get(i))
        .unwrap_or(0);
    let context = |lines: &[&str]| {
        lines[at.saturating_sub(3).min(lines.len())..(at + 4).min(lines.len())].join("\n")
    };
    Some(format!(
        "{rel} differs from this run's export from line {}:\n--- checked in\n{}\n+++ this run\n{}\n",
        at + 1,
        context(&g),
        context(&f)
    ))
}

/// The named metric's first point's value and unit in the export.
fn first_value(request: &ExportMetricsServiceRequest, name: &str) -> (f64, String) {
    let m = request
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|s| &s.metrics)
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no {name} in the export"));
    let value = match m.data.as_ref() {
        Some(metric::Data::Gauge(g)) => g.data_points[0].value,
        Some(metric::Data::Sum(s)) => s.data_points[0].value,
        _ => panic!("{name} is not a gauge or a sum"),
    };
    let value = match value {
        Some(number_data_point::Value::AsDouble(d)) => d,
        Some(number_data_point::Value::AsInt(i)) => i as f64,
        None => panic!("{name}: no value"),
    };
    (value, m.unit.clone())
}

#[test]
fn h200_export_matches_the_golden_files() {
    let mut export = h200_first_export();
    // The recording's first row (tests/fixtures/nvml-h200, as the scenario converts it): a
    // golden file regenerated from a wrong export does not pass either.
    assert_eq!(first_value(&export, "hw.power"), (690.599, "W".into()));
    assert_eq!(
        first_value(&export, "hw.gpu.memory.usage"),
        (1_194_131_456.0, "By".into())
    );
    assert_eq!(
        first_value(&export, "hw.gpu.memory.limit"),
        (150_754_820_096.0, "By".into())
    );
    assert_eq!(
        first_value(&export, "hw.gpu.utilization"),
        (0.99, "1".into())
    );
    normalize(&mut export);
    let json = serde_json::to_string_pretty(&export).unwrap() + "\n";
    let prom = prometheus_text(&export);
    assert!(prom.contains("\nhw_power_watts{"), "{prom}");
    let differences: Vec<String> = [(GOLDEN_JSON, &json), (GOLDEN_PROM, &prom)]
        .into_iter()
        .filter_map(|(rel, fresh)| compare_or_update(rel, fresh))
        .collect();
    assert!(
        differences.is_empty(),
        "{}if the change is meant, regenerate with UPDATE_DOCS=1 cargo test --test agent golden:: and read the diff",
        differences.join("\n")
    );
}

#[test]
fn prometheus_names_follow_the_collectors_translator() {
    use Shape::*;
    let (counter, updown) = (Sum { monotonic: true }, Sum { monotonic: false });
    // The translator's own documented examples, and this export's kinds of unit.
    for (name, unit, kind, want) in [
        (
            "http.server.request.duration",
            "s",
            Histogram,
            "http_server_request_duration_seconds",
        ),
        ("requests.count", "1", counter, "requests_count_total"),
        ("memory.usage", "By", Gauge, "memory_usage_bytes"),
        ("hw.gpu.utilization", "1", Gauge, "hw_gpu_utilization_ratio"),
        ("hw.status", "1", updown, "hw_status"),
        ("hw.errors", "{error}", counter, "hw_errors_total"),
        ("hw.energy", "J", counter, "hw_energy_joules_total"),
        ("hw.temperature", "Cel", Gauge, "hw_temperature_celsius"),
        (
            "nvidia.gpu.pcie.throughput",
            "By/s",
            Gauge,
            "nvidia_gpu_pcie_throughput_bytes_per_second",
        ),
        (
            "gpu_sidecar.sample.duration",
            "s",
            Histogram,
            "gpu_sidecar_sample_duration_seconds",
        ),
        ("disk.io.bytes", "By", counter, "disk_io_bytes_total"),
        ("errors.total", "{error}", counter, "errors_total"),
    ] {
        assert_eq!(prometheus_name(name, unit, kind), want, "{name} [{unit}]");
    }
    assert_eq!(prometheus_label("hw.gpu.task"), "hw_gpu_task");
    assert_eq!(prometheus_label("9lives"), "key_9lives");
    for (v, want) in [
        (1_194_131_456.0, "1.194131456e+09"),
        (150_754_820_096.0, "1.50754820096e+11"),
        (690.599, "690.599"),
        (0.99, "0.99"),
        (1e-05, "1e-05"),
        (0.00025, "0.00025"),
        (100_000.0, "100000"),
        (1e6, "1e+06"),
        (-2.5, "-2.5"),
        (0.0, "0"),
        (1.0, "1"),
        (f64::INFINITY, "+Inf"),
    ] {
        assert_eq!(go_float(v), want);
    }
}
