//! The background thread: flushes frozen memtables to level-0 chunks and runs compactions.
//! It is the only thread that commits delta versions (SPEC.md §10.2) and frees slots.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;

use lds_format::batch::EntryKind;
use lds_format::chunk::{
    BuiltSubChunk, ChunkBuilder, ChunkIdentity, ChunkOptions, BLOCK_TRAILER_LEN, ENTRY_FIXED_LEN, INDEX_ENTRY_FIXED_LEN,
};
use lds_format::log::ObjectType;
use lds_format::version::{ChunkMeta, DeltaVersion, SubChunkRef};

use crate::db::{Shared, TreeState};
use crate::error::{Error, Result};
use crate::retention::Retention;

/// Starts the thread.
pub(crate) fn spawn(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("lds-background".into()).spawn(move || run(&shared))
}

/// True when a compaction should run now.
pub(crate) fn compaction_wanted(shared: &Shared, state: &TreeState) -> bool {
    next_plan(shared, state).is_some()
}

/// The next compaction: a step of a manual compaction first, then whatever is over its
/// limit.
fn next_plan(shared: &Shared, state: &TreeState) -> Option<crate::compaction::Plan> {
    if state.compaction_stalled {
        return None;
    }
    let limits = crate::compaction::limits(shared);
    state
        .manual_compaction
        .and_then(|level| crate::compaction::pick(&state.version, &limits, Some(level)))
        .or_else(|| crate::compaction::pick(&state.version, &limits, None))
}

/// One unit of background work: flush the frozen memtable, or run one compaction. Returns
/// the state lock again and whether anything was done.
pub(crate) fn step<'a>(shared: &'a Shared, mut state: MutexGuard<'a, TreeState>) -> (MutexGuard<'a, TreeState>, bool) {
    if state.poisoned.is_some() {
        return (state, false);
    }
    if let Some(frozen) = state.imm.as_ref().filter(|_| !state.space_full) {
        let table = Arc::clone(&frozen.table);
        let (backup_start, last_sequence) = (frozen.backup_start, frozen.last_sequence);
        drop(state);
        let result = flush_frozen(shared, &table, backup_start, last_sequence);
        state = shared.lock_state();
        match result {
            Ok(()) => {
                state.imm = None;
                state.backup_start_update = Some(backup_start);
            }
            Err(Error::SpaceFull { .. }) => state.space_full = true,
            Err(error) => {
                shared.poison(&mut state, error.poison_reason());
            }
        }
        shared.progress.notify_all();
        return (state, true);
    }
    if state.shutting_down {
        return (state, false);
    }
    if let Some(plan) = next_plan(shared, &state) {
        drop(state);
        let result = crate::compaction::compact(shared, &plan);
        state = shared.lock_state();
        match result {
            Ok(()) if plan.manual => state.manual_compaction = Some(plan.source_level + 1),
            Ok(()) => {}
            Err(Error::SpaceFull { .. }) => {
                state.compaction_stalled = true;
                state.manual_compaction = None;
            }
            Err(error) => {
                shared.poison(&mut state, error.poison_reason());
            }
        }
        shared.progress.notify_all();
        return (state, true);
    }
    if state.manual_compaction.take().is_some() {
        shared.progress.notify_all();
    }
    (state, false)
}

/// Runs every step there is to do, in the calling thread (`Options::background` false).
pub(crate) fn run_inline<'a>(shared: &'a Shared, mut state: MutexGuard<'a, TreeState>) -> MutexGuard<'a, TreeState> {
    loop {
        let (guard, worked) = step(shared, state);
        state = guard;
        if !worked {
            return state;
        }
    }
}

fn run(shared: &Shared) {
    let mut state = shared.lock_state();
    loop {
        if state.poisoned.is_some() {
            return;
        }
        let (guard, worked) = step(shared, state);
        state = guard;
        if worked {
            continue;
        }
        if state.shutting_down {
            return;
        }
        let (guard, waited) =
            shared.work.wait_timeout(state, LOG_BUFFER_AGE_MAX).unwrap_or_else(std::sync::PoisonError::into_inner);
        state = guard;
        if waited.timed_out() {
            // Idle: write out gathered backup log appends (lock order: writer, then state).
            drop(state);
            let drained = match shared.writer.try_lock() {
                Ok(mut writer) => writer.drain(shared.device.as_ref()),
                Err(_) => Ok(()),
            };
            state = shared.lock_state();
            if let Err(error) = drained {
                shared.poison(&mut state, error.to_string());
            }
        }
    }
}

