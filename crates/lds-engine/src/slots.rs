//! The online map (SPEC.md §9.4): allocation by threaded logging (§10.4), and freeing the
//! slots of deleted chunks once no reader holds a published version that may read them.
//! Slots of inputs a journaled compaction cleaned early (§12) go to that compaction's own
//! pool instead: only its later outputs reuse them before its final commit, so that a flush
//! committed meanwhile never adds a chunk on a slot the version still names.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::state::{Release, SlotMap, TreeState};
use crate::table::cache::TableCache;
use crate::version::published::Published;

fn lock(slots: &Mutex<SlotMap>) -> MutexGuard<'_, SlotMap> {
    slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Frees or pools the slots deleted or cleaned by past commits, oldest first, up to the first
/// replaced version a reader still holds.
pub(crate) fn reclaim(state: &mut TreeState, slots: &Mutex<SlotMap>, cache: &TableCache) {
    // Bounded by the commits not yet reclaimed; each iteration removes one.
    while state.pending_free.first().is_some_and(|(published, _, _)| Arc::strong_count(published) == 1) {
        let (_, freed, release) = state.pending_free.remove(0);
        let mut map = lock(slots);
        for slot in freed {
            assert!(map.online[slot as usize], "slot {slot} freed twice");
            cache.forget_slot(slot);
            match release {
                Release::Free => {
                    map.online[slot as usize] = false;
                    map.slots_in_use -= 1;
                    state.uncached.push(slot);
                }
                Release::CompactionPool => state.compaction_pool.push(slot),
            }
        }
    }
}

/// Queues slots to be released when no reader holds `published` (the version replaced).
pub(crate) fn release_after(state: &mut TreeState, published: Arc<Published>, slots: Vec<u64>, release: Release) {
    if !slots.is_empty() {
        state.pending_free.push((published, slots, release));
    }
}

/// Takes `count` free slots by threaded logging over the online map (SPEC.md §10.4): a
/// cursor advancing in one direction, wrapping at the end; "space full" when one round
/// finds too few. With `pool`, the compaction's own pool is used first. The slots are marked
/// in use before the caller writes into them.
pub(crate) fn allocate(
    state: &mut TreeState,
    slots: &Mutex<SlotMap>,
    cache: &TableCache,
    count: u64,
    pool: bool,
) -> Result<Vec<u64>> {
    reclaim(state, slots, cache);
    let mut found = Vec::new();
    if pool {
        let take = (count as usize).min(state.compaction_pool.len());
        found.extend(state.compaction_pool.drain(..take));
    }
    let mut map = lock(slots);
    let num_slots = map.online.len() as u64;
    let mut cursor = map.cursor;
    let mut fresh = Vec::new();
    // One round at most.
    for _ in 0..num_slots {
        if (found.len() + fresh.len()) as u64 == count {
            break;
        }
        if !map.online[cursor as usize] {
            fresh.push(cursor);
        }
        cursor = (cursor + 1) % num_slots;
    }
    if ((found.len() + fresh.len()) as u64) < count {
        state.compaction_pool.extend(found);
        return Err(Error::SpaceFull { needed: count, num_slots });
    }
    for &slot in &fresh {
        assert!(!map.online[slot as usize], "slot {slot} allocated while in use");
        map.online[slot as usize] = true;
    }
    map.slots_in_use += fresh.len() as u64;
    map.slots_in_use_peak = map.slots_in_use_peak.max(map.slots_in_use);
    map.cursor = cursor;
    found.extend(fresh);
    Ok(found)
}

/// Returns slots taken by `allocate` whose chunks were never committed.
pub(crate) fn release(slots: &Mutex<SlotMap>, taken: &[u64]) {
    let mut map = lock(slots);
    for &slot in taken {
        map.online[slot as usize] = false;
    }
    map.slots_in_use -= taken.len() as u64;
}
