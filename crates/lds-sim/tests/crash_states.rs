//! Guards crash consistency (docs/reliability.md L2, oracles I1, I2, I3, I5): bounded
//! enumerations of the crash states of named and random workloads, each recovered with the
//! real engine, with zero failures.

use lds_sim::enumerate::{enumerate, Bounds, Counts};
use lds_sim::workload::{formatted_image, journal_records, named, random, random_journal, random_wrap, run, Workload};

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

/// Workloads that wrap the backup log about five times each, with many unflushed writes at
/// every wrap, buffered and unbuffered.
#[test]
fn wrap_heavy_random_workloads() {
    use lds_format::geometry::{plan_layout, LogKind};
    use lds_sim::workload::layout;

    let geometry = plan_layout(&layout(), [0; 16]).unwrap_or_else(|error| panic!("{error}"));
    let (ofs_backup_log, len_backup_log) = geometry.log_area(LogKind::Backup, 0);
    let wor = geometry.sector();
    for seed in 1..=4u64 {
        for unbuffered in [true, false] {
            let workload = random_wrap(seed, 200);
            let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
            let recorded = run(&workload, image, unbuffered).unwrap_or_else(|error| panic!("{error}"));
            // Each lap starts with a write at the area's start (the WOL), after one into its
            // last sectors (the WOR).
            let laps = recorded.history.writes.iter().filter(|write| write.offset == ofs_backup_log).count();
            let near_end = recorded
                .history
                .writes
                .iter()
                .filter(|write| {
                    write.offset >= ofs_backup_log + len_backup_log - 4 * wor
                        && write.offset < ofs_backup_log + len_backup_log
                })
                .count();
            assert!(laps >= 3, "{} (unbuffered {unbuffered}) wrapped the backup log {laps} times", workload.name);
            assert!(
                near_end >= 3,
                "{} (unbuffered {unbuffered}): {near_end} writes near the area's end",
                workload.name
            );
            let counts = enumerate_workload(&workload, unbuffered, &Bounds { seed, ..Bounds::default() });
            assert!(counts.distinct_images > 100, "{counts:?}");
        }
    }
}

/// Journaled compactions (SPEC.md §12): the journal workload compacts a tree of about ten
/// slots whole, with a record after every output that cleans inputs early, and random
/// workloads with large values journal too. Every crash image recovers (reads redirected by the
/// last record), resumes the compaction to its end with the same contents, and is fsck-clean
/// before and after.
#[test]
fn journaled_compactions_every_crash_state_bounded() {
    let journal = named("journal").unwrap_or_else(|| panic!("journal"));
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let recorded = run(&journal, image, true).unwrap_or_else(|error| panic!("{error}"));
    assert!(journal_records(&recorded) >= 10, "{} journal records", journal_records(&recorded));
    let sparse = Bounds { exhaustive_max: 2, samples: 2, tears: false, seed: 1 };
    let counts = enumerate_workload(&journal, true, &sparse);
    assert!(counts.distinct_images > 1_000, "{counts:?}");
    for (seed, unbuffered) in [(1, true), (2, false)] {
        let workload = random_journal(seed, 200);
        let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
        let recorded = run(&workload, image, unbuffered).unwrap_or_else(|error| panic!("{error}"));
        assert!(journal_records(&recorded) >= 2, "{} journals too little", workload.name);
        enumerate_workload(&workload, unbuffered, &Bounds { seed, ..Bounds::default() });
    }
}

/// The reproducer of a crash across a backup log wrap (`lds crashtest --runs 1 --seed 9105
/// --ops 150 --unbuffered`): the WOL and the batch after it landed, the WOR did not, and the
/// bytes left where the chain ends held an earlier lap's header (its volume uuid and offset
/// right, its start overwritten by a later lap). fsck called it 303, damage, and the engine
/// refused to open; it is a crash state (fsck 307), and the volume opens with every synced
/// write (SPEC.md §9.6).
#[test]
fn a_crash_across_a_backup_log_wrap_opens_seed_9105() {
    let counts = enumerate_workload(&random(9105, 150), true, &Bounds { seed: 9105, ..Bounds::default() });
    assert!(counts.distinct_images > 2_000, "{counts:?}");
}

/// Found by tearing an unflushed write while later unflushed writes land (SPEC.md §2: they
/// reach the media in any order): fsck called the torn backup log batch a broken chain (303,
/// an error) though a crash leaves exactly this. It is a damaged head (306, info) followed by
/// later objects, and recovery gives a prefix.
#[test]
fn a_torn_backup_log_write_with_later_writes_landed_is_a_crash_state_not_fsck_303() {
    use lds_check::{check, CheckOptions, Severity};
    use lds_sim::enumerate::check_crash_image;
    use lds_sim::sim_device::{apply, sectors_touched, Event};
    use lds_volume::MemoryImage;

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
                let report =
                    check(&MemoryImage(&image), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
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
    // 22 cases while synced appends wrote their bytes alone; 10 since they write whole
    // sectors (the head sector again, with the bytes before them): a later append that lands
    // rewrites the sector an earlier torn one ended in, which is then no longer torn.
    assert!(found > 5, "too few torn batches with later ones landed: {found}");
}
