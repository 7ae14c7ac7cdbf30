//! Chunk metadata (SPEC.md §6.4): what a version records of each chunk, in base versions,
//! delta versions and journal records alike.

use crate::codec::{count_u32, Reader, Writer};
use crate::entry::SEQUENCE_MAX;
use crate::error::FormatError;
use crate::log::LogPosition;

/// Most levels a tree may have (SPEC.md §16).
pub const LEVELS_COUNT_MAX: u32 = 16;
/// Bytes of a sub-chunk reference in chunk metadata.
pub const SUB_CHUNK_REF_LEN: usize = 40;
/// Fixed bytes of chunk metadata before the keys.
pub const CHUNK_META_FIXED_LEN: usize = 48;
/// `flags` bit 0 of chunk metadata and footer: the chunk is an odd chunk (SPEC.md §11).
pub const CHUNK_FLAG_ODD: u8 = 1;
/// `flags` bit 1 of chunk metadata (not of footers, where bit 1 names the digest): value
/// references follow the sub-chunks (SPEC.md §6.4, format 1.4).
pub const CHUNK_FLAG_VALUE_REFS: u8 = 2;
/// `flags` bit 2 of chunk metadata: the chunk holds log references, and the position of the
/// oldest backup log object they name follows the value references (SPEC.md §6.4, §8.9,
/// format 1.6). Only at level 0.
pub const CHUNK_FLAG_LOG_REFS: u8 = 4;
/// Bytes of a log chunk's log start in chunk metadata.
pub const LOG_START_LEN: usize = 16;
/// Bytes of one value reference in chunk metadata.
pub const VALUE_REF_LEN: usize = 16;

/// One slot of a chunk and the digest of what it holds (SPEC.md §6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubChunkRef {
    /// The slot.
    pub slot: u64,
    /// blake3 digest from the sub-chunk's footer.
    pub digest: [u8; 32],
}

/// Chunk metadata (SPEC.md §6.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkMeta {
    /// Slot of sub-chunk 0.
    pub chunk_id: u64,
    /// Level in the tree.
    pub level: u8,
    /// `CHUNK_FLAG_ODD` or 0.
    pub flags: u8,
    /// Entries over all sub-chunks.
    pub num_entries: u64,
    /// Smallest entry sequence number.
    pub smallest_seq: u64,
    /// Largest entry sequence number.
    pub largest_seq: u64,
    /// Bytes used in the slots.
    pub len_data: u64,
    /// Smallest user key, inclusive.
    pub smallest_key: Vec<u8>,
    /// Largest user key, inclusive.
    pub largest_key: Vec<u8>,
    /// The slots, in key order.
    pub sub_chunks: Vec<SubChunkRef>,
    /// Bytes its pointer entries hold in each value chunk: `(value_chunk_id, bytes)` in
    /// increasing id order; empty without flag `CHUNK_FLAG_VALUE_REFS` (SPEC.md §6.4).
    pub value_refs: Vec<(u64, u64)>,
    /// A log chunk's log start: the oldest backup log object its log references name (flag
    /// `CHUNK_FLAG_LOG_REFS`, SPEC.md §6.4, §8.9); `None` for other chunks.
    pub log_start: Option<LogPosition>,
}

impl ChunkMeta {
    /// True when the odd flag is set.
    pub fn is_odd(&self) -> bool {
        self.flags & CHUNK_FLAG_ODD != 0
    }

    /// True for a log chunk (flag `CHUNK_FLAG_LOG_REFS`, SPEC.md §8.9).
    pub fn is_log_chunk(&self) -> bool {
        self.flags & CHUNK_FLAG_LOG_REFS != 0
    }

    /// Encodes the record.
    pub fn encode(&self, writer: &mut Writer) {
        writer
            .u64(self.chunk_id)
            .u8(self.level)
            .u8(self.flags)
            .u16(u16::try_from(self.sub_chunks.len()).unwrap_or(u16::MAX))
            .u32(0)
            .u64(self.num_entries)
            .u64(self.smallest_seq)
            .u64(self.largest_seq)
            .u64(self.len_data)
            .key(&self.smallest_key)
            .key(&self.largest_key);
        for sub_chunk in &self.sub_chunks {
            writer.u64(sub_chunk.slot).bytes(&sub_chunk.digest);
        }
        if self.flags & CHUNK_FLAG_VALUE_REFS != 0 {
            writer.u32(count_u32(self.value_refs.len()));
            for &(id, bytes) in &self.value_refs {
                writer.u64(id).u64(bytes);
            }
        }
        if self.flags & CHUNK_FLAG_LOG_REFS != 0 {
            let start = self.log_start.unwrap_or(LogPosition { offset: 0, lsn: 0 });
            writer.u64(start.lsn).u64(start.offset);
        }
    }

