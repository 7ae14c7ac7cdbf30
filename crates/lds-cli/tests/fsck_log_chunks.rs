//! Guards `lds fsck` on volumes with log chunks (SPEC.md §8.9, feature `log_tables`): a volume
//! the engine wrote with technique triad-log holds log chunks, checks clean, and its summary
//! counts them as the engine does (references written, bytes of the ring retained); then
//! three damages each give exactly their problem and exit code 4: a referenced batch
//! overwritten in the backup log (801), a log chunk's metadata rewritten with a later log
//! start (803), and a chunk with kind-3 entries whose metadata lacks flag `log_refs` (802). On
//! a small ring that wraps under retention, fsck stays clean and counts the retained bytes
//! across the wrap as the engine does.

use std::path::{Path, PathBuf};

use lds_format::algorithms::recovery::{recover_version_log, VersionLogState};
use lds_format::algorithms::writer::LogAppender;
use lds_format::geometry::LogKind;
use lds_format::label::{Label, LABEL_LEN};
use lds_format::log::{LogPosition, ObjectHeader, ObjectType, HEADER_LEN};
use lds_format::version::meta::{ChunkMeta, CHUNK_FLAG_LOG_REFS};
use lds_format::version::payload::{DeletedChunk, DeltaVersion};

mod volumes;

/// An image of the test, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What the engine said after writing the volume.
struct Written {
    log_chunks: usize,
    log_references: u64,
    log_retained_bytes: u64,
}

/// Formats `path` as a 1.6 volume (64 MiB, 256 KiB slots, `backup_log` bytes of backup log)
/// and opens it with triad-log and memtables of `memtable` bytes.
fn open_triad_log(path: &Path, backup_log: u64, memtable: usize) -> lds_engine::Db {
    let mkfs = lds_cli::mkfs::MkfsOptions {
        path: path.to_path_buf(),
        size: Some(64 << 20),
        slot_size: Some(256 << 10),
        backup_log_size: Some(backup_log),
        log_tables: true,
        ..Default::default()
    };
    assert_eq!(lds_cli::mkfs::run(&mkfs, &mut Vec::new(), &mut Vec::new()), 0);
    let options = lds_engine::Options {
        background: false,
        write_buffer_size: memtable,
        level0_compaction_trigger: 4,
        ..lds_engine::Options::default()
    }
    .with_techniques("triad-log")
    .unwrap_or_else(|error| panic!("{error}"));
    lds_engine::Db::open(path, options).unwrap_or_else(|error| panic!("{error}"))
}

/// Puts keys `keys` with values of 31 to 120 bytes (all above a reference's 24) of `round`;
/// every 50th synced, so that the backup log holds several objects (unsynced puts gather into
/// one object until a sync or the writer's buffer closes it, SPEC.md §7).
fn fill(db: &lds_engine::Db, keys: std::ops::Range<u32>, round: u32) {
    for number in keys {
        let key = format!("key-{number:06}");
        let value = format!("value-{round}-{number:06}-{}", "x".repeat((number % 90) as usize + 15));
        let options = lds_engine::WriteOptions { sync: number % 50 == 49 };
        db.put(key.as_bytes(), value.as_bytes(), options).unwrap_or_else(|error| panic!("{error}"));
    }
}

/// A volume with 2 MiB of backup log and 600 keys written through triad-log, one flush: one
/// log chunk.
fn write_volume(path: &Path) -> Written {
    let db = open_triad_log(path, 2 << 20, 256 << 10);
    fill(&db, 0..600, 0);
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    let stats = db.stats();
    let log_chunks = db.chunks().iter().filter(|chunk| chunk.is_log_chunk()).count();
    db.close().unwrap_or_else(|error| panic!("{error}"));
    Written { log_chunks, log_references: stats.log_references, log_retained_bytes: stats.log_retained_bytes }
}

/// `lds fsck --deep --json`: exit code and document.
fn fsck(path: &Path) -> (i32, serde_json::Value) {
    let options = lds_cli::fsck::FsckOptions { path: path.to_path_buf(), deep: true, json: true, ..Default::default() };
    let mut out = Vec::new();
    let code = lds_cli::fsck::run(&options, &mut out, &mut Vec::new());
    let document =
        serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&out)));
    (code, document)
}

/// The volume's label and instance 0's recovered version log.
fn recovered(bytes: &[u8]) -> (Label, VersionLogState) {
    let label = Label::decode(&bytes[..LABEL_LEN], 0).unwrap_or_else(|error| panic!("{error}"));
    let (offset, len) = label.geometry.log_area(LogKind::Version, 0);
    let context = lds_format::log::area_context(&label.geometry, LogKind::Version, 0);
    let state = recover_version_log(&bytes[offset as usize..(offset + len) as usize], &context)
        .unwrap_or_else(|error| panic!("{error}"));
    (label, state)
}

