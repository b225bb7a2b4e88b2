//! An integer-percent histogram: exact mean and percentiles in fixed memory, for the run
//! report's utilization and the efficiency figures.

use crate::sampling::snapshot::ratio_from_percent;
/// Integer-percent histogram: exact mean and percentiles in fixed memory.
#[derive(Debug, Clone)]
pub(super) struct Histogram([u64; 101]);

impl Default for Histogram {
    fn default() -> Self {
        Self([0; 101])
    }
}

impl Histogram {
    pub(super) fn add(&mut self, percent: u32) {
        self.0[percent.min(100) as usize] += 1;
    }

    pub(super) fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    pub(super) fn count(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Mean as a ratio 0..1.
    pub(super) fn mean(&self) -> Option<f64> {
        let n = self.count();
        let sum: u64 = self.0.iter().enumerate().map(|(p, c)| p as u64 * c).sum();
        (n > 0).then(|| ratio_from_percent(sum as f64 / n as f64))
    }

    /// Nearest-rank percentile `q` (0 < q ≤ 1) as a ratio 0..1.
    pub(super) fn percentile(&self, q: f64) -> Option<f64> {
        let n = self.count();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut seen = 0;
        for (p, c) in self.0.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(ratio_from_percent(p as f64));
            }
        }
        None
    }
}
