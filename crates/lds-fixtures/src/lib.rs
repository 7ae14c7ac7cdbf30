//! Golden images for fixtures/, built in memory from the format crate's own encoders and
//! append planner (never edited by hand). The same inputs give the same bytes (docs/reliability.md
//! I8): the uuids are fixed and nothing depends on time or randomness.
//!
//! What lives in fixtures/ and who writes it:
//! - `d_<name>/image.gz`, `description`: the golden images of [`all`], written by
//!   `cargo run -p lds-fixtures`;
//! - `f_<case>/image.gz`, `description`, `expect` (`code N` and `exit M`: the problem code
//!   the case is about and fsck(8)'s exit code): the fsck cases of [`fsck_cases::all`],
//!   written by `cargo run -p lds-fixtures` too;
//! - `f_<case>/expect.1`: the whole text output of `lds fsck --deep` on the image, the image
//!   path replaced by `IMAGE` and the seconds by `(time)` (e2fsprogs' `expect.1`). It is not
//!   written here: the CLI test compares it and rewrites it when asked,
//!   `LDS_BLESS=1 cargo test -p lds-cli --test fsck_fixtures`, after a regeneration or a
//!   change of fsck's wording (review the diff).
//!
//! Tests read the images through [`load`] (or [`unpack`] for a file path), and list them
//! with [`fsck_case_names`] and [`dump_fixture_names`]. The corruptions of the fsck cases
//! are spelled with [`damage`]: a structure and a field of SPEC.md, never a bare offset.
#![deny(clippy::unwrap_used)]

pub mod damage;
pub mod fsck_cases;
pub mod hostile;
pub mod many_objects;
pub mod spec_cases;

use std::path::{Path, PathBuf};

use std::collections::BTreeMap;

use lds_format::algorithms::image::ImageBuilder;
use lds_format::batch::BatchEntry;
use lds_format::chunk::builder::{ChunkBuilder, ChunkIdentity, ChunkOptions};
use lds_format::digest::DigestKind;
use lds_format::entry::EntryKind;
use lds_format::geometry::{plan_layout, LayoutRequest};
use lds_format::label::Label;
use lds_format::log::LogPosition;
use lds_format::logref::LogRef;
use lds_format::value::{BuiltValueChunk, ValueChunkMeta, ValueFormat, ValuePacker, ValuePointer};
use lds_format::version::meta::{ChunkMeta, SubChunkRef, CHUNK_FLAG_LOG_REFS, CHUNK_FLAG_ODD, CHUNK_FLAG_VALUE_REFS};
use lds_format::version::payload::{CompactPointer, CompactionJournal, DeletedChunk, DeltaVersion, ValueDelta};

/// One fixture: folder name, one-line description, raw image bytes.
pub struct Fixture {
    /// Folder under fixtures/.
    pub name: &'static str,
    /// What it shows.
    pub description: &'static str,
    /// The volume image.
    pub image: Vec<u8>,
}

/// A label for a fixture volume: the layout mkfs plans for `request`, and a fixed uuid made of
/// `uuid_byte` (an RFC 9562 version 4 uuid: version nibble 4, variant bits 10).
pub(crate) fn new_label(request: LayoutRequest, uuid_byte: u8, name: &str) -> Label {
    const VERSION_BYTE: usize = 6;
    const VARIANT_BYTE: usize = 8;
    let mut uuid = [uuid_byte; 16];
    uuid[VERSION_BYTE] = 0x40 | (uuid_byte & 0x0f);
    uuid[VARIANT_BYTE] = 0x80 | (uuid_byte & 0x3f);
    Label::new(plan_layout(&request, uuid).unwrap_or_else(|error| panic!("fixture layout: {error}")), name)
}

type Entry = (Vec<u8>, u64, EntryKind, Vec<u8>);

/// Entries `key{first..first+count}` with sequence numbers from `first_sequence`; every
/// seventh is a tombstone.
pub(crate) fn entries(first: u32, count: u32, first_sequence: u64) -> Vec<Entry> {
    (0..count)
        .map(|index| {
            let number = first + index;
            let kind = if number % 7 == 6 { EntryKind::Delete } else { EntryKind::Put };
            let value = if kind == EntryKind::Put { format!("value-{number}").into_bytes() } else { Vec::new() };
            (format!("key{number:05}").into_bytes(), first_sequence + u64::from(index), kind, value)
        })
        .collect()
}

