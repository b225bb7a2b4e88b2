//! The local sample log: one row per GPU per sample, CSV or JSON Lines, to a file or stdout
//! (`GPU_SIDECAR_SAMPLE_LOG`, `_FORMAT`, `_MAX_BYTES`). For runs without a collector: the
//! file opens in a spreadsheet (CSV) or a notebook (`pandas.read_csv`, `read_json(lines=True)`).
//!
//! Columns, in this order ([`COLUMNS`]); a value NVML did not give is an empty CSV field or
//! JSON `null`, never 0:
//!
//! | column | unit | source |
//! | --- | --- | --- |
//! | `timestamp` | RFC 3339 UTC, ms | the tick's wall-clock time |
//! | `gpu_index` | | NVML's node-wide index, as `nvidia-smi` numbers GPUs (not the training process's `cuda:N`; match by `gpu_uuid`) |
//! | `gpu_uuid` | | `nvmlDeviceGetUUID` |
//! | `utilization_gpu_percent` | % | `nvmlDeviceGetUtilizationRates.gpu` |
//! | `memory_used_mib` | MiB (floor) | `nvmlDeviceGetMemoryInfo_v2.used` (reserved memory not included; v1 on older drivers, reserved included) |
//! | `memory_total_mib` | MiB (floor) | `nvmlDeviceGetMemoryInfo_v2.total` |
//! | `temperature_gpu_c` | °C | `nvmlDeviceGetTemperature(GPU)` |
//! | `power_w` | W (mW resolution) | `nvmlDeviceGetPowerUsage` |
//! | `clock_sm_mhz` | MHz | `nvmlDeviceGetClockInfo(SM)` |
//! | `clocks_event_reasons` | | active clock-event (throttle) reasons, names of [`CLOCKS_EVENT_REASONS`](clocks_event_reasons::CLOCKS_EVENT_REASONS) joined by `\|`; `none` when no reason is active; an unnamed bit as hex |
//! | `power_limit_w` | W | `nvmlDeviceGetEnforcedPowerLimit` |
//! | `sm_activity_percent` | % (0.01) | GPM `NVML_GPM_METRIC_SM_UTIL`, on the rows of the ticks that read a GPM window (`GPU_SIDECAR_GPM_INTERVAL`), else empty |
//! | `tensor_activity_percent` | % (0.01) | GPM `NVML_GPM_METRIC_ANY_TENSOR_UTIL`, as `sm_activity_percent` |
//!
//! One row per GPU per tick of `GPU_SIDECAR_SAMPLE_INTERVAL`. The final sample taken at
//! shutdown is written only if it comes at least half a sample interval after the previous
//! row: right after a tick it would be a near-copy of the last row, a few milliseconds later.
//!
//! Each sample's rows are written with one `write` and flushed. A file is appended to (a
//! restarted agent continues it; CSV gets its header only when the file is empty) and is
//! rotated before it would grow past the size limit: renamed to `<path>.1` (replacing the
//! previous one) and started anew with a header. Only regular files rotate.
//!
//! A write that fails (disk full, read-only file system, a directory missing) is logged once
//! as an error; the rows of that sample are dropped (a partly written sample is cut back off
//! the file), the file is reopened at the next sample, and when it works again one line says
//! how many rows were lost. Metrics export is unaffected: the log has its own thread.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::catalogue::clocks_event_reasons;
use crate::config::{OutputTarget, SampleLogConfig, SampleLogFormat};
use crate::rules::profiling::percent;
use crate::sampling::consumer::{Consumer, ConsumerThread};
use crate::sampling::{DeviceSample, GpmMetrics, GroupDuration, Hub, Interest, Snapshot, Timing};

/// The columns, in order (the CSV header; the JSON keys).
pub const COLUMNS: [&str; 13] = [
    "timestamp",
    "gpu_index",
    "gpu_uuid",
    "utilization_gpu_percent",
    "memory_used_mib",
    "memory_total_mib",
    "temperature_gpu_c",
    "power_w",
    "clock_sm_mhz",
    "clocks_event_reasons",
    "power_limit_w",
    "sm_activity_percent",
    "tensor_activity_percent",
];

