//! Guards docs/reliability.md L4 and I7: one fault (a flipped bit, a zeroed sector, EIO, a stale
//! sector, a misdirected read) in every metadata sector and a sample of block sectors of an
//! engine-written volume. No case may read wrong data with fsck clean, the engine may never
//! serve wrong or rolled-back data when fsck sees the fault, and opening and reading never
//! write. Also the regressions the matrix found, each named after what it triggers.

use std::path::Path;
use std::sync::Arc;

use lds_check::{check, CheckOptions, Severity};
use lds_engine::{Db, Error};
use lds_sim::media::{build_volume, faulty_device, run_matrix, targets, MediaFault, Structure, Target, Volume};
use lds_sim::sim_device::SimDevice;
use lds_sim::workload::{options, Model};

fn volume() -> Volume {
    build_volume().unwrap_or_else(|error| panic!("cannot build the volume: {error}"))
}

fn sample(volume: &Volume) -> Vec<Target> {
    targets(volume, 4).unwrap_or_else(|error| panic!("{error}"))
}

fn open(device: &SimDevice) -> Result<Db, Error> {
    Db::open_device(Arc::new(device.clone()), Path::new("media"), options(true)).map(|(db, _)| db)
}

fn fsck_codes(device: &SimDevice) -> Vec<u16> {
    let report = check(device, CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
        .unwrap_or_else(|error| panic!("{error}"));
    report
        .problems
        .iter()
        .filter(|problem| problem.code.severity() != Severity::Info)
        .map(|problem| problem.code.number())
        .collect()
}

#[test]
fn no_single_media_fault_reads_wrong_data() {
    let started = std::time::Instant::now();
    let volume = volume();
    assert!(volume.levels.first().is_some_and(|&count| count > 0), "no level-0 chunk: {:?}", volume.levels);
    assert!(volume.levels.iter().skip(1).any(|&count| count > 0), "no chunk below level 0: {:?}", volume.levels);
    assert!(volume.wraps.0 > 0 && volume.wraps.1 > 0, "the logs did not wrap: {:?}", volume.wraps);
    let targets = sample(&volume);
    let matrix = run_matrix(&volume, &targets, 1);
    for ((structure, fault), cell) in &matrix.cells {
        eprintln!(
            "{:28} {:17} cases {:3} detected {:3} tolerated {:3} prefix {} rolled back {} wrong {} engine wrong {}",
            structure.name(),
            fault.name(),
            cell.cases,
            cell.detected,
            cell.tolerated,
            cell.prefix,
            cell.rolled_back,
            cell.wrong,
            cell.engine_wrong
        );
    }
    let total = matrix.total();
    eprintln!("{} sectors, {total:?} in {:.1} s", targets.len(), started.elapsed().as_secs_f64());
    assert!(total.cases > 250, "too few cases: {total:?}");
    assert_eq!(total.wrong, 0, "wrong data with fsck clean: {:#?}", matrix.failures);
    assert_eq!(total.engine_wrong, 0, "the engine served bad data fsck noticed: {:#?}", matrix.failures);
    assert_eq!(total.broken, 0, "a panic, or opening wrote: {:#?}", matrix.failures);
    for ((structure, fault), cell) in &matrix.cells {
        // Only the backup log's live objects may roll back (docs/media-matrix.md says why).
        if *structure != Structure::BackupLogLive {
            assert_eq!(
                cell.rolled_back,
                0,
                "{} {}: rolled back: {:#?}",
                structure.name(),
                fault.name(),
                matrix.failures
            );
        }
        // The engine notices every fault in a referenced chunk.
        if matches!(structure, Structure::ChunkFooter | Structure::ChunkTail | Structure::ChunkData) {
            assert_eq!(cell.detected, cell.cases, "{} {}: {cell:?}", structure.name(), fault.name());
        }
    }
    for structure in [Structure::ChunkFooter, Structure::ChunkTail, Structure::ChunkData, Structure::VersionLogLive] {
        assert!(matrix.sectors.get(&structure).is_some_and(|&count| count > 0), "no {} sector", structure.name());
    }
}

/// The first target of `structure` where `fault` applies and fsck reports `code`.
fn case_with_code(volume: &Volume, structure: Structure, fault: MediaFault, code: u16) -> SimDevice {
    let targets = sample(volume);
    (0..targets.len())
        .filter(|&index| targets[index].structure == structure)
        .filter_map(|index| faulty_device(volume, &targets, index, fault, 0))
        .find(|device| fsck_codes(device).contains(&code))
        .unwrap_or_else(|| panic!("no {} sector where {} gives fsck {code}", structure.name(), fault.name()))
}

#[test]
fn a_stale_chunk_footer_is_an_error_not_the_previous_chunks_data() {
    let volume = volume();
    let device = case_with_code(&volume, Structure::ChunkFooter, MediaFault::Stale, 402);
    let db = open(&device).unwrap_or_else(|error| panic!("{error}"));
    let last = &volume.models[volume.models.len() - 1];
    let mut errors = 0;
    for key in &volume.keys {
        match db.get(key) {
            Ok(value) => assert_eq!(value.as_ref(), last.get(key), "a wrong value"),
            Err(error) => {
                assert!(matches!(error, Error::Corrupt { .. }), "{error}");
                assert!(error.to_string().contains("another chunk"), "{error}");
                errors += 1;
            }
        }
    }
    assert!(errors > 0, "no read noticed the stale footer");
}

#[test]
fn a_stale_chunk_footer_stops_a_compaction_instead_of_copying_the_old_chunk() {
    let volume = volume();
    let device = case_with_code(&volume, Structure::ChunkFooter, MediaFault::Stale, 402);
    let db = open(&device).unwrap_or_else(|error| panic!("{error}"));
    let result = db.compact_range();
    assert!(result.is_err(), "a compaction read a stale footer and went on");
    // Nothing wrong reached the media: reads give the model or an error.
    let last: &Model = &volume.models[volume.models.len() - 1];
    if let Ok(Ok(state)) = db.iter().map(Iterator::collect::<Result<Model, _>>) {
        assert_eq!(&state, last, "reads after the failed compaction are wrong");
    }
}

#[test]
fn version_log_objects_after_a_damaged_sector_are_fsck_207_and_open_refuses() {
    let volume = volume();
    let device = case_with_code(&volume, Structure::VersionLogLive, MediaFault::Zero, 207);
    let error = open(&device).err().unwrap_or_else(|| panic!("the engine opened on an older version"));
    assert!(matches!(error, Error::Recovery { .. }), "{error}");
    assert!(error.to_string().contains("207"), "{error}");
}

#[test]
fn a_damaged_single_sector_backup_batch_is_fsck_303_and_open_refuses() {
    let volume = volume();
    let device = case_with_code(&volume, Structure::BackupLogLive, MediaFault::Flip, 303);
    let error = open(&device).err().unwrap_or_else(|| panic!("the engine opened and dropped later batches"));
    assert!(matches!(error, Error::Recovery { .. }), "{error}");
    assert!(error.to_string().contains("303"), "{error}");
}

#[test]
fn an_unreadable_chunk_sector_is_reported_and_repaired_around() {
    let volume = volume();
    let device = case_with_code(&volume, Structure::ChunkData, MediaFault::ReadError, 107);
    // fsck reads the sector as zeros: the unreadable sectors and the block they break.
    let codes = fsck_codes(&device);
    assert!(codes.contains(&107) && codes.contains(&405), "{codes:?}");
    // repair rewrites the chunk's readable blocks elsewhere; the sector stays unreadable but
    // nothing references it any more.
    let report = lds_repair::repair(&device, lds_repair::RepairOptions::new(lds_repair::Mode::Yes), &mut |_, _| {});
    let report = report.unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report.exit_code(), 1, "{:?}", report.fixes.iter().map(lds_repair::Fix::line).collect::<Vec<_>>());
    assert!(fsck_codes(&device).is_empty(), "{:?}", fsck_codes(&device));
}
