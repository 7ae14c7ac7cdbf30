//! The backup log a version keeps for its log chunks (SPEC.md §8.9, format 1.6): from the
//! retention start (the oldest log start of its log chunks, or the backup start) to the backup
//! start. Recovery does not replay these objects; log references read them, and writers do
//! not overwrite them. (The engine's `retention` is another thing: the snapshot versions it
//! keeps.)

use lds_format::log::LogPosition;
use lds_format::version::Version;

/// The backup log region a version keeps for its log chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetainedLog {
    /// The retention start.
    pub start: LogPosition,
    /// The backup start.
    pub backup_start: LogPosition,
    /// Bytes of the ring from the retention start to the backup start.
    pub bytes: u64,
    /// The version's log chunks.
    pub log_chunks: usize,
}

impl RetainedLog {
    /// The region `version` keeps, in a backup log area of `len_backup_log` bytes.
    pub fn of(version: &Version, len_backup_log: u64) -> Self {
        Self {
            start: version.retention_start(),
            backup_start: version.backup_start(),
            bytes: version.retained_bytes(len_backup_log),
            log_chunks: version.chunks.values().filter(|chunk| chunk.is_log_chunk()).count(),
        }
    }

    /// True when the backup log object with `lsn` lies in the region.
    pub fn holds(&self, lsn: u64) -> bool {
        self.start.lsn <= lsn && lsn < self.backup_start.lsn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: u64, lsn: u64) -> LogPosition {
        LogPosition { offset, lsn }
    }

    #[test]
    fn the_kept_region_holds_the_lsns_from_its_start_to_the_backup_start() {
        let kept = RetainedLog { start: at(0, 5), backup_start: at(64, 9), bytes: 64, log_chunks: 1 };
        assert!(!kept.holds(4));
        assert!(kept.holds(5) && kept.holds(8));
        assert!(!kept.holds(9), "the backup start itself is live, not kept");
    }
}
