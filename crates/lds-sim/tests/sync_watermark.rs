//! The sync watermark (SPEC.md §7.1): a zeroed sector that held synced backup log batches is
//! damage (fsck 303, an error, and the engine refuses to open) because later batches record
//! them as durable; the same sector holding batches that were never synced is what a crash
//! leaves (fsck info, the volume opens with an earlier state). A 1.0 volume has no watermark
//! and keeps the 1.0 behaviour.

use std::path::Path;
use std::sync::Arc;

use lds_check::{check, CheckOptions, Severity};
use lds_engine::{Db, Options, WriteOptions};
use lds_format::algorithms::image::ImageBuilder;
use lds_format::algorithms::instance::recover_instance;
use lds_format::geometry::LogKind;
use lds_format::label::Label;
use lds_sim::sim_device::SimDevice;
use lds_sim::workload::{formatted_geometry, formatted_image};
use lds_volume::MemoryImage;

const PUTS: u32 = 24;

/// Writes `PUTS` single-put batches, each synced when `sync`, and returns the image as the
/// device holds it (every write landed, synced or not) with the area offset and lsn of each
/// live backup log object.
fn written(image: Vec<u8>, sync: bool) -> (Vec<u8>, Vec<(u64, u64)>) {
    let device = SimDevice::new(image);
    // Every append is written out at once (none waits in the log buffer), flushed only when
    // synced.
    let options = Options { background: false, log_buffer_bytes: 1, ..Options::default() };
    let (db, _) = Db::open_device(Arc::new(device.clone()), Path::new("watermark"), options)
        .unwrap_or_else(|error| panic!("open: {error}"));
    for n in 0..PUTS {
        db.put(format!("key{n:03}").as_bytes(), format!("value-{n}").as_bytes(), WriteOptions { sync })
            .unwrap_or_else(|error| panic!("put: {error}"));
    }
    // No close: the batches stay in the backup log, not yet in chunks.
    let image = device.current();
    std::mem::forget(db);
    let geometry = formatted_geometry();
    let (vofs, vlen) = geometry.log_area(LogKind::Version, 0);
    let (bofs, blen) = geometry.log_area(LogKind::Backup, 0);
    let recovery = recover_instance(
        &geometry,
        0,
        &image[vofs as usize..(vofs + vlen) as usize],
        &image[bofs as usize..(bofs + blen) as usize],
    )
    .unwrap_or_else(|error| panic!("recover: {error}"));
    let objects = recovery
        .backup_state()
        .map_or_else(Vec::new, |state| state.objects.iter().map(|object| (object.offset, object.header.lsn)).collect());
    assert_eq!(objects.len(), PUTS as usize, "one object per put");
    (image, objects)
}

/// Zeroes the sector(s) holding the header of the object with lsn `lsn`.
fn zero_sector_of(mut image: Vec<u8>, objects: &[(u64, u64)], lsn: u64) -> Vec<u8> {
    let geometry = formatted_geometry();
    let sector = geometry.sector();
    let (bofs, _) = geometry.log_area(LogKind::Backup, 0);
    let (offset, _) = *objects.iter().find(|&&(_, l)| l == lsn).unwrap_or_else(|| panic!("no lsn {lsn}"));
    let start = (bofs + offset) / sector * sector;
    let end = (bofs + offset + 64).div_ceil(sector) * sector;
    assert!(objects.iter().any(|&(other, _)| bofs + other >= end), "nothing after the zeroed sectors");
    image[start as usize..end as usize].fill(0);
    image
}

fn fsck_codes(image: &[u8]) -> Vec<(u16, Severity)> {
    let report = check(&MemoryImage(image), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
        .unwrap_or_else(|error| panic!("fsck: {error}"));
    report.problems.iter().map(|problem| (problem.code.number(), problem.code.severity())).collect()
}

/// Key/value pairs in key order.
type State = Vec<(Vec<u8>, Vec<u8>)>;

fn opens(image: Vec<u8>) -> Result<State, String> {
    let options = Options { background: false, ..Options::default() };
    let (db, _) = Db::open_device_read_only(Arc::new(SimDevice::new(image)), Path::new("watermark"), options)
        .map_err(|error| error.to_string())?;
    db.iter().and_then(Iterator::collect).map_err(|error| error.to_string())
}

#[test]
fn synced_batches_lost_to_damage_are_an_error() {
    let (image, objects) = written(formatted_image().unwrap_or_else(|error| panic!("{error}")), true);
    let damaged = zero_sector_of(image, &objects, objects[2].1);
    let codes = fsck_codes(&damaged);
    assert!(
        codes.iter().any(|&(code, severity)| code == 303 && severity == Severity::Error),
        "fsck does not report the synced batches lost: {codes:?}"
    );
    let error = opens(damaged).expect_err("the engine serves a rolled-back state");
    assert!(error.contains("recording lsn"), "the error does not name the watermark: {error}");
}

#[test]
fn unsynced_batches_lost_are_a_crash_state() {
    let (image, objects) = written(formatted_image().unwrap_or_else(|error| panic!("{error}")), false);
    let damaged = zero_sector_of(image, &objects, objects[2].1);
    let codes = fsck_codes(&damaged);
    assert!(
        codes.iter().all(|&(_, severity)| severity == Severity::Info),
        "a crash state is reported as damage: {codes:?}"
    );
    let state = opens(damaged).unwrap_or_else(|error| panic!("a crash state does not open: {error}"));
    assert!(state.len() < PUTS as usize, "nothing was lost");
}

#[test]
fn a_1_0_volume_has_no_watermark() {
    let image = ImageBuilder::format(Label::new(formatted_geometry(), "one-oh")).bytes;
    let (image, objects) = written(image, true);
    let damaged = zero_sector_of(image, &objects, objects[2].1);
    let codes = fsck_codes(&damaged);
    assert!(codes.iter().all(|&(code, _)| code != 303), "a 1.0 volume reports 303: {codes:?}");
    opens(damaged).unwrap_or_else(|error| panic!("{error}"));
}
