//! TRIAD-DISK (technique `triad-disk`): a level-0 merge that the chunk count calls for waits
//! while the level-0 chunks share few keys, so that when it runs it drops many duplicates at
//! once. The overlap is estimated from the key sketches flushes write with each level-0 chunk
//! (SPEC.md §8.7), kept in memory by chunk id.
//!
//! Adapted from TRIAD §4.2: there an SSTable's HyperLogLog lives beside it in memory; here it
//! is written into the chunk's slot, so that it survives a reopen without reading the chunk's
//! keys again, and a chunk whose sketch is missing or damaged makes level 0 merge as usual.

use std::collections::BTreeMap;

use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::geometry::Geometry;
use lds_format::sketch::{overlap_ratio, Sketch};
use lds_format::version::meta::ChunkMeta;
use lds_format::version::Version;
use lds_volume::BlockDevice;

use crate::options::Options;

/// The sketches of the level-0 chunks, by chunk id (`TreeState::level0_sketches`).
pub(crate) type Sketches = BTreeMap<u64, Sketch>;

/// True when level 0 should wait: the technique is on, level 0 holds at most
/// `level0_defer_max` chunks, each has a sketch, and their overlap ratio is below
/// `level0_overlap_min` (TRIAD's deferCompaction).
pub(crate) fn level0_deferred(options: &Options, version: &Version, sketches: &Sketches) -> bool {
    let Some(overlap_min) = options.level0_overlap_min else { return false };
    let level0 = version.level(0);
    if level0.len() > options.level0_defer_max || level0.len() < 2 {
        return false;
    }
    let sketches: Option<Vec<&Sketch>> = level0.iter().map(|chunk| sketches.get(&chunk.chunk_id)).collect();
    match sketches.and_then(overlap_ratio) {
        Some(ratio) => ratio < overlap_min,
        None => false,
    }
}

/// The key sketches of the level-0 chunks of `version`, read from their slots (at open). A
/// chunk whose sketch cannot be read or fails its checks is left out.
pub(crate) fn read_sketches(device: &dyn BlockDevice, geometry: &Geometry, version: &Version) -> Sketches {
    version
        .level(0)
        .into_iter()
        .filter_map(|chunk| read_chunk_sketch(device, geometry, chunk).map(|sketch| (chunk.chunk_id, sketch)))
        .collect()
}

fn read_chunk_sketch(device: &dyn BlockDevice, geometry: &Geometry, chunk: &ChunkMeta) -> Option<Sketch> {
    let mut union: Option<Sketch> = None;
    for sub_chunk in &chunk.sub_chunks {
        let slot_offset = geometry.slot_offset(sub_chunk.slot);
        let footer_offset = slot_offset + geometry.slot_size - FOOTER_LEN as u64;
        let bytes = device.read_vec(footer_offset, FOOTER_LEN as u64).ok()?;
        let footer = Footer::decode(&bytes, footer_offset, geometry.slot_size).ok()?;
        if footer.digest != sub_chunk.digest || footer.len_sketch == 0 {
            return None;
        }
        let sketch_offset = slot_offset + u64::from(footer.ofs_sketch);
        let bytes = device.read_vec(sketch_offset, u64::from(footer.len_sketch)).ok()?;
        let sketch = Sketch::decode(&bytes, sketch_offset, footer.sketch_crc32c).ok()?;
        match union.as_mut() {
            None => union = Some(sketch),
            Some(union) => {
                if !union.merge(&sketch) {
                    return None;
                }
            }
        }
    }
    union
}

/// Keeps the sketches of the chunks a flush just added (`added`: id and encoded sketch) and
/// forgets those of chunks no longer in level 0 of `version` (the one the flush committed).
pub(crate) fn remember(sketches: &mut Sketches, version: &Version, added: &[(u64, Footer, Vec<u8>)]) {
    for (chunk_id, footer, bytes) in added {
        if let Ok(sketch) = Sketch::decode(bytes, 0, footer.sketch_crc32c) {
            sketches.insert(*chunk_id, sketch);
        }
    }
    let level0: std::collections::BTreeSet<u64> = version.level(0).iter().map(|chunk| chunk.chunk_id).collect();
    sketches.retain(|chunk_id, _| level0.contains(chunk_id));
}
