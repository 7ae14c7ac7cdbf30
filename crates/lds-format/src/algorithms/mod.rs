//! The algorithms over the format's structures, each a pure function of bytes (no I/O): the
//! codecs beside this module say what bytes mean, these say what to do with them.
//!
//! Normative, as SPEC.md states them (every implementation must reach the same result):
//! - [`recovery`]: following a log's chain, recovering the version log and the backup log,
//!   the online map (SPEC.md §9.1 to §9.4);
//! - [`instance`]: recovering one instance and telling the ends a crash leaves from damage no
//!   crash explains (§9.2, §9.3, §9.6);
//! - [`writer`]: where a log append goes, never into the live region (§10.1).
//!
//! This implementation's choices within what SPEC.md allows:
//! - [`pack`]: how sorted entries are cut into chunks and the metadata of a placed chunk
//!   (§8.1, §8.4, §6.4);
//! - [`image`]: what mkfs writes, and whole-volume images for fixtures and tests (§4.2, §5.2,
//!   §10).
//!
//! Heuristics, for damage SPEC.md does not define a reading of:
//! - [`salvage`]: the newest version a damaged version log still describes and the entries of
//!   damaged sub-chunks and value chunks, for repair and salvage. A different heuristic may
//!   recover more or less; none may take bytes whose checksums fail.

pub mod image;
pub mod instance;
pub mod pack;
pub mod recovery;
pub mod salvage;
pub mod writer;
