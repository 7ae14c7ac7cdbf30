//! The single-fault media matrix (docs/reliability.md L4, oracle I7): a small volume written by the
//! engine (both logs wrapped, chunks at level 0 and below), then, one at a time, a fault in one
//! sector of each structure: a flipped bit, a zeroed sector, an unreadable sector (EIO), a
//! stale sector (the content it held before its latest write) and a misdirected read (the
//! sector reads as another sector of the same structure). Each case runs fsck and opens the
//! volume and reads every key back against the model, and is classified:
//!
//! - `detected`: fsck reports a warning or an error (or cannot check), or opening or a read
//!   returns an explicit error, and no read returned wrong data;
//! - `tolerated`: every read gives the model's value (fsck may or may not notice);
//! - `prefix`: fsck is clean and every read gives the model after an earlier operation at or
//!   after the last synced one: the fault looks like a crash that lost unsynced writes;
//! - `rolled back`: fsck is clean and every read gives the model after an operation before
//!   the last synced one: a consistent earlier state, but acknowledged writes are lost;
//! - `wrong`: fsck is clean and reads give values no single model has: a failure.
//!
//! Reads that are wrong or rolled back while fsck does report the fault are counted apart
//! (`engine_wrong`): I7 asks the engine itself to return correct data or an error.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use lds_check::{check, CheckOptions, Severity};
use lds_engine::Db;
use lds_format::algorithms::recovery::ChainObject;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::Label;
use lds_volume::MemoryImage;

use crate::error::SimError;
use crate::sim_device::{apply, Fault, History, SimDevice};
use crate::workload::{formatted_image, named, options, run, Model, Op, Workload};

/// What a sector belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Structure {
    /// The label at offset 0.
    PrimaryLabel,
    /// The label in the last sector.
    BackupLabel,
    /// A sector of the version log holding part of a live object.
    VersionLogLive,
    /// Any other sector of the version log.
    VersionLogOther,
    /// A sector of the backup log holding part of a live object.
    BackupLogLive,
    /// Any other sector of the backup log.
    BackupLogOther,
    /// The last sector of a referenced chunk's slot: the footer.
    ChunkFooter,
    /// The other sectors of a referenced chunk's tail: the block index and the filter.
    ChunkTail,
    /// A sector of a referenced chunk's blocks.
    ChunkData,
}

impl Structure {
    /// Every structure, in table order.
    pub const ALL: [Self; 9] = [
        Self::PrimaryLabel,
        Self::BackupLabel,
        Self::VersionLogLive,
        Self::VersionLogOther,
        Self::BackupLogLive,
        Self::BackupLogOther,
        Self::ChunkFooter,
        Self::ChunkTail,
        Self::ChunkData,
    ];

    /// Its name in the matrix.
    pub fn name(self) -> &'static str {
        match self {
            Self::PrimaryLabel => "primary label",
            Self::BackupLabel => "backup label",
            Self::VersionLogLive => "version log, live objects",
            Self::VersionLogOther => "version log, other sectors",
            Self::BackupLogLive => "backup log, live objects",
            Self::BackupLogOther => "backup log, other sectors",
            Self::ChunkFooter => "chunk footer",
            Self::ChunkTail => "chunk index and filter",
            Self::ChunkData => "chunk blocks",
        }
    }

    /// Metadata, as opposed to chunk blocks (data).
    pub fn is_metadata(self) -> bool {
        self != Self::ChunkData
    }
}

/// A fault in one sector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MediaFault {
    /// One bit flips (F5 bit rot).
    Flip,
    /// The sector reads as zeros.
    Zero,
    /// Reads of the sector fail with EIO (F5 latent sector error).
    ReadError,
    /// The sector holds the content it had before its latest write (F6 lost or phantom write).
    Stale,
    /// Reads of the sector return another sector of the same structure (F4).
    Misdirect,
}

impl MediaFault {
    /// Every fault, in table order.
    pub const ALL: [Self; 5] = [Self::Flip, Self::Zero, Self::ReadError, Self::Stale, Self::Misdirect];

