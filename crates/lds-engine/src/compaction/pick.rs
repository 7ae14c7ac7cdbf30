//! Choosing the next compaction (LevelDB's leveled strategy on LDS slots): a pure function of
//! the version and the limits returning a [`Choice`], like lsm-tree's strategies. Nothing
//! here reads or writes a device.

use lds_format::version::meta::ChunkMeta;
use lds_format::version::Version;

use crate::options::Options;

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Every level is within its limits.
    DoNothing,
    /// Move the victims down a level without rewriting them (paper §2.1 footnote 1).
    Move(Plan),
    /// Merge the victims with what overlaps them in the target level.
    Merge(Plan),
}

/// The next compaction: a step of a manual compaction from `manual` on first, then whatever
/// is over its limit, then (with `gc_live_percent`) a rewrite that relocates the values of
/// value chunks with much garbage.
pub(crate) fn choose(
    version: &Version,
    limits: &Limits,
    manual: Option<u8>,
    slot_size: u64,
    gc_live_percent: Option<u8>,
) -> Choice {
    let plan = manual
        .and_then(|level| pick(version, limits, Some(level)))
        .or_else(|| pick(version, limits, None))
        .or_else(|| gc_live_percent.and_then(|percent| pick_gc(version, percent, slot_size)));
    match plan {
        None => Choice::DoNothing,
        Some(plan) if trivial_move(&plan, slot_size) => Choice::Move(plan),
        Some(plan) => Choice::Merge(plan),
    }
}

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
    /// A size-tiered merge (`compaction::tiered`): its outputs form one chunk at level 0.
    pub(crate) tiered: bool,
    /// A step of the split forest (`compaction::forest`): victims from several levels, no
    /// odd chunk, no compact pointer.
    pub(crate) forest: bool,
    /// Chunks a forest drain moves to the target level unchanged (they overlap no victim).
    pub(crate) moved: Vec<ChunkMeta>,
}

impl Plan {
    /// A forest step from `source_level` (the first level of the drained stage) to
    /// `target_level`.
    pub(crate) fn forest(
        source_level: u8,
        target_level: u8,
        victims: Vec<ChunkMeta>,
        overlapping: Vec<ChunkMeta>,
        moved: Vec<ChunkMeta>,
    ) -> Self {
        Self { source_level, target_level, victims, overlapping, manual: false, tiered: false, forest: true, moved }
    }
}

/// Level sizing, from the options and the slot size.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) level0_trigger: usize,
    pub(crate) level1_bytes: u64,
    pub(crate) multiplier: u64,
    /// Level sizes follow the last level (`Options::dynamic_levels`, `Shape::of`).
    pub(crate) dynamic: bool,
    /// Level 0 waits (TRIAD-DISK, `compaction::defer`): not over its limit whatever its
    /// chunk count.
    pub(crate) level0_deferred: bool,
    /// Level 0 merges first whatever its chunk count (TRIAD-LOG: its log chunks hold too much
    /// of the backup log, `logs::pressure`).
    pub(crate) level0_urgent: bool,
    /// The levels (bit `n` for level `n`) over their limit however few their chunks or bytes:
    /// reads walked them more often than their merge would cost (`read_triggered`; below
    /// level 0 only while writes are quiet, `worker::next_choice`).
    pub(crate) read_triggered: u32,
    /// Writes are streaming in (`worker::streaming`): level 0 waits for
    /// `level0_stream_trigger` chunks, so that each of its merges takes more of them and
    /// rewrites the level below fewer times.
    pub(crate) level0_streaming: bool,
    /// Twice the trigger, below the count at which writes stop (`Options::
    /// level0_stop_writes_trigger`): writers never wait for a merge that waits for them.
    pub(crate) level0_stream_trigger: usize,
}

/// Bytes a merge may write per walk of a level: LevelDB's seek compaction allows a file one
/// seek per 16 KiB (a seek costs about what compacting 16 KiB does). Below level 0 it is
/// counted on the bytes of both levels, as the merge rewrites the overlapping part of the next
/// one too. At 64 KiB per walk there, the 190,000 scans of YCSB-E at 5,000,000 keys started
/// 11 to 12 merges of a level they never emptied (write amplification 397 to 420); at 16 KiB,
/// 5 (274), throughput within the run-to-run noise; at 500,000 keys both rates empty the level
/// early in seekrandom and YCSB-E.
const READ_TRIGGER_BYTES_PER_WALK: u64 = 16 << 10;

