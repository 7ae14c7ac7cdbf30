//! Recovering one instance from the bytes of its two log areas (SPEC.md §9.2, §9.3), and
//! telling the states a crash leaves at the end of a live chain from damage no crash explains
//! (SPEC.md §9.6). Pure functions returning typed verdicts: the engine refuses to open on
//! damage, the checker reports every verdict under its problem code, dump and the simulator
//! read the same result. Every caller that recovers an instance calls [`recover_instance`].

use crate::algorithms::recovery::{
    read_valid_object, recover_backup_log, recover_backup_log_prefix, recover_version_log, BackupLogError,
    BackupLogState, ChainEnd, ChainObject, Payload, SnAbove, VersionLogError, VersionLogState,
};
use crate::batch::{decode_entries, synced_lsn};
use crate::entry::EntryKind;
use crate::error::FormatError;
use crate::geometry::{Geometry, LogKind};
use crate::log::{read_object, AreaContext, ObjectHeader, ObjectType, HEADER_LEN, OBJECT_MAGIC};
use crate::value::ValuePointer;

/// The lsns of valid objects standing anywhere in an area past the end of its live chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaterObjects {
    /// How many.
    pub count: usize,
    /// The smallest lsn among them.
    pub first_lsn: u64,
    /// The largest.
    pub last_lsn: u64,
    /// The furthest sync watermark among them (SPEC.md §7.1), if any claims one.
    pub synced: Option<SyncedClaim>,
}

/// A write batch's sync watermark: every object of its log up to `synced_lsn` was durable
/// before the batch with lsn `lsn` was written (SPEC.md §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncedClaim {
    /// The batch's lsn.
    pub lsn: u64,
    /// The lsn it records as durable.
    pub synced_lsn: u64,
}

impl std::fmt::Display for LaterObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.count {
            1 => write!(f, "1 later object (lsn {})", self.first_lsn)?,
            count => write!(f, "{count} later objects (lsn {} to {})", self.first_lsn, self.last_lsn)?,
        }
        match self.synced {
            Some(claim) => {
                write!(f, ", the one with lsn {} recording lsn {} and earlier as synced", claim.lsn, claim.synced_lsn)
            }
            None => Ok(()),
        }
    }
}

/// What the end of a live chain shows (SPEC.md §9.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainEndVerdict {
    /// The chain ends at a WOR, at the area's end, or where no append of ours stands, and no
    /// valid object with a later lsn stands anywhere: nothing to say.
    Clean,
    /// An object of ours stands at the head and does not validate: a write a crash
    /// interrupted (it spans sectors, or nothing later landed), which recovery ignores.
    TornHead {
        /// Area offset of the object (or of the WOR place at the next sector boundary).
        offset: u64,
        /// The lsn it would have had.
        next_lsn: u64,
        /// Why it ends the chain.
        end: ChainEnd,
        /// Valid objects with later lsns that landed before it, if any.
        later: Option<LaterObjects>,
    },
    /// Valid objects with later lsns stand after a position the next append never reached:
    /// unflushed appends a crash reordered (backup log only).
    UnflushedAfterGap {
        /// Area offset where the chain ends.
        offset: u64,
        /// The objects.
        later: LaterObjects,
    },
    /// Damage: the chain ends at an object of ours that no crash leaves so (it lies in one
    /// sector), or, in a version log, anywhere with later objects after it; those objects are
    /// lost to recovery.
    Broken {
        /// Area offset where the chain ends.
        offset: u64,
        /// Why it ends the chain.
        end: ChainEnd,
        /// The objects recovery loses.
        later: LaterObjects,
    },
}

