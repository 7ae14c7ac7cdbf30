//! The interface every engine is driven through, and LDS behind it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lds_engine::{Db, Options, WriteOptions};
use lds_volume::{BlockDevice, Device, DeviceError, OpenMode, PageCache, ReadAt};

use crate::error::BenchError;

/// The settings every engine gets the same way (SPEC-independent; the paper's defaults).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct EngineSettings {
    /// Memtable (write buffer) bytes.
    pub write_buffer_bytes: u64,
    /// Block cache bytes.
    pub cache_bytes: u64,
    /// Target SST or chunk size (LDS: the slot size the volume was formatted with).
    pub file_bytes: u64,
    /// Bytes level 1 may hold; each deeper level ten times more.
    pub level1_bytes: u64,
    /// Bloom filter bits per key.
    pub bloom_bits: u32,
}

/// One key-value engine under test. Errors are messages naming the engine and operation.
pub trait Store {
    /// The engine's name and version.
    fn name(&self) -> String;

    /// Puts one key; `sync` asks for the engine's durable write.
    fn put(&mut self, key: &[u8], value: &[u8], sync: bool) -> Result<(), BenchError>;
    /// The value of a key (its length), if present.
    fn get(&mut self, key: &[u8]) -> Result<Option<usize>, BenchError>;
    /// Deletes one key.
    fn delete(&mut self, key: &[u8], sync: bool) -> Result<(), BenchError>;
    /// Reads up to `count` entries from the first key at or after `start`; returns how many.
    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, BenchError>;
    /// Reads every entry in key order; returns how many.
    fn scan_all(&mut self) -> Result<usize, BenchError>;
    /// The engine's own count of device bytes written and flushes, when it keeps one.
    fn own_counters(&self) -> Option<(u64, u64)> {
        None
    }
    /// Write-throughput of slot-sized chunk writes as the engine saw them (bytes, seconds),
    /// when it keeps one.
    fn chunk_writes(&self) -> Option<(u64, f64)> {
        None
    }
    /// The engine's own counts of its background work (LDS: `Db::stats`), by name.
    fn engine_stats(&self) -> Option<Vec<(&'static str, u64)>> {
        None
    }
    /// Bytes the store occupies now: LDS its slots in use, a peer its files' allocated blocks.
    fn space_bytes(&self) -> Option<u64> {
        None
    }
    /// Closes cleanly (everything durable).
    fn close(self: Box<Self>) -> Result<(), BenchError>;
}

/// Sets one engine option by name (`lds bench --lds-option NAME=VALUE`): the options that
/// are not the same for every engine.
pub fn tune(options: &mut Options, name: &str, value: &str) -> Result<(), BenchError> {
    let number = || {
        value.parse::<u64>().map_err(|_| BenchError::NotANumber { name: name.to_string(), value: value.to_string() })
    };
    let switch = || match value {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(BenchError::NotASwitch { name: name.to_string(), value: value.to_string() }),
    };
    match name {
        "compaction_journal" => options.compaction_journal = switch()?,
        "dynamic_levels" => options.dynamic_levels = switch()?,
        "journal_min_input_slots" => options.journal_min_input_slots = number()?,
        "journal_every_outputs" => options.journal_every_outputs = number()? as usize,
        "level0_compaction_trigger" => options.level0_compaction_trigger = number()? as usize,
        "level0_stop_writes_trigger" => options.level0_stop_writes_trigger = number()? as usize,
        "technique" => *options = options.clone().with_techniques(value).map_err(BenchError::Techniques)?,
        "block_size" => options.block_size = number()? as usize,
        "pinned_levels" => options.pinned_levels = number()? as u8,
        "tail_cache_bytes" => options.tail_cache_bytes = number()? as usize,
        "search_threads" => options.search_threads = number()? as usize,
        "search_always_parallel" => options.search_always_parallel = number()? != 0,
        _ => return Err(BenchError::UnknownOption { name: name.to_string() }),
    }
    Ok(())
}

