//! One target per decoder of the format crate (docs/reliability.md L1). Each decodes its input as
//! given and again with its checksums repaired (`fixup`), and checks what a successful decode
//! promises: the encoder gives the same bytes back, the invariants the decoder claims to
//! check hold, and the functions that consume the result neither panic nor disagree with it.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::OnceLock;

use lds_format::algorithms::image::empty_base_version;
use lds_format::algorithms::recovery::{
    chain, decode_payload, physical_walk, read_valid_object, recover_backup_log, recover_version_log, ChainObject,
    LogHead, Payload, VersionLogState,
};
use lds_format::algorithms::writer::LogAppender;
use lds_format::batch::{decode_entries, WriteBatchRecord};
use lds_format::chunk::block::{decode_block, encode_entry, visit_block, BLOCK_FLAG_COMPACT};
use lds_format::chunk::filter::{filter_hash, Filter};
use lds_format::chunk::footer::{Footer, CHUNK_MAGIC, FOOTER_LEN};
use lds_format::chunk::index::decode_index;
use lds_format::chunk::view::SubChunkView;
use lds_format::codec::{align8, align_up, crc32c, Reader, Writer};
use lds_format::digest::FOOTER_FLAG_XXH3;
use lds_format::entry::{compare_internal, pack_seq_kind, EntryKind, SEQUENCE_MAX};
use lds_format::geometry::{
    plan_layout, Geometry, LayoutRequest, LogKind, GEOMETRY_LEN, SECTOR_SIZE_MAX, SECTOR_SIZE_MIN, SLOT_SIZE_MIN,
};
use lds_format::label::{Label, LabelPair, LABEL_LEN};
use lds_format::log::{
    check_wrap_right, encode_object, read_object, AreaContext, NewObject, ObjectHeader, ObjectType, WrapLeft,
    HEADER_LEN,
};
use lds_format::logref::{is_log_ref_shaped, resolve, LogRef, LOG_REF_LEN};
use lds_format::sketch::{overlap_ratio, Sketch, SKETCH_HEADER_LEN, SKETCH_PRECISION_MAX, SKETCH_PRECISION_MIN};
use lds_format::value::{
    is_pointer_shaped, pointer_refs, read_value, Extent, ValueChunkMeta, ValueFooter, ValuePointer, VALUE_FOOTER_LEN,
    VALUE_LEN_MAX,
};
use lds_format::version::meta::{ChunkMeta, SubChunkRef};
use lds_format::version::payload::{BaseVersion, CompactionJournal, DeltaVersion};
use lds_format::version::Version;

use crate::fixup;
use crate::input::Input;
use crate::seeds::{tiny_geometry, VOLUME_UUID};

/// A log area is at least 16 sectors (SPEC.md §3); shorter inputs are padded with zeros.
const AREA_SECTORS_MIN: usize = 16;
/// The sector size of the log targets' areas (the seeds' geometry).
const SECTOR_SIZE: u32 = SECTOR_SIZE_MIN;

/// Runs `check` on `data`, then on a repaired copy when repairing changes something.
fn as_given_and_repaired(data: &[u8], repair: impl Fn(&mut [u8]), check: impl Fn(&[u8])) {
    check(data);
    let mut repaired = data.to_vec();
    repair(&mut repaired);
    if repaired != data {
        check(&repaired);
    }
}

/// The input as a log area: zeros after it up to the smallest area and to a whole sector (a
/// label's geometry makes every area a multiple of the sector size, SPEC.md §3, and the
/// appender pads its writes to sectors: an area of a partial sector is no volume's).
fn padded_area(bytes: &[u8], sector_size: u32) -> Vec<u8> {
    let mut area = bytes.to_vec();
    let sector = sector_size as usize;
    let len = area.len().max(AREA_SECTORS_MIN * sector).div_ceil(sector) * sector;
    area.resize(len, 0);
    area
}

fn context(kind: LogKind, area: &[u8], sector_size: u32) -> AreaContext {
    AreaContext { kind, instance: 0, volume_uuid: VOLUME_UUID, len_area: area.len() as u64, sector_size, ofs_area: 0 }
}

/// SPEC.md §3: the areas of a valid geometry lie in order, apart, inside the volume, between
/// the two label sectors, and every log area can hold its wrap objects.
fn check_geometry(geometry: &Geometry) {
    let sector = geometry.sector();
    let instances = u64::from(geometry.instance_count);
    let version_end =
        geometry.len_version_log.checked_mul(instances).and_then(|len| len.checked_add(geometry.ofs_version_log));
    let backup_end =
        geometry.len_backup_log.checked_mul(instances).and_then(|len| len.checked_add(geometry.ofs_backup_log));
    let slots_end =
        geometry.slot_size.checked_mul(geometry.num_slots).and_then(|len| len.checked_add(geometry.ofs_slot_area));
    assert!(geometry.ofs_version_log >= sector, "geometry: a valid geometry's version logs overlap the primary label");
    assert!(
        version_end.is_some_and(|end| end <= geometry.ofs_backup_log),
        "geometry: a valid geometry's version logs overlap the backup logs"
    );
    assert!(
        backup_end.is_some_and(|end| end <= geometry.ofs_slot_area),
        "geometry: a valid geometry's backup logs overlap the slots"
    );
    assert!(
        slots_end.is_some_and(|end| end <= geometry.ofs_backup_label()),
        "geometry: a valid geometry's slots overlap the backup label or pass the volume end"
    );
    assert_eq!(
        geometry.ofs_backup_label() + sector,
        geometry.volume_len,
        "geometry: the backup label is not the last sector"
    );
    for kind in [LogKind::Version, LogKind::Backup] {
        let context = lds_format::log::area_context(geometry, kind, geometry.instance_count - 1);
        assert!(
            context.payload_len_max() >= u64::from(context.wrap_payload_len()),
            "geometry: a valid geometry's {} cannot hold a wrap object",
            kind.name()
        );
    }
}

