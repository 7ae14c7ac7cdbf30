//! Latency histograms: hdrhistogram's, with three significant digits (0.1% relative error),
//! in nanoseconds, growing to any value. A thin wrapper so that a record that cannot grow the
//! histogram counts at its top instead of aborting a benchmark.

/// Latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct Histogram(hdrhistogram::Histogram<u64>);

impl Default for Histogram {
    fn default() -> Self {
        // Three significant digits, resizing to any value: never fails.
        let histogram =
            hdrhistogram::Histogram::new(3).unwrap_or_else(|_| unreachable!("3 significant digits are valid"));
        Self(histogram)
    }
}

impl Histogram {
    /// Records one latency.
    pub fn record(&mut self, nanos: u64) {
        // The histogram grows to any value; should growing fail, the value counts at the top
        // of the range rather than being lost.
        if self.0.record(nanos).is_err() {
            self.0.saturating_record(nanos);
        }
    }

    /// Recorded values.
    pub fn count(&self) -> u64 {
        self.0.len()
    }

    /// The value at quantile `q` (0..=1), in nanoseconds.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.0.is_empty() {
            return 0;
        }
        self.0.value_at_quantile(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_uniform_run() {
        let mut histogram = Histogram::default();
        for value in 1..=100_000u64 {
            histogram.record(value);
        }
        let p50 = histogram.quantile(0.5) as f64;
        let p99 = histogram.quantile(0.99) as f64;
        assert!((p50 - 50_000.0).abs() / 50_000.0 < 0.002, "p50 {p50}");
        assert!((p99 - 99_000.0).abs() / 99_000.0 < 0.002, "p99 {p99}");
        assert_eq!(histogram.count(), 100_000);
        assert!(histogram.quantile(1.0).abs_diff(100_000) <= 100, "{}", histogram.quantile(1.0));
        assert_eq!(Histogram::default().quantile(0.5), 0);
    }
}
