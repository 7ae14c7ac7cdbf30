//! fsck fixtures (`fixtures/f_<case>/`), in the manner of e2fsprogs tests/: a clean image
//! plus one targeted corruption each, with the problem code (a [`Code`] of the checker's
//! problem table) and exit code `lds fsck --deep` must give. Each corruption names what it
//! damages, a structure and a field of SPEC.md ([`crate::damage`]), or re-encodes a structure
//! with the format crate's encoders and one field changed. Corruptions that must not trip
//! other checks reseal the checksums around them.

use lds_check::Code;
use lds_format::algorithms::image::{label_sector as encode_label_sector, ImageBuilder};
use lds_format::algorithms::recovery::{recover_version_log, ChainObject, VersionLogState};
use lds_format::batch::{BatchEntry, WriteBatchRecord};
use lds_format::chunk::block::BLOCK_TRAILER_LEN;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::codec::crc32c;
use lds_format::entry::EntryKind;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::{area_context, encode_object, NewObject, ObjectHeader, ObjectType, WrapLeft, HEADER_LEN};
use lds_format::version::meta::{ChunkMeta, CHUNK_FLAG_LOG_REFS, CHUNK_FLAG_ODD};
use lds_format::version::payload::{CompactionJournal, DeletedChunk, DeltaVersion};

use crate::damage::{
    block, block_index, chunk_footer, filter, flip, key_sketch, label, label_sector, log_area, log_object, swap,
    value_body, value_footer, write, zero, LabelCopy, Place, BATCH_ENTRY, BLOCK_ENTRY, BLOCK_TRAILER, INDEX_ENTRY,
    WRITE_BATCH,
};
use crate::{added, entries, expect, journal_image, new_label, two_instances_image, versions_image, Fixture};

/// fsck(8)'s exit code when nothing but information was found.
pub const EXIT_CLEAN: i32 = 0;
/// fsck(8)'s exit code when errors or warnings are left uncorrected.
pub const EXIT_UNCORRECTED: i32 = 4;

/// An fsck case: the fixture and what fsck must report.
pub struct FsckCase {
    /// Folder, image and description.
    pub fixture: Fixture,
    /// The problem that must appear (`fixtures/f_<case>/expect` holds its number).
    pub code: Code,
    /// The exit code.
    pub exit_code: i32,
}

impl FsckCase {
    /// The `expect` file: `code N` and `exit M`.
    pub fn expect_file(&self) -> String {
        format!("code {}\nexit {}\n", self.code.number(), self.exit_code)
    }
}

fn case(name: &'static str, description: &'static str, image: Vec<u8>, code: Code, exit_code: i32) -> FsckCase {
    FsckCase { fixture: Fixture { name, description, image }, code, exit_code }
}

fn live_chain(image: &ImageBuilder, instance: u32) -> VersionLogState {
    let context = area_context(&image.label.geometry, LogKind::Version, instance);
    recover_version_log(image.area(LogKind::Version, instance), &context)
        .unwrap_or_else(|error| panic!("fixture base: {error}"))
}

/// The sequence S of SPEC.md §9.2 of `instance`'s version log (a fixture's: a few objects).
fn sequence(image: &ImageBuilder, instance: u32) -> Vec<ChainObject> {
    let context = area_context(&image.label.geometry, LogKind::Version, instance);
    live_chain(image, instance).sequence(image.area(LogKind::Version, instance), &context).collect()
}

/// Device offset of the live object at `index` of the chain (negative: from the end).
fn object_offset(image: &ImageBuilder, index: isize) -> (u64, ObjectHeader) {
    let sequence = sequence(image, 0);
    let position = if index < 0 { sequence.len() as isize + index } else { index } as usize;
    let object = &sequence[position];
    (image.label.geometry.ofs_version_log + object.offset, object.header)
}

/// Re-encodes the object at `device_offset` with a new sn and payload (checksums valid).
fn rewrite_object(
    bytes: &mut [u8],
    device_offset: u64,
    header: &ObjectHeader,
    object_type: ObjectType,
    sn: u64,
    payload: &[u8],
) {
    let object = NewObject {
        object_type,
        kind: if header.log_kind == 1 { LogKind::Version } else { LogKind::Backup },
        instance: header.instance,
        sn,
        lsn: header.lsn,
        log_offset: header.log_offset,
        volume_uuid: header.volume_uuid,
    };
    let encoded = encode_object(&object, payload);
    write(
        bytes,
        &Place::bytes(format!("{} object", object_type.name()), device_offset, encoded.len() as u64),
        &encoded,
    );
}

