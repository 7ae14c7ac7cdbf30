//! The LDS checker (`lds fsck`): reads a volume completely, never writes, and reports every
//! problem under a stable code from one table ([`problem::PROBLEMS`]). It depends on the
//! format and on device access only, never on the engine, so that it is an independent
//! oracle for the crash simulator and the fuzzers (as e2fsck does not link the kernel's ext4).
//!
//! Passes, in order (e2fsck's `e2fsck_passes[]`):
//! 1. labels: both copies, the choice between them, the device's length;
//! 2. version logs: each instance's live chain, how it ends, its geometry replica;
//! 3. backup logs: each instance's start point, live chain and how it ends;
//! 4. chunks: every chunk the trees reference, every block checksum (`deep`: digests and
//!    filters), key order and ranges, level rules; on volumes with value chunks, every value
//!    chunk's footer (`deep`: digest), every value pointer of the chunks and the replayed
//!    batches (`deep`: every value's crc32c) and every chunk's value references; on volumes
//!    with log chunks, every log reference against the backup log recovery read, and each
//!    log chunk's flag, level and log start;
//! 5. slots: the online map over all instances, and free slots holding chunks;
//! 6. compaction journal: each unfinished compaction's inputs and outputs.
//!
//! Memory is bounded by the log areas, the chunk metadata and a few slots at a time (an
//! instance's backup log area is kept past pass 3 only when its log chunks need it).
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

mod pass_chunks;
mod pass_journal;
mod pass_labels;
mod pass_logrefs;
mod pass_logs;
mod pass_slots;
mod pass_values;
pub mod problem;

use lds_format::algorithms::instance::InstanceRecovery;
use lds_format::geometry::Geometry;
use lds_volume::{DeviceError, ReadAt};

pub use pass_logrefs::LogCheck;
pub use problem::{Code, Problem, ProblemKind, Repair, Report, Severity, Summary, PROBLEMS};

/// Why a check could not run at all (fsck exit code 8).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The device holds no LDS label at all.
    #[error("not an LDS volume: no label magic at offset 0 nor at the end")]
    NotAVolume,
    /// The thread reading slots ahead of the checker stopped (it panicked).
    #[error("the slot reader thread stopped")]
    ReaderStopped,
    /// The format version is not one this build reads.
    #[error("format version {major}.{minor}: this build checks 1.x")]
    UnsupportedVersion {
        /// The major version found.
        major: u16,
        /// The minor version found.
        minor: u16,
    },
}

/// Options of a check.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Also recompute every chunk's digest (xxh3-128; blake3 before format 1.3), check every
    /// value's crc32c and test every key against its filter.
    pub deep: bool,
    /// Threads checking the chunks of a large tree while one reads them; 0 (the default):
    /// one fewer than the cores, at least one, at most four.
    pub checkers: usize,
}

/// An instance whose version log recovered, for the passes after the logs.
pub(crate) struct Tree {
    pub(crate) instance: u32,
    pub(crate) recovery: InstanceRecovery,
    /// The value pointers of the batches recovery replays.
    pub(crate) replayed_pointers: Vec<pass_values::Pointed>,
    /// The backup log area, kept for the log references of its chunks (SPEC.md §8.9) on a
    /// volume with feature `log_tables` or a version with log chunks; `None` otherwise.
    pub(crate) backup_area: Option<Vec<u8>>,
}

/// The problems of one chunk of `instance`'s tree, as the checker reports them: `images` are
/// the whole slots of its sub-chunks, in order; `last_sequence` is the version's. Repair runs
/// it to decide which chunks to rewrite, so that it rewrites what fsck reports.
///
/// Without the backup log area the chunk's log references (SPEC.md §8.9) are not resolved:
/// of the log chunk problems it reports 802 (kind-3 entries without flag `log_refs`, the
/// flag without a reference, a log chunk outside level 0) and 803 (a log start that is not
/// the oldest reference's), never 801, nor 802 for a volume without feature `log_tables`.
/// [`chunk_problems_with_log`] checks everything.
pub fn chunk_problems(
    images: &[Vec<u8>],
    geometry: &Geometry,
    instance: u32,
    chunk: &lds_format::version::meta::ChunkMeta,
    last_sequence: u64,
    options: CheckOptions,
) -> Vec<Problem> {
    let mut report = Report::default();
    pass_chunks::check_chunk(images, geometry, instance, chunk, last_sequence, options, None, &mut report);
    report.problems
}