/// `label`: a label sector (SPEC.md §4). A label that decodes encodes back to the same bytes
/// and has a valid geometry; the first two 512-byte halves as a primary and backup copy go
/// through the choice of §4.2.
pub fn label(data: &[u8]) {
    as_given_and_repaired(data, fixup::label, |bytes| {
        if let Ok(label) = Label::decode(bytes, 0) {
            assert!(label.encode()[..] == bytes[..LABEL_LEN], "label: decoding then encoding changes the bytes");
            check_geometry(&label.geometry);
            let _ = label.writable();
        }
    });
    let half = data.len().min(2 * LABEL_LEN) / 2;
    let mut primary = data[..half].to_vec();
    let mut backup = data[half..2 * half].to_vec();
    fixup::label(&mut primary);
    fixup::label(&mut backup);
    let pair = LabelPair { primary: Label::decode(&primary, 0), backup: Label::decode(&backup, 0) };
    if let Ok((_, chosen)) = pair.choose() {
        let from_copy = |copy: &Result<Label, _>| copy.as_ref().is_ok_and(|label| label == chosen);
        assert!(from_copy(&pair.primary) || from_copy(&pair.backup), "label: the chosen label is neither copy");
    }
}

/// `geometry`: the 96 bytes of SPEC.md §4.1. A geometry that decodes encodes back to the
/// same bytes; one that validates keeps every area in its place.
pub fn geometry(data: &[u8]) {
    let mut reader = Reader::new(data, "geometry", 0);
    let Ok(geometry) = Geometry::decode(&mut reader) else {
        return;
    };
    let mut writer = Writer::new();
    geometry.encode(&mut writer);
    assert!(writer.as_slice() == &data[..GEOMETRY_LEN], "geometry: decoding then encoding changes the bytes");
    if geometry.validate(0).is_ok() {
        check_geometry(&geometry);
    }
}

/// `layout`: the input chooses a `LayoutRequest` (SPEC.md §3). A planned geometry is valid,
/// keeps every size asked for, fits the device, and its label round-trips.
pub fn layout(data: &[u8]) {
    let mut input = Input::new(data);
    let flags = input.u8();
    let volume_len = input.u64();
    let sector_size = match flags & 3 {
        0 => None,
        1 => Some(SECTOR_SIZE_MIN << (input.u8() % 8)),
        _ => Some(input.u32()),
    };
    let slot_size = match (flags >> 2) & 3 {
        0 => None,
        1 => Some(SLOT_SIZE_MIN << (input.u8() % 16)),
        _ => Some(input.u64()),
    };
    let len_version_log = (flags & 0x10 != 0).then(|| u64::from(input.u32()));
    let len_backup_log = (flags & 0x20 != 0).then(|| u64::from(input.u32()));
    let instance_count = (flags & 0x40 != 0).then(|| u32::from(input.u8()));
    let request = LayoutRequest { volume_len, sector_size, slot_size, len_version_log, len_backup_log, instance_count };
    let Ok(geometry) = plan_layout(&request, VOLUME_UUID) else {
        return;
    };
    assert!(geometry.validate(0).is_ok(), "layout: plan_layout returns a geometry that does not validate");
    check_geometry(&geometry);
    assert!(geometry.volume_len <= volume_len, "layout: the volume is larger than the device");
    let kept = |asked: Option<u64>, got: u64| asked.is_none_or(|asked| asked == got);
    assert!(kept(sector_size.map(u64::from), geometry.sector()), "layout: the sector size asked for is not kept");
    assert!(kept(slot_size, geometry.slot_size), "layout: the slot size asked for is not kept");
    assert!(kept(len_version_log, geometry.len_version_log), "layout: the version log size asked for is not kept");
    assert!(kept(len_backup_log, geometry.len_backup_log), "layout: the backup log size asked for is not kept");
    assert!(
        kept(instance_count.map(u64::from), u64::from(geometry.instance_count)),
        "layout: the instance count asked for is not kept"
    );
    let label = Label::new(geometry, "fuzz");
    assert!(Label::decode(&label.encode(), 0).as_ref() == Ok(&label), "layout: the planned label does not round-trip");
}

fn check_payload(payload: &Payload, bytes: &[u8], sector_size: u32) {
    let same = |encoded: Vec<u8>, what: &str| {
        assert!(encoded == bytes, "log object: a valid {what} payload does not encode back to its bytes");
    };
    match payload {
        Payload::Base(base) => same(base.encode(), "base version"),
        Payload::Delta(delta) => same(delta.encode(), "delta version"),
        Payload::Journal(journal) => same(journal.encode(), "compaction journal"),
        Payload::Batch { first_sequence, num_entries, .. } => {
            let batch = WriteBatchRecord::decode(bytes, 0)
                .unwrap_or_else(|error| panic!("log object: a valid write batch does not decode again: {error}"));
            assert_eq!(batch.first_sequence, *first_sequence, "log object: a write batch's first sequence differs");
            assert_eq!(batch.entries.len(), *num_entries as usize, "log object: a write batch's entry count differs");
            same(batch.encode(), "write batch");
        }
        Payload::WrapLeft(wrap) => same(wrap.encode(sector_size), "WOL"),
        Payload::WrapRight => {
            assert!(bytes.iter().all(|&byte| byte == 0), "log object: a valid WOR payload is not zero")
        }
    }
}

/// SPEC.md §9.1: a chain's objects have consecutive LSNs and SNs that never decrease; each
/// follows the previous one, or is a WOR at the next sector boundary; only the last is a WOR.
fn check_chain(objects: &[ChainObject], context: &AreaContext, what: &str) {
    for pair in objects.windows(2) {
        let (previous, next) = (&pair[0], &pair[1]);
        assert_eq!(Some(next.header.lsn), previous.header.lsn.checked_add(1), "{what}: chain LSNs are not consecutive");
        assert!(next.header.sn >= previous.header.sn, "{what}: a chain's SN decreases");
        assert!(previous.object_type != ObjectType::WrapRight, "{what}: a chain continues after a WOR");
        let follows = align8(previous.header.next_offset());
        let wrap_at = align_up(follows, u64::from(context.sector_size));
        assert!(
            next.offset == follows || (next.offset == wrap_at && next.object_type == ObjectType::WrapRight),
            "{what}: a chain object at {} does not follow the one at {}",
            next.offset,
            previous.offset
        );
    }
    for object in objects {
        assert!(
            object.offset + object.header.total_len() <= context.len_area,
            "{what}: a chain object passes the area end"
        );
    }
}

