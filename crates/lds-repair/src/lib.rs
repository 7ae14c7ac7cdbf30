//! Offline repair of LDS volumes (`lds repair`), after e2fsck: `-n` reports what it would do
//! and writes nothing, `-p` applies only fixes that lose no data, `-y` applies every fix it
//! can. It starts from the checker's report (`lds-check`), so that it repairs what fsck
//! reports, and ends by checking again.
//!
//! What it does, for each instance with a problem, is rebuild that instance's tree from what
//! is still readable and commit it with one new base version:
//! - the version: the recovered one, or where the version log is damaged the newest base
//!   version that still builds with the objects chained after it (parts that contradict it
//!   left out), plus the data newer than it that chunks in free slots hold (SPEC.md §8.5);
//! - every chunk the checker finds a problem in is read block by block and the entries of the
//!   blocks whose checksum holds are rewritten into new chunks at its level; overlapping
//!   chunks of a level are merged into disjoint ones; extra odd flags are cleared;
//! - an unfinished compaction is finished from its journal (or rolled back when it cleaned
//!   nothing yet, or is inconsistent);
//! - the backup log's batches that recovery replays (those before any damage) are written to
//!   new level-0 chunks, and the new base version restarts the backup log at its head;
//! - a log chunk (SPEC.md §8.9) stays when its references all resolve and the new base version
//!   retains what they name; otherwise it is rewritten as an ordinary chunk, its references
//!   read into puts and the entries of those that do not resolve dropped (see `logchunks`;
//!   the check reports them as problems 801 to 803).
//!
//! Nothing the old state needs is overwritten until the last write: new chunks go to slots no
//! version (old or new) uses, the new base version and a WOR go to a part of the version log
//! outside its live region, and one sector write at offset 0 (a WOL pointing at them) switches
//! recovery to the new state (SPEC.md §9.2). A crash before that leaves the old state (the
//! written chunks are free slots); after it, the new one. (Where the version log is broken and
//! its live region leaves no room, the new base version may go over the old chain's objects
//! but never over those of the good base version it was rebuilt from: a crash then leaves a
//! newest good base version, the new one once it landed whole, that a second repair finishes.)
//! Nothing is ever written to a backup log area, where kept log chunks name their batches
//! (checked before the first write). With an undo file
//! (`lds_volume::undo`) every write can also be rolled back byte for byte.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

pub mod devices;
pub mod dropped;
mod flip;
mod instance;
mod labels;
mod logchunks;
pub mod metadump;
pub mod resize;
mod reuse;
pub mod salvage;

use std::collections::BTreeSet;

use lds_check::{check, CheckError, CheckOptions, Code, Report, Severity};
use lds_format::algorithms::pack::{place, ChunkFormat, ChunkPacker};
use lds_format::chunk::builder::BuiltSubChunk;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::Label;
use lds_format::log::area_context;
use lds_format::version::meta::CHUNK_FLAG_ODD;
use lds_format::version::Version;
use lds_volume::{BlockDevice, DeviceError};

pub use dropped::{Dropped, KeyFrom, Lost};
pub use instance::Run;

/// How much repair may do (e2fsck's `-n`, `-p`, `-y`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Report what would be done; write nothing.
    DryRun,
    /// Apply only the fixes that lose no data; leave the rest.
    Preen,
    /// Apply every fix it can.
    Yes,
}

/// Options of a repair.
#[derive(Debug, Clone, Copy)]
pub struct RepairOptions {
    /// How much to do.
    pub mode: Mode,
    /// Block size of the chunks repair writes.
    pub block_size: usize,
    /// Filter bits per key of the chunks repair writes.
    pub bloom_bits_per_key: u32,
}

impl RepairOptions {
    /// The engine's chunk sizes, in `mode`.
    pub fn new(mode: Mode) -> Self {
        Self { mode, block_size: 4096, bloom_bits_per_key: 10 }
    }
}

/// Whether a fix can lose data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixClass {
    /// It loses nothing (`-p` applies it).
    Preen,
    /// It may drop data, each drop reported (`-y` only).
    Fix,
}

