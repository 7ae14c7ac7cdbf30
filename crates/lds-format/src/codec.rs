//! Bounded little-endian reading and writing (SPEC.md §1: fixed-width little-endian integers).
//!
//! `Reader` never panics: every read checks the bytes that remain and returns
//! `FormatError::Truncated` naming the structure and offset. Counts are checked against the
//! remaining bytes before anything is allocated (`Reader::count`).

use crate::error::FormatError;

/// A cursor over a byte slice that reports where it fails.
pub struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    structure: &'static str,
    /// Offset of `bytes[0]` in the enclosing area, for error messages.
    base_offset: u64,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`, which start at `base_offset` of the enclosing area.
    pub fn new(bytes: &'a [u8], structure: &'static str, base_offset: u64) -> Self {
        Self { bytes, position: 0, structure, base_offset }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    /// The current position relative to the start of the reader.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The absolute offset of the current position, for error messages.
    pub fn offset(&self) -> u64 {
        self.base_offset + self.position as u64
    }

    /// The structure this reader decodes.
    pub fn structure(&self) -> &'static str {
        self.structure
    }

    /// Takes the next `len` bytes.
    pub fn bytes(&mut self, len: usize) -> Result<&'a [u8], FormatError> {
        if len > self.remaining() {
            return Err(FormatError::Truncated {
                structure: self.structure,
                offset: self.offset(),
                needed: len as u64,
                available: self.remaining() as u64,
            });
        }
        let slice = &self.bytes[self.position..self.position + len];
        self.position += len;
        Ok(slice)
    }

    /// Takes the next `N` bytes as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let slice = self.bytes(N)?;
        let mut array = [0u8; N];
        array.copy_from_slice(slice);
        Ok(array)
    }

    /// Reads a `u8`.
    pub fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.array::<1>()?[0])
    }

    /// Reads a little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, FormatError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// Reads a little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Reads a `u16`-length-prefixed byte string (SPEC.md §1).
    pub fn key(&mut self) -> Result<&'a [u8], FormatError> {
        let len = self.u16()?;
        self.bytes(usize::from(len))
    }

    /// Reads `len` reserved bytes and checks that they are zero (SPEC.md §1).
    pub fn reserved(&mut self, len: usize) -> Result<(), FormatError> {
        let offset = self.offset();
        let bytes = self.bytes(len)?;
        if bytes.iter().any(|&byte| byte != 0) {
            return Err(FormatError::ReservedNotZero { structure: self.structure, offset });
        }
        Ok(())
    }

    /// Checks that a count of items, each at least `min_item_len` bytes, fits in the bytes
    /// that remain, before the caller allocates for it.
    pub fn count(&self, count: u64, min_item_len: usize, field: &'static str) -> Result<usize, FormatError> {
        let needed = count.saturating_mul(min_item_len as u64);
        if needed > self.remaining() as u64 {
            return Err(FormatError::CountTooLarge {
                structure: self.structure,
                field,
                offset: self.offset(),
                count,
                available: self.remaining() as u64,
            });
        }
        usize::try_from(count).map_err(|_| FormatError::CountTooLarge {
            structure: self.structure,
            field,
            offset: self.offset(),
            count,
            available: self.remaining() as u64,
        })
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), FormatError> {
        if self.remaining() != 0 {
            return Err(FormatError::TrailingBytes {
                structure: self.structure,
                offset: self.offset(),
                len: self.remaining() as u64,
            });
        }
        Ok(())
    }
}

/// Appends little-endian fields to a byte vector.
#[derive(Default)]
pub struct Writer {
    bytes: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty writer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self { bytes: Vec::with_capacity(capacity) }
    }

    /// Appends a `u8`.
    pub fn u8(&mut self, value: u8) -> &mut Self {
        self.bytes.push(value);
        self
    }

    /// Appends a `u16`.
    pub fn u16(&mut self, value: u16) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Appends a `u32`.
    pub fn u32(&mut self, value: u32) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Appends a `u64`.
    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// Appends raw bytes.
    pub fn bytes(&mut self, value: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(value);
        self
    }

    /// Appends `len` zero bytes.
    pub fn zeros(&mut self, len: usize) -> &mut Self {
        self.bytes.resize(self.bytes.len() + len, 0);
        self
    }

    /// Appends a `u16`-length-prefixed byte string. The caller guarantees `len <= u16::MAX`
    /// (keys are checked when they enter the engine).
    pub fn key(&mut self, value: &[u8]) -> &mut Self {
        let len = u16::try_from(value.len()).unwrap_or(u16::MAX);
        self.u16(len);
        self.bytes(&value[..usize::from(len)])
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The written bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The written bytes, borrowed.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    /// Mutable access, to patch checksums after the fact.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes
    }
}

/// A count as the u32 a structure stores it in (every list a writer encodes is far shorter).
pub(crate) fn count_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// `x` rounded up to a multiple of 8 (SPEC.md §1).
pub fn align8(x: u64) -> u64 {
    x.div_ceil(8) * 8
}

/// `x` rounded up to a multiple of `unit` (a power of two or any positive value).
pub fn align_up(x: u64, unit: u64) -> u64 {
    x.div_ceil(unit) * unit
}

/// CRC-32C (Castagnoli), SPEC.md §1.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// Orders user keys as byte strings (SPEC.md §8.1), 8 bytes at a time: each 8-byte word both
/// keys have is compared as one big-endian integer, so that comparisons of short keys (16
/// bytes, db_bench's) need no call to `memcmp`.
#[inline]
pub fn compare_keys(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (mut a, mut b) = (a, b);
    // Bounded by the shorter key: each round consumes 8 bytes of both.
    while let (Some((x, rest_a)), Some((y, rest_b))) = (a.split_first_chunk::<8>(), b.split_first_chunk::<8>()) {
        let (x, y) = (u64::from_be_bytes(*x), u64::from_be_bytes(*y));
        if x != y {
            return x.cmp(&y);
        }
        (a, b) = (rest_a, rest_b);
    }
    a.cmp(b)
}

/// A key for messages: quoted and escaped when it is printable ASCII, else `0x` and hex.
pub fn display_key(key: &[u8]) -> String {
    if key.iter().all(|byte| byte.is_ascii_graphic() || *byte == b' ') {
        format!("\"{}\"", key.escape_ascii())
    } else {
        format!("0x{}", crate::error::hex(key))
    }
}

#[cfg(test)]
mod compare_tests {
    use super::compare_keys;

    #[test]
    fn compare_keys_orders_as_bytes() {
        let keys: [&[u8]; 9] = [
            b"",
            b"a",
            b"abcdefgh",
            b"abcdefgh\0",
            b"abcdefghi",
            b"abcdefgi",
            b"b",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        ];
        for a in keys {
            for b in keys {
                assert_eq!(compare_keys(a, b), a.cmp(b), "{a:?} {b:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    #[test]
    fn reader_reports_truncation_with_offset() {
        let bytes = [1u8, 2, 3];
        let mut reader = Reader::new(&bytes, "test", 100);
        assert_eq!(reader.u16().ok(), Some(0x0201));
        let error = reader.u16().err();
        assert!(matches!(error, Some(FormatError::Truncated { offset: 102, needed: 2, available: 1, .. })));
    }

    #[test]
    fn count_rejects_impossible_counts_before_allocating() {
        let bytes = [0u8; 16];
        let reader = Reader::new(&bytes, "test", 0);
        assert_eq!(reader.count(2, 8, "items").ok(), Some(2));
        assert!(reader.count(3, 8, "items").is_err());
        assert!(reader.count(u64::MAX, 1, "items").is_err());
    }

    #[test]
    fn reserved_bytes_must_be_zero() {
        let bytes = [0u8, 0, 1];
        let mut reader = Reader::new(&bytes, "test", 0);
        assert!(reader.reserved(2).is_ok());
        let mut reader = Reader::new(&bytes, "test", 0);
        assert!(matches!(reader.reserved(3), Err(FormatError::ReservedNotZero { offset: 0, .. })));
    }

    #[test]
    fn alignment() {
        assert_eq!(align8(0), 0);
        assert_eq!(align8(1), 8);
        assert_eq!(align8(64), 64);
        assert_eq!(align_up(4097, 4096), 8192);
    }
}