/// Gathered unsynced appends reach the device at least this often.
const LOG_BUFFER_AGE_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// Writes a frozen memtable to level-0 chunks and commits them with the new backup start.
fn flush_frozen(
    shared: &Shared,
    table: &crate::memtable::MemTable,
    backup_start: (u64, u64),
    last_sequence: u64,
) -> Result<()> {
    let smallest_snapshot = smallest_snapshot(shared);
    let mut retention = Retention::new(smallest_snapshot);
    let entries = table.entries();
    // Tombstones stay in level 0: older versions may lie below.
    let kept = entries
        .iter()
        .filter(|(key, sequence, kind, _)| retention.keep(key, *sequence, *kind, |_| false))
        .map(|(key, sequence, kind, value)| (key.as_slice(), *sequence, *kind, value.as_slice()));
    let mut built = build_chunks(shared, kept);
    let placement = vec![(0u8, 0u8); built.len()];
    let added = write_chunks(shared, &mut built, &placement)?;
    // The chunks must be durable before the delta version that names them.
    #[cfg(not(feature = "fault-drop-chunk-flush"))]
    flush_device(shared)?;
    let mut state = shared.lock_state();
    let version = Arc::clone(&state.version);
    let delta = DeltaVersion {
        last_sequence: last_sequence.max(version.last_sequence),
        ofs_backup_start: backup_start.0,
        lsn_backup_start: backup_start.1,
        compaction_id: 0,
        deleted: Vec::new(),
        compact_pointers: Vec::new(),
        added,
    };
    commit(shared, &mut state, &delta, &[])
}

/// The sequence number every live snapshot sees.
pub(crate) fn smallest_snapshot(shared: &Shared) -> u64 {
    let state = shared.lock_state();
    state.snapshots.keys().next().copied().unwrap_or_else(|| shared.published.load(Ordering::Acquire))
}

pub(crate) fn flush_device(shared: &Shared) -> Result<()> {
    shared.device.flush().map_err(|error| Error::Poisoned { reason: error.to_string() })
}

/// Estimated bytes one key's versions add to a chunk, for the no-split rule.
fn group_len(key: &[u8], value_lens: &[usize], block_size: usize, bloom_bits_per_key: u32) -> usize {
    let data: usize = value_lens.iter().map(|value| ENTRY_FIXED_LEN + key.len() + value).sum();
    let blocks = 1 + data / block_size.max(1);
    data + blocks * (INDEX_ENTRY_FIXED_LEN + key.len() + BLOCK_TRAILER_LEN)
        + (bloom_bits_per_key as usize).div_ceil(8)
        + 1
}