    /// Its name in the matrix.
    pub fn name(self) -> &'static str {
        match self {
            Self::Flip => "flip a bit",
            Self::Zero => "zero",
            Self::ReadError => "EIO on read",
            Self::Stale => "stale",
            Self::Misdirect => "misdirected read",
        }
    }
}

/// The volume the matrix damages, with what it must read back.
#[derive(Debug, Clone)]
pub struct Volume {
    /// The workload that wrote it.
    pub workload: Workload,
    /// The image after the workload (every write applied, as reads saw it).
    pub image: Vec<u8>,
    /// The device history (for stale contents).
    pub history: History,
    /// The model before the first operation and after each.
    pub models: Vec<Model>,
    /// Operations up to the last sync point: `models[synced..]` are the allowed states.
    pub synced: usize,
    /// Every key the workload touched.
    pub keys: Vec<Vec<u8>>,
    /// The volume's geometry.
    pub geometry: Geometry,
    /// Chunks per level.
    pub levels: Vec<usize>,
    /// Times each log wrapped (writes at the start of its area): version log, backup log.
    pub wraps: (usize, usize),
}

/// One sector to damage.
#[derive(Debug, Clone)]
pub struct Target {
    /// What it belongs to.
    pub structure: Structure,
    /// Device offset of the sector.
    pub sector: u64,
    /// Bytes of the sector that hold the structure (a flip lands there).
    pub bytes: Range<u64>,
    /// What it is, for people.
    pub label: String,
}

/// How a case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    /// fsck or the engine reports the fault.
    Detected,
    /// Every read is right.
    Tolerated,
    /// fsck is clean and reads show an allowed earlier state.
    Prefix,
    /// fsck is clean and reads show a consistent state before the last sync.
    RolledBack,
    /// A read is wrong and fsck is clean.
    Wrong,
}

/// One case's outcome.
#[derive(Debug, Clone)]
pub struct Case {
    /// The verdict.
    pub verdict: Verdict,
    /// fsck reported a warning or an error, or could not check.
    pub fsck_reported: bool,
    /// A read returned wrong data or a state before the last sync (whatever fsck said).
    pub engine_wrong: bool,
    /// Opening and reading wrote to the device (recovery must write nothing, SPEC.md §9.5).
    pub wrote: bool,
    /// fsck or the engine panicked.
    pub panicked: bool,
    /// What happened, for people.
    pub detail: String,
}

/// The counts of one structure and fault.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cell {
    /// Cases run.
    pub cases: u64,
    /// Cases where the fault changes nothing a read sees (zeroing a zero sector, a sector
    /// never rewritten, a misdirection to identical bytes): not run.
    pub not_applicable: u64,
    /// `Verdict::Detected`.
    pub detected: u64,
    /// `Verdict::Tolerated`.
    pub tolerated: u64,
    /// Tolerated cases that fsck also reported.
    pub tolerated_fsck_reported: u64,
    /// `Verdict::Prefix`.
    pub prefix: u64,
    /// `Verdict::RolledBack`.
    pub rolled_back: u64,
    /// `Verdict::Wrong`.
    pub wrong: u64,
    /// Cases where reads were wrong or rolled back though fsck reported the fault.
    pub engine_wrong: u64,
    /// Cases where fsck or the engine panicked, or recovery wrote.
    pub broken: u64,
    /// Cases fsck reported, given to `lds repair -y`.
    pub repair_tried: u64,
    /// Of them, repaired: fsck clean afterwards.
    pub repaired: u64,
    /// Of those, with every key reading the value it had before the fault.
    pub repaired_intact: u64,
}

/// The whole matrix.
#[derive(Debug, Clone, Default)]
pub struct Matrix {
    /// Counts by structure and fault.
    pub cells: BTreeMap<(Structure, MediaFault), Cell>,
    /// Sectors by structure.
    pub sectors: BTreeMap<Structure, u64>,
    /// Cases that failed (wrong, engine wrong, panicked, wrote), with what happened.
    pub failures: Vec<String>,
}

