//! Crash consistency of deferred level-0 merges (TRIAD-DISK, technique `triad-disk`, SPEC.md
//! §8.7): every crash state of workloads whose level 0 waits for overlap, merges up to seven
//! chunks at once and reads the key sketches again at each reopen, recovered and checked
//! against I1, I2, I3 and I5.

use std::path::Path;
use std::sync::Arc;

use lds_engine::Db;
use lds_sim::device::SimDevice;
use lds_sim::enumerate::{enumerate, Bounds};
use lds_sim::workload::{apply_op, formatted_image, options, random_level0, run, set_techniques, Op};

/// Runs the workload on a store that stays open (reopens skipped) and returns its counters.
fn stats_of(ops: &[Op]) -> lds_engine::Stats {
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let (db, _) = Db::open_device(Arc::new(SimDevice::new(image)), Path::new("triad-disk"), options(true))
        .unwrap_or_else(|error| panic!("open: {error}"));
    for op in ops {
        apply_op(&db, op).unwrap_or_else(|error| panic!("{op:?}: {error}"));
    }
    db.stats()
}

#[test]
fn crash_states_of_deferred_level0_merges() {
    set_techniques("triad-disk").unwrap_or_else(|error| panic!("{error}"));
    let (mut merges, mut merged, mut distinct) = (0, 0, 0);
    for seed in 1..=3 {
        let workload = random_level0(seed, 150);
        let stats = stats_of(&workload.ops);
        merges += stats.level0_merges;
        merged += stats.level0_chunks_merged;
        let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
        let recorded = run(&workload, image, true).unwrap_or_else(|error| panic!("{}: {error}", workload.name));
        let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed };
        let mut failures = Vec::new();
        let counts = enumerate(&recorded, &bounds, true, &mut |failure| {
            failures.push(format!("point {}: {} {}", failure.crash_point, failure.oracle, failure.message));
        });
        assert!(failures.is_empty(), "{}: {failures:#?}", workload.name);
        distinct += counts.distinct_images;
    }
    // Level 0 waited: its merges took more chunks than the trigger of four on average.
    assert!(merges > 0, "no level-0 merge ran");
    assert!(merged > 4 * merges, "{merged} level-0 chunks in {merges} merges: level 0 never waited");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}
