//! Committing a change to the tree (SPEC.md §10.2): its chunks written into newly allocated
//! slots (steps 1 and 2; the caller flushes them before the version that names them); one
//! delta version appended to the version log and flushed is the commit point; a base version replaces it when the log needs a trim
//! (§10.3). Then the new version is published and the deleted chunks' slots wait for their
//! readers to finish. A journaled compaction also appends its journal records here (§12):
//! each flushed before the inputs it cleans are reused, and appended again after any base
//! version written while the compaction is unfinished.

use std::sync::{Arc, MutexGuard};

use lds_format::algorithms::writer::AppendError;
use lds_format::chunk::builder::BuiltSubChunk;
use lds_format::log::ObjectType;
use lds_format::version::meta::ChunkMeta;
use lds_format::version::payload::{CompactionJournal, DeltaVersion};
use lds_format::version::Version;

use crate::error::{Error, Result};
use crate::slots::{allocate, reclaim, release, release_after};
use crate::state::{Release, Shared, TreeState};
use crate::version::published::{Published, Redirect};

/// Makes every completed write durable but the backup log's buffered appends (SPEC.md §2.5),
/// which is what a commit needs: its chunks and version log objects. The appends a crash
/// must not lose are synced ones, whose own flushes cover the whole backup log area; the
/// others are left in the page cache, where the next lap of the log or the memtable flush
/// that makes them obsolete finds them, and most never reach the device.
pub(crate) fn flush_device(shared: &Shared) -> Result<()> {
    shared.counters.device_flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (ofs_area, len_area) = shared.geometry.log_area(lds_format::geometry::LogKind::Backup, shared.instance);
    Ok(shared.device.flush_except(ofs_area, len_area)?)
}

/// Makes every completed write durable, the backup log's appends too: for a flush whose
/// chunks name batches in the backup log (TRIAD-LOG) or that wrote hot entries to it
/// (TRIAD-MEM), which must be durable before its delta version.
pub(crate) fn flush_device_and_log(shared: &Shared) -> Result<()> {
    shared.counters.device_flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(shared.device.flush()?)
}

/// Appends the delta version, or a new base version holding it when the version log needs a
/// trim (SPEC.md §10.3), makes it durable (the commit point), publishes the new version, and
/// queues the deleted chunks' slots for freeing.
pub(crate) fn commit(
    shared: &Shared,
    state: &mut MutexGuard<'_, TreeState>,
    delta: &DeltaVersion,
    deleted: &[ChunkMeta],
) -> Result<()> {
    let slots = deleted.iter().flat_map(|chunk| chunk.slots().collect::<Vec<_>>()).collect();
    commit_as(shared, state, delta, slots, false)
}

/// Commits a delta version and frees the given slots once it is durable and no reader holds
/// the version before it.
pub(crate) fn commit_slots(
    shared: &Shared,
    state: &mut MutexGuard<'_, TreeState>,
    delta: &DeltaVersion,
    freed: Vec<u64>,
) -> Result<()> {
    commit_as(shared, state, delta, freed, false)
}

/// Commits the final delta version of a merge: it deletes every input and adds every output
/// (with `delta.compaction_id` for a journaled one), ends the redirection of reads, and frees
/// the inputs' slots that no output reuses.
pub(crate) fn commit_merge(
    shared: &Shared,
    state: &mut MutexGuard<'_, TreeState>,
    delta: &DeltaVersion,
    inputs: &[ChunkMeta],
) -> Result<()> {
    let outputs: std::collections::BTreeSet<u64> = delta.added.iter().flat_map(ChunkMeta::slots).collect();
    // Cleaned slots still waiting for readers would go to a pool nobody uses any more: they
    // are freed instead, when their readers finish.
    let mut waiting = std::collections::BTreeSet::new();
    for (_, slots, release) in &mut state.pending_free {
        if *release == Release::CompactionPool {
            *release = Release::Free;
            waiting.extend(slots.iter().copied());
        }
    }
    state.compaction_pool.clear();
    let slots = inputs
        .iter()
        .flat_map(ChunkMeta::slots)
        .filter(|slot| !outputs.contains(slot) && !waiting.contains(slot))
        .collect();
    state.last_journal = None;
    commit_as(shared, state, delta, slots, false)
}

