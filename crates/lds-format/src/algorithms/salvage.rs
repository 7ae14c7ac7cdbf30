//! Reading what is still readable, for repair and salvage: the newest version a damaged
//! version log still describes ([`last_good_version`]), and the entries of a damaged
//! sub-chunk (SPEC.md §8, [`salvage_sub_chunk`]). Every block is self-checking (its trailer holds a crc32c of its bytes), so the
//! entries of each block whose checksum holds are trusted whatever else is damaged:
//! - with a valid footer and block index, each indexed block is read and checked;
//! - otherwise blocks are found by scanning the body: at each position, entries are parsed
//!   and after each one the next 8 bytes are tried as the block's trailer (its entry count and
//!   checksum). After a damaged stretch the scan resynchronises at the next position where a
//!   whole block checks, and accepts a block only when its keys follow the keys read so far
//!   (blocks are in key order within a sub-chunk, so a block of an older chunk left in the
//!   padding is not taken for one of this chunk).
//!
//! Value chunks (SPEC.md §8.6) are recognised by their footer ([`salvage_value_chunk`]), or,
//! where the footer is lost, from a version's metadata ([`value_footer_of_meta`] rebuilds the
//! footer whose digest checks the body); each value read through a pointer is trusted when
//! its crc32c holds. [`zero_pointer_value`] is what a metadata image does to a pointer.

use std::collections::BTreeMap;

use crate::algorithms::recovery::{read_valid_object, ChainEnd, ChainObject, ChainWalk, Payload};
use crate::chunk::block::{entry_header, visit_block_checked, BLOCK_FLAG_COMPACT, BLOCK_TRAILER_LEN};
use crate::chunk::footer::{Footer, FOOTER_LEN};
use crate::chunk::index::decode_index;
use crate::codec::crc32c;
use crate::entry::{compare_internal, pack_seq_kind, unpack_seq_kind, Entry};
use crate::error::FormatError;
use crate::log::{AreaContext, ObjectType, HEADER_LEN, OBJECT_MAGIC};
use crate::value::{ValueChunkMeta, ValueFooter, ValuePointer, VALUE_FOOTER_LEN};
use crate::version::meta::{ChunkMeta, CHUNK_FLAG_LOG_REFS};
use crate::version::payload::{BaseVersion, CompactionJournal, DeletedChunk, DeltaVersion};
use crate::version::{ReplayError, Version};

/// Bytes of a sub-chunk's body that held no readable block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedSpan {
    /// Offset from the slot start.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
    /// The last key read before it, if any: the lost keys are above it.
    pub after_key: Option<Vec<u8>>,
    /// The last key of the damaged block (from the block index), or the first key read after
    /// the span: the lost keys are at or below it.
    pub through_key: Option<Vec<u8>>,
    /// Why the bytes could not be read.
    pub reason: String,
}

impl DamagedSpan {
    /// The lost key range in words.
    pub fn key_range(&self) -> String {
        let show = |key: &Option<Vec<u8>>| key.as_ref().map(|key| crate::codec::display_key(key));
        match (show(&self.after_key), show(&self.through_key)) {
            (Some(after), Some(through)) => format!("keys after {after} up to {through}"),
            (Some(after), None) => format!("keys after {after}"),
            (None, Some(through)) => format!("keys up to {through}"),
            (None, None) => "every key".into(),
        }
    }
}

/// What a damaged sub-chunk still holds.
#[derive(Debug, Clone, Default)]
pub struct SalvagedSubChunk {
    /// The footer, when it decodes and checks.
    pub footer: Option<Footer>,
    /// Why the footer, or else the block index, could not be used (blocks were scanned).
    pub tail_error: Option<FormatError>,
    /// Blocks whose checksum held.
    pub blocks_read: u64,
    /// Their entries, in the order found (sorted only when the blocks were).
    pub entries: Vec<Entry>,
    /// The stretches that held no readable block.
    pub damaged: Vec<DamagedSpan>,
}

/// Reads every readable entry of the sub-chunk in `slot` (a whole slot image; `offset` is its
/// device offset, for messages).
pub fn salvage_sub_chunk(slot: &[u8], offset: u64) -> SalvagedSubChunk {
    let mut salvaged = SalvagedSubChunk::default();
    if slot.len() < FOOTER_LEN {
        return salvaged;
    }
    let footer_at = slot.len() - FOOTER_LEN;
    let footer = match Footer::decode(&slot[footer_at..], offset + footer_at as u64, slot.len() as u64) {
        Ok(footer) => footer,
        Err(error) => {
            salvaged.tail_error = Some(error);
            scan_blocks(slot, footer_at, offset, &mut salvaged);
            return salvaged;
        }
    };
    salvaged.footer = Some(footer);
    let index_range = footer.ofs_index as usize..footer.ofs_filter as usize;
    match decode_index(&slot[index_range], offset + u64::from(footer.ofs_index), &footer) {
        Ok(index) => {
            let mut after_key: Option<Vec<u8>> = None;
            for entry in &index {
                let range = entry.ofs_block as usize..(entry.ofs_block + entry.len_block) as usize;
                let block_offset = offset + u64::from(entry.ofs_block);
                match read_block(&slot[range], block_offset) {
                    Ok(entries) => {
                        salvaged.blocks_read += 1;
                        salvaged.entries.extend(entries);
                    }
                    Err(error) => salvaged.damaged.push(DamagedSpan {
                        offset: u64::from(entry.ofs_block),
                        len: u64::from(entry.len_block),
                        after_key: after_key.clone(),
                        through_key: Some(entry.last_key.clone()),
                        reason: error.to_string(),
                    }),
                }
                after_key = Some(entry.last_key.clone());
            }
        }
        Err(error) => {
            salvaged.tail_error = Some(error);
            scan_blocks(slot, footer.len_body as usize, offset, &mut salvaged);
        }
    }
    salvaged
}