fn check_log_object(area: &[u8], context: &AreaContext) {
    let _ = ObjectHeader::parse_raw(area, 0);
    if let Ok(raw) = read_object(area, 0, context) {
        let header = raw.header;
        let object = NewObject {
            object_type: raw.object_type,
            kind: context.kind,
            instance: header.instance,
            sn: header.sn,
            lsn: header.lsn,
            log_offset: header.log_offset,
            volume_uuid: header.volume_uuid,
        };
        let len = HEADER_LEN + raw.payload.len();
        assert!(
            encode_object(&object, raw.payload)[..len] == area[..len],
            "log object: a valid object does not encode back to its bytes"
        );
        if let Ok(payload) = decode_payload(&raw, 0) {
            check_payload(&payload, raw.payload, context.sector_size);
        }
        let _ = lds_cli::json::payload(header.object_type_code, raw.payload, HEADER_LEN as u64);
    }
    check_chain(&chain(area, context, 0, None).objects, context, "log object");
    let mut previous_end = 0;
    for (offset, header) in physical_walk(area, 0, u64::from(context.sector_size)) {
        assert!(offset >= previous_end, "log object: the physical walk goes backwards");
        previous_end = offset + HEADER_LEN as u64 + u64::from(header.len_payload);
        assert!(previous_end <= area.len() as u64, "log object: the physical walk passes the area end");
    }
}

/// `log_object`: the first byte chooses the log (bit 0) and the sector size (bits 1-2); the
/// rest is a log area (SPEC.md §5) with an object at offset 0. A valid object encodes back to
/// its bytes, its payload round-trips, and chains and the physical walk keep SPEC.md §9.1
/// and §15.
pub fn log_object(data: &[u8]) {
    let mut input = Input::new(data);
    let selector = input.u8();
    let kind = if selector & 1 == 0 { LogKind::Version } else { LogKind::Backup };
    let sector_size = SECTOR_SIZE_MIN << ((selector >> 1) % 4);
    let area = padded_area(input.rest(), sector_size);
    let context = context(kind, &area, sector_size);
    as_given_and_repaired(&area, |area| fixup::log_object(area, 0), |area| check_log_object(area, &context));
}

/// The writer agrees with recovery (SPEC.md §9.2 step 7 and §10.1): a delta version appended
/// where recovery puts the head is recovered as the last live object and changes nothing.
/// It holds where the engine's own writes leave the log: every live object carries the base
/// version's SN, and no valid object waits right after the append (the engine makes each
/// version log object durable before writing the next, so it never leaves one there).
fn append_after_recovery(area: &[u8], context: &AreaContext, state: &VersionLogState, sequence: &[ChainObject]) {
    if sequence[state.base_index..].iter().any(|object| object.header.sn != state.sn) {
        return;
    }
    let version = &state.version;
    let delta = DeltaVersion {
        last_sequence: version.last_sequence,
        ofs_backup_start: version.ofs_backup_start,
        lsn_backup_start: version.lsn_backup_start,
        ..DeltaVersion::default()
    };
    let mut appender = LogAppender::new(*context, state.head, state.base_offset, state.base_lsn);
    let Ok(writes) = appender.append(ObjectType::DeltaVersion, state.sn, &delta.encode()) else {
        return;
    };
    let mut next = area.to_vec();
    for write in &writes {
        let end = write.offset + write.bytes.len() as u64;
        assert!(
            end <= context.len_area,
            "version log: an append at the recovered head (offset {}) writes past the area end ({end} > {})",
            state.head.offset,
            context.len_area
        );
        next[write.offset as usize..end as usize].copy_from_slice(&write.bytes);
    }
    let Some(appended) = writes.last() else {
        panic!("version log: an append plans no write");
    };
    let end = appended.offset + appended.bytes.len() as u64;
    let wrap_at = align_up(end, u64::from(context.sector_size));
    if read_valid_object(&next, end, context).is_ok() || read_valid_object(&next, wrap_at, context).is_ok() {
        return;
    }
    let after = recover_version_log(&next, context).unwrap_or_else(|error| {
        panic!("version log: recovery fails after a delta version is appended at the recovered head: {error}")
    });
    let last = after.sequence(&next, context).last().map(|object| (object.offset, object.header.lsn));
    assert_eq!(
        last,
        Some((appended.offset, appended.lsn)),
        "version log: the delta version appended at the recovered head is not the last live object"
    );
    assert_eq!(after.base_offset, state.base_offset, "version log: an appended delta version moves the base version");
    assert!(after.version == state.version, "version log: an empty delta version changes the recovered version");
}

fn check_version_log(area: &[u8], context: &AreaContext) {
    let Ok(state) = recover_version_log(area, context) else {
        return;
    };
    state.version.assert_invariants();
    // Recovery keeps no object: walked again, its sequence has the length it counted.
    let sequence: Vec<ChainObject> = state.sequence(area, context).collect();
    assert_eq!(sequence.len(), state.sequence_len, "version log: the sequence walked again differs in length");
    let base = sequence.get(state.base_index).map(|object| (object.object_type, object.offset));
    assert_eq!(
        base,
        Some((ObjectType::BaseVersion, state.base_offset)),
        "version log: the live base version is not a base version"
    );
    for object in &sequence[state.base_index..] {
        if matches!(object.payload, Payload::Delta(_) | Payload::Journal(_)) {
            assert_eq!(object.header.sn, state.sn, "version log: a live object has another SN than its base version");
        }
    }
    for pair in sequence.windows(2) {
        let next = pair[0].header.lsn.checked_add(1);
        assert_eq!(Some(pair[1].header.lsn), next, "version log: live LSNs are not consecutive");
    }
    let head = state.head;
    assert!(
        head.offset <= context.len_area && head.offset % 8 == 0,
        "version log: the head {} is not in the area",
        head.offset
    );
    assert!(state.live_len <= context.len_area, "version log: the live region is longer than the area");
    append_after_recovery(area, context, &state, &sequence);
}

/// `version_log`: the input is a version log area of instance 0 (SPEC.md §9.2), padded to 16
/// sectors of 512 bytes. A recovered log has a base version, consecutive LSNs, the base
/// version's SN on every live DV and CJ, a head inside the area, a version whose invariants
/// hold, and agrees with the writer (`append_after_recovery`).
pub fn version_log(data: &[u8]) {
    let area = padded_area(data, SECTOR_SIZE);
    let context = context(LogKind::Version, &area, SECTOR_SIZE);
    as_given_and_repaired(&area, fixup::log_area, |area| check_version_log(area, &context));
}