/// What became of a fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FixState {
    /// Written.
    Applied,
    /// Planned only (`-n`).
    Planned,
    /// Not applied, and why.
    Refused(String),
}

/// One fix: what it changes and what data it drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fix {
    /// The problem codes it answers.
    pub codes: Vec<Code>,
    /// The structure concerned.
    pub structure: String,
    /// Its device offset.
    pub offset: u64,
    /// What it does.
    pub action: String,
    /// The data it drops (keys, key ranges, sequence ranges, chunks), each in words and as
    /// the entries it covers; empty when none.
    pub dropped: Vec<Dropped>,
    /// Whether it can lose data.
    pub class: FixClass,
    /// What became of it.
    pub state: FixState,
}

impl Fix {
    fn new(codes: Vec<Code>, structure: impl Into<String>, offset: u64, action: impl Into<String>) -> Self {
        Self {
            codes,
            structure: structure.into(),
            offset,
            action: action.into(),
            dropped: Vec::new(),
            class: FixClass::Preen,
            state: FixState::Planned,
        }
    }

    fn dropping(mut self, dropped: Vec<Dropped>) -> Self {
        if !dropped.is_empty() {
            self.class = FixClass::Fix;
        }
        self.dropped = dropped;
        self
    }

    fn class(mut self, class: FixClass) -> Self {
        self.class = class;
        self
    }

    /// One line: `fix 405 chunk 8 of instance 0 @ 917504: action`.
    pub fn line(&self) -> String {
        let mut codes: Vec<String> = self.codes.iter().map(|code| code.number().to_string()).collect();
        if codes.is_empty() {
            codes.push("-".into());
        }
        let state = match &self.state {
            FixState::Applied => "fixed".to_string(),
            FixState::Planned => "would fix".to_string(),
            FixState::Refused(why) => format!("not fixed ({why})"),
        };
        format!("{state} {} {} @ {}: {}", codes.join(","), self.structure, self.offset, self.action)
    }
}

/// One write repair made (or would make).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// What was written.
    pub structure: String,
    /// Device offset.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// The outcome of a repair.
#[derive(Debug, Clone)]
pub struct RepairReport {
    /// The check before.
    pub before: Report,
    /// Every fix, with its state.
    pub fixes: Vec<Fix>,
    /// Problems no in-place repair answers (use `lds salvage`).
    pub unrepairable: Vec<String>,
    /// The writes, in order.
    pub writes: Vec<Written>,
    /// The check after (when anything was written).
    pub after: Option<Report>,
}

impl RepairReport {
    /// e2fsck's exit code: 0 nothing to fix, 1 errors corrected, 4 errors left uncorrected.
    pub fn exit_code(&self) -> i32 {
        let inconsistent = |report: &Report| report.count(Severity::Error) + report.count(Severity::Warning) > 0;
        match &self.after {
            _ if !inconsistent(&self.before) => 0,
            Some(after) if !inconsistent(after) => 1,
            _ => 4,
        }
    }

    /// Bytes written.
    pub fn bytes_written(&self) -> u64 {
        self.writes.iter().map(|write| write.len).sum()
    }

    /// Whether a fix that was applied (or, with `-n`, planned) names the entry (`key`,
    /// `sequence`) of `instance` among what it drops (docs/reliability.md I10).
    pub fn reports_dropped(&self, instance: u32, key: &[u8], sequence: u64) -> bool {
        self.fixes
            .iter()
            .filter(|fix| matches!(fix.state, FixState::Applied | FixState::Planned))
            .flat_map(|fix| fix.dropped.iter().flat_map(|dropped| dropped.lost.iter()))
            .any(|lost| lost.covers(instance, key, sequence))
    }
}

