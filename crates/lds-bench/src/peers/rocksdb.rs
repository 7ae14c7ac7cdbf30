//! RocksDB through the `rocksdb` crate (bundled build, compression off).

use std::path::Path;

use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, WriteOptions, DB};

use crate::error::BenchError;
use crate::store::{EngineSettings, Store};

pub(super) struct Rocks {
    db: DB,
    sync: WriteOptions,
    nosync: WriteOptions,
    blob: bool,
}

fn error(operation: &'static str, error: rocksdb::Error) -> BenchError {
    BenchError::Peer { engine: "rocksdb", operation, message: error.to_string() }
}

/// `blob`: BlobDB (`enable_blob_files`): values of 1 KiB or more in blob files, with blob
/// garbage collection on (the same threshold as LDS's kv-separation).
pub(super) fn open(dir: &Path, settings: &EngineSettings, blob: bool) -> Result<Box<dyn Store>, BenchError> {
    let mut options = Options::default();
    if blob {
        options.set_enable_blob_files(true);
        options.set_min_blob_size(1024);
        options.set_enable_blob_gc(true);
        options.set_blob_file_size(settings.file_bytes);
    }
    options.create_if_missing(true);
    options.set_write_buffer_size(settings.write_buffer_bytes as usize);
    options.set_compression_type(DBCompressionType::None);
    options.set_target_file_size_base(settings.file_bytes);
    options.set_max_bytes_for_level_base(settings.level1_bytes);
    options.set_max_bytes_for_level_multiplier(10.0);
    options.set_level_zero_file_num_compaction_trigger(4);
    options.set_level_zero_stop_writes_trigger(12);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&Cache::new_lru_cache(settings.cache_bytes as usize));
    table.set_bloom_filter(f64::from(settings.bloom_bits), false);
    table.set_block_size(4096);
    options.set_block_based_table_factory(&table);
    let db = DB::open(&options, dir).map_err(|e| error("open", e))?;
    let mut sync = WriteOptions::default();
    sync.set_sync(true);
    Ok(Box::new(Rocks { db, sync, nosync: WriteOptions::default(), blob }))
}

impl Store for Rocks {
    fn name(&self) -> String {
        let blob = if self.blob { ", BlobDB" } else { "" };
        format!("rocksdb (rust-rocksdb 0.25, bundled{blob})")
    }

    fn put(&mut self, key: &[u8], value: &[u8], sync: bool) -> Result<(), BenchError> {
        let options = if sync { &self.sync } else { &self.nosync };
        self.db.put_opt(key, value, options).map_err(|e| error("put", e))
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<usize>, BenchError> {
        Ok(self.db.get_pinned(key).map_err(|e| error("get", e))?.map(|value| value.len()))
    }

    fn delete(&mut self, key: &[u8], sync: bool) -> Result<(), BenchError> {
        let options = if sync { &self.sync } else { &self.nosync };
        self.db.delete_opt(key, options).map_err(|e| error("delete", e))
    }

    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, BenchError> {
        let mut iterator = self.db.raw_iterator();
        iterator.seek(start);
        let mut read = 0;
        while read < count && iterator.valid() {
            std::hint::black_box((iterator.key(), iterator.value()));
            read += 1;
            iterator.next();
        }
        iterator.status().map_err(|e| error("scan", e))?;
        Ok(read)
    }

    fn scan_all(&mut self) -> Result<usize, BenchError> {
        let mut iterator = self.db.raw_iterator();
        iterator.seek_to_first();
        let mut read = 0;
        while iterator.valid() {
            std::hint::black_box((iterator.key(), iterator.value()));
            read += 1;
            iterator.next();
        }
        iterator.status().map_err(|e| error("scan", e))?;
        Ok(read)
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        self.db.flush_wal(true).map_err(|e| error("close", e))
    }
}
