//! Version log payloads (SPEC.md §6) and the in-memory version they build.

use std::collections::BTreeMap;

use crate::batch::SEQUENCE_MAX;
use crate::codec::{Reader, Writer};
use crate::error::FormatError;
use crate::label::Geometry;
use crate::logref::LogPosition;
use crate::value::{ValueChunkMeta, VALUE_CHUNK_META_LEN};

/// Most levels a tree may have (SPEC.md §16).
pub const LEVELS_COUNT_MAX: u32 = 16;
/// Bytes of a sub-chunk reference in chunk metadata.
pub const SUB_CHUNK_REF_LEN: usize = 40;
/// Fixed bytes of chunk metadata before the keys.
pub const CHUNK_META_FIXED_LEN: usize = 48;
/// Bytes of a deleted-chunk entry in a delta version.
pub const DELETED_CHUNK_LEN: usize = 16;
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
/// The owner `Version::slot_owner` records for a slot holding value chunk `id`: the id with
/// this bit set (chunk ids are slot numbers, below 2^63).
pub const VALUE_CHUNK_OWNER: u64 = 1 << 63;

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

/// Where round-robin victim choice resumes in a level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactPointer {
    /// The level.
    pub level: u8,
    /// The largest key of the last victim.
    pub key: Vec<u8>,
}

fn encode_pointers(pointers: &[CompactPointer], writer: &mut Writer) {
    for pointer in pointers {
        writer.u8(pointer.level).key(&pointer.key);
    }
}

fn decode_pointers(reader: &mut Reader<'_>, count: u32) -> Result<Vec<CompactPointer>, FormatError> {
    let count = reader.count(u64::from(count), 3, "num_compact_pointers")?;
    let mut pointers = Vec::with_capacity(count);
    for _ in 0..count {
        let offset = reader.offset();
        let level = reader.u8()?;
        if u32::from(level) >= LEVELS_COUNT_MAX {
            return Err(FormatError::invalid("compact pointer", "level", offset, "at or above the level limit 16"));
        }
        pointers.push(CompactPointer { level, key: reader.key()?.to_vec() });
    }
    Ok(pointers)
}

fn decode_metas(reader: &mut Reader<'_>, count: u32, field: &'static str) -> Result<Vec<ChunkMeta>, FormatError> {
    let count = reader.count(u64::from(count), CHUNK_META_FIXED_LEN + 4 + SUB_CHUNK_REF_LEN, field)?;
    let mut metas = Vec::with_capacity(count);
    for _ in 0..count {
        metas.push(ChunkMeta::decode(reader)?);
    }
    Ok(metas)
}

fn count_u32(len: usize) -> u32 {
    u32::try_from(len).unwrap_or(u32::MAX)
}

/// A base version payload (SPEC.md §6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseVersion {
    /// Replica of the label's geometry.
    pub geometry: Geometry,
    /// Owning instance.
    pub instance: u32,
    /// Levels of the tree.
    pub num_levels: u32,
    /// Largest sequence number in the chunks.
    pub last_sequence: u64,
    /// Label generation this version was written under.
    pub label_generation: u64,
    /// Backup log start point.
    pub ofs_backup_start: u64,
    /// LSN of the object at the start point.
    pub lsn_backup_start: u64,
    /// Round-robin pointers.
    pub compact_pointers: Vec<CompactPointer>,
    /// Every chunk of the tree.
    pub chunks: Vec<ChunkMeta>,
    /// The value section (SPEC.md §6.1, volumes with feature `value_chunks`).
    pub values: Option<ValueSection>,
}

/// The value chunks of a base version (SPEC.md §6.1, §6.5).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValueSection {
    /// Above every value chunk id the instance has used.
    pub next_value_chunk_id: u64,
    /// Every value chunk of the tree.
    pub chunks: Vec<ValueChunkMeta>,
}

/// The value chunk changes of a delta version (SPEC.md §6.2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValueDelta {
    /// `next_value_chunk_id` after this change.
    pub next_value_chunk_id: u64,
    /// Value chunks removed (before the additions).
    pub deleted: Vec<u64>,
    /// Value chunks added.
    pub added: Vec<ValueChunkMeta>,
}

fn decode_value_metas(
    reader: &mut Reader<'_>,
    count: u32,
    field: &'static str,
) -> Result<Vec<ValueChunkMeta>, FormatError> {
    let count = reader.count(u64::from(count), VALUE_CHUNK_META_LEN, field)?;
    (0..count).map(|_| ValueChunkMeta::decode(reader)).collect()
}

impl BaseVersion {
    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::with_capacity(144 + self.chunks.iter().map(ChunkMeta::encoded_len).sum::<usize>());
        self.geometry.encode(&mut writer);
        writer
            .u32(self.instance)
            .u32(self.num_levels)
            .u64(self.last_sequence)
            .u64(self.label_generation)
            .u64(self.ofs_backup_start)
            .u64(self.lsn_backup_start)
            .u32(count_u32(self.chunks.len()))
            .u32(count_u32(self.compact_pointers.len()));
        encode_pointers(&self.compact_pointers, &mut writer);
        for chunk in &self.chunks {
            chunk.encode(&mut writer);
        }
        if let Some(values) = &self.values {
            writer.u64(values.next_value_chunk_id).u32(count_u32(values.chunks.len())).u32(0);
            for chunk in &values.chunks {
                chunk.encode(&mut writer);
            }
        }
        writer.into_bytes()
    }

    /// Decodes the payload; `offset` is its device offset, for messages.
    pub fn decode(payload: &[u8], offset: u64) -> Result<Self, FormatError> {
        let mut reader = Reader::new(payload, "base version", offset);
        let geometry = Geometry::decode(&mut reader)?;
        geometry.validate(offset)?;
        let instance = reader.u32()?;
        let num_levels = reader.u32()?;
        if num_levels == 0 || num_levels > LEVELS_COUNT_MAX {
            return Err(FormatError::invalid(
                "base version",
                "num_levels",
                offset,
                format!("{num_levels} is not from 1 to 16"),
            ));
        }
        let last_sequence = decode_last_sequence(&mut reader, "base version")?;
        let label_generation = reader.u64()?;
        let ofs_backup_start = reader.u64()?;
        let lsn_backup_start = reader.u64()?;
        let num_chunks = reader.u32()?;
        let num_compact_pointers = reader.u32()?;
        let compact_pointers = decode_pointers(&mut reader, num_compact_pointers)?;
        let chunks = decode_metas(&mut reader, num_chunks, "num_chunks")?;
        let values = if reader.remaining() > 0 {
            let next_value_chunk_id = reader.u64()?;
            let num_value_chunks = reader.u32()?;
            reader.reserved(4)?;
            Some(ValueSection {
                next_value_chunk_id,
                chunks: decode_value_metas(&mut reader, num_value_chunks, "num_value_chunks")?,
            })
        } else {
            None
        };
        reader.finish()?;
        Ok(Self {
            values,
            geometry,
            instance,
            num_levels,
            last_sequence,
            label_generation,
            ofs_backup_start,
            lsn_backup_start,
            compact_pointers,
            chunks,
        })
    }
}

/// A version's `last_sequence` (SPEC.md §6.1, §6.2): a sequence number, so at most 2^56 - 1
/// (§16). A larger one would make replay skip every batch of the backup log (their
/// sequences all lie at or below it) and the version read as if nothing followed it.
fn decode_last_sequence(reader: &mut Reader<'_>, structure: &'static str) -> Result<u64, FormatError> {
    let offset = reader.offset();
    let last_sequence = reader.u64()?;
    if last_sequence > SEQUENCE_MAX {
        return Err(FormatError::invalid(
            structure,
            "last_sequence",
            offset,
            format!("{last_sequence} is above 2^56 - 1, the largest sequence number"),
        ));
    }
    Ok(last_sequence)
}

