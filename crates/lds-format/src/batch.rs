//! The write batch payload of the backup log (SPEC.md §7).

use crate::codec::{Reader, Writer};
use crate::entry::{EntryKind, SEQUENCE_MAX};
use crate::error::FormatError;

/// Fixed bytes of a batch before its entries.
pub const BATCH_HEADER_LEN: usize = 16;
/// Fixed bytes of an entry before its key and value.
pub const BATCH_ENTRY_FIXED_LEN: usize = 7;
/// One entry of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchEntry {
    /// Put or delete.
    pub kind: EntryKind,
    /// The user key.
    pub key: Vec<u8>,
    /// The value (empty for a delete).
    pub value: Vec<u8>,
}

/// A write batch (SPEC.md §7).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WriteBatchRecord {
    /// Sequence number of the first entry.
    pub first_sequence: u64,
    /// The entries, in order.
    pub entries: Vec<BatchEntry>,
    /// The sync watermark (SPEC.md §7.1): the low 32 bits of an lsn of this log at or below
    /// which every object was durable before this batch was written; 0 claims nothing.
    pub synced_lsn_low: u32,
}

impl WriteBatchRecord {
    /// Bytes the payload takes.
    pub fn encoded_len(&self) -> usize {
        entries_encoded_len(&self.entries)
    }

    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::with_capacity(self.encoded_len());
        writer
            .u64(self.first_sequence)
            .u32(u32::try_from(self.entries.len()).unwrap_or(u32::MAX))
            .u32(self.synced_lsn_low);
        for entry in &self.entries {
            encode_entry(&mut writer, entry.kind, &entry.key, &entry.value);
        }
        writer.into_bytes()
    }

    /// Decodes the payload.
    pub fn decode(payload: &[u8], offset: u64) -> Result<Self, FormatError> {
        let mut entries = Vec::new();
        let first_sequence = decode_entries(payload, offset, |kind, key, value| {
            entries.push(BatchEntry { kind, key: key.to_vec(), value: value.to_vec() });
        })?;
        Ok(Self { first_sequence, entries, synced_lsn_low: synced_lsn_low(payload) })
    }
}

/// The watermark field of a batch payload (bytes 12..16; 0 when the payload is shorter).
pub fn synced_lsn_low(payload: &[u8]) -> u32 {
    payload.get(12..16).map_or(0, |bytes| u32::from_le_bytes(bytes.try_into().unwrap_or([0; 4])))
}

/// The watermark to write in a batch appended at or after lsn `next_lsn` when every object up
/// to lsn `durable` is durable (SPEC.md §7.1): its low 32 bits, or those of `durable - 1` (a
/// weaker claim, still true) when they are 0, which means "no claim". No claim either when
/// the batch is 2^31 lsns or more past it, where the low bits would name a later lsn.
pub fn watermark_for(durable: u64, next_lsn: u64) -> u32 {
    if next_lsn.saturating_sub(durable) >= 1 << 31 {
        return 0;
    }
    match durable as u32 {
        0 => durable.saturating_sub(1) as u32,
        low => low,
    }
}

/// The lsn a watermark names in a batch whose own lsn is `lsn`: the largest lsn below `lsn`
/// whose low 32 bits are `low`; `None` for 0 (no claim) or when no such lsn exists.
pub fn synced_lsn(lsn: u64, low: u32) -> Option<u64> {
    if low == 0 {
        return None;
    }
    let below = lsn.checked_sub(1)?;
    below.checked_sub(u64::from((below as u32).wrapping_sub(low)))
}

/// Bytes of a batch payload holding `entries`.
pub fn entries_encoded_len(entries: &[BatchEntry]) -> usize {
    BATCH_HEADER_LEN
        + entries.iter().map(|entry| BATCH_ENTRY_FIXED_LEN + entry.key.len() + entry.value.len()).sum::<usize>()
}

/// An entry borrowed from its owner: what the engine's write path encodes and inserts,
/// without copying the key and value first.
pub type EntryRef<'a> = (EntryKind, &'a [u8], &'a [u8]);

