//! Instances used together under the crash enumerator (`lds crashtest --workload instances`,
//! SPEC.md §13): one process opens both instances of a volume (`Db::open_instances`), and a
//! random workload sends each operation to one of them; flushes and compactions of both
//! allocate from one shared online map. Every crash state is checked:
//! - **I3**: fsck finds no warning or error (no slot referenced by both instances, above all);
//! - **I1/I2**, per instance: its recovered state is its model after one of its own operations
//!   between its last synced one and its last issued one (the logs, and so the syncs, are
//!   each instance's own);
//! - **I5**: recovering both instances together writes nothing, and again gives the same.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use lds_check::{check, CheckOptions, Severity};
use lds_engine::Db;
use lds_format::algorithms::image::ImageBuilder;
use lds_format::geometry::plan_layout;
use lds_format::label::Label;
use lds_volume::MemoryImage;

use crate::enumerate::{Counts, Failure};
use crate::error::SimError;
use crate::images::Bounds;
use crate::repair::{enumerate_history, Verdict};
use crate::sim_device::{History, SimDevice};
use crate::workload::{apply_op, apply_to_model, layout, options, random, Model, Op, OpSpan};

/// Instances of the simulated volume.
pub const INSTANCES: u32 = 2;

/// A volume of `INSTANCES` instances on the simulator's layout, 4 MiB.
pub fn formatted_image() -> Result<Vec<u8>, SimError> {
    let mut request = layout();
    request.instance_count = Some(INSTANCES);
    request.volume_len = 4 << 20;
    let geometry = plan_layout(&request, [0x54; 16]).map_err(|source| SimError::Layout { source })?;
    Ok(ImageBuilder::format(crate::workload::label_for_techniques(
        Label::new(geometry, "crashtest-instances").with_sync_watermark().with_fast_digest().with_compact_entries(),
    ))
    .bytes)
}