/// Packs sorted entries into chunks, each filling at most one slot, never cutting between two
/// versions of one key unless they alone exceed a slot (SPEC.md §8.1 keeps a level's chunks
/// disjoint).
pub(crate) fn build_chunks<'a>(
    shared: &Shared,
    entries: impl Iterator<Item = (&'a [u8], u64, EntryKind, &'a [u8])>,
) -> Vec<BuiltSubChunk> {
    let options = ChunkOptions {
        slot_size: shared.geometry.slot_size,
        block_size: shared.options.block_size,
        bloom_bits_per_key: shared.options.bloom_bits_per_key,
    };
    let identity = ChunkIdentity {
        volume_uuid: shared.geometry.volume_uuid,
        instance: shared.instance,
        chunk_id: 0,
        sub_chunk_index: 0,
        num_sub_chunks: 1,
        level: 0,
        flags: 0,
    };
    let mut built = Vec::new();
    let mut builder = ChunkBuilder::new(options);
    let mut group: Vec<(&[u8], u64, EntryKind, &[u8])> = Vec::new();
    let flush_group = |builder: &mut ChunkBuilder,
                       group: &mut Vec<(&[u8], u64, EntryKind, &[u8])>,
                       built: &mut Vec<BuiltSubChunk>| {
        let Some(&(key, ..)) = group.first() else { return };
        let lens: Vec<usize> = group.iter().map(|entry| entry.3.len()).collect();
        let needed = group_len(key, &lens, options.block_size, options.bloom_bits_per_key);
        if !builder.is_empty() && builder.estimated_len() + needed > options.slot_size as usize {
            let full = std::mem::replace(builder, ChunkBuilder::new(options));
            built.extend(full.finish(identity));
        }
        for &(key, sequence, kind, value) in group.iter() {
            if !builder.add(key, sequence, kind, value) {
                // One key's versions exceed a slot: the only case that splits a key.
                let full = std::mem::replace(builder, ChunkBuilder::new(options));
                built.extend(full.finish(identity));
                let added = builder.add(key, sequence, kind, value);
                assert!(added, "an entry within the value limit always fits an empty slot");
            }
        }
        group.clear();
    };
    for entry in entries {
        if group.first().is_some_and(|first| first.0 != entry.0) {
            flush_group(&mut builder, &mut group, &mut built);
        }
        group.push(entry);
    }
    flush_group(&mut builder, &mut group, &mut built);
    built.extend(builder.finish(identity));
    built
}

/// Frees the slots deleted by past commits, oldest first, up to the first replaced version a
/// reader still holds: a reader of an old version may read any chunk a later commit deleted.
pub(crate) fn reclaim(shared: &Shared, state: &mut TreeState) {
    let mut tails = shared.tails.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut blocks = shared.blocks.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    while state.pending_free.first().is_some_and(|(version, _)| Arc::strong_count(version) == 1) {
        let (_, slots) = state.pending_free.remove(0);
        for slot in slots {
            state.online[slot as usize] = false;
            tails.remove(&slot);
            blocks.remove_slot(slot);
        }
    }
}

/// Threaded logging over the online map (SPEC.md §10.4).
fn allocate(shared: &Shared, state: &mut TreeState, count: u64) -> Result<Vec<u64>> {
    reclaim(shared, state);
    let num_slots = shared.geometry.num_slots;
    let mut found = Vec::new();
    let mut cursor = state.allocation_cursor;
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
        state.online[slot as usize] = true;
    }
    state.allocation_cursor = cursor;
    Ok(found)
}

/// Allocates a slot for each built chunk and writes it (not yet flushed); returns the
/// metadata of each at its level with its flags. On failure the slots are released.
pub(crate) fn write_chunks(
    shared: &Shared,
    built: &mut [BuiltSubChunk],
    placement: &[(u8, u8)],
) -> Result<Vec<ChunkMeta>> {
    let slots = allocate(shared, &mut shared.lock_state(), built.len() as u64)?;
    let mut metas = Vec::with_capacity(built.len());
    for ((chunk, &slot), &(level, flags)) in built.iter_mut().zip(&slots).zip(placement) {
        chunk.set_level_and_flags(level, flags);
        chunk.set_identity(slot, 0, 1);
        let offset = shared.geometry.slot_offset(slot);
        let tail = chunk.tail();
        let result = shared
            .device
            .write_at(offset, &chunk.body)
            .and_then(|()| shared.device.write_at(offset + shared.geometry.slot_size - tail.len() as u64, &tail));
        if let Err(error) = result {
            let mut state = shared.lock_state();
            for &slot in &slots {
                state.online[slot as usize] = false;
            }
            return Err(Error::Poisoned { reason: error.to_string() });
        }
        metas.push(ChunkMeta {
            chunk_id: slot,
            level,
            flags,
            num_entries: chunk.footer.num_entries,
            smallest_seq: chunk.footer.smallest_seq,
            largest_seq: chunk.footer.largest_seq,
            len_data: chunk.len_data(),
            smallest_key: chunk.first_key.clone(),
            largest_key: chunk.last_key.clone(),
            sub_chunks: vec![SubChunkRef { slot, digest: chunk.footer.digest }],
        });
    }
    Ok(metas)
}

