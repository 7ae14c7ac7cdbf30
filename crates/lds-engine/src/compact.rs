//! Running a compaction on the store (LevelDB's leveled strategy, on LDS slots): the
//! `compaction` module chooses and merges; `step` writes the outputs and commits. A trivial
//! move is one delta version. A merge whose inputs span at least
//! `Options::journal_min_input_slots` slots is journaled (SifrDB §4.2, SPEC.md §12): it runs
//! in steps of `Options::journal_every_outputs` outputs; after each, one flush makes the
//! step's outputs durable (NobLSM: no flush per output), a journal record names them with the
//! resume key, and the inputs entirely at or below it are cleaned early, their slots reused by
//! the merge's later outputs. A crash leaves the record; the next open redirects reads by it
//! and resumes the merge from the resume key. The final delta version deletes every input and
//! adds every output.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use lds_format::version::meta::{ChunkMeta, CHUNK_FLAG_ODD};
use lds_format::version::payload::{DeletedChunk, DeltaVersion};

use crate::commit::{commit, commit_merge, flush_device, journal, room_for, trim, write_chunks};
use crate::compaction::merge::{delta_estimate, MergeContext, Merger, Relocation};
use crate::compaction::pick::{self, Plan};
use crate::error::Result;
use crate::state::Shared;
use crate::table::build::chunk_format;

fn deleted_of(chunks: &[ChunkMeta]) -> Vec<DeletedChunk> {
    chunks.iter().map(|chunk| DeletedChunk { chunk_id: chunk.chunk_id, level: chunk.level }).collect()
}

/// Commits a trivial move (paper §2.1 footnote 1): the chunks change level, not slot.
pub(crate) fn trivial_move(shared: &Shared, plan: &Plan) -> Result<()> {
    if let Some(walks) = shared.counters.level_walks.get(usize::from(plan.source_level)) {
        walks.store(0, Ordering::Relaxed);
    }
    let flushes_before = shared.counters.device_flushes.load(Ordering::Relaxed);
    let moved = commit_move(shared, plan);
    let flushes = shared.counters.device_flushes.load(Ordering::Relaxed) - flushes_before;
    shared.counters.compaction_device_flushes.fetch_add(flushes, Ordering::Relaxed);
    if moved.is_ok() {
        shared.counters.trivial_moves.fetch_add(1, Ordering::Relaxed);
    }
    moved
}

fn commit_move(shared: &Shared, plan: &Plan) -> Result<()> {
    let moved = plan
        .victims
        .iter()
        .map(|victim| {
            let mut moved = victim.clone();
            moved.level = plan.target_level;
            moved.flags &= !CHUNK_FLAG_ODD;
            moved
        })
        .collect();
    let (_, largest) = pick::key_range(&plan.victims);
    let pointer = (plan.source_level > 0 && plan.target_level > plan.source_level && !plan.forest)
        .then_some(lds_format::version::payload::CompactPointer { level: plan.source_level, key: largest });
    let mut state = shared.lock_state();
    let version = Arc::clone(state.version());
    let delta = DeltaVersion {
        last_sequence: version.last_sequence,
        ofs_backup_start: version.ofs_backup_start,
        lsn_backup_start: version.lsn_backup_start,
        compaction_id: 0,
        deleted: deleted_of(&plan.victims),
        compact_pointers: pointer.into_iter().collect(),
        added: moved,
        values: None,
    };
    commit(shared, &mut state, &delta, &[])
}

