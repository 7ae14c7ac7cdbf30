//! The write path: a batch becomes one backup log append (gathered in memory unless synced,
//! SPEC.md §10.1), then entries in the memtable; synced writers share device flushes (group
//! commit); a full memtable is frozen for the background work (LevelDB's MakeRoomForWrite).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use lds_format::algorithms::writer::AppendError;
use lds_format::batch::{encode_refs, refs_encoded_len, watermark_for, EntryRef};
use lds_format::entry::{EntryKind, SEQUENCE_MAX};
use lds_format::geometry::LogKind;
use lds_format::log::ObjectType;

use crate::batch::WriteBatch;
use crate::db::Db;
use crate::error::{Error, Result};
use crate::memtable::MemTable;
use crate::options::WriteOptions;
use crate::state::{Frozen, Shared, WriterState};

/// Rounds of waiting for the background thread a writer makes at most before it reports the
/// store stuck (each round ends when the background thread reports progress).
const ROOM_WAITS_MAX: u64 = 1 << 20;

/// How long a writer waits at most for a level-0 merge to release the backup log's retained
/// region (TRIAD-LOG), and how often it looks again (readers dropping an old version wake
/// nobody).
const LOG_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(300);
const LOG_WAIT_ROUND: std::time::Duration = std::time::Duration::from_millis(10);

impl Db {
    /// Sets `key` to `value`.
    pub fn put(&self, key: &[u8], value: &[u8], options: WriteOptions) -> Result<()> {
        self.write_entries(&[(EntryKind::Put, key, value)], options)
    }

    /// Deletes `key`.
    pub fn delete(&self, key: &[u8], options: WriteOptions) -> Result<()> {
        self.write_entries(&[(EntryKind::Delete, key, &[])], options)
    }

    /// The largest batch `write` accepts, in `WriteBatch::encoded_len` bytes: half the
    /// backup log's object limit, so that a batch never waits on a log it cannot fit.
    pub fn batch_len_max(&self) -> u64 {
        self.shared.lock_writer().backup_log.context().payload_len_max() / 2
    }

    /// Applies a batch atomically: one backup log object, then the memtable.
    pub fn write(&self, batch: &WriteBatch, options: WriteOptions) -> Result<()> {
        let entries: Vec<EntryRef<'_>> =
            batch.entries.iter().map(|entry| (entry.kind, entry.key.as_slice(), entry.value.as_slice())).collect();
        self.write_entries(&entries, options)
    }