impl Matrix {
    /// The sum over every cell.
    pub fn total(&self) -> Cell {
        let mut total = Cell::default();
        for cell in self.cells.values() {
            total.cases += cell.cases;
            total.not_applicable += cell.not_applicable;
            total.detected += cell.detected;
            total.tolerated += cell.tolerated;
            total.tolerated_fsck_reported += cell.tolerated_fsck_reported;
            total.prefix += cell.prefix;
            total.rolled_back += cell.rolled_back;
            total.wrong += cell.wrong;
            total.engine_wrong += cell.engine_wrong;
            total.broken += cell.broken;
            total.repair_tried += cell.repair_tried;
            total.repaired += cell.repaired;
            total.repaired_intact += cell.repaired_intact;
        }
        total
    }
}

/// The workload that writes the matrix's volume: `compaction` (both logs wrap, a manual
/// compaction takes chunks to the last level), 300 small entries compacted into a chunk with
/// a tail of several sectors, then rounds of writes and flushes (level 0
/// reaches its trigger and compacts into the base level, the last level of a tree this small,
/// and more level-0 chunks follow), then a
/// synced put among unsynced ones, so that the backup log holds live objects of both kinds.
pub fn workload() -> Workload {
    let mut ops = named("compaction").map(|workload| workload.ops).unwrap_or_default();
    let put = |number: u32, sync: bool| Op::Put {
        key: format!("key-{:03}", (number * 13) % 97).into_bytes(),
        value: format!("late-{number}-{}", "w".repeat((number % 40) as usize)).into_bytes(),
        sync,
    };
    // Many small entries, compacted: a chunk whose index and filter span several sectors.
    ops.extend((0..300u32).map(|number| Op::Put {
        key: format!("bulk-{number:03}").into_bytes(),
        value: format!("{number:08}").into_bytes(),
        sync: false,
    }));
    ops.push(Op::Compact);
    for round in 0..6 {
        ops.extend((round * 20..round * 20 + 20).map(|number| put(number, false)));
        ops.push(Op::Delete { key: format!("key-{:03}", (round * 7) % 97).into_bytes(), sync: false });
        ops.push(Op::Flush);
    }
    ops.extend((200..210).map(|number| put(number, number == 205)));
    Workload { name: "media-matrix".into(), ops }
}

/// Runs `workload()` and describes the volume it leaves.
pub fn build_volume() -> Result<Volume, SimError> {
    let workload = workload();
    let recorded = run(&workload, formatted_image()?, true)?;
    let mut image = recorded.history.initial.as_ref().clone();
    for write in &recorded.history.writes {
        apply(&mut image, write, recorded.sector_size, None);
    }
    let synced = workload.ops.iter().rposition(Op::is_sync_point).map_or(0, |index| index + 1);
    let keys: BTreeSet<Vec<u8>> = recorded.models.iter().flat_map(|model| model.keys().cloned()).collect();
    let (_, label) =
        lds_volume::read_labels(&MemoryImage(&image))?.choose().map(|(choice, label)| (choice, label.clone()))?;
    let label: Label = label;
    let geometry = label.geometry;
    let wraps_of = |kind: LogKind| {
        let (offset, _) = geometry.log_area(kind, 0);
        recorded.history.writes.iter().filter(|write| write.offset == offset && !write.bytes.is_empty()).count()
    };
    let wraps = (wraps_of(LogKind::Version), wraps_of(LogKind::Backup));
    let device = SimDevice::new(image.clone());
    let (db, _) = Db::open_device(Arc::new(device), Path::new("media matrix"), options(true))?;
    let levels = db.level_chunk_counts();
    drop(db);
    Ok(Volume {
        workload,
        image,
        history: recorded.history,
        models: recorded.models,
        synced,
        keys: keys.into_iter().collect(),
        geometry,
        levels,
        wraps,
    })
}

/// Sectors of `[start, end)` (area offsets) inside an area at `ofs_area`.
fn sectors_of(ofs_area: u64, start: u64, end: u64, sector: u64) -> Range<u64> {
    (ofs_area + start) / sector..(ofs_area + end).div_ceil(sector)
}

fn live_sectors<'a>(objects: impl IntoIterator<Item = &'a ChainObject>, ofs_area: u64, sector: u64) -> BTreeSet<u64> {
    objects
        .into_iter()
        .flat_map(|object| sectors_of(ofs_area, object.offset, object.header.next_offset(), sector))
        .collect()
}

