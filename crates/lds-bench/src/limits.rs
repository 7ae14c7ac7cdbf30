//! The device's own limits, measured on the same file or device the engines use: sequential
//! O_DIRECT bandwidth in slot-sized writes, and the latency of one sector-sized direct write
//! plus flush (overwriting one sector, and appending).

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Instant;

use crate::error::BenchError;
use crate::hist::Histogram;

/// What the device can do.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceLimits {
    /// The file or device measured.
    pub path: String,
    /// Size of each sequential write.
    pub write_bytes: u64,
    /// Bytes written sequentially (then one flush).
    pub sequential_bytes: u64,
    /// Sequential O_DIRECT bandwidth including the final flush, MB/s (10^6).
    pub sequential_mb_per_sec: f64,
    /// Sector size of the small writes.
    pub sector_bytes: u64,
    /// One sector overwritten in place, then flushed: latency quantiles in microseconds.
    pub overwrite_flush_p50_us: f64,
    /// 99th percentile.
    pub overwrite_flush_p99_us: f64,
    /// One sector appended after the previous one, then flushed: p50 in microseconds.
    pub append_flush_p50_us: f64,
    /// 99th percentile.
    pub append_flush_p99_us: f64,
    /// Samples of each latency.
    pub samples: usize,
}

struct Aligned {
    buffer: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Self {
        let mut buffer = vec![0u8; len + 4096];
        let start = buffer.as_ptr().align_offset(4096);
        for (index, byte) in buffer.iter_mut().enumerate() {
            *byte = (index * 131 % 251) as u8;
        }
        Self { buffer, start, len }
    }

    fn bytes(&self, len: usize) -> &[u8] {
        &self.buffer[self.start..self.start + len.min(self.len)]
    }
}

fn open_direct(path: &Path) -> Result<File, BenchError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_CLOEXEC)
        .open(path)
        .map_err(BenchError::file(path, "cannot open with O_DIRECT"))
}

/// Measures the limits on `path` (an existing file or block device of at least
/// `offset + sequential_bytes` bytes). It overwrites that range: run it before formatting.
pub fn measure(
    path: &Path,
    offset: u64,
    sequential_bytes: u64,
    write_bytes: u64,
    sector_bytes: u64,
    samples: usize,
) -> Result<DeviceLimits, BenchError> {
    let file = open_direct(path)?;
    let at = |what: &'static str, offset: u64, source: std::io::Error| BenchError::At {
        path: path.to_path_buf(),
        what,
        offset,
        source,
    };
    let buffer = Aligned::new(write_bytes.max(sector_bytes) as usize);
    // Warm up once, so that the first write's allocation is not measured.
    file.write_all_at(buffer.bytes(write_bytes as usize), offset).map_err(|e| at("write", offset, e))?;
    file.sync_data().map_err(|e| at("flush", offset, e))?;

    let started = Instant::now();
    let mut position = offset;
    while position < offset + sequential_bytes {
        file.write_all_at(buffer.bytes(write_bytes as usize), position).map_err(|e| at("write", position, e))?;
        position += write_bytes;
    }
    file.sync_data().map_err(|e| at("flush", position, e))?;
    let sequential_mb_per_sec = (position - offset) as f64 / started.elapsed().as_secs_f64() / 1e6;

    let sector = buffer.bytes(sector_bytes as usize);
    let mut overwrite = Histogram::default();
    for _ in 0..samples {
        let started = Instant::now();
        file.write_all_at(sector, offset).map_err(|e| at("write", offset, e))?;
        file.sync_data().map_err(|e| at("flush", offset, e))?;
        overwrite.record(started.elapsed().as_nanos() as u64);
    }
    let mut append = Histogram::default();
    for index in 0..samples as u64 {
        let position = offset + index * sector_bytes;
        let started = Instant::now();
        file.write_all_at(sector, position).map_err(|e| at("write", position, e))?;
        file.sync_data().map_err(|e| at("flush", position, e))?;
        append.record(started.elapsed().as_nanos() as u64);
    }
    Ok(DeviceLimits {
        path: path.display().to_string(),
        write_bytes,
        sequential_bytes: position - offset,
        sequential_mb_per_sec,
        sector_bytes,
        overwrite_flush_p50_us: overwrite.quantile(0.5) as f64 / 1e3,
        overwrite_flush_p99_us: overwrite.quantile(0.99) as f64 / 1e3,
        append_flush_p50_us: append.quantile(0.5) as f64 / 1e3,
        append_flush_p99_us: append.quantile(0.99) as f64 / 1e3,
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_an_image_file() {
        let dir = std::env::temp_dir().join(format!("lds-limits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("limits.img");
        let file = File::create(&path).expect("create");
        file.set_len(8 << 20).expect("size");
        drop(file);
        let result = measure(&path, 0, 4 << 20, 1 << 20, 4096, 20);
        std::fs::remove_dir_all(&dir).expect("cleanup");
        match result {
            Ok(limits) => {
                assert_eq!(limits.sequential_bytes, 4 << 20);
                assert!(limits.sequential_mb_per_sec > 0.0);
                assert!(
                    limits.overwrite_flush_p50_us > 0.0 && limits.append_flush_p99_us >= limits.append_flush_p50_us
                );
            }
            // tmpfs has no O_DIRECT: then the error must name the file.
            Err(error) => {
                assert!(error.to_string().contains("limits.img") && error.to_string().contains("O_DIRECT"), "{error}")
            }
        }
    }
}
