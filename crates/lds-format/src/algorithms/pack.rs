//! Packing sorted entries into chunks of one slot each (SPEC.md §8.1), never splitting the
//! versions of one key between two chunks unless they alone exceed a slot, so that the chunks
//! of a level stay disjoint; and the chunk metadata of a packed chunk once it is placed
//! (§6.4). The engine's flushes and merges, repair and salvage all pack through here.

use crate::chunk::block::{entry_header_len, BLOCK_TRAILER_LEN};
use crate::chunk::builder::{BuiltSubChunk, ChunkBuilder, ChunkIdentity, ChunkOptions};
use crate::chunk::index::INDEX_ENTRY_FIXED_LEN;
use crate::entry::EntryKind;
use crate::geometry::Geometry;
use crate::version::meta::{ChunkMeta, SubChunkRef, CHUNK_FLAG_LOG_REFS, CHUNK_FLAG_VALUE_REFS};

/// What every chunk a writer packs shares: its sizes and its identity before placement.
#[derive(Debug, Clone, Copy)]
pub struct ChunkFormat {
    /// Slot, block and filter sizes.
    pub options: ChunkOptions,
    /// The footer's identity before placement (chunk id and level are set by [`place`]).
    pub identity: ChunkIdentity,
}

/// What a volume's features decide of the chunks written to it (SPEC.md §17): the digest
/// (`fast_digest`, §8.3) and the entry encoding (`compact_entries`, §8.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkEncoding {
    /// The footer's digest function.
    pub digest: crate::digest::DigestKind,
    /// Blocks hold compact entries.
    pub compact_entries: bool,
}

impl ChunkEncoding {
    /// The encoding of new chunks on the volume `label` describes.
    pub fn of_label(label: &crate::label::Label) -> Self {
        Self { digest: label.digest_kind(), compact_entries: label.has_compact_entries() }
    }
}

impl ChunkFormat {
    /// The same format with the digest and entry encoding of `encoding` (SPEC.md §8.2, §8.3).
    pub fn with_encoding(mut self, encoding: ChunkEncoding) -> Self {
        self.options.digest = encoding.digest;
        self.options.compact_entries = encoding.compact_entries;
        self
    }

    /// The same format with a key sketch in every sub-chunk (SPEC.md §8.7: flushes on volumes
    /// with feature `chunk_sketches`).
    pub fn with_sketches(mut self) -> Self {
        self.options.sketch_precision = crate::sketch::SKETCH_PRECISION;
        self
    }

    /// The format of chunks of `instance` on the volume `label` describes: its digest kind
    /// and entry encoding from the label's features.
    pub fn for_label(label: &crate::label::Label, instance: u32, block_size: usize, bloom_bits_per_key: u32) -> Self {
        Self::new(&label.geometry, instance, block_size, bloom_bits_per_key)
            .with_encoding(ChunkEncoding::of_label(label))
    }

    /// Chunks of `instance` on a volume of `geometry`, with blocks of `block_size` bytes and
    /// filters of `bloom_bits_per_key` bits per key (0: none).
    pub fn new(geometry: &Geometry, instance: u32, block_size: usize, bloom_bits_per_key: u32) -> Self {
        Self {
            options: ChunkOptions {
                slot_size: geometry.slot_size,
                block_size,
                bloom_bits_per_key,
                digest: crate::digest::DigestKind::Blake3,
                sketch_precision: 0,
                compact_entries: false,
            },
            identity: ChunkIdentity {
                volume_uuid: geometry.volume_uuid,
                instance,
                chunk_id: 0,
                sub_chunk_index: 0,
                num_sub_chunks: 1,
                level: 0,
                flags: 0,
            },
        }
    }
}

/// Estimated bytes one key's versions add to a chunk, for the no-split rule: `headers` bytes
/// of entry headers, the key once per version, `value_bytes`.
fn group_len(
    key: &[u8],
    headers: usize,
    versions: usize,
    value_bytes: usize,
    block_size: usize,
    bloom_bits_per_key: u32,
) -> usize {
    let data = headers + versions * key.len() + value_bytes;
    let blocks = 1 + data / block_size.max(1);
    data + blocks * (INDEX_ENTRY_FIXED_LEN + key.len() + BLOCK_TRAILER_LEN)
        + (bloom_bits_per_key as usize).div_ceil(8)
        + 1
}

