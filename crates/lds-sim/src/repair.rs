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
//!   old chain: the crash image may show another such version log error, and R must hold;
//! - **I10**: the completed repair keeps what salvage of the damaged volume reads, or names
//!   it dropped (both forms of `salvage_oracle`: against salvage of the repaired volume, and
//!   against the live values of the workload); and the second repair of each crash image
//!   keeps what salvage of that crash image reads (its first form).

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::{Arc, Mutex};

use lds_check::{check, CheckOptions, Severity};
use lds_engine::Db;
use lds_repair::{repair, Mode, RepairOptions};
use lds_volume::undo::{undo, volume_uuid_of, MemorySink, UndoDevice, UndoFile, UndoHeader, UndoLog};
use lds_volume::MemoryImage;
use lds_volume::{BlockDevice, DeviceError, PageCache, ReadAt};

use crate::enumerate::{Counts, Failure};
use crate::error::SimError;
use crate::images::{recipes, Bounds, Builder};
use crate::media::{build_volume, faulty_device, targets, MediaFault, Structure, Volume};
use crate::salvage_oracle::{held_sequences, kept_for_salvage, kept_live, salvage_image, stable, Held};
use crate::sim_device::{Event, History, SimDevice};
use crate::workload::{options, Model, Random};

/// A damaged volume for repair to work on.
#[derive(Debug, Clone)]
pub struct Damaged {
    /// What was damaged, for people.
    pub name: String,
    /// The damaged image.
    pub image: Vec<u8>,
    /// The keys whose value no crash state of the workload changes, with that value: what
    /// I10 holds repair to where salvage of the damaged image reads it.
    pub live: Model,
}

