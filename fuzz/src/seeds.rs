//! The seed corpora in fuzz/corpus/, built deterministically (docs/reliability.md I8): small volume
//! images written by the real engine on the simulated device (and one by the format crate's
//! image builder, for a compaction journal, which the engine does not write yet), the
//! structures the decoder targets read, cut out of those images, and a few simulator runs.
//! `cargo run -p lds-fuzz --bin make-corpus` writes them; a test checks that the committed
//! corpus is what this module builds.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use lds_engine::{Db, Options};
use lds_format::algorithms::image::ImageBuilder;
use lds_format::algorithms::recovery::{physical_walk, recover_version_log};
use lds_format::batch::BatchEntry;
use lds_format::chunk::filter::filter_hash;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::chunk::index::decode_index;
use lds_format::chunk::view::SubChunkView;
use lds_format::codec::Writer;
use lds_format::digest::DigestKind;
use lds_format::entry::EntryKind;
use lds_format::geometry::{Geometry, LogKind, SLOT_SIZE_MIN};
use lds_format::label::{Label, LABEL_LEN};
use lds_format::log::{area_context, encode_object, read_object, NewObject, ObjectType};
use lds_format::logref::LogRef;
use lds_format::sketch::Sketch;
use lds_format::value::{ValueFormat, ValuePacker};
use lds_format::version::payload::{CompactionJournal, DeltaVersion};
use lds_sim::sim_device::SimDevice;
use lds_sim::workload::{apply_op, Op};
use lds_volume::undo::{MemorySink, UndoHeader, UndoLog};
use lds_volume::BlockDevice;

use crate::sim::SimInput;
use crate::undo::MemoryDevice;

/// The uuid of every seed volume, and of the log targets' areas.
pub const VOLUME_UUID: [u8; 16] = *b"lds-fuzz-volume!";

/// 512-byte sectors, a 16 KiB version log and an 8 KiB backup log per instance, then five
/// 64 KiB slots: near the smallest volume SPEC.md §3 and §16 allow (four slots of 64 KiB, 16
/// sectors a log), so that an image is an afl input of about 345 KiB. The areas are packed
/// rather than aligned to the slot size as `plan_layout` does; only sector alignment is
/// required.
pub fn tiny_geometry(instance_count: u32) -> Geometry {
    const SECTOR: u64 = 512;
    const LEN_VERSION_LOG: u64 = 16 << 10;
    const LEN_BACKUP_LOG: u64 = 8 << 10;
    const NUM_SLOTS: u64 = 5;
    let instances = u64::from(instance_count);
    let ofs_version_log = SECTOR;
    let ofs_backup_log = ofs_version_log + instances * LEN_VERSION_LOG;
    let ofs_slot_area = ofs_backup_log + instances * LEN_BACKUP_LOG;
    Geometry {
        volume_uuid: VOLUME_UUID,
        sector_size: SECTOR as u32,
        instance_count,
        volume_len: ofs_slot_area + NUM_SLOTS * SLOT_SIZE_MIN + SECTOR,
        ofs_version_log,
        len_version_log: LEN_VERSION_LOG,
        ofs_backup_log,
        len_backup_log: LEN_BACKUP_LOG,
        ofs_slot_area,
        slot_size: SLOT_SIZE_MIN,
        num_slots: NUM_SLOTS,
    }
}

/// One seed file.
pub struct Seed {
    /// The target (a folder of fuzz/corpus/).
    pub target: &'static str,
    /// The file name.
    pub name: String,
    /// The input.
    pub bytes: Vec<u8>,
}

impl Seed {
    /// Images are stored gzipped (the image and repair targets take either form).
    pub fn file_name(&self) -> String {
        if matches!(self.target, "image" | "repair") {
            format!("{}.gz", self.name)
        } else {
            self.name.clone()
        }
    }

    /// The file's bytes.
    pub fn file_bytes(&self) -> Vec<u8> {
        if matches!(self.target, "image" | "repair") {
            compress(&self.bytes)
        } else {
            self.bytes.clone()
        }
    }
}

/// gzip with no time stamp, so that the same bytes compress the same way.
pub fn compress(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::best());
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

fn put(number: u32, len: usize, sync: bool) -> Op {
    let value = format!("value-{number}-").into_bytes().into_iter().cycle().take(len).collect();
    Op::Put { key: format!("key-{:02}", number % 40).into_bytes(), value, sync }
}

