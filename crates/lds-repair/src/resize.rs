//! Offline resize (`lds resize`, SPEC.md §14): grow or shrink a volume's slot area.
//!
//! The order of writes makes every crash leave the old geometry or the new one, each with
//! every committed key, and a second run finish the job:
//! 1. (shrink) every chunk using a slot at or past the new slot count is copied below it and
//!    each instance switches, by one sector write (as repair switches), to a new base version
//!    of the same tree that references the copies; the old geometry still holds;
//! 2. the backup label of the new geometry (generation + 1) is written at the new end, where
//!    nothing reads it yet, and flushed;
//! 3. the primary label of the new geometry is written and flushed: one sector, the switch
//!    (a reader finds the backup label where the primary's geometry puts it);
//! 4. each instance switches to a new base version replicating the new geometry, with the
//!    labels' generation (until then a reader uses the label's geometry, SPEC.md §14, and the
//!    engine allocates only slots both geometries hold).
//!
//! The caller extends an image file before (grow) and truncates it after (shrink).

use std::collections::BTreeSet;

use lds_check::{check, CheckOptions, Severity};
use lds_format::geometry::{Geometry, LogKind, SLOTS_COUNT_MIN};
use lds_format::label::Label;
use lds_format::log::area_context;
use lds_format::version::Version;
use lds_volume::{BlockDevice, DeviceError};

use crate::instance::{rebase_plan, NotRebasable, Source};
use crate::{flip, logchunks, place_chunks, write_all, Placement, PlannedWrite, RepairError, RepairOptions, Written};

/// Why a resize or a device change could not run (nothing was written unless the message says
/// so).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResizeError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The writes failed or found no room (see the repair error).
    #[error(transparent)]
    Repair(#[from] RepairError),
    /// The volume has problems to repair first.
    #[error("{device}: fsck reports {problem}; run lds repair first (nothing was written)")]
    Damaged {
        /// The device.
        device: String,
        /// The first problem.
        problem: String,
    },
    /// A journaled compaction is unfinished.
    #[error("{device}: instance {instance} has an unfinished compaction ({id}); finish it with lds compaction resume first (nothing was written)")]
    Unfinished {
        /// The device.
        device: String,
        /// The instance.
        instance: u32,
        /// The compaction.
        id: u64,
    },
    /// The target cannot be laid out or holds too little.
    #[error("{device}: {reason} (nothing was written)")]
    Refused {
        /// The device.
        device: String,
        /// Why.
        reason: String,
    },
}

/// What a resize will do or did.
#[derive(Debug, Clone)]
pub struct ResizePlan {
    /// The geometry now (the label's).
    pub old: Geometry,
    /// The geometry asked for.
    pub new: Geometry,
    /// Chunks and value chunks to move below the new slot count.
    pub moves: Vec<Move>,
    /// Instances whose base version does not replicate the new geometry yet.
    pub rebase: Vec<u32>,
    /// Slots in use, over every instance.
    pub slots_in_use: u64,
    /// The smallest volume length the data allows.
    pub min_len: u64,
}

impl ResizePlan {
    /// Bytes of chunk data to copy.
    pub fn bytes_to_copy(&self) -> u64 {
        self.moves.iter().map(|moved| moved.bytes).sum()
    }

    /// The fewest slots the volume may keep.
    pub fn num_slots_min(&self) -> u64 {
        num_slots_min(self.slots_in_use)
    }

    /// Nothing is left to do.
    pub fn done(&self) -> bool {
        self.old == self.new && self.rebase.is_empty()
    }
}

/// The fewest slots a volume with `slots_in_use` may keep: two stay free, so that the store
/// can still flush (a chunk and its value chunk), and at least `SLOTS_COUNT_MIN`.
fn num_slots_min(slots_in_use: u64) -> u64 {
    (slots_in_use + 2).max(SLOTS_COUNT_MIN)
}

/// What moves to another slot in a shrink or a device removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// A chunk (its entries are rewritten), by id.
    Chunk(u64),
    /// A value chunk (SPEC.md §8.6: copied byte for byte, keeping its id), by id.
    ValueChunk(u64),
}

/// One chunk or value chunk to move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// The owning instance.
    pub instance: u32,
    /// What moves.
    pub what: Moved,
    /// The slots it uses now.
    pub slots: Vec<u64>,
    /// Bytes to copy (a chunk's data, a value chunk's body).
    pub bytes: u64,
}

