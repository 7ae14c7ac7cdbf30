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

use std::path::{Path, PathBuf};

use lds_format::batch::{BatchEntry, EntryKind};
use lds_format::image::ImageBuilder;
use lds_format::label::{plan_layout, Label, LayoutRequest};
use lds_format::logref::{LogPosition, LogRef};
use lds_format::version::{
    ChunkMeta, CompactPointer, CompactionJournal, DeletedChunk, DeltaVersion, CHUNK_FLAG_LOG_REFS, CHUNK_FLAG_ODD,
};

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

/// Every fixture.
pub fn all() -> Vec<Fixture> {
    vec![
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
    ]
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