/// One row: one GPU at one tick. Field names are [`COLUMNS`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row<'a> {
    /// RFC 3339 UTC with milliseconds, e.g. `2026-11-30T12:00:00.250Z`.
    pub timestamp: String,
    /// NVML index.
    pub gpu_index: u32,
    /// GPU or MIG UUID.
    pub gpu_uuid: &'a str,
    /// GPU utilization, %.
    pub utilization_gpu_percent: Option<u32>,
    /// Memory used, MiB (rounded down).
    pub memory_used_mib: Option<u64>,
    /// Memory total, MiB (rounded down).
    pub memory_total_mib: Option<u64>,
    /// GPU temperature, °C.
    pub temperature_gpu_c: Option<u32>,
    /// Power draw, W.
    pub power_w: Option<f64>,
    /// SM clock, MHz.
    pub clock_sm_mhz: Option<u32>,
    /// Active clock-event reasons (see the module docs).
    pub clocks_event_reasons: Option<String>,
    /// Enforced power limit, W.
    pub power_limit_w: Option<f64>,
    /// GPM SM activity of the window read at this tick, %.
    pub sm_activity_percent: Option<f64>,
    /// GPM tensor activity (any tensor op) of that window, %.
    pub tensor_activity_percent: Option<f64>,
}

/// Names of the set bits of a clock-event reasons mask, joined by `|`; `none` for 0.
pub fn reason_names(mask: u64) -> String {
    if mask == 0 {
        return "none".into();
    }
    let mut names: Vec<String> = clocks_event_reasons::values(mask)
        .into_iter()
        .map(String::from)
        .collect();
    let known = clocks_event_reasons::KNOWN;
    if mask & !known != 0 {
        names.push(format!("{:#x}", mask & !known));
    }
    names.join("|")
}

impl<'a> Row<'a> {
    /// The row of `s` at the snapshot's time `timestamp`.
    pub fn new(timestamp: &str, s: &'a DeviceSample) -> Self {
        Self {
            timestamp: timestamp.to_string(),
            gpu_index: s.info.index,
            gpu_uuid: &s.info.uuid,
            utilization_gpu_percent: s.utilization_gpu_percent,
            memory_used_mib: s.memory_used_mib(),
            memory_total_mib: s.memory_total_mib(),
            temperature_gpu_c: s.temperature_gpu_celsius,
            power_w: s.power_watts(),
            clock_sm_mhz: s.clock_sm_mhz,
            clocks_event_reasons: s.clocks_event_reasons.map(reason_names),
            power_limit_w: s.power_limit_watts(),
            sm_activity_percent: gpm_percent(s, |g| g.sm_util),
            tensor_activity_percent: gpm_percent(s, |g| g.any_tensor_util),
        }
    }
}

/// A GPM reading of `s`, percent held to 0..100, to 0.01 (the sample log's and the page's).
pub(crate) fn gpm_percent(s: &DeviceSample, field: fn(&GpmMetrics) -> Option<f64>) -> Option<f64> {
    percent(s.gpm.as_ref().and_then(field)).map(|p| (p * 100.0).round() / 100.0)
}

/// Encodes the rows of one snapshot (no header).
fn encode(format: SampleLogFormat, snap: &Snapshot) -> io::Result<Vec<u8>> {
    let timestamp = humantime::format_rfc3339_millis(snap.taken_at).to_string();
    let rows = snap.devices.iter().map(|s| Row::new(&timestamp, s));
    match format {
        SampleLogFormat::Csv => {
            let mut w = csv::WriterBuilder::new()
                .has_headers(false)
                .from_writer(Vec::new());
            for row in rows {
                w.serialize(row).map_err(io::Error::other)?;
            }
            w.into_inner().map_err(|e| io::Error::other(e.to_string()))
        }
        SampleLogFormat::Jsonl => {
            let mut out = Vec::new();
            for row in rows {
                serde_json::to_writer(&mut out, &row)?;
                out.push(b'\n');
            }
            Ok(out)
        }
    }
}

/// The CSV header line.
fn header() -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    // Writing to a Vec cannot fail.
    let _ = w.write_record(COLUMNS);
    w.into_inner().unwrap_or_default()
}

enum Sink {
    Stdout,
    File {
        file: File,
        /// Regular file: rotates, and the header depends on its size.
        regular: bool,
    },
}

