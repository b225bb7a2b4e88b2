//! `gpu-otel-sidecar compare BASE.json NEW.json`: first whether NEW is a whole run
//! ([`super::completeness`]: a GPU lost, samples missed, XIDs or ECC errors, events dropped,
//! much shorter than BASE; each a reason and an exit bit), then the pod figures that matter
//! for a regression check ([`FIGURES`] with `compare` set: wall time, energy, cost, mean
//! utilization, SM and tensor activity, memory peak, time held back), each with its change
//! from BASE to NEW, and whether it got worse by more than the threshold. The figures of a
//! run that is not whole are shown, not judged: a run cut short by a lost GPU used less energy.
//!
//! - Figures are compared at full precision, as the reports carry them; the table rounds
//!   them for reading only (a change that does not show at its precision is not flagged).
//! - A change is `(new - base) / base` in percent; for time held back (power cap, thermal,
//!   HW slowdown) it is `(new - base) / base wall time`, since a good run often has 0 s of
//!   it. From a base of 0 any increase is an infinite change.
//! - *Worse* is up for time, energy, cost and memory, down for utilization and activity. A
//!   figure got worse past the threshold when it is worse by more than
//!   `--max-regression` percent (default [`DEFAULT_MAX_REGRESSION_PERCENT`]).
//! - A figure absent from either report is shown and not judged (GPM figures on a GPU
//!   without GPM, cost without a price); nor is energy when either report's energy counter
//!   disagrees with its power readings (`energy_counter_agrees` false). `notes` say when the
//!   two runs are not alike (GPU count or model, price), and each report's own notes.

use serde::Serialize;
use serde_json::Value;

use super::completeness::{self, Reason, Tolerances};
use super::figures::{Better, Change, Figure, Unit, FIGURES};

/// The default threshold, percent.
pub const DEFAULT_MAX_REGRESSION_PERCENT: f64 = 10.0;

/// A ratio (utilization, SM or tensor activity) must also move by this much, absolute, to be
/// a regression: a job that does no tensor math reads tensor activity 0.0004 one run and
/// 0.0003 the next, -25 % of nothing.
pub const RATIO_FLOOR: f64 = 0.01;

/// One compared figure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The figure's name (`energy_j`, `tensor_activity_mean.any`, …).
    pub name: &'static str,
    /// Its label.
    pub label: &'static str,
    /// BASE's value (`None`: absent).
    pub base: Option<f64>,
    /// NEW's value.
    pub new: Option<f64>,
    /// The change in percent (see the module docs); `None` when not judged, or infinite
    /// (from a base of 0).
    pub change_percent: Option<f64>,
    /// The change was from a base of 0 to something else (infinite).
    pub from_zero: bool,
    /// It moved the bad way.
    pub worse: bool,
    /// It moved the bad way by more than the threshold.
    pub regression: bool,
    #[serde(skip)]
    figure: &'static Figure,
    #[serde(skip)]
    change: Option<f64>,
}

/// The comparison of two reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Why NEW is not a whole run ([`completeness::judge`]); empty when it is. Then its
    /// figures are not judged (`regressions` stays empty).
    pub incomplete: Vec<Reason>,
    /// The exit code: the bits of `incomplete`, else 1 for a regression, else 0.
    pub exit_code: u8,
    /// The threshold, percent.
    pub max_regression_percent: f64,
    /// Names of the figures that got worse past it.
    pub regressions: Vec<&'static str>,
    /// One per compared figure, in [`FIGURES`] order.
    pub figures: Vec<Row>,
    /// What makes the two runs unlike (GPU count or model, price).
    pub notes: Vec<String>,
}

/// Whether energy can be judged: neither report's energy counter disagrees with its power.
fn energy_checked(report: &Value) -> bool {
    report["pod"]["energy_counter_agrees"].as_bool() != Some(false)
}

