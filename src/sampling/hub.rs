//! The hub: the bus that carries snapshots and device events, in order, from the NVML
//! threads to the consumers (the sampler's status is on its own board, [`super::board`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use super::event_watcher::DeviceEvent;
use super::queue::{self, Refused};
use super::{SampleGroup, Snapshot};

/// How long one group of NVML calls took, over all devices, for one snapshot
/// (`gpu_sidecar.sample.duration`).
pub type GroupDuration = (SampleGroup, Duration);

/// What a subscription carries.
#[derive(Debug, Clone)]
pub enum Delivery {
    /// One tick's snapshot, with its group durations.
    Snapshot {
        /// The snapshot.
        snapshot: Arc<Snapshot>,
        /// How long each group of calls took (the static group: with the first snapshot of
        /// an NVML session).
        durations: Arc<[GroupDuration]>,
    },
    /// An XID or ECC event.
    Event(Arc<DeviceEvent>),
}

/// What a subscription asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest {
    /// Snapshots (one per tick).
    pub snapshots: bool,
    /// Device events (XID, ECC).
    pub events: bool,
}

impl Interest {
    /// Snapshots only.
    pub const SNAPSHOTS: Interest = Interest {
        snapshots: true,
        events: false,
    };
    /// Device events only.
    pub const EVENTS: Interest = Interest {
        snapshots: false,
        events: true,
    };
    /// Both, in order.
    pub const BOTH: Interest = Interest {
        snapshots: true,
        events: true,
    };
}

#[derive(Debug)]
struct Subscriber {
    id: u64,
    interest: Interest,
    queue: queue::Sender<Delivery>,
}

/// The hub: the one bus between the NVML threads and the consumers. The sampler publishes
/// each [`Snapshot`] ([`Hub::publish_sampled`]) and the event watcher each [`DeviceEvent`]
/// ([`Hub::publish_event`]); every subscription ([`Hub::subscribe_to`]) gets what it asked
/// for, in publish order, through its own bounded queue. The probes and the export read the
/// latest snapshot here; the sampler's status is on its state board
/// ([`super::board::SamplerBoard`]).
#[derive(Debug)]
pub struct Hub {
    latest: RwLock<Option<Arc<Snapshot>>>,
    subscribers: Mutex<Vec<Subscriber>>,
    /// Device events a full queue refused, over all subscribers.
    events_lost: AtomicU64,
    next_subscription: AtomicU64,
    ticks: AtomicU64,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            latest: RwLock::new(None),
            subscribers: Mutex::new(Vec::new()),
            events_lost: AtomicU64::new(0),
            next_subscription: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
        }
    }
}

impl Hub {
    /// The latest snapshot, if any tick completed.
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.latest
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The latest snapshot if it was taken less than `max_age` ago: a stale one is never
    /// exported as if fresh.
    pub fn fresh(&self, max_age: Duration) -> Option<Arc<Snapshot>> {
        self.latest()
            .filter(|s| s.taken_instant.elapsed() <= max_age)
    }

    /// Ticks completed since start.
    pub fn ticks(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    /// Publishes a snapshot without group durations: [`Hub::publish_sampled`] for tests and
    /// tools that drive the mapping directly.
    pub fn publish(&self, snapshot: Snapshot) {
        self.publish_sampled(snapshot, Vec::new());
    }

    /// Publishes a snapshot (sampler thread), with how long each group of NVML calls took for
    /// it, and hands it to every subscription that takes snapshots without waiting: a
    /// subscriber whose queue is full misses this one (the sampler never blocks on a
    /// consumer).
    pub fn publish_sampled(&self, snapshot: Snapshot, durations: Vec<GroupDuration>) {
        let snapshot = Arc::new(snapshot);
        *self.latest.write().unwrap_or_else(|p| p.into_inner()) = Some(snapshot.clone());
        self.ticks.fetch_add(1, Ordering::Relaxed);
        let durations: Arc<[GroupDuration]> = durations.into();
        self.deliver(
            |i| i.snapshots,
            || Delivery::Snapshot {
                snapshot: snapshot.clone(),
                durations: durations.clone(),
            },
        );
    }

    /// Publishes a device event (event watcher thread) to every subscription that takes
    /// events, in order with the snapshots, without waiting. A full queue loses the event for
    /// that subscriber: counted, and logged (the first, then every 1000th).
    pub fn publish_event(&self, event: DeviceEvent) {
        let event = Arc::new(event);
        let full = self.deliver(|i| i.events, || Delivery::Event(event.clone()));
        if full > 0 {
            let lost = self.events_lost.fetch_add(full, Ordering::Relaxed) + full;
            if lost == full || lost / 1000 != (lost - full) / 1000 {
                tracing::warn!(
                    lost_so_far = lost,
                    kind = %event.kind,
                    uuid = %event.device.uuid,
                    "a device event did not reach a consumer whose queue is full (it is stuck); said for the first and every 1000th"
                );
            }
        }
    }

    /// Device events lost to full queues since start (over all subscribers).
    pub fn events_lost(&self) -> u64 {
        self.events_lost.load(Ordering::Relaxed)
    }

    /// Offers one delivery to every subscriber `wants`; drops the subscriptions whose
    /// receiver is gone; returns how many queues were full.
    fn deliver(&self, wants: impl Fn(Interest) -> bool, delivery: impl Fn() -> Delivery) -> u64 {
        let mut full = 0;
        let mut subs = self.subscribers.lock().unwrap_or_else(|p| p.into_inner());
        subs.retain(|s| {
            if !wants(s.interest) {
                return true;
            }
            match s.queue.offer(delivery()) {
                Ok(()) => true,
                Err(Refused::Full) => {
                    full += 1;
                    true
                }
                Err(Refused::Abandoned) => false,
            }
        });
        full
    }

    /// Everything `interest` names from now on, in publish order, through a queue of
    /// `capacity` (at least 1), with an id for [`Hub::unsubscribe`]: for the consumers
    /// ([`super::consumer::ConsumerThread`] subscribes them). Dropping the receiver
    /// unsubscribes.
    pub fn subscribe_to(
        &self,
        capacity: usize,
        interest: Interest,
    ) -> (u64, queue::Receiver<Delivery>) {
        let (tx, rx) = queue::bounded(capacity);
        let id = self.next_subscription.fetch_add(1, Ordering::Relaxed);
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Subscriber {
                id,
                interest,
                queue: tx,
            });
        (id, rx)
    }

    /// Ends one subscription: its receiver gets what is queued, then sees the channel
    /// closed, which wakes a consumer blocked on it.
    pub fn unsubscribe(&self, id: u64) {
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|s| s.id != id);
    }

    /// Ends every subscription: each receiver still gets the snapshots already queued, then
    /// sees the channel closed (`recv` answers `Err`). Called at shutdown, after the sampler's
    /// final sample, so that consumers drain and finish; later snapshots reach no subscriber.
    pub fn close_subscriptions(&self) {
        self.subscribers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    pub(super) fn clear(&self) {
        *self.latest.write().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
