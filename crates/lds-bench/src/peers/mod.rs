//! The peers, each behind its cargo feature, driven through the same `Store` interface with
//! the same settings: write buffer, cache budget, file size, level sizes, bloom bits,
//! compression off, and each engine's own durable-write call for synced puts.

use std::path::Path;

use crate::error::BenchError;

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
pub const KNOWN: [&str; 7] = ["rocksdb", "leveldb", "fjall", "sled", "redb", "rocksdb-blob", "fjall-blob"];

/// The peers built into this binary.
pub fn available() -> Vec<&'static str> {
    let built = [
        cfg!(feature = "rocksdb"),
        cfg!(feature = "leveldb"),
        cfg!(feature = "fjall"),
        cfg!(feature = "sled"),
        cfg!(feature = "redb"),
        cfg!(feature = "rocksdb"),
        cfg!(feature = "fjall"),
    ];
    KNOWN.iter().zip(built).filter(|(_, built)| *built).map(|(name, _)| *name).collect()
}

/// Opens peer `engine` in directory `dir`. `fresh` empties the directory first (`wipe`); a
/// directory that does not exist is created. The marker that lets the next run empty the
/// directory is written only into a directory made here (fresh or created), never into one
/// that already held something: a directory of someone's data must not become "ours" by
/// being opened once (docs/safety.md). A directory that holds files but not the marker is
/// refused unless `force`, fresh or not: the peer would write its own files among them.
pub fn open(
    engine: &str,
    dir: &Path,
    settings: &EngineSettings,
    fresh: bool,
    force: bool,
) -> Result<Box<dyn Store>, BenchError> {
    // The engine is known before the directory is touched.
    if !available().contains(&engine) {
        return Err(if KNOWN.contains(&engine) {
            BenchError::NotBuilt(engine.to_string())
        } else {
            BenchError::UnknownEngine { name: engine.to_string(), known: KNOWN.join(", ") }
        });
    }
    if fresh {
        wipe(dir, force)?;
    } else {
        refuse_foreign(dir, force)?;
    }
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(BenchError::file(dir, "cannot create"))?;
        std::fs::write(dir.join(MARKER), b"made by lds bench; the next run empties this directory\n")
            .map_err(BenchError::file(&dir.join(MARKER), "cannot write"))?;
    }
    let _ = settings;
    let store = match engine {
        #[cfg(feature = "rocksdb")]
        "rocksdb" => rocksdb::open(dir, settings, false),
        #[cfg(feature = "rocksdb")]
        "rocksdb-blob" => rocksdb::open(dir, settings, true),
        #[cfg(feature = "fjall")]
        "fjall-blob" => fjall::open(dir, settings, true),
        #[cfg(feature = "leveldb")]
        "leveldb" => leveldb::open(dir, settings),
        #[cfg(feature = "fjall")]
        "fjall" => fjall::open(dir, settings, false),
        #[cfg(feature = "sled")]
        "sled" => sled::open(dir, settings),
        #[cfg(feature = "redb")]
        "redb" => redb::open(dir, settings),
        other => Err(BenchError::NotBuilt(other.to_string())),
    }?;
    Ok(Box::new(InDir { store, dir: dir.to_path_buf() }))
}

/// A peer and its directory, whose files' allocated blocks are its space.
struct InDir {
    store: Box<dyn Store>,
    dir: std::path::PathBuf,
}

/// Allocated bytes of the files under `dir`.
fn allocated(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(metadata) if metadata.is_dir() => allocated(&entry.path()),
            Ok(metadata) => metadata.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

impl Store for InDir {
    fn name(&self) -> String {
        self.store.name()
    }
    fn put(&mut self, key: &[u8], value: &[u8], sync: bool) -> Result<(), BenchError> {
        self.store.put(key, value, sync)
    }
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>, BenchError> {
        self.store.get(key)
    }
    fn delete(&mut self, key: &[u8], sync: bool) -> Result<(), BenchError> {
        self.store.delete(key, sync)
    }
    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, BenchError> {
        self.store.scan(start, count)
    }
    fn scan_all(&mut self) -> Result<usize, BenchError> {
        self.store.scan_all()
    }
    fn own_counters(&self) -> Option<(u64, u64)> {
        self.store.own_counters()
    }
    fn space_bytes(&self) -> Option<u64> {
        Some(allocated(&self.dir))
    }
    fn close(self: Box<Self>) -> Result<(), BenchError> {
        self.store.close()
    }
}

/// Whether `dir` may be emptied or written by a benchmark: it does not exist, is empty, or
/// holds the marker a benchmark left in it.
fn ours(dir: &Path) -> Result<bool, BenchError> {
    if !dir.exists() {
        return Ok(true);
    }
    let mut entries = std::fs::read_dir(dir).map_err(BenchError::file(dir, "cannot read"))?;
    // `symlink_metadata`: a marker that is a symlink (to anywhere) is not a marker.
    Ok(std::fs::symlink_metadata(dir.join(MARKER)).is_ok_and(|metadata| metadata.is_file()) || entries.next().is_none())
}

/// Refuses a directory of someone's data (not empty, no marker) unless `force`.
fn refuse_foreign(dir: &Path, force: bool) -> Result<(), BenchError> {
    if force || ours(dir)? {
        return Ok(());
    }
    Err(BenchError::NotOurs { path: dir.to_path_buf(), marker: MARKER })
}

/// Empties a peer's directory for a fresh store (removes it: `open` makes it again, with the
/// marker).
pub fn wipe(dir: &Path, force: bool) -> Result<(), BenchError> {
    if !dir.exists() {
        return Ok(());
    }
    // Only a directory a benchmark made (its marker inside), an empty one, or --force: never
    // a directory of someone's data (docs/safety.md).
    refuse_foreign(dir, force)?;
    std::fs::remove_dir_all(dir).map_err(BenchError::file(dir, "cannot empty"))
}

/// The file a benchmark leaves in each peer's directory, so that the next run may empty it.
pub const MARKER: &str = ".lds-bench";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_empty_or_marked_directory_is_emptied() {
        let dir = std::env::temp_dir().join(format!("lds-bench-peers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(std::fs::create_dir_all(&dir).is_ok());
        assert!(std::fs::write(dir.join("precious"), b"keep me").is_ok());
        // A marker that is a symlink is not a marker.
        assert!(std::os::unix::fs::symlink(dir.join("precious"), dir.join(MARKER)).is_ok());
        assert!(matches!(wipe(&dir, false), Err(BenchError::NotOurs { .. })));
        assert!(matches!(refuse_foreign(&dir, false), Err(BenchError::NotOurs { .. })));
        assert!(dir.join("precious").exists());
        // An engine this binary does not have touches nothing, fresh or not.
        let settings = crate::store::EngineSettings {
            write_buffer_bytes: 1 << 20,
            cache_bytes: 1 << 20,
            file_bytes: 1 << 20,
            level1_bytes: 1 << 20,
            bloom_bits: 10,
        };
        for fresh in [false, true] {
            assert!(open("nosuch", &dir, &settings, fresh, true).is_err());
            assert!(dir.join("precious").exists());
        }
        assert!(std::fs::remove_file(dir.join(MARKER)).is_ok());
        assert!(std::fs::write(dir.join(MARKER), b"").is_ok());
        assert!(wipe(&dir, false).is_ok());
        assert!(!dir.exists());
    }
}