/// Runs `ops` with the engine on a freshly formatted tiny volume and returns the image, or
/// what was durable when `crash` (everything unflushed lost).
fn engine_image(instance_count: u32, instance: u32, ops: &[Op], crash: bool) -> Vec<u8> {
    let label = Label::new(tiny_geometry(instance_count), "fuzz");
    let device = SimDevice::new(ImageBuilder::format(label).bytes);
    let options = Options { instance, ..lds_sim::workload::options(!crash) };
    let open = || {
        Db::open_device(Arc::new(device.clone()), Path::new("seed"), options.clone())
            .map(|(db, _)| db)
            .unwrap_or_else(|error| panic!("seed: the engine cannot open the tiny volume: {error}"))
    };
    let mut db = open();
    for op in ops {
        if *op == Op::Reopen {
            db.close().unwrap_or_else(|error| panic!("seed: close: {error}"));
            db = open();
        } else {
            apply_op(&db, op).unwrap_or_else(|error| panic!("seed: {}: {error}", op.describe()));
        }
    }
    if crash {
        return device.durable(512);
    }
    db.close().unwrap_or_else(|error| panic!("seed: close: {error}"));
    device.current()
}

/// A chunk, a journaled compaction of it that has one output persisted and its input
/// cleaned, and a batch after them, written by the format crate's image builder.
fn journal_image() -> Vec<u8> {
    let expect = |result: Result<(), lds_format::algorithms::writer::AppendError>| {
        result.unwrap_or_else(|error| panic!("seed: journal image: {error}"));
    };
    let mut image = ImageBuilder::format(Label::new(tiny_geometry(1), "fuzz"));
    let entries = |first: u64| -> Vec<_> {
        (0..12u64)
            .map(|n| (format!("key-{n:02}").into_bytes(), first + n, EntryKind::Put, format!("v{n}").into_bytes()))
            .collect()
    };
    let input = image.write_chunk(0, 0, 0, 0, &entries(1));
    image.reserve_sequences(0, 12);
    let delta = DeltaVersion { added: vec![input], last_sequence: 12, lsn_backup_start: 1, ..DeltaVersion::default() };
    expect(image.append_delta(0, &delta));
    let output = image.write_chunk(0, 1, 1, 0, &entries(1));
    let journal = CompactionJournal {
        compaction_id: 1,
        source_level: 0,
        target_level: 1,
        resume_key: b"key-11".to_vec(),
        inputs: vec![0],
        cleaned: vec![0],
        outputs: vec![output],
    };
    expect(image.append_journal(0, &journal));
    let batch = vec![BatchEntry { kind: EntryKind::Delete, key: b"key-03".to_vec(), value: Vec::new() }];
    image.append_batch(0, batch).unwrap_or_else(|error| panic!("seed: journal image: {error}"));
    image.bytes
}

/// The simulator's journal workload, as durable when a crash interrupted a journaled
/// compaction that had cleaned inputs already (the engine's own journal records).
fn engine_journal_crash() -> Vec<u8> {
    use lds_sim::sim_device::{apply, Event};
    let workload = lds_sim::workload::named("journal").unwrap_or_else(|| panic!("seed: the journal workload"));
    let image = lds_sim::workload::formatted_image().unwrap_or_else(|error| panic!("seed: {error}"));
    let run = lds_sim::workload::run(&workload, image, true).unwrap_or_else(|error| panic!("seed: {error}"));
    let mut durable = run.history.initial.as_ref().clone();
    let mut pending = Vec::new();
    for event in &run.history.events {
        match event {
            Event::Write(index) => pending.push(*index),
            Event::Flush(made) => {
                for &index in pending.iter().filter(|index| made.contains(index)) {
                    apply(&mut durable, &run.history.writes[index], run.sector_size, None);
                }
                pending.retain(|index| !made.contains(index));
                let Ok((_, Ok(recovery))) = lds_volume::inspect::recover(
                    &lds_volume::MemoryImage(&durable),
                    &lds_sim::workload::formatted_geometry(),
                    0,
                ) else {
                    continue;
                };
                if recovery.version_log.unfinished_compactions.values().any(|journal| journal.cleaned.len() >= 2) {
                    return durable;
                }
            }
        }
    }
    panic!("seed: the journal workload never cleaned two inputs")
}