/// The entries of one block whose checksum holds (in any order).
fn read_block(bytes: &[u8], offset: u64) -> Result<Vec<Entry>, FormatError> {
    let mut entries = Vec::new();
    visit_block_checked(bytes, offset, false, |entry| {
        entries.push(Entry {
            key: entry.key.to_vec(),
            sequence: entry.sequence,
            kind: entry.kind,
            value: entry.value.to_vec(),
        });
    })?;
    Ok(entries)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The end of a block starting at `start` whose trailer checks, if one does: entries are
/// parsed one by one, and after each the next 8 bytes are tried as the trailer. Both entry
/// encodings are tried (SPEC.md §8.2): the trailer that ends the block says which it was.
fn block_at(body: &[u8], start: usize) -> Option<usize> {
    block_of_encoding(body, start, false).or_else(|| block_of_encoding(body, start, true))
}

fn block_of_encoding(body: &[u8], start: usize, compact: bool) -> Option<usize> {
    let flag = if compact { BLOCK_FLAG_COMPACT } else { 0 };
    let mut at = start;
    let mut count = 0u32;
    loop {
        let (seq_kind, len_key, len_value, key_start) = entry_header(body, at, compact).ok()?;
        unpack_seq_kind(seq_kind)?;
        if len_key == 0 {
            return None;
        }
        at = key_start.checked_add(len_key)?.checked_add(len_value)?;
        if at > body.len() {
            return None;
        }
        count = count.checked_add(1).filter(|&count| count < BLOCK_FLAG_COMPACT)?;
        if at + BLOCK_TRAILER_LEN <= body.len()
            && u32_at(body, at) == count | flag
            && u32_at(body, at + 4) == crc32c(&body[start..at + 4])
        {
            return Some(at + BLOCK_TRAILER_LEN);
        }
    }
}

/// Scans `slot[..end]` for blocks (see the module documentation).
fn scan_blocks(slot: &[u8], end: usize, offset: u64, salvaged: &mut SalvagedSubChunk) {
    let body = &slot[..end.min(slot.len())];
    let mut position = 0usize;
    let mut last: Option<(Vec<u8>, u64)> = None;
    let mut damaged_from: Option<usize> = None;
    // Each iteration advances `position` by at least one byte.
    while position < body.len() {
        let found = block_at(body, position).and_then(|block_end| {
            let entries = read_block(&body[position..block_end], offset + position as u64).ok()?;
            // Blocks follow each other in key order: a block whose first entry does not follow
            // the last one read is not this sub-chunk's.
            let first = entries.first()?;
            let follows = last.as_ref().is_none_or(|(key, seq_kind)| {
                compare_internal(key, *seq_kind, &first.key, pack_seq_kind(first.sequence, first.kind)).is_lt()
            });
            follows.then_some((block_end, entries))
        });
        match found {
            Some((block_end, entries)) => {
                if let Some(from) = damaged_from.take() {
                    salvaged.damaged.push(DamagedSpan {
                        offset: from as u64,
                        len: (position - from) as u64,
                        after_key: last.as_ref().map(|(key, _)| key.clone()),
                        through_key: entries.first().map(|entry| entry.key.clone()),
                        reason: "no block whose checksum holds".into(),
                    });
                }
                if let Some(entry) = entries.iter().max_by(|a, b| a.cmp_internal(b)) {
                    last = Some((entry.key.clone(), pack_seq_kind(entry.sequence, entry.kind)));
                }
                salvaged.blocks_read += 1;
                salvaged.entries.extend(entries);
                position = block_end;
            }
            None => {
                damaged_from.get_or_insert(position);
                position += 1;
            }
        }
    }
    // A stretch after the last block is the padding (and the tail, when the footer is lost),
    // not a damaged block, unless nothing was read at all.
    if salvaged.blocks_read == 0 && !body.is_empty() {
        salvaged.damaged.push(DamagedSpan {
            offset: 0,
            len: body.len() as u64,
            after_key: None,
            through_key: None,
            reason: "no block whose checksum holds".into(),
        });
    }
}

/// A value chunk recognised by its footer (SPEC.md §8.5, §8.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SalvagedValueChunk {
    /// The footer (magic, checksum and fields checked).
    pub footer: ValueFooter,
    /// Whether the digest holds over the body: when it does not, each value read from the body
    /// is still kept where its own crc32c holds.
    pub digest: Result<(), FormatError>,
}

