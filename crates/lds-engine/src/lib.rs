//! The LDS engine: the key-value store (`Db`) on an LDS volume (SPEC.md).
//!
//! Modules form a graph without cycles, one concept each (a test checks the graph):
//! - `options`, `error`, `batch`, `memtable`, `retention`: data and rules, no I/O;
//! - `state`: what the threads share and its locks (a leaf);
//! - `heap`: giving freed memory back to the system when the worker goes idle (a leaf);
//! - `table`: packing entries into chunks, writing them, the cache of what was read,
//!   following log references;
//! - `version`: the levels of a version, the online map of slots, committing a change;
//! - `read`: point lookups and iterators over a consistent view;
//! - `compaction`: `pick` (a pure choice over a version) and `merge` (a narrow context);
//! - `flush`: a frozen memtable to level-0 chunks;
//! - `logs`: TRIAD-LOG's rules (when a flush writes log chunks, where the writer's ring
//!   starts, when the retained log calls for a level-0 merge);
//! - `worker`: scheduling the background work (it decides, `flush` and `compaction` do);
//! - `db`: the public store, its open (recovery) and write path. Nothing imports `db`.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

mod batch;
mod compaction;
mod db;
pub mod error;
mod flush;
mod heap;
mod hot;
mod logs;
mod memtable;
mod options;
mod pool;
mod read;
mod retention;
mod state;
mod table;
mod values;
mod version;
mod worker;

pub use batch::WriteBatch;
pub use db::{Db, RecoveryReport, Snapshot, Stats};
pub use error::{Error, RecoveryError, Result};
pub use options::{Options, WriteOptions, TECHNIQUES};
pub use read::iter::DbIterator;
