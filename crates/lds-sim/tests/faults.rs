//! Guards docs/reliability.md F7 (and F5's read errors) with I7: an EIO on one write, one flush or
//! one read, an ENOSPC on one write, a short write, or a range of unreadable sectors, injected
//! at many points of a workload. Reads after every operation give the model's state or an
//! explicit error, never anything else; a failed write or flush makes the failing operation
//! report an error and every later write be refused (the store never retries a failed flush
//! and carries on); and the volume, reopened from what was durable, recovers to a prefix of
//! the operations between the last synced one and the failed one (I1, I2). Lost and
//! misdirected writes (F4, F6), which nothing can recover from, still never show a state the
//! store did not have.

use std::path::Path;
use std::sync::Arc;

use lds_engine::{Db, Error, WriteOptions};
use lds_format::geometry::{plan_layout, LogKind};
use lds_sim::sim_device::{Fault, SimDevice};
use lds_sim::workload::{apply_op, apply_to_model, formatted_image, layout, named, options, Model, Op};
use lds_volume::ReadAt;

const SECTOR_SIZE: u64 = 512;

/// What a fault promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A write or flush fails: the store poisons.
    WriteOrFlush,
    /// Reads fail: the operation that read reports it; later writes may go on.
    Read,
}

/// How one injected fault went.
#[derive(Debug, Default)]
struct Outcome {
    /// An operation (or the open) reported an error.
    failed: bool,
    /// Reads (after an operation, or the final ones) reported an error.
    read_errors: usize,
}

fn open(device: &SimDevice) -> Result<Db, Error> {
    Db::open_device(Arc::new(device.clone()), Path::new("faulty"), options(true)).map(|(db, _)| db)
}

/// Reads everything: the model's state, or an explicit error. Returns true on an error.
fn read_back(db: &Db, allowed: &[&Model], context: &str) -> bool {
    match db.iter().map(Iterator::collect::<Result<Model, _>>) {
        Ok(Ok(state)) => {
            assert!(allowed.contains(&&state), "{context}: reads show a wrong state ({} keys)", state.len());
            false
        }
        Ok(Err(error)) | Err(error) => {
            assert!(!error.to_string().is_empty());
            true
        }
    }
}

fn check_fault(fault: Fault, class: Class, ops: &[Op]) -> Outcome {
    let mut outcome = Outcome::default();
    let device = SimDevice::new(formatted_image().unwrap_or_else(|error| panic!("{error}")));
    device.inject(fault);
    let context = format!("{fault:?}");
    let mut db = match open(&device) {
        Ok(db) => db,
        Err(error) => {
            // Recovery writes nothing, so only a read can fail it; it says so.
            assert_eq!(class, Class::Read, "{context}: open failed: {error}");
            assert!(matches!(error, Error::Device(_)), "{context}: open failed without naming the device: {error}");
            outcome.failed = true;
            return outcome;
        }
    };
    let mut model = Model::new();
    let mut models = vec![model.clone()];
    let mut synced = 0;
    let mut failed_op = None;
    for (index, op) in ops.iter().enumerate() {
        let result = match op {
            Op::Reopen => {
                let closed = db.close();
                match closed.and_then(|()| open(&device)) {
                    Ok(reopened) => {
                        db = reopened;
                        Ok(())
                    }
                    Err(error) => {
                        // A close drains buffered appends; a read fails a reopen.
                        assert!(
                            class == Class::Read || !matches!(error, Error::Device(_)),
                            "{context}: reopen: {error}"
                        );
                        outcome.failed = true;
                        outcome.read_errors += 1;
                        return finish(&device, &models, synced, outcome, &context, None);
                    }
                }
            }
            _ => apply_op(&db, op),
        };
        if let Err(error) = result {
            outcome.failed = true;
            failed_op = Some(index);
            if class == Class::WriteOrFlush {
                assert!(
                    matches!(error, Error::Poisoned { .. } | Error::Device(_)),
                    "{context}: operation {index} failed with an unexpected error: {error}"
                );
                let message = error.to_string();
                assert!(message.contains("simulated device"), "{context}: the device is not named: {message}");
                assert!(message.matches("writes refused").count() <= 1, "{context}: a nested message: {message}");
            }
            break;
        }
        apply_to_model(&mut model, op);
        models.push(model.clone());
        if op.is_sync_point() {
            synced = index + 1;
        }
        if read_back(&db, &[&model], &format!("{context}, after operation {index}")) {
            outcome.read_errors += 1;
        }
    }
    if let Some(failed) = failed_op {
        let mut after = model.clone();
        apply_to_model(&mut after, &ops[failed]);
        if class == Class::WriteOrFlush {
            // Every later write is refused: no retry after a failed write or flush.
            let refused = db.put(b"after-the-fault", b"x", WriteOptions { sync: true });
            assert!(
                matches!(refused, Err(Error::Poisoned { .. })),
                "{context}: a write after the failure was not refused: {refused:?}"
            );
        }
        // Reads give the state before the failed operation or after it, or an error.
        if read_back(&db, &[&model, &after], &format!("{context}, after the failed operation {failed}")) {
            outcome.read_errors += 1;
        }
        drop(db);
        return finish(&device, &models, synced, outcome, &context, Some(after));
    }
    drop(db);
    finish(&device, &models, synced, outcome, &context, None)
}