/// Why a repair could not run, or stopped before writing anything (the volume is unchanged),
/// or failed while writing (the undo file restores it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepairError {
    /// The check could not run.
    #[error(transparent)]
    Check(#[from] CheckError),
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// Too few free slots for the chunks repair must write.
    #[error("{device}: repair must write {needed} chunks and only {free} slots are free ({left} more free slots hold data lds salvage reads that nothing else keeps, which repair does not write over); nothing was written (lds salvage copies what is readable to a new volume)")]
    NoSpace {
        /// The device.
        device: String,
        /// Slots needed.
        needed: usize,
        /// Slots free.
        free: usize,
        /// Free slots left alone: they hold data salvage reads that nothing else keeps.
        left: usize,
    },
    /// The version log has no room for the rebuilt base version outside its live region.
    #[error("{device}: the version log of instance {instance} has no room outside its live region for the rebuilt base version ({len} bytes); nothing was written (lds salvage copies what is readable to a new volume)")]
    NoRoom {
        /// The device.
        device: String,
        /// The instance.
        instance: u32,
        /// Bytes of the base version object.
        len: u64,
    },
    /// The tree repair built does not hold together (a bug): nothing was written.
    #[error("{device}: instance {instance}: the rebuilt version does not build ({reason}); nothing was written")]
    Inconsistent {
        /// The device.
        device: String,
        /// The instance.
        instance: u32,
        /// Why.
        reason: String,
    },
}

/// A write to make: device offset, bytes, what it is.
pub(crate) struct PlannedWrite {
    pub(crate) offset: u64,
    pub(crate) bytes: Vec<u8>,
    pub(crate) structure: String,
}