pub(crate) fn puts(names: &[&str]) -> Vec<BatchEntry> {
    names
        .iter()
        .map(|name| BatchEntry {
            kind: EntryKind::Put,
            key: name.as_bytes().to_vec(),
            value: format!("v-{name}").into_bytes(),
        })
        .collect()
}

/// A delta adding `chunks` that keeps the instance's current backup start.
pub(crate) fn added(image: &ImageBuilder, instance: u32, chunks: Vec<ChunkMeta>, last_sequence: u64) -> DeltaVersion {
    let version = &image.instances[instance as usize].version;
    DeltaVersion {
        added: chunks,
        last_sequence,
        ofs_backup_start: version.ofs_backup_start,
        lsn_backup_start: version.lsn_backup_start,
        ..DeltaVersion::default()
    }
}

pub(crate) fn expect<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|error| panic!("fixture generation: {error}"))
}

pub(crate) fn small(sector_size: u32) -> LayoutRequest {
    LayoutRequest { volume_len: 4 << 20, sector_size: Some(sector_size), ..LayoutRequest::default() }
}

/// An empty, freshly formatted volume.
fn empty() -> Vec<u8> {
    ImageBuilder::format(new_label(small(4096), 0x11, "empty")).bytes
}

/// Base and delta versions, chunks in three levels with an odd chunk, a trim, batches: the
/// `d_versions` golden image, and the clean base of most fsck cases.
pub fn versions_image() -> ImageBuilder {
    let mut image = ImageBuilder::format(new_label(small(4096), 0x22, "versions"));
    // Two memtable flushes to L0.
    expect(image.append_batch(0, puts(&["apple", "banana"])));
    let sequence = image.reserve_sequences(0, 40);
    let first = image.write_chunk(0, 3, 0, 0, &entries(0, 40, sequence));
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    expect(image.append_delta(
        0,
        &DeltaVersion {
            ofs_backup_start: ofs,
            lsn_backup_start: lsn,
            ..added(&image, 0, vec![first], image.last_sequence(0))
        },
    ));
    let sequence = image.reserve_sequences(0, 40);
    let second = image.write_chunk(0, 4, 0, 0, &entries(20, 40, sequence));
    expect(image.append_delta(
        0,
        &DeltaVersion {
            ofs_backup_start: ofs,
            lsn_backup_start: lsn,
            ..added(&image, 0, vec![second], image.last_sequence(0))
        },
    ));
    // A compaction of both L0 chunks into L1: two full chunks and an odd chunk that stays in
    // L0's successor level per the odd-chunk rule (SPEC.md §11).
    let sequence = image.reserve_sequences(0, 60);
    let l1_a = image.write_chunk(0, 7, 1, 0, &entries(0, 30, sequence));
    let l1_b = image.write_chunk(0, 8, 1, 0, &entries(30, 25, sequence + 30));
    let odd = image.write_chunk(0, 9, 0, CHUNK_FLAG_ODD, &entries(55, 5, sequence + 55));
    expect(image.append_delta(
        0,
        &DeltaVersion {
            deleted: vec![DeletedChunk { chunk_id: 3, level: 0 }, DeletedChunk { chunk_id: 4, level: 0 }],
            compact_pointers: vec![CompactPointer { level: 0, key: b"key00059".to_vec() }],
            ofs_backup_start: ofs,
            lsn_backup_start: lsn,
            ..added(&image, 0, vec![l1_a, l1_b, odd], image.last_sequence(0))
        },
    ));
    // A trivial move of one L1 chunk to L2.
    let moved = image.instances[0].version.chunks.get(&7).cloned().map(|mut meta| {
        meta.level = 2;
        meta
    });
    let moved = moved.unwrap_or_else(|| panic!("chunk 7 is in the version"));
    expect(image.append_delta(
        0,
        &DeltaVersion {
            deleted: vec![DeletedChunk { chunk_id: 7, level: 1 }],
            ofs_backup_start: ofs,
            lsn_backup_start: lsn,
            ..added(&image, 0, vec![moved], image.last_sequence(0))
        },
    ));
    // A trim, then a delta on the new base and writes in the backup log.
    expect(image.trim(0));
    expect(image.append_batch(0, puts(&["cherry"])));
    expect(
        image.append_batch(0, vec![BatchEntry { kind: EntryKind::Delete, key: b"apple".to_vec(), value: Vec::new() }]),
    );
    let sequence = image.reserve_sequences(0, 10);
    let third = image.write_chunk(0, 12, 0, 0, &entries(100, 10, sequence));
    expect(image.append_delta(
        0,
        &DeltaVersion {
            ofs_backup_start: ofs,
            lsn_backup_start: lsn,
            ..added(&image, 0, vec![third], image.last_sequence(0))
        },
    ));
    // Written after the last flush: replayed by recovery.
    expect(image.append_batch(0, puts(&["damson", "elderberry"])));
    image
}

