//! Planning a rebase (`lds resize`, `lds device`): a new base version of the recovered tree,
//! with the chunks outside the usable slots rewritten.

use std::collections::BTreeSet;

use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::area_context;
use lds_format::version::payload::BaseVersion;
use lds_volume::{BlockDevice, DeviceError};

use super::source::{old_chain_ranges, read_entries, switch_numbers, Source};
use super::{InstancePlan, Run};

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