/// A device that counts what the engine asks of it.
#[derive(Debug)]
pub struct CountingDevice {
    inner: Device,
    chunk_bytes: u64,
    bytes_written: AtomicU64,
    flushes: AtomicU64,
    /// Bytes of chunk-sized writes since the last flush, and when the first began (ns).
    pending_chunk: AtomicU64,
    pending_since: AtomicU64,
    chunk_total: AtomicU64,
    chunk_nanos: AtomicU64,
    origin: Instant,
}

impl CountingDevice {
    /// Wraps an open device; writes of at least `chunk_bytes / 2` count as chunk writes.
    pub fn new(inner: Device, chunk_bytes: u64) -> Self {
        Self {
            inner,
            chunk_bytes,
            bytes_written: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            pending_chunk: AtomicU64::new(0),
            pending_since: AtomicU64::new(0),
            chunk_total: AtomicU64::new(0),
            chunk_nanos: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn settle_chunks(&self) {
        let bytes = self.pending_chunk.swap(0, Ordering::Relaxed);
        if bytes > 0 {
            let since = self.pending_since.load(Ordering::Relaxed);
            self.chunk_total.fetch_add(bytes, Ordering::Relaxed);
            self.chunk_nanos.fetch_add(self.now().saturating_sub(since), Ordering::Relaxed);
        }
    }
}

impl ReadAt for CountingDevice {
    fn name(&self) -> &std::path::Path {
        ReadAt::name(&self.inner)
    }

    fn len(&self) -> u64 {
        ReadAt::len(&self.inner)
    }

    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        ReadAt::read_at(&self.inner, offset, buffer)
    }
}

impl BlockDevice for CountingDevice {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        let started = self.now();
        BlockDevice::write_at(&self.inner, offset, bytes)?;
        self.bytes_written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if bytes.len() as u64 >= self.chunk_bytes / 2
            && self.pending_chunk.fetch_add(bytes.len() as u64, Ordering::Relaxed) == 0
        {
            self.pending_since.store(started, Ordering::Relaxed);
        }
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let result = BlockDevice::flush(&self.inner);
        self.settle_chunks();
        result
    }

    fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let result = BlockDevice::flush_range(&self.inner, offset, len);
        if len >= self.chunk_bytes / 2 {
            self.settle_chunks();
        }
        result
    }

    fn page_cache(&self) -> Option<&dyn PageCache> {
        Some(self)
    }
}

/// The device's own page-cache paths, so that the engine measured here runs as on the device
/// itself, with direct writes and range flushes counted as the plain ones are.
impl PageCache for CountingDevice {
    fn read_mapped(
        &self,
        offset: u64,
        len: u64,
        into: &mut Vec<u8>,
        access: lds_volume::Access,
    ) -> Result<(), DeviceError> {
        PageCache::read_mapped(&self.inner, offset, len, into, access)
    }

    fn drop_cached(&self, offset: u64, len: u64) {
        PageCache::drop_cached(&self.inner, offset, len);
    }

    fn write_direct(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        PageCache::write_direct(&self.inner, offset, bytes)?;
        self.bytes_written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        let result = PageCache::flush_except(&self.inner, offset, len);
        self.settle_chunks();
        result
    }
}

/// LDS on a formatted block device or image file.
pub struct LdsStore {
    db: Option<Db>,
    device: Arc<CountingDevice>,
    path: PathBuf,
    slot_size: u64,
}

impl LdsStore {
    /// Opens the formatted volume at `path` with the shared settings.
    pub fn open(
        path: &Path,
        settings: &EngineSettings,
        slot_size: u64,
        tuning: &[(String, String)],
    ) -> Result<Self, BenchError> {
        let device = Device::open(path, OpenMode::ReadWrite)?;
        let device = Arc::new(CountingDevice::new(device, slot_size));
        let mut options = Options {
            write_buffer_size: settings.write_buffer_bytes as usize,
            block_cache_bytes: settings.cache_bytes as usize,
            bloom_bits_per_key: settings.bloom_bits,
            level1_max_bytes: settings.level1_bytes,
            level_size_multiplier: 10,
            ..Options::default()
        };
        for (name, value) in tuning {
            tune(&mut options, name, value)?;
        }
        let shared: Arc<dyn BlockDevice> = device.clone();
        let (db, _) = Db::open_device(shared, path, options).map_err(BenchError::lds("open"))?;
        Ok(Self { db: Some(db), device, path: path.to_path_buf(), slot_size })
    }

