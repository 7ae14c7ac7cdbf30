//! Guards the recovery rules of SPEC.md §9: the version-log decision table (which base
//! version is live, where the log continues after a wrap) and the backup-log replay rules,
//! case by case in the manner of TigerBeetle's recovery_cases test.

use lds_format::algorithms::image::ImageBuilder;
use lds_format::algorithms::recovery::{
    recover_backup_log, recover_version_log, ChainEnd, ChainObject, VersionLogError,
};
use lds_format::batch::BatchEntry;
use lds_format::entry::EntryKind;
use lds_format::geometry::{plan_layout, LayoutRequest, LogKind};
use lds_format::label::Label;
use lds_format::log::{area_context, ObjectType};
use lds_format::version::meta::ChunkMeta;
use lds_format::version::payload::{DeletedChunk, DeltaVersion};

fn label() -> Label {
    let request = LayoutRequest {
        volume_len: 4 << 20,
        sector_size: Some(512),
        len_version_log: Some(16 * 1024),
        len_backup_log: Some(8 * 1024),
        ..LayoutRequest::default()
    };
    Label::new(plan_layout(&request, [0xAB; 16]).expect("layout"), "")
}

fn put(key: &str) -> BatchEntry {
    BatchEntry { kind: EntryKind::Put, key: key.as_bytes().to_vec(), value: b"value".to_vec() }
}

fn add_chunk(image: &mut ImageBuilder, slot: u64, key: &str) -> ChunkMeta {
    let entries = vec![(key.as_bytes().to_vec(), slot + 1, EntryKind::Put, b"v".to_vec())];
    image.write_chunk(0, slot, 0, 0, &entries)
}

/// A delta that moves chunk `slot` in and out, to make version-log traffic.
fn churn(image: &mut ImageBuilder, slot: u64) {
    let meta = add_chunk(image, slot, "k");
    let add = DeltaVersion { added: vec![meta], ..DeltaVersion::default() };
    image.append_delta(0, &add).expect("append");
    let remove = DeltaVersion { deleted: vec![DeletedChunk { chunk_id: slot, level: 0 }], ..DeltaVersion::default() };
    image.append_delta(0, &remove).expect("append");
}

/// One round of traffic as an engine makes it: churn, and a trim before the log runs out of
/// room in front of the live base version (SPEC.md §10.3).
fn churn_and_trim(image: &mut ImageBuilder, round: u64) {
    churn(image, 4 + round % 8);
    if !image.instances[0].version_log.fits(&[2000, 600]) {
        image.trim(0).expect("trim");
    }
}

fn recover(image: &ImageBuilder) -> Result<lds_format::algorithms::recovery::VersionLogState, VersionLogError> {
    let context = area_context(&image.label.geometry, LogKind::Version, 0);
    recover_version_log(image.area(LogKind::Version, 0), &context)
}

/// The sequence S of SPEC.md §9.2 that `state` was recovered from, walked again.
fn sequence(image: &ImageBuilder, state: &lds_format::algorithms::recovery::VersionLogState) -> Vec<ChainObject> {
    let context = area_context(&image.label.geometry, LogKind::Version, 0);
    state.sequence(image.area(LogKind::Version, 0), &context).collect()
}

fn version_area_mut(image: &mut ImageBuilder) -> &mut [u8] {
    let (offset, len) = image.label.geometry.log_area(LogKind::Version, 0);
    &mut image.bytes[offset as usize..(offset + len) as usize]
}

#[test]
fn fresh_volume_has_the_initial_base_version() {
    let image = ImageBuilder::format(label());
    let state = recover(&image).expect("recovers");
    assert_eq!(state.base_offset, 0);
    assert_eq!(state.sn, 1);
    assert_eq!(state.head.next_lsn, 2);
    assert!(state.version.chunks.is_empty());
    assert!(matches!(state.end, ChainEnd::Invalid { .. }));
}

#[test]
fn base_then_deltas_replay_in_order() {
    let mut image = ImageBuilder::format(label());
    let first = add_chunk(&mut image, 4, "a");
    let second = add_chunk(&mut image, 5, "b");
    image
        .append_delta(0, &DeltaVersion { added: vec![first], last_sequence: 9, ..DeltaVersion::default() })
        .expect("append");
    image
        .append_delta(0, &DeltaVersion { added: vec![second], last_sequence: 12, ..DeltaVersion::default() })
        .expect("append");
    let state = recover(&image).expect("recovers");
    assert_eq!(state.version.chunks.keys().copied().collect::<Vec<_>>(), vec![4, 5]);
    assert_eq!(state.version.last_sequence, 12);
    assert_eq!(state.sequence_len, 3);
    assert_eq!(sequence(&image, &state).len(), 3);
    assert_eq!(state.head, image.instances[0].version_log.head());
}

