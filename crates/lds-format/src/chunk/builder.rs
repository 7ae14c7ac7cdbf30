//! Building a sub-chunk (SPEC.md §8.1): sorted entries packed into blocks from the slot
//! start, the tail (key sketch, index, filter, footer) right-aligned at its end.

use std::collections::BTreeMap;

use crate::chunk::block::{encode_entry, entry_header_len, BLOCK_FLAG_COMPACT, BLOCK_TRAILER_LEN};
use crate::chunk::filter::{filter_hash, Filter};
use crate::chunk::footer::{sub_chunk_digest, Footer, FOOTER_FLAG_ODD, FOOTER_LEN};
use crate::chunk::index::INDEX_ENTRY_FIXED_LEN;
use crate::codec::{crc32c, Writer};
use crate::digest::{DigestKind, DigestState, FOOTER_FLAG_XXH3};
use crate::entry::{compare_internal, pack_seq_kind, EntryKind};
use crate::log::LogPosition;
use crate::logref::LogRef;
use crate::sketch::Sketch;
use crate::value::pointer_refs;

/// What a sub-chunk is, for its footer.
#[derive(Debug, Clone, Copy)]
pub struct ChunkIdentity {
    /// The volume.
    pub volume_uuid: [u8; 16],
    /// Owning instance.
    pub instance: u32,
    /// Slot of sub-chunk 0.
    pub chunk_id: u64,
    /// Index of this sub-chunk.
    pub sub_chunk_index: u16,
    /// Sub-chunks in the chunk (may be patched by `BuiltSubChunk::set_sub_chunk_count`).
    pub num_sub_chunks: u16,
    /// Level.
    pub level: u8,
    /// Flags.
    pub flags: u8,
}

/// Options for building chunks.
#[derive(Debug, Clone, Copy)]
pub struct ChunkOptions {
    /// Slot size of the volume.
    pub slot_size: u64,
    /// Target uncompressed block size.
    pub block_size: usize,
    /// Bloom filter bits per key (0: no filter).
    pub bloom_bits_per_key: u32,
    /// The digest the footer records (xxh3-128 on volumes with feature `fast_digest`).
    pub digest: DigestKind,
    /// The precision of the key sketch each sub-chunk carries (SPEC.md §8.7, volumes with
    /// feature `chunk_sketches`); 0 for none.
    pub sketch_precision: u8,
    /// Blocks hold compact entries (SPEC.md §8.2, volumes with feature `compact_entries`).
    pub compact_entries: bool,
}

impl ChunkOptions {
    /// Bytes of the key sketch each sub-chunk carries.
    pub fn sketch_len(&self) -> usize {
        if self.sketch_precision == 0 {
            0
        } else {
            Sketch::encoded_len(self.sketch_precision)
        }
    }
}

/// Packs sorted entries into one slot.
pub struct ChunkBuilder {
    options: ChunkOptions,
    body: Vec<u8>,
    block_start: usize,
    block_entries: u32,
    index: Writer,
    num_blocks: u32,
    key_hashes: Vec<u64>,
    last_key: Vec<u8>,
    last_seq_kind: u64,
    first_key: Vec<u8>,
    num_entries: u64,
    smallest_seq: u64,
    largest_seq: u64,
    /// Bytes the pointer entries hold in each value chunk (SPEC.md §6.4, §8.6).
    value_refs: BTreeMap<u64, u64>,
    /// The oldest backup log object the log references name (SPEC.md §8.9).
    log_start: Option<LogPosition>,
}

impl ChunkBuilder {
    /// An empty builder.
    pub fn new(options: ChunkOptions) -> Self {
        Self {
            options,
            body: Vec::with_capacity(options.slot_size as usize),
            block_start: 0,
            block_entries: 0,
            index: Writer::new(),
            num_blocks: 0,
            key_hashes: Vec::new(),
            last_key: Vec::new(),
            last_seq_kind: 0,
            first_key: Vec::new(),
            num_entries: 0,
            smallest_seq: u64::MAX,
            largest_seq: 0,
            value_refs: BTreeMap::new(),
            log_start: None,
        }
    }

    /// Entries added so far.
    pub fn num_entries(&self) -> u64 {
        self.num_entries
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.num_entries == 0
    }

    /// Bytes the finished slot content would use now (body, open block trailer, tail).
    pub fn estimated_len(&self) -> usize {
        let open_block =
            if self.block_entries > 0 { BLOCK_TRAILER_LEN + INDEX_ENTRY_FIXED_LEN + self.last_key.len() } else { 0 };
        self.body.len()
            + open_block
            + self.index.len()
            + Filter::encoded_len(self.key_hashes.len(), self.options.bloom_bits_per_key)
            + self.options.sketch_len()
            + FOOTER_LEN
    }