/// Compares the pod summaries of two reports (JSON as written by the agent): NEW's
/// completeness under `tolerances`, then the figures against `max_regression_percent`.
pub fn compare(
    base: &Value,
    new: &Value,
    max_regression_percent: f64,
    tolerances: &Tolerances,
) -> Comparison {
    let incomplete = completeness::judge(base, new, tolerances);
    let whole = incomplete.is_empty();
    let energy_ok = energy_checked(base) && energy_checked(new);
    let base_wall = base["pod"]["wall_time_s"].as_f64().filter(|w| *w > 0.0);
    let figures: Vec<Row> = FIGURES
        .iter()
        .filter_map(|f| f.compare.map(|c| (f, c)))
        .map(|(f, (better, how))| {
            let (b, n) = (f.number(&base["pod"]), f.number(&new["pod"]));
            let judged = whole && (energy_ok || f.name != "energy_j");
            let change = b.zip(n).filter(|_| judged).map(|(b, n)| {
                let over = match (how, base_wall) {
                    (Change::ShareOfWallTime, Some(wall)) => wall,
                    _ => b.abs(),
                };
                if n == b {
                    0.0
                } else if over == 0.0 {
                    f64::INFINITY.copysign(n - b)
                } else {
                    (n - b) / over * 100.0
                }
            });
            let worse = change.is_some_and(|c| match better {
                Better::Lower => c > 0.0,
                Better::Higher => c < 0.0,
            });
            Row {
                name: f.name,
                label: f.label,
                base: b,
                new: n,
                change_percent: change.filter(|c| c.is_finite()),
                from_zero: change.is_some_and(f64::is_infinite),
                worse,
                regression: worse
                    && change.is_some_and(|c| c.abs() > max_regression_percent)
                    && (f.unit != Unit::Ratio
                        || b.zip(n).is_some_and(|(b, n)| (n - b).abs() >= RATIO_FLOOR)),
                figure: f,
                change,
            }
        })
        .collect();
    let regressions: Vec<&'static str> = figures
        .iter()
        .filter(|r| r.regression)
        .map(|r| r.name)
        .collect();
    let exit_code = incomplete
        .iter()
        .fold(0, |code, r| code | r.exit_bit)
        .max(u8::from(!regressions.is_empty()));
    let notes = notes(base, new, tolerances, energy_ok, &figures);
    Comparison {
        incomplete,
        exit_code,
        max_regression_percent,
        regressions,
        figures,
        notes,
    }
}

