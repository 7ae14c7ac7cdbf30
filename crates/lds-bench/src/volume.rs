//! The LDS volume a benchmark formats for each fill: the paper's log sizes on volumes of 1 GiB
//! and more, the features the engine techniques asked for need, and the name `lds-bench`, so
//! that the next run may replace it without `--force` (docs/safety.md).

use std::path::Path;

use lds_tools::mkfs::{format as mkfs, plan, Request};
use lds_volume::{Device, OpenMode};

use crate::error::BenchError;

/// The name `lds bench` gives the volumes it formats: only those it replaces without
/// `--force` (docs/safety.md).
pub const BENCH_VOLUME_NAME: &str = "lds-bench";

/// The volume to format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchVolume {
    /// Bytes of an image file to create (an existing file or device keeps its size).
    pub size: u64,
    /// The slot size.
    pub slot_size: u64,
    /// The format version, `1.MINOR`.
    pub format_minor: u8,
    /// The engine techniques the benchmark runs with, NAME[,NAME].
    pub techniques: Option<String>,
}

impl BenchVolume {
    /// Whether the techniques include `technique`.
    pub fn technique_on(&self, technique: &str) -> bool {
        self.techniques.as_deref().is_some_and(|names| names.split(',').any(|name| name.trim() == technique))
    }
}

/// Formats `path` as `volume` describes, replacing what it holds (the caller checked that it
/// may: `refuse_replacing`).
pub fn format(path: &Path, volume: &BenchVolume, force: bool) -> Result<(), BenchError> {
    let request = Request {
        size: (!path.exists()).then_some(volume.size),
        slot_size: Some(volume.slot_size),
        // The paper's log sizes on volumes of 1 GiB and more; scaled down below. TRIAD-LOG
        // retains the backup log's batches until level 0 merges: a ring of four times the
        // paper's keeps a level-0 trigger's worth of memtables (SPEC.md §8.9).
        version_log_size: (volume.size >= 1 << 30).then_some(64 << 20),
        backup_log_size: (volume.size >= 1 << 30).then_some(if volume.technique_on("triad-log") {
            64 << 20
        } else {
            16 << 20
        }),
        name: BENCH_VOLUME_NAME.into(),
        force,
        format_minor: volume.format_minor,
        // Key-value separation needs a volume with value chunks (SPEC.md §8.6).
        value_chunks: volume.technique_on("kv-separation"),
        // Deferred level-0 merges read key sketches (SPEC.md §8.7).
        chunk_sketches: volume.technique_on("triad-disk"),
        // Log chunks (SPEC.md §8.9).
        log_tables: volume.technique_on("triad-log"),
        ..Request::new(path)
    };
    let label = plan(&request)?;
    Ok(mkfs(&request, &label)?)
}

/// Whether `label` is one a benchmark wrote (a volume `lds bench` may format again without
/// `--force`): the one test, for both `refuse_replacing` and `holds_bench_volume`.
fn is_bench_label(label: &lds_format::label::Label) -> bool {
    label.volume_name == BENCH_VOLUME_NAME
}

/// Refuses to replace what `path` holds (an LDS volume other than one a benchmark formatted,
/// a file system, a partition table) unless `force`; a path that does not exist is fine.
pub fn refuse_replacing(path: &Path, force: bool) -> Result<(), BenchError> {
    if !path.exists() || force {
        return Ok(());
    }
    let device = Device::open(path, OpenMode::ReadOnly)?;
    Ok(lds_volume::safety::refuse_replacing(&device, false, "lds bench", is_bench_label)?)
}

/// Whether `path` holds a volume a benchmark formatted (formatting it again needs no
/// `--force`).
pub fn holds_bench_volume(path: &Path) -> bool {
    Device::open(path, OpenMode::ReadOnly)
        .ok()
        .and_then(|device| lds_volume::read_labels(&device).ok())
        .is_some_and(|labels| labels.choose().is_ok_and(|(_, label)| is_bench_label(label)))
}