/// The seed images, by name.
fn images() -> Vec<(&'static str, Vec<u8>)> {
    let few: Vec<Op> =
        (0..8).map(|n| put(n, 20, n % 3 == 2)).chain([Op::Delete { key: b"key-01".to_vec(), sync: true }]).collect();
    let flushed: Vec<Op> = (0..20)
        .map(|n| put(n, 30, false))
        .chain([Op::Flush])
        .chain((20..30).map(|n| put(n, 30, false)))
        .chain([Op::Delete { key: b"key-05".to_vec(), sync: false }, put(30, 10, true)])
        .collect();
    let mut compacted = Vec::new();
    for round in 0..5 {
        compacted.extend((0..12).map(|n| put(round * 12 + n, 40, n == 11)));
        compacted.push(Op::Flush);
    }
    compacted.extend([Op::Compact, put(99, 10, true)]);
    let wrapped: Vec<Op> = (0..160).map(|n| put(n * 7, 60, n % 16 == 0)).chain([Op::Reopen, put(1, 5, true)]).collect();
    let trimmed: Vec<Op> =
        (0..90).flat_map(|n| [put(n * 3, 16, false), if n % 3 == 2 { Op::Compact } else { Op::Flush }]).collect();
    let crashed: Vec<Op> = (0..30).map(|n| put(n, 50, n == 10)).collect();
    let two: Vec<Op> = (0..10).map(|n| put(n, 20, false)).chain([Op::Flush, put(3, 8, true)]).collect();
    vec![
        ("empty", ImageBuilder::format(Label::new(tiny_geometry(1), "fuzz")).bytes),
        ("few-batches", engine_image(1, 0, &few, false)),
        ("flushed", engine_image(1, 0, &flushed, false)),
        ("compacted", engine_image(1, 0, &compacted, false)),
        ("wrapped", engine_image(1, 0, &wrapped, false)),
        ("trimmed", engine_image(1, 0, &trimmed, false)),
        ("crashed", engine_image(1, 0, &crashed, true)),
        ("two-instances", engine_image(2, 1, &two, false)),
        ("journal", journal_image()),
        ("journal-engine-crashed", engine_journal_crash()),
    ]
}

/// Payloads of one object type cut from one log area.
const OBJECTS_PER_TYPE_MAX: usize = 2;

/// Adds seeds, skipping bytes a target already has.
struct Corpus {
    seeds: Vec<Seed>,
    seen: BTreeSet<(&'static str, Vec<u8>)>,
}

impl Corpus {
    fn add(&mut self, target: &'static str, name: String, bytes: Vec<u8>) {
        if self.seen.insert((target, bytes.clone())) {
            self.seeds.push(Seed { target, name, bytes });
        }
    }
}

fn short_name(object_type: ObjectType) -> &'static str {
    match object_type {
        ObjectType::BaseVersion => "bv",
        ObjectType::DeltaVersion => "dv",
        ObjectType::CompactionJournal => "cj",
        ObjectType::WriteBatch => "wb",
        ObjectType::WrapLeft => "wol",
        ObjectType::WrapRight => "wor",
    }
}

