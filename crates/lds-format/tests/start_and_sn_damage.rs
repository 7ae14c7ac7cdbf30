//! Guards two rules of SPEC.md §9.6 that tell damage from "nothing to replay": a backup start
//! whose recorded lsn or offset names no object a writer left there (`E_BACKUP_START_MISMATCH`
//! with a smaller lsn at the start point), and a live backup log object whose `sn` is above
//! the version log's (`E_BLOG_SN_ABOVE`, a WOL above its WOR's among them); and that the
//! states a correct writer leaves (a stale object of an earlier lap at the start point, a WOL
//! raised to the version log's SN after a crash) still recover as before.

use lds_format::algorithms::image::ImageBuilder;
use lds_format::algorithms::instance::{recover_instance, BackupRecovery, InstanceRecovery};
use lds_format::algorithms::recovery::read_valid_object;
use lds_format::batch::BatchEntry;
use lds_format::codec::crc32c;
use lds_format::entry::EntryKind;
use lds_format::geometry::{plan_layout, LayoutRequest, LogKind};
use lds_format::label::Label;
use lds_format::log::{area_context, ObjectType};
use lds_format::version::payload::DeltaVersion;

fn label() -> Label {
    let request = LayoutRequest {
        volume_len: 4 << 20,
        sector_size: Some(512),
        len_version_log: Some(64 * 1024),
        len_backup_log: Some(8 * 1024),
        ..LayoutRequest::default()
    };
    Label::new(plan_layout(&request, [0xAB; 16]).expect("layout"), "")
}

fn put(key: &str) -> BatchEntry {
    BatchEntry { kind: EntryKind::Put, key: key.as_bytes().to_vec(), value: b"value".to_vec() }
}

fn recover(image: &ImageBuilder) -> InstanceRecovery {
    recover_instance(&image.label.geometry, 0, image.area(LogKind::Version, 0), image.area(LogKind::Backup, 0))
        .expect("the version log recovers")
}

/// A memtable flush: a delta recording the backup log's next position as its start.
fn flush(image: &mut ImageBuilder) -> (u64, u64) {
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let last_sequence = image.last_sequence(0);
    let delta = DeltaVersion { ofs_backup_start: ofs, lsn_backup_start: lsn, last_sequence, ..DeltaVersion::default() };
    image.append_delta(0, &delta).expect("append");
    (ofs, lsn)
}

