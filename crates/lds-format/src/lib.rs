//! The LDS on-disk format: encoders, decoders and recovery rules over bytes, with no I/O and
//! no unsafe code. SPEC.md is the normative description; each module cites its sections.
//!
//! The modules by concept, each importing only those listed before it:
//! - primitives: [`error`], [`codec`];
//! - where things lie: [`geometry`] (SPEC.md §3, §4.1), [`device_table`] (§4.3), [`digest`]
//!   (§8.3), [`label`] (§4);
//! - entries and what they point to: [`entry`] (kinds, `seq_kind`, internal-key order),
//!   [`value`] (value pointers and value chunks, §8.6), [`sketch`] (§8.7);
//! - logs: [`log`] (objects and areas, §5), [`batch`] (write batches, §7), [`logref`] (log
//!   references, §8.9);
//! - the version and the slot area: [`version`] (§6), [`chunk`] (§8);
//! - [`algorithms`]: recovery, writing, packing, images and salvage over all of these, with
//!   the normative ones told from the heuristics.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]

pub mod algorithms;
pub mod batch;
pub mod chunk;
pub mod codec;
pub mod device_table;
pub mod digest;
pub mod entry;
pub mod error;
pub mod geometry;
pub mod label;
pub mod log;
pub mod logref;
pub mod sketch;
pub mod value;
pub mod version;

pub use error::FormatError;
