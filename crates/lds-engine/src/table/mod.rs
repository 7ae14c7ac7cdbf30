//! Chunks (the paper's tables, SPEC.md §8): packing sorted entries into chunks, the cache of
//! what was read from them, and following log references into the backup log (TRIAD-LOG,
//! SPEC.md §8.9). Writing them into slots is `commit`'s.

pub(crate) mod build;
pub(crate) mod cache;
pub(crate) mod log;