/// Every metadata sector of the volume, and up to `data_sectors_per_slot` block sectors of
/// each referenced slot (evenly spread).
pub fn targets(volume: &Volume, data_sectors_per_slot: u64) -> Result<Vec<Target>, SimError> {
    let geometry = &volume.geometry;
    let sector = geometry.sector();
    let whole = 0..sector;
    let mut targets = vec![
        Target { structure: Structure::PrimaryLabel, sector: 0, bytes: whole.clone(), label: "label".into() },
        Target {
            structure: Structure::BackupLabel,
            sector: geometry.ofs_backup_label(),
            bytes: whole.clone(),
            label: "label".into(),
        },
    ];
    let (version_offset, version_len) = geometry.log_area(LogKind::Version, 0);
    let (backup_offset, backup_len) = geometry.log_area(LogKind::Backup, 0);
    let (areas, recovery) = lds_volume::inspect::recover(&MemoryImage(&volume.image), geometry, 0)?;
    let recovery = recovery.map_err(|source| SimError::VersionLog { at: String::new(), source })?;
    let state = &recovery.version_log;
    let version_context = lds_format::log::area_context(geometry, LogKind::Version, 0);
    let live_objects: Vec<ChainObject> = state.live_objects(&areas.version, &version_context).collect();
    let live = live_sectors(&live_objects, version_offset, sector);
    for number in sectors_of(version_offset, 0, version_len, sector) {
        let structure = if live.contains(&number) { Structure::VersionLogLive } else { Structure::VersionLogOther };
        let offset = number * sector;
        let label = format!("version log +{}", offset - version_offset);
        targets.push(Target { structure, sector: offset, bytes: whole.clone(), label });
    }
    let version = &state.version;
    let backup = recovery
        .backup_state()
        .ok_or_else(|| SimError::BackupLogDamaged { damage: format!("{:?}", recovery.damage()) })?;
    let live = live_sectors(&backup.objects, backup_offset, sector);
    for number in sectors_of(backup_offset, 0, backup_len, sector) {
        let structure = if live.contains(&number) { Structure::BackupLogLive } else { Structure::BackupLogOther };
        let offset = number * sector;
        let label = format!("backup log +{}", offset - backup_offset);
        targets.push(Target { structure, sector: offset, bytes: whole.clone(), label });
    }
    for chunk in version.chunks.values() {
        for sub_chunk in &chunk.sub_chunks {
            let slot_offset = geometry.slot_offset(sub_chunk.slot);
            let slot_end = slot_offset + geometry.slot_size;
            let footer_offset = slot_end - FOOTER_LEN as u64;
            let footer_bytes = &volume.image[footer_offset as usize..slot_end as usize];
            let footer = Footer::decode(footer_bytes, footer_offset, geometry.slot_size)
                .map_err(|source| SimError::Decode { at: format!("slot {}: ", sub_chunk.slot), source })?;
            let name = |what: &str| format!("chunk {} (level {}) {what}", chunk.chunk_id, chunk.level);
            let footer_sector = slot_end - sector;
            targets.push(Target {
                structure: Structure::ChunkFooter,
                sector: footer_sector,
                bytes: footer_offset - footer_sector..sector,
                label: name("footer"),
            });
            let tail_start = slot_offset + u64::from(footer.ofs_index);
            for number in tail_start / sector..footer_sector / sector {
                let offset = number * sector;
                let low = tail_start.max(offset) - offset;
                let label = name(&format!("tail +{}", offset - slot_offset));
                targets.push(Target { structure: Structure::ChunkTail, sector: offset, bytes: low..sector, label });
            }
            let body_sectors = u64::from(footer.len_body).div_ceil(sector);
            let count = data_sectors_per_slot.min(body_sectors);
            for pick in 0..count {
                let number = pick * body_sectors / count;
                let offset = slot_offset + number * sector;
                let high = (u64::from(footer.len_body) - number * sector).min(sector);
                let label = name(&format!("blocks +{}", number * sector));
                targets.push(Target { structure: Structure::ChunkData, sector: offset, bytes: 0..high, label });
            }
        }
    }
    Ok(targets)
}

