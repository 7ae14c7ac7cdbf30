//! What the tests of volumes with value chunks (SPEC.md §8.6) share: scratch paths removed
//! when dropped, and mkfs with value chunks.
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