    fn db(&self) -> &Db {
        self.db.as_ref().expect("open until close")
    }
}

impl Store for LdsStore {
    fn name(&self) -> String {
        format!("lds {} ({})", env!("CARGO_PKG_VERSION"), self.path.display())
    }

    fn put(&mut self, key: &[u8], value: &[u8], sync: bool) -> Result<(), BenchError> {
        self.db().put(key, value, WriteOptions { sync }).map_err(BenchError::lds("put"))
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<usize>, BenchError> {
        Ok(self.db().get(key).map_err(BenchError::lds("get"))?.map(|value| value.len()))
    }

    fn delete(&mut self, key: &[u8], sync: bool) -> Result<(), BenchError> {
        self.db().delete(key, WriteOptions { sync }).map_err(BenchError::lds("delete"))
    }

    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, BenchError> {
        // Borrowed entries, as the peers' raw iterators give them.
        let mut iterator = self.db().range(start, None).map_err(BenchError::lds("seek"))?;
        let mut read = 0;
        while read < count {
            match iterator.next_ref() {
                Some(entry) => std::hint::black_box(entry.map_err(BenchError::lds("next"))?),
                None => break,
            };
            read += 1;
        }
        Ok(read)
    }

    fn scan_all(&mut self) -> Result<usize, BenchError> {
        let mut iterator = self.db().iter().map_err(BenchError::lds("iterate"))?;
        let mut read = 0;
        while let Some(entry) = iterator.next_ref() {
            std::hint::black_box(entry.map_err(BenchError::lds("next"))?);
            read += 1;
        }
        Ok(read)
    }

    fn own_counters(&self) -> Option<(u64, u64)> {
        Some((self.device.bytes_written.load(Ordering::Relaxed), self.device.flushes.load(Ordering::Relaxed)))
    }

    fn chunk_writes(&self) -> Option<(u64, f64)> {
        let bytes = self.device.chunk_total.load(Ordering::Relaxed);
        (bytes > 0).then(|| (bytes, self.device.chunk_nanos.load(Ordering::Relaxed) as f64 / 1e9))
    }

    fn space_bytes(&self) -> Option<u64> {
        Some(self.db.as_ref()?.slots_in_use() * self.slot_size)
    }

    fn engine_stats(&self) -> Option<Vec<(&'static str, u64)>> {
        let stats = self.db.as_ref()?.stats();
        Some(vec![
            ("memtable_flushes", stats.memtable_flushes),
            ("trivial_moves", stats.trivial_moves),
            ("merges", stats.merges),
            ("journaled_merges", stats.journaled_merges),
            ("journal_records", stats.journal_records),
            ("merge_outputs", stats.merge_outputs),
            ("device_flushes", stats.device_flushes),
            ("compaction_device_flushes", stats.compaction_device_flushes),
            ("peak_slots_in_use", stats.peak_slots_in_use),
            ("level0_merges", stats.level0_merges),
            ("read_triggered_merges", stats.read_triggered_merges),
            ("merge_yields", stats.merge_yields),
            ("level0_chunks_merged", stats.level0_chunks_merged),
            ("hot_entries_held", stats.hot_entries_held),
            ("forest_moved_chunks", stats.forest_moved_chunks),
            ("parallel_searches", stats.parallel_searches),
            ("log_chunk_flushes", stats.log_chunk_flushes),
            ("log_references", stats.log_references),
            ("log_reads", stats.log_reads),
            ("log_pressure_merges", stats.log_pressure_merges),
            ("log_waits", stats.log_waits),
        ])
    }

    fn close(mut self: Box<Self>) -> Result<(), BenchError> {
        match self.db.take() {
            Some(db) => db.close().map_err(BenchError::lds("close")),
            None => Ok(()),
        }
    }
}
