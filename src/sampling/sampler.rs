//! The sampler thread `nvml-sampler` ([`Sampler`]): NVML sessions (init with backoff,
//! device listing, the ticks, shutdown), and per session the event watcher thread
//! `nvml-events` ([`super::event_watcher`]). Both publish into the [`Hub`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use super::board::{SamplerBoard, WatcherSlot};
use super::cadence::{Cadence, Due, Timing};
use super::hub::{GroupDuration, Hub};
use super::{event_watcher, read};
use super::{
    Activity, DeviceSample, DeviceState, IoTotals, LibraryAdvice, NvmlDown, NvmlStatus,
    SampleGroup, Snapshot,
};
use crate::config::{Config, DeviceSelection};

/// Settings the sampler needs, taken from [`Config`].
#[derive(Debug, Clone)]
pub struct SamplerSettings {
    /// Library to load.
    pub nvml_library: PathBuf,
    /// The flow's periods, as the agent built them: the tick, the export ticks (the only
    /// ones that read the slow groups, see [`cadence`](super::cadence)), the slow groups'
    /// cadence, the event wait's bound and the init backoff's cap.
    pub timing: Timing,
    /// Devices to sample.
    pub devices: DeviceSelection,
    /// What to advise when the library cannot be loaded.
    pub library_advice: LibraryAdvice,
    /// The proc root (`GPU_SIDECAR_PROC_ROOT`): process names from `<root>/<pid>/comm`
    /// where it shows the host PID namespace.
    pub proc_root: PathBuf,
    /// List the MPS clients (`nvmlDeviceGetMPSComputeRunningProcesses_v3`) every tick and
    /// report them with the compute processes: node mode, where they are pods' processes.
    pub mps_clients: bool,
}

impl SamplerSettings {
    fn read_options(&self) -> read::ReadOptions {
        read::ReadOptions {
            proc_root: self.proc_root.clone(),
            mps_clients: self.mps_clients,
        }
    }
}

/// Work on each snapshot on the sampler thread, after its NVML reads and before it is
/// published: node mode's pod attribution ([`crate::attribution::node`]). It makes no NVML
/// call.
pub trait Annotate: Send {
    /// Adds to `snapshot`; `process_read` says whether this tick read the per-process
    /// utilization (`nvmlDeviceGetProcessUtilization`).
    fn annotate(&mut self, snapshot: &mut Snapshot, process_read: bool);
}

impl SamplerSettings {
    fn cadence(&self) -> Cadence {
        Cadence::new(&self.timing)
    }

    /// The sampler's settings from `c`, on the periods of `timing` (the agent's one
    /// [`Timing`]).
    pub fn new(c: &Config, timing: Timing) -> Self {
        Self {
            nvml_library: c.nvml_library.clone(),
            timing,
            devices: c.devices.clone(),
            library_advice: LibraryAdvice::from_config(c),
            proc_root: c.proc_root.clone(),
            mps_clients: c.node,
        }
    }
}

enum Command {
    /// Take one last sample, shut NVML down, end the thread; all of it by `until`.
    FinalSampleAndStop { until: Instant },
}

/// Handle on the sampler thread.
pub struct Sampler {
    commands: mpsc::Sender<Command>,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

/// Consecutive ticks in which no device answered anything before NVML is initialized again.
pub const SILENT_TICKS_BEFORE_REINIT: u32 = 3;

/// Where the NVML threads write: the bus (snapshots, device events) and the sampler's state
/// board (status, heartbeat, errors, watchers).
#[derive(Clone)]
struct Outlets {
    hub: Arc<Hub>,
    board: Arc<SamplerBoard>,
}

/// Most event watcher threads at once: the current session's and one of an earlier session
/// still inside a driver call. Past it no new watcher is started until one returns (a stuck
/// driver call cannot be interrupted), so stuck threads never pile up.
pub const MAX_EVENT_WATCHERS: usize = 2;

impl Sampler {
    /// Spawns the `nvml-sampler` thread (and, per NVML session, `nvml-events`), publishing
    /// snapshots (with their group durations, each passed through `annotate` first when
    /// given) and device events into `hub`; its status onto `board`.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(
        settings: SamplerSettings,
        hub: Arc<Hub>,
        board: Arc<SamplerBoard>,
        annotate: Option<Box<dyn Annotate>>,
    ) -> Self {
        let out = Outlets { hub, board };
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("nvml-sampler".into())
            .spawn(move || {
                let mut annotate = annotate;
                run(&settings, &out, &rx, &mut annotate);
                let _ = done_tx.send(());
            })
            .expect("spawn nvml-sampler thread");
        Self {
            commands: tx,
            done: done_rx,
            thread: Some(thread),
        }
    }