/// The value chunk in `slot` (a whole slot image; `offset` is its device offset, for
/// messages): `None` when the slot does not end with a value chunk footer's magic, an error
/// when the footer has it but does not decode or check.
pub fn salvage_value_chunk(slot: &[u8], offset: u64) -> Option<Result<SalvagedValueChunk, FormatError>> {
    let footer_at = slot.len().checked_sub(VALUE_FOOTER_LEN)?;
    if !ValueFooter::has_magic(&slot[footer_at..]) {
        return None;
    }
    let footer = match ValueFooter::decode(&slot[footer_at..], offset + footer_at as u64, slot.len() as u64) {
        Ok(footer) => footer,
        Err(error) => return Some(Err(error)),
    };
    // `decode` checked that the body fits before the footer.
    let body = &slot[..footer.len_body as usize];
    let digest = footer.verify_digest(body, offset);
    Some(Ok(SalvagedValueChunk { footer, digest }))
}

/// The volume uuid a value chunk footer names, read without checking anything (to tell this
/// volume's damaged footers from another volume's leftovers).
pub fn value_footer_uuid(footer: &[u8]) -> Option<[u8; 16]> {
    footer.get(32..48)?.try_into().ok()
}

/// The footer of the value chunk `meta` describes (from a version), rebuilt from the metadata
/// and the volume's: where the footer on the device is lost, its digest still checks the body.
/// The digest kind is told by the digest itself (an xxh3-128 digest ends with 16 zero bytes,
/// SPEC.md §8.3).
pub fn value_footer_of_meta(
    meta: &ValueChunkMeta,
    instance: u32,
    volume_uuid: [u8; 16],
    slot_size: u64,
) -> ValueFooter {
    let flags = if meta.digest[16..] == [0; 16] { crate::digest::FOOTER_FLAG_XXH3 } else { 0 };
    ValueFooter {
        flags,
        instance,
        value_chunk_id: meta.value_chunk_id,
        len_body: meta.len_body,
        slot_size: u32::try_from(slot_size).unwrap_or(u32::MAX),
        volume_uuid,
        digest: meta.digest,
    }
}

/// The crc32c of `len` zero bytes.
pub fn crc32c_of_zeros(len: u64) -> u32 {
    const ZEROS: [u8; 4096] = [0; 4096];
    let mut crc = 0u32;
    let mut left = len;
    // Bounded by `len`: each round takes up to 4 KiB of it.
    while left > 0 {
        let take = left.min(ZEROS.len() as u64) as usize;
        crc = crc32c::crc32c_append(crc, &ZEROS[..take]);
        left -= take as u64;
    }
    crc
}

/// A pointer entry's value as a metadata image keeps it (SPEC.md §8.6): its lengths and
/// extents (metadata: they say where the value's bytes are) stay, and its `value_crc32c`
/// becomes that of `len_value` zero bytes, the value the image's zeroed value chunks hold.
/// False, and nothing changed, when the bytes are no pointer.
pub fn zero_pointer_value(pointer: &mut [u8]) -> bool {
    let Ok(decoded) = ValuePointer::decode(pointer, 0) else { return false };
    let crc = crc32c_of_zeros(u64::from(decoded.len_value));
    pointer[4..8].copy_from_slice(&crc.to_le_bytes());
    true
}

/// The newest version a damaged version log still describes: the valid base version with the
/// largest lsn that builds, and the delta versions and journal records that chain after it
/// (across a wrap) while they carry its SN and apply (SPEC.md §9.1, §9.2 step 5 and 6).
#[derive(Debug, Clone)]
pub struct GoodVersion {
    /// Offset of the base version in the area.
    pub base_offset: u64,
    /// Its lsn.
    pub base_lsn: u64,
    /// Its SN.
    pub sn: u64,
    /// The base version itself.
    pub base: BaseVersion,
    /// The version after the objects that apply.
    pub version: Version,
    /// The lsn of the last object applied.
    pub last_lsn: u64,
    /// Unfinished compactions journaled after the base version, by id.
    pub unfinished_compactions: BTreeMap<u64, CompactionJournal>,
    /// The largest compaction id seen.
    pub compaction_id_max: u64,
    /// Why the replay stopped before the chain's end, if it did.
    pub stopped: Option<String>,
    /// Parts of the base version and of delta versions left out because they contradict the
    /// version (a chunk on a slot beyond the slot area or already in use, at a level beyond
    /// the tree, added twice; a deletion of a chunk not there; the flag `log_refs` of a chunk
    /// outside level 0, which keeps the chunk).
    pub left_out: Vec<LeftOut>,
    /// The area ranges `(offset, len)` of the objects read: the base version and those after it.
    pub objects: Vec<(u64, u64)>,
}

/// A part of a base or delta version left out because it contradicts the version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    /// What, and why.
    pub what: String,
    /// The chunk left out, with its metadata as recorded, when the part is an added chunk
    /// (its entries are then in no chunk of the version); `None` once a later delta version
    /// deletes it (its entries moved on to that delta's chunks).
    pub chunk: Option<ChunkMeta>,
}

