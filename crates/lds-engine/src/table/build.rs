//! The engine's chunk format: the packer lives in the format crate (`lds_format::pack`), shared
//! with repair and salvage; the engine supplies its block and filter sizes.

use lds_format::chunk::DigestKind;
use lds_format::label::Geometry;
pub(crate) use lds_format::pack::{ChunkFormat, ChunkPacker, Packed};

use crate::options::Options;

/// The chunk format of a store's flushes and merges (the digest the volume's label asks for,
/// SPEC.md §8.3).
pub(crate) fn chunk_format(geometry: &Geometry, instance: u32, options: &Options, digest: DigestKind) -> ChunkFormat {
    ChunkFormat::new(geometry, instance, options.block_size, options.bloom_bits_per_key).with_digest(digest)
}
