//! The key-value store on an LDS volume: open with recovery (SPEC.md §9), writes to the
//! backup log and the memtable, reads from memtables and chunks.
//!
//! Threads and locks: a writer lock serializes backup log appends and sequence numbers; a
//! state lock guards the memtables, the version, the version log and the online map. Lock
//! order is writer, then state. One background thread flushes frozen memtables and runs
//! compactions; it is the only thread that commits to the version log, and it never takes the
//! writer lock. Readers take `Arc`s of the memtables and version and read without locks;
//! slots of deleted chunks are freed only when no reader holds a version that names them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use lds_format::batch::{decode_entries, BatchEntry, EntryKind, WriteBatchRecord, SEQUENCE_MAX};
use lds_format::image::area_context;
use lds_format::label::{Geometry, Label, LogKind};
use lds_format::log::{read_object, ObjectType};
use lds_format::recovery::{online_map, recover_backup_log, recover_version_log};
use lds_format::version::{ChunkMeta, Version};
use lds_format::writer::{AppendError, LogAppender};

use crate::device::{BlockDevice, Device, OpenMode};
use crate::error::{Error, Result};
use crate::inspect::{read_labels, InspectError};
use crate::memtable::MemTable;
use crate::read::{DbIterator, Tail};

/// Options of an open store, with their defaults. Memory is bounded by
/// `2 * write_buffer_size` (memtable and frozen memtable) plus `block_cache_bytes` plus the
/// decoded tails of chunks in use (about 1/300 of the data) plus, during a compaction, its
/// input and output chunks.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which instance of the volume to open (default 0).
    pub instance: u32,
    /// Memtable bytes before it is frozen and flushed (default 4 MiB, the paper's; capped at
    /// a third of the backup log so that the log never fills before a flush).
    pub write_buffer_size: usize,
    /// Target block size in chunks (default 4 KiB).
    pub block_size: usize,
    /// Bloom filter bits per key (default 10; 0 disables filters).
    pub bloom_bits_per_key: u32,
    /// Level-0 chunks that trigger a compaction into level 1 (default 4, LevelDB's).
    pub level0_compaction_trigger: usize,
    /// Level-0 chunks at which writers wait for compaction (default 12, LevelDB's).
    pub level0_stop_writes_trigger: usize,
    /// Bytes level 1 may hold before it is compacted (default 0: ten slots).
    pub level1_max_bytes: u64,
    /// Each deeper level may hold this many times the bytes of the one above (default 10).
    pub level_size_multiplier: u64,
    /// Bytes of decoded blocks kept in memory for reads (default 8 MiB).
    pub block_cache_bytes: usize,
    /// Unsynced backup log appends gather in memory up to this many bytes before one write
    /// to the device (default 64 KiB), so that a put costs no system call; an idle store
    /// writes them out within 100 ms. A process crash loses at most these latest unsynced
    /// writes (still a prefix of the writes issued); a synced write first writes out
    /// everything before it. 0 writes every batch.
    pub log_buffer_bytes: usize,
    /// Flushes and compactions run in a background thread (default). When false they run
    /// in the writing thread, so that the same operations always issue the same device
    /// writes and flushes (the crash simulator, RELIABILITY.md I8).
    pub background: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            instance: 0,
            write_buffer_size: 4 << 20,
            block_size: 4096,
            bloom_bits_per_key: 10,
            level0_compaction_trigger: 4,
            level0_stop_writes_trigger: 12,
            level1_max_bytes: 0,
            level_size_multiplier: 10,
            block_cache_bytes: 8 << 20,
            log_buffer_bytes: 64 << 10,
            background: true,
        }
    }
}

/// Options of one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Durable before returning: the batch's backup log range is flushed to the device.
    /// Concurrent synced writers share flushes (group commit).
    pub sync: bool,
}

/// An atomic group of puts and deletes.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    entries: Vec<BatchEntry>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.entries.push(BatchEntry { kind: EntryKind::Put, key: key.to_vec(), value: value.to_vec() });
        self
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.entries.push(BatchEntry { kind: EntryKind::Delete, key: key.to_vec(), value: Vec::new() });
        self
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of the batch's backup log payload (SPEC.md §7).
    pub fn encoded_len(&self) -> usize {
        lds_format::batch::entries_encoded_len(&self.entries)
    }
}

