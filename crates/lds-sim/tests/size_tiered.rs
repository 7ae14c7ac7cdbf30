//! Crash consistency of size-tiered compaction (technique `size-tiered`, LDS §4.2.5): every
//! crash state of workloads whose merges write chunks of several sub-chunks, each written
//! before its identity is known and its tail written again at the end, recovered and
//! checked against I1, I2, I3 and I5.

mod common;

use lds_sim::workload::{random_tiered, set_techniques};

#[test]
fn crash_states_of_size_tiered_merges() {
    set_techniques("size-tiered").unwrap_or_else(|error| panic!("{error}"));
    let (mut merges, mut largest, mut distinct) = (0, 0, 0);
    for seed in 1..=3 {
        let workload = random_tiered(seed, 150);
        // The most sub-chunks a chunk had at any point.
        let db = common::run_open(&workload.ops, |db| {
            largest = largest.max(db.chunks().iter().map(|chunk| chunk.sub_chunks.len()).max().unwrap_or(0));
        });
        merges += db.stats().merges;
        distinct += common::enumerate_clean(&workload, seed);
    }
    assert!(merges > 0, "no size-tiered merge ran");
    assert!(largest > 1, "no chunk of several sub-chunks formed");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}