#[test]
fn torn_last_delta_is_not_applied_and_the_head_is_before_it() {
    let mut image = ImageBuilder::format(label());
    let meta = add_chunk(&mut image, 4, "a");
    let head_before = image.instances[0].version_log.head();
    image.append_delta(0, &DeltaVersion { added: vec![meta], ..DeltaVersion::default() }).expect("append");
    // Tear the delta: its second half never reached the media.
    let area = version_area_mut(&mut image);
    let at = head_before.offset as usize;
    area[at + 100..at + 120].fill(0);
    let state = recover(&image).expect("recovers");
    assert!(state.version.chunks.is_empty());
    assert_eq!(state.head, head_before);
}

#[test]
fn wrapped_log_with_live_base_on_the_right_reads_both_portions() {
    let mut image = ImageBuilder::format(label());
    // Trim often enough to keep the live base version reachable; stop right after a wrap
    // with no base version yet in the left portion.
    let mut wrapped_without_left_base = false;
    for round in 0..200u64 {
        churn(&mut image, 4 + round % 8);
        let context = area_context(&image.label.geometry, LogKind::Version, 0);
        if !image.instances[0].version_log.fits(&[2000, 600]) {
            image.trim(0).expect("trim");
        }
        let left = lds_format::algorithms::recovery::chain(image.area(LogKind::Version, 0), &context, 0, None);
        let starts_with_wol = left.objects.first().map(|object| object.object_type) == Some(ObjectType::WrapLeft);
        let left_has_base = left.objects.iter().any(|object| object.object_type == ObjectType::BaseVersion);
        if starts_with_wol && !left_has_base && left.objects.len() > 2 {
            wrapped_without_left_base = true;
            break;
        }
    }
    assert!(wrapped_without_left_base, "the scenario never produced a wrap with the base on the right");
    let state = recover(&image).expect("recovers");
    assert!(state.base_offset > 0, "the live base version is in the right portion");
    assert_eq!(state.version, image.instances[0].version);
    assert_eq!(state.head, image.instances[0].version_log.head());
    let sequence = sequence(&image, &state);
    assert_eq!(sequence.len(), state.sequence_len);
    assert_eq!(sequence[state.base_index].offset, state.base_offset);
    assert_eq!(sequence[state.base_index].object_type, ObjectType::BaseVersion);
    let types: Vec<ObjectType> = sequence.iter().map(|object| object.object_type).collect();
    assert!(types.contains(&ObjectType::WrapRight));
    assert!(types.contains(&ObjectType::WrapLeft));
}

#[test]
fn base_in_the_left_portion_makes_the_right_portion_obsolete() {
    let mut image = ImageBuilder::format(label());
    let mut done = false;
    for round in 0..400u64 {
        churn_and_trim(&mut image, round);
        let state = recover(&image).expect("recovers at every step");
        assert_eq!(state.version, image.instances[0].version, "round {round}");
        let context = area_context(&image.label.geometry, LogKind::Version, 0);
        let left = lds_format::algorithms::recovery::chain(image.area(LogKind::Version, 0), &context, 0, None);
        let starts_with_wol = left.objects.first().map(|object| object.object_type) == Some(ObjectType::WrapLeft);
        if starts_with_wol && state.base_index > 0 && sequence(&image, &state)[0].object_type == ObjectType::WrapLeft {
            done = true;
        }
    }
    assert!(done, "the scenario never put the live base version in the left portion after a wrap");
}

#[test]
fn crash_between_wor_and_wol_continues_with_a_wol() {
    let mut image = ImageBuilder::format(label());
    // Append until the next append wraps, then write only its WOR.
    loop {
        let before = image.clone();
        churn_and_trim(&mut image, 0);
        let context = area_context(&image.label.geometry, LogKind::Version, 0);
        let left = lds_format::algorithms::recovery::chain(image.area(LogKind::Version, 0), &context, 0, None);
        if left.objects.first().map(|object| object.object_type) == Some(ObjectType::WrapLeft) {
            // Rebuild the state just before, then lay only the WOR of the wrapping append.
            image = before;
            let mut appender = image.instances[0].version_log.clone();
            let pending = appender.append(ObjectType::DeltaVersion, 1, &vec![0u8; 12_000]).expect("wrap");
            assert_eq!(pending[0].object_type, ObjectType::WrapRight);
            let area = version_area_mut(&mut image);
            let at = pending[0].offset as usize;
            area[at..at + pending[0].bytes.len()].copy_from_slice(&pending[0].bytes);
            break;
        }
    }
    let state = recover(&image).expect("recovers");
    assert!(state.head.after_wrap_right);
    assert_eq!(state.head.offset, 0);
    assert_eq!(state.version, image.instances[0].version);
}