/// Recovery from what was durable, on a device without faults: a prefix between the last
/// synced operation and the last issued one.
fn finish(
    device: &SimDevice,
    models: &[Model],
    synced: usize,
    outcome: Outcome,
    context: &str,
    after: Option<Model>,
) -> Outcome {
    let recovered = SimDevice::new(device.durable(SECTOR_SIZE));
    let db = open(&recovered).unwrap_or_else(|error| panic!("{context}: recovery failed: {error}"));
    let state: Model = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{context}: {error}"));
    let fits = models[synced..].contains(&state) || after.as_ref() == Some(&state);
    assert!(fits, "{context}: the recovered state is not a prefix from the last synced operation {synced} on");
    assert!(recovered.len() > 0);
    outcome
}

fn workload() -> Vec<Op> {
    named("compaction").unwrap_or_else(|| panic!("workload")).ops
}

#[test]
fn an_eio_on_any_write_or_flush_poisons_and_recovers() {
    let ops = workload();
    let mut injected = 0;
    for index in (0..2000).step_by(13) {
        injected += usize::from(check_fault(Fault::Write(index), Class::WriteOrFlush, &ops).failed);
    }
    for index in (0..600).step_by(7) {
        injected += usize::from(check_fault(Fault::Flush(index), Class::WriteOrFlush, &ops).failed);
    }
    eprintln!("{injected} write and flush EIOs injected");
    assert!(injected > 50, "too few faults landed inside the workload: {injected}");
}

#[test]
fn enospc_and_short_writes_poison_and_recover() {
    let ops = workload();
    let mut injected = 0;
    for index in (0..2000).step_by(29) {
        injected += usize::from(check_fault(Fault::NoSpace(index), Class::WriteOrFlush, &ops).failed);
        for sectors in [0, 1, 3] {
            let fault = Fault::ShortWrite { write: index + sectors as usize, sectors };
            injected += usize::from(check_fault(fault, Class::WriteOrFlush, &ops).failed);
        }
    }
    eprintln!("{injected} ENOSPC and short writes injected");
    assert!(injected > 50, "too few faults landed inside the workload: {injected}");
}

#[test]
fn an_enospc_names_the_device_the_offset_and_the_cause() {
    let ops = workload();
    let device = SimDevice::new(formatted_image().unwrap_or_else(|error| panic!("{error}")));
    device.inject(Fault::NoSpace(0));
    let db = open(&device).unwrap_or_else(|error| panic!("{error}"));
    let first_write = ops.iter().position(|op| matches!(op, Op::Put { .. })).unwrap_or_else(|| panic!("no put"));
    let error = apply_op(&db, &Op::Put { key: b"k".to_vec(), value: b"v".to_vec(), sync: true })
        .err()
        .unwrap_or_else(|| panic!("the put succeeded, operation {first_write}"));
    let message = error.to_string();
    assert!(matches!(error, Error::Poisoned { .. }), "{message}");
    assert!(message.contains("simulated device"), "the device is not named: {message}");
    assert!(message.contains("at offset "), "the offset is not named: {message}");
    assert!(message.contains("No space left on device"), "the cause is not named: {message}");
    assert!(!message.contains("failed flush"), "a failed write is not a failed flush: {message}");
}

