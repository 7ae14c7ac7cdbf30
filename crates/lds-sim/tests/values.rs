//! Crash consistency of key-value separation (SPEC.md §8.6, technique `kv-separation`): every
//! crash state of workloads that write value chunks at flush and before batches, span slots
//! and relocate values out of value chunks with much garbage, recovered and checked against
//! I1, I2, I3 and I5.

mod common;

use lds_sim::workload::{random_values, set_techniques, Op};

#[test]
fn crash_states_of_separated_values_and_their_collection() {
    set_techniques("kv-separation").unwrap_or_else(|error| panic!("{error}"));
    let (mut relocated, mut collections, mut distinct, mut direct) = (0, 0, 0, 0);
    for seed in 1..=3 {
        let workload = random_values(seed, 120);
        let stats = common::run_open(&workload.ops, |_| {}).stats();
        relocated += stats.values_relocated_bytes;
        collections += stats.value_collections;
        direct +=
            workload.ops.iter().filter(|op| matches!(op, Op::Put { value, .. } if value.len() > 16 << 10)).count();
        assert!(stats.value_chunks > 0, "{}: no value chunk: {stats:?}", workload.name);
        distinct += common::enumerate_clean(&workload, seed);
    }
    // Values past a quarter of a slot went around the backup log, merges relocated live
    // values, and collections rewrote chunks in place to free value chunks: the crash states
    // above include all three.
    assert!(direct > 0, "no value larger than a quarter of a slot");
    assert!(relocated > 0, "no value was relocated");
    assert!(collections > 0, "no collection (a rewrite in place to free value chunks) ran");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}
