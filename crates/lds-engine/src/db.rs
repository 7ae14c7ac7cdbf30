//! The key-value store on an LDS volume: open with recovery (SPEC.md §9), writes to the
//! backup log and the memtable, flushes to level-0 chunks committed by one delta version
//! (SPEC.md §10.2), reads from the memtable and chunks.
//!
//! This first version runs flushes in the caller's thread and has no compaction yet: level 0
//! grows until "space full". Both come with the rest of the engine issue.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use lds_format::batch::{
    decode_entries, EntryKind, WriteBatchRecord, BATCH_ENTRY_FIXED_LEN, BATCH_HEADER_LEN, SEQUENCE_MAX,
};
use lds_format::chunk::{
    visit_block, BuiltSubChunk, ChunkBuilder, ChunkIdentity, ChunkOptions, Filter, Footer, IndexEntry, FOOTER_LEN,
};
use lds_format::image::area_context;
use lds_format::label::{Geometry, Label, LogKind};
use lds_format::log::{read_object, ObjectType};
use lds_format::recovery::{online_map, recover_backup_log, recover_version_log};
use lds_format::version::{ChunkMeta, DeltaVersion, SubChunkRef, Version};
use lds_format::writer::{AppendError, LogAppender, PendingWrite};

use crate::device::{Device, OpenMode};
use crate::error::{Error, Result};
use crate::inspect::{read_labels, InspectError};
use crate::memtable::MemTable;

/// Options of an open store, with their defaults.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which instance of the volume to open (default 0).
    pub instance: u32,
    /// Memtable bytes before a flush (default 4 MiB, the paper's; capped at a third of the
    /// backup log so that the log never fills before a flush).
    pub write_buffer_size: usize,
    /// Target block size in chunks (default 4 KiB).
    pub block_size: usize,
    /// Bloom filter bits per key (default 10; 0 disables filters).
    pub bloom_bits_per_key: u32,
    /// Level-0 chunks that trigger a compaction into level 1 (default 4, LevelDB's).
    pub level0_compaction_trigger: usize,
    /// Bytes level 1 may hold before it is compacted (default 0: ten slots).
    pub level1_max_bytes: u64,
    /// Each deeper level may hold this many times the bytes of the one above (default 10).
    pub level_size_multiplier: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            instance: 0,
            write_buffer_size: 4 << 20,
            block_size: 4096,
            bloom_bits_per_key: 10,
            level0_compaction_trigger: 4,
            level1_max_bytes: 0,
            level_size_multiplier: 10,
        }
    }
}

/// Options of one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Durable before returning: the batch's backup log range is flushed to the device.
    pub sync: bool,
}

