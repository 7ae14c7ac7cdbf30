//! Oracle I10 (docs/reliability.md): repair never loses what salvage can read. `lds salvage`
//! of the damaged image gives, per instance and key, the newest entry it can read (a put
//! with its value, or a delete). Repair is held to two sets of those entries:
//!
//! - [`kept_for_salvage`], for any input: each put salvage of the damaged image returns at
//!   sequence s is returned by salvage of the repaired image at a sequence of at least s (the
//!   same entry, or a newer put or delete), or repair's report names it among the entries it
//!   drops. Sound whatever the input: salvage reads the same slots and the same backup log
//!   areas in both images, and repair never writes a backup log area, so an entry can only
//!   go missing where repair wrote over the slot (chunk or value chunk) salvage read it from
//!   without keeping that entry, or a newer one, anywhere. Entries of stale chunks in free
//!   slots (keys overwritten or deleted since) count too: repair must not write over them
//!   unless the rebuilt tree holds a newer entry of each of their keys.
//! - [`kept_live`], where the state before the damage is known (the sweep, the crash
//!   workload, the tests): each put salvage of the damaged image returns whose value is
//!   the key's live value in that state (and was in every state a crash could have left, so
//!   that damage that reads as a crash may roll it back) is read by the engine from the
//!   repaired volume at that sequence or a newer one (the volume's tree and replayed batches
//!   give the sequences, so a key rewritten with the same bytes is not kept by its older
//!   copy), or repair's report names it. Stale entries salvage returns (values since
//!   overwritten, keys since deleted) are not that state's, so a correct repair, which does
//!   not read them, never fails this form; a repair that leaves a live chunk out does.

use std::collections::BTreeMap;

use lds_format::algorithms::instance::{recover_instance, BackupRecovery};
use lds_format::batch::decode_entries;
use lds_format::chunk::view::SubChunkView;
use lds_format::entry::EntryKind;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::{area_context, read_object};
use lds_repair::salvage::{salvage, Newest};
use lds_repair::{FixState, Lost, RepairReport};

use crate::sim_device::SimDevice;
use crate::workload::Model;

/// What salvage reads from an image.
#[derive(Debug, Clone, Default)]
pub struct SalvageView {
    /// The geometry of the label salvage used (`None`: it found the slots from footers).
    pub geometry: Option<Geometry>,
    /// Per instance, each key's newest entry.
    pub keys: BTreeMap<u32, BTreeMap<Vec<u8>, Newest>>,
}

/// Salvage of `image` (nothing found: an empty view).
pub fn salvage_image(image: &[u8]) -> Result<SalvageView, String> {
    match salvage(&SimDevice::new(image.to_vec()), &mut |_, _| {}) {
        Ok(salvaged) => Ok(SalvageView { geometry: salvaged.geometry, keys: salvaged.keys }),
        Err(lds_repair::salvage::SalvageError::NothingFound { .. }) => Ok(SalvageView::default()),
        Err(error) => Err(format!("salvage: {error}")),
    }
}

/// The ranges of entries the fixes of a report drop: the applied ones, or under `-n` the
/// planned ones (a report has one kind or the other).
pub fn lost_ranges(report: &RepairReport) -> Vec<Lost> {
    report
        .fixes
        .iter()
        .filter(|fix| matches!(fix.state, FixState::Applied | FixState::Planned))
        .flat_map(|fix| fix.dropped.iter().flat_map(|dropped| dropped.lost.iter().cloned()))
        .collect()
}

fn reported(lost: &[Lost], instance: u32, key: &[u8], sequence: u64) -> bool {
    lost.iter().any(|range| range.covers(instance, key, sequence))
}

fn show(key: &[u8]) -> String {
    lds_format::codec::display_key(key)
}

/// What [`kept_for_salvage`] held repair to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// This many puts of salvage of the damaged image, each kept or named dropped.
    Checked(u64),
    /// Nothing, and why: the two salvages do not read the same slots (no label, or another
    /// geometry), so the oracle does not apply. Not a pass: the caller counts or reports it.
    NotCompared(String),
}

impl Held {
    /// The puts checked (0 where nothing was compared).
    pub fn checked(&self) -> u64 {
        match self {
            Self::Checked(count) => *count,
            Self::NotCompared(_) => 0,
        }
    }
}

