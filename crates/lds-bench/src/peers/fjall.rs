//! fjall (compression off: built without its lz4 feature).

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use crate::error::BenchError;
use crate::store::{EngineSettings, Store};

pub(super) struct Fjall {
    db: Database,
    keyspace: Keyspace,
    blob: bool,
}

fn error(operation: &'static str, error: fjall::Error) -> BenchError {
    BenchError::Peer { engine: "fjall", operation, message: error.to_string() }
}

/// `blob`: key-value separation (values of 1 KiB or more in blob files, uncompressed).
pub(super) fn open(dir: &Path, settings: &EngineSettings, blob: bool) -> Result<Box<dyn Store>, BenchError> {
    let db = Database::builder(dir).cache_size(settings.cache_bytes).open().map_err(|e| error("open", e))?;
    let buffer = settings.write_buffer_bytes;
    let separation = blob.then(|| {
        fjall::KvSeparationOptions::default().separation_threshold(1024).compression(fjall::CompressionType::None)
    });
    let keyspace = db
        .keyspace("bench", || KeyspaceCreateOptions::default().max_memtable_size(buffer).with_kv_separation(separation))
        .map_err(|e| error("open keyspace", e))?;
    Ok(Box::new(Fjall { db, keyspace, blob }))
}

impl Store for Fjall {
    fn name(&self) -> String {
        if self.blob {
            "fjall 3, kv separation".into()
        } else {
            "fjall 3".into()
        }
    }

    fn put(&mut self, key: &[u8], value: &[u8], sync: bool) -> Result<(), BenchError> {
        self.keyspace.insert(key, value).map_err(|e| error("put", e))?;
        if sync {
            self.db.persist(PersistMode::SyncAll).map_err(|e| error("persist", e))?;
        }
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<usize>, BenchError> {
        Ok(self.keyspace.get(key).map_err(|e| error("get", e))?.map(|value| value.len()))
    }

    fn delete(&mut self, key: &[u8], sync: bool) -> Result<(), BenchError> {
        self.keyspace.remove(key).map_err(|e| error("delete", e))?;
        if sync {
            self.db.persist(PersistMode::SyncAll).map_err(|e| error("persist", e))?;
        }
        Ok(())
    }

    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, BenchError> {
        let mut read = 0;
        for guard in self.keyspace.range(start..).take(count) {
            std::hint::black_box(guard.into_inner().map_err(|e| error("scan", e))?);
            read += 1;
        }
        Ok(read)
    }

    fn scan_all(&mut self) -> Result<usize, BenchError> {
        let mut read = 0;
        for guard in self.keyspace.iter() {
            std::hint::black_box(guard.into_inner().map_err(|e| error("scan", e))?);
            read += 1;
        }
        Ok(read)
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        self.db.persist(PersistMode::SyncAll).map_err(|e| error("close", e))
    }
}