/// Raises the SN with a new base version of the current version (a trim, SPEC.md §10.3), so
/// that every backup log append after it carries an SN no object of an earlier session has:
/// a stale object of a crashed session standing after the head can then never continue the
/// chain (SPEC.md §9.1: an object with a smaller SN does not), whatever its lsn. Without it,
/// an unsynced batch that a crash cut from the chain came back once a new append of the same
/// length filled the gap before it (found by the repeated-crash enumeration).
pub(crate) fn raise_sn(shared: &Shared, state: &mut MutexGuard<'_, TreeState>) -> Result<()> {
    let version = Arc::clone(state.version());
    let delta = DeltaVersion {
        last_sequence: version.last_sequence,
        ofs_backup_start: version.ofs_backup_start,
        lsn_backup_start: version.lsn_backup_start,
        compaction_id: 0,
        deleted: Vec::new(),
        compact_pointers: Vec::new(),
        added: Vec::new(),
        values: None,
    };
    commit_as(shared, state, &delta, Vec::new(), true)
}

/// Gives the version `num_levels` levels (a forest uses all 16): levels only grow by a base
/// version (SPEC.md §6.1), written at once. Nothing when it has as many already, or while a
/// journaled compaction is unfinished (no base version may come then; the next open grows it).
pub(crate) fn grow_levels(shared: &Shared, state: &mut MutexGuard<'_, TreeState>, num_levels: u32) -> Result<()> {
    if state.version().num_levels >= num_levels || state.last_journal.is_some() {
        return Ok(());
    }
    let mut grown = (**state.version()).clone();
    grown.num_levels = num_levels;
    let previous = Arc::clone(&state.published);
    state.published = Arc::new(Published::new(Arc::new(grown), None));
    let raised = raise_sn(shared, state);
    if raised.is_err() {
        state.published = previous;
    }
    raised
}

fn version_log_full(shared: &Shared, error: &AppendError) -> Error {
    match error {
        AppendError::LsnExhausted { .. } => Error::Exhausted { what: "version log sequence numbers" },
        _ => Error::VersionLogFull { path: shared.path_string(), instance: shared.instance, reason: error.to_string() },
    }
}

/// Appends objects to the version log in order, each written and flushed before the next
/// (SPEC.md §10.1: the wrap order, and no two unflushed version log objects); returns the
/// position (offset, lsn) of the last.
fn append(shared: &Shared, state: &mut TreeState, objects: &[(ObjectType, u64, Vec<u8>)]) -> Result<(u64, u64)> {
    assert!(!shared.read_only, "a version log append on a read-only store");
    let ofs_area = state.version_log.context().ofs_area;
    let mut last = (0, 0);
    for (object_type, sn, payload) in objects {
        let pending =
            state.version_log.append(*object_type, *sn, payload).map_err(|error| version_log_full(shared, &error))?;
        for write in &pending {
            shared.device.write_at(ofs_area + write.offset, &write.bytes)?;
            // Recovery reaches the live base version through offset 0 (SPEC.md §9.2): when
            // the log wraps, the WOR must be durable before the WOL, and the WOL before
            // anything overwrites the start of the old chain (SPEC.md §10.1).
            if write.object_type.is_wrap() {
                flush_device(shared)?;
            }
        }
        flush_device(shared)?;
        if let Some(write) = pending.last() {
            last = (write.offset, write.lsn);
        }
        if *object_type == ObjectType::BaseVersion {
            state.version_log.set_live_start(last.0, last.1);
            state.version_log.set_sn(*sn);
            state.sn = *sn;
        }
    }
    Ok(last)
}

/// Bytes to keep free in front of the live region for a base version of the current
/// version, with room to grow and for the wrap objects (SPEC.md §10.3).
fn base_reserve(shared: &Shared, state: &TreeState) -> usize {
    let base_len = state.version().to_base(shared.geometry, shared.instance).encode().len();
    base_len + base_len / 4 + shared.geometry.sector_size as usize * 2
}

/// True when appends of these payload lengths leave room for a base version after them.
pub(crate) fn room_for(shared: &Shared, state: &TreeState, payloads: &[usize]) -> bool {
    let mut lens = payloads.to_vec();
    lens.push(base_reserve(shared, state));
    state.version_log.fits(&lens)
}

