//! Guards RELIABILITY.md F7 with I7: an EIO on one write or one flush, injected at many points
//! of a workload. The failing operation reports an error; every later write is refused (the
//! store never retries a failed flush and carries on); reads never return wrong data; and
//! the volume, reopened from what was durable, recovers to a prefix of the operations.

use std::path::Path;
use std::sync::Arc;

use lds_engine::device::BlockDevice;
use lds_engine::{Db, Error, WriteOptions};
use lds_sim::device::{Fault, SimDevice};
use lds_sim::workload::{apply_op, apply_to_model, formatted_image, named, options, Model, Op};

/// Runs `ops` until one fails; returns the index of the failed operation.
fn drive(db: &Db, ops: &[Op], model: &mut Model, models: &mut Vec<Model>, synced: &mut usize) -> Option<usize> {
    for (index, op) in ops.iter().enumerate() {
        let result = apply_op(db, op);
        if result.is_err() {
            return Some(index);
        }
        apply_to_model(model, op);
        models.push(model.clone());
        if op.is_sync_point() {
            *synced = index + 1;
        }
    }
    None
}

fn check_fault(fault: Fault) -> bool {
    let workload = named("compaction").unwrap_or_else(|| panic!("workload"));
    let sector_size = 512;
    let device = SimDevice::new(formatted_image().unwrap_or_else(|error| panic!("{error}")));
    device.inject(fault);
    let (db, _) = Db::open_device(Arc::new(device.clone()), Path::new("faulty"), options(true))
        .unwrap_or_else(|error| panic!("{error}"));
    let mut model = Model::new();
    let mut models = vec![model.clone()];
    let mut synced = 0;
    let Some(failed) = drive(&db, &workload.ops, &mut model, &mut models, &mut synced) else {
        return false; // The fault lies beyond this workload's writes or flushes.
    };
    // Every later write is refused: no retry after a failed write or flush.
    let refused = db.put(b"after-the-fault", b"x", WriteOptions { sync: true });
    assert!(
        matches!(refused, Err(Error::Poisoned { .. })),
        "{fault:?}: a write after the failure was not refused: {refused:?}"
    );
    // Reads give the state before the failed operation or after it, or an error: never
    // something else.
    let mut after = model.clone();
    apply_to_model(&mut after, &workload.ops[failed]);
    if let Ok(Ok(state)) = db.iter().map(Iterator::collect::<Result<Model, _>>) {
        assert!(state == model || state == after, "{fault:?}: reads after the failure show a wrong state");
    }
    drop(db);
    // Recovery from what was durable: a prefix between the last synced operation and the
    // failed one.
    let durable = device.durable(sector_size);
    let recovered = SimDevice::new(durable);
    let (db, _) = Db::open_device(Arc::new(recovered.clone()), Path::new("recovered"), options(true))
        .unwrap_or_else(|error| panic!("{fault:?}: recovery failed: {error}"));
    let state: Model = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{fault:?}: {error}"));
    models.push(after);
    let fits = models[synced..].contains(&state);
    assert!(fits, "{fault:?}: the recovered state is not a prefix from the last synced operation {synced} to the failed one {failed}");
    assert!(recovered.len() > 0);
    true
}

#[test]
fn an_eio_on_any_write_or_flush_poisons_and_recovers() {
    let mut injected = 0;
    for index in (0..2000).step_by(13) {
        if check_fault(Fault::Write(index)) {
            injected += 1;
        }
    }
    for index in (0..600).step_by(7) {
        if check_fault(Fault::Flush(index)) {
            injected += 1;
        }
    }
    eprintln!("{injected} faults injected");
    assert!(injected > 50, "too few faults landed inside the workload: {injected}");
}