/// Repairs the volume on `device` (opened for writing by the caller, who holds its lock).
/// `progress(done, total)` hears bytes of chunks checked.
pub fn repair(
    device: &dyn BlockDevice,
    options: RepairOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RepairReport, RepairError> {
    let name = device.name().display().to_string();
    let check_options = CheckOptions { deep: true, ..Default::default() };
    let before = check(device, check_options, progress)?;
    let mut report = RepairReport {
        before: before.clone(),
        fixes: Vec::new(),
        unrepairable: Vec::new(),
        writes: Vec::new(),
        after: None,
    };
    if before.first_inconsistency().is_none() {
        return Ok(report);
    }
    let Some(labels) = labels::plan(device, &mut report)? else {
        return Ok(report);
    };
    let label = labels.label.clone();
    let geometry = label.geometry;
    if options.mode == Mode::Preen && labels.writes.iter().any(|(fix, _)| fix.class == FixClass::Fix) {
        // The labels need a choice that -p does not make; nothing else is done before it.
        labels.writes(options.mode, &mut report);
        return Ok(report);
    }
    // Instances with a problem of their own; a problem of no instance (a slot two instances
    // use) concerns every instance.
    let unattributed = before.problems.iter().any(|problem| {
        problem.code.severity() != Severity::Info && problem.instance().is_none() && !is_label_problem(problem.code)
    });
    let concerned: BTreeSet<u32> = (0..geometry.instance_count)
        .filter(|&instance| {
            unattributed
                || before
                    .problems
                    .iter()
                    .any(|problem| problem.code.severity() != Severity::Info && problem.instance() == Some(instance))
        })
        .collect();
    let mut sources = Vec::new();
    for instance in 0..geometry.instance_count {
        sources.push(instance::Source::read(device, &geometry, instance)?);
    }
    let old_slots: BTreeSet<u64> = sources.iter().flat_map(instance::Source::referenced_slots).collect();
    let mut plans = Vec::new();
    for source in &sources {
        if concerned.contains(&source.instance) {
            plans.push(instance::plan(device, &label, source, &old_slots)?);
        }
    }
    let preen = options.mode == Mode::Preen;
    for plan in &mut plans {
        let loses_data = plan.fixes.iter().any(|fix| fix.class == FixClass::Fix);
        plan.apply = !(preen && loses_data);
        if !plan.apply {
            for fix in &mut plan.fixes {
                fix.state = FixState::Refused("it may drop data: run lds repair -y".into());
            }
        }
    }
    let mut writes: Vec<PlannedWrite> = labels.writes(options.mode, &mut report);
    let present = |slot: u64| label.slot_present(slot);
    let chunk_writes = place_chunks(
        Placement { name: &name, geometry: &geometry, device, keep_readable: true },
        &mut plans,
        &old_slots,
        &options,
        &present,
        lds_format::algorithms::pack::ChunkEncoding::of_label(&label),
    )?;
    let mut flips = Vec::new();
    for plan in plans.iter().filter(|plan| plan.apply) {
        let base = plan.base();
        let inconsistent =
            |reason: String| RepairError::Inconsistent { device: name.clone(), instance: plan.instance, reason };
        let version = Version::from_base(&base).map_err(|error| inconsistent(error.to_string()))?;
        // The log chunks that stay name what they named, retained by the new version
        // (SPEC.md §8.9).
        let old = sources.iter().find(|source| source.instance == plan.instance).and_then(instance::Source::version);
        let (_, len_backup_log) = geometry.log_area(LogKind::Backup, plan.instance);
        logchunks::check_kept(old.as_ref(), &version, len_backup_log).map_err(inconsistent)?;
        let context = area_context(&geometry, LogKind::Version, plan.instance);
        let flip = flip::plan(&context, &base, plan.next_lsn, plan.next_sn, &plan.protected)
            .or_else(|_| flip::plan(&context, &base, plan.next_lsn, plan.next_sn, &plan.needed))
            .map_err(|len| RepairError::NoRoom { device: name.clone(), instance: plan.instance, len })?;
        flips.push((plan.instance, context.ofs_area, flip));
    }
    // Nothing repair writes lands in a backup log area, where the log chunks that stay name
    // their batches: proved before the first write.
    let flip_writes = flips.iter().flat_map(|(_, ofs_area, flip)| {
        flip.writes().map(move |(offset, bytes, what)| (ofs_area + offset, bytes.len() as u64, what))
    });
    let planned = writes.iter().chain(&chunk_writes);
    let all =
        planned.map(|write| (write.offset, write.bytes.len() as u64, write.structure.as_str())).chain(flip_writes);
    logchunks::check_writes(&geometry, all).map_err(|(instance, reason)| RepairError::Inconsistent {
        device: name.clone(),
        instance,
        reason,
    })?;
    for plan in plans {
        report.fixes.extend(plan.fixes);
    }
    if options.mode == Mode::DryRun {
        let planned = writes.iter().chain(&chunk_writes);
        report.writes = planned.map(written).collect();
        for (instance, ofs_area, flip) in &flips {
            report.writes.extend(flip.writes().map(|(offset, bytes, structure)| Written {
                structure: format!("{structure} of the version log of instance {instance}"),
                offset: ofs_area + offset,
                len: bytes.len() as u64,
            }));
        }
        return Ok(report);
    }
    // The labels, then the chunks, then each instance's switch to its new state.
    write_all(device, &writes, &mut report.writes)?;
    writes.clear();
    write_all(device, &chunk_writes, &mut report.writes)?;
    for (instance, ofs_area, flip) in &flips {
        let structure = |what: &str| format!("{what} of the version log of instance {instance}");
        let (shadow, switch): (Vec<PlannedWrite>, Vec<PlannedWrite>) = flip
            .writes()
            .map(|(offset, bytes, what)| PlannedWrite {
                offset: ofs_area + offset,
                bytes: bytes.to_vec(),
                structure: structure(what),
            })
            .partition(|write| write.offset != *ofs_area);
        write_all(device, &shadow, &mut report.writes)?;
        write_all(device, &switch, &mut report.writes)?;
    }
    for fix in &mut report.fixes {
        if fix.state == FixState::Planned {
            fix.state = FixState::Applied;
        }
    }
    if !report.writes.is_empty() {
        report.after = Some(check(device, check_options, &mut |_, _| {})?);
    }
    Ok(report)
}

fn is_label_problem(code: Code) -> bool {
    code.number() < 200
}

pub(crate) fn written(write: &PlannedWrite) -> Written {
    Written { structure: write.structure.clone(), offset: write.offset, len: write.bytes.len() as u64 }
}

/// Writes in order, then one flush (a group of writes that may land in any order).
pub(crate) fn write_all(
    device: &dyn BlockDevice,
    writes: &[PlannedWrite],
    done: &mut Vec<Written>,
) -> Result<(), RepairError> {
    if writes.is_empty() {
        return Ok(());
    }
    for write in writes {
        device.write_at(write.offset, &write.bytes)?;
        done.push(written(write));
    }
    device.flush()?;
    Ok(())
}

/// Where `place_chunks` writes: the volume, and whether free slots that hold data salvage
/// reads are kept (`reuse`: repair) or taken in order (`lds resize`, `lds device`).
pub(crate) struct Placement<'a> {
    pub(crate) name: &'a str,
    pub(crate) geometry: &'a Geometry,
    pub(crate) device: &'a dyn BlockDevice,
    pub(crate) keep_readable: bool,
}