/// The log chunk of instance 0 (the test writes one).
fn log_chunk(state: &VersionLogState) -> ChunkMeta {
    let chunks: Vec<&ChunkMeta> = state.version.chunks.values().filter(|chunk| chunk.is_log_chunk()).collect();
    assert_eq!(chunks.len(), 1, "one log chunk: {chunks:?}");
    chunks[0].clone()
}

/// Appends to instance 0's version log a delta version that replaces `chunk`'s metadata with
/// `replacement` (the engine's own encoders; the delta keeps the backup start).
fn replace_chunk_meta(bytes: &mut [u8], chunk: &ChunkMeta, replacement: ChunkMeta) {
    let (label, state) = recovered(bytes);
    let context = lds_format::log::area_context(&label.geometry, LogKind::Version, 0);
    let mut appender = LogAppender::new(context, state.head, state.base_offset, state.base_lsn);
    let delta = DeltaVersion {
        deleted: vec![DeletedChunk { chunk_id: chunk.chunk_id, level: chunk.level }],
        added: vec![replacement],
        last_sequence: state.version.last_sequence,
        ofs_backup_start: state.version.ofs_backup_start,
        lsn_backup_start: state.version.lsn_backup_start,
        ..DeltaVersion::default()
    };
    let pending =
        appender.append(ObjectType::DeltaVersion, state.sn, &delta.encode()).unwrap_or_else(|error| panic!("{error}"));
    for write in pending {
        let at = (context.ofs_area + write.offset) as usize;
        bytes[at..at + write.bytes.len()].copy_from_slice(&write.bytes);
    }
}

/// The header of the backup log object at `position` of instance 0's area.
fn backup_object(bytes: &[u8], label: &Label, position: LogPosition) -> ObjectHeader {
    let at = (label.geometry.ofs_backup_log + position.offset) as usize;
    ObjectHeader::parse_raw(&bytes[at..at + HEADER_LEN], at as u64).unwrap_or_else(|error| panic!("{error}"))
}

/// Writes `bytes` to a new image of the test and returns its fsck exit code and the codes of
/// its errors and warnings, with the document.
fn fsck_of(bytes: &[u8], name: &str) -> (i32, Vec<u64>, serde_json::Value) {
    let image = Scratch(volumes::scratch("fsck-log-chunks", name));
    std::fs::write(&image.0, bytes).unwrap_or_else(|error| panic!("{error}"));
    let (code, document) = fsck(&image.0);
    (code, volumes::problem_codes(&document), document)
}

fn messages(document: &serde_json::Value, code: u64) -> Vec<String> {
    let problems = document["problems"].as_array().cloned().unwrap_or_default();
    problems
        .iter()
        .filter(|problem| problem["code"] == code)
        .map(|problem| format!("{} {}", problem["structure"], problem["message"]))
        .collect()
}

