//! Chunks in the slot area (SPEC.md §8): a sub-chunk fills one slot with blocks of sorted
//! entries from its start and a tail right-aligned at its end (key sketch, block index,
//! filter, footer). Each structure has its file; `builder` writes a sub-chunk and `view`
//! reads one back with every check.

pub mod block;
pub mod builder;
pub mod filter;
pub mod footer;
pub mod index;
pub mod view;

#[cfg(test)]
mod tests;
