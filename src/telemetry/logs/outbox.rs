//! The events' outbox: a bounded FIFO of log records waiting for the collector, so that an
//! outage loses nothing it can hold. Records leave it only once the collector accepted them
//! (a failed export puts nothing back: it never took them out), in the order they came.
//!
//! Bounded by a number of records (`OTEL_BLRP_MAX_QUEUE_SIZE`): when full, the oldest record
//! is dropped to make room for the new one (the latest events say most about the GPU now).
//! Each dropped record is counted ([`Outbox::take_dropped`], `gpu_sidecar.events.dropped`);
//! a record dropped while it was being sent counts only if that export then failed (it
//! arrived otherwise). The first drop of an outage is logged, once, by the caller
//! ([`Pushed::first_drop`]).
//!
//! Pure state behind one mutex, no I/O: the sender (`crate::telemetry::logs::events`) takes a batch from the
//! front ([`Outbox::take`]), sends it, and reports the outcome ([`Outbox::delivered`],
//! [`Outbox::failed`]).

use std::collections::VecDeque;

/// What [`Outbox::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pushed {
    /// Records dropped to make room (the oldest).
    pub dropped: usize,
    /// This is the first drop since the outbox last emptied: say so (once per outage).
    pub first_drop: bool,
}

/// A bounded FIFO of `T` with a batch in flight at its front.
#[derive(Debug)]
pub struct Outbox<T> {
    records: VecDeque<(u64, T)>,
    capacity: usize,
    next_seq: u64,
    /// The sequence numbers of the batch being sent, if one is.
    in_flight: Option<(u64, u64)>,
    /// Records of the batch in flight dropped while it was on its way: counted if it fails.
    dropped_in_flight: u64,
    /// Dropped records not yet taken by [`Outbox::take_dropped`].
    dropped: u64,
    /// A drop was said since the outbox last emptied.
    said: bool,
}

impl<T: Clone> Outbox<T> {
    /// An empty outbox for at most `capacity` records (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self {
            records: VecDeque::new(),
            capacity: capacity.max(1),
            next_seq: 0,
            in_flight: None,
            dropped_in_flight: 0,
            dropped: 0,
            said: false,
        }
    }

    /// Records waiting (the batch in flight included).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Whether a batch is being sent.
    pub fn sending(&self) -> bool {
        self.in_flight.is_some()
    }

    fn in_flight(&self, seq: u64) -> bool {
        self.in_flight.is_some_and(|(a, b)| (a..=b).contains(&seq))
    }

    /// Adds `record` at the back, dropping the oldest when full.
    pub fn push(&mut self, record: T) -> Pushed {
        let mut dropped = 0;
        while self.records.len() >= self.capacity {
            if let Some((seq, _)) = self.records.pop_front() {
                if self.in_flight(seq) {
                    self.dropped_in_flight += 1;
                } else {
                    self.dropped += 1;
                }
                dropped += 1;
            }
        }
        self.records.push_back((self.next_seq, record));
        self.next_seq += 1;
        let first_drop = dropped > 0 && !std::mem::replace(&mut self.said, true);
        Pushed {
            dropped,
            first_drop,
        }
    }

    /// The first `max` records, now in flight (`None` when empty or a batch is in flight).
    pub fn take(&mut self, max: usize) -> Option<Vec<T>> {
        if self.in_flight.is_some() || self.records.is_empty() {
            return None;
        }
        let n = max.max(1).min(self.records.len());
        let batch: Vec<T> = self
            .records
            .iter()
            .take(n)
            .map(|(_, r)| r.clone())
            .collect();
        let first = self.records[0].0;
        self.in_flight = Some((first, first + n as u64 - 1));
        Some(batch)
    }

    /// The batch in flight was accepted: its records leave (those dropped meanwhile arrived
    /// all the same: not counted).
    pub fn delivered(&mut self) {
        if let Some((_, last)) = self.in_flight.take() {
            while self.records.front().is_some_and(|(seq, _)| *seq <= last) {
                self.records.pop_front();
            }
        }
        self.dropped_in_flight = 0;
        if self.records.is_empty() {
            self.said = false;
        }
    }

    /// The batch in flight failed and will be sent again: it stays at the front (but for
    /// what was dropped meanwhile, now counted).
    pub fn failed(&mut self) {
        self.in_flight = None;
        self.dropped += std::mem::take(&mut self.dropped_in_flight);
    }

    /// The batch in flight was refused for good (the collector will never take it): its
    /// records leave and count as dropped.
    pub fn refused(&mut self) -> usize {
        let mut n = 0;
        if let Some((_, last)) = self.in_flight.take() {
            while self.records.front().is_some_and(|(seq, _)| *seq <= last) {
                self.records.pop_front();
                n += 1;
            }
        }
        self.dropped += n as u64 + std::mem::take(&mut self.dropped_in_flight);
        n
    }

    /// Empties the outbox (shutdown: what could not be delivered in time), counting it as
    /// dropped; returns how many.
    pub fn abandon(&mut self) -> usize {
        let n = self.records.len();
        self.records.clear();
        self.in_flight = None;
        self.dropped += n as u64;
        self.dropped_in_flight = 0;
        n
    }

    /// Dropped records since the last call.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_and_takes_batches_from_the_front() {
        let mut o = Outbox::new(10);
        for i in 0..5 {
            o.push(i);
        }
        assert_eq!(o.take(2), Some(vec![0, 1]));
        assert_eq!(o.take(2), None, "one batch in flight at a time");
        o.failed();
        assert_eq!(
            o.take(3),
            Some(vec![0, 1, 2]),
            "a failed batch is sent again"
        );
        o.delivered();
        assert_eq!(o.take(10), Some(vec![3, 4]));
        o.delivered();
        assert!(o.is_empty());
        assert_eq!(o.take_dropped(), 0);
    }

    #[test]
    fn a_full_outbox_drops_the_oldest_and_counts_them() {
        let mut o = Outbox::new(3);
        let pushed: Vec<_> = (0..7).map(|i| o.push(i)).collect();
        assert_eq!(pushed.iter().map(|p| p.dropped).sum::<usize>(), 4);
        assert_eq!(
            pushed.iter().filter(|p| p.first_drop).count(),
            1,
            "said once"
        );
        assert_eq!(o.take(10), Some(vec![4, 5, 6]));
        o.delivered();
        assert_eq!(o.take_dropped(), 4);
        // Emptied: the next outage is said again.
        for i in 0..4 {
            o.push(i);
        }
        assert!(o.take_dropped() == 1);
    }

    #[test]
    fn records_dropped_in_flight_count_only_if_the_export_fails() {
        let mut o = Outbox::new(2);
        o.push('a');
        o.push('b');
        assert_eq!(o.take(2), Some(vec!['a', 'b']));
        o.push('c'); // drops 'a', in flight
        o.delivered(); // 'a' arrived all the same
        assert_eq!(o.take_dropped(), 0);
        assert_eq!(o.take(2), Some(vec!['c']));
        o.push('d');
        o.push('e'); // drops 'c', in flight
        o.failed(); // 'c' is lost
        assert_eq!(o.take_dropped(), 1);
        assert_eq!(o.take(2), Some(vec!['d', 'e']));
        assert_eq!(o.refused(), 2);
        assert_eq!(o.take_dropped(), 2);
        o.push('f');
        assert_eq!(o.abandon(), 1);
        assert_eq!(o.take_dropped(), 1);
    }
}