fn check_backup_log(area: &[u8], context: &AreaContext, start: (u64, u64), last_sequence: u64, current_sn: u64) {
    let (ofs_backup_start, lsn_backup_start) = start;
    let Ok(state) = recover_backup_log(area, context, ofs_backup_start, lsn_backup_start, last_sequence, current_sn)
    else {
        return;
    };
    if !state.start_found {
        let empty =
            LogHead { offset: ofs_backup_start, next_lsn: lsn_backup_start, after_wrap_right: false, sn: current_sn };
        assert_eq!(state.head, empty, "backup log: nothing found, yet the head moved");
        assert!(state.batches.is_empty(), "backup log: nothing found, yet batches to replay");
        return;
    }
    let first = state.objects.first().map(|object| (object.offset, object.header.lsn));
    let wrap_at = align_up(ofs_backup_start, u64::from(context.sector_size));
    assert!(
        first.is_some_and(|(offset, lsn)| lsn == lsn_backup_start && (offset == ofs_backup_start || offset == wrap_at)),
        "backup log: the replay does not start at the start point"
    );
    for pair in state.objects.windows(2) {
        let next = pair[0].header.lsn.checked_add(1);
        assert_eq!(Some(pair[1].header.lsn), next, "backup log: LSNs are not consecutive");
    }
    let mut previous_last = 0;
    for batch in &state.batches {
        assert!(batch.first_sequence > previous_last, "backup log: replayed sequences do not increase");
        previous_last = batch.first_sequence + u64::from(batch.num_entries) - 1;
        assert!(previous_last > last_sequence, "backup log: a batch wholly at or below last_sequence is replayed");
        // What the engine does with each batch on open: recovery found it valid, so it reads.
        let raw = read_object(area, batch.offset, context)
            .unwrap_or_else(|error| panic!("backup log: a replayed batch does not read again: {error}"));
        let mut count = 0u32;
        let first_sequence = decode_entries(raw.payload, 0, |_, _, _| count += 1)
            .unwrap_or_else(|error| panic!("backup log: a replayed batch does not decode: {error}"));
        assert_eq!((first_sequence, count), (batch.first_sequence, batch.num_entries), "backup log: a batch changed");
    }
    assert!(state.head.offset <= context.len_area, "backup log: the head is past the area end");
}

/// `backup_log`: a start offset (u16, times 8), start LSN (u16), `last_sequence` (u32) and
/// current SN (u8), then a backup log area (SPEC.md §9.3) padded to 16 sectors of 512 bytes.
/// The replay starts at the start point, follows consecutive LSNs, replays batches with
/// increasing sequences above `last_sequence`, and every replayed batch decodes again.
pub fn backup_log(data: &[u8]) {
    let mut input = Input::new(data);
    let start = (u64::from(input.u16()) * 8, u64::from(input.u16()));
    let last_sequence = u64::from(input.u32());
    let current_sn = u64::from(input.u8());
    let area = padded_area(input.rest(), SECTOR_SIZE);
    let context = context(LogKind::Backup, &area, SECTOR_SIZE);
    as_given_and_repaired(&area, fixup::log_area, |area| {
        check_backup_log(area, &context, start, last_sequence, current_sn);
    });
}

/// `base_version`: a BV payload (SPEC.md §6.1). It round-trips; the version it builds keeps
/// its invariants and survives a trim (`to_base`) unchanged.
pub fn base_version(data: &[u8]) {
    let Ok(base) = BaseVersion::decode(data, 0) else {
        return;
    };
    assert!(base.encode() == data, "base version: decoding then encoding changes the bytes");
    let _ = lds_cli::json::base_version(&base);
    if let Ok(version) = Version::from_base(&base) {
        version.assert_invariants();
        let trimmed = version.to_base(base.geometry, base.instance);
        assert!(Version::from_base(&trimmed).as_ref() == Ok(&version), "base version: a trim changes the version");
    }
}

/// The version delta versions are applied to: the tiny geometry with chunks 3 (level 0) and
/// 4 (level 1).
fn sample_version() -> &'static Version {
    static VERSION: OnceLock<Version> = OnceLock::new();
    VERSION.get_or_init(|| {
        let geometry = tiny_geometry(1);
        let mut base = empty_base_version(&geometry, 0, 1);
        base.last_sequence = 40;
        for (chunk_id, level, smallest, largest) in [(3, 0, "key-00", "key-19"), (4, 1, "key-05", "key-30")] {
            base.chunks.push(ChunkMeta {
                chunk_id,
                level,
                flags: 0,
                num_entries: 20,
                smallest_seq: 1,
                largest_seq: 40,
                len_data: 4096,
                smallest_key: smallest.as_bytes().to_vec(),
                largest_key: largest.as_bytes().to_vec(),
                sub_chunks: vec![SubChunkRef { slot: chunk_id, digest: [chunk_id as u8; 32] }],
                value_refs: Vec::new(),
                log_start: None,
            });
        }
        Version::from_base(&base).unwrap_or_else(|error| panic!("delta_version: the sample version: {error}"))
    })
}

/// `delta_version`: a DV payload (SPEC.md §6.2). It round-trips; applied to a sample version
/// it either keeps the invariants or fails leaving the version unchanged.
pub fn delta_version(data: &[u8]) {
    let Ok(delta) = DeltaVersion::decode(data, 0) else {
        return;
    };
    assert!(delta.encode() == data, "delta version: decoding then encoding changes the bytes");
    let _ = lds_cli::json::delta_version(&delta);
    let sample = sample_version();
    let mut version = sample.clone();
    match version.apply(&delta) {
        Ok(()) => version.assert_invariants(),
        Err(_) => assert!(&version == sample, "delta version: a failed apply changes the version"),
    }
}

/// `compaction_journal`: a CJ payload (SPEC.md §6.3). It round-trips and its cleaned chunks
/// are inputs.
pub fn compaction_journal(data: &[u8]) {
    let Ok(journal) = CompactionJournal::decode(data, 0) else {
        return;
    };
    assert!(journal.encode() == data, "compaction journal: decoding then encoding changes the bytes");
    assert!(
        journal.cleaned.iter().all(|cleaned| journal.inputs.contains(cleaned)),
        "compaction journal: a cleaned chunk is not an input"
    );
    let _ = lds_cli::json::compaction_journal(&journal);
}

