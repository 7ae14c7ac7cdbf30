//! What tests of whole volumes share: scratch paths removed when dropped, mkfs with value
//! chunks (SPEC.md §8.6) and loading through kv-separation, the frozen fixtures of a version,
//! the tree's shape, and running salvage.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A scratch image path for `test` (one per process), removed now if it exists.
pub fn scratch(test: &str, name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("lds-{test}-{}-{name}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Removes its files when dropped, also when an assertion fails.
pub struct Files(pub Vec<PathBuf>);

impl Drop for Files {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Formats `path` as a volume of `size` bytes with slots of `slot_size` and value chunks.
pub fn mkfs_with_value_chunks(path: &Path, size: u64, slot_size: u64) {
    let options = lds_cli::mkfs::MkfsOptions {
        path: path.to_path_buf(),
        size: Some(size),
        slot_size: Some(slot_size),
        value_chunks: true,
        ..Default::default()
    };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
}

/// Loads `input` (`lds load` lines, hex with `hex`) into instance 0 of `path` with
/// kv-separation.
pub fn load_separated(path: &Path, input: &str, hex: bool) {
    let target = lds_cli::kv::Target {
        path: path.to_path_buf(),
        instance: 0,
        hex,
        wait: None,
        technique: "kv-separation".into(),
    };
    let mut err = Vec::new();
    let code = lds_cli::kv::load(&target, None, false, &mut input.as_bytes(), &mut Vec::new(), &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
}

/// Opens `path` with kv-separation, values from `direct_min` bytes written to value chunks
/// before their batch.
pub fn open_separated(path: &Path, direct_min: usize) -> lds_engine::Db {
    let options = lds_engine::Options { value_direct_min: direct_min, ..lds_engine::Options::default() }
        .with_techniques("kv-separation")
        .unwrap_or_else(|error| panic!("{error}"));
    lds_engine::Db::open(path, options).unwrap_or_else(|error| panic!("{error}"))
}

/// The folders of the frozen fixtures of `version` (`fixtures/vVERSION/*`), sorted.
pub fn frozen_folders(version: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(format!("v{version}"));
    let mut folders: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|error| panic!("{}: {error}", root.display()))
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("image.gz").exists())
        .collect();
    folders.sort();
    folders
}

/// `lds dump PATH tree` with the key ranges masked.
pub fn tree_shape(path: &Path) -> Vec<String> {
    let options = lds_cli::dump::DumpOptions {
        path: path.to_path_buf(),
        what: lds_cli::dump::DumpWhat::Tree,
        instance: 0,
        json: false,
        entries: false,
        wait: std::time::Duration::ZERO,
    };
    let mut out = Vec::new();
    assert_eq!(lds_cli::dump::run(&options, &mut out, &mut Vec::new()), 0, "{}", path.display());
    String::from_utf8_lossy(&out)
        .lines()
        .map(|line| match line.find(" .. ") {
            Some(_) if line.trim_start().starts_with("chunk") => {
                let words: Vec<&str> = line.split_whitespace().collect();
                // chunk ID SMALLEST .. LARGEST N entries seq A..B
                format!("{} {} K .. K {}", words[0], words[1], words[5..].join(" "))
            }
            _ => line.to_string(),
        })
        .collect()
}

/// `lds salvage` of `path` to `output` (or a report only), text output.
pub fn salvage_args(path: &Path, output: Option<&Path>) -> lds_cli::salvage::SalvageArgs {
    lds_cli::salvage::SalvageArgs {
        path: path.to_path_buf(),
        output: output.map(Path::to_path_buf),
        export: None,
        size: None,
        force: false,
        json: false,
    }
}

/// Runs salvage: exit code, standard output, standard error.
pub fn salvage(args: &lds_cli::salvage::SalvageArgs) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = lds_cli::salvage::run(args, &mut out, &mut err);
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

/// `lds fsck --deep --json PATH`: its exit code and the codes of its errors and warnings,
/// sorted, each once.
pub fn fsck_codes(path: &Path) -> (i32, Vec<u64>) {
    let options = lds_cli::fsck::FsckOptions { path: path.to_path_buf(), deep: true, json: true, ..Default::default() };
    let mut out = Vec::new();
    let code = lds_cli::fsck::run(&options, &mut out, &mut Vec::new());
    let document: serde_json::Value =
        serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&out)));
    (code, problem_codes(&document))
}