/// True when reads walked `level` (`walks`: at level 0 each chunk once per iterator; below it
/// each iterator once, and each lookup that consulted it and went deeper) more often than
/// merging it down would cost: one walk per 16 KiB of it (level 0) or of it and the next
/// level (below level 0; never the last level), at least 100. The merge then removes sources
/// from every later seek and scan, where no filter spares them (a seek has no key to test),
/// and one level from the lookups that pass it; below level 0 it also drops the older
/// versions of keys the level overwrote, which scans step over and which take room in the
/// page cache (LevelDB's seek compaction, which charges any level a lookup or an iterator
/// sample had to consult beyond the first).
pub(crate) fn read_triggered(version: &Version, level: u8, walks: u64) -> bool {
    let bytes = |level: u8| -> u64 { version.level(level).iter().map(|chunk| chunk.len_data).sum() };
    let own = bytes(level);
    let cost = match level {
        0 => own,
        _ if u32::from(level) + 1 < version.num_levels => own + bytes(level + 1),
        _ => return false,
    };
    own > 0 && walks >= (cost / READ_TRIGGER_BYTES_PER_WALK).max(100)
}

/// Where level 0 merges to, and what each level may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The level level 0 merges into; the levels between it and level 0 are empty.
    pub(crate) base: u8,
    /// Bytes each level may hold before it is compacted, by level (level 0's unused: it
    /// counts chunks).
    pub(crate) limits: Vec<u64>,
    /// Bytes each level holds, by level.
    pub(crate) sizes: Vec<u64>,
}

impl Shape {
    /// The shape of `version` under `limits`. Fixed (LevelDB's): base level 1, level `n`
    /// holds `level1_bytes * multiplier^(n-1)`. Dynamic (RocksDB's
    /// `level_compaction_dynamic_level_bytes`): the largest level below level 0 sets the
    /// sizes, each level above it a `multiplier`-th of the next; the base level is the
    /// highest level that size still calls for (its share above `level1_bytes /
    /// multiplier`), never above the first non-empty level, and every level may hold at
    /// least `level1_bytes`. An empty tree merges level 0 into the last level. So the data
    /// gathers in the last level, and level-0 merges rewrite a base level that is small
    /// next to it, where fixed sizes keep level 1 full once the tree outgrows it.
    pub(crate) fn of(version: &Version, limits: &Limits) -> Self {
        let num_levels = version.num_levels.max(1) as usize;
        let multiplier = limits.multiplier.max(2);
        let mut sizes = vec![0u64; num_levels];
        for chunk in version.chunks.values() {
            if let Some(size) = sizes.get_mut(usize::from(chunk.level)) {
                *size += chunk.len_data;
            }
        }
        let last = num_levels - 1;
        let base_max = limits.level1_bytes;
        // `base_size` at `base`, times the multiplier per level below it. No level below
        // base_max: a tree whose levels hold less than level 0 would favour them over level 0
        // and stall the writers.
        let shape = |base: usize, base_size: u64, sizes: Vec<u64>| {
            let mut by_level = vec![0u64; num_levels];
            let mut bytes = base_size;
            for (level, limit) in by_level.iter_mut().enumerate().skip(base) {
                if level > base {
                    bytes = bytes.saturating_mul(multiplier);
                }
                *limit = bytes.max(base_max);
            }
            Self { base: base as u8, limits: by_level, sizes }
        };
        if !limits.dynamic || last == 0 {
            return shape(1, base_max, sizes);
        }
        let largest = sizes[1..].iter().copied().max().unwrap_or(0);
        let Some(first_non_empty) = (1..=last).find(|&level| sizes[level] > 0) else {
            return shape(last, base_max, sizes);
        };
        let base_min = base_max / multiplier;
        // What the first non-empty level would hold if the largest level were the last.
        let mut size = largest;
        for _ in first_non_empty..last {
            size /= multiplier;
        }
        let (base, base_size) = if size <= base_min {
            // More levels hold data than the size calls for: they keep the least size.
            (first_non_empty, base_min + 1)
        } else {
            let mut base = first_non_empty;
            while base > 1 && size > base_max {
                base -= 1;
                size /= multiplier;
            }
            (base, size.clamp(1, base_max))
        };
        shape(base, base_size, sizes)
    }
}