/// The structures of one image: labels, logs and their objects, chunks and their parts.
fn cut(corpus: &mut Corpus, name: &str, image: &[u8]) {
    let Ok(label) = Label::decode(image, 0) else {
        panic!("seed: {name}: no label");
    };
    let geometry = label.geometry;
    corpus.add("label", name.to_string(), image[..LABEL_LEN].to_vec());
    corpus.add("geometry", name.to_string(), image[40..40 + 96].to_vec());
    let slice = |offset: u64, len: u64| &image[offset as usize..(offset + len) as usize];
    let (version_offset, version_len) = geometry.log_area(LogKind::Version, 0);
    let version_area = slice(version_offset, version_len);
    corpus.add("version_log", name.to_string(), version_area.to_vec());
    let context = area_context(&geometry, LogKind::Version, 0);
    if let Ok(state) = recover_version_log(version_area, &context) {
        let version = &state.version;
        let mut params = Writer::new();
        params
            .u16((version.ofs_backup_start / 8) as u16)
            .u16(version.lsn_backup_start as u16)
            .u32(version.last_sequence as u32)
            .u8(state.sn as u8);
        let (backup_offset, backup_len) = geometry.log_area(LogKind::Backup, 0);
        let mut input = params.into_bytes();
        input.extend_from_slice(slice(backup_offset, backup_len));
        corpus.add("backup_log", name.to_string(), input);
        for meta in version.chunks.values().take(2) {
            let mut writer = Writer::new();
            meta.encode(&mut writer);
            corpus.add("chunk_meta", format!("{name}-chunk-{}", meta.chunk_id), writer.into_bytes());
        }
    }
    for kind in [LogKind::Version, LogKind::Backup] {
        let (offset, len) = geometry.log_area(kind, 0);
        let area = slice(offset, len);
        let context = area_context(&geometry, kind, 0);
        let mut taken: Vec<ObjectType> = Vec::new();
        for (object_offset, _) in physical_walk(area, 0, 512) {
            let Ok(raw) = read_object(area, object_offset, &context) else { continue };
            let count = taken.iter().filter(|&&taken| taken == raw.object_type).count();
            if count >= OBJECTS_PER_TYPE_MAX {
                continue;
            }
            taken.push(raw.object_type);
            let short = short_name(raw.object_type);
            let lsn = raw.header.lsn;
            let object = NewObject {
                object_type: raw.object_type,
                kind,
                instance: 0,
                sn: raw.header.sn,
                lsn: raw.header.lsn,
                log_offset: 0,
                volume_uuid: VOLUME_UUID,
            };
            let mut input = vec![if kind == LogKind::Version { 0 } else { 1 }];
            input.extend(encode_object(&object, raw.payload));
            if count == 0 {
                corpus.add("log_object", format!("{name}-{short}-{lsn}"), input);
            }
            let payload_target = match raw.object_type {
                ObjectType::BaseVersion => "base_version",
                ObjectType::DeltaVersion => "delta_version",
                ObjectType::CompactionJournal => "compaction_journal",
                ObjectType::WriteBatch => "write_batch",
                ObjectType::WrapLeft | ObjectType::WrapRight => "wrap",
            };
            corpus.add(payload_target, format!("{name}-{short}-{lsn}"), raw.payload.to_vec());
        }
    }
    for slot in 0..geometry.num_slots {
        let bytes = slice(geometry.slot_offset(slot), geometry.slot_size);
        let Ok(view) = SubChunkView::open(bytes, 0) else { continue };
        let footer: &Footer = &view.footer;
        let footer_at = bytes.len() - FOOTER_LEN;
        let seed_name = format!("{name}-slot-{slot}");
        corpus.add("footer", seed_name.clone(), bytes[footer_at..].to_vec());
        let index = &bytes[footer.ofs_index as usize..footer.ofs_filter as usize];
        let mut input = Writer::new();
        input.u16(footer.num_blocks as u16).u32(footer.len_body).bytes(index);
        corpus.add("index", seed_name.clone(), input.into_bytes());
        corpus.add("filter", seed_name.clone(), bytes[footer.ofs_filter as usize..footer_at].to_vec());
        if let Ok(entries) = decode_index(index, 0, footer) {
            for (number, entry) in entries.iter().enumerate().take(2) {
                let block = &bytes[entry.ofs_block as usize..(entry.ofs_block + entry.len_block) as usize];
                corpus.add("block", format!("{seed_name}-block-{number}"), block.to_vec());
            }
        }
        let body = &bytes[..footer.len_body as usize];
        let mut input = Writer::new();
        input.u16(body.len() as u16).bytes(body).bytes(&bytes[footer.ofs_index as usize..]);
        corpus.add("slot", seed_name, input.into_bytes());
    }
    corpus.add("image", name.to_string(), image.to_vec());
    corpus.add("repair", name.to_string(), image.to_vec());
}

