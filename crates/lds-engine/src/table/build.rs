//! Packing sorted entries into chunks of one slot each (SPEC.md §8.1), never splitting the
//! versions of one key between two chunks unless they alone exceed a slot, so that the chunks
//! of a level stay disjoint.

use lds_format::batch::EntryKind;
use lds_format::chunk::{
    BuiltSubChunk, ChunkBuilder, ChunkIdentity, ChunkOptions, BLOCK_TRAILER_LEN, ENTRY_FIXED_LEN, INDEX_ENTRY_FIXED_LEN,
};
use lds_format::label::Geometry;

use crate::options::Options;

/// What every chunk a store writes shares: its sizes and its identity before placement.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChunkFormat {
    pub(crate) options: ChunkOptions,
    pub(crate) identity: ChunkIdentity,
}

impl ChunkFormat {
    pub(crate) fn new(geometry: &Geometry, instance: u32, options: &Options) -> Self {
        Self {
            options: ChunkOptions {
                slot_size: geometry.slot_size,
                block_size: options.block_size,
                bloom_bits_per_key: options.bloom_bits_per_key,
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

/// Estimated bytes one key's versions add to a chunk, for the no-split rule.
fn group_len(key: &[u8], value_lens: &[usize], block_size: usize, bloom_bits_per_key: u32) -> usize {
    let data: usize = value_lens.iter().map(|value| ENTRY_FIXED_LEN + key.len() + value).sum();
    let blocks = 1 + data / block_size.max(1);
    data + blocks * (INDEX_ENTRY_FIXED_LEN + key.len() + BLOCK_TRAILER_LEN)
        + (bloom_bits_per_key as usize).div_ceil(8)
        + 1
}

/// Packs sorted entries into chunks, each filling at most one slot, never cutting between two
/// versions of one key unless they alone exceed a slot (SPEC.md §8.1 keeps a level's chunks
/// disjoint).
pub(crate) fn build_chunks<'a>(
    format: &ChunkFormat,
    entries: impl Iterator<Item = (&'a [u8], u64, EntryKind, &'a [u8])>,
) -> Vec<BuiltSubChunk> {
    let (options, identity) = (format.options, format.identity);
    let mut built = Vec::new();
    let mut builder = ChunkBuilder::new(options);
    let mut group: Vec<(&[u8], u64, EntryKind, &[u8])> = Vec::new();
    let flush_group = |builder: &mut ChunkBuilder,
                       group: &mut Vec<(&[u8], u64, EntryKind, &[u8])>,
                       built: &mut Vec<BuiltSubChunk>| {
        let Some(&(key, ..)) = group.first() else { return };
        let lens: Vec<usize> = group.iter().map(|entry| entry.3.len()).collect();
        let needed = group_len(key, &lens, options.block_size, options.bloom_bits_per_key);
        if !builder.is_empty() && builder.estimated_len() + needed > options.slot_size as usize {
            let full = std::mem::replace(builder, ChunkBuilder::new(options));
            built.extend(full.finish(identity));
        }
        for &(key, sequence, kind, value) in group.iter() {
            if !builder.add(key, sequence, kind, value) {
                // One key's versions exceed a slot: the only case that splits a key.
                let full = std::mem::replace(builder, ChunkBuilder::new(options));
                built.extend(full.finish(identity));
                let added = builder.add(key, sequence, kind, value);
                assert!(added, "an entry within the value limit always fits an empty slot");
            }
        }
        group.clear();
    };
    for entry in entries {
        if group.first().is_some_and(|first| first.0 != entry.0) {
            flush_group(&mut builder, &mut group, &mut built);
        }
        group.push(entry);
    }
    flush_group(&mut builder, &mut group, &mut built);
    built.extend(builder.finish(identity));
    built
}
