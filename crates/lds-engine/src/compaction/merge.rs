//! A merge, streamed (SPEC.md §10.2, §11, §12):
//! 1. The inputs form sorted runs: each level-0 victim alone (they overlap), the victims of a
//!    deeper level together, the overlapping chunks of the target level together. A run
//!    holds a window of whole blocks of one sub-chunk in memory at a time; each sub-chunk is
//!    verified whole (its digest) when the run reaches it, lest a stale or misdirected block
//!    be copied into a new chunk with a fresh checksum.
//! 2. Entries leave the runs in internal-key order (user key ascending, newest first); the
//!    versions a snapshot or a deeper level still needs are kept (`Retention`) and packed
//!    into chunks (`ChunkPacker`).
//! 3. `produce` stops after a given number of chunks at a key boundary, so that a journaled
//!    merge can make them durable and record its state (a compaction journal record) before it
//!    goes on; or at the end of the inputs, when the last chunk may stay behind as the source
//!    level's odd chunk.
//! 4. Log references of log chunk inputs (SPEC.md §8.9) are resolved from the retained region
//!    of the backup log, read once when the merge starts, and written as puts.
//! 5. A merge resumed from a journal record skips, in every run, the keys at or below the
//!    record's resume key, and never reads an input the record lists as cleaned.
//!
//! It reads the device and builds chunks in memory; it allocates, writes and commits nothing
//! (the caller does, with `commit::write_chunks` and `commit::commit_merge`).

use std::collections::{BTreeSet, VecDeque};

use lds_format::chunk::block::visit_block;
use lds_format::chunk::footer::{Footer, SubChunkDigest, FOOTER_LEN};
use lds_format::chunk::index::{decode_index, IndexEntry};
use lds_format::entry::EntryKind;
use lds_format::geometry::Geometry;
use lds_format::version::meta::{ChunkMeta, SubChunkRef, CHUNK_FLAG_ODD};
use lds_format::version::payload::{CompactPointer, CompactionJournal};
use lds_format::version::Version;
use lds_format::FormatError;
use lds_volume::BlockDevice;

use crate::compaction::pick::{key_range, overlaps, Plan};
use crate::error::{Error, Result};
use crate::retention::{KeyRanges, Retention};
use crate::table::build::{ChunkFormat, ChunkPacker, Packed};
use crate::table::cache::footer_not_the_versions;
use crate::table::log::LogRegion;

/// What a merge reads through: the device holding its inputs and where slots are.
pub(crate) struct MergeContext<'a> {
    /// Where relocated values are read and new value chunks allocated.
    pub(crate) values: &'a dyn ValueStore,
    /// The device holding the inputs.
    pub(crate) device: &'a dyn BlockDevice,
    /// Where slots are.
    pub(crate) geometry: &'a Geometry,
    /// Window buffers of earlier runs, reused (zeroing a window for every read costs more
    /// than the merge's comparisons).
    pub(crate) buffers: &'a std::sync::Mutex<Vec<Vec<u8>>>,
}

/// Buffers a store keeps for its merges at most.
pub(crate) const MERGE_BUFFERS_MAX: usize = 16;

impl MergeContext<'_> {
    fn take_buffer(&self) -> Vec<u8> {
        self.buffers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop().unwrap_or_default()
    }

    fn give_buffer(&self, buffer: Vec<u8>) {
        let mut buffers = self.buffers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buffers.len() < MERGE_BUFFERS_MAX {
            buffers.push(buffer);
        }
    }
}

/// An upper bound of the payload of the final delta version of a merge of `inputs` (chunk
/// ids of `version`): it deletes them all and adds at most one output per input slot, plus
/// one, with keys as long as the inputs' longest bound.
pub(crate) fn delta_estimate(version: &Version, inputs: &[u64]) -> usize {
    let chunks: Vec<&ChunkMeta> = inputs.iter().filter_map(|id| version.chunks.get(id)).collect();
    let slots: usize = chunks.iter().map(|chunk| chunk.sub_chunks.len()).sum();
    let key_max = chunks.iter().map(|chunk| chunk.smallest_key.len().max(chunk.largest_key.len())).max().unwrap_or(0);
    let output = 48 + 2 * (2 + key_max) + 40;
    48 + 16 * chunks.len() + (slots + 1) * output
}