    /// Decodes and checks the record's invariants.
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, FormatError> {
        let offset = reader.offset();
        let invalid = |field: &'static str, reason: &str| FormatError::invalid("chunk metadata", field, offset, reason);
        let chunk_id = reader.u64()?;
        let level = reader.u8()?;
        let flags = reader.u8()?;
        if flags & !(CHUNK_FLAG_ODD | CHUNK_FLAG_VALUE_REFS | CHUNK_FLAG_LOG_REFS) != 0 {
            return Err(invalid("flags", "reserved bits set"));
        }
        let num_sub_chunks = reader.u16()?;
        reader.reserved(4)?;
        let num_entries = reader.u64()?;
        let smallest_seq = reader.u64()?;
        let largest_seq = reader.u64()?;
        let len_data = reader.u64()?;
        let smallest_key = reader.key()?.to_vec();
        let largest_key = reader.key()?.to_vec();
        let count = reader.count(u64::from(num_sub_chunks), SUB_CHUNK_REF_LEN, "num_sub_chunks")?;
        let mut sub_chunks = Vec::with_capacity(count);
        for _ in 0..count {
            sub_chunks.push(SubChunkRef { slot: reader.u64()?, digest: reader.array()? });
        }
        let mut value_refs = Vec::new();
        if flags & CHUNK_FLAG_VALUE_REFS != 0 {
            let num_value_refs = reader.u32()?;
            let count = reader.count(u64::from(num_value_refs), VALUE_REF_LEN, "num_value_refs")?;
            if count == 0 {
                return Err(invalid("num_value_refs", "zero with flag value_refs"));
            }
            value_refs.reserve(count);
            for _ in 0..count {
                let (id, bytes) = (reader.u64()?, reader.u64()?);
                if bytes == 0 || value_refs.last().is_some_and(|&(previous, _)| previous >= id) {
                    return Err(invalid("value_refs", "ids not increasing, or a reference of 0 bytes"));
                }
                value_refs.push((id, bytes));
            }
        }
        let log_start = if flags & CHUNK_FLAG_LOG_REFS != 0 {
            let (lsn, offset) = (reader.u64()?, reader.u64()?);
            if offset % 8 != 0 {
                return Err(invalid("ofs_log_start", "not a multiple of 8"));
            }
            Some(LogPosition { offset, lsn })
        } else {
            None
        };
        if u64::from(level) >= u64::from(LEVELS_COUNT_MAX) {
            return Err(invalid("level", "at or above the level limit 16"));
        }
        if sub_chunks.first().map(|first| first.slot) != Some(chunk_id) {
            return Err(invalid("chunk_id", "is not the slot of sub-chunk 0 (or there are no sub-chunks)"));
        }
        // Most chunks have one sub-chunk: no set to build for them.
        let repeated = sub_chunks.len() > 1 && {
            let distinct: std::collections::BTreeSet<u64> = sub_chunks.iter().map(|sub_chunk| sub_chunk.slot).collect();
            distinct.len() != sub_chunks.len()
        };
        if repeated {
            return Err(invalid("slot", "a slot is listed twice"));
        }
        if smallest_key > largest_key {
            return Err(invalid("smallest_key", "greater than largest_key"));
        }
        if smallest_seq > largest_seq {
            return Err(invalid("smallest_seq", "greater than largest_seq"));
        }
        if largest_seq > SEQUENCE_MAX {
            return Err(invalid("largest_seq", "above 2^56 - 1, the largest sequence number (SPEC.md §16)"));
        }
        if num_entries == 0 {
            return Err(invalid("num_entries", "zero"));
        }
        Ok(Self {
            chunk_id,
            level,
            flags,
            num_entries,
            smallest_seq,
            largest_seq,
            len_data,
            smallest_key,
            largest_key,
            sub_chunks,
            value_refs,
            log_start,
        })
    }

    /// Bytes this record takes when encoded.
    pub fn encoded_len(&self) -> usize {
        CHUNK_META_FIXED_LEN
            + 4
            + self.smallest_key.len()
            + self.largest_key.len()
            + SUB_CHUNK_REF_LEN * self.sub_chunks.len()
            + if self.flags & CHUNK_FLAG_VALUE_REFS != 0 { 4 + VALUE_REF_LEN * self.value_refs.len() } else { 0 }
            + if self.flags & CHUNK_FLAG_LOG_REFS != 0 { LOG_START_LEN } else { 0 }
    }

    /// The slots the chunk occupies.
    pub fn slots(&self) -> impl Iterator<Item = u64> + '_ {
        self.sub_chunks.iter().map(|sub_chunk| sub_chunk.slot)
    }
}
