//! What a volume is read and written through (SPEC.md §2). `ReadAt` is the reading face of a
//! device, an image file or an image in memory: what the checker and the dump tools need.
//! `BlockDevice` adds positioned writes and the two flushes of SPEC.md §2.5: what the engine
//! and the tools that write need. `Device` (an open block device or image file) and
//! `Members` (a volume of several devices) are the real ones; the crash simulator's device
//! and the wrappers that count or record writes are others.
//!
//! A device that the kernel's page cache stands in front of offers `PageCache` too: a write
//! around that cache for an append flushed at once, reads through a mapping of it, dropping a
//! freed slot's pages, and a flush that leaves one range's dirty pages in it. They are
//! measured wins of the engine; each means what the plain operation means. Callers reach
//! them through the methods on `dyn BlockDevice`, which take the plain operation where a
//! device offers no `PageCache`: a wrapper that does not offer it (or offers only part of it)
//! is never bypassed, and forwards nothing it does not change.

use std::path::{Path, PathBuf};

/// An I/O failure, naming the device and the offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// Opening failed.
    #[error("{}: cannot open: {source}", path.display())]
    Open {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another process holds the volume: a writer, or (for a writer) any reader.
    #[error("{}: in use by another process ({})", path.display(), if *exclusive { "a reader or a writer holds it; writers need it alone" } else { "a writer holds it" })]
    Locked {
        /// The path.
        path: PathBuf,
        /// The lock wanted was the exclusive (writer's) one.
        exclusive: bool,
    },
    /// The kernel or another program uses the device or file: it is never opened for
    /// writing then (docs/safety.md).
    #[error("{}: {by}; refusing to write to it", path.display())]
    InUse {
        /// The path.
        path: PathBuf,
        /// What uses it ("mounted at /mnt", "attached to /dev/loop3", ...).
        by: String,
    },
    /// The path is neither a block device nor a regular file.
    #[error("{}: neither a block device nor a regular file", path.display())]
    NotADevice {
        /// The path.
        path: PathBuf,
    },
    /// A read failed or came short.
    #[error("{}: read of {len} bytes at offset {offset} failed: {source}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// Device offset.
        offset: u64,
        /// Bytes requested.
        len: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// A write failed.
    #[error("{}: write of {len} bytes at offset {offset} failed: {source}", path.display())]
    Write {
        /// The path.
        path: PathBuf,
        /// Device offset.
        offset: u64,
        /// Bytes written.
        len: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// A flush failed: the device state is unknown (SPEC.md §2.4).
    #[error("{}: flush failed, device state unknown: {source}", path.display())]
    Flush {
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Space could not be allocated for an image file.
    #[error("{}: cannot allocate {len} bytes: {source}", path.display())]
    Allocate {
        /// The path.
        path: PathBuf,
        /// Bytes requested.
        len: u64,
        /// The OS error.
        source: std::io::Error,
    },
}

/// How a read through the page cache will be followed, so that a device fetches from the
/// media what the reader needs: a lookup reads one block and moves on, so its miss should
/// read that block and not a read-ahead window (under memory pressure the window evicts the
/// pages other lookups need); an iterator reads on, so read-ahead serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A block or two of a lookup.
    Point,
    /// A run of blocks that the next reads follow.
    Run,
}

/// Positioned reads from a device, an image file or an image in memory.
pub trait ReadAt {
    /// The name errors give it (a device's path).
    fn name(&self) -> &Path;
    /// Bytes available.
    fn len(&self) -> u64;
    /// True when there are no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads exactly `buffer.len()` bytes at `offset`.
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError>;
    /// Reads `len` bytes at `offset` into a new buffer.
    fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        let size = usize::try_from(len).map_err(|_| DeviceError::Read {
            path: self.name().to_path_buf(),
            offset,
            len,
            source: std::io::Error::from_raw_os_error(libc::EOVERFLOW),
        })?;
        let mut buffer = vec![0u8; size];
        self.read_at(offset, &mut buffer)?;
        Ok(buffer)
    }
    /// Reads `buffer.len()` bytes at `offset` for one pass over much of the volume that
    /// nobody reads again soon (`fsck --deep`): a device may read it around its page cache
    /// (`Device::read_bulk`, into an `AlignedBuffer`). The same bytes as `read_at`, which this
    /// default is; only a device that reads otherwise, or routes to one that does, overrides
    /// it.
    fn read_bulk(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        self.read_at(offset, buffer)
    }
    /// Device `index` of the volume of several devices that this one presents as one address
    /// space (`Members`, SPEC.md §4.3): the first holds the volume's label copies, each other
    /// one label copies of its own, all outside that address space (`labels::read_labels`,
    /// `members::member_labels`). `None` for a device that is one device; a wrapper that
    /// presents the address space it wraps forwards it.
    fn member(&self, _index: usize) -> Option<&dyn ReadAt> {
        None
    }
}

