//! Crash-safe resize (`lds crashtest --workload resize`): `lds resize` grows and shrinks (with
//! chunk moves) an engine-written volume on the simulated device through an undo log, and
//! every crash state of its writes is checked:
//! - **I3**: fsck finds no warning or error: the volume is in its old geometry or its new
//!   one, or between the label switch and the base versions that follow it (SPEC.md §14);
//! - **I1/I2**: the engine reads every key with its value, as before the resize;
//! - **R**: a second `lds resize` to the same size finishes: the labels and every base
//!   version hold the target geometry, fsck is clean and every key reads as before;
//! - **U**: the undo file as it stood at the crash restores the volume byte for byte;
//! - **W**: the engine opens it for writing, and a synced put and a flush leave fsck clean
//!   (it allocates only slots that both the label's and the base versions' geometry hold).

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use lds_engine::{Db, WriteOptions};

use lds_repair::resize::{plan, resize, resized};
use lds_volume::{BlockDevice, ReadAt};

use crate::enumerate::{Counts, Failure};
use crate::error::SimError;
use crate::images::Bounds;
use crate::media::build_volume;
use crate::repair::{enumerate_history, problems_of, reads_of, undo_restores, Recording};
use crate::sim_device::{History, SimDevice};
use crate::workload::{options, Model};

/// A resize to check: the image before it and the size asked for.
#[derive(Debug, Clone)]
pub struct ResizeCase {
    /// What it does, for people.
    pub name: String,
    /// The image (the device; longer than the volume to grow).
    pub image: Vec<u8>,
    /// The size asked for.
    pub target: u64,
}

/// A resize recorded on the simulated device.
#[derive(Debug, Clone)]
pub struct ResizeRun {
    /// The case.
    pub name: String,
    /// The device history (its initial image is the volume before the resize).
    pub history: History,
    /// The undo file and its length at each write.
    pub undo: (Vec<u8>, Vec<usize>),
    /// The size asked for.
    pub target: u64,
    /// What every key reads.
    pub model: Model,
    /// Chunks the resize moved.
    pub moves: usize,
    /// The sector size.
    pub sector_size: u64,
}

/// Grow by a third, and shrink to two slots more than the data uses (which moves chunks), on
/// the media matrix's engine-written volume (both logs wrapped) compacted into its last level.
pub fn resize_cases() -> Result<Vec<ResizeCase>, SimError> {
    let mut volume = build_volume()?;
    volume.image = compacted(volume.image)?;
    let geometry = volume.geometry;
    let mut grown = volume.image.clone();
    grown.resize(volume.image.len() + volume.image.len() / 3, 0);
    let target = grown.len() as u64;
    let mut cases = vec![ResizeCase { name: format!("grow to {target} bytes"), image: grown, target }];
    let device = SimDevice::new(volume.image.clone());
    let smallest = plan(&device, device.len())?.min_len;
    let shrink = (smallest + 2 * geometry.slot_size..geometry.volume_len)
        .step_by(geometry.slot_size as usize)
        .find(|&len| plan(&device, len).is_ok_and(|planned| !planned.moves.is_empty()));
    if let Some(target) = shrink {
        cases.push(ResizeCase { name: format!("shrink to {target} bytes"), image: volume.image.clone(), target });
    }
    cases.push(ResizeCase {
        name: format!("shrink to the smallest size, {smallest} bytes"),
        image: volume.image,
        target: smallest,
    });
    Ok(cases)
}

/// The volume on `image` after a compaction of every level into the last: its outputs were
/// written while its inputs held the lower slots, so that a shrink has chunks to move.
fn compacted(image: Vec<u8>) -> Result<Vec<u8>, SimError> {
    let device = Arc::new(SimDevice::new(image));
    let (db, _) = Db::open_device(Arc::clone(&device) as Arc<dyn BlockDevice>, Path::new("resize"), options(true))
        .map_err(SimError::engine("open before the compaction: "))?;
    db.compact_range().map_err(SimError::engine("compaction: "))?;
    db.close().map_err(SimError::engine("close after the compaction: "))?;
    Ok(device.current())
}

/// Whether the volume on `image` is resized to `target`: labels and base versions.
fn finished(image: &[u8], target: u64) -> Result<bool, SimError> {
    let device = SimDevice::new(image.to_vec());
    let planned = plan(&device, target)?;
    Ok(planned.done() && planned.new == resized(&planned.old, target))
}

/// Runs the resize of `case` through an undo log and checks where it ends.
pub fn record_resize(case: &ResizeCase, sector_size: u64) -> Result<ResizeRun, SimError> {
    let model = reads_of(case.image.clone())?;
    let recording = Recording::new(case.image.clone(), sector_size, "resize");
    let (planned, _) = resize(&recording.undo_device, case.target)
        .map_err(|source| SimError::within(case.name.clone())(source.into()))?;
    let after = recording.device.current();
    let unfinished = |what: String| SimError::Unfinished { case: case.name.clone(), what };
    let problems = problems_of(&after)?;
    if !problems.is_empty() {
        return Err(unfinished(format!("fsck after the resize reports {problems:?}")));
    }
    if !finished(&after, case.target)? {
        return Err(unfinished("the resize did not reach its target".into()));
    }
    if reads_of(after)? != model {
        return Err(unfinished("the resize changed what the volume reads".into()));
    }
    Ok(ResizeRun {
        name: case.name.clone(),
        history: recording.device.history(),
        undo: recording.undo(),
        target: case.target,
        model,
        moves: planned.moves.len(),
        sector_size,
    })
}