fn sim_seeds(corpus: &mut Corpus) {
    let put = |key: u8, len: u8, sync: bool| vec![if sync { 8 } else { 0 }, key, len, key];
    let delete = |key: u8, sync: bool| vec![if sync { 3 | 8 } else { 3 }, key];
    let batch = vec![4, 1, 7, 30, 9, 0];
    let (flush, compact, reopen) = (vec![5], vec![6], vec![7]);
    let basic =
        vec![put(1, 10, true), put(2, 40, false), delete(1, true), put(3, 5, false), flush.clone(), put(4, 90, true)];
    let mut busy = Vec::new();
    for round in 0..4u8 {
        busy.extend((0..4).map(|n| put(round * 4 + n, 200, n == 3)));
        busy.push(flush.clone());
    }
    busy.extend([compact.clone(), batch.clone(), reopen.clone(), put(9, 1, true)]);
    let runs = [
        (
            "basic-crash-mid",
            SimInput { flags: 1, ops: basic.clone(), crash_point: 9, subset_mask: 0b101, ..SimInput::default() },
        ),
        (
            "basic-torn",
            SimInput { flags: 1, ops: basic.clone(), crash_point: 5, tear: 1, torn_sectors: 0, ..SimInput::default() },
        ),
        (
            "buffered-all-landed",
            SimInput { flags: 0, ops: basic.clone(), crash_point: 200, subset_mask: u64::MAX, ..SimInput::default() },
        ),
        (
            "busy-crash",
            SimInput { flags: 1, ops: busy.clone(), crash_point: 40, subset_mask: 0x55, ..SimInput::default() },
        ),
        (
            "busy-write-after-recovery",
            SimInput {
                flags: 1 | 8,
                ops: busy.clone(),
                crash_point: 33,
                subset_mask: 0b10,
                written_len: 60,
                ..SimInput::default()
            },
        ),
        (
            "write-eio",
            SimInput {
                flags: 1 | (1 << 1),
                ops: busy.clone(),
                fault_index: 12,
                crash_point: 30,
                ..SimInput::default()
            },
        ),
        (
            "flush-eio",
            SimInput {
                flags: 2 << 1,
                ops: busy,
                fault_index: 5,
                crash_point: 25,
                subset_mask: 3,
                ..SimInput::default()
            },
        ),
        (
            "buffered-write-after-recovery",
            SimInput { flags: 8, ops: basic, crash_point: 7, subset_mask: 0b10, written_len: 6, ..SimInput::default() },
        ),
    ];
    // Large values (bit 7: 12-byte units) through several flushes and a compaction: merges
    // of several outputs that journal, clean inputs early and, after the crash, resume.
    let large = |key: u8, units: u8, sync: bool| vec![0x80 | if sync { 8 } else { 0 }, key, units, key];
    let mut journaled = Vec::new();
    for round in 0..12u8 {
        journaled.extend((0..4).map(|n| large(round * 4 + n, 250, n == 3)));
        journaled.push(flush.clone());
    }
    journaled.extend([compact.clone(), large(30, 10, true)]);
    let journal_runs = [
        (
            "journal-crash-mid-compaction",
            SimInput { flags: 1, ops: journaled.clone(), crash_point: 60, subset_mask: 0b1011, ..SimInput::default() },
        ),
        (
            "journal-write-after-recovery",
            SimInput {
                flags: 1 | 8,
                ops: journaled,
                crash_point: 58,
                subset_mask: 1,
                written_len: 20,
                ..SimInput::default()
            },
        ),
    ];
    // TRIAD-LOG (flag bit 6 with the second set of techniques, on its larger backup log):
    // five memtables of fresh keys flushed as log chunks, then overwrites, a batch, a
    // compaction that resolves the references, and more log chunks after it.
    let triad_log = 1 | (3 << 1) | 0x40;
    let mut logged = Vec::new();
    for round in 0..5u8 {
        logged.extend((0..5).map(|n| put(round * 5 + n, 150 + n * 20, n == 4)));
        logged.push(flush.clone());
    }
    logged.extend([put(3, 90, false), put(7, 90, false), batch.clone(), compact, reopen]);
    for round in 0..3u8 {
        logged.extend((0..4).map(|n| put(25 + round * 2 + n % 2 + n / 2 * 3, 200, false)));
        logged.push(flush.clone());
    }
    logged.push(put(31, 40, true));
    let log_runs = [
        (
            "log-chunks-crash",
            SimInput {
                flags: triad_log,
                ops: logged.clone(),
                crash_point: 70,
                subset_mask: 0b110,
                ..SimInput::default()
            },
        ),
        (
            "log-chunks-write-after-recovery",
            SimInput {
                flags: triad_log | 8,
                ops: logged,
                crash_point: 52,
                subset_mask: 1,
                written_len: 80,
                ..SimInput::default()
            },
        ),
    ];
    for (name, input) in runs.into_iter().chain(journal_runs).chain(log_runs) {
        corpus.add("sim", name.to_string(), input.encode());
    }
}

fn layout_seeds(corpus: &mut Corpus) {
    let mut request = |name: &str, flags: u8, volume_len: u64, rest: &[u8]| {
        let mut bytes = vec![flags];
        bytes.extend_from_slice(&volume_len.to_le_bytes());
        bytes.extend_from_slice(rest);
        corpus.add("layout", name.to_string(), bytes);
    };
    request("defaults-1gib", 0, 1 << 30, &[]);
    request("defaults-4mib", 0, 4 << 20, &[]);
    // 512-byte sectors, 64 KiB slots, given log sizes and two instances, as lds-sim asks.
    let mut rest = vec![0, 0];
    rest.extend_from_slice(&(16u32 << 10).to_le_bytes());
    rest.extend_from_slice(&(8u32 << 10).to_le_bytes());
    rest.push(2);
    request("sim-like-two-instances", 1 | (1 << 2) | 0x10 | 0x20 | 0x40, 3 << 20, &rest);
}

