//! Block devices and pre-allocated image files, as the operating system opens them (SPEC.md
//! §2: what a flush guarantees): locks, the safety refusals of a writer's open, direct I/O,
//! mappings of the page cache and range flushes.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::block::{Access, AlignedBuffer, BlockDevice, DeviceError, PageCache, ReadAt};

/// What backs a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A raw block device.
    BlockDevice,
    /// A regular file holding the volume (pre-allocated).
    ImageFile,
}

/// How to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only, no lock taken (for probing a device that may not be a volume).
    ReadOnly,
    /// Read only with a shared lock: any number of readers at once; fails while a writer
    /// holds the volume.
    ReadOnlyLocked,
    /// Read and write with an exclusive lock: fails while any reader or writer holds it.
    ReadWrite,
}

/// An open device or image file.
#[derive(Debug)]
pub struct Device {
    file: File,
    path: PathBuf,
    len: u64,
    kind: DeviceKind,
    /// The device acknowledges writes from a cache it can lose on power failure, so a range
    /// flush must also flush that cache (SPEC.md §2.5).
    volatile_cache: bool,
    /// The read-only mapping iterators read through, made at the first such read.
    mapping: std::sync::OnceLock<Option<crate::mapped::Mapping>>,
    /// The read-only mapping lookups read through (`MADV_RANDOM`: a miss reads its page and
    /// no more), made at the first such read.
    point_mapping: std::sync::OnceLock<Option<crate::mapped::Mapping>>,
    /// The page whose `msync` flushes the write cache without writing back the whole device
    /// (`Device::flush_range`), made at the first such flush.
    cache_flush: std::sync::OnceLock<Option<crate::mapped::CacheFlush>>,
    /// A descriptor of the same block device opened with `O_DIRECT` (`Device::write_direct`)
    /// and its logical block size, made at the first such write; `None` where it cannot be.
    direct: std::sync::OnceLock<Option<(File, u64)>>,
    /// The same, opened for reading (`Device::read_bulk`).
    direct_read: std::sync::OnceLock<Option<(File, u64)>>,
}

/// Whether the block device `metadata` describes keeps a volatile write cache, from
/// `/sys/dev/block/MAJ:MIN/queue/write_cache` (a partition's queue is its disk's). Unknown
/// counts as volatile: durability must not rest on a guess.
fn volatile_write_cache(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    let device = metadata.rdev();
    let base = PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(device), libc::minor(device)));
    [base.join("queue/write_cache"), base.join("../queue/write_cache")]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .is_none_or(|mode| mode.trim() != "write through")
}

/// The logical and physical block sizes of the block device `metadata` describes, from
/// `/sys/dev/block/MAJ:MIN/queue/{logical,physical}_block_size` (a partition's queue is its
/// disk's), when the kernel says.
fn block_sizes(metadata: &std::fs::Metadata) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let device = metadata.rdev();
    let base = PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(device), libc::minor(device)));
    let read = |name: &str| {
        [base.join("queue").join(name), base.join("..").join("queue").join(name)]
            .iter()
            .find_map(|path| std::fs::read_to_string(path).ok())
            .and_then(|text| text.trim().parse::<u32>().ok())
    };
    Some((read("logical_block_size")?, read("physical_block_size")?))
}

/// How long `OpenMode::wait` waits for a lock at most, and how often it tries.
const LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(50);

fn lock(file: &File, path: &Path, exclusive: bool, wait: std::time::Duration) -> Result<(), DeviceError> {
    use rustix::fs::{flock, FlockOperation};
    let operation =
        if exclusive { FlockOperation::NonBlockingLockExclusive } else { FlockOperation::NonBlockingLockShared };
    let started = std::time::Instant::now();
    // Bounded by `wait`: a lock is polled, never waited on without a limit.
    loop {
        match flock(file, operation) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) if started.elapsed() < wait => std::thread::sleep(LOCK_POLL),
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(DeviceError::Locked { path: path.to_path_buf(), exclusive });
            }
            Err(errno) => {
                return Err(DeviceError::Open { path: path.to_path_buf(), source: std::io::Error::from(errno) });
            }
        }
    }
}

