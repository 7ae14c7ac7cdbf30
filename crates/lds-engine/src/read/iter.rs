//! Iterators: a k-way merge over memtable cursors and chunk cursors, newest version of each
//! key first, as of one sequence number.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use lds_format::batch::EntryKind;
use lds_format::version::{ChunkMeta, SubChunkRef};

use lds_format::codec::compare_keys;

use crate::error::Result;
use crate::memtable::{Entry, InternalKey, MemTable, UserKey};
use crate::read::view;
use crate::state::Shared;
use crate::table::cache::{Block, Tail};
use crate::version::levels::Levels;
use crate::version::published::Published;

/// Where a chunk cursor's sub-chunks come from.
enum Pending {
    /// A list fixed at the start (a level-0 chunk; an unfinished compaction's chunks).
    List(VecDeque<SubChunkRef>),
    /// The chunks of a level at or above 1 (sorted, disjoint), from the `next`th on while they
    /// start below `end`: taken one at a time, so that a seek costs the same whatever the
    /// level's size.
    Level { levels: Arc<Levels>, level: usize, next: usize, end: Option<Vec<u8>>, subs: VecDeque<SubChunkRef> },
}

impl Pending {
    fn pop(&mut self) -> Option<SubChunkRef> {
        match self {
            Self::List(list) => list.pop_front(),
            Self::Level { levels, level, next, end, subs } => {
                if subs.is_empty() {
                    let chunk = levels.levels[*level].get(*next)?;
                    if end.as_deref().is_some_and(|end| chunk.smallest_key.as_slice() >= end) {
                        return None;
                    }
                    *next += 1;
                    subs.extend(chunk.sub_chunks.iter().copied());
                }
                subs.pop_front()
            }
        }
    }

    fn clear(&mut self) {
        *self = Self::List(VecDeque::new());
    }
}

/// Walks the sub-chunks of a list of chunks block by block, from a start key.
struct ChunkCursor {
    slots: Pending,
    index: Option<Arc<Tail>>,
    slot: u64,
    next_block: usize,
    /// The block being read and the next entry in it.
    block: Option<(Arc<Block>, usize)>,
    start: Vec<u8>,
    /// Skip keys at or below this (the inputs of an unfinished compaction, past its resume
    /// key).
    after: Option<Vec<u8>>,
    /// Stop after this key (its outputs, up to its resume key).
    through: Option<Vec<u8>>,
}

impl ChunkCursor {
    fn new(chunks: &[&ChunkMeta], start: &[u8]) -> Self {
        let slots = Pending::List(chunks.iter().flat_map(|chunk| chunk.sub_chunks.iter().copied()).collect());
        Self::of(slots, start)
    }

    fn of(slots: Pending, start: &[u8]) -> Self {
        Self {
            slots,
            index: None,
            slot: 0,
            next_block: 0,
            block: None,
            start: start.to_vec(),
            after: None,
            through: None,
        }
    }