    /// Adds an entry if it fits the slot; returns false (adding nothing) when it does not.
    /// Entries must come in internal-key order.
    pub fn add(&mut self, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) -> bool {
        let compact = self.options.compact_entries;
        let entry_len = entry_header_len(compact, sequence, kind, key.len(), value.len()) + key.len() + value.len();
        let new_key = usize::from(self.num_entries == 0 || self.last_key != key);
        let close_first = self.block_entries > 0
            && self.body.len() - self.block_start + entry_len + BLOCK_TRAILER_LEN > self.options.block_size;
        // The finished length if this entry is added: closing the open block first fixes its
        // trailer and index entry; the block holding the entry then ends with this key.
        let (body_len, index_len) = if close_first {
            (
                self.body.len() + BLOCK_TRAILER_LEN + entry_len,
                self.index.len() + INDEX_ENTRY_FIXED_LEN + self.last_key.len() + INDEX_ENTRY_FIXED_LEN + key.len(),
            )
        } else {
            (self.body.len() + entry_len, self.index.len() + INDEX_ENTRY_FIXED_LEN + key.len())
        };
        let needed = body_len
            + BLOCK_TRAILER_LEN
            + index_len
            + Filter::encoded_len(self.key_hashes.len() + new_key, self.options.bloom_bits_per_key)
            + self.options.sketch_len()
            + FOOTER_LEN;
        if needed > self.options.slot_size as usize {
            return false;
        }
        if close_first {
            self.close_block();
        }
        let seq_kind = pack_seq_kind(sequence, kind);
        debug_assert!(
            self.num_entries == 0 || compare_internal(&self.last_key, self.last_seq_kind, key, seq_kind).is_lt()
        );
        encode_entry(&mut self.body, compact, key, sequence, kind, value);
        if new_key == 1 {
            self.key_hashes.push(filter_hash(key));
        }
        if kind == EntryKind::Pointer {
            pointer_refs(value, &mut self.value_refs);
        }
        if kind == EntryKind::LogRef {
            if let Ok(reference) = LogRef::decode(value, 0) {
                let position = reference.position();
                self.log_start = Some(self.log_start.map_or(position, |start| start.min(position)));
            }
        }
        if self.num_entries == 0 {
            self.first_key = key.to_vec();
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.last_seq_kind = seq_kind;
        self.block_entries += 1;
        self.num_entries += 1;
        self.smallest_seq = self.smallest_seq.min(sequence);
        self.largest_seq = self.largest_seq.max(sequence);
        true
    }

    fn close_block(&mut self) {
        if self.block_entries == 0 {
            return;
        }
        let flag = if self.options.compact_entries { BLOCK_FLAG_COMPACT } else { 0 };
        self.body.extend_from_slice(&(self.block_entries | flag).to_le_bytes());
        let crc = crc32c(&self.body[self.block_start..]);
        self.body.extend_from_slice(&crc.to_le_bytes());
        let len_block = (self.body.len() - self.block_start) as u32;
        self.index.u32(self.block_start as u32).u32(len_block).u64(self.last_seq_kind).key(&self.last_key);
        self.num_blocks += 1;
        self.block_start = self.body.len();
        self.block_entries = 0;
    }

    /// Finishes the sub-chunk. Returns `None` when no entry was added.
    pub fn finish(mut self, identity: ChunkIdentity) -> Option<BuiltSubChunk> {
        if self.num_entries == 0 {
            return None;
        }
        self.close_block();
        let mut tail = Writer::with_capacity(self.index.len() + 64 + FOOTER_LEN);
        tail.bytes(self.index.as_slice());
        let len_index = self.index.len() as u32;
        let filter = Filter::build(&self.key_hashes, self.options.bloom_bits_per_key);
        filter.encode(&mut tail);
        let len_filter = tail.len() as u32 - len_index;
        let slot_size = self.options.slot_size;
        let tail_len = tail.len() + FOOTER_LEN;
        let sketch = if self.options.sketch_precision == 0 {
            Vec::new()
        } else {
            let mut sketch = Sketch::new(self.options.sketch_precision);
            for &hash in &self.key_hashes {
                sketch.add_hash(hash);
            }
            sketch.encode()
        };
        assert!(self.body.len() + sketch.len() + tail_len <= slot_size as usize, "builder overflowed its slot");
        let ofs_index = (slot_size as usize - tail_len) as u32;
        let (ofs_sketch, sketch_crc32c) =
            if sketch.is_empty() { (0, 0) } else { (ofs_index - sketch.len() as u32, crc32c(&sketch)) };
        let footer = Footer {
            version_major: 1,
            level: identity.level,
            flags: identity.flags | self.options.digest.flag(),
            instance: identity.instance,
            chunk_id: identity.chunk_id,
            sub_chunk_index: identity.sub_chunk_index,
            num_sub_chunks: identity.num_sub_chunks,
            num_blocks: self.num_blocks,
            num_entries: self.num_entries,
            smallest_seq: self.smallest_seq,
            largest_seq: self.largest_seq,
            len_body: self.body.len() as u32,
            ofs_index,
            len_index,
            index_crc32c: crc32c(&tail.as_slice()[..len_index as usize]),
            ofs_filter: ofs_index + len_index,
            len_filter,
            filter_crc32c: crc32c(&tail.as_slice()[len_index as usize..]),
            slot_size: slot_size as u32,
            volume_uuid: identity.volume_uuid,
            digest: [0; 32],
            ofs_sketch,
            len_sketch: sketch.len() as u32,
            sketch_crc32c,
            footer_crc32c: 0,
        };
        let tail_without_footer = tail.into_bytes();
        // The digest covers the body and the tail, then footer bytes 0..104: the first part
        // is hashed once, and each reseal (a level, flags or identity set later) hashes only
        // the footer's bytes after it.
        let mut digest_prefix = DigestState::new(self.options.digest);
        digest_prefix.update(&self.body);
        digest_prefix.update(&tail_without_footer);
        let mut built = BuiltSubChunk {
            body: self.body,
            tail_without_footer,
            footer,
            first_key: self.first_key,
            last_key: self.last_key,
            value_refs: self.value_refs.into_iter().collect(),
            log_start: self.log_start,
            sketch,
            digest_prefix,
        };
        built.seal();
        Some(built)
    }
}

/// A finished sub-chunk: the body goes at the slot start, the tail at the slot end.
#[derive(Debug, Clone)]
pub struct BuiltSubChunk {
    /// Blocks.
    pub body: Vec<u8>,
    /// Index and filter.
    pub tail_without_footer: Vec<u8>,
    /// The footer (digest and checksum set).
    pub footer: Footer,
    /// Smallest user key.
    pub first_key: Vec<u8>,
    /// Largest user key.
    pub last_key: Vec<u8>,
    /// Bytes its pointer entries hold in each value chunk, by value chunk id (SPEC.md §6.4).
    pub value_refs: Vec<(u64, u64)>,
    /// The oldest backup log object its log references name (SPEC.md §8.9), if it has any.
    pub log_start: Option<LogPosition>,
    /// The encoded key sketch (SPEC.md §8.7), written just before the index; empty for none.
    pub sketch: Vec<u8>,
    /// The digest's hasher after the body and the tail (see `ChunkBuilder::finish`).
    digest_prefix: DigestState,
}

impl AsMut<BuiltSubChunk> for BuiltSubChunk {
    fn as_mut(&mut self) -> &mut BuiltSubChunk {
        self
    }
}

impl BuiltSubChunk {
    fn seal(&mut self) {
        let mut hasher = self.digest_prefix.clone();
        hasher.update(&self.footer.encode_digest_covered());
        self.footer.digest = hasher.finish();
        // (Checked while the body is kept: a writer may drop it once written.)
        debug_assert!(
            self.body.len() != self.footer.len_body as usize
                || self.footer.digest == sub_chunk_digest(&self.body, &self.tail_without_footer, &self.footer)
        );
        let encoded = self.footer.encode();
        self.footer.footer_crc32c = u32::from_le_bytes([encoded[156], encoded[157], encoded[158], encoded[159]]);
    }