/// Bytes of blocks a run reads at a time (whole blocks, at least one): a merge of many runs
/// holds this much per run rather than a slot. Debug builds (the tests, the crash simulator)
/// read a few blocks at a time, so that their small slots span many windows too.
const WINDOW: usize = if cfg!(debug_assertions) { 8 << 10 } else { 256 << 10 };

/// An entry's place in a run's window.
#[derive(Debug, Clone, Copy)]
struct Position {
    key: (u32, u32),
    sequence: u64,
    kind: EntryKind,
    value: (u32, u32),
}

/// The sub-chunk a run reads, verified whole (its digest) when opened, and the blocks of it
/// read now with their entries' positions.
struct Loaded {
    /// Device offset of its slot.
    offset: u64,
    index: Vec<IndexEntry>,
    /// The first block not read yet.
    next_block: usize,
    /// Whole blocks, read together.
    window: Vec<u8>,
    entries: Vec<Position>,
    next: usize,
}

impl Loaded {
    fn slice(&self, (start, len): (u32, u32)) -> &[u8] {
        &self.window[start as usize..(start + len) as usize]
    }

    fn current(&self) -> Option<&Position> {
        self.entries.get(self.next)
    }

    /// Reads the next blocks, up to `WINDOW` bytes (at least one block), skipping those whose
    /// keys are all at or below `skip_to_after`, and decodes the positions of their entries
    /// after it (each block's checksum verified). Reads nothing past the last block.
    fn read_window(&mut self, context: &MergeContext<'_>, skip_to_after: Option<&[u8]>) -> Result<()> {
        if let Some(resume) = skip_to_after {
            while self.index.get(self.next_block).is_some_and(|block| block.last_key.as_slice() <= resume) {
                self.next_block += 1;
            }
        }
        self.entries.clear();
        self.next = 0;
        let first = self.next_block;
        let Some(start) = self.index.get(first).map(|block| block.ofs_block) else { return Ok(()) };
        let mut last = first + 1;
        while self.index.get(last).is_some_and(|block| (block.ofs_block + block.len_block - start) as usize <= WINDOW) {
            last += 1;
        }
        let end = self.index[last - 1].ofs_block + self.index[last - 1].len_block;
        self.window.resize((end - start) as usize, 0);
        context.device.read_at(self.offset + u64::from(start), &mut self.window)?;
        let base = self.window.as_ptr() as usize;
        let at = |part: &[u8]| match part.len() {
            0 => (0, 0),
            len => ((part.as_ptr() as usize - base) as u32, len as u32),
        };
        for block in &self.index[first..last] {
            let bytes =
                &self.window[(block.ofs_block - start) as usize..(block.ofs_block - start + block.len_block) as usize];
            let entries = &mut self.entries;
            visit_block(bytes, self.offset + u64::from(block.ofs_block), |entry| {
                if skip_to_after.is_none_or(|resume| entry.key > resume) {
                    entries.push(Position {
                        key: at(entry.key),
                        sequence: entry.sequence,
                        kind: entry.kind,
                        value: at(entry.value),
                    });
                }
            })
            .map_err(|error| corrupt(context.device, error))?;
        }
        self.next_block = last;
        Ok(())
    }
}

/// A sorted run of input sub-chunks.
struct Run {
    pending: VecDeque<SubChunkRef>,
    loaded: Option<Loaded>,
}

fn corrupt(device: &dyn BlockDevice, source: lds_format::FormatError) -> Error {
    Error::Corrupt { path: device.name().display().to_string(), source }
}

