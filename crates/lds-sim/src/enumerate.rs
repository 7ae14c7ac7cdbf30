//! The crash-state enumerator (docs/reliability.md L2): at every point between two device events,
//! the durable image plus every subset of the writes not yet flushed (all subsets up to a
//! bound, sampled with a seed past it), and every write torn at each sector boundary (with
//! the earlier unflushed writes landed, and again with the later ones landed too). Each
//! distinct image is recovered with the real engine and checked against the oracles.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use lds_check::{check, CheckOptions, Severity};
use lds_engine::Db;
use lds_volume::MemoryImage;

use crate::error::SimError;
use crate::images::{recipes, Builder};
use crate::sim_device::SimDevice;
use crate::workload::{options, Model, Random, Run};

pub use crate::images::Bounds;

/// What an enumeration counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Points between device events.
    pub crash_points: u64,
    /// Crash images built.
    pub images: u64,
    /// Distinct images checked.
    pub distinct_images: u64,
    /// Images that broke an oracle.
    pub failures: u64,
}

/// An image that broke an oracle.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The crash point (events that happened).
    pub crash_point: usize,
    /// Which unflushed writes reached the media, or which write tore.
    pub state: String,
    /// The oracle: `I1/I2`, `I3`, `I4` (repeated crashes), `I5`, or `recovery`.
    pub oracle: &'static str,
    /// What went wrong.
    pub message: String,
    /// The crash image.
    pub image: Vec<u8>,
}

/// The state a recovered image shows, or why it cannot be read; with the device it was
/// recovered on, which counts what recovery wrote.
fn recovered_state(image: &Arc<Vec<u8>>, unbuffered: bool) -> Result<(Model, Db, SimDevice), SimError> {
    let device = SimDevice::shared(Arc::clone(image));
    let (db, _) = Db::open_device(Arc::new(device.clone()), Path::new("crash image"), options(unbuffered))?;
    let state: Model = db.iter().and_then(Iterator::collect)?;
    Ok((state, db, device))
}

/// F8 and I5: recovery writes nothing (SPEC.md §9.5), so a crash during recovery leaves the
/// crash image itself, already checked: there are no crash states of recovery to enumerate.
/// Checked here for every image: opening, reading everything and closing issue no write and
/// no flush. (Were this ever to fail, the writes recovery issued would need their own crash
/// states enumerated and checked against I1 to I4.)
fn recovery_wrote_nothing(device: &SimDevice) -> Result<(), (&'static str, String)> {
    let (writes, flushes) = (device.write_count(), device.flush_count());
    if writes + flushes > 0 {
        return Err(("I5", format!("recovery issued {writes} writes and {flushes} flushes before any operation")));
    }
    Ok(())
}