/// What recovery found in an instance's backup log.
#[derive(Debug, Clone)]
pub enum BackupRecovery {
    /// The version's backup start point is not an object position inside the area.
    StartOutside {
        /// The start point.
        ofs_backup_start: u64,
        /// Bytes of the area.
        len_area: u64,
    },
    /// The object at the start point is valid and cannot be what the version's start names
    /// (SPEC.md §9.6): it has a larger lsn than the version records (damage lost later
    /// versions), or a smaller one and was written after the version (the recorded lsn or
    /// offset is damaged), so its batches must be replayed from it.
    StartMismatch {
        /// The start point.
        offset: u64,
        /// The lsn the version records.
        recorded_lsn: u64,
        /// The lsn found there.
        found_lsn: u64,
    },
    /// Write batches in the live chain do not have increasing sequence numbers.
    Sequence(BackupLogError),
    /// The live chain, how it ends, and whether a crashed session's objects stand ahead of
    /// the head (the writer raises the SN before its first append then, SPEC.md §9.5).
    Recovered {
        /// The live chain and the batches to replay.
        state: Box<BackupLogState>,
        /// How the chain ends.
        end: ChainEndVerdict,
        /// An intact header of ours with an lsn at or past the head's stands in the area.
        stale_ahead: bool,
    },
}

/// One instance, recovered.
#[derive(Debug, Clone)]
pub struct InstanceRecovery {
    /// The instance.
    pub instance: u32,
    /// The version log's live state.
    pub version_log: VersionLogState,
    /// How its live chain ends.
    pub version_end: ChainEndVerdict,
    /// The backup log.
    pub backup: BackupRecovery,
}

/// Damage in an instance's logs that no crash explains: recovery would serve an older state
/// silently and the next appends would overwrite what a repair could use, so a writer refuses
/// to open (SPEC.md §9.6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogDamage {
    /// `E_VLOG_CHAIN_BROKEN` (fsck 207).
    #[error(
        "the live chain of the version log breaks at offset {offset} ({}); {later} lost to recovery",
        crate::algorithms::recovery::describe_end(end)
    )]
    VersionLogChainBroken {
        /// Area offset.
        offset: u64,
        /// Why the chain ends there.
        end: ChainEnd,
        /// What recovery loses.
        later: LaterObjects,
    },
    /// `E_BLOG_CHAIN_BROKEN` (fsck 303).
    #[error(
        "the live chain of the backup log breaks at offset {offset} ({}); {later} lost to recovery",
        crate::algorithms::recovery::describe_end(end)
    )]
    BackupLogChainBroken {
        /// Area offset.
        offset: u64,
        /// Why the chain ends there.
        end: ChainEnd,
        /// What recovery loses.
        later: LaterObjects,
    },
    /// `E_BACKUP_START_MISMATCH` (fsck 304).
    #[error("the version says the backup log restarts at offset {offset} with lsn {recorded_lsn}, but the object there has lsn {found_lsn}")]
    BackupStartMismatch {
        /// Area offset.
        offset: u64,
        /// The lsn the version records.
        recorded_lsn: u64,
        /// The lsn found.
        found_lsn: u64,
    },
    /// `E_BLOG_SN_ABOVE` (fsck 308): a live backup log object has an `sn` above the version
    /// log's.
    #[error(
        "the {} at offset {} of the backup log (lsn {}) has sn {}, above the version log's {}",
        .0.object_type.name(), .0.offset, .0.lsn, .0.sn, .0.ceiling
    )]
    BackupSnAbove(SnAbove),
    /// The backup start point lies outside the area (fsck 305).
    #[error("the backup start point {ofs_backup_start} is not an object position of the {len_area}-byte area")]
    BackupStartOutside {
        /// The start point.
        ofs_backup_start: u64,
        /// Bytes of the area.
        len_area: u64,
    },
    /// Batches with sequence numbers that do not increase (fsck 302).
    #[error("{0}")]
    BackupSequence(BackupLogError),
}

impl LogDamage {
    /// The checker's stable problem number for this damage (SPEC.md §9.6 names both).
    pub fn problem_number(&self) -> u16 {
        match self {
            Self::VersionLogChainBroken { .. } => 207,
            Self::BackupLogChainBroken { .. } => 303,
            Self::BackupStartMismatch { .. } => 304,
            Self::BackupStartOutside { .. } => 305,
            Self::BackupSequence(_) => 302,
            Self::BackupSnAbove(_) => 308,
        }
    }
}

