//! What a run costs: CPU time of the process (every thread), its peak memory, and what the
//! block device under the store saw (bytes written, flush requests).

use std::path::{Path, PathBuf};

use crate::error::BenchError;

/// User plus system CPU seconds of this process so far, all threads.
pub fn cpu_seconds() -> f64 {
    #[expect(unsafe_code, reason = "getrusage fills a plain struct we own")]
    // SAFETY: `usage` is a valid, writable rusage; getrusage has no other effect.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The value of `field` (in kB) of /proc/self/status, in bytes, if the kernel tells.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.strip_prefix(field).is_some_and(|rest| rest.starts_with(':')))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Peak resident memory of this process in bytes (VmHWM), if the kernel tells.
pub fn peak_memory() -> Option<u64> {
    status_bytes("VmHWM")
}

/// Resident anonymous memory of this process in bytes (RssAnon): its heap and stacks, not the
/// file pages it maps (a device or table files read through a mapping are the page cache's,
/// which a reader through `pread` uses as much without counting it).
pub fn anon_memory() -> Option<u64> {
    status_bytes("RssAnon")
}

/// The peak of `anon_memory` since the last `reset`, sampled every 10 ms by a thread of its
/// own (the kernel keeps the peak of the whole resident set, VmHWM, not of its anonymous part).
#[derive(Debug)]
pub struct AnonPeak {
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AnonPeak {
    /// Starts sampling; `None` where the kernel does not report RssAnon.
    pub fn start() -> Option<Self> {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let peak = Arc::new(AtomicU64::new(anon_memory()?));
        let stop = Arc::new(AtomicBool::new(false));
        let (sampled, stopped) = (Arc::clone(&peak), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("anon-peak".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    if let Some(now) = anon_memory() {
                        sampled.fetch_max(now, Ordering::Relaxed);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            })
            .ok()?;
        Some(Self { peak, stop, thread: Some(thread) })
    }

    /// Starts a new peak from the current value.
    pub fn reset(&self) {
        self.peak.store(anon_memory().unwrap_or(0), std::sync::atomic::Ordering::Relaxed);
    }

    /// The peak since the last reset, the current value included.
    pub fn peak(&self) -> u64 {
        let peak = self.peak.load(std::sync::atomic::Ordering::Relaxed);
        peak.max(anon_memory().unwrap_or(0))
    }
}

impl Drop for AnonPeak {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Counters of one block device from `/sys/.../stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockCounters {
    /// Bytes written.
    pub bytes_written: u64,
    /// Write requests.
    pub writes: u64,
    /// Flush requests (kernels from 5.5 report them).
    pub flushes: u64,
}

/// The `stat` file of a block device.
#[derive(Debug, Clone)]
pub struct BlockStat {
    /// The device's name, as in /sys/block.
    pub name: String,
    path: PathBuf,
}

impl BlockStat {
    /// The stat file of the device named `name` (as in /sys/block/NAME, e.g. loop3).
    pub fn named(name: &str) -> Result<Self, BenchError> {
        let name = name.trim_start_matches("/dev/");
        let path = PathBuf::from(format!("/sys/block/{name}/stat"));
        if !path.exists() {
            return Err(BenchError::NoBlockStat { path });
        }
        Ok(Self { name: name.to_owned(), path })
    }

    /// The device that holds `path`: the device itself for a block device node, else the
    /// file system's device. None when the kernel has no statistics for it (btrfs reports
    /// an anonymous device number; name the device instead).
    pub fn for_path(path: &Path) -> Option<Self> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let metadata = std::fs::metadata(path).ok()?;
        let device = if metadata.file_type().is_block_device() { metadata.rdev() } else { metadata.dev() };
        let (major, minor) = (libc::major(device), libc::minor(device));
        let link = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
        let target = std::fs::canonicalize(&link).ok()?;
        let name = target.file_name()?.to_string_lossy().into_owned();
        let path = link.join("stat");
        path.exists().then_some(Self { name, path })
    }

    /// The counters now.
    pub fn read(&self) -> Result<BlockCounters, BenchError> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|source| BenchError::BlockStat { path: self.path.clone(), source })?;
        let fields: Vec<u64> = text.split_whitespace().filter_map(|field| field.parse().ok()).collect();
        if fields.len() < 11 {
            return Err(BenchError::BlockStatFields { path: self.path.clone(), found: fields.len() });
        }
        Ok(BlockCounters {
            writes: fields[4],
            bytes_written: fields[6] * 512,
            flushes: fields.get(15).copied().unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_advances_with_work() {
        let before = cpu_seconds();
        let mut x = 0u64;
        for i in 0..50_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_seconds() > before);
    }

    #[test]
    fn peak_memory_grows_with_an_allocation() {
        let before = peak_memory().expect("VmHWM");
        let block = vec![1u8; 64 << 20];
        std::hint::black_box(&block);
        assert!(peak_memory().expect("VmHWM") >= before.max(64 << 20));
    }

    #[test]
    fn the_anonymous_peak_sees_an_allocation_freed_before_it_is_read() {
        let Some(sampler) = AnonPeak::start() else { return };
        sampler.reset();
        let before = sampler.peak();
        let block = vec![1u8; 64 << 20];
        std::hint::black_box(&block);
        // Several sampling periods while it is resident, then gone.
        std::thread::sleep(std::time::Duration::from_millis(60));
        drop(block);
        // Freed (a mapping of its own, unmapped at once): only the sampled peak holds it.
        assert!(sampler.peak() >= before + (60 << 20), "peak {} from {before}", sampler.peak());
    }

    #[test]
    fn unknown_device_is_an_error_naming_it() {
        let error = BlockStat::named("no-such-dev0").expect_err("no device");
        assert!(error.to_string().contains("no-such-dev0"), "{error}");
    }
}