/// What open found and did, for `lds recover`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// SN of the live base version.
    pub sn: u64,
    /// Offset of the live base version in the version log.
    pub base_offset: u64,
    /// Live delta versions replayed on it.
    pub deltas_replayed: usize,
    /// Chunks in the version.
    pub chunks: usize,
    /// Write batches replayed from the backup log.
    pub batches_replayed: usize,
    /// Entries replayed into the memtable.
    pub entries_replayed: u64,
    /// Largest sequence number after recovery.
    pub last_sequence: u64,
    /// Slots in use over all instances.
    pub slots_in_use: u64,
}

/// A frozen memtable waiting for its flush.
pub(crate) struct Frozen {
    pub(crate) table: Arc<MemTable>,
    /// The backup start point once it is in chunks (SPEC.md §10.2).
    pub(crate) backup_start: (u64, u64),
    /// The largest sequence number it holds.
    pub(crate) last_sequence: u64,
}

/// What the writer lock guards.
pub(crate) struct WriterState {
    pub(crate) backup_log: LogAppender,
    pub(crate) last_sequence: u64,
    /// Appends not yet written to the device, contiguous from `buffer_offset` (area offset).
    pub(crate) buffer: Vec<u8>,
    pub(crate) buffer_offset: u64,
}

impl WriterState {
    /// Writes the gathered appends to the device.
    pub(crate) fn drain(&mut self, device: &dyn BlockDevice) -> std::result::Result<(), crate::device::DeviceError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let ofs_area = self.backup_log.context().ofs_area;
        device.write_at(ofs_area + self.buffer_offset, &self.buffer)?;
        self.buffer.clear();
        Ok(())
    }

    /// Adds an append; a discontiguous one (a WOR or WOL) writes out what was gathered first.
    fn gather(
        &mut self,
        device: &dyn BlockDevice,
        offset: u64,
        bytes: &[u8],
    ) -> std::result::Result<(), crate::device::DeviceError> {
        if !self.buffer.is_empty() && offset != self.buffer_offset + self.buffer.len() as u64 {
            self.drain(device)?;
        }
        if self.buffer.is_empty() {
            self.buffer_offset = offset;
        }
        self.buffer.extend_from_slice(bytes);
        Ok(())
    }
}

/// What the state lock guards.
pub(crate) struct TreeState {
    pub(crate) mem: Arc<MemTable>,
    pub(crate) imm: Option<Frozen>,
    pub(crate) version: Arc<Version>,
    /// The current version's chunks by level, rebuilt with each new version.
    pub(crate) levels: Arc<crate::read::Levels>,
    pub(crate) sn: u64,
    pub(crate) version_log: LogAppender,
    pub(crate) online: Vec<bool>,
    pub(crate) allocation_cursor: u64,
    /// Slots of deleted chunks, freed when no reader holds the version that named them.
    pub(crate) pending_free: Vec<(Arc<Version>, Vec<u64>)>,
    /// A backup start the writer applies before its next append.
    pub(crate) backup_start_update: Option<(u64, u64)>,
    /// Live snapshots: sequence number and how many hold it.
    pub(crate) snapshots: BTreeMap<u64, usize>,
    /// Set by a failed write or flush: no more writes (SPEC.md §2.4).
    pub(crate) poisoned: Option<String>,
    /// Set when the frozen memtable cannot be flushed for lack of slots.
    pub(crate) space_full: bool,
    /// Recovery found valid backup log objects with lsns at or past the head (unsynced
    /// appends of a crashed session that landed after a gap): the SN is raised before the
    /// first append (`background::raise_sn`).
    pub(crate) raise_sn_before_append: bool,
    /// A compaction found no slots; cleared by the next commit.
    pub(crate) compaction_stalled: bool,
    /// `Db::compact_range` runs: the next level it compacts.
    pub(crate) manual_compaction: Option<u8>,
    pub(crate) shutting_down: bool,
    /// Flushes and compactions done, for waiters.
    pub(crate) commits: u64,
}

/// Everything the store's threads share.
pub(crate) struct Shared {
    pub(crate) device: Arc<dyn BlockDevice>,
    pub(crate) geometry: Geometry,
    pub(crate) instance: u32,
    pub(crate) options: Options,
    pub(crate) path: PathBuf,
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
    pub(crate) tails: Mutex<HashMap<u64, Arc<Tail>>>,
    pub(crate) blocks: Mutex<crate::read::BlockCache>,
}