/// Opens a sub-chunk for reading: reads its footer and tail, verifies that it is the one the
/// version names, then reads its body once through `window` (a buffer reused) to verify its
/// digest, lest a stale or misdirected block be copied into a new chunk with a fresh
/// checksum. Its blocks are read again, a window at a time, as the merge goes (each with its
/// checksum verified, so a read that differs from the verified one is caught too).
fn open(context: &MergeContext<'_>, sub_chunk: &SubChunkRef, mut window: Vec<u8>) -> Result<Loaded> {
    let geometry = context.geometry;
    let offset = geometry.slot_offset(sub_chunk.slot);
    let footer_offset = offset + geometry.slot_size - FOOTER_LEN as u64;
    let mut footer = [0u8; FOOTER_LEN];
    context.device.read_at(footer_offset, &mut footer)?;
    let footer =
        Footer::decode(&footer, footer_offset, geometry.slot_size).map_err(|error| corrupt(context.device, error))?;
    if footer.digest != sub_chunk.digest {
        return Err(corrupt(context.device, footer_not_the_versions(footer_offset, sub_chunk.slot)));
    }
    let tail = context
        .device
        .read_vec(offset + u64::from(footer.ofs_index), footer_offset - offset - u64::from(footer.ofs_index))?;
    let index = decode_index(&tail[..footer.len_index as usize], offset + u64::from(footer.ofs_index), &footer)
        .map_err(|error| corrupt(context.device, error))?;
    let mut digest = SubChunkDigest::new(&footer);
    let mut at = 0;
    while at < footer.len_body {
        let len = (footer.len_body - at).min(WINDOW as u32);
        window.resize(len as usize, 0);
        context.device.read_at(offset + u64::from(at), &mut window)?;
        digest.body(&window);
        at += len;
    }
    if digest.finish(&tail) != footer.digest {
        return Err(corrupt(context.device, FormatError::DigestMismatch { structure: "sub-chunk", offset }));
    }
    Ok(Loaded { offset, index, next_block: 0, window, entries: Vec::new(), next: 0 })
}

impl Run {
    /// Makes the run's current entry available (reading the next blocks, or opening the
    /// next sub-chunk, as needed); false when the run is done.
    fn fill(&mut self, context: &MergeContext<'_>, skip_to_after: Option<&[u8]>) -> Result<bool> {
        // Bounded by the run's blocks: each round reads one or more, or opens a sub-chunk.
        loop {
            if let Some(loaded) = self.loaded.as_mut() {
                if loaded.current().is_some() {
                    return Ok(true);
                }
                if loaded.next_block < loaded.index.len() {
                    loaded.read_window(context, skip_to_after)?;
                    continue;
                }
            }
            let Some(next) = self.pending.pop_front() else {
                if let Some(done) = self.loaded.take() {
                    context.give_buffer(done.window);
                }
                return Ok(false);
            };
            let buffer = match self.loaded.take() {
                Some(loaded) => loaded.window,
                None => context.take_buffer(),
            };
            self.loaded = Some(open(context, &next, buffer)?);
        }
    }
}

/// Reading values through pointers and allocating value chunks (the store's, `values`).
pub(crate) trait ValueStore {
    /// The value `pointer` names, read through `version`, its checksum checked.
    fn read_value(&self, version: &Version, pointer: &[u8]) -> Result<Vec<u8>>;
    /// An id and a slot for a new value chunk.
    fn allocate_value_chunk(&self) -> Result<(u64, u64)>;
}

/// The relocation of values out of value chunks with much garbage (SPEC.md §8.6): the
/// pointers a merge keeps into those get a copy of the value in a new value chunk.
pub(crate) struct Relocation {
    /// The value chunks whose values move.
    pub(crate) from: BTreeSet<u64>,
    /// The version the pointers are read through (it names every value chunk the inputs
    /// point to until the merge commits).
    version: std::sync::Arc<Version>,
    packer: lds_format::value::ValuePacker,
    pointer: Vec<u8>,
    /// Bytes of values copied.
    pub(crate) bytes: u64,
    /// A read or an allocation failed: the rest of the merge keeps its pointers as they are.
    pub(crate) failed: bool,
}

impl Relocation {
    pub(crate) fn new(
        from: BTreeSet<u64>,
        version: std::sync::Arc<Version>,
        format: lds_format::value::ValueFormat,
    ) -> Self {
        Self {
            from,
            version,
            packer: lds_format::value::ValuePacker::new(format),
            pointer: Vec::new(),
            bytes: 0,
            failed: false,
        }
    }

    /// The pointer to keep in place of `pointer`: when it has extents in value chunks being
    /// collected, the same pointer with those extents copied to new value chunks (the value
    /// and its checksum unchanged, its other extents in place); else `None` (keep it).
    fn relocate(&mut self, context: &MergeContext<'_>, pointer: &[u8]) -> Option<&[u8]> {
        if self.failed {
            return None;
        }
        let mut decoded = lds_format::value::ValuePointer::decode(pointer, 0).ok()?;
        if !decoded.extents.iter().any(|extent| self.from.contains(&extent.value_chunk_id)) {
            return None;
        }
        match self.copy_extents(context.values, pointer, &decoded.extents) {
            Ok(extents) => {
                self.bytes += extents.1;
                decoded.extents = extents.0;
                self.pointer = decoded.encode();
                Some(&self.pointer)
            }
            Err(_) => {
                self.failed = true;
                None
            }
        }
    }