/// A merge for `plan`: journaled (with a new compaction id) when its inputs span enough slots
/// and the version log has room for its final delta version and its records without a trim
/// (none may happen until it finishes, SPEC.md §10.3): a trim first makes the room when it
/// can, else the merge runs unjournaled.
pub(crate) fn start(shared: &Shared, plan: &Plan) -> Result<Merger> {
    let mut state = shared.lock_state();
    let inputs: Vec<u64> = plan.victims.iter().chain(&plan.overlapping).map(|chunk| chunk.chunk_id).collect();
    let input_slots: usize = plan.victims.iter().chain(&plan.overlapping).map(|chunk| chunk.sub_chunks.len()).sum();
    // A rewrite for garbage collection (same level, not manual) relocates values: unjournaled.
    let collecting = plan.source_level == plan.target_level && !plan.manual && !plan.tiered && !plan.forest;
    // A size-tiered merge makes one chunk, which cannot be committed in parts.
    let mut journaled = !plan.tiered
        && shared.options.compaction_journal
        && input_slots as u64 >= shared.options.journal_min_input_slots
        && !collecting;
    let delta_reserve = delta_estimate(state.version(), &inputs);
    if journaled {
        // Room for the final delta and a few records, or a trim now.
        let wanted = [delta_reserve, delta_reserve, delta_reserve];
        if !room_for(shared, &state, &wanted) {
            trim(shared, &mut state)?;
            journaled = room_for(shared, &state, &wanted);
        }
    }
    let compaction_id = if journaled {
        state.compaction_id_max += 1;
        state.merge_delta_reserve = delta_reserve;
        state.compaction_id_max
    } else {
        0
    };
    let version = Arc::clone(state.version());
    state.merging = true;
    drop(state);
    let walks = shared
        .counters
        .level_walks
        .get(usize::from(plan.source_level))
        .map_or(0, |walks| walks.swap(0, Ordering::Relaxed));
    // Level 0 counts only when below its trigger (a read trigger merged it early).
    let below_trigger = plan.source_level > 0 || plan.victims.len() < shared.options.level0_compaction_trigger.max(1);
    if below_trigger && pick::read_triggered(&version, plan.source_level, walks) {
        shared.counters.read_triggered_merges.fetch_add(1, Ordering::Relaxed);
    }
    if plan.source_level == 0 {
        shared.counters.level0_merges.fetch_add(1, Ordering::Relaxed);
        shared.counters.level0_chunks_merged.fetch_add(plan.victims.len() as u64, Ordering::Relaxed);
    }
    let format = chunk_format(&shared.geometry, shared.instance, &shared.options, shared.encoding);
    let mut merger = Merger::new(plan, &version, compaction_id, shared.smallest_snapshot(), format);
    if let Err(error) = read_log_region(shared, &mut merger, &version) {
        shared.lock_state().merging = false;
        return Err(error);
    }
    // Unjournaled merges relocate the values of value chunks with much garbage (SPEC.md
    // §8.6: journaled ones move pointers only).
    if let (false, Some(_)) = (journaled, shared.value_separation_min) {
        let slot_size = shared.geometry.slot_size;
        let candidates = pick::gc_candidates(&version, shared.options.value_gc_live_percent, slot_size);
        let inputs = plan.victims.iter().chain(&plan.overlapping);
        let from = pick::relocation_set(&version, inputs, &candidates, slot_size);
        if !from.is_empty() {
            merger.relocation = Some(Relocation::new(from, version, crate::values::format(shared)));
        }
    }
    Ok(merger)
}