/// 512-byte sectors and logs of 16 and 8 KiB, so that a few rounds wrap both logs.
pub(crate) fn tiny_logs() -> LayoutRequest {
    LayoutRequest {
        volume_len: 4 << 20,
        sector_size: Some(512),
        len_version_log: Some(16 << 10),
        len_backup_log: Some(8 << 10),
        ..LayoutRequest::default()
    }
}

/// Both logs wrapped: the version log holds a WOL, the backup log a WOR and a WOL.
pub(crate) fn wrapped_image() -> ImageBuilder {
    let request = tiny_logs();
    let mut image = ImageBuilder::format(new_label(request, 0x33, "wrapped"));
    for round in 0..120u32 {
        // Five batches of two entries, then a flush of ten entries into a level-0 chunk.
        let first_sequence = image.last_sequence(0) + 1;
        for batch in 0..5 {
            expect(image.append_batch(0, puts(&[&format!("r{round:03}b{batch}"), "common"])));
        }
        let slot = 4 + u64::from(round % 6);
        let chunk = image.write_chunk(0, slot, 0, 0, &entries(round * 10, 10, first_sequence));
        let sequence = image.last_sequence(0);
        let (ofs, lsn) = image.instances[0].backup_log.next_position();
        let mut delta =
            DeltaVersion { ofs_backup_start: ofs, lsn_backup_start: lsn, ..added(&image, 0, vec![chunk], sequence) };
        if let Some(old) = image.instances[0].version.chunks.keys().copied().find(|&id| id != slot) {
            delta.deleted.push(DeletedChunk { chunk_id: old, level: 0 });
        }
        if !image.instances[0].version_log.fits(&[delta.encode().len(), 2048]) {
            expect(image.trim(0));
        }
        expect(image.append_delta(0, &delta));
    }
    // Writes after the last flush, enough to wrap the backup log inside its live region.
    for batch in 0..30u32 {
        expect(image.append_batch(0, puts(&[&format!("after-the-last-flush-{batch:02}")])));
    }
    image
}

/// An unfinished compaction recorded in the compaction journal (SifrDB §4.2).
pub(crate) fn journal_image() -> ImageBuilder {
    let mut image = ImageBuilder::format(new_label(small(4096), 0x44, "journal"));
    let inputs: Vec<ChunkMeta> = (0..3u32)
        .map(|index| {
            let sequence = image.reserve_sequences(0, 20);
            image.write_chunk(0, 3 + u64::from(index), 1, 0, &entries(index * 20, 20, sequence))
        })
        .collect();
    let sequence = image.reserve_sequences(0, 60);
    let target = image.write_chunk(0, 6, 2, 0, &entries(0, 60, sequence));
    let mut all = inputs.clone();
    all.push(target);
    let delta = added(&image, 0, all, image.last_sequence(0));
    expect(image.append_delta(0, &delta));
    // The merge output keeps each key's newest version: the same sequence numbers.
    let output = image.write_chunk(0, 10, 2, 0, &entries(0, 25, 1));
    let record = CompactionJournal {
        compaction_id: 1,
        source_level: 1,
        target_level: 2,
        resume_key: output.largest_key.clone(),
        inputs: vec![3, 4, 5, 6],
        cleaned: vec![3],
        outputs: vec![output],
    };
    expect(image.append_journal(0, &record));
    image
}

