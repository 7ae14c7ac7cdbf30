//! Point lookups: the memtables, then level 0 newest first, then each deeper level's one
//! candidate chunk, through filters and block indexes.

use lds_format::entry::EntryKind;
use lds_format::version::meta::ChunkMeta;

use crate::error::Result;
use crate::read::view;
use crate::state::Shared;
use crate::table::cache::Tail;

use crate::read::parallel::Found;

/// The newest version of `key` at or below `snapshot` in one sub-chunk, whose tail is
/// `tail`.
fn find_in_slot(shared: &Shared, slot: u64, tail: &Tail, key: &[u8], snapshot: u64) -> Result<Option<Found>> {
    if !tail.filter.may_contain(key) {
        return Ok(None);
    }
    for at in tail.first_block(key)..tail.len() {
        let block = shared.cache.block(shared.device.as_ref(), &shared.geometry, slot, tail.span(at))?;
        for index in block.seek(key)..block.entries.len() {
            let found = &block.entries[index];
            if block.slice(found.key) != key {
                return Ok(None);
            }
            if found.sequence <= snapshot {
                let value =
                    if found.kind == EntryKind::Delete { Vec::new() } else { block.slice(found.value).to_vec() };
                return Ok(Some((found.sequence, found.kind, value)));
            }
        }
        if tail.last_key(at) > key {
            return Ok(None);
        }
    }
    Ok(None)
}

