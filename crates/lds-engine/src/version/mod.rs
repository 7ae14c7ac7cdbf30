//! The live version of the tree: its levels, and the version readers see (SPEC.md §10.1).
//! Committing a change to it is `commit`'s; the online map of slots is `slots`'.

pub(crate) mod levels;
pub(crate) mod published;