/// I10 for any input: every put of `before` (salvage of the damaged image) is in `after`
/// (salvage of the repaired image) at the same or a newer sequence, or among `lost`. Checked
/// only where both salvages read the same layout (a label with the same geometry): where
/// repair chose another label, the slots are not the same slots, and the answer says so.
pub fn kept_for_salvage(before: &SalvageView, after: &SalvageView, lost: &[Lost]) -> Result<Held, String> {
    // Where repair chose another label (another geometry), the two salvages read other slots.
    let Some(geometry) = before.geometry else {
        return Ok(Held::NotCompared("salvage of the damaged image found no label (it read chunk footers)".into()));
    };
    if after.geometry != Some(geometry) {
        let after = match after.geometry {
            Some(other) => format!(
                "another geometry ({} slots of {} bytes from offset {}, the damaged image's {} of {} from {})",
                other.num_slots,
                other.slot_size,
                other.ofs_slot_area,
                geometry.num_slots,
                geometry.slot_size,
                geometry.ofs_slot_area
            ),
            None => "no label".into(),
        };
        return Ok(Held::NotCompared(format!("salvage of the repaired image reads {after}: other slots")));
    }
    let mut checked = 0;
    for (instance, keys) in &before.keys {
        let later = after.keys.get(instance);
        for (key, (sequence, kind, _)) in keys {
            if *kind != EntryKind::Put {
                continue;
            }
            checked += 1;
            let kept = later.and_then(|later| later.get(key)).is_some_and(|(found, _, _)| found >= sequence);
            if !kept && !reported(lost, *instance, key, *sequence) {
                let found = later
                    .and_then(|later| later.get(key))
                    .map_or("nothing".to_string(), |(found, kind, _)| format!("{kind:?} at sequence {found}"));
                return Err(format!(
                    "I10: salvage of the damaged image reads instance {instance} key {} at sequence {sequence}; after the repair it reads {found}, and the repair's report does not name it dropped",
                    show(key)
                ));
            }
        }
    }
    Ok(Held::Checked(checked))
}

/// The newest sequence number of each key of instance 0 that the volume in `image` reads:
/// over the entries of every chunk of its recovered version and of the backup log batches
/// recovery replays (what the engine reads from, SPEC.md §9). An error where the image does
/// not recover (a repaired volume must).
pub fn held_sequences(image: &[u8]) -> Result<BTreeMap<Vec<u8>, u64>, String> {
    let device = SimDevice::new(image.to_vec());
    let labels = lds_volume::read_labels(&device).map_err(|error| format!("labels: {error}"))?;
    let (_, label) = labels.choose().map_err(|error| format!("no label to choose: {error:?}"))?;
    let geometry = label.geometry;
    let area = |kind| {
        let (offset, len) = geometry.log_area(kind, 0);
        image
            .get(offset as usize..(offset + len) as usize)
            .ok_or_else(|| format!("the {kind:?} log area is past the image"))
    };
    let (version_area, backup_area) = (area(LogKind::Version)?, area(LogKind::Backup)?);
    let recovery = recover_instance(&geometry, 0, version_area, backup_area).map_err(|error| error.to_string())?;
    let mut newest: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut note = |key: &[u8], sequence: u64| {
        let held = newest.entry(key.to_vec()).or_insert(sequence);
        *held = (*held).max(sequence);
    };
    // Bounded by the version's chunks and their sub-chunks.
    for chunk in recovery.version_log.version.chunks.values() {
        for slot in chunk.slots() {
            let offset = geometry.slot_offset(slot);
            let bytes = image
                .get(offset as usize..(offset + geometry.slot_size) as usize)
                .ok_or_else(|| format!("chunk {} names slot {slot}, past the image", chunk.chunk_id))?;
            let view = SubChunkView::open(bytes, offset).map_err(|error| error.to_string())?;
            for entry in view.entries(offset).map_err(|error| error.to_string())? {
                note(entry.key, entry.sequence);
            }
        }
    }
    let BackupRecovery::Recovered { state, .. } = &recovery.backup else {
        return Err(format!("the backup log does not recover: {:?}", recovery.backup));
    };
    let context = area_context(&geometry, LogKind::Backup, 0);
    for batch in &state.batches {
        let raw = read_object(backup_area, batch.offset, &context).map_err(|error| error.to_string())?;
        let mut sequence = batch.first_sequence;
        decode_entries(raw.payload, context.ofs_area + batch.offset, |_, key, _| {
            note(key, sequence);
            sequence += 1;
        })
        .map_err(|error| error.to_string())?;
    }
    Ok(newest)
}

