//! Rebuilding one instance's tree from what is still readable (see the crate documentation).

use std::collections::{BTreeMap, BTreeSet};

use lds_check::{chunk_problems, CheckOptions, Code, Repair};
use lds_format::algorithms::instance::{recover_instance, BackupRecovery, ChainEndVerdict, InstanceRecovery};
use lds_format::algorithms::recovery::{recover_backup_log_prefix, Payload, ReplayBatch, VersionLogError};
use lds_format::algorithms::salvage::{last_good_version, salvage_sub_chunk, valid_objects, GoodVersion};
use lds_format::batch::decode_entries;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::codec::display_key;
use lds_format::entry::Entry;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::Label;
use lds_format::log::{area_context, read_object, AreaContext, LogPosition, ObjectHeader, HEADER_LEN, OBJECT_MAGIC};
use lds_format::version::meta::{ChunkMeta, CHUNK_FLAG_ODD};
use lds_format::version::payload::{BaseVersion, CompactionJournal, DeltaVersion};
use lds_format::version::Version;
use lds_volume::block::read_tolerant;
use lds_volume::{BlockDevice, DeviceError};

use crate::dropped::{Dropped, KeyFrom, Lost};
use crate::logchunks::{self, Resolver};
use crate::{Fix, FixClass, RepairError};

/// An instance as the volume holds it: its log areas, what recovery makes of them, and (when
/// its version log is damaged) the newest version the area still describes.
pub(crate) struct Source {
    pub(crate) instance: u32,
    version_area: Vec<u8>,
    backup_area: Vec<u8>,
    recovery: Result<InstanceRecovery, VersionLogError>,
    good: Option<GoodVersion>,
    /// The value chunks only the backup log names, by id, with their slots (read once).
    pending_values: BTreeMap<u64, u64>,
}

fn version_log_broken(recovery: &Result<InstanceRecovery, VersionLogError>) -> bool {
    !matches!(recovery, Ok(recovery) if !matches!(recovery.version_end, ChainEndVerdict::Broken { .. }))
}

impl Source {
    pub(crate) fn read(device: &dyn BlockDevice, geometry: &Geometry, instance: u32) -> Result<Self, DeviceError> {
        let (version_offset, version_len) = geometry.log_area(LogKind::Version, instance);
        let (backup_offset, backup_len) = geometry.log_area(LogKind::Backup, instance);
        // Unreadable sectors read as zeros: damage, as a zeroed sector is.
        let (version_area, _) = read_tolerant(device, version_offset, version_len, geometry.sector())?;
        let (backup_area, _) = read_tolerant(device, backup_offset, backup_len, geometry.sector())?;
        let recovery = recover_instance(geometry, instance, &version_area, &backup_area);
        let good = if version_log_broken(&recovery) {
            last_good_version(&version_area, &area_context(geometry, LogKind::Version, instance))
        } else {
            None
        };
        // SPEC.md §8.6: written before their batch, not yet added by a flush; none when the
        // backup log does not replay.
        let pending_values = match &recovery {
            Ok(recovery) => recovery
                .pending_value_chunks(&backup_area, &area_context(geometry, LogKind::Backup, instance))
                .unwrap_or_default(),
            Err(_) => BTreeMap::new(),
        };
        Ok(Self { instance, version_area, backup_area, recovery, good, pending_values })
    }

    /// The recovered version, when the version log recovers.
    pub(crate) fn version(&self) -> Option<Version> {
        self.recovery.as_ref().ok().map(|recovery| recovery.version_log.version.clone())
    }

    /// The geometry the live base version replicates.
    pub(crate) fn base_geometry(&self) -> Option<Geometry> {
        self.recovery.as_ref().ok().map(|recovery| recovery.version_log.base.geometry)
    }

    /// The id of an unfinished journaled compaction, if any (SPEC.md §12).
    pub(crate) fn unfinished_compaction(&self) -> Option<u64> {
        self.recovery
            .as_ref()
            .ok()
            .and_then(|recovery| recovery.version_log.unfinished_compactions.keys().next().copied())
    }

    /// The label generation the live base version records (0 when it does not recover).
    pub(crate) fn base_label_generation(&self) -> u64 {
        self.recovery.as_ref().map_or(0, |recovery| recovery.version_log.base.label_generation)
    }

    /// The slots of the value chunks only the backup log names (SPEC.md §8.6: written before
    /// their batch, not yet added by a flush), by value chunk id.
    pub(crate) fn pending_value_slots(&self) -> &BTreeMap<u64, u64> {
        &self.pending_values
    }

    /// Every slot a version of the old state may read: the recovered version's (chunks and
    /// value chunks), the newest good version's, the outputs of their unfinished compactions,
    /// and the value chunks the backup log's pointers name.
    pub(crate) fn referenced_slots(&self) -> Vec<u64> {
        let mut slots = Vec::new();
        let mut add = |version: &Version, journals: &BTreeMap<u64, CompactionJournal>| {
            slots.extend(version.chunks.values().flat_map(ChunkMeta::slots));
            slots.extend(version.value_chunks.values().map(|value_chunk| value_chunk.slot));
            slots.extend(journals.values().flat_map(|journal| journal.outputs.iter().flat_map(ChunkMeta::slots)));
        };
        if let Ok(recovery) = &self.recovery {
            add(&recovery.version_log.version, &recovery.version_log.unfinished_compactions);
        }
        if let Some(good) = &self.good {
            add(&good.version, &good.unfinished_compactions);
        }
        slots.extend(self.pending_values.values());
        slots
    }
}

/// Entries to write into new chunks at a level.
#[derive(Debug, Clone)]
pub struct Run {
    /// The level.
    pub level: u8,
    /// Chunk flags (odd).
    pub flags: u8,
    /// Sorted, newest version of a key first, no two with the same key and sequence.
    pub entries: Vec<Entry>,
}

impl Run {
    fn new(level: u8, flags: u8, mut entries: Vec<Entry>) -> Self {
        sort_entries(&mut entries);
        Self { level, flags, entries }
    }

    fn key_range(&self) -> Option<(&[u8], &[u8])> {
        Some((self.entries.first()?.key.as_slice(), self.entries.last()?.key.as_slice()))
    }
}

fn sort_entries(entries: &mut Vec<Entry>) {
    entries.sort_by(Entry::cmp_internal);
    entries.dedup_by(|later, earlier| later.key == earlier.key && later.sequence == earlier.sequence);
}

/// What repair will do to one instance.
pub(crate) struct InstancePlan {
    pub(crate) instance: u32,
    pub(crate) fixes: Vec<Fix>,
    /// Chunks of the new version that stay where they are (and, after placement, the new ones).
    pub(crate) kept: Vec<ChunkMeta>,
    /// New data to write into chunks.
    pub(crate) runs: Vec<Run>,
    /// The new base version without its chunks.
    pub(crate) template: BaseVersion,
    /// Version log ranges the old state reads: the new base version goes elsewhere.
    pub(crate) protected: Vec<(u64, u64)>,
    /// Of them, the ranges the rebuild read its version from (when the version log is broken,
    /// the newest good base version and its chain): where the rest leaves no room, the new
    /// base version may go over the other ones, since a second repair after a crash starts
    /// from the newest good base version again (the new one, once it landed whole).
    pub(crate) needed: Vec<(u64, u64)>,
    pub(crate) next_lsn: u64,
    pub(crate) next_sn: u64,
    /// Free slots whose chunks the plan reads (not to be overwritten before the switch).
    pub(crate) source_slots: BTreeSet<u64>,
    /// Applied (false when `-p` refuses it).
    pub(crate) apply: bool,
    /// Value chunks to copy to another slot (a shrink or a device removal), each with its
    /// slot image: same id, same bytes (SPEC.md §14 step 1).
    pub(crate) value_moves: Vec<(lds_format::value::ValueChunkMeta, Vec<u8>)>,
}

impl InstancePlan {
    /// The new base version.
    pub(crate) fn base(&self) -> BaseVersion {
        let mut base = self.template.clone();
        base.chunks = self.kept.clone();
        base.chunks.sort_by_key(|chunk| chunk.chunk_id);
        base
    }

    /// Records that a value chunk now lives in `slot` (after its copy is placed).
    pub(crate) fn move_value_chunk(&mut self, value_chunk_id: u64, slot: u64) {
        if let Some(values) = self.template.values.as_mut() {
            for value_chunk in values.chunks.iter_mut().filter(|chunk| chunk.value_chunk_id == value_chunk_id) {
                value_chunk.slot = slot;
            }
        }
    }

    /// The slots of the value chunks the new base version keeps.
    pub(crate) fn value_slots(&self) -> impl Iterator<Item = u64> + '_ {
        self.template.values.iter().flat_map(|values| values.chunks.iter().map(|chunk| chunk.slot))
    }
}

/// The largest lsn and SN of any intact header of ours in an area.
fn header_maxima(area: &[u8], context: &AreaContext) -> (u64, u64) {
    let mut maxima = (0, 0);
    for position in (0..area.len().saturating_sub(HEADER_LEN - 1)).step_by(8) {
        if area[position..position + 4] != OBJECT_MAGIC {
            continue;
        }
        let Ok(bytes) = <&[u8; HEADER_LEN]>::try_from(&area[position..position + HEADER_LEN]) else { continue };
        let found = ObjectHeader::parse_tolerant(bytes);
        if found.crc_ok && found.header.volume_uuid == context.volume_uuid {
            maxima = (maxima.0.max(found.header.lsn), maxima.1.max(found.header.sn));
        }
    }
    maxima
}

/// The lsn of the new chain's first object (base version, WOR, WOL follow) and its SN. None
/// of them may stand after the old chain's end before the switch (an object past a version
/// log's next lsn is damage, SPEC.md §9.6), and nothing left in the area may continue the new
/// chain after it. Where no header in the area is past the old chain, the base version reuses
/// the old chain's last lsn, so that only the WOL (the switch itself) is past the old chain's
/// next one.
fn switch_numbers(source: &Source, version_context: &AreaContext) -> (u64, u64) {
    let (version_lsn_max, version_sn_max) = header_maxima(&source.version_area, version_context);
    let old_next = source.recovery.as_ref().ok().map(|recovery| recovery.version_log.head.next_lsn);
    let next_lsn = match old_next {
        Some(next) if next > 0 && version_lsn_max < next => next - 1,
        _ => version_lsn_max + 1,
    };
    (next_lsn, version_sn_max + 1)
}