/// Recomputes the `crc32c` in the trailer of every block of a slot's chunk after an edit.
fn reseal_block_checksums(bytes: &mut [u8], geometry: &Geometry, slot: u64) {
    let num_blocks = chunk_footer(geometry, slot).field("num_blocks").read(bytes);
    for number in 0..num_blocks as usize {
        let block = block(bytes, geometry, slot, number);
        let crc = block.last(BLOCK_TRAILER_LEN, &BLOCK_TRAILER).field("crc32c");
        let value = crc32c(&bytes[block.offset..crc.offset]);
        write(bytes, &crc, &value.to_le_bytes());
    }
}

/// Recomputes a slot's block checksums, index and filter checksums, digest and footer
/// checksum after an edit, and returns the new digest.
fn reseal_slot(bytes: &mut [u8], geometry: &Geometry, slot_number: u64) -> [u8; 32] {
    reseal_block_checksums(bytes, geometry, slot_number);
    let slot = &mut bytes[crate::damage::slot(geometry, slot_number).range()];
    let footer_at = slot.len() - FOOTER_LEN;
    let mut footer = Footer::parse_raw(&slot[footer_at..], 0).unwrap_or_else(|error| panic!("{error}"));
    footer.index_crc32c = crc32c(&slot[footer.ofs_index as usize..footer.ofs_filter as usize]);
    footer.filter_crc32c = crc32c(&slot[footer.ofs_filter as usize..footer_at]);
    let mut hasher = blake3::Hasher::new();
    hasher.update(&slot[..footer.len_body as usize]);
    hasher.update(&slot[footer.ofs_index as usize..footer_at]);
    hasher.update(&footer.encode_digest_covered());
    footer.digest = *hasher.finalize().as_bytes();
    slot[footer_at..].copy_from_slice(&footer.encode());
    footer.digest
}

fn footer_of(bytes: &[u8], image: &ImageBuilder, slot: u64) -> Footer {
    let footer = chunk_footer(&image.label.geometry, slot);
    Footer::parse_raw(&bytes[footer.range()], 0).unwrap_or_else(|error| panic!("{error}"))
}

