//! fsck fixtures (`fixtures/f_<case>/`), in the manner of e2fsprogs tests/: a clean image
//! plus one targeted corruption each, with the problem code and exit code `lds fsck --deep`
//! must give. Corruptions that must not trip other checks reseal the checksums around them.

use lds_format::batch::{BatchEntry, EntryKind, WriteBatchRecord};
use lds_format::chunk::{Footer, FOOTER_LEN};
use lds_format::codec::crc32c;
use lds_format::image::{area_context, ImageBuilder};
use lds_format::label::{Label, LogKind};
use lds_format::log::{encode_object, NewObject, ObjectHeader, ObjectType, WrapLeft, HEADER_LEN};
use lds_format::recovery::{recover_version_log, VersionLogState};
use lds_format::version::{ChunkMeta, CompactionJournal, DeletedChunk, DeltaVersion, CHUNK_FLAG_ODD};

use crate::{added, entries, expect, journal_image, label, two_instances_image, versions_image, Fixture};

/// An fsck case: the fixture and what fsck must report.
pub struct FsckCase {
    /// Folder, image and description.
    pub fixture: Fixture,
    /// The problem code that must appear.
    pub code: u16,
    /// The exit code.
    pub exit_code: i32,
}

fn case(name: &'static str, description: &'static str, image: Vec<u8>, code: u16, exit_code: i32) -> FsckCase {
    FsckCase { fixture: Fixture { name, description, image }, code, exit_code }
}

fn live_chain(image: &ImageBuilder, instance: u32) -> VersionLogState {
    let context = area_context(&image.label.geometry, LogKind::Version, instance);
    recover_version_log(image.area(LogKind::Version, instance), &context)
        .unwrap_or_else(|error| panic!("fixture base: {error}"))
}

/// Device offset of the live object at `index` of the chain (negative: from the end).
fn object_offset(image: &ImageBuilder, index: isize) -> (u64, ObjectHeader) {
    let state = live_chain(image, 0);
    let position = if index < 0 { state.sequence.len() as isize + index } else { index } as usize;
    let object = &state.sequence[position];
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
    let at = device_offset as usize;
    bytes[at..at + encoded.len()].copy_from_slice(&encoded);
}

fn payload_of(bytes: &[u8], device_offset: u64, header: &ObjectHeader) -> Vec<u8> {
    let at = device_offset as usize + HEADER_LEN;
    bytes[at..at + header.len_payload as usize].to_vec()
}

/// Recomputes a slot's block checksums, index and filter checksums, digest and footer
/// checksum after an edit, and returns the new digest.
fn reseal_slot(bytes: &mut [u8], slot_offset: u64, slot_size: u64) -> [u8; 32] {
    let at = slot_offset as usize;
    let slot = &mut bytes[at..at + slot_size as usize];
    let footer_at = slot.len() - FOOTER_LEN;
    let mut footer = Footer::parse_raw(&slot[footer_at..], 0).unwrap_or_else(|error| panic!("{error}"));
    let index =
        lds_format::chunk::decode_index(&slot[footer.ofs_index as usize..footer.ofs_filter as usize], 0, &footer)
            .unwrap_or_else(|error| panic!("{error}"));
    for entry in &index {
        let block = &mut slot[entry.ofs_block as usize..(entry.ofs_block + entry.len_block) as usize];
        let crc_at = block.len() - 4;
        let crc = crc32c(&block[..crc_at]);
        block[crc_at..].copy_from_slice(&crc.to_le_bytes());
    }
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
    let geometry = &image.label.geometry;
    let at = (geometry.slot_offset(slot) + geometry.slot_size) as usize - FOOTER_LEN;
    Footer::parse_raw(&bytes[at..at + FOOTER_LEN], 0).unwrap_or_else(|error| panic!("{error}"))
}

fn label_sector_bytes(label: &Label) -> Vec<u8> {
    lds_format::image::label_sector(label)
}

