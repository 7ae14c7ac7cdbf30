//! Workloads: sequences of engine operations, run on the real engine over a `SimDevice`,
//! with the model state after every operation and the device events each one spans.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use lds_engine::{Db, Options, WriteBatch, WriteOptions};
use lds_format::algorithms::image::ImageBuilder;
use lds_format::geometry::{plan_layout, LayoutRequest};
use lds_format::label::Label;

use crate::error::SimError;
use crate::sim_device::{History, SimDevice};

/// One engine operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `put`.
    Put {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
        /// Synced.
        sync: bool,
    },
    /// `delete`.
    Delete {
        /// Key.
        key: Vec<u8>,
        /// Synced.
        sync: bool,
    },
    /// `write` of a batch: `None` deletes.
    Batch {
        /// Entries.
        entries: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        /// Synced.
        sync: bool,
    },
    /// `flush`: everything before it becomes durable.
    Flush,
    /// `compact_range`.
    Compact,
    /// Close and reopen the store (recovery runs).
    Reopen,
}

impl Op {
    /// After it completes, every earlier operation is durable.
    pub fn is_sync_point(&self) -> bool {
        match self {
            Self::Put { sync, .. } | Self::Delete { sync, .. } | Self::Batch { sync, .. } => *sync,
            Self::Flush | Self::Compact => true,
            Self::Reopen => false,
        }
    }

    /// One line for reproducers.
    pub fn describe(&self) -> String {
        let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
        match self {
            Self::Put { key, value, sync } => {
                format!("put {} ({} bytes){}", text(key), value.len(), if *sync { " sync" } else { "" })
            }
            Self::Delete { key, sync } => format!("delete {}{}", text(key), if *sync { " sync" } else { "" }),
            Self::Batch { entries, sync } => format!("batch of {}{}", entries.len(), if *sync { " sync" } else { "" }),
            Self::Flush => "flush".into(),
            Self::Compact => "compact".into(),
            Self::Reopen => "reopen".into(),
        }
    }
}

/// A named sequence of operations.
#[derive(Debug, Clone)]
pub struct Workload {
    /// Its name.
    pub name: String,
    /// The operations.
    pub ops: Vec<Op>,
}

/// The model: key to value.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Where an operation lies in the device's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpSpan {
    /// Events before it started.
    pub start_event: usize,
    /// Events when it returned.
    pub end_event: usize,
}

/// A finished run.
#[derive(Debug, Clone)]
pub struct Run {
    /// The workload.
    pub workload: Workload,
    /// The device's history.
    pub history: History,
    /// Each operation's span.
    pub spans: Vec<OpSpan>,
    /// The model before the first operation (`models[0]`) and after each (`models[i + 1]`).
    pub models: Vec<Model>,
    /// Sector size of the volume.
    pub sector_size: u64,
}

/// The simulator's backup log: 8 KiB, wrapped every few dozen operations.
pub const BACKUP_LOG_LEN: u64 = 8 << 10;

/// The simulator's backup log with technique `triad-log` (SPEC.md §8.9): 12 KiB, twelve of
/// `LOG_TABLES_WRITE_BUFFER`. The engine writes a log chunk only while the ring keeps two
/// write buffers (and four sectors) of room beyond the region it retains, and merges level 0
/// early once the retained region leaves less (`lds_engine` module `logs`); with the default
/// write buffer (a third of the ring) no log chunk ever fits. Measured over the seeded
/// workloads: 12 KiB retains up to about five memtables' parts, so that most flushes write log
/// chunks, a few fall back to ordinary chunks, the retained region calls for early merges
/// before `LOG_TABLES_LEVEL0_TRIGGER` chunks do in most workloads, writers sometimes wait for
/// them, and the ring wraps over released regions every few dozen operations. A 32 KiB ring
/// retained so much that level 0 always merged by its chunk count first.
pub const LOG_TABLES_BACKUP_LOG_LEN: u64 = 12 << 10;

/// The write buffer with technique `triad-log`: 1 KiB (see `LOG_TABLES_BACKUP_LOG_LEN`).
pub const LOG_TABLES_WRITE_BUFFER: usize = 1 << 10;

