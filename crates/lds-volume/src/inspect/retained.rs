//! The backup log a version keeps for its log chunks (SPEC.md §8.9, format 1.6): from the
//! retention start (the oldest log start of its log chunks, or the backup start) to the backup
//! start. Recovery does not replay these objects; log references read them, and writers do
//! not overwrite them. (The engine's `retention` is another thing: the snapshot versions it
//! keeps.)

use lds_format::logref::LogPosition;
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
        let start = version.retention_start();
        let backup_start = LogPosition { offset: version.ofs_backup_start, lsn: version.lsn_backup_start };
        Self {
            start,
            backup_start,
            bytes: ring_distance(start, backup_start, len_backup_log),
            log_chunks: version.chunks.values().filter(|chunk| chunk.is_log_chunk()).count(),
        }
    }

    /// True when the backup log object with `lsn` lies in the region.
    pub fn holds(&self, lsn: u64) -> bool {
        self.start.lsn <= lsn && lsn < self.backup_start.lsn
    }
}

/// Bytes from `from` to `to` along a ring of `len_area` bytes (0 when `to` is not later), as the
/// engine counts the retained bytes of its backup log. Saturating: a damaged version may name
/// an offset past the area.
fn ring_distance(from: LogPosition, to: LogPosition, len_area: u64) -> u64 {
    if to.lsn <= from.lsn {
        0
    } else if to.offset > from.offset {
        to.offset - from.offset
    } else {
        len_area.saturating_sub(from.offset).saturating_add(to.offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: u64, lsn: u64) -> LogPosition {
        LogPosition { offset, lsn }
    }

    #[test]
    fn the_kept_bytes_run_along_the_ring_and_saturate_past_its_end() {
        // Forward, across the end of the ring, nothing when the backup start is not later.
        assert_eq!(ring_distance(at(100, 1), at(400, 2), 1000), 300);
        assert_eq!(ring_distance(at(900, 1), at(100, 2), 1000), 200);
        assert_eq!(ring_distance(at(400, 2), at(100, 2), 1000), 0);
        // A damaged version naming an offset past the area: no overflow, no wrap below zero.
        assert_eq!(ring_distance(at(2000, 1), at(100, 2), 1000), 100);
        assert_eq!(ring_distance(at(u64::MAX, 1), at(u64::MAX, 2), 1000), u64::MAX);
    }

    #[test]
    fn the_kept_region_holds_the_lsns_from_its_start_to_the_backup_start() {
        let kept = RetainedLog { start: at(0, 5), backup_start: at(64, 9), bytes: 64, log_chunks: 1 };
        assert!(!kept.holds(4));
        assert!(kept.holds(5) && kept.holds(8));
        assert!(!kept.holds(9), "the backup start itself is live, not kept");
    }
}