/// Two instances sharing the slot area.
pub(crate) fn two_instances_image() -> ImageBuilder {
    let request = LayoutRequest { volume_len: 4 << 20, instance_count: Some(2), ..LayoutRequest::default() };
    let mut image = ImageBuilder::format(new_label(request, 0x55, "two instances"));
    for instance in 0..2u32 {
        let slot = 2 + u64::from(instance) * 5;
        let sequence = image.reserve_sequences(instance, 15);
        let chunk = image.write_chunk(instance, slot, 0, 0, &entries(instance * 100, 15, sequence));
        let delta = added(&image, instance, vec![chunk], image.last_sequence(instance));
        expect(image.append_delta(instance, &delta));
        expect(image.append_batch(instance, puts(&[&format!("instance-{instance}")])));
    }
    image
}

/// A format 1.6 volume with feature `log_tables` (SPEC.md §8.9) and one log chunk, and where
/// the batches its references name stand in the backup log.
pub struct LogChunksImage {
    /// The volume.
    pub image: ImageBuilder,
    /// The log chunk's metadata, as the version holds it.
    pub chunk: ChunkMeta,
    /// Each referenced batch's position in the backup log area, oldest first.
    pub batches: Vec<LogPosition>,
}

/// Referenced write batches of [`log_chunks_image`].
const LOG_BATCHES: u32 = 3;
/// Puts per referenced batch.
const LOG_PUTS_PER_BATCH: u32 = 4;

/// A small 1.6 volume whose last flush wrote a log chunk, as technique triad-log does: three
/// batches of four puts, then a level-0 chunk in slot 3 whose puts of 24 bytes or more are
/// log references to those batches and whose other put (shorter than a reference) stands as
/// itself; its delta version moves the backup start past the batches, which the chunk's log
/// start retains. A batch written after the flush is replayed.
pub fn log_chunks_image() -> LogChunksImage {
    let mut image = ImageBuilder::format(new_label(small(4096), 0x77, "log chunks").with_log_tables());
    let mut entries: Vec<Entry> = Vec::new();
    let mut batches = Vec::new();
    for batch in 0..LOG_BATCHES {
        let puts: Vec<BatchEntry> = (0..LOG_PUTS_PER_BATCH)
            .map(|index| {
                let key = format!("log{batch}-{index}").into_bytes();
                // One short value per batch: stored as itself, not as a reference.
                let value =
                    if index == 2 { format!("short-{batch}") } else { format!("logged-value-{batch}-{index:-<28}") };
                BatchEntry { kind: EntryKind::Put, key, value: value.into_bytes() }
            })
            .collect();
        let (offset, lsn) = image.instances[0].backup_log.next_position();
        let first_sequence = expect(image.append_batch(0, puts.clone()));
        batches.push(LogPosition { offset, lsn });
        for (index, put) in puts.into_iter().enumerate() {
            let sequence = first_sequence + index as u64;
            let len_value = put.value.len() as u32;
            if put.value.len() < lds_format::logref::LOG_REF_LEN {
                entries.push((put.key, sequence, EntryKind::Put, put.value));
                continue;
            }
            let reference = LogRef { lsn, ofs_object: offset, entry_index: index as u32, len_value };
            entries.push((put.key, sequence, EntryKind::LogRef, reference.encode().to_vec()));
        }
    }
    // The memtable's keys are sorted; each is written once.
    entries.sort();
    let mut chunk = image.write_chunk(0, 3, 0, 0, &entries);
    chunk.flags |= CHUNK_FLAG_LOG_REFS;
    chunk.log_start = batches.first().copied();
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    expect(image.append_delta(
        0,
        &DeltaVersion {
            ofs_backup_start: ofs,
            lsn_backup_start: lsn,
            ..added(&image, 0, vec![chunk.clone()], image.last_sequence(0))
        },
    ));
    expect(image.append_batch(0, puts(&["after-the-flush"])));
    LogChunksImage { image, chunk, batches }
}

/// The value chunk a flush of [`values_image`] wrote: id 1, in slot 5.
pub const VALUE_CHUNK_SLOT: u64 = 5;
/// The value chunk a direct write of [`values_image`] wrote before its batch: id 2, in slot
/// 6, named only by that batch in the backup log (SPEC.md §8.6).
pub const DIRECT_VALUE_SLOT: u64 = 6;
/// The level-0 chunk of [`values_image`] whose pointers name the values: slot 3.
pub const POINTER_CHUNK_SLOT: u64 = 3;