/// `chunk_meta`: chunk metadata (SPEC.md §6.4). What it decoded encodes back to the same
/// bytes, and `encoded_len` is their length.
pub fn chunk_meta(data: &[u8]) {
    let mut reader = Reader::new(data, "chunk metadata", 0);
    let Ok(meta) = ChunkMeta::decode(&mut reader) else {
        return;
    };
    let used = reader.position();
    let mut writer = Writer::new();
    meta.encode(&mut writer);
    assert!(writer.as_slice() == &data[..used], "chunk metadata: decoding then encoding changes the bytes");
    assert_eq!(meta.encoded_len(), used, "chunk metadata: encoded_len is not the encoded length");
    assert!(meta.smallest_key <= meta.largest_key, "chunk metadata: the key range is reversed");
    let _ = lds_cli::json::chunk_meta(&meta);
}

/// `write_batch`: a WB payload (SPEC.md §7). It round-trips, `encoded_len` is its length, and
/// its sequences lie in 1..2^56.
pub fn write_batch(data: &[u8]) {
    let Ok(batch) = WriteBatchRecord::decode(data, 0) else {
        return;
    };
    assert!(batch.encode() == data, "write batch: decoding then encoding changes the bytes");
    assert_eq!(batch.encoded_len(), data.len(), "write batch: encoded_len is not the encoded length");
    let last = batch.first_sequence.checked_add(batch.entries.len() as u64 - 1);
    assert!(
        batch.first_sequence >= 1 && last.is_some_and(|last| last <= SEQUENCE_MAX),
        "write batch: sequences outside 1..2^56"
    );
}

/// `wrap`: a WOL or WOR payload (SPEC.md §5.2). A WOL round-trips at its sector size; a WOR
/// that checks is all zero.
pub fn wrap(data: &[u8]) {
    if let Ok(wrap) = WrapLeft::decode(data, 0) {
        let sector_size = data.len() + HEADER_LEN;
        if sector_size.is_power_of_two() && (SECTOR_SIZE_MIN as usize..=SECTOR_SIZE_MAX as usize).contains(&sector_size)
        {
            assert!(wrap.encode(sector_size as u32) == data, "wrap: a WOL does not encode back to its bytes");
        }
    }
    if check_wrap_right(data, 0).is_ok() {
        assert!(data.iter().all(|&byte| byte == 0), "wrap: a WOR that checks is not zero");
    }
}

/// The seeds' slot size.
const SLOT_SIZE: u64 = SLOT_SIZE_MIN;

fn repair_footer(bytes: &mut [u8]) {
    // SPEC.md §8.3: the footer's crc32c is its last field and covers the bytes before it.
    if bytes.len() >= FOOTER_LEN {
        let crc = crc32c(&bytes[..FOOTER_LEN - 4]);
        bytes[FOOTER_LEN - 4..FOOTER_LEN].copy_from_slice(&crc.to_le_bytes());
    }
}

/// `footer`: a chunk footer (SPEC.md §8.3) of a 64 KiB slot. A footer that decodes encodes
/// back to the same bytes and lays out body, index and filter in order before itself.
pub fn footer(data: &[u8]) {
    as_given_and_repaired(data, repair_footer, |bytes| {
        let _ = Footer::parse_raw(bytes, 0);
        let Ok(footer) = Footer::decode(bytes, 0, SLOT_SIZE) else {
            return;
        };
        assert!(footer.encode()[..] == bytes[..FOOTER_LEN], "footer: decoding then encoding changes the bytes");
        let filter_end = u64::from(footer.ofs_filter) + u64::from(footer.len_filter);
        assert_eq!(filter_end, SLOT_SIZE - FOOTER_LEN as u64, "footer: the filter does not end at the footer");
        assert!(
            footer.len_body <= footer.ofs_index && footer.ofs_index <= footer.ofs_filter,
            "footer: areas out of order"
        );
        let _ = lds_cli::json::footer(&footer);
    });
}

/// A footer whose fields the index and filter targets set.
fn blank_footer() -> Footer {
    Footer {
        version_major: 1,
        level: 0,
        flags: 0,
        instance: 0,
        chunk_id: 0,
        sub_chunk_index: 0,
        num_sub_chunks: 1,
        num_blocks: 0,
        num_entries: 0,
        smallest_seq: 0,
        largest_seq: 0,
        len_body: 0,
        ofs_index: 0,
        len_index: 0,
        index_crc32c: 0,
        ofs_filter: 0,
        len_filter: 0,
        filter_crc32c: 0,
        slot_size: SLOT_SIZE as u32,
        volume_uuid: VOLUME_UUID,
        digest: [0; 32],
        ofs_sketch: 0,
        len_sketch: 0,
        sketch_crc32c: 0,
        footer_crc32c: 0,
    }
}

/// `index`: `num_blocks` (u16) and `len_body` (u32), then a block index (SPEC.md §8.2),
/// decoded with its checksum wrong and right. An index that decodes lists `num_blocks`
/// contiguous blocks from offset 0 to `len_body` in strictly increasing key order, and
/// encodes back to the same bytes.
pub fn index(data: &[u8]) {
    let mut input = Input::new(data);
    let mut footer = blank_footer();
    footer.num_blocks = u32::from(input.u16());
    footer.len_body = input.u32();
    let bytes = input.rest();
    for index_crc32c in [0, crc32c(bytes)] {
        footer.index_crc32c = index_crc32c;
        let Ok(entries) = decode_index(bytes, 0, &footer) else {
            continue;
        };
        assert_eq!(entries.len(), footer.num_blocks as usize, "index: the entry count is not num_blocks");
        let mut writer = Writer::new();
        let mut expected_offset = 0u64;
        for entry in &entries {
            assert_eq!(u64::from(entry.ofs_block), expected_offset, "index: blocks are not contiguous from 0");
            expected_offset += u64::from(entry.len_block);
            writer.u32(entry.ofs_block).u32(entry.len_block).u64(entry.last_seq_kind).key(&entry.last_key);
        }
        assert_eq!(expected_offset, u64::from(footer.len_body), "index: the blocks do not end at len_body");
        for pair in entries.windows(2) {
            let order =
                compare_internal(&pair[0].last_key, pair[0].last_seq_kind, &pair[1].last_key, pair[1].last_seq_kind);
            assert_eq!(order, Ordering::Less, "index: last keys are not in increasing order");
        }
        assert!(writer.as_slice() == bytes, "index: decoding then encoding changes the bytes");
    }
}