/// Reads the retained region of the backup log that the merge's log chunk inputs name
/// (SPEC.md §8.9); nothing when it has none. The region stays until the merge's final delta
/// version: the version names the inputs until then.
pub(crate) fn read_log_region(
    shared: &Shared,
    merger: &mut Merger,
    version: &lds_format::version::Version,
) -> Result<()> {
    let context =
        lds_format::log::area_context(&shared.geometry, lds_format::geometry::LogKind::Backup, shared.instance);
    let buffer =
        std::mem::take(&mut *shared.log_region_buffer.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    merger.log_region =
        crate::table::log::LogRegion::read(shared.device.as_ref(), context, version, merger.inputs.iter(), buffer)?;
    Ok(())
}

/// Keeps a finished merge's log region buffer for the next merge of log chunks.
pub(crate) fn keep_log_region_buffer(shared: &Shared, merger: &mut Merger) {
    if let Some(region) = merger.log_region.take() {
        *shared.log_region_buffer.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = region.into_buffer();
    }
}

/// Outputs a size-tiered merge writes per step (bounding the memory it holds).
const TIERED_STEP_OUTPUTS: usize = 4;

/// One step of a size-tiered merge (`tiered`): up to `TIERED_STEP_OUTPUTS` outputs written;
/// at the end of the inputs every output gets its place in the one chunk they form (its
/// footer's chunk id, index and count; its tail written again), one flush makes them durable,
/// and one delta version replaces the inputs with the chunk.
fn step_tiered(shared: &Shared, merger: &mut Merger) -> Result<bool> {
    let context = merge_context(shared);
    // On an error the merge is given up and the slots written so far freed (`abandon`).
    let produced = merger.produce(&context, TIERED_STEP_OUTPUTS)?;
    let mut built: Vec<_> = produced.chunks.into_iter().map(|packed| packed.chunk).collect();
    if !built.is_empty() {
        let placement = vec![(0u8, 0u8); built.len()];
        let metas = write_chunks(shared, &mut built, &placement, false)?;
        shared.counters.merge_outputs.fetch_add(metas.len() as u64, Ordering::Relaxed);
        for (meta, mut chunk) in metas.iter().zip(built) {
            // Written: only the tail is written again.
            chunk.body = Vec::new();
            merger.tiered_written.push((meta.chunk_id, chunk));
        }
    }
    if !produced.complete {
        return Ok(false);
    }
    let slots: Vec<u64> = merger.tiered_written.iter().map(|(slot, _)| *slot).collect();
    let mut chunks: Vec<_> = std::mem::take(&mut merger.tiered_written).into_iter().map(|(_, chunk)| chunk).collect();
    let added: Vec<ChunkMeta> =
        lds_format::algorithms::pack::place_group(&mut chunks, &slots, 0, 0).into_iter().collect();
    if chunks.len() > 1 {
        let slot_size = shared.geometry.slot_size;
        for (chunk, &slot) in chunks.iter().zip(&slots) {
            let tail = chunk.tail();
            let written =
                shared.device.write_at(shared.geometry.slot_offset(slot) + slot_size - tail.len() as u64, &tail);
            shared.cache.forget_slot(slot);
            if let Err(error) = written {
                crate::slots::release(&shared.slots, &slots);
                return Err(error.into());
            }
        }
    }
    if let Err(error) = flush_device(shared) {
        crate::slots::release(&shared.slots, &slots);
        return Err(error);
    }
    commit_final(shared, merger, added, Vec::new())
}

/// Gives up an unjournaled merge: the slots of the outputs it wrote (no version names them)
/// and of the value chunks it allocated are free again, and no merge is in progress.
pub(crate) fn abandon(shared: &Shared, mut merger: Merger) {
    let mut slots: Vec<u64> = merger.persisted.iter().flat_map(ChunkMeta::slots).collect();
    slots.extend(merger.tiered_written.drain(..).map(|(slot, _)| slot));
    if let Some(relocation) = merger.relocation.take() {
        slots.extend(relocation.finish().1);
    }
    for &slot in &slots {
        shared.cache.forget_slot(slot);
    }
    crate::slots::release(&shared.slots, &slots);
    keep_log_region_buffer(shared, &mut merger);
    let mut state = shared.lock_state();
    state.merging = false;
    state.merge_delta_reserve = 0;
}

/// What a merge reads its inputs through.
fn merge_context(shared: &Shared) -> MergeContext<'_> {
    MergeContext {
        values: shared,
        device: shared.device.as_ref(),
        geometry: &shared.geometry,
        buffers: &shared.merge_buffers,
    }
}

