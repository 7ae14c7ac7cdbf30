//! A volume whose version log is full of small valid objects: the case where a tool that keeps
//! a record per log object runs out of memory (LDS issue 39, case 9). The default is the
//! measured case of docs/tools.md ("Memory"): a 64 MiB version log holding about 599,000
//! delta versions, built with the format crate's encoders and append planner like every other
//! fixture, so each object is valid (checksums, lsns, sn) and the whole log is live.
//!
//! The volume holds one small level-0 chunk (so that the tree, the slots and the key-value
//! commands have something to show), a write batch the chunk holds and one written after the
//! flush (replayed by recovery), then delta versions that change nothing (no chunk added or
//! deleted, the same backup start: 112 bytes each, the smallest valid object a version log
//! holds) until the count asked for is reached or the log is full. "Full" leaves room, as a
//! writer must (SPEC.md §10.3), for a base version of the tree plus a WOR and a WOL, so that
//! a writer opening the volume can trim; the log is past half the area, which a writer only
//! SHOULD avoid.

use lds_format::algorithms::image::ImageBuilder;
use lds_format::batch::BatchEntry;
use lds_format::entry::EntryKind;
use lds_format::geometry::LayoutRequest;
use lds_format::version::payload::DeltaVersion;

use crate::{added, entries, expect, new_label, puts};

/// What to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManyObjects {
    /// Bytes of the version log area (a multiple of the sector size, 4096).
    pub len_version_log: u64,
    /// Delta versions to append after the first flush; `None` fills the log.
    pub objects: Option<u64>,
}

impl Default for ManyObjects {
    /// The measured case: a 64 MiB version log, filled.
    fn default() -> Self {
        Self { len_version_log: 64 << 20, objects: None }
    }
}

/// What [`many_objects`] built.
#[derive(Debug, Clone)]
pub struct ManyObjectsImage {
    /// The volume.
    pub image: ImageBuilder,
    /// Objects in the version log: the base version, the delta of the flush and the
    /// delta versions that fill it.
    pub version_log_objects: u64,
    /// Bytes of the version log in use (from offset 0 to the head).
    pub version_log_bytes: u64,
}

/// Slot size of the volume: small, the slots are not what this volume is about.
const SLOT_SIZE: u64 = 1 << 20;
/// Slots of the volume beyond the logs.
const NUM_SLOTS: u64 = 8;
/// Backup log bytes.
const LEN_BACKUP_LOG: u64 = 1 << 20;
/// Entries of the one chunk.
const CHUNK_ENTRIES: u32 = 100;

/// Builds the volume `request` describes (see the module's documentation). Panics when the
/// request cannot be laid out (a version log below 16 sectors or not a multiple of 4096):
/// this is a fixture generator.
pub fn many_objects(request: ManyObjects) -> ManyObjectsImage {
    let layout = LayoutRequest {
        // The label, both logs, the slots and the backup label, each area aligned to the
        // slot size (SPEC.md §3), with a slot to spare.
        volume_len: request.len_version_log + LEN_BACKUP_LOG + (NUM_SLOTS + 3) * SLOT_SIZE,
        sector_size: Some(4096),
        slot_size: Some(SLOT_SIZE),
        len_version_log: Some(request.len_version_log),
        len_backup_log: Some(LEN_BACKUP_LOG),
        instance_count: Some(1),
    };
    let label = new_label(layout, 0x39, "many objects").with_sync_watermark().with_compact_entries();
    let mut image = ImageBuilder::format(label);
    // A batch the chunk holds, the flush writing the chunk, and a batch after it.
    expect(image.append_batch(0, puts(&["alpha", "beta"])));
    let sequence = image.reserve_sequences(0, u64::from(CHUNK_ENTRIES));
    let chunk = image.write_chunk(0, 0, 0, 0, &entries(0, CHUNK_ENTRIES, sequence));
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let flush = DeltaVersion {
        ofs_backup_start: ofs,
        lsn_backup_start: lsn,
        ..added(&image, 0, vec![chunk], image.last_sequence(0))
    };
    expect(image.append_delta(0, &flush));
    expect(
        image.append_batch(0, vec![BatchEntry { kind: EntryKind::Put, key: b"gamma".to_vec(), value: b"g".to_vec() }]),
    );
    // Delta versions that change nothing: the smallest valid version log object.
    let empty = added(&image, 0, Vec::new(), image.last_sequence(0));
    let payload_len = empty.encode().len();
    let sector = u64::from(image.label.geometry.sector_size);
    let base_len = image.instances[0].version.to_base(image.label.geometry, 0).encode().len();
    // Room kept for a writer's trim: a base version (with a quarter to spare, as the engine
    // reserves) and the sectors of a WOR and a WOL.
    let reserve = base_len + base_len / 4 + 2 * sector as usize;
    let mut version_log_objects = 2;
    // Bounded by the count asked for, or by the area: each object takes 112 bytes of it.
    let objects_max = request.objects.unwrap_or(request.len_version_log / 64);
    for _ in 0..objects_max {
        if !image.instances[0].version_log.fits(&[payload_len, reserve]) {
            break;
        }
        expect(image.append_delta(0, &empty));
        version_log_objects += 1;
    }
    let version_log_bytes = image.instances[0].version_log.head().offset;
    ManyObjectsImage { image, version_log_objects, version_log_bytes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::algorithms::recovery::recover_version_log;
    use lds_format::geometry::LogKind;
    use lds_format::log::area_context;

    #[test]
    fn the_log_recovers_with_every_object_live() {
        let built = many_objects(ManyObjects { len_version_log: 256 << 10, objects: Some(500) });
        assert_eq!(built.version_log_objects, 502);
        let geometry = built.image.label.geometry;
        let context = area_context(&geometry, LogKind::Version, 0);
        let state = recover_version_log(built.image.area(LogKind::Version, 0), &context)
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(state.sequence_len, 502);
        assert_eq!(state.base_index, 0);
        assert_eq!(state.version.chunks.len(), 1);
        assert_eq!(state.head.offset, built.version_log_bytes);
    }

    #[test]
    fn a_full_log_keeps_room_for_a_trim() {
        let len_version_log = 256 << 10;
        let built = many_objects(ManyObjects { len_version_log, objects: None });
        // 112 bytes an object: the log is nearly full, and a base version still fits.
        assert!(built.version_log_objects > (len_version_log - 4 * 4096) / 112, "{}", built.version_log_objects);
        assert!(built.image.instances[0].version_log.fits(&[4096]));
    }
}
