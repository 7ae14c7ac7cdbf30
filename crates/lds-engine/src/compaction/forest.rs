//! The split forest (SifrDB §4.1, technique `forest`): size-tiered compaction whose trees are
//! stored split, as disjoint one-slot chunks, so that a merge of trees rewrites only the
//! chunks whose key ranges overlap and moves the others (their metadata changes, not their
//! slots).
//!
//! Adapted to LDS's levels, with no format change: a tree is a level (its chunks disjoint,
//! SPEC.md §8.1), and the levels a reader searches in order hold the trees newest first. Level
//! 0 is stage 0: the flushes' chunks, each a tree. Stage `s` from 1 is `fanout + 1` levels:
//! its *incoming* level `in(s)` first, then `fanout` positions, the newest first. When a stage
//! is full (level 0: `level0_compaction_trigger` chunks; a deeper stage: its newest position
//! taken) all its trees drain into the next stage's incoming level (the last stage into its
//! own), in one merge: chunks that overlap no other chunk of the stage move; the others merge,
//! their outputs cut where a moved chunk lies between them, so that the new tree stays
//! disjoint. Once drained, the incoming tree moves to the position just before the oldest tree
//! of its stage. Positions fill from the oldest end, so a reader meets trees newest first, and
//! a drain waits for the next stage to have a free position (a full next stage drains first).
//!
//! A drain is one merge, journaled like any merge of its size (SifrDB §4.2's early cleaning
//! is the compaction journal, SPEC.md §12). Its moved chunks are not inputs of the journal:
//! a resumed drain finds them again as the chunks of the stage that are not its inputs (only
//! the drain changes a deeper stage). Level 0's drain merges every chunk, moving none, unless
//! all of them are disjoint (then all move): flushes may add level-0 chunks while it runs.
//! With `fanout` 4 three stages and level 0 fill the format's 16 levels; a volume with fewer
//! levels gets 16 from its next base version (SPEC.md §6.1).

use lds_format::version::meta::ChunkMeta;
use lds_format::version::Version;

use crate::compaction::pick::{key_range, overlaps, Choice, Plan};

/// The levels a forest of this fanout uses: level 0 and as many whole stages as fit.
pub(crate) fn levels_wanted(fanout: usize) -> u32 {
    let max = lds_format::version::meta::LEVELS_COUNT_MAX;
    let per_stage = fanout as u32 + 1;
    1 + (max - 1) / per_stage * per_stage
}

/// The layout of the stages in a version of `num_levels` levels.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    fanout: u8,
    stages: u8,
}

impl Layout {
    pub(crate) fn new(num_levels: u32, fanout: usize) -> Self {
        let fanout = fanout.clamp(2, 14) as u8;
        let stages = ((num_levels.saturating_sub(1)) / (u32::from(fanout) + 1)).max(1) as u8;
        Self { fanout, stages }
    }

    /// The incoming level of stage `stage` (from 1).
    fn incoming(&self, stage: u8) -> u8 {
        1 + (stage - 1) * (self.fanout + 1)
    }

    /// Every level of stage `stage`: level 0 for stage 0, else its incoming level and its
    /// positions.
    fn levels(&self, stage: u8) -> std::ops::RangeInclusive<u8> {
        if stage == 0 {
            0..=0
        } else {
            let incoming = self.incoming(stage);
            incoming..=incoming + self.fanout
        }
    }

    /// The level a stage drains into: the next stage's incoming level, or the last stage's
    /// own.
    fn drain_target(&self, stage: u8) -> u8 {
        self.incoming((stage + 1).min(self.stages))
    }

    /// The stage (from 1) whose levels, in a drain of level `source` into `target`, are the
    /// drained stage: a drain of a deeper stage names its incoming level as source.
    pub(crate) fn drained_stage(&self, source: u8, target: u8) -> Option<u8> {
        (1..=self.stages)
            .find(|&stage| self.incoming(stage) == source && (target == self.drain_target(stage)) && source != 0)
    }
}

fn chunks_of(version: &Version, levels: std::ops::RangeInclusive<u8>) -> Vec<ChunkMeta> {
    levels.flat_map(|level| version.level(level).into_iter().cloned()).collect()
}

/// The chunks of `chunks` that overlap no other of them.
fn alone(chunks: &[ChunkMeta]) -> Vec<bool> {
    let mut sorted: Vec<usize> = (0..chunks.len()).collect();
    sorted.sort_by(|&a, &b| chunks[a].smallest_key.cmp(&chunks[b].smallest_key));
    let mut alone = vec![true; chunks.len()];
    // Sweep in key order: a chunk overlaps an earlier one when it starts at or before the
    // largest key seen so far.
    let mut reach: Option<(Vec<u8>, usize)> = None;
    for &index in &sorted {
        if let Some((largest, owner)) = &reach {
            if chunks[index].smallest_key <= *largest {
                alone[index] = false;
                alone[*owner] = false;
            }
        }
        if reach.as_ref().is_none_or(|(largest, _)| chunks[index].largest_key > *largest) {
            reach = Some((chunks[index].largest_key.clone(), index));
        }
    }
    alone
}