/// The version log ranges the old chain reads (its objects), and where its next append would
/// go: a new chain must stay clear of both before its switch (anything new at the next append
/// would read as the old chain's continuation, or as its damaged head). The chain is walked
/// again over `area` (recovery keeps no object), and ranges that touch are joined: a chain's
/// objects follow each other but for the gap before a WOR, so a few ranges describe the
/// hundreds of thousands of objects a version log may hold.
fn old_chain_ranges(recovery: &InstanceRecovery, area: &[u8], context: &AreaContext) -> Vec<(u64, u64)> {
    let state = &recovery.version_log;
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for object in state.sequence(area, context) {
        let (offset, len) = (object.offset, object.header.total_len());
        match ranges.last_mut() {
            Some((start, length)) if *start + *length == offset => *length += len,
            _ => ranges.push((offset, len)),
        }
    }
    ranges.push((state.head.offset, HEADER_LEN as u64));
    ranges
}

/// Why an instance cannot be rebased as it is.
pub(crate) enum NotRebasable {
    /// Recovery finds damage or cannot run (the message says what).
    Damaged(String),
    /// A journaled compaction is unfinished.
    Unfinished(u64),
    /// The device failed.
    Device(DeviceError),
}

/// A new base version of the instance's recovered tree, replicating `geometry` with
/// `label_generation`, with chunks that use a slot not `usable` rewritten (to be placed in
/// usable ones) while `budget` (bytes of chunk data, at least one chunk) lasts, and the backup
/// log left as it is (its start point carried over): the rebase `lds resize` and `lds device`
/// switch each instance to (SPEC.md §14, §4.3). Chunks past the budget stay where they are,
/// for the next switch: the entries a switch rewrites are held in memory.
pub(crate) fn rebase_plan(
    device: &dyn BlockDevice,
    source: &Source,
    usable: &dyn Fn(u64) -> bool,
    geometry: &Geometry,
    label_generation: u64,
    budget: &mut u64,
) -> Result<InstancePlan, NotRebasable> {
    let recovery = match &source.recovery {
        Ok(recovery) => recovery,
        Err(error) => return Err(NotRebasable::Damaged(error.to_string())),
    };
    if let Some(damage) = recovery.damage() {
        return Err(NotRebasable::Damaged(format!("{damage:?}")));
    }
    if let Some(&id) = recovery.version_log.unfinished_compactions.keys().next() {
        return Err(NotRebasable::Unfinished(id));
    }
    let version = &recovery.version_log.version;
    let instance = source.instance;
    let mut kept = Vec::new();
    let mut runs = Vec::new();
    for chunk in version.chunks.values() {
        if chunk.slots().all(usable) || *budget == 0 {
            kept.push(chunk.clone());
            continue;
        }
        *budget = budget.saturating_sub(chunk.len_data.max(1));
        let read = read_entries(device, geometry, instance, chunk).map_err(NotRebasable::Device)?;
        if !read.dropped.is_empty() {
            let what: Vec<&str> = read.dropped.iter().map(|dropped| dropped.what.as_str()).collect();
            return Err(NotRebasable::Damaged(format!("chunk {}: {}", chunk.chunk_id, what.join("; "))));
        }
        runs.push(Run::new(chunk.level, chunk.flags, read.entries));
    }
    // Value chunks move byte for byte, keeping their ids (pointers name value chunks by id).
    // One only the backup log names cannot: its pointers give its slot.
    let mut value_moves = Vec::new();
    for value_chunk in version.value_chunks.values() {
        if usable(value_chunk.slot) || *budget == 0 {
            continue;
        }
        *budget = budget.saturating_sub(geometry.slot_size);
        let image = device
            .read_vec(geometry.slot_offset(value_chunk.slot), geometry.slot_size)
            .map_err(NotRebasable::Device)?;
        value_moves.push((*value_chunk, image));
    }
    if let Some((id, slot)) = source.pending_value_slots().iter().find(|(_, slot)| !usable(**slot)) {
        return Err(NotRebasable::Damaged(format!(
            "value chunk {id} in slot {slot} is named only by the backup log (written before its batch): open the volume once (lds recover) so that a flush adds it to the version, then run this again"
        )));
    }
    let version_context = area_context(geometry, LogKind::Version, instance);
    let (next_lsn, next_sn) = switch_numbers(source, &version_context);
    let protected = old_chain_ranges(recovery, &source.version_area, &version_context);
    let template = BaseVersion { label_generation, chunks: Vec::new(), ..version.to_base(*geometry, instance) };
    Ok(InstancePlan {
        instance,
        fixes: Vec::new(),
        kept,
        runs,
        template,
        needed: protected.clone(),
        protected,
        next_lsn,
        next_sn,
        source_slots: BTreeSet::new(),
        apply: true,
        value_moves,
    })
}

/// What the entries of a chunk give, block by block.
struct ChunkRead {
    entries: Vec<Entry>,
    dropped: Vec<Dropped>,
}

/// Reads every entry still readable in a chunk (see `lds_format::salvage`): all of a sub-chunk
/// whose footer names it, the entries inside its key and sequence ranges where the footer is
/// lost, none where the slot holds another chunk.
fn read_entries(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    instance: u32,
    meta: &ChunkMeta,
) -> Result<ChunkRead, DeviceError> {
    let mut read = ChunkRead { entries: Vec::new(), dropped: Vec::new() };
    let sub_chunks = meta.sub_chunks.len();
    // Where a sub-chunk is lost whole, which of the chunk's keys it held is not known: the
    // chunk's ranges cover it.
    let whole = || vec![Lost::chunk(instance, meta)];
    // Whether every sub-chunk was read through its own footer and block index, so that the
    // damaged stretches name exactly the blocks lost.
    let mut indexed = true;
    for (index, sub_chunk) in meta.sub_chunks.iter().enumerate() {
        let slot = sub_chunk.slot;
        if slot >= geometry.num_slots {
            read.dropped.push(Dropped::new(format!("sub-chunk {index}: slot {slot} is beyond the slot area"), whole()));
            continue;
        }
        let offset = geometry.slot_offset(slot);
        // Unreadable sectors read as zeros: the blocks there fail their checksums and are
        // dropped like damaged ones.
        let (image, unreadable) = read_tolerant(device, offset, geometry.slot_size, geometry.sector())?;
        if let (Some(first), Some(last)) = (unreadable.first(), unreadable.last()) {
            // The blocks there fail their checksums: the damaged stretches below say which
            // keys they held.
            read.dropped.push(Dropped::new(
                format!(
                    "slot {slot}: {} unreadable sectors from offset {first} to {last} (read error)",
                    unreadable.len()
                ),
                Vec::new(),
            ));
        }
        let salvaged = salvage_sub_chunk(&image, offset);
        indexed &= salvaged.tail_error.is_none()
            && salvaged.footer.as_ref().is_some_and(|footer| footer.digest == sub_chunk.digest);
        match salvaged.footer {
            // The footer was written for this sub-chunk when its identity fields say so, or
            // when it carries the digest the version records (a damaged field, then); a
            // footer of another instance never is (two instances claiming one slot: the
            // footer tells whose it is).
            Some(footer)
                if (footer.digest == sub_chunk.digest && footer.instance == instance)
                    || (footer.chunk_id == meta.chunk_id
                        && footer.instance == instance
                        && usize::from(footer.sub_chunk_index) == index
                        && usize::from(footer.num_sub_chunks) == sub_chunks
                        && footer.volume_uuid == geometry.volume_uuid) =>
            {
                read.entries.extend(salvaged.entries);
            }
            Some(footer) => {
                read.dropped.push(Dropped::new(
                    format!(
                        "slot {slot} holds chunk {} of instance {} (sub-chunk {}): none of this chunk's entries are there",
                        footer.chunk_id, footer.instance, footer.sub_chunk_index
                    ),
                    whole(),
                ));
                continue;
            }
            None => {
                // Without a footer, entries of this chunk are told by its ranges.
                read.entries.extend(salvaged.entries.into_iter().filter(|entry| {
                    entry.key.as_slice() >= meta.smallest_key.as_slice()
                        && entry.key.as_slice() <= meta.largest_key.as_slice()
                        && (meta.smallest_seq..=meta.largest_seq).contains(&entry.sequence)
                }));
            }
        }
        for span in &salvaged.damaged {
            // The stretch's keys, within the chunk's key range.
            let from = match &span.after_key {
                Some(after) if after.as_slice() >= meta.smallest_key.as_slice() => KeyFrom::After(after.clone()),
                _ => KeyFrom::Key(meta.smallest_key.clone()),
            };
            let through = match &span.through_key {
                Some(through) if through.as_slice() <= meta.largest_key.as_slice() => through.clone(),
                _ => meta.largest_key.clone(),
            };
            let lost = Lost { from, through: Some(through), ..Lost::chunk(instance, meta) };
            read.dropped.push(Dropped::new(
                format!(
                    "{} (bytes {}..{} of slot {slot}: {})",
                    span.key_range(),
                    span.offset,
                    span.offset + span.len,
                    span.reason
                ),
                vec![lost],
            ));
        }
    }
    sort_entries(&mut read.entries);
    if (read.entries.len() as u64) < meta.num_entries {
        // Read through the block index, the damaged stretches name the lost blocks' keys;
        // otherwise (a stale or lost tail) the chunk's ranges cover what is missing.
        read.dropped.push(Dropped::new(
            format!("{} of the chunk's {} entries", meta.num_entries - read.entries.len() as u64, meta.num_entries),
            if indexed { Vec::new() } else { whole() },
        ));
    }
    Ok(read)
}

/// The images of the slots of `meta` (those inside the slot area), unreadable sectors as zeros.
pub(crate) fn chunk_images(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    meta: &ChunkMeta,
) -> Result<Vec<Vec<u8>>, DeviceError> {
    meta.slots()
        .filter(|&slot| slot < geometry.num_slots)
        .map(|slot| {
            read_tolerant(device, geometry.slot_offset(slot), geometry.slot_size, geometry.sector())
                .map(|(image, _)| image)
        })
        .collect()
}

