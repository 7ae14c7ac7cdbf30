//! Crash consistency of log chunks (TRIAD-LOG, technique `triad-log`, SPEC.md §8.9): every
//! crash state of workloads whose flushes write level-0 chunks of references into the backup
//! log, whose retained region calls for early level-0 merges (and crosses the ring's end),
//! whose writers wait for those merges, and whose ring wraps over the regions the merges
//! release, recovered and checked against I1, I2, I3 and I5: no crash loses an acknowledged
//! write or leaves a reference that does not resolve (a read through it fails I1/I2, and the
//! checker's log reference checks fail I3).

mod common;

use std::path::Path;
use std::sync::Arc;

use lds_engine::{Db, Stats};
use lds_format::geometry::LogKind;
use lds_format::log::LogPosition;
use lds_sim::sim_device::{Event, SimDevice};
use lds_sim::workload::{
    apply_op, formatted_geometry, formatted_image, options, random, random_journal, random_log, random_wrap,
    set_techniques, Op, Workload,
};

/// What a workload's run without crashes showed of the technique.
#[derive(Debug, Default)]
struct Coverage {
    log_chunk_flushes: u64,
    pressure_merges: u64,
    log_waits: u64,
    /// Operations after which the retained region ran across the end of the ring.
    retained_across_wrap: usize,
    /// Backup log writes over a region that log chunks retained and a merge released since.
    writes_over_released: usize,
}

impl Coverage {
    fn add(&mut self, stats: &Stats) {
        self.log_chunk_flushes += stats.log_chunk_flushes;
        self.pressure_merges += stats.log_pressure_merges;
        self.log_waits += stats.log_waits;
    }
}

/// The oldest log start of the store's log chunks (its retention start, SPEC.md §8.9).
fn oldest_log_start(db: &Db) -> Option<LogPosition> {
    db.chunks().iter().filter_map(|chunk| chunk.log_start).min()
}

/// Runs `workload` on a fresh volume (reopening where it says so) and measures what it showed
/// of the technique: the engine's counters, where the retained region lay after each
/// operation, and which backup log writes landed on regions released before them.
fn coverage(workload: &Workload) -> Coverage {
    let device = SimDevice::new(formatted_image().unwrap_or_else(|error| panic!("{error}")));
    let open = || {
        Db::open_device(Arc::new(device.clone()), Path::new("triad-log"), options(true))
            .map(|(db, _)| db)
            .unwrap_or_else(|error| panic!("{}: open: {error}", workload.name))
    };
    let (ofs_area, len_area) = formatted_geometry().log_area(LogKind::Backup, 0);
    let mut found = Coverage::default();
    // Regions of the ring (area offset, length) released by a merge, each with the device
    // event count at its release.
    let mut released: Vec<(usize, u64, u64)> = Vec::new();
    let mut db = open();
    let mut retained: Option<(LogPosition, u64)> = None;
    for (index, op) in workload.ops.iter().enumerate() {
        if *op == Op::Reopen {
            found.add(&db.stats());
            db.close().unwrap_or_else(|error| panic!("{}: close: {error}", workload.name));
            db = open();
        } else {
            apply_op(&db, op).unwrap_or_else(|error| panic!("{}: operation {index}: {error}", workload.name));
        }
        let now = oldest_log_start(&db).map(|start| (start, db.stats().log_retained_bytes));
        if let Some((start, bytes)) = now {
            found.retained_across_wrap += usize::from(start.offset + bytes > len_area);
        }
        // The retention start moved on: the region from the old one to the new one (or to
        // the old backup start, when no log chunk is left) is free for the writer again.
        if let Some((previous, previous_bytes)) = retained {
            let released_bytes = match now {
                Some((start, _)) if start.lsn > previous.lsn => (start.offset + len_area - previous.offset) % len_area,
                Some(_) => 0,
                None => previous_bytes,
            };
            if released_bytes > 0 {
                released.push((device.event_count(), previous.offset, released_bytes));
            }
        }
        retained = now;
    }
    found.add(&db.stats());
    db.close().unwrap_or_else(|error| panic!("{}: close: {error}", workload.name));
    let history = device.history();
    for (event_index, event) in history.events.iter().enumerate() {
        let Event::Write(write_index) = event else { continue };
        let write = &history.writes[*write_index];
        let Some(start) = write.offset.checked_sub(ofs_area).filter(|start| *start < len_area) else { continue };
        let end = start + write.bytes.len() as u64;
        let over = released.iter().any(|&(at, region_start, region_len)| {
            let region_end = region_start + region_len;
            let overlaps = |from: u64, to: u64| start < to && from < end;
            at <= event_index
                && (overlaps(region_start, region_end.min(len_area))
                    || (region_end > len_area && overlaps(0, region_end - len_area)))
        });
        found.writes_over_released += usize::from(over);
    }
    found
}

