//! Iterators: a k-way merge over memtable cursors and chunk cursors, newest version of each
//! key first, as of one sequence number.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::Arc;

use lds_format::entry::EntryKind;
use lds_format::version::meta::{ChunkMeta, SubChunkRef};

use lds_format::codec::compare_keys;

use crate::error::Result;
use crate::memtable::{Copied, InternalKey, MemTable};
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
    /// The block (or run of blocks) being read and the next entry in it.
    block: Option<(Arc<Block>, usize)>,
    /// Blocks the next run reads (see `settle`).
    run: usize,
    /// A run read before, whose buffers the next run reuses.
    spare: Option<Block>,
    start: Vec<u8>,
    /// Skip keys at or below this (the inputs of an unfinished compaction, past its resume
    /// key).
    after: Option<Vec<u8>>,
    /// Stop after this key (its outputs, up to its resume key).
    through: Option<Vec<u8>>,
}

impl ChunkCursor {
    /// Runs grow 2, 4, 8, ... blocks up to `RUN_BYTES`: a seek followed by a few entries
    /// reads a block or two past its first, a long scan streams.
    const FIRST_RUN: usize = 2;
    const RUN_BYTES: u64 = 64 << 10;
    const LARGEST_RUN: usize = 64;

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
            run: Self::FIRST_RUN,
            spare: None,
            start: start.to_vec(),
            after: None,
            through: None,
        }
    }

    /// Asked before the cursor starts. False when it holds no version of its start key `key`:
    /// no chunk of its level covers it, or the filter of the first sub-chunk that reaches it
    /// says so (the next ones start past that one's last key, unless it is `key`, which the
    /// filter then lets through). True when it may, and for the cursors of an unfinished
    /// compaction. It goes no further than starting would: the tail it finds is the one
    /// the cursor starts from.
    fn may_hold(&mut self, shared: &Shared, key: &[u8]) -> Result<bool> {
        if self.after.is_some() || self.through.is_some() {
            return Ok(true);
        }
        if let Pending::Level { levels, level, next, .. } = &self.slots {
            let past_key = |chunk: &ChunkMeta| chunk.smallest_key.as_slice() > key;
            if levels.levels[*level].get(*next).is_none_or(past_key) {
                return Ok(false);
            }
        }
        Ok(self.locate(shared)?.is_some_and(|tail| tail.filter.may_contain(key)))
    }

    /// The entry the cursor is at, borrowed from its block.
    fn current(&self) -> Option<View<'_>> {
        let (block, position) = self.block.as_ref()?;
        let entry = block.entries.get(*position)?;
        Some(View {
            key: block.slice(entry.key),
            sequence: entry.sequence,
            kind: entry.kind,
            value: block.slice(entry.value),
        })
    }

    /// Moves past the current entry.
    fn advance(&mut self, shared: &Shared) -> Result<()> {
        if let Some((_, position)) = &mut self.block {
            *position += 1;
        }
        self.settle(shared)
    }

    /// The tail of the sub-chunk whose block `next_block` the cursor reads next, taking the
    /// next sub-chunks (and finding the first block that reaches the start key in each) while
    /// the current one has no block left; none at the end.
    fn locate(&mut self, shared: &Shared) -> Result<Option<Arc<Tail>>> {
        // Bounded by the cursor's sub-chunks: each round takes one.
        loop {
            if let Some(tail) = self.index.as_ref().filter(|tail| self.next_block < tail.len()) {
                return Ok(Some(Arc::clone(tail)));
            }
            let Some(sub_chunk) = self.slots.pop() else {
                self.index = None;
                return Ok(None);
            };
            let tail = shared.cache.tail(shared.device.as_ref(), &shared.geometry, &sub_chunk)?;
            self.slot = sub_chunk.slot;
            self.next_block = tail.first_block(&self.start);
            self.index = Some(tail);
        }
    }

    /// Moves to the first entry from the cursor's position on that its filters let through
    /// (loading blocks and sub-chunks as needed), or to the end.
    fn settle(&mut self, shared: &Shared) -> Result<()> {
        // Bounded by the entries and blocks of the cursor's sub-chunks: each round consumes one.
        loop {
            if let Some((block, position)) = &mut self.block {
                while let Some(entry) = block.entries.get(*position) {
                    let key = block.slice(entry.key);
                    if self.through.as_deref().is_some_and(|through| key > through) {
                        self.slots.clear();
                        self.index = None;
                        self.block = None;
                        return Ok(());
                    }
                    if self.after.as_deref().is_some_and(|after| key <= after) {
                        *position += 1;
                        continue;
                    }
                    return Ok(());
                }
                // Done with it: a run (which only this cursor holds) is kept for its buffers.
                if let Some((block, _)) = self.block.take() {
                    self.spare = Arc::try_unwrap(block).ok();
                }
            }
            let Some(tail) = self.locate(shared)? else { return Ok(()) };
            let slot = self.slot;
            let (device, geometry) = (shared.device.as_ref(), &shared.geometry);
            if !self.start.is_empty() {
                // The first block of a seek, which a lookup may have cached or may want
                // next, goes through the cache; it alone holds keys below the start.
                let block = shared.cache.block(device, geometry, slot, tail.span(self.next_block))?;
                self.next_block += 1;
                let position = block.seek(&self.start);
                self.start.clear();
                self.block = Some((block, position));
                continue;
            }
            // Past it, the cursor streams: runs of consecutive blocks, read whole.
            let spans = tail.spans_from(self.next_block);
            let mut bytes = 0u64;
            let count = spans
                .iter()
                .take(self.run)
                .take_while(|span| {
                    bytes += u64::from(span.len);
                    bytes <= Self::RUN_BYTES
                })
                .count()
                .max(1);
            let run = shared.cache.run(device, geometry, slot, &spans[..count], self.spare.take())?;
            self.next_block += count;
            self.run = (self.run * 2).min(Self::LARGEST_RUN);
            self.block = Some((Arc::new(run), 0));
        }
    }
}

