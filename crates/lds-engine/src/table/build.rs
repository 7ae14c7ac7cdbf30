//! The engine's chunk format: the packer lives in the format crate
//! (`lds_format::algorithms::pack`), shared with repair and salvage; the engine supplies its
//! block and filter sizes.

pub(crate) use lds_format::algorithms::pack::{ChunkEncoding, ChunkFormat, ChunkPacker, Packed};
use lds_format::geometry::Geometry;

use crate::options::Options;

/// The chunk format of a store's flushes and merges (the digest and entry encoding the
/// volume's label asks for, SPEC.md §8.2, §8.3).
pub(crate) fn chunk_format(
    geometry: &Geometry,
    instance: u32,
    options: &Options,
    encoding: ChunkEncoding,
) -> ChunkFormat {
    ChunkFormat::new(geometry, instance, options.block_size, options.bloom_bits_per_key).with_encoding(encoding)
}
