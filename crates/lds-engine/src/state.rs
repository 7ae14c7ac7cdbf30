//! The state the store's threads share, and its locks. A leaf of the module graph: it holds
//! data and the locking and poisoning rules, and calls no other part of the engine.
//!
//! Threads and locks: a writer lock serializes backup log appends and sequence numbers; a
//! state lock guards the memtables, the version and the version log; a slot lock, shared by
//! the instances one process opened together, guards the online map. Lock order is writer,
//! then state, then slots. One background thread (or the writing thread, inline)
//! flushes frozen memtables and runs compactions; it is the only one that commits to the
//! version log, and it never takes the writer lock. Readers take `Arc`s of the memtables and
//! version and read without locks; slots of deleted chunks are freed only when no reader
//! holds a version that names them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use lds_format::algorithms::writer::LogAppender;
use lds_format::batch::{encode_entry, EntryRef, BATCH_ENTRY_FIXED_LEN};
use lds_format::geometry::Geometry;
use lds_format::version::payload::CompactionJournal;
use lds_format::version::Version;
use lds_volume::{BlockDevice, DeviceError};

use crate::compaction::merge::Merger;
use crate::error::{Error, Result};
use crate::memtable::MemTable;
use crate::options::Options;
use crate::table::cache::TableCache;
use crate::version::published::Published;

/// What the background work did, counted.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) memtable_flushes: AtomicU64,
    pub(crate) trivial_moves: AtomicU64,
    pub(crate) merges: AtomicU64,
    pub(crate) journaled_merges: AtomicU64,
    pub(crate) journal_records: AtomicU64,
    pub(crate) merge_outputs: AtomicU64,
    pub(crate) device_flushes: AtomicU64,
    pub(crate) compaction_device_flushes: AtomicU64,
    pub(crate) values_relocated_bytes: AtomicU64,
    pub(crate) value_collections: AtomicU64,
    pub(crate) level0_merges: AtomicU64,
    pub(crate) hot_entries_held: AtomicU64,
    pub(crate) level0_chunks_merged: AtomicU64,
    pub(crate) forest_moved_chunks: AtomicU64,
    pub(crate) parallel_searches: AtomicU64,
    pub(crate) log_chunk_flushes: AtomicU64,
    pub(crate) log_references: AtomicU64,
    pub(crate) log_reads: AtomicU64,
    pub(crate) log_pressure_merges: AtomicU64,
    pub(crate) log_waits: AtomicU64,
    /// Walks of each level by reads since its last merge began, by level: at level 0 the
    /// chunks (each seek positions a cursor in every one), below it the iterators that
    /// positioned a cursor there and the lookups that consulted it and went deeper
    /// (`read::get`). Past a budget the level merges early
    /// (`Limits::read_triggered`).
    pub(crate) level_walks: [AtomicU64; lds_format::version::meta::LEVELS_COUNT_MAX as usize],
    pub(crate) read_triggered_merges: AtomicU64,
    /// Times an unjournaled merge stopped between outputs for a frozen memtable to flush.
    pub(crate) merge_yields: AtomicU64,
}