impl Shared {
    pub(crate) fn lock_state(&self) -> MutexGuard<'_, TreeState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, WriterState> {
        self.writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn wait<'a>(&self, guard: MutexGuard<'a, TreeState>) -> MutexGuard<'a, TreeState> {
        self.progress.wait(guard).unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records a failure after which nothing may be written (SPEC.md §2.4).
    pub(crate) fn poison(&self, state: &mut TreeState, reason: String) -> Error {
        state.poisoned.get_or_insert(reason.clone());
        self.progress.notify_all();
        Error::Poisoned { reason }
    }

    pub(crate) fn path_string(&self) -> String {
        self.path.display().to_string()
    }
}

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
        crate::read::get(&self.db.shared, key, self.sequence)
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

fn path_string(path: &Path) -> String {
    path.display().to_string()
}

impl Db {
    /// Opens instance `options.instance` of the volume at `path` and recovers it.
    pub fn open(path: &Path, options: Options) -> Result<Self> {
        Self::open_with_report(path, options).map(|(db, _)| db)
    }

    /// Opens and returns what recovery found.
    pub fn open_with_report(path: &Path, options: Options) -> Result<(Self, RecoveryReport)> {
        let device = Device::open(path, OpenMode::ReadWrite)?;
        Self::open_device(Arc::new(device), path, options)
    }