pub(crate) fn overlaps(chunk: &ChunkMeta, smallest: &[u8], largest: &[u8]) -> bool {
    chunk.smallest_key.as_slice() <= largest && smallest <= chunk.largest_key.as_slice()
}

pub(crate) fn key_range(chunks: &[ChunkMeta]) -> (Vec<u8>, Vec<u8>) {
    let smallest = chunks.iter().map(|chunk| chunk.smallest_key.clone()).min().unwrap_or_default();
    let largest = chunks.iter().map(|chunk| chunk.largest_key.clone()).max().unwrap_or_default();
    (smallest, largest)
}

impl Limits {
    /// The limits of a store with these options and slots.
    pub(crate) fn new(options: &Options, slot_size: u64) -> Self {
        let level1_bytes = if options.level1_max_bytes == 0 { 10 * slot_size } else { options.level1_max_bytes };
        let trigger = options.level0_compaction_trigger.max(1);
        Self {
            level0_trigger: trigger,
            level0_stream_trigger: (2 * trigger).min(options.level0_stop_writes_trigger.saturating_sub(1)).max(trigger),
            level1_bytes,
            multiplier: options.level_size_multiplier.max(2),
            dynamic: options.dynamic_levels,
            level0_deferred: false,
            level0_urgent: false,
            read_triggered: 0,
            level0_streaming: false,
        }
    }
}

/// Picks the level most over its limit (score >= 1) and its victims, or nothing. A manual
/// compaction (`Some(level)`) takes the whole first non-empty level from `level` on, above
/// the last level, and merges it into the next even without overlap, so that obsolete
/// versions go (LevelDB's CompactRange).
fn pick(version: &Version, limits: &Limits, manual: Option<u8>) -> Option<Plan> {
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
        return Some(Plan {
            source_level,
            target_level,
            victims,
            overlapping,
            manual: true,
            tiered: false,
            forest: false,
            moved: Vec::new(),
        });
    }
    let shape = Shape::of(version, limits);
    let mut best: Option<(f64, u8)> = None;
    for level in 0..last_level {
        let chunks = version.level(level);
        let score = if level == 0 && limits.level0_urgent && !chunks.is_empty() {
            f64::MAX
        } else if level == 0 && limits.level0_deferred {
            0.0
        } else if level == 0 {
            let trigger = if limits.level0_streaming && limits.read_triggered & 1 == 0 {
                limits.level0_stream_trigger
            } else {
                limits.level0_trigger
            };
            chunks.len() as f64 / trigger as f64
        } else {
            let limit = shape.limits.get(usize::from(level)).copied().unwrap_or(u64::MAX).max(1);
            shape.sizes.get(usize::from(level)).copied().unwrap_or(0) as f64 / limit as f64
        };
        // Walked more often than its merge costs: over its limit, however small.
        let score =
            if limits.read_triggered & (1 << level) != 0 && !chunks.is_empty() { score.max(1.0) } else { score };
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
    // Level 0 merges into the base level; any other level into the next.
    let target_level = if source_level == 0 { shape.base.max(1) } else { source_level + 1 };
    let (smallest, largest) = key_range(&victims);
    let overlapping =
        version.level(target_level).into_iter().filter(|chunk| overlaps(chunk, &smallest, &largest)).cloned().collect();
    Some(Plan {
        source_level,
        target_level,
        victims,
        overlapping,
        manual: false,
        tiered: false,
        forest: false,
        moved: Vec::new(),
    })
}

/// The value chunks whose live bytes fell below `percent` of what a slot holds (SPEC.md
/// §8.6): a merge copies their live values to new value chunks, so that they can be freed.
/// Measured against the slot, not the body: a value chunk a flush or a direct write left
/// partly filled wastes its slot as surely as garbage does, and its values get packed.
pub(crate) fn gc_candidates(version: &Version, percent: u8, slot_size: u64) -> std::collections::BTreeSet<u64> {
    let capacity = value_capacity(slot_size);
    version
        .value_chunks
        .values()
        .filter(|chunk| version.live_bytes(chunk.value_chunk_id) * 100 < capacity * u64::from(percent))
        .map(|chunk| chunk.value_chunk_id)
        .collect()
}

fn value_capacity(slot_size: u64) -> u64 {
    slot_size - lds_format::value::VALUE_FOOTER_LEN as u64
}