/// The sector a misdirected read of `targets[index]` returns: the next one of the same
/// structure, or the next one at all when it is alone.
fn misdirect_source(targets: &[Target], index: usize) -> u64 {
    let structure = targets[index].structure;
    let after = targets[index + 1..].iter().chain(&targets[..index]);
    let same = after.clone().find(|target| target.structure == structure);
    same.or_else(|| after.clone().next()).map_or(targets[index].sector, |target| target.sector)
}

/// A deterministic bit position in `bytes` for case `variant`.
fn flip_position(target: &Target, variant: u64) -> (u64, u8) {
    let len = (target.bytes.end - target.bytes.start).max(1);
    let mixed = (target.sector ^ (variant + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let mixed = mixed ^ (mixed >> 31);
    (target.bytes.start + mixed % len, (mixed >> 40) as u8 % 8)
}

/// Sets up the device of one case; `None` when the fault changes nothing a read sees.
pub fn faulty_device(
    volume: &Volume,
    targets: &[Target],
    index: usize,
    fault: MediaFault,
    variant: u64,
) -> Option<SimDevice> {
    let target = &targets[index];
    let sector_size = volume.geometry.sector();
    let start = target.sector as usize;
    let original = &volume.image[start..start + sector_size as usize];
    let device = SimDevice::new(volume.image.clone()).with_sector_size(sector_size);
    match fault {
        MediaFault::Flip => {
            let (byte, bit) = flip_position(target, variant);
            device.flip_bit(target.sector + byte, bit);
        }
        MediaFault::Zero => {
            if original.iter().all(|&byte| byte == 0) {
                return None;
            }
            device.damage(target.sector, &vec![0; sector_size as usize]);
        }
        MediaFault::ReadError => device.inject(Fault::ReadRange { offset: target.sector, len: sector_size }),
        MediaFault::Stale => {
            let contents = volume.history.sector_contents(target.sector, sector_size);
            let older = contents.iter().rev().find(|content| content.as_slice() != original)?;
            device.damage(target.sector, older);
        }
        MediaFault::Misdirect => {
            let source = misdirect_source(targets, index);
            if volume.image[source as usize..(source + sector_size) as usize] == *original {
                return None;
            }
            device.inject(Fault::MisdirectedRead { sector: target.sector, source });
        }
    }
    Some(device)
}

/// What the reads of one case showed.
struct Reads {
    explicit_error: Option<String>,
    wrong: Vec<String>,
    /// The model the scan matched (the latest one that matches).
    state: Option<usize>,
}

fn read_everything(volume: &Volume, device: &SimDevice) -> Reads {
    let mut reads = Reads { explicit_error: None, wrong: Vec::new(), state: None };
    let allowed = volume.synced..volume.models.len();
    let db = match Db::open_device(Arc::new(device.clone()), Path::new("media matrix"), options(true)) {
        Ok((db, _)) => db,
        Err(error) => {
            reads.explicit_error = Some(format!("open: {error}"));
            return reads;
        }
    };
    match db.iter().and_then(Iterator::collect::<Result<Model, _>>) {
        Ok(state) => {
            reads.state = (0..volume.models.len()).rev().find(|&index| volume.models[index] == state);
            if reads.state.is_none() {
                reads.wrong.push(format!("a scan shows {} keys: the model after no operation", state.len()));
            }
        }
        Err(error) => reads.explicit_error = Some(format!("scan: {error}")),
    }
    for key in &volume.keys {
        match db.get(key) {
            Ok(value) => {
                let right = match reads.state {
                    Some(index) => volume.models[index].get(key) == value.as_ref(),
                    None => allowed.clone().any(|index| volume.models[index].get(key) == value.as_ref()),
                };
                if !right {
                    let key = String::from_utf8_lossy(key);
                    let shown = value.map_or_else(|| "nothing".into(), |value| format!("{} bytes", value.len()));
                    reads.wrong.push(format!("get {key} gives {shown}"));
                }
            }
            Err(error) => {
                reads.explicit_error.get_or_insert_with(|| format!("get: {error}"));
            }
        }
    }
    drop(db);
    reads
}

/// Runs one case on a prepared device.
pub fn run_case(volume: &Volume, device: &SimDevice) -> Case {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let fsck = check(device, CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {});
        let (fsck_reported, fsck_note) = match &fsck {
            Err(error) => (true, format!("fsck cannot check: {error}")),
            Ok(report) => match report.problems.iter().find(|problem| problem.code.severity() != Severity::Info) {
                Some(problem) => (true, format!("fsck {}: {}", problem.code.number(), problem.message)),
                None => {
                    let info: Vec<String> =
                        report.problems.iter().map(|problem| problem.code.number().to_string()).collect();
                    let note = if info.is_empty() {
                        "fsck clean".to_string()
                    } else {
                        format!("fsck clean but for info {}", info.join(", "))
                    };
                    (false, note)
                }
            },
        };
        let writes_before = device.write_count() + device.flush_count();
        let reads = read_everything(volume, device);
        let wrote = device.write_count() + device.flush_count() != writes_before;
        (fsck_reported, fsck_note, reads, wrote)
    }));
    let Ok((fsck_reported, fsck_note, reads, wrote)) = outcome else {
        return Case {
            verdict: Verdict::Wrong,
            fsck_reported: false,
            engine_wrong: false,
            wrote: false,
            panicked: true,
            detail: "panicked".into(),
        };
    };
    let last = volume.models.len() - 1;
    let wrong = !reads.wrong.is_empty();
    let rolled_back = !wrong && reads.state.is_some_and(|state| state < volume.synced);
    let clean = !wrong && reads.explicit_error.is_none();
    let verdict = if wrong && !fsck_reported {
        Verdict::Wrong
    } else if clean && reads.state == Some(last) {
        Verdict::Tolerated
    } else if clean && !fsck_reported && rolled_back {
        Verdict::RolledBack
    } else if clean && !fsck_reported {
        Verdict::Prefix
    } else {
        Verdict::Detected
    };
    let engine_wrong = wrong || rolled_back;
    let mut detail = fsck_note;
    if let Some(error) = &reads.explicit_error {
        detail.push_str(&format!("; {error}"));
    }
    if let Some(state) = reads.state.filter(|&state| state != last) {
        let synced = volume.synced;
        detail.push_str(&format!("; reads show the state after {state} of {last} operations (synced: {synced})"));
    }
    if let Some(first) = reads.wrong.first() {
        detail.push_str(&format!("; {} wrong reads, first: {first}", reads.wrong.len()));
    }
    if wrote {
        detail.push_str("; opening and reading wrote to the device");
    }
    Case { verdict, fsck_reported, engine_wrong, wrote, panicked: false, detail }
}