/// Packs every applied plan's runs into chunks, places them in `usable` slots that no version
/// uses (old or new), adds their metadata to the plans, and returns their writes.
pub(crate) fn place_chunks(
    placement: Placement<'_>,
    plans: &mut [instance::InstancePlan],
    old_slots: &BTreeSet<u64>,
    options: &RepairOptions,
    usable: &dyn Fn(u64) -> bool,
    encoding: lds_format::algorithms::pack::ChunkEncoding,
) -> Result<Vec<PlannedWrite>, RepairError> {
    let Placement { name, geometry, device, keep_readable } = placement;
    let mut value_moves = Vec::new();
    for (index, plan) in plans.iter_mut().enumerate().filter(|(_, plan)| plan.apply) {
        value_moves.extend(std::mem::take(&mut plan.value_moves).into_iter().map(|(meta, image)| (index, meta, image)));
    }
    let used: BTreeSet<u64> = plans
        .iter()
        .flat_map(|plan| plan.kept.iter().flat_map(|chunk| chunk.slots().collect::<Vec<_>>()).chain(plan.value_slots()))
        .collect();
    let unavailable: BTreeSet<u64> = plans
        .iter()
        .flat_map(|plan| plan.source_slots.iter().copied())
        .chain(used)
        .chain(old_slots.iter().copied())
        .collect();
    // What the rebuilt trees hold, so that a free slot whose entries they all hold may be
    // written over (docs/reliability.md I10).
    let holds = plans
        .iter()
        .filter(|plan| plan.apply)
        .map(|plan| (plan.instance, reuse::Holds::new(&plan.kept, plan.runs.iter().flat_map(|run| &run.entries))))
        .collect();
    let candidates = (0..geometry.num_slots).filter(|&slot| usable(slot) && !unavailable.contains(&slot));
    let mut free = reuse::FreeSlots::new(device, geometry, candidates, holds, keep_readable);
    // Values too large to stay inline (copied out of a damaged value chunk) go to new value
    // chunks (SPEC.md §8.6, §16).
    let mut writes = separate_large_values(name, geometry, plans, &mut free, encoding.digest)?;
    let separated = writes.len();
    let mut packed: Vec<(usize, BuiltSubChunk, u8, u8)> = Vec::new();
    for (index, plan) in plans.iter_mut().enumerate().filter(|(_, plan)| plan.apply) {
        let format = ChunkFormat::new(geometry, plan.instance, options.block_size, options.bloom_bits_per_key)
            .with_encoding(encoding);
        for run in std::mem::take(&mut plan.runs) {
            let mut packer = ChunkPacker::new(format);
            for entry in &run.entries {
                packer.push(&entry.key, entry.sequence, entry.kind, &entry.value);
            }
            let chunks = packer.finish();
            // An odd chunk stays one chunk; a run that packs into several is not odd.
            let flags = if chunks.len() == 1 { run.flags } else { run.flags & !CHUNK_FLAG_ODD };
            packed.extend(chunks.into_iter().map(|chunk| (index, chunk.chunk, run.level, flags)));
        }
    }
    let needed = packed.len() + value_moves.len();
    let slots = free.take(needed)?;
    if slots.len() < needed {
        return Err(RepairError::NoSpace {
            device: name.to_string(),
            needed: needed + separated,
            free: slots.len() + separated,
            left: free.left,
        });
    }
    let mut free = slots.into_iter();
    // Value chunks move byte for byte: the footer names no slot (SPEC.md §8.6).
    for ((index, meta, image), slot) in value_moves.into_iter().zip(free.by_ref()) {
        let plan = &mut plans[index];
        let structure = format!(
            "value chunk {} of instance {} (moved from slot {})",
            meta.value_chunk_id, plan.instance, meta.slot
        );
        writes.push(PlannedWrite { offset: geometry.slot_offset(slot), bytes: image, structure });
        plan.move_value_chunk(meta.value_chunk_id, slot);
    }
    for ((index, mut chunk, level, flags), slot) in packed.into_iter().zip(free) {
        let meta = place(&mut chunk, slot, level, flags);
        let plan = &mut plans[index];
        let offset = geometry.slot_offset(slot);
        let structure = format!("chunk {slot} of instance {} (new)", plan.instance);
        let tail = chunk.tail();
        writes.push(PlannedWrite { offset, bytes: chunk.body, structure: structure.clone() });
        writes.push(PlannedWrite { offset: offset + geometry.slot_size - tail.len() as u64, bytes: tail, structure });
        plan.kept.push(meta);
    }
    Ok(writes)
}

