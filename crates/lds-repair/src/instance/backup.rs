//! The backup log's batches a rebuild keeps (those recovery replays, before any damage),
//! and what it drops past them.

use std::collections::BTreeSet;

use lds_check::Code;
use lds_format::algorithms::instance::{BackupRecovery, ChainEndVerdict, InstanceRecovery};
use lds_format::algorithms::recovery::{recover_backup_log_prefix, Payload, ReplayBatch, VersionLogError};
use lds_format::algorithms::salvage::valid_objects;
use lds_format::batch::decode_entries;
use lds_format::entry::Entry;
use lds_format::log::{read_object, AreaContext, HEADER_LEN};
use lds_format::version::Version;

use crate::dropped::{Dropped, KeyFrom, Lost};
use crate::Fix;

use super::source::Source;

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

/// The problem of a recovered instance whose backup log replay cannot start at the version's
/// start point (its object is not valid, or has a newer lsn) or breaks off, and the last
/// sequence number the replay reaches: the version may be older than the log.
pub(super) fn backup_behind(recovery: &Result<InstanceRecovery, VersionLogError>) -> Option<(Code, u64)> {
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

/// The backup log's batches to keep (those recovery replays, before any damage), where it
/// ends, and the fixes its damage needs.
pub(super) fn backup_batches(
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
            let later =
                later_batches(&source.backup_area, context, kept_until(&batches, recorded.1), floor, BelowFloor::Held);
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
                            BelowFloor::Named,
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
                    BelowFloor::Named,
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
                later_batches(
                    &source.backup_area,
                    context,
                    recorded.1.saturating_sub(1),
                    version.last_sequence,
                    BelowFloor::Named,
                ),
            )]);
            (Vec::new(), None, vec![fix])
        }
    }
}

/// The lsn of the last batch kept, or the one before `lsn_start` when none is.
fn kept_until(kept: &[ReplayBatch], lsn_start: u64) -> u64 {
    kept.last().map_or(lsn_start.saturating_sub(1), |batch| batch.lsn)
}

/// The sequence number after the last batch of `batches` (0 without any).
fn reach(batches: &[ReplayBatch]) -> u64 {
    batches.last().map_or(0, |batch| batch.first_sequence + u64::from(batch.num_entries))
}

/// What the entries of a dropped batch at or below the floor (the sequence numbers a repair
/// keeps) are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BelowFloor {
    /// Held by the free slots' chunks (versions were lost and the floor is the newest
    /// sequence those chunks hold): not named.
    Held,
    /// Nothing says they are held: a batch later in the log than those kept whose sequence
    /// numbers do not lie above theirs has a damaged `first_sequence` (or is a stale tail),
    /// and salvage reads its entries at the numbers it gives, so they are named, from its
    /// first sequence number on.
    Named,
}

/// The entries of the valid batches of a backup log area later than lsn `after` (past what
/// a repair keeps of the log), one range per batch: what `lds salvage` still reads there that
/// restarting the backup log drops. Those at or below sequence `floor` are named or not as
/// `below` says.
fn later_batches(area: &[u8], context: &AreaContext, after: u64, floor: u64, below: BelowFloor) -> Vec<Lost> {
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
            let smallest_seq = match below {
                BelowFloor::Held => first_sequence.max(floor + 1),
                BelowFloor::Named => first_sequence,
            };
            if sequence - 1 > floor || below == BelowFloor::Named {
                lost.push(Lost {
                    instance: context.instance,
                    from: KeyFrom::Key(low),
                    through: Some(high),
                    smallest_seq,
                    largest_seq: sequence - 1,
                });
            }
        }
    }
    lost
}

