//! The `report` and `compare` commands: arguments in, files read, one line on stderr and
//! exit code 2 for bad input.
//!
//! ```text
//! gpu-otel-sidecar report REPORT.json [--samples SAMPLE_LOG]... --html OUT.html
//! gpu-otel-sidecar compare BASE.json NEW.json [--max-regression PCT] [--max-missed PCT] [--min-wall-time PCT] [--json]
//! gpu-otel-sidecar merge REPORT.json...
//! ```
//!
//! `report`: 0 when the page was written, 1 when it could not be written, 2 for bad input.
//! `compare`: 0 when NEW is a whole run and no figure got worse past the threshold, 1 when
//! one did, 2 for bad input; when NEW is not a whole run, the sum of the bits of what it
//! lacks ([`super::completeness::Gap::exit_bit`]: 4 a GPU lost or fewer GPUs, 8 samples
//! missed, 16 XIDs or uncorrected ECC errors, 32 events dropped, 64 much shorter than BASE)
//! and its figures are not judged. `merge`: one job report per job on stdout
//! ([`super::job::merge`]), 0; 2 for bad input (a report of no job among them).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lexopt::prelude::*;

use super::compare::{compare, DEFAULT_MAX_REGRESSION_PERCENT};
use super::completeness::Tolerances;
use super::page::{self, curves::MAX_BUCKETS, input::read_samples, Curves, CurvesSource};
use super::read::{load_report, time, InputError};

/// Usage of `report`.
pub const REPORT_USAGE: &str =
    "gpu-otel-sidecar report REPORT.json [--samples SAMPLE_LOG]... --html OUT.html";
/// Usage of `compare`.
pub const COMPARE_USAGE: &str =
    "gpu-otel-sidecar compare BASE.json NEW.json [--max-regression PCT] [--max-missed PCT] [--min-wall-time PCT] [--json]";

/// Usage of `merge`.
pub const MERGE_USAGE: &str = "gpu-otel-sidecar merge REPORT.json...";

/// Bad input: the message (one line) and the exit code 2.
#[derive(Debug, thiserror::Error)]
enum CliError {
    #[error("{0}")]
    Args(String),
    #[error("{0}")]
    Input(#[from] InputError),
}

impl From<lexopt::Error> for CliError {
    fn from(e: lexopt::Error) -> Self {
        CliError::Args(e.to_string())
    }
}

fn fail(command: &str, usage: &str, e: &CliError) -> ExitCode {
    match e {
        CliError::Args(m) => eprintln!("gpu-otel-sidecar {command}: {m} (usage: {usage})"),
        CliError::Input(e) => eprintln!("gpu-otel-sidecar {command}: {e}"),
    }
    ExitCode::from(2)
}

/// `gpu-otel-sidecar report …` with the arguments after `report`.
pub fn report_command(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    match report(args) {
        Ok(Some((out, line))) => match std::fs::write(&out.0, out.1) {
            Ok(()) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "gpu-otel-sidecar report: cannot write {}: {e}",
                    out.0.display()
                );
                ExitCode::FAILURE
            }
        },
        Ok(None) => ExitCode::SUCCESS,
        Err(e) => fail("report", REPORT_USAGE, &e),
    }
}

type Written = ((PathBuf, String), String);

