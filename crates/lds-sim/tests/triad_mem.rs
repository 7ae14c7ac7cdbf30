//! Crash consistency of hot keys held in memory at flushes (TRIAD-MEM, technique
//! `triad-mem`): every crash state of random workloads whose freezes write hot entries again
//! to the backup log and leave them out of level 0, recovered and checked against I1, I2, I3
//! and I5: a crash between the held batch and the flush's delta version, or after it, loses
//! no acknowledged write.

use std::path::Path;
use std::sync::Arc;

use lds_engine::Db;
use lds_sim::device::SimDevice;
use lds_sim::enumerate::{enumerate, Bounds};
use lds_sim::workload::{apply_op, formatted_image, options, random, random_wrap, run, set_techniques, Op, Workload};

/// Runs the workload on a store that stays open (reopens skipped) and returns its counters.
fn stats_of(ops: &[Op]) -> lds_engine::Stats {
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let (db, _) = Db::open_device(Arc::new(SimDevice::new(image)), Path::new("triad-mem"), options(true))
        .unwrap_or_else(|error| panic!("open: {error}"));
    for op in ops {
        apply_op(&db, op).unwrap_or_else(|error| panic!("{op:?}: {error}"));
    }
    db.stats()
}

#[test]
fn crash_states_of_held_hot_keys() {
    set_techniques("triad-mem").unwrap_or_else(|error| panic!("{error}"));
    let (mut held, mut distinct) = (0, 0);
    let workloads: Vec<Workload> = (1..=3).map(|seed| random(seed, 150)).chain([random_wrap(4, 200)]).collect();
    for (seed, workload) in (1..).zip(&workloads) {
        held += stats_of(&workload.ops).hot_entries_held;
        let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
        let recorded = run(workload, image, true).unwrap_or_else(|error| panic!("{}: {error}", workload.name));
        let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed };
        let mut failures = Vec::new();
        let counts = enumerate(&recorded, &bounds, true, &mut |failure| {
            failures.push(format!("point {}: {} {}", failure.crash_point, failure.oracle, failure.message));
        });
        assert!(failures.is_empty(), "{}: {failures:#?}", workload.name);
        distinct += counts.distinct_images;
    }
    assert!(held > 0, "no hot entry was held: the crash states above do not cover the technique");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}
