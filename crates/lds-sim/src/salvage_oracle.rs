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
//!   repaired volume, or repair's report names it. Stale entries salvage returns (values since
//!   overwritten, keys since deleted) are not that state's, so a correct repair, which does
//!   not read them, never fails this form; a repair that leaves a live chunk out does.

use std::collections::BTreeMap;

use lds_format::entry::EntryKind;
use lds_format::geometry::Geometry;
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

/// I10 for any input: every put of `before` (salvage of the damaged image) is in `after`
/// (salvage of the repaired image) at the same or a newer sequence, or among `lost`. Checked
/// only where both salvages read the same layout (a label with the same geometry): where
/// repair chose another label, the slots are not the same slots.
pub fn kept_for_salvage(before: &SalvageView, after: &SalvageView, lost: &[Lost]) -> Result<u64, String> {
    // Where repair chose another label (another geometry), the two salvages read other slots:
    // the caller sees 0 checked and may say so.
    if before.geometry.is_none() || before.geometry != after.geometry {
        return Ok(0);
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
    Ok(checked)
}

/// I10 where the state before the damage is known: every put of `before` (salvage of the
/// damaged image, instance 0 only: the workloads that know their state write one instance)
/// whose value is `live`'s for its key reads that value in `reads` (the engine on the
/// repaired volume), or `lost` names the key at that sequence or a newer one. `live` holds the keys
/// whose value no crash state of the run can change (those written before the last sync and
/// not after). Returns how many entries were held to it.
pub fn kept_live(before: &SalvageView, live: &Model, reads: &Model, lost: &[Lost]) -> Result<u64, String> {
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
        if reads.get(key) != Some(value) && !named {
            let read = reads.get(key).map_or("nothing".to_string(), |read| format!("a value of {} bytes", read.len()));
            return Err(format!(
                "I10: salvage of the damaged image reads key {} at sequence {sequence} with its live value ({} bytes); the repaired volume reads {read}, and the repair's report does not name it dropped",
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