/// Writes snapshots as rows (the synchronous part; [`SampleLogger`] runs it on a thread).
pub struct SampleLog {
    config: SampleLogConfig,
    /// A sample this close after the last row's is a near-copy ([`Timing::tick_tolerance`]).
    near_copy: Duration,
    sink: Option<Sink>,
    /// Header written to a sink that has no size (stdout, a pipe, a device).
    header_written: bool,
    /// An error was logged and not yet followed by a success.
    failing: bool,
    /// Rows lost since the current failure began.
    rows_lost_now: u64,
    rows_lost_total: u64,
    last_seq: u64,
    rows_dropped_by_queue: u64,
    /// When the sample of the last rows written (or tried) was taken.
    last_row_taken: Option<Instant>,
}

impl SampleLog {
    /// A log with these settings, for a sampler on `timing`; nothing is opened until the
    /// first sample.
    pub fn new(config: SampleLogConfig, timing: &Timing) -> Self {
        Self {
            config,
            near_copy: timing.tick_tolerance,
            sink: None,
            header_written: false,
            failing: false,
            rows_lost_now: 0,
            rows_lost_total: 0,
            last_seq: 0,
            rows_dropped_by_queue: 0,
            last_row_taken: None,
        }
    }

    /// Path of the rotated file: `<path>.1`.
    pub fn rotated_path(path: &Path) -> PathBuf {
        let mut s = path.as_os_str().to_owned();
        s.push(".1");
        PathBuf::from(s)
    }

    /// Rows lost to write errors so far.
    pub fn rows_lost(&self) -> u64 {
        self.rows_lost_total
    }

    /// Snapshots the subscription queue dropped (their rows were never written).
    pub fn snapshots_dropped(&self) -> u64 {
        self.rows_dropped_by_queue
    }

    fn open(&self) -> io::Result<Sink> {
        match &self.config.target {
            OutputTarget::Stdout => Ok(Sink::Stdout),
            OutputTarget::Path(path) => {
                let file = OpenOptions::new().create(true).append(true).open(path)?;
                let regular = file.metadata()?.is_file();
                Ok(Sink::File { file, regular })
            }
        }
    }

    /// Writes one snapshot's rows. Errors are handled here (logged once, rows counted as
    /// lost); this never fails the caller.
    pub fn write(&mut self, snap: &Snapshot) {
        if self.last_seq > 0 && snap.seq > self.last_seq + 1 {
            let gap = snap.seq - self.last_seq - 1;
            if self.rows_dropped_by_queue == 0 {
                tracing::warn!(
                    skipped = gap,
                    "the sample log fell behind (slow disk?): samples were skipped"
                );
            }
            self.rows_dropped_by_queue += gap;
        }
        self.last_seq = self.last_seq.max(snap.seq);
        if snap.devices.is_empty() {
            return;
        }
        if self
            .last_row_taken
            .is_some_and(|t| snap.taken_instant.saturating_duration_since(t) < self.near_copy)
        {
            return;
        }
        self.last_row_taken = Some(snap.taken_instant);
        match self.try_write(snap) {
            Ok(()) => {
                if self.failing {
                    tracing::info!(
                        target = %self.describe(),
                        rows_lost = self.rows_lost_now,
                        "the sample log is written again"
                    );
                    self.failing = false;
                    self.rows_lost_now = 0;
                }
            }
            Err(e) => {
                self.sink = None;
                self.rows_lost_now += snap.devices.len() as u64;
                self.rows_lost_total += snap.devices.len() as u64;
                if !self.failing {
                    self.failing = true;
                    tracing::error!(
                        target = %self.describe(),
                        error = %e,
                        "cannot write the sample log (GPU_SIDECAR_SAMPLE_LOG); rows are dropped until it can be written again; metrics export goes on"
                    );
                }
            }
        }
    }

    fn describe(&self) -> String {
        match &self.config.target {
            OutputTarget::Stdout => "stdout".into(),
            OutputTarget::Path(p) => p.display().to_string(),
        }
    }