    /// Changes the chunk identity fields (after the writer knows its slots) and reseals.
    pub fn set_identity(&mut self, chunk_id: u64, sub_chunk_index: u16, num_sub_chunks: u16) {
        self.footer.chunk_id = chunk_id;
        self.footer.sub_chunk_index = sub_chunk_index;
        self.footer.num_sub_chunks = num_sub_chunks;
        self.seal();
    }

    /// Changes the level and flags (the odd flag is decided after a merge ends) and reseals.
    pub fn set_level_and_flags(&mut self, level: u8, flags: u8) {
        self.footer.level = level;
        // The digest's kind stays what the chunk was built with; of the chunk metadata's
        // flags only `odd` is a footer flag (SPEC.md §6.4, §8.3).
        self.footer.flags = (flags & FOOTER_FLAG_ODD) | (self.footer.flags & FOOTER_FLAG_XXH3);
        self.seal();
    }

    /// The tail bytes (key sketch, index, filter, footer) to write at the slot end.
    pub fn tail(&self) -> Vec<u8> {
        let mut tail = Vec::with_capacity(self.sketch.len() + self.tail_without_footer.len() + FOOTER_LEN);
        tail.extend_from_slice(&self.sketch);
        tail.extend_from_slice(&self.tail_without_footer);
        tail.extend_from_slice(&self.footer.encode());
        tail
    }

    /// Bytes used in the slot.
    pub fn len_data(&self) -> u64 {
        // From the footer: a writer may drop the body once it is written (a chunk of several
        // sub-chunks whose identities are set after all of them are written).
        (self.footer.len_body as usize + self.sketch.len() + self.tail_without_footer.len() + FOOTER_LEN) as u64
    }

    /// The whole slot image, padding zeroed (for tests, fixtures and simple writers).
    pub fn slot_image(&self) -> Vec<u8> {
        let slot_size = self.footer.slot_size as usize;
        let mut image = vec![0u8; slot_size];
        image[..self.body.len()].copy_from_slice(&self.body);
        let tail = self.tail();
        image[slot_size - tail.len()..].copy_from_slice(&tail);
        image
    }
}
