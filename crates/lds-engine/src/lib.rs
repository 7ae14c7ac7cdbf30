//! The LDS engine. This first part holds the device layer and a read-only volume reader used
//! by the tools; the key-value engine builds on them.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

pub mod device;
pub mod inspect;
pub mod signature;