/// Runs `lds repair -y` on a case's device (the fault still armed: an unreadable sector
/// stays unreadable): whether fsck is clean afterwards, and whether every key then reads the
/// value it had after the last operation.
fn repair_case(volume: &Volume, device: &SimDevice) -> (bool, bool) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let options = lds_repair::RepairOptions::new(lds_repair::Mode::Yes);
        let repaired = lds_repair::repair(device, options, &mut |_, _| {}).is_ok_and(|report| report.exit_code() == 1);
        if !repaired {
            return (false, false);
        }
        let reads = read_everything(volume, device);
        let intact =
            reads.wrong.is_empty() && reads.explicit_error.is_none() && reads.state == Some(volume.models.len() - 1);
        (true, intact)
    }));
    outcome.unwrap_or((false, false))
}

/// Runs every fault on every target, with `flips` bit positions per sector.
pub fn run_matrix(volume: &Volume, targets: &[Target], flips: u64) -> Matrix {
    let mut matrix = Matrix::default();
    for target in targets {
        *matrix.sectors.entry(target.structure).or_default() += 1;
    }
    for (index, target) in targets.iter().enumerate() {
        for fault in MediaFault::ALL {
            let variants = if fault == MediaFault::Flip { flips } else { 1 };
            for variant in 0..variants {
                let cell = matrix.cells.entry((target.structure, fault)).or_default();
                let Some(device) = faulty_device(volume, targets, index, fault, variant) else {
                    cell.not_applicable += 1;
                    continue;
                };
                let case = run_case(volume, &device);
                cell.cases += 1;
                match case.verdict {
                    Verdict::Detected => cell.detected += 1,
                    Verdict::Tolerated => {
                        cell.tolerated += 1;
                        cell.tolerated_fsck_reported += u64::from(case.fsck_reported);
                    }
                    Verdict::Prefix => cell.prefix += 1,
                    Verdict::RolledBack => cell.rolled_back += 1,
                    Verdict::Wrong => cell.wrong += 1,
                }
                if case.fsck_reported && !case.panicked {
                    cell.repair_tried += 1;
                    let (repaired, intact) = repair_case(volume, &device);
                    cell.repaired += u64::from(repaired);
                    cell.repaired_intact += u64::from(intact);
                }
                let counted = matches!(case.verdict, Verdict::Wrong | Verdict::RolledBack);
                cell.engine_wrong += u64::from(case.engine_wrong && !counted);
                let broken = case.panicked || case.wrote;
                cell.broken += u64::from(broken);
                if case.engine_wrong || broken {
                    matrix.failures.push(format!(
                        "{} ({} at {}), {}{}: {}",
                        target.label,
                        target.structure.name(),
                        target.sector,
                        fault.name(),
                        if variants > 1 { format!(" #{variant}") } else { String::new() },
                        case.detail
                    ));
                }
            }
        }
    }
    matrix
}

