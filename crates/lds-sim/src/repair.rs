//! Crash-safe repair (docs/reliability.md, `lds crashtest --workload repair`): `lds repair -y`
//! runs on damaged engine-written volumes over the simulated device, through an undo log kept
//! in memory, and every crash state of its writes is checked against two oracles:
//! - **U (undo)**: the undo file as it stood at the crash restores the damaged volume byte
//!   for byte (`lds undo` is the way back from any crash);
//! - **R (redo)**: a second `repair -y` on the crash image finishes the job: fsck then reports
//!   what it reports after the completed repair (nothing, when that repair succeeded), and
//!   every key reads what it reads after the completed repair, so a crash loses nothing the
//!   completed repair keeps;
//! - **A (atomic)**: the crash image shows no problem the damaged volume did not have: each
//!   instance is in its old state or its new one (the switch is one sector), never between.
//!   One exception, where the version log's chain was already broken (an error the engine
//!   refuses to open on) and its live region left the new base version no room but over the
//!   old chain: the crash image may show another such version log error, and R must hold.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex};

use lds_check::{check, CheckOptions, Severity};
use lds_engine::Db;
use lds_repair::{repair, Mode, RepairOptions};
use lds_volume::device::{BlockDevice, DeviceError};
use lds_volume::undo::{undo, MemorySink, UndoDevice, UndoFile, UndoHeader, UndoLog};
use lds_volume::volume::MemoryImage;

use crate::device::{Event, History, SimDevice};
use crate::enumerate::{Counts, Failure};
use crate::images::{recipes, Bounds, Builder};
use crate::media::{build_volume, faulty_device, targets, MediaFault, Structure, Volume};
use crate::workload::{options, Model, Random};

/// A damaged volume for repair to work on.
#[derive(Debug, Clone)]
pub struct Damaged {
    /// What was damaged, for people.
    pub name: String,
    /// The damaged image.
    pub image: Vec<u8>,
}

/// Whether fsck finds something to repair in an image.
fn inconsistent(image: &[u8]) -> bool {
    check(&MemoryImage(image), CheckOptions { deep: true }, &mut |_, _| {})
        .map_or(true, |report| report.first_inconsistency().is_some())
}

/// The damage the repair crash test starts from, on the media matrix's engine-written volume
/// (both logs wrapped, three levels): for each kind of structure (labels, the live objects of
/// both logs, chunk footers, index and filter, blocks) and each of zeroed, flipped and stale,
/// the first of its sectors (tried from both ends and the middle) where the fault is one fsck
/// reports; then two faults at once. Faults fsck does not see (nothing to repair) are left out.
pub fn damaged_volumes() -> Result<(Volume, Vec<Damaged>), String> {
    let volume = build_volume()?;
    let targets = targets(&volume, 2)?;
    let structures = [
        Structure::PrimaryLabel,
        Structure::BackupLabel,
        Structure::VersionLogLive,
        Structure::BackupLogLive,
        Structure::ChunkFooter,
        Structure::ChunkTail,
        Structure::ChunkData,
    ];
    let mut cases = Vec::new();
    for structure in structures {
        let of_structure: Vec<usize> =
            (0..targets.len()).filter(|&index| targets[index].structure == structure).collect();
        let Some(&last) = of_structure.last() else { continue };
        let mut order = vec![of_structure[0], last, of_structure[of_structure.len() / 2]];
        order.extend(of_structure.iter().copied().take(8));
        order.dedup();
        for fault in [MediaFault::Zero, MediaFault::Flip, MediaFault::Stale] {
            let found = order.iter().find_map(|&index| {
                let image = faulty_device(&volume, &targets, index, fault, 0)?.current();
                inconsistent(&image).then_some((index, image))
            });
            let Some((index, image)) = found else { continue };
            let target = &targets[index];
            let name = format!("{} ({}) at {}: {}", structure.name(), target.label, target.sector, fault.name());
            cases.push(Damaged { name, image });
        }
    }
    // Two faults at once: the primary label and a chunk's blocks.
    let first = |structure: Structure| targets.iter().position(|target| target.structure == structure);
    if let (Some(label), Some(data)) = (first(Structure::PrimaryLabel), first(Structure::ChunkData)) {
        if let Some(device) = faulty_device(&volume, &targets, data, MediaFault::Flip, 1) {
            let mut image = device.current();
            let sector = targets[label].sector as usize;
            image[sector..sector + volume.geometry.sector() as usize].fill(0);
            cases.push(Damaged { name: "primary label zeroed and a chunk's blocks flipped".into(), image });
        }
    }
    Ok((volume, cases))
}

/// What a repair left: its exit code, the problems fsck reports after it (numbers of warnings
/// and errors), and what the volume reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `lds repair`'s exit code.
    pub exit_code: i32,
    /// fsck's warnings and errors afterwards, by number.
    pub problems: Vec<u16>,
    /// Every key and value, or why the engine cannot read the volume.
    pub reads: Result<Model, String>,
}