/// The entries of the backup log's kept `batches` above `version`'s last sequence, but those
/// the free slots' chunks hold (`extra`: they were flushed from these batches); where versions
/// were lost, also those up to `known` of the other valid batches (what a damaged chunk in a
/// free slot lost, a batch of the log may still hold).
pub(super) fn logged_entries(
    source: &Source,
    context: &AreaContext,
    batches: &[ReplayBatch],
    version: &Version,
    lost: bool,
    known: u64,
    extra: &[Entry],
) -> Vec<Entry> {
    // Entries both hold once (the free slots' chunks were flushed from these batches).
    let in_slots: BTreeSet<u64> = extra.iter().map(|entry| entry.sequence).collect();
    let mut logged = batch_entries(&source.backup_area, context, batches, version.last_sequence);
    if lost {
        // The sequence numbers up to `known` are taken to be in the free slots' chunks; those
        // a damaged chunk there lost, a valid batch of the log may still hold.
        let chosen: BTreeSet<u64> = batches.iter().map(|batch| batch.offset).collect();
        let holes: Vec<ReplayBatch> = valid_objects(&source.backup_area, context)
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
        let mut found = batch_entries(&source.backup_area, context, &holes, version.last_sequence);
        found.retain(|entry| entry.sequence <= known);
        logged.extend(found);
    }
    logged.retain(|entry| !in_slots.contains(&entry.sequence));
    logged
}

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::batch::{BatchEntry, WriteBatchRecord};
    use lds_format::entry::EntryKind;
    use lds_format::geometry::LogKind;
    use lds_format::log::{area_context, encode_object, NewObject, ObjectType};

    /// `lds-hostile`'s `wrapped:blog.wb.first_sequence=cycle`: the batch after the one kept
    /// (lsn 5, sequences 10 and 11) has its first sequence set to the kept one's, so that
    /// its entries ("k3", "k4") read at sequences 10 and 11, at or below what repair keeps.
    /// Salvage reads them there; the drop names them.
    #[test]
    fn a_dropped_batch_at_or_below_the_floor_is_named_unless_held() {
        let request = lds_format::geometry::LayoutRequest {
            volume_len: 16 << 20,
            slot_size: Some(64 << 10),
            ..Default::default()
        };
        let geometry = lds_format::geometry::plan_layout(&request, [4; 16]).unwrap_or_else(|error| panic!("{error}"));
        let context = area_context(&geometry, LogKind::Backup, 0);
        let mut area = vec![0u8; context.len_area as usize];
        let mut offset = 512u64;
        for (lsn, first_sequence, keys) in
            [(5u64, 10u64, ["k1", "k2"]), (6, 10, ["k3", "k4"]), (7, 12, ["k5", "k6"]), (3, 1, ["k0", "k00"])]
        {
            let entries = keys
                .iter()
                .map(|key| BatchEntry { kind: EntryKind::Put, key: key.as_bytes().to_vec(), value: b"v".to_vec() })
                .collect();
            let batch = WriteBatchRecord { first_sequence, entries, synced_lsn_low: 0 };
            let object = NewObject {
                object_type: ObjectType::WriteBatch,
                kind: LogKind::Backup,
                instance: 0,
                sn: 1,
                lsn,
                log_offset: offset,
                volume_uuid: geometry.volume_uuid,
            };
            let bytes = encode_object(&object, &batch.encode());
            area[offset as usize..offset as usize + bytes.len()].copy_from_slice(&bytes);
            offset = lds_format::codec::align8(offset + bytes.len() as u64);
        }
        let named = later_batches(&area, &context, 5, 11, BelowFloor::Named);
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(named[0].covers(0, b"k3", 10) && named[0].covers(0, b"k4", 11), "{named:?}");
        assert!(named[1].covers(0, b"k5", 12) && named[1].covers(0, b"k6", 13), "{named:?}");
        assert!(!named.iter().any(|lost| lost.covers(0, b"k1", 10) || lost.covers(0, b"k0", 1)), "{named:?}");
        // Where the free slots hold every sequence up to the floor, only what lies above it.
        let held = later_batches(&area, &context, 5, 11, BelowFloor::Held);
        assert_eq!(held.len(), 1, "{held:?}");
        assert!(held[0].covers(0, b"k5", 12) && !held[0].covers(0, b"k3", 10), "{held:?}");
    }
}
