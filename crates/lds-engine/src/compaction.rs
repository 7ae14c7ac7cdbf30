//! Leveled compaction (LevelDB's, on LDS slots): choosing what to compact, trivial moves,
//! merging into the next level, the odd-chunk rule of SPEC.md §11, and the commit of one
//! delta version after which the input slots are freed.

use lds_format::chunk::{SubChunkView, FOOTER_LEN};
use lds_format::version::{
    ChunkMeta, CompactPointer, DeletedChunk, DeltaVersion, SubChunkRef, Version, CHUNK_FLAG_ODD,
};
use lds_format::FormatError;

use crate::background::{build_chunks, commit, flush_device, smallest_snapshot, write_chunks};
use crate::db::Shared;
use crate::error::{Error, Result};
use crate::retention::Retention;

/// What one compaction does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Level the victims come from.
    pub(crate) source_level: u8,
    /// Level the outputs go to: the next one, or the same for the last level's manual
    /// rewrite.
    pub(crate) target_level: u8,
    /// Victims in the source level.
    pub(crate) victims: Vec<ChunkMeta>,
    /// Chunks of the next level that overlap the victims.
    pub(crate) overlapping: Vec<ChunkMeta>,
    /// A manual compaction: everything goes down, no odd chunk stays behind.
    pub(crate) manual: bool,
}

/// Level sizing, from the options and the slot size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) level0_trigger: usize,
    pub(crate) level1_bytes: u64,
    pub(crate) multiplier: u64,
}

impl Limits {
    fn level_bytes(&self, level: u8) -> u64 {
        let mut bytes = self.level1_bytes;
        for _ in 1..level {
            bytes = bytes.saturating_mul(self.multiplier);
        }
        bytes
    }
}

fn overlaps(chunk: &ChunkMeta, smallest: &[u8], largest: &[u8]) -> bool {
    chunk.smallest_key.as_slice() <= largest && smallest <= chunk.largest_key.as_slice()
}

fn key_range(chunks: &[ChunkMeta]) -> (Vec<u8>, Vec<u8>) {
    let smallest = chunks.iter().map(|chunk| chunk.smallest_key.clone()).min().unwrap_or_default();
    let largest = chunks.iter().map(|chunk| chunk.largest_key.clone()).max().unwrap_or_default();
    (smallest, largest)
}

/// The limits of an open store.
pub(crate) fn limits(shared: &Shared) -> Limits {
    let options = &shared.options;
    let level1_bytes =
        if options.level1_max_bytes == 0 { 10 * shared.geometry.slot_size } else { options.level1_max_bytes };
    Limits {
        level0_trigger: options.level0_compaction_trigger.max(1),
        level1_bytes,
        multiplier: options.level_size_multiplier.max(2),
    }
}

/// Picks the level most over its limit (score >= 1) and its victims, or nothing. A manual
/// compaction (`Some(level)`) takes the whole first non-empty level from `level` on, above
/// the last level, and merges it into the next even without overlap, so that obsolete
/// versions go (LevelDB's CompactRange).
pub(crate) fn pick(version: &Version, limits: &Limits, manual: Option<u8>) -> Option<Plan> {
    let last_level = (version.num_levels - 1) as u8;
    if let Some(from_level) = manual {
        let source_level = (from_level..=last_level).find(|&level| !version.level(level).is_empty())?;
        let victims: Vec<ChunkMeta> = version.level(source_level).into_iter().cloned().collect();
        // The last level merges into itself (a bottommost rewrite).
        let target_level = (source_level + 1).min(last_level);
        let (smallest, largest) = key_range(&victims);
        let overlapping = if target_level == source_level {
            Vec::new()
        } else {
            version
                .level(target_level)
                .into_iter()
                .filter(|chunk| overlaps(chunk, &smallest, &largest))
                .cloned()
                .collect()
        };
        return Some(Plan { source_level, target_level, victims, overlapping, manual: true });
    }
    let mut best: Option<(f64, u8)> = None;
    for level in 0..last_level {
        let chunks = version.level(level);
        let score = if level == 0 {
            chunks.len() as f64 / limits.level0_trigger as f64
        } else {
            chunks.iter().map(|chunk| chunk.len_data).sum::<u64>() as f64 / limits.level_bytes(level) as f64
        };
        if score >= 1.0 && best.is_none_or(|(best_score, _)| score > best_score) {
            best = Some((score, level));
        }
    }
    let (_, source_level) = best?;
    let chunks: Vec<ChunkMeta> = version.level(source_level).into_iter().cloned().collect();
    let victims = if source_level == 0 {
        chunks
    } else {
        // Round robin: the first chunk after the level's compact pointer (paper §2.1), with
        // the level's odd chunk attached when it is the victim's neighbour (SPEC.md §11).
        let pointer = version.compact_pointers.get(&source_level);
        let index = chunks
            .iter()
            .position(|chunk| pointer.is_none_or(|pointer| chunk.smallest_key.as_slice() > pointer.as_slice()))
            .unwrap_or(0);
        let mut victims = vec![chunks[index].clone()];
        for neighbour in [index.checked_sub(1), Some(index + 1)].into_iter().flatten() {
            if let Some(chunk) = chunks.get(neighbour).filter(|chunk| chunk.is_odd()) {
                victims.push(chunk.clone());
            }
        }
        victims
    };
    let (smallest, largest) = key_range(&victims);
    let overlapping = version
        .level(source_level + 1)
        .into_iter()
        .filter(|chunk| overlaps(chunk, &smallest, &largest))
        .cloned()
        .collect();
    Some(Plan { source_level, target_level: source_level + 1, victims, overlapping, manual: false })
}

