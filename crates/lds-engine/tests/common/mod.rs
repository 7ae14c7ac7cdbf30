//! Helpers shared by the engine's integration tests: formatted image files and a seedable
//! random source.
#![allow(dead_code, reason = "each test binary uses a different part")]

use std::path::{Path, PathBuf};

use lds_format::algorithms::image::ImageBuilder;
use lds_format::geometry::{plan_layout, LayoutRequest};
use lds_format::label::Label;

/// xorshift64*: deterministic, seedable, no dependency.
pub struct Random(pub u64);

impl Random {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// A layout with small sectors and slots, so that tests exercise wraps, trims and levels.
pub fn small_layout(volume_len: u64, len_version_log: u64, len_backup_log: u64) -> LayoutRequest {
    LayoutRequest {
        volume_len,
        sector_size: Some(512),
        slot_size: Some(64 << 10),
        len_version_log: Some(len_version_log),
        len_backup_log: Some(len_backup_log),
        ..LayoutRequest::default()
    }
}

/// Writes what mkfs would write for `request` to `path`.
pub fn format_image(path: &Path, request: &LayoutRequest) {
    format_image_with(path, request, |label| label);
}

/// Writes what mkfs would write for `request` to `path`, with the label `features` makes.
pub fn format_image_with(path: &Path, request: &LayoutRequest, features: impl FnOnce(Label) -> Label) {
    let geometry = plan_layout(request, [0x42; 16]).unwrap_or_else(|error| panic!("{error}"));
    std::fs::write(path, ImageBuilder::format(features(Label::new(geometry, "test"))).bytes)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
}

/// A formatted image file in the temporary directory, removed on drop.
pub struct Image(PathBuf);

impl Image {
    pub fn new(name: &str, request: &LayoutRequest) -> Self {
        Self::with_features(name, request, |label| label)
    }

    /// A volume of format 1.4 with feature `value_chunks` (SPEC.md §8.6).
    pub fn with_value_chunks(name: &str, request: &LayoutRequest) -> Self {
        Self::with_features(name, request, |label| label.with_sync_watermark().with_fast_digest().with_value_chunks())
    }

    pub fn with_features(name: &str, request: &LayoutRequest, features: impl FnOnce(Label) -> Label) -> Self {
        let path = std::env::temp_dir().join(format!("lds-engine-test-{}-{name}.img", std::process::id()));
        format_image_with(&path, request, features);
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Asserts that a full scan of `db` returns exactly `model`, and that every `every`-th key
/// of it reads back by `get`.
pub fn assert_matches_model(
    db: &lds_engine::Db,
    model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    every: usize,
    context: &str,
) {
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(all.len(), model.len(), "{context}");
    assert!(all.iter().zip(model).all(|(a, b)| a.0 == *b.0 && a.1 == *b.1), "{context}: scan differs");
    for (key, value) in model.iter().step_by(every.max(1)) {
        assert_eq!(db.get(key).unwrap_or_else(|error| panic!("{error}")).as_ref(), Some(value), "{context}");
    }
}