/// A chunk the packer finished.
#[derive(Debug)]
pub struct Packed {
    /// The chunk, not yet placed (identity and level are set when it is written).
    pub chunk: BuiltSubChunk,
    /// Every version of its last key is in it: the next chunk starts with a greater key. Only
    /// a key whose versions alone exceed a slot ends a chunk without a boundary.
    pub key_boundary: bool,
}

impl AsMut<BuiltSubChunk> for Packed {
    fn as_mut(&mut self) -> &mut BuiltSubChunk {
        &mut self.chunk
    }
}

/// Packs sorted entries (user key ascending, newest version first) into chunks of at most
/// one slot each, one entry at a time, never cutting between two versions of one key unless
/// they alone exceed a slot (SPEC.md §8.1 keeps a level's chunks disjoint).
pub struct ChunkPacker {
    format: ChunkFormat,
    builder: ChunkBuilder,
    /// The versions of the key being gathered: `(sequence, kind, end of its value in
    /// group_values)`, the values one after the other in one buffer (no allocation per entry).
    group_key: Vec<u8>,
    group: Vec<(u64, EntryKind, usize)>,
    group_values: Vec<u8>,
    finished: std::collections::VecDeque<Packed>,
}

impl ChunkPacker {
    /// An empty packer.
    pub fn new(format: ChunkFormat) -> Self {
        Self {
            builder: ChunkBuilder::new(format.options),
            format,
            group_key: Vec::new(),
            group: Vec::new(),
            group_values: Vec::new(),
            finished: std::collections::VecDeque::new(),
        }
    }

    /// Adds the next entry (entries come in internal-key order).
    pub fn push(&mut self, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
        if !self.group.is_empty() && self.group_key != key {
            self.flush_group();
        }
        if self.group.is_empty() {
            self.group_key.clear();
            self.group_key.extend_from_slice(key);
            self.group_values.clear();
        }
        self.group_values.extend_from_slice(value);
        self.group.push((sequence, kind, self.group_values.len()));
    }

    /// Ends the chunk being filled after the entries pushed so far (at a key boundary), so
    /// that the next entry starts a new chunk; nothing when it is empty.
    pub fn cut(&mut self) {
        self.flush_group();
        if !self.builder.is_empty() {
            self.seal(true);
        }
    }

    /// A finished chunk, if any.
    pub fn pop(&mut self) -> Option<Packed> {
        self.finished.pop_front()
    }

    /// Finishes the last chunk; returns every chunk not popped yet.
    pub fn finish(mut self) -> Vec<Packed> {
        self.flush_group();
        let last = std::mem::replace(&mut self.builder, ChunkBuilder::new(self.format.options));
        self.finished.extend(last.finish(self.format.identity).map(|chunk| Packed { chunk, key_boundary: true }));
        self.finished.into_iter().collect()
    }

    fn seal(&mut self, key_boundary: bool) {
        let full = std::mem::replace(&mut self.builder, ChunkBuilder::new(self.format.options));
        self.finished.extend(full.finish(self.format.identity).map(|chunk| Packed { chunk, key_boundary }));
    }

    fn flush_group(&mut self) {
        if self.group.is_empty() {
            return;
        }
        let options = self.format.options;
        let mut start = 0;
        let headers = self
            .group
            .iter()
            .map(|&(sequence, kind, end)| {
                let len_value = end - start;
                start = end;
                entry_header_len(options.compact_entries, sequence, kind, self.group_key.len(), len_value)
            })
            .sum();
        let needed = group_len(
            &self.group_key,
            headers,
            self.group.len(),
            self.group_values.len(),
            options.block_size,
            options.bloom_bits_per_key,
        );
        if !self.builder.is_empty() && self.builder.estimated_len() + needed > options.slot_size as usize {
            self.seal(true);
        }
        let group = std::mem::take(&mut self.group);
        let values = std::mem::take(&mut self.group_values);
        let mut start = 0;
        for &(sequence, kind, end) in &group {
            let value = &values[start..end];
            start = end;
            if !self.builder.add(&self.group_key, sequence, kind, value) {
                // One key's versions exceed a slot: the only case that splits a key.
                self.seal(false);
                let added = self.builder.add(&self.group_key, sequence, kind, value);
                assert!(added, "an entry within the value limit always fits an empty slot");
            }
        }
        self.group = group;
        self.group.clear();
        self.group_values = values;
    }
}

