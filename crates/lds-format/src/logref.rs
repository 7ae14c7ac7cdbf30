//! Log references and log chunks (SPEC.md §8.9, format 1.6, feature `log_tables`): a flush
//! may leave a put's value in the backup log, where its write batch already holds it, and
//! write a 24-byte reference to it instead (TRIAD-LOG).

use crate::batch::decode_entries;
use crate::codec::{Reader, Writer};
use crate::entry::EntryKind;
use crate::error::FormatError;
use crate::log::{read_object_at, AreaContext, LogPosition, ObjectType, HEADER_LEN};

/// Bytes of a log reference (the value of a kind-3 entry).
pub const LOG_REF_LEN: usize = 24;

/// A log reference (SPEC.md §8.9): entry `entry_index` of the write batch with `lsn` at
/// `ofs_object` of the instance's backup log area, a put of `len_value` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRef {
    /// The lsn of the write batch object.
    pub lsn: u64,
    /// Its offset in the backup log area.
    pub ofs_object: u64,
    /// Which entry of the batch, from 0.
    pub entry_index: u32,
    /// The bytes of the referenced value.
    pub len_value: u32,
}

impl LogRef {
    /// Encodes the reference.
    pub fn encode(&self) -> [u8; LOG_REF_LEN] {
        let mut writer = Writer::with_capacity(LOG_REF_LEN);
        writer.u64(self.lsn).u64(self.ofs_object).u32(self.entry_index).u32(self.len_value);
        let mut bytes = [0u8; LOG_REF_LEN];
        bytes.copy_from_slice(writer.as_slice());
        bytes
    }

    /// Decodes a reference: exactly 24 bytes, an object offset that is a multiple of 8, and a
    /// value of at least one byte.
    pub fn decode(bytes: &[u8], offset: u64) -> Result<Self, FormatError> {
        const S: &str = "log reference";
        let mut reader = Reader::new(bytes, S, offset);
        let reference = Self {
            lsn: reader.u64()?,
            ofs_object: reader.u64()?,
            entry_index: reader.u32()?,
            len_value: reader.u32()?,
        };
        reader.finish()?;
        if reference.ofs_object % 8 != 0 {
            return Err(FormatError::invalid(S, "ofs_object", offset, "not a multiple of 8"));
        }
        if reference.len_value == 0 {
            return Err(FormatError::invalid(S, "len_value", offset, "zero"));
        }
        Ok(reference)
    }

    /// Its position in the log.
    pub fn position(&self) -> LogPosition {
        LogPosition { offset: self.ofs_object, lsn: self.lsn }
    }
}

/// True when `value` has the shape of a log reference (a block decoder's check; the fields are
/// checked where the reference is followed).
pub fn is_log_ref_shaped(value: &[u8]) -> bool {
    LogRef::decode(value, 0).is_ok()
}

/// sequence number, and where each entry's key and value lie in the object's bytes, so that a
/// reader following many references into one batch checks and decodes it once.
#[derive(Debug, Clone)]
pub struct LogBatch {
    /// Where it is and what it starts with.
    pub at: BatchAt,
    /// Each entry: kind, and the positions of its key and value in the object's bytes.
    pub entries: Vec<EntrySpans>,
}

/// A write batch's place in the log and its first sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchAt {
    /// The object's offset in the area.
    pub offset: u64,
    /// The object's lsn.
    pub lsn: u64,
    /// The sequence number of its first entry.
    pub first_sequence: u64,
}

/// Where bytes lie in a buffer: start and length.
pub type Span = (u32, u32);

/// A batch entry's kind and where its key and value lie in the object's bytes.
pub type EntrySpans = (EntryKind, Span, Span);

impl LogBatch {
    /// Reads the write batch at `offset` of its area from `object` (the area's bytes from
    /// `offset` on, at least the whole object), checked by SPEC.md §5 and §7.
    pub fn read(object: &[u8], offset: u64, context: &AreaContext) -> Result<Self, FormatError> {
        let mut entries = Vec::new();
        let at = read_entries(object, offset, context, &mut entries)?;
        Ok(Self { at, entries })
    }

