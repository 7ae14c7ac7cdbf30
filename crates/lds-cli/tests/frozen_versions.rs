//! Guards compatibility with every released format version (SPEC.md §17): the volumes in
//! fixtures/v<VERSION>/, written by that version's engine and never regenerated, are read,
//! checked and dumped by this build with the state they were frozen with, and this build
//! can write to them and read them back. A volume of several devices (1.2) keeps its other
//! devices beside the first as device-N.gz; they are written beside it, where lds finds them.
//! The 1.6 volumes hold log chunks (SPEC.md §8.9) whose references this build follows, and
//! take log chunks of this build's too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lds_cli::dump::{DumpOptions, DumpWhat};
use lds_engine::{Db, Options, WriteOptions};
use lds_volume::MemoryImage;

type State = BTreeMap<(u32, Vec<u8>), Vec<u8>>;

fn frozen_volumes() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let mut found = Vec::new();
    let versions = std::fs::read_dir(&root).unwrap_or_else(|error| panic!("{}: {error}", root.display()));
    for version in versions.flatten() {
        let name = version.file_name().to_string_lossy().into_owned();
        if !name.starts_with('v') || !version.path().is_dir() {
            continue;
        }
        for volume in std::fs::read_dir(version.path()).into_iter().flatten().flatten() {
            found.push((format!("{name}/{}", volume.file_name().to_string_lossy()), volume.path()));
        }
    }
    found.sort();
    found
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2).map(|index| u8::from_str_radix(&text[2 * index..2 * index + 2], 16).unwrap_or(0)).collect()
}

fn expected_state(folder: &Path) -> State {
    let text = std::fs::read_to_string(folder.join("state.ndjson")).unwrap_or_else(|error| panic!("{error}"));
    text.lines()
        .map(|line| {
            let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}"));
            let field = |name: &str| value[name].as_str().map(unhex).unwrap_or_default();
            ((value["instance"].as_u64().unwrap_or(0) as u32, field("key_hex")), field("value_hex"))
        })
        .collect()
}

fn read_state(path: &Path, instance_count: u32) -> State {
    let mut state = State::new();
    for instance in 0..instance_count {
        let options = Options { instance, ..Options::default() };
        let (db, _) = Db::open_read_only(path, options, Duration::ZERO).unwrap_or_else(|error| panic!("{error}"));
        for pair in db.iter().unwrap_or_else(|error| panic!("{error}")) {
            let (key, value) = pair.unwrap_or_else(|error| panic!("{error}"));
            state.insert((instance, key), value);
        }
    }
    state
}

fn fsck_clean(path: &Path, context: &str) -> lds_check::Summary {
    let volume = lds_volume::Members::open(path, lds_volume::OpenMode::ReadOnly, Duration::ZERO)
        .unwrap_or_else(|error| panic!("{context}: {error}"));
    let report =
        lds_check::check(&volume, lds_check::CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
            .unwrap_or_else(|error| panic!("{context}: {error}"));
    let lines: Vec<String> = report.problems.iter().map(lds_check::Problem::line).collect();
    assert_eq!(report.exit_code(), 0, "{context}: {lines:#?}");
    report.summary
}

/// The live log chunks of the volume at `path` (SPEC.md §8.9), with the oldest log start and
/// the bytes retained from there, as the engine reads them.
fn log_chunks(path: &Path) -> (usize, Option<u64>, u64) {
    let (db, _) =
        Db::open_read_only(path, Options::default(), Duration::ZERO).unwrap_or_else(|error| panic!("{error}"));
    let chunks = db.chunks();
    let starts: Vec<_> = chunks.iter().filter_map(|chunk| chunk.log_start).collect();
    assert_eq!(starts.len(), chunks.iter().filter(|chunk| chunk.is_log_chunk()).count());
    (starts.len(), starts.iter().min().map(|start| start.offset), db.stats().log_retained_bytes)
}

/// A 1.6 volume frozen for its log chunks holds them, and `log_across_wrap`'s retained region
/// runs across the end of the backup log.
fn assert_log_chunks(name: &str, path: &Path) {
    let (count, start, retained) = log_chunks(path);
    assert!(count >= 2, "{name}: {count} log chunks");
    assert!(retained > 0, "{name}: log chunks that retain nothing");
    if name == "v1.6/log_across_wrap" {
        let image = std::fs::read(path).unwrap_or_else(|error| panic!("{error}"));
        let labels = lds_volume::read_labels(&MemoryImage(&image)).unwrap_or_else(|error| panic!("{error}"));
        let len_ring = labels.choose().map(|(_, label)| label.geometry.len_backup_log).unwrap_or(0);
        let start = start.unwrap_or_else(|| panic!("{name}: no log start"));
        assert!(
            start + retained > len_ring,
            "{name}: the region from {start} ({retained} bytes) stays inside the ring"
        );
    }
}

/// Writes fresh keys to a 1.6 volume with TRIAD-LOG on (small memtables), flushing, so that
/// this build's log chunks join the frozen ones (its flushes write them only while the ring
/// has room; the frozen volumes leave some).
fn write_log_chunks(name: &str, path: &Path, written: &mut State) {
    let options = Options { write_buffer_size: 1 << 10, ..Options::default() }
        .with_techniques("triad-log")
        .unwrap_or_else(|error| panic!("{error}"));
    let db = Db::open(path, options).unwrap_or_else(|error| panic!("{name}: {error}"));
    for number in 0..24u32 {
        let key = format!("log-written-by-this-build-{number:02}").into_bytes();
        let value = format!("{number}-{}", "t".repeat(60)).into_bytes();
        db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("{name}: {error}"));
        written.insert((0, key), value);
    }
    db.flush().unwrap_or_else(|error| panic!("{name}: flush: {error}"));
    let flushes = db.stats().log_chunk_flushes;
    db.close().unwrap_or_else(|error| panic!("{name}: {error}"));
    assert!(flushes > 0, "{name}: this build wrote no log chunk");
}