    /// Applies borrowed entries atomically (`put` and `delete` copy nothing before the log).
    fn write_entries(&self, entries: &[EntryRef<'_>], options: WriteOptions) -> Result<()> {
        let shared = &self.shared;
        if shared.read_only {
            return Err(Error::ReadOnly { path: shared.path_string() });
        }
        if entries.is_empty() {
            return Ok(());
        }
        // With key-value separation a value may pass a slot (SPEC.md §8.6, §16).
        let (value_len_max, limit) = match shared.value_separation_min {
            Some(_) => (lds_format::value::VALUE_LEN_MAX, "2^30 (the value pointer's limit)".to_string()),
            None => (shared.geometry.slot_size / 4, format!("slot_size / 4 = {}", shared.geometry.slot_size / 4)),
        };
        for &(kind, key, value) in entries {
            if key.is_empty() || key.len() > usize::from(u16::MAX) {
                return Err(Error::InvalidArgument {
                    reason: format!("a key of {} bytes: keys are 1 to 65535 bytes", key.len()),
                });
            }
            if value.len() as u64 > value_len_max {
                return Err(Error::InvalidArgument {
                    reason: format!("a value of {} bytes exceeds {limit}", value.len()),
                });
            }
            if kind == EntryKind::Pointer {
                return Err(Error::InvalidArgument { reason: "a pointer entry is the engine's own".into() });
            }
        }
        // Large values first go to value chunks of their own, flushed before the batch that
        // points to them (SPEC.md §8.6); if the batch is not appended, they are given up.
        let Some(direct) = crate::values::write_direct(shared, entries)? else {
            return self.append_entries(entries, options).map(|_| ());
        };
        let separated = direct.entries(entries);
        match self.append_entries(&separated, options) {
            Err(error)
                if matches!(
                    error,
                    Error::InvalidArgument { .. } | Error::Exhausted { .. } | Error::SpaceFull { .. }
                ) =>
            {
                direct.abandon(shared);
                Err(error)
            }
            other => other.map(|_| ()),
        }
    }

    /// Appends entries to the backup log and inserts them into the memtable.
    fn append_entries(&self, entries: &[EntryRef<'_>], options: WriteOptions) -> Result<()> {
        let shared = &self.shared;
        let mut writer = shared.lock_writer();
        let payload_len = refs_encoded_len(entries) as u64;
        let batch_len_max = writer.backup_log.context().payload_len_max() / 2;
        if payload_len > batch_len_max {
            return Err(Error::InvalidArgument {
                reason: format!(
                    "a batch of {payload_len} bytes exceeds {batch_len_max} (half the backup log's object limit)"
                ),
            });
        }
        self.raise_sn_if_needed(&mut writer)?;
        let mut force_freeze = false;
        // A full log forces a freeze (and its flush moves the backup start); a log still full
        // after that is held by log chunks (TRIAD-LOG), and the writer waits for the level-0
        // merge that releases them (`wait_for_log_room`), which fails the write when it cannot.
        let mut rounds = 0u64;
        let (pending, mem, first_sequence, last_sequence, len_payload) = loop {
            rounds += 1;
            if rounds > ROOM_WAITS_MAX {
                return Err(Error::Invariant { what: "a writer found the backup log full too many times".into() });
            }
            let mem = self.make_room(&mut writer, force_freeze)?;
            // After the room is made: a freeze may have written held entries (TRIAD-MEM).
            let first_sequence = writer.last_sequence + 1;
            let last_sequence = first_sequence + entries.len() as u64 - 1;
            if last_sequence > SEQUENCE_MAX {
                return Err(Error::Exhausted { what: "sequence numbers (2^56)" });
            }
            // The sync watermark (SPEC.md §7.1): what the last completed flush made durable.
            let synced_lsn_low = if shared.sync_watermark {
                watermark_for(shared.durable_lsn.load(Ordering::Acquire), writer.backup_log.head().next_lsn)
            } else {
                0
            };
            // The batch joins the object still gathering in the buffer when it can (one header
            // for many small batches, SPEC.md §7).
            if writer.join_open(first_sequence, entries) {
                break (Vec::new(), mem, first_sequence, last_sequence, 0);
            }
            let payload = encode_refs(first_sequence, entries, synced_lsn_low);
            let sn = shared.lock_state().sn;
            match writer.backup_log.append(ObjectType::WriteBatch, sn, &payload) {
                Ok(pending) => break (pending, mem, first_sequence, last_sequence, payload.len()),
                // The live region reached the start point: a flush of the memtable moves it.
                Err(AppendError::LogFull { .. }) if !force_freeze => force_freeze = true,
                Err(AppendError::LogFull { .. }) => {
                    self.wait_for_log_room(&mut writer, payload.len())?;
                    force_freeze = false;
                }
                Err(AppendError::LsnExhausted { .. }) => {
                    return Err(Error::Exhausted { what: "backup log sequence numbers" });
                }
                Err(error) => return Err(Error::InvalidArgument { reason: error.to_string() }),
            }
        };
        let mut written =
            pending.iter().try_for_each(|write| writer.gather(shared.device.as_ref(), write.offset, &write.bytes));
        // A new batch object (the last write of an append) stays open for the next batches
        // while it waits in the buffer.
        if let (Some(object), true) = (pending.last(), written.is_ok()) {
            let sn = writer.backup_log.head().sn;
            let header = writer.backup_log.object_header(ObjectType::WriteBatch, sn, object.lsn, object.offset);
            writer.open_last(header, object.bytes.len(), len_payload, entries.len() as u32, first_sequence);
        }
        writer.gathered_lsn = writer.backup_log.head().next_lsn - 1;
        if written.is_ok() && options.sync {
            written = writer.drain_synced(shared.device.as_ref());
        } else if written.is_ok() && writer.buffer.len() >= shared.options.log_buffer_bytes {
            written = writer.drain(shared.device.as_ref());
        }
        shared.drained_lsn.store(writer.drained_lsn, Ordering::Release);
        if let Err(error) = written {
            let mut state = shared.lock_state();
            return Err(shared.poison(&mut state, error.into()));
        }
        // Where the batch lies (its object, which other batches may share), for a flush's log
        // references (TRIAD-LOG).
        let position = match pending.last() {
            Some(object) => Some(lds_format::log::LogPosition { offset: object.offset, lsn: object.lsn }),
            None => writer.open_position(),
        };
        if let Some(position) = position {
            mem.record_batch(first_sequence, entries.len(), position);
        }
        for (index, &(kind, key, value)) in entries.iter().enumerate() {
            mem.insert(key, first_sequence + index as u64, kind, value);
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
        Shared::check_poisoned(&state)?;
        // The base version that raises the SN cannot be written while a journaled compaction
        // is unfinished (SPEC.md §10.3): it finishes first.
        if state.last_journal.is_some() {
            drop(state);
            if let Err(error) = crate::worker::finish_merge(shared) {
                let mut state = shared.lock_state();
                return Err(shared.poison(&mut state, error));
            }
            state = shared.lock_state();
        }
        if let Err(error) = crate::commit::raise_sn(shared, &mut state) {
            return Err(shared.poison(&mut state, error));
        }
        writer.close_open();
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
        // backup log: flushing its area covers them (SPEC.md §2.5).
        let target = shared.published.load(Ordering::Acquire);
        let target_lsn = shared.drained_lsn.load(Ordering::Acquire);
        let (ofs_area, len_area) = shared.geometry.log_area(LogKind::Backup, shared.instance);
        if let Err(error) = shared.device.flush_range(ofs_area, len_area) {
            let mut state = shared.lock_state();
            return Err(shared.poison(&mut state, error.into()));
        }
        *synced = target;
        shared.durable_lsn.fetch_max(target_lsn, Ordering::AcqRel);
        Ok(())
    }

    /// TRIAD-MEM (`crate::hot`): the hot entries of the memtable just frozen, written again to
    /// the backup log after its backup start (and out to the device at once) and into the new
    /// memtable, are left out of its flush. Nothing is held while a snapshot is live, or when
    /// the log has no room for them.
    fn hold_hot(&self, writer: &mut WriterState, state: &mut crate::state::TreeState, mut frozen: Frozen) -> Frozen {
        let shared = &self.shared;
        let percent = shared.options.hot_buffer_percent.min(90);
        // (Nor before the SN is raised after a recovery: the raise comes before any append.)
        if percent == 0 || !state.snapshots.is_empty() || state.raise_sn_before_append {
            return frozen;
        }
        let batch_len_max = writer.backup_log.context().payload_len_max() / 2;
        let bytes_max = shared.options.write_buffer_size / 100 * usize::from(percent);
        let hot = crate::hot::select(&frozen.table, bytes_max);
        if hot.is_empty() {
            return frozen;
        }
        let mut entries: Vec<EntryRef<'_>> =
            hot.iter().map(|(kind, key, value)| (*kind, key.as_slice(), value.as_slice())).collect();
        // One batch: the hottest that fit it.
        if refs_encoded_len(&entries) as u64 > batch_len_max {
            let fitting = (0..entries.len())
                .collect::<Vec<_>>()
                .partition_point(|&count| refs_encoded_len(&entries[..=count]) as u64 <= batch_len_max);
            entries.truncate(fitting);
        }
        let first_sequence = writer.last_sequence + 1;
        if entries.is_empty() || first_sequence + entries.len() as u64 - 1 > SEQUENCE_MAX {
            return frozen;
        }
        let last_sequence = first_sequence + entries.len() as u64 - 1;
        let synced_lsn_low = if shared.sync_watermark {
            watermark_for(shared.durable_lsn.load(Ordering::Acquire), writer.backup_log.head().next_lsn)
        } else {
            0
        };
        let payload = encode_refs(first_sequence, &entries, synced_lsn_low);
        // No room: the flush takes everything, as without the technique.
        let Ok(pending) = writer.backup_log.append(ObjectType::WriteBatch, state.sn, &payload) else {
            return frozen;
        };
        // Written out now: the flush's device flush makes them durable before its delta
        // version stops the replay of the frozen memtable's part of the log.
        let mut written =
            pending.iter().try_for_each(|write| writer.gather(shared.device.as_ref(), write.offset, &write.bytes));
        writer.gathered_lsn = writer.backup_log.head().next_lsn - 1;
        if written.is_ok() {
            written = writer.drain(shared.device.as_ref());
        }
        shared.drained_lsn.store(writer.drained_lsn, Ordering::Release);
        if let Err(error) = written {
            // Poisoned: no write is accepted from here on; the frozen memtable keeps every
            // entry (nothing is held).
            shared.poison(state, error.into());
            return frozen;
        }
        if let Some(object) = pending.last() {
            let position = lds_format::log::LogPosition { offset: object.offset, lsn: object.lsn };
            state.mem.record_batch(first_sequence, entries.len(), position);
        }
        for (index, &(kind, key, value)) in entries.iter().enumerate() {
            state.mem.insert(key, first_sequence + index as u64, kind, value);
        }
        writer.last_sequence = last_sequence;
        shared.published.store(last_sequence, Ordering::Release);
        shared.counters.hot_entries_held.fetch_add(entries.len() as u64, Ordering::Relaxed);
        frozen.held = entries.iter().map(|(_, key, _)| key.to_vec()).collect();
        frozen
    }

    /// Waits until the backup log has room for an append of `payload_len` bytes, when its
    /// live region is held by log chunks (TRIAD-LOG, SPEC.md §8.9) after a forced freeze: the
    /// level-0 merge that the retained region calls for (`crate::logs::pressure`) releases it,
    /// once no reader holds a version naming what it released. Fails when no merge can run,
    /// or after `LOG_WAIT_MAX`.
    fn wait_for_log_room(&self, writer: &mut WriterState, payload_len: usize) -> Result<()> {
        let shared = &self.shared;
        let started = std::time::Instant::now();
        let mut state = shared.lock_state();
        shared.counters.log_waits.fetch_add(1, Ordering::Relaxed);
        // Bounded by LOG_WAIT_MAX: each round waits at most LOG_WAIT_ROUND.
        loop {
            if !shared.options.background {
                state = crate::worker::run_inline(shared, state);
            }
            Shared::check_poisoned(&state)?;
            crate::slots::reclaim(&mut state, &shared.slots, &shared.cache);
            let start = crate::logs::writer_start(&mut state);
            state.backup_start_update = None;
            writer.backup_log.set_live_start(start.offset, start.lsn);
            if writer.backup_log.fits(&[payload_len]) {
                return Ok(());
            }
            let stuck = !shared.options.background || state.space_full || state.compaction_stalled;
            if stuck || started.elapsed() > LOG_WAIT_MAX {
                let held_by_readers = start.lsn < state.retention.lsn;
                return Err(Error::BackupLogFull {
                    path: shared.path_string(),
                    instance: shared.instance,
                    reason: if held_by_readers {
                        format!(
                            "its objects from lsn {} are named by log chunks of a version an open iterator still reads",
                            start.lsn
                        )
                    } else {
                        format!("log chunks retain it from lsn {} and no level-0 merge released them", start.lsn)
                    },
                });
            }
            shared.work.notify_all();
            state = shared
                .progress
                .wait_timeout(state, LOG_WAIT_ROUND)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Waits until the memtable has room (LevelDB's MakeRoomForWrite): freezes a full
    /// memtable for the background thread, and waits while a frozen one is still being
    /// flushed or level 0 is at its stop trigger. Returns the memtable to insert into.
    pub(crate) fn make_room(&self, writer: &mut WriterState, force: bool) -> Result<Arc<MemTable>> {
        let shared = &self.shared;
        let background = shared.options.background;
        let mut state = shared.lock_state();
        for _ in 0..ROOM_WAITS_MAX {
            if !background {
                // Inline mode: the writing thread does the background work itself, here.
                state = crate::worker::run_inline(shared, state);
            }
            if let Some(start) = state.backup_start_update.take() {
                writer.backup_log.set_live_start(start.0, start.1);
            }
            Shared::check_poisoned(&state)?;
            let full = state.mem.approximate_bytes() >= shared.options.write_buffer_size;
            // Size-tiered: every tier is in level 0; writers wait on the flushes' own chunks.
            let level0 = if shared.options.size_tiered_threshold > 0 {
                crate::compaction::tiered::tier0_count(state.version())
            } else {
                state.version().chunks.values().filter(|chunk| chunk.level == 0).count()
            };
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
            // The next batch goes to an object of its own, after the backup start this freeze
            // records: one joining the open object would lie before it, and not be replayed.
            writer.close_open();
            // The frozen memtable's batches reach the device now, so that the device flush
            // before its delta version makes them durable: its log chunks name them (TRIAD-LOG,
            // SPEC.md §8.9).
            if shared.log_tables {
                let drained = writer.drain(shared.device.as_ref());
                shared.drained_lsn.store(writer.drained_lsn, Ordering::Release);
                if let Err(error) = drained {
                    return Err(shared.poison(&mut state, error.into()));
                }
            }
            let frozen = Frozen {
                table: std::mem::replace(&mut state.mem, Arc::new(shared.new_memtable())),
                backup_start: writer.backup_log.next_position(),
                last_sequence: writer.last_sequence,
                held: std::collections::HashSet::new(),
            };
            // The frozen memtable is installed whatever happens to its hot entries: its
            // entries stay readable (a failed write of the held batch poisons the store).
            let frozen = self.hold_hot(writer, &mut state, frozen);
            state.imm = Some(frozen);
            shared.work.notify_all();
            Shared::check_poisoned(&state)?;
            // A forced freeze (the backup log is full, or `flush`) waits for the flush that
            // moves the backup start; an ordinary one goes on with the new memtable.
            if !force {
                if !background {
                    state = crate::worker::run_inline(shared, state);
                }
                return Ok(Arc::clone(&state.mem));
            }
        }
        Err(Error::Invariant { what: format!("a writer waited {ROOM_WAITS_MAX} rounds for room in the memtable") })
    }
}