impl LeftOut {
    fn part(what: String) -> Self {
        Self { what, chunk: None }
    }
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

/// The part of a delta (or base) version that `error` objects to, removed; `None` when the
/// error names nothing in it.
fn leave_out(
    added: &mut Vec<ChunkMeta>,
    deleted: &mut Vec<DeletedChunk>,
    values: &mut Option<crate::version::payload::ValueDelta>,
    error: &ReplayError,
) -> Option<LeftOut> {
    let position = match error {
        ReplayError::ValueChunkMissing { value_chunk_id } | ReplayError::ValueChunkReferenced { value_chunk_id } => {
            let values = values.as_mut()?;
            let position = values.deleted.iter().rposition(|id| id == value_chunk_id)?;
            values.deleted.remove(position);
            return Some(LeftOut::part(format!("the deletion of value chunk {value_chunk_id} ({error})")));
        }
        ReplayError::ValueChunkTwice { value_chunk_id } | ReplayError::ValueSlotOutOfRange { value_chunk_id, .. } => {
            let values = values.as_mut()?;
            let position = values.added.iter().rposition(|chunk| chunk.value_chunk_id == *value_chunk_id)?;
            values.added.remove(position);
            return Some(LeftOut::part(format!("value chunk {value_chunk_id} ({error})")));
        }
        ReplayError::ValueIdDecreased { before, .. } => {
            values.as_mut()?.next_value_chunk_id = *before;
            return Some(LeftOut::part(format!("the value chunk id counter ({error})")));
        }
        ReplayError::DanglingValueRef { chunk_id, .. } => added.iter().position(|chunk| chunk.chunk_id == *chunk_id)?,
        ReplayError::SlotInUse { slot, owner }
            if owner & crate::version::VALUE_CHUNK_OWNER != 0
                || !added.iter().any(|chunk| chunk.slots().any(|used| used == *slot)) =>
        {
            let values = values.as_mut()?;
            let position = values.added.iter().rposition(|chunk| chunk.slot == *slot)?;
            let value_chunk = values.added.remove(position);
            return Some(LeftOut::part(format!("value chunk {} ({error})", value_chunk.value_chunk_id)));
        }
        ReplayError::DeletedMissing { chunk_id, level } => {
            let position = deleted.iter().position(|entry| entry.chunk_id == *chunk_id && entry.level == *level)?;
            deleted.remove(position);
            return Some(LeftOut::part(format!(
                "the deletion of chunk {chunk_id} (not in the version at level {level})"
            )));
        }
        ReplayError::AddedTwice { chunk_id } => added.iter().rposition(|chunk| chunk.chunk_id == *chunk_id)?,
        ReplayError::LogChunkLevel { chunk_id, level } => {
            // A log chunk outside level 0 (SPEC.md §8.9) keeps its entries and its level: its
            // metadata loses the flag, so that the version builds and a reader of it (repair)
            // finds log references in a chunk without the flag and rewrites it with them read
            // into puts. Dropping the chunk would drop data nothing else holds.
            let chunk = added.iter_mut().find(|chunk| chunk.chunk_id == *chunk_id && chunk.is_log_chunk())?;
            chunk.flags &= !CHUNK_FLAG_LOG_REFS;
            chunk.log_start = None;
            return Some(LeftOut::part(format!("the flag log_refs of chunk {chunk_id} at level {level} ({error}): its log references are to be read into puts")));
        }
        ReplayError::LevelOutOfRange { chunk_id, .. } | ReplayError::SlotOutOfRange { chunk_id, .. } => {
            added.iter().position(|chunk| chunk.chunk_id == *chunk_id)?
        }
        ReplayError::SlotInUse { slot, .. } => {
            added.iter().rposition(|chunk| chunk.slots().any(|used| used == *slot))?
        }
    };
    let chunk = added.remove(position);
    Some(LeftOut { what: format!("chunk {} ({error})", chunk.chunk_id), chunk: Some(chunk) })
}

/// The version a base version describes, leaving out the chunks that contradict it.
pub fn tolerant_base(base: &BaseVersion) -> (Version, Vec<LeftOut>) {
    let mut base = base.clone();
    let mut left_out: Vec<LeftOut> = Vec::new();
    // Each failed attempt removes one chunk.
    let value_chunks = base.values.as_ref().map_or(0, |values| values.chunks.len());
    for _ in 0..=base.chunks.len() + value_chunks {
        match Version::from_base(&base) {
            Ok(version) => return (version, left_out),
            Err(error) => {
                let mut values = base.values.as_ref().map(|values| crate::version::payload::ValueDelta {
                    next_value_chunk_id: values.next_value_chunk_id,
                    deleted: Vec::new(),
                    added: values.chunks.clone(),
                });
                let what = leave_out(&mut base.chunks, &mut Vec::new(), &mut values, &error);
                if let (Some(section), Some(values)) = (base.values.as_mut(), values) {
                    section.chunks = values.added;
                }
                match what {
                    Some(what) => left_out.push(what),
                    None => break,
                }
            }
        }
    }
    // Its chunks are left out whole, each one's metadata kept.
    left_out.extend(base.chunks.drain(..).map(|chunk| LeftOut {
        what: format!("chunk {} (the base version does not build with it)", chunk.chunk_id),
        chunk: Some(chunk),
    }));
    if let Some(values) = base.values.as_mut() {
        values.chunks.clear();
    }
    let version = Version::from_base(&base).unwrap_or_else(|_| Version {
        num_levels: base.num_levels.clamp(1, crate::version::meta::LEVELS_COUNT_MAX),
        last_sequence: base.last_sequence,
        label_generation: base.label_generation,
        ofs_backup_start: base.ofs_backup_start,
        lsn_backup_start: base.lsn_backup_start,
        compact_pointers: BTreeMap::new(),
        chunks: BTreeMap::new(),
        slot_owner: BTreeMap::new(),
        num_slots: base.geometry.num_slots,
        value_chunks: BTreeMap::new(),
        value_live: BTreeMap::new(),
        next_value_chunk_id: 1,
        has_values: base.values.is_some(),
    });
    left_out.push(LeftOut::part("every chunk of the base version".into()));
    (version, left_out)
}

/// Applies a delta version, leaving out the parts that contradict the version.
pub fn tolerant_apply(version: &mut Version, delta: &DeltaVersion) -> Vec<LeftOut> {
    let mut delta = delta.clone();
    let mut left_out = Vec::new();
    // Each failed attempt removes one part of the delta.
    let value_parts = delta.values.as_ref().map_or(0, |values| values.added.len() + values.deleted.len() + 1);
    for _ in 0..=delta.added.len() + delta.deleted.len() + value_parts {
        match version.apply(&delta) {
            Ok(()) => return left_out,
            Err(error) => match leave_out(&mut delta.added, &mut delta.deleted, &mut delta.values, &error) {
                Some(what) => left_out.push(what),
                None => break,
            },
        }
    }
    // What is left of the delta is not applied: its chunks are left out with their metadata.
    left_out.extend(delta.added.drain(..).map(|chunk| LeftOut {
        what: format!("chunk {} (the rest of its delta version does not apply)", chunk.chunk_id),
        chunk: Some(chunk),
    }));
    left_out.push(LeftOut::part("the rest of a delta version".into()));
    left_out
}

/// Every valid object of a log area, wherever it stands (a scan of each 8-byte position).
pub fn valid_objects(area: &[u8], context: &AreaContext) -> Vec<ChainObject> {
    each_valid_object(area, context).collect()
}

/// Every valid object of a log area, as [`valid_objects`], one at a time: a version log may
/// hold hundreds of thousands, and a reader that looks at each in turn need not hold them.
pub fn each_valid_object<'a>(area: &'a [u8], context: &AreaContext) -> impl Iterator<Item = ChainObject> + 'a {
    let context = *context;
    (0..area.len().saturating_sub(HEADER_LEN - 1))
        .step_by(8)
        .filter(move |&position| area[position..position + 4] == OBJECT_MAGIC)
        .filter_map(move |position| read_valid_object(area, position as u64, &context).ok())
}

