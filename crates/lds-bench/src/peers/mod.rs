//! The peers, each behind its cargo feature, driven through the same `Store` interface with
//! the same settings: write buffer, cache budget, file size, level sizes, bloom bits,
//! compression off, and each engine's own durable-write call for synced puts.

use std::path::Path;

#[cfg(feature = "fjall")]
mod fjall;
#[cfg(feature = "leveldb")]
mod leveldb;
#[cfg(feature = "redb")]
mod redb;
#[cfg(feature = "rocksdb")]
mod rocksdb;
#[cfg(feature = "sled")]
mod sled;

use crate::store::{EngineSettings, Store};

/// Every peer this crate knows, built in or not.
pub const KNOWN: [&str; 5] = ["rocksdb", "leveldb", "fjall", "sled", "redb"];

/// The peers built into this binary.
pub fn available() -> Vec<&'static str> {
    let built = [
        cfg!(feature = "rocksdb"),
        cfg!(feature = "leveldb"),
        cfg!(feature = "fjall"),
        cfg!(feature = "sled"),
        cfg!(feature = "redb"),
    ];
    KNOWN.iter().zip(built).filter(|(_, built)| *built).map(|(name, _)| *name).collect()
}

/// Opens peer `engine` in directory `dir` (created if missing).
pub fn open(engine: &str, dir: &Path, settings: &EngineSettings) -> Result<Box<dyn Store>, String> {
    std::fs::create_dir_all(dir).map_err(|error| format!("{}: cannot create: {error}", dir.display()))?;
    let _ = settings;
    match engine {
        #[cfg(feature = "rocksdb")]
        "rocksdb" => rocksdb::open(dir, settings),
        #[cfg(feature = "leveldb")]
        "leveldb" => leveldb::open(dir, settings),
        #[cfg(feature = "fjall")]
        "fjall" => fjall::open(dir, settings),
        #[cfg(feature = "sled")]
        "sled" => sled::open(dir, settings),
        #[cfg(feature = "redb")]
        "redb" => redb::open(dir, settings),
        other if KNOWN.contains(&other) => Err(format!(
            "engine '{other}' is not built into this binary: build with `--features {other}` (or `peers`); \
             tools/bench/run.sh does"
        )),
        other => Err(format!("unknown engine '{other}' (known: lds, {})", KNOWN.join(", "))),
    }
}

/// Empties a peer's directory for a fresh store.
pub fn wipe(dir: &Path) -> Result<(), String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|error| format!("{}: cannot empty: {error}", dir.display()))?;
    }
    Ok(())
}