impl InstanceRecovery {
    /// The damage that makes a writer refuse the volume, if any.
    pub fn damage(&self) -> Option<LogDamage> {
        if let ChainEndVerdict::Broken { offset, end, later } = &self.version_end {
            return Some(LogDamage::VersionLogChainBroken { offset: *offset, end: end.clone(), later: *later });
        }
        match &self.backup {
            BackupRecovery::StartOutside { ofs_backup_start, len_area } => {
                Some(LogDamage::BackupStartOutside { ofs_backup_start: *ofs_backup_start, len_area: *len_area })
            }
            BackupRecovery::StartMismatch { offset, recorded_lsn, found_lsn } => Some(LogDamage::BackupStartMismatch {
                offset: *offset,
                recorded_lsn: *recorded_lsn,
                found_lsn: *found_lsn,
            }),
            BackupRecovery::Sequence(error) => Some(LogDamage::BackupSequence(error.clone())),
            BackupRecovery::Recovered { end: ChainEndVerdict::Broken { offset, end, later }, .. } => {
                Some(LogDamage::BackupLogChainBroken { offset: *offset, end: end.clone(), later: *later })
            }
            BackupRecovery::Recovered { state, .. } => state.sn_above.map(LogDamage::BackupSnAbove),
        }
    }

    /// The recovered backup log, when its recovery found no damage of its own.
    pub fn backup_state(&self) -> Option<&BackupLogState> {
        match &self.backup {
            BackupRecovery::Recovered { state, .. } => Some(state),
            _ => None,
        }
    }

    /// Replays the backup log's batches into `apply` (sequence, kind, key, value), skipping
    /// entries at or below the version's `last_sequence` (SPEC.md §9.3 step 3). Returns the
    /// largest sequence number after replay. `backup_area` is the area the recovery read.
    pub fn replay(
        &self,
        backup_area: &[u8],
        context: &AreaContext,
        mut apply: impl FnMut(u64, EntryKind, &[u8], &[u8]),
    ) -> Result<u64, FormatError> {
        let last_sequence = self.version_log.version.last_sequence;
        let mut largest = last_sequence;
        let Some(state) = self.backup_state() else { return Ok(largest) };
        for batch in &state.batches {
            let raw = read_object(backup_area, batch.offset, context)?;
            let mut sequence = batch.first_sequence;
            decode_entries(raw.payload, context.ofs_area + batch.offset, |kind, key, value| {
                if sequence > last_sequence {
                    apply(sequence, kind, key, value);
                }
                sequence += 1;
            })?;
            largest = largest.max(sequence - 1);
        }
        Ok(largest)
    }

    /// The value chunks the replayed batches point to that the version does not list
    /// (SPEC.md §8.6: pending, named only by the backup log), by id, with the slot their
    /// pointers give. Their slots are in use (§9.4).
    pub fn pending_value_chunks(
        &self,
        backup_area: &[u8],
        context: &AreaContext,
    ) -> Result<std::collections::BTreeMap<u64, u64>, FormatError> {
        let mut pointers = Vec::new();
        let mut failed = None;
        self.replay(backup_area, context, |_, kind, _, value| {
            if kind != EntryKind::Pointer || failed.is_some() {
                return;
            }
            match ValuePointer::decode(value, 0) {
                Ok(pointer) => pointers.push(pointer),
                Err(error) => failed = Some(error),
            }
        })?;
        match failed {
            Some(error) => Err(error),
            None => Ok(self.version_log.version.unlisted_value_chunks(&pointers)),
        }
    }
}

/// Recovers instance `instance` from its version log and backup log areas (SPEC.md §9.2,
/// §9.3) and classifies how each live chain ends (§9.6). Fails only when the version log has
/// no live version.
pub fn recover_instance(
    geometry: &Geometry,
    instance: u32,
    version_area: &[u8],
    backup_area: &[u8],
) -> Result<InstanceRecovery, VersionLogError> {
    let version_context = crate::log::area_context(geometry, LogKind::Version, instance);
    let version_log = recover_version_log(version_area, &version_context)?;
    let version_end =
        classify_chain_end(version_area, &version_context, &version_log.end, (version_log.head.next_lsn, 0));
    let backup_context = crate::log::area_context(geometry, LogKind::Backup, instance);
    let backup = recover_backup(backup_area, &backup_context, &version_log);
    Ok(InstanceRecovery { instance, version_log, version_end, backup })
}