    /// Opens a volume on any device (the crash simulator's, for one); `path` names it in
    /// messages.
    pub fn open_device(device: Arc<dyn BlockDevice>, path: &Path, options: Options) -> Result<(Self, RecoveryReport)> {
        let labels = read_labels(device.as_ref())?;
        let (_, label) = labels.choose().map_err(|choice| InspectError::Label {
            path: path_string(path),
            choice,
            primary: labels.primary.as_ref().err().cloned().map(Box::new),
            backup: labels.backup.as_ref().err().cloned().map(Box::new),
        })?;
        let label: Label = label.clone();
        let geometry = label.geometry;
        if geometry.volume_len > device.len() {
            return Err(InspectError::Truncated {
                path: path_string(path),
                volume_len: geometry.volume_len,
                device_len: device.len(),
            }
            .into());
        }
        if !label.writable() {
            return Err(Error::Unsupported {
                reason: format!(
                    "{}: the volume has read-only-compatible features this build does not know",
                    path_string(path)
                ),
            });
        }
        if options.instance >= geometry.instance_count {
            return Err(Error::Unsupported {
                reason: format!(
                    "{}: instance {} does not exist (the volume has {})",
                    path_string(path),
                    options.instance,
                    geometry.instance_count
                ),
            });
        }
        let recovery_error =
            |instance: u32, reason: String| Error::Recovery { path: path_string(path), instance, reason };
        let mut states = Vec::new();
        let mut version_areas = Vec::new();
        for instance in 0..geometry.instance_count {
            let (offset, len) = geometry.log_area(LogKind::Version, instance);
            let area = device.read_vec(offset, len)?;
            let state = recover_version_log(&area, &area_context(&geometry, LogKind::Version, instance))
                .map_err(|error| recovery_error(instance, error.to_string()))?;
            if !state.unfinished_compactions.is_empty() {
                return Err(recovery_error(
                    instance,
                    "an unfinished journaled compaction: this build cannot resume it yet".into(),
                ));
            }
            states.push(state);
            version_areas.push(area);
        }
        let online = online_map(
            geometry.num_slots,
            states
                .iter()
                .enumerate()
                .map(|(instance, state)| (instance as u32, &state.version, &state.unfinished_compactions)),
        )
        .map_err(|conflict| {
            recovery_error(
                conflict.instances.1,
                format!(
                    "slot {} is referenced by instances {} and {}",
                    conflict.slot, conflict.instances.0, conflict.instances.1
                ),
            )
        })?;
        let state = states.swap_remove(options.instance as usize);
        let version_area = version_areas.swap_remove(options.instance as usize);
        let instance = options.instance;
        let (backup_offset, backup_len) = geometry.log_area(LogKind::Backup, instance);
        let backup_area = device.read_vec(backup_offset, backup_len)?;
        let backup_context = area_context(&geometry, LogKind::Backup, instance);
        let version = state.version.clone();
        // Damage that no crash explains would make recovery serve an older state silently
        // and then overwrite what a repair could use (RELIABILITY.md I7): refuse instead.
        if let Some(reason) = crate::fsck::log_damage(&geometry, instance, &version_area, &backup_area, &state) {
            return Err(recovery_error(instance, reason));
        }
        let backup = recover_backup_log(
            &backup_area,
            &backup_context,
            version.ofs_backup_start,
            version.lsn_backup_start,
            version.last_sequence,
            state.sn,
        )
        .map_err(|error| recovery_error(instance, error.to_string()))?;
        // Objects of a crashed session at or past the head could continue the chain once a
        // new append fills the gap before them (SPEC.md §9.3).
        let raise_sn_before_append =
            crate::fsck::headers_at_or_past(&backup_area, &backup_context, backup.head.next_lsn);
        let memtable = MemTable::default();
        let mut last_sequence = version.last_sequence;
        let mut entries_replayed = 0;
        for batch in &backup.batches {
            let raw = read_object(&backup_area, batch.offset, &backup_context)
                .map_err(|error| Error::Corrupt { path: path_string(path), error })?;
            let mut sequence = batch.first_sequence;
            decode_entries(raw.payload, backup_offset + batch.offset, |kind, key, value| {
                if sequence > version.last_sequence {
                    memtable.insert(key, sequence, kind, value);
                    entries_replayed += 1;
                }
                sequence += 1;
            })
            .map_err(|error| Error::Corrupt { path: path_string(path), error })?;
            last_sequence = last_sequence.max(sequence - 1);
        }
        let report = RecoveryReport {
            sn: state.sn,
            base_offset: state.base_offset,
            deltas_replayed: state.sequence.len() - state.base_index - 1,
            chunks: version.chunks.len(),
            batches_replayed: backup.batches.len(),
            entries_replayed,
            last_sequence,
            slots_in_use: online.iter().filter(|&&used| used).count() as u64,
        };
        let version_log = LogAppender::new(
            area_context(&geometry, LogKind::Version, instance),
            state.head,
            state.base_offset,
            state.base_lsn,
        );
        let backup_log =
            LogAppender::new(backup_context, backup.head, version.ofs_backup_start, version.lsn_backup_start);
        let mut options = options;
        options.write_buffer_size = options.write_buffer_size.min(geometry.len_backup_log as usize / 3).max(1);
        let block_cache_bytes = options.block_cache_bytes;
        let shared = Arc::new(Shared {
            device,
            geometry,
            instance,
            options,
            path: path.to_path_buf(),
            writer: Mutex::new(WriterState { backup_log, last_sequence, buffer: Vec::new(), buffer_offset: 0 }),
            state: Mutex::new(TreeState {
                mem: Arc::new(memtable),
                imm: None,
                levels: Arc::new(crate::read::Levels::of(&version)),
                version: Arc::new(version),
                sn: state.sn,
                version_log,
                online,
                allocation_cursor: 0,
                pending_free: Vec::new(),
                backup_start_update: None,
                snapshots: BTreeMap::new(),
                poisoned: None,
                space_full: false,
                raise_sn_before_append,
                compaction_stalled: false,
                manual_compaction: None,
                shutting_down: false,
                commits: 0,
            }),
            work: Condvar::new(),
            progress: Condvar::new(),
            published: AtomicU64::new(last_sequence),
            synced: Mutex::new(last_sequence),
            tails: Mutex::new(HashMap::new()),
            blocks: Mutex::new(crate::read::BlockCache::new(block_cache_bytes)),
        });
        let background = if shared.options.background {
            let handle = crate::background::spawn(Arc::clone(&shared)).map_err(|error| Error::Unsupported {
                reason: format!("cannot start the background thread: {error}"),
            })?;
            Some(handle)
        } else {
            None
        };
        Ok((Self { shared, background }, report))
    }