/// A format 1.4 volume with feature `value_chunks` (SPEC.md §8.6), as [`values_image_with`]
/// builds it.
pub struct ValuesImage {
    /// The volume.
    pub image: ImageBuilder,
    /// The level-0 chunk whose pointer entries name the values, as the version holds it.
    pub chunk: ChunkMeta,
    /// The value chunk the flush wrote (id 1), as the version holds it.
    pub value_chunk: ValueChunkMeta,
    /// The chunk's pointers, in key order, with their keys.
    pub pointers: Vec<(Vec<u8>, ValuePointer)>,
    /// The pointer of the replayed batch's entry (a value written directly, in value chunk 2).
    pub direct: ValuePointer,
}

/// What [`values_image_with`] lets a fixture change before the value chunk of the flush is
/// sealed and the chunk pointing to it is written: a writer's error, which no checksum of
/// its own catches.
pub struct ValueBuild {
    /// The keys and pointers of the chunk's pointer entries, in key order.
    pub pointers: Vec<(Vec<u8>, ValuePointer)>,
    /// The value chunk's values (its footer's digest is computed over them after the change).
    pub body: Vec<u8>,
}

/// A value of `len` bytes for `key`: its name and a counter, repeated (compressible, so that
/// the fixture stays a few KB gzipped, and distinct, so that a misplaced extent shows).
fn value_of(key: &str, len: usize) -> Vec<u8> {
    (0..).flat_map(|number: u32| format!("{key}:{number:04};").into_bytes()).take(len).collect()
}

/// The value chunk format of a fixture volume.
fn value_format(image: &ImageBuilder) -> ValueFormat {
    let geometry = image.label.geometry;
    ValueFormat {
        slot_size: geometry.slot_size,
        instance: 0,
        volume_uuid: geometry.volume_uuid,
        digest: DigestKind::Blake3,
    }
}

/// Writes a value chunk's slot and returns its metadata.
fn write_value_chunk(image: &mut ImageBuilder, chunk: &BuiltValueChunk) -> ValueChunkMeta {
    let at = image.label.geometry.slot_offset(chunk.slot) as usize;
    let slot = chunk.slot_image();
    image.bytes[at..at + slot.len()].copy_from_slice(&slot);
    chunk.meta()
}

/// [`values_image_with`] with nothing changed: a clean volume.
pub fn values_image() -> ValuesImage {
    values_image_with(|_| {})
}

/// A small volume with feature `value_chunks` as a kv-separating writer leaves it: a write
/// batch of three large values and two small entries, then its flush, which wrote the large
/// values into value chunk 1 (slot 5) and a level-0 chunk (slot 3) whose entries for them are
/// value pointers, committed by one delta version that adds both; then a value written
/// directly (value chunk 2, slot 6, flushed before its batch) and the batch that points to
/// it, which recovery replays, and a last small batch. `change` may alter the pointers and
/// the values before the value chunk is sealed.
pub fn values_image_with(change: impl FnOnce(&mut ValueBuild)) -> ValuesImage {
    let mut image = ImageBuilder::format(new_label(small(4096), 0x88, "values").with_value_chunks());
    let large = [("value-a", 1200usize), ("value-b", 2600), ("value-c", 900)];
    let mut batch: Vec<BatchEntry> = large
        .iter()
        .map(|&(key, len)| BatchEntry { kind: EntryKind::Put, key: key.as_bytes().to_vec(), value: value_of(key, len) })
        .collect();
    batch.push(BatchEntry { kind: EntryKind::Put, key: b"small".to_vec(), value: b"stays in the tree".to_vec() });
    batch.push(BatchEntry { kind: EntryKind::Delete, key: b"value-0".to_vec(), value: Vec::new() });
    let first_sequence = expect(image.append_batch(0, batch.clone()));

    // The flush: large values to value chunk 1, pointers to them in the chunk.
    let mut packer = ValuePacker::new(value_format(&image));
    let mut pointers = Vec::new();
    for entry in batch.iter().filter(|entry| entry.value.len() >= 512) {
        let pointer = expect(packer.add(&entry.value, || Ok::<_, String>((1, VALUE_CHUNK_SLOT))));
        pointers.push((entry.key.clone(), pointer));
    }
    let mut sealed = packer.finish();
    let Some(mut value_chunk) = sealed.pop() else { panic!("the flush packed no value chunk") };
    let mut build = ValueBuild { pointers, body: value_chunk.body.clone() };
    change(&mut build);
    value_chunk.body = build.body;
    value_chunk.footer.len_body = value_chunk.body.len() as u32;
    value_chunk.footer.digest = value_chunk.footer.digest_of(&value_chunk.body);
    let value_meta = write_value_chunk(&mut image, &value_chunk);

    let mut entries: Vec<Entry> = Vec::new();
    let mut refs = BTreeMap::new();
    for (index, entry) in batch.iter().enumerate() {
        let sequence = first_sequence + index as u64;
        match build.pointers.iter().find(|(key, _)| *key == entry.key) {
            Some((key, pointer)) => {
                pointer.add_refs(&mut refs);
                entries.push((key.clone(), sequence, EntryKind::Pointer, pointer.encode()));
            }
            None => entries.push((entry.key.clone(), sequence, entry.kind, entry.value.clone())),
        }
    }
    entries.sort();
    let mut chunk = image.write_chunk(0, POINTER_CHUNK_SLOT, 0, 0, &entries);
    chunk.flags |= CHUNK_FLAG_VALUE_REFS;
    chunk.value_refs = refs.into_iter().collect();
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    expect(image.append_delta(
        0,
        &DeltaVersion {
            ofs_backup_start: ofs,
            lsn_backup_start: lsn,
            values: Some(ValueDelta { next_value_chunk_id: 2, deleted: Vec::new(), added: vec![value_meta] }),
            ..added(&image, 0, vec![chunk.clone()], image.last_sequence(0))
        },
    ));

    // A direct write: its value chunk first, then the batch that points to it.
    let mut packer = ValuePacker::new(value_format(&image));
    let direct = expect(packer.add(&value_of("direct", 3000), || Ok::<_, String>((2, DIRECT_VALUE_SLOT))));
    for built in packer.finish() {
        write_value_chunk(&mut image, &built);
    }
    let pointed = BatchEntry { kind: EntryKind::Pointer, key: b"value-d".to_vec(), value: direct.encode() };
    expect(image.append_batch(0, vec![pointed]));
    expect(image.append_batch(0, puts(&["after-the-flush"])));
    ValuesImage { image, chunk, value_chunk: value_meta, pointers: build.pointers, direct }
}

