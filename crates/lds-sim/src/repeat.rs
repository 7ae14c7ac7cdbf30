//! Repeated crashes (docs/reliability.md I4, and F8's crash after recovery): a first crash image
//! of a run is recovered, more operations run on the recovered store over a recording
//! device, and the crash states of that second run are enumerated. Each second crash image
//! must satisfy I1, I2, I3 and I5 against the combined history (the state the first recovery
//! gave, then the second run's operations), and I4: the engine's recovered sequence number is
//! never below the one the first recovery gave, nor below the last synced write's.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use lds_engine::Db;

use crate::enumerate::{check_crash_image, check_shared_image, Bounds, Failure};
use crate::error::SimError;
use crate::images::{recipes, Builder, Recipe};
use crate::sim_device::SimDevice;
use crate::workload::{drive, options, Op, Random, Run, Workload};

/// Limits of a repeated-crash enumeration.
#[derive(Debug, Clone, Copy)]
pub struct RepeatBounds {
    /// First crash points tried, spread evenly over the first run.
    pub first_points: usize,
    /// At each, the images: none and all of the unflushed writes, and this many random
    /// subsets.
    pub first_samples: usize,
    /// How the second run's crash states are enumerated.
    pub second: Bounds,
}

impl Default for RepeatBounds {
    fn default() -> Self {
        Self {
            first_points: 12,
            first_samples: 1,
            second: Bounds { exhaustive_max: 3, samples: 4, ..Bounds::default() },
        }
    }
}

/// What a repeated-crash enumeration counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RepeatCounts {
    /// Distinct first crash images recovered and continued.
    pub first_images: u64,
    /// Distinct second crash images checked.
    pub second_images: u64,
    /// Images that broke an oracle.
    pub failures: u64,
}

/// The second run: `second` applied to the store recovered from `image`, on a device that
/// records its history from `image` on. Returns the run (its models start with the recovered
/// state), the sequence number after recovery and after each operation.
fn continue_run(
    image: &[u8],
    second: &Workload,
    sector_size: u64,
    unbuffered: bool,
) -> Result<(Run, Vec<u64>), SimError> {
    let device = SimDevice::new(image.to_vec());
    let driven = drive(&device, second, unbuffered, "recovered", "second run, ", |db| {
        Ok(db.iter().and_then(Iterator::collect)?)
    })?;
    let run = Run {
        workload: second.clone(),
        history: device.history(),
        spans: driven.spans,
        models: driven.models,
        sector_size,
    };
    Ok((run, driven.sequences))
}

/// I4 for one second crash image: the recovered sequence number against the first
/// recovery's and the last synced write's.
fn check_sequence(image: &Arc<Vec<u8>>, floor: u64, unbuffered: bool) -> Result<(), SimError> {
    let device = SimDevice::shared(Arc::clone(image));
    let (db, _) = Db::open_device(Arc::new(device), Path::new("second crash"), options(unbuffered))?;
    let recovered = db.last_sequence();
    if recovered < floor {
        return Err(SimError::SequenceBelow { recovered, floor });
    }
    Ok(())
}