/// A completed repair recorded on the simulated device.
#[derive(Debug, Clone)]
pub struct RepairRun {
    /// The damage.
    pub name: String,
    /// The device history (its initial image is the damaged volume).
    pub history: History,
    /// The undo file the repair wrote.
    pub undo_file: Vec<u8>,
    /// Bytes of the undo file when each write was issued (its records saved first).
    pub undo_len_at_write: Vec<usize>,
    /// What the completed repair left.
    pub completed: Outcome,
    /// fsck's warnings and errors on the damaged volume, by number.
    pub damaged_problems: Vec<u16>,
    /// The sector size.
    pub sector_size: u64,
}

/// A device that notes how long the undo file is when each write reaches it.
struct Noting {
    inner: SimDevice,
    sink: MemorySink,
    lengths: Arc<Mutex<Vec<usize>>>,
}

impl BlockDevice for Noting {
    fn name(&self) -> &Path {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read_at(offset, buffer)
    }
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        let len = self.sink.0.lock().map_or(0, |file| file.len());
        self.lengths.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(len);
        self.inner.write_at(offset, bytes)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush()
    }
    fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.flush_range(offset, len)
    }
}

fn reads_of(image: Vec<u8>) -> Result<Model, String> {
    let device: Arc<dyn BlockDevice> = Arc::new(SimDevice::new(image));
    let (db, _) = Db::open_device_read_only(device, Path::new("repaired image"), options(true))
        .map_err(|error| error.to_string())?;
    db.iter().and_then(Iterator::collect).map_err(|error| error.to_string())
}

/// fsck's warnings and errors on an image, by number.
fn problems_of(image: &[u8]) -> Result<Vec<u16>, String> {
    let report = check(&MemoryImage(image), CheckOptions { deep: true }, &mut |_, _| {})
        .map_err(|error| format!("fsck: {error}"))?;
    let mut problems: Vec<u16> = report
        .problems
        .iter()
        .filter(|problem| problem.code.severity() != Severity::Info)
        .map(|problem| problem.code.number())
        .collect();
    problems.sort_unstable();
    problems.dedup();
    Ok(problems)
}

/// Runs `repair -y` on `device` and describes what it left.
fn repair_outcome(device: &dyn BlockDevice, image_after: impl FnOnce() -> Vec<u8>) -> Result<Outcome, String> {
    let report =
        repair(device, RepairOptions::new(Mode::Yes), &mut |_, _| {}).map_err(|error| format!("repair: {error}"))?;
    let image = image_after();
    let problems = problems_of(&image).map_err(|error| format!("after repair: {error}"))?;
    Ok(Outcome { exit_code: report.exit_code(), problems, reads: reads_of(image) })
}

/// Runs `repair -y` on a damaged image through an undo log, recording everything.
pub fn record_repair(damaged: &Damaged, sector_size: u64) -> Result<RepairRun, String> {
    let device = SimDevice::new(damaged.image.clone()).with_sector_size(sector_size);
    let sink = MemorySink::default();
    let lengths = Arc::new(Mutex::new(Vec::new()));
    let noting = Noting { inner: device.clone(), sink: sink.clone(), lengths: Arc::clone(&lengths) };
    let header = UndoHeader {
        volume_uuid: [0; 16],
        device_len: damaged.image.len() as u64,
        sector_size: sector_size as u32,
        tool: "repair".into(),
        created: 0,
    };
    let log = UndoLog::with_sink(Box::new(sink.clone()), Path::new("undo file in memory"), header);
    let undo_device = UndoDevice::new(Arc::new(noting), log);
    let completed = repair_outcome(&undo_device, || device.current())?;
    let undo_file = sink.0.lock().map_err(|_| "the undo sink is poisoned".to_string())?.clone();
    let undo_len_at_write = lengths.lock().map_err(|_| "poisoned".to_string())?.clone();
    Ok(RepairRun {
        damaged_problems: problems_of(&damaged.image)?,
        name: damaged.name.clone(),
        history: device.history(),
        undo_file,
        undo_len_at_write,
        completed,
        sector_size,
    })
}

