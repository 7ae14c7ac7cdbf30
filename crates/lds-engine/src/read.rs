//! Reads: point lookups and iterators over a consistent view (memtables, then chunks level by
//! level), with chunk tails and blocks cached.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use lds_format::batch::EntryKind;
use lds_format::chunk::{decode_block, decode_index, Filter, Footer, IndexEntry, FOOTER_LEN};
use lds_format::version::{ChunkMeta, SubChunkRef, Version};

use crate::db::Shared;
use crate::error::{Error, Result};
use crate::memtable::{Entry, InternalKey, MemTable};

/// The decoded tail of one sub-chunk (SPEC.md §8.2, §8.3).
#[derive(Debug)]
pub(crate) struct Tail {
    pub(crate) index: Vec<IndexEntry>,
    pub(crate) filter: Filter,
}

/// A block whose checksum was verified once, when it was read, with the position of each
/// entry, so that lookups binary-search it and iterators copy only what they return.
#[derive(Debug)]
pub(crate) struct Block {
    bytes: Vec<u8>,
    entries: Vec<BlockEntry>,
}

#[derive(Debug, Clone, Copy)]
struct BlockEntry {
    key: (u32, u32),
    sequence: u64,
    kind: EntryKind,
    value: (u32, u32),
}

impl Block {
    fn decode(bytes: Vec<u8>, offset: u64) -> std::result::Result<Self, lds_format::FormatError> {
        let base = bytes.as_ptr() as usize;
        // Positions within `bytes`, which moves into the block without moving its contents.
        let at = |part: &[u8]| match part.len() {
            0 => (0, 0),
            len => ((part.as_ptr() as usize - base) as u32, len as u32),
        };
        let entries = decode_block(&bytes, offset)?
            .into_iter()
            .map(|found| BlockEntry {
                key: at(found.key),
                sequence: found.sequence,
                kind: found.kind,
                value: at(found.value),
            })
            .collect();
        Ok(Self { bytes, entries })
    }

    fn slice(&self, (start, len): (u32, u32)) -> &[u8] {
        &self.bytes[start as usize..(start + len) as usize]
    }

    /// The first entry whose user key is at or after `key`.
    fn seek(&self, key: &[u8]) -> usize {
        self.entries.partition_point(|entry| self.slice(entry.key) < key)
    }

    fn owned(&self, index: usize) -> Entry {
        let entry = &self.entries[index];
        (self.slice(entry.key).to_vec(), entry.sequence, entry.kind, self.slice(entry.value).to_vec())
    }

    fn footprint(&self) -> usize {
        self.bytes.len() + self.entries.len() * std::mem::size_of::<BlockEntry>()
    }
}

/// Decoded blocks by (slot, block offset), evicted first-in first-out past a byte budget.
pub(crate) struct BlockCache {
    budget: usize,
    bytes: usize,
    blocks: HashMap<(u64, u32), Arc<Block>>,
    order: VecDeque<(u64, u32)>,
}

impl BlockCache {
    pub(crate) fn new(budget: usize) -> Self {
        Self { budget, bytes: 0, blocks: HashMap::new(), order: VecDeque::new() }
    }

    fn get(&self, key: (u64, u32)) -> Option<Arc<Block>> {
        self.blocks.get(&key).cloned()
    }

    fn insert(&mut self, key: (u64, u32), block: Arc<Block>) {
        if block.footprint() > self.budget || self.blocks.contains_key(&key) {
            return;
        }
        self.bytes += block.footprint();
        self.blocks.insert(key, block);
        self.order.push_back(key);
        while self.bytes > self.budget {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some(evicted) = self.blocks.remove(&oldest) {
                self.bytes -= evicted.footprint();
            }
        }
    }

    /// Drops a freed slot's blocks.
    pub(crate) fn remove_slot(&mut self, slot: u64) {
        let keys: Vec<(u64, u32)> = self.blocks.keys().filter(|key| key.0 == slot).copied().collect();
        for key in keys {
            if let Some(removed) = self.blocks.remove(&key) {
                self.bytes -= removed.footprint();
            }
        }
        self.order.retain(|key| key.0 != slot);
    }
}

