//! Reads through a shared, read-only mapping of a device: a read that finds its pages in the
//! page cache costs a copy, where `pread` adds a system call and a page-cache lookup per
//! block. The engine's lookups and iterators read their blocks this way; everything else
//! (recovery, compaction inputs, the checker) reads with `pread`.
//!
//! A mapped page that cannot be read (a media error, or an image file shortened under the
//! mapping) raises SIGBUS instead of returning an error. The handler installed here turns
//! that into an error: for a fault inside a registered mapping it maps a page of zeros over
//! the faulting page and counts the fault; the interrupted copy completes; the reader sees
//! the count change, discards the copy, maps the device back and reads with `pread`, which
//! returns the real error (or the data, for a transient fault). Faults anywhere else go to
//! the handler that was installed before (the standard library's stack-overflow guard) or
//! to the default action.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once, OnceLock};

/// Mappings that can be live at once; a device opened beyond that reads with `pread`.
const REGISTRY_LEN: usize = 64;

/// A registered mapping, as the signal handler sees it.
struct Registered {
    /// Start address; 0 for a free entry. Set last, cleared first.
    base: AtomicUsize,
    len: AtomicUsize,
    /// Faults handled in the mapping (only grows).
    faults: AtomicU64,
    /// Pages of zeros mapped over the device and not yet mapped back.
    zeroed: AtomicUsize,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE: Registered = Registered {
    base: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    faults: AtomicU64::new(0),
    zeroed: AtomicUsize::new(0),
};

static REGISTRY: [Registered; REGISTRY_LEN] = [FREE; REGISTRY_LEN];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static INSTALL: Once = Once::new();
/// The SIGBUS disposition before ours; `None` when ours could not be installed.
static PREVIOUS: OnceLock<Option<libc::sigaction>> = OnceLock::new();

/// A shared read-only mapping of a whole device, registered with the SIGBUS handler.
pub(crate) struct Mapping {
    base: usize,
    len: usize,
    entry: usize,
    /// Mapped for point reads: `MADV_RANDOM`, so that a page fault reads that page and not
    /// the read-around window (up to 128 KiB) the kernel reads for a default mapping.
    random: bool,
    /// Serializes mapping the device back after faults.
    restoring: Mutex<()>,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Mapping").field("len", &self.len).finish()
    }
}

impl Mapping {
    /// Maps `len` bytes of `file` for reading; `None` when the mapping, the handler or a
    /// registry entry is not to be had (the reads then use `pread`).
    pub(crate) fn new(file: BorrowedFd<'_>, len: u64, random: bool) -> Option<Self> {
        let len = usize::try_from(len).ok().filter(|&len| len > 0)?;
        install();
        PREVIOUS.get().copied().flatten()?;
        // SAFETY: a fresh mapping at an address the kernel picks, of a file we hold open;
        // nothing else refers to the range.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return None;
        }
        let base = base as usize;
        if random {
            advise_random(base, len);
        }
        for (entry, registered) in REGISTRY.iter().enumerate() {
            // Claim a free entry with a placeholder address, fill it in, then publish it.
            if registered.base.compare_exchange(0, usize::MAX, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                registered.len.store(len, Ordering::Release);
                registered.zeroed.store(0, Ordering::Release);
                registered.base.store(base, Ordering::Release);
                return Some(Self { base, len, entry, random, restoring: Mutex::new(()) });
            }
        }
        // SAFETY: the mapping made above, not published anywhere.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
        None
    }

    /// Replaces the contents of `into` by a copy of `len` bytes at `offset` (its capacity
    /// reused); false when the range lies outside the mapping or a page of it could not be
    /// read (then read with `pread`, which reports why).
    pub(crate) fn read_into(&self, file: BorrowedFd<'_>, offset: u64, len: usize, into: &mut Vec<u8>) -> bool {
        let Some(start) = usize::try_from(offset).ok() else { return false };
        if start.checked_add(len).is_none_or(|end| end > self.len) {
            return false;
        }
        let registered = &REGISTRY[self.entry];
        if registered.zeroed.load(Ordering::Acquire) > 0 {
            self.restore(file);
            return false;
        }
        let faults = registered.faults.load(Ordering::Acquire);
        into.clear();
        into.reserve(len);
        // SAFETY: the source lies inside the live mapping (checked above), which stays mapped
        // while `self` lives; the destination is `len` bytes of reserved capacity. A page that
        // faults is replaced by zeros by the handler, so the copy always completes.
        unsafe {
            std::ptr::copy_nonoverlapping((self.base + start) as *const u8, into.as_mut_ptr(), len);
            into.set_len(len);
        }
        if registered.faults.load(Ordering::Acquire) != faults {
            into.clear();
            self.restore(file);
            return false;
        }
        true
    }

    /// Unmaps the pages of `len` bytes at `offset` from this process (they map again, from
    /// the page cache or the device, when read), so that the page cache may drop them.
    pub(crate) fn forget(&self, offset: u64, len: u64) {
        let page = PAGE.load(Ordering::Acquire) as u64;
        let start = offset.div_ceil(page) * page;
        let end = (offset.saturating_add(len) / page * page).min(self.len as u64);
        if start >= end {
            return;
        }
        // SAFETY: whole pages inside our mapping; no reference into it exists (reads copy
        // through raw pointers), and a later read maps the pages again.
        unsafe {
            libc::madvise(
                (self.base + start as usize) as *mut libc::c_void,
                (end - start) as usize,
                libc::MADV_DONTNEED,
            )
        };
    }

    /// Maps the device back over the pages of zeros the handler put in.
    fn restore(&self, file: BorrowedFd<'_>) {
        let _restoring = self.restoring.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let registered = &REGISTRY[self.entry];
        let pending = registered.zeroed.load(Ordering::Acquire);
        if pending == 0 {
            return;
        }
        // SAFETY: replaces our own mapping in place with the same file and protection; no
        // reference into it exists (reads copy through raw pointers).
        let mapped = unsafe {
            libc::mmap(
                self.base as *mut libc::c_void,
                self.len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            )
        };
        if mapped != libc::MAP_FAILED {
            if self.random {
                advise_random(self.base, self.len);
            }
            registered.zeroed.fetch_sub(pending, Ordering::AcqRel);
        }
    }
}

