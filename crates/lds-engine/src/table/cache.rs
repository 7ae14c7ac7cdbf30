//! Chunk tails and blocks read from the slots, decoded and verified once, and cached: the
//! tails (block index and filter) of the pinned levels' sub-chunks (level pinning), other
//! tails and decoded blocks each up to a byte budget, evicted by the CLOCK policy.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use lds_format::chunk::block::visit_block;
use lds_format::chunk::filter::Filter;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::chunk::index::{decode_index, IndexEntry};
use lds_format::codec::compare_keys;
use lds_format::entry::EntryKind;
use lds_format::geometry::Geometry;
use lds_format::version::meta::SubChunkRef;
use lds_volume::{Access, BlockDevice};

use crate::error::{Error, Result};

/// The decoded tail of one sub-chunk (SPEC.md §8.2, §8.3): its block index, kept dense (a
/// few flat arrays rather than an allocation per block, at about 36 bytes a block), and its
/// filter.
#[derive(Debug)]
pub(crate) struct Tail {
    /// Where each block lies in the slot.
    blocks: Vec<BlockSpan>,
    /// The blocks' last keys, laid out for binary search.
    search: IndexSearch,
    pub(crate) filter: Filter,
    /// The digest of the sub-chunk it was read from (its footer's): a slot freed and taken
    /// by another chunk must not serve the old chunk's tail.
    digest: [u8; 32],
}

/// Where a block lies in its slot: its offset and its length with the trailer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockSpan {
    pub(crate) ofs: u32,
    pub(crate) len: u32,
}

/// The last keys of a block index as a binary search wants them: the bytes every one of them
/// starts with, kept once, and the next 8 bytes of each as a big-endian word in one dense
/// array. A search probes the words (8 bytes apart, a few cache lines) and compares whole keys
/// only among equal words, where probing a key per entry loads a separate allocation per step
/// (perf: 9-11% of readrandom and seekrandom in that search). Every `FENCE`th word is kept
/// again in a small array searched first, so that a search touches two or three cache lines
/// of the words rather than one per step (with 4,000 blocks per tail and the tails of 5,000,000
/// keys, each step was a miss: perf had the search at a third of seekrandom). The whole keys
/// lie end to end in one buffer.
#[derive(Debug, Default)]
struct IndexSearch {
    shared: Vec<u8>,
    heads: Vec<u64>,
    /// `heads[0]`, `heads[FENCE]`, `heads[2 * FENCE]`, ...
    fences: Vec<u64>,
    keys: Vec<u8>,
    /// Where each key ends in `keys`.
    ends: Vec<u32>,
}

/// The first 8 bytes of `bytes` as a big-endian word, zero-padded.
fn head_word(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let len = bytes.len().min(8);
    word[..len].copy_from_slice(&bytes[..len]);
    u64::from_be_bytes(word)
}

impl IndexSearch {
    fn new(index: &[IndexEntry]) -> Self {
        let Some(first) = index.first() else { return Self::default() };
        let mut shared = first.last_key.as_slice();
        for entry in &index[1..] {
            let common = shared.iter().zip(&entry.last_key).take_while(|(a, b)| a == b).count();
            shared = &shared[..common];
        }
        let heads: Vec<u64> = index.iter().map(|entry| head_word(&entry.last_key[shared.len()..])).collect();
        let fences = heads.iter().step_by(Self::FENCE).copied().collect();
        let mut keys = Vec::with_capacity(index.iter().map(|entry| entry.last_key.len()).sum());
        let mut ends = Vec::with_capacity(index.len());
        for entry in index {
            keys.extend_from_slice(&entry.last_key);
            // Within u32: a tail is read from one slot, whose offsets are u32 (SPEC.md §4).
            ends.push(keys.len() as u32);
        }
        Self { shared: shared.to_vec(), heads, fences, keys, ends }
    }

    /// Words per fence: 32 words are four cache lines.
    const FENCE: usize = 32;

    /// The first position whose word is at or past `word`: the fences narrow it to the
    /// `FENCE` words after the last fence below `word`.
    fn first_head_at_or_after(&self, word: u64) -> usize {
        let fence = self.fences.partition_point(|&head| head < word);
        let start = fence.saturating_sub(1) * Self::FENCE;
        let end = (fence * Self::FENCE).min(self.heads.len());
        start + self.heads[start..end].partition_point(|&head| head < word)
    }

