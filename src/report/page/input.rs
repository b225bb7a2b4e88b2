//! Reading a sample log (`GPU_SIDECAR_SAMPLE_LOG`, CSV or JSON Lines: the first character
//! tells) into [`Curves`], in one pass and bounded memory whatever its length. Columns are
//! found by name, so a log written before a column existed still reads (that series is then
//! absent). Rows outside the report's time (a log continued from an earlier run) and rows of
//! GPUs the report does not list are left out and counted; a row that cannot be read is
//! skipped and counted (a truncated last line, when the agent was killed mid-write).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::time::SystemTime;

use serde::Deserialize;

use super::curves::{reasons_mask, Curves, Point};
use crate::report::read::InputError;

/// One row, as the sample log writes it ([`crate::report::sample_log::COLUMNS`]); a column
/// the file lacks reads as absent.
#[derive(Debug, Deserialize)]
struct LogRow {
    timestamp: String,
    gpu_uuid: String,
    #[serde(default)]
    utilization_gpu_percent: Option<f64>,
    #[serde(default)]
    sm_activity_percent: Option<f64>,
    #[serde(default)]
    tensor_activity_percent: Option<f64>,
    #[serde(default)]
    memory_used_mib: Option<f64>,
    #[serde(default)]
    memory_total_mib: Option<f64>,
    #[serde(default)]
    power_w: Option<f64>,
    #[serde(default)]
    power_limit_w: Option<f64>,
    #[serde(default)]
    temperature_gpu_c: Option<f64>,
    #[serde(default)]
    clocks_event_reasons: Option<String>,
}

impl LogRow {
    fn point(&self) -> Point {
        Point {
            values: [
                self.utilization_gpu_percent,
                self.sm_activity_percent,
                self.tensor_activity_percent,
                self.memory_used_mib,
                self.memory_total_mib,
                self.power_w,
                self.power_limit_w,
                self.temperature_gpu_c,
            ],
            reasons: self
                .clocks_event_reasons
                .as_deref()
                .filter(|r| !r.is_empty())
                .map(reasons_mask),
        }
    }
}

/// What reading a log gave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Rows added to the curves.
    pub rows: u64,
    /// Rows outside the run's time or of a GPU the report does not list.
    pub outside: u64,
    /// Rows that could not be read (bad timestamp, not CSV/JSON).
    pub unreadable: u64,
}

/// Adds the rows of the sample log at `path` to `curves`: those of the GPUs in `uuids`
/// taken from `start` to `end` (inclusive; the report's `started_at` and `ended_at`).
///
/// # Errors
/// The file cannot be opened or read, or it is not a sample log (no `timestamp` and
/// `gpu_uuid` columns in a CSV header; no row of a JSON Lines file could be read).
pub fn read_samples(
    path: &Path,
    curves: &mut Curves,
    uuids: &[&str],
    start: Option<SystemTime>,
    end: Option<SystemTime>,
) -> Result<ReadStats, InputError> {
    let err = |e: &dyn std::fmt::Display| InputError::new(path, e.to_string());
    let mut reader = BufReader::new(File::open(path).map_err(|e| err(&e))?);
    let first = reader.fill_buf().map_err(|e| err(&e))?.first().copied();
    let mut stats = ReadStats::default();
    let mut add = |row: LogRow, stats: &mut ReadStats| {
        let Ok(at) = humantime::parse_rfc3339(&row.timestamp) else {
            stats.unreadable += 1;
            return;
        };
        let inside = start.is_none_or(|s| at >= s) && end.is_none_or(|e| at <= e);
        if !inside || !uuids.contains(&row.gpu_uuid.as_str()) {
            stats.outside += 1;
            return;
        }
        curves.add(&row.gpu_uuid, at, &row.point());
        stats.rows += 1;
    };
    match first {
        None => {}
        Some(b'{') => {
            for line in reader.lines() {
                let line = line.map_err(|e| err(&e))?;
                if line.trim().is_empty() {
                    continue;
                }
                match serde_json::from_str::<LogRow>(&line) {
                    Ok(row) => add(row, &mut stats),
                    Err(_) => stats.unreadable += 1,
                }
            }
            if stats.rows + stats.outside == 0 && stats.unreadable > 0 {
                return Err(InputError::new(
                    path,
                    "not a sample log: no line is a row with timestamp and gpu_uuid",
                ));
            }
        }
        Some(_) => read_csv(reader, path, &mut stats, &mut add)?,
    }
    Ok(stats)
}

