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

/// Found by tearing an unflushed write while later unflushed writes land (SPEC.md §2: they
/// reach the media in any order): fsck called the torn backup log batch a broken chain (303,
/// an error) though a crash leaves exactly this. It is a damaged head (306, info) followed by
/// later objects, and recovery gives a prefix.
#[test]
fn a_torn_backup_log_write_with_later_writes_landed_is_a_crash_state_not_fsck_303() {
    use lds_engine::fsck::{check, CheckOptions, Severity};
    use lds_engine::inspect::MemoryImage;
    use lds_sim::device::{apply, sectors_touched, Event};
    use lds_sim::enumerate::check_crash_image;

    let workload = named("wrap").unwrap_or_else(|| panic!("wrap"));
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let recorded = run(&workload, image, true).unwrap_or_else(|error| panic!("{error}"));
    let history = &recorded.history;
    let sector_size = recorded.sector_size;
    let mut durable = history.initial.as_ref().clone();
    let mut pending: Vec<usize> = Vec::new();
    let mut found = 0;
    for point in 0..history.events.len() {
        for (position, &index) in pending.iter().enumerate().filter(|(position, _)| position + 1 < pending.len()) {
            for torn in 1..sectors_touched(&history.writes[index], sector_size) {
                let mut image = durable.clone();
                for &other in &pending[..position] {
                    apply(&mut image, &history.writes[other], sector_size, None);
                }
                apply(&mut image, &history.writes[index], sector_size, Some(torn));
                for &later in &pending[position + 1..] {
                    apply(&mut image, &history.writes[later], sector_size, None);
                }
                let report = check(&MemoryImage(&image), CheckOptions { deep: true }, &mut |_, _| {})
                    .unwrap_or_else(|error| panic!("{error}"));
                let torn_with_later = report
                    .problems
                    .iter()
                    .any(|problem| problem.code.number() == 306 && problem.message.contains("valid later objects"));
                if !torn_with_later {
                    continue;
                }
                found += 1;
                let errors: Vec<_> =
                    report.problems.iter().filter(|problem| problem.code.severity() != Severity::Info).collect();
                assert!(errors.is_empty(), "point {point}, write {index} torn after {torn}: {errors:?}");
                let checked = check_crash_image(&recorded, point, &image, true);
                assert!(checked.is_ok(), "point {point}, write {index} torn after {torn}: {checked:?}");
            }
        }
        match &history.events[point] {
            Event::Write(index) => pending.push(*index),
            Event::Flush(made) => {
                for &index in pending.iter().filter(|index| made.contains(index)) {
                    apply(&mut durable, &history.writes[index], sector_size, None);
                }
                pending.retain(|index| !made.contains(index));
            }
        }
    }
    assert!(found > 10, "too few torn batches with later ones landed: {found}");
}