/// Every fsck case.
pub fn all() -> Vec<FsckCase> {
    let mut cases = Vec::new();
    let versions = versions_image();
    let geometry = versions.label.geometry;
    let backup_label_sector = label_sector(&geometry, LabelCopy::Backup);

    let mut bytes = versions.bytes.clone();
    // Byte 92 of the reserved bytes (device byte 300): only the label's crc32c sees it.
    flip(&mut bytes, &label(&geometry, LabelCopy::Primary).field("reserved").byte(92), 0x40);
    cases.push(case(
        "f_primary_label_checksum",
        "a flipped byte in the primary label: its checksum fails and the backup label is used",
        bytes,
        Code::PrimaryLabelInvalid,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    zero(&mut bytes, &backup_label_sector);
    cases.push(case(
        "f_backup_label_missing",
        "the backup label sector is zeroed",
        bytes,
        Code::BackupLabelInvalid,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let mut other = versions.label.clone();
    other.volume_name = "renamed".into();
    write(&mut bytes, &backup_label_sector, &encode_label_sector(&other));
    cases.push(case(
        "f_labels_conflict",
        "both labels are valid but differ with the same generation",
        bytes,
        Code::LabelsConflict,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let mut newer = versions.label.clone();
    newer.generation = 2;
    newer.volume_name = "resized".into();
    write(&mut bytes, &backup_label_sector, &encode_label_sector(&newer));
    cases.push(case(
        "f_labels_generation",
        "the backup label has a higher generation than the primary: an interrupted label rewrite",
        bytes,
        Code::LabelsGenerationsDiffer,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    for copy in [LabelCopy::Primary, LabelCopy::Backup] {
        // Byte 4 of the geometry's len_backup_log (byte 100 of the label).
        let place = label(&geometry, copy).field("geometry").field("len_backup_log").byte(4);
        flip(&mut bytes, &place, 0x01);
    }
    cases.push(case(
        "f_no_valid_label",
        "both labels have a flipped byte",
        bytes,
        Code::NoValidLabel,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    bytes.truncate(bytes.len() - (1 << 20));
    cases.push(case(
        "f_volume_beyond_device",
        "the image is 1 MiB shorter than the volume its label describes",
        bytes,
        Code::VolumeBeyondDevice,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let first_object = log_object(&bytes, geometry.ofs_version_log);
    flip(&mut bytes, &first_object.field("len_payload").byte(0), 0x08);
    cases.push(case(
        "f_version_log_no_start",
        "a flipped byte in the first version log object: no legal start",
        bytes,
        Code::VersionLogNoStart,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let (_, header) = object_offset(&versions, 0);
    let delta = DeltaVersion::default().encode();
    let mut fake = header;
    fake.log_offset = 0;
    zero(&mut bytes, &log_area(&geometry, LogKind::Version, 0));
    rewrite_object(&mut bytes, geometry.ofs_version_log, &fake, ObjectType::DeltaVersion, header.sn, &delta);
    cases.push(case(
        "f_version_log_bad_start",
        "the version log starts with a delta version",
        bytes,
        Code::VersionLogBadStart,
        EXIT_UNCORRECTED,
    ));

    cases.push(bad_wol_pointer());

    let mut bytes = versions.bytes.clone();
    let (offset, header) = object_offset(&versions, -1);
    let payload = bytes[log_object(&bytes, offset).field("payload").range()].to_vec();
    rewrite_object(&mut bytes, offset, &header, ObjectType::DeltaVersion, header.sn + 1, &payload);
    cases.push(case(
        "f_version_sn_mismatch",
        "the last delta version carries another SN than its base version",
        bytes,
        Code::VersionLogSnMismatch,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    let bogus = DeltaVersion {
        deleted: vec![DeletedChunk { chunk_id: 40, level: 1 }],
        ..added(&image, 0, Vec::new(), image.last_sequence(0))
    };
    append_raw_delta(&mut image, &bogus);
    cases.push(case(
        "f_replay_contradiction",
        "a delta version deletes a chunk the version does not hold",
        image.bytes,
        Code::VersionLogReplay,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let (offset, _) = object_offset(&versions, -1);
    let payload = log_object(&bytes, offset).field("payload");
    zero(&mut bytes, &payload.after(payload.len / 2));
    cases.push(case(
        "f_torn_last_delta",
        "the last delta version was torn by a crash: recovery ignores it (info only)",
        bytes,
        Code::VersionLogTornHead,
        EXIT_CLEAN,
    ));

    let mut more = versions_image();
    let more_delta = added(&more, 0, Vec::new(), more.last_sequence(0));
    expect(more.append_delta(0, &more_delta));
    // Corrupt the live base version of an image that has a delta after it.
    let mut bytes2 = more.bytes.clone();
    let (offset, _) = object_offset(&more, -2);
    let payload = log_object(&bytes2, offset).field("payload");
    flip(&mut bytes2, &payload.byte(payload.len / 2), 0x10);
    cases.push(case(
        "f_corrupt_delta_mid_chain",
        "a flipped byte in a live delta version followed by another: the chain breaks and later versions are lost",
        bytes2,
        Code::VersionLogChainBroken,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let state = live_chain(&versions, 0);
    let base_object = &sequence(&versions, 0)[state.base_index];
    let base_offset = geometry.ofs_version_log + base_object.offset;
    let mut base = state.base.clone();
    base.geometry.num_slots -= 1;
    rewrite_object(
        &mut bytes,
        base_offset,
        &base_object.header,
        ObjectType::BaseVersion,
        base_object.header.sn,
        &base.encode(),
    );
    cases.push(case(
        "f_geometry_replica",
        "the live base version's geometry replica has one slot fewer than the label",
        bytes,
        Code::GeometryReplicaDiffers,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    let batch = WriteBatchRecord {
        first_sequence: 3,
        entries: vec![BatchEntry { kind: EntryKind::Put, key: b"rewound".to_vec(), value: b"x".to_vec() }],
        synced_lsn_low: 0,
    };
    let sn = image.instances[0].sn;
    let ofs_area = image.instances[0].backup_log.context().ofs_area;
    let pending = expect(image.instances[0].backup_log.append(ObjectType::WriteBatch, sn, &batch.encode()));
    for write in pending {
        let at = (ofs_area + write.offset) as usize;
        image.bytes[at..at + write.bytes.len()].copy_from_slice(&write.bytes);
    }
    cases.push(case(
        "f_batch_sequence",
        "a write batch whose sequence numbers go backwards",
        image.bytes,
        Code::BackupLogSequence,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    for round in 0..4 {
        expect(image.append_batch(0, crate::puts(&[&format!("later-{round}")])));
    }
    // The write batch at the backup start point: byte 1 of its first entry's len_value.
    let start = image.label.geometry.ofs_backup_log + image.instances[0].version.ofs_backup_start;
    let batch = log_object(&image.bytes, start).field("payload").read_as(&WRITE_BATCH);
    let first_entry = batch.field("entries").entry(&image.bytes, &BATCH_ENTRY, 0);
    flip(&mut image.bytes, &first_entry.field("len_value").byte(1), 0x04);
    cases.push(case(
        "f_corrupt_batch_mid_chain",
        "a flipped byte in the first live write batch: later batches are lost to recovery",
        image.bytes,
        Code::BackupLogChainBroken,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let reset = DeltaVersion {
        ofs_backup_start: ofs,
        lsn_backup_start: lsn - 1,
        ..added(&image, 0, Vec::new(), image.last_sequence(0))
    };
    append_raw_delta(&mut image, &reset);
    expect(image.append_batch(0, crate::puts(&["after-the-reset"])));
    cases.push(case(
        "f_reset_sn_mismatch",
        "the backup start point's lsn is one below the object standing there: its writes are not replayed",
        image.bytes,
        Code::BackupStartMismatch,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let reset = DeltaVersion {
        ofs_backup_start: ofs,
        lsn_backup_start: lsn + 1000,
        ..added(&image, 0, Vec::new(), image.last_sequence(0))
    };
    append_raw_delta(&mut image, &reset);
    expect(image.append_batch(0, crate::puts(&["after-the-reset"])));
    cases.push(case(
        "f_reset_lsn_ahead",
        "the backup start point's lsn is 1000 above the batch written there after the version (SPEC.md §9.6): recovery would replay nothing",
        image.bytes,
        Code::BackupStartMismatch,
        EXIT_UNCORRECTED,
    ));

    cases.push(wol_sn_above());

    // Chunk 8 of d_versions (level 1, key00030 to key00054, one block).
    let chunk_slot = 8u64;

    let mut bytes = versions.bytes.clone();
    flip(&mut bytes, &chunk_footer(&geometry, chunk_slot).field("chunk_id").byte(4), 0x01);
    cases.push(case(
        "f_footer_checksum",
        "a flipped byte in a chunk footer",
        bytes,
        Code::FooterInvalid,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let mut footer = footer_of(&bytes, &versions, chunk_slot);
    footer.chunk_id = 9;
    write(&mut bytes, &chunk_footer(&geometry, chunk_slot), &footer.encode());
    cases.push(case(
        "f_footer_mismatch",
        "a chunk footer names another chunk id than its slot (checksum valid)",
        bytes,
        Code::FooterMismatch,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let first_index_entry = block_index(&bytes, &geometry, chunk_slot).entry(&bytes, &INDEX_ENTRY, 0);
    flip(&mut bytes, &first_index_entry.field("ofs_block").byte(3), 0x01);
    cases.push(case(
        "f_index_checksum",
        "a flipped byte in a block index",
        bytes,
        Code::IndexInvalid,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let bits = filter(&bytes, &geometry, chunk_slot).field("bits");
    flip(&mut bytes, &bits.byte(1), 0x01);
    cases.push(case("f_filter_checksum", "a flipped byte in a filter", bytes, Code::FilterInvalid, EXIT_UNCORRECTED));

    let mut bytes = versions.bytes.clone();
    // The second entry of block 0: byte 0 of its little-endian seq_kind is the kind.
    let second_entry = block(&bytes, &geometry, chunk_slot, 0).entry(&bytes, &BLOCK_ENTRY, 1);
    flip(&mut bytes, &second_entry.field("seq_kind").byte(0), 0x20);
    cases.push(case(
        "f_block_checksum",
        "a flipped byte in a chunk block",
        bytes,
        Code::BlockChecksum,
        EXIT_UNCORRECTED,
    ));

    cases.push(unsorted_keys());

    let mut image = versions_image();
    let last_sequence = image.last_sequence(0);
    let mut meta = image.write_chunk(0, 20, 1, 0, &entries(500, 10, last_sequence - 20));
    meta.smallest_key = b"key00490".to_vec();
    let delta = added(&image, 0, vec![meta], last_sequence);
    append_raw_delta(&mut image, &delta);
    cases.push(case(
        "f_key_range_mismatch",
        "a chunk's metadata states a smaller first key than the chunk holds",
        image.bytes,
        Code::KeyRangeMismatch,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let second_entry = block(&bytes, &geometry, chunk_slot, 0).entry(&bytes, &BLOCK_ENTRY, 1);
    flip(&mut bytes, &second_entry.field("len_value").byte(0), 0x02);
    // Reseal the block checksums only: the digest still covers the old byte.
    reseal_block_checksums(&mut bytes, &geometry, chunk_slot);
    cases.push(case(
        "f_digest_mismatch",
        "a changed byte in a block whose checksum was recomputed: only the blake3 digest (--deep) sees it",
        bytes,
        Code::DigestMismatch,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    let last_sequence = image.last_sequence(0);
    let overlapping = image.write_chunk(0, 21, 1, 0, &entries(40, 10, last_sequence - 30));
    let delta = added(&image, 0, vec![overlapping], last_sequence);
    append_raw_delta(&mut image, &delta);
    cases.push(case(
        "f_level_overlap",
        "two chunks of level 1 overlap",
        image.bytes,
        Code::LevelOverlap,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    let last_sequence = image.last_sequence(0);
    let future = image.write_chunk(0, 22, 3, 0, &entries(900, 5, last_sequence + 100));
    let delta = added(&image, 0, vec![future], last_sequence);
    append_raw_delta(&mut image, &delta);
    cases.push(case(
        "f_sequence_implausible",
        "a chunk holds sequence numbers above the version's last sequence",
        image.bytes,
        Code::SequenceImplausible,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = versions.bytes.clone();
    let bits = filter(&bytes, &geometry, chunk_slot).field("bits");
    zero(&mut bytes, &bits);
    let digest = reseal_slot(&mut bytes, &geometry, chunk_slot);
    let mut image = ImageBuilder { bytes, ..versions_image() };
    // The version names the resealed digest, so only the filter is wrong.
    let mut meta = image.instances[0].version.chunks.get(&chunk_slot).cloned().unwrap_or_else(|| panic!("chunk 8"));
    meta.sub_chunks[0].digest = digest;
    let delta = DeltaVersion {
        deleted: vec![DeletedChunk { chunk_id: chunk_slot, level: meta.level }],
        ..added(&image, 0, vec![meta], image.last_sequence(0))
    };
    append_raw_delta(&mut image, &delta);
    cases.push(case(
        "f_filter_false_negative",
        "a filter with every bit cleared (checksums valid): --deep finds keys it rejects",
        image.bytes,
        Code::FilterFalseNegative,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    let last_sequence = image.last_sequence(0);
    let odd_a = image.write_chunk(0, 23, 1, CHUNK_FLAG_ODD, &entries(700, 3, last_sequence - 10));
    let odd_b = image.write_chunk(0, 24, 1, CHUNK_FLAG_ODD, &entries(800, 3, last_sequence - 5));
    let delta = added(&image, 0, vec![odd_a, odd_b], last_sequence);
    append_raw_delta(&mut image, &delta);
    cases.push(case(
        "f_two_odd_chunks",
        "level 1 holds two odd chunks",
        image.bytes,
        Code::OddChunksInLevel,
        EXIT_UNCORRECTED,
    ));

    let mut image = two_instances_image();
    let shared_slot =
        image.instances[0].version.chunks.keys().next().copied().unwrap_or_else(|| panic!("instance 0 chunk"));
    let stolen = image.instances[0].version.chunks.get(&shared_slot).cloned().unwrap_or_else(|| panic!("meta"));
    let delta = added(&image, 1, vec![stolen], image.last_sequence(1).max(15));
    append_raw_delta_instance(&mut image, 1, &delta);
    cases.push(case(
        "f_slot_referenced_twice",
        "instance 1 references a slot instance 0 uses",
        image.bytes,
        Code::SlotReferencedTwice,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    let mut beyond = image.instances[0].version.chunks.get(&chunk_slot).cloned().unwrap_or_else(|| panic!("chunk"));
    beyond.chunk_id = image.label.geometry.num_slots + 3;
    beyond.sub_chunks[0].slot = beyond.chunk_id;
    let delta = added(&image, 0, vec![beyond], image.last_sequence(0));
    append_raw_delta(&mut image, &delta);
    cases.push(case(
        "f_slot_out_of_range",
        "a delta version adds a chunk in a slot beyond the slot area",
        image.bytes,
        Code::SlotOutOfRange,
        EXIT_UNCORRECTED,
    ));

    let mut image = versions_image();
    let _ = image.write_chunk(0, 30, 0, 0, &entries(0, 5, 1));
    cases.push(case(
        "f_leaked_slot",
        "a valid chunk of this volume in a slot no version references (info only)",
        image.bytes,
        Code::StaleChunksInFreeSlots,
        EXIT_CLEAN,
    ));

    let mut image = journal_image();
    let record = CompactionJournal {
        compaction_id: 2,
        source_level: 1,
        target_level: 2,
        resume_key: b"k".to_vec(),
        inputs: vec![44],
        cleaned: Vec::new(),
        outputs: Vec::new(),
    };
    expect(image.append_journal(0, &record));
    cases.push(case(
        "f_journal_inputs_missing",
        "an unfinished compaction names an input chunk the version does not hold",
        image.bytes,
        Code::JournalInputsMissing,
        EXIT_UNCORRECTED,
    ));

    let mut image = journal_image();
    let output = image.instances[0].version.chunks.get(&6).cloned().unwrap_or_else(|| panic!("chunk 6"));
    let record = CompactionJournal {
        compaction_id: 3,
        source_level: 1,
        target_level: 2,
        resume_key: b"k".to_vec(),
        inputs: vec![4],
        cleaned: Vec::new(),
        outputs: vec![ChunkMeta { chunk_id: 6, ..output }],
    };
    expect(image.append_journal(0, &record));
    cases.push(case(
        "f_journal_outputs_conflict",
        "an unfinished compaction's output uses a slot the version uses",
        image.bytes,
        Code::JournalOutputsConflict,
        EXIT_UNCORRECTED,
    ));

    cases.push(log_ref_unresolved());
    cases.push(log_chunk_invalid());
    cases.push(log_start_mismatch());
    cases.extend(value_cases());
    cases.push(sketch_invalid());

    cases
}

/// The log chunk of [`crate::log_chunks_image`] with its metadata replaced by `change` of it,
/// through a delta version that deletes the chunk and adds it again (the builder's encoders:
/// every checksum holds).
fn log_chunk_replaced(change: impl FnOnce(ChunkMeta) -> ChunkMeta) -> (Vec<u8>, crate::LogChunksImage) {
    let mut volume = crate::log_chunks_image();
    let chunk = volume.chunk.clone();
    let version = &volume.image.instances[0].version;
    let delta = DeltaVersion {
        deleted: vec![DeletedChunk { chunk_id: chunk.chunk_id, level: chunk.level }],
        added: vec![change(chunk)],
        last_sequence: version.last_sequence,
        ofs_backup_start: version.ofs_backup_start,
        lsn_backup_start: version.lsn_backup_start,
        ..DeltaVersion::default()
    };
    append_raw_delta(&mut volume.image, &delta);
    (volume.image.bytes.clone(), volume)
}

/// A log chunk whose metadata lost flag `log_refs` (and with it the log start): kind-3
/// entries in an ordinary chunk, whose batches nothing retains.
fn log_chunk_invalid() -> FsckCase {
    let (bytes, _) =
        log_chunk_replaced(|chunk| ChunkMeta { flags: chunk.flags & !CHUNK_FLAG_LOG_REFS, log_start: None, ..chunk });
    case(
        "f_log_chunk_invalid",
        "a delta version re-adds a log chunk without flag log_refs (format 1.6): its log references stand in an ordinary chunk",
        bytes,
        Code::LogChunkInvalid,
        EXIT_UNCORRECTED,
    )
}

/// A log chunk whose recorded log start is its second referenced batch, not its first: the
/// writer may overwrite the first, which the chunk still references.
fn log_start_mismatch() -> FsckCase {
    let second = crate::log_chunks_image().batches[1];
    let (bytes, _) = log_chunk_replaced(|chunk| ChunkMeta { log_start: Some(second), ..chunk });
    case(
        "f_log_start_mismatch",
        "a delta version records a log chunk's log start at its second referenced batch, not its oldest (format 1.6)",
        bytes,
        Code::LogStartMismatch,
        EXIT_UNCORRECTED,
    )
}

/// The fsck cases of value chunks (format 1.4, SPEC.md §8.6), all on [`crate::values_image`].
fn value_cases() -> Vec<FsckCase> {
    let mut cases = Vec::new();
    let volume = crate::values_image();
    let geometry = volume.image.label.geometry;

    let mut bytes = volume.image.bytes.clone();
    let footer = value_footer(&geometry, crate::VALUE_CHUNK_SLOT);
    flip(&mut bytes, &footer.field("value_chunk_id").byte(1), 0x01);
    cases.push(case(
        "f_value_footer_invalid",
        "a flipped byte in a value chunk footer (format 1.4): its checksum fails; every value still matches its crc32c",
        bytes,
        Code::ValueFooterInvalid,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = volume.image.bytes.clone();
    let (_, pointer) = &volume.pointers[1];
    let body = value_body(&bytes, &geometry, crate::VALUE_CHUNK_SLOT);
    flip(&mut bytes, &body.byte(pointer.extents[0].offset as usize + 100), 0x20);
    cases.push(case(
        "f_value_digest_mismatch",
        "a flipped byte in the values of a value chunk (format 1.4): its digest fails (702) and so does the crc32c of the value holding the byte (705)",
        bytes,
        Code::ValueDigestMismatch,
        EXIT_UNCORRECTED,
    ));

    // The last pointer's extent moved 16 bytes on: it reaches past the values.
    let volume_past = crate::values_image_with(|build| {
        let Some((_, pointer)) = build.pointers.last_mut() else { panic!("the value image has pointers") };
        pointer.extents[0].offset += 16;
    });
    cases.push(case(
        "f_value_pointer_invalid",
        "a value pointer written with its extent 16 bytes too far on (format 1.4): it reaches past the values of its value chunk",
        volume_past.image.bytes,
        Code::ValuePointerInvalid,
        EXIT_UNCORRECTED,
    ));

    let mut image = crate::values_image().image;
    let chunk = &volume.chunk;
    let mut wrong = chunk.clone();
    for (_, bytes) in &mut wrong.value_refs {
        *bytes += 1;
    }
    let delta = DeltaVersion {
        deleted: vec![DeletedChunk { chunk_id: chunk.chunk_id, level: chunk.level }],
        added: vec![wrong],
        ..added(&image, 0, Vec::new(), image.last_sequence(0))
    };
    expect(image.append_delta(0, &delta));
    cases.push(case(
        "f_value_refs_mismatch",
        "a delta version re-adds a chunk stating one byte more of value references than its pointers reach (format 1.4)",
        image.bytes,
        Code::ValueRefsMismatch,
        EXIT_UNCORRECTED,
    ));

    // A byte of the first value changed before its value chunk was sealed: the digest holds
    // over the changed values, the pointer's crc32c names the value as it was.
    let changed = crate::values_image_with(|build| {
        let offset = build.pointers[0].1.extents[0].offset as usize;
        build.body[offset + 7] ^= 0x20;
    });
    cases.push(case(
        "f_value_checksum",
        "a value whose bytes changed before its value chunk was sealed (format 1.4): the digest holds, the value fails its pointer's crc32c (--deep)",
        changed.image.bytes,
        Code::ValueChecksum,
        EXIT_UNCORRECTED,
    ));

    let mut bytes = volume.image.bytes.clone();
    zero(&mut bytes, &value_footer(&geometry, crate::DIRECT_VALUE_SLOT));
    cases.push(case(
        "f_value_pending_missing",
        "the footer of a value chunk written directly before its batch is zeroed (format 1.4): the replayed batch points to a value that is lost",
        bytes,
        Code::ValuePendingMissing,
        EXIT_UNCORRECTED,
    ));
    cases.push(case(
        "f_sequence_read_cap",
        "a chunk's entries above the version's last sequence, some at or below the last replayed one (read) and \
         some above it (not read: SPEC.md §15.1 step 6)",
        crate::spec_cases::read_cap_image().bytes,
        Code::SequenceImplausible,
        EXIT_UNCORRECTED,
    ));
    cases
}

/// A key sketch with a flipped register (format 1.5): its crc32c fails.
fn sketch_invalid() -> FsckCase {
    let image = crate::sketches_image();
    let mut bytes = image.bytes.clone();
    let registers = key_sketch(&bytes, &image.label.geometry, 4).field("registers");
    flip(&mut bytes, &registers.byte(5), 0x01);
    case(
        "f_sketch_invalid",
        "a flipped register in a level-0 chunk's key sketch (format 1.5): its crc32c fails, reads are unaffected (warning)",
        bytes,
        Code::SketchInvalid,
        EXIT_UNCORRECTED,
    )
}

/// A log chunk whose references into one batch of the backup log do not resolve: a byte of
/// a value in that batch flipped (its checksum fails), as damage in the retained region of
/// the ring leaves.
fn log_ref_unresolved() -> FsckCase {
    let volume = crate::log_chunks_image();
    let mut bytes = volume.image.bytes.clone();
    let geometry = volume.image.label.geometry;
    let second = geometry.ofs_backup_log + volume.batches[1].offset;
    let batch = log_object(&bytes, second).field("payload").read_as(&WRITE_BATCH);
    let first_entry = batch.field("entries").entry(&bytes, &BATCH_ENTRY, 0);
    flip(&mut bytes, &first_entry.field("value").byte(3), 0x20);
    case(
        "f_log_ref_unresolved",
        "a flipped byte in a write batch a log chunk references (format 1.6): its references do not resolve",
        bytes,
        Code::LogRefUnresolved,
        EXIT_UNCORRECTED,
    )
}

/// Appends a delta version without applying it to the builder's version (it may contradict).
/// d_wrapped with the backup log's WOL one SN above the version log's (SPEC.md §9.6): the
/// batches after it carry the WOR's SN, and recovery that took the WOL's would lose them.
fn wol_sn_above() -> FsckCase {
    let image = crate::wrapped_image();
    let mut bytes = image.bytes.clone();
    let (ofs_area, _) = image.label.geometry.log_area(LogKind::Backup, 0);
    let at = ofs_area as usize;
    assert_eq!(bytes[at + 8], ObjectType::WrapLeft.code(), "d_wrapped's backup log starts with a WOL");
    let sn = image.instances[0].sn + 1;
    // SPEC.md §5: `sn` at header bytes 16..24, `header_crc32c` over bytes 8..64 at 4..8.
    bytes[at + 16..at + 24].copy_from_slice(&sn.to_le_bytes());
    let crc = crc32c(&bytes[at + 8..at + 64]);
    bytes[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
    case(
        "f_blog_wol_sn_above",
        "the backup log's WOL has an sn one above the version log's (its WOR's is the version log's): the batches after the wrap carry the smaller sn",
        bytes,
        Code::BackupLogSnAbove,
        EXIT_UNCORRECTED,
    )
}

fn append_raw_delta(image: &mut ImageBuilder, delta: &DeltaVersion) {
    append_raw_delta_instance(image, 0, delta);
}

fn append_raw_delta_instance(image: &mut ImageBuilder, instance: u32, delta: &DeltaVersion) {
    let state = &mut image.instances[instance as usize];
    let sn = state.sn;
    let ofs_area = state.version_log.context().ofs_area;
    let pending = expect(state.version_log.append(ObjectType::DeltaVersion, sn, &delta.encode()));
    for write in pending {
        let at = (ofs_area + write.offset) as usize;
        image.bytes[at..at + write.bytes.len()].copy_from_slice(&write.bytes);
    }
}

/// A wrapped version log whose live base version is in the right portion, with the WOL
/// pointing elsewhere.
fn bad_wol_pointer() -> FsckCase {
    let request = crate::tiny_logs();
    let mut image = ImageBuilder::format(new_label(request, 0x66, "bad wol"));
    for round in 0..400u64 {
        let slot = 4 + round % 8;
        let chunk = image.write_chunk(0, slot, 0, 0, &entries(round as u32, 1, round + 1));
        let mut delta = added(&image, 0, vec![chunk], round + 1);
        if let Some(old) = image.instances[0].version.chunks.keys().copied().find(|&id| id != slot) {
            delta.deleted.push(DeletedChunk { chunk_id: old, level: 0 });
        }
        if !image.instances[0].version_log.fits(&[delta.encode().len(), 2000]) {
            expect(image.trim(0));
        }
        expect(image.append_delta(0, &delta));
        let state = live_chain(&image, 0);
        let sequence = sequence(&image, 0);
        let wol_follows_base =
            sequence[state.base_index..].iter().any(|object| object.object_type == ObjectType::WrapLeft);
        if wol_follows_base && sequence.len() > state.base_index + 3 {
            // The base is in the right portion (the WOL follows it in chain order): point
            // the WOL one object too far.
            let wol_offset = image.label.geometry.ofs_version_log;
            let header =
                ObjectHeader::parse_raw(&image.bytes[wol_offset as usize..wol_offset as usize + HEADER_LEN], 0)
                    .unwrap_or_else(|error| panic!("{error}"));
            let wrap = WrapLeft { ofs_first_live: state.base_offset + 8, lsn_first_live: state.base_lsn };
            rewrite_object(&mut image.bytes, wol_offset, &header, ObjectType::WrapLeft, header.sn, &wrap.encode(512));
            return case(
                "f_bad_wol_pointer",
                "the WOL points 8 bytes past the live base version in the right portion",
                image.bytes,
                Code::VersionLogBadWrapLeft,
                EXIT_UNCORRECTED,
            );
        }
    }
    panic!("the generator never put the live base version in the right portion");
}

/// A block whose first two entries are swapped, with every checksum resealed.
fn unsorted_keys() -> FsckCase {
    let mut image = versions_image();
    let geometry = image.label.geometry;
    let chunk_slot = 7u64;
    // Entries of chunk 7 are key00000.. with values value-0..: entries 1 and 2 (key00001,
    // key00002, values "value-1", "value-2") have equal sizes.
    let first_block = block(&image.bytes, &geometry, chunk_slot, 0);
    let second_entry = first_block.entry(&image.bytes, &BLOCK_ENTRY, 1);
    let third_entry = first_block.entry(&image.bytes, &BLOCK_ENTRY, 2);
    swap(&mut image.bytes, &second_entry, &third_entry);
    let digest = reseal_slot(&mut image.bytes, &geometry, chunk_slot);
    let mut meta = image.instances[0].version.chunks.get(&chunk_slot).cloned().unwrap_or_else(|| panic!("chunk 7"));
    meta.sub_chunks[0].digest = digest;
    let delta = DeltaVersion {
        deleted: vec![DeletedChunk { chunk_id: chunk_slot, level: meta.level }],
        ..added(&image, 0, vec![meta], image.last_sequence(0))
    };
    append_raw_delta(&mut image, &delta);
    case(
        "f_unsorted_keys",
        "two entries of a block swapped, checksums and digest resealed",
        image.bytes,
        Code::KeysUnsorted,
        EXIT_UNCORRECTED,
    )
}
