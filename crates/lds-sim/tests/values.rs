//! Crash consistency of key-value separation (SPEC.md §8.6, technique `kv-separation`): every
//! crash state of workloads that write value chunks at flush and before batches, span slots
//! and relocate values out of value chunks with much garbage, recovered and checked against
//! I1, I2, I3 and I5.

use std::path::Path;
use std::sync::Arc;

use lds_engine::Db;
use lds_sim::device::SimDevice;
use lds_sim::enumerate::{enumerate, Bounds};
use lds_sim::workload::{apply_op, formatted_image, options, random_values, run, set_techniques, Op};

/// Runs the workload on a store that stays open (reopens skipped) and returns its counters.
fn stats_of(ops: &[Op]) -> lds_engine::Stats {
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let device = SimDevice::new(image);
    let (db, _) = Db::open_device(Arc::new(device), Path::new("values"), options(true))
        .unwrap_or_else(|error| panic!("open: {error}"));
    for op in ops {
        apply_op(&db, op).unwrap_or_else(|error| panic!("{op:?}: {error}"));
    }
    db.stats()
}

#[test]
fn crash_states_of_separated_values_and_their_collection() {
    set_techniques("kv-separation").unwrap_or_else(|error| panic!("{error}"));
    let (mut relocated, mut collections, mut distinct, mut direct) = (0, 0, 0, 0);
    for seed in 1..=3 {
        let workload = random_values(seed, 120);
        let stats = stats_of(&workload.ops);
        relocated += stats.values_relocated_bytes;
        collections += stats.value_collections;
        direct +=
            workload.ops.iter().filter(|op| matches!(op, Op::Put { value, .. } if value.len() > 16 << 10)).count();
        assert!(stats.value_chunks > 0, "{}: no value chunk: {stats:?}", workload.name);
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
    // Values past a quarter of a slot went around the backup log, merges relocated live
    // values, and collections rewrote chunks in place to free value chunks: the crash states
    // above include all three.
    assert!(direct > 0, "no value larger than a quarter of a slot");
    assert!(relocated > 0, "no value was relocated");
    assert!(collections > 0, "no collection (a rewrite in place to free value chunks) ran");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}
