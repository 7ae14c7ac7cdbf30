//! Key sketches (SPEC.md §8.7, feature `chunk_sketches`, format 1.5): a HyperLogLog sketch
//! of a sub-chunk's user keys, written by flushes so that the engine can estimate how much
//! the level-0 chunks overlap (TRIAD-DISK) without reading them.

use crate::codec::{crc32c, Reader};
use crate::error::FormatError;

/// The precision a flush writes: 2^12 registers, 4 KiB, a standard error of 1.6% (TRIAD's
/// 4 KiB per file).
pub const SKETCH_PRECISION: u8 = 12;
/// The smallest and largest precision a reader accepts.
pub const SKETCH_PRECISION_MIN: u8 = 4;
/// See [`SKETCH_PRECISION_MIN`].
pub const SKETCH_PRECISION_MAX: u8 = 16;
/// Bytes before the registers: precision and three reserved bytes.
pub const SKETCH_HEADER_LEN: usize = 4;

/// A HyperLogLog sketch (Flajolet et al. 2007) of user keys hashed with xxh3-64 (the filter
/// hash, SPEC.md §8.3): register `h >> (64 - p)` keeps the largest rank seen, the rank being
/// one more than the leading zeros of `h << p` (at most `65 - p`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sketch {
    precision: u8,
    registers: Vec<u8>,
}

impl Sketch {
    /// An empty sketch of `2^precision` registers.
    pub fn new(precision: u8) -> Self {
        let precision = precision.clamp(SKETCH_PRECISION_MIN, SKETCH_PRECISION_MAX);
        Self { precision, registers: vec![0; 1 << precision] }
    }

    /// Its precision.
    pub fn precision(&self) -> u8 {
        self.precision
    }

    /// Adds a key by its filter hash (`chunk::filter::filter_hash`).
    pub fn add_hash(&mut self, hash: u64) {
        let precision = u32::from(self.precision);
        let register = (hash >> (64 - precision)) as usize;
        let rest = hash << precision;
        let rank = (rest.leading_zeros() + 1).min(65 - precision) as u8;
        let slot = &mut self.registers[register];
        *slot = (*slot).max(rank);
    }

    /// Adds every key of `other` (the sketch of the union). Sketches of different precisions
    /// do not merge: `false`, nothing changed.
    pub fn merge(&mut self, other: &Sketch) -> bool {
        if other.precision != self.precision {
            return false;
        }
        for (mine, theirs) in self.registers.iter_mut().zip(&other.registers) {
            *mine = (*mine).max(*theirs);
        }
        true
    }

    /// The estimated number of distinct keys (with linear counting for small sets).
    pub fn estimate(&self) -> f64 {
        let m = self.registers.len() as f64;
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let sum: f64 = self.registers.iter().map(|&rank| (-f64::from(rank)).exp2()).sum();
        let raw = alpha * m * m / sum;
        let zeros = self.registers.iter().filter(|&&rank| rank == 0).count();
        if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        }
    }

    /// Bytes of its encoding.
    pub fn encoded_len(precision: u8) -> usize {
        SKETCH_HEADER_LEN + (1usize << precision)
    }

    /// Its encoding (SPEC.md §8.7).
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(Self::encoded_len(self.precision));
        bytes.extend_from_slice(&[self.precision, 0, 0, 0]);
        bytes.extend_from_slice(&self.registers);
        bytes
    }

    /// Decodes a sketch read at device `offset`, checking its crc32c (`crc`, from the footer)
    /// and every register.
    pub fn decode(bytes: &[u8], offset: u64, crc: u32) -> Result<Self, FormatError> {
        const S: &str = "key sketch";
        let actual = crc32c(bytes);
        if actual != crc {
            return Err(FormatError::ChecksumMismatch { structure: S, offset, expected: crc, actual });
        }
        let mut reader = Reader::new(bytes, S, offset);
        let precision = reader.u8()?;
        reader.reserved(3)?;
        if !(SKETCH_PRECISION_MIN..=SKETCH_PRECISION_MAX).contains(&precision) {
            return Err(FormatError::invalid(
                S,
                "precision",
                offset,
                format!("{precision}, not {SKETCH_PRECISION_MIN} to {SKETCH_PRECISION_MAX}"),
            ));
        }
        if bytes.len() != Self::encoded_len(precision) {
            return Err(FormatError::invalid(
                S,
                "len_sketch",
                offset,
                format!("{} bytes where precision {precision} makes {}", bytes.len(), Self::encoded_len(precision)),
            ));
        }
        let registers = bytes[SKETCH_HEADER_LEN..].to_vec();
        let rank_max = 65 - precision;
        if let Some(index) = registers.iter().position(|&rank| rank > rank_max) {
            return Err(FormatError::invalid(
                S,
                "registers",
                offset + (SKETCH_HEADER_LEN + index) as u64,
                format!("register {index} holds {} above the largest rank {rank_max}", registers[index]),
            ));
        }
        Ok(Self { precision, registers })
    }
}