    /// The extents with those in collected value chunks copied (one extent may become two
    /// when the copy ends a value chunk), and the bytes copied. The value is read whole and
    /// its checksum checked first: a damaged value is not copied under a new home.
    fn copy_extents(
        &mut self,
        store: &dyn ValueStore,
        pointer: &[u8],
        extents: &[lds_format::value::Extent],
    ) -> Result<(Vec<lds_format::value::Extent>, u64)> {
        let value = store.read_value(&self.version, pointer)?;
        let mut copied = Vec::with_capacity(extents.len());
        let (mut position, mut bytes) = (0usize, 0u64);
        for extent in extents {
            let part = &value[position..position + extent.len as usize];
            position += extent.len as usize;
            if !self.from.contains(&extent.value_chunk_id) {
                copied.push(*extent);
                continue;
            }
            let copy = self.packer.add(part, || store.allocate_value_chunk())?;
            copied.extend(copy.extents);
            bytes += u64::from(extent.len);
        }
        Ok((copied, bytes))
    }

    /// The value chunks holding the copies, built, and every slot they took.
    pub(crate) fn finish(self) -> (Vec<lds_format::value::BuiltValueChunk>, Vec<u64>) {
        let slots = self.packer.allocated().into_iter().map(|(_, slot)| slot).collect();
        (self.packer.finish(), slots)
    }
}

/// Chunks a call of `produce` finished.
pub(crate) struct Produced {
    /// The chunks, in key order.
    pub(crate) chunks: Vec<Packed>,
    /// The inputs are exhausted: these are the last outputs.
    pub(crate) complete: bool,
}

/// A merge in progress.
pub(crate) struct Merger {
    /// The id of the journaled compaction (SPEC.md §6.3), or 0 for an unjournaled merge.
    pub(crate) compaction_id: u64,
    pub(crate) source_level: u8,
    pub(crate) target_level: u8,
    /// A manual compaction: no odd chunk stays behind.
    pub(crate) manual: bool,
    /// The victims of the source level.
    pub(crate) victims: Vec<ChunkMeta>,
    /// Every input: victims and the overlapping chunks of the target level.
    pub(crate) inputs: Vec<ChunkMeta>,
    /// Outputs written: those a durable journal record names, then those written since
    /// (unflushed until the step's flush; no version names them before the final delta).
    pub(crate) persisted: Vec<ChunkMeta>,
    /// Outputs packed and not written yet, in key order (written as soon as they are packed;
    /// a write that found no free slot leaves them here for the step's next attempt).
    pub(crate) unwritten: Vec<Packed>,
    /// Keys at or below it are in `persisted`.
    pub(crate) resume_key: Option<Vec<u8>>,
    /// Inputs a durable journal record lists as cleaned.
    pub(crate) cleaned: BTreeSet<u64>,
    /// Where the round-robin choice of the source level resumes afterwards.
    pub(crate) pointer: Option<CompactPointer>,
    /// Journal records are still written (a journaled merge stops writing them when the
    /// version log has no room left for more; its final delta still names its id).
    pub(crate) journaling: bool,
    runs: Vec<Run>,
    packer: Option<ChunkPacker>,
    retention: Retention,
    /// Key ranges of the levels below the target: a tombstone may go where none overlaps.
    deeper: KeyRanges,
    /// Values being moved out of value chunks with much garbage (unjournaled merges only).
    pub(crate) relocation: Option<Relocation>,
    /// The retained region of the backup log its log chunk inputs name (TRIAD-LOG, SPEC.md
    /// §8.9), read when the merge starts.
    pub(crate) log_region: Option<LogRegion>,
    /// A size-tiered merge (`compaction::tiered`): its outputs form one chunk.
    pub(crate) tiered: bool,
    /// A size-tiered merge's outputs written so far, in key order: their slots and the built
    /// sub-chunks (bodies dropped), whose identities are set when the last is written.
    pub(crate) tiered_written: Vec<(u64, lds_format::chunk::builder::BuiltSubChunk)>,
    /// A forest drain (`compaction::forest`): no odd chunk stays behind.
    pub(crate) forest: bool,
    /// Chunks a forest drain moves to the target level as they are (not inputs), at their
    /// current level: the final delta version moves them.
    pub(crate) moved: Vec<ChunkMeta>,
    /// The smallest keys of the moved chunks not passed yet, ascending: the outputs are cut
    /// before each, so that the target level stays disjoint.
    cuts: std::collections::VecDeque<Vec<u8>>,
}

