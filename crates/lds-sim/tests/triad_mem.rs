//! Crash consistency of hot keys held in memory at flushes (TRIAD-MEM, technique
//! `triad-mem`): every crash state of random workloads whose freezes write hot entries again
//! to the backup log and leave them out of level 0, recovered and checked against I1, I2, I3
//! and I5: a crash between the held batch and the flush's delta version, or after it, loses
//! no acknowledged write.

mod common;

use lds_sim::workload::{random, random_wrap, set_techniques, Workload};

#[test]
fn crash_states_of_held_hot_keys() {
    set_techniques("triad-mem").unwrap_or_else(|error| panic!("{error}"));
    let (mut held, mut distinct) = (0, 0);
    let workloads: Vec<Workload> = (1..=3).map(|seed| random(seed, 150)).chain([random_wrap(4, 200)]).collect();
    for (seed, workload) in (1..).zip(&workloads) {
        held += common::run_open(&workload.ops, |_| {}).stats().hot_entries_held;
        distinct += common::enumerate_clean(workload, seed);
    }
    assert!(held > 0, "no hot entry was held: the crash states above do not cover the technique");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}