    /// Asks for one final sample and NVML shutdown, and waits up to `timeout` for it. A
    /// sampler wedged inside a driver call cannot be interrupted: then this returns `false`
    /// after `timeout` and the thread is left behind. The event watcher is given what is
    /// left of `timeout` after the final sample to return from its current wait (at most
    /// [`EVENT_WAIT_MAX`](super::cadence::EVENT_WAIT_MAX)); if it has not, it shuts NVML down itself when it returns (see
    /// [`SamplerBoard::event_watchers_running`]).
    pub fn stop(mut self, timeout: Duration) -> bool {
        let _ = self.commands.send(Command::FinalSampleAndStop {
            until: Instant::now() + timeout,
        });
        match self.done.recv_timeout(timeout) {
            Ok(()) => {
                if let Some(t) = self.thread.take() {
                    let _ = t.join();
                }
                true
            }
            Err(_) => false,
        }
    }
}

/// What ended an NVML session.
enum SessionEnd {
    /// Stop the sampler; with the time by which everything must be done when asked to.
    Stop(Option<Instant>),
    /// NVML is up but the devices could not be listed, or fewer than before: initialize
    /// again after the backoff ([`Timing::init_backoff`]).
    Retry,
    /// No device answered for [`SILENT_TICKS_BEFORE_REINIT`] ticks: re-initialize, and
    /// keep re-initializing until NVML lists as many devices again.
    Silent,
}

/// What one NVML session hands to the next.
#[derive(Default)]
struct Carry {
    /// Ticks since start.
    seq: u64,
    /// Byte counters, by UUID.
    io_totals: HashMap<String, IoTotals>,
    /// After NVML went silent: the device count to list again before sampling resumes.
    relist: Option<usize>,
    /// The device listing's failure was logged (once per outage, until a session samples).
    listing_logged: bool,
    /// The export schedule and the slow groups' last reads.
    cadence: Option<Cadence>,
}