impl Counters {
    /// Counts `count` walks of `level` by reads (`Counters::level_walks`).
    pub(crate) fn walked(&self, level: usize, count: u64) {
        if let Some(walks) = self.level_walks.get(level) {
            walks.fetch_add(count, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// Where slots waiting for readers go once no reader holds the published version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// Free for any allocation.
    Free,
    /// To the pool of the compaction that cleaned them.
    CompactionPool,
}

/// A frozen memtable waiting for its flush.
pub(crate) struct Frozen {
    pub(crate) table: Arc<MemTable>,
    /// The backup start point once it is in chunks (SPEC.md §10.2).
    pub(crate) backup_start: (u64, u64),
    /// The largest sequence number it holds.
    pub(crate) last_sequence: u64,
    /// Keys whose entries its flush leaves out: held in the new memtable (TRIAD-MEM,
    /// `crate::hot`).
    pub(crate) held: std::collections::HashSet<Vec<u8>>,
}

/// What the writer lock guards.
pub(crate) struct WriterState {
    pub(crate) backup_log: LogAppender,
    pub(crate) last_sequence: u64,
    /// Appends not yet written to the device, contiguous from `buffer_offset` (area offset).
    pub(crate) buffer: Vec<u8>,
    pub(crate) buffer_offset: u64,
    /// The lsn of the last batch gathered into `buffer`, and of the last one written out
    /// (every object up to it was issued to the device): what a flush makes durable.
    pub(crate) gathered_lsn: u64,
    pub(crate) drained_lsn: u64,
    /// The write batch object at the end of `buffer`, while later batches may join it.
    pub(crate) open: Option<OpenBatch>,
    /// Bytes of the backup log area as the device holds them, from the area offset given:
    /// read ahead of the head by `drain_synced`, and kept so by every drain, which writes its
    /// appends into them.
    pub(crate) known: Option<(u64, Vec<u8>)>,
}

/// A write batch object at the end of the writer's buffer that later write batches join
/// (SPEC.md §7: a writer may gather several write batches into one object, all-or-nothing
/// together), so that a put of a few bytes does not cost a header of 64 bytes and a batch
/// header of 16. Its header and the batch's entry count are written when it is closed: when
/// the buffer is written out, or when a freeze needs the next batch in an object of its own.
pub(crate) struct OpenBatch {
    /// Where its header starts in the buffer.
    pub(crate) start: usize,
    /// Its header's fields (`len_payload` and `payload_crc32c` are computed when it closes).
    pub(crate) object: lds_format::log::NewObject,
    /// Bytes of payload and entries so far.
    pub(crate) len_payload: usize,
    pub(crate) num_entries: u32,
    /// The sequence number of its first entry.
    pub(crate) first_sequence: u64,
    /// A later batch joined it: its header must be encoded again.
    pub(crate) grown: bool,
}

/// Entries one object holds at most (its count is a u32).
const OPEN_BATCH_ENTRIES_MAX: u32 = u32::MAX / 2;

/// Bytes of the backup log a synced drain reads ahead of the head at once
/// (`WriterState::known`): a device read per 16 sectors of 4 KiB rather than per sector.
const KNOWN_AHEAD: u64 = 64 << 10;

/// Writes `bytes`, written to the device at area offset `offset`, into `known` where they
/// overlap it.
fn splice(known: &mut Option<(u64, Vec<u8>)>, offset: u64, bytes: &[u8]) {
    let Some((at, known)) = known.as_mut() else { return };
    let (known_end, end) = (*at + known.len() as u64, offset + bytes.len() as u64);
    let (from, to) = (offset.max(*at), end.min(known_end));
    if from < to {
        known[(from - *at) as usize..(to - *at) as usize]
            .copy_from_slice(&bytes[(from - offset) as usize..(to - offset) as usize]);
    }
}

impl WriterState {
    /// Writes the gathered appends to the device.
    pub(crate) fn drain(&mut self, device: &dyn BlockDevice) -> std::result::Result<(), DeviceError> {
        self.close_open();
        if self.buffer.is_empty() {
            return Ok(());
        }
        let ofs_area = self.backup_log.context().ofs_area;
        device.write_at(ofs_area + self.buffer_offset, &self.buffer)?;
        self.drained();
        Ok(())
    }

    /// After the gathered appends were written: they go into `known`, and the buffer is empty.
    fn drained(&mut self) {
        splice(&mut self.known, self.buffer_offset, &self.buffer);
        self.buffer.clear();
        self.drained_lsn = self.gathered_lsn;
    }

    /// Writes the gathered appends to the device for a synced write, which flushes them at
    /// once: whole sectors around the page cache (`PageCache::write_direct`), so that the
    /// flush writes back no page. The bytes of the first and last sector outside the appends
    /// are written again as the device holds them (`known`: read `KNOWN_AHEAD` at a time,
    /// since direct writes leave no page of the area in the page cache to read them from),
    /// as a page-cache write-back would: past the head they may be the live region's start.
    pub(crate) fn drain_synced(&mut self, device: &dyn BlockDevice) -> std::result::Result<(), DeviceError> {
        self.close_open();
        if self.buffer.is_empty() {
            return Ok(());
        }
        let context = self.backup_log.context();
        let (ofs_area, sector, len_area) = (context.ofs_area, u64::from(context.sector_size), context.len_area);
        let start = self.buffer_offset;
        let end = start + self.buffer.len() as u64;
        let (from, to) = (start / sector * sector, end.div_ceil(sector) * sector);
        let covered = |known: &Option<(u64, Vec<u8>)>| {
            known.as_ref().is_some_and(|(at, bytes)| *at <= from && to <= at + bytes.len() as u64)
        };
        if (from < start || end < to) && !covered(&self.known) {
            let until = (from + KNOWN_AHEAD).max(to).min(len_area);
            self.known = Some((from, device.read_vec(ofs_area + from, until - from)?));
        }
        let mut bytes = Vec::with_capacity((to - from) as usize);
        match &self.known {
            Some((at, known)) if from < start || end < to => {
                bytes.extend_from_slice(&known[(from - at) as usize..(start - at) as usize]);
                bytes.extend_from_slice(&self.buffer);
                bytes.extend_from_slice(&known[(end - at) as usize..(to - at) as usize]);
            }
            _ => bytes.extend_from_slice(&self.buffer),
        }
        device.write_direct(ofs_area + from, &bytes)?;
        self.drained();
        Ok(())
    }

    /// Closes the open batch object: no later batch joins it, and it is whole in the buffer
    /// (its entry count, payload checksum and header written).
    pub(crate) fn close_open(&mut self) {
        let Some(open) = self.open.take().filter(|open| open.grown) else { return };
        let header_len = lds_format::log::HEADER_LEN;
        let payload = &mut self.buffer[open.start + header_len..open.start + header_len + open.len_payload];
        // The batch's entry count (SPEC.md §7: bytes 8..12 of the payload).
        payload[8..12].copy_from_slice(&open.num_entries.to_le_bytes());
        let crc = lds_format::codec::crc32c(payload);
        let header = lds_format::log::encode_header(&open.object, open.len_payload as u32, crc);
        self.buffer[open.start..open.start + header_len].copy_from_slice(&header);
    }

    /// Adds the entries of a write batch starting at `first_sequence` to the open batch object
    /// when the log lets it grow; false (nothing changed) when there is none, the sequence
    /// numbers do not follow its own, or the log refuses.
    pub(crate) fn join_open(&mut self, first_sequence: u64, entries: &[EntryRef<'_>]) -> bool {
        let Some(open) = self.open.as_ref() else { return false };
        let count = entries.len() as u64;
        if open.first_sequence + u64::from(open.num_entries) != first_sequence
            || u64::from(open.num_entries) + count > u64::from(OPEN_BATCH_ENTRIES_MAX)
        {
            return false;
        }
        let added: usize = entries.iter().map(|(_, key, value)| BATCH_ENTRY_FIXED_LEN + key.len() + value.len()).sum();
        if self.backup_log.extend_last(added as u64).is_err() {
            return false;
        }
        let Some(open) = self.open.as_mut() else { return false };
        // Drop the padding to 8 bytes, add the entries, pad again (SPEC.md §5).
        self.buffer.truncate(open.start + lds_format::log::HEADER_LEN + open.len_payload);
        let mut writer = lds_format::codec::Writer::with_capacity(added);
        for &(kind, key, value) in entries {
            encode_entry(&mut writer, kind, key, value);
        }
        self.buffer.extend_from_slice(writer.as_slice());
        open.len_payload += added;
        open.num_entries += count as u32;
        open.grown = true;
        let padded = (self.buffer.len() - open.start).next_multiple_of(8);
        self.buffer.resize(open.start + padded, 0);
        true
    }

    /// Adds an append; a discontiguous one (a WOR or WOL) writes out what was gathered first.
    pub(crate) fn gather(
        &mut self,
        device: &dyn BlockDevice,
        offset: u64,
        bytes: &[u8],
    ) -> std::result::Result<(), DeviceError> {
        self.close_open();
        if !self.buffer.is_empty() && offset != self.buffer_offset + self.buffer.len() as u64 {
            self.drain(device)?;
        }
        if self.buffer.is_empty() {
            self.buffer_offset = offset;
        }
        // Appends are contiguous within a gathered write (SPEC.md §10.1).
        assert_eq!(offset, self.buffer_offset + self.buffer.len() as u64, "a gathered append is not contiguous");
        self.buffer.extend_from_slice(bytes);
        Ok(())
    }

    /// Where the open batch object lies.
    pub(crate) fn open_position(&self) -> Option<lds_format::log::LogPosition> {
        self.open
            .as_ref()
            .map(|open| lds_format::log::LogPosition { offset: open.object.log_offset, lsn: open.object.lsn })
    }

    /// Marks the write batch object just gathered (`object`, its encoded bytes the last of
    /// the buffer, holding `num_entries` from `first_sequence`) open: later batches may join it.
    pub(crate) fn open_last(
        &mut self,
        object: lds_format::log::NewObject,
        encoded_len: usize,
        len_payload: usize,
        num_entries: u32,
        first_sequence: u64,
    ) {
        self.open = Some(OpenBatch {
            start: self.buffer.len() - encoded_len,
            object,
            len_payload,
            num_entries,
            first_sequence,
            grown: false,
        });
    }
}

/// What the state lock guards.
pub(crate) struct TreeState {
    pub(crate) mem: Arc<MemTable>,
    pub(crate) imm: Option<Frozen>,
    /// The current version as readers see it (its levels, and the redirection of an
    /// unfinished compaction).
    pub(crate) published: Arc<Published>,
    pub(crate) sn: u64,
    pub(crate) version_log: LogAppender,
    /// Slots of deleted or cleaned chunks, released when no reader holds the published
    /// version that may read them.
    pub(crate) pending_free: Vec<(Arc<Published>, Vec<u64>, Release)>,
    /// Slots of inputs the running journaled compaction cleaned, no longer read by anyone:
    /// marked in use, reused only by that compaction's outputs (SPEC.md §12).
    pub(crate) compaction_pool: Vec<u64>,
    /// Slots freed since the worker last told the device their pages are not needed
    /// (`worker::drop_freed_pages`).
    pub(crate) uncached: Vec<u64>,
    /// The largest compaction id this instance used (SPEC.md §6.3: ids increase).
    pub(crate) compaction_id_max: u64,
    /// The last durable journal record of the running compaction, appended again after a
    /// base version so that it stays live (SPEC.md §10.3).
    pub(crate) last_journal: Option<CompactionJournal>,
    /// An unfinished compaction found at open, for the worker to resume.
    pub(crate) resume: Option<CompactionJournal>,
    /// A merge is in progress (`Shared::merger` holds it): no other compaction starts.
    pub(crate) merging: bool,
    /// Version log bytes the final delta version of the unfinished journaled compaction may
    /// take: no other append may use them (a trim cannot happen before it finishes).
    pub(crate) merge_delta_reserve: usize,
    /// A start of the backup log's live region the writer applies before its next append
    /// (`logs::writer_start`: the retention start, SPEC.md §8.9, §10.1).
    pub(crate) backup_start_update: Option<(u64, u64)>,
    /// The current version's retention start (SPEC.md §8.9): its backup start, or the oldest
    /// backup log object one of its log chunks names.
    pub(crate) retention: lds_format::log::LogPosition,
    /// Replaced versions that named log chunks a merge has taken since, with the retention
    /// start each needed: the writer keeps those objects while a reader still holds one.
    pub(crate) log_holds: Vec<(std::sync::Weak<Published>, lds_format::log::LogPosition)>,
    /// Live snapshots: sequence number and how many hold it.
    pub(crate) snapshots: BTreeMap<u64, usize>,
    /// Set by a failed write or flush: no more writes (SPEC.md §2.4). The first failure.
    pub(crate) poisoned: Option<Arc<Error>>,
    /// Set when the frozen memtable cannot be flushed for lack of slots.
    pub(crate) space_full: bool,
    /// Recovery found valid backup log objects with lsns at or past the head (unsynced
    /// appends of a crashed session that landed after a gap): the SN is raised before the
    /// first append (`commit::raise_sn`).
    pub(crate) raise_sn_before_append: bool,
    /// When the last memtable flush committed (`worker::streaming`).
    pub(crate) last_flush: Option<std::time::Instant>,
    /// A compaction found no slots; cleared by the next commit.
    pub(crate) compaction_stalled: bool,
    /// `Db::compact_range` runs: the next level it compacts.
    pub(crate) manual_compaction: Option<u8>,
    pub(crate) shutting_down: bool,
    /// Flushes and compactions done, for waiters.
    pub(crate) commits: u64,
    /// Value chunks written directly whose memtable is not flushed yet (SPEC.md §8.6): named
    /// only by the backup log, their slots marked in use.
    pub(crate) pending_values: BTreeMap<u64, lds_format::value::ValueChunkMeta>,
    /// Key sketches of level-0 chunks, by chunk id (SPEC.md §8.7), kept with technique
    /// `triad-disk`: read at open, added by flushes.
    pub(crate) level0_sketches: crate::compaction::defer::Sketches,
}

/// The online map of slots (SPEC.md §9.4) and the allocation cursor (§10.4), shared by every
/// instance of the volume that one process opened together (SPEC.md §13), so that they never
/// take the same slot. Taken after an instance's state lock, never before it.
pub(crate) struct SlotMap {
    /// One bit per slot: a chunk of any instance, an allocation being written, a slot waiting
    /// for readers, a compaction's pool, or a slot no device holds.
    pub(crate) online: Vec<bool>,
    /// Slots marked in `online` but those no device holds, and the most there were since open.
    pub(crate) slots_in_use: u64,
    pub(crate) slots_in_use_peak: u64,
    pub(crate) cursor: u64,
}

/// Everything the store's threads share.
pub(crate) struct Shared {
    pub(crate) device: Arc<dyn BlockDevice>,
    /// The online map, shared with the other instances opened with this one.
    pub(crate) slots: Arc<Mutex<SlotMap>>,
    pub(crate) geometry: Geometry,
    /// The digest and entry encoding of new chunks (the label's features `fast_digest` and
    /// `compact_entries`, SPEC.md §8.2, §8.3).
    pub(crate) encoding: lds_format::algorithms::pack::ChunkEncoding,
    pub(crate) instance: u32,
    pub(crate) options: Options,
    pub(crate) path: PathBuf,
    /// Opened read-only: nothing is ever written, no background work runs.
    pub(crate) read_only: bool,
    pub(crate) writer: Mutex<WriterState>,
    pub(crate) state: Mutex<TreeState>,
    /// Wakes the background thread.
    pub(crate) work: Condvar,
    /// Wakes writers and callers waiting for the background thread.
    pub(crate) progress: Condvar,
    /// The largest sequence number readers may see.
    pub(crate) published: AtomicU64,
    /// The largest sequence number known durable (group commit).
    pub(crate) synced: Mutex<u64>,
    /// The label has feature `sync_watermark`: batches record `durable_lsn` (SPEC.md §7.1).
    pub(crate) sync_watermark: bool,
    /// The lsn of the last backup log object written out to the device (copied from the
    /// writer state under its lock), and the largest lsn a completed flush made durable.
    pub(crate) drained_lsn: AtomicU64,
    pub(crate) durable_lsn: AtomicU64,
    /// Chunk tails and blocks read so far.
    pub(crate) cache: TableCache,
    /// The threads of parallel search (`Options::search_threads` above 1).
    pub(crate) search_pool: Option<crate::pool::SearchPool>,
    /// What the background work did.
    pub(crate) counters: Counters,
    /// The merge in progress between worker steps. Only the worker touches it, never while
    /// holding the state lock.
    pub(crate) merger: Mutex<Option<Merger>>,
    /// Read buffers (windows) merges reuse (`compaction::merge::MergeContext`).
    pub(crate) merge_buffers: Mutex<Vec<Vec<u8>>>,
    /// The buffer the last merge of log chunks read its retained region into, reused by the
    /// next (TRIAD-LOG: a fresh one of tens of MiB costs a page fault per page).
    pub(crate) log_region_buffer: Mutex<Vec<u8>>,
    /// The percent of its part of the backup log's entries the last flush kept (TRIAD-LOG's
    /// condition for a log chunk, judged on the flush before: counting first would cost a
    /// second walk of the memtable).
    pub(crate) log_unique_percent: AtomicU64,
    /// The label has feature `value_chunks` (SPEC.md §8.6): pointers may be read, and every
    /// commit keeps the value section.
    pub(crate) value_chunks: bool,
    /// The label has feature `chunk_sketches` (SPEC.md §8.7): level-0 chunks of flushes carry
    /// a key sketch.
    pub(crate) sketches: bool,
    /// TRIAD-LOG is on (`Options::log_tables`, on a volume with feature `log_tables`): flushes
    /// may write log chunks (SPEC.md §8.9).
    pub(crate) log_tables: bool,
    /// Values of at least this many bytes go to value chunks at flush (`Options::
    /// value_separation_min`, on a volume with the feature), and of at least
    /// `value_direct_min` before their batch.
    pub(crate) value_separation_min: Option<usize>,
    pub(crate) value_direct_min: Option<usize>,
    /// The id of the next value chunk (above every id the version and the backup log name).
    pub(crate) next_value_id: AtomicU64,
}

impl TreeState {
    /// The current version.
    pub(crate) fn version(&self) -> &Arc<Version> {
        &self.published.version
    }
}

impl Shared {
    pub(crate) fn lock_state(&self) -> MutexGuard<'_, TreeState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The online map; taken after the state lock when both are held.
    pub(crate) fn lock_slots(&self) -> MutexGuard<'_, SlotMap> {
        self.slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, WriterState> {
        self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn wait<'a>(&self, guard: MutexGuard<'a, TreeState>) -> MutexGuard<'a, TreeState> {
        self.progress.wait(guard).unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a failure after which nothing may be written (SPEC.md §2.4); returns the
    /// error to give the caller. The first failure is kept.
    pub(crate) fn poison(&self, state: &mut TreeState, error: Error) -> Error {
        let cause = Arc::clone(state.poisoned.get_or_insert_with(|| error.into_cause()));
        self.progress.notify_all();
        Error::Poisoned { cause }
    }

    /// Fails when an earlier failure poisoned the store.
    pub(crate) fn check_poisoned(state: &TreeState) -> Result<()> {
        match &state.poisoned {
            Some(cause) => Err(Error::Poisoned { cause: Arc::clone(cause) }),
            None => Ok(()),
        }
    }

    /// The sequence number every live snapshot sees (the oldest snapshot, else the latest).
    pub(crate) fn smallest_snapshot(&self) -> u64 {
        let state = self.lock_state();
        state.snapshots.keys().next().copied().unwrap_or_else(|| self.published.load(Ordering::Acquire))
    }

    /// A new empty memtable for this store (recording its batches' positions with TRIAD-LOG).
    pub(crate) fn new_memtable(&self) -> MemTable {
        let table = MemTable::with_capacity(self.options.write_buffer_size);
        if self.log_tables {
            table.tracking_batches()
        } else {
            table
        }
    }

    pub(crate) fn path_string(&self) -> String {
        self.path.display().to_string()
    }
}