/// An atomic group of puts and deletes.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    entries: Vec<(EntryKind, Vec<u8>, Vec<u8>)>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.entries.push((EntryKind::Put, key.to_vec(), value.to_vec()));
        self
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.entries.push((EntryKind::Delete, key.to_vec(), Vec::new()));
        self
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes of the batch's backup log payload (SPEC.md §7).
    pub fn encoded_len(&self) -> usize {
        BATCH_HEADER_LEN
            + self.entries.iter().map(|(_, key, value)| BATCH_ENTRY_FIXED_LEN + key.len() + value.len()).sum::<usize>()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The decoded tail of one sub-chunk, cached per slot.
#[derive(Debug)]
pub(crate) struct Tail {
    pub(crate) index: Vec<IndexEntry>,
    pub(crate) filter: Filter,
}

pub(crate) struct Inner {
    pub(crate) device: Device,
    pub(crate) geometry: Geometry,
    pub(crate) instance: u32,
    pub(crate) options: Options,
    pub(crate) version_log: LogAppender,
    pub(crate) backup_log: LogAppender,
    pub(crate) version: Version,
    pub(crate) sn: u64,
    pub(crate) memtable: MemTable,
    pub(crate) last_sequence: u64,
    pub(crate) online: Vec<bool>,
    pub(crate) allocation_cursor: u64,
    pub(crate) tails: HashMap<u64, Arc<Tail>>,
    pub(crate) poisoned: Option<String>,
}

/// An open store. All operations take `&self`; writes are serialized.
pub struct Db {
    inner: Mutex<Inner>,
    path: PathBuf,
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
        let labels = read_labels(&device)?;
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
        let instance = options.instance;
        let (backup_offset, backup_len) = geometry.log_area(LogKind::Backup, instance);
        let backup_area = device.read_vec(backup_offset, backup_len)?;
        let backup_context = area_context(&geometry, LogKind::Backup, instance);
        let version = state.version.clone();
        let backup = recover_backup_log(
            &backup_area,
            &backup_context,
            version.ofs_backup_start,
            version.lsn_backup_start,
            version.last_sequence,
            state.sn,
        )
        .map_err(|error| recovery_error(instance, error.to_string()))?;
        let mut memtable = MemTable::default();
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
        let inner = Inner {
            device,
            geometry,
            instance,
            options,
            version_log,
            backup_log,
            version,
            sn: state.sn,
            memtable,
            last_sequence,
            online,
            allocation_cursor: 0,
            tails: HashMap::new(),
            poisoned: None,
        };
        Ok((Self { inner: Mutex::new(inner), path: path.to_path_buf() }, report))
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The path the store was opened by.
    pub fn path(&self) -> &Path {
        &self.path
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

    /// Applies a batch atomically: one backup log object, then the memtable.
    pub fn write(&self, batch: &WriteBatch, options: WriteOptions) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut inner = self.lock();
        inner.check_writable()?;
        let value_len_max = inner.geometry.slot_size / 4;
        for (_, key, value) in &batch.entries {
            if key.is_empty() || key.len() > usize::from(u16::MAX) {
                return Err(Error::InvalidArgument {
                    reason: format!("a key of {} bytes: keys are 1 to 65535 bytes", key.len()),
                });
            }
            if value.len() as u64 > value_len_max {
                return Err(Error::InvalidArgument {
                    reason: format!("a value of {} bytes exceeds slot_size / 4 = {value_len_max}", value.len()),
                });
            }
        }
        let payload_len = batch.encoded_len();
        if payload_len as u64 > inner.batch_len_max() {
            return Err(Error::InvalidArgument {
                reason: format!("a batch of {payload_len} bytes is more than half the backup log"),
            });
        }
        if inner.memtable.approximate_bytes() >= inner.options.write_buffer_size {
            inner.flush_memtable()?;
        }
        let first_sequence = inner.last_sequence + 1;
        if first_sequence + batch.len() as u64 - 1 > SEQUENCE_MAX {
            return Err(Error::Unsupported { reason: "sequence numbers exhausted (2^56)".into() });
        }
        let record = WriteBatchRecord {
            first_sequence,
            entries: batch
                .entries
                .iter()
                .map(|(kind, key, value)| lds_format::batch::BatchEntry {
                    kind: *kind,
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
        };
        let payload = record.encode();
        let sn = inner.sn;
        let pending = match inner.backup_log.append(ObjectType::WriteBatch, sn, &payload) {
            Ok(pending) => pending,
            Err(AppendError::LogFull { .. }) => {
                // The live region reached the start point: flushing the memtable moves it.
                inner.flush_memtable()?;
                inner
                    .backup_log
                    .append(ObjectType::WriteBatch, sn, &payload)
                    .map_err(|error| Error::InvalidArgument { reason: error.to_string() })?
            }
            Err(error) => return Err(Error::InvalidArgument { reason: error.to_string() }),
        };
        let ofs_area = inner.backup_log.context().ofs_area;
        inner.write_pending(ofs_area, &pending)?;
        if options.sync {
            inner.flush_device()?;
        }
        for (index, (kind, key, value)) in batch.entries.iter().enumerate() {
            inner.memtable.insert(key, first_sequence + index as u64, *kind, value);
        }
        inner.last_sequence = first_sequence + batch.len() as u64 - 1;
        Ok(())
    }

    /// The value of `key`, if any.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut inner = self.lock();
        if let Some(found) = inner.memtable.get(key, u64::MAX) {
            return Ok(found.map(<[u8]>::to_vec));
        }
        inner.get_from_chunks(key)
    }

    /// Every live key and value with `start <= key < end` (`end` None: to the last key), in
    /// key order.
    pub fn range(&self, start: &[u8], end: Option<&[u8]>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut inner = self.lock();
        inner.range(start, end)
    }

    /// Writes the memtable to level-0 chunks and commits them.
    pub fn flush(&self) -> Result<()> {
        let mut inner = self.lock();
        inner.check_writable()?;
        inner.flush_memtable()
    }

    /// Chunks per level (level 0 first), for tools and tests.
    pub fn level_chunk_counts(&self) -> Vec<usize> {
        let inner = self.lock();
        (0..inner.version.num_levels as u8).map(|level| inner.version.level(level).len()).collect()
    }

    /// The largest batch `write` accepts, in `WriteBatch::encoded_len` bytes: half the
    /// backup log's object limit, so that a batch never waits on a log it cannot fit.
    pub fn batch_len_max(&self) -> u64 {
        self.lock().batch_len_max()
    }

    /// Every chunk of the current version, by id.
    pub fn chunks(&self) -> Vec<ChunkMeta> {
        self.lock().version.chunks.values().cloned().collect()
    }

    /// Slots marked in use in the online map (all instances).
    pub fn slots_in_use(&self) -> u64 {
        self.lock().online.iter().filter(|&&used| used).count() as u64
    }

    /// The largest sequence number written.
    pub fn last_sequence(&self) -> u64 {
        self.lock().last_sequence
    }
}

impl Inner {
    fn batch_len_max(&self) -> u64 {
        self.backup_log.context().payload_len_max() / 2
    }

    fn check_writable(&self) -> Result<()> {
        match &self.poisoned {
            Some(reason) => Err(Error::Poisoned { reason: reason.clone() }),
            None => Ok(()),
        }
    }

    fn write_pending(&mut self, ofs_area: u64, pending: &[PendingWrite]) -> Result<()> {
        for write in pending {
            if let Err(error) = self.device.write_at(ofs_area + write.offset, &write.bytes) {
                self.poisoned = Some(error.to_string());
                return Err(error.into());
            }
        }
        Ok(())
    }

    pub(crate) fn flush_device(&mut self) -> Result<()> {
        if let Err(error) = self.device.flush() {
            // SPEC.md §2.4: never retry a failed flush and carry on.
            self.poisoned = Some(error.to_string());
            return Err(error.into());
        }
        Ok(())
    }

    /// Threaded logging over the online map (SPEC.md §10.4).
    fn allocate(&mut self, count: u64) -> Result<Vec<u64>> {
        let num_slots = self.geometry.num_slots;
        let mut found = Vec::new();
        let mut cursor = self.allocation_cursor;
        for _ in 0..num_slots {
            if found.len() as u64 == count {
                break;
            }
            if !self.online[cursor as usize] {
                found.push(cursor);
            }
            cursor = (cursor + 1) % num_slots;
        }
        if (found.len() as u64) < count {
            return Err(Error::SpaceFull { needed: count, num_slots });
        }
        self.allocation_cursor = cursor;
        Ok(found)
    }

    /// Packs sorted entries (one version per key) into chunks, each filling at most a slot.
    pub(crate) fn build_chunks<'a>(
        &self,
        entries: impl Iterator<Item = (&'a [u8], u64, EntryKind, &'a [u8])>,
    ) -> Vec<BuiltSubChunk> {
        let chunk_options = ChunkOptions {
            slot_size: self.geometry.slot_size,
            block_size: self.options.block_size,
            bloom_bits_per_key: self.options.bloom_bits_per_key,
        };
        let identity = ChunkIdentity {
            volume_uuid: self.geometry.volume_uuid,
            instance: self.instance,
            chunk_id: 0,
            sub_chunk_index: 0,
            num_sub_chunks: 1,
            level: 0,
            flags: 0,
        };
        let mut built = Vec::new();
        let mut builder = ChunkBuilder::new(chunk_options);
        for (key, sequence, kind, value) in entries {
            if !builder.add(key, sequence, kind, value) {
                let full = std::mem::replace(&mut builder, ChunkBuilder::new(chunk_options));
                built.extend(full.finish(identity));
                let added = builder.add(key, sequence, kind, value);
                assert!(added, "an entry within the value limit always fits an empty slot");
            }
        }
        built.extend(builder.finish(identity));
        built
    }

    /// Allocates a slot for each built chunk, writes it (not yet flushed), marks the slots in
    /// the online map, and returns the metadata of each at its level with its flags.
    pub(crate) fn write_chunks(
        &mut self,
        built: &mut [BuiltSubChunk],
        placement: &[(u8, u8)],
    ) -> Result<Vec<ChunkMeta>> {
        let slots = self.allocate(built.len() as u64)?;
        let mut metas = Vec::with_capacity(built.len());
        for ((chunk, &slot), &(level, flags)) in built.iter_mut().zip(&slots).zip(placement) {
            chunk.set_level_and_flags(level, flags);
            chunk.set_identity(slot, 0, 1);
            let offset = self.geometry.slot_offset(slot);
            let tail = chunk.tail();
            let result = self
                .device
                .write_at(offset, &chunk.body)
                .and_then(|()| self.device.write_at(offset + self.geometry.slot_size - tail.len() as u64, &tail));
            if let Err(error) = result {
                self.poisoned = Some(error.to_string());
                return Err(error.into());
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
        for &slot in &slots {
            self.online[slot as usize] = true;
        }
        Ok(metas)
    }

    /// Frees the slots of chunks a durable delta version deleted (SPEC.md §3.2 of the paper:
    /// only after the commit).
    pub(crate) fn free_slots(&mut self, chunks: &[ChunkMeta]) {
        for chunk in chunks {
            for slot in chunk.slots() {
                self.online[slot as usize] = false;
                self.tails.remove(&slot);
            }
        }
    }

    pub(crate) fn flush_memtable(&mut self) -> Result<()> {
        if self.memtable.is_empty() {
            return Ok(());
        }
        // Only the newest version of each key is written (there are no snapshots yet to need
        // older ones), so a key lies in exactly one chunk of a flush and level-0 reads may
        // take chunks newest first. With snapshots, a chunk must never be cut between two
        // versions of one key.
        let mut previous_key: Option<&[u8]> = None;
        let newest = self.memtable.iter().filter(|&(key, ..)| {
            let first = previous_key != Some(key);
            previous_key = Some(key);
            first
        });
        let mut built = self.build_chunks(newest);
        let placement = vec![(0u8, 0u8); built.len()];
        let added = self.write_chunks(&mut built, &placement)?;
        self.flush_device()?;
        // Everything appended to the backup log so far is in these chunks: the start point
        // moves to the next append (SPEC.md §10.2).
        let (ofs_backup_start, lsn_backup_start) = self.backup_log.next_position();
        let delta = DeltaVersion {
            last_sequence: self.last_sequence,
            ofs_backup_start,
            lsn_backup_start,
            compaction_id: 0,
            deleted: Vec::new(),
            compact_pointers: Vec::new(),
            added,
        };
        self.commit(&delta)?;
        self.memtable = MemTable::default();
        self.backup_log.set_live_start(ofs_backup_start, lsn_backup_start);
        self.compact_while_needed()
    }

    /// Appends the delta version, or a new base version holding it when the version log
    /// needs a trim (SPEC.md §10.3), and makes it durable: the commit point.
    pub(crate) fn commit(&mut self, delta: &DeltaVersion) -> Result<()> {
        let mut next = self.version.clone();
        next.apply(delta).map_err(|error| Error::Recovery {
            path: self.device.path().display().to_string(),
            instance: self.instance,
            reason: format!("a new delta version contradicts the version: {error}"),
        })?;
        let delta_payload = delta.encode();
        let base_len = next.to_base(self.geometry, self.instance).encode().len();
        let ofs_area = self.version_log.context().ofs_area;
        // Trim while a base version still fits after this delta with room to grow: the next
        // commit's base is larger by what its delta adds (SPEC.md §10.3).
        let sector = self.geometry.sector_size as usize;
        let base_reserve = base_len + base_len / 4 + delta_payload.len() + sector;
        if self.version_log.fits(&[delta_payload.len(), base_reserve]) {
            let sn = self.sn;
            let pending = self
                .version_log
                .append(ObjectType::DeltaVersion, sn, &delta_payload)
                .map_err(|error| Error::Unsupported { reason: error.to_string() })?;
            self.write_pending(ofs_area, &pending)?;
            self.flush_device()?;
        } else {
            let sn = self.sn + 1;
            let base = next.to_base(self.geometry, self.instance);
            let pending = self.version_log.append(ObjectType::BaseVersion, sn, &base.encode()).map_err(|error| {
                Error::Unsupported {
                    reason: format!("the version log cannot hold a base version of this tree: {error}"),
                }
            })?;
            self.write_pending(ofs_area, &pending)?;
            self.flush_device()?;
            let last = pending.last().map(|write| (write.offset, write.lsn)).unwrap_or_default();
            self.version_log.set_live_start(last.0, last.1);
            self.version_log.set_sn(sn);
            self.sn = sn;
        }
        self.version = next;
        Ok(())
    }

    pub(crate) fn tail(&mut self, slot: u64) -> Result<Arc<Tail>> {
        if let Some(tail) = self.tails.get(&slot) {
            return Ok(Arc::clone(tail));
        }
        let path = self.device.path().display().to_string();
        let corrupt = |error| Error::Corrupt { path: path.clone(), error };
        let slot_offset = self.geometry.slot_offset(slot);
        let slot_size = self.geometry.slot_size;
        let footer_offset = slot_offset + slot_size - FOOTER_LEN as u64;
        let footer_bytes = self.device.read_vec(footer_offset, FOOTER_LEN as u64)?;
        let footer = Footer::decode(&footer_bytes, footer_offset, slot_size).map_err(corrupt)?;
        let tail_bytes = self
            .device
            .read_vec(slot_offset + u64::from(footer.ofs_index), u64::from(footer.len_index + footer.len_filter))?;
        let (index_bytes, filter_bytes) = tail_bytes.split_at(footer.len_index as usize);
        let index = lds_format::chunk::decode_index(index_bytes, slot_offset + u64::from(footer.ofs_index), &footer)
            .map_err(corrupt)?;
        let filter =
            Filter::decode(filter_bytes, slot_offset + u64::from(footer.ofs_filter), &footer).map_err(corrupt)?;
        let tail = Arc::new(Tail { index, filter });
        self.tails.insert(slot, Arc::clone(&tail));
        Ok(tail)
    }

    /// The newest entry for `key` in one sub-chunk: `Some(None)` is a tombstone.
    fn get_in_slot(&mut self, slot: u64, key: &[u8]) -> Result<Option<Option<Vec<u8>>>> {
        let tail = self.tail(slot)?;
        if !tail.filter.may_contain(key) {
            return Ok(None);
        }
        // The first block whose last key is at or after `key` is the only one that can
        // hold its newest version.
        let position = tail.index.partition_point(|entry| entry.last_key.as_slice() < key);
        let Some(entry) = tail.index.get(position) else { return Ok(None) };
        let offset = self.geometry.slot_offset(slot) + u64::from(entry.ofs_block);
        let block = self.device.read_vec(offset, u64::from(entry.len_block))?;
        let mut found = None;
        visit_block(&block, offset, |entry| {
            if found.is_none() && entry.key == key {
                found = Some(match entry.kind {
                    EntryKind::Put => Some(entry.value.to_vec()),
                    EntryKind::Delete => None,
                });
            }
        })
        .map_err(|error| Error::Corrupt { path: self.device.path().display().to_string(), error })?;
        Ok(found)
    }

    fn get_from_chunks(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        for level in 0..self.version.num_levels as u8 {
            let mut chunks: Vec<(u64, Vec<u64>)> = self
                .version
                .level(level)
                .into_iter()
                .filter(|chunk| chunk.smallest_key.as_slice() <= key && key <= chunk.largest_key.as_slice())
                .map(|chunk| (chunk.largest_seq, chunk.slots().collect()))
                .collect();
            // Level 0 chunks overlap: the newest holds the newest version.
            chunks.sort_by_key(|chunk| std::cmp::Reverse(chunk.0));
            for (_, slots) in chunks {
                for slot in slots {
                    if let Some(found) = self.get_in_slot(slot, key)? {
                        return Ok(found);
                    }
                }
            }
        }
        Ok(None)
    }

    fn range(&mut self, start: &[u8], end: Option<&[u8]>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let in_range = |key: &[u8]| key >= start && end.is_none_or(|end| key < end);
        // Newest version of each key in range over every source, by sequence number.
        let mut newest: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)> = BTreeMap::new();
        let mut offer = |key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]| {
            if !in_range(key) {
                return;
            }
            let candidate = (sequence, (kind == EntryKind::Put).then(|| value.to_vec()));
            match newest.get(key) {
                Some((existing, _)) if *existing >= sequence => {}
                _ => {
                    newest.insert(key.to_vec(), candidate);
                }
            }
        };
        for (key, sequence, kind, value) in self.memtable.range_from(start) {
            if end.is_some_and(|end| key >= end) {
                break;
            }
            offer(key, sequence, kind, value);
        }
        let path = self.device.path().display().to_string();
        let slots: Vec<u64> = self
            .version
            .chunks
            .values()
            .filter(|chunk| {
                chunk.largest_key.as_slice() >= start && end.is_none_or(|end| chunk.smallest_key.as_slice() < end)
            })
            .flat_map(|chunk| chunk.slots().collect::<Vec<_>>())
            .collect();
        for slot in slots {
            let tail = self.tail(slot)?;
            for entry in &tail.index {
                if entry.last_key.as_slice() < start {
                    continue;
                }
                let offset = self.geometry.slot_offset(slot) + u64::from(entry.ofs_block);
                let block = self.device.read_vec(offset, u64::from(entry.len_block))?;
                visit_block(&block, offset, |entry| offer(entry.key, entry.sequence, entry.kind, entry.value))
                    .map_err(|error| Error::Corrupt { path: path.clone(), error })?;
            }
        }
        Ok(newest.into_iter().filter_map(|(key, (_, value))| value.map(|value| (key, value))).collect())
    }
}