/// `filter`: a filter (SPEC.md §8.3), decoded with its checksum wrong and right. A filter
/// that decodes encodes back to the same bytes and answers queries.
pub fn filter(data: &[u8]) {
    let mut footer = blank_footer();
    for filter_crc32c in [0, crc32c(data)] {
        footer.filter_crc32c = filter_crc32c;
        let Ok(filter) = Filter::decode(data, 0, &footer) else {
            continue;
        };
        let mut writer = Writer::new();
        filter.encode(&mut writer);
        assert!(writer.as_slice() == data, "filter: decoding then encoding changes the bytes");
        for key in [&b"key-00"[..], b"", data] {
            let _ = filter.may_contain(key);
        }
    }
}

/// `block`: a block with its trailer (SPEC.md §8.2), fixed or compact entries. A block that
/// decodes holds entries in strictly increasing internal-key order and encodes back to the
/// same bytes (a compact entry's varints are in their shortest form).
pub fn block(data: &[u8]) {
    as_given_and_repaired(data, fixup::block, |bytes| {
        let Ok(entries) = decode_block(bytes, 0) else {
            return;
        };
        // Fixed or compact entries, as the trailer's flag says (format 1.7).
        let flag = u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap_or([0; 4]))
            & BLOCK_FLAG_COMPACT;
        let mut encoded = Vec::new();
        for entry in &entries {
            encode_entry(&mut encoded, flag != 0, entry.key, entry.sequence, entry.kind, entry.value);
        }
        encoded.extend_from_slice(&(entries.len() as u32 | flag).to_le_bytes());
        let crc = crc32c(&encoded);
        encoded.extend_from_slice(&crc.to_le_bytes());
        assert!(encoded == bytes, "block: decoding then encoding changes the bytes");
        for pair in entries.windows(2) {
            let order = compare_internal(
                pair[0].key,
                pack_seq_kind(pair[0].sequence, pair[0].kind),
                pair[1].key,
                pack_seq_kind(pair[1].sequence, pair[1].kind),
            );
            assert_eq!(order, Ordering::Less, "block: entries are not in increasing order");
        }
        let visited = visit_block(bytes, 0, |_| {});
        assert_eq!(visited.ok(), Some(entries.len() as u32), "block: visit_block disagrees with decode_block");
    });
}

/// `slot`: a body length (u16), the body, then the tail (index, filter, footer): a 64 KiB
/// slot holding the body at its start and the tail at its end (SPEC.md §8.1). Opens the
/// sub-chunk, reads every block and entry, verifies the digest and queries the filter.
pub fn slot(data: &[u8]) {
    let mut input = Input::new(data);
    let body_len = usize::from(input.u16());
    let bytes = input.rest();
    let (body, tail) = bytes.split_at(body_len.min(bytes.len()));
    let slot_size = SLOT_SIZE as usize;
    let mut slot = vec![0u8; slot_size];
    let body = &body[..body.len().min(slot_size)];
    slot[..body.len()].copy_from_slice(body);
    let tail = &tail[tail.len().saturating_sub(slot_size - body.len())..];
    slot[slot_size - tail.len()..].copy_from_slice(tail);
    as_given_and_repaired(&slot, fixup::slot, |slot| {
        let Ok(view) = SubChunkView::open(slot, 0) else {
            return;
        };
        assert!(slot[slot_size - FOOTER_LEN..].starts_with(&CHUNK_MAGIC), "slot: a sub-chunk opens without its magic");
        for number in 0..view.index.len() {
            let _ = view.block(number);
        }
        let _ = view.verify_digest(0);
        if let Ok(entries) = view.entries(0) {
            for entry in entries {
                let _ = view.filter.may_contain(entry.key);
            }
        }
    });
}

/// Hashes a key sketch is fed besides those the input gives: the extremes of the register
/// index and of the rank (0 has the largest rank, which the sketch caps at `65 - p`).
const EDGE_HASHES: [u64; 4] = [0, 1, u64::MAX, 1 << 63];

/// `key_sketch`: a key sketch (SPEC.md §8.7), decoded with its crc32c wrong and right. A
/// sketch that decodes encodes back to the same bytes, has the length its precision makes,
/// estimates a finite count that is 0 exactly when every register is 0, merges with itself
/// and an empty sketch of its precision without change and refuses another precision; keys
/// added to it (hashes from the input and the extremes) leave a sketch that decodes with its
/// own crc32c and dominates the one before (merging the old one in changes nothing).
pub fn key_sketch(data: &[u8]) {
    for crc in [0, crc32c(data)] {
        let Ok(sketch) = Sketch::decode(data, 0, crc) else {
            continue;
        };
        let precision = sketch.precision();
        assert!(sketch.encode() == data, "key sketch: decoding then encoding changes the bytes");
        assert!(
            (SKETCH_PRECISION_MIN..=SKETCH_PRECISION_MAX).contains(&precision)
                && data.len() == Sketch::encoded_len(precision),
            "key sketch: a sketch decodes with precision {precision} from {} bytes",
            data.len()
        );
        let estimate = sketch.estimate();
        let empty = data[SKETCH_HEADER_LEN..].iter().all(|&rank| rank == 0);
        assert!(estimate.is_finite() && estimate >= 0.0, "key sketch: the estimate is {estimate}");
        assert_eq!(estimate == 0.0, empty, "key sketch: the estimate is {estimate} (empty: {empty})");
        let mut doubled = sketch.clone();
        assert!(doubled.merge(&sketch) && doubled == sketch, "key sketch: merging a sketch with itself changes it");
        let mut union = Sketch::new(precision);
        assert!(union.merge(&sketch) && union == sketch, "key sketch: merged into an empty sketch it changes");
        let other = if precision == SKETCH_PRECISION_MAX { precision - 1 } else { precision + 1 };
        assert!(!doubled.merge(&Sketch::new(other)) && doubled == sketch, "key sketch: merged another precision");
        match overlap_ratio([&sketch, &sketch]) {
            Some(ratio) => assert!((0.0..=1.0).contains(&ratio), "key sketch: an overlap ratio of {ratio}"),
            None => assert!(empty, "key sketch: no overlap ratio of a sketch that is not empty with itself"),
        }
        let mut grown = sketch.clone();
        let hashes = data.chunks(8).map(|chunk| {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            u64::from_le_bytes(word)
        });
        for hash in EDGE_HASHES.into_iter().chain(hashes.take(64)).chain([filter_hash(data)]) {
            grown.add_hash(hash);
        }
        let encoded = grown.encode();
        let decoded = Sketch::decode(&encoded, 0, crc32c(&encoded));
        assert!(decoded.as_ref() == Ok(&grown), "key sketch: a sketch with keys added does not decode: {decoded:?}");
        let mut dominated = grown.clone();
        assert!(dominated.merge(&sketch) && dominated == grown, "key sketch: adding keys lowered a register");
    }
}