/// The value chunks a merge of `inputs` relocates (SPEC.md §8.6): the candidates whose every
/// live byte the inputs point to (the merge's commit then frees them), when they are more
/// than the new value chunks their live bytes fill, so that each relocation frees a slot or
/// more. Empty otherwise: moving values that free nothing would only copy them again later.
pub(crate) fn relocation_set<'a>(
    version: &Version,
    inputs: impl Iterator<Item = &'a ChunkMeta>,
    candidates: &std::collections::BTreeSet<u64>,
    slot_size: u64,
) -> std::collections::BTreeSet<u64> {
    let mut pointed: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    for chunk in inputs {
        for (id, bytes) in chunk.value_refs.iter().filter(|(id, _)| candidates.contains(id)) {
            *pointed.entry(*id).or_insert(0) += bytes;
        }
    }
    let freeable: std::collections::BTreeSet<u64> =
        pointed.iter().filter(|(id, bytes)| version.live_bytes(**id) == **bytes).map(|(id, _)| *id).collect();
    let relocated: u64 = freeable.iter().map(|id| version.live_bytes(*id)).sum();
    if freeable.len() as u64 > relocated.div_ceil(value_capacity(slot_size)) {
        freeable
    } else {
        std::collections::BTreeSet::new()
    }
}

/// A garbage collection of value chunks (SPEC.md §8.6): a rewrite, at their own level, of the
/// chunks of one level from 1 down that point into the candidates (`gc_candidates`; level-0
/// chunks are merged soon enough), which relocates the values of the candidates only that
/// level points to (`relocation_set`). The level is the one where this frees the most slots
/// net, and the slots freed must at least repay what the rewrite writes. Each collection
/// frees a slot or more, so collections end.
fn pick_gc(version: &Version, percent: u8, slot_size: u64) -> Option<Plan> {
    let candidates = gc_candidates(version, percent, slot_size);
    if candidates.is_empty() {
        return None;
    }
    let mut best: Option<(u64, u8, Vec<ChunkMeta>)> = None;
    for level in 1..version.num_levels as u8 {
        let chunks = version.level(level);
        let pointing = |chunk: &&ChunkMeta| chunk.value_refs.iter().any(|(id, _)| candidates.contains(id));
        let (Some(first), Some(last)) = (chunks.iter().position(pointing), chunks.iter().rposition(pointing)) else {
            continue;
        };
        // The chunks between the first and the last that point into the candidates, all of
        // them: a merge packs its outputs across its victims, which must leave no chunk of the
        // level between them (the level stays disjoint).
        let victims: Vec<ChunkMeta> = chunks[first..=last].iter().map(|chunk| (*chunk).clone()).collect();
        let relocated = relocation_set(version, victims.iter(), &candidates, slot_size);
        let moved: u64 = relocated.iter().map(|id| version.live_bytes(*id)).sum();
        let gain = (relocated.len() as u64).saturating_sub(moved.div_ceil(value_capacity(slot_size)));
        let cost = victims.iter().map(|chunk| chunk.len_data).sum::<u64>() + moved;
        if gain >= 1 && gain * slot_size >= cost && best.as_ref().is_none_or(|(best_gain, _, _)| gain > *best_gain) {
            best = Some((gain, level, victims));
        }
    }
    let (_, level, victims) = best?;
    Some(Plan {
        source_level: level,
        target_level: level,
        victims,
        overlapping: Vec::new(),
        manual: false,
        tiered: false,
        forest: false,
        moved: Vec::new(),
    })
}

