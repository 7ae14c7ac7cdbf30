//! Opening a store: choose the label, recover every instance's version log for the online
//! map and the opened instance's backup log (once each, through the format crate's
//! `recover_instance`), refuse damage no crash explains, replay the backup log into the
//! memtable. Recovery writes nothing (SPEC.md §9.5); a read-only open never writes at all.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use lds_format::algorithms::instance::recover_instance;
use lds_format::algorithms::recovery::{online_map, recover_version_log, VersionLogState};
use lds_format::algorithms::writer::LogAppender;
use lds_format::geometry::LogKind;
use lds_format::label::Label;
use lds_format::log::area_context;
use lds_format::version::meta::ChunkMeta;
use lds_volume::volume::choose_label;
use lds_volume::{BlockDevice, Members, OpenMode};

use crate::db::Db;
use crate::error::{Error, RecoveryError, Result};
use crate::memtable::MemTable;
use crate::options::Options;
use crate::state::{Shared, SlotMap, TreeState, WriterState};
use crate::table::cache::TableCache;
use crate::version::published::{Published, Redirect};

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

impl Db {
    /// Opens instance `options.instance` of the volume at `path` for reading and writing,
    /// under an exclusive lock, and recovers it. Fails at once while another process,
    /// reader or writer, holds the volume.
    pub fn open(path: &Path, options: Options) -> Result<Self> {
        Self::open_with_report(path, options).map(|(db, _)| db)
    }

    /// Opens for writing and returns what recovery found.
    pub fn open_with_report(path: &Path, options: Options) -> Result<(Self, RecoveryReport)> {
        Self::open_waiting(path, options, Duration::ZERO)
    }

    /// Opens for writing, waiting at most `wait` for other processes to release the volume.
    pub fn open_waiting(path: &Path, options: Options, wait: Duration) -> Result<(Self, RecoveryReport)> {
        let device = Members::open(path, OpenMode::ReadWrite, wait)?;
        Self::open_device(Arc::new(device), path, options)
    }

    /// Opens read-only under a shared lock: any number of read-only opens run at once, none
    /// while a writer holds the volume (after waiting at most `wait`). The backup log is
    /// replayed into memory only, no background thread runs, and nothing is ever written.
    pub fn open_read_only(path: &Path, options: Options, wait: Duration) -> Result<(Self, RecoveryReport)> {
        let device = Members::open(path, OpenMode::ReadOnlyLocked, wait)?;
        Self::open_device_read_only(Arc::new(device), path, options)
    }

    /// Opens a volume on any device (the crash simulator's, for one) for writing; `path`
    /// names it in messages.
    pub fn open_device(device: Arc<dyn BlockDevice>, path: &Path, options: Options) -> Result<(Self, RecoveryReport)> {
        open(device, path, options, false)
    }

    /// Opens a volume on any device read-only (see `open_read_only`).
    pub fn open_device_read_only(
        device: Arc<dyn BlockDevice>,
        path: &Path,
        options: Options,
    ) -> Result<(Self, RecoveryReport)> {
        open(device, path, options, true)
    }

    /// Opens every instance of the volume at `path` for writing, under one exclusive lock
    /// (SPEC.md §13): a store per instance, in instance order, each with its own logs, memtable
    /// and background thread, all sharing the device, one online map and one allocation
    /// cursor, so that they write at the same time without ever taking the same slot.
    /// `options.instance` is ignored. Fails at once while another process holds the volume.
    pub fn open_instances(path: &Path, options: Options) -> Result<Vec<(Self, RecoveryReport)>> {
        let device = Members::open(path, OpenMode::ReadWrite, Duration::ZERO)?;
        Self::open_instances_device(Arc::new(device), path, options)
    }

    /// `open_instances` on any device (the crash simulator's, for one).
    pub fn open_instances_device(
        device: Arc<dyn BlockDevice>,
        path: &Path,
        options: Options,
    ) -> Result<Vec<(Self, RecoveryReport)>> {
        let path_string = path.display().to_string();
        let (_, _, label) = choose_label(device.as_ref(), &path_string)?;
        if !label.writable() {
            return Err(Error::ReadOnlyFeatures { path: path_string, features: label.features_ro_compat });
        }
        let mut recovered = Vec::new();
        for instance in 0..label.geometry.instance_count {
            recovered.push(recover_one(device.as_ref(), &label, instance, &path_string)?);
        }
        let pending: Vec<(u32, u64)> = recovered.iter().flat_map(Recovered::pending_slots).collect();
        let slots = slot_map(
            &label,
            recovered.iter().map(|found| (found.instance, &found.recovery.version_log)),
            &pending,
            &path_string,
        )?;
        let slots = Arc::new(Mutex::new(slots));
        let mut stores = Vec::new();
        for found in recovered {
            let options = Options { instance: found.instance, ..options.clone() };
            stores.push(assemble(Arc::clone(&device), path, &label, found, Arc::clone(&slots), options, false)?);
        }
        Ok(stores)
    }
}