/// Every chunk and value chunk of the versions with a slot `leaving`.
pub(crate) fn moves_off(all: &[(Source, Version)], leaving: &dyn Fn(u64) -> bool) -> Vec<Move> {
    let mut moves = Vec::new();
    for (source, version) in all {
        for chunk in version.chunks.values() {
            let slots: Vec<u64> = chunk.slots().collect();
            if slots.iter().any(|&slot| leaving(slot)) {
                moves.push(Move {
                    instance: source.instance,
                    what: Moved::Chunk(chunk.chunk_id),
                    slots,
                    bytes: chunk.len_data,
                });
            }
        }
        for value_chunk in version.value_chunks.values().filter(|value_chunk| leaving(value_chunk.slot)) {
            moves.push(Move {
                instance: source.instance,
                what: Moved::ValueChunk(value_chunk.value_chunk_id),
                slots: vec![value_chunk.slot],
                bytes: u64::from(value_chunk.len_body),
            });
        }
    }
    moves
}

/// Every slot the versions use: chunks, value chunks, and the value chunks only the backup
/// logs name (SPEC.md §9.4).
pub(crate) fn slots_used(all: &[(Source, Version)]) -> BTreeSet<u64> {
    let mut used = BTreeSet::new();
    for (source, version) in all {
        used.extend(version.chunks.values().flat_map(|chunk| chunk.slots()));
        used.extend(version.value_chunks.values().map(|value_chunk| value_chunk.slot));
        used.extend(source.pending_value_slots().values());
    }
    used
}

/// Refuses a move off slots `leaving` when one of them holds a value chunk only a backup log
/// names: its batches' pointers give its slot, so it cannot move until a flush adds it to the
/// version.
pub(crate) fn refuse_pending(
    device: &dyn BlockDevice,
    all: &[(Source, Version)],
    leaving: &dyn Fn(u64) -> bool,
) -> Result<(), ResizeError> {
    for (source, _) in all {
        if let Some((id, slot)) = source.pending_value_slots().iter().find(|(_, slot)| leaving(**slot)) {
            return Err(ResizeError::Refused {
                device: device_name(device),
                reason: format!(
                    "instance {}: value chunk {id} in slot {slot} is named only by the backup log (written before its batch); run lds recover first so that a flush adds it to the version (nothing was written)",
                    source.instance
                ),
            });
        }
    }
    Ok(())
}

/// The geometry of the volume with `volume_len` bytes: the same areas, as many slots as fit
/// before the backup label (SPEC.md §3).
pub fn resized(geometry: &Geometry, volume_len: u64) -> Geometry {
    let sector = geometry.sector();
    let volume_len = volume_len / sector * sector;
    let room = volume_len.saturating_sub(sector).saturating_sub(geometry.ofs_slot_area);
    Geometry { volume_len, num_slots: room / geometry.slot_size, ..*geometry }
}

fn device_name(device: &dyn BlockDevice) -> String {
    device.name().display().to_string()
}

pub(crate) fn label_of(device: &dyn BlockDevice) -> Result<Label, ResizeError> {
    let labels = lds_volume::read_labels(device)?;
    let chosen = labels.choose().map(|(_, label)| label.clone());
    chosen.map_err(|_| ResizeError::Damaged { device: device_name(device), problem: "no usable label".into() })
}

/// The versions of every instance (refusing damage and unfinished compactions).
pub(crate) fn versions(device: &dyn BlockDevice, geometry: &Geometry) -> Result<Vec<(Source, Version)>, ResizeError> {
    let mut all = Vec::new();
    for instance in 0..geometry.instance_count {
        let source = Source::read(device, geometry, instance)?;
        let version = source.version().ok_or_else(|| ResizeError::Damaged {
            device: device_name(device),
            problem: format!("instance {instance}: its version log does not recover"),
        })?;
        if let Some(id) = source.unfinished_compaction() {
            return Err(ResizeError::Unfinished { device: device_name(device), instance, id });
        }
        all.push((source, version));
    }
    Ok(all)
}

/// Refuses a volume fsck finds a warning or an error in, but the `tolerated` ones (problems a
/// change left half done that running it again finishes), or an unfinished compaction: an
/// offline change writes nothing then (a refusal after its first write would leave the volume
/// changed).
pub(crate) fn refuse_problems(device: &dyn BlockDevice, tolerated: &[lds_check::Code]) -> Result<(), ResizeError> {
    let report =
        check(device, CheckOptions { deep: false, ..Default::default() }, &mut |_, _| {}).map_err(RepairError::from)?;
    let blocking = report
        .problems
        .iter()
        .find(|problem| problem.code.severity() != Severity::Info && !tolerated.contains(&problem.code));
    if let Some(problem) = blocking {
        return Err(ResizeError::Damaged { device: device_name(device), problem: problem.line() });
    }
    let label = label_of(device)?;
    versions(device, &label.geometry)?;
    Ok(())
}