/// TRIAD's overlap ratio of a set of chunks: `1 - distinct / total`, where `total` sums each
/// sketch's estimate and `distinct` estimates their union. 0 when the chunks share no key,
/// near `1 - 1/n` when `n` chunks hold the same keys. `None` for fewer than two sketches or
/// sketches of different precisions.
pub fn overlap_ratio<'a>(sketches: impl IntoIterator<Item = &'a Sketch>) -> Option<f64> {
    let mut sketches = sketches.into_iter();
    let first = sketches.next()?;
    let mut union = first.clone();
    let mut total = first.estimate();
    let mut count = 1;
    for sketch in sketches {
        if !union.merge(sketch) {
            return None;
        }
        total += sketch.estimate();
        count += 1;
    }
    if count < 2 || total <= 0.0 {
        return None;
    }
    Some((1.0 - union.estimate() / total).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::filter::filter_hash;

    fn sketch_of(keys: impl Iterator<Item = u64>) -> Sketch {
        let mut sketch = Sketch::new(SKETCH_PRECISION);
        for key in keys {
            sketch.add_hash(filter_hash(format!("key-{key:010}").as_bytes()));
        }
        sketch
    }

    #[test]
    fn estimates_within_a_few_percent() {
        for count in [10u64, 1_000, 50_000, 400_000] {
            let estimate = sketch_of(0..count).estimate();
            let error = (estimate - count as f64).abs() / count as f64;
            assert!(error < 0.05, "{count} keys estimated as {estimate:.0}");
        }
        assert_eq!(Sketch::new(SKETCH_PRECISION).estimate(), 0.0);
    }

    #[test]
    fn overlap_of_disjoint_and_identical_sets() {
        let a = sketch_of(0..20_000);
        let b = sketch_of(20_000..40_000);
        let disjoint = overlap_ratio([&a, &b]).expect("two sketches");
        assert!(disjoint < 0.05, "disjoint sets overlap {disjoint}");
        let same = overlap_ratio([&a, &a.clone(), &a.clone()]).expect("three sketches");
        assert!((same - 2.0 / 3.0).abs() < 0.02, "three copies overlap {same}");
        let half = sketch_of(10_000..30_000);
        let ratio = overlap_ratio([&a, &half]).expect("two sketches");
        assert!((ratio - 0.25).abs() < 0.04, "half-shared sets overlap {ratio}");
        assert_eq!(overlap_ratio([&a]), None);
        assert_eq!(overlap_ratio([&a, &Sketch::new(10)]), None);
    }

    #[test]
    fn round_trip_and_every_damage_named() {
        let sketch = sketch_of(0..5_000);
        let bytes = sketch.encode();
        assert_eq!(bytes.len(), Sketch::encoded_len(SKETCH_PRECISION));
        let crc = crc32c(&bytes);
        assert_eq!(Sketch::decode(&bytes, 100, crc).expect("decodes"), sketch);
        let mut flipped = bytes.clone();
        flipped[200] ^= 1;
        assert!(matches!(Sketch::decode(&flipped, 100, crc), Err(FormatError::ChecksumMismatch { .. })));
        let mut high = bytes.clone();
        high[SKETCH_HEADER_LEN + 7] = 60;
        let error = Sketch::decode(&high, 100, crc32c(&high)).expect_err("rank too large");
        assert!(error.to_string().contains("register 7"), "{error}");
        let mut precision = bytes.clone();
        precision[0] = 3;
        assert!(Sketch::decode(&precision, 100, crc32c(&precision)).is_err());
        let short = &bytes[..bytes.len() - 1];
        assert!(Sketch::decode(short, 100, crc32c(short)).is_err());
    }
}