/// For a journaled merge from `source` into `target` that is the drain of a deeper stage, the
/// chunks it moves when resumed: those of the stage's levels that are not inputs of its
/// journal. `None` for any other merge (level 0's drain moves nothing either).
pub(crate) fn moved_on_resume(
    version: &Version,
    fanout: usize,
    source: u8,
    target: u8,
    inputs: &[u64],
) -> Option<Vec<ChunkMeta>> {
    let layout = Layout::new(version.num_levels, fanout);
    let stage = layout.drained_stage(source, target)?;
    Some(
        chunks_of(version, layout.levels(stage))
            .into_iter()
            .filter(|chunk| !inputs.contains(&chunk.chunk_id))
            .collect(),
    )
}

/// The next forest step: a finished drain's incoming tree moved to its position, else the
/// drain of the deepest full stage whose next stage has room; with `manual`, every chunk into
/// one tree of the last stage.
pub(crate) fn choose(version: &Version, fanout: usize, level0_trigger: usize, move_min: u64, manual: bool) -> Choice {
    let layout = Layout::new(version.num_levels, fanout);
    // A finished drain: its incoming tree goes just before the oldest tree of its stage.
    for stage in 1..=layout.stages {
        let incoming = layout.incoming(stage);
        let trees = version.level(incoming);
        if trees.is_empty() {
            continue;
        }
        let positions = incoming + 1..=incoming + layout.fanout;
        let oldest_taken = positions.clone().find(|&level| !version.level(level).is_empty());
        let target = oldest_taken.map_or(incoming + layout.fanout, |level| level - 1);
        if target > incoming {
            let victims: Vec<ChunkMeta> = trees.into_iter().cloned().collect();
            return Choice::Move(Plan::forest(incoming, target, victims, Vec::new(), Vec::new()));
        }
        // Every position taken (a layout this engine does not make): the stage drains whole.
        return drain(version, &layout, stage, move_min);
    }
    if manual {
        let all: Vec<ChunkMeta> = version.chunks.values().cloned().collect();
        let levels: std::collections::BTreeSet<u8> = all.iter().map(|chunk| chunk.level).collect();
        if levels.len() <= 1 && levels.iter().all(|&level| level > 0) {
            return Choice::DoNothing;
        }
        let target = layout.incoming(layout.stages);
        return Choice::Merge(Plan::forest(0, target, all, Vec::new(), Vec::new()));
    }
    let full = |stage: u8| {
        if stage == 0 {
            version.level(0).len() >= level0_trigger.max(2)
        } else {
            !version.level(layout.incoming(stage) + 1).is_empty()
        }
    };
    for stage in (0..=layout.stages).rev() {
        if full(stage) && (stage == layout.stages || !full(stage + 1)) {
            return drain(version, &layout, stage, move_min);
        }
    }
    Choice::DoNothing
}

