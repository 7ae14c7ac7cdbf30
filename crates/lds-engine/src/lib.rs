//! The LDS engine: the key-value store (`Db`) on an LDS volume (SPEC.md).
//!
//! Modules form a graph without cycles, one concept each, and so do the top-level modules
//! (a test checks both: `cargo test -p lds-fixtures --test structure`). From the bottom up:
//! - `options`, `error`, `batch`, `memtable`, `retention`, `heap`, `hot`, `pool`: data and
//!   rules, no I/O;
//! - `table` (packing entries into chunks, the cache of what was read, following log
//!   references), `version` (the levels, the version readers see) and `compaction` (what to
//!   compact and the merge itself, through a narrow context): reads of the device at most,
//!   no shared state;
//! - `state`: what the threads share and its locks;
//! - on it: `slots` (the online map), `logs` (TRIAD-LOG's rules: when a flush writes log
//!   chunks, where the writer's ring starts, when the retained log calls for a level-0
//!   merge), `commit` (chunks into new slots, a change through the version log), `values`
//!   (value chunks), `compact` (a compaction run on the store, step by step), `flush` (a
//!   frozen memtable to level-0 chunks), `read` (point lookups and iterators over a
//!   consistent view);
//! - `worker`: scheduling the background work (it decides, `flush` and `compact` do);
//! - `db`: the public store, its open (recovery) and write path. Nothing imports `db`.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

mod batch;
mod commit;
mod compact;
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
mod slots;
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
