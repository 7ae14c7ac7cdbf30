//! Crash consistency of deferred level-0 merges (TRIAD-DISK, technique `triad-disk`, SPEC.md
//! §8.7): every crash state of workloads whose level 0 waits for overlap, merges up to seven
//! chunks at once and reads the key sketches again at each reopen, recovered and checked
//! against I1, I2, I3 and I5.

mod common;

use lds_sim::workload::{random_level0, set_techniques};

#[test]
fn crash_states_of_deferred_level0_merges() {
    set_techniques("triad-disk").unwrap_or_else(|error| panic!("{error}"));
    let (mut merges, mut merged, mut distinct) = (0, 0, 0);
    for seed in 1..=3 {
        let workload = random_level0(seed, 150);
        let stats = common::run_open(&workload.ops, |_| {}).stats();
        merges += stats.level0_merges;
        merged += stats.level0_chunks_merged;
        distinct += common::enumerate_clean(&workload, seed);
    }
    // Level 0 waited: its merges took more chunks than the trigger of four on average.
    assert!(merges > 0, "no level-0 merge ran");
    assert!(merged > 4 * merges, "{merged} level-0 chunks in {merges} merges: level 0 never waited");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}
