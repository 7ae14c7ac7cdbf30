//! The key-value store on an LDS volume (`Db`): opening with recovery (`open`), writes
//! (`write`), reads through the `read` module, and waiting for background work.

mod open;
mod write;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use lds_format::version::meta::ChunkMeta;

pub use open::RecoveryReport;

use crate::error::{Error, Result};
use crate::read::iter::DbIterator;
use crate::state::Shared;

/// An open store. Share it between threads with `Arc<Db>`; every operation takes `&self`.
pub struct Db {
    pub(crate) shared: Arc<Shared>,
    background: Option<JoinHandle<()>>,
}

/// A consistent view at one sequence number; reads through it see no later write.
pub struct Snapshot<'a> {
    db: &'a Db,
    sequence: u64,
}

impl Snapshot<'_> {
    /// The sequence number it sees.
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The value of `key` as of the snapshot.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        crate::read::get::get(&self.db.shared, key, self.sequence)
    }

    /// An iterator over `start <= key < end` as of the snapshot.
    pub fn range(&self, start: &[u8], end: Option<&[u8]>) -> Result<DbIterator> {
        DbIterator::new(&self.db.shared, start, end, self.sequence)
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        let mut state = self.db.shared.lock_state();
        if let Some(count) = state.snapshots.get_mut(&self.sequence) {
            *count -= 1;
            if *count == 0 {
                state.snapshots.remove(&self.sequence);
            }
        }
    }
}

/// What the background work of an open store did, counted since it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Memtables written to level 0.
    pub memtable_flushes: u64,
    /// Compactions that moved chunks down without rewriting them.
    pub trivial_moves: u64,
    /// Merges finished.
    pub merges: u64,
    /// Of them, journaled (SPEC.md §12).
    pub journaled_merges: u64,
    /// Compaction journal records appended.
    pub journal_records: u64,
    /// Chunks merges wrote.
    pub merge_outputs: u64,
    /// Device flushes the background work issued (chunks and version log), synced writes' not
    /// included.
    pub device_flushes: u64,
    /// Of them, issued by compactions (moves and merges).
    pub compaction_device_flushes: u64,
    /// The most slots in use at once since open (chunks, chunks being written, slots waiting
    /// for readers): what a merge needs beyond the live data shows here.
    pub peak_slots_in_use: u64,
    /// Bytes of chunk tails pinned in memory now (level pinning, `Options::pinned_levels`).
    pub pinned_tail_bytes: u64,
    /// Value chunks of the version now (key-value separation, SPEC.md §8.6).
    pub value_chunks: u64,
    /// Their bytes of values.
    pub value_bytes: u64,
    /// Of those, the bytes the tree still points to (the rest is garbage until relocated).
    pub value_live_bytes: u64,
    /// Value chunks written directly (before their batch) not yet added by a flush.
    pub pending_value_chunks: u64,
    /// Bytes of values merges copied to new value chunks (garbage collection), since open.
    pub values_relocated_bytes: u64,
    /// Merges run only to relocate values (rewrites of a level's chunks in place), since open.
    pub value_collections: u64,
    /// Entries of hot keys held in memory at freezes instead of flushed (TRIAD-MEM), since
    /// open.
    pub hot_entries_held: u64,
    /// Merges of level 0 into the base level started since open.
    pub level0_merges: u64,
    /// Merges started because reads walked a level too often (LevelDB's seek
    /// compaction): of level 0 before its trigger, or of a deeper level past its budget
    /// while writes were quiet, since open.
    pub read_triggered_merges: u64,
    /// Times an unjournaled merge stopped between its outputs for a frozen memtable to flush
    /// (writers wait for that flush), since open.
    pub merge_yields: u64,
    /// The level-0 chunks those merges took (with `triad-disk`, more per merge).
    pub level0_chunks_merged: u64,
    /// Chunks forest drains moved to the next stage without rewriting them (SifrDB's split
    /// merge), since open.
    pub forest_moved_chunks: u64,
    /// Point lookups that searched their candidate chunks in parallel (SifrDB's parallel
    /// search), since open.
    pub parallel_searches: u64,
    /// Flushes that wrote log chunks (TRIAD-LOG, SPEC.md §8.9), since open.
    pub log_chunk_flushes: u64,
    /// Puts those flushes left in the backup log, written as references, since open.
    pub log_references: u64,
    /// Values read through a log reference by lookups and iterators, since open.
    pub log_reads: u64,
    /// Level-0 merges started early because the retained backup log left too little room,
    /// since open.
    pub log_pressure_merges: u64,
    /// Writes that waited for a level-0 merge to release the backup log, since open.
    pub log_waits: u64,
    /// Bytes of the backup log the current version retains for its log chunks (from its
    /// retention start to its backup start).
    pub log_retained_bytes: u64,
}

/// Rounds of waiting for the background thread `flush` and `compact_range` make at most
/// (each round ends when the background thread reports progress).
const IDLE_WAITS_MAX: u64 = 1 << 20;

