//! One merge (SPEC.md §10.2, §11): read every input sub-chunk whole and verify its digest,
//! merge the entries newest first, keep what a snapshot or a deeper level still needs, pack
//! the rest into chunks, and decide whether the last one stays behind as the source level's
//! odd chunk. It reads the device and builds chunks in memory; it allocates, writes and
//! commits nothing (the caller does, with `table::write` and `version::commit`).

use lds_format::chunk::{BuiltSubChunk, SubChunkView};
use lds_format::label::Geometry;
use lds_format::version::{ChunkMeta, Version, CHUNK_FLAG_ODD};
use lds_volume::BlockDevice;

use crate::compaction::pick::{key_range, overlaps, Plan};
use crate::error::{Error, Result};
use crate::retention::Retention;
use crate::table::build::{build_chunks, ChunkFormat};
use crate::table::cache::footer_not_the_versions;

/// What a merge needs: where its inputs are, how to build its outputs, and what readers
/// still see.
pub(crate) struct MergeContext<'a> {
    /// The device holding the inputs.
    pub(crate) device: &'a dyn BlockDevice,
    /// Where slots are.
    pub(crate) geometry: &'a Geometry,
    /// How outputs are built.
    pub(crate) format: ChunkFormat,
    /// The version the plan was made from.
    pub(crate) version: &'a Version,
    /// The sequence number every live snapshot sees (older versions hidden from it go).
    pub(crate) smallest_snapshot: u64,
}

/// The outputs of a merge, built and not yet written, each with its level and flags.
pub(crate) struct MergeOutput {
    /// The chunks, in key order.
    pub(crate) built: Vec<BuiltSubChunk>,
    /// `(level, flags)` of each.
    pub(crate) placement: Vec<(u8, u8)>,
    /// Every input chunk (victims and overlapping ones), deleted by the commit.
    pub(crate) inputs: Vec<ChunkMeta>,
}

/// Merges the plan's victims with the chunks they overlap.
pub(crate) fn merge(context: &MergeContext<'_>, plan: &Plan) -> Result<MergeOutput> {
    let (geometry, version) = (context.geometry, context.version);
    let target_level = plan.target_level;
    let inputs: Vec<ChunkMeta> = plan.victims.iter().chain(&plan.overlapping).cloned().collect();
    let (smallest, largest) = key_range(&inputs);
    let mut images = Vec::new();
    for chunk in &inputs {
        for sub_chunk in &chunk.sub_chunks {
            let offset = geometry.slot_offset(sub_chunk.slot);
            images.push((sub_chunk, offset, context.device.read_vec(offset, geometry.slot_size)?));
        }
    }
    let corrupt = |source| Error::Corrupt { path: context.device.name().display().to_string(), source };
    let mut entries = Vec::new();
    for (sub_chunk, offset, image) in &images {
        let view = SubChunkView::open(image, *offset).map_err(corrupt)?;
        // Reads verify only the blocks they touch; a compaction rewrites everything it reads,
        // so it verifies everything, lest a stale or misdirected block be copied into a new
        // chunk with a fresh checksum (SPEC.md §8.3).
        if view.footer.digest != sub_chunk.digest {
            let footer_offset = offset + geometry.slot_size - lds_format::chunk::FOOTER_LEN as u64;
            return Err(corrupt(footer_not_the_versions(footer_offset, sub_chunk.slot)));
        }
        view.verify_digest(*offset).map_err(corrupt)?;
        entries.extend(view.entries(*offset).map_err(corrupt)?);
    }
    entries.sort_by(|a, b| a.key.cmp(b.key).then(b.sequence.cmp(&a.sequence)));
    // Deeper levels that overlap the range decide whether a tombstone may be dropped.
    let deeper: Vec<(Vec<u8>, Vec<u8>)> = version
        .chunks
        .values()
        .filter(|chunk| chunk.level > target_level && overlaps(chunk, &smallest, &largest))
        .map(|chunk| (chunk.smallest_key.clone(), chunk.largest_key.clone()))
        .collect();
    let mut retention = Retention::new(context.smallest_snapshot);
    let merged = entries.iter().filter(|entry| {
        retention.keep(entry.key, entry.sequence, entry.kind, |key| {
            !deeper.iter().any(|(low, high)| low.as_slice() <= key && key <= high.as_slice())
        })
    });
    let built = build_chunks(&context.format, merged.map(|entry| (entry.key, entry.sequence, entry.kind, entry.value)));
    let mut placement = vec![(target_level, 0u8); built.len()];
    if let Some(last) = built.last() {
        let odd_fits = !plan.manual
            && plan.source_level > 0
            && built.len() > 1
            && last.len_data() < geometry.slot_size / 2
            && !version.level(plan.source_level).iter().any(|chunk| {
                !plan.victims.contains(chunk) && (chunk.is_odd() || overlaps(chunk, &last.first_key, &last.last_key))
            });
        if odd_fits {
            // SPEC.md §11: the odd chunk stays in the source level.
            if let Some(place) = placement.last_mut() {
                *place = (plan.source_level, CHUNK_FLAG_ODD);
            }
        }
    }
    Ok(MergeOutput { built, placement, inputs })
}
