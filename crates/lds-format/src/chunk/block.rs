//! Blocks (SPEC.md §8.2): sorted entries, fixed or (format 1.7) compact, and a trailer with
//! their count and crc32c.

use crate::codec::{crc32c, Reader};
use crate::entry::{compare_internal, pack_seq_kind, unpack_seq_kind, EntryKind, SEQUENCE_MAX};
use crate::error::FormatError;
use crate::logref::is_log_ref_shaped;
use crate::value::is_pointer_shaped;

/// Bytes of a block trailer.
pub const BLOCK_TRAILER_LEN: usize = 8;
/// Fixed bytes of an entry before key and value.
pub const ENTRY_FIXED_LEN: usize = 14;
/// Bit 31 of a block trailer's `num_entries` (format 1.7, feature `compact_entries`): the
/// block's entries are compact, their header three varints (SPEC.md §8.2).
pub const BLOCK_FLAG_COMPACT: u32 = 1 << 31;
/// Most bytes a compact entry's header takes: sequence and kind in 9 varint bytes (2^59),
/// `len_key` in 3 (2^16), `len_value` in 5 (2^32).
pub const COMPACT_ENTRY_HEADER_MAX_LEN: usize = 17;
/// Fewest bytes a compact entry takes: three 1-byte varints and a 1-byte key.
pub(crate) const COMPACT_ENTRY_MIN_LEN: usize = 4;

/// Bytes of `value` as an LEB128 varint.
fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The varint at `bytes[*at..]` of at most `max_len` bytes, in its shortest form; advances
/// `at`. `Err(true)` when the bytes end inside it, `Err(false)` when it is longer than
/// `max_len` or than its value needs.
#[inline]
fn get_varint(bytes: &[u8], at: &mut usize, max_len: usize) -> Result<u64, bool> {
    // Most lengths are one byte.
    match bytes.get(*at) {
        Some(&byte) if byte < 0x80 => {
            *at += 1;
            return Ok(u64::from(byte));
        }
        None => return Err(true),
        Some(_) => {}
    }
    let mut value = 0u64;
    for index in 0..max_len {
        let Some(&byte) = bytes.get(*at + index) else {
            return Err(true);
        };
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte < 0x80 {
            if byte == 0 && index > 0 {
                return Err(false);
            }
            *at += index + 1;
            return Ok(value);
        }
    }
    Err(false)
}

/// The varint that leads a compact entry (SPEC.md §8.2): `(sequence << 1) | 1` for a put,
/// the common kind, `(sequence << 3) | (kind << 1)` for the others, so that a put's
/// sequence below 2^20 takes 3 bytes.
fn compact_tag(sequence: u64, kind: EntryKind) -> u64 {
    match kind {
        EntryKind::Put => (sequence << 1) | 1,
        _ => (sequence << 3) | (u64::from(kind.code()) << 1),
    }
}

/// The `seq_kind` of a compact entry's tag; `None` for a tag that names a put the long way
/// or a sequence above `SEQUENCE_MAX` (which `seq_kind` could not hold).
fn compact_seq_kind(tag: u64) -> Option<u64> {
    if tag & 1 == 1 {
        let sequence = tag >> 1;
        return (sequence <= SEQUENCE_MAX).then(|| pack_seq_kind(sequence, EntryKind::Put));
    }
    let (sequence, code) = (tag >> 3, (tag >> 1) & 3);
    (sequence <= SEQUENCE_MAX && code != u64::from(EntryKind::Put.code())).then_some((sequence << 8) | code)
}

/// Bytes of an entry's header before its key: 14 fixed bytes, or (format 1.7) three varints.
pub fn entry_header_len(compact: bool, sequence: u64, kind: EntryKind, len_key: usize, len_value: usize) -> usize {
    if compact {
        varint_len(compact_tag(sequence, kind)) + varint_len(len_key as u64) + varint_len(len_value as u64)
    } else {
        ENTRY_FIXED_LEN
    }
}