/// Writes a base version of the current version now (a trim, SPEC.md §10.3), to make room
/// before a journaled compaction starts.
pub(crate) fn trim(shared: &Shared, state: &mut MutexGuard<'_, TreeState>) -> Result<()> {
    raise_sn(shared, state)
}

fn commit_as(
    shared: &Shared,
    state: &mut MutexGuard<'_, TreeState>,
    delta: &DeltaVersion,
    freed: Vec<u64>,
    force_base: bool,
) -> Result<()> {
    let mut freed = freed;
    let delta = &with_values(shared, state.version(), delta, &mut freed);
    let mut next = (**state.version()).clone();
    next.apply(delta)
        .map_err(|error| Error::Invariant { what: format!("a new delta version contradicts the version: {error}") })?;
    // A journaled compaction's final delta ends its redirection; any other keeps it.
    let redirect = if delta.compaction_id != 0 { None } else { state.published.redirect.clone() };
    let published = Published::new(Arc::new(next), redirect);
    if let Some((first, second)) = published.levels.overlap() {
        return Err(Error::Invariant {
            what: format!(
                "a commit would make chunks {} and {} of level {} overlap",
                first.chunk_id, second.chunk_id, first.level
            ),
        });
    }
    let delta_payload = delta.encode();
    // Trim while a base version still fits after this delta with room to grow: the next
    // commit's base is larger by what its delta adds.
    let base_len = published.version.to_base(shared.geometry, shared.instance).encode().len();
    let reserve = base_len + base_len / 4 + delta_payload.len() + shared.geometry.sector_size as usize * 2;
    // Past half the area, a trim too (unless a journaled compaction is unfinished, when none
    // may come): an offline switch to a rebuilt base version (repair, resize, device changes,
    // SPEC.md §10.3) needs room outside the live region.
    let area = state.version_log.context().len_area;
    let within_half = state.last_journal.is_some()
        || state.version_log.live_len() + lds_format::log::HEADER_LEN as u64 + delta_payload.len() as u64 <= area / 2;
    let object = if !force_base && within_half && state.version_log.fits(&[delta_payload.len(), reserve]) {
        (ObjectType::DeltaVersion, state.sn, delta_payload)
    } else {
        // A base version while a journaled compaction is unfinished would end its journal
        // record's liveness; a crash before the record is appended again would leave a
        // version naming inputs whose slots hold its outputs (SPEC.md §10.3). The compaction
        // reserves room before it starts and finishes before any trim.
        if state.last_journal.is_some() {
            return Err(Error::Invariant {
                what: "a base version was due while a journaled compaction is unfinished".into(),
            });
        }
        (ObjectType::BaseVersion, state.sn + 1, published.version.to_base(shared.geometry, shared.instance).encode())
    };
    append(shared, state, &[object])?;
    let previous = std::mem::replace(&mut state.published, Arc::new(published));
    crate::logs::after_commit(state, &previous);
    release_after(state, previous, freed, Release::Free);
    state.compaction_stalled = false;
    state.commits += 1;
    reclaim(state, &shared.slots, &shared.cache);
    let published = Arc::clone(&state.published);
    repin(shared, &published);
    Ok(())
}

/// The delta with its value section on a volume with value chunks (SPEC.md §6.2, §8.6): the
/// id counter, and the deletion of every value chunk the change leaves without live bytes,
/// whose slot joins `freed`.
fn with_values(shared: &Shared, version: &Version, delta: &DeltaVersion, freed: &mut Vec<u64>) -> DeltaVersion {
    let mut delta = delta.clone();
    if !shared.value_chunks {
        return delta;
    }
    let mut values = delta.values.take().unwrap_or_default();
    let orphaned = version.orphaned_by(&delta.deleted, &delta.added);
    let moved = |id: &u64| values.added.iter().any(|chunk| chunk.value_chunk_id == *id);
    for id in orphaned {
        if !values.deleted.contains(&id) && !moved(&id) {
            values.deleted.push(id);
            freed.extend(version.value_chunks.get(&id).map(|chunk| chunk.slot));
        }
    }
    let added_max = values.added.iter().map(|chunk| chunk.value_chunk_id + 1).max().unwrap_or(0);
    values.next_value_chunk_id = values
        .next_value_chunk_id
        .max(version.next_value_chunk_id)
        .max(added_max)
        .max(shared.next_value_id.load(std::sync::atomic::Ordering::Acquire));
    delta.values = Some(values);
    delta
}