#[test]
fn every_frozen_volume_reads_checks_dumps_and_takes_writes() {
    let volumes = frozen_volumes();
    for (version, count) in
        [("v1.0/", 4), ("v1.1/", 4), ("v1.2/", 2), ("v1.3/", 4), ("v1.4/", 5), ("v1.5/", 5), ("v1.6/", 7), ("v1.7/", 4)]
    {
        assert!(
            volumes.iter().filter(|(name, _)| name.starts_with(version)).count() >= count,
            "{version}: {volumes:?}"
        );
    }
    for (name, folder) in volumes {
        let compressed = std::fs::read(folder.join("image.gz")).unwrap_or_else(|error| panic!("{name}: {error}"));
        let image = lds_fixtures::decompress(&compressed).unwrap_or_else(|error| panic!("{name}: {error}"));
        // A directory of its own: the files beside a volume are its other devices.
        let directory =
            std::env::temp_dir().join(format!("lds-frozen-{}-{}", std::process::id(), name.replace('/', "-")));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap_or_else(|error| panic!("{error}"));
        let path = directory.join("image");
        std::fs::write(&path, &image).unwrap_or_else(|error| panic!("{error}"));
        for index in 1.. {
            let Ok(compressed) = std::fs::read(folder.join(format!("device-{index}.gz"))) else { break };
            let device = lds_fixtures::decompress(&compressed).unwrap_or_else(|error| panic!("{name}: {error}"));
            std::fs::write(directory.join(format!("device-{index}")), device).unwrap_or_else(|error| panic!("{error}"));
        }
        let summary = fsck_clean(&path, &name);
        // 1.4 volumes were written with key-value separation (SPEC.md §8.6).
        if name.starts_with("v1.4/") {
            assert!(summary.value_chunks > 0 && summary.values_verified > 0, "{name}: no value chunks: {summary:?}");
        }
        // 1.5 volumes were written with deferred level-0 merges: this one left six level-0
        // chunks with sketches.
        if name == "v1.5/deferred_level0" {
            assert_eq!(summary.key_sketches, 6, "{name}: {summary:?}");
        }
        let labels = lds_volume::read_labels(&MemoryImage(&image)).unwrap_or_else(|error| panic!("{error}"));
        let instance_count = labels.choose().map(|(_, label)| label.geometry.instance_count).unwrap_or(1);
        let expected = expected_state(&folder);
        assert!(!expected.is_empty(), "{name}: no state");
        // 1.6 volumes were written with TRIAD-LOG: the ones named for it hold log chunks whose
        // references the reads below follow (an engine without the technique reads them).
        if name.starts_with("v1.6/log_") {
            assert_log_chunks(&name, &path);
        }
        assert!(read_state(&path, instance_count) == expected, "{name}: reads differ from the frozen state");
        for instance in 0..instance_count {
            for what in [
                DumpWhat::Label,
                DumpWhat::Volume,
                DumpWhat::VersionLog,
                DumpWhat::BackupLog,
                DumpWhat::Slots,
                DumpWhat::Tree,
            ] {
                let options = DumpOptions {
                    path: path.clone(),
                    what: what.clone(),
                    instance,
                    json: true,
                    entries: false,
                    wait: Duration::ZERO,
                };
                let mut err = Vec::new();
                let code = lds_cli::dump::run(&options, &mut Vec::new(), &mut err);
                assert_eq!(code, 0, "{name}: dump {what:?}: {}", String::from_utf8_lossy(&err));
            }
        }
        // This build writes to the old volume; everything reads back and fsck stays clean.
        let mut written = expected.clone();
        if name.starts_with("v1.6/") {
            write_log_chunks(&name, &path, &mut written);
            assert!(
                read_state(&path, instance_count) == written,
                "{name}: reads after log chunks of this build differ"
            );
            fsck_clean(&path, &format!("{name} after log chunks of this build"));
        }
        let db = Db::open(&path, Options::default()).unwrap_or_else(|error| panic!("{name}: {error}"));
        db.put(b"written-by-this-build", b"yes", WriteOptions { sync: true }).unwrap_or_else(|error| panic!("{error}"));
        written.insert((0, b"written-by-this-build".to_vec()), b"yes".to_vec());
        db.compact_range().unwrap_or_else(|error| panic!("{name}: compact: {error}"));
        db.close().unwrap_or_else(|error| panic!("{name}: {error}"));
        assert!(read_state(&path, instance_count) == written, "{name}: reads after a write by this build differ");
        fsck_clean(&path, &format!("{name} after a write"));
        let _ = std::fs::remove_dir_all(&directory);
    }
}
