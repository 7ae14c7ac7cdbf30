//! sled 0.34 (the stable release); `flush` is its durable write.

use std::path::Path;

use crate::error::BenchError;
use crate::store::{EngineSettings, Store};

pub(super) struct Sled {
    db: sled::Db,
}

fn error(operation: &'static str, error: sled::Error) -> BenchError {
    BenchError::Peer { engine: "sled", operation, message: error.to_string() }
}

pub(super) fn open(dir: &Path, settings: &EngineSettings) -> Result<Box<dyn Store>, BenchError> {
    let db = sled::Config::new().path(dir).cache_capacity(settings.cache_bytes).open().map_err(|e| error("open", e))?;
    Ok(Box::new(Sled { db }))
}

impl Store for Sled {
    fn name(&self) -> String {
        "sled 0.34".into()
    }

    fn put(&mut self, key: &[u8], value: &[u8], sync: bool) -> Result<(), BenchError> {
        self.db.insert(key, value).map_err(|e| error("put", e))?;
        if sync {
            self.db.flush().map_err(|e| error("flush", e))?;
        }
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<usize>, BenchError> {
        Ok(self.db.get(key).map_err(|e| error("get", e))?.map(|value| value.len()))
    }

    fn delete(&mut self, key: &[u8], sync: bool) -> Result<(), BenchError> {
        self.db.remove(key).map_err(|e| error("delete", e))?;
        if sync {
            self.db.flush().map_err(|e| error("flush", e))?;
        }
        Ok(())
    }

    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, BenchError> {
        let mut read = 0;
        for entry in self.db.range(start..).take(count) {
            std::hint::black_box(entry.map_err(|e| error("scan", e))?);
            read += 1;
        }
        Ok(read)
    }

    fn scan_all(&mut self) -> Result<usize, BenchError> {
        let mut read = 0;
        for entry in self.db.iter() {
            std::hint::black_box(entry.map_err(|e| error("scan", e))?);
            read += 1;
        }
        Ok(read)
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        self.db.flush().map(|_| ()).map_err(|e| error("close", e))
    }
}
