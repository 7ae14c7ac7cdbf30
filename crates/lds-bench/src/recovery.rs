//! Recovery time of a full version log: an image whose 64 MiB version log is filled with
//! delta versions (each replacing one chunk by its copy in another slot, as a compaction
//! does), written to the device; then the time `Db::open` takes, page cache dropped first.

use std::path::Path;
use std::time::Instant;

use lds_engine::{Db, Options};
use lds_format::algorithms::image::ImageBuilder;
use lds_format::entry::EntryKind;
use lds_format::geometry::{plan_layout, LayoutRequest, LogKind};
use lds_format::label::Label;
use lds_format::version::payload::{DeletedChunk, DeltaVersion};
use lds_volume::{BlockDevice, Device, OpenMode};

use crate::error::BenchError;

/// What recovery of the full log measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RecoveryResult {
    /// The file or device.
    pub path: String,
    /// Version log area bytes.
    pub version_log_bytes: u64,
    /// Bytes of the area the live chain covers at open.
    pub live_bytes: u64,
    /// Delta versions in the log.
    pub objects: u64,
    /// Chunks in the recovered tree.
    pub chunks: usize,
    /// Seconds `Db::open` took (labels, both logs, the tree).
    pub open_seconds: f64,
    /// Whether the page cache was dropped before the open.
    pub cold: bool,
}

const RANGES: u64 = 20;

/// Builds the image: 4 MiB slots, a 64 MiB version log filled to the last delta that fits.
pub fn full_log_image(version_log: u64) -> Result<(ImageBuilder, u64), BenchError> {
    let request = LayoutRequest {
        volume_len: version_log + (16 << 20) + (2 * RANGES + 8) * (4 << 20),
        slot_size: Some(4 << 20),
        len_version_log: Some(version_log),
        len_backup_log: Some(16 << 20),
        ..LayoutRequest::default()
    };
    let geometry = plan_layout(&request, [0xBE; 16])?;
    let mut image = ImageBuilder::format(Label::new(geometry, "recovery-bench"));
    let first_slot = 0;
    // Each key range has a chunk in two slots: deltas swap between the copies.
    let mut current = Vec::new();
    let mut copies = Vec::new();
    for range in 0..RANGES {
        let first = image.reserve_sequences(0, 100);
        let entries: Vec<(Vec<u8>, u64, EntryKind, Vec<u8>)> = (0..100)
            .map(|index| {
                (format!("{range:04}-{index:011}").into_bytes(), first + index, EntryKind::Put, vec![7u8; 100])
            })
            .collect();
        let a = image.write_chunk(0, first_slot + 2 * range, 1, 0, &entries);
        let b = image.write_chunk(0, first_slot + 2 * range + 1, 1, 0, &entries);
        current.push(a.clone());
        copies.push(b);
    }
    let last_sequence = image.last_sequence(0);
    let delta = |deleted: Vec<DeletedChunk>, added| DeltaVersion {
        last_sequence,
        ofs_backup_start: 0,
        lsn_backup_start: 1,
        compaction_id: 0,
        deleted,
        compact_pointers: Vec::new(),
        added,
        values: None,
    };
    image.append_delta(0, &delta(Vec::new(), current.clone())).map_err(BenchError::Append)?;
    let mut objects = 1;
    loop {
        let range = (objects % RANGES) as usize;
        let old = current[range].clone();
        let new = copies[range].clone();
        let step = delta(vec![DeletedChunk { chunk_id: old.chunk_id, level: old.level }], vec![new.clone()]);
        if image.append_delta(0, &step).is_err() {
            break;
        }
        current[range] = new;
        copies[range] = old;
        objects += 1;
    }
    Ok((image, objects))
}

fn drop_page_cache(device: &Device) -> bool {
    let _ = device.flush();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// Writes the image to `path` (an existing block device, or a file created or overwritten)
/// and times the open.
pub fn measure(path: &Path) -> Result<RecoveryResult, BenchError> {
    let version_log = 64u64 << 20;
    let (image, objects) = full_log_image(version_log)?;
    let geometry = image.label.geometry;
    if !path.exists() {
        std::fs::File::create(path).map_err(BenchError::file(path, "cannot create"))?;
    }
    {
        let device = Device::open(path, OpenMode::ReadWrite)?;
        if device.kind() == lds_volume::DeviceKind::ImageFile {
            device.allocate(image.bytes.len() as u64)?;
        }
        for (index, piece) in image.bytes.chunks(16 << 20).enumerate() {
            BlockDevice::write_at(&device, (index as u64) * (16 << 20), piece)?;
        }
        device.flush()?;
    }
    let cold = Device::open(path, OpenMode::ReadOnly).map(|device| drop_page_cache(&device)).unwrap_or(false);
    let started = Instant::now();
    let (db, _) = Db::open_with_report(path, Options { background: false, ..Options::default() })
        .map_err(|source| BenchError::Volume { path: path.to_path_buf(), what: "open: ", source: Box::new(source) })?;
    let open_seconds = started.elapsed().as_secs_f64();
    let chunks = db.chunks().len();
    drop(db);
    let (_, area_len) = geometry.log_area(LogKind::Version, 0);
    let live_bytes = image.instances[0].version_log.head().offset;
    Ok(RecoveryResult {
        path: path.display().to_string(),
        version_log_bytes: area_len,
        live_bytes,
        objects,
        chunks,
        open_seconds,
        cold,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_full_log_recovers_every_swap() {
        let (image, objects) = full_log_image(1 << 20).expect("image");
        // A 1 MiB log holds thousands of deltas; recovery sees the last tree.
        assert!(objects > 3000, "only {objects} deltas fit");
        let path = std::env::temp_dir().join(format!("lds-recovery-bench-{}.img", std::process::id()));
        std::fs::write(&path, &image.bytes).expect("write");
        let db = Db::open(&path, Options { background: false, ..Options::default() }).expect("open");
        let mut slots: Vec<u64> = db.chunks().iter().map(|chunk| chunk.chunk_id).collect();
        slots.sort_unstable();
        let expected: Vec<u64> = image.instances[0].version.chunks.keys().copied().collect();
        drop(db);
        std::fs::remove_file(&path).expect("cleanup");
        assert_eq!(slots.len(), RANGES as usize);
        assert_eq!(slots, expected);
    }
}