fn run(
    settings: &SamplerSettings,
    out: &Outlets,
    commands: &mpsc::Receiver<Command>,
    annotate: &mut Option<Box<dyn Annotate>>,
) {
    let mut backoff = settings.timing.init_backoff();
    let mut last_down: Option<NvmlDown> = None;
    let mut carry = Carry {
        cadence: Some(settings.cadence()),
        ..Carry::default()
    };
    // Waits for the next attempt; `false` when asked to stop meanwhile.
    let wait = |backoff: &mut dyn Iterator<Item = Duration>| {
        let delay = backoff.next().unwrap_or(settings.timing.init_backoff_cap);
        match commands.recv_timeout(delay) {
            Ok(Command::FinalSampleAndStop { .. }) | Err(RecvTimeoutError::Disconnected) => false,
            Err(RecvTimeoutError::Timeout) => true,
        }
    };
    loop {
        out.board.begin(Activity::Init);
        let init = Nvml::builder()
            .lib_path(settings.nvml_library.as_os_str())
            .init();
        out.board.end();
        match init {
            Ok(nvml) => {
                if last_down.take().is_some() {
                    tracing::info!("NVML is back");
                }
                let nvml = Arc::new(nvml);
                let end = session(&nvml, settings, out, commands, &mut carry, annotate);
                match Arc::try_unwrap(nvml) {
                    Ok(nvml) => {
                        out.board.begin(Activity::Shutdown);
                        let result = nvml.shutdown();
                        out.board.end();
                        match result {
                            Err(e) => {
                                out.board.add_nvml_errors([(("nvmlShutdown", super::nvml_error::error_code(&e)), 1)]);
                                tracing::warn!("nvmlShutdown failed: {e}");
                            }
                            Ok(()) => tracing::debug!("nvmlShutdown done"),
                        }
                    }
                    // The session's event watcher is still inside a wait: it shuts NVML down
                    // when that returns. The next session initializes NVML again meanwhile
                    // (NVML counts its initializations).
                    Err(_) => tracing::debug!(
                        "the event watcher still holds this NVML session; it calls nvmlShutdown when its wait returns"
                    ),
                }
                match end {
                    SessionEnd::Stop(_) => return,
                    // It sampled until NVML went silent: the next attempt at once, then
                    // the backoff from its start.
                    SessionEnd::Silent => {
                        out.hub.clear();
                        backoff = settings.timing.init_backoff();
                    }
                    SessionEnd::Retry => {
                        out.hub.clear();
                        if !wait(&mut backoff) {
                            return;
                        }
                    }
                }
            }
            Err(e) => {
                out.board
                    .add_nvml_errors([(("nvmlInit_v2", super::nvml_error::error_code(&e)), 1)]);
                let down =
                    NvmlDown::classify_init(&e, &settings.nvml_library, &settings.library_advice);
                // Status first: whoever reads the log line and then asks /readyz sees it.
                out.board.set_status(NvmlStatus::Down(down.clone()));
                if last_down.as_ref() != Some(&down) {
                    tracing::error!(
                        "{}; retrying every {}s at most until it answers (this is logged again only if the cause changes)",
                        down.explain(),
                        settings.timing.init_backoff_cap.as_secs_f64()
                    );
                }
                last_down = Some(down);
                if !wait(&mut backoff) {
                    return;
                }
            }
        }
    }
}

/// A running event watcher: dropping `stop` asks it to end (at its next wake-up); `done`
/// says it has.
struct Watcher {
    stop: mpsc::Sender<()>,
    done: mpsc::Receiver<()>,
}

/// Starts the session's event watcher (`nvml-events`) on `targets`, unless there is nothing
/// to watch or [`MAX_EVENT_WATCHERS`] are still running (earlier ones stuck in the driver;
/// said when `say`: the previous session's watcher may simply not have noticed its stop yet,
/// which takes up to one wait). Publishes its heartbeat for the health checks.
fn start_watcher(
    nvml: &Arc<Nvml>,
    targets: &[event_watcher::Target],
    wait: Duration,
    out: &Outlets,
    say: bool,
) -> Option<Watcher> {
    if targets.is_empty() {
        out.board.set_watcher(WatcherSlot::None);
        return None;
    }
    let running = out.board.event_watchers_running();
    if running >= MAX_EVENT_WATCHERS {
        if say {
            tracing::error!(
                stuck = running,
                "XID and ECC events are not watched: {running} event watchers of earlier NVML sessions are still inside a driver call that does not return; a new one starts when one returns"
            );
        }
        out.board.set_watcher(WatcherSlot::Refused);
        return None;
    }
    let beat = Arc::new(event_watcher::Heartbeat::default());
    let (stop_tx, stop_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let (nvml, targets, thread_out, thread_beat) =
        (nvml.clone(), targets.to_vec(), out.clone(), beat.clone());
    out.board.watcher_started();
    let spawned = std::thread::Builder::new()
        .name("nvml-events".into())
        .spawn(move || {
            let Outlets { hub, board } = thread_out;
            let stop = event_watcher::StopSignal(stop_rx);
            let count_error = |call: &'static str, e: &NvmlError| {
                board.add_nvml_errors([((call, super::nvml_error::error_code(e)), 1)]);
            };
            event_watcher::run(
                &nvml,
                &targets,
                &event_watcher::Context {
                    stop: &stop,
                    publish: &|event| hub.publish_event(event),
                    beat: &thread_beat,
                    count_error: &count_error,
                    wait,
                    superseded: &|| board.watcher_superseded(&thread_beat),
                },
            );
            thread_beat.end();
            // The sampler has moved on (or stopped) without this session: last one out
            // shuts NVML down.
            if let Ok(nvml) = Arc::try_unwrap(nvml) {
                match nvml.shutdown() {
                    Ok(()) => tracing::debug!("nvmlShutdown done (by the event watcher)"),
                    Err(e) => {
                        board.add_nvml_errors([(
                            ("nvmlShutdown", super::nvml_error::error_code(&e)),
                            1,
                        )]);
                        tracing::warn!("nvmlShutdown failed: {e}");
                    }
                }
            }
            board.watcher_ended();
            let _ = done_tx.send(());
        });
    match spawned {
        Ok(_) => {
            out.board.set_watcher(WatcherSlot::Started(beat));
            Some(Watcher {
                stop: stop_tx,
                done: done_rx,
            })
        }
        Err(e) => {
            out.board.watcher_ended();
            out.board.set_watcher(WatcherSlot::None);
            tracing::error!(
                "cannot start the nvml-events thread: {e}; XID and ECC events are not watched"
            );
            None
        }
    }
}

