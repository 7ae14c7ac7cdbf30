//! A latency histogram with about 3% relative error in constant memory (log-linear buckets),
//! so that recording a million latencies costs neither memory nor time.

const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;

/// Latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self { counts: vec![0; (64 * SUB) as usize], total: 0, max: 0 }
    }
}

fn bucket(value: u64) -> usize {
    if value < SUB {
        return value as usize;
    }
    let exponent = 63 - u64::from(value.leading_zeros());
    let shift = exponent - u64::from(SUB_BITS);
    let sub = (value >> shift) & (SUB - 1);
    ((shift + 1) * SUB + sub) as usize
}

/// The largest value that falls in bucket `index`.
fn bucket_high(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB {
        return index;
    }
    let shift = index / SUB - 1;
    let sub = index % SUB;
    ((SUB + sub + 1) << shift) - 1
}

impl Histogram {
    /// Records one latency.
    pub fn record(&mut self, nanos: u64) {
        self.counts[bucket(nanos)] += 1;
        self.total += 1;
        self.max = self.max.max(nanos);
    }

    /// Recorded values.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The value at quantile `q` (0..=1), in nanoseconds: the upper bound of its bucket.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_high(index).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_bound_their_values() {
        for value in [0, 1, 31, 32, 33, 1000, 123_456, 10_000_000_000] {
            let index = bucket(value);
            assert!(bucket_high(index) >= value, "value {value}");
            assert!(index == 0 || bucket_high(index - 1) < value, "value {value}");
            assert!(bucket_high(index) as f64 <= value as f64 * 1.07 + 1.0, "value {value}");
        }
    }

    #[test]
    fn quantiles_of_a_uniform_run() {
        let mut histogram = Histogram::default();
        for value in 1..=100_000u64 {
            histogram.record(value);
        }
        let p50 = histogram.quantile(0.5) as f64;
        let p99 = histogram.quantile(0.99) as f64;
        assert!((p50 - 50_000.0).abs() / 50_000.0 < 0.04, "p50 {p50}");
        assert!((p99 - 99_000.0).abs() / 99_000.0 < 0.04, "p99 {p99}");
        assert_eq!(histogram.quantile(1.0), 100_000);
    }
}