/// Key sketches (SPEC.md §8.7) of a few key sets, at the smallest precision, a writer's and
/// one between.
fn sketch_seeds(corpus: &mut Corpus) {
    for (name, precision, keys) in [("p4-20-keys", 4u8, 20u32), ("p8-empty", 8, 0), ("p12-1000-keys", 12, 1000)] {
        let mut sketch = Sketch::new(precision);
        for number in 0..keys {
            sketch.add_hash(filter_hash(format!("key-{number:05}").as_bytes()));
        }
        corpus.add("key_sketch", name.to_string(), sketch.encode());
    }
}

/// A value of `len` bytes (compressible, each distinct).
fn value_bytes(seed: &str, len: usize) -> Vec<u8> {
    (0u32..).flat_map(|number| format!("{seed}{number};").into_bytes()).take(len).collect()
}

/// Value chunks and pointers as a kv-separating writer packs them (SPEC.md §8.6): small
/// values in one value chunk, and one larger than a slot across three.
fn value_seeds(corpus: &mut Corpus) {
    for (name, digest, selector) in [("blake3-64k", DigestKind::Blake3, 0u8), ("xxh3-256k", DigestKind::Xxh3, 2)] {
        let slot_size = SLOT_SIZE_MIN << selector;
        let format = ValueFormat { slot_size, instance: 0, volume_uuid: VOLUME_UUID, digest };
        let mut packer = ValuePacker::new(format);
        let mut ids = 1u64..;
        let mut allocate = || Ok::<_, ()>((ids.next().unwrap_or(1), 3));
        let mut pointers = Vec::new();
        for (number, len) in [300usize, 40, 1000].into_iter().enumerate() {
            let value = value_bytes(&format!("{name}-{number}-"), len);
            pointers.push(packer.add(&value, &mut allocate).unwrap_or_else(|()| panic!("seed: pack")));
        }
        let large = value_bytes(name, 2 * slot_size as usize + 1000);
        pointers.push(packer.add(&large, &mut allocate).unwrap_or_else(|()| panic!("seed: pack")));
        for (number, chunk) in packer.finish().into_iter().enumerate().take(2) {
            // The footer, then the first bytes of its body (the target cycles them).
            let mut input = vec![selector];
            input.extend_from_slice(&chunk.footer.encode());
            input.extend_from_slice(&chunk.body[..chunk.body.len().min(256)]);
            corpus.add("value_footer", format!("{name}-chunk-{number}"), input);
        }
        for (number, pointer) in pointers.iter().enumerate() {
            corpus.add("value_pointer", format!("{name}-{number}-{}-extents", pointer.extents.len()), pointer.encode());
        }
    }
}

/// A backup log area of the tiny geometry holding three write batches, and references to
/// their puts (SPEC.md §8.9): each resolving one, and a few that do not (a tombstone, another
/// lsn, an entry past the batch).
fn log_ref_seeds(corpus: &mut Corpus) {
    let mut image = ImageBuilder::format(Label::new(tiny_geometry(1), "fuzz"));
    let mut batches = Vec::new();
    for batch in 0..3u32 {
        let entries: Vec<BatchEntry> = (0..4u32)
            .map(|index| {
                let key = format!("log{batch}-{index}").into_bytes();
                if index == 3 {
                    BatchEntry { kind: EntryKind::Delete, key, value: Vec::new() }
                } else {
                    BatchEntry {
                        kind: EntryKind::Put,
                        key,
                        value: value_bytes(&format!("v{batch}{index}-"), 24 + 40 * index as usize),
                    }
                }
            })
            .collect();
        let (offset, lsn) = image.instances[0].backup_log.next_position();
        let first_sequence =
            image.append_batch(0, entries.clone()).unwrap_or_else(|error| panic!("seed: log references: {error}"));
        batches.push((offset, lsn, first_sequence, entries));
    }
    let (area_offset, area_len) = image.label.geometry.log_area(LogKind::Backup, 0);
    let area = &image.bytes[area_offset as usize..(area_offset + area_len) as usize];
    let mut add = |name: &str, reference: LogRef, key: &[u8], sequence: u64| {
        let mut input = reference.encode().to_vec();
        input.extend_from_slice(&sequence.to_le_bytes());
        input.push(key.len() as u8);
        input.extend_from_slice(key);
        input.extend_from_slice(area);
        corpus.add("log_ref", name.to_string(), input);
    };
    // One put of each batch, a different entry each time.
    for (number, (offset, lsn, first_sequence, entries)) in batches.iter().enumerate() {
        let entry = &entries[number];
        let reference =
            LogRef { lsn: *lsn, ofs_object: *offset, entry_index: number as u32, len_value: entry.value.len() as u32 };
        add(&format!("lsn-{lsn}-entry-{number}"), reference, &entry.key, first_sequence + number as u64);
    }
    let (offset, lsn, first_sequence, entries) = &batches[1];
    let put = LogRef { lsn: *lsn, ofs_object: *offset, entry_index: 0, len_value: entries[0].value.len() as u32 };
    add("a-tombstone", LogRef { entry_index: 3, len_value: 1, ..put }, &entries[3].key, first_sequence + 3);
    add("another-lsn", LogRef { lsn: lsn + 1, ..put }, &entries[0].key, *first_sequence);
    add("past-the-batch", LogRef { entry_index: 9, ..put }, &entries[0].key, first_sequence + 9);
}

