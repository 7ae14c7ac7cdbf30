//! The LDS engine: devices, the key-value store (`Db`) and read-only volume access for the
//! tools.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

mod background;
mod compaction;
pub mod db;
pub mod device;
pub mod error;
pub mod fsck;
pub mod inspect;
mod memtable;
mod read;
mod retention;
pub mod signature;

pub use db::{Db, Options, RecoveryReport, Snapshot, WriteBatch, WriteOptions};
pub use error::{Error, Result};
pub use read::DbIterator;