/// The chain of batches in a backup log area that continues the sequence numbers after
/// `known`: from the valid batch holding `known + 1` (the newest such, by lsn), or else the
/// first valid batch past it.
fn continuing_batches(area: &[u8], context: &AreaContext, known: u64, last_sequence: u64) -> Vec<ReplayBatch> {
    let batches = valid_objects(area, context).into_iter().filter_map(|object| match object.payload {
        Payload::Batch { first_sequence, num_entries, .. } => {
            Some((object.offset, object.header.lsn, first_sequence, first_sequence + u64::from(num_entries)))
        }
        _ => None,
    });
    let mut holding: Option<(u64, u64)> = None;
    let mut after: Option<(u64, u64, u64)> = None;
    for (offset, lsn, first, end) in batches {
        if first <= known + 1 && known + 1 < end && holding.is_none_or(|(_, held)| lsn > held) {
            holding = Some((offset, lsn));
        }
        if first > known && after.is_none_or(|(_, _, earliest)| first < earliest) {
            after = Some((offset, lsn, first));
        }
    }
    let Some((offset, lsn)) = holding.or(after.map(|(offset, lsn, _)| (offset, lsn))) else { return Vec::new() };
    recover_backup_log_prefix(area, context, offset, lsn, last_sequence, 0).batches
}

/// What free slots hold above a version's last sequence.
struct NewerInFreeSlots {
    /// The entries (data the lost versions had committed).
    entries: Vec<Entry>,
    /// The slots of the chunks that hold the newest version of some key among them: kept
    /// until the repair's switch.
    sources: BTreeSet<u64>,
    /// The slots of the others, whose every entry those supersede: free for the repair's
    /// writes.
    superseded: BTreeSet<u64>,
    /// The damaged stretches of those chunks, each with the keys it held.
    dropped: Vec<Dropped>,
}

/// The entries of chunks in free slots that are newer than `last_sequence`, and which of
/// their slots the repair keeps. Each sub-chunk is read as `lds salvage` reads it: the blocks
/// whose checksum holds, through its block index or by a scan where the index or the whole
/// tail is lost (then, on a volume of one instance, the blocks can only be this instance's),
/// so that a damaged block loses only its own entries.
fn newer_in_free_slots(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    instance: u32,
    last_sequence: u64,
    old_slots: &BTreeSet<u64>,
) -> Result<NewerInFreeSlots, DeviceError> {
    let mut entries = Vec::new();
    let (mut sources, mut superseded) = (BTreeSet::new(), BTreeSet::new());
    let mut dropped = Vec::new();
    let mut from: Vec<(u64, std::ops::Range<usize>)> = Vec::new();
    let single_instance = geometry.instance_count == 1;
    for slot in (0..geometry.num_slots).filter(|slot| !old_slots.contains(slot)) {
        let offset = geometry.slot_offset(slot);
        let footer_offset = offset + geometry.slot_size - FOOTER_LEN as u64;
        let (footer_bytes, _) = read_tolerant(device, footer_offset, FOOTER_LEN as u64, geometry.sector())?;
        let largest_seq = match Footer::decode(&footer_bytes, footer_offset, geometry.slot_size) {
            Ok(footer) if footer.volume_uuid == geometry.volume_uuid && footer.instance == instance => {
                if footer.largest_seq <= last_sequence {
                    continue;
                }
                footer.largest_seq
            }
            Ok(_) => continue,
            Err(_) if single_instance => {
                // A lost tail, or no chunk: a slot that never held one is zeros at both ends.
                let probe = geometry.sector().min(geometry.slot_size);
                let (head, _) = read_tolerant(device, offset, probe, geometry.sector())?;
                if head.iter().all(|&byte| byte == 0) && footer_bytes.iter().all(|&byte| byte == 0) {
                    continue;
                }
                u64::MAX
            }
            Err(_) => continue,
        };
        let (image, _) = read_tolerant(device, offset, geometry.slot_size, geometry.sector())?;
        if lds_format::algorithms::salvage::salvage_value_chunk(&image, offset).is_some() {
            continue;
        }
        let salvaged = salvage_sub_chunk(&image, offset);
        let before = entries.len();
        entries.extend(salvaged.entries.into_iter().filter(|entry| entry.sequence > last_sequence));
        if entries.len() == before {
            continue;
        }
        from.push((slot, before..entries.len()));
        for span in &salvaged.damaged {
            let lost = Lost {
                instance,
                from: span.after_key.clone().map_or(KeyFrom::First, KeyFrom::After),
                through: span.through_key.clone(),
                smallest_seq: last_sequence + 1,
                largest_seq: largest_seq.max(last_sequence + 1),
            };
            let what = format!(
                "{} of the chunk in free slot {slot} (bytes {}..{}: {})",
                span.key_range(),
                span.offset,
                span.offset + span.len,
                span.reason
            );
            dropped.push(Dropped::new(what, vec![lost]));
        }
    }
    // A chunk whose every entry another one holds at the same or a newer sequence (the
    // input of a later merge whose output is here too) adds nothing: its slot stays free for
    // the repair's own writes. The others are kept until the repair's switch.
    let mut newest: std::collections::HashMap<&[u8], u64> = std::collections::HashMap::new();
    for entry in &entries {
        let sequence = newest.entry(entry.key.as_slice()).or_insert(0);
        *sequence = (*sequence).max(entry.sequence);
    }
    for (slot, range) in from {
        if entries[range].iter().any(|entry| newest.get(entry.key.as_slice()) == Some(&entry.sequence)) {
            sources.insert(slot);
        } else {
            superseded.insert(slot);
        }
    }
    Ok(NewerInFreeSlots { entries, sources, superseded, dropped })
}

/// The entries of the backup log's batches above `last_sequence`.
fn batch_entries(area: &[u8], context: &AreaContext, batches: &[ReplayBatch], last_sequence: u64) -> Vec<Entry> {
    let mut entries = Vec::new();
    for batch in batches {
        let Ok(raw) = read_object(area, batch.offset, context) else { continue };
        let mut sequence = batch.first_sequence;
        let _ = decode_entries(raw.payload, context.ofs_area + batch.offset, |kind, key, value| {
            if sequence > last_sequence {
                entries.push(Entry { key: key.to_vec(), sequence, kind, value: value.to_vec() });
            }
            sequence += 1;
        });
    }
    entries
}

fn sequence_range(entries: &[Entry]) -> String {
    let low = entries.iter().map(|entry| entry.sequence).min().unwrap_or(0);
    let high = entries.iter().map(|entry| entry.sequence).max().unwrap_or(0);
    format!("sequences {low} to {high}")
}

/// The problem of a recovered instance whose backup log replay cannot start at the version's
/// start point (its object is not valid, or has a newer lsn) or breaks off, and the last
/// sequence number the replay reaches: the version may be older than the log.
fn backup_behind(recovery: &Result<InstanceRecovery, VersionLogError>) -> Option<(Code, u64)> {
    let recovery = recovery.as_ref().ok()?;
    let last_sequence = recovery.version_log.version.last_sequence;
    match &recovery.backup {
        BackupRecovery::StartMismatch { .. } => Some((Code::BackupStartMismatch, last_sequence)),
        BackupRecovery::Recovered { state, end: ChainEndVerdict::Broken { .. }, .. } => {
            Some((Code::BackupLogChainBroken, reach(&state.batches).saturating_sub(1).max(last_sequence)))
        }
        _ => None,
    }
}

fn version_code(recovery: &Result<InstanceRecovery, VersionLogError>) -> Code {
    match recovery {
        Ok(_) => Code::VersionLogChainBroken,
        Err(VersionLogError::NoStart { .. }) => Code::VersionLogNoStart,
        Err(VersionLogError::BadStart { .. }) => Code::VersionLogBadStart,
        Err(VersionLogError::BadWrapLeft { .. }) => Code::VersionLogBadWrapLeft,
        Err(VersionLogError::SnMismatch { .. }) => Code::VersionLogSnMismatch,
        Err(VersionLogError::Replay { error, .. }) => match error {
            lds_format::version::ReplayError::SlotInUse { .. } => Code::SlotReferencedTwice,
            lds_format::version::ReplayError::SlotOutOfRange { .. } => Code::SlotOutOfRange,
            lds_format::version::ReplayError::LevelOutOfRange { .. } => Code::LevelOutOfRange,
            _ => Code::VersionLogReplay,
        },
        Err(_) => Code::VersionLogReplay,
    }
}

/// Why a journaled compaction cannot be finished from its journal, if it cannot.
fn journal_fault(
    journal: &CompactionJournal,
    tree: &BTreeMap<u64, ChunkMeta>,
    geometry: &Geometry,
) -> Option<(Code, String)> {
    if let Some(missing) = journal.inputs.iter().find(|id| !tree.contains_key(id)) {
        return Some((Code::JournalInputsMissing, format!("input chunk {missing} is not in the version")));
    }
    let inputs: BTreeSet<u64> = journal.inputs.iter().copied().collect();
    for id in &journal.cleaned {
        let holds_more = tree.get(id).is_some_and(|chunk| chunk.largest_key.as_slice() > journal.resume_key.as_slice());
        if !inputs.contains(id) || holds_more {
            return Some((Code::JournalCleanedTooSoon, format!("chunk {id} is listed as cleaned too soon")));
        }
    }
    let mut outputs: Vec<&ChunkMeta> = journal.outputs.iter().collect();
    outputs.sort_by(|a, b| a.smallest_key.cmp(&b.smallest_key));
    if outputs.windows(2).any(|pair| pair[0].largest_key >= pair[1].smallest_key)
        || outputs.iter().any(|output| output.largest_key.as_slice() > journal.resume_key.as_slice())
    {
        return Some((Code::JournalOutputsDisorder, "its outputs overlap or pass the resume key".into()));
    }
    let cleaned: BTreeSet<u64> = journal.cleaned.iter().copied().collect();
    let owners: BTreeMap<u64, u64> =
        tree.values().flat_map(|chunk| chunk.slots().map(move |slot| (slot, chunk.chunk_id))).collect();
    for output in &journal.outputs {
        for slot in output.slots() {
            if slot >= geometry.num_slots {
                return Some((Code::SlotOutOfRange, format!("output slot {slot} is beyond the slot area")));
            }
            if owners.get(&slot).is_some_and(|owner| !cleaned.contains(owner)) {
                return Some((Code::JournalOutputsConflict, format!("output slot {slot} is used by the version")));
            }
        }
    }
    None
}

