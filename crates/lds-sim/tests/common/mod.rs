//! What the crash tests of the engine techniques share: a store run through a workload
//! without crashes (for its counters), and a workload's crash enumeration that must pass.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use lds_engine::Db;
use lds_sim::enumerate::{enumerate, Bounds};
use lds_sim::sim_device::SimDevice;
use lds_sim::workload::{apply_op, formatted_image, options, run, Op, Workload};

/// A store on a fresh simulated volume after `ops` (reopens skipped), for its counters and
/// chunks; `after_op` sees it after each operation.
pub fn run_open(ops: &[Op], mut after_op: impl FnMut(&Db)) -> Db {
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let (db, _) = Db::open_device(Arc::new(SimDevice::new(image)), Path::new("technique"), options(true))
        .unwrap_or_else(|error| panic!("open: {error}"));
    for op in ops {
        apply_op(&db, op).unwrap_or_else(|error| panic!("{op:?}: {error}"));
        after_op(&db);
    }
    db
}

/// Enumerates every crash state of `workload` (up to 4 unflushed writes exhaustively, 4
/// samples past that, torn writes) against I1, I2, I3 and I5, every batch written to the
/// device as it comes (no log buffer); panics naming each failure. Returns the distinct crash
/// images checked.
pub fn enumerate_clean(workload: &Workload, seed: u64) -> u64 {
    enumerate_clean_with(workload, seed, true)
}

/// `enumerate_clean`, with the log buffer (`unbuffered` false: unsynced batches gather in
/// memory and reach the device in groups) or without.
pub fn enumerate_clean_with(workload: &Workload, seed: u64, unbuffered: bool) -> u64 {
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let recorded = run(workload, image, unbuffered).unwrap_or_else(|error| panic!("{}: {error}", workload.name));
    let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed };
    let mut failures = Vec::new();
    let counts = enumerate(&recorded, &bounds, unbuffered, &mut |failure| {
        failures.push(format!("point {}: {} {}", failure.crash_point, failure.oracle, failure.message));
    });
    assert!(failures.is_empty(), "{}: {failures:#?}", workload.name);
    counts.distinct_images
}