impl Merger {
    /// A merge of `plan` over `version`.
    pub(crate) fn new(
        plan: &Plan,
        version: &Version,
        compaction_id: u64,
        smallest_snapshot: u64,
        format: ChunkFormat,
    ) -> Self {
        let inputs: Vec<ChunkMeta> = plan.victims.iter().chain(&plan.overlapping).cloned().collect();
        let (_, victims_largest) = key_range(&plan.victims);
        let pointer = (plan.source_level > 0 && plan.target_level > plan.source_level)
            .then_some(CompactPointer { level: plan.source_level, key: victims_largest });
        let mut merger = Self::build(
            plan.source_level,
            plan.target_level,
            plan.manual,
            plan.victims.clone(),
            inputs,
            version,
            compaction_id,
            smallest_snapshot,
            format,
            pointer,
        );
        if plan.tiered {
            // Every tier is in level 0: a tombstone may go only where no chunk outside the
            // merge overlaps its key (older versions may be anywhere).
            let (smallest, largest) = key_range(&merger.inputs);
            let inputs: BTreeSet<u64> = merger.inputs.iter().map(|chunk| chunk.chunk_id).collect();
            merger.deeper = KeyRanges::of(
                version
                    .chunks
                    .values()
                    .filter(|chunk| !inputs.contains(&chunk.chunk_id) && overlaps(chunk, &smallest, &largest)),
            );
            merger.tiered = true;
        }
        if plan.forest {
            merger.set_forest(plan.moved.clone());
        }
        merger
    }

    /// Makes this a forest drain that moves `moved` to its target level.
    pub(crate) fn set_forest(&mut self, moved: Vec<ChunkMeta>) {
        self.forest = true;
        self.pointer = None;
        let mut cuts: Vec<Vec<u8>> = moved.iter().map(|chunk| chunk.smallest_key.clone()).collect();
        cuts.sort();
        self.cuts = cuts.into();
        self.moved = moved;
    }

    /// The merge an unfinished journaled compaction left (SPEC.md §12): the inputs the last
    /// record names, from after its resume key, with the outputs it lists already persisted.
    pub(crate) fn resume(
        journal: &CompactionJournal,
        version: &Version,
        smallest_snapshot: u64,
        format: ChunkFormat,
        forest_fanout: Option<usize>,
    ) -> Result<Self> {
        let mut inputs = Vec::new();
        for id in &journal.inputs {
            let chunk = version.chunks.get(id).ok_or_else(|| Error::Invariant {
                what: format!("compaction {}: input chunk {id} is not in the version", journal.compaction_id),
            })?;
            inputs.push(chunk.clone());
        }
        let victims: Vec<ChunkMeta> =
            inputs.iter().filter(|chunk| chunk.level == journal.source_level).cloned().collect();
        let (_, victims_largest) = key_range(&victims);
        let pointer = (journal.source_level > 0 && journal.target_level > journal.source_level)
            .then_some(CompactPointer { level: journal.source_level, key: victims_largest });
        let mut merger = Self::build(
            journal.source_level,
            journal.target_level,
            false,
            victims,
            inputs,
            version,
            journal.compaction_id,
            smallest_snapshot,
            format,
            pointer,
        );
        if let Some(fanout) = forest_fanout {
            let moved = crate::compaction::forest::moved_on_resume(
                version,
                fanout,
                journal.source_level,
                journal.target_level,
                &journal.inputs,
            );
            if let Some(moved) = moved {
                merger.set_forest(moved);
            }
        }
        merger.persisted = journal.outputs.clone();
        merger.resume_key = Some(journal.resume_key.clone());
        merger.cleaned = journal.cleaned.iter().copied().collect();
        Ok(merger)
    }