impl Db {
    /// The path the store was opened by.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// True when the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.shared.read_only
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        crate::read::get::get(&self.shared, key, self.shared.published.load(Ordering::Acquire))
    }

    /// An iterator over every live key and value with `start <= key < end` (`end` None: to
    /// the last key), in key order, as of now.
    pub fn range(&self, start: &[u8], end: Option<&[u8]>) -> Result<DbIterator> {
        DbIterator::new(&self.shared, start, end, self.shared.published.load(Ordering::Acquire))
    }

    /// An iterator over every key.
    pub fn iter(&self) -> Result<DbIterator> {
        self.range(b"", None)
    }

    /// A consistent view: reads through it see the store as it is now.
    pub fn snapshot(&self) -> Snapshot<'_> {
        let mut state = self.shared.lock_state();
        let sequence = self.shared.published.load(Ordering::Acquire);
        *state.snapshots.entry(sequence).or_insert(0) += 1;
        Snapshot { db: self, sequence }
    }

    /// Writes the memtable to level-0 chunks and waits until they are committed and the
    /// background thread has nothing left to do (level 0 merged down to below its trigger: a
    /// caller that waits ends a stream of writes). With technique `triad-mem` its hot entries
    /// stay in the new memtable (and the backup log).
    pub fn flush(&self) -> Result<()> {
        if self.shared.read_only {
            return Err(Error::ReadOnly { path: self.shared.path_string() });
        }
        let mut writer = self.shared.lock_writer();
        let mem = self.make_room(&mut writer, true)?;
        drop(writer);
        drop(mem);
        self.wait_idle()
    }

    /// Compacts every level down as far as it goes, and waits.
    pub fn compact_range(&self) -> Result<()> {
        self.flush()?;
        let mut state = self.shared.lock_state();
        state.manual_compaction = Some(0);
        self.shared.work.notify_all();
        drop(state);
        self.wait_idle()
    }

    /// Waits until the background thread has nothing left to do. The writes stop streaming
    /// (`worker::streaming`) while it waits: level 0 merges at its trigger, not at twice it.
    fn wait_idle(&self) -> Result<()> {
        let shared = &self.shared;
        let mut state = shared.lock_state();
        for _ in 0..IDLE_WAITS_MAX {
            state.last_flush = None;
            if !shared.options.background {
                state = crate::worker::run_inline(shared, state);
            }
            Shared::check_poisoned(&state)?;
            if state.space_full {
                return Err(Error::SpaceFull { needed: 1, num_slots: shared.geometry.num_slots });
            }
            let busy = state.imm.is_some()
                || state.manual_compaction.is_some()
                || crate::worker::compaction_wanted(shared, &state);
            if !busy || !shared.options.background {
                return Ok(());
            }
            shared.work.notify_all();
            state = shared.wait(state);
        }
        Err(Error::Invariant { what: format!("waited {IDLE_WAITS_MAX} rounds for the background work to end") })
    }

    /// Writes out gathered appends, stops the background thread after its current task and
    /// closes the device; fails when any write or flush failed, now or before. The memtable
    /// stays in the backup log; the next open replays it.
    pub fn close(mut self) -> Result<()> {
        self.stop_background();
        Shared::check_poisoned(&self.shared.lock_state())
    }

    fn stop_background(&mut self) {
        if self.shared.read_only {
            return;
        }
        let drained = self.shared.lock_writer().drain(self.shared.device.as_ref());
        if let Err(error) = drained {
            let mut state = self.shared.lock_state();
            self.shared.poison(&mut state, error.into());
        }
        {
            let mut state = self.shared.lock_state();
            state.shutting_down = true;
            self.shared.work.notify_all();
        }
        if let Some(handle) = self.background.take() {
            let _ = handle.join();
        }
    }

    /// Chunks per level (level 0 first).
    pub fn level_chunk_counts(&self) -> Vec<usize> {
        let version = Arc::clone(self.shared.lock_state().version());
        (0..version.num_levels as u8).map(|level| version.level(level).len()).collect()
    }

    /// Every chunk of the current version, by id.
    pub fn chunks(&self) -> Vec<ChunkMeta> {
        self.shared.lock_state().version().chunks.values().cloned().collect()
    }

    /// Slots in use in the online map (all instances), counting slots that wait for readers
    /// of older versions to finish.
    pub fn slots_in_use(&self) -> u64 {
        let mut state = self.shared.lock_state();
        crate::slots::reclaim(&mut state, &self.shared.slots, &self.shared.cache);
        drop(state);
        self.shared.lock_slots().slots_in_use
    }

    /// The id of the journaled compaction in progress or left unfinished by a crash, if any
    /// (SPEC.md §12; reads are redirected by its last journal record until it finishes).
    pub fn unfinished_compaction(&self) -> Option<u64> {
        let state = self.shared.lock_state();
        state.last_journal.as_ref().map(|journal| journal.compaction_id)
    }

    /// Runs the unfinished journaled compaction (in progress, or left by a crash) to its end
    /// now (SPEC.md §12); returns its id, or `None` when there was none.
    pub fn finish_compaction(&self) -> Result<Option<u64>> {
        if self.shared.read_only {
            return Err(Error::ReadOnly { path: self.shared.path_string() });
        }
        let Some(id) = self.unfinished_compaction() else { return Ok(None) };
        crate::worker::finish_merge(&self.shared)?;
        Ok(Some(id))
    }

    /// Ends the unfinished journaled compaction left by a crash without finishing it: one
    /// delta version with its id that deletes and adds nothing, so that its outputs become
    /// free slots and its inputs stay. Refused once it has cleaned an input, whose slot may
    /// hold one of its outputs by now (only resuming it is safe then). Returns its id, or
    /// `None` when there was none.
    pub fn abort_compaction(&self) -> Result<Option<u64>> {
        if self.shared.read_only {
            return Err(Error::ReadOnly { path: self.shared.path_string() });
        }
        let mut state = self.shared.lock_state();
        let Some(journal) = state.last_journal.clone() else { return Ok(None) };
        if state.merging {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "compaction {} is running in this process: it cannot be aborted",
                    journal.compaction_id
                ),
            });
        }
        if !journal.cleaned.is_empty() {
            return Err(Error::CompactionCleaned {
                compaction_id: journal.compaction_id,
                cleaned: journal.cleaned.len(),
            });
        }
        let version = Arc::clone(state.version());
        let delta = lds_format::version::payload::DeltaVersion {
            last_sequence: version.last_sequence,
            ofs_backup_start: version.ofs_backup_start,
            lsn_backup_start: version.lsn_backup_start,
            compaction_id: journal.compaction_id,
            deleted: Vec::new(),
            compact_pointers: Vec::new(),
            added: Vec::new(),
            values: None,
        };
        // The outputs' slots are in use in the online map (SPEC.md §9.4); they are freed once
        // the delta is durable and no reader holds the redirected version.
        let outputs: Vec<u64> = journal.outputs.iter().flat_map(ChunkMeta::slots).collect();
        state.last_journal = None;
        state.resume = None;
        state.merge_delta_reserve = 0;
        if let Err(error) = crate::commit::commit_slots(&self.shared, &mut state, &delta, outputs) {
            return Err(self.shared.poison(&mut state, error));
        }
        Ok(Some(journal.compaction_id))
    }

    /// The last journal record of the unfinished journaled compaction, if any.
    pub fn compaction_journal(&self) -> Option<lds_format::version::payload::CompactionJournal> {
        self.shared.lock_state().last_journal.clone()
    }

    /// What the background work did since the store opened.
    pub fn stats(&self) -> Stats {
        let counters = &self.shared.counters;
        let (version, pending_value_chunks, retention) = {
            let state = self.shared.lock_state();
            (Arc::clone(state.version()), state.pending_values.len() as u64, state.retention)
        };
        let backup_start = version.backup_start();
        let get = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        Stats {
            memtable_flushes: get(&counters.memtable_flushes),
            trivial_moves: get(&counters.trivial_moves),
            merges: get(&counters.merges),
            journaled_merges: get(&counters.journaled_merges),
            journal_records: get(&counters.journal_records),
            merge_outputs: get(&counters.merge_outputs),
            device_flushes: get(&counters.device_flushes),
            compaction_device_flushes: get(&counters.compaction_device_flushes),
            peak_slots_in_use: self.shared.lock_slots().slots_in_use_peak,
            pinned_tail_bytes: self.shared.cache.pinned_bytes() as u64,
            value_chunks: version.value_chunks.len() as u64,
            value_bytes: version.value_chunks.values().map(|chunk| u64::from(chunk.len_body)).sum(),
            value_live_bytes: version.value_live.values().sum(),
            pending_value_chunks,
            values_relocated_bytes: get(&counters.values_relocated_bytes),
            value_collections: get(&counters.value_collections),
            level0_merges: get(&counters.level0_merges),
            read_triggered_merges: get(&counters.read_triggered_merges),
            merge_yields: get(&counters.merge_yields),
            hot_entries_held: get(&counters.hot_entries_held),
            level0_chunks_merged: get(&counters.level0_chunks_merged),
            forest_moved_chunks: get(&counters.forest_moved_chunks),
            parallel_searches: get(&counters.parallel_searches),
            log_chunk_flushes: get(&counters.log_chunk_flushes),
            log_references: get(&counters.log_references),
            log_reads: get(&counters.log_reads),
            log_pressure_merges: get(&counters.log_pressure_merges),
            log_waits: get(&counters.log_waits),
            log_retained_bytes: lds_format::log::ring_distance(
                retention,
                backup_start,
                self.shared.geometry.len_backup_log,
            ),
        }
    }

    /// The largest sequence number written.
    pub fn last_sequence(&self) -> u64 {
        self.shared.published.load(Ordering::Acquire)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.stop_background();
        // Lookups' searches still queued hold the store: the volume is free once they end.
        if let Some(pool) = &self.shared.search_pool {
            pool.wait_idle();
        }
    }
}
