//! The online map (SPEC.md §9.4): allocation by threaded logging (§10.4), and freeing the
//! slots of deleted chunks once no reader holds a version that names them.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::state::TreeState;
use crate::table::cache::TableCache;

/// Frees the slots deleted by past commits, oldest first, up to the first replaced version a
/// reader still holds: a reader of an old version may read any chunk a later commit deleted.
pub(crate) fn reclaim(state: &mut TreeState, cache: &TableCache) {
    // Bounded by the commits not yet reclaimed; each iteration removes one.
    while state.pending_free.first().is_some_and(|(version, _)| Arc::strong_count(version) == 1) {
        let (_, slots) = state.pending_free.remove(0);
        for slot in slots {
            assert!(state.online[slot as usize], "slot {slot} freed twice");
            state.online[slot as usize] = false;
            cache.forget_slot(slot);
        }
    }
}

/// Takes `count` free slots by threaded logging over the online map (SPEC.md §10.4): a
/// cursor advancing in one direction, wrapping at the end; "space full" when one round
/// finds too few. The slots are marked in use before the caller writes into them.
pub(crate) fn allocate(state: &mut TreeState, cache: &TableCache, count: u64) -> Result<Vec<u64>> {
    reclaim(state, cache);
    let num_slots = state.online.len() as u64;
    let mut found = Vec::new();
    let mut cursor = state.allocation_cursor;
    // One round at most.
    for _ in 0..num_slots {
        if found.len() as u64 == count {
            break;
        }
        if !state.online[cursor as usize] {
            found.push(cursor);
        }
        cursor = (cursor + 1) % num_slots;
    }
    if (found.len() as u64) < count {
        return Err(Error::SpaceFull { needed: count, num_slots });
    }
    for &slot in &found {
        assert!(!state.online[slot as usize], "slot {slot} allocated while in use");
        state.online[slot as usize] = true;
    }
    state.allocation_cursor = cursor;
    Ok(found)
}

/// Returns slots taken by `allocate` whose chunks were never committed.
pub(crate) fn release(state: &mut TreeState, slots: &[u64]) {
    for &slot in slots {
        state.online[slot as usize] = false;
    }
}