/// Undo files as an offline tool writes them (docs/undo-file.md), through `UndoLog` into
/// memory: overlapping unaligned writes and the final record; the same torn by a crash while
/// appending; sectors of 4 KiB on a device whose last sector is partial, without a final
/// record.
fn undo_seeds(corpus: &mut Corpus) {
    /// Name, device length, sector size, the writes (offset, length), and whether the tool
    /// finished (a final record).
    type Run = (&'static str, u64, u32, &'static [(u64, usize)], bool);
    let runs: [Run; 2] = [
        ("writes-and-final", 16 << 10, 512, &[(100, 1000), (600, 20), (4096, 512), (1000, 3000)], true),
        ("partial-last-sector-no-final", 10_000, 4096, &[(0, 512), (9000, 1000)], false),
    ];
    for (name, device_len, sector_size, writes, finish) in runs {
        let device = MemoryDevice::new((0..device_len).map(|offset| (offset % 251) as u8).collect());
        let sink = MemorySink::default();
        let header =
            UndoHeader { volume_uuid: VOLUME_UUID, device_len, sector_size, tool: "repair".into(), created: 0 };
        let mut log = UndoLog::with_sink(Box::new(sink.clone()), Path::new("seed"), header);
        for &(offset, len) in writes {
            let fill = vec![offset as u8 ^ 0x5a; len];
            log.before_write(&device, offset, &fill).unwrap_or_else(|error| panic!("seed: undo: {error}"));
            device.write_at(offset, &fill).unwrap_or_else(|error| panic!("seed: undo: {error}"));
        }
        let running = sink.0.lock().map(|bytes| bytes.clone()).unwrap_or_default();
        if finish {
            log.finish(&device, &[(0, 512), (4096, 1024)]).unwrap_or_else(|error| panic!("seed: undo: {error}"));
        }
        let bytes = sink.0.lock().map(|bytes| bytes.clone()).unwrap_or_default();
        if finish {
            // A crash while the final batch was appended: the state block still says running
            // (it is rewritten only after that batch), and the batch's last bytes never landed.
            let mut torn = running.clone();
            torn.extend_from_slice(&bytes[running.len()..bytes.len() - 7]);
            corpus.add("undo_file", format!("{name}-torn"), torn);
        }
        corpus.add("undo_file", name.to_string(), bytes);
    }
}

/// Every seed, in a fixed order.
pub fn all() -> Vec<Seed> {
    let mut corpus = Corpus { seeds: Vec::new(), seen: BTreeSet::new() };
    for (name, image) in images() {
        cut(&mut corpus, name, &image);
    }
    corpus.add("label", "paper-defaults".into(), Label::new(paper_geometry(), "paper").encode().to_vec());
    layout_seeds(&mut corpus);
    sim_seeds(&mut corpus);
    sketch_seeds(&mut corpus);
    value_seeds(&mut corpus);
    log_ref_seeds(&mut corpus);
    undo_seeds(&mut corpus);
    let bytes: Vec<u8> = corpus
        .seeds
        .iter()
        .filter(|seed| seed.target == "label")
        .flat_map(|seed| seed.bytes.clone())
        .take(2 * LABEL_LEN)
        .collect();
    corpus.add("label", "two-copies".into(), bytes);
    corpus.seeds
}