/// Checks one crash image of a repair; `Err((oracle, message))` on a failure.
fn check_image(run: &RepairRun, writes_issued: usize, image: &[u8]) -> Result<(), (&'static str, String)> {
    // U: the undo file as it was at the crash restores the damaged volume.
    if writes_issued > 0 {
        // The records of each write were saved (durably) before it was issued.
        let end = run.undo_len_at_write.get(writes_issued - 1).copied().unwrap_or(run.undo_file.len());
        let file = UndoFile::parse(&run.undo_file[..end], Path::new("undo file"))
            .map_err(|error| ("U", format!("the undo file at the crash does not parse: {error}")))?;
        let device = SimDevice::new(image.to_vec());
        undo(&file, &device, None, false).map_err(|error| ("U", format!("undo refused: {error}")))?;
        let restored = device.current();
        if restored.as_slice() != run.history.initial.as_slice() {
            let first = restored.iter().zip(run.history.initial.iter()).position(|(a, b)| a != b).unwrap_or(0);
            return Err(("U", format!("undo left the volume different from the damaged original at offset {first}")));
        }
    } else if image != run.history.initial.as_slice() {
        return Err(("U", "the image changed before repair issued any write".into()));
    }
    // A: no problem the damaged volume did not have.
    let problems = problems_of(image).map_err(|error| ("A", error))?;
    let refused = |number: &u16| matches!(number, 201..=205 | 207);
    let was_refused = run.damaged_problems.iter().any(refused);
    let new = problems.iter().find(|number| !(run.damaged_problems.contains(number) || was_refused && refused(number)));
    if let Some(new) = new {
        return Err((
            "A",
            format!(
                "the crash image has problem {new}, which the damaged volume did not have ({problems:?} against {:?})",
                run.damaged_problems
            ),
        ));
    }
    // R: a second repair finishes the job as the completed repair did.
    let device = SimDevice::new(image.to_vec());
    let again = repair_outcome(&device, || device.current()).map_err(|error| ("R", error))?;
    if again.problems != run.completed.problems {
        return Err((
            "R",
            format!(
                "after a second repair fsck reports {:?}, after the completed repair {:?}",
                again.problems, run.completed.problems
            ),
        ));
    }
    if again.reads != run.completed.reads {
        let describe = |reads: &Result<Model, String>| match reads {
            Ok(model) => format!("{} keys", model.len()),
            Err(error) => format!("an error ({error})"),
        };
        return Err((
            "R",
            format!(
                "after a second repair the volume reads {}, after the completed repair {}",
                describe(&again.reads),
                describe(&run.completed.reads)
            ),
        ));
    }
    Ok(())
}

/// Enumerates the crash states of a recorded repair and checks each against U and R.
pub fn enumerate_repair(
    run: &RepairRun,
    bounds: &Bounds,
    on_failure: &mut dyn FnMut(Failure) -> ControlFlow<()>,
) -> Counts {
    let mut counts = Counts::default();
    let mut builder = Builder::of_history(&run.history, run.sector_size);
    let mut seen: HashSet<u128> = HashSet::new();
    let mut random = Random(bounds.seed | 1);
    let mut point = 0;
    let mut writes_issued = 0;
    loop {
        counts.crash_points += 1;
        for recipe in recipes(builder.pending(), &run.history.writes, run.sector_size, bounds, &mut random) {
            counts.images += 1;
            let checked = builder.with_image(&recipe, |digest, image| {
                if !seen.insert(digest) {
                    return None;
                }
                Some(check_image(run, writes_issued, image).map_err(|failure| (failure, image.as_ref().clone())))
            });
            let Some(checked) = checked else { continue };
            counts.distinct_images += 1;
            if let Err(((oracle, message), image)) = checked {
                counts.failures += 1;
                let failure = Failure { crash_point: point, state: recipe.state, oracle, message, image };
                if on_failure(failure).is_break() {
                    return counts;
                }
            }
        }
        if let Some(Event::Write(_)) = run.history.events.get(point) {
            writes_issued += 1;
        }
        if !builder.advance() {
            break;
        }
        point += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crash_state_of_a_repair_is_undone_or_finished() {
        let damaged = damaged_volumes();
        assert!(damaged.is_ok(), "{:?}", damaged.as_ref().err());
        let Ok((volume, cases)) = damaged else { return };
        assert!(cases.len() >= 6, "only {} damage cases", cases.len());
        let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed: 3 };
        let mut total = Counts::default();
        for case in cases.iter().step_by(3) {
            let run = record_repair(case, volume.geometry.sector());
            assert!(run.is_ok(), "{}: {:?}", case.name, run.as_ref().err());
            let Ok(run) = run else { return };
            assert!(run.completed.exit_code == 1, "{}: repair exits {}", case.name, run.completed.exit_code);
            assert!(run.completed.problems.is_empty(), "{}: {:?}", case.name, run.completed.problems);
            let mut failures = Vec::new();
            let counts = enumerate_repair(&run, &bounds, &mut |failure| {
                failures.push(format!(
                    "{} {}: {} ({})",
                    failure.oracle, failure.crash_point, failure.message, failure.state
                ));
                ControlFlow::Break(())
            });
            assert!(failures.is_empty(), "{}: {failures:?}", case.name);
            total.images += counts.images;
            total.distinct_images += counts.distinct_images;
        }
        assert!(total.distinct_images > 20, "only {} distinct crash images", total.distinct_images);
    }
}