fn check_image(run: &ResizeRun, writes_issued: usize, image: &[u8]) -> Result<(), (&'static str, String)> {
    undo_restores(&run.history.initial, &run.undo.0, &run.undo.1, writes_issued, image)?;
    let problems = problems_of(image).map_err(|error| ("I3", error.to_string()))?;
    if !problems.is_empty() {
        return Err(("I3", format!("fsck reports {problems:?}")));
    }
    let reads = reads_of(image.to_vec()).map_err(|error| ("I1/I2", error.to_string()))?;
    if reads != run.model {
        return Err((
            "I1/I2",
            format!("the volume reads {} keys, {} before the resize (or other values)", reads.len(), run.model.len()),
        ));
    }
    // W: the engine writes to it as it is (allocating only slots both the label's and the
    // base versions' geometries hold), and fsck stays clean.
    let written = SimDevice::new(image.to_vec());
    let opened = Db::open_device(Arc::new(written.clone()), Path::new("crash image"), options(true));
    let (db, _) = opened.map_err(|error| ("W", format!("the engine does not open it for writing: {error}")))?;
    let write = db.put(b"written-after-the-crash", b"value", WriteOptions { sync: true }).and_then(|()| db.flush());
    write.and_then(|()| db.close()).map_err(|error| ("W", format!("a write and a flush fail: {error}")))?;
    let problems = problems_of(&written.current()).map_err(|error| ("W", error.to_string()))?;
    if !problems.is_empty() {
        return Err(("W", format!("after a write and a flush fsck reports {problems:?}")));
    }
    let device = SimDevice::new(image.to_vec());
    resize(&device, run.target).map_err(|error| ("R", format!("a second resize fails: {error}")))?;
    let after = device.current();
    if !finished(&after, run.target).map_err(|error| ("R", error.to_string()))? {
        return Err(("R", "a second resize did not reach the target".into()));
    }
    let problems = problems_of(&after).map_err(|error| ("R", error.to_string()))?;
    if !problems.is_empty() {
        return Err(("R", format!("after a second resize fsck reports {problems:?}")));
    }
    if reads_of(after).map_err(|error| ("R", error.to_string()))? != run.model {
        return Err(("R", "after a second resize the volume reads other keys or values".into()));
    }
    Ok(())
}

/// Enumerates the crash states of a recorded resize and checks each.
pub fn enumerate_resize(
    run: &ResizeRun,
    bounds: &Bounds,
    on_failure: &mut dyn FnMut(Failure) -> ControlFlow<()>,
) -> Counts {
    let mut check = |_: usize, writes_issued: usize, image: &[u8]| check_image(run, writes_issued, image);
    enumerate_history(&run.history, run.sector_size, bounds, &mut check, on_failure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crash_state_of_a_grow_and_a_shrink_is_old_new_or_finished_by_a_second_run() {
        let cases = resize_cases();
        assert!(cases.is_ok(), "{:?}", cases.as_ref().err());
        let Ok(cases) = cases else { return };
        assert!(cases.len() >= 3, "{} cases", cases.len());
        let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed: 5 };
        let mut moved = 0;
        for case in &cases {
            let run = record_resize(case, 512);
            assert!(run.is_ok(), "{:?}", run.as_ref().err());
            let Ok(run) = run else { return };
            moved += run.moves;
            let mut failures = Vec::new();
            let counts = enumerate_resize(&run, &bounds, &mut |failure| {
                failures.push(format!(
                    "{} {}: {} ({})",
                    failure.oracle, failure.crash_point, failure.message, failure.state
                ));
                ControlFlow::Break(())
            });
            assert!(failures.is_empty(), "{}: {failures:?}", case.name);
            assert!(counts.distinct_images > 5, "{}: {counts:?}", case.name);
        }
        assert!(moved > 0, "no case moved a chunk");
    }

    /// With values in value chunks (SPEC.md §8.6), a shrink moves value chunks too, byte for
    /// byte, and every crash state still reads every value.
    #[test]
    fn a_shrink_moves_value_chunks_and_every_crash_state_reads_every_value() {
        let set = crate::workload::set_techniques("kv-separation");
        assert!(set.is_ok(), "{set:?}");
        let cases = resize_cases();
        assert!(cases.is_ok(), "{:?}", cases.as_ref().err());
        let Ok(cases) = cases else { return };
        let Some(case) = cases.last() else { return };
        let planned = plan(&SimDevice::new(case.image.clone()), case.target);
        assert!(planned.is_ok(), "{:?}", planned.as_ref().err());
        let Ok(planned) = planned else { return };
        let value_moves =
            planned.moves.iter().filter(|moved| matches!(moved.what, lds_repair::resize::Moved::ValueChunk(_))).count();
        assert!(value_moves > 0, "{}: no value chunk to move: {:?}", case.name, planned.moves);
        let run = record_resize(case, 512);
        assert!(run.is_ok(), "{:?}", run.as_ref().err());
        let Ok(run) = run else { return };
        let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed: 7 };
        let mut failures = Vec::new();
        let counts = enumerate_resize(&run, &bounds, &mut |failure| {
            failures
                .push(format!("{} {}: {} ({})", failure.oracle, failure.crash_point, failure.message, failure.state));
            ControlFlow::Break(())
        });
        assert!(failures.is_empty(), "{}: {failures:?}", case.name);
        assert!(counts.distinct_images > 5, "{}: {counts:?}", case.name);
    }
}