impl Drop for ChunkCursor {
    /// Its run buffers go to the next iterator of the thread (`Block::recycle`).
    fn drop(&mut self) {
        if let Some(spare) = self.spare.take() {
            spare.recycle();
        }
        if let Some(block) = self.block.take().and_then(|(block, _)| Arc::try_unwrap(block).ok()) {
            block.recycle();
        }
    }
}

/// An entry a source is at, borrowed from it.
#[derive(Debug, Clone, Copy)]
struct View<'a> {
    key: &'a [u8],
    sequence: u64,
    kind: EntryKind,
    value: &'a [u8],
}

/// Walks a memtable from a start key in growing batches, so that a seek copies a few
/// entries rather than the whole rest of the table. Entries inserted after the iterator
/// began carry newer sequence numbers, which the iterator's snapshot filters out.
struct MemCursor {
    table: Arc<MemTable>,
    from: Bound<InternalKey>,
    end: Option<Vec<u8>>,
    /// The entries of the last batch, and the one the cursor is at.
    buffer: Copied,
    position: usize,
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
            from: Bound::Included((start.to_vec(), u64::MAX)),
            end: end.map(<[u8]>::to_vec),
            buffer: Copied::default(),
            // `Source::start` loads the first batch.
            position: 0,
            batch: Self::FIRST_BATCH,
            exhausted: false,
        }
    }

    /// The entry the cursor is at.
    fn current(&self) -> Option<View<'_>> {
        let (key, sequence, kind, value) = self.buffer.get(self.position)?;
        Some(View { key, sequence, kind, value })
    }

    /// Moves past the current entry.
    fn advance(&mut self) {
        self.position += 1;
        if self.position >= self.buffer.len() {
            self.load();
        }
    }

    /// Replaces the buffer by the next batch (nothing once the table is exhausted).
    fn load(&mut self) {
        if self.exhausted {
            return;
        }
        self.table.batch(&self.from, self.end.as_deref(), self.batch, &mut self.buffer);
        self.exhausted = self.buffer.len() < self.batch;
        if let Some((key, sequence, _, _)) = self.buffer.last() {
            self.from = Bound::Excluded((key.to_vec(), sequence));
        }
        self.batch = (self.batch * 4).min(Self::LARGEST_BATCH);
        self.position = 0;
    }
}

enum Source {
    Mem(MemCursor),
    Chunks(ChunkCursor),
}

