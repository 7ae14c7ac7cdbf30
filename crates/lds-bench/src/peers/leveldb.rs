//! LevelDB 1.22 through `leveldb-sys` (its C API), compression off.

#![expect(unsafe_code, reason = "LevelDB has only a C API")]

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr;

use leveldb_sys::*;

use crate::error::BenchError;
use crate::store::{EngineSettings, Store};

pub(super) struct LevelDb {
    db: *mut leveldb_t,
    options: *mut leveldb_options_t,
    cache: *mut leveldb_cache_t,
    filter: *mut leveldb_filterpolicy_t,
    read: *mut leveldb_readoptions_t,
    sync: *mut leveldb_writeoptions_t,
    nosync: *mut leveldb_writeoptions_t,
}

/// Takes an error string LevelDB allocated, if any.
///
/// # Safety
/// `error` is null or a string allocated by LevelDB that nothing else frees.
unsafe fn check(operation: &'static str, error: *mut c_char) -> Result<(), BenchError> {
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: per the contract, a NUL-terminated string from LevelDB; freed once, here.
    let message = unsafe {
        let message = CStr::from_ptr(error).to_string_lossy().into_owned();
        leveldb_free(error.cast::<c_void>());
        message
    };
    Err(BenchError::Peer { engine: "leveldb", operation, message })
}

pub(super) fn open(dir: &Path, settings: &EngineSettings) -> Result<Box<dyn Store>, BenchError> {
    let name =
        CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| BenchError::NulInPath { engine: "leveldb" })?;
    // SAFETY: every object is created here, configured through the C API and owned by the
    // returned store, which destroys each exactly once in Drop.
    unsafe {
        let options = leveldb_options_create();
        leveldb_options_set_create_if_missing(options, 1);
        leveldb_options_set_write_buffer_size(options, settings.write_buffer_bytes as usize);
        leveldb_options_set_compression(options, Compression::No);
        leveldb_options_set_max_open_files(options, 10_000);
        leveldb_options_set_block_size(options, 4096);
        let cache = leveldb_cache_create_lru(settings.cache_bytes as usize);
        leveldb_options_set_cache(options, cache);
        let filter = leveldb_filterpolicy_create_bloom(settings.bloom_bits as i32);
        leveldb_options_set_filter_policy(options, filter);
        let read = leveldb_readoptions_create();
        let sync = leveldb_writeoptions_create();
        leveldb_writeoptions_set_sync(sync, 1);
        let nosync = leveldb_writeoptions_create();
        let mut error = ptr::null_mut();
        let db = leveldb_open(options, name.as_ptr(), &mut error);
        let store = LevelDb { db, options, cache, filter, read, sync, nosync };
        check("open", error)?;
        Ok(Box::new(store))
    }
}

impl LevelDb {
    fn iterate(&mut self, start: Option<&[u8]>, count: usize) -> Result<usize, BenchError> {
        // SAFETY: the iterator is created from the open database, used only while valid, and
        // destroyed before return; key and value pointers are not kept past `next`.
        unsafe {
            let iterator = leveldb_create_iterator(self.db, self.read);
            match start {
                Some(start) => leveldb_iter_seek(iterator, start.as_ptr().cast(), start.len()),
                None => leveldb_iter_seek_to_first(iterator),
            }
            let mut read = 0;
            let (mut key_len, mut value_len) = (0usize, 0usize);
            while read < count && leveldb_iter_valid(iterator) != 0 {
                // The binding declares the length out-parameter const; LevelDB writes it.
                std::hint::black_box(leveldb_iter_key(iterator, ptr::addr_of_mut!(key_len).cast_const()));
                std::hint::black_box(leveldb_iter_value(iterator, ptr::addr_of_mut!(value_len).cast_const()));
                read += 1;
                leveldb_iter_next(iterator);
            }
            let mut error: *mut c_char = ptr::null_mut();
            leveldb_iter_get_error(iterator, ptr::addr_of_mut!(error).cast());
            leveldb_iter_destroy(iterator);
            check("scan", error)?;
            Ok(read)
        }
    }
}

impl Store for LevelDb {
    fn name(&self) -> String {
        "leveldb 1.22 (leveldb-sys 2.0.9)".into()
    }

    fn put(&mut self, key: &[u8], value: &[u8], sync: bool) -> Result<(), BenchError> {
        let mut error = ptr::null_mut();
        // SAFETY: the database is open; key and value outlive the call.
        unsafe {
            let options = if sync { self.sync } else { self.nosync };
            leveldb_put(
                self.db,
                options,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut error,
            );
            check("put", error)
        }
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<usize>, BenchError> {
        let mut error = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: the database is open; the returned value is LevelDB's allocation, freed once.
        unsafe {
            let value = leveldb_get(self.db, self.read, key.as_ptr().cast(), key.len(), &mut len, &mut error);
            check("get", error)?;
            if value.is_null() {
                return Ok(None);
            }
            leveldb_free(value.cast::<c_void>());
        }
        Ok(Some(len))
    }

    fn delete(&mut self, key: &[u8], sync: bool) -> Result<(), BenchError> {
        let mut error = ptr::null_mut();
        // SAFETY: the database is open; the key outlives the call.
        unsafe {
            let options = if sync { self.sync } else { self.nosync };
            leveldb_delete(self.db, options, key.as_ptr().cast(), key.len(), &mut error);
            check("delete", error)
        }
    }

    fn scan(&mut self, start: &[u8], count: usize) -> Result<usize, BenchError> {
        self.iterate(Some(start), count)
    }

    fn scan_all(&mut self) -> Result<usize, BenchError> {
        self.iterate(None, usize::MAX)
    }

    fn close(self: Box<Self>) -> Result<(), BenchError> {
        drop(self);
        Ok(())
    }
}

impl Drop for LevelDb {
    fn drop(&mut self) {
        // SAFETY: each object was created in `open` and is destroyed exactly once, the
        // database first.
        unsafe {
            if !self.db.is_null() {
                leveldb_close(self.db);
            }
            leveldb_writeoptions_destroy(self.nosync);
            leveldb_writeoptions_destroy(self.sync);
            leveldb_readoptions_destroy(self.read);
            leveldb_options_destroy(self.options);
            leveldb_filterpolicy_destroy(self.filter);
            leveldb_cache_destroy(self.cache);
        }
    }
}