/// What the engine needs of a device: positioned reads (`ReadAt`) and writes, and the two
/// flushes of SPEC.md §2.5. `Device` is the real one; the crash simulator provides another.
pub trait BlockDevice: ReadAt + Send + Sync {
    /// Writes all of `bytes` at `offset`.
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError>;
    /// Makes every completed write durable.
    fn flush(&self) -> Result<(), DeviceError>;
    /// Makes the completed writes in a range durable.
    fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError>;
    /// The page-cache operations this device offers (`Device`, `Members`, and wrappers that
    /// pass some of them on); `None`, the default, for a device that takes the plain ones.
    fn page_cache(&self) -> Option<&dyn PageCache> {
        None
    }
}

/// The operations of a device that the kernel's page cache stands in front of (module
/// docs). Each default is the plain operation, so that an implementation overrides only
/// what it does otherwise: a wrapper that records writes keeps `write_direct`'s default,
/// which goes through its own `write_at`.
pub trait PageCache: BlockDevice {
    /// Writes all of `bytes` at `offset`, for a write the caller flushes at once (a synced
    /// append to the backup log): a device may write it around its page cache
    /// (`Device::write_direct`). The same guarantees as `write_at`, which this default is.
    fn write_direct(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        self.write_at(offset, bytes)
    }
    /// Reads `len` bytes at `offset` into `into` (its contents replaced) for a lookup or an
    /// iterator (`access`): a device may serve it from a mapping of the page cache, reusing
    /// `into`'s capacity (`Device::read_mapped`). The same bytes as `read_vec`, which this
    /// default is.
    fn read_mapped(&self, offset: u64, len: u64, into: &mut Vec<u8>, _access: Access) -> Result<(), DeviceError> {
        *into = self.read_vec(offset, len)?;
        Ok(())
    }
    /// A hint that `len` bytes at `offset` hold nothing anyone will read (a freed slot): a
    /// device may drop them from memory (`Device::drop_cached`). This default keeps them.
    fn drop_cached(&self, _offset: u64, _len: u64) {}
    /// Makes every completed write outside `[offset, offset + len)` durable; those inside
    /// may or may not be (the engine's commits leave the backup log's buffered appends to
    /// its own flushes, SPEC.md §2.5). This default flushes everything.
    fn flush_except(&self, _offset: u64, _len: u64) -> Result<(), DeviceError> {
        self.flush()
    }
}

/// The page-cache operations on any device: through its `PageCache` where it offers one,
/// else the plain operation (what `PageCache`'s defaults do).
impl dyn BlockDevice + '_ {
    /// `PageCache::write_direct`, else `write_at`.
    pub fn write_direct(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        match self.page_cache() {
            Some(cache) => cache.write_direct(offset, bytes),
            None => self.write_at(offset, bytes),
        }
    }

    /// `PageCache::read_mapped`, else `read_vec`.
    pub fn read_mapped(&self, offset: u64, len: u64, into: &mut Vec<u8>, access: Access) -> Result<(), DeviceError> {
        match self.page_cache() {
            Some(cache) => cache.read_mapped(offset, len, into, access),
            None => {
                *into = self.read_vec(offset, len)?;
                Ok(())
            }
        }
    }

    /// `PageCache::drop_cached`, else nothing.
    pub fn drop_cached(&self, offset: u64, len: u64) {
        if let Some(cache) = self.page_cache() {
            cache.drop_cached(offset, len);
        }
    }

    /// `PageCache::flush_except`, else `flush`.
    pub fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        match self.page_cache() {
            Some(cache) => cache.flush_except(offset, len),
            None => self.flush(),
        }
    }
}