/// Tells the kernel that the pages of a mapping are read at random: a fault reads the page
/// it needs, not a window around it (only a hint: a kernel that refuses it reads around).
fn advise_random(base: usize, len: usize) {
    // SAFETY: a range of our own live mapping; MADV_RANDOM changes no contents.
    unsafe { libc::madvise(base as *mut libc::c_void, len, libc::MADV_RANDOM) };
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let registered = &REGISTRY[self.entry];
        // Unpublished before it is unmapped: the handler never treats the range as ours
        // once another mapping may take it.
        registered.base.store(usize::MAX, Ordering::Release);
        // SAFETY: our mapping; no reader is left (`&mut self`).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        registered.base.store(0, Ordering::Release);
    }
}

/// One page of a block device, mapped shared and never read: `msync(MS_SYNC)` over it is the
/// system call that fsyncs a byte range of a file (`vfs_fsync_range`; `fdatasync` takes no
/// range). On a block device that writes back the page's range and then flushes the device's
/// write cache, leaving the rest of the device's dirty pages where they are. Never read, the
/// page never faults, so the SIGBUS handler has nothing to do with it.
pub(crate) struct CacheFlush {
    base: usize,
    len: usize,
}

impl std::fmt::Debug for CacheFlush {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("CacheFlush").field("len", &self.len).finish()
    }
}