fn session(
    nvml: &Arc<Nvml>,
    settings: &SamplerSettings,
    out: &Outlets,
    commands: &mpsc::Receiver<Command>,
    carry: &mut Carry,
    annotate: &mut Option<Box<dyn Annotate>>,
) -> SessionEnd {
    let opened = Instant::now();
    out.board.begin(Activity::Listing);
    let listed = read::Reader::open(
        nvml,
        &settings.devices,
        &carry.io_totals,
        &settings.read_options(),
    );
    out.board.end();
    let mut reader = match listed {
        Ok(mut r) => {
            out.board.add_nvml_errors(r.take_errors());
            r
        }
        Err(e) => {
            out.board.add_nvml_errors([(
                ("nvmlDeviceGetCount_v2", super::nvml_error::error_code(&e)),
                1,
            )]);
            if !std::mem::replace(&mut carry.listing_logged, true) {
                tracing::error!("NVML is up but listing devices failed: {e}; re-initializing until it answers (logged once)");
            }
            out.board
                .set_status(NvmlStatus::Down(NvmlDown::Other(format!(
                    "device listing: {e}"
                ))));
            return SessionEnd::Retry;
        }
    };
    // Reported with the session's first snapshot.
    let listed_in = (SampleGroup::Static, opened.elapsed());
    if let Some(before) = carry.relist {
        if reader.device_count() < before {
            // Still broken: sampling fewer GPUs would hide the others; not ready, try again.
            out.board.set_status(NvmlStatus::Down(NvmlDown::Other(format!(
                "NVML lists {} of the {before} devices it sampled before it stopped answering; re-initializing",
                reader.device_count()
            ))));
            return SessionEnd::Retry;
        }
        tracing::info!(devices = reader.device_count(), "NVML answers again");
        carry.relist = None;
        carry.listing_logged = false;
    } else if std::mem::take(&mut carry.listing_logged) {
        tracing::info!(
            devices = reader.device_count(),
            "NVML lists its devices again"
        );
    }
    out.board.set_status(NvmlStatus::Up {
        devices: reader.device_count(),
    });
    tracing::info!(
        devices = reader.device_count(),
        interval_ms = settings.timing.sample_interval.as_millis() as u64,
        export_interval_ms = settings.timing.export_interval.as_millis() as u64,
        energy_interval_ms = settings.timing.slow_intervals.energy.as_millis() as u64,
        process_interval_ms = settings.timing.slow_intervals.process.as_millis() as u64,
        gpm_interval_ms = settings.timing.slow_intervals.gpm.as_millis() as u64,
        pcie_interval_ms = settings.timing.slow_intervals.pcie.as_millis() as u64,
        "sampling started"
    );
    let mut cadence = carry.cadence.take().unwrap_or_else(|| settings.cadence());
    cadence.new_session();
    let targets = reader.event_targets();
    // One wait per sample interval when nothing happens, and at most EVENT_WAIT_MAX (an
    // event ends a wait at once, whatever its bound).
    let wait = settings.timing.event_wait;
    let mut watcher = start_watcher(nvml, &targets, wait, out, false);
    let mut refused = 0u32;
    let end = ticks(
        &mut reader,
        &mut cadence,
        settings,
        out,
        commands,
        listed_in,
        &mut carry.seq,
        annotate,
        &mut || {
            // Refused at the start (earlier watchers stuck): try again once one returned;
            // said once it has lasted more than a wait (not a watcher finishing its last one).
            if watcher.is_none() && out.board.watcher_refused() {
                refused += 1;
                let say = refused == 2;
                watcher = start_watcher(nvml, &targets, wait, out, say);
            }
        },
    );
    carry.cadence = Some(cadence);
    carry.io_totals = reader.io_totals();
    if matches!(end, SessionEnd::Silent) {
        carry.relist = Some(reader.device_count());
    }
    drop(reader);
    out.board.set_watcher(WatcherSlot::None);
    if let Some(Watcher { stop, done }) = watcher {
        drop(stop);
        // At shutdown only: give the watcher what is left of the sampler's bound to return
        // from its wait (at most EVENT_WAIT_MAX), so that NVML is shut down here. Never when
        // re-initializing: a stuck watcher must not hold the recovery.
        if let SessionEnd::Stop(Some(until)) = end {
            let left = until.saturating_duration_since(Instant::now());
            if done.recv_timeout(left).is_err() {
                tracing::debug!(
                    "the event watcher did not return from its wait in {}; it shuts NVML down when it does",
                    humantime::format_duration(left)
                );
            }
        }
    }
    end
}