#[test]
fn stale_objects_from_an_earlier_lap_are_ignored() {
    let mut image = ImageBuilder::format(label());
    for round in 0..60u64 {
        churn_and_trim(&mut image, round);
    }
    let state = recover(&image).expect("recovers");
    // After many laps the bytes past the head hold old but well-formed objects.
    assert!(matches!(state.end, ChainEnd::Stale { .. } | ChainEnd::Invalid { .. }));
    assert_eq!(state.version, image.instances[0].version);
}

#[test]
fn no_valid_object_at_offset_zero_is_e_vlog_no_start() {
    let mut image = ImageBuilder::format(label());
    version_area_mut(&mut image)[20] ^= 0xff;
    let error = recover(&image).err();
    assert!(matches!(error, Some(VersionLogError::NoStart { .. })));
    assert_eq!(error.map(|error| error.code()), Some("E_VLOG_NO_START"));
}

#[test]
fn a_delta_at_offset_zero_is_e_vlog_bad_start() {
    let mut image = ImageBuilder::format(label());
    let context = area_context(&image.label.geometry, LogKind::Version, 0);
    let head = lds_format::algorithms::recovery::LogHead { offset: 0, next_lsn: 1, after_wrap_right: false, sn: 1 };
    let mut appender = lds_format::algorithms::writer::LogAppender::new(context, head, 0, 1);
    let pending = appender.append(ObjectType::DeltaVersion, 1, &DeltaVersion::default().encode()).expect("append");
    let area = version_area_mut(&mut image);
    area.fill(0);
    area[..pending[0].bytes.len()].copy_from_slice(&pending[0].bytes);
    assert!(matches!(recover(&image), Err(VersionLogError::BadStart { object_type: ObjectType::DeltaVersion })));
}

#[test]
fn a_wol_pointing_at_garbage_is_e_vlog_bad_wol() {
    let mut image = ImageBuilder::format(label());
    let mut found = false;
    for round in 0..200u64 {
        churn_and_trim(&mut image, round);
        let state = recover(&image).expect("recovers");
        let sequence = sequence(&image, &state);
        if sequence[0].object_type != ObjectType::WrapLeft
            && state.base_offset > 0
            && sequence.iter().any(|o| o.object_type == ObjectType::WrapLeft)
        {
            // The live base version is in the right portion: destroy it.
            let base_offset = state.base_offset as usize;
            version_area_mut(&mut image)[base_offset + 30] ^= 0x55;
            found = true;
            break;
        }
    }
    assert!(found, "the scenario never put the live base version on the right");
    assert!(matches!(recover(&image), Err(VersionLogError::BadWrapLeft { .. })));
}

#[test]
fn backup_log_replays_from_the_start_point_and_across_a_wrap() {
    let mut image = ImageBuilder::format(label());
    let geometry = image.label.geometry;
    let context = area_context(&geometry, LogKind::Backup, 0);
    let mut expected_sequences = Vec::new();
    let mut wrapped = false;
    for round in 0..60u32 {
        // A memtable flush every 10 batches moves the start point (no chunk, for brevity).
        if round % 10 == 9 {
            let (ofs, lsn) = image.instances[0].backup_log.next_position();
            let last_sequence = image.instances[0].next_sequence - 1;
            let delta =
                DeltaVersion { ofs_backup_start: ofs, lsn_backup_start: lsn, last_sequence, ..DeltaVersion::default() };
            image.append_delta(0, &delta).expect("append");
            expected_sequences.clear();
        }
        let first = image.append_batch(0, vec![put(&format!("key{round}")), put("other")]).expect("batch");
        expected_sequences.push(first);
        let head = image.instances[0].backup_log.head();
        wrapped |= head.offset < 2 * 512 && round > 5;
    }
    assert!(wrapped, "the backup log never wrapped");
    let version_state = recover(&image).expect("recovers");
    let version = &version_state.version;
    let state = recover_backup_log(
        image.area(LogKind::Backup, 0),
        &context,
        version.ofs_backup_start,
        version.lsn_backup_start,
        version.last_sequence,
        version_state.sn,
    )
    .expect("replays");
    assert!(state.start_found);
    let replayed: Vec<u64> = state.batches.iter().map(|batch| batch.first_sequence).collect();
    assert_eq!(replayed, expected_sequences);
    assert_eq!(state.head, image.instances[0].backup_log.head());
}

