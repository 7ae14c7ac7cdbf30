//! redb: one write transaction per put, durability `None` unless the put is synced
//! (`Immediate`, its durable commit).

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use crate::error::BenchError;
use crate::store::{EngineSettings, Store};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

pub(super) struct Redb {
    db: Database,
}

fn error(operation: &'static str, error: impl std::fmt::Display) -> BenchError {
    BenchError::Peer { engine: "redb", operation, message: error.to_string() }
}

pub(super) fn open(dir: &Path, settings: &EngineSettings) -> Result<Box<dyn Store>, BenchError> {
    let db = Database::builder()
        .set_cache_size(settings.cache_bytes as usize)
        .create(dir.join("bench.redb"))
        .map_err(|e| error("open", e))?;
    let store = Redb { db };
    store.write(true, |table| table.map(|_| ()).map_err(|e| error("table", e)))?;
    Ok(Box::new(store))
}

impl Redb {
    fn write(
        &self,
        sync: bool,
        body: impl FnOnce(Result<redb::Table<'_, &'static [u8], &'static [u8]>, redb::TableError>) -> Result<(), BenchError>,
    ) -> Result<(), BenchError> {
        let mut transaction = self.db.begin_write().map_err(|e| error("begin", e))?;
        transaction
            .set_durability(if sync { Durability::Immediate } else { Durability::None })
            .map_err(|e| error("durability", e))?;
        body(transaction.open_table(TABLE))?;
        transaction.commit().map_err(|e| error("commit", e))
    }
}

impl Store for Redb {
    fn name(&self) -> String {
        "redb 4".into()
    }

    fn put(&mut self, key: &[u8], value: &[u8], sync: bool) -> Result<(), BenchError> {
        self.write(sync, |table| {
            table.map_err(|e| error("table", e))?.insert(key, value).map_err(|e| error("put", e))?;
            Ok(())
        })
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<usize>, BenchError> {
        let transaction = self.db.begin_read().map_err(|e| error("begin", e))?;
        let table = transaction.open_table(TABLE).map_err(|e| error("table", e))?;
        Ok(table.get(key).map_err(|e| error("get", e))?.map(|value| value.value().len()))
    }

    fn delete(&mut self, key: &[u8], sync: bool) -> Result<(), BenchError> {
        self.write(sync, |table| {
            table.map_err(|e| error("table", e))?.remove(key).map_err(|e| error("delete", e))?;
            Ok(())
        })
    }

    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, BenchError> {
        let transaction = self.db.begin_read().map_err(|e| error("begin", e))?;
        let table = transaction.open_table(TABLE).map_err(|e| error("table", e))?;
        let mut read = 0;
        for entry in table.range(start..).map_err(|e| error("scan", e))?.take(count) {
            std::hint::black_box(entry.map_err(|e| error("scan", e))?);
            read += 1;
        }
        Ok(read)
    }

    fn scan_all(&mut self) -> Result<usize, BenchError> {
        let transaction = self.db.begin_read().map_err(|e| error("begin", e))?;
        let table = transaction.open_table(TABLE).map_err(|e| error("table", e))?;
        let mut read = 0;
        for entry in table.iter().map_err(|e| error("scan", e))? {
            std::hint::black_box(entry.map_err(|e| error("scan", e))?);
            read += 1;
        }
        Ok(read)
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        // Commits with durability None are lost unless an Immediate commit follows.
        self.write(true, |table| table.map(|_| ()).map_err(|e| error("table", e)))
    }
}