/// I10 where the state before the damage is known: every put of `before` (salvage of the
/// damaged image, instance 0 only: the workloads that know their state write one instance)
/// whose value is `live`'s for its key is held by the repaired volume at that sequence or a
/// newer one (`held`, from [`held_sequences`]) and reads that value in `reads` (the engine on
/// the repaired volume), or `lost` names the key at that sequence or a newer one. Sequences,
/// not values alone, decide: a key rewritten with the same bytes is not kept by its older
/// copy. `live` holds the keys whose value no crash state of the run can change (those
/// written before the last sync and not after). Returns how many entries were held to it.
pub fn kept_live(
    before: &SalvageView,
    live: &Model,
    reads: &Model,
    held: &BTreeMap<Vec<u8>, u64>,
    lost: &[Lost],
) -> Result<u64, String> {
    let Some(keys) = before.keys.get(&0) else { return Ok(0) };
    let mut checked = 0;
    for (key, (sequence, kind, value)) in keys {
        if *kind != EntryKind::Put || live.get(key) != Some(value) {
            continue;
        }
        checked += 1;
        // A value written twice with the same bytes: salvage may read the older copy (a stale
        // chunk) while the live entry is newer; a drop of the newer entry names the loss.
        let named = lost.iter().any(|range| range.covers_at_or_after(0, key, *sequence));
        let at = held.get(key).copied();
        if (reads.get(key) != Some(value) || at.is_none_or(|at| at < *sequence)) && !named {
            let read = reads.get(key).map_or("nothing".to_string(), |read| format!("a value of {} bytes", read.len()));
            let at = at.map_or("no entry".to_string(), |at| format!("its newest entry at sequence {at}"));
            return Err(format!(
                "I10: salvage of the damaged image reads key {} at sequence {sequence} with its live value ({} bytes); the repaired volume reads {read} ({at}), and the repair's report does not name it dropped",
                show(key),
                value.len()
            ));
        }
    }
    Ok(checked)
}

/// The keys whose value is the same in every one of `states` (the model states a crash may
/// leave: from the last synced operation to the last one issued).
pub fn stable(states: &[Model]) -> Model {
    let Some((last, earlier)) = states.split_last() else { return Model::new() };
    last.iter()
        .filter(|(key, value)| earlier.iter().all(|state| state.get(*key) == Some(*value)))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(volume_len: u64) -> Geometry {
        let request =
            lds_format::geometry::LayoutRequest { volume_len, slot_size: Some(64 << 10), ..Default::default() };
        lds_format::geometry::plan_layout(&request, [3; 16]).unwrap_or_else(|error| panic!("{error}"))
    }

    fn view(geometry: Option<Geometry>, keys: &[(&str, u64)]) -> SalvageView {
        let keys = keys
            .iter()
            .map(|(key, sequence)| (key.as_bytes().to_vec(), (*sequence, EntryKind::Put, b"v".to_vec())))
            .collect();
        SalvageView { geometry, keys: BTreeMap::from([(0, keys)]) }
    }

    /// Where the two salvages read other layouts the oracle says it compared nothing and why,
    /// instead of passing with 0 entries checked.
    #[test]
    fn another_layout_is_reported_not_passed() {
        let (small, large) = (geometry(16 << 20), geometry(32 << 20));
        let before = view(Some(small), &[("a", 5), ("b", 6)]);
        let held = kept_for_salvage(&before, &view(Some(small), &[("a", 5), ("b", 7)]), &[]);
        assert_eq!(held, Ok(Held::Checked(2)));
        let lost = kept_for_salvage(&before, &view(Some(small), &[("a", 5)]), &[]);
        assert!(lost.as_ref().is_err_and(|error| error.contains("\"b\"")), "{lost:?}");
        let named = kept_for_salvage(&before, &view(Some(small), &[("a", 5)]), &[Lost::entry(0, b"b", 6)]);
        assert_eq!(named, Ok(Held::Checked(2)));
        let other = kept_for_salvage(&before, &view(Some(large), &[]), &[]);
        assert!(matches!(&other, Ok(Held::NotCompared(why)) if why.contains("another geometry")), "{other:?}");
        let none = kept_for_salvage(&view(None, &[("a", 5)]), &view(None, &[]), &[]);
        assert!(matches!(&none, Ok(Held::NotCompared(why)) if why.contains("no label")), "{none:?}");
        assert_eq!(none.map(|held| held.checked()), Ok(0));
    }

    /// A key written twice with the same bytes (sequences 5 and 9): salvage reads the newer
    /// put; a repaired volume that reads the same bytes from the older one lost the newer.
    #[test]
    fn the_live_form_compares_sequences_not_values_alone() {
        let before = view(None, &[("a", 9)]);
        let live: Model = BTreeMap::from([(b"a".to_vec(), b"v".to_vec())]);
        let reads = live.clone();
        let older = BTreeMap::from([(b"a".to_vec(), 5)]);
        let failed = kept_live(&before, &live, &reads, &older, &[]);
        assert!(failed.as_ref().is_err_and(|error| error.contains("sequence 5")), "{failed:?}");
        assert_eq!(kept_live(&before, &live, &reads, &older, &[Lost::entry(0, b"a", 9)]), Ok(1));
        for at in [9, 12] {
            assert_eq!(kept_live(&before, &live, &reads, &BTreeMap::from([(b"a".to_vec(), at)]), &[]), Ok(1));
        }
        // Held at the sequence but reading other bytes: still lost.
        let other: Model = BTreeMap::from([(b"a".to_vec(), b"w".to_vec())]);
        let newer = BTreeMap::from([(b"a".to_vec(), 9)]);
        assert!(kept_live(&before, &live, &other, &newer, &[]).is_err());
        assert!(kept_live(&before, &live, &reads, &BTreeMap::new(), &[]).is_err(), "no entry at all");
    }
}