    #[expect(clippy::too_many_arguments, reason = "the private constructor of both entry points")]
    fn build(
        source_level: u8,
        target_level: u8,
        manual: bool,
        victims: Vec<ChunkMeta>,
        inputs: Vec<ChunkMeta>,
        version: &Version,
        compaction_id: u64,
        smallest_snapshot: u64,
        format: ChunkFormat,
        pointer: Option<CompactPointer>,
    ) -> Self {
        let (smallest, largest) = key_range(&inputs);
        // Older chunks outside the merge (a forest drain of the last stage takes victims from
        // levels past its target).
        let input_ids: BTreeSet<u64> = inputs.iter().map(|chunk| chunk.chunk_id).collect();
        let deeper = KeyRanges::of(version.chunks.values().filter(|chunk| {
            chunk.level > target_level && !input_ids.contains(&chunk.chunk_id) && overlaps(chunk, &smallest, &largest)
        }));
        // Level-0 inputs overlap: a run each. A deeper level's inputs are disjoint and sorted:
        // one run per level (the victims' level and the target's; a forest drain's several).
        let mut runs: Vec<Vec<&ChunkMeta>> = Vec::new();
        let mut by_level: std::collections::BTreeMap<u8, Vec<&ChunkMeta>> = std::collections::BTreeMap::new();
        for chunk in &inputs {
            if chunk.level == 0 {
                runs.push(vec![chunk]);
            } else {
                by_level.entry(chunk.level).or_default().push(chunk);
            }
        }
        runs.extend(by_level.into_values());
        let runs = runs
            .into_iter()
            .filter(|run| !run.is_empty())
            .map(|mut run| {
                run.sort_by(|a, b| a.smallest_key.cmp(&b.smallest_key));
                Run { pending: run.iter().flat_map(|chunk| chunk.sub_chunks.iter().copied()).collect(), loaded: None }
            })
            .collect();
        Self {
            compaction_id,
            source_level,
            target_level,
            manual,
            victims,
            inputs,
            persisted: Vec::new(),
            unwritten: Vec::new(),
            resume_key: None,
            cleaned: BTreeSet::new(),
            pointer,
            journaling: compaction_id != 0,
            runs,
            packer: Some(ChunkPacker::new(format)),
            retention: Retention::new(smallest_snapshot),
            deeper,
            relocation: None,
            log_region: None,
            tiered: false,
            tiered_written: Vec::new(),
            forest: false,
            moved: Vec::new(),
            cuts: std::collections::VecDeque::new(),
        }
    }

    /// True for a journaled merge (whose outputs may reuse the slots it cleaned).
    pub(crate) fn journaled(&self) -> bool {
        self.compaction_id != 0
    }

    /// Before the first entry of a resumed merge: drops, from every run, the sub-chunks of
    /// inputs entirely at or below the resume key (never reading them: a cleaned input's slot
    /// may hold another chunk by now).
    fn skip_done(&mut self) {
        let Some(resume) = &self.resume_key else { return };
        let done: BTreeSet<[u8; 32]> = self
            .inputs
            .iter()
            .filter(|chunk| chunk.largest_key.as_slice() <= resume.as_slice())
            .flat_map(|chunk| chunk.sub_chunks.iter().map(|sub_chunk| sub_chunk.digest))
            .collect();
        for run in &mut self.runs {
            if run.loaded.is_none() {
                run.pending.retain(|sub_chunk| !done.contains(&sub_chunk.digest));
            }
        }
    }