/// Appends one block entry (SPEC.md §8.2): fixed, or compact (`compact`, format 1.7). The
/// key is at most 65535 bytes and the value below 4 GiB (§16).
pub fn encode_entry(out: &mut Vec<u8>, compact: bool, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
    debug_assert!(key.len() <= usize::from(u16::MAX) && u32::try_from(value.len()).is_ok() && sequence <= SEQUENCE_MAX);
    if compact {
        // The three varints into one buffer, then one copy (a merge writes every entry).
        let mut header = [0u8; COMPACT_ENTRY_HEADER_MAX_LEN];
        let mut len = 0;
        for mut field in [compact_tag(sequence, kind), key.len() as u64, value.len() as u64] {
            while field >= 0x80 {
                header[len] = field as u8 | 0x80;
                field >>= 7;
                len += 1;
            }
            header[len] = field as u8;
            len += 1;
        }
        out.extend_from_slice(&header[..len]);
    } else {
        out.extend_from_slice(&pack_seq_kind(sequence, kind).to_le_bytes());
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// One decoded entry, borrowing the block's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// User key.
    pub key: &'a [u8],
    /// Sequence number.
    pub sequence: u64,
    /// Put or delete.
    pub kind: EntryKind,
    /// Value (empty for a delete).
    pub value: &'a [u8],
}

/// Why an entry header could not be read (`entry_header`).
pub(crate) enum BadHeader {
    /// The bytes end at `at`, `needed` short.
    Truncated { at: usize, needed: usize },
    /// A compact entry's varint `field` is longer than its field allows, too large, or not
    /// in its shortest form.
    Varint(&'static str),
}

/// The header of the entry at `body[at..]` (SPEC.md §8.2): `(seq_kind, len_key, len_value,
/// where the key starts)`; `compact` (block trailer flag) says which encoding.
pub(crate) fn entry_header(body: &[u8], at: usize, compact: bool) -> Result<(u64, usize, usize, usize), BadHeader> {
    if compact {
        let mut cursor = at;
        let mut varint = |field: &'static str, max_len: usize, limit: u64| match get_varint(body, &mut cursor, max_len)
        {
            Ok(value) if value <= limit => Ok(value),
            Err(true) => Err(BadHeader::Truncated { at: body.len(), needed: 1 }),
            _ => Err(BadHeader::Varint(field)),
        };
        let tag = varint("seq_kind", 9, (SEQUENCE_MAX << 3) | 7)?;
        let seq_kind = compact_seq_kind(tag).ok_or(BadHeader::Varint("seq_kind"))?;
        let len_key = varint("len_key", 3, u64::from(u16::MAX))? as usize;
        let len_value = varint("len_value", 5, u64::from(u32::MAX))? as usize;
        Ok((seq_kind, len_key, len_value, cursor))
    } else {
        let Some(fixed) = body.get(at..at + ENTRY_FIXED_LEN) else {
            return Err(BadHeader::Truncated { at, needed: ENTRY_FIXED_LEN });
        };
        let seq_kind =
            u64::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3], fixed[4], fixed[5], fixed[6], fixed[7]]);
        let len_key = usize::from(u16::from_le_bytes([fixed[8], fixed[9]]));
        let len_value = u32::from_le_bytes([fixed[10], fixed[11], fixed[12], fixed[13]]) as usize;
        Ok((seq_kind, len_key, len_value, at + ENTRY_FIXED_LEN))
    }
}

/// Checks a block's trailer crc and decodes its entries in order.
pub fn decode_block(bytes: &[u8], offset: u64) -> Result<Vec<EntryRef<'_>>, FormatError> {
    let mut entries = Vec::new();
    visit_block(bytes, offset, |entry| entries.push(entry))?;
    Ok(entries)
}

/// Checks a block's crc and calls `visit` for each entry, in order, checking that entries are
/// sorted.
pub fn visit_block<'a>(bytes: &'a [u8], offset: u64, visit: impl FnMut(EntryRef<'a>)) -> Result<u32, FormatError> {
    visit_block_checked(bytes, offset, true, visit)
}