/// A chunk a delta version deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletedChunk {
    /// The chunk.
    pub chunk_id: u64,
    /// The level it is deleted from.
    pub level: u8,
}

/// A delta version payload (SPEC.md §6.2).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeltaVersion {
    /// Largest sequence number in the chunks after this change.
    pub last_sequence: u64,
    /// Backup log start point after this change.
    pub ofs_backup_start: u64,
    /// LSN at the start point.
    pub lsn_backup_start: u64,
    /// The journaled compaction this completes, or 0.
    pub compaction_id: u64,
    /// Chunks removed.
    pub deleted: Vec<DeletedChunk>,
    /// Pointers replaced.
    pub compact_pointers: Vec<CompactPointer>,
    /// Chunks added.
    pub added: Vec<ChunkMeta>,
    /// The value section (SPEC.md §6.2, volumes with feature `value_chunks`).
    pub values: Option<ValueDelta>,
}

impl DeltaVersion {
    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::with_capacity(
            48 + DELETED_CHUNK_LEN * self.deleted.len() + self.added.iter().map(ChunkMeta::encoded_len).sum::<usize>(),
        );
        writer
            .u64(self.last_sequence)
            .u64(self.ofs_backup_start)
            .u64(self.lsn_backup_start)
            .u64(self.compaction_id)
            .u32(count_u32(self.deleted.len()))
            .u32(count_u32(self.added.len()))
            .u32(count_u32(self.compact_pointers.len()))
            .u32(0);
        for deleted in &self.deleted {
            writer.u64(deleted.chunk_id).u8(deleted.level).zeros(7);
        }
        encode_pointers(&self.compact_pointers, &mut writer);
        for chunk in &self.added {
            chunk.encode(&mut writer);
        }
        if let Some(values) = &self.values {
            writer
                .u64(values.next_value_chunk_id)
                .u32(count_u32(values.deleted.len()))
                .u32(count_u32(values.added.len()));
            for id in &values.deleted {
                writer.u64(*id);
            }
            for chunk in &values.added {
                chunk.encode(&mut writer);
            }
        }
        writer.into_bytes()
    }

    /// Decodes the payload.
    pub fn decode(payload: &[u8], offset: u64) -> Result<Self, FormatError> {
        let mut reader = Reader::new(payload, "delta version", offset);
        let last_sequence = decode_last_sequence(&mut reader, "delta version")?;
        let ofs_backup_start = reader.u64()?;
        let lsn_backup_start = reader.u64()?;
        let compaction_id = reader.u64()?;
        let num_deleted = reader.u32()?;
        let num_added = reader.u32()?;
        let num_compact_pointers = reader.u32()?;
        reader.reserved(4)?;
        let count = reader.count(u64::from(num_deleted), DELETED_CHUNK_LEN, "num_deleted")?;
        let mut deleted = Vec::with_capacity(count);
        for _ in 0..count {
            let chunk_id = reader.u64()?;
            let level = reader.u8()?;
            reader.reserved(7)?;
            deleted.push(DeletedChunk { chunk_id, level });
        }
        let compact_pointers = decode_pointers(&mut reader, num_compact_pointers)?;
        let added = decode_metas(&mut reader, num_added, "num_added")?;
        let values = if reader.remaining() > 0 {
            let next_value_chunk_id = reader.u64()?;
            let num_value_deleted = reader.u32()?;
            let num_value_added = reader.u32()?;
            let count = reader.count(u64::from(num_value_deleted), 8, "num_value_deleted")?;
            let deleted = (0..count).map(|_| reader.u64()).collect::<Result<Vec<u64>, FormatError>>()?;
            let added = decode_value_metas(&mut reader, num_value_added, "num_value_added")?;
            Some(ValueDelta { next_value_chunk_id, deleted, added })
        } else {
            None
        };
        reader.finish()?;
        Ok(Self {
            last_sequence,
            ofs_backup_start,
            lsn_backup_start,
            compaction_id,
            deleted,
            compact_pointers,
            added,
            values,
        })
    }
}

/// A compaction journal record (SPEC.md §6.3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CompactionJournal {
    /// Unique, increasing id.
    pub compaction_id: u64,
    /// Level the victims come from.
    pub source_level: u8,
    /// Level the outputs go to.
    pub target_level: u8,
    /// Largest key of the last persisted output.
    pub resume_key: Vec<u8>,
    /// Chunks the compaction reads.
    pub inputs: Vec<u64>,
    /// Inputs already cleaned.
    pub cleaned: Vec<u64>,
    /// Outputs persisted so far.
    pub outputs: Vec<ChunkMeta>,
}

impl CompactionJournal {
    /// Encodes the payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::new();
        writer
            .u64(self.compaction_id)
            .u8(self.source_level)
            .u8(self.target_level)
            .u16(0)
            .u32(count_u32(self.inputs.len()))
            .u32(count_u32(self.outputs.len()))
            .u32(count_u32(self.cleaned.len()))
            .key(&self.resume_key);
        for input in &self.inputs {
            writer.u64(*input);
        }
        for cleaned in &self.cleaned {
            writer.u64(*cleaned);
        }
        for output in &self.outputs {
            output.encode(&mut writer);
        }
        writer.into_bytes()
    }

    /// Decodes the payload and checks that the cleaned chunks are inputs.
    pub fn decode(payload: &[u8], offset: u64) -> Result<Self, FormatError> {
        let mut reader = Reader::new(payload, "compaction journal", offset);
        let compaction_id = reader.u64()?;
        let source_level = reader.u8()?;
        let target_level = reader.u8()?;
        reader.reserved(2)?;
        let num_inputs = reader.u32()?;
        let num_outputs = reader.u32()?;
        let num_cleaned = reader.u32()?;
        let resume_key = reader.key()?.to_vec();
        let read_ids = |reader: &mut Reader<'_>, count: u32, field: &'static str| -> Result<Vec<u64>, FormatError> {
            let count = reader.count(u64::from(count), 8, field)?;
            (0..count).map(|_| reader.u64()).collect()
        };
        let inputs = read_ids(&mut reader, num_inputs, "num_inputs")?;
        let cleaned = read_ids(&mut reader, num_cleaned, "num_cleaned")?;
        let outputs = decode_metas(&mut reader, num_outputs, "num_outputs")?;
        reader.finish()?;
        if let Some(stray) = cleaned.iter().find(|id| !inputs.contains(id)) {
            return Err(FormatError::invalid(
                "compaction journal",
                "cleaned",
                offset,
                format!("chunk {stray} is not an input"),
            ));
        }
        if u32::from(source_level) >= LEVELS_COUNT_MAX || u32::from(target_level) >= LEVELS_COUNT_MAX {
            return Err(FormatError::invalid(
                "compaction journal",
                "target_level",
                offset,
                "at or above the level limit 16",
            ));
        }
        Ok(Self { compaction_id, source_level, target_level, resume_key, inputs, cleaned, outputs })
    }
}