fn recover_backup(area: &[u8], context: &AreaContext, version_log: &VersionLogState) -> BackupRecovery {
    let version = &version_log.version;
    let start = version.ofs_backup_start;
    if start % 8 != 0 || start.saturating_add(HEADER_LEN as u64) > context.len_area {
        return BackupRecovery::StartOutside { ofs_backup_start: start, len_area: context.len_area };
    }
    let state =
        match recover_backup_log(area, context, start, version.lsn_backup_start, version.last_sequence, version_log.sn)
        {
            Ok(state) => state,
            Err(error) => return BackupRecovery::Sequence(error),
        };
    let end = if state.start_found {
        classify_chain_end(area, context, &state.end, (state.head.next_lsn, state.head.sn))
    } else {
        // Nothing written since the last flush is normal; an object newer than the start
        // point standing there is not, nor one written after the version (SPEC.md §9.6).
        let found = read_valid_object(area, start, context);
        if let Ok(object) = &found {
            if object.header.lsn > version.lsn_backup_start {
                return BackupRecovery::StartMismatch {
                    offset: start,
                    recorded_lsn: version.lsn_backup_start,
                    found_lsn: object.header.lsn,
                };
            }
        }
        // The object at the start point, or where none is valid the WOR at the next sector
        // boundary, which a chain from the start point takes for its first object (§9.1).
        let boundary = start.div_ceil(u64::from(context.sector_size)) * u64::from(context.sector_size);
        let first = found.ok().or_else(|| {
            read_valid_object(area, boundary, context)
                .ok()
                .filter(|wrap| boundary != start && wrap.object_type == ObjectType::WrapRight)
        });
        if let Some(object) = first.filter(|object| written_after_version(area, context, object, version)) {
            return BackupRecovery::StartMismatch {
                offset: start,
                recorded_lsn: version.lsn_backup_start,
                found_lsn: object.header.lsn,
            };
        }
        // The start object itself may be damaged with valid objects after it.
        let end = ChainEnd::Invalid {
            offset: start,
            error: FormatError::invalid(
                "write batch",
                "start",
                context.ofs_area + start,
                "the object at the backup start point is not valid",
            ),
        };
        classify_chain_end(area, context, &end, (version.lsn_backup_start, 0))
    };
    let stale_ahead = headers_at_or_past(area, context, state.head.next_lsn);
    BackupRecovery::Recovered { state: Box::new(state), end, stale_ahead }
}

/// True when `object`, valid at the version's backup start point (or the WOR at the next
/// sector boundary) with a smaller lsn than the version records (so not the object the start
/// names), was written after the version (SPEC.md §9.6, `E_BACKUP_START_MISMATCH`): the chain
/// from it (§9.3, from its own lsn, wraps included) reaches the recorded lsn at another
/// offset; or it holds a batch with a sequence number above the version's `last_sequence`
/// while no valid object of the area has the recorded lsn's predecessor or a later lsn. And
/// in either case no valid object with a smaller lsn has a larger `sn` (a crashed session's
/// leftover, whose lsns and sequence numbers the next session reused, has a smaller `sn` than
/// that session's objects, §9.5).
///
/// A writer records as the start the position of its next append (§10.2), after the object
/// with the lsn before; what it appended before holds no sequence number the version's chunks
/// lack, so a stale object of an earlier lap there chains only up to that predecessor. Repair
/// restarts a log one lsn above the largest it holds, which no chain reaches either.
fn written_after_version(
    area: &[u8],
    context: &AreaContext,
    object: &ChainObject,
    version: &crate::version::Version,
) -> bool {
    let found_lsn = object.header.lsn;
    let recorded_lsn = version.lsn_backup_start;
    if found_lsn >= recorded_lsn {
        return false;
    }
    // Followed without the `sn` ceiling: the batches above `last_sequence` and the lsns count.
    let chained = recover_backup_log_prefix(area, context, object.offset, found_lsn, version.last_sequence, 0);
    let reaches_recorded = chained.objects.iter().any(|chained| chained.header.lsn == recorded_lsn);
    let unreached = || later_objects(area, context, recorded_lsn.saturating_sub(2)).is_none();
    let replays_past_unreached = !chained.batches.is_empty() && unreached();
    (reaches_recorded || replays_past_unreached) && !newer_sn_below(area, context, found_lsn, object.header.sn)
}