/// As [`chunk_problems`], also checking the chunk's log references (SPEC.md §8.9) against
/// `log.backup_area`, the whole backup log area of the chunk's instance, as fsck's pass 4
/// does: 801 for each reference that does not resolve (the object at its offset is not
/// valid, not a write batch, has another lsn, or its entry differs in kind, key, sequence or
/// value length; the first eight of a chunk one by one, then one line counting the rest),
/// 802 and 803 as [`chunk_problems`] does, and 802 for a log chunk on a volume without
/// feature `log_tables` (`log.log_tables` false).
///
/// For repair: call it for every chunk of a volume with feature `log_tables` (or whose
/// version holds log chunks), with the backup log area read once per instance, so that it
/// rewrites what fsck reports; the problem table's fixes for 801 to 803 rewrite such a chunk
/// as an ordinary chunk, its references that resolve written as puts and the entries of the
/// others reported as dropped.
pub fn chunk_problems_with_log(
    images: &[Vec<u8>],
    geometry: &Geometry,
    instance: u32,
    chunk: &lds_format::version::meta::ChunkMeta,
    last_sequence: u64,
    options: CheckOptions,
    log: LogCheck<'_>,
) -> Vec<Problem> {
    let mut report = Report::default();
    pass_chunks::check_chunk(images, geometry, instance, chunk, last_sequence, options, Some(log), &mut report);
    report.problems
}

/// Checks the volume on `device`. `progress(done, total)` is called with bytes of chunks.
pub fn check(
    device: &(impl ReadAt + Sync + ?Sized),
    options: CheckOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, CheckError> {
    let mut report = Report::default();
    let Some(label) = pass_labels::check_labels(device, &mut report)? else { return Ok(report) };
    let geometry: Geometry = label.geometry;
    report.summary.slots = (0..geometry.num_slots).filter(|&slot| label.slot_present(slot)).count() as u64;
    let recovered = pass_logs::recover_all(device, &geometry, label.has_log_tables(), &mut report)?;
    for instance in &recovered {
        pass_logs::check_version_log(&geometry, &label, instance, &mut report);
    }
    let trees: Vec<Tree> = recovered
        .into_iter()
        .filter_map(|instance| {
            let (replayed_pointers, backup_area) = (instance.replayed_pointers, instance.backup_area);
            Some(Tree {
                instance: instance.instance,
                recovery: instance.recovery.ok()?,
                replayed_pointers,
                backup_area,
            })
        })
        .collect();
    for tree in &trees {
        pass_logs::check_backup_log(&geometry, &tree.recovery, &mut report);
    }
    let map = pass_slots::online_map(&geometry, &trees, &mut report);
    if geometry.num_slots < pass_slots::THREADED_FREE_SLOTS_MIN as u64 {
        pass_chunks::check_trees(device, &label, &trees, options, &mut report, progress)?;
        pass_slots::check_free_slots(device, &geometry, &map, &mut report)?;
    } else {
        // The free slots' footers (small reads) are read while the chunks are (large ones);
        // their finding follows the chunks' in the report, as in one pass after the other.
        let free = std::thread::scope(|scope| {
            let free = scope.spawn(|| {
                let mut free = Report::default();
                pass_slots::check_free_slots(device, &geometry, &map, &mut free).map(|()| free)
            });
            let chunks = pass_chunks::check_trees(device, &label, &trees, options, &mut report, progress);
            let free = free.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            chunks.and(free)
        })?;
        report.absorb(free);
    }
    pass_journal::check_journals(&geometry, &trees, &mut report);
    Ok(report)
}
