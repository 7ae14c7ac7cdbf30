//! The afl targets of docs/reliability.md L1 (every decoder, whole images) and L3 (the crash
//! simulator) as plain functions, shared by the afl wrapper in fuzz/afl, the replay test and
//! the corpus generator. Every target takes any bytes and returns; it panics only when an
//! oracle fails, with a message that names the target and the oracle. fuzz/README.md says how
//! to run them and how a crash becomes a regression input.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]

mod decoders;
mod fixup;
mod image;
mod input;
mod repair;
pub mod seeds;
mod sim;
mod undo;

pub use decoders::{
    backup_log, base_version, block, chunk_meta, compaction_journal, delta_version, filter, footer, geometry, index,
    key_sketch, label, layout, log_object, log_ref, slot, value_footer, value_pointer, version_log, wrap, write_batch,
};
pub use image::image;
pub use repair::repair_target as repair;
pub use sim::sim;
pub use undo::undo_file;

/// A target: any bytes in, a panic only on a failed oracle.
pub type Target = fn(&[u8]);

/// Every target by name (the folder names of fuzz/corpus and fuzz/regressions, and the bin
/// names of fuzz/afl), cheapest first.
pub const TARGETS: &[(&str, Target)] = &[
    ("label", label),
    ("geometry", geometry),
    ("layout", layout),
    ("log_object", log_object),
    ("version_log", version_log),
    ("backup_log", backup_log),
    ("base_version", base_version),
    ("delta_version", delta_version),
    ("compaction_journal", compaction_journal),
    ("chunk_meta", chunk_meta),
    ("write_batch", write_batch),
    ("wrap", wrap),
    ("footer", footer),
    ("index", index),
    ("filter", filter),
    ("block", block),
    ("slot", slot),
    ("key_sketch", key_sketch),
    ("value_footer", value_footer),
    ("value_pointer", value_pointer),
    ("log_ref", log_ref),
    ("undo_file", undo_file),
    ("image", image),
    ("repair", repair),
    ("sim", sim),
];

/// The target of a name.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(target, _)| *target == name).map(|(_, function)| *function)
}