fn read_csv(
    reader: impl Read,
    path: &Path,
    stats: &mut ReadStats,
    add: &mut impl FnMut(LogRow, &mut ReadStats),
) -> Result<(), InputError> {
    let mut csv = csv::ReaderBuilder::new().flexible(true).from_reader(reader);
    let headers = csv
        .headers()
        .map_err(|e| InputError::new(path, e.to_string()))?
        .clone();
    if !["timestamp", "gpu_uuid"]
        .iter()
        .all(|c| headers.iter().any(|h| h == *c))
    {
        return Err(InputError::new(
            path,
            "not a sample log: the CSV header has no timestamp and gpu_uuid columns",
        ));
    }
    for record in csv.records() {
        match record.and_then(|r| r.deserialize::<LogRow>(Some(&headers))) {
            Ok(row) => add(row, stats),
            Err(e) if e.is_io_error() => return Err(InputError::new(path, e.to_string())),
            Err(_) => stats.unreadable += 1,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::page::curves::Extremes;
    use std::time::Duration;

    const HEADER_V1: &str = "timestamp,gpu_index,gpu_uuid,utilization_gpu_percent,memory_used_mib,memory_total_mib,temperature_gpu_c,power_w,clock_sm_mhz,clocks_event_reasons";

    /// A log of the first format (no power limit or GPM columns), a row of an earlier run, a
    /// row of another GPU, a truncated last line: what can be read is, and counted.
    #[test]
    fn csv_of_an_older_agent_and_jsonl_read_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("s.csv");
        std::fs::write(
            &csv,
            format!(
                "{HEADER_V1}\n\
                 2026-12-01T04:40:00.000Z,0,GPU-a,1,1,2,3,4,5,none\n\
                 2026-12-01T04:50:00.834Z,0,GPU-a,99,1138,143771,58,690.599,1455,sw_power_cap\n\
                 2026-12-01T04:50:00.834Z,1,GPU-b,99,1138,143771,58,690.599,1455,sw_power_cap\n\
                 2026-12-01T04:50:01.834Z,0,GPU-a,,,,,,,\n\
                 2026-12-01T04:50:02.8"
            ),
        )
        .unwrap();
        let start = humantime::parse_rfc3339("2026-12-01T04:50:00.834Z").unwrap();
        let end = Some(start + Duration::from_secs(10));
        let mut curves = Curves::new(Some(start), 1.0);
        let stats = read_samples(&csv, &mut curves, &["GPU-a"], Some(start), end).unwrap();
        assert_eq!(
            stats,
            ReadStats {
                rows: 2,
                outside: 2,
                unreadable: 1
            }
        );
        let b = curves.gpu("GPU-a").unwrap();
        assert_eq!(b[0].series[0].unwrap().max, 99.0);
        assert_eq!(b[0].series[3].unwrap().max, 1138.0);
        assert!(b[0].series[1].is_none(), "no GPM column: absent");
        assert_eq!(b[0].reasons, Some(0x4));
        assert!(b[1].series.iter().all(Option::is_none));

        let jsonl = dir.path().join("s.jsonl");
        std::fs::write(&jsonl, "{\"timestamp\":\"2026-12-01T04:50:00.834Z\",\"gpu_index\":0,\"gpu_uuid\":\"GPU-a\",\"utilization_gpu_percent\":99,\"memory_used_mib\":1138,\"memory_total_mib\":143771,\"power_limit_w\":700.0,\"sm_activity_percent\":95.57,\"clocks_event_reasons\":\"sw_power_cap\"}\n").unwrap();
        let mut from_json = Curves::new(Some(start), 1.0);
        read_samples(&jsonl, &mut from_json, &["GPU-a"], Some(start), end).unwrap();
        let j = from_json.gpu("GPU-a").unwrap();
        assert_eq!(j[0].series[0], b[0].series[0]);
        assert_eq!(Extremes::value(j[0].series[1].unwrap().max), 95.57);
        assert_eq!(j[0].series[6].unwrap().max, 700.0);
    }

    #[test]
    fn what_is_not_a_sample_log_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        std::fs::write(&p, "{\"event.name\":\"gpu.run.report\"}\n").unwrap();
        let mut c = Curves::new(None, 1.0);
        let e = read_samples(&p, &mut c, &[], None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("r.json: not a sample log"), "{e}");
        std::fs::write(&p, "a,b\n1,2\n").unwrap();
        let e = read_samples(&p, &mut c, &[], None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no timestamp and gpu_uuid columns"), "{e}");
    }
}