/// Visits the objects chained from the object at `start` with `lsn`, following a WOR to the
/// WOL at offset 0 (SPEC.md §9.1, §9.3 step 2), at most one lap of the area, one at a time
/// and in order, until `visit` returns false.
fn chain_across_wraps(
    area: &[u8],
    context: &AreaContext,
    start: u64,
    lsn: u64,
    visit: &mut dyn FnMut(&ChainObject) -> bool,
) {
    let (mut offset, mut expected) = (start, lsn);
    let mut followed = 0u64;
    // The SN of the last object visited: a continuation starts with a WOL whose SN is not
    // smaller.
    let mut last_sn: Option<u64> = None;
    // Each segment follows at least one object; the byte budget bounds the loop.
    loop {
        let mut segment = ChainWalk::new(area, context, offset, Some(expected));
        let continuation = last_sn.is_some();
        let mut segment_last_lsn = None;
        for object in segment.by_ref() {
            if segment_last_lsn.is_none()
                && continuation
                && (object.object_type != ObjectType::WrapLeft || last_sn.is_some_and(|sn| object.header.sn < sn))
            {
                return;
            }
            followed += object.header.total_len();
            segment_last_lsn = Some(object.header.lsn);
            if !visit(&object) {
                return;
            }
            last_sn = Some(object.header.sn);
        }
        if continuation && segment_last_lsn.is_none() {
            // An empty continuation: the chain ends at the WOR.
            return;
        }
        let wrapped = segment.end() == Some(&ChainEnd::WrapRight);
        let Some(next) = segment_last_lsn.and_then(|lsn| lsn.checked_add(1)) else { return };
        if !wrapped || followed > context.len_area {
            return;
        }
        (offset, expected) = (0, next);
    }
}

