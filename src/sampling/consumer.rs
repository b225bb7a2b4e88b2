//! The one consumer skeleton: a named thread fed by one [`Hub`] subscription.
//!
//! Every consumer of the flow (the export clock, the rules, the run report, the sample log,
//! the device-event recorder) is a [`Consumer`]: what it does with a snapshot, with a device
//! event, and optionally when nothing arrives for a while. [`ConsumerThread::start`]
//! subscribes it to the hub (snapshots, device events or both, in the order they were
//! published, through a bounded queue: the sampler never waits on a consumer) and runs it on
//! its own thread, which sleeps on the queue: it wakes once per delivery (once per sample for
//! a snapshot consumer) and never polls. Stopping ends the subscription: the thread handles
//! what is queued, calls [`Consumer::finish`] and ends.

use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::hub::{Delivery, GroupDuration, Hub, Interest};
use super::queue::{self, Ended};
use super::{DeviceEvent, Snapshot};

/// One consumer of the hub; runs on its own thread ([`ConsumerThread`]).
pub trait Consumer: Send + 'static {
    /// What it subscribes to.
    const INTEREST: Interest;

    /// A snapshot, with the time each group of NVML calls took to read it (the static group
    /// is reported with the first snapshot of each NVML session).
    fn snapshot(&mut self, snapshot: &Arc<Snapshot>, durations: &[GroupDuration]) {
        let _ = (snapshot, durations);
    }

    /// A device event (XID, ECC), in order with the snapshots.
    fn device_event(&mut self, event: &DeviceEvent) {
        let _ = event;
    }

    /// When nothing has arrived by this instant, [`Consumer::idle`] is called; `None` (the
    /// default): wait for the next delivery however long it takes.
    fn idle_deadline(&self) -> Option<Instant> {
        None
    }

    /// Nothing arrived by [`Consumer::idle_deadline`].
    fn idle(&mut self) {}

    /// The subscription ended (shutdown) and everything queued was handled.
    fn finish(&mut self) {}
}

/// A [`Consumer`] running on its own thread.
pub struct ConsumerThread {
    hub: Arc<Hub>,
    subscription: u64,
    done: mpsc::Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl ConsumerThread {
    /// Subscribes `consumer` to `hub` (a queue of `capacity` deliveries; when it is full the
    /// consumer misses a snapshot, and a device event is counted lost and logged) and starts
    /// its thread, named `name`. Start consumers before the sampler, so that they see every
    /// tick.
    ///
    /// # Panics
    /// If the OS refuses to create a thread.
    pub fn start<C: Consumer>(name: &str, hub: &Arc<Hub>, capacity: usize, consumer: C) -> Self {
        let (subscription, queue) = hub.subscribe_to(capacity, C::INTEREST);
        let (done_tx, done) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut consumer = consumer;
                drive(&mut consumer, &queue);
                consumer.finish();
                let _ = done_tx.send(());
            })
            .unwrap_or_else(|e| panic!("spawn the {name} thread: {e}"));
        Self {
            hub: hub.clone(),
            subscription,
            done,
            thread: Some(thread),
        }
    }

    /// Ends the subscription and waits up to `timeout` for the thread to handle what is
    /// queued and finish. Returns `false` if the bound was hit (the thread is left behind).
    pub fn stop(mut self, timeout: Duration) -> bool {
        self.hub.unsubscribe(self.subscription);
        if self.done.recv_timeout(timeout).is_err() {
            return false;
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        true
    }
}

/// The thread's loop: one blocking wait per delivery (bounded by the idle deadline, if any).
fn drive<C: Consumer>(consumer: &mut C, queue: &queue::Receiver) {
    loop {
        match queue.recv(consumer.idle_deadline()) {
            Ok(Delivery::Snapshot {
                snapshot,
                durations,
            }) => consumer.snapshot(&snapshot, &durations),
            Ok(Delivery::Event(event)) => consumer.device_event(&event),
            Err(Ended::Timeout) => consumer.idle(),
            Err(Ended::Closed) => return,
        }
    }
}