/// The drain of stage `stage` into its target. A chunk moves only when it overlaps no other
/// chunk of the stage nor of the target and holds at least `move_min` bytes (half a slot by
/// default): a slot holds one chunk, so a small chunk moved on would keep its slot mostly
/// empty where a merge packs it with its neighbours (as level 0's trivial moves, and SPEC.md
/// §11's odd chunks).
fn drain(version: &Version, layout: &Layout, stage: u8, move_min: u64) -> Choice {
    let target = layout.drain_target(stage);
    let chunks = chunks_of(version, layout.levels(stage));
    let source = *layout.levels(stage).start();
    let (smallest, largest) = key_range(&chunks);
    let in_target: Vec<ChunkMeta> = if layout.levels(stage).contains(&target) {
        Vec::new()
    } else {
        version.level(target).into_iter().filter(|chunk| overlaps(chunk, &smallest, &largest)).cloned().collect()
    };
    let alone = alone(&chunks);
    // A log chunk stays in level 0 until a merge reads its references (SPEC.md §8.9).
    let blocked = |chunk: &ChunkMeta| {
        chunk.is_log_chunk()
            || chunk.len_data < move_min
            || in_target.iter().any(|other| overlaps(other, &chunk.smallest_key, &chunk.largest_key))
    };
    if alone.iter().all(|&alone| alone) && !chunks.iter().any(blocked) {
        return Choice::Move(Plan::forest(source, target, chunks, Vec::new(), Vec::new()));
    }
    if stage == 0 {
        return Choice::Merge(Plan::forest(source, target, chunks, in_target, Vec::new()));
    }
    let (mut victims, mut moved) = (Vec::new(), Vec::new());
    for (chunk, alone) in chunks.into_iter().zip(alone) {
        if alone && !blocked(&chunk) {
            moved.push(chunk);
        } else {
            victims.push(chunk);
        }
    }
    Choice::Merge(Plan::forest(source, target, victims, in_target, moved))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::version::meta::SubChunkRef;

    fn chunk(chunk_id: u64, level: u8, smallest: &str, largest: &str) -> ChunkMeta {
        ChunkMeta {
            chunk_id,
            level,
            flags: 0,
            num_entries: 1,
            smallest_seq: chunk_id,
            largest_seq: chunk_id,
            len_data: 10,
            smallest_key: smallest.as_bytes().to_vec(),
            largest_key: largest.as_bytes().to_vec(),
            sub_chunks: vec![SubChunkRef { slot: chunk_id, digest: [0; 32] }],
            value_refs: Vec::new(),
            log_start: None,
        }
    }

    fn version(chunks: &[ChunkMeta]) -> Version {
        crate::compaction::testing::version(16, chunks)
    }

    fn ids(chunks: &[ChunkMeta]) -> Vec<u64> {
        let mut ids: Vec<u64> = chunks.iter().map(|chunk| chunk.chunk_id).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn sixteen_levels_hold_three_stages_of_four() {
        assert_eq!(levels_wanted(4), 16);
        let layout = Layout::new(16, 4);
        assert_eq!((layout.stages, layout.incoming(1), layout.incoming(2), layout.incoming(3)), (3, 1, 6, 11));
        assert_eq!(layout.drain_target(0), 1);
        assert_eq!(layout.drain_target(3), 11);
        assert_eq!(layout.drained_stage(6, 11), Some(2));
        assert_eq!(layout.drained_stage(11, 11), Some(3));
        // A leveled merge of level 1 into 2 is no drain.
        assert_eq!(layout.drained_stage(1, 2), None);
        // Seven levels (the mkfs default) hold one stage.
        assert_eq!(Layout::new(7, 4).stages, 1);
    }

    #[test]
    fn level0_drains_whole_and_moves_only_when_all_are_disjoint() {
        let overlapping: Vec<ChunkMeta> = (1..=4).map(|id| chunk(id, 0, "a", "z")).collect();
        let Choice::Merge(plan) = choose(&version(&overlapping), 4, 4, 10, false) else { panic!("a merge") };
        assert_eq!((plan.source_level, plan.target_level, ids(&plan.victims)), (0, 1, vec![1, 2, 3, 4]));
        assert!(plan.moved.is_empty());
        // Three chunks wait.
        assert_eq!(choose(&version(&overlapping[..3]), 4, 4, 10, false), Choice::DoNothing);
        let sequential: Vec<ChunkMeta> =
            ["a", "c", "e", "g"].iter().enumerate().map(|(id, key)| chunk(id as u64 + 1, 0, key, key)).collect();
        let Choice::Move(plan) = choose(&version(&sequential), 4, 4, 10, false) else { panic!("a move") };
        assert_eq!((plan.target_level, plan.victims.len()), (1, 4));
    }

    #[test]
    fn the_incoming_tree_goes_before_the_oldest() {
        // Stage 1's oldest position (5) holds a tree: level 1's tree goes to 4.
        let chunks = vec![chunk(1, 1, "a", "b"), chunk(2, 5, "a", "z")];
        let Choice::Move(plan) = choose(&version(&chunks), 4, 4, 10, false) else { panic!("a move") };
        assert_eq!((plan.source_level, plan.target_level), (1, 4));
        // An empty stage: the oldest position.
        let Choice::Move(plan) = choose(&version(&chunks[..1]), 4, 4, 10, false) else { panic!("a move") };
        assert_eq!(plan.target_level, 5);
    }

    #[test]
    fn a_full_stage_moves_what_overlaps_nothing_and_merges_the_rest() {
        // Stage 1 full (its newest position, level 2, taken): 2 overlaps 3, which merge into
        // stage 2's incoming level; 4, 5 and 7 overlap nothing and move there.
        let chunks = vec![
            chunk(2, 2, "a", "c"),
            chunk(3, 3, "b", "d"),
            chunk(4, 4, "f", "g"),
            chunk(5, 5, "m", "n"),
            chunk(7, 5, "p", "q"),
        ];
        let Choice::Merge(plan) = choose(&version(&chunks), 4, 4, 10, false) else { panic!("a merge") };
        assert_eq!((plan.source_level, plan.target_level), (1, 6));
        assert_eq!((ids(&plan.victims), ids(&plan.moved)), (vec![2, 3], vec![4, 5, 7]));
        // Chunks under the size a move asks for are merged (packed) instead.
        let Choice::Merge(plan) = choose(&version(&chunks), 4, 4, 11, false) else { panic!("a merge") };
        assert_eq!((ids(&plan.victims), ids(&plan.moved)), (vec![2, 3, 4, 5, 7], vec![]));
        // A full stage 2 drains first (into stage 3), before stage 1 can drain into it.
        let mut deeper = chunks.clone();
        deeper.push(chunk(8, 7, "a", "z"));
        let Choice::Move(plan) = choose(&version(&deeper), 4, 4, 10, false) else { panic!("a move") };
        assert_eq!((plan.source_level, plan.target_level, ids(&plan.victims)), (6, 11, vec![8]));
        // A manual compaction takes everything into stage 3's incoming level.
        let Choice::Merge(plan) = choose(&version(&chunks), 4, 4, 10, true) else { panic!("a merge") };
        assert_eq!((plan.target_level, plan.victims.len()), (11, 5));
        assert_eq!(choose(&version(&[chunk(9, 15, "a", "z")]), 4, 4, 10, true), Choice::DoNothing);
    }
}
