//! Following log references (SPEC.md §8.9, TRIAD-LOG): naming a memtable's puts in the backup
//! log at a flush, and reading the values back, one batch at a time for a lookup or a whole
//! retained region at once for a merge. Reads the device; decides nothing (the `logs` module
//! does).

use std::collections::HashMap;

use lds_format::log::{ring_distance, AreaContext, ObjectHeader, HEADER_LEN};
use lds_format::logref::{entry_value, read_entries, BatchAt, EntrySpans, LogRef};
use lds_format::version::Version;
use lds_volume::BlockDevice;

use crate::error::{Error, Result};
use crate::memtable::BatchPosition;

/// The reference to entry `sequence` among `batches` (sorted by first sequence), for a value
/// of `len_value` bytes; `None` when no batch holds it.
pub(crate) fn reference_of(batches: &[BatchPosition], sequence: u64, len_value: usize) -> Option<LogRef> {
    let index = batches.partition_point(|batch| batch.first_sequence <= sequence).checked_sub(1)?;
    let batch = &batches[index];
    let entry_index = sequence - batch.first_sequence;
    if entry_index >= u64::from(batch.num_entries) {
        return None;
    }
    Some(LogRef {
        lsn: batch.position.lsn,
        ofs_object: batch.position.offset,
        entry_index: entry_index as u32,
        len_value: u32::try_from(len_value).ok()?,
    })
}

fn corrupt(device: &dyn BlockDevice, source: lds_format::FormatError) -> Error {
    Error::Corrupt { path: device.name().display().to_string(), source }
}

/// The value the log reference `value` of the entry (`key`, `sequence`) names, read from the
/// backup log area `context` and checked (SPEC.md §8.9).
pub(crate) fn read(
    device: &dyn BlockDevice,
    context: &AreaContext,
    key: &[u8],
    sequence: u64,
    value: &[u8],
) -> Result<Vec<u8>> {
    let reference = LogRef::decode(value, 0).map_err(|error| corrupt(device, error))?;
    let object = read_object_bytes(device, context, reference.ofs_object)?;
    let found = lds_format::logref::resolve(&reference, &object, context, key, sequence)
        .map_err(|error| corrupt(device, error))?;
    Ok(found.to_vec())
}

/// The bytes of the object at `offset` of the area: one read of a few KiB, and a second when
/// its header says it is longer (bounded by the area).
fn read_object_bytes(device: &dyn BlockDevice, context: &AreaContext, offset: u64) -> Result<Vec<u8>> {
    const FIRST_READ: u64 = 4096;
    let available = context.len_area.saturating_sub(offset);
    if available < HEADER_LEN as u64 {
        return Err(corrupt(
            device,
            lds_format::FormatError::invalid(
                "log reference",
                "ofs_object",
                context.ofs_area + offset,
                "past the end of the backup log area",
            ),
        ));
    }
    let mut bytes = device.read_vec(context.ofs_area + offset, FIRST_READ.min(available))?;
    if let Ok(header) = ObjectHeader::parse_raw(&bytes[..HEADER_LEN], context.ofs_area + offset) {
        let total = (HEADER_LEN as u64 + u64::from(header.len_payload)).min(available);
        if total > bytes.len() as u64 {
            let start = bytes.len() as u64;
            bytes.resize(total as usize, 0);
            device.read_at(context.ofs_area + offset + start, &mut bytes[start as usize..])?;
        }
    }
    Ok(bytes)
}

/// The retained region of the backup log a merge of log chunks reads its values from: read
/// once, sequentially, from the oldest log start of its inputs to the version's backup start
/// (at most the ring), each batch checked and decoded once (its entries' places kept in one
/// vector for the whole region: a batch of one put costs no allocation of its own).
pub(crate) struct LogRegion {
    context: AreaContext,
    /// The region's bytes: `[start, end)` of the area, the part before the wrap first.
    bytes: Vec<u8>,
    start: u64,
    /// The batches read so far, by offset: what they are and their entries in `entries`.
    batches: HashMap<u64, (BatchAt, usize, usize)>,
    entries: Vec<EntrySpans>,
}