/// The slot sizes of the value chunk footer target: 64 KiB to 1 MiB, as the input's first
/// byte chooses (larger slots would only make afl slower, the checks are the same).
const VALUE_SLOT_SIZES: u8 = 5;

/// `value_footer`: a selector byte (the slot size, 64 KiB shifted by 0 to 4), then a value
/// chunk footer (SPEC.md §8.6), then bytes for its body; decoded as given and with its
/// crc32c repaired. A footer that decodes encodes back to the same bytes, keeps what the
/// decoder checks (`len_body` fits before the footer, id not 0, no reserved flag), agrees with
/// the raw reading `lds dump` shows, and its metadata round-trips (SPEC.md §6.5). Sealed
/// with the digest of a body (the input's bytes after the footer, cycled to `len_body`), it
/// decodes again and verifies that body and no other.
pub fn value_footer(data: &[u8]) {
    let mut input = Input::new(data);
    let slot_size = SLOT_SIZE << (input.u8() % VALUE_SLOT_SIZES);
    let rest = input.rest();
    as_given_and_repaired(rest, fixup::value_footer, |bytes| check_value_footer(bytes, slot_size));
}

fn check_value_footer(bytes: &[u8], slot_size: u64) {
    let _ = lds_cli::json::value_footer(bytes);
    let Ok(footer) = ValueFooter::decode(bytes, 0, slot_size) else {
        return;
    };
    let raw = &bytes[..VALUE_FOOTER_LEN];
    assert!(footer.encode()[..] == raw[..], "value footer: decoding then encoding changes the bytes");
    assert!(ValueFooter::has_magic(raw), "value footer: a footer decodes without its magic");
    assert!(
        u64::from(footer.len_body) + VALUE_FOOTER_LEN as u64 <= slot_size
            && footer.value_chunk_id != 0
            && footer.flags & !FOOTER_FLAG_XXH3 == 0
            && u64::from(footer.slot_size) == slot_size,
        "value footer: a footer decodes that breaks SPEC.md §8.6: {footer:?}"
    );
    let shown = lds_cli::json::value_footer(raw).unwrap_or_else(|| panic!("value footer: dump does not show it"));
    assert!(
        shown["value_chunk_id"] == footer.value_chunk_id
            && shown["len_body"] == footer.len_body
            && shown["instance"] == footer.instance
            && shown["flags"] == footer.flags,
        "value footer: dump's raw reading {shown} differs from the decoder's {footer:?}"
    );
    let meta = ValueChunkMeta::of_footer(&footer, 7);
    let mut writer = Writer::new();
    meta.encode(&mut writer);
    let decoded = ValueChunkMeta::decode(&mut Reader::new(writer.as_slice(), "value chunk metadata", 0));
    assert!(decoded == Ok(meta), "value footer: its metadata does not round-trip: {decoded:?}");
    let _ = lds_cli::json::value_chunk_meta(&meta);
    // A body for it: the bytes after the footer, repeated to `len_body`.
    let tail = &bytes[VALUE_FOOTER_LEN..];
    let body: Vec<u8> = if tail.is_empty() {
        vec![0; footer.len_body as usize]
    } else {
        tail.iter().copied().cycle().take(footer.len_body as usize).collect()
    };
    let _ = footer.verify_digest(&body, 0);
    let sealed = ValueFooter { digest: footer.digest_of(&body), ..footer.clone() };
    let encoded = sealed.encode();
    let again = ValueFooter::decode(&encoded, 0, slot_size);
    assert!(again.as_ref() == Ok(&sealed), "value footer: a footer sealed over a body does not decode: {again:?}");
    assert!(sealed.verify_digest(&body, 0).is_ok(), "value footer: a sealed footer does not verify its body");
    let mut longer = body.clone();
    longer.push(0);
    assert!(sealed.verify_digest(&longer, 0).is_err(), "value footer: a body longer than len_body verifies");
    if let Some(first) = longer.first_mut() {
        *first ^= 1;
        longer.pop();
        if !longer.is_empty() {
            assert!(sealed.verify_digest(&longer, 0).is_err(), "value footer: a changed body verifies");
        }
    }
}

/// Values read through the pointer target's pointers are at most this long (a pointer may
/// name 1 GiB).
const POINTED_VALUE_MAX: u32 = 1 << 20;

/// `value_pointer`: a value pointer (SPEC.md §8.6), decoded as given and with its counts
/// repaired (`num_extents` from its length, `len_value` the sum of its extents). A pointer
/// that decodes encodes back to the same bytes and has the shape a block decoder accepts;
/// its extents are not empty, in no value chunk 0, and add up to `len_value` (1 to 2^30), as
/// do its value references; a value read through it (extents' bytes made up) checks exactly
/// when its crc32c is the pointer's, and a read error is returned, never a value.
pub fn value_pointer(data: &[u8]) {
    as_given_and_repaired(data, fixup::value_pointer, check_value_pointer);
}

