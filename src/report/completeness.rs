//! Whether a run report covers a whole run: what `compare` judges before it judges any
//! figure ([`judge`]). A run whose GPU fell off the bus 3 s in used less energy and ran no
//! slower; read as figures it is an improvement. So `compare` first asks of NEW:
//!
//! | gap | exit bit | NEW is not whole when |
//! | --- | --- | --- |
//! | [`Gap::Gpus`] | 4 | a GPU was lost during the run (`samples_lost`), or it has fewer GPUs than BASE |
//! | [`Gap::Samples`] | 8 | more than `--max-missed` percent of its samples were missed (`samples_missed` over taken + missed; default [`DEFAULT_MAX_MISSED_PERCENT`]) |
//! | [`Gap::Errors`] | 16 | the driver reported an XID (`xid_count`) or uncorrected ECC errors (`ecc_uncorrected_errors`) on one of its GPUs |
//! | [`Gap::Events`] | 32 | events (alerts, XIDs, ECC errors) were dropped before the collector took them (`events_undelivered`) |
//! | [`Gap::Short`] | 64 | its wall time is under `--min-wall-time` percent of BASE's (default [`DEFAULT_MIN_WALL_TIME_PERCENT`]) |
//!
//! Each gap found is one printed reason, and its bit is set in the exit code (as `fsck` does),
//! so a script can test for any of them: 4 + 8 = 12 for a lost GPU that missed samples. The
//! same gaps found in BASE are notes: a comparison with a broken base says little, but the
//! verdict is NEW's. Corrected ECC errors are a note too (no data was lost).
//!
//! Reports written by agents without a field (`samples_lost`, `ecc_uncorrected_errors`,
//! `events_undelivered`) read as not having the gap: absent is not proof of a gap.

use serde::Serialize;
use serde_json::Value;

/// Default `--max-missed`: percent of a run's samples that may be missed (an NVML call that
/// failed once, a queue that dropped a tick) before the run is not whole.
pub const DEFAULT_MAX_MISSED_PERCENT: f64 = 1.0;

/// Default `--min-wall-time`: NEW shorter than this percent of BASE's wall time did not run
/// the same work.
pub const DEFAULT_MIN_WALL_TIME_PERCENT: f64 = 50.0;

/// What a run can lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Gap {
    /// A GPU lost during the run, or fewer GPUs than BASE.
    Gpus,
    /// Samples missed past the tolerance.
    Samples,
    /// XIDs or uncorrected ECC errors.
    Errors,
    /// Events dropped before the collector took them.
    Events,
    /// Much shorter than BASE.
    Short,
}

impl Gap {
    /// Every gap, in the order they are judged and printed.
    pub const ALL: [Gap; 5] = [
        Gap::Gpus,
        Gap::Samples,
        Gap::Errors,
        Gap::Events,
        Gap::Short,
    ];

    /// Its bit in `compare`'s exit code (1 is a regression, 2 bad input).
    pub fn exit_bit(self) -> u8 {
        match self {
            Gap::Gpus => 4,
            Gap::Samples => 8,
            Gap::Errors => 16,
            Gap::Events => 32,
            Gap::Short => 64,
        }
    }

    /// Its name in the table and in `--json`.
    pub fn name(self) -> &'static str {
        match self {
            Gap::Gpus => "gpus",
            Gap::Samples => "samples",
            Gap::Errors => "errors",
            Gap::Events => "events",
            Gap::Short => "short",
        }
    }
}

/// One reason a run is not whole.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reason {
    /// Which gap.
    pub gap: Gap,
    /// Its exit bit ([`Gap::exit_bit`]).
    pub exit_bit: u8,
    /// What was found, naming the GPUs and the counts.
    pub text: String,
}

/// What `compare` tolerates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerances {
    /// Percent of samples that may be missed.
    pub max_missed_percent: f64,
    /// NEW's wall time must be at least this percent of BASE's.
    pub min_wall_time_percent: f64,
}

impl Default for Tolerances {
    fn default() -> Self {
        Self {
            max_missed_percent: DEFAULT_MAX_MISSED_PERCENT,
            min_wall_time_percent: DEFAULT_MIN_WALL_TIME_PERCENT,
        }
    }
}

fn gpus(report: &Value) -> &[Value] {
    report["gpus"].as_array().map_or(&[], Vec::as_slice)
}

fn count(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// `GPU 0 (GPU-0c1d…, NVIDIA H200)`: nvidia-smi's index, the UUID, the model.
pub fn gpu_label(g: &Value) -> String {
    let index = g["index"].as_u64().map_or("?".into(), |i| i.to_string());
    let uuid = g["uuid"].as_str().unwrap_or("?");
    match g["name"].as_str() {
        Some(n) => format!("GPU {index} ({uuid}, {n})"),
        None => format!("GPU {index} ({uuid})"),
    }
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64 * 100.0
    }
}

