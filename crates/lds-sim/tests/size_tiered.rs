//! Crash consistency of size-tiered compaction (technique `size-tiered`, LDS §4.2.5): every
//! crash state of workloads whose merges write chunks of several sub-chunks, each written
//! before its identity is known and its tail written again at the end, recovered and
//! checked against I1, I2, I3 and I5.

use std::path::Path;
use std::sync::Arc;

use lds_engine::Db;
use lds_sim::device::SimDevice;
use lds_sim::enumerate::{enumerate, Bounds};
use lds_sim::workload::{apply_op, formatted_image, options, random_tiered, run, set_techniques, Op};

/// Runs the workload on a store that stays open (reopens skipped): its merges and the most
/// sub-chunks a chunk had at the end.
fn shape_of(ops: &[Op]) -> (u64, usize) {
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let (db, _) = Db::open_device(Arc::new(SimDevice::new(image)), Path::new("size-tiered"), options(true))
        .unwrap_or_else(|error| panic!("open: {error}"));
    let mut largest = 0;
    for op in ops {
        apply_op(&db, op).unwrap_or_else(|error| panic!("{op:?}: {error}"));
        largest = largest.max(db.chunks().iter().map(|chunk| chunk.sub_chunks.len()).max().unwrap_or(0));
    }
    (db.stats().merges, largest)
}

#[test]
fn crash_states_of_size_tiered_merges() {
    set_techniques("size-tiered").unwrap_or_else(|error| panic!("{error}"));
    let (mut merges, mut largest, mut distinct) = (0, 0, 0);
    for seed in 1..=3 {
        let workload = random_tiered(seed, 150);
        let (ran, most) = shape_of(&workload.ops);
        merges += ran;
        largest = largest.max(most);
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
    assert!(merges > 0, "no size-tiered merge ran");
    assert!(largest > 1, "no chunk of several sub-chunks formed");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}
