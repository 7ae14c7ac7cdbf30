//! The LDS on-disk format: encoders, decoders and recovery rules over bytes, with no I/O and
//! no unsafe code. SPEC.md is the normative description; each module cites its sections.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]

pub mod batch;
pub mod chunk;
pub mod codec;
pub mod devices;
pub mod error;
pub mod image;
pub mod instance;
pub mod label;
pub mod log;
pub mod logref;
pub mod pack;
pub mod recovery;
pub mod salvage;
pub mod sketch;
pub mod value;
pub mod version;
pub mod writer;

pub use error::FormatError;