/// The newest version the area still describes, or `None` when no valid base version builds.
pub fn last_good_version(area: &[u8], context: &AreaContext) -> Option<GoodVersion> {
    // The base versions only, as the scan finds them: not every object of the area.
    let mut bases: Vec<ChainObject> =
        each_valid_object(area, context).filter(|object| matches!(object.payload, Payload::Base(_))).collect();
    bases.sort_by_key(|object| std::cmp::Reverse(object.header.lsn));
    bases.into_iter().find_map(|object| {
        let Payload::Base(base) = &object.payload else { return None };
        let (mut version, left_out) = tolerant_base(base);
        let sn = object.header.sn;
        let mut good = GoodVersion {
            base_offset: object.offset,
            base_lsn: object.header.lsn,
            sn,
            base: (**base).clone(),
            version: version.clone(),
            last_lsn: object.header.lsn,
            unfinished_compactions: BTreeMap::new(),
            compaction_id_max: 0,
            stopped: None,
            left_out,
            objects: vec![(object.offset, object.header.total_len())],
        };
        // The chain is walked object by object (the first is the base version itself), not
        // collected: a version log may hold hundreds of thousands.
        let mut is_base = true;
        chain_across_wraps(area, context, object.offset, object.header.lsn, &mut |next| {
            if std::mem::take(&mut is_base) {
                return true;
            }
            match &next.payload {
                Payload::Delta(_) | Payload::Journal(_) if next.header.sn != sn => {
                    good.stopped = Some(format!(
                        "the object at offset {} (lsn {}) has SN {}, the base version {sn}",
                        next.offset, next.header.lsn, next.header.sn
                    ));
                    return false;
                }
                Payload::Delta(delta) => {
                    // A deletion of a chunk left out earlier (the version holds no chunk of
                    // that id at that level): its entries moved on to this delta's chunks.
                    for deleted in &delta.deleted {
                        let in_version =
                            version.chunks.get(&deleted.chunk_id).is_some_and(|chunk| chunk.level == deleted.level);
                        if in_version {
                            continue;
                        }
                        for earlier in &mut good.left_out {
                            if earlier
                                .chunk
                                .as_ref()
                                .is_some_and(|chunk| chunk.chunk_id == deleted.chunk_id && chunk.level == deleted.level)
                            {
                                earlier.chunk = None;
                            }
                        }
                    }
                    good.left_out.extend(tolerant_apply(&mut version, delta));
                    if delta.compaction_id != 0 {
                        good.unfinished_compactions.remove(&delta.compaction_id);
                        good.compaction_id_max = good.compaction_id_max.max(delta.compaction_id);
                    }
                }
                Payload::Journal(journal) => {
                    good.compaction_id_max = good.compaction_id_max.max(journal.compaction_id);
                    good.unfinished_compactions.insert(journal.compaction_id, journal.clone());
                }
                Payload::Base(_) => return false,
                _ => {}
            }
            good.last_lsn = next.header.lsn;
            good.objects.push((next.offset, next.header.total_len()));
            true
        });
        good.version = version;
        Some(good)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::builder::{ChunkBuilder, ChunkIdentity, ChunkOptions};
    use crate::entry::EntryKind;

    /// A chunk of 400 entries in blocks of about 512 bytes, with compact entries or fixed ones.
    fn built_slot(compact: bool) -> (Vec<u8>, Vec<Entry>) {
        let mut builder = ChunkBuilder::new(ChunkOptions {
            slot_size: 65536,
            block_size: 512,
            bloom_bits_per_key: 10,
            digest: crate::digest::DigestKind::Blake3,
            sketch_precision: 0,
            compact_entries: compact,
        });
        let mut entries = Vec::new();
        for number in 0..400u64 {
            let entry = Entry {
                key: format!("key-{number:05}").into_bytes(),
                sequence: number + 1,
                kind: EntryKind::Put,
                value: vec![b'v'; (number % 40) as usize],
            };
            assert!(builder.add(&entry.key, entry.sequence, entry.kind, &entry.value));
            entries.push(entry);
        }
        let identity = ChunkIdentity {
            volume_uuid: [7; 16],
            instance: 0,
            chunk_id: 3,
            sub_chunk_index: 0,
            num_sub_chunks: 1,
            level: 1,
            flags: 0,
        };
        let Some(built) = builder.finish(identity) else { panic!("a chunk") };
        (built.slot_image(), entries)
    }

    #[test]
    fn an_intact_chunk_gives_every_entry() {
        for compact in [false, true] {
            let (slot, entries) = built_slot(compact);
            let salvaged = salvage_sub_chunk(&slot, 0);
            assert!(salvaged.footer.is_some() && salvaged.tail_error.is_none());
            assert!(salvaged.damaged.is_empty());
            assert_eq!(salvaged.entries, entries);
        }
    }

    #[test]
    fn a_bad_block_loses_only_its_keys_with_the_index() {
        for compact in [false, true] {
            let (mut slot, entries) = built_slot(compact);
            slot[700] ^= 0x40;
            let salvaged = salvage_sub_chunk(&slot, 0);
            assert_eq!(salvaged.damaged.len(), 1);
            let span = &salvaged.damaged[0];
            assert!(span.offset <= 700 && 700 < span.offset + span.len);
            let lost = entries.len() - salvaged.entries.len();
            assert!(lost > 0 && lost < 40, "lost {lost}");
            assert!(salvaged.entries.iter().all(|entry| entries.contains(entry)));
            assert!(span.after_key.is_some() && span.through_key.is_some());
        }
    }

    #[test]
    fn without_footer_the_blocks_are_scanned() {
        for compact in [false, true] {
            let (mut slot, entries) = built_slot(compact);
            let end = slot.len();
            slot[end - 100] ^= 1;
            slot[1500] ^= 0x10;
            let salvaged = salvage_sub_chunk(&slot, 0);
            assert!(salvaged.footer.is_none() && salvaged.tail_error.is_some());
            assert_eq!(salvaged.damaged.len(), 1, "{:?}", salvaged.damaged);
            let lost = entries.len() - salvaged.entries.len();
            assert!(lost > 0 && lost < 40, "lost {lost}");
            assert!(salvaged.entries.iter().all(|entry| entries.contains(entry)));
        }
    }

    #[test]
    fn a_stale_block_in_the_padding_is_not_taken() {
        for compact in [false, true] {
            let (mut slot, entries) = built_slot(compact);
            // Copy an early block into the padding (as an older chunk's leftover) and lose the
            // footer: the copy does not follow the keys read, so it is left out.
            let Ok(footer) = Footer::decode(&slot[slot.len() - FOOTER_LEN..], 0, slot.len() as u64) else {
                panic!("footer")
            };
            let Some(first_end) = block_at(&slot, 0) else { panic!("first block") };
            let copy = slot[..first_end].to_vec();
            let at = footer.len_body as usize + 100;
            slot[at..at + copy.len()].copy_from_slice(&copy);
            let end = slot.len();
            slot[end - 1] ^= 1;
            let salvaged = salvage_sub_chunk(&slot, 0);
            assert_eq!(salvaged.entries, entries);
        }
    }

    fn value_slot(digest: crate::digest::DigestKind) -> (Vec<u8>, crate::value::BuiltValueChunk, Vec<ValuePointer>) {
        use crate::value::{ValueFormat, ValuePacker};
        let format = ValueFormat { slot_size: 65536, instance: 1, volume_uuid: [7; 16], digest };
        let mut packer = ValuePacker::new(format);
        let pointers: Vec<ValuePointer> = (0..5u8)
            .map(|number| {
                let value = vec![b'a' + number; 3000 + usize::from(number)];
                packer.add(&value, || Ok::<_, ()>((9, 30))).unwrap_or_else(|()| panic!("allocate"))
            })
            .collect();
        let mut chunks = packer.finish();
        assert_eq!(chunks.len(), 1);
        let chunk = chunks.remove(0);
        (chunk.slot_image(), chunk, pointers)
    }

    #[test]
    fn a_value_chunk_is_recognised_by_its_footer_and_checked_by_its_digest() {
        for digest in [crate::digest::DigestKind::Blake3, crate::digest::DigestKind::Xxh3] {
            let (mut slot, chunk, _) = value_slot(digest);
            let Some(Ok(found)) = salvage_value_chunk(&slot, 1 << 20) else { panic!("a value chunk") };
            assert_eq!(found.footer, chunk.footer);
            assert_eq!(found.digest, Ok(()));
            assert_eq!(value_footer_uuid(&slot[slot.len() - VALUE_FOOTER_LEN..]), Some([7; 16]));
            // Its footer rebuilt from the version's metadata checks the body as the footer does.
            let rebuilt = value_footer_of_meta(&chunk.meta(), 1, [7; 16], 65536);
            assert_eq!(rebuilt, chunk.footer);
            assert_eq!(rebuilt.verify_digest(&slot[..chunk.body.len()], 0), Ok(()));

            slot[100] ^= 1;
            let Some(Ok(found)) = salvage_value_chunk(&slot, 0) else { panic!("a value chunk") };
            assert!(matches!(found.digest, Err(FormatError::DigestMismatch { .. })), "{:?}", found.digest);
            let end = slot.len();
            slot[end - 10] ^= 1;
            assert!(matches!(salvage_value_chunk(&slot, 0), Some(Err(FormatError::ChecksumMismatch { .. }))));
            slot[end - VALUE_FOOTER_LEN..].fill(0);
            assert!(salvage_value_chunk(&slot, 0).is_none());
        }
        assert!(salvage_value_chunk(&[0; 100], 0).is_none());
    }

    #[test]
    fn a_zeroed_pointer_keeps_its_extents_and_names_zeros() {
        let (_, _, pointers) = value_slot(crate::digest::DigestKind::Xxh3);
        for pointer in pointers {
            let mut bytes = pointer.encode();
            assert!(zero_pointer_value(&mut bytes));
            let Ok(zeroed) = ValuePointer::decode(&bytes, 0) else { panic!("a pointer") };
            assert_eq!(zeroed.extents, pointer.extents);
            assert_eq!(zeroed.len_value, pointer.len_value);
            assert_eq!(zeroed.value_crc32c, crc32c(&vec![0; pointer.len_value as usize]));
            assert_ne!(zeroed.value_crc32c, pointer.value_crc32c);
        }
        let mut not_a_pointer = vec![1u8; 20];
        assert!(!zero_pointer_value(&mut not_a_pointer));
        assert_eq!(not_a_pointer, vec![1u8; 20]);
        assert_eq!(crc32c_of_zeros(0), crc32c(&[]));
        assert_eq!(crc32c_of_zeros(10_000), crc32c(&[0; 10_000]));
    }

    #[test]
    fn a_log_chunk_outside_level_0_stays_at_its_level_without_the_flag() {
        use crate::log::LogPosition;
        use crate::version::tests::{geometry, meta};
        let log_chunk = |chunk_id, level| ChunkMeta {
            flags: CHUNK_FLAG_LOG_REFS,
            log_start: Some(LogPosition { offset: 2048, lsn: 10 }),
            ..meta(chunk_id, level, b"b", b"d")
        };
        let base = BaseVersion {
            geometry: geometry(),
            instance: 0,
            num_levels: 4,
            last_sequence: 100,
            label_generation: 1,
            ofs_backup_start: 4096,
            lsn_backup_start: 12,
            compact_pointers: Vec::new(),
            chunks: vec![log_chunk(3, 0), log_chunk(5, 2), meta(7, 1, b"a", b"z")],
            values: None,
        };
        assert!(Version::from_base(&base).is_err(), "a log chunk at level 2 does not build");
        let (version, left_out) = tolerant_base(&base);
        assert_eq!(version.chunks.len(), 3, "no chunk dropped: {left_out:?}");
        let moved = &version.chunks[&5];
        assert_eq!((moved.level, moved.is_log_chunk(), moved.log_start), (2, false, None));
        assert!(version.chunks[&3].is_log_chunk(), "the one at level 0 keeps its flag");
        assert_eq!(version.retention_start(), LogPosition { offset: 2048, lsn: 10 });
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        assert!(left_out[0].what.contains("chunk 5"), "{left_out:?}");
        assert!(left_out[0].chunk.is_none(), "the chunk stays: {left_out:?}");
        // The same in a delta version.
        let mut version =
            Version::from_base(&BaseVersion { chunks: Vec::new(), ..base }).unwrap_or_else(|e| panic!("{e}"));
        let delta = DeltaVersion { last_sequence: 100, added: vec![log_chunk(9, 1)], ..DeltaVersion::default() };
        let left_out = tolerant_apply(&mut version, &delta);
        assert_eq!(left_out.len(), 1, "{left_out:?}");
        assert!(version.chunks.get(&9).is_some_and(|chunk| chunk.level == 1 && !chunk.is_log_chunk()));
    }

    #[test]
    fn garbage_gives_nothing_and_no_panic() {
        let mut state = 12345u64;
        let slot: Vec<u8> = (0..65536)
            .map(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 33) as u8
            })
            .collect();
        let salvaged = salvage_sub_chunk(&slot, 0);
        assert!(salvaged.entries.is_empty());
        assert_eq!(salvaged.damaged.len(), 1);
    }

    /// A version log whose newest delta adds a chunk on a slot beyond the slot area (chunk id
    /// and slot 2^62); with `deleted_later`, a delta after it deletes that chunk.
    fn left_out_log(deleted_later: bool) -> (GoodVersion, ChunkMeta) {
        use crate::algorithms::image::ImageBuilder;
        use crate::geometry::{plan_layout, LayoutRequest, LogKind};
        use crate::label::Label;
        use crate::log::area_context;
        let request = LayoutRequest { volume_len: 4 << 20, sector_size: Some(4096), ..LayoutRequest::default() };
        let geometry = plan_layout(&request, [0x31; 16]).unwrap_or_else(|error| panic!("{error}"));
        let mut image = ImageBuilder::format(Label::new(geometry, "left out"));
        let entries = [(b"k".to_vec(), 1, EntryKind::Put, b"v".to_vec())];
        let mut chunk = image.write_chunk(0, 0, 0, 0, &entries);
        chunk.chunk_id = 1 << 62;
        chunk.sub_chunks[0].slot = 1 << 62;
        let mut deltas = vec![DeltaVersion { added: vec![chunk.clone()], last_sequence: 1, ..DeltaVersion::default() }];
        if deleted_later {
            let deleted = vec![DeletedChunk { chunk_id: 1 << 62, level: 0 }];
            deltas.push(DeltaVersion { deleted, last_sequence: 1, ..DeltaVersion::default() });
        }
        for delta in &deltas {
            let state = &mut image.instances[0];
            let ofs_area = state.version_log.context().ofs_area as usize;
            let pending = state
                .version_log
                .append(ObjectType::DeltaVersion, state.sn, &delta.encode())
                .unwrap_or_else(|error| panic!("{error}"));
            for write in pending {
                let at = ofs_area + write.offset as usize;
                image.bytes[at..at + write.bytes.len()].copy_from_slice(&write.bytes);
            }
        }
        let context = area_context(&geometry, LogKind::Version, 0);
        let good = last_good_version(image.area(LogKind::Version, 0), &context);
        (good.unwrap_or_else(|| panic!("no good version")), chunk)
    }

    #[test]
    fn a_chunk_left_out_keeps_its_metadata_until_a_later_delta_deletes_it() {
        let (good, chunk) = left_out_log(false);
        assert!(good.version.chunks.is_empty());
        let chunks: Vec<&ChunkMeta> = good.left_out.iter().filter_map(|left_out| left_out.chunk.as_ref()).collect();
        assert_eq!(chunks, vec![&chunk], "{:?}", good.left_out);
        assert!(good.left_out[0].what.contains("beyond num_slots"), "{}", good.left_out[0]);
        // Deleted by a later delta (a compaction took its entries): nothing of it is lost.
        let (good, _) = left_out_log(true);
        assert!(good.left_out.iter().all(|left_out| left_out.chunk.is_none()), "{:?}", good.left_out);
        assert!(good.left_out.iter().any(|left_out| left_out.what.contains("the deletion of chunk")));
    }
}