    fn next(&mut self, shared: &Shared) -> Result<Option<Entry>> {
        // Bounded by the blocks of the cursor's sub-chunks: each round consumes one.
        loop {
            if let Some((block, position)) = &mut self.block {
                if *position < block.entries.len() {
                    *position += 1;
                    let key = block.slice(block.entries[*position - 1].key);
                    if self.through.as_deref().is_some_and(|through| key > through) {
                        self.slots.clear();
                        self.index = None;
                        self.block = None;
                        return Ok(None);
                    }
                    if self.after.as_deref().is_some_and(|after| key <= after) {
                        continue;
                    }
                    return Ok(Some(block.owned(*position - 1)));
                }
                self.block = None;
            }
            let tail = match &self.index {
                Some(tail) if self.next_block < tail.index.len() => Arc::clone(tail),
                _ => {
                    let Some(sub_chunk) = self.slots.pop() else { return Ok(None) };
                    let tail = shared.cache.tail(shared.device.as_ref(), &shared.geometry, &sub_chunk)?;
                    self.slot = sub_chunk.slot;
                    self.next_block =
                        tail.index.partition_point(|entry| compare_keys(&entry.last_key, &self.start).is_lt());
                    self.index = Some(Arc::clone(&tail));
                    continue;
                }
            };
            let entry = &tail.index[self.next_block];
            self.next_block += 1;
            let block = shared.cache.block(shared.device.as_ref(), &shared.geometry, self.slot, entry)?;
            // Only the first block holds keys below the start: later ones are read whole,
            // with no search (and later sub-chunks from their first block).
            let position = if self.start.is_empty() { 0 } else { block.seek(&self.start) };
            self.start.clear();
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
    // A seek reads one entry, an iterator many: batches grow 1, 4, 16, ... 1024.
    const FIRST_BATCH: usize = 1;
    const LARGEST_BATCH: usize = 1024;

    fn new(table: &Arc<MemTable>, start: &[u8], end: Option<&[u8]>) -> Self {
        Self {
            table: Arc::clone(table),
            from: Bound::Included((UserKey(start.to_vec()), Reverse(u64::MAX))),
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
            self.from = Bound::Excluded((UserKey(key.clone()), Reverse(*sequence)));
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
type HeapItem = Reverse<(UserKey, Reverse<u64>, usize, EntryKind, Vec<u8>)>;

/// An iterator over live keys and values in key order, as of one sequence number. It holds
/// the version it started on, so the chunks it reads stay in place until it is dropped.
pub struct DbIterator {
    shared: Arc<Shared>,
    /// Holds the version it started on, so that the chunks (and value chunks) it reads stay
    /// in place; pointers are read through it.
    published: Arc<Published>,
    sources: Vec<Source>,
    heap: BinaryHeap<HeapItem>,
    snapshot: u64,
    end: Option<Vec<u8>>,
    /// The key whose newest visible version was decided last (reused: no allocation per key).
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
        let published = &view.published;
        let redirect = published.redirect.as_ref();
        // An unfinished compaction's inputs are read past its resume key only (cleaned ones
        // not at all), its outputs up to it (SPEC.md §12).
        let is_input = |chunk: &ChunkMeta| redirect.is_some_and(|redirect| redirect.inputs.contains(&chunk.chunk_id));
        for (level, chunks) in published.levels.levels.iter().enumerate() {
            if level > 0 && redirect.is_none() {
                // A sorted level, its chunks taken as the cursor reaches them.
                let levels = &published.levels;
                let next = chunks.len() - levels.starting_at(level, start).len();
                if next < chunks.len() && end.is_none_or(|end| chunks[next].smallest_key.as_slice() < end) {
                    let pending = Pending::Level {
                        levels: Arc::clone(levels),
                        level,
                        next,
                        end: end.map(<[u8]>::to_vec),
                        subs: VecDeque::new(),
                    };
                    sources.push(Source::Chunks(ChunkCursor::of(pending, start)));
                }
                continue;
            }
            let in_level: Vec<&ChunkMeta> = if level == 0 {
                chunks.iter().filter(|chunk| in_range(chunk)).collect()
            } else {
                published
                    .levels
                    .starting_at(level, start)
                    .iter()
                    .take_while(|chunk| end.is_none_or(|end| chunk.smallest_key.as_slice() < end))
                    .collect()
            };
            let (inputs, others): (Vec<&ChunkMeta>, Vec<&ChunkMeta>) =
                in_level.into_iter().partition(|chunk| is_input(chunk));
            if level == 0 {
                sources.extend(others.iter().map(|chunk| Source::Chunks(ChunkCursor::new(&[chunk], start))));
            } else if !others.is_empty() {
                sources.push(Source::Chunks(ChunkCursor::new(&others, start)));
            }
            let Some(redirect) = redirect else { continue };
            for input in inputs.into_iter().filter(|chunk| !redirect.cleaned.contains(&chunk.chunk_id)) {
                let mut cursor = ChunkCursor::new(&[input], start.max(redirect.resume_key.as_slice()));
                cursor.after = Some(redirect.resume_key.clone());
                sources.push(Source::Chunks(cursor));
            }
            if level == usize::from(redirect.target_level) && start <= redirect.resume_key.as_slice() {
                let outputs: Vec<&ChunkMeta> = redirect.outputs.iter().filter(|chunk| in_range(chunk)).collect();
                if !outputs.is_empty() {
                    let mut cursor = ChunkCursor::new(&outputs, start);
                    cursor.through = Some(redirect.resume_key.clone());
                    sources.push(Source::Chunks(cursor));
                }
            }
        }
        let mut iterator = Self {
            shared: Arc::clone(shared),
            published: view.published,
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
            self.heap.push(Reverse((UserKey(key), Reverse(sequence), index, kind, value)));
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
        // Bounded by the entries of the sources: each round takes one.
        loop {
            // The smallest entry leaves and its source's next one takes its place in one
            // sift (`PeekMut`), instead of a pop and a push (the heap was a quarter of a scan's
            // time).
            let index = self.heap.peek()?.0 .2;
            let next = match self.sources[index].next(&self.shared) {
                Ok(next) => next,
                Err(error) => {
                    self.failed = true;
                    return Some(Err(error));
                }
            };
            let taken = match (next, self.heap.peek_mut()) {
                (Some((key, sequence, kind, value)), Some(mut top)) => {
                    std::mem::replace(&mut *top, Reverse((UserKey(key), Reverse(sequence), index, kind, value)))
                }
                (None, Some(top)) => std::collections::binary_heap::PeekMut::pop(top),
                (_, None) => return None,
            };
            let Reverse((UserKey(key), Reverse(sequence), _, kind, value)) = taken;
            if self.end.as_ref().is_some_and(|end| &key >= end) {
                self.heap.clear();
                return None;
            }
            if sequence > self.snapshot || self.decided.as_ref() == Some(&key) {
                continue;
            }
            match &mut self.decided {
                Some(decided) => {
                    decided.clear();
                    decided.extend_from_slice(&key);
                }
                None => self.decided = Some(key.clone()),
            }
            match kind {
                EntryKind::Put => return Some(Ok((key, value))),
                EntryKind::Pointer => {
                    return match crate::values::read(&self.shared, &self.published.version, &value) {
                        Ok(value) => Some(Ok((key, value))),
                        Err(error) => {
                            self.failed = true;
                            Some(Err(error))
                        }
                    };
                }
                EntryKind::LogRef => {
                    return match crate::logs::read(&self.shared, &key, sequence, &value) {
                        Ok(value) => Some(Ok((key, value))),
                        Err(error) => {
                            self.failed = true;
                            Some(Err(error))
                        }
                    };
                }
                EntryKind::Delete => {}
            }
        }
    }
}