/// The random workload of `seed` with each operation sent to one instance (a reopen reopens
/// both).
pub fn workload(seed: u64, len: usize) -> Vec<(u32, Op)> {
    let ops = random(seed, len).ops;
    ops.into_iter()
        .enumerate()
        .map(|(index, op)| {
            let mix = (index as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61;
            ((mix % u64::from(INSTANCES)) as u32, op)
        })
        .collect()
}

/// A two-instance workload recorded on the simulated device.
#[derive(Debug, Clone)]
pub struct InstancesRun {
    /// The seed it came from.
    pub seed: u64,
    /// The operations, each with its instance.
    pub ops: Vec<(u32, Op)>,
    /// The device history.
    pub history: History,
    /// Each operation's span of device events.
    pub spans: Vec<OpSpan>,
    /// Per instance: its model before its first operation and after each of its operations.
    pub models: Vec<Vec<Model>>,
    /// The sector size.
    pub sector_size: u64,
    /// Write every batch to the device.
    pub unbuffered: bool,
}

fn open_all(device: &SimDevice, unbuffered: bool) -> Result<Vec<Db>, SimError> {
    let stores = Db::open_instances_device(Arc::new(device.clone()), Path::new("instances"), options(unbuffered))?;
    Ok(stores.into_iter().map(|(db, _)| db).collect())
}

/// Runs the workload of `seed` on both instances opened together, recording everything.
pub fn record(seed: u64, len: usize, unbuffered: bool) -> Result<InstancesRun, SimError> {
    let ops = workload(seed, len);
    let sector_size = layout().sector_size.map_or(512, u64::from);
    let device = SimDevice::new(formatted_image()?).with_sector_size(sector_size);
    let mut stores = open_all(&device, unbuffered)?;
    let mut models: Vec<Vec<Model>> = (0..INSTANCES).map(|_| vec![Model::new()]).collect();
    let mut spans = Vec::with_capacity(ops.len());
    for (index, (instance, op)) in ops.iter().enumerate() {
        let start_event = device.event_count();
        let failed = |error: SimError| {
            SimError::within(format!("operation {index} ({} on instance {instance})", op.describe()))(error)
        };
        if *op == Op::Reopen {
            for db in stores.drain(..) {
                db.close().map_err(|error| failed(error.into()))?;
            }
            stores = open_all(&device, unbuffered).map_err(failed)?;
        } else {
            apply_op(&stores[*instance as usize], op).map_err(|error| failed(error.into()))?;
        }
        let instance_models = &mut models[*instance as usize];
        let mut model = instance_models.last().cloned().unwrap_or_default();
        apply_to_model(&mut model, op);
        instance_models.push(model);
        spans.push(OpSpan { start_event, end_event: device.event_count() });
    }
    for db in stores {
        db.close()?;
    }
    Ok(InstancesRun { seed, ops, history: device.history(), spans, models, sector_size, unbuffered })
}

/// Per instance, the window of its models a crash after `point` device events may show: from
/// after its last operation acknowledged as durable to after its last operation started.
fn windows(run: &InstancesRun, point: usize) -> Vec<(usize, usize)> {
    (0..INSTANCES)
        .map(|instance| {
            let own = run.ops.iter().zip(&run.spans).filter(|((of, _), _)| *of == instance);
            let (mut min, mut max) = (0, 0);
            for (count, ((_, op), span)) in own.enumerate() {
                if span.start_event <= point {
                    max = count + 1;
                }
                if span.end_event <= point && op.is_sync_point() {
                    min = count + 1;
                }
            }
            (min, max)
        })
        .collect()
}

fn check_image(run: &InstancesRun, point: usize, image: &[u8]) -> Verdict {
    let report = check(&MemoryImage(image), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
        .map_err(|error| ("I3", format!("fsck cannot check: {error}")))?;
    if let Some(problem) = report.problems.iter().find(|problem| problem.code.severity() != Severity::Info) {
        return Err(("I3", format!("fsck: {}", problem.line())));
    }
    let recover = || -> Result<(Vec<Model>, SimDevice), SimError> {
        let device = SimDevice::shared(Arc::new(image.to_vec()));
        let stores = open_all(&device, run.unbuffered)?;
        let mut states = Vec::new();
        for db in stores {
            states.push(db.iter().and_then(Iterator::collect)?);
            db.close()?;
        }
        Ok((states, device))
    };
    let (states, device) = recover().map_err(|error| ("recovery", error.to_string()))?;
    for (instance, (state, (min, max))) in states.iter().zip(windows(run, point)).enumerate() {
        let models = &run.models[instance];
        if !(min..=max.min(models.len() - 1)).any(|index| models[index] == *state) {
            let nearest = models.iter().position(|model| model == state);
            return Err((
                "I1/I2",
                format!(
                    "instance {instance}: the recovered state ({} keys) is not its model after any of its operations from {min} to {max}{}",
                    state.len(),
                    nearest.map_or_else(String::new, |index| format!(" (it is after its operation {index})"))
                ),
            ));
        }
    }
    let (writes, flushes) = (device.write_count(), device.flush_count());
    if writes + flushes > 0 {
        return Err(("I5", format!("recovering both instances issued {writes} writes and {flushes} flushes")));
    }
    let (again, _) = recover().map_err(|error| ("I5", error.to_string()))?;
    if again != states {
        return Err(("I5", "a second recovery of the same image gives other states".into()));
    }
    Ok(())
}

/// Enumerates the crash states of a recorded run and checks each.
pub fn enumerate(
    run: &InstancesRun,
    bounds: &Bounds,
    on_failure: &mut dyn FnMut(Failure) -> ControlFlow<()>,
) -> Counts {
    let mut check = |point: usize, _: usize, image: &[u8]| check_image(run, point, image);
    enumerate_history(&run.history, run.sector_size, bounds, &mut check, on_failure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crash_state_of_two_instances_written_together_recovers_each_to_a_prefix() {
        let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed: 11 };
        let mut distinct = 0;
        for (seed, unbuffered) in [(1, true), (2, false)] {
            let run = record(seed, 60, unbuffered);
            assert!(run.is_ok(), "{:?}", run.as_ref().err());
            let Ok(run) = run else { return };
            assert!(run.models.iter().all(|models| models.len() > 10), "an instance got too few operations");
            let mut failures = Vec::new();
            let counts = enumerate(&run, &bounds, &mut |failure| {
                failures.push(format!(
                    "{} {}: {} ({})",
                    failure.oracle, failure.crash_point, failure.message, failure.state
                ));
                ControlFlow::Break(())
            });
            assert!(failures.is_empty(), "seed {seed}: {failures:?}");
            distinct += counts.distinct_images;
        }
        assert!(distinct > 100, "only {distinct} distinct crash images");
    }
}