    /// The path the store was opened by.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: &[u8], value: &[u8], options: WriteOptions) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.put(key, value);
        self.write(&batch, options)
    }

    /// Deletes `key`.
    pub fn delete(&self, key: &[u8], options: WriteOptions) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.delete(key);
        self.write(&batch, options)
    }

    /// The largest batch `write` accepts, in `WriteBatch::encoded_len` bytes: half the
    /// backup log's object limit, so that a batch never waits on a log it cannot fit.
    pub fn batch_len_max(&self) -> u64 {
        self.shared.lock_writer().backup_log.context().payload_len_max() / 2
    }

    /// Applies a batch atomically: one backup log object, then the memtable.
    pub fn write(&self, batch: &WriteBatch, options: WriteOptions) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let shared = &self.shared;
        let value_len_max = shared.geometry.slot_size / 4;
        for entry in &batch.entries {
            if entry.key.is_empty() || entry.key.len() > usize::from(u16::MAX) {
                return Err(Error::InvalidArgument {
                    reason: format!("a key of {} bytes: keys are 1 to 65535 bytes", entry.key.len()),
                });
            }
            if entry.value.len() as u64 > value_len_max {
                return Err(Error::InvalidArgument {
                    reason: format!("a value of {} bytes exceeds slot_size / 4 = {value_len_max}", entry.value.len()),
                });
            }
        }
        let mut writer = shared.lock_writer();
        let payload_len = batch.encoded_len() as u64;
        let batch_len_max = writer.backup_log.context().payload_len_max() / 2;
        if payload_len > batch_len_max {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "a batch of {payload_len} bytes exceeds {batch_len_max} (half the backup log's object limit)"
                ),
            });
        }
        self.raise_sn_if_needed(&mut writer)?;
        let first_sequence = writer.last_sequence + 1;
        let last_sequence = first_sequence + batch.len() as u64 - 1;
        if last_sequence > SEQUENCE_MAX {
            return Err(Error::Unsupported { reason: "sequence numbers exhausted (2^56)".into() });
        }
        let payload = WriteBatchRecord { first_sequence, entries: batch.entries.clone() }.encode();
        let mut force_freeze = false;
        let (pending, mem) = loop {
            let mem = self.make_room(&mut writer, force_freeze)?;
            let sn = shared.lock_state().sn;
            match writer.backup_log.append(ObjectType::WriteBatch, sn, &payload) {
                Ok(pending) => break (pending, mem),
                // The live region reached the start point: a flush of the memtable moves it.
                Err(AppendError::LogFull { .. }) if !force_freeze => force_freeze = true,
                Err(error) => return Err(Error::InvalidArgument { reason: error.to_string() }),
            }
        };
        let mut written =
            pending.iter().try_for_each(|write| writer.gather(shared.device.as_ref(), write.offset, &write.bytes));
        if written.is_ok() && (options.sync || writer.buffer.len() >= shared.options.log_buffer_bytes) {
            written = writer.drain(shared.device.as_ref());
        }
        if let Err(error) = written {
            let mut state = shared.lock_state();
            return Err(shared.poison(&mut state, error.to_string()));
        }
        for (index, entry) in batch.entries.iter().enumerate() {
            mem.insert(&entry.key, first_sequence + index as u64, entry.kind, &entry.value);
        }
        writer.last_sequence = last_sequence;
        shared.published.store(last_sequence, Ordering::Release);
        drop(writer);
        if options.sync {
            self.sync_through(last_sequence)?;
        }
        Ok(())
    }

    /// Before the first backup log append after a recovery that found stale objects ahead of
    /// the head: raises the SN, for the wrap objects the backup log writes too (the writer
    /// lock is held, so no append runs meanwhile).
    fn raise_sn_if_needed(&self, writer: &mut WriterState) -> Result<()> {
        let shared = &self.shared;
        let mut state = shared.lock_state();
        if !state.raise_sn_before_append {
            return Ok(());
        }
        if let Some(reason) = &state.poisoned {
            return Err(Error::Poisoned { reason: reason.clone() });
        }
        if let Err(error) = crate::background::raise_sn(shared, &mut state) {
            return Err(shared.poison(&mut state, error.poison_reason()));
        }
        writer.backup_log.set_sn(state.sn);
        state.raise_sn_before_append = false;
        Ok(())
    }

    /// Makes `sequence` durable, sharing one device flush among concurrent callers.
    fn sync_through(&self, sequence: u64) -> Result<()> {
        let shared = &self.shared;
        let mut synced = shared.synced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *synced >= sequence {
            return Ok(());
        }
        // Every write up to `target` was issued before this flush starts, all of them in the
        // backup log: flushing its range covers them.
        let target = shared.published.load(Ordering::Acquire);
        let (ofs_area, len_area) = shared.geometry.log_area(LogKind::Backup, shared.instance);
        if let Err(error) = shared.device.flush_range(ofs_area, len_area) {
            let mut state = shared.lock_state();
            return Err(shared.poison(&mut state, error.to_string()));
        }
        *synced = target;
        Ok(())
    }

    /// Waits until the memtable has room (LevelDB's MakeRoomForWrite): freezes a full
    /// memtable for the background thread, and waits while a frozen one is still being
    /// flushed or level 0 is at its stop trigger. Returns the memtable to insert into.
    fn make_room(&self, writer: &mut WriterState, force: bool) -> Result<Arc<MemTable>> {
        let shared = &self.shared;
        let background = shared.options.background;
        let mut state = shared.lock_state();
        loop {
            if !background {
                // Inline mode: the writing thread does the background work itself, here.
                state = crate::background::run_inline(shared, state);
            }
            if let Some(start) = state.backup_start_update.take() {
                writer.backup_log.set_live_start(start.0, start.1);
            }
            if let Some(reason) = &state.poisoned {
                return Err(Error::Poisoned { reason: reason.clone() });
            }
            let full = state.mem.approximate_bytes() >= shared.options.write_buffer_size;
            let level0 = state.version.chunks.values().filter(|chunk| chunk.level == 0).count();
            // Inline, compactions already ran: level 0 cannot be waited down.
            let level0_stop = background && level0 >= shared.options.level0_stop_writes_trigger;
            if !force && !full && !level0_stop {
                return Ok(Arc::clone(&state.mem));
            }
            if state.imm.is_some() || (!force && level0_stop) {
                if state.space_full || !background {
                    return Err(Error::SpaceFull { needed: 1, num_slots: shared.geometry.num_slots });
                }
                state = shared.wait(state);
                continue;
            }
            if state.mem.is_empty() {
                // Nothing to flush: room is all there is.
                return Ok(Arc::clone(&state.mem));
            }
            let frozen = Frozen {
                table: std::mem::take(&mut state.mem),
                backup_start: writer.backup_log.next_position(),
                last_sequence: writer.last_sequence,
            };
            state.imm = Some(frozen);
            shared.work.notify_all();
            // A forced freeze (the backup log is full, or `flush`) waits for the flush that
            // moves the backup start; an ordinary one goes on with the new memtable.
            if !force {
                if !background {
                    state = crate::background::run_inline(shared, state);
                }
                return Ok(Arc::clone(&state.mem));
            }
        }
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        crate::read::get(&self.shared, key, self.shared.published.load(Ordering::Acquire))
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

    /// Writes the memtable to level-0 chunks and waits until they are committed.
    pub fn flush(&self) -> Result<()> {
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

    /// Waits until the background thread has nothing left to do.
    fn wait_idle(&self) -> Result<()> {
        let shared = &self.shared;
        let mut state = shared.lock_state();
        loop {
            if !shared.options.background {
                state = crate::background::run_inline(shared, state);
            }
            if let Some(reason) = &state.poisoned {
                return Err(Error::Poisoned { reason: reason.clone() });
            }
            if state.space_full {
                return Err(Error::SpaceFull { needed: 1, num_slots: shared.geometry.num_slots });
            }
            let busy = state.imm.is_some()
                || state.manual_compaction.is_some()
                || crate::background::compaction_wanted(shared, &state);
            if !busy || !shared.options.background {
                return Ok(());
            }
            shared.work.notify_all();
            state = shared.wait(state);
        }
    }

    /// Stops the background thread after its current task and closes the device. The
    /// memtable stays in the backup log; the next open replays it.
    pub fn close(mut self) -> Result<()> {
        self.stop_background();
        let state = self.shared.lock_state();
        match &state.poisoned {
            Some(reason) => Err(Error::Poisoned { reason: reason.clone() }),
            None => Ok(()),
        }
    }

    fn stop_background(&mut self) {
        let drained = self.shared.lock_writer().drain(self.shared.device.as_ref());
        if let Err(error) = drained {
            let mut state = self.shared.lock_state();
            self.shared.poison(&mut state, error.to_string());
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
        let version = Arc::clone(&self.shared.lock_state().version);
        (0..version.num_levels as u8).map(|level| version.level(level).len()).collect()
    }

    /// Every chunk of the current version, by id.
    pub fn chunks(&self) -> Vec<ChunkMeta> {
        self.shared.lock_state().version.chunks.values().cloned().collect()
    }

    /// Slots in use in the online map (all instances), counting slots that wait for readers
    /// of older versions to finish.
    pub fn slots_in_use(&self) -> u64 {
        let mut state = self.shared.lock_state();
        crate::background::reclaim(&self.shared, &mut state);
        state.online.iter().filter(|&&used| used).count() as u64
    }

    /// The largest sequence number written.
    pub fn last_sequence(&self) -> u64 {
        self.shared.published.load(Ordering::Acquire)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        self.stop_background();
    }
}