/// The precision of the key sketches of [`sketches_image`]: the smallest (16 registers), so
/// that the fixture stays small.
const FIXTURE_SKETCH_PRECISION: u8 = lds_format::sketch::SKETCH_PRECISION_MIN;

/// Writes a one-slot chunk as [`ImageBuilder::write_chunk`] does, with a key sketch of
/// `sketch_precision` (SPEC.md §8.7), which the builder does not write.
fn write_sketched_chunk(image: &mut ImageBuilder, slot: u64, entries: &[Entry], sketch_precision: u8) -> ChunkMeta {
    let geometry = image.label.geometry;
    let options = ChunkOptions {
        slot_size: geometry.slot_size,
        block_size: 4096,
        bloom_bits_per_key: 10,
        digest: DigestKind::Blake3,
        sketch_precision,
        compact_entries: image.label.has_compact_entries(),
    };
    let mut builder = ChunkBuilder::new(options);
    for (key, sequence, kind, value) in entries {
        assert!(builder.add(key, *sequence, *kind, value), "fixture entries overflow one slot");
    }
    let identity = ChunkIdentity {
        volume_uuid: geometry.volume_uuid,
        instance: 0,
        chunk_id: slot,
        sub_chunk_index: 0,
        num_sub_chunks: 1,
        level: 0,
        flags: 0,
    };
    let built = builder.finish(identity).unwrap_or_else(|| panic!("a fixture chunk needs entries"));
    let at = geometry.slot_offset(slot) as usize;
    let bytes = built.slot_image();
    image.bytes[at..at + bytes.len()].copy_from_slice(&bytes);
    ChunkMeta {
        chunk_id: slot,
        level: 0,
        flags: 0,
        num_entries: built.footer.num_entries,
        smallest_seq: built.footer.smallest_seq,
        largest_seq: built.footer.largest_seq,
        len_data: built.len_data(),
        smallest_key: built.first_key.clone(),
        largest_key: built.last_key.clone(),
        sub_chunks: vec![SubChunkRef { slot, digest: built.footer.digest }],
        value_refs: Vec::new(),
        log_start: None,
    }
}