/// The codes of the errors and warnings of an `lds fsck --json` document, sorted, once each.
pub fn problem_codes(document: &serde_json::Value) -> Vec<u64> {
    let mut codes: Vec<u64> = document["problems"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|problem| problem["severity"] != "info")
        .filter_map(|problem| problem["code"].as_u64())
        .collect();
    codes.sort_unstable();
    codes.dedup();
    codes
}

/// Runs the compactions a volume's technique still wants, to their end (a store closed while
/// its background thread was behind leaves some): the store opened with `technique` in
/// inline mode, one flush, and with `compact` a manual compaction (every key once, in one
/// tree: a damaged block then surely loses keys, with no other version to fall back to).
/// Tests that assert a tree's shape settle it first, so that the shape does not depend on how
/// fast the background thread ran.
pub fn settle(path: &Path, technique: &str, compact: bool) {
    let options = lds_engine::Options { background: false, ..lds_engine::Options::default() }
        .with_techniques(technique)
        .unwrap_or_else(|error| panic!("{error}"));
    let db = lds_engine::Db::open(path, options).unwrap_or_else(|error| panic!("{error}"));
    db.put(b"~settled", b"", lds_engine::WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    if compact {
        db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    }
    db.close().unwrap_or_else(|error| panic!("{error}"));
}

/// A small volume for a technique's shapes (64 MiB, 64 KiB slots, a 192 KiB backup log).
pub fn mkfs_small(path: &Path) {
    let mkfs = lds_cli::mkfs::MkfsOptions {
        path: path.to_path_buf(),
        size: Some(64 << 20),
        slot_size: Some(64 << 10),
        backup_log_size: Some(192 << 10),
        ..Default::default()
    };
    assert_eq!(lds_cli::mkfs::run(&mkfs, &mut Vec::new(), &mut Vec::new()), 0);
}

/// `lds load` of tab-separated `input` with `technique` on.
pub fn load_with(path: &Path, technique: &str, input: &str) {
    let target = lds_cli::kv::Target {
        path: path.to_path_buf(),
        instance: 0,
        hex: false,
        wait: None,
        technique: technique.into(),
    };
    let mut err = Vec::new();
    let code = lds_cli::kv::load(&target, None, false, &mut input.as_bytes(), &mut Vec::new(), &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
}

/// The store opened read-only (a writable one would start compacting with the leveled
/// engine).
pub fn read_only(path: &Path) -> lds_engine::Db {
    let (db, _) = lds_engine::Db::open_read_only(path, lds_engine::Options::default(), std::time::Duration::ZERO)
        .unwrap_or_else(|error| panic!("{error}"));
    db
}

/// The keys the volume holds.
pub fn count_keys(path: &Path) -> usize {
    let all: Vec<(Vec<u8>, Vec<u8>)> =
        read_only(path).iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    all.len()
}

/// Flips a byte in the first block of `slot`, which fsck finds (405), repairs the volume and
/// checks it clean, with fewer keys left than `keys`, by at most a block's.
pub fn damage_block_and_repair(path: &Path, slot: u64, keys: usize) {
    let mut image = std::fs::read(path).unwrap_or_else(|error| panic!("{error}"));
    let label = lds_format::label::Label::decode(&image[..512], 0).unwrap_or_else(|error| panic!("{error}"));
    let offset = label.geometry.slot_offset(slot) as usize;
    image[offset + 40] ^= 0x10;
    std::fs::write(path, &image).unwrap_or_else(|error| panic!("{error}"));
    let (code, codes) = fsck_codes(path);
    assert_ne!(code, 0);
    assert!(codes.contains(&405), "{codes:?}");
    let args = lds_cli::repair::RepairArgs { path: path.to_path_buf(), yes: true, no_undo: true, ..Default::default() };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let repaired = lds_cli::repair::run(&args, &mut out, &mut err);
    assert!(repaired == 1 || repaired == 0, "repair exit {repaired}: {}", String::from_utf8_lossy(&err));
    assert_eq!(fsck_codes(path), (0, Vec::new()));
    // One block lost: fewer keys, most kept.
    let after = count_keys(path);
    assert!(after < keys && after > keys - 200, "{keys} keys before, {after} after");
}