/// Why a delta version cannot be applied (SPEC.md §6.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayError {
    /// A deleted chunk is not in the version at that level.
    DeletedMissing {
        /// The chunk.
        chunk_id: u64,
        /// The level named.
        level: u8,
    },
    /// An added chunk id is already present.
    AddedTwice {
        /// The chunk.
        chunk_id: u64,
    },
    /// A slot of an added chunk is already used.
    SlotInUse {
        /// The slot.
        slot: u64,
        /// The chunk already using it.
        owner: u64,
    },
    /// A chunk's level is beyond `num_levels`.
    LevelOutOfRange {
        /// The chunk.
        chunk_id: u64,
        /// Its level.
        level: u8,
    },
    /// A slot is beyond the geometry.
    SlotOutOfRange {
        /// The chunk.
        chunk_id: u64,
        /// The slot.
        slot: u64,
    },
    /// A deleted value chunk is not in the version, or is deleted twice.
    ValueChunkMissing {
        /// The value chunk.
        value_chunk_id: u64,
    },
    /// An added value chunk id is already present, or not below `next_value_chunk_id`.
    ValueChunkTwice {
        /// The value chunk.
        value_chunk_id: u64,
    },
    /// A value chunk's slot is beyond the geometry.
    ValueSlotOutOfRange {
        /// The value chunk.
        value_chunk_id: u64,
        /// The slot.
        slot: u64,
    },
    /// A chunk refers to a value chunk the version does not have.
    DanglingValueRef {
        /// The chunk.
        chunk_id: u64,
        /// The value chunk it names.
        value_chunk_id: u64,
    },
    /// A deleted value chunk is still referred to by a chunk that stays.
    ValueChunkReferenced {
        /// The value chunk.
        value_chunk_id: u64,
    },
    /// A log chunk (SPEC.md §8.9) at a level other than 0.
    LogChunkLevel {
        /// The chunk.
        chunk_id: u64,
        /// Its level.
        level: u8,
    },
    /// `next_value_chunk_id` went down.
    ValueIdDecreased {
        /// The value before.
        before: u64,
        /// The value after.
        after: u64,
    },
}

/// How an owner in `Version::slot_owner` reads in messages.
fn owner_name(owner: u64) -> String {
    if owner & VALUE_CHUNK_OWNER != 0 {
        format!("value chunk {}", owner & !VALUE_CHUNK_OWNER)
    } else {
        format!("chunk {owner}")
    }
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DeletedMissing { chunk_id, level } => {
                write!(f, "deletes chunk {chunk_id} from level {level}, where it is not")
            }
            Self::AddedTwice { chunk_id } => {
                write!(f, "adds chunk {chunk_id}, which is already present")
            }
            Self::SlotInUse { slot, owner } => {
                write!(f, "uses slot {slot}, which {} already uses", owner_name(*owner))
            }
            Self::LevelOutOfRange { chunk_id, level } => {
                write!(f, "puts chunk {chunk_id} at level {level}, beyond num_levels")
            }
            Self::SlotOutOfRange { chunk_id, slot } => {
                write!(f, "chunk {chunk_id} uses slot {slot}, beyond num_slots")
            }
            Self::ValueChunkMissing { value_chunk_id } => {
                write!(f, "deletes value chunk {value_chunk_id}, which is not in the version (or twice)")
            }
            Self::ValueChunkTwice { value_chunk_id } => {
                write!(f, "adds value chunk {value_chunk_id}, which is present or not below next_value_chunk_id")
            }
            Self::ValueSlotOutOfRange { value_chunk_id, slot } => {
                write!(f, "value chunk {value_chunk_id} uses slot {slot}, beyond num_slots")
            }
            Self::DanglingValueRef { chunk_id, value_chunk_id } => {
                write!(f, "chunk {chunk_id} refers to value chunk {value_chunk_id}, which the version does not have")
            }
            Self::ValueChunkReferenced { value_chunk_id } => {
                write!(f, "deletes value chunk {value_chunk_id}, which a remaining chunk still refers to")
            }
            Self::LogChunkLevel { chunk_id, level } => {
                write!(f, "puts log chunk {chunk_id} at level {level}: log chunks stay in level 0")
            }
            Self::ValueIdDecreased { before, after } => {
                write!(f, "next_value_chunk_id goes from {before} down to {after}")
            }
        }
    }
}

/// The in-memory version: what a base version describes, kept current by delta versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// Levels of the tree.
    pub num_levels: u32,
    /// Largest sequence number in the chunks.
    pub last_sequence: u64,
    /// Label generation the base was written under.
    pub label_generation: u64,
    /// Backup start point.
    pub ofs_backup_start: u64,
    /// LSN at the backup start point.
    pub lsn_backup_start: u64,
    /// Round-robin pointers, by level.
    pub compact_pointers: BTreeMap<u8, Vec<u8>>,
    /// Chunks by id.
    pub chunks: BTreeMap<u64, ChunkMeta>,
    /// Which chunk uses each slot.
    pub slot_owner: BTreeMap<u64, u64>,
    /// Number of slots in the geometry (for range checks).
    pub num_slots: u64,
    /// Value chunks by id (SPEC.md §8.6); `slot_owner` lists their slots with owner
    /// `VALUE_CHUNK_OWNER | id`.
    pub value_chunks: BTreeMap<u64, ValueChunkMeta>,
    /// Live bytes of each value chunk: the sum of the chunks' value references (a value chunk
    /// no chunk refers to is absent).
    pub value_live: BTreeMap<u64, u64>,
    /// Above every value chunk id the instance has used.
    pub next_value_chunk_id: u64,
    /// The version has a value section (feature `value_chunks`): its base versions keep one.
    pub has_values: bool,
}

impl Version {
    /// Builds the version a base version describes, checking it as a DV would be checked.
    pub fn from_base(base: &BaseVersion) -> Result<Self, ReplayError> {
        let mut version = Self {
            num_levels: base.num_levels,
            last_sequence: base.last_sequence,
            label_generation: base.label_generation,
            ofs_backup_start: base.ofs_backup_start,
            lsn_backup_start: base.lsn_backup_start,
            compact_pointers: base
                .compact_pointers
                .iter()
                .map(|pointer| (pointer.level, pointer.key.clone()))
                .collect(),
            chunks: BTreeMap::new(),
            slot_owner: BTreeMap::new(),
            num_slots: base.geometry.num_slots,
            value_chunks: BTreeMap::new(),
            value_live: BTreeMap::new(),
            next_value_chunk_id: base.values.as_ref().map_or(1, |values| values.next_value_chunk_id.max(1)),
            has_values: base.values.is_some(),
        };
        for value_chunk in base.values.iter().flat_map(|values| &values.chunks) {
            version.add_value_chunk(*value_chunk)?;
        }
        for chunk in &base.chunks {
            version.add(chunk.clone())?;
        }
        for chunk in &base.chunks {
            version.check_refs(chunk)?;
        }
        Ok(version)
    }

    fn add_value_chunk(&mut self, value_chunk: ValueChunkMeta) -> Result<(), ReplayError> {
        let value_chunk_id = value_chunk.value_chunk_id;
        if self.value_chunks.contains_key(&value_chunk_id) || value_chunk_id >= self.next_value_chunk_id {
            return Err(ReplayError::ValueChunkTwice { value_chunk_id });
        }
        if value_chunk.slot >= self.num_slots {
            return Err(ReplayError::ValueSlotOutOfRange { value_chunk_id, slot: value_chunk.slot });
        }
        if let Some(&owner) = self.slot_owner.get(&value_chunk.slot) {
            return Err(ReplayError::SlotInUse { slot: value_chunk.slot, owner });
        }
        self.slot_owner.insert(value_chunk.slot, VALUE_CHUNK_OWNER | value_chunk_id);
        self.value_chunks.insert(value_chunk_id, value_chunk);
        Ok(())
    }

