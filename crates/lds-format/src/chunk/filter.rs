//! The Bloom filter over a sub-chunk's user keys (SPEC.md §8.3).

use crate::chunk::footer::Footer;
use crate::codec::{crc32c, Reader, Writer};
use crate::error::FormatError;

/// Bytes of the filter header.
pub const FILTER_HEADER_LEN: usize = 8;
/// Most probes a filter may use.
pub const FILTER_PROBES_MAX: u8 = 30;

/// A Bloom filter over user keys (SPEC.md §8.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Probes per key.
    pub num_probes: u8,
    /// The bit array; its length times 8 is `num_bits`.
    pub bits: Vec<u8>,
}

/// The hash the filter uses.
pub fn filter_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

impl Filter {
    /// Builds a filter from key hashes with `bits_per_key` bits each (0 gives no filter).
    pub fn build(hashes: &[u64], bits_per_key: u32) -> Self {
        if bits_per_key == 0 || hashes.is_empty() {
            return Self { num_probes: 0, bits: Vec::new() };
        }
        let num_bits = (hashes.len() as u64 * u64::from(bits_per_key)).max(64).div_ceil(8) * 8;
        let num_probes = ((f64::from(bits_per_key) * 0.69).round() as u8).clamp(1, FILTER_PROBES_MAX);
        let mut bits = vec![0u8; (num_bits / 8) as usize];
        for &hash in hashes {
            for bit in probe_bits(hash, num_probes, num_bits as u32) {
                bits[(bit / 8) as usize] |= 1 << (bit % 8);
            }
        }
        Self { num_probes, bits }
    }

    /// Bytes a filter for `num_keys` keys takes.
    pub fn encoded_len(num_keys: usize, bits_per_key: u32) -> usize {
        if bits_per_key == 0 || num_keys == 0 {
            return FILTER_HEADER_LEN;
        }
        FILTER_HEADER_LEN + ((num_keys as u64 * u64::from(bits_per_key)).max(64).div_ceil(8)) as usize
    }

    /// `num_bits`.
    pub fn num_bits(&self) -> u32 {
        (self.bits.len() * 8) as u32
    }

    /// False only when the key is certainly absent.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        let num_bits = self.num_bits();
        if num_bits == 0 || self.num_probes == 0 {
            return true;
        }
        probe_bits(filter_hash(key), self.num_probes, num_bits)
            .all(|bit| self.bits[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
    }

    /// Encodes the filter.
    pub fn encode(&self, writer: &mut Writer) {
        writer.u8(self.num_probes).zeros(3).u32(self.num_bits()).bytes(&self.bits);
    }

    /// Decodes a filter after checking its crc against the footer.
    pub fn decode(bytes: &[u8], offset: u64, footer: &Footer) -> Result<Self, FormatError> {
        const S: &str = "filter";
        let actual = crc32c(bytes);
        if actual != footer.filter_crc32c {
            return Err(FormatError::ChecksumMismatch { structure: S, offset, expected: footer.filter_crc32c, actual });
        }
        let mut reader = Reader::new(bytes, S, offset);
        let num_probes = reader.u8()?;
        reader.reserved(3)?;
        let num_bits = reader.u32()?;
        if num_bits % 8 != 0 || num_probes > FILTER_PROBES_MAX || (num_bits == 0) != (num_probes == 0) {
            return Err(FormatError::invalid(
                S,
                "num_bits",
                offset,
                format!("{num_bits} bits with {num_probes} probes"),
            ));
        }
        let bits = reader.bytes((num_bits / 8) as usize)?.to_vec();
        reader.finish()?;
        Ok(Self { num_probes, bits })
    }
}

fn probe_bits(hash: u64, num_probes: u8, num_bits: u32) -> impl Iterator<Item = u32> {
    let h1 = hash as u32;
    let h2 = (hash >> 32) as u32;
    let modulo = Modulo::new(num_bits);
    (0..u32::from(num_probes)).map(move |i| modulo.of(h1.wrapping_add(i.wrapping_mul(h2))))
}

/// `x % divisor` for any 32-bit `x` by two multiplications instead of a division (Lemire,
/// Kaser and Kurz, "Faster remainder by direct computation", 2019): exact for every 32-bit
/// dividend and divisor. Filters probe seven bits per key, on every lookup and every key
/// `fsck --deep` checks.
#[derive(Debug, Clone, Copy)]
struct Modulo {
    divisor: u64,
    /// ceil(2^64 / divisor), which wraps to 0 for divisor 1 (every remainder is then 0).
    magic: u64,
}

impl Modulo {
    fn new(divisor: u32) -> Self {
        let divisor = u64::from(divisor.max(1));
        Self { divisor, magic: (u64::MAX / divisor).wrapping_add(1) }
    }

    fn of(self, x: u32) -> u32 {
        let fraction = self.magic.wrapping_mul(u64::from(x));
        ((u128::from(fraction) * u128::from(self.divisor)) >> 64) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_remainder_is_the_remainder() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let divisors = [1u32, 2, 3, 7, 64, 4096, 31_337, 1 << 20, (1 << 31) + 11, u32::MAX - 1, u32::MAX];
        for divisor in divisors {
            let modulo = Modulo::new(divisor);
            for dividend in [0, 1, divisor - 1, divisor, divisor.wrapping_add(1), u32::MAX - 1, u32::MAX] {
                assert_eq!(modulo.of(dividend), dividend % divisor, "{dividend} % {divisor}");
            }
            for _ in 0..10_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let dividend = x as u32;
                assert_eq!(modulo.of(dividend), dividend % divisor, "{dividend} % {divisor}");
            }
        }
    }
}