/// Level pinning (LSM-KVD): pins the tails of the chunks of levels below `pinned_levels` of
/// `published` (its version, and the outputs of an unfinished compaction), within
/// `pinned_bytes_max`, upper levels first. Never fails: a tail it cannot read stays
/// unpinned, and the commit that called it stands.
pub(crate) fn repin(shared: &Shared, published: &Published) {
    let levels = usize::from(shared.options.pinned_levels);
    if levels == 0 {
        return;
    }
    let mut wanted: Vec<lds_format::version::meta::SubChunkRef> = Vec::new();
    for chunks in published.levels.levels.iter().take(levels) {
        wanted.extend(chunks.iter().flat_map(|chunk| chunk.sub_chunks.iter().copied()));
    }
    if let Some(redirect) = &published.redirect {
        wanted.extend(
            redirect
                .outputs
                .iter()
                .filter(|chunk| usize::from(chunk.level) < levels)
                .flat_map(|chunk| chunk.sub_chunks.iter().copied()),
        );
    }
    shared.cache.pin(shared.device.as_ref(), &shared.geometry, &wanted, shared.options.pinned_bytes_max);
}

/// Appends a journal record of the running compaction and flushes it (SPEC.md §12): its
/// outputs are durable already. Then reads of keys up to its resume key go to the outputs,
/// and the inputs it newly cleans go to the compaction's pool once no reader of the version
/// before it remains. The caller made sure of the room (`room_for`): no trim happens here.
pub(crate) fn journal(
    shared: &Shared,
    state: &mut MutexGuard<'_, TreeState>,
    record: &CompactionJournal,
    newly_cleaned: Vec<u64>,
) -> Result<()> {
    let payload = record.encode();
    let sn = state.sn;
    append(shared, state, &[(ObjectType::CompactionJournal, sn, payload)])?;
    state.last_journal = Some(record.clone());
    let published = state.published.redirected(Redirect::of(record));
    let previous = std::mem::replace(&mut state.published, Arc::new(published));
    #[cfg(not(feature = "fault-clean-before-journal"))]
    release_after(state, previous, newly_cleaned, Release::CompactionPool);
    #[cfg(feature = "fault-clean-before-journal")]
    drop((previous, newly_cleaned));
    reclaim(state, &shared.slots, &shared.cache);
    let published = Arc::clone(&state.published);
    repin(shared, &published);
    Ok(())
}

/// Allocates a slot for each built chunk (from the running compaction's pool first, with
/// `pool`) and writes it (not yet flushed); returns the metadata of each at its level with
/// its flags. On failure the slots are released.
pub(crate) fn write_chunks(
    shared: &Shared,
    built: &mut [impl AsMut<BuiltSubChunk>],
    placement: &[(u8, u8)],
    pool: bool,
) -> Result<Vec<ChunkMeta>> {
    let slots = allocate(&mut shared.lock_state(), &shared.slots, &shared.cache, built.len() as u64, pool)?;
    let mut metas = Vec::with_capacity(built.len());
    for ((chunk, &slot), &(level, flags)) in built.iter_mut().zip(&slots).zip(placement) {
        let chunk = chunk.as_mut();
        let meta = lds_format::algorithms::pack::place(chunk, slot, level, flags);
        let offset = shared.geometry.slot_offset(slot);
        let tail = chunk.tail();
        let result = shared
            .device
            .write_at(offset, &chunk.body)
            .and_then(|()| shared.device.write_at(offset + shared.geometry.slot_size - tail.len() as u64, &tail));
        if let Err(error) = result {
            release(&shared.slots, &slots);
            return Err(error.into());
        }
        // Nothing of the slot's earlier chunk stays cached (admit_tail forgets it too).
        if level < shared.options.pinned_levels {
            shared.cache.admit_tail(&shared.geometry, slot, &chunk.footer, &chunk.tail_without_footer);
        } else {
            shared.cache.forget_slot(slot);
        }
        metas.push(meta);
    }
    Ok(metas)
}