    fn try_write(&mut self, snap: &Snapshot) -> io::Result<()> {
        let body = encode(self.config.format, snap)?;
        if self.sink.is_none() {
            self.sink = Some(self.open()?);
        }
        let csv = self.config.format == SampleLogFormat::Csv;
        let (size, regular) = match &self.sink {
            Some(Sink::File {
                file,
                regular: true,
            }) => (Some(file.metadata()?.len()), true),
            _ => (None, false),
        };
        let mut size = size;
        if let (true, Some(s), OutputTarget::Path(path)) = (regular, size, &self.config.target) {
            let first_write = s == 0 || (csv && s <= header().len() as u64);
            if !first_write && s + body.len() as u64 > self.config.max_bytes {
                self.sink = None;
                std::fs::rename(path, Self::rotated_path(path))?;
                self.sink = Some(self.open()?);
                size = Some(0);
                tracing::info!(path = %path.display(), "sample log rotated");
            }
        }
        let needs_header = csv
            && match size {
                Some(s) => s == 0,
                None => !self.header_written,
            };
        let mut bytes = if needs_header { header() } else { Vec::new() };
        bytes.extend_from_slice(&body);
        let result = match self.sink.as_mut() {
            Some(Sink::Stdout) => {
                let mut out = io::stdout().lock();
                out.write_all(&bytes).and_then(|()| out.flush())
            }
            Some(Sink::File { file, .. }) => {
                let r = file.write_all(&bytes).and_then(|()| file.flush());
                if r.is_err() {
                    if let Some(s) = size {
                        // Cut a partly written sample back off (best effort).
                        let _ = file.set_len(s);
                    }
                }
                r
            }
            None => Ok(()),
        };
        result?;
        if needs_header {
            self.header_written = true;
        }
        Ok(())
    }

    /// Logs what was lost over the run, if anything.
    pub fn finish(&mut self) {
        if self.rows_lost_total > 0 || self.rows_dropped_by_queue > 0 {
            tracing::warn!(
                target = %self.describe(),
                rows_lost_to_write_errors = self.rows_lost_total,
                samples_skipped = self.rows_dropped_by_queue,
                "the sample log is incomplete"
            );
        }
    }
}

impl Consumer for SampleLog {
    const INTEREST: Interest = Interest::SNAPSHOTS;

    fn snapshot(&mut self, snapshot: &Arc<Snapshot>, _: &[GroupDuration]) {
        self.write(snapshot);
    }

    fn finish(&mut self) {
        SampleLog::finish(self);
    }
}

/// A [`SampleLog`] on the thread `sample-log`, fed by a hub subscription.
pub struct SampleLogger(ConsumerThread);