fn class_of(codes: &[Code], dropped: &[Dropped]) -> FixClass {
    if dropped.is_empty() && codes.iter().all(|code| matches!(code.kind().repair, Repair::Preen(_) | Repair::Nothing)) {
        FixClass::Preen
    } else {
        FixClass::Fix
    }
}

/// The tree being rebuilt, and what was done to it.
struct Rebuild<'a> {
    device: &'a dyn BlockDevice,
    geometry: &'a Geometry,
    instance: u32,
    /// `version log of instance N`, and the area's device offset.
    log: (String, u64),
    /// The chunks that stay.
    tree: BTreeMap<u64, ChunkMeta>,
    /// New data to write.
    runs: Vec<Run>,
    fixes: Vec<Fix>,
    /// Follows log references in the instance's backup log area (SPEC.md §8.9).
    resolver: Resolver<'a>,
    /// The new base version's backup start: the log chunks that stay name objects before it.
    /// `None` when the backup log's head is not known, and no log chunk stays.
    retain_until: Option<LogPosition>,
}

/// Where the rebuild starts: the version, its unfinished compactions, the geometry its base
/// version replicates, and the old state's version log ranges.
struct Start {
    version: Version,
    journals: BTreeMap<u64, CompactionJournal>,
    replica: Option<Geometry>,
    protected: Vec<(u64, u64)>,
    needed: Vec<(u64, u64)>,
    /// The version log lost versions: the recovered version is not the newest.
    lost: bool,
    /// The slots of the chunks the version names with metadata that contradicts it, found
    /// intact elsewhere and kept there (`locate_left_out`).
    relocated: BTreeSet<u64>,
}

