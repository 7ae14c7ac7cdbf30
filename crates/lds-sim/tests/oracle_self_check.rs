//! Guards the oracles themselves (docs/reliability.md L6): a build that drops the flush between
//! chunk writes and their delta version, a build that skips the log payload checksum, and a
//! build that reuses the inputs a compaction journal record cleans before the record is
//! durable, must each make the crash-state enumeration report failures; and the reproducer
//! minimizer of `lds crashtest` must shrink such a failing workload to a few operations that
//! still fail the same oracle. Run with `--features fault-drop-chunk-flush`, `--features
//! fault-skip-payload-checksum` or `--features fault-clean-before-journal`; the normal build
//! compiles this file to nothing (the other crash tests assert zero failures).

#[cfg(any(feature = "fault-drop-chunk-flush", feature = "fault-skip-payload-checksum"))]
#[test]
fn the_enumerator_catches_the_broken_build() {
    use lds_sim::enumerate::{enumerate, Bounds};
    use lds_sim::workload::{formatted_image, named, random, run};

    let mut failures = 0;
    let mut oracles = std::collections::BTreeSet::new();
    let workloads = [named("wrap"), named("compaction"), Some(random(2, 150))];
    for workload in workloads.into_iter().flatten() {
        let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
        let Ok(recorded) = run(&workload, image, true) else {
            // A broken build may fail during the workload itself: that is caught too.
            failures += 1;
            continue;
        };
        let counts = enumerate(&recorded, &Bounds::default(), true, &mut |failure| {
            oracles.insert(failure.oracle);
        });
        failures += counts.failures;
    }
    eprintln!("the broken build failed {failures} crash images; oracles: {oracles:?}");
    assert!(failures > 0, "the enumerator did not catch the deliberately broken build");
}

#[cfg(any(feature = "fault-drop-chunk-flush", feature = "fault-skip-payload-checksum"))]
#[test]
fn the_minimizer_shrinks_a_failing_workload_to_a_few_operations() {
    use lds_sim::enumerate::{first_failure, Bounds};
    use lds_sim::minimize::minimize_failure;
    use lds_sim::workload::{formatted_image, named, run};

    let workload = named("wrap").unwrap_or_else(|| panic!("wrap"));
    let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed: 1 };
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let recorded = run(&workload, image, true).unwrap_or_else(|error| panic!("{error}"));
    let failure = first_failure(&recorded, &bounds, true, &|_| true)
        .unwrap_or_else(|| panic!("the broken build passes the wrap workload"));
    let budget = lds_sim::minimize::Budget::tries(200);
    let (shrunk, minimized) = minimize_failure(&workload, failure.oracle, &bounds, true, budget, &mut |_| {});
    eprintln!(
        "{} failed {}: {} operations minimized to {} in {} tries",
        workload.name,
        failure.oracle,
        workload.ops.len(),
        shrunk.workload.ops.len(),
        shrunk.tries
    );
    let minimized = minimized.unwrap_or_else(|| panic!("the minimized workload does not fail"));
    assert_eq!(minimized.oracle, failure.oracle, "the minimized workload fails another oracle");
    assert!(
        shrunk.workload.ops.len() * 10 <= workload.ops.len(),
        "{} operations minimized only to {}",
        workload.ops.len(),
        shrunk.workload.ops.len()
    );
}

#[cfg(feature = "fault-clean-before-journal")]
#[test]
fn the_enumerator_catches_inputs_reused_before_their_journal_record_is_durable() {
    use lds_sim::enumerate::{first_failure, Bounds};
    use lds_sim::workload::{formatted_image, named, run};

    let workload = named("journal").unwrap_or_else(|| panic!("journal"));
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let recorded = run(&workload, image, true).unwrap_or_else(|error| panic!("{error}"));
    let failure = first_failure(&recorded, &Bounds::default(), true, &|_| true)
        .unwrap_or_else(|| panic!("the enumerator did not catch inputs reused before their journal record"));
    eprintln!(
        "caught at crash point {} ({}): {} {}",
        failure.crash_point, failure.state, failure.oracle, failure.message
    );
}