/// Whether fsck finds something to repair in an image.
fn inconsistent(image: &[u8]) -> bool {
    check(&MemoryImage(image), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
        .map_or(true, |report| report.first_inconsistency().is_some())
}

/// The damage the repair crash test starts from, on the media matrix's engine-written volume
/// (both logs wrapped, three levels): for each kind of structure (labels, the live objects of
/// both logs, chunk footers, index and filter, blocks) and each of zeroed, flipped and stale,
/// the first of its sectors (tried from both ends and the middle) where the fault is one fsck
/// reports; then two faults at once. Faults fsck does not see (nothing to repair) are left out.
pub fn damaged_volumes() -> Result<(Volume, Vec<Damaged>), SimError> {
    let volume = build_volume()?;
    let targets = targets(&volume, 2)?;
    let live = stable(volume.models.get(volume.synced..).unwrap_or_default());
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
            cases.push(Damaged { name, image, live: live.clone() });
        }
    }
    // Two faults at once: the primary label and a chunk's blocks.
    let first = |structure: Structure| targets.iter().position(|target| target.structure == structure);
    if let (Some(label), Some(data)) = (first(Structure::PrimaryLabel), first(Structure::ChunkData)) {
        if let Some(device) = faulty_device(&volume, &targets, data, MediaFault::Flip, 1) {
            let mut image = device.current();
            let sector = targets[label].sector as usize;
            image[sector..sector + volume.geometry.sector() as usize].fill(0);
            cases.push(Damaged { name: "primary label zeroed and a chunk's blocks flipped".into(), image, live });
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
    /// Every key and value, or why the engine cannot read the volume: the error's text, so
    /// that the outcomes of two repairs compare (the crash image's against the completed
    /// repair's).
    pub reads: Result<Model, String>,
    /// The entries the repair's report names dropped (docs/reliability.md I10).
    pub lost: Vec<lds_repair::Lost>,
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

impl ReadAt for Noting {
    fn name(&self) -> &Path {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read_at(offset, buffer)
    }
}

impl BlockDevice for Noting {
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
    fn page_cache(&self) -> Option<&dyn PageCache> {
        Some(self)
    }
}

/// Commits leave the backup log's appends pending as on the simulated device.
impl PageCache for Noting {
    fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.flush_except(offset, len)
    }
}

pub(crate) fn reads_of(image: Vec<u8>) -> Result<Model, SimError> {
    let device: Arc<dyn BlockDevice> = Arc::new(SimDevice::new(image));
    let (db, _) = Db::open_device_read_only(device, Path::new("repaired image"), options(true))?;
    Ok(db.iter().and_then(Iterator::collect)?)
}

/// fsck's warnings and errors on an image, by number.
pub(crate) fn problems_of(image: &[u8]) -> Result<Vec<u16>, SimError> {
    let report = check(&MemoryImage(image), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})?;
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
fn repair_outcome(device: &dyn BlockDevice, image_after: impl FnOnce() -> Vec<u8>) -> Result<Outcome, SimError> {
    let report = repair(device, RepairOptions::new(Mode::Yes), &mut |_, _| {})?;
    let image = image_after();
    let problems = problems_of(&image).map_err(SimError::within("after repair"))?;
    let lost = crate::salvage_oracle::lost_ranges(&report);
    let reads = reads_of(image).map_err(|error| error.to_string());
    Ok(Outcome { exit_code: report.exit_code(), problems, reads, lost })
}

/// Runs `repair -y` on a damaged image through an undo log, recording everything; fails when
/// the completed repair does not keep what salvage of the damaged image reads (I10).
pub fn record_repair(damaged: &Damaged, sector_size: u64) -> Result<RepairRun, SimError> {
    // `salvage_oracle` gives its findings as text.
    let salvaged = salvage_image(&damaged.image).map_err(SimError::salvage)?;
    let recording = Recording::new(damaged.image.clone(), sector_size, "repair");
    let completed = repair_outcome(&recording.undo_device, || recording.device.current())?;
    let after = salvage_image(&recording.device.current()).map_err(SimError::salvage)?;
    kept_for_salvage(&salvaged, &after, &completed.lost).map_err(SimError::salvage)?;
    if let Ok(reads) = &completed.reads {
        let held =
            held_sequences(&recording.device.current()).map_err(|error| SimError::salvage(format!("I10: {error}")))?;
        kept_live(&salvaged, &damaged.live, reads, &held, &completed.lost).map_err(SimError::salvage)?;
    }
    let (undo_file, undo_len_at_write) = recording.undo();
    finished_undo_restores(&recording, &damaged.image)?;
    Ok(RepairRun {
        damaged_problems: problems_of(&damaged.image)?,
        name: damaged.name.clone(),
        history: recording.device.history(),
        undo_file,
        undo_len_at_write,
        completed,
        sector_size,
    })
}

/// Checks one crash image of a repair; `Err((oracle, message))` on a failure.
fn check_image(run: &RepairRun, writes_issued: usize, image: &[u8]) -> Result<(), (&'static str, String)> {
    // U: the undo file as it was at the crash restores the damaged volume.
    undo_restores(&run.history.initial, &run.undo_file, &run.undo_len_at_write, writes_issued, image)?;
    // A: no problem the damaged volume did not have.
    let problems = problems_of(image).map_err(|error| ("A", error.to_string()))?;
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
    let again = repair_outcome(&device, || device.current()).map_err(|error| ("R", error.to_string()))?;
    // I10: the second repair keeps what salvage of the crash image reads.
    let salvaged = salvage_image(image).map_err(|error| ("I10", error))?;
    let after = salvage_image(&device.current()).map_err(|error| ("I10", error))?;
    kept_for_salvage(&salvaged, &after, &again.lost).map_err(|error| ("I10", error))?;
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

/// Enumerates the crash states of a recorded repair and checks each against U, A and R.
pub fn enumerate_repair(
    run: &RepairRun,
    bounds: &Bounds,
    on_failure: &mut dyn FnMut(Failure) -> ControlFlow<()>,
) -> Counts {
    let mut check = |_: usize, writes_issued: usize, image: &[u8]| check_image(run, writes_issued, image);
    enumerate_history(&run.history, run.sector_size, bounds, &mut check, on_failure)
}

/// An oracle's verdict on a crash image: `Err((oracle, what went wrong))`.
pub(crate) type Verdict = Result<(), (&'static str, String)>;

/// Enumerates the crash states of any tool's device history: `check(crash point, writes
/// issued, image)` judges each distinct crash image (the crash point counts the device events
/// before it).
pub(crate) fn enumerate_history(
    history: &History,
    sector_size: u64,
    bounds: &Bounds,
    check: &mut dyn FnMut(usize, usize, &[u8]) -> Verdict,
    on_failure: &mut dyn FnMut(Failure) -> ControlFlow<()>,
) -> Counts {
    let mut counts = Counts::default();
    let mut builder = Builder::of_history(history, sector_size);
    let mut seen: HashSet<u128> = HashSet::new();
    let mut random = Random(bounds.seed | 1);
    let mut point = 0;
    let mut writes_issued = 0;
    loop {
        counts.crash_points += 1;
        for recipe in recipes(builder.pending(), &history.writes, sector_size, bounds, &mut random) {
            counts.images += 1;
            let checked = builder.with_image(&recipe, |digest, image| {
                if !seen.insert(digest) {
                    return None;
                }
                Some(check(point, writes_issued, image).map_err(|failure| (failure, image.as_ref().clone())))
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
        if let Some(Event::Write(_)) = history.events.get(point) {
            writes_issued += 1;
        }
        if !builder.advance() {
            break;
        }
        point += 1;
    }
    counts
}

/// An undo log in memory whose length is noted at each write (the records of a write are
/// saved before it is issued), around a simulated device.
pub(crate) struct Recording {
    /// The simulated device.
    pub(crate) device: SimDevice,
    /// The device tools write to.
    pub(crate) undo_device: UndoDevice,
    sink: MemorySink,
    lengths: Arc<Mutex<Vec<usize>>>,
}

impl Recording {
    pub(crate) fn new(image: Vec<u8>, sector_size: u64, tool: &str) -> Self {
        let len = image.len() as u64;
        let device = SimDevice::new(image).with_sector_size(sector_size);
        let sink = MemorySink::default();
        let lengths = Arc::new(Mutex::new(Vec::new()));
        let noting = Noting { inner: device.clone(), sink: sink.clone(), lengths: Arc::clone(&lengths) };
        // As the tools do: the header names the volume (`lds undo` checks it).
        let header = UndoHeader {
            volume_uuid: volume_uuid_of(&device).unwrap_or([0; 16]),
            device_len: len,
            sector_size: sector_size as u32,
            tool: tool.into(),
            created: 0,
        };
        let log = UndoLog::with_sink(Box::new(sink.clone()), Path::new("undo file in memory"), header);
        let undo_device = UndoDevice::new(Arc::new(noting), log);
        Self { device, undo_device, sink, lengths }
    }

    /// The undo file and its length at each write.
    pub(crate) fn undo(&self) -> (Vec<u8>, Vec<usize>) {
        let file = self.sink.0.lock().map(|file| file.clone()).unwrap_or_default();
        let lengths = self.lengths.lock().map(|lengths| lengths.clone()).unwrap_or_default();
        (file, lengths)
    }
}

/// Oracle U on the undo file as a tool that completes leaves it: finished (its final record
/// written and its state block rewritten) it verifies whole and restores `original` from the
/// repaired volume. Run after the running file was taken for the crash states, since
/// finishing rewrites the state block in place.
fn finished_undo_restores(recording: &Recording, original: &[u8]) -> Result<(), SimError> {
    if recording.undo().0.is_empty() {
        // The repair wrote nothing: no undo file, nothing to finish.
        return Ok(());
    }
    let repaired = SimDevice::new(recording.device.current());
    let regions = lds_volume::read_labels(&repaired)
        .ok()
        .and_then(|labels| labels.choose().ok().map(|(_, label)| label.geometry))
        .map(|geometry| {
            let mut regions = vec![(0, geometry.sector()), (geometry.ofs_backup_label(), geometry.sector())];
            for instance in 0..geometry.instance_count {
                for kind in [lds_format::geometry::LogKind::Version, lds_format::geometry::LogKind::Backup] {
                    regions.push(geometry.log_area(kind, instance));
                }
            }
            regions
        })
        .unwrap_or_default();
    let failed = |step| move |source| SimError::Undo { step, source };
    recording.undo_device.finish(&regions).map_err(failed("finishing the undo file"))?;
    let (finished, _) = recording.undo();
    let file =
        UndoFile::parse(&finished, Path::new("undo file")).map_err(failed("the finished undo file does not parse"))?;
    let violated = |detail: &str| SimError::Violated { oracle: "U", detail: detail.into() };
    if !file.finished {
        return Err(violated("the finished undo file does not say it finished"));
    }
    let uuid = volume_uuid_of(&repaired);
    undo(&file, &repaired, uuid, false).map_err(failed("undo from the finished file refused"))?;
    if repaired.current().as_slice() != original {
        return Err(violated("undo from the finished file did not restore the damaged volume"));
    }
    Ok(())
}

/// Oracle U: the undo file as it stood after `writes_issued` writes restores `original`, and
/// so does that file with the next write's batch torn halfway (a crash while appending it).
/// The recording never finishes its undo log, so the file only grew: a prefix of it is the
/// file as it stood.
pub(crate) fn undo_restores(
    original: &[u8],
    undo_file: &[u8],
    undo_len_at_write: &[usize],
    writes_issued: usize,
    image: &[u8],
) -> Result<(), (&'static str, String)> {
    if writes_issued == 0 {
        return if image == original { Ok(()) } else { Err(("U", "the image changed before any write".into())) };
    }
    // The records of each write were saved (durably) before it was issued.
    let end = undo_len_at_write.get(writes_issued - 1).copied().unwrap_or(undo_file.len());
    let next = undo_len_at_write.get(writes_issued).copied().unwrap_or(end);
    let torn = end + (next - end) / 2;
    for (len, what) in [(end, "the undo file at the crash"), (torn, "the undo file torn in its next batch")] {
        let file = UndoFile::parse(&undo_file[..len], Path::new("undo file"))
            .map_err(|error| ("U", format!("{what} does not parse: {error}")))?;
        let device = SimDevice::new(image.to_vec());
        let uuid = volume_uuid_of(&device);
        undo(&file, &device, uuid, false).map_err(|error| ("U", format!("undo from {what} refused: {error}")))?;
        let restored = device.current();
        if restored.as_slice() != original {
            let first = restored.iter().zip(original.iter()).position(|(a, b)| a != b).unwrap_or(0);
            return Err((
                "U",
                format!("undo from {what} left the volume different from the original at offset {first}"),
            ));
        }
    }
    Ok(())
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

/// What a damage sweep counted.
#[derive(Debug, Clone, Default)]
pub struct SweepCounts {
    /// Damaged volumes repaired.
    pub cases: u64,
    /// Faults injected: in metadata, in chunk blocks.
    pub faults: (u64, u64),
    /// Cases fsck found nothing in (the damage fell where nothing reads).
    pub nothing_to_fix: u64,
    /// Cases `repair -y` repaired (exit 1) and fsck then found clean.
    pub repaired: u64,
    /// Keys checked after the repairs: whose chunk and batch were undamaged.
    pub keys_checked: u64,
    /// Keys not checked: their chunk or a batch holding them (or a batch before it) was damaged.
    pub keys_exposed: u64,
    /// Exposed keys that still read their value.
    pub exposed_kept: u64,
    /// Entries salvage of the damaged volumes reads that I10 held the repairs to (both
    /// forms, docs/reliability.md).
    pub salvage_entries_held: u64,
    /// Cases whose two salvages (damaged, repaired) read other layouts, so that I10's first
    /// form was not compared, and why.
    pub salvage_not_compared: Vec<String>,
    /// Repairs refused with nothing written, and why (too few free slots, no room in the
    /// version log: `lds salvage` is the way out).
    pub refused: Vec<String>,
    /// What broke the sweep's oracle: a repair that failed or left problems, or an undamaged
    /// key that reads wrong.
    pub failures: Vec<String>,
}

/// Where each key's data lives in the undamaged volume: chunks (key range, device ranges of
/// their slots) and the backup log's replayed batches in chain order (device range, keys).
struct Placement {
    chunks: Vec<ChunkPlace>,
    batches: Vec<BatchPlace>,
    /// The version log's newest object (a delta version) and where the data lives without
    /// it. Damage there cannot be told from a write a crash interrupted (SPEC.md §9.6):
    /// recovery and repair fall back to the version before it, whose backup log replay
    /// starts earlier and must then bring back what that delta committed.
    head: Option<(Span, Box<Placement>)>,
}

/// A byte range of the device.
type Span = (u64, u64);
/// A key range.
type KeyRange = (Vec<u8>, Vec<u8>);
/// A chunk's smallest and largest keys and its slots.
type ChunkPlace = (Vec<u8>, Vec<u8>, Vec<Span>);
/// A batch's bytes and its keys.
type BatchPlace = (Span, Vec<Vec<u8>>);

fn placement(volume: &Volume) -> Result<Placement, SimError> {
    placement_of(&volume.image, &volume.geometry, true)
}

fn placement_of(
    image: &[u8],
    geometry: &lds_format::geometry::Geometry,
    with_head: bool,
) -> Result<Placement, SimError> {
    use lds_format::geometry::LogKind;
    let (areas, recovery) = lds_volume::inspect::recover(&MemoryImage(image), geometry, 0)?;
    let recovery = recovery.map_err(|source| SimError::VersionLog { at: String::new(), source })?;
    let version_context = lds_format::log::area_context(geometry, LogKind::Version, 0);
    let newest = recovery
        .version_log
        .sequence(&areas.version, &version_context)
        .last()
        .filter(|object| with_head && object.object_type == lds_format::log::ObjectType::DeltaVersion);
    let head = match newest {
        Some(object) => {
            let start = version_context.ofs_area + object.offset;
            let span = (start, start + object.header.total_len());
            // The volume as recovery sees it when that object does not validate.
            let mut without = image.to_vec();
            without[start as usize..(start + lds_format::log::HEADER_LEN as u64) as usize].fill(0);
            Some((span, Box::new(placement_of(&without, geometry, false)?)))
        }
        None => None,
    };
    let chunks = recovery
        .version_log
        .version
        .chunks
        .values()
        .map(|chunk| {
            let slots = chunk
                .sub_chunks
                .iter()
                .map(|sub| (geometry.slot_offset(sub.slot), geometry.slot_offset(sub.slot) + geometry.slot_size))
                .collect();
            (chunk.smallest_key.clone(), chunk.largest_key.clone(), slots)
        })
        .collect();
    let context = lds_format::log::area_context(geometry, LogKind::Backup, 0);
    let area = &image[context.ofs_area as usize..(context.ofs_area + context.len_area) as usize];
    let mut batches = Vec::new();
    if let Some(state) = recovery.backup_state() {
        for batch in &state.batches {
            let decode = |source| SimError::Decode { at: String::new(), source };
            let raw = lds_format::log::read_object(area, batch.offset, &context).map_err(decode)?;
            let mut keys = Vec::new();
            lds_format::batch::decode_entries(raw.payload, context.ofs_area + batch.offset, |_, key, _| {
                keys.push(key.to_vec());
            })
            .map_err(decode)?;
            let start = context.ofs_area + batch.offset;
            batches.push(((start, start + raw.header.total_len()), keys));
        }
    }
    Ok(Placement { chunks, batches, head })
}

impl Placement {
    /// Keys whose data a damaged sector may have taken: those in a damaged chunk's key range,
    /// and those of the first damaged batch and every batch after it.
    fn exposed(&self, damaged: &[u64], sector: u64) -> (Vec<KeyRange>, HashSet<Vec<u8>>) {
        let hit = |(start, end): (u64, u64)| damaged.iter().any(|&at| at < end && start < at + sector);
        let ranges = self
            .chunks
            .iter()
            .filter(|(_, _, slots)| slots.iter().any(|&range| hit(range)))
            .map(|(smallest, largest, _)| (smallest.clone(), largest.clone()))
            .collect();
        let first = self.batches.iter().position(|(range, _)| hit(*range));
        let mut keys: HashSet<Vec<u8>> = first.map_or_else(HashSet::new, |first| {
            self.batches[first..].iter().flat_map(|(_, keys)| keys.iter().cloned()).collect()
        });
        let mut ranges: Vec<KeyRange> = ranges;
        // Damage in the newest delta version: what it committed is exposed the way the
        // version before it places it.
        if let Some((_, without)) = self.head.as_ref().filter(|(span, _)| hit(*span)) {
            let (more_ranges, more_keys) = without.exposed(damaged, sector);
            ranges.extend(more_ranges);
            keys.extend(more_keys);
        }
        (ranges, keys)
    }
}

/// Damages copies of the media matrix's volume at random (one to three faults each: a bit
/// flipped, a sector zeroed or made stale, in any sector of the labels, the logs or the
/// chunks; never both labels), runs `repair -y` on each, and checks that fsck is then clean
/// and that every key whose chunk and batch were undamaged reads its value.
pub fn sweep(volume: &Volume, seed: u64, cases: u64) -> Result<SweepCounts, SimError> {
    let all = targets(volume, 16)?;
    let placement = placement(volume)?;
    let last = volume.models.last().cloned().unwrap_or_default();
    let live = stable(volume.models.get(volume.synced..).unwrap_or_default());
    let sector_size = volume.geometry.sector();
    let mut random = Random(seed | 1);
    let mut counts = SweepCounts::default();
    for case in 0..cases {
        let mut image = volume.image.clone();
        let mut damaged: Vec<u64> = Vec::new();
        let mut described = Vec::new();
        let faults = 1 + random.below(3);
        while (damaged.len() as u64) < faults {
            let target = &all[random.below(all.len() as u64) as usize];
            let is_label = matches!(target.structure, Structure::PrimaryLabel | Structure::BackupLabel);
            let labels_hit = damaged.iter().filter(|&&at| at == 0 || at == volume.geometry.ofs_backup_label()).count();
            if damaged.contains(&target.sector) || (is_label && labels_hit > 0) {
                continue;
            }
            let start = target.sector as usize;
            let range = start..start + sector_size as usize;
            let kind = random.below(3);
            let what = match kind {
                0 => {
                    let len = (target.bytes.end - target.bytes.start).max(1);
                    let byte = start + (target.bytes.start + random.below(len)) as usize;
                    image[byte] ^= 1 << random.below(8);
                    "flip"
                }
                1 => {
                    image[range].fill(0);
                    "zero"
                }
                _ => {
                    let contents = volume.history.sector_contents(target.sector, sector_size);
                    let Some(older) = contents.iter().rev().find(|content| content.as_slice() != &image[range.clone()])
                    else {
                        continue;
                    };
                    image[range].copy_from_slice(older);
                    "stale"
                }
            };
            if target.structure.is_metadata() {
                counts.faults.0 += 1;
            } else {
                counts.faults.1 += 1;
            }
            damaged.push(target.sector);
            described.push(format!("{what} {}", target.label));
        }
        counts.cases += 1;
        let name = format!("case {case}: {}", described.join(", "));
        if !inconsistent(&image) {
            counts.nothing_to_fix += 1;
        }
        // I10: what salvage reads from the damaged image.
        let salvaged = salvage_image(&image).map_err(SimError::salvage)?;
        let device = SimDevice::new(image).with_sector_size(sector_size);
        let outcome = match repair_outcome(&device, || device.current()) {
            Ok(outcome) => outcome,
            // Too small a volume for what repair must write: refused with nothing written
            // (the way out is lds salvage to a new volume).
            Err(error) if error.wrote_nothing() && device.write_count() == 0 => {
                counts.refused.push(format!("{name}: {error}"));
                continue;
            }
            Err(error) => {
                counts.failures.push(format!("{name}: {error}"));
                continue;
            }
        };
        if !outcome.problems.is_empty() || outcome.exit_code > 1 {
            counts.failures.push(format!(
                "{name}: repair exits {}, fsck after it reports {:?}",
                outcome.exit_code, outcome.problems
            ));
            continue;
        }
        if outcome.exit_code == 1 {
            counts.repaired += 1;
        }
        let model = match outcome.reads {
            Ok(model) => model,
            Err(error) => {
                counts.failures.push(format!("{name}: the repaired volume cannot be read: {error}"));
                continue;
            }
        };
        // I10: repair keeps what salvage of the damaged image reads (or names it dropped).
        let kept = salvage_image(&device.current()).and_then(|after| {
            let held = kept_for_salvage(&salvaged, &after, &outcome.lost)?;
            if let Held::NotCompared(why) = &held {
                counts.salvage_not_compared.push(format!("{name}: {why}"));
            }
            let sequences = held_sequences(&device.current())?;
            Ok(held.checked() + kept_live(&salvaged, &live, &model, &sequences, &outcome.lost)?)
        });
        match kept {
            Ok(held) => counts.salvage_entries_held += held,
            Err(error) => {
                counts.failures.push(format!("{name}: {error}"));
                continue;
            }
        }
        let (ranges, batch_keys) = placement.exposed(&damaged, sector_size);
        for key in &volume.keys {
            let in_damaged_chunk = ranges.iter().any(|(smallest, largest)| smallest <= key && key <= largest);
            let right = model.get(key) == last.get(key);
            if in_damaged_chunk || batch_keys.contains(key) {
                counts.keys_exposed += 1;
                counts.exposed_kept += u64::from(right);
                continue;
            }
            counts.keys_checked += 1;
            if !right {
                let shown = |value: Option<&Vec<u8>>| {
                    value.map_or("nothing".to_string(), |value| format!("{} bytes", value.len()))
                };
                counts.failures.push(format!(
                    "{name}: key {} reads {}, it held {}",
                    String::from_utf8_lossy(key),
                    shown(model.get(key)),
                    shown(last.get(key))
                ));
                break;
            }
        }
    }
    Ok(counts)
}