/// Moves the values above a quarter slot of the applied plans' runs (on volumes with value
/// chunks) to new value chunks in `free` slots; returns their writes.
fn separate_large_values(
    name: &str,
    geometry: &Geometry,
    plans: &mut [instance::InstancePlan],
    free: &mut reuse::FreeSlots<'_>,
    digest: lds_format::digest::DigestKind,
) -> Result<Vec<PlannedWrite>, RepairError> {
    use lds_format::value::{ValueFormat, ValuePacker};
    let inline_max = (geometry.slot_size / 4) as usize;
    let mut writes = Vec::new();
    for plan in plans.iter_mut().filter(|plan| plan.apply) {
        let Some(values) = plan.template.values.as_mut() else { continue };
        let format = ValueFormat {
            slot_size: geometry.slot_size,
            instance: plan.instance,
            volume_uuid: geometry.volume_uuid,
            digest,
        };
        let mut packer = ValuePacker::new(format);
        let mut next_id = values.next_value_chunk_id;
        let mut taken = 0;
        for run in &mut plan.runs {
            for entry in run
                .entries
                .iter_mut()
                .filter(|entry| entry.kind == lds_format::entry::EntryKind::Put && entry.value.len() > inline_max)
            {
                let pointer = packer.add(&entry.value, || {
                    let slot = free.next_slot()?.ok_or(RepairError::NoSpace {
                        device: name.to_string(),
                        needed: taken + 1,
                        free: taken,
                        left: free.left,
                    })?;
                    taken += 1;
                    next_id += 1;
                    Ok::<_, RepairError>((next_id - 1, slot))
                })?;
                entry.kind = lds_format::entry::EntryKind::Pointer;
                entry.value = pointer.encode();
            }
        }
        for built in packer.finish() {
            let structure = format!("value chunk {} of instance {} (new)", built.footer.value_chunk_id, plan.instance);
            writes.push(PlannedWrite {
                offset: geometry.slot_offset(built.slot),
                bytes: built.slot_image(),
                structure,
            });
            values.chunks.push(built.meta());
        }
        values.next_value_chunk_id = next_id;
    }
    Ok(writes)
}

/// The label repair works with, and label writes to make.
pub(crate) struct LabelPlan {
    label: Label,
    writes: Vec<(Fix, PlannedWrite)>,
}

impl LabelPlan {
    /// The label writes allowed in `mode`, their fixes recorded in `report`.
    fn writes(&self, mode: Mode, report: &mut RepairReport) -> Vec<PlannedWrite> {
        let mut writes = Vec::new();
        for (fix, write) in &self.writes {
            let mut fix = fix.clone();
            if mode == Mode::Preen && fix.class == FixClass::Fix {
                fix.state = FixState::Refused("it needs a choice between the labels: run lds repair -y".into());
            } else {
                writes.push(PlannedWrite {
                    offset: write.offset,
                    bytes: write.bytes.clone(),
                    structure: write.structure.clone(),
                });
            }
            report.fixes.push(fix);
        }
        writes
    }
}