fn check_value_pointer(bytes: &[u8]) {
    let _ = is_pointer_shaped(bytes);
    let Ok(pointer) = ValuePointer::decode(bytes, 0) else {
        return;
    };
    assert!(pointer.encode() == bytes, "value pointer: decoding then encoding changes the bytes");
    assert_eq!(pointer.encoded_len(), bytes.len(), "value pointer: encoded_len is not its length");
    assert!(is_pointer_shaped(bytes), "value pointer: a pointer decodes that a block decoder refuses");
    let total: u64 = pointer.extents.iter().map(|extent| u64::from(extent.len)).sum();
    assert!(
        !pointer.extents.is_empty()
            && pointer.extents.iter().all(|extent| extent.len > 0 && extent.value_chunk_id != 0)
            && total == u64::from(pointer.len_value)
            && (1..=VALUE_LEN_MAX).contains(&total),
        "value pointer: a pointer decodes that breaks SPEC.md §8.6: {pointer:?}"
    );
    let mut refs = BTreeMap::new();
    pointer.add_refs(&mut refs);
    let mut shaped = BTreeMap::new();
    pointer_refs(bytes, &mut shaped);
    assert!(refs == shaped, "value pointer: pointer_refs and add_refs differ");
    assert_eq!(refs.values().sum::<u64>(), total, "value pointer: its references do not add up to its value");
    let _ = lds_cli::json::value_pointer(&pointer);
    if pointer.len_value > POINTED_VALUE_MAX {
        return;
    }
    let extent_bytes =
        |extent: &Extent| -> Vec<u8> { (0..extent.len).map(|index| (extent.offset ^ index) as u8).collect() };
    let value: Vec<u8> = pointer.extents.iter().flat_map(extent_bytes).collect();
    let read = read_value(&pointer, |extent| Ok::<_, String>(extent_bytes(extent)), |error| error.to_string());
    assert_eq!(
        read.is_ok(),
        crc32c(&value) == pointer.value_crc32c,
        "value pointer: read_value disagrees with the value's crc32c"
    );
    let checked = ValuePointer { value_crc32c: crc32c(&value), ..pointer.clone() };
    let read = read_value(&checked, |extent| Ok::<_, String>(extent_bytes(extent)), |error| error.to_string());
    assert!(read.as_ref() == Ok(&value), "value pointer: a value that matches its crc32c does not read");
    assert!(checked.check_value(&value[1..], 0).is_err(), "value pointer: a value one byte short checks");
    let failed = read_value(&checked, |_| Err::<Vec<u8>, _>("unreadable".to_string()), |error| error.to_string());
    assert!(failed == Err("unreadable".into()), "value pointer: a read error does not come back");
}

/// `log_ref`: a log reference (24 bytes, SPEC.md §8.9), the referencing entry's sequence
/// number (u64), its key (a length byte, then the key), then a backup log area of instance 0
/// (padded to 16 sectors of 512 bytes) whose objects are read as given and with their
/// checksums repaired. A reference that decodes encodes back to its bytes, names an 8-byte
/// aligned object and a value of at least a byte. Following it agrees with reading the
/// object and its batch on their own (`read_object`, `WriteBatchRecord::decode`): it
/// resolves exactly when that object is a valid write batch with the reference's lsn whose
/// entry `entry_index` is a put of the key, the sequence number and `len_value` bytes, and
/// then to that put's value.
pub fn log_ref(data: &[u8]) {
    let mut input = Input::new(data);
    let mut reference = [0u8; LOG_REF_LEN];
    for byte in &mut reference {
        *byte = input.u8();
    }
    let sequence = input.u64();
    let key_len = usize::from(input.u8());
    let rest = input.rest();
    let (key, area) = rest.split_at(key_len.min(rest.len()));
    let decoded = LogRef::decode(&reference, 0);
    assert_eq!(is_log_ref_shaped(&reference), decoded.is_ok(), "log reference: the shape check disagrees");
    let mut longer = reference.to_vec();
    longer.push(0);
    assert!(LogRef::decode(&longer, 0).is_err(), "log reference: 25 bytes decode");
    let Ok(reference) = decoded else {
        return;
    };
    assert!(
        reference.encode() == reference_bytes(&reference) && reference.encode()[..] == longer[..LOG_REF_LEN],
        "log reference: decoding then encoding changes the bytes"
    );
    assert!(
        reference.ofs_object % 8 == 0 && reference.len_value > 0,
        "log reference: a reference decodes that breaks SPEC.md §8.9: {reference:?}"
    );
    let _ = lds_cli::json::log_ref(&reference);
    let area = padded_area(area, SECTOR_SIZE);
    let context = context(LogKind::Backup, &area, SECTOR_SIZE);
    as_given_and_repaired(&area, fixup::log_area, |area| check_log_ref(&reference, area, &context, key, sequence));
}

/// The reference's fields in SPEC.md §8.9's order, written out here rather than by its encoder.
fn reference_bytes(reference: &LogRef) -> [u8; LOG_REF_LEN] {
    let mut bytes = [0u8; LOG_REF_LEN];
    bytes[..8].copy_from_slice(&reference.lsn.to_le_bytes());
    bytes[8..16].copy_from_slice(&reference.ofs_object.to_le_bytes());
    bytes[16..20].copy_from_slice(&reference.entry_index.to_le_bytes());
    bytes[20..].copy_from_slice(&reference.len_value.to_le_bytes());
    bytes
}

/// The value SPEC.md §8.9 says `reference` names in `area`, found with the plain decoders.
fn referenced_put(
    reference: &LogRef,
    area: &[u8],
    context: &AreaContext,
    key: &[u8],
    sequence: u64,
) -> Option<Vec<u8>> {
    let raw = read_object(area, reference.ofs_object, context).ok()?;
    if raw.object_type != ObjectType::WriteBatch || raw.header.lsn != reference.lsn {
        return None;
    }
    let batch = WriteBatchRecord::decode(raw.payload, 0).ok()?;
    let entry = batch.entries.get(reference.entry_index as usize)?;
    let entry_sequence = batch.first_sequence.checked_add(u64::from(reference.entry_index))?;
    let matches = entry.kind == EntryKind::Put
        && entry.key == key
        && entry_sequence == sequence
        && entry.value.len() == reference.len_value as usize;
    matches.then(|| entry.value.clone())
}

fn check_log_ref(reference: &LogRef, area: &[u8], context: &AreaContext, key: &[u8], sequence: u64) {
    let object = usize::try_from(reference.ofs_object).ok().and_then(|start| area.get(start..)).unwrap_or(&[]);
    let resolved = resolve(reference, object, context, key, sequence);
    let expected = referenced_put(reference, area, context, key, sequence);
    match (&resolved, &expected) {
        (Ok(value), Some(put)) => assert!(value == put, "log reference: it resolves to another value than the put"),
        (Ok(_), None) => panic!("log reference: it resolves where the object and its batch say it does not"),
        (Err(error), Some(_)) => panic!("log reference: it does not resolve ({error}) where it names the put"),
        (Err(_), None) => {}
    }
}