/// Packs sorted entries into chunks (all at once, for a memtable flush).
pub fn build_chunks<'a>(
    format: &ChunkFormat,
    entries: impl Iterator<Item = (&'a [u8], u64, EntryKind, &'a [u8])>,
) -> Vec<BuiltSubChunk> {
    let mut packer = ChunkPacker::new(*format);
    for (key, sequence, kind, value) in entries {
        packer.push(key, sequence, kind, value);
    }
    packer.finish().into_iter().map(|packed| packed.chunk).collect()
}

/// Places a packed chunk in `slot` at `level` with `flags` (the footer's identity, level and
/// flags are set and the chunk resealed) and returns its metadata (SPEC.md §6.4). The caller
/// writes `chunk.body` at the slot start and `chunk.tail()` at the slot end.
pub fn place(chunk: &mut BuiltSubChunk, slot: u64, level: u8, flags: u8) -> ChunkMeta {
    chunk.set_level_and_flags(level, flags);
    chunk.set_identity(slot, 0, 1);
    ChunkMeta {
        chunk_id: slot,
        level,
        flags: meta_flags(flags, !chunk.value_refs.is_empty(), chunk.log_start.is_some()),
        value_refs: chunk.value_refs.clone(),
        log_start: chunk.log_start,
        num_entries: chunk.footer.num_entries,
        smallest_seq: chunk.footer.smallest_seq,
        largest_seq: chunk.footer.largest_seq,
        len_data: chunk.len_data(),
        smallest_key: chunk.first_key.clone(),
        largest_key: chunk.last_key.clone(),
        sub_chunks: vec![SubChunkRef { slot, digest: chunk.footer.digest }],
    }
}

/// Places packed sub-chunks, in key order, in `slots` as the sub-chunks of one chunk (SPEC.md
/// §8.4: the chunk's id is the slot of sub-chunk 0) at `level` with `flags`, and returns its
/// metadata. Each footer's identity is set and resealed: the caller writes (or rewrites) every
/// sub-chunk's tail after this.
pub fn place_group(chunks: &mut [BuiltSubChunk], slots: &[u64], level: u8, flags: u8) -> Option<ChunkMeta> {
    let (first, last) = (chunks.first()?, chunks.last()?);
    let (smallest_key, largest_key) = (first.first_key.clone(), last.last_key.clone());
    let count = u16::try_from(chunks.len()).ok()?;
    let mut value_refs: std::collections::BTreeMap<u64, u64> = std::collections::BTreeMap::new();
    let mut meta = ChunkMeta {
        chunk_id: *slots.first()?,
        level,
        flags,
        value_refs: Vec::new(),
        log_start: None,
        num_entries: 0,
        smallest_seq: u64::MAX,
        largest_seq: 0,
        len_data: 0,
        smallest_key,
        largest_key,
        sub_chunks: Vec::with_capacity(chunks.len()),
    };
    for (index, (chunk, &slot)) in chunks.iter_mut().zip(slots).enumerate() {
        chunk.set_level_and_flags(level, flags);
        chunk.set_identity(meta.chunk_id, index as u16, count);
        meta.num_entries += chunk.footer.num_entries;
        meta.smallest_seq = meta.smallest_seq.min(chunk.footer.smallest_seq);
        meta.largest_seq = meta.largest_seq.max(chunk.footer.largest_seq);
        meta.len_data += chunk.len_data();
        meta.sub_chunks.push(SubChunkRef { slot, digest: chunk.footer.digest });
        for &(id, bytes) in &chunk.value_refs {
            *value_refs.entry(id).or_insert(0) += bytes;
        }
        if let Some(start) = chunk.log_start {
            meta.log_start = Some(meta.log_start.map_or(start, |earlier| earlier.min(start)));
        }
    }
    meta.value_refs = value_refs.into_iter().collect();
    meta.flags = meta_flags(flags, !meta.value_refs.is_empty(), meta.log_start.is_some());
    Some(meta)
}

/// The chunk metadata's flags: the caller's (odd), with the value references' and log
/// references' bits set exactly when the chunk has them (SPEC.md §6.4).
fn meta_flags(flags: u8, value_refs: bool, log_refs: bool) -> u8 {
    let flags = flags & !(CHUNK_FLAG_VALUE_REFS | CHUNK_FLAG_LOG_REFS);
    flags | if value_refs { CHUNK_FLAG_VALUE_REFS } else { 0 } | if log_refs { CHUNK_FLAG_LOG_REFS } else { 0 }
}