/// As [`visit_block`], with the order of entries checked only when `sorted` (repair reads the
/// entries of a block whose checksum holds even when they are out of order, and sorts them).
pub fn visit_block_checked<'a>(
    bytes: &'a [u8],
    offset: u64,
    sorted: bool,
    mut visit: impl FnMut(EntryRef<'a>),
) -> Result<u32, FormatError> {
    const S: &str = "block";
    if bytes.len() < BLOCK_TRAILER_LEN {
        return Err(FormatError::Truncated {
            structure: S,
            offset,
            needed: BLOCK_TRAILER_LEN as u64,
            available: bytes.len() as u64,
        });
    }
    let crc_at = bytes.len() - 4;
    let stored = u32::from_le_bytes([bytes[crc_at], bytes[crc_at + 1], bytes[crc_at + 2], bytes[crc_at + 3]]);
    let actual = crc32c(&bytes[..crc_at]);
    if stored != actual {
        return Err(FormatError::ChecksumMismatch { structure: S, offset, expected: stored, actual });
    }
    let count_at = bytes.len() - BLOCK_TRAILER_LEN;
    let trailer_count =
        u32::from_le_bytes([bytes[count_at], bytes[count_at + 1], bytes[count_at + 2], bytes[count_at + 3]]);
    let compact = trailer_count & BLOCK_FLAG_COMPACT != 0;
    let num_entries = trailer_count & !BLOCK_FLAG_COMPACT;
    let body = &bytes[..count_at];
    let entry_min = if compact { COMPACT_ENTRY_MIN_LEN } else { ENTRY_FIXED_LEN + 1 };
    let count = Reader::new(body, S, offset).count(u64::from(num_entries), entry_min, "num_entries")?;
    if count == 0 {
        return Err(FormatError::invalid(S, "num_entries", offset, "an empty block"));
    }
    // A tight parse (reads decode every block they load): each entry's header, then its key
    // and value, every length checked against the bytes that remain before it is used.
    let truncated = |at: usize, needed: usize| FormatError::Truncated {
        structure: S,
        offset: offset + at as u64,
        needed: needed as u64,
        available: (body.len() - at) as u64,
    };
    let mut at = 0usize;
    let mut previous: Option<(&[u8], u64)> = None;
    for _ in 0..count {
        let entry_offset = offset + at as u64;
        let (seq_kind, len_key, len_value, key_start) = entry_header(body, at, compact).map_err(|bad| match bad {
            BadHeader::Truncated { at, needed } => truncated(at, needed),
            BadHeader::Varint(field) => {
                FormatError::invalid(S, field, entry_offset, "a varint longer or larger than its field allows")
            }
        })?;
        let Some(key) = body.get(key_start..key_start + len_key) else {
            return Err(truncated(key_start, len_key));
        };
        let value_start = key_start + len_key;
        let Some(value) = value_start.checked_add(len_value).and_then(|end| body.get(value_start..end)) else {
            return Err(truncated(value_start, len_value));
        };
        at = value_start + len_value;
        let (sequence, kind) = unpack_seq_kind(seq_kind)
            .ok_or_else(|| FormatError::invalid(S, "seq_kind", entry_offset, "unknown kind"))?;
        if key.is_empty() {
            return Err(FormatError::invalid(S, "len_key", entry_offset, "empty key"));
        }
        if kind == EntryKind::Pointer && !is_pointer_shaped(value) {
            return Err(FormatError::invalid(
                S,
                "len_value",
                entry_offset,
                "a pointer entry whose value is no pointer",
            ));
        }
        if kind == EntryKind::LogRef && !is_log_ref_shaped(value) {
            return Err(FormatError::invalid(
                S,
                "len_value",
                entry_offset,
                "a log reference entry whose value is no log reference",
            ));
        }
        if let Some((previous_key, previous_seq_kind)) = previous.filter(|_| sorted) {
            if compare_internal(previous_key, previous_seq_kind, key, seq_kind) != std::cmp::Ordering::Less {
                return Err(FormatError::invalid(S, "key", entry_offset, "entries are not sorted"));
            }
        }
        previous = Some((key, seq_kind));
        visit(EntryRef { key, sequence, kind, value });
    }
    if at != body.len() {
        return Err(FormatError::TrailingBytes {
            structure: S,
            offset: offset + at as u64,
            len: (body.len() - at) as u64,
        });
    }
    Ok(num_entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_are_shortest_form_and_bounded() {
        for value in [0u64, 1, 127, 128, 16_383, 16_384, u64::from(u32::MAX), (SEQUENCE_MAX << 3) | 7, u64::MAX] {
            let mut bytes = Vec::new();
            put_varint(&mut bytes, value);
            assert_eq!(bytes.len(), varint_len(value), "{value}");
            let mut at = 0;
            assert_eq!(get_varint(&bytes, &mut at, 10), Ok(value));
            assert_eq!(at, bytes.len());
            // One byte short: truncated.
            let mut at = 0;
            assert_eq!(get_varint(&bytes[..bytes.len() - 1], &mut at, 10), Err(true), "{value}");
            if bytes.len() > 1 {
                // Longer than the field allows.
                assert_eq!(get_varint(&bytes, &mut 0, bytes.len() - 1), Err(false), "{value}");
            }
        }
        // Not the shortest form: 1 written as two bytes.
        assert_eq!(get_varint(&[0x81, 0x00], &mut 0, 10), Err(false));
    }

    #[test]
    fn a_compact_tag_names_every_kind_once() {
        for sequence in [0u64, 1, (1 << 19) - 1, 1 << 19, SEQUENCE_MAX] {
            for kind in [EntryKind::Delete, EntryKind::Put, EntryKind::Pointer, EntryKind::LogRef] {
                let tag = compact_tag(sequence, kind);
                assert_eq!(compact_seq_kind(tag), Some(pack_seq_kind(sequence, kind)), "{sequence} {kind:?}");
            }
        }
        // A put below 2^20 takes 3 bytes, a delete 4.
        assert_eq!(varint_len(compact_tag((1 << 20) - 1, EntryKind::Put)), 3);
        assert_eq!(varint_len(compact_tag((1 << 20) - 1, EntryKind::Delete)), 4);
        // A put spelt the long way is refused, and so is a sequence above 2^56 - 1 (which
        // `seq_kind` would silently cut to another sequence).
        assert_eq!(compact_seq_kind((5 << 3) | (1 << 1)), None);
        assert_eq!(compact_seq_kind(((SEQUENCE_MAX + 6) << 1) | 1), None);
        assert_eq!(compact_seq_kind((SEQUENCE_MAX + 1) << 3), None);
        let mut block = Vec::new();
        block.extend_from_slice(&[0x8b, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02, 1, 1, b'k', b'v']);
        let block = compact_block(&block, 1);
        let error = decode_block(&block, 0).expect_err("a put at sequence 2^56 + 5");
        assert!(matches!(error, FormatError::InvalidField { field: "seq_kind", .. }), "{error:?}");
    }

    /// A one-block slot image of `entries` with the compact flag, crc fixed after `edit`.
    fn compact_block(body: &[u8], num_entries: u32) -> Vec<u8> {
        let mut block = body.to_vec();
        block.extend_from_slice(&(num_entries | BLOCK_FLAG_COMPACT).to_le_bytes());
        let crc = crc32c(&block);
        block.extend_from_slice(&crc.to_le_bytes());
        block
    }

    #[test]
    fn a_compact_block_with_a_bad_varint_is_refused_naming_the_field() {
        // tag (sequence 5, put), len_key 3, len_value 2, key, value.
        let good = [(5 << 1) | 1, 3, 2, b'a', b'b', b'c', b'x', b'y'];
        let block = compact_block(&good, 1);
        let entries = decode_block(&block, 0).expect("decodes");
        assert_eq!(entries, vec![EntryRef { key: b"abc", sequence: 5, kind: EntryKind::Put, value: b"xy" }]);
        // len_key in two bytes where one does.
        let overlong = [(5 << 1) | 1, 0x83, 0x00, 2, b'a', b'b', b'c', b'x', b'y'];
        let error = decode_block(&compact_block(&overlong, 1), 4096).expect_err("overlong");
        assert!(matches!(error, FormatError::InvalidField { field: "len_key", offset: 4096, .. }), "{error:?}");
        // len_key above 65535.
        let large = [(5 << 1) | 1, 0x80, 0x80, 0x04, 2, b'a'];
        let error = decode_block(&compact_block(&large, 1), 0).expect_err("too large");
        assert!(matches!(error, FormatError::InvalidField { field: "len_key", .. }), "{error:?}");
        // The value runs past the block.
        let short = [(5 << 1) | 1, 3, 9, b'a', b'b', b'c', b'x'];
        let error = decode_block(&compact_block(&short, 1), 0).expect_err("truncated");
        assert!(matches!(error, FormatError::Truncated { .. }), "{error:?}");
        // The same bytes without the flag are not read as compact.
        let mut unflagged = good.to_vec();
        unflagged.extend_from_slice(&1u32.to_le_bytes());
        let crc = crc32c(&unflagged);
        unflagged.extend_from_slice(&crc.to_le_bytes());
        assert!(decode_block(&unflagged, 0).is_err());
    }
}