fn report(args: impl IntoIterator<Item = OsString>) -> Result<Option<Written>, CliError> {
    let mut parser = lexopt::Parser::from_args(args);
    let (mut input, mut samples, mut html) = (None, Vec::new(), None);
    while let Some(arg) = parser.next()? {
        match arg {
            Long("samples") => samples.push(PathBuf::from(parser.value()?)),
            Long("html") => html = Some(PathBuf::from(parser.value()?)),
            Short('h') | Long("help") => {
                println!("{REPORT_USAGE}");
                return Ok(None);
            }
            Value(v) if input.is_none() => input = Some(PathBuf::from(v)),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let input = input.ok_or_else(|| CliError::Args("no REPORT.json given".into()))?;
    let html = html.ok_or_else(|| CliError::Args("no --html OUT.html given".into()))?;
    let report = load_report(&input)?;
    let (curves, source) = if samples.is_empty() {
        (None, CurvesSource::None)
    } else {
        let (c, s) = curves_from_logs(&report, &samples)?;
        (Some(c), CurvesSource::SampleLog(s))
    };
    let text = page::render(&report, curves.as_ref(), &source);
    let line = format!(
        "wrote {} ({} KiB): {}",
        html.display(),
        text.len().div_ceil(1024),
        match &source {
            CurvesSource::SampleLog(s) => s.clone(),
            _ => "no curves (no --samples)".into(),
        }
    );
    Ok(Some(((html, text), line)))
}

/// The curves of the report's GPUs from sample logs, buckets wide enough that the run's
/// span fits, and what reading them gave (in words).
fn curves_from_logs(
    report: &serde_json::Value,
    logs: &[PathBuf],
) -> Result<(Curves, String), InputError> {
    let start = time(&report["started_at"]);
    let end = time(&report["ended_at"]);
    let span = start
        .zip(end)
        .and_then(|(s, e)| e.duration_since(s).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    let interval = report["sample_interval_s"].as_f64().unwrap_or(1.0);
    let mut curves = Curves::new(start, interval.max(span / (MAX_BUCKETS - 1) as f64));
    let uuids: Vec<&str> = report["gpus"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["uuid"].as_str())
        .collect();
    let mut said = Vec::new();
    for log in logs {
        let s = read_samples(log, &mut curves, &uuids, start, end)?;
        let mut text = format!("{} rows of {}", s.rows, name(log));
        if s.outside > 0 {
            text += &format!(
                ", {} rows outside this run or of other GPUs left out",
                s.outside
            );
        }
        if s.unreadable > 0 {
            text += &format!(", {} unreadable rows skipped", s.unreadable);
        }
        said.push(text);
    }
    Ok((curves, format!("the sample log: {}", said.join("; "))))
}

fn name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// `gpu-otel-sidecar compare …` with the arguments after `compare`.
pub fn compare_command(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    match compare_run(args) {
        Ok((text, code)) => {
            print!("{text}");
            ExitCode::from(code)
        }
        Err(e) => fail("compare", COMPARE_USAGE, &e),
    }
}

/// A percentage option's value (`10`, `2.5`, `10%`), from 0 (and at most 100 with `cap`).
fn percentage(flag: &str, v: &str, cap: bool) -> Result<f64, CliError> {
    v.trim()
        .trim_end_matches('%')
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|m| m.is_finite() && *m >= 0.0 && (!cap || *m <= 100.0))
        .ok_or_else(|| {
            let range = if cap { "from 0 to 100" } else { "from 0" };
            CliError::Args(format!(
                "{flag} {v:?}: expected a percentage {range}, e.g. 10 or 2.5"
            ))
        })
}

fn compare_run(args: impl IntoIterator<Item = OsString>) -> Result<(String, u8), CliError> {
    let mut parser = lexopt::Parser::from_args(args);
    let (mut files, mut max, mut json) = (Vec::new(), DEFAULT_MAX_REGRESSION_PERCENT, false);
    let mut tolerances = Tolerances::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("max-regression") => {
                let v = parser.value()?.string()?;
                max = percentage("--max-regression", &v, false)?;
            }
            Long("max-missed") => {
                let v = parser.value()?.string()?;
                tolerances.max_missed_percent = percentage("--max-missed", &v, true)?;
            }
            Long("min-wall-time") => {
                let v = parser.value()?.string()?;
                tolerances.min_wall_time_percent = percentage("--min-wall-time", &v, true)?;
            }
            Long("json") => json = true,
            Short('h') | Long("help") => return Ok((format!("{COMPARE_USAGE}\n"), 0)),
            Value(v) if files.len() < 2 => files.push(PathBuf::from(v)),
            _ => return Err(arg.unexpected().into()),
        }
    }
    let [base_path, new_path] = <[PathBuf; 2]>::try_from(files)
        .map_err(|_| CliError::Args("expected two reports, BASE.json and NEW.json".into()))?;
    let base = load_report(&base_path)?;
    let new = load_report(&new_path)?;
    let c = compare(&base, &new, max, &tolerances);
    let text = if json {
        format!("{}\n", serde_json::to_string(&c).unwrap_or_default())
    } else {
        c.table(&name(&base_path), &name(&new_path))
    };
    Ok((text, c.exit_code))
}

/// `gpu-otel-sidecar merge …` with the arguments after `merge`: the run reports of a job's
/// pods (of several jobs, too) added up into one job report per job, one JSON line each.
pub fn merge_command(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    match merge_run(args) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail("merge", MERGE_USAGE, &e),
    }
}

fn merge_run(args: impl IntoIterator<Item = OsString>) -> Result<String, CliError> {
    let mut parser = lexopt::Parser::from_args(args);
    let mut files = Vec::new();
    while let Some(arg) = parser.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(format!("{MERGE_USAGE}\n")),
            Value(v) => files.push(PathBuf::from(v)),
            _ => return Err(arg.unexpected().into()),
        }
    }
    if files.is_empty() {
        return Err(CliError::Args("no REPORT.json given".into()));
    }
    let reports = files
        .iter()
        .map(|f| load_report(f))
        .collect::<Result<Vec<_>, _>>()?;
    let jobs = super::job::merge(&reports).map_err(|(i, why)| InputError::new(&files[i], why))?;
    Ok(jobs.iter().map(|j| format!("{j}\n")).collect::<String>())
}