/// The sampling loop of one NVML session; `between` runs after each tick.
#[allow(clippy::too_many_arguments)]
fn ticks(
    reader: &mut read::Reader<'_>,
    cadence: &mut Cadence,
    settings: &SamplerSettings,
    out: &Outlets,
    commands: &mpsc::Receiver<Command>,
    listed_in: GroupDuration,
    seq: &mut u64,
    annotate: &mut Option<Box<dyn Annotate>>,
    between: &mut dyn FnMut(),
) -> SessionEnd {
    let mut timings = vec![listed_in];
    let mut sample = |due: Due, seq: &mut u64| {
        *seq += 1;
        out.board.begin(Activity::Tick);
        let taken_at = SystemTime::now();
        let taken_instant = Instant::now();
        let devices = reader.sample(due, &mut timings);
        out.board.end();
        out.board.add_nvml_errors(reader.take_errors());
        // Every answering device answered nothing: NVML itself has stopped working.
        let silent = devices.iter().any(|d| d.state == DeviceState::Ok)
            && devices
                .iter()
                .filter(|d| d.state == DeviceState::Ok)
                .all(DeviceSample::answered_nothing);
        let mut snapshot = Snapshot {
            taken_at,
            taken_instant,
            seq: *seq,
            export: due.export,
            devices,
        };
        if let Some(a) = annotate.as_mut() {
            a.annotate(&mut snapshot, due.process);
        }
        out.hub
            .publish_sampled(snapshot, std::mem::take(&mut timings));
        silent
    };
    let mut next = Instant::now();
    let mut silent_ticks = 0u32;
    loop {
        let due = cadence.tick(Instant::now());
        silent_ticks = if sample(due, seq) {
            silent_ticks + 1
        } else {
            0
        };
        if silent_ticks >= SILENT_TICKS_BEFORE_REINIT {
            // E.g. "Unknown Error" on every call after the container lost its device cgroup
            // access: not ready, and NVML is initialized again (with backoff) until it answers.
            tracing::error!(
                ticks = silent_ticks,
                "no GPU answered any NVML call for {silent_ticks} ticks: NVML has stopped working (the calls' errors are logged above); re-initializing NVML"
            );
            out.board.set_status(NvmlStatus::Down(NvmlDown::Other(
                "no GPU answered any NVML call; re-initializing".into(),
            )));
            return SessionEnd::Silent;
        }
        between();
        next += settings.timing.sample_interval;
        let now = Instant::now();
        if next < now {
            // Ticks took longer than the interval: skip the missed ones rather than burst.
            next = now + settings.timing.sample_interval;
        }
        match commands.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(Command::FinalSampleAndStop { until }) => {
                // Every group, so that the run report's energy covers the whole run and
                // the last export holds everything.
                sample(cadence.last(Instant::now()), seq);
                return SessionEnd::Stop(Some(until));
            }
            Err(RecvTimeoutError::Disconnected) => return SessionEnd::Stop(None),
        }
    }
}

