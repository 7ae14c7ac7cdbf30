//! The payloads of the version log (SPEC.md §6.1 to §6.3): base versions, delta versions and
//! compaction journal records.

use crate::codec::{count_u32, Reader, Writer};
use crate::entry::SEQUENCE_MAX;
use crate::error::FormatError;
use crate::geometry::Geometry;
use crate::value::{ValueChunkMeta, VALUE_CHUNK_META_LEN};
use crate::version::meta::{ChunkMeta, CHUNK_META_FIXED_LEN, LEVELS_COUNT_MAX, SUB_CHUNK_REF_LEN};

/// Bytes of a deleted-chunk entry in a delta version.
pub const DELETED_CHUNK_LEN: usize = 16;

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