impl Source {
    fn current(&self) -> Option<View<'_>> {
        match self {
            Self::Mem(cursor) => cursor.current(),
            Self::Chunks(cursor) => cursor.current(),
        }
    }

    /// The key and sequence number of the current entry: what the merge heap compares.
    fn head(&self) -> Option<(&[u8], u64)> {
        match self {
            Self::Mem(cursor) => cursor.buffer.get(cursor.position).map(|(key, sequence, _, _)| (key, sequence)),
            Self::Chunks(cursor) => {
                let (block, position) = cursor.block.as_ref()?;
                let entry = block.entries.get(*position)?;
                Some((block.slice(entry.key), entry.sequence))
            }
        }
    }

    fn advance(&mut self, shared: &Shared) -> Result<()> {
        match self {
            Self::Mem(cursor) => {
                cursor.advance();
                Ok(())
            }
            Self::Chunks(cursor) => cursor.advance(shared),
        }
    }

    /// False when the source, not started yet, holds no version of `key` (see
    /// `ChunkCursor::may_hold`).
    fn may_hold(&mut self, shared: &Shared, key: &[u8]) -> Result<bool> {
        match self {
            Self::Mem(cursor) => Ok(cursor.table.may_contain(key)),
            Self::Chunks(cursor) => cursor.may_hold(shared, key),
        }
    }

    /// Moves to the source's first entry.
    fn start(&mut self, shared: &Shared) -> Result<()> {
        match self {
            Self::Mem(cursor) => {
                cursor.load();
                Ok(())
            }
            Self::Chunks(cursor) => cursor.settle(shared),
        }
    }
}

/// True when the entry `(key, sequence)` of source `a` comes before source `b`'s: user key
/// ascending, newest first, then the earlier source (a source with no entry comes last).
fn before_head(sources: &[Source], (key, sequence): (&[u8], u64), a: usize, b: usize) -> bool {
    match sources[b].head() {
        Some((other, other_sequence)) => {
            compare_keys(key, other).then(other_sequence.cmp(&sequence)).then(a.cmp(&b)).is_lt()
        }
        None => true,
    }
}

/// True when source `a`'s entry comes before source `b`'s (`before_head`).
fn before(sources: &[Source], a: usize, b: usize) -> bool {
    sources[a].head().is_some_and(|head| before_head(sources, head, a, b))
}

/// Restores the heap order of `heap` (source indices, the first one's entry the smallest)
/// below `at`: the entry at `at` goes down past every child that comes before it, its own
/// key and sequence read once.
fn sift_down(sources: &[Source], heap: &mut [usize], mut at: usize) {
    let Some(&moving) = heap.get(at) else { return };
    let head = sources[moving].head();
    // Bounded by the heap's depth: each round goes one level down.
    loop {
        let (left, right) = (2 * at + 1, 2 * at + 2);
        if left >= heap.len() {
            break;
        }
        let child = if right < heap.len() && before(sources, heap[right], heap[left]) { right } else { left };
        // Does the child come before the moving entry? (One with no entry never does; an
        // exhausted moving source lets every live child pass.)
        let passes = match head {
            Some(head) => !before_head(sources, head, moving, heap[child]),
            None => sources[heap[child]].head().is_some(),
        };
        if !passes {
            break;
        }
        heap[at] = heap[child];
        at = child;
    }
    heap[at] = moving;
}