impl Rebuild<'_> {
    fn fix(&mut self, codes: Vec<Code>, action: String) -> &mut Fix {
        self.fixes.push(Fix::new(codes, self.log.0.clone(), self.log.1, action));
        let last = self.fixes.len() - 1;
        &mut self.fixes[last]
    }

    fn read_entries(&self, meta: &ChunkMeta) -> Result<ChunkRead, DeviceError> {
        read_entries(self.device, self.geometry, self.instance, meta)
    }

    /// The version to rebuild from: the recovered one, or the newest good one (with the chunks
    /// it names with contradicting metadata where they lie intact in slots outside `taken`).
    fn start(&mut self, label: &Label, source: &Source, taken: &BTreeSet<u64>) -> Result<Start, RepairError> {
        let version_context = area_context(self.geometry, LogKind::Version, self.instance);
        let mut protected = source
            .recovery
            .as_ref()
            .map(|recovery| old_chain_ranges(recovery, &source.version_area, &version_context))
            .unwrap_or_default();
        let lost = version_log_broken(&source.recovery);
        if let (Ok(recovery), false) = (&source.recovery, lost) {
            let state = &recovery.version_log;
            return Ok(Start {
                version: state.version.clone(),
                journals: state.unfinished_compactions.clone(),
                replica: Some(state.base.geometry),
                needed: protected.clone(),
                protected,
                lost,
                relocated: BTreeSet::new(),
            });
        }
        let code = version_code(&source.recovery);
        let mut dropped = Vec::new();
        if let Ok(InstanceRecovery { version_end: ChainEndVerdict::Broken { later, .. }, .. }) = &source.recovery {
            // The data of the versions past the damage is read back from the free slots
            // (`newer_in_free_slots`), each loss there reported with its chunk.
            dropped.push(Dropped::new(
                format!("version log objects lsn {} to {} past the damage", later.first_lsn, later.last_lsn),
                Vec::new(),
            ));
        }
        let Some(good) = &source.good else {
            let fix =
                self.fix(vec![code], "no base version is left: rebuilt the tree from the chunks in the slots".into());
            fix.dropped = vec![Dropped::new(
                "every version the log held (the data in free slots is kept at level 0)",
                Vec::new(),
            )];
            fix.class = FixClass::Fix;
            let base = lds_format::algorithms::image::empty_base_version_of(label, self.instance);
            let version = Version::from_base(&base).map_err(|error| RepairError::Inconsistent {
                device: self.device.name().display().to_string(),
                instance: self.instance,
                reason: error.to_string(),
            })?;
            return Ok(Start {
                version,
                journals: BTreeMap::new(),
                replica: None,
                protected,
                needed: Vec::new(),
                lost,
                relocated: BTreeSet::new(),
            });
        };
        protected.extend(good.objects.iter().copied());
        let needed = good.objects.clone();
        dropped.extend(
            good.stopped.iter().map(|why| Dropped::new(format!("the versions after that point: {why}"), Vec::new())),
        );
        let instance = self.instance;
        // A chunk left out for its metadata (a slot beyond the slot area or of another chunk,
        // an id another chunk has) may lie intact in a free slot: it stays, there.
        let mut version = good.version.clone();
        let left_out: Vec<&ChunkMeta> = good.left_out.iter().filter_map(|left_out| left_out.chunk.as_ref()).collect();
        let found = locate_left_out(self.device, self.geometry, instance, &left_out, taken)?;
        let mut relocated = BTreeSet::new();
        let mut kept = Vec::new();
        for (meta, found) in left_out.iter().zip(found) {
            let Some(found) = found else { continue };
            let delta = DeltaVersion {
                added: vec![found.clone()],
                last_sequence: version.last_sequence,
                ofs_backup_start: version.ofs_backup_start,
                lsn_backup_start: version.lsn_backup_start,
                ..DeltaVersion::default()
            };
            if version.apply(&delta).is_ok() {
                relocated.extend(found.slots());
                kept.push((meta.chunk_id, meta.slots().collect::<Vec<_>>(), found));
            }
        }
        // The chunks kept where they were found are not dropped (their own fixes say so).
        let stays = |chunk: &ChunkMeta| {
            kept.iter().any(|(id, slots, _)| *id == chunk.chunk_id && chunk.slots().eq(slots.iter().copied()))
        };
        dropped.extend(good.left_out.iter().filter(|left_out| !left_out.chunk.as_ref().is_some_and(stays)).map(
            |left_out| {
                let lost = left_out.chunk.iter().map(|chunk| Lost::chunk(instance, chunk)).collect();
                Dropped::new(format!("left out {}", left_out.what), lost)
            },
        ));
        let fix = Fix::new(
            vec![code],
            self.log.0.clone(),
            self.log.1 + good.base_offset,
            format!(
                "rebuilt the version from the base version at offset {} (lsn {}) and the {} objects chained after it, with a new base version",
                good.base_offset,
                good.base_lsn,
                good.objects.len() - 1
            ),
        );
        self.fixes.push(fix.dropping(dropped).class(FixClass::Fix));
        for (id, slots, found) in kept {
            let listed: Vec<String> = slots.iter().map(u64::to_string).collect();
            let found_in: Vec<String> = found.slots().map(|slot| slot.to_string()).collect();
            let action = format!(
                "kept the chunk the version names as chunk {id} in slots {} (which contradicts the version) as chunk {} in slots {}, where it lies intact: its footers name this volume, instance and level, and carry the digests the version records",
                listed.join(", "),
                found.chunk_id,
                found_in.join(", ")
            );
            let structure = format!("chunk {} of instance {instance}", found.chunk_id);
            let offset = self.geometry.slot_offset(found.chunk_id);
            self.fixes.push(Fix::new(vec![code], structure, offset, action));
        }
        Ok(Start {
            version,
            journals: good.unfinished_compactions.clone(),
            replica: Some(good.base.geometry),
            protected,
            needed,
            lost,
            relocated,
        })
    }

    /// The newest unfinished compaction its journal describes consistently is finished (or
    /// rolled back when it cleaned nothing yet); the others are rolled back.
    fn journals(&mut self, journals: &BTreeMap<u64, CompactionJournal>) -> Result<(), RepairError> {
        let mut finished: Option<&CompactionJournal> = None;
        for journal in journals.values().rev() {
            let levels = |journal: &CompactionJournal| journal.source_level..=journal.target_level;
            let shares_levels = finished.is_some_and(|kept| {
                levels(journal).contains(&kept.source_level) || levels(kept).contains(&journal.source_level)
            });
            let fault = if shares_levels {
                Some((Code::JournalLevelsShared, "a newer unfinished compaction shares its levels".to_string()))
            } else {
                journal_fault(journal, &self.tree, self.geometry)
            };
            match fault {
                Some((code, why)) => {
                    let dropped = if journal.cleaned.is_empty() {
                        Vec::new()
                    } else {
                        // The inputs stay: where their slots were reused, the check finds
                        // them damaged and each one's fix names what it drops.
                        vec![Dropped::new(
                            format!(
                                "the keys up to the resume key of the inputs it cleaned (chunks {:?}) where their slots were reused (reported with those chunks)",
                                journal.cleaned
                            ),
                            Vec::new(),
                        )]
                    };
                    let action = format!(
                        "rolled back compaction {} ({why}): its outputs are free slots, its inputs stay",
                        journal.compaction_id
                    );
                    let fix = self.fix(vec![code], action);
                    fix.dropped = dropped;
                    fix.class = FixClass::Fix;
                }
                None if finished.is_none() => finished = Some(journal),
                None => {}
            }
        }
        match finished {
            Some(journal) if journal.cleaned.is_empty() => {
                let action = format!(
                    "rolled back the unfinished compaction {} (it had cleaned no input): its {} outputs are free slots, its inputs stay",
                    journal.compaction_id,
                    journal.outputs.len()
                );
                self.fix(vec![Code::JournalUnfinished], action);
            }
            Some(journal) => self.finish_compaction(journal)?,
            None => {}
        }
        Ok(())
    }

    /// Finishes a compaction from its journal: its outputs replace its inputs, and the keys
    /// above the resume key of the inputs it had not cleaned are rewritten at their levels.
    fn finish_compaction(&mut self, journal: &CompactionJournal) -> Result<(), RepairError> {
        let mut rewritten = Vec::new();
        let mut dropped = Vec::new();
        for id in &journal.inputs {
            let Some(input) = self.tree.remove(id) else { continue };
            if journal.cleaned.contains(id) {
                continue;
            }
            let read = self.read_entries(&input)?;
            dropped.extend(read.dropped.into_iter().map(|what| what.prefixed(&format!("chunk {id}: "))));
            let above: Vec<Entry> =
                read.entries.into_iter().filter(|entry| entry.key.as_slice() > journal.resume_key.as_slice()).collect();
            if !above.is_empty() {
                rewritten.push(id.to_string());
                self.runs.push(Run::new(input.level, 0, above));
            }
        }
        for output in &journal.outputs {
            self.tree.insert(output.chunk_id, output.clone());
        }
        let action = format!(
            "finished the unfinished compaction {} from its journal: its {} outputs replace its {} inputs; the keys above the resume key {} of the inputs it had not cleaned ({}) were rewritten",
            journal.compaction_id,
            journal.outputs.len(),
            journal.inputs.len(),
            display_key(&journal.resume_key),
            if rewritten.is_empty() { "none".to_string() } else { format!("chunks {}", rewritten.join(", ")) }
        );
        let fix = self.fix(vec![Code::JournalUnfinished], action);
        if !dropped.is_empty() {
            fix.dropped = dropped;
            fix.class = FixClass::Fix;
        }
        Ok(())
    }

    /// Every chunk, as the checker checks it: a chunk with a problem is rewritten from its
    /// readable blocks (a problem of its sequence numbers alone is the version's to fix).
    fn damaged_chunks(&mut self) -> Result<(), RepairError> {
        let (geometry, instance) = (self.geometry, self.instance);
        let ids: Vec<u64> = self.tree.keys().copied().collect();
        for id in ids {
            let Some(meta) = self.tree.get(&id).cloned() else { continue };
            let images = chunk_images(self.device, geometry, &meta)?;
            let problems = chunk_problems(
                &images,
                geometry,
                instance,
                &meta,
                u64::MAX,
                CheckOptions { deep: true, ..Default::default() },
            );
            let mut codes: Vec<Code> = problems.iter().map(|problem| problem.code).collect();
            codes.sort();
            codes.dedup();
            // Log references (SPEC.md §8.9): a chunk whose references do not all resolve, or
            // that the rebuilt version cannot retain, is rewritten with them read into puts.
            let log = logchunks::check_chunk(&mut self.resolver, &images, geometry, &meta, self.retain_until);
            if codes.is_empty() && log.keeps() {
                continue;
            }
            self.tree.remove(&id);
            let mut read = self.read_entries(&meta)?;
            let (resolved, unresolved) = self.resolver.resolve_entries(&mut read.entries);
            let count = read.entries.len();
            let mut action = if count == 0 {
                format!("dropped chunk {id}: none of its entries is readable")
            } else {
                format!("rewrote the {count} readable entries of chunk {id} into new chunks at level {}", meta.level)
            };
            if resolved > 0 || !unresolved.is_empty() || !log.keeps() {
                action.push_str(&format!(
                    "; its {resolved} log references that resolve became puts of the values they name (SPEC.md §8.9)"
                ));
                if !log.keeps() {
                    action.push_str(&format!(": {}", log.summary()));
                }
            }
            read.dropped.extend(unresolved);
            // Reading references into puts loses nothing: only the entries dropped decide.
            let class = if codes.is_empty() {
                if read.dropped.is_empty() {
                    FixClass::Preen
                } else {
                    FixClass::Fix
                }
            } else {
                class_of(&codes, &read.dropped)
            };
            codes.extend(logchunks::codes_of(&log.faults));
            codes.sort();
            codes.dedup();
            let offset = meta
                .sub_chunks
                .first()
                .map_or(0, |sub_chunk| geometry.slot_offset(sub_chunk.slot.min(geometry.num_slots)));
            let structure = format!("chunk {id} of instance {instance}");
            self.fixes.push(Fix::new(codes, structure, offset, action).dropping(read.dropped).class(class));
            if count > 0 {
                self.runs.push(Run::new(meta.level, meta.flags, read.entries));
            }
        }
        Ok(())
    }

    /// Reads the log references left in the runs (entries of a journaled compaction's inputs,
    /// of chunks in free slots, of chunks pointing into a damaged value chunk) into puts, so
    /// that repair writes ordinary chunks only (SPEC.md §8.9); the entries whose reference
    /// does not resolve are dropped, each reported.
    fn resolve_runs(&mut self) {
        let (mut resolved, mut dropped) = (0, Vec::new());
        for run in &mut self.runs {
            let (count, lost) = self.resolver.resolve_entries(&mut run.entries);
            resolved += count;
            dropped.extend(lost);
        }
        self.runs.retain(|run| !run.entries.is_empty());
        if resolved == 0 && dropped.is_empty() {
            return;
        }
        let action = format!(
            "read {resolved} log references of the entries rewritten into puts of the values they name{}",
            if dropped.is_empty() {
                String::new()
            } else {
                format!("; {} of them do not resolve (fsck 801)", dropped.len())
            }
        );
        let structure = format!("backup log of instance {}", self.instance);
        let offset = self.resolver.context().ofs_area;
        let fix = Fix::new(Vec::new(), structure, offset, action).dropping(dropped);
        self.fixes.push(fix);
    }

    /// The level rules over the kept chunks and the new runs: overlapping chunks of a level are
    /// merged into disjoint ones, and one odd chunk per level keeps its flag.
    fn level_rules(&mut self, num_levels: u32) -> Result<(), RepairError> {
        for level in 1..num_levels.min(u32::from(u8::MAX)) as u8 {
            self.merge_overlaps(level)?;
            self.one_odd_chunk(level);
        }
        self.runs.retain(|run| !run.entries.is_empty());
        Ok(())
    }

    fn merge_overlaps(&mut self, level: u8) -> Result<(), RepairError> {
        /// A chunk that stays (its id) or a run (its index).
        type Node = Result<u64, usize>;
        let mut nodes: Vec<(Vec<u8>, Vec<u8>, Node)> = self
            .tree
            .values()
            .filter(|chunk| chunk.level == level)
            .map(|chunk| (chunk.smallest_key.clone(), chunk.largest_key.clone(), Ok(chunk.chunk_id)))
            .collect();
        nodes.extend(self.runs.iter().enumerate().filter(|(_, run)| run.level == level).filter_map(|(index, run)| {
            let (first, last) = run.key_range()?;
            Some((first.to_vec(), last.to_vec(), Err(index)))
        }));
        nodes.sort();
        let mut components: Vec<Vec<Node>> = Vec::new();
        let mut reach: Option<Vec<u8>> = None;
        for (smallest, largest, node) in nodes {
            match (&mut reach, components.last_mut()) {
                (Some(end), Some(component)) if smallest <= *end => {
                    component.push(node);
                    if largest > *end {
                        *end = largest;
                    }
                }
                _ => {
                    components.push(vec![node]);
                    reach = Some(largest);
                }
            }
        }
        let mut consumed = Vec::new();
        for component in components.into_iter().filter(|component| component.len() > 1) {
            let mut entries = Vec::new();
            let mut names: Vec<String> = Vec::new();
            let mut rewritten = false;
            let mut dropped = Vec::new();
            for node in component {
                match node {
                    Ok(id) => {
                        let Some(meta) = self.tree.remove(&id) else { continue };
                        let read = self.read_entries(&meta)?;
                        dropped.extend(read.dropped.into_iter().map(|what| what.prefixed(&format!("chunk {id}: "))));
                        entries.extend(read.entries);
                        names.push(id.to_string());
                    }
                    Err(index) => {
                        entries.append(&mut self.runs[index].entries);
                        consumed.push(index);
                        rewritten = true;
                    }
                }
            }
            let action = format!(
                "merged the overlapping chunks {}{} into new disjoint chunks",
                names.join(", "),
                if rewritten { " and rewritten entries" } else { "" }
            );
            let structure = format!("level {level} of instance {}", self.instance);
            self.fixes
                .push(Fix::new(vec![Code::LevelOverlap], structure, 0, action).dropping(dropped).class(FixClass::Fix));
            self.runs.push(Run::new(level, 0, entries));
        }
        for index in consumed {
            self.runs[index].entries.clear();
        }
        Ok(())
    }

    fn one_odd_chunk(&mut self, level: u8) {
        let mut odd_seen = false;
        let mut cleared = Vec::new();
        for chunk in self.tree.values_mut().filter(|chunk| chunk.level == level && chunk.is_odd()) {
            if odd_seen {
                chunk.flags &= !CHUNK_FLAG_ODD;
                cleared.push(chunk.chunk_id.to_string());
            }
            odd_seen = true;
        }
        for run in self.runs.iter_mut().filter(|run| run.level == level && run.flags & CHUNK_FLAG_ODD != 0) {
            if odd_seen {
                run.flags &= !CHUNK_FLAG_ODD;
                cleared.push("a rewritten chunk".into());
            }
            odd_seen = true;
        }
        if !cleared.is_empty() {
            let action = format!(
                "cleared the odd flag of {} (one odd chunk per level; a later compaction merges them)",
                cleared.join(", ")
            );
            let structure = format!("level {level} of instance {}", self.instance);
            self.fixes.push(Fix::new(vec![Code::OddChunksInLevel], structure, 0, action));
        }
    }
}