/// The bytes of `bytes` (the region from area offset `start`) from area offset `offset` on
/// (empty outside the region).
fn region_from(bytes: &[u8], start: u64, len_area: u64, offset: u64) -> &[u8] {
    let index = if offset >= start { offset - start } else { len_area - start + offset };
    bytes.get(index as usize..).unwrap_or(&[])
}

impl LogRegion {
    /// The region the log chunks of `inputs` name in `version`, read into `buffer` (an earlier
    /// region's, reused: its pages are mapped already); `None` when none is a log chunk.
    pub(crate) fn read<'a>(
        device: &dyn BlockDevice,
        context: AreaContext,
        version: &Version,
        inputs: impl Iterator<Item = &'a lds_format::version::meta::ChunkMeta>,
        buffer: Vec<u8>,
    ) -> Result<Option<Self>> {
        let Some(start) = inputs.filter_map(|chunk| chunk.log_start).min() else { return Ok(None) };
        if start.offset >= context.len_area {
            return Err(corrupt(
                device,
                lds_format::FormatError::invalid(
                    "chunk metadata",
                    "ofs_log_start",
                    context.ofs_area,
                    format!("{} lies past the backup log area ({} bytes)", start.offset, context.len_area),
                ),
            ));
        }
        let len = ring_distance(start, version.backup_start(), context.len_area);
        let mut bytes = buffer;
        bytes.clear();
        bytes.resize(len as usize, 0);
        let first = len.min(context.len_area - start.offset);
        device.read_at(context.ofs_area + start.offset, &mut bytes[..first as usize])?;
        if first < len {
            device.read_at(context.ofs_area, &mut bytes[first as usize..])?;
        }
        Ok(Some(Self { context, bytes, start: start.offset, batches: HashMap::new(), entries: Vec::new() }))
    }

    /// The region's buffer, for the next region.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.bytes
    }

    /// The value a log reference names (checked as `read` checks it).
    pub(crate) fn value(&mut self, device: &dyn BlockDevice, key: &[u8], sequence: u64, value: &[u8]) -> Result<&[u8]> {
        let reference = LogRef::decode(value, 0).map_err(|error| corrupt(device, error))?;
        let offset = reference.ofs_object;
        let object = region_from(&self.bytes, self.start, self.context.len_area, offset);
        let (at, first, count) = match self.batches.get(&offset) {
            Some(found) => *found,
            None => {
                let first = self.entries.len();
                let at = read_entries(object, offset, &self.context, &mut self.entries)
                    .map_err(|error| corrupt(device, error))?;
                let found = (at, first, self.entries.len() - first);
                self.batches.insert(offset, found);
                found
            }
        };
        entry_value(object, at, &self.entries[first..first + count], &reference, &self.context, key, sequence)
            .map_err(|error| corrupt(device, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memtable::BatchPosition;
    use lds_format::log::LogPosition;

    fn position(offset: u64, lsn: u64) -> LogPosition {
        LogPosition { offset, lsn }
    }

    #[test]
    fn references_name_the_batch_and_index_of_a_sequence() {
        let batches = [
            BatchPosition { first_sequence: 10, num_entries: 3, position: position(64, 5) },
            BatchPosition { first_sequence: 13, num_entries: 1, position: position(256, 6) },
            BatchPosition { first_sequence: 20, num_entries: 2, position: position(512, 7) },
        ];
        let found = reference_of(&batches, 12, 99).expect("in the first batch");
        assert_eq!((found.lsn, found.ofs_object, found.entry_index, found.len_value), (5, 64, 2, 99));
        assert_eq!(reference_of(&batches, 13, 1).map(|found| (found.lsn, found.entry_index)), Some((6, 0)));
        assert_eq!(reference_of(&batches, 21, 1).map(|found| (found.lsn, found.entry_index)), Some((7, 1)));
        // Sequences no batch holds: before the first, in a gap, past the last.
        assert_eq!(reference_of(&batches, 9, 1), None);
        assert_eq!(reference_of(&batches, 15, 1), None);
        assert_eq!(reference_of(&batches, 22, 1), None);
    }
}