impl SampleLogger {
    /// Subscribes to `hub` (queue of [`super::QUEUE_CAPACITY`]) and starts the thread.
    /// Call before the sampler starts.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(config: SampleLogConfig, timing: &Timing, hub: &Arc<Hub>) -> Self {
        Self(ConsumerThread::start(
            "sample-log",
            hub,
            super::QUEUE_CAPACITY,
            SampleLog::new(config, timing),
        ))
    }

    /// Ends the subscription and waits up to `timeout` for the queued samples to be
    /// written. Returns `false` if the bound was hit (a write is stuck; the thread is left
    /// behind).
    pub fn finish(self, timeout: Duration) -> bool {
        self.0.stop(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::{DeviceInfo, DeviceState};
    use std::sync::Arc;
    use std::time::UNIX_EPOCH;

    fn info(index: u32) -> Arc<DeviceInfo> {
        Arc::new(DeviceInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: None,
            serial: None,
            pci_bus_id: None,
            vbios_version: None,
            driver_version: None,
            mig: None,
            gpm_supported: None,
        })
    }

    fn full(index: u32) -> DeviceSample {
        let mut s = DeviceSample::empty(info(index), DeviceState::Ok);
        s.utilization_gpu_percent = Some(99);
        s.memory_used_bytes = Some(1_194_131_456);
        s.memory_total_bytes = Some(150_754_820_096);
        s.temperature_gpu_celsius = Some(58);
        s.power_milliwatts = Some(690_599);
        s.clock_sm_mhz = Some(1455);
        s.clocks_event_reasons = Some(0x4);
        s.power_limit_milliwatts = Some(700_000);
        s.gpm = Some(GpmMetrics {
            sm_util: Some(95.566_519),
            any_tensor_util: Some(100.000_2),
            ..GpmMetrics::default()
        });
        s
    }

    /// Sample `seq`, taken `seq` seconds after a fixed start (wall clock and monotonic).
    fn snap(seq: u64, devices: Vec<DeviceSample>) -> Snapshot {
        snap_at(seq, Duration::from_secs(seq), devices)
    }

    fn snap_at(seq: u64, at: Duration, devices: Vec<DeviceSample>) -> Snapshot {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        Snapshot {
            taken_at: UNIX_EPOCH + Duration::from_millis(1_800_000_000_250) + at,
            taken_instant: *START.get_or_init(Instant::now) + at,
            seq,
            export: true,
            devices,
        }
    }

    /// A 1 s sample interval.
    fn config(path: &Path, format: SampleLogFormat, max_bytes: u64) -> SampleLogConfig {
        SampleLogConfig {
            target: OutputTarget::Path(path.to_owned()),
            format,
            max_bytes,
        }
    }

    fn new_log(config: SampleLogConfig) -> SampleLog {
        SampleLog::new(config, &Timing::every(Duration::from_secs(1)))
    }

    /// Ticks 1 s apart, then the final sample 5 ms after the last tick (SIGTERM right after
    /// it): no row for it; a final sample 600 ms after the last tick gets its row.
    #[test]
    fn a_final_sample_right_after_a_tick_is_not_a_second_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        let mut log = new_log(config(&path, SampleLogFormat::Csv, 1 << 20));
        log.write(&snap(1, vec![full(0)]));
        log.write(&snap(2, vec![full(0)]));
        log.write(&snap_at(3, Duration::from_millis(2005), vec![full(0)]));
        let text = std::fs::read_to_string(&path).unwrap();
        let stamps: Vec<&str> = text.lines().skip(1).map(|l| &l[..24]).collect();
        assert_eq!(
            stamps,
            ["2027-01-15T08:00:01.250Z", "2027-01-15T08:00:02.250Z"],
            "{text}"
        );
        assert_eq!(log.snapshots_dropped(), 0, "not counted as lost");

        let path = dir.path().join("t.csv");
        let mut log = new_log(config(&path, SampleLogFormat::Csv, 1 << 20));
        log.write(&snap(1, vec![full(0)]));
        log.write(&snap_at(2, Duration::from_millis(1600), vec![full(0)]));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text
            .lines()
            .nth(2)
            .unwrap()
            .starts_with("2027-01-15T08:00:01.850Z"));
    }

    #[test]
    fn header_is_the_row_struct_in_order() {
        let mut w = csv::Writer::from_writer(Vec::new());
        let s = full(0);
        w.serialize(Row::new("t", &s)).unwrap();
        let out = String::from_utf8(w.into_inner().unwrap()).unwrap();
        let first = out.lines().next().unwrap();
        assert_eq!(first, COLUMNS.join(","));
        assert_eq!(header(), format!("{first}\n").into_bytes());
    }

    #[test]
    fn reason_names_are_the_catalogue_names() {
        assert_eq!(reason_names(0), "none");
        assert_eq!(reason_names(0x4), "sw_power_cap");
        assert_eq!(reason_names(0x24), "sw_power_cap|sw_thermal_slowdown");
        assert_eq!(reason_names(0x1004), "sw_power_cap|0x1000");
    }

    #[test]
    fn csv_rows_with_absent_fields_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        let mut log = new_log(config(&path, SampleLogFormat::Csv, 1 << 20));
        let mut lost = DeviceSample::empty(info(1), DeviceState::Lost);
        lost.power_milliwatts = None;
        let mut partial = full(2);
        partial.power_milliwatts = None;
        partial.clocks_event_reasons = Some(0);
        log.write(&snap(1, vec![full(0), lost, partial]));
        let mut r = csv::Reader::from_path(&path).unwrap();
        assert_eq!(
            r.headers().unwrap(),
            &csv::StringRecord::from(COLUMNS.to_vec())
        );
        let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[0],
            csv::StringRecord::from(vec![
                "2027-01-15T08:00:01.250Z",
                "0",
                "GPU-0",
                "99",
                "1138",
                "143771",
                "58",
                "690.599",
                "1455",
                "sw_power_cap",
                "700.0",
                "95.57",
                "100.0"
            ])
        );
        assert_eq!(
            rows[1].iter().take(3).collect::<Vec<_>>(),
            ["2027-01-15T08:00:01.250Z", "1", "GPU-1"]
        );
        assert!(rows[1].iter().skip(3).all(str::is_empty), "{:?}", rows[1]);
        assert_eq!(&rows[2][7], "");
        assert_eq!(&rows[2][9], "none");
    }

    #[test]
    fn jsonl_rows_with_absent_fields_null() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut log = new_log(config(&path, SampleLogFormat::Jsonl, 1 << 20));
        log.write(&snap(
            1,
            vec![full(0), DeviceSample::empty(info(1), DeviceState::Ok)],
        ));
        log.write(&snap(2, vec![full(0)]));
        let text = std::fs::read_to_string(&path).unwrap();
        let rows: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 3);
        let keys: Vec<&str> = rows[0]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut columns = COLUMNS.to_vec();
        columns.sort_unstable();
        let mut keys_sorted = keys.clone();
        keys_sorted.sort_unstable();
        assert_eq!(keys_sorted, columns);
        assert_eq!(rows[0]["power_w"], 690.599);
        assert_eq!(rows[0]["memory_total_mib"], 143771);
        assert_eq!(rows[0]["timestamp"], "2027-01-15T08:00:01.250Z");
        assert_eq!(rows[1]["gpu_uuid"], "GPU-1");
        for c in &COLUMNS[3..] {
            assert!(rows[1][*c].is_null(), "{c}: {}", rows[1]);
        }
        assert_eq!(rows[2]["timestamp"], "2027-01-15T08:00:02.250Z");
    }

    #[test]
    fn rotates_to_dot_1_before_passing_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        let max = 1000;
        let mut log = new_log(config(&path, SampleLogFormat::Csv, max));
        for seq in 1..=40 {
            log.write(&snap(seq, vec![full(0), full(1)]));
        }
        let rotated = SampleLog::rotated_path(&path);
        assert_eq!(rotated, dir.path().join("s.csv.1"));
        let mut timestamps = Vec::new();
        for p in [&rotated, &path] {
            let len = std::fs::metadata(p).unwrap().len();
            assert!(len <= max, "{} is {len} bytes", p.display());
            let mut r = csv::Reader::from_path(p).unwrap();
            assert_eq!(
                r.headers().unwrap(),
                &csv::StringRecord::from(COLUMNS.to_vec())
            );
            for row in r.records() {
                timestamps.push(row.unwrap()[0].to_string());
            }
        }
        // One rotated file is kept: the newest rows, in order, ending with the last sample.
        assert!(timestamps.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(timestamps.last().unwrap(), "2027-01-15T08:00:40.250Z");
        assert!(timestamps.len() < 80 && timestamps.len() >= 2 * 8);
        assert_eq!(log.rows_lost(), 0);
    }

    #[test]
    fn appends_to_an_existing_file_without_a_second_header() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        new_log(config(&path, SampleLogFormat::Csv, 1 << 20)).write(&snap(1, vec![full(0)]));
        new_log(config(&path, SampleLogFormat::Csv, 1 << 20)).write(&snap(1, vec![full(0)]));
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert_eq!(text.matches("timestamp").count(), 1);
    }

    #[test]
    fn a_write_error_drops_rows_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("later");
        let path = sub.join("s.csv");
        let mut log = new_log(config(&path, SampleLogFormat::Csv, 1 << 20));
        log.write(&snap(1, vec![full(0), full(1)]));
        log.write(&snap(2, vec![full(0), full(1)]));
        assert_eq!(log.rows_lost(), 4);
        std::fs::create_dir(&sub).unwrap();
        log.write(&snap(3, vec![full(0), full(1)]));
        let mut r = csv::Reader::from_path(&path).unwrap();
        let rows: Vec<_> = r.records().map(Result::unwrap).collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(&rows[0][0], "2027-01-15T08:00:03.250Z");
        assert_eq!(log.rows_lost(), 4);
    }

    #[test]
    fn a_full_disk_is_an_error_not_a_panic() {
        let mut log = new_log(config(Path::new("/dev/full"), SampleLogFormat::Jsonl, 10));
        for seq in 1..=3 {
            log.write(&snap(seq, vec![full(0)]));
        }
        assert_eq!(log.rows_lost(), 3);
    }

    #[test]
    fn queue_drops_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = new_log(config(
            &dir.path().join("s.csv"),
            SampleLogFormat::Csv,
            1 << 20,
        ));
        log.write(&snap(1, vec![full(0)]));
        log.write(&snap(4, vec![full(0)]));
        assert_eq!(log.snapshots_dropped(), 2);
    }
}