/// Sets the `sn` of the backup log object at `offset` and recomputes its header checksum
/// (SPEC.md §5: crc32c of header bytes 8..64, at bytes 4..8).
fn set_backup_sn(image: &mut ImageBuilder, offset: u64, sn: u64) {
    let (ofs_area, _) = image.label.geometry.log_area(LogKind::Backup, 0);
    let at = (ofs_area + offset) as usize;
    image.bytes[at + 16..at + 24].copy_from_slice(&sn.to_le_bytes());
    let crc = crc32c(&image.bytes[at + 8..at + 64]);
    image.bytes[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn a_recorded_start_lsn_above_the_batch_written_there_is_damage() {
    for damaged in [1000, u64::MAX] {
        let mut image = ImageBuilder::format(label());
        image.append_batch(0, vec![put("flushed")]).expect("batch");
        let (ofs, lsn) = image.instances[0].backup_log.next_position();
        let last_sequence = image.last_sequence(0);
        // The delta's recorded lsn is damaged; the batch after it is written where it points.
        let recorded = if damaged == u64::MAX { damaged } else { lsn + damaged };
        let delta = DeltaVersion {
            ofs_backup_start: ofs,
            lsn_backup_start: recorded,
            last_sequence,
            ..DeltaVersion::default()
        };
        image.append_delta(0, &delta).expect("append");
        image.append_batch(0, vec![put("after")]).expect("batch");
        let recovery = recover(&image);
        assert!(
            matches!(
                recovery.backup,
                BackupRecovery::StartMismatch { offset, recorded_lsn, found_lsn }
                    if offset == ofs && recorded_lsn == recorded && found_lsn == lsn
            ),
            "recorded lsn {recorded}: {:?}",
            recovery.backup
        );
        assert_eq!(recovery.damage().map(|damage| damage.problem_number()), Some(304));
    }
}

#[test]
fn a_start_offset_before_the_object_with_the_recorded_lsn_is_damage() {
    let mut image = ImageBuilder::format(label());
    image.append_batch(0, vec![put("a")]).expect("batch");
    image.append_batch(0, vec![put("b")]).expect("batch");
    let (_, lsn) = image.instances[0].backup_log.next_position();
    let last_sequence = image.last_sequence(0);
    // The delta's offset is damaged to 0, where the first batch (all its sequences flushed)
    // stands; the batch with the recorded lsn is written further on.
    let delta = DeltaVersion { ofs_backup_start: 0, lsn_backup_start: lsn, last_sequence, ..DeltaVersion::default() };
    image.append_delta(0, &delta).expect("append");
    image.append_batch(0, vec![put("after")]).expect("batch");
    let recovery = recover(&image);
    assert!(
        matches!(recovery.backup, BackupRecovery::StartMismatch { offset: 0, recorded_lsn, found_lsn: 1 } if recorded_lsn == lsn),
        "{:?}",
        recovery.backup
    );
    assert_eq!(recovery.damage().map(|damage| damage.problem_number()), Some(304));
}

#[test]
fn a_stale_object_of_an_earlier_lap_at_the_start_point_is_nothing_to_replay() {
    let mut image = ImageBuilder::format(label());
    let context = area_context(&image.label.geometry, LogKind::Backup, 0);
    // Batches and flushes until the log has wrapped and the next position holds a valid
    // object of the previous lap.
    let mut round = 0;
    let (ofs, lsn) = loop {
        image.append_batch(0, vec![put(&format!("key{round}")), put("other")]).expect("batch");
        let (ofs, lsn) = flush(&mut image);
        let stale = read_valid_object(image.area(LogKind::Backup, 0), ofs, &context);
        if stale.is_ok_and(|object| object.header.lsn < lsn && object.object_type == ObjectType::WriteBatch) {
            break (ofs, lsn);
        }
        round += 1;
        assert!(round < 1000, "the backup log never left a stale batch at the start point");
    };
    let recovery = recover(&image);
    assert!(recovery.damage().is_none(), "{:?}", recovery.damage());
    let state = recovery.backup_state().expect("recovered");
    assert!(!state.start_found);
    assert!(state.batches.is_empty());
    assert_eq!((state.head.offset, state.head.next_lsn), (ofs, lsn));
    // And a batch written there afterwards is replayed.
    let first = image.append_batch(0, vec![put("later")]).expect("batch");
    let recovery = recover(&image);
    assert!(recovery.damage().is_none(), "{:?}", recovery.damage());
    let batches = &recovery.backup_state().expect("recovered").batches;
    assert_eq!(batches.iter().map(|batch| batch.first_sequence).collect::<Vec<_>>(), vec![first]);
}

/// Appends batches (with a flush before each, so that the log can wrap) until one wraps;
/// returns the first sequence of the batch after the WOL and the WOR's offset.
fn wrap_backup_log(image: &mut ImageBuilder, trim_before_wrap: bool) -> (u64, u64) {
    let mut round = 0;
    loop {
        let mut probe = image.instances[0].backup_log.clone();
        let pending = probe.append(ObjectType::WriteBatch, 1, &[0u8; 60]).expect("append");
        if pending.len() > 1 {
            let wor = pending[0].offset;
            flush(image);
            if trim_before_wrap {
                image.trim(0).expect("trim");
            }
            let first = image.append_batch(0, vec![put("after-the-wrap")]).expect("batch");
            image.append_batch(0, vec![put("and-one-more")]).expect("batch");
            return (first, wor);
        }
        image.append_batch(0, vec![put(&format!("filler{round}"))]).expect("batch");
        flush(image);
        round += 1;
        assert!(round < 1000, "the backup log never wrapped");
    }
}

#[test]
fn a_wol_with_an_sn_above_the_version_logs_is_damage_and_its_batches_are_replayed() {
    for above in [1, u64::MAX - 1] {
        let mut image = ImageBuilder::format(label());
        let (first, _) = wrap_backup_log(&mut image, false);
        let sn = recover(&image).version_log.sn;
        set_backup_sn(&mut image, 0, sn + above);
        let recovery = recover(&image);
        let damage = recovery.damage();
        assert_eq!(damage.as_ref().map(|damage| damage.problem_number()), Some(308), "{damage:?}");
        let state = recovery.backup_state().expect("recovered");
        let above_found = state.sn_above.expect("the WOL is named");
        assert_eq!(
            (above_found.offset, above_found.object_type, above_found.sn),
            (0, ObjectType::WrapLeft, sn + above)
        );
        // The batches after the wrap are followed: their sn is the WOR's.
        let replayed: Vec<u64> = state.batches.iter().map(|batch| batch.first_sequence).collect();
        assert_eq!(replayed, vec![first, first + 1]);
        assert!(state.head.sn <= sn);
    }
}

#[test]
fn a_wol_raised_to_the_version_logs_sn_after_a_crash_is_no_damage() {
    let mut image = ImageBuilder::format(label());
    // The writer raised the SN (a base version) before the wrap; the WOR is the crashed
    // session's, with the SN before (SPEC.md §9.5).
    let (first, wor) = wrap_backup_log(&mut image, true);
    let sn = recover(&image).version_log.sn;
    set_backup_sn(&mut image, wor, sn - 1);
    let recovery = recover(&image);
    assert!(recovery.damage().is_none(), "{:?}", recovery.damage());
    let state = recovery.backup_state().expect("recovered");
    assert!(state.sn_above.is_none());
    let replayed: Vec<u64> = state.batches.iter().map(|batch| batch.first_sequence).collect();
    assert_eq!(replayed, vec![first, first + 1]);
}

#[test]
fn a_batch_with_an_sn_above_the_version_logs_does_not_cut_the_chain() {
    let mut image = ImageBuilder::format(label());
    image.append_batch(0, vec![put("flushed")]).expect("batch");
    flush(&mut image);
    let (ofs, _) = image.instances[0].backup_log.next_position();
    let first = image.append_batch(0, vec![put("a")]).expect("batch");
    image.append_batch(0, vec![put("b")]).expect("batch");
    let sn = recover(&image).version_log.sn;
    set_backup_sn(&mut image, ofs, u64::MAX);
    let recovery = recover(&image);
    assert_eq!(recovery.damage().map(|damage| damage.problem_number()), Some(308));
    let state = recovery.backup_state().expect("recovered");
    assert_eq!(state.sn_above.map(|above| (above.offset, above.sn, above.ceiling)), Some((ofs, u64::MAX, sn)));
    let replayed: Vec<u64> = state.batches.iter().map(|batch| batch.first_sequence).collect();
    assert_eq!(replayed, vec![first, first + 1]);
}