/// The geometry mkfs plans for a 100 GiB volume (the paper's sizes).
fn paper_geometry() -> Geometry {
    let request = lds_format::geometry::LayoutRequest { volume_len: 100 << 30, ..Default::default() };
    lds_format::geometry::plan_layout(&request, VOLUME_UUID).unwrap_or_else(|error| panic!("seed: layout: {error}"))
}

/// The seeds' file names per target, for the replay and regeneration tests.
pub fn file_names(seeds: &[Seed]) -> BTreeSet<(String, String)> {
    seeds.iter().map(|seed| (seed.target.to_string(), seed.file_name())).collect()
}

/// Writes every seed under `root` (fuzz/corpus), removing files no seed has.
pub fn write(root: &Path, seeds: &[Seed]) -> std::io::Result<()> {
    let names = file_names(seeds);
    for seed in seeds {
        let folder = root.join(seed.target);
        std::fs::create_dir_all(&folder)?;
        std::fs::write(folder.join(seed.file_name()), seed.file_bytes())?;
    }
    for (target, _) in crate::TARGETS {
        let folder = root.join(target);
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries {
            let entry = entry?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if !names.contains(&(target.to_string(), file_name)) {
                std::fs::remove_file(entry.path())?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lds_format::codec::crc32c;
    use lds_format::log::area_context;
    use lds_format::logref::{resolve, LogRef, LOG_REF_LEN};

    fn seeds_of(target: &str) -> Vec<super::Seed> {
        super::all().into_iter().filter(|seed| seed.target == target).collect()
    }

    /// The seeds of the targets of formats 1.4 to 1.6 and of undo files reach the oracles
    /// behind a successful decode (or, named so, the refusals).
    #[test]
    fn the_seeds_of_the_newer_targets_decode() {
        let sketches = seeds_of("key_sketch");
        assert!(sketches.len() >= 3);
        for seed in sketches {
            let decoded = lds_format::sketch::Sketch::decode(&seed.bytes, 0, crc32c(&seed.bytes));
            assert!(decoded.is_ok(), "{}: {decoded:?}", seed.name);
        }
        for seed in seeds_of("value_footer") {
            let slot_size = lds_format::geometry::SLOT_SIZE_MIN << seed.bytes[0];
            let decoded = lds_format::value::ValueFooter::decode(&seed.bytes[1..], 0, slot_size);
            assert!(decoded.is_ok(), "{}: {decoded:?}", seed.name);
        }
        let pointers = seeds_of("value_pointer");
        assert!(pointers.iter().any(|seed| seed.name.ends_with("-3-extents")), "a pointer across slots");
        for seed in pointers {
            let decoded = lds_format::value::ValuePointer::decode(&seed.bytes, 0);
            assert!(decoded.is_ok(), "{}: {decoded:?}", seed.name);
        }
        let geometry = super::tiny_geometry(1);
        let context = lds_format::log::AreaContext {
            ofs_area: 0,
            ..area_context(&geometry, lds_format::geometry::LogKind::Backup, 0)
        };
        let references = seeds_of("log_ref");
        assert_eq!(references.len(), 6);
        for seed in references {
            let bytes = &seed.bytes;
            let reference = LogRef::decode(&bytes[..LOG_REF_LEN], 0).unwrap_or_else(|error| panic!("{error}"));
            let sequence = u64::from_le_bytes(bytes[LOG_REF_LEN..LOG_REF_LEN + 8].try_into().unwrap_or_default());
            let key_len = usize::from(bytes[LOG_REF_LEN + 8]);
            let key = &bytes[LOG_REF_LEN + 9..LOG_REF_LEN + 9 + key_len];
            let area = &bytes[LOG_REF_LEN + 9 + key_len..];
            let resolved = resolve(&reference, &area[reference.ofs_object as usize..], &context, key, sequence);
            assert_eq!(resolved.is_ok(), seed.name.starts_with("lsn-"), "{}: {resolved:?}", seed.name);
        }
        let undo_files = seeds_of("undo_file");
        assert_eq!(undo_files.len(), 3);
        for seed in undo_files {
            let file = lds_volume::undo::UndoFile::parse(&seed.bytes, std::path::Path::new("seed"));
            let file = file.unwrap_or_else(|error| panic!("{}: {error}", seed.name));
            assert!(!file.originals.is_empty(), "{}", seed.name);
            assert_eq!(file.torn_tail > 0, seed.name.ends_with("-torn"), "{}", seed.name);
            assert_eq!(file.final_state.is_some(), seed.name == "writes-and-final", "{}", seed.name);
        }
    }
}