fn corrupt(shared: &Shared, error: lds_format::FormatError) -> Error {
    Error::Corrupt { path: shared.path_string(), error }
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

/// The decoded tail of the sub-chunk in `sub_chunk.slot`, cached.
pub(crate) fn tail(shared: &Shared, sub_chunk: &SubChunkRef) -> Result<Arc<Tail>> {
    let slot = sub_chunk.slot;
    if let Some(tail) = shared.tails.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&slot) {
        return Ok(Arc::clone(tail));
    }
    let slot_offset = shared.geometry.slot_offset(slot);
    let slot_size = shared.geometry.slot_size;
    let footer_offset = slot_offset + slot_size - FOOTER_LEN as u64;
    let footer_bytes = shared.device.read_vec(footer_offset, FOOTER_LEN as u64)?;
    let footer = Footer::decode(&footer_bytes, footer_offset, slot_size).map_err(|error| corrupt(shared, error))?;
    // A valid footer of another chunk (the slot's previous chunk after a lost write, or a
    // misdirected read) must not be used: the version names the sub-chunk by its digest,
    // which covers the footer's identity fields (SPEC.md §6.4, §8.3).
    if footer.digest != sub_chunk.digest {
        return Err(corrupt(shared, footer_not_the_versions(footer_offset, slot)));
    }
    let tail_bytes = shared.device.read_vec(
        slot_offset + u64::from(footer.ofs_index),
        u64::from(footer.len_index) + u64::from(footer.len_filter),
    )?;
    let (index_bytes, filter_bytes) = tail_bytes.split_at(footer.len_index as usize);
    let index = decode_index(index_bytes, slot_offset + u64::from(footer.ofs_index), &footer)
        .map_err(|error| corrupt(shared, error))?;
    let filter = Filter::decode(filter_bytes, slot_offset + u64::from(footer.ofs_filter), &footer)
        .map_err(|error| corrupt(shared, error))?;
    let tail = Arc::new(Tail { index, filter });
    shared.tails.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(slot, Arc::clone(&tail));
    Ok(tail)
}

/// One block, verified and decoded once, cached.
fn block(shared: &Shared, slot: u64, entry: &IndexEntry) -> Result<Arc<Block>> {
    let key = (slot, entry.ofs_block);
    if let Some(block) = shared.blocks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(key) {
        return Ok(block);
    }
    let offset = shared.geometry.slot_offset(slot) + u64::from(entry.ofs_block);
    let bytes = shared.device.read_vec(offset, u64::from(entry.len_block))?;
    let block = Arc::new(Block::decode(bytes, offset).map_err(|error| corrupt(shared, error))?);
    shared.blocks.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, Arc::clone(&block));
    Ok(block)
}

/// A found version: its sequence number and value (`None`: a tombstone).
type Found = (u64, Option<Vec<u8>>);

/// The newest version of `key` at or below `snapshot` in one sub-chunk.
fn find_in_slot(shared: &Shared, sub_chunk: &SubChunkRef, key: &[u8], snapshot: u64) -> Result<Option<Found>> {
    let slot = sub_chunk.slot;
    let tail = tail(shared, sub_chunk)?;
    if !tail.filter.may_contain(key) {
        return Ok(None);
    }
    let first = tail.index.partition_point(|entry| entry.last_key.as_slice() < key);
    for entry in &tail.index[first..] {
        let block = block(shared, slot, entry)?;
        for index in block.seek(key)..block.entries.len() {
            let found = &block.entries[index];
            if block.slice(found.key) != key {
                return Ok(None);
            }
            if found.sequence <= snapshot {
                let value = (found.kind == EntryKind::Put).then(|| block.slice(found.value).to_vec());
                return Ok(Some((found.sequence, value)));
            }
        }
        if entry.last_key.as_slice() > key {
            return Ok(None);
        }
    }
    Ok(None)
}

