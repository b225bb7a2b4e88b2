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
fn drive<C: Consumer>(consumer: &mut C, queue: &queue::Receiver<Delivery>) {
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::SystemTime;

    use super::*;
    use crate::sampling::{DeviceEventKind, DeviceInfo, SampleGroup};

    fn snapshot(seq: u64) -> Snapshot {
        Snapshot {
            taken_at: SystemTime::now(),
            taken_instant: Instant::now(),
            seq,
            export: false,
            devices: Vec::new(),
        }
    }

    fn xid(code: u64) -> DeviceEvent {
        DeviceEvent {
            time: SystemTime::now(),
            device: Arc::new(DeviceInfo {
                uuid: "GPU-0".into(),
                ..DeviceInfo::default()
            }),
            kind: DeviceEventKind::Xid(code),
        }
    }

    /// Writes down what it was given, in order.
    struct Record(Arc<Mutex<Vec<String>>>);

    impl Record {
        fn push(&self, what: String) {
            self.0.lock().unwrap().push(what);
        }
    }

    impl Consumer for Record {
        const INTEREST: Interest = Interest::BOTH;

        fn snapshot(&mut self, snapshot: &Arc<Snapshot>, durations: &[GroupDuration]) {
            let groups: Vec<_> = durations.iter().map(|(g, _)| g.as_str()).collect();
            self.push(format!("snapshot {} {groups:?}", snapshot.seq));
        }

        fn device_event(&mut self, event: &DeviceEvent) {
            self.push(format!("{:?} on {}", event.kind, event.gpu_uuid()));
        }

        fn finish(&mut self) {
            self.push("finish".into());
        }
    }

    #[test]
    fn snapshots_and_device_events_arrive_in_publish_order_then_finish() {
        let hub = Arc::new(Hub::default());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let consumer = ConsumerThread::start("test-consumer", &hub, 8, Record(seen.clone()));
        hub.publish_sampled(
            snapshot(1),
            vec![(SampleGroup::Static, Duration::from_millis(3))],
        );
        hub.publish_event(xid(79));
        hub.publish_sampled(
            snapshot(2),
            vec![(SampleGroup::Fast, Duration::from_micros(40))],
        );
        assert!(consumer.stop(Duration::from_secs(10)));
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "snapshot 1 [\"static\"]",
                "Xid(79) on GPU-0",
                "snapshot 2 [\"fast\"]",
                "finish"
            ]
        );
        assert_eq!(hub.events_lost(), 0);
    }

    #[test]
    fn a_subscription_gets_only_what_it_asked_for_and_a_full_queue_loses_events_counted() {
        let hub = Hub::default();
        let (id, queue) = hub.subscribe_to(1, Interest::EVENTS);
        hub.publish(snapshot(1));
        hub.publish_event(xid(48));
        hub.publish_event(xid(63));
        assert_eq!(
            hub.events_lost(),
            1,
            "the second event found the queue full"
        );
        match queue.recv(None) {
            Ok(Delivery::Event(e)) => assert_eq!(e.kind, DeviceEventKind::Xid(48)),
            other => panic!("expected the first XID, got {other:?}"),
        }
        hub.unsubscribe(id);
        assert_eq!(queue.recv(None).unwrap_err(), Ended::Closed);
    }
}