/// Runs `f` inside one NVML session, outside the sampler thread: for benchmarks and tools
/// that drive the real sampling code path themselves.
///
/// Loads and initializes the library `settings.nvml_library` (`nvmlInit_v2`), lists the
/// devices `settings.devices` selects (as [`Sampler`] does; `PodResources` must have been
/// resolved into a list first, else nothing is selected) and reads their static facts, then
/// calls `f` with a closure that runs one sampler tick (the same code: the fast fields every
/// call, each slow group on its cadence from `settings`, unsupported fields asked once) and
/// returns one [`DeviceSample`] per device, in listing order. Each call counts as an export
/// tick one sample interval (`settings.timing`) after the previous one (the slow groups' cadence follows from
/// that); the caller decides when to sample. NVML is shut down (`nvmlShutdown`) after `f`
/// returns.
///
/// # Errors
/// The [`NvmlError`] of the library load, `nvmlInit_v2` or the device listing
/// (`nvmlDeviceGetCount_v2`); a failing `nvmlShutdown` is logged, not returned.
pub fn with_session<R>(
    settings: &SamplerSettings,
    f: impl FnOnce(&mut dyn FnMut() -> Vec<DeviceSample>) -> R,
) -> Result<R, NvmlError> {
    let nvml = Nvml::builder()
        .lib_path(settings.nvml_library.as_os_str())
        .init()?;
    let result = {
        let t = &settings.timing;
        // Every call an export tick: exports as often as samples.
        let mut cadence = Cadence::new(&Timing::new(
            t.sample_interval,
            t.sample_interval,
            t.slow_intervals,
            t.watchdog,
        ));
        let mut reader = read::Reader::open(
            &nvml,
            &settings.devices,
            &HashMap::new(),
            &settings.read_options(),
        )?;
        let (t0, mut tick, mut timings) = (Instant::now(), 0u32, Vec::new());
        f(&mut || {
            let due = cadence.tick(t0 + settings.timing.sample_interval * tick);
            let devices = reader.sample(due, &mut timings);
            timings.clear();
            tick += 1;
            devices
        })
    };
    if let Err(e) = nvml.shutdown() {
        tracing::warn!("nvmlShutdown failed: {e}");
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(interval: Duration, n: usize) -> Vec<Duration> {
        Timing::every(interval).init_backoff().take(n).collect()
    }

    /// NVML is retried at least once per sample interval (never more than 5 s apart), so
    /// that the agent follows NVML's return within two sample intervals.
    #[test]
    fn init_retries_come_at_most_one_sample_interval_apart() {
        let s = Duration::from_secs;
        assert_eq!(first(s(5), 6), [s(1), s(2), s(4), s(5), s(5), s(5)]);
        assert_eq!(first(s(60), 5), [s(1), s(2), s(4), s(5), s(5)]);
        let ms = Duration::from_millis;
        assert_eq!(first(ms(100), 3), [ms(100), ms(100), ms(100)]);
        assert_eq!(first(ms(1500), 3), [s(1), ms(1500), ms(1500)]);
    }
}