    /// Every value chunk `chunk` refers to is in the version.
    fn check_refs(&self, chunk: &ChunkMeta) -> Result<(), ReplayError> {
        match chunk.value_refs.iter().find(|(id, _)| !self.value_chunks.contains_key(id)) {
            Some(&(value_chunk_id, _)) => {
                Err(ReplayError::DanglingValueRef { chunk_id: chunk.chunk_id, value_chunk_id })
            }
            None => Ok(()),
        }
    }

    /// Adds (`plus`) or removes a chunk's value references from the live bytes.
    fn count_refs(&mut self, chunk: &ChunkMeta, plus: bool) {
        for &(id, bytes) in &chunk.value_refs {
            let live = self.value_live.entry(id).or_insert(0);
            *live = if plus { *live + bytes } else { live.saturating_sub(bytes) };
            if *live == 0 {
                self.value_live.remove(&id);
            }
        }
    }

    /// The retention start (SPEC.md §8.9): the oldest log start of the version's log chunks,
    /// or its backup start when it has none. A writer never overwrites a backup log object
    /// from here on.
    pub fn retention_start(&self) -> LogPosition {
        let backup_start = LogPosition { offset: self.ofs_backup_start, lsn: self.lsn_backup_start };
        self.chunks
            .values()
            .filter_map(|chunk| chunk.log_start)
            .min()
            .map_or(backup_start, |start| start.min(backup_start))
    }

    /// The live bytes of value chunk `id` (SPEC.md §8.6).
    pub fn live_bytes(&self, id: u64) -> u64 {
        self.value_live.get(&id).copied().unwrap_or(0)
    }

    /// The value chunks a change deleting `deleted` and adding `added` leaves without live
    /// bytes (which its delta version must delete, SPEC.md §6.2), in id order; value chunks
    /// no chunk refers to already are among them.
    pub fn orphaned_by(&self, deleted: &[DeletedChunk], added: &[ChunkMeta]) -> Vec<u64> {
        let mut live = self.value_live.clone();
        for chunk in deleted.iter().filter_map(|deleted| self.chunks.get(&deleted.chunk_id)) {
            for (id, bytes) in &chunk.value_refs {
                if let Some(left) = live.get_mut(id) {
                    *left = left.saturating_sub(*bytes);
                }
            }
        }
        for chunk in added {
            for (id, bytes) in &chunk.value_refs {
                *live.entry(*id).or_insert(0) += bytes;
            }
        }
        self.value_chunks.keys().filter(|id| live.get(id).is_none_or(|bytes| *bytes == 0)).copied().collect()
    }

    fn add(&mut self, chunk: ChunkMeta) -> Result<(), ReplayError> {
        if u32::from(chunk.level) >= self.num_levels {
            return Err(ReplayError::LevelOutOfRange { chunk_id: chunk.chunk_id, level: chunk.level });
        }
        if chunk.is_log_chunk() && chunk.level != 0 {
            return Err(ReplayError::LogChunkLevel { chunk_id: chunk.chunk_id, level: chunk.level });
        }
        if self.chunks.contains_key(&chunk.chunk_id) {
            return Err(ReplayError::AddedTwice { chunk_id: chunk.chunk_id });
        }
        for slot in chunk.slots() {
            if slot >= self.num_slots {
                return Err(ReplayError::SlotOutOfRange { chunk_id: chunk.chunk_id, slot });
            }
            if let Some(&owner) = self.slot_owner.get(&slot) {
                return Err(ReplayError::SlotInUse { slot, owner });
            }
        }
        for slot in chunk.slots() {
            self.slot_owner.insert(slot, chunk.chunk_id);
        }
        self.count_refs(&chunk, true);
        self.chunks.insert(chunk.chunk_id, chunk);
        Ok(())
    }

    /// Applies a delta version; on error the version is unchanged. The delta is checked
    /// first and then applied in place, so that replaying a log costs time in the size of
    /// each delta, not of the tree.
    pub fn apply(&mut self, delta: &DeltaVersion) -> Result<(), ReplayError> {
        self.check_delta(delta)?;
        let next = self;
        for deleted in &delta.deleted {
            if let Some(chunk) = next.chunks.remove(&deleted.chunk_id) {
                for slot in chunk.slots() {
                    next.slot_owner.remove(&slot);
                }
                next.count_refs(&chunk, false);
            }
        }
        if let Some(values) = &delta.values {
            for id in &values.deleted {
                if let Some(value_chunk) = next.value_chunks.remove(id) {
                    next.slot_owner.remove(&value_chunk.slot);
                }
            }
            for value_chunk in &values.added {
                next.slot_owner.insert(value_chunk.slot, VALUE_CHUNK_OWNER | value_chunk.value_chunk_id);
                next.value_chunks.insert(value_chunk.value_chunk_id, *value_chunk);
            }
            next.next_value_chunk_id = values.next_value_chunk_id;
            next.has_values = true;
        }
        for added in &delta.added {
            for slot in added.slots() {
                next.slot_owner.insert(slot, added.chunk_id);
            }
            next.count_refs(added, true);
            next.chunks.insert(added.chunk_id, added.clone());
        }
        for pointer in &delta.compact_pointers {
            next.compact_pointers.insert(pointer.level, pointer.key.clone());
        }
        next.last_sequence = delta.last_sequence;
        next.ofs_backup_start = delta.ofs_backup_start;
        next.lsn_backup_start = delta.lsn_backup_start;
        Ok(())
    }

    /// The errors `apply` would meet, in the order it would meet them: every deleted chunk
    /// exists at its level (once), then each added chunk in turn is in range and takes no
    /// chunk id or slot that stays in use.
    fn check_delta(&self, delta: &DeltaVersion) -> Result<(), ReplayError> {
        use std::collections::{HashMap, HashSet};
        // Deltas are small (a flush adds one chunk; a compaction touches a few dozen): linear
        // scans over the delta beat building sets. A large delta (a hostile image's) gets
        // sets, so that checking it stays linear in its size.
        const SCAN_MAX: usize = 32;
        let large = delta.deleted.len() + delta.added.len() > SCAN_MAX;
        let deleted_set: HashSet<u64> =
            if large { delta.deleted.iter().map(|deleted| deleted.chunk_id).collect() } else { HashSet::new() };
        let is_deleted = |chunk_id: u64| {
            if large {
                deleted_set.contains(&chunk_id)
            } else {
                delta.deleted.iter().any(|deleted| deleted.chunk_id == chunk_id)
            }
        };
        let value_added: &[ValueChunkMeta] = delta.values.as_ref().map_or(&[], |values| values.added.as_slice());
        let released = |owner: u64| {
            if owner & VALUE_CHUNK_OWNER != 0 {
                delta.values.as_ref().is_some_and(|values| values.deleted.contains(&(owner & !VALUE_CHUNK_OWNER)))
            } else {
                is_deleted(owner)
            }
        };
        let mut seen = HashSet::new();
        for (index, deleted) in delta.deleted.iter().enumerate() {
            let repeated = if large {
                !seen.insert(deleted.chunk_id)
            } else {
                delta.deleted[..index].iter().any(|earlier| earlier.chunk_id == deleted.chunk_id)
            };
            match self.chunks.get(&deleted.chunk_id) {
                Some(chunk) if chunk.level == deleted.level && !repeated => {}
                _ => return Err(ReplayError::DeletedMissing { chunk_id: deleted.chunk_id, level: deleted.level }),
            }
        }
        let mut added_ids = HashSet::new();
        let mut added_slots: HashMap<u64, u64> = HashMap::new();
        for (index, chunk) in delta.added.iter().enumerate() {
            if u32::from(chunk.level) >= self.num_levels {
                return Err(ReplayError::LevelOutOfRange { chunk_id: chunk.chunk_id, level: chunk.level });
            }
            if chunk.is_log_chunk() && chunk.level != 0 {
                return Err(ReplayError::LogChunkLevel { chunk_id: chunk.chunk_id, level: chunk.level });
            }
            let earlier = &delta.added[..index];
            let present = self.chunks.contains_key(&chunk.chunk_id) && !is_deleted(chunk.chunk_id);
            let added_before = if large {
                added_ids.contains(&chunk.chunk_id)
            } else {
                earlier.iter().any(|other| other.chunk_id == chunk.chunk_id)
            };
            if present || added_before {
                return Err(ReplayError::AddedTwice { chunk_id: chunk.chunk_id });
            }
            for slot in chunk.slots() {
                if slot >= self.num_slots {
                    return Err(ReplayError::SlotOutOfRange { chunk_id: chunk.chunk_id, slot });
                }
                // The earlier chunk of this delta that claimed the slot owns it.
                let claimed = if large {
                    added_slots.get(&slot).copied()
                } else {
                    earlier
                        .iter()
                        .rev()
                        .find(|other| other.slots().any(|used| used == slot))
                        .map(|other| other.chunk_id)
                };
                if let Some(owner) = claimed {
                    return Err(ReplayError::SlotInUse { slot, owner });
                }
                if let Some(&owner) = self.slot_owner.get(&slot) {
                    if !released(owner) {
                        return Err(ReplayError::SlotInUse { slot, owner });
                    }
                }
                if let Some(value_chunk) = value_added.iter().find(|value_chunk| value_chunk.slot == slot) {
                    return Err(ReplayError::SlotInUse { slot, owner: VALUE_CHUNK_OWNER | value_chunk.value_chunk_id });
                }
            }
            if large {
                added_ids.insert(chunk.chunk_id);
                added_slots.extend(chunk.slots().map(|slot| (slot, chunk.chunk_id)));
            }
        }
        self.check_value_delta(delta)
    }