/// The backup log's batches to keep (those recovery replays, before any damage), where it
/// ends, and the fixes its damage needs.
fn backup_batches(
    source: &Source,
    version: &Version,
    lost: bool,
    known: u64,
    context: &AreaContext,
) -> (Vec<ReplayBatch>, Option<u64>, Vec<Fix>) {
    let structure = format!("backup log of instance {}", source.instance);
    let recorded = (version.ofs_backup_start, version.lsn_backup_start);
    let start_inside = recorded.0 % 8 == 0 && recorded.0 + HEADER_LEN as u64 <= context.len_area;
    let prefix = |start: u64, lsn: u64| {
        recover_backup_log_prefix(&source.backup_area, context, start, lsn, version.last_sequence, 0)
    };
    let recovery = match &source.recovery {
        Ok(recovery) if !lost => recovery,
        _ => {
            // The versions after the one rebuilt from are lost, and with them where the
            // backup log's live part starts: from the start the version recorded, or from
            // the batch that continues the sequence numbers known (what the free slots
            // hold), whichever leads further.
            let recorded_batches = if start_inside { prefix(recorded.0, recorded.1).batches } else { Vec::new() };
            let continuing = continuing_batches(&source.backup_area, context, known, version.last_sequence);
            let batches = if reach(&continuing) > reach(&recorded_batches) { continuing } else { recorded_batches };
            // Valid batches later in the log than those kept hold entries nothing replays.
            let floor = reach(&batches).saturating_sub(1).max(known);
            let later = later_batches(&source.backup_area, context, kept_until(&batches, recorded.1), floor);
            let mut fixes = Vec::new();
            if !later.is_empty() {
                let first = batches.first().map_or(recorded.0, |batch| batch.offset);
                fixes.push(
                    Fix::new(
                        Vec::new(),
                        structure,
                        context.ofs_area + first,
                        format!(
                            "kept the {} batches that continue the sequence numbers the rebuilt version holds",
                            batches.len()
                        ),
                    )
                    .dropping(vec![Dropped::new(
                        format!("the {} later batches in the backup log above sequence {floor}", later.len()),
                        later,
                    )]),
                );
            }
            return (batches, None, fixes);
        }
    };
    match &recovery.backup {
        BackupRecovery::Recovered { state, end, .. } => {
            let mut fixes = Vec::new();
            if let ChainEndVerdict::Broken { offset, later, .. } = end {
                fixes.push(
                    Fix::new(
                        vec![Code::BackupLogChainBroken],
                        structure,
                        context.ofs_area + offset,
                        format!("kept the {} batches before the damage at offset {offset}", state.batches.len()),
                    )
                    .dropping(vec![Dropped::new(
                        format!("backup log objects lsn {} to {} after the damage", later.first_lsn, later.last_lsn),
                        later_batches(
                            &source.backup_area,
                            context,
                            kept_until(&state.batches, recorded.1),
                            reach(&state.batches).saturating_sub(1).max(version.last_sequence),
                        ),
                    )]),
                );
            }
            let head = if state.head.after_wrap_right { 0 } else { state.head.offset };
            (state.batches.clone(), Some(head), fixes)
        }
        BackupRecovery::Sequence(error) => {
            let state = prefix(recorded.0, recorded.1);
            let fix = Fix::new(
                vec![Code::BackupLogSequence],
                structure,
                context.ofs_area,
                format!(
                    "kept the {} batches before the first whose sequence numbers do not increase",
                    state.batches.len()
                ),
            )
            .dropping(vec![Dropped::new(
                format!("the batches from there on ({error})"),
                later_batches(
                    &source.backup_area,
                    context,
                    kept_until(&state.batches, recorded.1),
                    reach(&state.batches).saturating_sub(1).max(version.last_sequence),
                ),
            )]);
            (state.batches, None, vec![fix])
        }
        BackupRecovery::StartMismatch { offset, found_lsn, recorded_lsn } => {
            let state = prefix(*offset, *found_lsn);
            let fix = Fix::new(
                vec![Code::BackupStartMismatch],
                structure,
                context.ofs_area + offset,
                format!(
                    "replayed the backup log from the object at the start point (lsn {found_lsn}, the version said {recorded_lsn}): {} batches",
                    state.batches.len()
                ),
            );
            (state.batches, None, vec![fix])
        }
        BackupRecovery::StartOutside { ofs_backup_start, .. } => {
            let fix = Fix::new(
                vec![Code::BackupStartOutside],
                structure,
                context.ofs_area,
                format!("restarted the backup log (the start point {ofs_backup_start} lies outside it)"),
            )
            .dropping(vec![Dropped::new(
                "whatever the backup log held",
                later_batches(&source.backup_area, context, recorded.1.saturating_sub(1), version.last_sequence),
            )]);
            (Vec::new(), None, vec![fix])
        }
    }
}

/// Where each of `metas` (chunks a version names with metadata that contradicts it) lies
/// intact, if anywhere outside `taken`: the slots whose footers are its sub-chunks' (this
/// volume and instance, the chunk's level, each sub-chunk's index and count, the digest the
/// metadata records for it), the first of them the chunk id every one of those footers
/// names. The metadata is returned with those slots and that id.
fn locate_left_out(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    instance: u32,
    metas: &[&ChunkMeta],
    taken: &BTreeSet<u64>,
) -> Result<Vec<Option<ChunkMeta>>, DeviceError> {
    if metas.is_empty() {
        return Ok(Vec::new());
    }
    // The footers of this instance in the free slots, by digest (one read of a footer each).
    let mut by_digest: BTreeMap<[u8; 32], Vec<(u64, Footer)>> = BTreeMap::new();
    for slot in (0..geometry.num_slots).filter(|slot| !taken.contains(slot)) {
        let footer_offset = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
        let (bytes, unreadable) = read_tolerant(device, footer_offset, FOOTER_LEN as u64, geometry.sector())?;
        if !unreadable.is_empty() {
            continue;
        }
        let Ok(footer) = Footer::decode(&bytes, footer_offset, geometry.slot_size) else { continue };
        if footer.volume_uuid == geometry.volume_uuid && footer.instance == instance {
            by_digest.entry(footer.digest).or_default().push((slot, footer));
        }
    }
    let mut claimed: BTreeSet<u64> = BTreeSet::new();
    let mut located = Vec::with_capacity(metas.len());
    for meta in metas {
        let count = meta.sub_chunks.len();
        let mut slots = Vec::with_capacity(count);
        for (index, sub_chunk) in meta.sub_chunks.iter().enumerate() {
            let found = by_digest.get(&sub_chunk.digest).and_then(|candidates| {
                candidates.iter().find(|(slot, footer)| {
                    !claimed.contains(slot)
                        && !slots.contains(slot)
                        && footer.level == meta.level
                        && usize::from(footer.sub_chunk_index) == index
                        && usize::from(footer.num_sub_chunks) == count
                })
            });
            match found {
                Some((slot, footer)) => {
                    slots.push(*slot);
                    if footer.chunk_id != slots[0] {
                        break;
                    }
                }
                None => break,
            }
        }
        let whole = slots.len() == count
            && count > 0
            && by_digest.get(&meta.sub_chunks[0].digest).is_some_and(|candidates| {
                candidates.iter().any(|(slot, footer)| *slot == slots[0] && footer.chunk_id == slots[0])
            });
        if !whole {
            located.push(None);
            continue;
        }
        claimed.extend(slots.iter().copied());
        let mut found = (*meta).clone();
        found.chunk_id = slots[0];
        for (sub_chunk, slot) in found.sub_chunks.iter_mut().zip(&slots) {
            sub_chunk.slot = *slot;
        }
        located.push(Some(found));
    }
    Ok(located)
}

/// The lsn of the last batch kept, or the one before `lsn_start` when none is.
fn kept_until(kept: &[ReplayBatch], lsn_start: u64) -> u64 {
    kept.last().map_or(lsn_start.saturating_sub(1), |batch| batch.lsn)
}

/// The sequence number after the last batch of `batches` (0 without any).
fn reach(batches: &[ReplayBatch]) -> u64 {
    batches.last().map_or(0, |batch| batch.first_sequence + u64::from(batch.num_entries))
}

/// The entries above sequence `floor` of the valid batches of a backup log area later than
/// lsn `after` (past what a repair keeps of the log), one range per batch: what `lds salvage`
/// still reads there that restarting the backup log drops.
fn later_batches(area: &[u8], context: &AreaContext, after: u64, floor: u64) -> Vec<Lost> {
    let mut lost = Vec::new();
    for object in valid_objects(area, context).into_iter().filter(|object| object.header.lsn > after) {
        let Payload::Batch { first_sequence, .. } = object.payload else { continue };
        let Ok(raw) = read_object(area, object.offset, context) else { continue };
        let mut sequence = first_sequence;
        let (mut low, mut high): (Option<&[u8]>, Option<&[u8]>) = (None, None);
        let decoded = decode_entries(raw.payload, context.ofs_area + object.offset, |_, key, _| {
            sequence += 1;
            low = Some(low.map_or(key, |low| low.min(key)));
            high = Some(high.map_or(key, |high| high.max(key)));
        });
        if let (Ok(_), Some(low), Some(high)) = (decoded, low, high) {
            let (low, high) = (low.to_vec(), high.to_vec());
            if sequence - 1 > floor {
                lost.push(Lost {
                    instance: context.instance,
                    from: KeyFrom::Key(low),
                    through: Some(high),
                    smallest_seq: first_sequence.max(floor + 1),
                    largest_seq: sequence - 1,
                });
            }
        }
    }
    lost
}