/// Appends the delta version, or a new base version holding it when the version log needs a
/// trim (SPEC.md §10.3), makes it durable (the commit point), installs the new version, and
/// queues the deleted chunks' slots for freeing.
pub(crate) fn commit(
    shared: &Shared,
    state: &mut MutexGuard<'_, TreeState>,
    delta: &DeltaVersion,
    deleted: &[ChunkMeta],
) -> Result<()> {
    commit_as(shared, state, delta, deleted, false)
}

/// Raises the SN with a new base version of the current version (a trim, SPEC.md §10.3), so
/// that every backup log append after it carries an SN no object of an earlier session has:
/// a stale object of a crashed session standing after the head can then never continue the
/// chain (SPEC.md §9.1: an object with a smaller SN does not), whatever its lsn. Without it,
/// an unsynced batch that a crash cut from the chain came back once a new append of the same
/// length filled the gap before it (found by the repeated-crash enumeration).
pub(crate) fn raise_sn(shared: &Shared, state: &mut MutexGuard<'_, TreeState>) -> Result<()> {
    let version = Arc::clone(&state.version);
    let delta = DeltaVersion {
        last_sequence: version.last_sequence,
        ofs_backup_start: version.ofs_backup_start,
        lsn_backup_start: version.lsn_backup_start,
        compaction_id: 0,
        deleted: Vec::new(),
        compact_pointers: Vec::new(),
        added: Vec::new(),
    };
    commit_as(shared, state, &delta, &[], true)
}

fn commit_as(
    shared: &Shared,
    state: &mut MutexGuard<'_, TreeState>,
    delta: &DeltaVersion,
    deleted: &[ChunkMeta],
    force_base: bool,
) -> Result<()> {
    let mut next = (*state.version).clone();
    next.apply(delta).map_err(|error| Error::Recovery {
        path: shared.path_string(),
        instance: shared.instance,
        reason: format!("a new delta version contradicts the version: {error}"),
    })?;
    let delta_payload = delta.encode();
    let base_len = next.to_base(shared.geometry, shared.instance).encode().len();
    let ofs_area = state.version_log.context().ofs_area;
    // Trim while a base version still fits after this delta with room to grow: the next
    // commit's base is larger by what its delta adds.
    let base_reserve = base_len + base_len / 4 + delta_payload.len() + shared.geometry.sector_size as usize;
    let (object_type, sn, payload) = if !force_base && state.version_log.fits(&[delta_payload.len(), base_reserve]) {
        (ObjectType::DeltaVersion, state.sn, delta_payload)
    } else {
        (ObjectType::BaseVersion, state.sn + 1, next.to_base(shared.geometry, shared.instance).encode())
    };
    let pending = state
        .version_log
        .append(object_type, sn, &payload)
        .map_err(|error| Error::Unsupported { reason: format!("the version log cannot hold this tree: {error}") })?;
    // Recovery reaches the live base version through offset 0 (SPEC.md §9.2): when the log
    // wraps, the WOR must be durable before the WOL, and the WOL before anything overwrites
    // the start of the old chain (SPEC.md §10.1).
    for write in &pending {
        shared
            .device
            .write_at(ofs_area + write.offset, &write.bytes)
            .map_err(|error| Error::Poisoned { reason: error.to_string() })?;
        if write.object_type.is_wrap() {
            flush_device(shared)?;
        }
    }
    flush_device(shared)?;
    if object_type == ObjectType::BaseVersion {
        let last = pending.last().map(|write| (write.offset, write.lsn)).unwrap_or_default();
        state.version_log.set_live_start(last.0, last.1);
        state.version_log.set_sn(sn);
        state.sn = sn;
    }
    state.levels = Arc::new(crate::read::Levels::of(&next));
    let previous = std::mem::replace(&mut state.version, Arc::new(next));
    let slots = deleted.iter().flat_map(|chunk| chunk.slots().collect::<Vec<_>>()).collect();
    state.pending_free.push((previous, slots));
    state.compaction_stalled = false;
    state.commits += 1;
    reclaim(shared, state);
    Ok(())
}