fn find_in_chunk(shared: &Shared, chunk: &ChunkMeta, key: &[u8], snapshot: u64) -> Result<Option<Found>> {
    for sub_chunk in &chunk.sub_chunks {
        if let Some(found) = find_in_slot(shared, sub_chunk, key, snapshot)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// What a reader works from: the memtables and version at one moment.
pub(crate) struct View {
    pub(crate) mem: Arc<MemTable>,
    pub(crate) imm: Option<Arc<MemTable>>,
    pub(crate) version: Arc<Version>,
    pub(crate) levels: Arc<Levels>,
}

/// A version's chunks by level, in read order: level 0 newest last, deeper levels by key.
/// Built once per version, when it is installed, not per read.
pub(crate) struct Levels {
    levels: Vec<Vec<ChunkMeta>>,
}

impl Levels {
    pub(crate) fn of(version: &Version) -> Self {
        let levels =
            (0..version.num_levels as u8).map(|level| version.level(level).into_iter().cloned().collect()).collect();
        Self { levels }
    }

    /// The chunks of a level at or above level 1 whose range may hold keys from `start` on:
    /// they are sorted and disjoint, so a binary search finds the first.
    fn starting_at(&self, level: usize, start: &[u8]) -> &[ChunkMeta] {
        let chunks = &self.levels[level];
        &chunks[chunks.partition_point(|chunk| chunk.largest_key.as_slice() < start)..]
    }
}

pub(crate) fn view(shared: &Shared) -> View {
    let state = shared.lock_state();
    View {
        mem: Arc::clone(&state.mem),
        imm: state.imm.as_ref().map(|frozen| Arc::clone(&frozen.table)),
        version: Arc::clone(&state.version),
        levels: Arc::clone(&state.levels),
    }
}

/// The value of `key` at `snapshot`.
pub(crate) fn get(shared: &Shared, key: &[u8], snapshot: u64) -> Result<Option<Vec<u8>>> {
    let view = view(shared);
    for table in std::iter::once(&view.mem).chain(view.imm.as_ref()) {
        if let Some((_, value)) = table.get(key, snapshot) {
            return Ok(value);
        }
    }
    for (level, chunks) in view.levels.levels.iter().enumerate() {
        let chunks = if level == 0 { chunks.as_slice() } else { view.levels.starting_at(level, key) };
        let candidates = chunks
            .iter()
            .take_while(|chunk| level == 0 || chunk.smallest_key.as_slice() <= key)
            .filter(|chunk| chunk.smallest_key.as_slice() <= key && key <= chunk.largest_key.as_slice());
        if level == 0 {
            // Level-0 chunks overlap: the newest visible version among them wins.
            let mut best: Option<Found> = None;
            for chunk in candidates {
                if chunk.smallest_seq > snapshot {
                    continue;
                }
                if let Some(found) = find_in_chunk(shared, chunk, key, snapshot)? {
                    if best.as_ref().is_none_or(|best| found.0 > best.0) {
                        best = Some(found);
                    }
                }
            }
            if let Some((_, value)) = best {
                return Ok(value);
            }
        } else {
            for chunk in candidates {
                if let Some((_, value)) = find_in_chunk(shared, chunk, key, snapshot)? {
                    return Ok(value);
                }
            }
        }
    }
    Ok(None)
}

/// Walks the sub-chunks of a list of chunks block by block, from a start key.
struct ChunkCursor {
    slots: VecDeque<SubChunkRef>,
    index: Option<Arc<Tail>>,
    slot: u64,
    next_block: usize,
    /// The block being read and the next entry in it.
    block: Option<(Arc<Block>, usize)>,
    start: Vec<u8>,
}

impl ChunkCursor {
    fn new(chunks: &[&ChunkMeta], start: &[u8]) -> Self {
        let slots = chunks.iter().flat_map(|chunk| chunk.sub_chunks.iter().copied()).collect();
        Self { slots, index: None, slot: 0, next_block: 0, block: None, start: start.to_vec() }
    }

    fn next(&mut self, shared: &Shared) -> Result<Option<Entry>> {
        loop {
            if let Some((block, position)) = &mut self.block {
                if *position < block.entries.len() {
                    *position += 1;
                    return Ok(Some(block.owned(*position - 1)));
                }
                self.block = None;
            }
            let tail = match &self.index {
                Some(tail) if self.next_block < tail.index.len() => Arc::clone(tail),
                _ => {
                    let Some(sub_chunk) = self.slots.pop_front() else { return Ok(None) };
                    let tail = tail(shared, &sub_chunk)?;
                    self.slot = sub_chunk.slot;
                    self.next_block =
                        tail.index.partition_point(|entry| entry.last_key.as_slice() < self.start.as_slice());
                    self.index = Some(Arc::clone(&tail));
                    continue;
                }
            };
            let entry = &tail.index[self.next_block];
            self.next_block += 1;
            let block = block(shared, self.slot, entry)?;
            let position = block.seek(&self.start);
            self.block = Some((block, position));
        }
    }
}

/// Walks a memtable from a start key in growing batches, so that a seek copies a few
/// entries rather than the whole rest of the table. Entries inserted after the iterator
/// began carry newer sequence numbers, which the iterator's snapshot filters out.
struct MemCursor {
    table: Arc<MemTable>,
    from: Bound<InternalKey>,
    end: Option<Vec<u8>>,
    buffer: std::vec::IntoIter<Entry>,
    batch: usize,
    exhausted: bool,
}

impl MemCursor {
    const FIRST_BATCH: usize = 8;
    const LARGEST_BATCH: usize = 1024;

    fn new(table: &Arc<MemTable>, start: &[u8], end: Option<&[u8]>) -> Self {
        Self {
            table: Arc::clone(table),
            from: Bound::Included((start.to_vec(), Reverse(u64::MAX))),
            end: end.map(<[u8]>::to_vec),
            buffer: Vec::new().into_iter(),
            batch: Self::FIRST_BATCH,
            exhausted: false,
        }
    }

    fn next(&mut self) -> Option<Entry> {
        if let Some(entry) = self.buffer.next() {
            return Some(entry);
        }
        if self.exhausted {
            return None;
        }
        let entries = self.table.batch(&self.from, self.end.as_deref(), self.batch);
        self.exhausted = entries.len() < self.batch;
        if let Some((key, sequence, _, _)) = entries.last() {
            self.from = Bound::Excluded((key.clone(), Reverse(*sequence)));
        }
        self.batch = (self.batch * 4).min(Self::LARGEST_BATCH);
        self.buffer = entries.into_iter();
        self.buffer.next()
    }
}

enum Source {
    Mem(MemCursor),
    Chunks(ChunkCursor),
}

impl Source {
    fn next(&mut self, shared: &Shared) -> Result<Option<Entry>> {
        match self {
            Self::Mem(cursor) => Ok(cursor.next()),
            Self::Chunks(cursor) => cursor.next(shared),
        }
    }
}

/// A merge candidate: user key, sequence (newest first), source index, kind, value.
type HeapItem = Reverse<(Vec<u8>, Reverse<u64>, usize, EntryKind, Vec<u8>)>;

/// An iterator over live keys and values in key order, as of one sequence number. It holds
/// the version it started on, so the chunks it reads stay in place until it is dropped.
pub struct DbIterator {
    shared: Arc<Shared>,
    _version: Arc<Version>,
    sources: Vec<Source>,
    heap: BinaryHeap<HeapItem>,
    snapshot: u64,
    end: Option<Vec<u8>>,
    decided: Option<Vec<u8>>,
    failed: bool,
}

impl DbIterator {
    pub(crate) fn new(shared: &Arc<Shared>, start: &[u8], end: Option<&[u8]>, snapshot: u64) -> Result<Self> {
        let view = view(shared);
        let in_range = |chunk: &&ChunkMeta| {
            chunk.largest_key.as_slice() >= start && end.is_none_or(|end| chunk.smallest_key.as_slice() < end)
        };
        let mut sources = vec![Source::Mem(MemCursor::new(&view.mem, start, end))];
        if let Some(imm) = &view.imm {
            sources.push(Source::Mem(MemCursor::new(imm, start, end)));
        }
        for (level, chunks) in view.levels.levels.iter().enumerate() {
            if level == 0 {
                let overlapping = chunks.iter().filter(|chunk| in_range(chunk));
                sources.extend(overlapping.map(|chunk| Source::Chunks(ChunkCursor::new(&[chunk], start))));
                continue;
            }
            let chunks: Vec<&ChunkMeta> = view
                .levels
                .starting_at(level, start)
                .iter()
                .take_while(|chunk| end.is_none_or(|end| chunk.smallest_key.as_slice() < end))
                .collect();
            if !chunks.is_empty() {
                sources.push(Source::Chunks(ChunkCursor::new(&chunks, start)));
            }
        }
        let mut iterator = Self {
            shared: Arc::clone(shared),
            _version: view.version,
            sources,
            heap: BinaryHeap::new(),
            snapshot,
            end: end.map(<[u8]>::to_vec),
            decided: None,
            failed: false,
        };
        for index in 0..iterator.sources.len() {
            iterator.refill(index)?;
        }
        Ok(iterator)
    }

    fn refill(&mut self, index: usize) -> Result<()> {
        if let Some((key, sequence, kind, value)) = self.sources[index].next(&self.shared)? {
            self.heap.push(Reverse((key, Reverse(sequence), index, kind, value)));
        }
        Ok(())
    }
}

impl Iterator for DbIterator {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        while let Some(Reverse((key, Reverse(sequence), index, kind, value))) = self.heap.pop() {
            if let Err(error) = self.refill(index) {
                self.failed = true;
                return Some(Err(error));
            }
            if self.end.as_ref().is_some_and(|end| &key >= end) {
                self.heap.clear();
                return None;
            }
            if sequence > self.snapshot || self.decided.as_ref() == Some(&key) {
                continue;
            }
            self.decided = Some(key.clone());
            if kind == EntryKind::Put {
                return Some(Ok((key, value)));
            }
        }
        None
    }
}