/// Level-0 chunks that trigger a merge with technique `triad-log`: eight instead of four, so
/// that the retained region rather than the chunk count calls for most level-0 merges of
/// log chunks (`Stats::log_pressure_merges`).
pub const LOG_TABLES_LEVEL0_TRIGGER: usize = 8;

/// True when the techniques of `set_techniques` include `triad-log`.
fn log_tables_on() -> bool {
    Options::default().with_techniques(&techniques()).is_ok_and(|options| options.log_tables)
}

/// The volume the simulator uses: 512-byte sectors and tiny logs, so that short workloads wrap
/// both logs, trim the version log and compact. With technique `triad-log` the backup log is
/// `LOG_TABLES_BACKUP_LOG_LEN` (the other techniques keep the 8 KiB one their crash counts
/// and fuzz corpus were measured with).
pub fn layout() -> LayoutRequest {
    let len_backup_log = if log_tables_on() { LOG_TABLES_BACKUP_LOG_LEN } else { BACKUP_LOG_LEN };
    LayoutRequest {
        volume_len: 3 << 20,
        sector_size: Some(512),
        slot_size: Some(64 << 10),
        len_version_log: Some(16 << 10),
        len_backup_log: Some(len_backup_log),
        ..LayoutRequest::default()
    }
}

/// The geometry of `layout()` with the simulator's volume uuid.
pub fn formatted_geometry() -> lds_format::geometry::Geometry {
    plan_layout(&layout(), [0x51; 16]).unwrap_or_else(|error| panic!("the simulator's layout: {error}"))
}

/// A formatted image of `layout()`, as mkfs writes it.
pub fn formatted_image() -> Result<Vec<u8>, SimError> {
    let geometry = plan_layout(&layout(), [0x51; 16]).map_err(|source| SimError::Layout { source })?;
    Ok(ImageBuilder::format(label_for_techniques(
        Label::new(geometry, "crashtest").with_sync_watermark().with_fast_digest().with_compact_entries(),
    ))
    .bytes)
}