/// Plans the rebuild of `source`'s tree.
pub(crate) fn plan<'a>(
    device: &'a dyn BlockDevice,
    label: &'a Label,
    source: &'a Source,
    old_slots: &BTreeSet<u64>,
) -> Result<InstancePlan, RepairError> {
    let geometry = &label.geometry;
    let instance = source.instance;
    let version_context = area_context(geometry, LogKind::Version, instance);
    let backup_context = area_context(geometry, LogKind::Backup, instance);
    let mut rebuild = Rebuild {
        device,
        geometry,
        instance,
        log: (format!("version log of instance {instance}"), version_context.ofs_area),
        tree: BTreeMap::new(),
        runs: Vec::new(),
        fixes: Vec::new(),
        resolver: Resolver::new(&source.backup_area, backup_context),
        retain_until: None,
    };
    let Start { version, journals, replica, protected, needed, mut lost, relocated } =
        rebuild.start(label, source, old_slots)?;
    rebuild.tree = version.chunks.clone();
    // The chunks kept where they were found are the version's now: no free slot.
    let old_slots: BTreeSet<u64> = old_slots.union(&relocated).copied().collect();
    let old_slots = &old_slots;
    // Where versions were lost, the data newer than the version that free slots hold. A
    // version whose backup log replay cannot start (its start object gone, or newer) or
    // breaks off may be older than the log too, its newest delta versions lost as a crash
    // would have lost them but with the batches they flushed since written over or damaged:
    // then the free slots hold what those versions had, past what the log replays.
    let behind = backup_behind(&source.recovery);
    let mut newer = if lost || behind.is_some() {
        newer_in_free_slots(device, geometry, instance, version.last_sequence, old_slots)?
    } else {
        NewerInFreeSlots {
            entries: Vec::new(),
            sources: BTreeSet::new(),
            superseded: BTreeSet::new(),
            dropped: Vec::new(),
        }
    };
    let code = match behind {
        Some((code, _)) if !lost => code,
        _ => version_code(&source.recovery),
    };
    if let Some((_, replayed)) = behind.filter(|_| !lost) {
        if newer.entries.iter().all(|entry| entry.sequence <= replayed) {
            // Nothing past what the log replays: the log alone is followed.
            newer.entries.clear();
            newer.sources.clear();
            newer.superseded.clear();
            newer.dropped.clear();
        }
        lost = !newer.entries.is_empty();
    }
    let (extra, source_slots) = (newer.entries, newer.sources);
    if !extra.is_empty() {
        let listed: Vec<String> = source_slots.union(&newer.superseded).map(u64::to_string).collect();
        let superseded: Vec<String> = newer.superseded.iter().map(u64::to_string).collect();
        let action = format!(
            "added the {} entries ({}) that chunks in free slots {} hold above that version's last sequence: data the lost versions had committed (keys deleted since may reappear){}",
            extra.len(),
            sequence_range(&extra),
            listed.join(", "),
            if superseded.is_empty() {
                String::new()
            } else {
                format!("; slots {} hold only versions the others supersede and take new writes", superseded.join(", "))
            }
        );
        let fix = rebuild.fix(vec![code], action);
        if !newer.dropped.is_empty() {
            fix.dropped = newer.dropped;
            fix.class = FixClass::Fix;
        }
    }
    // What the version and the free slots hold: the backup log adds what is newer.
    let known = extra.iter().map(|entry| entry.sequence).max().unwrap_or(0).max(version.last_sequence);
    let (batches, backup_head, mut backup_fixes) = backup_batches(source, &version, lost, known, &backup_context);
    // The new base version: the backup log restarts at its head (or offset 0) with an lsn
    // above any it holds, so that nothing there is replayed again. The objects from the log
    // starts of the log chunks that stay to that head are retained (SPEC.md §8.9): where the
    // head is not known, no log chunk stays.
    let (backup_lsn_max, _) = header_maxima(&source.backup_area, &backup_context);
    let head = backup_head.filter(|&offset| offset % 8 == 0 && offset + HEADER_LEN as u64 <= backup_context.len_area);
    let lsn_backup_start = backup_lsn_max.max(version.lsn_backup_start) + 1;
    rebuild.retain_until = head.map(|offset| LogPosition { offset, lsn: lsn_backup_start });
    rebuild.journals(&journals)?;
    rebuild.damaged_chunks()?;
    // Entries both hold once (the free slots' chunks were flushed from these batches).
    let in_slots: BTreeSet<u64> = extra.iter().map(|entry| entry.sequence).collect();
    let mut logged = batch_entries(&source.backup_area, &backup_context, &batches, version.last_sequence);
    if lost {
        // The sequence numbers up to `known` are taken to be in the free slots' chunks; those
        // a damaged chunk there lost, a valid batch of the log may still hold.
        let chosen: BTreeSet<u64> = batches.iter().map(|batch| batch.offset).collect();
        let holes: Vec<ReplayBatch> = valid_objects(&source.backup_area, &backup_context)
            .into_iter()
            .filter(|object| !chosen.contains(&object.offset))
            .filter_map(|object| match object.payload {
                Payload::Batch { first_sequence, num_entries, .. }
                    if first_sequence <= known
                        && first_sequence.saturating_add(u64::from(num_entries)) > version.last_sequence + 1 =>
                {
                    Some(ReplayBatch { offset: object.offset, lsn: object.header.lsn, first_sequence, num_entries })
                }
                _ => None,
            })
            .collect();
        let mut found = batch_entries(&source.backup_area, &backup_context, &holes, version.last_sequence);
        found.retain(|entry| entry.sequence <= known);
        logged.extend(found);
    }
    logged.retain(|entry| !in_slots.contains(&entry.sequence));
    rebuild.level_rules(version.num_levels)?;
    // The last sequence covers every chunk.
    let chunk_largest = rebuild.tree.values().map(|chunk| chunk.largest_seq);
    let run_largest = rebuild.runs.iter().flat_map(|run| run.entries.iter().map(|entry| entry.sequence));
    let data_largest = chunk_largest.chain(run_largest).max().unwrap_or(0);
    if rebuild.tree.values().any(|chunk| chunk.largest_seq > version.last_sequence) {
        let action = format!("raised the version's last sequence from {} to {data_largest}", version.last_sequence);
        rebuild.fix(vec![Code::SequenceImplausible], action);
    }
    // The backup log's batches (with what the free slots added) go to level 0, so that the
    // backup log restarts.
    let mut new_data = extra;
    new_data.extend(logged);
    let last_sequence =
        version.last_sequence.max(data_largest).max(new_data.iter().map(|entry| entry.sequence).max().unwrap_or(0));
    if !new_data.is_empty() {
        let run = Run::new(0, 0, new_data);
        if backup_fixes.is_empty() && !batches.is_empty() {
            backup_fixes.push(Fix::new(
                Vec::new(),
                format!("backup log of instance {instance}"),
                backup_context.ofs_area,
                format!(
                    "wrote the {} entries the backup log replays ({}) to level 0; the backup log restarts",
                    run.entries.len(),
                    sequence_range(&run.entries)
                ),
            ));
        }
        rebuild.runs.push(run);
    }
    rebuild.fixes.extend(backup_fixes);
    if replica.is_some_and(|replica| replica != *geometry) {
        rebuild.fix(vec![Code::GeometryReplicaDiffers], "the new base version replicates the label's geometry".into());
    }
    if rebuild.fixes.is_empty() {
        rebuild.fix(Vec::new(), "appended a base version of the recovered tree".into());
    }
    let (next_lsn, next_sn) = switch_numbers(source, &version_context);
    let mut template = BaseVersion {
        last_sequence,
        label_generation: label.generation,
        ofs_backup_start: head.unwrap_or(0),
        lsn_backup_start,
        chunks: Vec::new(),
        ..version.to_base(*geometry, instance)
    };
    let mut source_slots = source_slots;
    // A chunk kept where it was found is not in the old state: its slot must not take the
    // repair's writes before the switch, even where its entries are rewritten (a damaged one).
    source_slots.extend(relocated.iter().copied());
    if label.has_value_chunks() {
        // Damaged value chunks: the chunks pointing into them are rewritten, their values
        // that still match their crc32c copied into new value chunks (or inline).
        let damaged = damaged_value_chunks(device, geometry, instance, &version)?;
        for (&id, (code, reason)) in &damaged {
            let slot = version.value_chunks.get(&id).map_or(0, |meta| meta.slot);
            let action = format!("value chunk {id} in slot {slot} {reason}: the values in it that match their crc32c are copied to new value chunks, the chunks pointing to it rewritten");
            let fix = Fix::new(
                vec![*code],
                format!("value chunk {id} of instance {instance}"),
                geometry.slot_offset(slot),
                action,
            );
            rebuild.fixes.push(fix);
        }
        let pointing: Vec<ChunkMeta> = rebuild
            .tree
            .values()
            .filter(|chunk| chunk.value_refs.iter().any(|(id, _)| damaged.contains_key(id)))
            .cloned()
            .collect();
        for meta in pointing {
            rebuild.tree.remove(&meta.chunk_id);
            let read = rebuild.read_entries(&meta)?;
            if !read.dropped.is_empty() {
                let structure = format!("chunk {} of instance {instance}", meta.chunk_id);
                let action = format!("rewrote chunk {}: it points into a damaged value chunk", meta.chunk_id);
                rebuild
                    .fixes
                    .push(Fix::new(Vec::new(), structure, 0, action).dropping(read.dropped).class(FixClass::Fix));
            }
            if !read.entries.is_empty() {
                rebuild.runs.push(Run::new(meta.level, meta.flags, read.entries));
            }
        }
        // A chunk holding a pointer whose value cannot be read and checked in a value chunk
        // that is whole (it reaches past its values, fsck 703, or the value fails its crc32c,
        // 705) is rewritten too: `settle_values` leaves those entries out.
        let whole: Vec<ChunkMeta> =
            rebuild.tree.values().filter(|chunk| !chunk.value_refs.is_empty()).cloned().collect();
        for meta in whole {
            let read = rebuild.read_entries(&meta)?;
            let mut codes = Vec::new();
            for entry in read.entries.iter().filter(|entry| entry.kind == lds_format::entry::EntryKind::Pointer) {
                let Ok(pointer) = lds_format::value::ValuePointer::decode(&entry.value, 0) else { continue };
                let listed = |id: u64| version.value_chunks.get(&id).copied();
                if let Some((code, _)) = value_problem(device, geometry, &pointer, listed)? {
                    codes.push(code);
                }
            }
            if codes.is_empty() {
                continue;
            }
            codes.sort();
            codes.dedup();
            rebuild.tree.remove(&meta.chunk_id);
            let structure = format!("chunk {} of instance {instance}", meta.chunk_id);
            let offset = meta.sub_chunks.first().map_or(0, |sub_chunk| geometry.slot_offset(sub_chunk.slot));
            let action = format!(
                "rewrote the {} readable entries of chunk {} into new chunks at level {}: a value it points to cannot be read and checked",
                read.entries.len(),
                meta.chunk_id,
                meta.level
            );
            rebuild.fixes.push(Fix::new(codes, structure, offset, action).dropping(read.dropped).class(FixClass::Fix));
            rebuild.runs.push(Run::new(meta.level, meta.flags, read.entries));
        }
        let kept: Vec<&ChunkMeta> = rebuild.tree.values().collect();
        let settled = settle_values(device, geometry, instance, &version, &damaged, &kept, &mut rebuild.runs)?;
        source_slots.extend(settled.chunks.iter().map(|chunk| chunk.slot));
        if !settled.dropped.is_empty() {
            let action = format!("left out {} entries whose values are lost", settled.dropped.len());
            let fix = Fix::new(Vec::new(), format!("value chunks of instance {instance}"), 0, action);
            rebuild.fixes.push(fix.dropping(settled.dropped).class(FixClass::Fix));
        }
        template.values = Some(lds_format::version::payload::ValueSection {
            next_value_chunk_id: settled.next_value_chunk_id,
            chunks: settled.chunks,
        });
    }
    rebuild.resolve_runs();
    // The log chunks that stay were checked against this backup start (their objects lie
    // before it): the new base version records exactly it.
    let backup_start = LogPosition { offset: template.ofs_backup_start, lsn: template.lsn_backup_start };
    if rebuild.tree.values().any(ChunkMeta::is_log_chunk) && rebuild.retain_until != Some(backup_start) {
        return Err(RepairError::Inconsistent {
            device: device.name().display().to_string(),
            instance,
            reason: "a log chunk stays that was not checked against the new backup start".into(),
        });
    }
    Ok(InstancePlan {
        instance,
        fixes: rebuild.fixes,
        kept: rebuild.tree.into_values().collect(),
        runs: rebuild.runs,
        template,
        protected,
        needed,
        next_lsn,
        next_sn,
        source_slots,
        apply: true,
        value_moves: Vec::new(),
    })
}