/// An instance's recovery, checked: at most one unfinished compaction, whose inputs the
/// version holds.
struct Recovered {
    instance: u32,
    recovery: lds_format::algorithms::instance::InstanceRecovery,
    backup_area: Vec<u8>,
    journal: Option<lds_format::version::payload::CompactionJournal>,
    /// Value chunks the replayed batches point to that the version does not list (SPEC.md
    /// §8.6): in use, added by the flush of their memtable.
    pending: BTreeMap<u64, lds_format::value::ValueChunkMeta>,
}

impl Recovered {
    fn pending_slots(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.pending.values().map(|chunk| (self.instance, chunk.slot))
    }
}

fn recovery_error(path: &str, instance: u32, source: RecoveryError) -> Error {
    Error::Recovery { path: path.to_string(), instance, source: Box::new(source) }
}

/// Recovers one instance's version log and backup log (SPEC.md §9.2, §9.3).
fn recover_one(device: &dyn BlockDevice, label: &Label, instance: u32, path: &str) -> Result<Recovered> {
    let geometry = &label.geometry;
    let (version_offset, version_len) = geometry.log_area(LogKind::Version, instance);
    let (backup_offset, backup_len) = geometry.log_area(LogKind::Backup, instance);
    let version_area = device.read_vec(version_offset, version_len)?;
    let backup_area = device.read_vec(backup_offset, backup_len)?;
    let recovery = recover_instance(geometry, instance, &version_area, &backup_area)
        .map_err(|error| recovery_error(path, instance, error.into()))?;
    // At most one unfinished compaction (the engine runs one at a time), whose inputs the
    // version holds: anything else is damage (problem 601 of the checker).
    let unfinished = &recovery.version_log.unfinished_compactions;
    if unfinished.len() > 1 {
        let ids = unfinished.keys().copied().collect();
        return Err(recovery_error(path, instance, RecoveryError::UnfinishedCompactions { ids }));
    }
    let journal = unfinished.values().next().cloned();
    let mut pending = BTreeMap::new();
    if label.has_value_chunks() && recovery.damage().is_none() {
        let mut pointers = Vec::new();
        let context = area_context(geometry, LogKind::Backup, instance);
        recovery
            .replay(&backup_area, &context, |_, kind, _, value| {
                if kind == lds_format::entry::EntryKind::Pointer {
                    pointers.push(value.to_vec());
                }
            })
            .map_err(|source| Error::Corrupt { path: path.to_string(), source })?;
        let version = &recovery.version_log.version;
        pending = crate::values::pending_of_replay(device, geometry, instance, version, &pointers).map_err(
            |(value_chunk_id, slot, reason)| {
                recovery_error(path, instance, RecoveryError::PendingValueMissing { value_chunk_id, slot, reason })
            },
        )?;
    }
    if let Some(journal) = &journal {
        if let Some(&missing) = journal.inputs.iter().find(|id| !recovery.version_log.version.chunks.contains_key(id)) {
            return Err(recovery_error(
                path,
                instance,
                RecoveryError::JournalInputMissing { compaction_id: journal.compaction_id, chunk_id: missing },
            ));
        }
    }
    Ok(Recovered { instance, recovery, backup_area, journal, pending })
}