    /// Merges until `chunks_max` chunks are finished at a key boundary (the last one ends a
    /// key), or to the end of the inputs.
    pub(crate) fn produce(&mut self, context: &MergeContext<'_>, chunks_max: usize) -> Result<Produced> {
        self.skip_done();
        let resume = self.resume_key.clone();
        let mut chunks: Vec<Packed> = Vec::new();
        // Bounded by the entries of the inputs: each round consumes one.
        loop {
            let Some(packer) = self.packer.as_mut() else {
                return Ok(Produced { chunks, complete: true });
            };
            while let Some(packed) = packer.pop() {
                chunks.push(packed);
            }
            if chunks.len() >= chunks_max && chunks.last().is_some_and(|packed| packed.key_boundary) {
                return Ok(Produced { chunks, complete: false });
            }
            // The run whose current entry comes first in internal-key order.
            let mut best: Option<usize> = None;
            for index in 0..self.runs.len() {
                if !self.runs[index].fill(context, resume.as_deref())? {
                    continue;
                }
                let better = match best {
                    None => true,
                    Some(best) => {
                        let (candidate, current) = (&self.runs[index], &self.runs[best]);
                        let (Some(a), Some(b)) = (candidate.loaded.as_ref(), current.loaded.as_ref()) else { continue };
                        let (Some(entry_a), Some(entry_b)) = (a.current(), b.current()) else { continue };
                        lds_format::codec::compare_keys(a.slice(entry_a.key), b.slice(entry_b.key))
                            .then(entry_b.sequence.cmp(&entry_a.sequence))
                            .is_lt()
                    }
                };
                if better {
                    best = Some(index);
                }
            }
            let Some(best) = best else {
                let packer = self.packer.take().unwrap_or_else(|| unreachable!("the packer is there"));
                chunks.extend(packer.finish());
                return Ok(Produced { chunks, complete: true });
            };
            let Some(loaded) = self.runs[best].loaded.as_mut() else { continue };
            let Some(&entry) = loaded.current() else { continue };
            loaded.next += 1;
            let loaded = &*loaded;
            let key = loaded.slice(entry.key);
            let deeper = &mut self.deeper;
            let keep = self.retention.keep(key, entry.sequence, entry.kind, |key| !deeper.overlap(key));
            if keep {
                // A moved chunk lies between the last output entry and this one: cut.
                while self.cuts.front().is_some_and(|cut| cut.as_slice() <= key) {
                    self.cuts.pop_front();
                    packer.cut();
                }
                let value = loaded.slice(entry.value);
                // A log chunk's reference: its value, read from the retained region of the
                // backup log, goes to the output as a put (SPEC.md §8.9).
                if entry.kind == EntryKind::LogRef {
                    let Some(region) = self.log_region.as_mut() else {
                        return Err(Error::Invariant {
                            what: "a merge met a log reference without its log region".into(),
                        });
                    };
                    let value = region.value(context.device, key, entry.sequence, value)?;
                    packer.push(key, entry.sequence, EntryKind::Put, value);
                    continue;
                }
                let relocated = match (&mut self.relocation, entry.kind) {
                    (Some(relocation), EntryKind::Pointer) => relocation.relocate(context, value),
                    _ => None,
                };
                packer.push(key, entry.sequence, entry.kind, relocated.unwrap_or(value));
            }
        }
    }

    /// The `(level, flags)` of the last outputs of a merge, given how many outputs it makes
    /// in all: the target level, except that the last one may stay behind as the source
    /// level's odd chunk (SPEC.md §11) when it is small and nothing in the source level
    /// outside the victims is odd or overlaps it.
    pub(crate) fn placement(
        &self,
        last: &[Packed],
        outputs_total: usize,
        version: &Version,
        slot_size: u64,
    ) -> Vec<(u8, u8)> {
        let mut placement = vec![(self.target_level, 0u8); last.len()];
        if let Some(packed) = last.last() {
            let chunk = &packed.chunk;
            let odd_fits = !self.manual
                && !self.forest
                && self.source_level > 0
                && self.source_level != self.target_level
                && outputs_total > 1
                && chunk.len_data() < slot_size / 2
                && !version.level(self.source_level).iter().any(|candidate| {
                    !self.victims.contains(candidate)
                        && (candidate.is_odd() || overlaps(candidate, &chunk.first_key, &chunk.last_key))
                });
            if odd_fits {
                if let Some(place) = placement.last_mut() {
                    *place = (self.source_level, CHUNK_FLAG_ODD);
                }
            }
        }
        placement
    }

    /// The journal record of the outputs written so far (SPEC.md §6.3): every input, those
    /// outputs, the resume key (the largest key of the last output) and the inputs cleaned
    /// (those entirely at or below it).
    pub(crate) fn record(&self) -> Option<CompactionJournal> {
        let resume_key = self.persisted.last()?.largest_key.clone();
        let cleaned = self
            .inputs
            .iter()
            .filter(|chunk| chunk.largest_key.as_slice() <= resume_key.as_slice())
            .map(|chunk| chunk.chunk_id)
            .collect();
        Some(CompactionJournal {
            compaction_id: self.compaction_id,
            source_level: self.source_level,
            target_level: self.target_level,
            resume_key,
            inputs: self.inputs.iter().map(|chunk| chunk.chunk_id).collect(),
            cleaned,
            outputs: self.persisted.clone(),
        })
    }
}
