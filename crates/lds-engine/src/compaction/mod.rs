//! Compaction's decisions and its merge, over a version and without the store's shared
//! state (the `compact` module runs them on the store): `pick` chooses a leveled compaction
//! (LevelDB's strategy on LDS slots), `tiered` and `forest` the size-tiered and split-forest
//! ones, `defer` whether level 0 waits (TRIAD-DISK), and `merge` streams a merge's outputs
//! through a narrow context.

pub(crate) mod defer;
pub(crate) mod forest;
pub(crate) mod merge;
pub(crate) mod pick;
pub(crate) mod tiered;

#[cfg(test)]
pub(crate) mod testing;