#[test]
fn backup_start_never_written_means_nothing_to_replay() {
    let mut image = ImageBuilder::format(label());
    image.append_batch(0, vec![put("a")]).expect("batch");
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let delta =
        DeltaVersion { ofs_backup_start: ofs, lsn_backup_start: lsn, last_sequence: 1, ..DeltaVersion::default() };
    image.append_delta(0, &delta).expect("append");
    let context = area_context(&image.label.geometry, LogKind::Backup, 0);
    let state = recover_backup_log(image.area(LogKind::Backup, 0), &context, ofs, lsn, 1, 1).expect("ok");
    assert!(!state.start_found);
    assert!(state.batches.is_empty());
    assert_eq!(state.head.offset, ofs);
    assert_eq!(state.head.next_lsn, lsn);
}

#[test]
fn backup_start_recorded_just_before_a_wrap_finds_the_wor() {
    let mut image = ImageBuilder::format(label());
    // Append until the next batch wraps, with a head that is not sector-aligned.
    loop {
        let appender = image.instances[0].backup_log.clone();
        let mut probe = appender.clone();
        let pending = probe.append(ObjectType::WriteBatch, 1, &[0u8; 60]).expect("append");
        if pending.len() > 1 && appender.head().offset % 512 != 0 {
            break;
        }
        image.append_batch(0, vec![put("filler")]).expect("batch");
        // Keep the live region short so that the log can wrap.
        let (ofs, lsn) = image.instances[0].backup_log.next_position();
        let last_sequence = image.last_sequence(0);
        let delta =
            DeltaVersion { ofs_backup_start: ofs, lsn_backup_start: lsn, last_sequence, ..DeltaVersion::default() };
        image.append_delta(0, &delta).expect("append");
    }
    // A flush records the head as the start point; the next batch wraps.
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let last_sequence = image.last_sequence(0);
    let delta = DeltaVersion { ofs_backup_start: ofs, lsn_backup_start: lsn, last_sequence, ..DeltaVersion::default() };
    image.append_delta(0, &delta).expect("append");
    let first = image.append_batch(0, vec![put("after-the-wrap")]).expect("batch");
    let context = area_context(&image.label.geometry, LogKind::Backup, 0);
    let state =
        recover_backup_log(image.area(LogKind::Backup, 0), &context, ofs, lsn, last_sequence, 1).expect("replays");
    assert!(state.start_found, "the WOR at the next sector boundary was not found");
    assert_eq!(state.batches.iter().map(|batch| batch.first_sequence).collect::<Vec<_>>(), vec![first]);
}

#[test]
fn a_contradicting_delta_fails_recovery_until_a_later_base_version_supersedes_it() {
    // Recovery replays S object by object, starting over at each base version (it keeps no
    // object to find the last one first): a contradiction before the live base version must
    // not count, one after it must.
    let mut image = ImageBuilder::format(label());
    let bad = DeltaVersion { deleted: vec![DeletedChunk { chunk_id: 9, level: 0 }], ..DeltaVersion::default() };
    let pending = image.instances[0].version_log.append(ObjectType::DeltaVersion, 1, &bad.encode()).expect("append");
    let bad_offset = pending[0].offset;
    let area = version_area_mut(&mut image);
    for write in &pending {
        area[write.offset as usize..write.offset as usize + write.bytes.len()].copy_from_slice(&write.bytes);
    }
    let error = recover(&image).err();
    assert!(
        matches!(error, Some(VersionLogError::Replay { offset, .. }) if offset == bad_offset),
        "{error:?} (the delta is at {bad_offset})"
    );
    image.trim(0).expect("trim");
    let state = recover(&image).expect("a later base version supersedes the contradiction");
    assert_eq!((state.base_index, state.sequence_len), (2, 3));
    assert_eq!(state.version, image.instances[0].version);
    let sequence = sequence(&image, &state);
    let offsets: Vec<u64> = sequence.iter().map(|object| object.offset).collect();
    assert_eq!(offsets[1], bad_offset);
    assert_eq!(offsets[2], state.base_offset);
    assert_eq!(
        state
            .live_objects(image.area(LogKind::Version, 0), &area_context(&image.label.geometry, LogKind::Version, 0))
            .count(),
        1
    );
}