/// Bytes of the payload of a batch of `entries`.
pub fn refs_encoded_len(entries: &[EntryRef<'_>]) -> usize {
    BATCH_HEADER_LEN
        + entries.iter().map(|(_, key, value)| BATCH_ENTRY_FIXED_LEN + key.len() + value.len()).sum::<usize>()
}

/// Encodes the payload of a batch of borrowed entries (SPEC.md §7), as
/// [`WriteBatchRecord::encode`] does for owned ones.
pub fn encode_refs(first_sequence: u64, entries: &[EntryRef<'_>], synced_lsn_low: u32) -> Vec<u8> {
    let mut writer = Writer::with_capacity(refs_encoded_len(entries));
    writer.u64(first_sequence).u32(u32::try_from(entries.len()).unwrap_or(u32::MAX)).u32(synced_lsn_low);
    for &(kind, key, value) in entries {
        encode_entry(&mut writer, kind, key, value);
    }
    writer.into_bytes()
}

/// Appends one entry in the batch encoding (used by the engine's write path directly).
pub fn encode_entry(writer: &mut Writer, kind: EntryKind, key: &[u8], value: &[u8]) {
    writer
        .u8(kind.code())
        .u16(u16::try_from(key.len()).unwrap_or(u16::MAX))
        .u32(u32::try_from(value.len()).unwrap_or(u32::MAX))
        .bytes(key)
        .bytes(value);
}

/// Decodes a batch payload, calling `visit` for each entry without copying; returns
/// `first_sequence`.
pub fn decode_entries<'a>(
    payload: &'a [u8],
    offset: u64,
    mut visit: impl FnMut(EntryKind, &'a [u8], &'a [u8]),
) -> Result<u64, FormatError> {
    const S: &str = "write batch";
    let mut reader = Reader::new(payload, S, offset);
    let first_sequence = reader.u64()?;
    let num_entries = reader.u32()?;
    reader.u32()?; // the sync watermark (SPEC.md §7.1), read by `synced_lsn_low`
    let count = reader.count(u64::from(num_entries), BATCH_ENTRY_FIXED_LEN, "num_entries")?;
    if count == 0 {
        return Err(FormatError::invalid(S, "num_entries", offset, "zero"));
    }
    if first_sequence == 0 || first_sequence.checked_add(count as u64 - 1).is_none_or(|last| last > SEQUENCE_MAX) {
        return Err(FormatError::invalid(
            S,
            "first_sequence",
            offset,
            format!("{first_sequence} with {count} entries leaves 1..2^56"),
        ));
    }
    for _ in 0..count {
        let entry_offset = reader.offset();
        let code = reader.u8()?;
        // A log reference lives in log chunks only (SPEC.md §7, §8.9).
        let kind = EntryKind::from_code(code)
            .filter(|kind| *kind != EntryKind::LogRef)
            .ok_or_else(|| FormatError::invalid(S, "kind", entry_offset, format!("unknown kind {code}")))?;
        let len_key = reader.u16()?;
        let len_value = reader.u32()?;
        if len_key == 0 {
            return Err(FormatError::invalid(S, "len_key", entry_offset, "empty key"));
        }
        if kind == EntryKind::Delete && len_value != 0 {
            return Err(FormatError::invalid(S, "len_value", entry_offset, "a delete has a value"));
        }
        let key = reader.bytes(usize::from(len_key))?;
        let value = reader.bytes(len_value as usize)?;
        if kind == EntryKind::Pointer {
            crate::value::ValuePointer::decode(
                value,
                entry_offset + BATCH_ENTRY_FIXED_LEN as u64 + u64::from(len_key),
            )?;
        }
        visit(kind, key, value);
    }
    reader.finish()?;
    Ok(first_sequence)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> WriteBatchRecord {
        WriteBatchRecord {
            first_sequence: 41,
            entries: vec![
                BatchEntry { kind: EntryKind::Put, key: b"alpha".to_vec(), value: b"one".to_vec() },
                BatchEntry { kind: EntryKind::Delete, key: b"beta".to_vec(), value: Vec::new() },
            ],
            synced_lsn_low: 0x1234_5678,
        }
    }

    #[test]
    fn watermark_names_the_durable_lsn() {
        // (durable lsn, the batch's lsn): the watermark written for the first reads back as
        // itself, or one less where its low 32 bits are 0 (0 means no claim).
        for (durable, lsn) in
            [(1, 2), (5, 90), (u64::from(u32::MAX), 1 << 32), (1 << 32, (1 << 32) + 7), (3 << 32, (3 << 32) + 9)]
        {
            let low = watermark_for(durable, lsn);
            let read = synced_lsn(lsn, low).expect("a claim");
            assert!(read < lsn, "{durable}: claims {read} at or past the batch's own lsn {lsn}");
            let expected = if durable as u32 == 0 { durable - 1 } else { durable };
            assert_eq!(read, expected, "durable {durable}, batch lsn {lsn}");
        }
        assert_eq!(watermark_for(0, 1), 0);
        assert_eq!(watermark_for(5, 5 + (1 << 31)), 0, "too far behind to name");
        assert_eq!(synced_lsn(100, 0), None, "0 claims nothing");
        assert_eq!(synced_lsn(3, 7), None, "no lsn below 3 ends in 7");
        assert_eq!(synced_lsn(1 << 32, 1), Some(1));
    }

    #[test]
    fn round_trip() {
        let batch = batch();
        let bytes = batch.encode();
        assert_eq!(bytes.len(), batch.encoded_len());
        assert_eq!(WriteBatchRecord::decode(&bytes, 0), Ok(batch));
    }

    #[test]
    fn every_prefix_and_extension_fails() {
        let bytes = batch().encode();
        for len in 0..bytes.len() {
            assert!(WriteBatchRecord::decode(&bytes[..len], 0).is_err());
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(WriteBatchRecord::decode(&longer, 0).is_err());
    }

    #[test]
    fn a_log_reference_is_no_batch_entry() {
        // Kind 3 lives in log chunks only (SPEC.md §7, §8.9).
        let mut bytes = batch().encode();
        assert_eq!(bytes[16], EntryKind::Put.code());
        bytes[16] = EntryKind::LogRef.code();
        assert!(matches!(WriteBatchRecord::decode(&bytes, 0), Err(FormatError::InvalidField { field: "kind", .. })));
    }

    #[test]
    fn huge_count_is_rejected_before_allocating() {
        let mut bytes = batch().encode();
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(WriteBatchRecord::decode(&bytes, 0), Err(FormatError::CountTooLarge { .. })));
    }
}
