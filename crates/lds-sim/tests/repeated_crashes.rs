//! Guards docs/reliability.md I4 (and F8's crash after recovery): a crash, recovery, more
//! operations, a second crash. Every second crash image recovers to a prefix of the combined
//! history (I1, I2), fsck is clean (I3), recovery writes nothing and is idempotent (I5), and
//! the recovered sequence number never goes below the first recovery's or the last synced
//! write's (I4).

use lds_sim::repeat::{enumerate_repeated, second_workload, RepeatBounds, RepeatCounts};
use lds_sim::workload::{formatted_image, named, random, run, Workload};

fn repeated(workload: &Workload, seed: u64, unbuffered: bool) -> RepeatCounts {
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let first = run(workload, image, unbuffered).unwrap_or_else(|error| panic!("{}: {error}", workload.name));
    let mut failures = Vec::new();
    let bounds = RepeatBounds::default();
    let counts = enumerate_repeated(&first, &second_workload(seed), &bounds, unbuffered, &mut |failure| {
        if failures.len() < 3 {
            failures
                .push(format!("{} ({}): {} {}", failure.crash_point, failure.state, failure.oracle, failure.message));
        }
    });
    eprintln!("{} then second-{seed} (unbuffered {unbuffered}): {counts:?}", workload.name);
    assert!(failures.is_empty(), "{}: {} failures, first: {failures:#?}", workload.name, counts.failures);
    counts
}

#[test]
fn a_crash_after_recovery_never_goes_back() {
    let started = std::time::Instant::now();
    let mut total = RepeatCounts::default();
    let cases = [(named("wrap"), 1, true), (named("compaction"), 2, false), (Some(random(5, 80)), 3, true)];
    for (workload, seed, unbuffered) in cases {
        let workload = workload.unwrap_or_else(|| panic!("workload"));
        let counts = repeated(&workload, seed, unbuffered);
        assert!(counts.first_images >= 10, "{}: {counts:?}", workload.name);
        total.first_images += counts.first_images;
        total.second_images += counts.second_images;
    }
    eprintln!("{total:?} in {:.1} s", started.elapsed().as_secs_f64());
    assert!(total.second_images > 500, "{total:?}");
}

/// Crashes inside journaled compactions, then a second run whose first write resumes the
/// unfinished compaction, crashed again anywhere in the resume (SPEC.md §12, docs/reliability.md
/// F8): every second image recovers, is fsck-clean and never goes back.
#[test]
fn a_crash_while_resuming_a_journaled_compaction_never_goes_back() {
    let workload = named("journal").unwrap_or_else(|| panic!("journal"));
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let first = run(&workload, image, true).unwrap_or_else(|error| panic!("{error}"));
    assert!(lds_sim::workload::journal_records(&first) >= 4, "the journal workload journals");
    let bounds = RepeatBounds { first_points: 24, ..RepeatBounds::default() };
    let mut failures = Vec::new();
    let counts = enumerate_repeated(&first, &second_workload(4), &bounds, true, &mut |failure| {
        if failures.len() < 3 {
            failures
                .push(format!("{} ({}): {} {}", failure.crash_point, failure.state, failure.oracle, failure.message));
        }
    });
    eprintln!("journal then second-4: {counts:?}");
    assert!(failures.is_empty(), "{} failures, first: {failures:#?}", counts.failures);
    assert!(counts.second_images > 500, "{counts:?}");
}

/// The crash image of `random(5, 80)` (unbuffered) at event 193 where the unflushed backup
/// log writes 102, 127 (the ring's end), 128 (the first batch after the wrap), 130 and 131
/// landed and 129 did not: a gap with later batches of the crashed session standing after it.
/// (Write 102 is a batch that commits, which leave the backup log to synced writes' flushes,
/// did not make durable.)
fn image_with_a_gap() -> Vec<u8> {
    use lds_sim::sim_device::{apply, Event};
    let first = run(&random(5, 80), formatted_image().unwrap_or_else(|error| panic!("{error}")), true)
        .unwrap_or_else(|error| panic!("{error}"));
    let history = &first.history;
    let mut durable = history.initial.as_ref().clone();
    let mut pending = Vec::new();
    for event in &history.events[..193] {
        match event {
            Event::Write(index) => pending.push(*index),
            Event::Flush(made) => {
                for &index in pending.iter().filter(|index| made.contains(index)) {
                    apply(&mut durable, &history.writes[index], first.sector_size, None);
                }
                pending.retain(|index| !made.contains(index));
            }
        }
    }
    assert_eq!(pending, [102, 127, 128, 129, 130, 131], "the workload changed: pick the image again");
    for index in [102, 127, 128, 130, 131] {
        apply(&mut durable, &history.writes[index], first.sector_size, None);
    }
    durable
}

/// Found by this enumeration: after a crash cut the backup log at a gap, the next session
/// appended at the head with the lsns the lost batches had, and an append as long as the lost
/// one filled the gap exactly, so the crashed session's later batches continued the chain and
/// came back after the new write. Now the SN is raised first (SPEC.md §9.5) and they do not.
#[test]
fn a_batch_a_crash_dropped_never_comes_back_after_the_gap_is_refilled() {
    use std::path::Path;
    use std::sync::Arc;

    use lds_check::{check, CheckOptions, Severity};
    use lds_engine::Db;
    use lds_sim::sim_device::SimDevice;
    use lds_sim::workload::{apply_op, apply_to_model, options, Model};

    let open = |device: &SimDevice| {
        Db::open_device(Arc::new(device.clone()), Path::new("gap"), options(true))
            .map(|(db, _)| db)
            .unwrap_or_else(|error| panic!("{error}"))
    };
    let read = |db: &Db| -> Model { db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}")) };
    let device = SimDevice::new(image_with_a_gap());
    let db = open(&device);
    let mut model = read(&db);
    let recovered_sequence = db.last_sequence();
    for op in second_workload(3).ops.iter().take(4) {
        apply_op(&db, op).unwrap_or_else(|error| panic!("{error}"));
        apply_to_model(&mut model, op);
        // Every write lands (nothing is lost): a crash now must give exactly the model.
        let again = SimDevice::new(device.current());
        let report = check(&again, CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
            .unwrap_or_else(|error| panic!("{error}"));
        let errors: Vec<_> =
            report.problems.iter().filter(|problem| problem.code.severity() != Severity::Info).collect();
        assert!(errors.is_empty(), "{}: {errors:?}", op.describe());
        let reopened = open(&again);
        assert_eq!(read(&reopened), model, "after {}: a dropped batch came back", op.describe());
        assert!(reopened.last_sequence() >= recovered_sequence, "the sequence number went back");
    }
}