/// The online map of every instance's version (SPEC.md §9.4). Slots every geometry in force
/// holds: after a crash in the middle of a resize the label and a base version may disagree
/// (SPEC.md §14), and a delta version must not add a chunk on a slot its base version's
/// geometry lacks. Slots no device holds (a removed device's, SPEC.md §4.3) are never
/// allocated: marked in use, and not counted as used.
fn slot_map<'a>(
    label: &Label,
    versions: impl Iterator<Item = (u32, &'a VersionLogState)> + Clone,
    pending: &[(u32, u64)],
    path: &str,
) -> Result<SlotMap> {
    let usable_slots =
        versions.clone().map(|(_, state)| state.version.num_slots).fold(label.geometry.num_slots, u64::min);
    let mut online = online_map(
        usable_slots,
        versions.map(|(instance, state)| (instance, &state.version, &state.unfinished_compactions)),
    )
    .map_err(|conflict| {
        recovery_error(
            path,
            conflict.instances.1,
            RecoveryError::SlotConflict { slot: conflict.slot, instances: conflict.instances },
        )
    })?;
    // Value chunks named only by replayed batches (SPEC.md §8.6).
    for &(instance, slot) in pending {
        match online.get_mut(slot as usize) {
            Some(used) if !*used => *used = true,
            _ => {
                return Err(recovery_error(
                    path,
                    instance,
                    RecoveryError::PendingValueMissing {
                        value_chunk_id: 0,
                        slot,
                        reason: "the slot is past the slot area or used by a chunk".into(),
                    },
                ))
            }
        }
    }
    let mut absent = 0u64;
    for (slot, used) in online.iter_mut().enumerate() {
        if !label.slot_present(slot as u64) {
            absent += u64::from(!*used);
            *used = true;
        }
    }
    let slots_in_use = online.iter().filter(|&&used| used).count() as u64 - absent;
    Ok(SlotMap { online, slots_in_use, slots_in_use_peak: slots_in_use, cursor: 0 })
}

fn open(device: Arc<dyn BlockDevice>, path: &Path, options: Options, read_only: bool) -> Result<(Db, RecoveryReport)> {
    let path_string = path.display().to_string();
    let (_, _, label) = choose_label(device.as_ref(), &path_string)?;
    let geometry = label.geometry;
    if !read_only && !label.writable() {
        return Err(Error::ReadOnlyFeatures { path: path_string, features: label.features_ro_compat });
    }
    let instance = options.instance;
    if instance >= geometry.instance_count {
        return Err(Error::NoSuchInstance { path: path_string, instance, instance_count: geometry.instance_count });
    }
    if options.value_separation_min.is_some() && !label.has_value_chunks() {
        return Err(Error::FeatureMissing {
            path: path_string,
            what: "key-value separation (technique kv-separation)",
            feature: "value_chunks",
            hint: "format it with lds mkfs --value-chunks",
        });
    }
    if options.size_tiered_threshold > 0
        && (options.value_separation_min.is_some() || options.level0_overlap_min.is_some())
    {
        return Err(Error::InvalidArgument {
            reason: "technique size-tiered does not go with kv-separation (its collection rewrites disjoint levels) or triad-disk (it defers level-0 merges into level 1)".into(),
        });
    }
    if options.forest_fanout > 0
        && (options.size_tiered_threshold > 0
            || options.value_separation_min.is_some()
            || options.level0_overlap_min.is_some())
    {
        return Err(Error::InvalidArgument {
            reason: "technique forest does not go with size-tiered (both replace leveled compaction), kv-separation (its collection rewrites levels in place) or triad-disk (it defers level-0 merges into level 1)".into(),
        });
    }
    if options.log_tables && !label.has_log_tables() {
        return Err(Error::FeatureMissing {
            path: path_string,
            what: "log chunks (technique triad-log)",
            feature: "log_tables",
            hint: "format it with lds mkfs --log-tables",
        });
    }
    if options.log_tables && (options.size_tiered_threshold > 0 || options.forest_fanout > 0) {
        return Err(Error::InvalidArgument {
            reason: "technique triad-log does not go with size-tiered or forest (its level-0 merges are the leveled ones, which the retained backup log calls for early)".into(),
        });
    }
    if options.level0_overlap_min.is_some() && !label.has_chunk_sketches() {
        return Err(Error::FeatureMissing {
            path: path_string,
            what: "deferred level-0 merges (technique triad-disk)",
            feature: "chunk_sketches",
            hint: "format it with lds mkfs --chunk-sketches",
        });
    }
    // The opened instance's logs; every other instance's version log, for the online map
    // (and its backup log on a volume with value chunks: its pending value chunks are in use).
    let found = recover_one(device.as_ref(), &label, instance, &path_string)?;
    let mut others = Vec::new();
    let mut pending: Vec<(u32, u64)> = found.pending_slots().collect();
    for other in (0..geometry.instance_count).filter(|&other| other != instance) {
        if label.has_value_chunks() {
            let recovered = recover_one(device.as_ref(), &label, other, &path_string)?;
            pending.extend(recovered.pending_slots());
            others.push((other, recovered.recovery.version_log));
            continue;
        }
        let (offset, len) = geometry.log_area(LogKind::Version, other);
        let area = device.read_vec(offset, len)?;
        let state = recover_version_log(&area, &area_context(&geometry, LogKind::Version, other))
            .map_err(|error| recovery_error(&path_string, other, error.into()))?;
        others.push((other, state));
    }
    let slots = slot_map(
        &label,
        std::iter::once((instance, &found.recovery.version_log))
            .chain(others.iter().map(|(other, state)| (*other, state))),
        &pending,
        &path_string,
    )?;
    assemble(device, path, &label, found, Arc::new(Mutex::new(slots)), options, read_only)
}