/// Every fsck case.
pub fn all() -> Vec<FsckCase> {
    let mut cases = Vec::new();
    let versions = versions_image();
    let geometry = versions.label.geometry;
    let sector = geometry.sector() as usize;
    let backup_label = geometry.ofs_backup_label() as usize;

    let mut bytes = versions.bytes.clone();
    bytes[300] ^= 0x40;
    cases.push(case(
        "f_primary_label_checksum",
        "a flipped byte in the primary label: its checksum fails and the backup label is used",
        bytes,
        101,
        4,
    ));

    let mut bytes = versions.bytes.clone();
    bytes[backup_label..backup_label + sector].fill(0);
    cases.push(case("f_backup_label_missing", "the backup label sector is zeroed", bytes, 102, 4));

    let mut bytes = versions.bytes.clone();
    let mut other = versions.label.clone();
    other.volume_name = "renamed".into();
    bytes[backup_label..backup_label + sector].copy_from_slice(&label_sector_bytes(&other));
    cases.push(case("f_labels_conflict", "both labels are valid but differ with the same generation", bytes, 103, 4));

    let mut bytes = versions.bytes.clone();
    let mut newer = versions.label.clone();
    newer.generation = 2;
    newer.volume_name = "resized".into();
    bytes[backup_label..backup_label + sector].copy_from_slice(&label_sector_bytes(&newer));
    cases.push(case(
        "f_labels_generation",
        "the backup label has a higher generation than the primary: an interrupted label rewrite",
        bytes,
        104,
        4,
    ));

    let mut bytes = versions.bytes.clone();
    bytes[100] ^= 1;
    bytes[backup_label + 100] ^= 1;
    cases.push(case("f_no_valid_label", "both labels have a flipped byte", bytes, 105, 4));

    let mut bytes = versions.bytes.clone();
    bytes.truncate(bytes.len() - (1 << 20));
    cases.push(case(
        "f_volume_beyond_device",
        "the image is 1 MiB shorter than the volume its label describes",
        bytes,
        106,
        4,
    ));

    let mut bytes = versions.bytes.clone();
    bytes[geometry.ofs_version_log as usize + 40] ^= 0x08;
    cases.push(case(
        "f_version_log_no_start",
        "a flipped byte in the first version log object: no legal start",
        bytes,
        201,
        4,
    ));

    let mut bytes = versions.bytes.clone();
    let (_, header) = object_offset(&versions, 0);
    let delta = DeltaVersion::default().encode();
    let mut fake = header;
    fake.log_offset = 0;
    let start = geometry.ofs_version_log as usize;
    bytes[start..start + geometry.len_version_log as usize].fill(0);
    rewrite_object(&mut bytes, geometry.ofs_version_log, &fake, ObjectType::DeltaVersion, header.sn, &delta);
    cases.push(case("f_version_log_bad_start", "the version log starts with a delta version", bytes, 202, 4));

    cases.push(bad_wol_pointer());

    let mut bytes = versions.bytes.clone();
    let (offset, header) = object_offset(&versions, -1);
    let payload = payload_of(&bytes, offset, &header);
    rewrite_object(&mut bytes, offset, &header, ObjectType::DeltaVersion, header.sn + 1, &payload);
    cases.push(case(
        "f_version_sn_mismatch",
        "the last delta version carries another SN than its base version",
        bytes,
        204,
        4,
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
        205,
        4,
    ));

    let mut bytes = versions.bytes.clone();
    let (offset, header) = object_offset(&versions, -1);
    let half = offset as usize + HEADER_LEN + header.len_payload as usize / 2;
    bytes[half..offset as usize + HEADER_LEN + header.len_payload as usize].fill(0);
    cases.push(case(
        "f_torn_last_delta",
        "the last delta version was torn by a crash: recovery ignores it (info only)",
        bytes,
        206,
        0,
    ));

    let mut more = versions_image();
    let more_delta = added(&more, 0, Vec::new(), more.last_sequence(0));
    expect(more.append_delta(0, &more_delta));
    // Corrupt the live base version of an image that has a delta after it.
    let mut bytes2 = more.bytes.clone();
    let (offset, header) = object_offset(&more, -2);
    bytes2[offset as usize + HEADER_LEN + header.len_payload as usize / 2] ^= 0x10;
    cases.push(case(
        "f_corrupt_delta_mid_chain",
        "a flipped byte in a live delta version followed by another: the chain breaks and later versions are lost",
        bytes2,
        207,
        4,
    ));

    let mut bytes = versions.bytes.clone();
    let state = live_chain(&versions, 0);
    let base_object = &state.sequence[state.base_index];
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
        209,
        4,
    ));

    let mut image = versions_image();
    let batch = WriteBatchRecord {
        first_sequence: 3,
        entries: vec![BatchEntry { kind: EntryKind::Put, key: b"rewound".to_vec(), value: b"x".to_vec() }],
    };
    let sn = image.instances[0].sn;
    let ofs_area = image.instances[0].backup_log.context().ofs_area;
    let pending = expect(image.instances[0].backup_log.append(ObjectType::WriteBatch, sn, &batch.encode()));
    for write in pending {
        let at = (ofs_area + write.offset) as usize;
        image.bytes[at..at + write.bytes.len()].copy_from_slice(&write.bytes);
    }
    cases.push(case("f_batch_sequence", "a write batch whose sequence numbers go backwards", image.bytes, 302, 4));

    let mut image = versions_image();
    for round in 0..4 {
        expect(image.append_batch(0, crate::puts(&[&format!("later-{round}")])));
    }
    let start = image.instances[0].version.ofs_backup_start;
    let at = (image.label.geometry.ofs_backup_log + start) as usize + HEADER_LEN + 20;
    image.bytes[at] ^= 0x04;
    cases.push(case(
        "f_corrupt_batch_mid_chain",
        "a flipped byte in the first live write batch: later batches are lost to recovery",
        image.bytes,
        303,
        4,
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
        304,
        4,
    ));

    let chunk_slot = 8u64;
    let slot_offset = geometry.slot_offset(chunk_slot);
    let footer_at = (slot_offset + geometry.slot_size) as usize - FOOTER_LEN;

    let mut bytes = versions.bytes.clone();
    bytes[footer_at + 20] ^= 0x01;
    cases.push(case("f_footer_checksum", "a flipped byte in a chunk footer", bytes, 401, 4));

    let mut bytes = versions.bytes.clone();
    let mut footer = footer_of(&bytes, &versions, chunk_slot);
    footer.chunk_id = 9;
    bytes[footer_at..footer_at + FOOTER_LEN].copy_from_slice(&footer.encode());
    cases.push(case(
        "f_footer_mismatch",
        "a chunk footer names another chunk id than its slot (checksum valid)",
        bytes,
        402,
        4,
    ));

    let mut bytes = versions.bytes.clone();
    let footer = footer_of(&bytes, &versions, chunk_slot);
    bytes[slot_offset as usize + footer.ofs_index as usize + 3] ^= 0x01;
    cases.push(case("f_index_checksum", "a flipped byte in a block index", bytes, 403, 4));

    let mut bytes = versions.bytes.clone();
    let footer = footer_of(&bytes, &versions, chunk_slot);
    bytes[slot_offset as usize + footer.ofs_filter as usize + 9] ^= 0x01;
    cases.push(case("f_filter_checksum", "a flipped byte in a filter", bytes, 404, 4));

    let mut bytes = versions.bytes.clone();
    bytes[slot_offset as usize + 30] ^= 0x20;
    cases.push(case("f_block_checksum", "a flipped byte in a chunk block", bytes, 405, 4));

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
        407,
        4,
    ));

    let mut bytes = versions.bytes.clone();
    bytes[slot_offset as usize + 40] ^= 0x02;
    // Reseal the block checksums only: the digest still covers the old byte.
    let footer = footer_of(&bytes, &versions, chunk_slot);
    let index = lds_format::chunk::decode_index(
        &bytes[slot_offset as usize + footer.ofs_index as usize..slot_offset as usize + footer.ofs_filter as usize],
        0,
        &footer,
    )
    .unwrap_or_else(|error| panic!("{error}"));
    for entry in &index {
        let start = slot_offset as usize + entry.ofs_block as usize;
        let end = start + entry.len_block as usize;
        let crc = crc32c(&bytes[start..end - 4]);
        bytes[end - 4..end].copy_from_slice(&crc.to_le_bytes());
    }
    cases.push(case(
        "f_digest_mismatch",
        "a changed byte in a block whose checksum was recomputed: only the blake3 digest (--deep) sees it",
        bytes,
        408,
        4,
    ));

    let mut image = versions_image();
    let last_sequence = image.last_sequence(0);
    let overlapping = image.write_chunk(0, 21, 1, 0, &entries(40, 10, last_sequence - 30));
    let delta = added(&image, 0, vec![overlapping], last_sequence);
    append_raw_delta(&mut image, &delta);
    cases.push(case("f_level_overlap", "two chunks of level 1 overlap", image.bytes, 409, 4));

    let mut image = versions_image();
    let last_sequence = image.last_sequence(0);
    let future = image.write_chunk(0, 22, 3, 0, &entries(900, 5, last_sequence + 100));
    let delta = added(&image, 0, vec![future], last_sequence);
    append_raw_delta(&mut image, &delta);
    cases.push(case(
        "f_sequence_implausible",
        "a chunk holds sequence numbers above the version's last sequence",
        image.bytes,
        410,
        4,
    ));

    let mut bytes = versions.bytes.clone();
    let footer = footer_of(&bytes, &versions, chunk_slot);
    let bits_start = slot_offset as usize + footer.ofs_filter as usize + 8;
    let bits_end = slot_offset as usize + footer.ofs_filter as usize + footer.len_filter as usize;
    bytes[bits_start..bits_end].fill(0);
    let digest = reseal_slot(&mut bytes, slot_offset, geometry.slot_size);
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
        411,
        4,
    ));

    let mut image = versions_image();
    let last_sequence = image.last_sequence(0);
    let odd_a = image.write_chunk(0, 23, 1, CHUNK_FLAG_ODD, &entries(700, 3, last_sequence - 10));
    let odd_b = image.write_chunk(0, 24, 1, CHUNK_FLAG_ODD, &entries(800, 3, last_sequence - 5));
    let delta = added(&image, 0, vec![odd_a, odd_b], last_sequence);
    append_raw_delta(&mut image, &delta);
    cases.push(case("f_two_odd_chunks", "level 1 holds two odd chunks", image.bytes, 412, 4));

    let mut image = two_instances_image();
    let shared_slot =
        image.instances[0].version.chunks.keys().next().copied().unwrap_or_else(|| panic!("instance 0 chunk"));
    let stolen = image.instances[0].version.chunks.get(&shared_slot).cloned().unwrap_or_else(|| panic!("meta"));
    let delta = added(&image, 1, vec![stolen], image.last_sequence(1).max(15));
    append_raw_delta_instance(&mut image, 1, &delta);
    cases.push(case("f_slot_referenced_twice", "instance 1 references a slot instance 0 uses", image.bytes, 501, 4));

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
        502,
        4,
    ));

    let mut image = versions_image();
    let _ = image.write_chunk(0, 30, 0, 0, &entries(0, 5, 1));
    cases.push(case(
        "f_leaked_slot",
        "a valid chunk of this volume in a slot no version references (info only)",
        image.bytes,
        503,
        0,
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
        601,
        4,
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
        602,
        4,
    ));

    cases
}