#[test]
fn a_triad_log_volume_checks_clean_and_each_damage_gives_its_code() {
    let image = Scratch(volumes::scratch("fsck-log-chunks", "written"));
    let written = write_volume(&image.0);
    assert_eq!(written.log_chunks, 1, "the flush wrote a log chunk");
    assert!(written.log_references >= 500, "most values are 24 bytes or more: {}", written.log_references);

    // Clean, counted as the engine counts.
    let (code, document) = fsck(&image.0);
    assert_eq!(code, 0, "{document:#}");
    assert_eq!(volumes::problem_codes(&document), Vec::<u64>::new());
    let summary = &document["summary"];
    assert_eq!(summary["log_chunks"], 1, "{summary:#}");
    assert_eq!(summary["log_references"], written.log_references, "{summary:#}");
    assert!(written.log_retained_bytes > 0);
    assert_eq!(summary["log_retained_bytes"], written.log_retained_bytes, "{summary:#}");
    assert_eq!(summary["log_retained"][0]["instance"], 0, "{summary:#}");
    assert_eq!(summary["log_retained"][0]["bytes"], written.log_retained_bytes, "{summary:#}");

    let bytes = std::fs::read(&image.0).unwrap_or_else(|error| panic!("{error}"));
    let (label, state) = recovered(&bytes);
    let chunk = log_chunk(&state);
    let start = chunk.log_start.unwrap_or_else(|| panic!("a log chunk has a log start"));
    let header = backup_object(&bytes, &label, start);
    assert_eq!((header.lsn, header.object_type_code), (start.lsn, ObjectType::WriteBatch.code()));

    // (a) The oldest referenced batch, a byte of its payload flipped: its references do not
    // resolve (checksum), and nothing else is wrong.
    let mut damaged = bytes.clone();
    let at = (label.geometry.ofs_backup_log + start.offset) as usize + HEADER_LEN + 20;
    damaged[at] ^= 0x10;
    let (code, codes, document) = fsck_of(&damaged, "batch");
    assert_eq!((code, codes), (4, vec![801]), "{document:#}");
    let unresolved = messages(&document, 801);
    let expected_object = format!("lsn {}, object at offset {} of the backup log", start.lsn, start.offset);
    assert!(unresolved[0].contains(&expected_object), "{unresolved:?}");
    assert!(unresolved[0].contains("checksum mismatch"), "{unresolved:?}");
    assert!(unresolved[0].contains(&format!("chunk {} of instance 0", chunk.chunk_id)), "{unresolved:?}");

    // (b) The log chunk's metadata with a later log start: the next object of the ring.
    let next = LogPosition {
        offset: (start.offset + HEADER_LEN as u64 + u64::from(header.len_payload)).next_multiple_of(8),
        lsn: start.lsn + 1,
    };
    assert_eq!(backup_object(&bytes, &label, next).lsn, next.lsn, "the next object follows");
    let mut damaged = bytes.clone();
    replace_chunk_meta(&mut damaged, &chunk, ChunkMeta { log_start: Some(next), ..chunk.clone() });
    let (code, codes, document) = fsck_of(&damaged, "later-start");
    assert_eq!((code, codes), (4, vec![803]), "{document:#}");
    let mismatch = messages(&document, 803);
    assert!(mismatch[0].contains("a later start lets the writer overwrite"), "{mismatch:?}");

    // (c) The same chunk without flag log_refs: kind-3 entries in an ordinary chunk.
    let mut damaged = bytes.clone();
    let flagless = ChunkMeta { flags: chunk.flags & !CHUNK_FLAG_LOG_REFS, log_start: None, ..chunk.clone() };
    replace_chunk_meta(&mut damaged, &chunk, flagless);
    let (code, codes, document) = fsck_of(&damaged, "no-flag");
    assert_eq!((code, codes), (4, vec![802]), "{document:#}");
    let invalid = messages(&document, 802);
    assert!(invalid[0].contains(&format!("{} log references", written.log_references)), "{invalid:?}");
    assert!(invalid[0].contains("lacks flag log_refs"), "{invalid:?}");
    assert_eq!(document["summary"]["log_chunks"], 0, "no chunk is flagged");

    // The image fsck read last was never written to.
    assert!(std::fs::read(&image.0).unwrap_or_default() == bytes, "fsck changed the image");
}

#[test]
fn a_small_ring_wrapped_under_retention_checks_clean_with_the_engines_count() {
    // 128 KiB of ring and 32 KiB memtables: log chunks retain parts of the ring, level 0
    // merges early to release them, and the ring wraps many times.
    let image = Scratch(volumes::scratch("fsck-log-chunks", "small-ring"));
    let db = open_triad_log(&image.0, 128 << 10, 32 << 10);
    let mut wrapped = false;
    let mut checked = 0;
    // Checked after each flush of 700 keys until a check saw the retained region wrap.
    for round in 0..60 {
        if wrapped && checked >= 3 {
            break;
        }
        let first = round * 700 % 3_000;
        fill(&db, first..first + 700, round);
        db.flush().unwrap_or_else(|error| panic!("{error}"));
        let stats = db.stats();
        let chunks = db.chunks();
        let starts: Vec<LogPosition> = chunks.iter().filter_map(|chunk| chunk.log_start).collect();
        // fsck reads the volume the engine holds (the flush made it durable).
        let options = lds_cli::fsck::FsckOptions {
            path: image.0.clone(),
            deep: true,
            json: true,
            force_readonly: true,
            ..Default::default()
        };
        let mut out = Vec::new();
        let code = lds_cli::fsck::run(&options, &mut out, &mut Vec::new());
        let document: serde_json::Value =
            serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&out)));
        assert_eq!(code, 0, "round {round}: {document:#}");
        let summary = &document["summary"];
        assert_eq!(summary["log_chunks"], starts.len(), "round {round}: {summary:#}");
        assert_eq!(summary["log_retained_bytes"], stats.log_retained_bytes, "round {round}: {summary:#}");
        // Retention across the wrap: the oldest log start lies after the backup start.
        let bytes = std::fs::read(&image.0).unwrap_or_else(|error| panic!("{error}"));
        let (_, state) = recovered(&bytes);
        let oldest = starts.iter().min();
        wrapped |= oldest.is_some_and(|oldest| oldest.offset > state.version.ofs_backup_start);
        checked += usize::from(!starts.is_empty());
    }
    assert!(checked >= 2, "log chunks stood in only {checked} of the checks");
    assert!(wrapped, "no check saw the retained region across the wrap");
    db.close().unwrap_or_else(|error| panic!("{error}"));
}