/// The final delta version of a merge: its inputs deleted, `outputs` and the value chunks
/// `value_added` added, and a forest drain's moved chunks moved to its target level (their
/// slots stay theirs). A flush may have committed since the merge began; the delta applies
/// to the current version, which still holds every input (only the merge deletes chunks).
fn commit_final(
    shared: &Shared,
    merger: &Merger,
    outputs: Vec<ChunkMeta>,
    value_added: Vec<lds_format::value::ValueChunkMeta>,
) -> Result<bool> {
    let mut state = shared.lock_state();
    let current = Arc::clone(state.version());
    let mut deleted = deleted_of(&merger.inputs);
    deleted.extend(deleted_of(&merger.moved));
    let mut added = outputs;
    added.extend(merger.moved.iter().map(|chunk| ChunkMeta { level: merger.target_level, ..chunk.clone() }));
    let delta = DeltaVersion {
        last_sequence: current.last_sequence,
        ofs_backup_start: current.ofs_backup_start,
        lsn_backup_start: current.lsn_backup_start,
        compaction_id: merger.compaction_id,
        deleted,
        compact_pointers: merger.pointer.clone().into_iter().collect(),
        added,
        values: shared
            .value_chunks
            .then(|| lds_format::version::payload::ValueDelta { added: value_added, ..Default::default() }),
    };
    commit_merge(shared, &mut state, &delta, &merger.inputs)?;
    shared.counters.forest_moved_chunks.fetch_add(merger.moved.len() as u64, Ordering::Relaxed);
    state.merging = false;
    state.merge_delta_reserve = 0;
    Ok(true)
}

/// Runs one step of a merge: up to `journal_every_outputs` outputs and a journal record, or
/// (unjournaled, or at the end of the inputs) the rest and the final commit; an unjournaled
/// one stops early, after an output, while a frozen memtable waits. Returns true when the
/// merge is finished.
pub(crate) fn step(shared: &Shared, merger: &mut Merger) -> Result<bool> {
    let flushes_before = shared.counters.device_flushes.load(Ordering::Relaxed);
    let finished = step_counted(shared, merger);
    let flushes = shared.counters.device_flushes.load(Ordering::Relaxed) - flushes_before;
    shared.counters.compaction_device_flushes.fetch_add(flushes, Ordering::Relaxed);
    if matches!(finished, Ok(true)) {
        shared.counters.merges.fetch_add(1, Ordering::Relaxed);
        if merger.source_level == merger.target_level && !merger.manual && !merger.tiered && !merger.forest {
            shared.counters.value_collections.fetch_add(1, Ordering::Relaxed);
        }
        if merger.journaled() {
            shared.counters.journaled_merges.fetch_add(1, Ordering::Relaxed);
        }
    }
    finished
}

