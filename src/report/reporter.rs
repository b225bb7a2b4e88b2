//! The run report's thread, `run-report`: a [`RunAccumulator`] fed by a hub subscription.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_sdk::Resource;

use super::page::Curves;
use super::run_report::RunAccumulator;
use super::summary::{resource_map, RunReport};
use crate::sampling::consumer::{Consumer, ConsumerThread};
use crate::sampling::{DeviceEvent, DeviceEventKind, GroupDuration, Hub, Interest, Snapshot};

/// The run report as a consumer of the hub: each snapshot, and each XID (counted on its
/// physical GPU), in order. The accumulator sits behind a lock only so that
/// [`RunReporter::finish`] can report what was received when the thread is late.
struct Accumulate(Arc<Mutex<RunAccumulator>>);

impl Accumulate {
    fn acc(&self) -> std::sync::MutexGuard<'_, RunAccumulator> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Consumer for Accumulate {
    const INTEREST: Interest = Interest::BOTH;

    fn snapshot(&mut self, snapshot: &Arc<Snapshot>, _: &[GroupDuration]) {
        self.acc().add(snapshot);
    }

    fn device_event(&mut self, event: &DeviceEvent) {
        if let DeviceEventKind::Xid(code) = event.kind {
            self.acc().record_xid(event.gpu_uuid(), code);
        }
    }
}

/// A [`RunAccumulator`] on the thread `run-report`, fed by a hub subscription.
pub struct RunReporter {
    acc: Arc<Mutex<RunAccumulator>>,
    thread: ConsumerThread,
}

impl RunReporter {
    /// Subscribes to `hub` (queue of [`super::QUEUE_CAPACITY`]) and starts the thread.
    /// Call before the sampler starts, so that no tick is missed.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start(hub: &Arc<Hub>, timing: &crate::sampling::Timing) -> Self {
        Self::start_with(hub, RunAccumulator::new(timing))
    }

    /// As [`RunReporter::start`], with an accumulator set up by the caller (price, pool
    /// recognition).
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start_with(hub: &Arc<Hub>, acc: RunAccumulator) -> Self {
        let acc = Arc::new(Mutex::new(acc));
        let thread = ConsumerThread::start(
            "run-report",
            hub,
            super::QUEUE_CAPACITY,
            Accumulate(acc.clone()),
        );
        Self { acc, thread }
    }

    /// Ends the subscription, waits up to `timeout` for the queue to drain and builds the
    /// report, with the curves when the accumulator keeps them. On timeout the report covers
    /// what was received so far.
    pub fn finish(self, timeout: Duration, resource: &Resource) -> (RunReport, Option<Curves>) {
        if !self.thread.stop(timeout) {
            tracing::warn!("the run report did not receive every sample before the shutdown bound");
        }
        let acc = self.acc.lock().unwrap_or_else(|p| p.into_inner());
        (acc.report(resource_map(resource)), acc.curves().cloned())
    }
}