impl CacheFlush {
    /// Maps the first page of `file`; `None` when it cannot be mapped.
    pub(crate) fn new(file: BorrowedFd<'_>) -> Option<Self> {
        // SAFETY: sysconf has no memory effects.
        let len = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|&len| len > 0)?;
        // SAFETY: a fresh mapping at an address the kernel picks, of a file we hold open;
        // nothing reads or writes through it.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0) };
        if base == libc::MAP_FAILED {
            return None;
        }
        Some(Self { base: base as usize, len })
    }

    /// Writes back the first page's range if it is dirty and flushes the device's cache.
    pub(crate) fn flush(&self) -> std::io::Result<()> {
        // SAFETY: our own live mapping, whole; msync does not touch memory.
        if unsafe { libc::msync(self.base as *mut libc::c_void, self.len, libc::MS_SYNC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for CacheFlush {
    fn drop(&mut self) {
        // SAFETY: our mapping, which nothing refers to.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// Installs the SIGBUS handler once, keeping the disposition it replaces.
fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf and sigaction with valid arguments; the handler only loads and
        // updates atomics and calls mmap and sigaction.
        let previous = unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE.store(page as usize, Ordering::Release);
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = on_sigbus;
            action.sa_sigaction = handler as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            (libc::sigaction(libc::SIGBUS, &action, &mut previous) == 0).then_some(previous)
        };
        let _ = PREVIOUS.set(previous);
    });
}

extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let address = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Acquire);
    for registered in &REGISTRY {
        let base = registered.base.load(Ordering::Acquire);
        if base == 0 || base == usize::MAX {
            continue;
        }
        let len = registered.len.load(Ordering::Acquire);
        if address < base || address - base >= len {
            continue;
        }
        let start = address & !(page - 1);
        // SAFETY: replaces one page of a registered mapping (which lives until it is
        // unregistered) with private zeros; the faulting copy then reads zeros.
        let zeros = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if zeros != libc::MAP_FAILED {
            registered.zeroed.fetch_add(1, Ordering::AcqRel);
            registered.faults.fetch_add(1, Ordering::AcqRel);
            return;
        }
    }
    // Not a fault of ours: what would have happened without this handler.
    match PREVIOUS.get().copied().flatten() {
        Some(previous)
            if previous.sa_flags & libc::SA_SIGINFO != 0
                && previous.sa_sigaction != libc::SIG_DFL
                && previous.sa_sigaction != libc::SIG_IGN =>
        {
            // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this
            // signature; it gets the arguments the kernel gave us.
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(previous.sa_sigaction) };
            handler(signal, info, context);
        }
        Some(previous) if previous.sa_sigaction != libc::SIG_DFL && previous.sa_sigaction != libc::SIG_IGN => {
            // SAFETY: a plain handler takes the signal number only.
            let handler: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(previous.sa_sigaction) };
            handler(signal);
        }
        _ => {
            // The default action: returning re-runs the faulting access, which then ends
            // the process as it would have.
            // SAFETY: sigaction with a zeroed (SIG_DFL) action.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, std::ptr::null_mut());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::block::Access;
    use crate::os_device::{Device, OpenMode};

    fn image(name: &str, len: usize) -> (std::path::PathBuf, Vec<u8>) {
        let path = std::env::temp_dir().join(format!("lds-mapped-{}-{name}.img", std::process::id()));
        let bytes: Vec<u8> = (0..len).map(|at| (at * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write the image");
        (path, bytes)
    }

    /// Writes `path` back and drops it from the page cache.
    fn drop_from_cache(path: &std::path::Path) {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path).expect("open");
        file.sync_all().expect("sync");
        // SAFETY: an advice on a descriptor we hold; no memory effects.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }

    #[test]
    fn a_point_read_brings_its_pages_and_no_read_ahead_window_into_memory() {
        let (path, bytes) = image("point", 4 << 20);
        drop_from_cache(&path);
        if resident_pages(&path, 4 << 20) > 0 {
            // A file system that keeps the pages (none here): nothing to measure.
            return;
        }
        let device = Device::open(&path, OpenMode::ReadOnly).expect("open");
        assert_eq!(
            device.read_vec_mapped(2 << 20, 2048, Access::Point).expect("read"),
            bytes[2 << 20..(2 << 20) + 2048]
        );
        let point = resident_pages(&path, 4 << 20);
        // One page; a default mapping reads a window around it (16 pages or more).
        assert!((1..=2).contains(&point), "a point read brought {point} pages into the page cache");
        assert_eq!(device.read_vec_mapped(1 << 20, 2048, Access::Run).expect("read"), bytes[1 << 20..(1 << 20) + 2048]);
        assert!(resident_pages(&path, 4 << 20) > point + 2, "a run's read brought no read-ahead");
        drop(device);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn mapped_reads_return_what_the_device_holds_and_see_later_writes() {
        let (path, bytes) = image("writes", 256 * 1024);
        let device = Device::open(&path, OpenMode::ReadWrite).expect("open");
        assert_eq!(device.read_vec_mapped(4096, 8192, Access::Point).expect("read"), bytes[4096..12288]);
        assert_eq!(device.read_vec_mapped(100, 5000, Access::Point).expect("read"), bytes[100..5100]);
        // Into a buffer that held more: its contents are replaced, not appended to.
        let mut reused = vec![0xEE; 20_000];
        device.read_mapped(300, 700, &mut reused, Access::Run).expect("read");
        assert_eq!(reused, bytes[300..1000]);
        // Written through the file after the mapping was made: the mapping shares the page
        // cache, so the next read sees the new bytes.
        device.write_at(8192, &[0xAB; 4096]).expect("write");
        let read = device.read_vec_mapped(4096, 8192, Access::Point).expect("read");
        assert_eq!(read[..4096], bytes[4096..8192]);
        assert!(read[4096..].iter().all(|&byte| byte == 0xAB));
        // Past the end: the error `read_vec` gives, not a crash.
        let error = device.read_vec_mapped(256 * 1024 - 10, 20, Access::Point).expect_err("past the end");
        assert!(error.to_string().contains(&path.display().to_string()), "{error}");
        drop(device);
        std::fs::remove_file(&path).expect("remove");
    }

    /// Pages of `path`'s first `len` bytes in the page cache.
    fn resident_pages(path: &std::path::Path, len: usize) -> usize {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(path).expect("open");
        let page = super::PAGE.load(std::sync::atomic::Ordering::Acquire);
        let mut vector = vec![0u8; len.div_ceil(page)];
        // SAFETY: a fresh read-only mapping of an open file, unmapped before returning; the
        // vector has a byte per page of it.
        unsafe {
            let base = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), 0);
            assert_ne!(base, libc::MAP_FAILED);
            assert_eq!(libc::mincore(base, len, vector.as_mut_ptr()), 0);
            libc::munmap(base, len);
        }
        vector.iter().filter(|&&flags| flags & 1 == 1).count()
    }

    #[test]
    fn dropping_cached_pages_frees_clean_ones_and_loses_no_write() {
        let (path, bytes) = image("dropped", 1024 * 1024);
        let device = Device::open(&path, OpenMode::ReadWrite).expect("open");
        assert_eq!(device.read_vec_mapped(0, 1024 * 1024, Access::Point).expect("read"), bytes);
        device.flush().expect("flush");
        let before = resident_pages(&path, 1024 * 1024);
        assert!(before > 0, "nothing cached after reading the whole image");
        // Clean pages leave the page cache and the mapping (whole folios only: the page
        // cache may hold the image in folios larger than a page).
        device.drop_cached(0, 1024 * 1024);
        let after = resident_pages(&path, 1024 * 1024);
        assert_eq!(after, 0, "{before} pages cached before");
        assert_eq!(
            device.read_vec_mapped(512 * 1024, 8192, Access::Point).expect("read"),
            bytes[512 * 1024..520 * 1024]
        );
        // A write not flushed yet stays, whatever the hint.
        device.write_at(700 * 1024, &[0xCD; 8192]).expect("write");
        device.drop_cached(0, 1024 * 1024);
        assert!(device
            .read_vec_mapped(700 * 1024, 8192, Access::Point)
            .expect("read")
            .iter()
            .all(|&byte| byte == 0xCD));
        drop(device);
        let on_disk = std::fs::read(&path).expect("read the image");
        assert!(on_disk[700 * 1024..708 * 1024].iter().all(|&byte| byte == 0xCD));
        std::fs::remove_file(&path).expect("remove");
    }

    #[test]
    fn a_mapped_page_that_cannot_be_read_is_an_error_and_the_mapping_recovers() {
        let (path, bytes) = image("shrunk", 1024 * 1024);
        let device = Device::open(&path, OpenMode::ReadOnly).expect("open");
        assert_eq!(
            device.read_vec_mapped(512 * 1024, 4096, Access::Point).expect("read"),
            bytes[512 * 1024..516 * 1024]
        );
        // The image shrinks under the mapping: its pages past the new end raise SIGBUS when
        // touched, which must come back as a read error naming the device and offset.
        std::fs::OpenOptions::new().write(true).open(&path).expect("reopen").set_len(256 * 1024).expect("shrink");
        for _ in 0..3 {
            let error =
                device.read_vec_mapped(512 * 1024, 4096, Access::Point).expect_err("a page past the file's end");
            let text = error.to_string();
            assert!(text.contains(&path.display().to_string()) && text.contains("524288"), "{text}");
        }
        // The pages still in the file read as before, through the mapping put back.
        assert_eq!(device.read_vec_mapped(0, 8192, Access::Point).expect("read"), bytes[..8192]);
        assert_eq!(
            device.read_vec_mapped(200 * 1024, 4096, Access::Point).expect("read"),
            bytes[200 * 1024..204 * 1024]
        );
        // Growing the file back: the mapping reads its new pages again.
        std::fs::OpenOptions::new().write(true).open(&path).expect("reopen").set_len(1024 * 1024).expect("grow");
        assert!(device.read_vec_mapped(512 * 1024, 4096, Access::Point).expect("read").iter().all(|&byte| byte == 0));
        drop(device);
        std::fs::remove_file(&path).expect("remove");
    }
}
