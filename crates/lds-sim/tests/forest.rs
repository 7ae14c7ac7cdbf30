//! Crash consistency of the split forest (technique `forest`, SifrDB §4.1): every crash state
//! of workloads whose stage drains move chunks that overlap nothing, merge the rest with
//! outputs cut around them, journal and clean early, and move each drained tree to its
//! position, recovered and checked against I1, I2, I3 and I5.

mod common;

use lds_sim::workload::{random_forest, set_small_chunk_moves, set_techniques};

#[test]
fn crash_states_of_forest_drains() {
    set_techniques("forest").unwrap_or_else(|error| panic!("{error}"));
    set_small_chunk_moves(true);
    let (mut moved, mut journaled, mut deepest, mut distinct) = (0, 0, 0, 0);
    for seed in 1..=3 {
        let workload = random_forest(seed, 300);
        let db = common::run_open(&workload.ops, |db| {
            deepest = deepest.max(db.chunks().iter().map(|chunk| chunk.level).max().unwrap_or(0));
        });
        let stats = db.stats();
        moved += stats.forest_moved_chunks;
        journaled += stats.journaled_merges;
        distinct += common::enumerate_clean(&workload, seed);
    }
    assert!(moved > 0, "no forest drain moved a chunk beside the ones it merged");
    assert!(journaled > 0, "no forest drain was journaled");
    // Stage 2's positions are levels 7 to 10.
    assert!(deepest >= 7, "no tree reached stage 2 (deepest level {deepest})");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}