/// Reads `len` bytes at `offset` as far as the device allows, for the tools that work around
/// bad sectors (fsck, repair, salvage): where the whole read fails, each `sector` is read
/// alone, and the ones that fail are returned as zeros and listed by offset. Fails only when
/// every sector fails (the device itself is gone).
pub fn read_tolerant(
    device: &(impl ReadAt + ?Sized),
    offset: u64,
    len: u64,
    sector: u64,
) -> Result<(Vec<u8>, Vec<u64>), DeviceError> {
    let mut bytes = vec![0u8; len as usize];
    let unreadable = read_tolerant_into(device, offset, &mut bytes, sector)?;
    Ok((bytes, unreadable))
}

/// As [`read_tolerant`], into `buffer` (its whole length, through `ReadAt::read_bulk`):
/// returns the offsets of the sectors that cannot be read, which are left as zeros.
pub fn read_tolerant_into(
    device: &(impl ReadAt + ?Sized),
    offset: u64,
    buffer: &mut [u8],
    sector: u64,
) -> Result<Vec<u64>, DeviceError> {
    let first_error = match device.read_bulk(offset, buffer) {
        Ok(()) => return Ok(Vec::new()),
        Err(error) => error,
    };
    let sector = sector.max(1) as usize;
    let mut unreadable = Vec::new();
    for (index, piece) in buffer.chunks_mut(sector).enumerate() {
        let at = offset + (index * sector) as u64;
        match device.read_vec(at, piece.len() as u64) {
            Ok(read) => piece.copy_from_slice(&read),
            Err(_) => {
                piece.fill(0);
                unreadable.push(at);
            }
        }
    }
    if unreadable.len() == buffer.len().div_ceil(sector) {
        return Err(first_error);
    }
    Ok(unreadable)
}

/// A buffer whose bytes start at a page boundary, as `O_DIRECT` wants (`read_bulk`).
pub struct AlignedBuffer {
    storage: Vec<u8>,
    shift: usize,
    len: usize,
}

impl AlignedBuffer {
    /// The alignment: a page, a multiple of every logical block size Linux supports.
    pub const ALIGN: usize = 4096;

    /// `len` zero bytes.
    pub fn new(len: usize) -> Self {
        let storage = vec![0u8; len + Self::ALIGN];
        let shift = storage.as_ptr().align_offset(Self::ALIGN);
        Self { storage, shift, len }
    }
}

impl std::ops::Deref for AlignedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.shift..self.shift + self.len]
    }
}

impl std::ops::DerefMut for AlignedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.shift..self.shift + self.len]
    }
}

impl AsRef<[u8]> for AlignedBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// A volume image held in memory (tests, the crash simulator).
pub struct MemoryImage<'a>(pub &'a [u8]);

impl MemoryImage<'_> {
    /// The bytes of `[offset, offset + len)`, or the error a device gives for a read past its
    /// end (checked before anything is allocated: a length read from damaged input may be
    /// anything).
    fn bytes(&self, offset: u64, len: u64) -> Result<&[u8], DeviceError> {
        let start = usize::try_from(offset).ok();
        let end = start.and_then(|start| start.checked_add(usize::try_from(len).ok()?));
        match (start, end) {
            (Some(start), Some(end)) if end <= self.0.len() => Ok(&self.0[start..end]),
            _ => Err(DeviceError::Read {
                path: MEMORY_IMAGE.into(),
                offset,
                len,
                source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            }),
        }
    }
}

/// The name errors give a `MemoryImage`.
const MEMORY_IMAGE: &str = "memory image";