/// True when a valid object of the area has an lsn below `lsn` and an `sn` above `sn`.
fn newer_sn_below(area: &[u8], context: &AreaContext, lsn: u64, sn: u64) -> bool {
    magic_positions(area).any(|position| {
        // The stated lsn first: most positions are ruled out without checking a checksum.
        if raw_lsn(area, position).is_none_or(|found| found >= lsn) {
            return false;
        }
        read_valid_object(area, position as u64, context)
            .is_ok_and(|found| found.header.lsn < lsn && found.header.sn > sn)
    })
}

/// How a live chain that ended at `end` with the head's next lsn and SN ends (SPEC.md §9.6).
pub fn classify_chain_end(
    area: &[u8],
    context: &AreaContext,
    end: &ChainEnd,
    (next_lsn, sn_floor): (u64, u64),
) -> ChainEndVerdict {
    let offset = match end {
        ChainEnd::Invalid { offset, .. } | ChainEnd::Stale { offset, .. } => *offset,
        ChainEnd::WrapRight | ChainEnd::AreaEnd => return ChainEndVerdict::Clean,
    };
    let later = later_objects(area, context, next_lsn);
    let damaged = damaged_head(area, context, offset, (next_lsn, sn_floor));
    // A later batch records the missing object as durable (SPEC.md §7.1): a flush completed
    // after it was written, so no crash lost it.
    let synced_lost = later.and_then(|later| later.synced).is_some_and(|claim| claim.synced_lsn >= next_lsn);
    match later {
        // Every version log append is flushed before the next is written (SPEC.md §10.1),
        // so no crash leaves a later object after the chain's end there: only damage does.
        Some(later) if context.kind == LogKind::Version || synced_lost => {
            ChainEndVerdict::Broken { offset, end: end.clone(), later }
        }
        // Nothing of ours landed where the chain breaks, so nothing after it was flushed: a
        // flush covers every earlier write to the area. Writes a crash reordered.
        Some(later) if !damaged => ChainEndVerdict::UnflushedAfterGap { offset, later },
        // A torn unflushed write with later ones landed: a crash leaves this too, and nothing
        // on the media tells it from damage.
        Some(later) if tearable(area, context, offset) => {
            ChainEndVerdict::TornHead { offset, next_lsn, end: end.clone(), later: Some(later) }
        }
        Some(later) => ChainEndVerdict::Broken { offset, end: end.clone(), later },
        None if damaged => ChainEndVerdict::TornHead { offset, next_lsn, end: end.clone(), later: None },
        None => ChainEndVerdict::Clean,
    }
}

fn header_at(area: &[u8], at: u64) -> Option<&[u8; HEADER_LEN]> {
    let start = usize::try_from(at).ok()?;
    area.get(start..start.checked_add(HEADER_LEN)?)?.try_into().ok()
}

/// True when an object of ours stands at the head (at `offset`, or a WOR at the next sector
/// boundary) but does not validate (SPEC.md §9.6): all its identifying fields but at most one
/// match the expected append, whatever its checksums say.
fn damaged_head(area: &[u8], context: &AreaContext, offset: u64, (next_lsn, sn_floor): (u64, u64)) -> bool {
    let sector = u64::from(context.sector_size);
    let boundary = offset.div_ceil(sector) * sector;
    [(offset, None), (boundary, Some(ObjectType::WrapRight))].iter().any(|&(at, only_type)| {
        // A valid object there is stale, not damaged.
        if read_valid_object(area, at, context).is_ok() {
            return false;
        }
        let Some(bytes) = header_at(area, at) else { return false };
        let found = ObjectHeader::parse_tolerant(bytes);
        let mismatches = found.identity_mismatches(context, at, next_lsn, only_type);
        if found.crc_ok {
            // The checksummed fields (all but the magic) are true: it is ours only when they
            // all match, with the next lsn (a stale header of an earlier lap is not damage),
            // and only with an SN at least the chain's: a smaller one is a leftover of a
            // crashed session whose lsns the next session reused (SPEC.md §9.5), partly
            // overwritten by its later appends.
            let checksummed_mismatches = mismatches - usize::from(!found.magic_ok);
            return checksummed_mismatches == 0 && found.header.sn >= sn_floor;
        }
        mismatches <= 1
    })
}