impl Device {
    /// Opens an existing block device or image file; fails at once when its lock is held.
    pub fn open(path: &Path, mode: OpenMode) -> Result<Self, DeviceError> {
        Self::open_waiting(path, mode, std::time::Duration::ZERO)
    }

    /// Opens an existing block device or image file, waiting at most `wait` for its lock.
    pub fn open_waiting(path: &Path, mode: OpenMode, wait: std::time::Duration) -> Result<Self, DeviceError> {
        let open_error = |source| DeviceError::Open { path: path.to_path_buf(), source };
        let metadata = std::fs::metadata(path).map_err(open_error)?;
        let kind = if metadata.file_type().is_block_device() {
            DeviceKind::BlockDevice
        } else if metadata.is_file() {
            DeviceKind::ImageFile
        } else {
            return Err(DeviceError::NotADevice { path: path.to_path_buf() });
        };
        let writable = mode == OpenMode::ReadWrite;
        let identity = crate::identity::identity_of(&metadata).map_err(open_error)?;
        let in_use = |by: String| DeviceError::InUse { path: path.to_path_buf(), by };
        if writable {
            if let Some(by) = crate::identity::in_use(&identity) {
                return Err(in_use(by));
            }
        }
        // A block device opened for writing is claimed with O_EXCL, as mkfs tools do: the
        // kernel refuses the claim while the device is mounted or held, and refuses a mount
        // while the claim lasts.
        let exclusive = if writable && kind == DeviceKind::BlockDevice { libc::O_EXCL } else { 0 };
        let mut file = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_CLOEXEC | exclusive)
            .open(path)
            .map_err(|source| match source.raw_os_error() {
                Some(libc::EBUSY) => in_use(
                    crate::identity::in_use(&identity)
                        .unwrap_or_else(|| "opened exclusively by the kernel or another program".into()),
                ),
                _ => open_error(source),
            })?;
        // What was judged is what was opened: the path is examined again through the
        // descriptor (`fstat`), so that a file or node swapped in between is not written, and
        // a writer's in-use check is repeated on the file opened.
        let opened =
            file.metadata().and_then(|metadata| crate::identity::identity_of(&metadata)).map_err(open_error)?;
        if !opened.same(&identity) {
            return Err(open_error(std::io::Error::other(
                "it was replaced by another file or device while being opened; run the command again",
            )));
        }
        if writable {
            if let Some(by) = crate::identity::in_use(&opened) {
                return Err(in_use(by));
            }
        }
        match mode {
            OpenMode::ReadOnly => {}
            OpenMode::ReadOnlyLocked => lock(&file, path, false, wait)?,
            OpenMode::ReadWrite => lock(&file, path, true, wait)?,
        }
        let len = file.seek(SeekFrom::End(0)).map_err(open_error)?;
        let volatile_cache = kind == DeviceKind::BlockDevice && volatile_write_cache(&metadata);
        Ok(Self {
            file,
            path: path.to_path_buf(),
            len,
            kind,
            volatile_cache,
            mapping: std::sync::OnceLock::new(),
            point_mapping: std::sync::OnceLock::new(),
            cache_flush: std::sync::OnceLock::new(),
            direct: std::sync::OnceLock::new(),
            direct_read: std::sync::OnceLock::new(),
        })
    }

    /// Creates a new image file of `len` bytes, pre-allocated on its file system (paper
    /// §3.6.2), and opens it for writing.
    pub fn create_image(path: &Path, len: u64) -> Result<Self, DeviceError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| DeviceError::Open { path: path.to_path_buf(), source })?;
        lock(&file, path, true, std::time::Duration::ZERO)?;
        let device = Self {
            file,
            path: path.to_path_buf(),
            len,
            kind: DeviceKind::ImageFile,
            volatile_cache: false,
            mapping: std::sync::OnceLock::new(),
            point_mapping: std::sync::OnceLock::new(),
            cache_flush: std::sync::OnceLock::new(),
            direct: std::sync::OnceLock::new(),
            direct_read: std::sync::OnceLock::new(),
        };
        device.allocate(len)?;
        Ok(device)
    }

    /// Pre-allocates an image file to `len` bytes (grows it if shorter).
    pub fn allocate(&self, len: u64) -> Result<(), DeviceError> {
        // Mode 0: allocate and extend the file, like posix_fallocate, without its fallback
        // of writing zeros on a file system that cannot allocate (that would not be a
        // pre-allocation the paper's §3.6.2 relies on).
        rustix::fs::fallocate(&self.file, rustix::fs::FallocateFlags::empty(), 0, len).map_err(|errno| {
            DeviceError::Allocate { path: self.path.clone(), len, source: std::io::Error::from(errno) }
        })
    }

    /// Sets the length of an image file (after `allocate`, or to shrink it).
    pub fn set_image_len(&mut self, len: u64) -> Result<(), DeviceError> {
        self.file.set_len(len).map_err(|source| DeviceError::Allocate { path: self.path.clone(), len, source })?;
        self.len = len;
        Ok(())
    }

    /// What the open descriptor names (`fstat`): the file or device actually opened, whatever
    /// its path names now.
    pub fn identity(&self) -> std::io::Result<crate::identity::Identity> {
        crate::identity::identity_of(&self.file.metadata()?)
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the device or file.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for a zero-length device.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A block device's logical block size (the smallest write it takes) and physical block
    /// size (the unit it writes atomically), when the kernel says; `None` for image files.
    pub fn block_sizes(&self) -> Option<(u32, u32)> {
        if self.kind != DeviceKind::BlockDevice {
            return None;
        }
        block_sizes(&self.file.metadata().ok()?)
    }

    /// Whether a range flush must also flush a volatile write cache (SPEC.md §2.5).
    pub fn has_volatile_cache(&self) -> bool {
        self.volatile_cache
    }

    /// Block device or image file.
    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    /// Reads exactly `buffer.len()` bytes at `offset`.
    pub fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        self.file.read_exact_at(buffer, offset).map_err(|source| self.read_error(offset, buffer.len(), source))
    }

    /// Reads `len` bytes at `offset` into a new buffer.
    pub fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        ReadAt::read_vec(self, offset, len)
    }

    /// Reads `len` bytes at `offset` into `into` (its contents replaced, its capacity reused)
    /// through a shared read-only mapping of the device (made at the first call): from the
    /// page cache with a copy and no system call. Falls back to `pread` when the device
    /// cannot be mapped or a mapped page cannot be read, so errors are those of `read_vec`.
    /// `read_vec_mapped` returns a new buffer.
    pub fn read_mapped(&self, offset: u64, len: u64, into: &mut Vec<u8>, access: Access) -> Result<(), DeviceError> {
        use std::os::fd::AsFd;
        let (mapping, random) = match access {
            Access::Run => (&self.mapping, false),
            Access::Point => (&self.point_mapping, true),
        };
        let mapping = mapping.get_or_init(|| crate::mapped::Mapping::new(self.file.as_fd(), self.len, random));
        if let (Some(mapping), Ok(size)) = (mapping, usize::try_from(len)) {
            if mapping.read_into(self.file.as_fd(), offset, size, into) {
                return Ok(());
            }
        }
        *into = self.read_vec(offset, len)?;
        Ok(())
    }

    /// A hint that `len` bytes at `offset` hold nothing anyone will read (a freed slot): their
    /// pages leave this process's mapping and the page cache, so that memory goes back to the
    /// system, and the next chunk written there takes pages just freed rather than new ones.
    /// Dirty pages stay (their write-back starts); nothing on the device changes.
    pub fn drop_cached(&self, offset: u64, len: u64) {
        for mapping in [&self.mapping, &self.point_mapping] {
            if let Some(Some(mapping)) = mapping.get() {
                mapping.forget(offset, len);
            }
        }
        let Ok(len) = std::num::NonZeroU64::try_from(len) else { return };
        // Only a hint: a device that refuses it keeps the pages.
        let _ = rustix::fs::fadvise(&self.file, offset, Some(len), rustix::fs::Advice::DontNeed);
    }

    /// Writes all of `bytes` at `offset`.
    pub fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        self.file.write_all_at(bytes, offset).map_err(|source| self.write_error(offset, bytes.len(), source))
    }

    /// Writes all of `bytes` at `offset` around the page cache, for a write the caller flushes
    /// at once (a synced append to the backup log): on a raw block device, when `offset` and
    /// the length are multiples of its logical block size, with `O_DIRECT` through a second
    /// descriptor, so that the flush after it has no page to write back and the write costs
    /// no page-cache copy and no buffer heads (the kernel writes back and drops any page of
    /// the range first: reads stay coherent). Otherwise, and on an image file, `write_at`.
    /// Durable only after a flush, as any write (SPEC.md §2.5).
    pub fn write_direct(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        let direct = self.direct.get_or_init(|| self.open_direct(true));
        let Some((file, _)) = direct
            .as_ref()
            .filter(|(_, block)| offset % block == 0 && bytes.len() as u64 % block == 0 && !bytes.is_empty())
        else {
            return self.write_at(offset, bytes);
        };
        // O_DIRECT wants its buffer aligned to the logical block size too (a page here).
        let mut aligned = AlignedBuffer::new(bytes.len());
        aligned.copy_from_slice(bytes);
        file.write_all_at(&aligned, offset).map_err(|source| self.write_error(offset, bytes.len(), source))
    }

    /// Reads `buffer.len()` bytes at `offset` for one pass over much of the device that
    /// nobody reads again soon (`fsck --deep`): on a raw block device, with the offset, the
    /// length and the buffer aligned to its logical block size (`AlignedBuffer`), with
    /// `O_DIRECT`, so the bytes land in `buffer` without a page-cache copy and evict nothing
    /// (the kernel writes back any dirty page of the range first: reads stay coherent).
    /// Otherwise, and on an image file, `read_at`.
    pub fn read_bulk(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        let direct = self.direct_read.get_or_init(|| self.open_direct(false));
        let aligned = |block: u64| {
            offset % block == 0
                && buffer.len() as u64 % block == 0
                && !buffer.is_empty()
                && buffer.as_ptr().align_offset(AlignedBuffer::ALIGN) == 0
        };
        match direct.as_ref().filter(|(_, block)| aligned(*block)) {
            Some((file, _)) => match file.read_exact_at(buffer, offset) {
                // An alignment the device wants beyond its logical block size.
                Err(error) if error.raw_os_error() == Some(libc::EINVAL) => self.read_at(offset, buffer),
                result => result.map_err(|source| self.read_error(offset, buffer.len(), source)),
            },
            None => self.read_at(offset, buffer),
        }
    }

    /// The `O_DIRECT` descriptor of a raw block device (for writing or for reading) and its
    /// logical block size.
    fn open_direct(&self, write: bool) -> Option<(File, u64)> {
        if self.kind != DeviceKind::BlockDevice {
            return None;
        }
        let (logical, _) = self.block_sizes()?;
        // The same device as `self.file` even if its path was replaced since.
        let path = PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()));
        let file = OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_CLOEXEC | libc::O_DIRECT)
            .open(path)
            .ok()?;
        Some((file, u64::from(logical).max(1)))
    }

    fn read_error(&self, offset: u64, len: usize, source: std::io::Error) -> DeviceError {
        DeviceError::Read { path: self.path.clone(), offset, len: len as u64, source }
    }

    fn write_error(&self, offset: u64, len: usize, source: std::io::Error) -> DeviceError {
        DeviceError::Write { path: self.path.clone(), offset, len: len as u64, source }
    }

    /// Makes the completed writes in `[offset, offset + len)` durable (SPEC.md §2.5, paper
    /// §3.5). On a raw block device: `sync_file_range` with WAIT_BEFORE, WRITE and WAIT_AFTER,
    /// which writes back just that range and waits; then, when the device has a volatile
    /// write cache, a flush of that cache which writes back nothing else (`flush_cache`). On
    /// an image file `fdatasync`, since the file system's own metadata must be persisted too
    /// (paper §3.6.2).
    pub fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.kind == DeviceKind::ImageFile {
            return self.flush();
        }
        self.write_back(offset, len)?;
        self.flush_cache()
    }

    /// Makes every completed write outside `[offset, offset + len)` durable and leaves the
    /// dirty pages inside it in the page cache (SPEC.md §2.5: a commit does not write the
    /// backup log's buffered appends back). On a raw block device: `sync_file_range` of the
    /// parts before and after the range, then a flush of a volatile write cache; on an image
    /// file `fdatasync`.
    pub fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.kind == DeviceKind::ImageFile {
            return self.flush();
        }
        let end = offset.saturating_add(len).min(self.len);
        self.write_back(0, offset.min(self.len))?;
        self.write_back(end, self.len - end)?;
        self.flush_cache()
    }

    /// Writes back the dirty pages of `[offset, offset + len)` and waits for them
    /// (`sync_file_range` with WAIT_BEFORE, WRITE and WAIT_AFTER: the write-back `fsync` does,
    /// for that range alone). Nothing for an empty range.
    fn write_back(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        // A length of 0 would mean "to the end of the device".
        if len == 0 {
            return Ok(());
        }
        let error = |source| DeviceError::Flush { path: self.path.clone(), source };
        let (Ok(offset), Ok(len)) = (libc::off64_t::try_from(offset), libc::off64_t::try_from(len)) else {
            return Err(error(std::io::Error::from_raw_os_error(libc::EOVERFLOW)));
        };
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // rustix (used for every other system call here) has no sync_file_range: libc it is.
        #[expect(unsafe_code, reason = "sync_file_range on an owned, open descriptor; rustix lacks it")]
        // SAFETY: the descriptor is valid for the lifetime of `self.file`; the call has no
        // memory effects.
        let result = unsafe { libc::sync_file_range(self.file.as_raw_fd(), offset, len, flags) };
        if result != 0 {
            return Err(error(std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Flushes a block device's volatile write cache, so that every write completed before
    /// is durable, without writing back the device's other dirty pages: `msync(MS_SYNC)` of
    /// one mapped page, which fsyncs that page's range (`crate::mapped::CacheFlush`). Nothing
    /// on a device without a volatile cache; `fdatasync` where the page cannot be mapped.
    fn flush_cache(&self) -> Result<(), DeviceError> {
        if !self.volatile_cache {
            return Ok(());
        }
        use std::os::fd::AsFd;
        match self.cache_flush.get_or_init(|| crate::mapped::CacheFlush::new(self.file.as_fd())) {
            Some(page) => page.flush().map_err(|source| DeviceError::Flush { path: self.path.clone(), source }),
            None => self.flush(),
        }
    }

    /// Makes every completed write durable (SPEC.md §2.5): `fdatasync`, which on a block
    /// device also flushes the device's write cache.
    pub fn flush(&self) -> Result<(), DeviceError> {
        self.file.sync_data().map_err(|source| DeviceError::Flush { path: self.path.clone(), source })
    }

    /// As `read_mapped`, into a new buffer.
    pub fn read_vec_mapped(&self, offset: u64, len: u64, access: Access) -> Result<Vec<u8>, DeviceError> {
        let mut bytes = Vec::new();
        self.read_mapped(offset, len, &mut bytes, access)?;
        Ok(bytes)
    }
}

impl ReadAt for Device {
    fn name(&self) -> &Path {
        &self.path
    }
    fn len(&self) -> u64 {
        Device::len(self)
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        Device::read_at(self, offset, buffer)
    }
    fn read_bulk(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        Device::read_bulk(self, offset, buffer)
    }
}

impl BlockDevice for Device {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        Device::write_at(self, offset, bytes)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        Device::flush(self)
    }
    fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        Device::flush_range(self, offset, len)
    }
    fn page_cache(&self) -> Option<&dyn PageCache> {
        Some(self)
    }
}

impl PageCache for Device {
    fn write_direct(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        Device::write_direct(self, offset, bytes)
    }
    fn read_mapped(&self, offset: u64, len: u64, into: &mut Vec<u8>, access: Access) -> Result<(), DeviceError> {
        Device::read_mapped(self, offset, len, into, access)
    }
    fn drop_cached(&self, offset: u64, len: u64) {
        Device::drop_cached(self, offset, len);
    }
    fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        Device::flush_except(self, offset, len)
    }
}
