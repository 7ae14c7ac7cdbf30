//! Reading an instance's source: its log areas and what recovery makes of them, where the new
//! chain's objects may go, and the entries still readable in a chunk.

use std::collections::BTreeMap;

use lds_format::algorithms::instance::{recover_instance, ChainEndVerdict, InstanceRecovery};
use lds_format::algorithms::recovery::VersionLogError;
use lds_format::algorithms::salvage::{last_good_version, salvage_sub_chunk, GoodVersion};
use lds_format::entry::Entry;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::{area_context, AreaContext, ObjectHeader, HEADER_LEN, OBJECT_MAGIC};
use lds_format::version::meta::ChunkMeta;
use lds_format::version::payload::CompactionJournal;
use lds_format::version::Version;
use lds_volume::block::read_tolerant;
use lds_volume::{BlockDevice, DeviceError};

use crate::dropped::{Dropped, KeyFrom, Lost};

use super::sort_entries;

/// An instance as the volume holds it: its log areas, what recovery makes of them, and (when
/// its version log is damaged) the newest version the area still describes.
pub(crate) struct Source {
    pub(crate) instance: u32,
    pub(super) version_area: Vec<u8>,
    pub(super) backup_area: Vec<u8>,
    pub(super) recovery: Result<InstanceRecovery, VersionLogError>,
    pub(super) good: Option<GoodVersion>,
    /// The value chunks only the backup log names, by id, with their slots (read once).
    pub(super) pending_values: BTreeMap<u64, u64>,
}

pub(super) fn version_log_broken(recovery: &Result<InstanceRecovery, VersionLogError>) -> bool {
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

/// The largest lsn and SN of any intact header of ours in an area.
pub(super) fn header_maxima(area: &[u8], context: &AreaContext) -> (u64, u64) {
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
pub(super) fn switch_numbers(source: &Source, version_context: &AreaContext) -> (u64, u64) {
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
pub(super) fn old_chain_ranges(recovery: &InstanceRecovery, area: &[u8], context: &AreaContext) -> Vec<(u64, u64)> {
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

/// What the entries of a chunk give, block by block.
pub(super) struct ChunkRead {
    pub(super) entries: Vec<Entry>,
    pub(super) dropped: Vec<Dropped>,
}

/// Reads every entry still readable in a chunk (see `lds_format::salvage`): all of a sub-chunk
/// whose footer names it, the entries inside its key and sequence ranges where the footer is
/// lost, none where the slot holds another chunk.
pub(super) fn read_entries(
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