fn deleted_of(chunks: &[ChunkMeta]) -> Vec<DeletedChunk> {
    chunks.iter().map(|chunk| DeletedChunk { chunk_id: chunk.chunk_id, level: chunk.level }).collect()
}

/// Whether a plan moves its victims down without rewriting them: nothing overlaps them in
/// the target level, and they do not overlap each other (one chunk from level 1 and below;
/// level-0 chunks of sequential writes, which LevelDB would move one by one). Several
/// level-0 chunks move only when each fills at least half its slot: a slot holds one chunk,
/// so moving small chunks down would keep their slots mostly empty, where a merge packs them.
fn trivial_move(plan: &Plan, slot_size: u64) -> bool {
    if plan.manual || !plan.overlapping.is_empty() {
        return false;
    }
    if plan.victims.len() == 1 {
        return true;
    }
    if plan.source_level != 0 || plan.victims.iter().any(|chunk| chunk.len_data < slot_size / 2) {
        return false;
    }
    let mut ranges: Vec<(&[u8], &[u8])> =
        plan.victims.iter().map(|chunk| (chunk.smallest_key.as_slice(), chunk.largest_key.as_slice())).collect();
    ranges.sort_unstable();
    ranges.windows(2).all(|pair| pair[0].1 < pair[1].0)
}

