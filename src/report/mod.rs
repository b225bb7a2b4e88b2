//! Local outputs built from every sample: the run report and the sample log.
//!
//! Both are consumers of the [`Hub`] ([`crate::sampling::consumer`]) on threads of their
//! own (`run-report`, `sample-log`), so the sampler never waits on them: a consumer
//! whose queue is full misses that snapshot (counted, see below), it never blocks NVML
//! sampling. Each subscription is made before the sampler starts, so the stream begins at
//! tick 1 and a gap in [`Snapshot::seq`](crate::sampling::Snapshot::seq) is exactly a
//! snapshot the queue dropped.
//!
//! - [`run_report`]: at shutdown, one summary per GPU and one for the pod (wall time,
//!   utilization, memory, energy, power, temperatures, time held back by power cap /
//!   thermal / HW slowdown, XIDs, samples taken and missed, and [`efficiency`]: GPM
//!   profiling means, idle time holding memory, cost, memory pattern), emitted as the event
//!   `gpu.run.report` and optionally written to `GPU_SIDECAR_REPORT_FILE`.
//! - [`sample_log`]: one CSV or JSONL row per GPU per sample (`GPU_SIDECAR_SAMPLE_LOG`),
//!   flushed per sample, rotated at a size limit.
//! - [`timeline`]: the events emitted during the run (alerts, XIDs, ECC), kept for the
//!   report's `events`.
//! - [`page`]: the report as one self-contained HTML page, with curves from the agent's own
//!   samples (`GPU_SIDECAR_REPORT_HTML`) or from a sample log (the `report` command).
//! - [`compare`]: two reports' figures side by side, and whether one got worse past a
//!   threshold (the `compare` command), after [`completeness`] judged whether the new run is
//!   whole.
//! - [`job`]: the training job a report belongs to (its `job`), and a job's report added up
//!   from its pods' reports (the `merge` command). [`figures`] names, labels and formats the figures
//!   for both; [`read`] reads a report back; [`cli`] parses the two commands' arguments.
//!
//! Shutdown order (see [`crate::agent`]): the sampler takes its final sample,
//! [`Hub::close_subscriptions`] ends the queues, the consumers drain them, then the
//! report is emitted before the events and metrics pipelines are flushed.

pub mod cli;
pub mod compare;
pub mod completeness;
pub mod efficiency;
pub mod figures;
mod histogram;
pub mod job;
pub mod page;
pub mod read;
pub mod reporter;
pub mod run_report;
pub mod sample_log;
pub mod summary;
pub mod timeline;

pub use efficiency::{Efficiency, MemoryPattern};
pub use reporter::RunReporter;
pub use run_report::RunAccumulator;
pub use sample_log::{SampleLog, SampleLogger};
pub use summary::{GpuSummary, RunReport, Summary};

#[cfg(doc)]
use crate::sampling::Hub;

/// Queue length of each subscription: 1024 snapshots (at the default 5 s interval, 85 min
/// of samples; at 100 ms, 100 s). A consumer handles a snapshot in microseconds (the report)
/// or one small buffered write (the log), so nothing is dropped unless the consumer is stuck
/// for that long, e.g. a hung network file system under the sample log.
pub const QUEUE_CAPACITY: usize = 1024;
