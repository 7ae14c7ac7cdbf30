//! Size-tiered compaction (LDS paper §4.2.5, technique `size-tiered`): chunks are grouped
//! into tiers by size, and when a tier holds `threshold` chunks (Cassandra's minimum
//! compaction threshold, 4) they are merged into one chunk of several sub-chunks spanning
//! slots (SPEC.md §8.4), which lands in a larger tier. Flushes make tier-0 chunks of one slot.
//!
//! Adapted to LDS's levels: every tier lives in level 0, whose chunks may overlap and are
//! read newest first (SPEC.md §8.1), so that the format needs nothing new; a chunk's tier is
//! its size in slots, `ceil(log_threshold(slots))` (1 slot: tier 0; 2 to 4: tier 1; 5 to 16:
//! tier 2, with threshold 4). A merge's outputs are written as they come, each sub-chunk's
//! identity (chunk id, index, count) set and its tail written again once the merge knows how
//! many there are; it is never journaled (one chunk cannot be committed in parts), so it
//! needs free slots for its whole output, and a crash loses it and nothing else. A tombstone
//! goes only where no chunk outside the merge overlaps it.

use lds_format::version::meta::ChunkMeta;
use lds_format::version::Version;

use crate::compaction::pick::Plan;

/// The tier of a chunk of `slots` sub-chunks.
pub(crate) fn tier(slots: usize, threshold: usize) -> u32 {
    let threshold = threshold.max(2);
    let (mut tier, mut capacity) = (0, 1usize);
    while capacity < slots {
        capacity = capacity.saturating_mul(threshold);
        tier += 1;
    }
    tier
}

/// The chunks of level 0 in tier 0 (one slot): what flushes made and no merge took yet, the
/// count writers wait on.
pub(crate) fn tier0_count(version: &Version) -> usize {
    version.level(0).iter().filter(|chunk| chunk.sub_chunks.len() <= 1).count()
}

/// The next size-tiered merge: with `manual`, every chunk of the version into one; else the
/// chunks of the smallest tier of level 0 holding at least `threshold`, all of them.
pub(crate) fn pick(version: &Version, threshold: usize, manual: bool) -> Option<Plan> {
    let victims: Vec<ChunkMeta> = if manual {
        let all: Vec<ChunkMeta> = version.chunks.values().cloned().collect();
        // One chunk alone is already what a manual compaction makes.
        if all.len() < 2 {
            return None;
        }
        all
    } else {
        let level0 = version.level(0);
        let mut tiers: std::collections::BTreeMap<u32, Vec<ChunkMeta>> = std::collections::BTreeMap::new();
        for chunk in level0 {
            tiers.entry(tier(chunk.sub_chunks.len(), threshold)).or_default().push(chunk.clone());
        }
        tiers.into_values().find(|chunks| chunks.len() >= threshold.max(2))?
    };
    Some(Plan {
        source_level: 0,
        target_level: 0,
        victims,
        overlapping: Vec::new(),
        manual,
        tiered: true,
        forest: false,
        moved: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::version::meta::SubChunkRef;

    #[test]
    fn tiers_grow_by_the_threshold() {
        let tiers: Vec<u32> = [1, 2, 4, 5, 16, 17, 64, 65].iter().map(|&slots| tier(slots, 4)).collect();
        assert_eq!(tiers, vec![0, 1, 1, 2, 2, 3, 3, 4]);
    }

    fn chunk(chunk_id: u64, level: u8, slots: u64) -> ChunkMeta {
        ChunkMeta {
            chunk_id,
            level,
            flags: 0,
            num_entries: 1,
            smallest_seq: chunk_id,
            largest_seq: chunk_id,
            len_data: 10,
            smallest_key: b"a".to_vec(),
            largest_key: b"z".to_vec(),
            sub_chunks: (0..slots).map(|index| SubChunkRef { slot: chunk_id + index, digest: [0; 32] }).collect(),
            value_refs: Vec::new(),
            log_start: None,
        }
    }

    fn version(chunks: &[ChunkMeta]) -> Version {
        crate::compaction::testing::version(7, chunks)
    }

    #[test]
    fn the_smallest_full_tier_merges_whole() {
        let ids = |plan: Option<Plan>| -> Vec<u64> {
            plan.map(|plan| plan.victims.iter().map(|chunk| chunk.chunk_id).collect()).unwrap_or_default()
        };
        // Three one-slot chunks and four of three slots: tier 1 is full, tier 0 is not.
        let mut chunks: Vec<ChunkMeta> = (0..3).map(|index| chunk(index * 100, 0, 1)).collect();
        chunks.extend((3..7).map(|index| chunk(index * 100, 0, 3)));
        assert_eq!(ids(pick(&version(&chunks), 4, false)), vec![300, 400, 500, 600]);
        // A fourth one-slot chunk: tier 0 goes first.
        chunks.push(chunk(700, 0, 1));
        assert_eq!(ids(pick(&version(&chunks), 4, false)), vec![0, 100, 200, 700]);
        // Below the threshold everywhere: nothing.
        assert!(pick(&version(&chunks[..3]), 4, false).is_none());
        // A manual compaction takes every chunk, in every level.
        chunks.push(chunk(800, 3, 1));
        let plan = pick(&version(&chunks[..3].iter().chain(&chunks[8..]).cloned().collect::<Vec<_>>()), 4, true);
        assert_eq!(ids(plan), vec![0, 100, 200, 800]);
        assert!(pick(&version(&chunks[..1]), 4, true).is_none());
        assert_eq!(tier0_count(&version(&chunks)), 4);
    }
}