/// Plans a resize of the volume on `device` to `volume_len` bytes (rounded down to a sector).
pub fn plan(device: &dyn BlockDevice, volume_len: u64) -> Result<ResizePlan, ResizeError> {
    let label = label_of(device)?;
    let old = label.geometry;
    let new = resized(&old, volume_len);
    let all = versions(device, &old)?;
    let slots_in_use = slots_used(&all).len() as u64;
    let min_len = old.ofs_slot_area + num_slots_min(slots_in_use) * old.slot_size + old.sector();
    let moves = moves_off(&all, &|slot| slot >= new.num_slots);
    refuse_pending(device, &all, &|slot| slot >= new.num_slots)?;
    let mut rebase = Vec::new();
    for (source, _) in &all {
        // Every instance once the labels change; after that, those whose base version does
        // not replicate the labels' geometry and generation yet.
        let lags = source.base_geometry() != Some(new) || source.base_label_generation() < label.generation;
        if old != new || lags {
            rebase.push(source.instance);
        }
    }
    Ok(ResizePlan { old, new, moves, rebase, slots_in_use, min_len })
}

/// Resizes the volume on `device` (opened for writing by the caller, who holds its lock, and,
/// to grow, already at least `volume_len` bytes long). Returns the plan and the writes made.
pub fn resize(device: &dyn BlockDevice, volume_len: u64) -> Result<(ResizePlan, Vec<Written>), ResizeError> {
    let name = device_name(device);
    refuse_problems(device, &[])?;
    if label_of(device)?.devices.is_some() {
        return Err(ResizeError::Refused {
            device: name,
            reason: "the volume spans several devices: add or remove a device instead (SPEC.md §4.3)".into(),
        });
    }
    let plan = plan(device, volume_len)?;
    let (old, new) = (plan.old, plan.new);
    if let Err(error) = new.validate(0) {
        return Err(ResizeError::Refused {
            device: name,
            reason: format!(
                "{volume_len} bytes give no valid volume ({error}); the smallest size is {} bytes",
                plan.min_len
            ),
        });
    }
    if new.volume_len > device.len() {
        return Err(ResizeError::Refused {
            device: name,
            reason: format!("the device holds {} bytes, fewer than {}", device.len(), new.volume_len),
        });
    }
    if new.num_slots < plan.num_slots_min() {
        return Err(ResizeError::Refused {
            device: name,
            reason: format!(
                "the data uses {} slots, two more stay free for the next flush, and {} bytes hold only {}: the smallest size is {} bytes (lds resize --min)",
                plan.slots_in_use, new.volume_len, new.num_slots, plan.min_len
            ),
        });
    }
    let mut label = label_of(device)?;
    let mut done = Vec::new();
    if plan.done() {
        return Ok((plan, done));
    }
    // 1. Chunks past the new end move below it (the old geometry still holds).
    if !plan.moves.is_empty() {
        rebase_all(device, &old, &|slot| slot < new.num_slots, &old, label.generation, &mut done)?;
    }
    // 2 and 3. The labels: the backup where the new geometry puts it, then the primary.
    if label.geometry != new {
        label.geometry = new;
        label.generation += 1;
        let bytes = label.encode();
        let sector = new.sector() as usize;
        let mut padded = vec![0u8; sector.max(bytes.len())];
        padded[..bytes.len()].copy_from_slice(&bytes);
        let backup = PlannedWrite {
            offset: new.ofs_backup_label(),
            bytes: padded.clone(),
            structure: "backup label (new geometry)".into(),
        };
        write_all(device, &[backup], &mut done)?;
        let primary =
            PlannedWrite { offset: 0, bytes: padded, structure: "primary label (new geometry): the switch".into() };
        write_all(device, &[primary], &mut done)?;
    }
    // 4. Every instance's base version replicates the new geometry.
    rebase_all(device, &new, &|slot| slot < new.num_slots, &new, label.generation, &mut done)?;
    Ok((plan, done))
}

/// Bytes of chunk data one switch rewrites at most: their entries are held in memory, so a
/// move of more (a shrink or a device removal of any size) is several switches, each a
/// consistent volume (the chunks not moved yet stay where they are, referenced).
const MOVE_BYTES_PER_SWITCH: u64 = 64 << 20;