/// The value chunks of `version` whose footer or digest does not check, with the problem
/// code and why.
fn damaged_value_chunks(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    instance: u32,
    version: &Version,
) -> Result<BTreeMap<u64, (Code, String)>, RepairError> {
    use lds_format::value::{ValueFooter, VALUE_FOOTER_LEN};
    let mut damaged = BTreeMap::new();
    for meta in version.value_chunks.values() {
        if meta.slot >= geometry.num_slots {
            damaged.insert(meta.value_chunk_id, (Code::SlotOutOfRange, "lies beyond the slot area".to_string()));
            continue;
        }
        let offset = geometry.slot_offset(meta.slot);
        let (image, unreadable) = read_tolerant(device, offset, geometry.slot_size, geometry.sector())?;
        let footer_at = image.len() - VALUE_FOOTER_LEN;
        let footer = match ValueFooter::decode(&image[footer_at..], offset + footer_at as u64, geometry.slot_size) {
            Ok(footer) => footer,
            Err(error) => {
                damaged
                    .insert(meta.value_chunk_id, (Code::ValueFooterInvalid, format!("has no valid footer ({error})")));
                continue;
            }
        };
        let matches = footer.value_chunk_id == meta.value_chunk_id
            && footer.instance == instance
            && footer.volume_uuid == geometry.volume_uuid
            && footer.len_body == meta.len_body
            && footer.digest == meta.digest;
        if !matches {
            damaged.insert(
                meta.value_chunk_id,
                (Code::ValueFooterInvalid, "has a footer that disagrees with the version".into()),
            );
            continue;
        }
        let body = &image[..(footer.len_body as usize).min(footer_at)];
        if !unreadable.is_empty() || footer.verify_digest(body, offset).is_err() {
            damaged.insert(meta.value_chunk_id, (Code::ValueDigestMismatch, "does not match its digest".into()));
        }
    }
    Ok(damaged)
}

/// Why the value `pointer` names cannot be read and checked (SPEC.md §8.6: each extent lies
/// inside the values of its value chunk, which `chunks` gives by id, and the value matches
/// the pointer's crc32c), with the problem code fsck reports for it; `None` when it checks.
fn value_problem(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    pointer: &lds_format::value::ValuePointer,
    chunks: impl Fn(u64) -> Option<lds_format::value::ValueChunkMeta>,
) -> Result<Option<(Code, String)>, RepairError> {
    let mut value = Vec::with_capacity(pointer.len_value as usize);
    // Bounded by the pointer's extents (at most 2^16, each read once).
    for extent in &pointer.extents {
        let id = extent.value_chunk_id;
        let Some(meta) = chunks(id) else {
            return Ok(Some((
                Code::ValuePointerInvalid,
                format!("its pointer names value chunk {id}, which is not kept"),
            )));
        };
        let end = u64::from(extent.offset) + u64::from(extent.len);
        if end > u64::from(meta.len_body) || meta.slot >= geometry.num_slots {
            return Ok(Some((
                Code::ValuePointerInvalid,
                format!(
                    "its pointer reaches byte {end} of value chunk {id}, which holds {} bytes of values",
                    meta.len_body
                ),
            )));
        }
        let offset = geometry.slot_offset(meta.slot) + u64::from(extent.offset);
        let (bytes, unreadable) = read_tolerant(device, offset, u64::from(extent.len), geometry.sector())?;
        if !unreadable.is_empty() {
            return Ok(Some((Code::UnreadableSector, format!("its value in value chunk {id} cannot be read"))));
        }
        value.extend_from_slice(&bytes);
    }
    if pointer.check_value(&value, 0).is_err() {
        return Ok(Some((Code::ValueChecksum, "its value does not match its crc32c".to_string())));
    }
    Ok(None)
}

/// The value chunks a rebuilt tree keeps (SPEC.md §8.6).
struct Settled {
    chunks: Vec<lds_format::value::ValueChunkMeta>,
    next_value_chunk_id: u64,
    /// Entries left out, described.
    dropped: Vec<Dropped>,
}

/// The value chunks of a rebuilt tree: those the kept chunks and the runs point to. A value
/// chunk the version lists is kept as it is; one it does not (named by a batch of the backup
/// log, or by a chunk found in a free slot) is kept when the slot its pointer gives holds it
/// (its footer names it, its digest checks); entries pointing to a value chunk found nowhere
/// are left out. Value chunks nothing points to any more are not kept.
fn settle_values(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    instance: u32,
    version: &Version,
    damaged: &BTreeMap<u64, (Code, String)>,
    kept: &[&ChunkMeta],
    runs: &mut [Run],
) -> Result<Settled, RepairError> {
    use lds_format::value::{ValueChunkMeta, ValueFooter, ValuePointer, VALUE_FOOTER_LEN};
    let mut found: BTreeMap<u64, Option<ValueChunkMeta>> = version
        .value_chunks
        .iter()
        .filter(|(id, _)| !damaged.contains_key(id))
        .map(|(id, chunk)| (*id, Some(*chunk)))
        .collect();
    // A value in a damaged value chunk, read from its slot; None when it does not match its
    // crc32c (or cannot be read).
    let salvage_value = |pointer: &ValuePointer| -> Result<Option<Vec<u8>>, RepairError> {
        let read = lds_format::value::read_value(
            pointer,
            |extent| -> Result<Vec<u8>, Option<DeviceError>> {
                let Some(meta) = version.value_chunks.get(&extent.value_chunk_id) else { return Err(None) };
                if u64::from(extent.offset) + u64::from(extent.len) > geometry.slot_size {
                    return Err(None);
                }
                let offset = geometry.slot_offset(meta.slot) + u64::from(extent.offset);
                let (bytes, unreadable) =
                    read_tolerant(device, offset, u64::from(extent.len), geometry.sector()).map_err(Some)?;
                if unreadable.is_empty() {
                    Ok(bytes)
                } else {
                    Err(None)
                }
            },
            |_| None,
        );
        match read {
            Ok(value) => Ok(Some(value)),
            Err(Some(error)) => Err(error.into()),
            Err(None) => Ok(None),
        }
    };
    let mut look_up = |id: u64, slot: u64| -> Result<Option<ValueChunkMeta>, RepairError> {
        if let Some(known) = found.get(&id) {
            return Ok(*known);
        }
        let mut chunk = None;
        if slot < geometry.num_slots && !version.slot_owner.contains_key(&slot) {
            let offset = geometry.slot_offset(slot);
            let image = device.read_vec(offset, geometry.slot_size)?;
            let footer_at = image.len() - VALUE_FOOTER_LEN;
            if let Ok(footer) = ValueFooter::decode(&image[footer_at..], offset + footer_at as u64, geometry.slot_size)
            {
                let body = &image[..(footer.len_body as usize).min(footer_at)];
                let ours = footer.value_chunk_id == id && footer.instance == instance;
                if ours && footer.volume_uuid == geometry.volume_uuid && footer.verify_digest(body, offset).is_ok() {
                    chunk = Some(ValueChunkMeta::of_footer(&footer, slot));
                }
            }
        }
        found.insert(id, chunk);
        Ok(chunk)
    };
    let mut dropped = Vec::new();
    let mut referenced = BTreeSet::new();
    for chunk in kept {
        referenced.extend(chunk.value_refs.iter().map(|(id, _)| *id));
    }
    for run in runs.iter_mut() {
        let mut entries = Vec::with_capacity(run.entries.len());
        for entry in std::mem::take(&mut run.entries) {
            if entry.kind != lds_format::entry::EntryKind::Pointer {
                entries.push(entry);
                continue;
            }
            let mut whole = false;
            let mut entry = entry;
            let pointer = ValuePointer::decode(&entry.value, 0);
            if let Some(pointer) = pointer
                .as_ref()
                .ok()
                .filter(|pointer| pointer.extents.iter().any(|extent| damaged.contains_key(&extent.value_chunk_id)))
            {
                match salvage_value(pointer)? {
                    Some(value) => {
                        entry.kind = lds_format::entry::EntryKind::Put;
                        entry.value = value;
                        entries.push(entry);
                    }
                    None => dropped.push(Dropped::entry(
                        instance,
                        &entry,
                        "its value in a damaged value chunk does not match its crc32c",
                    )),
                }
                continue;
            }
            if let Ok(pointer) = pointer {
                let mut chunks = BTreeMap::new();
                whole = true;
                for extent in &pointer.extents {
                    match look_up(extent.value_chunk_id, extent.slot)? {
                        Some(chunk) => {
                            chunks.insert(extent.value_chunk_id, chunk);
                        }
                        None => whole = false,
                    }
                }
                // A value chunk that is whole may still hold a value its pointer does not
                // check against (fsck 703, 705): the entry is left out.
                if whole {
                    if let Some((_, problem)) =
                        value_problem(device, geometry, &pointer, |id| chunks.get(&id).copied())?
                    {
                        dropped.push(Dropped::entry(instance, &entry, &problem.to_string()));
                        continue;
                    }
                    referenced.extend(pointer.extents.iter().map(|extent| extent.value_chunk_id));
                }
            }
            if whole {
                entries.push(entry);
            } else {
                dropped.push(Dropped::entry(instance, &entry, "its value chunk is lost"));
            }
        }
        run.entries = entries;
    }
    let chunks: Vec<ValueChunkMeta> =
        found.into_values().flatten().filter(|chunk| referenced.contains(&chunk.value_chunk_id)).collect();
    let next_value_chunk_id =
        chunks.iter().map(|chunk| chunk.value_chunk_id + 1).max().unwrap_or(1).max(version.next_value_chunk_id);
    Ok(Settled { chunks, next_value_chunk_id, dropped })
}