fn step_counted(shared: &Shared, merger: &mut Merger) -> Result<bool> {
    if merger.tiered {
        return step_tiered(shared, merger);
    }
    let context = merge_context(shared);
    let step_outputs = merger.journaling.then(|| shared.options.journal_every_outputs.max(1));
    let written_before = merger.persisted.len();
    // Outputs are written as they are packed: the merge holds its inputs' current sub-chunks
    // and an output or two, not all of its outputs. Only the last ones (those packed when the
    // inputs end) may stay behind as the source level's odd chunk (`Merger::placement`).
    // Bounded by the entries of the inputs: each round packs at least one output or ends them.
    let complete = loop {
        let produced = merger.produce(&context, 1)?;
        merger.unwritten.extend(produced.chunks);
        if produced.complete {
            break true;
        }
        let placement = vec![(merger.target_level, 0u8); merger.unwritten.len()];
        #[cfg(feature = "fault-clean-before-journal")]
        clean_before_journal(shared, merger);
        write_unwritten(shared, merger, &placement)?;
        // A journaled step ends once it wrote its outputs, at a key boundary (`produce`
        // returns at one): the record's resume key is the last output's largest key.
        if step_outputs.is_some_and(|outputs| merger.persisted.len() - written_before >= outputs) {
            break false;
        }
        // An unjournaled leveled merge lets a frozen memtable flush between its outputs (the
        // worker flushes first, then goes on with it), so that writers do not stall behind a
        // long merge of level 0. Its outputs stay outside the version until its final
        // commit. Merges that relocate values or move forest chunks still run in one step.
        let yields = step_outputs.is_none() && merger.relocation.is_none() && !merger.forest;
        if yields && shared.lock_state().imm.is_some() {
            shared.counters.merge_yields.fetch_add(1, Ordering::Relaxed);
            return Ok(false);
        }
    };
    let mut value_added = Vec::new();
    if complete {
        let version = Arc::clone(shared.lock_state().version());
        let total = merger.persisted.len() + merger.unwritten.len();
        let placement = merger.placement(&merger.unwritten, total, &version, shared.geometry.slot_size);
        write_unwritten(shared, merger, &placement)?;
        // Relocated values (a merge that relocates is unjournaled: one step).
        if let Some(relocation) = merger.relocation.take() {
            let bytes = relocation.bytes;
            let (values, slots) = relocation.finish();
            if let Err(error) = crate::values::write(shared, &values) {
                crate::slots::release(&shared.slots, &slots);
                return Err(error);
            }
            shared.counters.values_relocated_bytes.fetch_add(bytes, Ordering::Relaxed);
            value_added = values.iter().map(lds_format::value::BuiltValueChunk::meta).collect();
        }
    }
    // The outputs must be durable before the record or delta version that names them; the
    // inputs stay in place until that record is durable (NobLSM's shadows).
    flush_device(shared)?;
    if complete {
        return commit_final(shared, merger, merger.persisted.clone(), value_added);
    }
    let Some(record) = merger.record() else { return Ok(false) };
    let mut state = shared.lock_state();
    if !room_for(shared, &state, &[record.encode().len(), state.merge_delta_reserve]) {
        // No room for another record before the final delta: the merge goes on to its end
        // unjournaled from here (the last durable record still covers what it cleaned).
        merger.journaling = false;
        return Ok(false);
    }
    let newly_cleaned: Vec<u64> = merger
        .inputs
        .iter()
        .filter(|chunk| record.cleaned.contains(&chunk.chunk_id) && !merger.cleaned.contains(&chunk.chunk_id))
        .flat_map(ChunkMeta::slots)
        .collect();
    journal(shared, &mut state, &record, newly_cleaned)?;
    shared.counters.journal_records.fetch_add(1, Ordering::Relaxed);
    merger.persisted = record.outputs;
    merger.cleaned = record.cleaned.into_iter().collect();
    merger.resume_key = Some(record.resume_key);
    Ok(false)
}

/// The broken order the oracle self-check must catch: the inputs a journaled step's record
/// will clean (those at or below the last output about to be written) are reused before the
/// record is durable.
#[cfg(feature = "fault-clean-before-journal")]
fn clean_before_journal(shared: &Shared, merger: &Merger) {
    let Some(last) = merger.unwritten.last().filter(|_| merger.journaling) else { return };
    let resume = &last.chunk.last_key;
    let mut state = shared.lock_state();
    for chunk in &merger.inputs {
        if chunk.largest_key <= *resume && !merger.cleaned.contains(&chunk.chunk_id) {
            state.compaction_pool.extend(chunk.slots());
        }
    }
}

/// Writes the first `placement.len()` unwritten outputs of `merger` at their `(level,
/// flags)` (unflushed) and moves them to its written outputs. A write that fails (no free
/// slot) leaves them unwritten, for the step's next attempt.
fn write_unwritten(shared: &Shared, merger: &mut Merger, placement: &[(u8, u8)]) -> Result<()> {
    if placement.is_empty() {
        return Ok(());
    }
    let pool = merger.journaled();
    let added = write_chunks(shared, &mut merger.unwritten[..placement.len()], placement, pool)?;
    merger.unwritten.drain(..placement.len());
    shared.counters.merge_outputs.fetch_add(added.len() as u64, Ordering::Relaxed);
    merger.persisted.extend(added);
    Ok(())
}