/// True when a crash could have torn the object at `offset` (SPEC.md §2: only a one-sector
/// write is atomic): its header crosses a sector boundary, or its intact header gives it a
/// length that does. A damaged object inside one sector is no torn write: the sector landed
/// whole (its header is ours) or not at all.
fn tearable(area: &[u8], context: &AreaContext, offset: u64) -> bool {
    let sector = u64::from(context.sector_size);
    let Some(bytes) = header_at(area, offset) else { return false };
    let last_sector = |len: u64| (offset + len - 1) / sector;
    if last_sector(HEADER_LEN as u64) != offset / sector {
        return true;
    }
    let found = ObjectHeader::parse_tolerant(bytes);
    if !found.crc_ok {
        return false;
    }
    last_sector(found.header.total_len()) != offset / sector
}

/// Valid objects anywhere in a log area with an lsn above `next_lsn`.
pub fn later_objects(area: &[u8], context: &AreaContext, next_lsn: u64) -> Option<LaterObjects> {
    let mut later: Option<LaterObjects> = None;
    for position in magic_positions(area) {
        // An object is valid only with the lsn its header states: one at or below `next_lsn`
        // is skipped before its checksums and payload are checked (most of a ring is older
        // objects; checking them all was most of an open's time).
        if raw_lsn(area, position).is_none_or(|lsn| lsn <= next_lsn) {
            continue;
        }
        let Ok(object) = read_valid_object(area, position as u64, context) else { continue };
        let lsn = object.header.lsn;
        if lsn <= next_lsn {
            continue;
        }
        let claim = match object.payload {
            Payload::Batch { synced_lsn_low, .. } => {
                synced_lsn(lsn, synced_lsn_low).map(|synced_lsn| SyncedClaim { lsn, synced_lsn })
            }
            _ => None,
        };
        let furthest = |a: Option<SyncedClaim>, b: Option<SyncedClaim>| match (a, b) {
            (Some(a), Some(b)) => Some(if b.synced_lsn > a.synced_lsn { b } else { a }),
            (a, b) => a.or(b),
        };
        later = Some(match later {
            None => LaterObjects { count: 1, first_lsn: lsn, last_lsn: lsn, synced: claim },
            Some(seen) => LaterObjects {
                count: seen.count + 1,
                first_lsn: seen.first_lsn.min(lsn),
                last_lsn: seen.last_lsn.max(lsn),
                synced: furthest(seen.synced, claim),
            },
        });
    }
    later
}

/// The positions (multiples of 8) of `area` where an object header could start: the magic
/// there, and a whole header before the area's end.
fn magic_positions(area: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let last = area.len().saturating_sub(HEADER_LEN - 1);
    // A SIMD search for the magic (a 16 MiB area holds a few thousand objects; looking at
    // each of its two million word positions in turn was most of an open's time).
    memchr::memmem::find_iter(area, &OBJECT_MAGIC).filter(move |&position| position % 8 == 0 && position < last)
}

/// The lsn the header at `position` states, unchecked (SPEC.md §5: bytes 24..32).
fn raw_lsn(area: &[u8], position: usize) -> Option<u64> {
    let bytes = area.get(position + 24..position + 32)?;
    Some(u64::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7]]))
}

/// True when an object header of this area (intact: its checksum, volume uuid and position
/// check) with an lsn at or past `next_lsn` stands anywhere in it, valid object or not: a
/// leftover of a crashed session that the next appends, reusing its lsns, could revive
/// (SPEC.md §9.5).
pub fn headers_at_or_past(area: &[u8], context: &AreaContext, next_lsn: u64) -> bool {
    magic_positions(area).any(|position| {
        // The magic and the stated lsn first: parsing a header at every position of an area is
        // most of an open's time otherwise.
        if raw_lsn(area, position).is_none_or(|lsn| lsn < next_lsn) {
            return false;
        }
        let Some(bytes) = header_at(area, position as u64) else { return false };
        let found = ObjectHeader::parse_tolerant(bytes);
        let header = found.header;
        found.magic_ok
            && found.crc_ok
            && header.volume_uuid == context.volume_uuid
            && header.log_offset == position as u64
            && header.lsn >= next_lsn
    })
}