    /// The value `reference` names in this batch (whose bytes are `object`), checked by
    /// SPEC.md §8.9 against the referencing entry's `key` and `sequence`.
    pub fn value<'a>(
        &self,
        object: &'a [u8],
        reference: &LogRef,
        context: &AreaContext,
        key: &[u8],
        sequence: u64,
    ) -> Result<&'a [u8], FormatError> {
        entry_value(object, self.at, &self.entries, reference, context, key, sequence)
    }
}

/// Reads the write batch at `offset` as [`LogBatch::read`] does, appending its entries'
/// spans to `entries` (a reader of many batches keeps them all in one vector).
pub fn read_entries(
    object: &[u8],
    offset: u64,
    context: &AreaContext,
    entries: &mut Vec<EntrySpans>,
) -> Result<BatchAt, FormatError> {
    let at = context.ofs_area + offset;
    let raw = read_object_at(object, offset, context)?;
    if raw.object_type != ObjectType::WriteBatch {
        return Err(FormatError::invalid(
            "log reference",
            "ofs_object",
            at,
            format!("names a {}, not a write batch", raw.object_type.name()),
        ));
    }
    let base = object.as_ptr() as usize;
    let position = |part: &[u8]| ((part.as_ptr() as usize - base) as u32, part.len() as u32);
    let first_sequence = decode_entries(raw.payload, at + HEADER_LEN as u64, |kind, key, value| {
        entries.push((kind, position(key), position(value)));
    })?;
    Ok(BatchAt { offset, lsn: raw.header.lsn, first_sequence })
}

/// The value `reference` names in the batch `batch` whose bytes are `object` and whose
/// entries are `entries`, checked by SPEC.md §8.9 against the referencing entry's `key` and
/// `sequence`: the lsn, the entry's existence, kind, key, sequence number and value length.
pub fn entry_value<'a>(
    object: &'a [u8],
    batch: BatchAt,
    entries: &[EntrySpans],
    reference: &LogRef,
    context: &AreaContext,
    key: &[u8],
    sequence: u64,
) -> Result<&'a [u8], FormatError> {
    const S: &str = "log reference";
    let at = context.ofs_area + reference.ofs_object;
    let slice = |(start, len): Span| &object[start as usize..start as usize + len as usize];
    if batch.offset != reference.ofs_object || batch.lsn != reference.lsn {
        return Err(FormatError::invalid(
            S,
            "lsn",
            at,
            format!(
                "the batch there has lsn {}, the reference names {} (the log moved past it)",
                batch.lsn, reference.lsn
            ),
        ));
    }
    let Some(&(kind, entry_key, value)) = entries.get(reference.entry_index as usize) else {
        return Err(FormatError::invalid(
            S,
            "entry_index",
            at,
            format!("{} but the batch has {} entries", reference.entry_index, entries.len()),
        ));
    };
    let entry_sequence = batch.first_sequence + u64::from(reference.entry_index);
    if kind != EntryKind::Put {
        return Err(FormatError::invalid(S, "entry_index", at, format!("names a {}, not a put", kind.name())));
    }
    if slice(entry_key) != key || entry_sequence != sequence {
        return Err(FormatError::invalid(
            S,
            "entry_index",
            at,
            format!("names another entry (sequence {entry_sequence}, not {sequence}, or another key)"),
        ));
    }
    if u64::from(value.1) != u64::from(reference.len_value) {
        return Err(FormatError::invalid(
            S,
            "len_value",
            at,
            format!("{} but the entry's value has {} bytes", reference.len_value, value.1),
        ));
    }
    Ok(slice(value))
}