    /// The last key of the `at`th block.
    fn key(&self, at: usize) -> &[u8] {
        let start = if at == 0 { 0 } else { self.ends[at - 1] as usize };
        &self.keys[start..self.ends[at] as usize]
    }

    /// The first position whose last key is at or past `key`.
    fn first_at_or_after(&self, key: &[u8]) -> usize {
        let shared = self.shared.len();
        match compare_keys(&key[..shared.min(key.len())], &self.shared) {
            // A key below the shared start (or a proper prefix of it) precedes every last key.
            std::cmp::Ordering::Less => return 0,
            std::cmp::Ordering::Greater => return self.heads.len(),
            std::cmp::Ordering::Equal => {}
        }
        let word = head_word(&key[shared..]);
        let low = self.first_head_at_or_after(word);
        // Most words are unique, so the words tying with `word` are searched for only when
        // the one at `low` ties: searching the rest of the array every time cost cache misses
        // far from `low` (a third of the index search at 5,000,000 keys).
        let high = match self.heads.get(low) {
            Some(&head) if head == word => low + self.heads[low..].partition_point(|&head| head == word),
            _ => low,
        };
        // Equal words: the keys decide (beyond 8 bytes, or zero padding against zero bytes).
        let (mut low, mut high) = (low, high);
        while low < high {
            let middle = low + (high - low) / 2;
            if compare_keys(self.key(middle), key).is_lt() {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    fn footprint(&self) -> usize {
        self.shared.len() + (self.heads.len() + self.fences.len()) * 8 + self.keys.len() + self.ends.len() * 4
    }
}

/// A block whose checksum was verified once, when it was read, with the position of each
/// entry, so that lookups binary-search it and iterators copy only what they return.
#[derive(Debug, Default)]
pub(crate) struct Block {
    bytes: Vec<u8>,
    pub(crate) entries: Vec<BlockEntry>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockEntry {
    pub(crate) key: (u32, u32),
    pub(crate) sequence: u64,
    pub(crate) kind: EntryKind,
    pub(crate) value: (u32, u32),
}

impl Block {
    #[cfg(test)]
    fn decode(bytes: Vec<u8>, offset: u64) -> std::result::Result<Self, lds_format::FormatError> {
        let len = bytes.len() as u32;
        Self::decode_run(bytes, offset, std::iter::once(len), Vec::new())
    }

    /// Decodes the blocks laid end to end in `bytes` (at device `offset`), of lengths `lens`
    /// (which add up to the bytes' length), into one sequence of entries (in `entries`,
    /// cleared first: a spare block's, reused).
    fn decode_run(
        bytes: Vec<u8>,
        offset: u64,
        lens: impl Iterator<Item = u32>,
        mut entries: Vec<BlockEntry>,
    ) -> std::result::Result<Self, lds_format::FormatError> {
        let base = bytes.as_ptr() as usize;
        // Positions within `bytes`, which moves into the block without moving its contents.
        let at = |part: &[u8]| match part.len() {
            0 => (0, 0),
            len => ((part.as_ptr() as usize - base) as u32, len as u32),
        };
        entries.clear();
        let mut start = 0usize;
        for len in lens {
            let Some(block) = bytes.get(start..start + len as usize) else {
                return Err(lds_format::FormatError::Truncated {
                    structure: "block",
                    offset: offset + start as u64,
                    needed: u64::from(len),
                    available: (bytes.len() - start.min(bytes.len())) as u64,
                });
            };
            // One pass, straight into the positions, sized by the trailer's entry count
            // (checked by `visit_block`; bounded here by what the bytes can hold).
            let count = block
                .len()
                .checked_sub(8)
                .and_then(|at| block.get(at..at + 4))
                .map_or(0, |count| u32::from_le_bytes([count[0], count[1], count[2], count[3]]) as usize);
            // (Without the compact flag, SPEC.md §8.2; an entry takes at least 4 bytes.)
            entries.reserve((count & !(lds_format::chunk::block::BLOCK_FLAG_COMPACT as usize)).min(block.len() / 4));
            visit_block(block, offset + start as u64, |found| {
                entries.push(BlockEntry {
                    key: at(found.key),
                    sequence: found.sequence,
                    kind: found.kind,
                    value: at(found.value),
                })
            })?;
            start += len as usize;
        }
        Ok(Self { bytes, entries })
    }

    /// Keeps this block's buffers for a later run of this thread (`TableCache::run`), up to
    /// `SPARE_RUNS_MAX` of them.
    pub(crate) fn recycle(self) {
        SPARE_RUNS.with_borrow_mut(|spares| {
            if spares.len() < SPARE_RUNS_MAX {
                spares.push(self);
            }
        });
    }

    pub(crate) fn slice(&self, (start, len): (u32, u32)) -> &[u8] {
        &self.bytes[start as usize..(start + len) as usize]
    }

    /// The first entry whose user key is at or after `key` (compared 8 bytes at a time:
    /// most comparisons of a seek end in the first word, without a `memcmp` call).
    pub(crate) fn seek(&self, key: &[u8]) -> usize {
        self.entries.partition_point(|entry| compare_keys(self.slice(entry.key), key).is_lt())
    }

    fn footprint(&self) -> usize {
        self.bytes.capacity() + self.entries.capacity() * std::mem::size_of::<BlockEntry>()
    }
}

thread_local! {
    /// Blocks whose buffers this thread's next runs reuse (`Block::recycle`): a short scan
    /// reads a run or two per source and is dropped, and fresh buffers for each cost
    /// allocations, growth and page faults (perf: a tenth of ycsb-e in the allocator).
    static SPARE_RUNS: std::cell::RefCell<Vec<Block>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A block the block cache evicted, whose buffers this thread's next miss reuses (apart
    /// from the runs': a cached block's footprint counts its buffers' capacity).
    static SPARE_BLOCK: std::cell::RefCell<Option<Block>> = const { std::cell::RefCell::new(None) };
    /// Block cache misses of this thread (which of them are timed).
    static MISSES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// At most this many spare blocks per thread (runs are at most 64 KiB).
const SPARE_RUNS_MAX: usize = 16;

/// The hash of the caches' maps: their keys are slot numbers and block offsets that no
/// adversary chooses, so the multiply-rotate of rustc's FxHasher does, at a few instructions
/// a key where the standard SipHash took a tenth of a scan's time.
#[derive(Default)]
struct SlotHasher(u64);

impl Hasher for SlotHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(5) ^ value).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }
}

/// A map keyed by slots (and block offsets) with `SlotHasher`.
type SlotMap<K, V> = HashMap<K, V, BuildHasherDefault<SlotHasher>>;

/// A cache bounded by bytes with the CLOCK policy (second chance): entries sit on a ring; a
/// hit marks its entry; to make room, the hand sweeps the ring, clearing marks and evicting
/// the first entry it finds unmarked. Recently read entries survive a sweep, as with LRU,
/// without reordering anything on a hit (a read takes the lock for a flag, not a list move).
struct ClockCache<K, V> {
    budget: usize,
    bytes: usize,
    /// The ring: key, value, its footprint, and the mark of a hit since the hand passed.
    ring: Vec<(K, V, usize, bool)>,
    index: SlotMap<K, usize>,
    hand: usize,
}

impl<K: std::hash::Hash + Eq + Copy, V: Clone> ClockCache<K, V> {
    fn new(budget: usize) -> Self {
        Self { budget, bytes: 0, ring: Vec::new(), index: SlotMap::default(), hand: 0 }
    }

    /// True when `key` is cached (its mark untouched).
    fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    fn get(&mut self, key: &K) -> Option<V> {
        let position = *self.index.get(key)?;
        let entry = &mut self.ring[position];
        entry.3 = true;
        Some(entry.1.clone())
    }

    fn insert(&mut self, key: K, value: V, footprint: usize) {
        self.insert_evicting(key, value, footprint, drop);
    }

    /// As `insert`, handing each entry it evicts to `evicted`.
    fn insert_evicting(&mut self, key: K, value: V, footprint: usize, mut evicted: impl FnMut(V)) {
        if footprint > self.budget || self.index.contains_key(&key) {
            return;
        }
        // Bounded: each round evicts an entry, or clears a mark (at most one sweep of marks).
        while self.bytes + footprint > self.budget && !self.ring.is_empty() {
            self.hand %= self.ring.len();
            if self.ring[self.hand].3 {
                self.ring[self.hand].3 = false;
                self.hand += 1;
            } else {
                evicted(self.remove_at(self.hand));
            }
        }
        self.index.insert(key, self.ring.len());
        self.ring.push((key, value, footprint, false));
        self.bytes += footprint;
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        let position = *self.index.get(key)?;
        Some(self.remove_at(position))
    }

    fn remove_at(&mut self, position: usize) -> V {
        let (key, value, footprint, _) = self.ring.swap_remove(position);
        self.index.remove(&key);
        if let Some(moved) = self.ring.get(position) {
            self.index.insert(moved.0, position);
        }
        self.bytes -= footprint;
        value
    }

    fn remove_where(&mut self, doomed: impl Fn(&K) -> bool) {
        let keys: Vec<K> = self.ring.iter().filter(|entry| doomed(&entry.0)).map(|entry| entry.0).collect();
        for key in keys {
            self.remove(&key);
        }
    }
}

/// The tails of the sub-chunks of pinned levels (kept whatever the budget of the others) and,
/// within their budget, the tails of the other chunks read lately (SPEC.md §8.2, §8.3).
struct TailCache {
    pinned: SlotMap<u64, Arc<Tail>>,
    pinned_bytes: usize,
    others: ClockCache<u64, Arc<Tail>>,
}

impl Tail {
    /// Decodes the index and filter `bytes` of the sub-chunk at `slot_offset` with `footer`.
    fn decode(bytes: &[u8], slot_offset: u64, footer: &Footer) -> std::result::Result<Self, lds_format::FormatError> {
        let (index_bytes, filter_bytes) = bytes.split_at((footer.len_index as usize).min(bytes.len()));
        let index = decode_index(index_bytes, slot_offset + u64::from(footer.ofs_index), footer)?;
        let filter = Filter::decode(filter_bytes, slot_offset + u64::from(footer.ofs_filter), footer)?;
        let search = IndexSearch::new(&index);
        let blocks = index.iter().map(|entry| BlockSpan { ofs: entry.ofs_block, len: entry.len_block }).collect();
        Ok(Self { blocks, search, filter, digest: footer.digest })
    }

    /// The number of blocks.
    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Where the `at`th block lies.
    pub(crate) fn span(&self, at: usize) -> BlockSpan {
        self.blocks[at]
    }

    /// The blocks from the `at`th on.
    pub(crate) fn spans_from(&self, at: usize) -> &[BlockSpan] {
        &self.blocks[at..]
    }

    /// The last key of the `at`th block.
    pub(crate) fn last_key(&self, at: usize) -> &[u8] {
        self.search.key(at)
    }

    /// The last key of the sub-chunk (none for a sub-chunk of no blocks, which no valid
    /// tail is).
    pub(crate) fn largest_key(&self) -> Option<&[u8]> {
        self.len().checked_sub(1).map(|last| self.last_key(last))
    }

    /// The position of the first block that may hold `key`: the first whose last key is at
    /// or past it (`len()` when `key` is past them all).
    pub(crate) fn first_block(&self, key: &[u8]) -> usize {
        self.search.first_at_or_after(key)
    }

    /// Bytes it holds in memory.
    pub(crate) fn footprint(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<BlockSpan>()
            + self.filter.bits.len()
            + self.search.footprint()
            + std::mem::size_of::<Self>()
    }
}

/// A valid footer whose digest is not the one the version records for the slot.
pub(crate) fn footer_not_the_versions(footer_offset: u64, slot: u64) -> lds_format::FormatError {
    lds_format::FormatError::invalid(
        "chunk footer",
        "digest",
        footer_offset,
        format!("slot {slot} holds another chunk than the version names (a stale or misdirected footer)"),
    )
}

/// The tails and blocks of chunks read so far.
pub(crate) struct TableCache {
    tails: Mutex<TailCache>,
    blocks: Mutex<ClockCache<(u64, u32), Arc<Block>>>,
    /// How long a block read that misses the cache takes (device read and decode).
    miss: crate::pool::Latency,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn corrupt(device: &dyn BlockDevice, source: lds_format::FormatError) -> Error {
    Error::Corrupt { path: device.name().display().to_string(), source }
}

impl TableCache {
    /// An empty cache holding at most `block_bytes` of decoded blocks and `tail_bytes` of the
    /// tails of chunks outside the pinned levels.
    pub(crate) fn new(block_bytes: usize, tail_bytes: usize) -> Self {
        Self {
            tails: Mutex::new(TailCache {
                pinned: SlotMap::default(),
                pinned_bytes: 0,
                others: ClockCache::new(tail_bytes),
            }),
            blocks: Mutex::new(ClockCache::new(block_bytes)),
            miss: crate::pool::Latency::new(0),
        }
    }

    /// The average time a block read that misses the cache takes, in nanoseconds.
    pub(crate) fn miss_ns(&self) -> u64 {
        self.miss.nanos()
    }

    /// Bytes of the tails pinned now.
    pub(crate) fn pinned_bytes(&self) -> usize {
        locked(&self.tails).pinned_bytes
    }

    /// Makes `wanted` the pinned sub-chunks (level pinning, LSM-KVD): their tails are read now
    /// when not in memory yet, and stay until a later call leaves them out (they then join
    /// the other tails); no more than `budget` bytes are pinned, the sub-chunks taken in the
    /// order given (upper levels first). A tail that cannot be read is left out: the reads of
    /// its chunk report the error, as without pinning. Returns the bytes pinned.
    pub(crate) fn pin(
        &self,
        device: &dyn BlockDevice,
        geometry: &Geometry,
        wanted: &[SubChunkRef],
        budget: usize,
    ) -> usize {
        let wanted_slots: std::collections::HashSet<u64> = wanted.iter().map(|sub_chunk| sub_chunk.slot).collect();
        {
            let mut tails = locked(&self.tails);
            let leaving: Vec<u64> = tails.pinned.keys().filter(|slot| !wanted_slots.contains(slot)).copied().collect();
            for slot in leaving {
                if let Some(tail) = tails.pinned.remove(&slot) {
                    tails.pinned_bytes -= tail.footprint();
                    let footprint = tail.footprint();
                    tails.others.insert(slot, tail, footprint);
                }
            }
        }
        for sub_chunk in wanted {
            let slot = sub_chunk.slot;
            let (pinned, bytes, cached) = {
                let mut tails = locked(&self.tails);
                let current = tails.pinned.get(&slot).map(|tail| tail.digest == sub_chunk.digest);
                if current == Some(false) {
                    // Another chunk's tail in this slot (freed and taken since).
                    if let Some(stale) = tails.pinned.remove(&slot) {
                        tails.pinned_bytes -= stale.footprint();
                    }
                }
                let cached = tails.others.remove(&slot).filter(|tail| tail.digest == sub_chunk.digest);
                (current == Some(true), tails.pinned_bytes, cached)
            };
            if pinned {
                continue;
            }
            let tail = match cached {
                Some(tail) => tail,
                None => match self.read_tail(device, geometry, sub_chunk) {
                    Ok(tail) => Arc::new(tail),
                    Err(_) => continue,
                },
            };
            let footprint = tail.footprint();
            let mut tails = locked(&self.tails);
            if bytes + footprint > budget {
                tails.others.insert(slot, tail, footprint);
                break;
            }
            tails.pinned_bytes += footprint;
            tails.pinned.insert(slot, tail);
        }
        let pinned = locked(&self.tails).pinned_bytes;
        pinned
    }

    /// The decoded tail of the sub-chunk in `sub_chunk.slot`.
    pub(crate) fn tail(
        &self,
        device: &dyn BlockDevice,
        geometry: &Geometry,
        sub_chunk: &SubChunkRef,
    ) -> Result<Arc<Tail>> {
        let slot = sub_chunk.slot;
        {
            let mut tails = locked(&self.tails);
            if let Some(tail) = tails.pinned.get(&slot).filter(|tail| tail.digest == sub_chunk.digest) {
                return Ok(Arc::clone(tail));
            }
            if let Some(tail) = tails.others.get(&slot).filter(|tail| tail.digest == sub_chunk.digest) {
                return Ok(tail);
            }
        }
        let tail = Arc::new(self.read_tail(device, geometry, sub_chunk)?);
        let footprint = tail.footprint();
        locked(&self.tails).others.insert(slot, Arc::clone(&tail), footprint);
        Ok(tail)
    }

    /// Reads and decodes the tail of the sub-chunk in `sub_chunk.slot`.
    fn read_tail(&self, device: &dyn BlockDevice, geometry: &Geometry, sub_chunk: &SubChunkRef) -> Result<Tail> {
        let slot = sub_chunk.slot;
        let slot_offset = geometry.slot_offset(slot);
        let slot_size = geometry.slot_size;
        let footer_offset = slot_offset + slot_size - FOOTER_LEN as u64;
        // A tail is read with one `pread` (the footer and then the index and filter): through
        // a mapping read at random each of its pages would be a fault and a device read.
        let footer_bytes = device.read_vec(footer_offset, FOOTER_LEN as u64)?;
        let footer = Footer::decode(&footer_bytes, footer_offset, slot_size).map_err(|error| corrupt(device, error))?;
        // A valid footer of another chunk (the slot's previous chunk after a lost write, or a
        // misdirected read) must not be used: the version names the sub-chunk by its digest,
        // which covers the footer's identity fields (SPEC.md §6.4, §8.3).
        if footer.digest != sub_chunk.digest {
            return Err(corrupt(device, footer_not_the_versions(footer_offset, slot)));
        }
        let tail_bytes = device.read_vec(
            slot_offset + u64::from(footer.ofs_index),
            u64::from(footer.len_index) + u64::from(footer.len_filter),
        )?;
        Tail::decode(&tail_bytes, slot_offset, &footer).map_err(|error| corrupt(device, error))
    }

    /// Keeps the tail of a chunk just written to `slot` (`tail_bytes`: its index and filter),
    /// so that pinning it at the commit that names it reads nothing while the version is
    /// locked.
    pub(crate) fn admit_tail(&self, geometry: &Geometry, slot: u64, footer: &Footer, tail_bytes: &[u8]) {
        // The slot's earlier chunk (a freed slot, or an input a journaled compaction cleaned)
        // leaves nothing behind: its pinned tail and its blocks.
        self.forget_slot(slot);
        if let Ok(tail) = Tail::decode(tail_bytes, geometry.slot_offset(slot), footer) {
            let footprint = tail.footprint();
            locked(&self.tails).others.insert(slot, Arc::new(tail), footprint);
        }
    }

    /// One block of the sub-chunk in `slot`, verified and decoded once.
    pub(crate) fn block(
        &self,
        device: &dyn BlockDevice,
        geometry: &Geometry,
        slot: u64,
        span: BlockSpan,
    ) -> Result<Arc<Block>> {
        let key = (slot, span.ofs);
        if let Some(block) = locked(&self.blocks).get(&key) {
            return Ok(block);
        }
        let offset = geometry.slot_offset(slot) + u64::from(span.ofs);
        // One miss in eight is timed (two clock reads per miss were 3% of seekrandom).
        let started = MISSES.with(|misses| {
            misses.set(misses.get().wrapping_add(1));
            (misses.get() % 8 == 0).then(std::time::Instant::now)
        });
        // The buffers of a block the cache evicted before (no iterator holding it) take the
        // copy: a miss then costs no allocation of them (perf: a tenth of seekrandom in
        // malloc and free).
        let Block { mut bytes, entries } = SPARE_BLOCK.with_borrow_mut(Option::take).unwrap_or_default();
        device.read_mapped(offset, u64::from(span.len), &mut bytes, Access::Point)?;
        let decoded = Block::decode_run(bytes, offset, std::iter::once(span.len), entries);
        let block = Arc::new(decoded.map_err(|error| corrupt(device, error))?);
        if let Some(started) = started {
            self.miss.record(started.elapsed());
        }
        let footprint = block.footprint();
        let mut spare = None;
        locked(&self.blocks).insert_evicting(key, Arc::clone(&block), footprint, |evicted| {
            if spare.is_none() {
                spare = Arc::try_unwrap(evicted).ok();
            }
        });
        if spare.is_some() {
            SPARE_BLOCK.with_borrow_mut(|kept| *kept = spare);
        }
        Ok(block)
    }

    /// Consecutive blocks of the sub-chunk in `slot` (`spans`, contiguous), read with one
    /// copy and verified block by block into one `Block`, which is not cached: an iterator
    /// that walks on past its first block streams, at one device read, one allocation and
    /// no cache lock per run rather than per block, and leaves the cache to lookups. The
    /// buffers of `spare` (a run the caller is done with), else of a recycled block
    /// (`Block::recycle`), are reused: a fresh 64 KiB buffer per run cost page faults and
    /// page clearing (perf: 9% of readseq).
    pub(crate) fn run(
        &self,
        device: &dyn BlockDevice,
        geometry: &Geometry,
        slot: u64,
        spans: &[BlockSpan],
        spare: Option<Block>,
    ) -> Result<Block> {
        let spare = spare.or_else(|| SPARE_RUNS.with_borrow_mut(Vec::pop));
        let Block { mut bytes, entries } = spare.unwrap_or(Block { bytes: Vec::new(), entries: Vec::new() });
        let (Some(first), Some(last)) = (spans.first(), spans.last()) else {
            bytes.clear();
            return Ok(Block { bytes, entries: Vec::new() });
        };
        let offset = geometry.slot_offset(slot) + u64::from(first.ofs);
        let len = u64::from(last.ofs) + u64::from(last.len) - u64::from(first.ofs);
        device.read_mapped(offset, len, &mut bytes, Access::Run)?;
        Block::decode_run(bytes, offset, spans.iter().map(|span| span.len), entries)
            .map_err(|error| corrupt(device, error))
    }

    /// True when the block at `span` in `slot` is cached: reading it costs no device read.
    pub(crate) fn holds_block(&self, slot: u64, span: BlockSpan) -> bool {
        locked(&self.blocks).contains(&(slot, span.ofs))
    }

    /// Forgets a freed slot's tail and blocks (a later chunk may take the slot).
    pub(crate) fn forget_slot(&self, slot: u64) {
        {
            let mut tails = locked(&self.tails);
            if let Some(tail) = tails.pinned.remove(&slot) {
                tails.pinned_bytes -= tail.footprint();
            }
            tails.others.remove(&slot);
        }
        locked(&self.blocks).remove_where(|key| key.0 == slot);
    }
}

#[cfg(test)]
mod tests {
    use super::{Block, IndexEntry, IndexSearch};
    use lds_format::chunk::builder::{ChunkBuilder, ChunkIdentity, ChunkOptions};
    use lds_format::chunk::view::SubChunkView;
    use lds_format::codec::compare_keys;
    use lds_format::digest::DigestKind;
    use lds_format::entry::EntryKind;
    use proptest::prelude::*;

    /// A sub-chunk of `count` entries in blocks of about 1 KiB, as a slot image.
    fn slot_image(count: u32) -> Vec<u8> {
        let options = ChunkOptions {
            slot_size: 256 * 1024,
            block_size: 1024,
            bloom_bits_per_key: 10,
            digest: DigestKind::Blake3,
            sketch_precision: 0,
            compact_entries: false,
        };
        let mut builder = ChunkBuilder::new(options);
        for number in 0..count {
            let kind = if number % 7 == 3 { EntryKind::Delete } else { EntryKind::Put };
            let value = if kind == EntryKind::Put { vec![number as u8; (number % 90) as usize] } else { Vec::new() };
            assert!(builder.add(format!("key-{number:06}").as_bytes(), u64::from(number) + 1, kind, &value));
        }
        let identity = ChunkIdentity {
            volume_uuid: [3; 16],
            instance: 0,
            chunk_id: 9,
            sub_chunk_index: 0,
            num_sub_chunks: 1,
            level: 1,
            flags: 0,
        };
        builder.finish(identity).expect("not empty").slot_image()
    }

    fn entries_of(block: &Block) -> Vec<(Vec<u8>, u64, EntryKind, Vec<u8>)> {
        block
            .entries
            .iter()
            .map(|entry| {
                (block.slice(entry.key).to_vec(), entry.sequence, entry.kind, block.slice(entry.value).to_vec())
            })
            .collect()
    }

    #[test]
    fn a_run_of_blocks_decodes_to_the_entries_of_its_blocks_in_order_and_names_a_damaged_one() {
        const BASE: u64 = 1 << 30;
        let image = slot_image(600);
        let view = SubChunkView::open(&image, 0).expect("opens");
        assert!(view.index.len() > 8, "{} blocks", view.index.len());
        let (first, last) = (&view.index[2], &view.index[7]);
        let span = first.ofs_block as usize..(last.ofs_block + last.len_block) as usize;
        let lens = view.index[2..8].iter().map(|entry| entry.len_block);
        // Decoded into the buffers of another block, as a cursor's spare run is.
        let spare = Block::decode(view.block(0).to_vec(), BASE).expect("block").entries;
        let run = Block::decode_run(image[span.clone()].to_vec(), BASE + span.start as u64, lens.clone(), spare)
            .expect("decodes");
        let mut expected = Vec::new();
        for (number, entry) in view.index.iter().enumerate().take(8).skip(2) {
            let block = Block::decode(view.block(number).to_vec(), BASE + u64::from(entry.ofs_block)).expect("block");
            expected.extend(entries_of(&block));
        }
        assert_eq!(entries_of(&run), expected);
        assert_eq!(run.entries.len(), expected.len());
        // A flipped byte in the fifth block fails the run, at that block's offset.
        let mut damaged = image[span.clone()].to_vec();
        let fifth = (view.index[6].ofs_block as usize - span.start) + 20;
        damaged[fifth] ^= 1;
        let error = Block::decode_run(damaged, BASE + span.start as u64, lens.clone(), Vec::new()).expect_err("crc");
        let message = error.to_string();
        assert!(message.contains(&(BASE + u64::from(view.index[6].ofs_block)).to_string()), "{message}");
        // Lengths that overrun the bytes are a truncation, not a panic.
        let short = image[span.start..span.end - 10].to_vec();
        assert!(Block::decode_run(short, BASE, lens, Vec::new()).is_err());
    }

    fn entries(mut keys: Vec<Vec<u8>>) -> Vec<IndexEntry> {
        keys.sort();
        keys.into_iter()
            .enumerate()
            .map(|(at, last_key)| IndexEntry {
                ofs_block: at as u32 * 4096,
                len_block: 4096,
                last_seq_kind: 0,
                last_key,
            })
            .collect()
    }

    /// Keys over a small alphabet with long shared starts, so that words tie, keys are
    /// prefixes of others, and zero bytes meet zero padding.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        (0usize..3, proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(b'7'), Just(255u8)], 0..14))
            .prop_map(|(shared, tail)| [&b"0000000000"[..shared * 5], &tail[..]].concat())
    }

    proptest! {
        #[test]
        fn the_dense_search_finds_what_a_search_of_the_entries_finds(
            keys in proptest::collection::vec(key(), 0..200),
            probes in proptest::collection::vec(key(), 1..40),
        ) {
            let index = entries(keys);
            let search = IndexSearch::new(&index);
            for (at, entry) in index.iter().enumerate() {
                prop_assert_eq!(search.key(at), entry.last_key.as_slice());
            }
            for probe in probes.iter().chain(index.iter().map(|entry| &entry.last_key)) {
                let expected = index.partition_point(|entry| compare_keys(&entry.last_key, probe).is_lt());
                prop_assert_eq!(search.first_at_or_after(probe), expected, "probe {:?}", probe);
            }
        }
    }

    #[test]
    fn a_search_past_every_last_key_or_before_the_shared_start_ends_at_the_bounds() {
        let index = entries(vec![
            b"user000017".to_vec(),
            b"user000042".to_vec(),
            b"user000042".to_vec(),
            b"user000100".to_vec(),
        ]);
        let search = IndexSearch::new(&index);
        assert_eq!(search.shared, b"user000");
        assert_eq!(search.first_at_or_after(b"user"), 0);
        assert_eq!(search.first_at_or_after(b"aaa"), 0);
        assert_eq!(search.first_at_or_after(b"user000042"), 1);
        assert_eq!(search.first_at_or_after(b"user0000420"), 3);
        assert_eq!(search.first_at_or_after(b"user000101"), 4);
        assert_eq!(search.first_at_or_after(b"zzz"), 4);
        assert_eq!(IndexSearch::new(&[]).first_at_or_after(b"any"), 0);
    }
}
