//! Guards crash consistency (RELIABILITY.md L2, oracles I1, I2, I3, I5): bounded
//! enumerations of the crash states of named and random workloads, each recovered with the
//! real engine, with zero failures.

use lds_sim::enumerate::{enumerate, Bounds, Counts};
use lds_sim::workload::{formatted_image, named, random, run, Workload};

fn enumerate_workload(workload: &Workload, unbuffered: bool, bounds: &Bounds) -> Counts {
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let run = run(workload, image, unbuffered).unwrap_or_else(|error| panic!("{}: {error}", workload.name));
    let mut failures = Vec::new();
    let counts = enumerate(&run, bounds, unbuffered, &mut |failure| {
        if failures.len() < 3 {
            failures.push(format!(
                "point {} ({}): {} {}",
                failure.crash_point, failure.state, failure.oracle, failure.message
            ));
        }
    });
    eprintln!("{} (unbuffered {unbuffered}): {counts:?}", workload.name);
    assert!(failures.is_empty(), "{}: {} failures, first: {failures:#?}", workload.name, counts.failures);
    counts
}

#[test]
fn basic_workload_every_crash_state() {
    let workload = named("basic").unwrap_or_else(|| panic!("basic"));
    let counts = enumerate_workload(&workload, true, &Bounds::default());
    assert!(counts.distinct_images > 10, "{counts:?}");
}

#[test]
fn wrap_and_compaction_workloads() {
    for name in ["wrap", "compaction"] {
        let workload = named(name).unwrap_or_else(|| panic!("{name}"));
        for unbuffered in [true, false] {
            enumerate_workload(&workload, unbuffered, &Bounds::default());
        }
    }
}

#[test]
fn random_workloads() {
    for seed in 1..=4u64 {
        enumerate_workload(&random(seed, 150), seed % 2 == 0, &Bounds { seed, ..Bounds::default() });
    }
}
