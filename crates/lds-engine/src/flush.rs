//! Flushing a frozen memtable to level-0 chunks (SPEC.md §10.2): build, write, flush the
//! device, then commit one delta version that adds them and moves the backup start. With
//! TRIAD-LOG the chunks may be log chunks, whose puts name their batches in the backup log
//! (SPEC.md §8.9, `crate::logs`).

use std::sync::Arc;

use lds_format::entry::EntryKind;
use lds_format::logref::LOG_REF_LEN;
use lds_format::value::{BuiltValueChunk, ValueChunkMeta};
use lds_format::version::payload::{DeltaVersion, ValueDelta};

use crate::commit::commit_slots;
use crate::commit::write_chunks;
#[cfg(not(feature = "fault-drop-chunk-flush"))]
use crate::commit::{flush_device, flush_device_and_log};
use crate::error::Result;
use crate::memtable::MemTable;
use crate::retention::Retention;
use crate::slots::release;
use crate::state::Shared;
use crate::table::build::{chunk_format, ChunkPacker};
use crate::values::Separator;

/// Writes a frozen memtable to level-0 chunks and commits them with the new backup start.
/// With key-value separation, its large values go to new value chunks written with them
/// (SPEC.md §8.6), and the delta version adds those and the pending value chunks its pointers
/// name; pending value chunks only its dropped entries named are freed.
/// `log_chunk`: its puts may become log references (TRIAD-LOG, `crate::logs::log_chunk_wanted`).
pub(crate) fn flush_frozen(
    shared: &Shared,
    table: &MemTable,
    held: &std::collections::HashSet<Vec<u8>>,
    backup_start: (u64, u64),
    last_sequence: u64,
    log_chunk: bool,
) -> Result<()> {
    let smallest_snapshot = shared.smallest_snapshot();
    // What the memtable's part of the backup log holds (TRIAD-LOG), and what this flush keeps
    // of it: the next flush judges TRIAD's condition by it.
    let tracked = table.batches();
    let logged: u64 = tracked.iter().flatten().map(|batch| u64::from(batch.num_entries)).sum();
    let batches = tracked.filter(|_| log_chunk);
    let (mut references, mut kept_entries) = (0u64, 0u64);
    let mut retention = Retention::new(smallest_snapshot);
    let mut format = chunk_format(&shared.geometry, shared.instance, &shared.options, shared.encoding);
    if shared.sketches {
        format = format.with_sketches();
    }
    let mut packer = ChunkPacker::new(format);
    let mut separator = Separator::new(shared);
    // Tombstones stay in level 0: older versions may lie below.
    table.visit(|key, sequence, kind, value| {
        if !held.is_empty() && held.contains(key) {
            // Held in the new memtable (TRIAD-MEM): its value chunks, if any, are freed.
            separator.drop_entry(kind, value);
        } else if retention.keep(key, sequence, kind, |_| false) {
            kept_entries += 1;
            let (kind, value) = separator.keep(shared, kind, value);
            // A put at least as long as its reference stays in the backup log (TRIAD-LOG).
            let reference = batches
                .as_deref()
                .filter(|_| kind == EntryKind::Put && value.len() >= LOG_REF_LEN)
                .and_then(|batches| crate::table::log::reference_of(batches, sequence, value.len()));
            match reference {
                Some(reference) => {
                    references += 1;
                    packer.push(key, sequence, EntryKind::LogRef, &reference.encode());
                }
                None => packer.push(key, sequence, kind, value),
            }
        } else {
            separator.drop_entry(kind, value);
        }
    });
    let value_slots = separator.allocated_slots();
    let (values, kept, dropped, failed) = separator.finish();
    let written = match failed {
        Some(error) => Err(error),
        None => crate::values::write(shared, &values),
    };
    if let Err(error) = written {
        release(&shared.slots, &value_slots);
        return Err(error);
    }
    let mut built: Vec<_> = packer.finish().into_iter().map(|packed| packed.chunk).collect();
    let placement = vec![(0u8, 0u8); built.len()];
    let added = match write_chunks(shared, &mut built, &placement, false) {
        Ok(added) => added,
        Err(error) => {
            release(&shared.slots, &value_slots);
            return Err(error);
        }
    };
    // The chunks must be durable before the delta version that names them; so must the
    // batches their log references name, and the hot entries written again to the log after
    // the backup start the delta version records.
    #[cfg(not(feature = "fault-drop-chunk-flush"))]
    if references > 0 || !held.is_empty() {
        flush_device_and_log(shared)?;
    } else {
        flush_device(shared)?;
    }
    let mut state = shared.lock_state();
    let version = Arc::clone(state.version());
    // Pending value chunks this memtable's pointers name: added if a kept pointer names
    // them, else freed (SPEC.md §8.6).
    let mut value_added: Vec<ValueChunkMeta> = values.iter().map(BuiltValueChunk::meta).collect();
    value_added.extend(kept.iter().filter_map(|id| state.pending_values.get(id).copied()));
    let freed: Vec<u64> = dropped
        .iter()
        .filter(|id| !kept.contains(id))
        .filter_map(|id| state.pending_values.get(id).map(|chunk| chunk.slot))
        .collect();
    let delta = DeltaVersion {
        last_sequence: last_sequence.max(version.last_sequence),
        ofs_backup_start: backup_start.0,
        lsn_backup_start: backup_start.1,
        compaction_id: 0,
        deleted: Vec::new(),
        compact_pointers: Vec::new(),
        added,
        values: shared.value_chunks.then(|| ValueDelta { added: value_added, ..ValueDelta::default() }),
    };
    commit_slots(shared, &mut state, &delta, freed)?;
    if shared.options.level0_overlap_min.is_some() {
        let sketches: Vec<_> =
            built.iter().map(|chunk| (chunk.footer.chunk_id, chunk.footer, chunk.sketch.clone())).collect();
        let version = std::sync::Arc::clone(state.version());
        crate::compaction::defer::remember(&mut state.level0_sketches, &version, &sketches);
    }
    for id in kept.iter().chain(&dropped) {
        state.pending_values.remove(id);
    }
    shared.counters.memtable_flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::logs::record_unique(shared, kept_entries, logged);
    if references > 0 {
        shared.counters.log_chunk_flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        shared.counters.log_references.fetch_add(references, std::sync::atomic::Ordering::Relaxed);
    }
    Ok(())
}
