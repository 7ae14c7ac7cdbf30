//! Reading the free slots: the data newer than a version that chunks there hold (a version
//! log that lost versions), and where chunks a version names with contradicting metadata lie.

use std::collections::BTreeSet;

use lds_format::algorithms::salvage::salvage_sub_chunk;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::entry::Entry;
use lds_format::geometry::Geometry;
use lds_format::version::Version;
use lds_volume::block::read_tolerant;
use lds_volume::{BlockDevice, DeviceError};

use crate::dropped::{Dropped, KeyFrom, Lost};
use crate::{FixClass, RepairError};

use super::backup::backup_behind;
use super::rebuild::{version_code, Rebuild};
use super::sequence_range;
use super::source::Source;

/// What free slots hold above a version's last sequence.
struct NewerInFreeSlots {
    /// The entries (data the lost versions had committed).
    pub(super) entries: Vec<Entry>,
    /// The slots of the chunks that hold the newest version of some key among them: kept
    /// until the repair's switch.
    pub(super) sources: BTreeSet<u64>,
    /// The slots of the others, whose every entry those supersede: free for the repair's
    /// writes.
    pub(super) superseded: BTreeSet<u64>,
    /// The damaged stretches of those chunks, each with the keys it held.
    pub(super) dropped: Vec<Dropped>,
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

/// The data newer than `version` that the free slots hold, where the version log lost versions
/// (`lost`) or the version is behind its backup log: the entries and the slots to keep until
/// the switch, in a fix of `rebuild`; and whether versions count as lost (a version behind its
/// log whose free slots hold nothing past what the log replays follows the log alone).
pub(super) fn newer_data(
    rebuild: &mut Rebuild<'_>,
    source: &Source,
    version: &Version,
    lost: bool,
    old_slots: &BTreeSet<u64>,
) -> Result<(Vec<Entry>, BTreeSet<u64>, bool), RepairError> {
    let mut lost = lost;
    // Where versions were lost, the data newer than the version that free slots hold. A
    // version whose backup log replay cannot start (its start object gone, or newer) or
    // breaks off may be older than the log too, its newest delta versions lost as a crash
    // would have lost them but with the batches they flushed since written over or damaged:
    // then the free slots hold what those versions had, past what the log replays.
    let behind = backup_behind(&source.recovery);
    let mut newer = if lost || behind.is_some() {
        newer_in_free_slots(rebuild.device, rebuild.geometry, rebuild.instance, version.last_sequence, old_slots)?
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
    Ok((extra, source_slots, lost))
}
