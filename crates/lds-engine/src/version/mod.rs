//! The live version of the tree: its levels, the online map of slots, and committing a
//! change to it through the version log (SPEC.md §10.2 to §10.4).

pub(crate) mod commit;
pub(crate) mod levels;
pub(crate) mod published;
pub(crate) mod slots;