fn plural(n: u64, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// The gaps of `new` (a run report's JSON), against `base` where a gap is relative to it (GPU
/// count, wall time), in [`Gap::ALL`] order; empty when `new` is whole.
pub fn judge(base: &Value, new: &Value, t: &Tolerances) -> Vec<Reason> {
    let mut out = Vec::new();
    let mut push = |gap: Gap, text: String| {
        out.push(Reason {
            gap,
            exit_bit: gap.exit_bit(),
            text,
        })
    };
    // GPUs lost, or fewer of them.
    let mut lost = Vec::new();
    for g in gpus(new) {
        let n = count(g, "samples_lost");
        if n > 0 {
            let when = g["lost_at_s"]
                .as_f64()
                .map_or(String::new(), |s| format!(" {} into the run", secs(s)));
            lost.push(format!(
                "{} was lost{when} ({} it did not answer)",
                gpu_label(g),
                plural(n, "sample")
            ));
        }
    }
    let (nb, nn) = (gpus(base).len(), gpus(new).len());
    if nn < nb {
        lost.push(format!(
            "NEW has {}, BASE {}",
            plural(nn as u64, "GPU"),
            plural(nb as u64, "GPU")
        ));
    }
    if !lost.is_empty() {
        push(Gap::Gpus, lost.join("; "));
    }
    // Samples missed.
    let (taken, missed) = (
        count(&new["pod"], "samples_taken"),
        count(&new["pod"], "samples_missed"),
    );
    let share = percent(missed, taken + missed);
    if missed > 0 && share > t.max_missed_percent {
        let per_gpu: Vec<String> = gpus(new)
            .iter()
            .filter(|g| count(g, "samples_missed") > 0)
            .map(|g| {
                let (tk, ms) = (count(g, "samples_taken"), count(g, "samples_missed"));
                format!("{} missed {ms} of {}", gpu_label(g), tk + ms)
            })
            .collect();
        push(
            Gap::Samples,
            format!(
                "{missed} of {} samples missed ({share:.1} %, more than the {} % tolerated: --max-missed): {}",
                taken + missed,
                t.max_missed_percent,
                per_gpu.join("; ")
            ),
        );
    }
    // XIDs and uncorrected ECC errors.
    let mut errors = Vec::new();
    for g in gpus(new) {
        if let Some(xids) = g["xid_count"].as_object().filter(|m| !m.is_empty()) {
            let codes: Vec<String> = xids
                .iter()
                .map(|(code, n)| format!("XID {code} x{}", n.as_u64().unwrap_or(0)))
                .collect();
            errors.push(format!("{}: {}", gpu_label(g), codes.join(", ")));
        }
        let ecc = count(g, "ecc_uncorrected_errors");
        if ecc > 0 {
            errors.push(format!(
                "{}: {}",
                gpu_label(g),
                plural(ecc, "uncorrected ECC error")
            ));
        }
    }
    if !errors.is_empty() {
        push(
            Gap::Errors,
            format!(
                "the driver reported errors during the run: {}",
                errors.join("; ")
            ),
        );
    }
    // Events lost on the way.
    let undelivered = count(new, "events_undelivered");
    if undelivered > 0 {
        push(
            Gap::Events,
            format!(
                "{} dropped before the collector took them (gpu_sidecar.events.dropped: the queue full during an outage, or refused for good)",
                if undelivered == 1 {
                    "1 event was".to_string()
                } else {
                    format!("{undelivered} events were")
                }
            ),
        );
    }
    // Much shorter.
    let (wb, wn) = (
        base["pod"]["wall_time_s"].as_f64(),
        new["pod"]["wall_time_s"].as_f64(),
    );
    if let (Some(wb), Some(wn)) = (wb.filter(|w| *w > 0.0), wn) {
        let share = wn / wb * 100.0;
        if share < t.min_wall_time_percent {
            push(
                Gap::Short,
                format!(
                    "NEW ran {}, {share:.0} % of BASE's {} (less than the {} % required: --min-wall-time)",
                    secs(wn),
                    secs(wb),
                    t.min_wall_time_percent
                ),
            );
        }
    }
    out
}

/// Notes about `report` that are not gaps: corrected ECC errors, events past the report's
/// own bound (kept out of its list, but delivered).
pub fn notes(who: &str, report: &Value) -> Vec<String> {
    let mut notes = Vec::new();
    for g in gpus(report) {
        let n = count(g, "ecc_corrected_errors");
        if n > 0 {
            notes.push(format!(
                "{who}: {} had {} (no data lost; many of them mean failing memory)",
                gpu_label(g),
                plural(n, "corrected ECC error")
            ));
        }
    }
    let kept_out = count(report, "events_dropped");
    if kept_out > 0 {
        notes.push(format!(
            "{who}: {kept_out} events past the report's bound were not kept in its list (they were sent)"
        ));
    }
    notes
}

fn secs(s: f64) -> String {
    super::figures::duration(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn report(gpus: Value, pod: Value) -> Value {
        json!({"event.name": "gpu.run.report", "events_undelivered": 0, "events_dropped": 0,
               "gpus": gpus, "pod": pod})
    }

    fn h200(taken: u64, missed: u64, lost: u64) -> Value {
        json!({"index": 0, "uuid": "GPU-a", "name": "NVIDIA H200", "samples_taken": taken,
               "samples_missed": missed, "samples_lost": lost,
               "lost_at_s": if lost > 0 { json!(3.0) } else { Value::Null },
               "xid_count": {}, "ecc_uncorrected_errors": 0, "ecc_corrected_errors": 0})
    }

    fn pod(taken: u64, missed: u64, wall: f64) -> Value {
        json!({"samples_taken": taken, "samples_missed": missed, "wall_time_s": wall})
    }

    #[test]
    fn a_whole_run_has_no_gap_and_each_gap_has_its_bit() {
        let base = report(json!([h200(10, 0, 0)]), pod(10, 0, 9.0));
        assert!(judge(&base, &base, &Tolerances::default()).is_empty());
        // The broken run: the GPU lost 3 s in, 6 of 9 samples missed.
        let lost = report(json!([h200(3, 6, 6)]), pod(3, 6, 9.0));
        let r = judge(&base, &lost, &Tolerances::default());
        let gaps: Vec<(Gap, u8)> = r.iter().map(|r| (r.gap, r.exit_bit)).collect();
        assert_eq!(gaps, [(Gap::Gpus, 4), (Gap::Samples, 8)]);
        assert_eq!(
            r[0].text,
            "GPU 0 (GPU-a, NVIDIA H200) was lost 3 s into the run (6 samples it did not answer)"
        );
        assert!(
            r[1].text.starts_with("6 of 9 samples missed (66.7 %"),
            "{}",
            r[1].text
        );
        // Errors, events, a short run, fewer GPUs.
        let mut bad = report(json!([h200(10, 0, 0)]), pod(10, 0, 2.0));
        bad["gpus"][0]["xid_count"] = json!({"79": 1});
        bad["gpus"][0]["ecc_uncorrected_errors"] = json!(2);
        bad["events_undelivered"] = json!(3);
        let two = report(json!([h200(10, 0, 0), h200(10, 0, 0)]), pod(20, 0, 9.0));
        let r = judge(&two, &bad, &Tolerances::default());
        let gaps: Vec<Gap> = r.iter().map(|r| r.gap).collect();
        assert_eq!(gaps, [Gap::Gpus, Gap::Errors, Gap::Events, Gap::Short]);
        assert_eq!(r[0].text, "NEW has 1 GPU, BASE 2 GPUs");
        assert_eq!(
            r[1].text,
            "the driver reported errors during the run: GPU 0 (GPU-a, NVIDIA H200): XID 79 x1; GPU 0 (GPU-a, NVIDIA H200): 2 uncorrected ECC errors"
        );
        assert!(
            r[2].text.starts_with("3 events were dropped"),
            "{}",
            r[2].text
        );
        assert!(
            r[3].text.starts_with("NEW ran 2 s, 22 % of BASE's 9 s"),
            "{}",
            r[3].text
        );
    }

    #[test]
    fn tolerances_and_old_reports() {
        let base = report(json!([h200(100, 0, 0)]), pod(100, 0, 100.0));
        // One miss in 100: within the default 1 %.
        let one = report(json!([h200(99, 1, 0)]), pod(99, 1, 60.0));
        assert!(judge(&base, &one, &Tolerances::default()).is_empty());
        let strict = Tolerances {
            max_missed_percent: 0.0,
            min_wall_time_percent: 61.0,
        };
        let gaps: Vec<Gap> = judge(&base, &one, &strict).iter().map(|r| r.gap).collect();
        assert_eq!(gaps, [Gap::Samples, Gap::Short]);
        // A run that never sampled a GPU (NVML never answered): not "no regression".
        let none = report(json!([]), pod(0, 0, 100.0));
        let r = judge(&base, &none, &Tolerances::default());
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            (r[0].gap, r[0].text.as_str()),
            (Gap::Gpus, "NEW has 0 GPUs, BASE 1 GPU")
        );
        // A report of an agent that wrote none of the new fields: no gap claimed.
        let old = json!({"event.name": "gpu.run.report", "gpus": [{"index": 0, "uuid": "GPU-a"}],
                         "pod": {"samples_taken": 100, "samples_missed": 0, "wall_time_s": 100.0}});
        assert!(judge(&old, &old, &Tolerances::default()).is_empty());
    }
}
