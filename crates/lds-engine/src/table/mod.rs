//! Chunks (the paper's tables, SPEC.md §8): packing sorted entries into chunks, writing them
//! into slots, and the cache of what was read from them.

pub(crate) mod build;
pub(crate) mod cache;
pub(crate) mod write;