/// `1 GPU (NVIDIA H200)`.
fn gpus(report: &Value) -> String {
    let gpus = report["gpus"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let mut models: Vec<&str> = gpus.iter().filter_map(|g| g["name"].as_str()).collect();
    models.dedup();
    let s = if gpus.len() == 1 { "" } else { "s" };
    format!("{} GPU{s} ({})", gpus.len(), models.join(", "))
}

fn notes(
    base: &Value,
    new: &Value,
    tolerances: &Tolerances,
    energy_ok: bool,
    figures: &[Row],
) -> Vec<String> {
    let mut notes = Vec::new();
    // A figure BASE has and NEW lacks is not an improvement: said, not judged.
    let lacking: Vec<&str> = figures
        .iter()
        .filter(|r| r.base.is_some() && r.new.is_none())
        .map(|r| r.label)
        .collect();
    if !lacking.is_empty() {
        notes.push(format!(
            "NEW lacks figures BASE has, not judged: {}",
            lacking.join(", ")
        ));
    }
    // BASE's own gaps (against itself: its GPU count and wall time are the reference).
    for r in completeness::judge(base, base, tolerances) {
        notes.push(format!(
            "BASE is not a whole run either ({}): {}",
            r.gap.name(),
            r.text
        ));
    }
    notes.extend(completeness::notes("BASE", base));
    notes.extend(completeness::notes("NEW", new));
    if !energy_ok {
        let who: Vec<&str> = [("BASE", base), ("NEW", new)]
            .iter()
            .filter(|(_, r)| !energy_checked(r))
            .map(|(w, _)| *w)
            .collect();
        notes.push(format!(
            "energy not judged: the energy counter of {} disagrees with its power readings (energy_counter_agrees false; its notes say by how much)",
            who.join(" and ")
        ));
    }
    let (b, n) = (gpus(base), gpus(new));
    if b != n {
        notes.push(format!(
            "the runs differ in GPUs: BASE has {b}, NEW has {n}"
        ));
    }
    let price = |r: &Value| r["price_per_gpu_hour"].as_f64();
    if price(base) != price(new) {
        notes.push(format!(
            "the runs were priced differently (price_per_gpu_hour {:?} and {:?}): cost compares prices too",
            price(base),
            price(new)
        ));
    }
    for r in &[("BASE", base), ("NEW", new)] {
        if let Some(n) = r.1["notes"].as_array().filter(|n| !n.is_empty()) {
            notes.push(format!(
                "{} notes: {}",
                r.0,
                n.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    notes
}

impl Row {
    fn change_text(&self) -> String {
        match self.change {
            None if self.base.is_some() && self.new.is_some() => "not judged".into(),
            None => "not compared".into(),
            Some(c) if c.is_infinite() => "from 0".into(),
            Some(c) => format!("{c:+.1} %"),
        }
    }

    fn value_text(&self, v: Option<f64>) -> String {
        v.map_or_else(|| "—".into(), |x| self.figure.format(&Value::from(x)))
    }
}

impl Comparison {
    /// The table people read, one figure per line, then the verdict.
    pub fn table(&self, base_name: &str, new_name: &str) -> String {
        let mut rows = vec![[
            "figure".to_string(),
            format!("BASE {base_name}"),
            format!("NEW {new_name}"),
            "change".to_string(),
            String::new(),
        ]];
        for r in &self.figures {
            // "worse" only where the change shows at the table's precision.
            let shows = r.change.is_some_and(|c| (c * 10.0).round() != 0.0);
            let flag = match (r.regression, r.worse && shows) {
                (true, _) => "WORSE",
                (false, true) => "worse",
                _ if r.base.is_none() || r.new.is_none() => "absent",
                _ => "",
            };
            rows.push([
                r.label.to_string(),
                r.value_text(r.base),
                r.value_text(r.new),
                r.change_text(),
                flag.to_string(),
            ]);
        }
        let widths: Vec<usize> = (0..5)
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for r in &rows {
            let line: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
        }
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        let max = self.max_regression_percent;
        if !self.incomplete.is_empty() {
            for r in &self.incomplete {
                out.push_str(&format!(
                    "INCOMPLETE ({}, exit bit {}): {}\n",
                    r.gap.name(),
                    r.exit_bit,
                    r.text
                ));
            }
            out.push_str(&format!(
                "INCOMPLETE: NEW is not a whole run, so its figures are shown but not judged (exit {})\n",
                self.exit_code
            ));
        } else if self.regressions.is_empty() {
            out.push_str(&format!("OK: no figure got worse by more than {max} %\n"));
        } else {
            let worse: Vec<String> = self
                .figures
                .iter()
                .filter(|r| r.regression)
                .map(|r| format!("{} ({})", r.label, r.change_text()))
                .collect();
            out.push_str(&format!(
                "REGRESSION: {} got worse by more than {max} %: {}\n",
                if worse.len() == 1 {
                    "1 figure"
                } else {
                    "figures"
                },
                worse.join(", ")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(pod: Value) -> Value {
        json!({"event.name": "gpu.run.report", "price_per_gpu_hour": 3.5, "notes": [],
               "gpus": [{"name": "NVIDIA H200"}], "pod": pod})
    }

    fn base() -> Value {
        report(json!({
            "wall_time_s": 100.0, "energy_j": 70000.0, "cost": 0.1, "utilization_mean": 0.99,
            "sm_activity_mean": 0.95, "tensor_activity_mean": {"any": 0.92},
            "memory_used_peak_bytes": 1194131456u64, "power_capped_s": 100.0,
            "thermal_slowdown_s": 0.0, "hw_slowdown_s": 0.0,
        }))
    }

    #[test]
    fn a_report_against_itself_changes_nothing() {
        let c = compare(
            &base(),
            &base(),
            DEFAULT_MAX_REGRESSION_PERCENT,
            &Tolerances::default(),
        );
        assert!(c.regressions.is_empty());
        assert_eq!(c.figures.len(), 10);
        assert!(c
            .figures
            .iter()
            .all(|r| r.change_percent == Some(0.0) && !r.worse));
        assert!(c
            .table("a", "a")
            .ends_with("OK: no figure got worse by more than 10 %\n"));
    }

    #[test]
    fn each_way_of_getting_worse_and_what_is_not_judged() {
        let mut new = base();
        new["pod"]["tensor_activity_mean"]["any"] = json!(0.01);
        new["pod"]["energy_j"] = json!(76000.0); // +8.6 %: worse, within 10 %
        new["pod"]["utilization_mean"] = json!(1.0); // better
        new["pod"]["thermal_slowdown_s"] = json!(12.0); // 12 % of the base's 100 s
        new["pod"]["sm_activity_mean"] = Value::Null;
        let c = compare(&base(), &new, 10.0, &Tolerances::default());
        assert_eq!(
            c.regressions,
            ["tensor_activity_mean.any", "thermal_slowdown_s"]
        );
        let row = |n: &str| c.figures.iter().find(|r| r.name == n).unwrap();
        let tensor = row("tensor_activity_mean.any");
        assert!((tensor.change_percent.unwrap() - (0.01 - 0.92) / 0.92 * 100.0).abs() < 1e-9);
        let energy = row("energy_j");
        assert!(energy.worse && !energy.regression);
        assert!(!row("utilization_mean").worse);
        assert_eq!(row("thermal_slowdown_s").change_percent, Some(12.0));
        assert_eq!(row("sm_activity_mean").change_percent, None);
        assert!(!row("sm_activity_mean").worse);
        let table = c.table("base.json", "new.json");
        assert!(table.contains("tensor activity (mean)"), "{table}");
        assert!(
            table.contains("REGRESSION: figures got worse by more than 10 %: tensor activity (mean) (-98.9 %), thermal slowdown time (+12.0 %)"),
            "{table}"
        );
        // Both pass a 99 % threshold.
        assert_eq!(
            compare(&base(), &new, 99.0, &Tolerances::default()).regressions,
            Vec::<&str>::new()
        );
    }

    /// Two runs of the same recording: their costs differ in the sixth digit. Rounded to 4
    /// decimals (0.0097 and 0.0098) that read +1.0 % "worse"; at full precision it is +0.0 %,
    /// not flagged.
    #[test]
    fn figures_are_compared_at_full_precision() {
        let mut b = base();
        b["pod"]["cost"] = json!(0.00974999);
        let mut n = base();
        n["pod"]["cost"] = json!(0.00975001);
        let c = compare(&b, &n, 10.0, &Tolerances::default());
        let cost = c.figures.iter().find(|r| r.name == "cost").unwrap();
        assert!(cost.change_percent.unwrap() < 0.001, "{cost:?}");
        let table = c.table("a", "b");
        let line = table.lines().find(|l| l.starts_with("cost")).unwrap();
        assert!(line.ends_with("+0.0 %"), "{line}");
        assert_eq!(c.exit_code, 0);
    }

    /// NEW not whole: each gap's bit in the exit code, figures shown but not judged (the
    /// lost run's energy -77 % is not an improvement, its tensor activity drop not a
    /// regression); an energy counter that disagrees with power leaves energy unjudged.
    #[test]
    fn a_run_that_is_not_whole_is_not_judged() {
        let b = base();
        let mut n = base();
        n["gpus"] = json!([{"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200",
                            "samples_taken": 3, "samples_missed": 6, "samples_lost": 6,
                            "lost_at_s": 3.0, "xid_count": {"79": 1}}]);
        n["pod"]["samples_taken"] = json!(3);
        n["pod"]["samples_missed"] = json!(6);
        n["pod"]["energy_j"] = json!(16000.0);
        n["pod"]["tensor_activity_mean"]["any"] = json!(0.01);
        let c = compare(&b, &n, 10.0, &Tolerances::default());
        let gaps: Vec<u8> = c.incomplete.iter().map(|r| r.exit_bit).collect();
        assert_eq!(gaps, [4, 8, 16]);
        assert_eq!(c.exit_code, 28);
        assert!(c.regressions.is_empty());
        assert!(c.figures.iter().all(|r| r.change_percent.is_none()));
        let table = c.table("base.json", "lost.json");
        assert!(
            table.contains("INCOMPLETE (gpus, exit bit 4): GPU 0 (GPU-a, NVIDIA H200) was lost 3 s into the run"),
            "{table}"
        );
        assert!(
            table.ends_with("figures are shown but not judged (exit 28)\n"),
            "{table}"
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["incomplete"][1]["gap"], "samples");
        assert_eq!(json["exit_code"], 28);
        // Whole, but its energy counter froze: energy not judged, said in a note.
        let mut frozen = base();
        frozen["pod"]["energy_j"] = json!(0.0);
        frozen["pod"]["energy_counter_agrees"] = json!(false);
        let c = compare(&b, &frozen, 10.0, &Tolerances::default());
        let energy = c.figures.iter().find(|r| r.name == "energy_j").unwrap();
        assert_eq!(energy.change_percent, None);
        assert!(
            c.notes
                .iter()
                .any(|n| n.starts_with("energy not judged: the energy counter of NEW")),
            "{:?}",
            c.notes
        );
        assert!(c.table("a", "b").contains("not judged"));
        assert_eq!(c.exit_code, 0);
    }

    /// A job without tensor math: tensor activity 0.0004 then 0.0003 is -25 % of nothing, not
    /// a regression (below RATIO_FLOOR); a drop of 2 points is. A figure NEW lacks is said.
    #[test]
    fn ratios_need_a_point_and_a_missing_figure_is_said() {
        let mut b = base();
        b["pod"]["tensor_activity_mean"]["any"] = json!(0.0004);
        let mut n = base();
        n["pod"]["tensor_activity_mean"]["any"] = json!(0.0003);
        n["pod"]["sm_activity_mean"] = Value::Null;
        let c = compare(&b, &n, 10.0, &Tolerances::default());
        let tensor = c
            .figures
            .iter()
            .find(|r| r.name == "tensor_activity_mean.any")
            .unwrap();
        assert!(tensor.worse && !tensor.regression, "{tensor:?}");
        assert_eq!(c.exit_code, 0);
        assert!(
            c.notes.contains(
                &"NEW lacks figures BASE has, not judged: SM activity (mean)".to_string()
            ),
            "{:?}",
            c.notes
        );
        n["pod"]["utilization_mean"] = json!(0.97);
        n["pod"]["sm_activity_mean"] = json!(0.80);
        let c = compare(&b, &n, 10.0, &Tolerances::default());
        assert_eq!(c.regressions, ["sm_activity_mean"]);
        assert_eq!(c.exit_code, 1);
    }

    #[test]
    fn from_zero_is_infinite_and_notes_say_what_differs() {
        let mut b = base();
        b["pod"]["wall_time_s"] = json!(0.0);
        let mut n = b.clone();
        n["pod"]["hw_slowdown_s"] = json!(0.5);
        n["gpus"] = json!([{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}]);
        let c = compare(&b, &n, 10.0, &Tolerances::default());
        let hw = c
            .figures
            .iter()
            .find(|r| r.name == "hw_slowdown_s")
            .unwrap();
        assert!(hw.from_zero && hw.regression && hw.change_percent.is_none());
        assert_eq!(
            c.notes,
            ["the runs differ in GPUs: BASE has 1 GPU (NVIDIA H200), NEW has 2 GPUs (NVIDIA H200)"]
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["regressions"], json!(["hw_slowdown_s"]));
        assert_eq!(json["figures"][0]["name"], "wall_time_s");
    }
}