/// Switches every instance to a new base version replicating `geometry` with
/// `label_generation`, its chunks in `usable` slots (reading the volume as `read_as`): one
/// switch, then one more for each `MOVE_BYTES_PER_SWITCH` of chunks still to move.
pub(crate) fn rebase_all(
    device: &dyn BlockDevice,
    read_as: &Geometry,
    usable: &dyn Fn(u64) -> bool,
    geometry: &Geometry,
    label_generation: u64,
    done: &mut Vec<Written>,
) -> Result<(), ResizeError> {
    // Bounded: every switch but the last moves at least one chunk.
    loop {
        if !rebase_once(device, read_as, usable, geometry, label_generation, done)? {
            return Ok(());
        }
    }
}

/// One switch of every instance (see `rebase_all`); true when chunks are left to move.
fn rebase_once(
    device: &dyn BlockDevice,
    read_as: &Geometry,
    usable: &dyn Fn(u64) -> bool,
    geometry: &Geometry,
    label_generation: u64,
    done: &mut Vec<Written>,
) -> Result<bool, ResizeError> {
    let name = device_name(device);
    let mut sources = Vec::new();
    for instance in 0..read_as.instance_count {
        sources.push(Source::read(device, read_as, instance)?);
    }
    let old_slots: BTreeSet<u64> = sources.iter().flat_map(Source::referenced_slots).collect();
    let mut plans = Vec::new();
    let mut budget = MOVE_BYTES_PER_SWITCH;
    for source in &sources {
        let plan =
            rebase_plan(device, source, usable, geometry, label_generation, &mut budget).map_err(|why| match why {
                NotRebasable::Damaged(problem) => ResizeError::Damaged { device: name.clone(), problem },
                NotRebasable::Unfinished(id) => {
                    ResizeError::Unfinished { device: name.clone(), instance: source.instance, id }
                }
                NotRebasable::Device(error) => ResizeError::Device(error),
            })?;
        plans.push(plan);
    }
    let options = RepairOptions::new(crate::Mode::Yes);
    let encoding = lds_format::algorithms::pack::ChunkEncoding::of_label(&label_of(device)?);
    let placement = Placement { name: &name, geometry: read_as, device, keep_readable: false };
    let chunk_writes = place_chunks(placement, &mut plans, &old_slots, &options, usable, encoding)?;
    // Chunks and value chunks the budget left where they are.
    let left = plans
        .iter()
        .any(|plan| plan.kept.iter().any(|chunk| !chunk.slots().all(usable)) || !plan.value_slots().all(usable));
    // A moved log chunk names what it named and the backup log stays where it is (SPEC.md
    // §8.9, §14): the retention start of every new version is the old one's, and no write
    // lands in a backup log area. Proved before the first write.
    let mut flips = Vec::new();
    for (plan, source) in plans.iter().zip(&sources) {
        let base = plan.base();
        let inconsistent =
            |reason: String| RepairError::Inconsistent { device: name.clone(), instance: plan.instance, reason };
        let version = Version::from_base(&base).map_err(|error| inconsistent(error.to_string()))?;
        if let Some(old) = source.version() {
            logchunks::check_rebased(&old, &version).map_err(inconsistent)?;
        }
        let context = area_context(read_as, LogKind::Version, plan.instance);
        let flip = flip::plan(&context, &base, plan.next_lsn, plan.next_sn, &plan.protected)
            .map_err(|len| RepairError::NoRoom { device: name.clone(), instance: plan.instance, len })?;
        flips.push((plan.instance, context, flip));
    }
    let flip_writes = flips.iter().flat_map(|(_, context, flip)| {
        flip.writes().map(move |(offset, bytes, what)| (context.ofs_area + offset, bytes.len() as u64, what))
    });
    let planned = chunk_writes.iter().map(|write| (write.offset, write.bytes.len() as u64, write.structure.as_str()));
    logchunks::check_writes(read_as, planned.chain(flip_writes))
        .map_err(|(instance, reason)| RepairError::Inconsistent { device: name.clone(), instance, reason })?;
    write_all(device, &chunk_writes, done)?;
    for (instance, context, flip) in &flips {
        let structure = |what: &str| format!("{what} of the version log of instance {instance}");
        let (shadow, switch): (Vec<PlannedWrite>, Vec<PlannedWrite>) = flip
            .writes()
            .map(|(offset, bytes, what)| PlannedWrite {
                offset: context.ofs_area + offset,
                bytes: bytes.to_vec(),
                structure: structure(what),
            })
            .partition(|write| write.offset != context.ofs_area);
        write_all(device, &shadow, done)?;
        write_all(device, &switch, done)?;
    }
    Ok(left)
}