/// Runs one compaction: a trivial move, or a merge committed by one delta version after
/// which the input slots are freed (once no reader holds them).
pub(crate) fn compact(shared: &Shared, plan: &Plan) -> Result<()> {
    let target_level = plan.target_level;
    let (_, victims_largest) = key_range(&plan.victims);
    let pointer = (plan.source_level > 0 && target_level > plan.source_level)
        .then(|| CompactPointer { level: plan.source_level, key: victims_largest.clone() });
    let version = std::sync::Arc::clone(&shared.lock_state().version);
    if trivial_move(plan, shared.geometry.slot_size) {
        // Trivial move (paper §2.1 footnote 1): the chunks change level, not slot.
        let moved = plan
            .victims
            .iter()
            .map(|victim| {
                let mut moved = victim.clone();
                moved.level = target_level;
                moved.flags &= !CHUNK_FLAG_ODD;
                moved
            })
            .collect();
        let delta = DeltaVersion {
            last_sequence: version.last_sequence,
            ofs_backup_start: version.ofs_backup_start,
            lsn_backup_start: version.lsn_backup_start,
            compaction_id: 0,
            deleted: deleted_of(&plan.victims),
            compact_pointers: pointer.into_iter().collect(),
            added: moved,
        };
        return commit(shared, &mut shared.lock_state(), &delta, &[]);
    }
    let inputs: Vec<ChunkMeta> = plan.victims.iter().chain(&plan.overlapping).cloned().collect();
    let (smallest, largest) = key_range(&inputs);
    let mut images = Vec::new();
    for chunk in &inputs {
        for sub_chunk in &chunk.sub_chunks {
            let offset = shared.geometry.slot_offset(sub_chunk.slot);
            images.push((sub_chunk, offset, shared.device.read_vec(offset, shared.geometry.slot_size)?));
        }
    }
    let corrupt = |error| Error::Corrupt { path: shared.path_string(), error };
    let mut entries = Vec::new();
    for (sub_chunk, offset, image) in &images {
        let view = SubChunkView::open(image, *offset).map_err(corrupt)?;
        verify_digest(&view, sub_chunk, *offset).map_err(corrupt)?;
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
    let mut retention = Retention::new(smallest_snapshot(shared));
    let merged = entries.iter().filter(|entry| {
        retention.keep(entry.key, entry.sequence, entry.kind, |key| {
            !deeper.iter().any(|(low, high)| low.as_slice() <= key && key <= high.as_slice())
        })
    });
    let mut built = build_chunks(shared, merged.map(|entry| (entry.key, entry.sequence, entry.kind, entry.value)));
    let mut placement = vec![(target_level, 0u8); built.len()];
    if let Some(last) = built.last() {
        let odd_fits = !plan.manual
            && plan.source_level > 0
            && built.len() > 1
            && last.len_data() < shared.geometry.slot_size / 2
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
    let added = write_chunks(shared, &mut built, &placement)?;
    flush_device(shared)?;
    let delta = DeltaVersion {
        last_sequence: version.last_sequence,
        ofs_backup_start: version.ofs_backup_start,
        lsn_backup_start: version.lsn_backup_start,
        compaction_id: 0,
        deleted: deleted_of(&inputs),
        compact_pointers: pointer.into_iter().collect(),
        added,
    };
    let mut state = shared.lock_state();
    // A flush may have committed since `version` was taken; the delta applies to the
    // current version, which still holds every input (only this thread deletes chunks).
    let delta = DeltaVersion {
        last_sequence: state.version.last_sequence,
        ofs_backup_start: state.version.ofs_backup_start,
        lsn_backup_start: state.version.lsn_backup_start,
        ..delta
    };
    commit(shared, &mut state, &delta, &inputs)
}

/// Checks that a compaction input is the sub-chunk the version names, whole: its footer's
/// digest is the version's and its bytes hash to it (SPEC.md §8.3). Reads verify only the
/// blocks they touch; a compaction rewrites everything it reads, so it verifies everything,
/// lest a stale or misdirected block be copied into a new chunk with a fresh checksum.
fn verify_digest(
    view: &SubChunkView<'_>,
    sub_chunk: &SubChunkRef,
    offset: u64,
) -> std::result::Result<(), FormatError> {
    let footer = &view.footer;
    let footer_offset = offset + view.slot.len() as u64 - FOOTER_LEN as u64;
    if footer.digest != sub_chunk.digest {
        return Err(crate::read::footer_not_the_versions(footer_offset, sub_chunk.slot));
    }
    let body = view.slot.get(..footer.len_body as usize).unwrap_or_default();
    let tail = view.slot.get(footer.ofs_index as usize..view.slot.len() - FOOTER_LEN).unwrap_or_default();
    let mut hasher = blake3::Hasher::new();
    hasher.update(body);
    hasher.update(tail);
    hasher.update(&footer.encode_digest_covered());
    if *hasher.finalize().as_bytes() != footer.digest {
        return Err(FormatError::DigestMismatch { structure: "sub-chunk", offset });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::version::SubChunkRef;
    use std::collections::BTreeMap;

    fn meta(chunk_id: u64, level: u8, smallest: &str, largest: &str, len_data: u64, flags: u8) -> ChunkMeta {
        ChunkMeta {
            chunk_id,
            level,
            flags,
            num_entries: 1,
            smallest_seq: chunk_id,
            largest_seq: chunk_id,
            len_data,
            smallest_key: smallest.as_bytes().to_vec(),
            largest_key: largest.as_bytes().to_vec(),
            sub_chunks: vec![SubChunkRef { slot: chunk_id, digest: [0; 32] }],
        }
    }

    #[test]
    fn disjoint_level0_chunks_move_down_together() {
        let plan = |source_level, victims: Vec<ChunkMeta>, overlapping: Vec<ChunkMeta>, manual| Plan {
            source_level,
            target_level: source_level + 1,
            victims,
            overlapping,
            manual,
        };
        let sequential = vec![meta(3, 0, "e", "h", 10, 0), meta(1, 0, "a", "d", 10, 0), meta(2, 0, "i", "k", 10, 0)];
        assert!(trivial_move(&plan(0, sequential.clone(), Vec::new(), false), 20));
        // Small chunks are merged, so that they share slots.
        assert!(!trivial_move(&plan(0, sequential.clone(), Vec::new(), false), 24));
        // Overlapping level-0 chunks, something below, or a manual compaction: a merge.
        let mut touching = sequential.clone();
        touching[0].smallest_key = b"d".to_vec();
        assert!(!trivial_move(&plan(0, touching, Vec::new(), false), 20));
        assert!(!trivial_move(&plan(0, sequential.clone(), vec![meta(9, 1, "j", "z", 10, 0)], false), 20));
        assert!(!trivial_move(&plan(0, sequential.clone(), Vec::new(), true), 20));
        // Below level 0 only a single chunk moves (an attached odd chunk is merged).
        assert!(!trivial_move(&plan(1, sequential[..2].to_vec(), Vec::new(), false), 20));
        assert!(trivial_move(&plan(1, sequential[..1].to_vec(), Vec::new(), false), 20));
    }

    fn version(chunks: Vec<ChunkMeta>) -> Version {
        let mut version = Version {
            num_levels: 7,
            last_sequence: 0,
            label_generation: 1,
            ofs_backup_start: 0,
            lsn_backup_start: 1,
            compact_pointers: BTreeMap::new(),
            chunks: BTreeMap::new(),
            slot_owner: BTreeMap::new(),
            num_slots: 100,
        };
        for chunk in chunks {
            version.slot_owner.insert(chunk.chunk_id, chunk.chunk_id);
            version.chunks.insert(chunk.chunk_id, chunk);
        }
        version
    }

    const LIMITS: Limits = Limits { level0_trigger: 4, level1_bytes: 1000, multiplier: 10 };

    #[test]
    fn nothing_to_do_below_the_limits() {
        let chunks = vec![meta(1, 0, "a", "c", 10, 0), meta(2, 1, "a", "z", 999, 0)];
        assert_eq!(pick(&version(chunks), &LIMITS, None), None);
    }

    #[test]
    fn level0_takes_every_chunk_and_the_overlapping_level1_chunks() {
        let chunks = vec![
            meta(1, 0, "b", "d", 10, 0),
            meta(2, 0, "c", "f", 10, 0),
            meta(3, 0, "a", "b", 10, 0),
            meta(4, 0, "e", "e", 10, 0),
            meta(5, 1, "a", "c", 10, 0),
            meta(6, 1, "g", "h", 10, 0),
        ];
        let plan = pick(&version(chunks), &LIMITS, None).expect("level 0 is full");
        assert_eq!(plan.source_level, 0);
        assert_eq!(plan.victims.len(), 4);
        assert_eq!(plan.overlapping.iter().map(|chunk| chunk.chunk_id).collect::<Vec<_>>(), vec![5]);
    }

    #[test]
    fn round_robin_after_the_compact_pointer_with_an_odd_neighbour() {
        let chunks = vec![
            meta(1, 1, "a", "b", 600, 0),
            meta(2, 1, "c", "d", 600, 0),
            meta(3, 1, "e", "f", 100, CHUNK_FLAG_ODD),
            meta(4, 2, "c", "e", 100, 0),
        ];
        let mut version = version(chunks);
        version.compact_pointers.insert(1, b"b".to_vec());
        let plan = pick(&version, &LIMITS, None).expect("level 1 is over");
        assert_eq!(plan.source_level, 1);
        let victims: Vec<u64> = plan.victims.iter().map(|chunk| chunk.chunk_id).collect();
        assert_eq!(victims, vec![2, 3], "the chunk after the pointer and its odd neighbour");
        assert_eq!(plan.overlapping.iter().map(|chunk| chunk.chunk_id).collect::<Vec<_>>(), vec![4]);
    }

    #[test]
    fn the_fullest_level_goes_first_and_the_last_level_never() {
        let chunks =
            vec![meta(1, 1, "a", "b", 1500, 0), meta(2, 2, "a", "b", 30_000, 0), meta(3, 6, "a", "z", u64::MAX / 2, 0)];
        let plan = pick(&version(chunks), &LIMITS, None).expect("over");
        assert_eq!(plan.source_level, 2, "level 2 at 3.0 beats level 1 at 1.5");
    }
}
