//! The LDS engine: devices, the key-value store (`Db`) and read-only volume access for the
//! tools.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

pub mod compaction;
pub mod db;
pub mod device;
pub mod error;
pub mod inspect;
pub mod memtable;
pub mod signature;

pub use db::{Db, Options, RecoveryReport, WriteBatch, WriteOptions};
pub use error::{Error, Result};