/// Enumerates repeated crashes of `run`, continuing each first crash with `second`; calls
/// `on_failure` for each failing image (the first crash's image when the first recovery
/// fails, else the second's).
pub fn enumerate_repeated(
    run: &Run,
    second: &Workload,
    bounds: &RepeatBounds,
    unbuffered: bool,
    on_failure: &mut dyn FnMut(Failure),
) -> RepeatCounts {
    let mut counts = RepeatCounts::default();
    let mut seen_first: HashSet<u128> = HashSet::new();
    let mut random = Random(bounds.second.seed | 1);
    let points = run.history.events.len() + 1;
    let step = points.div_ceil(bounds.first_points.max(1)).max(1);
    let mut builder = Builder::new(run);
    for point in 0..points {
        if point > 0 {
            builder.advance();
        }
        if point % step != 0 {
            continue;
        }
        let pending = builder.pending().to_vec();
        let all = if pending.len() >= 64 { u64::MAX } else { (1u64 << pending.len()) - 1 };
        let mut masks = vec![0, all];
        masks.extend((0..bounds.first_samples).map(|_| random.next_u64() & all));
        for mask in masks {
            let steps = pending
                .iter()
                .take(64)
                .enumerate()
                .filter(|(bit, _)| mask & (1 << bit) != 0)
                .map(|(_, &index)| (index, None));
            let first = format!("first crash at point {point}, unflushed writes {pending:?} with mask {mask:#x}");
            let recipe = Recipe { state: first, steps: steps.collect() };
            let Some(image) =
                builder.with_image(&recipe, |digest, image| seen_first.insert(digest).then(|| image.as_ref().clone()))
            else {
                continue;
            };
            counts.first_images += 1;
            let first = recipe.state;
            let first_checked = check_crash_image(run, point, &image, unbuffered);
            let continued = first_checked.and_then(|()| {
                continue_run(&image, second, run.sector_size, unbuffered)
                    .map_err(|error| ("recovery", error.to_string()))
            });
            let (second_run, sequences) = match continued {
                Ok(continued) => continued,
                Err((oracle, message)) => {
                    counts.failures += 1;
                    on_failure(Failure { crash_point: point, state: first, oracle, message, image });
                    continue;
                }
            };
            let mut seen_second: HashSet<u128> = HashSet::new();
            let mut second_builder = Builder::new(&second_run);
            let mut second_point = 0;
            loop {
                // The last synced operation of the second run by this point: its sequence
                // number must survive; before any, the first recovery's.
                let synced = second_run
                    .spans
                    .iter()
                    .enumerate()
                    .filter(|(index, span)| {
                        span.end_event <= second_point && second_run.workload.ops[*index].is_sync_point()
                    })
                    .map(|(index, _)| index + 1)
                    .max()
                    .unwrap_or(0);
                let floor = sequences[synced];
                let second_recipes = recipes(
                    second_builder.pending(),
                    &second_run.history.writes,
                    second_run.sector_size,
                    &bounds.second,
                    &mut random,
                );
                for second_recipe in second_recipes {
                    let checked = second_builder.with_image(&second_recipe, |digest, second_image| {
                        seen_second.insert(digest).then(|| {
                            let checked = check_shared_image(&second_run, second_point, second_image, unbuffered)
                                .and_then(|()| {
                                    check_sequence(second_image, floor, unbuffered)
                                        .map_err(|error| ("I4", error.to_string()))
                                });
                            checked.map_err(|failure| (failure, second_image.as_ref().clone()))
                        })
                    });
                    let Some(checked) = checked else { continue };
                    counts.second_images += 1;
                    if let Err(((oracle, message), second_image)) = checked {
                        counts.failures += 1;
                        on_failure(Failure {
                            crash_point: second_point,
                            state: format!("{first}; second crash at point {second_point}, {}", second_recipe.state),
                            oracle,
                            message,
                            image: second_image,
                        });
                    }
                }
                if !second_builder.advance() {
                    break;
                }
                second_point += 1;
            }
        }
    }
    counts
}

/// A short second run for `enumerate_repeated`: puts and deletes over the random workloads'
/// keys (so they overwrite what the first run wrote), some synced, a flush and a reopen.
pub fn second_workload(seed: u64) -> Workload {
    let mut random = Random(seed.wrapping_mul(0xD6E8_FEB8_6659_FD93) | 1);
    let mut ops = Vec::new();
    for number in 0..14u64 {
        let key = format!("key-{:02}", random.below(40)).into_bytes();
        let sync = number % 4 == 3;
        ops.push(match number {
            6 => Op::Flush,
            10 => Op::Reopen,
            _ if random.below(4) == 0 => Op::Delete { key, sync },
            _ => Op::Put { key, value: format!("second-{seed}-{number}").into_bytes(), sync },
        });
    }
    Workload { name: format!("second-{seed}"), ops }
}