/// The value `reference` names, checked by SPEC.md §8.9: `object` holds the backup log area's
/// bytes from `reference.ofs_object` on (at least the whole object), `context` is the area of
/// the chunk's instance, and `key` and `sequence` are the referencing entry's.
pub fn resolve<'a>(
    reference: &LogRef,
    object: &'a [u8],
    context: &AreaContext,
    key: &[u8],
    sequence: u64,
) -> Result<&'a [u8], FormatError> {
    LogBatch::read(object, reference.ofs_object, context)?.value(object, reference, context, key, sequence)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchEntry, WriteBatchRecord};
    use crate::geometry::LogKind;
    use crate::log::{encode_object, NewObject};

    fn context() -> AreaContext {
        AreaContext {
            kind: LogKind::Backup,
            instance: 0,
            volume_uuid: [7; 16],
            len_area: 64 * 512,
            sector_size: 512,
            ofs_area: 1 << 20,
        }
    }

    /// A backup log area with one batch at offset 512 (lsn 9, sequences 41 and 42).
    fn area() -> Vec<u8> {
        let batch = WriteBatchRecord {
            first_sequence: 41,
            entries: vec![
                BatchEntry { kind: EntryKind::Put, key: b"alpha".to_vec(), value: b"first value".to_vec() },
                BatchEntry { kind: EntryKind::Delete, key: b"beta".to_vec(), value: Vec::new() },
            ],
            synced_lsn_low: 0,
        };
        let context = context();
        let object = NewObject {
            object_type: ObjectType::WriteBatch,
            kind: LogKind::Backup,
            instance: 0,
            sn: 1,
            lsn: 9,
            log_offset: 512,
            volume_uuid: context.volume_uuid,
        };
        let mut area = vec![0u8; context.len_area as usize];
        let bytes = encode_object(&object, &batch.encode());
        area[512..512 + bytes.len()].copy_from_slice(&bytes);
        area
    }

    fn reference() -> LogRef {
        LogRef { lsn: 9, ofs_object: 512, entry_index: 0, len_value: 11 }
    }

    #[test]
    fn round_trip_and_shape() {
        let bytes = reference().encode();
        assert_eq!(LogRef::decode(&bytes, 0), Ok(reference()));
        assert!(is_log_ref_shaped(&bytes));
        assert!(!is_log_ref_shaped(&bytes[..23]), "short");
        let mut unaligned = reference();
        unaligned.ofs_object = 516;
        assert!(LogRef::decode(&unaligned.encode(), 0).is_err());
        let mut empty = reference();
        empty.len_value = 0;
        assert!(LogRef::decode(&empty.encode(), 0).is_err());
    }

    #[test]
    fn a_reference_resolves_to_its_put() {
        let area = area();
        let value = resolve(&reference(), &area[512..], &context(), b"alpha", 41).expect("resolves");
        assert_eq!(value, b"first value");
    }

    #[test]
    fn every_mismatch_is_an_error() {
        let area = area();
        let context = context();
        let object = &area[512..];
        let check = |reference: LogRef, key: &[u8], sequence: u64, field: &str| match resolve(
            &reference, object, &context, key, sequence,
        ) {
            Err(FormatError::InvalidField { field: found, .. }) => assert_eq!(found, field),
            other => panic!("{reference:?} {key:?} {sequence}: {other:?}"),
        };
        check(LogRef { lsn: 10, ..reference() }, b"alpha", 41, "lsn");
        check(LogRef { entry_index: 2, ..reference() }, b"alpha", 41, "entry_index");
        check(LogRef { entry_index: 1, ..reference() }, b"beta", 42, "entry_index");
        check(reference(), b"alpha", 40, "entry_index");
        check(reference(), b"alphb", 41, "entry_index");
        check(LogRef { len_value: 12, ..reference() }, b"alpha", 41, "len_value");
        // Another offset: no object, or one misdirected.
        let moved = LogRef { ofs_object: 1024, ..reference() };
        assert!(resolve(&moved, &area[1024..], &context, b"alpha", 41).is_err());
        assert!(resolve(&moved, object, &context, b"alpha", 41).is_err(), "an object read at the wrong offset");
        // Every flipped byte of the object is caught (header, payload or a field).
        let len = 64 + WriteBatchRecord::default().encoded_len() + 2 * 7 + 5 + 4 + 11;
        for index in 0..len {
            let mut damaged = area.clone();
            damaged[512 + index] ^= 0x40;
            assert!(resolve(&reference(), &damaged[512..], &context, b"alpha", 41).is_err(), "flip at {index}");
        }
        // Bytes that end inside the object.
        assert!(matches!(
            resolve(&reference(), &area[512..600], &context, b"alpha", 41),
            Err(FormatError::Truncated { .. })
        ));
    }
}