/// An iterator over live keys and values in key order, as of one sequence number. It holds
/// the version it started on, so the chunks it reads stay in place until it is dropped.
pub struct DbIterator {
    shared: Arc<Shared>,
    /// Holds the version it started on, so that the chunks (and value chunks) it reads stay
    /// in place; pointers are read through it.
    published: Arc<Published>,
    sources: Vec<Source>,
    /// The sources that have an entry, as a binary min-heap of their entries (no entry is
    /// copied to order them: each source keeps its block or memtable batch).
    heap: Vec<usize>,
    snapshot: u64,
    end: Option<Vec<u8>>,
    /// The key whose newest visible version was decided last (reused: no allocation per key).
    decided: Option<Vec<u8>>,
    /// The source whose entry `next_ref` returned last: it moves on at the next call.
    returned: Option<usize>,
    /// Sources not started yet, and the start key, which none of them holds (their filters
    /// say so): their entries all lie past it. While the heap's first entry is at the start
    /// key, it is the first of all sources too; they start once the heap moves past it. A
    /// seek to a key that exists reads one block, not one per level.
    unstarted: Vec<usize>,
    start: Vec<u8>,
    /// The value `next_ref` returned last when it was read from value chunks or the log.
    resolved: Vec<u8>,
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
                    shared.counters.walked(level, 1);
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
                shared.counters.walked(level, others.len() as u64);
            } else if !others.is_empty() {
                sources.push(Source::Chunks(ChunkCursor::new(&others, start)));
                shared.counters.walked(level, 1);
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
            heap: Vec::new(),
            snapshot,
            end: end.map(<[u8]>::to_vec),
            decided: None,
            returned: None,
            unstarted: Vec::new(),
            start: start.to_vec(),
            resolved: Vec::new(),
            failed: false,
        };
        // An iterator from the first key reads every source at once.
        let lazy = !start.is_empty();
        for index in 0..iterator.sources.len() {
            if lazy && !iterator.sources[index].may_hold(shared, start)? {
                iterator.unstarted.push(index);
                continue;
            }
            iterator.sources[index].start(shared)?;
            if iterator.sources[index].current().is_some() {
                iterator.heap.push(index);
            }
        }
        iterator.heapify();
        Ok(iterator)
    }

    fn heapify(&mut self) {
        for at in (0..self.heap.len() / 2).rev() {
            sift_down(&self.sources, &mut self.heap, at);
        }
    }

    /// Starts the sources not started yet once the heap's first entry is past the start key
    /// (or the heap is empty): from there on, their entries may come first.
    fn start_the_rest(&mut self) -> Result<()> {
        let at_start = self
            .heap
            .first()
            .and_then(|&top| self.sources[top].current())
            .is_some_and(|entry| entry.key == self.start.as_slice());
        if at_start {
            return Ok(());
        }
        for index in std::mem::take(&mut self.unstarted) {
            self.sources[index].start(&self.shared)?;
            if self.sources[index].current().is_some() {
                self.heap.push(index);
            }
        }
        self.heapify();
        Ok(())
    }

    /// Moves the heap's source `top` past its entry: it keeps its place in the heap or
    /// leaves it.
    fn step(&mut self, top: usize) -> Result<()> {
        self.sources[top].advance(&self.shared)?;
        if self.sources[top].current().is_none() {
            let last = self.heap.len() - 1;
            self.heap.swap(0, last);
            self.heap.pop();
        }
        sift_down(&self.sources, &mut self.heap, 0);
        Ok(())
    }

    /// The next live key and its value, borrowed from the iterator until the next call (no
    /// copy: the key and a put's value lie in a cached block or a memtable batch; a value in
    /// value chunks or the backup log is read into a buffer the iterator keeps).
    pub fn next_ref(&mut self) -> Option<Result<(&[u8], &[u8])>> {
        if self.failed {
            return None;
        }
        // The source of the entry returned last moves on only now: it was borrowed until here.
        if let Some(top) = self.returned.take() {
            if let Err(error) = self.step(top) {
                self.failed = true;
                return Some(Err(error));
            }
        }
        // Bounded by the entries of the sources: each round moves one source past one.
        loop {
            if !self.unstarted.is_empty() {
                if let Err(error) = self.start_the_rest() {
                    self.failed = true;
                    return Some(Err(error));
                }
            }
            let top = *self.heap.first()?;
            let entry = self.sources[top].current()?;
            if self.end.as_deref().is_some_and(|end| entry.key >= end) {
                self.heap.clear();
                return None;
            }
            let visible = entry.sequence <= self.snapshot && self.decided.as_deref() != Some(entry.key);
            if visible {
                match &mut self.decided {
                    Some(decided) => {
                        decided.clear();
                        decided.extend_from_slice(entry.key);
                    }
                    None => self.decided = Some(entry.key.to_vec()),
                }
                let resolved = match entry.kind {
                    EntryKind::Delete => None,
                    EntryKind::Put => Some(Ok(false)),
                    EntryKind::Pointer => {
                        Some(crate::values::read(&self.shared, &self.published.version, entry.value).map(|value| {
                            self.resolved = value;
                            true
                        }))
                    }
                    EntryKind::LogRef => {
                        Some(crate::logs::read(&self.shared, entry.key, entry.sequence, entry.value).map(|value| {
                            self.resolved = value;
                            true
                        }))
                    }
                };
                match resolved {
                    Some(Ok(from_buffer)) => {
                        self.returned = Some(top);
                        let entry = self.sources[top].current()?;
                        let value = if from_buffer { self.resolved.as_slice() } else { entry.value };
                        return Some(Ok((entry.key, value)));
                    }
                    Some(Err(error)) => {
                        self.failed = true;
                        return Some(Err(error));
                    }
                    None => {}
                }
            }
            if let Err(error) = self.step(top) {
                self.failed = true;
                return Some(Err(error));
            }
        }
    }
}

impl Iterator for DbIterator {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_ref().map(|found| found.map(|(key, value)| (key.to_vec(), value.to_vec())))
    }
}