impl ReadAt for MemoryImage<'_> {
    fn name(&self) -> &Path {
        Path::new(MEMORY_IMAGE)
    }
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        buffer.copy_from_slice(self.bytes(offset, buffer.len() as u64)?);
        Ok(())
    }
    fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        Ok(self.bytes(offset, len)?.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A device in memory that notes which operations reached it.
    #[derive(Default)]
    struct Noted {
        bytes: Mutex<Vec<u8>>,
        calls: Mutex<Vec<&'static str>>,
        /// It offers `PageCache` (overriding every operation) rather than none.
        cached: bool,
    }

    impl Noted {
        fn note(&self, call: &'static str) {
            self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(call);
        }
        fn calls(&self) -> Vec<&'static str> {
            std::mem::take(&mut *self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
        }
    }

    impl ReadAt for Noted {
        fn name(&self) -> &Path {
            Path::new("noted")
        }
        fn len(&self) -> u64 {
            1 << 16
        }
        fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
            self.note("read_at");
            let bytes = self.bytes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let start = offset as usize;
            buffer.copy_from_slice(&bytes[start..start + buffer.len()]);
            Ok(())
        }
    }

    impl BlockDevice for Noted {
        fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
            self.note("write_at");
            let mut held = self.bytes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            held[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
            Ok(())
        }
        fn flush(&self) -> Result<(), DeviceError> {
            self.note("flush");
            Ok(())
        }
        fn flush_range(&self, _: u64, _: u64) -> Result<(), DeviceError> {
            self.note("flush_range");
            Ok(())
        }
        fn page_cache(&self) -> Option<&dyn PageCache> {
            self.cached.then_some(self as &dyn PageCache)
        }
    }

    impl PageCache for Noted {
        fn write_direct(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
            self.note("write_direct");
            self.write_at(offset, bytes)
        }
        fn read_mapped(&self, offset: u64, len: u64, into: &mut Vec<u8>, _: Access) -> Result<(), DeviceError> {
            self.note("read_mapped");
            *into = self.read_vec(offset, len)?;
            Ok(())
        }
        fn drop_cached(&self, _: u64, _: u64) {
            self.note("drop_cached");
        }
        fn flush_except(&self, _: u64, _: u64) -> Result<(), DeviceError> {
            self.note("flush_except");
            Ok(())
        }
    }

    /// A wrapper that offers nothing of `PageCache`: it writes through its own `write_at`.
    struct Counting<'a> {
        inner: &'a Noted,
        writes: Mutex<usize>,
    }

    impl ReadAt for Counting<'_> {
        fn name(&self) -> &Path {
            self.inner.name()
        }
        fn len(&self) -> u64 {
            self.inner.len()
        }
        fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
            self.inner.read_at(offset, buffer)
        }
    }

    impl BlockDevice for Counting<'_> {
        fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
            *self.writes.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
            self.inner.write_at(offset, bytes)
        }
        fn flush(&self) -> Result<(), DeviceError> {
            self.inner.flush()
        }
        fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
            self.inner.flush_range(offset, len)
        }
    }

    fn exercise(device: &dyn BlockDevice) {
        device.write_direct(512, &[7; 512]).unwrap_or_else(|error| panic!("{error}"));
        let mut into = vec![1, 2, 3];
        device.read_mapped(512, 4, &mut into, Access::Point).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(into, [7; 4]);
        device.drop_cached(0, 4096);
        device.flush_except(0, 4096).unwrap_or_else(|error| panic!("{error}"));
    }

    #[test]
    fn a_device_that_offers_page_cache_operations_serves_them() {
        let device = Noted { bytes: Mutex::new(vec![0; 1 << 16]), cached: true, ..Noted::default() };
        exercise(&device);
        assert_eq!(
            device.calls(),
            ["write_direct", "write_at", "read_mapped", "read_at", "drop_cached", "flush_except"]
        );
    }

    #[test]
    fn a_device_without_them_takes_the_plain_operations() {
        let device = Noted { bytes: Mutex::new(vec![0; 1 << 16]), cached: false, ..Noted::default() };
        exercise(&device);
        assert_eq!(device.calls(), ["write_at", "read_at", "flush"]);
    }

    #[test]
    fn a_wrapper_that_offers_none_is_never_bypassed() {
        let device = Noted { bytes: Mutex::new(vec![0; 1 << 16]), cached: true, ..Noted::default() };
        let wrapper = Counting { inner: &device, writes: Mutex::new(0) };
        exercise(&wrapper);
        assert_eq!(*wrapper.writes.lock().unwrap_or_else(std::sync::PoisonError::into_inner), 1);
        assert_eq!(device.calls(), ["write_at", "read_at", "flush"]);
    }

    #[test]
    fn a_memory_image_refuses_a_read_past_its_end_before_allocating() {
        let bytes = [5u8; 100];
        let image = MemoryImage(&bytes);
        assert_eq!(image.read_vec(90, 10).unwrap_or_default(), [5; 10]);
        let error = image.read_vec(90, u64::MAX / 2).expect_err("past the end");
        assert!(matches!(error, DeviceError::Read { offset: 90, .. }), "{error}");
        assert_eq!(
            error.to_string(),
            format!("memory image: read of {} bytes at offset 90 failed: unexpected end of file", u64::MAX / 2)
        );
        let mut buffer = [0u8; 20];
        assert!(matches!(image.read_at(90, &mut buffer), Err(DeviceError::Read { len: 20, .. })));
    }
}