fn find_in_chunk(shared: &Shared, chunk: &ChunkMeta, key: &[u8], snapshot: u64) -> Result<Option<Found>> {
    // Sub-chunks cover consecutive key ranges (SPEC.md §8.4): the first whose last key is at
    // or past `key` is found by a binary search over their tails' last keys, so that a read
    // of a chunk of many slots (size-tiered) loads a few tails, not all.
    let mut first = 0;
    if chunk.sub_chunks.len() > 2 {
        let (mut low, mut high) = (0, chunk.sub_chunks.len());
        while low < high {
            let middle = (low + high) / 2;
            let tail = shared.cache.tail(shared.device.as_ref(), &shared.geometry, &chunk.sub_chunks[middle])?;
            if tail.largest_key().is_some_and(|last| last < key) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        first = low;
    }
    for sub_chunk in &chunk.sub_chunks[first..] {
        let tail = shared.cache.tail(shared.device.as_ref(), &shared.geometry, sub_chunk)?;
        if let Some(found) = find_in_slot(shared, sub_chunk.slot, &tail, key, snapshot)? {
            return Ok(Some(found));
        }
        // The next sub-chunk starts past this one's last key, unless `key` is that last key
        // (one key's versions exceeding a slot go on in the next).
        if tail.largest_key().is_none_or(|last| last > key) {
            break;
        }
    }
    Ok(None)
}

/// What a search of `chunk` for `key` costs: `None` when its filter says it does not hold
/// the key, else whether it reads the device (its block is not cached). A chunk of several
/// sub-chunks is counted as a read.
fn search_cost(shared: &Shared, chunk: &ChunkMeta, key: &[u8]) -> Result<Option<bool>> {
    let [sub_chunk] = chunk.sub_chunks.as_slice() else { return Ok(Some(true)) };
    let tail = shared.cache.tail(shared.device.as_ref(), &shared.geometry, sub_chunk)?;
    if !tail.filter.may_contain(key) {
        return Ok(None);
    }
    let first = tail.first_block(key);
    Ok(Some(first < tail.len() && !shared.cache.holds_block(sub_chunk.slot, tail.span(first))))
}

/// The candidate chunks for `key` whose filters may hold it, in search order, how many of
/// them are level 0's, and how many of them read the device.
fn filtered_candidates(
    shared: &Shared,
    published: &crate::version::published::Published,
    key: &[u8],
    snapshot: u64,
) -> Result<(Vec<ChunkMeta>, usize, usize)> {
    let (mut chunks, mut level0, mut reads) = (Vec::new(), 0, 0);
    for level in 0..published.levels.levels.len() {
        for chunk in published.candidates(level, key) {
            if level == 0 && chunk.smallest_seq > snapshot {
                continue;
            }
            let Some(read) = search_cost(shared, chunk, key)? else { continue };
            reads += usize::from(read);
            chunks.push(chunk.clone());
        }
        if level == 0 {
            level0 = chunks.len();
        }
    }
    Ok((chunks, level0, reads))
}

/// The value of `key` at `snapshot`.
pub(crate) fn get(shared: &std::sync::Arc<Shared>, key: &[u8], snapshot: u64) -> Result<Option<Vec<u8>>> {
    let view = view(shared);
    let published = &view.published;
    // A pointer is read through the version of this view: the value chunks it names stay
    // until no reader holds it.
    let resolve = |found: Found| crate::values::resolve(shared, &published.version, key, found);
    for table in std::iter::once(&view.mem).chain(view.imm.as_ref()) {
        if let Some(found) = table.get(key, snapshot) {
            return resolve(found);
        }
    }
    // Parallel search (SifrDB §4.3) when two or more candidates whose filters may hold the
    // key would read the device, and a device read takes longer than handing a search to
    // another thread (both measured as they happen; `Options::search_always_parallel` skips
    // the comparison); else the search below, one candidate after the other.
    let worth = |pool: &crate::pool::SearchPool| {
        shared.options.search_always_parallel || shared.cache.miss_ns() > pool.handoff_ns()
    };
    if let Some(pool) = shared.search_pool.as_ref().filter(|pool| worth(pool)) {
        let (candidates, level0, reads) = filtered_candidates(shared, published, key, snapshot)?;
        if reads > 1 {
            shared.counters.parallel_searches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Every level but the deepest one searched counts as passed.
            let mut passed = Passed::default();
            for chunk in candidates.iter().filter(|chunk| chunk.level > 0) {
                passed.consulted(shared, usize::from(chunk.level));
            }
            let found = crate::read::parallel::search(shared, pool, find_in_chunk, candidates, level0, key, snapshot)?;
            return found.map_or(Ok(None), resolve);
        }
    }
    // The levels below level 0 this lookup consulted and went past (`passed`).
    let mut passed = Passed::default();
    for level in 0..published.levels.levels.len() {
        let candidates = published.candidates(level, key);
        if level == 0 {
            // Level-0 chunks overlap: the newest visible version among them wins.
            let mut best: Option<Found> = None;
            for chunk in candidates {
                // Nothing newer than the snapshot, or than the version found already.
                if chunk.smallest_seq > snapshot || best.as_ref().is_some_and(|best| chunk.largest_seq <= best.0) {
                    continue;
                }
                if let Some(found) = find_in_chunk(shared, chunk, key, snapshot)? {
                    if best.as_ref().is_none_or(|best| found.0 > best.0) {
                        best = Some(found);
                    }
                }
            }
            if let Some(found) = best {
                return resolve(found);
            }
        } else {
            // One chunk of the level holds the key (an output of an unfinished compaction
            // and the remaining chunks of its target level are disjoint too).
            for chunk in candidates {
                passed.consulted(shared, level);
                if let Some(found) = find_in_chunk(shared, chunk, key, snapshot)? {
                    return resolve(found);
                }
            }
        }
    }
    Ok(None)
}

/// LevelDB's seek compaction for lookups: a lookup that consulted a chunk of a level below
/// level 0 without finding its key there, and went on to a deeper level, walked that level
/// (`Counters::level_walks`; `compaction::pick::read_triggered` merges a level walked often
/// down once writes are quiet); a parallel search, which does not know where its key was
/// found, walked every level of its candidates but the deepest. Level 0 counts only
/// iterators' walks: lookups pass it under every write-mostly load, whose merges it times.
#[derive(Default)]
struct Passed {
    /// The last level below level 0 consulted.
    level: Option<usize>,
}

impl Passed {
    fn consulted(&mut self, shared: &Shared, level: usize) {
        if let Some(passed) = self.level.replace(level).filter(|&passed| passed != level) {
            shared.counters.walked(passed, 1);
        }
    }
}