/// Whether a plan moves its victims down without rewriting them: nothing overlaps them in
/// the target level, and they do not overlap each other (one chunk from level 1 and below;
/// level-0 chunks of sequential writes, which LevelDB would move one by one). Several
/// level-0 chunks move only when each fills at least half its slot: a slot holds one chunk,
/// so moving small chunks down would keep their slots mostly empty, where a merge packs them.
fn trivial_move(plan: &Plan, slot_size: u64) -> bool {
    if plan.manual || !plan.overlapping.is_empty() || plan.source_level == plan.target_level {
        return false;
    }
    // A log chunk stays in level 0 until a merge reads its references (SPEC.md §8.9).
    if plan.victims.iter().any(ChunkMeta::is_log_chunk) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::version::meta::{SubChunkRef, CHUNK_FLAG_ODD};

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
            value_refs: Vec::new(),
            log_start: None,
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
            tiered: false,
            forest: false,
            moved: Vec::new(),
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
        crate::compaction::testing::version(7, &chunks)
    }

    const LIMITS: Limits = Limits {
        level0_trigger: 4,
        level0_stream_trigger: 8,
        level1_bytes: 1000,
        dynamic: false,
        multiplier: 10,
        level0_deferred: false,
        level0_urgent: false,
        read_triggered: 0,
        level0_streaming: false,
    };

    #[test]
    fn nothing_to_do_below_the_limits() {
        let chunks = vec![meta(1, 0, "a", "c", 10, 0), meta(2, 1, "a", "z", 999, 0)];
        assert!(pick(&version(chunks), &LIMITS, None).is_none());
        assert!(matches!(choose(&version(Vec::new()), &LIMITS, None, 20, None), Choice::DoNothing));
    }

    #[test]
    fn level0_waits_for_twice_its_trigger_while_writes_stream() {
        let level0 = |count: u64| -> Vec<ChunkMeta> { (1..=count).map(|id| meta(id, 0, "b", "d", 10, 0)).collect() };
        let streaming = Limits { level0_streaming: true, ..LIMITS };
        for count in 4..8 {
            assert!(pick(&version(level0(count)), &LIMITS, None).is_some(), "{count} chunks, no stream");
            assert!(pick(&version(level0(count)), &streaming, None).is_none(), "{count} chunks, streaming");
        }
        let plan = pick(&version(level0(8)), &streaming, None).expect("eight chunks merge");
        assert_eq!((plan.source_level, plan.victims.len()), (0, 8));
        // Iterators that walked level 0 enough still merge it early.
        let walked = Limits { read_triggered: 1, ..streaming };
        assert!(pick(&version(level0(1)), &walked, None).is_some());
        // Twice the trigger stays below the count at which writes stop.
        let options = |trigger, stop| Options {
            level0_compaction_trigger: trigger,
            level0_stop_writes_trigger: stop,
            ..Options::default()
        };
        let stream_trigger = |trigger, stop| Limits::new(&options(trigger, stop), 1 << 20).level0_stream_trigger;
        assert_eq!(stream_trigger(4, 12), 8);
        assert_eq!(stream_trigger(8, 12), 11);
        assert_eq!(stream_trigger(4, 4), 4);
    }

    #[test]
    fn iterators_walking_level0_often_enough_merge_it_early() {
        let chunks = vec![meta(1, 0, "a", "m", 3200 << 10, 0), meta(2, 1, "a", "z", 10, 0)];
        let version = version(chunks);
        // 3.2 MiB of level 0: 200 walks allowed.
        assert!(!read_triggered(&version, 0, 199));
        assert!(read_triggered(&version, 0, 200));
        assert!(read_triggered(&crate::compaction::testing::version(7, &[meta(1, 0, "a", "b", 10, 0)]), 0, 100));
        assert!(!read_triggered(&crate::compaction::testing::version(7, &[meta(1, 0, "a", "b", 10, 0)]), 0, 99));
        assert!(!read_triggered(&crate::compaction::testing::version(7, &[]), 0, 1_000));
        // One chunk is below the trigger of four, unless iterators walked it enough.
        assert!(pick(&version, &LIMITS, None).is_none());
        let triggered = Limits { read_triggered: 1, ..LIMITS };
        let plan = pick(&version, &triggered, None).expect("level 0 merges early");
        assert_eq!((plan.source_level, plan.victims.len()), (0, 1));
    }

    #[test]
    fn iterators_walking_a_deeper_level_often_enough_merge_it_down() {
        // Level 1 holds 3,200 KiB under its limit, level 2 800 KiB: 250 walks allowed.
        let chunks = vec![
            meta(1, 1, "a", "f", 1600 << 10, 0),
            meta(2, 1, "g", "m", 1600 << 10, 0),
            meta(3, 2, "a", "z", 800 << 10, 0),
        ];
        let version = crate::compaction::testing::version(3, &chunks);
        let limits = Limits { level1_bytes: 64 << 20, ..LIMITS };
        assert!(!read_triggered(&version, 1, 249));
        assert!(read_triggered(&version, 1, 250));
        // At least 100, however small the levels.
        let small = crate::compaction::testing::version(3, &[meta(1, 1, "a", "f", 10, 0), meta(3, 2, "a", "z", 10, 0)]);
        assert!(!read_triggered(&small, 1, 99));
        assert!(read_triggered(&small, 1, 100));
        // Not an empty level (level 0 here), not the last level.
        assert!(!read_triggered(&version, 0, 1_000_000));
        assert!(!read_triggered(&version, 2, 1_000_000));
        let empty = crate::compaction::testing::version(3, &chunks[2..]);
        assert!(!read_triggered(&empty, 1, 1_000_000));
        // Under its limit it waits, unless iterators walked it enough; then one chunk goes down.
        assert!(pick(&version, &limits, None).is_none());
        let triggered = Limits { read_triggered: 1 << 1, ..limits };
        let plan = pick(&version, &triggered, None).expect("level 1 merges down");
        assert_eq!((plan.source_level, plan.target_level, plan.victims.len()), (1, 2, 1));
        assert_eq!(plan.overlapping.len(), 1);
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

    const DYNAMIC: Limits = Limits { dynamic: true, ..LIMITS };

    #[test]
    fn dynamic_levels_follow_the_last_level() {
        // Nothing below level 0: level 0 merges into the last level.
        let empty = Shape::of(&version(Vec::new()), &DYNAMIC);
        assert_eq!(empty.base, 6);
        // The last level within level 1's size: still the base.
        let small = Shape::of(&version(vec![meta(1, 6, "a", "z", 1000, 0)]), &DYNAMIC);
        assert_eq!(small.base, 6);
        // Past it: the level above takes level 0's merges, its tenth, raised to level 1's.
        let over = Shape::of(&version(vec![meta(1, 6, "a", "z", 4400, 0)]), &DYNAMIC);
        assert_eq!((over.base, over.limits[5], over.limits[6]), (5, 1000, 4400));
        // A hundred times more: three levels up (440 is the first share within level 1's
        // size); each level holds ten times the one above it, none less than level 1's.
        let larger = Shape::of(&version(vec![meta(1, 6, "a", "z", 440_000, 0)]), &DYNAMIC);
        assert_eq!(larger.base, 3);
        assert_eq!(larger.limits[3..], [1000, 4400, 44_000, 440_000]);
        // A tree with data above (a volume written with fixed sizes): never past its first
        // non-empty level, whose size is then at least level 1's.
        let old = Shape::of(&version(vec![meta(1, 1, "a", "z", 1000, 0), meta(2, 2, "a", "z", 3000, 0)]), &DYNAMIC);
        assert_eq!((old.base, old.limits[1]), (1, 1000));
        // Fixed sizes: level 1 first, ten times per level.
        let fixed = Shape::of(&version(vec![meta(1, 6, "a", "z", 4400, 0)]), &LIMITS);
        assert_eq!((fixed.base, fixed.limits[1], fixed.limits[3]), (1, 1000, 100_000));
    }

    #[test]
    fn level0_merges_into_the_base_level() {
        let level0: Vec<ChunkMeta> = (1..=4).map(|id| meta(id, 0, "b", "d", 10, 0)).collect();
        let plan = pick(&version(level0.clone()), &DYNAMIC, None).expect("level 0 is full");
        assert_eq!((plan.source_level, plan.target_level), (0, 6));
        let mut chunks = level0;
        chunks.extend([meta(5, 5, "a", "c", 900, 0), meta(6, 6, "a", "c", 4400, 0), meta(7, 5, "x", "z", 10, 0)]);
        let plan = pick(&version(chunks.clone()), &DYNAMIC, None).expect("level 0 is full");
        assert_eq!((plan.source_level, plan.target_level), (0, 5));
        assert_eq!(plan.overlapping.iter().map(|chunk| chunk.chunk_id).collect::<Vec<_>>(), vec![5]);
        // The base level past its size goes down to the last level.
        chunks.retain(|chunk| chunk.level != 0);
        chunks.push(meta(8, 5, "d", "e", 200, 0));
        let plan = pick(&version(chunks), &DYNAMIC, None).expect("level 5 is over");
        assert_eq!((plan.source_level, plan.target_level), (5, 6));
    }

    #[test]
    fn the_fullest_level_goes_first_and_the_last_level_never() {
        let chunks =
            vec![meta(1, 1, "a", "b", 1500, 0), meta(2, 2, "a", "b", 30_000, 0), meta(3, 6, "a", "z", u64::MAX / 2, 0)];
        let plan = pick(&version(chunks), &LIMITS, None).expect("over");
        assert_eq!(plan.source_level, 2, "level 2 at 3.0 beats level 1 at 1.5");
    }
}