#[test]
fn crash_states_of_log_chunks() {
    set_techniques("triad-log").unwrap_or_else(|error| panic!("{error}"));
    let workloads =
        [random(1, 120), random_wrap(2, 120), random_journal(3, 60), random_log(3, 150), random_log(4, 150)];
    let mut total = Coverage::default();
    let mut distinct = 0;
    for (seed, workload) in (1..).zip(&workloads) {
        let found = coverage(workload);
        eprintln!("{}: {found:?}", workload.name);
        assert!(found.log_chunk_flushes > 0, "{}: no flush wrote a log chunk: {found:?}", workload.name);
        total.log_chunk_flushes += found.log_chunk_flushes;
        total.pressure_merges += found.pressure_merges;
        total.log_waits += found.log_waits;
        total.retained_across_wrap += found.retained_across_wrap;
        total.writes_over_released += found.writes_over_released;
        distinct += common::enumerate_clean(workload, seed);
        // With the log buffer: a freeze writes the gathered batches its log chunk names out
        // before the flush that makes the chunk durable (SPEC.md §8.9, "Writing").
        distinct += common::enumerate_clean_with(workload, seed, false);
    }
    eprintln!("total: {total:?}, {distinct} distinct crash images");
    assert!(total.pressure_merges > 0, "the retained region never called for a level-0 merge: {total:?}");
    assert!(total.log_waits > 0, "no writer waited for a merge to release the ring: {total:?}");
    assert!(total.retained_across_wrap > 0, "the retained region never crossed the ring's end: {total:?}");
    assert!(total.writes_over_released > 0, "the ring never wrapped over a released region: {total:?}");
    assert!(distinct > 1000, "{distinct} distinct crash images");
}

#[test]
fn the_volume_for_triad_log_has_a_larger_ring_and_every_feature_the_techniques_need() {
    let ring = |techniques: &str| {
        set_techniques(techniques).unwrap_or_else(|error| panic!("{error}"));
        formatted_geometry().len_backup_log
    };
    // Other techniques keep the volume their crash counts and fuzz corpus were made with.
    assert_eq!(ring(""), lds_sim::workload::BACKUP_LOG_LEN);
    assert_eq!(ring("triad-mem,triad-disk"), lds_sim::workload::BACKUP_LOG_LEN);
    assert_eq!(ring("triad-log"), lds_sim::workload::LOG_TABLES_BACKUP_LOG_LEN);
    set_techniques("triad-mem,triad-disk,triad-log").unwrap_or_else(|error| panic!("{error}"));
    let image = formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let labels = lds_volume::read_labels(&lds_volume::MemoryImage(&image)).unwrap_or_else(|error| panic!("{error}"));
    let (_, label) = labels.choose().unwrap_or_else(|error| panic!("{error:?}"));
    assert!(label.has_log_tables() && label.has_chunk_sketches(), "{label:?}");
    assert_eq!(label.geometry.len_backup_log, lds_sim::workload::LOG_TABLES_BACKUP_LOG_LEN);
    let checked = lds_sim::workload::check_techniques();
    assert!(checked.is_ok(), "{checked:?}");
    assert_eq!(options(true).write_buffer_size, lds_sim::workload::LOG_TABLES_WRITE_BUFFER);
    set_techniques("triad-log,size-tiered").unwrap_or_else(|error| panic!("{error}"));
    let refused = lds_sim::workload::check_techniques();
    assert!(refused.as_ref().is_err_and(|error| error.to_string().contains("triad-log")), "{refused:?}");
}