/// A small volume with feature `chunk_sketches` (SPEC.md §8.7) as technique triad-disk leaves
/// it: two flushes of overlapping keys, each a level-0 chunk (slots 3 and 4) with a key
/// sketch, and a batch after them.
pub fn sketches_image() -> ImageBuilder {
    let mut image = ImageBuilder::format(new_label(small(4096), 0x99, "sketches").with_chunk_sketches());
    for (slot, first) in [(3u64, 0u32), (4, 10)] {
        let sequence = image.reserve_sequences(0, 20);
        let chunk = write_sketched_chunk(&mut image, slot, &entries(first, 20, sequence), FIXTURE_SKETCH_PRECISION);
        let (ofs, lsn) = image.instances[0].backup_log.next_position();
        expect(image.append_delta(
            0,
            &DeltaVersion {
                ofs_backup_start: ofs,
                lsn_backup_start: lsn,
                ..added(&image, 0, vec![chunk], image.last_sequence(0))
            },
        ));
    }
    expect(image.append_batch(0, puts(&["after-the-flushes"])));
    image
}

/// Every fixture.
pub fn all() -> Vec<Fixture> {
    let mut fixtures = vec![
        Fixture {
            name: "d_empty",
            description: "a freshly formatted 4 MiB volume: labels and the initial base version",
            image: empty(),
        },
        Fixture {
            name: "d_versions",
            description: "base and delta versions, chunks in levels 0 to 2 with an odd chunk, a trim, write batches",
            image: versions_image().bytes,
        },
        Fixture {
            name: "d_wrapped",
            description:
                "512-byte sectors and tiny logs: the version log wrapped (WOL) and the backup log wrapped (WOR, WOL)",
            image: wrapped_image().bytes,
        },
        Fixture {
            name: "d_journal",
            description: "an unfinished compaction: a compaction journal record with one output and one cleaned input",
            image: journal_image().bytes,
        },
        Fixture {
            name: "d_two_instances",
            description: "two instances with their own logs sharing one slot area",
            image: two_instances_image().bytes,
        },
    ];
    fixtures.extend(spec_cases::all());
    fixtures
}

/// gzip with a fixed header (no name, mtime 0), so the compressed bytes are reproducible too.
pub fn compress(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut encoder = flate2::GzBuilder::new().mtime(0).write(Vec::new(), flate2::Compression::best());
    let _ = encoder.write_all(bytes);
    encoder.finish().unwrap_or_default()
}

/// Decompresses a fixture image.
pub fn decompress(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut decoded = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut decoded)?;
    Ok(decoded)
}

/// The fixtures/ folder of the workspace.
pub fn fixtures_root() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // crates/lds-fixtures -> the workspace root.
    crate_dir.parent().and_then(Path::parent).unwrap_or(crate_dir).join("fixtures")
}

/// The volume image of `fixtures/<name>/`, unpacked (panics with the path when it cannot:
/// for tests).
pub fn load(name: &str) -> Vec<u8> {
    let path = fixtures_root().join(name).join("image.gz");
    let packed = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    decompress(&packed).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Unpacks `fixtures/<name>/image.gz` to a file of its own in the temporary directory: `tag`
/// keeps apart the tests of one process that unpack the same fixture. The file is removed
/// when the returned guard drops, so a failing test leaves nothing behind either.
pub fn unpack(name: &str, tag: &str) -> Unpacked {
    let path = std::env::temp_dir().join(format!("lds-fixture-{}-{tag}-{name}.img", std::process::id()));
    std::fs::write(&path, load(name)).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    Unpacked(path)
}

/// The path of an unpacked fixture image; dropping it removes the file.
#[derive(Debug)]
pub struct Unpacked(PathBuf);

impl std::ops::Deref for Unpacked {
    type Target = PathBuf;

    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl AsRef<Path> for Unpacked {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Unpacked {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn folder_names(prefix: &str) -> Vec<String> {
    let root = fixtures_root();
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap_or_else(|error| panic!("{}: {error}", root.display()))
        .filter_map(Result::ok)
        .filter(|entry| entry.path().join("image.gz").is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with(prefix))
        .collect();
    names.sort();
    names
}

/// The fsck case folders `fixtures/f_*` that hold an image, sorted.
pub fn fsck_case_names() -> Vec<String> {
    folder_names("f_")
}

/// The golden image folders `fixtures/d_*` that hold an image, sorted.
pub fn dump_fixture_names() -> Vec<String> {
    folder_names("d_")
}