    /// The value section's checks (SPEC.md §6.2): deletions exist, additions are new and on
    /// free slots, ids only grow, and no reference is left dangling.
    fn check_value_delta(&self, delta: &DeltaVersion) -> Result<(), ReplayError> {
        let empty = ValueDelta { next_value_chunk_id: self.next_value_chunk_id, ..ValueDelta::default() };
        let values = delta.values.as_ref().unwrap_or(&empty);
        if values.next_value_chunk_id < self.next_value_chunk_id {
            return Err(ReplayError::ValueIdDecreased {
                before: self.next_value_chunk_id,
                after: values.next_value_chunk_id,
            });
        }
        for (index, id) in values.deleted.iter().enumerate() {
            if !self.value_chunks.contains_key(id) || values.deleted[..index].contains(id) {
                return Err(ReplayError::ValueChunkMissing { value_chunk_id: *id });
            }
        }
        let deleted_chunk = |id: u64| delta.deleted.iter().any(|deleted| deleted.chunk_id == id);
        for (index, value_chunk) in values.added.iter().enumerate() {
            let value_chunk_id = value_chunk.value_chunk_id;
            let present = self.value_chunks.contains_key(&value_chunk_id) && !values.deleted.contains(&value_chunk_id);
            let twice = values.added[..index].iter().any(|other| other.value_chunk_id == value_chunk_id);
            if present || twice || value_chunk_id >= values.next_value_chunk_id {
                return Err(ReplayError::ValueChunkTwice { value_chunk_id });
            }
            let slot = value_chunk.slot;
            if slot >= self.num_slots {
                return Err(ReplayError::ValueSlotOutOfRange { value_chunk_id, slot });
            }
            if let Some(&owner) = self.slot_owner.get(&slot) {
                let released = if owner & VALUE_CHUNK_OWNER != 0 {
                    values.deleted.contains(&(owner & !VALUE_CHUNK_OWNER))
                } else {
                    deleted_chunk(owner)
                };
                if !released {
                    return Err(ReplayError::SlotInUse { slot, owner });
                }
            }
            if let Some(other) = values.added[..index].iter().find(|other| other.slot == slot) {
                return Err(ReplayError::SlotInUse { slot, owner: VALUE_CHUNK_OWNER | other.value_chunk_id });
            }
        }
        // References after the delta: every added chunk's name a value chunk that is there,
        // and no deleted value chunk keeps a reference from a chunk that stays.
        let exists = |id: &u64| {
            (self.value_chunks.contains_key(id) && !values.deleted.contains(id))
                || values.added.iter().any(|value_chunk| value_chunk.value_chunk_id == *id)
        };
        for chunk in &delta.added {
            if let Some(&(value_chunk_id, _)) = chunk.value_refs.iter().find(|(id, _)| !exists(id)) {
                return Err(ReplayError::DanglingValueRef { chunk_id: chunk.chunk_id, value_chunk_id });
            }
        }
        let moved = |id: &u64| values.added.iter().any(|value_chunk| value_chunk.value_chunk_id == *id);
        for id in values.deleted.iter().filter(|id| !moved(id)) {
            let removed: u64 = delta
                .deleted
                .iter()
                .filter_map(|deleted| self.chunks.get(&deleted.chunk_id))
                .flat_map(|chunk| chunk.value_refs.iter())
                .filter(|(ref_id, _)| ref_id == id)
                .map(|(_, bytes)| bytes)
                .sum();
            if self.live_bytes(*id) > removed {
                return Err(ReplayError::ValueChunkReferenced { value_chunk_id: *id });
            }
        }
        Ok(())
    }

    /// The base version that describes this version (a trim, SPEC.md §10.3).
    pub fn to_base(&self, geometry: Geometry, instance: u32) -> BaseVersion {
        BaseVersion {
            geometry,
            instance,
            num_levels: self.num_levels,
            last_sequence: self.last_sequence,
            label_generation: self.label_generation,
            ofs_backup_start: self.ofs_backup_start,
            lsn_backup_start: self.lsn_backup_start,
            compact_pointers: self
                .compact_pointers
                .iter()
                .map(|(&level, key)| CompactPointer { level, key: key.clone() })
                .collect(),
            chunks: self.chunks.values().cloned().collect(),
            values: self.has_values.then(|| ValueSection {
                next_value_chunk_id: self.next_value_chunk_id,
                chunks: self.value_chunks.values().copied().collect(),
            }),
        }
    }

    /// Chunks of one level, in key order (by smallest key, then id; level 0 by id).
    pub fn level(&self, level: u8) -> Vec<&ChunkMeta> {
        let mut chunks: Vec<&ChunkMeta> = self.chunks.values().filter(|chunk| chunk.level == level).collect();
        if level == 0 {
            chunks.sort_by_key(|chunk| (chunk.largest_seq, chunk.chunk_id));
        } else {
            chunks.sort_by(|a, b| a.smallest_key.cmp(&b.smallest_key).then(a.chunk_id.cmp(&b.chunk_id)));
        }
        chunks
    }