/// Appends a delta version without applying it to the builder's version (it may contradict).
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
    let mut image = ImageBuilder::format(label(request, 0x66, "bad wol"));
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
        let wol_follows_base =
            state.sequence[state.base_index..].iter().any(|object| object.object_type == ObjectType::WrapLeft);
        if wol_follows_base && state.sequence.len() > state.base_index + 3 {
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
                203,
                4,
            );
        }
    }
    panic!("the generator never put the live base version in the right portion");
}

/// A block whose first two entries are swapped, with every checksum resealed.
fn unsorted_keys() -> FsckCase {
    let mut image = versions_image();
    let geometry = image.label.geometry;
    let slot = 7u64;
    let slot_offset = geometry.slot_offset(slot) as usize;
    // Entries of chunk 7 are key00000.. with values value-0..: entries 1 and 2 (key00001,
    // key00002, values "value-1", "value-2") have equal sizes.
    let entry_len = 14 + 8 + 7;
    let first = slot_offset + entry_len;
    let second = first + entry_len;
    let one = image.bytes[first..first + entry_len].to_vec();
    let two = image.bytes[second..second + entry_len].to_vec();
    image.bytes[first..first + entry_len].copy_from_slice(&two);
    image.bytes[second..second + entry_len].copy_from_slice(&one);
    let digest = reseal_slot(&mut image.bytes, slot_offset as u64, geometry.slot_size);
    let mut meta = image.instances[0].version.chunks.get(&slot).cloned().unwrap_or_else(|| panic!("chunk 7"));
    meta.sub_chunks[0].digest = digest;
    let delta = DeltaVersion {
        deleted: vec![DeletedChunk { chunk_id: slot, level: meta.level }],
        ..added(&image, 0, vec![meta], image.last_sequence(0))
    };
    append_raw_delta(&mut image, &delta);
    case("f_unsorted_keys", "two entries of a block swapped, checksums and digest resealed", image.bytes, 406, 4)
}