/// How a matrix was run, for its document.
#[derive(Debug, Clone, Copy)]
pub struct MatrixRun {
    /// Bit positions flipped per sector.
    pub flips: u64,
    /// Block sectors per referenced slot (`u64::MAX`: all).
    pub data_sectors_per_slot: u64,
}

/// The matrix as a Markdown document (docs/media-matrix.md).
pub fn markdown(volume: &Volume, matrix: &Matrix, run: &MatrixRun) -> String {
    let mut text = String::new();
    let total = matrix.total();
    let data = if run.data_sectors_per_slot == u64::MAX {
        "every block sector".to_string()
    } else {
        format!("{} block sectors", run.data_sectors_per_slot)
    };
    text.push_str(&format!(
        "# Single-fault media matrix (docs/reliability.md L4)

Generated by `cargo run -p lds-sim --example media_matrix` (never edited by hand); the test
`crates/lds-sim/tests/media_matrix.rs` runs the same matrix with one flip per sector in CI.

The volume: the simulator's layout (3 MiB, 512-byte sectors, 64 KiB slots, a 16 KiB
version log, an 8 KiB backup log), written by the workload `{name}` ({ops} operations;
the last synced one is number {synced}). The version log wrapped {version_wraps} times,
the backup log {backup_wraps} times; chunks by level: {levels}.

One fault at a time goes into one sector: every sector of both labels, of both log areas
and of the tails (footer, block index, filter) of every referenced chunk, and {data} of
each referenced slot; each flip is repeated at {flips} bit positions. Then fsck (`--deep`)
runs, and the volume is opened and every key the workload touched is read back (a scan and
a `get` for each).

- **detected**: fsck reports a warning or an error (or cannot check), or opening or a read
  returns an explicit error; no read returned wrong data.
- **tolerated**: every read gives the right value (in parentheses: cases fsck reports too,
  such as a damaged label copy).
- **prefix**: fsck is clean and reads give the state after an earlier operation, at or after
  the last synced one: indistinguishable from a crash that lost unsynced writes.
- **rolled back**: fsck is clean and reads give a consistent state from before the last
  synced operation: acknowledged writes are lost, though no read mixes states.
- **wrong**: fsck is clean and reads give values no single state has. Must be 0.
- **engine wrong**: fsck reports the fault, but the engine still served wrong or rolled-back
  data instead of an error. Must be 0.
- **n/a**: the fault changes nothing (zeroing a zero sector, a sector with no earlier content,
  a misdirection to identical bytes).
- **repair**: of the cases fsck reports, how many `lds repair -y` repaired (fsck clean after,
  with the fault still armed: an unreadable sector stays unreadable), and of those how many
  read every key with the value it had after the last operation (intact); the others lost
  what the damaged sector held, each loss reported by repair.

Totals: {cases} cases: {detected} detected, {tolerated} tolerated, {prefix} prefix,
{rolled_back} rolled back, **{wrong} wrong**, **{engine_wrong} engine wrong**, {broken} panics
or recovery writes. `lds repair -y` repaired {repaired} of the {repair_tried} cases fsck
reports ({repaired_intact} with every key intact).

| structure | sectors | fault | cases | detected | tolerated (fsck too) | prefix | rolled back | wrong | engine wrong | n/a | repair |
|---|---|---|---|---|---|---|---|---|---|---|---|
",
        name = volume.workload.name,
        ops = volume.workload.ops.len(),
        synced = volume.synced,
        version_wraps = volume.wraps.0,
        backup_wraps = volume.wraps.1,
        levels = volume
            .levels
            .iter()
            .enumerate()
            .filter(|(_, &count)| count > 0)
            .map(|(level, count)| format!("level {level}: {count}"))
            .collect::<Vec<_>>()
            .join(", "),
        flips = run.flips,
        cases = total.cases,
        detected = total.detected,
        tolerated = total.tolerated,
        prefix = total.prefix,
        rolled_back = total.rolled_back,
        wrong = total.wrong,
        engine_wrong = total.engine_wrong,
        broken = total.broken,
        repaired = total.repaired,
        repair_tried = total.repair_tried,
        repaired_intact = total.repaired_intact,
    ));
    for structure in Structure::ALL {
        let sectors = matrix.sectors.get(&structure).copied().unwrap_or(0);
        for fault in MediaFault::ALL {
            let cell = matrix.cells.get(&(structure, fault)).copied().unwrap_or_default();
            text.push_str(&format!(
                "| {} | {sectors} | {} | {} | {} | {} ({}) | {} | {} | {} | {} | {} | {} |\n",
                structure.name(),
                fault.name(),
                cell.cases,
                cell.detected,
                cell.tolerated,
                cell.tolerated_fsck_reported,
                cell.prefix,
                cell.rolled_back,
                cell.wrong,
                cell.engine_wrong,
                cell.not_applicable,
                if cell.repair_tried == 0 {
                    "-".to_string()
                } else {
                    format!("{} of {} ({} intact)", cell.repaired, cell.repair_tried, cell.repaired_intact)
                },
            ));
        }
    }
    text.push_str(
        "
## Reading the matrix

- Labels: either copy may be lost or unreadable; the other is used (fsck reports the bad
  one, repair rewrites it from the good one).
- Unreadable sectors (EIO) stay unreadable in the simulator, where a real device would remap
  a sector when it is written. fsck reads them as zeros and reports them (107) with the
  damage that follows; repair rewrites what they held elsewhere where it can (every such
  chunk case), but it rewrites labels and log areas in place, so those cases stay reported.
- Version log: every append is flushed before the next (SPEC.md §10.1), so valid objects
  after the end of the live chain prove damage: fsck reports 207 and the engine refuses to
  open rather than serve an older version (and then overwrite the later ones).
- Chunks: the engine checks each footer's digest against the version (a stale or misdirected
  footer is an error, not another chunk's data), every block's checksum on read, and the whole
  sub-chunk digest before a compaction rewrites it.
- Backup log, live objects: unsynced appends are flushed together and land in any order,
  torn at sector boundaries, so a crash can leave a gap with later objects standing. When a
  single-sector object is damaged, no crash explains it (fsck 303, and the engine refuses to
  open). A zeroed, stale or misdirected sector, or damage in an object that spans sectors,
  looks like a crash too, unless a later batch's sync watermark (SPEC.md §7.1, format 1.1)
  records the lost object as durable: then it is damage (fsck 303, the engine refuses to open,
  repair keeps what stands before it). The 9 prefix cases lose only writes after the last
  synced one, which no watermark covers: exactly what a crash may lose.
",
    );
    if !matrix.failures.is_empty() {
        text.push_str("\n## Cases with lost or wrong data\n\n");
        for failure in &matrix.failures {
            text.push_str(&format!("- {failure}\n"));
        }
    }
    text
}