#[test]
fn read_errors_give_errors_never_wrong_data() {
    let ops = workload();
    let mut failed = 0;
    let mut read_errors = 0;
    let mut count = |outcome: Outcome| {
        failed += usize::from(outcome.failed);
        read_errors += outcome.read_errors;
    };
    for index in (0..3000).step_by(37) {
        count(check_fault(Fault::Read(index), Class::Read, &ops));
    }
    // Unreadable sectors: each label, the start of each log, the first and the last sector
    // (the footer) of the first slots.
    let geometry = plan_layout(&layout(), [0; 16]).unwrap_or_else(|error| panic!("{error}"));
    let mut sectors = vec![0, geometry.ofs_backup_label()];
    for kind in [LogKind::Version, LogKind::Backup] {
        let (offset, len) = geometry.log_area(kind, 0);
        sectors.extend([offset, offset + len / 2]);
    }
    for slot in 0..4 {
        sectors.extend([geometry.slot_offset(slot), geometry.slot_offset(slot + 1) - SECTOR_SIZE]);
    }
    for offset in sectors {
        count(check_fault(Fault::ReadRange { offset, len: SECTOR_SIZE }, Class::Read, &ops));
    }
    eprintln!("read faults: {failed} failed an operation or the open, {read_errors} failed a read-back");
    assert!(failed > 10, "too few read faults failed anything: {failed}");
    assert!(read_errors > 10, "too few read faults failed a read-back: {read_errors}");
}

/// F4 and F6 during a workload: a lost write (acknowledged, flushed, never on the media) or a
/// misdirected one. Nothing can promise I1 then, but reads, during the workload and after
/// reopening, give a state the store had (the model after some operation) or an explicit
/// error: never a mix, never values that were not written.
fn check_lost_or_misdirected(fault: Fault, ops: &[Op]) -> (bool, bool) {
    let device = SimDevice::new(formatted_image().unwrap_or_else(|error| panic!("{error}")));
    device.inject(fault);
    let context = format!("{fault:?}");
    let db = open(&device).unwrap_or_else(|error| panic!("{context}: {error}"));
    let mut model = Model::new();
    let mut models = vec![model.clone()];
    let mut noticed = false;
    for (index, op) in ops.iter().enumerate() {
        if matches!(op, Op::Reopen) {
            continue;
        }
        if apply_op(&db, op).is_err() {
            noticed = true;
            break;
        }
        apply_to_model(&mut model, op);
        models.push(model.clone());
        noticed |= read_back(&db, &[&model], &format!("{context}, after operation {index}"));
    }
    drop(db);
    let recovered = SimDevice::new(device.durable(SECTOR_SIZE));
    let Ok(db) = open(&recovered) else { return (true, noticed) };
    let state = db.iter().map(Iterator::collect::<Result<Model, _>>);
    let landed = match state {
        Ok(Ok(state)) => {
            assert!(models.contains(&state), "{context}: the reopened store shows a state it never had");
            false
        }
        _ => true,
    };
    (landed, noticed)
}

#[test]
fn lost_and_misdirected_writes_never_show_a_state_the_store_did_not_have() {
    let ops = workload();
    let geometry = plan_layout(&layout(), [0; 16]).unwrap_or_else(|error| panic!("{error}"));
    // Every write into the slot area (chunk bodies and tails: a lost one leaves the slot's
    // previous chunk, whose footer is valid), and a sample of the others.
    let recorded = lds_sim::workload::run(
        &lds_sim::workload::Workload { name: "faults".into(), ops: ops.clone() },
        formatted_image().unwrap_or_else(|error| panic!("{error}")),
        true,
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let writes: Vec<usize> = recorded
        .history
        .writes
        .iter()
        .enumerate()
        .filter(|(index, write)| write.offset >= geometry.ofs_slot_area || index % 23 == 0)
        .map(|(index, _)| index)
        .collect();
    let (mut reopen_errors, mut noticed, mut cases) = (0, 0, 0);
    for &index in &writes {
        // A sector anywhere but the labels: a log, a live chunk, a free slot.
        let sectors = geometry.volume_len / SECTOR_SIZE - 2;
        let target = SECTOR_SIZE * (1 + (index as u64).wrapping_mul(2_654_435_761) % sectors);
        for fault in [Fault::LostWrite(index), Fault::MisdirectedWrite { write: index, target }] {
            let (error, seen) = check_lost_or_misdirected(fault, &ops);
            cases += 1;
            reopen_errors += usize::from(error);
            noticed += usize::from(seen);
        }
    }
    eprintln!(
        "{cases} lost or misdirected writes: {noticed} noticed during the workload, {reopen_errors} on reopening"
    );
    assert!(noticed > 10, "too few faults were noticed: {noticed}");
}