    /// Checks the invariants the version keeps by construction.
    pub fn assert_invariants(&self) {
        let slots: usize = self.chunks.values().map(|chunk| chunk.sub_chunks.len()).sum();
        assert_eq!(slots + self.value_chunks.len(), self.slot_owner.len());
        for (id, value_chunk) in &self.value_chunks {
            assert_eq!(self.slot_owner.get(&value_chunk.slot), Some(&(VALUE_CHUNK_OWNER | id)));
        }
        for chunk in self.chunks.values() {
            assert!(u32::from(chunk.level) < self.num_levels);
            for slot in chunk.slots() {
                assert_eq!(self.slot_owner.get(&slot), Some(&chunk.chunk_id));
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::label::{plan_layout, LayoutRequest};

    pub(crate) fn geometry() -> Geometry {
        plan_layout(&LayoutRequest { volume_len: 8 << 20, ..LayoutRequest::default() }, [5; 16]).expect("layout")
    }

    pub(crate) fn meta(chunk_id: u64, level: u8, smallest: &[u8], largest: &[u8]) -> ChunkMeta {
        ChunkMeta {
            chunk_id,
            level,
            flags: 0,
            num_entries: 10,
            smallest_seq: 1,
            largest_seq: 10,
            len_data: 4096,
            smallest_key: smallest.to_vec(),
            largest_key: largest.to_vec(),
            sub_chunks: vec![SubChunkRef { slot: chunk_id, digest: [chunk_id as u8; 32] }],
            value_refs: Vec::new(),
            log_start: None,
        }
    }

    /// The clone-then-apply replay `Version::apply` replaced, kept as the reference.
    fn apply_by_clone(version: &Version, delta: &DeltaVersion) -> Result<Version, ReplayError> {
        let mut next = version.clone();
        for deleted in &delta.deleted {
            match next.chunks.get(&deleted.chunk_id) {
                Some(chunk) if chunk.level == deleted.level => {}
                _ => return Err(ReplayError::DeletedMissing { chunk_id: deleted.chunk_id, level: deleted.level }),
            }
            if let Some(chunk) = next.chunks.remove(&deleted.chunk_id) {
                for slot in chunk.slots() {
                    next.slot_owner.remove(&slot);
                }
            }
        }
        for added in &delta.added {
            next.add(added.clone())?;
        }
        for pointer in &delta.compact_pointers {
            next.compact_pointers.insert(pointer.level, pointer.key.clone());
        }
        next.last_sequence = delta.last_sequence;
        next.ofs_backup_start = delta.ofs_backup_start;
        next.lsn_backup_start = delta.lsn_backup_start;
        Ok(next)
    }

    #[test]
    fn a_large_delta_is_checked_like_a_small_one() {
        let mut geometry_base = base();
        geometry_base.geometry.num_slots = geometry_base.geometry.num_slots.max(200);
        let version = Version::from_base(&geometry_base).expect("base");
        let chunks: Vec<ChunkMeta> = (20..60).map(|id| meta(id, 6, b"a", b"b")).collect();
        let valid = DeltaVersion {
            added: chunks.clone(),
            deleted: vec![DeletedChunk { chunk_id: 3, level: 0 }],
            ..DeltaVersion::default()
        };
        let mut applied = version.clone();
        applied.apply(&valid).expect("a valid large delta");
        assert_eq!(Ok(applied), apply_by_clone(&version, &valid));
        // The last chunk claims the slot of chunk 25, and of chunk 5 (kept): the errors the
        // reference meets first, in its order.
        for (slot, expected_owner) in [(25, 25), (5, 5)] {
            let mut bad = valid.clone();
            bad.added[39].sub_chunks.push(SubChunkRef { slot, digest: [0; 32] });
            let mut refused = version.clone();
            assert_eq!(refused.apply(&bad), Err(ReplayError::SlotInUse { slot, owner: expected_owner }));
            assert_eq!(apply_by_clone(&version, &bad), Err(ReplayError::SlotInUse { slot, owner: expected_owner }));
            assert_eq!(refused, version);
        }
    }

    #[test]
    fn in_place_apply_matches_clone_then_apply_on_random_deltas() {
        let mut state = 0x1234_5678_u64;
        let mut next = |bound: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % bound
        };
        let mut version = Version::from_base(&base()).expect("base");
        let (mut applied, mut refused) = (0, 0);
        for round in 0..20_000u64 {
            // Small id and slot spaces so that collisions, missing deletes and reused slots
            // are common; a few multi-slot chunks and out-of-range levels and slots.
            let deleted = (0..next(3))
                .map(|_| {
                    let existing: Vec<&ChunkMeta> = version.chunks.values().collect();
                    match (existing.is_empty(), next(5)) {
                        (false, 0..=3) => {
                            let chunk = existing[next(existing.len() as u64) as usize];
                            DeletedChunk {
                                chunk_id: chunk.chunk_id,
                                level: if next(10) == 0 { 9 } else { chunk.level },
                            }
                        }
                        _ => DeletedChunk { chunk_id: next(12), level: next(3) as u8 },
                    }
                })
                .collect();
            // Now and then a delta large enough for the set-based checks.
            let count = if next(25) == 0 { 34 + next(8) } else { next(3) };
            let added = (0..count)
                .map(|_| {
                    let id = next(14);
                    let mut chunk = meta(id, if next(40) == 0 { 8 } else { next(3) as u8 }, b"a", b"b");
                    chunk.sub_chunks[0].slot = if next(50) == 0 { 1 << 40 } else { next(14) };
                    if next(6) == 0 {
                        chunk.sub_chunks.push(SubChunkRef { slot: next(14), digest: [1; 32] });
                    }
                    chunk
                })
                .collect();
            let delta = DeltaVersion { last_sequence: 100 + round, deleted, added, ..DeltaVersion::default() };
            let expected = apply_by_clone(&version, &delta);
            let before = version.clone();
            let got = version.apply(&delta);
            match expected {
                Ok(expected) => {
                    assert_eq!(got, Ok(()), "round {round}: {delta:?}");
                    assert_eq!(version, expected, "round {round}");
                    applied += 1;
                }
                Err(error) => {
                    assert_eq!(got, Err(error), "round {round}: {delta:?}");
                    assert_eq!(version, before, "round {round}: a refused delta changed the version");
                    refused += 1;
                }
            }
        }
        assert!(applied > 2_000 && refused > 2_000, "applied {applied}, refused {refused}");
    }

    fn base() -> BaseVersion {
        BaseVersion {
            geometry: geometry(),
            instance: 0,
            num_levels: 7,
            last_sequence: 100,
            label_generation: 1,
            ofs_backup_start: 4096,
            lsn_backup_start: 12,
            compact_pointers: vec![CompactPointer { level: 1, key: b"m".to_vec() }],
            chunks: vec![meta(3, 0, b"a", b"k"), meta(5, 1, b"c", b"z")],
            values: None,
        }
    }

    fn delta() -> DeltaVersion {
        DeltaVersion {
            last_sequence: 120,
            ofs_backup_start: 8192,
            lsn_backup_start: 20,
            compaction_id: 0,
            deleted: vec![DeletedChunk { chunk_id: 3, level: 0 }, DeletedChunk { chunk_id: 5, level: 1 }],
            compact_pointers: vec![CompactPointer { level: 0, key: b"k".to_vec() }],
            added: vec![meta(7, 1, b"a", b"m"), meta(8, 1, b"n", b"z")],
            values: None,
        }
    }

    fn journal() -> CompactionJournal {
        CompactionJournal {
            compaction_id: 4,
            source_level: 1,
            target_level: 2,
            resume_key: b"key-0042".to_vec(),
            inputs: vec![3, 5, 9],
            cleaned: vec![3],
            outputs: vec![meta(11, 2, b"a", b"key-0042")],
        }
    }

    #[test]
    fn round_trips() {
        let base = base();
        assert_eq!(BaseVersion::decode(&base.encode(), 0), Ok(base));
        let delta = delta();
        assert_eq!(DeltaVersion::decode(&delta.encode(), 0), Ok(delta));
        let journal = journal();
        assert_eq!(CompactionJournal::decode(&journal.encode(), 0), Ok(journal));
    }

    #[test]
    fn meta_encoded_len_is_exact() {
        let chunk = meta(3, 0, b"abc", b"defgh");
        let mut writer = Writer::new();
        chunk.encode(&mut writer);
        assert_eq!(writer.len(), chunk.encoded_len());
    }

    #[test]
    fn truncated_payloads_fail_cleanly() {
        let bytes = base().encode();
        for len in 0..bytes.len() {
            assert!(BaseVersion::decode(&bytes[..len], 0).is_err(), "prefix {len} decoded");
        }
        let bytes = delta().encode();
        for len in 0..bytes.len() {
            assert!(DeltaVersion::decode(&bytes[..len], 0).is_err(), "prefix {len} decoded");
        }
        let bytes = journal().encode();
        for len in 0..bytes.len() {
            assert!(CompactionJournal::decode(&bytes[..len], 0).is_err(), "prefix {len} decoded");
        }
    }

    #[test]
    fn replay_applies_and_converts_back() {
        let base = base();
        let mut version = Version::from_base(&base).expect("base");
        version.apply(&delta()).expect("delta");
        version.assert_invariants();
        assert_eq!(version.chunks.keys().copied().collect::<Vec<_>>(), vec![7, 8]);
        assert_eq!(version.last_sequence, 120);
        assert_eq!(version.compact_pointers.get(&0).map(Vec::as_slice), Some(&b"k"[..]));
        let trimmed = version.to_base(base.geometry, 0);
        assert_eq!(Version::from_base(&trimmed), Ok(version));
    }

    #[test]
    fn replay_rejects_contradictions_and_leaves_version_unchanged() {
        let mut version = Version::from_base(&base()).expect("base");
        let before = version.clone();
        let missing = DeltaVersion { deleted: vec![DeletedChunk { chunk_id: 3, level: 1 }], ..DeltaVersion::default() };
        assert_eq!(version.apply(&missing), Err(ReplayError::DeletedMissing { chunk_id: 3, level: 1 }));
        let twice = DeltaVersion { added: vec![meta(5, 1, b"a", b"b")], ..DeltaVersion::default() };
        assert_eq!(version.apply(&twice), Err(ReplayError::AddedTwice { chunk_id: 5 }));
        let mut shared = meta(9, 1, b"a", b"b");
        shared.sub_chunks.push(SubChunkRef { slot: 3, digest: [0; 32] });
        let shared_slot = DeltaVersion { added: vec![shared], ..DeltaVersion::default() };
        assert_eq!(version.apply(&shared_slot), Err(ReplayError::SlotInUse { slot: 3, owner: 3 }));
        let deep = DeltaVersion { added: vec![meta(9, 9, b"a", b"b")], ..DeltaVersion::default() };
        assert_eq!(version.apply(&deep), Err(ReplayError::LevelOutOfRange { chunk_id: 9, level: 9 }));
        assert_eq!(version, before);
    }

    #[test]
    fn meta_invariants_are_checked() {
        let mut bad = meta(3, 0, b"z", b"a");
        let mut writer = Writer::new();
        bad.encode(&mut writer);
        assert!(ChunkMeta::decode(&mut Reader::new(writer.as_slice(), "t", 0)).is_err());
        bad = meta(3, 0, b"a", b"z");
        bad.sub_chunks[0].slot = 4;
        let mut writer = Writer::new();
        bad.encode(&mut writer);
        assert!(ChunkMeta::decode(&mut Reader::new(writer.as_slice(), "t", 0)).is_err());
    }

    #[test]
    fn a_sequence_number_above_2_56_is_refused_in_every_version_object() {
        // lds-hostile values:vlog.dv.last_sequence=past_end: a delta version whose
        // last_sequence is 2^56 decoded, and replay then skipped every batch silently.
        let mut delta = delta();
        delta.last_sequence = SEQUENCE_MAX;
        assert!(DeltaVersion::decode(&delta.encode(), 0).is_ok());
        for last_sequence in [SEQUENCE_MAX + 1, u64::MAX] {
            delta.last_sequence = last_sequence;
            let error = DeltaVersion::decode(&delta.encode(), 64).expect_err("last_sequence above 2^56 - 1");
            assert!(error.to_string().contains("last_sequence"), "{error}");
            let mut base = base();
            base.last_sequence = last_sequence;
            let error = BaseVersion::decode(&base.encode(), 64).expect_err("last_sequence above 2^56 - 1");
            assert!(error.to_string().contains("last_sequence"), "{error}");
            let mut journal = journal();
            journal.outputs[0].largest_seq = last_sequence;
            let error = CompactionJournal::decode(&journal.encode(), 64).expect_err("largest_seq above 2^56 - 1");
            assert!(error.to_string().contains("largest_seq"), "{error}");
        }
    }

    #[test]
    fn a_chunk_listing_one_slot_twice_is_refused() {
        // Found by the delta_version fuzz target: replay took such a chunk, and the version
        // then owned fewer slots than its chunks list (fuzz/regressions/delta_version).
        let mut twice = meta(3, 0, b"a", b"z");
        twice.sub_chunks.push(SubChunkRef { slot: 3, digest: [0; 32] });
        let mut writer = Writer::new();
        twice.encode(&mut writer);
        assert!(matches!(
            ChunkMeta::decode(&mut Reader::new(writer.as_slice(), "t", 0)),
            Err(FormatError::InvalidField { field: "slot", .. })
        ));
        let delta = DeltaVersion { added: vec![twice], ..DeltaVersion::default() };
        assert!(DeltaVersion::decode(&delta.encode(), 0).is_err());
    }

    #[test]
    fn journal_cleaned_must_be_inputs() {
        let mut bad = journal();
        bad.cleaned = vec![77];
        assert!(CompactionJournal::decode(&bad.encode(), 0).is_err());
    }

    fn value_chunk(id: u64, slot: u64) -> ValueChunkMeta {
        ValueChunkMeta { value_chunk_id: id, slot, len_body: 1000, digest: [id as u8; 32] }
    }

    fn with_refs(mut chunk: ChunkMeta, refs: &[(u64, u64)]) -> ChunkMeta {
        chunk.flags |= CHUNK_FLAG_VALUE_REFS;
        chunk.value_refs = refs.to_vec();
        chunk
    }

    fn valued_base() -> BaseVersion {
        BaseVersion {
            geometry: geometry(),
            instance: 0,
            num_levels: 7,
            last_sequence: 10,
            label_generation: 1,
            ofs_backup_start: 0,
            lsn_backup_start: 1,
            compact_pointers: Vec::new(),
            chunks: vec![with_refs(meta(1, 1, b"a", b"f"), &[(3, 400), (4, 50)]), meta(2, 1, b"g", b"k")],
            values: Some(ValueSection { next_value_chunk_id: 5, chunks: vec![value_chunk(3, 5), value_chunk(4, 6)] }),
        }
    }

    #[test]
    fn value_sections_round_trip_and_count_live_bytes() {
        let base = valued_base();
        assert_eq!(BaseVersion::decode(&base.encode(), 0), Ok(base.clone()));
        let version = Version::from_base(&base).unwrap_or_else(|error| panic!("{error}"));
        version.assert_invariants();
        assert_eq!((version.live_bytes(3), version.live_bytes(4)), (400, 50));
        assert_eq!(version.slot_owner.get(&5), Some(&(VALUE_CHUNK_OWNER | 3)));
        assert_eq!(version.to_base(base.geometry, 0), base);
        let delta = DeltaVersion {
            last_sequence: 11,
            deleted: vec![DeletedChunk { chunk_id: 1, level: 1 }],
            added: vec![with_refs(meta(7, 2, b"a", b"f"), &[(3, 400), (8, 9)])],
            values: Some(ValueDelta { next_value_chunk_id: 9, deleted: vec![4], added: vec![value_chunk(8, 9)] }),
            ..DeltaVersion::default()
        };
        assert_eq!(DeltaVersion::decode(&delta.encode(), 0), Ok(delta.clone()));
        let mut next = version.clone();
        next.apply(&delta).unwrap_or_else(|error| panic!("{error}"));
        next.assert_invariants();
        assert_eq!((next.live_bytes(3), next.live_bytes(4), next.live_bytes(8)), (400, 0, 9));
        assert!(!next.value_chunks.contains_key(&4) && !next.slot_owner.contains_key(&6));
        assert_eq!(next.next_value_chunk_id, 9);
    }

    fn log_chunk(chunk_id: u64, lsn: u64, offset: u64) -> ChunkMeta {
        ChunkMeta {
            flags: CHUNK_FLAG_LOG_REFS,
            log_start: Some(LogPosition { offset, lsn }),
            ..meta(chunk_id, 0, b"b", b"d")
        }
    }

    #[test]
    fn log_chunks_round_trip_stay_in_level_0_and_hold_the_retention_start() {
        let mut base = base();
        base.chunks.push(log_chunk(9, 10, 2048));
        let bytes = base.encode();
        assert_eq!(BaseVersion::decode(&bytes, 0), Ok(base.clone()));
        let mut version = Version::from_base(&base).unwrap_or_else(|error| panic!("{error}"));
        // The backup start is lsn 12 at 4096; the log chunk names lsn 10 at 2048.
        assert_eq!(version.retention_start(), LogPosition { offset: 2048, lsn: 10 });
        let newer = DeltaVersion {
            last_sequence: 130,
            ofs_backup_start: 8192,
            lsn_backup_start: 20,
            added: vec![log_chunk(11, 12, 4096)],
            ..DeltaVersion::default()
        };
        assert_eq!(DeltaVersion::decode(&newer.encode(), 0), Ok(newer.clone()));
        version.apply(&newer).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(version.retention_start(), LogPosition { offset: 2048, lsn: 10 });
        // A merge takes the older log chunk: the retention start moves to the newer one's.
        let merged = DeltaVersion {
            last_sequence: 130,
            ofs_backup_start: 8192,
            lsn_backup_start: 20,
            deleted: vec![DeletedChunk { chunk_id: 9, level: 0 }],
            added: vec![meta(12, 1, b"b", b"d")],
            ..DeltaVersion::default()
        };
        version.apply(&merged).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(version.retention_start(), LogPosition { offset: 4096, lsn: 12 });
        let last = DeltaVersion { deleted: vec![DeletedChunk { chunk_id: 11, level: 0 }], ..merged.clone() };
        let last = DeltaVersion { added: Vec::new(), ..last };
        version.apply(&last).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(version.retention_start(), LogPosition { offset: 8192, lsn: 20 }, "no log chunk: the backup start");
        // A log chunk never leaves level 0: not by a delta, nor in a base version.
        let moved = DeltaVersion {
            added: vec![ChunkMeta { level: 1, ..log_chunk(13, 20, 8192) }],
            deleted: Vec::new(),
            ..last
        };
        assert_eq!(version.clone().apply(&moved), Err(ReplayError::LogChunkLevel { chunk_id: 13, level: 1 }));
        let mut deep = base.clone();
        deep.chunks.push(ChunkMeta { level: 2, ..log_chunk(14, 10, 2048) });
        assert_eq!(Version::from_base(&deep).err(), Some(ReplayError::LogChunkLevel { chunk_id: 14, level: 2 }));
        // The log start is encoded after the flag; an unaligned offset is refused.
        let mut unaligned = log_chunk(9, 10, 2048);
        unaligned.log_start = Some(LogPosition { offset: 2052, lsn: 10 });
        let mut writer = Writer::new();
        unaligned.encode(&mut writer);
        assert!(ChunkMeta::decode(&mut Reader::new(writer.as_slice(), "chunk metadata", 0)).is_err());
        assert_eq!(log_chunk(9, 10, 2048).encoded_len(), meta(9, 0, b"b", b"d").encoded_len() + LOG_START_LEN);
    }

    #[test]
    fn value_deltas_that_contradict_the_version_are_refused() {
        let version = Version::from_base(&valued_base()).unwrap_or_else(|error| panic!("{error}"));
        let refused = |delta: DeltaVersion| version.clone().apply(&delta).err();
        let values = |deleted: Vec<u64>, added: Vec<ValueChunkMeta>| {
            Some(ValueDelta { next_value_chunk_id: 20, deleted, added })
        };
        // Value chunk 4 is still referred to by chunk 1, which stays.
        assert_eq!(
            refused(DeltaVersion { values: values(vec![4], Vec::new()), ..DeltaVersion::default() }),
            Some(ReplayError::ValueChunkReferenced { value_chunk_id: 4 })
        );
        // A chunk naming a value chunk no one adds.
        let dangling = with_refs(meta(8, 1, b"x", b"z"), &[(12, 1)]);
        assert_eq!(
            refused(DeltaVersion { added: vec![dangling], ..DeltaVersion::default() }),
            Some(ReplayError::DanglingValueRef { chunk_id: 8, value_chunk_id: 12 })
        );
        // A value chunk on a chunk's slot, on another value chunk's, twice, or past the ids.
        assert_eq!(
            refused(DeltaVersion { values: values(Vec::new(), vec![value_chunk(9, 2)]), ..DeltaVersion::default() }),
            Some(ReplayError::SlotInUse { slot: 2, owner: 2 })
        );
        assert_eq!(
            refused(DeltaVersion { values: values(Vec::new(), vec![value_chunk(9, 6)]), ..DeltaVersion::default() }),
            Some(ReplayError::SlotInUse { slot: 6, owner: VALUE_CHUNK_OWNER | 4 })
        );
        assert_eq!(
            refused(DeltaVersion { values: values(Vec::new(), vec![value_chunk(3, 30)]), ..DeltaVersion::default() }),
            Some(ReplayError::ValueChunkTwice { value_chunk_id: 3 })
        );
        assert_eq!(
            refused(DeltaVersion { values: values(Vec::new(), vec![value_chunk(25, 30)]), ..DeltaVersion::default() }),
            Some(ReplayError::ValueChunkTwice { value_chunk_id: 25 })
        );
        // A chunk on a value chunk's slot.
        assert_eq!(
            refused(DeltaVersion { added: vec![meta(5, 1, b"x", b"z")], ..DeltaVersion::default() }),
            Some(ReplayError::SlotInUse { slot: 5, owner: VALUE_CHUNK_OWNER | 3 })
        );
        // Ids never go down; a moved value chunk (deleted and added with its id) is fine.
        assert_eq!(
            refused(DeltaVersion {
                values: Some(ValueDelta { next_value_chunk_id: 2, ..ValueDelta::default() }),
                ..DeltaVersion::default()
            }),
            Some(ReplayError::ValueIdDecreased { before: 5, after: 2 })
        );
        let mut moved = version.clone();
        let delta = DeltaVersion { values: values(vec![3], vec![value_chunk(3, 40)]), ..DeltaVersion::default() };
        moved.apply(&delta).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!((moved.value_chunks[&3].slot, moved.live_bytes(3)), (40, 400));
        moved.assert_invariants();
    }
}