thread_local! {
    /// The engine techniques every store this thread opens starts with (`lds crashtest
    /// --technique`, the fuzz `sim` target); empty for the default engine. Per thread, so
    /// that tests running side by side keep their own.
    static TECHNIQUES: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    /// Forest drains move chunks of any size (`set_small_chunk_moves`).
    static SMALL_CHUNK_MOVES: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// With `on`, forest drains of the stores this thread opens move chunks of any size, not only
/// those filling half a slot (`Options::forest_move_min_percent` 0): the simulator's chunks
/// are a few KiB, so that the `random-forest` workload reaches drains that move chunks. Off
/// for the device and resize cases, whose small version log needs the default packing to
/// keep room for a rebuilt base version.
pub fn set_small_chunk_moves(on: bool) {
    SMALL_CHUNK_MOVES.with(|moves| moves.set(on));
}

/// The label with what the techniques switched on need: feature `value_chunks` for
/// `kv-separation` (SPEC.md §8.6), `chunk_sketches` for `triad-disk` (§8.7), `log_tables`
/// for `triad-log` (§8.9).
pub fn label_for_techniques(label: Label) -> Label {
    let options = options(false);
    let label = if options.value_separation_min.is_some() { label.with_value_chunks() } else { label };
    let label = if options.log_tables { label.with_log_tables() } else { label };
    if options.level0_overlap_min.is_some() {
        label.with_chunk_sketches()
    } else {
        label
    }
}

/// Switches engine techniques on for every store the simulator opens from now on in this
/// thread (names as `lds_engine::Options::with_techniques` takes them; empty for none). With
/// `triad-log` the volumes formatted from then on have the larger backup log of
/// `LOG_TABLES_BACKUP_LOG_LEN` too.
pub fn set_techniques(names: &str) -> Result<(), SimError> {
    Options::default()
        .with_techniques(names)
        .map_err(|reason| SimError::Techniques { names: names.to_string(), reason })?;
    TECHNIQUES.with(|techniques| *techniques.borrow_mut() = names.to_string());
    Ok(())
}

/// Checks that the engine takes the techniques `set_techniques` switched on together: opens a
/// store with them on a fresh simulated volume (the engine refuses some sets, such as
/// `triad-log` with `size-tiered` or `forest`); the engine's refusal is the error.
pub fn check_techniques() -> Result<(), SimError> {
    let device = SimDevice::new(formatted_image()?);
    let (db, _) = Db::open_device(Arc::new(device), Path::new("simulated"), options(true))
        .map_err(SimError::engine(format!("techniques '{}': ", techniques())))?;
    Ok(db.close()?)
}

/// The techniques `set_techniques` switched on in this thread.
pub fn techniques() -> String {
    TECHNIQUES.with(|techniques| techniques.borrow().clone())
}

/// Engine options for simulation: inline (deterministic), small levels; `log_buffer_bytes`
/// 0 when `unbuffered`, so that every batch reaches the device; the techniques of
/// `set_techniques` (with `triad-log`, the write buffer and level-0 trigger of
/// `LOG_TABLES_WRITE_BUFFER` and `LOG_TABLES_LEVEL0_TRIGGER`).
pub fn options(unbuffered: bool) -> Options {
    let options = Options {
        background: false,
        level1_max_bytes: 2 * (64 << 10),
        level_size_multiplier: 4,
        log_buffer_bytes: if unbuffered { 0 } else { Options::default().log_buffer_bytes },
        // Merges of two slots or more are journaled, with a record after every output, so
        // that random workloads journal, clean early and resume too (SPEC.md §12).
        journal_min_input_slots: 2,
        journal_every_outputs: 1,
        forest_move_min_percent: if SMALL_CHUNK_MOVES.with(std::cell::Cell::get) {
            0
        } else {
            Options::default().forest_move_min_percent
        },
        ..Options::default()
    };
    // `set_techniques` checked the names.
    let mut options = options.clone().with_techniques(&techniques()).unwrap_or(options);
    if options.log_tables {
        // Memtables small against the ring, so that it retains several (SPEC.md §8.9).
        options.write_buffer_size = LOG_TABLES_WRITE_BUFFER;
        options.level0_compaction_trigger = LOG_TABLES_LEVEL0_TRIGGER;
    }
    if options.value_separation_min.is_some() {
        // The simulator's values are 1 byte to tens of KiB: most go to value chunks at
        // flush, those too large for a batch (the 8 KiB backup log takes about 1.6 KiB) before
        // their batch, and overwrites leave garbage to collect.
        options.value_separation_min = Some(24);
    }
    options
}

/// Applies an operation to the model.
pub fn apply_to_model(model: &mut Model, op: &Op) {
    match op {
        Op::Put { key, value, .. } => {
            model.insert(key.clone(), value.clone());
        }
        Op::Delete { key, .. } => {
            model.remove(key);
        }
        Op::Batch { entries, .. } => {
            for (key, value) in entries {
                match value {
                    Some(value) => model.insert(key.clone(), value.clone()),
                    None => model.remove(key),
                };
            }
        }
        Op::Flush | Op::Compact | Op::Reopen => {}
    }
}

/// Applies one operation to a store (`Reopen` needs the caller: it does nothing here).
pub fn apply_op(db: &Db, op: &Op) -> Result<(), lds_engine::Error> {
    match op {
        Op::Put { key, value, sync } => db.put(key, value, WriteOptions { sync: *sync }),
        Op::Delete { key, sync } => db.delete(key, WriteOptions { sync: *sync }),
        Op::Batch { entries, sync } => {
            let mut batch = WriteBatch::new();
            for (key, value) in entries {
                match value {
                    Some(value) => batch.put(key, value),
                    None => batch.delete(key),
                };
            }
            db.write(&batch, WriteOptions { sync: *sync })
        }
        Op::Flush => db.flush(),
        Op::Compact => db.compact_range(),
        Op::Reopen => Ok(()),
    }
}

/// A workload driven on a recording device: each operation's span of device events, the
/// model before the first operation and after each, and the store's last sequence number
/// after opening and after each operation.
pub(crate) struct Driven {
    pub(crate) spans: Vec<OpSpan>,
    pub(crate) models: Vec<Model>,
    pub(crate) sequences: Vec<u64>,
}

/// Opens the store on `device` (`name` names it in messages), takes the starting model from
/// `start`, and runs `workload`; errors name the operation, after `context`.
pub(crate) fn drive(
    device: &SimDevice,
    workload: &Workload,
    unbuffered: bool,
    name: &str,
    context: &str,
    start: impl FnOnce(&Db) -> Result<Model, SimError>,
) -> Result<Driven, SimError> {
    let open = |device: &SimDevice| {
        Db::open_device(Arc::new(device.clone()), Path::new(name), options(unbuffered)).map(|(db, _)| db)
    };
    let mut db = open(device)?;
    let mut model = start(&db)?;
    let mut models = vec![model.clone()];
    let mut sequences = vec![db.last_sequence()];
    let mut spans = Vec::with_capacity(workload.ops.len());
    for (index, op) in workload.ops.iter().enumerate() {
        let start_event = device.event_count();
        let failed = |error: lds_engine::Error| {
            SimError::engine(format!("{context}operation {index} ({}): ", op.describe()))(error)
        };
        match op {
            Op::Reopen => {
                db.close().map_err(failed)?;
                db = open(device)?;
            }
            _ => apply_op(&db, op).map_err(failed)?,
        }
        apply_to_model(&mut model, op);
        models.push(model.clone());
        sequences.push(db.last_sequence());
        spans.push(OpSpan { start_event, end_event: device.event_count() });
    }
    db.close()?;
    Ok(Driven { spans, models, sequences })
}

/// Runs a workload on the engine over a simulated device holding `image`.
pub fn run(workload: &Workload, image: Vec<u8>, unbuffered: bool) -> Result<Run, SimError> {
    let sector_size = plan_layout(&layout(), [0; 16]).map_err(|source| SimError::Layout { source })?.sector();
    let device = SimDevice::new(image);
    let driven = drive(&device, workload, unbuffered, "simulated", "", |_| Ok(Model::new()))?;
    Ok(Run {
        workload: workload.clone(),
        history: device.history(),
        spans: driven.spans,
        models: driven.models,
        sector_size,
    })
}

/// xorshift64*: deterministic and seedable.
pub struct Random(pub u64);

impl Random {
    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value below `bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }
}

/// A random workload of `len` operations over a small key space.
pub fn random(seed: u64, len: usize) -> Workload {
    let mut random = Random(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut ops = Vec::with_capacity(len);
    let key = |random: &mut Random| format!("key-{:02}", random.below(40)).into_bytes();
    let value = |random: &mut Random| {
        let len = 1 + random.below(120) as usize;
        (0..len).map(|index| b'a' + ((random.next_u64() as usize + index) % 26) as u8).collect::<Vec<u8>>()
    };
    for _ in 0..len {
        let sync = random.below(5) == 0;
        let op = match random.below(100) {
            0..=54 => Op::Put { key: key(&mut random), value: value(&mut random), sync },
            55..=69 => Op::Delete { key: key(&mut random), sync },
            70..=86 => {
                let entries = (0..1 + random.below(5))
                    .map(|_| (key(&mut random), (random.below(3) > 0).then(|| value(&mut random))))
                    .collect();
                Op::Batch { entries, sync }
            }
            87..=92 => Op::Flush,
            93..=95 => Op::Compact,
            _ => Op::Reopen,
        };
        ops.push(op);
    }
    Workload { name: format!("random-{seed}"), ops }
}

/// A random workload that wraps the backup log often, with many unflushed writes at each
/// wrap: puts and batches of larger values, rarely synced, no explicit flush or compaction
/// (memtable flushes come from the log filling up), and a rare reopen. The simulator's
/// backup log is 8 KiB, so 200 operations wrap it about five times.
pub fn random_wrap(seed: u64, len: usize) -> Workload {
    let mut random = Random(seed.wrapping_mul(0xA24B_AED4_963E_E407) | 1);
    let mut ops = Vec::with_capacity(len);
    let key = |random: &mut Random| format!("key-{:02}", random.below(40)).into_bytes();
    let value = |random: &mut Random| {
        let len = 40 + random.below(160) as usize;
        (0..len).map(|index| b'a' + ((random.next_u64() as usize + index) % 26) as u8).collect::<Vec<u8>>()
    };
    for _ in 0..len {
        let sync = random.below(20) == 0;
        let op = match random.below(100) {
            0..=64 => Op::Put { key: key(&mut random), value: value(&mut random), sync },
            65..=74 => Op::Delete { key: key(&mut random), sync },
            75..=97 => {
                let entries = (0..2 + random.below(4))
                    .map(|_| (key(&mut random), (random.below(4) > 0).then(|| value(&mut random))))
                    .collect();
                Op::Batch { entries, sync }
            }
            _ => Op::Reopen,
        };
        ops.push(op);
    }
    Workload { name: format!("random-wrap-{seed}"), ops }
}

/// A random workload whose merges are large enough to be journaled, write several outputs and
/// clean inputs early (SPEC.md §12): 400 keys, values of 200 to 1,600 bytes, flushes, manual
/// compactions and reopens, a tenth of the writes synced.
pub fn random_journal(seed: u64, len: usize) -> Workload {
    let mut random = Random(seed.wrapping_mul(0xC2B2_AE3D_27D4_EB4F) | 1);
    let mut ops = Vec::with_capacity(len);
    let key = |random: &mut Random| format!("key-{:03}", random.below(400)).into_bytes();
    let text = |random: &mut Random, len: usize| {
        (0..len).map(|index| b'a' + ((random.next_u64() as usize + index) % 26) as u8).collect::<Vec<u8>>()
    };
    let value = |random: &mut Random| {
        let len = 200 + random.below(1400) as usize;
        text(random, len)
    };
    for _ in 0..len {
        let sync = random.below(10) == 0;
        let op = match random.below(100) {
            0..=69 => Op::Put { key: key(&mut random), value: value(&mut random), sync },
            70..=79 => Op::Delete { key: key(&mut random), sync },
            80..=89 => {
                // Batches stay under the simulator's batch limit (half the backup log's
                // largest object, about 3 KiB): short values.
                let entries = (0..2 + random.below(3))
                    .map(|_| {
                        let key = key(&mut random);
                        let value = (random.below(5) > 0).then(|| {
                            let len = 100 + random.below(400) as usize;
                            text(&mut random, len)
                        });
                        (key, value)
                    })
                    .collect();
                Op::Batch { entries, sync }
            }
            90..=94 => Op::Flush,
            95..=97 => Op::Compact,
            _ => Op::Reopen,
        };
        ops.push(op);
    }
    Workload { name: format!("random-journal-{seed}"), ops }
}

/// The seeded workload generators of `lds crashtest --workload`: `random`, `random-wrap`,
/// `random-journal`, `random-values`, `random-level0`, `random-tiered`, `random-forest` and
/// `random-log`.
pub fn seeded(name: &str, seed: u64, len: usize) -> Option<Workload> {
    match name {
        "random" => Some(random(seed, len)),
        "random-wrap" => Some(random_wrap(seed, len)),
        "random-journal" => Some(random_journal(seed, len)),
        "random-values" => Some(random_values(seed, len)),
        "random-level0" => Some(random_level0(seed, len)),
        "random-tiered" => Some(random_tiered(seed, len)),
        "random-forest" => Some(random_forest(seed, len)),
        "random-log" => Some(random_log(seed, len)),
        _ => None,
    }
}

/// A random workload for TRIAD-LOG (`--technique triad-log`, SPEC.md §8.9): mostly fresh keys
/// (a counter), so that most memtables keep at least 80% of their part of the backup log and
/// their flushes write log chunks; values of 16 to 300 bytes (most at least as long as a log
/// reference, a few shorter, which stay in the chunk), one in sixteen of 600 to 2,000 bytes
/// (as large as the simulator's write buffer with the technique and more: appends that find
/// the ring full, so that writers wait for the merge that releases it); overwrites and deletes
/// of recent keys,
/// batches, a tenth of the writes synced, explicit flushes, reopens (replayed batches named by
/// the next flush) and manual compactions (merges that resolve every reference).
pub fn random_log(seed: u64, len: usize) -> Workload {
    let mut random = Random(seed.wrapping_mul(0xE703_7ED1_A0B4_28DB) | 1);
    let mut ops = Vec::with_capacity(len);
    let mut next = 0u64;
    let value = |random: &mut Random| {
        let len = if random.below(16) == 0 { 600 + random.below(1400) } else { 16 + random.below(285) } as usize;
        let seed = random.next_u64() as usize;
        (0..len).map(|index| b'a' + ((seed + index * 5) % 26) as u8).collect::<Vec<u8>>()
    };
    let recent = |random: &mut Random, next: u64| {
        let back = random.below(24).min(next);
        format!("log-{:05}", next.saturating_sub(back)).into_bytes()
    };
    for _ in 0..len {
        let sync = random.below(10) == 0;
        let op = match random.below(100) {
            0..=64 => {
                next += 1;
                Op::Put { key: format!("log-{next:05}").into_bytes(), value: value(&mut random), sync }
            }
            65..=71 => Op::Put { key: recent(&mut random, next), value: value(&mut random), sync },
            72..=76 => Op::Delete { key: recent(&mut random, next), sync },
            77..=88 => {
                let entries = (0..1 + random.below(4))
                    .map(|_| {
                        next += 1;
                        let key = format!("log-{next:05}").into_bytes();
                        (key, (random.below(6) > 0).then(|| value(&mut random)))
                    })
                    .collect();
                Op::Batch { entries, sync }
            }
            89..=93 => Op::Flush,
            94..=95 => Op::Compact,
            _ => Op::Reopen,
        };
        ops.push(op);
    }
    Workload { name: format!("random-log-{seed}"), ops }
}

/// A random workload of values of 500 to 3,000 bytes over 400 keys, with flushes, deletes and
/// reopens: a few hundred KiB, several of the simulator's slots, so that with `--technique
/// size-tiered` merges write chunks of several sub-chunks.
pub fn random_tiered(seed: u64, len: usize) -> Workload {
    let mut random = Random(seed.wrapping_mul(0x8EBC_6AF0_9C88_C6E3) | 1);
    let mut ops = Vec::with_capacity(len);
    for _ in 0..len {
        let sync = random.below(10) == 0;
        let key = format!("key-{:03}", random.below(400)).into_bytes();
        let op = match random.below(100) {
            0..=71 => {
                let fill = b'a' + (random.next_u64() % 26) as u8;
                Op::Put { key, value: vec![fill; 500 + random.below(2500) as usize], sync }
            }
            72..=81 => Op::Delete { key, sync },
            82..=96 => Op::Flush,
            _ => Op::Reopen,
        };
        ops.push(op);
    }
    Workload { name: format!("random-tiered-{seed}"), ops }
}

/// A random workload for the split forest (`--technique forest`): runs of fresh keys in
/// ascending order (each run its own prefix, so that its chunks overlap little and a drain
/// moves them), overwrites and deletes mostly in the current run, a few in earlier runs
/// (so that some trees overlap and drains merge too), values of 500 to 2,000 bytes (a flush
/// every twenty operations or so makes chunks of half a simulator slot and more, which drains
/// move rather than merge), reopens and a rare manual compaction: stage 1 fills and drains
/// into stage 2 within a few hundred operations.
pub fn random_forest(seed: u64, len: usize) -> Workload {
    let mut random = Random(seed.wrapping_mul(0x9FB2_1C65_1E98_DF25) | 1);
    let mut ops = Vec::with_capacity(len);
    let (mut run, mut next) = (0u64, 0u64);
    let value = |random: &mut Random| {
        let fill = b'a' + (random.next_u64() % 26) as u8;
        vec![fill; 500 + random.below(1500) as usize]
    };
    for _ in 0..len {
        let sync = random.below(10) == 0;
        let op = match random.below(100) {
            0..=59 => {
                next += 1;
                Op::Put { key: format!("run-{run:03}-{next:04}").into_bytes(), value: value(&mut random), sync }
            }
            60..=73 => {
                let key = format!("run-{run:03}-{:04}", random.below(next + 1)).into_bytes();
                Op::Put { key, value: value(&mut random), sync }
            }
            74 => {
                let key = format!("run-{:03}-{:04}", random.below(run + 1), random.below(next + 1)).into_bytes();
                Op::Put { key, value: value(&mut random), sync }
            }
            75..=80 => {
                let old = if random.below(12) == 0 { random.below(run + 1) } else { run };
                Op::Delete { key: format!("run-{old:03}-{:04}", random.below(next + 1)).into_bytes(), sync }
            }
            81..=85 => {
                if random.below(3) == 0 {
                    run += 1;
                    next = 0;
                }
                Op::Flush
            }
            86..=95 => {
                let key = format!("run-{run:03}-{:04}", random.below(next + 1)).into_bytes();
                Op::Put { key, value: value(&mut random), sync }
            }
            96..=97 => Op::Reopen,
            _ => {
                if random.below(4) == 0 {
                    Op::Compact
                } else {
                    Op::Flush
                }
            }
        };
        ops.push(op);
    }
    Workload { name: format!("random-forest-{seed}"), ops }
}

/// A random workload that fills level 0 with chunks sharing few keys: runs of fresh keys
/// (each run its own prefix), a few hot keys overwritten and deleted, a flush after each run,
/// reopens, no manual compaction. With `--technique triad-disk` level 0 waits for overlap
/// (SPEC.md §8.7), so merges take up to seven level-0 chunks, and reopens read the sketches.
pub fn random_level0(seed: u64, len: usize) -> Workload {
    let mut random = Random(seed.wrapping_mul(0xA076_1D64_78BD_642F) | 1);
    let mut ops = Vec::with_capacity(len);
    let mut run = 0u64;
    while ops.len() < len {
        let sync = random.below(10) == 0;
        let op = match random.below(100) {
            0..=69 => {
                let key = format!("run-{run:03}-{:03}", random.below(1000)).into_bytes();
                Op::Put { key, value: format!("value-{}", random.next_u64() % 1000).into_bytes(), sync }
            }
            70..=79 => {
                let key = format!("hot-{}", random.below(4)).into_bytes();
                Op::Put { key, value: format!("hot-{}", random.next_u64() % 1000).into_bytes(), sync }
            }
            80..=83 => Op::Delete { key: format!("hot-{}", random.below(4)).into_bytes(), sync },
            84..=96 => {
                run += 1;
                Op::Flush
            }
            _ => Op::Reopen,
        };
        ops.push(op);
    }
    Workload { name: format!("random-level0-{seed}"), ops }
}

/// A random workload of values from a byte to 80 KiB (more than a slot of the simulator's
/// volume when key-value separation is on, else at most 3,000 bytes) over 16 keys, overwritten and
/// deleted often, with flushes, manual compactions and reopens: with `--technique
/// kv-separation` it writes value chunks at flush and before batches, spans slots, and leaves
/// garbage that merges relocate (SPEC.md §8.6).
pub fn random_values(seed: u64, len: usize) -> Workload {
    let mut random = Random(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) | 1);
    // Without separation a value must fit a batch of the simulator's backup log (3,296 bytes).
    let large_max = if options(false).value_separation_min.is_some() { 80 << 10 } else { 3_000 };
    let mut ops = Vec::with_capacity(len);
    let key = |random: &mut Random| format!("key-{:02}", random.below(16)).into_bytes();
    let value = |random: &mut Random| {
        let len = match random.below(20) {
            0 => 1 + random.below(large_max) as usize,
            1..=8 => 300 + random.below(1500) as usize,
            _ => 1 + random.below(200) as usize,
        };
        let seed = random.next_u64() as usize;
        (0..len).map(|index| b'a' + ((seed + index * 7) % 26) as u8).collect::<Vec<u8>>()
    };
    for _ in 0..len {
        let sync = random.below(8) == 0;
        let op = match random.below(100) {
            0..=59 => Op::Put { key: key(&mut random), value: value(&mut random), sync },
            60..=71 => Op::Delete { key: key(&mut random), sync },
            72..=81 => {
                // Small values: a batch stays under the simulator's batch limit.
                let entries = (0..1 + random.below(3))
                    .map(|_| {
                        let key = key(&mut random);
                        let value = (random.below(4) > 0).then(|| {
                            let len = 1 + random.below(300) as usize;
                            (0..len).map(|index| b'A' + (index % 26) as u8).collect::<Vec<u8>>()
                        });
                        (key, value)
                    })
                    .collect();
                Op::Batch { entries, sync }
            }
            82..=89 => Op::Flush,
            90..=95 => Op::Compact,
            _ => Op::Reopen,
        };
        ops.push(op);
    }
    Workload { name: format!("random-values-{seed}"), ops }
}

/// The named workloads: `basic` (a few synced and buffered writes and a flush), `wrap`
/// (enough writes to wrap both logs and trim the version log), `compaction` (flushes and
/// compactions down the levels), `journal` (a tree of about ten slots compacted whole: large
/// journaled merges that clean their inputs early, SPEC.md §12).
pub fn named(name: &str) -> Option<Workload> {
    let put = |number: u32, sync: bool| Op::Put {
        key: format!("key-{:03}", number % 97).into_bytes(),
        value: format!("value-{number}-{}", "v".repeat((number % 50) as usize)).into_bytes(),
        sync,
    };
    let ops = match name {
        "basic" => vec![
            put(1, true),
            put(2, false),
            Op::Delete { key: b"key-001".to_vec(), sync: true },
            put(3, false),
            Op::Flush,
            put(4, true),
        ],
        "wrap" => {
            (0..120).map(|number| if number % 40 == 39 { Op::Flush } else { put(number, number % 3 == 0) }).collect()
        }
        "compaction" => (0..240)
            .map(|number| match number % 30 {
                29 => Op::Compact,
                14 => Op::Flush,
                7 => Op::Delete { key: format!("key-{:03}", (number * 7) % 97).into_bytes(), sync: false },
                _ => put(number, number % 5 == 0),
            })
            .collect(),
        "journal" => {
            let mut ops = Vec::new();
            for round in 0..24u32 {
                for number in 0..40u32 {
                    let key = format!("journal-{:02}-{number:03}", (number * 7 + round) % 24).into_bytes();
                    let value = format!("{round}-{}", "j".repeat(400 + (number as usize * 13) % 200)).into_bytes();
                    ops.push(Op::Put { key, value, sync: number == 39 });
                }
                ops.push(Op::Flush);
            }
            ops.push(Op::Compact);
            ops.push(Op::Put { key: b"journal-after".to_vec(), value: b"done".to_vec(), sync: true });
            ops
        }
        _ => return None,
    };
    Some(Workload { name: name.to_string(), ops })
}

/// Journal records (SPEC.md §6.3) a run appended: the compaction journal objects its writes
/// to the version log carry.
pub fn journal_records(run: &Run) -> usize {
    let Ok(geometry) = plan_layout(&layout(), [0; 16]) else { return 0 };
    let (ofs_area, len_area) = geometry.log_area(lds_format::geometry::LogKind::Version, 0);
    let journal = lds_format::log::ObjectType::CompactionJournal.code();
    run.history
        .writes
        .iter()
        .filter(|write| write.offset >= ofs_area && write.offset < ofs_area + len_area)
        .filter(|write| {
            write.bytes.len() >= lds_format::log::HEADER_LEN
                && write.bytes[..4] == lds_format::log::OBJECT_MAGIC
                && write.bytes[8] == journal
        })
        .count()
}