/// Checks one crash image against the oracles; `Err((oracle, message))` on a failure.
fn check_image(
    image: &Arc<Vec<u8>>,
    run: &Run,
    model_min: usize,
    model_max: usize,
    unbuffered: bool,
) -> Result<(), (&'static str, String)> {
    // I3: fsck finds no error or warning (info lines, such as a torn head, are expected).
    let report =
        check(&MemoryImage(image.as_slice()), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
            .map_err(|error| ("I3", format!("fsck cannot check: {error}")))?;
    if let Some(problem) = report.problems.iter().find(|problem| problem.code.severity() != Severity::Info) {
        return Err((
            "I3",
            format!("fsck: {} {} @ {}: {}", problem.code.number(), problem.structure, problem.offset, problem.message),
        ));
    }
    // I1 and I2: the recovered state is the model after some operation between the last
    // synced one and the last issued one.
    let (state, db, device) = recovered_state(image, unbuffered).map_err(|error| ("recovery", error.to_string()))?;
    let matching = (model_min..=model_max.min(run.models.len() - 1)).rev().find(|&index| run.models[index] == state);
    if matching.is_none() {
        let nearest = (0..run.models.len()).find(|&index| run.models[index] == state);
        return Err((
            "I1/I2",
            format!(
                "the recovered state ({} keys) is not the model after any operation from {model_min} to {model_max}{}",
                state.len(),
                nearest.map_or_else(String::new, |index| format!(" (it is the model after operation {index})"))
            ),
        ));
    }
    // I5: recovering again (after a clean close) gives the same state.
    db.close().map_err(|error| ("I5", error.to_string()))?;
    recovery_wrote_nothing(&device)?;
    let (again, db, device) = recovered_state(image, unbuffered).map_err(|error| ("I5", error.to_string()))?;
    if again != state {
        return Err(("I5", "a second recovery of the same image gives another state".into()));
    }
    // An unfinished journaled compaction (SPEC.md §12) resumes and finishes: the state stays
    // the same and fsck is clean after it.
    if db.unfinished_compaction().is_some() {
        db.flush().map_err(|error| ("resume", format!("resuming the unfinished compaction failed: {error}")))?;
        if db.unfinished_compaction().is_some() {
            return Err(("resume", "the unfinished compaction did not finish".into()));
        }
        let resumed: Model = db.iter().and_then(Iterator::collect).map_err(|error| ("resume", error.to_string()))?;
        if resumed != state {
            return Err((
                "resume",
                format!("after the resumed compaction the state has {} keys, before {}", resumed.len(), state.len()),
            ));
        }
        db.close().map_err(|error| ("resume", error.to_string()))?;
        let current = device.current();
        let report = check(&MemoryImage(&current), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
            .map_err(|error| ("I3", format!("fsck cannot check after the resume: {error}")))?;
        if let Some(problem) = report.first_inconsistency() {
            return Err(("I3", format!("fsck after the resumed compaction: {}", problem.line())));
        }
    }
    Ok(())
}

/// Enumerates the crash states of a run and checks each; calls `on_failure` for each
/// failing image.
pub fn enumerate(run: &Run, bounds: &Bounds, unbuffered: bool, on_failure: &mut dyn FnMut(Failure)) -> Counts {
    walk(run, bounds, unbuffered, &mut |failure| {
        on_failure(failure);
        ControlFlow::Continue(())
    })
}

/// The first failing crash image of a run whose failure `wanted` accepts, if any; stops
/// there (the reproducer minimizer asks this of every candidate workload).
pub fn first_failure(
    run: &Run,
    bounds: &Bounds,
    unbuffered: bool,
    wanted: &dyn Fn(&Failure) -> bool,
) -> Option<Failure> {
    let mut found = None;
    walk(run, bounds, unbuffered, &mut |failure| {
        if wanted(&failure) {
            found = Some(failure);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    });
    found
}

/// The oracle's window at a crash point: from the last operation acknowledged as durable by
/// then to the last operation started by then (as indexes into `run.models`).
fn model_window(run: &Run, point: usize) -> (usize, usize) {
    let model_min = run
        .spans
        .iter()
        .enumerate()
        .filter(|(index, span)| span.end_event <= point && run.workload.ops[*index].is_sync_point())
        .map(|(index, _)| index + 1)
        .max()
        .unwrap_or(0);
    let model_max = run.spans.iter().filter(|span| span.start_event <= point).count();
    (model_min, model_max)
}

/// The enumeration, until `on_failure` breaks.
fn walk(
    run: &Run,
    bounds: &Bounds,
    unbuffered: bool,
    on_failure: &mut dyn FnMut(Failure) -> ControlFlow<()>,
) -> Counts {
    let mut counts = Counts::default();
    let mut builder = Builder::new(run);
    let mut seen: HashSet<u128> = HashSet::new();
    let mut random = Random(bounds.seed | 1);
    let mut point = 0;
    loop {
        counts.crash_points += 1;
        let (model_min, model_max) = model_window(run, point);
        for recipe in recipes(builder.pending(), &run.history.writes, run.sector_size, bounds, &mut random) {
            counts.images += 1;
            let checked = builder.with_image(&recipe, |digest, image| {
                if !seen.insert(digest) {
                    return None;
                }
                Some(
                    check_image(image, run, model_min, model_max, unbuffered)
                        .map_err(|failure| (failure, image.as_ref().clone())),
                )
            });
            let Some(checked) = checked else { continue };
            counts.distinct_images += 1;
            if let Err(((oracle, message), image)) = checked {
                counts.failures += 1;
                if on_failure(Failure { crash_point: point, state: recipe.state, oracle, message, image }).is_break() {
                    return counts;
                }
            }
        }
        if !builder.advance() {
            break;
        }
        point += 1;
    }
    counts
}

/// Checks one crash image of `run`, taken after `crash_point` of its device events, against
/// the oracles as `enumerate` checks each image it builds (docs/reliability.md L3: a fuzzer
/// chooses the image); `Err((oracle, message))` on a failure.
pub fn check_crash_image(
    run: &Run,
    crash_point: usize,
    image: &[u8],
    unbuffered: bool,
) -> Result<(), (&'static str, String)> {
    let (model_min, model_max) = model_window(run, crash_point);
    check_image(&Arc::new(image.to_vec()), run, model_min, model_max, unbuffered)
}

/// `check_crash_image` on an image shared with the caller, which is not copied.
pub(crate) fn check_shared_image(
    run: &Run,
    crash_point: usize,
    image: &Arc<Vec<u8>>,
    unbuffered: bool,
) -> Result<(), (&'static str, String)> {
    let (model_min, model_max) = model_window(run, crash_point);
    check_image(image, run, model_min, model_max, unbuffered)
}