/// Builds the store of one recovered instance on the shared online map: refuses damage no
/// crash explains, replays the backup log into the memtable, and starts the background thread.
fn assemble(
    device: Arc<dyn BlockDevice>,
    path: &Path,
    label: &Label,
    found: Recovered,
    slots: Arc<Mutex<SlotMap>>,
    options: Options,
    read_only: bool,
) -> Result<(Db, RecoveryReport)> {
    let path_string = path.display().to_string();
    let geometry = label.geometry;
    let Recovered { instance, recovery, backup_area, journal, pending } = found;
    // Damage that no crash explains would make recovery serve an older state silently and
    // then overwrite what a repair could use (docs/reliability.md I7): refuse instead.
    if let Some(damage) = recovery.damage() {
        return Err(recovery_error(&path_string, instance, damage.into()));
    }
    let state = &recovery.version_log;
    let version = state.version.clone();
    let published = Published::new(Arc::new(version.clone()), journal.as_ref().map(Redirect::of));
    if let Some((first, second)) = published.levels.overlap() {
        return Err(recovery_error(
            &path_string,
            instance,
            RecoveryError::LevelOverlap { level: first.level, chunks: (first.chunk_id, second.chunk_id) },
        ));
    }
    let Some(backup) = recovery.backup_state() else {
        return Err(Error::Invariant { what: "a backup log without damage has no state".into() });
    };
    let backup_context = area_context(&geometry, LogKind::Backup, instance);
    let log_tables = options.log_tables && label.has_log_tables();
    let memtable = MemTable::with_capacity(options.write_buffer_size);
    let memtable = if log_tables { memtable.tracking_batches() } else { memtable };
    // Where the replayed batches lie: a flush of their memtable may name them (TRIAD-LOG).
    for batch in &backup.batches {
        let position = lds_format::log::LogPosition { offset: batch.offset, lsn: batch.lsn };
        memtable.record_batch(batch.first_sequence, batch.num_entries as usize, position);
    }
    let mut entries_replayed = 0;
    let last_sequence = recovery
        .replay(&backup_area, &backup_context, |sequence, kind, key, value| {
            memtable.insert(key, sequence, kind, value);
            entries_replayed += 1;
        })
        .map_err(|source| Error::Corrupt { path: path_string.clone(), source })?;
    // Objects of a crashed session at or past the head could continue the chain once a new
    // append fills the gap before them (SPEC.md §9.3, §9.5).
    let raise_sn_before_append = matches!(
        &recovery.backup,
        lds_format::algorithms::instance::BackupRecovery::Recovered { stale_ahead: true, .. }
    );
    let version_log = LogAppender::new(
        area_context(&geometry, LogKind::Version, instance),
        state.head,
        state.base_offset,
        state.base_lsn,
    );
    // The live region of the ring starts at the retention start: the objects the version's
    // log chunks name are kept (SPEC.md §8.9, §10.1).
    let retention = version.retention_start();
    let backup_log = LogAppender::new(backup_context, backup.head, retention.offset, retention.lsn);
    let mut options = options;
    options.write_buffer_size = options.write_buffer_size.min(geometry.len_backup_log as usize / 3).max(1);
    let cache = TableCache::new(options.block_cache_bytes, options.tail_cache_bytes);
    let search_pool = if options.search_threads > 1 {
        Some(crate::pool::SearchPool::new(options.search_threads - 1).map_err(|source| Error::Thread { source })?)
    } else {
        None
    };
    // The cleaned inputs of an unfinished compaction are free on the media (SPEC.md §12), but
    // the version names them until the compaction's final delta: only its own outputs reuse
    // them (a flush adding a chunk there would contradict the version). Another instance
    // may have taken one since; that one stays its.
    let mut compaction_pool = Vec::new();
    let slots_in_use = {
        let mut map = slots.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let (Some(journal), false) = (&journal, read_only) {
            for &cleaned in &journal.cleaned {
                for slot in version.chunks.get(&cleaned).into_iter().flat_map(ChunkMeta::slots) {
                    if let Some(used) = map.online.get_mut(slot as usize).filter(|used| !**used) {
                        *used = true;
                        compaction_pool.push(slot);
                    }
                }
            }
        }
        map.slots_in_use += compaction_pool.len() as u64;
        map.slots_in_use_peak = map.slots_in_use_peak.max(map.slots_in_use);
        map.slots_in_use
    };
    let report = RecoveryReport {
        sn: state.sn,
        base_offset: state.base_offset,
        deltas_replayed: state.live_count() - 1,
        chunks: version.chunks.len(),
        batches_replayed: backup.batches.len(),
        entries_replayed,
        last_sequence,
        slots_in_use: slots_in_use - compaction_pool.len() as u64,
    };
    let background = options.background && !read_only;
    let next_value_id =
        pending.keys().next_back().map_or(version.next_value_chunk_id, |id| version.next_value_chunk_id.max(id + 1));
    let value_separation_min = options.value_separation_min.filter(|_| label.has_value_chunks()).map(|min| min.max(1));
    // A value goes around the backup log when it is large, or would not fit a batch.
    let batch_value_max = (backup_context.payload_len_max() / 4) as usize;
    let value_direct_min =
        value_separation_min.map(|min| options.value_direct_min.min(batch_value_max).max(min).max(1));
    let shared = Arc::new(Shared {
        device,
        slots,
        geometry,
        encoding: lds_format::algorithms::pack::ChunkEncoding::of_label(label),
        instance,
        options,
        path: path.to_path_buf(),
        read_only,
        writer: Mutex::new(WriterState {
            backup_log,
            last_sequence,
            buffer: Vec::new(),
            buffer_offset: 0,
            gathered_lsn: 0,
            drained_lsn: 0,
            open: None,
            known: None,
        }),
        state: Mutex::new(TreeState {
            mem: Arc::new(memtable),
            imm: None,
            published: Arc::new(published),
            sn: state.sn,
            version_log,
            pending_free: Vec::new(),
            compaction_pool,
            uncached: Vec::new(),
            compaction_id_max: state.compaction_id_max,
            last_journal: journal.clone(),
            resume: if read_only { None } else { journal.clone() },
            merging: false,
            merge_delta_reserve: journal
                .as_ref()
                .map_or(0, |journal| crate::compaction::merge::delta_estimate(&version, &journal.inputs)),
            backup_start_update: None,
            retention,
            log_holds: Vec::new(),
            snapshots: BTreeMap::new(),
            poisoned: None,
            space_full: false,
            raise_sn_before_append,
            compaction_stalled: false,
            last_flush: None,
            manual_compaction: None,
            shutting_down: false,
            commits: 0,
            pending_values: pending,
            level0_sketches: BTreeMap::new(),
        }),
        work: Condvar::new(),
        progress: Condvar::new(),
        published: AtomicU64::new(last_sequence),
        synced: Mutex::new(last_sequence),
        // Nothing is known durable until this session's first flush: recovered objects may
        // still sit in a volatile cache (a process killed, not a power loss).
        sync_watermark: label.has_sync_watermark(),
        drained_lsn: AtomicU64::new(0),
        durable_lsn: AtomicU64::new(0),
        cache,
        search_pool,
        merger: Mutex::new(None),
        merge_buffers: Mutex::new(Vec::new()),
        log_region_buffer: Mutex::new(Vec::new()),
        log_unique_percent: AtomicU64::new(100),
        counters: crate::state::Counters::default(),
        value_chunks: label.has_value_chunks(),
        sketches: label.has_chunk_sketches(),
        log_tables,
        value_separation_min,
        value_direct_min,
        next_value_id: AtomicU64::new(next_value_id),
    });
    // Level pinning: the pinned levels' tails are read now (SPEC.md §8.2, §8.3).
    let published = Arc::clone(&shared.lock_state().published);
    crate::commit::repin(&shared, &published);
    if shared.options.level0_overlap_min.is_some() {
        let sketches =
            crate::compaction::defer::read_sketches(shared.device.as_ref(), &shared.geometry, &published.version);
        shared.lock_state().level0_sketches = sketches;
    }
    let background = if background {
        Some(crate::worker::spawn(Arc::clone(&shared)).map_err(|source| Error::Thread { source })?)
    } else {
        None
    };
    Ok((Db { shared, background }, report))
}
